//! Native fakes for testing the core (and anything built on it) without
//! WebAssembly: a scripted [`LlmAdapter`], tools with controllable latency,
//! fixed policies, and [`Gate`]s to pause code at exact points. No wall-clock
//! timing is involved: latency is counted in scheduler yields or held by gates.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::plugin::{
    BoxFuture, Decision, FinishReason, LlmAdapter, LlmError, LlmErrorCode, LlmEvent, LlmRequest, LlmStream, ModelInfo,
    PluginError, PluginRef, Policy, PolicyRequest, Tool, ToolCall, ToolInvocation, ToolMode, ToolOutcome, ToolSpec,
    Usage,
};
use crate::registry::{Registrations, Registry, RegistryError};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A rendezvous point: code under test calls [`Gate::pass`] and blocks until
/// the test calls [`Gate::open`]; the test can await [`Gate::reached`].
#[derive(Debug, Default)]
pub struct Gate {
    reached: Notify,
    release: Notify,
}

impl Gate {
    /// A new closed gate.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Signals arrival, then waits until opened.
    pub async fn pass(&self) {
        self.reached.notify_one();
        self.release.notified().await;
    }

    /// Waits until some code arrived at the gate.
    pub async fn reached(&self) {
        self.reached.notified().await;
    }

    /// Lets one waiter (present or future) through.
    pub fn open(&self) {
        self.release.notify_one();
    }
}

/// Yields to the scheduler `n` times.
pub async fn yields(n: u32) {
    for _ in 0..n {
        tokio::task::yield_now().await;
    }
}

/// One item of a scripted completion.
#[derive(Debug, Clone)]
pub enum ScriptItem {
    /// Deliver a batch of events.
    Batch(Vec<LlmEvent>),
    /// Fail the stream with this error.
    Fail(LlmError),
    /// Wait at a gate.
    Gate(Arc<Gate>),
    /// Yield to the scheduler this many times.
    Yield(u32),
}

/// A scripted completion.
#[derive(Debug, Clone, Default)]
pub struct Reply {
    /// Fail `start` with this error instead of streaming.
    pub start_error: Option<LlmError>,
    /// The stream.
    pub items: Vec<ScriptItem>,
}

impl Reply {
    /// Text then `Finish(Stop)`, with a small usage.
    pub fn text(text: &str) -> Self {
        Self {
            start_error: None,
            items: vec![ScriptItem::Batch(vec![
                LlmEvent::Text(text.to_string()),
                LlmEvent::Usage(Usage { prompt_tokens: 10, completion_tokens: 5, ..Usage::default() }),
                LlmEvent::Finish(FinishReason::Stop),
            ])],
        }
    }

    /// Tool calls `(id, name, arguments)` then `Finish(ToolCalls)`.
    pub fn tools(calls: &[(&str, &str, &str)]) -> Self {
        let mut batch: Vec<LlmEvent> = calls
            .iter()
            .map(|(id, name, args)| {
                LlmEvent::ToolCall(ToolCall { id: id.to_string(), name: name.to_string(), arguments: args.to_string() })
            })
            .collect();
        batch.push(LlmEvent::Usage(Usage { prompt_tokens: 10, completion_tokens: 5, ..Usage::default() }));
        batch.push(LlmEvent::Finish(FinishReason::ToolCalls));
        Self { start_error: None, items: vec![ScriptItem::Batch(batch)] }
    }

    /// `start` fails with `code`.
    pub fn start_error(code: LlmErrorCode) -> Self {
        Self { start_error: Some(LlmError::new(code, "scripted failure")), items: vec![] }
    }

    /// Custom items.
    pub fn items(items: Vec<ScriptItem>) -> Self {
        Self { start_error: None, items }
    }
}

/// An [`LlmAdapter`] that plays scripted replies in order and records requests.
pub struct ScriptedLlm {
    plugin: PluginRef,
    replies: Mutex<VecDeque<Reply>>,
    fallback: Option<Reply>,
    requests: Mutex<Vec<LlmRequest>>,
}

impl ScriptedLlm {
    /// Plays `replies`; after them, `start` fails with `INVALID_REQUEST`.
    pub fn new(replies: Vec<Reply>) -> Arc<Self> {
        Arc::new(Self {
            plugin: PluginRef::native("llm"),
            replies: Mutex::new(replies.into()),
            fallback: None,
            requests: Mutex::default(),
        })
    }

    /// Plays `replies`, then `fallback` forever.
    pub fn with_fallback(replies: Vec<Reply>, fallback: Reply) -> Arc<Self> {
        Arc::new(Self {
            plugin: PluginRef::native("llm"),
            replies: Mutex::new(replies.into()),
            fallback: Some(fallback),
            requests: Mutex::default(),
        })
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<LlmRequest> {
        lock(&self.requests).clone()
    }
}

struct ScriptedStream {
    items: VecDeque<ScriptItem>,
}

impl LlmStream for ScriptedStream {
    fn next(&mut self) -> BoxFuture<'_, Result<Option<Vec<LlmEvent>>, LlmError>> {
        Box::pin(async move {
            while let Some(item) = self.items.pop_front() {
                match item {
                    ScriptItem::Batch(b) => return Ok(Some(b)),
                    ScriptItem::Fail(e) => return Err(e),
                    ScriptItem::Gate(g) => g.pass().await,
                    ScriptItem::Yield(n) => yields(n).await,
                }
            }
            Ok(None)
        })
    }
}

impl LlmAdapter for ScriptedLlm {
    fn plugin(&self) -> &PluginRef {
        &self.plugin
    }

    fn model(&self) -> ModelInfo {
        ModelInfo { model: "scripted".into(), context_window: 128_000 }
    }

    fn start<'a>(&'a self, request: &'a LlmRequest) -> BoxFuture<'a, Result<Box<dyn LlmStream>, LlmError>> {
        lock(&self.requests).push(request.clone());
        let reply = lock(&self.replies).pop_front().or_else(|| self.fallback.clone());
        Box::pin(async move {
            let Some(reply) = reply else {
                return Err(LlmError::new(LlmErrorCode::InvalidRequest, "script exhausted"));
            };
            if let Some(e) = reply.start_error {
                return Err(e);
            }
            Ok(Box::new(ScriptedStream { items: reply.items.into() }) as Box<dyn LlmStream>)
        })
    }
}

/// How long a fake tool takes.
#[derive(Debug, Clone)]
pub enum Latency {
    /// Returns at once.
    None,
    /// Yields this many times.
    Yields(u32),
    /// Yields as many times as the integer argument `yields` says (0 if absent).
    FromArgs,
    /// Waits at a gate.
    Gate(Arc<Gate>),
    /// Never returns unless cancelled.
    Forever,
}

type Behaviour = Arc<dyn Fn(&Value) -> ToolOutcome + Send + Sync>;

/// A tool with a scripted behaviour and latency. It records `start:<id>` and
/// `end:<id>` in its journal and honours cancellation (returning `ABORTED`).
pub struct FakeTool {
    spec: ToolSpec,
    plugin: PluginRef,
    latency: Latency,
    behaviour: Behaviour,
    journal: Arc<Mutex<Vec<String>>>,
    /// When false, the tool ignores cancellation (for grace-period tests).
    pub honours_cancel: bool,
    /// Calls past this window yield as cells ([`crate::cells`]).
    pub yield_window: Option<std::time::Duration>,
}

impl FakeTool {
    /// A tool that echoes its arguments, with an open schema.
    pub fn new(name: &str, mode: ToolMode) -> Self {
        Self {
            spec: ToolSpec {
                name: name.to_string(),
                description: format!("fake tool {name}"),
                input_schema: serde_json::json!({"type": "object"}),
                mode,
            },
            plugin: PluginRef { id: format!("plugin-{name}"), digest: format!("digest-{name}-v1"), config: None },
            latency: Latency::None,
            behaviour: Arc::new(|args| ToolOutcome::ok(args.to_string())),
            journal: Arc::default(),
            honours_cancel: true,
            yield_window: None,
        }
    }

    /// Sets the input schema.
    pub fn schema(mut self, schema: Value) -> Self {
        self.spec.input_schema = schema;
        self
    }

    /// Sets the latency.
    pub fn latency(mut self, latency: Latency) -> Self {
        self.latency = latency;
        self
    }

    /// Sets the behaviour.
    pub fn behaviour(mut self, f: impl Fn(&Value) -> ToolOutcome + Send + Sync + 'static) -> Self {
        self.behaviour = Arc::new(f);
        self
    }

    /// Shares a journal (several tools can write to one).
    pub fn journal(mut self, journal: Arc<Mutex<Vec<String>>>) -> Self {
        self.journal = journal;
        self
    }

    /// Sets the plugin version reported.
    pub fn plugin_ref(mut self, plugin: PluginRef) -> Self {
        self.plugin = plugin;
        self
    }
}

impl Tool for FakeTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn plugin(&self) -> &PluginRef {
        &self.plugin
    }

    fn yield_window(&self) -> Option<std::time::Duration> {
        self.yield_window
    }

    fn call(&self, call: ToolInvocation, cancel: CancellationToken) -> BoxFuture<'_, ToolOutcome> {
        Box::pin(async move {
            lock(&self.journal).push(format!("start:{}", call.call_id));
            if let Some(s) = &call.services {
                let id = call.call_id.clone();
                s.set_progress(Arc::new(move || format!("{id} is working\n")));
            }
            let wait = async {
                match &self.latency {
                    Latency::None => {}
                    Latency::Yields(n) => yields(*n).await,
                    Latency::FromArgs => {
                        yields(call.arguments.get("yields").and_then(Value::as_u64).unwrap_or(0) as u32).await
                    }
                    Latency::Gate(g) => g.pass().await,
                    Latency::Forever => std::future::pending::<()>().await,
                }
            };
            let cancelled = async {
                if self.honours_cancel { cancel.cancelled().await } else { std::future::pending::<()>().await }
            };
            let out = tokio::select! {
                _ = wait => (self.behaviour)(&call.arguments),
                _ = cancelled => ToolOutcome::error(crate::plugin::ToolErrorCode::Aborted, "cancelled"),
            };
            lock(&self.journal).push(format!("end:{}", call.call_id));
            out
        })
    }
}

/// A policy with a fixed answer.
pub struct FakePolicy {
    plugin: PluginRef,
    answer: Option<Result<Decision, PluginError>>,
}

impl FakePolicy {
    /// Always answers `answer`.
    pub fn new(id: &str, answer: Result<Decision, PluginError>) -> Self {
        Self { plugin: PluginRef::native(id), answer: Some(answer) }
    }

    /// Never answers (for timeout tests).
    pub fn hanging(id: &str) -> Self {
        Self { plugin: PluginRef::native(id), answer: None }
    }
}

impl Policy for FakePolicy {
    fn plugin(&self) -> &PluginRef {
        &self.plugin
    }

    fn evaluate(&self, _request: PolicyRequest) -> BoxFuture<'_, Result<Decision, PluginError>> {
        let answer = self.answer.clone();
        Box::pin(async move {
            match answer {
                Some(a) => a,
                None => std::future::pending().await,
            }
        })
    }
}

/// Installs each tool as its own plugin (its [`Tool::plugin`]).
pub fn install_tools(registry: &Registry, tools: Vec<Arc<dyn Tool>>) -> Result<(), RegistryError> {
    for t in tools {
        registry.install(t.plugin().clone(), Registrations { tools: vec![t], ..Registrations::default() })?;
    }
    Ok(())
}

/// Installs an LLM adapter as its own plugin.
pub fn install_llm(registry: &Registry, llm: Arc<dyn LlmAdapter>) -> Result<(), RegistryError> {
    registry.install(llm.plugin().clone(), Registrations { llm: Some(llm), ..Registrations::default() })
}

/// Installs a policy as its own plugin.
pub fn install_policy(registry: &Registry, policy: Arc<dyn Policy>) -> Result<(), RegistryError> {
    registry.install(policy.plugin().clone(), Registrations { policy: Some(policy), ..Registrations::default() })
}
