//! Questions to the session's user during a tool call, or while a policy
//! decides on one (the `questions` import; needs the operator's
//! `questions = true` grant on the row).
//!
//! A question is a message and a small flat form (a JSON Schema object of
//! at most 16 `string`, `number`, `integer` or `boolean` fields). The host
//! shows it to whoever drives the session (an editor over ACP, the web
//! page, `wharf chat`) on the call it is about, and checks the answer
//! against the form before the component sees it; `wharf run` declines at
//! once. A tool's deadline keeps running while the question is open (past
//! it the call ends); a policy's question ends with [`Answer::Cancel`]
//! shortly before the policy's own deadline, and the policy decides what
//! that means (failing closed is the usual choice).
//!
//! ```rust,no_run
//! use wharf_sdk::questions::{self, Answer};
//!
//! let form = serde_json::json!({
//!     "type": "object",
//!     "properties": {"branch": {"type": "string", "title": "Branch"}},
//!     "required": ["branch"],
//! });
//! match questions::ask("Which branch should I deploy?", &form) {
//!     Ok(Answer::Accept(values)) => { let _branch = values["branch"].as_str(); }
//!     Ok(Answer::Decline) | Ok(Answer::Cancel) => { /* go on without */ }
//!     Err(e) => wharf_sdk::log::warn!("{}", wharf_sdk::session::describe(&e)),
//! }
//! ```

use serde_json::{Map, Value};

pub use crate::raw::wharf::plugin::session::SessionError;

/// The user's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The fields the user filled in (checked against the form by the host).
    Accept(Map<String, Value>),
    /// The user said no.
    Decline,
    /// Nobody answered (dismissed, withdrawn).
    Cancel,
}

/// Asks the session's user `message` with the form `schema` and waits for
/// the answer. Fails with `Invalid` for a form outside the host's bounds
/// (nobody is asked), `NotGranted("questions")` without the grant and
/// `NoSession` outside a session's tool call.
///
/// The fields are asked in the order of the schema's JSON text; without
/// serde_json's `preserve_order` feature a [`Value`] keeps its keys sorted,
/// so pass the schema as text ([`ask_text`]) to choose the order.
pub fn ask(message: &str, schema: &Value) -> Result<Answer, SessionError> {
    ask_text(message, &schema.to_string())
}

/// [`ask`] with the schema as JSON text (its fields asked in the text's
/// order).
pub fn ask_text(message: &str, schema: &str) -> Result<Answer, SessionError> {
    #[cfg(target_family = "wasm")]
    {
        use crate::raw::wharf::plugin::questions as q;
        match q::ask(message, schema)? {
            q::Answer::Accept(text) => match serde_json::from_str::<Value>(&text) {
                Ok(Value::Object(values)) => Ok(Answer::Accept(values)),
                _ => Err(SessionError::Failed("the host's answer is not a JSON object".into())),
            },
            q::Answer::Decline => Ok(Answer::Decline),
            q::Answer::Cancel => Ok(Answer::Cancel),
        }
    }
    #[cfg(not(target_family = "wasm"))]
    {
        let _ = (message, schema);
        Err(SessionError::NoSession)
    }
}
