//! Marketplaces: `.claude-plugin/marketplace.json` lists bundles and where
//! each comes from — a path relative to the marketplace (under
//! `metadata.pluginRoot` when set), a git repository (`{"source": "url" |
//! "git", "url", "ref"?, "sha"?}`), or a GitHub repository (`{"source":
//! "github", "repo": "OWNER/NAME"}`).

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::{BundleError, read_json};

/// Where a listed bundle comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A directory inside the marketplace (absolute).
    Path(PathBuf),
    /// A git repository.
    Git {
        /// Clone URL.
        url: String,
        /// Branch, tag or commit to check out.
        rev: Option<String>,
    },
}

/// One listed bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its name.
    pub name: String,
    /// What it is.
    pub description: Option<String>,
    /// Where it comes from.
    pub source: Source,
}

/// A marketplace file.
#[derive(Debug, Clone)]
pub struct Marketplace {
    /// Its name.
    pub name: String,
    /// Its directory (the one holding `.claude-plugin/`).
    pub root: PathBuf,
    /// The bundles it lists.
    pub entries: Vec<Entry>,
}

impl Marketplace {
    /// Reads the marketplace of directory `root` (`.claude-plugin/` or
    /// `.codex-plugin/marketplace.json`), or a marketplace file itself.
    pub fn load(root: &Path) -> Result<Self, BundleError> {
        let (root, file) = if root.is_file() {
            let dir = root.parent().and_then(Path::parent).unwrap_or(Path::new("/")).to_path_buf();
            (dir, root.to_path_buf())
        } else {
            let file = [".claude-plugin", ".codex-plugin", ".agents/plugins"]
                .iter()
                .map(|d| root.join(d).join("marketplace.json"))
                .find(|p| p.is_file())
                .ok_or_else(|| BundleError::invalid(root, "no .claude-plugin/marketplace.json here"))?;
            (root.to_path_buf(), file)
        };
        let v = read_json(&file)?;
        let name = v.get("name").and_then(Value::as_str).unwrap_or("marketplace").to_string();
        let plugin_root = v.pointer("/metadata/pluginRoot").and_then(Value::as_str).unwrap_or(".");
        let Some(list) = v.get("plugins").and_then(Value::as_array) else {
            return Err(BundleError::invalid(&file, "no `plugins` array"));
        };
        let mut entries = Vec::new();
        for p in list {
            let Some(pname) = p.get("name").and_then(Value::as_str) else {
                return Err(BundleError::invalid(&file, "a plugin entry has no `name`"));
            };
            let bad = |m: &str| BundleError::invalid(&file, format!("plugin `{pname}`: {m}"));
            let source = match p.get("source") {
                Some(Value::String(s)) => {
                    let rel = Path::new(plugin_root).join(s.trim_start_matches("./"));
                    let path = root.join(rel);
                    let within = std::fs::canonicalize(&path).ok().zip(std::fs::canonicalize(&root).ok());
                    match within {
                        Some((p, r)) if p.starts_with(&r) => Source::Path(p),
                        Some(_) => return Err(bad("source path leaves the marketplace")),
                        None => return Err(bad(&format!("source `{s}` does not exist"))),
                    }
                }
                Some(o @ Value::Object(_)) => {
                    let kind = o.get("source").and_then(Value::as_str).unwrap_or_default();
                    let rev = o.get("sha").or_else(|| o.get("ref")).and_then(Value::as_str).map(str::to_string);
                    let url = match kind {
                        "url" | "git" => o.get("url").and_then(Value::as_str).map(str::to_string),
                        "github" => {
                            o.get("repo").and_then(Value::as_str).map(|r| format!("https://github.com/{r}.git"))
                        }
                        _ => return Err(bad(&format!("source kind `{kind}` is not supported by Wharf"))),
                    };
                    Source::Git { url: url.ok_or_else(|| bad("source has no url / repo"))?, rev }
                }
                _ => return Err(bad("no `source`")),
            };
            entries.push(Entry {
                name: pname.to_string(),
                description: p.get("description").and_then(Value::as_str).map(str::to_string),
                source,
            });
        }
        Ok(Self { name, root, entries })
    }

    /// The entry named `name`.
    pub fn entry(&self, name: &str) -> Result<&Entry, BundleError> {
        self.entries.iter().find(|e| e.name == name).ok_or_else(|| {
            let names: Vec<&str> = self.entries.iter().map(|e| e.name.as_str()).collect();
            BundleError::Refused(format!(
                "marketplace `{}` lists no bundle `{name}` (it lists: {})",
                self.name,
                if names.is_empty() { "none".into() } else { names.join(", ") }
            ))
        })
    }
}
