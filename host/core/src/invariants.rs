//! Structural invariants of a session log, for tests and fault suites.
//!
//! [`check`] verifies a complete log; [`check_prefix`] the same but allows the
//! log to end inside a turn (a live session). Checked:
//!
//! - the first event is `session/start`; `seq` is contiguous from 1;
//! - turns are numbered 1, 2, … and never nest; steps live inside their turn,
//!   are numbered 1, 2, … per turn, never nest, and close before `turn/end`;
//! - chunks, messages, tool calls and results live inside a step; at most one
//!   `assistant/message` per step, and tool calls follow it;
//! - the `tool/call`s of a step are exactly the message's tool calls, in the
//!   model's order; every `tool/call` has exactly one `tool/result`, after it,
//!   and results come in the same order as calls (model order) before
//!   `step/end`;
//! - a call a program made (`tool/call` with a `parent`, e.g. inside
//!   `run_code`) lives in its step, names as `parent` a model call logged
//!   earlier in that step, and has exactly one `tool/result`, after it and
//!   before `step/end` (crash repair closes an open one as interrupted);
//! - a cell (a call that yielded, `tool/cell{state: running}`,
//!   [`crate::cells`]): the calls its program makes from then on may be
//!   logged anywhere later in the log, each with exactly one `tool/result`
//!   after it (in a complete log);
//! - `policy/decision` and `approval/*` concern a logged, unanswered call, and
//!   every `approval/asked` is answered by one `approval/decided`.

use std::collections::HashSet;

use crate::events::{Event, EventKind};

#[derive(Default)]
struct Step {
    turn: u64,
    step: u32,
    message_calls: Option<Vec<String>>,
    logged: Vec<String>,
    results: usize,
    asked: HashSet<String>,
    /// Calls a program made in this step that have no result yet.
    inner_open: Vec<String>,
}

/// A broken invariant: where, and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", at.as_ref().map(|(seq, ty)| format!("seq {seq} ({ty}): ")).unwrap_or_default())]
pub struct Violation {
    /// The seq and type of the event that breaks it; `None` when the log as
    /// a whole does (empty, a turn never closed).
    pub at: Option<(u64, String)>,
    /// What is wrong.
    pub message: String,
}

impl Violation {
    fn whole(message: impl Into<String>) -> Self {
        Self { at: None, message: message.into() }
    }
}

/// Checks a complete log (every turn closed).
pub fn check(events: &[Event]) -> Result<(), Violation> {
    check_inner(events, true)
}

/// Checks a log that may end inside a turn.
pub fn check_prefix(events: &[Event]) -> Result<(), Violation> {
    check_inner(events, false)
}

fn check_inner(events: &[Event], complete: bool) -> Result<(), Violation> {
    let mut last_turn = 0u64;
    let mut turn: Option<u64> = None;
    let mut last_step = 0u32;
    let mut step: Option<Step> = None;
    let mut inner: HashSet<String> = HashSet::new();
    let mut inner_answered: HashSet<String> = HashSet::new();
    // Inner call id → its parent; cells that yielded; cell calls unanswered.
    let mut inner_parent: std::collections::HashMap<String, String> = Default::default();
    let mut yielded: HashSet<String> = HashSet::new();
    let mut cell_open: Vec<String> = Vec::new();
    if events.is_empty() {
        return Err(Violation::whole("empty log"));
    }
    for (i, ev) in events.iter().enumerate() {
        let at = |message: String| Err(Violation { at: Some((ev.seq, ev.type_name().to_string())), message });
        if ev.seq != i as u64 + 1 {
            return at(format!("expected seq {}", i + 1));
        }
        let in_step = |t: u64, s: u32, step: &Option<Step>| match step {
            Some(st) if st.turn == t && st.step == s => Ok(()),
            Some(st) => Err(format!("belongs to step {t}.{s} but step {}.{} is open", st.turn, st.step)),
            None => Err(format!("belongs to step {t}.{s} but no step is open")),
        };
        match &ev.kind {
            EventKind::Unknown { type_name, data } if type_name == crate::cells::CELL_EVENT => {
                if data.get("state").and_then(|v| v.as_str()) == Some("running")
                    && let Some(cell) = data.get("cell").and_then(|v| v.as_str())
                {
                    yielded.insert(cell.to_string());
                    // Its open calls are the cell's now, not the step's.
                    if let Some(st) = &mut step {
                        st.inner_open.retain(|id| {
                            let mine = inner_parent.get(id).is_some_and(|p| p == cell);
                            if mine {
                                cell_open.push(id.clone());
                            }
                            !mine
                        });
                    }
                }
            }
            // The calls of a cell that yielded: anywhere after it.
            EventKind::ToolCall(c) if c.parent.as_ref().is_some_and(|p| yielded.contains(p)) => {
                if !inner.insert(c.id.clone()) {
                    return at(format!("inner call `{}` logged twice", c.id));
                }
                cell_open.push(c.id.clone());
            }
            EventKind::ToolResult(r) if cell_open.contains(&r.call_id) => {
                if !inner_answered.insert(r.call_id.clone()) {
                    return at(format!("inner call `{}` answered twice", r.call_id));
                }
                cell_open.retain(|id| *id != r.call_id);
            }
            // Calls a program made (`run_code`): inside their step, outside
            // the model's order; each answered at most once.
            EventKind::ToolCall(c) if c.parent.is_some() => {
                in_step(c.turn, c.step, &step).or_else(at)?;
                if !inner.insert(c.id.clone()) {
                    return at(format!("inner call `{}` logged twice", c.id));
                }
                let Some(st) = &mut step else { return at("no open step".into()) };
                let parent = c.parent.as_deref().unwrap_or_default();
                if !st.logged.iter().any(|l| l == parent) {
                    return at(format!("inner call `{}` names `{parent}`, not a call of this step", c.id));
                }
                st.inner_open.push(c.id.clone());
                inner_parent.insert(c.id.clone(), parent.to_string());
            }
            EventKind::ToolResult(r) if inner.contains(&r.call_id) && !inner_answered.insert(r.call_id.clone()) => {
                return at(format!("inner call `{}` answered twice", r.call_id));
            }
            EventKind::ToolResult(r) if inner.contains(&r.call_id) => {
                in_step(r.turn, r.step, &step).or_else(at)?;
                if let Some(st) = &mut step {
                    st.inner_open.retain(|id| *id != r.call_id);
                }
            }
            EventKind::PolicyDecision(d) if inner.contains(&d.call_id) => {}
            EventKind::ApprovalAsked(a) if inner.contains(&a.call_id) => {}
            EventKind::ApprovalDecided(a) if inner.contains(&a.call_id) => {}
            EventKind::SessionStart(_) if i != 0 => return at("session/start after the first event".into()),
            EventKind::SessionStart(_) => {}
            _ if i == 0 => return at("the first event must be session/start".into()),
            EventKind::TurnStart(t) => {
                if let Some(open) = turn {
                    return at(format!("turn {open} is still open"));
                }
                if t.turn != last_turn + 1 {
                    return at(format!("turn {} after turn {last_turn}", t.turn));
                }
                last_turn = t.turn;
                last_step = 0;
                turn = Some(t.turn);
            }
            EventKind::TurnEnd(t) => {
                if turn != Some(t.turn) {
                    return at(format!("ends turn {} but the open turn is {turn:?}", t.turn));
                }
                if let Some(s) = &step {
                    return at(format!("step {}.{} is still open", s.turn, s.step));
                }
                turn = None;
            }
            EventKind::StepStart(s) => {
                if turn != Some(s.turn) {
                    return at(format!("step of turn {} but the open turn is {turn:?}", s.turn));
                }
                if let Some(open) = &step {
                    return at(format!("step {}.{} is still open", open.turn, open.step));
                }
                if s.step != last_step + 1 {
                    return at(format!("step {} after step {last_step}", s.step));
                }
                last_step = s.step;
                step = Some(Step { turn: s.turn, step: s.step, ..Step::default() });
            }
            EventKind::StepEnd(s) => {
                if let Err(e) = in_step(s.turn, s.step, &step) {
                    return at(e);
                }
                let Some(st) = step.take() else { return at("no open step".into()) };
                if st.results != st.logged.len() {
                    return at(format!("{} tool calls but {} results", st.logged.len(), st.results));
                }
                if !st.inner_open.is_empty() {
                    return at(format!("calls made by a program never answered: {:?}", st.inner_open));
                }
                if let Some(m) = &st.message_calls
                    && m != &st.logged
                {
                    return at(format!("message asked for calls {m:?} but {:?} were logged", st.logged));
                }
                if !st.asked.is_empty() {
                    return at(format!("approvals never decided: {:?}", st.asked));
                }
            }
            EventKind::AssistantChunk(c) => in_step(c.turn, c.step, &step).or_else(at)?,
            EventKind::LlmRetry(r) => in_step(r.turn, r.step, &step).or_else(at)?,
            EventKind::AssistantMessage(m) => {
                in_step(m.turn, m.step, &step).or_else(at)?;
                let Some(st) = &mut step else { return at("no open step".into()) };
                if st.message_calls.is_some() {
                    return at("a second assistant/message in one step".into());
                }
                st.message_calls = Some(m.tool_calls.iter().map(|c| c.id.clone()).collect());
            }
            EventKind::ToolCall(c) => {
                in_step(c.turn, c.step, &step).or_else(at)?;
                let Some(st) = &mut step else { return at("no open step".into()) };
                let Some(m) = &st.message_calls else { return at("tool/call before the assistant/message".into()) };
                if st.logged.contains(&c.id) {
                    return at(format!("call `{}` logged twice", c.id));
                }
                if m.get(st.logged.len()) != Some(&c.id) {
                    return at(format!("call `{}` out of model order (message calls {m:?})", c.id));
                }
                st.logged.push(c.id.clone());
            }
            EventKind::ToolResult(r) => {
                in_step(r.turn, r.step, &step).or_else(at)?;
                let Some(st) = &mut step else { return at("no open step".into()) };
                match st.logged.get(st.results) {
                    Some(id) if *id == r.call_id => st.results += 1,
                    Some(id) => return at(format!("result for `{}` but the next in model order is `{id}`", r.call_id)),
                    None => return at(format!("result for `{}` without a pending tool/call", r.call_id)),
                }
            }
            EventKind::PolicyDecision(d) => pending_call(&step, &d.call_id).or_else(at)?,
            EventKind::ApprovalAsked(a) => {
                pending_call(&step, &a.call_id).or_else(at)?;
                if let Some(st) = &mut step
                    && !st.asked.insert(a.call_id.clone())
                {
                    return at(format!("approval for `{}` asked twice", a.call_id));
                }
            }
            EventKind::ApprovalDecided(a) => {
                pending_call(&step, &a.call_id).or_else(at)?;
                if let Some(st) = &mut step
                    && !st.asked.remove(&a.call_id)
                {
                    return at(format!("approval for `{}` decided but never asked", a.call_id));
                }
            }
            _ => {}
        }
    }
    if complete && let Some(t) = turn {
        return Err(Violation::whole(format!("turn {t} is never closed")));
    }
    if complete && !cell_open.is_empty() {
        return Err(Violation::whole(format!("calls made by a cell never answered: {cell_open:?}")));
    }
    Ok(())
}

fn pending_call(step: &Option<Step>, id: &str) -> Result<(), String> {
    match step {
        Some(st) if st.logged[st.results.min(st.logged.len())..].iter().any(|c| c == id) => Ok(()),
        _ => Err(format!("concerns call `{id}`, which is not a pending tool/call")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::events::*;
    use crate::plugin::ToolCall;

    fn log(kinds: Vec<EventKind>) -> Vec<Event> {
        let mut v = vec![EventKind::SessionStart(SessionStart {
            id: "s".into(),
            format: 1,
            created: "t".into(),
            parent: None,
            fork_seq: None,
            workspace: None,
            profile: None,
            spawned_by: None,
        })];
        v.extend(kinds);
        v.into_iter()
            .enumerate()
            .map(|(i, kind)| Event { seq: i as u64 + 1, time: "t".into(), ignorable: false, kind })
            .collect()
    }

    fn call(id: &str) -> EventKind {
        EventKind::ToolCall(ToolCallEvent {
            turn: 1,
            step: 1,
            id: id.into(),
            name: "t".into(),
            arguments: "{}".into(),
            parent: None,
        })
    }

    fn result(id: &str) -> EventKind {
        EventKind::ToolResult(ToolResultEvent {
            turn: 1,
            step: 1,
            call_id: id.into(),
            name: "t".into(),
            content: String::new(),
            is_error: false,
            error_code: None,
            plugin: None,
            version: None,
            truncated: false,
            original_bytes: None,
            full_content: None,
            duration_ms: None,
            details: None,
        })
    }

    fn msg(ids: &[&str]) -> EventKind {
        EventKind::AssistantMessage(AssistantMessage {
            turn: 1,
            step: 1,
            content: String::new(),
            reasoning: None,
            tool_calls: ids
                .iter()
                .map(|i| ToolCall { id: (*i).into(), name: "t".into(), arguments: "{}".into() })
                .collect(),
            usage: None,
            finish: None,
            interrupted: false,
        })
    }

    fn turn_with(body: Vec<EventKind>) -> Vec<EventKind> {
        let mut v =
            vec![EventKind::TurnStart(TurnStart { turn: 1 }), EventKind::StepStart(StepStart { turn: 1, step: 1 })];
        v.extend(body);
        v.push(EventKind::StepEnd(StepEnd { turn: 1, step: 1, usage: None }));
        v.push(EventKind::TurnEnd(TurnEnd { turn: 1, reason: StopReason::Completed }));
        v
    }

    #[test]
    fn accepts_well_formed_logs() {
        check(&log(turn_with(vec![msg(&["a", "b"]), call("a"), call("b"), result("a"), result("b")]))).unwrap();
        check(&log(turn_with(vec![msg(&["a", "b"]), call("a"), result("a"), call("b"), result("b")]))).unwrap();
    }

    fn inner(id: &str, parent: &str) -> EventKind {
        let mut c = call(id);
        if let EventKind::ToolCall(c) = &mut c {
            c.parent = Some(parent.into());
        }
        c
    }

    #[test]
    fn every_inner_call_has_exactly_one_result_in_its_step() {
        let ok = [
            turn_with(vec![
                msg(&["p"]),
                call("p"),
                inner("p.1", "p"),
                inner("p.2", "p"),
                result("p.2"),
                result("p.1"),
                result("p"),
            ]),
            // An inner result may follow its parent's (a late one, within the step).
            turn_with(vec![msg(&["p"]), call("p"), inner("p.1", "p"), result("p"), result("p.1")]),
        ];
        for good in ok {
            assert!(check(&log(good.clone())).is_ok(), "{:?}: {good:?}", check(&log(good.clone())));
        }
        let bad = [
            // never answered (what crash repair must close)
            turn_with(vec![msg(&["p"]), call("p"), inner("p.1", "p"), inner("p.2", "p"), result("p.1"), result("p")]),
            // answered twice
            turn_with(vec![msg(&["p"]), call("p"), inner("p.1", "p"), result("p.1"), result("p.1"), result("p")]),
            // answered before it was made
            turn_with(vec![msg(&["p"]), call("p"), result("p.1"), inner("p.1", "p"), result("p")]),
            // its parent is not a call of the step
            turn_with(vec![msg(&["p"]), call("p"), inner("p.1", "q"), result("p.1"), result("p")]),
            // made before its parent was logged
            turn_with(vec![msg(&["p"]), inner("p.1", "p"), result("p.1"), call("p"), result("p")]),
        ];
        for b in bad {
            assert!(check(&log(b.clone())).is_err(), "{b:?}");
        }
        let mut open = turn_with(vec![msg(&["p"]), call("p"), inner("p.1", "p")]);
        open.truncate(open.len() - 2);
        assert!(check_prefix(&log(open)).is_ok());
    }

    #[test]
    fn rejects_broken_logs() {
        let bad = [
            turn_with(vec![msg(&["a", "b"]), call("a"), call("b"), result("b"), result("a")]),
            turn_with(vec![msg(&["a"]), call("a")]),
            turn_with(vec![msg(&["a", "b"]), call("b"), result("b")]),
            turn_with(vec![call("a"), result("a")]),
            turn_with(vec![msg(&["a"]), call("a"), result("a"), result("a")]),
            turn_with(vec![msg(&[]), msg(&[])]),
        ];
        for b in bad {
            assert!(check(&log(b.clone())).is_err(), "{b:?}");
        }
        let mut open = turn_with(vec![msg(&[])]);
        open.pop();
        assert!(check(&log(open.clone())).is_err());
        assert!(check_prefix(&log(open)).is_ok());
        let mut gap = log(vec![]);
        gap.push(Event {
            seq: 3,
            time: "t".into(),
            ignorable: false,
            kind: EventKind::TurnStart(TurnStart { turn: 1 }),
        });
        let v = check(&gap).unwrap_err();
        assert_eq!(v.at, Some((3, "turn/start".to_string())));
        assert_eq!(v.to_string(), "seq 3 (turn/start): expected seq 2");
        assert_eq!(check(&[]).unwrap_err().to_string(), "empty log");
    }
}
