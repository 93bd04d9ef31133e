//! History compaction: when the model-visible history nears the context
//! window, the older part is replaced by a summary.
//!
//! - **When**: before every step (so also mid-turn), if the estimated
//!   request size passes `threshold × context_window`, and on demand
//!   ([`crate::Agent::compact`], `/compact` in `wharf chat`). Only when a
//!   compactor plugin is loaded.
//! - **What**: the oldest messages, keeping about `keep_recent × window`
//!   tokens of recent history verbatim. The cut is placed before a user or
//!   assistant message, never between a tool call and its result (results
//!   always follow their assistant message before the next one).
//! - **How**: the compactor plugin writes the summary (usually by asking the
//!   model through the `model` import); the host appends
//!   `compaction/summary{from_seq, to_seq, summary}`. The projection then
//!   shows one user message in place of the range; the raw events stay in
//!   the log.
//! - **Bounded**: at most one compaction per step and `max_per_turn` per
//!   turn; none for the rest of a turn after one failed (logged as the
//!   ignorable `compaction/failed`) or did not bring the history under the
//!   threshold (the recent part alone is too big), so compaction can never
//!   loop. Too little history to cut is not a failure: a later step retries.
//!
//! Sizes are estimates (about four bytes per token), deliberately cheap and
//! model-independent.

use std::sync::Arc;

use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::events::{COMPACTION_FAILED_EVENT, CompactionSummary, EventKind};
use crate::plugin::{Message, PluginRef, Role, ToolSpec};
use crate::registry::Snapshot;
use crate::services::SessionContext;
use crate::store::StoreError;

/// Compaction settings.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactionConfig {
    /// Compact automatically (when a compactor is loaded).
    pub enabled: bool,
    /// Fraction of the context window that triggers compaction.
    pub threshold: f64,
    /// Context window in tokens; `None`: what the adapter reports.
    pub context_window: Option<u32>,
    /// Fraction of the window kept verbatim (the most recent messages).
    pub keep_recent: f64,
    /// Target size of a summary in tokens (capped at 1/8 of the window).
    pub summary_tokens: u32,
    /// Most automatic compactions in one turn.
    pub max_per_turn: u32,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            threshold: 0.8,
            context_window: None,
            keep_recent: 0.3,
            summary_tokens: 2000,
            max_per_turn: 20,
        }
    }
}

/// Per-turn bookkeeping (reset at every turn start).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct TurnCompactions {
    pub count: u32,
    pub failed: bool,
}

/// Why a compaction did not happen.
#[derive(Debug, thiserror::Error)]
pub enum CompactError {
    /// No compactor plugin is loaded.
    #[error("no compactor plugin is loaded (add plugins/compaction to the profile)")]
    NoCompactor,
    /// The history is too short to compact.
    #[error("nothing to compact: the history has no older part that can be summarised on its own")]
    NothingToCompact,
    /// The compactor failed.
    #[error("the compactor `{plugin}` failed: {message}")]
    Compactor {
        /// The compactor's plugin id.
        plugin: String,
        /// What it said.
        message: String,
    },
    /// The log could not be written.
    #[error(transparent)]
    SessionStore(#[from] StoreError),
}

/// Estimated tokens of a message (about four bytes per token, plus framing).
pub fn message_tokens(m: &Message) -> u64 {
    let bytes = m.content.len()
        + m.reasoning.as_ref().map_or(0, String::len)
        + m.tool_calls.iter().map(|c| c.name.len() + c.arguments.len() + 16).sum::<usize>();
    (bytes as u64).div_ceil(4) + 4
}

/// Estimated tokens of a request: messages plus tool specs.
pub fn request_tokens<'a>(messages: impl IntoIterator<Item = &'a Message>, tools: &[ToolSpec]) -> u64 {
    let m: u64 = messages.into_iter().map(message_tokens).sum();
    let t: u64 = tools
        .iter()
        .map(|s| ((s.name.len() + s.description.len() + s.input_schema.to_string().len()) as u64).div_ceil(4))
        .sum();
    m + t
}

/// Where to cut `entries` so that about `keep_tokens` of recent history stay
/// verbatim: the index of the first kept entry. The cut is before a user or
/// assistant message, compacts at least two entries and keeps at least one;
/// `None` when no such cut exists.
pub fn plan_cut(entries: &[(u64, Message)], keep_tokens: u64) -> Option<usize> {
    if entries.len() < 3 {
        return None;
    }
    // The newest index whose suffix reaches `keep_tokens`.
    let mut kept = 0u64;
    let mut cut = entries.len() - 1;
    for i in (1..entries.len()).rev() {
        kept += message_tokens(&entries[i].1);
        cut = i;
        if kept >= keep_tokens {
            break;
        }
    }
    // Move the cut towards newer messages until it is a safe boundary.
    while cut < entries.len() && entries[cut].1.role == Role::Tool {
        cut += 1;
    }
    // Keep at least one message and compact at least two.
    if cut >= entries.len() || cut < 2 { None } else { Some(cut) }
}

/// Compacts the history of `ctx`'s session with the first loaded
/// compactor, keeping about `keep_tokens` recent tokens. Returns the event
/// data appended.
pub(crate) async fn compact(
    ctx: &Arc<SessionContext>,
    snap: &Snapshot,
    keep_tokens: u64,
    window: u32,
    cancel: &CancellationToken,
) -> Result<CompactionSummary, CompactError> {
    let compactor = snap.compactors.first().cloned().ok_or(CompactError::NoCompactor)?;
    let entries = ctx.log.message_entries();
    let cut = plan_cut(&entries, keep_tokens).ok_or(CompactError::NothingToCompact)?;
    let from_seq = entries[0].0;
    let to_seq = entries[cut].0.saturating_sub(1);
    let messages: Vec<Message> = entries[..cut].iter().map(|(_, m)| m.clone()).collect();
    let target = ctx.config.compaction.summary_tokens.min((window / 8).max(64));
    let services = Arc::new(ctx.for_call("compaction", compactor.plugin().clone(), cancel.clone()));
    let plugin: PluginRef = compactor.plugin().clone();
    let summary = compactor
        .summarize(messages, target, services)
        .await
        .map_err(|e| CompactError::Compactor { plugin: plugin.id.clone(), message: e.to_string() })?;
    if summary.trim().is_empty() {
        return Err(CompactError::Compactor { plugin: plugin.id, message: "the summary is empty".into() });
    }
    let data = CompactionSummary { from_seq, to_seq, summary };
    ctx.log.append(EventKind::CompactionSummary(data.clone()))?;
    Ok(data)
}

/// Records a failed automatic compaction (ignorable, so older readers skip
/// it).
pub(crate) fn record_failure(ctx: &SessionContext, err: &CompactError) -> Result<(), StoreError> {
    ctx.log.append_ignorable(COMPACTION_FAILED_EVENT, json!({ "error": err.to_string() })).map(|_| ())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::plugin::ToolCall;

    fn msg(role: Role, text: &str, calls: usize) -> Message {
        Message {
            role,
            content: text.into(),
            reasoning: None,
            tool_calls: (0..calls)
                .map(|i| ToolCall { id: format!("c{i}"), name: "t".into(), arguments: "{}".into() })
                .collect(),
            tool_call_id: (role == Role::Tool).then(|| "c0".into()),
        }
    }

    #[test]
    fn cut_never_splits_a_call_from_its_results() {
        let big = "x".repeat(400);
        let entries: Vec<(u64, Message)> = vec![
            (2, msg(Role::User, &big, 0)),
            (3, msg(Role::Assistant, &big, 2)),
            (4, msg(Role::Tool, &big, 0)),
            (5, msg(Role::Tool, &big, 0)),
            (6, msg(Role::Assistant, &big, 1)),
            (7, msg(Role::Tool, &big, 0)),
            (8, msg(Role::Assistant, "done", 0)),
        ];
        for keep in 0..2000 {
            if let Some(cut) = plan_cut(&entries, keep) {
                assert_ne!(entries[cut].1.role, Role::Tool, "keep={keep}");
                assert!(cut >= 2 && cut < entries.len());
            }
        }
        // Keeping ~one message cuts before the last assistant message.
        assert_eq!(plan_cut(&entries, 1), Some(6));
        // A cut landing on a tool result moves forward to the next
        // assistant message.
        assert_eq!(plan_cut(&entries, 100), Some(6));
        assert_eq!(plan_cut(&entries, 250), Some(4));
        assert_eq!(plan_cut(&entries, 10_000), None);
        assert_eq!(plan_cut(&entries[..2], 0), None);
    }

    #[test]
    fn estimates_grow_with_content() {
        let a = msg(Role::User, "hello", 0);
        let b = msg(Role::User, &"hello".repeat(100), 0);
        assert!(message_tokens(&b) > message_tokens(&a));
        assert!(request_tokens(&[a.clone(), b], &[]) > request_tokens(&[a], &[]));
    }
}
