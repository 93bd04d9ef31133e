//! `cargo xtask bench` section `wire`: what a peer on the wire sees.
//!
//! 1. **Per-step overhead on the wire.** `wharf run` with the real
//!    `llm-deepseek` component against the loopback mock LLM, a 9-step
//!    session with one `fs` read per step. The mock stamps when each
//!    request's head arrives and when each response stream ended; the gap
//!    between the two is what the harness adds per step (read the stream's
//!    end, run the tool in its sandbox, append to the log, build and send the
//!    next request). Baseline, measured in the same run against the same
//!    mock: a minimal native client doing the same loop (read the SSE stream
//!    to its end, read the file, serialise the whole history, send the next
//!    request on a keep-alive connection), and the same client opening a new
//!    TCP connection per request (what a fresh `wasi:http` context without a
//!    pool costs on top). The same session also runs with the default
//!    profile (all its tool specs in every request, the permission policy,
//!    project context and the skills catalog at every step) in a workspace
//!    holding a ~2,000-file source tree: what a user's step costs.
//! 2. **Cold first run** of the default profile (its components compiled
//!    from nothing, empty cache) until the first model request arrives,
//!    against the same with a warm cache and the bare process start
//!    (`wharf --version`).
//! 3. **Edit loop**: a Python (componentize-py) and a JavaScript
//!    (componentize-js) tool: change one line, rebuild (timed separately),
//!    then time until the new version serves a call — with an empty cache
//!    (cold) and with the cache holding the previous build (the on-disk
//!    incremental compilation cache). Baseline: loading the same bytes
//!    again (the artifact cache hit).
//!
//! Writes `target/bench/wire.md` and `wire.json`. `WHARF_BENCH_QUICK=1`
//! shrinks the counts.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail, ensure};
use serde_json::{Value, json};
use wharf_mock_llm::{MockLlm, RecordedRequest, Script};
use wharf_runtime::engine::{CompileTier, EngineOptions};
use wharf_runtime::grants::Grant;
use wharf_runtime::{CallContext, PluginSpec, Runtime, RuntimeOptions};
use wharf_tests::plugins;

/// Steps per session (one `fs` read each) and the final answer.
const STEPS: usize = 9;

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(|a, b| a.total_cmp(b));
    v
}

/// The q-quantile (nearest rank) of `v`; 0 for an empty set.
fn quantile(v: &[f64], q: f64) -> f64 {
    let s = sorted(v.to_vec());
    if s.is_empty() {
        return 0.0;
    }
    let i = ((s.len() as f64 * q).ceil() as usize).clamp(1, s.len()) - 1;
    s[i]
}

fn median(v: &[f64]) -> f64 {
    quantile(v, 0.5)
}

fn unix_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}

/// Whether section `name` runs: `WHARF_BENCH_WIRE_SECTIONS` (comma list of
/// `steps`, `cold`, `tiers`, `edit`) or all.
fn section(name: &str) -> bool {
    std::env::var("WHARF_BENCH_WIRE_SECTIONS").map(|v| v.split(',').any(|s| s.trim() == name)).unwrap_or(true)
}

fn quick() -> bool {
    std::env::var_os("WHARF_BENCH_QUICK").is_some()
}

/// The `wharf` binary `cargo xtask bench` built (else build it).
fn wharf_binary() -> PathBuf {
    let built = wharf_tests::target_dir().join("debug/wharf");
    if built.exists() { built } else { wharf_tests::wharf_bin() }
}

/// The scripted session: `STEPS` replies with one `read` each, then text.
fn step_script() -> anyhow::Result<Script> {
    let mut replies = Vec::new();
    for i in 0..STEPS {
        replies.push(json!({
            "kind": "stream",
            "reasoning": format!("Step {i}: read the next file."),
            "text": "",
            "tool_calls": [{"id": format!("call_{i}"), "name": "read",
                "arguments": format!("{{\"path\": \"file_{i}.txt\"}}")}],
        }));
    }
    replies.push(json!({"kind": "stream", "text": "All files read."}));
    Ok(serde_json::from_value(json!({"replies": replies}))?)
}

/// Gaps (µs) between a stream's end and the next request's arrival, and
/// how many TCP connections carried the requests.
fn gaps(reqs: &[RecordedRequest]) -> anyhow::Result<(Vec<f64>, usize, Vec<f64>)> {
    let mut out = Vec::new();
    let mut body = Vec::new();
    for w in reqs.windows(2) {
        let end = w[0].stream_end_unix_us.with_context(|| format!("request {} has no stream end", w[0].index))?;
        out.push(w[1].received_unix_us as f64 - end as f64);
        body.push(w[1].body_unix_us as f64 - end as f64);
    }
    let mut conns: Vec<u64> = reqs.iter().map(|r| r.connection).collect();
    conns.sort_unstable();
    conns.dedup();
    Ok((out, conns.len(), body))
}

fn workspace_files(ws: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(ws)?;
    for i in 0..STEPS {
        let text: String = (0..40).map(|l| format!("file {i} line {l}: some text to read back\n")).collect();
        std::fs::write(ws.join(format!("file_{i}.txt")), text)?;
    }
    Ok(())
}

/// Source directories (of [`REPO_FILES`] files each) in the workspace of
/// the default-profile session: a repository of ~2,000 files.
const REPO_DIRS: usize = 100;
/// Files per source directory.
const REPO_FILES: usize = 20;

/// Which `wharf run` the session is.
#[derive(Clone, Copy, PartialEq)]
enum Setup {
    /// Only `fs` and `llm-deepseek`, the workspace holding just the files read.
    Minimal,
    /// The default profile (every tool spec in each request, the permission
    /// policy on each call, project context and the skills catalog at each
    /// step) with `llm-deepseek` pointed at the mock, in a workspace that
    /// also holds a ~2,000-file source tree.
    Default,
}

/// One `wharf run` of the 9-step session; its gaps and connections.
fn wharf_session(tmp: &Path, run: usize, setup: Setup) -> anyhow::Result<(Vec<f64>, usize, Vec<f64>)> {
    let mock = MockLlm::start_background(step_script()?)?;
    let dir = tmp.join(format!("wharf-run-{run}-{}", if setup == Setup::Default { "default" } else { "minimal" }));
    let ws = dir.join("ws");
    workspace_files(&ws)?;
    let port = mock.addr().port();
    let model = format!(
        r#"
[plugin.config]
base_url = "{url}/v1"
model = "bench-model"
api_key_env = "WHARF_BENCH_LLM_KEY"
[plugin.grant]
hosts = ["127.0.0.1:{port}"]
env = ["WHARF_BENCH_LLM_KEY"]
"#,
        url = mock.url()
    );
    let max = STEPS + 2;
    let profile = dir.join("profile.toml");
    let profile_args: Vec<std::ffi::OsString> = match setup {
        Setup::Minimal => {
            std::fs::write(
                &profile,
                format!(
                    r#"
[agent]
adapter = "model"
max_steps = {max}

[[plugin]]
id = "fs"
path = "${{plugin_dir}}/fs.wasm"
[plugin.grant]
dirs = ["${{workspace}}:rw"]

[[plugin]]
id = "model"
path = "${{plugin_dir}}/llm-deepseek.wasm"
{model}"#
                ),
            )?;
            vec!["--profile".into(), profile.into()]
        }
        Setup::Default => {
            for d in 0..REPO_DIRS {
                let src = ws.join(format!("src{d:03}"));
                std::fs::create_dir_all(&src)?;
                for f in 0..REPO_FILES {
                    std::fs::write(src.join(format!("mod{f:02}.rs")), format!("pub fn f{f}() -> u32 {{ {f} }}\n"))?;
                }
            }
            // Only the model row changes; the rest is the shipped profile.
            std::fs::write(&profile, format!("[agent]\nmax_steps = {max}\n\n[[plugin]]\nid = \"deepseek\"\n{model}"))?;
            vec!["--profile".into(), "default".into(), "--patch".into(), profile.into()]
        }
    };
    let out = Command::new(wharf_binary())
        .current_dir(&ws)
        .env("HOME", &dir)
        .env("WHARF_CACHE_DIR", tmp.join("cache"))
        .env("WHARF_BENCH_LLM_KEY", "sk-bench")
        .env("WHARF_LOG", "warn")
        .env_remove("DEEPSEEK_API_KEY")
        .args(["run", "Read every file.", "--no-watch", "--output", "jsonl"])
        .args(profile_args)
        .arg("--session-dir")
        .arg(dir.join("sessions"))
        .output()?;
    ensure!(out.status.success(), "wharf run failed: {}", String::from_utf8_lossy(&out.stderr));
    let reqs = mock.requests();
    ensure!(reqs.len() == STEPS + 1, "the mock saw {} requests, expected {}", reqs.len(), STEPS + 1);
    // Every step's request must carry the file the previous step read.
    let last = &reqs[STEPS].raw_body;
    ensure!(last.contains("file 8 line 39"), "the last request lacks the last file's content");
    gaps(&reqs)
}

/// A minimal HTTP/1.1 client over one stream: POST, then read the chunked
/// SSE response to its end.
fn post(stream: &mut TcpStream, reader: &mut BufReader<TcpStream>, host: &str, body: &str) -> anyhow::Result<String> {
    write!(
        stream,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Authorization: Bearer sk-bench\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()?;
    let mut line = String::new();
    let mut chunked = false;
    let mut length = None;
    loop {
        line.clear();
        ensure!(reader.read_line(&mut line)? > 0, "connection closed in the head");
        let l = line.trim_end().to_ascii_lowercase();
        if l.is_empty() {
            break;
        }
        chunked |= l == "transfer-encoding: chunked";
        if let Some(v) = l.strip_prefix("content-length:") {
            length = v.trim().parse::<usize>().ok();
        }
    }
    let mut text = Vec::new();
    if chunked {
        loop {
            line.clear();
            reader.read_line(&mut line)?;
            let n = usize::from_str_radix(line.trim(), 16).context("chunk size")?;
            let mut chunk = vec![0; n + 2];
            reader.read_exact(&mut chunk)?;
            if n == 0 {
                break;
            }
            text.extend_from_slice(&chunk[..n]);
        }
    } else if let Some(n) = length {
        let mut b = vec![0; n];
        reader.read_exact(&mut b)?;
        text = b;
    } else {
        bail!("response without a length");
    }
    Ok(String::from_utf8_lossy(&text).into_owned())
}

/// The tool calls and text in an SSE body (just enough for the script).
fn parse_sse(body: &str) -> (String, Vec<(String, String, String)>) {
    let (mut text, mut reasoning) = (String::new(), String::new());
    let mut calls: Vec<(String, String, String)> = Vec::new();
    for l in body.lines() {
        let Some(data) = l.strip_prefix("data: ") else { continue };
        let Ok(v) = serde_json::from_str::<Value>(data) else { continue };
        let Some(d) = v["choices"].get(0).map(|c| &c["delta"]) else { continue };
        text.push_str(d["content"].as_str().unwrap_or(""));
        reasoning.push_str(d["reasoning_content"].as_str().unwrap_or(""));
        for tc in d["tool_calls"].as_array().into_iter().flatten() {
            let i = tc["index"].as_u64().unwrap_or(0) as usize;
            if calls.len() <= i {
                calls.resize(i + 1, Default::default());
            }
            if let Some(id) = tc["id"].as_str() {
                calls[i].0 = id.to_string();
            }
            if let Some(n) = tc["function"]["name"].as_str() {
                calls[i].1.push_str(n);
            }
            calls[i].2.push_str(tc["function"]["arguments"].as_str().unwrap_or(""));
        }
    }
    let _ = reasoning;
    (text, calls)
}

/// The native baseline: the same session without a sandbox or a harness.
/// `reconnect`: a new TCP connection per request.
fn native_session(tmp: &Path, run: usize, reconnect: bool) -> anyhow::Result<(Vec<f64>, usize, Vec<f64>)> {
    let mock = MockLlm::start_background(step_script()?)?;
    let ws = tmp.join(format!("native-{run}-{reconnect}"));
    workspace_files(&ws)?;
    let host = mock.addr().to_string();
    let tools = json!([{"type": "function", "function": {"name": "read", "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]);
    let mut messages = vec![
        json!({"role": "system", "content": "You read files."}),
        json!({"role": "user", "content": "Read every file."}),
    ];
    let mut conn: Option<(TcpStream, BufReader<TcpStream>)> = None;
    for _ in 0..=STEPS {
        let body = json!({"model": "bench-model", "messages": messages, "tools": tools, "stream": true,
            "stream_options": {"include_usage": true}})
        .to_string();
        if reconnect || conn.is_none() {
            let s = TcpStream::connect(mock.addr())?;
            s.set_nodelay(true)?;
            let r = BufReader::new(s.try_clone()?);
            conn = Some((s, r));
        }
        let Some((s, r)) = conn.as_mut() else { bail!("no connection") };
        let sse = post(s, r, &host, &body)?;
        let (text, calls) = parse_sse(&sse);
        if calls.is_empty() {
            messages.push(json!({"role": "assistant", "content": text}));
            break;
        }
        let reasoning: String = sse
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .filter_map(|v| v["choices"].get(0)?["delta"]["reasoning_content"].as_str().map(str::to_string))
            .collect();
        let tc: Vec<Value> = calls
            .iter()
            .map(
                |(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}),
            )
            .collect();
        messages.push(json!({"role": "assistant", "content": text, "reasoning_content": reasoning, "tool_calls": tc}));
        for (id, _, args) in &calls {
            let a: Value = serde_json::from_str(args)?;
            let content = std::fs::read_to_string(ws.join(a["path"].as_str().unwrap_or_default()))?;
            messages.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
        }
    }
    let reqs = mock.requests();
    ensure!(reqs.len() == STEPS + 1, "native: {} requests", reqs.len());
    gaps(&reqs)
}

struct StepFigures {
    wharf: Vec<f64>,
    /// The same session with the default profile in a ~2,000-file workspace.
    wharf_default: Vec<f64>,
    /// Stream end → the next request's body fully read by the mock.
    wharf_body: Vec<f64>,
    native: Vec<f64>,
    native_body: Vec<f64>,
    native_reconnect: Vec<f64>,
    wharf_connections: Vec<usize>,
}

fn step_overhead(tmp: &Path) -> anyhow::Result<StepFigures> {
    let runs = if quick() { 2 } else { 6 };
    let mut f = StepFigures {
        wharf: vec![],
        wharf_default: vec![],
        wharf_body: vec![],
        native: vec![],
        native_body: vec![],
        native_reconnect: vec![],
        wharf_connections: vec![],
    };
    // A first run fills the compile cache (its figures are dropped).
    let _ = wharf_session(tmp, 999, Setup::Minimal)?;
    let _ = wharf_session(tmp, 999, Setup::Default)?;
    for run in 0..runs {
        // Interleaved, so load on the machine hits all of them alike.
        let (g, c, b) = wharf_session(tmp, run, Setup::Minimal)?;
        f.wharf.extend(g);
        f.wharf_default.extend(wharf_session(tmp, run, Setup::Default)?.0);
        f.wharf_body.extend(b);
        f.wharf_connections.push(c);
        let (g, _, b) = native_session(tmp, run, false)?;
        f.native.extend(g);
        f.native_body.extend(b);
        f.native_reconnect.extend(native_session(tmp, run, true)?.0);
    }
    Ok(f)
}

/// Cold first run of the default profile: spawn → first model request, µs.
fn first_request(tmp: &Path, cache: &Path, tag: &str, tiered: bool) -> anyhow::Result<f64> {
    let script: Script = serde_json::from_value(json!({"replies": [{"kind": "stream", "text": "done"}]}))?;
    let mock = MockLlm::start_background(script)?;
    let dir = tmp.join(format!("cold-{tag}"));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("README.md"), "# x\n")?;
    let port = mock.addr().port();
    let t0 = unix_us();
    let out = Command::new(wharf_binary())
        .current_dir(&dir)
        .env("HOME", &dir)
        .env("WHARF_CACHE_DIR", cache)
        .env("DEEPSEEK_API_KEY", "sk-bench")
        .env("WHARF_LOG", "warn")
        .env("WHARF_TIERED", if tiered { "1" } else { "0" })
        .args(["run", "hello", "--profile", "default", "--no-watch", "--output", "jsonl", "--session-dir"])
        .arg(dir.join("sessions"))
        .arg("-c")
        .arg(format!("plugin.deepseek.config.base_url={}/v1", mock.url()))
        .arg("-c")
        .arg(format!("plugin.deepseek.grant.hosts=[\"127.0.0.1:{port}\"]"))
        .output()?;
    ensure!(out.status.success(), "wharf run (default profile) failed: {}", String::from_utf8_lossy(&out.stderr));
    let reqs = mock.requests();
    let first = reqs.first().context("no model request")?;
    Ok(first.received_unix_us as f64 - t0 as f64)
}

struct ColdFigures {
    cold: Vec<f64>,
    /// Cold with `WHARF_TIERED=0`.
    cold_optimized: Vec<f64>,
    warm: Vec<f64>,
    process: Vec<f64>,
    components: usize,
}

fn cold_start(tmp: &Path) -> anyhow::Result<ColdFigures> {
    let runs = if quick() { 1 } else { 3 };
    let components = std::fs::read_to_string(wharf_tests::root().join("profiles/default.toml"))?
        .lines()
        .filter(|l| l.trim() == "[[plugin]]")
        .count();
    let mut f = ColdFigures { cold: vec![], cold_optimized: vec![], warm: vec![], process: vec![], components };
    for i in 0..runs {
        let cache = tmp.join(format!("cold-cache-{i}"));
        f.cold.push(first_request(tmp, &cache, &format!("c{i}"), true)?);
        // The tiered run waited at exit for its optimised code: warm now.
        f.warm.push(first_request(tmp, &cache, &format!("w{i}"), true)?);
        let cache = tmp.join(format!("cold-cache-opt-{i}"));
        f.cold_optimized.push(first_request(tmp, &cache, &format!("o{i}"), false)?);
        let t = Instant::now();
        let st = Command::new(wharf_binary()).arg("--version").output()?;
        ensure!(st.status.success(), "wharf --version failed");
        f.process.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok(f)
}

/// The default profile's components (`profiles/default.toml` rows).
fn default_components() -> anyhow::Result<Vec<PathBuf>> {
    let text = std::fs::read_to_string(wharf_tests::root().join("profiles/default.toml"))?;
    Ok(text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("path = \"${plugin_dir}/")?.strip_suffix(".wasm\""))
        .filter_map(|name| wharf_tests::plugins::ALL.iter().copied().find(|p| p.name() == name))
        .map(wharf_tests::plugin)
        .collect())
}

/// Compile-tier figures: the default profile compiled from nothing (one
/// thread per component, as start-up does; no cache), ms, and one
/// compute-bound tool call on each tier's code, ms.
struct TierFigures {
    components: usize,
    optimized: Vec<f64>,
    fast: Vec<f64>,
    baseline: Vec<f64>,
    call_optimized: Vec<f64>,
    call_fast: Vec<f64>,
    call_baseline: Vec<f64>,
}

fn compile_all(tier: CompileTier, files: &[(PathBuf, Vec<u8>)]) -> anyhow::Result<f64> {
    let engine = EngineOptions { tier, ..EngineOptions::default() };
    let rt = Runtime::new(RuntimeOptions { engine, cache_dir: None, ..Default::default() })?;
    let t = Instant::now();
    std::thread::scope(|s| {
        let handles: Vec<_> = files
            .iter()
            .map(|(p, b)| {
                let rt = &rt;
                s.spawn(move || {
                    let d = wharf_runtime::cache::digest(b);
                    rt.cache()
                        .get_or_compile(rt.engine().engine(), &d, b)
                        .map(|_| ())
                        .map_err(|e| anyhow::anyhow!("{}: {e:#}", p.display()))
                })
            })
            .collect();
        for h in handles {
            h.join().map_err(|_| anyhow::anyhow!("compile thread panicked"))??;
        }
        anyhow::Ok(())
    })?;
    Ok(t.elapsed().as_secs_f64() * 1e3)
}

/// One `regex_search` of the `text` component over a 2 MiB file on
/// `tier`'s code (fresh instance), ms per call.
async fn tier_call(tmp: &Path, tier: CompileTier, n: usize) -> anyhow::Result<Vec<f64>> {
    let big = tmp.join("tier-big.txt");
    if !big.exists() {
        let text: String = (0..40_000).map(|l| format!("line {l}: some words to scan through {}\n", l * 7)).collect();
        std::fs::write(&big, text)?;
    }
    let engine = EngineOptions { tier, ..EngineOptions::default() };
    let rt = Runtime::new(RuntimeOptions { engine, cache_dir: None, ..Default::default() })?;
    let grant = Grant {
        dirs: vec![
            wharf_runtime::grants::DirGrant::parse(&format!("{}:ro", tmp.display()))
                .map_err(|e| anyhow::anyhow!("{e}"))?,
        ],
        ..Grant::default()
    };
    let spec = PluginSpec {
        id: "text".into(),
        path: wharf_tests::plugin(plugins::TEXT),
        config: json!({}),
        grant,
        warm: false,
        on_invalid_config: Default::default(),
    };
    let v = tokio::task::block_in_place(|| rt.load(&spec)).map_err(|e| anyhow::anyhow!("{e}"))?;
    let args = json!({"path": big, "pattern": "line [0-9]*7: .*words.* 4[0-9]*$", "max_matches": 10000}).to_string();
    let ctx = CallContext { session_id: "bench".into(), call_id: "c".into(), workspace: None, services: None };
    let mut out = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        let r = v.call_tool("regex_search", &args, &ctx).await.map_err(|e| anyhow::anyhow!("{e:?}"))?;
        out.push(t.elapsed().as_secs_f64() * 1e3);
        ensure!(format!("{r:?}").contains("line "), "regex_search found nothing: {r:?}");
    }
    Ok(out)
}

async fn tiers(tmp: &Path) -> anyhow::Result<TierFigures> {
    let files: Vec<(PathBuf, Vec<u8>)> = default_components()?
        .into_iter()
        .map(|p| std::fs::read(&p).map(|b| (p.clone(), b)).with_context(|| format!("reading {}", p.display())))
        .collect::<anyhow::Result<_>>()?;
    let runs = if quick() { 1 } else { 3 };
    let mut f = TierFigures {
        components: files.len(),
        optimized: vec![],
        fast: vec![],
        baseline: vec![],
        call_optimized: vec![],
        call_fast: vec![],
        call_baseline: vec![],
    };
    for _ in 0..runs {
        // Interleaved, so load on the machine hits both alike.
        f.optimized.push(compile_all(CompileTier::Optimized, &files)?);
        f.fast.push(compile_all(CompileTier::Fast, &files)?);
        f.baseline.push(compile_all(CompileTier::Baseline, &files)?);
    }
    let calls = if quick() { 3 } else { 9 };
    f.call_optimized = tier_call(tmp, CompileTier::Optimized, calls).await?;
    f.call_fast = tier_call(tmp, CompileTier::Fast, calls).await?;
    f.call_baseline = tier_call(tmp, CompileTier::Baseline, calls).await?;
    Ok(f)
}

/// One example's edit-loop figures, ms.
struct EditFigures {
    name: String,
    kib: u64,
    rebuild: Vec<f64>,
    cold: Vec<f64>,
    cached: Vec<f64>,
    /// Empty cache, tiering on (the first tier serves first).
    tiered: Vec<f64>,
    /// The tiered runs' phases: compile, rest of the load, call (ms).
    tiered_phases: Vec<(f64, f64, f64)>,
    same_bytes: Vec<f64>,
}

/// Copies `src` to `dst` (no `node_modules`, `target`, `__pycache__`).
fn copy_dir(src: &Path, dst: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dst)?;
    for e in std::fs::read_dir(src)? {
        let e = e?;
        let name = e.file_name();
        if ["node_modules", "target", "__pycache__"].iter().any(|n| name == *n) {
            continue;
        }
        let p = e.path();
        if p.is_dir() { copy_dir(&p, &dst.join(&name))? } else { std::fs::copy(&p, dst.join(&name)).map(|_| ())? }
    }
    Ok(())
}

fn build(dir: &Path, out: &Path) -> anyhow::Result<f64> {
    let t = Instant::now();
    let o = Command::new(wharf_binary()).args(["plugin", "build"]).arg(dir).arg("-o").arg(out).output()?;
    ensure!(o.status.success() && out.exists(), "wharf plugin build failed: {}", String::from_utf8_lossy(&o.stderr));
    Ok(t.elapsed().as_secs_f64() * 1e3)
}

/// Load `path` as a new version and serve one call: ms.
async fn serve_once(rt: &Runtime, path: &Path, tool: &str, args: &str, grant: &Grant) -> anyhow::Result<f64> {
    Ok(serve_phases(rt, path, tool, args, grant).await?.total)
}

/// Where one load-and-call went, ms: the whole, the compile inside the
/// load, the rest of the load (linking, instantiation and the describe
/// call) and the tool call.
struct Phases {
    total: f64,
    compile: f64,
    describe: f64,
    call: f64,
}

async fn serve_phases(rt: &Runtime, path: &Path, tool: &str, args: &str, grant: &Grant) -> anyhow::Result<Phases> {
    let spec = PluginSpec {
        id: "edited".into(),
        path: path.to_path_buf(),
        config: json!({}),
        grant: grant.clone(),
        warm: false,
        on_invalid_config: Default::default(),
    };
    let t = Instant::now();
    let v = tokio::task::block_in_place(|| rt.load(&spec)).map_err(|e| anyhow::anyhow!("{e}"))?;
    let loaded = t.elapsed().as_secs_f64() * 1e3;
    let ctx = CallContext { session_id: "bench".into(), call_id: "c".into(), workspace: None, services: None };
    let out = v.call_tool(tool, args, &ctx).await.map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let total = t.elapsed().as_secs_f64() * 1e3;
    ensure!(!format!("{out:?}").is_empty(), "empty outcome");
    let compile = v.load_time.as_secs_f64() * 1e3;
    Ok(Phases { total, compile, describe: loaded - compile, call: total - loaded })
}

async fn edit_loop(tmp: &Path, lang: &str) -> anyhow::Result<EditFigures> {
    let root = wharf_tests::root();
    let (example, file, from, tool, args) = match lang {
        "python" => (
            root.join("sdk/python/examples/csv_query"),
            "app.py",
            "description=\"Query CSV files: select",
            "csv_query",
            json!({"path": tmp.join("t.csv"), "select": ["a"]}).to_string(),
        ),
        _ => (
            root.join("sdk/js/examples/json_diff"),
            "app.js",
            "description: \"Structural diff of two JSON values",
            "json_diff",
            json!({"before": {"a": 1}, "after": {"a": 2}}).to_string(),
        ),
    };
    std::fs::write(tmp.join("t.csv"), "a,b\n1,2\n3,4\n")?;
    let dir = tmp.join(format!("edit-{lang}"));
    copy_dir(&example, &dir)?;
    if lang == "js" {
        // The example's `file:../..` dependency, without `npm ci`.
        std::fs::create_dir_all(dir.join("node_modules"))?;
        std::os::unix::fs::symlink(root.join("sdk/js"), dir.join("node_modules/wharf-sdk"))?;
    }
    let grant = Grant {
        dirs: vec![
            wharf_runtime::grants::DirGrant::parse(&format!("{}:ro", tmp.display()))
                .map_err(|e| anyhow::anyhow!("{e}"))?,
        ],
        ..Grant::default()
    };
    let edits = if quick() { 1 } else { 3 };
    let src = dir.join(file);
    let original = std::fs::read_to_string(&src)?;
    ensure!(original.contains(from), "{file} no longer has the line this bench edits");
    let mut f = EditFigures {
        name: lang.into(),
        kib: 0,
        rebuild: vec![],
        cold: vec![],
        cached: vec![],
        tiered: vec![],
        tiered_phases: vec![],
        same_bytes: vec![],
    };
    let v0 = dir.join("v0.wasm");
    build(&dir, &v0)?;
    f.kib = std::fs::metadata(&v0)?.len() / 1024;
    for i in 1..=edits {
        // Change one line: the tool's description.
        std::fs::write(&src, original.replacen(from, &format!("{from} (edit {i})"), 1))?;
        let vi = dir.join(format!("v{i}.wasm"));
        f.rebuild.push(build(&dir, &vi)?);
        // Cold: a runtime with an empty cache directory.
        let cold_dir = tmp.join(format!("edit-cache-cold-{lang}-{i}"));
        let engine = EngineOptions { incremental: false, ..EngineOptions::default() };
        let rt = Runtime::new(RuntimeOptions { engine, cache_dir: Some(cold_dir), ..Default::default() })?;
        f.cold.push(serve_once(&rt, &vi, tool, &args, &grant).await?);
        // Cached: the cache holds the previous build (as after the last
        // edit), a fresh process (runtime) loads the new one.
        let warm_dir = tmp.join(format!("edit-cache-warm-{lang}-{i}"));
        let rt = Runtime::new(RuntimeOptions { cache_dir: Some(warm_dir.clone()), ..Default::default() })?;
        let prev = dir.join(format!("v{}.wasm", i - 1));
        serve_once(&rt, &prev, tool, &args, &grant).await?;
        drop(rt);
        let rt = Runtime::new(RuntimeOptions { cache_dir: Some(warm_dir), ..Default::default() })?;
        f.cached.push(serve_once(&rt, &vi, tool, &args, &grant).await?);
        // Tiered: an empty cache, the first tier (Winch) serves first (`wharf`'s mode).
        let tiered_dir = tmp.join(format!("edit-cache-tiered-{lang}-{i}"));
        let rt = Runtime::new(RuntimeOptions { cache_dir: Some(tiered_dir), ..Default::default() })?;
        rt.enable_tiering();
        let p = serve_phases(&rt, &vi, tool, &args, &grant).await?;
        f.tiered.push(p.total);
        f.tiered_phases.push((p.compile, p.describe, p.call));
        // Its tier-up must not run under the next measurement.
        tokio::task::block_in_place(|| rt.wait_tier_up(Duration::from_secs(300)));
        drop(rt);
        // Baseline: the same bytes again in a fresh runtime (artifact hit).
        let rt2 = Runtime::new(RuntimeOptions {
            cache_dir: Some(tmp.join(format!("edit-cache-warm-{lang}-{i}"))),
            ..Default::default()
        })?;
        f.same_bytes.push(serve_once(&rt2, &vi, tool, &args, &grant).await?);
    }
    Ok(f)
}

fn ms(us: f64) -> f64 {
    us / 1e3
}

fn met(ok: bool) -> &'static str {
    if ok { "**met**" } else { "**not met**" }
}

pub fn main() -> anyhow::Result<()> {
    let out = wharf_tests::target_dir().join("bench");
    std::fs::create_dir_all(&out)?;
    for p in [
        plugins::FS,
        plugins::LLM_DEEPSEEK,
        plugins::TEXT,
        plugins::SHELL,
        plugins::WEB,
        plugins::TODO,
        plugins::SKILLS,
        plugins::CONTEXT,
        plugins::COMPACTION,
        plugins::SUBAGENT,
    ] {
        let _ = wharf_tests::plugin(p);
    }
    let tmp = tempfile::tempdir()?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;

    let steps = if section("steps") {
        step_overhead(tmp.path())?
    } else {
        StepFigures {
            wharf: vec![],
            wharf_default: vec![],
            wharf_body: vec![],
            native: vec![],
            native_body: vec![],
            native_reconnect: vec![],
            wharf_connections: vec![],
        }
    };
    let (w_med, w_p90) = (median(&steps.wharf), quantile(&steps.wharf, 0.9));
    let (d_med, d_p90) = (median(&steps.wharf_default), quantile(&steps.wharf_default, 0.9));
    let (n_med, n_p90) = (median(&steps.native), quantile(&steps.native, 0.9));
    let (r_med, r_p90) = (median(&steps.native_reconnect), quantile(&steps.native_reconnect, 0.9));
    let conns = steps.wharf_connections.iter().max().copied().unwrap_or(0);

    let cold = if section("cold") {
        cold_start(tmp.path())?
    } else {
        ColdFigures { cold: vec![], cold_optimized: vec![], warm: vec![], process: vec![], components: 0 }
    };
    let (c_med, wm_med, p_med) = (median(&cold.cold), median(&cold.warm), median(&cold.process));
    let co_med = median(&cold.cold_optimized);

    let tier = if section("tiers") { Some(rt.block_on(tiers(tmp.path()))?) } else { None };

    let mut edits = Vec::new();
    let mut edit_skips = Vec::new();
    for lang in ["python", "js"].into_iter().filter(|_| section("edit")) {
        match rt.block_on(edit_loop(tmp.path(), lang)) {
            Ok(f) => edits.push(f),
            Err(e) => {
                eprintln!("wire bench: edit loop ({lang}) not measured: {e:#}");
                edit_skips.push(format!("{lang}: {e:#}"));
            }
        }
    }

    let mut md = String::new();
    if section("steps") {
        md.push_str(&format!(
            "Per-step overhead on the wire: `wharf run` with `llm-deepseek` against the loopback mock, {STEPS} steps \
         with one `fs` read each, {} sessions; the gap is from the end of one response stream to the arrival \
         of the next request, as the mock stamps them.\n\n\
         | figure | median | p90 | ratio to native keep-alive (median) | target |\n| --- | --- | --- | --- | --- |\n\
         | wharf (llm-deepseek, fs) | {:.3} ms | {:.3} ms | {:.1}× | ≤ 0.5 ms: {} |\n\
         | wharf, default profile ({REPO_DIRS}×{REPO_FILES}-file workspace) | {:.3} ms | {:.3} ms | {:.1}× | |\n\
         | baseline: native client, keep-alive | {:.3} ms | {:.3} ms | 1.0× | |\n\
         | baseline: native client, new TCP connection per request | {:.3} ms | {:.3} ms | {:.1}× | |\n\n\
         Until the next request's body was complete at the mock (median): wharf {:.3} ms, native {:.3} ms.\n\n\
         TCP connections per wharf session ({} requests): {conns}.\n\n",
            steps.wharf_connections.len(),
            ms(w_med),
            ms(w_p90),
            w_med / n_med.max(1.0),
            met(ms(w_med) <= 0.5),
            ms(d_med),
            ms(d_p90),
            d_med / n_med.max(1.0),
            ms(n_med),
            ms(n_p90),
            ms(r_med),
            ms(r_p90),
            r_med / n_med.max(1.0),
            ms(median(&steps.wharf_body)),
            ms(median(&steps.native_body)),
            STEPS + 1,
        ));
    }
    if section("cold") {
        md.push_str(&format!(
            "Cold first run of the default profile ({} components, empty compile cache) until the first model \
             request arrives at the mock:\n\n| figure | median | ratio to warm cache | target |\n| --- | --- | --- | --- |\n\
             | cold (empty cache, tiered: first tier (Winch) first) | {:.0} ms | {:.1}× | ≤ 400 ms: {} |\n\
             | cold (empty cache, `WHARF_TIERED=0`: optimised only) | {:.0} ms | {:.1}× | |\n\
             | warm cache | {:.0} ms | 1.0× | |\n\
             | baseline: `wharf --version` (process start) | {:.0} ms | {:.2}× | |\n\n",
            cold.components,
            ms(c_med),
            c_med / wm_med.max(1.0),
            met(ms(c_med) <= 400.0),
            ms(co_med),
            co_med / wm_med.max(1.0),
            ms(wm_med),
            ms(p_med),
            p_med / wm_med.max(1.0),
        ));
    }
    if let Some(t) = &tier {
        let (o, fa, ba) = (median(&t.optimized), median(&t.fast), median(&t.baseline));
        let (co, cf, cb) = (median(&t.call_optimized), median(&t.call_fast), median(&t.call_baseline));
        md.push_str(&format!(
            "Compile tiers: the default profile's {} components compiled from nothing, one thread per component \
             (as start-up does) on Cranelift's parallel compiler, no cache; and one compute-bound call (`text` \
             `regex_search` over 2 MiB, fresh instance) on each tier's code.\n\n\
             | tier | compile all (median) | ratio to optimized | one regex_search call (median) | ratio to optimized |\n\
             | --- | --- | --- | --- | --- |\n\
             | optimized (`opt_level=speed`, backtracking regalloc) | {o:.0} ms | 1.0× | {co:.1} ms | 1.0× |\n\
             | fast (`opt_level=none`, single-pass regalloc) | {fa:.0} ms | {:.2}× | {cf:.1} ms | {:.2}× |\n\
             | baseline (Winch, single pass) | {ba:.0} ms | {:.2}× | {cb:.1} ms | {:.2}× |\n\n",
            t.components,
            fa / o.max(0.001),
            cf / co.max(0.001),
            ba / o.max(0.001),
            cb / co.max(0.001),
        ));
    }
    if section("edit") {
        md.push_str(
            "Edit loop: change one line (the tool's description), rebuild (reported separately), then time until \
             the new version serves one call in a fresh runtime: with an empty cache and `WHARF_INCREMENTAL=0` \
             (cold), with the cache of the previous build (incremental hits), with tiering \
             (empty cache, the first tier (Winch) serves first, as `wharf` does), and the same bytes again (artifact hit).\n\n\
             | example | size | rebuild | cold (empty cache) | with the cache of the previous build | ratio cold / cached | tiered (empty cache) | ratio cold / tiered | baseline: same bytes again | target ≤ 1 s (best) |\n\
             | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
        );
        for e in &edits {
            let (cm, ca, ti, sb) = (median(&e.cold), median(&e.cached), median(&e.tiered), median(&e.same_bytes));
            md.push_str(&format!(
                "| {} | {} KiB | {:.1} s | {:.0} ms | {:.0} ms | {:.1}× | {:.0} ms | {:.1}× | {:.0} ms | {} |\n",
                e.name,
                e.kib,
                median(&e.rebuild) / 1e3,
                cm,
                ca,
                cm / ca.max(0.001),
                ti,
                cm / ti.max(0.001),
                sb,
                met(ca.min(ti) <= 1000.0)
            ));
        }
        for s in &edit_skips {
            md.push_str(&format!("| {s} | not measured | | | | | | | | |\n"));
        }
        md.push_str(
            "\nWhere the tiered figure goes (medians): the first tier's compile, the rest of the load \
             (linking, the first instantiation on the on-demand allocator, the describe call), and the tool call \
             on the first tier's code.\n\n\
             | example | tiered | compile | rest of the load | call |\n| --- | --- | --- | --- | --- |\n",
        );
        for e in &edits {
            let part = |f: fn(&(f64, f64, f64)) -> f64| median(&e.tiered_phases.iter().map(f).collect::<Vec<_>>());
            md.push_str(&format!(
                "| {} | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms |\n",
                e.name,
                median(&e.tiered),
                part(|p| p.0),
                part(|p| p.1),
                part(|p| p.2)
            ));
        }
        md.push('\n');
    }
    std::fs::write(out.join("wire.md"), &md)?;
    let edits_json: Vec<Value> = edits
        .iter()
        .map(|e| {
            json!({"example": e.name, "kib": e.kib, "rebuild_ms": median(&e.rebuild), "cold_ms": median(&e.cold),
                "cached_ms": median(&e.cached), "tiered_ms": median(&e.tiered), "same_bytes_ms": median(&e.same_bytes),
                "cold_all_ms": e.cold, "cached_all_ms": e.cached})
        })
        .collect();
    let j = json!({
        "steps": STEPS,
        "gap_ms": {"wharf": {"median": ms(w_med), "p90": ms(w_p90)},
            "wharf_default_profile": {"median": ms(d_med), "p90": ms(d_p90), "workspace_files": REPO_DIRS * REPO_FILES + STEPS,
                "ratio_to_native": d_med / n_med.max(1.0)},
            "native_keepalive": {"median": ms(n_med), "p90": ms(n_p90)},
            "native_reconnect": {"median": ms(r_med), "p90": ms(r_p90)}, "ratio_to_native": w_med / n_med.max(1.0),
            "wharf_connections_per_session": conns,
            "body_complete": {"wharf_median": ms(median(&steps.wharf_body)), "native_median": ms(median(&steps.native_body))}, "target_ms": 0.5, "met": ms(w_med) <= 0.5},
        "cold_start_ms": {"cold": ms(c_med), "cold_untiered": ms(co_med), "warm": ms(wm_med), "process": ms(p_med), "components": cold.components,
            "ratio_cold_to_warm": c_med / wm_med.max(1.0), "target_ms": 400, "met": ms(c_med) <= 400.0},
        "tiers": tier.as_ref().map(|t| json!({"components": t.components,
            "compile_ms": {"optimized": median(&t.optimized), "fast": median(&t.fast), "baseline": median(&t.baseline),
                "optimized_all": t.optimized, "fast_all": t.fast, "baseline_all": t.baseline},
            "regex_search_call_ms": {"optimized": median(&t.call_optimized), "fast": median(&t.call_fast),
                "baseline": median(&t.call_baseline)}})),
        "edit_loop": edits_json,
        "edit_loop_not_measured": edit_skips,
    });
    std::fs::write(out.join("wire.json"), serde_json::to_string_pretty(&j)?)?;
    println!("{md}");
    Ok(())
}
