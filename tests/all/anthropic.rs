//! The `llm-anthropic` component end to end: headless turns on an
//! in-process host (what `wharf run --output jsonl` runs) through the real
//! component, over `wasi:http`, against the validating
//! Messages API mock (`wharf_mock_llm::anthropic`) on loopback. The mock
//! refuses (400/401) and records every request that breaks a rule, so each
//! test also asserts that it saw none. `wharf sessions show`, a CLI
//! command, stays on the binary.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};
use wharf_mock_llm::anthropic::{AnthropicMock, AnthropicScript};
use wharf_tests::plugins;

use crate::inproc;

/// The key, in this process's environment from the start (`wharf_tests::host::TEST_ENV`).
const KEY: &str = inproc::ANTHROPIC_KEY;
const KEY_ENV: &str = inproc::ANTHROPIC_KEY_ENV;
const MODEL: &str = "claude-test-1";
/// A distinctive signature: it must go back unchanged and appear nowhere else.
const SIGNATURE: &str = "EqQBCkYIBxgCKkCsig+TEST/opaque==Zm9vYmFy";

struct Case {
    home: tempfile::TempDir,
    ws: tempfile::TempDir,
    sessions: PathBuf,
    mock: AnthropicMock,
}

use inproc::Headless as Run;

impl Case {
    fn new(replies: Value) -> Self {
        let script: AnthropicScript =
            serde_json::from_value(json!({"api_key": KEY, "model": MODEL, "replies": replies})).expect("parsing JSON");
        let mock = AnthropicMock::start_background(script).expect("starting the mock Anthropic API");
        let home = tempfile::tempdir().expect("creating a temp dir");
        let ws = tempfile::tempdir().expect("creating a temp dir");
        std::fs::write(ws.path().join("a.txt"), "alpha: the first file\n").expect("writing a.txt");
        let sessions = home.path().join("sessions");
        Self { home, ws, sessions, mock }
    }

    fn profile(&self, extra: &str) -> PathBuf {
        self.profile_with_key(extra, KEY_ENV)
    }

    /// The profile, its adapter reading the key from `key_env`.
    fn profile_with_key(&self, extra: &str, key_env: &str) -> PathBuf {
        let _ = wharf_tests::plugin(plugins::FS);
        let _ = wharf_tests::plugin(plugins::LLM_ANTHROPIC);
        let text = format!(
            r#"
[agent]
adapter = "model"
max_steps = 6

[[plugin]]
id = "fs"
path = "${{plugin_dir}}/fs.wasm"
[plugin.grant]
dirs = ["${{workspace}}:rw"]

[[plugin]]
id = "model"
path = "${{plugin_dir}}/llm-anthropic.wasm"
[plugin.config]
base_url = "{url}"
model = "{MODEL}"
api_key_env = "{key_env}"
idle_timeout_ms = 3000
{extra}
[plugin.grant]
hosts = ["127.0.0.1:{port}"]
env = ["{key_env}"]
timeout_ms = 20000
"#,
            url = self.mock.url(),
            port = self.mock.addr().port(),
        );
        let path = self.home.path().join("profile.toml");
        std::fs::write(&path, text).expect("writing the file");
        path
    }

    async fn run(&self, extra: &str, task: &str) -> Run {
        let profile = self.profile(extra);
        self.run_profile(&profile, task).await
    }

    /// One headless turn on an in-process host: `stdout` is what `wharf run
    /// --output jsonl` prints (the streamed events), `stderr` the host's
    /// notices and log (`warn`) meanwhile.
    async fn run_profile(&self, profile: &Path, task: &str) -> Run {
        inproc::headless(profile, self.ws.path(), self.home.path(), &self.sessions, task).await
    }

    /// `wharf sessions show ID`: a CLI command, on the binary.
    fn sessions_show(&self, id: &str) -> String {
        let out = wharf_tests::wharf(self.home.path())
            .current_dir(self.ws.path())
            .args(["sessions", "show", id, "--session-dir", &self.sessions.display().to_string()])
            .output()
            .expect("running wharf sessions show");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Every request body the mock received.
    fn bodies(&self) -> Vec<Value> {
        self.mock.requests().into_iter().map(|r| r.body.unwrap_or(Value::Null)).collect()
    }
}

fn count_cache_control(v: &Value) -> usize {
    match v {
        Value::Object(o) => {
            usize::from(o.contains_key("cache_control")) + o.values().map(count_cache_control).sum::<usize>()
        }
        Value::Array(a) => a.iter().map(count_cache_control).sum(),
        _ => 0,
    }
}

fn text_reply(text: &str) -> Value {
    json!({"kind": "stream", "blocks": [{"type": "text", "text": text}]})
}

#[tokio::test(flavor = "multi_thread")]
async fn anthropic_streams_text_with_cache_markers_and_cache_usage() {
    let case = Case::new(json!([{
        "kind": "stream",
        "blocks": [{"type": "text", "text": "Hello from the Messages API — ünïcode."}],
        "chunk_chars": 3,
        "event_delay_ms": 15,
        "usage": {"input_tokens": 40, "output_tokens": 12, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 200}
    }]));
    let run = case.run("max_tokens = 1024", "Say hello").await;
    assert_eq!(run.code, 0, "{}", run.explain());
    case.mock.assert_no_violations();
    // Streamed: several chunks whose text is the message.
    let chunks = run.of_type("assistant/chunk");
    assert!(chunks.len() > 1, "{}", run.explain());
    let streamed: String = chunks.iter().map(|c| c["text"].as_str().unwrap_or("")).collect();
    assert_eq!(streamed, "Hello from the Messages API — ünïcode.");
    let msg = run.of_type("assistant/message")[0].clone();
    assert_eq!(msg["content"], "Hello from the Messages API — ünïcode.");
    assert_eq!(msg["finish"], "stop");
    let u = &msg["usage"];
    assert_eq!(
        (&u["prompt_tokens"], &u["cache_hit_tokens"], &u["cache_miss_tokens"], &u["completion_tokens"]),
        (&json!(1240), &json!(1000), &json!(240), &json!(12)),
        "{msg}"
    );
    // On the wire: headers, the body shape, at most four cache breakpoints:
    // the system prompt, the last tool and the last message.
    let req = &case.mock.requests()[0];
    assert_eq!(req.headers.get("anthropic-version").map(String::as_str), Some("2023-06-01"));
    assert!(req.key_present && !req.headers.contains_key("x-api-key"));
    let body = req.body.clone().unwrap_or(Value::Null);
    assert_eq!((&body["model"], &body["max_tokens"], &body["stream"]), (&json!(MODEL), &json!(1024), &json!(true)));
    assert!(body.get("thinking").is_none(), "thinking is off unless configured");
    let n = count_cache_control(&body);
    assert!((1..=4).contains(&n), "{n} breakpoints: {body}");
    let last_tool = body["tools"].as_array().and_then(|t| t.last()).cloned().unwrap_or(Value::Null);
    assert_eq!(last_tool["cache_control"], json!({"type": "ephemeral"}), "{body}");
    assert!(body["tools"].as_array().is_some_and(|t| t.iter().all(|t| t["input_schema"]["type"] == "object")));
    let last_block = body["messages"][0]["content"].as_array().and_then(|c| c.last()).cloned().unwrap_or(Value::Null);
    assert_eq!(last_block["cache_control"], json!({"type": "ephemeral"}));
    assert_eq!(last_block["text"], "Say hello");
    if let Some(system) = body["system"].as_array().and_then(|s| s.last()) {
        assert_eq!(system["cache_control"], json!({"type": "ephemeral"}));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn anthropic_tool_use_round_trip_passes_thinking_signatures_back_and_never_shows_them() -> anyhow::Result<()> {
    let case = Case::new(json!([
        {"kind": "stream", "blocks": [
            {"type": "thinking", "thinking": "I should read a.txt first.", "signature": SIGNATURE},
            {"type": "text", "text": "Reading it."},
            {"type": "tool_use", "id": "toolu_01A", "name": "read", "input": {"path": "a.txt"}}
        ]},
        {"kind": "stream", "blocks": [
            {"type": "thinking", "thinking": "It says alpha.", "signature": "EqSecondSig=="},
            {"type": "text", "text": "The file says alpha."}
        ]}
    ]));
    let run = case.run("max_tokens = 4096\nthinking_budget = 2048", "What is in a.txt?").await;
    assert_eq!(run.code, 0, "{}", run.explain());
    case.mock.assert_no_violations();
    let bodies = case.bodies();
    assert_eq!(bodies.len(), 2, "{}", run.explain());
    assert_eq!(bodies[0]["thinking"], json!({"type": "enabled", "budget_tokens": 2048}));
    // The second request: the assistant turn with its thinking (signature
    // byte-identical) first, then its text and tool_use; the tool result in
    // the next user message, answering that id.
    let msgs = bodies[1]["messages"].as_array().cloned().unwrap_or_default();
    let roles: Vec<&str> = msgs.iter().map(|m| m["role"].as_str().unwrap_or("")).collect();
    assert_eq!(roles, ["user", "assistant", "user"], "{}", bodies[1]);
    let turn = msgs[1]["content"].as_array().cloned().unwrap_or_default();
    assert_eq!(turn[0], json!({"type": "thinking", "thinking": "I should read a.txt first.", "signature": SIGNATURE}));
    assert_eq!(turn[1]["text"], "Reading it.");
    assert_eq!(turn[2]["type"], "tool_use");
    assert_eq!((&turn[2]["id"], &turn[2]["input"]), (&json!("toolu_01A"), &json!({"path": "a.txt"})));
    let result = &msgs[2]["content"][0];
    assert_eq!((&result["type"], &result["tool_use_id"]), (&json!("tool_result"), &json!("toolu_01A")));
    assert!(result["content"].as_str().unwrap_or("").contains("alpha: the first file"), "{result}");
    assert!(count_cache_control(&bodies[1]) <= 4);

    // The reasoning is in the log; the signature nowhere.
    let messages = run.of_type("assistant/message");
    assert_eq!(messages[0]["reasoning"], "I should read a.txt first.");
    assert_eq!(messages[1]["content"], "The file says alpha.");
    assert!(!run.stdout.contains(SIGNATURE) && !run.stderr.contains(SIGNATURE));
    let shown = case.sessions_show(&run.session_id());
    assert!(shown.contains("The file says alpha."), "{shown}");
    assert!(!shown.contains(SIGNATURE) && !shown.contains("EqSecondSig"), "{shown}");
    for entry in walk(case.sessions.clone()) {
        let text = String::from_utf8_lossy(&std::fs::read(&entry).context("reading entry")?).into_owned();
        assert!(!text.contains(SIGNATURE), "{} holds the signature", entry.display());
    }
    Ok(())
}

fn walk(dir: PathBuf) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(&dir) else { return out };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() { out.extend(walk(p)) } else { out.push(p) }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn anthropic_429_with_retry_after_529_overloaded_and_a_mid_stream_error_are_retried() {
    let case = Case::new(json!([
        {"kind": "error", "status": 429, "retry_after": "1", "message": "Number of requests has exceeded your rate limit"},
        {"kind": "error", "status": 529, "message": "Overloaded"},
        {"kind": "stream", "blocks": [{"type": "text", "text": "partial answer"}, {"type": "text", "text": "never"}], "error_after_blocks": 1},
        text_reply("Recovered.")
    ]));
    let run = case.run("", "hello").await;
    assert_eq!(run.code, 0, "{}", run.explain());
    case.mock.assert_no_violations();
    let retries = run.retries();
    let codes: Vec<&str> = retries.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(codes, ["RATE_LIMIT", "SERVER", "SERVER"], "{}", run.explain());
    // `retry-after: 1` replaces the backoff and is waited.
    assert_eq!(retries[0].1, 1000);
    let received: Vec<u64> = case.mock.requests().iter().map(|r| r.received_ms).collect();
    assert!(received[1] - received[0] >= 1000, "{received:?}");
    assert!(run.elapsed >= Duration::from_secs(1));
    let messages = run.of_type("assistant/message");
    assert_eq!(messages.last().map(|m| m["content"].clone()), Some(json!("Recovered.")));
    assert_eq!(case.mock.requests().len(), 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn anthropic_401_is_auth_not_retried_and_names_the_key_variable() {
    let case = Case::new(json!([{"kind": "error", "status": 401, "message": "invalid x-api-key"}]));
    let run = case.run("", "hello").await;
    assert_eq!(run.code, 1, "{}", run.explain());
    case.mock.assert_no_violations();
    assert!(run.retries().is_empty());
    let end = run.turn_end();
    assert_eq!(end["code"], "AUTH", "{}", run.explain());
    let message = end["message"].as_str().unwrap_or("");
    assert!(message.contains(KEY_ENV) && message.contains("invalid x-api-key"), "{message}");
    assert!(!run.stdout.contains(KEY) && !run.stderr.contains(KEY));
}

#[tokio::test(flavor = "multi_thread")]
async fn anthropic_wrong_key_is_refused_by_the_mock_and_reported_as_auth() -> anyhow::Result<()> {
    let case = Case::new(json!([text_reply("unreachable")]));
    // The wrong key is in another variable: the environment is the test
    // process's, one value per variable.
    let profile = case.profile_with_key("", inproc::ANTHROPIC_WRONG_KEY_ENV);
    let run = case.run_profile(&profile, "hi").await;
    assert_eq!(run.code, 1);
    let stdout = &run.stdout;
    assert!(stdout.contains("\"AUTH\"") && stdout.contains(inproc::ANTHROPIC_WRONG_KEY_ENV), "{stdout}");
    let v = case.mock.violations();
    assert!(v.iter().any(|v| v.rule == "x_api_key"), "{v:?}");
    Ok(())
}

/// `wharf run --image` against the Messages API mock: the image goes out as
/// an `image` block with a base64 source after the text, the log keeps it
/// and `sessions show` prints a placeholder, never the bytes. The same
/// flag for the text-only `llm-deepseek` is refused naming the adapter,
/// before any request.
#[test]
fn anthropic_takes_images_from_wharf_run_and_deepseek_refuses_them() {
    const PIXEL: &[u8] = b"\x89PNG\r\n\x1a\nwharf-test-pixel";
    const PIXEL_B64: &str = "iVBORw0KGgp3aGFyZi10ZXN0LXBpeGVs";
    let case = Case::new(json!([text_reply("A tiny test image.")]));
    let profile = case.profile("max_tokens = 1024");
    std::fs::write(case.ws.path().join("pixel.png"), PIXEL).expect("writing the image");
    let run = |profile: &Path| {
        wharf_tests::wharf(case.home.path())
            .current_dir(case.ws.path())
            .args(["run", "--profile", &profile.display().to_string()])
            .args(["--session-dir", &case.sessions.display().to_string(), "--output", "jsonl"])
            .args(["--image", "pixel.png", "What is this?"])
            .output()
            .expect("running wharf run")
    };
    let out = run(&profile);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    case.mock.assert_no_violations();
    let bodies = case.bodies();
    let blocks = bodies[0]["messages"][0]["content"].clone();
    assert_eq!(blocks[0]["text"], "What is this?", "{blocks}");
    assert_eq!(
        blocks[1],
        json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL_B64},
               "cache_control": {"type": "ephemeral"}}),
        "{blocks}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let id = stderr
        .lines()
        .find_map(|l| l.strip_prefix("session ").and_then(|r| r.split_whitespace().next()))
        .unwrap_or_else(|| panic!("no session id in {stderr}"))
        .to_string();
    let shown = case.sessions_show(&id);
    assert!(shown.contains("> [image image/png, 24 bytes]"), "{shown}");
    assert!(!shown.contains(PIXEL_B64), "{shown}");

    let _ = wharf_tests::plugin(plugins::LLM_DEEPSEEK);
    let deepseek = case.home.path().join("deepseek.toml");
    let text = format!(
        r#"
[agent]
adapter = "deepseek"

[[plugin]]
id = "deepseek"
path = "${{plugin_dir}}/llm-deepseek.wasm"
[plugin.config]
base_url = "{url}"
model = "deepseek-test"
api_key_env = "{KEY_ENV}"
[plugin.grant]
hosts = ["127.0.0.1:{port}"]
env = ["{KEY_ENV}"]
"#,
        url = case.mock.url(),
        port = case.mock.addr().port(),
    );
    std::fs::write(&deepseek, text).expect("writing the profile");
    let requests = case.mock.requests().len();
    let out = run(&deepseek);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("the model adapter `deepseek` takes text only"), "{stderr}");
    assert_eq!(case.mock.requests().len(), requests, "no request was made");
}
