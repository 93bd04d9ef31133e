//! `wharf mcp serve`: the profile's component tools over MCP (stdio, or
//! Streamable HTTP with `--http ADDR`).
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
//! Every call is recorded in a session (printed on stderr at the end; opened
//! at the first call, so a run without calls leaves none) as one turn: `turn/start`, `step/start`, an `assistant/message` carrying the call,
//! the pipeline's events, `step/end`, `turn/end`. Calls are serialized so
//! turns never overlap (a call held for an answer or run as a task keeps its
//! turn). A `notifications/cancelled` cancels the call's turn. When the
//! server stops, held calls and unfinished tasks are cancelled first.
//! When a component is hot-reloaded the server sends
//! `notifications/tools/list_changed`.
//!
//! **Protocol versions.** MCP 2026-07-28 and every earlier revision rmcp
//! knows (2024-11-05 to 2025-11-25), on stdio and Streamable HTTP, chosen
//! by what the client asks for:
//!
//! - an `initialize` naming 2025-11-25 or older gets that version back; one
//!   naming 2026-07-28 (which has no handshake) or an unknown version gets
//!   2025-11-25, the newest revision with a handshake;
//! - a request carrying the 2026-07-28 lifecycle in its `_meta`
//!   (`io.modelcontextprotocol/protocolVersion`, `…/clientCapabilities`) is
//!   served without a handshake, over HTTP without a session
//!   (`Mcp-Session-Id`); `server/discover` lists the supported versions;
//!   a version outside them is refused (`-32022`, naming the supported ones),
//!   as is a 2026-07-28 request missing that `_meta`;
//! - hot reloads reach a 2026-07-28 client as `tools/list_changed` on its
//!   `subscriptions/listen` stream, an older one as a plain notification.
//!
//! **A component's question** (the `wharf:plugin/questions` import) reaches
//! the client that made the call (`ask.rs`); approvals stay headless
//! (the profile's `agent.ask` rule):
//!
//! - a client with a handshake (2025-11-25 or older) that declared
//!   `elicitation` (form; `{}` counts as form) gets a server→client
//!   `elicitation/create` (form mode) tied to its `tools/call`; its
//!   `accept` (content checked against the form, else `cancel`), `decline`
//!   or `cancel` goes back to the component. When the call ends first the
//!   request is withdrawn (`notifications/cancelled`);
//! - a 2026-07-28 client that declares `elicitation` in its request's
//!   capabilities gets the multi round-trip flow: the call runs on its own
//!   and a question ends the `tools/call` with `{"resultType":
//!   "input_required", "inputRequests": {"q1": {"method":
//!   "elicitation/create", "params": …}}, "requestState": "wharf-…"}`. The
//!   call is held under that `requestState` (random, 256 bits, one use,
//!   bound to the tool and arguments; at most [`MAX_HELD`] held). The retry —
//!   the same `tools/call` plus `requestState` and `inputResponses: {"q1":
//!   ElicitResult}` — answers it and waits for the final result (or the next
//!   `input_required`). An unknown, used or expired state, one for another
//!   call, or an answer that does not fit the form is refused (`-32602`; the
//!   held call keeps waiting for a good retry). The call's deadline bounds
//!   the wait: a call nobody answers ends `TIMEOUT` (the question logged
//!   cancelled) and its state expires;
//! - any other client: the question is declined, as headless.
//!
//! **Tasks** (the `io.modelcontextprotocol/tasks` extension, SEP-2663, as
//! rmcp 3.11 models it; `tasks.rs`), advertised in
//! `capabilities.extensions`: a `tools/call` of a client that declares the
//! extension (at `initialize`, or in a 2026-07-28 request's capabilities)
//! returns `{"resultType": "task", "taskId", "status": "working", …}` and
//! runs on (`statusMessage` `waiting for its turn`, then `running`: calls
//! still take turns). `tasks/get` reports `working`, `input_required` (the question
//! in `inputRequests`), then `completed` (the `CallToolResult` in
//! `result`), `failed` (`error`) or `cancelled`; `tasks/update`
//! (`inputResponses`) answers a question; `tasks/cancel` cancels the call
//! (a running component call ends `ABORTED`, a waiting one never starts).
//! At most 64 unfinished tasks (more is `-32600`); a finished result is kept
//! 10 minutes (its `ttlMs` says so). rmcp 3.11 has no `tasks/list` nor
//! `tasks/result` (the older draft's methods), so neither is offered.
//!
//! Not offered: URL elicitation, sampling, roots; resources, prompts,
//! logging.
//!
//! **JSON-RPC errors at the edge.** rmcp's stdio codec drops a line it
//! cannot decode without a reply (and answers some invalid requests without
//! an `id`), so every line from the client goes through a check of ours
//! first ([`check_line`]) and only lines rmcp can decode reach it: a line
//! that is not JSON gets `-32700` with `"id": null`; a JSON value that is
//! not a valid JSON-RPC 2.0 message (not an object — batches included —, no
//! or another `jsonrpc`, a `method` that is not a string, an `id` that is
//! not a string or number, `params` that are not an object or array, a
//! request rmcp's types reject) gets `-32600` with its `id`, or `null` when
//! it has none usable; a known method with params its type rejects gets
//! `-32602` (rmcp would take it as a custom request and answer `-32601`);
//! a well-formed notification or response rmcp cannot
//! decode is dropped (JSON-RPC never answers those). Lines longer than
//! 16 MiB are refused (`-32600`, `id` null) without being buffered whole.
//!
//! **Streamable HTTP** (`--http ADDR`, endpoint `/mcp`): rmcp's server
//! transport ([`StreamableHttpService`], one rmcp session per client) with
//! the same handler, so the same tools, pipeline, policies, approvals and
//! session log as stdio (calls of every HTTP client share the one session and
//! are serialized like stdio's). In front of it, the web UI's guard
//! ([`wharf_http_access::guard`]):
//!
//! - loopback only unless `--allow-remote` **and** a configured token;
//! - every request carries the token — `Authorization: Bearer TOKEN` (or
//!   `X-Wharf-Token: TOKEN`) — else 401 (with `WWW-Authenticate: Bearer`);
//!   the token is `--token` / `WHARF_MCP_TOKEN` (at least 16 characters), or
//!   a random one per launch printed on stderr;
//! - the `Host` header must name the server (`127.0.0.1:PORT`,
//!   `localhost:PORT`, `[::1]:PORT`, the bound address, an
//!   `--allowed-host`), else 403 (DNS rebinding);
//! - an `Origin` header on a POST, DELETE or event stream must be
//!   `http://` + that `Host` (`Sec-Fetch-Site: cross-site` is refused), else
//!   403: a web page cannot drive the server from a browser.
//!
//! **End of input** (stdio): every request read before the client closed
//! stdin is answered before the server exits — rmcp's input is closed only
//! once each forwarded request has its response (or the client cancelled
//! it), and the process waits for the answers to be written.
//!
//! Request bodies are capped at 4 MiB (413). A hot reload sends
//! `notifications/tools/list_changed` to every open HTTP session.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result, bail};
use clap::Args;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock, CreateTaskResult,
    GetTaskParams, GetTaskResult, Implementation, InputRequests, InputRequiredResult, ListToolsResult, MetaObject,
    PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig, SubscriptionFilter, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use wharf_core::Agent;
use wharf_core::events::{AssistantMessage, EventKind, StepEnd, StepStart, StopReason, TurnEnd, TurnStart};
use wharf_core::pipeline::StepRef;
use wharf_core::plugin::{FinishReason, ToolCall};
use wharf_core::question::{Form, Reply};
use wharf_core::store::SessionLog;

use wharf_cli_common::HostArgs;
use wharf_harness::Harness;
use wharf_mcp::TOOL_PREFIX;

use crate::ask::{self, Asked, Asker, Router};
use crate::tasks::Tasks;

/// Arguments of `wharf mcp serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    #[allow(missing_docs)] // flattened: the flags document themselves
    #[command(flatten)]
    pub host: HostArgs,
    /// Serve MCP Streamable HTTP on ADDR (`HOST:PORT`, or a port on
    /// 127.0.0.1; port 0 picks a free one) at `/mcp`, instead of stdio.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
    /// Bearer token of `--http` (default: a random one per launch, printed on
    /// stderr). Required with `--allow-remote`.
    #[arg(long, env = "WHARF_MCP_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Allow a non-loopback `--http` address.
    #[arg(long = "allow-remote")]
    pub allow_remote: bool,
    /// Another `Host` the HTTP server may be reached as (`name` or
    /// `name:port`; repeatable).
    #[arg(long = "allowed-host", value_name = "HOST")]
    pub allowed_hosts: Vec<String>,
}

/// The newest MCP revision served: rmcp 3.11 knows it, and versions up to
/// it are negotiated by what the client asks for (see the module docs).
pub const NEWEST_PROTOCOL: ProtocolVersion = ProtocolVersion::V_2026_07_28;

/// Largest HTTP request body taken from a client.
const MAX_HTTP_BODY: usize = 4 << 20;
/// Open HTTP sessions that get `tools/list_changed` (the oldest are dropped).
const MAX_PEERS: usize = 256;

struct Inner {
    host: Arc<Harness>,
    /// The session's approval service: approvals headless (the profile's
    /// `agent.ask` rule), questions to the calling client ([`ask`]).
    router: Arc<Router>,
    /// The session recording this run's calls, opened at the first call (a
    /// run without calls leaves no session behind).
    session: tokio::sync::OnceCell<Recording>,
    turn_lock: tokio::sync::Mutex<()>,
    next_call: AtomicU64,
    /// HTTP sessions to notify of tool-list changes (`None` on stdio, whose
    /// one peer is known from the start).
    peers: Option<std::sync::Mutex<Vec<Peer<RoleServer>>>>,
    /// Calls of 2026-07-28 clients waiting for the answer to a question,
    /// by their `requestState` (at most [`MAX_HELD`]).
    held: std::sync::Mutex<HashMap<String, Held>>,
    /// The Tasks extension's tasks.
    tasks: Tasks,
}

/// Most calls held waiting for a client's `input_required` retry; a
/// question past it is declined.
pub const MAX_HELD: usize = 64;

/// Longest `requestState` looked up (ours are 70 bytes).
const MAX_STATE: usize = 256;

/// A running call of a 2026-07-28 client, held between rounds of the
/// multi round-trip flow: the retry naming its `requestState` answers the
/// question and waits for what comes next.
struct Held {
    tool: String,
    arguments: Value,
    call: tokio::task::JoinHandle<Result<CallToolResult, McpError>>,
    questions: tokio::sync::mpsc::Receiver<Asked>,
    /// Cancels the call.
    cancel: CancellationToken,
    /// The open question: its key in `inputRequests`, the form, the answer.
    waiting: Option<(String, Form, tokio::sync::oneshot::Sender<Reply>)>,
    rounds: u32,
}

/// The session log of the calls and the agent whose pipeline (with the
/// session services a component's question needs) records into it.
struct Recording {
    agent: Agent,
    log: SessionLog,
}

impl Inner {
    /// The session of this run, opened on first use.
    async fn recording(&self) -> Result<&Recording, McpError> {
        self.session
            .get_or_try_init(|| async {
                let (agent, _) = self
                    .host
                    .open_agent(None, self.router.clone(), None)
                    .map_err(|e| McpError::internal_error(format!("cannot open the session log: {e:#}"), None))?;
                let log = agent.log().clone();
                Ok::<_, McpError>(Recording { agent, log })
            })
            .await
    }
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

    /// A protocol error (-32602) unless `name` is a tool offered here.
    fn check_tool(&self, name: &str) -> Result<(), McpError> {
        let snap = self.inner.host.plugins.registry().snapshot();
        if !Self::exported(name) || !snap.tools.contains_key(name) {
            let names: Vec<&str> = snap.tools.keys().map(String::as_str).filter(|n| Self::exported(n)).collect();
            return Err(McpError::invalid_params(format!("unknown tool `{name}`; tools: {}", names.join(", ")), None));
        }
        Ok(())
    }

    /// Runs one call as a turn of the session; its questions go to `asker`;
    /// `started` runs when it has its turn.
    async fn run_call(
        &self,
        name: &str,
        arguments: Value,
        cancel: CancellationToken,
        asker: Asker,
        started: Option<Box<dyn FnOnce() + Send>>,
    ) -> Result<CallToolResult, McpError> {
        let inner = &self.inner;
        self.check_tool(name)?;
        let internal = |e: wharf_core::StoreError| McpError::internal_error(format!("session log: {e}"), None);
        let recording = inner.recording().await?;
        // Calls take turns; one cancelled while waiting never starts.
        let _turn = tokio::select! {
            biased;
            () = cancel.cancelled() => {
                let mut out = CallToolResult::error(vec![ContentBlock::text("the call was cancelled before it started")]);
                out.meta = Some(MetaObject(Map::from_iter([(
                    "wharf/error_code".to_string(),
                    json!("ABORTED_BEFORE_DISPATCH"),
                )])));
                return Ok(out);
            }
            turn = inner.turn_lock.lock() => turn,
        };
        if let Some(started) = started {
            started();
        }
        let snap = inner.host.plugins.registry().snapshot();
        let log = &recording.log;
        let turn = log.last_turn() + 1;
        let at = StepRef { turn, step: 1 };
        let call = ToolCall {
            id: format!("mcp_{}", inner.next_call.fetch_add(1, Ordering::Relaxed)),
            name: name.to_string(),
            arguments: arguments.to_string(),
        };
        let _asker = inner.router.register(&call.id, asker);
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
        let results = recording.agent.pipeline().run(&snap, at, std::slice::from_ref(&call), &cancel).await;
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

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        let mut held = self.inner.held.lock().unwrap_or_else(|e| e.into_inner());
        // A held call that ended (at its deadline: nobody answered) is gone.
        held.retain(|_, h| !h.call.is_finished());
        held
    }

    /// Starts a call of a 2026-07-28 client that can answer forms: it runs
    /// on its own; a question it asks ends this request `input_required`.
    async fn call_with_rounds(
        &self,
        name: String,
        arguments: Value,
        ct: CancellationToken,
    ) -> Result<CallToolResponse, McpError> {
        let (ask_tx, questions) = tokio::sync::mpsc::channel(1);
        let cancel = CancellationToken::new();
        let this = self.clone();
        let (tool, args, stop) = (name.clone(), arguments.clone(), cancel.clone());
        let call = tokio::spawn(async move { this.run_call(&tool, args, stop, Asker::Channel(ask_tx), None).await });
        let held = Held { tool: name, arguments, call, questions, cancel, waiting: None, rounds: 0 };
        self.drive(held, ct).await
    }

    /// Waits for the held call's end (its result) or its next question (an
    /// `input_required` result; the call is held under a new
    /// `requestState`). `ct` (the client cancelling this request) cancels
    /// the call.
    async fn drive(&self, mut held: Held, ct: CancellationToken) -> Result<CallToolResponse, McpError> {
        let joined = |r: Result<Result<CallToolResult, McpError>, tokio::task::JoinError>| match r {
            Ok(r) => r.map(CallToolResponse::from),
            Err(e) => Err(McpError::internal_error(format!("the call failed: {e}"), None)),
        };
        loop {
            tokio::select! {
                r = &mut held.call => return joined(r),
                asked = held.questions.recv() => {
                    let Some(asked) = asked else { return joined((&mut held.call).await) };
                    let request = match ask::input_request(&asked.form) {
                        Ok(r) => r,
                        Err(e) => {
                            let _ = asked.reply.send(Reply::decline(ask::BY, e));
                            continue;
                        }
                    };
                    let state = match wharf_http_access::random_token() {
                        Ok(t) => format!("wharf-{t}"),
                        Err(e) => {
                            let _ = asked.reply.send(Reply::decline(ask::BY, format!("no requestState: {e}")));
                            continue;
                        }
                    };
                    let mut map = self.held();
                    if map.len() >= MAX_HELD {
                        let note = format!("{MAX_HELD} calls are already waiting for their clients' answers");
                        let _ = asked.reply.send(Reply::decline(ask::BY, note));
                        continue;
                    }
                    held.rounds += 1;
                    let key = format!("q{}", held.rounds);
                    held.waiting = Some((key.clone(), asked.form, asked.reply));
                    map.insert(state.clone(), held);
                    let requests = InputRequests::from([(key, request)]);
                    return Ok(InputRequiredResult::new(Some(requests), Some(state)).into());
                }
                () = ct.cancelled() => {
                    held.cancel.cancel();
                    return joined((&mut held.call).await);
                }
            }
        }
    }

    /// A 2026-07-28 client's retry of a `tools/call` that ended
    /// `input_required`: the answer goes to the held call, which runs on.
    async fn resume(
        &self,
        request: CallToolRequestParams,
        ct: CancellationToken,
    ) -> Result<CallToolResponse, McpError> {
        let Some(state) = request.request_state.as_deref() else {
            return Err(McpError::invalid_params(
                "`inputResponses` without `requestState`: retry with the `requestState` of the input_required result",
                None,
            ));
        };
        let unknown = || {
            McpError::invalid_params(
                "unknown or expired `requestState`: no call here waits for input under it (it was answered \
                 already, its call ended — a held call ends at its deadline —, or it was never issued here)",
                None,
            )
        };
        if state.len() > MAX_STATE {
            return Err(unknown());
        }
        let mut held = self.held().remove(state).ok_or_else(unknown)?;
        let put_back = |held: Held| {
            self.held().insert(state.to_string(), held);
        };
        let arguments = request.arguments.map(Value::Object).unwrap_or_else(|| json!({}));
        if held.tool != request.name || held.arguments != arguments {
            put_back(held);
            return Err(McpError::invalid_params(
                "this `requestState` belongs to a call of another tool or other arguments: retry the same call",
                None,
            ));
        }
        let Some((key, form, reply)) = held.waiting.take() else {
            put_back(held);
            return Err(unknown());
        };
        let answer = match request.input_responses.as_ref().and_then(|r| r.get(&key)) {
            None => Err(format!("`inputResponses` has no `{key}`")),
            Some(v) => ask::reply_of(v, &form).map_err(|e| format!("inputResponses.{key}: {e}")),
        };
        match answer {
            Ok(answer) => {
                let _ = reply.send(answer);
                self.drive(held, ct).await
            }
            Err(e) => {
                held.waiting = Some((key, form, reply));
                put_back(held);
                Err(McpError::invalid_params(e, None))
            }
        }
    }

    /// The server is stopping: calls held for an answer and unfinished
    /// tasks are cancelled, and the running call gets its cancellation
    /// grace to end (so the session log closes its turn).
    async fn stop_calls(&self) {
        let held: Vec<Held> = self.held().drain().map(|(_, h)| h).collect();
        for h in &held {
            h.cancel.cancel();
        }
        self.inner.tasks.cancel_all();
        let grace = self.inner.host.agent_config(None).pipeline.cancel_grace + std::time::Duration::from_secs(5);
        if tokio::time::timeout(grace, self.inner.turn_lock.lock()).await.is_err() {
            tracing::warn!("a cancelled call did not end in time");
        }
    }

    /// Starts a call as a task (`tasks.rs`).
    fn call_as_task(&self, name: String, arguments: Value) -> Result<CreateTaskResult, McpError> {
        let (task, cancel) = self.inner.tasks.create()?;
        let id = task.task_id.clone();
        let (ask_tx, mut questions) = tokio::sync::mpsc::channel(1);
        let this = self.clone();
        let inner = self.inner.clone();
        let started_id = id.clone();
        let started: Box<dyn FnOnce() + Send> = Box::new(move || inner.tasks.started(&started_id));
        let mut call = tokio::spawn(async move {
            this.run_call(&name, arguments, cancel, Asker::Channel(ask_tx), Some(started)).await
        });
        let inner = self.inner.clone();
        tokio::spawn(async move {
            let result = loop {
                tokio::select! {
                    r = &mut call => break r,
                    Some(asked) = questions.recv() => inner.tasks.asked(&id, asked),
                }
            };
            let result =
                result.unwrap_or_else(|e| Err(McpError::internal_error(format!("the call failed: {e}"), None)));
            inner.tasks.finish(&id, result);
        });
        Ok(CreateTaskResult::new(task))
    }
}

impl ServerHandler for WharfServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder().enable_tools().enable_tool_list_changed().enable_tasks().build(),
        )
        .with_server_info(Implementation::new("wharf", env!("CARGO_PKG_VERSION")))
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
        .with_instructions(
            "Wharf's tools: each runs in a sandboxed WebAssembly component and is checked by the profile's \
                 policies before it runs.",
        )
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if let Some(peers) = &self.inner.peers {
            let mut p = peers.lock().unwrap_or_else(|e| e.into_inner());
            p.retain(|peer| !peer.is_transport_closed());
            if p.len() >= MAX_PEERS {
                p.remove(0);
            }
            p.push(context.peer);
        }
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(ProtocolVersion::known_up_to(&NEWEST_PROTOCOL))
    }

    /// 2026-07-28 clients get `tools/list_changed` on a `subscriptions/listen`
    /// stream (older ones as plain notifications, see [`notify_reloads`]).
    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        (requested.tools_list_changed == Some(true)).then(|| SubscriptionFilter::builder().tools_list_changed().build())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let mut changes = self.inner.host.plugins.subscribe();
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                change = changes.recv() => match change {
                    Ok(EventKind::PluginLoaded(_) | EventKind::PluginUnloaded(_)) => {
                        if let Err(e) = context.sink().notify_tool_list_changed().await {
                            tracing::debug!("subscription closed: {e}");
                            return Ok(());
                        }
                    }
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(()),
                },
            }
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let snap = self.inner.host.plugins.registry().snapshot();
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
        if request.request_state.is_some() || request.input_responses.is_some() {
            return self.resume(request, context.ct.clone()).await;
        }
        let name = request.name.to_string();
        let args = request.arguments.map(Value::Object).unwrap_or_else(|| json!({}));
        self.check_tool(&name)?;
        let caps = context.client_capabilities();
        if caps.as_ref().is_some_and(|c| c.supports_tasks()) {
            return self.call_as_task(name, args).map(CallToolResponse::Task);
        }
        // Form elicitation: `elicitation: {}` means form (2025-11-25).
        let forms =
            caps.as_ref().and_then(|c| c.elicitation.as_ref()).is_some_and(|e| e.form.is_some() || e.url.is_none());
        let rounds = context.protocol_version().is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        if forms && rounds {
            return self.call_with_rounds(name, args, context.ct.clone()).await;
        }
        let asker = if forms {
            Asker::Elicit { peer: context.peer.clone(), origin: context.id.clone() }
        } else {
            Asker::Nobody
        };
        self.run_call(&name, args, context.ct.clone(), asker, None).await.map(CallToolResponse::from)
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        self.inner.tasks.get(&request.task_id).map(GetTaskResult::new)
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.inner.tasks.update(&request.task_id, &request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.inner.tasks.cancel(&request.task_id)
    }
}

/// Runs `wharf mcp serve`.
pub async fn serve(args: ServeArgs) -> Result<ExitCode> {
    // Checked before anything starts: a bad address or token fails fast.
    let http = match &args.http {
        Some(addr) => Some(check_http(addr, args.token.as_deref(), args.allow_remote)?),
        None => None,
    };
    // The profile's own MCP servers are not started: their tools would not be
    // re-exported anyway, and a profile listing `wharf mcp serve` itself as a
    // server would otherwise start itself recursively.
    let host = Harness::start_with(&args.host.options(), |config| {
        config.mcp.clear();
        Ok(())
    })
    .await?;
    let host = Arc::new(host);
    let server = WharfServer {
        inner: Arc::new(Inner {
            router: Router::new(host.headless_approver()),
            host: host.clone(),
            session: tokio::sync::OnceCell::new(),
            turn_lock: tokio::sync::Mutex::new(()),
            next_call: AtomicU64::new(1),
            peers: http.is_some().then(|| std::sync::Mutex::new(Vec::new())),
            held: std::sync::Mutex::new(HashMap::new()),
            tasks: Tasks::default(),
        }),
    };
    match http {
        Some((ip, port, token)) => serve_http(server.clone(), &host, &args, ip, port, token).await?,
        None => serve_stdio(server.clone(), &host).await?,
    }
    server.stop_calls().await;
    match server.inner.session.get() {
        Some(r) => {
            r.log.flush().await?;
            eprintln!("wharf mcp: session {} · log {}", r.log.id(), r.log.describe());
        }
        None => eprintln!("wharf mcp: no tool was called; no session recorded"),
    }
    Ok(ExitCode::SUCCESS)
}

/// Sends `tools/list_changed` to `peers()` on every hot reload, until the
/// plugin feed closes.
fn notify_reloads(
    host: &Harness,
    peers: impl Fn() -> Vec<Peer<RoleServer>> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let mut changes = host.plugins.subscribe();
    tokio::spawn(async move {
        loop {
            match changes.recv().await {
                Ok(EventKind::PluginLoaded(_) | EventKind::PluginUnloaded(_)) => {
                    for peer in peers() {
                        if let Err(e) = peer.notify_tool_list_changed().await {
                            tracing::debug!("cannot send tools/list_changed: {e}");
                        }
                    }
                }
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    })
}

async fn serve_stdio(server: WharfServer, host: &Harness) -> Result<()> {
    let (transport, written) = checked_stdio();
    let running = server.serve(transport).await?;
    // Hot reloads change the tool list.
    let peer = running.peer().clone();
    // A 2026-07-28 client (no `initialize`, so no peer info) hears of
    // changes only on a `subscriptions/listen` stream.
    let notifier =
        notify_reloads(host, move || if peer.peer_info().is_some() { vec![peer.clone()] } else { Vec::new() });
    let quit = running.waiting().await;
    notifier.abort();
    tracing::info!("MCP client gone: {quit:?}");
    // Every answer reaches stdout before the process exits.
    if tokio::time::timeout(std::time::Duration::from_secs(10), written).await.is_err() {
        tracing::warn!("timed out writing the last answers");
    }
    Ok(())
}

/// Checks `--http ADDR` and the token rules: the address and port to bind
/// and the configured token, if any.
fn check_http(addr: &str, token: Option<&str>, allow_remote: bool) -> Result<(IpAddr, u16, Option<String>)> {
    let (ip, port) = parse_addr(addr)?;
    let token = token.filter(|t| !t.is_empty()).map(str::to_string);
    if let Some(t) = &token {
        wharf_http_access::check_token(t)?;
    }
    if !ip.is_loopback() {
        if !allow_remote {
            bail!(
                "refusing to serve MCP on non-loopback address {ip}: its tools run on this machine; \
                 pass --allow-remote (with --token or WHARF_MCP_TOKEN) if you mean it"
            );
        }
        if token.is_none() {
            bail!("--allow-remote needs a configured token (--token or WHARF_MCP_TOKEN)");
        }
    }
    Ok((ip, port, token))
}

/// `HOST:PORT` (`localhost`, an IPv4 address, `[IPv6]`) or a bare port on 127.0.0.1.
fn parse_addr(addr: &str) -> Result<(IpAddr, u16)> {
    let addr = addr.trim();
    if let Ok(port) = addr.parse::<u16>() {
        return Ok((IpAddr::from([127, 0, 0, 1]), port));
    }
    let Some((h, p)) = addr.rsplit_once(':') else {
        bail!("--http `{addr}`: expected HOST:PORT (e.g. 127.0.0.1:8765) or a port");
    };
    let port: u16 = p.parse().with_context(|| format!("--http `{addr}`: bad port"))?;
    let ip: IpAddr = match h {
        "localhost" => IpAddr::from([127, 0, 0, 1]),
        h => h
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .with_context(|| format!("--http `{addr}`: not an IP address (or `localhost`)"))?,
    };
    Ok((ip, port))
}

async fn serve_http(
    server: WharfServer,
    host: &Harness,
    args: &ServeArgs,
    ip: IpAddr,
    port: u16,
    token: Option<String>,
) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(ip, port))
        .await
        .with_context(|| format!("cannot listen on {ip}:{port}"))?;
    let port = listener.local_addr()?.port();
    let configured = token.is_some();
    let token = match token {
        Some(t) => t,
        None => wharf_http_access::random_token()?,
    };
    let access = wharf_http_access::Access {
        token: token.clone(),
        hosts: wharf_http_access::allowed_hosts(ip, port, &args.allowed_hosts),
        // Every request needs a matching `Host`, remote or not.
        any_host: false,
        cookie: format!("wharf_mcp_token_{port}"),
    };
    let shutdown = CancellationToken::new();
    // Host and Origin are checked by the guard in front (rmcp's own checks
    // would refuse `--allowed-host` names).
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .disable_allowed_origins()
        .with_max_request_body_bytes(MAX_HTTP_BODY)
        .with_cancellation_token(shutdown.child_token());
    let handler = server.clone();
    let service =
        StreamableHttpService::new(move || Ok(handler.clone()), Arc::new(LocalSessionManager::default()), config);
    let router = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(access, wharf_http_access::guard))
        .layer(axum::middleware::map_response(www_authenticate));
    let shown = match ip {
        IpAddr::V4(v4) if v4.is_unspecified() => format!("127.0.0.1:{port}"),
        IpAddr::V4(v4) => format!("{v4}:{port}"),
        IpAddr::V6(v6) if v6.is_unspecified() => format!("[::1]:{port}"),
        IpAddr::V6(v6) => format!("[{v6}]:{port}"),
    };
    if configured {
        eprintln!("wharf mcp: serving MCP on http://{shown}/mcp (Authorization: Bearer <the configured token>)");
    } else {
        eprintln!("wharf mcp: serving MCP on http://{shown}/mcp (Authorization: Bearer {token})");
    }
    let inner = server.inner.clone();
    let notifier = notify_reloads(host, move || {
        let Some(peers) = &inner.peers else { return Vec::new() };
        let mut p = peers.lock().unwrap_or_else(|e| e.into_inner());
        p.retain(|peer| !peer.is_transport_closed());
        p.clone()
    });
    // Ctrl-C ends it cleanly (SIGTERM ends every command at once, in main).
    let stop = shutdown.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            stop.cancel();
        }
    });
    let graceful = shutdown.clone();
    let served = axum::serve(listener, router)
        .with_graceful_shutdown(async move { graceful.cancelled().await })
        .await
        .context("MCP HTTP server failed");
    shutdown.cancel();
    notifier.abort();
    served
}

/// A 401 names the scheme it wants (RFC 6750).
async fn www_authenticate(mut r: axum::response::Response) -> axum::response::Response {
    if r.status() == axum::http::StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(
            axum::http::header::WWW_AUTHENTICATE,
            axum::http::HeaderValue::from_static("Bearer realm=\"wharf\""),
        );
    }
    r
}

/// How long the requests read before the end of input may take to answer.
const LAST_ANSWERS: std::time::Duration = std::time::Duration::from_secs(600);

/// Longest line taken from the client.
const MAX_LINE: usize = 16 << 20;

/// JSON-RPC error codes.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const INVALID_PARAMS: i64 = -32602;

/// The client requests rmcp has types for: one of these that decodes only
/// as a custom request has params its type rejects (rmcp would answer
/// "method not found").
const KNOWN_REQUESTS: &[&str] = &[
    "ping",
    "initialize",
    "server/discover",
    "completion/complete",
    "logging/setLevel",
    "prompts/get",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/directory/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "subscriptions/listen",
    "tools/call",
    "tools/list",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "skills/list",
    "skills/get",
];

/// What to do with one line from the client.
#[derive(Debug, PartialEq)]
enum Line {
    /// Hand it to rmcp.
    Forward,
    /// Answer it with this error instead.
    Reply(Value),
    /// Drop it (a notification or response that cannot be used).
    Ignore,
}

fn rpc_error(id: Value, code: i64, message: impl Into<String>) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}})
}

/// Classifies one line (without its newline); see the module docs.
fn check_line(line: &[u8]) -> Line {
    let line = line.trim_ascii();
    if line.is_empty() {
        return Line::Ignore;
    }
    let v: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => return Line::Reply(rpc_error(Value::Null, PARSE_ERROR, format!("Parse error: {e}"))),
    };
    let Value::Object(m) = &v else {
        return Line::Reply(rpc_error(
            Value::Null,
            INVALID_REQUEST,
            "Invalid Request: expected a JSON-RPC object (batches are not supported)",
        ));
    };
    // A usable id is echoed; a missing or invalid one is answered as null.
    let (id, id_ok) = match m.get("id") {
        None => (Value::Null, true),
        Some(id @ (Value::String(_) | Value::Number(_))) => (id.clone(), true),
        Some(_) => (Value::Null, false),
    };
    let invalid = |why: &str| Line::Reply(rpc_error(id.clone(), INVALID_REQUEST, format!("Invalid Request: {why}")));
    if !id_ok {
        return invalid("`id` must be a string or a number");
    }
    if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid("`jsonrpc` must be \"2.0\"");
    }
    let decodes = || serde_json::from_value::<rmcp::model::ClientJsonRpcMessage>(v.clone());
    match m.get("method") {
        Some(Value::String(_)) => {
            if m.get("params").is_some_and(|p| !p.is_object() && !p.is_array()) {
                return invalid("`params` must be an object or an array");
            }
            match (m.contains_key("id"), decodes()) {
                (_, Ok(rmcp::model::JsonRpcMessage::Request(r)))
                    if matches!(&r.request, rmcp::model::ClientRequest::CustomRequest(c)
                        if KNOWN_REQUESTS.contains(&c.method.as_str())) =>
                {
                    let method = m.get("method").and_then(Value::as_str).unwrap_or("");
                    Line::Reply(rpc_error(id.clone(), INVALID_PARAMS, format!("Invalid params for `{method}`")))
                }
                (_, Ok(_)) => Line::Forward,
                (true, Err(e)) => invalid(&e.to_string()),
                (false, Err(e)) => {
                    tracing::debug!("dropping a notification rmcp cannot decode: {e}");
                    Line::Ignore
                }
            }
        }
        Some(_) => invalid("`method` must be a string"),
        None if m.contains_key("id") && (m.contains_key("result") ^ m.contains_key("error")) => match decodes() {
            Ok(_) => Line::Forward,
            Err(e) => {
                tracing::debug!("dropping a response rmcp cannot decode: {e}");
                Line::Ignore
            }
        },
        None => invalid("no `method` (nor a response's `result` or `error`)"),
    }
}

/// Reads one line of at most `cap` bytes (plus its newline) into `buf`.
/// `None` at the end of input; `Some(true)` when the line was longer (it
/// is consumed, not kept).
async fn read_line_capped<R: AsyncBufRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<Option<bool>> {
    buf.clear();
    let mut too_long = false;
    let mut any = false;
    loop {
        let chunk = r.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(any.then_some(too_long));
        }
        any = true;
        let (take, done) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if !too_long {
            let body = if done { take - 1 } else { take };
            if buf.len() + body > cap {
                too_long = true;
                buf.clear();
            } else {
                buf.extend_from_slice(&chunk[..body]);
            }
        }
        r.consume(take);
        if done {
            return Ok(Some(too_long));
        }
    }
}

/// Requests forwarded to rmcp and not answered yet, by the JSON text of
/// their id.
#[derive(Default)]
struct Pending {
    ids: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl Pending {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.ids.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes a line going to rmcp: a request waits for its answer; a
    /// `notifications/cancelled` withdraws the request it names.
    fn forwarded(&self, line: &[u8]) {
        let Ok(v) = serde_json::from_slice::<Value>(line) else { return };
        match (v.get("method").and_then(Value::as_str), v.get("id")) {
            (Some(_), Some(id)) => {
                self.lock().insert(id.to_string());
            }
            (Some("notifications/cancelled"), None) => {
                if let Some(id) = v.get("params").and_then(|p| p.get("requestId")) {
                    self.lock().remove(&id.to_string());
                }
            }
            _ => {}
        }
    }

    /// Notes a line rmcp wrote; `true` when it answered a request.
    fn answered(&self, line: &[u8]) -> bool {
        let Ok(v) = serde_json::from_slice::<Value>(line) else { return false };
        match (v.get("method"), v.get("id")) {
            (None, Some(id)) => self.lock().remove(&id.to_string()),
            _ => false,
        }
    }

    fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

/// stdio for rmcp behind [`check_line`]: a task reads the client's lines
/// and forwards the good ones into rmcp's input; one writer task sends
/// rmcp's output and our error replies, whole lines each. At the end of
/// input, rmcp's input closes once every forwarded request is answered (or
/// rmcp stopped). The returned handle ends when everything is written.
fn checked_stdio() -> ((tokio::io::DuplexStream, tokio::io::DuplexStream), tokio::task::JoinHandle<()>) {
    let (rmcp_in, mut feed) = tokio::io::duplex(1 << 16);
    let (rmcp_out, from_rmcp) = tokio::io::duplex(1 << 16);
    let (lines, mut out) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let pending = Arc::new(Pending::default());
    // Bumped at every answer; closed when rmcp's output ends.
    let (answer_tx, mut answers) = tokio::sync::watch::channel(());
    let written = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(line) = out.recv().await {
            if stdout.write_all(&line).await.is_err() || stdout.flush().await.is_err() {
                return;
            }
        }
    });
    let replies = lines.clone();
    let seen = pending.clone();
    tokio::spawn(async move {
        let mut reader = tokio::io::BufReader::new(from_rmcp);
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    if !line.ends_with(b"\n") {
                        line.push(b'\n');
                    }
                    let answer = seen.answered(&line);
                    // Queued for stdout before the reader of stdin may close
                    // rmcp's input.
                    if lines.send(std::mem::take(&mut line)).is_err() {
                        return;
                    }
                    if answer {
                        answer_tx.send_replace(());
                    }
                }
            }
        }
    });
    tokio::spawn(async move {
        let mut stdin = tokio::io::BufReader::new(tokio::io::stdin());
        let mut line = Vec::new();
        loop {
            let reply = match read_line_capped(&mut stdin, &mut line, MAX_LINE).await {
                Ok(None) | Err(_) => break,
                Ok(Some(true)) => Line::Reply(rpc_error(
                    Value::Null,
                    INVALID_REQUEST,
                    format!("Invalid Request: a line longer than {MAX_LINE} bytes"),
                )),
                Ok(Some(false)) => check_line(&line),
            };
            match reply {
                Line::Forward => {
                    pending.forwarded(&line);
                    line.push(b'\n');
                    if feed.write_all(&line).await.is_err() {
                        break;
                    }
                }
                Line::Reply(v) => {
                    let mut text = v.to_string().into_bytes();
                    text.push(b'\n');
                    if replies.send(text).is_err() {
                        break;
                    }
                }
                Line::Ignore => {}
            }
        }
        drop(replies);
        // End of input: the requests read so far are answered first (rmcp
        // would stop on its input closing and give up on slow handlers),
        // within the longest a tool call may take.
        let settled = async {
            while !pending.is_empty() {
                if answers.changed().await.is_err() {
                    break;
                }
            }
        };
        if tokio::time::timeout(LAST_ANSWERS, settled).await.is_err() {
            tracing::warn!("requests still unanswered at the end of input: giving up on them");
        }
        let _ = feed.shutdown().await;
    });
    ((rmcp_in, rmcp_out), written)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn code(line: &str) -> (i64, Value) {
        match check_line(line.as_bytes()) {
            Line::Reply(v) => (v["error"]["code"].as_i64().unwrap(), v["id"].clone()),
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn lines_are_checked_before_rmcp() {
        assert_eq!(code("{oops"), (PARSE_ERROR, Value::Null));
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":3}"#), (INVALID_REQUEST, json!(3)));
        assert_eq!(code(r#"{"id":"x","method":"ping"}"#), (INVALID_REQUEST, json!("x")));
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":[1],"method":"ping"}"#), (INVALID_REQUEST, Value::Null));
        assert_eq!(code(r#"{"jsonrpc":"2.0","method":1}"#), (INVALID_REQUEST, Value::Null));
        assert_eq!(code("[]"), (INVALID_REQUEST, Value::Null));
        assert_eq!(check_line(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#), Line::Forward);
        assert_eq!(check_line(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#), Line::Forward);
        assert_eq!(check_line(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#), Line::Forward);
        assert_eq!(check_line(b"  "), Line::Ignore);
        assert_eq!(
            code(r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":5}}"#),
            (INVALID_PARAMS, json!(4))
        );
        assert_eq!(check_line(br#"{"jsonrpc":"2.0","id":5,"method":"x/custom"}"#), Line::Forward);
    }

    #[tokio::test]
    async fn long_lines_are_consumed_not_kept() {
        let input = format!("{}\nnext\nlast", "x".repeat(100));
        let mut r = tokio::io::BufReader::with_capacity(8, input.as_bytes());
        let mut buf = Vec::new();
        assert_eq!(read_line_capped(&mut r, &mut buf, 10).await.unwrap(), Some(true));
        assert!(buf.is_empty());
        assert_eq!(read_line_capped(&mut r, &mut buf, 10).await.unwrap(), Some(false));
        assert_eq!(buf, b"next");
        assert_eq!(read_line_capped(&mut r, &mut buf, 10).await.unwrap(), Some(false));
        assert_eq!(buf, b"last");
        assert_eq!(read_line_capped(&mut r, &mut buf, 10).await.unwrap(), None);
    }
}
