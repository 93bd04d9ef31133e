//! What `wharf chat` prints on a terminal (issue 14, item 2): the model's
//! markdown rendered (heading styled, code block highlighted, fences split
//! across stream chunks), tool calls as one-line summaries and an `edit` as
//! a unified diff; with `NO_COLOR` the markdown is printed as it is.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use wharf_tests::plugins;

const TIMEOUT: Duration = Duration::from_secs(60);

const PROFILE: &str = r#"
[agent]
adapter = "scripted"
max_steps = 10

[[plugin]]
id = "fs"
path = "${plugin_dir}/fs.wasm"
[plugin.grant]
dirs = ["${workspace}:rw"]

[[plugin]]
id = "scripted"
path = "${plugin_dir}/llm-scripted.wasm"
[plugin.config]
model = "scripted-render"
chunk_size = 5

[[plugin.config.turns]]
tool_calls = [{ name = "read", arguments = { path = "README.md" } }]
[[plugin.config.turns]]
tool_calls = [{ name = "edit", arguments = { path = "README.md", old_string = "A sample project.", new_string = "A rendered project." } }]
[[plugin.config.turns]]
text = '''
## Result

- changed **one** line
- see `README.md`

```rust
fn answer() -> u32 { 42 }
```
All set.'''
"#;

/// A `wharf chat` on a pseudo-terminal, everything it prints collected.
struct Pty {
    child: Child,
    master: File,
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
        let child = cmd.spawn().expect("spawn wharf chat");
        drop(slave);
        let master = File::from(master);
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

    fn raw(&self) -> String {
        String::from_utf8_lossy(&self.output.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }

    fn line(&mut self, s: &str) {
        self.master.write_all(format!("{s}\r").as_bytes()).expect("write to pty");
        self.master.flush().expect("flushing");
    }

    /// Waits until the screen (without ANSI escapes) shows `needle`.
    fn expect(&self, needle: &str) {
        let deadline = Instant::now() + TIMEOUT;
        while !strip_ansi(&self.raw()).contains(needle) {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {needle:?}; screen:\n{}",
                strip_ansi(&self.raw())
            );
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

/// Runs the scripted edit-and-explain turn; returns the raw terminal output.
fn chat(home: &Path, ws: &Path, no_color: bool) -> String {
    for p in [plugins::FS, plugins::LLM_SCRIPTED] {
        let _ = wharf_tests::plugin(p);
    }
    std::fs::write(ws.join("README.md"), "# Sample\n\nA sample project.\n").expect("writing README.md");
    let profile = home.join("render.toml");
    std::fs::write(&profile, PROFILE).expect("writing profile");
    let mut cmd = wharf_tests::wharf(home);
    cmd.args(["chat", "--profile", &profile.display().to_string()])
        .args(["--session-dir", &home.join("sessions").display().to_string()])
        .current_dir(ws)
        .env("TERM", "dumb")
        .env_remove("NO_COLOR");
    if no_color {
        cmd.env("NO_COLOR", "1");
    }
    let mut t = Pty::spawn(cmd);
    t.expect("› ");
    t.line("tidy the readme");
    t.expect("All set.");
    t.expect("— completed");
    let raw = t.raw();
    t.line("/quit");
    raw
}

/// The screen's non-empty lines, trimmed (the chat's line editor prints
/// output above its prompt with cursor moves, so columns and blank lines
/// are not kept).
fn lines(raw: &str) -> Vec<String> {
    strip_ansi(raw).lines().map(|l| l.trim().to_string()).filter(|l| !l.is_empty()).collect()
}

/// The lines the line editor printed, blank ones included: each is sent as
/// `\r<spaces>\r` (erasing the prompt's row), the text, `\r\n`.
fn printed(raw: &str) -> Vec<String> {
    raw.split("\r\n").map(|seg| strip_ansi(seg.rsplit('\r').next().unwrap_or("")).trim_end().to_string()).collect()
}

/// Asserts that `want` are consecutive printed lines.
fn consecutive(printed: &[String], want: &[&str]) {
    let found = printed.windows(want.len()).any(|w| w.iter().zip(want).all(|(a, b)| a == b));
    assert!(found, "{want:?} not printed in a row:\n{}", printed.join("\n"));
}

/// Asserts that lines ending with each of `want` appear in this order.
fn in_order(lines: &[String], want: &[&str]) {
    let mut at = 0;
    for w in want {
        match lines[at..].iter().position(|l| l.ends_with(w)) {
            Some(i) => at += i + 1,
            None => panic!("{w:?} missing (in order {want:?}):\n{}", lines.join("\n")),
        }
    }
}

#[test]
fn markdown_and_an_edit_diff_are_rendered() -> anyhow::Result<()> {
    let (home, ws) =
        (tempfile::tempdir().context("creating a temp dir")?, tempfile::tempdir().context("creating a temp dir")?);
    let raw = chat(home.path(), ws.path(), false);
    let lines = lines(&raw);
    assert_eq!(
        std::fs::read_to_string(ws.path().join("README.md")).unwrap_or_default(),
        "# Sample\n\nA rendered project.\n"
    );

    // Calls summarised, not JSON; the edit as a unified diff in colour.
    in_order(
        &lines,
        &[
            "⏺ read README.md",
            "⏺ edit README.md",
            "@@ -1,3 +1,3 @@",
            "# Sample",
            "-A sample project.",
            "+A rendered project.",
        ],
    );
    assert!(!raw.contains("old_string"), "{raw}");
    assert!(raw.contains("\x1b[31m-A sample project.\x1b[0m") && raw.contains("\x1b[32m+A rendered project.\x1b[0m"));

    // The heading is styled without its hashes, list items get bullets, the
    // code block (streamed five characters at a time) is highlighted.
    in_order(
        &lines,
        &["Result", "• changed one line", "• see README.md", "```rust", "fn answer() -> u32 { 42 }", "```", "All set."],
    );
    assert!(!lines.iter().any(|l| l.contains("## Result") || l.contains("**one**")), "{}", lines.join("\n"));
    // The blank line between the heading and the list is kept (issue 36,
    // item 12: the editor dropped empty lines).
    consecutive(&printed(&raw), &["Result", "", "• changed one line"]);
    let code = raw.lines().find(|l| l.contains("answer")).unwrap_or_else(|| panic!("no code line:\n{raw}"));
    assert!(code.matches("\x1b[38;2;").count() >= 3, "not highlighted: {code:?}");
    Ok(())
}

#[test]
fn no_color_prints_the_markdown_as_is() -> anyhow::Result<()> {
    let (home, ws) =
        (tempfile::tempdir().context("creating a temp dir")?, tempfile::tempdir().context("creating a temp dir")?);
    let raw = chat(home.path(), ws.path(), true);
    let lines = lines(&raw);
    in_order(&lines, &["-A sample project.", "+A rendered project."]);
    in_order(
        &lines,
        &[
            "## Result",
            "- changed **one** line",
            "- see `README.md`",
            "```rust",
            "fn answer() -> u32 { 42 }",
            "```",
            "All set.",
        ],
    );
    assert!(!raw.contains("\x1b[38;2;") && !raw.contains("\x1b[31m"), "colour under NO_COLOR: {raw:?}");
    consecutive(&printed(&raw), &["## Result", "", "- changed **one** line"]);
    Ok(())
}
