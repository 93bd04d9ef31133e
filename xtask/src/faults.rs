//! `cargo xtask faults`: the fault suite (crash, disk-full, read-only).

use std::path::Path;

use anyhow::{Result, bail};

/// Entry point.
pub fn run(_root: &Path, _args: &[String]) -> Result<()> {
    bail!("the fault suite is not written yet")
}
