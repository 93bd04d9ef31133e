//! `cargo xtask faults [--kills N] [--seed S]`: the fault suite at full
//! strength — the `faults::` tests of the `all` test binary with 50 random
//! `kill -9`s each (the default run, `cargo xtask test` and CI, uses 8): of
//! `wharf run` (then `--resume`), and of the owning host of two `wharf
//! serve` hosts on one PostgreSQL database (then takeover by the other).
//!
//! The tests read `WHARF_FAULT_KILLS` and `WHARF_FAULT_SEED`; a failure
//! prints the seed, and `--seed` replays it.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Kills in a full local run.
const FULL_KILLS: u32 = 50;

/// Entry point.
pub fn run(root: &Path, args: &[String]) -> Result<()> {
    let mut kills = FULL_KILLS;
    let mut seed: Option<u64> = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().with_context(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--kills" => kills = value("--kills")?.parse().context("--kills: not a number")?,
            "--seed" => seed = Some(value("--seed")?.parse().context("--seed: not a number")?),
            "-h" | "--help" => {
                eprintln!("usage: cargo xtask faults [--kills N (default {FULL_KILLS})] [--seed S]");
                return Ok(());
            }
            other => bail!("unknown argument `{other}` (usage: cargo xtask faults [--kills N] [--seed S])"),
        }
    }
    crate::build_all(root, &["-q", "-p", "wharf"])?;
    let mut cmd = Command::new("cargo");
    cmd.current_dir(root)
        .args(["test", "-p", "wharf-tests", "--test", "all", "faults::", "--", "--nocapture"])
        .env("WHARF_FAULT_KILLS", kills.to_string());
    if let Some(s) = seed {
        cmd.env("WHARF_FAULT_SEED", s.to_string());
    }
    crate::run(&mut cmd)
}
