//! Claude Code and Codex plugin bundles as Wharf sees them.
//!
//! A bundle is a directory in the layout both tools share:
//!
//! ```text
//! my-plugin/
//! ├── .claude-plugin/plugin.json   (or .codex-plugin/plugin.json)
//! ├── skills/NAME/SKILL.md
//! ├── commands/NAME.md             slash commands ($ARGUMENTS, $1…$9)
//! ├── agents/NAME.md               subagent presets
//! ├── hooks/hooks.json             command hooks
//! └── .mcp.json                    MCP servers
//! ```
//!
//! [`Bundle::load`] reads one into typed parts and lists, in
//! [`Bundle::issues`], everything it asks for that Wharf cannot honour (an
//! unknown hook event, a matcher that is not a valid pattern, a hook that
//! is not a command, an SSE MCP server…), so `wharf plugin add` reports it
//! instead of silently ignoring it. [`hooks`] is the hook protocol (what a
//! hook gets on stdin, what its exit code and stdout mean); [`marketplace`]
//! reads `.claude-plugin/marketplace.json`; [`lock`] is the lock file and
//! [`layer`] edits `[[bundle]]` rows in a config layer; [`fetch`] clones
//! git sources. Running hooks and MCP servers is the host's business
//! (`wharf-harness`): this crate starts no process except `git`, and links
//! no WebAssembly runtime.

pub mod commands;
mod digest;
pub mod fetch;
pub mod hooks;
pub mod layer;
pub mod lock;
mod markdown;
pub mod marketplace;
pub mod mcp;

use std::path::{Path, PathBuf};

use serde_json::Value;

pub use commands::Command;
pub use digest::{content_digest, file_digest};
pub use hooks::{HookEvent, HookRule};
pub use mcp::McpDecl;

/// Longest bundle name (it prefixes MCP server names, `NAME-SERVER`).
pub const NAME_MAX_LEN: usize = 24;
/// Most files a bundle may hold (digest, listing).
pub const MAX_FILES: usize = 4096;
/// Most bytes of one manifest, hooks file, `.mcp.json` or markdown file.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// Most bytes of all a bundle's files together (the digest reads them all).
pub const MAX_TOTAL_BYTES: u64 = 256 * 1024 * 1024;

/// Why a bundle, a marketplace or a lock file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file is not what the layout says.
    #[error("{}: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A bound was exceeded.
    #[error("{0}")]
    Limit(String),
    /// A git command failed.
    #[error("git: {0}")]
    Git(String),
    /// A bundle's content is not what was pinned.
    #[error(
        "bundle `{name}` changed since it was pinned (pinned {pinned}, now {found}); run `wharf plugin add … --update` \
         to accept the new content"
    )]
    Changed {
        /// The bundle.
        name: String,
        /// The pinned digest.
        pinned: String,
        /// The digest of what is on disk.
        found: String,
    },
    /// Something else the caller asked for is not possible.
    #[error("{0}")]
    Refused(String),
}

impl BundleError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io { path: path.to_path_buf(), source }
    }

    pub(crate) fn invalid(path: &Path, message: impl Into<String>) -> Self {
        Self::Invalid { path: path.to_path_buf(), message: message.into() }
    }
}

/// Which tool the bundle was written for (by its manifest's directory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Flavor {
    /// `.claude-plugin/plugin.json`.
    Claude,
    /// `.codex-plugin/plugin.json`.
    Codex,
    /// No manifest: named by its directory.
    Bare,
}

/// `plugin.json`: the parts Wharf uses.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Manifest {
    /// The bundle's name.
    pub name: String,
    /// Its version, if given.
    pub version: Option<String>,
    /// Its description, if given.
    pub description: Option<String>,
}

/// A subagent preset from `agents/NAME.md`, offered by the `subagent`
/// tool (its row's `presets`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AgentPreset {
    /// Its name (front matter `name`, else the file name).
    pub name: String,
    /// When to use it.
    pub description: String,
    /// Tools it may use, as Wharf names (front matter `tools`: Claude Code
    /// names such as `Read` become Wharf's `read`; names Wharf has no
    /// equivalent of are dropped and listed in the bundle's issues; empty:
    /// all of the caller's).
    pub tools: Vec<String>,
    /// Its instructions (the file's body): the child's system prompt.
    pub instructions: String,
    /// The model it asks for (front matter `model`), as written. Not
    /// honoured: the child uses the session's model (an issue says so
    /// unless it is `inherit`).
    pub model: Option<String>,
    /// The file.
    pub file: PathBuf,
}

/// A loaded bundle.
#[derive(Debug, Clone)]
pub struct Bundle {
    /// The bundle directory (canonical).
    pub root: PathBuf,
    /// Which manifest it has.
    pub flavor: Flavor,
    /// Its manifest.
    pub manifest: Manifest,
    /// `skills/`, when it holds at least one `NAME/SKILL.md`.
    pub skills_dir: Option<PathBuf>,
    /// The skill directories' names.
    pub skills: Vec<String>,
    /// Slash commands.
    pub commands: Vec<Command>,
    /// Subagent presets.
    pub agents: Vec<AgentPreset>,
    /// Command hooks Wharf runs.
    pub hooks: Vec<HookRule>,
    /// MCP servers.
    pub mcp: Vec<McpDecl>,
    /// What the bundle asks for that Wharf does not honour, one line each.
    pub issues: Vec<String>,
}

/// Whether `name` is a valid bundle name: 1 to [`NAME_MAX_LEN`] of `a-z`,
/// `0-9`, `-`, `_`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= NAME_MAX_LEN
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// Reads a file of at most [`MAX_FILE_BYTES`] as text.
pub(crate) fn read_text(path: &Path) -> Result<String, BundleError> {
    let meta = std::fs::metadata(path).map_err(|e| BundleError::io(path, e))?;
    if meta.len() > MAX_FILE_BYTES {
        return Err(BundleError::Limit(format!(
            "{}: {} bytes, more than the {MAX_FILE_BYTES} a bundle file may have",
            path.display(),
            meta.len()
        )));
    }
    std::fs::read_to_string(path).map_err(|e| BundleError::io(path, e))
}

/// Reads a JSON file of at most [`MAX_FILE_BYTES`].
pub(crate) fn read_json(path: &Path) -> Result<Value, BundleError> {
    let text = read_text(path)?;
    serde_json::from_str(&text).map_err(|e| BundleError::invalid(path, format!("not valid JSON: {e}")))
}

/// Replaces the bundle root variables (`${CLAUDE_PLUGIN_ROOT}`, and Codex's
/// `${PLUGIN_ROOT}`) in `text`.
pub fn resolve_root(text: &str, root: &Path) -> String {
    let r = root.display().to_string();
    text.replace("${CLAUDE_PLUGIN_ROOT}", &r)
        .replace("$CLAUDE_PLUGIN_ROOT", &r)
        .replace("${PLUGIN_ROOT}", &r)
        .replace("$PLUGIN_ROOT", &r)
}

/// Paths a manifest field lists (a string or an array of strings), relative
/// to the root.
fn manifest_paths(v: Option<&Value>, root: &Path) -> Vec<PathBuf> {
    let one = |s: &str| root.join(resolve_root(s, root).trim_start_matches("./"));
    match v {
        Some(Value::String(s)) => vec![one(s)],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).map(one).collect(),
        _ => Vec::new(),
    }
}

impl Bundle {
    /// Reads the bundle in `dir` (see the crate docs). Problems with the
    /// layout itself (no such directory, a manifest or hooks file that is
    /// not JSON, a bad name) are errors; parts Wharf cannot honour are
    /// listed in [`Bundle::issues`].
    pub fn load(dir: &Path) -> Result<Self, BundleError> {
        let root = std::fs::canonicalize(dir).map_err(|e| BundleError::io(dir, e))?;
        if !root.is_dir() {
            return Err(BundleError::invalid(&root, "not a directory"));
        }
        let mut issues = Vec::new();
        let (flavor, manifest_file) = [
            (Flavor::Claude, root.join(".claude-plugin").join("plugin.json")),
            (Flavor::Codex, root.join(".codex-plugin").join("plugin.json")),
        ]
        .into_iter()
        .find(|(_, p)| p.is_file())
        .map_or((Flavor::Bare, None), |(f, p)| (f, Some(p)));
        let raw = match &manifest_file {
            Some(p) => read_json(p)?,
            None => Value::Object(Default::default()),
        };
        let dir_name = root.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_default();
        let name = raw.get("name").and_then(Value::as_str).map_or(dir_name, str::to_string);
        if !valid_name(&name) {
            return Err(BundleError::invalid(
                manifest_file.as_deref().unwrap_or(&root),
                format!("bundle name `{name}`: use 1 to {NAME_MAX_LEN} of a-z, 0-9, `-` and `_`"),
            ));
        }
        let text = |k: &str| raw.get(k).and_then(Value::as_str).map(str::to_string);
        let manifest = Manifest { name, version: text("version"), description: text("description") };

        // Skills.
        let skills_root = root.join("skills");
        let mut skills = Vec::new();
        if let Ok(entries) = std::fs::read_dir(&skills_root) {
            for e in entries.flatten() {
                if e.path().join("SKILL.md").is_file() {
                    skills.push(e.file_name().to_string_lossy().into_owned());
                }
            }
        }
        skills.sort();
        let skills_dir = (!skills.is_empty()).then_some(skills_root);

        // Commands and agents: the default directory and any the manifest adds.
        let mut command_dirs = vec![root.join("commands")];
        command_dirs.extend(manifest_paths(raw.get("commands"), &root));
        let mut commands = Vec::new();
        for d in &command_dirs {
            commands::load_dir(d, &manifest.name, &mut commands, &mut issues)?;
        }
        let mut agent_dirs = vec![root.join("agents")];
        agent_dirs.extend(manifest_paths(raw.get("agents"), &root));
        let mut agents = Vec::new();
        for d in &agent_dirs {
            load_agents(d, &root, &mut agents, &mut issues)?;
        }

        // Hooks: hooks/hooks.json, files the manifest names, or inline.
        let mut hooks = Vec::new();
        let default_hooks = root.join("hooks").join("hooks.json");
        let mut hook_files = Vec::new();
        if default_hooks.is_file() {
            hook_files.push(default_hooks);
        }
        match raw.get("hooks") {
            Some(Value::Object(_)) => {
                let at = manifest_file.clone().unwrap_or_else(|| root.clone());
                hooks::parse(raw.get("hooks").unwrap_or(&Value::Null), &at, &root, &mut hooks, &mut issues)?;
            }
            other => {
                for p in manifest_paths(other, &root) {
                    if !hook_files.contains(&p) {
                        hook_files.push(p);
                    }
                }
            }
        }
        for f in &hook_files {
            let v = read_json(f)?;
            hooks::parse(&v, f, &root, &mut hooks, &mut issues)?;
        }

        // MCP servers: .mcp.json, or the manifest's `mcpServers`.
        let mut mcp = Vec::new();
        let dot_mcp = root.join(".mcp.json");
        match raw.get("mcpServers") {
            Some(v @ Value::Object(_)) => {
                let at = manifest_file.clone().unwrap_or_else(|| root.clone());
                mcp::parse(v, &at, &root, &manifest.name, &mut mcp, &mut issues)?;
            }
            other => {
                let mut files = manifest_paths(other, &root);
                if files.is_empty() && dot_mcp.is_file() {
                    files.push(dot_mcp);
                }
                for f in files {
                    let v = read_json(&f)?;
                    mcp::parse(&v, &f, &root, &manifest.name, &mut mcp, &mut issues)?;
                }
            }
        }
        for key in ["lspServers", "outputStyles", "apps", "userConfig"] {
            if raw.get(key).is_some() {
                issues.push(format!("plugin.json `{key}`: not supported by Wharf (ignored)"));
            }
        }
        if root.join(".app.json").is_file() {
            issues.push(".app.json: Codex app mappings are not supported by Wharf (ignored)".into());
        }
        Ok(Self { root, flavor, manifest, skills_dir, skills, commands, agents, hooks, mcp, issues })
    }

    /// The bundle's name.
    pub fn name(&self) -> &str {
        &self.manifest.name
    }

    /// The content digest of the whole bundle (`sha256:…`; see
    /// [`content_digest`]).
    pub fn digest(&self) -> Result<String, BundleError> {
        content_digest(&self.root)
    }
}

/// Front matter keys of an agent file Wharf does not honour.
const AGENT_KEYS_NOT_HONOURED: [&str; 7] =
    ["disallowedTools", "permissionMode", "maxTurns", "skills", "mcpServers", "hooks", "isolation"];

/// The Wharf tool a preset's `tools` entry names: a Claude Code name
/// (`Read`) by [`hooks::claude_tool_name`]'s table, or a name already in
/// Wharf's form (`read`, `mcp__server__tool`); `None` for a Claude Code
/// tool Wharf has no equivalent of (`WebSearch`, `NotebookEdit`…).
pub fn wharf_tool_name(name: &str) -> Option<String> {
    const WHARF: [&str; 10] =
        ["bash", "read", "write", "edit", "glob", "grep", "list", "web_fetch", "todo_write", "subagent"];
    if let Some(w) = WHARF.iter().find(|w| hooks::claude_tool_name(w) == Some(name)) {
        return Some((*w).to_string());
    }
    let wharf_form = !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    (wharf_form || name.starts_with("mcp__")).then(|| name.to_string())
}

/// The entries of a front matter list: `A, B`, `[A, B]` or `- A - B`
/// (indented YAML items joined on one line).
fn list_items(v: &str) -> Vec<String> {
    v.trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .split(',')
        .flat_map(|part| part.split(" - "))
        .map(|s| s.trim().trim_start_matches("- ").trim().trim_matches(['"', '\'']).to_string())
        .filter(|s| !s.is_empty() && s != "-")
        .collect()
}

fn load_agents(
    dir: &Path,
    root: &Path,
    out: &mut Vec<AgentPreset>,
    issues: &mut Vec<String>,
) -> Result<(), BundleError> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Ok(()) };
    let mut files: Vec<PathBuf> =
        entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "md")).collect();
    files.sort();
    for file in files {
        let text = read_text(&file)?;
        let doc = markdown::parse(&text);
        let shown = file.strip_prefix(root).unwrap_or(&file).display().to_string();
        let stem = file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let name = doc.get("name").unwrap_or(&stem).to_string();
        let written = doc.get("tools").map(list_items).unwrap_or_default();
        let mut tools = Vec::new();
        let mut dropped = Vec::new();
        for t in &written {
            match wharf_tool_name(t) {
                Some(w) if !tools.contains(&w) => tools.push(w),
                Some(_) => {}
                None => dropped.push(t.as_str()),
            }
        }
        if !dropped.is_empty() {
            issues.push(format!(
                "{shown}: tools {} have no Wharf equivalent; the preset `{name}` may not use them",
                dropped.join(", ")
            ));
        }
        if !written.is_empty() && tools.is_empty() {
            issues.push(format!("{shown}: none of its tools exist in Wharf; the preset `{name}` is not offered"));
            continue;
        }
        let model = doc.get("model").map(str::to_string).filter(|m| !m.is_empty());
        if let Some(m) = model.as_deref().filter(|m| *m != "inherit") {
            issues.push(format!("{shown}: `model: {m}` is not honoured; the preset `{name}` uses the session's model"));
        }
        for key in AGENT_KEYS_NOT_HONOURED {
            if doc.get(key).is_some() {
                issues.push(format!("{shown}: `{key}` is not honoured by Wharf (ignored)"));
            }
        }
        out.push(AgentPreset {
            name,
            description: doc.get("description").unwrap_or_default().to_string(),
            tools,
            instructions: doc.body.trim().to_string(),
            model,
            file,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn agents_become_presets_with_wharf_tool_names() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("presets");
        let agents = dir.join("agents");
        std::fs::create_dir_all(&agents).unwrap();
        std::fs::write(
            agents.join("reviewer.md"),
            "---\nname: reviewer\ndescription: Reviews code.\ntools: Read, Grep, WebSearch, mcp__x__y\nmodel: opus\n---\nYou review.\n",
        )
        .unwrap();
        std::fs::write(agents.join("web.md"), "---\ndescription: Searches.\ntools: [WebSearch]\n---\nSearch.\n")
            .unwrap();
        std::fs::write(
            agents.join("any.md"),
            "---\ndescription: All.\nmodel: inherit\ntools:\n  - Bash\n  - read\n---\nGo.\n",
        )
        .unwrap();
        let b = Bundle::load(&dir).unwrap();
        let names: Vec<&str> = b.agents.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["any", "reviewer"], "{:?}", b.issues);
        assert_eq!(b.agents[0].tools, ["bash", "read"]);
        assert_eq!(b.agents[1].tools, ["read", "grep", "mcp__x__y"]);
        assert_eq!(b.agents[1].instructions, "You review.");
        assert_eq!(b.agents[1].model.as_deref(), Some("opus"));
        let issues = b.issues.join("\n");
        assert!(issues.contains("WebSearch have no Wharf equivalent"), "{issues}");
        assert!(issues.contains("preset `web` is not offered"), "{issues}");
        assert!(issues.contains("`model: opus` is not honoured"), "{issues}");
        assert!(!issues.contains("inherit"), "{issues}");
    }
}
