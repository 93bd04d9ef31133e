//! Typed views of a running host for surfaces (`GET /api/info`,
//! `GET /api/plugins`, the web UI's plugin panel): what is loaded, from
//! where, with which grants, and the MCP servers' state.

use std::path::PathBuf;

use crate::mcp::ServerStatus;
use serde::Serialize;
use wharf_runtime::PluginVersion;
use wharf_runtime::component::Kind;
use wharf_runtime::grants::{EffectiveGrant, GrantRequest};

use crate::Harness;

/// One loaded component version.
#[derive(Debug, Clone, Serialize)]
pub struct PluginView {
    /// Row id.
    pub id: String,
    /// The name the component reports.
    pub name: String,
    /// Its version.
    pub version: String,
    /// Its description.
    pub description: String,
    /// The component file.
    pub path: PathBuf,
    /// SHA-256 of the file.
    pub digest: String,
    /// File size in bytes.
    pub size: u64,
    /// The contract it was built against (`wharf:plugin@0.1.0`).
    pub wit: String,
    /// What it provides (tool, llm, policy, …).
    pub kinds: Vec<Kind>,
    /// The grants it asked for.
    pub requested: GrantRequest,
    /// The grants in force (asked ∩ granted).
    pub effective: EffectiveGrant,
    /// Its tools.
    pub tools: Vec<ToolView>,
    /// Load time, milliseconds.
    pub load_ms: f64,
    /// How the compile cache served it (`hit`, `miss`, …).
    pub cache: String,
    /// Its row is a dev build (`dev = true`, served by `wharf plugin dev`).
    pub dev: bool,
}

/// A tool of a loaded component.
#[derive(Debug, Clone, Serialize)]
pub struct ToolView {
    /// Its name as the model sees it.
    pub name: String,
    /// `read-only` or `mutating`.
    pub mode: wharf_core::plugin::ToolMode,
    /// What it does.
    pub description: String,
}

impl From<&PluginVersion> for PluginView {
    fn from(v: &PluginVersion) -> Self {
        Self {
            id: v.id.clone(),
            name: v.info.name.clone(),
            version: v.info.version.clone(),
            description: v.info.description.clone(),
            path: v.path.clone(),
            digest: v.digest.clone(),
            size: v.size,
            wit: format!("wharf:plugin@{}", v.wit_version),
            kinds: v.kinds.clone(),
            requested: v.info.requests.clone(),
            effective: (*v.effective).clone(),
            tools: v
                .tools
                .iter()
                .map(|t| ToolView { name: t.name.clone(), mode: t.mode, description: t.description.clone() })
                .collect(),
            load_ms: (v.load_time.as_secs_f64() * 1000.0).round(),
            cache: format!("{:?}", v.cache).to_lowercase(),
            dev: v.is_dev(),
        }
    }
}

/// A tool an MCP server provides.
#[derive(Debug, Clone, Serialize)]
pub struct McpToolView {
    /// `mcp__SERVER__TOOL`.
    pub name: String,
    /// `mcp:SERVER`.
    pub plugin: String,
    /// Digest of the server's tool set.
    pub digest: String,
}

/// Everything that provides tools, and the registry generation it was read at.
#[derive(Debug, Clone, Serialize)]
pub struct PluginsView {
    /// Loaded components, by row id.
    pub plugins: Vec<PluginView>,
    /// MCP servers' state.
    pub mcp: Vec<ServerStatus>,
    /// MCP servers' tools.
    pub mcp_tools: Vec<McpToolView>,
    /// The registry generation.
    pub generation: u64,
}

/// What the host is.
#[derive(Debug, Clone, Serialize)]
pub struct HostInfo {
    /// Wharf's version.
    pub version: &'static str,
    /// The profile it was started with.
    pub profile: String,
    /// The workspace.
    pub workspace: PathBuf,
    /// Where sessions are stored (a directory, or a database without its credentials).
    pub session_dir: String,
    /// MCP servers' state.
    pub mcp: Vec<ServerStatus>,
}

impl Harness {
    /// The MCP servers' state (none configured: empty).
    pub fn mcp_status(&self) -> Vec<ServerStatus> {
        self.mcp.as_ref().map(|m| m.status()).unwrap_or_default()
    }

    /// What this host is.
    pub fn info(&self) -> HostInfo {
        HostInfo {
            version: env!("CARGO_PKG_VERSION"),
            profile: self.options.profile.clone(),
            workspace: self.workspace.clone(),
            session_dir: self.store.describe(),
            mcp: self.mcp_status(),
        }
    }

    /// The loaded components and MCP tools.
    pub fn plugins_view(&self) -> PluginsView {
        let versions = self.plugins.versions();
        let snap = self.plugins.registry().snapshot();
        let mcp_tools = snap
            .tools
            .values()
            .filter(|t| crate::mcp::is_mcp_plugin(&t.plugin().id))
            .map(|t| McpToolView {
                name: t.spec().name.clone(),
                plugin: t.plugin().id.clone(),
                digest: t.plugin().digest.clone(),
            })
            .collect();
        PluginsView {
            plugins: versions
                .values()
                .map(|v| {
                    let mut view = PluginView::from(v.as_ref());
                    view.dev |= self.config.plugins.iter().any(|r| r.id == v.id && r.dev);
                    view
                })
                .collect(),
            mcp: self.mcp_status(),
            mcp_tools,
            generation: snap.generation,
        }
    }
}
