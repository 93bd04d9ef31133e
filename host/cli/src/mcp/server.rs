//! `wharf mcp serve`: the profile's component tools over MCP (stdio).
//!
//! `tools/list` lists the tools of the loaded components (imported
//! `mcp__…` tools are not re-exported); `tools/call` runs one call through
//! the same tool pipeline as the agent loop — argument guards, hooks,
//! policies, approval (headless: the profile's `agent.ask` rule), the
//! component's sandbox and limits — so a denied call is an MCP tool error
//! (`isError: true`, the pipeline's message as text, the error code in
//! `_meta["wharf/error_code"]`). An unknown tool is a protocol error
//! (-32602).
//!
//! Every call is recorded in a session (printed on stderr at the end) as one
//! turn: `turn/start`, `step/start`, an `assistant/message` carrying the call,
//! the pipeline's events, `step/end`, `turn/end`. Calls are serialized so
//! turns never overlap. A `notifications/cancelled` cancels the call's turn.
//! When a component is hot-reloaded the server sends
//! `notifications/tools/list_changed`.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Result;
use clap::Args;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListToolsResult, MetaObject,
    PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;
use wharf_core::events::{AssistantMessage, EventKind, StepEnd, StepStart, StopReason, TurnEnd, TurnStart};
use wharf_core::pipeline::{StepRef, ToolPipeline};
use wharf_core::plugin::{FinishReason, ToolCall};
use wharf_core::registry::Registry;
use wharf_core::store::SessionLog;

use super::client::TOOL_PREFIX;
use crate::host_ctx::{HostArgs, HostCtx};

/// Arguments of `wharf mcp serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub host: HostArgs,
}

struct Inner {
    registry: Arc<Registry>,
    pipeline: ToolPipeline,
    log: SessionLog,
    turn_lock: tokio::sync::Mutex<()>,
    next_call: AtomicU64,
}

/// The MCP server handler.
#[derive(Clone)]
pub struct WharfServer {
    inner: Arc<Inner>,
}

impl WharfServer {
    fn exported(name: &str) -> bool {
        !name.starts_with(TOOL_PREFIX)
    }

    /// Runs one call as a turn of the session.
    async fn run_call(
        &self,
        name: &str,
        arguments: Value,
        cancel: CancellationToken,
    ) -> Result<CallToolResult, McpError> {
        let inner = &self.inner;
        let snap = inner.registry.snapshot();
        if !Self::exported(name) || !snap.tools.contains_key(name) {
            let names: Vec<&str> = snap.tools.keys().map(String::as_str).filter(|n| Self::exported(n)).collect();
            return Err(McpError::invalid_params(format!("unknown tool `{name}`; tools: {}", names.join(", ")), None));
        }
        let internal = |e: wharf_core::StoreError| McpError::internal_error(format!("session log: {e}"), None);
        let _turn = inner.turn_lock.lock().await;
        let log = &inner.log;
        let turn = log.last_turn() + 1;
        let at = StepRef { turn, step: 1 };
        let call = ToolCall {
            id: format!("mcp_{}", inner.next_call.fetch_add(1, Ordering::Relaxed)),
            name: name.to_string(),
            arguments: arguments.to_string(),
        };
        log.append(EventKind::TurnStart(TurnStart { turn })).map_err(internal)?;
        log.append(EventKind::StepStart(StepStart { turn, step: 1 })).map_err(internal)?;
        log.append(EventKind::AssistantMessage(AssistantMessage {
            turn,
            step: 1,
            content: String::new(),
            reasoning: None,
            tool_calls: vec![call.clone()],
            usage: None,
            finish: Some(FinishReason::ToolCalls),
            interrupted: false,
        }))
        .map_err(internal)?;
        let results = inner.pipeline.run(&snap, at, std::slice::from_ref(&call), &cancel).await;
        let reason = if cancel.is_cancelled() { StopReason::Cancelled } else { StopReason::Completed };
        let close = log
            .append(EventKind::StepEnd(StepEnd { turn, step: 1, usage: None }))
            .and_then(|_| log.append(EventKind::TurnEnd(TurnEnd { turn, reason })));
        let results = results.map_err(internal)?;
        close.map_err(internal)?;
        let Some(r) = results.into_iter().next() else {
            return Err(McpError::internal_error("the pipeline returned no result", None));
        };
        let mut meta = Map::new();
        if let Some(code) = &r.error_code {
            meta.insert("wharf/error_code".into(), json!(code));
        }
        if let Some(p) = &r.plugin {
            meta.insert("wharf/plugin".into(), json!(p));
        }
        if let Some(v) = &r.version {
            meta.insert("wharf/version".into(), json!(v));
        }
        meta.insert("wharf/session".into(), json!(log.id()));
        meta.insert("wharf/call_id".into(), json!(call.id));
        let content = vec![ContentBlock::text(r.content)];
        let mut out = if r.is_error { CallToolResult::error(content) } else { CallToolResult::success(content) };
        out.meta = Some(MetaObject(meta));
        Ok(out)
    }
}

impl ServerHandler for WharfServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_tool_list_changed().build())
            .with_server_info(Implementation::new("wharf", env!("CARGO_PKG_VERSION")))
            .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
            .with_instructions(
                "Wharf's tools: each runs in a sandboxed WebAssembly component and is checked by the profile's \
                 policies before it runs.",
            )
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::LATEST_WITH_INITIALIZE))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let snap = self.inner.registry.snapshot();
        let tools = snap
            .tools
            .values()
            .filter(|t| Self::exported(&t.spec().name))
            .map(|t| {
                let spec = t.spec();
                let schema = match &spec.input_schema {
                    Value::Object(m) => m.clone(),
                    _ => Map::from_iter([("type".to_string(), json!("object"))]),
                };
                rmcp::model::Tool::new(spec.name.clone(), spec.description.clone(), Arc::new(schema))
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let args = request.arguments.map(Value::Object).unwrap_or_else(|| json!({}));
        self.run_call(&request.name, args, context.ct.clone()).await.map(CallToolResponse::from)
    }
}

/// Runs `wharf mcp serve`.
pub async fn serve(args: ServeArgs) -> Result<ExitCode> {
    // The profile's own MCP servers are not started: their tools would not be
    // re-exported anyway, and a profile listing `wharf mcp serve` itself as a
    // server would otherwise start itself recursively.
    let host = HostCtx::start_with(&args.host, |config| {
        config.mcp.clear();
        Ok(())
    })
    .await?;
    let approver = host.headless_approver();
    let (agent, _) = host.open_agent(None, approver.clone(), None)?;
    let log = agent.log().clone();
    let pipeline = ToolPipeline::new(log.clone(), agent.bus().clone(), approver, host.agent_config(None).pipeline);
    let server = WharfServer {
        inner: Arc::new(Inner {
            registry: host.plugins.registry().clone(),
            pipeline,
            log: log.clone(),
            turn_lock: tokio::sync::Mutex::new(()),
            next_call: AtomicU64::new(1),
        }),
    };
    let running = server.serve(rmcp::transport::stdio()).await?;
    // Hot reloads change the tool list.
    let peer = running.peer().clone();
    let mut changes = host.plugins.subscribe();
    let notifier = tokio::spawn(async move {
        loop {
            match changes.recv().await {
                Ok(EventKind::PluginLoaded(_) | EventKind::PluginUnloaded(_)) => {
                    if let Err(e) = peer.notify_tool_list_changed().await {
                        tracing::debug!("cannot send tools/list_changed: {e}");
                    }
                }
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    });
    let quit = running.waiting().await;
    notifier.abort();
    log.flush().await?;
    tracing::info!("MCP client gone: {quit:?}");
    eprintln!("wharf mcp: session {} · log {}", log.id(), log.path().display());
    Ok(ExitCode::SUCCESS)
}
