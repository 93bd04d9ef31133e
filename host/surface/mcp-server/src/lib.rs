//! `wharf mcp …`: `wharf mcp serve` offers the profile's sandboxed tools to
//! MCP clients ([`server`], over stdio or streamable HTTP), `wharf mcp
//! tools` lists what the profile's `[[mcp]]` servers offer (the client side
//! is the `wharf-mcp` crate, which every host uses), and `wharf mcp add |
//! list | remove` manage `[[mcp]]` rows in the config layers ([`manage`]).

mod ask;
pub mod manage;
pub mod server;
mod tasks;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;
use clap::{Args, Subcommand};
use serde_json::json;
use wharf_core::registry::Registry;

use wharf_mcp::{McpManager, client};

use wharf_cli_common::HostArgs;

/// `wharf mcp …`.
#[derive(Subcommand, Debug)]
pub enum McpCommand {
    /// Serve the profile's component tools over MCP on stdio (tools/list,
    /// tools/call); every call is sandboxed and policy-checked. The
    /// profile's own `[[mcp]]` servers are not started (their tools are not
    /// re-exported).
    Serve(server::ServeArgs),
    /// Connect to the profile's `[[mcp]]` servers (and those of
    /// `--mcp-config`) and list the tools each offers.
    Tools(ToolsArgs),
    /// Add an MCP server to the project layer (`.wharf/config.toml`) or,
    /// with `--scope user`, to `~/.wharf/config.toml`: `wharf mcp add NAME
    /// -- COMMAND ARGS…` (stdio, in the OS sandbox unless `--no-sandbox`) or
    /// `wharf mcp add NAME URL` (streamable HTTP).
    Add(manage::AddArgs),
    /// List the configured MCP servers: the layer file of each and how it
    /// is confined (`--check` also starts them).
    List(manage::ListArgs),
    /// Remove an MCP server from the project or user layer.
    Remove(manage::RemoveArgs),
}

/// Arguments of `wharf mcp tools`.
#[derive(Args, Debug)]
pub struct ToolsArgs {
    #[allow(missing_docs)] // flattened: the flags document themselves
    #[command(flatten)]
    pub host: HostArgs,
    /// More MCP servers, over the profile's by name (JSON: `{"mcp": [rows]}`,
    /// an array of rows, or `.mcp.json`'s `{"mcpServers": {...}}`).
    #[arg(long = "mcp-config", value_name = "FILE")]
    pub mcp_config: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `wharf mcp …`.
pub async fn run(cmd: McpCommand) -> Result<ExitCode> {
    match cmd {
        McpCommand::Serve(args) => server::serve(args).await,
        McpCommand::Tools(args) => tools(args).await,
        McpCommand::Add(args) => manage::add(args).await,
        McpCommand::List(args) => manage::list(args).await,
        McpCommand::Remove(args) => manage::remove(args).await,
    }
}

async fn tools(args: ToolsArgs) -> Result<ExitCode> {
    // Only the config: listing servers needs no components.
    let workspace = args.host.workspace()?;
    let mut config = args.host.load_config()?;
    wharf_mcp::config::add_file(&mut config, args.mcp_config.as_deref())?;
    if config.mcp.is_empty() {
        eprintln!("wharf mcp: no MCP servers configured (add [[mcp]] rows to the profile, or --mcp-config FILE)");
    }
    let registry = Arc::new(Registry::new());
    let manager = McpManager::start(registry.clone(), config.mcp, &workspace);
    // Wait for every server's first attempt, required or not.
    let all = manager.wait_all().await;
    let snap = registry.snapshot();
    let status = manager.status();
    if args.json {
        let tools: Vec<_> = snap.tool_specs();
        println!("{}", serde_json::to_string_pretty(&json!({"servers": status, "tools": tools}))?);
    } else {
        for s in &status {
            let (name, state) = (&s.server, s.state);
            match &s.error {
                Some(e) => println!("{name}: {state}: {e}"),
                None => println!("{name}: {state}"),
            }
            for t in snap.tools.values().filter(|t| t.plugin().id == client::plugin_id(name)) {
                let spec = t.spec();
                println!("  {} — {}", spec.name, spec.description.lines().next().unwrap_or(""));
            }
        }
    }
    manager.stop().await;
    Ok(if all { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
