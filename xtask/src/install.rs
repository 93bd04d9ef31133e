//! `cargo xtask install [--prefix DIR] [--release]`: `wharf` and its
//! first-party components, installed so that `wharf` on the PATH works from
//! any directory.
//!
//! Layout (the binary looks for `../lib/wharf/plugins` next to itself, see
//! `plugin_dir` in `host/cli-common/src/args.rs`):
//!
//! ```text
//! DIR/bin/wharf
//! DIR/lib/wharf/plugins/NAME.wasm     # every crate under plugins/
//! ```
//!
//! `DIR` defaults to `~/.local`. The binary is the `dev` profile's build
//! (what tests and the demo use: Wharf's crates at opt-level 1, every
//! dependency — wasmtime, Cranelift — at opt-level 2 without debug
//! assertions), so an install after `cargo xtask test` or `demo` only copies
//! files; `--release` builds with the release profile instead (a fresh
//! release build of wasmtime takes 10+ minutes on 2 cores). Components are
//! always the optimised `plugin` profile. Test fixtures (`tests/plugins/`)
//! are not installed. Files are replaced atomically (written next to the
//! target, then renamed), so a running `wharf` is not disturbed.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// What an install wrote.
pub(crate) struct Installed {
    /// `DIR/bin/wharf`.
    pub(crate) binary: PathBuf,
    /// `DIR/lib/wharf/plugins`.
    pub(crate) plugin_dir: PathBuf,
    /// The component file names installed there.
    pub(crate) components: Vec<String>,
}

/// Parses the arguments and installs.
pub(crate) fn run(root: &Path, args: &[String]) -> Result<()> {
    let mut prefix: Option<PathBuf> = None;
    let mut release = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--prefix" => prefix = Some(PathBuf::from(it.next().context("--prefix needs a directory")?)),
            "--release" => release = true,
            other => match other.strip_prefix("--prefix=") {
                Some(p) => prefix = Some(PathBuf::from(p)),
                None => bail!("usage: cargo xtask install [--prefix DIR] [--release] (unknown argument `{other}`)"),
            },
        }
    }
    let prefix = match prefix {
        Some(p) => p,
        None => PathBuf::from(std::env::var_os("HOME").context("HOME is not set; pass --prefix DIR")?).join(".local"),
    };
    let prefix = std::path::absolute(&prefix).with_context(|| format!("prefix {}", prefix.display()))?;
    let done = install(root, &prefix, release)?;
    eprintln!(
        "installed {} and {} components in {}",
        done.binary.display(),
        done.components.len(),
        done.plugin_dir.display()
    );
    let bin_dir = prefix.join("bin");
    let on_path = std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d == bin_dir));
    if !on_path {
        eprintln!("add {} to your PATH to run `wharf` from any directory", bin_dir.display());
    }
    Ok(())
}

/// Builds the components and the binary, and copies them under `prefix`.
pub(crate) fn install(root: &Path, prefix: &Path, release: bool) -> Result<Installed> {
    crate::build_plugins(root)?;
    let mut build = Command::new("cargo");
    build.current_dir(root).args(["build", "-p", "wharf"]);
    if release {
        build.arg("--release");
    }
    crate::run(&mut build)?;

    let target = crate::target_dir(root);
    let built = target.join(if release { "release" } else { "debug" }).join("wharf");
    let bin_dir = prefix.join("bin");
    let plugin_dir = prefix.join("lib").join("wharf").join("plugins");
    for d in [&bin_dir, &plugin_dir] {
        std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
    }
    let binary = bin_dir.join("wharf");
    copy_atomic(&built, &binary, 0o755)?;

    let mut components = Vec::new();
    for c in crate::plugin_crates(root)?.iter().filter(|c| !c.fixture) {
        let name = format!("{}.wasm", c.name);
        let src = target.join("plugins").join(&name);
        if !src.is_file() {
            bail!("{}: not built ({} is missing)", c.name, src.display());
        }
        copy_atomic(&src, &plugin_dir.join(&name), 0o644)?;
        components.push(name);
    }
    Ok(Installed { binary, plugin_dir, components })
}

/// Copies `src` to `dst` through a temporary file in `dst`'s directory and a
/// rename, with `mode`.
fn copy_atomic(src: &Path, dst: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let name = dst.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dst.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    std::fs::copy(src, &tmp).with_context(|| format!("cannot copy {} to {}", src.display(), tmp.display()))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot set the mode of {}", tmp.display()))?;
    std::fs::rename(&tmp, dst).with_context(|| format!("cannot move {} to {}", tmp.display(), dst.display()))?;
    Ok(())
}
