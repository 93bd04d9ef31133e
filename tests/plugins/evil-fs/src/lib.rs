//! `evil-fs`: an adversarial tool plugin for the filesystem hardening tests.
//!
//! Its tools call `wasi:filesystem` directly (`symlink-at`, `link-at`,
//! `rename-at` on the preopen that holds the path) and report what happened
//! honestly: `Ok` when the call succeeded, `Err` with the WASI error code
//! when it failed. The tests decide whether containment worked.
//!
//! Configuration (for the tool-name tests): `extra_tools`, a list of names
//! registered as more copies of the `ok` tool (a name twice in one plugin,
//! or a name another plugin has).

use schemars::JsonSchema;
use serde::Deserialize;
use wharf_sdk::prelude::*;

#[derive(Deserialize, JsonSchema)]
struct SymlinkArgs {
    /// The link's contents, used verbatim (`../../etc/passwd`, `/etc`, `sub/file`).
    target: String,
    /// Absolute path of the link to create (inside a granted directory).
    link: String,
}

#[derive(Deserialize, JsonSchema)]
struct MoveArgs {
    /// Absolute path of the existing entry (not followed).
    from: String,
    /// Absolute path of the new name.
    to: String,
}

#[derive(Deserialize, JsonSchema)]
struct PathArg {
    /// Absolute path.
    path: String,
}

struct EvilFs;

fn spec<A: JsonSchema>(name: &str, description: &str) -> ToolSpec {
    ToolSpec::new::<A>(name, description, ToolMode::Parallel)
}

impl ToolPlugin for EvilFs {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "evil-fs",
            env!("CARGO_PKG_VERSION"),
            "Adversarial test plugin: symlinks, hard links and renames inside and outside its grant.",
        )
        .filesystem(FsAccess::ReadWrite)
    }

    fn tools() -> Vec<ToolSpec> {
        let mut tools = vec![
            spec::<SymlinkArgs>("symlink", "Creates a symlink with wasi:filesystem symlink-at."),
            spec::<MoveArgs>("hard_link", "Hard-links an entry with wasi:filesystem link-at (no follow)."),
            spec::<MoveArgs>("rename", "Renames an entry with wasi:filesystem rename-at."),
            spec::<PathArg>("readlink", "Reads a symlink with wasi:filesystem readlink-at."),
            spec::<NoArgs>("ok", "Returns `ok`."),
        ];
        let extra: Vec<String> = wharf_sdk::config::key("extra_tools").ok().flatten().unwrap_or_default();
        for name in extra {
            tools.push(spec::<NoArgs>(&name, "Another copy of `ok`."));
        }
        tools
    }

    fn call(name: &str, args: Args, _ctx: &CallContext) -> ToolResult {
        match name {
            "symlink" => {
                let a: SymlinkArgs = args.parse()?;
                wasi_fs::symlink(&a.target, &a.link)?;
                Ok(ToolOutput::text(format!("created {} -> {}", a.link, a.target)))
            }
            "hard_link" => {
                let a: MoveArgs = args.parse()?;
                wasi_fs::hard_link(&a.from, &a.to)?;
                Ok(ToolOutput::text(format!("linked {} to {}", a.to, a.from)))
            }
            "rename" => {
                let a: MoveArgs = args.parse()?;
                wasi_fs::rename(&a.from, &a.to)?;
                Ok(ToolOutput::text(format!("renamed {} to {}", a.from, a.to)))
            }
            "readlink" => {
                let p = args.parse::<PathArg>()?.path;
                Ok(ToolOutput::text(wasi_fs::readlink(&p)?))
            }
            _ => Ok(ToolOutput::text("ok")),
        }
    }
}

wharf_sdk::export_tool!(EvilFs);

#[cfg(target_arch = "wasm32")]
mod wasi_fs {
    use wasi::filesystem::preopens::get_directories;
    use wasi::filesystem::types::{Descriptor, ErrorCode, PathFlags};
    use wharf_sdk::ToolError;

    fn err(what: &str, e: ErrorCode) -> ToolError {
        ToolError::new("FS_ERROR", format!("{what}: {e:?}"))
    }

    /// The preopen holding `path` and the path relative to it.
    fn resolve(path: &str) -> Result<(Descriptor, String), ToolError> {
        let mut best: Option<(Descriptor, String)> = None;
        let mut best_len = 0;
        for (d, root) in get_directories() {
            let root_t = root.trim_end_matches('/');
            let rest = match path.strip_prefix(root_t) {
                Some(r) if r.is_empty() || r.starts_with('/') => r.trim_start_matches('/'),
                _ => continue,
            };
            if best.is_none() || root_t.len() > best_len {
                best_len = root_t.len();
                best = Some((d, if rest.is_empty() { ".".into() } else { rest.to_string() }));
            }
        }
        best.ok_or_else(|| ToolError::new("FS_ERROR", format!("{path} is in no granted directory")))
    }

    pub fn symlink(target: &str, link: &str) -> Result<(), ToolError> {
        let (d, rel) = resolve(link)?;
        d.symlink_at(target, &rel).map_err(|e| err("symlink-at", e))
    }

    pub fn hard_link(from: &str, to: &str) -> Result<(), ToolError> {
        let (a, ra) = resolve(from)?;
        let (b, rb) = resolve(to)?;
        a.link_at(PathFlags::empty(), &ra, &b, &rb).map_err(|e| err("link-at", e))
    }

    pub fn rename(from: &str, to: &str) -> Result<(), ToolError> {
        let (a, ra) = resolve(from)?;
        let (b, rb) = resolve(to)?;
        a.rename_at(&ra, &b, &rb).map_err(|e| err("rename-at", e))
    }

    pub fn readlink(path: &str) -> Result<String, ToolError> {
        let (d, rel) = resolve(path)?;
        d.readlink_at(&rel).map_err(|e| err("readlink-at", e))
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod wasi_fs {
    use wharf_sdk::ToolError;

    fn unsupported() -> ToolError {
        ToolError::new("UNSUPPORTED", "evil-fs only runs as a component")
    }

    pub fn symlink(_target: &str, _link: &str) -> Result<(), ToolError> {
        Err(unsupported())
    }

    pub fn hard_link(_from: &str, _to: &str) -> Result<(), ToolError> {
        Err(unsupported())
    }

    pub fn rename(_from: &str, _to: &str) -> Result<(), ToolError> {
        Err(unsupported())
    }

    pub fn readlink(_path: &str) -> Result<String, ToolError> {
        Err(unsupported())
    }
}
