//! Code Mode end to end: `wharf run` with the scripted model calling
//! `run_code` (the real `code` component), whose program calls the `fs`
//! tools through the host's pipeline. Profile and run helpers from policy.rs
//! (every session log is checked with `wharf_core::invariants::check`).

use serde_json::{Value, json};

use crate::policy::{Env, env, policy, toml_str};

/// The `code` row, with `grant` (e.g. `tools = true`).
fn code_row(grant: &str) -> String {
    let _ = wharf_tests::plugin("code");
    policy("code", "code", "max_calls = 50", grant)
}

/// The scripted model: one `run_code` call with `code` (and `timeout_ms`),
/// then a turn echoing the result it was sent.
fn scripted(programs: &[(&str, Option<u64>)]) -> String {
    let mut s = String::from(
        "\n[[plugin]]\nid = \"scripted\"\npath = \"${plugin_dir}/llm-scripted.wasm\"\n[plugin.config]\nmodel = \"scripted-code\"\n",
    );
    for (code, timeout) in programs {
        let mut args = json!({ "language": "javascript", "code": code });
        if let Some(t) = timeout {
            args["timeout_ms"] = json!(t);
        }
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

/// The `run_code` calls' results, in order.
fn code_results(run: &crate::policy::Run) -> Vec<Value> {
    let ids: Vec<String> = run
        .events
        .iter()
        .filter(|e| e["type"] == "tool/call" && e["data"]["name"] == "run_code")
        .map(|e| e["data"]["id"].as_str().unwrap_or_default().to_string())
        .collect();
    ids.iter().map(|id| run.one("tool/result", id)["data"].clone()).collect()
}

/// The inner `tool/call`s of call `parent`.
fn inner_calls<'a>(run: &'a crate::policy::Run, parent: &str) -> Vec<&'a Value> {
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
    env.run(&profile, &["--max-steps", "20"])
}

#[test]
fn a_program_reads_twenty_files_in_parallel_in_one_model_step() {
    let env = env();
    std::fs::create_dir_all(env.path("data")).unwrap_or_else(|e| panic!("{e}"));
    for i in 0..20 {
        let body = if i % 3 == 0 { format!("file {i} has the needle\n") } else { format!("file {i}\n") };
        std::fs::write(env.path(&format!("data/f{i:02}.txt")), body).unwrap_or_else(|e| panic!("{e}"));
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
