//! `context`: project instructions (`AGENTS.md`) as a system-prompt section.
//!
//! At every step the component reads, in this order:
//!
//! 1. the global files (`global`, default `~/.wharf/AGENTS.md`), when they
//!    exist;
//! 2. from the repository root down to the workspace, in each directory the
//!    first of `names` that exists (default `AGENTS.md`, then `CLAUDE.md`:
//!    `CLAUDE.md` is read only where there is no `AGENTS.md`). The
//!    repository root is the nearest ancestor of the workspace (or the
//!    workspace itself) holding `.git`; without one, only the workspace is
//!    read.
//!
//! and appends them, each under its path, to the system prompt through the
//! `system-prompt` waterfall. Each call runs in a fresh sandbox and reads the
//! files again, so an edit is in the next step's prompt. The section is
//! bounded by `max_bytes` (UTF-8, cut on a character boundary, with a note
//! saying so); the most specific file (the workspace's) gets the budget
//! first, the global files last. Which files were loaded is written to the
//! host log (`info`) once per session and whenever the set changes.
//!
//! # Configuration
//!
//! ```toml
//! [plugin.config]
//! workspace = "${workspace}"
//! global = ["~/.wharf/AGENTS.md"]     # `~/` needs `grant.env = ["HOME"]`
//! names = ["AGENTS.md", "CLAUDE.md"]
//! max_bytes = 32768
//! [plugin.grant]
//! dirs = ["${repo_root}:ro", "~/.wharf:ro?"]
//! env = ["HOME"]
//! ```

use std::fs;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use wharf_sdk::prelude::*;

/// Default bound on the section's file contents, in bytes.
const DEFAULT_MAX_BYTES: usize = 32 * 1024;
/// Priority on `system-prompt`: before the skills catalog (-1000), so the
/// prompt reads base prompt, project instructions, skills.
const PRIORITY: i32 = -2000;
/// The kv key remembering what was last logged.
const LOGGED_KEY: &str = "logged";

#[derive(Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Config {
    /// The session workspace (`${workspace}`).
    workspace: Option<PathBuf>,
    /// Files read in every session, first to last (`~/` is `$HOME`).
    global: Vec<PathBuf>,
    /// File names looked for in each directory; the first that exists wins.
    names: Vec<String>,
    /// Bound on the loaded text, in bytes.
    max_bytes: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            workspace: None,
            global: vec![PathBuf::from("~/.wharf/AGENTS.md")],
            names: vec!["AGENTS.md".into(), "CLAUDE.md".into()],
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

/// One loaded file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Loaded {
    path: PathBuf,
    text: String,
    /// The file's size in bytes.
    size: u64,
    /// Bytes of it kept (less than `size` when cut).
    kept: usize,
}

/// What the host log was last told, so it is told once per session and change.
#[derive(Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Logged {
    session: String,
    files: Vec<(String, u64)>,
}

fn config() -> Result<Config, String> {
    let mut cfg = wharf_sdk::config::get::<Config>().map_err(|e| format!("context: {e}"))?;
    // `~/…` needs the operator to pass HOME; without it those files are skipped.
    let home = std::env::var_os("HOME").map(PathBuf::from);
    cfg.global = cfg
        .global
        .into_iter()
        .filter_map(|p| match p.strip_prefix("~") {
            Ok(rest) => home.as_ref().map(|h| h.join(rest)),
            Err(_) => Some(p),
        })
        .collect();
    Ok(cfg)
}

/// The directories read, root first: the workspace and its ancestors up to
/// the nearest one holding `.git`; only the workspace when none does (or
/// when the ancestors are not visible in the sandbox).
fn project_dirs(workspace: &Path) -> Vec<PathBuf> {
    let mut chain = Vec::new();
    let mut dir = Some(workspace);
    while let Some(d) = dir {
        chain.push(d.to_path_buf());
        if fs::symlink_metadata(d.join(".git")).is_ok() {
            chain.reverse();
            return chain;
        }
        dir = d.parent();
    }
    vec![workspace.to_path_buf()]
}

/// Reads at most `budget` bytes of `path`, cut on a character boundary.
/// `None` when the file does not exist or is not a regular file.
fn read_bounded(path: &Path, budget: usize) -> Option<Loaded> {
    let meta = fs::metadata(path).ok().filter(fs::Metadata::is_file)?;
    let file = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) => {
            wharf_sdk::log::warn!("context: cannot read {}: {e}", path.display());
            return None;
        }
    };
    let mut buf = Vec::new();
    let limit = u64::try_from(budget).unwrap_or(u64::MAX);
    if let Err(e) = file.take(limit).read_to_end(&mut buf) {
        wharf_sdk::log::warn!("context: cannot read {}: {e}", path.display());
        return None;
    }
    let text = match std::str::from_utf8(&buf) {
        Ok(s) => s.to_string(),
        // A character cut by the budget: drop its first bytes.
        Err(e) if e.error_len().is_none() => String::from_utf8_lossy(&buf[..e.valid_up_to()]).into_owned(),
        Err(_) => String::from_utf8_lossy(&buf).into_owned(),
    };
    let kept = text.len().min(buf.len());
    let size = meta.len().max(u64::try_from(buf.len()).unwrap_or(u64::MAX));
    Some(Loaded { path: path.to_path_buf(), text, size, kept })
}

/// Every file to load, in prompt order (global, then root → workspace),
/// bounded by `cfg.max_bytes` with the most specific file served first.
fn load(cfg: &Config) -> Vec<Loaded> {
    let mut candidates: Vec<PathBuf> = cfg.global.clone();
    if let Some(ws) = &cfg.workspace {
        for dir in project_dirs(ws) {
            if let Some(p) = cfg.names.iter().map(|n| dir.join(n)).find(|p| fs::metadata(p).is_ok_and(|m| m.is_file()))
            {
                candidates.push(p);
            }
        }
    }
    let mut budget = cfg.max_bytes;
    let mut loaded: Vec<Loaded> = Vec::new();
    for path in candidates.iter().rev() {
        if let Some(f) = read_bounded(path, budget) {
            budget = budget.saturating_sub(f.kept);
            loaded.push(f);
        }
    }
    loaded.reverse();
    loaded
}

/// The prompt section for `files` (empty when there are none).
fn section(files: &[Loaded]) -> String {
    if files.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "# Project instructions\n\nInstructions from AGENTS.md files: the user's own first, then the repository's \
         from its root down to the workspace. Follow them; where they conflict, a later (more specific) file wins.\n",
    );
    for f in files {
        out.push_str(&format!("\n## {}\n\n{}\n", f.path.display(), f.text.trim_end()));
        if u64::try_from(f.kept).unwrap_or(u64::MAX) < f.size {
            out.push_str(&format!(
                "\n[truncated: the first {} of {} bytes of {}; read the file for the rest]\n",
                f.kept,
                f.size,
                f.path.display()
            ));
        }
    }
    out
}

/// Appends `section` to a `system-prompt` payload (an object with `prompt`,
/// or the prompt itself after an earlier listener replaced it with a string).
fn append(payload: Value, section: &str) -> Value {
    let join = |prompt: &str| {
        if prompt.trim().is_empty() { section.to_string() } else { format!("{}\n\n{section}", prompt.trim_end()) }
    };
    match payload {
        Value::String(s) => Value::String(join(&s)),
        Value::Object(mut m) => {
            let prompt = m.get("prompt").and_then(Value::as_str).unwrap_or("").to_string();
            m.insert("prompt".into(), Value::String(join(&prompt)));
            Value::Object(m)
        }
        other => other,
    }
}

/// Tells the host log which files were loaded, once per session and change.
fn log_loaded(payload: &Value, files: &[Loaded]) {
    let session = payload.get("session_id").and_then(Value::as_str).unwrap_or("").to_string();
    let now = Logged { session, files: files.iter().map(|f| (f.path.display().to_string(), f.size)).collect() };
    if wharf_sdk::kv::get_json::<Logged>(LOGGED_KEY).as_ref() == Some(&now) {
        return;
    }
    if now.files.is_empty() {
        wharf_sdk::log::info!("context: no AGENTS.md files found");
    } else {
        let list: Vec<String> = now.files.iter().map(|(p, n)| format!("{p} ({n} bytes)")).collect();
        wharf_sdk::log::info!("context: loaded {}", list.join(", "));
    }
    if let Err(e) = wharf_sdk::kv::set_json(LOGGED_KEY, &now) {
        wharf_sdk::log::debug!("context: {e}");
    }
}

/// Handles one `system-prompt` payload.
fn on_system_prompt(payload: &str) -> Outcome {
    let cfg = match config() {
        Ok(c) => c,
        Err(e) => {
            wharf_sdk::log::warn!("{e}");
            return Outcome::Pass;
        }
    };
    if cfg.workspace.is_none() {
        wharf_sdk::log::warn!("context: no `workspace` configured; only the global files are read");
    }
    let Ok(value) = serde_json::from_str::<Value>(payload) else { return Outcome::Pass };
    let files = load(&cfg);
    log_loaded(&value, &files);
    if files.is_empty() {
        return Outcome::Pass;
    }
    Outcome::replace_json(&append(value, &section(&files)))
}

struct Context;

impl HooksPlugin for Context {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "context",
            env!("CARGO_PKG_VERSION"),
            "Project instructions: AGENTS.md (or CLAUDE.md) from the workspace up to the repository root, and \
             ~/.wharf/AGENTS.md, in the system prompt.",
        )
        .filesystem(FsAccess::ReadOnly)
        .env(["HOME"])
    }

    fn subscriptions() -> Vec<Subscription> {
        vec![Subscription::new(HookPoint::SystemPrompt, PRIORITY)]
    }

    fn handle(point: HookPoint, payload: &str) -> Outcome {
        match point {
            HookPoint::SystemPrompt => on_system_prompt(payload),
            _ => Outcome::Pass,
        }
    }
}

wharf_sdk::export_hooks!(Context);

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn base(tag: &str) -> PathBuf {
        let b = std::env::temp_dir().join(format!("wharf-context-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&b);
        fs::create_dir_all(&b).unwrap();
        b
    }

    fn write(path: &Path, text: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    fn cfg(ws: &Path, max_bytes: usize) -> Config {
        Config { workspace: Some(ws.to_path_buf()), global: vec![], max_bytes, ..Config::default() }
    }

    #[test]
    fn walks_up_to_the_repository_root_with_claude_as_fallback() {
        let b = base("walk");
        let (repo, ws) = (b.join("repo"), b.join("repo/a/b"));
        fs::create_dir_all(repo.join(".git")).unwrap();
        fs::create_dir_all(&ws).unwrap();
        write(&b.join("AGENTS.md"), "above the repo");
        write(&repo.join("AGENTS.md"), "root");
        write(&repo.join("CLAUDE.md"), "shadowed");
        write(&repo.join("a/CLAUDE.md"), "middle");
        write(&ws.join("AGENTS.md"), "leaf");
        let got: Vec<(PathBuf, String)> = load(&cfg(&ws, 1000)).into_iter().map(|f| (f.path, f.text)).collect();
        assert_eq!(
            got,
            vec![
                (repo.join("AGENTS.md"), "root".into()),
                (repo.join("a/CLAUDE.md"), "middle".into()),
                (ws.join("AGENTS.md"), "leaf".into()),
            ]
        );
        let _ = fs::remove_dir_all(b);
    }

    #[test]
    fn without_a_repository_only_the_workspace_is_read() {
        let b = base("norepo");
        let ws = b.join("ws");
        write(&b.join("AGENTS.md"), "parent");
        write(&ws.join("AGENTS.md"), "own");
        let got: Vec<String> = load(&cfg(&ws, 1000)).into_iter().map(|f| f.text).collect();
        // The temp dir may sit inside a repository; then the walk goes up to it.
        if project_dirs(&ws).len() == 1 {
            assert_eq!(got, vec!["own".to_string()]);
        }
        let _ = fs::remove_dir_all(b);
    }

    #[test]
    fn the_budget_goes_to_the_most_specific_file_and_cuts_on_a_char_boundary() {
        let b = base("budget");
        let ws = b.join("ws");
        fs::create_dir_all(ws.join(".git")).unwrap();
        write(&ws.join("AGENTS.md"), "ééééé");
        let global = b.join("global.md");
        write(&global, "global text");
        let mut c = cfg(&ws, 5);
        c.global = vec![global.clone()];
        let files = load(&c);
        assert_eq!(files.len(), 2, "{files:?}");
        assert_eq!(files[0].path, global);
        assert_eq!(files[0].text, "g");
        assert_eq!((files[1].text.as_str(), files[1].kept, files[1].size), ("éé", 4, 10));
        let s = section(&files);
        assert!(s.contains(&format!("## {}\n\néé\n", ws.join("AGENTS.md").display())), "{s}");
        assert!(s.contains("[truncated: the first 4 of 10 bytes of "), "{s}");
        assert!(s.contains("[truncated: the first 1 of 11 bytes of "), "{s}");
        let _ = fs::remove_dir_all(b);
    }

    #[test]
    fn the_section_is_appended_to_the_prompt() {
        let v = append(serde_json::json!({"prompt": "base\n", "step": 1}), "S");
        assert_eq!(v, serde_json::json!({"prompt": "base\n\nS", "step": 1}));
        assert_eq!(append(Value::String(String::new()), "S"), Value::String("S".into()));
        assert_eq!(section(&[]), "");
    }
}
