//! The Tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663, as rmcp
//! 3.11 models it): a `tools/call` from a client that declares the extension
//! returns a task handle (`resultType: "task"`) at once and runs on;
//! `tasks/get` reports it (`working`, `input_required` with the component's
//! question in `inputRequests`, then `completed` with the `CallToolResult`,
//! `failed` with the JSON-RPC error, or `cancelled`), `tasks/update`
//! answers a question, `tasks/cancel` cancels the call (Wharf's
//! cancellation: a running component call ends `ABORTED`, a call still
//! waiting for its turn never starts).
//!
//! The table is bounded (per server: on stdio its one client; over HTTP
//! every client shares it): at most [`MAX_TASKS`] tasks are held (a new one
//! first evicts the oldest finished task; when all are unfinished it is
//! refused), and a finished task's result is kept [`KEEP_RESULTS`] after it
//! finished. Task ids are random (256 bits).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rmcp::ErrorData as McpError;
use rmcp::model::{
    CallToolResult, DetailedTask, InputRequest, InputRequests, InputResponses, Task, TaskPayload, TaskStatus,
};
use rmcp::task_manager::current_timestamp;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use wharf_core::question::{Form, Reply};

use crate::ask::{self, Asked};

/// Most tasks held at once (running, waiting for input, or finished and
/// kept).
pub const MAX_TASKS: usize = 64;
/// How long a finished task's result is kept.
pub const KEEP_RESULTS: Duration = Duration::from_secs(600);
/// `statusMessage` of a task whose call waits for its turn (calls run one
/// at a time).
pub const QUEUED: &str = "waiting for its turn";
/// `statusMessage` of a task whose call runs.
pub const RUNNING: &str = "running";
/// The polling interval suggested to clients.
pub const POLL_INTERVAL_MS: u64 = 500;

/// A question of the task's call, waiting for `tasks/update`.
struct Waiting {
    key: String,
    request: InputRequest,
    form: Form,
    reply: oneshot::Sender<Reply>,
}

struct Entry {
    task: Task,
    created: Instant,
    finished: Option<Instant>,
    terminal: Option<TaskPayload>,
    cancel: CancellationToken,
    waiting: Option<Waiting>,
    questions: u32,
}

impl Entry {
    fn status(&self) -> TaskStatus {
        match (&self.terminal, &self.waiting) {
            (Some(p), _) => p.status(),
            (None, Some(_)) => TaskStatus::InputRequired,
            (None, None) => TaskStatus::Working,
        }
    }

    fn touch(&mut self) {
        self.task.last_updated_at = current_timestamp();
        self.task.status = self.status();
    }

    fn detailed(&self) -> DetailedTask {
        let payload = match (&self.terminal, &self.waiting) {
            (Some(p), _) => p.clone(),
            (None, Some(w)) => {
                TaskPayload::InputRequired { input_requests: InputRequests::from([(w.key.clone(), w.request.clone())]) }
            }
            (None, None) => TaskPayload::Working,
        };
        DetailedTask::new(self.task.clone(), payload)
    }
}

/// The tasks of this server.
#[derive(Default)]
pub(crate) struct Tasks {
    table: Mutex<HashMap<String, Entry>>,
}

fn unknown(id: &str) -> McpError {
    McpError::invalid_params(
        format!(
            "unknown task `{}` (never created here, or finished more than {} s ago)",
            wharf_core::util::escape_line(wharf_core::util::cut_str(id, 80)),
            KEEP_RESULTS.as_secs()
        ),
        None,
    )
}

impl Tasks {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        t.retain(|_, e| e.finished.is_none_or(|at| at.elapsed() < KEEP_RESULTS));
        t
    }

    /// Makes room for and records a new task: its seed state and the token
    /// that cancels its call.
    pub(crate) fn create(&self) -> Result<(Task, CancellationToken), McpError> {
        let id = wharf_http_access::random_token()
            .map_err(|e| McpError::internal_error(format!("cannot make a task id: {e}"), None))?;
        let mut t = self.lock();
        if t.len() >= MAX_TASKS {
            let oldest = t.iter().filter_map(|(old, e)| Some((e.finished?, old.clone()))).min();
            match oldest {
                Some((_, old)) => {
                    t.remove(&old);
                }
                None => {
                    return Err(McpError::invalid_request(
                        format!(
                            "too many tasks: {MAX_TASKS} are unfinished; wait for one to finish or cancel one \
                             (tasks/cancel) before starting another"
                        ),
                        None,
                    ));
                }
            }
        }
        let now = current_timestamp();
        // No TTL while it runs (its call's deadline ends it); once finished,
        // the result is kept KEEP_RESULTS (the TTL then says so).
        let mut task = Task::new(id.clone(), TaskStatus::Working, now.clone(), now);
        task.poll_interval_ms = Some(POLL_INTERVAL_MS);
        task.status_message = Some(QUEUED.to_string());
        let cancel = CancellationToken::new();
        t.insert(
            id,
            Entry {
                task: task.clone(),
                created: Instant::now(),
                finished: None,
                terminal: None,
                cancel: cancel.clone(),
                waiting: None,
                questions: 0,
            },
        );
        Ok((task, cancel))
    }

    /// The task's call has its turn: it runs.
    pub(crate) fn started(&self, id: &str) {
        if let Some(e) = self.lock().get_mut(id) {
            e.task.status_message = Some(RUNNING.to_string());
            e.touch();
        }
    }

    /// The task's call asks a question: it waits for `tasks/update`.
    pub(crate) fn asked(&self, id: &str, asked: Asked) {
        let request = match ask::input_request(&asked.form) {
            Ok(r) => r,
            Err(e) => {
                let _ = asked.reply.send(Reply::decline(ask::BY, e));
                return;
            }
        };
        let mut t = self.lock();
        // Gone (or cancelled): dropping the reply withdraws the question.
        let Some(e) = t.get_mut(id) else { return };
        if e.terminal.is_some() || e.cancel.is_cancelled() {
            return;
        }
        e.questions += 1;
        e.waiting = Some(Waiting { key: format!("q{}", e.questions), request, form: asked.form, reply: asked.reply });
        e.touch();
    }

    /// The task's call ended with `result`.
    pub(crate) fn finish(&self, id: &str, result: Result<CallToolResult, McpError>) {
        let mut t = self.lock();
        let Some(e) = t.get_mut(id) else { return };
        let cancelled = e.cancel.is_cancelled();
        let payload = match result {
            Ok(r) if cancelled && r.is_error == Some(true) => TaskPayload::Cancelled,
            Ok(r) => match serde_json::to_value(&r) {
                Ok(Value::Object(result)) => TaskPayload::Completed { result },
                _ => TaskPayload::Failed {
                    error: error_object(&McpError::internal_error("unserializable result", None)),
                },
            },
            Err(_) if cancelled => TaskPayload::Cancelled,
            Err(err) => TaskPayload::Failed { error: error_object(&err) },
        };
        e.terminal = Some(payload);
        e.waiting = None;
        e.task.status_message = None;
        let now = Instant::now();
        e.finished = Some(now);
        let kept = now.duration_since(e.created) + KEEP_RESULTS;
        e.task.ttl_ms = Some(u64::try_from(kept.as_millis()).unwrap_or(u64::MAX));
        e.touch();
    }

    /// `tasks/get`.
    pub(crate) fn get(&self, id: &str) -> Result<DetailedTask, McpError> {
        let t = self.lock();
        t.get(id).map(Entry::detailed).ok_or_else(|| unknown(id))
    }

    /// `tasks/update`: the answer to the outstanding question, if `responses`
    /// holds it (other keys are ignored, as the spec says); an answer that
    /// does not fit the question is refused and the question stays open.
    pub(crate) fn update(&self, id: &str, responses: &InputResponses) -> Result<(), McpError> {
        let mut t = self.lock();
        let e = t.get_mut(id).ok_or_else(|| unknown(id))?;
        let Some(w) = &e.waiting else { return Ok(()) };
        let Some(v) = responses.get(&w.key) else { return Ok(()) };
        let reply = ask::reply_of(v, &w.form)
            .map_err(|err| McpError::invalid_params(format!("inputResponses.{}: {err}", w.key), None))?;
        if let Some(w) = e.waiting.take() {
            let _ = w.reply.send(reply);
        }
        e.touch();
        Ok(())
    }

    /// `tasks/cancel`: cancels the call (an outstanding question is
    /// withdrawn); the task reports `cancelled` once the call stopped. A
    /// finished task stays as it is.
    pub(crate) fn cancel(&self, id: &str) -> Result<(), McpError> {
        let mut t = self.lock();
        let e = t.get_mut(id).ok_or_else(|| unknown(id))?;
        if e.terminal.is_none() {
            e.cancel.cancel();
            e.waiting = None;
            e.touch();
        }
        Ok(())
    }
}

impl Tasks {
    /// Cancels every unfinished task (the server is stopping).
    pub(crate) fn cancel_all(&self) {
        for e in self.lock().values_mut() {
            if e.terminal.is_none() {
                e.cancel.cancel();
                e.waiting = None;
            }
        }
    }
}

fn error_object(e: &McpError) -> rmcp::model::JsonObject {
    match serde_json::to_value(e) {
        Ok(Value::Object(m)) => m,
        _ => rmcp::model::JsonObject::new(),
    }
}
