//! The persistence seam under [`SessionStore`](super::SessionStore) and
//! [`SessionLog`](super::SessionLog).
//!
//! A [`Backend`] keeps sessions; a [`Writer`] is the one right to append to
//! one session (a file lock for JSONL, a lease with a fencing token for a
//! database). Everything above the seam — seq assignment, the projection,
//! crash repair, fork validation, subscribers — lives in the core and is the
//! same for every backend, and the core encodes each event exactly once
//! ([`Event::to_json_line`]) and hands the backend that text, so the stored
//! JSON is byte-identical between backends.
//!
//! The contract a backend keeps:
//!
//! - [`Backend::create`] makes a session exclusively ([`StoreError::AlreadyExists`]
//!   when the id is taken) and returns its writer; nothing is visible to
//!   readers until the header (seq 1) is appended.
//! - [`Backend::open`] takes the write right (refusing with
//!   [`StoreError::Locked`] or [`StoreError::Leased`] while another writer
//!   holds it) and returns what is committed; the core then repairs by
//!   appending.
//! - [`Writer::append`] stores a batch of consecutive events all-or-nothing
//!   and only while the writer still holds the write right; on error nothing
//!   of the batch is visible and the core retries with the same seqs.
//! - [`Backend::load`] returns the committed events in seq order with the
//!   exact stored text of each.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::{LoadWarning, SessionSummary, StoreError, StoreOptions};
use crate::events::{Event, EventKind, InboxKind, SessionStart};

/// One event on its way to a backend, with its JSON line (no newline).
#[derive(Debug, Clone, Copy)]
pub struct Encoded<'a> {
    /// The event.
    pub event: &'a Event,
    /// Its encoding ([`Event::to_json_line`]); store these bytes verbatim.
    pub line: &'a str,
}

/// A session as a backend read it.
#[derive(Debug, Clone, Default)]
pub struct RawLog {
    /// Every committed event, seq 1.. without gaps.
    pub events: Vec<Event>,
    /// The stored text of each event (same length as `events`).
    pub lines: Vec<String>,
    /// What the reader tolerated.
    pub warnings: Vec<LoadWarning>,
    /// A torn trailing record `(line, bytes)` the writer must vouch for with
    /// `session/repaired` (JSONL only).
    pub torn: Option<(u64, u64)>,
}

/// Who holds a session's write right, as far as the backend knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseInfo {
    /// The holder's name (host and pid).
    pub holder: String,
    /// The fencing token of the current (or last) lease.
    pub token: u64,
    /// Milliseconds until the lease expires; `None` when released or
    /// expired (another host may take it).
    pub expires_in_ms: Option<u64>,
}

/// An input item stored for a session's owner by any host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteInput {
    /// Backend-assigned id, unique within the session.
    pub id: String,
    /// The queue.
    pub kind: InboxKind,
    /// The text.
    pub text: String,
}

/// Syncs a writer's appends to stable storage; callable from any thread.
pub trait Syncer: Send + Sync {
    /// Makes every append that returned before this call durable.
    fn sync(&self) -> Result<(), StoreError>;
}

/// The append right on one session. Dropping it releases the right.
pub trait Writer: Send {
    /// Appends a batch of consecutive events (the first continues the log),
    /// all or nothing.
    fn append(&mut self, batch: &[Encoded<'_>]) -> Result<(), StoreError>;
    /// Starts appending `batch` without waiting for it: a backend whose
    /// append is a network round trip hands it to its own thread and calls
    /// `done` there when it ends (exactly once, also when that thread
    /// stops), so the caller's thread is free meanwhile. A backend that
    /// appends in place returns `done` unused, and the caller uses
    /// [`Writer::append`] (the default). `done` must not run before this
    /// returns (the caller still holds the log's state).
    fn start_append(&mut self, _batch: &[Encoded<'_>], done: AppendDone) -> Result<(), AppendDone> {
        Err(done)
    }
    /// A handle that syncs this writer's appends.
    fn syncer(&self) -> Arc<dyn Syncer>;
    /// The committed events with `seq >= from_seq`, read back from storage.
    fn read_from(&mut self, from_seq: u64) -> Result<Vec<Event>, StoreError>;
    /// The stream of input stored for this session by other hosts (items
    /// already pending first). `None` when the backend has no shared inbox
    /// or the stream was already taken. The stream ends when the writer
    /// loses the write right (another host took the session over).
    fn take_inputs(&mut self) -> Option<mpsc::UnboundedReceiver<RemoteInput>> {
        None
    }
    /// Marks stored input as delivered (logged by the owner).
    fn ack_input(&mut self, _id: &str) -> Result<(), StoreError> {
        Ok(())
    }
    /// Makes the next write fail after `n` bytes with OS error `errno`
    /// (JSONL fault injection).
    #[cfg(test)]
    fn fail_next_write(&mut self, _n: usize, _errno: i32) {}
}

/// What runs when an append started with [`Writer::start_append`] ends.
pub type AppendDone = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

/// Where sessions are kept.
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// Where sessions are kept, for people: a directory, or a URL without
    /// password.
    fn describe(&self) -> String;
    /// Where one session is kept, for people (and error messages): by
    /// default `LOCATION#id`.
    fn describe_session(&self, id: &str) -> String {
        format!("{}#{id}", self.describe())
    }
    /// The header (`session/start`, seq 1) of `id`. The default reads the
    /// whole session; a backend that can read the first event alone should.
    fn header(&self, id: &str) -> Result<SessionStart, StoreError> {
        match self.load(id)?.events.into_iter().next().map(|e| e.kind) {
            Some(EventKind::SessionStart(h)) => Ok(h),
            _ => Err(StoreError::MissingHeader { location: self.describe_session(id) }),
        }
    }
    /// Creates `id` exclusively and returns its writer.
    fn create(&self, id: &str, options: &StoreOptions) -> Result<Box<dyn Writer>, StoreError>;
    /// Removes a session whose creation failed before it committed a header
    /// (called after its writer was dropped).
    fn discard(&self, id: &str);
    /// Takes the write right on an existing session and reads it.
    fn open(&self, id: &str, options: &StoreOptions) -> Result<(Box<dyn Writer>, RawLog), StoreError>;
    /// Reads a session without the write right.
    fn load(&self, id: &str) -> Result<RawLog, StoreError>;
    /// Lists the sessions with a header, in any order.
    fn list(&self) -> Result<Vec<SessionSummary>, StoreError>;
    /// Whether `id` exists.
    fn exists(&self, id: &str) -> Result<bool, StoreError>;
    /// Who holds the write right of `id` (`None`: the backend cannot tell,
    /// e.g. a file lock).
    fn lease(&self, _id: &str) -> Result<Option<LeaseInfo>, StoreError> {
        Ok(None)
    }
    /// Stores input for the session's owner, wherever it runs; returns the
    /// item id.
    fn push_input(&self, id: &str, _kind: InboxKind, _text: &str) -> Result<String, StoreError> {
        Err(StoreError::Unsupported { op: "shared inbox".into(), location: format!("{} ({id})", self.describe()) })
    }
    /// Streams the events of a session written by any writer, from
    /// `from_seq`, without gaps or duplicates.
    fn watch(&self, id: &str, _from_seq: u64) -> Result<mpsc::UnboundedReceiver<Event>, StoreError> {
        Err(StoreError::Unsupported {
            op: "watching another writer".into(),
            location: format!("{} ({id})", self.describe()),
        })
    }
    /// Sessions (at most `limit`) that need a writer and have none: a
    /// writer's lease expired without being released (its host died or
    /// lost the store), or stored input waits with no writer. A fleet host
    /// opens them (crash repair, then delivery). Empty without leases.
    fn orphans(&self, _limit: usize) -> Result<Vec<String>, StoreError> {
        Ok(Vec::new())
    }
}

/// Decodes stored rows `(seq, text)` into a [`RawLog`], checking that seqs
/// run 1.. without gaps and that seq 1 is `session/start` (for backends that
/// store one event per row). `location` names the session in errors.
pub fn decode_rows(location: &str, rows: Vec<(u64, String)>) -> Result<RawLog, StoreError> {
    let mut out = RawLog::default();
    for (i, (seq, text)) in rows.into_iter().enumerate() {
        let line = i as u64 + 1;
        let ev = Event::decode(&text).map_err(|e| match e {
            crate::events::DecodeError::UnknownType(type_name) => {
                StoreError::UnknownEventType { location: location.to_string(), line, type_name }
            }
            crate::events::DecodeError::Malformed(detail) => {
                StoreError::Corrupt { location: location.to_string(), line, detail }
            }
        })?;
        if ev.seq != line || seq != line {
            let found = if seq != line { seq } else { ev.seq };
            return Err(StoreError::SeqGap { location: location.to_string(), line, expected: line, found });
        }
        if line == 1 && !matches!(ev.kind, EventKind::SessionStart(_)) {
            return Err(StoreError::MissingHeader { location: location.to_string() });
        }
        out.events.push(ev);
        out.lines.push(text);
    }
    if out.events.is_empty() {
        return Err(StoreError::MissingHeader { location: location.to_string() });
    }
    Ok(out)
}

/// The listing title an event gives its session: a user message's text,
/// shortened to 80 characters.
pub fn summary_title(ev: &Event) -> Option<String> {
    match &ev.kind {
        EventKind::UserMessage(m) => {
            let mut t: String = m.content.chars().take(80).collect();
            if m.content.chars().count() > 80 {
                t.push('…');
            }
            Some(t)
        }
        _ => None,
    }
}

/// How many leading events a listing searches for a title (the JSONL store
/// reads this many lines).
pub const TITLE_SCAN: u64 = 64;
