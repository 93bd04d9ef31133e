//! `wharf chat` end to end through a pseudo-terminal (`openpty`): a prompt
//! with the demo profile and the slash commands, approvals answered at the
//! prompt, Ctrl-C cancelling a slow turn, Ctrl-C twice and Ctrl-D quitting;
//! the line editor (history across restarts, bracketed paste, no escape
//! sequence sent), steering during a turn, and `@path` attachments.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use wharf_tests::plugins;

const TIMEOUT: Duration = Duration::from_secs(60);

pub(crate) struct Env {
    pub(crate) home: tempfile::TempDir,
    pub(crate) ws: tempfile::TempDir,
    pub(crate) sessions: PathBuf,
}

pub(crate) fn env() -> Env {
    let home = tempfile::tempdir().expect("creating a temp dir");
    let ws = tempfile::tempdir().expect("creating a temp dir");
    std::fs::write(ws.path().join("README.md"), "# Sample\n\nA sample project.\n").expect("writing README.md");
    let sessions = home.path().join("sessions");
    Env { home, ws, sessions }
}

impl Env {
    pub(crate) fn profile(&self, name: &str, turns: &str, ask: bool) -> PathBuf {
        let policy = if ask {
            r#"
[[plugin]]
id = "ask"
path = "${plugin_dir}/policy-fixed.wasm"
[plugin.config]
decision = "ask"
reason = "writes need approval"
tools = ["write"]
"#
        } else {
            ""
        };
        let text = format!(
            r#"
[agent]
adapter = "scripted"
max_steps = 10

[[plugin]]
id = "fs"
path = "${{plugin_dir}}/fs.wasm"
[plugin.grant]
dirs = ["${{workspace}}:rw"]
{policy}
[[plugin]]
id = "scripted"
path = "${{plugin_dir}}/llm-scripted.wasm"
[plugin.config]
model = "scripted-chat"
{turns}
"#
        );
        let path = self.home.path().join(format!("{name}.toml"));
        std::fs::write(&path, text).expect("writing the file");
        path
    }

    pub(crate) fn chat(&self, profile: &str, extra: &[&str]) -> Pty {
        Pty::spawn(self.chat_command(profile, extra))
    }

    pub(crate) fn chat_command(&self, profile: &str, extra: &[&str]) -> Command {
        for p in [
            plugins::FS,
            plugins::TEXT,
            plugins::LLM_SCRIPTED,
            plugins::POLICY_FIXED,
            plugins::POLICY_RULES,
            plugins::CONTEXT,
            plugins::COMPACTION,
        ] {
            let _ = wharf_tests::plugin(p);
        }
        let mut cmd = wharf_tests::wharf(self.home.path());
        cmd.args(["chat", "--profile", profile, "--session-dir", &self.sessions.display().to_string()])
            .args(extra)
            .current_dir(self.ws.path())
            .env("TERM", "dumb");
        cmd
    }

    pub(crate) fn events(&self) -> Vec<serde_json::Value> {
        let store = wharf_core::SessionStore::new(&self.sessions);
        let list = store.list().expect("listing the sessions");
        let last = list.last().unwrap_or_else(|| panic!("no session"));
        let loaded = store.load(&last.id).expect("loading the session");
        wharf_core::invariants::check(&loaded.events).expect("checking the log's invariants");
        loaded.events.iter().map(|e| serde_json::to_value(e).unwrap_or_default()).collect()
    }
}

/// A child on a pseudo-terminal: its controlling terminal, so `\x03` is
/// SIGINT and `\x04` at the start of a line is end of input.
pub(crate) struct Pty {
    child: Child,
    master: File,
    output: Arc<Mutex<Vec<u8>>>,
    /// How far `expect` has matched.
    cursor: usize,
}

impl Pty {
    pub(crate) fn spawn(mut cmd: Command) -> Self {
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
        let child = cmd.spawn().expect("spawn wharf chat");
        drop(slave);
        let master = File::from(master);
        let mut reader = master.try_clone().expect("duplicating the pty");
        let output = Arc::new(Mutex::new(Vec::new()));
        let out = output.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // EIO once the child side is closed.
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    return;
                }
                out.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(&buf[..n]);
            }
        });
        Self { child, master, output, cursor: 0 }
    }

    /// Everything printed so far, without ANSI escapes.
    pub(crate) fn screen(&self) -> String {
        strip_ansi(&String::from_utf8_lossy(&self.output.lock().unwrap_or_else(|e| e.into_inner())))
    }

    pub(crate) fn send(&mut self, s: &str) {
        self.master.write_all(s.as_bytes()).expect("write to pty");
        self.master.flush().expect("flushing");
    }

    pub(crate) fn line(&mut self, s: &str) {
        self.send(&format!("{s}\r"));
    }

    /// Waits until `needle` appears after the previous match.
    pub(crate) fn expect(&mut self, needle: &str) {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let screen = self.screen();
            if let Some(i) = screen.get(self.cursor..).and_then(|s| s.find(needle)) {
                self.cursor += i + needle.len();
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out waiting for {needle:?}; screen after the last match:\n{}",
                    &screen[self.cursor.min(screen.len())..]
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The terminal's settings (the master reads the pair's termios).
    fn termios(&self) -> libc::termios {
        use std::os::fd::AsRawFd;
        let mut t = std::mem::MaybeUninit::<libc::termios>::zeroed();
        // SAFETY: `tcgetattr` fills the `termios`; checked before it is read.
        let rc = unsafe { libc::tcgetattr(self.master.as_raw_fd(), t.as_mut_ptr()) };
        assert_eq!(rc, 0, "tcgetattr: {}", std::io::Error::last_os_error());
        // SAFETY: initialised by the successful call above.
        unsafe { t.assume_init() }
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
    }

    pub(crate) fn wait(&mut self) -> ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(s) = self.child.try_wait().expect("polling the child") {
                return s;
            }
            assert!(Instant::now() < deadline, "wharf chat did not exit; screen:\n{}", self.screen());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        if c != '\r' {
            out.push(c);
        }
    }
    out
}

#[test]
fn demo_prompt_and_slash_commands() {
    let e = env();
    let mut t = e.chat("demo", &[]);
    t.expect("loaded 5 plugin(s)");
    t.expect("session ");
    t.expect("› ");
    t.line("Summarize this workspace");
    t.expect("I should see what is in the workspace first.");
    t.expect("⏺ list");
    t.expect("⎿ ok");
    t.expect("⏺ read ");
    // The demo's `ask` preset: the write asks at the prompt.
    t.expect("approval needed: write ");
    t.expect("allow?");
    t.line("y");
    t.expect("allowed once");
    t.expect("Done: I listed the workspace");
    t.expect("— completed · 4 step(s)");
    t.expect("› ");
    assert!(e.ws.path().join("SUMMARY.md").exists());

    t.line("/model");
    t.expect("adapter  scripted");
    t.expect("scripted-demo · context window");
    t.line("/plugins");
    t.expect("plugins (5 loaded)");
    t.expect("load and reload events (5)");
    t.expect("loaded        fs");
    t.line("/sessions");
    let id = e.events()[0]["data"]["id"].as_str().unwrap_or_default().to_string();
    t.expect(&format!("* {id}"));
    t.line("/compact");
    t.expect("/compact: no compactor plugin is loaded");
    t.line("/nope");
    t.expect("unknown command /nope");
    t.line("/help");
    t.expect("/sessions");

    // A new session, then back to the first one (opened in this process).
    t.line("/new");
    // Not just "session ": /help's own text ("start a new session") would
    // match before /new ran, and /resume would be typed ahead of the prompt.
    t.expect("· profile demo");
    t.expect("› ");
    t.line(&format!("/resume {id}"));
    t.expect("› Summarize this workspace");
    t.expect(&format!("session {id}"));

    // Ctrl-D quits.
    t.expect("› ");
    t.send("\x04");
    t.expect(&format!("bye · session {id}"));
    assert!(t.wait().success());
}

/// Keys typed before the line editor reads them (here while plugins
/// compile) arrive as typed: the terminal used to be in cooked mode then,
/// which echoed them and turned Enter into a line feed — Ctrl-J, "insert a
/// newline", once the editor read it — so the command was never submitted.
#[test]
fn a_command_typed_while_plugins_load_is_submitted() -> anyhow::Result<()> {
    let e = env();
    // An empty compile cache, so loading lasts long enough to type into.
    let cache = tempfile::tempdir().context("creating a temp dir")?;
    let mut cmd = e.chat_command("demo", &[]);
    cmd.env("WHARF_CACHE_DIR", cache.path());
    let mut t = Pty::spawn(cmd);
    t.expect("loading ");
    t.send("/model\r");
    t.expect("adapter  scripted");
    t.expect("› ");
    t.send("\x04");
    t.expect("bye · session ");
    assert!(t.wait().success());
    assert!(!t.screen().contains('┆'), "the typed Enter became a newline:\n{}", t.screen());
    Ok(())
}

/// SIGTERM ends chat without running destructors; the terminal still gets
/// its settings back (echo, line buffering, CR→LF), not the editor's raw
/// mode or the input settings held for the session.
#[test]
fn sigterm_gives_the_terminal_back() {
    let e = env();
    let mut t = e.chat("demo", &[]);
    t.expect("› ");
    let during = t.termios();
    assert_eq!(during.c_lflag & libc::ECHO, 0, "the editor should have echo off at its prompt");
    t.signal(libc::SIGTERM);
    let status = t.wait();
    assert_eq!(status.code(), Some(143), "{status:?}");
    // A new pty starts with the kernel's defaults: echo, canonical input,
    // CR→LF; chat found them so and must leave them so.
    let after = t.termios();
    for (name, flag) in [("ECHO", libc::ECHO), ("ICANON", libc::ICANON)] {
        assert_ne!(after.c_lflag & flag, 0, "{name} not restored");
    }
    assert_ne!(after.c_iflag & libc::ICRNL, 0, "ICRNL not restored");
}

#[test]
fn approvals_are_answered_at_the_prompt() {
    let e = env();
    let turns = r#"
[[plugin.config.turns]]
tool_calls = [{ name = "write", arguments = { path = "a.txt", content = "a" } }]
[[plugin.config.turns]]
tool_calls = [{ name = "write", arguments = { path = "b.txt", content = "b" } }]
[[plugin.config.turns]]
tool_calls = [{ name = "write", arguments = { path = "c.txt", content = "c" } }]
[[plugin.config.turns]]
text = "All done."
"#;
    let p = e.profile("ask", turns, true);
    let mut t = e.chat(&p.display().to_string(), &[]);
    t.expect("› ");
    t.line("write three files");
    t.expect("approval needed: write a.txt");
    t.expect("writes need approval");
    t.expect("allow? [y]es once");
    // Not an answer key: typed, then submitted with Enter.
    t.line("x");
    t.expect("please answer y");
    t.expect("allow?");
    t.line("n");
    t.expect("rejected (by chat(user))");
    t.expect("error APPROVAL_REJECTED");
    t.expect("allow?");
    t.line("a");
    t.expect("allowed for this session (by chat(user))");
    // The third write is covered by the session grant: no question.
    t.expect("allowed for this session (by session-grant)");
    t.expect("All done.");
    t.expect("— completed");
    assert!(!e.ws.path().join("a.txt").exists());
    assert!(e.ws.path().join("b.txt").exists() && e.ws.path().join("c.txt").exists());
    let questions: Vec<String> =
        t.screen().lines().filter(|l| l.contains("approval needed")).map(str::to_string).collect();
    // a.txt twice (the unclear answer re-asks), b.txt once, c.txt never.
    assert_eq!(questions.len(), 3, "{questions:?}");
    assert!(!questions.iter().any(|q| q.contains("c.txt")), "{questions:?}");
    t.line("/quit");
    assert!(t.wait().success());
}

#[test]
fn ctrl_c_cancels_a_slow_turn_and_twice_quits() {
    let e = env();
    let turns = r#"
chunk_size = 4

[[plugin.config.turns]]
text = "Starting.\nThis answer streams very slowly, four characters at a time, so that the test can cancel it midway."
delay_ms = 150
"#;
    let p = e.profile("slow", turns, false);
    let mut t = e.chat(&p.display().to_string(), &[]);
    t.expect("› ");
    let started = Instant::now();
    t.line("talk");
    // On a terminal, streamed text is printed above the input line by line.
    t.expect("Starting.");
    t.send("\x03");
    t.expect("cancelling the turn");
    t.expect("[interrupted]");
    t.expect("— cancelled");
    assert!(started.elapsed() < Duration::from_secs(10), "the cancel did not stop the stream");
    t.expect("› ");
    let events = e.events();
    let end = events.iter().rfind(|v| v["type"] == "turn/end").cloned().unwrap_or_default();
    assert_eq!(end["data"]["reason"], "cancelled");
    let msg = events.iter().rfind(|v| v["type"] == "assistant/message").cloned().unwrap_or_default();
    assert_eq!(msg["data"]["interrupted"], true);
    assert!(msg["data"]["content"].as_str().unwrap_or("").starts_with("Starting."));

    // At an idle prompt, one Ctrl-C only warns; a second one quits.
    std::thread::sleep(Duration::from_millis(2200));
    t.send("\x03");
    t.expect("press Ctrl-C again to quit");
    t.send("\x03");
    t.expect("bye · session");
    assert!(t.wait().success());
}

#[test]
fn resume_flag_shows_history() {
    let e = env();
    let turns = r#"
[[plugin.config.turns]]
text = "First answer."
[[plugin.config.turns]]
text = "Second answer."
"#;
    let p = e.profile("two", turns, false);
    let profile = p.display().to_string();
    let mut t = e.chat(&profile, &[]);
    t.expect("› ");
    t.line("first question");
    t.expect("First answer.");
    t.expect("› ");
    t.send("\x04");
    assert!(t.wait().success());
    drop(t);
    let id = e.events()[0]["data"]["id"].as_str().unwrap_or_default().to_string();

    let mut t = e.chat(&profile, &["--resume", &id]);
    t.expect("› first question");
    t.expect("First answer.");
    t.expect(&format!("session {id}"));
    t.expect("› ");
    t.line("second question");
    t.expect("Second answer.");
    t.expect("› ");
    t.send("\x04");
    assert!(t.wait().success());
}

#[test]
fn compact_summarises_the_history_on_demand() {
    let e = env();
    let turns = r#"complete_text = "The user asked about the README; it was read."
[[plugin.config.turns]]
tool_calls = [{ name = "read", arguments = '{"path": "README.md"}' }]
[[plugin.config.turns]]
text = "Read it."
[[plugin.config.turns]]
text = "Still here."

[[plugin]]
id = "compaction"
path = "${plugin_dir}/compaction.wasm"
[plugin.grant]
model = true
"#;
    let profile = e.profile("compact", turns, false);
    let mut t = e.chat(&profile.display().to_string(), &[]);
    t.expect("› ");
    t.line("read the readme");
    t.expect("Read it.");
    t.expect("— completed");
    t.line("and now?");
    t.expect("Still here.");
    t.expect("— completed");
    t.line("/compact");
    t.expect("compacting the history");
    // The command's own report, then the event rendered from the log.
    t.expect("replaced by a summary");
    t.expect("history compacted (events");
    let summary = e.events().into_iter().find(|ev| ev["type"] == "compaction/summary");
    let summary = summary.unwrap_or_else(|| panic!("no compaction/summary in the log"));
    let text = summary["data"]["summary"].as_str().unwrap_or_default();
    assert!(
        text.contains("it was read") && text.starts_with("Summary of the earlier conversation (5 messages"),
        "{text}"
    );
    t.send("\x04");
    assert!(t.wait().success());
}

/// Every `user/message` text of the latest session.
fn user_messages(e: &Env) -> Vec<String> {
    e.events()
        .iter()
        .filter(|v| v["type"] == "user/message")
        .map(|v| v["data"]["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn editor_history_paste_and_no_escape_sequences() {
    let e = env();
    let turns = r#"
[[plugin.config.turns]]
text = "One."
[[plugin.config.turns]]
text = "Two."
[[plugin.config.turns]]
text = "Three."
[[plugin.config.turns]]
text = "Four."
"#;
    let p = e.profile("edit", turns, false);
    let profile = p.display().to_string();
    let mut t = e.chat(&profile, &[]);
    t.expect("› ");
    t.line("first prompt");
    t.expect("One.");
    t.expect("— completed");
    // Up alone sends nothing; Up then Enter sends the previous prompt again.
    t.send("\x1b[A");
    std::thread::sleep(Duration::from_millis(400));
    t.send("\r");
    t.expect("Two.");
    t.expect("— completed");
    // A bracketed two-line paste is one message; Ctrl-J adds a newline too.
    t.send("\x1b[200~a\nb\x1b[201~");
    t.send("\r");
    t.expect("Three.");
    t.expect("— completed");
    t.send("x\ny\r");
    t.expect("Four.");
    t.expect("— completed");
    t.send("\x04");
    assert!(t.wait().success());
    drop(t);
    let msgs = user_messages(&e);
    assert_eq!(msgs, vec!["first prompt", "first prompt", "a\nb", "x\ny"], "{msgs:?}");
    assert!(!msgs.iter().any(|m| m.contains('\x1b')), "{msgs:?}");

    // The history survives a restart in the same workspace.
    let mut t = e.chat(&profile, &[]);
    t.expect("› ");
    t.send("\x1b[A\x1b[A\x1b[A");
    std::thread::sleep(Duration::from_millis(400));
    t.send("\r");
    t.expect("— ");
    t.send("\x04");
    assert!(t.wait().success());
    drop(t);
    // Three entries back from the newest ("x\ny", "a\nb", "first prompt").
    assert_eq!(user_messages(&e), vec!["first prompt"]);
}

#[test]
fn text_typed_during_a_turn_becomes_one_steer() {
    let e = env();
    let turns = r#"
chunk_size = 4

[[plugin.config.turns]]
text = "Starting.\nThis answer streams slowly, four characters at a time, while the user types a steer."
delay_ms = 100
[[plugin.config.turns]]
text = "Steered."
"#;
    let p = e.profile("steer", turns, false);
    let mut t = e.chat(&p.display().to_string(), &[]);
    t.expect("› ");
    t.line("talk");
    t.expect("Starting.");
    t.line("also mention tests");
    t.expect("↳ queued for the next step: also mention tests");
    t.expect("Steered.");
    t.expect("— completed · 2 step(s)");
    t.send("\x04");
    assert!(t.wait().success());
    drop(t);
    let events = e.events();
    let steers: Vec<&serde_json::Value> =
        events.iter().filter(|v| v["type"] == "inbox/spliced" && v["data"]["op"] == "added").collect();
    assert_eq!(steers.len(), 2, "the prompt and one steer: {steers:?}");
    assert_eq!(steers[1]["data"]["kind"], "steer");
    assert_eq!(steers[1]["data"]["text"], "also mention tests");
    assert_eq!(user_messages(&e), vec!["talk", "also mention tests"]);
}

#[test]
fn at_path_attaches_a_file_and_reports_a_denied_one() -> anyhow::Result<()> {
    let e = env();
    let outside = tempfile::tempdir().context("creating a temp dir")?;
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "top secret").context("writing secret")?;
    // The script picks its turn by the assistant messages sent so far, and
    // each attachment step is one: turns 1 and 3 are never played.
    let turns = r#"
[[plugin.config.turns]]
text = "(the first attachment step)"
[[plugin.config.turns]]
text = "The tool said: "
echo_last_tool_result = true
[[plugin.config.turns]]
text = "(the second attachment step)"
[[plugin.config.turns]]
text = "Noted."
"#;
    let p = e.profile("attach", turns, false);
    let mut t = e.chat(&p.display().to_string(), &[]);
    t.expect("› ");
    t.line("summarise @README.md please");
    t.expect("⏺ read ");
    t.expect("The tool said: ");
    t.expect("A sample project.");
    t.expect("— completed");
    t.line(&format!("and @{}", secret.display()));
    t.expect("⏺ read ");
    t.expect("⎿ error ");
    t.expect("Noted.");
    t.expect("— completed");
    t.send("\x04");
    assert!(t.wait().success());
    drop(t);
    let events = e.events();
    let calls: Vec<&serde_json::Value> = events.iter().filter(|v| v["type"] == "tool/call").collect();
    let results: Vec<&serde_json::Value> = events.iter().filter(|v| v["type"] == "tool/result").collect();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0]["data"]["name"], "read");
    assert!(calls[0]["data"]["arguments"].as_str().unwrap_or_default().contains("README.md"));
    assert!(results[0]["data"]["content"].as_str().unwrap_or_default().contains("A sample project."));
    assert_ne!(results[0]["data"]["is_error"], true);
    // The file outside the workspace is not granted: an error result, no content.
    assert_eq!(results[1]["data"]["is_error"], true, "{:?}", results[1]);
    assert!(!results[1]["data"]["content"].as_str().unwrap_or_default().contains("top secret"));
    // The attachment step comes before the first model request of its turn.
    let first_result = events.iter().position(|v| v["type"] == "tool/result").unwrap_or(usize::MAX);
    let first_chunk = events.iter().position(|v| v["type"] == "assistant/chunk").unwrap_or(0);
    assert!(first_result < first_chunk, "the read ran after the model was asked");
    Ok(())
}

/// Hardening 3, item 2: a component that breaks mid-session is one notice
/// on the chat screen ("… the previous version keeps serving"), not the log
/// lines of every retry; the log, with the details, is in
/// `~/.wharf/logs/chat.log`; and the previous version does keep serving.
#[test]
fn a_component_breaking_mid_session_is_one_notice_and_the_details_go_to_the_log() -> anyhow::Result<()> {
    let e = env();
    let comp = tempfile::tempdir().context("creating a temp dir")?;
    let text = comp.path().join("text.wasm");
    std::fs::copy(wharf_tests::plugin(plugins::TEXT), &text).context("copying the text component")?;
    let turns = format!(
        r#"
[[plugin.config.turns]]
tool_calls = [{{ name = "word_count", arguments = {{ path = "README.md" }} }}]
[[plugin.config.turns]]
text = "Counted."

[[plugin]]
id = "text"
path = "{}"
[plugin.grant]
dirs = ["${{workspace}}:ro"]
"#,
        text.display()
    );
    let p = e.profile("breaks", &turns, false);
    let mut t = e.chat(&p.display().to_string(), &[]);
    t.expect("› ");
    // Replaced in one step, as a build would: one broken version.
    let tmp = comp.path().join("text.wasm.new");
    std::fs::write(&tmp, b"garbage, not wasm at all").context("writing the temp file")?;
    std::fs::rename(&tmp, &text).context("moving the new file in place")?;
    t.expect("⚠ text: new version ");
    t.expect("failed to load (");
    t.expect("the previous version ");
    t.expect("keeps serving · details in ~/.wharf/logs/chat.log");
    // Every retry (with backoff) has failed and been logged by now.
    let log = e.home.path().join(".wharf/logs/chat.log");
    let deadline = Instant::now() + TIMEOUT;
    let logged = loop {
        let l = std::fs::read_to_string(&log).unwrap_or_default();
        if l.contains("waiting for the next change") {
            break l;
        }
        assert!(Instant::now() < deadline, "the retries did not end; log:\n{l}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(logged.contains("reload of `text` failed (attempt 1"), "{logged}");
    assert!(!logged.contains('\x1b'), "colour in the log file: {logged:?}");
    // The old version still answers.
    t.line("count the readme");
    t.expect("⏺ word_count path=README.md");
    t.expect("⎿ ok");
    t.expect("Counted.");
    t.expect("— completed");
    t.send("\x04");
    assert!(t.wait().success());
    let screen = t.screen();
    assert_eq!(screen.matches("failed to load").count(), 1, "one notice per failed version:\n{screen}");
    assert!(!screen.contains("WARN") && !screen.contains("wharf_runtime"), "log lines on the chat screen:\n{screen}");
    let stamp = screen.lines().find(|l| l.len() > 20 && l.as_bytes()[4] == b'-' && l.get(10..11) == Some("T"));
    assert!(stamp.is_none(), "a timestamped line on the chat screen: {stamp:?}");
    Ok(())
}

/// Hardening 3, item 2: commands that log to stderr write no colour codes
/// when stderr is not a terminal.
#[test]
fn log_lines_on_a_piped_stderr_have_no_colour() -> anyhow::Result<()> {
    let e = env();
    let p = e.profile("plainlog", "[[plugin.config.turns]]\ntext = \"Hi.\"\n", false);
    let out = wharf_tests::wharf(e.home.path())
        .args(["run", "--profile", &p.display().to_string(), "--session-dir", &e.sessions.display().to_string()])
        .arg("hello")
        .current_dir(e.ws.path())
        .env("WHARF_LOG", "debug")
        .env_remove("NO_COLOR")
        .output()
        .context("running wharf run")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("DEBUG"), "no log lines at debug level:\n{stderr}");
    assert!(!stderr.contains('\x1b'), "ANSI colour on a piped stderr:\n{stderr:?}");
    Ok(())
}

/// Hardening 3, item 4: an approval shows the diff of a write (not its raw
/// JSON), one key answers it, and `t` rejects with a note that reaches the
/// model in the tool result of its next request.
#[test]
fn approvals_show_the_diff_take_one_key_and_tell_the_model_why() -> anyhow::Result<()> {
    let e = env();
    std::fs::write(e.ws.path().join("notes.md"), "# Notes\nold line\n").context("writing notes.md")?;
    let turns = r##"
[[plugin.config.turns]]
tool_calls = [{ name = "write", arguments = { path = "notes.md", content = "# Notes\nnew line\n" } }]
[[plugin.config.turns]]
text = "The tool said: "
echo_last_tool_result = true
[[plugin.config.turns]]
tool_calls = [{ name = "write", arguments = { path = "b.txt", content = "b\n" } }]
[[plugin.config.turns]]
text = "Written."
"##;
    let p = e.profile("why", turns, true);
    let mut t = e.chat(&p.display().to_string(), &[]);
    t.expect("› ");
    t.line("update the notes");
    t.expect("⚠ approval needed: write notes.md (2 lines)");
    t.expect("writes need approval");
    t.expect("--- a/notes.md");
    t.expect("@@ -1,2 +1,2 @@");
    t.expect("-old line");
    t.expect("+new line");
    t.expect("[t]ell the model why");
    // One key, no Enter.
    t.send("t");
    t.expect("why?");
    t.line("keep the old line, the index links to it");
    t.expect("rejected (by chat(user)) — keep the old line, the index links to it");
    t.expect("The tool said: ");
    t.expect("keep the old line, the index links to it");
    t.expect("— completed");
    t.line("then write b");
    t.expect("approval needed: write b.txt (1 lines)");
    t.expect("+++ b/b.txt (new file)");
    t.expect("+b");
    t.expect("[t]ell the model why");
    t.send("y");
    t.expect("allowed once (by chat(user))");
    t.expect("Written.");
    t.expect("— completed");
    t.send("\x04");
    assert!(t.wait().success());
    let screen = t.screen();
    assert!(!screen.contains("write({"), "raw JSON arguments on screen:\n{screen}");
    assert_eq!(std::fs::read_to_string(e.ws.path().join("notes.md")).unwrap_or_default(), "# Notes\nold line\n");
    assert!(e.ws.path().join("b.txt").exists());
    // What the model was sent: the rejection with the note.
    let events = e.events();
    let result = events.iter().find(|v| v["type"] == "tool/result").cloned().unwrap_or_default();
    let content = result["data"]["content"].as_str().unwrap_or_default();
    assert!(content.contains("rejected") && content.contains("the index links to it"), "{content}");
    let echoed = events
        .iter()
        .filter(|v| v["type"] == "assistant/message")
        .filter_map(|v| v["data"]["content"].as_str())
        .any(|c| c.starts_with("The tool said: ") && c.contains("the index links to it"));
    assert!(echoed, "the model's next request did not carry the note");
    Ok(())
}

/// Issue 40: a tool's question (a component's `questions` import) is
/// asked at the chat prompt field by field — each line checked against its
/// field and asked again when it does not fit, Enter taking an optional
/// field's default — and the tool gets the answer; `:decline` refuses the
/// next one. The fields are read from the same input line as everything
/// else (no second reader of the terminal). With piped input the question
/// is declined at once, with a warning.
#[test]
fn a_tools_question_is_asked_field_by_field_and_declined_without_a_terminal() {
    let e = env();
    let _ = wharf_tests::plugin(plugins::EVIL);
    let turns = r#"
[[plugin.config.turns]]
tool_calls = [{ name = "ask", arguments = {} }]
[[plugin.config.turns]]
text = "The tool said: "
echo_last_tool_result = true
[[plugin.config.turns]]
tool_calls = [{ name = "ask", arguments = {} }]
[[plugin.config.turns]]
text = "Then: "
echo_last_tool_result = true

[[plugin]]
id = "evil"
path = "${plugin_dir}/evil.wasm"
[plugin.grant]
questions = true
"#;
    let p = e.profile("question", turns, false);
    let mut t = e.chat(&p.display().to_string(), &[]);
    t.expect("› ");
    t.line("ask me");
    t.expect("? evil asks: Who is asking? [name, count, ok]");
    t.expect("answer 3 field(s) one at a time");
    t.expect("Your name (text, required) › ");
    t.line("");
    t.expect("this field is required");
    t.line("Cy");
    t.expect("count (integer 1–9) › ");
    t.line("12");
    t.expect("12 is out of bounds");
    t.line("3");
    t.expect("ok (y/n, default true) › ");
    t.line("");
    t.expect(r#"↳ accept (by chat(user)): {"name":"Cy","count":3,"ok":true}"#);
    t.expect(r#"The tool said: accepted: {"count":3,"name":"Cy","ok":true}"#);
    t.expect("— completed");
    t.line("again");
    t.expect("Your name (text, required) › ");
    t.line(":decline");
    t.expect("↳ decline (by chat(user))");
    t.expect("Then: declined");
    t.expect("— completed");
    t.send("\x04");
    assert!(t.wait().success());
    let events = e.events();
    let answers: Vec<&serde_json::Value> = events.iter().filter(|v| v["type"] == "question/answered").collect();
    assert_eq!(answers.len(), 2, "{events:#?}");
    assert_eq!(answers[0]["data"]["content"], serde_json::json!({"name": "Cy", "count": 3, "ok": true}));

    // Piped input: no form can be filled in; declined, with a warning.
    let (code, out, err) = chat_piped(&e, &p.display().to_string(), "ask me\n");
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("declined evil's question: wharf chat's input is not a terminal"), "{out}");
    assert!(out.contains("The tool said: declined"), "{out}");
}

/// `wharf chat` with its stdin a pipe holding `input` (closed after it) and
/// its output collected: `(exit code, stdout, stderr)`.
fn chat_piped(e: &Env, profile: &str, input: &str) -> (Option<i32>, String, String) {
    use std::process::Stdio;
    let mut cmd = e.chat_command(profile, &[]);
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn wharf chat");
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input.as_bytes()).expect("writing");
    }
    let id = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let Ok(out) = rx.recv_timeout(TIMEOUT) else {
        // SAFETY: a signal to our own child, which did not exit.
        unsafe { libc::kill(id as libc::pid_t, libc::SIGKILL) };
        panic!("wharf chat with piped input did not exit");
    };
    let out = out.expect("waiting for wharf chat");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

const END_OF_INPUT: &str = "end of input: quitting when this turn ends";

/// Piped input that ends while its turn runs (issue 36, item 1): the
/// end-of-input channel stayed selected after it closed, so the notice was
/// printed again on every pass (thousands of times, starving the turn).
#[test]
fn piped_input_ending_during_a_turn_says_so_once_then_quits_after_it() {
    let e = env();
    let (code, out, err) = chat_piped(&e, "demo", "hi\n");
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let notices = out.matches(END_OF_INPUT).count();
    assert_eq!(
        notices,
        1,
        "the notice {notices} times; stdout starts:\n{}",
        out.chars().take(2000).collect::<String>()
    );
    // The whole turn is shown, then the goodbye.
    let done = out.find("Done: I listed the workspace").unwrap_or_else(|| panic!("no turn text:\n{out}"));
    let summary = out.find("— completed · 4 step(s)").unwrap_or_else(|| panic!("no turn summary:\n{out}"));
    let bye = out.find("bye · session").unwrap_or_else(|| panic!("no goodbye:\n{out}"));
    assert!(done < summary && summary < bye, "{out}");
    // The demo asks before its write (`ask`): with the input gone nobody can
    // answer, so the question is refused, saying why, instead of waiting.
    assert!(!e.ws.path().join("SUMMARY.md").exists());
    let refused = e.events().iter().any(|v| {
        v["type"] == "tool/result"
            && v["data"]["is_error"] == true
            && v["data"]["content"].as_str().unwrap_or("").contains("end of input")
    });
    assert!(refused, "the write was not refused for the end of input");
}

/// The slow turn streamed four characters at a time; its last words.
const SLOW_TURN: &str = r#"
chunk_size = 4

[[plugin.config.turns]]
text = "Starting.\nThis answer streams slowly, four characters at a time, and is drawn to its very end."
delay_ms = 60
"#;

/// Ctrl-D while a turn runs on a terminal (issue 36, item 1): the line
/// editor used to end on it, so the rest of the turn was never drawn, and
/// the chat loop spun on the closed input.
#[test]
fn ctrl_d_during_a_turn_draws_it_to_the_end_then_quits() {
    let e = env();
    let p = e.profile("slow", SLOW_TURN, false);
    let mut t = e.chat(&p.display().to_string(), &[]);
    t.expect("› ");
    t.line("talk");
    t.expect("Starting.");
    t.send("\x04");
    t.expect(END_OF_INPUT);
    t.expect("and is drawn to its very end.");
    t.expect("— completed");
    t.expect("bye · session");
    assert!(t.wait().success());
    let screen = t.screen();
    assert_eq!(screen.matches(END_OF_INPUT).count(), 1, "{screen}");
    let events = e.events();
    let end = events.iter().rfind(|v| v["type"] == "turn/end").cloned().unwrap_or_default();
    assert_eq!(end["data"]["reason"], "completed");
}

/// A notice while a line streams (issue 36, item 3) is printed between
/// lines: the streamed line used to be cut where the notice came
/// ("…caref" / "↳ queued…" / "ully bef").
#[test]
fn a_notice_does_not_cut_a_streamed_line() {
    let e = env();
    let turns = r#"
chunk_size = 4

[[plugin.config.turns]]
text = "Starting.\nRead every file carefully before editing any of them, then explain each change briefly.\nDone."
delay_ms = 80
[[plugin.config.turns]]
text = "Steered."
"#;
    let p = e.profile("cut", turns, false);
    // Without colour the text is streamed as it comes (colour renders whole
    // lines anyway).
    let mut cmd = e.chat_command(&p.display().to_string(), &[]);
    cmd.env("NO_COLOR", "1");
    let mut t = Pty::spawn(cmd);
    t.expect("› ");
    t.line("talk");
    // The next line has begun streaming ("Starting." is printed when its
    // newline arrives, in the chunk that starts the next line).
    t.expect("Starting.");
    t.line("also mention tests");
    t.expect("↳ queued for the next step: also mention tests");
    t.expect("Steered.");
    t.expect("— completed · 2 step(s)");
    let screen = t.screen();
    assert!(
        screen.contains("Read every file carefully before editing any of them, then explain each change briefly."),
        "the streamed line was cut:\n{screen}"
    );
    let queued = screen.find("↳ queued for the next step").unwrap_or(0);
    let line = screen.find("Read every file carefully").unwrap_or(0);
    assert!(queued < line, "the notice should come before the line it interrupted:\n{screen}");
    t.send("\x04");
    assert!(t.wait().success());
}

/// Until a turn's first token a spinner with the elapsed time says how to
/// cancel it (issue 36, item 3).
#[test]
fn a_spinner_runs_until_the_first_token() {
    let e = env();
    let turns = r#"
chunk_size = 100

[[plugin.config.turns]]
text = "First token at last."
delay_ms = 1500
"#;
    let p = e.profile("wait", turns, false);
    let mut t = e.chat(&p.display().to_string(), &[]);
    t.expect("› ");
    t.line("talk");
    t.expect("waiting for the model · ");
    t.expect("s · Ctrl-C to cancel");
    t.expect("First token at last.");
    t.expect("— completed");
    // Gone once the text came: the prompt after the turn shows the status.
    let after = t.screen();
    let tail = &after[after.rfind("— completed").unwrap_or(0)..];
    assert!(!tail.contains("Ctrl-C to cancel"), "{tail}");
    t.send("\x04");
    assert!(t.wait().success());
}

/// Tab completes `@docs/my` to the quoted `@"docs/my notes.md"` (issue 36,
/// item 5), which the attachment parser reads back whole: unquoted, the
/// agent read `docs/my`.
#[test]
fn tab_completes_a_path_with_spaces_quoted() -> anyhow::Result<()> {
    let e = env();
    std::fs::create_dir(e.ws.path().join("docs")).context("creating docs")?;
    std::fs::write(e.ws.path().join("docs/my notes.md"), "Notes with spaces.\n").context("writing docs/my notes.md")?;
    let turns = r#"
[[plugin.config.turns]]
text = "(the attachment step)"
[[plugin.config.turns]]
text = "The tool said: "
echo_last_tool_result = true
"#;
    let p = e.profile("tab", turns, false);
    let mut t = e.chat(&p.display().to_string(), &[]);
    t.expect("› ");
    t.send("summarise @docs/my");
    std::thread::sleep(Duration::from_millis(300));
    t.send("\t");
    // The menu (uppercase: the selected entry on a terminal without colour).
    t.expect("@\"DOCS/MY NOTES.MD\"");
    t.send("\r");
    std::thread::sleep(Duration::from_millis(300));
    t.send("please\r");
    t.expect("The tool said: ");
    t.expect("Notes with spaces.");
    t.expect("— completed");
    t.send("\x04");
    assert!(t.wait().success());
    drop(t);
    let msgs = user_messages(&e);
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert!(msgs[0].starts_with("summarise @\"docs/my notes.md\" ") && msgs[0].ends_with("please"), "{msgs:?}");
    let events = e.events();
    let call = events.iter().find(|v| v["type"] == "tool/call").cloned().unwrap_or_default();
    let args: serde_json::Value =
        serde_json::from_str(call["data"]["arguments"].as_str().unwrap_or("{}")).unwrap_or_default();
    assert_eq!(args["path"], "docs/my notes.md", "{call}");
    Ok(())
}

/// Issue 40: a permission policy's question (`policy-ask`, granted
/// `questions`) is asked at the chat prompt like a tool's, before the call
/// it decides runs; the reason typed lets the call run, and `:decline`
/// sends the policy down its decline branch (deny).
#[test]
fn a_policys_question_is_asked_at_the_chat_prompt() {
    let e = env();
    let _ = wharf_tests::plugin(plugins::POLICY_ASK);
    let turns = r#"
[[plugin.config.turns]]
tool_calls = [{ name = "write", arguments = { path = "NOTES.md", content = "hello" } }]
[[plugin.config.turns]]
text = "The tool said: "
echo_last_tool_result = true
[[plugin.config.turns]]
tool_calls = [{ name = "write", arguments = { path = "LATER.md", content = "later" } }]
[[plugin.config.turns]]
text = "Then: "
echo_last_tool_result = true

[[plugin]]
id = "why"
path = "${plugin_dir}/policy-ask.wasm"
[plugin.config]
tools = ["write"]
[plugin.grant]
questions = true
timeout_ms = 120000
"#;
    let p = e.profile("policy-question", turns, false);
    let mut t = e.chat(&p.display().to_string(), &[]);
    t.expect("› ");
    t.line("write notes");
    t.expect("why asks: A reason is needed before `write` runs.");
    t.expect("Reason (text, required) › ");
    t.line("for the record");
    t.expect("The tool said: ");
    t.expect("— completed");
    t.line("again");
    t.expect("Reason (text, required) › ");
    t.line(":decline");
    t.expect("Then: Error: denied by policy");
    t.expect("— completed");
    t.send("\x04");
    assert!(t.wait().success());
    assert_eq!(std::fs::read_to_string(e.ws.path().join("NOTES.md")).unwrap_or_default(), "hello");
    assert!(!e.ws.path().join("LATER.md").exists());
    let events = e.events();
    let answers: Vec<&serde_json::Value> = events.iter().filter(|v| v["type"] == "question/answered").collect();
    assert_eq!(answers.len(), 2, "{events:#?}");
    assert_eq!(answers[0]["data"]["content"], serde_json::json!({"reason": "for the record"}));
    assert_eq!(answers[1]["data"]["action"], "decline");
    let denied = events
        .iter()
        .filter(|v| v["type"] == "tool/result")
        .filter_map(|v| v["data"]["content"].as_str())
        .any(|c| c.contains("policy-ask: no reason given for `write` (the question was declined)"));
    assert!(denied, "{events:#?}");
}
