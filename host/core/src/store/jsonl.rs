//! The embedded backend: one JSONL file per session (see the
//! [module docs](super) for the layout, durability and repair rules).

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use super::backend::{Backend, Encoded, RawLog, Syncer, TITLE_SCAN, Writer, summary_title};
use super::{LoadWarning, SessionSummary, StoreError, StoreOptions, io_error};
use crate::events::{Event, EventKind, SessionStart};

/// A directory of `<id>.jsonl` logs, each locked with `flock` on itself
/// while a writer has it open (the kernel's lock table names the holder's
/// pid for the error a second writer gets).
#[derive(Debug, Clone)]
pub struct JsonlBackend {
    root: PathBuf,
}

impl JsonlBackend {
    /// A backend rooted at `root` (created on first write).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The log file of `id`.
    fn path_of(&self, id: &str) -> PathBuf {
        self.root.join(format!("{id}.jsonl"))
    }
}

impl Backend for JsonlBackend {
    fn describe(&self) -> String {
        self.root.display().to_string()
    }

    fn describe_session(&self, id: &str) -> String {
        self.path_of(id).display().to_string()
    }

    /// Reads the first line only (a header is small; a first line longer
    /// than 1 MiB is not one).
    fn header(&self, id: &str) -> Result<SessionStart, StoreError> {
        let path = self.path_of(id);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(StoreError::NotFound(id.to_string())),
            Err(e) => return Err(io_error("reading", &path, e)),
        };
        let mut line = String::new();
        BufReader::new(io::Read::take(file, 1 << 20))
            .read_line(&mut line)
            .map_err(|e| io_error("reading", &path, e))?;
        let location = || path.display().to_string();
        match Event::decode(line.trim_end_matches('\n')) {
            Ok(Event { kind: EventKind::SessionStart(h), .. }) => Ok(h),
            Ok(_) => Err(StoreError::MissingHeader { location: location() }),
            Err(crate::events::DecodeError::UnknownType(type_name)) => {
                Err(StoreError::UnknownEventType { location: location(), line: 1, type_name })
            }
            Err(crate::events::DecodeError::Malformed(detail)) => {
                Err(StoreError::Corrupt { location: location(), line: 1, detail })
            }
        }
    }

    fn create(&self, id: &str, options: &StoreOptions) -> Result<Box<dyn Writer>, StoreError> {
        fs::create_dir_all(&self.root).map_err(|e| io_error("creating the session directory", &self.root, e))?;
        let path = self.path_of(id);
        let file = match OpenOptions::new().append(true).create_new(true).open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Err(StoreError::AlreadyExists(id.into())),
            Err(e) => return Err(io_error("creating", &path, e)),
        };
        lock_log(&file, &path, id)?;
        Ok(Box::new(JsonlWriter::start(id.to_string(), path, file, 0, options, Some(self.root.clone()))))
    }

    fn discard(&self, id: &str) {
        let _ = fs::remove_file(self.path_of(id));
    }

    fn open(&self, id: &str, options: &StoreOptions) -> Result<(Box<dyn Writer>, RawLog), StoreError> {
        let path = self.path_of(id);
        if !path.exists() {
            return Err(StoreError::NotFound(id.to_string()));
        }
        let file = OpenOptions::new().append(true).open(&path).map_err(|e| io_error("opening", &path, e))?;
        // Locked before it is read, so no other writer appends in between.
        lock_log(&file, &path, id)?;
        let (raw, meta) = read_log(&path)?;
        let mut w = JsonlWriter::start(id.to_string(), path, file, meta.file_len, options, None);
        if meta.needs_newline {
            w.write_raw(b"\n")?;
        }
        Ok((Box::new(w), raw))
    }

    fn load(&self, id: &str) -> Result<RawLog, StoreError> {
        let path = self.path_of(id);
        if !path.exists() {
            return Err(StoreError::NotFound(id.to_string()));
        }
        Ok(read_log(&path)?.0)
    }

    fn list(&self) -> Result<Vec<SessionSummary>, StoreError> {
        let entries = match fs::read_dir(&self.root) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(vec![]),
            Err(e) => return Err(io_error("listing", &self.root, e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io_error("listing", &self.root, e))?;
            let path = entry.path();
            let Some(id) = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".jsonl")) else {
                continue;
            };
            if super::validate_id(id).is_err() {
                continue;
            }
            match read_summary(&path, id) {
                Ok(Some(s)) => out.push(s),
                Ok(None) => tracing::warn!(path = %path.display(), "skipping session file without a header"),
                Err(e) => tracing::warn!(path = %path.display(), error = %e, "skipping unreadable session file"),
            }
        }
        Ok(out)
    }

    fn exists(&self, id: &str) -> Result<bool, StoreError> {
        Ok(self.path_of(id).is_file())
    }
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    let d = File::open(dir).map_err(|e| io_error("opening", dir, e))?;
    d.sync_all().map_err(|e| io_error("syncing", dir, e))
}

/// Takes the one-writer lock: `flock(LOCK_EX | LOCK_NB)` on the log's own
/// descriptor, so an open session costs one file descriptor and no other
/// file (creating a file is a large share of a new session's cost).
fn lock_log(file: &File, path: &Path, id: &str) -> Result<(), StoreError> {
    // SAFETY: flock on a file descriptor borrowed for the duration of the call.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
            return Err(StoreError::Locked { id: id.to_string(), pid: lock_holder(file) });
        }
        return Err(io_error("locking", path, err));
    }
    Ok(())
}

/// The pid holding an exclusive `flock` on `file`, from the kernel's lock
/// table (`/proc/locks`, Linux; `None` elsewhere or when it is not listed).
/// Lines read `N: FLOCK  ADVISORY  WRITE PID MAJ:MIN:INODE 0 EOF`, the
/// device numbers in hex; a `->` line is a waiter.
fn lock_holder(file: &File) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata().ok()?;
    let (major, minor) = (libc::major(meta.dev()), libc::minor(meta.dev()));
    let key = format!("{major:02x}:{minor:02x}:{}", meta.ino());
    // Bounded: one line per lock held on the machine.
    let mut table = String::new();
    io::Read::read_to_string(&mut io::Read::take(File::open("/proc/locks").ok()?, 4 << 20), &mut table).ok()?;
    table.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.get(1) == Some(&"FLOCK") && f.get(5) == Some(&key.as_str())).then(|| f.get(4)?.parse().ok())?
    })
}

struct FileMeta {
    /// The file does not end with a newline.
    needs_newline: bool,
    file_len: u64,
}

fn read_log(path: &Path) -> Result<(RawLog, FileMeta), StoreError> {
    let bytes = fs::read(path).map_err(|e| io_error("reading", path, e))?;
    let raw = parse_log(path, &bytes)?;
    Ok((raw, FileMeta { needs_newline: bytes.last().is_some_and(|b| *b != b'\n'), file_len: bytes.len() as u64 }))
}

fn parse_log(path: &Path, bytes: &[u8]) -> Result<RawLog, StoreError> {
    let mut events: Vec<Event> = Vec::new();
    let mut lines: Vec<String> = Vec::new();
    let mut warnings = Vec::new();
    // An unparseable line waiting to be judged: torn tail if nothing follows,
    // excused if the next event is `session/repaired` naming it, else corrupt.
    let mut pending_bad: Option<(u64, u64, String)> = None;
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        let line_no = i as u64 + 1;
        if line.is_empty() {
            continue;
        }
        let text =
            std::str::from_utf8(line).map_err(|e| crate::events::DecodeError::Malformed(format!("invalid UTF-8: {e}")));
        let decoded = text.and_then(|t| Event::decode(t).map(|ev| (ev, t)));
        match decoded {
            Ok((ev, text)) => {
                if let Some((bad_line, _, detail)) = pending_bad.take() {
                    match &ev.kind {
                        EventKind::SessionRepaired(r) if r.torn_line == bad_line => {
                            warnings.push(LoadWarning::RepairedTornLine { line: bad_line })
                        }
                        _ => {
                            return Err(StoreError::Corrupt {
                                location: path.display().to_string(),
                                line: bad_line,
                                detail,
                            });
                        }
                    }
                }
                let expected = events.len() as u64 + 1;
                if ev.seq != expected {
                    return Err(StoreError::SeqGap {
                        location: path.display().to_string(),
                        line: line_no,
                        expected,
                        found: ev.seq,
                    });
                }
                if expected == 1 && !matches!(ev.kind, EventKind::SessionStart(_)) {
                    return Err(StoreError::MissingHeader { location: path.display().to_string() });
                }
                events.push(ev);
                lines.push(text.to_string());
            }
            Err(crate::events::DecodeError::UnknownType(type_name)) => {
                return Err(StoreError::UnknownEventType {
                    location: path.display().to_string(),
                    line: line_no,
                    type_name,
                });
            }
            Err(crate::events::DecodeError::Malformed(detail)) => {
                if let Some((bad_line, _, detail)) = pending_bad {
                    return Err(StoreError::Corrupt { location: path.display().to_string(), line: bad_line, detail });
                }
                pending_bad = Some((line_no, line.len() as u64, detail));
            }
        }
    }
    let torn = pending_bad.map(|(line, len, detail)| {
        warnings.push(LoadWarning::TornTail { line, bytes: len, detail });
        (line, len)
    });
    if events.is_empty() {
        return Err(StoreError::MissingHeader { location: path.display().to_string() });
    }
    Ok(RawLog { events, lines, warnings, torn })
}

fn read_summary(path: &Path, id: &str) -> Result<Option<SessionSummary>, StoreError> {
    let f = File::open(path).map_err(|e| io_error("reading", path, e))?;
    let bytes = f.metadata().map(|m| m.len()).unwrap_or(0);
    let mut header = None;
    let mut title = None;
    for line in BufReader::new(f).lines().take(TITLE_SCAN as usize) {
        let Ok(line) = line else { break };
        let Ok(ev) = Event::decode(&line) else { continue };
        if let EventKind::SessionStart(h) = &ev.kind {
            if header.is_none() {
                header = Some(h.clone());
            }
            continue;
        }
        if let Some(t) = summary_title(&ev) {
            title = Some(t);
            break;
        }
    }
    Ok(header.map(|header| SessionSummary {
        id: id.to_string(),
        header,
        title,
        location: path.display().to_string(),
        bytes,
    }))
}

// ---------------------------------------------------------------------------
// The writer.

struct JsonlWriter {
    id: String,
    path: PathBuf,
    /// Shared with the syncer: one descriptor per open session, which also
    /// carries the writer's `flock`.
    file: Arc<File>,
    /// Length of the file up to the last good line.
    len: u64,
    poisoned: Option<String>,
    sync: Arc<SyncCtl>,
    /// The background sync thread, running only while appends are unsynced:
    /// an idle session holds no thread.
    syncer: Option<JoinHandle<()>>,
    interval: Duration,
    #[cfg(test)]
    fail_next_write: Option<(usize, i32)>,
}

struct SyncCtl {
    file: Arc<File>,
    path: PathBuf,
    flags: Mutex<SyncFlags>,
    cv: Condvar,
    /// Synced (once) after the first data sync of a new session.
    dir: Mutex<Option<PathBuf>>,
}

#[derive(Default)]
struct SyncFlags {
    written: u64,
    synced: u64,
    shutdown: bool,
    /// A sync thread is running (or being started) for these appends.
    running: bool,
}

impl SyncCtl {
    fn flags(&self) -> MutexGuard<'_, SyncFlags> {
        self.flags.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn sync_now(&self) -> Result<(), StoreError> {
        let target = self.flags().written;
        self.file.sync_data().map_err(|e| io_error("syncing", &self.path, e))?;
        let mut dir = self.dir.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = dir.as_ref() {
            sync_dir(d)?;
            *dir = None;
        }
        drop(dir);
        let mut flags = self.flags();
        flags.synced = flags.synced.max(target);
        Ok(())
    }

    /// Syncs one interval after appends (so a burst costs one `fdatasync`);
    /// ends once [`SYNC_THREAD_LINGER`] intervals pass without any (the next
    /// append starts another), so an idle session holds no thread while an
    /// active one does not pay for a thread per step.
    fn run(&self, interval: Duration) {
        let linger = interval.saturating_mul(SYNC_THREAD_LINGER);
        let mut guard = self.flags();
        loop {
            let (g, waited) = self
                .cv
                .wait_timeout_while(guard, linger, |f| !f.shutdown && f.written <= f.synced)
                .unwrap_or_else(|e| e.into_inner());
            guard = g;
            if !guard.shutdown && guard.written <= guard.synced && waited.timed_out() {
                guard.running = false;
                return;
            }
            // `wait_timeout_while` checks the flag first, so a shutdown
            // requested before we wait is never missed.
            let (g, _) =
                self.cv.wait_timeout_while(guard, interval, |f| !f.shutdown).unwrap_or_else(|e| e.into_inner());
            let dirty = g.written > g.synced;
            drop(g);
            if dirty && let Err(e) = self.sync_now() {
                tracing::warn!(error = %e, "background sync of session log failed");
            }
            guard = self.flags();
            if guard.shutdown {
                guard.running = false;
                return;
            }
        }
    }
}

/// Intervals without appends after which a session's sync thread ends.
const SYNC_THREAD_LINGER: u32 = 50;

impl Syncer for SyncCtl {
    fn sync(&self) -> Result<(), StoreError> {
        self.sync_now()
    }
}

impl JsonlWriter {
    fn start(
        id: String,
        path: PathBuf,
        file: File,
        len: u64,
        options: &StoreOptions,
        new_dir: Option<PathBuf>,
    ) -> JsonlWriter {
        let file = Arc::new(file);
        let sync = Arc::new(SyncCtl {
            file: file.clone(),
            path: path.clone(),
            flags: Mutex::new(SyncFlags::default()),
            cv: Condvar::new(),
            dir: Mutex::new(new_dir),
        });
        JsonlWriter {
            id,
            path,
            file,
            len,
            poisoned: None,
            sync,
            syncer: None,
            interval: options.sync_interval,
            #[cfg(test)]
            fail_next_write: None,
        }
    }

    /// Notes `n` appended events and makes sure a sync thread will see them.
    fn mark_written(&mut self, n: u64) {
        let (start, wake) = {
            let mut flags = self.sync.flags();
            let was_clean = flags.written <= flags.synced;
            flags.written += n;
            let start = !flags.running && !flags.shutdown;
            flags.running |= start;
            (start, was_clean && !start)
        };
        if wake {
            // The lingering thread waits for the first unsynced append.
            self.sync.cv.notify_all();
        }
        if !start {
            return;
        }
        // The previous thread has ended (it cleared `running`), so this
        // join does not wait.
        if let Some(h) = self.syncer.take() {
            let _ = h.join();
        }
        let ctl = self.sync.clone();
        let interval = self.interval;
        match std::thread::Builder::new().name("wharf-log-sync".into()).spawn(move || ctl.run(interval)) {
            Ok(h) => self.syncer = Some(h),
            Err(e) => {
                // Still durable at every flush (and at drop); only the
                // interval bound on unsynced appends is lost.
                tracing::warn!(error = %e, "no background sync thread; syncing on flush only");
                self.sync.flags().running = false;
            }
        }
    }

    fn write_bytes(&mut self, bytes: &[u8]) -> io::Result<()> {
        #[cfg(test)]
        if let Some((n, errno)) = self.fail_next_write.take() {
            (&*self.file).write_all(&bytes[..n.min(bytes.len())])?;
            return Err(io::Error::from_raw_os_error(errno));
        }
        (&*self.file).write_all(bytes)
    }

    fn write_raw(&mut self, bytes: &[u8]) -> Result<(), StoreError> {
        self.write_bytes(bytes).map_err(|e| io_error("repairing", &self.path, e))?;
        self.len += bytes.len() as u64;
        Ok(())
    }
}

impl Writer for JsonlWriter {
    fn append(&mut self, batch: &[Encoded<'_>]) -> Result<(), StoreError> {
        if let Some(cause) = &self.poisoned {
            return Err(StoreError::Poisoned { id: self.id.clone(), cause: cause.clone() });
        }
        let Some(first) = batch.first() else { return Ok(()) };
        let mut buf = String::with_capacity(batch.iter().map(|e| e.line.len() + 1).sum());
        for e in batch {
            buf.push_str(e.line);
            buf.push('\n');
        }
        if let Err(e) = self.write_bytes(buf.as_bytes()) {
            let op = format!("appending event {} ({}) to", first.event.seq, first.event.type_name());
            let err = io_error(op, &self.path, e);
            // Roll back whatever part of the line reached the file.
            if let Err(e2) = self.file.set_len(self.len) {
                self.poisoned = Some(format!("{err}; rollback failed: {e2}"));
            }
            return Err(err);
        }
        self.len += buf.len() as u64;
        self.mark_written(batch.len() as u64);
        Ok(())
    }

    fn syncer(&self) -> Arc<dyn Syncer> {
        self.sync.clone()
    }

    fn read_from(&mut self, from_seq: u64) -> Result<Vec<Event>, StoreError> {
        let bytes = fs::read(&self.path).map_err(|e| io_error("reading", &self.path, e))?;
        let end = (self.len as usize).min(bytes.len());
        let loaded = parse_log(&self.path, &bytes[..end])?;
        Ok(loaded.events.into_iter().filter(|e| e.seq >= from_seq).collect())
    }

    #[cfg(test)]
    fn fail_next_write(&mut self, n: usize, errno: i32) {
        self.fail_next_write = Some((n, errno));
    }
}

impl Drop for JsonlWriter {
    fn drop(&mut self) {
        self.sync.flags().shutdown = true;
        self.sync.cv.notify_all();
        if let Some(h) = self.syncer.take() {
            let _ = h.join();
        }
        // Whatever the thread did not get to (or no thread was started for).
        let dirty = {
            let f = self.sync.flags();
            f.written > f.synced
        };
        if dirty {
            let _ = self.sync.sync_now();
        }
    }
}
