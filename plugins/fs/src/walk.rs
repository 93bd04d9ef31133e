//! Walking a directory tree (without following symlinks) and matching glob
//! patterns against the paths found.

use std::fs;
use std::path::{Path, PathBuf};

use glob::{MatchOptions, Pattern};
use wharf_sdk::ToolError;

/// Directories never descended into.
const SKIP_DIRS: &[&str] = &[".git"];

/// Most directory entries one walk visits.
pub const MAX_VISITED: usize = 200_000;

/// A file found by [`walk`].
pub struct Found {
    /// Absolute path.
    pub path: PathBuf,
    /// Path relative to the walk's root, with `/` separators.
    pub rel: String,
}

/// The result of a walk.
pub struct Walk {
    /// Regular files, in sorted path order.
    pub files: Vec<Found>,
    /// Whether the walk stopped at [`MAX_VISITED`] entries.
    pub truncated: bool,
    /// Directories that could not be read (path and error), skipped.
    pub errors: Vec<String>,
}

/// Regular files under `root` (or `root` itself if it is a file), sorted by
/// relative path, skipping `.git` and not following symlinks.
pub fn walk(root: &Path) -> Result<Walk, ToolError> {
    let meta = fs::symlink_metadata(root).map_err(|e| ToolError::io_at(root.display(), &e))?;
    let mut out = Walk { files: Vec::new(), truncated: false, errors: Vec::new() };
    if meta.is_file() {
        let rel = root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        out.files.push(Found { path: root.to_path_buf(), rel });
        return Ok(out);
    }
    let mut visited = 0usize;
    // Depth first over a stack of directories.
    let mut stack: Vec<(PathBuf, String)> = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, rel_dir)) = stack.pop() {
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) => {
                out.errors.push(format!("{}: {e}", dir.display()));
                continue;
            }
        };
        let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
        entries.sort_by_key(|e| e.file_name());
        let mut subdirs = Vec::new();
        for entry in entries {
            visited += 1;
            if visited > MAX_VISITED {
                out.truncated = true;
                break;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel = if rel_dir.is_empty() { name.clone() } else { format!("{rel_dir}/{name}") };
            let Ok(ft) = entry.file_type() else { continue };
            if ft.is_dir() {
                if !SKIP_DIRS.contains(&name.as_str()) {
                    subdirs.push((entry.path(), rel));
                }
            } else if ft.is_file() {
                out.files.push(Found { path: entry.path(), rel });
            }
        }
        if out.truncated {
            break;
        }
        stack.extend(subdirs.into_iter().rev());
    }
    out.files.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(out)
}

/// A compiled glob: `*` and `?` stay within one path segment, `**` crosses
/// directories, `[ab]` and `{}`-free character classes as in the `glob`
/// crate. A pattern without `/` matches the file name at any depth
/// (`*.rs` finds every Rust file); one with `/` matches the whole relative
/// path (`src/**/*.rs`).
pub struct Glob {
    pattern: Pattern,
    name_only: bool,
}

const OPTIONS: MatchOptions =
    MatchOptions { case_sensitive: true, require_literal_separator: true, require_literal_leading_dot: false };

impl Glob {
    /// Compiles `pattern`; `..` and absolute patterns are rejected.
    pub fn new(pattern: &str) -> Result<Self, ToolError> {
        let p = pattern.trim().trim_start_matches("./");
        if p.is_empty() {
            return Err(ToolError::invalid_argument("empty glob pattern"));
        }
        if p.starts_with('/') || p.split('/').any(|seg| seg == "..") {
            return Err(ToolError::invalid_argument(
                "glob patterns are relative to `path` and may not contain `..` or start with `/`",
            ));
        }
        let pattern =
            Pattern::new(p).map_err(|e| ToolError::invalid_argument(format!("invalid glob pattern `{p}`: {e}")))?;
        Ok(Self { pattern, name_only: !p.contains('/') })
    }

    /// Whether `rel` (relative path with `/` separators) matches.
    pub fn matches(&self, rel: &str) -> bool {
        if self.name_only {
            let name = rel.rsplit('/').next().unwrap_or(rel);
            self.pattern.matches_with(name, OPTIONS)
        } else {
            self.pattern.matches_with(rel, OPTIONS)
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn glob_semantics() {
        let g = Glob::new("*.rs").unwrap();
        assert!(g.matches("main.rs"));
        assert!(g.matches("src/deep/lib.rs"));
        assert!(!g.matches("src/lib.rs.bak"));
        let g = Glob::new("src/**/*.rs").unwrap();
        assert!(g.matches("src/lib.rs"));
        assert!(g.matches("src/a/b/lib.rs"));
        assert!(!g.matches("tests/x.rs"));
        let g = Glob::new("src/*.rs").unwrap();
        assert!(!g.matches("src/a/lib.rs"));
        let g = Glob::new("**/*.md").unwrap();
        assert!(g.matches("README.md"));
        assert!(Glob::new("../*").is_err());
        assert!(Glob::new("/etc/*").is_err());
    }

    #[test]
    fn walks_sorted_and_skips_git() {
        let d = tempfile::tempdir().unwrap();
        fs::create_dir_all(d.path().join("b/c")).unwrap();
        fs::create_dir_all(d.path().join(".git")).unwrap();
        fs::write(d.path().join(".git/HEAD"), "x").unwrap();
        fs::write(d.path().join("a.txt"), "x").unwrap();
        fs::write(d.path().join("b/c/d.txt"), "x").unwrap();
        fs::write(d.path().join("b/z.txt"), "x").unwrap();
        let w = walk(d.path()).unwrap();
        let rels: Vec<_> = w.files.iter().map(|f| f.rel.as_str()).collect();
        assert_eq!(rels, ["a.txt", "b/c/d.txt", "b/z.txt"]);
    }
}
