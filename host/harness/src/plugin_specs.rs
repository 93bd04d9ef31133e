//! Config rows → the runtime's plugin specs, the precedence of rows for a
//! tool name, and config keys changed while the host runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use wharf_config::Config;
use wharf_runtime::PluginSpec;
use wharf_runtime::grants::{DirGrant, Grant};

/// A config row that cannot become a runtime spec: a directory grant that
/// does not parse, or an OCI `source` that cannot be resolved, pinned or
/// verified.
#[derive(Debug, Clone, thiserror::Error)]
#[error("plugin `{row}`: {reason}")]
pub struct RowError {
    /// The row's id.
    pub row: String,
    /// What is wrong, in one line.
    pub reason: String,
}

/// Turns config rows into runtime specs.
pub fn specs(config: &Config) -> Result<Vec<PluginSpec>, RowError> {
    let mut out = Vec::new();
    for row in &config.plugins {
        let dirs = row
            .grant
            .dirs
            .iter()
            .filter_map(|d| match d.strip_suffix('?') {
                // Optional grant (`PATH:ro?`): skipped when the directory is missing.
                Some(spec) => {
                    let path = spec.rsplit_once(':').map_or(spec, |(p, _)| p);
                    std::path::Path::new(path).is_dir().then(|| DirGrant::parse(spec))
                }
                None => Some(DirGrant::parse(d)),
            })
            .map(|g| g.map_err(|e| RowError { row: row.id.clone(), reason: e.to_string() }))
            .collect::<Result<Vec<_>, _>>()?;
        out.push(PluginSpec {
            id: row.id.clone(),
            // An OCI row: the pinned (and verified) file in the local store.
            path: match &row.source {
                #[cfg(feature = "oci")]
                Some(_) => crate::oci::resolve_row(row, config)?,
                #[cfg(not(feature = "oci"))]
                Some(source) => {
                    return Err(RowError {
                        row: row.id.clone(),
                        reason: format!(
                            "source = \"{source}\": this wharf was built without OCI distribution ({})",
                            crate::FULL_BUILD
                        ),
                    });
                }
                None => row.path.clone(),
            },
            config: row.config.clone(),
            grant: Grant {
                dirs,
                hosts: row.grant.hosts.clone(),
                env: row.grant.env.clone(),
                process: row.grant.process,
                memory_mb: row.grant.memory_mb,
                timeout_ms: row.grant.timeout_ms,
                yield_ms: row.grant.yield_ms,
                durable: row.grant.durable,
                output_limit_bytes: row.grant.output_limit_bytes,
                sandbox_off: row.grant.sandbox == wharf_config::Sandbox::Off,
                private_network: row.grant.private_network,
                model: row.grant.model,
                agents: row.grant.agents,
                questions: row.grant.questions,
                tools: match &row.grant.tools {
                    wharf_config::ToolsConfig::All(true) => wharf_runtime::grants::ToolsGrant::All,
                    wharf_config::ToolsConfig::All(false) => wharf_runtime::grants::ToolsGrant::None,
                    wharf_config::ToolsConfig::Only(n) => wharf_runtime::grants::ToolsGrant::Only(n.clone()),
                },
                // A dev row: the source beside the dev component (`NAME.src`).
                dev_source: row.dev.then(|| row.path.with_extension("src")),
            },
            warm: row.warm,
            on_invalid_config: match row.on_invalid_config {
                wharf_config::OnInvalidConfig::Deny => wharf_runtime::OnInvalidConfig::Deny,
                wharf_config::OnInvalidConfig::Keep => wharf_runtime::OnInvalidConfig::Keep,
            },
        });
    }
    Ok(out)
}

/// Which row wins a tool name two rows offer: the row defined in the later
/// config layer (a project's `.wharf/config.toml` row over a shipped
/// profile's), see [`Config::row_layer`]; rows of one layer keep profile
/// order.
pub fn tool_precedence(config: &Config) -> BTreeMap<String, i32> {
    config
        .plugins
        .iter()
        .map(|r| (r.id.clone(), config.row_layer(&r.id).map_or(0, |l| i32::try_from(l).unwrap_or(i32::MAX))))
        .collect()
}

/// One tool name two rows offer, for people: which row serves it and why
/// (as [`tool_precedence`] decides), where each row is defined, and how to
/// have the other row's tool served instead. `holder` keeps the name;
/// `refused`'s tool of that name is not offered.
pub fn shadowing_text(config: &Config, tool: &str, holder: &str, refused: &str) -> String {
    let origin =
        |id: &str| config.origin(&format!("plugin.{id}.id")).map(|l| l.short()).unwrap_or_else(|| "?".to_string());
    let file = |id: &str| config.origin(&format!("plugin.{id}.id")).map(|l| l.source.clone());
    let later = config.row_layer(holder) > config.row_layer(refused);
    let (why, how) = if later {
        (
            "a row of a later config layer wins",
            format!(
                "define row `{refused}` in {} (above row `{holder}`) or a later layer",
                file(holder).map_or_else(|| "the same layer as it".to_string(), |f| format!("`{f}`"))
            ),
        )
    } else {
        (
            "the earlier row of one layer wins",
            format!(
                "move row `{refused}` above row `{holder}`, or define it in a later config layer (the project's \
                 `.wharf/config.toml` is read after the profile and the user's config)"
            ),
        )
    };
    format!(
        "tool `{tool}`: row `{holder}` ({}) wins over row `{refused}` ({}), whose `{tool}` is refused ({why}); \
         to have `{refused}`'s served instead, {how}, or rename the tool in one of the two plugins",
        origin(holder),
        origin(refused),
    )
}

/// The tool names several rows offer, decided as the host decides them
/// ([`tool_precedence`]: the row of the later config layer, else the
/// earlier row). `offered` lists each row's tools in row order; the answer
/// is `(tool, holder, refused)` per shadowed tool, for [`shadowing_text`].
pub fn shadowed_tools(config: &Config, offered: &[(String, Vec<String>)]) -> Vec<(String, String, String)> {
    let precedence = tool_precedence(config);
    let mut order: Vec<(usize, &(String, Vec<String>))> = offered.iter().enumerate().collect();
    order.sort_by_key(|(i, (id, _))| (std::cmp::Reverse(precedence.get(id).copied().unwrap_or(0)), *i));
    let mut holder: BTreeMap<&str, &str> = BTreeMap::new();
    let mut out = Vec::new();
    for (_, (id, tools)) in order {
        for tool in tools {
            match holder.get(tool.as_str()) {
                Some(winner) => out.push((tool.clone(), (*winner).to_string(), id.clone())),
                None => {
                    holder.insert(tool.as_str(), id.as_str());
                }
            }
        }
    }
    out
}

/// A tool of a component that is not a row of `config` yet (`wharf plugin
/// build` of a new plugin) that row `holder` already offers: where `holder`
/// is defined and which row would win once the component is added.
pub fn shadowed_by_text(config: &Config, tool: &str, holder: &str) -> String {
    let at = config.origin(&format!("plugin.{holder}.id"));
    let origin = at.map(|l| l.short()).unwrap_or_else(|| "?".to_string());
    let file = at.map_or_else(|| "its layer".to_string(), |l| format!("`{}`", l.source));
    format!(
        "tool `{tool}` is already offered by row `{holder}` ({origin}): a row for this component in a later config \
         layer than {file} (the project's `.wharf/config.toml` is read after the profile and the user's config) \
         would serve its `{tool}` and refuse `{holder}`'s; in the same layer the earlier row wins; or rename the tool"
    )
}

/// Config keys changed while the host runs (`/model`, `/permissions`):
/// plugin id → top-level keys merged over the row's `config`. They stay in
/// force across hot reloads of the config files, until the process ends.
pub type LiveOverrides = Arc<Mutex<BTreeMap<String, serde_json::Map<String, serde_json::Value>>>>;

/// Why a plugin was last reloaded with the same component: plugin id →
/// `Some(FILES)` for a config file change (the layer files that changed,
/// as shown to people), `None` for a change made at run time (`/model`,
/// `/permissions`, which report it themselves). Taken by the surface that
/// announces the reload.
pub type ReloadCauses = Arc<Mutex<BTreeMap<String, Option<String>>>>;

/// What the config files and rows were at the last (re)load: each layer
/// file's content hash, each row's fingerprint.
#[derive(Default)]
pub(crate) struct ConfigSeen {
    files: BTreeMap<PathBuf, Option<u64>>,
    rows: BTreeMap<String, String>,
}

impl ConfigSeen {
    pub(crate) fn of(config: &Config) -> Self {
        use std::hash::{Hash, Hasher};
        let files = config
            .watch
            .iter()
            .map(|p| {
                let hash = std::fs::read(p).ok().map(|b| {
                    let mut h = std::collections::hash_map::DefaultHasher::new();
                    b.hash(&mut h);
                    h.finish()
                });
                (p.clone(), hash)
            })
            .collect();
        let rows = config.plugins.iter().map(|r| (r.id.clone(), format!("{r:?}"))).collect();
        Self { files, rows }
    }

    /// Records in `causes` the rows of `now` that differ from `self`, with
    /// the files that changed.
    pub(crate) fn changes(&self, now: &Self, workspace: &Path, home: Option<&Path>, causes: &ReloadCauses) {
        let files: Vec<String> = now
            .files
            .iter()
            .filter(|(p, h)| self.files.get(*p) != Some(*h))
            .map(|(p, _)| shown_path(p, workspace, home))
            .collect();
        let files = if files.is_empty() { "the config files".to_string() } else { files.join(", ") };
        let mut causes = causes.lock().unwrap_or_else(|e| e.into_inner());
        for (id, row) in &now.rows {
            if self.rows.get(id) != Some(row) {
                causes.insert(id.clone(), Some(files.clone()));
            }
        }
    }
}

/// A path as shown to people: relative to the workspace inside it, `~/…`
/// under the home directory, else whole.
fn shown_path(p: &Path, workspace: &Path, home: Option<&Path>) -> String {
    if let Ok(rest) = p.strip_prefix(workspace) {
        return rest.display().to_string();
    }
    if let Some(rest) = home.and_then(|h| p.strip_prefix(h).ok().map(Path::to_path_buf)) {
        return format!("~/{}", rest.display());
    }
    p.display().to_string()
}

/// Merges the live overrides into the specs of their rows.
pub fn apply_live(specs: &mut [PluginSpec], live: &LiveOverrides) {
    let live = live.lock().unwrap_or_else(|e| e.into_inner());
    for spec in specs.iter_mut() {
        if let Some(set) = live.get(&spec.id) {
            merge_keys(&mut spec.config, set);
        }
    }
}

pub(crate) fn merge_keys(config: &mut serde_json::Value, set: &serde_json::Map<String, serde_json::Value>) {
    if !config.is_object() {
        *config = serde_json::Value::Object(serde_json::Map::new());
    }
    if let Some(obj) = config.as_object_mut() {
        for (k, v) in set {
            obj.insert(k.clone(), v.clone());
        }
    }
}
