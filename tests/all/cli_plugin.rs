//! `wharf plugin inspect|check|call` end to end: output shape, exit codes,
//! and one-line errors for malformed components.

use std::path::Path;

use anyhow::Context;
use serde_json::Value;
use wharf_tests::plugins;

fn run(home: &Path, args: &[&str]) -> (i32, String, String) {
    let out = wharf_tests::wharf(home).args(args).output().expect("spawn wharf");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn home() -> tempfile::TempDir {
    tempfile::tempdir().expect("creating a temp dir")
}

#[test]
fn inspect_reports_kinds_tools_and_version() -> anyhow::Result<()> {
    let h = home();
    let text = wharf_tests::plugin(plugins::TEXT);
    let (code, out, err) = run(h.path(), &["plugin", "inspect", text.to_str().unwrap_or(""), "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).with_context(|| format!("parsing JSON: {out}"))?;
    assert_eq!(v["kinds"], serde_json::json!(["tool"]));
    assert_eq!(v["wit"], "wharf:plugin@0.1.0");
    let tools = v["tools"].as_array().cloned().unwrap_or_default();
    let wc = tools.iter().find(|t| t["name"] == "word_count").unwrap_or_else(|| panic!("no word_count: {out}"));
    assert_eq!(wc["mode"], "parallel");
    assert_eq!(wc["input_schema"]["type"], "object");
    assert!(v["requests"]["filesystem"].is_string());
    Ok(())
}

#[test]
fn call_prints_json_and_exit_codes() -> anyhow::Result<()> {
    let h = home();
    let ws = tempfile::tempdir().context("creating a temp dir")?;
    let file = ws.path().join("a.txt");
    std::fs::write(&file, "one two three\nfour\n").context("writing the file")?;
    let text = wharf_tests::plugin(plugins::TEXT);
    let text = text.to_str().unwrap_or("");
    let args = format!(r#"{{"path": "{}"}}"#, file.display());
    let dir = format!("{}:ro", ws.path().display());

    let (code, out, err) = run(h.path(), &["plugin", "call", text, "word_count", &args, "--allow-dir", &dir]);
    assert_eq!(code, 0, "{out} {err}");
    let v: Value = serde_json::from_str(out.trim()).with_context(|| format!("parsing JSON: {out}"))?;
    assert_eq!(v["is_error"], false);
    assert!(v["content"].as_str().unwrap_or("").contains('4'), "{out}");

    // Without the grant the same call fails inside the sandbox: exit 1.
    let (code, out, _) = run(h.path(), &["plugin", "call", text, "word_count", &args]);
    assert_eq!(code, 1, "{out}");
    let v: Value = serde_json::from_str(out.trim()).with_context(|| format!("parsing JSON: {out}"))?;
    assert_eq!(v["is_error"], true);
    assert!(v["error_code"].is_string());

    // Arguments that violate the schema: exit 1 with INVALID_ARGUMENTS.
    let (code, out, _) = run(h.path(), &["plugin", "call", text, "word_count", r#"{"path": 5}"#]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("INVALID_ARGUMENTS"), "{out}");

    // Usage errors: exit 2.
    let (code, _, err) = run(h.path(), &["plugin", "call", text, "word_count", "not json"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = run(h.path(), &["plugin", "call", text, "no_such_tool", "{}"]);
    assert_eq!(code, 2);
    assert!(err.contains("no tool `no_such_tool`"), "{err}");
    Ok(())
}

#[test]
fn granted_env_var_is_visible_by_name_only() -> anyhow::Result<()> {
    let h = home();
    let evil = wharf_tests::plugin(plugins::EVIL);
    let evil = evil.to_str().unwrap_or("");
    let args = r#"{"name": "SECRET_TOKEN"}"#;
    let out = wharf_tests::wharf(h.path())
        .env("SECRET_TOKEN", "s3cr3t")
        .args(["plugin", "call", evil, "read_env", args, "--allow-env", "SECRET_TOKEN"])
        .output()
        .context("running wharf plugin call read_env")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("s3cr3t"));
    let out = wharf_tests::wharf(h.path())
        .env("SECRET_TOKEN", "s3cr3t")
        .args(["plugin", "call", evil, "read_env", args])
        .output()
        .context("running wharf plugin call read_env")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(!stdout.contains("s3cr3t"));
    Ok(())
}

#[test]
fn malformed_components_get_one_line_errors() {
    let h = home();
    let cases = [
        (wharf_tests::fixture("not-wasm.wasm"), "not a WebAssembly file"),
        (wharf_tests::fixture("core-module.wasm"), "core WebAssembly module, not a component"),
        (wharf_tests::plugin(plugins::WRONG_WORLD), "not a Wharf plugin"),
        (wharf_tests::plugin(plugins::FUTURE_VERSION), "wharf:plugin@0.2.0"),
        (wharf_tests::plugin(plugins::MISSING_IMPORT), "acme:extra/thing"),
    ];
    for (file, needle) in cases {
        let f = file.to_str().unwrap_or("");
        for cmd in ["inspect", "check"] {
            let (code, out, err) = run(h.path(), &["plugin", cmd, f]);
            assert_eq!(code, 2, "{cmd} {f}: {out} {err}");
            assert!(!err.contains("panicked"), "{err}");
            let line = err.trim();
            assert_eq!(line.lines().count(), 1, "not one line: {line}");
            assert!(line.contains(f), "does not name the file: {line}");
            assert!(line.contains(needle), "{f}: expected `{needle}` in: {line}");
        }
    }
    let (code, _, err) = run(h.path(), &["plugin", "inspect", "/no/such/file.wasm"]);
    assert_eq!(code, 2);
    assert!(err.contains("/no/such/file.wasm"), "{err}");
}
