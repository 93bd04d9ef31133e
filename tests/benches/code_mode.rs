//! `cargo xtask bench` section `code_mode`: Code Mode (`run_code`) against
//! one tool call per model step, every figure measured in this run through
//! `wharf run` with the real components:
//!
//! - **the 20-file task** (glob `data/*.txt`, read the 20 files, count the
//!   ones holding a word) against the DeepSeek mock (`wharf-mock-llm`, real
//!   `llm-deepseek` component): model requests and the prompt the mock
//!   received (bytes of the request bodies, and tokens estimated at 4 bytes
//!   each — the mock's own usage figures are scripted, not measured), Code
//!   Mode vs one tool per step;
//! - **one inner call vs a direct call**: a program making `N` sequential
//!   `tools.read` calls, timed inside the program (`Date.now()`), per call,
//!   against a direct `read` call of the model, timed from its `tool/call`
//!   to its `tool/result` in the log (the pipeline, the fresh `fs` sandbox
//!   and the log writes: what a direct call costs besides the model step),
//!   as a ratio (target ≤ 2×);
//! - **program start-up**: `run_code` with the program `1` (a fresh
//!   instance of the 4 MB component, the boa context, the prelude), the
//!   executions' `duration_ms`, against a direct `read`'s; the same in
//!   Python (Monty);
//! - **the 20-file task in Python vs JavaScript**: the same task, one
//!   `run_code` each, model requests, request bytes and the whole `wharf
//!   run`'s wall time;
//! - **resume cost after a crash**: a durable program (ten writes, then a
//!   minute's call) killed with SIGKILL inside that call; the time from
//!   starting `wharf run --resume` to the re-run program's next inner call
//!   (its logged `tool/call`), its ten logged calls answered from the log,
//!   against a fresh `wharf run`'s time to the same program's first inner
//!   call.
//!
//! - **300 MCP tools, direct vs catalogue**: the first model request's
//!   tool list (bytes of its `tools`, tokens estimated at 4 bytes each) with
//!   every tool offered directly (`agent.tool_list_budget` at its maximum)
//!   against the default listing budget, where a program finds the rest
//!   with `tools.search`.
//!
//! Writes `target/bench/code_mode.md` and `code_mode.json`. With
//! `WHARF_BENCH_QUICK` the counts shrink.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use wharf_mock_llm::{MockLlm, Script};
use wharf_tests::plugins;

const KEY_ENV: &str = "WHARF_BENCH_CODE_KEY";

struct World {
    home: tempfile::TempDir,
    ws: tempfile::TempDir,
}

impl World {
    fn new() -> anyhow::Result<Self> {
        let w = Self { home: tempfile::tempdir()?, ws: tempfile::tempdir()? };
        std::fs::create_dir_all(w.ws.path().join("data"))?;
        for i in 0..20 {
            let body = if i % 3 == 0 { format!("file {i} has the needle\n") } else { format!("file {i}\n") };
            std::fs::write(w.ws.path().join(format!("data/f{i:02}.txt")), body)?;
        }
        std::fs::write(w.ws.path().join("small.txt"), "hello from the benchmark\n")?;
        Ok(w)
    }

    fn profile(&self, name: &str, adapter: &str, rows: &str) -> anyhow::Result<PathBuf> {
        let text = format!(
            "[agent]\nadapter = \"{adapter}\"\nmax_steps = 100\n\n[[plugin]]\nid = \"fs\"\npath = \"${{plugin_dir}}/fs.wasm\"\n\
             [plugin.grant]\ndirs = [\"${{workspace}}:rw\"]\n\n[[plugin]]\nid = \"code\"\npath = \"${{plugin_dir}}/code.wasm\"\n\
             [plugin.config]\nmax_calls = 500\n[plugin.grant]\ntools = true\ntimeout_ms = 120000\n{rows}\n"
        );
        let path = self.home.path().join(format!("{name}.toml"));
        std::fs::write(&path, text)?;
        Ok(path)
    }

    /// `wharf run --output jsonl`: the events.
    fn run(&self, profile: &Path) -> anyhow::Result<Vec<Value>> {
        let sessions = self.home.path().join("sessions");
        let out = wharf_tests::wharf(self.home.path())
            .current_dir(self.ws.path())
            .env(KEY_ENV, "sk-bench")
            .args(["run", "do the task", "--profile"])
            .arg(profile)
            .arg("--session-dir")
            .arg(&sessions)
            .args(["--output", "jsonl", "--no-watch"])
            .output()
            .context("spawn wharf")?;
        let events: Vec<Value> =
            String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        if out.status.code() != Some(0) {
            bail!("wharf run failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(events)
    }
}

fn toml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// Scripted turns: each a list of (tool, arguments) calls, then a final text.
fn scripted(turns: &[Vec<(&str, Value)>]) -> String {
    let mut s = String::from(
        "\n[[plugin]]\nid = \"scripted\"\npath = \"${plugin_dir}/llm-scripted.wasm\"\n[plugin.config]\nmodel = \"bench\"\n",
    );
    for calls in turns {
        let list: Vec<String> = calls
            .iter()
            .map(|(n, a)| format!("{{ name = \"{n}\", arguments = {} }}", toml_str(&a.to_string())))
            .collect();
        s.push_str(&format!("\n[[plugin.config.turns]]\ntool_calls = [{}]\n", list.join(", ")));
    }
    s.push_str("\n[[plugin.config.turns]]\ntext = \"done\"\nfinish = \"stop\"\n");
    s
}

fn time_ms(e: &Value) -> Option<i64> {
    // `YYYY-MM-DDTHH:MM:SS.mmmZ`: one run never crosses a day boundary
    // that matters for deltas of a few ms, but keep the date in anyway.
    let t = e["time"].as_str()?;
    let (date, clock) = t.split_once('T')?;
    let day: i64 = date.rsplit('-').next()?.parse().ok()?;
    let clock = clock.trim_end_matches('Z');
    let mut parts = clock.split(':');
    let h: i64 = parts.next()?.parse().ok()?;
    let m: i64 = parts.next()?.parse().ok()?;
    let s: f64 = parts.next()?.parse().ok()?;
    Some(((day * 24 + h) * 60 + m) * 60_000 + (s * 1000.0).round() as i64)
}

/// Mean ms from each `tool/call` of `name` to its `tool/result`.
fn call_to_result_ms(events: &[Value], name: &str) -> anyhow::Result<f64> {
    let mut total = 0i64;
    let mut n = 0i64;
    for c in events.iter().filter(|e| e["type"] == "tool/call" && e["data"]["name"] == name) {
        let id = &c["data"]["id"];
        let r = events
            .iter()
            .find(|e| e["type"] == "tool/result" && &e["data"]["call_id"] == id)
            .context("a call without a result")?;
        if r["data"]["is_error"] == true {
            bail!("{name} failed: {r}");
        }
        total += time_ms(r).unwrap_or(0) - time_ms(c).unwrap_or(0);
        n += 1;
    }
    if n == 0 {
        bail!("no {name} calls");
    }
    Ok(total as f64 / n as f64)
}

/// Mean `duration_ms` of the results of `name`.
fn mean_duration(events: &[Value], name: &str) -> anyhow::Result<f64> {
    let ds: Vec<f64> = events
        .iter()
        .filter(|e| e["type"] == "tool/result" && e["data"]["name"] == name)
        .filter_map(|e| e["data"]["duration_ms"].as_f64())
        .collect();
    if ds.is_empty() {
        bail!("no {name} results");
    }
    Ok(ds.iter().sum::<f64>() / ds.len() as f64)
}

/// The model-visible content of the one `run_code` result of a run.
fn code_result(events: &[Value]) -> anyhow::Result<String> {
    let r = events
        .iter()
        .rfind(|e| e["type"] == "tool/result" && e["data"]["name"] == "run_code")
        .context("no run_code result")?;
    if r["data"]["is_error"] == true {
        bail!("run_code failed: {r}");
    }
    Ok(r["data"]["content"].as_str().unwrap_or_default().to_string())
}

struct Requests {
    count: usize,
    bytes: usize,
    /// The whole `wharf run`, ms.
    wall_ms: f64,
}

/// The 20-file task against the DeepSeek mock with `replies`.
fn twenty_files(world: &World, name: &str, replies: Vec<Value>) -> anyhow::Result<Requests> {
    let script: Script = serde_json::from_value(json!({ "replies": replies }))?;
    let mock = MockLlm::start_background(script)?;
    let row = format!(
        "\n[[plugin]]\nid = \"model\"\npath = \"${{plugin_dir}}/llm-deepseek.wasm\"\n[plugin.config]\n\
         base_url = \"{}/v1\"\nmodel = \"deepseek-v4-pro\"\napi_key_env = \"{KEY_ENV}\"\n\
         [plugin.grant]\nhosts = [\"127.0.0.1:{}\"]\nenv = [\"{KEY_ENV}\"]\ntimeout_ms = 20000\n",
        mock.url(),
        mock.addr().port()
    );
    let profile = world.profile(name, "model", &row)?;
    let started = std::time::Instant::now();
    let events = world.run(&profile)?;
    let wall_ms = started.elapsed().as_secs_f64() * 1000.0;
    let reads = events.iter().filter(|e| e["type"] == "tool/result" && e["data"]["name"] == "read").count();
    if reads != 20 {
        bail!("{name}: {reads} reads instead of 20");
    }
    let requests = mock.requests();
    Ok(Requests { count: requests.len(), bytes: requests.iter().map(|r| r.raw_body.len()).sum(), wall_ms })
}

/// A durable program's path after a crash: ten writes, a minute's call
/// (killed inside it), one more write.
const DURABLE_PROGRAM: &str = r#"
for (let i = 1; i <= 10; i++) await tools.write({path: `resume_n${i}.txt`, content: `${i}`});
try { await tools.mcp__fx__slow({ms: 60000}); } catch (e) {}
await tools.write({path: "resume_after.txt", content: "after"});
return "done";
"#;

/// The DeepSeek adapter row against `mock`, then `extra`.
fn deepseek_row(mock: &MockLlm, extra: &str) -> String {
    format!(
        "\n[[plugin]]\nid = \"model\"\npath = \"${{plugin_dir}}/llm-deepseek.wasm\"\n[plugin.config]\n\
         base_url = \"{}/v1\"\nmodel = \"deepseek-v4-pro\"\napi_key_env = \"{KEY_ENV}\"\n\
         [plugin.grant]\nhosts = [\"127.0.0.1:{}\"]\nenv = [\"{KEY_ENV}\"]\ntimeout_ms = 20000\n{extra}",
        mock.url(),
        mock.addr().port()
    )
}

/// Resume cost: `(ms from a fresh start to the program's first inner
/// call, ms from starting --resume to the re-run program's next inner call,
/// calls answered from the log)`.
fn resume_cost(world: &World) -> anyhow::Result<(f64, f64, u64)> {
    use std::io::{BufRead, BufReader};
    let fx = fixture()?;
    let mcp = format!(
        "\n[[mcp]]\nname = \"fx\"\ncommand = {}\nargs = [\"stdio\"]\nrequired = true\n",
        toml_str(&fx.display().to_string())
    );
    let sessions = world.home.path().join("sessions");
    let args = json!({"code": DURABLE_PROGRAM});
    let script: Script = serde_json::from_value(json!({"replies": [call_reply("call_code", "run_code", &args)]}))?;
    let mock = MockLlm::start_background(script)?;
    // `durable = true` lands in the code row's grant (the rows follow it).
    let profile = world.profile("crash", "model", &format!("durable = true\n{}", deepseek_row(&mock, &mcp)))?;
    let started = std::time::SystemTime::now();
    let mut child = wharf_tests::wharf(world.home.path())
        .current_dir(world.ws.path())
        .env(KEY_ENV, "sk-bench")
        .args(["run", "do the task", "--profile"])
        .arg(&profile)
        .arg("--session-dir")
        .arg(&sessions)
        .args(["--output", "jsonl", "--no-watch"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("spawn wharf")?;
    let stdout = child.stdout.take().context("no stdout")?;
    let mut id = None;
    for line in BufReader::new(stdout).lines() {
        let e: Value = serde_json::from_str(&line?).unwrap_or_default();
        if e["type"] == "session/start" {
            id = e["data"]["id"].as_str().map(str::to_string);
        }
        if e["type"] == "tool/call" && e["data"]["name"] == "mcp__fx__slow" {
            break;
        }
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    child.kill()?;
    let _ = child.wait();
    let id = id.context("no session/start before the kill")?;
    let since = |e: &wharf_core::events::Event, from: std::time::SystemTime| -> f64 {
        let from = from.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as f64).unwrap_or(0.0);
        wharf_core::util::ms_from_rfc3339(&e.time).map_or(f64::NAN, |t| t as f64 - from)
    };
    let store = wharf_core::SessionStore::new(&sessions);
    let events = store.load(&id)?.events;
    let inner = |e: &wharf_core::events::Event| matches!(&e.kind, wharf_core::events::EventKind::ToolCall(c) if c.parent.is_some());
    let first = events.iter().find(|e| inner(e)).context("no inner call before the crash")?;
    let fresh_ms = since(first, started);

    let script: Script = serde_json::from_value(json!({"replies": [stream(json!({"text": "done"}))]}))?;
    let mock = MockLlm::start_background(script)?;
    let profile = world.profile("resume", "model", &format!("durable = true\n{}", deepseek_row(&mock, &mcp)))?;
    let resumed = std::time::SystemTime::now();
    let out = wharf_tests::wharf(world.home.path())
        .current_dir(world.ws.path())
        .env(KEY_ENV, "sk-bench")
        .args(["run", "go on", "--resume", &id, "--profile"])
        .arg(&profile)
        .arg("--session-dir")
        .arg(&sessions)
        .args(["--output", "jsonl", "--no-watch"])
        .output()
        .context("spawn wharf --resume")?;
    if out.status.code() != Some(0) {
        bail!("wharf run --resume failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let events = store.load(&id)?.events;
    let replay = events
        .iter()
        .position(|e| matches!(&e.kind, wharf_core::events::EventKind::Unknown { type_name, .. } if type_name == "tool/replay"))
        .context("no tool/replay")?;
    let logged = match &events[replay].kind {
        wharf_core::events::EventKind::Unknown { data, .. } => data["logged"].as_u64().unwrap_or(0),
        _ => 0,
    };
    let next = events[replay..].iter().find(|e| inner(e)).context("no inner call after the replay")?;
    Ok((fresh_ms, since(next, resumed), logged))
}

fn stream(fields: Value) -> Value {
    let mut v = json!({"kind": "stream"});
    if let (Some(o), Some(f)) = (v.as_object_mut(), fields.as_object()) {
        o.extend(f.clone());
    }
    v
}

fn call_reply(id: &str, name: &str, args: &Value) -> Value {
    stream(json!({"tool_calls": [{"id": id, "name": name, "arguments": args.to_string()}]}))
}

/// The MCP fixture with 300 more tools, built once (`wharf-mcp-fixture`).
fn fixture() -> anyhow::Result<PathBuf> {
    let path = wharf_tests::target_dir().join("debug").join("wharf-mcp-fixture");
    let ok = wharf_tests::cargo()
        .current_dir(wharf_tests::root())
        .args(wharf_tests::MCP_FIXTURE_BUILD)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok && !path.exists() {
        bail!("cargo build -p wharf-mcp-fixture failed");
    }
    Ok(path)
}

/// Bytes of the first model request's `tools`, and how many, with 300 MCP
/// tools and `budget` (`agent.tool_list_budget`).
fn first_request_tools(world: &World, name: &str, budget: usize) -> anyhow::Result<(usize, usize)> {
    let script: Script = serde_json::from_value(json!({ "replies": [stream(json!({"text": "ok"}))] }))?;
    let mock = MockLlm::start_background(script)?;
    let fx = fixture()?;
    let rows = format!(
        "\n[[plugin]]\nid = \"model\"\npath = \"${{plugin_dir}}/llm-deepseek.wasm\"\n[plugin.config]\n\
         base_url = \"{}/v1\"\nmodel = \"deepseek-v4-pro\"\napi_key_env = \"{KEY_ENV}\"\n\
         [plugin.grant]\nhosts = [\"127.0.0.1:{}\"]\nenv = [\"{KEY_ENV}\"]\ntimeout_ms = 20000\n\
         \n[[mcp]]\nname = \"fx\"\ncommand = {}\nargs = [\"stdio\", \"--many\", \"300\"]\nrequired = true\n",
        mock.url(),
        mock.addr().port(),
        toml_str(&fx.display().to_string()),
    );
    let profile = world.profile(name, "model", &rows)?;
    let text = std::fs::read_to_string(&profile)?;
    std::fs::write(
        &profile,
        text.replacen("max_steps = 100\n", &format!("max_steps = 100\ntool_list_budget = {budget}\n"), 1),
    )?;
    world.run(&profile)?;
    let first = mock.requests().into_iter().next().context("no model request")?;
    let body = first.body.unwrap_or_default();
    let tools = &body["tools"];
    Ok((tools.to_string().len(), tools.as_array().map_or(0, Vec::len)))
}

const PROGRAM_20: &str = r#"
const listing = await tools.glob({pattern: "data/*.txt"});
const paths = listing.split("\n").map(l => l.trim()).filter(l => l.endsWith(".txt"));
const texts = await Promise.all(paths.map(p => tools.read({path: p})));
return {files: paths.length, with_needle: texts.filter(t => t.includes("needle")).length};
"#;

const PROGRAM_20_PY: &str = r#"
import asyncio
listing = await tools.glob(pattern="data/*.txt")
paths = [l.strip() for l in listing.split("\n") if l.strip().endswith(".txt")]
texts = await asyncio.gather(*[tools.read(path=p) for p in paths])
{"files": len(paths), "with_needle": len([t for t in texts if "needle" in t])}
"#;

pub fn main() -> anyhow::Result<()> {
    let quick = std::env::var_os("WHARF_BENCH_QUICK").is_some();
    let n_inner: usize = if quick { 10 } else { 50 };
    let n_direct: usize = if quick { 5 } else { 20 };
    let n_start: usize = if quick { 3 } else { 10 };
    let n_wall: usize = if quick { 2 } else { 5 };
    for p in [plugins::FS, plugins::CODE, plugins::LLM_SCRIPTED, plugins::LLM_DEEPSEEK] {
        let _ = wharf_tests::plugin(p);
    }
    let world = World::new()?;

    // 1. The 20-file task.
    let code_args = json!({"language": "javascript", "code": PROGRAM_20});
    let code = twenty_files(
        &world,
        "code20",
        vec![call_reply("call_code", "run_code", &code_args), stream(json!({"text": "Seven files."}))],
    )?;
    let mut replies = vec![call_reply("call_glob", "glob", &json!({"pattern": "data/*.txt"}))];
    for i in 0..20 {
        replies.push(call_reply(&format!("call_read_{i}"), "read", &json!({"path": format!("data/f{i:02}.txt")})));
    }
    replies.push(stream(json!({"text": "Seven files."})));
    let direct = twenty_files(&world, "direct20", replies)?;
    // The same task in Python.
    // The same task in Python, against JavaScript: after one warm-up run
    // of each (compile cache, page cache), the mean wall time of
    // `n_wall` runs each, alternating.
    let py_args = json!({"language": "python", "code": PROGRAM_20_PY});
    let one = |name: &str, args: &Value| {
        twenty_files(
            &world,
            name,
            vec![call_reply("call_code", "run_code", args), stream(json!({"text": "Seven files."}))],
        )
    };
    one("warm_js", &code_args)?;
    one("warm_py", &py_args)?;
    let (mut js_wall, mut py_wall) = (0.0, 0.0);
    let mut python = one("code20_py", &py_args)?;
    for i in 0..n_wall {
        js_wall += one(&format!("wall_js_{i}"), &code_args)?.wall_ms;
        py_wall += one(&format!("wall_py_{i}"), &py_args)?.wall_ms;
    }
    let mut code_js = one("code20_js", &code_args)?;
    code_js.wall_ms = js_wall / n_wall as f64;
    python.wall_ms = py_wall / n_wall as f64;

    // 2. One inner call vs one direct call.
    let program = format!(
        "const t0 = Date.now();\nfor (let i = 0; i < {n_inner}; i++) await tools.read({{path: \"small.txt\"}});\n\
         return (Date.now() - t0) / {n_inner};"
    );
    let profile = world.profile("inner", "scripted", &scripted(&[vec![("run_code", json!({"code": program}))]]))?;
    let events = world.run(&profile)?;
    let content = code_result(&events)?;
    let inner_ms: f64 = content
        .rsplit_once("result: ")
        .and_then(|(_, v)| v.trim().parse().ok())
        .with_context(|| format!("no timing in {content}"))?;
    let inner_logged_ms = call_to_result_ms(&events, "read")?;
    let turns: Vec<Vec<(&str, Value)>> = (0..n_direct).map(|_| vec![("read", json!({"path": "small.txt"}))]).collect();
    let profile = world.profile("direct", "scripted", &scripted(&turns))?;
    let events = world.run(&profile)?;
    let direct_ms = call_to_result_ms(&events, "read")?;
    let direct_exec_ms = mean_duration(&events, "read")?;

    // 3. Program start-up.
    let turns: Vec<Vec<(&str, Value)>> = (0..n_start).map(|_| vec![("run_code", json!({"code": "1"}))]).collect();
    let profile = world.profile("startup", "scripted", &scripted(&turns))?;
    let events = world.run(&profile)?;
    let startup_ms = mean_duration(&events, "run_code")?;
    // The same in Python (Monty).
    let turns: Vec<Vec<(&str, Value)>> =
        (0..n_start).map(|_| vec![("run_code", json!({"language": "python", "code": "1"}))]).collect();
    let profile = world.profile("startup_py", "scripted", &scripted(&turns))?;
    let events = world.run(&profile)?;
    let startup_py_ms = mean_duration(&events, "run_code")?;
    let size = std::fs::metadata(wharf_tests::plugin(plugins::CODE)).map(|m| m.len()).unwrap_or(0);

    // 4. 300 MCP tools: every tool offered vs the listing budget.
    let (all_bytes, all_n) = first_request_tools(&world, "many_direct", 1 << 30)?;
    let (cat_bytes, cat_n) = first_request_tools(&world, "many_catalog", 24 << 10)?;

    // 5. Resume cost after a crash.
    let (fresh_ms, resume_ms, replayed) = resume_cost(&world)?;

    let ratio = if direct_ms > 0.0 { inner_ms / direct_ms } else { f64::NAN };
    let json = json!({
        "twenty_files": {
            "code_mode": {"model_requests": code.count, "request_bytes": code.bytes, "prompt_tokens_est": code.bytes / 4},
            "one_tool_per_step": {"model_requests": direct.count, "request_bytes": direct.bytes, "prompt_tokens_est": direct.bytes / 4},
            "javascript": {"model_requests": code_js.count, "request_bytes": code_js.bytes, "prompt_tokens_est": code_js.bytes / 4, "wall_ms": code_js.wall_ms, "runs": n_wall},
            "python": {"model_requests": python.count, "request_bytes": python.bytes, "prompt_tokens_est": python.bytes / 4, "wall_ms": python.wall_ms, "runs": n_wall},
        },
        "resume_after_crash": {"fresh_start_to_first_inner_call_ms": fresh_ms, "resume_to_next_inner_call_ms": resume_ms, "calls_answered_from_log": replayed},
        "inner_call": {
            "calls": n_inner,
            "per_call_in_program_ms": inner_ms,
            "per_call_logged_ms": inner_logged_ms,
            "direct_call_logged_ms": direct_ms,
            "direct_call_execution_ms": direct_exec_ms,
            "ratio_inner_to_direct": if ratio.is_finite() { json!(ratio) } else { Value::Null },
            "target_ratio": 2.0,
        },
        "startup": {"runs": n_start, "run_code_1_ms": startup_ms, "run_code_python_1_ms": startup_py_ms, "read_execution_ms": direct_exec_ms, "component_bytes": size},
        "three_hundred_tools_first_request": {
            "direct": {"tools": all_n, "tools_bytes": all_bytes, "prompt_tokens_est": all_bytes / 4},
            "catalog": {"tools": cat_n, "tools_bytes": cat_bytes, "prompt_tokens_est": cat_bytes / 4},
        },
    });
    let md = format!(
        "| Measure | Code Mode | One tool per step |\n|---|---|---|\n\
         | 20-file task: model requests | {} | {} |\n\
         | 20-file task: request bytes the mock received | {} | {} |\n\
         | 20-file task: prompt tokens (estimated, bytes/4) | {} | {} |\n\n\
         | 20-file task, one `run_code` | JavaScript | Python |\n|---|---|---|\n\
         | model requests | {} | {} |\n\
         | request bytes the mock received | {} | {} |\n\
         | prompt tokens (estimated, bytes/4) | {} | {} |\n\
         | wall time of the whole `wharf run` (mean of {n_wall}, after a warm-up) | {:.0} ms | {:.0} ms |\n\n\
         | Durable program after `kill -9` (ten calls logged, one in flight) | Value |\n|---|---|\n\
         | fresh `wharf run` → the program's first inner call | {fresh_ms:.0} ms |\n\
         | `wharf run --resume` → the re-run program's next inner call ({replayed} answered from the log) | {resume_ms:.0} ms |\n\n\
         | Measure | Value |\n|---|---|\n\
         | one inner call, timed in the program ({n_inner} sequential `tools.read`) | {inner_ms:.2} ms |\n\
         | one inner call, `tool/call` → `tool/result` in the log | {inner_logged_ms:.2} ms |\n\
         | one direct `read`, `tool/call` → `tool/result` in the log ({n_direct} steps) | {direct_ms:.2} ms |\n\
         | inner / direct | {} (target ≤ 2×) |\n\
         | program start-up: `run_code` of `1`, execution ({n_start} runs) | {startup_ms:.1} ms |\n\
         | program start-up in Python: `run_code` of `1` with `language: \"python\"` ({n_start} runs) | {} |\n\
         | a direct `read`'s execution (`duration_ms`), for scale | {} |\n\
         | `code.wasm` size | {:.1} MB |\n\n\
         Log times have millisecond resolution; the in-program figure is a mean over {n_inner} calls.\n\n\
         | 300 MCP tools, first model request | every tool offered | listing budget (24 KiB) |\n|---|---|---|\n\
         | tools offered | {all_n} | {cat_n} |\n\
         | bytes of the request's `tools` | {all_bytes} | {cat_bytes} |\n\
         | prompt tokens of the tool list (estimated, bytes/4) | {} | {} ({:.1}× fewer) |\n",
        code.count,
        direct.count,
        code.bytes,
        direct.bytes,
        code.bytes / 4,
        direct.bytes / 4,
        code_js.count,
        python.count,
        code_js.bytes,
        python.bytes,
        code_js.bytes / 4,
        python.bytes / 4,
        code_js.wall_ms,
        python.wall_ms,
        // Every direct call within one tick of the log's ms clock: no ratio
        // at this resolution (the inner figure is a mean over a program).
        if ratio.is_finite() {
            format!("{ratio:.2}×")
        } else {
            "not measurable: every direct call began and ended within one ms tick of the log's clock".to_string()
        },
        // `duration_ms` is whole milliseconds: below one, say so.
        if startup_py_ms < 1.0 { "< 1 ms".to_string() } else { format!("{startup_py_ms:.1} ms") },
        if direct_exec_ms < 1.0 { "< 1 ms".to_string() } else { format!("{direct_exec_ms:.1} ms") },
        size as f64 / 1e6,
        all_bytes / 4,
        cat_bytes / 4,
        all_bytes as f64 / cat_bytes.max(1) as f64,
    );
    let out = wharf_tests::target_dir().join("bench");
    std::fs::create_dir_all(&out)?;
    std::fs::write(out.join("code_mode.md"), &md)?;
    std::fs::write(out.join("code_mode.json"), serde_json::to_string_pretty(&json)? + "\n")?;
    println!("{md}");
    Ok(())
}
