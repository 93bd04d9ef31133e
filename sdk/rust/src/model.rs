//! One-shot requests to the session's model (the `model` import; needs the
//! operator's `model = true` grant). Used by compactors and any plugin that
//! needs the model's help without a tool loop.

pub use crate::raw::wharf::plugin::session::SessionError;
use crate::raw::wharf::plugin::types::Message;

/// Sends `messages` after `system` to the session's model (no tools) and
/// returns the text of its answer.
pub fn complete(system: &str, messages: &[Message], max_tokens: Option<u32>) -> Result<String, SessionError> {
    #[cfg(target_family = "wasm")]
    return crate::raw::wharf::plugin::model::complete(system, messages, max_tokens);
    #[cfg(not(target_family = "wasm"))]
    {
        let _ = (system, messages, max_tokens);
        Err(SessionError::NoSession)
    }
}
