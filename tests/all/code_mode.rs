//! Code Mode end to end: a headless turn (in-process, as `wharf run`) with
//! the scripted model or the DeepSeek adapter against `wharf-mock-llm`
//! calling `run_code` (the real `code` component), whose program calls the
//! `fs` and MCP tools through the host's pipeline. Profile and run helpers
//! from policy.rs (every session log is checked with
//! `wharf_core::invariants::check`). What needs the binary — SIGINT, kill
//! -9, `wharf chat` on a terminal, `wharf acp` on stdio — spawns it.

use anyhow::Context;
use serde_json::{Value, json};

use crate::policy::{Env, env, policy, toml_str};
use wharf_tests::plugins;

/// The `code` row, with `grant` (e.g. `tools = true`).
pub(crate) fn code_row(grant: &str) -> String {
    let _ = wharf_tests::plugin(plugins::CODE);
    policy("code", "code", "max_calls = 50", grant)
}

/// The scripted model: one `run_code` call with `code` (and `timeout_ms`),
/// then a turn echoing the result it was sent.
fn scripted(programs: &[(&str, Option<u64>)]) -> String {
    let calls: Vec<Value> = programs
        .iter()
        .map(|(code, timeout)| {
            let mut args = json!({ "language": "javascript", "code": code });
            if let Some(t) = timeout {
                args["timeout_ms"] = json!(t);
            }
            args
        })
        .collect();
    scripted_args(&calls)
}

/// The scripted model: one `run_code` call with each of `calls` as its
/// arguments, then a turn echoing the result it was sent.
fn scripted_args(calls: &[Value]) -> String {
    let mut s = String::from(
        "\n[[plugin]]\nid = \"scripted\"\npath = \"${plugin_dir}/llm-scripted.wasm\"\n[plugin.config]\nmodel = \"scripted-code\"\n",
    );
    for args in calls {
        s.push_str(&format!(
            "\n[[plugin.config.turns]]\ntool_calls = [{{ name = \"run_code\", arguments = {} }}]\nfinish = \"tool_calls\"\n",
            toml_str(&args.to_string())
        ));
    }
    s.push_str(
        "\n[[plugin.config.turns]]\ntext = \"The tool said: \"\necho_last_tool_result = true\nfinish = \"stop\"\n",
    );
    s
}

/// The model's `run_code` calls' results, in order (not the refused inner
/// calls a program made to `run_code`).
pub(crate) fn code_results(run: &crate::policy::Run) -> Vec<Value> {
    let ids: Vec<String> = run
        .events
        .iter()
        .filter(|e| e["type"] == "tool/call" && e["data"]["name"] == "run_code" && e["data"]["parent"].is_null())
        .map(|e| e["data"]["id"].as_str().unwrap_or_default().to_string())
        .collect();
    ids.iter().map(|id| run.one("tool/result", id)["data"].clone()).collect()
}

/// The inner `tool/call`s of call `parent`.
pub(crate) fn inner_calls<'a>(run: &'a crate::policy::Run, parent: &str) -> Vec<&'a Value> {
    run.events.iter().filter(|e| e["type"] == "tool/call" && e["data"]["parent"] == parent).collect()
}

fn run_programs(
    env: &Env,
    name: &str,
    extra_rows: &str,
    grant: &str,
    programs: &[(&str, Option<u64>)],
) -> crate::policy::Run {
    let profile = env.profile(name, &format!("{extra_rows}{}{}", code_row(grant), scripted(programs)));
    env.run(&profile, Some(20), &[])
}

#[test]
fn a_program_reads_twenty_files_in_parallel_in_one_model_step() -> anyhow::Result<()> {
    let env = env();
    std::fs::create_dir_all(env.path("data")).context("creating data")?;
    for i in 0..20 {
        let body = if i % 3 == 0 { format!("file {i} has the needle\n") } else { format!("file {i}\n") };
        std::fs::write(env.path(&format!("data/f{i:02}.txt")), body).context("writing data/f{i:02}.txt")?;
    }
    let program = r#"
const listing = await tools.glob({pattern: "data/*.txt"});
const paths = listing.split("\n").map(l => l.trim()).filter(l => l.endsWith(".txt"));
console.log("found", paths.length, "files");
const texts = await Promise.all(paths.map(p => tools.read({path: p})));
return {files: paths.length, with_needle: texts.filter(t => t.includes("needle")).length};
"#;
    let run = run_programs(&env, "twenty", "", "tools = true", &[(program, None)]);
    assert_eq!(run.code, 0, "{}", run.dump());
    let results = code_results(&run);
    assert_eq!(results.len(), 1, "{}", run.dump());
    let content = results[0]["content"].as_str().unwrap_or_default();
    assert_eq!(results[0]["is_error"], false, "{}", run.dump());
    assert!(content.contains("found 20 files"), "{content}");
    assert!(content.contains(r#"result: {"files":20,"with_needle":7}"#), "{content}");

    // One model step for the program, one for the answer: not 21 steps.
    let messages = run.events.iter().filter(|e| e["type"] == "assistant/message").count();
    assert_eq!(messages, 2, "{}", run.dump());
    let parent = run
        .events
        .iter()
        .find(|e| e["type"] == "tool/call" && e["data"]["name"] == "run_code")
        .and_then(|e| e["data"]["id"].as_str())
        .unwrap_or_default()
        .to_string();
    let inner = inner_calls(&run, &parent);
    assert_eq!(inner.len(), 21, "{}", run.dump());
    assert_eq!(inner[0]["data"]["name"], "glob");
    assert!(inner[1..].iter().all(|c| c["data"]["name"] == "read"), "{}", run.dump());
    for c in &inner {
        let id = c["data"]["id"].as_str().unwrap_or_default();
        let r = run.one("tool/result", id);
        assert_eq!(r["data"]["is_error"], false, "{r}");
        assert_eq!(r["data"]["plugin"], "fs", "{r}");
    }
    // The model saw the program's output, not the inner results.
    assert!(run.last_text().contains(r#""with_needle":7"#), "{}", run.dump());
    Ok(())
}

#[test]
fn a_denied_inner_write_is_an_exception_the_program_catches() {
    let env = env();
    let rules = policy(
        "rules",
        "policy-rules",
        r#"
mode = "workspace-write"
[[plugin.config.rules]]
tool = ["run_code"]
action = "allow"
[[plugin.config.rules]]
tool = ["write", "edit"]
path = "secrets/**"
action = "deny"
reason = "secrets are off limits"
"#,
        "",
    );
    let program = r#"
let denied = null;
try { await tools.write({path: "secrets/key.txt", content: "hunter2"}); }
catch (e) { denied = e.code; }
await tools.write({path: "ok.txt", content: "fine"});
return denied;
"#;
    let run = run_programs(&env, "deny", &rules, "tools = true", &[(program, None)]);
    assert_eq!(run.code, 0, "{}", run.dump());
    let results = code_results(&run);
    let content = results[0]["content"].as_str().unwrap_or_default();
    assert!(content.contains(r#"result: "DENIED""#), "{}", run.dump());
    assert!(!env.path("secrets/key.txt").exists(), "the denied write ran");
    assert_eq!(std::fs::read_to_string(env.path("ok.txt")).unwrap_or_default(), "fine");
    // The log shows the deny of the inner call.
    let inner: Vec<&Value> = run
        .events
        .iter()
        .filter(|e| e["type"] == "tool/call" && e["data"]["parent"].is_string() && e["data"]["name"] == "write")
        .collect();
    assert_eq!(inner.len(), 2, "{}", run.dump());
    let denied_id = inner[0]["data"]["id"].as_str().unwrap_or_default();
    let decision = run.one("policy/decision", denied_id);
    assert_eq!(decision["data"]["verdict"], "deny", "{decision}");
    assert_eq!(run.one("tool/result", denied_id)["data"]["error_code"], "DENIED");
}

#[test]
fn loops_throws_and_allocations_are_contained_and_the_session_goes_on() {
    let env = env();
    let run = run_programs(
        &env,
        "contain",
        "",
        "tools = true\nmemory_mb = 64",
        &[
            ("while (true) {}", Some(500)),
            ("const x = 1;\nthrow new Error('boom');", None),
            ("const a = []; while (true) a.push(new Array(100000).fill(7));", None),
            ("this is not javascript", None),
            ("6 * 7", None),
        ],
    );
    assert_eq!(run.code, 0, "{}", run.dump());
    let r = code_results(&run);
    assert_eq!(r.len(), 5, "{}", run.dump());
    assert_eq!(r[0]["error_code"], "TIMEOUT", "{}", r[0]);
    assert_eq!(r[1]["error_code"], "SCRIPT_ERROR", "{}", r[1]);
    let thrown = r[1]["content"].as_str().unwrap_or_default();
    assert!(thrown.contains("boom"), "{thrown}");
    assert!(thrown.contains("line 2:"), "the position in the program: {thrown}");
    assert_eq!(r[2]["is_error"], true, "{}", r[2]);
    assert_ne!(r[2]["error_code"], "SCRIPT_ERROR", "{}", r[2]);
    assert_eq!(r[3]["error_code"], "SYNTAX_ERROR", "{}", r[3]);
    // The component is fresh for every call: the session continues.
    assert_eq!(r[4]["is_error"], false, "{}", r[4]);
    assert!(r[4]["content"].as_str().unwrap_or_default().contains("result: 42"), "{}", r[4]);
}

/// A model's `timeout_ms` is the program's own limit, capped by the
/// operator's: the largest integer JSON carries is a long limit (the grant's
/// then), not an overflow in the host.
#[test]
fn a_model_asking_for_an_endless_time_limit_gets_the_operators() {
    let env = env();
    let run = run_programs(
        &env,
        "endless",
        "",
        "tools = true\ntimeout_ms = 1500",
        &[("6 * 7", Some(u64::MAX)), ("while (true) {}", Some(u64::MAX))],
    );
    assert_eq!(run.code, 0, "{}", run.dump());
    let r = code_results(&run);
    assert_eq!(r.len(), 2, "{}", run.dump());
    assert_eq!(r[0]["is_error"], false, "{}", r[0]);
    assert!(r[0]["content"].as_str().unwrap_or_default().contains("result: 42"), "{}", r[0]);
    assert_eq!(r[1]["error_code"], "TIMEOUT", "{}", r[1]);
}

#[test]
fn without_the_grant_a_program_cannot_call_tools() {
    let env = env();
    let run = run_programs(&env, "nogrant", "", "", &[("await tools.read({path: 'README.md'})", None)]);
    assert_eq!(run.code, 0, "{}", run.dump());
    let r = code_results(&run);
    assert_eq!(r[0]["is_error"], true, "{}", r[0]);
    assert_eq!(r[0]["error_code"], "NOT_GRANTED", "{}", r[0]);
    assert!(!run.events.iter().any(|e| e["data"]["parent"].is_string()), "{}", run.dump());
}

#[test]
fn an_unknown_language_is_refused_with_the_supported_languages_and_the_session_goes_on() {
    let env = env();
    let profile = env.profile(
        "ruby",
        &format!(
            "{}{}",
            code_row("tools = true"),
            scripted_args(&[
                json!({"language": "ruby", "code": "puts 1"}),
                json!({"language": "javascript", "code": "6 * 7"}),
            ])
        ),
    );
    let run = env.run(&profile, Some(10), &[]);
    assert_eq!(run.code, 0, "{}", run.dump());
    let r = code_results(&run);
    assert_eq!(r.len(), 2, "{}", run.dump());
    assert_eq!(r[0]["is_error"], true, "{}", r[0]);
    assert_eq!(r[0]["error_code"], "INVALID_ARGUMENTS", "{}", r[0]);
    let msg = r[0]["content"].as_str().unwrap_or_default();
    // The model is told what it asked for and what it can have.
    assert!(msg.contains("ruby") && msg.contains("javascript") && msg.contains("python"), "{msg}");
    assert!(!run.events.iter().any(|e| e["data"]["parent"].is_string()), "{}", run.dump());
    assert!(r[1]["content"].as_str().unwrap_or_default().contains("result: 42"), "{}", r[1]);
}

#[test]
fn a_batch_with_exclusive_tools_keeps_the_barriers_and_the_program_order() -> anyhow::Result<()> {
    let env = env();
    // write and edit are `exclusive` in `fs`; read, glob and the MCP tool
    // are `parallel`. One Promise.all, so one batch of 7.
    let program = r#"
const r = await Promise.all([
  tools.mcp__fx__slow({ms: 400}),
  tools.read({path: "seq.txt"}).catch(e => "missing: " + e.code),
  tools.write({path: "seq.txt", content: "one\n"}),
  tools.read({path: "seq.txt"}),
  tools.glob({pattern: "*.txt"}),
  tools.edit({path: "seq.txt", old_string: "one", new_string: "two"}),
  tools.read({path: "seq.txt"}),
]);
return r.map(x => String(x).slice(0, 80));
"#;
    let rows = format!("{}{}{}", code_row("tools = true"), mcp_row(), scripted(&[(program, None)]));
    let profile = write_profile(&env, "exclusive", &profile_text("scripted", &rows));
    let run = env.run(&profile, None, &[]);
    assert_eq!(run.code, 0, "{}", run.dump());
    let r = code_results(&run);
    let content = r[0]["content"].as_str().unwrap_or_default();
    let json = content.rsplit_once("result: ").map(|(_, j)| j).unwrap_or_else(|| panic!("{}", run.dump()));
    let values: Vec<String> = serde_json::from_str(json).with_context(|| format!("parsing JSON: {content}"))?;
    // Results in program order; each read saw the file as the exclusive
    // calls before it in the batch left it, none after.
    assert_eq!(values.len(), 7, "{values:?}");
    assert!(values[0].contains("400"), "{values:?}");
    assert!(values[1].starts_with("missing: "), "the read before the write saw no file: {values:?}");
    assert!(values[3].contains("one") && !values[3].contains("two"), "{values:?}");
    assert!(values[4].contains("seq.txt"), "{values:?}");
    assert!(values[6].contains("two") && !values[6].contains("one"), "{values:?}");
    assert_eq!(std::fs::read_to_string(env.path("seq.txt")).unwrap_or_default(), "two\n");

    // The log: calls and results of the batch, in the order the barriers
    // impose: a parallel run [slow, read] ends (both results) before the
    // write's call; the write's result comes before anything after it.
    let parent = r[0]["call_id"].as_str().unwrap_or_default().to_string();
    let names: Vec<String> = inner_calls(&run, &parent).iter().map(|c| c["data"]["name"].to_string()).collect();
    assert_eq!(names.len(), 7, "{}", run.dump());
    let order: Vec<String> = run
        .events
        .iter()
        .filter(|e| {
            let id = e["data"]["id"].as_str().or(e["data"]["call_id"].as_str()).unwrap_or_default();
            (e["type"] == "tool/call" || e["type"] == "tool/result") && id.starts_with(&format!("{parent}."))
        })
        .map(|e| {
            let (kind, name) = (e["type"].as_str().unwrap_or_default(), e["data"]["name"].as_str().unwrap_or_default());
            format!("{}:{name}", if kind == "tool/call" { "call" } else { "result" })
        })
        .collect();
    let expected = [
        "call:mcp__fx__slow",
        "call:read",
        "result:mcp__fx__slow",
        "result:read",
        "call:write",
        "result:write",
        "call:read",
        "call:glob",
        "result:read",
        "result:glob",
        "call:edit",
        "result:edit",
        "call:read",
        "result:read",
    ];
    assert_eq!(order, expected, "{}", run.dump());
    // And the exclusive calls really ran alone: the write started after the
    // slow call had finished (its duration is in its result).
    let slow = run.events.iter().find(|e| e["type"] == "tool/result" && e["data"]["name"] == "mcp__fx__slow");
    let slow_ms = slow.and_then(|e| e["data"]["duration_ms"].as_u64()).unwrap_or_default();
    assert!(slow_ms >= 400, "{}", run.dump());
    Ok(())
}

// ---------------------------------------------------------------------------
// Helpers for profiles of their own (the DeepSeek mock, the MCP server) and
// for runs of the binary to interrupt.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use wharf_mock_llm::{MockLlm, Script};

use crate::policy::Run;
/// The variable holding the mock's key (granted to the adapter by name),
/// set in this process for in-process hosts.
use wharf_tests::host::{TEST_KEY as KEY, TEST_KEY_ENV as KEY_ENV};

/// The `fs` row, then `rows`, with `[agent] adapter = ADAPTER`.
pub(crate) fn profile_text(adapter: &str, rows: &str) -> String {
    format!(
        "[agent]\nadapter = \"{adapter}\"\nmax_steps = 20\n\n[[plugin]]\nid = \"fs\"\npath = \"${{plugin_dir}}/fs.wasm\"\n\
         [plugin.grant]\ndirs = [\"${{workspace}}:rw\"]\n{rows}\n"
    )
}

/// Writes a profile next to the sessions directory.
pub(crate) fn write_profile(env: &Env, name: &str, text: &str) -> PathBuf {
    let dir = env.sessions.parent().map(Path::to_path_buf).unwrap_or_else(|| env.sessions.clone());
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).expect("writing the file");
    path
}

/// The DeepSeek adapter row pointing at `mock`.
pub(crate) fn deepseek_row(mock: &MockLlm) -> String {
    let _ = wharf_tests::plugin(plugins::LLM_DEEPSEEK);
    format!(
        "\n[[plugin]]\nid = \"model\"\npath = \"${{plugin_dir}}/llm-deepseek.wasm\"\n[plugin.config]\n\
         base_url = \"{}/v1\"\nmodel = \"deepseek-v4-pro\"\napi_key_env = \"{KEY_ENV}\"\nidle_timeout_ms = 5000\n\
         [plugin.grant]\nhosts = [\"127.0.0.1:{}\"]\nenv = [\"{KEY_ENV}\"]\ntimeout_ms = 20000\n",
        mock.url(),
        mock.addr().port()
    )
}

/// The `[[mcp]]` row of the test MCP server (`mcp__fx__*` tools).
pub(crate) fn mcp_row() -> String {
    let fx = crate::mcp::fixture().display().to_string();
    format!("\n[[mcp]]\nname = \"fx\"\ncommand = \"{fx}\"\nargs = [\"stdio\"]\nrequired = true\n")
}

/// `wharf run TASK --output jsonl` as a command (not started).
pub(crate) fn run_command(env: &Env, profile: &Path, task: &str) -> Command {
    for p in [
        plugins::FS,
        plugins::LLM_SCRIPTED,
        plugins::POLICY_RULES,
        plugins::POLICY_FIXED,
        plugins::CODE,
        plugins::SUBAGENT,
    ] {
        let _ = wharf_tests::plugin(p);
    }
    let home = env.sessions.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut c = wharf_tests::wharf(&home);
    let ws = env.path("");
    c.current_dir(&ws).args([
        "run",
        task,
        "--profile",
        &profile.display().to_string(),
        "--workspace",
        &ws.display().to_string(),
        "--session-dir",
        &env.sessions.display().to_string(),
        "--output",
        "jsonl",
        "--no-watch",
    ]);
    c
}

pub(crate) fn parse_events(stdout: &str) -> Vec<Value> {
    stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// The stored log of session `id`, checked against the invariants.
pub(crate) fn stored(env: &Env, id: &str) -> Vec<wharf_core::events::Event> {
    let log = wharf_core::SessionStore::new(&env.sessions).load(id).expect("loading the session");
    if let Err(e) = wharf_core::invariants::check(&log.events) {
        panic!("session log breaks an invariant: {e}");
    }
    log.events
}

pub(crate) fn stream(fields: Value) -> Value {
    let mut v = json!({"kind": "stream"});
    if let (Some(o), Some(f)) = (v.as_object_mut(), fields.as_object()) {
        o.extend(f.clone());
    }
    v
}

pub(crate) fn mock(replies: Vec<Value>) -> MockLlm {
    let script: Script =
        serde_json::from_value(json!({"checks": {"api_key": KEY}, "replies": replies})).expect("parsing JSON");
    MockLlm::start_background(script).expect("starting the mock LLM")
}

/// A mock reply calling `run_code` with `code`.
fn run_code_reply(id: &str, code: &str) -> Value {
    let args = json!({"language": "javascript", "code": code}).to_string();
    stream(json!({"tool_calls": [{"id": id, "name": "run_code", "arguments": args}]}))
}

/// The `run_code` tool's description in a request body the mock received.
fn run_code_description(body: &Value) -> String {
    let tools = body["tools"].as_array().cloned().unwrap_or_default();
    let t = tools.iter().find(|t| t["function"]["name"] == "run_code");
    t.and_then(|t| t["function"]["description"].as_str()).unwrap_or_default().to_string()
}

const TWENTY_FILES: &str = r#"
const listing = await tools.glob({pattern: "data/*.txt"});
const paths = listing.split("\n").map(l => l.trim()).filter(l => l.endsWith(".txt"));
const texts = await Promise.all(paths.map(p => tools.read({path: p})));
return {files: paths.length, with_needle: texts.filter(t => t.includes("needle")).length};
"#;

fn twenty_files(env: &Env) {
    std::fs::create_dir_all(env.path("data")).expect("creating data");
    for i in 0..20 {
        let body = if i % 3 == 0 { format!("file {i} has the needle\n") } else { format!("file {i}\n") };
        std::fs::write(env.path(&format!("data/f{i:02}.txt")), body).expect("writing data/f{i:02}.txt");
    }
}

#[test]
fn deepseek_mock_sees_the_tool_catalogue_and_one_step_for_twenty_files() {
    let env = env();
    twenty_files(&env);
    let mock = mock(vec![
        run_code_reply("call_code", TWENTY_FILES),
        stream(json!({"text": "Seven of the twenty files mention the needle."})),
    ]);
    let rows = format!("{}{}", code_row("tools = true"), deepseek_row(&mock));
    let profile = write_profile(&env, "mock20", &profile_text("model", &rows));
    let run = env.run(&profile, None, &[]);
    assert_eq!(run.code, 0, "{}", run.dump());
    mock.assert_no_violations();

    // Two model requests for the whole task, not 21.
    let requests = mock.requests();
    assert_eq!(requests.len(), 2, "{}", run.dump());
    let first = requests[0].body.clone().unwrap_or_default();
    // The description names the callable tools with their argument shapes,
    // never run_code itself.
    let description = run_code_description(&first);
    assert!(description.contains("Tools a program can call now"), "{description}");
    assert!(description.contains("- tools.read({"), "{description}");
    assert!(description.contains("path: string"), "{description}");
    assert!(description.contains("- tools.glob({"), "{description}");
    assert!(!description.contains("tools.run_code"), "{description}");

    // The second request carries the program's result as one tool message;
    // none of the 21 inner calls reached the conversation.
    let second = requests[1].body.clone().unwrap_or_default();
    let messages = second["messages"].as_array().cloned().unwrap_or_default();
    let tool_msgs: Vec<&Value> = messages.iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(tool_msgs.len(), 1, "{second}");
    assert_eq!(tool_msgs[0]["tool_call_id"], "call_code");
    let content = tool_msgs[0]["content"].as_str().unwrap_or_default();
    assert!(content.contains(r#"result: {"files":20,"with_needle":7}"#), "{content}");
    let assistant_calls: usize = messages.iter().map(|m| m["tool_calls"].as_array().map_or(0, Vec::len)).sum();
    assert_eq!(assistant_calls, 1, "{second}");
    // The log has the 21 inner calls under the run_code call.
    assert_eq!(inner_calls(&run, "call_code").len(), 21, "{}", run.dump());
}

#[test]
fn an_inner_mcp_tool_call_goes_through_the_pipeline_and_the_catalogue_follows_the_grant() {
    let env = env();
    let program = r#"
const echoed = await tools.mcp__fx__echo({text: "hello over mcp"});
const sum = await tools.mcp__fx__add({a: 2, b: 3});
let refused = null;
try { await tools.mcp__fx__pid({}); } catch (e) { refused = e.code; }
return {echoed, sum, refused};
"#;
    let mock = mock(vec![run_code_reply("call_mcp", program), stream(json!({"text": "done"}))]);
    let rows = format!(
        "{}{}{}",
        code_row(r#"tools = ["read", "mcp__fx__echo", "mcp__fx__add"]"#),
        deepseek_row(&mock),
        mcp_row()
    );
    let profile = write_profile(&env, "mockmcp", &profile_text("model", &rows));
    let run = env.run(&profile, None, &[]);
    assert_eq!(run.code, 0, "{}", run.dump());
    let requests = mock.requests();
    let description = run_code_description(&requests[0].body.clone().unwrap_or_default());
    // Exactly the granted tools, MCP ones with their schemas.
    assert!(description.contains("- tools.mcp__fx__echo({text: string})"), "{description}");
    assert!(description.contains("- tools.mcp__fx__add({"), "{description}");
    assert!(description.contains("- tools.read({"), "{description}");
    for absent in ["tools.glob", "tools.write", "tools.mcp__fx__pid", "tools.mcp__fx__slow"] {
        assert!(!description.contains(absent), "{absent} in {description}");
    }
    let r = code_results(&run);
    let content = r[0]["content"].as_str().unwrap_or_default();
    assert!(content.contains(r#""echoed":"hello over mcp","sum":"sum: 5","refused":"#), "{content}\n{}", run.dump());
    let inner = inner_calls(&run, "call_mcp");
    assert_eq!(inner.len(), 3, "{}", run.dump());
    for c in &inner[..2] {
        let res = run.one("tool/result", c["data"]["id"].as_str().unwrap_or_default());
        assert_eq!(res["data"]["plugin"], "mcp:fx", "{res}");
        assert_eq!(res["data"]["is_error"], false, "{res}");
    }
    // The tool the grant leaves out was refused before reaching the server.
    let refused = run.one("tool/result", inner[2]["data"]["id"].as_str().unwrap_or_default());
    assert_eq!(refused["data"]["is_error"], true, "{refused}");
    assert!(refused["data"]["plugin"].is_null(), "{refused}");
}

#[test]
fn adversarial_programs_reach_nothing_around_the_pipeline() -> anyhow::Result<()> {
    let env = env();
    let globals = r#"
const probe = {};
for (const n of ["require", "process", "fetch", "Deno", "Bun", "std", "os", "WebAssembly", "XMLHttpRequest",
                 "WebSocket", "Worker", "importScripts", "__wharf_enqueue", "__wharf_print"]) probe[n] = typeof globalThis[n];
let imported = "imported";
try { await import("/etc/passwd"); } catch (e) { imported = "refused"; }
let imported2 = "imported";
try { await import("fs"); } catch (e) { imported2 = "refused"; }
const viaFunction = Function("return typeof this.process")();
return {probe, imported, imported2, viaFunction};
"#;
    let around = r#"
const out = {};
const tries = [["write", {path: "pwned.txt", content: "x"}], ["run_code", {code: "1"}], ["bash", {command: "id"}],
               ["read", {path: "/etc/passwd"}], ["read", {path: "../../../../etc/passwd"}]];
for (const [name, args] of tries) {
  const key = name + ":" + (args.path || "");
  try { const r = await tools.call(name, args); out[key] = "ran: " + r.slice(0, 60); }
  catch (e) { out[key] = e.code; }
}
try { await tools.run_code({code: "1"}); out.direct = "ran"; } catch (e) { out.direct = e.code; }
return out;
"#;
    let forge = r#"
const tamper = [];
try { tools.read = () => Promise.resolve("forged"); } catch (e) { tamper.push("assign"); }
try { delete tools.read; } catch (e) { tamper.push("delete"); }
const real = await tools.read({path: "README.md"});
globalThis.Promise = function () { throw new Error("fake promise"); };
JSON.stringify = () => '{"path":"forged.txt"}';
Map.prototype.get = () => undefined;
const again = await tools.read({path: "README.md"});
return {real: real.includes("A sample project"), again: again.includes("A sample project"), tamper};
"#;
    let run = run_programs(
        &env,
        "adversarial",
        "",
        r#"tools = ["read", "glob"]"#,
        &[(globals, None), (around, None), (forge, None), ("6 * 7", None)],
    );
    // The session went on to its last turn.
    assert_eq!(run.code, 0, "{}", run.dump());
    let r = code_results(&run);
    assert_eq!(r.len(), 4, "{}", run.dump());
    let value = |i: usize| -> anyhow::Result<Value> {
        let c = r[i]["content"].as_str().unwrap_or_default();
        let json = c.rsplit_once("result: ").map(|(_, j)| j).with_context(|| format!("no result in {c}"))?;
        serde_json::from_str(json).with_context(|| format!("the result is not JSON: {c}"))
    };
    let g = value(0)?;
    for (name, ty) in g["probe"].as_object().cloned().unwrap_or_default() {
        assert_eq!(ty, "undefined", "`{name}` is reachable: {g}");
    }
    assert_eq!(g["imported"], "refused", "{g}");
    assert_eq!(g["imported2"], "refused", "{g}");
    assert_eq!(g["viaFunction"], "undefined", "{g}");

    let a = value(1)?;
    for key in ["write:pwned.txt", "run_code:", "bash:", "read:/etc/passwd", "read:../../../../etc/passwd", "direct"] {
        let v = a[key].as_str().unwrap_or_default();
        assert!(!v.is_empty() && !v.starts_with("ran"), "{key}: {a}");
    }
    assert!(!env.path("pwned.txt").exists());
    // Every attempt is in the log as an inner call with a refused result.
    let parent = r[1]["call_id"].as_str().unwrap_or_default().to_string();
    let inner = inner_calls(&run, &parent);
    assert_eq!(inner.len(), 6, "{}", run.dump());
    for c in &inner {
        let res = run.one("tool/result", c["data"]["id"].as_str().unwrap_or_default());
        assert_eq!(res["data"]["is_error"], true, "{res}");
    }

    let f = value(2)?;
    assert_eq!(f["real"], true, "{f}");
    assert_eq!(f["again"], true, "{f}");
    assert_eq!(f["tamper"], json!([]), "sloppy-mode writes fail silently: {f}");
    let parent = r[2]["call_id"].as_str().unwrap_or_default().to_string();
    let inner = inner_calls(&run, &parent);
    assert_eq!(inner.len(), 2, "{}", run.dump());
    for c in &inner {
        assert_eq!(c["data"]["arguments"], r#"{"path":"README.md"}"#, "{c}");
        let res = run.one("tool/result", c["data"]["id"].as_str().unwrap_or_default());
        assert_eq!(res["data"]["plugin"], "fs", "{res}");
    }
    assert!(r[3]["content"].as_str().unwrap_or_default().contains("result: 42"), "{}", r[3]);
    Ok(())
}

#[test]
fn run_code_cannot_start_itself_and_subagents_bound_the_depth() {
    let env = env();
    let program = r#"
let direct;
try { await tools.call("run_code", {code: "1"}); direct = "ran"; } catch (e) { direct = e.code; }
let nested;
try { nested = await tools.subagent({task: "CHILD: go deeper"}); } catch (e) { nested = "refused: " + e.message; }
return {direct, nested: String(nested).slice(0, 4000)};
"#;
    let call = |table: &str| {
        let args = json!({"language": "javascript", "code": program}).to_string();
        format!(
            "\n[[{table}]]\ntool_calls = [{{ name = \"run_code\", arguments = {} }}]\n[[{table}]]\ntext = \"The tool said: \"\n\
             echo_last_tool_result = true\nfinish = \"stop\"\n",
            toml_str(&args)
        )
    };
    let model = format!(
        "\n[[plugin]]\nid = \"scripted\"\npath = \"${{plugin_dir}}/llm-scripted.wasm\"\n[plugin.config]\nmodel = \"scripted\"\n{}\n\
         [[plugin.config.branches]]\nwhen = \"CHILD\"\n{}",
        call("plugin.config.turns"),
        call("plugin.config.branches.turns")
    );
    let sub = policy("subagent", "subagent", "", "agents = true\ntimeout_ms = 120000");
    let rows = format!("{sub}{}{model}", code_row("tools = true\ntimeout_ms = 120000"));
    let profile = write_profile(&env, "recursion", &profile_text("scripted", &rows));
    let t0 = Instant::now();
    let run = env.run(&profile, None, &[]);
    assert!(t0.elapsed() < Duration::from_secs(120), "bounded");
    assert_eq!(run.code, 0, "{}", run.dump());
    let text = run.last_text();
    // Every level's direct call was refused; levels 1-3 ran a program each,
    // the fourth subagent was refused.
    assert_eq!(text.matches("UNKNOWN_TOOL").count(), 4, "{text}");
    assert!(text.contains("nest at most 3 deep"), "{text}");
}

/// Spawns `wharf run` with its stdout streamed, returning the child and a
/// channel of its lines.
pub(crate) fn spawn_streamed(env: &Env, profile: &Path, task: &str) -> (std::process::Child, mpsc::Receiver<String>) {
    let mut child = run_command(env, profile, task)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning wharf run");
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (child, rx)
}

/// Reads lines until `n` inner calls of `name` were dispatched (their
/// `tool/call` logged), returning the lines so far.
pub(crate) fn until_inner_calls(rx: &mpsc::Receiver<String>, name: &str, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut lines = Vec::new();
    loop {
        let seen = lines
            .iter()
            .filter_map(|l: &String| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["type"] == "tool/call" && e["data"]["parent"].is_string() && e["data"]["name"] == name)
            .count();
        if seen >= n {
            return lines;
        }
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(l) => lines.push(l),
            Err(_) => panic!("the program's inner calls never started: {lines:#?}"),
        }
    }
}

const SLOW_PROGRAM: &str = r#"
console.log("starting");
const r = await Promise.all([tools.mcp__fx__slow({ms: 60000}), tools.mcp__fx__slow({ms: 60000})]);
return r;
"#;

fn slow_profile(env: &Env, name: &str) -> PathBuf {
    let rows =
        format!("{}{}{}", code_row("tools = true\ntimeout_ms = 120000"), mcp_row(), scripted(&[(SLOW_PROGRAM, None)]));
    write_profile(env, name, &profile_text("scripted", &rows))
}

/// On the binary: SIGINT is `wharf run`'s Ctrl-C handling, and its exit
/// code is the process's.
#[test]
fn sigint_mid_program_stops_it_and_its_inner_calls() -> anyhow::Result<()> {
    let env = env();
    let profile = slow_profile(&env, "sigint");
    let (mut child, rx) = spawn_streamed(&env, &profile, "do the task");
    let mut lines = until_inner_calls(&rx, "mcp__fx__slow", 2);
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        Command::new("kill").args(["-INT", &child.id().to_string()]).status().context("running kill -INT")?.success()
    );
    let t0 = Instant::now();
    let status = child.wait().context("waiting for the process")?;
    assert!(t0.elapsed() < Duration::from_secs(15), "wharf did not stop promptly after SIGINT");
    lines.extend(rx.iter());
    let events = parse_events(&lines.join("\n"));
    let run = Run { code: status.code().unwrap_or(-1), events, stderr: String::new(), session: String::new() };
    assert_eq!(run.code, 1, "{}", run.dump());
    let end = run.events.iter().rfind(|e| e["type"] == "turn/end").cloned().unwrap_or_default();
    assert_eq!(end["data"]["reason"], "cancelled", "{}", run.dump());
    // The program and both inner calls ended as interrupted, the inner ones
    // logged before the program's.
    let r = code_results(&run);
    assert_eq!(r.len(), 1, "{}", run.dump());
    assert_eq!(r[0]["is_error"], true, "{}", r[0]);
    assert!(r[0]["error_code"].as_str().unwrap_or_default().starts_with("ABORTED"), "{}", r[0]);
    let parent = r[0]["call_id"].as_str().unwrap_or_default().to_string();
    let inner = inner_calls(&run, &parent);
    assert_eq!(inner.len(), 2, "{}", run.dump());
    for c in &inner {
        let res = run.one("tool/result", c["data"]["id"].as_str().unwrap_or_default());
        assert!(res["data"]["error_code"].as_str().unwrap_or_default().starts_with("ABORTED"), "{res}");
        let seq = res["seq"].as_u64().unwrap_or_default();
        let parent_seq = run.one("tool/result", &parent)["seq"].as_u64().unwrap_or_default();
        assert!(seq < parent_seq, "inner results first: {}", run.dump());
    }
    let id = run
        .events
        .iter()
        .find(|e| e["type"] == "session/start")
        .and_then(|e| e["data"]["id"].as_str())
        .unwrap_or_default()
        .to_string();
    if !id.is_empty() {
        let _ = stored(&env, &id);
    }
    Ok(())
}

/// The crash is a `wharf run` killed with SIGKILL (a process); the resume
/// that repairs its log runs in-process.
#[test]
fn resume_after_kill_9_during_a_program_repairs_the_log() -> anyhow::Result<()> {
    let env = env();
    let profile = slow_profile(&env, "kill9");
    let (mut child, rx) = spawn_streamed(&env, &profile, "do the task");
    let lines = until_inner_calls(&rx, "mcp__fx__slow", 2);
    std::thread::sleep(Duration::from_millis(300));
    child.kill().context("killing the child")?;
    let _ = child.wait().context("waiting for the process")?;
    let id = parse_events(&lines.join("\n"))
        .iter()
        .find(|e| e["type"] == "session/start")
        .and_then(|e| e["data"]["id"].as_str().map(str::to_string))
        .unwrap_or_else(|| {
            let entries = std::fs::read_dir(&env.sessions).expect("listing the sessions");
            entries
                .flatten()
                .find_map(|e| e.file_name().to_str().and_then(|n| n.strip_suffix(".jsonl")).map(str::to_string))
                .unwrap_or_else(|| panic!("no session file"))
        });
    // The crashed log is a valid prefix: the program's call open.
    let crashed = wharf_core::SessionStore::new(&env.sessions).load(&id).context("loading the session")?;
    wharf_core::invariants::check_prefix(&crashed.events)
        .map_err(anyhow::Error::msg)
        .context("checking the log prefix's invariants")?;

    let resumed = env.run_host(env.host(profile.display().to_string()), Some(&id), "again", None);
    assert_eq!(resumed.code, 0, "{}", resumed.dump());
    let events = stored(&env, &id);
    let values: Vec<Value> = events.iter().map(|e| serde_json::to_value(e).unwrap_or_default()).collect();
    // The crash left both inner calls open (killed while they slept).
    let open_at_crash = |id: &str| {
        !crashed.events.iter().any(|e| matches!(&e.kind, wharf_core::EventKind::ToolResult(r) if r.call_id == id))
    };
    // The repaired log (`stored` checked the invariants: every tool/call,
    // inner ones included, has exactly one result) closed the inner calls
    // as interrupted, in log order, then the program's call.
    let results: Vec<&Value> = values.iter().filter(|e| e["type"] == "tool/result").collect();
    let of = |id: &str| -> Vec<&&Value> { results.iter().filter(|e| e["data"]["call_id"] == id).collect() };
    let program = of("call_0_0");
    assert_eq!(program.len(), 1, "{values:#?}");
    assert_eq!(program[0]["data"]["error_code"], "INTERRUPTED", "{values:#?}");
    let inner: Vec<&Value> =
        values.iter().filter(|e| e["type"] == "tool/call" && e["data"]["parent"] == "call_0_0").collect();
    assert_eq!(inner.len(), 2, "{values:#?}");
    let mut last = 0;
    for c in inner {
        let id = c["data"]["id"].as_str().unwrap_or_default();
        assert!(open_at_crash(id), "{id} had a result before the kill: {values:#?}");
        let r = of(id);
        assert_eq!(r.len(), 1, "{c}\n{values:#?}");
        assert_eq!(r[0]["data"]["error_code"], "INTERRUPTED", "{values:#?}");
        let seq = r[0]["seq"].as_u64().unwrap_or_default();
        assert!(seq > last && seq < program[0]["seq"].as_u64().unwrap_or_default(), "{values:#?}");
        last = seq;
    }
    // The resumed turn ran and the model saw the interrupted result.
    let end = values.iter().rfind(|e| e["type"] == "turn/end").cloned().unwrap_or_default();
    assert_eq!(end["data"]["reason"], "completed", "{values:#?}");
    Ok(())
}

/// In chat: a program's two writes ask for approval; the program yields at
/// its window (1 s) while the first question is open, the model's next call
/// (a read) runs and shows meanwhile, then the user allows the first write
/// and refuses the second, and `resume` collects the program's result.
#[test]
fn an_inner_call_asks_for_approval_in_chat() -> anyhow::Result<()> {
    let program = r#"
const a = await tools.write({path: "approved.txt", content: "yes"});
let b;
try { await tools.write({path: "rejected.txt", content: "no"}); b = "written"; } catch (e) { b = e.code; }
return {a, b};
"#;
    approval_in_chat(json!({"code": program}))
}

/// [`an_inner_call_asks_for_approval_in_chat`] with a Python program.
#[test]
fn an_inner_call_of_a_python_cell_asks_for_approval_in_chat() -> anyhow::Result<()> {
    let program = r#"
a = await tools.write(path="approved.txt", content="yes")
try:
    await tools.write(path="rejected.txt", content="no")
    b = "written"
except RuntimeError as e:
    b = str(e).split(":")[0]
{"a": a, "b": b}
"#;
    approval_in_chat(json!({"language": "python", "code": program}))
}

/// The scenario of the two tests above; `run_code`'s arguments start the
/// program.
fn approval_in_chat(start: Value) -> anyhow::Result<()> {
    let env = env();
    std::fs::write(env.path("notes.txt"), "meanwhile\n").context("writing notes.txt")?;
    let ask =
        policy("ask", "policy-fixed", "decision = \"ask\"\nreason = \"writes need approval\"\ntools = [\"write\"]", "");
    let script = scripted_turns(&[
        &[("call_cell", "run_code", start)],
        &[("call_read", "read", json!({"path": "notes.txt"}))],
        &[("call_wait", "run_code", json!({"resume": "call_cell", "wait_ms": 60000}))],
    ]);
    let rows = format!("{ask}{}{script}", code_row("tools = true\ntimeout_ms = 120000\nyield_ms = 1000"));
    let profile = write_profile(&env, "chat", &profile_text("scripted", &rows));
    let home = env.sessions.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut cmd = wharf_tests::wharf(&home);
    cmd.args([
        "chat",
        "--profile",
        &profile.display().to_string(),
        "--session-dir",
        &env.sessions.display().to_string(),
    ])
    .current_dir(env.path(""))
    .env("TERM", "dumb");
    let mut t = crate::chat::Pty::spawn(cmd);
    t.expect("› ");
    t.line("write two files with a program");
    t.expect("approval needed: write ");
    t.expect("allow? [y]es once");
    // The question is open; the turn goes on: the cell yields and the read
    // runs.
    t.expect("⏺ read");
    t.expect("⎿ ok");
    assert!(!env.path("approved.txt").exists(), "written before the answer");
    t.line("y");
    t.expect("approval needed: write ");
    t.expect("allow?");
    t.line("n");
    t.expect("The tool said:");
    t.expect("— completed");
    t.line("/quit");
    assert!(t.wait().success());
    assert_eq!(std::fs::read_to_string(env.path("approved.txt")).unwrap_or_default(), "yes");
    assert!(!env.path("rejected.txt").exists());
    let store = wharf_core::SessionStore::new(&env.sessions);
    let list = store.list().context("listing the sessions")?;
    let id = list.last().map(|s| s.id.clone()).unwrap_or_default();
    let values: Vec<Value> = stored(&env, &id).iter().map(|e| serde_json::to_value(e).unwrap_or_default()).collect();
    let inner: Vec<&Value> =
        values.iter().filter(|e| e["type"] == "tool/call" && e["data"]["parent"].is_string()).collect();
    assert_eq!(inner.len(), 2, "{values:#?}");
    let first = inner[0]["data"]["id"].as_str().unwrap_or_default();
    let rejected =
        values[index_of(&values, "tool/result", inner[1]["data"]["id"].as_str().unwrap_or_default())].clone();
    assert_eq!(rejected["data"]["error_code"], "APPROVAL_REJECTED", "{rejected}");
    // The read completed while the first write's question was open.
    let decided = index_of(&values, "approval/decided", first);
    assert!(index_of(&values, "tool/cell", "call_cell") < index_of(&values, "tool/call", "call_read"), "{values:#?}");
    assert!(index_of(&values, "tool/result", "call_read") < decided, "{values:#?}");
    assert!(decided < index_of(&values, "tool/result", first), "{values:#?}");
    assert_eq!(values[decided]["data"]["by"], "chat(user)", "{}", values[decided]);
    let content = content_of(&values, "call_wait");
    assert!(content.contains(r#""b":"APPROVAL_REJECTED""#), "{content}");
    Ok(())
}

// ---------------------------------------------------------------------------
// ACP: a minimal client (the acp module's is private to it) over the stdio
// of `wharf acp`.

struct Acp {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    rx: mpsc::Receiver<Value>,
    seen: Vec<Value>,
    next_id: i64,
}

impl Acp {
    fn spawn(env: &Env, profile: &Path) -> Self {
        for p in [plugins::FS, plugins::LLM_SCRIPTED, plugins::POLICY_FIXED, plugins::CODE] {
            let _ = wharf_tests::plugin(p);
        }
        let home = env.sessions.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut cmd = wharf_tests::wharf(&home);
        cmd.args(["acp", "--profile", &profile.display().to_string()])
            .args(["--session-dir", &env.sessions.display().to_string()])
            .current_dir(&home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().expect("spawning the command");
        let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && tx.send(v).is_err()
                {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        Self { child, stdin, rx, seen: Vec::new(), next_id: 1 }
    }

    fn send(&mut self, v: Value) {
        use std::io::Write as _;
        let stdin = self.stdin.as_mut().unwrap_or_else(|| panic!("stdin closed"));
        writeln!(stdin, "{v}").expect("writing to wharf mcp serve");
        stdin.flush().expect("writing to wharf mcp serve");
    }

    fn request(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// The next message matching `pred` (everything received is kept).
    fn wait_for(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(v) = self.seen.iter().find(|v| pred(v)) {
            return v.clone();
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match self.rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(v) => {
                    self.seen.push(v.clone());
                    if pred(&v) {
                        return v;
                    }
                }
                Err(_) => panic!("timed out waiting for {what}; received {:#?}", self.seen),
            }
        }
    }

    fn result(&mut self, id: i64) -> Value {
        let r = self.wait_for(&format!("response {id}"), |v| v["id"] == id && v.get("method").is_none());
        assert!(r.get("error").is_none(), "request {id} failed: {r}");
        r["result"].clone()
    }
}

impl Drop for Acp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The stored log of `id` as JSON values (read while the session is live:
/// a prefix, checked as one).
fn live_log(env: &Env, id: &str) -> Vec<Value> {
    let log = wharf_core::SessionStore::new(&env.sessions).load(id).expect("loading the session");
    if let Err(e) = wharf_core::invariants::check_prefix(&log.events) {
        panic!("session log breaks an invariant: {e}");
    }
    log.events.iter().map(|e| serde_json::to_value(e).unwrap_or_default()).collect()
}

#[test]
fn acp_cancel_stops_a_program_and_an_inner_call_asks_for_approval() -> anyhow::Result<()> {
    let env = env();
    let write = r#"
const w = await tools.write({path: "approved.txt", content: "yes"});
return w.slice(0, 60);
"#;
    let ask =
        policy("ask", "policy-fixed", "decision = \"ask\"\nreason = \"writes need approval\"\ntools = [\"write\"]", "");
    let rows = format!(
        "{ask}{}{}{}",
        code_row("tools = true\ntimeout_ms = 120000"),
        mcp_row(),
        scripted(&[(SLOW_PROGRAM, None), (write, None)])
    );
    let profile = write_profile(&env, "acp", &profile_text("scripted", &rows));
    let mut c = Acp::spawn(&env, &profile);
    let init = c.request(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "test-client", "version": "1"}}),
    );
    c.result(init);
    let cwd = std::fs::canonicalize(env.path("")).context("canonicalizing the workspace")?.display().to_string();
    let new = c.request("session/new", json!({"cwd": cwd, "mcpServers": []}));
    let sid = c.result(new)["sessionId"].as_str().unwrap_or_else(|| panic!("no sessionId")).to_string();

    // 1. The program starts two 60-second inner calls; the client cancels.
    let prompt = c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let log = live_log(&env, &sid);
        let running = log
            .iter()
            .filter(|e| e["type"] == "tool/call" && e["data"]["parent"].is_string())
            .filter(|e| !log.iter().any(|r| r["type"] == "tool/result" && r["data"]["call_id"] == e["data"]["id"]))
            .count();
        if running == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "the inner calls never started: {log:#?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let t0 = Instant::now();
    c.send(json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}}));
    let done = c.result(prompt);
    assert_eq!(done["stopReason"], "cancelled", "{done}");
    assert!(t0.elapsed() < Duration::from_secs(15), "the program did not stop promptly");
    let log = live_log(&env, &sid);
    let end = log.iter().rfind(|e| e["type"] == "turn/end").cloned().unwrap_or_default();
    assert_eq!(end["data"]["reason"], "cancelled", "{log:#?}");
    let result_of = |log: &[Value], id: &str| -> Vec<Value> {
        log.iter().filter(|e| e["type"] == "tool/result" && e["data"]["call_id"] == id).cloned().collect()
    };
    let program = result_of(&log, "call_0_0");
    assert_eq!(program.len(), 1, "{log:#?}");
    assert!(program[0]["data"]["error_code"].as_str().unwrap_or_default().starts_with("ABORTED"), "{log:#?}");
    let inner: Vec<&Value> =
        log.iter().filter(|e| e["type"] == "tool/call" && e["data"]["parent"] == "call_0_0").collect();
    assert_eq!(inner.len(), 2, "{log:#?}");
    for call in &inner {
        let r = result_of(&log, call["data"]["id"].as_str().unwrap_or_default());
        assert_eq!(r.len(), 1, "{log:#?}");
        assert!(r[0]["data"]["error_code"].as_str().unwrap_or_default().starts_with("ABORTED"), "{}", r[0]);
        assert!(r[0]["seq"].as_u64() < program[0]["seq"].as_u64(), "inner results first: {log:#?}");
    }

    // 2. The same session goes on: the next program's inner `write` asks
    // the client for permission.
    let again = c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "again"}]}));
    let asked = c.wait_for("permission request", |v| v["method"] == "session/request_permission");
    assert_eq!(asked["params"]["toolCall"]["rawInput"]["path"], "approved.txt", "{asked}");
    assert!(!env.path("approved.txt").exists(), "written before the answer");
    let answer = json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}});
    c.send(json!({"jsonrpc": "2.0", "id": asked["id"], "result": answer}));
    let done = c.result(again);
    assert_eq!(done["stopReason"], "end_turn", "{done}");
    assert_eq!(std::fs::read_to_string(env.path("approved.txt")).unwrap_or_default(), "yes");
    let c_updates: Vec<Value> =
        c.seen.iter().filter(|v| v["method"] == "session/update").map(|v| v["params"]["update"].clone()).collect();
    drop(c);
    let log: Vec<Value> = stored(&env, &sid).iter().map(|e| serde_json::to_value(e).unwrap_or_default()).collect();
    let write_call = log
        .iter()
        .find(|e| e["type"] == "tool/call" && e["data"]["name"] == "write")
        .unwrap_or_else(|| panic!("{log:#?}"));
    assert!(write_call["data"]["parent"].is_string(), "{write_call}");
    let id = write_call["data"]["id"].as_str().unwrap_or_default();
    let decided = log
        .iter()
        .find(|e| e["type"] == "approval/decided" && e["data"]["call_id"] == id)
        .unwrap_or_else(|| panic!("{log:#?}"));
    assert_eq!(decided["data"]["outcome"], "allowed-once", "{decided}");
    assert_eq!(decided["data"]["by"], "acp:test-client", "{decided}");
    // The client saw the inner call as a tool call of its own.
    let reported = c_updates.iter().any(|u| u["sessionUpdate"] == "tool_call" && u["toolCallId"] == id);
    assert!(reported, "{c_updates:#?}");
    let ends: Vec<&Value> = log.iter().filter(|e| e["type"] == "turn/end").map(|e| &e["data"]["reason"]).collect();
    assert_eq!(ends, [&json!("cancelled"), &json!("completed")], "{log:#?}");
    Ok(())
}

/// The scripted model: one turn per entry of `turns`, each calling the
/// listed `(id, tool, arguments)`, then a turn echoing the last result.
fn scripted_turns(turns: &[&[(&str, &str, Value)]]) -> String {
    let mut s = String::from(
        "\n[[plugin]]\nid = \"scripted\"\npath = \"${plugin_dir}/llm-scripted.wasm\"\n[plugin.config]\nmodel = \"scripted-code\"\n",
    );
    for calls in turns {
        let calls: Vec<String> = calls
            .iter()
            .map(|(id, name, args)| {
                format!("{{ id = \"{id}\", name = \"{name}\", arguments = {} }}", toml_str(&args.to_string()))
            })
            .collect();
        s.push_str(&format!(
            "\n[[plugin.config.turns]]\ntool_calls = [{}]\nfinish = \"tool_calls\"\n",
            calls.join(", ")
        ));
    }
    s.push_str(
        "\n[[plugin.config.turns]]\ntext = \"The tool said: \"\necho_last_tool_result = true\nfinish = \"stop\"\n",
    );
    s
}

/// A program whose write waits for an approval yields at its window (1 s);
/// the model's next call (a read) runs and completes while the question is
/// still open, then the client answers it over ACP, the write runs and is
/// logged, and `resume` collects the program's result — all in one turn.
#[test]
fn acp_approves_a_cells_inner_call_while_the_turn_goes_on() -> anyhow::Result<()> {
    let program = r#"
console.log("asking to write");
const w = await tools.write({path: "approved.txt", content: "yes"});
return {wrote: w.length > 0};
"#;
    acp_approves_in_a_cell(json!({"code": program}))
}

/// [`acp_approves_a_cells_inner_call_while_the_turn_goes_on`] with a
/// Python program.
#[test]
fn acp_approves_a_python_cells_inner_call_while_the_turn_goes_on() -> anyhow::Result<()> {
    let program = r#"
print("asking to write")
w = await tools.write(path="approved.txt", content="yes")
{"wrote": len(w) > 0}
"#;
    acp_approves_in_a_cell(json!({"language": "python", "code": program}))
}

/// The scenario of the two tests above; `run_code`'s arguments start the
/// program.
fn acp_approves_in_a_cell(start: Value) -> anyhow::Result<()> {
    let env = env();
    std::fs::write(env.path("notes.txt"), "meanwhile\n").context("writing notes.txt")?;
    let ask =
        policy("ask", "policy-fixed", "decision = \"ask\"\nreason = \"writes need approval\"\ntools = [\"write\"]", "");
    let script = scripted_turns(&[
        &[("call_cell", "run_code", start)],
        &[("call_read", "read", json!({"path": "notes.txt"}))],
        &[("call_wait", "run_code", json!({"resume": "call_cell", "wait_ms": 60000}))],
    ]);
    let rows = format!("{ask}{}{script}", code_row("tools = true\ntimeout_ms = 120000\nyield_ms = 1000"));
    let profile = write_profile(&env, "acpcell", &profile_text("scripted", &rows));
    let mut c = Acp::spawn(&env, &profile);
    let init = c.request(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "test-client", "version": "1"}}),
    );
    c.result(init);
    let cwd = std::fs::canonicalize(env.path("")).context("canonicalizing the workspace")?.display().to_string();
    let new = c.request("session/new", json!({"cwd": cwd, "mcpServers": []}));
    let sid = c.result(new)["sessionId"].as_str().unwrap_or_else(|| panic!("no sessionId")).to_string();

    let prompt = c.request("session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}));
    let asked = c.wait_for("permission request", |v| v["method"] == "session/request_permission");
    assert_eq!(asked["params"]["toolCall"]["rawInput"]["path"], "approved.txt", "{asked}");
    // The question stays open: the cell yields and the model's read
    // completes meanwhile.
    c.wait_for("the read's completion", |v| {
        let u = &v["params"]["update"];
        v["method"] == "session/update"
            && u["sessionUpdate"] == "tool_call_update"
            && u["toolCallId"] == "call_read"
            && u["status"] == "completed"
    });
    assert!(!env.path("approved.txt").exists(), "written before the answer");
    let answer = json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}});
    c.send(json!({"jsonrpc": "2.0", "id": asked["id"], "result": answer}));
    let done = c.result(prompt);
    assert_eq!(done["stopReason"], "end_turn", "{done}");
    assert_eq!(std::fs::read_to_string(env.path("approved.txt")).unwrap_or_default(), "yes");
    drop(c);

    let log: Vec<Value> = stored(&env, &sid).iter().map(|e| serde_json::to_value(e).unwrap_or_default()).collect();
    let write = log
        .iter()
        .find(|e| e["type"] == "tool/call" && e["data"]["parent"] == "call_cell")
        .and_then(|e| e["data"]["id"].as_str())
        .unwrap_or_else(|| panic!("no inner write: {log:#?}"))
        .to_string();
    let decided = index_of(&log, "approval/decided", &write);
    assert_eq!(log[decided]["data"]["outcome"], "allowed-once", "{}", log[decided]);
    assert_eq!(log[decided]["data"]["by"], "acp:test-client", "{}", log[decided]);
    // Asked, yielded, the read ran and completed, then the answer, then the
    // write's result: all inside the one turn.
    assert!(index_of(&log, "tool/call", &write) < index_of(&log, "tool/cell", "call_cell"), "{log:#?}");
    assert!(index_of(&log, "tool/cell", "call_cell") < index_of(&log, "tool/call", "call_read"), "{log:#?}");
    assert!(index_of(&log, "tool/result", "call_read") < decided, "{log:#?}");
    assert!(decided < index_of(&log, "tool/result", &write), "{log:#?}");
    assert_eq!(log[index_of(&log, "tool/result", &write)]["data"]["is_error"], false, "{log:#?}");
    assert_eq!(cell_states(&log, "call_cell"), ["running", "finished"], "{log:#?}");
    assert!(content_of(&log, "call_cell").contains("asking to write"), "{log:#?}");
    let collected = content_of(&log, "call_wait");
    assert!(collected.contains(r#"result: {"wrote":true}"#), "{collected}");
    let ends: Vec<&Value> = log.iter().filter(|e| e["type"] == "turn/end").map(|e| &e["data"]["reason"]).collect();
    assert_eq!(ends, [&json!("completed")], "{log:#?}");
    Ok(())
}

/// The shipped `code` profile in a headless turn (as under `wharf run`,
/// `ask` runs as `auto`): `run_code` itself runs without an approval, and
/// each call its program makes still meets the permissions policy — the
/// read runs, the write outside the workspace is refused (`auto` asks;
/// nobody can answer).
#[test]
fn the_shipped_code_profile_runs_run_code_headless_and_inner_calls_meet_the_policy() -> anyhow::Result<()> {
    let env = env();
    std::fs::write(env.path("notes.txt"), "the needle is here\n").context("writing notes.txt")?;
    let outside = env.sessions.parent().map(|p| p.join("outside.txt")).unwrap_or_default();
    let program = format!(
        r#"
const text = await tools.read({{path: "notes.txt"}});
let denied = null;
try {{ await tools.write({{path: {}, content: "escaped"}}); }}
catch (e) {{ denied = e.code; }}
return {{found: text.includes("needle"), denied}};
"#,
        json!(outside.display().to_string())
    );
    let script: Script = serde_json::from_value(json!({
        "checks": {"api_key": KEY},
        "replies": [
            run_code_reply("call_code", &program),
            stream(json!({"text": "Read it; the write was refused."})),
        ],
    }))
    .context("parsing JSON")?;
    let mock = MockLlm::start_background(script).context("starting the mock LLM")?;
    for p in [
        plugins::FS,
        plugins::TEXT,
        plugins::SHELL,
        plugins::WEB,
        plugins::TODO,
        plugins::SKILLS,
        plugins::CONTEXT,
        plugins::COMPACTION,
        plugins::SUBAGENT,
        plugins::POLICY_RULES,
        plugins::LLM_DEEPSEEK,
        plugins::CODE,
    ] {
        let _ = wharf_tests::plugin(p);
    }
    let port = mock.addr().port();
    // The shipped row reads DEEPSEEK_API_KEY; in-process the key is in
    // this process's environment under the tests' own name.
    let host = env
        .host("code")
        .set(format!("plugin.deepseek.config.base_url={}/v1", mock.url()))
        .set(format!("plugin.deepseek.grant.hosts=[\"127.0.0.1:{port}\"]"))
        .set(format!("plugin.deepseek.config.api_key_env={KEY_ENV}"))
        .set(format!("plugin.deepseek.grant.env=[\"{KEY_ENV}\"]"));
    let run = env.run_host(host, None, "Find the needle.", None);
    assert_eq!(run.code, 0, "{}", run.dump());
    mock.assert_no_violations();
    // run_code ran, without an approval question or a deny.
    let decision = run.one("policy/decision", "call_code");
    assert_eq!(decision["data"]["verdict"], "allow", "{decision}");
    assert!(run.about("approval/asked", "call_code").is_empty(), "{}", run.dump());
    let result = run.one("tool/result", "call_code");
    assert_eq!(result["data"]["is_error"], false, "{}", run.dump());
    let content = result["data"]["content"].as_str().unwrap_or_default();
    // Outside the workspace `auto` asks; nobody can answer under `wharf run`.
    assert!(content.contains(r#"result: {"found":true,"denied":"APPROVAL_REJECTED"}"#), "{content}");
    // Its inner calls went through the policy: the read allowed, the write denied.
    let inner = inner_calls(&run, "call_code");
    let names: Vec<&str> = inner.iter().filter_map(|c| c["data"]["name"].as_str()).collect();
    assert_eq!(names, ["read", "write"], "{}", run.dump());
    let id_of = |i: usize| inner[i]["data"]["id"].as_str().unwrap_or_default().to_string();
    assert_eq!(run.one("policy/decision", &id_of(0))["data"]["verdict"], "allow");
    assert_eq!(run.one("policy/decision", &id_of(1))["data"]["verdict"], "ask", "{}", run.dump());
    assert!(!outside.exists(), "the denied write ran");
    Ok(())
}

/// Deep recursion is the program's error, with its message and position,
/// never `error: undefined` nor a trap of the component: a JavaScript
/// function calling itself, `JSON.stringify` and `JSON.parse` of a value
/// nested 200 000 deep, a program nesting 200 000 brackets. After each the
/// next program runs.
#[test]
fn deep_recursion_is_the_programs_error_with_its_position() {
    let env = env();
    let deep_stringify =
        "let a = [];\nlet c = a;\nfor (let i = 0; i < 200000; i++) { let n = []; c.push(n); c = n }\nJSON.stringify(a)";
    let caught = "let a = [];\nlet c = a;\nfor (let i = 0; i < 200000; i++) { let n = []; c.push(n); c = n }\n\
                  let r = {};\ntry { JSON.stringify(a) } catch (e) { r.stringify = e.name }\n\
                  try { JSON.parse('['.repeat(200000) + ']'.repeat(200000)) } catch (e) { r.parse = e.name }\n\
                  r.shallow = JSON.stringify({b: [1, {c: 2}], a: 'x'}, ['a', 'b', 'c'], 1);\n\
                  r.replaced = JSON.stringify({n: 1, m: [2]}, (k, v) => typeof v === 'number' ? v * 10 : v);\n\
                  r.parsed = JSON.parse('{\"x\": [[[1]]]}').x[0][0][0];\nr";
    let open_only = "[".repeat(200_000);
    let balanced = format!("{}{}", "[".repeat(120_000), "]".repeat(120_000));
    let run = run_programs(
        &env,
        "deep",
        "",
        "tools = true",
        &[
            ("function f() { return f() }\nf()", None),
            (deep_stringify, None),
            (&open_only, None),
            (&balanced, None),
            (caught, None),
            ("6 * 7", None),
        ],
    );
    assert_eq!(run.code, 0, "{}", run.dump());
    let r = code_results(&run);
    assert_eq!(r.len(), 6, "{}", run.dump());
    let text = |i: usize| r[i]["content"].as_str().unwrap_or_default().to_string();
    for (i, r) in r.iter().enumerate().take(4) {
        assert_eq!(r["is_error"], true, "{r}");
        assert!(!text(i).contains("undefined") && !text(i).contains("trap"), "program {i}: {r}");
    }
    assert_eq!(r[0]["error_code"], "SCRIPT_ERROR", "{}", r[0]);
    assert!(text(0).contains("RangeError: Maximum call stack size exceeded"), "{}", text(0));
    assert!(text(0).contains("(at line 1:"), "the position in the program: {}", text(0));
    assert_eq!(r[1]["error_code"], "SCRIPT_ERROR", "{}", r[1]);
    assert!(text(1).contains("RangeError") && text(1).contains("(at line 4:"), "{}", text(1));
    for i in [2, 3] {
        assert_eq!(r[i]["error_code"], "SYNTAX_ERROR", "{}", r[i]);
        assert!(text(i).contains("nests too deeply") && text(i).contains("(at line 1:"), "{}", text(i));
    }
    // Caught, they are exceptions like any other; shallow values are as before.
    assert_eq!(r[4]["is_error"], false, "{}", r[4]);
    let expected = json!({
        "stringify": "RangeError",
        "parse": "SyntaxError",
        "shallow": "{\n \"a\": \"x\",\n \"b\": [\n  1,\n  {\n   \"c\": 2\n  }\n ]\n}",
        "replaced": "{\"n\":10,\"m\":[20]}",
        "parsed": 1,
    });
    let got: Value = text(4)
        .split_once("result: ")
        .and_then(|(_, j)| serde_json::from_str(j).ok())
        .unwrap_or_else(|| panic!("no result in {}", text(4)));
    assert_eq!(got, expected, "{}", text(4));
    assert!(text(5).contains("result: 42"), "{}", r[5]);
}

// Cells (issue 38): programs past their yield window, the catalogue of a
// large MCP server, the shipped profile headless. Through the binary.

/// A mock reply calling `name` with `args`.
fn reply_call(id: &str, name: &str, args: Value) -> Value {
    stream(json!({"tool_calls": [{"id": id, "name": name, "arguments": args.to_string()}]}))
}

/// `wharf run` to its end: the stored session (checked against the
/// invariants) as JSON values, its exit code and stderr.
fn run_binary(env: &Env, profile: &Path, task: &str) -> (Vec<Value>, i32, String) {
    let out = run_command(env, profile, task).output().expect("running wharf run");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let streamed = parse_events(&stdout);
    let id = streamed
        .iter()
        .find(|e| e["type"] == "session/start")
        .and_then(|e| e["data"]["id"].as_str())
        .unwrap_or_else(|| panic!("no session/start in the output: {stdout}\n{stderr}"))
        .to_string();
    let events = stored(env, &id).iter().map(|e| serde_json::to_value(e).unwrap_or(Value::Null)).collect();
    (events, out.status.code().unwrap_or(-1), stderr)
}

/// Index of the first event of `ty` about call `id` (`call_id`, `id` or `cell`).
fn index_of(events: &[Value], ty: &str, id: &str) -> usize {
    events
        .iter()
        .position(|e| {
            e["type"] == ty && (e["data"]["call_id"] == id || e["data"]["id"] == id || e["data"]["cell"] == id)
        })
        .unwrap_or_else(|| panic!("no {ty} about {id} in {events:#?}"))
}

fn cell_states(events: &[Value], cell: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == "tool/cell" && e["data"]["cell"] == cell)
        .filter_map(|e| e["data"]["state"].as_str().map(str::to_string))
        .collect()
}

fn content_of(events: &[Value], call: &str) -> String {
    events[index_of(events, "tool/result", call)]["data"]["content"].as_str().unwrap_or_default().to_string()
}

/// The code row (calls yield after `yield_ms`), the MCP fixture and the
/// DeepSeek adapter against `mock`.
fn cell_profile(env: &Env, name: &str, mock: &MockLlm, yield_ms: u64) -> PathBuf {
    let grant = format!("tools = true\ntimeout_ms = 60000\nyield_ms = {yield_ms}");
    let rows = format!("{}{}{}", code_row(&grant), mcp_row(), deepseek_row(mock));
    write_profile(env, name, &profile_text("model", &rows))
}

/// A program still running after its yield window (1 s) answers with its
/// output so far and a cell id; the model reads a file meanwhile (the
/// program's inner call is still running when that read's result is
/// logged), then `run_code {"resume": …}` collects the program's result.
#[test]
fn a_program_past_its_yield_window_yields_and_resume_collects_its_result() {
    let env = env();
    std::fs::write(env.path("notes.txt"), "meanwhile\n").expect("writing notes.txt");
    let program = r#"
console.log("started");
const r = await tools.mcp__fx__slow({ms: 4000});
console.log("woke:", r);
return {done: true};
"#;
    let python = r#"
print("py started")
r = await tools.mcp__fx__slow(ms=4000)
print("py woke:", r)
{"py": True}
"#;
    let mock = mock(vec![
        calls(&[
            ("call_code", "run_code", json!({"code": program})),
            ("call_py", "run_code", json!({"language": "python", "code": python})),
        ]),
        reply_call("call_read", "read", json!({"path": "notes.txt"})),
        calls(&[
            ("call_wait", "run_code", json!({"resume": "call_code", "wait_ms": 50000})),
            ("call_py_wait", "run_code", json!({"resume": "call_py", "wait_ms": 50000})),
        ]),
        stream(json!({"text": "The program finished."})),
    ]);
    let profile = cell_profile(&env, "cells", &mock, 1000);
    let (events, code, stderr) = run_binary(&env, &profile, "Run the slow program.");
    assert_eq!(code, 0, "{stderr}\n{events:#?}");
    mock.assert_no_violations();
    assert_eq!(mock.requests().len(), 4, "{events:#?}");

    // The starting call answered at the window: the output so far and the id.
    let first = content_of(&events, "call_code");
    assert!(first.contains("cell call_code is still running"), "{first}");
    assert!(first.contains("started"), "{first}");
    assert!(first.contains(r#"{"resume": "call_code"}"#), "{first}");
    assert_eq!(cell_states(&events, "call_code"), ["running", "finished"], "{events:#?}");
    // The model's other call ran while the program's call was running.
    let slow = events
        .iter()
        .find(|e| e["type"] == "tool/call" && e["data"]["parent"] == "call_code")
        .and_then(|e| e["data"]["id"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(index_of(&events, "tool/cell", "call_code") < index_of(&events, "tool/call", "call_read"));
    assert!(index_of(&events, "tool/result", "call_read") < index_of(&events, "tool/result", &slow), "{events:#?}");
    assert_eq!(events[index_of(&events, "tool/result", "call_read")]["data"]["is_error"], false);
    // `resume` collected the result, with what the program printed.
    let collected = content_of(&events, "call_wait");
    assert!(collected.contains("cell call_code ended"), "{collected}");
    assert!(collected.contains("woke: slept 4000 ms"), "{collected}");
    assert!(collected.contains(r#"result: {"done":true}"#), "{collected}");
    // The model saw the yield notice as the call's result.
    let second = mock.requests()[1].body.clone().unwrap_or_default();
    assert!(second.to_string().contains("is still running"), "{second}");
    // The same in Python: yielded with what it printed, collected by
    // `resume`.
    let first = content_of(&events, "call_py");
    assert!(first.contains("cell call_py is still running") && first.contains("py started"), "{first}");
    assert_eq!(cell_states(&events, "call_py"), ["running", "finished"], "{events:#?}");
    let collected = content_of(&events, "call_py_wait");
    assert!(collected.contains("cell call_py ended"), "{collected}");
    assert!(collected.contains("py woke: slept 4000 ms"), "{collected}");
    assert!(collected.contains(r#"result: {"py":true}"#), "{collected}");
}

/// A mock reply calling each of `(id, tool, arguments)` in one step.
fn calls(list: &[(&str, &str, Value)]) -> Value {
    let calls: Vec<Value> =
        list.iter().map(|(id, name, args)| json!({"id": id, "name": name, "arguments": args.to_string()})).collect();
    stream(json!({"tool_calls": calls}))
}

/// `run_code {"cancel": …}` ends a yielded cell: its inner call is answered
/// (logged), the cell's end is logged as cancelled, and the run ends.
#[test]
fn cancel_ends_a_yielded_cell_and_its_inner_calls() {
    let env = env();
    let program = r#"
console.log("waiting a minute");
await tools.mcp__fx__slow({ms: 60000});
return "never";
"#;
    let python = "print(\"py waiting\")\nawait tools.mcp__fx__slow(ms=60000)\n\"never\"";
    let mock = mock(vec![
        calls(&[
            ("call_code", "run_code", json!({"code": program})),
            ("call_py", "run_code", json!({"language": "python", "code": python})),
        ]),
        calls(&[
            ("call_cancel", "run_code", json!({"cancel": "call_code"})),
            ("call_py_cancel", "run_code", json!({"cancel": "call_py"})),
        ]),
        stream(json!({"text": "Cancelled it."})),
    ]);
    let profile = cell_profile(&env, "cancel", &mock, 1000);
    let (events, code, stderr) = run_binary(&env, &profile, "Start and cancel.");
    assert_eq!(code, 0, "{stderr}\n{events:#?}");
    mock.assert_no_violations();
    assert!(content_of(&events, "call_code").contains("still running"), "{events:#?}");
    let cancelled = content_of(&events, "call_cancel");
    assert!(cancelled.contains("cell call_code cancelled"), "{cancelled}");
    assert!(!cancelled.contains("never"), "{cancelled}");
    assert_eq!(cell_states(&events, "call_code"), ["running", "cancelled"], "{events:#?}");
    // The program's inner call has its result (the stored log passed the
    // invariants: every call answered once).
    let inner: Vec<&Value> =
        events.iter().filter(|e| e["type"] == "tool/call" && e["data"]["parent"] == "call_code").collect();
    assert_eq!(inner.len(), 1, "{events:#?}");
    // The Python cell the same way.
    assert!(content_of(&events, "call_py").contains("still running"), "{events:#?}");
    let cancelled = content_of(&events, "call_py_cancel");
    assert!(cancelled.contains("cell call_py cancelled") && !cancelled.contains("never"), "{cancelled}");
    assert_eq!(cell_states(&events, "call_py"), ["running", "cancelled"], "{events:#?}");
    let inner = events.iter().filter(|e| e["type"] == "tool/call" && e["data"]["parent"] == "call_py").count();
    assert_eq!(inner, 1, "{events:#?}");
}

/// 300 MCP tools: the first model request's tool list stays within the
/// listing budget (not 300 tools), and a program finds a tool with
/// `tools.search` and calls it by name.
#[test]
fn with_three_hundred_mcp_tools_the_prompt_stays_in_budget_and_a_program_searches_the_catalogue() {
    let env = env();
    let program = r#"
const found = await tools.search("refund 007");
console.log(found.length, found[0].name, found[0].arguments);
const r = await tools.call(found[0].name, {id: "R-7", region: "eu"});
return {name: found[0].name, r};
"#;
    let python = r#"
found = await tools.search("refund 019", limit=3)
r = await tools.call(found[0]["name"], {"id": "R-8", "region": "us"})
{"name": found[0]["name"], "n": len(found), "arguments": found[0]["arguments"], "r": r}
"#;
    let mock = mock(vec![
        reply_call("call_code", "run_code", json!({"code": program})),
        reply_call("call_py", "run_code", json!({"language": "python", "code": python})),
        stream(json!({"text": "Found and called it."})),
    ]);
    let fx = crate::mcp::fixture().display().to_string();
    let mcp = format!(
        "\n[[mcp]]\nname = \"fx\"\ncommand = \"{fx}\"\nargs = [\"stdio\", \"--many\", \"300\"]\nrequired = true\n"
    );
    let rows = format!("{}{}{}", code_row("tools = true"), mcp, deepseek_row(&mock));
    let profile = write_profile(&env, "many", &profile_text("model", &rows));
    let (events, code, stderr) = run_binary(&env, &profile, "Find the refund tool.");
    assert_eq!(code, 0, "{stderr}\n{events:#?}");
    mock.assert_no_violations();

    let first = mock.requests()[0].body.clone().unwrap_or_default();
    let tools = first["tools"].as_array().cloned().unwrap_or_default();
    let bytes = first["tools"].to_string().len();
    // The default budget (24 KiB of specs) plus the wire's framing.
    assert!(bytes <= 28 << 10, "the tool list is {bytes} bytes");
    assert!(tools.len() < 100, "{} tools listed", tools.len());
    let description = run_code_description(&first);
    assert!(description.contains("tools.search"), "{description}");
    assert!(description.contains("more that are not listed here"), "{description}");

    let result = content_of(&events, "call_code");
    assert!(result.contains("mcp__fx__cat_007_refund"), "{result}");
    assert!(result.contains(r#"cat_007_refund answered {\"id\":\"R-7\",\"region\":\"eu\"}"#), "{result}");
    // The inner call went through the pipeline like any other.
    let inner: Vec<&Value> =
        events.iter().filter(|e| e["type"] == "tool/call" && e["data"]["parent"] == "call_code").collect();
    assert_eq!(inner.len(), 1, "{events:#?}");
    assert_eq!(inner[0]["data"]["name"], "mcp__fx__cat_007_refund");
    // From Python: `tools.search` gives dicts, `tools.call` calls the find.
    let result = content_of(&events, "call_py");
    assert!(result.contains(r#""name":"mcp__fx__cat_019_refund""#) && result.contains(r#""n":3"#), "{result}");
    assert!(result.contains(r#"cat_019_refund answered {\"id\":\"R-8\",\"region\":\"us\"}"#), "{result}");
    let inner: Vec<&Value> =
        events.iter().filter(|e| e["type"] == "tool/call" && e["data"]["parent"] == "call_py").collect();
    assert_eq!(inner.len(), 1, "{events:#?}");
    assert_eq!(inner[0]["data"]["name"], "mcp__fx__cat_019_refund");
}

/// `wharf run --profile code` (the shipped profile, headless): `run_code`
/// runs without a question, a program's read runs and its write outside the
/// workspace is refused by the permissions policy.
#[test]
fn the_shipped_code_profile_under_wharf_run_polices_every_inner_call() {
    let env = env();
    std::fs::write(env.path("notes.txt"), "the needle is here\n").expect("writing notes.txt");
    let outside = env.sessions.parent().map(|p| p.join("outside.txt")).unwrap_or_default();
    let program = format!(
        "const t = await tools.read({{path: \"notes.txt\"}});\nlet denied = null;\ntry {{ await tools.write({{path: {}, content: \"x\"}}); }} catch (e) {{ denied = e.code; }}\nreturn {{found: t.includes(\"needle\"), denied}};",
        json!(outside.display().to_string())
    );
    let mock = mock(vec![run_code_reply("call_code", &program), stream(json!({"text": "Done."}))]);
    for p in [
        plugins::SHELL,
        plugins::WEB,
        plugins::TODO,
        plugins::SKILLS,
        plugins::CONTEXT,
        plugins::COMPACTION,
        plugins::LLM_DEEPSEEK,
    ] {
        let _ = wharf_tests::plugin(p);
    }
    let port = mock.addr().port();
    let mut c = run_command(&env, Path::new("code"), "Find the needle.");
    c.args([
        "-c",
        &format!("plugin.deepseek.config.base_url=\"{}/v1\"", mock.url()),
        "-c",
        &format!("plugin.deepseek.grant.hosts=[\"127.0.0.1:{port}\"]"),
        "-c",
        &format!("plugin.deepseek.config.api_key_env=\"{KEY_ENV}\""),
        "-c",
        &format!("plugin.deepseek.grant.env=[\"{KEY_ENV}\"]"),
    ]);
    let out = c.output().expect("running wharf run");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    mock.assert_no_violations();
    let events = parse_events(&stdout);
    let decision = events
        .iter()
        .find(|e| e["type"] == "policy/decision" && e["data"]["call_id"] == "call_code")
        .unwrap_or_else(|| panic!("no decision for run_code: {stdout}"));
    assert_eq!(decision["data"]["verdict"], "allow", "{decision}");
    let result = content_of(&events, "call_code");
    assert!(result.contains(r#""found":true"#), "{result}");
    assert!(result.contains(r#""denied":"APPROVAL_REJECTED""#), "{result}");
    assert!(!outside.exists(), "the refused write ran");
}
