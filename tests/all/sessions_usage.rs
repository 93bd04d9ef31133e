//! Model switching, cost and `--continue` on the wire: `wharf run` through
//! the real `llm-deepseek` component against the mock LLM. `--model` reaches
//! the request body and the log (`session/model`); the cost of a run is the
//! arithmetic of the mock's usage (cache hit/miss) and the profile's prices;
//! `--continue` resumes this workspace's latest session, never another
//! workspace's; `sessions list` shows this workspace's sessions unless `--all`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Value, json};
use wharf_mock_llm::{MockLlm, Script};
use wharf_tests::plugins;

// Prices of the model the test switches to, per 1M tokens.
const HIT: f64 = 0.5;
const MISS: f64 = 2.0;
const OUT: f64 = 8.0;
// The usage the mock reports per request.
const PROMPT: u64 = 300_000;
const CACHED: u64 = 200_000;
const COMPLETION: u64 = 50_000;
const WINDOW: u64 = 1_000_000;

struct World {
    home: tempfile::TempDir,
    sessions: PathBuf,
    profile: PathBuf,
    mock: MockLlm,
}

fn reply(text: &str) -> Value {
    json!({"kind": "stream", "text": text, "usage": {
        "prompt_tokens": PROMPT, "completion_tokens": COMPLETION, "cache_hit_tokens": CACHED
    }})
}

fn world(replies: usize) -> World {
    let replies: Vec<Value> = (0..replies).map(|i| reply(&format!("answer {i}"))).collect();
    let script: Script = serde_json::from_value(json!({ "replies": replies })).unwrap();
    let mock = MockLlm::start_background(script).unwrap();
    let home = tempfile::tempdir().unwrap();
    let _ = wharf_tests::plugin(plugins::LLM_DEEPSEEK);
    let port = mock.addr().port();
    let text = format!(
        r#"
[agent]
adapter = "model"
max_steps = 3

[[plugin]]
id = "model"
path = "${{plugin_dir}}/llm-deepseek.wasm"
[plugin.config]
base_url = "{url}/v1"
model = "base-model"
api_key_env = "WHARF_TEST_LLM_KEY"
idle_timeout_ms = 5000
[plugin.config.prices."switched-model"]
input_cache_hit = {HIT}
input_cache_miss = {MISS}
output = {OUT}
currency = "USD"
context_window = {WINDOW}
[plugin.grant]
hosts = ["127.0.0.1:{port}"]
env = ["WHARF_TEST_LLM_KEY"]
timeout_ms = 20000
"#,
        url = mock.url()
    );
    let profile = home.path().join("profile.toml");
    std::fs::write(&profile, text).unwrap();
    let sessions = home.path().join("sessions");
    World { home, sessions, profile, mock }
}

impl World {
    fn wharf(&self, ws: &Path, args: &[&str]) -> Output {
        let mut c = wharf_tests::wharf(self.home.path());
        c.current_dir(ws)
            .env("WHARF_TEST_LLM_KEY", "sk-test")
            .args(args)
            .args(["--session-dir", &self.sessions.display().to_string()]);
        c.output().unwrap()
    }

    fn run(&self, ws: &Path, task: &str, extra: &[&str]) -> Output {
        let profile = self.profile.display().to_string();
        let mut args = vec!["run", task, "--profile", &profile, "--no-watch"];
        args.extend_from_slice(extra);
        let out = self.wharf(ws, &args);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        out
    }

    fn list(&self, ws: &Path, all: bool) -> Vec<Value> {
        let profile = self.profile.display().to_string();
        let mut args = vec!["sessions", "list", "--json", "--profile", &profile];
        if all {
            args.push("--all");
        }
        let out = self.wharf(ws, &args);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap()
    }

    fn store(&self) -> wharf_core::SessionStore {
        wharf_core::SessionStore::new(&self.sessions)
    }
}

fn session_of(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err.lines().find(|l| l.starts_with("session ")).unwrap_or_else(|| panic!("no summary: {err}"));
    line.split_whitespace().nth(1).unwrap().to_string()
}

#[test]
fn model_flag_reaches_the_wire_and_the_log_and_costs_follow_the_prices() {
    let w = world(1);
    let ws = tempfile::tempdir().unwrap();
    let out = w.run(ws.path(), "Say hi.", &["--model", "switched-model"]);
    w.mock.assert_no_violations();
    let reqs = w.mock.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].body.as_ref().unwrap()["model"], "switched-model", "the request carries --model");

    let id = session_of(&out);
    let events = w.store().load(&id).unwrap().events;
    wharf_core::invariants::check(&events).unwrap();
    let logged: Vec<Value> =
        events.iter().filter(|e| e.type_name() == "session/model").map(|e| serde_json::to_value(e).unwrap()).collect();
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert_eq!(logged[0]["data"]["model"], "switched-model");
    assert_eq!(logged[0]["data"]["adapter"], "model");
    assert_eq!(logged[0]["ignorable"], true, "older readers skip it");

    let expected = (CACHED as f64 * HIT + (PROMPT - CACHED) as f64 * MISS + COMPLETION as f64 * OUT) / 1e6;
    let list = w.list(ws.path(), false);
    assert_eq!(list.len(), 1);
    let cost = list[0]["cost"].as_f64().unwrap();
    assert!((cost - expected).abs() < 1e-9, "cost {cost}, expected {expected}");
    assert_eq!(list[0]["tokens"], PROMPT + COMPLETION);
    assert_eq!(list[0]["steps"], 1);
    assert_eq!(list[0]["status"], "completed");
    assert_eq!(list[0]["model"], "switched-model");

    // The run's own summary and `sessions show` print the same figures.
    let shown = format!("${expected:.4}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!("cost {shown}")),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let profile = w.profile.display().to_string();
    let show = w.wharf(ws.path(), &["sessions", "show", &id, "--profile", &profile]);
    let text = String::from_utf8_lossy(&show.stdout);
    let percent = PROMPT as f64 * 100.0 / WINDOW as f64;
    assert!(text.contains(&format!("cost {shown}")), "{text}");
    assert!(text.contains(&format!("({percent:.1} %)")), "{text}");
    assert!(text.contains(&format!("cache hit {CACHED} / miss {}", PROMPT - CACHED)), "{text}");
}

#[test]
fn continue_takes_this_workspaces_latest_session_and_list_filters_by_workspace() {
    let w = world(4);
    let ws = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let first = session_of(&w.run(ws.path(), "One.", &[]));
    let second = session_of(&w.run(ws.path(), "Two.", &[]));
    // Created last, but in another workspace.
    let elsewhere = session_of(&w.run(other.path(), "Elsewhere.", &[]));
    assert!(first != second && second != elsewhere);

    let resumed = session_of(&w.run(ws.path(), "Three.", &["--continue"]));
    assert_eq!(resumed, second, "--continue picks this workspace's latest session");
    let turns = |id: &str| w.store().load(id).unwrap().events.iter().filter(|e| e.type_name() == "turn/start").count();
    assert_eq!((turns(&first), turns(&second), turns(&elsewhere)), (1, 2, 1));
    // Without a model change on resume, no second model event.
    let models = w.store().load(&second).unwrap().events.iter().filter(|e| e.type_name() == "session/model").count();
    assert_eq!(models, 1);

    let ids = |v: Vec<Value>| v.iter().map(|s| s["id"].as_str().unwrap().to_string()).collect::<Vec<_>>();
    assert_eq!(ids(w.list(ws.path(), false)), [second.clone(), first.clone()], "this workspace's, newest first");
    let all = ids(w.list(ws.path(), true));
    assert_eq!(all.len(), 3);
    assert!(all.contains(&elsewhere));
    assert_eq!(w.list(ws.path(), false)[0]["steps"], 2);

    // A workspace without sessions: a clear error, nothing run.
    let empty = tempfile::tempdir().unwrap();
    let profile = w.profile.display().to_string();
    let out = w.wharf(empty.path(), &["run", "Four.", "--profile", &profile, "--continue"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no session to continue"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(w.mock.requests().len(), 4);
}
