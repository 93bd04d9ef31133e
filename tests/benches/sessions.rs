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
//! **Density** (issue 18), in a fresh process (this binary re-executed
//! with `__density`, so the first part's freed memory does not hide
//! growth): `WHARF_BENCH_DENSITY_IDLE` (default 10,000) sessions loaded in
//! one host — log open, an `Agent` each, one finished turn (one `fs` read,
//! then an answer) — RSS per idle session against the target, with the
//! same figure for the logs alone (created, no agent, no turn) as the
//! baseline; then `WHARF_BENCH_DENSITY_ACTIVE` (default 1,000) active
//! sessions at once against an in-process scripted model with a model
//! latency of 0.5–1.5 × `WHARF_BENCH_DENSITY_LATENCY_MS` (default 1000) per
//! response, 5 steps of one `fs` read each: the step overhead (end of one
//! response → the next request of the same session), p50 / p99, against the
//! same run with one active session.
//!
//! Run with `cargo xtask bench` (needs `target/plugins/{fs,llm-openai}.wasm`
//! and `target/debug/wharf-mock-llm`).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};
use wharf_core::approval::HeadlessApprover;
use wharf_core::events::StopReason;
use wharf_core::plugin::{
    BoxFuture, FinishReason, LlmAdapter, LlmError, LlmEvent, LlmRequest, LlmStream, ModelInfo, PluginRef, Role,
    ToolCall,
};
use wharf_core::registry::Registrations;
use wharf_core::registry::Registry;
use wharf_core::store::{NewSession, SessionStore};
use wharf_core::{Agent, AgentConfig};
use wharf_runtime::engine::EngineOptions;
use wharf_runtime::grants::{Access, DirGrant, Grant};
use wharf_runtime::plugins::PluginHost;
use wharf_runtime::{PluginSpec, Runtime, RuntimeOptions};
use wharf_tests::plugins;

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
    store: SessionStore,
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

/// Per-session model state of [`ScriptedModel`]: when each session's last
/// response ended, and the gaps measured.
#[derive(Default)]
struct ModelState {
    last_end: HashMap<String, Instant>,
    gaps_ms: Vec<f64>,
    seq: u64,
}

/// An in-process scripted model: `steps` replies asking for one `read`,
/// then an answer; each reply after a latency of 0.5–1.5 × `latency`
/// (deterministic jitter). A session is told apart by its first user
/// message; the gap from its last response's end to its next request is
/// the step overhead.
struct ScriptedModel {
    plugin: PluginRef,
    steps: usize,
    latency: Duration,
    state: Arc<Mutex<ModelState>>,
}

struct ScriptedStream {
    events: Option<Vec<LlmEvent>>,
    delay: Duration,
    key: String,
    state: Arc<Mutex<ModelState>>,
}

impl LlmStream for ScriptedStream {
    fn next(&mut self) -> BoxFuture<'_, Result<Option<Vec<LlmEvent>>, LlmError>> {
        Box::pin(async move {
            match self.events.take() {
                Some(ev) => {
                    if !self.delay.is_zero() {
                        tokio::time::sleep(self.delay).await;
                    }
                    Ok(Some(ev))
                }
                None => {
                    let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                    st.last_end.insert(std::mem::take(&mut self.key), Instant::now());
                    Ok(None)
                }
            }
        })
    }
}

impl LlmAdapter for ScriptedModel {
    fn plugin(&self) -> &PluginRef {
        &self.plugin
    }

    fn model(&self) -> ModelInfo {
        ModelInfo { model: "scripted".into(), context_window: 1_000_000 }
    }

    fn start<'a>(&'a self, request: &'a LlmRequest) -> BoxFuture<'a, Result<Box<dyn LlmStream>, LlmError>> {
        let now = Instant::now();
        let key = request.messages.iter().find(|m| m.role == Role::User).map(|m| m.content.clone()).unwrap_or_default();
        let done = request.messages.iter().filter(|m| m.role == Role::Assistant).count();
        let seq = {
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(end) = st.last_end.remove(&key) {
                st.gaps_ms.push((now - end).as_secs_f64() * 1e3);
            }
            st.seq += 1;
            st.seq
        };
        // splitmix64 of the request number: a jitter in [0.5, 1.5).
        let mut z = seq.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        let jitter = 0.5 + (z ^ (z >> 31)) as f64 / u64::MAX as f64;
        let delay = self.latency.mul_f64(jitter);
        let events = if done < self.steps {
            vec![
                LlmEvent::ToolCall(ToolCall {
                    id: format!("c{done}"),
                    name: "read".into(),
                    arguments: json!({"path": "small.txt"}).to_string(),
                }),
                LlmEvent::Finish(FinishReason::ToolCalls),
            ]
        } else {
            vec![LlmEvent::Text("done".into()), LlmEvent::Finish(FinishReason::Stop)]
        };
        let state = self.state.clone();
        Box::pin(async move {
            Ok(Box::new(ScriptedStream { events: Some(events), delay, key, state }) as Box<dyn LlmStream>)
        })
    }
}

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The q-quantile (nearest rank) of `v`; 0 for an empty set.
fn quantile(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    if s.is_empty() {
        return 0.0;
    }
    s[((s.len() as f64 * q).ceil() as usize).clamp(1, s.len()) - 1]
}

/// A host with `fs` and a [`ScriptedModel`]; its registry, config and the
/// model's state.
async fn density_host(
    ws: &std::path::Path,
    steps: usize,
    latency: Duration,
) -> anyhow::Result<(Arc<Registry>, AgentConfig, Arc<Mutex<ModelState>>, Arc<PluginHost>)> {
    let cache = wharf_tests::target_dir().join("test-cache");
    let engine = EngineOptions { max_instances: 2000, ..EngineOptions::default() };
    let runtime = Runtime::new(RuntimeOptions { engine, cache_dir: Some(cache), ..Default::default() })?;
    let registry = Arc::new(Registry::new());
    let host = PluginHost::new(runtime, registry.clone());
    let spec = PluginSpec {
        id: "fs".into(),
        path: wharf_tests::plugin(plugins::FS),
        config: json!({}),
        grant: Grant { dirs: vec![DirGrant::new(ws, Access::Ro)?], ..Grant::default() },
        warm: false,
        on_invalid_config: Default::default(),
    };
    host.load_all(vec![spec]).await.map_err(anyhow::Error::from)?;
    let state = Arc::new(Mutex::new(ModelState::default()));
    let model = Arc::new(ScriptedModel { plugin: PluginRef::native("scripted"), steps, latency, state: state.clone() });
    registry.install(model.plugin.clone(), Registrations { llm: Some(model), ..Registrations::default() })?;
    let mut cfg = AgentConfig { max_steps: (steps + 3) as u32, llm: Some("scripted".into()), ..AgentConfig::default() };
    cfg.pipeline.workspace = Some(ws.display().to_string());
    Ok((registry, cfg, state, host))
}

/// One turn of a new session; the agent (holding its log) and an error.
async fn density_turn(
    log: wharf_core::store::SessionLog,
    registry: Arc<Registry>,
    cfg: AgentConfig,
    i: usize,
) -> (Agent, Option<String>) {
    let agent = Agent::new(log.clone(), registry, Arc::new(HeadlessApprover::default()), cfg);
    let err = match agent.prompt(format!("session {i}: read small.txt")).await {
        Ok(s) if s.reason == StopReason::Completed => None,
        Ok(s) => Some(format!("session {i} ended with {:?}", s.reason)),
        Err(e) => Some(format!("session {i}: {e}")),
    };
    let err = err.or_else(|| log.flush_blocking().err().map(|e| format!("flush: {e}")));
    (agent, err)
}

/// `__density`: the density figures as one JSON line on stdout.
fn density_main() -> anyhow::Result<()> {
    let requested_idle = env_usize("WHARF_BENCH_DENSITY_IDLE", 10_000);
    let active = env_usize("WHARF_BENCH_DENSITY_ACTIVE", 1_000);
    let latency = Duration::from_millis(env_usize("WHARF_BENCH_DENSITY_LATENCY_MS", 1000) as u64);
    let active_steps = 5;
    // An open session log holds file descriptors (log + lock): raise the
    // soft limit as far as the process may.
    // SAFETY: plain getrlimit/setrlimit on a zeroed struct we own.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
            let want = libc::rlimit { rlim_cur: 1 << 20, rlim_max: 1 << 20 };
            let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &want);
        }
    }
    let fds = || std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let tmp = tempfile::tempdir()?;
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws)?;
    std::fs::write(ws.join("small.txt"), FILE_TEXT)?;

    // Idle: N sessions loaded, one finished turn each.
    let (registry, cfg, _, _host) = rt.block_on(density_host(&ws, 1, Duration::ZERO))?;
    let store = SessionStore::new(tmp.path().join("idle"));
    // Warm-up: code paths, the pool's first slots, the allocator's arenas.
    let warm = store.create(NewSession { workspace: Some(ws.display().to_string()), ..NewSession::default() })?;
    let (warm_agent, e) = rt.block_on(density_turn(warm, registry.clone(), cfg.clone(), usize::MAX));
    anyhow::ensure!(e.is_none(), "warm-up session: {e:?}");
    // File descriptors one open log holds, and how many logs the limit
    // allows (the figure is reported with the cap when it binds).
    let fd0 = fds();
    let probe = store.create(NewSession { workspace: Some(ws.display().to_string()), ..NewSession::default() })?;
    let fds_one = fds().saturating_sub(fd0).max(1);
    drop(probe);
    // SAFETY: getrlimit into a zeroed struct we own.
    let limit = unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 { lim.rlim_cur as usize } else { 1024 }
    };
    let idle = requested_idle.min(limit.saturating_sub(fd0 + 512) / fds_one);
    if idle < requested_idle {
        eprintln!(
            "density: {requested_idle} idle sessions need {} file descriptors ({fds_one} each); the limit is {limit}: measuring {idle}",
            requested_idle * fds_one
        );
    }
    let rss0 = status_kib("VmRSS:");
    let mut logs = Vec::with_capacity(idle);
    for _ in 0..idle {
        logs.push(store.create(NewSession { workspace: Some(ws.display().to_string()), ..NewSession::default() })?);
    }
    let rss_logs = status_kib("VmRSS:");
    let fds_per_log = fds() as f64 / idle.max(1) as f64;
    let t0 = Instant::now();
    let mut agents = Vec::with_capacity(idle);
    let mut errors: Vec<String> = Vec::new();
    for (c, chunk) in logs.chunks(200).enumerate() {
        let done = rt.block_on(async {
            let tasks: Vec<_> = chunk
                .iter()
                .enumerate()
                .map(|(j, log)| tokio::spawn(density_turn(log.clone(), registry.clone(), cfg.clone(), c * 200 + j)))
                .collect();
            let mut out = Vec::new();
            for t in tasks {
                out.push(t.await);
            }
            out
        });
        for r in done {
            match r {
                Ok((agent, err)) => {
                    agents.push(agent);
                    errors.extend(err);
                }
                Err(e) => errors.push(format!("task: {e}")),
            }
        }
    }
    let idle_turns_s = t0.elapsed().as_secs_f64();
    drop(logs);
    let rss_idle = status_kib("VmRSS:");
    let per_log = rss_logs.saturating_sub(rss0) as f64 / idle.max(1) as f64;
    let per_idle = rss_idle.saturating_sub(rss0) as f64 / idle.max(1) as f64;
    drop(agents);
    drop(warm_agent);

    // Active: one session alone (baseline), then `active` at once.
    let mut active_run = |n: usize| -> anyhow::Result<(Vec<f64>, f64)> {
        let (registry, cfg, state, _host) = rt.block_on(density_host(&ws, active_steps, latency))?;
        let store = SessionStore::new(tmp.path().join(format!("active-{n}")));
        let t0 = Instant::now();
        let results = rt.block_on(async {
            let tasks: Vec<_> = (0..n)
                .map(|i| {
                    let log =
                        store.create(NewSession { workspace: Some(ws.display().to_string()), ..NewSession::default() });
                    let (registry, cfg) = (registry.clone(), cfg.clone());
                    tokio::spawn(async move {
                        match log {
                            Ok(log) => density_turn(log, registry, cfg, i).await.1,
                            Err(e) => Some(format!("create: {e}")),
                        }
                    })
                })
                .collect();
            let mut out = Vec::new();
            for t in tasks {
                out.push(t.await.unwrap_or_else(|e| Some(format!("task: {e}"))));
            }
            out
        });
        let wall = t0.elapsed().as_secs_f64();
        errors.extend(results.into_iter().flatten());
        let gaps = std::mem::take(&mut state.lock().unwrap_or_else(|e| e.into_inner()).gaps_ms);
        anyhow::ensure!(
            gaps.len() == n * active_steps,
            "{} step gaps measured, expected {}",
            gaps.len(),
            n * active_steps
        );
        Ok((gaps, wall))
    };
    let (one, _) = active_run(1)?;
    let (many, active_wall) = active_run(active)?;
    let out = json!({
        "idle_sessions": idle,
        "idle_sessions_requested": requested_idle,
        "fd_limit": limit,
        "rss_kib": {"before": rss0, "logs_only": rss_logs, "idle_sessions": rss_idle},
        "per_session_kib": {"log_only": per_log, "idle_session": per_idle},
        "idle_turns_s": idle_turns_s,
        "open_fds_per_idle_session": fds_per_log,
        "active_sessions": active,
        "active_steps": active_steps,
        "model_latency_ms": latency.as_millis() as u64,
        "active_wall_s": active_wall,
        "step_overhead_ms": {
            "one": {"p50": quantile(&one, 0.5), "p99": quantile(&one, 0.99)},
            "many": {"p50": quantile(&many, 0.5), "p99": quantile(&many, 0.99), "max": quantile(&many, 1.0)},
        },
        "errors": errors.iter().take(5).collect::<Vec<_>>(),
        "error_count": errors.len(),
    });
    println!("{out}");
    Ok(())
}

/// Runs [`density_main`] in a fresh process; its JSON.
fn density() -> anyhow::Result<Value> {
    let out = Command::new(std::env::current_exe()?)
        .arg("__density")
        .stderr(Stdio::inherit())
        .output()
        .context("cannot re-run this benchmark for the density part")?;
    anyhow::ensure!(out.status.success(), "density run failed");
    let line = String::from_utf8_lossy(&out.stdout);
    let last = line.lines().rev().find(|l| l.starts_with('{')).context("density: no JSON line")?;
    Ok(serde_json::from_str(last)?)
}

fn density_md(d: &Value) -> String {
    let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    let idle = f(&d["per_session_kib"]["idle_session"]);
    let log = f(&d["per_session_kib"]["log_only"]);
    let (o50, o99) = (f(&d["step_overhead_ms"]["one"]["p50"]), f(&d["step_overhead_ms"]["one"]["p99"]));
    let (m50, m99) = (f(&d["step_overhead_ms"]["many"]["p50"]), f(&d["step_overhead_ms"]["many"]["p99"]));
    let met = |ok: bool| if ok { "**met**" } else { "**not met**" };
    format!(
        "\nDensity (a fresh process; in-process scripted model, real `fs` component, durable logs):\n\n\
         | measure | value | baseline (same run) | ratio | target |\n| --- | ---: | ---: | ---: | --- |\n\
         | RSS per idle session ({} sessions loaded in one host, one finished turn each) | {idle:.0} KiB | log alone (created, no agent, no turn): {log:.0} KiB | {:.1}× | ≤ 200 KiB: {} |\n\
         | step overhead with {} active sessions (model latency 0.5–1.5 × {} ms, {} steps each): p50 / p99 | {m50:.2} ms / {m99:.2} ms | one active session: {o50:.2} ms / {o99:.2} ms | p99 {:.1}× | p99 ≤ 5 ms: {} |\n\
         | open file descriptors per idle session | {:.1} | | | |\n\
         | errors | {} | | | |\n",
        d["idle_sessions"],
        idle / log.max(0.001),
        met(idle <= 200.0),
        d["active_sessions"],
        d["model_latency_ms"],
        d["active_steps"],
        m99 / o99.max(0.001),
        met(m99 <= 5.0),
        f(&d["open_fds_per_idle_session"]),
        d["error_count"],
    )
}

pub fn main() -> anyhow::Result<()> {
    if std::env::args().nth(1).as_deref() == Some("__density") {
        return density_main();
    }
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
    let runtime = Runtime::new(RuntimeOptions { engine, cache_dir: Some(cache), ..Default::default() })?;
    let registry = Arc::new(Registry::new());
    let host = PluginHost::new(runtime, registry.clone());
    let specs = vec![
        PluginSpec {
            id: "fs".into(),
            path: wharf_tests::plugin(plugins::FS),
            config: json!({}),
            grant: Grant { dirs: vec![DirGrant::new(&ws, Access::Ro)?], ..Grant::default() },
            warm: false,
            on_invalid_config: Default::default(),
        },
        PluginSpec {
            id: "openai".into(),
            path: wharf_tests::plugin(plugins::LLM_OPENAI),
            config: json!({"base_url": format!("{}/v1", mock.url), "model": "bench-model"}),
            grant: Grant { hosts: vec![format!("127.0.0.1:{port}")], ..Grant::default() },
            warm: false,
            on_invalid_config: Default::default(),
        },
    ];
    rt.block_on(host.load_all(specs)).map_err(anyhow::Error::from)?;
    let store = SessionStore::new(tmp.path().join("sessions"));
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
    // Density, in a fresh process.
    let density = density()?;
    let md = md + &density_md(&density);
    println!("{md}");
    let out = wharf_tests::target_dir().join("bench");
    std::fs::create_dir_all(&out)?;
    std::fs::write(out.join("sessions.md"), &md)?;
    let density_errors = density["error_count"].as_u64().unwrap_or(u64::MAX);
    let report = json!({
        "density": density,
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
    anyhow::ensure!(density_errors == 0, "{density_errors} errors in the density run");
    Ok(())
}
