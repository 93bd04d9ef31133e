//! `wharf`: the command-line host of the Wharf agent harness.

mod plugin_cmd;

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
    /// Inspect, check and call plugin components.
    #[command(subcommand)]
    Plugin(plugin_cmd::PluginCommand),
}

/// Exit codes: 0 success, 1 the tool or sandbox reported an error, 2 usage
/// or host error.
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
            Command::Plugin(cmd) => plugin_cmd::run(cmd).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("wharf: {e:#}");
            ExitCode::from(2)
        }
    }
}
