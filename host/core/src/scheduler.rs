//! Scheduling the tool calls of one step.
//!
//! Calls are taken in the model's order. For each: `tool/call` is logged and
//! the pre-checks run (sequentially, so approvals are asked in order); a call
//! that passes is dispatched:
//!
//! - `parallel` calls go into a rolling pool of at most
//!   [`PipelineConfig::tool_pool`](crate::pipeline::PipelineConfig) running
//!   calls (a new one starts as soon as one finishes);
//! - an `exclusive` call is a barrier: every earlier call finishes and is
//!   committed first, it runs alone, and later calls wait for it.
//!
//! Results are committed (post-execute hooks, finalize, `tool/result`) in the
//! model's order, at barriers and at the end of the step, whatever order the
//! calls finished in. So the log order depends only on the calls and their
//! modes, never on timing: `call₁ … callₖ, result₁ … resultₖ` for a run of
//! parallel calls, `callₓ, resultₓ` for an exclusive one.
//!
//! On cancellation: calls already running get the cancelled token and drain
//! (bounded by the grace period); every call not yet dispatched — including a
//! pre-checked call still waiting for a pool slot — gets
//! `tool/result{is_error, ABORTED_BEFORE_DISPATCH}` (after its `tool/call`,
//! which is logged then if it was not yet).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::{Id, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::cells::CellRequest;
use crate::events::ToolResultEvent;
use crate::pipeline::{Finished, Prepared, Ready, StepRef, ToolPipeline, execute};
use crate::plugin::{PluginRef, ToolCall, ToolErrorCode, ToolInvocation, ToolMode, ToolOutcome};
use crate::registry::Snapshot;
use crate::store::StoreError;

/// A dispatched call's future (run on this task or in the pool).
type CallFuture = Pin<Box<dyn Future<Output = Finished> + Send>>;

// One slot per call of a step: boxing `Finished` would only add an
// allocation per call.
#[allow(clippy::large_enum_variant)]
enum Slot {
    /// `tool/call` not logged yet.
    Unlogged,
    /// Logged and dispatched (or being pre-checked).
    Pending,
    /// Has an outcome waiting to be committed.
    Finished(Finished),
    /// `tool/result` logged.
    Committed,
}

struct Run<'a> {
    p: &'a ToolPipeline,
    snap: &'a Arc<Snapshot>,
    at: StepRef,
    calls: &'a [ToolCall],
    slots: Vec<Slot>,
    running: JoinSet<Finished>,
    ids: HashMap<Id, usize>,
    results: Vec<ToolResultEvent>,
    committed: usize,
}

pub(crate) async fn run_calls(
    p: &ToolPipeline,
    snap: &Arc<Snapshot>,
    at: StepRef,
    calls: &[ToolCall],
    cancel: &CancellationToken,
) -> Result<Vec<ToolResultEvent>, StoreError> {
    let mut run = Run {
        p,
        snap,
        at,
        calls,
        slots: calls.iter().map(|_| Slot::Unlogged).collect(),
        running: JoinSet::new(),
        ids: HashMap::new(),
        results: Vec::with_capacity(calls.len()),
        committed: 0,
    };
    let out = run.schedule(cancel).await;
    // Whatever happened (even a store error), never leave calls running.
    run.drain().await;
    out?;
    run.commit_up_to(calls.len()).await?;
    Ok(run.results)
}

impl Run<'_> {
    async fn schedule(&mut self, cancel: &CancellationToken) -> Result<(), StoreError> {
        let pool = self.p.config.tool_pool.max(1);
        for i in 0..self.calls.len() {
            if cancel.is_cancelled() {
                break;
            }
            let call = &self.calls[i];
            let exclusive = self.snap.tools.get(&call.name).is_some_and(|t| t.spec().mode == ToolMode::Exclusive);
            if exclusive {
                self.drain().await;
                self.commit_up_to(i).await?;
            }
            let logged_at = self.p.log_call(self.at, call).await?;
            self.slots[i] = Slot::Pending;
            let ready = match self.p.precheck(self.snap, self.at, call, cancel).await? {
                Prepared::Done(f) => {
                    self.slots[i] = Slot::Finished(f);
                    continue;
                }
                Prepared::Ready(r) => r,
            };
            if !exclusive {
                while self.running.len() >= pool {
                    self.join_one().await;
                }
            }
            if cancel.is_cancelled() {
                let plugin = Some(ready.tool.plugin().clone());
                self.slots[i] = Slot::Finished(ToolPipeline::aborted_before_dispatch(plugin));
                break;
            }
            // A tool the operator lets yield runs as a cell of the session
            // (crate::cells), unless a program made the call.
            let window = if self.p.parent.is_none() { ready.tool.yield_window() } else { None };
            // A durable tool's program sees a clock and random numbers a
            // replay can give it again (crate::durable).
            let det = (self.p.parent.is_none() && ready.tool.durable())
                .then(|| crate::durable::determinism(self.p.log.id(), &call.id, &logged_at));
            let fut: CallFuture = match (window, self.p.services.clone()) {
                (Some(window), Some(ctx)) => self.cell_call(ctx, window, call, ready, cancel, det),
                _ => self.plain_call(call, ready, cancel, det),
            };
            if self.running.is_empty() && i + 1 == self.calls.len() {
                // The step's last call and nothing else running: run it on
                // this task. A spawn would only add a hand-off (often to the
                // other worker and back) on every step's path.
                let finished = match CatchUnwind(Box::pin(fut)).await {
                    Ok(f) => f,
                    Err(payload) => self.panicked(i, payload),
                };
                self.slots[i] = Slot::Finished(finished);
                continue;
            }
            let handle = self.running.spawn(fut);
            self.ids.insert(handle.id(), i);
            if exclusive {
                self.drain().await;
                self.commit_up_to(i + 1).await?;
            }
        }
        Ok(())
    }

    /// A call run to its end: its own token (cancelled with the step, and
    /// when the call ends however it ends, so the calls a program left
    /// running stop with it); the calls a program made log their results
    /// before the program's own (bounded by the grace period).
    fn plain_call(
        &self,
        call: &ToolCall,
        ready: Ready,
        cancel: &CancellationToken,
        det: Option<crate::plugin::Determinism>,
    ) -> CallFuture {
        let call_token = cancel.child_token();
        let services = self.p.services.as_ref().map(|s| {
            let mut s = s.for_tool_call(
                &call.id,
                ready.tool.plugin().clone(),
                call_token.clone(),
                self.at,
                self.p.parent.is_some(),
            );
            s.determinism = det;
            Arc::new(s)
        });
        let inflight = services.as_ref().map(|s| s.inflight());
        let invocation = ToolInvocation {
            call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: ready.arguments,
            session_id: self.p.log.id().to_string(),
            workspace: self.p.config.workspace.clone(),
            services: services.map(|s| s as Arc<dyn crate::plugin::SessionServices>),
        };
        let grace = self.p.config.cancel_grace;
        let run = execute(ready.tool, invocation, call_token.clone(), self.p.timeout_for(&call.name), grace);
        Box::pin(async move {
            let finished = run.await;
            call_token.cancel();
            if let Some(inflight) = inflight {
                let _ = tokio::time::timeout(grace, inflight.write()).await;
            }
            finished
        })
    }

    /// A call of a tool that may yield ([`crate::cells`]): `resume` and
    /// `cancel` of a cell, or a new cell, answered at the yield window.
    fn cell_call(
        &self,
        ctx: Arc<crate::services::SessionContext>,
        window: Duration,
        call: &ToolCall,
        ready: Ready,
        cancel: &CancellationToken,
        det: Option<crate::plugin::Determinism>,
    ) -> CallFuture {
        let cells = ctx.cells.clone();
        let plugin = Some(ready.tool.plugin().clone());
        let arguments = ready.arguments.clone();
        let grace = self.p.config.cancel_grace;
        let started = Instant::now();
        let done = move |outcome: ToolOutcome, plugin: Option<PluginRef>, arguments: serde_json::Value| Finished {
            outcome,
            plugin,
            duration: Some(started.elapsed()),
            arguments,
        };
        match CellRequest::of(&ready.arguments) {
            CellRequest::Resume { id, wait } => {
                // Its own window: `wait_ms`, else the yield window; never
                // past the call's deadline.
                let w = wait.unwrap_or(window).min(self.p.timeout_for(&call.name));
                Box::pin(async move { done(cells.resume(&id, w).await, plugin, arguments) })
            }
            CellRequest::Cancel { id } => {
                Box::pin(async move { done(cells.cancel(&id, grace).await, plugin, arguments) })
            }
            CellRequest::Start => {
                let cell = match cells.start(&call.id, &call.name) {
                    Ok(c) => c,
                    Err(msg) => {
                        let outcome = ToolOutcome::error(ToolErrorCode::Denied, format!("Error: {msg}"));
                        return Box::pin(async move { done(outcome, plugin, arguments) });
                    }
                };
                // The cell's token is the session's, not the turn's: the
                // cell outlives the step once it yielded.
                let call_token = cell.cancel.clone();
                let mut services =
                    ctx.for_tool_call(&call.id, ready.tool.plugin().clone(), call_token.clone(), self.at, false);
                services.cell_progress = Some(cell.progress.clone());
                services.determinism = det;
                let services = Arc::new(services);
                let inflight = services.inflight();
                let invocation = ToolInvocation {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    arguments: ready.arguments,
                    session_id: self.p.log.id().to_string(),
                    workspace: self.p.config.workspace.clone(),
                    services: Some(services as Arc<dyn crate::plugin::SessionServices>),
                };
                let run = execute(ready.tool, invocation, call_token.clone(), self.p.timeout_for(&call.name), grace);
                let (task_cells, task_cell) = (cells.clone(), cell.clone());
                // The cell: a task of its own owning the call.
                tokio::spawn(async move {
                    let finished = run.await;
                    call_token.cancel();
                    let _ = tokio::time::timeout(grace, inflight.write()).await;
                    task_cells.finish(&task_cell, finished.outcome);
                });
                let turn = cancel.clone();
                Box::pin(async move { done(cells.first_answer(&cell, window, &turn).await, plugin, arguments) })
            }
        }
    }

    /// Waits for one running call to finish and records its outcome.
    async fn join_one(&mut self) -> bool {
        let Some(joined) = self.running.join_next_with_id().await else {
            return false;
        };
        let (id, finished) = match joined {
            Ok((id, f)) => (id, Ok(f)),
            Err(e) => (e.id(), Err(e)),
        };
        if let Some(i) = self.ids.remove(&id) {
            let f = finished.unwrap_or_else(|e| {
                if e.is_panic() {
                    self.panicked(i, e.into_panic())
                } else {
                    let plugin = self.snap.tools.get(&self.calls[i].name).map(|t| t.plugin().clone());
                    let outcome = ToolOutcome::error(ToolErrorCode::Aborted, "Error: the call was aborted");
                    Finished { outcome, plugin, duration: None, arguments: serde_json::Value::Null }
                }
            });
            self.slots[i] = Slot::Finished(f);
        }
        true
    }

    /// Call `i`'s result when the host code running it panicked.
    fn panicked(&self, i: usize, payload: Box<dyn std::any::Any + Send>) -> Finished {
        let call = &self.calls[i];
        let plugin = self.snap.tools.get(&call.name).map(|t| t.plugin().clone());
        let why = panic_message(payload);
        tracing::error!(call = %call.id, tool = %call.name, "the host panicked running a tool call: {why}");
        let outcome = ToolOutcome::error(
            ToolErrorCode::HostPanic,
            format!(
                "Error: internal error in the host while running this call (a bug in Wharf, not in the tool): {why}"
            ),
        );
        Finished { outcome, plugin, duration: None, arguments: serde_json::Value::Null }
    }

    async fn drain(&mut self) {
        while self.join_one().await {}
    }

    /// Commits results of calls `committed..end` in order. Calls never
    /// dispatched get their `tool/call` (if missing) and an
    /// `ABORTED_BEFORE_DISPATCH` result.
    async fn commit_up_to(&mut self, end: usize) -> Result<(), StoreError> {
        while self.committed < end {
            let i = self.committed;
            let call = &self.calls[i];
            let finished = match std::mem::replace(&mut self.slots[i], Slot::Committed) {
                Slot::Finished(f) => f,
                Slot::Unlogged => {
                    self.p.log_call(self.at, call).await?;
                    ToolPipeline::aborted_before_dispatch(None)
                }
                Slot::Pending | Slot::Committed => ToolPipeline::aborted_before_dispatch(None),
            };
            let r = self.p.commit(self.snap, self.at, call, finished).await?;
            self.results.push(r);
            self.committed += 1;
        }
        Ok(())
    }
}

/// Polls a future, turning a panic into its payload: what a spawned task's
/// `JoinError` gives, for a call run on the caller's task.
struct CatchUnwind<F>(std::pin::Pin<Box<F>>);

impl<F: std::future::Future> std::future::Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn std::any::Any + Send>>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        let fut = self.0.as_mut();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fut.poll(cx))) {
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Ok(std::task::Poll::Ready(v)) => std::task::Poll::Ready(Ok(v)),
            Err(payload) => std::task::Poll::Ready(Err(payload)),
        }
    }
}

/// The text of a panic payload (`panic!` with a literal or a format).
fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    let text = match payload.downcast::<String>() {
        Ok(s) => *s,
        Err(p) => p.downcast_ref::<&str>().map_or_else(|| "(no message)".to_string(), |s| (*s).to_string()),
    };
    let mut text = crate::util::escape_line(&text).into_owned();
    if crate::util::truncate_str(&mut text, 1024) {
        text.push('…');
    }
    text
}
