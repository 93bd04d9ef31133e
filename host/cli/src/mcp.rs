//! MCP, both ways: configured MCP servers become tools (`mcp__SERVER__TOOL`,
//! [`client`]) and `wharf mcp serve` offers the profile's sandboxed tools to
//! MCP clients ([`server`]).

pub mod client;
pub mod config;
pub mod server;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;
use clap::{Args, Subcommand};
use serde_json::json;
use wharf_core::registry::Registry;

pub use client::McpManager;

/// `wharf mcp …`.
#[derive(Subcommand, Debug)]
pub enum McpCommand {
    /// Serve the profile's component tools over MCP on stdio (tools/list,
    /// tools/call); every call is sandboxed and policy-checked.
    Serve(server::ServeArgs),
    /// Connect to the configured MCP servers and list the tools each offers.
    Tools(ToolsArgs),
}

/// Arguments of `wharf mcp tools`.
#[derive(Args, Debug)]
pub struct ToolsArgs {
    /// MCP servers (JSON; see `wharf web --help`).
    #[arg(long = "mcp-config", value_name = "FILE")]
    pub mcp_config: PathBuf,
    /// Working directory of stdio servers (default: the current directory).
    #[arg(long, short = 'w')]
    pub workspace: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `wharf mcp …`.
pub async fn run(cmd: McpCommand) -> Result<ExitCode> {
    match cmd {
        McpCommand::Serve(args) => server::serve(args).await,
        McpCommand::Tools(args) => tools(args).await,
    }
}

/// Starts the MCP servers of `--mcp-config FILE` (if given) on `registry`:
/// the surfaces call this next to [`crate::host_ctx::HostCtx::start`].
pub fn start(registry: &Arc<Registry>, file: Option<&Path>, workspace: &Path) -> Result<Option<Arc<McpManager>>> {
    let Some(file) = file else { return Ok(None) };
    let configs = config::load_file(file)?;
    Ok(Some(McpManager::start(registry.clone(), configs, workspace)))
}

async fn tools(args: ToolsArgs) -> Result<ExitCode> {
    let workspace = match &args.workspace {
        Some(w) => std::fs::canonicalize(w)?,
        None => std::env::current_dir()?,
    };
    let registry = Arc::new(Registry::new());
    let configs = config::load_file(&args.mcp_config)?;
    let manager = McpManager::start(registry.clone(), configs, &workspace);
    // Wait for every server's first attempt, required or not.
    let all = manager.wait_all().await;
    let snap = registry.snapshot();
    let status = manager.status();
    if args.json {
        let tools: Vec<_> = snap.tool_specs();
        println!("{}", serde_json::to_string_pretty(&json!({"servers": status, "tools": tools}))?);
    } else {
        for s in &status {
            let name = s["server"].as_str().unwrap_or("?");
            let state = s["state"].as_str().unwrap_or("?");
            match s.get("error").and_then(|e| e.as_str()) {
                Some(e) => println!("{name}: {state}: {e}"),
                None => println!("{name}: {state}"),
            }
            for t in snap.tools.values().filter(|t| t.plugin().id == client::plugin_id(name)) {
                let spec = t.spec();
                println!("  {} — {}", spec.name, spec.description.lines().next().unwrap_or(""));
            }
        }
    }
    manager.shutdown();
    Ok(if all { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
