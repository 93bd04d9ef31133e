//! Durable programs: a call of a tool marked durable ([`Tool::durable`],
//! a row's `grant.durable`) that a crash interrupted is re-run when its
//! session reopens, by deterministic replay.
//!
//! ```text
//! open (SessionStore::open_with, `keep` = is_durable_call)
//!   → crash repair as usual, except that the open step's unanswered
//!     durable call stays open: its in-flight inner calls get
//!     tool/result{INTERRUPTED}, the turn stays open
//! first run_turn / serve of the agent (Agent::recover)
//!   → for each open durable call: `tool/replay{call, tool, logged}`
//!     (ignorable), the tool is called again with the same id and
//!     arguments; its inner call number k (ids `CALL.k`, numbered in issue
//!     order) is answered from the log while the log has a call k:
//!       same name and arguments → the logged result (an interrupted one
//!         included: the program sees an INTERRUPTED error it can catch),
//!         nothing logged again
//!       other → the replay stops: the call's result is REPLAY_DIVERGED,
//!         nothing of it re-run
//!     and past the logged calls they run for real (logged as usual);
//!     the call's result is logged under its own id
//!   → the rest of the turn is closed as crash repair does
//!     (turn/end{interrupted}); the next turn sees the program's result
//! ```
//!
//! The program must see the same clock and random numbers on the replay:
//! [`Determinism`] gives its sandbox a random seed (a hash of the session
//! and call ids) and a wall clock starting at the call's logged `tool/call`
//! time and advancing one millisecond per reading (not with real time), so
//! both are in the log already and no event is added for them. Everything
//! replayed comes from the log, which bounds it.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::Value;

use crate::cells::CellRequest;
use crate::events::{Event, EventKind};
use crate::plugin::{Determinism, ToolCall, ToolErrorCode, ToolOutcome};
use crate::registry::Snapshot;

/// The ignorable event logged when a durable call is re-run:
/// `{call, tool, logged}` (`logged`: inner calls answered from the log at
/// most).
pub const REPLAY_EVENT: &str = "tool/replay";

/// Whether `call` (a model's call) is one a crash may leave open for a
/// replay: its tool is durable and it starts a program (not a cell's
/// `resume` or `cancel`).
pub fn is_durable_call(snap: &Snapshot, call: &ToolCall) -> bool {
    let durable = snap.tools.get(&call.name).is_some_and(|t| t.durable());
    durable
        && serde_json::from_str::<Value>(&call.arguments)
            .is_ok_and(|a| a.is_object() && matches!(CellRequest::of(&a), CellRequest::Start))
}

/// The clock and seed of durable call `call_id` of session `session`,
/// whose `tool/call` was logged at `logged_time` (RFC 3339).
pub fn determinism(session: &str, call_id: &str, logged_time: &str) -> Determinism {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in session.bytes().chain([0]).chain(call_id.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    Determinism { seed: h, clock_ms: crate::util::ms_from_rfc3339(logged_time).unwrap_or(0) }
}

/// One inner call the log holds.
struct Logged {
    name: String,
    arguments: String,
    outcome: Option<ToolOutcome>,
}

/// What the log holds of one durable call's inner calls, for its replay.
pub(crate) struct Replay {
    calls: HashMap<String, Logged>,
    diverged: Mutex<Option<String>>,
}

/// How a replay answers one inner call.
pub(crate) enum Answer {
    /// From the log.
    Logged(ToolOutcome),
    /// Not in the log: run it.
    Run,
    /// Another call than the log's: the replay ends.
    Diverged(String),
}

impl Replay {
    /// The inner calls of `call_id` in `events` with their results.
    pub(crate) fn from_events(events: &[Event], call_id: &str) -> Self {
        let mut calls: HashMap<String, Logged> = HashMap::new();
        for e in events {
            match &e.kind {
                EventKind::ToolCall(c) if c.parent.as_deref() == Some(call_id) => {
                    calls.insert(
                        c.id.clone(),
                        Logged { name: c.name.clone(), arguments: c.arguments.clone(), outcome: None },
                    );
                }
                EventKind::ToolResult(r) => {
                    if let Some(l) = calls.get_mut(&r.call_id) {
                        l.outcome = Some(ToolOutcome {
                            content: r.content.clone(),
                            is_error: r.is_error,
                            error_code: r.error_code.clone(),
                            details: r.details.clone(),
                        });
                    }
                }
                _ => {}
            }
        }
        Self { calls, diverged: Mutex::new(None) }
    }

    /// How many inner calls the log holds.
    pub(crate) fn len(&self) -> usize {
        self.calls.len()
    }

    /// The divergence that ended the replay, if any.
    pub(crate) fn diverged(&self) -> Option<String> {
        self.diverged.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The answer to inner call `call` (its id numbered as the log's).
    pub(crate) fn answer(&self, call: &ToolCall) -> Answer {
        if let Some(d) = self.diverged() {
            return Answer::Diverged(d);
        }
        let Some(logged) = self.calls.get(&call.id) else { return Answer::Run };
        let same_args = logged.arguments == call.arguments
            || matches!(
                (serde_json::from_str::<Value>(&logged.arguments), serde_json::from_str::<Value>(&call.arguments)),
                (Ok(a), Ok(b)) if a == b
            );
        if logged.name == call.name && same_args {
            return Answer::Logged(logged.outcome.clone().unwrap_or_else(|| {
                ToolOutcome::error(
                    ToolErrorCode::Interrupted,
                    "Error: the host stopped before this tool call finished; its result is unknown",
                )
            }));
        }
        let what = if logged.name != call.name {
            format!(
                "`{}` where the log has `{}`",
                crate::util::escape_line(crate::util::cut_str(&call.name, 128)),
                crate::util::escape_line(crate::util::cut_str(&logged.name, 128))
            )
        } else {
            format!(
                "`{}` with other arguments than the log's ({} where the log has {})",
                crate::util::escape_line(crate::util::cut_str(&call.name, 128)),
                crate::util::escape_line(crate::util::cut_str(&call.arguments, 200)),
                crate::util::escape_line(crate::util::cut_str(&logged.arguments, 200))
            )
        };
        let msg = format!(
            "Error: the program diverged from its log when it was re-run after a crash: its call {} asked for {what}. \
             The replay stopped; nothing after the crash was re-run.",
            call.id
        );
        *self.diverged.lock().unwrap_or_else(|e| e.into_inner()) = Some(msg.clone());
        Answer::Diverged(msg)
    }
}
