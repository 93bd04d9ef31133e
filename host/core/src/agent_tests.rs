#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::AtomicU32;
use std::time::Duration;

use super::*;
use crate::approval::{Approval, ApprovalRequest, HeadlessApprover};
use crate::events::*;
use crate::invariants;
use crate::plugin::{
    BoxFuture, Decision, HookOutcome, PromptSection, Role, Tool, ToolErrorCode, ToolMode, ToolOutcome,
};
use crate::registry::Registrations;
use crate::store::{NewSession, SessionStore};
use crate::testkit::*;

struct H {
    _dir: tempfile::TempDir,
    store: SessionStore,
    registry: Arc<Registry>,
    llm: Arc<ScriptedLlm>,
    agent: Agent,
}

fn config() -> AgentConfig {
    AgentConfig {
        retry: RetryPolicy { initial_delay: Duration::ZERO, max_delay: Duration::ZERO, ..RetryPolicy::default() },
        ..AgentConfig::default()
    }
}

fn harness_with(llm: Arc<ScriptedLlm>, tools: Vec<FakeTool>, approver: Arc<dyn Approver>, config: AgentConfig) -> H {
    let dir = tempfile::tempdir().unwrap();
    let store = SessionStore::new(dir.path().join("sessions"));
    let log = store.create(NewSession { workspace: Some("/ws".into()), ..NewSession::default() }).unwrap();
    let registry = Arc::new(Registry::new());
    install_llm(&registry, llm.clone()).unwrap();
    install_tools(&registry, tools.into_iter().map(|t| Arc::new(t) as Arc<dyn Tool>).collect()).unwrap();
    let agent = Agent::new(log, registry.clone(), approver, config);
    H { _dir: dir, store, registry, llm, agent }
}

fn harness(replies: Vec<Reply>, tools: Vec<FakeTool>) -> H {
    harness_with(ScriptedLlm::new(replies), tools, Arc::new(HeadlessApprover::default()), config())
}

impl H {
    fn events(&self) -> Vec<Event> {
        let events = self.store.load(self.agent.session_id()).unwrap().events;
        invariants::check_prefix(&events).unwrap();
        events
    }

    fn types(&self) -> Vec<String> {
        self.events().iter().map(|e| e.type_name().to_string()).collect()
    }

    /// Types from the last `turn/start` on.
    fn last_turn_types(&self) -> Vec<String> {
        let t = self.types();
        let start = t.iter().rposition(|x| x == "turn/start").unwrap();
        t[start..].to_vec()
    }

    fn results(&self) -> Vec<ToolResultEvent> {
        self.events()
            .into_iter()
            .filter_map(|e| match e.kind {
                EventKind::ToolResult(r) => Some(r),
                _ => None,
            })
            .collect()
    }

    fn find<T>(&self, f: impl Fn(&EventKind) -> Option<T>) -> Vec<T> {
        self.events().iter().filter_map(|e| f(&e.kind)).collect()
    }
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn journal() -> Arc<std::sync::Mutex<Vec<String>>> {
    Arc::default()
}

fn pos(j: &[String], s: &str) -> usize {
    j.iter().position(|x| x == s).unwrap_or_else(|| panic!("{s} not in {j:?}"))
}

async fn wait_for(j: &Arc<std::sync::Mutex<Vec<String>>>, items: &[&str]) {
    for _ in 0..10_000 {
        if items.iter().all(|i| j.lock().unwrap().iter().any(|x| x == i)) {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("never saw {items:?} in {:?}", j.lock().unwrap());
}

#[tokio::test]
async fn two_step_turn_exact_event_order() {
    let h = harness(
        vec![Reply::tools(&[("c1", "echo", r#"{"x":1}"#)]), Reply::text("done")],
        vec![FakeTool::new("echo", ToolMode::Parallel)],
    );
    let s = h.agent.prompt("hi").await.unwrap();
    assert_eq!(s.reason, StopReason::Completed);
    assert_eq!((s.turn, s.steps, s.text.as_str()), (1, 2, "done"));
    assert_eq!(s.usage.prompt_tokens, 20);
    assert_eq!(h.agent.usage().completion_tokens, 10);
    assert_eq!(
        h.types(),
        strs(&[
            "session/start",
            "inbox/spliced",
            "turn/start",
            "inbox/spliced",
            "user/message",
            "step/start",
            "assistant/message",
            "tool/call",
            "tool/result",
            "step/end",
            "step/start",
            "assistant/chunk",
            "assistant/message",
            "step/end",
            "turn/end",
        ])
    );
    let r = &h.results()[0];
    assert_eq!((r.plugin.as_deref(), r.version.as_deref()), (Some("plugin-echo"), Some("digest-echo-v1")));
    assert_eq!(r.content, r#"{"x":1}"#);
    assert!(!r.is_error);
    let reqs = h.llm.requests();
    assert_eq!(reqs.len(), 2);
    let roles: Vec<Role> = reqs[1].messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, vec![Role::User, Role::Assistant, Role::Tool]);
    assert_eq!(reqs[1].messages[1].tool_calls[0].id, "c1");
    assert_eq!(reqs[0].tools.len(), 1);
    invariants::check(&h.events()).unwrap();
    // The live projection equals a from-scratch derivation.
    assert_eq!(h.agent.log().messages(), crate::projection::derive_messages(&h.events()));
}

/// `@path` attachments become calls of the tool the host names, with the
/// path under the argument it names; without one they stay text.
#[tokio::test]
async fn attachments_call_the_configured_tool() {
    let tool = || FakeTool::new("open_file", ToolMode::Parallel);
    let attach = AttachTool { tool: "open_file".into(), path_argument: "file".into() };
    let cfg = AgentConfig { attach: Some(attach), ..config() };
    let h = harness_with(
        ScriptedLlm::new(vec![Reply::text("ok")]),
        vec![tool()],
        Arc::new(HeadlessApprover::default()),
        cfg,
    );
    h.agent.prompt("look at @notes/a.md please").await.unwrap();
    let calls = h.find(|k| match k {
        EventKind::ToolCall(c) => Some((c.id.clone(), c.name.clone(), c.arguments.clone())),
        _ => None,
    });
    assert_eq!(
        calls,
        vec![("attach-1-1".to_string(), "open_file".to_string(), r#"{"file":"notes/a.md"}"#.to_string())]
    );
    // The model's request already holds the result.
    let roles: Vec<Role> = h.llm.requests()[0].messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, vec![Role::User, Role::Assistant, Role::Tool]);

    let h = harness(vec![Reply::text("ok")], vec![tool()]);
    h.agent.prompt("look at @notes/a.md please").await.unwrap();
    assert!(h.results().is_empty());
    assert_eq!(h.llm.requests()[0].messages.len(), 1);
}

#[tokio::test]
async fn parallel_results_commit_in_model_order() {
    let j = journal();
    let gate = Gate::new();
    let h = harness(
        vec![Reply::tools(&[("a", "slow", "{}"), ("b", "fast", "{}"), ("c", "mid", "{}")]), Reply::text("ok")],
        vec![
            FakeTool::new("slow", ToolMode::Parallel).latency(Latency::Gate(gate.clone())).journal(j.clone()),
            FakeTool::new("fast", ToolMode::Parallel).journal(j.clone()),
            FakeTool::new("mid", ToolMode::Parallel).latency(Latency::Yields(3)).journal(j.clone()),
        ],
    );
    let agent = h.agent.clone();
    let task = tokio::spawn(async move { agent.prompt("go").await });
    gate.reached().await;
    wait_for(&j, &["end:b", "end:c"]).await;
    gate.open();
    assert_eq!(task.await.unwrap().unwrap().reason, StopReason::Completed);
    let j = j.lock().unwrap().clone();
    assert!(pos(&j, "end:b") < pos(&j, "end:a") && pos(&j, "end:c") < pos(&j, "end:a"), "{j:?}");
    let ids: Vec<String> = h.results().into_iter().map(|r| r.call_id).collect();
    assert_eq!(ids, strs(&["a", "b", "c"]));
    let t = h.types();
    let first_call = pos(&t, "tool/call");
    assert_eq!(
        t[first_call..first_call + 6],
        strs(&["tool/call", "tool/call", "tool/call", "tool/result", "tool/result", "tool/result"])[..]
    );
    invariants::check(&h.events()).unwrap();
}

#[tokio::test]
async fn exclusive_call_is_a_barrier() {
    let j = journal();
    let h = harness(
        vec![
            Reply::tools(&[
                ("a", "p", r#"{"yields":5}"#),
                ("b", "x", "{}"),
                ("c", "p", r#"{"yields":3}"#),
                ("d", "p", "{}"),
            ]),
            Reply::text("ok"),
        ],
        vec![
            FakeTool::new("p", ToolMode::Parallel).latency(Latency::FromArgs).journal(j.clone()),
            FakeTool::new("x", ToolMode::Exclusive).latency(Latency::Yields(2)).journal(j.clone()),
        ],
    );
    h.agent.prompt("go").await.unwrap();
    let j = j.lock().unwrap().clone();
    assert!(pos(&j, "end:a") < pos(&j, "start:b"), "{j:?}");
    assert!(pos(&j, "end:b") < pos(&j, "start:c") && pos(&j, "end:b") < pos(&j, "start:d"), "{j:?}");
    let t = h.types();
    let first = pos(&t, "tool/call");
    assert_eq!(
        t[first..first + 8],
        strs(&[
            "tool/call",
            "tool/result",
            "tool/call",
            "tool/result",
            "tool/call",
            "tool/call",
            "tool/result",
            "tool/result"
        ])[..]
    );
    let ids: Vec<String> = h.results().into_iter().map(|r| r.call_id).collect();
    assert_eq!(ids, strs(&["a", "b", "c", "d"]));
}

#[tokio::test]
async fn rolling_pool_is_bounded() {
    let j = journal();
    let mut cfg = config();
    cfg.pipeline.tool_pool = 2;
    let calls: Vec<(String, String)> =
        (0..5).map(|i| (format!("c{i}"), format!(r#"{{"yields":{}}}"#, 5 - i))).collect();
    let refs: Vec<(&str, &str, &str)> = calls.iter().map(|(id, a)| (id.as_str(), "p", a.as_str())).collect();
    let h = harness_with(
        ScriptedLlm::new(vec![Reply::tools(&refs), Reply::text("ok")]),
        vec![FakeTool::new("p", ToolMode::Parallel).latency(Latency::FromArgs).journal(j.clone())],
        Arc::new(HeadlessApprover::default()),
        cfg,
    );
    h.agent.prompt("go").await.unwrap();
    let (mut now, mut max) = (0i32, 0i32);
    for e in j.lock().unwrap().iter() {
        now += if e.starts_with("start:") { 1 } else { -1 };
        max = max.max(now);
    }
    assert_eq!(max, 2);
    let ids: Vec<String> = h.results().into_iter().map(|r| r.call_id).collect();
    assert_eq!(ids, strs(&["c0", "c1", "c2", "c3", "c4"]));
}

#[tokio::test]
async fn cancel_mid_stream_commits_interrupted_message() {
    let gate = Gate::new();
    let j = journal();
    let reply = Reply::items(vec![
        ScriptItem::Batch(vec![LlmEvent::Reasoning("think".into()), LlmEvent::Text("Hel".into())]),
        ScriptItem::Batch(vec![LlmEvent::ToolCall(crate::plugin::ToolCall {
            id: "c1".into(),
            name: "echo".into(),
            arguments: "{}".into(),
        })]),
        ScriptItem::Gate(gate.clone()),
        ScriptItem::Batch(vec![LlmEvent::Text("lo".into()), LlmEvent::Finish(FinishReason::Stop)]),
    ]);
    let h = harness(vec![reply], vec![FakeTool::new("echo", ToolMode::Parallel).journal(j.clone())]);
    assert!(!h.agent.cancel(), "idle cancel is a no-op");
    let agent = h.agent.clone();
    let task = tokio::spawn(async move { agent.prompt("go").await });
    gate.reached().await;
    assert!(h.agent.is_running());
    assert!(h.agent.cancel());
    let s = task.await.unwrap().unwrap();
    assert_eq!(s.reason, StopReason::Cancelled);
    assert_eq!(
        h.last_turn_types(),
        strs(&[
            "turn/start",
            "inbox/spliced",
            "user/message",
            "step/start",
            "assistant/chunk",
            "assistant/message",
            "tool/call",
            "tool/result",
            "step/end",
            "turn/end",
        ])
    );
    let msgs = h.find(|k| match k {
        EventKind::AssistantMessage(m) => Some(m.clone()),
        _ => None,
    });
    assert_eq!(msgs.len(), 1);
    let m = &msgs[0];
    assert!(m.interrupted);
    assert_eq!((m.content.as_str(), m.reasoning.as_deref()), ("Hel", Some("think")));
    assert_eq!(m.tool_calls.len(), 1);
    let r = &h.results()[0];
    assert!(r.is_error);
    assert_eq!(r.error_code, Some(ToolErrorCode::AbortedBeforeDispatch));
    assert!(j.lock().unwrap().is_empty(), "the tool never started");
    let ends = h.find(|k| match k {
        EventKind::TurnEnd(t) => Some(t.reason.clone()),
        _ => None,
    });
    assert_eq!(ends, vec![StopReason::Cancelled]);
    // The interrupted prefix is in the model-visible history.
    let visible = h.agent.log().messages();
    assert_eq!(visible[1].content, "Hel");
    assert_eq!(visible[2].tool_call_id.as_deref(), Some("c1"));
    invariants::check(&h.events()).unwrap();
}

#[tokio::test]
async fn cancel_mid_tools_drains_started_and_aborts_unstarted() {
    let gate = Gate::new();
    let j = journal();
    let mut cfg = config();
    cfg.pipeline.tool_pool = 1;
    let h = harness_with(
        ScriptedLlm::new(vec![Reply::tools(&[("a", "slow", "{}"), ("b", "fast", "{}"), ("c", "fast", "{}")])]),
        vec![
            FakeTool::new("slow", ToolMode::Parallel).latency(Latency::Gate(gate.clone())).journal(j.clone()),
            FakeTool::new("fast", ToolMode::Parallel).journal(j.clone()),
        ],
        Arc::new(HeadlessApprover::default()),
        cfg,
    );
    let agent = h.agent.clone();
    let task = tokio::spawn(async move { agent.prompt("go").await });
    gate.reached().await;
    h.agent.followup("later").unwrap(); // discarded by the cancel
    assert!(h.agent.cancel());
    let s = task.await.unwrap().unwrap();
    assert_eq!(s.reason, StopReason::Cancelled);
    assert_eq!(
        h.last_turn_types()[4..],
        strs(&[
            "assistant/message",
            "tool/call",
            "tool/call",
            "inbox/spliced",
            "inbox/spliced",
            "tool/result",
            "tool/result",
            "tool/call",
            "tool/result",
            "step/end",
            "turn/end",
        ])[..]
    );
    let r = h.results();
    assert_eq!(r[0].error_code.as_deref(), Some("ABORTED"), "the started call drained with the tool's own answer");
    assert_eq!(r[0].plugin.as_deref(), Some("plugin-slow"));
    assert_eq!(r[1].error_code, Some(ToolErrorCode::AbortedBeforeDispatch));
    assert_eq!(r[2].error_code, Some(ToolErrorCode::AbortedBeforeDispatch));
    assert_eq!(*j.lock().unwrap(), strs(&["start:a", "end:a"]));
    let discarded = h.find(|k| match k {
        EventKind::InboxSpliced(s) if s.op == InboxOp::Discarded => Some(s.id.clone()),
        _ => None,
    });
    assert_eq!(discarded.len(), 1);
    assert!(h.agent.log().pending_inbox().is_empty());
    invariants::check(&h.events()).unwrap();
}

#[tokio::test]
async fn cancellation_grace_and_tool_deadline() {
    let mut cfg = config();
    cfg.pipeline.cancel_grace = Duration::ZERO;
    cfg.pipeline.tool_timeouts.insert("stuck".into(), Duration::ZERO);
    let gate = Gate::new();
    let mut stubborn = FakeTool::new("stubborn", ToolMode::Parallel).latency(Latency::Gate(gate.clone()));
    stubborn.honours_cancel = false;
    let h = harness_with(
        ScriptedLlm::new(vec![
            Reply::tools(&[("t", "stuck", "{}")]),
            Reply::text("next"),
            Reply::tools(&[("s", "stubborn", "{}")]),
        ]),
        vec![FakeTool::new("stuck", ToolMode::Parallel).latency(Latency::Forever), stubborn],
        Arc::new(HeadlessApprover::default()),
        cfg,
    );
    h.agent.prompt("one").await.unwrap();
    assert_eq!(h.results()[0].error_code, Some(ToolErrorCode::Timeout));
    let agent = h.agent.clone();
    let task = tokio::spawn(async move { agent.prompt("two").await });
    gate.reached().await;
    h.agent.cancel();
    assert_eq!(task.await.unwrap().unwrap().reason, StopReason::Cancelled);
    assert_eq!(h.results()[1].error_code, Some(ToolErrorCode::Aborted));
    invariants::check(&h.events()).unwrap();
}

#[tokio::test]
async fn step_budget_ends_with_max_steps() {
    let mut cfg = config();
    cfg.max_steps = 2;
    let h = harness_with(
        ScriptedLlm::with_fallback(vec![], Reply::tools(&[("c", "echo", "{}")])),
        vec![FakeTool::new("echo", ToolMode::Parallel)],
        Arc::new(HeadlessApprover::default()),
        cfg,
    );
    let s = h.agent.prompt("loop").await.unwrap();
    assert_eq!((s.reason, s.steps), (StopReason::MaxSteps, 2));
    assert_eq!(h.types().iter().filter(|t| *t == "step/start").count(), 2);
    invariants::check(&h.events()).unwrap();
}

#[tokio::test]
async fn messages_survive_restart_resume_and_fork() {
    let h = harness(
        vec![Reply::tools(&[("c1", "echo", r#"{"a":1}"#)]), Reply::text("first"), Reply::text("second")],
        vec![FakeTool::new("echo", ToolMode::Parallel)],
    );
    h.agent.prompt("one").await.unwrap();
    h.agent.prompt("two").await.unwrap();
    let live = h.agent.log().messages();
    let events = h.events();
    assert_eq!(crate::projection::derive_messages(&events), live);
    let id = h.agent.session_id().to_string();
    let H { _dir, store, registry, agent, .. } = h;
    drop(agent);

    let (log, report) = store.open(&id).unwrap();
    assert!(report.repairs.is_empty() && report.warnings.is_empty());
    assert_eq!(log.messages(), live);
    assert_eq!(store.load(&id).unwrap().messages(), live);
    let llm2 = ScriptedLlm::new(vec![Reply::text("third")]);
    install_llm(&registry, llm2.clone()).unwrap();
    let agent = Agent::new(log, registry.clone(), Arc::new(HeadlessApprover::default()), config());
    let s = agent.prompt("three").await.unwrap();
    assert_eq!(s.turn, 3);
    assert_eq!(llm2.requests()[0].messages[..live.len()], live[..]);
    let all = store.load(&id).unwrap().events;
    invariants::check(&all).unwrap();

    let first_end = events.iter().find(|e| matches!(e.kind, EventKind::TurnEnd(_))).unwrap().seq;
    let child = store.fork(&id, first_end).unwrap();
    assert_eq!(child.messages(), crate::projection::derive_messages(&events[..first_end as usize]));
    let cid = child.id().to_string();
    let agent2 = Agent::new(child, registry, Arc::new(HeadlessApprover::default()), config());
    let llm3 = ScriptedLlm::new(vec![Reply::text("branch")]);
    install_llm(&agent2.inner.registry, llm3).unwrap();
    assert_eq!(agent2.prompt("other way").await.unwrap().turn, 2);
    invariants::check(&store.load(&cid).unwrap().events).unwrap();
}

#[tokio::test]
async fn pending_inbox_survives_restart() {
    let h = harness(vec![Reply::text("a")], vec![]);
    h.agent.inject("context").unwrap();
    h.agent.followup("queued").unwrap();
    let id = h.agent.session_id().to_string();
    let H { _dir, store, registry, agent, .. } = h;
    drop(agent);
    let (log, _) = store.open(&id).unwrap();
    assert_eq!(log.pending_inbox().len(), 2);
    let agent = Agent::new(log, registry, Arc::new(HeadlessApprover::default()), config());
    let turns = agent.run_until_idle().await.unwrap();
    assert_eq!(turns.len(), 1);
    let users: Vec<String> = store
        .load(&id)
        .unwrap()
        .events
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::UserMessage(m) => Some(m.content),
            _ => None,
        })
        .collect();
    assert_eq!(users, strs(&["context", "queued"]));
}

/// The turn's start and the input it claims are one append: when it
/// fails, nothing of the turn is logged and the input stays queued for the
/// next turn, which logs it once.
#[tokio::test]
async fn input_whose_claim_fails_to_log_stays_queued() {
    let h = harness(vec![Reply::text("a")], vec![]);
    h.agent.followup("first").unwrap();
    let before = h.types().len();
    h.agent.log().fail_next_write(0, libc::EROFS);
    assert!(h.agent.run_until_idle().await.is_err());
    assert_eq!(h.types().len(), before, "nothing of the failed turn is logged");
    let turns = h.agent.run_until_idle().await.unwrap();
    assert_eq!(turns.len(), 1);
    assert_eq!(
        h.last_turn_types(),
        strs(&[
            "turn/start",
            "inbox/spliced",
            "user/message",
            "step/start",
            "assistant/chunk",
            "assistant/message",
            "step/end",
            "turn/end"
        ])
    );
    let users = h.find(|k| match k {
        EventKind::UserMessage(m) => Some(m.content.clone()),
        _ => None,
    });
    assert_eq!(users, strs(&["first"]));
    invariants::check(&h.events()).unwrap();
}

fn policy_harness(policies: Vec<FakePolicy>, replies: Vec<Reply>, approver: Arc<dyn Approver>, cfg: AgentConfig) -> H {
    let tool = FakeTool::new("echo", ToolMode::Parallel).schema(serde_json::json!({
        "type": "object", "properties": {"path": {"type": "string"}}, "additionalProperties": false
    }));
    let h = harness_with(ScriptedLlm::with_fallback(replies, Reply::text("done")), vec![tool], approver, cfg);
    for p in policies {
        install_policy(&h.registry, Arc::new(p)).unwrap();
    }
    h
}

#[tokio::test]
async fn policy_deny_wins_and_is_logged() {
    let h = policy_harness(
        vec![
            FakePolicy::new("pol-allow", Ok(Decision::Allow)),
            FakePolicy::new("pol-ask", Ok(Decision::Ask { reason: "hmm".into() })),
            FakePolicy::new("pol-deny", Ok(Decision::Deny { reason: "nope".into() })),
        ],
        vec![Reply::tools(&[("c", "echo", r#"{"path":"x"}"#)])],
        Arc::new(HeadlessApprover::default()),
        config(),
    );
    assert_eq!(h.agent.prompt("go").await.unwrap().reason, StopReason::Completed);
    let r = &h.results()[0];
    assert_eq!(r.error_code, Some(ToolErrorCode::Denied));
    assert!(r.content.contains("pol-deny: nope"), "{}", r.content);
    let d = h.find(|k| match k {
        EventKind::PolicyDecision(d) => Some(d.clone()),
        _ => None,
    });
    assert_eq!(d.len(), 1);
    assert!(matches!(d[0].verdict, Verdict::Deny { .. }));
    assert_eq!(d[0].votes.len(), 3);
    assert!(!h.types().contains(&"approval/asked".to_string()), "deny wins over ask: nobody is asked");
    invariants::check(&h.events()).unwrap();
}

#[tokio::test]
async fn failing_and_hanging_policies_fail_closed() {
    let mut cfg = config();
    cfg.pipeline.policy_timeout = Duration::ZERO;
    let h = policy_harness(
        vec![FakePolicy::new("pol-ok", Ok(Decision::Allow)), FakePolicy::hanging("pol-hang")],
        vec![Reply::tools(&[("c", "echo", "{}")])],
        Arc::new(HeadlessApprover::default()),
        cfg,
    );
    h.agent.prompt("go").await.unwrap();
    let r = &h.results()[0];
    assert_eq!(r.error_code, Some(ToolErrorCode::Denied));
    assert!(r.content.contains("pol-hang: policy failed (timed out"), "{}", r.content);

    let h = policy_harness(
        vec![FakePolicy::new("pol-err", Err("trap".into()))],
        vec![Reply::tools(&[("c", "echo", "{}")])],
        Arc::new(HeadlessApprover::default()),
        config(),
    );
    h.agent.prompt("go").await.unwrap();
    assert!(h.results()[0].content.contains("pol-err: policy failed (trap); failing closed"));
}

#[tokio::test]
async fn ask_goes_to_headless_approver_which_denies() {
    let h = policy_harness(
        vec![FakePolicy::new("pol-ask", Ok(Decision::Ask { reason: "writes files".into() }))],
        vec![Reply::tools(&[("c", "echo", "{}")])],
        Arc::new(HeadlessApprover::default()),
        config(),
    );
    h.agent.prompt("go").await.unwrap();
    let t = h.types();
    let p = pos(&t, "tool/call");
    assert_eq!(
        t[p..p + 5],
        strs(&["tool/call", "policy/decision", "approval/asked", "approval/decided", "tool/result"])[..]
    );
    let decided = h.find(|k| match k {
        EventKind::ApprovalDecided(d) => Some(d.clone()),
        _ => None,
    });
    assert_eq!(decided[0].outcome, ApprovalOutcome::Rejected);
    assert_eq!(decided[0].by, "headless(rule=deny)");
    assert_eq!(h.results()[0].error_code, Some(ToolErrorCode::ApprovalRejected));
    invariants::check(&h.events()).unwrap();
}

struct CountingApprover {
    n: AtomicU32,
}

impl Approver for CountingApprover {
    fn decide(&self, _r: ApprovalRequest, _c: CancellationToken) -> BoxFuture<'_, Approval> {
        self.n.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Approval { outcome: ApprovalOutcome::AllowedForSession, by: "test".into(), note: None } })
    }
}

#[tokio::test]
async fn allowed_for_session_is_remembered_and_rewrites_apply() {
    let approver = Arc::new(CountingApprover { n: AtomicU32::new(0) });
    let h = policy_harness(
        vec![
            FakePolicy::new("pol-ask", Ok(Decision::Ask { reason: "r".into() })),
            FakePolicy::new("pol-rw", Ok(Decision::Rewrite { args: serde_json::json!({"path": "safe"}) })),
        ],
        vec![Reply::tools(&[("c1", "echo", r#"{"path":"x"}"#)]), Reply::tools(&[("c2", "echo", "{}")])],
        approver.clone(),
        config(),
    );
    h.agent.prompt("go").await.unwrap();
    assert_eq!(approver.n.load(Ordering::SeqCst), 1);
    let decided = h.find(|k| match k {
        EventKind::ApprovalDecided(d) => Some(d.by.clone()),
        _ => None,
    });
    assert_eq!(decided, strs(&["test", "session-grant"]));
    let r = h.results();
    assert_eq!(r[0].content, r#"{"path":"safe"}"#, "the tool ran with the rewritten arguments");
    assert_eq!(r[1].content, r#"{"path":"safe"}"#);
    invariants::check(&h.events()).unwrap();
}

#[tokio::test]
async fn rewrite_that_breaks_the_schema_is_refused() {
    let h = policy_harness(
        vec![FakePolicy::new("pol-rw", Ok(Decision::Rewrite { args: serde_json::json!({"path": 1}) }))],
        vec![Reply::tools(&[("c", "echo", "{}")])],
        Arc::new(HeadlessApprover::default()),
        config(),
    );
    h.agent.prompt("go").await.unwrap();
    let r = &h.results()[0];
    assert_eq!(r.error_code, Some(ToolErrorCode::InvalidArguments));
    assert!(r.content.contains("/path: expected string, got number"), "{}", r.content);
}

#[tokio::test]
async fn guards_unknown_tool_bad_json_and_schema() {
    let strict = FakeTool::new("strict", ToolMode::Parallel).schema(serde_json::json!({
        "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]
    }));
    let h = harness(
        vec![
            Reply::tools(&[
                ("a", "nope", "{}"),
                ("b", "strict", "{bad"),
                ("c", "strict", r#"{"path":5}"#),
                ("d", "strict", ""),
                ("e", "strict", r#"{"path":"ok"}"#),
            ]),
            Reply::text("fixed"),
        ],
        vec![strict],
    );
    assert_eq!(h.agent.prompt("go").await.unwrap().reason, StopReason::Completed);
    let r = h.results();
    let codes_: Vec<Option<ToolErrorCode>> = r.iter().map(|r| r.error_code.clone()).collect();
    assert_eq!(
        codes_,
        vec![
            Some(ToolErrorCode::UnknownTool),
            Some(ToolErrorCode::InvalidArguments),
            Some(ToolErrorCode::InvalidArguments),
            Some(ToolErrorCode::InvalidArguments),
            None
        ]
    );
    assert!(r[0].content.contains("unknown tool `nope`; available tools: strict"));
    assert!(r[0].plugin.is_none());
    assert!(r[1].content.contains("not valid JSON"));
    assert!(r[2].content.contains("/path: expected string, got number"), "{}", r[2].content);
    assert!(r[3].content.contains("missing required property `path`"), "{}", r[3].content);
    invariants::check(&h.events()).unwrap();
}

#[tokio::test]
async fn tool_panic_becomes_an_error_result() {
    let h = harness(
        vec![Reply::tools(&[("c", "boom", "{}")]), Reply::text("ok")],
        vec![FakeTool::new("boom", ToolMode::Parallel).behaviour(|_| panic!("tool bug"))],
    );
    assert_eq!(h.agent.prompt("go").await.unwrap().reason, StopReason::Completed);
    // A panic in the task is the host's bug, never labelled as the tool's.
    let r = &h.results()[0];
    assert_eq!(r.error_code, Some(ToolErrorCode::HostPanic));
    assert!(r.content.contains("internal error in the host") && r.content.contains("tool bug"), "{}", r.content);
    assert!(!r.content.contains("tool crashed"), "{}", r.content);
}

#[tokio::test]
async fn a_panic_is_host_panic_whether_the_call_ran_on_the_step_or_its_own_task() {
    // Two calls: the first runs on its own task, the last on the step's.
    let h = harness(
        vec![Reply::tools(&[("a", "boom", "{}"), ("b", "boom", "{}")]), Reply::text("ok")],
        vec![FakeTool::new("boom", ToolMode::Parallel).behaviour(|_| panic!("tool bug"))],
    );
    assert_eq!(h.agent.prompt("go").await.unwrap().reason, StopReason::Completed);
    let r = h.results();
    assert_eq!(r.len(), 2);
    for r in &r {
        assert_eq!(r.error_code, Some(ToolErrorCode::HostPanic));
        assert!(r.content.contains("tool bug"), "{}", r.content);
    }
    invariants::check(&h.events()).unwrap();
}

#[tokio::test]
async fn large_output_is_truncated_and_kept_in_log() {
    let mut cfg = config();
    cfg.pipeline.output.max_model_bytes = 20;
    let big = "0123456789".repeat(10);
    let b2 = big.clone();
    let h = harness_with(
        ScriptedLlm::new(vec![Reply::tools(&[("c", "big", "{}")]), Reply::text("ok")]),
        vec![FakeTool::new("big", ToolMode::Parallel).behaviour(move |_| ToolOutcome::ok(b2.clone()))],
        Arc::new(HeadlessApprover::default()),
        cfg,
    );
    h.agent.prompt("go").await.unwrap();
    let r = &h.results()[0];
    assert!(r.truncated);
    assert_eq!(r.original_bytes, Some(100));
    assert_eq!(r.full_content.as_deref(), Some(big.as_str()));
    assert!(r.content.starts_with("0123456789") && r.content.ends_with("0123456789"));
    let sent = &h.llm.requests()[1].messages[2].content;
    assert_eq!(sent, &r.content, "the model sees the truncated text");
}

#[tokio::test]
async fn retries_in_the_same_step_and_gives_up_on_auth() {
    let h = harness(
        vec![
            Reply::start_error(LlmErrorCode::RateLimit),
            Reply::items(vec![
                ScriptItem::Batch(vec![LlmEvent::Text("par".into())]),
                ScriptItem::Fail(LlmError::new(LlmErrorCode::StreamClosed, "eof")),
            ]),
            Reply::text("ok"),
            Reply::start_error(LlmErrorCode::Auth),
        ],
        vec![],
    );
    let s = h.agent.prompt("go").await.unwrap();
    assert_eq!((s.reason, s.text.as_str(), s.steps), (StopReason::Completed, "ok", 1));
    let retries = h.find(|k| match k {
        EventKind::LlmRetry(r) => Some((r.attempt, r.code)),
        _ => None,
    });
    assert_eq!(retries, vec![(1, LlmErrorCode::RateLimit), (2, LlmErrorCode::StreamClosed)]);
    let visible = h.agent.log().messages();
    assert_eq!(visible.len(), 2);
    assert_eq!(visible[1].content, "ok", "chunks of the failed attempt never become a message");
    assert_eq!(h.types().iter().filter(|t| *t == "turn/start").count(), 1);

    let s = h.agent.prompt("again").await.unwrap();
    assert_eq!(s.reason, StopReason::Error { code: "AUTH".into(), message: "scripted failure".into() });
    assert_eq!(h.last_turn_types().iter().filter(|t| *t == "llm/retry").count(), 0);
    invariants::check(&h.events()).unwrap();
}

#[tokio::test]
async fn request_error_hook_can_give_up() {
    let h = harness(vec![Reply::start_error(LlmErrorCode::Server), Reply::text("never")], vec![]);
    let _l = h.agent.bus().on(HookPoint::AgentRequestError, 0, |_| async {
        Ok(HookOutcome::Replace(serde_json::json!({"retry": false})))
    });
    let s = h.agent.prompt("go").await.unwrap();
    assert!(matches!(s.reason, StopReason::Error { ref code, .. } if code == "SERVER"));
}

#[tokio::test]
async fn no_adapter_is_an_error_stop() {
    let mut cfg = config();
    cfg.llm = Some("missing".into());
    let h = harness_with(ScriptedLlm::new(vec![]), vec![], Arc::new(HeadlessApprover::default()), cfg);
    let s = h.agent.prompt("go").await.unwrap();
    assert!(
        matches!(s.reason, StopReason::Error { ref code, ref message } if code == "NO_ADAPTER" && message.contains("`missing`"))
    );
    invariants::check(&h.events()).unwrap();
}

#[tokio::test]
async fn inbox_inject_steer_followup() {
    let gate = Gate::new();
    let h = harness(
        vec![
            Reply::text("t1"),
            Reply::items(vec![
                ScriptItem::Gate(gate.clone()),
                ScriptItem::Batch(vec![LlmEvent::Text("first".into()), LlmEvent::Finish(FinishReason::Stop)]),
            ]),
            Reply::text("second"),
            Reply::text("a"),
            Reply::text("b"),
        ],
        vec![],
    );
    // inject does not wake.
    h.agent.inject("ctx").unwrap();
    assert!(h.agent.run_until_idle().await.unwrap().is_empty());
    let s = h.agent.prompt("q").await.unwrap();
    assert_eq!(s.steps, 1);
    let users = |h: &H| {
        h.find(|k| match k {
            EventKind::UserMessage(m) => Some(m.content.clone()),
            _ => None,
        })
    };
    assert_eq!(users(&h), strs(&["ctx", "q"]));

    // steer during a turn continues it with another step.
    let agent = h.agent.clone();
    let task = tokio::spawn(async move { agent.prompt("go").await });
    gate.reached().await;
    h.agent.steer("more").unwrap();
    gate.open();
    let s = task.await.unwrap().unwrap();
    assert_eq!((s.steps, s.text.as_str()), (2, "second"));
    let t = h.last_turn_types();
    assert_eq!(t.iter().filter(|x| *x == "turn/start").count(), 1);
    assert_eq!(users(&h)[2..], strs(&["go", "more"])[..]);

    // followups each get their own turn.
    h.agent.followup("x").unwrap();
    h.agent.followup("y").unwrap();
    let turns = h.agent.run_until_idle().await.unwrap();
    assert_eq!(turns.iter().map(|t| t.text.as_str()).collect::<Vec<_>>(), vec!["a", "b"]);
    let before = h.events().len();
    assert!(!h.agent.cancel());
    assert_eq!(h.events().len(), before, "cancelling an idle agent logs nothing");
    invariants::check(&h.events()).unwrap();
}

#[tokio::test]
async fn pre_step_reject_blocks_the_turn() {
    let h = harness(vec![Reply::text("never")], vec![]);
    let _l = h.agent.bus().on(HookPoint::AgentPreStep, 0, |_| async { Ok(HookOutcome::Reject("not now".into())) });
    let s = h.agent.prompt("go").await.unwrap();
    assert_eq!(s.reason, StopReason::Blocked { message: "host: not now".into() });
    assert_eq!(s.steps, 0);
    assert!(!h.types().contains(&"step/start".to_string()));
    assert!(h.llm.requests().is_empty());
    invariants::check(&h.events()).unwrap();
}

#[tokio::test]
async fn turn_stopping_objection_continues_the_turn() {
    let h = harness(vec![Reply::text("a"), Reply::text("b")], vec![]);
    let n = Arc::new(AtomicU32::new(0));
    let n2 = n.clone();
    let _l = h.agent.bus().on(HookPoint::AgentTurnStopping, 0, move |_| {
        let first = n2.fetch_add(1, Ordering::SeqCst) == 0;
        async move { Ok(if first { HookOutcome::Reject("keep going".into()) } else { HookOutcome::Pass }) }
    });
    let s = h.agent.prompt("go").await.unwrap();
    assert_eq!((s.reason, s.steps, s.text.as_str()), (StopReason::Completed, 2, "b"));
    let last_user = h.llm.requests()[1].messages.last().unwrap().content.clone();
    assert_eq!(last_user, "keep going");
}

#[tokio::test]
async fn system_prompt_from_sections_through_waterfall_and_tools_per_step() {
    let registry_slot: Arc<std::sync::Mutex<Option<Arc<Registry>>>> = Arc::default();
    let slot = registry_slot.clone();
    let installer = FakeTool::new("installer", ToolMode::Parallel).behaviour(move |_| {
        if let Some(reg) = slot.lock().unwrap().as_ref() {
            install_tools(reg, vec![Arc::new(FakeTool::new("late", ToolMode::Parallel))]).unwrap();
        }
        ToolOutcome::ok("installed")
    });
    let h = harness(vec![Reply::tools(&[("c", "installer", "{}")]), Reply::text("ok")], vec![installer]);
    *registry_slot.lock().unwrap() = Some(h.registry.clone());
    let section = |id: &str, order: i32, text: &str| PromptSection {
        id: id.into(),
        order,
        text: text.into(),
        plugin: crate::plugin::PluginRef::native("prompts"),
    };
    h.registry
        .install(
            crate::plugin::PluginRef::native("prompts"),
            Registrations {
                prompt_sections: vec![section("b", 2, "Second."), section("a", 1, "First.")],
                ..Registrations::default()
            },
        )
        .unwrap();
    let _l = h.agent.bus().on(HookPoint::SystemPrompt, 0, |v| async move {
        let p = v["prompt"].as_str().unwrap_or_default().to_string();
        Ok(HookOutcome::Replace(serde_json::Value::String(format!("{p}\n\nHooked."))))
    });
    h.agent.prompt("go").await.unwrap();
    let reqs = h.llm.requests();
    assert_eq!(reqs[0].system, "First.\n\nSecond.\n\nHooked.");
    let names = |i: usize| reqs[i].tools.iter().map(|t| t.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(0), strs(&["installer"]));
    assert_eq!(names(1), strs(&["installer", "late"]), "a tool installed mid-turn shows at the next step");
}

#[tokio::test]
async fn system_prompt_is_base_then_sections_then_instructions() {
    let cfg =
        AgentConfig { system_prompt: "Base.\n".into(), instructions: Some("Child instructions.".into()), ..config() };
    let h = harness_with(
        ScriptedLlm::new(vec![Reply::text("a"), Reply::text("b")]),
        vec![],
        Arc::new(HeadlessApprover::default()),
        cfg,
    );
    let section = PromptSection {
        id: "s".into(),
        order: 0,
        text: "Section.".into(),
        plugin: crate::plugin::PluginRef::native("prompts"),
    };
    h.registry
        .install(
            crate::plugin::PluginRef::native("prompts"),
            Registrations { prompt_sections: vec![section], ..Registrations::default() },
        )
        .unwrap();
    // Without listeners.
    h.agent.prompt("go").await.unwrap();
    assert_eq!(h.llm.requests()[0].system, "Base.\n\nSection.\n\nChild instructions.");
    // A listener appending a section (as skills do) and one rewriting the
    // instructions; the instructions stay last.
    let _skills = h.agent.bus().on(HookPoint::SystemPrompt, -1000, |mut v| async move {
        assert_eq!(v["instructions"], "Child instructions.");
        let p = v["prompt"].as_str().unwrap_or_default().to_string();
        v["prompt"] = serde_json::json!(format!("{p}\n\n# Skills"));
        Ok(HookOutcome::Replace(v))
    });
    let _rewrite = h.agent.bus().on(HookPoint::SystemPrompt, 0, |mut v| async move {
        v["instructions"] = serde_json::json!("Rewritten.");
        Ok(HookOutcome::Replace(v))
    });
    h.agent.prompt("again").await.unwrap();
    assert_eq!(h.llm.requests()[1].system, "Base.\n\nSection.\n\n# Skills\n\nRewritten.");
}

#[tokio::test]
async fn session_event_hooks_see_committed_events() {
    let h = harness(vec![Reply::text("ok")], vec![]);
    let seen: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let s2 = seen.clone();
    let _l = h.agent.bus().on(HookPoint::SessionEvent, 0, move |v| {
        s2.lock().unwrap().push(v["type"].as_str().unwrap_or_default().to_string());
        async { Ok(HookOutcome::Pass) }
    });
    h.agent.prompt("go").await.unwrap();
    wait_for(&seen, &["turn/end"]).await;
    let seen = seen.lock().unwrap().clone();
    assert!(seen.contains(&"assistant/message".to_string()));
    assert!(!seen.contains(&"assistant/chunk".to_string()));
}

#[tokio::test]
async fn post_execute_hook_can_replace_or_block() {
    let h = harness(
        vec![Reply::tools(&[("a", "echo", "{}"), ("b", "secret", "{}")]), Reply::text("ok")],
        vec![FakeTool::new("echo", ToolMode::Parallel), FakeTool::new("secret", ToolMode::Parallel)],
    );
    let _l = h.agent.bus().on(HookPoint::ToolsPostExecute, 0, |v| async move {
        Ok(if v["tool"] == "secret" {
            HookOutcome::Reject("contains secrets".into())
        } else {
            let mut v = v;
            v["outcome"]["content"] = serde_json::json!("replaced");
            HookOutcome::Replace(v)
        })
    });
    h.agent.prompt("go").await.unwrap();
    let r = h.results();
    assert_eq!(r[0].content, "replaced");
    assert_eq!(r[1].error_code, Some(ToolErrorCode::Blocked));
}

#[tokio::test]
async fn max_tokens_without_tool_calls_ends_the_turn() {
    let h = harness(
        vec![Reply::items(vec![ScriptItem::Batch(vec![
            LlmEvent::Text("cut".into()),
            LlmEvent::Finish(FinishReason::MaxTokens),
        ])])],
        vec![],
    );
    let s = h.agent.prompt("go").await.unwrap();
    assert_eq!((s.reason, s.text.as_str()), (StopReason::MaxTokens, "cut"));
    invariants::check(&h.events()).unwrap();
}

#[tokio::test]
async fn cancel_while_waiting_for_approval() {
    let (approver, mut questions) = crate::approval::ChannelApprover::new();
    let h = policy_harness(
        vec![FakePolicy::new("pol-ask", Ok(Decision::Ask { reason: "r".into() }))],
        vec![Reply::tools(&[("c1", "echo", "{}"), ("c2", "echo", "{}")])],
        Arc::new(approver),
        config(),
    );
    let agent = h.agent.clone();
    let task = tokio::spawn(async move { agent.prompt("go").await });
    let q = questions.recv().await.unwrap();
    assert_eq!(q.request.call_id, "c1");
    assert!(h.agent.cancel());
    assert_eq!(task.await.unwrap().unwrap().reason, StopReason::Cancelled);
    let decided = h.find(|k| match k {
        EventKind::ApprovalDecided(d) => Some(d.outcome),
        _ => None,
    });
    assert_eq!(decided, vec![ApprovalOutcome::Cancelled]);
    let r = h.results();
    assert_eq!(r.len(), 2);
    assert!(r.iter().all(|r| r.error_code == Some(ToolErrorCode::AbortedBeforeDispatch)));
    invariants::check(&h.events()).unwrap();
}

#[tokio::test]
async fn repeated_tool_call_ids_are_made_unique() {
    let h = harness(
        vec![Reply::tools(&[("call_1", "t", "{}"), ("call_1", "t", "{}"), ("", "t", "{}")]), Reply::text("ok")],
        vec![FakeTool::new("t", ToolMode::Parallel)],
    );
    assert_eq!(h.agent.prompt("go").await.unwrap().reason, StopReason::Completed);
    let ids: Vec<String> = h.results().into_iter().map(|r| r.call_id).collect();
    assert_eq!(ids, strs(&["call_1", "call_1~2", "call~3"]));
    invariants::check(&h.events()).unwrap();
}

#[tokio::test]
async fn plugins_record_todo_lists_through_session_services() {
    let h = harness(vec![Reply::text("ok")], vec![]);
    let ctx = h.agent.inner.services.clone();
    let svc = ctx.for_call("c1", crate::plugin::PluginRef::native("todo"), CancellationToken::new());
    use crate::plugin::SessionServices;
    let items = serde_json::json!({"items": [{"content": "write tests", "status": "in_progress"}]});
    svc.record_event("todo/updated", items).unwrap();
    assert!(matches!(
        svc.record_event("todo/updated", serde_json::json!({"items": [{"content": "x"}]})),
        Err(crate::plugin::ServiceError::Invalid(_))
    ));
    assert!(matches!(
        svc.record_event("session/start", serde_json::json!({})),
        Err(crate::plugin::ServiceError::Invalid(_))
    ));
    let todos = h.find(|k| match k {
        EventKind::TodoUpdated(t) => Some(t.items.clone()),
        _ => None,
    });
    assert_eq!(todos.len(), 1);
    assert_eq!(todos[0][0]["status"], "in_progress");
    assert_eq!(svc.depth(), 0);
}

#[tokio::test]
async fn plugin_events_are_bounded_per_event_call_and_session() {
    use crate::plugin::{ServiceError, SessionServices};
    use crate::services::{MAX_EVENT_BYTES, MAX_EVENT_BYTES_PER_SESSION, MAX_EVENTS_PER_CALL};
    let h = harness(vec![Reply::text("ok")], vec![]);
    let ctx = h.agent.inner.services.clone();
    let list = |bytes: usize| serde_json::json!({"items": [{"content": "t".repeat(bytes), "status": "pending"}]});
    let invalid = |r: Result<(), ServiceError>| match r {
        Err(ServiceError::Invalid(m)) => m,
        other => panic!("expected a refusal, got {other:?}"),
    };
    // One event over the size bound.
    let svc = ctx.for_call("c0", crate::plugin::PluginRef::native("evil"), CancellationToken::new());
    let m = invalid(svc.record_event("todo/updated", list(MAX_EVENT_BYTES)));
    assert!(m.contains(&format!("at most {MAX_EVENT_BYTES} bytes")), "{m}");
    // Events per call.
    for _ in 0..MAX_EVENTS_PER_CALL {
        svc.record_event("todo/updated", list(10)).unwrap();
    }
    let m = invalid(svc.record_event("todo/updated", list(10)));
    assert!(m.contains(&format!("at most {MAX_EVENTS_PER_CALL} events")), "{m}");
    // Bytes per session, across calls.
    let big = MAX_EVENT_BYTES - 1024;
    let mut refused = None;
    for call in 0..(MAX_EVENT_BYTES_PER_SESSION / big / MAX_EVENTS_PER_CALL + 2) {
        let svc =
            ctx.for_call(&format!("c{}", call + 1), crate::plugin::PluginRef::native("evil"), CancellationToken::new());
        for _ in 0..MAX_EVENTS_PER_CALL {
            if let Err(e) = svc.record_event("todo/updated", list(big)) {
                refused = Some(e);
                break;
            }
        }
        if refused.is_some() {
            break;
        }
    }
    let m = invalid(refused.map_or(Ok(()), Err));
    assert!(m.contains("this session's plugin events reached their limit"), "{m}");
    let bytes: usize = h
        .find(|k| match k {
            EventKind::TodoUpdated(t) => Some(t.items.to_string().len()),
            _ => None,
        })
        .iter()
        .sum();
    assert!(bytes <= MAX_EVENT_BYTES_PER_SESSION, "{bytes}");
}

#[tokio::test]
async fn a_child_agent_runs_with_a_restricted_tool_set_and_is_linked() {
    let h = harness(
        // The child's replies (the parent never runs a turn here).
        vec![Reply::tools(&[("k1", "allowed", "{}")]), Reply::text("child done")],
        vec![FakeTool::new("allowed", ToolMode::Parallel), FakeTool::new("hidden", ToolMode::Parallel)],
    );
    let ctx = h.agent.inner.services.clone();
    let svc = ctx.for_call("p1", crate::plugin::PluginRef::native("subagent"), CancellationToken::new());
    use crate::plugin::SessionServices;
    let bad = crate::plugin::AgentTask { prompt: "x".into(), tools: vec!["nope".into()], ..Default::default() };
    assert!(matches!(svc.run_agent(bad).await, Err(crate::plugin::ServiceError::Invalid(_))));
    let task = crate::plugin::AgentTask { prompt: "do it".into(), tools: vec!["allowed".into()], ..Default::default() };
    let out = svc.run_agent(task).await.unwrap();
    assert_eq!((out.text.as_str(), out.stop_reason.as_str(), out.steps), ("child done", "completed", 2));
    let child = h.store.load(&out.session_id).unwrap();
    invariants::check(&child.events).unwrap();
    let EventKind::SessionStart(hdr) = &child.events[0].kind else { panic!("no header") };
    let link = hdr.spawned_by.clone().unwrap();
    assert_eq!((link.session.as_str(), link.call_id.as_str(), link.depth), (h.agent.session_id(), "p1", 1));
    // The child's model saw only the allowed tool.
    let seen = h.llm.requests();
    assert_eq!(seen[0].tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["allowed"]);
}

#[tokio::test]
async fn the_depth_limit_refuses_deeper_children() {
    let cfg = AgentConfig {
        max_depth: 1,
        pipeline: crate::pipeline::PipelineConfig { agent_depth: 1, ..Default::default() },
        ..config()
    };
    let h = harness_with(ScriptedLlm::new(vec![Reply::text("x")]), vec![], Arc::new(HeadlessApprover::default()), cfg);
    let svc = h.agent.inner.services.for_call("p", crate::plugin::PluginRef::native("s"), CancellationToken::new());
    use crate::plugin::SessionServices;
    let r = svc.run_agent(crate::plugin::AgentTask { prompt: "go".into(), ..Default::default() }).await;
    assert!(matches!(r, Err(crate::plugin::ServiceError::Invalid(m)) if m.contains("at most 1 deep")));
}

#[tokio::test]
async fn a_child_agent_is_cancelled_with_its_calling_tool_call() {
    let h = harness(
        vec![Reply::tools(&[("k1", "hang", "{}")]), Reply::text("never")],
        vec![FakeTool::new("hang", ToolMode::Parallel).latency(Latency::Forever)],
    );
    let cancel = CancellationToken::new();
    let svc = h.agent.inner.services.for_call("p1", crate::plugin::PluginRef::native("subagent"), cancel.clone());
    use crate::plugin::SessionServices;
    let task = crate::plugin::AgentTask { prompt: "hang".into(), ..Default::default() };
    let run = tokio::spawn(async move { svc.run_agent(task).await });
    // Let the child reach its hanging tool call, then cancel the parent's call.
    while !h.store.list().unwrap().iter().any(|s| s.id != h.agent.session_id()) {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    cancel.cancel();
    let r = tokio::time::timeout(Duration::from_secs(20), run).await.unwrap().unwrap();
    assert_eq!(r, Err(crate::plugin::ServiceError::Cancelled));
    let child = h.store.list().unwrap().into_iter().find(|s| s.id != h.agent.session_id()).unwrap();
    let events = h.store.load(&child.id).unwrap().events;
    invariants::check(&events).unwrap();
    let ended = events.iter().any(|e| matches!(&e.kind, EventKind::TurnEnd(t) if t.reason == StopReason::Cancelled));
    assert!(ended, "the child's turn ended cancelled: {events:?}");
}

// Finish reasons and errors from the model (issue 13, item 9).

#[tokio::test]
async fn nothing_streamed_with_a_length_or_filter_finish_ends_the_turn_at_once() {
    for (finish, expected) in [
        (FinishReason::MaxTokens, StopReason::MaxTokens),
        (
            FinishReason::ContentFilter,
            StopReason::Error { code: "CONTENT_FILTER".into(), message: "the provider filtered the output".into() },
        ),
    ] {
        let reply = Reply::items(vec![ScriptItem::Batch(vec![
            LlmEvent::Usage(Usage { prompt_tokens: 10, completion_tokens: 0, ..Usage::default() }),
            LlmEvent::Finish(finish),
        ])]);
        let h = harness(vec![reply.clone(), reply.clone(), reply.clone(), reply.clone(), reply.clone(), reply], vec![]);
        let s = h.agent.prompt("go").await.unwrap();
        assert_eq!(s.reason, expected, "{finish:?}");
        assert_eq!(h.llm.requests().len(), 1, "{finish:?}: not retried as EMPTY_RESPONSE");
        assert!(h.find(|k| matches!(k, EventKind::LlmRetry(_)).then_some(())).is_empty());
        invariants::check(&h.events()).unwrap();
    }
}

#[tokio::test]
async fn a_retry_after_beyond_the_bound_stops_at_once_naming_the_time() {
    let mut err = LlmError::new(LlmErrorCode::RateLimit, "HTTP 429: slow down [request id: req-1]");
    err.retry_after_ms = Some(120_000);
    let h = harness(vec![Reply { start_error: Some(err), items: vec![] }, Reply::text("never")], vec![]);
    let s = h.agent.prompt("go").await.unwrap();
    let StopReason::Error { code, message } = s.reason else { panic!("not an error: {:?}", s.reason) };
    assert_eq!(code, "RATE_LIMIT");
    assert!(message.contains("retry after 120 s") && message.contains("60 s"), "{message}");
    assert!(message.contains("[request id: req-1]"), "{message}");
    assert_eq!(h.llm.requests().len(), 1);
}

/// A call past its yield window answers with the cell's output so far and
/// goes on; the model calls another tool meanwhile (which lets the cell
/// finish), then `resume` collects the cell's result; the log holds the
/// cell's states and passes the invariants.
#[tokio::test]
async fn a_call_past_its_yield_window_runs_as_a_cell_until_resume_collects_it() {
    let gate = Gate::new();
    let mut slow = FakeTool::new("slow", ToolMode::Parallel).latency(Latency::Gate(gate.clone()));
    slow.yield_window = Some(Duration::from_millis(20));
    let opener = gate.clone();
    let other = FakeTool::new("other", ToolMode::Parallel).behaviour(move |_| {
        opener.open();
        ToolOutcome::ok("other done")
    });
    let h = harness(
        vec![
            Reply::tools(&[("c1", "slow", r#"{"n": 1}"#)]),
            Reply::tools(&[("c2", "other", "{}")]),
            Reply::tools(&[("c3", "slow", r#"{"resume": "c1", "wait_ms": 60000}"#)]),
            Reply::text("done"),
        ],
        vec![slow, other],
    );
    let summary = h.agent.prompt("go").await.unwrap();
    assert_eq!(summary.reason, StopReason::Completed);
    let events = h.events();
    invariants::check(&events).unwrap();
    let result = |id: &str| {
        events
            .iter()
            .find_map(|e| match &e.kind {
                EventKind::ToolResult(r) if r.call_id == id => Some(r.clone()),
                _ => None,
            })
            .unwrap()
    };
    let first = result("c1");
    assert!(!first.is_error, "{first:?}");
    assert!(first.content.contains("cell c1 is still running"), "{}", first.content);
    assert!(first.content.contains("c1 is working"), "{}", first.content);
    let collected = result("c3");
    assert!(collected.content.contains("cell c1 ended"), "{}", collected.content);
    assert!(collected.content.contains(r#"{"n":1}"#), "{}", collected.content);
    let states: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Unknown { type_name, data } if type_name == crate::cells::CELL_EVENT => {
                data["state"].as_str().map(str::to_string)
            }
            _ => None,
        })
        .collect();
    assert_eq!(states, ["running", "finished"]);
    assert!(h.agent.cells().list().is_empty());
}
