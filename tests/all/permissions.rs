//! Permission presets end to end, in a profile equal to the shipped
//! `default` one with the scripted model in place of DeepSeek: `wharf chat`
//! (through a pseudo-terminal) asks before `bash` and `write` and takes
//! y / a / n, `/permissions read-only` then denies without asking; a
//! headless turn (in-process, as `wharf run`) runs the `ask` preset as
//! `auto` and never waits for an answer; ACP `session/new` reports the
//! presets as modes and `session/set_mode` switches them.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};

use crate::chat::Pty;
use wharf_tests::{Plugin, plugins};

const TIMEOUT: Duration = Duration::from_secs(60);

/// Every component the default profile loads, plus the scripted model.
const DEFAULT_PLUGINS: &[Plugin] = &[
    plugins::FS,
    plugins::SHELL,
    plugins::WEB,
    plugins::TODO,
    plugins::SKILLS,
    plugins::CONTEXT,
    plugins::COMPACTION,
    plugins::SUBAGENT,
    plugins::POLICY_RULES,
    plugins::LLM_SCRIPTED,
];

struct Env {
    home: tempfile::TempDir,
    ws: tempfile::TempDir,
    sessions: PathBuf,
}

fn env() -> Env {
    for &p in DEFAULT_PLUGINS {
        let _ = wharf_tests::plugin(p);
    }
    let home = tempfile::tempdir().expect("creating a temp dir");
    let ws = tempfile::tempdir().expect("creating a temp dir");
    std::fs::write(ws.path().join("README.md"), "# Sample\n").expect("writing README.md");
    let sessions = home.path().join("sessions");
    Env { home, ws, sessions }
}

impl Env {
    /// The shipped default profile with its DeepSeek row replaced by the
    /// scripted model playing `turns` (TOML `[[plugin.config.turns]]` rows).
    fn default_profile(&self, turns: &str) -> PathBuf {
        let shipped = std::fs::read_to_string(wharf_tests::root().join("profiles/default.toml"))
            .expect("reading profiles/default.toml");
        let start = shipped.find("[[plugin]]\nid = \"deepseek\"").unwrap_or_else(|| panic!("no deepseek row"));
        let end = shipped[start + 1..].find("\n[[plugin]]").map_or(shipped.len(), |i| start + 2 + i);
        assert!(shipped.contains("id = \"permissions\""), "the default profile has no permissions row");
        let mut text = format!("{}{}", &shipped[..start], &shipped[end..]);
        assert!(text.contains("adapter = \"deepseek\""));
        text = text.replacen("adapter = \"deepseek\"", "adapter = \"scripted\"", 1);
        text.push_str(&format!(
            "\n[[plugin]]\nid = \"scripted\"\npath = \"${{plugin_dir}}/llm-scripted.wasm\"\n[plugin.config]\nmodel = \
             \"scripted-permissions\"\n{turns}\n"
        ));
        let path = self.home.path().join("default-scripted.toml");
        std::fs::write(&path, text).expect("writing the file");
        path
    }

    fn events(&self) -> Vec<Value> {
        let store = wharf_core::SessionStore::new(&self.sessions);
        let list = store.list().expect("listing the sessions");
        let last = list.last().unwrap_or_else(|| panic!("no session"));
        let loaded = store.load(&last.id).expect("loading the session");
        wharf_core::invariants::check(&loaded.events).expect("checking the log's invariants");
        loaded.events.iter().map(|e| serde_json::to_value(e).unwrap_or_default()).collect()
    }
}

/// The tool calls of a log, in order: (tool name, call id).
fn calls(events: &[Value]) -> Vec<(String, String)> {
    events
        .iter()
        .filter(|e| e["type"] == "tool/call")
        .map(|e| (e["data"]["name"].as_str().unwrap_or("").into(), e["data"]["id"].as_str().unwrap_or("").into()))
        .collect()
}

/// `approval/decided` of `call` as (outcome, by); `None` when nobody was asked.
fn decided(events: &[Value], call: &str) -> Option<(String, String)> {
    let asked = events.iter().any(|e| e["type"] == "approval/asked" && e["data"]["call_id"] == call);
    let d = events.iter().find(|e| e["type"] == "approval/decided" && e["data"]["call_id"] == call);
    assert_eq!(asked, d.is_some(), "asked and decided disagree for {call}");
    d.map(|d| (d["data"]["outcome"].as_str().unwrap_or("").into(), d["data"]["by"].as_str().unwrap_or("").into()))
}

/// The host's verdict on `call` (`allow`, `deny`, `ask` …).
fn verdict(events: &[Value], call: &str) -> String {
    let d = events.iter().find(|e| e["type"] == "policy/decision" && e["data"]["call_id"] == call);
    let d = d.unwrap_or_else(|| panic!("no policy/decision for {call}"));
    d["data"]["verdict"].as_str().unwrap_or("").to_string()
}

fn turn(tool: &str, args: Value) -> String {
    // The arguments as a JSON string (the scripted model takes either).
    let args = serde_json::to_string(&args.to_string()).unwrap_or_default();
    format!("\n[[plugin.config.turns]]\ntool_calls = [{{ name = \"{tool}\", arguments = {args} }}]\n")
}

fn text_turn(text: &str) -> String {
    format!("\n[[plugin.config.turns]]\ntext = \"{text}\"\n")
}

#[test]
fn chat_asks_before_bash_and_write_and_permissions_switches() {
    let e = env();
    let mut turns = String::new();
    turns += &turn("bash", json!({"command": "echo one"}));
    turns += &turn("write", json!({"path": "a.txt", "content": "a"}));
    turns += &turn("write", json!({"path": "b.txt", "content": "b"}));
    turns += &turn("bash", json!({"command": "echo two"}));
    turns += &text_turn("First done.");
    turns += &turn("write", json!({"path": "d.txt", "content": "d"}));
    turns += &text_turn("Second done.");
    let profile = e.default_profile(&turns);
    let mut cmd = wharf_tests::wharf(e.home.path());
    cmd.args(["chat", "--profile", &profile.display().to_string()])
        .args(["--session-dir", &e.sessions.display().to_string()])
        .current_dir(e.ws.path())
        .env("TERM", "dumb");
    let mut t = Pty::spawn(cmd);
    t.expect("› ");
    t.line("/permissions");
    t.expect("permissions: ask");
    t.expect("* ask");
    t.line("do the work");
    t.expect("approval needed: bash");
    t.expect("allow? [y]es once");
    t.line("y");
    t.expect("approval needed: write ");
    t.expect("allow?");
    t.line("a");
    // b.txt is covered by the session grant; the second bash asks again
    // (the first answer was for once only).
    t.expect("approval needed: bash");
    t.expect("allow?");
    t.line("n");
    t.expect("First done.");
    t.expect("› ");
    t.line("/permissions read-only");
    t.expect("permissions: read-only —");
    t.line("/permissions nonsense");
    t.expect("unknown permission preset `nonsense`");
    t.line("write another");
    t.expect("Second done.");
    t.expect("› ");
    t.line("/quit");
    assert!(t.wait().success(), "wharf chat exited with an error:\n{}", t.screen());

    let screen = t.screen();
    assert_eq!(screen.matches("approval needed").count(), 3, "{screen}");
    assert!(e.ws.path().join("a.txt").exists() && e.ws.path().join("b.txt").exists());
    assert!(!e.ws.path().join("d.txt").exists(), "read-only let a write through");

    let events = e.events();
    let c = calls(&events);
    let names: Vec<&str> = c.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["bash", "write", "write", "bash", "write"], "{events:#?}");
    let by_user = |o: &str| Some((o.to_string(), "chat(user)".to_string()));
    assert_eq!(decided(&events, &c[0].1), by_user("allowed-once"));
    assert_eq!(decided(&events, &c[1].1), by_user("allowed-for-session"));
    assert_eq!(decided(&events, &c[2].1), Some(("allowed-for-session".into(), "session-grant".into())));
    assert_eq!(decided(&events, &c[3].1), by_user("rejected"));
    assert_eq!(decided(&events, &c[4].1), None, "read-only must deny without asking");
    assert_eq!(verdict(&events, &c[4].1), "deny");
    let result = events.iter().find(|ev| ev["type"] == "tool/result" && ev["data"]["call_id"] == c[4].1.as_str());
    let result = result.map(Value::to_string).unwrap_or_default();
    assert!(result.contains("read-only mode"), "{result}");
}

#[tokio::test(flavor = "multi_thread")]
async fn headless_run_uses_auto_and_never_waits() -> anyhow::Result<()> {
    let e = env();
    let outside = e.home.path().join("outside.txt");
    let mut turns = String::new();
    turns += &turn("write", json!({"path": "inside.txt", "content": "in"}));
    turns += &turn("write", json!({"path": outside.display().to_string(), "content": "out"}));
    turns += &turn("bash", json!({"command": "echo hi"}));
    turns += &text_turn("Done.");
    let profile = e.default_profile(&turns);
    let host = wharf_tests::host::TestHost::builder()
        .profile(profile.display().to_string())
        .home(e.home.path())
        .workspace(e.ws.path())
        .sessions(&e.sessions)
        .start_in(e.home.path())
        .await?;
    let run = tokio::time::timeout(TIMEOUT, host.run("write the files")).await;
    let notices = host.notices();
    host.close().await;
    let run = run.unwrap_or_else(|_| panic!("the headless turn hung (waiting for an approval?)"))?;
    assert_eq!(run.exit_code(), 0, "the turn failed: {:?}\n{notices:?}", run.summary);
    assert_eq!(std::fs::read_to_string(e.ws.path().join("inside.txt")).ok().as_deref(), Some("in"));
    assert!(!outside.exists(), "a write outside the workspace ran unasked");

    let events = e.events();
    let c = calls(&events);
    assert_eq!(c.len(), 3, "{events:#?}");
    // Inside the workspace and the sandboxed bash: the `auto` preset allows.
    assert_eq!(verdict(&events, &c[0].1), "allow");
    assert_eq!(decided(&events, &c[0].1), None);
    assert_eq!(verdict(&events, &c[2].1), "allow");
    assert_eq!(decided(&events, &c[2].1), None);
    // Outside: asked, and the headless rule (agent.ask = deny) answers.
    let (outcome, _) = decided(&events, &c[1].1).unwrap_or_else(|| panic!("the outside write was not asked"));
    assert_eq!(outcome, "rejected");
    let vote = events.iter().find(|ev| ev["type"] == "policy/decision" && ev["data"]["call_id"] == c[1].1.as_str());
    assert!(vote.map(Value::to_string).unwrap_or_default().contains("auto mode"), "{vote:?}");
    Ok(())
}

#[test]
fn acp_session_modes_are_the_presets_and_set_mode_switches() -> anyhow::Result<()> {
    let e = env();
    let mut turns = String::new();
    turns += &turn("write", json!({"path": "x.txt", "content": "x"}));
    turns += &text_turn("Done.");
    let profile = e.default_profile(&turns);
    let mut cmd = wharf_tests::wharf(e.home.path());
    cmd.args(["acp", "--profile", &profile.display().to_string()])
        .args(["--session-dir", &e.sessions.display().to_string()])
        .current_dir(e.home.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut c = Rpc::spawn(cmd);
    let cwd = std::fs::canonicalize(e.ws.path()).context("canonicalizing the workspace")?.display().to_string();
    c.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": {}}))?;
    let new = c.call("session/new", json!({"cwd": cwd, "mcpServers": []}))?;
    let r = &new["result"];
    assert_eq!(r["modes"]["currentModeId"], "ask", "{new}");
    let ids: Vec<&str> =
        r["modes"]["availableModes"].as_array().into_iter().flatten().filter_map(|m| m["id"].as_str()).collect();
    assert_eq!(ids, ["read-only", "ask", "auto", "full-access"]);
    let sid = r["sessionId"].as_str().unwrap_or_default().to_string();

    let bad = c.call("session/set_mode", json!({"sessionId": sid, "modeId": "yolo"}))?;
    assert!(bad["error"]["message"].as_str().is_some_and(|m| m.contains("unknown permission preset")), "{bad}");
    let ok = c.call("session/set_mode", json!({"sessionId": sid, "modeId": "read-only"}))?;
    assert!(ok.get("error").is_none(), "{ok}");
    // A second session in the workspace sees the switch.
    let other = c.call("session/new", json!({"cwd": cwd, "mcpServers": []}))?;
    assert_eq!(other["result"]["modes"]["currentModeId"], "read-only", "{other}");

    // The write is denied without a permission request.
    let done = c.call("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "write"}]}))?;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    assert!(!c.seen.iter().any(|m| m["method"] == "session/request_permission"), "asked in read-only mode");
    assert!(!e.ws.path().join("x.txt").exists());
    let store = wharf_core::SessionStore::new(&e.sessions);
    let events: Vec<Value> = store
        .load(&sid)
        .context("loading the session")?
        .events
        .iter()
        .map(|ev| serde_json::to_value(ev).unwrap_or_default())
        .collect();
    let w = calls(&events);
    assert_eq!(w.len(), 1);
    assert_eq!(verdict(&events, &w[0].1), "deny");
    assert_eq!(decided(&events, &w[0].1), None);
    Ok(())
}

/// A JSON-RPC peer over a child's stdio (requests answered in order).
struct Rpc {
    child: Child,
    stdin: ChildStdin,
    rx: Receiver<Value>,
    seen: Vec<Value>,
    next: i64,
}

impl Rpc {
    fn spawn(mut cmd: Command) -> Self {
        let mut child = cmd.spawn().expect("spawning wharf acp");
        let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
        let stdin = child.stdin.take().unwrap_or_else(|| panic!("no stdin"));
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && tx.send(v).is_err()
                {
                    return;
                }
            }
        });
        Self { child, stdin, rx, seen: Vec::new(), next: 1 }
    }

    /// Sends a request and returns its response (notifications meanwhile
    /// are kept in `seen`).
    fn call(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        let id = self.next;
        self.next += 1;
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.stdin, "{msg}").with_context(|| format!("sending {method}"))?;
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = self.rx.recv_timeout(left).with_context(|| format!("no answer to {method}: {:?}", self.seen))?;
            self.seen.push(v.clone());
            if v["id"] == id && v.get("method").is_none() {
                return Ok(v);
            }
        }
    }
}

impl Drop for Rpc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
