//! Support code for the end-to-end tests: where the built components and the
//! `wharf` binary are, building them on first use when a test runs alone.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Once;

use anyhow::Context;

pub mod pg;

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

/// The cargo target directory.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("target"))
}

/// A `cargo` command without the variables cargo set for this test binary
/// (`CARGO_MANIFEST_DIR`, `CARGO_PKG_*`, …).
///
/// Build scripts that watch one of them (ring's watches
/// `CARGO_MANIFEST_DIR`) would otherwise rebuild the TLS stack and the
/// `wharf` binary every time a test builds it, and again for the next
/// caller — minutes per test run.
pub fn cargo() -> Command {
    let mut c = Command::new("cargo");
    scrub_cargo_env(&mut c);
    c
}

/// Removes cargo's per-package variables from what `cmd` inherits.
pub fn scrub_cargo_env(cmd: &mut Command) {
    for (name, _) in std::env::vars_os() {
        let Some(n) = name.to_str() else { continue };
        let package_var =
            ["CARGO_PKG_", "CARGO_MANIFEST_", "CARGO_CRATE_", "CARGO_BIN_"].iter().any(|p| n.starts_with(p))
                || ["CARGO_PRIMARY_PACKAGE", "CARGO_TARGET_TMPDIR", "CARGO_RUSTC_CURRENT_DIR", "OUT_DIR"].contains(&n);
        if package_var {
            cmd.env_remove(&name);
        }
    }
}

static PLUGINS: Once = Once::new();
static BINARY: Once = Once::new();

/// Path of a built component (`target/plugins/NAME.wasm`), building all
/// components once if it is missing.
pub fn plugin(name: &str) -> PathBuf {
    let path = target_dir().join("plugins").join(format!("{name}.wasm"));
    if !path.exists() {
        PLUGINS.call_once(|| {
            let ok = cargo()
                .current_dir(root())
                .args(["xtask", "build-plugins"])
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            assert!(ok, "cargo xtask build-plugins failed");
        });
    }
    assert!(path.exists(), "component {} was not built", path.display());
    path
}

/// Path of the `wharf` binary, built once per test process.
///
/// The tests run a hard link of `target/debug/wharf` taken after that
/// build (`target/test-bin/wharf`), not the file itself: a test that runs
/// `cargo build` (the install test) may replace `target/debug/wharf` while
/// others start it, and a replaced file is briefly missing.
pub fn wharf_bin() -> PathBuf {
    static LINKED: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let built = target_dir().join("debug").join("wharf");
    BINARY.call_once(|| {
        let ok = cargo()
            .current_dir(root())
            .args(["build", "-q", "-p", "wharf"])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "cargo build -p wharf failed");
    });
    LINKED
        .get_or_init(|| {
            let dir = target_dir().join("test-bin");
            let link = dir.join("wharf");
            let tmp = dir.join(format!("wharf.{}", std::process::id()));
            let linked = std::fs::create_dir_all(&dir)
                .and_then(|()| {
                    let _ = std::fs::remove_file(&tmp);
                    std::fs::hard_link(&built, &tmp)
                })
                .and_then(|()| std::fs::rename(&tmp, &link));
            match linked {
                Ok(()) => link,
                Err(e) => {
                    eprintln!(
                        "wharf-tests: cannot link {} into {}: {e}; using it in place",
                        built.display(),
                        dir.display()
                    );
                    built.clone()
                }
            }
        })
        .clone()
}

/// A test fixture file under `tests/fixtures/`.
pub fn fixture(name: &str) -> PathBuf {
    root().join("tests/fixtures").join(name)
}

/// A `wharf` command with an isolated home and compile cache.
pub fn wharf(home: &Path) -> Command {
    let mut c = Command::new(wharf_bin());
    scrub_cargo_env(&mut c);
    c.env("HOME", home)
        .env("WHARF_CACHE_DIR", target_dir().join("test-cache"))
        .env_remove("DEEPSEEK_API_KEY")
        .env("WHARF_LOG", "warn");
    c
}

/// Every line of `text` (the `--output jsonl` of a run) as JSON; the
/// error names the line that is not.
pub fn json_lines(text: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    text.lines().map(|l| serde_json::from_str(l).with_context(|| format!("not a JSON line: {l}"))).collect()
}

/// The marker starting every skip line: `WHARF-SKIP <test>: <reason>`.
pub const SKIP_MARKER: &str = "WHARF-SKIP";

/// The marker of an expected skip (an optional secret is absent):
/// `WHARF-SKIP-OPTIONAL <test>: <reason>`. Listed, never a failure.
pub const OPTIONAL_SKIP_MARKER: &str = "WHARF-SKIP-OPTIONAL";

/// The variable naming a file every skip line is appended to
/// (`cargo xtask test` sets it and prints the lines as a summary).
pub const SKIP_FILE_ENV: &str = "WHARF_SKIP_FILE";

/// The name of the running test: libtest names each test's thread after
/// it (`module::test`); `"?"` elsewhere.
pub fn current_test() -> String {
    std::thread::current().name().filter(|n| *n != "main").unwrap_or("?").to_string()
}

/// Whether `CI` is set (to anything but the empty string).
pub fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

/// One skip line, newlines in `reason` flattened (the line is parsed).
pub fn skip_line(marker: &str, test: &str, reason: &str) -> String {
    let flat = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    format!("{marker} {}: {}", flat(test), flat(reason))
}

fn report_skip(line: &str) {
    use std::io::Write;
    // Straight to the process's stderr: libtest captures `eprintln!` of a
    // passing test, and a skip must be seen.
    let _ = writeln!(std::io::stderr().lock(), "{line}");
    if let Some(path) = std::env::var_os(SKIP_FILE_ENV) {
        // One short `O_APPEND` write per line: parallel tests do not interleave.
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path);
        if let Ok(mut f) = file {
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }
}

/// Reports that `test` did not test what it is about because of `reason`
/// (a missing toolchain, browser, namespace support …): prints
/// `WHARF-SKIP <test>: <reason>` to stderr (uncaptured) and to the file in
/// `$WHARF_SKIP_FILE`; `cargo xtask test` lists every such line at the end.
/// When `CI` is set it then panics: in CI a skip is a failure (still listed
/// in the summary). The caller returns after it.
pub fn skip(test: &str, reason: &str) {
    let line = skip_line(SKIP_MARKER, test, reason);
    report_skip(&line);
    if in_ci() {
        panic!("{line} (CI is set, so a skip is a failure)");
    }
}

/// Like [`skip`] for what is expected to be absent even in CI (a real
/// provider's API key, which forks and clean clones do not have): listed as
/// `WHARF-SKIP-OPTIONAL <test>: <reason>`, never a failure.
pub fn skip_optional(test: &str, reason: &str) {
    report_skip(&skip_line(OPTIONAL_SKIP_MARKER, test, reason));
}
