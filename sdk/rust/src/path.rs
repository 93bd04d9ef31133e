//! Lexical path helpers for tools that take paths from the model.
//!
//! The host preopens each granted directory at the same absolute path as on
//! the host, so host paths work unchanged inside the sandbox. These helpers
//! resolve relative paths against the session workspace and check, *before*
//! touching the filesystem, that a path stays inside a root; the WASI
//! sandbox remains the second wall (it also stops symlinks that point out).

use std::path::{Component, Path, PathBuf};

use crate::raw::wharf::plugin::types::ToolError;

/// Removes `.` and resolves `..` lexically (without touching the
/// filesystem). `..` never climbs above the root of an absolute path; for a
/// relative path, leading `..` are kept.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out: Vec<Component<'_>> = Vec::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => match out.last() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                Some(Component::RootDir | Component::Prefix(_)) => {}
                _ => out.push(c),
            },
            other => out.push(other),
        }
    }
    if out.is_empty() {
        return PathBuf::from(".");
    }
    out.iter().collect()
}

/// Resolves `path` against `base` (the workspace) when it is relative, then
/// [`normalize`]s it. A relative path without a base is an
/// `INVALID_ARGUMENT` error.
pub fn resolve(base: Option<&str>, path: &str) -> Result<PathBuf, ToolError> {
    let p = Path::new(path);
    if path.is_empty() {
        return Err(ToolError::invalid_argument("empty path"));
    }
    if p.is_absolute() {
        return Ok(normalize(p));
    }
    match base {
        Some(b) if Path::new(b).is_absolute() => Ok(normalize(&Path::new(b).join(p))),
        _ => Err(ToolError::invalid_argument(format!(
            "relative path `{path}` but this session has no workspace; use an absolute path"
        ))),
    }
}

/// [`resolve`]s `path` and checks that it is `root` or inside it; otherwise
/// a `PERMISSION_DENIED` error that names the root.
pub fn confine(root: &str, path: &str) -> Result<PathBuf, ToolError> {
    let root_n = normalize(Path::new(root));
    let resolved = resolve(Some(root), path)?;
    if resolved.starts_with(&root_n) {
        Ok(resolved)
    } else {
        Err(ToolError::permission_denied(format!("`{path}` is outside the workspace {}", root_n.display())))
    }
}

/// `path` relative to `root` for display (`.` for the root itself), or the
/// path unchanged when it is not inside `root`.
pub fn display_relative(root: &Path, path: &Path) -> String {
    match path.strip_prefix(root) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
        Ok(rel) => rel.display().to_string(),
        Err(_) => path.display().to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn normalizes() {
        assert_eq!(normalize(Path::new("/a/./b/../c")), PathBuf::from("/a/c"));
        assert_eq!(normalize(Path::new("/../../etc")), PathBuf::from("/etc"));
        assert_eq!(normalize(Path::new("a/../../b")), PathBuf::from("../b"));
        assert_eq!(normalize(Path::new("./")), PathBuf::from("."));
    }

    #[test]
    fn confines() {
        assert_eq!(confine("/ws", "src/x.rs").unwrap(), PathBuf::from("/ws/src/x.rs"));
        assert_eq!(confine("/ws", ".").unwrap(), PathBuf::from("/ws"));
        assert_eq!(confine("/ws/", "/ws/a").unwrap(), PathBuf::from("/ws/a"));
        assert_eq!(confine("/ws", "../etc/passwd").unwrap_err().code, "PERMISSION_DENIED");
        assert_eq!(confine("/ws", "/etc/passwd").unwrap_err().code, "PERMISSION_DENIED");
        assert_eq!(confine("/ws", "/wsx/a").unwrap_err().code, "PERMISSION_DENIED");
        assert_eq!(confine("/ws", "a/../../ws/b").unwrap(), PathBuf::from("/ws/b"));
        assert_eq!(resolve(None, "x").unwrap_err().code, "INVALID_ARGUMENT");
    }
}
