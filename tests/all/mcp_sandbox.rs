//! Stdio MCP servers under the OS sandbox (`[[mcp]]` rows, headless turns
//! with the scripted model, the fixture server of tests/mcp-server): a
//! confined server that tries to read `~/.ssh/id_rsa` (a fake HOME), write
//! outside its grant and open a TCP connection is refused each time, while
//! its granted writes and ordinary reads work; an `unsandboxed = true` row
//! does all of it; a missing grant fails clearly (on an in-process host);
//! `wharf doctor` reports each row's confinement.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::Value;
use wharf_core::EventKind;
use wharf_core::events::ToolResultEvent as ToolResult;
use wharf_runtime::process::{Level, sandbox_level};
use wharf_tests::host::TestHost;
use wharf_tests::plugins;

use crate::inproc;

/// Whether this machine has the OS sandbox (else sandboxed rows refuse to
/// start): what `wharf doctor` reports as `process sandbox: …`.
pub(crate) fn sandbox_available() -> Result<(), String> {
    let (level, detail) = sandbox_level();
    if level == Level::None { Err(format!("process sandbox: {level:?} — {detail}")) } else { Ok(()) }
}

pub(crate) struct Env {
    pub(crate) home: tempfile::TempDir,
    pub(crate) ws: tempfile::TempDir,
    pub(crate) grant: tempfile::TempDir,
    pub(crate) outside: tempfile::TempDir,
}

impl Env {
    pub(crate) fn new() -> Self {
        for p in [plugins::LLM_SCRIPTED, plugins::POLICY_RULES] {
            let _ = wharf_tests::plugin(p);
        }
        let t = || tempfile::tempdir().expect("creating a temp dir");
        let env = Self { home: t(), ws: t(), grant: t(), outside: t() };
        let ssh = env.home.path().join(".ssh");
        std::fs::create_dir_all(&ssh).expect("creating ssh");
        std::fs::write(ssh.join("id_rsa"), "-----BEGIN FAKE KEY-----\n").expect("writing id_rsa");
        std::fs::write(env.ws.path().join("README.md"), "workspace readme\n").expect("writing README.md");
        env
    }

    pub(crate) fn p(dir: &tempfile::TempDir, rel: &str) -> String {
        dir.path().join(rel).display().to_string()
    }

    pub(crate) fn profile(&self, body: &str) -> PathBuf {
        let path = self.home.path().join("profile.toml");
        std::fs::write(&path, body).expect("writing the file");
        path
    }

    /// `wharf run` with the profile and these host variables: exit code,
    /// session events, stderr.
    pub(crate) fn run_binary(
        &self,
        profile: &Path,
        vars: &[(&str, &str)],
    ) -> (i32, Vec<wharf_core::events::Event>, String) {
        let sessions = self.home.path().join("sessions");
        let out = wharf_tests::wharf(self.home.path())
            .current_dir(self.ws.path())
            .envs(vars.iter().copied())
            .args(["run", "go", "--output", "jsonl", "--profile"])
            .arg(profile)
            .arg("--session-dir")
            .arg(&sessions)
            .output()
            .expect("running wharf run go");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let first: Value = serde_json::from_str(stdout.lines().next().unwrap_or("{}")).unwrap_or_default();
        let id = first["data"]["id"].as_str().unwrap_or("").to_string();
        let events = wharf_core::SessionStore::new(sessions)
            .load(&id)
            .with_context(|| format!("no session log; stderr: {stderr}"))
            .expect("the run leaves a session log")
            .events;
        wharf_core::invariants::check(&events).expect("checking the log's invariants");
        (out.status.code().unwrap_or(-1), events, stderr)
    }

    /// A headless turn "go" on an in-process host with the profile, closed
    /// after it (as `wharf run` exits): exit code, session events, and what
    /// the binary would print on stderr (an MCP server not ready, notices).
    async fn run(&self, profile: &Path) -> (i32, Vec<wharf_core::events::Event>, String) {
        let sessions = self.home.path().join("sessions");
        let host = TestHost::builder()
            .profile(profile.display().to_string())
            .workspace(self.ws.path())
            .home(self.home.path())
            .sessions(&sessions)
            .start_in(self.home.path())
            .await
            .expect("starting the host");
        let turn = inproc::turn(&host.harness, None, "go", None).await.expect("running the turn");
        let mut stderr: String = turn.mcp_error.iter().map(|e| format!("wharf: {e}\n")).collect();
        stderr.extend(host.notices().iter().map(|n| format!("wharf: {n}\n")));
        host.close().await;
        let events = wharf_core::SessionStore::new(sessions)
            .load(&turn.run.session)
            .with_context(|| format!("no session log; stderr: {stderr}"))
            .expect("the run leaves a session log")
            .events;
        wharf_core::invariants::check(&events).expect("checking the log's invariants");
        (turn.run.exit_code(), events, stderr)
    }
}

pub(crate) fn results(events: &[wharf_core::events::Event]) -> Vec<ToolResult> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolResult(t) => Some(t.clone()),
            _ => None,
        })
        .collect()
}

/// The scripted model's one turn: these calls, in order.
pub(crate) fn profile_with(calls: &[(String, String)], rows: &str) -> String {
    let calls: Vec<String> =
        calls.iter().map(|(name, args)| format!("  {{ name = \"{name}\", arguments = {args} }},")).collect();
    format!(
        r#"
[agent]
adapter = "scripted"
max_steps = 5

[[plugin]]
id = "rules"
path = "${{plugin_dir}}/policy-rules.wasm"
[plugin.config]
mode = "full-access"

[[plugin]]
id = "scripted"
path = "${{plugin_dir}}/llm-scripted.wasm"
[plugin.config]
model = "scripted-mcp-sandbox"

[[plugin.config.turns]]
text = "Trying."
tool_calls = [
{}
]

[[plugin.config.turns]]
text = "Done."
{rows}
"#,
        calls.join("\n")
    )
}

pub(crate) fn call(tool: &str, args: &str) -> (String, String) {
    (tool.to_string(), args.to_string())
}

// On the binary: the sandbox protects `~/.ssh` of the host process's HOME,
// which only a child process can have pointing at a fake home.
#[test]
fn a_sandboxed_server_is_refused_secrets_foreign_writes_and_network_an_opt_out_is_not() -> anyhow::Result<()> {
    let env = Env::new();
    if let Err(line) = sandbox_available() {
        wharf_tests::skip(&wharf_tests::current_test(), &format!("no OS sandbox here: {line}"));
        return Ok(());
    }
    let fx = crate::mcp::fixture().display().to_string();
    let key = Env::p(&env.home, ".ssh/id_rsa");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding a local port")?;
    let addr = listener.local_addr().context("reading the local address")?.to_string();
    let granted = Env::p(&env.grant, "granted.txt");
    let jail_out = Env::p(&env.outside, "jail.txt");
    let free_out = Env::p(&env.outside, "free.txt");
    let readme = Env::p(&env.ws, "README.md");
    let in_ws = Env::p(&env.ws, "jail.txt");
    let calls = [
        call("mcp__jail__read_file", &format!("{{ path = \"{key}\" }}")),
        call("mcp__jail__write_file", &format!("{{ path = \"{jail_out}\", text = \"escaped\" }}")),
        call("mcp__jail__write_file", &format!("{{ path = \"{in_ws}\", text = \"escaped\" }}")),
        call("mcp__jail__connect", &format!("{{ addr = \"{addr}\" }}")),
        call("mcp__jail__write_file", &format!("{{ path = \"{granted}\", text = \"granted\" }}")),
        call("mcp__jail__read_file", &format!("{{ path = \"{readme}\" }}")),
        call("mcp__jail__env", "{ name = \"HOST_ONLY\" }"),
        call("mcp__jail__env", "{ name = \"PASSED\" }"),
        call("mcp__free__read_file", &format!("{{ path = \"{key}\" }}")),
        call("mcp__free__write_file", &format!("{{ path = \"{free_out}\", text = \"free\" }}")),
        call("mcp__free__connect", &format!("{{ addr = \"{addr}\" }}")),
    ];
    let rows = format!(
        "\n[[mcp]]\nname = \"jail\"\ncommand = \"{fx}\"\nargs = [\"stdio\"]\nrequired = true\n\
         [mcp.sandbox]\ndirs = [\"{}:rw\"]\nenv = [\"PASSED\"]\n\n\
         [[mcp]]\nname = \"free\"\ncommand = \"{fx}\"\nargs = [\"stdio\"]\nrequired = true\nunsandboxed = true\n",
        env.grant.path().display()
    );
    let profile = env.profile(&profile_with(&calls, &rows));
    // The host has both variables; only the granted one reaches the jail.
    let (code, events, stderr) = env.run_binary(&profile, &[("HOST_ONLY", "host secret"), ("PASSED", "passed value")]);
    assert_eq!(code, 0, "{stderr}");
    let r = results(&events);
    assert_eq!(r.len(), calls.len(), "{r:?}");
    let refused = |i: usize, what: &str| {
        assert!(r[i].is_error, "call {i} should fail: {:?}", r[i]);
        assert_eq!(r[i].error_code.as_deref(), Some("MCP_TOOL_ERROR"), "{:?}", r[i]);
        assert!(r[i].content.contains(what), "call {i}: {:?}", r[i]);
    };
    let worked = |i: usize, text: &str| {
        assert!(!r[i].is_error, "call {i} should work: {:?}", r[i]);
        assert!(r[i].content.contains(text), "call {i}: {:?}", r[i]);
    };
    // Confined: the key, writes outside the grant (the workspace included),
    // and the network are refused by the kernel.
    refused(0, "Permission denied");
    assert!(!r[0].content.contains("FAKE KEY"));
    refused(1, "Permission denied");
    refused(2, "Permission denied");
    refused(3, "connect failed");
    assert!(!Path::new(&jail_out).exists() && !Path::new(&in_ws).exists());
    // What is granted works; other reads work.
    worked(4, "wrote 7 bytes");
    assert_eq!(std::fs::read_to_string(&granted).unwrap_or_default(), "granted");
    worked(5, "workspace readme");
    worked(6, "(unset)");
    worked(7, "passed value");
    // The opt-out row has the user's full authority.
    worked(8, "FAKE KEY");
    worked(9, "wrote 4 bytes");
    assert_eq!(std::fs::read_to_string(&free_out).unwrap_or_default(), "free");
    worked(10, "connected");
    drop(listener);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sandboxed_server_with_a_missing_grant_fails_clearly() {
    let env = Env::new();
    if let Err(line) = sandbox_available() {
        wharf_tests::skip(&wharf_tests::current_test(), &format!("no OS sandbox here: {line}"));
        return;
    }
    let fx = crate::mcp::fixture().display().to_string();
    let gone = Env::p(&env.outside, "gone");
    let rows = format!(
        "\n[[mcp]]\nname = \"jail\"\ncommand = \"{fx}\"\nargs = [\"stdio\"]\nrequired = true\n\
         [mcp.sandbox]\ndirs = [\"{gone}:rw\"]\n"
    );
    let profile = env.profile(&profile_with(&[call("mcp__jail__echo", "{ text = \"x\" }")], &rows));
    let (code, events, stderr) = env.run(&profile).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("required MCP server `jail` is not available") && stderr.contains(&gone), "{stderr}");
    assert!(results(&events).is_empty());
}

// On the binary: `wharf doctor` is a CLI command.
#[test]
fn doctor_reports_each_servers_confinement() -> anyhow::Result<()> {
    let env = Env::new();
    let rows = format!(
        "[[mcp]]\nname = \"jail\"\ncommand = \"srv\"\n[mcp.sandbox]\ndirs = [\"{}:rw\", \"{}:ro\"]\nnetwork = true\n\
         env = [\"GITHUB_TOKEN\"]\n\n\
         [[mcp]]\nname = \"bare\"\ncommand = \"srv\"\n\n\
         [[mcp]]\nname = \"free\"\ncommand = \"srv\"\nunsandboxed = true\n\n\
         [[mcp]]\nname = \"broken\"\ncommand = \"srv\"\n[mcp.sandbox]\ndirs = [\"{}:rw\"]\n\n\
         [[mcp]]\nname = \"remote\"\nurl = \"http://127.0.0.1:9/mcp\"\n",
        env.grant.path().display(),
        env.outside.path().display(),
        Env::p(&env.outside, "gone"),
    );
    let profile = env.profile(&rows);
    let out = wharf_tests::wharf(env.home.path())
        .current_dir(env.ws.path())
        .arg("doctor")
        .arg("--profile")
        .arg(&profile)
        .output()
        .context("running wharf doctor")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = |name: &str| {
        text.lines()
            .find(|l| l.contains(&format!("mcp server `{name}`")))
            .unwrap_or_else(|| panic!("no line for `{name}`: {text}"))
            .to_string()
    };
    let no_sandbox = sandbox_available().is_err();
    let jail = line("jail");
    if no_sandbox {
        assert!(jail.starts_with("[FAIL]") && jail.contains("unsandboxed = true"), "{jail}");
    } else {
        assert!(jail.starts_with("[ok  ]") && jail.contains("sandboxed"), "{jail}");
        assert!(jail.contains(&format!("writes {}", env.grant.path().display())), "{jail}");
        assert!(jail.contains(&format!("extra reads {}", env.outside.path().display())), "{jail}");
        assert!(jail.contains("network any host") && jail.contains("host env GITHUB_TOKEN"), "{jail}");
        let bare = line("bare");
        assert!(bare.contains("writes none") && bare.contains("network denied"), "{bare}");
    }
    let free = line("free");
    assert!(free.starts_with("[warn]") && free.contains("UNCONFINED"), "{free}");
    let broken = line("broken");
    assert!(broken.starts_with("[FAIL]") && broken.contains("does not exist"), "{broken}");
    let remote = line("remote");
    assert!(remote.contains("(http)") && remote.contains("not a local process"), "{remote}");
    assert_eq!(out.status.code(), Some(1), "a row that cannot start fails the doctor: {text}");
    Ok(())
}
