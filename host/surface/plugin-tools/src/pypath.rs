//! Where a Python plugin's packages come from, in `wharf plugin build` and
//! in `wharf plugin dev`.
//!
//! **The release build** runs componentize-py (0.25.1), which executes the
//! plugin's module at build time with `PYTHONPATH` = the standard library,
//! the world's bindings, each `-p` directory in order — `plugin build`
//! passes the project directory, then the SDK — and then the
//! *site-packages* componentize-py finds by itself:
//!
//! 1. `$VIRTUAL_ENV/lib/…/site-packages` (the first such directory) when
//!    `VIRTUAL_ENV` is set (an activated venv);
//! 2. else, when `pipenv` is installed and `pipenv --venv` names the
//!    project's environment, its `lib/…/site-packages`;
//! 3. else `python3`'s `site.getusersitepackages()` followed by
//!    `site.getsitepackages()`.
//!
//! Directories that do not exist are dropped. Whatever the module imports
//! (at its top level) is found in that order and snapshotted into the
//! component; nothing else is.
//!
//! **Dev mode** runs a runtime built once without the plugin's packages, so
//! each publish copies them into the source version: the project's own
//! files are the version's root (packages vendored in the project come
//! along), and the third-party packages the plugin needs — the top-level
//! names its `.py` files import, those the copied packages import in turn,
//! and the packages of `[project] dependencies` — are looked up in the same
//! site-packages list, first directory first, and copied to
//! `_wharf_site/K/` (K = the directory's place in the list). The loader puts
//! the root and then those directories on `sys.path` where the release
//! build has its `-p` directories, so a name resolves to the same file in
//! both builds. A name the project itself provides, the SDK or the standard
//! library is not looked up (the release build finds those first).

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where the copied site packages go inside a source version.
pub(crate) const SITE_DIR: &str = "_wharf_site";
/// Most files copied from site-packages per version (the runtime's snapshot
/// has its own, larger bound).
const MAX_FILES: usize = 1500;
/// Deepest package nesting copied.
const MAX_DEPTH: usize = 12;

/// The release build's package search path after the `-p` directories.
#[derive(Debug, Default)]
pub(crate) struct SitePath {
    /// The site-packages directories, in componentize-py's order.
    pub(crate) dirs: Vec<PathBuf>,
    /// Top-level names of the standard library (found before any
    /// site-packages; not looked up there).
    stdlib: HashSet<String>,
}

impl SitePath {
    /// Resolves the list as componentize-py would, run in `project_dir`.
    pub(crate) fn discover(project_dir: &Path) -> Self {
        let dirs = site_packages(project_dir).into_iter().filter(|d| d.is_dir()).collect();
        let stdlib = python3_lines(project_dir, "import sys; print('\\n'.join(sorted(sys.stdlib_module_names)))")
            .into_iter()
            .collect();
        Self { dirs, stdlib }
    }
}

/// componentize-py's `find_site_packages`, step by step (module docs).
fn site_packages(project_dir: &Path) -> Vec<PathBuf> {
    if let Some(env) = std::env::var_os("VIRTUAL_ENV") {
        return find_named_dir(&Path::new(&env).join("lib"), "site-packages", 0).into_iter().collect();
    }
    let pipenv = Command::new("pipenv")
        .arg("--venv")
        .current_dir(project_dir)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    if let Ok(o) = pipenv
        && o.status.success()
    {
        let venv = String::from_utf8_lossy(&o.stdout).trim().to_string();
        let found: Vec<PathBuf> =
            find_named_dir(&Path::new(&venv).join("lib"), "site-packages", 0).into_iter().collect();
        if !found.is_empty() {
            return found;
        }
    }
    let script = "import site; l = site.getsitepackages(); l.insert(0, site.getusersitepackages()); print(';'.join(l))";
    python3_lines(project_dir, script)
        .into_iter()
        .flat_map(|l| l.split(';').map(|s| s.trim().to_string()).collect::<Vec<_>>())
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .collect()
}

/// The lines `python3 -c SCRIPT` prints (none when there is no python3).
fn python3_lines(dir: &Path, script: &str) -> Vec<String> {
    let out = Command::new("python3")
        .args(["-c", script])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).lines().map(str::to_string).collect(),
        _ => Vec::new(),
    }
}

/// The first directory called `name` at or under `dir` (directory order, as
/// componentize-py walks it).
fn find_named_dir(dir: &Path, name: &str, depth: usize) -> Option<PathBuf> {
    if depth > 6 || !dir.is_dir() {
        return None;
    }
    if dir.file_name().is_some_and(|n| n == name) {
        return Some(std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()));
    }
    std::fs::read_dir(dir).ok()?.flatten().find_map(|e| find_named_dir(&e.path(), name, depth + 1))
}

/// The top-level module names `source` imports (`import a.b, c as d`,
/// `from e.f import g`; relative imports are the package's own). A superset
/// is fine: a name is only copied when a site-packages directory has it.
pub(crate) fn imported_roots(source: &str, out: &mut BTreeSet<String>) {
    let ident = |s: &str| -> Option<String> {
        let root = s.trim().split(['.', ' ', '\t']).next().unwrap_or("");
        (!root.is_empty()
            && root.chars().all(|c| c.is_alphanumeric() || c == '_')
            && !root.starts_with(|c: char| c.is_ascii_digit()))
        .then(|| root.to_string())
    };
    for line in source.lines() {
        let line = line.split('#').next().unwrap_or("");
        for stmt in line.split(';') {
            let stmt = stmt.trim_start();
            if let Some(rest) = stmt.strip_prefix("import ") {
                for item in rest.split(',') {
                    out.extend(ident(item.trim().trim_start_matches('(')));
                }
            } else if let Some(rest) = stmt.strip_prefix("from ") {
                let module = rest.trim_start();
                if !module.starts_with('.') {
                    out.extend(ident(module));
                }
            }
        }
    }
}

/// PEP 503's normalized distribution name.
fn normalize(name: &str) -> String {
    let mut out = String::new();
    let mut sep = false;
    for c in name.chars() {
        if c == '-' || c == '_' || c == '.' {
            sep = true;
        } else {
            if sep && !out.is_empty() {
                out.push('-');
            }
            sep = false;
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// The distribution names of `pyproject.toml`'s `[project] dependencies`.
pub(crate) fn dependencies(pyproject: &str) -> Vec<String> {
    let mut in_project = false;
    let mut collecting = false;
    let mut items = String::new();
    for line in pyproject.lines() {
        let t = line.split('#').next().unwrap_or("").trim();
        if !collecting && t.starts_with('[') {
            in_project = t == "[project]";
            continue;
        }
        if collecting {
            items.push_str(t);
            if t.contains(']') {
                break;
            }
            continue;
        }
        if in_project && let Some(rest) = t.strip_prefix("dependencies") {
            let Some(rest) = rest.trim_start().strip_prefix('=') else { continue };
            items.push_str(rest);
            if rest.contains(']') {
                break;
            }
            collecting = true;
        }
    }
    let mut names = Vec::new();
    let mut chars = items.chars();
    while let Some(c) = chars.next() {
        if c != '"' && c != '\'' {
            continue;
        }
        let spec: String = chars.by_ref().take_while(|&d| d != c).collect();
        let name: String = spec.trim().chars().take_while(|c| c.is_alphanumeric() || "-_.".contains(*c)).collect();
        if !name.is_empty() {
            names.push(normalize(&name));
        }
    }
    names
}

/// The top-level modules an installed distribution provides
/// (`top_level.txt`, else the first components of `RECORD`).
fn distribution_roots(site: &Path, dist: &str) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(site) else { return Vec::new() };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(stem) = name.strip_suffix(".dist-info") else { continue };
        if normalize(stem.split('-').next().unwrap_or("")) != dist {
            continue;
        }
        if let Ok(t) = std::fs::read_to_string(e.path().join("top_level.txt")) {
            return t.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_string).collect();
        }
        let record = std::fs::read_to_string(e.path().join("RECORD")).unwrap_or_default();
        let mut roots = BTreeSet::new();
        for line in record.lines() {
            let path = line.split(',').next().unwrap_or("");
            let first = path.split('/').next().unwrap_or("");
            if path.contains('/') || first.ends_with(".py") {
                let root = first.trim_end_matches(".py");
                if !root.is_empty() && !root.ends_with(".dist-info") && root != ".." && root != "__pycache__" {
                    roots.insert(root.to_string());
                }
            }
        }
        return roots.into_iter().collect();
    }
    Vec::new()
}

/// Copies the third-party packages the version at `staged` needs from the
/// site-packages list into `staged/_wharf_site/K/`; returns the `sys.path`
/// entries to add after the root, relative to it, in order.
pub(crate) fn stage_site_packages(staged: &Path, site: &SitePath, deps: &[String]) -> Result<Vec<String>, String> {
    let mut wanted = BTreeSet::new();
    scan_dir(staged, &mut wanted, 0);
    for dist in deps {
        for dir in &site.dirs {
            let roots = distribution_roots(dir, dist);
            if !roots.is_empty() {
                wanted.extend(roots);
                break;
            }
        }
    }
    let mut done: HashSet<String> = HashSet::new();
    let mut used: BTreeSet<usize> = BTreeSet::new();
    let mut files = 0usize;
    let mut queue: Vec<String> = wanted.into_iter().collect();
    while let Some(name) = queue.pop() {
        if !done.insert(name.clone())
            || name == "wharf_sdk"
            || site.stdlib.contains(&name)
            || staged.join(&name).is_dir()
            || staged.join(format!("{name}.py")).is_file()
        {
            continue;
        }
        for (k, dir) in site.dirs.iter().enumerate() {
            let (from, to_name) = if dir.join(&name).is_dir() {
                (dir.join(&name), name.clone())
            } else if dir.join(format!("{name}.py")).is_file() {
                (dir.join(format!("{name}.py")), format!("{name}.py"))
            } else {
                continue;
            };
            let to = staged.join(SITE_DIR).join(k.to_string()).join(&to_name);
            copy_package(&from, &to, &mut files, 0)
                .map_err(|e| format!("copying the package `{name}` from {}: {e}", dir.display()))?;
            let mut more = BTreeSet::new();
            if to.is_dir() {
                scan_dir(&to, &mut more, 0);
            } else {
                imported_roots(&std::fs::read_to_string(&to).unwrap_or_default(), &mut more);
            }
            queue.extend(more.into_iter().filter(|m| !done.contains(m)));
            used.insert(k);
            break;
        }
    }
    Ok(used.iter().map(|k| format!("{SITE_DIR}/{k}")).collect())
}

/// The imports of every `.py` file under `dir` (not under `_wharf_site`).
fn scan_dir(dir: &Path, out: &mut BTreeSet<String>, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != SITE_DIR && name != "__pycache__" {
                scan_dir(&path, out, depth + 1);
            }
        } else if name.ends_with(".py") {
            imported_roots(&std::fs::read_to_string(&path).unwrap_or_default(), out);
        }
    }
}

/// Copies a module file or a package directory (regular files, no
/// `__pycache__`, no hidden entries).
fn copy_package(from: &Path, to: &Path, files: &mut usize, depth: usize) -> std::io::Result<()> {
    let too_many = || std::io::Error::other(format!("more than {MAX_FILES} files from site-packages"));
    if from.is_file() {
        *files += 1;
        if *files > MAX_FILES {
            return Err(too_many());
        }
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::copy(from, to)?;
        return Ok(());
    }
    if depth > MAX_DEPTH {
        return Ok(());
    }
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "__pycache__" || name.ends_with(".pyc") {
            continue;
        }
        let ty = e.file_type()?;
        if ty.is_dir() || ty.is_file() {
            copy_package(&e.path(), &to.join(&name), files, depth + 1)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imports_and_dependencies_are_read() {
        let mut roots = BTreeSet::new();
        imported_roots(
            "import os, tinypkg.fmt as f\nfrom a.b import c  # x\nfrom . import local\n  import z; from y import w\n\
             x = 'import'\n",
            &mut roots,
        );
        assert_eq!(roots.into_iter().collect::<Vec<_>>(), ["a", "os", "tinypkg", "y", "z"]);
        let py = "[project]\nname = \"p\"\ndependencies = [\n  \"Tiny_Pkg>=1.0\",  # c\n  'other[x]; python_version>\"3\"',\n]\n[tool.wharf]\ndependencies = [\"no\"]\n";
        assert_eq!(dependencies(py), ["tiny-pkg", "other"]);
        assert_eq!(normalize("A.b__C"), "a-b-c");
    }
}
