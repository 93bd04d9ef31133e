//! Issue 36 ("Hardening 3"), the command line seen from outside: a missing
//! model key said at start (once, suggesting `--profile demo`);
//! `sdk/install-toolchains.sh` without arguments on a machine without the C
//! toolchain; `wharf run -` and a piped task; session ids by any unique
//! part; `--continue` with another profile; `wharf mcp serve` leaving no
//! empty session and answering every request read before the end of input.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use wharf_core::events::{EventKind, UserMessage};
use wharf_core::store::NewSession;

use crate::cli_edges::{Env, Out, env};
use wharf_tests::plugins;

impl Env {
    /// `wharf ARGS --session-dir …` in the workspace.
    fn cmd_in(&self, args: &[&str]) -> Command {
        let mut c = self.cmd(args);
        c.args(["--session-dir", &self.sessions.display().to_string()]);
        c
    }

    /// Runs `wharf ARGS --session-dir …` with `input` on stdin.
    fn run_with(&self, args: &[&str], input: Option<&str>) -> Out {
        let mut c = self.cmd_in(args);
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        c.stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() });
        let mut child = c.spawn().expect("spawning the command");
        if let Some(text) = input {
            let mut stdin = child.stdin.take().unwrap_or_else(|| panic!("no stdin"));
            stdin.write_all(text.as_bytes()).expect("writing");
        }
        let out = child.wait_with_output().expect("waiting for the process");
        Out {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    fn run_in(&self, args: &[&str]) -> Out {
        self.run_with(args, None)
    }

    fn ids(&self) -> Vec<String> {
        if !self.sessions.exists() {
            return Vec::new();
        }
        self.store().list().expect("listing the sessions").into_iter().map(|s| s.id).collect()
    }

    /// A stored session of this workspace with one user message.
    fn session_of(&self, profile: &str) -> String {
        let ws = std::fs::canonicalize(self.ws.path()).expect("canonicalizing the workspace").display().to_string();
        let log = self
            .store()
            .create(NewSession { id: None, workspace: Some(ws), profile: Some(profile.into()) })
            .expect("creating a session");
        log.append(EventKind::UserMessage(UserMessage { content: "hello".into(), inbox_id: None, images: vec![] }))
            .expect("appending an event");
        log.flush_blocking().expect("flushing the session log");
        let id = log.id().to_string();
        std::thread::sleep(Duration::from_millis(5));
        id
    }

    fn write(&self, name: &str, text: &str) -> String {
        let path = self.home.path().join(name);
        std::fs::write(&path, text).expect("writing the file");
        path.display().to_string()
    }

    /// The user messages of session `id`.
    fn prompts(&self, id: &str) -> Vec<String> {
        self.store()
            .load(id)
            .expect("loading the session")
            .events
            .into_iter()
            .filter_map(|e| match e.kind {
                EventKind::UserMessage(m) => Some(m.content),
                _ => None,
            })
            .collect()
    }
}

/// An adapter row whose key lives in `WHARF_H3_KEY` (not a first-party name
/// the host could know).
pub(crate) const KEYED_PROFILE: &str = r#"
[agent]
adapter = "keyed"

[[plugin]]
id = "fs"
path = "${plugin_dir}/fs.wasm"
[plugin.grant]
dirs = ["${workspace}:rw"]

[[plugin]]
id = "keyed"
path = "${plugin_dir}/llm-deepseek.wasm"
[plugin.config]
base_url = "http://127.0.0.1:9"
model = "deepseek-chat"
api_key_env = "WHARF_H3_KEY"
[plugin.grant]
env = ["WHARF_H3_KEY"]
hosts = ["127.0.0.1"]

[[plugin]]
id = "nokey"
path = "${plugin_dir}/llm-scripted.wasm"
[plugin.config]
model = "nokey"
turns = [{ text = "Hi." }]
"#;

#[test]
fn a_missing_model_key_is_said_at_start_once() {
    let _ = wharf_tests::plugin(plugins::LLM_DEEPSEEK);
    let e = env();
    let p = e.write("keyed.toml", KEYED_PROFILE);
    let said_once = |o: &Out, var: &str| {
        let all = format!("{}{}", o.stdout, o.stderr);
        assert_eq!(o.code, 2, "{all}");
        assert!(all.contains(&format!("{var} is not set")), "{all}");
        assert!(all.contains("--profile demo"), "suggests the demo profile: {all}");
        assert_eq!(all.matches("is not set").count(), 1, "said once: {all}");
    };
    let o = e.run_in(&["run", "Summarise.", "-p", &p]);
    said_once(&o, "WHARF_H3_KEY");
    let o = e.run_in(&["chat", "-p", &p]);
    said_once(&o, "WHARF_H3_KEY");
    // The default profile's adapter names DEEPSEEK_API_KEY (the harness
    // clears it).
    let o = e.run_in(&["run", "Summarise."]);
    said_once(&o, "DEEPSEEK_API_KEY");
    assert!(e.ids().is_empty(), "no session was started: {:?}", e.ids());
    // Another adapter picked with --model is checked instead.
    let o = e.run_in(&["run", "Summarise.", "-p", &p, "--model", "nokey"]);
    assert!(!o.stderr.contains("is not set"), "{}", o.stderr);
}

/// Runs a copy of `sdk/install-toolchains.sh` with `args` on a PATH holding
/// only stubs and basic tools: the Python and JavaScript toolchains are "at
/// their pins", clang, lld and cargo are not there.
fn install_toolchains(args: &[&str]) -> Out {
    let dir = tempfile::tempdir().expect("creating a temp dir");
    let sdk = dir.path().join("sdk");
    let bin = dir.path().join("bin");
    let js_bin = sdk.join("js/node_modules/.bin");
    for d in [&sdk, &bin, &js_bin] {
        std::fs::create_dir_all(d).expect("creating the stub directories");
    }
    let script_src = std::fs::read_to_string(wharf_tests::root().join("sdk/install-toolchains.sh"))
        .expect("reading sdk/install-toolchains.sh");
    let script = sdk.join("install-toolchains.sh");
    std::fs::write(&script, &script_src).expect("writing script");
    let pin = script_src
        .lines()
        .find_map(|l| l.strip_prefix("COMPONENTIZE_PY_VERSION="))
        .unwrap_or_else(|| panic!("no COMPONENTIZE_PY_VERSION pin"))
        .to_string();
    let stub = |path: &Path, body: &str| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(path, format!("#!/bin/sh\n{body}\n")).expect("writing a stub");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("making a stub executable");
    };
    stub(&bin.join("componentize-py"), &format!("echo componentize-py {pin}"));
    stub(&bin.join("rustup"), "echo wasm32-wasip2");
    stub(&js_bin.join("componentize-js"), "true");
    stub(&js_bin.join("esbuild"), "true");
    std::fs::write(sdk.join("js/package-lock.json"), "{}\n").expect("writing js/package-lock.json");
    let sum = Command::new("sha256sum").arg(sdk.join("js/package-lock.json")).output().expect("running sha256sum");
    let sum = String::from_utf8_lossy(&sum.stdout).split_whitespace().next().unwrap_or_default().to_string();
    std::fs::write(js_bin.parent().unwrap_or(&js_bin).join(".wharf-lock.sha256"), format!("{sum}\n"))
        .expect("writing .wharf-lock.sha256");
    let path = std::env::var_os("PATH").unwrap_or_default();
    for tool in ["awk", "sha256sum", "cat", "grep", "dirname", "sed", "env", "sh", "bash"] {
        let Some(real) = std::env::split_paths(&path).map(|d| d.join(tool)).find(|p| p.is_file()) else {
            panic!("{tool} not found on PATH");
        };
        std::os::unix::fs::symlink(real, bin.join(tool)).expect("linking a tool into the stub PATH");
    }
    let out = Command::new(bin.join("bash")).arg(&script).args(args).env("PATH", &bin).output().expect("running bash");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn install_toolchains_without_arguments_installs_what_it_can() {
    // The default set: C is skipped, naming what is missing and the flag.
    let o = install_toolchains(&[]);
    assert_eq!(o.code, 0, "stdout:\n{}\nstderr:\n{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("clang") && o.stderr.contains("lld"), "{}", o.stderr);
    assert!(o.stderr.contains("sdk/install-toolchains.sh --c"), "names the flag: {}", o.stderr);
    // Asked for, C is required.
    let o = install_toolchains(&["--c"]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stderr.contains("apt-get install clang lld wasi-libc"), "{}", o.stderr);
    // Asked for, Python and JavaScript are there.
    let o = install_toolchains(&["--python", "--js"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.is_empty(), "{}", o.stderr);
}

#[test]
fn run_reads_the_task_from_stdin() {
    let e = env();
    let o = e.run_with(&["run", "-", "-p", "demo"], Some("Summarise the workspace.\n"));
    assert_eq!(o.code, 0, "{}", o.stderr);
    let o2 = e.run_with(&["run", "-p", "demo"], Some("Summarise it again."));
    assert_eq!(o2.code, 0, "{}", o2.stderr);
    let mut prompts: Vec<String> = e.ids().iter().flat_map(|id| e.prompts(id)).collect();
    prompts.sort();
    // Without the newline that ends a piped line.
    assert_eq!(prompts, ["Summarise it again.", "Summarise the workspace."]);
    // An empty stdin is an empty task.
    let o = e.run_with(&["run", "-", "-p", "demo"], Some("  \n"));
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("the task is empty"), "{}", o.stderr);
}

#[test]
fn session_ids_resolve_by_any_unique_part() {
    let e = env();
    let a = e.session_of("demo");
    let b = e.session_of("demo");
    // The random suffix after `Z-` alone.
    let suffix = a.rsplit('-').next().unwrap_or_default().to_string();
    assert_eq!(suffix.len(), 8, "{a}");
    let o = e.run_in(&["sessions", "show", &suffix]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains(&format!("session {a}:")), "{}", o.stdout);
    let o = e.run_in(&["sessions", "export", &suffix[2..]]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let o = e.run_in(&["run", "Summarise.", "-p", "demo", "--resume", &suffix]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains(&format!("session {a} ")), "{}", o.stderr);
    // A part both hold (not a prefix): an error listing both.
    let o = e.run_in(&["sessions", "show", "Z-"]);
    assert_eq!(o.code, 2, "{}", o.stdout);
    assert!(o.stderr.contains("matches 2 sessions"), "{}", o.stderr);
    assert!(o.stderr.contains(&a) && o.stderr.contains(&b), "lists the matches: {}", o.stderr);
    let o = e.run_in(&["run", "x", "-p", "demo", "--resume", "Z-"]);
    assert_eq!(o.code, 2, "{}", o.stdout);
    assert!(o.stderr.contains(&a) && o.stderr.contains(&b), "{}", o.stderr);
}

#[test]
fn continue_with_another_profile_says_so() {
    let e = env();
    let o = e.run_in(&["run", "Summarise.", "-p", "demo"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let other = e.write(
        "other.toml",
        r#"
[agent]
adapter = "scripted"

[[plugin]]
id = "scripted"
path = "${plugin_dir}/llm-scripted.wasm"
[plugin.config]
turns = [{ text = "Continued." }]
"#,
    );
    let o = e.run_in(&["run", "Go on.", "-p", &other, "--continue"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("started with profile `demo`"), "{}", o.stderr);
    assert!(o.stderr.contains(&format!("with profile `{other}`")), "{}", o.stderr);
    // The same profile: nothing to say.
    let o = e.run_in(&["run", "Once more.", "-p", "demo", "--continue"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(!o.stderr.contains("started with profile"), "{}", o.stderr);
}

const SERVE_PROFILE: &str = r#"
[[plugin]]
id = "text"
path = "${plugin_dir}/text.wasm"
[plugin.grant]
dirs = ["${workspace}:ro"]
"#;

const INIT: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
const LIST: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
const CALL: &str =
    r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"word_count","arguments":{"path":"README.md"}}}"#;

/// `wharf mcp serve` given `frames` at once, then the end of input: the
/// JSON messages it wrote.
fn mcp_serve(e: &Env, profile: &str, frames: &[&str]) -> (Vec<Value>, String) {
    let mut c = e.cmd_in(&["mcp", "serve", "-p", profile]);
    c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().expect("spawning the command");
    let mut stdin = child.stdin.take().unwrap_or_else(|| panic!("no stdin"));
    let text: String = frames.iter().map(|f| format!("{f}\n")).collect();
    stdin.write_all(text.as_bytes()).expect("writing");
    drop(stdin);
    let mut out_pipe = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let mut err_pipe = child.stderr.take().unwrap_or_else(|| panic!("no stderr"));
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out_pipe.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err_pipe.read_to_string(&mut s);
        s
    });
    // It must exit on its own once everything is answered.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("polling the child") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("wharf mcp serve did not exit after the end of input: {}", err_reader.join().unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stdout = reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    assert!(status.success(), "wharf mcp serve exited with {status}: {stderr}");
    let msgs = wharf_tests::json_lines(&stdout).expect("wharf mcp serve prints JSON lines");
    (msgs, stderr)
}

#[test]
fn mcp_serve_answers_every_request_read_before_the_end_of_input() {
    let e = env();
    let p = e.write("serve.toml", SERVE_PROFILE);
    for run in 0..30 {
        let (msgs, stderr) = mcp_serve(&e, &p, &[INIT, INITIALIZED, LIST, CALL]);
        let answer = |id: i64| msgs.iter().find(|m| m["id"] == json!(id) && m.get("method").is_none()).cloned();
        let list = answer(2).unwrap_or_else(|| panic!("run {run}: no tools/list answer: {msgs:?}\n{stderr}"));
        assert!(list["result"]["tools"].as_array().is_some_and(|t| !t.is_empty()), "run {run}: {list}");
        let call = answer(3).unwrap_or_else(|| panic!("run {run}: no tools/call answer: {msgs:?}\n{stderr}"));
        assert_eq!(call["result"]["isError"], false, "run {run}: {call}");
    }
}

#[test]
fn mcp_serve_records_a_session_only_when_a_tool_is_called() {
    let e = env();
    let p = e.write("serve.toml", SERVE_PROFILE);
    let (msgs, stderr) = mcp_serve(&e, &p, &[INIT, INITIALIZED, LIST]);
    assert!(msgs.iter().any(|m| m["id"] == 2), "{msgs:?}");
    assert!(e.ids().is_empty(), "an MCP run without calls left sessions: {:?}\n{stderr}", e.ids());
    let o = e.run_in(&["sessions", "list", "--all"]);
    assert!(o.stdout.contains("no sessions"), "{}", o.stdout);
    let (msgs, stderr) = mcp_serve(&e, &p, &[INIT, INITIALIZED, CALL]);
    let call = msgs.iter().find(|m| m["id"] == 3).unwrap_or_else(|| panic!("{msgs:?}"));
    let ids = e.ids();
    assert_eq!(ids.len(), 1, "{stderr}");
    assert_eq!(call["result"]["_meta"]["wharf/session"], ids[0].as_str());
    assert!(stderr.contains(&format!("session {}", ids[0])), "{stderr}");
}
