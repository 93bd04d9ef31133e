//! The session-log contract as a test suite any [`Backend`](super::Backend)
//! runs: `wharf-core`'s own tests run it over JSONL, `wharf-store-pg`'s over
//! PostgreSQL. Each case takes a fresh, empty [`SessionStore`] and panics on a
//! violation. It is compiled into every build (a few kilobytes) so a
//! backend crate needs no feature switch, and so the test build and
//! `cargo build -p wharf` resolve the same features (one wasmtime build).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use super::*;
use crate::events::*;
use crate::plugin::ToolCall;

/// One case of the suite: it runs against a fresh, empty store.
pub type Case = fn(&SessionStore);

/// Every case, by name.
pub const CASES: &[(&str, Case)] = &[
    ("create_append_reload", create_append_reload),
    ("second_writer_is_refused", second_writer_is_refused),
    ("crash_inside_a_turn_is_repaired", crash_inside_a_turn_is_repaired),
    ("crash_inside_a_program_closes_its_inner_calls", crash_inside_a_program_closes_its_inner_calls),
    ("crash_mid_stream_commits_prefix", crash_mid_stream_commits_prefix),
    ("ignorable_events_round_trip", ignorable_events_round_trip),
    ("fork_at_turn_boundary_only", fork_at_turn_boundary_only),
    ("list_and_export", list_and_export),
    ("invalid_ids_and_missing_sessions", invalid_ids_and_missing_sessions),
    ("subscribe_from_replays_then_streams", subscribe_from_replays_then_streams),
    ("append_batch_is_consecutive", append_batch_is_consecutive),
    ("import_copies_bytes", import_copies_bytes),
];

/// Runs every case, each on a store from `fresh`.
pub fn run_all(fresh: &dyn Fn() -> SessionStore) {
    for (name, case) in CASES {
        eprintln!("store conformance: {name}");
        case(&fresh());
    }
}

pub fn user(text: &str) -> EventKind {
    EventKind::UserMessage(UserMessage { content: text.into(), inbox_id: None, images: vec![] })
}

/// Appends one complete turn (6 events).
pub fn turn(log: &SessionLog, n: u64, text: &str) {
    log.append(EventKind::TurnStart(TurnStart { turn: n })).unwrap();
    log.append(user(text)).unwrap();
    log.append(EventKind::StepStart(StepStart { turn: n, step: 1 })).unwrap();
    log.append(EventKind::AssistantMessage(AssistantMessage {
        turn: n,
        step: 1,
        content: format!("re: {text}"),
        reasoning: None,
        tool_calls: vec![],
        usage: None,
        finish: None,
        interrupted: false,
    }))
    .unwrap();
    log.append(EventKind::StepEnd(StepEnd { turn: n, step: 1, usage: None })).unwrap();
    log.append(EventKind::TurnEnd(TurnEnd { turn: n, reason: StopReason::Completed })).unwrap();
}

/// Appends an open turn whose step has one logged call of two.
pub fn open_turn_with_calls(log: &SessionLog) {
    log.append(EventKind::TurnStart(TurnStart { turn: 1 })).unwrap();
    log.append(user("go")).unwrap();
    log.append(EventKind::StepStart(StepStart { turn: 1, step: 1 })).unwrap();
    let calls = vec![
        ToolCall { id: "c1".into(), name: "a".into(), arguments: "{}".into() },
        ToolCall { id: "c2".into(), name: "b".into(), arguments: "{}".into() },
    ];
    log.append(EventKind::AssistantMessage(AssistantMessage {
        turn: 1,
        step: 1,
        content: String::new(),
        reasoning: None,
        tool_calls: calls,
        usage: None,
        finish: None,
        interrupted: false,
    }))
    .unwrap();
    log.append(EventKind::ToolCall(ToolCallEvent {
        turn: 1,
        step: 1,
        id: "c1".into(),
        name: "a".into(),
        arguments: "{}".into(),
        parent: None,
    }))
    .unwrap();
}

/// The repair [`open_turn_with_calls`] needs.
pub const OPEN_TURN_REPAIRS: &[&str] = &["tool/result", "tool/call", "tool/result", "step/end", "turn/end"];

pub fn types(events: &[Event]) -> Vec<&str> {
    events.iter().map(|e| e.type_name()).collect()
}

fn create_append_reload(store: &SessionStore) {
    let log = store.create(NewSession { workspace: Some("/w".into()), ..Default::default() }).unwrap();
    turn(&log, 1, "hello");
    let live = log.messages();
    let id = log.id().to_string();
    drop(log);
    let loaded = store.load(&id).unwrap();
    assert_eq!(loaded.header.workspace.as_deref(), Some("/w"));
    assert_eq!(store.header(&id).unwrap(), loaded.header, "the header alone reads the same");
    assert_eq!(loaded.messages(), live);
    assert_eq!(loaded.events.len(), 7);
    assert_eq!(loaded.lines.len(), 7);
    for (ev, line) in loaded.events.iter().zip(&loaded.lines) {
        assert_eq!(&ev.to_json_line().unwrap(), line, "stored text is the core's encoding");
    }
    let (log, report) = store.open(&id).unwrap();
    assert!(report.repairs.is_empty());
    assert_eq!(log.messages(), live);
    assert_eq!(log.last_seq(), 7);
    crate::invariants::check(&loaded.events).unwrap();
}

fn second_writer_is_refused(store: &SessionStore) {
    let log = store.create(NewSession::default()).unwrap();
    let err = store.open(log.id()).unwrap_err();
    assert!(matches!(err, StoreError::Locked { .. } | StoreError::Leased { .. }), "{err}");
    assert_eq!(store.load(log.id()).unwrap().events.len(), 1);
    let id = log.id().to_string();
    drop(log);
    assert!(store.open(&id).is_ok());
}

fn crash_inside_a_turn_is_repaired(store: &SessionStore) {
    let log = store.create(NewSession::default()).unwrap();
    open_turn_with_calls(&log);
    let id = log.id().to_string();
    drop(log);
    let before = store.load(&id).unwrap().lines;
    let (log, report) = store.open(&id).unwrap();
    assert_eq!(types(&report.repairs), OPEN_TURN_REPAIRS);
    assert!(matches!(
        &report.repairs[4].kind,
        EventKind::TurnEnd(TurnEnd { reason: StopReason::Interrupted, turn: 1 })
    ));
    assert_eq!(log.messages().iter().filter(|m| m.role == crate::plugin::Role::Tool).count(), 2);
    drop(log);
    let after = store.load(&id).unwrap();
    assert!(after.lines.starts_with(&before), "history was rewritten");
    crate::invariants::check(&after.events).unwrap();
}

/// A `tool/call` of call `parent` (a program's call) or of the model.
fn call_event(id: &str, name: &str, parent: Option<&str>) -> EventKind {
    EventKind::ToolCall(ToolCallEvent {
        turn: 1,
        step: 1,
        id: id.into(),
        name: name.into(),
        arguments: "{}".into(),
        parent: parent.map(str::to_string),
    })
}

fn crash_inside_a_program_closes_its_inner_calls(store: &SessionStore) {
    let log = store.create(NewSession::default()).unwrap();
    log.append(EventKind::TurnStart(TurnStart { turn: 1 })).unwrap();
    log.append(user("go")).unwrap();
    log.append(EventKind::StepStart(StepStart { turn: 1, step: 1 })).unwrap();
    log.append(EventKind::AssistantMessage(AssistantMessage {
        turn: 1,
        step: 1,
        content: String::new(),
        reasoning: None,
        tool_calls: vec![ToolCall { id: "p".into(), name: "run_code".into(), arguments: "{}".into() }],
        usage: None,
        finish: None,
        interrupted: false,
    }))
    .unwrap();
    log.append(call_event("p", "run_code", None)).unwrap();
    // Three calls of the program: p.1 answered, p.2 running, p.3 waiting
    // for an approval.
    for (id, name) in [("p.1", "read"), ("p.2", "slow"), ("p.3", "write")] {
        log.append(call_event(id, name, Some("p"))).unwrap();
    }
    let mut answered =
        super::interrupted_result(1, 1, &ToolCall { id: "p.1".into(), name: "read".into(), arguments: "{}".into() });
    if let EventKind::ToolResult(r) = &mut answered {
        (r.content, r.is_error, r.error_code) = ("text".into(), false, None);
    }
    log.append(answered).unwrap();
    log.append(EventKind::ApprovalAsked(ApprovalAsked {
        call_id: "p.3".into(),
        tool: "write".into(),
        reason: "ask".into(),
        arguments: serde_json::json!({}),
    }))
    .unwrap();
    let id = log.id().to_string();
    drop(log); // "kill -9"
    let before = store.load(&id).unwrap();
    crate::invariants::check_prefix(&before.events).unwrap();
    assert!(crate::invariants::check(&before.events).is_err());

    let (log, report) = store.open(&id).unwrap();
    assert_eq!(
        types(&report.repairs),
        ["approval/decided", "tool/result", "tool/result", "tool/result", "step/end", "turn/end"]
    );
    let closed: Vec<(&str, Option<&str>)> = report
        .repairs
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolResult(r) => Some((r.call_id.as_str(), r.error_code.as_deref())),
            _ => None,
        })
        .collect();
    // The program's open calls in log order, then the program itself.
    assert_eq!(closed, [("p.2", Some("INTERRUPTED")), ("p.3", Some("INTERRUPTED")), ("p", Some("INTERRUPTED"))]);
    // Only the program's result reaches the model.
    let tool_msgs: Vec<_> = log.messages().into_iter().filter(|m| m.role == crate::plugin::Role::Tool).collect();
    assert_eq!(tool_msgs.len(), 1);
    assert_eq!(tool_msgs[0].tool_call_id.as_deref(), Some("p"));
    drop(log);
    let after = store.load(&id).unwrap();
    assert!(after.lines.starts_with(&before.lines), "history was rewritten");
    crate::invariants::check(&after.events).unwrap();
    // Reopening again repairs nothing.
    let (_log, report) = store.open(&id).unwrap();
    assert!(report.repairs.is_empty());
}

fn crash_mid_stream_commits_prefix(store: &SessionStore) {
    let log = store.create(NewSession::default()).unwrap();
    log.append(EventKind::TurnStart(TurnStart { turn: 1 })).unwrap();
    log.append(EventKind::StepStart(StepStart { turn: 1, step: 1 })).unwrap();
    for t in ["Hel", "lo"] {
        log.append(EventKind::AssistantChunk(AssistantChunk {
            turn: 1,
            step: 1,
            text: t.into(),
            reasoning: String::new(),
        }))
        .unwrap();
    }
    let id = log.id().to_string();
    drop(log);
    let (log, report) = store.open(&id).unwrap();
    assert_eq!(types(&report.repairs), vec!["assistant/message", "step/end", "turn/end"]);
    assert_eq!(log.messages().last().map(|m| m.content.as_str()), Some("Hello"));
}

fn ignorable_events_round_trip(store: &SessionStore) {
    let log = store.create(NewSession::default()).unwrap();
    log.append_ignorable("x/custom", serde_json::json!({"k": 1, "s": "é\u{1F600}\"\\"})).unwrap();
    let id = log.id().to_string();
    drop(log);
    let loaded = store.load(&id).unwrap();
    assert!(matches!(&loaded.events[1].kind, EventKind::Unknown { type_name, .. } if type_name == "x/custom"));
    assert!(loaded.events[1].ignorable);
}

fn fork_at_turn_boundary_only(store: &SessionStore) {
    let log = store.create(NewSession { profile: Some("p".into()), ..Default::default() }).unwrap();
    turn(&log, 1, "one");
    turn(&log, 2, "two");
    let id = log.id().to_string();
    let err = store.fork(&id, 9).unwrap_err();
    assert!(err.to_string().contains("inside turn 2; fork at a turn boundary such as seq 7 or 13"), "{err}");
    let child = store.fork(&id, 7).unwrap();
    assert_ne!(child.id(), id);
    let h = child.header().unwrap();
    assert_eq!((h.parent.as_deref(), h.fork_seq), (Some(id.as_str()), Some(7)));
    turn(&child, 2, "other");
    let cid = child.id().to_string();
    drop(child);
    let parent = store.load(&id).unwrap();
    let loaded = store.load(&cid).unwrap();
    assert_eq!(loaded.lines[1..7], parent.lines[1..7]);
    crate::invariants::check(&loaded.events).unwrap();
    turn(&log, 3, "three");
}

fn list_and_export(store: &SessionStore) {
    assert!(store.list().unwrap().is_empty());
    let a = store.create(NewSession::default()).unwrap();
    turn(&a, 1, "first question");
    let b = store.create(NewSession::default()).unwrap();
    let list = store.list().unwrap();
    assert_eq!(list.len(), 2);
    let sa = list.iter().find(|s| s.id == a.id()).unwrap();
    assert_eq!(sa.title.as_deref(), Some("first question"));
    assert!(list.iter().any(|s| s.id == b.id() && s.title.is_none()));
    let mut out = Vec::new();
    store.export(a.id(), ExportFormat::Jsonl, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let lines = store.load(a.id()).unwrap().lines;
    assert_eq!(text, lines.iter().map(|l| format!("{l}\n")).collect::<String>());
    assert_eq!(sa.bytes, text.len() as u64, "listed size is the JSONL size");
    assert!(store.exists(a.id()).unwrap());
}

fn invalid_ids_and_missing_sessions(store: &SessionStore) {
    assert!(matches!(store.open("../etc"), Err(StoreError::InvalidId(_))));
    assert!(matches!(store.load("nope"), Err(StoreError::NotFound(_))));
    assert!(matches!(store.header("nope"), Err(StoreError::NotFound(_))));
    assert!(matches!(store.header("../etc"), Err(StoreError::InvalidId(_))));
    assert!(matches!(store.open("nope"), Err(StoreError::NotFound(_))));
    assert!(!store.exists("nope").unwrap());
    assert!(matches!(
        store.create(NewSession { id: Some("a/b".into()), ..Default::default() }),
        Err(StoreError::InvalidId(_))
    ));
    let a = store.create(NewSession { id: Some("fixed".into()), ..Default::default() }).unwrap();
    drop(a);
    assert!(matches!(
        store.create(NewSession { id: Some("fixed".into()), ..Default::default() }),
        Err(StoreError::AlreadyExists(_))
    ));
}

fn subscribe_from_replays_then_streams(store: &SessionStore) {
    let log = store.create(NewSession::default()).unwrap();
    log.append(user("a")).unwrap();
    let mut rx = log.subscribe_from(1).unwrap();
    log.append(user("b")).unwrap();
    log.flush_blocking().unwrap();
    let seqs: Vec<u64> = (0..3).map(|_| rx.try_recv().unwrap().seq).collect();
    assert_eq!(seqs, vec![1, 2, 3]);
    assert!(rx.try_recv().is_err());
}

fn append_batch_is_consecutive(store: &SessionStore) {
    let log = store.create(NewSession::default()).unwrap();
    let evs = log.append_batch(vec![user("a"), user("b"), user("c")]).unwrap();
    assert_eq!(evs.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![2, 3, 4]);
    assert_eq!(log.append(user("d")).unwrap().seq, 5);
    let id = log.id().to_string();
    drop(log);
    assert_eq!(store.load(&id).unwrap().events.len(), 5);
}

fn import_copies_bytes(store: &SessionStore) {
    let log = store.create(NewSession::default()).unwrap();
    turn(&log, 1, "copy me");
    let id = log.id().to_string();
    drop(log);
    let src = store.load(&id).unwrap();
    assert!(matches!(store.import(&src.lines), Err(StoreError::AlreadyExists(_))));
    // A copy under another id, as another store would receive it.
    let mut lines = src.lines.clone();
    lines[0] = lines[0].replacen(&id, "copied-session", 1);
    drop(store.import(&lines).unwrap());
    assert_eq!(store.load("copied-session").unwrap().lines, lines);
    let (log, report) = store.open("copied-session").unwrap();
    assert!(report.repairs.is_empty());
    assert_eq!(log.last_seq(), 7);
}
