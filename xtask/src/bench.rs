//! `cargo xtask bench`: every benchmark in one invocation, one report.

use std::path::Path;
use std::process::Command;

use anyhow::Result;

use crate::{build_plugins, run as sh, target_dir};

/// Runs the benchmarks and writes `target/bench/report.md`.
pub fn run_all(root: &Path) -> Result<()> {
    build_plugins(root)?;
    sh(Command::new("cargo").current_dir(root).args(["build", "-q", "-p", "wharf"]))?;
    let target = target_dir(root);
    let out = target.join("bench");
    std::fs::create_dir_all(&out)?;
    let text = target.join("plugins/text.wasm");
    sh(Command::new("cargo").current_dir(root).args([
        "bench",
        "-p",
        "wharf-runtime",
        "--profile",
        "dev",
        "--bench",
        "call_overhead",
        "--",
        &text.display().to_string(),
        &out.join("call_overhead.json").display().to_string(),
    ]))?;
    sh(Command::new("cargo").current_dir(root).args([
        "bench",
        "-p",
        "wharf-tests",
        "--profile",
        "dev",
        "--bench",
        "harness",
    ]))?;
    let mut report = String::from("# Wharf benchmark report\n\n");
    for (title, file) in [("Tool-call overhead", "call_overhead.md"), ("Harness", "harness.md")] {
        if let Ok(t) = std::fs::read_to_string(out.join(file)) {
            report.push_str(&format!("## {title}\n\n{t}\n"));
        }
    }
    std::fs::write(out.join("report.md"), &report)?;
    eprintln!("{report}\nreport: {}", out.join("report.md").display());
    Ok(())
}

/// Entry point (`args` are reserved for options).
pub fn run(root: &Path, _args: &[String]) -> Result<()> {
    run_all(root)
}
