//! Tests of the todo and skills components end to end.
//!
//! - `todo`: a headless turn (in-process, as `wharf run`) with the scripted
//!   model calling `todo_write`: one `todo/updated` event per valid list,
//!   none for an invalid one, and `wharf sessions show` still shows the
//!   session; `wharf plugin call` says nothing was recorded.
//! - `skills`: headless turns with `llm-openai` against the mock LLM (which
//!   records what it was sent): the catalog is in the first system prompt,
//!   `skill` returns the body and the other files, and skills added or
//!   edited mid-turn (through the `fs` tools) or between turns show up in
//!   the next request's system prompt. `wharf plugin call` loads a skill.
//!   A source whose catalog comes from its config (`skills-fixed`) reaches
//!   the model the same way.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;
use serde_json::{Value, json};
use wharf_core::events::{Event, EventKind};
use wharf_mock_llm::{MockLlm, Script};
use wharf_tests::host::TestHost;
use wharf_tests::{Plugin, plugins};

fn write(path: &Path, text: &str) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("creating parent");
    }
    std::fs::write(path, text).expect("writing the file");
}

/// A temp HOME and workspace.
struct Env {
    home: tempfile::TempDir,
    ws: tempfile::TempDir,
    sessions: PathBuf,
}

impl Env {
    fn new() -> Self {
        let home = tempfile::tempdir().expect("creating a temp dir");
        let ws = tempfile::tempdir().expect("creating a temp dir");
        let sessions = home.path().join("sessions");
        Self { home, ws, sessions }
    }

    fn wharf(&self) -> Command {
        let mut c = wharf_tests::wharf(self.home.path());
        c.current_dir(self.ws.path());
        c
    }

    fn profile(&self, text: &str) -> PathBuf {
        let path = self.home.path().join("profile.toml");
        std::fs::write(&path, text).expect("writing the file");
        path
    }

    /// One headless turn of `task` in a host of its own (in-process, as
    /// `wharf run TASK --output jsonl [--resume ID]` in the workspace):
    /// `wharf run`'s exit code, the events, the host's notices.
    async fn run(&self, profile: &Path, task: &str, resume: Option<&str>) -> anyhow::Result<(i32, Vec<Value>, String)> {
        let host = TestHost::builder()
            .profile(profile.display().to_string())
            .home(self.home.path())
            .workspace(self.ws.path())
            .sessions(&self.sessions)
            .start_in(self.home.path())
            .await?;
        let run = host.run_with(resume, task, None).await;
        let notices = host.notices().join("\n");
        host.close().await;
        let run = run?;
        Ok((run.exit_code(), run.json(), format!("{:?}\n{notices}", run.summary)))
    }

    fn log(&self, id: &str) -> Vec<Event> {
        wharf_core::SessionStore::new(&self.sessions).load(id).expect("loading the session").events
    }
}

fn of_type<'a>(events: &'a [Value], ty: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == ty).collect()
}

fn session_id(events: &[Value]) -> String {
    of_type(events, "session/start").first().and_then(|e| e["data"]["id"].as_str()).unwrap_or("").to_string()
}

/// `wharf plugin call FILE TOOL ARGS EXTRA…` as JSON.
fn plugin_call(env: &Env, plugin: Plugin, tool: &str, args: &Value, extra: &[&str]) -> anyhow::Result<Value> {
    let out = env
        .wharf()
        .args(["plugin", "call"])
        .arg(wharf_tests::plugin(plugin))
        .args([tool, &args.to_string()])
        .args(extra)
        .output()
        .context("running wharf plugin call")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(&stdout)
        .with_context(|| format!("the output is not JSON: {stdout}\nstderr: {}", String::from_utf8_lossy(&out.stderr)))
}

// ---------------------------------------------------------------- todo

const TODO_PROFILE: &str = r#"
[agent]
adapter = "scripted"
max_steps = 10

[[plugin]]
id = "todo"
path = "${plugin_dir}/todo.wasm"

[[plugin]]
id = "scripted"
path = "${plugin_dir}/llm-scripted.wasm"
[plugin.config]
model = "scripted-test"

[[plugin.config.turns]]
text = "Planning."
tool_calls = [{ name = "todo_write", arguments = { todos = [
    { content = "Read the spec", status = "in_progress", active_form = "Reading the spec" },
    { content = "Write the code", status = "pending" },
] } }]

[[plugin.config.turns]]
tool_calls = [{ name = "todo_write", arguments = { todos = [
    { content = "Read the spec", status = "completed", id = "1" },
    { content = "Write the code", status = "in_progress" },
] } }]

[[plugin.config.turns]]
tool_calls = [{ name = "todo_write", arguments = { todos = [{ content = "Ship", status = "done" }] } }]

[[plugin.config.turns]]
text = "All done."
"#;

#[tokio::test(flavor = "multi_thread")]
async fn todo_write_records_each_list_and_refuses_invalid_ones() -> anyhow::Result<()> {
    let _ = wharf_tests::plugin(plugins::TODO);
    let env = Env::new();
    let profile = env.profile(TODO_PROFILE);
    let (code, events, err) = env.run(&profile, "Plan the work.", None).await?;
    assert_eq!(code, 0, "{err}");

    let first = json!([
        {"content": "Read the spec", "status": "in_progress", "active_form": "Reading the spec"},
        {"content": "Write the code", "status": "pending"},
    ]);
    let second = json!([
        {"content": "Read the spec", "status": "completed", "id": "1"},
        {"content": "Write the code", "status": "in_progress"},
    ]);
    let todos: Vec<&Value> = of_type(&events, "todo/updated").into_iter().map(|e| &e["data"]["items"]).collect();
    assert_eq!(todos, vec![&first, &second], "{events:#?}");

    let results = of_type(&events, "tool/result");
    assert_eq!(results.len(), 3);
    assert_eq!(results[0]["data"]["is_error"], false);
    assert_eq!(
        results[0]["data"]["content"],
        "Todo list (2 items: 0 completed, 1 in progress, 1 pending):\n[>] Read the spec\n[ ] Write the code"
    );
    assert_eq!(results[2]["data"]["is_error"], true, "{:#}", results[2]);
    assert!(results[2]["data"]["content"].as_str().unwrap_or("").contains("done"), "{:#}", results[2]);

    // The log holds the same two events, typed; the session still shows.
    let id = session_id(&events);
    let logged: Vec<Value> = env
        .log(&id)
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::TodoUpdated(t) => Some(t.items),
            _ => None,
        })
        .collect();
    assert_eq!(logged, vec![first, second]);
    let show = env
        .wharf()
        .args(["sessions", "show", &id, "--session-dir"])
        .arg(&env.sessions)
        .output()
        .context("running wharf sessions show")?;
    let text = String::from_utf8_lossy(&show.stdout);
    assert_eq!(show.status.code(), Some(0), "{}", String::from_utf8_lossy(&show.stderr));
    assert!(text.contains("Plan the work.") && text.contains("All done."), "{text}");
    Ok(())
}

#[test]
fn todo_without_a_session_says_nothing_was_recorded() -> anyhow::Result<()> {
    let env = Env::new();
    let v = plugin_call(
        &env,
        plugins::TODO,
        "todo_write",
        &json!({"todos": [{"content": "a", "status": "pending"}]}),
        &[],
    )?;
    assert_eq!(v["is_error"], false, "{v}");
    let content = v["content"].as_str().unwrap_or("");
    assert!(content.starts_with("Todo list (1 item: 0 completed, 0 in progress, 1 pending):\n[ ] a"), "{content}");
    assert!(content.contains("Not recorded: no session is attached"), "{content}");
    let bad =
        plugin_call(&env, plugins::TODO, "todo_write", &json!({"todos": [{"content": "", "status": "pending"}]}), &[])?;
    assert_eq!(bad["is_error"], true, "{bad}");
    assert_eq!(bad["error_code"], "INVALID_ARGUMENT", "{bad}");
    assert!(bad["content"].as_str().unwrap_or("").contains("todos[0].content: empty"), "{bad}");
    Ok(())
}

// ---------------------------------------------------------------- skills

const PDF_V1: &str = "---\nname: pdf\ndescription: >\n  Fill PDF forms\n  and extract their text.\nlicense: MIT\n---\n\
                      # PDF\n\nRun scripts/fill.py with the form fields.\n";
const PDF_V2: &str = "---\nname: pdf\ndescription: \"Fill PDF forms (v2).\"\n---\n# PDF v2\n";
const XLSX: &str = "---\nname: xlsx\ndescription: Edit spreadsheets.\n---\nUse openpyxl.\n";

fn stream(v: Value) -> Value {
    let mut v = v;
    v["kind"] = json!("stream");
    v
}

fn call(id: &str, name: &str, args: Value) -> Value {
    json!({"id": id, "name": name, "arguments": args.to_string()})
}

/// The system prompt a recorded request carried.
fn system(req: &wharf_mock_llm::RecordedRequest) -> String {
    let body = req.body.clone().unwrap_or(Value::Null);
    let msgs = body["messages"].as_array().cloned().unwrap_or_default();
    msgs.iter().filter(|m| m["role"] == "system").filter_map(|m| m["content"].as_str()).collect::<Vec<_>>().join("\n")
}

/// The content of the last tool message of a recorded request.
fn last_tool_result(req: &wharf_mock_llm::RecordedRequest) -> String {
    let body = req.body.clone().unwrap_or(Value::Null);
    let msgs = body["messages"].as_array().cloned().unwrap_or_default();
    msgs.iter().rev().find(|m| m["role"] == "tool").and_then(|m| m["content"].as_str()).unwrap_or("").to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn skills_catalog_reaches_the_model_and_follows_the_files() -> anyhow::Result<()> {
    let _ = (
        wharf_tests::plugin(plugins::SKILLS),
        wharf_tests::plugin(plugins::FS),
        wharf_tests::plugin(plugins::LLM_OPENAI),
    );
    let env = Env::new();
    let ws_skills = env.ws.path().join(".wharf/skills");
    let home_skills = env.home.path().join(".wharf/skills");
    write(&ws_skills.join("pdf/SKILL.md"), PDF_V1);
    write(&ws_skills.join("pdf/scripts/fill.py"), "print('fill')\n");
    write(&ws_skills.join("broken/SKILL.md"), "no front matter\n");
    write(&home_skills.join("pdf/SKILL.md"), "---\nname: pdf\ndescription: Shadowed by the workspace.\n---\n");
    write(&home_skills.join("release/SKILL.md"), "---\nname: release\ndescription: 'Cut a release.'\n---\nBump.\n");

    let script: Script = serde_json::from_value(json!({
        "replies": [
            stream(json!({"tool_calls": [call("c1", "skill", json!({"name": "pdf"}))]})),
            stream(json!({"tool_calls": [
                call("c2", "read", json!({"path": ".wharf/skills/pdf/SKILL.md"})),
                call("c3", "write", json!({"path": ".wharf/skills/xlsx/SKILL.md", "content": XLSX})),
            ]})),
            stream(json!({"tool_calls": [call("c4", "write", json!({"path": ".wharf/skills/pdf/SKILL.md", "content": PDF_V2}))]})),
            stream(json!({"text": "Done."})),
            stream(json!({"text": "Second turn."})),
        ],
        "checks": {"reasoning": "ignore"},
    })).context("parsing JSON")?;
    let mock = MockLlm::start_background(script).context("starting the mock LLM")?;
    let profile = env.profile(&format!(
        r#"
[agent]
adapter = "model"
max_steps = 8

[[plugin]]
id = "fs"
path = "${{plugin_dir}}/fs.wasm"
[plugin.grant]
dirs = ["${{workspace}}:rw"]

[[plugin]]
id = "skills"
path = "${{plugin_dir}}/skills.wasm"
[plugin.config]
dirs = ["${{workspace}}/.wharf/skills", "${{home}}/.wharf/skills", "${{home}}/missing"]
[plugin.grant]
dirs = ["${{workspace}}/.wharf/skills:ro", "${{home}}/.wharf/skills:ro"]

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
        port = mock.addr().port(),
    ));

    let (code, events, err) = env.run(&profile, "Fill the form.", None).await?;
    assert_eq!(code, 0, "{err}");
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 4, "{err}");

    // The first request: the catalog, workspace skills shadowing home ones,
    // invalid skills left out.
    let s0 = system(&reqs[0]);
    assert!(s0.contains("load one with the `skill` tool"), "{s0}");
    assert!(s0.contains("- pdf — Fill PDF forms and extract their text.\n- release — Cut a release."), "{s0}");
    assert!(!s0.contains("Shadowed") && !s0.contains("broken") && !s0.contains("xlsx"), "{s0}");

    // `skill` returned the body without front matter, and the other files.
    let loaded = last_tool_result(&reqs[1]);
    assert!(loaded.starts_with("# Skill: pdf\n\n# PDF\n\nRun scripts/fill.py"), "{loaded}");
    assert!(!loaded.contains("license: MIT"), "{loaded}");
    let fill =
        std::fs::canonicalize(ws_skills.join("pdf/scripts/fill.py")).context("canonicalizing pdf/scripts/fill.py")?;
    assert!(loaded.contains(&format!("- {}", fill.display())), "{loaded}");

    // A skill added mid-turn is in the next step's catalog, an edited one too.
    let s2 = system(&reqs[2]);
    assert!(s2.contains("- xlsx — Edit spreadsheets."), "{s2}");
    assert!(s2.contains("- pdf — Fill PDF forms and extract their text."), "{s2}");
    let s3 = system(&reqs[3]);
    assert!(s3.contains("- pdf — Fill PDF forms (v2).") && s3.contains("- xlsx —"), "{s3}");
    assert_eq!(of_type(&events, "tool/result").iter().filter(|r| r["data"]["is_error"] == true).count(), 0);

    // Between turns: a skill removed is gone from the next turn's catalog.
    std::fs::remove_dir_all(ws_skills.join("xlsx")).context("removing xlsx")?;
    let id = session_id(&events);
    let (code, _, err) = env.run(&profile, "Again.", Some(&id)).await?;
    assert_eq!(code, 0, "{err}");
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 5);
    let s4 = system(&reqs[4]);
    assert!(s4.contains("- pdf — Fill PDF forms (v2).\n- release — Cut a release.") && !s4.contains("xlsx"), "{s4}");
    Ok(())
}

#[test]
fn skill_tool_through_plugin_call() -> anyhow::Result<()> {
    let env = Env::new();
    let dir = env.ws.path().join("skills");
    write(&dir.join("pdf/SKILL.md"), PDF_V1);
    write(&dir.join("xlsx/SKILL.md"), XLSX);
    let dir = std::fs::canonicalize(&dir).context("canonicalizing dir")?.display().to_string();
    let config = json!({"dirs": [dir]}).to_string();
    let extra = ["--allow-dir", dir.as_str(), "--config", config.as_str()];
    let v = plugin_call(&env, plugins::SKILLS, "skill", &json!({"name": "xlsx"}), &extra)?;
    assert_eq!(v["is_error"], false, "{v}");
    assert_eq!(
        v["content"],
        format!("# Skill: xlsx\n\nUse openpyxl.\n\n---\nSkill directory: {dir}/xlsx\nThis skill has no other files.\n")
    );
    let missing = plugin_call(&env, plugins::SKILLS, "skill", &json!({"name": "docx"}), &extra)?;
    assert_eq!(missing["is_error"], true, "{missing}");
    assert_eq!(missing["content"], "no skill named `docx` (available: pdf, xlsx)");
    // Without the grant the directory is invisible: no skills at all.
    let ungranted =
        plugin_call(&env, plugins::SKILLS, "skill", &json!({"name": "pdf"}), &["--config", config.as_str()])?;
    assert_eq!(ungranted["content"], "no skill named `pdf` (available: none)");
    Ok(())
}

/// A skills source that is not a directory: `skills-fixed` takes its
/// catalog from its config. The catalog reaches the model's system prompt,
/// its `skill` tool loads a skill, and an unknown name lists the others.
#[tokio::test(flavor = "multi_thread")]
async fn a_skills_source_from_config_reaches_the_model() -> anyhow::Result<()> {
    let _ = (wharf_tests::plugin(plugins::SKILLS_FIXED), wharf_tests::plugin(plugins::LLM_OPENAI));
    let env = Env::new();
    let script: Script = serde_json::from_value(json!({
        "replies": [
            stream(json!({"tool_calls": [call("c1", "skill", json!({"name": "release"}))]})),
            stream(json!({"tool_calls": [call("c2", "skill", json!({"name": "docx"}))]})),
            stream(json!({"text": "Done."})),
        ],
        "checks": {"reasoning": "ignore"},
    }))
    .context("building the mock's script")?;
    let mock = MockLlm::start_background(script).context("starting the mock LLM")?;
    let profile = env.profile(&format!(
        r#"
[agent]
adapter = "model"
max_steps = 5

[[plugin]]
id = "skills"
path = "${{plugin_dir}}/skills-fixed.wasm"
[[plugin.config.skills]]
name = "release"
description = "How to cut a release."
text = "1. Bump the version.\n2. Tag it."
[[plugin.config.skills]]
name = "deploy"
description = "Ship it."
text = "Run the pipeline."

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
        port = mock.addr().port(),
    ));

    let (code, events, err) = env.run(&profile, "Cut the release.", None).await?;
    assert_eq!(code, 0, "{err}");
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 3, "{err}");
    let s0 = system(&reqs[0]);
    assert!(s0.contains("load one with the `skill` tool"), "{s0}");
    assert!(s0.contains("- release — How to cut a release.\n- deploy — Ship it."), "{s0}");
    assert_eq!(last_tool_result(&reqs[1]), "1. Bump the version.\n2. Tag it.");
    assert_eq!(last_tool_result(&reqs[2]), "no skill named `docx` (available: release, deploy)");
    let errors: Vec<bool> = of_type(&events, "tool/result").iter().map(|r| r["data"]["is_error"] == true).collect();
    assert_eq!(errors, [false, true], "{events:?}");
    Ok(())
}
