//! A small key-value store private to the plugin id, kept across calls,
//! sessions and versions of the plugin (subject to a host quota).

use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;

// Inside a component: the host. Natively (unit tests): crate::testing.
#[cfg(target_family = "wasm")]
mod host {
    pub(super) use crate::raw::wharf::plugin::kv::{delete, get, list_keys, set};
}

#[cfg(not(target_family = "wasm"))]
mod host {
    pub(super) use crate::testing::{kv_delete as delete, kv_get as get, kv_list as list_keys, kv_set as set};
}
use crate::raw::wharf::plugin::types::ToolError;

/// A write the host refused (usually the quota).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvError {
    /// The host's reason.
    pub message: String,
}

impl fmt::Display for KvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kv store: {}", self.message)
    }
}

impl std::error::Error for KvError {}

impl From<KvError> for ToolError {
    fn from(e: KvError) -> Self {
        ToolError::new("KV", e.to_string())
    }
}

/// Reads a value.
pub fn get(key: &str) -> Option<Vec<u8>> {
    host::get(key)
}

/// Writes a value.
pub fn set(key: &str, value: &[u8]) -> Result<(), KvError> {
    host::set(key, value).map_err(|message| KvError { message })
}

/// Deletes a value; deleting a missing key is not an error.
pub fn delete(key: &str) {
    host::delete(key)
}

/// Keys starting with `prefix`, sorted.
pub fn list_keys(prefix: &str) -> Vec<String> {
    host::list_keys(prefix)
}

/// Reads a JSON value; `None` when it is missing or no longer parses as `T`.
pub fn get_json<T: DeserializeOwned>(key: &str) -> Option<T> {
    get(key).and_then(|bytes| serde_json::from_slice(&bytes).ok())
}

/// Writes a value as JSON.
pub fn set_json<T: Serialize + ?Sized>(key: &str, value: &T) -> Result<(), KvError> {
    let bytes = serde_json::to_vec(value).map_err(|e| KvError { message: e.to_string() })?;
    set(key, &bytes)
}
