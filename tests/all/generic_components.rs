//! Generic components (issue 16): a component of plain WIT functions (no
//! `wharf:plugin` export) as tools, end to end with the Rust fixture
//! (`tests/plugins/generic-rust`, the shared `tests/generic/wit/types.wit`):
//! every function through `wharf plugin call`, the derived tools in `wharf
//! plugin inspect`, one call in a headless turn (in-process, as `wharf
//! run`) with the scripted model,
//! `wharf mcp serve` tools/list + tools/call, an `err` result as a tool
//! error, a bad argument named, a resource-taking component refused, and a
//! hot reload of a generic component.
//!
//! [`CASES`] and [`check_every_function`] are shared with `generic_langs`
//! (the same WIT in other languages behaves identically).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};
use wharf_tests::host::TestHost;
use wharf_tests::plugins;

/// What a call should give: the tool's output (JSON) or a tool error whose
/// message contains the text.
pub(crate) enum Expect {
    /// `is_error` false; the content is this JSON.
    Ok(Value),
    /// `is_error` true, code `TOOL_ERROR`, message containing this.
    Err(&'static str),
}

/// (tool, arguments, expected) for every function of `types.wit`, edge
/// cases included (wrapping, 64-bit beyond 2^53, the char gaps).
pub(crate) fn cases() -> Vec<(&'static str, Value, Expect)> {
    use Expect::{Err, Ok};
    vec![
        ("greet", json!({"name": "Wharf"}), Ok(json!("Hello, Wharf!"))),
        ("kinds_add", json!({"a": 2, "b": 3}), Ok(json!(5))),
        ("kinds_add", json!({"a": 2147483647, "b": 1}), Ok(json!(-2147483648))),
        (
            "kinds_ints",
            json!({"a": 255, "b": -128, "c": 65535, "d": -32768, "e": 4294967295u32, "f": -2147483648,
                   "g": "18446744073709551615", "h": "-9223372036854775808"}),
            Ok(json!([
                255,
                -128,
                65535,
                -32768,
                4294967295u32,
                -2147483648,
                "18446744073709551615",
                "-9223372036854775808"
            ])),
        ),
        (
            "kinds_ints",
            json!({"a": 0, "b": 0, "c": 0, "d": 0, "e": 0, "f": 0, "g": 9007199254740991u64, "h": "-5"}),
            Ok(json!([0, 0, 0, 0, 0, 0, 9007199254740991u64, -5])),
        ),
        ("kinds_floats", json!({"a": 1.5, "b": 2.25}), Ok(json!(3.75))),
        ("kinds_next_char", json!({"c": "a"}), Ok(json!("b"))),
        ("kinds_next_char", json!({"c": "\u{D7FF}"}), Ok(json!("\u{E000}"))),
        ("kinds_next_char", json!({"c": "\u{10FFFF}"}), Ok(json!("\u{0}"))),
        ("kinds_shout", json!({"s": "hi there"}), Ok(json!("HI THERE!"))),
        ("kinds_reverse_bytes", json!({"data": "AQID"}), Ok(json!("AwIB"))),
        ("kinds_reverse_bytes", json!({"data": ""}), Ok(json!(""))),
        ("kinds_sum", json!({"xs": [1, 2, 3]}), Ok(json!(6))),
        ("kinds_sum", json!({"xs": ["9223372036854775807", 1]}), Ok(json!("-9223372036854775808"))),
        (
            "kinds_mid",
            json!({"a": {"x": 0, "y": 0}, "b": {"x": 2, "y": 4, "label": "b"}}),
            Ok(json!({"x": 1.0, "y": 2.0, "label": "b"})),
        ),
        (
            "kinds_mid",
            json!({"a": {"x": 1, "y": 1, "label": "a"}, "b": {"x": 3, "y": 3, "label": "b"}}),
            Ok(json!({"x": 2.0, "y": 2.0, "label": "a"})),
        ),
        (
            "kinds_mid",
            json!({"a": {"x": 1, "y": 1}, "b": {"x": 3, "y": 3}}),
            Ok(json!({"x": 2.0, "y": 2.0, "label": null})),
        ),
        ("kinds_swap", json!({"t": ["x", 7]}), Ok(json!([7, "x"]))),
        ("kinds_area", json!({"s": {"circle": 2.0}}), Ok(json!(std::f64::consts::PI * 4.0))),
        ("kinds_area", json!({"s": {"rect": {"x": 2, "y": 3}}}), Ok(json!(6.0))),
        ("kinds_area", json!({"s": "empty"}), Ok(json!(0.0))),
        ("kinds_rotate", json!({"c": "red"}), Ok(json!("green"))),
        ("kinds_rotate", json!({"c": "blue"}), Ok(json!("red"))),
        ("kinds_toggle", json!({"p": ["read"]}), Ok(json!(["write", "exec"]))),
        ("kinds_toggle", json!({"p": []}), Ok(json!(["read", "write", "exec"]))),
        ("kinds_double", json!({"x": 21}), Ok(json!(42))),
        ("kinds_double", json!({"x": 4294967295u32}), Ok(json!(4294967294u32))),
        ("kinds_double", json!({}), Ok(json!(null))),
        ("kinds_double", json!({"x": null}), Ok(json!(null))),
        ("kinds_divide", json!({"a": 7, "b": 2}), Ok(json!(3))),
        ("kinds_divide", json!({"a": -7, "b": 2}), Ok(json!(-3))),
        ("kinds_divide", json!({"a": 1, "b": 0}), Err("division by zero")),
        ("kinds_divide", json!({"a": -2147483648, "b": -1}), Err("overflow")),
    ]
}

/// The tools a component implementing `types.wit` offers, sorted.
pub(crate) const TOOLS: [&str; 15] = [
    "greet",
    "kinds_add",
    "kinds_area",
    "kinds_divide",
    "kinds_double",
    "kinds_floats",
    "kinds_ints",
    "kinds_mid",
    "kinds_next_char",
    "kinds_reverse_bytes",
    "kinds_rotate",
    "kinds_shout",
    "kinds_sum",
    "kinds_swap",
    "kinds_toggle",
];

/// `kinds_add`'s description: its WIT doc comment, then its signature.
const ADD_DESCRIPTION: &str =
    "Adds two 32-bit integers, wrapping on overflow.\n\nWIT: `kinds.add: func(a: s32, b: s32) -> s32`";
/// `greet` has no doc comment in the WIT: its signature alone.
const GREET_DESCRIPTION: &str = "WIT: `greet: func(name: string) -> string`";

fn tool_names() -> Vec<&'static str> {
    TOOLS.to_vec()
}

fn run(home: &Path, args: &[&str]) -> (i32, String, String) {
    let out = wharf_tests::wharf(home).args(args).output().expect("spawn wharf");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `wharf plugin call FILE TOOL ARGS`: (exit code, the printed outcome).
pub(crate) fn call(home: &Path, file: &Path, tool: &str, args: &Value) -> anyhow::Result<(i32, Value)> {
    let (code, out, err) = run(home, &["plugin", "call", &file.display().to_string(), tool, &args.to_string()]);
    let v: Value = serde_json::from_str(out.trim()).with_context(|| format!("{tool} {args}: not JSON: {out} {err}"))?;
    Ok((code, v))
}

/// Calls every case of [`cases`] on `file` and checks each outcome.
pub(crate) fn check_every_function(file: &Path) -> anyhow::Result<()> {
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let mut called = std::collections::BTreeSet::new();
    for (tool, args, expect) in cases() {
        let (code, out) = call(home.path(), file, tool, &args)?;
        called.insert(tool);
        match expect {
            Expect::Ok(want) => {
                assert_eq!(code, 0, "{tool} {args}: {out}");
                assert_eq!(out["is_error"], false, "{tool} {args}: {out}");
                let content = out["content"].as_str().unwrap_or_else(|| panic!("{tool}: no content: {out}"));
                let got: Value =
                    serde_json::from_str(content).with_context(|| format!("{tool}: content is not JSON: {out}"))?;
                assert_eq!(got, want, "{tool} {args}");
            }
            Expect::Err(text) => {
                assert_eq!(code, 1, "{tool} {args}: {out}");
                assert_eq!(out["is_error"], true, "{tool} {args}: {out}");
                assert_eq!(out["error_code"], "TOOL_ERROR", "{tool} {args}: {out}");
                assert_eq!(out["content"], text, "{tool} {args}: the err string is the message");
            }
        }
    }
    assert_eq!(called.into_iter().collect::<Vec<_>>(), tool_names(), "every function is exercised");
    Ok(())
}

fn generic_rust() -> PathBuf {
    wharf_tests::plugin(plugins::GENERIC_RUST)
}

#[test]
fn every_function_through_plugin_call() -> anyhow::Result<()> {
    check_every_function(&generic_rust())?;
    Ok(())
}

#[test]
fn inspect_shows_the_derived_tools_with_exact_schemas() -> anyhow::Result<()> {
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let file = generic_rust().display().to_string();
    let (code, out, err) = run(home.path(), &["plugin", "inspect", &file, "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).with_context(|| format!("parsing JSON: {out}"))?;
    assert_eq!(v["kinds"], json!(["tool"]));
    assert!(v["wit"].as_str().unwrap_or("").starts_with("generic"), "{}", v["wit"]);
    assert_eq!(v["name"], "example:types");
    assert_eq!(v["version"], "0.1.0");
    let tools = v["tools"].as_array().cloned().unwrap_or_default();
    let mut names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    names.sort();
    assert_eq!(names, tool_names());
    let tool = |n: &str| tools.iter().find(|t| t["name"] == n).cloned().unwrap_or_else(|| panic!("no {n}"));
    let add = tool("kinds_add");
    assert_eq!(
        add["input_schema"],
        json!({
            "type": "object",
            "properties": {
                "a": {"type": "integer", "minimum": i32::MIN, "maximum": i32::MAX},
                "b": {"type": "integer", "minimum": i32::MIN, "maximum": i32::MAX},
            },
            "required": ["a", "b"],
            "additionalProperties": false,
        })
    );
    // Descriptions: the WIT doc comment (the fixture carries its
    // `package-docs`), then the signature; `greet` has no docs.
    assert_eq!(add["description"], ADD_DESCRIPTION, "{add}");
    assert_eq!(tool("greet")["description"], GREET_DESCRIPTION);
    let mid = tool("kinds_mid");
    let point = &mid["input_schema"]["properties"]["a"];
    assert_eq!(point["required"], json!(["x", "y"]), "label is an option: {point}");
    assert_eq!(point["additionalProperties"], false);
    assert_eq!(tool("kinds_double")["input_schema"]["required"], json!([]), "an option parameter is optional");
    let shape = &tool("kinds_area")["input_schema"]["properties"]["s"]["oneOf"];
    assert_eq!(shape.as_array().map(Vec::len), Some(3), "{shape}");
    assert!(shape.as_array().into_iter().flatten().any(|c| c == &json!({"const": "empty"})), "{shape}");
    assert_eq!(tool("kinds_rotate")["input_schema"]["properties"]["c"]["enum"], json!(["red", "green", "blue"]));
    let perms = &tool("kinds_toggle")["input_schema"]["properties"]["p"];
    assert_eq!(perms["type"], "array");
    assert_eq!(perms["items"]["enum"], json!(["read", "write", "exec"]));
    let bytes = &tool("kinds_reverse_bytes")["input_schema"]["properties"]["data"];
    assert_eq!(bytes["contentEncoding"], "base64");
    let g = &tool("kinds_ints")["input_schema"]["properties"]["g"]["anyOf"];
    assert_eq!(g[0]["maximum"], json!(9007199254740991u64), "{g}");
    assert_eq!(g[1]["type"], "string");
    // The functions with their WIT signatures.
    let funcs = v["functions"].as_array().cloned().unwrap_or_default();
    let next = funcs.iter().find(|f| f["tool"] == "kinds_next_char").cloned().unwrap_or_default();
    assert_eq!(next["function"], "kinds.next-char");
    assert_eq!(next["signature"], "func(c: char) -> char");

    // The human form names each tool and its WIT function.
    let (code, text, err) = run(home.path(), &["plugin", "inspect", &file]);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains("tool kinds_divide")
            && text.contains("kinds.divide: func(a: s32, b: s32) -> result<s32, string>"),
        "{text}"
    );
    Ok(())
}

#[test]
fn bad_arguments_are_refused_naming_the_field() -> anyhow::Result<()> {
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let file = generic_rust();
    // Caught by the schema (the pipeline's guard): the path is named.
    let (code, out) =
        call(home.path(), &file, "kinds_mid", &json!({"a": {"x": 1, "y": 2, "label": 5}, "b": {"x": 0, "y": 0}}))?;
    assert_eq!(code, 1, "{out}");
    assert_eq!(out["error_code"], "INVALID_ARGUMENTS", "{out}");
    assert!(out["content"].as_str().unwrap_or("").contains("/a/label"), "{out}");
    // Out of range for the WIT integer.
    let (_, out) = call(home.path(), &file, "kinds_add", &json!({"a": 2147483648u64, "b": 0}))?;
    assert_eq!(out["error_code"], "INVALID_ARGUMENTS", "{out}");
    assert!(out["content"].as_str().unwrap_or("").contains("/a"), "{out}");
    // Not base64: the schema's `pattern` (checked since the validator is
    // the `jsonschema` crate) names the field before the conversion would.
    let (code, out) = call(home.path(), &file, "kinds_reverse_bytes", &json!({"data": "not base64!"}))?;
    assert_eq!(code, 1, "{out}");
    assert_eq!(out["error_code"], "INVALID_ARGUMENTS", "{out}");
    assert!(
        out["content"].as_str().unwrap_or("").contains(r#"/data: "not base64!" does not match the pattern"#),
        "{out}"
    );
    // A u64 beyond 2^53 as a number is refused: it must be a string.
    let (_, out) = call(
        home.path(),
        &file,
        "kinds_ints",
        &json!({"a": 0, "b": 0, "c": 0, "d": 0, "e": 0, "f": 0, "g": 9007199254740993u64, "h": 0}),
    )?;
    assert_eq!(out["is_error"], true, "{out}");
    assert!(out["content"].as_str().unwrap_or("").contains("/g"), "{out}");
    Ok(())
}

#[test]
fn a_component_taking_a_resource_is_refused_naming_the_resource_and_its_functions() -> anyhow::Result<()> {
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let file = wharf_tests::plugin(plugins::GENERIC_RESOURCE).display().to_string();
    let (code, out, err) = run(home.path(), &["plugin", "inspect", &file]);
    assert_ne!(code, 0, "{out}");
    // The resource is named, with every function that uses it and where.
    assert!(err.contains("resource `counters.counter` is used by "), "{err}");
    for user in [
        "`counters.counter.constructor` (result)",
        "`counters.counter.bump` (parameter `self`)",
        "`counters.peek` (parameter `c`)",
    ] {
        assert!(err.contains(user), "{user}: {err}");
    }
    assert!(!err.contains("counters.version"), "a plain function is no culprit: {err}");
    assert!(err.contains("cannot load as a generic component"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    let (code, _, err) = run(home.path(), &["plugin", "call", &file, "counters_version", "{}"]);
    assert_ne!(code, 0);
    assert!(err.contains("counters.peek"), "{err}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn run_calls_a_generic_tool_for_the_scripted_model() -> anyhow::Result<()> {
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let ws = tempfile::tempdir().context("creating a temp dir")?;
    let _ = wharf_tests::plugin(plugins::LLM_SCRIPTED);
    let profile = home.path().join("generic.toml");
    let text = format!(
        r#"
[agent]
adapter = "scripted"
max_steps = 4

[[plugin]]
id = "types"
path = "{}"

[[plugin]]
id = "scripted"
path = "${{plugin_dir}}/llm-scripted.wasm"
[plugin.config]
model = "scripted-test"

[[plugin.config.turns]]
text = "Computing."
tool_calls = [
  {{ name = "kinds_mid", arguments = {{ a = {{ x = 0, y = 0 }}, b = {{ x = 4, y = 2, label = "far" }} }} }},
  {{ name = "kinds_divide", arguments = {{ a = 1, b = 0 }} }},
]

[[plugin.config.turns]]
text = "Done."
"#,
        generic_rust().display()
    );
    std::fs::write(&profile, text).context("writing profile")?;
    let host = TestHost::builder()
        .profile(profile.display().to_string())
        .home(home.path())
        .workspace(ws.path())
        .start_in(home.path())
        .await?;
    let run = host.run("midpoint please").await;
    host.close().await;
    let run = run?;
    let events = run.json();
    let stdout = format!("{events:#?}");
    assert_eq!(run.exit_code(), 0, "{:?}\n{stdout}", run.summary);
    let results: Vec<&Value> = events.iter().filter(|e| e["type"] == "tool/result").map(|e| &e["data"]).collect();
    assert_eq!(results.len(), 2, "{stdout}");
    let mid = results.iter().find(|r| r["name"] == "kinds_mid").unwrap_or_else(|| panic!("{stdout}"));
    assert_eq!(mid["plugin"], "types");
    assert_eq!(mid["is_error"], false, "{mid}");
    let got: Value =
        serde_json::from_str(mid["content"].as_str().unwrap_or("")).with_context(|| format!("parsing JSON: {mid}"))?;
    assert_eq!(got, json!({"x": 2.0, "y": 1.0, "label": "far"}));
    let div = results.iter().find(|r| r["name"] == "kinds_divide").unwrap_or_else(|| panic!("{stdout}"));
    assert_eq!(div["is_error"], true, "{div}");
    assert_eq!(div["error_code"], "TOOL_ERROR", "{div}");
    assert_eq!(div["content"], "division by zero");
    let end = events.last().cloned().unwrap_or_default();
    assert_eq!(end["data"]["reason"], "completed", "{end}");
    Ok(())
}

const SERVE_PROFILE: &str = r#"
[[plugin]]
id = "types"
path = "GENERIC_WASM"
"#;

struct Served {
    home: tempfile::TempDir,
    ws: tempfile::TempDir,
    profile: PathBuf,
    wasm: PathBuf,
}

fn served(initial: &Path) -> Served {
    let home = tempfile::tempdir().expect("creating a temp dir");
    let ws = tempfile::tempdir().expect("creating a temp dir");
    let wasm = home.path().join("types.wasm");
    std::fs::copy(initial, &wasm).expect("copying the component");
    let profile = home.path().join("serve.toml");
    std::fs::write(&profile, SERVE_PROFILE.replace("GENERIC_WASM", &wasm.display().to_string()))
        .expect("writing profile");
    Served { home, ws, profile, wasm }
}

impl Served {
    /// The MCP fixture client driving `wharf mcp serve` over stdio.
    fn client(&self, calls: &[(&str, Value)], extra: &[&str]) -> Command {
        let mut c = Command::new(crate::mcp::fixture());
        c.arg("client");
        for (name, args) in calls {
            c.args(["--call", &format!("{name}={args}")]);
        }
        c.args(extra);
        c.arg("--").arg(wharf_tests::wharf_bin()).args(["mcp", "serve", "--profile"]).arg(&self.profile);
        c.arg("-w").arg(self.ws.path()).arg("--session-dir").arg(self.home.path().join("sessions"));
        c.env("HOME", self.home.path())
            .env("WHARF_CACHE_DIR", wharf_tests::target_dir().join("test-cache"))
            .env("WHARF_LOG", "warn");
        c
    }
}

fn result_text(call: &Value) -> String {
    call["result"]["content"][0]["text"].as_str().unwrap_or("").to_string()
}

#[test]
fn mcp_serve_lists_and_calls_generic_tools() -> anyhow::Result<()> {
    let s = served(&generic_rust());
    let calls = [
        ("kinds_add", json!({"a": 40, "b": 2})),
        ("greet", json!({"name": "MCP"})),
        ("kinds_divide", json!({"a": 1, "b": 0})),
        ("kinds_swap", json!({"t": [1, 2]})),
    ];
    let out = s.client(&calls, &[]).output().context("running the MCP client")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let report: Value =
        serde_json::from_str(stdout.trim()).with_context(|| format!("parsing JSON: {stdout}\n{stderr}"))?;
    let mut names: Vec<&str> =
        report["tools"].as_array().into_iter().flatten().filter_map(|t| t["name"].as_str()).collect();
    names.sort();
    assert_eq!(names, tool_names());
    let mid = report["tools"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == "kinds_mid"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(mid["inputSchema"]["required"], json!(["a", "b"]), "{mid}");
    let described = |n: &str| {
        report["tools"].as_array().and_then(|t| t.iter().find(|t| t["name"] == n)).map(|t| t["description"].clone())
    };
    assert_eq!(described("kinds_add"), Some(json!(ADD_DESCRIPTION)));
    assert_eq!(described("greet"), Some(json!(GREET_DESCRIPTION)));
    let c = report["calls"].as_array().cloned().unwrap_or_default();
    assert_eq!(c[0]["result"]["isError"], false, "{}", c[0]);
    assert_eq!(result_text(&c[0]), "42");
    assert_eq!(c[0]["result"]["_meta"]["wharf/plugin"], "types");
    assert_eq!(result_text(&c[1]), "\"Hello, MCP!\"");
    // `err` is a tool error result, not a protocol error.
    assert_eq!(c[2]["result"]["isError"], true, "{}", c[2]);
    assert_eq!(c[2]["result"]["_meta"]["wharf/error_code"], "TOOL_ERROR", "{}", c[2]);
    assert_eq!(result_text(&c[2]), "division by zero");
    // A wrong type: the pipeline's guard names the path.
    assert_eq!(c[3]["result"]["_meta"]["wharf/error_code"], "INVALID_ARGUMENTS", "{}", c[3]);
    assert!(result_text(&c[3]).contains("/t/0"), "{}", c[3]);
    Ok(())
}

#[test]
fn a_generic_component_hot_reloads_and_its_old_tools_are_revoked() -> anyhow::Result<()> {
    // Start with a Wharf tool plugin at the path, then put the generic
    // component there: its functions replace the old tools.
    let s = served(&wharf_tests::plugin(plugins::TEXT));
    let generic = generic_rust();
    let mut child = s
        .client(&[], &["--wait-list-changed", "30"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("spawning wharf mcp serve")?;
    let stderr = child.stderr.take().unwrap_or_else(|| panic!("no stderr"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut log = Vec::new();
    loop {
        let line =
            rx.recv_timeout(Duration::from_secs(120)).with_context(|| format!("client never listed: {log:?}"))?;
        if line == "listed" {
            break;
        }
        log.push(line);
    }
    let tmp = s.wasm.with_extension("tmp");
    std::fs::copy(&generic, &tmp).context("copying the generic component")?;
    std::fs::rename(&tmp, &s.wasm).context("moving the new file in place")?;
    let out = child.wait_with_output().context("waiting for the process")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(stdout.trim()).with_context(|| format!("parsing JSON: {stdout}"))?;
    let before: Vec<&str> =
        report["tools"].as_array().into_iter().flatten().filter_map(|t| t["name"].as_str()).collect();
    assert!(before.contains(&"word_count"), "{before:?}");
    assert_eq!(report["list_changed"], true, "{report}");
    let mut after: Vec<&str> =
        report["relisted"].as_array().into_iter().flatten().filter_map(|t| t["name"].as_str()).collect();
    after.sort();
    assert_eq!(after, tool_names(), "the generic functions replaced word_count & co.");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn run_offers_the_wit_docs_to_the_model_as_tool_descriptions() -> anyhow::Result<()> {
    use wharf_mock_llm::{MockLlm, Script};
    use wharf_tests::host::{TEST_KEY as KEY, TEST_KEY_ENV as KEY_ENV};
    let _ = wharf_tests::plugin(plugins::LLM_DEEPSEEK);
    let script: Script =
        serde_json::from_value(json!({"checks": {"api_key": KEY}, "replies": [{"kind": "stream", "text": "ok"}]}))
            .context("parsing JSON")?;
    let mock = MockLlm::start_background(script).context("starting the mock LLM")?;
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let ws = tempfile::tempdir().context("creating a temp dir")?;
    let profile = home.path().join("docs.toml");
    let text = format!(
        "[agent]\nadapter = \"model\"\nmax_steps = 2\n\n[[plugin]]\nid = \"types\"\npath = {}\n\n\
         [[plugin]]\nid = \"model\"\npath = \"${{plugin_dir}}/llm-deepseek.wasm\"\n[plugin.config]\n\
         base_url = \"{}/v1\"\nmodel = \"deepseek-v4-pro\"\napi_key_env = \"{KEY_ENV}\"\n\
         [plugin.grant]\nhosts = [\"127.0.0.1:{}\"]\nenv = [\"{KEY_ENV}\"]\n",
        crate::policy::toml_str(&generic_rust().display().to_string()),
        mock.url(),
        mock.addr().port()
    );
    std::fs::write(&profile, text).context("writing profile")?;
    let host = TestHost::builder()
        .profile(profile.display().to_string())
        .home(home.path())
        .workspace(ws.path())
        .start_in(home.path())
        .await?;
    let run = host.run("hello").await;
    let stderr = host.notices().join("\n");
    host.close().await;
    let run = run?;
    assert_eq!(run.exit_code(), 0, "{:?}\n{:#?}\n{stderr}", run.summary, run.json());
    mock.assert_no_violations();
    let requests = mock.requests();
    let body = requests.first().and_then(|r| r.body.clone()).unwrap_or_else(|| panic!("no request: {stderr}"));
    let tools = body["tools"].as_array().cloned().unwrap_or_default();
    let description =
        |n: &str| tools.iter().find(|t| t["function"]["name"] == n).map(|t| t["function"]["description"].clone());
    assert_eq!(description("kinds_add"), Some(json!(ADD_DESCRIPTION)), "{body}");
    assert_eq!(description("greet"), Some(json!(GREET_DESCRIPTION)), "{body}");
    assert_eq!(
        description("kinds_next_char"),
        Some(json!(
            "The scalar value after `c` (U+D7FF is followed by U+E000, U+10FFFF by U+0000).\n\n\
             WIT: `kinds.next-char: func(c: char) -> char`"
        ))
    );
    Ok(())
}

/// A line-by-line JSON-RPC client of `wharf mcp serve` on stdio.
struct McpStdio {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
    next_id: i64,
}

impl McpStdio {
    fn start(s: &Served) -> Self {
        let mut c = wharf_tests::wharf(s.home.path());
        c.args(["mcp", "serve", "--profile"]).arg(&s.profile);
        c.arg("-w").arg(s.ws.path()).arg("--session-dir").arg(s.home.path().join("sessions"));
        c.env("WHARF_LOG", "warn").stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null());
        let mut child = c.spawn().expect("spawning the command");
        let stdin = child.stdin.take().unwrap_or_else(|| panic!("no stdin"));
        let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut me = Self { child, stdin, lines, next_id: 0 };
        me.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
        );
        me.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        me
    }

    fn send(&mut self, v: Value) {
        use std::io::Write;
        writeln!(self.stdin, "{v}").expect("writing to wharf mcp serve");
        self.stdin.flush().expect("writing to wharf mcp serve");
    }

    /// The next message matching `want`, skipping others.
    fn wait_for(&self, what: &str, want: impl Fn(&Value) -> bool) -> Value {
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .with_context(|| format!("no {what} from wharf mcp serve"))
                .expect("wharf mcp serve answers");
            if let Ok(v) = serde_json::from_str::<Value>(&line)
                && want(&v)
            {
                return v;
            }
        }
    }

    /// Sends a request and returns its response (`result` or `error`).
    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.wait_for(method, |v| v["id"] == id)
    }

    fn tool_names(&mut self) -> Vec<String> {
        let r = self.request("tools/list", json!({}));
        let mut names: Vec<String> = r["result"]["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["name"].as_str())
            .map(String::from)
            .collect();
        names.sort();
        names
    }
}

impl Drop for McpStdio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn mcp_serve_swaps_a_generic_component_for_one_with_other_functions() -> anyhow::Result<()> {
    let s = served(&generic_rust());
    let mut mcp = McpStdio::start(&s);
    assert_eq!(mcp.tool_names(), tool_names());

    // The new version in place (atomically, as an editor or a deploy does).
    let tmp = s.wasm.with_extension("tmp");
    std::fs::copy(wharf_tests::plugin(plugins::GENERIC_SWAP), &tmp).context("copying the generic-swap component")?;
    std::fs::rename(&tmp, &s.wasm).context("moving the new file in place")?;
    mcp.wait_for("notifications/tools/list_changed", |v| v["method"] == "notifications/tools/list_changed");

    // kinds_* are gone, farewell is new, greet is the new version's.
    assert_eq!(mcp.tool_names(), ["farewell", "greet"]);
    let text = |r: &Value| r["result"]["content"][0]["text"].as_str().unwrap_or("").to_string();
    let r = mcp.request("tools/call", json!({"name": "farewell", "arguments": {"name": "MCP"}}));
    assert_eq!(r["result"]["isError"], false, "{r}");
    assert_eq!(text(&r), "\"Goodbye, MCP!\"");
    let r = mcp.request("tools/call", json!({"name": "greet", "arguments": {"name": "MCP"}}));
    assert_eq!(text(&r), "\"Hello again, MCP!\"", "{r}");
    // The removed tool cannot be called any more.
    let r = mcp.request("tools/call", json!({"name": "kinds_add", "arguments": {"a": 1, "b": 2}}));
    let refused = r.get("error").is_some() || r["result"]["isError"] == true;
    assert!(refused, "a removed tool answered: {r}");
    assert!(!r.to_string().contains("\"3\""), "{r}");
    assert!(r.to_string().contains("kinds_add"), "the error names the tool: {r}");
    Ok(())
}

/// A component of functions that each return their own number (`u32`):
/// `exports` are (export name, functions) where an export name with
/// functions is an interface (instance) and one without a top-level
/// function. Functions are numbered in order from 0.
fn numbered_component(exports: &[(&str, &[&str])]) -> Vec<u8> {
    let mut core = String::new();
    let mut lifts = String::new();
    let mut items = String::new();
    let mut n = 0usize;
    for (e, (name, funcs)) in exports.iter().enumerate() {
        let mut one = |fname: &str, n: &mut usize| {
            core.push_str(&format!("(func (export \"f{n}\") (result i32) i32.const {n})\n"));
            lifts.push_str(&format!("(func $f{n} (result u32) (canon lift (core func $i \"f{n}\")))\n"));
            *n += 1;
            format!("(export \"{fname}\" (func $f{}))", *n - 1)
        };
        if funcs.is_empty() {
            items.push_str(&one(name, &mut n));
            items.push('\n');
        } else {
            let inner: Vec<String> = funcs.iter().map(|f| one(f, &mut n)).collect();
            items.push_str(&format!("(instance $x{e} {})\n(export \"{name}\" (instance $x{e}))\n", inner.join(" ")));
        }
    }
    let wat = format!("(component\n(core module $m\n{core})\n(core instance $i (instantiate $m))\n{lifts}{items})");
    wat::parse_str(&wat).expect("assembling the WAT")
}

/// Writes `bytes` as `name` in `dir`.
fn write_component(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("writing the file");
    path
}

/// Issue 36 item 15: `tp:generic/alpha` and `tp:other/alpha` both export
/// `greet`; only those two are qualified with their package, every other
/// function keeps its plain name, and each tool calls its own function.
#[test]
fn same_named_interfaces_in_two_packages_get_package_qualified_tools() -> anyhow::Result<()> {
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let bytes = numbered_component(&[
        ("tp:generic/alpha", &["greet", "wave"]),
        ("tp:other/alpha", &["greet"]),
        ("tp:generic/beta", &["ping"]),
        ("hello", &[]),
    ]);
    let file = write_component(home.path(), "two-alphas.wasm", &bytes);
    let (code, out, err) = run(home.path(), &["plugin", "inspect", &file.display().to_string(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).with_context(|| format!("parsing JSON: {out}"))?;
    let mut names: Vec<&str> = v["tools"].as_array().into_iter().flatten().filter_map(|t| t["name"].as_str()).collect();
    names.sort();
    assert_eq!(names, ["alpha_wave", "beta_ping", "generic_alpha_greet", "hello", "other_alpha_greet"]);
    // A qualified function is shown by its export's full name.
    let funcs = v["functions"].as_array().cloned().unwrap_or_default();
    let shown = |tool: &str| funcs.iter().find(|f| f["tool"] == tool).map(|f| f["function"].clone());
    assert_eq!(shown("other_alpha_greet"), Some(json!("tp:other/alpha.greet")), "{funcs:?}");
    assert_eq!(shown("alpha_wave"), Some(json!("alpha.wave")), "{funcs:?}");
    // Each tool is its own function (numbered in export order).
    for (tool, want) in
        [("generic_alpha_greet", 0), ("alpha_wave", 1), ("other_alpha_greet", 2), ("beta_ping", 3), ("hello", 4)]
    {
        let (code, out) = call(home.path(), &file, tool, &json!({}))?;
        assert_eq!(code, 0, "{tool}: {out}");
        assert_eq!(out["content"], want.to_string(), "{tool}: {out}");
    }
    Ok(())
}

/// Qualification goes as far as the export's namespace and version; names
/// that still collide refuse the component, naming both functions.
#[test]
fn names_colliding_even_when_qualified_refuse_the_component() -> anyhow::Result<()> {
    let home = tempfile::tempdir().context("creating a temp dir")?;
    // Versions tell two same-named packages apart.
    let bytes = numbered_component(&[("tp:generic/alpha@1.0.0", &["greet"]), ("tp:generic/alpha@2.0.0", &["greet"])]);
    let file = write_component(home.path(), "versions.wasm", &bytes);
    let (code, out) = call(home.path(), &file, "tp_generic_alpha_v2_0_0_greet", &json!({}))?;
    assert_eq!((code, out["content"].clone()), (0, json!("1")), "{out}");
    // `tp:generic/alpha.greet` would become `generic_alpha_greet`, then
    // `tp_generic_alpha_greet`: both are top-level functions' names.
    let bytes = numbered_component(&[
        ("tp:generic/alpha", &["greet"]),
        ("tp:other/alpha", &["greet"]),
        ("generic-alpha-greet", &[]),
        ("tp-generic-alpha-greet", &[]),
    ]);
    let file = write_component(home.path(), "stuck.wasm", &bytes);
    let (code, out, err) = run(home.path(), &["plugin", "inspect", &file.display().to_string()]);
    assert_ne!(code, 0, "{out}");
    assert!(
        err.contains(
            "functions `tp:generic/alpha.greet` and `tp-generic-alpha-greet` both become the tool \
             `tp_generic_alpha_greet`, even with their package and version in the name"
        ),
        "{err}"
    );
    Ok(())
}

/// `(export name, functions)` for a component of `n` functions in one
/// interface `tp:big/api` (`op-0` …), as a large generated API component.
fn big_component(n: usize) -> Vec<u8> {
    let names: Vec<String> = (0..n).map(|i| format!("op-{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    numbered_component(&[("tp:big/api", &refs)])
}

/// Issue 36 item 16: a component of 5,000 functions loads under the default
/// bound and its 4,999th tool is its 4,999th function; a profile's
/// `engine.max_tools_per_plugin` below that refuses it, naming the setting.
#[tokio::test(flavor = "multi_thread")]
async fn a_component_of_5000_functions_loads_and_the_bound_is_an_operator_setting() -> anyhow::Result<()> {
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let file = write_component(home.path(), "big.wasm", &big_component(5000));
    let (code, out) = call(home.path(), &file, "api_op_4998", &json!({}))?;
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["content"], "4998", "{out}");

    let ws = tempfile::tempdir().context("creating a temp dir")?;
    let profile = home.path().join("bounded.toml");
    let text = format!(
        "[engine]\nmax_tools_per_plugin = 4000\n\n[[plugin]]\nid = \"big\"\npath = {}\n",
        crate::policy::toml_str(&file.display().to_string())
    );
    std::fs::write(&profile, text).context("writing profile")?;
    // The host does not start (`wharf run` exits 2 printing this error).
    let started = TestHost::builder()
        .profile(profile.display().to_string())
        .home(home.path())
        .workspace(ws.path())
        .start_in(home.path())
        .await;
    let Err(e) = started else { panic!("a plugin over the bound was loaded") };
    let stderr = wharf_cli_common::output::error_text(&e);
    assert!(
        stderr.contains("exports 5000 functions; a plugin may register at most 4000 tools")
            && stderr.contains("`engine.max_tools_per_plugin`"),
        "{stderr}"
    );
    Ok(())
}
