//! Property tests: random interleavings of inbox operations, cancellations,
//! model replies and tool completions always leave a log that satisfies
//! [`crate::invariants::check`], whose projection matches a from-scratch
//! derivation, and which survives a restart and a crash cut at any byte.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::approval::HeadlessApprover;
use crate::invariants;
use crate::plugin::{Tool, ToolMode};
use crate::store::{NewSession, SessionStore};
use crate::testkit::*;

#[derive(Debug, Clone)]
enum CallSpec {
    Par(u32),
    Par2(u32),
    Excl(u32),
    Unknown,
    BadJson,
}

#[derive(Debug, Clone)]
enum ReplySpec {
    Text(Vec<u32>),
    Tools(u32, Vec<CallSpec>),
    Fail(bool),
}

#[derive(Debug, Clone)]
enum Op {
    Followup,
    Steer,
    Inject,
    Cancel,
}

#[derive(Debug, Clone)]
struct Scenario {
    replies: Vec<ReplySpec>,
    ops: Vec<(u32, Op)>,
    max_steps: u32,
    pool: usize,
    cut: f64,
}

fn call_spec() -> impl Strategy<Value = CallSpec> {
    prop_oneof![
        4 => (0u32..8).prop_map(CallSpec::Par),
        2 => (0u32..8).prop_map(CallSpec::Par2),
        2 => (0u32..4).prop_map(CallSpec::Excl),
        1 => Just(CallSpec::Unknown),
        1 => Just(CallSpec::BadJson),
    ]
}

fn reply_spec() -> impl Strategy<Value = ReplySpec> {
    prop_oneof![
        3 => prop::collection::vec(0u32..4, 1..4).prop_map(ReplySpec::Text),
        4 => (0u32..4, prop::collection::vec(call_spec(), 1..6)).prop_map(|(y, c)| ReplySpec::Tools(y, c)),
        1 => any::<bool>().prop_map(ReplySpec::Fail),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![2 => Just(Op::Followup), 1 => Just(Op::Steer), 1 => Just(Op::Inject), 3 => Just(Op::Cancel)]
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        prop::collection::vec(reply_spec(), 1..10),
        prop::collection::vec((0u32..16, op()), 0..10),
        1u32..5,
        1usize..4,
        0.0f64..1.0,
    )
        .prop_map(|(replies, ops, max_steps, pool, cut)| Scenario { replies, ops, max_steps, pool, cut })
}

fn build_reply(i: usize, spec: &ReplySpec) -> Reply {
    match spec {
        ReplySpec::Text(parts) => {
            let mut items = Vec::new();
            for (k, y) in parts.iter().enumerate() {
                items.push(ScriptItem::Yield(*y));
                items.push(ScriptItem::Batch(vec![LlmEvent::Text(format!("r{i}p{k} "))]));
            }
            items.push(ScriptItem::Batch(vec![
                LlmEvent::Usage(Usage { prompt_tokens: 3, completion_tokens: 1, ..Usage::default() }),
                LlmEvent::Finish(FinishReason::Stop),
            ]));
            Reply::items(items)
        }
        ReplySpec::Tools(y, calls) => {
            let mut batch: Vec<LlmEvent> = calls
                .iter()
                .enumerate()
                .map(|(k, c)| {
                    let (name, args) = match c {
                        CallSpec::Par(n) => ("par", format!(r#"{{"yields":{n}}}"#)),
                        CallSpec::Par2(n) => ("par2", format!(r#"{{"yields":{n}}}"#)),
                        CallSpec::Excl(n) => ("ex", format!(r#"{{"yields":{n}}}"#)),
                        CallSpec::Unknown => ("nope", "{}".to_string()),
                        CallSpec::BadJson => ("par", "{oops".to_string()),
                    };
                    LlmEvent::ToolCall(ToolCall { id: format!("c{i}_{k}"), name: name.into(), arguments: args })
                })
                .collect();
            batch.push(LlmEvent::Finish(FinishReason::ToolCalls));
            Reply::items(vec![ScriptItem::Yield(*y), ScriptItem::Batch(batch)])
        }
        ReplySpec::Fail(retryable) => {
            Reply::start_error(if *retryable { LlmErrorCode::RateLimit } else { LlmErrorCode::Auth })
        }
    }
}

fn run(s: Scenario) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async move {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(dir.path());
        let log = store.create(NewSession::default()).unwrap();
        let registry = Arc::new(Registry::new());
        let replies: Vec<Reply> = s.replies.iter().enumerate().map(|(i, r)| build_reply(i, r)).collect();
        install_llm(&registry, ScriptedLlm::with_fallback(replies, Reply::text("fallback"))).unwrap();
        let tools: Vec<Arc<dyn Tool>> = vec![
            Arc::new(FakeTool::new("par", ToolMode::Parallel).latency(Latency::FromArgs)),
            Arc::new(FakeTool::new("par2", ToolMode::Parallel).latency(Latency::FromArgs)),
            Arc::new(FakeTool::new("ex", ToolMode::Exclusive).latency(Latency::FromArgs)),
        ];
        install_tools(&registry, tools).unwrap();
        let mut config = AgentConfig { max_steps: s.max_steps, ..AgentConfig::default() };
        config.retry = RetryPolicy { initial_delay: Duration::ZERO, max_delay: Duration::ZERO, ..RetryPolicy::none() };
        config.retry.max_retries = 2;
        config.pipeline.tool_pool = s.pool;
        let agent = Agent::new(log, registry.clone(), Arc::new(HeadlessApprover::default()), config.clone());

        agent.followup("start").unwrap();
        let runner = tokio::spawn({
            let agent = agent.clone();
            async move { agent.run_until_idle().await }
        });
        let ops = tokio::spawn({
            let agent = agent.clone();
            let ops = s.ops.clone();
            async move {
                for (delay, op) in ops {
                    yields(delay).await;
                    match op {
                        Op::Followup => drop(agent.followup("f").unwrap()),
                        Op::Steer => drop(agent.steer("s").unwrap()),
                        Op::Inject => drop(agent.inject("i").unwrap()),
                        Op::Cancel => drop(agent.cancel()),
                    }
                }
            }
        });
        ops.await.unwrap();
        runner.await.unwrap().unwrap();
        agent.run_until_idle().await.unwrap();

        let id = agent.session_id().to_string();
        let loaded = store.load(&id).unwrap();
        invariants::check(&loaded.events).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let live = agent.log().messages();
        prop_assert_eq!(&live, &crate::projection::derive_messages(&loaded.events));
        let path = std::path::PathBuf::from(agent.log().describe());
        drop(agent);

        // Restart: same model-visible history, nothing to repair.
        let (log, report) = store.open(&id).unwrap();
        prop_assert!(report.repairs.is_empty());
        prop_assert_eq!(&log.messages(), &live);
        drop(log);

        // Crash cut at an arbitrary byte: repair by appending yields a valid log.
        let bytes = std::fs::read(&path).unwrap();
        let header_len = bytes.iter().position(|b| *b == b'\n').unwrap() + 1;
        let cut = header_len + ((bytes.len() - header_len) as f64 * s.cut) as usize;
        let crash_id = "crashed";
        let crash_path = dir.path().join(format!("{crash_id}.jsonl"));
        let mut f = std::fs::File::create(&crash_path).unwrap();
        f.write_all(&bytes[..cut]).unwrap();
        drop(f);
        let (log, _) = store.open(crash_id).unwrap();
        drop(log);
        let repaired = store.load(crash_id).unwrap();
        invariants::check(&repaired.events).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(std::fs::read(&crash_path).unwrap().starts_with(&bytes[..cut]));
        Ok(())
    })
}

proptest! {
    // 96 cases by default; PROPTEST_CASES overrides (e.g. for a soak run).
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(96),
        ..ProptestConfig::default()
    })]

    #[test]
    fn log_invariants_hold_under_random_interleavings(s in scenario()) {
        run(s)?;
    }
}
