//! The daily-driver features on the wire, with the real `llm-deepseek`
//! component against the validating mock: `/model` in `wharf chat` changes
//! the model of the next request (and is logged), `wharf chat --continue`
//! reopens the workspace's latest session, the `/resume` picker, and an
//! `@path` attachment in a headless turn (on an in-process host, as `wharf
//! run` runs it) sends a request the DeepSeek mock accepts, with the file's
//! content in it. The chat tests drive the binary in a pty.

use std::path::PathBuf;

use anyhow::Context;
use serde_json::{Value, json};
use wharf_mock_llm::{MockLlm, Script};

use crate::chat::Pty;
use wharf_tests::host::{Run, TestHost};
use wharf_tests::plugins;

struct World {
    home: tempfile::TempDir,
    ws: tempfile::TempDir,
    sessions: PathBuf,
    profile: PathBuf,
    mock: MockLlm,
}

fn world(replies: Vec<Value>) -> World {
    let script: Script = serde_json::from_value(json!({ "replies": replies })).expect("parsing JSON");
    let mock = MockLlm::start_background(script).expect("starting the mock LLM");
    let home = tempfile::tempdir().expect("creating a temp dir");
    let ws = tempfile::tempdir().expect("creating a temp dir");
    std::fs::write(ws.path().join("README.md"), "# Sample\n\nThe magic word is heliotrope.\n")
        .expect("writing README.md");
    for p in [plugins::LLM_DEEPSEEK, plugins::FS] {
        let _ = wharf_tests::plugin(p);
    }
    let port = mock.addr().port();
    let text = format!(
        r#"
[agent]
adapter = "model"
max_steps = 4

[[plugin]]
id = "fs"
path = "${{plugin_dir}}/fs.wasm"
[plugin.grant]
dirs = ["${{workspace}}:rw"]

[[plugin]]
id = "model"
path = "${{plugin_dir}}/llm-deepseek.wasm"
[plugin.config]
base_url = "{url}/v1"
model = "base-model"
api_key_env = "WHARF_TEST_LLM_KEY"
idle_timeout_ms = 5000
[plugin.grant]
hosts = ["127.0.0.1:{port}"]
env = ["WHARF_TEST_LLM_KEY"]
timeout_ms = 20000
"#,
        url = mock.url()
    );
    let profile = home.path().join("profile.toml");
    std::fs::write(&profile, text).expect("writing profile");
    let sessions = home.path().join("sessions");
    World { home, ws, sessions, profile, mock }
}

impl World {
    fn command(&self, args: &[&str]) -> std::process::Command {
        let mut c = wharf_tests::wharf(self.home.path());
        c.current_dir(self.ws.path())
            .env("WHARF_TEST_LLM_KEY", "sk-test")
            .env("TERM", "dumb")
            .args(args)
            .args(["--profile", &self.profile.display().to_string()])
            .args(["--session-dir", &self.sessions.display().to_string()]);
        c
    }

    /// A headless turn on an in-process host over this world's workspace and
    /// sessions (`WHARF_TEST_LLM_KEY` is in this process's environment:
    /// `wharf_tests::host::TEST_ENV`).
    async fn run(&self, task: &str) -> anyhow::Result<Run> {
        let host = TestHost::builder()
            .profile(self.profile.display().to_string())
            .workspace(self.ws.path())
            .home(self.home.path())
            .sessions(&self.sessions)
            .start_in(self.home.path())
            .await?;
        let run = host.run(task).await;
        host.close().await;
        run
    }

    fn chat(&self, extra: &[&str]) -> Pty {
        let mut args = vec!["chat"];
        args.extend_from_slice(extra);
        Pty::spawn(self.command(&args))
    }

    fn sessions(&self) -> Vec<String> {
        let store = wharf_core::SessionStore::new(&self.sessions);
        store.list().expect("listing the sessions").into_iter().map(|s| s.id).collect()
    }

    fn events(&self, id: &str) -> Vec<Value> {
        let store = wharf_core::SessionStore::new(&self.sessions);
        let loaded = store.load(id).expect("loading the session");
        wharf_core::invariants::check(&loaded.events).expect("checking the log's invariants");
        loaded.events.iter().map(|e| serde_json::to_value(e).unwrap_or_default()).collect()
    }

    fn models_on_the_wire(&self) -> Vec<String> {
        self.mock
            .requests()
            .iter()
            .map(|r| r.body.as_ref().and_then(|b| b["model"].as_str()).unwrap_or_default().to_string())
            .collect()
    }
}

fn reply(text: &str) -> Value {
    json!({"kind": "stream", "text": text})
}

#[test]
fn model_switch_in_chat_reaches_the_next_request_and_continue_reopens_the_session() {
    let w = world(vec![reply("first answer"), reply("second answer"), reply("third answer")]);
    let mut t = w.chat(&[]);
    t.expect("› ");
    t.line("hello");
    t.expect("first answer");
    t.expect("— completed");
    t.line("/model other-model");
    t.expect("model: model/other-model");
    t.line("again");
    t.expect("second answer");
    t.expect("— completed");
    t.send("\x04");
    assert!(t.wait().success());
    drop(t);
    w.mock.assert_no_violations();
    assert_eq!(w.models_on_the_wire(), vec!["base-model", "other-model"]);
    let ids = w.sessions();
    assert_eq!(ids.len(), 1, "{ids:?}");
    let changes: Vec<Value> = w
        .events(&ids[0])
        .into_iter()
        .filter(|e| e["type"] == "session/model")
        .map(|e| e["data"]["model"].clone())
        .collect();
    assert_eq!(changes.last(), Some(&json!("other-model")), "{changes:?}");

    // `--continue` reopens that session: its history is shown and the next
    // request carries the earlier turns.
    let mut t = w.chat(&["--continue"]);
    t.expect(&format!("session {}", ids[0]));
    t.expect("› ");
    t.line("and once more");
    t.expect("third answer");
    t.expect("— completed");
    t.send("\x04");
    assert!(t.wait().success());
    drop(t);
    assert_eq!(w.sessions().len(), 1);
    let last = w.mock.requests().pop().unwrap_or_else(|| panic!("no request"));
    let sent = last.raw_body;
    assert!(sent.contains("hello") && sent.contains("second answer") && sent.contains("and once more"), "{sent}");
    w.mock.assert_no_violations();
}

#[tokio::test(flavor = "multi_thread")]
async fn resume_picker_offers_this_workspaces_sessions() -> anyhow::Result<()> {
    let w = world(vec![reply("one"), reply("two")]);
    let run = w.run("the first task").await.context("running the first task")?;
    assert_eq!(run.exit_code(), 0, "{:?}", run.summary);
    let first = w.sessions();
    let mut t = w.chat(&[]);
    t.expect("› ");
    t.line("/resume");
    t.expect("recent sessions in this workspace:");
    t.expect("the first task");
    t.expect("type a number");
    t.line("1");
    t.expect(&format!("session {}", first[0]));
    t.expect("› ");
    t.line("continue it");
    t.expect("two");
    t.expect("— completed");
    t.send("\x04");
    assert!(t.wait().success());
    drop(t);
    let last = w.mock.requests().pop().unwrap_or_else(|| panic!("no request"));
    assert!(last.raw_body.contains("the first task"), "{}", last.raw_body);
    w.mock.assert_no_violations();
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn at_path_attachment_in_run_is_a_valid_request_with_the_file() -> anyhow::Result<()> {
    let w = world(vec![reply("It says heliotrope.")]);
    let run = w.run("what does @README.md say?").await.context("running the task")?;
    assert_eq!(run.exit_code(), 0, "{:?}", run.summary);
    w.mock.assert_no_violations();
    let reqs = w.mock.requests();
    assert_eq!(reqs.len(), 1, "the attachment needs no model request of its own");
    assert!(reqs[0].raw_body.contains("heliotrope"), "{}", reqs[0].raw_body);
    let id = &w.sessions()[0];
    let events = w.events(id);
    let reads: Vec<&Value> =
        events.iter().filter(|e| e["type"] == "tool/call" && e["data"]["name"] == "read").collect();
    assert_eq!(reads.len(), 1, "{reads:?}");
    Ok(())
}
