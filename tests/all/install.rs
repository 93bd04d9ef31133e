//! The install path: `cargo xtask install --prefix DIR`, then `DIR/bin/wharf
//! run … --profile demo` from an unrelated directory finds its components in
//! `DIR/lib/wharf/plugins`; a binary copied away from its components says
//! how to fix that (`WHARF_PLUGIN_DIR`, `cargo xtask install`).

use std::path::Path;
use std::process::{Command, Output};

use anyhow::Context;

/// `BIN run TASK --profile demo` in a fresh workspace holding a README,
/// with a temp HOME and no `WHARF_PLUGIN_DIR`.
fn demo_run(bin: &Path, home: &Path, ws: &Path) -> Output {
    std::fs::write(ws.join("README.md"), "# A project\n\nIt does one thing well.\n").expect("writing README.md");
    Command::new(bin)
        .current_dir(ws)
        .env("HOME", home)
        .env_remove("WHARF_PLUGIN_DIR")
        .env_remove("DEEPSEEK_API_KEY")
        .env("WHARF_CACHE_DIR", wharf_tests::target_dir().join("test-cache"))
        .args(["run", "Summarise the README.", "--profile", "demo", "--no-watch"])
        .output()
        .expect("running the installed wharf")
}

#[test]
fn installed_wharf_runs_the_demo_from_any_directory() -> anyhow::Result<()> {
    let prefix = tempfile::tempdir().context("creating a temp dir")?;
    let out = wharf_tests::cargo()
        .current_dir(wharf_tests::root())
        .env_remove("WHARF_PLUGIN_DIR")
        .args(["xtask", "install", "--prefix"])
        .arg(prefix.path())
        .output()
        .context("running cargo")?;
    assert!(out.status.success(), "install failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let bin = prefix.path().join("bin/wharf");
    let plugins = prefix.path().join("lib/wharf/plugins");
    assert!(bin.is_file(), "{}", bin.display());
    for c in ["fs", "text", "llm-scripted", "context", "skills", "llm-deepseek"] {
        assert!(plugins.join(format!("{c}.wasm")).is_file(), "{c}.wasm not installed");
    }
    assert!(!plugins.join("evil.wasm").exists(), "test fixtures are not installed");

    let (home, ws) =
        (tempfile::tempdir().context("creating a temp dir")?, tempfile::tempdir().context("creating a temp dir")?);
    let out = demo_run(&bin, home.path(), ws.path());
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = std::fs::read_to_string(ws.path().join("SUMMARY.md")).context("reading SUMMARY.md")?;
    assert!(!summary.trim().is_empty(), "the scripted model wrote SUMMARY.md through the fs component");
    let doctor = Command::new(&bin)
        .current_dir(ws.path())
        .env("HOME", home.path())
        .arg("doctor")
        .output()
        .context("running the installed wharf")?;
    let stdout = String::from_utf8_lossy(&doctor.stdout);
    assert!(stdout.contains(&format!("plugin dir: {}", plugins.display())), "{stdout}");
    Ok(())
}

#[test]
fn a_binary_without_its_components_names_the_fix() -> anyhow::Result<()> {
    let prefix = tempfile::tempdir().context("creating a temp dir")?;
    std::fs::create_dir_all(prefix.path().join("bin")).context("creating bin")?;
    let bin = prefix.path().join("bin/wharf");
    std::fs::copy(wharf_tests::wharf_bin(), &bin).context("copying the wharf binary")?;
    let (home, ws) =
        (tempfile::tempdir().context("creating a temp dir")?, tempfile::tempdir().context("creating a temp dir")?);
    let out = demo_run(&bin, home.path(), ws.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("WHARF_PLUGIN_DIR"), "{stderr}");
    assert!(stderr.contains("cargo xtask install --prefix DIR"), "{stderr}");
    assert!(
        stderr.contains("missing: fs.wasm, text.wasm, context.wasm, policy-rules.wasm, llm-scripted.wasm"),
        "{stderr}"
    );
    // WHARF_PLUGIN_DIR fixes it.
    let out = Command::new(&bin)
        .current_dir(ws.path())
        .env("HOME", home.path())
        .env("WHARF_PLUGIN_DIR", wharf_tests::target_dir().join("plugins"))
        .env("WHARF_CACHE_DIR", wharf_tests::target_dir().join("test-cache"))
        .args(["run", "Summarise the README.", "--profile", "demo", "--no-watch"])
        .output()
        .context("running the installed wharf")?;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    Ok(())
}
