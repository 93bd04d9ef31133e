//! The session a tool call belongs to: typed events in its log and the
//! agent depth (the `session` import; it needs no grant).
//!
//! These work only while the host runs a tool call for a session; elsewhere
//! (e.g. `wharf plugin call`) they fail with [`SessionError::NoSession`].
//!
//! ```rust,no_run
//! let items = serde_json::json!({"items": [{"content": "Read the spec", "status": "in_progress"}]});
//! match wharf_sdk::session::record_event("todo/updated", &items) {
//!     Ok(()) => {}
//!     Err(wharf_sdk::session::SessionError::NoSession) => { /* not in a session */ }
//!     Err(e) => wharf_sdk::log::warn!("{}", wharf_sdk::session::describe(&e)),
//! }
//! ```
//!
//! Natively (unit tests) the import is replaced by [`fake`]: detached (no
//! session) until [`fake::attach`] is called on the test thread.

use serde_json::Value;

pub use crate::raw::wharf::plugin::session::SessionError;
use crate::raw::wharf::plugin::types::ToolError;

/// Records an event of `kind` with `data` in the session log. The kinds are
/// fixed and typed by the host (`todo/updated` with `{"items": [...]}`).
pub fn record_event(kind: &str, data: &Value) -> Result<(), SessionError> {
    let text = data.to_string();
    #[cfg(target_family = "wasm")]
    return crate::raw::wharf::plugin::session::record_event(kind, &text);
    #[cfg(not(target_family = "wasm"))]
    return fake::record(kind, &text);
}

/// How deep the session is: 0 for a top-level agent, 1+ for subagents.
pub fn depth() -> u32 {
    #[cfg(target_family = "wasm")]
    return crate::raw::wharf::plugin::session::depth();
    #[cfg(not(target_family = "wasm"))]
    return 0;
}

/// A one-line description of a session error, for tool results and logs.
pub fn describe(e: &SessionError) -> String {
    match e {
        SessionError::NoSession => "no session is attached to this call".to_string(),
        SessionError::NotGranted(what) => format!("the `{what}` capability is not granted"),
        SessionError::Invalid(why) => format!("the host refused the request: {why}"),
        SessionError::Failed(why) => format!("the host failed: {why}"),
        SessionError::Cancelled => "the call was cancelled".to_string(),
    }
}

/// A session error as a tool error (codes `NO_SESSION`, `NOT_GRANTED`,
/// `INVALID_ARGUMENT`, `SESSION`, `ABORTED`).
pub fn to_tool_error(e: &SessionError) -> ToolError {
    let code = match e {
        SessionError::NoSession => "NO_SESSION",
        SessionError::NotGranted(_) => "NOT_GRANTED",
        SessionError::Invalid(_) => "INVALID_ARGUMENT",
        SessionError::Failed(_) => "SESSION",
        SessionError::Cancelled => "ABORTED",
    };
    ToolError::new(code, describe(e))
}

/// Native stand-in for the `session` import (non-Wasm targets only).
#[cfg(not(target_family = "wasm"))]
pub mod fake {
    use std::cell::RefCell;

    use serde_json::Value;

    use super::SessionError;

    thread_local! {
        static EVENTS: RefCell<Option<Vec<(String, Value)>>> = const { RefCell::new(None) };
    }

    /// Attaches a session to this thread: events are recorded from now on.
    pub fn attach() {
        EVENTS.with(|e| *e.borrow_mut() = Some(Vec::new()));
    }

    /// Detaches: [`record_event`](super::record_event) fails with `NoSession`.
    pub fn detach() {
        EVENTS.with(|e| *e.borrow_mut() = None);
    }

    /// The events recorded on this thread since [`attach`], taken.
    pub fn take() -> Vec<(String, Value)> {
        EVENTS.with(|e| e.borrow_mut().as_mut().map(std::mem::take).unwrap_or_default())
    }

    pub(super) fn record(kind: &str, data: &str) -> Result<(), SessionError> {
        let value: Value = serde_json::from_str(data).map_err(|e| SessionError::Invalid(e.to_string()))?;
        EVENTS.with(|e| match e.borrow_mut().as_mut() {
            Some(events) => {
                events.push((kind.to_string(), value));
                Ok(())
            }
            None => Err(SessionError::NoSession),
        })
    }
}
