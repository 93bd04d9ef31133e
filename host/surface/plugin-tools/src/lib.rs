//! `wharf plugin …`: what a plugin author and an operator do with
//! components outside a session — inspect, check and call one
//! ([`inspect`]), scaffold a project ([`new`]), build it in any supported
//! language and check the result ([`build`]), watch it and publish each
//! version for hot reload ([`dev`]), and push, pull, lock, sign
//! and verify components in an OCI registry ([`oci`]); add, list and
//! remove Claude Code / Codex plugin bundles ([`bundle`]).

pub mod build;
pub mod bundle;
pub mod dev;
pub mod inspect;
pub mod new;
pub mod oci;
mod pypath;
pub mod shadow;

use std::process::ExitCode;

use clap::Subcommand;
use wharf_runtime::RuntimeOptions;

/// `wharf plugin …`: the component tools plus scaffolding and building.
#[derive(Subcommand)]
pub enum PluginCommand {
    #[allow(missing_docs)] // flattened: each subcommand documents itself
    #[command(flatten)]
    Inspect(inspect::PluginCommand),
    /// Scaffold a plugin project (Rust, Python or JavaScript) with a test.
    New(new::NewArgs),
    /// Build a plugin project into a component and check it.
    Build(build::BuildArgs),
    /// Watch a plugin project and publish each version that loads for hot
    /// reload (`target/dev/NAME.wasm`; a row with `dev = true`).
    Dev(dev::DevArgs),
    #[allow(missing_docs)]
    #[command(flatten)]
    Oci(oci::OciCommand),
    #[allow(missing_docs)]
    #[command(flatten)]
    Bundle(bundle::BundleCommand),
}

/// Runs `wharf plugin …`; components are loaded by a runtime built with
/// `runtime` (the binary reads those from the environment).
pub async fn run(cmd: PluginCommand, runtime: RuntimeOptions) -> anyhow::Result<ExitCode> {
    match cmd {
        PluginCommand::Inspect(cmd) => inspect::run(cmd, runtime).await,
        PluginCommand::New(args) => new::run(args).await,
        PluginCommand::Build(args) => build::run(args, runtime).await,
        PluginCommand::Dev(args) => dev::run(args, runtime).await,
        PluginCommand::Oci(cmd) => oci::run(cmd).await,
        PluginCommand::Bundle(cmd) => bundle::run(cmd),
    }
}
