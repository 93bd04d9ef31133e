//! Long-running tool calls ("cells"): a tool whose [`Tool::yield_window`]
//! is set may outlive the call that started it.
//!
//! ```text
//! call of a yielding tool (passed every check of the pipeline)
//!   → arguments {"resume": ID[, "wait_ms": N]}: wait for cell ID up to
//!     `wait_ms` (default the yield window; at most the call's deadline);
//!     its result, or its new output so far
//!   → arguments {"cancel": ID}: cancel cell ID, wait for it (grace), its
//!     result
//!   → otherwise: the tool runs as a cell, a host task owning the call (its
//!     deadline is the call's, its token a child of the session's cells,
//!     not of the turn); the call waits up to the yield window:
//!       finished → its result, as any call
//!       still running → `tool/cell{state: running}` is logged and the call
//!         returns the output so far and the cell id (the cell goes on)
//! a yielded cell ends → `tool/cell{state: finished | failed | cancelled}`;
//!   its result waits for a `resume`
//! ```
//!
//! The cell's id is the id of the call that started it; the calls it makes
//! keep that id as `parent` (and their own step's turn and step), and are
//! logged as they run, between the session's other events. A session holds
//! at most [`MAX_CELLS`] cells; the turn ending does not end them: they end
//! by themselves, at their deadline, by a `cancel`, or when the session
//! closes ([`crate::Agent::close_cells`]; an agent dropped cancels them).
//! Output so far is what the tool reports through
//! [`SessionServices::set_progress`](crate::plugin::SessionServices::set_progress)
//! (a component's stdout), each part shown once.
//!
//! The `tool/cell` event is ignorable (older readers skip it):
//! `{cell, tool, state, error_code?, shown?}`. A yield answer that shows
//! output logs `state: running` with `shown`, the bytes of output the
//! model has seen so far, so a cell re-run after a crash (its output
//! produced again from the start) shows only what is new.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::plugin::{ToolErrorCode, ToolOutcome};
use crate::store::SessionLog;

/// The ignorable event type of a cell's state change.
pub const CELL_EVENT: &str = "tool/cell";
/// Most cells one session holds (running or holding an uncollected result).
pub const MAX_CELLS: usize = 8;
/// Most bytes of new output one answer shows (the rest stays for the next).
pub const MAX_PROGRESS_BYTES: usize = 16 << 10;

/// What a tool reports as its output so far (the whole of it each time).
pub type ProgressFn = Arc<dyn Fn() -> String + Send + Sync>;

/// Where a tool registers its [`ProgressFn`] (shared by its call's services
/// and its cell).
pub type ProgressSlot = Arc<Mutex<Option<ProgressFn>>>;

/// How a cell ended.
#[derive(Debug, Clone)]
pub(crate) struct CellEnd {
    pub outcome: ToolOutcome,
}

struct CellState {
    end: Option<CellEnd>,
    yielded: bool,
    /// Bytes of progress already shown to the model.
    shown: usize,
}

/// One running (or finished, uncollected) cell.
pub(crate) struct Cell {
    pub id: String,
    pub tool: String,
    started: Instant,
    pub cancel: CancellationToken,
    pub progress: ProgressSlot,
    state: Mutex<CellState>,
    done: Notify,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Cell {
    /// The output reported since the last time it was shown (bounded).
    fn new_output(&self, st: &mut CellState) -> String {
        let source = lock(&self.progress).clone();
        let Some(f) = source else { return String::new() };
        let all = f();
        // A re-run cell produces its output again from the start: what
        // the model saw before the crash is not shown twice.
        if all.len() <= st.shown {
            return String::new();
        }
        let from = crate::util::floor_char_boundary(&all, st.shown);
        let mut part = all[from..].to_string();
        crate::util::truncate_str(&mut part, MAX_PROGRESS_BYTES);
        st.shown = from + part.len();
        part
    }

    /// Waits up to `window` for the end. `Some` once ended.
    async fn wait(&self, window: Duration) -> Option<CellEnd> {
        let deadline = tokio::time::Instant::now() + window;
        loop {
            let notified = self.done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(end) = lock(&self.state).end.clone() {
                return Some(end);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return lock(&self.state).end.clone();
            }
        }
    }
}

/// The cells of one session.
pub struct Cells {
    log: SessionLog,
    root: CancellationToken,
    map: Mutex<BTreeMap<String, Arc<Cell>>>,
}

/// A summary of one cell, for surfaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellInfo {
    /// The cell's id (the call that started it).
    pub id: String,
    /// The tool it runs.
    pub tool: String,
    /// `running`, or `finished` / `failed` with a result not yet collected.
    pub state: String,
    /// Since it started.
    pub elapsed: Duration,
}

impl Cells {
    pub(crate) fn new(log: SessionLog) -> Self {
        Self { log, root: CancellationToken::new(), map: Mutex::new(BTreeMap::new()) }
    }

    /// The session's cells now.
    pub fn list(&self) -> Vec<CellInfo> {
        lock(&self.map)
            .values()
            .map(|c| {
                let st = lock(&c.state);
                let state = match &st.end {
                    None => "running",
                    Some(e) if e.outcome.is_error => "failed",
                    Some(_) => "finished",
                };
                CellInfo { id: c.id.clone(), tool: c.tool.clone(), state: state.into(), elapsed: c.started.elapsed() }
            })
            .collect()
    }

    /// Cancels every cell (the session closes).
    pub fn cancel_all(&self) {
        self.root.cancel();
    }

    /// Cancels every cell and waits (at most `grace`) until each has ended
    /// and logged its end.
    pub async fn close(&self, grace: Duration) {
        self.root.cancel();
        let cells: Vec<Arc<Cell>> = lock(&self.map).values().cloned().collect();
        for c in cells {
            let _ = c.wait(grace).await;
        }
    }

    /// Registers a new cell for call `id` of `tool`, or says why not.
    pub(crate) fn start(&self, id: &str, tool: &str) -> Result<Arc<Cell>, String> {
        let mut map = lock(&self.map);
        if map.contains_key(id) {
            return Err(format!("a cell `{id}` exists already"));
        }
        if map.len() >= MAX_CELLS {
            let ids: Vec<&str> = map.keys().map(String::as_str).collect();
            return Err(format!(
                "this session holds {MAX_CELLS} cells already ({}): collect one with `resume` or end one with \
                 `cancel` first",
                ids.join(", ")
            ));
        }
        let cell = Arc::new(Cell {
            id: id.to_string(),
            tool: tool.to_string(),
            started: Instant::now(),
            cancel: self.root.child_token(),
            progress: Default::default(),
            state: Mutex::new(CellState { end: None, yielded: false, shown: 0 }),
            done: Notify::new(),
        });
        map.insert(id.to_string(), cell.clone());
        Ok(cell)
    }

    /// Registers again, as yielded, cell `id` of `tool` a crash cut (its
    /// durable call re-run by replay, [`crate::Agent::recover`]), so a
    /// `resume` or `cancel` finds it and its end is logged.
    /// `shown`: the bytes of its output the model saw before the crash.
    pub(crate) fn restart(&self, id: &str, tool: &str, shown: usize) -> Result<Arc<Cell>, String> {
        let cell = self.start(id, tool)?;
        let mut st = lock(&cell.state);
        st.yielded = true;
        st.shown = shown;
        drop(st);
        Ok(cell)
    }

    /// Records the end of `cell` (its task calls this when the call ends).
    pub(crate) fn finish(&self, cell: &Cell, outcome: ToolOutcome) {
        let yielded = {
            let mut st = lock(&cell.state);
            st.end = Some(CellEnd { outcome: outcome.clone() });
            st.yielded
        };
        cell.done.notify_waiters();
        if yielded {
            let state = if !outcome.is_error {
                "finished"
            } else if cell.cancel.is_cancelled() {
                "cancelled"
            } else {
                "failed"
            };
            self.log_state(cell, state, outcome.error_code.as_ref(), None);
        }
    }

    fn log_state(&self, cell: &Cell, state: &str, code: Option<&ToolErrorCode>, shown: Option<usize>) {
        let mut data = json!({"cell": cell.id, "tool": cell.tool, "state": state});
        if let Some(c) = code {
            data["error_code"] = Value::from(c.to_string());
        }
        if let Some(n) = shown {
            data["shown"] = Value::from(n);
        }
        if let Err(e) = self.log.append_ignorable(CELL_EVENT, data) {
            tracing::warn!(cell = %cell.id, error = %e, "cannot log the cell's state");
        }
    }

    /// The starting call's answer: waits up to `window`; the cell's result
    /// when it ended, else the yield notice (and the cell goes on).
    pub(crate) async fn first_answer(
        &self,
        cell: &Arc<Cell>,
        window: Duration,
        turn: &CancellationToken,
    ) -> ToolOutcome {
        // Until it yields, the cell is the turn's call: a cancelled turn
        // cancels it.
        let end = tokio::select! {
            e = cell.wait(window) => e,
            _ = turn.cancelled() => {
                cell.cancel.cancel();
                cell.wait(Duration::from_secs(3600)).await
            }
        };
        if let Some(end) = end {
            self.remove(&cell.id);
            return end.outcome;
        }
        let (output, shown) = {
            let mut st = lock(&cell.state);
            if let Some(end) = st.end.clone() {
                drop(st);
                self.remove(&cell.id);
                return end.outcome;
            }
            st.yielded = true;
            let output = cell.new_output(&mut st);
            (output, st.shown)
        };
        self.log_state(cell, "running", None, (shown > 0).then_some(shown));
        ToolOutcome::ok(yield_text(cell, &output, window))
    }

    /// `{"resume": ID}`: the result of cell ID, or its new output after
    /// waiting up to `window`.
    pub(crate) async fn resume(&self, id: &str, window: Duration) -> ToolOutcome {
        let Some(cell) = self.get(id) else { return self.unknown(id) };
        match cell.wait(window).await {
            Some(end) => self.collect(&cell, end),
            None => {
                let (output, shown) = {
                    let mut st = lock(&cell.state);
                    let output = cell.new_output(&mut st);
                    (output, st.shown)
                };
                if !output.is_empty() {
                    // Still running: the state again, with what is seen.
                    self.log_state(&cell, "running", None, Some(shown));
                }
                ToolOutcome::ok(yield_text(&cell, &output, window))
            }
        }
    }

    /// `{"cancel": ID}`: cancels cell ID and waits up to `grace` for it.
    pub(crate) async fn cancel(&self, id: &str, grace: Duration) -> ToolOutcome {
        let Some(cell) = self.get(id) else { return self.unknown(id) };
        cell.cancel.cancel();
        match cell.wait(grace).await {
            Some(end) => {
                let mut out = self.collect(&cell, end);
                out.content = format!("cell {id} cancelled.\n{}", out.content);
                out
            }
            None => ToolOutcome::error(
                ToolErrorCode::Aborted,
                format!("cell {id} was cancelled but did not stop within {} ms", grace.as_millis()),
            ),
        }
    }

    fn collect(&self, cell: &Cell, end: CellEnd) -> ToolOutcome {
        self.remove(&cell.id);
        let mut outcome = end.outcome;
        outcome.content = format!(
            "cell {} ended after {:.1} s. Its result:\n{}",
            cell.id,
            cell.started.elapsed().as_secs_f64(),
            outcome.content
        );
        outcome
    }

    fn get(&self, id: &str) -> Option<Arc<Cell>> {
        lock(&self.map).get(id).cloned()
    }

    fn remove(&self, id: &str) {
        lock(&self.map).remove(id);
    }

    fn unknown(&self, id: &str) -> ToolOutcome {
        let ids: Vec<String> = lock(&self.map).keys().cloned().collect();
        let list = if ids.is_empty() { "none".to_string() } else { ids.join(", ") };
        ToolOutcome::error(
            ToolErrorCode::InvalidArguments,
            format!(
                "Error: no cell `{}` in this session (a cell's result is given once); cells now: {list}",
                crate::util::escape_line(crate::util::cut_str(id, 128))
            ),
        )
    }
}

fn yield_text(cell: &Cell, output: &str, window: Duration) -> String {
    let mut s = format!(
        "cell {} is still running after {:.1} s (this answer came after a {:.1} s window; the program goes on, and \
         its tool calls keep running).",
        cell.id,
        cell.started.elapsed().as_secs_f64(),
        window.as_secs_f64()
    );
    if output.is_empty() {
        s.push_str("\nNo new output.");
    } else {
        s.push_str("\nNew output:\n");
        s.push_str(output);
    }
    s.push_str(&format!(
        "\nCall {} with {{\"resume\": \"{}\"}} to wait for more output or its result, or {{\"cancel\": \"{}\"}} to \
         end it.",
        cell.tool, cell.id, cell.id
    ));
    s
}

/// What a yielding tool's arguments ask for.
pub(crate) enum CellRequest {
    Start,
    Resume { id: String, wait: Option<Duration> },
    Cancel { id: String },
}

impl CellRequest {
    pub(crate) fn of(args: &Value) -> Self {
        if let Some(id) = args.get("resume").and_then(Value::as_str) {
            let wait = args.get("wait_ms").and_then(Value::as_u64).map(Duration::from_millis);
            return Self::Resume { id: id.to_string(), wait };
        }
        if let Some(id) = args.get("cancel").and_then(Value::as_str) {
            return Self::Cancel { id: id.to_string() };
        }
        Self::Start
    }
}
