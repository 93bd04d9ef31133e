//! `skills`: Agent Skills from directories, with progressive disclosure.
//!
//! A skill is a directory `DIR/NAME/` holding a `SKILL.md` whose front matter
//! names it and says when to use it:
//!
//! ```markdown
//! ---
//! name: pdf
//! description: Fill in and extract text from PDF forms. Use for any .pdf task.
//! ---
//! # PDF
//! Step-by-step instructions …
//! ```
//!
//! The host puts the catalog (`name` and `description` of every skill) into
//! the system prompt; the model loads a skill's full text with the `skill`
//! tool when a task calls for it. Files are re-read on every call (each call
//! runs in a fresh sandbox), so edits show up at once.
//!
//! # Configuration
//!
//! ```toml
//! [plugin.config]
//! dirs = ["${workspace}/.wharf/skills", "${home}/.wharf/skills"]
//! [plugin.grant]
//! dirs = ["${workspace}/.wharf/skills:ro", "${home}/.wharf/skills:ro"]
//! ```
//!
//! `dirs` are searched in order; a missing directory is skipped, and when two
//! directories hold a skill of the same name the first one wins. A skill
//! whose front matter is missing, malformed or lacks `name` / `description`
//! is skipped with a warning in the host log.

mod frontmatter;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::Deserialize;
use wharf_sdk::prelude::*;

/// Longest skill name, in characters (the Agent Skills limit).
const MAX_NAME_CHARS: usize = 64;
/// Longest description kept in the catalog, in characters.
const MAX_DESCRIPTION_CHARS: usize = 1024;
/// Most files listed next to a loaded skill.
const MAX_LISTED_FILES: usize = 200;
/// How deep the file listing of a skill directory goes.
const MAX_LIST_DEPTH: usize = 4;

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Config {
    /// Skill roots, searched in order.
    dirs: Vec<PathBuf>,
}

/// One discovered skill.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Skill {
    name: String,
    description: String,
    /// The skill's directory.
    dir: PathBuf,
}

#[derive(Deserialize, JsonSchema)]
struct SkillArgs {
    /// Name of the skill to load, exactly as listed in the skills catalog.
    name: String,
}

fn config() -> Result<Config, String> {
    let mut cfg = wharf_sdk::config::get::<Config>().map_err(|e| format!("skills: {e}"))?;
    // `~/…` entries need the operator to pass HOME (`grant.env = ["HOME"]`);
    // without it they are skipped like any missing directory.
    let home = std::env::var_os("HOME").map(PathBuf::from);
    cfg.dirs = cfg
        .dirs
        .into_iter()
        .filter_map(|d| match d.strip_prefix("~") {
            Ok(rest) => home.as_ref().map(|h| h.join(rest)),
            Err(_) => Some(d),
        })
        .collect();
    Ok(cfg)
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.chars().count() <= MAX_NAME_CHARS
        && name.chars().all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Reads one `DIR/NAME/SKILL.md` header.
fn read_skill(dir: &Path) -> Result<Skill, String> {
    let file = dir.join("SKILL.md");
    let text = fs::read_to_string(&file).map_err(|e| e.to_string())?;
    let doc = frontmatter::parse(&text).map_err(|e| e.to_string())?;
    let name = doc.keys.get("name").map(|s| s.trim().to_string()).unwrap_or_default();
    if name.is_empty() {
        return Err("front matter has no `name`".into());
    }
    if !valid_name(&name) {
        return Err(format!(
            "name `{name}` is invalid (letters, digits, `-`, `_`, `.`; at most {MAX_NAME_CHARS} characters)"
        ));
    }
    let description = doc.keys.get("description").map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "));
    let description = description.filter(|d| !d.is_empty()).ok_or("front matter has no `description`")?;
    let description = if description.chars().count() > MAX_DESCRIPTION_CHARS {
        let mut cut: String = description.chars().take(MAX_DESCRIPTION_CHARS - 1).collect();
        cut.push('…');
        cut
    } else {
        description
    };
    Ok(Skill { name, description, dir: dir.to_path_buf() })
}

/// Every valid skill under the configured roots, first root first, each
/// root in name order. `noisy` logs skipped skills as warnings (the catalog
/// does; tool calls log them at debug level to avoid repeating them).
fn discover(cfg: &Config, noisy: bool) -> Vec<Skill> {
    let mut skills: Vec<Skill> = Vec::new();
    let mut seen = BTreeSet::new();
    for root in &cfg.dirs {
        let entries = match fs::read_dir(root) {
            Ok(e) => e,
            Err(e) => {
                if e.kind() != io::ErrorKind::NotFound {
                    wharf_sdk::log::debug!("skills: skipping {}: {e}", root.display());
                }
                continue;
            }
        };
        let mut dirs: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_dir() && p.join("SKILL.md").is_file())
            .collect();
        dirs.sort();
        for dir in dirs {
            match read_skill(&dir) {
                Ok(skill) if seen.contains(&skill.name) => {
                    wharf_sdk::log::debug!(
                        "skills: {} is shadowed by an earlier skill named `{}`",
                        dir.display(),
                        skill.name
                    );
                }
                Ok(skill) => {
                    seen.insert(skill.name.clone());
                    skills.push(skill);
                }
                Err(e) if noisy => wharf_sdk::log::warn!("skills: skipping {}/SKILL.md: {e}", dir.display()),
                Err(e) => wharf_sdk::log::debug!("skills: skipping {}/SKILL.md: {e}", dir.display()),
            }
        }
    }
    skills
}

/// Files of a skill directory other than `SKILL.md`, sorted, bounded.
fn other_files(dir: &Path) -> (Vec<PathBuf>, bool) {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), 0usize)];
    let mut truncated = false;
    while let Some((d, depth)) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else { continue };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            let Ok(ft) = entry.file_type() else { continue };
            if ft.is_dir() {
                if depth + 1 < MAX_LIST_DEPTH {
                    stack.push((path, depth + 1));
                }
            } else if path != dir.join("SKILL.md") {
                if out.len() >= MAX_LISTED_FILES {
                    truncated = true;
                    continue;
                }
                out.push(path);
            }
        }
    }
    out.sort();
    (out, truncated)
}

/// The full text of a skill: its body, then where it lives and its other
/// files (which the model reads with the file tools).
fn load_text(cfg: &Config, name: &str) -> Result<String, String> {
    let skills = discover(cfg, false);
    let Some(skill) = skills.iter().find(|s| s.name == name) else {
        let names: Vec<&str> = skills.iter().map(|s| s.name.as_str()).collect();
        let available = if names.is_empty() { "none".to_string() } else { names.join(", ") };
        return Err(format!("no skill named `{name}` (available: {available})"));
    };
    let file = skill.dir.join("SKILL.md");
    let text = fs::read_to_string(&file).map_err(|e| format!("reading {}: {e}", file.display()))?;
    let doc = frontmatter::parse(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    let mut out = format!("# Skill: {}\n\n{}\n\n---\nSkill directory: {}\n", skill.name, doc.body, skill.dir.display());
    let (files, truncated) = other_files(&skill.dir);
    if files.is_empty() {
        out.push_str("This skill has no other files.\n");
    } else {
        out.push_str(
            "Other files of this skill (read them with the file tools when the instructions refer to them):\n",
        );
        for f in &files {
            let _ = writeln!(out, "- {}", f.display());
        }
        if truncated {
            let _ = writeln!(out, "- … (more files not listed)");
        }
    }
    Ok(out)
}

struct Skills;

impl ToolPlugin for Skills {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "skills",
            env!("CARGO_PKG_VERSION"),
            "Agent Skills (SKILL.md) from granted directories: a catalog in the system prompt, the `skill` tool \
             loads one.",
        )
        .filesystem(FsAccess::ReadOnly)
        .env(["HOME"])
    }

    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec::new::<SkillArgs>(
            "skill",
            "Loads the full instructions of one skill from the skills catalog in the system prompt, plus \
             the list of its other files. Call it before starting a task that a listed skill covers, \
             then follow the instructions.",
            ToolMode::Parallel,
        )]
    }

    fn call(name: &str, args: Args, _ctx: &CallContext) -> ToolResult {
        match name {
            "skill" => {
                let a: SkillArgs = args.parse()?;
                let cfg = config().map_err(|e| ToolError::new("CONFIG", e))?;
                if cfg.dirs.is_empty() {
                    return Err(ToolError::new("CONFIG", "skills: no skill directories are configured (`dirs`)"));
                }
                load_text(&cfg, &a.name).map(ToolOutput::text).map_err(ToolError::not_found)
            }
            other => Err(ToolError::unknown_tool(other)),
        }
    }
}

impl SkillsPlugin for Skills {
    fn catalog() -> Result<Vec<SkillSummary>, String> {
        Ok(discover(&config()?, true).into_iter().map(|s| SkillSummary::new(s.name, s.description)).collect())
    }

    fn load(name: &str) -> Result<String, String> {
        load_text(&config()?, name)
    }
}

wharf_sdk::export_skills!(Skills);

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    fn setup() -> (PathBuf, PathBuf, PathBuf) {
        let base =
            std::env::temp_dir().join(format!("wharf-skills-{}-{:?}", std::process::id(), std::thread::current().id()));
        let _ = fs::remove_dir_all(&base);
        let (a, b) = (base.join("a"), base.join("b"));
        write(
            &a.join("pdf/SKILL.md"),
            "---\nname: pdf\ndescription: >\n  PDF forms\n  and text.\n---\n# PDF\nUse forms.md.\n",
        );
        write(&a.join("pdf/forms.md"), "forms");
        write(&a.join("pdf/scripts/fill.py"), "print()");
        write(&a.join("broken/SKILL.md"), "no header");
        write(&a.join("nodesc/SKILL.md"), "---\nname: nodesc\n---\n");
        write(&b.join("pdf/SKILL.md"), "---\nname: pdf\ndescription: shadowed\n---\nother\n");
        write(&b.join("xlsx/SKILL.md"), "---\nname: \"xlsx\"\ndescription: Spreadsheets.\n---\nSheets.\n");
        (base, a, b)
    }

    #[test]
    fn discovery_skips_invalid_and_first_dir_wins() {
        let (base, a, b) = setup();
        let cfg = Config { dirs: vec![base.join("missing"), a.clone(), b.clone()] };
        let skills = discover(&cfg, false);
        let got: Vec<(&str, &str)> = skills.iter().map(|s| (s.name.as_str(), s.description.as_str())).collect();
        assert_eq!(got, vec![("pdf", "PDF forms and text."), ("xlsx", "Spreadsheets.")]);
        assert_eq!(skills[0].dir, a.join("pdf"));
        let _ = fs::remove_dir_all(base);
    }

    #[test]
    fn load_returns_the_body_and_the_other_files() {
        let (base, a, b) = setup();
        let cfg = Config { dirs: vec![a.clone(), b] };
        let text = load_text(&cfg, "pdf").unwrap();
        assert!(text.starts_with("# Skill: pdf\n\n# PDF\nUse forms.md.\n"), "{text}");
        assert!(!text.contains("description"), "{text}");
        assert!(text.contains(&format!("- {}\n", a.join("pdf/forms.md").display())), "{text}");
        assert!(text.contains(&format!("- {}\n", a.join("pdf/scripts/fill.py").display())), "{text}");
        assert!(!text.contains("SKILL.md"), "{text}");
        let err = load_text(&cfg, "docx").unwrap_err();
        assert_eq!(err, "no skill named `docx` (available: pdf, xlsx)");
        let _ = fs::remove_dir_all(base);
    }
}
