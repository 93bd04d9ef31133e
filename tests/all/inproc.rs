//! In-process helpers for modules that used to spawn `wharf run`, over
//! [`wharf_tests::host`]:
//!
//! - [`turn`]: one headless turn on a host, as `wharf run --output jsonl`
//!   runs it, with the events collected *as they stream* (what the binary
//!   prints) besides the ones read back from the store, so a test can still
//!   compare the two;
//! - [`log_mark`] / [`logs_since`]: the host's own log (`tracing` at `warn`,
//!   what the binary writes on stderr under `WHARF_LOG=warn`), captured for
//!   the whole test process;
//! - the model keys of these modules, from [`wharf_tests::host::TEST_ENV`]
//!   (set before `main`: a host reads its own process's environment, as the
//!   binary does, and setting variables once threads run is not sound).

use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::{Value, json};
use wharf_core::events::EventKind;
use wharf_harness::{Harness, HostOptions};
use wharf_tests::host::Run;

pub use wharf_tests::host::{ANTHROPIC_KEY, ANTHROPIC_KEY_ENV, ANTHROPIC_WRONG_KEY_ENV, LLM_KEY, LLM_KEY_ENV};

// ---------------------------------------------------------------------------
// The host's log.

/// Lines kept at most (the oldest go first).
const MAX_LOG_LINES: usize = 200_000;

struct Captured {
    /// Index of `lines[0]` among every line captured so far.
    base: usize,
    lines: VecDeque<String>,
}

static LOG: Mutex<Captured> = Mutex::new(Captured { base: 0, lines: VecDeque::new() });
static CAPTURE: Once = Once::new();

/// One formatted event; its lines go to [`LOG`] when it is dropped.
struct LineWriter(Vec<u8>);

impl std::io::Write for LineWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.0);
        let mut log = LOG.lock().unwrap_or_else(|e| e.into_inner());
        for line in text.lines() {
            log.lines.push_back(line.to_string());
        }
        while log.lines.len() > MAX_LOG_LINES {
            log.lines.pop_front();
            log.base += 1;
        }
    }
}

/// Installs the capture (once): every `warn` or worse event of the process,
/// formatted as the binary formats its stderr log (without colours).
fn capture() {
    CAPTURE.call_once(|| {
        use tracing_subscriber::prelude::*;
        let layer = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(|| LineWriter(Vec::new()))
            .with_filter(tracing_subscriber::filter::LevelFilter::WARN);
        if tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer)).is_err() {
            eprintln!("wharf-tests: another global tracing subscriber is set: the host log is not captured");
        }
    });
}

/// Where the captured log is now (installing the capture): give it to
/// [`logs_since`].
pub fn log_mark() -> usize {
    capture();
    let log = LOG.lock().unwrap_or_else(|e| e.into_inner());
    log.base + log.lines.len()
}

/// The host log captured since `mark`, one line per line. Tests run in
/// parallel in this process, so it holds their lines too: look for what
/// only this test's hosts write (its session id, a request id of its own),
/// and take "nowhere in it" as the stricter check it is.
pub fn logs_since(mark: usize) -> String {
    let log = LOG.lock().unwrap_or_else(|e| e.into_inner());
    let skip = mark.saturating_sub(log.base);
    log.lines.iter().skip(skip).map(|l| format!("{l}\n")).collect()
}

// ---------------------------------------------------------------------------
// Turns.

/// One headless turn, seen as `wharf run --output jsonl` shows it.
pub struct Turn {
    /// The session, how the turn ended, and its events read back from the
    /// store.
    pub run: Run,
    /// The events as they streamed (the lines `--output jsonl` prints).
    pub streamed: Vec<Value>,
    /// From opening the session to the end of the turn.
    pub elapsed: Duration,
    /// The error `wharf run` prints as `wharf: …` when a required MCP
    /// server is not ready (the turn then ends `blocked`).
    pub mcp_error: Option<String>,
}

impl Turn {
    /// The streamed events as the text `--output jsonl` prints.
    pub fn jsonl(&self) -> String {
        self.streamed.iter().map(|v| format!("{v}\n")).collect()
    }
}

/// Runs `task` on `h` as `wharf run` does: session `resume` or a new one,
/// the host's headless approver, required MCP servers waited for, the log
/// closed at the end (so a later turn can resume it; with MCP servers, when
/// the host closes).
pub async fn turn(h: &Harness, resume: Option<&str>, task: &str, max_steps: Option<u32>) -> Result<Turn> {
    let t0 = Instant::now();
    let stop = tokio_util::sync::CancellationToken::new();
    let (agent, first_seq) = h.open_agent_until(resume, h.headless_approver(), max_steps, stop.clone())?;
    let mut rx = agent.log().subscribe_from(first_seq).context("subscribing to the session log")?;
    // The printer of `wharf run`: every event as appended, up to the turn's end.
    let printer = tokio::spawn(async move {
        let mut out = Vec::new();
        while let Some(ev) = rx.recv().await {
            let ended = matches!(ev.kind, EventKind::TurnEnd(_));
            out.push(serde_json::to_value(&ev).unwrap_or(Value::Null));
            if ended {
                break;
            }
        }
        out
    });
    let mcp_error = h.mcp_ready().await.err().map(|e| e.to_string());
    let summary = agent.prompt(task.to_string()).await;
    agent.close_cells().await;
    let elapsed = t0.elapsed();
    stop.cancel();
    agent.log().flush().await.context("flushing the session log")?;
    let released = agent.log().watch_release();
    let session = agent.session_id().to_string();
    drop(agent);
    let streamed = tokio::time::timeout(Duration::from_secs(10), printer)
        .await
        .context("the turn's events stopped streaming before its end")?
        .context("the printer task failed")?;
    let waited = tokio::time::timeout(Duration::from_secs(10), async {
        while !released.is_released() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    anyhow::ensure!(waited.is_ok(), "session {session}'s log is still held 10 s after the turn");
    let summary = summary?;
    let events = h.store.load(&session)?.events.into_iter().filter(|e| e.seq >= first_seq).collect();
    let as_events = streamed.iter().filter_map(|v| serde_json::from_value(v.clone()).ok()).collect();
    Ok(Turn { run: Run { session, summary, events, streamed: as_events }, streamed, elapsed, mcp_error })
}

/// The options [`wharf_tests::host::TestHost`] builds a host from, for a
/// host that must be started another way (`Harness::start_with`, as a
/// surface adds its own config): profile file `profile`, the workspace,
/// home and sessions given.
pub fn options(profile: &Path, workspace: &Path, home: &Path, sessions: &Path) -> HostOptions {
    HostOptions {
        profile: profile.display().to_string(),
        workspace: Some(workspace.to_path_buf()),
        session_dir: Some(sessions.to_path_buf()),
        watch: false,
        home: Some(home.to_path_buf()),
        plugin_dir: wharf_tests::target_dir().join("plugins"),
        plugin_dir_explicit: true,
        cache_dir: Some(wharf_tests::target_dir().join("test-cache")),
        ..HostOptions::default()
    }
}

/// One headless turn as a test of `wharf run --output jsonl` saw it.
pub struct Headless {
    /// `wharf run`'s exit code.
    pub code: i32,
    /// The streamed events.
    pub events: Vec<Value>,
    /// The streamed events as the JSON lines `--output jsonl` prints.
    pub stdout: String,
    /// The host's notices (`wharf: …`) and log (`warn`) meanwhile.
    pub stderr: String,
    /// How long the turn took.
    pub elapsed: Duration,
}

/// One headless turn on an in-process host built from `profile` (with its
/// workspace, home and session directory), then the host closed.
pub async fn headless(profile: &Path, ws: &Path, home: &Path, sessions: &Path, task: &str) -> Headless {
    let mark = log_mark();
    let host = wharf_tests::host::TestHost::builder()
        .profile(profile.display().to_string())
        .workspace(ws)
        .home(home)
        .sessions(sessions)
        .start_in(home)
        .await
        .expect("starting the host");
    let turn = turn(&host.harness, None, task, None).await.expect("running the turn");
    let mut stderr: String = host.notices().iter().map(|n| format!("wharf: {n}\n")).collect();
    host.close().await;
    stderr.push_str(&logs_since(mark));
    Headless { code: turn.run.exit_code(), stdout: turn.jsonl(), events: turn.streamed, stderr, elapsed: turn.elapsed }
}

impl Headless {
    pub fn of_type(&self, t: &str) -> Vec<&Value> {
        self.events.iter().filter(|e| e["type"] == t).map(|e| &e["data"]).collect()
    }

    pub fn session_id(&self) -> String {
        self.of_type("session/start").first().and_then(|d| d["id"].as_str()).unwrap_or("").to_string()
    }

    pub fn turn_end(&self) -> Value {
        self.of_type("turn/end").last().map(|d| (*d).clone()).unwrap_or(Value::Null)
    }

    pub fn reason(&self) -> String {
        self.turn_end()["reason"].as_str().unwrap_or("").to_string()
    }

    /// `(code, delay_ms)` of every `llm/retry`, with attempts checked 1, 2, …
    pub fn retries(&self) -> Vec<(String, u64)> {
        let r = self.of_type("llm/retry");
        for (i, d) in r.iter().enumerate() {
            assert_eq!(d["attempt"], json!(i + 1), "attempts are numbered from 1");
        }
        r.iter().map(|d| (d["code"].as_str().unwrap_or("").to_string(), d["delay_ms"].as_u64().unwrap_or(0))).collect()
    }

    pub fn messages(&self) -> Vec<&Value> {
        self.of_type("assistant/message")
    }

    pub fn last_text(&self) -> String {
        self.messages().last().and_then(|m| m["content"].as_str()).unwrap_or("").to_string()
    }

    pub fn explain(&self) -> String {
        format!("exit {}\n--- stdout\n{}\n--- stderr\n{}", self.code, self.stdout, self.stderr)
    }
}
