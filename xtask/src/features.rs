//! Feature parity between the binary and the test build.
//!
//! `cargo build -p wharf` resolves features from the binary's own
//! dependency tree; `cargo test --workspace` also turns on whatever the
//! workspace's dev-dependencies ask for. When the two differ on a crate
//! that wasmtime depends on (hashbrown, say), every crate above it is
//! compiled twice: ten minutes on two cores. `host/cli/Cargo.toml` pins
//! those features; this check (part of `cargo xtask lint`) fails when a
//! new dev-dependency makes the two resolutions drift apart again.
//!
//! `cargo xtask demo` builds the binary with `--no-default-features`; every
//! crate of that build but the few whose features make the difference must
//! be built exactly as in the full build, host-side builds (proc macros'
//! and build scripts' dependencies) included, or the full build after the
//! demo compiles wasmtime again ([`check_demo`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Features per `name version`, as `cargo tree -f '{p}|{f}'` prints them.
pub(crate) type Features = BTreeMap<String, BTreeSet<String>>;

/// Each line of `cargo tree ARGS` as a package (`name version`) and its
/// features (comma-separated).
fn tree_lines(root: &Path, args: &[&str]) -> Result<Vec<(String, String)>> {
    let mut cmd = Command::new("cargo");
    cmd.current_dir(root).args(["tree", "--prefix", "none", "-f", "{p}|{f}"]).args(args);
    let out = cmd.output().with_context(|| format!("cannot run {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let line = line.strip_suffix(" (*)").unwrap_or(line);
            let (package, features) = line.split_once('|')?;
            Some((package.split_whitespace().take(2).collect::<Vec<_>>().join(" "), features.to_string()))
        })
        .collect())
}

/// The packages (`name version`) `cargo tree ARGS` prints, with their
/// features.
pub(crate) fn tree(root: &Path, args: &[&str]) -> Result<Features> {
    let mut map = Features::new();
    for (package, features) in tree_lines(root, args)? {
        map.entry(package).or_default().extend(features.split(',').filter(|f| !f.is_empty()).map(str::to_string));
    }
    Ok(map)
}

/// Each package (`name version`) of `cargo tree ARGS` with the feature set
/// of each of its builds: a package built for the host (a proc macro's or
/// build script's dependency) and for the target may have two.
pub(crate) fn builds(root: &Path, args: &[&str]) -> Result<BTreeMap<String, BTreeSet<String>>> {
    let mut map = BTreeMap::<String, BTreeSet<String>>::new();
    for (package, features) in tree_lines(root, args)? {
        map.entry(package).or_default().insert(features);
    }
    Ok(map)
}

/// The binary's crates whose features differ between the demo's build and
/// the full one (the features that leave the surfaces out).
const DEMO_FEATURED: &[&str] = &["wharf", "wharf-chat", "wharf-cli-common", "wharf-dist", "wharf-harness"];

/// Fails when a crate of the demo's build (`-p wharf
/// --no-default-features`) other than [`DEMO_FEATURED`] is built with
/// features the full binary's build does not give it.
pub fn check_demo(root: &Path) -> Result<()> {
    let full = builds(root, &["-p", "wharf", "-e", "normal,build"])?;
    let demo = builds(root, &["-p", "wharf", "--no-default-features", "-e", "normal,build"])?;
    let mut drift = Vec::new();
    for (package, sets) in &demo {
        let name = package.split_whitespace().next().unwrap_or_default();
        if DEMO_FEATURED.contains(&name) {
            continue;
        }
        let theirs = full.get(package);
        for set in sets {
            if !theirs.is_some_and(|t| t.contains(set)) {
                drift.push(format!("  {package}: the demo builds it with [{set}], the full build with {theirs:?}"));
            }
        }
    }
    if !drift.is_empty() {
        bail!(
            "`cargo xtask demo` (`-p wharf --no-default-features`) would build crates the full binary builds \
             otherwise, so the full build after it would compile them (and what depends on them) again; \
             pin their features in host/cli/Cargo.toml (`[build-dependencies]` for a host-side build):\n{}",
            drift.join("\n")
        );
    }
    Ok(())
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
    check_demo(root)
}
