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
    LlmRequest { system: "You answer.".into(), messages, tools: vec![], max_tokens: None }
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
