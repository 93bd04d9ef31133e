//! MCP both ways, end to end with real processes:
//!
//! - `wharf mcp serve` driven by an rmcp client (tests/mcp-server, `client`
//!   mode): tools/list, sandboxed calls, a policy denial as a tool error, an
//!   unknown tool as a protocol error, `list_changed` on hot reload;
//! - the MCP client: `wharf mcp tools` against stdio and streamable-HTTP
//!   fixture servers and a broken one; on an in-process host, an agent
//!   session (servers from the profile's `[[mcp]]` rows) whose model calls
//!   `mcp__fx__*` tools through the policy pipeline, with a `list_changed`
//!   refresh between steps, and a required server from an `--mcp-config`
//!   file that fails; headless turns as `wharf run` runs them with
//!   `[[mcp]]` rows (stdio and HTTP, a policy denial, servers stopped when
//!   the host closes) and with a required server that fails (a clear
//!   error, exit 1); `wharf config dump` hiding secrets.
//!
//! The `wharf mcp serve`, `wharf mcp tools` and `wharf config dump` tests
//! are about those commands of the binary and spawn it.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Once;
use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};
use wharf_core::EventKind;
use wharf_core::events::StopReason;
use wharf_tests::host::TestHost;
use wharf_tests::plugins;

use crate::inproc;

static FIXTURE: Once = Once::new();

/// The fixture binary (`wharf-mcp-fixture`), built once.
pub(crate) fn fixture() -> PathBuf {
    let path = wharf_tests::target_dir().join("debug").join("wharf-mcp-fixture");
    FIXTURE.call_once(|| {
        let ok = wharf_tests::cargo()
            .current_dir(wharf_tests::root())
            .args(wharf_tests::MCP_FIXTURE_BUILD)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            eprintln!("cargo build -p wharf-mcp-fixture failed; using {} if it exists", path.display());
        }
    });
    assert!(path.exists(), "{} is missing (tests/mcp-server must be a workspace member)", path.display());
    path
}

fn wharf_bin() -> String {
    wharf_tests::wharf_bin().display().to_string()
}

const SERVE_PROFILE: &str = r#"
[[plugin]]
id = "text"
path = "TEXT_WASM"
[plugin.grant]
dirs = ["${workspace}:ro"]

[[plugin]]
id = "gate"
path = "${plugin_dir}/policy-fixed.wasm"
[plugin.config]
decision = "deny"
reason = "echo is not allowed here"
tools = ["echo"]

# Not started by `wharf mcp serve` (it would fail: the command is missing).
[[mcp]]
name = "loop"
command = "/nonexistent/mcp-server"
required = true
"#;

struct Served {
    home: tempfile::TempDir,
    ws: tempfile::TempDir,
    profile: PathBuf,
    text_wasm: PathBuf,
}

fn served() -> Served {
    let home = tempfile::tempdir().expect("creating a temp dir");
    let ws = tempfile::tempdir().expect("creating a temp dir");
    std::fs::write(ws.path().join("README.md"), "one two three\nfour five\n").expect("writing README.md");
    let text_wasm = home.path().join("text.wasm");
    std::fs::copy(wharf_tests::plugin(plugins::TEXT), &text_wasm).expect("copying the text component");
    let profile = home.path().join("serve.toml");
    std::fs::write(&profile, SERVE_PROFILE.replace("TEXT_WASM", &text_wasm.display().to_string()))
        .expect("writing profile");
    Served { home, ws, profile, text_wasm }
}

impl Served {
    /// The fixture client's command line for `wharf mcp serve`.
    fn client(&self, calls: &[(&str, Value)], extra: &[&str]) -> Command {
        let mut c = Command::new(fixture());
        c.arg("client");
        for (name, args) in calls {
            c.args(["--call", &format!("{name}={args}")]);
        }
        c.args(extra);
        c.arg("--").arg(wharf_bin()).args(["mcp", "serve", "--profile"]).arg(&self.profile);
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
fn serve_lists_and_calls_sandboxed_tools_and_denies_by_policy() -> anyhow::Result<()> {
    let s = served();
    let outside = tempfile::tempdir().context("creating a temp dir")?;
    std::fs::write(outside.path().join("secret.txt"), "not yours\n").context("writing secret.txt")?;
    let secret = outside.path().join("secret.txt").display().to_string();
    let calls = [
        ("word_count", json!({"path": "README.md"})),
        ("echo", json!({"text": "hi"})),
        ("nope", json!({})),
        ("word_count", json!({"path": secret})),
        ("word_count", json!({"path": 5})),
    ];
    let out = s.client(&calls, &[]).output().context("running the MCP client")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let report: Value =
        serde_json::from_str(stdout.trim()).with_context(|| format!("parsing JSON: {stdout}\n{stderr}"))?;
    assert_eq!(report["server"]["serverInfo"]["name"], "wharf");
    assert_eq!(report["server"]["capabilities"]["tools"]["listChanged"], true);
    let names: Vec<&str> =
        report["tools"].as_array().into_iter().flatten().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["echo", "regex_search", "word_count"]);
    let wc = report["tools"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == "word_count"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(wc["inputSchema"]["required"], json!(["path"]));

    let c = report["calls"].as_array().cloned().unwrap_or_default();
    // Allowed and sandboxed.
    assert_eq!(c[0]["result"]["isError"], false, "{}", c[0]);
    assert!(result_text(&c[0]).starts_with("2 lines, 5 words"), "{}", c[0]);
    assert_eq!(c[0]["result"]["_meta"]["wharf/plugin"], "text");
    // Denied by the policy: a tool error result, not a protocol error.
    assert_eq!(c[1]["result"]["isError"], true, "{}", c[1]);
    assert_eq!(c[1]["result"]["_meta"]["wharf/error_code"], "DENIED");
    assert!(result_text(&c[1]).contains("echo is not allowed here"), "{}", c[1]);
    // Unknown tool: a protocol error (-32602).
    assert!(c[2]["error"].as_str().is_some_and(|e| e.contains("-32602") && e.contains("nope")), "{}", c[2]);
    // Outside the grant: the sandbox refuses.
    assert_eq!(c[3]["result"]["isError"], true, "{}", c[3]);
    assert!(!result_text(&c[3]).contains("not yours"));
    // Bad arguments: the pipeline's guard.
    assert_eq!(c[4]["result"]["_meta"]["wharf/error_code"], "INVALID_ARGUMENTS", "{}", c[4]);

    // Every call is in the session log, well formed, with the policy's vote.
    let session = c[0]["result"]["_meta"]["wharf/session"].as_str().unwrap_or("").to_string();
    let events = wharf_core::SessionStore::new(s.home.path().join("sessions"))
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
    assert_eq!(results.len(), 4, "{results:?}");
    assert_eq!(results[1], ("echo".to_string(), Some("DENIED".to_string())));
    assert!(events.iter().any(|e| matches!(&e.kind, EventKind::PolicyDecision(d) if d.tool == "echo")));
    assert!(stderr.contains(&session), "the session is named on stderr: {stderr}");
    // The profile's own MCP servers were not started.
    assert!(
        !events.iter().any(|e| matches!(&e.kind, EventKind::PluginReloadFailed(c) if c.id.starts_with("mcp:"))),
        "{events:?}"
    );
    Ok(())
}

#[test]
fn serve_announces_list_changed_when_a_component_is_hot_reloaded() -> anyhow::Result<()> {
    let s = served();
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
    // Another component at the watched path: `text` now offers fs's tools.
    let tmp = s.text_wasm.with_extension("tmp");
    std::fs::copy(wharf_tests::plugin(plugins::FS), &tmp).context("copying the fs component")?;
    std::fs::rename(&tmp, &s.text_wasm).context("moving the new file in place")?;
    let out = child.wait_with_output().context("waiting for the process")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(stdout.trim()).with_context(|| format!("parsing JSON: {stdout}"))?;
    assert_eq!(report["list_changed"], true, "{report}");
    let names: Vec<&str> =
        report["relisted"].as_array().into_iter().flatten().filter_map(|t| t["name"].as_str()).collect();
    assert!(names.contains(&"read") && !names.contains(&"word_count"), "{names:?}");
    Ok(())
}

/// Starts the fixture's streamable HTTP server; its URL and the child.
pub(crate) fn http_fixture() -> (String, std::process::Child) {
    let mut child = Command::new(fixture())
        .arg("http")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawning the MCP fixture");
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("reading a line");
    (line.trim().to_string(), child)
}

pub(crate) struct Kill(pub(crate) std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn client_lists_tools_of_stdio_and_http_servers_and_reports_failures() -> anyhow::Result<()> {
    let (url, http) = http_fixture();
    let _http = Kill(http);
    let dir = tempfile::tempdir().context("creating a temp dir")?;
    let config = dir.path().join("mcp.json");
    let fx = fixture().display().to_string();
    let text = json!({"mcp": [
        {"name": "fx", "command": fx, "args": ["stdio"], "required": true},
        {"name": "remote", "url": url},
        {"name": "broken", "command": "/nonexistent/mcp-server"},
    ]});
    std::fs::write(&config, text.to_string()).context("writing config")?;
    let out = wharf_tests::wharf(dir.path())
        .args(["mcp", "tools", "--json", "--mcp-config"])
        .arg(&config)
        .arg("-w")
        .arg(dir.path())
        .output()
        .context("running wharf mcp tools")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "a server failed: {stdout}");
    let v: Value = serde_json::from_str(&stdout).with_context(|| format!("parsing JSON: {stdout}"))?;
    let state = |n: &str| {
        v["servers"].as_array().and_then(|s| s.iter().find(|s| s["server"] == n)).cloned().unwrap_or_default()
    };
    assert_eq!(state("fx")["state"], "ready");
    assert_eq!(state("fx")["transport"], "stdio");
    assert_eq!(state("fx")["server_info"]["name"], "wharf-mcp-fixture");
    assert_eq!(state("remote")["state"], "ready", "{}", state("remote"));
    assert_eq!(state("remote")["transport"], "http");
    assert_eq!(state("broken")["state"], "failed");
    assert!(state("broken")["error"].as_str().is_some_and(|e| e.contains("/nonexistent/mcp-server")));
    let names: Vec<&str> = v["tools"].as_array().into_iter().flatten().filter_map(|t| t["name"].as_str()).collect();
    for n in ["mcp__fx__echo", "mcp__fx__add", "mcp__remote__echo", "mcp__remote__grow"] {
        assert!(names.contains(&n), "{n} missing from {names:?}");
    }
    let echo = v["tools"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == "mcp__fx__echo"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(echo["input_schema"]["required"], json!(["text"]));

    // A malformed config is a usage error.
    std::fs::write(&config, r#"{"mcp": [{"name": "Bad Name", "command": "x"}]}"#).context("writing config")?;
    let out = wharf_tests::wharf(dir.path())
        .args(["mcp", "tools", "--mcp-config"])
        .arg(&config)
        .output()
        .context("running wharf mcp tools")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("Bad Name"), "{stderr}");
    Ok(())
}

const AGENT_PROFILE: &str = r#"
[agent]
adapter = "scripted"
max_steps = 10

[[plugin]]
id = "gate"
path = "${plugin_dir}/policy-fixed.wasm"
[plugin.config]
decision = "deny"
reason = "no sums"
tools = ["mcp__fx__add"]

[[plugin]]
id = "scripted"
path = "${plugin_dir}/llm-scripted.wasm"
[plugin.config]
model = "scripted-mcp"

[[plugin.config.turns]]
text = "Trying the MCP tools."
tool_calls = [
  { name = "mcp__fx__echo", arguments = { text = "hello over mcp" } },
  { name = "mcp__fx__add", arguments = { a = 2, b = 3 } },
  { name = "mcp__fx__fail", arguments = {} },
  { name = "mcp__fx__env", arguments = { name = "FIXTURE_VAR" } },
  { name = "mcp__fx__env", arguments = { name = "WHARF_TEST_SECRET" } },
  { name = "mcp__fx__grow", arguments = {} },
]

[[plugin.config.turns]]
text = "The list changed."
tool_calls = [
  { name = "mcp__fx__extra", arguments = {} },
  { name = "mcp__remote__add", arguments = { a = 1, b = 1 } },
  { name = "mcp__fx__env", arguments = { name = "FROM_HOST" } },
]

[[plugin.config.turns]]
text = "Done."
"#;

#[tokio::test(flavor = "multi_thread")]
async fn agent_calls_mcp_tools_through_the_pipeline_and_sees_list_changes() -> anyhow::Result<()> {
    let (url, http) = http_fixture();
    let _http = Kill(http);
    let fx = fixture().display().to_string();
    // The servers come from the profile; `${env:…}` reads the host's environment.
    let profile = format!(
        r#"{AGENT_PROFILE}
[[mcp]]
name = "fx"
command = "{fx}"
args = ["stdio"]
env = {{ FIXTURE_VAR = "from config", FROM_HOST = "${{env:WHARF_TEST_FORWARD}}" }}
required = true

[[mcp]]
name = "remote"
url = "{url}"
required = true
"#
    );
    // The host's environment has `WHARF_TEST_SECRET=leaked` and
    // `WHARF_TEST_FORWARD=forwarded` (`wharf_tests::host::TEST_ENV`).
    for p in [plugins::POLICY_FIXED, plugins::LLM_SCRIPTED] {
        let _ = wharf_tests::plugin(p);
    }
    let dir = tempfile::tempdir().context("creating a temp dir")?;
    let host = TestHost::builder().profile_text(profile).start_in(dir.path()).await?;
    let turn = inproc::turn(&host.harness, None, "use the MCP tools", None).await?;
    assert_eq!(turn.run.summary.reason, StopReason::Completed, "{:?}\n{}", turn.run.summary, turn.jsonl());

    let events = host.harness.store.load(&turn.run.session).context("loading the session")?.events;
    wharf_core::invariants::check(&events).map_err(anyhow::Error::msg).context("checking the log's invariants")?;
    let results: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolResult(r) => Some(r.clone()),
            _ => None,
        })
        .collect();
    let by = |i: usize| results.get(i).cloned().unwrap_or_else(|| panic!("result {i} missing: {results:?}"));
    assert_eq!((by(0).content.as_str(), by(0).is_error), ("hello over mcp", false));
    assert_eq!(by(0).plugin.as_deref(), Some("mcp:fx"));
    assert_eq!(by(0).version.as_ref().map(String::len), Some(64));
    // The policy saw the MCP tool like any other.
    assert_eq!(by(1).error_code.as_deref(), Some("DENIED"), "{:?}", by(1));
    assert!(by(1).content.contains("no sums"));
    assert_eq!(by(2).error_code.as_deref(), Some("MCP_TOOL_ERROR"));
    assert_eq!(by(2).content, "this tool always fails");
    // The server's environment: the configured variable, not the host's.
    assert_eq!(by(3).content, "from config");
    assert_eq!(by(4).content, "(unset)");
    assert_eq!(by(5).content, "grown");
    // `list_changed` refreshed the tools before the next step.
    assert_eq!((by(6).name.as_str(), by(6).content.as_str()), ("mcp__fx__extra", "extra!"), "{:?}", by(6));
    assert_eq!(by(7).content, "sum: 2");
    assert_eq!(by(7).details.as_ref().map(|d| d["mcp"]["structured_content"]["sum"].clone()), Some(json!(2.0)));

    assert_eq!(by(8).content, "forwarded");

    // Server states are in the log as `plugin/*` events of `mcp:NAME`.
    let loaded: Vec<(String, String)> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::PluginLoaded(c) if c.id.starts_with("mcp:") => Some((c.id.clone(), c.digest.clone())),
            _ => None,
        })
        .collect();
    assert!(loaded.iter().any(|(id, _)| id == "mcp:fx") && loaded.iter().any(|(id, _)| id == "mcp:remote"));
    // `grow` changed fx's tools: a new version loaded, the old one unloaded.
    let fx_versions: Vec<&String> = loaded.iter().filter(|(id, _)| id == "mcp:fx").map(|(_, d)| d).collect();
    assert_eq!(fx_versions.len(), 2, "{loaded:?}");
    assert!(events.iter().any(|e| matches!(&e.kind,
        EventKind::PluginUnloaded(c) if c.id == "mcp:fx" && &c.digest == fx_versions[0])));
    assert_eq!(by(6).version.as_ref(), Some(fx_versions[1]), "the call ran on the refreshed version");

    // The host's view of its plugins (what the web UI's plugins page shows)
    // lists the servers.
    let servers: Vec<String> = host.harness.plugins_view().mcp.into_iter().map(|s| s.server).collect();
    assert_eq!(servers, ["fx", "remote"]);
    host.close().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_required_server_that_fails_blocks_the_turn_with_its_error() -> anyhow::Result<()> {
    for p in [plugins::POLICY_FIXED, plugins::LLM_SCRIPTED] {
        let _ = wharf_tests::plugin(p);
    }
    let dir = tempfile::tempdir().context("creating a temp dir")?;
    let config = dir.path().join("mcp.json");
    let text = json!({"mcp": [{"name": "gone", "command": "/nonexistent/mcp-server", "required": true}]});
    std::fs::write(&config, text.to_string()).context("writing config")?;
    let (home, ws) = (dir.path().join("home"), dir.path().join("ws"));
    for d in [&home, &ws] {
        std::fs::create_dir_all(d).context("creating a directory")?;
    }
    let profile = dir.path().join("profile.toml");
    std::fs::write(&profile, AGENT_PROFILE).context("writing profile")?;
    // The servers of `--mcp-config FILE` added over the profile's, as
    // `wharf web` adds them.
    let options = inproc::options(&profile, &ws, &home, &dir.path().join("sessions"));
    let host = wharf_harness::Harness::start_with(&options, |c| wharf_mcp::config::add_file(c, Some(&config))).await?;
    let turn = inproc::turn(&host, None, "go", None).await;
    host.close().await;
    let turn = turn?;
    let seen = &turn.streamed;
    let end = seen.iter().find(|e| e["type"] == "turn/end").cloned().unwrap_or_default();
    assert_eq!(end["data"]["reason"], "blocked", "{end}");
    let msg = end["data"]["message"].as_str().unwrap_or("");
    assert!(msg.contains("required MCP server `gone`") && msg.contains("/nonexistent/mcp-server"), "{msg}");
    assert!(
        seen.iter().any(|e| e["type"] == "plugin/reload-failed"
            && e["data"]["id"] == "mcp:gone"
            && e["data"]["error"].as_str().is_some_and(|m| m.contains("/nonexistent/mcp-server"))),
        "{seen:?}"
    );
    assert!(!seen.iter().any(|e| e["type"] == "step/start"), "no model request was made");
    Ok(())
}

/// A temp home, workspace and profile for headless turns.
struct Run {
    home: tempfile::TempDir,
    ws: tempfile::TempDir,
}

impl Run {
    fn new() -> Self {
        for p in [plugins::LLM_SCRIPTED, plugins::POLICY_RULES] {
            let _ = wharf_tests::plugin(p);
        }
        let home = tempfile::tempdir().expect("creating a temp dir");
        let ws = tempfile::tempdir().expect("creating a temp dir");
        Self { home, ws }
    }

    fn profile(&self, text: &str) -> PathBuf {
        let path = self.home.path().join("profile.toml");
        std::fs::write(&path, text).expect("writing the file");
        path
    }

    fn sessions(&self) -> PathBuf {
        self.home.path().join("sessions")
    }

    /// A headless turn "go" on an in-process host, closed after it (as
    /// `wharf run` exits): exit code, session id, and what the binary
    /// would print on stderr (an MCP server not ready, notices, the log).
    async fn run(&self, profile: &std::path::Path) -> (i32, String, String) {
        let mark = inproc::log_mark();
        let host = TestHost::builder()
            .profile(profile.display().to_string())
            .workspace(self.ws.path())
            .home(self.home.path())
            .sessions(self.sessions())
            .start_in(self.home.path())
            .await
            .expect("starting the host");
        let turn = inproc::turn(&host.harness, None, "go", None).await.expect("running the turn");
        let mut stderr: String = turn.mcp_error.iter().map(|e| format!("wharf: {e}\n")).collect();
        stderr.extend(host.notices().iter().map(|n| format!("wharf: {n}\n")));
        host.close().await;
        stderr.push_str(&inproc::logs_since(mark));
        (turn.run.exit_code(), turn.run.session, stderr)
    }

    fn log(&self, id: &str) -> Vec<wharf_core::events::Event> {
        let events = wharf_core::SessionStore::new(self.sessions())
            .load(id)
            .with_context(|| format!("loading session {id}"))
            .expect("the session log loads")
            .events;
        wharf_core::invariants::check(&events).expect("checking the log's invariants");
        events
    }
}

const RUN_PROFILE: &str = r#"
[agent]
adapter = "scripted"
max_steps = 5

[[plugin]]
id = "rules"
path = "${plugin_dir}/policy-rules.wasm"
[plugin.config]
mode = "full-access"
[[plugin.config.rules]]
tool = "mcp__fx__add"
action = "deny"
reason = "no sums over MCP"

[[plugin]]
id = "scripted"
path = "${plugin_dir}/llm-scripted.wasm"
[plugin.config]
model = "scripted-mcp-run"

[[plugin.config.turns]]
text = "Using MCP."
tool_calls = [
  { name = "mcp__fx__echo", arguments = { text = "over stdio" } },
  { name = "mcp__fx__add", arguments = { a = 2, b = 3 } },
  { name = "mcp__fx__pid", arguments = {} },
  { name = "mcp__remote__echo", arguments = { text = "over http" } },
]

[[plugin.config.turns]]
text = "Done."
"#;

#[tokio::test(flavor = "multi_thread")]
async fn run_uses_profile_mcp_servers_through_the_policy_pipeline_and_stops_them() -> anyhow::Result<()> {
    let (url, http) = http_fixture();
    let _http = Kill(http);
    let r = Run::new();
    let fx = fixture().display().to_string();
    let profile = r.profile(&format!(
        "{RUN_PROFILE}\n[[mcp]]\nname = \"fx\"\ncommand = \"{fx}\"\nargs = [\"stdio\", \"--linger\"]\nrequired = true\n\n\
         [[mcp]]\nname = \"remote\"\nurl = \"{url}\"\nrequired = true\n"
    ));
    let (code, id, stderr) = r.run(&profile).await;
    assert_eq!(code, 0, "{stderr}");
    let events = r.log(&id);
    let results: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolResult(t) => Some(t.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 4, "{results:?}");
    assert_eq!((results[0].content.as_str(), results[0].plugin.as_deref()), ("over stdio", Some("mcp:fx")));
    assert_eq!(results[1].error_code.as_deref(), Some("DENIED"), "{:?}", results[1]);
    assert!(results[1].content.contains("no sums over MCP"), "{:?}", results[1]);
    assert!(events.iter().any(|e| matches!(&e.kind, EventKind::PolicyDecision(d) if d.tool == "mcp__fx__add")));
    assert_eq!((results[3].content.as_str(), results[3].plugin.as_deref()), ("over http", Some("mcp:remote")));
    // Connections are logged as plugin loads, before the turn.
    let loaded = |id: &str| {
        events.iter().position(|e| matches!(&e.kind, EventKind::PluginLoaded(c) if c.id == id && c.kinds == ["tool"]))
    };
    let turn = events.iter().position(|e| matches!(e.kind, EventKind::TurnStart(_)));
    assert!(loaded("mcp:fx") < turn && loaded("mcp:remote") < turn, "{events:?}");
    assert!(loaded("mcp:fx").is_some() && loaded("mcp:remote").is_some());

    // The stdio server's process is gone once the host has closed (as
    // `wharf run` closes it at exit), though it ignores its closed stdin
    // (`--linger`): wharf ended it.
    let pid: u32 = results[2]
        .content
        .trim()
        .parse()
        .with_context(|| format!("parsing results[2].content.trim(): {:?}", results[2]))?;
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while proc.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!proc.exists(), "the MCP server (pid {pid}) outlived the host");
    Ok(())
}

/// Issue 40: headless (`wharf run`), nobody can answer a server's
/// elicitation: it is declined at once, the tool result says so, and both
/// ends are logged and shown by the transcript renderer (`sessions show`).
#[tokio::test(flavor = "multi_thread")]
async fn run_declines_mcp_elicitation_and_logs_it() -> anyhow::Result<()> {
    let r = Run::new();
    let fx = fixture().display().to_string();
    let profile = r.profile(&format!(
        r#"
[agent]
adapter = "scripted"
max_steps = 5

[[plugin]]
id = "scripted"
path = "${{plugin_dir}}/llm-scripted.wasm"
[plugin.config]
model = "scripted-elicit"
[[plugin.config.turns]]
tool_calls = [{{ name = "mcp__fx__ask", arguments = {{}} }}]
[[plugin.config.turns]]
text = "Done."

[[mcp]]
name = "fx"
command = "{fx}"
args = ["stdio", "--elicit"]
required = true
"#
    ));
    let (code, id, stderr) = r.run(&profile).await;
    assert_eq!(code, 0, "{stderr}");
    let events = r.log(&id);
    let result = events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ToolResult(t) => Some(t.clone()),
            _ => None,
        })
        .context("no tool result")?;
    assert_eq!(result.content, "declined", "{result:?}");
    assert!(stderr.contains("headless mode: nobody can answer `mcp:fx`'s question"), "{stderr}");
    let out = wharf_tests::wharf(r.home.path())
        .args(["sessions", "show", &id, "--session-dir", &r.sessions().display().to_string()])
        .output()?;
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("? mcp:fx asks: Who is asking? [name, count, ok]"), "{shown}");
    assert!(shown.contains("↳ decline (by headless) — headless mode"), "{shown}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn run_fails_clearly_when_a_required_server_cannot_start() {
    let r = Run::new();
    let profile = r.profile(&format!(
        "{RUN_PROFILE}\n[[mcp]]\nname = \"gone\"\ncommand = \"/nonexistent/mcp-server\"\nrequired = true\n\
         startup_timeout_ms = 5000\n"
    ));
    let (code, id, stderr) = r.run(&profile).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("required MCP server `gone` is not available") && stderr.contains("/nonexistent/mcp-server"),
        "{stderr}"
    );
    let events = r.log(&id);
    assert!(events.iter().any(|e| matches!(&e.kind,
        EventKind::PluginReloadFailed(c) if c.id == "mcp:gone" && c.error.as_deref().is_some_and(|m| m.contains("/nonexistent")))));
    assert!(
        events.iter().any(|e| matches!(&e.kind, EventKind::TurnEnd(t)
            if matches!(&t.reason, wharf_core::events::StopReason::Blocked { message } if message.contains("`gone`")))),
        "{events:?}"
    );
    assert!(!events.iter().any(|e| matches!(e.kind, EventKind::StepStart(_))), "no model request was made");
}

// On the binary: `wharf config dump` is a CLI command.
#[test]
fn config_dump_shows_mcp_rows_without_secrets() -> anyhow::Result<()> {
    let r = Run::new();
    let profile = r.profile(
        "[[mcp]]\nname = \"search\"\nurl = \"https://mcp.example.com/mcp\"\n\
         headers = { Authorization = \"Bearer literal-secret\" }\n\n\
         [[mcp]]\nname = \"files\"\ncommand = \"files-server\"\nenv = { TOKEN = \"${env:FILES_TOKEN}\" }\n",
    );
    for json in [false, true] {
        let mut c = wharf_tests::wharf(r.home.path());
        c.current_dir(r.ws.path()).args(["config", "dump", "--profile"]).arg(&profile);
        if json {
            c.arg("--json");
        }
        let out = c.output().context("running the command")?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("files-server") && stdout.contains("Authorization"), "{stdout}");
        assert!(!stdout.contains("literal-secret") && !stdout.contains("FILES_TOKEN"), "{stdout}");
    }
    Ok(())
}

/// `wharf mcp serve` answers every line it cannot take as JSON-RPC: a line
/// that is not JSON gets `-32700` with `"id": null`, a JSON value that is
/// not a valid request gets `-32600` with the request's `id` (null when it
/// has none or an invalid one); well-formed notifications and responses it
/// cannot use get nothing; and the next request is served.
#[test]
fn serve_answers_malformed_and_invalid_lines_with_json_rpc_errors() -> anyhow::Result<()> {
    use std::io::Write;
    let s = served();
    let mut child = Command::new(wharf_bin())
        .args(["mcp", "serve", "--profile"])
        .arg(&s.profile)
        .arg("-w")
        .arg(s.ws.path())
        .arg("--session-dir")
        .arg(s.home.path().join("sessions"))
        .env("HOME", s.home.path())
        .env("WHARF_CACHE_DIR", wharf_tests::target_dir().join("test-cache"))
        .env("WHARF_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("spawning wharf mcp serve")?;
    let mut stdin = child.stdin.take().unwrap_or_else(|| panic!("no stdin"));
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut send = move |line: &str| -> anyhow::Result<()> {
        stdin.write_all(line.as_bytes()).and_then(|()| stdin.write_all(b"\n")).context("writing to wharf mcp serve")?;
        stdin.flush().context("writing to wharf mcp serve")
    };
    let next = |what: &str| -> anyhow::Result<Value> {
        let line = rx.recv_timeout(Duration::from_secs(60)).with_context(|| format!("no reply to {what}"))?;
        serde_json::from_str(&line).with_context(|| format!("the reply to {what} is not JSON: {line}"))
    };
    send(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#,
    )?;
    let init = next("initialize")?;
    assert_eq!(init["id"], 1, "{init}");
    assert_eq!(init["result"]["serverInfo"]["name"], "wharf", "{init}");
    send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)?;

    // (line, expected code, expected id)
    let cases: &[(&str, i64, Value)] = &[
        (r#"{"jsonrpc": "2.0", "id": 2, "method": "#, -32700, Value::Null),
        ("this is not json", -32700, Value::Null),
        (r#"{"jsonrpc":"2.0","id":"a","method":"tools/list"} trailing"#, -32700, Value::Null),
        (r#"{"jsonrpc":"2.0","id":3}"#, -32600, json!(3)),
        (r#"{"jsonrpc":"1.0","id":4,"method":"tools/list"}"#, -32600, json!(4)),
        (r#"{"id":"five","method":"tools/list"}"#, -32600, json!("five")),
        (r#"{"jsonrpc":"2.0","id":6,"method":7}"#, -32600, json!(6)),
        (r#"{"jsonrpc":"2.0","id":7,"method":"tools/list","params":"x"}"#, -32600, json!(7)),
        (r#"{"jsonrpc":"2.0","id":{"x":1},"method":"tools/list"}"#, -32600, Value::Null),
        // A known method with params it cannot take.
        (r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":5}}"#, -32602, json!(8)),
        ("[]", -32600, Value::Null),
        ("42", -32600, Value::Null),
        (r#"[{"jsonrpc":"2.0","id":9,"method":"tools/list"}]"#, -32600, Value::Null),
        // Not even a valid notification (params must be structured).
        (r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":"x"}"#, -32600, Value::Null),
        (r#"{"jsonrpc":"2.0","method":7}"#, -32600, Value::Null),
        // Valid, but no such method: rmcp's own answer, with the id.
        (r#"{"jsonrpc":"2.0","id":11,"method":"no/such/method"}"#, -32601, json!(11)),
    ];
    for (line, code, id) in cases {
        send(line)?;
        let r = next(line)?;
        assert_eq!(r["jsonrpc"], "2.0", "{line} → {r}");
        assert_eq!(r["error"]["code"], *code, "{line} → {r}");
        assert!(r.as_object().is_some_and(|o| o.contains_key("id")), "the error has an id member: {line} → {r}");
        assert_eq!(r["id"], *id, "{line} → {r}");
        assert!(r["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{r}");
    }
    // Well-formed notifications and responses are never answered, even
    // ones rmcp cannot use; the next request is served and answered first.
    send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{}}"#)?;
    send(r#"{"jsonrpc":"2.0","method":"no/such/notification","params":{"a":1}}"#)?;
    send(r#"{"jsonrpc":"2.0","id":99,"result":{}}"#)?;
    send("")?;
    send(r#"{"jsonrpc":"2.0","id":10,"method":"tools/list"}"#)?;
    let list = next("tools/list")?;
    assert_eq!(list["id"], 10, "{list}");
    let names: Vec<&str> =
        list["result"]["tools"].as_array().into_iter().flatten().filter_map(|t| t["name"].as_str()).collect();
    assert!(names.contains(&"word_count"), "{list}");
    drop(send);
    let status = child.wait().context("waiting for the process")?;
    assert!(status.success(), "wharf mcp serve exited with {status}");
    assert!(rx.try_recv().is_err(), "nothing else was sent");
    Ok(())
}

/// `wharf mcp serve` on stdio, driven line by line: requests and replies.
struct Raw {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    rx: std::sync::mpsc::Receiver<String>,
}

impl Raw {
    fn start(s: &Served) -> anyhow::Result<Self> {
        let mut child = Command::new(wharf_bin())
            .args(["mcp", "serve", "--profile"])
            .arg(&s.profile)
            .arg("-w")
            .arg(s.ws.path())
            .arg("--session-dir")
            .arg(s.home.path().join("sessions"))
            .env("HOME", s.home.path())
            .env("WHARF_CACHE_DIR", wharf_tests::target_dir().join("test-cache"))
            .env("WHARF_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("spawning wharf mcp serve")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let stdin = child.stdin.take();
        Ok(Self { child, stdin, rx })
    }

    fn send(&mut self, v: &Value) -> anyhow::Result<()> {
        use std::io::Write;
        let stdin = self.stdin.as_mut().context("stdin closed")?;
        writeln!(stdin, "{v}").and_then(|()| stdin.flush()).context("writing to wharf mcp serve")
    }

    /// The next line from the server.
    fn next(&self, what: &str) -> anyhow::Result<Value> {
        let line = self.rx.recv_timeout(Duration::from_secs(120)).with_context(|| format!("no line for {what}"))?;
        serde_json::from_str(&line).with_context(|| format!("the line for {what} is not JSON: {line}"))
    }

    /// Sends a request and returns the response with its id (notifications
    /// that come first are skipped).
    fn request(&mut self, id: i64, method: &str, params: Value) -> anyhow::Result<Value> {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        loop {
            let v = self.next(method)?;
            if v["id"] == id {
                return Ok(v);
            }
        }
    }

    fn close(mut self) -> anyhow::Result<()> {
        drop(self.stdin.take());
        let status = self.child.wait().context("waiting for the process")?;
        anyhow::ensure!(status.success(), "wharf mcp serve exited with {status}");
        Ok(())
    }
}

/// The 2026-07-28 `_meta` every stateless request carries.
fn meta_2026(version: &str) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

/// MCP 2026-07-28 on stdio next to the handshake revisions: the client's
/// version decides. Without `initialize`, `server/discover` lists both
/// revisions, requests carrying the version in `_meta` are served (a call
/// through the pipeline included), an unknown version is refused naming the
/// supported ones, a request without the `_meta` is refused, and a hot
/// reload reaches the `subscriptions/listen` stream. An `initialize` asking
/// for 2026-07-28 (which has no handshake) gets 2025-11-25; one asking for
/// 2025-11-25 gets it.
#[test]
fn serve_negotiates_2026_07_28_per_request_and_2025_11_25_by_initialize() -> anyhow::Result<()> {
    let s = served();
    let mut raw = Raw::start(&s)?;
    let found = raw.request(1, "server/discover", json!({"_meta": meta_2026("2026-07-28")}))?;
    let versions: Vec<&str> =
        found["result"]["supportedVersions"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    assert!(versions.contains(&"2026-07-28") && versions.contains(&"2025-11-25"), "{found}");
    assert_eq!(found["result"]["capabilities"]["tools"]["listChanged"], true, "{found}");

    let list = raw.request(2, "tools/list", json!({"_meta": meta_2026("2026-07-28")}))?;
    let names: Vec<&str> =
        list["result"]["tools"].as_array().into_iter().flatten().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["echo", "regex_search", "word_count"], "{list}");
    let call = raw.request(
        3,
        "tools/call",
        json!({"name": "word_count", "arguments": {"path": "README.md"}, "_meta": meta_2026("2026-07-28")}),
    )?;
    assert_eq!(call["result"]["isError"], false, "{call}");
    assert!(call["result"]["content"][0]["text"].as_str().is_some_and(|t| t.starts_with("2 lines, 5 words")), "{call}");
    assert_eq!(call["result"]["_meta"]["wharf/plugin"], "text", "{call}");
    let denied = raw.request(
        4,
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "hi"}, "_meta": meta_2026("2026-07-28")}),
    )?;
    assert_eq!(denied["result"]["_meta"]["wharf/error_code"], "DENIED", "{denied}");

    let unknown = raw.request(5, "tools/list", json!({"_meta": meta_2026("2099-01-01")}))?;
    assert_eq!(unknown["error"]["code"], -32022, "{unknown}");
    let supported: Vec<&str> =
        unknown["error"]["data"]["supported"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    assert!(supported.contains(&"2026-07-28"), "{unknown}");
    let bare = raw.request(6, "tools/list", json!({}))?;
    assert_eq!(bare["error"]["code"], -32602, "{bare}");

    // Hot reload: the change arrives on the listen stream, tagged with it.
    raw.send(&json!({"jsonrpc": "2.0", "id": 7, "method": "subscriptions/listen",
        "params": {"notifications": {"toolsListChanged": true}, "_meta": meta_2026("2026-07-28")}}))?;
    let ack = raw.next("the subscription's acknowledgement")?;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged", "{ack}");
    assert_eq!(ack["params"]["notifications"]["toolsListChanged"], true, "{ack}");
    let tmp = s.text_wasm.with_extension("tmp");
    std::fs::copy(wharf_tests::plugin(plugins::FS), &tmp).context("copying the fs component")?;
    std::fs::rename(&tmp, &s.text_wasm).context("moving the new file in place")?;
    let changed = raw.next("tools/list_changed")?;
    assert_eq!(changed["method"], "notifications/tools/list_changed", "{changed}");
    assert_eq!(changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 7, "{changed}");
    raw.send(&json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}}))?;
    raw.close()?;

    for (asked, answered) in [("2026-07-28", "2025-11-25"), ("2025-11-25", "2025-11-25")] {
        let mut raw = Raw::start(&s)?;
        let init = raw.request(
            1,
            "initialize",
            json!({"protocolVersion": asked, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}),
        )?;
        assert_eq!(init["result"]["protocolVersion"], answered, "{asked}: {init}");
        raw.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
        let list = raw.request(2, "tools/list", json!({}))?;
        assert!(list["result"]["tools"].as_array().is_some_and(|t| !t.is_empty()), "{asked}: {list}");
        raw.close()?;
    }
    Ok(())
}
