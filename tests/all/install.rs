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

/// The section names of the 64-bit little-endian ELF file at `path`.
fn elf_sections(path: &Path) -> anyhow::Result<Vec<String>> {
    let b = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    anyhow::ensure!(b.len() >= 64 && b[..4] == *b"\x7fELF" && b[4] == 2 && b[5] == 1, "not an ELF64 LE file");
    let u16_at = |o: usize| b.get(o..o + 2).map(|s| u16::from_le_bytes([s[0], s[1]]) as usize);
    let u32_at = |o: usize| b.get(o..o + 4).map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize);
    let u64_at =
        |o: usize| b.get(o..o + 8).and_then(|s| <[u8; 8]>::try_from(s).ok()).map(|a| u64::from_le_bytes(a) as usize);
    let bad = || anyhow::anyhow!("truncated ELF header in {}", path.display());
    let (shoff, shentsize, shnum, shstrndx) = (
        u64_at(0x28).ok_or_else(bad)?,
        u16_at(0x3a).ok_or_else(bad)?,
        u16_at(0x3c).ok_or_else(bad)?,
        u16_at(0x3e).ok_or_else(bad)?,
    );
    let header = |i: usize| shoff + i * shentsize;
    let strtab = u64_at(header(shstrndx) + 0x18).ok_or_else(bad)?;
    let mut names = Vec::new();
    for i in 0..shnum {
        let name = strtab + u32_at(header(i)).ok_or_else(bad)?;
        let end = b.get(name..).and_then(|s| s.iter().position(|&c| c == 0)).ok_or_else(bad)?;
        names.push(String::from_utf8_lossy(&b[name..name + end]).into_owned());
    }
    Ok(names)
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
    // Stripped, with its symbols and DWARF beside it, linked by name.
    let sections = elf_sections(&bin)?;
    // (`.debug_gdb_scripts` is a loaded section rustc adds, not debug info.)
    let debug_info = [".debug_info", ".debug_line", ".debug_str", ".symtab"];
    assert!(!sections.iter().any(|s| debug_info.contains(&s.as_str())), "not stripped: {sections:?}");
    assert!(sections.iter().any(|s| s == ".gnu_debuglink"), "{sections:?}");
    let debug = elf_sections(&prefix.path().join("bin/wharf.debug"))?;
    assert!(debug.iter().any(|s| s == ".debug_line") && debug.iter().any(|s| s == ".symtab"), "{debug:?}");
    let (installed, built) = (std::fs::metadata(&bin)?.len(), std::fs::metadata(wharf_tests::wharf_bin())?.len());
    assert!(installed < built, "installed {installed} bytes, built {built}");

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
