//! `wharf mcp serve` asking the MCP client a component's question, and the
//! Tasks extension, on the wire through the real binary (stdio, raw
//! JSON-RPC lines — they show the wire format):
//!
//! - a 2025-11-25 client that declared `elicitation` gets
//!   `elicitation/create` and its answer (accept, decline, one that does not
//!   fit the form) reaches the component; a client without it gets the
//!   decline;
//! - a 2026-07-28 client gets `resultType: "input_required"`, retries with
//!   `inputResponses` and the `requestState`, and gets the final result; a
//!   forged, replayed or mismatched `requestState` is refused (-32602);
//! - a question nobody answers ends at the call's deadline (`TIMEOUT`, the
//!   question logged cancelled, the `requestState` expired, the pending
//!   `elicitation/create` withdrawn);
//! - a task (`io.modelcontextprotocol/tasks`): created, polled with
//!   `tasks/get`, its question answered with `tasks/update`, its result
//!   fetched; cancelled tasks end their calls (`ABORTED` in the log); a task
//!   past the 64 unfinished ones is refused;
//! - over Streamable HTTP, the official Python SDK's `Client` answers the
//!   question in both revisions (`tests/mcp-http-client/ask.py`).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};
use wharf_core::EventKind;
use wharf_tests::plugins;

const TASKS: &str = "io.modelcontextprotocol/tasks";

/// A workspace and a profile with `evil` (its `ask` tool asks the
/// `questions` import; `sleep` blocks) granted questions, with this call
/// deadline.
struct Served {
    home: tempfile::TempDir,
    ws: tempfile::TempDir,
    profile: PathBuf,
}

fn served(timeout_ms: u64) -> Served {
    let _ = wharf_tests::plugin(plugins::EVIL);
    let home = tempfile::tempdir().expect("creating a temp dir");
    let ws = tempfile::tempdir().expect("creating a temp dir");
    let profile = home.path().join("serve.toml");
    std::fs::write(
        &profile,
        format!(
            "[[plugin]]\nid = \"evil\"\npath = \"${{plugin_dir}}/evil.wasm\"\n[plugin.grant]\nquestions = true\n\
             timeout_ms = {timeout_ms}\n"
        ),
    )
    .expect("writing profile");
    Served { home, ws, profile }
}

impl Served {
    fn sessions(&self) -> PathBuf {
        self.home.path().join("sessions")
    }

    fn events(&self, session: &str) -> anyhow::Result<Vec<wharf_core::Event>> {
        Ok(wharf_core::SessionStore::new(self.sessions()).load(session).context("loading the session")?.events)
    }
}

/// `wharf mcp serve` on stdio, driven line by line.
struct Raw {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    rx: std::sync::mpsc::Receiver<String>,
}

impl Raw {
    fn start(s: &Served) -> anyhow::Result<Self> {
        let mut child = wharf_tests::wharf(s.home.path())
            .args(["mcp", "serve", "--profile"])
            .arg(&s.profile)
            .arg("-w")
            .arg(s.ws.path())
            .arg("--session-dir")
            .arg(s.sessions())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("spawning wharf mcp serve")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let stdin = child.stdin.take();
        Ok(Self { child, stdin, rx })
    }

    fn send(&mut self, v: &Value) -> anyhow::Result<()> {
        use std::io::Write;
        let stdin = self.stdin.as_mut().context("stdin closed")?;
        writeln!(stdin, "{v}").and_then(|()| stdin.flush()).context("writing to wharf mcp serve")
    }

    /// The next line from the server.
    fn next(&self, what: &str) -> anyhow::Result<Value> {
        let line = self.rx.recv_timeout(Duration::from_secs(120)).with_context(|| format!("no line for {what}"))?;
        serde_json::from_str(&line).with_context(|| format!("the line for {what} is not JSON: {line}"))
    }

    /// Sends a request and returns its response (other lines are skipped).
    fn request(&mut self, id: i64, method: &str, params: Value) -> anyhow::Result<Value> {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        self.response(id, method)
    }

    fn response(&mut self, id: i64, what: &str) -> anyhow::Result<Value> {
        loop {
            let v = self.next(what)?;
            if v["id"] == id && v.get("method").is_none() {
                return Ok(v);
            }
        }
    }

    /// `initialize` (2025-11-25) with these capabilities, then `initialized`.
    fn initialize(&mut self, capabilities: Value) -> anyhow::Result<Value> {
        let init = self.request(
            0,
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": capabilities,
                   "clientInfo": {"name": "raw", "version": "1"}}),
        )?;
        anyhow::ensure!(init["result"]["protocolVersion"] == "2025-11-25", "{init}");
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        Ok(init)
    }

    fn close(mut self) -> anyhow::Result<()> {
        drop(self.stdin.take());
        let status = self.child.wait().context("waiting for the process")?;
        anyhow::ensure!(status.success(), "wharf mcp serve exited with {status}");
        Ok(())
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        if self.stdin.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The 2026-07-28 `_meta` of a stateless request with these capabilities.
fn meta_2026(capabilities: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    })
}

fn text(response: &Value) -> &str {
    response["result"]["content"][0]["text"].as_str().unwrap_or("")
}

fn session_of(response: &Value) -> String {
    response["result"]["_meta"]["wharf/session"].as_str().unwrap_or("").to_string()
}

/// `question/answered` events: (action, by).
fn answers(events: &[wharf_core::Event]) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Unknown { type_name, data } if type_name == "question/answered" => {
                Some((data["action"].as_str().unwrap_or("").to_string(), data["by"].as_str().unwrap_or("").to_string()))
            }
            _ => None,
        })
        .collect()
}

/// Tool results: (tool, error code).
fn results(events: &[wharf_core::Event]) -> Vec<(String, Option<String>)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolResult(r) => Some((r.name.clone(), r.error_code.as_ref().map(|c| c.to_string()))),
            _ => None,
        })
        .collect()
}

/// A 2025-11-25 client that declared `elicitation` gets the component's
/// question as `elicitation/create` (form mode, the component's message and
/// schema) and its answer reaches the component: accepted values, a
/// decline, and an answer that does not fit the form (the component gets
/// `cancel`). A client that did not declare it is not asked: declined.
#[test]
fn a_2025_11_25_client_answers_a_components_question_by_elicitation() -> anyhow::Result<()> {
    let s = served(60_000);
    let mut raw = Raw::start(&s)?;
    raw.initialize(json!({"elicitation": {"form": {}}}))?;
    let mut session = String::new();
    for (id, answer, expected) in [
        (
            1,
            json!({"action": "accept", "content": {"name": "ada", "count": 3}}),
            r#"accepted: {"count":3,"name":"ada"}"#,
        ),
        (2, json!({"action": "decline"}), "declined"),
        (3, json!({"action": "accept", "content": {"name": "x".repeat(41)}}), "cancelled"),
    ] {
        raw.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "ask", "arguments": {}}}))?;
        let asked = raw.next("elicitation/create")?;
        assert_eq!(asked["method"], "elicitation/create", "{asked}");
        assert_eq!(asked["params"]["message"], "Who is asking?", "{asked}");
        let schema = &asked["params"]["requestedSchema"];
        assert_eq!(schema["required"], json!(["name"]), "{asked}");
        assert_eq!(schema["properties"]["count"]["type"], "integer", "{asked}");
        raw.send(&json!({"jsonrpc": "2.0", "id": asked["id"].clone(), "result": answer}))?;
        let done = raw.response(id, "tools/call")?;
        assert_eq!(text(&done), expected, "{done}");
        assert!(done["result"].get("resultType").is_none(), "a 2025-11-25 result: {done}");
        session = session_of(&done);
    }
    raw.close()?;
    let a = answers(&s.events(&session)?);
    let a: Vec<(&str, &str)> = a.iter().map(|(x, y)| (x.as_str(), y.as_str())).collect();
    assert_eq!(a, [("accept", "mcp-client"), ("decline", "mcp-client"), ("cancel", "mcp-client")]);

    // No `elicitation` capability: nobody is asked, the question is declined.
    let mut raw = Raw::start(&s)?;
    raw.initialize(json!({}))?;
    raw.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "ask", "arguments": {}}}))?;
    let next = raw.next("the tools/call result")?;
    assert_eq!((next["id"].clone(), text(&next)), (json!(1), "declined"), "{next}");
    raw.close()?;
    Ok(())
}

/// A 2026-07-28 client (elicitation in its per-request capabilities) gets
/// `input_required` with the question as an `elicitation/create` input
/// request and a `requestState`; a forged state and the right state with
/// other arguments are refused (-32602, the held call unharmed); the retry
/// with the answer gets the final result; replaying the state is refused.
/// A 2026-07-28 client without elicitation gets the decline.
#[test]
fn a_2026_07_28_client_answers_through_input_required_and_forged_states_are_refused() -> anyhow::Result<()> {
    let s = served(60_000);
    let mut raw = Raw::start(&s)?;
    let meta = meta_2026(json!({"elicitation": {}}));
    let first = raw.request(1, "tools/call", json!({"name": "ask", "arguments": {}, "_meta": meta}))?;
    let r = &first["result"];
    assert_eq!(r["resultType"], "input_required", "{first}");
    assert_eq!(r["inputRequests"]["q1"]["method"], "elicitation/create", "{first}");
    assert_eq!(r["inputRequests"]["q1"]["params"]["message"], "Who is asking?", "{first}");
    assert_eq!(r["inputRequests"]["q1"]["params"]["requestedSchema"]["required"], json!(["name"]), "{first}");
    let state = r["requestState"].as_str().context("no requestState")?.to_string();

    let answer = json!({"q1": {"action": "accept", "content": {"name": "grace"}}});
    let forged = raw.request(
        2,
        "tools/call",
        json!({"name": "ask", "arguments": {}, "_meta": meta,
               "requestState": format!("{state}x"), "inputResponses": answer}),
    )?;
    assert_eq!(forged["error"]["code"], -32602, "{forged}");
    assert!(forged["error"]["message"].as_str().is_some_and(|m| m.contains("requestState")), "{forged}");
    let other = raw.request(
        3,
        "tools/call",
        json!({"name": "ask", "arguments": {"fields": 1}, "_meta": meta,
               "requestState": state, "inputResponses": answer}),
    )?;
    assert_eq!(other["error"]["code"], -32602, "{other}");
    let unfit = raw.request(
        4,
        "tools/call",
        json!({"name": "ask", "arguments": {}, "_meta": meta, "requestState": state,
               "inputResponses": {"q1": {"action": "accept", "content": {"count": 3}}}}),
    )?;
    assert!(unfit["error"]["message"].as_str().is_some_and(|m| m.contains("required")), "{unfit}");

    let done = raw.request(
        5,
        "tools/call",
        json!({"name": "ask", "arguments": {}, "_meta": meta, "requestState": state, "inputResponses": answer}),
    )?;
    assert_eq!(done["result"]["resultType"], "complete", "{done}");
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(text(&done), r#"accepted: {"name":"grace"}"#, "{done}");
    let replayed = raw.request(
        6,
        "tools/call",
        json!({"name": "ask", "arguments": {}, "_meta": meta, "requestState": state, "inputResponses": answer}),
    )?;
    assert_eq!(replayed["error"]["code"], -32602, "{replayed}");

    // Without elicitation: declined, no input_required.
    let plain = raw.request(7, "tools/call", json!({"name": "ask", "arguments": {}, "_meta": meta_2026(json!({}))}))?;
    assert_eq!(text(&plain), "declined", "{plain}");
    raw.close()?;
    let a = answers(&s.events(&session_of(&done))?);
    assert_eq!(a.first().map(|(x, y)| (x.as_str(), y.as_str())), Some(("accept", "mcp-client")), "{a:?}");
    Ok(())
}

/// A question nobody answers ends with the call's deadline: a 2026-07-28
/// client that never retries — the held call ends `TIMEOUT` (the next call
/// runs after it), the question is logged cancelled and the `requestState`
/// is refused afterwards; a 2025-11-25 client that never answers
/// `elicitation/create` gets the `TIMEOUT` result and the request withdrawn
/// (`notifications/cancelled`).
#[test]
fn a_question_nobody_answers_ends_at_the_call_deadline() -> anyhow::Result<()> {
    let s = served(3_000);
    let mut raw = Raw::start(&s)?;
    let meta = meta_2026(json!({"elicitation": {}}));
    let first = raw.request(1, "tools/call", json!({"name": "ask", "arguments": {}, "_meta": meta}))?;
    let state = first["result"]["requestState"].as_str().context("no requestState")?.to_string();
    // Calls take turns: this one runs once the held call has ended.
    let next = raw.request(2, "tools/call", json!({"name": "sleep", "arguments": {"ms": 1}, "_meta": meta}))?;
    assert_eq!(text(&next), "slept 1 ms", "{next}");
    let late = raw.request(
        3,
        "tools/call",
        json!({"name": "ask", "arguments": {}, "_meta": meta, "requestState": state,
               "inputResponses": {"q1": {"action": "decline"}}}),
    )?;
    assert_eq!(late["error"]["code"], -32602, "{late}");
    assert!(late["error"]["message"].as_str().is_some_and(|m| m.contains("expired")), "{late}");
    raw.close()?;
    let events = s.events(&session_of(&next))?;
    let r = results(&events);
    assert_eq!(r[0], ("ask".to_string(), Some("TIMEOUT".to_string())), "{r:?}");
    assert_eq!(answers(&events).first().map(|(a, _)| a.as_str()), Some("cancel"));

    let mut raw = Raw::start(&s)?;
    raw.initialize(json!({"elicitation": {}}))?;
    raw.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "ask", "arguments": {}}}))?;
    let asked = raw.next("elicitation/create")?;
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    let (mut result, mut withdrawn) = (None, false);
    while result.is_none() || !withdrawn {
        let v = raw.next("the result and the withdrawal")?;
        if v["method"] == "notifications/cancelled" {
            assert_eq!(v["params"]["requestId"], asked["id"], "{v}");
            withdrawn = true;
        } else if v["id"] == 1 {
            result = Some(v);
        }
    }
    let result = result.unwrap_or_default();
    assert_eq!(result["result"]["_meta"]["wharf/error_code"], "TIMEOUT", "{result}");
    raw.close()?;
    Ok(())
}

/// Polls `tasks/get` until the task's status is `want` (or terminal).
fn poll(raw: &mut Raw, id: &mut i64, task: &str, want: &str, meta: &Value) -> anyhow::Result<Value> {
    loop {
        *id += 1;
        let got = raw.request(*id, "tasks/get", json!({"taskId": task, "_meta": meta}))?;
        let status = got["result"]["status"].as_str().with_context(|| format!("no status: {got}"))?;
        if status == want || ["completed", "failed", "cancelled"].contains(&status) {
            return Ok(got);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A client that declares the Tasks extension gets a task for its
/// `tools/call`; `tasks/get` shows it working, then `input_required` with
/// the component's question; `tasks/update` answers it; `tasks/get` then
/// holds the completed `CallToolResult`. The capability is advertised; an
/// unknown task id is refused; a 2026-07-28 request declaring the extension
/// in its `_meta` gets a task too.
#[test]
fn a_task_is_created_polled_answered_and_its_result_fetched() -> anyhow::Result<()> {
    let s = served(60_000);
    let mut raw = Raw::start(&s)?;
    let init = raw.initialize(json!({"extensions": {TASKS: {}}, "elicitation": {}}))?;
    assert!(init["result"]["capabilities"]["extensions"].get(TASKS).is_some(), "{init}");
    let created = raw.request(1, "tools/call", json!({"name": "ask", "arguments": {}}))?;
    let r = &created["result"];
    assert_eq!((r["resultType"].as_str(), r["status"].as_str()), (Some("task"), Some("working")), "{created}");
    assert!(r["pollIntervalMs"].as_u64().is_some(), "{created}");
    let task = r["taskId"].as_str().context("no taskId")?.to_string();
    let no_meta = json!({});
    let mut id = 10;
    let asking = poll(&mut raw, &mut id, &task, "input_required", &no_meta)?;
    assert_eq!(asking["result"]["status"], "input_required", "{asking}");
    assert_eq!(asking["result"]["inputRequests"]["q1"]["method"], "elicitation/create", "{asking}");
    let ack = raw.request(
        2,
        "tasks/update",
        json!({"taskId": task, "inputResponses": {"q1": {"action": "accept", "content": {"name": "tasker"}}}}),
    )?;
    assert!(ack.get("error").is_none(), "{ack}");
    let done = poll(&mut raw, &mut id, &task, "completed", &no_meta)?;
    assert_eq!(done["result"]["status"], "completed", "{done}");
    assert_eq!(done["result"]["result"]["content"][0]["text"], r#"accepted: {"name":"tasker"}"#, "{done}");
    assert!(done["result"]["ttlMs"].as_u64().is_some(), "a finished result is kept for a while: {done}");
    let unknown = raw.request(3, "tasks/get", json!({"taskId": "nope"}))?;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    raw.close()?;

    // 2026-07-28: the extension declared per request.
    let mut raw = Raw::start(&s)?;
    let meta = meta_2026(json!({"extensions": {TASKS: {}}}));
    let created = raw.request(1, "tools/call", json!({"name": "sleep", "arguments": {"ms": 1}, "_meta": meta}))?;
    let task = created["result"]["taskId"].as_str().with_context(|| format!("no task: {created}"))?.to_string();
    let mut id = 10;
    let done = poll(&mut raw, &mut id, &task, "completed", &meta)?;
    assert_eq!(done["result"]["result"]["content"][0]["text"], "slept 1 ms", "{done}");
    raw.close()?;
    Ok(())
}

/// 64 unfinished tasks are held; the 65th is refused. `tasks/cancel` ends
/// the calls: every task ends `cancelled`, the call that was running
/// (`statusMessage: "running"`; the others wait for their turn) is logged
/// `ABORTED`, none ran to its end, and a new task fits again.
#[test]
fn cancelled_tasks_end_their_calls_and_over_limit_tasks_are_refused() -> anyhow::Result<()> {
    let s = served(600_000);
    let mut raw = Raw::start(&s)?;
    raw.initialize(json!({"extensions": {TASKS: {}}}))?;
    let sleep = json!({"name": "sleep", "arguments": {"ms": 600_000}});
    // The first runs (calls take turns: the others wait for theirs).
    let first = raw.request(1, "tools/call", sleep.clone())?;
    let mut tasks = vec![first["result"]["taskId"].as_str().with_context(|| format!("no task: {first}"))?.to_string()];
    assert_eq!(first["result"]["statusMessage"], "waiting for its turn", "{first}");
    let mut id = 100;
    loop {
        id += 1;
        let got = raw.request(id, "tasks/get", json!({"taskId": tasks[0]}))?;
        if got["result"]["statusMessage"] == "running" {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for id in 2..=64 {
        raw.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": sleep}))?;
    }
    // The answers come in any order.
    while tasks.len() < 64 {
        let created = raw.next("a task handle")?;
        if created.get("method").is_some() {
            continue;
        }
        assert_eq!(created["result"]["resultType"], "task", "{created}");
        tasks.push(created["result"]["taskId"].as_str().with_context(|| format!("no task: {created}"))?.to_string());
    }
    let refused = raw.request(65, "tools/call", sleep.clone())?;
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert!(refused["error"]["message"].as_str().is_some_and(|m| m.contains("too many tasks")), "{refused}");

    for task in &tasks {
        id += 1;
        let ack = raw.request(id, "tasks/cancel", json!({"taskId": task}))?;
        assert!(ack.get("error").is_none(), "{ack}");
    }
    for task in &tasks {
        let got = poll(&mut raw, &mut id, task, "cancelled", &json!({}))?;
        assert_eq!(got["result"]["status"], "cancelled", "{got}");
    }
    let again = raw.request(66, "tools/call", json!({"name": "sleep", "arguments": {"ms": 1}}))?;
    let task = again["result"]["taskId"].as_str().with_context(|| format!("no task: {again}"))?.to_string();
    let done = poll(&mut raw, &mut id, &task, "completed", &json!({}))?;
    let session = done["result"]["result"]["_meta"]["wharf/session"].as_str().unwrap_or("").to_string();
    raw.close()?;

    // The running call was aborted; a waiting one that got its turn before
    // its own cancel arrived was aborted too: none ran to its end.
    let r = results(&s.events(&session)?);
    let (last, cancelled) = r.split_last().context("no results")?;
    assert_eq!(*last, ("sleep".to_string(), None), "{r:?}");
    assert_eq!(cancelled.first().and_then(|(_, c)| c.as_deref()), Some("ABORTED"), "{r:?}");
    assert!(
        cancelled.iter().all(|(_, c)| matches!(c.as_deref(), Some("ABORTED" | "ABORTED_BEFORE_DISPATCH"))),
        "{r:?}"
    );
    Ok(())
}

/// `wharf mcp serve --http 127.0.0.1:0` on this profile: the child, its
/// URL and token (from the line naming them).
fn start_http(s: &Served) -> anyhow::Result<(std::process::Child, String, String)> {
    let mut child = wharf_tests::wharf(s.home.path())
        .args(["mcp", "serve", "--http", "127.0.0.1:0", "--profile"])
        .arg(&s.profile)
        .arg("-w")
        .arg(s.ws.path())
        .arg("--session-dir")
        .arg(s.sessions())
        .env_remove("WHARF_MCP_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("spawning wharf mcp serve --http")?;
    let stderr = child.stderr.take().context("no stderr")?;
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = String::new();
    while let Some(Ok(line)) = lines.next() {
        seen.push_str(&line);
        seen.push('\n');
        if let Some(rest) = line.split_once("serving MCP on ").map(|(_, r)| r) {
            let (url, auth) = rest.split_once(" (Authorization: Bearer ").unwrap_or((rest, ""));
            let token = auth.trim_end_matches(')').to_string();
            // Keep reading stderr so the server never blocks on it.
            std::thread::spawn(move || lines.for_each(drop));
            return Ok((child, url.to_string(), token));
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    anyhow::bail!("no address line from wharf mcp serve --http: {seen}")
}

/// The official Python SDK (`Client`, pinned 2.3.0) over Streamable HTTP
/// answers the component's question in both revisions: with the handshake
/// (`mode="legacy"`) by `elicitation/create` on the call's event stream,
/// and in 2026-07-28 mode by its `input_required` retry loop; the tool's
/// result uses the answer.
#[test]
fn python_sdk_answers_a_components_question_over_http_in_both_revisions() -> anyhow::Result<()> {
    let Some(py) = crate::mcp_http::python_with_sdk() else {
        wharf_tests::skip(
            &wharf_tests::current_test(),
            "the Python MCP SDK is missing (pip install mcp==2.3.0, as .ci/run does in its virtualenv)",
        );
        return Ok(());
    };
    let s = served(60_000);
    let (mut child, url, token) = start_http(&s)?;
    let script = wharf_tests::root().join("tests/mcp-http-client/ask.py");
    let mut reports = Vec::new();
    for (mode, name) in [("legacy", "py-legacy"), ("2026-07-28", "py-2026")] {
        let answer = json!({"action": "accept", "content": {"name": name}});
        let out = std::process::Command::new(&py)
            .arg(&script)
            .args([url.as_str(), token.as_str(), mode, "ask", "{}", &answer.to_string()])
            .output()
            .context("running the Python MCP client")?;
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let report: Value = serde_json::from_str(stdout.trim())
            .with_context(|| format!("{mode}: not JSON: {stdout}\n{}", String::from_utf8_lossy(&out.stderr)))?;
        reports.push((mode, name, report));
    }
    let _ = child.kill();
    let _ = child.wait();
    for (mode, name, report) in reports {
        assert!(report.get("error").is_none(), "{mode}: {report}");
        let want = if mode == "legacy" { "2025-11-25" } else { "2026-07-28" };
        assert_eq!(report["protocol"], want, "{mode}: {report}");
        assert_eq!(report["asked"], json!(["Who is asking?"]), "{mode}: {report}");
        assert_eq!(report["is_error"], false, "{mode}: {report}");
        assert_eq!(report["text"], format!(r#"accepted: {{"name":"{name}"}}"#), "{mode}: {report}");
    }
    Ok(())
}
