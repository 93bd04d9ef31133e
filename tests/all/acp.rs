//! `wharf acp` end to end: a test client spawns the binary and speaks raw
//! JSON-RPC 2.0 (ACP v1) on its stdin/stdout — initialize, new session, a
//! prompt with a tool call and a permission request, cancellation mid-stream
//! and during a permission request, load with replay, stdout hygiene.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};
use wharf_tests::plugins;

const TIMEOUT: Duration = Duration::from_secs(60);

struct Env {
    home: tempfile::TempDir,
    ws: tempfile::TempDir,
    sessions: PathBuf,
}

fn env() -> Env {
    let home = tempfile::tempdir().expect("creating a temp dir");
    let ws = tempfile::tempdir().expect("creating a temp dir");
    std::fs::write(ws.path().join("README.md"), "# Sample\n").expect("writing README.md");
    let sessions = home.path().join("sessions");
    Env { home, ws, sessions }
}

impl Env {
    /// A profile: fs + scripted model (+ policy-fixed asking before `write`).
    fn profile(&self, name: &str, turns: &str, ask: bool) -> PathBuf {
        let policy = if ask {
            r#"
[[plugin]]
id = "ask"
path = "${plugin_dir}/policy-fixed.wasm"
[plugin.config]
decision = "ask"
reason = "writes need approval"
tools = ["write"]
"#
        } else {
            ""
        };
        self.profile_with(name, turns, policy)
    }

    /// A profile: fs + scripted model + `extra` plugin rows.
    fn profile_with(&self, name: &str, turns: &str, policy: &str) -> PathBuf {
        let text = format!(
            r#"
[agent]
adapter = "scripted"
max_steps = 10

[[plugin]]
id = "fs"
path = "${{plugin_dir}}/fs.wasm"
[plugin.grant]
dirs = ["${{workspace}}:rw"]
{policy}
[[plugin]]
id = "scripted"
path = "${{plugin_dir}}/llm-scripted.wasm"
[plugin.config]
model = "scripted-acp"
{turns}
"#
        );
        let path = self.home.path().join(format!("{name}.toml"));
        std::fs::write(&path, text).expect("writing the file");
        path
    }

    fn spawn(&self, profile: &Path) -> Client {
        for p in [plugins::FS, plugins::LLM_SCRIPTED, plugins::POLICY_FIXED] {
            let _ = wharf_tests::plugin(p);
        }
        let mut cmd = wharf_tests::wharf(self.home.path());
        cmd.args(["acp", "--profile", &profile.display().to_string()])
            .args(["--session-dir", &self.sessions.display().to_string()])
            .current_dir(self.home.path())
            .env("WHARF_LOG", "info")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Client::spawn(cmd)
    }

    fn cwd(&self) -> String {
        std::fs::canonicalize(self.ws.path()).expect("canonicalizing the workspace").display().to_string()
    }

    fn log_types(&self, id: &str) -> Vec<Value> {
        let store = wharf_core::SessionStore::new(&self.sessions);
        let loaded = store.load(id).expect("loading the session");
        loaded.events.iter().map(|e| serde_json::to_value(e).unwrap_or(Value::Null)).collect()
    }
}

/// A minimal ACP client over the child's stdio.
struct Client {
    child: Child,
    stdin: Option<ChildStdin>,
    rx: Receiver<Value>,
    /// Every message received, in order.
    seen: Vec<Value>,
    /// Lines on stdout that were not JSON-RPC messages.
    garbage: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<String>>,
    next_id: i64,
}

impl Client {
    fn spawn(mut cmd: Command) -> Self {
        let mut child = cmd.spawn().expect("spawn wharf acp");
        let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
        let stderr = child.stderr.take().unwrap_or_else(|| panic!("no stderr"));
        let (tx, rx) = channel();
        let garbage = Arc::new(Mutex::new(Vec::new()));
        let g = garbage.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                match serde_json::from_str::<Value>(&line) {
                    Ok(v) if v["jsonrpc"] == "2.0" => {
                        if tx.send(v).is_err() {
                            return;
                        }
                    }
                    _ => g.lock().unwrap_or_else(|e| e.into_inner()).push(line),
                }
            }
        });
        let err = Arc::new(Mutex::new(String::new()));
        let e = err.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                let mut s = e.lock().unwrap_or_else(|e| e.into_inner());
                s.push_str(&line);
                s.push('\n');
            }
        });
        let stdin = child.stdin.take();
        Self { child, stdin, rx, seen: Vec::new(), garbage, stderr: err, next_id: 1 }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn send(&mut self, v: Value) {
        let stdin = self.stdin.as_mut().unwrap_or_else(|| panic!("stdin closed"));
        writeln!(stdin, "{v}").expect("writing to wharf acp");
        stdin.flush().expect("writing to wharf acp");
    }

    fn request(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    fn respond(&mut self, id: &Value, result: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }

    /// The next message matching `pred`; everything received is kept in `seen`.
    fn wait_for(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(v) => {
                    self.seen.push(v.clone());
                    if pred(&v) {
                        return v;
                    }
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => panic!(
                    "timed out waiting for {what}\nreceived: {}\nstderr:\n{}",
                    serde_json::to_string_pretty(&self.seen).unwrap_or_default(),
                    self.stderr()
                ),
            }
        }
    }

    /// The response to request `id` (it may have arrived while waiting for
    /// something else).
    fn response(&mut self, id: i64) -> Value {
        let is_it = |v: &Value| v["id"] == id && v.get("method").is_none();
        if let Some(v) = self.seen.iter().find(|v| is_it(v)) {
            return v.clone();
        }
        self.wait_for(&format!("response {id}"), is_it)
    }

    fn result(&mut self, id: i64) -> Value {
        let r = self.response(id);
        assert!(r.get("error").is_none(), "request {id} failed: {r}\nstderr:\n{}", self.stderr());
        r["result"].clone()
    }

    fn initialize(&mut self) -> Value {
        let id = self.request(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "test-client", "version": "1"}}),
        );
        self.result(id)
    }

    fn new_session(&mut self, cwd: &str) -> String {
        let id = self.request("session/new", json!({"cwd": cwd, "mcpServers": []}));
        self.result(id)["sessionId"].as_str().unwrap_or_else(|| panic!("no sessionId")).to_string()
    }

    /// `session/update` notifications seen so far, as `update` objects.
    fn updates(&self) -> Vec<Value> {
        self.seen.iter().filter(|v| v["method"] == "session/update").map(|v| v["params"]["update"].clone()).collect()
    }

    /// Closes stdin and expects a clean exit.
    fn close(mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(status) = self.child.try_wait().expect("polling the child") {
                assert!(status.success(), "wharf acp exited with {status}\nstderr:\n{}", self.stderr());
                break;
            }
            assert!(Instant::now() < deadline, "wharf acp did not exit after stdin closed");
            std::thread::sleep(Duration::from_millis(20));
        }
        let garbage = self.garbage.lock().unwrap_or_else(|e| e.into_inner()).clone();
        assert!(garbage.is_empty(), "stdout carried non-protocol lines: {garbage:?}");
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn kinds(updates: &[Value]) -> Vec<String> {
    updates.iter().map(|u| u["sessionUpdate"].as_str().unwrap_or("").to_string()).collect()
}

const WRITE_THEN_DONE: &str = r#"
[[plugin.config.turns]]
reasoning = "I will write the notes."
text = "Writing NOTES.md."
tool_calls = [{ name = "write", arguments = { path = "NOTES.md", content = "hello\n" } }]

[[plugin.config.turns]]
text = "Done: wrote NOTES.md."
"#;

#[test]
fn initialize_new_session_prompt_with_permission() {
    let e = env();
    let p = e.profile("ask", WRITE_THEN_DONE, true);
    let mut c = e.spawn(&p);
    let init = c.initialize();
    assert_eq!(init["protocolVersion"], 1, "{init}");
    assert_eq!(init["agentCapabilities"]["loadSession"], true, "{init}");
    assert_eq!(init["agentCapabilities"]["promptCapabilities"]["embeddedContext"], true, "{init}");
    assert_eq!(init["agentInfo"]["name"], "wharf");
    assert_eq!(init["authMethods"], json!([]));

    // Unknown methods get -32601.
    let bad = c.request("wharf/nonsense", json!({}));
    assert_eq!(c.response(bad)["error"]["code"], -32601);

    let cwd = e.cwd();
    let sid = c.new_session(&cwd);
    let other = c.new_session(&cwd);
    assert_ne!(sid, other, "session ids are unique");

    let prompt =
        c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "Write the notes"}]}));
    let ask = c.wait_for("permission request", |v| v["method"] == "session/request_permission");
    let params = &ask["params"];
    assert_eq!(params["sessionId"], sid);
    assert_eq!(params["toolCall"]["kind"], "edit", "{params}");
    assert_eq!(params["toolCall"]["rawInput"]["path"], "NOTES.md");
    let options: Vec<(String, String)> = params["options"]
        .as_array()
        .unwrap_or_else(|| panic!("no options"))
        .iter()
        .map(|o| (o["optionId"].as_str().unwrap_or("").to_string(), o["kind"].as_str().unwrap_or("").to_string()))
        .collect();
    assert_eq!(
        options,
        [("allow_once", "allow_once"), ("allow_always", "allow_always"), ("reject_once", "reject_once")]
            .map(|(a, b)| (a.to_string(), b.to_string()))
    );
    // Nothing was written before the answer.
    assert!(!e.ws.path().join("NOTES.md").exists());
    c.respond(&ask["id"], json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}}));

    let done = c.result(prompt);
    assert_eq!(done["stopReason"], "end_turn", "{done}");
    assert_eq!(std::fs::read_to_string(e.ws.path().join("NOTES.md")).unwrap_or_default(), "hello\n");

    // Every update came before the response, in log order.
    let pos = c.seen.iter().position(|v| v["id"] == prompt && v.get("method").is_none()).unwrap_or(0);
    assert!(c.seen[pos + 1..].iter().all(|v| v["method"] != "session/update"), "updates after the response");
    let updates = c.updates();
    let k = kinds(&updates);
    let first = |name: &str| k.iter().position(|x| x == name).unwrap_or_else(|| panic!("no {name} in {k:?}"));
    assert!(first("agent_thought_chunk") < first("tool_call"), "{k:?}");
    assert!(first("agent_message_chunk") < first("tool_call"), "{k:?}");
    assert!(!k.contains(&"user_message_chunk".to_string()), "the client's own prompt is not echoed: {k:?}");
    let text: String = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .map(|u| u["content"]["text"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(text, "Writing NOTES.md.Done: wrote NOTES.md.");
    let call = &updates[first("tool_call")];
    assert_eq!(call["kind"], "edit");
    assert_eq!(call["toolCallId"], params["toolCall"]["toolCallId"]);
    assert_eq!(call["title"], "write NOTES.md");
    assert_eq!(call["locations"][0]["path"], format!("{cwd}/NOTES.md"));
    assert_eq!(call["content"][0]["type"], "diff");
    let statuses: Vec<&str> = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call_update")
        .map(|u| u["status"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(statuses, ["in_progress", "completed"], "{updates:?}");
    let result = updates.iter().rfind(|u| u["sessionUpdate"] == "tool_call_update").cloned().unwrap_or_default();
    assert_eq!(result["rawOutput"]["plugin"], "fs");

    // The log records who answered.
    let log = e.log_types(&sid);
    let decided = log.iter().find(|v| v["type"] == "approval/decided").unwrap_or_else(|| panic!("no decision"));
    assert_eq!(decided["data"]["outcome"], "allowed-once");
    assert_eq!(decided["data"]["by"], "acp:test-client");
    c.close();
}

#[test]
fn reject_and_allow_always() {
    let e = env();
    let turns = r#"
[[plugin.config.turns]]
tool_calls = [{ name = "write", arguments = { path = "a.txt", content = "a" } }]
[[plugin.config.turns]]
tool_calls = [{ name = "write", arguments = { path = "b.txt", content = "b" } }]
[[plugin.config.turns]]
tool_calls = [{ name = "write", arguments = { path = "c.txt", content = "c" } }]
[[plugin.config.turns]]
text = "done"
"#;
    let p = e.profile("ask3", turns, true);
    let mut c = e.spawn(&p);
    c.initialize();
    let sid = c.new_session(&e.cwd());
    let prompt = c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}));
    let ask = c.wait_for("first permission request", |v| v["method"] == "session/request_permission");
    c.respond(&ask["id"], json!({"outcome": {"outcome": "selected", "optionId": "reject_once"}}));
    let ask = c.wait_for("second permission request", |v| v["method"] == "session/request_permission");
    c.respond(&ask["id"], json!({"outcome": {"outcome": "selected", "optionId": "allow_always"}}));
    let done = c.result(prompt);
    assert_eq!(done["stopReason"], "end_turn");
    let asks = c.seen.iter().filter(|v| v["method"] == "session/request_permission").count();
    assert_eq!(asks, 2, "the third write is covered by allow_always");
    assert!(!e.ws.path().join("a.txt").exists());
    assert!(e.ws.path().join("b.txt").exists() && e.ws.path().join("c.txt").exists());
    let failed = c.updates().into_iter().filter(|u| u["status"] == "failed").count();
    assert_eq!(failed, 1, "the rejected call is reported failed");
    c.close();
}

const SLOW: &str = r#"
chunk_size = 4

[[plugin.config.turns]]
text = "This answer streams very slowly, four characters at a time, so that the test can cancel it midway."
delay_ms = 150

[[plugin.config.turns]]
text = "So does the second one: slowly, four characters at a time, until the test cancels it as well."
delay_ms = 150
"#;

#[test]
fn cancel_mid_stream_answers_cancelled() {
    let e = env();
    let p = e.profile("slow", SLOW, false);
    let mut c = e.spawn(&p);
    c.initialize();
    let sid = c.new_session(&e.cwd());
    let started = Instant::now();
    let prompt = c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "talk"}]}));
    c.wait_for("a first chunk", |v| v["params"]["update"]["sessionUpdate"] == "agent_message_chunk");
    c.notify("session/cancel", json!({"sessionId": sid}));
    let done = c.result(prompt);
    assert_eq!(done["stopReason"], "cancelled", "{done}");
    assert!(started.elapsed() < Duration::from_secs(10), "the cancel did not stop the stream");
    let log = e.log_types(&sid);
    let end = log.iter().rfind(|v| v["type"] == "turn/end").unwrap_or_else(|| panic!("no turn/end"));
    assert_eq!(end["data"]["reason"], "cancelled");
    let msg = log.iter().rfind(|v| v["type"] == "assistant/message").unwrap_or_else(|| panic!("no message"));
    assert_eq!(msg["data"]["interrupted"], true);
    // The session keeps working after a cancel.
    let again = c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "more"}]}));
    c.wait_for("a chunk of the second prompt", |v| v["params"]["update"]["sessionUpdate"] == "agent_message_chunk");
    c.notify("session/cancel", json!({"sessionId": sid}));
    assert_eq!(c.result(again)["stopReason"], "cancelled");
    let ends = e.log_types(&sid).into_iter().filter(|v| v["type"] == "turn/end").count();
    assert_eq!(ends, 2);
    c.close();
}

#[test]
fn cancel_while_a_permission_request_is_open() {
    let e = env();
    let p = e.profile("ask-cancel", WRITE_THEN_DONE, true);
    let mut c = e.spawn(&p);
    c.initialize();
    let sid = c.new_session(&e.cwd());
    let prompt = c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}));
    let ask = c.wait_for("permission request", |v| v["method"] == "session/request_permission");
    c.notify("session/cancel", json!({"sessionId": sid}));
    // The agent withdraws its open request and ends the turn `cancelled`.
    let withdrawn = c.wait_for("$/cancel_request", |v| v["method"] == "$/cancel_request");
    assert_eq!(withdrawn["params"]["requestId"], ask["id"]);
    let done = c.result(prompt);
    assert_eq!(done["stopReason"], "cancelled");
    // A client answering late (as ACP says it must) does no harm.
    c.respond(&ask["id"], json!({"outcome": {"outcome": "cancelled"}}));
    assert!(!e.ws.path().join("NOTES.md").exists());
    let failed = c.updates().into_iter().any(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "failed");
    assert!(failed, "the call is reported failed");
    let log = e.log_types(&sid);
    let decided = log.iter().find(|v| v["type"] == "approval/decided").unwrap_or_else(|| panic!("no decision"));
    assert_eq!(decided["data"]["outcome"], "cancelled");
    c.close();
}

#[test]
fn load_replays_history_then_continues() {
    let e = env();
    let turns = r#"
[[plugin.config.turns]]
reasoning = "Read it."
text = "Reading."
tool_calls = [{ name = "read", arguments = { path = "README.md" } }]

[[plugin.config.turns]]
text = "It is a sample."

[[plugin.config.turns]]
text = "Second answer."
"#;
    let p = e.profile("load", turns, false);
    let mut c = e.spawn(&p);
    c.initialize();
    let sid = c.new_session(&e.cwd());
    let prompt =
        c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "What is it?"}]}));
    assert_eq!(c.result(prompt)["stopReason"], "end_turn");
    c.close();

    // A new process loads the session: history first, then the response.
    let mut c = e.spawn(&p);
    c.initialize();
    let load = c.request("session/load", json!({"sessionId": sid, "cwd": e.cwd(), "mcpServers": []}));
    let r = c.response(load);
    assert!(r.get("error").is_none(), "{r}\n{}", c.stderr());
    // (The usage so far follows the history: see usage_updates_report_context_and_cost.)
    let updates: Vec<Value> = c.updates().into_iter().filter(|u| u["sessionUpdate"] != "usage_update").collect();
    let k = kinds(&updates);
    assert_eq!(
        k,
        [
            "user_message_chunk",
            "agent_thought_chunk",
            "agent_message_chunk",
            "tool_call",
            "tool_call_update",
            "agent_message_chunk"
        ],
        "{updates:?}"
    );
    assert_eq!(updates[0]["content"]["text"], "What is it?");
    assert_eq!(updates[2]["content"]["text"], "Reading.");
    assert_eq!(updates[3]["kind"], "read");
    assert_eq!(updates[4]["status"], "completed");
    assert!(updates[4]["content"][0]["content"]["text"].as_str().unwrap_or("").contains("Sample"));
    assert_eq!(updates[5]["content"]["text"], "It is a sample.");
    let n = c.seen.len();

    // The loaded session takes prompts; the model sees the earlier turn.
    let prompt = c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "And?"}]}));
    assert_eq!(c.result(prompt)["stopReason"], "end_turn");
    let text: String = c.seen[n..]
        .iter()
        .filter(|v| v["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .map(|v| v["params"]["update"]["content"]["text"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(text, "Second answer.");

    // Unknown sessions are an error, not a hang.
    let bad = c.request("session/load", json!({"sessionId": "nope", "cwd": e.cwd(), "mcpServers": []}));
    assert!(c.response(bad).get("error").is_some());
    let bad = c.request("session/prompt", json!({"sessionId": "nope", "prompt": [{"type": "text", "text": "x"}]}));
    assert_eq!(c.response(bad)["error"]["code"], -32602);
    c.close();
}

#[test]
fn initialize_answers_its_own_version_to_a_newer_client() {
    let e = env();
    let p = e.profile("version", "", false);
    let mut c = e.spawn(&p);
    let id = c.request("initialize", json!({"protocolVersion": 99, "clientCapabilities": {}}));
    let init = c.result(id);
    assert_eq!(init["protocolVersion"], 1, "{init}");
    c.close();
}

#[test]
fn profile_mcp_servers_give_acp_sessions_their_tools() -> anyhow::Result<()> {
    let e = env();
    let turns = r#"
[[plugin.config.turns]]
text = "Asking the MCP server."
tool_calls = [
  { name = "mcp__fx__echo", arguments = { text = "hello over acp" } },
  { name = "mcp__fx__pid", arguments = {} },
]

[[plugin.config.turns]]
text = "Done."
"#;
    let p = e.profile("mcp", turns, false);
    let fx = crate::mcp::fixture().display().to_string();
    let mut text = std::fs::read_to_string(&p).context("reading the file")?;
    text.push_str(&format!("\n[[mcp]]\nname = \"fx\"\ncommand = \"{fx}\"\nargs = [\"stdio\"]\nrequired = true\n"));
    std::fs::write(&p, text).context("writing the file")?;
    let mut c = e.spawn(&p);
    c.initialize();
    let sid = c.new_session(&e.cwd());
    let prompt = c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}));
    let done = c.result(prompt);
    assert_eq!(done["stopReason"], "end_turn", "{done}\n{}", c.stderr());
    let log = e.log_types(&sid);
    let result = |name: &str| {
        log.iter()
            .find(|v| v["type"] == "tool/result" && v["data"]["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no result of {name}: {log:?}"))
    };
    assert_eq!(result("mcp__fx__echo")["data"]["content"], "hello over acp");
    assert_eq!(result("mcp__fx__echo")["data"]["plugin"], "mcp:fx");
    assert!(log.iter().any(|v| v["type"] == "plugin/loaded" && v["data"]["id"] == "mcp:fx"));
    let pid = result("mcp__fx__pid")["data"]["content"].as_str().unwrap_or("").to_string();
    // Closing the connection stops the server process.
    c.close();
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while proc.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!pid.is_empty() && !proc.exists(), "the MCP server ({pid}) outlived wharf acp");
    Ok(())
}

/// A policy row: policy-fixed deciding `decision` for `tools`.
fn policy_row(decision: &str, tools: &[&str]) -> String {
    let tools: Vec<String> = tools.iter().map(|t| format!("{t:?}")).collect();
    format!(
        "\n[[plugin]]\nid = \"gate\"\npath = \"${{plugin_dir}}/policy-fixed.wasm\"\n[plugin.config]\n\
         decision = \"{decision}\"\nreason = \"the gate decides\"\ntools = [{}]\n",
        tools.join(", ")
    )
}

/// The stop reason of a session's last `turn/end`, as ACP names it.
fn logged_stop_reason(e: &Env, sid: &str) -> String {
    let log = e.log_types(sid);
    let end = log.iter().rfind(|v| v["type"] == "turn/end").unwrap_or_else(|| panic!("no turn/end in {log:?}"));
    match end["data"]["reason"].as_str() {
        Some("completed") => "end_turn".into(),
        Some("cancelled") => "cancelled".into(),
        other => format!("{other:?}: {end}"),
    }
}

/// ACP: `session/request_permission` refers to a tool call the client must
/// already know. With several parallel calls asking at once, every request
/// comes after the `tool_call` update of its call — 50 times over.
#[test]
fn permission_requests_never_overtake_their_tool_call() {
    let e = env();
    let calls: Vec<String> =
        (0..6).map(|_| r#"{ name = "read", arguments = { path = "README.md" } }"#.to_string()).collect();
    let turns = format!(
        "[[plugin.config.turns]]\ntool_calls = [{}]\n\n[[plugin.config.turns]]\ntext = \"read them\"\n",
        calls.join(", ")
    );
    let p = e.profile_with("perm-order", &turns, &policy_row("ask", &["read"]));
    let mut c = e.spawn(&p);
    c.initialize();
    let cwd = e.cwd();
    for round in 0..50 {
        let sid = c.new_session(&cwd);
        let start = c.seen.len();
        let prompt = c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}));
        let mut asked = 0;
        while asked < 6 {
            let ask = c.wait_for("a permission request", |v| {
                v["method"] == "session/request_permission" || (v["id"] == prompt && v.get("method").is_none())
            });
            assert_eq!(ask["method"], "session/request_permission", "round {round}: the prompt ended early: {ask}");
            let call = ask["params"]["toolCall"]["toolCallId"].clone();
            let here = c.seen.len() - 1;
            let announced = c.seen[start..here].iter().any(|v| {
                v["method"] == "session/update"
                    && v["params"]["update"]["sessionUpdate"] == "tool_call"
                    && v["params"]["update"]["toolCallId"] == call
            });
            assert!(announced, "round {round}: session/request_permission for {call} came before its tool_call update");
            c.respond(&ask["id"], json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}}));
            asked += 1;
        }
        assert_eq!(c.result(prompt)["stopReason"], "end_turn", "round {round}");
    }
    c.close();
}

/// ACP cancel race: a `session/cancel` sent as soon as the turn's last
/// update arrives lands before or after the turn ends. The rule: the prompt
/// response is the turn's stop reason as logged — `cancelled` when the
/// cancel stopped the turn, `end_turn` when the turn had already ended
/// (nothing was left to cancel) — never a `cancelled` answer for a turn the
/// log says completed, nor the reverse. 50 rounds, cancels at varied delays.
#[test]
fn a_cancel_racing_the_end_of_a_turn_is_answered_as_logged() {
    let e = env();
    // One chunk, then the final batch (finish, usage) 3 ms later: cancels
    // sent 0–6 ms after the chunk land on both sides of the turn's end.
    let turns = "[[plugin.config.turns]]\ntext = \"The whole answer.\"\ndelay_ms = 3\n";
    let p = e.profile_with("cancel-race", &format!("chunk_size = 64\n{turns}"), "");
    let mut c = e.spawn(&p);
    c.initialize();
    let cwd = e.cwd();
    let mut answers = std::collections::BTreeMap::<String, usize>::new();
    for round in 0..50u64 {
        let sid = c.new_session(&cwd);
        let prompt = c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}));
        c.wait_for("the last update", |v| {
            v["params"]["update"]["sessionUpdate"] == "agent_message_chunk"
                || (v["id"] == prompt && v.get("method").is_none())
        });
        std::thread::sleep(Duration::from_millis(round % 7));
        c.notify("session/cancel", json!({"sessionId": sid}));
        let answered = c.result(prompt)["stopReason"].as_str().unwrap_or("").to_string();
        // The log is complete once the response is out.
        let logged = logged_stop_reason(&e, &sid);
        assert_eq!(answered, logged, "round {round}: the response disagrees with the session log");
        *answers.entry(answered).or_default() += 1;
    }
    eprintln!("answers over 50 rounds: {answers:?}");
    c.close();
}

/// ACP v1: stdio MCP servers the client passes in `session/new` run for
/// that session only, through the same pipeline as the profile's `[[mcp]]`
/// rows (policies included), with the client's environment; another session
/// does not see them, and they stop with their session (`session/close`).
#[test]
fn client_mcp_servers_serve_their_session_through_the_pipeline() {
    let e = env();
    let turns = r#"
[[plugin.config.turns]]
text = "Asking the editor's server."
tool_calls = [
  { name = "mcp__ed__echo", arguments = { text = "hello from the editor" } },
  { name = "mcp__ed__env", arguments = { name = "ED_TOKEN" } },
  { name = "mcp__ed__pid", arguments = {} },
  { name = "mcp__ed__add", arguments = { a = 1, b = 2 } },
]

[[plugin.config.turns]]
text = "Done."

[[plugin.config.turns]]
tool_calls = [{ name = "mcp__ed__pid", arguments = {} }]

[[plugin.config.turns]]
text = "Done again."
"#;
    let p = e.profile_with("client-mcp", turns, &policy_row("deny", &["mcp__ed__add"]));
    let fx = crate::mcp::fixture().display().to_string();
    let mut c = e.spawn(&p);
    let init = c.initialize();
    // Stdio and streamable HTTP are supported; the deprecated HTTP+SSE is not.
    let mcp_caps = &init["agentCapabilities"]["mcpCapabilities"];
    assert!(mcp_caps["http"] == true && mcp_caps["sse"] != true, "{init}");
    assert!(init["agentCapabilities"]["sessionCapabilities"]["close"].is_object(), "{init}");
    let cwd = e.cwd();
    let servers = json!([{
        "name": "ed", "command": fx, "args": ["stdio"],
        "env": [{"name": "ED_TOKEN", "value": "token-${env:HOME}"}]
    }]);
    let id = c.request("session/new", json!({"cwd": cwd, "mcpServers": servers}));
    let sid = c.result(id)["sessionId"].as_str().unwrap_or_default().to_string();
    let other = c.new_session(&cwd);

    let prompt = c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}));
    let done = c.result(prompt);
    assert_eq!(done["stopReason"], "end_turn", "{done}\n{}", c.stderr());
    let log = e.log_types(&sid);
    let result = |log: &[Value], name: &str| {
        log.iter()
            .find(|v| v["type"] == "tool/result" && v["data"]["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no result of {name}: {log:?}"))
    };
    let echo = result(&log, "mcp__ed__echo");
    assert_eq!(echo["data"]["content"], "hello from the editor", "{echo}");
    assert_eq!(echo["data"]["plugin"], "mcp:ed");
    // The client's environment, verbatim (no `${env:…}` expansion).
    assert_eq!(result(&log, "mcp__ed__env")["data"]["content"], "token-${env:HOME}");
    // The profile's policies apply.
    assert_eq!(result(&log, "mcp__ed__add")["data"]["error_code"], "DENIED");
    assert!(log.iter().any(|v| v["type"] == "plugin/loaded" && v["data"]["id"] == "mcp:ed"), "{log:?}");
    let updates = c.updates();
    assert!(
        updates.iter().any(|u| u["sessionUpdate"] == "tool_call" && u["title"].as_str() == Some("mcp__ed__echo")),
        "{updates:?}"
    );
    let pid = result(&log, "mcp__ed__pid")["data"]["content"].as_str().unwrap_or("").to_string();
    assert!(!pid.is_empty() && PathBuf::from(format!("/proc/{pid}")).exists());

    // The other session of the same workspace has no such tools.
    let prompt = c.request("session/prompt", json!({"sessionId": other, "prompt": [{"type": "text", "text": "go"}]}));
    c.result(prompt);
    let log = e.log_types(&other);
    let echo = result(&log, "mcp__ed__echo");
    assert_eq!(echo["data"]["is_error"], true, "{echo}");
    assert!(!log.iter().any(|v| v["type"] == "plugin/loaded" && v["data"]["id"] == "mcp:ed"), "{log:?}");

    // Closing the session stops its server; the process keeps serving.
    let close = c.request("session/close", json!({"sessionId": sid}));
    c.result(close);
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while proc.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!proc.exists(), "the session's MCP server ({pid}) outlived session/close");
    let bad = c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "x"}]}));
    assert_eq!(c.response(bad)["error"]["code"], -32602, "a closed session is unknown");

    // session/load starts the servers it is given, afresh.
    let load = c.request("session/load", json!({"sessionId": sid, "cwd": cwd, "mcpServers": servers}));
    c.result(load);
    let prompt = c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "again"}]}));
    assert_eq!(c.result(prompt)["stopReason"], "end_turn");
    let log = e.log_types(&sid);
    let again = log
        .iter()
        .rfind(|v| v["type"] == "tool/result" && v["data"]["name"] == "mcp__ed__pid")
        .cloned()
        .unwrap_or_default();
    assert_eq!(again["data"]["is_error"], false, "{again}");
    assert_ne!(again["data"]["content"].as_str().unwrap_or(""), pid, "a new server process");
    c.close();
}

/// Issue 36: an adapter whose key is not set is an ACP auth error: the
/// `initialize` answer lists an auth method naming the variable, and
/// `session/new` fails with -32000 before any session is stored.
#[test]
fn a_missing_model_key_is_an_auth_error_with_auth_methods() -> anyhow::Result<()> {
    let _ = wharf_tests::plugin(plugins::LLM_DEEPSEEK);
    let e = env();
    let p = e.home.path().join("keyed.toml");
    std::fs::write(&p, crate::hardening3_cli::KEYED_PROFILE).context("writing the file")?;
    let mut c = e.spawn(&p);
    let init = c.initialize();
    let methods = init["authMethods"].as_array().cloned().unwrap_or_default();
    assert_eq!(methods.len(), 1, "{init}");
    assert_eq!(methods[0]["id"], "env-api-key", "{init}");
    assert!(methods[0]["description"].as_str().is_some_and(|d| d.contains("WHARF_H3_KEY")), "{init}");

    let auth = c.request("authenticate", json!({"methodId": "env-api-key"}));
    assert_eq!(c.response(auth)["error"]["code"], -32000);
    let new = c.request("session/new", json!({"cwd": e.cwd(), "mcpServers": []}));
    let r = c.response(new);
    assert_eq!(r["error"]["code"], -32000, "{r}");
    assert_eq!(r["error"]["message"], "Authentication required", "{r}");
    assert_eq!(r["error"]["data"]["env"], "WHARF_H3_KEY", "{r}");
    assert!(r["error"]["data"]["message"].as_str().is_some_and(|m| m.contains("--profile demo")), "{r}");
    let stored = if e.sessions.exists() {
        wharf_core::SessionStore::new(&e.sessions).list().unwrap_or_default()
    } else {
        vec![]
    };
    assert!(stored.is_empty(), "no session was stored");
    c.close();
    Ok(())
}

// ------------------------------------------------ ACP v1 stable schema (issue 40)

use agent_client_protocol::v1::schema as acp;

/// `v` deserialized as the schema type `T` (a wrong shape fails the test).
fn typed<T: serde::de::DeserializeOwned>(what: &str, v: &Value) -> T {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{what} does not match the ACP schema: {e}\n{v}"))
}

/// The `session/update`s of `sid` seen so far, typed.
fn typed_updates(c: &Client, sid: &str) -> Vec<acp::SessionUpdate> {
    c.seen
        .iter()
        .filter(|v| v["method"] == "session/update" && v["params"]["sessionId"] == sid)
        .map(|v| typed::<acp::SessionNotification>("a session/update", &v["params"]).update)
        .collect()
}

impl Client {
    fn initialize_with(&mut self, caps: Value) -> acp::InitializeResponse {
        let id = self.request(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": caps, "clientInfo": {"name": "test-client", "version": "1"}}),
        );
        let r = self.result(id);
        typed("the initialize response", &r)
    }
}

#[test]
fn initialize_advertises_the_stable_schema_capabilities() {
    let e = env();
    let p = e.profile("caps", "", false);
    let mut c = e.spawn(&p);
    let init = c.initialize_with(json!({"session": {"compaction": {}, "notices": {}}}));
    let caps = &init.agent_capabilities;
    assert!(caps.load_session);
    let session = &caps.session_capabilities;
    assert!(session.list.is_some() && session.resume.is_some() && session.close.is_some(), "{init:?}");
    let system = session.system_prompt.as_ref().unwrap_or_else(|| panic!("no systemPrompt capability: {init:?}"));
    assert!(system.mode.as_ref().is_some_and(|m| m.override_.is_some()), "override is supported: {init:?}");
    assert!(caps.mcp_capabilities.http && !caps.mcp_capabilities.sse, "{init:?}");
    // The adapters take text only: images are not advertised (and refused).
    assert!(!caps.prompt_capabilities.image && !caps.prompt_capabilities.audio, "{init:?}");
    assert!(caps.prompt_capabilities.embedded_context);
    c.close();
}

#[test]
fn sessions_are_listed_resumed_without_replay_and_closed() {
    let e = env();
    let other_ws = tempfile::tempdir().expect("creating a temp dir");
    let other = std::fs::canonicalize(other_ws.path()).expect("canonicalizing").display().to_string();
    let turns =
        "[[plugin.config.turns]]\ntext = \"First answer.\"\n\n[[plugin.config.turns]]\ntext = \"Second answer.\"\n";
    let p = e.profile("list", turns, false);
    let mut c = e.spawn(&p);
    c.initialize();
    let cwd = e.cwd();
    let sid = c.new_session(&cwd);
    let prompt =
        c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "First question"}]}));
    assert_eq!(c.result(prompt)["stopReason"], "end_turn");
    let elsewhere = c.new_session(&other);

    // Every session, then those of one workspace.
    let all = c.request("session/list", json!({}));
    let all: acp::ListSessionsResponse = typed("the session/list response", &c.result(all));
    let ids: Vec<String> = all.sessions.iter().map(|s| s.session_id.0.to_string()).collect();
    assert!(ids.contains(&sid) && ids.contains(&elsewhere), "{all:?}");
    assert!(all.next_cursor.is_none());
    let here = c.request("session/list", json!({"cwd": cwd}));
    let here: acp::ListSessionsResponse = typed("the session/list response", &c.result(here));
    assert_eq!(here.sessions.len(), 1, "{here:?}");
    let info = &here.sessions[0];
    assert_eq!(info.session_id.0.as_ref(), sid);
    assert_eq!(info.cwd.display().to_string(), cwd);
    assert_eq!(info.title.as_deref(), Some("First question"));
    assert!(info.updated_at.as_deref().is_some_and(|t| t.contains('T')), "{info:?}");
    let bad = c.request("session/list", json!({"cursor": "not-a-cursor"}));
    assert_eq!(c.response(bad)["error"]["code"], -32602);
    let bad = c.request("session/list", json!({"cwd": "relative/dir"}));
    assert_eq!(c.response(bad)["error"]["code"], -32602);

    let close = c.request("session/close", json!({"sessionId": sid}));
    let _: acp::CloseSessionResponse = typed("the session/close response", &c.result(close));
    c.close();

    // Another process resumes it: no history is sent, and the model sees it.
    let mut c = e.spawn(&p);
    c.initialize();
    let resume = c.request("session/resume", json!({"sessionId": sid, "cwd": cwd}));
    let _: acp::ResumeSessionResponse = typed("the session/resume response", &c.result(resume));
    assert!(c.updates().is_empty(), "session/resume replays nothing: {:?}", c.updates());
    let prompt = c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "And?"}]}));
    assert_eq!(c.result(prompt)["stopReason"], "end_turn");
    let text: String = typed_updates(&c, &sid)
        .into_iter()
        .filter_map(|u| match u {
            acp::SessionUpdate::AgentMessageChunk(chunk) => match chunk.content {
                acp::ContentBlock::Text(t) => Some(t.text),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(text, "Second answer.", "the resumed model saw the first turn");
    let bad = c.request("session/resume", json!({"sessionId": "nope", "cwd": cwd}));
    assert!(c.response(bad).get("error").is_some());
    // A session resumes only in its own workspace.
    let close = c.request("session/close", json!({"sessionId": sid}));
    c.result(close);
    let wrong = c.request("session/resume", json!({"sessionId": sid, "cwd": other}));
    assert_eq!(c.response(wrong)["error"]["code"], -32602);
    c.close();
}

/// Starts the MCP fixture's streamable HTTP server: its URL and the child.
fn http_fixture() -> (String, Child) {
    let mut child = Command::new(crate::mcp::fixture())
        .arg("http")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawning the MCP fixture");
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("reading a line");
    (line.trim().to_string(), child)
}

/// ACP v1: a streamable HTTP server the client passes runs for its session
/// as an `[[mcp]]` row (`mcp:NAME`, through the pipeline); an HTTP+SSE
/// server is refused before any session exists.
#[test]
fn client_http_mcp_servers_serve_their_session() {
    let (url, fixture) = http_fixture();
    struct Kill(Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _fixture = Kill(fixture);
    let e = env();
    let turns = r#"
[[plugin.config.turns]]
tool_calls = [{ name = "mcp__remote__echo", arguments = { text = "hello over http" } }]

[[plugin.config.turns]]
text = "Done."
"#;
    let p = e.profile("http-mcp", turns, false);
    let mut c = e.spawn(&p);
    c.initialize();
    let cwd = e.cwd();
    let sse = json!([{"type": "sse", "name": "old", "url": url, "headers": []}]);
    let bad = c.request("session/new", json!({"cwd": cwd, "mcpServers": sse}));
    let r = c.response(bad);
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(r["error"]["message"].as_str().is_some_and(|m| m.contains("SSE")), "{r}");
    let stored = if e.sessions.exists() {
        wharf_core::SessionStore::new(&e.sessions).list().unwrap_or_default()
    } else {
        vec![]
    };
    assert!(stored.is_empty(), "no session was created for a refused request");

    let servers = json!([{"type": "http", "name": "remote", "url": url,
                          "headers": [{"name": "X-Trace", "value": "${env:HOME}"}]}]);
    let id = c.request("session/new", json!({"cwd": cwd, "mcpServers": servers}));
    let sid = c.result(id)["sessionId"].as_str().unwrap_or_default().to_string();
    let prompt = c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}));
    assert_eq!(c.result(prompt)["stopReason"], "end_turn", "{}", c.stderr());
    let log = e.log_types(&sid);
    let result = log
        .iter()
        .find(|v| v["type"] == "tool/result" && v["data"]["name"] == "mcp__remote__echo")
        .cloned()
        .unwrap_or_else(|| panic!("no result: {log:?}"));
    assert_eq!(result["data"]["content"], "hello over http", "{result}");
    assert_eq!(result["data"]["plugin"], "mcp:remote");
    // The tool call carries the tool's name as well as a title.
    let call = typed_updates(&c, &sid)
        .into_iter()
        .find_map(|u| match u {
            acp::SessionUpdate::ToolCall(call) => Some(call),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no tool_call update"));
    assert_eq!(call.name.as_deref(), Some("mcp__remote__echo"));
    assert!(call.title.starts_with("mcp__remote__echo"), "{call:?}");
    c.close();
}

#[test]
fn image_prompts_are_refused_not_dropped() {
    let e = env();
    let p = e.profile("image", "[[plugin.config.turns]]\ntext = \"Text only.\"\n", false);
    let mut c = e.spawn(&p);
    // `llm-scripted` does not export `llm-images` (built against the
    // unchanged `llm-plugin` world): text only, and it still serves.
    let init = c.initialize();
    assert_eq!(init["agentCapabilities"]["promptCapabilities"]["image"], false, "{init}");
    let sid = c.new_session(&e.cwd());
    let prompt = json!([
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
    ]);
    let bad = c.request("session/prompt", json!({"sessionId": sid, "prompt": prompt}));
    let r = c.response(bad);
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(r["error"]["message"].as_str().is_some_and(|m| m.contains("image") && m.contains("`scripted`")), "{r}");
    assert!(!e.log_types(&sid).iter().any(|v| v["type"] == "user/message"), "nothing reached the log");
    // The session still takes a text prompt.
    let ok = c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]}));
    assert_eq!(c.result(ok)["stopReason"], "end_turn");
    c.close();
}

#[test]
fn usage_updates_report_context_and_cost() {
    let e = env();
    let turns = r#"context_window = 50000

[[plugin.config.turns]]
tool_calls = [{ name = "read", arguments = { path = "README.md" } }]
usage = { prompt_tokens = 1000, completion_tokens = 10 }

[[plugin.config.turns]]
text = "Read."
usage = { prompt_tokens = 1200, completion_tokens = 20 }

[plugin.config.prices."scripted-acp"]
input_cache_hit = 0.5
input_cache_miss = 1.0
output = 2.0
currency = "USD"
"#;
    let p = e.profile("usage", turns, false);
    let mut c = e.spawn(&p);
    c.initialize();
    let cwd = e.cwd();
    let sid = c.new_session(&cwd);
    let prompt = c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}));
    assert_eq!(c.result(prompt)["stopReason"], "end_turn");
    let usage: Vec<acp::UsageUpdate> = typed_updates(&c, &sid)
        .into_iter()
        .filter_map(|u| match u {
            acp::SessionUpdate::UsageUpdate(u) => Some(u),
            _ => None,
        })
        .collect();
    assert_eq!(usage.len(), 2, "one per step: {usage:?}");
    assert_eq!((usage[0].used, usage[0].size), (1000, 50000));
    assert_eq!((usage[1].used, usage[1].size), (1200, 50000));
    let cost = usage[1].cost.as_ref().unwrap_or_else(|| panic!("no cost: {usage:?}"));
    assert_eq!(cost.currency, "USD");
    // (1000 + 1200) × 1.0 + (10 + 20) × 2.0 per million tokens.
    assert!((cost.amount - 2260.0 / 1e6).abs() < 1e-12, "{cost:?}");

    // A load replays the history, then the usage so far, once.
    let n = c.seen.len();
    let load = c.request("session/load", json!({"sessionId": sid, "cwd": cwd, "mcpServers": []}));
    c.result(load);
    let replayed: Vec<&Value> = c.seen[n..].iter().filter(|v| v["method"] == "session/update").collect();
    let last = replayed.last().unwrap_or_else(|| panic!("nothing replayed"));
    assert_eq!(last["params"]["update"]["sessionUpdate"], "usage_update");
    let count = replayed.iter().filter(|v| v["params"]["update"]["sessionUpdate"] == "usage_update").count();
    assert_eq!(count, 1);
    c.close();
}

#[test]
fn client_system_prompts_append_or_override_the_profile_prompt() -> anyhow::Result<()> {
    let _ = (wharf_tests::plugin(plugins::LLM_OPENAI), wharf_tests::plugin(plugins::FS));
    let script: wharf_mock_llm::Script = serde_json::from_value(json!({
        "replies": [],
        "default": {"kind": "stream", "text": "ok"},
        "checks": {"reasoning": "ignore"},
    }))
    .context("building the mock's script")?;
    let mock = wharf_mock_llm::MockLlm::start_background(script).context("starting the mock LLM")?;
    let e = env();
    let p = e.home.path().join("sysprompt.toml");
    std::fs::write(
        &p,
        format!(
            r#"
[agent]
adapter = "model"
max_steps = 3
system_prompt = "PROFILE BASE PROMPT"

[[plugin]]
id = "model"
path = "${{plugin_dir}}/llm-openai.wasm"
[plugin.config]
base_url = "{url}/v1"
model = "mock-model"
[plugin.grant]
hosts = ["127.0.0.1:{port}"]
timeout_ms = 20000
"#,
            url = mock.url(),
            port = mock.addr().port()
        ),
    )
    .context("writing the profile")?;
    let mut c = e.spawn(&p);
    let init = c.initialize();
    // `llm-openai` exports `llm-images`: images are advertised.
    assert_eq!(init["agentCapabilities"]["promptCapabilities"]["image"], true, "{init}");
    let cwd = e.cwd();
    let system = |mode: &str, text: &str| json!({"mode": mode, "content": [{"type": "text", "text": text}]});
    let ask = |c: &mut Client, prompt: Value| -> anyhow::Result<String> {
        let id = c.request("session/new", json!({"cwd": cwd, "mcpServers": [], "systemPrompt": prompt}));
        let sid = c.result(id)["sessionId"].as_str().unwrap_or_default().to_string();
        let before = mock.requests().len();
        let run = c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]}));
        assert_eq!(c.result(run)["stopReason"], "end_turn");
        let req = mock.requests().get(before).cloned().context("no model request")?;
        let body = req.body.unwrap_or(Value::Null);
        let msgs = body["messages"].as_array().cloned().unwrap_or_default();
        Ok(msgs.iter().filter(|m| m["role"] == "system").filter_map(|m| m["content"].as_str()).collect())
    };
    let appended = ask(&mut c, system("append", "CLIENT APPENDED"))?;
    let (base, extra) = (appended.find("PROFILE BASE PROMPT"), appended.find("CLIENT APPENDED"));
    assert!(base.is_some() && extra.is_some() && base < extra, "append keeps the base first: {appended}");
    let overridden = ask(&mut c, system("override", "CLIENT OVERRIDE"))?;
    assert!(overridden.contains("CLIENT OVERRIDE") && !overridden.contains("PROFILE BASE PROMPT"), "{overridden}");
    let plain = ask(&mut c, Value::Null)?;
    assert!(plain.contains("PROFILE BASE PROMPT") && !plain.contains("CLIENT"), "{plain}");

    // What cannot be applied fails the request; no session is made for it.
    for bad in [
        system("_custom", "x"),
        json!({"mode": "append", "content": []}),
        json!({"mode": "append", "content": [{"type": "image", "data": "AA==", "mimeType": "image/png"}]}),
    ] {
        let id = c.request("session/new", json!({"cwd": cwd, "mcpServers": [], "systemPrompt": bad}));
        assert_eq!(c.response(id)["error"]["code"], -32602, "{bad}");
    }

    // An image block reaches the model as an `image_url` part with a
    // `data:` URL, after the text, and is logged inline.
    let sid = c.new_session(&cwd);
    let before = mock.requests().len();
    let prompt = json!([
        {"type": "text", "text": "What is this?"},
        {"type": "image", "data": PIXEL_B64, "mimeType": "image/png"}
    ]);
    let run = c.request("session/prompt", json!({"sessionId": sid, "prompt": prompt}));
    assert_eq!(c.result(run)["stopReason"], "end_turn");
    let req = mock.requests().get(before).cloned().context("no model request")?;
    let body = req.body.unwrap_or(Value::Null);
    let user = body["messages"].as_array().and_then(|m| m.iter().rfind(|m| m["role"] == "user")).cloned();
    assert_eq!(
        user.map(|u| u["content"].clone()),
        Some(json!([
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PIXEL_B64}")}}
        ])),
        "{body}"
    );
    mock.assert_no_violations();
    let logged = e.log_types(&sid);
    let message = logged.iter().find(|v| v["type"] == "user/message").cloned().unwrap_or(Value::Null);
    assert_eq!(message["data"]["images"], json!([{"mime_type": "image/png", "data": PIXEL_B64}]), "{message}");
    // Over the per-image limit (5 MiB): refused before the log, naming it.
    let big = "A".repeat((5 << 20) / 3 * 4 + 4096);
    let prompt =
        json!([{"type": "text", "text": "and this?"}, {"type": "image", "data": big, "mimeType": "image/png"}]);
    let r = c.request("session/prompt", json!({"sessionId": sid, "prompt": prompt}));
    let r = c.response(r);
    assert_eq!(r["error"]["code"], -32602, "{}", r["error"]);
    let m = r["error"]["message"].as_str().unwrap_or_default();
    assert!(m.contains("per-image limit of 5242880 bytes"), "{m}");
    c.close();
    Ok(())
}

/// A PNG signature and a few bytes (the adapters pass images through
/// undecoded), base64.
const PIXEL_B64: &str = "iVBORw0KGgp3aGFyZi10ZXN0LXBpeGVs";

#[test]
fn slash_commands_list_the_skills_and_expand() {
    let _ = wharf_tests::plugin(plugins::SKILLS_FIXED);
    let e = env();
    let skills = r#"
[[plugin]]
id = "skills"
path = "${plugin_dir}/skills-fixed.wasm"
[[plugin.config.skills]]
name = "release"
description = "How to cut a release."
text = "1. Bump the version."
"#;
    let turns = "[[plugin.config.turns]]\ntext = \"On it.\"\n\n[[plugin.config.turns]]\ntext = \"Again.\"\n";
    let p = e.profile_with("commands", turns, skills);
    let mut c = e.spawn(&p);
    c.initialize();
    let sid = c.new_session(&e.cwd());
    let update = c.wait_for("available_commands_update", |v| {
        v["params"]["update"]["sessionUpdate"] == "available_commands_update"
    });
    let note: acp::SessionNotification = typed("available_commands_update", &update["params"]);
    assert_eq!(note.session_id.0.as_ref(), sid);
    let acp::SessionUpdate::AvailableCommandsUpdate(list) = note.update else { panic!("not a command list") };
    let release =
        list.available_commands.iter().find(|c| c.name == "release").unwrap_or_else(|| panic!("no /release: {list:?}"));
    assert_eq!(release.description, "How to cut a release.");
    assert!(release.input.is_some());

    let prompt = c.request(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "/release version 2.0"}]}),
    );
    assert_eq!(c.result(prompt)["stopReason"], "end_turn");
    let prompt =
        c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "/unknown thing"}]}));
    assert_eq!(c.result(prompt)["stopReason"], "end_turn");
    let log = e.log_types(&sid);
    let said: Vec<String> = log
        .iter()
        .filter(|v| v["type"] == "user/message")
        .map(|v| v["data"]["content"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(said[0].contains("skill `release`") && said[0].contains("`skill` tool"), "{said:?}");
    assert!(said[0].ends_with("version 2.0"), "{said:?}");
    assert_eq!(said[1], "/unknown thing", "an unknown command is sent as typed");
    c.close();
}

#[test]
fn compaction_is_shown_to_clients_that_ask_for_it() {
    let _ = (wharf_tests::plugin(plugins::ECHO), wharf_tests::plugin(plugins::COMPACTION));
    let e = env();
    let rows = "\n[[plugin]]\nid = \"echo\"\npath = \"${plugin_dir}/echo.wasm\"\n\
                \n[[plugin]]\nid = \"compaction\"\npath = \"${plugin_dir}/compaction.wasm\"\n[plugin.grant]\nmodel = true\n";
    let mut turns = String::from(
        "context_window = 3000\ncomplete_text = \"The agent echoed long texts; nothing else happened.\"\n",
    );
    // Eight steps of ~400 tokens against a 3000-token window (max_steps 10).
    for i in 0..8 {
        let text = format!("chunk {i} ") + &"lorem ipsum dolor sit amet ".repeat(60);
        turns.push_str(&format!(
            "\n[[plugin.config.turns]]\ntool_calls = [{{ name = \"echo\", arguments = {{ text = \"{text}\" }} }}]\n"
        ));
    }
    turns.push_str("\n[[plugin.config.turns]]\ntext = \"Done.\"\nfinish = \"stop\"\n");
    let p = e.profile_with("compact", &turns, rows);
    let mut c = e.spawn(&p);
    c.initialize_with(json!({"session": {"compaction": {}}}));
    let sid = c.new_session(&e.cwd());
    let prompt = c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}));
    assert_eq!(c.result(prompt)["stopReason"], "end_turn", "{}", c.stderr());
    let compactions: Vec<acp::CompactionUpdate> = typed_updates(&c, &sid)
        .into_iter()
        .filter_map(|u| match u {
            acp::SessionUpdate::CompactionUpdate(u) => Some(u),
            _ => None,
        })
        .collect();
    let logged = e.log_types(&sid).iter().filter(|v| v["type"] == "compaction/summary").count();
    assert!(logged > 0, "no compaction happened");
    assert_eq!(compactions.len(), logged, "one update per logged compaction: {compactions:?}");
    let first = &compactions[0];
    assert_eq!(first.status, acp::CompactionStatus::Completed);
    let serialized = serde_json::to_value(first).unwrap_or_default();
    assert!(serialized["summary"][0]["text"].as_str().is_some_and(|t| !t.is_empty()), "{serialized}");
    c.close();

    // A client that did not ask gets no compaction updates.
    let mut c = e.spawn(&p);
    c.initialize();
    let sid = c.new_session(&e.cwd());
    let prompt = c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}));
    assert_eq!(c.result(prompt)["stopReason"], "end_turn");
    let k = kinds(&c.updates());
    assert!(!k.iter().any(|k| k == "compaction_update" || k == "notice"), "{k:?}");
    c.close();
}

/// Why the OS sandbox bundle hooks run in is missing here, if it is.
fn no_sandbox() -> Option<String> {
    let (level, detail) = wharf_runtime::process::sandbox_level();
    (level == wharf_runtime::process::Level::None).then(|| format!("no OS sandbox: {detail}"))
}

/// A bundle whose `PreToolUse` hook answers `ask` before every `Write`,
/// and whose `Notification` hook writes what it is told to `notified`.
fn asking_bundle(dir: &Path, notified: &Path) {
    let w = |p: &str, t: &str| {
        let path = dir.join(p);
        std::fs::create_dir_all(path.parent().unwrap_or(dir)).expect("creating the bundle");
        std::fs::write(path, t).expect("writing the bundle");
    };
    w(".claude-plugin/plugin.json", r#"{"name": "asker"}"#);
    w(
        "hooks/ask.sh",
        "#!/bin/sh\ncat > /dev/null\nprintf '{\"hookSpecificOutput\": {\"hookEventName\": \"PreToolUse\", \
         \"permissionDecision\": \"ask\", \"permissionDecisionReason\": \"the asker bundle wants a human\"}}'\n",
    );
    w("hooks/notify.sh", "#!/bin/sh\ncat > \"$1\"\n");
    let hooks = json!({"hooks": {
        "PreToolUse": [{"matcher": "Write", "hooks": [{"type": "command", "command": "sh ${CLAUDE_PLUGIN_ROOT}/hooks/ask.sh"}]}],
        "Notification": [{"matcher": "permission_prompt", "hooks": [{"type": "command",
            "command": format!("sh ${{CLAUDE_PLUGIN_ROOT}}/hooks/notify.sh {}", notified.display())}]}]
    }});
    w("hooks/hooks.json", &hooks.to_string());
}

/// A bundle hook's `ask` over ACP: a `session/request_permission` to the
/// client; rejected, the write does not run; allowed, it does; the log
/// names the bundle's vote and the client's answers, and the bundle's
/// `Notification` hook heard of the question.
#[test]
fn a_bundle_hook_asking_is_a_permission_request_to_the_client() {
    if let Some(why) = no_sandbox() {
        wharf_tests::skip(&wharf_tests::current_test(), &why);
        return;
    }
    let e = env();
    let (bundle, out) = (e.home.path().join("asker"), e.home.path().join("out"));
    std::fs::create_dir_all(&out).expect("creating out");
    let notified = out.join("notified.json");
    asking_bundle(&bundle, &notified);
    let turns = r#"
[[plugin.config.turns]]
tool_calls = [{ name = "write", arguments = { path = "a.txt", content = "a" } }]
[[plugin.config.turns]]
tool_calls = [{ name = "write", arguments = { path = "b.txt", content = "b" } }]
[[plugin.config.turns]]
text = "done"
"#;
    let row = format!(
        "\n[[bundle]]\nname = \"asker\"\npath = \"{}\"\n[bundle.sandbox]\ndirs = [\"{}:rw\"]\n",
        bundle.display(),
        out.display()
    );
    let p = e.profile_with("bundle-ask", turns, &row);
    let mut c = e.spawn(&p);
    c.initialize();
    let sid = c.new_session(&e.cwd());
    let prompt = c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}));
    let ask = c.wait_for("first permission request", |v| v["method"] == "session/request_permission");
    let req: acp::RequestPermissionRequest = typed("the permission request", &ask["params"]);
    assert_eq!(req.tool_call.fields.raw_input.as_ref().map(|i| i["path"].clone()), Some(json!("a.txt")));
    assert!(!e.ws.path().join("a.txt").exists(), "nothing runs before the answer");
    c.respond(&ask["id"], json!({"outcome": {"outcome": "selected", "optionId": "reject_once"}}));
    let ask = c.wait_for("second permission request", |v| v["method"] == "session/request_permission");
    c.respond(&ask["id"], json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}}));
    let done = c.result(prompt);
    assert_eq!(done["stopReason"], "end_turn", "{done}");
    assert!(!e.ws.path().join("a.txt").exists(), "the rejected write did not run");
    assert_eq!(std::fs::read_to_string(e.ws.path().join("b.txt")).unwrap_or_default(), "b");
    let log = e.log_types(&sid);
    let votes: Vec<Value> = log
        .iter()
        .filter(|v| v["type"] == "policy/decision")
        .flat_map(|v| v["data"]["votes"].as_array().cloned().unwrap_or_default())
        .filter(|v| v["plugin"] == "bundle:asker")
        .collect();
    assert_eq!(votes.len(), 2, "{log:#?}");
    assert!(votes.iter().all(|v| v.to_string().contains("the asker bundle wants a human")), "{votes:?}");
    let decided: Vec<(Value, Value)> = log
        .iter()
        .filter(|v| v["type"] == "approval/decided")
        .map(|v| (v["data"]["outcome"].clone(), v["data"]["by"].clone()))
        .collect();
    assert_eq!(
        decided,
        [(json!("rejected"), json!("acp:test-client")), (json!("allowed-once"), json!("acp:test-client"))]
    );
    // The Notification hook decides nothing, so it runs alongside the turn:
    // wait for its file (up to 30 s) instead of reading it once.
    let read_note = || -> Value {
        serde_json::from_str(&std::fs::read_to_string(&notified).unwrap_or_default()).unwrap_or(Value::Null)
    };
    let waited = std::time::Instant::now();
    let mut note = read_note();
    while note["notification_type"] != "permission_prompt" && waited.elapsed() < std::time::Duration::from_secs(30) {
        std::thread::sleep(std::time::Duration::from_millis(50));
        note = read_note();
    }
    assert_eq!(note["notification_type"], "permission_prompt", "{note}");
    assert!(note["message"].as_str().unwrap_or("").contains("Write"), "{note}");
    c.close();
}

/// A streaming WASI 0.3 tool (`tests/plugins/generic-async`'s
/// `jobs_count`, a `stream<u8>`) over ACP: its `tool/progress` reaches the
/// client as `in_progress` `tool_call_update`s carrying the output so far,
/// each extending the last, before the completed update with all of it.
/// Also: the row is a dev row (`dev = true`), and a new component at its
/// path is announced to the client as `↻ jobs reloaded (dev)`.
#[test]
fn streamed_tool_output_reaches_the_client_as_updates() {
    let e = env();
    // A copy, so the reload below does not touch the built fixture.
    let fixture = e.home.path().join("jobs.wasm");
    std::fs::copy(wharf_tests::plugin(plugins::GENERIC_ASYNC), &fixture).expect("copying the fixture");
    let turns = r#"
[[plugin.config.turns]]
tool_calls = [{ name = "jobs_count", arguments = { n = 40 } }]
[[plugin.config.turns]]
text = "counted"
"#;
    let row = format!(
        "\n[[plugin]]\nid = \"jobs\"\ndev = true\npath = {}\n",
        crate::policy::toml_str(&fixture.display().to_string())
    );
    let p = e.profile_with("stream", turns, &row);
    let mut c = e.spawn(&p);
    c.initialize_with(json!({"session": {"notices": {}}}));
    let sid = c.new_session(&e.cwd());
    let prompt = c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "count"}]}));
    let done = c.result(prompt);
    assert_eq!(done["stopReason"], "end_turn", "{done}");
    let want: String = (1..=40).map(|i| format!("{i}\n")).collect();
    let text_of = |content: &Option<Vec<acp::ToolCallContent>>| -> Option<String> {
        content.as_ref()?.iter().find_map(|c| match c {
            acp::ToolCallContent::Content(c) => match &c.content {
                acp::ContentBlock::Text(t) => Some(t.text.clone()),
                _ => None,
            },
            _ => None,
        })
    };
    let mut shown: Vec<String> = Vec::new();
    let mut completed = None;
    for u in typed_updates(&c, &sid) {
        if let acp::SessionUpdate::ToolCallUpdate(u) = u {
            match u.fields.status {
                Some(acp::ToolCallStatus::InProgress) => shown.extend(text_of(&u.fields.content)),
                Some(acp::ToolCallStatus::Completed) => completed = text_of(&u.fields.content),
                _ => {}
            }
        }
    }
    assert!(!shown.is_empty(), "no progress update reached the client");
    for pair in shown.windows(2) {
        assert!(pair[1].starts_with(&pair[0]) && pair[1].len() > pair[0].len(), "{shown:?}");
    }
    assert!(
        want.starts_with(shown[0].as_str()) && shown.last().map(String::as_str) == Some(want.as_str()),
        "{shown:?}"
    );
    assert_eq!(completed.as_deref(), Some(want.as_str()));

    // Hot reload of the dev row: another tool component at its path.
    let tmp = e.home.path().join("jobs.wasm.tmp");
    std::fs::copy(wharf_tests::plugin(plugins::ECHO), &tmp).expect("copying the echo component");
    std::fs::rename(&tmp, &fixture).expect("moving the new file in place");
    let n = c.wait_for("the reload notice", |v| {
        v["method"] == "session/update" && v["params"]["update"]["sessionUpdate"] == "notice"
    });
    let notice: acp::SessionNotification = typed("the notice", &n["params"]);
    let acp::SessionUpdate::Notice(notice) = notice.update else { panic!("not a notice: {n}") };
    assert_eq!(notice.severity, acp::NoticeSeverity::Info);
    assert_eq!(notice.title, "↻ jobs reloaded (dev)", "{n}");
    c.close();
}

/// Issue 40: an MCP server's `elicitation/create` during a tool call, and
/// a component tool's question (the `questions` import, granted), reach a
/// client that advertises `elicitation.form` as ACP `elicitation/create`
/// requests scoped to the session and call; the accepted content goes back
/// to the asker (the tool results hold it). A form past the bounds (too
/// many fields, an oversized message) is refused to the asker, and the
/// session goes on. Questions open when the turn is cancelled are
/// withdrawn and logged cancelled.
#[test]
fn mcp_elicitation_is_asked_over_acp_and_oversized_forms_are_refused() {
    let e = env();
    let turns = r#"
[[plugin.config.turns]]
tool_calls = [{ name = "mcp__ed__ask", arguments = {} }]

[[plugin.config.turns]]
tool_calls = [{ name = "ask", arguments = {} }]

[[plugin.config.turns]]
tool_calls = [{ name = "mcp__ed__ask", arguments = { fields = 40 } }]

[[plugin.config.turns]]
tool_calls = [{ name = "mcp__ed__ask", arguments = { pad = 20000 } }]

[[plugin.config.turns]]
tool_calls = [{ name = "ask", arguments = { fields = 40 } }]

[[plugin.config.turns]]
text = "Done."

[[plugin.config.turns]]
tool_calls = [{ name = "mcp__ed__ask", arguments = {} }, { name = "ask", arguments = {} }]

[[plugin.config.turns]]
text = "Not reached."
"#;
    // A component tool that asks (`evil`'s `ask`), granted `questions`.
    let asker = r#"
[[plugin]]
id = "evil"
path = "${plugin_dir}/evil.wasm"
[plugin.grant]
questions = true
"#;
    let _ = wharf_tests::plugin(plugins::EVIL);
    let p = e.profile_with("elicit", turns, asker);
    let fx = crate::mcp::fixture().display().to_string();
    let mut c = e.spawn(&p);
    let id = c.request(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {"elicitation": {"form": {}}},
               "clientInfo": {"name": "asker", "version": "1"}}),
    );
    c.result(id);
    let servers = json!([{"name": "ed", "command": fx, "args": ["stdio", "--elicit"], "env": []}]);
    let id = c.request("session/new", json!({"cwd": e.cwd(), "mcpServers": servers}));
    let sid = c.result(id)["sessionId"].as_str().unwrap_or_default().to_string();
    let prompt = c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}));

    let ask = c.wait_for("elicitation/create", |v| v["method"] == "elicitation/create");
    let params = &ask["params"];
    let request: acp::CreateElicitationRequest = typed("elicitation/create", params);
    assert_eq!(request.message, "Who is asking?");
    assert_eq!((params["mode"].as_str(), params["sessionId"].as_str()), (Some("form"), Some(sid.as_str())), "{ask}");
    assert!(params["toolCallId"].is_string(), "{ask}");
    assert_eq!(params["requestedSchema"]["required"], json!(["name"]), "{ask}");
    assert_eq!(params["requestedSchema"]["properties"]["count"]["type"], "integer", "{ask}");
    c.respond(&ask["id"], json!({"action": "accept", "content": {"name": "Ada", "count": 2, "ok": true}}));

    // The component's question: the same request, named by its plugin.
    let ask = c.wait_for("the component's elicitation/create", |v| {
        v["method"] == "elicitation/create" && v["params"]["_meta"]["wharf/source"] == "evil"
    });
    let params = &ask["params"];
    let request: acp::CreateElicitationRequest = typed("elicitation/create", params);
    assert_eq!(request.message, "Who is asking?");
    assert_eq!((params["mode"].as_str(), params["sessionId"].as_str()), (Some("form"), Some(sid.as_str())), "{ask}");
    assert!(params["toolCallId"].is_string(), "{ask}");
    assert_eq!(params["requestedSchema"]["properties"]["name"]["title"], "Your name", "{ask}");
    assert_eq!(params["requestedSchema"]["properties"]["count"]["maximum"], 9, "{ask}");
    c.respond(&ask["id"], json!({"action": "accept", "content": {"name": "Cy", "count": 3}}));

    let done = c.result(prompt);
    assert_eq!(done["stopReason"], "end_turn", "{done}");
    let log = e.log_types(&sid);
    let results: Vec<&Value> = log.iter().filter(|v| v["type"] == "tool/result").collect();
    assert_eq!(results.len(), 5, "{log:?}");
    let accepted = results[0]["data"]["content"].as_str().unwrap_or_default();
    assert!(
        accepted.starts_with("accepted: ")
            && ["\"name\":\"Ada\"", "\"count\":2", "\"ok\":true"].iter().all(|s| accepted.contains(s)),
        "{accepted}"
    );
    // The component got the answer, checked against its form.
    let answer = results[1]["data"]["content"].as_str().unwrap_or_default();
    assert_eq!(answer, r#"accepted: {"count":3,"name":"Cy"}"#, "{:?}", results[1]);
    // Past the bounds: refused to the asker, nobody asked, no panic.
    for (r, why) in [(results[2], "fields"), (results[3], "message")] {
        let text = r["data"]["content"].as_str().unwrap_or_default();
        assert!(text.starts_with("elicitation failed") && text.contains(why), "{r}");
    }
    let refused = results[4]["data"]["content"].as_str().unwrap_or_default();
    assert!(refused.starts_with("ask failed: ") && refused.contains("40 fields"), "{:?}", results[4]);
    let asked: Vec<&Value> = c.seen.iter().filter(|v| v["method"] == "elicitation/create").collect();
    assert_eq!(asked.len(), 2, "only the bounded forms are asked");
    // Both ends are in the log.
    let q: Vec<&Value> = log.iter().filter(|v| v["type"] == "question/asked").collect();
    assert_eq!(q.len(), 2, "{log:?}");
    assert_eq!((q[0]["ignorable"].as_bool(), q[0]["data"]["source"].as_str()), (Some(true), Some("mcp:ed")), "{q:?}");
    assert_eq!(q[1]["data"]["source"], "evil", "{q:?}");
    let a: Vec<&Value> = log.iter().filter(|v| v["type"] == "question/answered").collect();
    assert_eq!(a.len(), 2, "{log:?}");
    assert_eq!((a[0]["data"]["action"].as_str(), a[0]["data"]["by"].as_str()), (Some("accept"), Some("acp:asker")));
    assert_eq!(a[0]["data"]["content"]["name"], "Ada", "{a:?}");
    assert_eq!(
        (a[1]["data"]["action"].as_str(), a[1]["data"]["content"]["name"].as_str()),
        (Some("accept"), Some("Cy"))
    );

    // Questions still open when the turn is cancelled (the server's and
    // the component's, asked together) are withdrawn and logged cancelled.
    let prompt = c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "again"}]}));
    let second = c.seen.len();
    c.wait_for("a second elicitation/create", |v| v["method"] == "elicitation/create");
    if c.seen[second..].iter().filter(|v| v["method"] == "elicitation/create").count() < 2 {
        c.wait_for("a third elicitation/create", |v| v["method"] == "elicitation/create");
    }
    c.notify("session/cancel", json!({"sessionId": sid}));
    assert_eq!(c.result(prompt)["stopReason"], "cancelled");
    let log = e.log_types(&sid);
    let answers: Vec<&Value> = log.iter().filter(|v| v["type"] == "question/answered").collect();
    assert_eq!(answers.len(), 4, "{answers:?}");
    assert!(answers[2..].iter().all(|a| a["data"]["action"] == "cancel"), "{answers:?}");
    // The client is told the requests are withdrawn.
    let withdrawn = |seen: &[Value]| seen.iter().filter(|v| v["method"] == "$/cancel_request").count();
    while withdrawn(&c.seen[second..]) < 2 {
        c.wait_for("$/cancel_request", |v| v["method"] == "$/cancel_request");
    }
    c.close();
}

/// Issue 40: a permission policy that asks (`policy-ask`, granted
/// `questions`) reaches the client as `elicitation/create` on the tool call
/// it decides (the `toolCallId` of the `tool_call` update the client was
/// sent, `_meta.wharf/source` the policy row); the reason given lets the
/// call run. A policy's question open when the turn is cancelled is
/// withdrawn (`$/cancel_request`), logged cancelled, and the policy's
/// `cancel` branch (deny) decides.
#[test]
fn a_policys_question_is_asked_over_acp_on_the_call_it_decides() {
    let e = env();
    let _ = wharf_tests::plugin(plugins::POLICY_ASK);
    let turns = r#"
[[plugin.config.turns]]
tool_calls = [{ name = "write", arguments = { path = "NOTES.md", content = "hello" } }]

[[plugin.config.turns]]
text = "Done."

[[plugin.config.turns]]
tool_calls = [{ name = "write", arguments = { path = "LATER.md", content = "later" } }]

[[plugin.config.turns]]
text = "Not reached."
"#;
    let policy = r#"
[[plugin]]
id = "why"
path = "${plugin_dir}/policy-ask.wasm"
[plugin.config]
tools = ["write"]
[plugin.grant]
questions = true
timeout_ms = 120000
"#;
    let p = e.profile_with("policy-asks", turns, policy);
    let mut c = e.spawn(&p);
    let id = c.request(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {"elicitation": {"form": {}}},
               "clientInfo": {"name": "asker", "version": "1"}}),
    );
    c.result(id);
    let id = c.request("session/new", json!({"cwd": e.cwd(), "mcpServers": []}));
    let sid = c.result(id)["sessionId"].as_str().unwrap_or_default().to_string();
    let prompt = c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}));

    let ask = c.wait_for("the policy's elicitation/create", |v| v["method"] == "elicitation/create");
    let params = &ask["params"];
    let request: acp::CreateElicitationRequest = typed("elicitation/create", params);
    assert_eq!(request.message, "A reason is needed before `write` runs.");
    assert_eq!(
        (params["_meta"]["wharf/source"].as_str(), params["sessionId"].as_str()),
        (Some("why"), Some(sid.as_str()))
    );
    assert_eq!(params["requestedSchema"]["required"], json!(["reason"]), "{ask}");
    // On the call the client was told about.
    let call = params["toolCallId"].clone();
    let ask_id = ask["id"].clone();
    let is_the_call = |v: &Value| {
        v["method"] == "session/update"
            && v["params"]["update"]["sessionUpdate"] == "tool_call"
            && v["params"]["update"]["toolCallId"] == call
    };
    if !c.seen.iter().any(is_the_call) {
        c.wait_for("the tool_call update of the call the policy asks about", is_the_call);
    }
    c.respond(&ask_id, json!({"action": "accept", "content": {"reason": "the user asked for notes"}}));
    let done = c.result(prompt);
    assert_eq!(done["stopReason"], "end_turn", "{done}");
    assert_eq!(std::fs::read_to_string(e.ws.path().join("NOTES.md")).unwrap_or_default(), "hello");
    let log = e.log_types(&sid);
    let asked: Vec<&Value> = log.iter().filter(|v| v["type"] == "question/asked").collect();
    assert_eq!(asked.len(), 1, "{log:?}");
    assert_eq!((asked[0]["data"]["call_id"].clone(), asked[0]["data"]["source"].as_str()), (call.clone(), Some("why")));
    let decision = log.iter().find(|v| v["type"] == "policy/decision").cloned().unwrap_or_default();
    assert_eq!(decision["data"]["call_id"], call, "{decision}");
    assert_eq!(decision["data"]["verdict"], "allow", "{decision}");

    // Cancelled while the policy asks: withdrawn, and the policy decides.
    let prompt = c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "again"}]}));
    let second = c.seen.len();
    c.wait_for("a second elicitation/create", |v| v["method"] == "elicitation/create");
    c.notify("session/cancel", json!({"sessionId": sid}));
    assert_eq!(c.result(prompt)["stopReason"], "cancelled");
    if !c.seen[second..].iter().any(|v| v["method"] == "$/cancel_request") {
        c.wait_for("$/cancel_request", |v| v["method"] == "$/cancel_request");
    }
    let log = e.log_types(&sid);
    let answers: Vec<&Value> = log.iter().filter(|v| v["type"] == "question/answered").collect();
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert_eq!(answers[1]["data"]["action"], "cancel", "{answers:?}");
    let decisions: Vec<&Value> = log.iter().filter(|v| v["type"] == "policy/decision").collect();
    assert_eq!(decisions.len(), 2, "{log:?}");
    let d = &decisions[1]["data"];
    assert_eq!(d["verdict"], "deny", "{d}");
    assert!(d["reason"].as_str().unwrap_or_default().contains("(nobody answered)"), "{d}");
    assert!(!e.ws.path().join("LATER.md").exists(), "the cancelled call did not run");
    c.close();
}
