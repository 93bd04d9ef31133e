//! `wharf`: the command-line host of the Wharf agent harness.

mod host_ctx;
mod plugin_cmd;
mod render;
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
    /// Log filter (e.g. `info`, `wharf_runtime=debug`); logs go to stderr.
    #[arg(long, global = true, env = "WHARF_LOG", default_value = "warn")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one task headless; exit 0 only when the turn completes.
    Run(run_cmd::RunArgs),
    /// List, show, export and fork stored sessions.
    Sessions {
        /// Session directory (default `~/.wharf/sessions`).
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
    Plugin(plugin_cmd::PluginCommand),
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Print the composed config with the layer each value came from.
    Dump {
        #[command(flatten)]
        host: host_ctx::HostArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Exit codes: 0 success, 1 the task/tool did not succeed, 2 usage or host
/// error.
fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_new(&cli.log).unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("wharf: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let result = rt.block_on(async {
        match cli.command {
            Command::Run(args) => run_cmd::run(args).await,
            Command::Sessions { session_dir, cmd } => sessions_cmd::run(cmd, session_dir),
            Command::Config(ConfigCommand::Dump { host, json }) => {
                let config = host.load_config()?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&config.dump_json())?);
                } else {
                    print!("{}", config.dump());
                }
                Ok(ExitCode::SUCCESS)
            }
            Command::Plugin(cmd) => plugin_cmd::run(cmd).await,
        }
    });
    // Drop the runtime without waiting for blocking tasks (file watchers).
    rt.shutdown_timeout(std::time::Duration::from_millis(100));
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("wharf: {e:#}");
            ExitCode::from(2)
        }
    }
}
