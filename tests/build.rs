//! Generates `plugins.rs` in `OUT_DIR`: one [`Plugin`] constant per
//! component the tests build (every crate under `plugins/` and
//! `tests/plugins/` that `cargo xtask build-plugins` builds: a cdylib, or a
//! command with a `src/main.rs`), and `ALL`, the list of them. The test
//! `components::every_constant_is_used_by_a_test` checks each one is used.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A component crate: its directory name (the file is `NAME.wasm`), where it
/// is, and its package description.
struct Component {
    name: String,
    dir: String,
    description: String,
}

/// The same rule as xtask's `plugin_crates`: a crate is a component when its
/// manifest makes a cdylib or it has a `src/main.rs`. Libraries (a shared
/// `llm-wire`, say) are left out.
fn components(root: &Path) -> Vec<Component> {
    let mut out = Vec::new();
    for parent in ["plugins", "tests/plugins"] {
        let Ok(entries) = std::fs::read_dir(root.join(parent)) else { continue };
        let mut dirs: Vec<PathBuf> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        dirs.sort();
        for dir in dirs {
            let manifest = dir.join("Cargo.toml");
            let Ok(text) = std::fs::read_to_string(&manifest) else { continue };
            // A path that does not exist would rerun the script on every
            // build: only the files there are watched. A directory added
            // later is caught by `components::every_component_has_a_constant`.
            println!("cargo::rerun-if-changed={}", manifest.display());
            let main = dir.join("src/main.rs");
            if main.exists() {
                println!("cargo::rerun-if-changed={}", main.display());
            }
            let cdylib = text.lines().any(|l| l.trim_start().starts_with("crate-type") && l.contains("cdylib"));
            if !cdylib && !main.exists() {
                continue;
            }
            let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let description = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("description = "))
                .map(|d| d.trim().trim_matches('"').to_string())
                .unwrap_or_default();
            out.push(Component { dir: format!("{parent}/{name}"), name, description });
        }
    }
    out
}

/// `llm-deepseek` → `LLM_DEEPSEEK`.
fn const_name(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect()
}

fn generate(root: &Path) -> Result<String, String> {
    let components = components(root);
    let mut code = String::new();
    let mut names = Vec::new();
    for c in &components {
        let konst = const_name(&c.name);
        if names.contains(&konst) {
            return Err(format!("two components are named {konst}: rename one directory ({})", c.dir));
        }
        let doc = if c.description.is_empty() { String::new() } else { format!(" {}", c.description) };
        let _ = writeln!(code, "/// `{}`:{doc}", c.dir);
        let _ = writeln!(code, "pub const {konst}: Plugin = Plugin(\"{}\");", c.name);
        names.push(konst);
    }
    let _ = writeln!(code, "/// Every component the tests build, in directory order.");
    let _ = writeln!(code, "pub const ALL: &[Plugin] = &[{}];", names.join(", "));
    Ok(code)
}

fn main() {
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from).unwrap_or_default();
    let root = manifest_dir.parent().map(Path::to_path_buf).unwrap_or_default();
    let out = std::env::var_os("OUT_DIR").map(PathBuf::from).unwrap_or_default();
    let result = generate(&root).and_then(|code| {
        std::fs::write(out.join("plugins.rs"), code).map_err(|e| format!("writing {}: {e}", out.display()))
    });
    if let Err(e) = result {
        println!("cargo::error=wharf-tests build script: {e}");
    }
}
