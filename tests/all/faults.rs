//! The fault suite: `kill -9` of `wharf run` at random moments (then every log
//! loads, repair closes an open turn with `interrupted`, `--resume`
//! completes), a full disk and a read-only session directory (a clear error
//! naming the path, a non-zero exit, the log intact), and the mock model's
//! faults under load (concurrent sessions end consistently).
//!
//! - `WHARF_FAULT_KILLS` (default 8; `cargo xtask faults` uses 50): how many
//!   kills; `WHARF_FAULT_SEED`: replays a run (the seed is printed, and named
//!   in every failure).
//! - A full disk is simulated two ways: `RLIMIT_FSIZE` on the child with
//!   `SIGXFSZ` ignored (writes past the limit fail with `EFBIG`; works for any
//!   user), and a small tmpfs filled to the brim (`ENOSPC`) mounted in a
//!   private mount namespace (`unshare -m`, or `unshare -rm` when not root).
//!   A read-only directory is a read-only bind mount in such a namespace,
//!   because root ignores file permissions.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};
use wharf_core::events::Event;
use wharf_mock_llm::{MockLlm, Script};
use wharf_tests::plugins;

/// splitmix64: a seeded generator, so a failing run can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// A scripted three-step turn that streams slowly (small chunks, a pause per
/// batch) and runs two tools, so random kills land in every phase.
const SLOW_SCRIPT: &str = r#"
chunk_size = 6

[[plugin.config.turns]]
reasoning = "Look at the readme first."
text = "Reading the readme now, then the directory."
delay_ms = 15
tool_calls = [{ name = "read", arguments = { path = "README.md" } }]

[[plugin.config.turns]]
text = "Now listing the directory."
delay_ms = 15
tool_calls = [{ name = "list", arguments = { path = "." } }]

[[plugin.config.turns]]
text = "All done: a sample project with one file."
delay_ms = 15
"#;

/// A temp HOME and workspace with the scripted profile.
struct World {
    home: tempfile::TempDir,
    ws: tempfile::TempDir,
    profile: PathBuf,
}

impl World {
    fn new() -> Self {
        let home = tempfile::tempdir().expect("creating a temp dir");
        let ws = tempfile::tempdir().expect("creating a temp dir");
        std::fs::write(ws.path().join("README.md"), "# Sample\n\nA sample project.\n").expect("writing README.md");
        let profile = home.path().join("slow.toml");
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

[[plugin]]
id = "scripted"
path = "${{plugin_dir}}/llm-scripted.wasm"
[plugin.config]
model = "scripted-test"
{SLOW_SCRIPT}
"#
        );
        std::fs::write(&profile, text).expect("writing profile");
        // Built components must exist before the binary resolves ${plugin_dir}.
        let _ = wharf_tests::plugin(plugins::FS);
        let _ = wharf_tests::plugin(plugins::LLM_SCRIPTED);
        Self { home, ws, profile }
    }

    fn wharf(&self) -> Command {
        let mut c = wharf_tests::wharf(self.home.path());
        c.current_dir(self.ws.path());
        c
    }

    /// `wharf run TASK [--resume ID]` into `dir`, as a command (not started).
    fn run_cmd(&self, dir: &Path, task: &str, resume: Option<&str>) -> Command {
        let mut c = self.wharf();
        c.args(["run", task, "--no-watch", "--output", "jsonl", "--profile"])
            .arg(&self.profile)
            .arg("--session-dir")
            .arg(dir);
        if let Some(id) = resume {
            c.args(["--resume", id]);
        }
        c
    }

    fn show(&self, dir: &Path, id: &str) -> Output {
        self.wharf()
            .args(["sessions", "show", id, "--session-dir"])
            .arg(dir)
            .output()
            .expect("running wharf sessions show")
    }

    /// A completed session in `dir`: its id.
    fn completed_session(&self, dir: &Path) -> String {
        let out = self.run_cmd(dir, "go", None).output().expect("running wharf");
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        only_session(dir)
    }
}

/// The id of the single session in `dir`.
fn only_session(dir: &Path) -> String {
    let ids: Vec<String> = std::fs::read_dir(dir)
        .expect("listing the session directory")
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_suffix(".jsonl")).map(str::to_string))
        .collect();
    assert_eq!(ids.len(), 1, "expected one session in {}: {ids:?}", dir.display());
    ids[0].clone()
}

fn log_path(dir: &Path, id: &str) -> PathBuf {
    dir.join(format!("{id}.jsonl"))
}

fn load(dir: &Path, id: &str) -> wharf_core::store::LoadedSession {
    wharf_core::SessionStore::new(dir).load(id).expect("loading the session")
}

fn count(events: &[Event], type_name: &str) -> usize {
    events.iter().filter(|e| e.type_name() == type_name).count()
}

/// The `reason` of a `turn/end`, else `None`.
fn end_reason(ev: &Event) -> Option<String> {
    if ev.type_name() != "turn/end" {
        return None;
    }
    let v = serde_json::to_value(&ev.kind).ok()?;
    v["data"]["reason"].as_str().map(str::to_string)
}

fn lines_in(path: &Path) -> usize {
    std::fs::read(path).map(|b| b.iter().filter(|c| **c == b'\n').count()).unwrap_or(0)
}

/// The stderr lines wharf printed as its error (`wharf: …`).
fn error_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.starts_with("wharf: ")).collect()
}

/// Asserts that wharf failed with exactly one clear error line containing
/// every needle, whose cause is not repeated; returns that line.
fn assert_clear_error<'a>(out: &'a Output, stderr: &'a str, needles: &[&str]) -> &'a str {
    assert_ne!(out.status.code(), Some(0), "expected a failure\n{stderr}");
    assert!(out.status.code().is_some(), "wharf died from a signal: {:?}\n{stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
    let errs = error_lines(stderr);
    assert_eq!(errs.len(), 1, "want one `wharf: …` error line\n{stderr}");
    let line = errs[0];
    for n in needles {
        assert!(line.contains(n), "error line lacks `{n}`: {line}");
    }
    // The OS cause appears once (an error chain must not repeat it).
    if let Some(at) = line.find("(os error") {
        let cause = &line[..at];
        let tail = cause.rsplit(": ").next().unwrap_or(cause);
        assert_eq!(line.matches(tail).count(), 1, "cause repeated: {line}");
    }
    line
}

// ---------------------------------------------------------------------------
// kill -9 at random moments.

/// What a kill interrupted.
#[derive(Debug, Default)]
struct KillStats {
    mid_turn: usize,
    between_turns: usize,
    finished_first: usize,
    mid_tool: usize,
    resumed_kills: usize,
}

#[test]
fn kill_9_at_random_moments_then_every_log_loads_and_resumes() -> anyhow::Result<()> {
    let kills = env_u64("WHARF_FAULT_KILLS").unwrap_or(8) as usize;
    let seed = env_u64("WHARF_FAULT_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
    });
    eprintln!("faults: {kills} kills, seed {seed} (replay with WHARF_FAULT_SEED={seed})");
    let w = World::new();
    let mut rng = Rng(seed);

    // An uninterrupted run: how many lines one turn writes.
    let base_dir = w.home.path().join("base");
    let base_id = w.completed_session(&base_dir);
    let turn_lines = lines_in(&log_path(&base_dir, &base_id)) as u64;
    assert!(turn_lines > 10, "the scripted turn is too short to kill meaningfully: {turn_lines} lines");

    let mut stats = KillStats::default();
    let mut previous: Option<(PathBuf, String)> = None;
    for i in 0..kills {
        let ctx = format!("kill {i} of {kills}, seed {seed}");
        // A third of the kills hit a resumed session (repair, then crash again).
        let resume = previous.take().filter(|_| rng.below(3) == 0);
        let (dir, resume_id) = match resume {
            Some((dir, id)) => (dir, Some(id)),
            None => (w.home.path().join(format!("s{i}")), None),
        };
        let start_lines = resume_id.as_ref().map(|id| lines_in(&log_path(&dir, id))).unwrap_or(0) as u64;
        let target = start_lines + 1 + rng.below(turn_lines + 2);
        let extra_ms = rng.below(20);
        let mut child = w
            .run_cmd(&dir, if resume_id.is_some() { "again" } else { "go" }, resume_id.as_deref())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("spawning wharf run")?;
        // Wait for the target line count (or the end of the run), then kill.
        let t0 = Instant::now();
        let mut id = resume_id.clone();
        let finished = loop {
            assert!(t0.elapsed() < Duration::from_secs(60), "{ctx}: the run never reached line {target}");
            if let Ok(Some(_)) = child.try_wait() {
                break true;
            }
            if id.is_none() {
                id = std::fs::read_dir(&dir).ok().and_then(|entries| {
                    entries
                        .flatten()
                        .find_map(|e| e.file_name().to_str().and_then(|n| n.strip_suffix(".jsonl")).map(str::to_string))
                });
            }
            if let Some(id) = &id
                && lines_in(&log_path(&dir, id)) as u64 >= target
            {
                std::thread::sleep(Duration::from_millis(extra_ms));
                break false;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        if !finished {
            child.kill().context("killing the child")?;
        }
        let status = child.wait().context("waiting for the process")?;
        let mut stderr = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut stderr);
        }
        assert!(!stderr.contains("panicked"), "{ctx}: {stderr}");
        let id = id.unwrap_or_else(|| only_session(&dir));
        if finished {
            stats.finished_first += 1;
            assert_eq!(status.code(), Some(0), "{ctx}: {stderr}");
        }
        if resume_id.is_some() {
            stats.resumed_kills += 1;
        }

        // The log loads as it is, satisfies the invariants of a live log,
        // and `sessions show` reads it.
        let path = log_path(&dir, &id);
        let before = std::fs::read(&path).context("reading the file")?;
        let crashed = load(&dir, &id);
        wharf_core::invariants::check_prefix(&crashed.events)
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("checking the log prefix's invariants: {ctx}"))?;
        let show = w.show(&dir, &id);
        assert_eq!(show.status.code(), Some(0), "{ctx}: {}", String::from_utf8_lossy(&show.stderr));
        let open = count(&crashed.events, "turn/start") > count(&crashed.events, "turn/end");
        let open_calls = count(&crashed.events, "tool/call") > count(&crashed.events, "tool/result");
        match (open, finished) {
            (true, _) => stats.mid_turn += 1,
            (false, false) => stats.between_turns += 1,
            (false, true) => {}
        }
        if open_calls {
            stats.mid_tool += 1;
        }

        // Resume: history is only appended to; an open turn is closed with
        // `interrupted` before the new one starts; the new turn completes.
        let out = w.run_cmd(&dir, "continue", Some(&id)).output().context("running wharf run")?;
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{ctx}: resume failed: {err}");
        let after = std::fs::read(&path).context("reading the file")?;
        assert!(after.starts_with(&before), "{ctx}: resume rewrote history");
        let resumed = load(&dir, &id);
        assert!(resumed.warnings.is_empty() || !crashed.warnings.is_empty(), "{ctx}: {:?}", resumed.warnings);
        wharf_core::invariants::check(&resumed.events)
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("checking the log's invariants: {ctx}"))?;
        let added = &resumed.events[crashed.events.len()..];
        let first_start = added.iter().position(|e| e.type_name() == "turn/start").unwrap_or(added.len());
        let repaired: Vec<String> = added[..first_start].iter().filter_map(end_reason).collect();
        if open {
            assert_eq!(repaired, ["interrupted"], "{ctx}: repair did not close the open turn");
            if open_calls {
                let interrupted = added[..first_start]
                    .iter()
                    .filter(|e| e.type_name() == "tool/result")
                    .filter_map(|e| serde_json::to_value(&e.kind).ok())
                    .filter(|v| v["data"]["error_code"] == "INTERRUPTED")
                    .count();
                assert!(interrupted > 0, "{ctx}: an unanswered tool call got no INTERRUPTED result");
            }
        } else {
            assert!(repaired.is_empty(), "{ctx}: a closed log was repaired: {repaired:?}");
        }
        let last = resumed.events.iter().rev().find_map(end_reason);
        assert_eq!(last.as_deref(), Some("completed"), "{ctx}");
        previous = Some((dir, id));
    }
    eprintln!("faults: {stats:?}");
    // The kills must actually exercise repair.
    if kills >= 4 {
        assert!(stats.mid_turn > 0, "no kill landed inside a turn (seed {seed}): {stats:?}");
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Full disk and read-only directory.

/// `RLIMIT_FSIZE` = `bytes` on the child, with `SIGXFSZ` ignored so writes
/// past it fail with `EFBIG` instead of killing the process.
fn limit_file_size(cmd: &mut Command, bytes: u64) {
    // SAFETY: only async-signal-safe calls (signal, setrlimit) between fork
    // and exec; an ignored disposition survives exec.
    unsafe {
        cmd.pre_exec(move || {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let lim = libc::rlimit { rlim_cur: bytes as libc::rlim_t, rlim_max: bytes as libc::rlim_t };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[test]
fn file_size_limit_mid_turn_is_a_clear_error_and_the_log_survives() -> anyhow::Result<()> {
    let w = World::new();
    let dir = w.home.path().join("sessions");
    let id = w.completed_session(&dir);
    let path = log_path(&dir, &id);
    let before = std::fs::read(&path).context("reading the file")?;
    let before_events = load(&dir, &id).events.len();

    // Room for a few events of the next turn, not for all of them.
    let limit = before.len() as u64 + 1200;
    let mut cmd = w.run_cmd(&dir, "again", Some(&id));
    limit_file_size(&mut cmd, limit);
    let out = cmd.output().context("running the command")?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let line = assert_clear_error(&out, &stderr, &[&path.display().to_string(), "File too large"]);
    assert!(line.contains("appending event"), "{line}");

    // Nothing lost, nothing torn: the failed line was rolled back.
    let after = std::fs::read(&path).context("reading the file")?;
    assert!(after.starts_with(&before), "history was rewritten");
    assert!(after.len() as u64 <= limit);
    let loaded = load(&dir, &id);
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    assert!(loaded.events.len() > before_events, "the limit left no room for the new turn's first events");
    wharf_core::invariants::check_prefix(&loaded.events)
        .map_err(anyhow::Error::msg)
        .context("checking the log prefix's invariants")?;

    // With room again, resume closes the cut turn and completes.
    let out = w.run_cmd(&dir, "continue", Some(&id)).output().context("running wharf run")?;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let done = load(&dir, &id);
    wharf_core::invariants::check(&done.events).map_err(anyhow::Error::msg).context("checking the log's invariants")?;
    let reasons: Vec<String> = done.events.iter().filter_map(end_reason).collect();
    assert_eq!(reasons, ["completed", "interrupted", "completed"]);
    Ok(())
}

#[test]
fn file_size_limit_at_creation_leaves_no_headerless_log() -> anyhow::Result<()> {
    let w = World::new();
    let dir = w.home.path().join("sessions");
    std::fs::create_dir_all(&dir).context("creating the directory")?;
    let mut cmd = w.run_cmd(&dir, "go", None);
    // Less than the header line (at 0, instantiating the components fails first).
    limit_file_size(&mut cmd, 120);
    let out = cmd.output().context("running the command")?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let line = assert_clear_error(&out, &stderr, &[&dir.display().to_string(), "File too large"]);
    assert!(line.contains(".jsonl"), "{line}");
    let logs: Vec<_> = std::fs::read_dir(&dir)
        .context("listing the session directory")?
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
        .collect();
    assert!(logs.is_empty(), "a session without a header was left behind: {logs:?}");
    Ok(())
}

/// Runs `cmd` inside a private mount namespace after `setup` (a shell
/// script; `$1` is its argument `arg`), so mounts never leak to the host.
/// Root uses `unshare -m`; other users a user namespace (`unshare -rm`).
fn in_mount_ns(cmd: &Command, setup: &str, arg: &Path) -> Command {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mut c = Command::new("unshare");
    c.arg(if root { "-m" } else { "-rm" });
    c.args(["sh", "-c", &format!("set -e\n{setup}\nshift\nset +e\n\"$@\"\nrc=$?\n{AFTER}\nexit $rc"), "sh"]);
    c.arg(arg).arg(cmd.get_program()).args(cmd.get_args());
    if let Some(d) = cmd.get_current_dir() {
        c.current_dir(d);
    }
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c
}

/// Runs after the command inside the namespace (set per call via `$AFTER`).
const AFTER: &str = "eval \"${FAULT_AFTER:-true}\"";

/// Whether private mount namespaces work here (needed by the tmpfs and
/// read-only tests). Where they cannot be created (a container without
/// CAP_SYS_ADMIN and without user namespaces) those two tests report why and
/// skip (`wharf_tests::skip`: a failure when `CI` or
/// `WHARF_REQUIRE_FAULT_NS=1` is set); the
/// `RLIMIT_FSIZE` disk-full test runs everywhere.
fn mount_ns_available() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let probe = Command::new("unshare")
        .arg(if root { "-m" } else { "-rm" })
        .args(["sh", "-c", "d=$(mktemp -d) && mount -t tmpfs -o size=8k tmpfs \"$d\" && umount \"$d\" && rmdir \"$d\""])
        .output();
    let why = match probe {
        Ok(o) if o.status.success() => return true,
        Ok(o) => String::from_utf8_lossy(&o.stderr).into_owned(),
        Err(e) => format!("`unshare` (util-linux) is missing: {e}"),
    };
    let msg = format!(
        "the read-only/ENOSPC fault tests need a private mount namespace (`unshare -m` as root with \
         CAP_SYS_ADMIN, or unprivileged user namespaces): {why}"
    );
    if std::env::var("WHARF_REQUIRE_FAULT_NS").is_ok_and(|v| v == "1") {
        panic!("{msg}");
    }
    wharf_tests::skip(&wharf_tests::current_test(), &msg);
    false
}

#[test]
fn no_space_left_on_device_is_a_clear_error_and_the_log_survives() -> anyhow::Result<()> {
    if !mount_ns_available() {
        return Ok(());
    }
    let w = World::new();
    let dir = w.home.path().join("sessions");
    let id = w.completed_session(&dir);
    let before = std::fs::read(log_path(&dir, &id)).context("reading the session log")?;
    // A 64 KiB tmpfs holding a copy of the log, filled to the brim; the run
    // appends into it until ENOSPC; the log is copied back afterwards.
    let mnt = w.home.path().join("full");
    std::fs::create_dir_all(&mnt).context("creating mnt")?;
    let setup = format!(
        "mount -t tmpfs -o size=64k tmpfs \"$1\"\ncp '{src}' \"$1\"/\n\
         dd if=/dev/zero of=\"$1/filler\" bs=1k 2>/dev/null || true",
        src = log_path(&dir, &id).display()
    );
    // The prompt alone (logged twice: queued, then as the message) is more
    // than the free tail of the log's last tmpfs page, so the run cannot
    // finish inside it however few appends its turn takes.
    let prompt = "again ".repeat(1400);
    let mut cmd = in_mount_ns(&w.run_cmd(&mnt, &prompt, Some(&id)), &setup, &mnt);
    cmd.env("FAULT_AFTER", format!("cp \"{}\" '{}'", log_path(&mnt, &id).display(), dir.display()));
    let out = cmd.output().context("running the command")?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_clear_error(&out, &stderr, &["disk full", &log_path(&mnt, &id).display().to_string()]);

    let after = std::fs::read(log_path(&dir, &id)).context("reading the session log")?;
    assert!(after.starts_with(&before), "history was rewritten");
    let loaded = load(&dir, &id);
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    wharf_core::invariants::check_prefix(&loaded.events)
        .map_err(anyhow::Error::msg)
        .context("checking the log prefix's invariants")?;
    let out = w.run_cmd(&dir, "continue", Some(&id)).output().context("running wharf run")?;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    wharf_core::invariants::check(&load(&dir, &id).events)
        .map_err(anyhow::Error::msg)
        .context("checking the log's invariants")?;
    Ok(())
}

#[test]
fn read_only_session_dir_is_a_clear_error_and_changes_nothing() -> anyhow::Result<()> {
    if !mount_ns_available() {
        return Ok(());
    }
    let w = World::new();
    let dir = w.home.path().join("sessions");
    let id = w.completed_session(&dir);
    let path = log_path(&dir, &id);
    let before = std::fs::read(&path).context("reading the file")?;
    let files = |d: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .expect("listing the directory")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let listing = files(&dir);
    let ro = "mount --bind \"$1\" \"$1\"\nmount -o remount,bind,ro \"$1\"";

    // Resuming: refused up front, naming the directory's file.
    let out = in_mount_ns(&w.run_cmd(&dir, "again", Some(&id)), ro, &dir)
        .output()
        .context("running wharf in a mount namespace")?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_clear_error(&out, &stderr, &["read-only file system", &dir.display().to_string()]);
    // A new session: the same.
    let out =
        in_mount_ns(&w.run_cmd(&dir, "go", None), ro, &dir).output().context("running wharf in a mount namespace")?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_clear_error(&out, &stderr, &["read-only file system", &dir.display().to_string()]);
    // Reading still works there.
    let mut show = w.wharf();
    show.args(["sessions", "show", &id, "--session-dir"]).arg(&dir);
    let out = in_mount_ns(&show, ro, &dir).output().context("running wharf in a mount namespace")?;
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));

    assert_eq!(std::fs::read(&path).context("reading the file")?, before, "the log changed");
    assert_eq!(files(&dir), listing, "files appeared or vanished");
    wharf_core::invariants::check(&load(&dir, &id).events)
        .map_err(anyhow::Error::msg)
        .context("checking the log's invariants")?;
    Ok(())
}

// ---------------------------------------------------------------------------
// The mock model's faults under load.

const KEY: &str = "sk-wharf-FAULTS-0b7e2c";
const KEY_ENV: &str = "WHARF_FAULTS_LLM_KEY";
const MODEL: &str = "deepseek-v4-pro";

fn stream(fields: Value) -> Value {
    let mut v = json!({"kind": "stream", "chunk_chars": 5});
    if let (Some(o), Some(f)) = (v.as_object_mut(), fields.as_object()) {
        o.extend(f.clone());
    }
    v
}

/// The codes the agent retries (`llm/retry` may only carry these).
const RETRYABLE: &[&str] = &["RATE_LIMIT", "SERVER", "TRANSPORT", "TIMEOUT", "STREAM_CLOSED"];

#[test]
fn concurrent_sessions_under_mock_model_faults_end_consistently() -> anyhow::Result<()> {
    const SESSIONS: usize = 6;
    // Faults handed out in arrival order to whichever session asks next;
    // once used up, every request gets the default (a clean answer).
    let read = |id: &str| json!([{"id": id, "name": "read", "arguments": "{\"path\": \"README.md\"}"}]);
    let replies = vec![
        json!({"kind": "error", "status": 429, "retry_after": "0"}),
        stream(json!({"text": "cut off here", "fault": {"type": "reset", "after_chunks": 2}})),
        json!({"kind": "error", "status": 500, "retry_after": "0"}),
        stream(json!({"reasoning": "Need the file.", "tool_calls": read("call_f1")})),
        json!({"kind": "raw", "body": "data: {not json at all\n\n"}),
        stream(json!({"text": "no terminator", "fault": {"type": "missing_done"}})),
        json!({"kind": "error", "status": 503, "retry_after": "0"}),
        stream(json!({"text": "ends early", "fault": {"type": "eof", "after_chunks": 1}})),
        json!({"kind": "raw", "body": "event: nonsense\nretry: x\n: just a comment\n\n"}),
        json!({"kind": "error", "status": 429, "retry_after": "0"}),
        stream(json!({"reasoning": "Again.", "tool_calls": read("call_f2"), "write_bytes": 3})),
        stream(json!({"text": "bad chunk", "fault": {"type": "malformed_json", "after_chunks": 1}})),
        stream(json!({"text": "server says no", "fault": {"type": "error_event", "after_chunks": 1}})),
        json!({"kind": "error", "status": 500, "retry_after": "0"}),
    ];
    let queued = replies.len();
    let script: Script = serde_json::from_value(json!({
        "checks": {"api_key": KEY, "model": MODEL},
        "replies": replies,
        "default": stream(json!({"text": "All good.", "keepalive_every": 1})),
    }))
    .context("parsing JSON")?;
    let mock = MockLlm::start_background(script).context("starting the mock LLM")?;
    let w = World::new();
    let _ = wharf_tests::plugin(plugins::LLM_DEEPSEEK);
    let profile = w.home.path().join("mock.toml");
    std::fs::write(
        &profile,
        format!(
            r#"
[agent]
adapter = "model"
max_steps = 4

[[plugin]]
id = "fs"
path = "${{plugin_dir}}/fs.wasm"
[plugin.grant]
dirs = ["${{workspace}}:rw"]

[[plugin]]
id = "model"
path = "${{plugin_dir}}/llm-deepseek.wasm"
[plugin.config]
base_url = "{url}/v1"
model = "{MODEL}"
idle_timeout_ms = 3000
api_key_env = "{KEY_ENV}"
[plugin.grant]
hosts = ["127.0.0.1:{port}"]
env = ["{KEY_ENV}"]
timeout_ms = 20000
"#,
            url = mock.url(),
            port = mock.addr().port(),
        ),
    )
    .context("writing profile")?;
    let dir = w.home.path().join("sessions");
    let children = (0..SESSIONS)
        .map(|i| {
            w.wharf()
                .env(KEY_ENV, KEY)
                .args(["run", &format!("task {i}"), "--no-watch", "--output", "jsonl", "--profile"])
                .arg(&profile)
                .arg("--session-dir")
                .arg(&dir)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
        })
        .collect::<Result<Vec<_>, _>>()
        .context("spawning wharf run")?;
    let mut attempts = 0;
    let mut outcomes = Vec::new();
    for child in children {
        let out = child.wait_with_output().context("waiting for the process")?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(!stdout.contains(KEY) && !stderr.contains(KEY), "the key leaked");
        let events = wharf_tests::json_lines(&stdout)?;
        let id = events
            .iter()
            .find(|e| e["type"] == "session/start")
            .and_then(|e| e["data"]["id"].as_str())
            .unwrap_or_else(|| panic!("no session/start\n{stderr}"))
            .to_string();
        // The stored log is what was streamed, and it is well formed.
        let log = load(&dir, &id).events;
        let stored =
            log.iter().map(serde_json::to_value).collect::<Result<Vec<_>, _>>().context("serializing the log")?;
        assert_eq!(stored, events, "{id}: stored log and streamed events differ");
        wharf_core::invariants::check(&log)
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("checking the log's invariants: {id}"))?;
        // The exit status agrees with how the turn ended.
        let end = events.iter().rev().find(|e| e["type"] == "turn/end").map(|e| e["data"].clone());
        let end = end.unwrap_or_else(|| panic!("{id}: no turn/end\n{stderr}"));
        let reason = end["reason"].as_str().unwrap_or("").to_string();
        let want = match reason.as_str() {
            "completed" => 0,
            "error" | "max_steps" => 1,
            other => panic!("{id}: unexpected end {other}"),
        };
        assert_eq!(out.status.code(), Some(want), "{id}: {reason}\n{stderr}");
        // Retries carry retryable codes and are numbered per step.
        let mut per_step = 0;
        for e in &events {
            match e["type"].as_str() {
                Some("step/start") => {
                    per_step = 0;
                    attempts += 1;
                }
                Some("llm/retry") => {
                    per_step += 1;
                    attempts += 1;
                    assert_eq!(e["data"]["attempt"], json!(per_step), "{id}");
                    let code = e["data"]["code"].as_str().unwrap_or("");
                    assert!(RETRYABLE.contains(&code), "{id}: retried a {code}");
                }
                _ => {}
            }
        }
        outcomes.push(reason);
    }
    // Every request the sessions made reached the mock once, and the mock saw
    // only well-formed requests (tool calls answered, reasoning passed back).
    mock.assert_no_violations();
    assert_eq!(mock.requests().len(), attempts, "requests vs. attempts logged");
    assert!(attempts >= queued, "the faults were not all served: {attempts} < {queued}");
    assert_eq!(mock.remaining_replies(), 0);
    // Non-retryable faults (malformed JSON, garbage SSE) end some turn with
    // an error; the rest complete.
    assert!(outcomes.iter().any(|r| r == "completed"), "{outcomes:?}");
    eprintln!("faults: mock under load: {outcomes:?}, {attempts} requests");
    Ok(())
}

/// Two `wharf serve` hosts on one PostgreSQL database (issue 17), the
/// owner of a session killed with `kill -9` at a seeded random moment of a
/// turn, `WHARF_FAULT_KILLS` times (roles alternate; the killed host is
/// started again). Half the prompts are sent through the other host (stored
/// input routed to the owner). After each kill the survivor takes the
/// session over once the short test lease expires (repair appended), the
/// session continues with a prompt through the survivor, every input is
/// logged exactly once, and the log keeps the invariants with seqs 1..n.
#[test]
fn two_hosts_one_database_owner_killed_at_random_moments() -> anyhow::Result<()> {
    use super::fleet::{Fleet, checked_log, create, logged_inputs, shared_pg, wait_for};
    let test = "faults::two_hosts_one_database_owner_killed_at_random_moments";
    let Some(pg) = shared_pg(test) else { return Ok(()) };
    let kills = env_u64("WHARF_FAULT_KILLS").unwrap_or(8) as usize;
    let seed = env_u64("WHARF_FAULT_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
    });
    eprintln!("faults: two hosts, {kills} kills, seed {seed} (replay with WHARF_FAULT_SEED={seed})");
    let mut rng = Rng(seed);
    let f = Fleet::new(pg.database().map_err(anyhow::Error::msg).context("creating a database")?, "");
    let args = ["--idle-timeout", "1"];
    let mut hosts = [f.host("h0", &args), f.host("h1", &args)];
    let store = f.store();
    let started = Instant::now();
    let mut interrupted = 0;
    for k in 0..kills {
        let ctx = format!("kill {k} of {kills}, seed {seed}");
        let (v, s) = (k % 2, (k + 1) % 2);
        let id = create(&hosts[v], None);
        let first = format!("turn {k}");
        let through = if rng.below(2) == 0 { v } else { s };
        let (code, r) =
            hosts[through].call("POST", &format!("/api/sessions/{id}/prompt"), Some(&json!({"text": first})));
        assert_eq!(code, 200, "{ctx}: {r}");
        // The scripted turn (a 200 ms tool call) takes about 300 ms.
        std::thread::sleep(Duration::from_millis(rng.below(450)));
        hosts[v].kill9();
        let survivor = format!(":{}", hosts[s].pid());
        wait_for(&format!("{ctx}: the takeover"), Duration::from_secs(30), || {
            store.lease(&id).expect("reading the lease").is_some_and(|l| l.holder.ends_with(&survivor))
        });
        let then = format!("after kill {k}");
        let (code, r) = hosts[s].call("POST", &format!("/api/sessions/{id}/followup"), Some(&json!({"text": then})));
        assert_eq!(code, 200, "{ctx}: {r}\n{}", hosts[s].stderr());
        wait_for(&format!("{ctx}: both inputs answered"), Duration::from_secs(30), || {
            let events = store.load(&id).expect("loading the session").events;
            let ends = events.iter().filter(|e| e.type_name() == "turn/end").count();
            let quiet = events.last().is_some_and(|e| e.type_name() == "turn/end");
            logged_inputs(&events, &then).0 == 1 && logged_inputs(&events, &first).0 == 1 && ends >= 2 && quiet
        });
        let log = checked_log(&store, &id);
        assert_eq!(logged_inputs(&log, &first), (1, 1), "{ctx}: the first input once");
        assert_eq!(logged_inputs(&log, &then), (1, 1), "{ctx}: the second input once");
        interrupted += log
            .iter()
            .filter(|e| matches!(&e.kind, wharf_core::events::EventKind::TurnEnd(t) if t.reason == wharf_core::StopReason::Interrupted))
            .count();
        hosts[v] = f.host(&format!("h{v}-{k}"), &args);
    }
    eprintln!(
        "faults: two hosts: {kills} kills, {interrupted} turns repaired as interrupted, {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
