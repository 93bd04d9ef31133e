//! History compaction: the [`CompactorPlugin`] trait.
//!
//! The host decides when to compact and which messages (never splitting a
//! tool call from its result); the plugin writes the summary, usually with
//! [`crate::model::complete`].

use crate::raw::wharf::plugin::types::Message;

/// A component that writes compaction summaries (world
/// `compactor-plugin`). Export it with
/// [`export_compactor!`](crate::export_compactor).
pub trait CompactorPlugin {
    /// Self-description.
    fn info() -> crate::PluginInfo;

    /// Summarises `messages` (oldest first; they may begin with an earlier
    /// summary) in about `target_tokens` tokens.
    fn summarize(messages: Vec<Message>, target_tokens: u32) -> Result<String, String>;
}
