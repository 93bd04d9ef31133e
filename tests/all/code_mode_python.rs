//! Code Mode in Python (`run_code` with `language: "python"`, the Monty
//! interpreter inside the `code` component), end to end as code_mode.rs
//! runs JavaScript: a headless turn (in-process, as `wharf run`) with the
//! scripted model or the DeepSeek adapter against `wharf-mock-llm`, whose
//! program calls the `fs` tools through the host's pipeline. Every session
//! log is checked with `wharf_core::invariants::check` (policy.rs).

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::{Value, json};
use wharf_mock_llm::{MockLlm, Script};
use wharf_tests::host::TEST_KEY as KEY;
use wharf_tests::plugins;

use crate::code_mode::{code_results, code_row, deepseek_row, inner_calls};
use crate::policy::{Env, Run, env, policy, toml_str};

/// The scripted model: one `run_code` call per Python program (with its
/// `timeout_ms`), then a turn echoing the result it was sent.
fn scripted(programs: &[(&str, Option<u64>)]) -> String {
    let mut s = String::from(
        "\n[[plugin]]\nid = \"scripted\"\npath = \"${plugin_dir}/llm-scripted.wasm\"\n[plugin.config]\nmodel = \"scripted-code\"\n",
    );
    for (code, timeout) in programs {
        let mut args = json!({ "language": "python", "code": code });
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

fn run_programs(env: &Env, name: &str, extra_rows: &str, grant: &str, programs: &[(&str, Option<u64>)]) -> Run {
    let profile = env.profile(name, &format!("{extra_rows}{}{}", code_row(grant), scripted(programs)));
    env.run(&profile, Some(20), &[])
}

fn content(r: &Value) -> String {
    r["content"].as_str().unwrap_or_default().to_string()
}

/// The JSON after `result: ` in a result's content.
fn value(r: &Value) -> anyhow::Result<Value> {
    let c = content(r);
    let json = c.rsplit_once("result: ").map(|(_, j)| j).with_context(|| format!("no result in {c}"))?;
    serde_json::from_str(json).with_context(|| format!("the result is not JSON: {c}"))
}

fn twenty_files(env: &Env) -> anyhow::Result<()> {
    std::fs::create_dir_all(env.path("data")).context("creating data")?;
    for i in 0..20 {
        let body = if i % 3 == 0 { format!("file {i} has the needle\n") } else { format!("file {i}\n") };
        std::fs::write(env.path(&format!("data/f{i:02}.txt")), body).context("writing a data file")?;
    }
    Ok(())
}

const TWENTY_FILES: &str = r#"
import asyncio
listing = await tools.glob(pattern="data/*.txt")
paths = [l.strip() for l in listing.split("\n") if l.strip().endswith(".txt")]
print("found", len(paths), "files")
texts = await asyncio.gather(*[tools.read(path=p) for p in paths])
{"files": len(paths), "with_needle": len([t for t in texts if "needle" in t])}
"#;

#[test]
fn a_python_program_reads_twenty_files_concurrently_in_one_model_step() -> anyhow::Result<()> {
    let env = env();
    twenty_files(&env)?;
    let run = run_programs(&env, "py20", "", "tools = true", &[(TWENTY_FILES, None)]);
    assert_eq!(run.code, 0, "{}", run.dump());
    let results = code_results(&run);
    assert_eq!(results.len(), 1, "{}", run.dump());
    let text = content(&results[0]);
    assert_eq!(results[0]["is_error"], false, "{}", run.dump());
    assert!(text.contains("found 20 files"), "{text}");
    assert!(text.contains(r#"result: {"files":20,"with_needle":7}"#), "{text}");
    let messages = run.events.iter().filter(|e| e["type"] == "assistant/message").count();
    assert_eq!(messages, 2, "{}", run.dump());
    let parent = results[0]["call_id"].as_str().unwrap_or_default().to_string();
    let inner = inner_calls(&run, &parent);
    assert_eq!(inner.len(), 21, "{}", run.dump());
    assert_eq!(inner[0]["data"]["name"], "glob");
    assert!(inner[1..].iter().all(|c| c["data"]["name"] == "read"), "{}", run.dump());
    for c in &inner {
        let r = run.one("tool/result", c["data"]["id"].as_str().unwrap_or_default());
        assert_eq!(r["data"]["is_error"], false, "{r}");
        assert_eq!(r["data"]["plugin"], "fs", "{r}");
    }
    assert!(run.last_text().contains(r#""with_needle":7"#), "{}", run.dump());
    Ok(())
}

fn write_profile(env: &Env, name: &str, text: &str) -> anyhow::Result<PathBuf> {
    let dir = env.sessions.parent().map(Path::to_path_buf).unwrap_or_else(|| env.sessions.clone());
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).context("writing the profile")?;
    Ok(path)
}

#[test]
fn deepseek_mock_offers_python_and_gets_twenty_files_in_one_step() -> anyhow::Result<()> {
    let env = env();
    twenty_files(&env)?;
    let _ = wharf_tests::plugin(plugins::FS);
    let args = json!({"language": "python", "code": TWENTY_FILES}).to_string();
    let replies = vec![
        json!({"kind": "stream", "tool_calls": [{"id": "call_py", "name": "run_code", "arguments": args}]}),
        json!({"kind": "stream", "text": "Seven of the twenty files mention the needle."}),
    ];
    let script: Script = serde_json::from_value(json!({"checks": {"api_key": KEY}, "replies": replies}))?;
    let mock = MockLlm::start_background(script)?;
    let rows = format!("{}{}", code_row("tools = true"), deepseek_row(&mock));
    let text = format!(
        "[agent]\nadapter = \"model\"\nmax_steps = 20\n\n[[plugin]]\nid = \"fs\"\npath = \"${{plugin_dir}}/fs.wasm\"\n\
         [plugin.grant]\ndirs = [\"${{workspace}}:rw\"]\n{rows}\n"
    );
    let profile = write_profile(&env, "pymock20", &text)?;
    let run = env.run(&profile, None, &[]);
    assert_eq!(run.code, 0, "{}", run.dump());
    mock.assert_no_violations();
    let requests = mock.requests();
    assert_eq!(requests.len(), 2, "{}", run.dump());
    // The model is offered Python in the schema and told its subset.
    let first = requests[0].body.clone().unwrap_or_default();
    let tools = first["tools"].as_array().cloned().unwrap_or_default();
    let code_tool = tools.iter().find(|t| t["function"]["name"] == "run_code").cloned().unwrap_or_default();
    assert_eq!(
        code_tool["function"]["parameters"]["properties"]["language"]["enum"],
        json!(["javascript", "python"]),
        "{code_tool}"
    );
    let description = code_tool["function"]["description"].as_str().unwrap_or_default();
    assert!(description.contains("asyncio.gather") && description.contains("no third-party"), "{description}");
    // One tool message with the program's result; 21 inner calls in the log.
    let second = requests[1].body.clone().unwrap_or_default();
    let messages = second["messages"].as_array().cloned().unwrap_or_default();
    let tool_msgs: Vec<&Value> = messages.iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(tool_msgs.len(), 1, "{second}");
    let content = tool_msgs[0]["content"].as_str().unwrap_or_default();
    assert!(content.contains(r#"result: {"files":20,"with_needle":7}"#), "{content}");
    assert_eq!(inner_calls(&run, "call_py").len(), 21, "{}", run.dump());
    Ok(())
}

#[test]
fn a_denied_inner_write_is_an_exception_the_python_program_catches() {
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
denied = None
try:
    await tools.write(path="secrets/key.txt", content="hunter2")
except RuntimeError as e:
    denied = str(e).split(":")[0]
await tools.call("write", {"path": "ok.txt", "content": "fine"})
denied
"#;
    let run = run_programs(&env, "pydeny", &rules, "tools = true", &[(program, None)]);
    assert_eq!(run.code, 0, "{}", run.dump());
    let results = code_results(&run);
    assert!(content(&results[0]).contains(r#"result: "DENIED""#), "{}", run.dump());
    assert!(!env.path("secrets/key.txt").exists(), "the denied write ran");
    assert_eq!(std::fs::read_to_string(env.path("ok.txt")).unwrap_or_default(), "fine");
    let inner: Vec<&Value> = run
        .events
        .iter()
        .filter(|e| e["type"] == "tool/call" && e["data"]["parent"].is_string() && e["data"]["name"] == "write")
        .collect();
    assert_eq!(inner.len(), 2, "{}", run.dump());
    let denied_id = inner[0]["data"]["id"].as_str().unwrap_or_default();
    assert_eq!(run.one("policy/decision", denied_id)["data"]["verdict"], "deny");
    assert_eq!(run.one("tool/result", denied_id)["data"]["error_code"], "DENIED");
    let args: Value =
        serde_json::from_str(inner[1]["data"]["arguments"].as_str().unwrap_or_default()).unwrap_or_default();
    assert_eq!(args, json!({"path": "ok.txt", "content": "fine"}), "{}", inner[1]);
}

#[test]
fn python_errors_carry_line_and_column_and_the_session_goes_on() {
    let env = env();
    let run = run_programs(
        &env,
        "pyerr",
        "",
        "tools = true",
        &[
            ("x = 1\nraise ValueError('boom')", None),
            ("x = 1\ny = (x +\n", None),
            ("def f():\n    return undefined_name\n\nf()", None),
            ("async def main():\n    return {'sum': sum(range(10)), 'f': f'{6 * 7}'}\n", None),
            ("6 * 7", None),
        ],
    );
    assert_eq!(run.code, 0, "{}", run.dump());
    let r = code_results(&run);
    assert_eq!(r.len(), 5, "{}", run.dump());
    assert_eq!(r[0]["error_code"], "SCRIPT_ERROR", "{}", r[0]);
    assert!(content(&r[0]).contains("ValueError: boom (at line 2:"), "{}", r[0]);
    assert_eq!(r[1]["error_code"], "SYNTAX_ERROR", "{}", r[1]);
    assert!(content(&r[1]).contains("(at line "), "{}", r[1]);
    assert_eq!(r[2]["error_code"], "SCRIPT_ERROR", "{}", r[2]);
    assert!(content(&r[2]).contains("NameError") && content(&r[2]).contains("(at line 2:"), "{}", r[2]);
    // A `main()` the program defines and does not call is its result.
    assert_eq!(r[3]["is_error"], false, "{}", r[3]);
    assert_eq!(value(&r[3]).ok(), Some(json!({"sum": 45, "f": "42"})), "{}", r[3]);
    assert!(content(&r[4]).contains("result: 42"), "{}", r[4]);
}

#[test]
fn a_python_program_stops_at_max_calls_and_its_output_is_cut() -> anyhow::Result<()> {
    let env = env();
    let calls = r#"
n = 0
err = None
for i in range(60):
    try:
        await tools.glob(pattern="*.md")
        n += 1
    except RuntimeError as e:
        err = str(e)
        break
[n, err]
"#;
    let flood = "for i in range(20000):\n    print('x' * 100)\n'done'";
    let run = run_programs(&env, "pylimits", "", "tools = true", &[(calls, None), (flood, None)]);
    assert_eq!(run.code, 0, "{}", run.dump());
    let r = code_results(&run);
    assert_eq!(r.len(), 2, "{}", run.dump());
    let v = value(&r[0])?;
    assert_eq!(v[0], 50, "{v}");
    assert!(v[1].as_str().unwrap_or_default().contains("at most 50 tool calls"), "{v}");
    let parent = r[0]["call_id"].as_str().unwrap_or_default().to_string();
    assert_eq!(inner_calls(&run, &parent).len(), 50, "{}", run.dump());
    // 2 MB printed: the output is cut at the default 64 KiB, the result kept.
    let text = content(&r[1]);
    assert_eq!(r[1]["is_error"], false, "{}", r[1]);
    assert!(text.contains("[… stdout cut]") && text.ends_with(r#"result: "done""#), "{}", text.len());
    assert!(text.len() < 70_000, "{}", text.len());
    Ok(())
}

#[test]
fn python_loops_recursion_and_allocations_are_contained() {
    let env = env();
    // 200 000 bytes: under the 256 KiB program limit, so the parser's
    // nesting scan answers.
    let nested = format!("x = {}1{}", "(".repeat(100_000), ")".repeat(100_000));
    let run = run_programs(
        &env,
        "pycontain",
        "",
        "tools = true\nmemory_mb = 64",
        &[
            ("while True:\n    pass", Some(500)),
            ("def f(n):\n    return f(n + 1)\n\nf(0)", None),
            ("a = []\nwhile True:\n    a.append([7] * 100000)", None),
            (&nested, None),
            ("s = 'x'\nwhile True:\n    s = s + s", None),
            ("6 * 7", None),
        ],
    );
    assert_eq!(run.code, 0, "{}", run.dump());
    let r = code_results(&run);
    assert_eq!(r.len(), 6, "{}", run.dump());
    assert_eq!(r[0]["error_code"], "TIMEOUT", "{}", r[0]);
    assert_eq!(r[1]["error_code"], "SCRIPT_ERROR", "{}", r[1]);
    assert!(content(&r[1]).contains("RecursionError") && content(&r[1]).contains("(at line 2:"), "{}", r[1]);
    for i in [2, 3, 4] {
        assert_eq!(r[i]["is_error"], true, "program {i}: {}", r[i]);
    }
    assert_eq!(r[3]["error_code"], "SYNTAX_ERROR", "{}", r[3]);
    // The component is fresh for every call: the session continues.
    assert!(content(&r[5]).contains("result: 42"), "{}", r[5]);
}

#[test]
fn python_escape_attempts_reach_nothing_around_the_pipeline() -> anyhow::Result<()> {
    let env = env();
    let escapes = r#"
out = {}
def probe(name, f):
    try:
        out[name] = "reached: " + str(f())[:80]
    except BaseException as e:
        out[name] = type(e).__name__

def p_os():
    import os
    return os.listdir("/")
def p_env():
    import os
    return os.getenv("HOME")
def p_system():
    import os
    return os.system("id")
def p_sys():
    import sys
    return sys.modules
def p_subprocess():
    import subprocess
    return subprocess.run(["id"])
def p_socket():
    import socket
    return socket.socket()
def p_open():
    return open("/etc/passwd").read()
def p_pathlib():
    from pathlib import Path
    return Path("/etc/passwd").read_text()
def p_dunder_import():
    return __import__("os").listdir("/")
def p_eval():
    return eval("__import__('os').listdir('/')")
def p_exec():
    ns = {}
    exec("import os\nr = os.listdir('/')", ns)
    return ns["r"]
def p_builtins():
    return __builtins__.open("/etc/passwd")
def p_subclasses():
    return [c for c in ().__class__.__base__.__subclasses__() if "wrap" in c.__name__][0]
def p_tools_private():
    return tools.__class__.__dict__
def p_bare_call():
    return read(path="/etc/passwd")
def p_ctypes():
    import ctypes
    return ctypes.CDLL(None)
for n, f in [("os", p_os), ("env", p_env), ("system", p_system), ("sys", p_sys), ("subprocess", p_subprocess),
             ("socket", p_socket), ("open", p_open), ("pathlib", p_pathlib), ("dunder_import", p_dunder_import),
             ("eval", p_eval), ("exec", p_exec), ("builtins", p_builtins), ("subclasses", p_subclasses),
             ("tools_private", p_tools_private), ("bare_call", p_bare_call), ("ctypes", p_ctypes)]:
    probe(n, f)
out
"#;
    let around = r#"
out = {}
tries = [("write", {"path": "pwned.txt", "content": "x"}), ("run_code", {"language": "python", "code": "1"}),
         ("bash", {"command": "id"}), ("read", {"path": "/etc/passwd"}), ("read", {"path": "../../../../etc/passwd"})]
for name, args in tries:
    key = name + ":" + args.get("path", "")
    try:
        r = await tools.call(name, args)
        out[key] = "ran: " + r[:60]
    except RuntimeError as e:
        out[key] = str(e).split(":")[0]
try:
    await tools.run_code(code="1")
    out["direct"] = "ran"
except RuntimeError as e:
    out["direct"] = str(e).split(":")[0]
out
"#;
    let run = run_programs(
        &env,
        "pyescape",
        "",
        r#"tools = ["read", "glob"]"#,
        &[(escapes, None), (around, None), ("6 * 7", None)],
    );
    assert_eq!(run.code, 0, "{}", run.dump());
    let r = code_results(&run);
    assert_eq!(r.len(), 3, "{}", run.dump());
    let e = value(&r[0])?;
    let probes = e.as_object().cloned().unwrap_or_default();
    assert_eq!(probes.len(), 16, "{e}");
    for (name, v) in probes {
        let v = v.as_str().unwrap_or_default();
        assert!(!v.is_empty() && !v.starts_with("reached"), "`{name}` reached something: {e}");
    }
    // None of them was an inner call: the program's only door is `tools`.
    let parent = r[0]["call_id"].as_str().unwrap_or_default().to_string();
    assert!(inner_calls(&run, &parent).is_empty(), "{}", run.dump());

    let a = value(&r[1])?;
    for key in ["write:pwned.txt", "run_code:", "bash:", "read:/etc/passwd", "read:../../../../etc/passwd", "direct"] {
        let v = a[key].as_str().unwrap_or_default();
        assert!(!v.is_empty() && !v.starts_with("ran"), "{key}: {a}");
    }
    assert!(!env.path("pwned.txt").exists());
    let parent = r[1]["call_id"].as_str().unwrap_or_default().to_string();
    let inner = inner_calls(&run, &parent);
    assert_eq!(inner.len(), 6, "{}", run.dump());
    for c in &inner {
        let res = run.one("tool/result", c["data"]["id"].as_str().unwrap_or_default());
        assert_eq!(res["data"]["is_error"], true, "{res}");
    }
    assert!(content(&r[2]).contains("result: 42"), "{}", r[2]);
    Ok(())
}
