//! `wharf serve`: a long-running multi-session host over the HTTP API of
//! the `wharf-serve` crate (issue 17).

use std::process::ExitCode;

use anyhow::{Result, bail};
use clap::Args;

use crate::host_ctx::HostArgs;

/// Arguments of `wharf serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub host: HostArgs,
}

/// Runs `wharf serve`.
pub async fn run(args: ServeArgs) -> Result<ExitCode> {
    let _ = args;
    bail!("wharf serve is not built yet")
}
