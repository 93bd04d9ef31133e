//! The model-visible surface, projected incrementally from the log.
//!
//! [`Projection`] is fed every committed event once ([`Projection::apply`])
//! and keeps the derived messages, so building a request costs a clone, not a
//! rescan. Rules:
//!
//! - `user/message` → a user message; `assistant/message` → an assistant
//!   message with its reasoning and tool calls (dropped if it has neither text,
//!   reasoning nor calls); `tool/result` → a tool message.
//! - `compaction/summary{from_seq, to_seq, summary}` removes the messages that
//!   came from events in `from_seq..=to_seq` and puts one user message
//!   `<compacted-summary>…</compacted-summary>` in their place. The raw events
//!   stay in the log.
//! - Everything else is log-only.
//!
//! The projection also tracks the bookkeeping a writer needs on reopen (open
//! turn and step, unanswered tool calls, session usage, pending inbox items).

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::events::{Event, EventKind, InboxKind, InboxOp, SessionStart};
use crate::plugin::{Message, Role, ToolCall, Usage};

/// An inbox item not yet claimed or discarded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingInboxItem {
    /// Item id.
    pub id: String,
    /// Queue.
    pub kind: InboxKind,
    /// Text.
    pub text: String,
}

/// State of the open step, for crash repair.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OpenStep {
    /// Turn number.
    pub turn: u64,
    /// Step number.
    pub step: u32,
    /// Text streamed in this step without a committed assistant message yet.
    pub streamed_text: String,
    /// Reasoning streamed likewise.
    pub streamed_reasoning: String,
    /// Whether the step's assistant message was committed.
    pub has_message: bool,
    /// Tool calls of the assistant message.
    pub message_calls: Vec<ToolCall>,
    /// Ids of logged `tool/call` events, in order, with their names and arguments.
    pub logged_calls: Vec<ToolCall>,
    /// Ids that have a `tool/result`.
    pub answered: HashSet<String>,
    /// Calls with `approval/asked` but no `approval/decided` yet, in order.
    pub pending_approvals: Vec<String>,
    /// Calls a program made (`tool/call` with a `parent`) that have no
    /// `tool/result` yet, in log order.
    pub open_inner: Vec<ToolCall>,
}

/// Incremental projection of a session log.
#[derive(Debug, Clone, Default)]
pub struct Projection {
    /// Messages with the seq of the event that produced them (sorted by seq).
    messages: Vec<(u64, Message)>,
    /// Changes whenever `messages` changes other than by a push (a
    /// compaction), and differs between clones: while it holds, a copy of
    /// the first N messages is still a copy of them.
    lineage: Lineage,
    /// Images of the user messages in `messages`, by the message's seq.
    images: BTreeMap<u64, Vec<crate::images::Image>>,
    header: Option<SessionStart>,
    last_seq: u64,
    last_turn: u64,
    open_turn: Option<u64>,
    open_step: Option<OpenStep>,
    usage: Usage,
    inbox: BTreeMap<u64, PendingInboxItem>,
    inbox_order: u64,
    /// Ids of calls a program made (`tool/call` with a `parent`).
    inner_calls: HashSet<String>,
    /// A program's calls without a result yet, anywhere in the session (a
    /// yielded cell's run past their step), in log order, with their turn
    /// and step.
    open_inner_all: Vec<(u64, u32, ToolCall)>,
    /// Cells that yielded (`tool/cell{state: running}`) and whose end is
    /// not logged, with the turn and step of the call that started them.
    open_cells: Vec<(u64, u32, ToolCall)>,
    /// Bytes of output each open cell's yield answers showed the model
    /// (`tool/cell{shown}`).
    cell_shown: HashMap<String, usize>,
}

/// A number no other projection, and no earlier state of this one's
/// message list, had (see [`Projection::messages_into`]).
#[derive(Debug, PartialEq, Eq)]
struct Lineage(u64);

impl Lineage {
    fn fresh() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Self(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
}

impl Default for Lineage {
    fn default() -> Self {
        Self::fresh()
    }
}

impl Clone for Lineage {
    /// A clone's messages may go their own way: it starts a lineage.
    fn clone(&self) -> Self {
        Self::fresh()
    }
}

/// What [`Projection::messages_into`] last wrote into a copy of the
/// history, so the next call appends the new messages instead of comparing
/// the whole copy again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HistoryMark {
    lineage: u64,
    len: usize,
}

impl HistoryMark {
    /// How many messages of a list marked `earlier` are, unchanged, the
    /// first messages of the list marked `self`: `earlier`'s length when
    /// both copy the same projection with nothing but pushes between them,
    /// else `None` (compare the messages instead). An unmarked list
    /// ([`HistoryMark::default`]) is never vouched for.
    pub fn continues(&self, earlier: &HistoryMark) -> Option<usize> {
        (self.lineage != 0 && self.lineage == earlier.lineage && earlier.len <= self.len).then_some(earlier.len)
    }
}

impl Projection {
    /// An empty projection.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a projection from a whole log.
    pub fn from_events<'a>(events: impl IntoIterator<Item = &'a Event>) -> Self {
        let mut p = Self::new();
        for e in events {
            p.apply(e);
        }
        p
    }

    /// Feeds one committed event (O(1) amortized; a compaction costs the
    /// length of the range it replaces plus the tail it shifts).
    pub fn apply(&mut self, ev: &Event) {
        self.last_seq = ev.seq;
        match &ev.kind {
            EventKind::SessionStart(h) => self.header = Some(h.clone()),
            EventKind::TurnStart(t) => {
                self.last_turn = t.turn;
                self.open_turn = Some(t.turn);
                self.open_step = None;
            }
            EventKind::TurnEnd(_) => {
                self.open_turn = None;
                self.open_step = None;
            }
            EventKind::StepStart(s) => {
                self.open_step = Some(OpenStep { turn: s.turn, step: s.step, ..OpenStep::default() });
            }
            EventKind::StepEnd(_) => self.open_step = None,
            EventKind::UserMessage(m) => {
                if !m.images.is_empty() {
                    self.images.insert(ev.seq, m.images.clone());
                }
                self.push(
                    ev.seq,
                    Message {
                        role: Role::User,
                        content: m.content.clone(),
                        reasoning: None,
                        tool_calls: vec![],
                        tool_call_id: None,
                    },
                )
            }
            EventKind::AssistantChunk(c) => {
                if let Some(s) = &mut self.open_step {
                    s.streamed_text.push_str(&c.text);
                    s.streamed_reasoning.push_str(&c.reasoning);
                }
            }
            EventKind::AssistantMessage(m) => {
                if let Some(u) = &m.usage {
                    self.usage.add(u);
                }
                if let Some(s) = &mut self.open_step {
                    s.has_message = true;
                    s.message_calls = m.tool_calls.clone();
                }
                let reasoning = m.reasoning.clone().filter(|r| !r.is_empty());
                if !m.content.is_empty() || reasoning.is_some() || !m.tool_calls.is_empty() {
                    self.push(
                        ev.seq,
                        Message {
                            role: Role::Assistant,
                            content: m.content.clone(),
                            reasoning,
                            tool_calls: m.tool_calls.clone(),
                            tool_call_id: None,
                        },
                    );
                }
            }
            // A program's calls (`run_code`) are not the model's: they stay
            // out of the conversation and of the step's repair.
            EventKind::ToolCall(c) if c.parent.is_some() => {
                self.inner_calls.insert(c.id.clone());
                self.open_inner_all.push((
                    c.turn,
                    c.step,
                    ToolCall { id: c.id.clone(), name: c.name.clone(), arguments: c.arguments.clone() },
                ));
                if let Some(s) = &mut self.open_step {
                    s.open_inner.push(ToolCall {
                        id: c.id.clone(),
                        name: c.name.clone(),
                        arguments: c.arguments.clone(),
                    });
                }
            }
            EventKind::ToolResult(r) if self.inner_calls.contains(&r.call_id) => {
                if let Some(i) = self.open_inner_all.iter().position(|(_, _, c)| c.id == r.call_id) {
                    self.open_inner_all.remove(i);
                }
                if let Some(s) = &mut self.open_step
                    && let Some(i) = s.open_inner.iter().position(|c| c.id == r.call_id)
                {
                    s.open_inner.remove(i);
                }
            }
            EventKind::ToolCall(c) => {
                if let Some(s) = &mut self.open_step {
                    s.logged_calls.push(ToolCall {
                        id: c.id.clone(),
                        name: c.name.clone(),
                        arguments: c.arguments.clone(),
                    });
                }
            }
            EventKind::ApprovalAsked(a) => {
                if let Some(s) = &mut self.open_step {
                    s.pending_approvals.push(a.call_id.clone());
                }
            }
            EventKind::ApprovalDecided(a) => {
                if let Some(s) = &mut self.open_step {
                    s.pending_approvals.retain(|c| *c != a.call_id);
                }
            }
            EventKind::ToolResult(r) => {
                if let Some(s) = &mut self.open_step {
                    s.answered.insert(r.call_id.clone());
                }
                self.push(
                    ev.seq,
                    Message {
                        role: Role::Tool,
                        content: r.content.clone(),
                        reasoning: None,
                        tool_calls: vec![],
                        tool_call_id: Some(r.call_id.clone()),
                    },
                );
            }
            EventKind::LlmRetry(_) => {
                // The failed attempt's chunks never become a message.
                if let Some(s) = &mut self.open_step {
                    s.streamed_text.clear();
                    s.streamed_reasoning.clear();
                }
            }
            EventKind::CompactionSummary(c) => self.compact(c.from_seq, c.to_seq, &c.summary),
            EventKind::Unknown { type_name, data } if type_name == crate::cells::CELL_EVENT => {
                let cell = data.get("cell").and_then(|v| v.as_str()).unwrap_or_default();
                if data.get("state").and_then(|v| v.as_str()) == Some("running") {
                    // It yields inside its step: the step holds its call.
                    if let Some(s) = &self.open_step
                        && let Some(c) = s.logged_calls.iter().find(|c| c.id == cell)
                        && !self.open_cells.iter().any(|(_, _, o)| o.id == cell)
                    {
                        self.open_cells.push((s.turn, s.step, c.clone()));
                    }
                    if let Some(n) = data.get("shown").and_then(serde_json::Value::as_u64)
                        && self.open_cells.iter().any(|(_, _, o)| o.id == cell)
                    {
                        self.cell_shown.insert(cell.to_string(), usize::try_from(n).unwrap_or(usize::MAX));
                    }
                } else {
                    self.open_cells.retain(|(_, _, c)| c.id != cell);
                    self.cell_shown.remove(cell);
                }
            }
            EventKind::InboxSpliced(s) => match s.op {
                InboxOp::Added => {
                    self.inbox_order += 1;
                    self.inbox.insert(
                        self.inbox_order,
                        PendingInboxItem { id: s.id.clone(), kind: s.kind, text: s.text.clone() },
                    );
                }
                InboxOp::Claimed | InboxOp::Discarded => self.inbox.retain(|_, item| item.id != s.id),
            },
            _ => {}
        }
    }

    fn push(&mut self, seq: u64, m: Message) {
        self.messages.push((seq, m));
    }

    fn compact(&mut self, from: u64, to: u64, summary: &str) {
        if from > to {
            return;
        }
        let start = self.messages.partition_point(|(s, _)| *s < from);
        let end = self.messages.partition_point(|(s, _)| *s <= to);
        // The summary replaces the images of the messages it covers.
        let covered: Vec<u64> = self.images.range(from..=to).map(|(s, _)| *s).collect();
        for s in covered {
            self.images.remove(&s);
        }
        let msg = Message {
            role: Role::User,
            content: format!("<compacted-summary>\n{summary}\n</compacted-summary>"),
            reasoning: None,
            tool_calls: vec![],
            tool_call_id: None,
        };
        // The summary sorts at `from`, so a later compaction covering it
        // replaces it too.
        self.messages.splice(start..end, std::iter::once((from, msg)));
        self.lineage = Lineage::fresh();
    }

    /// The model-visible messages.
    pub fn messages(&self) -> Vec<Message> {
        self.messages.iter().map(|(_, m)| m.clone()).collect()
    }

    /// [`Projection::messages`] written over `dst`, the messages of an
    /// earlier call, and `mark` updated to say so. When `mark` says `dst` is
    /// this projection's first messages and none has changed since (only
    /// pushes: a long session's every step), only the new ones are copied;
    /// otherwise those still equal are compared, not copied again.
    pub fn messages_into(&self, dst: &mut Vec<Message>, mark: &mut HistoryMark) {
        let continues = mark.lineage == self.lineage.0 && mark.len == dst.len() && dst.len() <= self.messages.len();
        if !continues {
            dst.truncate(self.messages.len());
            for (d, (_, m)) in dst.iter_mut().zip(&self.messages) {
                if d != m {
                    d.clone_from(m);
                }
            }
        }
        let have = dst.len();
        dst.extend(self.messages[have..].iter().map(|(_, m)| m.clone()));
        *mark = HistoryMark { lineage: self.lineage.0, len: dst.len() };
    }

    /// The images of [`Projection::messages`], each naming its message by
    /// index.
    pub fn message_images(&self) -> Vec<crate::images::RequestImage> {
        if self.images.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (i, (seq, _)) in self.messages.iter().enumerate() {
            if let Some(images) = self.images.get(seq) {
                let message = u32::try_from(i).unwrap_or(u32::MAX);
                out.extend(images.iter().map(|image| crate::images::RequestImage { message, image: image.clone() }));
            }
        }
        out
    }

    /// The model-visible messages with the seq of the event each came from
    /// (a compaction summary carries the first seq it replaced).
    pub fn entries(&self) -> &[(u64, Message)] {
        &self.messages
    }

    /// Number of model-visible messages.
    pub fn message_count(&self) -> usize {
        self.messages.len()
    }

    /// The session header, once seen.
    pub fn header(&self) -> Option<&SessionStart> {
        self.header.as_ref()
    }

    /// Seq of the last event applied (0 if none).
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Number of the last turn started (0 if none).
    pub fn last_turn(&self) -> u64 {
        self.last_turn
    }

    /// The turn that is open (started, not ended), if any.
    pub fn open_turn(&self) -> Option<u64> {
        self.open_turn
    }

    /// A program's calls still without a result, anywhere in the session,
    /// in log order, with their turn and step.
    pub fn open_inner_calls(&self) -> Vec<(u64, u32, ToolCall)> {
        self.open_inner_all.clone()
    }

    /// The cells that yielded and whose end is not logged (a crash cut
    /// them), in log order, with the turn and step of their call.
    pub fn open_cells(&self) -> Vec<(u64, u32, ToolCall)> {
        self.open_cells.clone()
    }

    /// Bytes of open cell `id`'s output its yield answers showed (0 when
    /// none was shown).
    pub fn cell_shown(&self, id: &str) -> usize {
        self.cell_shown.get(id).copied().unwrap_or(0)
    }

    /// The step that is open, if any.
    pub fn open_step(&self) -> Option<&OpenStep> {
        self.open_step.as_ref()
    }

    /// Token usage summed over every assistant message.
    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// Inbox items queued and not yet claimed or discarded, in queue order.
    pub fn pending_inbox(&self) -> Vec<PendingInboxItem> {
        self.inbox.values().cloned().collect()
    }
}

/// Projects the model-visible messages of a whole log from scratch.
pub fn derive_messages(events: &[Event]) -> Vec<Message> {
    Projection::from_events(events).messages()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::events::*;

    fn ev(seq: u64, kind: EventKind) -> Event {
        Event { seq, time: "t".into(), ignorable: false, kind }
    }

    fn user(seq: u64, text: &str) -> Event {
        ev(seq, EventKind::UserMessage(UserMessage { content: text.into(), inbox_id: None, images: vec![] }))
    }

    fn assistant(seq: u64, text: &str, reasoning: Option<&str>, calls: Vec<ToolCall>) -> Event {
        ev(
            seq,
            EventKind::AssistantMessage(AssistantMessage {
                turn: 1,
                step: 1,
                content: text.into(),
                reasoning: reasoning.map(str::to_string),
                tool_calls: calls,
                usage: Some(Usage { prompt_tokens: 10, completion_tokens: 2, ..Usage::default() }),
                finish: None,
                interrupted: false,
            }),
        )
    }

    fn result(seq: u64, id: &str, text: &str) -> Event {
        ev(
            seq,
            EventKind::ToolResult(ToolResultEvent {
                turn: 1,
                step: 1,
                call_id: id.into(),
                name: "t".into(),
                content: text.into(),
                is_error: false,
                error_code: None,
                plugin: None,
                version: None,
                truncated: false,
                original_bytes: None,
                full_content: None,
                duration_ms: None,
                details: None,
            }),
        )
    }

    #[test]
    fn projects_roles_reasoning_and_compaction() {
        let call = ToolCall { id: "c1".into(), name: "t".into(), arguments: "{}".into() };
        let events = vec![
            user(2, "q1"),
            assistant(3, "", Some("think"), vec![call.clone()]),
            result(4, "c1", "out"),
            assistant(5, "a1", None, vec![]),
            assistant(6, "", None, vec![]), // empty: dropped
            user(7, "q2"),
            ev(8, EventKind::CompactionSummary(CompactionSummary { from_seq: 2, to_seq: 5, summary: "S".into() })),
            assistant(9, "a2", None, vec![]),
        ];
        let p = Projection::from_events(&events);
        let m = p.messages();
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].role, Role::User);
        assert!(m[0].content.contains("S"));
        assert_eq!(m[1].content, "q2");
        assert_eq!(m[2].content, "a2");
        assert_eq!(p.usage().prompt_tokens, 40);

        let before = Projection::from_events(&events[..4]).messages();
        assert_eq!(before[1].reasoning.as_deref(), Some("think"));
        assert_eq!(before[1].tool_calls, vec![call]);
        assert_eq!(before[2].tool_call_id.as_deref(), Some("c1"));
    }

    #[test]
    fn nested_compaction_replaces_earlier_summary() {
        let events = vec![
            user(2, "a"),
            user(3, "b"),
            ev(4, EventKind::CompactionSummary(CompactionSummary { from_seq: 2, to_seq: 3, summary: "S1".into() })),
            user(5, "c"),
            ev(6, EventKind::CompactionSummary(CompactionSummary { from_seq: 2, to_seq: 5, summary: "S2".into() })),
            user(7, "d"),
        ];
        let m = derive_messages(&events);
        assert_eq!(m.len(), 2);
        assert!(m[0].content.contains("S2"));
        assert_eq!(m[1].content, "d");
    }

    #[test]
    fn incremental_equals_from_scratch_at_every_prefix() {
        let call = ToolCall { id: "c1".into(), name: "t".into(), arguments: "{}".into() };
        let events = [
            user(2, "q1"),
            assistant(3, "", Some("r"), vec![call]),
            result(4, "c1", "out"),
            ev(5, EventKind::CompactionSummary(CompactionSummary { from_seq: 2, to_seq: 3, summary: "S".into() })),
            assistant(6, "a", None, vec![]),
        ];
        let mut inc = Projection::new();
        for (i, e) in events.iter().enumerate() {
            inc.apply(e);
            assert_eq!(inc.messages(), derive_messages(&events[..=i]));
        }
    }

    #[test]
    fn messages_written_over_an_earlier_list_are_the_messages_at_every_prefix() {
        let call = ToolCall { id: "c1".into(), name: "t".into(), arguments: "{}".into() };
        let events = [
            user(2, "q1"),
            assistant(3, "", Some("r"), vec![call]),
            result(4, "c1", "out"),
            user(5, "q2"),
            ev(6, EventKind::CompactionSummary(CompactionSummary { from_seq: 2, to_seq: 4, summary: "S".into() })),
            assistant(7, "a", None, vec![]),
        ];
        let mut p = Projection::new();
        let (mut dst, mut mark) = (Vec::new(), HistoryMark::default());
        let mut stale = vec![Message { content: "stale".into(), ..p_user("x") }; 9];
        for e in &events {
            p.apply(e);
            // Growing, compacted (shorter, start rewritten), and over a
            // longer unrelated list: always what `messages` gives.
            p.messages_into(&mut dst, &mut mark);
            assert_eq!(dst, p.messages());
            p.messages_into(&mut stale, &mut HistoryMark::default());
            assert_eq!(stale, p.messages());
        }
        // Marks vouch for a prefix only along one lineage.
        let before = mark;
        p.apply(&user(8, "later"));
        let mut longer = Vec::new();
        let mut after = HistoryMark::default();
        p.messages_into(&mut longer, &mut after);
        assert_eq!(after.continues(&before), Some(before.len));
        assert_eq!(longer[..before.len], dst[..]);
        assert_eq!(HistoryMark::default().continues(&HistoryMark::default()), None);
        assert_eq!(before.continues(&after), None, "a longer list is not a prefix of a shorter one");
        // A clone goes its own way: a copy marked against the original is
        // compared again, not trusted.
        let mut fork = p.clone();
        fork.apply(&user(8, "fork"));
        p.apply(&user(8, "main"));
        let (mut copy, mut copy_mark) = (Vec::new(), HistoryMark::default());
        p.messages_into(&mut copy, &mut copy_mark);
        fork.messages_into(&mut copy, &mut copy_mark);
        assert_eq!(copy, fork.messages());
        // A copy altered behind the mark's back (its length changed) is
        // compared again too.
        copy.pop();
        copy.push(p_user("other"));
        copy.pop();
        fork.messages_into(&mut copy, &mut copy_mark);
        assert_eq!(copy, fork.messages());
    }

    fn p_user(text: &str) -> Message {
        Message { role: Role::User, content: text.into(), reasoning: None, tool_calls: vec![], tool_call_id: None }
    }

    #[test]
    fn tracks_pending_inbox() {
        let add = |seq, id: &str| {
            ev(
                seq,
                EventKind::InboxSpliced(InboxSpliced {
                    op: InboxOp::Added,
                    id: id.into(),
                    kind: InboxKind::Followup,
                    text: id.into(),
                }),
            )
        };
        let claim = ev(
            4,
            EventKind::InboxSpliced(InboxSpliced {
                op: InboxOp::Claimed,
                id: "a".into(),
                kind: InboxKind::Followup,
                text: String::new(),
            }),
        );
        let p = Projection::from_events(&[add(2, "a"), add(3, "b"), claim]);
        let pending = p.pending_inbox();
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].id, "b");
    }

    fn cell_state(seq: u64, cell: &str, state: &str) -> Event {
        let data = serde_json::json!({"cell": cell, "tool": "run", "state": state});
        ev(seq, EventKind::Unknown { type_name: crate::cells::CELL_EVENT.into(), data })
    }

    #[test]
    fn a_yielded_cell_is_open_until_its_end_is_logged() {
        let call = |id: &str| {
            EventKind::ToolCall(ToolCallEvent {
                turn: 1,
                step: 1,
                id: id.into(),
                name: "run".into(),
                arguments: "{}".into(),
                parent: None,
            })
        };
        let events = vec![
            ev(1, EventKind::TurnStart(TurnStart { turn: 1 })),
            ev(2, EventKind::StepStart(StepStart { turn: 1, step: 1 })),
            ev(3, call("a")),
            ev(4, call("b")),
            cell_state(5, "a", "running"),
            cell_state(6, "b", "running"),
            // A state of a cell no step holds is ignored.
            cell_state(7, "zz", "running"),
            result(8, "a", "yielded"),
            result(9, "b", "yielded"),
            ev(10, EventKind::StepEnd(StepEnd { turn: 1, step: 1, usage: None })),
            cell_state(11, "b", "finished"),
        ];
        let open = Projection::from_events(&events).open_cells();
        assert_eq!(open.len(), 1, "{open:?}");
        assert_eq!((open[0].0, open[0].1, open[0].2.id.as_str()), (1, 1, "a"));
        let all = Projection::from_events(&events[..10]).open_cells();
        assert_eq!(all.iter().map(|(_, _, c)| c.id.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    }
}
