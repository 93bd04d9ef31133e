//! The lock file (`bundles.lock`, next to the config layer a bundle was
//! added to): what `wharf plugin add` installed — where from, the commit
//! of a git source, the content digest — so a later add refuses content
//! that changed, and `wharf plugin list/remove` know what is installed.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::BundleError;

/// One installed bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockEntry {
    /// Its name.
    pub name: String,
    /// What was given to `plugin add` (a directory, a git URL, or
    /// `NAME@MARKETPLACE`).
    pub source: String,
    /// The marketplace it was listed in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marketplace: Option<String>,
    /// The git commit installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The content digest (`sha256:…`).
    pub digest: String,
    /// Where it is.
    pub path: PathBuf,
}

/// A lock file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockFile {
    /// The installed bundles.
    #[serde(default, rename = "bundle")]
    pub bundles: Vec<LockEntry>,
}

impl LockFile {
    /// Reads `path` (missing: empty).
    pub fn load(path: &Path) -> Result<Self, BundleError> {
        match std::fs::read_to_string(path) {
            Ok(text) => toml::from_str(&text).map_err(|e| BundleError::invalid(path, e.to_string().replace('\n', " "))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(BundleError::io(path, e)),
        }
    }

    /// Writes it to `path` (atomically).
    pub fn save(&self, path: &Path) -> Result<(), BundleError> {
        let text = toml::to_string(self).map_err(|e| BundleError::invalid(path, e.to_string()))?;
        let text = format!("# Written by `wharf plugin add`: what each bundle was installed from, pinned.\n{text}");
        if let Some(d) = path.parent() {
            std::fs::create_dir_all(d).map_err(|e| BundleError::io(d, e))?;
        }
        let tmp = path.with_extension("lock.tmp");
        std::fs::write(&tmp, text).map_err(|e| BundleError::io(&tmp, e))?;
        std::fs::rename(&tmp, path).map_err(|e| BundleError::io(path, e))
    }

    /// The entry of `name`.
    pub fn get(&self, name: &str) -> Option<&LockEntry> {
        self.bundles.iter().find(|b| b.name == name)
    }

    /// Adds or replaces the entry of `entry.name`.
    pub fn upsert(&mut self, entry: LockEntry) {
        match self.bundles.iter_mut().find(|b| b.name == entry.name) {
            Some(b) => *b = entry,
            None => self.bundles.push(entry),
        }
    }

    /// Removes the entry of `name`, returning it.
    pub fn remove(&mut self, name: &str) -> Option<LockEntry> {
        let i = self.bundles.iter().position(|b| b.name == name)?;
        Some(self.bundles.remove(i))
    }
}
