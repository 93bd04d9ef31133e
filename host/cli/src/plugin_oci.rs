//! `wharf plugin pull|push|lock|sign`: components from OCI registries with
//! pinned digests and cosign-compatible signatures (issue 16), over the
//! `wharf-dist` crate.

use std::process::ExitCode;

use anyhow::{Result, bail};
use clap::Subcommand;

/// The OCI subcommands of `wharf plugin`.
#[derive(Subcommand, Debug)]
pub enum OciCommand {
    /// Pull a component from an OCI registry into the local store.
    Pull {
        /// `oci://HOST/REPO:TAG` or `oci://HOST/REPO@sha256:…`.
        reference: String,
    },
}

/// Runs one OCI subcommand.
pub async fn run(cmd: OciCommand) -> Result<ExitCode> {
    let _ = cmd;
    bail!("not built yet")
}
