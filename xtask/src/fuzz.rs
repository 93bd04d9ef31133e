//! `cargo xtask fuzz [--seconds N] [--sanitizer S] [TARGET…]`: builds the
//! cargo-fuzz targets in `fuzz/` (nightly) and runs each for N seconds
//! (default 25), starting from the checked-in seeds in `fuzz/corpus/TARGET`.
//!
//! - New corpus entries go to `target/fuzz/corpus/TARGET` (kept between
//!   runs, never checked in); crashes to `fuzz/artifacts/TARGET/`.
//! - The sanitizer defaults to `none` (panics and aborts are what the safe
//!   Rust under test can do; twice the executions per second); pass
//!   `--sanitizer address` for longer runs.
//! - Needs `cargo-fuzz` and a nightly toolchain (`.ci/run` installs both).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The targets, in `fuzz/fuzz_targets/`.
pub const TARGETS: [&str; 5] = ["sse", "session_log", "config", "tool_args", "wit_boundary"];

const DEFAULT_SECONDS: u64 = 25;

/// Entry point.
pub fn run(root: &Path, args: &[String]) -> Result<()> {
    let mut seconds = DEFAULT_SECONDS;
    let mut sanitizer = "none".to_string();
    let mut targets: Vec<String> = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().with_context(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--seconds" => seconds = value("--seconds")?.parse().context("--seconds: not a number")?,
            "--sanitizer" => sanitizer = value("--sanitizer")?.clone(),
            "-h" | "--help" => {
                eprintln!(
                    "usage: cargo xtask fuzz [--seconds N (default {DEFAULT_SECONDS})] [--sanitizer none|address] \
                     [TARGET…]\ntargets: {}",
                    TARGETS.join(", ")
                );
                return Ok(());
            }
            t if TARGETS.contains(&t) => targets.push(t.to_string()),
            other => bail!("unknown argument `{other}` (targets: {})", TARGETS.join(", ")),
        }
    }
    if targets.is_empty() {
        targets = TARGETS.iter().map(|t| t.to_string()).collect();
    }
    check_tools()?;

    let fuzz_dir = root.join("fuzz");
    let target_dir = crate::target_dir(root).join("fuzz");
    let fuzz = |sub: &str| {
        let mut c = Command::new("cargo");
        c.current_dir(&fuzz_dir).args(["+nightly", "fuzz", sub, "-O", "--sanitizer", &sanitizer, "--target-dir"]);
        c.arg(&target_dir);
        c
    };
    crate::run(&mut fuzz("build"))?;

    // A scratch directory for the targets' files (in memory when possible),
    // removed afterwards.
    let scratch = scratch_base(root).join(format!("wharf-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).with_context(|| format!("cannot create {}", scratch.display()))?;
    let mut failed = Vec::new();
    for t in &targets {
        let corpus = target_dir.join("corpus").join(t);
        std::fs::create_dir_all(&corpus).with_context(|| format!("cannot create {}", corpus.display()))?;
        let mut cmd = fuzz("run");
        cmd.arg(t)
            .arg(&corpus)
            .arg(fuzz_dir.join("corpus").join(t))
            .arg("--")
            .arg(format!("-max_total_time={seconds}"))
            .args(["-timeout=20", "-rss_limit_mb=2048", "-print_final_stats=1"])
            .env("WHARF_FUZZ_SCRATCH", &scratch);
        eprintln!("\n== fuzz {t}: {seconds} s ==");
        if let Err(e) = crate::run(&mut cmd) {
            eprintln!("fuzz target `{t}` failed: {e:#}");
            failed.push(t.clone());
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    if !failed.is_empty() {
        bail!(
            "fuzz targets failed: {} (reproducers in {}; replay with `cargo +nightly fuzz run TARGET FILE` in fuzz/)",
            failed.join(", "),
            fuzz_dir.join("artifacts").display()
        );
    }
    eprintln!("\nfuzzed {} targets for {seconds} s each: no crash", targets.len());
    Ok(())
}

fn scratch_base(root: &Path) -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() { shm.to_path_buf() } else { crate::target_dir(root).join("fuzz") }
}

/// cargo-fuzz and nightly must be installed; say how if not.
fn check_tools() -> Result<()> {
    let ok = Command::new("cargo")
        .args(["+nightly", "fuzz", "--version"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        bail!(
            "`cargo +nightly fuzz` is not available; install it with \
             `rustup toolchain install nightly --profile minimal && cargo install cargo-fuzz --locked`"
        );
    }
    Ok(())
}
