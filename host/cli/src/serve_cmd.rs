//! `wharf serve`: a long-running multi-session host over the HTTP API of
//! the `wharf-serve` crate (the same API `wharf web`'s page uses, without
//! the page). The wiring is shared with `wharf web` ([`crate::web::serve`]).

use std::process::ExitCode;

use anyhow::Result;
use clap::Args;

use wharf_cli_common::HostArgs;
use crate::web::{NetArgs, Surface};

/// Arguments of `wharf serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub host: HostArgs,
    #[command(flatten)]
    pub net: NetArgs,
}

/// Runs `wharf serve`.
pub async fn run(args: ServeArgs) -> Result<ExitCode> {
    crate::web::serve(&args.host, &args.net, Surface::Serve).await
}
