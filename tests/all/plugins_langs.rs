//! Plugins in Python and JavaScript, end to end through the `wharf` binary:
//!
//! - the SDK examples (`sdk/python/examples/{csv_query,path_guard}`,
//!   `sdk/js/examples/json_diff`) are built from source with `wharf plugin
//!   build`, called with `wharf plugin call`, and used by an agent session
//!   (`profiles/polyglot.toml`, scripted model) in which the Python policy
//!   denies a write;
//! - `wharf plugin new` → `wharf plugin build` → `wharf plugin call` works for
//!   Rust, Python and JavaScript from an empty directory.
//!
//! The Python and JavaScript toolchains (componentize-py; componentize-js and
//! esbuild in `sdk/js/node_modules`, see `sdk/install-toolchains.sh`) must be
//! installed. Without them these tests skip with a message, unless `CI` is
//! set: in CI they fail.
//!
//! Figures (size, build time, cold compile, cached load) are printed to
//! stderr; `cargo test --test all plugins_langs -- --nocapture` shows them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::Context;
use serde_json::{Value, json};
use wharf_tests::plugins;

fn root() -> PathBuf {
    wharf_tests::root()
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("creating a temp dir")
}

fn on_path(name: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|d| d.join(name).is_file())
}

/// What is missing to build Python and JavaScript plugins.
fn missing_toolchains() -> Vec<String> {
    let mut missing = Vec::new();
    if std::env::var_os("WHARF_COMPONENTIZE_PY").is_none() && !on_path("componentize-py") {
        missing.push("componentize-py (pip install componentize-py==0.25.1)".to_string());
    }
    let bin = root().join("sdk/js/node_modules/.bin");
    for tool in ["componentize-js", "esbuild"] {
        if !bin.join(tool).is_file() && !on_path(tool) {
            missing.push(format!("{tool} (npm ci in sdk/js)"));
        }
    }
    for tool in ["node", "npm"] {
        if !on_path(tool) {
            missing.push(tool.to_string());
        }
    }
    missing
}

/// True when the tests can run; false (reported by `wharf_tests::skip`)
/// when they must skip. Panics in CI when a toolchain is missing.
fn toolchains_ready(test: &str) -> bool {
    let missing = missing_toolchains();
    if missing.is_empty() {
        return true;
    }
    let msg = format!(
        "the Python/JavaScript plugin toolchains are missing: {}; run sdk/install-toolchains.sh",
        missing.join(", ")
    );
    wharf_tests::skip(test, &msg);
    false
}

fn wharf(home: &Path) -> Command {
    wharf_tests::wharf(home)
}

fn run(cmd: &mut Command) -> anyhow::Result<Output> {
    cmd.output().with_context(|| format!("spawning {cmd:?}"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `wharf plugin build DIR -o OUT --json`; the JSON report.
fn build(home: &Path, dir: &Path, out: Option<&Path>, extra_env: &[(&str, &Path)]) -> anyhow::Result<Value> {
    let mut cmd = wharf(home);
    cmd.args(["plugin", "build"]).arg(dir).arg("--json");
    if let Some(out) = out {
        cmd.arg("-o").arg(out);
    }
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    let o = run(&mut cmd)?;
    assert!(
        o.status.success(),
        "wharf plugin build {} failed:\n{}\n{}",
        dir.display(),
        text(&o.stdout),
        text(&o.stderr)
    );
    let stdout = text(&o.stdout);
    serde_json::from_str(stdout.trim()).with_context(|| format!("the build report is not JSON: {stdout}"))
}

/// `wharf plugin call FILE TOOL ARGS [flags]`: (exit code, result JSON).
fn call(home: &Path, file: &Path, tool: &str, args: &Value, flags: &[&str]) -> anyhow::Result<(i32, Value)> {
    let o = run(wharf(home).args(["plugin", "call"]).arg(file).arg(tool).arg(args.to_string()).args(flags))?;
    let stdout = text(&o.stdout);
    let v = serde_json::from_str(stdout.trim())
        .with_context(|| format!("the call output is not JSON: {stdout}\n{}", text(&o.stderr)))?;
    Ok((o.status.code().unwrap_or(-1), v))
}

fn inspect(home: &Path, file: &Path) -> anyhow::Result<Value> {
    let o = run(wharf(home).args(["plugin", "inspect"]).arg(file).arg("--json"))?;
    assert!(o.status.success(), "inspect {}: {}", file.display(), text(&o.stderr));
    serde_json::from_str(text(&o.stdout).trim()).context("the inspect report is not JSON")
}

fn figures(label: &str, report: &Value, cached: &Value) {
    eprintln!(
        "FIGURES {label}: size {:.1} MiB ({} bytes), build {:.1} s, first compile {} ms ({}), cached load {} ms ({})",
        report["size"].as_f64().unwrap_or(0.0) / 1048576.0,
        report["size"],
        report["build_ms"].as_f64().unwrap_or(0.0) / 1000.0,
        report["compile"]["ms"],
        report["compile"]["source"].as_str().unwrap_or("?"),
        cached["compile"]["ms"],
        cached["compile"]["source"].as_str().unwrap_or("?"),
    );
}

/// The SDK examples: built from source, called directly, and used by an agent
/// session with the scripted model, where the Python policy denies a write.
#[test]
fn sdk_examples_build_call_and_run_in_a_session() -> anyhow::Result<()> {
    if !toolchains_ready("sdk_examples_build_call_and_run_in_a_session") {
        return Ok(());
    }
    let home = tmp();
    let home = home.path();
    // A plugin directory of our own: the examples next to the Rust fs tools
    // and the scripted model, so the shared target/plugins is left alone.
    let plugins = tmp();
    let pdir = plugins.path();
    for p in [plugins::FS, plugins::LLM_SCRIPTED] {
        std::fs::copy(wharf_tests::plugin(p), pdir.join(format!("{p}.wasm")))
            .with_context(|| format!("copying the {p} component"))?;
    }
    let examples = [
        ("csv_query", root().join("sdk/python/examples/csv_query"), "tool"),
        ("path_guard", root().join("sdk/python/examples/path_guard"), "policy"),
        ("json_diff", root().join("sdk/js/examples/json_diff"), "tool"),
    ];
    for (name, dir, kind) in &examples {
        let out = pdir.join(format!("{name}.wasm"));
        let report = build(home, dir, Some(&out), &[])?;
        assert_eq!(report["kinds"], json!([kind]), "{report}");
        assert_eq!(report["wit"], "wharf:plugin@0.1.0");
        assert_eq!(report["name"], *name);
        assert!(out.is_file());
        let cached = inspect(home, &out)?;
        assert_eq!(cached["compile"]["source"], "disk", "a second load maps the cached artifact: {cached}");
        figures(name, &report, &cached);
    }
    let csv = pdir.join("csv_query.wasm");
    let jd = pdir.join("json_diff.wasm");
    let guard = pdir.join("path_guard.wasm");
    assert_eq!(inspect(home, &csv)?["requests"]["filesystem"], "read-only");
    assert_eq!(inspect(home, &guard)?["kinds"], json!(["policy"]));

    // wharf plugin call: real work, grants and clean errors.
    let ws = tmp();
    let wsp = ws.path();
    std::fs::write(wsp.join("sales.csv"), "region,product,amount\nEU,apple,10\nUS,pear,3\nEU,pear,5\n")
        .context("writing sales.csv")?;
    let ro = format!("{}:ro", wsp.display());
    let ws_flag = wsp.display().to_string();
    let q = json!({"path": "sales.csv", "group_by": ["region"], "aggregate": [{"fn": "sum", "column": "amount"}],
                   "order_by": "sum(amount)", "descending": true});
    let (code, v) = call(home, &csv, "csv_query", &q, &["--allow-dir", &ro, "--workspace", &ws_flag])?;
    assert_eq!(code, 0, "{v}");
    let content = v["content"].as_str().unwrap_or("");
    assert!(content.contains("| EU | 15 |") && content.contains("| US | 3 |"), "{content}");
    assert!(content.find("| EU |") < content.find("| US |"), "descending order: {content}");
    // Without the grant the file is invisible inside the sandbox.
    let (code, v) = call(home, &csv, "csv_query", &q, &["--workspace", &ws_flag])?;
    assert_eq!(code, 1, "{v}");
    assert!(matches!(v["error_code"].as_str(), Some("NOT_FOUND" | "PERMISSION_DENIED")), "{v}");
    // A bad column is the plugin's own clean error, not a trap.
    let bad = json!({"path": "sales.csv", "where": [{"column": "nope", "op": "==", "value": "x"}]});
    let (code, v) = call(home, &csv, "csv_query", &bad, &["--allow-dir", &ro, "--workspace", &ws_flag])?;
    assert_eq!((code, v["error_code"].as_str()), (1, Some("INVALID_ARGUMENT")), "{v}");
    assert!(v["content"].as_str().unwrap_or("").contains("unknown column `nope`"), "{v}");

    let d = json!({"before": {"a": [1, 2], "b": "x"}, "after": {"a": [1, 3], "c": null}});
    let (code, v) = call(home, &jd, "json_diff", &d, &[])?;
    assert_eq!(code, 0, "{v}");
    let content = v["content"].as_str().unwrap_or("");
    assert!(content.starts_with("3 change(s)"), "{content}");
    assert!(content.contains("~ /a/1: 2 → 3") && content.contains("- /b: \"x\"") && content.contains("+ /c: null"));
    let (code, v) = call(home, &jd, "json_diff", &json!({"before": "{", "after": 1, "parse_strings": true}), &[])?;
    assert_eq!((code, v["error_code"].as_str()), (1, Some("INVALID_ARGUMENT")), "{v}");

    // An agent session: scripted model + Rust fs + Python tool + JS tool +
    // Python policy.
    let o = run(wharf(home)
        .env("WHARF_PLUGIN_DIR", pdir)
        .args(["run", "Summarize the sales and the config change.", "--output", "jsonl", "--no-watch"])
        .arg("--profile")
        .arg(root().join("profiles/polyglot.toml"))
        .arg("--workspace")
        .arg(wsp)
        .arg("-c")
        .arg(format!("engine.cache_dir={}", wharf_tests::target_dir().join("test-cache").display())))?;
    let stdout = text(&o.stdout);
    assert!(o.status.success(), "wharf run failed:\n{stdout}\n{}", text(&o.stderr));
    let events: Vec<Value> = stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    fn of_type<'a>(events: &'a [Value], t: &'a str) -> impl Iterator<Item = &'a Value> {
        events.iter().filter(move |e| e["type"] == t).map(|e| &e["data"])
    }
    let of_type = |t: &'static str| of_type(&events, t);
    let result = |tool: &str| {
        of_type("tool/result")
            .filter(|d| d["name"] == tool)
            .map(|d| (d["is_error"].as_bool().unwrap_or(true), d["content"].as_str().unwrap_or("").to_string()))
            .collect::<Vec<_>>()
    };
    let csv_results = result("csv_query");
    assert_eq!(csv_results.len(), 1, "{stdout}");
    assert!(!csv_results[0].0 && csv_results[0].1.contains("| EU | 15 | 2 |"), "{csv_results:?}");
    let diff_results = result("json_diff");
    assert!(!diff_results[0].0 && diff_results[0].1.contains("~ /version: \"0.1.0\" → \"0.2.0\""), "{diff_results:?}");
    assert!(diff_results[0].1.contains("+ /features/-: \"skills\""), "{diff_results:?}");
    // The Python policy denied the write under secrets/ and allowed notes/.
    let denied: Vec<&Value> = of_type("policy/decision").filter(|d| d["verdict"] == "deny").collect();
    assert_eq!(denied.len(), 1, "{stdout}");
    assert_eq!(denied[0]["tool"], "write");
    assert!(denied[0]["reason"].as_str().unwrap_or("").contains("secrets/**"), "{}", denied[0]);
    assert_eq!(denied[0]["votes"][0]["plugin"], "path_guard");
    let writes = result("write");
    assert_eq!(writes.len(), 2, "{writes:?}");
    assert!(writes[0].0, "the denied write is an error result: {writes:?}");
    assert!(!writes[1].0, "{writes:?}");
    assert!(!wsp.join("secrets/token.txt").exists());
    let summary = std::fs::read_to_string(wsp.join("notes/summary.md")).unwrap_or_default();
    assert!(summary.contains("EU leads"), "{summary}");
    let end = of_type("turn/end").next().cloned().unwrap_or_default();
    assert!(end.to_string().contains("completed"), "{end}");
    Ok(())
}

/// `wharf plugin new` → `build` → `call` for each language, from an empty
/// directory, plus the generated unit tests for Python and JavaScript.
#[test]
fn plugin_new_build_call_in_each_language() -> anyhow::Result<()> {
    if !toolchains_ready("plugin_new_build_call_in_each_language") {
        return Ok(());
    }
    let home = tmp();
    let home = home.path();
    // Rust dependencies compile once per checkout, not once per test run.
    let cargo_target = wharf_tests::target_dir().join("plugin-new");
    for lang in ["python", "js", "rust"] {
        let work = tmp();
        let work = work.path();
        let name = format!("hello-{lang}");
        let ident = name.replace('-', "_");
        let o = run(wharf(home).current_dir(work).args(["plugin", "new", &name, "--lang", lang, "--kind", "tool"]))?;
        assert!(o.status.success(), "plugin new {lang}: {}", text(&o.stderr));
        let dir = work.join(&name);
        assert!(dir.is_dir(), "{}", text(&o.stdout));
        let report = build(home, &dir, None, &[("CARGO_TARGET_DIR", &cargo_target)])?;
        assert_eq!(report["kinds"], json!(["tool"]), "{report}");
        assert_eq!(report["tools"][0]["name"], ident.as_str());
        let wasm = PathBuf::from(report["path"].as_str().unwrap_or(""));
        let (code, v) = call(home, &wasm, &ident, &json!({"name": "Wharf", "times": 2}), &[])?;
        assert_eq!(code, 0, "{lang}: {v}");
        assert_eq!(v["content"], "Hello, Wharf!\nHello, Wharf!", "{lang}");
        let (code, v) = call(home, &wasm, &ident, &json!({}), &[])?;
        assert_eq!((code, v["is_error"].as_bool()), (1, Some(true)), "{lang}: {v}");
        let cached = inspect(home, &wasm)?;
        figures(&format!("plugin new --lang {lang}"), &report, &cached);

        // The scaffold's own unit tests (Rust: `cargo test`, not run here to
        // spare a native build of the SDK's dependencies).
        let test = match lang {
            "python" => Some(Command::new("python3").arg("test_app.py").current_dir(&dir).output()),
            "js" => Some(Command::new("node").arg("--test").current_dir(&dir).output()),
            _ => None,
        };
        if let Some(out) = test {
            let out = out.with_context(|| format!("running the {lang} unit tests"))?;
            assert!(out.status.success(), "{lang} unit tests:\n{}\n{}", text(&out.stdout), text(&out.stderr));
        }
    }
    Ok(())
}

/// The SDKs' own unit tests and the examples' tests, in plain CPython and
/// Node (no component build).
#[test]
fn sdk_unit_tests_pass_natively() -> anyhow::Result<()> {
    if !toolchains_ready("sdk_unit_tests_pass_natively") {
        return Ok(());
    }
    let py = [
        root().join("sdk/python/tests/test_wharf_sdk.py"),
        root().join("sdk/python/examples/csv_query/test_app.py"),
        root().join("sdk/python/examples/path_guard/test_app.py"),
    ];
    for t in &py {
        let o = run(Command::new("python3").arg(t).current_dir(t.parent().unwrap_or(Path::new("."))))?;
        assert!(o.status.success(), "{}:\n{}\n{}", t.display(), text(&o.stdout), text(&o.stderr));
    }
    let o = run(Command::new("node").arg("--test").arg("test/").current_dir(root().join("sdk/js")))?;
    assert!(o.status.success(), "sdk/js tests:\n{}\n{}", text(&o.stdout), text(&o.stderr));
    Ok(())
}

/// A copy of `wit/since_v0.1.0/` with the package version replaced.
fn wit_at_version(dir: &Path, version: &str) -> anyhow::Result<PathBuf> {
    let out = dir.join(format!("wit-{version}"));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    for entry in std::fs::read_dir(root().join("wit/since_v0.1.0")).context("listing wit/since_v0.1.0/")? {
        let path = entry.context("listing wit/since_v0.1.0/")?.path();
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let name = path.file_name().unwrap_or_default();
        std::fs::write(out.join(name), text.replace("@0.1.0", &format!("@{version}")))
            .with_context(|| format!("writing the copy of {}", path.display()))?;
    }
    Ok(out)
}

/// The compatibility promise: a component built against another 0.1.y of
/// the WIT package loads and runs in this host; one built against 0.2.0 is
/// refused with a clear message. (The Python SDK is version-agnostic, so the
/// same project builds against any copy of the package: `WHARF_WIT_DIR`.)
#[test]
fn components_of_other_0_1_versions_load_and_0_2_is_refused() -> anyhow::Result<()> {
    if !toolchains_ready("components_of_other_0_1_versions_load_and_0_2_is_refused") {
        return Ok(());
    }
    let home = tmp();
    let home = home.path();
    let work = tmp();
    let work = work.path();
    let o = run(wharf(home).current_dir(work).args(["plugin", "new", "versioned", "--lang", "python"]))?;
    assert!(o.status.success(), "{}", text(&o.stderr));
    let dir = work.join("versioned");

    let wit = wit_at_version(work, "0.1.99")?;
    let out = work.join("v0199.wasm");
    let report = build(home, &dir, Some(&out), &[("WHARF_WIT_DIR", &wit)])?;
    assert_eq!(report["wit"], "wharf:plugin@0.1.99", "{report}");
    let (code, v) = call(home, &out, "versioned", &json!({"name": "0.1.99"}), &[])?;
    assert_eq!((code, v["content"].as_str()), (0, Some("Hello, 0.1.99!")), "{v}");

    let wit = wit_at_version(work, "0.2.0")?;
    let out = work.join("v020.wasm");
    let o = run(wharf(home).env("WHARF_WIT_DIR", &wit).args(["plugin", "build"]).arg(&dir).arg("-o").arg(&out))?;
    assert!(!o.status.success(), "a 0.2.0 component must not pass the check");
    let err = text(&o.stderr);
    assert!(err.contains("built against wharf:plugin@0.2.0") && err.contains("compatible: 0.1.x"), "{err}");
    Ok(())
}

/// Issue 40: the Python and JavaScript SDKs' question helpers
/// (`wharf.questions.ask`, `questions.ask` of `wharf-sdk`) in tools built
/// with `wharf plugin build` from projects that say `questions = true`
/// (world `tool-questions-plugin`) reach the user: under `wharf serve`
/// each question is pending on its call (`GET …/questions`, named by the
/// row), the answer given over HTTP reaches the tool, and its result holds
/// it.
#[test]
fn python_and_js_question_helpers_reach_the_user_over_http() -> anyhow::Result<()> {
    if !toolchains_ready("python_and_js_question_helpers_reach_the_user_over_http") {
        return Ok(());
    }
    let home = tmp();
    let home = home.path();
    let projects = tmp();
    let py = projects.path().join("py_ask");
    std::fs::create_dir_all(&py).context("creating the Python project")?;
    std::fs::write(
        py.join("pyproject.toml"),
        "[project]\nname = \"py-ask\"\nversion = \"0.1.0\"\n\n[tool.wharf]\nkind = \"tool\"\nmodule = \"app\"\n\
         questions = true\n",
    )
    .context("writing pyproject.toml")?;
    std::fs::write(
        py.join("app.py"),
        r#"from dataclasses import dataclass

import wharf_sdk as wharf

wharf.plugin(name="py-ask", version="0.1.0", description="Asks the user for a name.")


@dataclass
class AskArgs:
    who: str = wharf.arg("Who asks.", default="python")


@wharf.tool(mode="exclusive")
def py_ask(args: AskArgs) -> str:
    """Asks the session's user for a name."""
    try:
        a = wharf.questions.ask(
            f"Which name, {args.who}?",
            {"type": "object", "properties": {"name": {"type": "string", "title": "Name"}}, "required": ["name"]},
        )
    except wharf.QuestionError as e:
        return f"python could not ask: {e.kind}"
    return f"python got {a.values['name']}" if a.accepted else f"python: {a.action}"


from wharf_sdk import Plugin, Tool  # noqa: E402,F401
"#,
    )
    .context("writing app.py")?;
    let js = projects.path().join("js_ask");
    std::fs::create_dir_all(&js).context("creating the JS project")?;
    let sdk_js = root().join("sdk/js");
    std::fs::write(
        js.join("package.json"),
        json!({
            "name": "js-ask", "version": "0.1.0", "type": "module", "private": true, "main": "app.js",
            "dependencies": {"wharf-sdk": format!("file:{}", sdk_js.display())},
            "wharf": {"kind": "tool", "entry": "app.js", "questions": true},
        })
        .to_string(),
    )
    .context("writing package.json")?;
    std::fs::write(
        js.join("app.js"),
        r#"import { definePlugin, defineTool, questions, QuestionError } from "wharf-sdk";

definePlugin({ name: "js-ask", version: "0.1.0", description: "Asks the user for a colour." });

defineTool({
  name: "js_ask",
  description: "Asks the session's user for a colour.",
  mode: "exclusive",
  args: {},
  run() {
    let a;
    try {
      a = questions.ask("Which colour, JavaScript?", {
        type: "object",
        properties: { colour: { type: "string", enum: ["red", "blue"] } },
        required: ["colour"],
      });
    } catch (e) {
      if (e instanceof QuestionError) return `js could not ask: ${e.kind}`;
      throw e;
    }
    return a.action === "accept" ? `js got ${a.values.colour}` : `js: ${a.action}`;
  },
});

export { plugin, tool } from "wharf-sdk";
"#,
    )
    .context("writing app.js")?;
    let out = projects.path().join("out");
    std::fs::create_dir_all(&out).context("creating the output directory")?;
    for (dir, name) in [(&py, "py_ask"), (&js, "js_ask")] {
        let file = out.join(format!("{name}.wasm"));
        let report = build(home, dir, Some(&file), &[])?;
        assert_eq!(
            (report["kinds"].clone(), report["world"].as_str()),
            (json!(["tool"]), Some("tool-questions-plugin"))
        );
    }

    let _ = wharf_tests::plugin(plugins::LLM_SCRIPTED);
    let profile = format!(
        r#"
[agent]
adapter = "scripted"
max_steps = 5

[[plugin]]
id = "py"
path = "{out}/py_ask.wasm"
[plugin.grant]
questions = true
memory_mb = 256
timeout_ms = 120000

[[plugin]]
id = "js"
path = "{out}/js_ask.wasm"
[plugin.grant]
questions = true
timeout_ms = 120000

[[plugin]]
id = "scripted"
path = "${{plugin_dir}}/llm-scripted.wasm"
[[plugin.config.turns]]
tool_calls = [{{ name = "py_ask", arguments = {{}} }}]
[[plugin.config.turns]]
tool_calls = [{{ name = "js_ask", arguments = {{}} }}]
[[plugin.config.turns]]
text = "Done."
"#,
        out = out.display()
    );
    let w = super::web::start_command("serve", &profile, &[], &[]);
    let (code, r) = w.call("POST", "/api/sessions", Some(json!({"text": "ask away"})));
    assert_eq!(code, 200, "{r}");
    let id = r["id"].as_str().unwrap_or_default().to_string();
    let pending = |source: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            let (code, r) = w.call("GET", &format!("/api/sessions/{id}/questions"), None);
            assert_eq!(code, 200, "{r}");
            if let Some(q) = r["pending"].as_array().and_then(|p| p.iter().find(|q| q["source"] == source)) {
                return q.clone();
            }
            assert!(std::time::Instant::now() < deadline, "no question from {source} in session {id}");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    };
    let q = pending("py");
    assert_eq!(q["message"], "Which name, python?", "{q}");
    let path = format!("/api/sessions/{id}/questions/{}", q["call_id"].as_str().unwrap_or_default());
    let (code, r) = w.call("POST", &path, Some(json!({"action": "accept", "content": {"name": "Ada"}})));
    assert_eq!(code, 200, "{r}");
    let q = pending("js");
    assert_eq!(q["message"], "Which colour, JavaScript?", "{q}");
    assert_eq!(q["schema"]["properties"]["colour"]["enum"], json!(["red", "blue"]), "{q}");
    let path = format!("/api/sessions/{id}/questions/{}", q["call_id"].as_str().unwrap_or_default());
    let (code, r) = w.call("POST", &path, Some(json!({"action": "accept", "content": {"colour": "blue"}})));
    assert_eq!(code, 200, "{r}");
    let mut sse = w.events(&format!("/api/sessions/{id}/events"), &[]);
    let mut results = Vec::new();
    while let Some(e) = sse.next() {
        let v = e.json();
        if v["type"] == "tool/result" {
            results.push(v["data"]["content"].as_str().unwrap_or_default().to_string());
        }
        if v["type"] == "turn/end" {
            break;
        }
    }
    assert_eq!(results, ["python got Ada", "js got blue"]);
    Ok(())
}
