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
    Chat(wharf_chat::ChatArgs),
    /// Serve the Agent Client Protocol (v1) over stdio, for editors such as Zed.
    Acp(wharf_acp::AcpArgs),
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
    #[command(subcommand)]
    Plugin(wharf_plugin_tools::PluginCommand),
    /// Local web UI: sessions, live events, approvals, plugins.
    Web(wharf_serve::web::WebArgs),
    /// A long-running multi-session host with an HTTP API.
    Serve(wharf_serve::web::ServeArgs),
    /// MCP: serve the profile's tools (stdio or HTTP); add, list and remove
    /// servers; list configured servers' tools.
    #[command(subcommand)]
    Mcp(wharf_mcp_server::McpCommand),
    /// Check the toolchain, cache, process sandbox, keys (never printed) and
    /// the profile's plugins.
    Doctor(wharf_cli_common::HostArgs),
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
            Command::Chat(args) => wharf_chat::run(args).await,
            Command::Acp(args) => wharf_acp::run(args).await,
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
            Command::Plugin(cmd) => wharf_plugin_tools::run(cmd, wharf_cli_common::env::runtime_options()).await,
            Command::Web(args) => wharf_serve::web::run_web(args).await,
            Command::Serve(args) => wharf_serve::web::run_serve(args).await,
            Command::Mcp(cmd) => wharf_mcp_server::run(cmd).await,
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
