//! `cargo xtask bench` section `long_session`: a session's per-step host
//! overhead as its history grows.
//!
//! `wharf run` with the real `llm-deepseek` component against the loopback
//! mock LLM, a session of [`STEPS`] steps with one `fs` read of a ~4 KiB file
//! each, so the history holds ~2 MiB of tool output by step 500. The mock
//! stamps when each response stream ended and when the next request's head
//! and body arrived; the gap is what the host adds per step (read the
//! stream's end, run the tool in its sandbox, append to the log, project the
//! history, lower it into the adapter, which encodes and sends it).
//!
//! Figures at steps 10, 100 and 500 (the median of the five steps ending
//! there, over every run), against two baselines measured in the same run
//! for the same request size: writing that many bytes over a loopback TCP
//! connection to a reader that drains them (the bytes are inherent), and a
//! native client encoding the same history with `serde_json` and writing it.
//! Target (issue 41): overhead at step 500 ≤ 1.5 × overhead at step 10 +
//! the time to write step 500's request bytes.
//!
//! Writes `target/bench/long_session.md` and `long_session.json`.
//! `WHARF_BENCH_QUICK=1`: one run instead of three.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, ensure};
use serde_json::{Value, json};
use wharf_mock_llm::{MockLlm, RecordedRequest, Script};

/// Model steps with a tool call; one more request gets the final answer.
const STEPS: usize = 500;
/// Bytes of each file read (one tool output).
const FILE_BYTES: usize = 4200;
/// The steps reported.
const AT: [usize; 3] = [10, 100, 500];
/// Steps per figure: the median of the `WINDOW` steps ending at each.
const WINDOW: usize = 5;

fn quick() -> bool {
    std::env::var_os("WHARF_BENCH_QUICK").is_some()
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    if s.is_empty() { 0.0 } else { s[s.len() / 2] }
}

/// The `wharf` binary `cargo xtask bench` built (else build it).
fn wharf_binary() -> PathBuf {
    let built = wharf_tests::target_dir().join("debug/wharf");
    if built.exists() { built } else { wharf_tests::wharf_bin() }
}

/// The directory of the built components (`target/plugins`).
fn plugin_dir() -> anyhow::Result<PathBuf> {
    let adapter = wharf_tests::plugin(wharf_tests::plugins::LLM_DEEPSEEK);
    Ok(adapter.parent().context("the adapter's path has no directory")?.to_path_buf())
}

/// File `i`'s text: ~[`FILE_BYTES`] of lines naming the file.
fn file_text(i: usize) -> String {
    let mut text = String::with_capacity(FILE_BYTES + 64);
    let mut line = 0;
    while text.len() < FILE_BYTES {
        text.push_str(&format!("file {i} line {line}: some text of a longer tool output to keep\n"));
        line += 1;
    }
    text
}

fn script() -> anyhow::Result<Script> {
    let mut replies = Vec::with_capacity(STEPS + 1);
    for i in 0..STEPS {
        replies.push(json!({
            "kind": "stream",
            "reasoning": format!("Step {i}."),
            "text": "",
            "tool_calls": [{"id": format!("call_{i}"), "name": "read",
                "arguments": format!("{{\"path\": \"f{i}.txt\"}}")}],
        }));
    }
    replies.push(json!({"kind": "stream", "text": "All files read."}));
    Ok(serde_json::from_value(json!({"replies": replies}))?)
}

/// One run: per request index, (stream end of the previous reply → head,
/// → body complete) in µs, and each request's body length.
struct Run {
    head: Vec<f64>,
    body: Vec<f64>,
    len: Vec<usize>,
}

fn gaps(reqs: &[RecordedRequest]) -> anyhow::Result<Run> {
    let mut run = Run { head: vec![0.0], body: vec![0.0], len: vec![reqs.first().map_or(0, |r| r.body_len)] };
    for w in reqs.windows(2) {
        let end = w[0].stream_end_unix_us.with_context(|| format!("request {} has no stream end", w[0].index))?;
        run.head.push(w[1].received_unix_us as f64 - end as f64);
        run.body.push(w[1].body_unix_us as f64 - end as f64);
        run.len.push(w[1].body_len);
    }
    Ok(run)
}

fn wharf_session(tmp: &Path, run: usize) -> anyhow::Result<Run> {
    let mock = MockLlm::start_background(script()?)?;
    // Only the last request's body is kept (to check it), not ~500 MiB.
    mock.record_bodies_up_to(0);
    let dir = tmp.join(format!("run-{run}"));
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws)?;
    for i in 0..STEPS {
        std::fs::write(ws.join(format!("f{i}.txt")), file_text(i))?;
    }
    let port = mock.addr().port();
    let profile = dir.join("profile.toml");
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
dirs = ["${{workspace}}:ro"]

[[plugin]]
id = "model"
path = "${{plugin_dir}}/llm-deepseek.wasm"
[plugin.config]
base_url = "{url}/v1"
model = "bench-model"
api_key_env = "WHARF_BENCH_LLM_KEY"
[plugin.grant]
hosts = ["127.0.0.1:{port}"]
env = ["WHARF_BENCH_LLM_KEY"]
"#,
            max = STEPS + 10,
            url = mock.url()
        ),
    )?;
    let out = Command::new(wharf_binary())
        .current_dir(&ws)
        .env("HOME", &dir)
        .env("WHARF_CACHE_DIR", tmp.join("cache"))
        .env("WHARF_BENCH_LLM_KEY", "sk-bench")
        // The components `cargo xtask build-plugins` built, by name (the
        // report names the adapter's file).
        .env("WHARF_PLUGIN_DIR", plugin_dir()?)
        .env("WHARF_LOG", "warn")
        .env_remove("DEEPSEEK_API_KEY")
        .args(["run", "Read every file.", "--no-watch", "--output", "jsonl", "--profile"])
        .arg(&profile)
        .arg("--session-dir")
        .arg(dir.join("sessions"))
        .output()?;
    ensure!(out.status.success(), "wharf run failed: {}", String::from_utf8_lossy(&out.stderr));
    let reqs = mock.requests();
    ensure!(reqs.len() == STEPS + 1, "the mock saw {} requests, expected {}", reqs.len(), STEPS + 1);
    let last = reqs[STEPS].body_len;
    ensure!(last > STEPS * FILE_BYTES, "the last request holds {last} bytes, less than the files read");
    let _ = std::fs::remove_dir_all(&dir);
    gaps(&reqs)
}

/// Writing `len` bytes over a loopback TCP connection until the reader
/// has drained them all (it answers one byte), µs, median of `reps`.
fn write_bytes_us(len: usize, reps: usize) -> anyhow::Result<f64> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let reader = std::thread::spawn(move || -> anyhow::Result<()> {
        let (mut s, _) = listener.accept()?;
        let mut buf = vec![0u8; 1 << 16];
        for _ in 0..reps {
            let mut got = 0;
            while got < len {
                let n = s.read(&mut buf)?;
                ensure!(n > 0, "closed early");
                got += n;
            }
            s.write_all(b"k")?;
        }
        Ok(())
    });
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    let body = vec![b'x'; len];
    let mut times = Vec::with_capacity(reps);
    let mut ack = [0u8; 1];
    for _ in 0..reps {
        let t = Instant::now();
        s.write_all(&body)?;
        s.read_exact(&mut ack)?;
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    reader.join().map_err(|_| anyhow::anyhow!("the reader panicked"))??;
    Ok(median(&times))
}

/// A native client's cost for the request of step `step`: build the
/// history's messages, encode them with `serde_json` and write the bytes
/// over loopback, µs (median of `reps`); and the bytes.
fn native_request_us(step: usize, reps: usize) -> anyhow::Result<(f64, usize)> {
    let files: Vec<String> = (0..step).map(file_text).collect();
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let (tx, rx) = std::sync::mpsc::channel::<usize>();
    let reader = std::thread::spawn(move || -> anyhow::Result<()> {
        let (mut s, _) = listener.accept()?;
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(len) = rx.recv() {
            let mut got = 0;
            while got < len {
                let n = s.read(&mut buf)?;
                ensure!(n > 0, "closed early");
                got += n;
            }
            s.write_all(b"k")?;
        }
        Ok(())
    });
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    let mut times = Vec::with_capacity(reps);
    let mut size = 0;
    let mut ack = [0u8; 1];
    for _ in 0..reps {
        let t = Instant::now();
        let mut messages = vec![
            json!({"role": "system", "content": "You read files."}),
            json!({"role": "user", "content": "Read every file."}),
        ];
        for (i, f) in files.iter().enumerate() {
            messages.push(json!({"role": "assistant", "content": "", "reasoning_content": format!("Step {i}."),
                "tool_calls": [{"id": format!("call_{i}"), "type": "function",
                    "function": {"name": "read", "arguments": format!("{{\"path\": \"f{i}.txt\"}}")}}]}));
            messages.push(json!({"role": "tool", "tool_call_id": format!("call_{i}"), "content": f}));
        }
        let body = serde_json::to_vec(&json!({"model": "bench-model", "messages": messages, "stream": true}))?;
        size = body.len();
        tx.send(body.len())?;
        s.write_all(&body)?;
        s.read_exact(&mut ack)?;
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    drop(tx);
    reader.join().map_err(|_| anyhow::anyhow!("the reader panicked"))??;
    Ok((median(&times), size))
}

/// One reported step's figures, µs (bytes for `len`).
struct At {
    step: usize,
    head: f64,
    body: f64,
    len: usize,
    write: f64,
    native: f64,
}

pub fn main() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let runs = if quick() { 1 } else { 5 };
    // A first session fills the compile cache (its figures are dropped).
    let _ = wharf_session(tmp.path(), 99)?;
    let mut all = Vec::new();
    let started = Instant::now();
    for run in 0..runs {
        all.push(wharf_session(tmp.path(), run)?);
    }
    let session_s = started.elapsed().as_secs_f64() / runs as f64;
    let mut at = Vec::new();
    for step in AT {
        // Step `step` is request index `step - 1`.
        let window = step.saturating_sub(WINDOW)..step;
        let mut heads = Vec::new();
        let mut bodies = Vec::new();
        for r in &all {
            heads.extend_from_slice(&r.head[window.clone()]);
            bodies.extend_from_slice(&r.body[window.clone()]);
        }
        let head = median(&heads);
        let body = median(&bodies);
        let len = all.first().map_or(0, |r| r.len[step - 1]);
        let write = write_bytes_us(len, 21)?;
        let (native, _) = native_request_us(step, 11)?;
        at.push(At { step, head, body, len, write, native });
    }
    let (first, last) = (&at[0], &at[at.len() - 1]);
    let limit = 1.5 * first.body + last.write;
    let met = last.body <= limit;
    let ms = |us: f64| us / 1e3;
    let mut md = format!(
        "Per-step host overhead as the history grows, on the real path: the `wharf` binary (`wharf run`) with the \
         real `llm-deepseek` component ({adapter}) speaking HTTP to the loopback wire mock (`wharf-mock-llm`), \
         {STEPS} steps with one `fs` read of a ~{} KiB file each ({runs} sessions, {session_s:.1} s each). \
         Overhead: from the end of one response stream until the next request's body is complete at the mock \
         (head: until its head arrived); each figure is the median of the {WINDOW} steps ending there. \
         Baselines for the same request size, measured in the same run: writing its bytes over loopback TCP, \
         and a native client building, encoding (`serde_json`) and writing the same history.\n\n\
         | step | request | overhead (body complete) | head arrived | ratio to step {} | write the bytes | native encode + write |\n\
         | --- | --- | --- | --- | --- | --- | --- |\n",
        FILE_BYTES / 1024,
        first.step,
        adapter = wharf_tests::plugin(wharf_tests::plugins::LLM_DEEPSEEK).display(),
    );
    for a in &at {
        md.push_str(&format!(
            "| {} | {:.0} KiB | {:.2} ms | {:.2} ms | {:.1}× | {:.2} ms | {:.2} ms |\n",
            a.step,
            a.len as f64 / 1024.0,
            ms(a.body),
            ms(a.head),
            a.body / first.body.max(1.0),
            ms(a.write),
            ms(a.native),
        ));
    }
    md.push_str(&format!(
        "\nTarget: overhead at step {} ≤ 1.5 × step {} + writing step {}'s bytes = {:.2} ms; measured {:.2} ms: {}. \
         Growth beyond the bytes (step {} − step {} − write): {:.2} ms.\n",
        last.step,
        first.step,
        last.step,
        ms(limit),
        ms(last.body),
        if met { "met" } else { "not met" },
        last.step,
        first.step,
        ms(last.body - first.body - last.write),
    ));
    let rows: Vec<Value> = at
        .iter()
        .map(|a| {
            json!({"step": a.step, "request_bytes": a.len, "overhead_ms": ms(a.body), "head_ms": ms(a.head),
                "write_bytes_ms": ms(a.write), "native_encode_write_ms": ms(a.native)})
        })
        .collect();
    let report = json!({"steps": STEPS, "file_bytes": FILE_BYTES, "runs": runs, "session_s": session_s,
        "at": rows, "limit_ms": ms(limit), "met": met});
    let out = wharf_tests::target_dir().join("bench");
    std::fs::create_dir_all(&out)?;
    std::fs::write(out.join("long_session.md"), &md)?;
    std::fs::write(out.join("long_session.json"), serde_json::to_string_pretty(&report)?)?;
    println!("{md}");
    Ok(())
}
