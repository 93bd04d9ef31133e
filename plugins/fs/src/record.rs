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
    /// FNV-1a 64 of the content.
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

/// FNV-1a, 64 bits: cheap, streaming, and plenty to notice a file changed.
#[derive(Debug, Clone, Copy)]
pub struct Hasher(u64);

impl Hasher {
    /// A fresh hasher.
    pub fn new() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }

    /// Feeds bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// The hash so far.
    pub fn finish(&self) -> u64 {
        self.0
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
