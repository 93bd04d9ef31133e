//! What a plugin version registers with the core: component-backed
//! implementations of the core traits (`ComponentTool`, `ComponentLlm` …)
//! and [`of_version`], the set of registrations one version contributes.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use wasmtime::Store;
use wasmtime::component::ResourceAny;
use wharf_core::plugin::{
    AdapterScope, BoxFuture, Compactor, Decision, FinishReason, Hook, HookOutcome, HookPoint, LlmAdapter, LlmError,
    LlmErrorCode, LlmEvent, LlmRequest, LlmStream, Message, ModelInfo, PluginError, PluginRef, Policy, PolicyRequest,
    PromptSection, Role, SessionServices, Tool, ToolCall, ToolErrorCode, ToolInvocation, ToolOutcome, ToolReach,
    ToolSpec, Usage,
};
use wharf_core::registry::Registrations;

use crate::bindings::exports::wharf::plugin as ex;
use crate::bindings::wharf::plugin::types as wt;
use crate::component::{CallContext, CallError, CompiledCode, HeldAdapter, Kind, PluginVersion, SentHistory};
use crate::state::HostState;

/// A tool served by a component.
pub struct ComponentTool {
    version: Arc<PluginVersion>,
    plugin: PluginRef,
    spec: ToolSpec,
    /// The tools its calls may call (grant `tools`).
    reach: Option<ToolReach>,
}

impl Tool for ComponentTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn reach(&self) -> Option<&ToolReach> {
        self.reach.as_ref()
    }

    fn yield_window(&self) -> Option<std::time::Duration> {
        self.version.effective.yield_ms.map(std::time::Duration::from_millis)
    }

    fn durable(&self) -> bool {
        self.version.effective.durable
    }

    fn plugin(&self) -> &PluginRef {
        &self.plugin
    }

    fn call(&self, call: ToolInvocation, cancel: CancellationToken) -> BoxFuture<'_, ToolOutcome> {
        Box::pin(async move {
            let ctx = CallContext {
                session_id: call.session_id,
                call_id: call.call_id,
                workspace: call.workspace,
                services: call.services,
            };
            let args = call.arguments.to_string();
            tokio::select! {
                res = self.version.call_tool(&self.spec.name, &args, &ctx) => match res {
                    Ok(o) => o,
                    Err(e) => ToolOutcome::error(e.code, e.message),
                },
                _ = cancel.cancelled() => ToolOutcome::error(ToolErrorCode::Aborted, "the call was cancelled"),
            }
        })
    }
}

/// The registrations of one loaded version: a tool per tool spec, the
/// adapter, policy and hooks for the kinds it exports.
pub fn of_version(version: &Arc<PluginVersion>) -> Registrations {
    let plugin = version.plugin_ref();
    let mut regs = Registrations::default();
    let reach = match &version.effective.tools {
        crate::grants::ToolsGrant::None => None,
        crate::grants::ToolsGrant::All => Some(ToolReach::All),
        crate::grants::ToolsGrant::Only(names) => Some(ToolReach::Only(names.clone())),
    };
    for spec in &version.tools {
        regs.tools.push(Arc::new(ComponentTool {
            version: version.clone(),
            plugin: plugin.clone(),
            spec: spec.clone(),
            reach: reach.clone(),
        }));
    }
    if version.kinds.contains(&Kind::Llm) {
        regs.llm = Some(Arc::new(ComponentLlm {
            version: version.clone(),
            plugin: plugin.clone(),
            wit_tools: std::sync::Mutex::default(),
        }));
    }
    if version.kinds.contains(&Kind::Compactor) {
        regs.compactor = Some(Arc::new(ComponentCompactor { version: version.clone(), plugin: plugin.clone() }));
    }
    if version.kinds.contains(&Kind::Policy) {
        regs.policy = Some(Arc::new(ComponentPolicy { version: version.clone(), plugin: plugin.clone() }));
    }
    if version.kinds.contains(&Kind::Hooks) {
        regs.hooks = Some(Arc::new(ComponentHooks {
            version: version.clone(),
            plugin: plugin.clone(),
            subs: version.hook_subscriptions.clone(),
        }));
        for s in &version.prompt_sections {
            regs.prompt_sections.push(PromptSection {
                id: s.0.clone(),
                order: s.1,
                text: s.2.clone(),
                plugin: plugin.clone(),
            });
        }
    }
    if version.kinds.contains(&Kind::Skills) {
        // The catalog goes into the system prompt (wrapping the version's own hooks, if any).
        let own = regs.hooks.take();
        regs.hooks = Some(Arc::new(crate::skills::SkillsHook::new(version.clone(), plugin.clone(), own)));
    }
    regs
}

/// A history compactor served by a component.
pub struct ComponentCompactor {
    version: Arc<PluginVersion>,
    plugin: PluginRef,
}

impl Compactor for ComponentCompactor {
    fn plugin(&self) -> &PluginRef {
        &self.plugin
    }

    fn summarize(
        &self,
        messages: Vec<Message>,
        target_tokens: u32,
        services: Arc<dyn SessionServices>,
    ) -> BoxFuture<'_, Result<String, PluginError>> {
        Box::pin(async move {
            let msgs: Vec<wt::Message> = messages.iter().map(to_wit_message).collect();
            self.version.call_compactor(&msgs, target_tokens, services).await
        })
    }
}

/// A model adapter served by a component.
pub struct ComponentLlm {
    version: Arc<PluginVersion>,
    plugin: PluginRef,
    /// The last tool listing lowered, as the contract's specs: sessions on
    /// one registry snapshot share the listing (`LlmRequest::tools`), so
    /// most steps reuse it instead of serializing every schema again. The
    /// listing is held, so its address is not reused while it is the key.
    wit_tools: std::sync::Mutex<Option<KeptListing>>,
}

/// A tool listing and its lowering ([`ComponentLlm`]).
type KeptListing = (Arc<[ToolSpec]>, Vec<wt::ToolSpec>);

/// A core message as the contract's.
pub(crate) fn to_wit_message(m: &Message) -> wt::Message {
    wt::Message {
        role: match m.role {
            Role::System => wt::Role::System,
            Role::User => wt::Role::User,
            Role::Assistant => wt::Role::Assistant,
            Role::Tool => wt::Role::Tool,
        },
        content: m.content.clone(),
        reasoning: m.reasoning.clone(),
        tool_calls: m
            .tool_calls
            .iter()
            .map(|c| wt::ToolCall { id: c.id.clone(), name: c.name.clone(), arguments: c.arguments.clone() })
            .collect(),
        tool_call_id: m.tool_call_id.clone(),
    }
}

fn to_wit_spec(s: &ToolSpec) -> wt::ToolSpec {
    wt::ToolSpec {
        name: s.name.clone(),
        description: s.description.clone(),
        input_schema: s.input_schema.to_string(),
        mode: match s.mode {
            wharf_core::plugin::ToolMode::Parallel => wt::ToolMode::Parallel,
            wharf_core::plugin::ToolMode::Exclusive => wt::ToolMode::Exclusive,
        },
    }
}

fn from_wit_error(e: ex::llm::Error) -> LlmError {
    use ex::llm::ErrorCode as C;
    let code = match e.code {
        C::Auth => LlmErrorCode::Auth,
        C::Quota => LlmErrorCode::Quota,
        C::RateLimit => LlmErrorCode::RateLimit,
        C::ContextWindowExceeded => LlmErrorCode::ContextWindowExceeded,
        C::InvalidRequest => LlmErrorCode::InvalidRequest,
        C::Server => LlmErrorCode::Server,
        C::Transport => LlmErrorCode::Transport,
        C::Timeout => LlmErrorCode::Timeout,
        C::Aborted => LlmErrorCode::Aborted,
        C::StreamClosed => LlmErrorCode::StreamClosed,
        C::MalformedResponse => LlmErrorCode::MalformedResponse,
        C::EmptyResponse => LlmErrorCode::EmptyResponse,
    };
    LlmError { code, message: e.message, http_status: e.http_status, retry_after_ms: e.retry_after_ms }
}

fn from_wit_event(e: ex::llm::Event) -> LlmEvent {
    use ex::llm::Event as E;
    match e {
        E::Text(t) => LlmEvent::Text(t),
        E::Reasoning(t) => LlmEvent::Reasoning(t),
        E::ToolCall(c) => LlmEvent::ToolCall(ToolCall { id: c.id, name: c.name, arguments: c.arguments }),
        E::Usage(u) => LlmEvent::Usage(Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            cache_hit_tokens: u.cache_hit_tokens,
            cache_miss_tokens: u.cache_miss_tokens,
            reasoning_tokens: u.reasoning_tokens,
        }),
        E::Finish(f) => LlmEvent::Finish(match f {
            ex::llm::FinishReason::Stop => FinishReason::Stop,
            ex::llm::FinishReason::ToolCalls => FinishReason::ToolCalls,
            ex::llm::FinishReason::MaxTokens => FinishReason::MaxTokens,
            ex::llm::FinishReason::ContentFilter => FinishReason::ContentFilter,
            ex::llm::FinishReason::Retryable => FinishReason::Retryable,
        }),
    }
}

/// A sandbox failure during a model request, as an LLM error.
fn sandbox_to_llm(e: CallError) -> LlmError {
    let code = match e.code {
        ToolErrorCode::Timeout => LlmErrorCode::Timeout,
        _ => LlmErrorCode::Server,
    };
    LlmError::new(code, format!("adapter {}: {}", e.code, e.message))
}

impl LlmAdapter for ComponentLlm {
    fn plugin(&self) -> &PluginRef {
        &self.plugin
    }

    fn model(&self) -> ModelInfo {
        self.version.model_info.clone().unwrap_or(ModelInfo { model: "unknown".into(), context_window: 0 })
    }

    fn image_support(&self) -> Option<wharf_core::images::ImageSupport> {
        self.version.image_support.clone()
    }

    fn start<'a>(&'a self, request: &'a LlmRequest) -> BoxFuture<'a, Result<Box<dyn LlmStream>, LlmError>> {
        Box::pin(self.start_with(request, None))
    }

    fn start_in<'a>(
        &'a self,
        request: &'a LlmRequest,
        scope: &'a Arc<AdapterScope>,
    ) -> BoxFuture<'a, Result<Box<dyn LlmStream>, LlmError>> {
        Box::pin(self.start_with(request, Some(scope)))
    }
}

impl ComponentLlm {
    /// `tools` as the contract's specs, from the kept copy when it is the
    /// same listing.
    fn wit_tools(&self, tools: &Arc<[ToolSpec]>) -> Vec<wt::ToolSpec> {
        let mut kept = self.wit_tools.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((key, specs)) = kept.as_ref()
            && Arc::ptr_eq(key, tools)
        {
            return specs.clone();
        }
        let specs: Vec<wt::ToolSpec> = tools.iter().map(to_wit_spec).collect();
        *kept = Some((tools.clone(), specs.clone()));
        specs
    }

    /// Starts a completion, on the instance `scope` holds when it is this
    /// version's; a stream that ends cleanly leaves its instance there.
    async fn start_with(
        &self,
        request: &LlmRequest,
        scope: Option<&Arc<AdapterScope>>,
    ) -> Result<Box<dyn LlmStream>, LlmError> {
        // The messages are lowered by `start_completion`: all of them, or
        // only those the held instance does not have yet.
        let req = ex::llm::Request {
            system: request.system.clone(),
            messages: Vec::new(),
            tools: self.wit_tools(&request.tools),
            max_tokens: request.max_tokens,
        };
        // Images are lowered only to an adapter that declared support, and
        // only within the host's bounds and its own.
        if !request.images.is_empty() {
            let support = self.version.image_support.as_ref().ok_or_else(|| {
                LlmError::new(
                    LlmErrorCode::InvalidRequest,
                    format!("the model adapter `{}` takes text only (no images)", self.plugin.id),
                )
            })?;
            // Each image on its own: the per-prompt bounds were checked
            // when each prompt was taken, the history may hold several.
            for i in &request.images {
                wharf_core::images::check_prompt_images(std::slice::from_ref(&i.image), Some(support))
                    .map_err(|e| LlmError::new(LlmErrorCode::InvalidRequest, format!("{}: {e}", self.plugin.id)))?;
            }
        }
        let images = request
            .images
            .iter()
            .map(|i| ex::llm_images::Image {
                message: i.message,
                mime_type: i.image.mime_type.clone(),
                data: i.image.data.clone(),
            })
            .collect();
        // Another adapter's instance (the turn switched models) is dropped.
        let held = scope.and_then(|s| s.take()).and_then(|b| b.downcast::<HeldAdapter>().ok()).map(|b| *b);
        let started =
            self.version.start_completion(req, &request.messages, request.history, images, held).await.map_err(
                |e| match e {
                    StartError::Sandbox(e) => sandbox_to_llm(e),
                    StartError::Adapter(e) => from_wit_error(e),
                },
            )?;
        let timeout_ms = self.version.effective.timeout_ms;
        Ok(Box::new(ComponentStream {
            store: Some(started.store),
            guest: started.guest,
            handle: Some(started.handle),
            timeout_ms,
            keep: scope.map(|s| (s.clone(), self.version.clone(), started.code)),
            sent: started.sent,
        }) as Box<dyn LlmStream>)
    }
}

/// Why a completion could not start.
pub enum StartError {
    /// The sandbox failed (trap, limit).
    Sandbox(CallError),
    /// The adapter returned an error.
    Adapter(ex::llm::Error),
}

/// An in-flight completion: one store kept for the whole stream.
struct ComponentStream {
    /// `None` once handed back to the scope.
    store: Option<Store<HostState>>,
    guest: crate::component::LlmGuests,
    handle: Option<ResourceAny>,
    timeout_ms: u64,
    /// Where a clean end leaves the instance: the turn's scope, the
    /// version and the code it ran.
    keep: Option<(Arc<AdapterScope>, Arc<PluginVersion>, Arc<CompiledCode>)>,
    /// The conversation the instance holds (handed back with it).
    sent: SentHistory,
}

impl ComponentStream {
    /// The stream ended cleanly: its completion is dropped in the guest and
    /// the instance left in the turn's scope (when the budget allows).
    async fn hand_back(&mut self, handle: ResourceAny) {
        let Some((scope, version, code)) = self.keep.take() else { return };
        let Some(mut store) = self.store.take() else { return };
        store.data_mut().begin_call(self.timeout_ms);
        let wall = store.data().wall_deadline();
        // A guest that traps or hangs in its destructor is not kept.
        let dropped = {
            let drop = std::pin::pin!(handle.resource_drop_async(&mut store));
            tokio::time::timeout_at(wall, drop).await
        };
        if !matches!(dropped, Ok(Ok(()))) {
            return;
        }
        store.data_mut().flush_stdio();
        if let Some(held) = version.hold_adapter(store, self.guest.clone(), code, std::mem::take(&mut self.sent)) {
            scope.put(Box::new(held));
        }
    }
}

impl LlmStream for ComponentStream {
    fn next(&mut self) -> BoxFuture<'_, Result<Option<Vec<LlmEvent>>, LlmError>> {
        Box::pin(async move {
            let Some(handle) = self.handle else { return Ok(None) };
            let Some(store) = self.store.as_mut() else { return Ok(None) };
            store.data_mut().begin_call(self.timeout_ms);
            let wall = store.data().wall_deadline();
            let completion = self.guest.llm.completion();
            let res = {
                let next = std::pin::pin!(completion.call_next(&mut *store, handle));
                tokio::time::timeout_at(wall, next).await
            };
            let out = match res {
                Err(_) => Err(LlmError::new(LlmErrorCode::Timeout, "adapter call timed out")),
                Ok(Err(e)) => Err(sandbox_to_llm(crate::component::classify_error(&e, store.data()))),
                Ok(Ok(Err(e))) => Err(from_wit_error(e)),
                Ok(Ok(Ok(None))) => Ok(None),
                Ok(Ok(Ok(Some(events)))) => Ok(Some(events.into_iter().map(from_wit_event).collect())),
            };
            store.data_mut().flush_stdio();
            match &out {
                Ok(None) => {
                    self.handle = None;
                    self.hand_back(handle).await;
                }
                Err(_) => self.handle = None,
                Ok(Some(_)) => {}
            }
            out
        })
    }
}

/// A policy served by a component.
pub struct ComponentPolicy {
    version: Arc<PluginVersion>,
    plugin: PluginRef,
}

impl Policy for ComponentPolicy {
    fn plugin(&self) -> &PluginRef {
        &self.plugin
    }

    fn evaluate(&self, request: PolicyRequest) -> BoxFuture<'_, Result<Decision, PluginError>> {
        Box::pin(self.decide(request, None))
    }

    fn asks(&self) -> Option<std::time::Duration> {
        // The row's own deadline, and a margin over it so the sandbox's
        // deadline (and the `cancel` before it) fires first.
        self.version
            .effective
            .questions
            .then(|| std::time::Duration::from_millis(self.version.effective.timeout_ms.saturating_add(1000)))
    }

    fn evaluate_asking(
        &self,
        request: PolicyRequest,
        services: Arc<dyn wharf_core::plugin::SessionServices>,
    ) -> BoxFuture<'_, Result<(Decision, Option<PluginRef>), PluginError>> {
        Box::pin(async move { self.decide(request, Some(services)).await.map(|d| (d, None)) })
    }
}

impl ComponentPolicy {
    async fn decide(
        &self,
        request: PolicyRequest,
        services: Option<Arc<dyn wharf_core::plugin::SessionServices>>,
    ) -> Result<Decision, PluginError> {
        let req = ex::policy::Request {
            tool: request.tool,
            plugin: request.plugin,
            arguments: request.arguments.to_string(),
            session_id: request.session_id,
            agent_depth: request.agent_depth,
            workspace: request.workspace,
        };
        let d = self
            .version
            .call_policy(req, services)
            .await
            .map_err(|e| PluginError::failed(e.code.clone(), format!("policy {}: {e}", self.plugin.id)))?;
        Ok(match d {
            ex::policy::Decision::Allow => Decision::Allow,
            ex::policy::Decision::Deny(reason) => Decision::Deny { reason },
            ex::policy::Decision::Ask(reason) => Decision::Ask { reason },
            ex::policy::Decision::Rewrite(args) => match serde_json::from_str::<serde_json::Value>(&args) {
                Ok(v) if v.is_object() => Decision::Rewrite { args: v },
                _ => {
                    return Err(PluginError::Answer(format!(
                        "policy {}: rewrite is not a JSON object",
                        self.plugin.id
                    )));
                }
            },
        })
    }
}

/// Hook listeners served by a component.
pub struct ComponentHooks {
    version: Arc<PluginVersion>,
    plugin: PluginRef,
    subs: Vec<(HookPoint, i32)>,
}

/// Maps core hook points to WIT ones.
pub fn to_wit_point(p: HookPoint) -> ex::hooks::HookPoint {
    use ex::hooks::HookPoint as W;
    match p {
        HookPoint::SystemPrompt => W::SystemPrompt,
        HookPoint::AgentPreStep => W::AgentPreStep,
        HookPoint::AgentRequest => W::AgentRequest,
        HookPoint::AgentRequestError => W::AgentRequestError,
        HookPoint::AgentTurnStopping => W::AgentTurnStopping,
        HookPoint::ToolsPreExecute => W::ToolsPreExecute,
        HookPoint::ToolsPostExecute => W::ToolsPostExecute,
        HookPoint::ToolsResult => W::ToolsResult,
        HookPoint::SessionEvent => W::SessionEvent,
    }
}

/// Maps WIT hook points to core ones.
pub fn from_wit_point(p: ex::hooks::HookPoint) -> HookPoint {
    use ex::hooks::HookPoint as W;
    match p {
        W::SystemPrompt => HookPoint::SystemPrompt,
        W::AgentPreStep => HookPoint::AgentPreStep,
        W::AgentRequest => HookPoint::AgentRequest,
        W::AgentRequestError => HookPoint::AgentRequestError,
        W::AgentTurnStopping => HookPoint::AgentTurnStopping,
        W::ToolsPreExecute => HookPoint::ToolsPreExecute,
        W::ToolsPostExecute => HookPoint::ToolsPostExecute,
        W::ToolsResult => HookPoint::ToolsResult,
        W::SessionEvent => HookPoint::SessionEvent,
    }
}

impl Hook for ComponentHooks {
    fn plugin(&self) -> &PluginRef {
        &self.plugin
    }

    fn subscriptions(&self) -> &[(HookPoint, i32)] {
        &self.subs
    }

    fn handle(&self, point: HookPoint, payload: serde_json::Value) -> BoxFuture<'_, Result<HookOutcome, PluginError>> {
        Box::pin(async move {
            let out = self
                .version
                .call_hook(to_wit_point(point), payload.to_string())
                .await
                .map_err(|e| PluginError::failed(e.code.clone(), format!("hook {}: {e}", self.plugin.id)))?;
            Ok(match out {
                ex::hooks::Outcome::Pass => HookOutcome::Pass,
                ex::hooks::Outcome::Reject(r) => HookOutcome::Reject(r),
                ex::hooks::Outcome::Replace(v) => HookOutcome::Replace(serde_json::from_str(&v).map_err(|e| {
                    PluginError::Answer(format!("hook {}: replacement is not JSON: {e}", self.plugin.id))
                })?),
            })
        })
    }
}
