//! Tests on a fresh machine: a test that cannot run what it is about says
//! so (`wharf_tests::skip`, listed by `cargo xtask test`, a failure under
//! `CI`), and building the JavaScript example never rewrites a tracked
//! lockfile (`cargo xtask bench` and the plugin tests build it).

use std::path::Path;
use std::process::Command;

use anyhow::Context;

/// Not a test of its own: the child run by
/// `a_skip_is_printed_past_the_capture_recorded_and_fails_under_ci`. Does
/// nothing unless `WHARF_SKIP_PROBE` is set.
#[test]
fn skip_probe() {
    if std::env::var_os("WHARF_SKIP_PROBE").is_some() {
        wharf_tests::skip(&wharf_tests::current_test(), "probe: nothing to\ntest here");
    }
}

#[test]
fn a_skip_is_printed_past_the_capture_recorded_and_fails_under_ci() -> anyhow::Result<()> {
    let dir = tempfile::tempdir().context("creating a temp dir")?;
    let file = dir.path().join("skips.txt");
    let exe = std::env::current_exe().context("the test binary's path")?;
    let probe = |ci: Option<&str>| -> anyhow::Result<std::process::Output> {
        let mut c = Command::new(&exe);
        // Captured output, as `cargo test` runs it.
        c.args(["fresh_machine::skip_probe", "--exact", "--test-threads", "2"])
            .env("WHARF_SKIP_PROBE", "1")
            .env(wharf_tests::SKIP_FILE_ENV, &file)
            .env_remove("CI");
        if let Some(v) = ci {
            c.env("CI", v);
        }
        c.output().context("running the test binary")
    };
    let line = "WHARF-SKIP fresh_machine::skip_probe: probe: nothing to test here";
    let out = probe(None)?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "a skip alone is not a failure: {stderr}");
    assert!(stderr.lines().any(|l| l == line), "the skip line is not on stderr: {stderr}");
    assert_eq!(std::fs::read_to_string(&file).context("reading the file")?, format!("{line}\n"));
    // An empty CI counts as unset; any value makes the skip a failure.
    assert!(probe(Some(""))?.status.success());
    let out = probe(Some("true"))?;
    assert!(!out.status.success(), "under CI a skip must fail the test");
    assert!(String::from_utf8_lossy(&out.stdout).contains("CI is set, so a skip is a failure"));
    // …and is still listed (three runs: three lines).
    assert_eq!(std::fs::read_to_string(&file).context("reading the file")?, format!("{line}\n").repeat(3));
    Ok(())
}

fn on_path(name: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|d| d.join(name).is_file())
}

fn copy(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.parent().unwrap_or(to)).expect("creating the parent directory");
    std::fs::copy(from, to).expect("copying the file");
}

#[test]
fn building_a_js_plugin_never_rewrites_its_lockfile() -> anyhow::Result<()> {
    if !on_path("npm") || !on_path("node") {
        wharf_tests::skip("fresh_machine::building_a_js_plugin_never_rewrites_its_lockfile", "npm or node is missing");
        return Ok(());
    }
    // The example with its SDK beside it (`"wharf-sdk": "file:../.."`), and
    // a lockfile that no longer matches the SDK's package.json exactly: what
    // `npm install` would rewrite.
    let root = wharf_tests::root();
    let tmp = tempfile::tempdir().context("creating a temp dir")?;
    let sdk = tmp.path().join("sdk/js");
    copy(&root.join("sdk/js/package.json"), &sdk.join("package.json"));
    let example = sdk.join("examples/json_diff");
    for f in ["package.json", "app.js"] {
        copy(&root.join("sdk/js/examples/json_diff").join(f), &example.join(f));
    }
    let lock = std::fs::read_to_string(root.join("sdk/js/examples/json_diff/package-lock.json"))
        .context("reading sdk/js/examples/json_diff/package-lock.json")?;
    let stale: String = lock.lines().filter(|l| !l.contains("preview2-shim")).map(|l| format!("{l}\n")).collect();
    std::fs::write(example.join("package-lock.json"), &stale).context("writing package-lock.json")?;
    let out = wharf_tests::wharf(tmp.path())
        .args(["plugin", "build"])
        .arg(&example)
        .arg("-o")
        .arg(tmp.path().join("json_diff.wasm"))
        .output()
        .context("running wharf plugin build")?;
    // The build itself may stop later for want of componentize-js; the npm
    // step ran either way.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(example.join("node_modules/wharf-sdk").exists(), "the dependencies were not installed: {stderr}");
    assert_eq!(
        std::fs::read_to_string(example.join("package-lock.json")).context("reading package-lock.json")?,
        stale,
        "the build rewrote the lockfile: {stderr}"
    );
    Ok(())
}

/// Not a test of its own: the child run by
/// `linking_the_test_binary_leaves_no_temporary_name`. Does nothing unless
/// `WHARF_BIN_LINK_PROBE` is set.
#[test]
fn bin_link_probe() {
    if std::env::var_os("WHARF_BIN_LINK_PROBE").is_some() {
        let _ = wharf_tests::wharf_bin();
    }
}

/// Every test process links the built `wharf` into `target/test-bin`
/// through a temporary name. When the link already names the same binary
/// (every process after the first, until the next build), renaming over it
/// does nothing: the temporary name must still go, or each process leaves
/// one behind that keeps an old binary on disk.
#[test]
fn linking_the_test_binary_leaves_no_temporary_name() -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("the test binary's path")?;
    let dir = wharf_tests::target_dir().join("test-bin");
    for _ in 0..2 {
        let child = Command::new(&exe)
            .args(["fresh_machine::bin_link_probe", "--exact"])
            .env("WHARF_BIN_LINK_PROBE", "1")
            .stdout(std::process::Stdio::null())
            .spawn()
            .context("running the probe")?;
        let pid = child.id();
        let out = child.wait_with_output().context("waiting for the probe")?;
        anyhow::ensure!(out.status.success(), "the probe failed: {:?}", out.status);
        let tmp = dir.join(format!("wharf.{pid}"));
        anyhow::ensure!(!tmp.exists(), "{} was left behind", tmp.display());
    }
    anyhow::ensure!(dir.join("wharf").exists(), "no test-bin/wharf");
    Ok(())
}

/// The crates `wharf --no-default-features` (the demo's build) compiles
/// with other features than the full build: each one's manifest directory.
const DEMO_FEATURED_DIRS: &[&str] = &["host/cli", "host/surface/chat", "host/cli-common", "host/dist", "host/harness"];

/// `cargo xtask demo` builds `wharf` without its default features. That
/// build compiles nothing the full build has not (every shared crate,
/// wasmtime first, is built the same way), runs the demo's session, and
/// each command or profile row it leaves out says what to build instead.
#[test]
fn the_demo_build_runs_the_demo_and_names_what_it_leaves_out() -> anyhow::Result<()> {
    use anyhow::ensure;
    use wharf_tests::{cargo, plugins, root, target_dir, wharf_bin};

    // The full build first (and linked for the other tests): the demo's
    // build must then find every crate but its own few already built.
    let _ = wharf_bin();
    let _ = wharf_tests::plugin(plugins::FS);
    let out = cargo()
        .current_dir(root())
        .args(["build", "-p", "wharf", "--no-default-features", "--message-format=json-render-diagnostics"])
        .output()?;
    ensure!(out.status.success(), "the demo's build failed: {}", String::from_utf8_lossy(&out.stderr));
    let mut compiled = Vec::new();
    let mut exe = None;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        if let Some(e) = msg["executable"].as_str() {
            exe = Some(std::path::PathBuf::from(e));
        }
        if msg["fresh"] == false {
            compiled.push(msg["manifest_path"].as_str().unwrap_or_default().to_string());
        }
    }
    let own =
        |manifest: &str| DEMO_FEATURED_DIRS.iter().any(|d| Path::new(manifest) == root().join(d).join("Cargo.toml"));
    let shared: Vec<_> = compiled.iter().filter(|m| !own(m)).collect();
    ensure!(shared.is_empty(), "the demo's build compiled crates the full build had built otherwise: {shared:?}");
    let exe = exe.context("the demo's build named no executable")?;
    // A copy, then the full binary back in place for the other tests.
    let bin = tempfile::tempdir()?;
    let demo = bin.path().join("wharf");
    std::fs::copy(&exe, &demo)?;
    let restored = cargo().current_dir(root()).args(["build", "-q", "-p", "wharf"]).status()?;
    ensure!(restored.success(), "rebuilding the full wharf failed");

    let home = tempfile::tempdir()?;
    let ws = tempfile::tempdir()?;
    std::fs::copy(root().join("README.md"), ws.path().join("README.md"))?;
    let run = |args: &[&str]| -> anyhow::Result<std::process::Output> {
        let mut c = Command::new(&demo);
        wharf_tests::scrub_cargo_env(&mut c);
        Ok(c.current_dir(ws.path())
            .env("HOME", home.path())
            .env("WHARF_CACHE_DIR", target_dir().join("test-cache"))
            .env("WHARF_PLUGIN_DIR", target_dir().join("plugins"))
            .env_remove("DEEPSEEK_API_KEY")
            .args(args)
            .output()?)
    };
    let sessions = home.path().join("sessions").display().to_string();
    let task = "List the workspace, read README.md and write a short summary of the project to SUMMARY.md.";
    let out = run(&["run", task, "--profile", "demo", "--session-dir", &sessions])?;
    ensure!(out.status.success(), "the demo session failed: {}", String::from_utf8_lossy(&out.stderr));
    let summary = std::fs::read_to_string(ws.path().join("SUMMARY.md")).context("no SUMMARY.md")?;
    ensure!(summary.contains("# Summary"), "{summary}");
    let out = run(&["sessions", "list", "--session-dir", &sessions])?;
    ensure!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("completed"), "{out:?}");

    for command in [&["serve"][..], &["chat", "--profile", "demo"], &["mcp", "list"], &["plugin", "new", "x"]] {
        let out = run(command)?;
        let err = String::from_utf8_lossy(&out.stderr);
        ensure!(out.status.code() == Some(2), "`wharf {}` exited {:?}: {err}", command[0], out.status.code());
        ensure!(
            err.contains(&format!("`wharf {}` is not in this build", command[0]))
                && err.contains("cargo xtask install"),
            "{err}"
        );
    }
    // A profile row the build cannot serve is refused, not ignored.
    let profile = home.path().join("with-mcp.toml");
    std::fs::write(&profile, "extends = \"demo\"\n\n[[mcp]]\nname = \"files\"\ncommand = \"true\"\n")?;
    let out = run(&["run", "hi", "--profile", &profile.display().to_string(), "--session-dir", &sessions])?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(!out.status.success() && err.contains("built without the MCP client") && err.contains("files"), "{err}");
    Ok(())
}
