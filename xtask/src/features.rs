//! Feature parity between the binary and the test build.
//!
//! `cargo build -p wharf` resolves features from the binary's own
//! dependency tree; `cargo test --workspace` also turns on whatever the
//! workspace's dev-dependencies ask for. When the two differ on a crate
//! that wasmtime depends on (hashbrown, say), every crate above it is
//! compiled twice: ten minutes on two cores. `host/cli/Cargo.toml` pins
//! those features; this check (part of `cargo xtask lint`) fails when a
//! new dev-dependency makes the two resolutions drift apart again.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Features per `name version`, as `cargo tree -f '{p}|{f}'` prints them.
pub(crate) type Features = BTreeMap<String, BTreeSet<String>>;

/// The packages (`name version`) `cargo tree ARGS` prints, with their
/// features.
pub(crate) fn tree(root: &Path, args: &[&str]) -> Result<Features> {
    let mut cmd = Command::new("cargo");
    cmd.current_dir(root).args(["tree", "--prefix", "none", "-f", "{p}|{f}"]).args(args);
    let out = cmd.output().with_context(|| format!("cannot run {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    let mut map = Features::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let line = line.strip_suffix(" (*)").unwrap_or(line);
        let Some((package, features)) = line.split_once('|') else { continue };
        let key = package.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
        map.entry(key).or_default().extend(features.split(',').filter(|f| !f.is_empty()).map(str::to_string));
    }
    Ok(map)
}

/// Fails when a crate in the binary's tree gets other features in the test
/// build (`excluded`: the packages `cargo xtask test` leaves out).
pub fn check(root: &Path, excluded: &[String]) -> Result<()> {
    let binary = tree(root, &["-p", "wharf", "-e", "normal,build"])?;
    let mut args = vec!["--workspace", "-e", "normal,build,dev"];
    for p in excluded {
        args.extend(["--exclude", p.as_str()]);
    }
    let tests = tree(root, &args)?;
    let mut drift = Vec::new();
    for (package, features) in &binary {
        let Some(in_tests) = tests.get(package) else { continue };
        if in_tests != features {
            let extra: Vec<_> = in_tests.difference(features).cloned().collect();
            let missing: Vec<_> = features.difference(in_tests).cloned().collect();
            drift.push(format!("  {package}: the test build adds {extra:?}, lacks {missing:?}"));
        }
    }
    // One test run the usual way (`cargo test -p wharf-tests --test all
    // NAME`) resolves from the tests' own tree: it must match too, or that
    // command compiles wasmtime a second time (`tests/Cargo.toml` pins).
    let one_test = tree(root, &["-p", "wharf-tests", "-e", "normal,build,dev"])?;
    for (package, features) in &one_test {
        if tests.get(package).is_some_and(|f| f != features) {
            drift.push(format!(
                "  {package}: `cargo test -p wharf-tests` resolves other features (pin them in tests/Cargo.toml)"
            ));
        }
    }
    // The tests build the MCP fixture next to the binary
    // (`wharf_tests::MCP_FIXTURE_BUILD`): that build must not change a
    // feature of the binary's tree either.
    let with_fixture = tree(root, &["-p", "wharf", "-p", "wharf-mcp-fixture", "-e", "normal,build"])?;
    for (package, features) in &binary {
        if with_fixture.get(package).is_some_and(|f| f != features) {
            drift.push(format!("  {package}: building wharf-mcp-fixture with wharf changes its features"));
        }
    }
    if !drift.is_empty() {
        bail!(
            "`cargo build -p wharf` and `cargo test --workspace` resolve different features, so the \
             crates above these would be compiled twice; pin them in host/cli/Cargo.toml:\n{}",
            drift.join("\n")
        );
    }
    Ok(())
}
