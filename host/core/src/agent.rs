//! The agent loop: turns, steps, the inbox and cancellation.
//!
//! A **step** is one model request plus the tool calls it asked for; a
//! **turn** is zero or more steps. Per turn the loop does:
//!
//! ```text
//! turn/start
//! loop:
//!   cancelled? → cancelled · step budget used? → max_steps
//!   claim inbox: at the first step one followup, at every step all steer and
//!     inject items (inbox/spliced{claimed} + user/message each)
//!   agent/pre-step (waterfall) — a Reject → blocked
//!   step/start
//!   system prompt = the base prompt and the registry's prompt sections
//!     joined by blank lines, through the system-prompt waterfall, then the
//!     agent's instructions (a subagent's); tools = the registry snapshot's specs
//!     (taken per step, so hot-swapped tools appear at the next step);
//!     messages = the incremental projection of the log
//!   agent/request (waterfall; may change `model` = adapter id, `max_tokens`)
//!   stream: assistant/chunk per delivered batch, then assistant/message
//!     (failures: RetryPolicy + agent/request-error, llm/retry, same step;
//!     nothing streamed is EMPTY_RESPONSE unless the finish reason is
//!     max_tokens or content_filter, which end the turn as reported)
//!   tool calls through the pipeline and scheduler
//!   step/end{usage}
//!   tool calls made? → next step · a steer arrived? → next step
//!   finish = max_tokens → max_tokens
//!   agent/turn-stopping (serial) — an objection is queued as a steer
//!     message (its reason is the text) and the turn goes on
//!   → completed
//! turn/end{reason} · flush (fsync)
//! ```
//!
//! **Inbox**: `followup` (next turn, wakes), `steer` (next step, wakes),
//! `inject` (next step, does not wake). Every change is logged as
//! `inbox/spliced` (added / claimed / discarded), so pending items survive a
//! restart: a resumed agent restores them from the log.
//!
//! **Cancellation** ([`Agent::cancel`]): discards the pending inbox (logged)
//! and cancels the running turn's token. Mid-stream, the text and reasoning
//! delivered so far (and any complete tool calls) are committed as
//! `assistant/message{interrupted: true}`; started tool calls drain with the
//! cancelled token; every call not dispatched gets `tool/call` +
//! `tool/result{ABORTED_BEFORE_DISPATCH}`; then `step/end`,
//! `turn/end{cancelled}`. Cancelling an idle agent does nothing.
//!
//! Hook payloads: `system-prompt` `{session_id, turn, step, prompt,
//! instructions}` (a replacement may be the object or a bare string, which
//! keeps the instructions); `agent/pre-step`
//! `{session_id, turn, step, message_count}`; `agent/request`
//! `{session_id, turn, step, model, max_tokens}`; `agent/request-error`
//! `{session_id, turn, step, attempt, error, retry, delay_ms}` (replace with
//! `retry: true|false` and optionally `delay_ms`; Reject = give up);
//! `agent/turn-stopping` `{session_id, turn, steps}`; `session/event` the
//! committed event (every type except `assistant/chunk`, dispatched by a
//! background task after commit).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use crate::approval::Approver;
use crate::bus::Bus;
use crate::compaction::TurnCompactions;
use crate::events::{
    AssistantChunk, AssistantMessage, Event, EventKind, InboxKind, InboxOp, InboxSpliced, LlmRetry, StepEnd, StepStart,
    StopReason, TurnEnd, TurnStart, UserMessage,
};
use crate::pipeline::{PipelineConfig, StepRef, ToolPipeline};
use crate::plugin::{
    AdapterScope, FinishReason, HookPoint, LlmAdapter, LlmError, LlmErrorCode, LlmEvent, LlmRequest, Message, ToolCall,
    Usage,
};
use crate::registry::{Registry, Snapshot};
use crate::retry::RetryPolicy;
use crate::services::SessionContext;

pub use crate::attach::AttachTool;
pub use crate::compaction::CompactionConfig;
use crate::store::{SessionLog, StoreError};
use crate::util;

/// Hard ceiling on retries of one step, whatever hooks say.
const MAX_RETRIES_CEILING: u32 = 100;

/// Agent settings.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Steps per turn before the turn ends with `max_steps` (at least 1).
    pub max_steps: u32,
    /// LLM adapter (plugin id); `None` takes the first loaded.
    pub llm: Option<String>,
    /// Output cap passed to the adapter.
    pub max_tokens: Option<u32>,
    /// Retries of failed model requests.
    pub retry: RetryPolicy,
    /// Tool pipeline and scheduler settings (pool size, deadlines, output caps).
    pub pipeline: PipelineConfig,
    /// Only these tools are offered and callable (a subagent's restricted
    /// set); `None`: every registered tool.
    pub tools: Option<BTreeSet<String>>,
    /// The profile's base system prompt (`agent.system_prompt`), first in
    /// every request's system prompt (empty: none).
    pub system_prompt: String,
    /// Extra system-prompt text (a subagent's instructions), appended last.
    pub instructions: Option<String>,
    /// Deepest subagent nesting allowed (a top-level agent is depth 0).
    pub max_depth: u32,
    /// History compaction.
    pub compaction: CompactionConfig,
    /// The tool `@path` attachments in user messages become calls of
    /// ([`crate::attach`]); `None`: attachments are left as text.
    pub attach: Option<AttachTool>,
    /// Which tools are offered directly and which only through a program's
    /// catalogue ([`crate::catalog::ListingConfig`]).
    pub listing: crate::catalog::ListingConfig,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            max_steps: 50,
            llm: None,
            max_tokens: None,
            retry: RetryPolicy::default(),
            pipeline: PipelineConfig::default(),
            tools: None,
            system_prompt: String::new(),
            instructions: None,
            max_depth: 3,
            compaction: CompactionConfig::default(),
            attach: None,
            listing: crate::catalog::ListingConfig::default(),
        }
    }
}

/// What a turn did.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnSummary {
    /// Turn number.
    pub turn: u64,
    /// Why it ended.
    pub reason: StopReason,
    /// Steps started.
    pub steps: u32,
    /// Token usage of the turn.
    pub usage: Usage,
    /// Text of the last assistant message of the turn.
    pub text: String,
}

/// An agent failure: only the store can fail the loop itself.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The session log could not be written.
    #[error(transparent)]
    SessionStore(#[from] StoreError),
    /// [`Agent::prompt`] found its input consumed by another runner.
    #[error("no turn ran: another task is driving this agent")]
    NothingRan,
}

#[derive(Debug, Clone)]
struct InboxItem {
    id: String,
    kind: InboxKind,
    text: String,
    /// Images of a followup ([`Agent::followup_with_images`]); logged with
    /// the `user/message` the item becomes (not in `inbox/spliced`).
    images: Vec<crate::images::Image>,
}

/// Runs turns for one session.
#[derive(Clone)]
pub struct Agent {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent").field("session", &self.inner.log.id()).finish_non_exhaustive()
    }
}

struct Inner {
    log: SessionLog,
    registry: Arc<Registry>,
    bus: Arc<Bus>,
    pipeline: ToolPipeline,
    config: AgentConfig,
    inbox: Mutex<Vec<InboxItem>>,
    wake: Notify,
    run_lock: tokio::sync::Mutex<()>,
    current: Mutex<Option<CancellationToken>>,
    forwarder: AtomicBool,
    services: Arc<SessionContext>,
    compactions: Mutex<TurnCompactions>,
    /// Whether the durable programs a crash left open were re-run
    /// ([`Agent::recover`]).
    recovered: AtomicBool,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Cells belong to the session: they end with it.
        self.services.cells.cancel_all();
    }
}

/// A turn's copy of the request messages, kept from one step to the next
/// with the mark that lets the next step copy only what is new.
#[derive(Default)]
struct RequestHistory {
    messages: Vec<Message>,
    mark: crate::projection::HistoryMark,
}

/// What one step produced.
struct StepOutcome {
    usage: Option<Usage>,
    text: Option<String>,
    tool_calls: usize,
    finish: Option<FinishReason>,
    stop: Option<StopReason>,
}

#[derive(Default)]
struct Acc {
    content: String,
    reasoning: String,
    tool_calls: Vec<ToolCall>,
    usage: Option<Usage>,
    finish: Option<FinishReason>,
}

enum Streamed {
    /// The completion, and the streamed text not logged yet (logged with
    /// the message, in one append: the same events, one write or
    /// transaction fewer per step).
    Done(Acc, Option<Box<EventKind>>),
    Cancelled(Acc),
    Failed(LlmError),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Agent {
    /// An agent over `log` with a fresh event bus. Pending inbox items in the
    /// log (from before a restart) are restored.
    pub fn new(log: SessionLog, registry: Arc<Registry>, approver: Arc<dyn Approver>, config: AgentConfig) -> Self {
        Self::with_bus(log, registry, Arc::new(Bus::new()), approver, config)
    }

    /// Like [`new`](Self::new), sharing an existing bus (and its native listeners).
    pub fn with_bus(
        log: SessionLog,
        registry: Arc<Registry>,
        bus: Arc<Bus>,
        approver: Arc<dyn Approver>,
        mut config: AgentConfig,
    ) -> Self {
        config.max_steps = config.max_steps.max(1);
        if config.pipeline.workspace.is_none() {
            config.pipeline.workspace = log.header().and_then(|h| h.workspace);
        }
        let inbox = log
            .pending_inbox()
            .into_iter()
            .map(|p| InboxItem { id: p.id, kind: p.kind, text: p.text, images: Vec::new() })
            .collect();
        let services = Arc::new(SessionContext {
            log: log.clone(),
            registry: registry.clone(),
            bus: bus.clone(),
            approver: approver.clone(),
            config: config.clone(),
            event_bytes: Default::default(),
            grants: Default::default(),
            cells: Arc::new(crate::cells::Cells::new(log.clone())),
        });
        let mut pipeline = ToolPipeline::new(log.clone(), bus.clone(), approver, config.pipeline.clone())
            .with_services(services.clone());
        // Calls made by programs share the session's approvals.
        pipeline.grants = services.grants.clone();
        Self {
            inner: Arc::new(Inner {
                log,
                registry,
                bus,
                pipeline,
                config,
                inbox: Mutex::new(inbox),
                wake: Notify::new(),
                run_lock: tokio::sync::Mutex::new(()),
                current: Mutex::new(None),
                forwarder: AtomicBool::new(false),
                services,
                compactions: Mutex::new(TurnCompactions::default()),
                recovered: AtomicBool::new(false),
            }),
        }
    }

    /// The session log.
    pub fn log(&self) -> &SessionLog {
        &self.inner.log
    }

    /// The session id.
    pub fn session_id(&self) -> &str {
        self.inner.log.id()
    }

    /// The session's tool pipeline, with the session services (the
    /// `session`, `model`, `questions` imports): for a surface that runs
    /// calls itself, outside the loop (`wharf mcp serve`).
    pub fn pipeline(&self) -> &ToolPipeline {
        &self.inner.pipeline
    }

    /// The event bus (to register native listeners).
    pub fn bus(&self) -> &Arc<Bus> {
        &self.inner.bus
    }

    /// The settings.
    pub fn config(&self) -> &AgentConfig {
        &self.inner.config
    }

    /// Every event committed from now on (see [`SessionLog::subscribe`]).
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<Event> {
        self.inner.log.subscribe()
    }

    /// Token usage of the whole session.
    pub fn usage(&self) -> Usage {
        self.inner.log.usage()
    }

    /// The session's cells: tool calls still running after their yield
    /// window ([`crate::cells`]).
    pub fn cells(&self) -> &Arc<crate::cells::Cells> {
        &self.inner.services.cells
    }

    /// Ends the session's cells: cancels each and waits (at most the
    /// pipeline's cancel grace) until each has logged its end. A host
    /// closing a session calls it; dropping the agent only cancels them.
    pub async fn close_cells(&self) {
        self.inner.services.cells.close(self.inner.config.pipeline.cancel_grace).await;
    }

    /// Whether a turn is running.
    pub fn is_running(&self) -> bool {
        lock(&self.inner.current).is_some()
    }

    /// Queues a message for the next turn and wakes the agent. Returns its id.
    pub fn followup(&self, text: impl Into<String>) -> Result<String, StoreError> {
        self.enqueue(InboxKind::Followup, text.into())
    }

    /// Queues a message for the next step and wakes the agent.
    pub fn steer(&self, text: impl Into<String>) -> Result<String, StoreError> {
        self.enqueue(InboxKind::Steer, text.into())
    }

    /// Queues a message for the next step without waking the agent.
    pub fn inject(&self, text: impl Into<String>) -> Result<String, StoreError> {
        self.enqueue(InboxKind::Inject, text.into())
    }

    /// Queues `text` with `images` after it as a followup, like
    /// [`Agent::followup`]. The images must already be checked
    /// ([`crate::images::check_prompt_images`]); they are logged inline in
    /// the `user/message` when a turn takes the item. An image queued when
    /// the process dies before a turn took it is lost (the text is not).
    pub fn followup_with_images(
        &self,
        text: impl Into<String>,
        images: Vec<crate::images::Image>,
    ) -> Result<String, StoreError> {
        self.enqueue_with(InboxKind::Followup, text.into(), images)
    }

    fn enqueue(&self, kind: InboxKind, text: String) -> Result<String, StoreError> {
        self.enqueue_with(kind, text, Vec::new())
    }

    fn enqueue_with(
        &self,
        kind: InboxKind,
        text: String,
        images: Vec<crate::images::Image>,
    ) -> Result<String, StoreError> {
        let mut inbox = lock(&self.inner.inbox);
        let id = util::short_id();
        self.inner.log.append(EventKind::InboxSpliced(InboxSpliced {
            op: InboxOp::Added,
            id: id.clone(),
            kind,
            text: text.clone(),
        }))?;
        inbox.push(InboxItem { id: id.clone(), kind, text, images });
        drop(inbox);
        if kind != InboxKind::Inject {
            self.inner.wake.notify_one();
        }
        Ok(id)
    }

    /// Cancels the running turn and discards the pending inbox (logged).
    /// Returns whether a turn was running; cancelling an idle agent is a no-op.
    pub fn cancel(&self) -> bool {
        let current = lock(&self.inner.current);
        let Some(token) = current.as_ref() else {
            return false;
        };
        let mut inbox = lock(&self.inner.inbox);
        for item in inbox.drain(..) {
            let r = self.inner.log.append(EventKind::InboxSpliced(InboxSpliced {
                op: InboxOp::Discarded,
                id: item.id,
                kind: item.kind,
                text: String::new(),
            }));
            if let Err(e) = r {
                tracing::warn!(error = %e, "could not log a discarded inbox item");
            }
        }
        token.cancel();
        true
    }

    /// Queues `text` as a followup and runs until idle; returns the last turn.
    pub async fn prompt(&self, text: impl Into<String>) -> Result<TurnSummary, AgentError> {
        self.followup(text)?;
        self.run_until_idle().await?.pop().ok_or(AgentError::NothingRan)
    }

    /// Runs turns while the inbox has waking input.
    pub async fn run_until_idle(&self) -> Result<Vec<TurnSummary>, AgentError> {
        let mut out = Vec::new();
        while let Some(s) = self.run_turn().await? {
            out.push(s);
        }
        Ok(out)
    }

    /// Runs turns as input arrives until `shutdown` fires.
    pub async fn serve(&self, shutdown: CancellationToken) -> Result<(), AgentError> {
        loop {
            self.run_until_idle().await?;
            tokio::select! {
                _ = self.inner.wake.notified() => {}
                _ = shutdown.cancelled() => return Ok(()),
            }
        }
    }

    /// Runs one turn if the inbox has waking input (a followup or a steer);
    /// `Ok(None)` otherwise. Turns never overlap.
    pub async fn run_turn(&self) -> Result<Option<TurnSummary>, AgentError> {
        self.start_forwarder();
        let inner = &self.inner;
        let _running = inner.run_lock.lock().await;
        if !inner.recovered.swap(true, Ordering::SeqCst) {
            self.recover_locked().await?;
        }
        let token = CancellationToken::new();
        {
            let mut current = lock(&inner.current);
            let inbox = lock(&inner.inbox);
            if !inbox.iter().any(|i| i.kind != InboxKind::Inject) {
                return Ok(None);
            }
            *current = Some(token.clone());
        }
        let result = self.turn(&token).await;
        *lock(&inner.current) = None;
        let summary = match result {
            Ok(s) => s,
            Err(e) => {
                // Close the turn if the store still takes writes.
                let reason = StopReason::Error { code: "STORE".into(), message: e.to_string() };
                if let Err(e2) = inner.log.close_open_turn(reason) {
                    tracing::warn!(error = %e2, "could not close the turn after a store failure");
                }
                return Err(e);
            }
        };
        inner.log.flush().await?;
        Ok(Some(summary))
    }

    /// Re-runs the durable programs a crash left open in this session's
    /// log ([`crate::durable`]: their inner calls answered from the log),
    /// logs their results and closes the turn they were in
    /// (`turn/end{interrupted}`). The first turn does it by itself; a
    /// no-op when nothing is open. Returns how many programs were re-run.
    pub async fn recover(&self) -> Result<usize, AgentError> {
        let _running = self.inner.run_lock.lock().await;
        self.inner.recovered.store(true, Ordering::SeqCst);
        self.recover_locked().await
    }

    async fn recover_locked(&self) -> Result<usize, AgentError> {
        let inner = &self.inner;
        let snap = self.snapshot();
        let mut n = self.recover_cells(&snap)?;
        if inner.log.open_turn().is_none() {
            return Ok(n);
        }
        if let Some((turn, step, calls)) = inner.log.open_calls() {
            let durable: Vec<ToolCall> =
                calls.into_iter().filter(|c| crate::durable::is_durable_call(&snap, c)).collect();
            if !durable.is_empty() {
                let events = inner.log.read_all()?;
                for call in &durable {
                    self.replay_call(&snap, StepRef { turn, step }, call, &events).await?;
                    n += 1;
                }
            }
        }
        inner.log.close_open_turn(StopReason::Interrupted)?;
        inner.log.flush().await?;
        Ok(n)
    }

    /// Starts again, as cells of this session, the durable calls that had
    /// yielded ([`crate::cells`]) when a crash cut them: each is re-run by
    /// replay like an open program, on a task of its own, so a later
    /// `resume` or `cancel` of its id finds it; its end is logged as any
    /// cell's. Returns how many were started.
    fn recover_cells(&self, snap: &Arc<Snapshot>) -> Result<usize, AgentError> {
        let inner = &self.inner;
        let cut: Vec<(u64, u32, ToolCall)> = inner
            .log
            .open_cells()
            .into_iter()
            .filter(|(_, _, c)| {
                crate::durable::is_durable_call(snap, c)
                    && snap.tools.get(&c.name).is_some_and(|t| t.yield_window().is_some())
            })
            .collect();
        if cut.is_empty() {
            return Ok(0);
        }
        let events = inner.log.read_all()?;
        let mut n = 0;
        for (turn, step, call) in cut {
            let Some(tool) = snap.tools.get(&call.name).cloned() else { continue };
            let shown = inner.log.cell_shown(&call.id);
            let cell = match inner.services.cells.restart(&call.id, &call.name, shown) {
                Ok(c) => c,
                Err(msg) => {
                    tracing::warn!(session = %inner.log.id(), cell = %call.id, "cannot re-run the cell: {msg}");
                    continue;
                }
            };
            let token = cell.cancel.clone();
            let (run, replay, inflight) =
                self.replay_run(&tool, StepRef { turn, step }, &call, &events, token.clone(), Some(&cell))?;
            let cells = inner.services.cells.clone();
            let grace = inner.config.pipeline.cancel_grace;
            tokio::spawn(async move {
                let mut finished = run.await;
                token.cancel();
                let _ = tokio::time::timeout(grace, inflight.write()).await;
                if let Some(msg) = replay.diverged() {
                    finished.outcome =
                        crate::plugin::ToolOutcome::error(crate::plugin::ToolErrorCode::ReplayDiverged, msg);
                }
                cells.finish(&cell, finished.outcome);
            });
            n += 1;
        }
        Ok(n)
    }

    /// Re-runs durable call `call` with its logged inner calls answered
    /// from `events`, and logs its result.
    async fn replay_call(
        &self,
        snap: &Arc<Snapshot>,
        at: StepRef,
        call: &ToolCall,
        events: &[Event],
    ) -> Result<(), AgentError> {
        let inner = &self.inner;
        let Some(tool) = snap.tools.get(&call.name).cloned() else { return Ok(()) };
        // The call's own token: no turn is running; its deadline bounds it.
        let token = CancellationToken::new();
        let (run, replay, inflight) = self.replay_run(&tool, at, call, events, token.clone(), None)?;
        let grace = inner.config.pipeline.cancel_grace;
        let mut finished = run.await;
        token.cancel();
        let _ = tokio::time::timeout(grace, inflight.write()).await;
        if let Some(msg) = replay.diverged() {
            finished.outcome = crate::plugin::ToolOutcome::error(crate::plugin::ToolErrorCode::ReplayDiverged, msg);
        }
        inner.pipeline.commit(snap, at, call, finished).await?;
        Ok(())
    }

    /// Logs `tool/replay` for durable call `call` and prepares its re-run
    /// (its inner calls answered from `events`, its clock and seed the
    /// logged call's): the call's future, its replay and its in-flight
    /// lock. A cell's re-run reports its output to `cell`.
    #[allow(clippy::type_complexity)]
    fn replay_run(
        &self,
        tool: &Arc<dyn crate::plugin::Tool>,
        at: StepRef,
        call: &ToolCall,
        events: &[Event],
        token: CancellationToken,
        cell: Option<&Arc<crate::cells::Cell>>,
    ) -> Result<
        (
            impl std::future::Future<Output = crate::pipeline::Finished> + Send + 'static,
            Arc<crate::durable::Replay>,
            Arc<tokio::sync::RwLock<()>>,
        ),
        AgentError,
    > {
        let inner = &self.inner;
        let replay = Arc::new(crate::durable::Replay::from_events(events, &call.id));
        let logged_at = events
            .iter()
            .find_map(|e| match &e.kind {
                EventKind::ToolCall(c) if c.id == call.id && c.parent.is_none() => Some(e.time.clone()),
                _ => None,
            })
            .unwrap_or_default();
        let mut data = json!({"call": call.id, "tool": call.name, "logged": replay.len()});
        if cell.is_some() {
            data["cell"] = Value::Bool(true);
        }
        inner.log.append_ignorable(crate::durable::REPLAY_EVENT, data)?;
        tracing::info!(session = %inner.log.id(), call = %call.id, logged = replay.len(), "re-running a durable call");
        let mut services = inner.services.for_tool_call(&call.id, tool.plugin().clone(), token.clone(), at, false);
        services.determinism = Some(crate::durable::determinism(inner.log.id(), &call.id, &logged_at));
        services.replay = Some(replay.clone());
        services.cell_progress = cell.map(|c| c.progress.clone());
        let services = Arc::new(services);
        let inflight = services.inflight();
        let invocation = crate::plugin::ToolInvocation {
            call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: serde_json::from_str(&call.arguments).unwrap_or(Value::Null),
            session_id: inner.log.id().to_string(),
            workspace: inner.config.pipeline.workspace.clone(),
            services: Some(services as Arc<dyn crate::plugin::SessionServices>),
        };
        let grace = inner.config.pipeline.cancel_grace;
        let timeout = inner.pipeline.timeout_for(&call.name);
        let run = crate::pipeline::execute(tool.clone(), invocation, token, timeout, grace);
        Ok((run, replay, inflight))
    }

    fn start_forwarder(&self) {
        if self.inner.forwarder.swap(true, Ordering::SeqCst) {
            return;
        }
        // Only the events a `session/event` hook listens for are sent: with
        // no such hook (the usual case) this task is never woken.
        // Weak: the log holds the filter, and must not keep the registry
        // (and what it holds) alive.
        let (registry, bus) = (self.inner.registry.clone(), self.inner.bus.clone());
        let (r, b) = (Arc::downgrade(&registry), Arc::downgrade(&bus));
        let mut rx = self.inner.log.subscribe_filtered(Box::new(move |ev| {
            !matches!(ev.kind, EventKind::AssistantChunk(_))
                && r.upgrade()
                    .zip(b.upgrade())
                    .is_some_and(|(r, b)| b.has_listeners(&r.snapshot(), HookPoint::SessionEvent))
        }));
        tokio::spawn(async move {
            while let Some(ev) = rx.recv().await {
                let snap = registry.snapshot();
                if bus.has_listeners(&snap, HookPoint::SessionEvent)
                    && let Ok(v) = serde_json::to_value(&ev)
                {
                    bus.emit(&snap, HookPoint::SessionEvent, &v).await;
                }
            }
        });
    }

    async fn turn(&self, token: &CancellationToken) -> Result<TurnSummary, AgentError> {
        let inner = &self.inner;
        let turn = inner.log.last_turn() + 1;
        *lock(&inner.compactions) = TurnCompactions::default();
        // `turn/start` is written with the input step 1 claims: one append
        // (one database round trip) instead of two, nothing between them.
        let mut start = Some(EventKind::TurnStart(TurnStart { turn }));
        let mut summary =
            TurnSummary { turn, reason: StopReason::Completed, steps: 0, usage: Usage::default(), text: String::new() };
        let mut step: u32 = 0;
        // What the adapter keeps between this turn's requests; dropped
        // with the turn.
        let scope = Arc::new(AdapterScope::default());
        // Attachment steps (`@path`) do not count against the step budget.
        let mut attach_steps: u32 = 0;
        // The last step's request messages: the next step's are written
        // over them (only the new ones are copied).
        let mut history = RequestHistory::default();
        let reason = loop {
            if token.is_cancelled() {
                break StopReason::Cancelled;
            }
            if step >= inner.config.max_steps + attach_steps {
                break StopReason::MaxSteps;
            }
            step += 1;
            let claimed = self.claim(step == 1, start.take()).await?;
            let snap = self.snapshot();
            if self.attach(&snap, StepRef { turn, step }, &claimed, token).await? {
                attach_steps += 1;
                step += 1;
                if token.is_cancelled() {
                    break StopReason::Cancelled;
                }
            }
            self.auto_compact(&snap, turn, token).await?;
            if let Some(reason) = self.pre_step(&snap, turn, step, &claimed).await {
                break StopReason::Blocked { message: reason };
            }
            inner.log.append_async(EventKind::StepStart(StepStart { turn, step })).await?;
            summary.steps = step;
            let out = self.step(&snap, turn, step, &scope, &mut history, token).await?;
            inner.log.append_async(EventKind::StepEnd(StepEnd { turn, step, usage: out.usage })).await?;
            if let Some(u) = &out.usage {
                summary.usage.add(u);
            }
            if let Some(t) = out.text {
                summary.text = t;
            }
            if let Some(stop) = out.stop {
                break stop;
            }
            if token.is_cancelled() {
                break StopReason::Cancelled;
            }
            if out.tool_calls > 0 || self.steer_pending() {
                continue;
            }
            if out.finish == Some(FinishReason::MaxTokens) {
                break StopReason::MaxTokens;
            }
            if let Some(objection) = self.turn_stopping(&snap, turn, step).await {
                self.steer(objection)?;
                continue;
            }
            break StopReason::Completed;
        };
        // A turn that ended before step 1 (cancelled, no steps allowed)
        // still starts before it ends.
        let end = start.into_iter().chain([EventKind::TurnEnd(TurnEnd { turn, reason: reason.clone() })]).collect();
        inner.log.append_batch_async(end).await?;
        summary.reason = reason;
        Ok(summary)
    }

    /// The context window compaction works against: the configured one, else
    /// the adapter's; `None` when unknown (then nothing is compacted).
    fn context_window(&self, snap: &Snapshot) -> Option<u32> {
        let cfg = &self.inner.config;
        cfg.compaction
            .context_window
            .or_else(|| snap.llm(cfg.llm.as_deref()).map(|a| a.model().context_window))
            .filter(|w| *w > 0)
    }

    /// Compacts before a step when the request would pass the threshold.
    /// Failures never fail the turn: they are logged and stop further
    /// attempts in this turn.
    async fn auto_compact(&self, snap: &Snapshot, turn: u64, token: &CancellationToken) -> Result<(), StoreError> {
        let cfg = &self.inner.config.compaction;
        if !cfg.enabled || snap.compactors.is_empty() {
            return Ok(());
        }
        let state = *lock(&self.inner.compactions);
        if state.failed || state.count >= cfg.max_per_turn {
            return Ok(());
        }
        let Some(window) = self.context_window(snap) else {
            return Ok(());
        };
        let used = self.inner.log.request_tokens(&snap.tool_specs());
        if (used as f64) <= cfg.threshold * f64::from(window) {
            return Ok(());
        }
        let keep = (cfg.keep_recent * f64::from(window)) as u64;
        tracing::info!(session = %self.session_id(), turn, used, window, "compacting the history");
        match crate::compaction::compact(&self.inner.services, snap, keep, window, token).await {
            Ok(_) => {
                let after = self.inner.log.request_tokens(&snap.tool_specs());
                let mut state = lock(&self.inner.compactions);
                state.count += 1;
                if (after as f64) > cfg.threshold * f64::from(window) {
                    // The recent part alone is too big: compacting again
                    // cannot help, so stop trying this turn.
                    tracing::warn!(after, window, "the history is still over the threshold after compaction");
                    state.failed = true;
                }
            }
            // Too little history to cut yet: try again at a later step.
            Err(crate::compaction::CompactError::NothingToCompact) => {}
            Err(crate::compaction::CompactError::SessionStore(e)) => return Err(e),
            Err(e) => {
                lock(&self.inner.compactions).failed = true;
                if !token.is_cancelled() {
                    crate::compaction::record_failure(&self.inner.services, &e)?;
                }
            }
        }
        Ok(())
    }

    /// Compacts the history now (`/compact`), keeping only the latest
    /// exchange verbatim. Waits for a running turn to finish first.
    pub async fn compact(&self) -> Result<crate::events::CompactionSummary, crate::compaction::CompactError> {
        let _running = self.inner.run_lock.lock().await;
        let snap = self.snapshot();
        let window = self.context_window(&snap).unwrap_or(65_536);
        crate::compaction::compact(&self.inner.services, &snap, 0, window, &CancellationToken::new()).await
    }

    fn steer_pending(&self) -> bool {
        lock(&self.inner.inbox).iter().any(|i| i.kind == InboxKind::Steer)
    }

    /// `@path` attachments of the claimed messages ([`crate::attach`]): a
    /// step of calls of the configured [`AttachTool`] through the pipeline
    /// before the model request. Returns whether that step was taken (as
    /// step `at.step`).
    async fn attach(
        &self,
        snap: &Arc<Snapshot>,
        at: StepRef,
        claimed: &[String],
        token: &CancellationToken,
    ) -> Result<bool, AgentError> {
        let inner = &self.inner;
        let Some(tool) = &inner.config.attach else {
            return Ok(false);
        };
        let ws = inner.config.pipeline.workspace.as_deref().map(std::path::Path::new);
        let mut paths: Vec<String> = Vec::new();
        for text in claimed {
            for p in crate::attach::find(text, ws) {
                if !paths.contains(&p) && paths.len() < crate::attach::MAX_ATTACHMENTS {
                    paths.push(p);
                }
            }
        }
        if paths.is_empty() {
            return Ok(false);
        }
        let calls = crate::attach::calls(tool, &paths, at.turn);
        inner.log.append(EventKind::StepStart(StepStart { turn: at.turn, step: at.step }))?;
        let acc = Acc { tool_calls: calls.clone(), ..Acc::default() };
        self.commit_message(at, &acc, false).await?;
        inner.pipeline.run(snap, at, &calls, token).await?;
        inner.log.append(EventKind::StepEnd(StepEnd { turn: at.turn, step: at.step, usage: None }))?;
        Ok(true)
    }

    /// Moves inbox items into the conversation, logged in one append after
    /// `first` (the turn's start, on its first step); returns their texts.
    /// Items whose append fails go back to the front of the inbox.
    async fn claim(&self, first_step: bool, first: Option<EventKind>) -> Result<Vec<String>, StoreError> {
        let taken: Vec<InboxItem> = {
            let mut inbox = lock(&self.inner.inbox);
            let mut followup_taken = !first_step;
            let mut taken = Vec::new();
            let mut i = 0;
            while i < inbox.len() {
                let take = match inbox[i].kind {
                    InboxKind::Followup if !followup_taken => {
                        followup_taken = true;
                        true
                    }
                    InboxKind::Followup => false,
                    InboxKind::Steer | InboxKind::Inject => true,
                };
                if take {
                    taken.push(inbox.remove(i));
                } else {
                    i += 1;
                }
            }
            taken
        };
        let mut events: Vec<EventKind> = first.into_iter().collect();
        for item in &taken {
            // Each claim with the message it becomes.
            events.push(EventKind::InboxSpliced(InboxSpliced {
                op: InboxOp::Claimed,
                id: item.id.clone(),
                kind: item.kind,
                text: String::new(),
            }));
            events.push(EventKind::UserMessage(UserMessage {
                content: item.text.clone(),
                inbox_id: Some(item.id.clone()),
                images: item.images.clone(),
            }));
        }
        if let Err(e) = self.inner.log.append_batch_async(events).await {
            let mut inbox = lock(&self.inner.inbox);
            for (k, item) in taken.into_iter().enumerate() {
                inbox.insert(k, item);
            }
            return Err(e);
        }
        Ok(taken.into_iter().map(|item| item.text).collect())
    }

    fn payload(&self, turn: u64, step: u32) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        m.insert("session_id".into(), json!(self.inner.log.id()));
        m.insert("turn".into(), json!(turn));
        m.insert("step".into(), json!(step));
        m
    }

    async fn pre_step(&self, snap: &Snapshot, turn: u64, step: u32, input: &[String]) -> Option<String> {
        if !self.inner.bus.has_listeners(snap, HookPoint::AgentPreStep) {
            return None;
        }
        let mut p = self.payload(turn, step);
        p.insert("message_count".into(), json!(self.inner.log.message_count()));
        if !input.is_empty() {
            p.insert("input".into(), json!(input));
        }
        let w = self.inner.bus.waterfall(snap, HookPoint::AgentPreStep, Value::Object(p)).await;
        w.rejected.map(|r| format!("{}: {}", r.by.id, r.reason))
    }

    async fn turn_stopping(&self, snap: &Snapshot, turn: u64, steps: u32) -> Option<String> {
        if !self.inner.bus.has_listeners(snap, HookPoint::AgentTurnStopping) {
            return None;
        }
        let mut p = self.payload(turn, steps);
        p.remove("step");
        p.insert("steps".into(), json!(steps));
        self.inner.bus.serial(snap, HookPoint::AgentTurnStopping, &Value::Object(p)).await.map(|r| r.reason)
    }

    /// The registry view this agent works with: everything, or only its
    /// allowed tools (a subagent).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        let snap = self.inner.registry.snapshot();
        match &self.inner.config.tools {
            Some(allowed) => Arc::new(snap.restricted(allowed)),
            None => snap,
        }
    }

    /// The system prompt: the base prompt, then the registry's sections,
    /// through the `system-prompt` waterfall (where skills append theirs),
    /// then the agent's instructions (a subagent's), last. Listeners see the
    /// instructions as `instructions` in the payload and may rewrite them.
    pub async fn system_prompt(&self, snap: &Snapshot, turn: u64, step: u32) -> String {
        fn join<'a>(parts: impl IntoIterator<Item = &'a str>) -> String {
            parts.into_iter().map(str::trim_end).filter(|t| !t.trim().is_empty()).collect::<Vec<_>>().join("\n\n")
        }
        let head = join(
            std::iter::once(self.inner.config.system_prompt.as_str())
                .chain(snap.prompt_sections.iter().map(|s| s.text.as_str())),
        );
        let instructions = self.inner.config.instructions.clone().unwrap_or_default();
        if !self.inner.bus.has_listeners(snap, HookPoint::SystemPrompt) {
            return join([head.as_str(), instructions.as_str()]);
        }
        let mut p = self.payload(turn, step);
        p.insert("prompt".into(), json!(head));
        p.insert("instructions".into(), json!(instructions));
        let w = self.inner.bus.waterfall(snap, HookPoint::SystemPrompt, Value::Object(p)).await;
        let (prompt, instructions) = match &w.payload {
            Value::String(s) => (s.clone(), instructions),
            v => (
                v.get("prompt").and_then(Value::as_str).map_or(head, str::to_string),
                v.get("instructions").and_then(Value::as_str).map_or(instructions, str::to_string),
            ),
        };
        join([prompt.as_str(), instructions.as_str()])
    }

    async fn step(
        &self,
        snap: &Arc<Snapshot>,
        turn: u64,
        step: u32,
        scope: &Arc<AdapterScope>,
        history: &mut RequestHistory,
        token: &CancellationToken,
    ) -> Result<StepOutcome, AgentError> {
        let inner = &self.inner;
        let stop = |reason| StepOutcome { usage: None, text: None, tool_calls: 0, finish: None, stop: Some(reason) };
        let system = self.system_prompt(snap, turn, step).await;
        let mut model = inner.config.llm.clone();
        let mut max_tokens = inner.config.max_tokens;
        if inner.bus.has_listeners(snap, HookPoint::AgentRequest) {
            let mut p = self.payload(turn, step);
            p.insert("model".into(), json!(model));
            p.insert("max_tokens".into(), json!(max_tokens));
            let w = inner.bus.waterfall(snap, HookPoint::AgentRequest, Value::Object(p)).await;
            if let Some(r) = w.rejected {
                return Ok(stop(StopReason::Blocked { message: format!("{}: {}", r.by.id, r.reason) }));
            }
            model = w.payload.get("model").and_then(Value::as_str).map(str::to_string).or(model);
            max_tokens = w.payload.get("max_tokens").and_then(Value::as_u64).map(|v| v as u32).or(max_tokens);
        }
        let Some(adapter) = snap.llm(model.as_deref()) else {
            let which = model.map(|m| format!("`{m}` ")).unwrap_or_default();
            let message = format!("no LLM adapter {which}is loaded");
            return Ok(stop(StopReason::Error { code: "NO_ADAPTER".into(), message }));
        };
        let tools = snap.model_specs(&inner.config.listing);
        let images = inner.log.message_images();
        if !images.is_empty() && adapter.image_support().is_none_or(|s| s.mime_types.is_empty()) {
            let message = format!(
                "the model adapter `{}` takes text only, and the conversation has {} image(s); \
                 use an adapter that accepts images (llm-openai, llm-anthropic)",
                adapter.plugin().id,
                images.len()
            );
            return Ok(stop(StopReason::Error { code: "IMAGES_UNSUPPORTED".into(), message }));
        }
        inner.log.messages_into(&mut history.messages, &mut history.mark);
        let request = LlmRequest {
            system,
            messages: std::mem::take(&mut history.messages),
            tools,
            max_tokens,
            images,
            history: history.mark,
        };
        let at = StepRef { turn, step };
        let mut attempt: u32 = 0;
        let (acc, tail) = loop {
            match self.stream(adapter.as_ref(), &request, scope, at, token).await? {
                Streamed::Done(acc, tail) => break (acc, tail),
                Streamed::Cancelled(acc) => {
                    self.commit_message(at, &acc, true).await?;
                    inner.pipeline.run(snap, at, &acc.tool_calls, token).await?;
                    return Ok(StepOutcome {
                        usage: acc.usage,
                        text: Some(acc.content),
                        tool_calls: acc.tool_calls.len(),
                        finish: None,
                        stop: Some(StopReason::Cancelled),
                    });
                }
                Streamed::Failed(err) => {
                    attempt += 1;
                    let decision = self.retry_delay(snap, at, &err, attempt).await;
                    tracing::warn!(
                        session = %inner.log.id(), turn, step, attempt, code = err.code.as_str(),
                        retry_in_ms = decision.map(|d| d.as_millis() as u64), "model request failed: {}", err.message
                    );
                    match decision {
                        Some(delay) => {
                            inner.log.append(EventKind::LlmRetry(LlmRetry {
                                turn,
                                step,
                                attempt,
                                code: err.code,
                                delay_ms: delay.as_millis() as u64,
                                message: err.message.clone(),
                            }))?;
                            tokio::select! {
                                _ = tokio::time::sleep(delay) => {}
                                _ = token.cancelled() => {
                                    self.commit_message(at, &Acc::default(), true).await?;
                                    return Ok(stop(StopReason::Cancelled));
                                }
                            }
                        }
                        None => {
                            let too_long = inner.config.retry.retry_after_too_long(&err);
                            let mut message = err.message;
                            if let Some(asked) = too_long {
                                message = format!(
                                    "{message} (the server asked to retry after {}, longer than the {} this agent waits)",
                                    crate::retry::describe_wait(asked),
                                    crate::retry::describe_wait(inner.config.retry.max_retry_after)
                                );
                            }
                            return Ok(stop(StopReason::llm_error(err.code, message)));
                        }
                    }
                }
            }
        };
        // Kept for the next step (a step that ends otherwise leaves none).
        history.messages = request.messages;
        self.commit_message_after(at, &acc, false, tail.map(|c| *c)).await?;
        if !acc.tool_calls.is_empty() {
            inner.pipeline.run(snap, at, &acc.tool_calls, token).await?;
        }
        let stop = match acc.finish {
            Some(FinishReason::ContentFilter) => Some(StopReason::Error {
                code: "CONTENT_FILTER".into(),
                message: "the provider filtered the output".into(),
            }),
            _ => None,
        };
        Ok(StepOutcome {
            usage: acc.usage,
            text: Some(acc.content),
            tool_calls: acc.tool_calls.len(),
            finish: acc.finish,
            stop,
        })
    }

    async fn commit_message(&self, at: StepRef, acc: &Acc, interrupted: bool) -> Result<(), StoreError> {
        self.commit_message_after(at, acc, interrupted, None).await
    }

    /// Logs the message, after `chunk` (the stream's last text) when given.
    async fn commit_message_after(
        &self,
        at: StepRef,
        acc: &Acc,
        interrupted: bool,
        chunk: Option<EventKind>,
    ) -> Result<(), StoreError> {
        let message = EventKind::AssistantMessage(AssistantMessage {
            turn: at.turn,
            step: at.step,
            content: acc.content.clone(),
            reasoning: Some(acc.reasoning.clone()).filter(|r| !r.is_empty()),
            tool_calls: acc.tool_calls.clone(),
            usage: acc.usage,
            finish: if interrupted { None } else { acc.finish },
            interrupted,
        });
        self.inner.log.append_batch_async(chunk.into_iter().chain([message]).collect()).await?;
        Ok(())
    }

    /// The retry decision: the policy, then the `agent/request-error` waterfall.
    async fn retry_delay(
        &self,
        snap: &Snapshot,
        at: StepRef,
        err: &LlmError,
        attempt: u32,
    ) -> Option<std::time::Duration> {
        let policy = &self.inner.config.retry;
        let mut delay = policy.delay(err, attempt, util::random_unit());
        if self.inner.bus.has_listeners(snap, HookPoint::AgentRequestError) {
            let mut p = self.payload(at.turn, at.step);
            p.insert("attempt".into(), json!(attempt));
            p.insert("error".into(), serde_json::to_value(err).unwrap_or(Value::Null));
            p.insert("retry".into(), json!(delay.is_some()));
            p.insert("delay_ms".into(), json!(delay.map(|d| d.as_millis() as u64)));
            let w = self.inner.bus.waterfall(snap, HookPoint::AgentRequestError, Value::Object(p)).await;
            if w.rejected.is_some() {
                return None;
            }
            match w.payload.get("retry").and_then(Value::as_bool) {
                Some(false) => delay = None,
                Some(true) => {
                    let ms = w.payload.get("delay_ms").and_then(Value::as_u64);
                    let fallback = policy.delay(err, 1, 0.5).unwrap_or(policy.initial_delay);
                    delay = Some(ms.map(std::time::Duration::from_millis).unwrap_or(delay.unwrap_or(fallback)));
                }
                None => {}
            }
        }
        delay.filter(|_| attempt <= MAX_RETRIES_CEILING)
    }

    /// Logs the streamed text not yet logged, if any, as one chunk.
    async fn log_chunk(&self, pending: &mut PendingChunk, at: StepRef) -> Result<(), StoreError> {
        if let Some(chunk) = take_chunk(pending, at) {
            self.inner.log.append_async(chunk).await?;
        }
        Ok(())
    }

    /// One attempt at streaming a completion.
    async fn stream(
        &self,
        adapter: &dyn LlmAdapter,
        request: &LlmRequest,
        scope: &Arc<AdapterScope>,
        at: StepRef,
        token: &CancellationToken,
    ) -> Result<Streamed, StoreError> {
        let mut acc = Acc::default();
        let started = tokio::select! {
            biased;
            _ = token.cancelled() => return Ok(Streamed::Cancelled(acc)),
            r = adapter.start_in(request, scope) => r,
        };
        let stream = match started {
            Ok(s) => s,
            Err(e) => return Ok(Streamed::Failed(e)),
        };
        // Streamed text waits up to CHUNK_WINDOW to be logged with what
        // follows it: one `assistant/chunk` (one append, one database
        // transaction on a fleet store) per burst of deltas instead of one
        // per delivered batch; a reader sees it at most that much later.
        let mut pending = PendingChunk::default();
        // The read in progress owns the stream (and hands it back), so a
        // flush of the pending text does not abandon a read.
        let mut idle = Some(stream);
        let mut reading: Option<NextBatch> = None;
        loop {
            if let Some(mut s) = idle.take() {
                reading = Some(Box::pin(async move {
                    let r = s.next().await;
                    (s, r)
                }));
            }
            let Some(read) = reading.as_mut() else { break };
            let flush_at = pending.since.map(|t| t + CHUNK_WINDOW);
            let batch = tokio::select! {
                biased;
                _ = token.cancelled() => {
                    self.log_chunk(&mut pending, at).await?;
                    return Ok(Streamed::Cancelled(acc));
                }
                _ = tokio::time::sleep_until(flush_at.unwrap_or_else(tokio::time::Instant::now)), if flush_at.is_some() => {
                    self.log_chunk(&mut pending, at).await?;
                    continue;
                }
                (s, n) = read => {
                    idle = Some(s);
                    reading = None;
                    n
                }
            };
            let batch = match batch {
                Ok(Some(b)) => b,
                Ok(None) => break,
                Err(e) => {
                    self.log_chunk(&mut pending, at).await?;
                    return Ok(Streamed::Failed(e));
                }
            };
            // Deltas coalesced into the pending chunk.
            let (mut text, mut reasoning) = (String::new(), String::new());
            for ev in batch {
                match ev {
                    LlmEvent::Text(t) => text.push_str(&t),
                    LlmEvent::Reasoning(r) => reasoning.push_str(&r),
                    LlmEvent::ToolCall(mut c) => {
                        // Ids must be unique within a message (results are
                        // matched by id); a repeated or empty id from the
                        // adapter gets a suffix.
                        if c.id.is_empty() || acc.tool_calls.iter().any(|p| p.id == c.id) {
                            let base = if c.id.is_empty() { "call".to_string() } else { c.id.clone() };
                            let mut n = acc.tool_calls.len() + 1;
                            while acc.tool_calls.iter().any(|p| p.id == format!("{base}~{n}")) {
                                n += 1;
                            }
                            c.id = format!("{base}~{n}");
                        }
                        acc.tool_calls.push(c);
                    }
                    LlmEvent::Usage(u) => acc.usage = Some(u),
                    LlmEvent::Finish(f) => acc.finish = Some(f),
                }
            }
            if !text.is_empty() || !reasoning.is_empty() {
                acc.content.push_str(&text);
                acc.reasoning.push_str(&reasoning);
                pending.text.push_str(&text);
                pending.reasoning.push_str(&reasoning);
                pending.since.get_or_insert_with(tokio::time::Instant::now);
                if pending.text.len() + pending.reasoning.len() >= CHUNK_MAX_BYTES {
                    self.log_chunk(&mut pending, at).await?;
                }
            }
        }
        let tail = take_chunk(&mut pending, at);
        if acc.finish == Some(FinishReason::Retryable) {
            if let Some(chunk) = tail {
                self.inner.log.append_async(chunk).await?;
            }
            return Ok(Streamed::Failed(LlmError::new(LlmErrorCode::Server, "the provider asked to retry")));
        }
        // Nothing streamed is an empty response (retried) — unless the
        // adapter said why: the output cap (`max_tokens`) or the provider's
        // filter end the turn at once, as reported.
        let explained = matches!(acc.finish, Some(FinishReason::MaxTokens | FinishReason::ContentFilter));
        if !explained && acc.content.is_empty() && acc.reasoning.is_empty() && acc.tool_calls.is_empty() {
            if let Some(chunk) = tail {
                self.inner.log.append_async(chunk).await?;
            }
            return Ok(Streamed::Failed(LlmError::new(LlmErrorCode::EmptyResponse, "the model returned nothing")));
        }
        Ok(Streamed::Done(acc, tail.map(Box::new)))
    }
}

/// The streamed text not yet logged, if any, as one chunk to log.
fn take_chunk(pending: &mut PendingChunk, at: StepRef) -> Option<EventKind> {
    let PendingChunk { text, reasoning, since } = std::mem::take(pending);
    if since.is_none() || (text.is_empty() && reasoning.is_empty()) {
        return None;
    }
    Some(EventKind::AssistantChunk(AssistantChunk { turn: at.turn, step: at.step, text, reasoning }))
}

/// How long streamed text may wait to be logged together with the deltas
/// that follow it.
const CHUNK_WINDOW: std::time::Duration = std::time::Duration::from_millis(20);

/// Streamed text logged at once when this much is waiting.
const CHUNK_MAX_BYTES: usize = 16 * 1024;

/// A read of the model's stream that owns the stream until it ends.
type NextBatch = crate::plugin::BoxFuture<
    'static,
    (Box<dyn crate::plugin::LlmStream>, Result<Option<Vec<LlmEvent>>, crate::plugin::LlmError>),
>;

/// Streamed text not logged yet, and since when it waits.
#[derive(Default)]
struct PendingChunk {
    text: String,
    reasoning: String,
    since: Option<tokio::time::Instant>,
}

#[cfg(test)]
#[path = "agent_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "agent_props.rs"]
mod props;
