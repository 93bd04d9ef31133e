//! Dev builds (`wharf plugin dev`, a row with `dev = true`): a prebuilt
//! runtime component per language (interpreter and SDK) that reads the
//! plugin's source at instantiation instead of having it built in.
//!
//! The operator names the source directory ([`Grant::dev_source`]); each
//! load copies it into a content-addressed snapshot ([`snapshot`]), which
//! every sandbox of that version gets read-only at [`GUEST_DIR`] (describe's
//! too). A version is pinned to its snapshot, so a later save changes no
//! running version: it is a new version, loaded through the usual hot-reload
//! path, and one that fails to load never replaces a working one. The
//! version's digest covers component and source.
//!
//! [`Grant::dev_source`]: crate::grants::Grant::dev_source

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Where the guest sees the source snapshot.
pub const GUEST_DIR: &str = "/wharf-dev";
/// Most files a source directory may hold.
pub const MAX_FILES: usize = 2000;
/// Most bytes a source directory may hold.
pub const MAX_BYTES: u64 = 32 << 20;
/// Deepest directory nesting copied.
const MAX_DEPTH: usize = 16;

/// A source directory copied for one version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The copy (never modified once written).
    pub dir: PathBuf,
    /// Hex sha-256 over the files' relative paths and contents.
    pub digest: String,
}

/// Copies `source` (regular files only; links, sockets and the like are
/// skipped) into `base/dev-src/DIGEST/`, unless a copy with that digest is
/// there already. Bounded by [`MAX_FILES`] and [`MAX_BYTES`].
pub fn snapshot(source: &Path, base: &Path) -> Result<Snapshot, String> {
    let root = std::fs::canonicalize(source).map_err(|e| format!("dev source {}: {e}", source.display()))?;
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    let mut total = 0u64;
    collect(&root, &root, 0, &mut files, &mut total)?;
    files.sort_by(|a, b| a.0.cmp(&b.0));
    let mut h = Sha256::new();
    for (rel, bytes) in &files {
        h.update(rel.as_bytes());
        h.update([0]);
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    }
    let digest = hex::encode(h.finalize());
    let dir = base.join("dev-src").join(&digest);
    if !dir.is_dir() {
        let tmp = base.join("dev-src").join(format!(".{digest}.{}", std::process::id()));
        let write = || -> std::io::Result<()> {
            if tmp.exists() {
                std::fs::remove_dir_all(&tmp)?;
            }
            for (rel, bytes) in &files {
                let p = tmp.join(rel);
                if let Some(parent) = p.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::write(&p, bytes)?;
            }
            std::fs::create_dir_all(&tmp)?;
            Ok(())
        };
        write().map_err(|e| format!("copying the dev source to {}: {e}", tmp.display()))?;
        // Another process may have written the same snapshot meanwhile.
        if std::fs::rename(&tmp, &dir).is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
            if !dir.is_dir() {
                return Err(format!("cannot write the dev source snapshot {}", dir.display()));
            }
        }
    }
    Ok(Snapshot { dir, digest })
}

fn collect(
    root: &Path,
    dir: &Path,
    depth: usize,
    out: &mut Vec<(String, Vec<u8>)>,
    total: &mut u64,
) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Ok(());
    }
    let entries = std::fs::read_dir(dir).map_err(|e| format!("dev source {}: {e}", dir.display()))?;
    for e in entries {
        let e = e.map_err(|e| format!("dev source {}: {e}", dir.display()))?;
        let path = e.path();
        let ty = e.file_type().map_err(|err| format!("dev source {}: {err}", path.display()))?;
        if ty.is_dir() {
            collect(root, &path, depth + 1, out, total)?;
        } else if ty.is_file() {
            let Ok(rel) = path.strip_prefix(root) else { continue };
            let Some(rel) = rel.to_str() else { continue };
            if out.len() >= MAX_FILES {
                return Err(format!("dev source {}: more than {MAX_FILES} files", root.display()));
            }
            let len = e.metadata().map(|m| m.len()).unwrap_or(0);
            if *total + len > MAX_BYTES {
                return Err(format!("dev source {}: more than {} MiB", root.display(), MAX_BYTES >> 20));
            }
            let bytes = std::fs::read(&path).map_err(|e| format!("dev source {}: {e}", path.display()))?;
            *total += bytes.len() as u64;
            if *total > MAX_BYTES {
                return Err(format!("dev source {}: more than {} MiB", root.display(), MAX_BYTES >> 20));
            }
            out.push((rel.replace('\\', "/"), bytes));
        }
    }
    Ok(())
}

/// Where snapshots go: the compile cache directory, else the system's
/// temporary directory.
pub fn base_dir(cache_dir: Option<&Path>) -> PathBuf {
    cache_dir.map(Path::to_path_buf).unwrap_or_else(|| std::env::temp_dir().join("wharf-dev"))
}

/// What a dev loader prints before it traps: `wharf-dev: FILE:LINE: error`.
pub const ERROR_MARKER: &str = "wharf-dev: ";

/// The last [`ERROR_MARKER`] line the guest wrote to stderr, without the
/// marker, escaped and at most 1 KiB (the source's `FILE:LINE: error`; the
/// interpreter may print more after it).
pub fn last_stderr_line(bytes: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(bytes);
    let line = text.lines().rev().find_map(|l| l.trim().strip_prefix(ERROR_MARKER))?.trim();
    if line.is_empty() {
        return None;
    }
    let line = wharf_core::util::escape_line(line);
    let mut end = line.len().min(1024);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    Some(line[..end].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_are_content_addressed_and_immutable() {
        let src = tempfile::tempdir().unwrap();
        let base = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("app.py"), "x = 1\n").unwrap();
        std::fs::create_dir(src.path().join("pkg")).unwrap();
        std::fs::write(src.path().join("pkg/m.py"), "y = 2\n").unwrap();
        let a = snapshot(src.path(), base.path()).unwrap();
        assert_eq!(std::fs::read_to_string(a.dir.join("pkg/m.py")).unwrap(), "y = 2\n");
        assert_eq!(snapshot(src.path(), base.path()).unwrap(), a);
        std::fs::write(src.path().join("app.py"), "x = 3\n").unwrap();
        let b = snapshot(src.path(), base.path()).unwrap();
        assert_ne!(a.digest, b.digest);
        assert_eq!(std::fs::read_to_string(a.dir.join("app.py")).unwrap(), "x = 1\n");
        assert_eq!(std::fs::read_to_string(b.dir.join("app.py")).unwrap(), "x = 3\n");
    }

    #[test]
    fn the_last_stderr_line_is_bounded() {
        let printed = b"Traceback\n  x\nwharf-dev: app.py:3: SyntaxError\npanicked\nnote: run with RUST_BACKTRACE\n";
        assert_eq!(last_stderr_line(printed).as_deref(), Some("app.py:3: SyntaxError"));
        assert_eq!(last_stderr_line(b"app.py:3: x\n"), None);
        let long = format!("wharf-dev: {}", "é".repeat(2000));
        assert!(last_stderr_line(long.as_bytes()).is_some_and(|l| l.len() <= 1024));
    }
}
