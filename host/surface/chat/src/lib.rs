//! Wharf in a terminal: `wharf chat` ([`chat`]: the line editor, approvals
//! with diffs, streamed markdown, `/model`, `/permissions`, Ctrl-C to
//! cancel), and the text renderer that `wharf run` and `wharf sessions
//! show` print a session with ([`render`]), over the terminal pieces in
//! [`term`] (markdown, diffs, tool summaries).

#[cfg(feature = "tui")]
pub mod chat;
pub mod render;
pub mod term;

#[cfg(feature = "tui")]
pub use chat::{ChatArgs, restore_terminal, run};
