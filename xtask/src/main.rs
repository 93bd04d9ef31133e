//! `cargo xtask`: build the plugins, run the demo, run every test.
//!
//! - `cargo xtask build-plugins`: builds every component under `plugins/`
//!   and `tests/plugins/` for wasm32-wasip2 (adding the target if missing)
//!   and copies them to `target/plugins/NAME.wasm`.
//! - `cargo xtask demo`: builds `wharf` and the components its profiles name
//!   (not every plugin and test fixture), then runs an offline agent session
//!   with real components (and a real model when `DEEPSEEK_API_KEY` is set).
//! - `cargo xtask test [--no-lint] [--build-only]`: checks formatting,
//!   builds the plugins, `wharf` and the tests with clippy (`-D warnings`)
//!   as the workspace's compiler ([`Lint`]), runs every test, then lists
//!   every skipped test with its reason (a failure when `CI` is set).
//! - `cargo xtask lint`: `cargo fmt --check` and `cargo clippy` with
//!   `-D warnings`, without building (the same checks `test` makes).
//! - `cargo xtask install [--prefix DIR] [--release]`: `DIR/bin/wharf` and
//!   the first-party components in `DIR/lib/wharf/plugins` ([`install`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

mod bench;
mod build_only;
mod faults;
mod features;
mod fuzz;
mod install;
mod skips;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = root()?;
    scrub_cargo_env();
    match args.first().map(String::as_str) {
        Some("build-plugins") => build_plugins(&root).map(|_| ()),
        Some("test") => test(&root, &args[1..]),
        Some("demo") => demo(&root, &args[1..]),
        Some("lint") => lint(&root),
        Some("bench") => bench::run(&root, &args[1..]),
        Some("faults") => faults::run(&root, &args[1..]),
        Some("fuzz") => fuzz::run(&root, &args[1..]),
        Some("install") => install::run(&root, &args[1..]),
        _ => {
            eprintln!("usage: cargo xtask <build-plugins | demo | test | lint | bench | faults | fuzz | install>");
            std::process::exit(2);
        }
    }
}

fn root() -> Result<PathBuf> {
    let dir = std::env::var("CARGO_MANIFEST_DIR").context("run through `cargo xtask`")?;
    Path::new(&dir).parent().map(Path::to_path_buf).context("xtask has no parent dir")
}

/// Whether `name` is one of the variables cargo sets for the package it
/// runs (`cargo run` sets them for xtask, `cargo test` for test binaries).
///
/// A nested `cargo build` must not see them: build scripts that watch, say,
/// `CARGO_MANIFEST_DIR` (ring's does) would then rebuild the whole TLS stack
/// and everything above it each time the caller differs.
fn is_cargo_package_var(name: &str) -> bool {
    ["CARGO_PKG_", "CARGO_MANIFEST_", "CARGO_CRATE_", "CARGO_BIN_"].iter().any(|p| name.starts_with(p))
        || ["CARGO_PRIMARY_PACKAGE", "CARGO_TARGET_TMPDIR", "CARGO_RUSTC_CURRENT_DIR", "OUT_DIR"].contains(&name)
}

/// Drops cargo's per-package variables from this process, so every cargo
/// the xtask starts sees the environment a user's shell would have.
fn scrub_cargo_env() {
    let names: Vec<String> =
        std::env::vars_os().filter_map(|(k, _)| k.into_string().ok()).filter(|k| is_cargo_package_var(k)).collect();
    for name in names {
        // SAFETY: called at the start of `main`, before any thread exists.
        unsafe { std::env::remove_var(name) };
    }
}

pub(crate) fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("$ {cmd:?}");
    let status = cmd.status().with_context(|| format!("cannot run {cmd:?}"))?;
    if !status.success() {
        bail!("command failed ({status}): {cmd:?}");
    }
    Ok(())
}

fn ensure_wasm_target() -> Result<()> {
    let out = Command::new("rustup").args(["target", "list", "--installed"]).output();
    match out {
        Ok(o) if String::from_utf8_lossy(&o.stdout).lines().any(|l| l.trim() == "wasm32-wasip2") => Ok(()),
        Ok(_) => run(Command::new("rustup").args(["target", "add", "wasm32-wasip2"])),
        Err(e) => {
            eprintln!("warning: rustup not found ({e}); assuming wasm32-wasip2 is installed");
            Ok(())
        }
    }
}

/// A component crate: its directory name and package name.
struct PluginCrate {
    name: String,
    package: String,
    /// A test fixture (`tests/plugins/`): built for wasm only.
    fixture: bool,
    /// Its directory.
    dir: PathBuf,
}

fn plugin_crates(root: &Path) -> Result<Vec<PluginCrate>> {
    let mut out = Vec::new();
    for dir in ["plugins", "tests/plugins"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else { continue };
        let mut entries: Vec<_> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        entries.sort();
        for path in entries {
            let manifest = path.join("Cargo.toml");
            let Ok(text) = std::fs::read_to_string(&manifest) else { continue };
            // Only components: cdylib plugins and command fixtures (bins).
            // `plugins/` holds nothing else (shared guest libraries such as
            // `llm-wire` live under `sdk/`), so a library there is a mistake.
            let cdylib = text.lines().any(|l| l.trim_start().starts_with("crate-type") && l.contains("cdylib"));
            if !cdylib && !path.join("src/main.rs").exists() {
                if dir == "plugins" {
                    bail!("{}: not a component (no cdylib, no src/main.rs); put libraries under sdk/", path.display());
                }
                continue;
            }
            let package = text
                .lines()
                .skip_while(|l| l.trim() != "[package]")
                .find_map(|l| l.trim().strip_prefix("name = ").map(|n| n.trim_matches('"').to_string()))
                .with_context(|| format!("{}: no package name", manifest.display()))?;
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            out.push(PluginCrate { name, package, fixture: dir == "tests/plugins", dir: path.clone() });
        }
    }
    Ok(out)
}

pub(crate) fn build_plugins(root: &Path) -> Result<Vec<PathBuf>> {
    build_some_plugins(root, None)
}

/// Clippy (`-D warnings`) as the compiler of the workspace's own crates on
/// a real build: what `cargo clippy` sets up (`RUSTC_WORKSPACE_WRAPPER`
/// and `CLIPPY_ARGS`), but with code generation, so `cargo xtask test`
/// lints and builds in one compilation instead of checking every
/// dependency a second time. Dependencies are compiled by plain rustc, as
/// under `cargo clippy`.
#[derive(Debug, Clone)]
pub(crate) struct Lint {
    driver: PathBuf,
}

impl Lint {
    /// The toolchain's `clippy-driver`, or `None` when clippy is not
    /// installed (`rustup component add clippy`).
    fn find() -> Option<Lint> {
        let which = Command::new("rustup").args(["which", "clippy-driver"]).output();
        let driver = match which {
            Ok(o) if o.status.success() => PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()),
            _ => PathBuf::from("clippy-driver"),
        };
        let works = Command::new(&driver).arg("--version").output().is_ok_and(|o| o.status.success());
        works.then_some(Lint { driver })
    }

    /// Sets the wrapper on `cmd` (and, by inheritance, on every cargo it
    /// starts: the tests' own `cargo build -p wharf` then finds everything
    /// built).
    pub(crate) fn apply<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        // `cargo clippy -- -D warnings` passes its arguments to the driver
        // this way: joined by this separator.
        cmd.env("RUSTC_WORKSPACE_WRAPPER", &self.driver).env("CLIPPY_ARGS", "-D__CLIPPY_HACKERY__warnings")
    }
}

/// [`Lint::apply`] when linting.
fn linted<'a>(cmd: &'a mut Command, lint: Option<&Lint>) -> &'a mut Command {
    match lint {
        Some(l) => l.apply(cmd),
        None => cmd,
    }
}

/// Builds the components named in `only` (directory names), or every one
/// when `only` is `None`.
pub(crate) fn build_some_plugins(root: &Path, only: Option<&[String]>) -> Result<Vec<PathBuf>> {
    build_plugins_linted(root, only, None)
}

/// [`build_some_plugins`], linting the components (and the Rust SDK they
/// build on) when `lint` is given.
fn build_plugins_linted(root: &Path, only: Option<&[String]>, lint: Option<&Lint>) -> Result<Vec<PathBuf>> {
    ensure_wasm_target()?;
    let mut crates = plugin_crates(root)?;
    if let Some(only) = only {
        if let Some(missing) = only.iter().find(|n| !crates.iter().any(|c| &c.name == *n)) {
            bail!("no component `{missing}` under plugins/ or tests/plugins/");
        }
        crates.retain(|c| only.contains(&c.name));
    }
    let wasm_target = wasm_target_dir(root);
    let mut cmd = Command::new("cargo");
    cmd.current_dir(root).args(["build", "--target", "wasm32-wasip2", "--profile", "plugin", "--target-dir"]);
    cmd.arg(&wasm_target);
    // `monty` 1.4 (the `code` plugin's Python) declares rust-version 1.96
    // and builds on the workspace's 1.95.
    cmd.arg("--ignore-rust-version");
    for c in &crates {
        cmd.args(["-p", &c.package]);
    }
    if lint.is_some() {
        // What `cargo xtask lint` checks for wasm besides the components.
        cmd.args(["-p", "wharf-sdk"]);
    }
    run(linted(&mut cmd, lint))?;
    let target = target_dir(root);
    let out_dir = target.join("plugins");
    std::fs::create_dir_all(&out_dir)?;
    let mut built = Vec::new();
    for c in &crates {
        let src = wasm_target.join("wasm32-wasip2/plugin").join(format!("{}.wasm", c.package.replace('-', "_")));
        let dst = out_dir.join(format!("{}.wasm", c.name));
        if !src.exists() {
            // Command-style fixtures (bins) are named after the package.
            let bin = wasm_target.join("wasm32-wasip2/plugin").join(format!("{}.wasm", c.package));
            if bin.exists() {
                copy_if_changed(&bin, &dst)?;
                built.push(dst);
                continue;
            }
            bail!("{}: expected build output {}", c.name, src.display());
        }
        copy_if_changed(&src, &dst)?;
        built.push(dst);
    }
    eprintln!("built {} components into {}", built.len(), out_dir.display());
    Ok(built)
}

/// Copies only when the bytes differ, so file watchers and the compile cache
/// see no change when nothing changed.
fn copy_if_changed(src: &Path, dst: &Path) -> Result<()> {
    let new = std::fs::read(src)?;
    if std::fs::read(dst).ok().as_deref() != Some(&new[..]) {
        let tmp = dst.with_extension("wasm.tmp");
        std::fs::write(&tmp, &new)?;
        std::fs::rename(&tmp, dst)?;
    }
    Ok(())
}

/// The components' own build directory (`target/wasm`): apart from the
/// host's, so the two builds hold different locks and run at the same time
/// ([`build_all`]); they share no artifacts anyway (other target, other
/// profile).
fn wasm_target_dir(root: &Path) -> PathBuf {
    target_dir(root).join("wasm")
}

/// Builds the components and the `wharf` binary (`host_args` after
/// `cargo build`) concurrently: the components' single-threaded stretches
/// (LTO with one codegen unit) leave a core free that the host build uses.
pub(crate) fn build_all(root: &Path, host_args: &[&str]) -> Result<Vec<PathBuf>> {
    build_all_with(root, host_args, None)
}

/// [`build_all`] with only the components named in `only` (every one when
/// `None`).
fn build_all_with(root: &Path, host_args: &[&str], only: Option<&[String]>) -> Result<Vec<PathBuf>> {
    let started = std::time::Instant::now();
    let (built, plugins_took, host_took) = std::thread::scope(|s| {
        let plugins = s.spawn(|| {
            let built = build_some_plugins(root, only);
            (built, started.elapsed())
        });
        let mut host = Command::new("cargo");
        host.current_dir(root).arg("build").args(host_args);
        // A first build compiles every workspace crate from nothing, where
        // incremental compilation only adds work (wharf-core: 2.3x the CPU);
        // later builds keep cargo's default, or what the caller set.
        if std::env::var_os("CARGO_INCREMENTAL").is_none() && !target_dir(root).join("debug/wharf").exists() {
            host.env("CARGO_INCREMENTAL", "0");
        }
        let host = run(&mut host);
        let host_took = started.elapsed();
        let (plugins, plugins_took) =
            plugins.join().map_err(|_| anyhow::anyhow!("the component build thread panicked"))?;
        host?;
        anyhow::Ok((plugins?, plugins_took, host_took))
    })?;
    eprintln!(
        "built in {:.0} s: components {:.0} s, wharf {:.0} s (at the same time)",
        started.elapsed().as_secs_f64(),
        plugins_took.as_secs_f64(),
        host_took.as_secs_f64()
    );
    Ok(built)
}

pub(crate) fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"))
}

/// Builds the plugins and runs every test, then prints the skip summary
/// ([`skips`]) — also when tests failed; with `CI` set a skip fails it.
fn test(root: &Path, extra: &[String]) -> Result<()> {
    let started = std::time::Instant::now();
    // xtask's own options come first, before cargo's: `--no-lint` skips the
    // style checks, `--build-only` builds (and lints) everything the run
    // needs and runs nothing (`.ci/run` does so while the toolchains the
    // tests need are still installing).
    let mut extra = extra;
    let (mut lint_wanted, mut build_only) = (true, false);
    while let Some(first) = extra.first() {
        match first.as_str() {
            "--no-lint" => lint_wanted = false,
            "--build-only" => build_only = true,
            _ => break,
        }
        extra = &extra[1..];
    }
    let skip_file = target_dir(root).join("test-skips.txt");
    std::fs::create_dir_all(target_dir(root))?;
    std::fs::write(&skip_file, "")?;
    let lint = if lint_wanted { lint_before_build(root, &skip_file)? } else { None };
    let lint = lint.as_ref();
    // The MCP fixture builds with the binary (`wharf_tests::MCP_FIXTURE_BUILD`,
    // the same features), so the MCP tests find it built instead of
    // compiling rmcp and axum again while other tests wait.
    // The components build (its own target directory and lock) alongside
    // the binary *and* the test targets: their serial stretches (LTO
    // links, the large test binaries' links) overlap instead of following
    // each other. `cargo test --no-run` with the arguments `run_tests` uses
    // compiles exactly what that run then finds built.
    let crates = plugin_crates(root)?;
    let mut no_run: Vec<String> = vec!["test".into(), "--no-run".into()];
    if lint.is_some() {
        // Benches and examples too: every target `cargo xtask lint` checks.
        no_run.push("--all-targets".into());
    }
    no_run.extend(host_selection(&crates));
    // Cargo's own options only: what follows `--` is for the test binaries.
    no_run.extend(extra.iter().take_while(|a| *a != "--").cloned());
    std::thread::scope(|s| -> Result<()> {
        let plugins = s.spawn(|| build_plugins_linted(root, None, lint));
        let mut components_no_run = vec!["test".to_string(), "--no-run".into()];
        if lint.is_some() {
            components_no_run.push("--all-targets".into());
        }
        components_no_run.extend(component_test_selection(&crates));
        let host = run(linted(
            Command::new("cargo").current_dir(root).args(["build", "-p", "wharf", "-p", "wharf-mcp-fixture"]),
            lint,
        ))
        .and_then(|()| run(linted(Command::new("cargo").current_dir(root).args(&no_run), lint)))
        .and_then(|()| run(linted(Command::new("cargo").current_dir(root).args(&components_no_run), lint)));
        let plugins = plugins.join().map_err(|_| anyhow::anyhow!("the component build thread panicked"))?;
        host?;
        plugins.map(|_| ())
    })?;
    let built = started.elapsed();
    if build_only {
        eprintln!(
            "cargo xtask test --build-only: {:.0} s building (components, wharf, test targets)",
            built.as_secs_f64()
        );
        return Ok(());
    }
    let result = run_tests(root, extra, &skip_file, lint);
    let (summary, skip_failure) = skips::summary(&skips::read(&skip_file), skips::in_ci());
    eprintln!("\n{summary}");
    eprintln!(
        "cargo xtask test: {:.0} s building (components, wharf, test targets), {:.0} s testing",
        built.as_secs_f64(),
        (started.elapsed() - built).as_secs_f64()
    );
    result?;
    if skip_failure {
        bail!("tests were skipped and CI is set (see the summary above)");
    }
    Ok(())
}

fn run_tests(root: &Path, extra: &[String], skip_file: &Path, lint: Option<&Lint>) -> Result<()> {
    let crates = plugin_crates(root)?;
    let mut cmd = Command::new("cargo");
    cmd.env("WHARF_SKIP_FILE", skip_file);
    cmd.current_dir(root).args(["test", "--no-fail-fast"]).args(host_selection(&crates)).args(extra);
    let host = run(linted(&mut cmd, lint));
    // First-party components also build natively, so their unit tests run
    // too — in a separate invocation, so their dependencies' features do
    // not change the host's and wasmtime is compiled once. The fixtures
    // under tests/plugins are wasm-only.
    let mut cmd = Command::new("cargo");
    cmd.env("WHARF_SKIP_FILE", skip_file);
    cmd.current_dir(root).args(["test", "--no-fail-fast"]).args(component_test_selection(&crates));
    if lint.is_some() {
        cmd.arg("--all-targets");
    }
    let components = run(linted(&mut cmd, lint));
    host.and(components)
}

/// The host side of the native build: the workspace without the SDK and
/// the components.
fn host_selection(crates: &[PluginCrate]) -> Vec<String> {
    let mut args = vec!["--workspace".to_string(), "--exclude".into(), "wharf-sdk".into()];
    for c in crates {
        args.extend(["--exclude".to_string(), c.package.clone()]);
    }
    args
}

/// The first-party components built natively for their unit tests. A
/// crate without a test of its own is left out: compiling it natively for
/// nothing (boa in `plugins/code`) costs minutes.
fn component_test_selection(crates: &[PluginCrate]) -> Vec<String> {
    let mut args = Vec::new();
    for c in crates.iter().filter(|c| !c.fixture && has_tests(&c.dir)) {
        args.extend(["-p".to_string(), c.package.clone()]);
    }
    args
}

/// Whether any Rust source under `dir/src` or `dir/tests` holds a test.
fn has_tests(dir: &Path) -> bool {
    fn walk(p: &Path) -> bool {
        let Ok(entries) = std::fs::read_dir(p) else { return false };
        entries.filter_map(|e| e.ok()).map(|e| e.path()).any(|p| {
            if p.is_dir() {
                walk(&p)
            } else {
                p.extension().is_some_and(|e| e == "rs")
                    && std::fs::read_to_string(&p).is_ok_and(|t| t.contains("#[test]") || t.contains("#[tokio::test"))
            }
        })
    }
    walk(&dir.join("src")) || dir.join("tests").is_dir()
}

/// fmt, clippy (host and components) and the feature-parity check.
/// The style checks of `cargo xtask test`: formatting and the feature
/// parity check now, clippy during the build ([`Lint`]). Without clippy
/// installed the lint is a skip in the summary (a failure under `CI`).
fn lint_before_build(root: &Path, skip_file: &Path) -> Result<Option<Lint>> {
    run(Command::new("cargo").current_dir(root).args(["fmt", "--all", "--", "--check"]))?;
    let mut excluded = vec!["wharf-sdk".to_string()];
    excluded.extend(plugin_crates(root)?.into_iter().map(|c| c.package));
    features::check(root, &excluded)?;
    build_only::check(root)?;
    let lint = Lint::find();
    if lint.is_none() {
        let line = "WHARF-SKIP xtask::lint (clippy): clippy-driver not found (rustup component add clippy)\n";
        std::fs::write(skip_file, line)?;
    }
    Ok(lint)
}

fn lint(root: &Path) -> Result<()> {
    run(Command::new("cargo").current_dir(root).args(["fmt", "--all", "--", "--check"]))?;
    // Every crate `cargo xtask test` compiles natively is linted with its
    // tests, in the same two invocations (so features match and nothing is
    // built twice): the workspace without the components, then the
    // components that have native unit tests.
    let crates = plugin_crates(root)?;
    for selection in [host_selection(&crates), component_test_selection(&crates)] {
        run(Command::new("cargo")
            .current_dir(root)
            .args(["clippy", "--all-targets"])
            .args(selection)
            .args(["--", "-D", "warnings"]))?;
    }
    let mut cmd = Command::new("cargo");
    cmd.current_dir(root).args(["clippy", "--ignore-rust-version", "--target", "wasm32-wasip2", "-p", "wharf-sdk"]);
    for c in &crates {
        cmd.args(["-p", &c.package]);
    }
    cmd.args(["--", "-D", "warnings"]);
    run(&mut cmd)?;
    let mut excluded = vec!["wharf-sdk".to_string()];
    excluded.extend(crates.into_iter().map(|c| c.package));
    features::check(root, &excluded)?;
    build_only::check(root)
}

/// The components a shipped profile names (`${plugin_dir}/NAME.wasm`),
/// following `extends`: what `cargo xtask demo` builds, so a newcomer's
/// first run compiles five small components rather than every plugin and
/// test fixture.
fn profile_components(root: &Path, profile: &str) -> Result<Vec<String>> {
    let mut names = Vec::new();
    let mut next = Some(profile.to_string());
    let mut seen = Vec::new();
    while let Some(p) = next.take() {
        if seen.contains(&p) {
            bail!("profile `{p}` extends itself");
        }
        let path = root.join("profiles").join(format!("{p}.toml"));
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        for line in text.lines().map(str::trim).filter(|l| !l.starts_with('#')) {
            if let Some(rest) = line.strip_prefix("extends") {
                next = Some(rest.trim_start_matches([' ', '=']).trim().trim_matches('"').to_string());
            }
            let Some(at) = line.find("${plugin_dir}/") else { continue };
            let file = &line[at + "${plugin_dir}/".len()..];
            if let Some(name) = file.split(".wasm").next().filter(|n| !n.is_empty() && file.contains(".wasm"))
                && !names.iter().any(|n| n == name)
            {
                names.push(name.to_string());
            }
        }
        seen.push(p);
    }
    Ok(names)
}

fn demo(root: &Path, extra: &[String]) -> Result<()> {
    let mut components = profile_components(root, "demo")?;
    if std::env::var("DEEPSEEK_API_KEY").is_ok_and(|k| !k.is_empty()) {
        for name in profile_components(root, "demo-deepseek")? {
            if !components.contains(&name) {
                components.push(name);
            }
        }
    }
    // Only what the session needs: `run` and `sessions` over components and
    // JSONL logs. The other surfaces, the MCP client, OCI and PostgreSQL
    // are the binary's default features; every crate this build shares
    // with the full one is compiled exactly as the full build (and the
    // tests) will use it (`features::check_demo`), so a later `cargo
    // xtask test` or `install` only adds what the demo left out.
    build_all_with(root, &["-q", "-p", "wharf", "--no-default-features"], Some(&components))?;
    let target = target_dir(root);
    let wharf = target.join("debug/wharf");
    // A throwaway workspace: the model may only touch this directory.
    let ws = target.join("demo/workspace");
    let _ = std::fs::remove_dir_all(&ws);
    std::fs::create_dir_all(ws.join("wit"))?;
    std::fs::copy(root.join("README.md"), ws.join("README.md"))?;
    for entry in std::fs::read_dir(root.join("wit/since_v0.1.0"))? {
        let p = entry?.path();
        if p.extension().is_some_and(|e| e == "wit")
            && let Some(name) = p.file_name()
        {
            std::fs::copy(&p, ws.join("wit").join(name))?;
        }
    }
    let sessions = target.join("demo/sessions");
    let session_dir = sessions.display().to_string();
    let task = extra.first().cloned().unwrap_or_else(|| {
        "List the workspace, read README.md and write a short summary of the project to SUMMARY.md.".to_string()
    });
    eprintln!("\n== offline demo: scripted model, real sandboxed components (workspace {}) ==\n", ws.display());
    let session_started = std::time::Instant::now();
    run(Command::new(&wharf).current_dir(&ws).args([
        "run",
        &task,
        "--profile",
        "demo",
        "--session-dir",
        &session_dir,
    ]))?;
    let session_took = session_started.elapsed();
    let summary = std::fs::read_to_string(ws.join("SUMMARY.md")).context("the demo did not write SUMMARY.md")?;
    eprintln!("\n-- SUMMARY.md written by the agent through the fs component --\n{summary}");
    eprintln!("(the session took {:.1} s)", session_took.as_secs_f64());
    if std::env::var("DEEPSEEK_API_KEY").is_ok_and(|k| !k.is_empty()) {
        eprintln!("\n== the same task against DeepSeek (DEEPSEEK_API_KEY is set) ==\n");
        let _ = std::fs::remove_file(ws.join("SUMMARY.md"));
        run(Command::new(&wharf).current_dir(&ws).args([
            "run",
            &task,
            "--profile",
            "demo-deepseek",
            "--session-dir",
            &session_dir,
        ]))?;
    } else {
        eprintln!("\n(set DEEPSEEK_API_KEY to run the same session against a real model)");
    }
    eprintln!(
        "\nsession logs: {}\nreplay one with: {} sessions show ID --session-dir {}",
        sessions.display(),
        wharf.display(),
        sessions.display()
    );
    eprintln!(
        "this build of wharf has what the demo needs (run, sessions, config, doctor); \
         `cargo xtask install` builds and installs every surface (chat, web, serve, acp, mcp, plugin)"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The demo's smaller build of `wharf` compiles every crate it shares
    /// with the full build the same way (so `cargo xtask test` or
    /// `install` after the demo compiles only what the demo left out).
    #[test]
    fn the_demo_build_shares_its_crates_with_the_full_build() -> Result<()> {
        features::check_demo(&root()?)
    }

    /// The demo builds what its profile loads, and each of those is a
    /// component crate `build-plugins` knows.
    #[test]
    fn the_demo_builds_its_profiles_components() -> Result<()> {
        let root = root()?;
        let demo = profile_components(&root, "demo")?;
        assert_eq!(demo, ["fs", "text", "context", "policy-rules", "llm-scripted"]);
        let with_model = profile_components(&root, "demo-deepseek")?;
        assert!(with_model.iter().any(|n| n == "llm-deepseek"), "{with_model:?}");
        assert!(with_model.iter().any(|n| n == "text"), "{with_model:?}");
        let crates = plugin_crates(&root)?;
        for name in demo.iter().chain(&with_model) {
            assert!(crates.iter().any(|c| &c.name == name && !c.fixture), "{name} is not a first-party component");
        }
        Ok(())
    }
}
