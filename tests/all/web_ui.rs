//! `wharf web` as a reader sees it: the per-workspace session list and the
//! usage (tokens, cost, context) in the API, and in headless Chromium
//! (tests/browser/ui.test.mjs): markdown rendered and sanitised, a diff on
//! an edit card, the 420 px layout, scroll to the last message, the
//! workspace filter.

use std::process::Command;

use anyhow::Context;
use serde_json::{Value, json};
use wharf_core::EventKind as K;
use wharf_core::events::{
    AssistantMessage, StepEnd, StepStart, ToolCallEvent, ToolResultEvent, TurnEnd, TurnStart, UserMessage,
};
use wharf_core::plugin::{ToolCall, Usage};

use super::web::{browser_tools, start};

/// A scripted adapter that serves the live turns, and an (unused) priced
/// OpenAI-compatible row the stored sessions name in their `session/model`.
const PROFILE: &str = r#"
[agent]
adapter = "scripted"
max_steps = 4

[[plugin]]
id = "fs"
path = "${plugin_dir}/fs.wasm"
[plugin.grant]
dirs = ["${workspace}:rw"]

[[plugin]]
id = "scripted"
path = "${plugin_dir}/llm-scripted.wasm"
[plugin.config]
model = "scripted-ui"
[[plugin.config.turns]]
text = "Hello."

[[plugin]]
id = "priced"
path = "${plugin_dir}/llm-openai.wasm"
[plugin.config]
base_url = "http://127.0.0.1:9/v1"
model = "m-priced"
[plugin.config.prices.m-priced]
input_cache_hit = 1.0
input_cache_miss = 4.0
output = 10.0
currency = "USD"
context_window = 2000
"#;

/// The model text of the markdown session: a heading, a code block and
/// HTML/links that must not run.
const MARKDOWN: &str = "# Release notes\n\nBuilt with:\n\n```rust\nfn main() { println!(\"hi\"); }\n```\n\n\
    <img src=x onerror=alert(1)> <script>alert(2)</script>\n\n[click me](javascript:alert(1)) and [docs](https://example.com/docs)\n";

fn usage(prompt: u64, completion: u64, hit: u64) -> Usage {
    Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        cache_hit_tokens: hit,
        cache_miss_tokens: prompt - hit,
        reasoning_tokens: 0,
    }
}

fn say(turn: u64, step: u32, text: &str, tool_calls: Vec<ToolCall>) -> K {
    K::AssistantMessage(AssistantMessage {
        turn,
        step,
        content: text.into(),
        reasoning: None,
        tool_calls,
        usage: None,
        finish: None,
        interrupted: false,
    })
}

fn result(turn: u64, call: &str, name: &str, content: &str, details: Value) -> K {
    // From JSON: the optional fields keep their defaults as the type grows.
    let r: ToolResultEvent = serde_json::from_value(json!({
        "turn": turn, "step": 1, "call_id": call, "name": name, "content": content, "plugin": "fs", "duration_ms": 1,
        "details": details,
    }))
    .expect("parsing JSON");
    K::ToolResult(r)
}

/// Writes a session with these events (after its header) to the store.
fn stored(dir: &std::path::Path, workspace: &str, kinds: Vec<K>) -> String {
    let store = wharf_core::SessionStore::new(dir);
    let log = store
        .create(wharf_core::store::NewSession {
            id: None,
            workspace: Some(workspace.into()),
            profile: Some("ui".into()),
        })
        .expect("creating a session");
    for k in kinds {
        log.append(k).expect("appending an event");
    }
    log.flush_blocking().expect("flushing the session log");
    log.id().to_string()
}

/// One turn: a prompt, a step that edits and writes, then the answer `text`,
/// priced on `priced`/`m-priced`.
fn markdown_session(dir: &std::path::Path, workspace: &str) -> String {
    let edit = ToolCall {
        id: "call-edit".into(),
        name: "edit".into(),
        arguments: json!({"path": "src/lib.rs", "old_string": "fn old() {}\nfn keep() {}", "new_string": "fn new() {}\nfn keep() {}"})
            .to_string(),
    };
    let write = ToolCall {
        id: "call-write".into(),
        name: "write".into(),
        arguments: json!({"path": "NOTES.md", "content": "line one\nline two\n"}).to_string(),
    };
    let bash = ToolCall {
        id: "call-bash".into(),
        name: "bash".into(),
        arguments: json!({"command": "cargo test\necho second line"}).to_string(),
    };
    let mut kinds = vec![
        K::Unknown {
            type_name: "session/model".into(),
            data: json!({"adapter": "priced", "model": "m-priced", "reason": "initial"}),
        },
        K::TurnStart(TurnStart { turn: 1 }),
        K::UserMessage(UserMessage { content: "Write the release notes.".into(), inbox_id: None, images: vec![] }),
        K::StepStart(StepStart { turn: 1, step: 1 }),
        say(1, 1, "", vec![edit.clone(), write.clone(), bash.clone()]),
    ];
    for c in [&edit, &write, &bash] {
        let call: ToolCallEvent =
            serde_json::from_value(json!({"turn": 1, "step": 1, "id": c.id, "name": c.name, "arguments": c.arguments}))
                .expect("parsing JSON");
        kinds.push(K::ToolCall(call));
    }
    // The fs component's details: the whole file's hunks (real line numbers).
    let hunks = "@@ -3,3 +3,3 @@\n use x;\n-fn old() {}\n+fn new() {}\n fn keep() {}\n";
    kinds.push(result(1, "call-edit", "edit", "Edited src/lib.rs", json!({"path": "src/lib.rs", "diff": hunks})));
    kinds.push(result(1, "call-write", "write", "Wrote NOTES.md", json!({"path": "NOTES.md", "created": true})));
    kinds.push(result(1, "call-bash", "bash", "running 3 tests\ntest a ... ok\ntest b ... ok", Value::Null));
    kinds.push(K::StepEnd(StepEnd { turn: 1, step: 1, usage: Some(usage(1000, 100, 600)) }));
    kinds.push(K::StepStart(StepStart { turn: 1, step: 2 }));
    kinds.push(say(1, 2, MARKDOWN, vec![]));
    kinds.push(K::StepEnd(StepEnd { turn: 1, step: 2, usage: Some(usage(1500, 50, 1000)) }));
    kinds.push(K::TurnEnd(TurnEnd { turn: 1, reason: wharf_core::StopReason::Completed }));
    stored(dir, workspace, kinds)
}

/// Many turns, the last answer naming `last`.
fn long_session(dir: &std::path::Path, workspace: &str, last: &str) -> String {
    let mut kinds = Vec::new();
    for t in 1..=40u64 {
        kinds.push(K::TurnStart(TurnStart { turn: t }));
        kinds.push(K::UserMessage(UserMessage {
            content: format!("Question {t}: tell me more."),
            inbox_id: None,
            images: vec![],
        }));
        kinds.push(K::StepStart(StepStart { turn: t, step: 1 }));
        let text =
            if t == 40 { last.to_string() } else { format!("Answer {t}.\n\nA paragraph of text.\n\n- one\n- two") };
        kinds.push(say(t, 1, &text, vec![]));
        kinds.push(K::StepEnd(StepEnd { turn: t, step: 1, usage: None }));
        kinds.push(K::TurnEnd(TurnEnd { turn: t, reason: wharf_core::StopReason::Completed }));
    }
    stored(dir, workspace, kinds)
}

fn home_workspace(w: &super::web::Web) -> String {
    let (status, info) = w.call("GET", "/api/info", None);
    assert_eq!(status, 200, "{info}");
    info["workspace"].as_str().unwrap_or_else(|| panic!("no workspace: {info}")).to_string()
}

fn ids(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .filter_map(|s| s["id"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn sessions_are_listed_per_workspace_with_tokens_cost_and_context() {
    let w = start(PROFILE, &[], &[]);
    let here = home_workspace(&w);
    let mine = markdown_session(&w.sessions, &here);
    let other = long_session(&w.sessions, "/elsewhere/project", "The end.");

    let (status, all) = w.call("GET", "/api/sessions", None);
    assert_eq!(status, 200, "{all}");
    let all_ids = ids(&all);
    assert!(all_ids.contains(&mine) && all_ids.contains(&other), "{all}");
    let q = format!("/api/sessions?workspace={}", urlencode(&here));
    let (_, only) = w.call("GET", &q, None);
    assert_eq!(ids(&only), vec![mine.clone()], "{only}");
    assert_eq!(only[0]["workspace"], here.as_str());
    let (_, elsewhere) = w.call("GET", "/api/sessions?workspace=%2Felsewhere%2Fproject", None);
    assert_eq!(ids(&elsewhere), vec![other.clone()], "{elsewhere}");
    let (_, none) = w.call("GET", "/api/sessions?workspace=%2Fnowhere", None);
    assert_eq!(ids(&none), Vec::<String>::new());

    // Cost from the priced row's table: hit × 1 + miss × 4 + out × 10 per 1M.
    let u = &only[0]["usage"];
    assert_eq!(u["prompt_tokens"], 2500, "{u}");
    assert_eq!(u["completion_tokens"], 150, "{u}");
    assert_eq!(u["cache_hit_tokens"], 1600, "{u}");
    assert_eq!(u["total_tokens"], 2650, "{u}");
    let want = (600.0 + 400.0 * 4.0 + 100.0 * 10.0 + 1000.0 + 500.0 * 4.0 + 50.0 * 10.0) / 1e6;
    let cost = u["cost"].as_f64().unwrap_or_else(|| panic!("no cost: {u}"));
    assert!((cost - want).abs() < 1e-12, "{cost} != {want}");
    assert_eq!(u["currency"], "USD");
    // The last request's prompt against the model's window.
    assert_eq!(u["context_window"], 2000, "{u}");
    assert!((u["context_percent"].as_f64().unwrap_or(-1.0) - 75.0).abs() < 1e-9, "{u}");
    assert!(u.get("turns").is_none(), "the list carries no per-turn rows: {u}");

    // The detail adds per-turn rows; a session without usage has no cost.
    let (status, one) = w.call("GET", &format!("/api/sessions/{mine}"), None);
    assert_eq!(status, 200, "{one}");
    assert_eq!(one["usage"]["turns"].as_array().map(Vec::len), Some(1), "{one}");
    assert_eq!(one["usage"]["cost"], u["cost"]);
    let (_, long) = w.call("GET", &format!("/api/sessions/{other}"), None);
    assert_eq!(long["usage"]["total_tokens"], 0, "{long}");
    assert!(long["usage"]["cost"].is_null(), "{long}");
}

#[test]
fn the_event_stream_carries_sanitised_html_and_diffs() {
    let w = start(PROFILE, &[], &[]);
    let here = home_workspace(&w);
    let id = markdown_session(&w.sessions, &here);
    let mut sse = w.events(&format!("/api/sessions/{id}/events?from=1"), &[]);
    let mut events = Vec::new();
    while let Some(e) = sse.next() {
        let v = e.json();
        let end = v["type"] == "turn/end";
        events.push(v);
        if end {
            break;
        }
    }
    let edit = events.iter().find(|e| e["type"] == "tool/call" && e["data"]["name"] == "edit").cloned();
    let diff = edit.as_ref().and_then(|e| e["diff"].as_str()).unwrap_or_else(|| panic!("no edit diff: {events:?}"));
    assert!(diff.contains("--- a/src/lib.rs\n+++ b/src/lib.rs\n"), "{diff}");
    assert!(diff.contains("\n-fn old() {}\n+fn new() {}\n fn keep() {}"), "{diff}");
    let edited = events.iter().find(|e| e["type"] == "tool/result" && e["data"]["name"] == "edit").cloned();
    let diff = edited.as_ref().and_then(|e| e["diff"].as_str()).unwrap_or_default();
    assert!(diff.starts_with("--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -3,3 +3,3 @@\n use x;\n-fn old"), "{diff}");
    let written = events.iter().find(|e| e["type"] == "tool/result" && e["data"]["name"] == "write").cloned();
    assert!(written.is_some_and(|e| e.get("diff").is_none()), "no details diff: the call's stays");
    let write = events.iter().find(|e| e["type"] == "tool/call" && e["data"]["name"] == "write").cloned();
    let diff = write.as_ref().and_then(|e| e["diff"].as_str()).unwrap_or_default();
    assert!(diff.contains("\n+line one\n+line two\n"), "a new file is all added: {diff}");
    let bash = events.iter().find(|e| e["type"] == "tool/call" && e["data"]["name"] == "bash").cloned();
    assert!(bash.is_some_and(|b| b.get("diff").is_none()), "only edit/write calls get a diff");

    let answer = events
        .iter()
        .find(|e| e["type"] == "assistant/message" && e["data"]["step"] == 2)
        .cloned()
        .unwrap_or_else(|| panic!("no answer: {events:?}"));
    assert_eq!(answer["data"]["content"], MARKDOWN, "the event itself is unchanged");
    let html = answer["html"].as_str().unwrap_or_else(|| panic!("no html: {answer}"));
    assert!(html.contains("<h1>Release notes</h1>"), "{html}");
    assert!(html.contains("<code class=\"language-rust\">"), "{html}");
    assert!(!html.contains("<img") && !html.contains("<script") && !html.contains("javascript:"), "{html}");
    assert!(html.contains("href=\"https://example.com/docs\""), "{html}");
    // The stored log is what it was: nothing rendered was written back.
    let logged = w.log(&id);
    assert!(logged.iter().all(|e| e.to_json_line().is_ok_and(|l| !l.contains("\"html\""))));
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
fn browser_markdown_diff_narrow_layout_scroll_and_workspace_filter() -> anyhow::Result<()> {
    let Some((chromium, node, dir)) =
        browser_tools("web_ui::browser_markdown_diff_narrow_layout_scroll_and_workspace_filter")
    else {
        return Ok(());
    };
    let w = start(PROFILE, &[], &[]);
    let here = home_workspace(&w);
    let md = markdown_session(&w.sessions, &here);
    let last = "The very last answer.";
    let long = long_session(&w.sessions, &here, last);
    let other = long_session(&w.sessions, "/elsewhere/project", "Elsewhere.");
    let shots = wharf_tests::target_dir().join("browser-shots/ui");
    let _ = std::fs::create_dir_all(&shots);
    let out = Command::new(node)
        .current_dir(&dir)
        .arg("ui.test.mjs")
        .env("WHARF_URL", &w.url)
        .env("CHROMIUM", &chromium)
        .env("SCREENSHOT_DIR", &shots)
        .env("MD_SESSION", &md)
        .env("LONG_SESSION", &long)
        .env("LAST_TEXT", last)
        .env("OTHER_SESSION", &other)
        .output()
        .context("running node")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("ui test passed"),
        "browser test failed (screenshots in {}):\n{stdout}\n{stderr}\nserver: {}",
        shots.display(),
        w.stderr()
    );
    Ok(())
}
