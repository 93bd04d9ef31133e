//! Session services: what a plugin working for a session may ask of it (the
//! `session`, `model` and `agents` imports of the WIT), implemented over the
//! agent's log, registry, bus and approver.
//!
//! - **record_event**: typed plugin-reported events (`todo/updated`),
//!   validated and bounded before they reach the log: at most
//!   [`MAX_EVENT_BYTES`] of JSON per event, [`MAX_EVENTS_PER_CALL`] events
//!   per call and [`MAX_EVENT_BYTES_PER_SESSION`] per session (per agent:
//!   counted from when the agent was created, so a resumed session starts a
//!   new budget). Recording needs no grant: the kinds are fixed, typed and
//!   validated, and these bounds cap what one component can add to the log.
//! - **tool_progress**: a delta of the running call's output (a
//!   component's streamed result) as `tool/progress`, in order; at most
//!   [`MAX_PROGRESS_EVENTS_PER_CALL`] events and
//!   [`MAX_PROGRESS_BYTES_PER_CALL`] bytes a call, the rest reaches only the
//!   call's result.
//! - **complete**: one tool-less request to the session's adapter; retried on
//!   transient errors like a step, but nothing is logged as a message.
//! - **run_agent**: a child agent (subagent) with its own session log whose
//!   header links it to the parent call (`spawned_by`), the same registry
//!   (so the same policies and hooks), the same approver, a restricted tool
//!   set (what the task names, else all of the parent's tools) and
//!   `depth + 1` (at most [`AgentConfig::max_depth`]). The child is
//!   cancelled when the calling tool call is.
//!
//! Grants (`model`, `agents`) are checked by the runtime before these run:
//! the core does not know which component may do what.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::agent::{Agent, AgentConfig};
use crate::approval::Approver;
use crate::bus::Bus;
use crate::events::{EventKind, SpawnedBy, TodoUpdated, ToolProgress};
use crate::pipeline::StepRef;
use crate::plugin::{
    AgentOutcome, AgentTask, BoxFuture, CompleteRequest, LlmEvent, LlmRequest, PluginRef, ServiceError,
    SessionServices, ToolOutcome, ToolRequest, ToolSpec,
};
use crate::registry::Registry;
use crate::store::{NewSession, SessionLog};
use crate::util;

/// Most items a todo list may hold.
pub const MAX_TODO_ITEMS: usize = 200;
/// Largest event a plugin may record, bytes of JSON text (a full todo list
/// of 200 items with 300-byte entries fits).
pub const MAX_EVENT_BYTES: usize = 64 << 10;
/// Most events one call may record (a todo tool records one).
pub const MAX_EVENTS_PER_CALL: usize = 16;
/// Most bytes of plugin-recorded events one session (one agent) may add to
/// its log.
pub const MAX_EVENT_BYTES_PER_SESSION: usize = 8 << 20;
/// Most bytes of `tool/progress` text one call may add to the log (what
/// the log keeps of a tool's output).
pub const MAX_PROGRESS_BYTES_PER_CALL: usize = 4 << 20;
/// Most `tool/progress` events one call may add to the log.
pub const MAX_PROGRESS_EVENTS_PER_CALL: usize = 1000;

/// What every call's services share: one per agent.
#[derive(Clone)]
pub struct SessionContext {
    pub(crate) log: SessionLog,
    pub(crate) registry: Arc<Registry>,
    pub(crate) bus: Arc<Bus>,
    pub(crate) approver: Arc<dyn Approver>,
    pub(crate) config: AgentConfig,
    /// Bytes of plugin-recorded events so far (see
    /// [`MAX_EVENT_BYTES_PER_SESSION`]).
    pub(crate) event_bytes: Arc<AtomicUsize>,
    /// The session's "allowed for the session" approvals, shared with the
    /// pipelines of the calls programs make.
    pub(crate) grants: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    /// The session's cells (long-running calls, [`crate::cells`]).
    pub(crate) cells: Arc<crate::cells::Cells>,
}

impl SessionContext {
    /// Services for one call by `caller` (a tool call id, or `compaction`),
    /// cancelled with `cancel`.
    pub fn for_call(self: &Arc<Self>, call_id: &str, caller: PluginRef, cancel: CancellationToken) -> CallServices {
        CallServices {
            ctx: self.clone(),
            call_id: call_id.to_string(),
            caller,
            cancel,
            events: AtomicUsize::new(0),
            progress_used: std::sync::Mutex::new((0, 0)),
            at: None,
            nested: false,
            inner_calls: AtomicUsize::new(0),
            inflight: Default::default(),
            cell_progress: None,
            determinism: None,
            replay: None,
        }
    }

    /// Services for tool call `call_id` of step `at`; `nested` when a
    /// program made the call (it may not call tools in turn).
    pub(crate) fn for_tool_call(
        self: &Arc<Self>,
        call_id: &str,
        caller: PluginRef,
        cancel: CancellationToken,
        at: StepRef,
        nested: bool,
    ) -> CallServices {
        let mut s = self.for_call(call_id, caller, cancel);
        s.at = Some(at);
        s.nested = nested;
        s
    }
}

/// The services handed to one call.
pub struct CallServices {
    ctx: Arc<SessionContext>,
    call_id: String,
    /// The plugin making the call (for logs).
    caller: PluginRef,
    cancel: CancellationToken,
    /// Events this call recorded.
    events: AtomicUsize,
    /// `tool/progress` events and bytes this call appended.
    progress_used: std::sync::Mutex<(usize, usize)>,
    /// The step of the tool call (none for a compaction).
    at: Option<StepRef>,
    /// The call was made by a program (`tool/call.parent`).
    nested: bool,
    /// Calls this call made through [`SessionServices::call_tools`].
    inner_calls: AtomicUsize,
    /// Held (read) by every batch of inner calls still running: the
    /// scheduler waits for it before committing this call's result.
    inflight: Arc<tokio::sync::RwLock<()>>,
    /// Where a call running as a cell reports its output so far.
    pub(crate) cell_progress: Option<crate::cells::ProgressSlot>,
    /// A durable call's clock and seed ([`crate::durable`]).
    pub(crate) determinism: Option<crate::plugin::Determinism>,
    /// A durable call re-run after a crash: its logged inner calls.
    pub(crate) replay: Option<Arc<crate::durable::Replay>>,
}

/// Counts the bytes of a value's JSON text without building it.
struct ByteCount(usize);

impl std::io::Write for ByteCount {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        if self.0 > MAX_EVENT_BYTES {
            // Stop serializing: the event is too big already.
            return Err(std::io::Error::other("too big"));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Bytes of `data`'s JSON text, or `None` past [`MAX_EVENT_BYTES`].
fn event_size(data: &Value) -> Option<usize> {
    let mut n = ByteCount(0);
    serde_json::to_writer(&mut n, data).ok().map(|()| n.0)
}

impl CallServices {
    /// Checks the bounds of one more event of `size` bytes and reserves it
    /// in the call's and the session's budgets.
    fn reserve_event(&self, size: usize) -> Result<(), ServiceError> {
        let done = self.events.load(Ordering::Relaxed);
        if done >= MAX_EVENTS_PER_CALL {
            return Err(ServiceError::Invalid(format!(
                "a call may record at most {MAX_EVENTS_PER_CALL} events; this one already recorded {done}"
            )));
        }
        let budget = &self.ctx.event_bytes;
        let mut used = budget.load(Ordering::Relaxed);
        loop {
            if used + size > MAX_EVENT_BYTES_PER_SESSION {
                return Err(ServiceError::Invalid(format!(
                    "this session's plugin events reached their limit of {MAX_EVENT_BYTES_PER_SESSION} bytes \
                     ({used} bytes recorded); no more events are recorded"
                )));
            }
            match budget.compare_exchange_weak(used, used + size, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => used = now,
            }
        }
        self.events.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

impl SessionServices for CallServices {
    fn depth(&self) -> u32 {
        self.ctx.config.pipeline.agent_depth
    }

    fn record_event(&self, kind: &str, data: Value) -> Result<(), ServiceError> {
        match kind {
            "todo/updated" => {
                let size = event_size(&data).ok_or_else(|| {
                    ServiceError::Invalid(format!("an event holds at most {MAX_EVENT_BYTES} bytes of JSON"))
                })?;
                let items = validate_todo(&data)?;
                self.reserve_event(size)?;
                self.ctx
                    .log
                    .append(EventKind::TodoUpdated(TodoUpdated { items }))
                    .map(|_| ())
                    .map_err(|e| ServiceError::Failed(e.to_string()))
            }
            other => Err(ServiceError::Invalid(format!(
                "unknown event kind `{}` (plugins may record: todo/updated)",
                util::escape_line(util::cut_str(other, 64))
            ))),
        }
    }

    fn tool_progress(&self, text: &str) -> Result<bool, ServiceError> {
        if text.is_empty() {
            return Ok(true);
        }
        // Counted and appended under one lock: a call's deltas keep their
        // order in the log.
        let mut progress = self.progress_used.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (events, bytes) = *progress;
        let left = MAX_PROGRESS_BYTES_PER_CALL.saturating_sub(bytes);
        if events >= MAX_PROGRESS_EVENTS_PER_CALL || left == 0 {
            return Ok(false);
        }
        let text = util::cut_str(text, left);
        *progress = (events + 1, bytes + text.len());
        self.ctx
            .log
            .append(EventKind::ToolProgress(ToolProgress { call_id: self.call_id.clone(), text: text.to_string() }))
            .map(|_| true)
            .map_err(|e| ServiceError::Failed(e.to_string()))
    }

    fn complete(&self, request: CompleteRequest) -> BoxFuture<'_, Result<String, ServiceError>> {
        Box::pin(complete(&self.ctx, request, &self.cancel))
    }

    fn run_agent(&self, task: AgentTask) -> BoxFuture<'_, Result<AgentOutcome, ServiceError>> {
        Box::pin(self.run_child(task))
    }

    fn list_tools(&self, allowed: Option<&[String]>) -> Result<Vec<ToolSpec>, ServiceError> {
        Ok(self.tool_view(allowed)?.tool_specs())
    }

    fn call_tools(
        &self,
        calls: Vec<ToolRequest>,
        allowed: Option<Vec<String>>,
    ) -> BoxFuture<'_, Result<Vec<ToolOutcome>, ServiceError>> {
        Box::pin(self.run_inner(calls, allowed))
    }

    fn set_progress(&self, source: crate::cells::ProgressFn) {
        if let Some(slot) = &self.cell_progress {
            *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(source);
        }
    }

    fn determinism(&self) -> Option<crate::plugin::Determinism> {
        self.determinism
    }

    fn ask_user(
        &self,
        source: String,
        form: crate::question::Form,
    ) -> BoxFuture<'_, Result<crate::question::Reply, ServiceError>> {
        Box::pin(self.ask_inner(source, form))
    }
}

/// Logs `question/answered` once: with the reply, or (when the asking call
/// ends first and drops the wait) as a cancel.
struct Unanswered<'a> {
    log: &'a SessionLog,
    call_id: &'a str,
    done: bool,
}

impl Unanswered<'_> {
    fn answer(&mut self, reply: &crate::question::Reply) {
        self.done = true;
        let data = crate::question::answered_data(self.call_id, reply);
        if let Err(e) = self.log.append_ignorable(crate::question::ANSWERED_EVENT, data) {
            tracing::warn!("logging a question's answer failed: {e}");
        }
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.answer(&crate::question::Reply::cancel("host", "the call ended before an answer"));
        }
    }
}

impl CallServices {
    async fn ask_inner(
        &self,
        source: String,
        form: crate::question::Form,
    ) -> Result<crate::question::Reply, ServiceError> {
        use crate::question::{ASKED_EVENT, Answer, Question, Reply};
        if self.at.is_none() {
            return Err(ServiceError::NoSession);
        }
        let question =
            Question { session_id: self.ctx.log.id().to_string(), call_id: self.call_id.clone(), source, form };
        self.ctx
            .log
            .append_ignorable(ASKED_EVENT, crate::question::asked_data(&question))
            .map_err(|e| ServiceError::Failed(e.to_string()))?;
        let mut pending = Unanswered { log: &self.ctx.log, call_id: &self.call_id, done: false };
        let form = question.form.clone();
        let reply = tokio::select! {
            r = self.ctx.approver.ask(question, self.cancel.clone()) => r,
            _ = self.cancel.cancelled() => Reply::cancel("host", "the turn was cancelled"),
        };
        // What goes back to the tool is checked here, whatever the surface did.
        let reply = match reply.answer {
            Answer::Accept(content) => match form.check(&Value::Object(content)) {
                Ok(content) => Reply { answer: Answer::Accept(content), ..reply },
                Err(e) => Reply::cancel(&reply.by, format!("the answer did not fit the form: {e}")),
            },
            _ => reply,
        };
        pending.answer(&reply);
        Ok(reply)
    }
}

/// What a policy deciding on a call may use of its session: questions to
/// the user about that call ([`SessionServices::ask_user`], logged and
/// withdrawn like a tool's), nothing else. The policies of one call share
/// one question slot: a second policy's question waits until the first is
/// answered (surfaces keep one open question per call).
pub(crate) struct PolicyQuestions {
    inner: CallServices,
    slot: Arc<tokio::sync::Mutex<()>>,
}

impl PolicyQuestions {
    /// Questions through `inner` (a call's services for the policy's
    /// plugin), one at a time per `slot`.
    pub(crate) fn new(inner: CallServices, slot: Arc<tokio::sync::Mutex<()>>) -> Self {
        Self { inner, slot }
    }
}

impl SessionServices for PolicyQuestions {
    fn depth(&self) -> u32 {
        self.inner.depth()
    }

    fn record_event(&self, _kind: &str, _data: Value) -> Result<(), ServiceError> {
        Err(ServiceError::NoSession)
    }

    fn complete(&self, _request: CompleteRequest) -> BoxFuture<'_, Result<String, ServiceError>> {
        Box::pin(async { Err(ServiceError::NoSession) })
    }

    fn run_agent(&self, _task: AgentTask) -> BoxFuture<'_, Result<AgentOutcome, ServiceError>> {
        Box::pin(async { Err(ServiceError::NoSession) })
    }

    fn ask_user(
        &self,
        source: String,
        form: crate::question::Form,
    ) -> BoxFuture<'_, Result<crate::question::Reply, ServiceError>> {
        Box::pin(async move {
            let _turn = tokio::select! {
                g = self.slot.lock() => g,
                _ = self.inner.cancel.cancelled() => {
                    return Ok(crate::question::Reply::cancel("host", "the turn was cancelled"));
                }
            };
            if self.inner.cancel.is_cancelled() {
                return Ok(crate::question::Reply::cancel("host", "the turn was cancelled"));
            }
            self.inner.ask_inner(source, form).await
        })
    }
}

/// Most calls one tool call may make through
/// [`SessionServices::call_tools`] (over all its batches).
pub const MAX_INNER_CALLS: usize = 1000;
/// Most calls in one batch.
pub const MAX_BATCH: usize = 256;

impl CallServices {
    /// What this call may see of the session's tools: the agent's set,
    /// narrowed to `allowed`, without the caller's own tools (a program
    /// cannot start another program).
    fn tool_view(&self, allowed: Option<&[String]>) -> Result<Arc<crate::registry::Snapshot>, ServiceError> {
        if self.nested {
            return Err(ServiceError::Invalid("a call made by a program cannot call tools itself".into()));
        }
        if self.at.is_none() {
            return Err(ServiceError::NoSession);
        }
        let snap = self.ctx.registry.snapshot();
        let names: BTreeSet<String> = snap
            .tools
            .iter()
            .filter(|(n, t)| {
                t.plugin().id != self.caller.id
                    && self.ctx.config.tools.as_ref().is_none_or(|s| s.contains(*n))
                    && allowed.is_none_or(|a| a.iter().any(|x| x == *n))
            })
            .map(|(n, _)| n.clone())
            .collect();
        Ok(Arc::new(snap.restricted(&names)))
    }

    /// The scheduler waits on this before committing the call's result.
    pub(crate) fn inflight(&self) -> Arc<tokio::sync::RwLock<()>> {
        self.inflight.clone()
    }

    async fn run_inner(
        &self,
        calls: Vec<ToolRequest>,
        allowed: Option<Vec<String>>,
    ) -> Result<Vec<ToolOutcome>, ServiceError> {
        let snap = self.tool_view(allowed.as_deref())?;
        let Some(at) = self.at else { return Err(ServiceError::NoSession) };
        if calls.len() > MAX_BATCH {
            return Err(ServiceError::Invalid(format!("a batch holds at most {MAX_BATCH} calls, got {}", calls.len())));
        }
        let first = self.inner_calls.fetch_add(calls.len(), Ordering::Relaxed);
        if first + calls.len() > MAX_INNER_CALLS {
            return Err(ServiceError::Invalid(format!(
                "a call may make at most {MAX_INNER_CALLS} tool calls; this one already made {first}"
            )));
        }
        if self.cancel.is_cancelled() {
            return Err(ServiceError::Cancelled);
        }
        let tool_calls: Vec<crate::plugin::ToolCall> = calls
            .into_iter()
            .enumerate()
            .map(|(i, c)| crate::plugin::ToolCall {
                id: format!("{}.{}", self.call_id, first + i + 1),
                name: util::cut_str(&c.name, 128).to_string(),
                arguments: c.arguments,
            })
            .collect();
        // A durable call re-run after a crash: the calls the log holds are
        // answered from it (crate::durable); only the others run.
        let mut answers: Vec<Option<ToolOutcome>> = vec![None; tool_calls.len()];
        if let Some(replay) = &self.replay {
            for (i, c) in tool_calls.iter().enumerate() {
                match replay.answer(c) {
                    crate::durable::Answer::Logged(o) => answers[i] = Some(o),
                    crate::durable::Answer::Run => {}
                    crate::durable::Answer::Diverged(msg) => {
                        // The call ends with the divergence as its result.
                        self.cancel.cancel();
                        return Err(ServiceError::Failed(msg));
                    }
                }
            }
        }
        let tool_calls: Vec<crate::plugin::ToolCall> =
            tool_calls.into_iter().zip(&answers).filter(|(_, a)| a.is_none()).map(|(c, _)| c).collect();
        if tool_calls.is_empty() {
            return Ok(answers.into_iter().flatten().collect());
        }
        let ctx = &self.ctx;
        let pipeline = crate::pipeline::ToolPipeline::new(
            ctx.log.clone(),
            ctx.bus.clone(),
            ctx.approver.clone(),
            ctx.config.pipeline.clone(),
        )
        .with_services(ctx.clone())
        .inner_of(self.call_id.clone(), ctx.grants.clone());
        let cancel = self.cancel.clone();
        let guard = self.inflight.clone().read_owned().await;
        // Its own task: when the caller is dropped (cancelled), the batch
        // still logs a result for every call it logged.
        let task = tokio::spawn(async move {
            let _guard = guard;
            pipeline.run(&snap, at, &tool_calls, &cancel).await
        });
        let results = task
            .await
            .map_err(|e| ServiceError::Failed(format!("the batch of tool calls failed: {e}")))?
            .map_err(|e| ServiceError::Failed(format!("the session log failed: {e}")))?;
        let mut ran = results.into_iter().map(|r| ToolOutcome {
            content: r.content,
            is_error: r.is_error,
            error_code: r.error_code,
            details: r.details,
        });
        Ok(answers
            .into_iter()
            .map(|a| {
                a.or_else(|| ran.next()).unwrap_or_else(|| {
                    ToolOutcome::error(crate::plugin::ToolErrorCode::Aborted, "Error: the call was aborted")
                })
            })
            .collect())
    }
}

/// Checks a todo list: `{"items": [...]}` (or a bare array) of objects with
/// `content`, `status` in pending/in_progress/completed, optional `id` and
/// `active_form`. Returns the array.
pub fn validate_todo(data: &Value) -> Result<Value, ServiceError> {
    todo_items(data).map_err(ServiceError::Invalid)
}

fn todo_items(data: &Value) -> Result<Value, String> {
    let items = match data {
        Value::Array(_) => data,
        Value::Object(m) => m.get("items").ok_or("expected {\"items\": [...]}")?,
        _ => return Err("expected {\"items\": [...]}".into()),
    };
    let arr = items.as_array().ok_or("`items` must be an array")?;
    if arr.len() > MAX_TODO_ITEMS {
        return Err(format!("a todo list holds at most {MAX_TODO_ITEMS} items, got {}", arr.len()));
    }
    for (i, it) in arr.iter().enumerate() {
        let obj = it.as_object().ok_or_else(|| format!("items[{i}] must be an object"))?;
        match obj.get("content").and_then(Value::as_str) {
            Some(c) if !c.trim().is_empty() => {}
            _ => return Err(format!("items[{i}].content must be a non-empty string")),
        }
        match obj.get("status").and_then(Value::as_str) {
            Some("pending" | "in_progress" | "completed") => {}
            _ => return Err(format!("items[{i}].status must be one of pending, in_progress, completed")),
        }
        for key in ["id", "active_form"] {
            if obj.get(key).is_some_and(|v| !v.is_string()) {
                return Err(format!("items[{i}].{key} must be a string"));
            }
        }
        if let Some(k) = obj.keys().find(|k| !matches!(k.as_str(), "content" | "status" | "id" | "active_form")) {
            return Err(format!("items[{i}] has an unknown field `{k}`"));
        }
    }
    Ok(items.clone())
}

/// One tool-less completion from the session's adapter, with the step retry
/// policy for transient errors.
pub(crate) async fn complete(
    ctx: &SessionContext,
    request: CompleteRequest,
    cancel: &CancellationToken,
) -> Result<String, ServiceError> {
    let snap = ctx.registry.snapshot();
    let adapter =
        snap.llm(ctx.config.llm.as_deref()).ok_or_else(|| ServiceError::Failed("no LLM adapter is loaded".into()))?;
    let req = LlmRequest {
        system: request.system,
        messages: request.messages,
        tools: Arc::from([]),
        max_tokens: request.max_tokens,
        images: Vec::new(),
        history: Default::default(),
    };
    let mut attempt = 0;
    loop {
        let res = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(ServiceError::Cancelled),
            r = collect_text(adapter.as_ref(), &req) => r,
        };
        match res {
            Ok(text) => return Ok(text),
            Err(e) => {
                attempt += 1;
                let Some(delay) = ctx.config.retry.delay(&e, attempt, util::random_unit()) else {
                    return Err(ServiceError::Failed(format!("{}: {}", e.code.as_str(), e.message)));
                };
                tokio::select! {
                    _ = cancel.cancelled() => return Err(ServiceError::Cancelled),
                    _ = tokio::time::sleep(delay) => {}
                }
            }
        }
    }
}

async fn collect_text(
    adapter: &dyn crate::plugin::LlmAdapter,
    req: &LlmRequest,
) -> Result<String, crate::plugin::LlmError> {
    let mut stream = adapter.start(req).await?;
    let mut text = String::new();
    while let Some(batch) = stream.next().await? {
        for ev in batch {
            if let LlmEvent::Text(t) = ev {
                text.push_str(&t);
            }
        }
    }
    if text.trim().is_empty() {
        return Err(crate::plugin::LlmError::new(
            crate::plugin::LlmErrorCode::EmptyResponse,
            "the model returned nothing",
        ));
    }
    Ok(text)
}

impl CallServices {
    async fn run_child(&self, task: AgentTask) -> Result<AgentOutcome, ServiceError> {
        let ctx = &self.ctx;
        let depth = ctx.config.pipeline.agent_depth + 1;
        if depth > ctx.config.max_depth {
            return Err(ServiceError::Invalid(format!(
                "subagents may nest at most {} deep; this agent is already at depth {}",
                ctx.config.max_depth, ctx.config.pipeline.agent_depth
            )));
        }
        if task.prompt.trim().is_empty() {
            return Err(ServiceError::Invalid("the task prompt is empty".into()));
        }
        let snap = ctx.registry.snapshot();
        let parent_tools: BTreeSet<String> = match &ctx.config.tools {
            Some(allowed) => snap.tools.keys().filter(|n| allowed.contains(*n)).cloned().collect(),
            None => snap.tools.keys().cloned().collect(),
        };
        let tools: BTreeSet<String> = if task.tools.is_empty() {
            parent_tools
        } else {
            let mut set = BTreeSet::new();
            for t in &task.tools {
                if !parent_tools.contains(t) {
                    let names: Vec<&str> = parent_tools.iter().map(String::as_str).collect();
                    return Err(ServiceError::Invalid(format!(
                        "tool `{t}` is not available to this agent (available: {})",
                        names.join(", ")
                    )));
                }
                set.insert(t.clone());
            }
            set
        };
        let header = ctx.log.header();
        // The child's session goes to the parent's store, whatever backend.
        let child_log = ctx
            .log
            .store()
            .create_child(
                NewSession {
                    id: None,
                    workspace: ctx
                        .config
                        .pipeline
                        .workspace
                        .clone()
                        .or(header.as_ref().and_then(|h| h.workspace.clone())),
                    profile: header.and_then(|h| h.profile),
                },
                SpawnedBy { session: ctx.log.id().to_string(), call_id: self.call_id.clone(), depth },
            )
            .map_err(|e| ServiceError::Failed(format!("cannot create the subagent's session: {e}")))?;
        let mut config = ctx.config.clone();
        config.tools = Some(tools);
        config.max_steps = task.max_steps.unwrap_or(config.max_steps).clamp(1, ctx.config.max_steps.max(1));
        config.pipeline.agent_depth = depth;
        config.instructions = task.instructions.filter(|s| !s.trim().is_empty());
        let child = Agent::with_bus(child_log, ctx.registry.clone(), ctx.bus.clone(), ctx.approver.clone(), config);
        let session_id = child.session_id().to_string();
        tracing::info!(parent = %ctx.log.id(), child = %session_id, depth, by = %self.caller.id, "subagent started");
        let run = child.prompt(task.prompt);
        tokio::pin!(run);
        let result = tokio::select! {
            r = &mut run => r,
            _ = self.cancel.cancelled() => {
                // The turn may not have started yet: keep cancelling until
                // the child's prompt returns.
                loop {
                    child.cancel();
                    tokio::select! {
                        r = &mut run => break r,
                        _ = tokio::time::sleep(std::time::Duration::from_millis(20)) => {}
                    }
                }
            }
        };
        let summary = result.map_err(|e| ServiceError::Failed(format!("subagent {session_id} failed: {e}")))?;
        if self.cancel.is_cancelled() {
            return Err(ServiceError::Cancelled);
        }
        Ok(AgentOutcome {
            session_id,
            text: summary.text,
            stop_reason: summary.reason.as_str().to_string(),
            steps: summary.steps,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn todo_lists_are_checked() {
        let ok = json!({"items": [{"content": "a", "status": "pending"}, {"content": "b", "status": "completed", "id": "2"}]});
        assert_eq!(validate_todo(&ok).unwrap().as_array().unwrap().len(), 2);
        assert!(validate_todo(&json!([])).is_ok());
        for bad in [
            json!({"items": [{"content": "a", "status": "done"}]}),
            json!({"items": [{"content": "", "status": "pending"}]}),
            json!({"items": [{"status": "pending"}]}),
            json!({"items": [{"content": "a", "status": "pending", "extra": 1}]}),
            json!({"items": "x"}),
            json!(3),
        ] {
            assert!(validate_todo(&bad).is_err(), "{bad}");
        }
        let many: Vec<Value> =
            (0..=MAX_TODO_ITEMS).map(|i| json!({"content": i.to_string(), "status": "pending"})).collect();
        assert!(validate_todo(&json!({ "items": many })).is_err());
    }
}
