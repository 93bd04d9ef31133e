//! Concurrent sessions in one host: `WHARF_BENCH_SESSIONS` (default 1,000)
//! agent sessions started at once in this process (wharf-core +
//! wharf-runtime), each with its own durable session log, driven by the real
//! `llm-openai` adapter component over `wasi:http` against `wharf-mock-llm`
//! (a separate process on loopback, so its request records do not count in
//! this process's memory). Every model reply asks for one `read` of a small
//! file through the real `fs` component; each session runs
//! `WHARF_BENCH_SESSION_STEPS` (default 3) such steps and ends on its step
//! budget (`max_steps`).
//!
//! Reports sessions/s, model requests/s, tool calls/s and log events/s over
//! the wall time, peak RSS in total and per session (peak minus the RSS
//! before the sessions started), and errors: a session that failed, did not
//! end on its step budget, got a tool result without the file's text, or a
//! request the mock flagged. Writes `target/bench/sessions.{md,json}`.
//!
//! Run with `cargo xtask bench` (needs `target/plugins/{fs,llm-openai}.wasm`
//! and `target/debug/wharf-mock-llm`).

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use serde_json::{Value, json};
use wharf_core::approval::HeadlessApprover;
use wharf_core::events::StopReason;
use wharf_core::plugin::Role;
use wharf_core::registry::Registry;
use wharf_core::store::{NewSession, Store};
use wharf_core::{Agent, AgentConfig};
use wharf_runtime::engine::EngineOptions;
use wharf_runtime::grants::{Access, DirGrant, Grant};
use wharf_runtime::host::PluginHost;
use wharf_runtime::{PluginSpec, Runtime, RuntimeOptions};

const FILE_TEXT: &str = "hello from the benchmark\n";

/// A line of `/proc/self/status` in KiB (`VmRSS`, `VmHWM`).
fn status_kib(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with(key)).and_then(|l| l.split_whitespace().nth(1)?.parse().ok()))
        .unwrap_or(0)
}

/// The mock as a child process; killed on drop.
struct Mock {
    child: std::process::Child,
    url: String,
}

impl Mock {
    fn start(script: &Value) -> anyhow::Result<Self> {
        let bin = wharf_tests::target_dir().join("debug/wharf-mock-llm");
        let mut child = Command::new(&bin)
            .arg("-")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("cannot start {} (cargo build -p wharf-mock-llm)", bin.display()))?;
        let mut stdin = child.stdin.take().context("mock: no stdin")?;
        stdin.write_all(script.to_string().as_bytes())?;
        drop(stdin);
        let mut url = String::new();
        BufReader::new(child.stdout.take().context("mock: no stdout")?).read_line(&mut url)?;
        let url = url.trim().to_string();
        anyhow::ensure!(url.starts_with("http://127.0.0.1:"), "mock printed {url:?}");
        Ok(Self { child, url })
    }

    /// `GET PATH` on the mock: the JSON body.
    fn get(&self, path: &str) -> anyhow::Result<Value> {
        let addr = self.url.trim_start_matches("http://");
        let mut s = std::net::TcpStream::connect(addr)?;
        write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")?;
        let mut resp = String::new();
        s.read_to_string(&mut resp)?;
        let body = resp.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
        // The server may answer with chunked encoding: take the JSON part.
        let start = body.find(['[', '{']).context("mock: no JSON body")?;
        let end = body.rfind([']', '}']).context("mock: no JSON body")?;
        Ok(serde_json::from_str(&body[start..=end])?)
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one session did: (model requests, tool calls answered with the file, events, error).
async fn session(
    store: Store,
    registry: Arc<Registry>,
    cfg: AgentConfig,
    ws: String,
    steps: u32,
) -> (u64, u64, u64, Option<String>) {
    let log = match store.create(NewSession { workspace: Some(ws), ..NewSession::default() }) {
        Ok(l) => l,
        Err(e) => return (0, 0, 0, Some(format!("create: {e}"))),
    };
    let agent = Agent::new(log.clone(), registry, Arc::new(HeadlessApprover::default()), cfg);
    let result = agent.prompt("read small.txt a few times").await;
    let msgs = log.messages();
    let requests = msgs.iter().filter(|m| m.role == Role::Assistant).count() as u64;
    let good_tools =
        msgs.iter().filter(|m| m.role == Role::Tool && m.content.contains(FILE_TEXT.trim())).count() as u64;
    let _ = log.flush_blocking();
    let events = log.last_seq();
    let error = match result {
        Err(e) => Some(format!("agent: {e}")),
        Ok(s) if s.reason != StopReason::MaxSteps => Some(format!("ended with {:?}", s.reason)),
        Ok(_) if good_tools != u64::from(steps) => Some(format!("{good_tools} good tool results of {steps}")),
        Ok(_) => None,
    };
    (requests, good_tools, events, error)
}

fn main() -> anyhow::Result<()> {
    let n: usize = std::env::var("WHARF_BENCH_SESSIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let steps: u32 = std::env::var("WHARF_BENCH_SESSION_STEPS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    // Each session holds at most one instance at a time (the adapter's
    // stream or one tool call); room for all of them in the pool.
    let max_instances = u32::try_from(n).unwrap_or(u32::MAX).saturating_add(64).max(1000);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;

    let script = json!({
        "checks": {"model": "bench-model", "reasoning": "forbidden", "tool_answers": true, "tool_schemas": true,
                   "include_usage": true},
        "default": {"kind": "stream", "text": "Reading it.", "chunk_chars": 0,
                    "tool_calls": [{"id": "call_read", "name": "read", "arguments": "{\"path\":\"small.txt\"}"}]},
    });
    let mock = Mock::start(&script)?;
    let port = mock.url.rsplit(':').next().unwrap_or("");

    let tmp = tempfile::tempdir()?;
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws)?;
    std::fs::write(ws.join("small.txt"), FILE_TEXT)?;
    let cache = wharf_tests::target_dir().join("test-cache");
    let engine = EngineOptions { max_instances, ..EngineOptions::default() };
    let runtime = Runtime::new(RuntimeOptions { engine, cache_dir: Some(cache) })?;
    let registry = Arc::new(Registry::new());
    let host = PluginHost::new(runtime, registry.clone());
    let specs = vec![
        PluginSpec {
            id: "fs".into(),
            path: wharf_tests::plugin("fs"),
            config: json!({}),
            grant: Grant { dirs: vec![DirGrant::new(&ws, Access::Ro)?], ..Grant::default() },
            warm: false,
        },
        PluginSpec {
            id: "openai".into(),
            path: wharf_tests::plugin("llm-openai"),
            config: json!({"base_url": format!("{}/v1", mock.url), "model": "bench-model"}),
            grant: Grant { hosts: vec![format!("127.0.0.1:{port}")], ..Grant::default() },
            warm: false,
        },
    ];
    rt.block_on(host.load_all(specs)).map_err(|e| anyhow::anyhow!(e.join("; ")))?;
    let store = Store::new(tmp.path().join("sessions"));
    let mut cfg = AgentConfig { max_steps: steps, llm: Some("openai".into()), ..AgentConfig::default() };
    cfg.pipeline.workspace = Some(ws.display().to_string());

    // Warm-up session: compiles nothing new (cached), touches code paths.
    let warm = rt.block_on(session(store.clone(), registry.clone(), cfg.clone(), ws.display().to_string(), steps));
    anyhow::ensure!(warm.3.is_none(), "warm-up session failed: {:?}", warm.3);
    let base_rss = status_kib("VmRSS:");
    let base_hwm = status_kib("VmHWM:");

    let t0 = Instant::now();
    let results = rt.block_on(async {
        let tasks: Vec<_> = (0..n)
            .map(|_| {
                tokio::spawn(session(store.clone(), registry.clone(), cfg.clone(), ws.display().to_string(), steps))
            })
            .collect();
        let mut out = Vec::with_capacity(n);
        for t in tasks {
            out.push(t.await.unwrap_or_else(|e| (0, 0, 0, Some(format!("task: {e}")))));
        }
        out
    });
    let wall = t0.elapsed().as_secs_f64();
    let peak = status_kib("VmHWM:");

    let requests: u64 = results.iter().map(|r| r.0).sum();
    let tool_calls: u64 = results.iter().map(|r| r.1).sum();
    let events: u64 = results.iter().map(|r| r.2).sum();
    let errors: Vec<&String> = results.iter().filter_map(|r| r.3.as_ref()).collect();
    let violations = mock.get("/_mock/violations")?;
    let violation_count = violations.as_array().map(Vec::len).unwrap_or(usize::MAX);
    let error_count = errors.len() + violation_count;
    for e in errors.iter().take(5) {
        eprintln!("session error: {e}");
    }
    if violation_count > 0 {
        eprintln!("mock violations (first): {}", violations.get(0).cloned().unwrap_or(Value::Null));
    }
    // Peak over the run (the warm-up before it is far smaller).
    let per_session_kib = peak.saturating_sub(base_rss) as f64 / n as f64;
    let mib = |k: u64| k as f64 / 1024.0;

    let md = format!(
        "| measure | value |\n| --- | ---: |\n\
         | sessions, all started at once in one host | {n} ({steps} model requests + {steps} fs reads each) |\n\
         | wall time | {wall:.2} s |\n\
         | sessions / s | {:.0} |\n\
         | model requests / s (llm-openai component → mock on loopback) | {:.0} |\n\
         | tool calls / s | {:.0} |\n\
         | session-log events / s (durable) | {:.0} |\n\
         | peak RSS of the host process | {:.1} MiB (before the sessions: {:.1} MiB) |\n\
         | peak RSS per session (peak − before) / sessions | {:.0} KiB |\n\
         | errors (failed sessions + mock violations) | {error_count} |\n",
        n as f64 / wall,
        requests as f64 / wall,
        tool_calls as f64 / wall,
        events as f64 / wall,
        mib(peak),
        mib(base_rss),
        per_session_kib,
    );
    println!("{md}");
    let out = wharf_tests::target_dir().join("bench");
    std::fs::create_dir_all(&out)?;
    std::fs::write(out.join("sessions.md"), &md)?;
    let report = json!({
        "sessions": n,
        "steps_per_session": steps,
        "wall_s": wall,
        "sessions_per_s": n as f64 / wall,
        "model_requests": requests,
        "model_requests_per_s": requests as f64 / wall,
        "tool_calls": tool_calls,
        "tool_calls_per_s": tool_calls as f64 / wall,
        "events": events,
        "events_per_s": events as f64 / wall,
        "rss_kib": {"peak": peak, "before_sessions": base_rss, "hwm_before_sessions": base_hwm,
                    "per_session": per_session_kib},
        "errors": {"total": error_count, "sessions": errors.len(), "mock_violations": violation_count},
        "pool_max_instances": max_instances,
    });
    std::fs::write(out.join("sessions.json"), serde_json::to_string_pretty(&report)?)?;
    anyhow::ensure!(error_count == 0, "{error_count} errors in the concurrent-sessions run");
    Ok(())
}
