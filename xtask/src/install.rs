//! `cargo xtask install [--prefix DIR] [--release]`: `wharf` and its
//! first-party components, installed so that `wharf` on the PATH works from
//! any directory.
//!
//! Layout (the binary looks for `../lib/wharf/plugins` next to itself, see
//! `plugin_dir` in `host/cli-common/src/args.rs`):
//!
//! ```text
//! DIR/bin/wharf
//! DIR/bin/wharf.debug                 # its symbols and debug info
//! DIR/lib/wharf/plugins/NAME.wasm     # every crate under plugins/
//! ```
//!
//! `DIR` defaults to `~/.local`. The binary is the `dev` profile's build
//! (what tests and the demo use: Wharf's crates at opt-level 1, every
//! dependency — wasmtime, Cranelift — at opt-level 2 without debug
//! assertions), so an install after `cargo xtask test` or `demo` only copies
//! files; `--release` builds with the release profile instead (a fresh
//! release build of wasmtime takes 10+ minutes on 2 cores). Components are
//! always the optimised `plugin` profile. The installed binary is stripped
//! (`objcopy --strip-all`, ~190 MB → ~65 MB); its symbols and DWARF go to
//! `bin/wharf.debug`, which the binary's `.gnu_debuglink` names. Test fixtures (`tests/plugins/`)
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
    // The first-party components only: test fixtures are not installed.
    let first_party: Vec<String> =
        crate::plugin_crates(root)?.into_iter().filter(|c| !c.fixture).map(|c| c.name).collect();
    crate::build_some_plugins(root, Some(&first_party))?;
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
    install_stripped(&built, &binary)?;

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

/// Installs the binary `src` as `dst` without its debug info (the dev
/// build carries ~100 MB of DWARF and symbols), keeping them beside it in
/// `dst.debug`, which the binary names in its `.gnu_debuglink` section so
/// debuggers and backtraces find them. Both are written in a staging
/// directory next to `dst` and renamed into place, the symbols first. Without
/// `objcopy` (binutils) the binary is installed as built, with a warning.
fn install_stripped(src: &Path, dst: &Path) -> Result<()> {
    let dir = dst.parent().context("the binary's path has no directory")?;
    let name = dst.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let stage = dir.join(format!(".{name}.stage-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&stage);
    std::fs::create_dir_all(&stage).with_context(|| format!("cannot create {}", stage.display()))?;
    let result = strip_into(src, &stage, &name).and_then(|debug| {
        if let Some(debug) = debug {
            copy_atomic(&debug, &dir.join(format!("{name}.debug")), 0o644)?;
        }
        copy_atomic(&stage.join(&name), dst, 0o755)
    });
    let _ = std::fs::remove_dir_all(&stage);
    result
}

/// Writes `stage/name` (stripped) and `stage/name.debug` (its symbols and
/// debug info) from `src`; returns the latter's path, or `None` (and an
/// unstripped copy) when `objcopy` cannot run.
fn strip_into(src: &Path, stage: &Path, name: &str) -> Result<Option<PathBuf>> {
    let out = stage.join(name);
    let debug = stage.join(format!("{name}.debug"));
    let objcopy = |args: &[&std::ffi::OsStr]| Command::new("objcopy").args(args).status();
    match objcopy(&["--only-keep-debug".as_ref(), src.as_os_str(), debug.as_os_str()]) {
        Ok(s) if s.success() => {}
        Ok(s) => bail!("objcopy --only-keep-debug {} failed ({s})", src.display()),
        Err(e) => {
            eprintln!("warning: objcopy (binutils) not found ({e}): installing the binary with its debug info");
            std::fs::copy(src, &out).with_context(|| format!("cannot copy {}", src.display()))?;
            return Ok(None);
        }
    }
    // The link names the file (`NAME.debug`, looked up beside the binary)
    // and its checksum.
    let link = format!("--add-gnu-debuglink={}", debug.display());
    let status = objcopy(&["--strip-all".as_ref(), link.as_ref(), src.as_os_str(), out.as_os_str()])
        .context("cannot run objcopy")?;
    if !status.success() {
        bail!("objcopy --strip-all {} failed ({status})", src.display());
    }
    Ok(Some(debug))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A binary built with debug info is installed smaller, still runs,
    /// and leaves its debug info in `NAME.debug` beside it.
    #[test]
    fn the_installed_binary_is_stripped_and_runs() -> Result<()> {
        let dir = std::env::temp_dir().join(format!("xtask-strip-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("bin"))?;
        std::fs::write(dir.join("hello.c"), "int main(void) { return 0; }\n")?;
        let built = dir.join("hello");
        let cc = Command::new("cc").arg("-g").arg("-o").arg(&built).arg(dir.join("hello.c")).status();
        if !cc.is_ok_and(|s| s.success()) || Command::new("objcopy").arg("--version").output().is_err() {
            eprintln!("skipped: needs cc and objcopy");
            return Ok(());
        }
        let installed = dir.join("bin/hello");
        install_stripped(&built, &installed)?;
        let (before, after) = (std::fs::metadata(&built)?.len(), std::fs::metadata(&installed)?.len());
        assert!(after < before, "installed {after} bytes, built {before}");
        assert!(dir.join("bin/hello.debug").is_file());
        assert!(Command::new(&installed).status()?.success());
        let leftovers: Vec<_> =
            std::fs::read_dir(dir.join("bin"))?.filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
        assert_eq!(leftovers.len(), 2, "{leftovers:?}");
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }
}
