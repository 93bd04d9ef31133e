//! `wharf`: the command-line host of the Wharf agent harness.

mod doctor;
mod run_cmd;
mod sessions_cmd;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Wharf: an agent harness whose every capability is a sandboxed
/// WebAssembly component.
#[derive(Parser)]
#[command(name = "wharf", version, about, long_about = None)]
struct Cli {
    /// Log filter (e.g. `info`, `wharf_runtime=debug`). Logs go to stderr,
    /// except for `chat` and `web`: to `~/.wharf/logs/chat.log` or `web.log`
    /// (warnings are also shown as one-line notices).
    #[arg(long, global = true, env = "WHARF_LOG", default_value = "warn")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one task headless; exit 0 only when the turn completes.
    Run(run_cmd::RunArgs),
    /// Chat with the agent in the terminal (streaming, approvals, Ctrl-C cancels).
    #[cfg(feature = "chat")]
    Chat(wharf_chat::ChatArgs),
    /// Chat with the agent in the terminal (not in this build).
    #[cfg(not(feature = "chat"))]
    Chat(Absent),
    /// Serve the Agent Client Protocol (v1) over stdio, for editors such as Zed.
    #[cfg(feature = "acp")]
    Acp(wharf_acp::AcpArgs),
    /// Serve the Agent Client Protocol over stdio (not in this build).
    #[cfg(not(feature = "acp"))]
    Acp(Absent),
    /// List, show, export, fork and migrate stored sessions.
    Sessions {
        /// Session directory (default `$WHARF_HOME/sessions`, else `~/.wharf/sessions`, or the profile's store).
        #[arg(long = "session-dir", global = true, value_name = "DIR")]
        session_dir: Option<PathBuf>,
        #[command(subcommand)]
        cmd: sessions_cmd::SessionsCommand,
    },
    /// Show the composed configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Inspect, check and call plugin components.
    #[cfg(feature = "plugin-tools")]
    #[command(subcommand)]
    Plugin(wharf_plugin_tools::PluginCommand),
    /// Inspect, check and call plugin components (not in this build).
    #[cfg(not(feature = "plugin-tools"))]
    Plugin(Absent),
    /// Local web UI: sessions, live events, approvals, plugins.
    #[cfg(feature = "serve")]
    Web(wharf_serve::web::WebArgs),
    /// Local web UI (not in this build).
    #[cfg(not(feature = "serve"))]
    Web(Absent),
    /// A long-running multi-session host with an HTTP API.
    #[cfg(feature = "serve")]
    Serve(wharf_serve::web::ServeArgs),
    /// A multi-session host with an HTTP API (not in this build).
    #[cfg(not(feature = "serve"))]
    Serve(Absent),
    /// MCP: serve the profile's tools (stdio or HTTP); add, list and remove
    /// servers; list configured servers' tools.
    #[cfg(feature = "mcp")]
    #[command(subcommand)]
    Mcp(wharf_mcp_server::McpCommand),
    /// MCP servers and serving (not in this build).
    #[cfg(not(feature = "mcp"))]
    Mcp(Absent),
    /// Check the toolchain, cache, process sandbox, keys (never printed) and
    /// the profile's plugins.
    Doctor(wharf_cli_common::HostArgs),
}

/// The arguments of a command this build leaves out, taken as given so the
/// command itself explains what to build (see [`absent`]).
#[derive(clap::Args)]
struct Absent {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    _args: Vec<String>,
}

/// The error of a command this build leaves out (`cargo xtask demo` builds
/// `wharf` with `--no-default-features`).
#[allow(dead_code)] // unused when every feature is on
fn absent(command: &str) -> anyhow::Result<ExitCode> {
    anyhow::bail!(
        "`wharf {command}` is not in this build (it has run, sessions, config and doctor): {}",
        wharf_harness::FULL_BUILD
    )
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Print the composed config with the layer each value came from.
    Dump {
        #[command(flatten)]
        host: wharf_cli_common::HostArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs `fut` as a task of the runtime and waits for it.
async fn on_worker<T: Send + 'static>(
    fut: impl std::future::Future<Output = anyhow::Result<T>> + Send + 'static,
) -> anyhow::Result<T> {
    match tokio::spawn(fut).await {
        Ok(r) => r,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(anyhow::anyhow!("the command's task ended early: {e}")),
    }
}

/// Exit codes: 0 success, 1 the task/tool did not succeed, 2 usage or host
/// error.
fn main() -> ExitCode {
    let cli = Cli::parse();
    // The chat screen and the web terminal show notices; the details go to a file.
    let log_file = match cli.command {
        Command::Chat(_) => Some("chat"),
        Command::Web(_) => Some("web"),
        _ => None,
    };
    wharf_cli_common::output::init_logging(&cli.log, log_file);
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("wharf: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    // SIGTERM: kill the process groups plugins started, then exit.
    rt.spawn(async {
        if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            && term.recv().await.is_some()
        {
            wharf_runtime::process::kill_all();
            // `exit` skips destructors: give the terminal back as found.
            #[cfg(feature = "chat")]
            wharf_chat::restore_terminal();
            std::process::exit(143);
        }
    });
    let result = rt.block_on(async {
        match cli.command {
            // On a worker, not this thread's `block_on`: a wake-up from a
            // task the loop waits on (the model stream, a tool call) then
            // runs it on the same worker instead of unparking this thread.
            Command::Run(args) => on_worker(run_cmd::run(args)).await,
            #[cfg(feature = "chat")]
            Command::Chat(args) => wharf_chat::run(args).await,
            #[cfg(not(feature = "chat"))]
            Command::Chat(_) => absent("chat"),
            #[cfg(feature = "acp")]
            Command::Acp(args) => wharf_acp::run(args).await,
            #[cfg(not(feature = "acp"))]
            Command::Acp(_) => absent("acp"),
            Command::Sessions { session_dir, cmd } => sessions_cmd::run(cmd, session_dir),
            Command::Config(ConfigCommand::Dump { host, json }) => {
                use std::io::Write;
                let config = host.load_config()?;
                let text = if json {
                    format!("{}\n", serde_json::to_string_pretty(&config.dump_json())?)
                } else {
                    config.dump()
                };
                wharf_cli_common::output::Stdout::new().write_all(text.as_bytes())?;
                Ok(ExitCode::SUCCESS)
            }
            #[cfg(feature = "plugin-tools")]
            Command::Plugin(cmd) => wharf_plugin_tools::run(cmd, wharf_cli_common::env::runtime_options()).await,
            #[cfg(not(feature = "plugin-tools"))]
            Command::Plugin(_) => absent("plugin"),
            #[cfg(feature = "serve")]
            Command::Web(args) => wharf_serve::web::run_web(args).await,
            #[cfg(not(feature = "serve"))]
            Command::Web(_) => absent("web"),
            #[cfg(feature = "serve")]
            Command::Serve(args) => wharf_serve::web::run_serve(args).await,
            #[cfg(not(feature = "serve"))]
            Command::Serve(_) => absent("serve"),
            #[cfg(feature = "mcp")]
            Command::Mcp(cmd) => wharf_mcp_server::run(cmd).await,
            #[cfg(not(feature = "mcp"))]
            Command::Mcp(_) => absent("mcp"),
            Command::Doctor(args) => doctor::run(args).await,
        }
    });
    // Drop the runtime without waiting for blocking tasks (file watchers).
    rt.shutdown_timeout(std::time::Duration::from_millis(100));
    match result {
        Ok(code) => code,
        // The reader of stdout went away (`… | head`): nothing to report.
        Err(e) if wharf_cli_common::output::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wharf: {}", wharf_cli_common::output::error_text(&e));
            ExitCode::from(2)
        }
    }
}
