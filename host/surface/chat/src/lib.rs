//! Wharf in a terminal: `wharf chat` ([`chat`]: the line editor, approvals
//! with diffs, streamed markdown, `/model`, `/permissions`, Ctrl-C to
//! cancel), and the text renderer that `wharf run` and `wharf sessions
//! show` print a session with ([`render`]), over the terminal pieces in
//! [`term`] (markdown, diffs, tool summaries).

pub mod chat;
pub mod render;
pub mod term;

pub use chat::{ChatArgs, restore_terminal, run};
