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
//! DIR/share/wharf/sdk/{rust,python,js,c}  # SDKs, templates, dev loaders
//! DIR/share/wharf/wit/since_vX.Y.Z    # the WIT package
//! DIR/share/wharf/Cargo.lock          # the versions the Rust SDK is tested with
//! ```
//!
//! `wharf plugin new` and `build` find the SDKs and the WIT in
//! `share/wharf/` above the binary, so a machine with the installed binary
//! and a language's toolchain can author plugins (JavaScript: `npm ci` in
//! `share/wharf/sdk/js`, or `sdk/install-toolchains.sh --js`, installs
//! componentize-js and esbuild there). The Rust SDK's manifest is written
//! standalone (no workspace inheritance).
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
    install_sdk(root, &prefix.join("share").join("wharf"))?;
    Ok(Installed { binary, plugin_dir, components })
}

/// Copies the SDKs, the WIT package and the lock file into `share` (see
/// the module docs); build output and dependencies are left out.
pub(crate) fn install_sdk(root: &Path, share: &Path) -> Result<()> {
    for lang in ["rust", "python", "js", "c"] {
        let to = share.join("sdk").join(lang);
        if to.exists() {
            std::fs::remove_dir_all(&to).with_context(|| format!("cannot replace {}", to.display()))?;
        }
        copy_tree(&root.join("sdk").join(lang), &to)?;
    }
    copy_atomic(&root.join("sdk/install-toolchains.sh"), &share.join("sdk/install-toolchains.sh"), 0o755)?;
    let wit = share.join("wit");
    if wit.exists() {
        std::fs::remove_dir_all(&wit).with_context(|| format!("cannot replace {}", wit.display()))?;
    }
    copy_tree(&root.join("wit"), &wit)?;
    copy_atomic(&root.join("Cargo.lock"), &share.join("Cargo.lock"), 0o644)?;
    // The Rust SDK outside the workspace: the inherited fields written out.
    let manifest = share.join("sdk/rust/Cargo.toml");
    let text = std::fs::read_to_string(&manifest).with_context(|| format!("reading {}", manifest.display()))?;
    let root_toml = std::fs::read_to_string(root.join("Cargo.toml")).context("reading Cargo.toml")?;
    let field = |key: &str| -> Result<String> {
        root_toml
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key} = ")).map(str::to_string))
            .with_context(|| format!("Cargo.toml has no workspace `{key}`"))
    };
    let mut out = String::new();
    let mut skip_lints = false;
    for line in text.lines() {
        if line.starts_with('[') {
            skip_lints = line.trim() == "[lints]";
        }
        if skip_lints {
            continue;
        }
        let line = match line.split_once(".workspace = true") {
            Some((key, "")) => format!("{key} = {}", field(key)?),
            _ => line.to_string(),
        };
        out.push_str(&line);
        out.push('\n');
    }
    std::fs::write(&manifest, out).with_context(|| format!("writing {}", manifest.display()))?;
    Ok(())
}

/// Copies a directory tree, leaving out build output and dependencies
/// (`target`, `node_modules`, `__pycache__`, hidden entries).
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("cannot create {}", to.display()))?;
    for e in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let e = e?;
        let name = e.file_name();
        let n = name.to_string_lossy();
        if n.starts_with('.') || ["target", "node_modules", "__pycache__"].contains(&n.as_ref()) {
            continue;
        }
        let ty = e.file_type()?;
        if ty.is_dir() {
            copy_tree(&e.path(), &to.join(&name))?;
        } else if ty.is_file() {
            std::fs::copy(e.path(), to.join(&name)).with_context(|| format!("copying {}", e.path().display()))?;
        }
    }
    Ok(())
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

    /// The SDKs and the WIT installed beside a copy of the binary: `wharf
    /// plugin new` scaffolds against them, and the Rust SDK's manifest
    /// stands alone.
    #[test]
    fn an_installed_binary_scaffolds_against_the_installed_sdk() -> Result<()> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let root = std::fs::canonicalize(&root)?;
        let built = crate::target_dir(&root).join("debug/wharf");
        if !built.is_file() {
            eprintln!("skipped: build the binary first (cargo build -p wharf)");
            return Ok(());
        }
        let dir = std::env::temp_dir().join(format!("xtask-sdk-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("bin"))?;
        let share = dir.join("share/wharf");
        install_sdk(&root, &share)?;
        let manifest = std::fs::read_to_string(share.join("sdk/rust/Cargo.toml"))?;
        assert!(!manifest.contains("workspace") && manifest.contains("version = \"0.1.0\""), "{manifest}");
        assert!(share.join("wit/since_v0.1.0/worlds.wit").is_file());
        assert!(share.join("sdk/python/dev/wharf_dev_runtime.py").is_file());
        assert!(!share.join("sdk/js/node_modules").exists());
        let bin = dir.join("bin/wharf");
        std::fs::copy(&built, &bin)?;
        for lang in ["python", "rust"] {
            let out = Command::new(&bin)
                .current_dir(&dir)
                .env_remove("WHARF_SDK_DIR")
                .args(["plugin", "new", &format!("p-{lang}"), "--lang", lang])
                .output()?;
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
        let sdk = std::fs::canonicalize(share.join("sdk"))?;
        let header = std::fs::read_to_string(dir.join("p-python/test_app.py"))?;
        assert!(header.contains(&sdk.join("python").display().to_string()), "{header}");
        let cargo = std::fs::read_to_string(dir.join("p-rust/Cargo.toml"))?;
        assert!(cargo.contains(&sdk.join("rust").display().to_string()), "{cargo}");
        assert!(dir.join("p-rust/Cargo.lock").is_file());
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }

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
