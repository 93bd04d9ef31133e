//! The system prompt on the wire, for every surface: the profile's base
//! prompt (`agent.system_prompt`) first, then the registered sections (a
//! static section of `hooks-fixed`, then the skills catalog), then — for a
//! subagent — its instructions. A headless turn (in-process, as `wharf run`
//! does), `wharf chat` (on a pty),
//! `wharf web` (HTTP API), `wharf acp` (JSON-RPC on stdio) and a child
//! started by the `subagent` tool all send it to `wharf-mock-llm`, which
//! records the requests.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};
use wharf_mock_llm::{MockLlm, RecordedRequest, Script};
use wharf_tests::host::{Run, TestHost};
use wharf_tests::plugins;

const TIMEOUT: Duration = Duration::from_secs(90);
const BASE: &str = "BASE: You are the Wharf prompt-test agent. Café ☕ stays intact.";
const SECTION: &str = "SECTION: house rules.";
const INSTRUCTIONS: &str = "CHILD: answer in one word.";

/// The skills section the catalog of [`World::new`] renders to.
fn skills_section() -> String {
    "# Skills\n\nSkills available (load one with the `skill` tool before a task it covers, then follow its \
     instructions):\n- demo — Demo skill for the prompt test."
        .to_string()
}

/// What every top-level request must carry.
fn parent_prompt() -> String {
    format!("{BASE}\n\n{SECTION}\n\n{}", skills_section())
}

/// One test's world: a home, a workspace, a skills directory, a mock model
/// and a profile pointing at it.
struct World {
    home: tempfile::TempDir,
    ws: tempfile::TempDir,
    sessions: PathBuf,
    mock: MockLlm,
    profile: PathBuf,
    profile_text: String,
}

impl World {
    fn new(replies: Value) -> Self {
        for p in [plugins::SKILLS, plugins::HOOKS_FIXED, plugins::SUBAGENT, plugins::LLM_OPENAI] {
            let _ = wharf_tests::plugin(p);
        }
        let script: Script = serde_json::from_value(json!({
            "replies": replies,
            "default": {"kind": "stream", "text": "Default."},
            "checks": {"reasoning": "ignore"},
        }))
        .expect("parsing JSON");
        let mock = MockLlm::start_background(script).expect("starting the mock LLM");
        let home = tempfile::tempdir().expect("creating a temp dir");
        let ws = tempfile::tempdir().expect("creating a temp dir");
        let skills = home.path().join("skills");
        std::fs::create_dir_all(skills.join("demo")).expect("creating demo");
        std::fs::write(
            skills.join("demo/SKILL.md"),
            "---\nname: demo\ndescription: Demo skill for the prompt test.\n---\nDo the demo.\n",
        )
        .expect("writing demo/SKILL.md");
        let skills = std::fs::canonicalize(&skills).expect("canonicalizing skills").display().to_string();
        let profile_text = format!(
            r#"
[agent]
adapter = "model"
max_steps = 6
system_prompt = "{BASE}"

[[plugin]]
id = "rules"
path = "${{plugin_dir}}/hooks-fixed.wasm"
[plugin.config]
sections = [{{ id = "rules", order = 10, text = "{SECTION}" }}]

[[plugin]]
id = "skills"
path = "${{plugin_dir}}/skills.wasm"
[plugin.config]
dirs = ["{skills}"]
[plugin.grant]
dirs = ["{skills}:ro"]

[[plugin]]
id = "subagent"
path = "${{plugin_dir}}/subagent.wasm"
[plugin.config]
instructions = "{INSTRUCTIONS}"
[plugin.grant]
agents = true
timeout_ms = 60000

[[plugin]]
id = "model"
path = "${{plugin_dir}}/llm-openai.wasm"
[plugin.config]
base_url = "{url}/v1"
model = "mock-model"
[plugin.grant]
hosts = ["127.0.0.1:{port}"]
timeout_ms = 20000
"#,
            url = mock.url(),
            port = mock.addr().port(),
        );
        let profile = home.path().join("profile.toml");
        std::fs::write(&profile, &profile_text).expect("writing profile");
        let sessions = home.path().join("sessions");
        Self { home, ws, sessions, mock, profile, profile_text }
    }

    fn wharf(&self) -> Command {
        let mut c = wharf_tests::wharf(self.home.path());
        c.current_dir(self.ws.path());
        c
    }

    /// One headless turn of a new session, in-process (as `wharf run TASK
    /// --no-watch` in the workspace).
    async fn run(&self, task: &str) -> anyhow::Result<Run> {
        let host = TestHost::builder()
            .profile(self.profile.display().to_string())
            .home(self.home.path())
            .workspace(self.ws.path())
            .sessions(&self.sessions)
            .start_in(self.home.path())
            .await?;
        let run = host.run(task).await;
        host.close().await;
        run
    }

    /// Waits until the mock has recorded `n` requests.
    fn requests(&self, n: usize, what: &str) -> Vec<RecordedRequest> {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let reqs = self.mock.requests();
            if reqs.len() >= n {
                return reqs;
            }
            assert!(Instant::now() < deadline, "{what}: the mock got {} of {n} requests", reqs.len());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The messages of a recorded request.
fn messages(req: &RecordedRequest) -> Vec<Value> {
    req.body.as_ref().and_then(|b| b["messages"].as_array().cloned()).unwrap_or_default()
}

/// Asserts that the request's first message is the system prompt `want`
/// and that it is the only system message.
fn assert_system(req: &RecordedRequest, want: &str, what: &str) {
    let msgs = messages(req);
    assert_eq!(msgs.first().map(|m| m["role"].clone()), Some(json!("system")), "{what}: {}", req.raw_body);
    assert_eq!(msgs[0]["content"].as_str(), Some(want), "{what}: the system prompt");
    let systems = msgs.iter().filter(|m| m["role"] == "system").count();
    assert_eq!(systems, 1, "{what}: one system message");
}

#[tokio::test(flavor = "multi_thread")]
async fn run_sends_base_prompt_then_sections() -> anyhow::Result<()> {
    let w = World::new(json!([{"kind": "stream", "text": "Hello."}]));
    let run = w.run("Say hello.").await?;
    assert_eq!(run.exit_code(), 0, "{:?}", run.summary);
    let reqs = w.requests(1, "run");
    assert_eq!(reqs.len(), 1);
    assert_system(&reqs[0], &parent_prompt(), "run");
    w.mock.assert_no_violations();
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn subagent_gets_base_prompt_sections_then_its_instructions() -> anyhow::Result<()> {
    let w = World::new(json!([
        {"kind": "stream", "tool_calls": [
            {"id": "call_1", "name": "subagent", "arguments": json!({"task": "Say one word."}).to_string()}
        ]},
        {"kind": "stream", "text": "Word."},
        {"kind": "stream", "text": "The child said: Word."},
    ]));
    let run = w.run("Delegate a word.").await?;
    assert_eq!(run.exit_code(), 0, "{:?}", run.summary);
    let reqs = w.requests(3, "subagent");
    assert_eq!(reqs.len(), 3, "parent, child, parent");
    assert_system(&reqs[0], &parent_prompt(), "parent, first step");
    assert_system(&reqs[1], &format!("{}\n\n{INSTRUCTIONS}", parent_prompt()), "the child");
    assert_eq!(messages(&reqs[1])[1]["content"], "Say one word.", "the child's task");
    assert_system(&reqs[2], &parent_prompt(), "parent, second step");
    w.mock.assert_no_violations();
    Ok(())
}

#[test]
fn web_sends_base_prompt_then_sections() {
    let w = World::new(json!([{"kind": "stream", "text": "Hello from the web."}]));
    let web = crate::web::start(&w.profile_text, &["--no-watch"], &[]);
    let (code, r) = web.call("POST", "/api/sessions", Some(json!({"text": "Say hello."})));
    assert_eq!(code, 200, "{r}");
    let reqs = w.requests(1, "web");
    assert_system(&reqs[0], &parent_prompt(), "web");
    w.mock.assert_no_violations();
}

#[test]
fn acp_sends_base_prompt_then_sections() -> anyhow::Result<()> {
    let w = World::new(json!([{"kind": "stream", "text": "Hello from ACP."}]));
    let mut cmd = w.wharf();
    cmd.args(["acp", "--no-watch", "--profile"])
        .arg(&w.profile)
        .arg("--session-dir")
        .arg(&w.sessions)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().context("spawning the command")?;
    let mut stdin = child.stdin.take().unwrap_or_else(|| panic!("no stdin"));
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str::<Value>(&line)
                && tx.send(v).is_err()
            {
                return;
            }
        }
    });
    let mut call = |id: i64, method: &str, params: Value| -> anyhow::Result<Value> {
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(stdin, "{msg}").and_then(|()| stdin.flush()).with_context(|| format!("sending acp {method}"))?;
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let v = rx.recv_timeout(left).with_context(|| format!("no answer to acp {method}"))?;
            if v["id"] == id && v.get("method").is_none() {
                assert!(v.get("error").is_none(), "acp {method}: {v}");
                return Ok(v["result"].clone());
            }
        }
    };
    call(1, "initialize", json!({"protocolVersion": 1, "clientCapabilities": {}}))?;
    let cwd = std::fs::canonicalize(w.ws.path()).context("canonicalizing the workspace")?.display().to_string();
    let session = call(2, "session/new", json!({"cwd": cwd, "mcpServers": []}))?;
    let sid = session["sessionId"].clone();
    let done =
        call(3, "session/prompt", json!({"sessionId": sid, "prompt": [{"type": "text", "text": "Say hello."}]}))?;
    assert_eq!(done["stopReason"], "end_turn", "{done}");
    let _ = child.kill();
    let _ = child.wait();
    let reqs = w.requests(1, "acp");
    assert_system(&reqs[0], &parent_prompt(), "acp");
    w.mock.assert_no_violations();
    Ok(())
}

#[test]
fn chat_sends_base_prompt_then_sections() {
    let w = World::new(json!([{"kind": "stream", "text": "Hello from chat."}]));
    let mut cmd = w.wharf();
    cmd.args(["chat", "--no-watch", "--profile"])
        .arg(&w.profile)
        .arg("--session-dir")
        .arg(&w.sessions)
        .env("TERM", "dumb");
    let mut pty = Pty::spawn(cmd);
    pty.expect("/help for commands");
    pty.send("Say hello.\r");
    pty.expect("Hello from chat.");
    let reqs = w.requests(1, "chat");
    assert_system(&reqs[0], &parent_prompt(), "chat");
    w.mock.assert_no_violations();
}

/// `wharf chat` on a pseudo-terminal (its controlling terminal).
struct Pty {
    child: Child,
    master: std::fs::File,
    output: Arc<Mutex<Vec<u8>>>,
}

impl Pty {
    fn spawn(mut cmd: Command) -> Self {
        let (mut master, mut slave) = (0, 0);
        let size = libc::winsize { ws_row: 50, ws_col: 200, ws_xpixel: 0, ws_ypixel: 0 };
        // SAFETY: openpty writes two descriptors; null name and termios are allowed.
        let rc = unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), &size) };
        assert_eq!(rc, 0, "openpty failed: {}", std::io::Error::last_os_error());
        // SAFETY: both descriptors were just opened and are owned here.
        let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
        let dup = || slave.try_clone().expect("duplicating the pty descriptor");
        cmd.stdin(dup()).stdout(dup()).stderr(dup());
        // SAFETY: setsid and ioctl are async-signal-safe; the child makes the
        // pty (its stdin) its controlling terminal.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("spawning the command");
        drop(slave);
        let master = std::fs::File::from(master);
        let mut reader = master.try_clone().expect("duplicating the pty");
        let output = Arc::new(Mutex::new(Vec::new()));
        let out = output.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    return;
                }
                out.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(&buf[..n]);
            }
        });
        Self { child, master, output }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.output.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }

    fn expect(&self, what: &str) {
        let deadline = Instant::now() + TIMEOUT;
        while !self.text().contains(what) {
            assert!(Instant::now() < deadline, "chat never printed {what:?}:\n{}", self.text());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn send(&mut self, s: &str) {
        self.master.write_all(s.as_bytes()).expect("writing");
        self.master.flush().expect("flushing");
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
