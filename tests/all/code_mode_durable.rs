//! Durable Code Mode programs (issue 38 item 3), through the binary: a
//! `wharf run` killed with SIGKILL in the middle of a program, then `wharf
//! run --resume` with the DeepSeek adapter against `wharf-mock-llm`. The
//! resumed host re-runs the program with its logged inner calls answered
//! from the log (`wharf_core::durable`): nothing that had a result runs
//! again, the call in flight at the crash is an `INTERRUPTED` error the
//! program catches, the clock and random numbers replay, and a program that
//! asks for other calls than its log's ends with `REPLAY_DIVERGED`. A
//! durable program that had yielded (a cell) when the host died is re-run
//! the same way as a cell of the resumed session, and `resume` collects it.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::Context;
use serde_json::{Value, json};
use wharf_mock_llm::MockLlm;

use crate::code_mode::{
    code_row, deepseek_row, mcp_row, mock, parse_events, profile_text, run_command, spawn_streamed, stored, stream,
    until_inner_calls, write_profile,
};
use crate::policy::{Env, env};

/// A durable `code` row, the MCP fixture (`mcp__fx__slow`) when `with_mcp`,
/// and the DeepSeek adapter against `mock`.
fn durable_profile(env: &Env, name: &str, mock: &MockLlm, with_mcp: bool) -> PathBuf {
    let mcp = if with_mcp { mcp_row() } else { String::new() };
    let rows = format!("{}{mcp}{}", code_row("tools = true\ntimeout_ms = 120000\ndurable = true"), deepseek_row(mock));
    write_profile(env, name, &profile_text("model", &rows))
}

/// Starts `wharf run` whose model calls `run_code` with `args`, waits until
/// the program's call of `mcp__fx__slow` is logged, kills the process with
/// SIGKILL and returns the session id.
fn crash_mid_program(env: &Env, args: Value) -> anyhow::Result<String> {
    let first = mock(vec![stream(
        json!({"tool_calls": [{"id": "call_code", "name": "run_code", "arguments": args.to_string()}]}),
    )]);
    let profile = durable_profile(env, "crash", &first, true);
    let (mut child, rx) = spawn_streamed(env, &profile, "Run the program.");
    let lines = until_inner_calls(&rx, "mcp__fx__slow", 1);
    std::thread::sleep(Duration::from_millis(300));
    child.kill().context("killing wharf run")?;
    let _ = child.wait().context("waiting for wharf run")?;
    let id = parse_events(&lines.join("\n"))
        .iter()
        .find(|e| e["type"] == "session/start")
        .and_then(|e| e["data"]["id"].as_str().map(str::to_string))
        .context("no session/start before the kill")?;
    Ok(id)
}

/// The crashed log as JSON values (a valid prefix).
fn crashed_log(env: &Env, id: &str) -> anyhow::Result<Vec<Value>> {
    let log = wharf_core::SessionStore::new(&env.sessions).load(id).context("loading the crashed session")?;
    wharf_core::invariants::check_prefix(&log.events).map_err(anyhow::Error::msg).context("the crashed prefix")?;
    Ok(log.events.iter().map(|e| serde_json::to_value(e).unwrap_or_default()).collect())
}

/// `wharf run --resume ID` with a model answering `text`: the exit code,
/// the stored log (checked against the invariants) and the mock.
fn resume(env: &Env, id: &str, with_mcp: bool) -> (i32, Vec<Value>, MockLlm, String) {
    let m = mock(vec![stream(json!({"text": "The program is done."}))]);
    let profile = durable_profile(env, "resume", &m, with_mcp);
    let out = run_command(env, &profile, "Go on.").args(["--resume", id]).output().expect("running wharf run --resume");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let events = stored(env, id).iter().map(|e| serde_json::to_value(e).unwrap_or_default()).collect();
    (out.status.code().unwrap_or(-1), events, m, stderr)
}

fn of<'a>(events: &'a [Value], ty: &str, id: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == ty && (e["data"]["call_id"] == id || e["data"]["id"] == id)).collect()
}

fn inner_ids(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == "tool/call" && e["data"]["parent"] == "call_code")
        .filter_map(|e| e["data"]["id"].as_str().map(str::to_string))
        .collect()
}

fn has_result(events: &[Value], id: &str) -> bool {
    !of(events, "tool/result", id).is_empty()
}

fn mtime(path: &Path) -> SystemTime {
    std::fs::metadata(path).and_then(|m| m.modified()).unwrap_or(SystemTime::UNIX_EPOCH)
}

/// What a durable program's crash and resume must show, for either
/// language: `seen` was written before the crash with the program's first
/// random number and clock reading, then `n1.txt`…`n8.txt` one write each.
fn check_resumed(env: &Env, id: &str, crashed: &[Value]) -> anyhow::Result<Value> {
    let before: Vec<String> = inner_ids(crashed);
    let done_before: Vec<&String> = before.iter().filter(|i| has_result(crashed, i)).collect();
    let open_before: Vec<&String> = before.iter().filter(|i| !has_result(crashed, i)).collect();
    // The write, four numbered writes; the slow call in flight.
    assert_eq!(done_before.len(), 5, "{crashed:#?}");
    assert_eq!(open_before.len(), 1, "{crashed:#?}");
    let seen_path = env.path("seen.txt");
    let seen_before = std::fs::read_to_string(&seen_path).context("reading seen.txt")?;
    let seen_mtime = mtime(&seen_path);
    let numbered = |i: usize| env.path(&format!("n{i}.txt"));
    let written: Vec<SystemTime> = (1..=4).map(|i| mtime(&numbered(i))).collect();
    for i in 1..=8 {
        assert_eq!(numbered(i).exists(), i <= 4, "n{i}.txt at the crash");
    }

    let (code, events, m, stderr) = resume(env, id, true);
    assert_eq!(code, 0, "{stderr}\n{events:#?}");
    m.assert_no_violations();

    // Every inner call is logged once with one result; those done before
    // the crash were not logged (nor run) again.
    let after = inner_ids(&events);
    assert_eq!(after.len(), 10, "write, 8 numbered writes, slow: {events:#?}");
    for i in &after {
        assert_eq!(of(&events, "tool/call", i).len(), 1, "{i}: {events:#?}");
        assert_eq!(of(&events, "tool/result", i).len(), 1, "{i}: {events:#?}");
    }
    for i in &done_before {
        let now = of(&events, "tool/result", i)[0];
        let then = of(crashed, "tool/result", i)[0];
        assert_eq!(now["seq"], then["seq"], "{i}'s result is the one from before the crash");
    }
    // The call in flight was answered INTERRUPTED (crash repair) and never
    // re-run.
    let slow = of(&events, "tool/result", open_before[0])[0];
    assert_eq!(slow["data"]["error_code"], "INTERRUPTED", "{slow}");
    // Side effects happened once each.
    for i in 1..=8 {
        assert_eq!(std::fs::read_to_string(numbered(i))?, i.to_string(), "n{i}.txt");
    }
    for (i, t) in written.iter().enumerate() {
        assert_eq!(mtime(&numbered(i + 1)), *t, "n{}.txt was written again", i + 1);
    }
    assert_eq!(std::fs::read_to_string(&seen_path)?, seen_before);
    assert_eq!(mtime(&seen_path), seen_mtime, "seen.txt was written again");
    // The replay is logged (ignorable), the program's result under its own
    // id, and the turn the crash cut ended interrupted.
    let replay = events.iter().find(|e| e["type"] == "tool/replay").context("no tool/replay")?;
    assert_eq!(replay["data"]["call"], "call_code", "{replay}");
    assert_eq!(replay["data"]["logged"], 6, "{replay}");
    let result = of(&events, "tool/result", "call_code");
    assert_eq!(result.len(), 1, "{events:#?}");
    assert_eq!(result[0]["data"]["is_error"], false, "{}", result[0]);
    let content = result[0]["data"]["content"].as_str().unwrap_or_default().to_string();
    let ends: Vec<&Value> = events.iter().filter(|e| e["type"] == "turn/end").map(|e| &e["data"]["reason"]).collect();
    assert_eq!(ends, [&json!("interrupted"), &json!("completed")], "{events:#?}");
    // The model of the resumed turn saw the program's result.
    let body = m.requests()[0].body.clone().unwrap_or_default().to_string();
    assert!(body.contains("INTERRUPTED"), "{body}");
    // The program's value (after `result: `).
    let value: Value = content
        .split_once("result: ")
        .and_then(|(_, j)| serde_json::from_str(j.trim()).ok())
        .with_context(|| format!("no result in {content}"))?;
    // The first random number and clock reading are the ones written
    // before the crash (else the write would have diverged too).
    assert_eq!(seen_before, format!("{} {}", value["r"], value["t"]), "{content}");
    Ok(value)
}

/// A JavaScript program: a write, four numbered files, a call in flight at
/// the kill, four more files. `--resume` finishes it with each side effect
/// once, and `Math.random`/`Date.now` replay.
#[test]
fn a_javascript_program_killed_mid_way_is_finished_by_resume_without_rerunning_a_call() -> anyhow::Result<()> {
    let env = env();
    let program = r#"
const r = Math.random(), t = Date.now();
await tools.write({path: "seen.txt", content: `${r} ${t}`});
const add = (i) => tools.write({path: `n${i}.txt`, content: `${i}`});
for (let i = 1; i <= 4; i++) await add(i);
let slow;
try { slow = await tools.mcp__fx__slow({ms: 60000}); } catch (e) { slow = e.code; }
for (let i = 5; i <= 8; i++) await add(i);
return {r, t, slow, later: Date.now() > t};
"#;
    let id = crash_mid_program(&env, json!({"language": "javascript", "code": program}))?;
    let crashed = crashed_log(&env, &id)?;
    let value = check_resumed(&env, &id, &crashed)?;
    assert_eq!(value["slow"], "INTERRUPTED", "{value}");
    assert_eq!(value["later"], true, "{value}");
    Ok(())
}

/// The same in Python (Monty): `random.random()` and `time.time()` replay.
#[test]
fn a_python_program_killed_mid_way_is_finished_by_resume_without_rerunning_a_call() -> anyhow::Result<()> {
    let env = env();
    let program = r#"
import random
import time
r = random.random()
t = time.time()
await tools.write(path="seen.txt", content=f"{r} {t}")
for i in range(1, 5):
    await tools.write(path=f"n{i}.txt", content=f"{i}")
try:
    slow = await tools.mcp__fx__slow(ms=60000)
except RuntimeError as e:
    slow = str(e).split(":")[0]
for i in range(5, 9):
    await tools.write(path=f"n{i}.txt", content=f"{i}")
{"r": r, "t": t, "slow": slow, "later": time.time() > t}
"#;
    let id = crash_mid_program(&env, json!({"language": "python", "code": program}))?;
    let crashed = crashed_log(&env, &id)?;
    let value = check_resumed(&env, &id, &crashed)?;
    assert_eq!(value["slow"], "INTERRUPTED", "{value}");
    assert_eq!(value["later"], true, "{value}");
    Ok(())
}

/// A program whose replay asks for another call than its log's (its first
/// write names the tools `tools.search` finds, and the resumed host has no
/// MCP server): the program ends with `REPLAY_DIVERGED`, nothing after the
/// crash runs, nothing before it runs again.
#[test]
fn a_program_whose_replay_diverges_ends_with_the_divergence_and_nothing_is_rerun() -> anyhow::Result<()> {
    let env = env();
    let program = r#"
const found = (await tools.search("slow")).map(t => t.name);
await tools.write({path: "d1.txt", content: "found: " + found.join(",")});
try { await tools.mcp__fx__slow({ms: 60000}); } catch (e) {}
await tools.write({path: "d2.txt", content: "after"});
return "done";
"#;
    let id = crash_mid_program(&env, json!({"code": program}))?;
    let crashed = crashed_log(&env, &id)?;
    let d1 = env.path("d1.txt");
    let d1_text = std::fs::read_to_string(&d1).context("reading d1.txt")?;
    assert!(d1_text.contains("mcp__fx__slow"), "{d1_text}");
    let d1_mtime = mtime(&d1);

    let (code, events, m, stderr) = resume(&env, &id, false);
    assert_eq!(code, 0, "{stderr}\n{events:#?}");
    m.assert_no_violations();
    let result = of(&events, "tool/result", "call_code");
    assert_eq!(result.len(), 1, "{events:#?}");
    assert_eq!(result[0]["data"]["error_code"], "REPLAY_DIVERGED", "{}", result[0]);
    let content = result[0]["data"]["content"].as_str().unwrap_or_default();
    assert!(content.contains("call_code.1") && content.contains("write"), "{content}");
    // Nothing ran again or after: the same inner calls as at the crash.
    assert_eq!(inner_ids(&events), inner_ids(&crashed), "{events:#?}");
    assert!(!env.path("d2.txt").exists(), "the program went on after diverging");
    assert_eq!(std::fs::read_to_string(&d1)?, d1_text);
    assert_eq!(mtime(&d1), d1_mtime, "d1.txt was written again");
    let body = m.requests()[0].body.clone().unwrap_or_default().to_string();
    assert!(body.contains("REPLAY_DIVERGED") || body.contains("diverged"), "{body}");
    Ok(())
}

/// A durable cell (yield window 1 s) killed while the model waits on it with
/// `resume`: `--resume` re-runs it as a cell by replay (its three logged
/// writes answered from the log, the call in flight `INTERRUPTED`, the last
/// two writes run), the resumed model's `resume` collects its result, and
/// every inner call is logged once.
#[test]
fn a_yielded_durable_cell_cut_by_a_crash_is_rerun_and_resume_collects_it() -> anyhow::Result<()> {
    let env = env();
    let program = r#"
console.log("started");
for (let i = 1; i <= 3; i++) await tools.write({path: `c${i}.txt`, content: `${i}`});
let slow;
try { slow = await tools.mcp__fx__slow({ms: 60000}); } catch (e) { slow = e.code; }
console.log("after the crash");
await tools.mcp__fx__slow({ms: 4000});
for (let i = 4; i <= 5; i++) await tools.write({path: `c${i}.txt`, content: `${i}`});
return {slow, written: 5};
"#;
    let call = |id: &str, args: Value| {
        stream(json!({"tool_calls": [{"id": id, "name": "run_code", "arguments": args.to_string()}]}))
    };
    let first = mock(vec![
        call("call_code", json!({"code": program})),
        call("call_wait", json!({"resume": "call_code", "wait_ms": 60000})),
    ]);
    let rows = |m: &MockLlm| {
        format!(
            "{}{}{}",
            code_row("tools = true\ntimeout_ms = 120000\ndurable = true\nyield_ms = 1000"),
            mcp_row(),
            deepseek_row(m)
        )
    };
    let profile = write_profile(&env, "cellcrash", &profile_text("model", &rows(&first)));
    let (mut child, rx) = spawn_streamed(&env, &profile, "Run the program.");
    // Killed once the cell yielded, the model waits on it, and its call of
    // `mcp__fx__slow` is in flight.
    let mut lines = until_inner_calls(&rx, "mcp__fx__slow", 1);
    let waiting = |lines: &[String]| {
        parse_events(&lines.join("\n")).iter().any(|e| e["type"] == "tool/call" && e["data"]["id"] == "call_wait")
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !waiting(&lines) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        lines.push(rx.recv_timeout(left).context("waiting for the model's resume")?);
    }
    std::thread::sleep(Duration::from_millis(300));
    child.kill().context("killing wharf run")?;
    let _ = child.wait().context("waiting for wharf run")?;
    let id = parse_events(&lines.join("\n"))
        .iter()
        .find(|e| e["type"] == "session/start")
        .and_then(|e| e["data"]["id"].as_str().map(str::to_string))
        .context("no session/start before the kill")?;
    let crashed = crashed_log(&env, &id)?;
    let yielded = of(&crashed, "tool/result", "call_code");
    let yielded = yielded.first().and_then(|e| e["data"]["content"].as_str()).context("no yield answer")?;
    assert!(yielded.contains("started"), "{yielded}");
    let written: Vec<SystemTime> = (1..=3).map(|i| mtime(&env.path(&format!("c{i}.txt")))).collect();
    assert!(!env.path("c4.txt").exists(), "c4.txt before the crash");

    // A first look while the re-run cell still runs (in its second
    // `slow`), then the collection.
    let m = mock(vec![
        call("call_peek", json!({"resume": "call_code", "wait_ms": 2000})),
        call("call_collect", json!({"resume": "call_code", "wait_ms": 60000})),
        stream(json!({"text": "Collected."})),
    ]);
    let profile = write_profile(&env, "cellresume", &profile_text("model", &rows(&m)));
    let out =
        run_command(&env, &profile, "Collect it.").args(["--resume", &id]).output().context("wharf run --resume")?;
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let events: Vec<Value> = stored(&env, &id).iter().map(|e| serde_json::to_value(e).unwrap_or_default()).collect();
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{events:#?}");
    m.assert_no_violations();

    // The re-run cell's output is produced again from its start; the peek
    // shows only what the model had not seen before the crash.
    let peek = of(&events, "tool/result", "call_peek");
    let peek = peek.first().and_then(|e| e["data"]["content"].as_str()).context("no result of call_peek")?;
    assert!(peek.contains("is still running"), "{peek}");
    assert!(peek.contains("after the crash"), "{peek}");
    assert!(!peek.contains("started"), "output shown before the crash was shown again: {peek}");
    let collected = of(&events, "tool/result", "call_collect");
    assert_eq!(collected.len(), 1, "{events:#?}");
    let content = collected[0]["data"]["content"].as_str().unwrap_or_default();
    assert!(content.contains("cell call_code ended"), "{content}");
    assert!(content.contains(r#"result: {"slow":"INTERRUPTED","written":5}"#), "{content}");
    // The wait the crash cut was answered INTERRUPTED (crash repair).
    assert_eq!(of(&events, "tool/result", "call_wait")[0]["data"]["error_code"], "INTERRUPTED", "{events:#?}");
    let replay = events.iter().find(|e| e["type"] == "tool/replay").context("no tool/replay")?;
    assert_eq!(replay["data"], json!({"call": "call_code", "tool": "run_code", "logged": 4, "cell": true}), "{replay}");
    // Each inner call once, with one result; the three before the crash
    // kept their results; side effects once each.
    let after = inner_ids(&events);
    assert_eq!(after.len(), 7, "three writes, slow, slow, two writes: {events:#?}");
    for i in &after {
        assert_eq!(of(&events, "tool/call", i).len(), 1, "{i}: {events:#?}");
        assert_eq!(of(&events, "tool/result", i).len(), 1, "{i}: {events:#?}");
    }
    for i in inner_ids(&crashed).iter().filter(|i| has_result(&crashed, i)) {
        assert_eq!(of(&events, "tool/result", i)[0]["seq"], of(&crashed, "tool/result", i)[0]["seq"], "{i}");
    }
    for i in 1..=5 {
        assert_eq!(std::fs::read_to_string(env.path(&format!("c{i}.txt")))?, i.to_string(), "c{i}.txt");
    }
    for (i, t) in written.iter().enumerate() {
        assert_eq!(mtime(&env.path(&format!("c{}.txt", i + 1))), *t, "c{}.txt was written again", i + 1);
    }
    let states: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool/cell" && e["data"]["cell"] == "call_code")
        .map(|e| &e["data"]["state"])
        .collect();
    // Yielded (with the bytes shown), still running at the peek, finished.
    assert_eq!(states, [&json!("running"), &json!("running"), &json!("finished")], "{events:#?}");
    Ok(())
}
