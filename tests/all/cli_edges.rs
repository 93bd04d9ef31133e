//! Rough edges of the `wharf` command line a new user hits first: bad
//! budgets and empty tasks refused, `doctor` naming the row that needs a
//! missing key, `sessions list` newest first, session id prefixes, resuming
//! in another workspace refused, `export | head` quiet, errors said once,
//! an unusable workspace named as such, no ANSI on pipes or with
//! `NO_COLOR`, stop reasons in words.

use std::io::{BufRead, BufReader, Read};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use wharf_core::events::{EventKind, UserMessage};
use wharf_core::store::{NewSession, SessionStore};
use wharf_tests::plugins;

/// A home, a workspace with a README and a session directory.
pub(crate) struct Env {
    pub(crate) home: tempfile::TempDir,
    pub(crate) ws: tempfile::TempDir,
    pub(crate) sessions: PathBuf,
}

/// What a finished `wharf` printed.
pub(crate) struct Out {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

pub(crate) fn env() -> Env {
    let home = tempfile::tempdir().expect("creating a temp dir");
    let ws = tempfile::tempdir().expect("creating a temp dir");
    std::fs::write(ws.path().join("README.md"), "# Sample\n\nA sample project.\n").expect("writing README.md");
    let sessions = home.path().join("sessions");
    Env { home, ws, sessions }
}

impl Env {
    pub(crate) fn cmd(&self, args: &[&str]) -> Command {
        for p in [plugins::FS, plugins::TEXT, plugins::LLM_SCRIPTED] {
            let _ = wharf_tests::plugin(p);
        }
        let mut c = wharf_tests::wharf(self.home.path());
        c.current_dir(self.ws.path()).args(args);
        c
    }

    fn run(&self, args: &[&str]) -> Out {
        let out = self.cmd(args).stdin(Stdio::null()).output().expect("running wharf");
        Out {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    fn session_dir(&self) -> String {
        self.sessions.display().to_string()
    }

    pub(crate) fn store(&self) -> SessionStore {
        SessionStore::new(&self.sessions)
    }

    /// A stored session created in `workspace` with `messages` user messages.
    fn session(&self, workspace: &Path, messages: usize) -> String {
        let ws = std::fs::canonicalize(workspace).expect("canonicalizing workspace").display().to_string();
        let log = self
            .store()
            .create(NewSession { id: None, workspace: Some(ws), profile: Some("demo".into()) })
            .expect("creating a session");
        for i in 0..messages {
            let content = format!("message {i}: {}", "x".repeat(200));
            log.append(EventKind::UserMessage(UserMessage { content, inbox_id: None, images: vec![] }))
                .expect("appending an event");
        }
        log.flush_blocking().expect("flushing the session log");
        let id = log.id().to_string();
        // Ids start with the creation time to the millisecond.
        std::thread::sleep(Duration::from_millis(5));
        id
    }
}

#[test]
fn zero_step_budget_and_empty_task_are_refused() -> anyhow::Result<()> {
    let e = env();
    let sd = e.session_dir();
    let o = e.run(&["run", "Summarise.", "-p", "demo", "--max-steps", "0", "--session-dir", &sd]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("from 1 to"), "{}", o.stderr);
    let o = e.run(&["chat", "-p", "demo", "--max-steps", "0", "--session-dir", &sd]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    for task in ["", "  \n\t"] {
        let o = e.run(&["run", task, "-p", "demo", "--session-dir", &sd]);
        assert_eq!(o.code, 2, "{}", o.stderr);
        assert!(o.stderr.contains("the task is empty"), "{}", o.stderr);
    }
    assert!(e.store().list().context("listing the sessions")?.is_empty(), "no session was started");
    // A budget of 1 is a budget.
    let o = e.run(&["run", "Summarise.", "-p", "demo", "--max-steps", "1", "--session-dir", &sd]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    assert!(o.stderr.contains("max_steps · 1 step(s)"), "{}", o.stderr);
    Ok(())
}

#[test]
fn stop_lines_are_words_not_debug() -> anyhow::Result<()> {
    let e = env();
    let sd = e.session_dir();
    let o = e.run(&["run", "Summarise.", "-p", "demo", "--max-steps", "1", "--session-dir", &sd]);
    assert!(o.stdout.contains("— turn 1 ended: max_steps"), "{}", o.stdout);
    assert!(!o.stdout.contains("MaxSteps"), "{}", o.stdout);

    let profile = e.home.path().join("auth.toml");
    std::fs::write(
        &profile,
        r#"
[agent]
adapter = "scripted"

[[plugin]]
id = "scripted"
path = "${plugin_dir}/llm-scripted.wasm"
[plugin.config]
turns = [{ error = { code = "AUTH", message = "the key was refused" } }]
"#,
    )
    .context("writing profile")?;
    let p = profile.display().to_string();
    let o = e.run(&["run", "Hello.", "-p", &p, "--session-dir", &sd]);
    assert_eq!(o.code, 1, "{}", o.stderr);
    let stop = o.stdout.lines().find(|l| l.starts_with("— turn 1 ended: ")).unwrap_or_default();
    assert!(stop.starts_with("— turn 1 ended: error AUTH: ") && stop.contains("the key was refused"), "{}", o.stdout);
    assert!(o.stderr.contains("error AUTH: "), "{}", o.stderr);
    for out in [&o.stdout, &o.stderr] {
        assert!(!out.contains("Error {") && !out.contains("code: \""), "{out}");
    }
    Ok(())
}

#[test]
fn no_ansi_on_pipes_or_with_no_color() {
    let e = env();
    let sd = e.session_dir();
    // The demo model streams reasoning, which a terminal shows dimmed.
    let o = e.run(&["run", "Summarise.", "-p", "demo", "--session-dir", &sd]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("✻ I should see what is in the workspace first."), "{}", o.stdout);
    assert!(!o.stdout.contains('\x1b') && !o.stderr.contains('\x1b'), "ANSI on a pipe:\n{:?}", o.stdout);

    // On a terminal: dimmed, unless NO_COLOR is set.
    let on_tty = |no_color: Option<&str>| {
        let mut c = e.cmd(&["run", "Summarise.", "-p", "demo", "--session-dir", &sd]);
        if let Some(v) = no_color {
            c.env("NO_COLOR", v);
        } else {
            c.env_remove("NO_COLOR");
        }
        terminal_stdout(c)
    };
    let colored = on_tty(None);
    assert!(colored.contains("\x1b[2m✻ "), "{colored:?}");
    let plain = on_tty(Some("1"));
    assert!(plain.contains("✻ I should see"), "{plain:?}");
    assert!(!plain.contains('\x1b'), "ANSI with NO_COLOR:\n{plain:?}");
}

/// Runs `c` with stdout on a pseudo-terminal (stderr piped away) and
/// returns what it wrote there.
fn terminal_stdout(mut c: Command) -> String {
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two descriptors; null name, termios and size are allowed.
    let rc =
        unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), std::ptr::null()) };
    assert_eq!(rc, 0, "openpty failed: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened and are owned here.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    c.stdin(Stdio::null()).stdout(slave).stderr(Stdio::null());
    let mut child = c.spawn().expect("spawning the command");
    let mut reader = std::fs::File::from(master);
    let collect = std::thread::spawn(move || {
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        // EIO once the child side is closed.
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&out).into_owned()
    });
    child.wait().expect("waiting for the process");
    // The child (and the `Command`'s copy) closed the slave side.
    drop(c);
    collect.join().unwrap_or_default()
}

#[test]
fn doctor_warns_about_a_key_the_profile_needs() -> anyhow::Result<()> {
    for p in [
        plugins::FS,
        plugins::SHELL,
        plugins::WEB,
        plugins::TODO,
        plugins::SKILLS,
        plugins::CONTEXT,
        plugins::COMPACTION,
        plugins::SUBAGENT,
        plugins::POLICY_RULES,
        plugins::LLM_DEEPSEEK,
    ] {
        let _ = wharf_tests::plugin(p);
    }
    let e = env();
    let o = e.run(&["doctor"]);
    let line = o.stdout.lines().find(|l| l.contains("DEEPSEEK_API_KEY")).unwrap_or_default().to_string();
    assert!(line.starts_with("[warn] DEEPSEEK_API_KEY: not set"), "{}", o.stdout);
    assert!(line.contains("profile `default`") && line.contains("plugin row `deepseek`"), "{line}");
    assert!(line.contains("shipped:profiles/default.toml:"), "where the row names the key: {line}");
    // Set, it is only said to be set.
    let out =
        e.cmd(&["doctor"]).env("DEEPSEEK_API_KEY", "sk-doctor-secret-0123").output().context("running wharf doctor")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("[ok  ] DEEPSEEK_API_KEY: set (not shown)"), "{stdout}");
    assert!(!stdout.contains("sk-doctor-secret"), "{stdout}");
    // A profile that does not use it.
    let o = e.run(&["doctor", "-p", "demo"]);
    assert!(o.stdout.contains("[ok  ] DEEPSEEK_API_KEY: not set (profile `demo` does not use it)"), "{}", o.stdout);
    Ok(())
}

#[test]
fn sessions_newest_first_and_unique_prefixes() -> anyhow::Result<()> {
    let e = env();
    let sd = e.session_dir();
    let older = e.session(e.ws.path(), 0);
    let newer = e.session(e.ws.path(), 0);

    let o = e.run(&["sessions", "list", "--session-dir", &sd]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    // Below the column header.
    let ids: Vec<&str> = o.stdout.lines().skip(1).filter_map(|l| l.split_whitespace().next()).collect();
    assert!(o.stdout.starts_with("id"), "{}", o.stdout);
    assert_eq!(ids, [newer.as_str(), older.as_str()], "newest first");
    let o = e.run(&["sessions", "list", "--json", "--session-dir", &sd]);
    let v: serde_json::Value = serde_json::from_str(&o.stdout).context("parsing JSON")?;
    assert_eq!(v[0]["id"], newer.as_str());

    // A unique prefix works wherever an id is asked for.
    let prefix = &older[..older.len() - 3];
    let o = e.run(&["sessions", "show", prefix, "--session-dir", &sd]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains(&format!("session {older}:")), "{}", o.stdout);
    let o = e.run(&["sessions", "export", prefix, "--session-dir", &sd]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.lines().next().unwrap_or_default().contains(&older), "{}", o.stdout);
    let o = e.run(&["run", "Summarise.", "-p", "demo", "--resume", prefix, "--session-dir", &sd]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains(&format!("session {older} ")), "resumed the full id: {}", o.stderr);
    let turns = e
        .store()
        .load(&older)
        .context("loading the session")?
        .events
        .iter()
        .filter(|ev| matches!(ev.kind, EventKind::TurnEnd(_)))
        .count();
    assert_eq!(turns, 1, "the turn ran in the resumed session");

    // Ambiguous and unknown prefixes are refused, naming the problem.
    let common: String = older.chars().zip(newer.chars()).take_while(|(a, b)| a == b).map(|(a, _)| a).collect();
    let o = e.run(&["sessions", "show", &common, "--session-dir", &sd]);
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("matches 2 sessions"), "{}", o.stderr);
    let o = e.run(&["run", "x", "-p", "demo", "--resume", &common, "--session-dir", &sd]);
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("matches 2 sessions"), "{}", o.stderr);
    let o = e.run(&["sessions", "show", "1999", "--session-dir", &sd]);
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("session `1999` not found"), "{}", o.stderr);
    Ok(())
}

#[test]
fn resume_from_another_workspace_is_refused() -> anyhow::Result<()> {
    let e = env();
    let sd = e.session_dir();
    let id = e.session(e.ws.path(), 0);
    let elsewhere = tempfile::tempdir().context("creating a temp dir")?;
    let there = elsewhere.path().display().to_string();
    let o = e.run(&["run", "Summarise.", "-p", "demo", "--resume", &id, "-w", &there, "--session-dir", &sd]);
    assert_eq!(o.code, 2, "{}", o.stderr);
    let home = std::fs::canonicalize(e.ws.path()).context("canonicalizing the workspace")?.display().to_string();
    assert!(o.stderr.contains("belongs to workspace") && o.stderr.contains(&home), "{}", o.stderr);
    let events = e.store().load(&id).context("loading the session")?.events;
    assert_eq!(events.len(), 1, "nothing was appended");
    assert!(!elsewhere.path().join("SUMMARY.md").exists(), "no tool ran in the other workspace");
    // From its own workspace it resumes.
    let o = e.run(&["run", "Summarise.", "-p", "demo", "--resume", &id, "--session-dir", &sd]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    Ok(())
}

#[test]
fn export_into_a_closed_pipe_is_quiet() -> anyhow::Result<()> {
    let e = env();
    let sd = e.session_dir();
    // ~2 MB of events: far more than a pipe holds.
    let id = e.session(e.ws.path(), 8000);
    for args in [vec!["sessions", "export", id.as_str()], vec!["sessions", "show", id.as_str()]] {
        let mut c = e.cmd(&args);
        c.args(["--session-dir", &sd]).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = c.spawn().context("spawning the command")?;
        let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
        let mut first = String::new();
        BufReader::new(stdout).read_line(&mut first).context("reading a line")?;
        // The reader is gone (like `head -1`).
        let out = child.wait_with_output().context("waiting for the process")?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!first.is_empty(), "{args:?}: nothing was printed");
        assert!(!stderr.to_lowercase().contains("broken pipe"), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
    }
    Ok(())
}

#[test]
fn config_errors_are_said_once_and_name_the_workspace() -> anyhow::Result<()> {
    let e = env();
    let missing = e.home.path().join("nope/profile.toml").display().to_string();
    let o = e.run(&["config", "dump", "-p", &missing]);
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("profile.toml"), "{}", o.stderr);
    assert_eq!(o.stderr.matches("No such file or directory").count(), 1, "{}", o.stderr);
    let o = e.run(&["doctor", "-p", &missing]);
    assert_eq!(o.code, 1, "{}", o.stdout);
    let line = o.stdout.lines().find(|l| l.starts_with("[FAIL] profile")).unwrap_or_default();
    assert_eq!(line.matches("No such file or directory").count(), 1, "{}", o.stdout);

    // A workspace that is not a directory (or cannot be listed) is reported
    // as the workspace, not as its `.wharf/config.toml`.
    let file = e.home.path().join("not-a-dir");
    std::fs::write(&file, "x").context("writing the file")?;
    let f = file.display().to_string();
    let o = e.run(&["config", "dump", "-p", "demo", "-w", &f]);
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains(&format!("workspace {f} is not a directory")), "{}", o.stderr);
    assert!(!o.stderr.contains(".wharf"), "{}", o.stderr);
    // Permission bits do not stop root, so this half needs another user.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        use std::os::unix::fs::PermissionsExt;
        let locked = e.home.path().join("locked");
        std::fs::create_dir(&locked).context("creating locked")?;
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000))
            .context("setting the permissions of locked")?;
        let l = locked.display().to_string();
        let o = e.run(&["config", "dump", "-p", "demo", "-w", &l]);
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755))
            .context("setting the permissions of locked")?;
        assert_eq!(o.code, 2);
        assert!(o.stderr.contains(&format!("workspace {l} is not readable")), "{}", o.stderr);
        assert!(!o.stderr.contains(".wharf"), "{}", o.stderr);
    }
    Ok(())
}
