//! The content-addressed local store: `ROOT/blobs/sha256/<hex>` (manifests,
//! configs, component layers, signature payloads) and `ROOT/index.json`,
//! a reference → digest index (`HOST/REPO:TAG` → manifest digest) written
//! by pulls and pushes, so a pinned component, or a tag pulled before,
//! loads with no registry.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{Digest, DistError, MAX_MANIFEST_BYTES, Result};

/// Overrides the store's root directory.
pub const STORE_ENV: &str = "WHARF_OCI_DIR";

/// The local store.
#[derive(Debug, Clone)]
pub struct BlobStore {
    root: PathBuf,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Index {
    #[serde(default)]
    refs: BTreeMap<String, String>,
}

impl BlobStore {
    /// A store rooted at `root` (created on first write).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The default root: `$WHARF_OCI_DIR`, else `$XDG_CACHE_HOME/wharf/oci`,
    /// else `~/.cache/wharf/oci`; `None` without any of them.
    pub fn default_root() -> Option<PathBuf> {
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        var(STORE_ENV)
            .or_else(|| var("XDG_CACHE_HOME").map(|c| c.join("wharf").join("oci")))
            .or_else(|| var("HOME").map(|h| h.join(".cache").join("wharf").join("oci")))
    }

    /// The store at [`BlobStore::default_root`].
    pub fn open_default() -> Result<Self> {
        Self::default_root()
            .map(Self::new)
            .ok_or_else(|| DistError::NotInStore(format!("no OCI store directory: set {STORE_ENV} or HOME")))
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the blob with `digest` lives (whether or not it is there).
    pub fn blob_path(&self, digest: &Digest) -> PathBuf {
        self.root.join("blobs").join("sha256").join(digest.hex())
    }

    /// Whether the blob is in the store (not checked).
    pub fn has(&self, digest: &Digest) -> bool {
        self.blob_path(digest).is_file()
    }

    /// Stores `bytes` under their digest (through a temp file and a rename,
    /// so readers never see half a blob) and returns it.
    pub fn put(&self, bytes: &[u8]) -> Result<Digest> {
        let digest = Digest::of(bytes);
        let path = self.blob_path(&digest);
        let dir = path.parent().map_or_else(|| self.root.clone(), Path::to_path_buf);
        std::fs::create_dir_all(&dir).map_err(|e| DistError::io(format!("create {}", dir.display()), e))?;
        write_atomic(&dir, &path, bytes)?;
        Ok(digest)
    }

    /// Stores `bytes` if they have `expected` as digest, else refuses them.
    pub fn put_checked(&self, expected: &Digest, bytes: &[u8], what: &str) -> Result<()> {
        expected.check(bytes, what)?;
        self.put(bytes).map(|_| ())
    }

    /// Reads the blob `digest` (at most `limit` bytes) and checks that its
    /// bytes still have that digest: a changed file is refused.
    pub fn read(&self, digest: &Digest, limit: u64, what: &str) -> Result<Vec<u8>> {
        let path = self.blob_path(digest);
        let file = std::fs::File::open(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                DistError::NotInStore(format!("{what} {digest} is not in the local store {}", self.root.display()))
            } else {
                DistError::io(format!("open {}", path.display()), e)
            }
        })?;
        let mut bytes = Vec::new();
        file.take(limit + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| DistError::io(format!("read {}", path.display()), e))?;
        if bytes.len() as u64 > limit {
            return Err(DistError::TooLarge { what: format!("{what} {digest} in the store"), limit });
        }
        digest.check(&bytes, &format!("{what} in the local store ({})", path.display()))?;
        Ok(bytes)
    }

    /// Reads a manifest blob (bounded, checked).
    pub fn read_manifest(&self, digest: &Digest) -> Result<Vec<u8>> {
        self.read(digest, MAX_MANIFEST_BYTES, "manifest")
    }

    /// The digest a tag reference (`HOST/REPO:TAG`) was last seen at.
    pub fn lookup(&self, key: &str) -> Option<Digest> {
        let index = self.read_index().ok()?;
        index.refs.get(key).and_then(|d| Digest::parse(d).ok())
    }

    /// Records that `key` (`HOST/REPO:TAG`) points at `digest`.
    pub fn record(&self, key: &str, digest: &Digest) -> Result<()> {
        std::fs::create_dir_all(&self.root).map_err(|e| DistError::io(format!("create {}", self.root.display()), e))?;
        // One writer at a time: the lock file serialises read-modify-write.
        let lock_path = self.root.join("index.lock");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| DistError::io(format!("open {}", lock_path.display()), e))?;
        lock.lock().map_err(|e| DistError::io(format!("lock {}", lock_path.display()), e))?;
        let mut index = self.read_index().unwrap_or_default();
        index.refs.insert(key.to_string(), digest.to_string());
        let text = serde_json::to_vec_pretty(&index).map_err(|e| DistError::io("encode index", e.into()))?;
        let result = write_atomic(&self.root, &self.root.join("index.json"), &text);
        let _ = lock.unlock();
        result
    }

    fn read_index(&self) -> Result<Index> {
        let path = self.root.join("index.json");
        let file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Index::default()),
            Err(e) => return Err(DistError::io(format!("open {}", path.display()), e)),
        };
        let mut bytes = Vec::new();
        file.take(16 << 20)
            .read_to_end(&mut bytes)
            .map_err(|e| DistError::io(format!("read {}", path.display()), e))?;
        serde_json::from_slice(&bytes).map_err(|e| DistError::io(format!("parse {}", path.display()), e.into()))
    }
}

fn write_atomic(dir: &Path, path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = dir.join(format!(
        ".tmp-{}-{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0)
    ));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        DistError::io(format!("write {}", path.display()), e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use anyhow::Context;

    #[test]
    fn blobs_are_content_addressed_and_checked_on_read() -> anyhow::Result<()> {
        let dir = tempfile::tempdir().context("creating a temp dir")?;
        let store = BlobStore::new(dir.path());
        let d = store.put(b"component bytes").context("storing a blob")?;
        assert_eq!(d, Digest::of(b"component bytes"));
        assert!(store.blob_path(&d).ends_with(format!("blobs/sha256/{}", d.hex())));
        assert_eq!(store.read(&d, 100, "layer").unwrap_or_default(), b"component bytes");
        assert!(matches!(store.read(&d, 3, "layer"), Err(DistError::TooLarge { .. })));

        std::fs::write(store.blob_path(&d), b"changed").context("overwriting the blob")?;
        assert!(matches!(store.read(&d, 100, "layer"), Err(DistError::DigestMismatch { .. })));
        assert!(matches!(store.read(&Digest::of(b"none"), 100, "layer"), Err(DistError::NotInStore(_))));
        assert!(store.put_checked(&d, b"other", "layer").is_err());
        Ok(())
    }

    #[test]
    fn index_maps_tags_to_digests() -> anyhow::Result<()> {
        let dir = tempfile::tempdir().context("creating a temp dir")?;
        let store = BlobStore::new(dir.path().join("oci"));
        assert_eq!(store.lookup("h/r:v1"), None);
        let (a, b) = (Digest::of(b"a"), Digest::of(b"b"));
        store.record("h/r:v1", &a).context("recording a tag")?;
        store.record("h/r:v2", &b).context("recording a tag")?;
        store.record("h/r:v1", &b).context("recording a tag")?;
        assert_eq!(store.lookup("h/r:v1"), Some(b.clone()));
        assert_eq!(store.lookup("h/r:v2"), Some(b));
        Ok(())
    }
}
