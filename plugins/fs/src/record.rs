//! Read-before-edit bookkeeping.
//!
//! Every call runs in a fresh instance, so what a session has read is kept in
//! the plugin's `kv` store under `read/<session-id>/<absolute path>`, as the
//! length and a content hash of the file at the time it was read (or last
//! written by this plugin). `write` over an existing file and `edit` check
//! that record: no record is `NOT_READ`, a different hash is `STALE`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// What was seen of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    /// Length in bytes.
    pub len: u64,
    /// Content hash ([`Hasher`]).
    pub hash: u64,
}

impl Seen {
    /// The record for `content`.
    pub fn of(content: &[u8]) -> Self {
        let mut h = Hasher::new();
        h.update(content);
        Self { len: content.len() as u64, hash: h.finish() }
    }
}

/// SipHash-1-3 with fixed keys (std's `DefaultHasher::new()`), fed as a
/// byte stream: 8 bytes a round, where FNV-1a took a multiply per byte and
/// was a quarter of a large `read`. Plenty to notice a file changed; the
/// records live only as long as the host process, so the algorithm is free
/// to change between builds.
#[derive(Debug, Clone)]
pub struct Hasher(std::hash::DefaultHasher);

impl Hasher {
    /// A fresh hasher.
    pub fn new() -> Self {
        Self(std::hash::DefaultHasher::new())
    }

    /// Feeds bytes; feeding in pieces equals feeding them at once.
    pub fn update(&mut self, bytes: &[u8]) {
        std::hash::Hasher::write(&mut self.0, bytes);
    }

    /// The hash so far.
    pub fn finish(&self) -> u64 {
        std::hash::Hasher::finish(&self.0)
    }
}

/// Where read records live.
pub trait Records {
    /// The record of `path` in `session`.
    fn get(&self, session: &str, path: &Path) -> Option<Seen>;
    /// Stores a record; an error is the store's reason.
    fn put(&self, session: &str, path: &Path, seen: Seen) -> Result<(), String>;
}

fn key(session: &str, path: &Path) -> String {
    format!("read/{session}/{}", path.display())
}

/// Records in the host's `kv` store.
pub struct KvRecords;

impl Records for KvRecords {
    fn get(&self, session: &str, path: &Path) -> Option<Seen> {
        wharf_sdk::kv::get_json(&key(session, path))
    }

    fn put(&self, session: &str, path: &Path, seen: Seen) -> Result<(), String> {
        wharf_sdk::kv::set_json(&key(session, path), &seen).map_err(|e| e.to_string())
    }
}

/// Records in memory, for tests.
#[derive(Default)]
#[cfg_attr(not(test), allow(dead_code))]
pub struct MemRecords(RefCell<HashMap<String, Seen>>);

impl Records for MemRecords {
    fn get(&self, session: &str, path: &Path) -> Option<Seen> {
        self.0.borrow().get(&key(session, path)).copied()
    }

    fn put(&self, session: &str, path: &Path, seen: Seen) -> Result<(), String> {
        self.0.borrow_mut().insert(key(session, path), seen);
        Ok(())
    }
}
