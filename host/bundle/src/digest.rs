//! Content digests: what `wharf plugin add` pins and a host checks.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::{BundleError, MAX_FILES, MAX_TOTAL_BYTES};

/// `sha256:` and the hex digest of one file's bytes.
pub fn file_digest(path: &Path) -> Result<String, BundleError> {
    let bytes = std::fs::read(path).map_err(|e| BundleError::io(path, e))?;
    Ok(format!("sha256:{}", hex::encode(Sha256::digest(&bytes))))
}

/// `sha256:` and the hex digest of a directory's content: every regular
/// file and symbolic link below it (`.git` left out), sorted by relative
/// path, each as its path, its kind and its bytes (a link: its target),
/// length-prefixed. Bounded by [`MAX_FILES`] and [`MAX_TOTAL_BYTES`].
pub fn content_digest(root: &Path) -> Result<String, BundleError> {
    let mut files = Vec::new();
    walk(root, root, &mut files)?;
    files.sort();
    let mut h = Sha256::new();
    let mut total = 0u64;
    for rel in files {
        let path = root.join(&rel);
        let meta = std::fs::symlink_metadata(&path).map_err(|e| BundleError::io(&path, e))?;
        let rel_text = rel.to_string_lossy();
        let (kind, bytes) = if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path).map_err(|e| BundleError::io(&path, e))?;
            (b'l', target.to_string_lossy().into_owned().into_bytes())
        } else {
            total += meta.len();
            if total > MAX_TOTAL_BYTES {
                return Err(BundleError::Limit(format!(
                    "{}: more than {MAX_TOTAL_BYTES} bytes of files",
                    root.display()
                )));
            }
            (b'f', std::fs::read(&path).map_err(|e| BundleError::io(&path, e))?)
        };
        h.update((rel_text.len() as u64).to_le_bytes());
        h.update(rel_text.as_bytes());
        h.update([kind]);
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
    }
    Ok(format!("sha256:{}", hex::encode(h.finalize())))
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), BundleError> {
    let entries = std::fs::read_dir(dir).map_err(|e| BundleError::io(dir, e))?;
    for e in entries {
        let e = e.map_err(|err| BundleError::io(dir, err))?;
        let path = e.path();
        let ft = e.file_type().map_err(|err| BundleError::io(&path, err))?;
        if ft.is_dir() {
            if e.file_name() != ".git" {
                walk(root, &path, out)?;
            }
        } else if ft.is_file() || ft.is_symlink() {
            if out.len() >= MAX_FILES {
                return Err(BundleError::Limit(format!("{}: more than {MAX_FILES} files", root.display())));
            }
            out.push(path.strip_prefix(root).unwrap_or(&path).to_path_buf());
        }
    }
    Ok(())
}
