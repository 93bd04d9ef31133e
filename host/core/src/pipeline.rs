//! The tool pipeline: what happens to one tool call.
//!
//! ```text
//! tool/call logged
//!   → guards that need nothing else: unknown tool (UNKNOWN_TOOL), a tool
//!     whose input_schema cannot be compiled, arguments over the size bound
//!     or not JSON (INVALID_ARGUMENTS; empty text means {}), schema validation
//!     against the tool's input_schema (INVALID_ARGUMENTS; see crate::schema)
//!   → tools/pre-execute hooks (waterfall; Replace rewrites `arguments`,
//!     Reject or a hook failure denies)
//!   → policies from the registry snapshot (all of them, concurrently, each
//!     with a timeout; composed by crate::policy; failure = deny)
//!   → policy/decision logged (when any hook or policy took part)
//!   → deny: DENIED · ask: approval/asked → Approver → approval/decided
//!     (rejected: APPROVAL_REJECTED; cancelled: ABORTED_BEFORE_DISPATCH when the
//!     turn was cancelled, else APPROVAL_CANCELLED)
//!   → schema validation again if the arguments were rewritten
//!   → execute: Tool::call with a child of the turn's cancellation token,
//!     a deadline (TIMEOUT) and, after cancellation, a grace period (ABORTED);
//!     a panic in the task running it (host code) becomes HOST_PANIC
//!   → tools/post-execute hooks (waterfall over {…, outcome}; Replace swaps the
//!     outcome, Reject turns it into a BLOCKED error) — executed calls only
//!   → finalize: output over OutputLimits::max_model_bytes keeps its head and
//!     tail with a note in between; the full text goes into the log's
//!     tool/result.full_content (up to OutputLimits::max_log_bytes)
//!   → tools/result emitted → tool/result logged with plugin id and version.
//! ```
//!
//! The guards run before the policies because nothing will execute anyway and
//! there is no point asking a human to approve a call that cannot run.
//!
//! Hook payloads: `tools/pre-execute` gets
//! `{session_id, turn, step, call_id, tool, plugin, arguments}`;
//! `tools/post-execute` the same plus `outcome` (a [`ToolOutcome`]);
//! `tools/result` gets the logged `tool/result` data.
//!
//! Scheduling of several calls is in [`crate::scheduler`].

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::approval::{ApprovalRequest, Approver};
use crate::bus::Bus;
use crate::events::{
    ApprovalAsked, ApprovalDecided, ApprovalOutcome, EventKind, PolicyDecisionEvent, ToolCallEvent, ToolResultEvent,
    Verdict,
};
use crate::plugin::{
    HookOutcome, HookPoint, PluginError, PluginRef, PolicyRequest, Tool, ToolCall, ToolErrorCode, ToolInvocation,
    ToolOutcome,
};
use crate::policy::{Vote, compose};
use crate::registry::Snapshot;
use crate::store::{SessionLog, StoreError};

/// Output size limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputLimits {
    /// Bytes of output the model sees; longer output keeps half of this from
    /// the head and half from the tail.
    pub max_model_bytes: usize,
    /// Bytes of full output kept in the log when truncated; beyond this the
    /// full text is not kept.
    pub max_log_bytes: usize,
}

impl Default for OutputLimits {
    /// 32 KiB for the model, 4 MiB in the log.
    fn default() -> Self {
        Self { max_model_bytes: 32 * 1024, max_log_bytes: 4 * 1024 * 1024 }
    }
}

/// Pipeline and scheduler settings.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// Max parallel calls in flight (rolling pool).
    pub tool_pool: usize,
    /// Default deadline of one tool call.
    pub tool_timeout: Duration,
    /// Per-tool deadline overrides, by tool name.
    pub tool_timeouts: HashMap<String, Duration>,
    /// Deadline of one policy evaluation (a timeout denies).
    pub policy_timeout: Duration,
    /// How long a started call may take to stop after cancellation.
    pub cancel_grace: Duration,
    /// Output limits.
    pub output: OutputLimits,
    /// 0 for the top agent, 1+ for subagents (passed to policies).
    pub agent_depth: u32,
    /// Workspace passed to tools and policies.
    pub workspace: Option<String>,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        Self {
            tool_pool: 10,
            tool_timeout: Duration::from_secs(600),
            tool_timeouts: HashMap::new(),
            policy_timeout: Duration::from_secs(10),
            cancel_grace: Duration::from_secs(10),
            output: OutputLimits::default(),
            agent_depth: 0,
            workspace: None,
        }
    }
}

/// Runs tool calls through the pipeline for one session.
pub struct ToolPipeline {
    pub(crate) log: SessionLog,
    pub(crate) bus: Arc<Bus>,
    approver: Arc<dyn Approver>,
    pub(crate) config: PipelineConfig,
    /// Tools allowed for the rest of the session by an approval (shared
    /// with the pipelines of calls programs make).
    pub(crate) grants: Arc<Mutex<HashSet<String>>>,
    /// Session services handed to each call.
    pub(crate) services: Option<Arc<crate::services::SessionContext>>,
    /// For the calls a program makes: the calling call's id (logged as
    /// `tool/call.parent`).
    pub(crate) parent: Option<String>,
}

/// Where a call is in its step.
#[derive(Debug, Clone, Copy)]
pub struct StepRef {
    /// Turn number.
    pub turn: u64,
    /// Step number.
    pub step: u32,
}

/// The outcome of a call before finalization.
pub(crate) struct Finished {
    pub outcome: ToolOutcome,
    /// The tool's plugin version, when the tool resolved.
    pub plugin: Option<PluginRef>,
    /// Set when the tool executed.
    pub duration: Option<Duration>,
    /// Arguments the tool ran (or would have run) with.
    pub arguments: Value,
}

/// A call that passed every check.
pub(crate) struct Ready {
    pub tool: Arc<dyn Tool>,
    pub arguments: Value,
}

pub(crate) enum Prepared {
    Done(Finished),
    Ready(Ready),
}

impl ToolPipeline {
    /// A pipeline writing to `log`.
    pub fn new(log: SessionLog, bus: Arc<Bus>, approver: Arc<dyn Approver>, config: PipelineConfig) -> Self {
        Self { log, bus, approver, config, grants: Default::default(), services: None, parent: None }
    }

    /// The pipeline of the calls a program in call `parent` makes: the same
    /// session grants, every call logged with `parent`.
    pub(crate) fn inner_of(mut self, parent: String, grants: Arc<Mutex<HashSet<String>>>) -> Self {
        self.parent = Some(parent);
        self.grants = grants;
        self
    }

    /// Hands `services` to every call (the `session`, `model` and `agents`
    /// imports).
    pub fn with_services(mut self, services: Arc<crate::services::SessionContext>) -> Self {
        self.services = Some(services);
        self
    }

    /// The settings.
    pub fn config(&self) -> &PipelineConfig {
        &self.config
    }

    /// Runs the calls of one step (scheduling: [`crate::scheduler`]) and
    /// returns their logged results in model order. Only a store failure is
    /// an `Err`; every tool problem is a result with `is_error`.
    pub async fn run(
        &self,
        snap: &Arc<Snapshot>,
        at: StepRef,
        calls: &[ToolCall],
        cancel: &CancellationToken,
    ) -> Result<Vec<ToolResultEvent>, StoreError> {
        crate::scheduler::run_calls(self, snap, at, calls, cancel).await
    }

    /// Logs `tool/call`; returns the event's time.
    pub(crate) async fn log_call(&self, at: StepRef, call: &ToolCall) -> Result<String, StoreError> {
        let ev = self
            .log
            .append_async(EventKind::ToolCall(ToolCallEvent {
                turn: at.turn,
                step: at.step,
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
                parent: self.parent.clone(),
            }))
            .await?;
        Ok(ev.time)
    }

    pub(crate) fn aborted_before_dispatch(plugin: Option<PluginRef>) -> Finished {
        Finished {
            outcome: ToolOutcome::error(
                ToolErrorCode::AbortedBeforeDispatch,
                "Error: tool call aborted before dispatch",
            ),
            plugin,
            duration: None,
            arguments: Value::Null,
        }
    }

    pub(crate) fn timeout_for(&self, tool: &str) -> Duration {
        self.config.tool_timeouts.get(tool).copied().unwrap_or(self.config.tool_timeout)
    }

    /// Guards, hooks, policies and approval for one call.
    pub(crate) async fn precheck(
        &self,
        snap: &Arc<Snapshot>,
        at: StepRef,
        call: &ToolCall,
        cancel: &CancellationToken,
    ) -> Result<Prepared, StoreError> {
        let done = |code: ToolErrorCode, msg: String, plugin: Option<PluginRef>, arguments: Value| {
            Ok(Prepared::Done(Finished { outcome: ToolOutcome::error(code, msg), plugin, duration: None, arguments }))
        };
        let Some(tool) = snap.tools.get(&call.name).cloned() else {
            let names: Vec<&str> = snap.tools.keys().map(String::as_str).collect();
            let list = if names.is_empty() { "none".to_string() } else { names.join(", ") };
            return done(
                ToolErrorCode::UnknownTool,
                format!("Error: unknown tool `{}`; available tools: {list}", call.name),
                None,
                Value::Null,
            );
        };
        let plugin = Some(tool.plugin().clone());
        // Compiled when the tool was registered (or on its first call).
        let schema = match crate::schema::compiled(&tool.spec().input_schema) {
            Ok(s) => s,
            Err(e) => {
                let msg = format!("Error: the tool `{}` cannot be called: its {e}", call.name);
                return done(ToolErrorCode::InvalidArguments, msg, plugin, Value::Null);
            }
        };
        if call.arguments.len() > crate::schema::MAX_ARGS_BYTES {
            let msg = format!(
                "Error: invalid arguments: /: arguments are larger than {} bytes of JSON",
                crate::schema::MAX_ARGS_BYTES
            );
            return done(ToolErrorCode::InvalidArguments, msg, plugin, Value::Null);
        }
        let args: Value = if call.arguments.trim().is_empty() {
            json!({})
        } else {
            match serde_json::from_str(&call.arguments) {
                Ok(v) => v,
                Err(e) => {
                    return done(
                        ToolErrorCode::InvalidArguments,
                        format!("Error: arguments are not valid JSON: {e}"),
                        plugin,
                        Value::Null,
                    );
                }
            }
        };
        if let Err(e) = schema.validate(&args) {
            return done(ToolErrorCode::InvalidArguments, format!("Error: invalid arguments: {e}"), plugin, args);
        }

        // tools/pre-execute hooks, then policies.
        let mut votes_logged = Vec::new();
        let mut args_after_hooks = args.clone();
        let mut verdict = None;
        if self.bus.has_listeners(snap, HookPoint::ToolsPreExecute) {
            let payload = json!({
                "session_id": self.log.id(), "turn": at.turn, "step": at.step, "call_id": call.id,
                "tool": call.name, "plugin": tool.plugin().id, "arguments": args,
            });
            let w = self.bus.waterfall(snap, HookPoint::ToolsPreExecute, payload).await;
            for t in &w.trace {
                let vote = Vote {
                    index: 0,
                    plugin: t.plugin.clone(),
                    result: match &t.result {
                        Ok(HookOutcome::Pass) => Ok(crate::plugin::Decision::Allow),
                        Ok(HookOutcome::Replace(v)) => Ok(crate::plugin::Decision::Rewrite {
                            args: v.get("arguments").cloned().unwrap_or(Value::Null),
                        }),
                        Ok(HookOutcome::Reject(r)) => Ok(crate::plugin::Decision::Deny { reason: r.clone() }),
                        Err(e) => Err(e.clone()),
                    },
                };
                votes_logged.push(vote.to_logged("hook"));
            }
            if let Some(r) = w.rejected {
                verdict = Some(Verdict::Deny { reason: format!("{}: {}", r.by.id, r.reason) });
            } else if let Some(a) = w.payload.get("arguments") {
                args_after_hooks = a.clone();
            }
        }
        let mut final_args = args_after_hooks.clone();
        if verdict.is_none() && !snap.policies.is_empty() {
            let request = PolicyRequest {
                tool: call.name.clone(),
                plugin: tool.plugin().id.clone(),
                arguments: args_after_hooks.clone(),
                session_id: self.log.id().to_string(),
                agent_depth: self.config.agent_depth,
                workspace: self.config.workspace.clone(),
            };
            let votes = self.evaluate_policies(snap, request, &call.id, at, cancel).await;
            votes_logged.extend(votes.iter().map(|v| v.to_logged("policy")));
            let composed = compose(&args_after_hooks, &votes);
            final_args = composed.arguments;
            verdict = Some(composed.verdict);
        }
        let verdict = verdict.unwrap_or(Verdict::Allow);
        if !votes_logged.is_empty() {
            self.log
                .append_async(EventKind::PolicyDecision(PolicyDecisionEvent {
                    call_id: call.id.clone(),
                    tool: call.name.clone(),
                    verdict: verdict.clone(),
                    rewritten: (final_args != args).then(|| final_args.clone()),
                    votes: votes_logged,
                }))
                .await?;
        }
        match verdict {
            Verdict::Allow => {}
            Verdict::Deny { reason } => {
                return done(ToolErrorCode::Denied, format!("Error: denied by policy: {reason}"), plugin, final_args);
            }
            Verdict::Ask { reason } => {
                if let Some((code, msg)) = self.ask(call, &final_args, reason, cancel).await? {
                    return done(code, msg, plugin, final_args);
                }
            }
        }
        if final_args != args
            && let Err(e) = schema.validate(&final_args)
        {
            return done(
                ToolErrorCode::InvalidArguments,
                format!("Error: arguments rewritten by a policy are invalid: {e}"),
                plugin,
                final_args,
            );
        }
        Ok(Prepared::Ready(Ready { tool, arguments: final_args }))
    }

    async fn evaluate_policies(
        &self,
        snap: &Arc<Snapshot>,
        request: PolicyRequest,
        call_id: &str,
        at: StepRef,
        cancel: &CancellationToken,
    ) -> Vec<Vote> {
        let mut set = tokio::task::JoinSet::new();
        let mut ids = HashMap::new();
        // Policies that may ask the user share one question slot for the
        // call: surfaces show one question per call at a time.
        let slot = Arc::new(tokio::sync::Mutex::new(()));
        for (index, policy) in snap.policies.iter().enumerate() {
            let (policy, request) = (policy.clone(), request.clone());
            // A policy that may ask (granted `questions`) gets services
            // scoped to this call and its own deadline, which bounds the
            // question too; the others the pipeline's policy deadline.
            let asking = policy.asks().zip(self.services.as_ref()).map(|(deadline, ctx)| {
                let services = ctx.for_tool_call(call_id, policy.plugin().clone(), cancel.clone(), at, true);
                let services: Arc<dyn crate::plugin::SessionServices> =
                    Arc::new(crate::services::PolicyQuestions::new(services, slot.clone()));
                (deadline, services)
            });
            let timeout = asking.as_ref().map_or(self.config.policy_timeout, |(d, _)| *d);
            let handle = set.spawn(async move {
                let evaluation = match asking {
                    Some((_, services)) => policy.evaluate_asking(request, services),
                    None => policy.evaluate_versioned(request),
                };
                match tokio::time::timeout(timeout, evaluation).await {
                    Ok(r) => r,
                    Err(_) => Err(PluginError::failed(
                        ToolErrorCode::Timeout,
                        format!("timed out after {} ms", timeout.as_millis()),
                    )),
                }
            });
            ids.insert(handle.id(), index);
        }
        let mut votes = Vec::new();
        while let Some(joined) = set.join_next_with_id().await {
            let (id, result) = match joined {
                Ok((id, r)) => (id, r),
                Err(e) => (e.id(), Err(PluginError::failed(ToolErrorCode::HostPanic, "policy panicked"))),
            };
            if let Some(&index) = ids.get(&id) {
                let (result, version) = match result {
                    Ok((d, v)) => (Ok(d), v),
                    Err(e) => (Err(e), None),
                };
                let plugin = version.unwrap_or_else(|| snap.policies[index].plugin().clone());
                if let Err(e) = &result {
                    tracing::warn!(policy = %plugin.id, error = %e, "policy failed; denying (fail closed)");
                }
                votes.push(Vote { index, plugin, result });
            }
        }
        // Logged "in profile order", whatever order they finished in.
        votes.sort_by_key(|v| v.index);
        votes
    }

    /// Runs the approval flow; `Some((code, message))` when the call must not run.
    async fn ask(
        &self,
        call: &ToolCall,
        args: &Value,
        reason: String,
        cancel: &CancellationToken,
    ) -> Result<Option<(ToolErrorCode, String)>, StoreError> {
        self.log.append(EventKind::ApprovalAsked(ApprovalAsked {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            reason: reason.clone(),
            arguments: args.clone(),
        }))?;
        let granted = self.grants.lock().unwrap_or_else(|e| e.into_inner()).contains(&call.name);
        let approval = if granted {
            crate::approval::Approval {
                outcome: ApprovalOutcome::AllowedForSession,
                by: "session-grant".into(),
                note: Some(format!("`{}` was allowed for this session earlier", call.name)),
            }
        } else {
            let request = ApprovalRequest {
                session_id: self.log.id().to_string(),
                call_id: call.id.clone(),
                tool: call.name.clone(),
                arguments: args.clone(),
                reason: reason.clone(),
            };
            tokio::select! {
                a = self.approver.decide(request, cancel.clone()) => a,
                _ = cancel.cancelled() => crate::approval::Approval {
                    outcome: ApprovalOutcome::Cancelled,
                    by: "host".into(),
                    note: Some("the turn was cancelled".into()),
                },
            }
        };
        self.log.append(EventKind::ApprovalDecided(ApprovalDecided {
            call_id: call.id.clone(),
            outcome: approval.outcome,
            by: approval.by.clone(),
            note: approval.note.clone(),
        }))?;
        let note = approval.note.map(|n| format!(" ({n})")).unwrap_or_default();
        Ok(match approval.outcome {
            ApprovalOutcome::AllowedOnce => None,
            ApprovalOutcome::AllowedForSession => {
                self.grants.lock().unwrap_or_else(|e| e.into_inner()).insert(call.name.clone());
                None
            }
            ApprovalOutcome::Rejected => Some((
                ToolErrorCode::ApprovalRejected,
                format!("Error: the call needed approval ({reason}) and was rejected by {}{note}", approval.by),
            )),
            ApprovalOutcome::Cancelled if cancel.is_cancelled() => {
                Some((ToolErrorCode::AbortedBeforeDispatch, "Error: tool call aborted before dispatch".into()))
            }
            ApprovalOutcome::Cancelled => {
                Some((ToolErrorCode::ApprovalCancelled, format!("Error: the approval question was withdrawn{note}")))
            }
        })
    }

    /// Post-execute hooks, finalization, `tools/result`, `tool/result`.
    pub(crate) async fn commit(
        &self,
        snap: &Arc<Snapshot>,
        at: StepRef,
        call: &ToolCall,
        finished: Finished,
    ) -> Result<ToolResultEvent, StoreError> {
        let Finished { mut outcome, plugin, duration, arguments } = finished;
        if duration.is_some() && self.bus.has_listeners(snap, HookPoint::ToolsPostExecute) {
            let payload = json!({
                "session_id": self.log.id(), "turn": at.turn, "step": at.step, "call_id": call.id,
                "tool": call.name, "plugin": plugin.as_ref().map(|p| p.id.clone()), "arguments": arguments,
                "outcome": outcome,
            });
            let w = self.bus.waterfall(snap, HookPoint::ToolsPostExecute, payload).await;
            if let Some(r) = w.rejected {
                outcome = ToolOutcome::error(
                    ToolErrorCode::Blocked,
                    format!("Error: the result was blocked by `{}`: {}", r.by.id, r.reason),
                );
            } else if w.trace.iter().any(|t| matches!(t.result, Ok(HookOutcome::Replace(_)))) {
                match w.payload.get("outcome").cloned().map(serde_json::from_value::<ToolOutcome>) {
                    Some(Ok(o)) => outcome = o,
                    _ => {
                        tracing::warn!(tool = %call.name, "tools/post-execute replacement has no valid `outcome`; ignored")
                    }
                }
            }
        }
        let fin = finalize(&outcome.content, &self.config.output);
        let result = ToolResultEvent {
            turn: at.turn,
            step: at.step,
            call_id: call.id.clone(),
            name: call.name.clone(),
            content: fin.content,
            is_error: outcome.is_error,
            error_code: outcome.error_code,
            plugin: plugin.as_ref().map(|p| p.id.clone()),
            version: plugin.as_ref().map(|p| p.digest.clone()),
            truncated: fin.truncated,
            original_bytes: fin.truncated.then_some(outcome.content.len() as u64),
            full_content: fin.full_content,
            duration_ms: duration.map(|d| d.as_millis() as u64),
            details: outcome.details,
        };
        if self.bus.has_listeners(snap, HookPoint::ToolsResult) {
            let mut payload = serde_json::to_value(&result).unwrap_or(Value::Null);
            if let Some(o) = payload.as_object_mut() {
                o.remove("full_content");
            }
            self.bus.emit(snap, HookPoint::ToolsResult, &payload).await;
        }
        self.log.append_async(EventKind::ToolResult(result.clone())).await?;
        Ok(result)
    }
}

/// Runs one call with its deadline, cancellation grace and panic isolation
/// (the caller spawns this as its own task).
pub(crate) async fn execute(
    tool: Arc<dyn Tool>,
    invocation: ToolInvocation,
    cancel: CancellationToken,
    timeout: Duration,
    grace: Duration,
) -> Finished {
    let start = Instant::now();
    let token = cancel.child_token();
    let plugin = tool.plugin().clone();
    let arguments = invocation.arguments.clone();
    let call = tool.call(invocation, token.clone());
    let outcome = tokio::select! {
        biased;
        o = call => o,
        _ = tokio::time::sleep(timeout) => {
            token.cancel();
            ToolOutcome::error(ToolErrorCode::Timeout, format!("Error: the tool did not finish within {} ms", timeout.as_millis()))
        }
        _ = async { cancel.cancelled().await; tokio::time::sleep(grace).await } => ToolOutcome::error(
            ToolErrorCode::Aborted,
            format!("Error: the tool did not stop within {} ms of cancellation", grace.as_millis()),
        ),
    };
    Finished { outcome, plugin: Some(plugin), duration: Some(start.elapsed()), arguments }
}

/// The finalized content of a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finalized {
    /// What the model sees.
    pub content: String,
    /// Whether it was cut.
    pub truncated: bool,
    /// The untruncated text for the log, when cut and small enough to keep.
    pub full_content: Option<String>,
}

fn floor_boundary(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_boundary(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// Truncates `content` to the model budget, keeping head and tail with a note.
pub fn finalize(content: &str, limits: &OutputLimits) -> Finalized {
    let len = content.len();
    if len <= limits.max_model_bytes {
        return Finalized { content: content.to_string(), truncated: false, full_content: None };
    }
    let half = limits.max_model_bytes / 2;
    let head = floor_boundary(content, half);
    let tail = ceil_boundary(content, len - half).max(head);
    let kept = len <= limits.max_log_bytes;
    let where_ = if kept {
        "the full output is kept in the session log".to_string()
    } else {
        format!("the full output was larger than {} bytes and was not kept", limits.max_log_bytes)
    };
    let note = format!(
        "\n\n[… output truncated: {len} bytes in total; {} bytes omitted between the first {head} and the last {} bytes; {where_} …]\n\n",
        tail - head,
        len - tail,
    );
    Finalized {
        content: format!("{}{note}{}", &content[..head], &content[tail..]),
        truncated: true,
        full_content: kept.then(|| content.to_string()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn small_output_untouched() {
        let f = finalize("hello", &OutputLimits::default());
        assert_eq!(f, Finalized { content: "hello".into(), truncated: false, full_content: None });
    }

    #[test]
    fn large_output_keeps_head_and_tail_on_char_boundaries() {
        let limits = OutputLimits { max_model_bytes: 10, max_log_bytes: 100 };
        let text = "ééééé-middle-ééééé"; // é is 2 bytes
        let f = finalize(text, &limits);
        assert!(f.truncated);
        assert!(f.content.starts_with("éé"), "{}", f.content);
        assert!(f.content.ends_with("éé"), "{}", f.content);
        assert!(f.content.contains("output truncated"));
        assert!(f.content.contains("kept in the session log"));
        assert_eq!(f.full_content.as_deref(), Some(text));
        let f = finalize(&"x".repeat(200), &limits);
        assert!(f.full_content.is_none());
        assert!(f.content.contains("was not kept"));
    }
}
