//! Child agents (the `agents` import; needs the operator's `agents = true`
//! grant). A child runs with its own session log linked to the caller's,
//! a restricted tool set, the same policies and hooks, and is cancelled with
//! the calling tool call. Nesting is limited (depth 3 by default).

pub use crate::raw::wharf::plugin::agents::{AgentResult, AgentTask};
pub use crate::raw::wharf::plugin::session::SessionError;

/// Runs a child agent to the end of its turn.
pub fn run(task: &AgentTask) -> Result<AgentResult, SessionError> {
    #[cfg(target_family = "wasm")]
    return crate::raw::wharf::plugin::agents::run(task);
    #[cfg(not(target_family = "wasm"))]
    {
        let _ = task;
        Err(SessionError::NoSession)
    }
}
