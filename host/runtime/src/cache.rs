//! The on-disk compile cache: precompiled components keyed by the content
//! digest and the engine's compatibility hash, so a restart does not
//! recompile and a changed engine setting never loads a stale artifact.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Where an artifact came from, for reporting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Found in this process's memory.
    Memory,
    /// Loaded from the on-disk cache.
    Disk,
    /// Compiled now (and stored if the cache is writable).
    Compiled,
}

/// Compiled components by digest and engine, in memory and on disk (code
/// compiled by one engine runs only in that engine's stores, and a runtime
/// has more than one).
pub struct CompileCache {
    dir: Option<PathBuf>,
    /// The compatibility hash of the engine the cache was made for (the one
    /// [`CompileCache::has`] asks about).
    engine_hash: String,
    /// By (engine hash, digest).
    memory: Mutex<HashMap<(String, String), Component>>,
}

/// A short hash of what makes an engine's code loadable by another.
fn engine_hash(engine: &Engine) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    format!("{:016x}", h.finish())
}

/// The hex sha-256 of some bytes.
pub fn digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl CompileCache {
    /// A cache in `dir` (created on demand); `None` keeps it in memory only.
    pub fn new(engine: &Engine, dir: Option<PathBuf>) -> Self {
        Self { dir, engine_hash: engine_hash(engine), memory: Mutex::new(HashMap::new()) }
    }

    /// The cache directory, if on disk.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    fn artifact_path(&self, digest: &str, engine_hash: &str) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join(format!("{digest}-{engine_hash}.cwasm")))
    }

    /// Whether the compiled code of `digest` is in memory or on disk (a
    /// load would not compile).
    pub fn has(&self, digest: &str) -> bool {
        let key = (self.engine_hash.clone(), digest.to_string());
        self.memory.lock().unwrap_or_else(|e| e.into_inner()).contains_key(&key)
            || self.artifact_path(digest, &self.engine_hash).is_some_and(|p| p.exists())
    }

    /// Returns the compiled component for `bytes` (whose digest is
    /// `digest`), compiling it on a miss.
    pub fn get_or_compile(
        &self,
        engine: &Engine,
        digest: &str,
        bytes: &[u8],
    ) -> wasmtime::Result<(Component, CacheOutcome)> {
        let key = (engine_hash(engine), digest.to_string());
        if let Some(c) = self.memory.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok((c.clone(), CacheOutcome::Memory));
        }
        if let Some(path) = self.artifact_path(digest, &key.0)
            && path.exists()
        {
            // SAFETY: artifacts in this directory are written only by
            // `store` below from our own compilation (atomic rename), and
            // the file name binds them to the content digest and to this
            // engine's compatibility hash. A corrupt or foreign file fails
            // deserialization's header checks and is recompiled.
            match unsafe { Component::deserialize_file(engine, &path) } {
                Ok(c) => {
                    self.remember(key, &c);
                    return Ok((c, CacheOutcome::Disk));
                }
                Err(e) => {
                    tracing::warn!("discarding unusable cache artifact {}: {e:#}", path.display());
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        let component = Component::new(engine, bytes)?;
        if let Some(path) = self.artifact_path(digest, &key.0)
            && let Err(e) = Self::store(&component, &path)
        {
            tracing::warn!("could not write compile cache {}: {e:#}", path.display());
        }
        self.remember(key, &component);
        Ok((component, CacheOutcome::Compiled))
    }

    fn remember(&self, key: (String, String), c: &Component) {
        self.memory.lock().unwrap_or_else(|e| e.into_inner()).insert(key, c.clone());
    }

    fn store(component: &Component, path: &Path) -> anyhow::Result<()> {
        let bytes = component.serialize()?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, &bytes)?;
        std::fs::rename(&tmp, path)?;
        Ok(())
    }

    /// Forgets the in-memory copy of a digest (the disk copy stays).
    pub fn evict(&self, digest: &str) {
        self.memory.lock().unwrap_or_else(|e| e.into_inner()).retain(|(_, d), _| d != digest);
    }
}

/// Cranelift's incremental compilation cache on disk: one file per compiled
/// function, named by the sha-256 of Cranelift's cache key (which covers the
/// function's IR, the ISA and the compiler flags). A component rebuilt from
/// an edited Python or JavaScript source keeps its interpreter's functions
/// unchanged, so recompiling it mostly reads them back from here.
///
/// Entries are written atomically (temp file + rename) and read back as
/// opaque bytes that Cranelift checks (a version/key header) before use; a
/// file that does not parse is a miss and is recompiled. Writes stop once
/// the directory holds [`IncrementalStore::MAX_BYTES`] written by this
/// process, so a runaway build cannot fill the disk.
#[derive(Debug)]
pub struct IncrementalStore {
    dir: PathBuf,
    written: std::sync::atomic::AtomicU64,
    hits: std::sync::atomic::AtomicU64,
    misses: std::sync::atomic::AtomicU64,
}

impl IncrementalStore {
    /// Bytes one process writes at most.
    pub const MAX_BYTES: u64 = 2 << 30;
    /// Largest entry read back (one function's compiled code).
    const MAX_ENTRY: u64 = 64 << 20;

    /// A store in `dir` (created on the first write).
    pub fn new(dir: PathBuf) -> Self {
        Self { dir, written: Default::default(), hits: Default::default(), misses: Default::default() }
    }

    fn path(&self, key: &[u8]) -> PathBuf {
        let h = hex::encode(Sha256::digest(key));
        self.dir.join(&h[..2]).join(&h[2..])
    }

    /// (hits, misses) so far.
    pub fn stats(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.hits.load(Relaxed), self.misses.load(Relaxed))
    }
}

impl wasmtime::CacheStore for IncrementalStore {
    fn get(&self, key: &[u8]) -> Option<std::borrow::Cow<'_, [u8]>> {
        use std::sync::atomic::Ordering::Relaxed;
        let path = self.path(key);
        let found = std::fs::metadata(&path)
            .ok()
            .filter(|m| m.len() <= Self::MAX_ENTRY)
            .and_then(|_| std::fs::read(&path).ok());
        match found {
            Some(v) => {
                self.hits.fetch_add(1, Relaxed);
                Some(std::borrow::Cow::Owned(v))
            }
            None => {
                self.misses.fetch_add(1, Relaxed);
                None
            }
        }
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let len = value.len() as u64;
        if self.written.fetch_add(len, Relaxed) + len > Self::MAX_BYTES {
            return false;
        }
        let path = self.path(key);
        let Some(parent) = path.parent() else { return false };
        if std::fs::create_dir_all(parent).is_err() {
            return false;
        }
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let tmp = path.with_extension(format!("tmp{}-{}", std::process::id(), SEQ.fetch_add(1, Relaxed)));
        if std::fs::write(&tmp, &value).is_err() {
            let _ = std::fs::remove_file(&tmp);
            return false;
        }
        std::fs::rename(&tmp, &path).is_ok()
    }
}
