//! The crates only the build runs, at opt-level 0.
//!
//! The dev profile compiles every dependency at opt-level 2
//! (`[profile.dev.package."*"]`), and that override outranks
//! `build-override`, so proc macros, build scripts' dependencies and code
//! generators were optimised too: about a fifth of a first build's CPU, for
//! code that runs once per build. `Cargo.toml` names them in
//! `[profile.dev.package]` at opt-level 0. This check (part of
//! `cargo xtask lint`) keeps the list equal to what `cargo tree` says: a
//! listed crate that a program links would run unoptimised, and a new
//! build-only crate left out would be compiled at opt-level 2 for nothing.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context, Result, bail};

/// Package names `cargo tree --workspace ARGS` prints (versions dropped:
/// the profile names packages, not versions).
fn names(root: &Path, args: &[&str]) -> Result<BTreeSet<String>> {
    let mut all = vec!["--workspace"];
    all.extend_from_slice(args);
    Ok(crate::features::tree(root, &all)?
        .into_keys()
        .filter_map(|key| key.split_whitespace().next().map(str::to_string))
        .collect())
}

/// The names `[profile.dev.package]` sets to opt-level 0.
pub fn listed(manifest: &str) -> BTreeSet<String> {
    let mut inside = false;
    let mut out = BTreeSet::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == "[profile.dev.package]";
            continue;
        }
        if !inside || line.starts_with('#') {
            continue;
        }
        if let Some((name, value)) = line.split_once('=') {
            let value: String = value.chars().filter(|c| !c.is_whitespace()).collect();
            if value == "{opt-level=0}" {
                out.insert(name.trim().trim_matches('"').to_string());
            }
        }
    }
    out
}

/// Fails when the list and the workspace's build-only crates differ.
pub fn check(root: &Path) -> Result<()> {
    let manifest = root.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).with_context(|| format!("reading {}", manifest.display()))?;
    let listed = listed(&text);
    // Linked into some program (a binary, a library, a test) of the
    // workspace: normal and dev edges, not through a proc macro.
    let linked = names(root, &["-e", "normal,dev,no-proc-macro"])?;
    let all = names(root, &["-e", "all"])?;
    let build_only: BTreeSet<_> = all.difference(&linked).cloned().collect();
    let mut problems = Vec::new();
    for name in listed.intersection(&linked) {
        problems.push(format!("  {name}: linked into a program, so it must not be at opt-level 0; remove it"));
    }
    for name in listed.difference(&all) {
        problems.push(format!("  {name}: no longer in the dependency tree; remove it"));
    }
    for name in build_only.difference(&listed) {
        problems.push(format!("  {name}: only the build uses it; add `{name} = {{ opt-level = 0 }}`"));
    }
    if !problems.is_empty() {
        bail!("the build-only crates in Cargo.toml's [profile.dev.package] are out of date:\n{}", problems.join("\n"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::listed;

    #[test]
    fn only_the_build_only_table_is_read() {
        let manifest = "[profile.dev.package.\"*\"]\nopt-level = 2\n\n[profile.dev.package]\n# why\nsyn = { opt-level = 0 }\n\"quote\" = {opt-level=0}\nfoo = { opt-level = 1 }\n\n[profile.test]\nbar = { opt-level = 0 }\n";
        let names: Vec<_> = listed(manifest).into_iter().collect();
        assert_eq!(names, ["quote", "syn"]);
    }
}
