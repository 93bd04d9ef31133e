//! `wharf mcp serve --http` driven by the official Python MCP SDK
//! (`tests/mcp-http-client/client.py`, pip package `mcp`): tools/list, an
//! allowed sandboxed call, a policy denial as a tool error, and the guard —
//! a wrong or missing token (401), a wrong `Host` (403, DNS rebinding), a
//! foreign `Origin` (403) — plus the address and token rules of the flag;
//! and protocol negotiation: the SDK's 2026-07-28 stateless lifecycle
//! (`server/discover`, no handshake) and its 2025-11-25 handshake against
//! the same server.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};
use wharf_core::EventKind;
use wharf_tests::plugins;

const PROFILE: &str = r#"
[[plugin]]
id = "text"
path = "${plugin_dir}/text.wasm"
[plugin.grant]
dirs = ["${workspace}:ro"]

[[plugin]]
id = "gate"
path = "${plugin_dir}/policy-fixed.wasm"
[plugin.config]
decision = "deny"
reason = "echo is not allowed here"
tools = ["echo"]
"#;

/// A Python with the `mcp` SDK: the CI virtualenv's, else `python3`.
pub(crate) fn python_with_sdk() -> Option<PathBuf> {
    let venv = std::env::var_os("WHARF_CI_VENV")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/wharf-ci-venv")));
    let mut candidates = venv.map(|v| v.join("bin/python3")).into_iter().chain([PathBuf::from("python3")]);
    candidates.find(|py| {
        Command::new(py)
            .args(["-c", "import mcp.client.streamable_http"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

struct Server {
    child: Child,
    url: String,
    token: String,
    stderr: std::sync::mpsc::Receiver<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Sends SIGINT (Ctrl-C) and waits for a clean exit; the rest of its stderr.
    fn stop(mut self) -> String {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut rest = String::new();
        while Instant::now() < deadline {
            match self.stderr.recv_timeout(Duration::from_millis(200)) {
                Ok(line) => rest.push_str(&format!("{line}\n")),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            }
        }
        let status = self.child.wait().expect("waiting for the process");
        assert!(status.success(), "wharf mcp serve --http exited with {status}: {rest}");
        rest
    }
}

/// `wharf mcp serve --http 127.0.0.1:0` with `extra` arguments; waits for
/// the line naming its address and token.
fn start(home: &Path, ws: &Path, extra: &[&str]) -> Server {
    for p in [plugins::TEXT, plugins::POLICY_FIXED] {
        let _ = wharf_tests::plugin(p);
    }
    let profile = home.join("serve.toml");
    std::fs::write(&profile, PROFILE).expect("writing profile");
    let mut c = wharf_tests::wharf(home);
    c.args(["mcp", "serve", "--http", "127.0.0.1:0", "--profile"])
        .arg(&profile)
        .arg("-w")
        .arg(ws)
        .arg("--session-dir")
        .arg(home.join("sessions"))
        .args(extra)
        .env_remove("WHARF_MCP_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawning the command");
    let stderr = child.stderr.take().unwrap_or_else(|| panic!("no stderr"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut seen = String::new();
    while Instant::now() < deadline {
        let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) else {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("wharf mcp serve --http exited with {status}: {seen}");
            }
            continue;
        };
        seen.push_str(&format!("{line}\n"));
        if let Some(rest) = line.split_once("serving MCP on ").map(|(_, r)| r) {
            let (url, auth) = rest.split_once(" (Authorization: Bearer ").unwrap_or((rest, ""));
            let token = auth.trim_end_matches(')').to_string();
            return Server { child, url: url.to_string(), token, stderr: rx };
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("no address line from wharf mcp serve --http: {seen}");
}

fn client(py: &Path, url: &str, token: &str, calls: &Value) -> anyhow::Result<Value> {
    client_in(py, url, token, calls, "handshake")
}

/// The client with a lifecycle: `handshake` (`initialize`) or `discover`
/// (2026-07-28, stateless).
fn client_in(py: &Path, url: &str, token: &str, calls: &Value, mode: &str) -> anyhow::Result<Value> {
    let script = wharf_tests::root().join("tests/mcp-http-client/client.py");
    let out = Command::new(py)
        .arg(script)
        .args([url, token, &calls.to_string(), mode])
        .output()
        .context("running the Python MCP client")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "client.py failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(stdout.trim()).with_context(|| format!("the client's report is not JSON: {stdout}"))
}

fn statuses(v: &Value) -> Vec<i64> {
    v["statuses"].as_array().into_iter().flatten().filter_map(Value::as_i64).collect()
}

#[test]
fn python_sdk_lists_calls_and_is_refused_without_token_host_or_origin() -> anyhow::Result<()> {
    let Some(py) = python_with_sdk() else {
        wharf_tests::skip(
            &wharf_tests::current_test(),
            "the Python MCP SDK is missing (pip install mcp==2.3.0, as .ci/run does in its virtualenv)",
        );
        return Ok(());
    };
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let ws = tempfile::tempdir().context("creating a temp dir")?;
    std::fs::write(ws.path().join("README.md"), "one two three\nfour five\n").context("writing README.md")?;
    let server = start(home.path(), ws.path(), &[]);
    assert!(server.url.starts_with("http://127.0.0.1:") && server.url.ends_with("/mcp"), "{}", server.url);
    assert_eq!(server.token.len(), 64, "a generated token is printed: {}", server.token);

    let calls = json!([["word_count", {"path": "README.md"}], ["echo", {"text": "hi"}]]);
    let report = client(&py, &server.url, &server.token, &calls)?;
    let ok = &report["ok"];
    assert!(ok.get("error").is_none(), "{report}");
    assert_eq!(ok["server"], "wharf", "{report}");
    assert_eq!(ok["tools"], json!(["echo", "regex_search", "word_count"]), "{report}");
    let c = ok["calls"].as_array().cloned().unwrap_or_default();
    // Allowed, in the sandboxed component.
    assert_eq!(c[0]["is_error"], false, "{report}");
    assert!(c[0]["text"].as_str().is_some_and(|t| t.starts_with("2 lines, 5 words")), "{report}");
    assert_eq!(c[0]["meta"]["wharf/plugin"], "text", "{report}");
    // Denied by the profile's policy: a tool error, as over stdio.
    assert_eq!(c[1]["is_error"], true, "{report}");
    assert_eq!(c[1]["meta"]["wharf/error_code"], "DENIED", "{report}");
    assert!(c[1]["text"].as_str().is_some_and(|t| t.contains("echo is not allowed here")), "{report}");
    assert!(statuses(ok).iter().all(|s| (200..300).contains(s)), "{report}");

    // The guard: nothing gets past it, and the SDK sees the failure.
    for (case, want) in [("wrong_token", 401), ("no_token", 401), ("wrong_host", 403), ("wrong_origin", 403)] {
        let r = &report[case];
        assert!(r.get("error").is_some() && r.get("tools").is_none(), "{case}: {report}");
        assert_eq!(statuses(r).first(), Some(&want), "{case}: {report}");
        assert!(statuses(r).iter().all(|s| *s == want), "{case}: {report}");
    }

    // Every allowed call is a turn of the one session.
    let session = c[0]["meta"]["wharf/session"].as_str().unwrap_or("").to_string();
    let rest = server.stop();
    assert!(rest.contains(&session), "the session is named on stderr at exit: {rest}");
    let events = wharf_core::SessionStore::new(home.path().join("sessions"))
        .load(&session)
        .context("loading the session")?
        .events;
    wharf_core::invariants::check(&events).map_err(anyhow::Error::msg).context("checking the log's invariants")?;
    let results: Vec<(String, Option<String>)> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolResult(r) => Some((r.name.clone(), r.error_code.as_deref().map(String::from))),
            _ => None,
        })
        .collect();
    assert_eq!(results, [("word_count".to_string(), None), ("echo".to_string(), Some("DENIED".to_string()))]);
    Ok(())
}

#[test]
fn python_sdk_gets_2026_07_28_by_discover_and_2025_11_25_by_handshake() -> anyhow::Result<()> {
    let Some(py) = python_with_sdk() else {
        wharf_tests::skip(&wharf_tests::current_test(), "the Python MCP SDK is missing (pip install mcp==2.3.0)");
        return Ok(());
    };
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let ws = tempfile::tempdir().context("creating a temp dir")?;
    std::fs::write(ws.path().join("README.md"), "one two three\nfour five\n").context("writing README.md")?;
    let server = start(home.path(), ws.path(), &[]);
    let calls = json!([["word_count", {"path": "README.md"}], ["echo", {"text": "hi"}]]);

    // 2026-07-28: no handshake, no session; every request says its version.
    let report = client_in(&py, &server.url, &server.token, &calls, "discover")?;
    let ok = &report["ok"];
    assert!(ok.get("error").is_none(), "{report}");
    assert_eq!(ok["protocol"], "2026-07-28", "{report}");
    let supported: Vec<&str> = ok["supported"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    assert!(supported.contains(&"2026-07-28") && supported.contains(&"2025-11-25"), "{report}");
    assert_eq!(ok["tools"], json!(["echo", "regex_search", "word_count"]), "{report}");
    let c = ok["calls"].as_array().cloned().unwrap_or_default();
    assert_eq!(c[0]["is_error"], false, "{report}");
    assert!(c[0]["text"].as_str().is_some_and(|t| t.starts_with("2 lines, 5 words")), "{report}");
    assert_eq!(c[1]["is_error"], true, "{report}");
    assert_eq!(c[1]["meta"]["wharf/error_code"], "DENIED", "{report}");
    // The guard stands in front of stateless requests too.
    for (case, want) in [("wrong_token", 401), ("no_token", 401), ("wrong_host", 403), ("wrong_origin", 403)] {
        let r = &report[case];
        assert!(r.get("error").is_some() && r.get("tools").is_none(), "{case}: {report}");
        assert_eq!(statuses(r).first(), Some(&want), "{case}: {report}");
    }

    // The handshake still answers the newest revision that has one.
    let report =
        client_in(&py, &server.url, &server.token, &json!([["word_count", {"path": "README.md"}]]), "handshake")?;
    let ok = &report["ok"];
    assert!(ok.get("error").is_none(), "{report}");
    assert_eq!(ok["protocol"], "2025-11-25", "{report}");
    assert_eq!(ok["server"], "wharf", "{report}");
    assert_eq!(ok["calls"][0]["is_error"], false, "{report}");

    // Both clients' calls are turns of the one session.
    let session = c[0]["meta"]["wharf/session"].as_str().unwrap_or("").to_string();
    assert_eq!(ok["calls"][0]["meta"]["wharf/session"], json!(session), "{report}");
    server.stop();
    Ok(())
}

#[test]
fn a_configured_token_is_used_and_not_printed() -> anyhow::Result<()> {
    let Some(py) = python_with_sdk() else {
        wharf_tests::skip(&wharf_tests::current_test(), "the Python MCP SDK is missing (pip install mcp==2.3.0)");
        return Ok(());
    };
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let ws = tempfile::tempdir().context("creating a temp dir")?;
    let token = "configured-token-0123456789abcdef";
    let server = start(home.path(), ws.path(), &["--token", token]);
    assert!(!server.token.contains(token), "the configured token is not echoed: {}", server.token);
    let report = client(&py, &server.url, token, &json!([]))?;
    assert_eq!(report["ok"]["tools"], json!(["echo", "regex_search", "word_count"]), "{report}");
    assert_eq!(statuses(&report["wrong_token"]).first(), Some(&401), "{report}");
    server.stop();
    Ok(())
}

#[test]
fn non_loopback_needs_allow_remote_and_a_token() -> anyhow::Result<()> {
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let run = |extra: &[&str]| -> anyhow::Result<_> {
        let out = wharf_tests::wharf(home.path())
            .args(["mcp", "serve", "--http", "0.0.0.0:0"])
            .args(extra)
            .env_remove("WHARF_MCP_TOKEN")
            .stdin(Stdio::null())
            .output()
            .context("running wharf mcp serve")?;
        Ok((out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned()))
    };
    let (code, err) = run(&[])?;
    assert_ne!(code, Some(0));
    assert!(err.contains("non-loopback") && err.contains("--allow-remote"), "{err}");
    let (code, err) = run(&["--allow-remote"])?;
    assert_ne!(code, Some(0));
    assert!(err.contains("needs a configured token"), "{err}");
    let (code, err) = run(&["--allow-remote", "--token", "short"])?;
    assert_ne!(code, Some(0));
    assert!(err.contains("at least 16 characters"), "{err}");
    let out = wharf_tests::wharf(home.path())
        .args(["mcp", "serve", "--http", "nonsense"])
        .stdin(Stdio::null())
        .output()
        .context("running wharf mcp serve")?;
    assert!(String::from_utf8_lossy(&out.stderr).contains("HOST:PORT"), "{out:?}");
    Ok(())
}
