//! An adapter's instance serves its agent turn's next request (issue 18):
//! a stream that ends cleanly leaves its instance in the turn's
//! `AdapterScope`, the next request of that turn runs on it, and it goes
//! with the scope. Nothing else reuses it: a stream cut short, another
//! version, another scope, or a spent budget all get a fresh sandbox.

use std::sync::Arc;

use anyhow::Context;
use serde_json::json;
use wharf_core::plugin::{AdapterScope, LlmAdapter, LlmEvent, LlmRequest, Message, Role};
use wharf_mock_llm::{MockLlm, Script};
use wharf_runtime::engine::EngineOptions;
use wharf_runtime::grants::Grant;
use wharf_runtime::{PluginSpec, PluginVersion, Runtime, RuntimeOptions};
use wharf_tests::plugins;

fn runtime(max_instances: u32) -> Arc<Runtime> {
    let engine = EngineOptions { max_instances, ..EngineOptions::default() };
    Runtime::new(RuntimeOptions { engine, cache_dir: None, ..Default::default() }).expect("creating the runtime")
}

fn mock(replies: usize) -> MockLlm {
    let replies: Vec<_> = (0..replies).map(|i| json!({"kind": "stream", "text": format!("reply {i}")})).collect();
    let script: Script = serde_json::from_value(json!({"replies": replies})).expect("building the mock's script");
    MockLlm::start_background(script).expect("starting the mock LLM")
}

/// `llm-openai` (no key needed) pointed at the mock.
fn load(rt: &Runtime, mock: &MockLlm) -> (Arc<PluginVersion>, Arc<dyn LlmAdapter>) {
    let spec = PluginSpec {
        id: "model".into(),
        path: wharf_tests::plugin(plugins::LLM_OPENAI),
        config: json!({"base_url": format!("{}/v1", mock.url()), "model": "m"}),
        grant: Grant { hosts: vec![format!("127.0.0.1:{}", mock.addr().port())], ..Grant::default() },
        warm: false,
        on_invalid_config: Default::default(),
    };
    let v = rt.load(&spec).expect("loading the component");
    let llm = wharf_runtime::registrations::of_version(&v).llm.unwrap_or_else(|| panic!("not an adapter"));
    (v, llm)
}

fn request(n: usize) -> LlmRequest {
    let messages = (0..n)
        .map(|i| Message {
            role: if i % 2 == 0 { Role::User } else { Role::Assistant },
            content: format!("message {i}"),
            reasoning: None,
            tool_calls: vec![],
            tool_call_id: None,
        })
        .collect();
    LlmRequest {
        system: "You answer.".into(),
        messages,
        tools: std::sync::Arc::from([]),
        max_tokens: None,
        images: vec![],
        history: Default::default(),
    }
}

/// One whole stream in `scope`; its text.
async fn complete(llm: &dyn LlmAdapter, req: &LlmRequest, scope: &Arc<AdapterScope>) -> anyhow::Result<String> {
    let mut stream = llm.start_in(req, scope).await.context("starting the stream")?;
    let mut text = String::new();
    while let Some(batch) = stream.next().await.context("reading the stream")? {
        for ev in batch {
            if let LlmEvent::Text(t) = ev {
                text.push_str(&t);
            }
        }
    }
    Ok(text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turns_requests_share_one_instance_that_goes_with_the_turn() -> anyhow::Result<()> {
    let rt = runtime(1000);
    let mock = mock(4);
    let (v, llm) = load(&rt, &mock);
    let made = v.sandboxes_made();
    let scope = Arc::new(AdapterScope::default());
    assert_eq!(complete(llm.as_ref(), &request(1), &scope).await?, "reply 0");
    assert!(!scope.is_empty(), "a clean end leaves the instance in the turn's scope");
    assert_eq!(rt.engine().held(), 1);
    // The history grows at each step; the same instance serves each.
    assert_eq!(complete(llm.as_ref(), &request(3), &scope).await?, "reply 1");
    assert_eq!(complete(llm.as_ref(), &request(5), &scope).await?, "reply 2");
    assert_eq!(v.sandboxes_made() - made, 1, "three requests of one turn, one sandbox");
    // What the model received is the whole request each time.
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 3);
    for (r, n) in reqs.iter().zip([1usize, 3, 5]) {
        let body = r.body.clone().unwrap_or_default();
        let msgs = body["messages"].as_array().map(Vec::len).unwrap_or(0);
        assert_eq!(msgs, n + 1, "system + {n} messages: {body}");
    }
    drop(scope);
    assert_eq!(rt.engine().held(), 0, "the turn's end drops the instance");
    // A request outside a turn (no scope) is a fresh sandbox, kept nowhere.
    let mut s = llm.start(&request(1)).await.context("starting the stream")?;
    while s.next().await.context("reading the stream")?.is_some() {}
    assert_eq!(v.sandboxes_made() - made, 2);
    assert_eq!(rt.engine().held(), 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_short_another_scope_or_version_gets_a_fresh_sandbox() -> anyhow::Result<()> {
    let rt = runtime(1000);
    let mock = mock(6);
    let (v, llm) = load(&rt, &mock);
    let scope = Arc::new(AdapterScope::default());
    // Dropped before its end (a cancelled turn): not kept.
    let mut s = llm.start_in(&request(1), &scope).await.context("starting the stream")?;
    let _ = s.next().await;
    drop(s);
    assert!(scope.is_empty() && rt.engine().held() == 0, "a stream cut short leaves nothing behind");
    let made = v.sandboxes_made();
    complete(llm.as_ref(), &request(1), &scope).await?;
    assert_eq!(v.sandboxes_made() - made, 1);
    // Another turn's scope never gets this one's instance.
    let other = Arc::new(AdapterScope::default());
    complete(llm.as_ref(), &request(1), &other).await?;
    assert_eq!(v.sandboxes_made() - made, 2);
    assert_eq!(rt.engine().held(), 2);
    // Another version (a reload) does not run on the old one's instance:
    // it is dropped and the new version's takes its place.
    let (v2, llm2) = load(&rt, &mock);
    let made2 = v2.sandboxes_made();
    complete(llm2.as_ref(), &request(1), &scope).await?;
    assert_eq!(v2.sandboxes_made() - made2, 1);
    assert_eq!(v.sandboxes_made() - made, 2);
    assert_eq!(rt.engine().held(), 2, "the old version's instance was dropped, the new one's kept");
    complete(llm2.as_ref(), &request(3), &scope).await?;
    assert_eq!(v2.sandboxes_made() - made2, 1, "the new version's instance serves its next request");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_instances_stay_within_a_quarter_of_the_pool() -> anyhow::Result<()> {
    // 8 instances: at most 2 held idle, so fresh calls always find slots.
    let rt = runtime(8);
    let mock = mock(4);
    let (v, llm) = load(&rt, &mock);
    let scopes: Vec<Arc<AdapterScope>> = (0..3).map(|_| Arc::new(AdapterScope::default())).collect();
    for s in &scopes {
        complete(llm.as_ref(), &request(1), s).await?;
    }
    assert_eq!(rt.engine().held(), 2);
    assert_eq!(scopes.iter().filter(|s| !s.is_empty()).count(), 2, "the third turn's instance was not kept");
    let made = v.sandboxes_made();
    complete(llm.as_ref(), &request(3), &scopes[0]).await?;
    assert_eq!(v.sandboxes_made(), made, "a kept instance still serves its turn");
    Ok(())
}

/// `llm-deepseek` pointed at the mock; its key is a variable every test
/// process has (cargo sets it), granted to it.
fn load_deepseek(rt: &Runtime, mock: &MockLlm) -> (Arc<PluginVersion>, Arc<dyn LlmAdapter>) {
    let spec = PluginSpec {
        id: "model".into(),
        path: wharf_tests::plugin(plugins::LLM_DEEPSEEK),
        config: json!({"base_url": format!("{}/v1", mock.url()), "model": "m", "api_key_env": "CARGO_PKG_NAME",
            "thinking": true}),
        grant: Grant {
            hosts: vec![format!("127.0.0.1:{}", mock.addr().port())],
            env: vec!["CARGO_PKG_NAME".into()],
            ..Grant::default()
        },
        warm: false,
        on_invalid_config: Default::default(),
    };
    let v = rt.load(&spec).expect("loading the component");
    let llm = wharf_runtime::registrations::of_version(&v).llm.unwrap_or_else(|| panic!("not an adapter"));
    (v, llm)
}

/// A tool-calling step: the model's call (with reasoning) and the tool's
/// output, text that needs escaping.
fn tool_step(req: &mut LlmRequest, i: usize) {
    let id = format!("call_{i}");
    req.messages.push(Message {
        role: Role::Assistant,
        content: String::new(),
        reasoning: Some(format!("Step {i}: read \"f{i}\".")),
        tool_calls: vec![wharf_core::plugin::ToolCall {
            id: id.clone(),
            name: "read".into(),
            arguments: format!("{{\"path\": \"f{i}.txt\"}}"),
        }],
        tool_call_id: None,
    });
    let output: String = (0..40).map(|l| format!("file {i} line {l}:\t\"quoted\" \\ text é\n")).collect();
    req.messages.push(Message {
        role: Role::Tool,
        content: output,
        reasoning: None,
        tool_calls: vec![],
        tool_call_id: Some(id),
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_instance_sends_the_bytes_of_the_full_history_also_across_compaction_and_reload() -> anyhow::Result<()> {
    // The adapter instance a turn holds keeps the encoded history and
    // encodes only what is new (`BodyCache`), and `llm-deepseek` exports
    // `llm-history`, so the host lowers into it only the messages it does
    // not have yet: the bytes on the wire must be exactly what a fresh
    // instance sends for the same (whole) request.
    let rt = runtime(1000);
    let mock = mock(30);
    let (v, llm) = load_deepseek(&rt, &mock);
    let scope = Arc::new(AdapterScope::default());
    let mut req = request(1);
    let mut sent = Vec::new();
    // Lowered messages per request, and what each should be.
    let mut lowered = Vec::new();
    let mut want = Vec::new();
    let mut step = |v: &PluginVersion, before: u64, n: usize| {
        lowered.push(v.llm_messages_lowered() - before);
        want.push(n as u64);
    };
    for i in 0..4 {
        let before = v.llm_messages_lowered();
        complete(llm.as_ref(), &req, &scope).await?;
        // The first request of the turn: the whole history; then the step's two.
        step(&v, before, if i == 0 { req.messages.len() } else { 2 });
        sent.push(req.clone());
        tool_step(&mut req, i);
    }
    let made = v.sandboxes_made();
    // A compaction replaces the start of the history with a summary: no
    // prefix is shared, the whole history goes.
    req.messages
        .splice(0..3, [Message { content: "Summary of steps 0 and 1.".into(), ..request(1).messages[0].clone() }]);
    let before = v.llm_messages_lowered();
    complete(llm.as_ref(), &req, &scope).await?;
    step(&v, before, req.messages.len());
    sent.push(req.clone());
    tool_step(&mut req, 9);
    let before = v.llm_messages_lowered();
    complete(llm.as_ref(), &req, &scope).await?;
    step(&v, before, 2);
    sent.push(req.clone());
    // An old tool output rewritten (pruned): what follows it goes again.
    req.messages[4].content = "(output elided)".into();
    tool_step(&mut req, 8);
    let before = v.llm_messages_lowered();
    complete(llm.as_ref(), &req, &scope).await?;
    step(&v, before, req.messages.len() - 4);
    sent.push(req.clone());
    assert_eq!(v.sandboxes_made(), made, "one held instance served the whole turn");
    // A reload mid-turn: the new version's instance starts from the whole history.
    let (v2, llm2) = load_deepseek(&rt, &mock);
    let made2 = v2.sandboxes_made();
    tool_step(&mut req, 10);
    complete(llm2.as_ref(), &req, &scope).await?;
    step(&v2, 0, req.messages.len());
    sent.push(req.clone());
    tool_step(&mut req, 11);
    let before = v2.llm_messages_lowered();
    complete(llm2.as_ref(), &req, &scope).await?;
    step(&v2, before, 2);
    sent.push(req.clone());
    assert_eq!(v2.sandboxes_made() - made2, 1, "the reloaded version ran on one instance of its own");
    assert_eq!(v.sandboxes_made(), made, "the old version's instance served nothing after the reload");
    // The held instance dropped (e.g. over the engine's budget): a fresh
    // one, and the whole history again; then only the new messages.
    drop(scope.take());
    tool_step(&mut req, 12);
    let before = v2.llm_messages_lowered();
    complete(llm2.as_ref(), &req, &scope).await?;
    step(&v2, before, req.messages.len());
    sent.push(req.clone());
    tool_step(&mut req, 13);
    let before = v2.llm_messages_lowered();
    complete(llm2.as_ref(), &req, &scope).await?;
    step(&v2, before, 2);
    sent.push(req.clone());
    assert_eq!(v2.sandboxes_made() - made2, 2, "the dropped instance was replaced once");
    assert_eq!(lowered, want, "messages lowered per request: the held instance gets only the new ones");
    // The same requests, each from a fresh instance (no turn scope).
    let held = same_bytes_as_fresh_instances(llm2.as_ref(), &mock, &sent).await?;
    let last = &held[held.len() - 1].body;
    let last = last.as_ref().context("the last body is JSON")?;
    assert_eq!(
        last["messages"].as_array().map(Vec::len),
        Some(1 + sent[sent.len() - 1].messages.len()),
        "system + the whole history"
    );
    // The reasoning of a tool-calling turn goes back to DeepSeek (after the summary).
    assert_eq!(last["messages"][2]["reasoning_content"], json!("Step 1: read \"f1\"."));
    Ok(())
}

/// Sends each of `sent` (already sent once, in order, by a held instance)
/// again from a fresh instance, and checks that the mock received the same
/// bytes both times. Returns the held instance's requests as recorded.
async fn same_bytes_as_fresh_instances(
    llm: &dyn LlmAdapter,
    mock: &MockLlm,
    sent: &[LlmRequest],
) -> anyhow::Result<Vec<wharf_mock_llm::RecordedRequest>> {
    for r in sent {
        let mut s = llm.start(r).await.context("starting the stream")?;
        while s.next().await.context("reading the stream")?.is_some() {}
    }
    let mut reqs = mock.requests();
    assert_eq!(reqs.len(), 2 * sent.len());
    let fresh = reqs.split_off(sent.len());
    for (i, (h, f)) in reqs.iter().zip(&fresh).enumerate() {
        assert!(h.body_len > 0 && h.raw_body.len() == h.body_len, "request {i} was recorded whole");
        assert!(h.raw_body == f.raw_body, "request {i}: the held instance sent other bytes than a fresh one");
    }
    Ok(reqs)
}

/// Events of a session log, as the agent loop appends them.
mod log {
    use wharf_core::events::{AssistantMessage, CompactionSummary, Event, EventKind, ToolResultEvent, UserMessage};
    use wharf_core::plugin::ToolCall;

    fn ev(seq: u64, kind: EventKind) -> Event {
        Event { seq, time: "t".into(), ignorable: false, kind }
    }

    pub fn user(seq: u64, text: &str) -> Event {
        ev(seq, EventKind::UserMessage(UserMessage { content: text.into(), inbox_id: None, images: vec![] }))
    }

    /// A tool-calling step: the model's call (with reasoning), then its output.
    pub fn tool_step(seq: u64, i: usize) -> [Event; 2] {
        let id = format!("call_{i}");
        let call = ToolCall { id: id.clone(), name: "read".into(), arguments: format!("{{\"path\": \"f{i}.txt\"}}") };
        let output: String = (0..40).map(|l| format!("file {i} line {l}:\t\"quoted\" \\ text é\n")).collect();
        [
            ev(
                seq,
                EventKind::AssistantMessage(AssistantMessage {
                    turn: 1,
                    step: i as u32,
                    content: String::new(),
                    reasoning: Some(format!("Step {i}: read \"f{i}\".")),
                    tool_calls: vec![call],
                    usage: None,
                    finish: None,
                    interrupted: false,
                }),
            ),
            ev(
                seq + 1,
                EventKind::ToolResult(ToolResultEvent {
                    turn: 1,
                    step: i as u32,
                    call_id: id,
                    name: "read".into(),
                    content: output,
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
            ),
        ]
    }

    pub fn compacted(seq: u64, from_seq: u64, to_seq: u64) -> Event {
        ev(seq, EventKind::CompactionSummary(CompactionSummary { from_seq, to_seq, summary: "Steps so far.".into() }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_marked_by_the_log_lower_only_new_messages_and_send_the_full_bytes() -> anyhow::Result<()> {
    // The agent loop marks each request with the copy of the log's history
    // it is (`HistoryMark`); the held instance then takes the messages it
    // already has on the marks' word, without comparing them. A compaction
    // mid-turn rewrites the history: the marks no longer vouch for it and
    // the whole history goes again. Every body must be a fresh instance's.
    use wharf_core::projection::{HistoryMark, Projection};
    let rt = runtime(1000);
    let mock = mock(30);
    let (v, llm) = load_deepseek(&rt, &mock);
    let scope = Arc::new(AdapterScope::default());
    let mut p = Projection::new();
    p.apply(&log::user(1, "Read the files."));
    let (mut messages, mut mark) = (Vec::new(), HistoryMark::default());
    let mut seq = 2;
    let mut sent = Vec::new();
    let (mut lowered, mut want) = (Vec::new(), Vec::new());
    for i in 0..6 {
        if i == 4 {
            // Compaction of the first two steps (seqs 2..=5).
            p.apply(&log::compacted(seq, 2, 5));
            seq += 1;
        }
        p.messages_into(&mut messages, &mut mark);
        let req = LlmRequest { messages: messages.clone(), history: mark, ..request(0) };
        let before = v.llm_messages_lowered();
        complete(llm.as_ref(), &req, &scope).await?;
        lowered.push(v.llm_messages_lowered() - before);
        // The first request: everything; after the compaction, everything
        // from the summary on (it replaced the messages after the prompt:
        // the prompt, compared, is still the same); else the step's two.
        want.push(match i {
            0 => req.messages.len() as u64,
            4 => req.messages.len() as u64 - 1,
            _ => 2,
        });
        sent.push(req);
        for e in log::tool_step(seq, i) {
            p.apply(&e);
        }
        seq += 2;
    }
    assert_eq!(lowered, want, "messages lowered per request");
    let held = same_bytes_as_fresh_instances(llm.as_ref(), &mock, &sent).await?;
    let last = held[held.len() - 1].body.as_ref().context("the last body is JSON")?;
    assert!(last.to_string().contains("Steps so far."), "the summary is in the requests after the compaction");
    Ok(())
}
