//! The plugin's own configuration: its profile row's `config` table.
//!
//! ```rust,no_run
//! #[derive(serde::Deserialize, Default)]
//! #[serde(default)]
//! struct Config {
//!     max_results: Option<usize>,
//! }
//!
//! # fn f() -> Result<(), wharf_sdk::config::ConfigError> {
//! let cfg: Config = wharf_sdk::config::get()?;
//! # Ok(()) }
//! ```

use std::fmt;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::raw::wharf::plugin::types::ToolError;

/// The configuration could not be read into the requested type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// What went wrong, with the key when there is one.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid plugin configuration: {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

impl From<ConfigError> for ToolError {
    fn from(e: ConfigError) -> Self {
        ToolError::new("CONFIG", e.to_string())
    }
}

/// The whole configuration as JSON text (`{}` when there is none).
pub fn json() -> String {
    let text = host_get_json();
    if text.trim().is_empty() { "{}".to_string() } else { text }
}

/// The whole configuration as a JSON value.
pub fn value() -> Result<Value, ConfigError> {
    from_json_text(&json())
}

/// Deserializes the whole configuration into `T`. Use `#[serde(default)]` on
/// `T` so that a missing table or key falls back to defaults.
pub fn get<T: DeserializeOwned>() -> Result<T, ConfigError> {
    from_json_text(&json())
}

/// One top-level key as the host gives it: strings as they are, other
/// values as JSON text.
pub fn raw_key(key: &str) -> Option<String> {
    host_get(key)
}

/// One top-level key deserialized into `T`; `Ok(None)` when it is absent.
pub fn key<T: DeserializeOwned>(key: &str) -> Result<Option<T>, ConfigError> {
    match host_get(key) {
        None => Ok(None),
        Some(text) => key_from_text(key, &text).map(Some),
    }
}

// Inside a component: the host. Natively (unit tests): crate::testing.
#[cfg(target_family = "wasm")]
fn host_get_json() -> String {
    crate::raw::wharf::plugin::config::get_json()
}

#[cfg(target_family = "wasm")]
fn host_get(key: &str) -> Option<String> {
    crate::raw::wharf::plugin::config::get(key)
}

#[cfg(not(target_family = "wasm"))]
fn host_get_json() -> String {
    crate::testing::config_json()
}

#[cfg(not(target_family = "wasm"))]
fn host_get(key: &str) -> Option<String> {
    crate::testing::config_key(key)
}

/// Parses configuration JSON text into `T` (what [`get`] does after asking
/// the host; exposed for tests).
pub fn from_json_text<T: DeserializeOwned>(text: &str) -> Result<T, ConfigError> {
    let text = if text.trim().is_empty() { "{}" } else { text };
    serde_json::from_str(text).map_err(|e| ConfigError { message: e.to_string() })
}

/// A key's text is JSON unless the value was a string, which comes bare.
fn key_from_text<T: DeserializeOwned>(key: &str, text: &str) -> Result<T, ConfigError> {
    serde_json::from_str(text)
        .or_else(|_| serde_json::from_value(Value::String(text.to_string())))
        .map_err(|e| ConfigError { message: format!("`{key}`: {e}") })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Default, Debug, PartialEq)]
    #[serde(default)]
    struct C {
        n: u32,
        s: String,
    }

    #[test]
    fn parses_whole_and_keys() {
        assert_eq!(from_json_text::<C>("").unwrap(), C::default());
        assert_eq!(from_json_text::<C>(r#"{"n":3}"#).unwrap().n, 3);
        assert!(from_json_text::<C>(r#"{"n":"x"}"#).is_err());
        assert_eq!(key_from_text::<String>("k", "hello").unwrap(), "hello");
        assert_eq!(key_from_text::<String>("k", "\"q\"").unwrap(), "q");
        assert_eq!(key_from_text::<u32>("k", "7").unwrap(), 7);
        assert_eq!(key_from_text::<Vec<u8>>("k", "[1,2]").unwrap(), vec![1, 2]);
    }
}
