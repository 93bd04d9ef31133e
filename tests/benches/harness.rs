//! Harness benchmarks, reported as figures and ratios measured in one run:
//!
//! - **step overhead**: time from the end of one model response to the next
//!   model request, with one small file read per step through the real `fs`
//!   component (fresh sandbox per call), durability on, against a
//!   zero-latency in-process model;
//! - **session log**: append rate (durable store) and load + derive time for
//!   a 100k-event session;
//! - **startup**: `wharf run --profile demo` from spawn to its first model
//!   request (`step/start` on the jsonl stream), cold compile cache vs warm,
//!   and peak RSS.
//!
//! Run with `cargo xtask bench` (writes `target/bench/harness.{md,json}`).

use std::io::{BufRead, BufReader};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use wharf_core::approval::HeadlessApprover;
use wharf_core::events::{EventKind, UserMessage};
use wharf_core::plugin::{
    BoxFuture, FinishReason, LlmAdapter, LlmError, LlmEvent, LlmRequest, LlmStream, ModelInfo, PluginRef, ToolCall,
};
use wharf_core::registry::{Registrations, Registry};
use wharf_core::store::{NewSession, Store};
use wharf_core::{Agent, AgentConfig};
use wharf_runtime::grants::{Access, DirGrant, Grant};
use wharf_runtime::host::PluginHost;
use wharf_runtime::{PluginSpec, Runtime, RuntimeOptions};

/// A zero-latency model: asks for one `read` per step for `steps` steps,
/// then stops; records when each request starts and each response ends.
struct InstantModel {
    plugin: PluginRef,
    steps: usize,
    marks: Arc<Mutex<Vec<(Instant, Instant)>>>,
}

struct InstantStream {
    events: Option<Vec<LlmEvent>>,
    started: Instant,
    marks: Arc<Mutex<Vec<(Instant, Instant)>>>,
}

impl LlmStream for InstantStream {
    fn next(&mut self) -> BoxFuture<'_, Result<Option<Vec<LlmEvent>>, LlmError>> {
        Box::pin(async move {
            match self.events.take() {
                Some(ev) => Ok(Some(ev)),
                None => {
                    self.marks.lock().unwrap_or_else(|e| e.into_inner()).push((self.started, Instant::now()));
                    Ok(None)
                }
            }
        })
    }
}

impl LlmAdapter for InstantModel {
    fn plugin(&self) -> &PluginRef {
        &self.plugin
    }

    fn model(&self) -> ModelInfo {
        ModelInfo { model: "instant".into(), context_window: 1_000_000 }
    }

    fn start(&self, request: LlmRequest) -> BoxFuture<'_, Result<Box<dyn LlmStream>, LlmError>> {
        let started = Instant::now();
        let done = request.messages.iter().filter(|m| m.role == wharf_core::plugin::Role::Assistant).count();
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
        let marks = self.marks.clone();
        Box::pin(
            async move { Ok(Box::new(InstantStream { events: Some(events), started, marks }) as Box<dyn LlmStream>) },
        )
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

fn p95(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() { 0.0 } else { v[((v.len() as f64 - 1.0) * 0.95) as usize] }
}

async fn step_overhead(steps: usize) -> anyhow::Result<(f64, f64)> {
    let tmp = tempfile::tempdir()?;
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws)?;
    std::fs::write(ws.join("small.txt"), "hello\nworld\n")?;
    let cache = wharf_tests::target_dir().join("test-cache");
    let runtime = Runtime::new(RuntimeOptions { cache_dir: Some(cache), ..Default::default() })?;
    let registry = Arc::new(Registry::new());
    let host = PluginHost::new(runtime, registry.clone());
    let spec = PluginSpec {
        id: "fs".into(),
        path: wharf_tests::plugin("fs"),
        config: json!({}),
        grant: Grant { dirs: vec![DirGrant::new(&ws, Access::Rw)?], ..Grant::default() },
        warm: false,
    };
    host.load_all(vec![spec]).await.map_err(|e| anyhow::anyhow!(e.join("; ")))?;
    let marks = Arc::new(Mutex::new(Vec::new()));
    let model = Arc::new(InstantModel { plugin: PluginRef::native("instant"), steps, marks: marks.clone() });
    registry.install(model.plugin.clone(), Registrations { llm: Some(model), ..Registrations::default() })?;
    let store = Store::new(tmp.path().join("sessions"));
    let log = store.create(NewSession { workspace: Some(ws.display().to_string()), ..NewSession::default() })?;
    let mut cfg = AgentConfig { max_steps: (steps + 5) as u32, ..AgentConfig::default() };
    cfg.pipeline.workspace = Some(ws.display().to_string());
    let agent = Agent::new(log, registry, Arc::new(HeadlessApprover::default()), cfg);
    let summary = agent.prompt("read the file repeatedly").await?;
    anyhow::ensure!(summary.steps as usize == steps + 1, "ran {} steps", summary.steps);
    let marks = marks.lock().unwrap_or_else(|e| e.into_inner()).clone();
    // Overhead of step k: end of response k → start of request k+1.
    let gaps: Vec<f64> = marks.windows(2).map(|w| (w[1].0 - w[0].1).as_secs_f64() * 1e3).collect();
    Ok((median(gaps.clone()), p95(gaps)))
}

fn log_rates(n: usize) -> anyhow::Result<(f64, f64, f64)> {
    let tmp = tempfile::tempdir()?;
    let store = Store::new(tmp.path());
    let log = store.create(NewSession::default())?;
    let id = log.id().to_string();
    let t0 = Instant::now();
    for i in 0..n {
        log.append(EventKind::UserMessage(UserMessage {
            content: format!("message number {i} with a little text in it"),
            inbox_id: None,
        }))?;
    }
    log.flush_blocking()?;
    let append = t0.elapsed().as_secs_f64();
    drop(log);
    let t1 = Instant::now();
    let loaded = store.load(&id)?;
    let load = t1.elapsed().as_secs_f64();
    let t2 = Instant::now();
    let msgs = wharf_core::derive_messages(&loaded.events);
    let derive = t2.elapsed().as_secs_f64();
    anyhow::ensure!(msgs.len() == n, "derived {} messages", msgs.len());
    Ok((n as f64 / append, load * 1e3, derive * 1e3))
}

/// Spawns `wharf run --profile demo` and times spawn → first `step/start`.
fn startup(cache: &std::path::Path) -> anyhow::Result<(f64, u64)> {
    let tmp = tempfile::tempdir()?;
    std::fs::write(tmp.path().join("README.md"), "# x\n")?;
    let bin = wharf_tests::wharf_bin();
    let t0 = Instant::now();
    let mut child = std::process::Command::new(bin)
        .current_dir(tmp.path())
        .env("HOME", tmp.path())
        .env("WHARF_CACHE_DIR", cache)
        .args(["run", "summarize", "--profile", "demo", "--output", "jsonl", "--no-watch"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let stdout = child.stdout.take().ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let mut first = None;
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        if first.is_none() && line.contains("\"type\":\"step/start\"") {
            first = Some(t0.elapsed());
        }
    }
    // wait4 gives this child's own peak RSS (RUSAGE_CHILDREN would include
    // every earlier child, such as cargo).
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill in.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child pid, writing into values we own.
    let rc = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut ru) };
    anyhow::ensure!(rc > 0 && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "wharf run failed: {status}");
    let ms = first.unwrap_or(Duration::ZERO).as_secs_f64() * 1e3;
    Ok((ms, ru.ru_maxrss as u64 / 1024))
}

/// The same component with a custom section appended: same behaviour, a
/// new digest (a new version).
fn variant(base: &[u8], generation: u32) -> Vec<u8> {
    let name = b"wharf-bench-generation";
    let mut body = vec![name.len() as u8];
    body.extend_from_slice(name);
    body.extend_from_slice(&generation.to_le_bytes());
    let mut out = base.to_vec();
    out.push(0);
    out.push(body.len() as u8);
    out.extend_from_slice(&body);
    out
}

/// Hot-reload latency: file written (atomic rename) → the new version is
/// installed in the registry, through the real watcher (50 ms debounce).
/// `cached`: alternate between two versions compiled beforehand (cache hit);
/// otherwise every swap is a new version that must be compiled.
async fn reload_latency(component: &std::path::Path, swaps: u32, cached: bool) -> anyhow::Result<(f64, f64)> {
    let tmp = tempfile::tempdir()?;
    let cache = tmp.path().join("cache");
    let runtime = Runtime::new(RuntimeOptions { cache_dir: Some(cache), ..Default::default() })?;
    let registry = Arc::new(Registry::new());
    let host = PluginHost::new(runtime.clone(), registry.clone());
    let base = std::fs::read(component)?;
    let path = tmp.path().join("plugin.wasm");
    std::fs::write(&path, variant(&base, 0))?;
    let spec =
        PluginSpec { id: "p".into(), path: path.clone(), config: json!({}), grant: Grant::default(), warm: false };
    host.load_all(vec![spec.clone()]).await.map_err(|e| anyhow::anyhow!(e.join("; ")))?;
    if cached {
        // Compile the other version once, so every swap below is a cache hit.
        let other = tmp.path().join("other.wasm");
        std::fs::write(&other, variant(&base, 1))?;
        let mut s = spec.clone();
        s.path = other;
        runtime.load(&s)?;
    }
    let _watch = host.watch(vec![], None)?;
    let mut times = Vec::new();
    for i in 1..=swaps {
        let bytes = if cached { variant(&base, i % 2) } else { variant(&base, i) };
        let digest = wharf_runtime::cache::digest(&bytes);
        let tmpf = tmp.path().join("next.tmp");
        std::fs::write(&tmpf, &bytes)?;
        let t0 = Instant::now();
        std::fs::rename(&tmpf, &path)?;
        loop {
            if registry.version_of("p").is_some_and(|p| p.digest == digest) {
                break;
            }
            anyhow::ensure!(t0.elapsed() < Duration::from_secs(120), "reload {i} never happened");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        times.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    Ok((median(times.clone()), p95(times)))
}

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let steps = 200;
    let (step_med, step_p95) = rt.block_on(step_overhead(steps))?;
    let (append_rate, load_ms, derive_ms) = log_rates(100_000)?;
    let small = wharf_tests::plugin("policy-fixed");
    let large = std::env::var_os("WHARF_BENCH_LARGE_COMPONENT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| wharf_tests::plugin("fs"));
    let small_kb = std::fs::metadata(&small)?.len() / 1024;
    let large_kb = std::fs::metadata(&large)?.len() / 1024;
    let (rs_med, rs_p95) = rt.block_on(reload_latency(&small, 20, false))?;
    let (rl_med, rl_p95) = rt.block_on(reload_latency(&large, 20, true))?;
    let cold_cache = tempfile::tempdir()?;
    let (cold_ms, _) = startup(cold_cache.path())?;
    let mut warm = Vec::new();
    let mut rss = 0;
    for _ in 0..5 {
        let (ms, r) = startup(cold_cache.path())?;
        warm.push(ms);
        rss = rss.max(r);
    }
    let warm_ms = median(warm);
    let md = format!(
        "| measure | value | reference on this machine | ratio |\n| --- | ---: | ---: | ---: |\n\
         | harness overhead per step (median, {steps} steps, 1 fs read each, durable log) | {step_med:.3} ms (p95 {step_p95:.3}) | DeepSeek Harness ~28 ms | {:.0}× less |\n\
         | launch → first model request, warm compile cache | {warm_ms:.1} ms | DeepSeek Harness ~1300 ms | {:.0}× less |\n\
         | launch → first model request, cold compile cache | {cold_ms:.1} ms | warm: {warm_ms:.1} ms | {:.1}× |\n\
         | peak RSS of `wharf run` (demo profile) | {rss} MiB | DeepSeek Harness 179 MB | |\n\
         | hot reload, small component ({small_kb} KiB), new version compiled: median / p95 | {rs_med:.0} ms / {rs_p95:.0} ms | target < 150 ms median | |\n\
         | hot reload, {large_kb} KiB component, cached version: median / p95 | {rl_med:.0} ms / {rl_p95:.0} ms | | |\n\
         | session log append rate (durable) | {append_rate:.0} events/s | | |\n\
         | load 100k-event session / derive messages | {load_ms:.0} ms / {derive_ms:.1} ms | | |\n",
        28.0 / step_med,
        1300.0 / warm_ms,
        cold_ms / warm_ms,
    );
    println!("{md}");
    let out = wharf_tests::target_dir().join("bench");
    std::fs::create_dir_all(&out)?;
    std::fs::write(out.join("harness.md"), &md)?;
    let report = json!({
        "step_overhead_ms": {"median": step_med, "p95": step_p95, "steps": steps},
        "startup_ms": {"warm_median": warm_ms, "cold": cold_ms},
        "peak_rss_mib": rss,
        "hot_reload_ms": {"small_compiled": {"median": rs_med, "p95": rs_p95, "kib": small_kb}, "large_cached": {"median": rl_med, "p95": rl_p95, "kib": large_kb}},
        "log": {"append_per_s": append_rate, "load_100k_ms": load_ms, "derive_100k_ms": derive_ms},
    });
    std::fs::write(out.join("harness.json"), serde_json::to_string_pretty(&report)?)?;
    Ok(())
}
