//! `wharf run` end to end with real components: event order, exit codes,
//! step budget, kill -9 and resume, fork, export, a torn last line.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::Value;
use wharf_core::events::Event;
use wharf_tests::plugins;

struct Env {
    home: tempfile::TempDir,
    ws: tempfile::TempDir,
    sessions: PathBuf,
}

fn env() -> Env {
    let home = tempfile::tempdir().expect("creating a temp dir");
    let ws = tempfile::tempdir().expect("creating a temp dir");
    std::fs::write(ws.path().join("README.md"), "# Sample\n\nA sample project.\n").expect("writing README.md");
    let sessions = home.path().join("sessions");
    Env { home, ws, sessions }
}

impl Env {
    fn wharf(&self) -> Command {
        // Built components must exist before the binary resolves ${plugin_dir}.
        let _ = wharf_tests::plugin(plugins::FS);
        let mut c = wharf_tests::wharf(self.home.path());
        c.current_dir(self.ws.path());
        c
    }

    fn profile(&self, name: &str, turns: &str, extra: &str) -> PathBuf {
        let text = format!(
            r#"
[agent]
adapter = "scripted"
max_steps = 10
{extra}

[[plugin]]
id = "fs"
path = "${{plugin_dir}}/fs.wasm"
[plugin.grant]
dirs = ["${{workspace}}:rw"]

[[plugin]]
id = "scripted"
path = "${{plugin_dir}}/llm-scripted.wasm"
[plugin.config]
model = "scripted-test"
{turns}
"#
        );
        let path = self.home.path().join(format!("{name}.toml"));
        std::fs::write(&path, text).expect("writing the file");
        path
    }

    fn run(&self, profile: &Path, task: &str, extra: &[&str]) -> (i32, Vec<Value>, String) {
        let sessions = self.sessions.display().to_string();
        let profile = profile.display().to_string();
        let mut args = vec!["run", task, "--profile", &profile, "--session-dir", &sessions, "--output", "jsonl"];
        args.extend_from_slice(extra);
        let out = self.wharf().args(&args).output().expect("running wharf");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let events = wharf_tests::json_lines(&stdout).expect("wharf run prints JSON lines");
        (out.status.code().unwrap_or(-1), events, String::from_utf8_lossy(&out.stderr).into_owned())
    }

    fn log(&self, id: &str) -> Vec<Event> {
        let store = wharf_core::SessionStore::new(&self.sessions);
        store.load(id).expect("loading the session").events
    }
}

fn types(events: &[Value]) -> Vec<String> {
    events.iter().map(|e| e["type"].as_str().unwrap_or("").to_string()).filter(|t| t != "assistant/chunk").collect()
}

fn session_id(events: &[Value]) -> String {
    events
        .iter()
        .find(|e| e["type"] == "session/start")
        .map(|e| e["data"]["id"].as_str().unwrap_or("").to_string())
        .unwrap_or_default()
}

const TWO_STEP: &str = r#"
[[plugin.config.turns]]
reasoning = "Read it."
text = "Reading."
tool_calls = [{ name = "read", arguments = { path = "README.md" } }]

[[plugin.config.turns]]
text = "It is a sample project."
"#;

#[test]
fn two_step_turn_logs_events_in_order() -> anyhow::Result<()> {
    let e = env();
    let p = e.profile("two", TWO_STEP, "");
    let (code, events, err) = e.run(&p, "What is this?", &[]);
    assert_eq!(code, 0, "{err}");
    let t = types(&events);
    let expected = [
        "session/start",
        "plugin/loaded",
        "plugin/loaded",
        "turn/start",
        "user/message",
        "step/start",
        "assistant/message",
        "tool/call",
        "tool/result",
        "step/end",
        "step/start",
        "assistant/message",
        "step/end",
        "turn/end",
    ];
    let filtered: Vec<&str> = t.iter().map(String::as_str).filter(|x| expected.contains(x)).collect();
    assert_eq!(filtered, expected, "full sequence: {t:?}");
    // Streamed chunks precede each assistant message.
    assert!(events.iter().any(|e| e["type"] == "assistant/chunk"));
    // The tool result names the plugin version that produced it.
    let result = events.iter().find(|e| e["type"] == "tool/result").unwrap_or_else(|| panic!("no result"));
    assert_eq!(result["data"]["plugin"], "fs");
    assert_eq!(result["data"]["version"].as_str().map(str::len), Some(64));
    assert!(result["data"]["content"].as_str().unwrap_or("").contains("A sample project"));
    let loaded =
        events.iter().find(|e| e["type"] == "plugin/loaded" && e["data"]["id"] == "fs").unwrap_or(&Value::Null);
    assert_eq!(loaded["data"]["digest"], result["data"]["version"]);
    let end = events.last().unwrap_or(&Value::Null);
    assert_eq!(end["data"]["reason"], "completed");
    // The stored log is the same stream and satisfies the invariants.
    let log = e.log(&session_id(&events));
    assert_eq!(log.len(), events.len());
    wharf_core::invariants::check(&log).map_err(anyhow::Error::msg).context("checking the log's invariants")?;
    Ok(())
}

#[test]
fn step_budget_ends_with_max_steps_and_exit_1() {
    let e = env();
    let turns = r#"
[[plugin.config.turns]]
tool_calls = [{ name = "list", arguments = { path = "." } }]
[[plugin.config.turns]]
tool_calls = [{ name = "list", arguments = { path = "." } }]
[[plugin.config.turns]]
text = "done"
"#;
    let p = e.profile("budget", turns, "");
    let (code, events, _) = e.run(&p, "loop", &["--max-steps", "1"]);
    assert_eq!(code, 1);
    assert_eq!(events.last().map(|e| e["data"]["reason"].clone()), Some(Value::from("max_steps")));
}

#[test]
fn text_output_and_sessions_commands() -> anyhow::Result<()> {
    let e = env();
    let p = e.profile("two", TWO_STEP, "");
    let sessions = e.sessions.display().to_string();
    let out = e
        .wharf()
        .args(["run", "What is this?", "--profile", &p.display().to_string(), "--session-dir", &sessions])
        .output()
        .context("running wharf run What is this?")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains("⏺ read "), "{stdout}");
    assert!(stdout.contains("It is a sample project."), "{stdout}");
    assert!(stderr.contains("completed"), "{stderr}");
    let id = stderr.split_whitespace().nth(1).unwrap_or("").to_string();

    let list = e
        .wharf()
        .args(["sessions", "list", "--session-dir", &sessions])
        .output()
        .context("running wharf sessions list")?;
    assert!(String::from_utf8_lossy(&list.stdout).contains(&id));
    let show = e
        .wharf()
        .args(["sessions", "show", &id, "--session-dir", &sessions])
        .output()
        .context("running wharf sessions show")?;
    let show_out = String::from_utf8_lossy(&show.stdout);
    assert!(show_out.contains("What is this?") && show_out.contains("tokens"), "{show_out}");
    let export = e
        .wharf()
        .args(["sessions", "export", &id, "--session-dir", &sessions])
        .output()
        .context("running wharf sessions export")?;
    let lines = String::from_utf8_lossy(&export.stdout).lines().count();
    assert_eq!(lines, e.log(&id).len());

    // Fork at the end of the first turn: a new session with the prefix.
    let log = e.log(&id);
    let end = log.iter().rev().find(|ev| ev.type_name() == "turn/end").map(|ev| ev.seq).unwrap_or(0);
    let fork = e
        .wharf()
        .args(["sessions", "fork", &id, "--at", &end.to_string(), "--session-dir", &sessions])
        .output()
        .context("running wharf sessions fork")?;
    assert_eq!(fork.status.code(), Some(0), "{}", String::from_utf8_lossy(&fork.stderr));
    let fork_id = String::from_utf8_lossy(&fork.stdout).trim().to_string();
    let forked = e.log(&fork_id);
    assert_eq!(wharf_core::derive_messages(&forked), wharf_core::derive_messages(&log));
    // A fork point inside a turn (its first step's start) is refused.
    let inside = log
        .iter()
        .find(|ev| matches!(ev.kind, wharf_core::events::EventKind::StepStart(_)))
        .map(|ev| ev.seq.to_string())
        .unwrap_or_else(|| panic!("no step"));
    let bad = e
        .wharf()
        .args(["sessions", "fork", &id, "--at", &inside, "--session-dir", &sessions])
        .output()
        .context("running wharf sessions fork")?;
    assert_eq!(bad.status.code(), Some(2));
    Ok(())
}

#[test]
fn kill_9_then_resume_continues_cleanly() -> anyhow::Result<()> {
    let e = env();
    // A slow script: each batch waits, so the process is mid-turn when killed.
    let turns = r#"
chunk_size = 4

[[plugin.config.turns]]
text = "Reading the file slowly, chunk by chunk, so there is time to kill me."
delay_ms = 150
tool_calls = [{ name = "read", arguments = { path = "README.md" } }]

[[plugin.config.turns]]
text = "Resumed and finished."
"#;
    let p = e.profile("slow", turns, "");
    let sessions = e.sessions.display().to_string();
    let mut child = e
        .wharf()
        .args(["run", "go", "--profile", &p.display().to_string(), "--session-dir", &sessions, "--output", "jsonl"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("spawning wharf run go")?;
    // Wait until the turn has started streaming, then kill -9.
    let t0 = Instant::now();
    let id = loop {
        assert!(t0.elapsed() < Duration::from_secs(60), "run never started streaming");
        std::thread::sleep(Duration::from_millis(50));
        let Ok(entries) = std::fs::read_dir(&e.sessions) else { continue };
        let mut found = None;
        for entry in entries.flatten() {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            if text.contains("assistant/chunk") {
                found = entry.path().file_stem().map(|s| s.to_string_lossy().into_owned());
            }
        }
        if let Some(id) = found {
            break id;
        }
    };
    let _ = child.kill();
    let _ = child.wait();

    // The log loads; resuming repairs (appends, never rewrites) and continues.
    let before = std::fs::read(e.sessions.join(format!("{id}.jsonl"))).unwrap_or_default();
    let (code, events, err) = e.run(&p, "continue", &["--resume", &id]);
    assert_eq!(code, 0, "{err}");
    let after = std::fs::read(e.sessions.join(format!("{id}.jsonl"))).unwrap_or_default();
    assert!(after.starts_with(&before[..before.len().saturating_sub(1)]), "history was rewritten");
    let log = e.log(&id);
    let reasons: Vec<String> = log
        .iter()
        .filter(|ev| ev.type_name() == "turn/end")
        .map(|ev| serde_json::to_value(&ev.kind).map(|v| v["data"]["reason"].to_string()).unwrap_or_default())
        .collect();
    assert_eq!(reasons, vec!["\"interrupted\"".to_string(), "\"completed\"".to_string()], "{reasons:?}");
    wharf_core::invariants::check(&log).map_err(anyhow::Error::msg).context("checking the log's invariants")?;
    assert!(types(&events).contains(&"turn/end".to_string()));
    Ok(())
}

#[test]
fn torn_last_line_is_reported_and_earlier_events_load() -> anyhow::Result<()> {
    let e = env();
    let p = e.profile("two", TWO_STEP, "");
    let (code, events, _) = e.run(&p, "What is this?", &[]);
    assert_eq!(code, 0);
    let id = session_id(&events);
    let path = e.sessions.join(format!("{id}.jsonl"));
    let mut bytes = std::fs::read(&path).unwrap_or_default();
    let n = e.log(&id).len();
    bytes.extend_from_slice(br#"{"seq":999,"time":"2026-01-01T00:00:00.000Z","type":"user/mess"#);
    std::fs::write(&path, &bytes).context("writing the file")?;
    let sessions = e.sessions.display().to_string();
    let show = e
        .wharf()
        .args(["sessions", "show", &id, "--session-dir", &sessions])
        .output()
        .context("running wharf sessions show")?;
    assert_eq!(show.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&show.stderr).to_lowercase().contains("torn"),
        "{}",
        String::from_utf8_lossy(&show.stderr)
    );
    assert_eq!(e.log(&id).len(), n);
    let (code, _, err) = e.run(&p, "again", &["--resume", &id]);
    assert_eq!(code, 0, "{err}");
    wharf_core::invariants::check(&e.log(&id)).map_err(anyhow::Error::msg).context("checking the log's invariants")?;
    Ok(())
}

#[test]
fn a_broken_plugin_stops_the_start_with_a_clear_error() -> anyhow::Result<()> {
    let e = env();
    let text = r#"
[[plugin]]
id = "bad"
path = "/no/such/component.wasm"
"#;
    let path = e.home.path().join("bad.toml");
    std::fs::write(&path, text).context("writing the file")?;
    let out = e
        .wharf()
        .args(["run", "x", "--profile", &path.display().to_string()])
        .output()
        .context("running wharf run x")?;
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad") && err.contains("/no/such/component.wasm"), "{err}");
    Ok(())
}

#[test]
fn replay_reruns_a_recorded_sessions_model_outputs() {
    let e = env();
    let p = e.profile("two", TWO_STEP, "");
    let (code, events, err) = e.run(&p, "What is this?", &[]);
    assert_eq!(code, 0, "{err}");
    let id = session_id(&events);
    // Replay through a profile whose own model would say something else.
    let other = e.profile("other", "[[plugin.config.turns]]\ntext = \"a different answer\"\n", "");
    let (code, replayed, err) = e.run(&other, "What is this?", &["--replay", &id]);
    assert_eq!(code, 0, "{err}");
    let assistant = |evs: &[Value]| -> Vec<(String, Value)> {
        evs.iter()
            .filter(|e| e["type"] == "assistant/message")
            .map(|e| (e["data"]["content"].as_str().unwrap_or("").to_string(), e["data"]["tool_calls"].clone()))
            .collect()
    };
    assert_eq!(assistant(&replayed), assistant(&events));
    // The tools ran again for real, through the same component.
    let result = replayed.iter().find(|e| e["type"] == "tool/result").unwrap_or(&Value::Null);
    assert!(result["data"]["content"].as_str().unwrap_or("").contains("A sample project"));
    assert!(replayed.iter().any(|e| e["type"] == "plugin/loaded" && e["data"]["id"] == "replay"));
    // A session that does not exist is a clear error.
    let (code, _, err) = e.run(&other, "x", &["--replay", "no-such-session"]);
    assert_eq!(code, 2, "{err}");
}
