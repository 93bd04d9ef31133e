//! Every component the tests build is tested: `wharf_tests::plugins` has a
//! constant per component crate (`build.rs`), and each constant is named
//! as `plugins::NAME` in at least one other module of this binary. A
//! component no test uses fails here: test it, or stop building it.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::Context;
use wharf_tests::plugins;

/// The component crates under `plugins/` and `tests/plugins/`, read now
/// (the constants were generated at build time; a directory added since
/// is caught here).
fn component_dirs(root: &Path) -> anyhow::Result<BTreeSet<String>> {
    let mut names = BTreeSet::new();
    for parent in ["plugins", "tests/plugins"] {
        for entry in std::fs::read_dir(root.join(parent)).with_context(|| format!("listing {parent}/"))? {
            let dir = entry.with_context(|| format!("listing {parent}/"))?.path();
            let Ok(manifest) = std::fs::read_to_string(dir.join("Cargo.toml")) else { continue };
            let cdylib = manifest.lines().any(|l| l.trim_start().starts_with("crate-type") && l.contains("cdylib"));
            if cdylib || dir.join("src/main.rs").exists() {
                names.insert(dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default());
            }
        }
    }
    Ok(names)
}

/// `llm-deepseek` → `LLM_DEEPSEEK`, as `build.rs` names the constants.
fn const_name(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect()
}

/// Whether the code in `text` (comment lines left out) names
/// `plugins::NAME`, not a longer constant such as `plugins::NAME_2`.
fn names_constant(text: &str, name: &str) -> bool {
    let needle = format!("plugins::{name}");
    text.lines().filter(|l| !l.trim_start().starts_with("//")).any(|line| {
        line.match_indices(&needle).any(|(i, _)| {
            let next = line[i + needle.len()..].chars().next();
            !next.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    })
}

#[test]
fn every_component_has_a_constant() -> anyhow::Result<()> {
    let on_disk = component_dirs(&wharf_tests::root())?;
    let constants: BTreeSet<String> = plugins::ALL.iter().map(|p| p.name().to_string()).collect();
    assert_eq!(constants, on_disk, "the constants are stale: rebuild wharf-tests (touch tests/build.rs)");
    Ok(())
}

#[test]
fn every_constant_is_used_by_a_test() -> anyhow::Result<()> {
    let dir = wharf_tests::root().join("tests/all");
    let mut sources = Vec::new();
    for entry in std::fs::read_dir(&dir).context("listing tests/all")? {
        let path = entry.context("listing tests/all")?.path();
        let this_module = path.file_name().is_some_and(|n| n == "components.rs");
        if path.extension().is_some_and(|e| e == "rs") && !this_module {
            let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            sources.push(text);
        }
    }
    assert!(sources.len() > 10, "found only {} test modules in {}", sources.len(), dir.display());
    let unused: Vec<String> = plugins::ALL
        .iter()
        .map(|p| const_name(p.name()))
        .filter(|name| !sources.iter().any(|text| names_constant(text, name)))
        .collect();
    assert!(unused.is_empty(), "components no test module names (as `plugins::NAME`): {unused:?}");
    Ok(())
}

#[test]
fn a_constant_is_found_only_by_its_whole_name() {
    assert!(names_constant("let _ = plugin(plugins::EVIL);", "EVIL"));
    assert!(names_constant("[plugins::EVIL]", "EVIL"));
    assert!(!names_constant("plugin(plugins::EVIL_FS)", "EVIL"));
    assert!(!names_constant("    // see plugins::EVIL", "EVIL"));
}
