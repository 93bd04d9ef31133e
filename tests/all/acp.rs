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
    let updates = c.updates();
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
    // Only stdio is supported, so neither http nor sse is advertised.
    let mcp_caps = &init["agentCapabilities"]["mcpCapabilities"];
    assert!(mcp_caps["http"] != true && mcp_caps["sse"] != true, "{init}");
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
