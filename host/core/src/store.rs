//! The session store: the append-only log of every session, behind a
//! [`Backend`] seam.
//!
//! [`SessionStore`] and [`SessionLog`] are the API the rest of the tree uses; seq
//! assignment, the projection, crash repair, fork and export live here, the
//! same for every backend. Persistence is a [`Backend`] (see [`backend`] for
//! the contract): the embedded default is one JSONL file per session
//! ([`JsonlBackend`], [`SessionStore::new`]), described below; `wharf-store-pg`
//! keeps sessions in PostgreSQL with leases and fencing tokens instead of
//! file locks ([`SessionStore::with_backend`]). Every backend stores the text of
//! [`Event::to_json_line`], so an event's JSON is byte-identical in both.
//!
//! # Layout (JSONL)
//!
//! `<root>/<id>.jsonl` holds the events, one JSON object per line (see
//! [`crate::events`]); a writer holds an `flock` on it (below), whose holder
//! the kernel's lock table names for a second writer's error. The
//! directory is the caller's choice ([`SessionStore::new`]; the `wharf` binary's
//! default is `$WHARF_HOME/sessions`, else `~/.wharf/sessions`). Ids sort by creation time
//! ([`crate::util::new_session_id`]). There is no other index: listing reads
//! the head of each file, so anything derived is rebuildable from the logs.
//!
//! # Durability
//!
//! - [`SessionLog::append`] writes the whole line with one `write(2)` before it
//!   returns. An appended event therefore survives `kill -9` of the process
//!   (it is in the kernel's page cache).
//! - `fdatasync` is batched: a background thread syncs every
//!   [`StoreOptions::sync_interval`] (default 200 ms) while there are unsynced
//!   appends (the thread ends once an interval passes without any, so an idle
//!   session holds no thread); [`SessionLog::flush`] syncs on demand (the agent flushes at every
//!   turn end). On power loss or an OS crash, events appended since the last
//!   sync may be lost — at most one interval's worth, and never anything before
//!   a completed `flush`. A partially written last line is detected on reopen.
//! - Session creation syncs the file and its directory before returning.
//!
//! # One writer per session
//!
//! Opening a session for writing takes `flock(LOCK_EX | LOCK_NB)` on the log
//! file's own descriptor (so an open session holds exactly one descriptor),
//! before reading it; a second writer (another process, or another open in this one) gets
//! [`StoreError::Locked`]. Readers ([`SessionStore::load`], [`SessionStore::list`],
//! [`SessionStore::export`], [`SessionStore::fork`]) take no lock: lines are appended whole,
//! and a line still being written looks like a torn tail.
//!
//! # Crash repair (never rewrites history)
//!
//! - **Torn last line**: a final line that does not parse (a write cut short)
//!   is skipped by every loader and reported as [`LoadWarning::TornTail`];
//!   the events before it load. When the session is reopened for writing, the
//!   writer first terminates the torn bytes with a newline (if they lack one)
//!   and appends `session/repaired{torn_line, torn_bytes}`; from then on,
//!   loaders skip exactly that line because the next event vouches for it. Any
//!   other unparseable line is corruption and refuses to load.
//! - **Open turn**: if the log ends inside a turn, reopening appends what is
//!   needed to close it: an `assistant/message{interrupted}` with the streamed
//!   prefix (if chunks arrived without a message), `approval/decided{cancelled}`
//!   for a question left open, `tool/result{is_error, error_code: INTERRUPTED}`
//!   for every call a program made (`tool/call` with a `parent`, e.g. inside
//!   `run_code`) still without a result, in log order, then a `tool/call` (if
//!   missing) and `tool/result{…INTERRUPTED}` for every call of the model in
//!   the open step without a result, `step/end`, then `turn/end{interrupted}`.
//!   The model-visible history stays valid, and every `tool/call` — inner ones
//!   included — has exactly one result ([`crate::invariants`]).
//!
//! # Write failures
//!
//! A failed append (disk full, read-only file system, I/O error) is rolled
//! back by truncating the file to its last good length, so the log stays
//! intact and the error names the cause ([`StoreError::DiskFull`] …). If even
//! the rollback fails, the writer refuses further appends
//! ([`StoreError::Poisoned`]); reopening repairs the torn tail.

pub mod backend;
mod budget;
pub mod conformance;
mod jsonl;

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;

pub use backend::{AppendDone, Backend, Encoded, LeaseInfo, RawLog, RemoteInput, Syncer, Writer};
pub use budget::{RetryClock, retry_clock, retry_scope};
pub use jsonl::JsonlBackend;

use crate::events::{
    ApprovalDecided, ApprovalOutcome, AssistantMessage, Event, EventKind, FORMAT_VERSION, InboxKind, SessionRepaired,
    SessionStart, StepEnd, StopReason, ToolCallEvent, ToolResultEvent, TurnEnd,
};
use crate::plugin::{Message, ToolCall, ToolErrorCode, Usage};
use crate::projection::{PendingInboxItem, Projection};
use crate::util;

/// A store failure. Messages name the session, file and line where known.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another writer holds the session.
    #[error("session `{id}` is already open by another process ({})", pid_text(*.pid))]
    Locked {
        /// Session id.
        id: String,
        /// The holder's pid, if it could be read.
        pid: Option<u32>,
    },
    /// No such session.
    #[error("session `{0}` not found")]
    NotFound(String),
    /// The id has characters a session id cannot have.
    #[error("invalid session id `{0}` (allowed: letters, digits, `-`, `_`, `.`; not starting with `.`)")]
    InvalidId(String),
    /// A session with that id already exists.
    #[error("session `{0}` already exists")]
    AlreadyExists(String),
    /// The log has an event type this build does not know and it is not
    /// marked ignorable.
    #[error(
        "{location}:{line}: unknown event type `{type_name}` (not marked ignorable); was this session written by a newer Wharf?"
    )]
    UnknownEventType {
        /// Where the log is kept (a file, or `LOCATION#id`).
        location: String,
        /// 1-based line.
        line: u64,
        /// The type.
        type_name: String,
    },
    /// A line that is not a valid event, and not a torn tail.
    #[error("{location}:{line}: corrupt event: {detail}")]
    Corrupt {
        /// Where the log is kept (a file, or `LOCATION#id`).
        location: String,
        /// 1-based line.
        line: u64,
        /// Parser message.
        detail: String,
    },
    /// Seq numbers are not contiguous.
    #[error("{location}:{line}: expected seq {expected}, found {found}")]
    SeqGap {
        /// Where the log is kept (a file, or `LOCATION#id`).
        location: String,
        /// 1-based line.
        line: u64,
        /// Expected seq.
        expected: u64,
        /// Found seq.
        found: u64,
    },
    /// The file does not start with a `session/start` event.
    #[error("{location}: no session/start header (empty or damaged file)")]
    MissingHeader {
        /// Where the log is kept (a file, or `LOCATION#id`).
        location: String,
    },
    /// A fork point that is not a turn boundary.
    #[error("cannot fork session `{id}` at seq {seq}: {reason}")]
    InvalidForkPoint {
        /// Source session.
        id: String,
        /// Requested seq.
        seq: u64,
        /// Why.
        reason: String,
    },
    /// No space left on the device (or quota exceeded).
    #[error("disk full while {op} {location}")]
    DiskFull {
        /// What was being done.
        op: String,
        /// The file or directory.
        location: String,
    },
    /// The file system is read-only.
    #[error("read-only file system while {op} {location}")]
    ReadOnly {
        /// What was being done.
        op: String,
        /// The file or directory.
        location: String,
    },
    /// The OS refused access.
    #[error("permission denied while {op} {location}")]
    PermissionDenied {
        /// What was being done.
        op: String,
        /// The file or directory.
        location: String,
    },
    /// Another I/O failure.
    #[error("I/O error while {op} {location}: {cause}")]
    Io {
        /// What was being done.
        op: String,
        /// The file or directory.
        location: String,
        /// The OS error. Shown in the message and deliberately not the
        /// error's `source()`, so `{:#}` chains do not print it twice.
        cause: io::Error,
    },
    /// The writer could not roll back a failed append; it refuses to write.
    #[error("session `{id}`: the log writer stopped after a failed write ({cause}); reopen the session to repair it")]
    Poisoned {
        /// Session id.
        id: String,
        /// The original failure.
        cause: String,
    },
    /// An event could not be encoded (should not happen).
    #[error("cannot encode event: {0}")]
    Encode(String),
    /// Another host holds the session's lease (a database store).
    #[error("session `{id}` is open on {holder} (lease expires in {expires_in_ms} ms unless renewed)")]
    Leased {
        /// Session id.
        id: String,
        /// The lease holder (host and pid).
        holder: String,
        /// Time left on the lease.
        expires_in_ms: u64,
    },
    /// This writer's lease was taken over: its appends are refused.
    #[error(
        "session `{id}`: this writer no longer holds the session ({detail}); its append was refused, reopen the session"
    )]
    Fenced {
        /// Session id.
        id: String,
        /// Who holds it now and with which token.
        detail: String,
    },
    /// The store could not be reached or answered with an error.
    #[error("session store {location}: {detail}")]
    Unavailable {
        /// The store (URL without password).
        location: String,
        /// What failed.
        detail: String,
    },
    /// The backend cannot do this.
    #[error("the session store at {location} does not support {op}")]
    Unsupported {
        /// The operation.
        op: String,
        /// The store.
        location: String,
    },
}

/// The `tool/result` crash repair appends for call `c`, whose outcome is unknown.
fn interrupted_result(turn: u64, step: u32, c: &ToolCall) -> EventKind {
    EventKind::ToolResult(ToolResultEvent {
        turn,
        step,
        call_id: c.id.clone(),
        name: c.name.clone(),
        content: "Error: the host stopped before this tool call finished; its result is unknown".into(),
        is_error: true,
        error_code: Some(ToolErrorCode::Interrupted),
        plugin: None,
        version: None,
        truncated: false,
        original_bytes: None,
        full_content: None,
        duration_ms: None,
        details: None,
    })
}

fn pid_text(pid: Option<u32>) -> String {
    match pid {
        Some(p) => format!("pid {p}"),
        None => "pid unknown".to_string(),
    }
}

/// Maps an OS error to a typed store error.
pub(crate) fn io_error(op: impl Into<String>, path: &Path, e: io::Error) -> StoreError {
    let (op, location) = (op.into(), path.display().to_string());
    match e.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => StoreError::DiskFull { op, location },
        Some(libc::EROFS) => StoreError::ReadOnly { op, location },
        Some(libc::EACCES) | Some(libc::EPERM) => StoreError::PermissionDenied { op, location },
        _ => StoreError::Io { op, location, cause: e },
    }
}

/// Something a loader tolerated and reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadWarning {
    /// The last line is a torn write; it was skipped.
    TornTail {
        /// 1-based line.
        line: u64,
        /// Its length in bytes.
        bytes: u64,
        /// Parser message.
        detail: String,
    },
    /// A torn line that an earlier reopen terminated and vouched for with
    /// `session/repaired`; skipped.
    RepairedTornLine {
        /// 1-based line.
        line: u64,
    },
}

impl std::fmt::Display for LoadWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TornTail { line, bytes, detail } => {
                write!(f, "line {line}: torn last line ({bytes} bytes) skipped: {detail}")
            }
            Self::RepairedTornLine { line } => write!(f, "line {line}: previously repaired torn line skipped"),
        }
    }
}

/// A session read from disk.
#[derive(Debug, Clone)]
pub struct LoadedSession {
    /// The header (seq 1).
    pub header: SessionStart,
    /// Every event, in seq order.
    pub events: Vec<Event>,
    /// The stored text of each event (same length as `events`): what
    /// [`SessionStore::import`] copies byte for byte.
    pub lines: Vec<String>,
    /// What the loader tolerated.
    pub warnings: Vec<LoadWarning>,
}

impl LoadedSession {
    /// The model-visible messages.
    pub fn messages(&self) -> Vec<Message> {
        crate::projection::derive_messages(&self.events)
    }
}

/// A session's entry in a listing (read from the head of its log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSummary {
    /// Session id.
    pub id: String,
    /// The header.
    pub header: SessionStart,
    /// First user message, shortened to 80 characters, if found near the top.
    pub title: Option<String>,
    /// Where the log is kept, for people: a file, or `LOCATION#id` for
    /// another backend.
    pub location: String,
    /// Size of the log in bytes (its JSONL form).
    pub bytes: u64,
}

/// Export formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    /// One event per line (the log, normalized: torn lines dropped).
    Jsonl,
    /// A JSON array of events.
    JsonArray,
}

/// What reopening a session did.
#[derive(Debug, Clone, Default)]
pub struct OpenReport {
    /// What the loader tolerated.
    pub warnings: Vec<LoadWarning>,
    /// Events appended by repair (empty when the log was clean).
    pub repairs: Vec<Event>,
}

/// Options for a new session.
#[derive(Debug, Clone, Default)]
pub struct NewSession {
    /// Use this id instead of a generated one.
    pub id: Option<String>,
    /// Workspace directory.
    pub workspace: Option<String>,
    /// Profile name.
    pub profile: Option<String>,
}

/// SessionStore tuning.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// How often the background thread syncs unsynced appends.
    pub sync_interval: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self { sync_interval: Duration::from_millis(200) }
    }
}

/// Where sessions are kept: a directory of JSONL logs ([`SessionStore::new`], the
/// default) or any other [`Backend`] ([`SessionStore::with_backend`]). Cheap to clone.
#[derive(Clone)]
pub struct SessionStore {
    backend: Arc<dyn Backend>,
    options: StoreOptions,
}

impl std::fmt::Debug for SessionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionStore").field("backend", &self.backend).field("options", &self.options).finish()
    }
}

impl SessionStore {
    /// A JSONL store rooted at `root` (created on first write).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self::with_backend(Arc::new(JsonlBackend::new(root)))
    }

    /// A store over any backend (e.g. PostgreSQL, `wharf-store-pg`).
    pub fn with_backend(backend: Arc<dyn Backend>) -> Self {
        Self { backend, options: StoreOptions::default() }
    }

    /// Replaces the options.
    pub fn with_options(mut self, options: StoreOptions) -> Self {
        self.options = options;
        self
    }

    /// Where sessions are kept, for people: a directory, or a database URL
    /// without its password.
    pub fn describe(&self) -> String {
        self.backend.describe()
    }

    /// The header (`session/start`) of session `id`, read without loading
    /// the rest of the log where the backend can.
    pub fn header(&self, id: &str) -> Result<SessionStart, StoreError> {
        validate_id(id)?;
        self.backend.header(id)
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// Whether session `id` exists.
    pub fn exists(&self, id: &str) -> Result<bool, StoreError> {
        validate_id(id)?;
        self.backend.exists(id)
    }

    /// Who holds the write right of `id`, where the backend can tell (a
    /// database lease); `None` for the JSONL store.
    pub fn lease(&self, id: &str) -> Result<Option<LeaseInfo>, StoreError> {
        validate_id(id)?;
        self.backend.lease(id)
    }

    /// Stores an input item for the owner of session `id`, which may run on
    /// another host; the owner receives it from [`SessionLog::take_inputs`].
    /// [`StoreError::Unsupported`] for the JSONL store (one host: deliver
    /// to the agent directly).
    pub fn push_input(&self, id: &str, kind: InboxKind, text: &str) -> Result<String, StoreError> {
        validate_id(id)?;
        self.backend.push_input(id, kind, text)
    }

    /// Streams the committed events of session `id` with `seq >= from_seq`,
    /// whichever host writes them, without gaps or duplicates.
    /// [`StoreError::Unsupported`] for the JSONL store (use
    /// [`SessionLog::subscribe_from`] on the writer).
    pub fn watch(&self, id: &str, from_seq: u64) -> Result<mpsc::UnboundedReceiver<Event>, StoreError> {
        validate_id(id)?;
        self.backend.watch(id, from_seq)
    }

    /// Creates a new session, writes its header and syncs it.
    pub fn create(&self, opts: NewSession) -> Result<SessionLog, StoreError> {
        let header = |id: &str| SessionStart {
            id: id.to_string(),
            format: FORMAT_VERSION,
            created: util::now_rfc3339(),
            parent: None,
            fork_seq: None,
            workspace: opts.workspace.clone(),
            profile: opts.profile.clone(),
            spawned_by: None,
        };
        self.create_with(opts.id.as_deref(), header, &[])
    }

    /// Creates a subagent's session, its header linked to the parent call.
    pub fn create_child(
        &self,
        opts: NewSession,
        spawned_by: crate::events::SpawnedBy,
    ) -> Result<SessionLog, StoreError> {
        let header = |id: &str| SessionStart {
            id: id.to_string(),
            format: FORMAT_VERSION,
            created: util::now_rfc3339(),
            parent: None,
            fork_seq: None,
            workspace: opts.workspace.clone(),
            profile: opts.profile.clone(),
            spawned_by: Some(spawned_by.clone()),
        };
        self.create_with(opts.id.as_deref(), header, &[])
    }

    /// Takes a fresh id (or `fixed_id`) and its writer.
    fn create_writer(&self, fixed_id: Option<&str>) -> Result<(String, Box<dyn Writer>), StoreError> {
        if let Some(id) = fixed_id {
            validate_id(id)?;
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            let id = fixed_id.map(str::to_string).unwrap_or_else(util::new_session_id);
            match self.backend.create(&id, &self.options) {
                Ok(w) => return Ok((id, w)),
                // A generated id collided with another session: draw another.
                Err(StoreError::Locked { .. } | StoreError::AlreadyExists(_) | StoreError::Leased { .. })
                    if fixed_id.is_none() && attempt < 8 => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Creates a session whose header is built by `header(id)` and whose next
    /// events are copied verbatim from `seed` (which must continue at seq 2).
    fn create_with(
        &self,
        fixed_id: Option<&str>,
        header: impl Fn(&str) -> SessionStart,
        seed: &[Event],
    ) -> Result<SessionLog, StoreError> {
        let (id, writer) = self.create_writer(fixed_id)?;
        let log = SessionLog::start(self.clone(), id.clone(), writer, Projection::new());
        let written = (|| {
            log.append(EventKind::SessionStart(header(&id)))?;
            for chunk in seed.chunks(IMPORT_BATCH) {
                let batch = chunk
                    .iter()
                    .map(|ev| Ok((ev.clone(), ev.to_json_line().map_err(|e| StoreError::Encode(e.to_string()))?)))
                    .collect::<Result<Vec<_>, StoreError>>()?;
                log.append_verbatim(batch)?;
            }
            log.sync_now()
        })();
        if let Err(e) = written {
            // A brand-new session with no committed history: remove it
            // rather than leave a session without a header behind.
            drop(log);
            self.backend.discard(&id);
            return Err(e);
        }
        Ok(log)
    }

    /// Copies a session given as its stored lines (e.g. [`LoadedSession::lines`]
    /// of another store) into this store under the same id, byte for byte,
    /// and syncs it. [`StoreError::AlreadyExists`] if the id is taken.
    pub fn import(&self, lines: &[String]) -> Result<SessionLog, StoreError> {
        let mut events = Vec::with_capacity(lines.len());
        for (i, l) in lines.iter().enumerate() {
            let ev = Event::decode(l).map_err(|e| StoreError::Corrupt {
                location: "<import>".into(),
                line: i as u64 + 1,
                detail: e.to_string(),
            })?;
            events.push(ev);
        }
        let id = match events.first().map(|e| &e.kind) {
            Some(EventKind::SessionStart(h)) => h.id.clone(),
            _ => return Err(StoreError::MissingHeader { location: "<import>".into() }),
        };
        let (id, writer) = self.create_writer(Some(&id))?;
        let log = SessionLog::start(self.clone(), id.clone(), writer, Projection::new());
        let written = (|| {
            let mut it = events.into_iter().zip(lines.iter().cloned()).peekable();
            while it.peek().is_some() {
                let batch: Vec<(Event, String)> = it.by_ref().take(IMPORT_BATCH).collect();
                log.append_verbatim(batch)?;
            }
            log.sync_now()
        })();
        if let Err(e) = written {
            drop(log);
            self.backend.discard(&id);
            return Err(e);
        }
        Ok(log)
    }

    /// Opens an existing session for appending (resume): takes the writer
    /// lock (or lease), loads the log, repairs a torn tail and an open turn
    /// (by appending only) and syncs.
    pub fn open(&self, id: &str) -> Result<(SessionLog, OpenReport), StoreError> {
        self.open_with(id, &|_| false)
    }

    /// Like [`open`](Self::open), but when the open step has a logged,
    /// unanswered call of the model that `keep` accepts (a durable program,
    /// [`crate::durable`]), the turn is left open for the agent to re-run
    /// it: only the step's open questions and the programs' calls still
    /// without a result are closed (`INTERRUPTED`).
    pub fn open_with(
        &self,
        id: &str,
        keep: &dyn Fn(&ToolCall) -> bool,
    ) -> Result<(SessionLog, OpenReport), StoreError> {
        validate_id(id)?;
        let (writer, loaded) = self.backend.open(id, &self.options)?;
        let projection = Projection::from_events(&loaded.events);
        let log = SessionLog::start(self.clone(), id.to_string(), writer, projection);
        let mut report = OpenReport { warnings: loaded.warnings, repairs: vec![] };
        if let Some((line, bytes)) = loaded.torn {
            report
                .repairs
                .push(log.append(EventKind::SessionRepaired(SessionRepaired { torn_line: line, torn_bytes: bytes }))?);
        }
        report.repairs.extend(log.repair_open_turn(keep)?);
        // A yielded cell's calls still open (outside any open step).
        let stray = log.state().projection.open_inner_calls();
        for (turn, step, c) in stray {
            report.repairs.push(log.append(interrupted_result(turn, step, &c))?);
        }
        if !report.repairs.is_empty() {
            log.sync_now()?;
        }
        Ok((log, report))
    }

    /// Reads a session without taking the writer lock.
    pub fn load(&self, id: &str) -> Result<LoadedSession, StoreError> {
        validate_id(id)?;
        let loaded = self.backend.load(id)?;
        let header = match loaded.events.first().map(|e| &e.kind) {
            Some(EventKind::SessionStart(h)) => h.clone(),
            _ => return Err(StoreError::MissingHeader { location: self.backend.describe_session(id) }),
        };
        Ok(LoadedSession { header, events: loaded.events, lines: loaded.lines, warnings: loaded.warnings })
    }

    /// Lists sessions, oldest first (by id), reading only the head of each.
    /// Sessions without a readable header are skipped (with a `tracing`
    /// warning).
    pub fn list(&self) -> Result<Vec<SessionSummary>, StoreError> {
        let mut out = self.backend.list()?;
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// Forks `id` after event `at_seq` into a new session whose header names
    /// the parent; events `2..=at_seq` are copied verbatim (same seq and
    /// time). `at_seq` must be a turn boundary: no turn may be open after it.
    /// Returns the new session, open for appending.
    pub fn fork(&self, id: &str, at_seq: u64) -> Result<SessionLog, StoreError> {
        let src = self.load(id)?;
        let last = src.events.last().map(|e| e.seq).unwrap_or(0);
        let bad = |reason: String| StoreError::InvalidForkPoint { id: id.to_string(), seq: at_seq, reason };
        if at_seq == 0 || at_seq > last {
            return Err(bad(format!("the session has events 1..={last}")));
        }
        let prefix = &src.events[..at_seq as usize];
        let p = Projection::from_events(prefix);
        if let Some(turn) = p.open_turn() {
            let boundaries: Vec<u64> =
                src.events.iter().filter(|e| matches!(e.kind, EventKind::TurnEnd(_))).map(|e| e.seq).collect();
            let before = boundaries.iter().rev().find(|s| **s < at_seq).copied().unwrap_or(1);
            let after = boundaries.iter().find(|s| **s > at_seq);
            let hint = match after {
                Some(a) => format!("seq {before} or {a}"),
                None => format!("seq {before}"),
            };
            return Err(bad(format!("it is inside turn {turn}; fork at a turn boundary such as {hint}")));
        }
        let h = &src.header;
        self.create_with(
            None,
            |new_id| SessionStart {
                id: new_id.to_string(),
                format: FORMAT_VERSION,
                created: util::now_rfc3339(),
                parent: Some(id.to_string()),
                fork_seq: Some(at_seq),
                workspace: h.workspace.clone(),
                profile: h.profile.clone(),
                spawned_by: h.spawned_by.clone(),
            },
            &prefix[1..],
        )
    }

    /// Writes a session's events to `out` (torn lines dropped).
    pub fn export(&self, id: &str, format: ExportFormat, out: &mut dyn Write) -> Result<(), StoreError> {
        let s = self.load(id)?;
        let stdout = Path::new("<output>");
        let w = |out: &mut dyn Write, b: &[u8]| out.write_all(b).map_err(|e| io_error("exporting to", stdout, e));
        if format == ExportFormat::JsonArray {
            w(out, b"[")?;
        }
        for (i, ev) in s.events.iter().enumerate() {
            let line = ev.to_json_line().map_err(|e| StoreError::Encode(e.to_string()))?;
            match format {
                ExportFormat::Jsonl => w(out, format!("{line}\n").as_bytes())?,
                ExportFormat::JsonArray => {
                    let sep = if i == 0 { "\n" } else { ",\n" };
                    w(out, format!("{sep}{line}").as_bytes())?
                }
            }
        }
        if format == ExportFormat::JsonArray {
            w(out, b"\n]\n")?;
        }
        out.flush().map_err(|e| io_error("exporting to", stdout, e))
    }
}

/// Events per backend call when copying (fork, import).
const IMPORT_BATCH: usize = 512;

pub(crate) fn validate_id(id: &str) -> Result<(), StoreError> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok { Ok(()) } else { Err(StoreError::InvalidId(id.to_string())) }
}

// ---------------------------------------------------------------------------
// The writer.

/// An open session log: the single writer of one session. Cheap to clone
/// (all clones share the writer); the lock (or lease) is released when the
/// last clone is dropped, after a final sync.
#[derive(Clone)]
pub struct SessionLog {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for SessionLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionLog").field("id", &self.shared.id).field("location", &self.shared.location).finish()
    }
}

/// Tells whether an open [`SessionLog`] has been released (see
/// [`SessionLog::watch_release`]).
#[derive(Clone, Debug)]
pub struct LogRelease(std::sync::Weak<Shared>);

impl LogRelease {
    /// Whether every clone of the log is dropped (its lock released).
    pub fn is_released(&self) -> bool {
        self.0.strong_count() == 0
    }

    /// The log, while some clone still holds it open: for a listener that
    /// writes to a session only as long as its owner keeps it (it must not
    /// keep the lock or lease itself).
    pub fn upgrade(&self) -> Option<SessionLog> {
        self.0.upgrade().map(|shared| SessionLog { shared })
    }
}

struct Shared {
    /// The store the session is kept in (a subagent's session goes there
    /// too).
    store: SessionStore,
    id: String,
    /// Where the log is kept, for people ([`Backend::describe_session`]).
    location: String,
    sync: Arc<dyn Syncer>,
    state: Mutex<State>,
    /// Signalled when an append started without waiting
    /// ([`SessionLog::append_batch_async`]) has ended, for threads that wait.
    settled: std::sync::Condvar,
    /// The same, for tasks that wait.
    settled_async: tokio::sync::Notify,
}

struct State {
    writer: Box<dyn Writer>,
    next_seq: u64,
    projection: Projection,
    subscribers: Vec<Subscriber>,
    /// The events of an append in flight on the backend's thread: until it
    /// ends, nobody else appends or reads the state (as if the lock were
    /// held for the round trip, without holding a thread).
    inflight: Option<Vec<Event>>,
}

/// How [`SessionLog::begin_append`] went.
enum Begun {
    /// Another append is in flight: the events, to try again.
    Busy(Vec<EventKind>),
    /// Stored in place.
    Stored(Vec<Event>),
    /// On the backend's thread: the answer comes here.
    InFlight(tokio::sync::oneshot::Receiver<Result<Vec<Event>, StoreError>>),
}

/// `kinds` as the log's next events from `next_seq`, one time, each with
/// its line.
fn encoded(next_seq: u64, kinds: Vec<EventKind>) -> Result<Vec<(Event, String)>, StoreError> {
    let time = util::now_rfc3339();
    let mut batch = Vec::with_capacity(kinds.len());
    for (i, kind) in kinds.into_iter().enumerate() {
        let ignorable = matches!(kind, EventKind::Unknown { .. });
        let ev = Event { seq: next_seq + i as u64, time: time.clone(), ignorable, kind };
        let line = ev.to_json_line().map_err(|e| StoreError::Encode(e.to_string()))?;
        batch.push((ev, line));
    }
    Ok(batch)
}

fn raw_state(shared: &Shared) -> MutexGuard<'_, State> {
    shared.state.lock().unwrap_or_else(|e| e.into_inner())
}

/// Applies stored events to the state: seq, projection, subscribers.
fn applied(st: &mut State, events: Vec<Event>) -> Vec<Event> {
    for ev in &events {
        st.next_seq += 1;
        st.projection.apply(ev);
        st.subscribers.retain(|s| match &s.wants {
            Some(wants) if !wants(ev) => !s.tx.is_closed(),
            _ => s.tx.send(ev.clone()).is_ok(),
        });
    }
    events
}

/// A receiver of committed events; `wants` (when set) picks which.
struct Subscriber {
    tx: mpsc::UnboundedSender<Event>,
    wants: Option<EventFilter>,
}

/// Which events a filtered subscriber gets, decided as each is committed.
pub type EventFilter = Box<dyn Fn(&Event) -> bool + Send>;

impl SessionLog {
    fn start(store: SessionStore, id: String, writer: Box<dyn Writer>, projection: Projection) -> SessionLog {
        let next_seq = projection.last_seq() + 1;
        let location = store.backend.describe_session(&id);
        SessionLog {
            shared: Arc::new(Shared {
                store,
                id,
                location,
                sync: writer.syncer(),
                state: Mutex::new(State { writer, next_seq, projection, subscribers: Vec::new(), inflight: None }),
                settled: std::sync::Condvar::new(),
                settled_async: tokio::sync::Notify::new(),
            }),
        }
    }

    /// The state once no append is in flight.
    fn state(&self) -> MutexGuard<'_, State> {
        let mut st = raw_state(&self.shared);
        while st.inflight.is_some() {
            st = self.shared.settled.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        st
    }

    /// Session id.
    pub fn id(&self) -> &str {
        &self.shared.id
    }

    /// A handle that does not keep the log open: it tells when every clone
    /// is gone and so the lock (or lease) is released.
    pub fn watch_release(&self) -> LogRelease {
        LogRelease(Arc::downgrade(&self.shared))
    }

    /// Where the log is kept, for people: a file, or `LOCATION#id` for
    /// another backend.
    pub fn describe(&self) -> &str {
        &self.shared.location
    }

    /// The store the session is kept in.
    pub fn store(&self) -> &SessionStore {
        &self.shared.store
    }

    /// Appends one event (seq and time assigned here) and returns it. The
    /// event is stored before this returns; syncing is batched (see the
    /// module docs). An [`EventKind::Unknown`] is always written as ignorable.
    pub fn append(&self, kind: EventKind) -> Result<Event, StoreError> {
        let ignorable = matches!(kind, EventKind::Unknown { .. });
        let mut st = self.state();
        let ev = Event { seq: st.next_seq, time: util::now_rfc3339(), ignorable, kind };
        let line = ev.to_json_line().map_err(|e| StoreError::Encode(e.to_string()))?;
        let mut out = self.commit(&mut st, vec![(ev, line)])?;
        out.pop().ok_or_else(|| StoreError::Encode("empty commit".into()))
    }

    /// Appends several events with consecutive seqs in one backend call (one
    /// write, or one database transaction), all or nothing.
    pub fn append_batch(&self, kinds: Vec<EventKind>) -> Result<Vec<Event>, StoreError> {
        let mut st = self.state();
        let batch = encoded(st.next_seq, kinds)?;
        self.commit(&mut st, batch)
    }

    /// Appends an event of a type the core does not define (e.g. a plugin's
    /// own), marked ignorable so every reader can skip it.
    pub fn append_ignorable(&self, type_name: &str, data: Value) -> Result<Event, StoreError> {
        self.append(EventKind::Unknown { type_name: type_name.to_string(), data })
    }

    /// Appends copied events keeping their seq, time and text (fork, import).
    fn append_verbatim(&self, batch: Vec<(Event, String)>) -> Result<Vec<Event>, StoreError> {
        let mut st = self.state();
        for (i, (ev, _)) in batch.iter().enumerate() {
            let want = st.next_seq + i as u64;
            if ev.seq != want {
                return Err(StoreError::Encode(format!("verbatim event has seq {}, expected {want}", ev.seq)));
            }
        }
        self.commit(&mut st, batch)
    }

    fn commit(&self, st: &mut State, batch: Vec<(Event, String)>) -> Result<Vec<Event>, StoreError> {
        if batch.is_empty() {
            return Ok(vec![]);
        }
        let enc: Vec<Encoded<'_>> = batch.iter().map(|(event, line)| Encoded { event, line }).collect();
        st.writer.append(&enc)?;
        drop(enc);
        Ok(applied(st, batch.into_iter().map(|(ev, _)| ev).collect()))
    }

    /// [`append`](Self::append) for async callers: on a backend whose
    /// append is a round trip (PostgreSQL) the calling task waits for it
    /// without holding its thread. Everything else about the append is the
    /// same: stored before it returns, in order, the log's state untouched
    /// by anybody until it ends. Cancelling the caller does not cancel the
    /// append: it ends, and is applied, on the backend's thread.
    pub async fn append_async(&self, kind: EventKind) -> Result<Event, StoreError> {
        let mut out = self.append_batch_async(vec![kind]).await?;
        out.pop().ok_or_else(|| StoreError::Encode("empty commit".into()))
    }

    /// [`append_batch`](Self::append_batch) for async callers (see
    /// [`append_async`](Self::append_async)).
    pub async fn append_batch_async(&self, kinds: Vec<EventKind>) -> Result<Vec<Event>, StoreError> {
        if kinds.is_empty() {
            return Ok(vec![]);
        }
        let mut kinds = kinds;
        loop {
            let settled = self.shared.settled_async.notified();
            tokio::pin!(settled);
            settled.as_mut().enable();
            match self.begin_append(kinds)? {
                Begun::Busy(back) => {
                    kinds = back;
                    settled.await;
                }
                Begun::Stored(events) => return Ok(events),
                Begun::InFlight(rx) => {
                    return rx.await.unwrap_or_else(|_| {
                        Err(StoreError::Unavailable {
                            location: self.shared.location.clone(),
                            detail: "the append ended without an answer".into(),
                        })
                    });
                }
            }
        }
    }

    /// [`append_batch_async`](Self::append_batch_async)'s part under the
    /// lock: busy while another append is in flight; else the batch is
    /// stored in place or handed to the backend's thread.
    fn begin_append(&self, kinds: Vec<EventKind>) -> Result<Begun, StoreError> {
        let mut st = raw_state(&self.shared);
        if st.inflight.is_some() {
            return Ok(Begun::Busy(kinds));
        }
        let batch = encoded(st.next_seq, kinds)?;
        let enc: Vec<Encoded<'_>> = batch.iter().map(|(event, line)| Encoded { event, line }).collect();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let shared = self.shared.clone();
        let done: AppendDone = Box::new(move |r: Result<(), StoreError>| {
            let mut st = raw_state(&shared);
            let events = st.inflight.take().unwrap_or_default();
            let out = r.map(|()| applied(&mut st, events));
            drop(st);
            shared.settled.notify_all();
            shared.settled_async.notify_waiters();
            let _ = tx.send(out);
        });
        match st.writer.start_append(&enc, done) {
            Ok(()) => {
                // Under the lock still, so the append cannot end (and look
                // for its events) before they are in place.
                drop(enc);
                st.inflight = Some(batch.into_iter().map(|(ev, _)| ev).collect());
                Ok(Begun::InFlight(rx))
            }
            Err(_unused) => {
                drop(enc);
                Ok(Begun::Stored(self.commit(&mut st, batch)?))
            }
        }
    }

    /// Closes an open turn by appending (see the module docs): crash repair
    /// uses [`StopReason::Interrupted`]; the agent uses it with an error
    /// reason when a turn fails half-way.
    /// Crash repair of an open turn ([`SessionStore::open_with`]): closes
    /// it, unless its open step has a call `keep` accepts; then only the
    /// step's open questions and programs' open calls are closed.
    fn repair_open_turn(&self, keep: &dyn Fn(&ToolCall) -> bool) -> Result<Vec<Event>, StoreError> {
        let kept = self.kept_calls(keep);
        if kept.is_empty() {
            return self.close_open_turn(StopReason::Interrupted);
        }
        let step = self.state().projection.open_step().cloned();
        match step {
            Some(s) => self.close_open_inner(&s),
            None => Ok(vec![]),
        }
    }

    /// The open step's logged model calls without a result that `keep`
    /// accepts, in log order, with the step.
    fn kept_calls(&self, keep: &dyn Fn(&ToolCall) -> bool) -> Vec<ToolCall> {
        let st = self.state();
        let Some(s) = st.projection.open_step() else { return vec![] };
        s.logged_calls.iter().filter(|c| !s.answered.contains(&c.id) && keep(c)).cloned().collect()
    }

    /// The open step and its logged model calls still without a result
    /// (what [`crate::durable`] re-runs).
    pub(crate) fn open_calls(&self) -> Option<(u64, u32, Vec<ToolCall>)> {
        let st = self.state();
        let s = st.projection.open_step()?;
        let calls = s.logged_calls.iter().filter(|c| !s.answered.contains(&c.id)).cloned().collect();
        Some((s.turn, s.step, calls))
    }

    /// Every committed event, read back from the store.
    pub(crate) fn read_all(&self) -> Result<Vec<Event>, StoreError> {
        self.state().writer.read_from(1)
    }

    /// Cancels the step's open questions and closes the programs' calls
    /// still without a result (`INTERRUPTED`), in log order.
    fn close_open_inner(&self, s: &crate::projection::OpenStep) -> Result<Vec<Event>, StoreError> {
        let mut out = Vec::new();
        for call_id in &s.pending_approvals {
            out.push(self.append(EventKind::ApprovalDecided(ApprovalDecided {
                call_id: call_id.clone(),
                outcome: ApprovalOutcome::Cancelled,
                by: "host".into(),
                note: Some("the turn was closed before an answer arrived".into()),
            }))?);
        }
        for c in &s.open_inner {
            out.push(self.append(interrupted_result(s.turn, s.step, c))?);
        }
        Ok(out)
    }

    pub(crate) fn close_open_turn(&self, reason: StopReason) -> Result<Vec<Event>, StoreError> {
        let (turn, step) = {
            let st = self.state();
            match st.projection.open_turn() {
                None => return Ok(vec![]),
                Some(t) => (t, st.projection.open_step().cloned()),
            }
        };
        let mut out = Vec::new();
        if let Some(s) = step {
            if !s.has_message && (!s.streamed_text.is_empty() || !s.streamed_reasoning.is_empty()) {
                out.push(self.append(EventKind::AssistantMessage(AssistantMessage {
                    turn: s.turn,
                    step: s.step,
                    content: s.streamed_text.clone(),
                    reasoning: Some(s.streamed_reasoning.clone()).filter(|r| !r.is_empty()),
                    tool_calls: vec![],
                    usage: None,
                    finish: None,
                    interrupted: true,
                }))?);
            }
            // A program's calls still open (a crash while they ran) first,
            // in log order: their parent is among the model's calls below.
            out.extend(self.close_open_inner(&s)?);
            let mut calls = s.message_calls.clone();
            for c in &s.logged_calls {
                if !calls.iter().any(|m| m.id == c.id) {
                    calls.push(c.clone());
                }
            }
            for c in calls.iter().filter(|c| !s.answered.contains(&c.id)) {
                if !s.logged_calls.iter().any(|l| l.id == c.id) {
                    out.push(self.append(EventKind::ToolCall(ToolCallEvent {
                        turn: s.turn,
                        step: s.step,
                        id: c.id.clone(),
                        name: c.name.clone(),
                        arguments: c.arguments.clone(),
                        parent: None,
                    }))?);
                }
                out.push(self.append(interrupted_result(s.turn, s.step, c))?);
            }
            out.push(self.append(EventKind::StepEnd(StepEnd { turn: s.turn, step: s.step, usage: None }))?);
        }
        out.push(self.append(EventKind::TurnEnd(TurnEnd { turn, reason }))?);
        Ok(out)
    }

    fn sync_now(&self) -> Result<(), StoreError> {
        self.shared.sync.sync()
    }

    /// Syncs every event appended so far to stable storage (`fdatasync`).
    pub async fn flush(&self) -> Result<(), StoreError> {
        let ctl = self.shared.sync.clone();
        match tokio::task::spawn_blocking(move || ctl.sync()).await {
            Ok(r) => r,
            Err(_) => self.sync_now(),
        }
    }

    /// [`flush`](Self::flush) for non-async callers.
    pub fn flush_blocking(&self) -> Result<(), StoreError> {
        self.sync_now()
    }

    /// Receives every event committed after this call, in seq order. The
    /// channel is unbounded so a slow surface never loses events.
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<Event> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.state().subscribers.push(Subscriber { tx, wants: None });
        rx
    }

    /// Like [`subscribe`](Self::subscribe), but only the events `wants`
    /// accepts are sent (it runs under the log's lock: keep it cheap). A
    /// receiver that would skip most events is then not woken for them.
    pub fn subscribe_filtered(&self, wants: EventFilter) -> mpsc::UnboundedReceiver<Event> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.state().subscribers.push(Subscriber { tx, wants: Some(wants) });
        rx
    }

    /// Like [`subscribe`](Self::subscribe), but first delivers the already
    /// committed events with `seq >= from_seq` (read back from the file), with
    /// no gap and no duplicate.
    pub fn subscribe_from(&self, from_seq: u64) -> Result<mpsc::UnboundedReceiver<Event>, StoreError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut st = self.state();
        for ev in st.writer.read_from(from_seq)? {
            let _ = tx.send(ev);
        }
        st.subscribers.push(Subscriber { tx, wants: None });
        Ok(rx)
    }

    /// The stream of input that other hosts stored for this session with
    /// [`SessionStore::push_input`] (pending items first); `None` for the JSONL
    /// store or once taken. The owner logs each item (`inbox/spliced`) and
    /// then calls [`ack_input`](Self::ack_input).
    pub fn take_inputs(&self) -> Option<mpsc::UnboundedReceiver<RemoteInput>> {
        self.state().writer.take_inputs()
    }

    /// Marks a stored input item as delivered.
    pub fn ack_input(&self, id: &str) -> Result<(), StoreError> {
        self.state().writer.ack_input(id)
    }

    /// The session header.
    pub fn header(&self) -> Option<SessionStart> {
        self.state().projection.header().cloned()
    }

    /// The model-visible messages with their seqs (for compaction).
    pub fn message_entries(&self) -> Vec<(u64, Message)> {
        self.state().projection.entries().to_vec()
    }

    /// Seq of the last committed event.
    pub fn last_seq(&self) -> u64 {
        self.state().projection.last_seq()
    }

    /// Number of the last turn started (0 if none).
    pub fn last_turn(&self) -> u64 {
        self.state().projection.last_turn()
    }

    /// The open turn, if any.
    pub fn open_turn(&self) -> Option<u64> {
        self.state().projection.open_turn()
    }

    /// The cells a crash cut: yielded, their end not logged (see
    /// [`Projection::open_cells`]).
    pub fn open_cells(&self) -> Vec<(u64, u32, crate::plugin::ToolCall)> {
        self.state().projection.open_cells()
    }

    /// Bytes of open cell `id`'s output the model saw
    /// ([`Projection::cell_shown`]).
    pub fn cell_shown(&self, id: &str) -> usize {
        self.state().projection.cell_shown(id)
    }

    /// The model-visible messages (incremental projection; see [`Projection`]).
    pub fn messages(&self) -> Vec<Message> {
        self.state().projection.messages()
    }

    /// [`SessionLog::messages`] written over `dst` (see
    /// [`Projection::messages_into`]).
    pub fn messages_into(&self, dst: &mut Vec<Message>, mark: &mut crate::projection::HistoryMark) {
        self.state().projection.messages_into(dst, mark);
    }

    /// The images of [`SessionLog::messages`] ([`Projection::message_images`]).
    pub fn message_images(&self) -> Vec<crate::images::RequestImage> {
        self.state().projection.message_images()
    }

    /// Number of model-visible messages.
    pub fn message_count(&self) -> usize {
        self.state().projection.message_count()
    }

    /// Compaction's token estimate of a request carrying the model-visible
    /// messages and `tools` ([`crate::compaction::request_tokens`]), read
    /// in place: the history is not copied to be counted.
    pub fn request_tokens(&self, tools: &[crate::plugin::ToolSpec]) -> u64 {
        let state = self.state();
        crate::compaction::request_tokens(state.projection.entries().iter().map(|(_, m)| m), tools)
    }

    /// Token usage over the whole session.
    pub fn usage(&self) -> Usage {
        self.state().projection.usage()
    }

    /// Inbox items queued and not yet claimed or discarded.
    pub fn pending_inbox(&self) -> Vec<PendingInboxItem> {
        self.state().projection.pending_inbox()
    }

    /// Makes the next write fail after `n` bytes with OS error `errno`.
    #[cfg(test)]
    pub(crate) fn fail_next_write(&self, n: usize, errno: i32) {
        self.state().writer.fail_next_write(n, errno);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::events::*;
    use crate::plugin::ToolCall;
    use std::fs::{self, OpenOptions};

    fn store() -> (tempfile::TempDir, SessionStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(dir.path().join("sessions"));
        (dir, store)
    }

    fn user(text: &str) -> EventKind {
        EventKind::UserMessage(UserMessage { content: text.into(), inbox_id: None, images: vec![] })
    }

    fn turn(log: &SessionLog, n: u64, text: &str) {
        log.append(EventKind::TurnStart(TurnStart { turn: n })).unwrap();
        log.append(user(text)).unwrap();
        log.append(EventKind::StepStart(StepStart { turn: n, step: 1 })).unwrap();
        log.append(EventKind::AssistantMessage(AssistantMessage {
            turn: n,
            step: 1,
            content: format!("re: {text}"),
            reasoning: None,
            tool_calls: vec![],
            usage: None,
            finish: None,
            interrupted: false,
        }))
        .unwrap();
        log.append(EventKind::StepEnd(StepEnd { turn: n, step: 1, usage: None })).unwrap();
        log.append(EventKind::TurnEnd(TurnEnd { turn: n, reason: StopReason::Completed })).unwrap();
    }

    fn types(events: &[Event]) -> Vec<&str> {
        events.iter().map(|e| e.type_name()).collect()
    }

    #[test]
    fn create_append_reload_and_messages_match() {
        let (_d, store) = store();
        let log = store.create(NewSession { workspace: Some("/w".into()), ..Default::default() }).unwrap();
        turn(&log, 1, "hello");
        let live = log.messages();
        let id = log.id().to_string();
        drop(log);
        let loaded = store.load(&id).unwrap();
        assert_eq!(loaded.header.workspace.as_deref(), Some("/w"));
        assert_eq!(loaded.messages(), live);
        assert_eq!(loaded.events.len(), 7);
        assert!(loaded.warnings.is_empty());
        let (log, report) = store.open(&id).unwrap();
        assert!(report.repairs.is_empty());
        assert_eq!(log.messages(), live);
        assert_eq!(log.last_seq(), 7);
        assert!(crate::invariants::check(&loaded.events).is_ok());
    }

    #[test]
    fn second_writer_is_refused_with_pid() {
        let (_d, store) = store();
        let log = store.create(NewSession::default()).unwrap();
        let err = store.open(log.id()).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, StoreError::Locked { pid: Some(p), .. } if p == std::process::id()), "{msg}");
        assert!(msg.contains("is already open by another process (pid "), "{msg}");
        // Readers still work while the writer is live.
        assert_eq!(store.load(log.id()).unwrap().events.len(), 1);
        let id = log.id().to_string();
        drop(log);
        assert!(store.open(&id).is_ok());
    }

    #[test]
    fn torn_last_line_is_reported_then_repaired_by_appending() {
        let (_d, store) = store();
        let log = store.create(NewSession::default()).unwrap();
        turn(&log, 1, "a");
        let id = log.id().to_string();
        let path = PathBuf::from(log.describe());
        drop(log);
        let torn = br#"{"seq":8,"time":"t","type":"turn/st"#;
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(torn).unwrap();
        drop(f);
        let before = fs::read(&path).unwrap();

        let loaded = store.load(&id).unwrap();
        assert_eq!(loaded.events.len(), 7);
        assert!(
            matches!(&loaded.warnings[..], [LoadWarning::TornTail { line: 8, bytes, .. }] if *bytes == torn.len() as u64)
        );

        let (log, report) = store.open(&id).unwrap();
        assert_eq!(types(&report.repairs), vec!["session/repaired"]);
        turn(&log, 2, "b");
        drop(log);
        let after = fs::read(&path).unwrap();
        assert!(after.starts_with(&before), "history was rewritten");
        let loaded = store.load(&id).unwrap();
        assert_eq!(loaded.warnings, vec![LoadWarning::RepairedTornLine { line: 8 }]);
        assert_eq!(loaded.events.len(), 14);
        assert!(crate::invariants::check(&loaded.events).is_ok());
    }

    #[test]
    fn a_jsonl_store_describes_its_directory_and_files() {
        let (d, store) = store();
        let dir = d.path().join("sessions");
        assert_eq!(store.describe(), dir.display().to_string());
        let log = store.create(NewSession { profile: Some("p".into()), ..Default::default() }).unwrap();
        let file = dir.join(format!("{}.jsonl", log.id()));
        assert_eq!(log.describe(), file.display().to_string());
        assert_eq!(store.header(log.id()).unwrap().profile.as_deref(), Some("p"));
        let listed = store.list().unwrap();
        assert_eq!(listed[0].location, log.describe());
        // The header is read from the first line: a damaged tail does not matter.
        let id = log.id().to_string();
        drop(log);
        OpenOptions::new().append(true).open(&file).unwrap().write_all(b"garbage\n{}\n").unwrap();
        assert!(store.load(&id).is_err());
        assert_eq!(store.header(&id).unwrap().id, id);
    }

    #[test]
    fn corrupt_middle_line_is_refused() {
        let (_d, store) = store();
        let log = store.create(NewSession::default()).unwrap();
        let id = log.id().to_string();
        let path = PathBuf::from(log.describe());
        drop(log);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"garbage\n{\"seq\":2,\"time\":\"t\",\"type\":\"turn/start\",\"data\":{\"turn\":1}}\n").unwrap();
        drop(f);
        let err = store.load(&id).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { line: 2, .. }), "{err}");
    }

    #[test]
    fn crash_inside_a_turn_is_closed_by_appending() {
        let (_d, store) = store();
        let log = store.create(NewSession::default()).unwrap();
        log.append(EventKind::TurnStart(TurnStart { turn: 1 })).unwrap();
        log.append(user("go")).unwrap();
        log.append(EventKind::StepStart(StepStart { turn: 1, step: 1 })).unwrap();
        let calls = vec![
            ToolCall { id: "c1".into(), name: "a".into(), arguments: "{}".into() },
            ToolCall { id: "c2".into(), name: "b".into(), arguments: "{}".into() },
        ];
        log.append(EventKind::AssistantMessage(AssistantMessage {
            turn: 1,
            step: 1,
            content: String::new(),
            reasoning: None,
            tool_calls: calls,
            usage: None,
            finish: None,
            interrupted: false,
        }))
        .unwrap();
        log.append(EventKind::ToolCall(ToolCallEvent {
            turn: 1,
            step: 1,
            id: "c1".into(),
            name: "a".into(),
            arguments: "{}".into(),
            parent: None,
        }))
        .unwrap();
        let id = log.id().to_string();
        let path = PathBuf::from(log.describe());
        drop(log); // "crash"
        let before = fs::read(&path).unwrap();
        let (log, report) = store.open(&id).unwrap();
        assert_eq!(types(&report.repairs), vec!["tool/result", "tool/call", "tool/result", "step/end", "turn/end"]);
        assert!(matches!(
            &report.repairs[4].kind,
            EventKind::TurnEnd(TurnEnd { reason: StopReason::Interrupted, turn: 1 })
        ));
        let msgs = log.messages();
        assert_eq!(msgs.iter().filter(|m| m.role == crate::plugin::Role::Tool).count(), 2);
        drop(log);
        assert!(fs::read(&path).unwrap().starts_with(&before));
        let loaded = store.load(&id).unwrap();
        crate::invariants::check(&loaded.events).unwrap();
    }

    #[test]
    fn crash_mid_stream_commits_streamed_prefix() {
        let (_d, store) = store();
        let log = store.create(NewSession::default()).unwrap();
        log.append(EventKind::TurnStart(TurnStart { turn: 1 })).unwrap();
        log.append(EventKind::StepStart(StepStart { turn: 1, step: 1 })).unwrap();
        for t in ["Hel", "lo"] {
            log.append(EventKind::AssistantChunk(AssistantChunk {
                turn: 1,
                step: 1,
                text: t.into(),
                reasoning: String::new(),
            }))
            .unwrap();
        }
        let id = log.id().to_string();
        drop(log);
        let (log, report) = store.open(&id).unwrap();
        assert_eq!(types(&report.repairs), vec!["assistant/message", "step/end", "turn/end"]);
        assert!(matches!(&report.repairs[0].kind,
            EventKind::AssistantMessage(m) if m.interrupted && m.content == "Hello"));
        assert_eq!(log.messages().last().map(|m| m.content.as_str()), Some("Hello"));
    }

    #[test]
    fn unknown_types_refuse_to_load_unless_ignorable() {
        let (_d, store) = store();
        let log = store.create(NewSession::default()).unwrap();
        log.append_ignorable("x/custom", serde_json::json!({"k": 1})).unwrap();
        let id = log.id().to_string();
        let path = PathBuf::from(log.describe());
        drop(log);
        let loaded = store.load(&id).unwrap();
        assert!(matches!(&loaded.events[1].kind, EventKind::Unknown { type_name, .. } if type_name == "x/custom"));
        assert!(loaded.events[1].ignorable);

        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"seq\":3,\"time\":\"t\",\"type\":\"x/strict\",\"data\":{}}\n").unwrap();
        drop(f);
        let err = store.load(&id).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, StoreError::UnknownEventType { line: 3, .. }), "{msg}");
        assert!(msg.contains(&format!("{}:3", path.display())) && msg.contains("x/strict"), "{msg}");
    }

    #[test]
    fn fork_at_turn_boundary_only() {
        let (_d, store) = store();
        let log = store.create(NewSession { profile: Some("p".into()), ..Default::default() }).unwrap();
        turn(&log, 1, "one");
        turn(&log, 2, "two");
        let id = log.id().to_string();
        let err = store.fork(&id, 9).unwrap_err();
        assert!(err.to_string().contains("inside turn 2; fork at a turn boundary such as seq 7 or 13"), "{err}");
        assert!(matches!(store.fork(&id, 99), Err(StoreError::InvalidForkPoint { .. })));

        let child = store.fork(&id, 7).unwrap();
        assert_ne!(child.id(), id);
        let h = child.header().unwrap();
        assert_eq!((h.parent.as_deref(), h.fork_seq, h.profile.as_deref()), (Some(id.as_str()), Some(7), Some("p")));
        let parent = store.load(&id).unwrap();
        assert_eq!(child.messages(), derive_messages_prefix(&parent.events, 7));
        turn(&child, 2, "other");
        let cid = child.id().to_string();
        drop(child);
        let loaded = store.load(&cid).unwrap();
        assert_eq!(loaded.events[1..7], parent.events[1..7]);
        crate::invariants::check(&loaded.events).unwrap();
        // The parent is untouched and still writable by its owner.
        turn(&log, 3, "three");
    }

    fn derive_messages_prefix(events: &[Event], at: usize) -> Vec<Message> {
        crate::projection::derive_messages(&events[..at])
    }

    #[test]
    fn list_and_export() {
        let (_d, store) = store();
        assert!(store.list().unwrap().is_empty());
        let a = store.create(NewSession::default()).unwrap();
        turn(&a, 1, "first question");
        let b = store.create(NewSession::default()).unwrap();
        let list = store.list().unwrap();
        assert_eq!(list.len(), 2);
        let sa = list.iter().find(|s| s.id == a.id()).unwrap();
        assert_eq!(sa.title.as_deref(), Some("first question"));
        assert!(list.iter().any(|s| s.id == b.id() && s.title.is_none()));

        let mut out = Vec::new();
        store.export(a.id(), ExportFormat::Jsonl, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 7);
        assert_eq!(text, fs::read_to_string(a.describe()).unwrap());
        let mut out = Vec::new();
        store.export(a.id(), ExportFormat::JsonArray, &mut out).unwrap();
        let arr: Vec<Event> = serde_json::from_slice(&out).unwrap();
        assert_eq!(arr, store.load(a.id()).unwrap().events);
    }

    #[test]
    fn disk_full_rolls_back_and_keeps_log_intact() {
        let (_d, store) = store();
        let log = store.create(NewSession::default()).unwrap();
        turn(&log, 1, "a");
        let before = fs::read(log.describe()).unwrap();
        log.fail_next_write(20, libc::ENOSPC);
        let err = log.append(EventKind::TurnStart(TurnStart { turn: 2 })).unwrap_err();
        assert!(matches!(err, StoreError::DiskFull { .. }), "{err}");
        assert!(err.to_string().starts_with("disk full while appending event 8 (turn/start)"), "{err}");
        assert_eq!(fs::read(log.describe()).unwrap(), before);
        // Space comes back: the next append gets the same seq.
        let ev = log.append(EventKind::TurnStart(TurnStart { turn: 2 })).unwrap();
        assert_eq!(ev.seq, 8);
        log.fail_next_write(0, libc::EROFS);
        assert!(matches!(log.append(user("x")), Err(StoreError::ReadOnly { .. })));
        let id = log.id().to_string();
        drop(log);
        assert_eq!(store.load(&id).unwrap().events.len(), 8);
    }

    #[test]
    fn invalid_ids_and_missing_sessions() {
        let (_d, store) = store();
        assert!(matches!(store.open("../etc"), Err(StoreError::InvalidId(_))));
        assert!(matches!(store.load("nope"), Err(StoreError::NotFound(_))));
        assert!(matches!(
            store.create(NewSession { id: Some("a/b".into()), ..Default::default() }),
            Err(StoreError::InvalidId(_))
        ));
        let a = store.create(NewSession { id: Some("fixed".into()), ..Default::default() }).unwrap();
        drop(a);
        assert!(matches!(
            store.create(NewSession { id: Some("fixed".into()), ..Default::default() }),
            Err(StoreError::AlreadyExists(_))
        ));
    }

    #[test]
    fn jsonl_backend_keeps_the_store_contract() {
        let dirs = std::cell::RefCell::new(Vec::new());
        conformance::run_all(&|| {
            let (d, s) = store();
            dirs.borrow_mut().push(d);
            s
        });
    }

    #[tokio::test]
    async fn subscribe_from_replays_then_streams() {
        let (_d, store) = store();
        let log = store.create(NewSession::default()).unwrap();
        log.append(user("a")).unwrap();
        let mut rx = log.subscribe_from(1).unwrap();
        log.append(user("b")).unwrap();
        log.flush().await.unwrap();
        let seqs: Vec<u64> = (0..3).map(|_| rx.try_recv().unwrap().seq).collect();
        assert_eq!(seqs, vec![1, 2, 3]);
        assert!(rx.try_recv().is_err());
    }

    #[tokio::test]
    async fn a_filtered_subscriber_gets_only_what_it_wants() {
        let (_d, store) = store();
        let log = store.create(NewSession::default()).unwrap();
        let mut rx = log.subscribe_filtered(Box::new(|ev| ev.seq % 2 == 0));
        let mut all = log.subscribe();
        for t in ["a", "b", "c", "d"] {
            log.append(user(t)).unwrap();
        }
        let seqs: Vec<u64> = std::iter::from_fn(|| rx.try_recv().ok()).map(|e| e.seq).collect();
        assert_eq!(seqs, vec![2, 4]);
        assert_eq!(std::iter::from_fn(|| all.try_recv().ok()).count(), 4);
        // A receiver gone is forgotten even when it wanted nothing since.
        drop(rx);
        log.append(user("e")).unwrap();
        assert_eq!(log.state().subscribers.len(), 1);
    }
}
