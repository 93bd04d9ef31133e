//! Native stand-ins for the host imports, for unit tests with plain
//! `cargo test` (only on non-Wasm targets).
//!
//! Built for the host (not `wasm32-wasip2`), [`config`](crate::config),
//! [`kv`](crate::kv) and [`log`](crate::log) use these fakes instead of
//! the host: configuration set with [`set_config`], an in-memory key-value
//! store, and log lines on stderr (`warn` and above, or what `WHARF_LOG`
//! names). State is per test thread. [`process`](crate::process) has no
//! stand-in. To test the built component as the host runs it, use
//! `wharf plugin call` (see docs/plugin-guide.md).
//!
//! ```rust,ignore
//! #[test]
//! fn greets() {
//!     wharf_sdk::testing::set_config(&serde_json::json!({"greeting": "Hi"}));
//!     let out = wharf_sdk::testing::call::<MyPlugin>("greet", &serde_json::json!({"name": "x"}), None);
//!     assert_eq!(out.map(|o| o.content), Ok("Hi, x!".to_string()));
//! }
//! ```

use std::cell::RefCell;
use std::collections::BTreeMap;

use serde_json::Value;

use crate::log::Level;
use crate::{Args, CallContext, ToolPlugin, ToolResult};

thread_local! {
    static CONFIG: RefCell<String> = RefCell::new("{}".to_string());
    static KV: RefCell<BTreeMap<String, Vec<u8>>> = const { RefCell::new(BTreeMap::new()) };
}

/// What [`config`](crate::config) returns on this thread from now on.
pub fn set_config(config: &Value) {
    CONFIG.with(|c| *c.borrow_mut() = config.to_string());
}

/// Empties the configuration and the key-value store of this thread.
pub fn reset() {
    CONFIG.with(|c| *c.borrow_mut() = "{}".to_string());
    KV.with(|k| k.borrow_mut().clear());
}

/// A call context with this workspace.
pub fn context(workspace: Option<&str>) -> CallContext {
    CallContext { session_id: "test".into(), call_id: "call_0".into(), workspace: workspace.map(String::from) }
}

/// Calls tool `name` of `P` with `args` as the host would (JSON text in, the
/// plugin's result out), without a component.
pub fn call<P: ToolPlugin>(name: &str, args: &Value, workspace: Option<&str>) -> ToolResult {
    P::call(name, Args::new(args.to_string()), &context(workspace))
}

pub(crate) fn config_json() -> String {
    CONFIG.with(|c| c.borrow().clone())
}

pub(crate) fn config_key(key: &str) -> Option<String> {
    let v: Value = serde_json::from_str(&config_json()).ok()?;
    match v.get(key)? {
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

pub(crate) fn kv_get(key: &str) -> Option<Vec<u8>> {
    KV.with(|k| k.borrow().get(key).cloned())
}

pub(crate) fn kv_set(key: &str, value: &[u8]) -> Result<(), String> {
    KV.with(|k| k.borrow_mut().insert(key.to_string(), value.to_vec()));
    Ok(())
}

pub(crate) fn kv_delete(key: &str) {
    KV.with(|k| k.borrow_mut().remove(key));
}

pub(crate) fn kv_list(prefix: &str) -> Vec<String> {
    KV.with(|k| k.borrow().keys().filter(|key| key.starts_with(prefix)).cloned().collect())
}

pub(crate) fn log_write(level: Level, message: &str) {
    let rank = |l: Level| match l {
        Level::Trace => 0,
        Level::Debug => 1,
        Level::Info => 2,
        Level::Warn => 3,
        Level::Error => 4,
    };
    let threshold = match std::env::var("WHARF_LOG").unwrap_or_default().to_ascii_lowercase().as_str() {
        "trace" => 0,
        "debug" => 1,
        "info" => 2,
        "error" => 4,
        _ => 3,
    };
    if rank(level) >= threshold {
        eprintln!("[{level:?}] {message}");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn fakes_back_config_and_kv() {
        reset();
        set_config(&serde_json::json!({"name": "x", "n": 2}));
        assert_eq!(crate::config::raw_key("name").as_deref(), Some("x"));
        assert_eq!(crate::config::key::<u32>("n").unwrap(), Some(2));
        crate::kv::set_json("a/1", &5).unwrap();
        assert_eq!(crate::kv::get_json::<i32>("a/1"), Some(5));
        assert_eq!(crate::kv::list_keys("a/"), vec!["a/1".to_string()]);
        crate::kv::delete("a/1");
        assert_eq!(crate::kv::get("a/1"), None);
        crate::log::info!("fine natively");
    }
}
