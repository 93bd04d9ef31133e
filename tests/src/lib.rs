//! Support code for the end-to-end tests: where the built components and the
//! `wharf` binary are, building them on first use when a test runs alone.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Once;

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(Path::to_path_buf).unwrap_or_default()
}

/// The cargo target directory.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("target"))
}

static PLUGINS: Once = Once::new();
static BINARY: Once = Once::new();

/// Path of a built component (`target/plugins/NAME.wasm`), building all
/// components once if it is missing.
pub fn plugin(name: &str) -> PathBuf {
    let path = target_dir().join("plugins").join(format!("{name}.wasm"));
    if !path.exists() {
        PLUGINS.call_once(|| {
            let ok = Command::new("cargo")
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

/// Path of the `wharf` binary, building it once if missing.
pub fn wharf_bin() -> PathBuf {
    let path = target_dir().join("debug").join("wharf");
    BINARY.call_once(|| {
        let ok = Command::new("cargo")
            .current_dir(root())
            .args(["build", "-q", "-p", "wharf"])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "cargo build -p wharf failed");
    });
    path
}

/// A test fixture file under `tests/fixtures/`.
pub fn fixture(name: &str) -> PathBuf {
    root().join("tests/fixtures").join(name)
}

/// A `wharf` command with an isolated home and compile cache.
pub fn wharf(home: &Path) -> Command {
    let mut c = Command::new(wharf_bin());
    c.env("HOME", home)
        .env("WHARF_CACHE_DIR", target_dir().join("test-cache"))
        .env_remove("DEEPSEEK_API_KEY")
        .env("WHARF_LOG", "warn");
    c
}
