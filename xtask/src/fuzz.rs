//! `cargo xtask fuzz`: the cargo-fuzz targets.

use std::path::Path;

use anyhow::{Result, bail};

/// Entry point.
pub fn run(_root: &Path, _args: &[String]) -> Result<()> {
    bail!("fuzzing is not set up yet")
}
