//! The MCP client: configured servers become tools named `mcp__SERVER__TOOL`.
//!
//! Each server connects in the background ([`McpManager::start`]); its tools
//! are installed in the registry under the plugin id `mcp:SERVER` (so every
//! call goes through the same pipeline — guards, policies, approval — as a
//! component's), and revoked when the connection closes.
//! `notifications/tools/list_changed` re-lists and swaps the set atomically.
//!
//! Sessions see servers as plugins: [`McpManager::attach`] appends to a
//! session log, history first, then live, the same `plugin/*` events a
//! component produces, with the id `mcp:SERVER`:
//!
//! - `plugin/loaded` (`kinds: ["tool"]`, `digest` over the server info and
//!   its tool list) when a connection is ready, and again (followed by
//!   `plugin/unloaded` of the old digest) when `list_changed` changed the
//!   tools;
//! - `plugin/unloaded` (with `error`) when a connection is lost;
//! - `plugin/reload-failed` (with `error`) when an attempt fails.
//!
//! Surfaces that show live server state (the web UI) also get a status
//! feed ([`McpManager::subscribe_with_history`], [`McpManager::status`]):
//!
//! ```json
//! {"server": "files", "transport": "stdio", "required": true, "state": "ready",
//!  "tools": ["mcp__files__read"], "digest": "…", "server_info": {"name": "…", "version": "…"}, "attempt": 1}
//! ```
//!
//! `state` is `connecting`, `ready`, `failed` (with `error`) or `closed`
//! (with `error` when the connection was lost). A lost or failed connection
//! is retried with backoff (0.5 s, 1 s, 2 s), then left failed.
//!
//! **Elicitation**: Wharf advertises the `elicitation.form` client
//! capability. A server's `elicitation/create` (form mode) during a tool
//! call is bounded and parsed ([`wharf_core::question::Form::parse`]: a
//! longer message, more fields, a bigger or nested schema is refused with
//! `-32602`) and asked of the user of the session whose call is running on
//! that connection ([`wharf_core::plugin::SessionServices::ask_user`]); the
//! answer (checked against the form) goes back as `accept` with content,
//! `decline` or `cancel`. The question is withdrawn (`cancel`) when the call
//! ends (its deadline, the turn's cancellation). stdio carries no link
//! between a server request and the call that caused it, so: no call
//! running → `decline`; calls of several sessions running at once on the
//! connection → `decline` (it cannot tell whose user to ask, logged); else
//! the latest call of that session asks. URL mode is declined.
//!
//! **Required servers**: a surface awaits [`McpManager::wait_required`]
//! before the first turn (so the first step already sees the tools), and
//! [`McpManager::guard`] registers an `agent/pre-step` listener that ends a
//! turn `blocked` while a required server is unavailable.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationCapability, FormElicitationCapability, Implementation, ProtocolVersion,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, Peer, RoleClient, ServiceExt};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::io::AsyncBufReadExt;
use tokio::sync::{broadcast, mpsc, watch};
use tokio_util::sync::CancellationToken;
use wharf_core::bus::{Bus, ListenerHandle};
use wharf_core::events::{EventKind, PluginChange};
use wharf_core::plugin::{
    BoxFuture, Hook, HookOutcome, HookPoint, PluginRef, Tool, ToolInvocation, ToolMode, ToolOutcome, ToolSpec,
};
use wharf_core::registry::{Registrations, Registry};
use wharf_core::store::SessionLog;

use wharf_runtime::process::native::{NativeCommand, NativeError, NativeProcess};

use super::config::{
    Confinement, DEFAULT_STARTUP_TIMEOUT_MS, INHERITED_ENV, McpServerConfig, PRIVATE_ENV, Transport, confinement,
};

/// Type of the status feed's events (web UI only, never in a session log).
pub const STATUS_EVENT: &str = "mcp/status";

/// What every MCP server's plugin id starts with (`mcp:SERVER`).
pub const PLUGIN_ID_PREFIX: &str = "mcp:";
/// Prefix of imported tool names.
pub const TOOL_PREFIX: &str = "mcp__";
/// Retries after a failed or lost connection before giving up.
const MAX_RETRIES: u32 = 3;
/// Lines of a stdio server's stderr kept for error messages.
const STDERR_TAIL: usize = 20;
/// How long a closing connection may take (rmcp's stdio shutdown sequence
/// takes up to 6 s before it kills the server).
const STOP_WAIT: Duration = Duration::from_secs(7);
/// Longest tool name offered to models.
const MAX_TOOL_NAME: usize = 64;

/// Required MCP servers that are not available: one line per server (its
/// name, state and last error), joined by `; ` when printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotReady(pub Vec<String>);

impl std::fmt::Display for NotReady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join("; "))
    }
}

impl std::error::Error for NotReady {}

/// Error codes of MCP tool results (core's [`ToolErrorCode`]s).
pub mod codes {
    use wharf_core::plugin::ToolErrorCode;
    /// The server answered with `isError: true`.
    pub const MCP_TOOL_ERROR: ToolErrorCode = ToolErrorCode::McpToolError;
    /// The request failed (transport closed, protocol error).
    pub const MCP_ERROR: ToolErrorCode = ToolErrorCode::McpError;
    /// The call was cancelled.
    pub const ABORTED: ToolErrorCode = ToolErrorCode::Aborted;
    /// The per-server tool deadline passed.
    pub const TIMEOUT: ToolErrorCode = ToolErrorCode::Timeout;
}

/// Where a server is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Starting or retrying.
    Connecting,
    /// Tools are installed.
    Ready,
    /// The last attempt failed.
    Failed,
    /// The connection ended.
    Closed,
}

impl State {
    fn as_str(self) -> &'static str {
        match self {
            Self::Connecting => "connecting",
            Self::Ready => "ready",
            Self::Failed => "failed",
            Self::Closed => "closed",
        }
    }
}

/// What a server said about itself when it connected.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ServerInfo {
    /// The server's name.
    pub name: String,
    /// The server's version.
    pub version: String,
}

/// A server's state as surfaces show it (the web UI's MCP panel, `wharf mcp
/// tools --json`): the JSON shape in the module docs.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ServerStatus {
    /// The server's name in the config.
    pub server: String,
    /// `stdio` or `http`.
    pub transport: &'static str,
    /// Whether turns wait for it.
    pub required: bool,
    /// `connecting`, `ready`, `failed` or `closed`.
    pub state: &'static str,
    /// Why the last attempt failed or the connection closed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The tools installed (qualified names), when ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Digest of the installed tool set, when ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// The server's own name and version, when ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_info: Option<ServerInfo>,
    /// Connection attempt (from 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// Set when `list_changed` replaced the tools.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub refreshed: bool,
}

impl ServerStatus {
    fn new(c: &McpServerConfig, state: State) -> Self {
        Self {
            server: c.name.clone(),
            transport: Transport::of(c).as_str(),
            required: c.required,
            state: state.as_str(),
            error: None,
            tools: None,
            digest: None,
            server_info: None,
            attempt: None,
            refreshed: false,
        }
    }

    /// Whether the server's tools are installed.
    pub fn is_ready(&self) -> bool {
        self.state == "ready"
    }
}

#[derive(Debug, Clone)]
struct Status {
    state: State,
    error: Option<String>,
}

struct Server {
    config: McpServerConfig,
    state: watch::Sender<Status>,
    /// Digest of the installed tool set, while one is.
    digest: Mutex<Option<String>>,
}

/// The configured MCP servers of one host.
pub struct McpManager {
    registry: Arc<Registry>,
    servers: Vec<Arc<Server>>,
    events: broadcast::Sender<ServerStatus>,
    history: Mutex<Vec<ServerStatus>>,
    /// `plugin/*` session events so far, and the logs they go to.
    changes: Mutex<Changes>,
    latest: Mutex<BTreeMap<String, ServerStatus>>,
    workspace: PathBuf,
    shutdown: CancellationToken,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for McpManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.servers.iter().map(|s| s.config.name.as_str()).collect();
        f.debug_struct("McpManager").field("servers", &names).finish_non_exhaustive()
    }
}

impl McpManager {
    /// Starts connecting to every server in the background.
    pub fn start(registry: Arc<Registry>, configs: Vec<McpServerConfig>, workspace: &Path) -> Arc<Self> {
        install_crypto_provider();
        let (events, _) = broadcast::channel(256);
        let servers = configs
            .into_iter()
            .filter(|c| c.enabled)
            .map(|config| {
                let (state, _) = watch::channel(Status { state: State::Connecting, error: None });
                Arc::new(Server { config, state, digest: Mutex::new(None) })
            })
            .collect();
        let manager = Arc::new(Self {
            registry,
            servers,
            events,
            history: Mutex::new(Vec::new()),
            changes: Mutex::new(Changes::default()),
            latest: Mutex::new(BTreeMap::new()),
            workspace: workspace.to_path_buf(),
            shutdown: CancellationToken::new(),
            tasks: Mutex::new(Vec::new()),
        });
        let mut tasks = lock(&manager.tasks);
        for server in &manager.servers {
            let (m, s) = (manager.clone(), server.clone());
            tasks.push(tokio::spawn(async move { m.run_server(s).await }));
        }
        drop(tasks);
        manager
    }

    /// The history so far and a receiver of every later change (no gap, no duplicate).
    pub fn subscribe_with_history(&self) -> (Vec<ServerStatus>, broadcast::Receiver<ServerStatus>) {
        let h = lock(&self.history);
        (h.clone(), self.events.subscribe())
    }

    /// The latest status of every server.
    pub fn status(&self) -> Vec<ServerStatus> {
        let latest = lock(&self.latest);
        self.servers
            .iter()
            .map(|s| {
                latest.get(&s.config.name).cloned().unwrap_or_else(|| ServerStatus::new(&s.config, State::Connecting))
            })
            .collect()
    }

    /// Appends the servers' `plugin/*` history to `log`, then every change
    /// as it happens.
    pub fn attach(&self, log: &SessionLog) -> anyhow::Result<()> {
        if self.servers.is_empty() {
            return Ok(());
        }
        // History and later changes under one lock: each change is logged
        // once, and before the state change that caused it is visible (so a
        // turn after `wait_required` comes after the connection in the log).
        let mut changes = lock(&self.changes);
        for ev in &changes.history {
            log.append(ev.clone())?;
        }
        // Weakly: the session's owner decides when its log closes (an idle
        // session unloaded by `wharf serve` releases its lock or lease).
        changes.sinks.push(log.watch_release());
        Ok(())
    }

    /// Connects a session to the servers: [`attach`](Self::attach) to its log
    /// and [`guard`](Self::guard) on its bus. A surface calls this right after
    /// opening the agent and [`wait_required`](Self::wait_required) before the
    /// first turn; keep the handle while the agent runs.
    pub fn attach_agent(self: &Arc<Self>, agent: &wharf_core::Agent) -> anyhow::Result<Option<ListenerHandle>> {
        self.attach(agent.log())?;
        Ok(self.guard(agent.bus()))
    }

    /// Waits until every required server has connected or failed its first
    /// attempt; `Err` names those that are not ready.
    pub async fn wait_required(&self) -> Result<(), NotReady> {
        let mut failures = Vec::new();
        for s in self.servers.iter().filter(|s| s.config.required) {
            let status = settle(s).await;
            if status.state != State::Ready {
                failures.push(unavailable(&s.config.name, &status));
            }
        }
        if failures.is_empty() { Ok(()) } else { Err(NotReady(failures)) }
    }

    /// Waits until every server's current attempt has settled; whether all are ready.
    pub async fn wait_all(&self) -> bool {
        let mut ok = true;
        for s in &self.servers {
            ok &= settle(s).await.state == State::Ready;
        }
        ok
    }

    /// Registers an `agent/pre-step` listener on `bus` that rejects the step
    /// (the turn ends `blocked`) while a required server is unavailable.
    pub fn guard(self: &Arc<Self>, bus: &Bus) -> Option<ListenerHandle> {
        if !self.servers.iter().any(|s| s.config.required) {
            return None;
        }
        Some(bus.register(Arc::new(RequiredGuard { manager: self.clone(), plugin: PluginRef::native("mcp") })))
    }

    /// Disconnects every server (stdio servers are stopped) and revokes their tools.
    pub fn shutdown(&self) {
        self.shutdown.cancel();
        for s in &self.servers {
            self.registry.revoke(&plugin_id(&s.config.name));
        }
    }

    /// [`shutdown`](Self::shutdown), then waits until every connection is
    /// closed and every stdio server process is gone (a server that ignores
    /// its closed stdin gets SIGTERM after 3 s, then SIGKILL).
    pub async fn stop(&self) {
        self.shutdown();
        let tasks: Vec<_> = lock(&self.tasks).drain(..).collect();
        let all = futures::future::join_all(tasks);
        if tokio::time::timeout(STOP_WAIT + Duration::from_secs(1), all).await.is_err() {
            tracing::warn!("MCP servers did not stop within {} s", STOP_WAIT.as_secs() + 1);
        }
    }

    fn publish(&self, server: &Server, state: State, edit: impl FnOnce(&mut ServerStatus)) {
        let c = &server.config;
        let mut data = ServerStatus::new(c, state);
        edit(&mut data);
        let error = data.error.clone();
        match state {
            State::Failed | State::Closed => {
                tracing::warn!(server = %c.name, error = ?error, "MCP server {}", state.as_str())
            }
            _ => tracing::info!(server = %c.name, "MCP server {}", state.as_str()),
        }
        self.log_change(server, state, data.digest.as_deref(), error.as_deref());
        lock(&self.latest).insert(c.name.clone(), data.clone());
        let mut history = lock(&self.history);
        history.push(data.clone());
        let _ = self.events.send(data);
        drop(history);
        server.state.send_replace(Status { state, error });
    }

    /// The session events of a state change (see the module docs).
    fn log_change(&self, server: &Server, state: State, digest: Option<&str>, error: Option<&str>) {
        let id = plugin_id(&server.config.name);
        let change = |digest: &str, kinds: bool, error: Option<&str>| PluginChange {
            id: id.clone(),
            digest: digest.to_string(),
            kinds: if kinds { vec!["tool".to_string()] } else { Vec::new() },
            error: error.map(str::to_string),
            ..PluginChange::default()
        };
        let mut current = lock(&server.digest);
        let events = match state {
            State::Connecting => Vec::new(),
            State::Ready => {
                let new = digest.unwrap_or_default().to_string();
                let old = current.replace(new.clone());
                match old {
                    Some(old) if old == new => Vec::new(),
                    Some(old) => vec![
                        EventKind::PluginLoaded(change(&new, true, None)),
                        EventKind::PluginUnloaded(change(&old, true, None)),
                    ],
                    None => vec![EventKind::PluginLoaded(change(&new, true, None))],
                }
            }
            State::Closed => match current.take() {
                Some(old) => vec![EventKind::PluginUnloaded(change(&old, true, error))],
                None => Vec::new(),
            },
            State::Failed => {
                // A failure after a connection was up (e.g. installing
                // refreshed tools) also ends what was loaded.
                let mut v: Vec<EventKind> =
                    current.take().map(|old| EventKind::PluginUnloaded(change(&old, true, None))).into_iter().collect();
                v.push(EventKind::PluginReloadFailed(change("", false, error)));
                v
            }
        };
        drop(current);
        let mut changes = lock(&self.changes);
        for ev in events {
            // A log that was closed, or cannot be appended to, is dropped.
            changes.sinks.retain(|sink| sink.upgrade().is_some_and(|log| log.append(ev.clone()).is_ok()));
            changes.history.push(ev);
        }
    }

    async fn run_server(self: Arc<Self>, server: Arc<Server>) {
        let mut failures = 0u32;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            self.publish(&server, State::Connecting, |d| d.attempt = Some(attempt));
            let outcome = tokio::select! {
                r = self.connect_and_serve(&server, attempt) => r,
                _ = self.shutdown.cancelled() => return,
            };
            match outcome {
                Ok(Ended::Shutdown) => return,
                Ok(Ended::Lost(error)) => {
                    // It worked once: retries start over.
                    failures = 1;
                    self.publish(&server, State::Closed, |d| {
                        d.error = Some(error.clone());
                        d.attempt = Some(attempt);
                    });
                }
                Err(error) => {
                    failures += 1;
                    self.publish(&server, State::Failed, |d| {
                        d.error = Some(error.clone());
                        d.attempt = Some(attempt);
                    });
                }
            }
            if failures > MAX_RETRIES {
                return;
            }
            let delay = Duration::from_millis(500 * 2u64.pow(failures.saturating_sub(1).min(6)));
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = self.shutdown.cancelled() => return,
            }
        }
    }

    /// One connection: connect, install the tools, serve until it ends.
    async fn connect_and_serve(&self, server: &Server, attempt: u32) -> Result<Ended, String> {
        let c = &server.config;
        let (refresh_tx, mut refresh_rx) = mpsc::unbounded_channel();
        let refresh = Arc::new(Refresh::default());
        let calls = Arc::new(Calls::default());
        let handler =
            Handler { refresh: refresh_tx, state: refresh.clone(), calls: calls.clone(), server: c.name.clone() };
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let startup = Duration::from_millis(c.startup_timeout_ms.unwrap_or(DEFAULT_STARTUP_TIMEOUT_MS));
        // A stdio server's process: killed with its group when this attempt ends.
        let mut process: Option<NativeProcess> = None;
        let connect = async {
            let running = self.connect(c, handler, &stderr_tail, &mut process).await?;
            let tools = running.peer().list_all_tools().await.map_err(|e| format!("tools/list failed: {e}"))?;
            Ok::<_, String>((running, tools))
        };
        let with_stderr = |e: String| {
            let tail: Vec<String> = lock(&stderr_tail).iter().cloned().collect();
            if tail.is_empty() { e } else { format!("{e}; stderr: {}", tail.join(" | ")) }
        };
        let (running, tools) = match tokio::time::timeout(startup, connect).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(with_stderr(e)),
            Err(_) => return Err(with_stderr(format!("no answer within {} ms", startup.as_millis()))),
        };
        let peer = running.peer().clone();
        let info = running
            .peer_info()
            .and_then(|i| i.server_info.clone())
            .map(|i| ServerInfo { name: i.name, version: i.version });
        let conn = Conn { peer: peer.clone(), info, refresh: refresh.clone(), attempt, calls };
        self.install(server, &conn, tools, false).map_err(with_stderr)?;
        let cancel = running.cancellation_token();
        let wait = running.waiting();
        tokio::pin!(wait);
        loop {
            tokio::select! {
                _ = &mut wait => {
                    self.registry.revoke(&plugin_id(&c.name));
                    return Ok(Ended::Lost(with_stderr("the connection closed".into())));
                }
                Some(()) = refresh_rx.recv() => {
                    // Coalesce a burst of notifications into one re-list.
                    while refresh_rx.try_recv().is_ok() {}
                    let upto = refresh.requested.load(Ordering::SeqCst);
                    match peer.list_all_tools().await {
                        Ok(tools) => {
                            if let Err(e) = self.install(server, &conn, tools, true) {
                                tracing::warn!(server = %c.name, "refreshing MCP tools failed: {e}");
                            }
                        }
                        Err(e) => tracing::warn!(server = %c.name, "tools/list after list_changed failed: {e}"),
                    }
                    refresh.done.send_replace(upto);
                }
                _ = self.shutdown.cancelled() => {
                    // Closing a stdio transport closes the server's stdin;
                    // then it gets 3 s, SIGTERM, 3 s, SIGKILL (its group).
                    cancel.cancel();
                    let _ = tokio::time::timeout(STOP_WAIT, &mut wait).await;
                    if let Some(p) = process.take() {
                        stop_process(p).await;
                    }
                    self.registry.revoke(&plugin_id(&c.name));
                    return Ok(Ended::Shutdown);
                }
            }
        }
    }

    async fn connect(
        &self,
        c: &McpServerConfig,
        handler: Handler,
        stderr_tail: &Arc<Mutex<VecDeque<String>>>,
        process_slot: &mut Option<NativeProcess>,
    ) -> Result<RunningService<RoleClient, Handler>, String> {
        // `${env:NAME}` in `env` and `headers` values, resolved now.
        let resolve = |what: &str, key: &str, v: &str| {
            wharf_config::resolve_env(v, |n| std::env::var(n).ok()).map_err(|e| format!("`{what}.{key}`: {e}"))
        };
        match Transport::of(c) {
            Transport::Stdio => {
                let program = c.command.clone().unwrap_or_default();
                let confinement = confinement(c, &self.workspace)?;
                let sandbox = match confinement {
                    Confinement::Sandboxed { grant, env } => Some((grant, env)),
                    _ => None,
                };
                let mut env: Vec<(OsString, OsString)> = Vec::new();
                for k in INHERITED_ENV.iter().copied().filter(|k| sandbox.is_none() || !PRIVATE_ENV.contains(k)) {
                    if let Some(v) = std::env::var_os(k) {
                        env.push((OsString::from(k), v));
                    }
                }
                for k in sandbox.iter().flat_map(|(_, names)| names) {
                    if let Some(v) = std::env::var_os(k) {
                        env.retain(|(name, _)| name != k.as_str());
                        env.push((k.into(), v));
                    }
                }
                for (k, v) in &c.env {
                    let v = resolve("env", k, v)?;
                    env.retain(|(name, _)| name != k.as_str());
                    env.push((k.into(), v.into()));
                }
                let cwd = match &c.cwd {
                    Some(d) if d.is_relative() => self.workspace.join(d),
                    Some(d) => d.clone(),
                    None => self.workspace.clone(),
                };
                let sandboxed = sandbox.is_some();
                let cmd = NativeCommand {
                    program: program.clone().into(),
                    args: c.args.iter().map(OsString::from).collect(),
                    cwd,
                    env,
                    sandbox: sandbox.map(|(grant, _)| grant),
                };
                let (process, stdio) = NativeProcess::spawn(cmd).map_err(|e| match e {
                    NativeError::SandboxUnavailable(why) => format!(
                        "cannot start `{program}` in the OS sandbox: {why}; set `unsandboxed = true` on the \
                         `{}` row to run it unconfined",
                        c.name
                    ),
                    e => format!("cannot start `{program}`: {e}"),
                })?;
                tracing::debug!(server = %c.name, pid = process.pid(), sandboxed, "MCP server started");
                let (tail, name) = (stderr_tail.clone(), c.name.clone());
                let stderr = stdio.stderr;
                tokio::spawn(async move {
                    let mut lines = tokio::io::BufReader::new(stderr).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        tracing::debug!(server = %name, "mcp stderr: {line}");
                        let mut t = lock(&tail);
                        if t.len() == STDERR_TAIL {
                            t.pop_front();
                        }
                        t.push_back(line);
                    }
                });
                // Held by the connection: dropping it kills the process group.
                *process_slot = Some(process);
                handler.serve((stdio.stdout, stdio.stdin)).await.map_err(|e| format!("initialize failed: {e}"))
            }
            Transport::Http => {
                let url = c.url.clone().unwrap_or_default();
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.clone());
                let mut headers = HashMap::new();
                for (k, v) in &c.headers {
                    let v = &resolve("headers", k, v)?;
                    if k.eq_ignore_ascii_case("authorization")
                        && let Some(token) = v.strip_prefix("Bearer ")
                    {
                        config = config.auth_header(token.to_string());
                        continue;
                    }
                    let name = http::HeaderName::from_bytes(k.as_bytes())
                        .map_err(|e| format!("bad header name `{k}`: {e}"))?;
                    let value =
                        http::HeaderValue::from_str(v).map_err(|e| format!("bad value of header `{k}`: {e}"))?;
                    headers.insert(name, value);
                }
                let config = config.custom_headers(headers);
                let refused: Arc<Mutex<Option<String>>> = Arc::default();
                let client = crate::allowlist::http_client(c, refused.clone())?;
                let transport = StreamableHttpClientTransport::with_client(client, config);
                handler.serve(transport).await.map_err(|e| match lock(&refused).take() {
                    Some(why) => why,
                    None => format!("initialize with {url} failed: {e}"),
                })
            }
        }
    }

    /// Installs (or swaps) a server's tools; publishes `ready`.
    fn install(
        &self,
        server: &Server,
        conn: &Conn,
        tools: Vec<rmcp::model::Tool>,
        refreshed: bool,
    ) -> Result<(), String> {
        let c = &server.config;
        let (peer, info, refresh, attempt) = (&conn.peer, &conn.info, &conn.refresh, conn.attempt);
        let mut hasher = Sha256::new();
        hasher.update(serde_json::to_string(info).unwrap_or_default().as_bytes());
        for t in &tools {
            hasher.update(serde_json::to_string(t).unwrap_or_default().as_bytes());
        }
        let plugin = PluginRef { id: plugin_id(&c.name), digest: hex::encode(hasher.finalize()), config: None };
        let mut used = std::collections::HashSet::new();
        let mut regs = Registrations::default();
        let mut names = Vec::new();
        for t in tools {
            let name = exposed_name(&c.name, &t.name, &mut used);
            let schema = Value::Object(t.input_schema.as_ref().clone());
            let description = t.description.as_deref().unwrap_or("").to_string();
            let spec = ToolSpec {
                name: name.clone(),
                description: format!("[MCP server `{}`] {description}", c.name).trim_end().to_string(),
                input_schema: schema,
                mode: ToolMode::Parallel,
            };
            names.push(name);
            regs.tools.push(Arc::new(McpTool {
                spec,
                plugin: plugin.clone(),
                server: c.name.clone(),
                remote: t.name.to_string(),
                peer: peer.clone(),
                timeout: c.tool_timeout_ms.map(Duration::from_millis),
                refresh: refresh.clone(),
                calls: conn.calls.clone(),
            }));
        }
        self.registry.install(plugin.clone(), regs).map_err(|e| e.to_string())?;
        self.publish(server, State::Ready, |d| {
            d.tools = Some(names);
            d.digest = Some(plugin.digest.clone());
            d.server_info = info.clone();
            d.attempt = Some(attempt);
            d.refreshed = refreshed;
        });
        Ok(())
    }
}

impl Drop for McpManager {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// The `plugin/*` events of the servers, and the session logs they go to.
#[derive(Default)]
struct Changes {
    history: Vec<EventKind>,
    sinks: Vec<wharf_core::store::LogRelease>,
}

/// One live connection, as tools need it.
struct Conn {
    peer: Peer<RoleClient>,
    info: Option<ServerInfo>,
    refresh: Arc<Refresh>,
    attempt: u32,
    calls: Arc<Calls>,
}

enum Ended {
    Shutdown,
    Lost(String),
}

/// Ends a stdio server whose stdin is closed: 3 s to exit, then SIGTERM to
/// its process group, 3 s more, then SIGKILL.
async fn stop_process(p: NativeProcess) {
    const GRACE: Duration = Duration::from_secs(3);
    if tokio::time::timeout(GRACE, p.exited()).await.is_err() {
        p.terminate();
        if tokio::time::timeout(GRACE, p.exited()).await.is_err() {
            p.kill();
        }
    }
    let _ = p.wait().await;
}

/// Waits until the server's current attempt settles.
async fn settle(s: &Server) -> Status {
    let mut rx = s.state.subscribe();
    let timeout = Duration::from_millis(s.config.startup_timeout_ms.unwrap_or(DEFAULT_STARTUP_TIMEOUT_MS) + 1_000);
    let r = tokio::time::timeout(timeout, rx.wait_for(|st| st.state != State::Connecting)).await;
    match r {
        Ok(Ok(st)) => st.clone(),
        _ => Status { state: State::Connecting, error: Some("still connecting".into()) },
    }
}

fn unavailable(name: &str, st: &Status) -> String {
    let why = st.error.clone().unwrap_or_else(|| st.state.as_str().to_string());
    format!("required MCP server `{name}` is not available: {why}")
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The registry plugin id of a server.
pub fn plugin_id(server: &str) -> String {
    format!("{PLUGIN_ID_PREFIX}{server}")
}

/// `mcp__SERVER__TOOL`, with characters models refuse replaced by `_`, cut to
/// 64 characters (with a hash suffix) and made unique within the server.
pub fn exposed_name(server: &str, tool: &str, used: &mut std::collections::HashSet<String>) -> String {
    let clean: String =
        tool.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect();
    let mut name = format!("{TOOL_PREFIX}{server}__{clean}");
    if name.len() > MAX_TOOL_NAME || clean != tool {
        let h = hex::encode(Sha256::digest(tool.as_bytes()));
        if name.len() > MAX_TOOL_NAME {
            wharf_core::util::truncate_str(&mut name, MAX_TOOL_NAME - 9);
            name = format!("{name}_{}", &h[..8]);
        }
    }
    let mut candidate = name.clone();
    let mut n = 2;
    while !used.insert(candidate.clone()) {
        let suffix = format!("_{n}");
        let mut base = name.clone();
        wharf_core::util::truncate_str(&mut base, MAX_TOOL_NAME - suffix.len());
        candidate = format!("{base}{suffix}");
        n += 1;
    }
    candidate
}

/// rustls needs a process-wide crypto provider for HTTPS servers.
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Tool-list refreshes of one connection: how many `list_changed`
/// notifications arrived, and up to which one the tools are installed.
#[derive(Default)]
struct Refresh {
    requested: AtomicU64,
    done: watch::Sender<u64>,
}

impl Refresh {
    /// Waits (briefly) for a refresh that a call's own result may have
    /// triggered: a server sends `list_changed` before the result, but the
    /// notification is handled on another task. So a tool that adds tools
    /// (and the next step that uses them) sees a consistent list.
    async fn settle(&self) {
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        let want = self.requested.load(Ordering::SeqCst);
        if *self.done.borrow() >= want {
            return;
        }
        let mut rx = self.done.subscribe();
        let _ = tokio::time::timeout(Duration::from_secs(5), rx.wait_for(|d| *d >= want)).await;
    }
}

/// The tool calls running on one connection (whose user a server's
/// question goes to).
#[derive(Default)]
struct Calls {
    next: AtomicU64,
    running: Mutex<Vec<Running>>,
}

struct Running {
    id: u64,
    session_id: String,
    services: Option<Arc<dyn wharf_core::plugin::SessionServices>>,
    /// Cancelled when the call ends.
    ended: CancellationToken,
}

/// Removes a call from [`Calls`] (and withdraws its questions) when it ends.
struct CallGuard<'a> {
    calls: &'a Calls,
    id: u64,
    ended: CancellationToken,
}

impl Drop for CallGuard<'_> {
    fn drop(&mut self) {
        self.ended.cancel();
        lock(&self.calls.running).retain(|r| r.id != self.id);
    }
}

impl Calls {
    fn enter(&self, call: &ToolInvocation) -> CallGuard<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let ended = CancellationToken::new();
        lock(&self.running).push(Running {
            id,
            session_id: call.session_id.clone(),
            services: call.services.clone(),
            ended: ended.clone(),
        });
        CallGuard { calls: self, id, ended }
    }

    /// The call whose user answers a question now, or why none can.
    fn asker(&self) -> Result<(Arc<dyn wharf_core::plugin::SessionServices>, CancellationToken), &'static str> {
        let running = lock(&self.running);
        let last = running.last().ok_or("no tool call of this server is running")?;
        if running.iter().any(|r| r.session_id != last.session_id) {
            return Err("calls of several sessions are running on this server, so it is unclear whose user to ask");
        }
        let services = last.services.clone().ok_or("the running call has no session")?;
        Ok((services, last.ended.clone()))
    }
}

/// Receives server notifications and requests.
#[derive(Clone)]
struct Handler {
    refresh: mpsc::UnboundedSender<()>,
    state: Arc<Refresh>,
    calls: Arc<Calls>,
    server: String,
}

impl Handler {
    async fn elicit(&self, request: ElicitRequestParams) -> Result<ElicitResult, rmcp::ErrorData> {
        let decline = |why: &str| {
            tracing::warn!(server = %self.server, "declined an elicitation: {why}");
            Ok(ElicitResult::new(ElicitationAction::Decline))
        };
        let (message, schema) = match request {
            ElicitRequestParams::FormElicitationParams { message, requested_schema, .. } => {
                (message, serde_json::to_value(&requested_schema).unwrap_or(Value::Null))
            }
            _ => return decline("only form mode is supported"),
        };
        let form = wharf_core::question::Form::parse(&message, &schema).map_err(|e| {
            tracing::warn!(server = %self.server, "refused an elicitation: {e}");
            rmcp::ErrorData::invalid_params(format!("elicitation refused: {e}"), None)
        })?;
        let (services, ended) = match self.calls.asker() {
            Ok(a) => a,
            Err(why) => return decline(why),
        };
        let reply = tokio::select! {
            r = services.ask_user(plugin_id(&self.server), form) => r,
            // The call ended: its question is withdrawn.
            _ = ended.cancelled() => return Ok(ElicitResult::new(ElicitationAction::Cancel)),
        };
        let reply = match reply {
            Ok(r) => r,
            Err(e) => return decline(&e.to_string()),
        };
        use wharf_core::question::Answer;
        Ok(match reply.answer {
            Answer::Accept(content) => {
                ElicitResult::new(ElicitationAction::Accept).with_content(Value::Object(content))
            }
            Answer::Decline => ElicitResult::new(ElicitationAction::Decline),
            Answer::Cancel => ElicitResult::new(ElicitationAction::Cancel),
        })
    }
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.state.requested.fetch_add(1, Ordering::SeqCst);
        let _ = self.refresh.send(());
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        self.elicit(request).await
    }

    fn get_info(&self) -> ClientConfig {
        let mut caps = ClientCapabilities::default();
        caps.elicitation =
            Some(ElicitationCapability::new().with_form(FormElicitationCapability::new().with_schema_validation(true)));
        ClientConfig::new(caps, Implementation::new("wharf", env!("CARGO_PKG_VERSION")))
            .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }
}

/// One imported tool.
struct McpTool {
    spec: ToolSpec,
    plugin: PluginRef,
    server: String,
    remote: String,
    peer: Peer<RoleClient>,
    timeout: Option<Duration>,
    refresh: Arc<Refresh>,
    calls: Arc<Calls>,
}

impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn plugin(&self) -> &PluginRef {
        &self.plugin
    }

    fn call(&self, call: ToolInvocation, cancel: CancellationToken) -> BoxFuture<'_, ToolOutcome> {
        Box::pin(async move {
            // Held while the call runs: the server's questions go to its session.
            let _running = self.calls.enter(&call);
            let mut params = CallToolRequestParams::new(self.remote.clone());
            if let Value::Object(args) = call.arguments {
                params = params.with_arguments(args);
            }
            let timeout = self.timeout.unwrap_or(Duration::MAX);
            let r = tokio::select! {
                r = self.peer.call_tool(params) => r,
                _ = cancel.cancelled() => {
                    return ToolOutcome::error(codes::ABORTED, "Error: the MCP tool call was cancelled");
                }
                _ = tokio::time::sleep(timeout) => {
                    return ToolOutcome::error(
                        codes::TIMEOUT,
                        format!("Error: MCP server `{}` did not answer within {} ms", self.server, timeout.as_millis()),
                    );
                }
            };
            match r {
                Ok(result) => {
                    self.refresh.settle().await;
                    outcome(&self.server, &self.remote, result)
                }
                Err(e) => ToolOutcome::error(
                    codes::MCP_ERROR,
                    format!("Error: MCP server `{}` failed on `{}`: {e}", self.server, self.remote),
                ),
            }
        })
    }
}

/// An MCP result as a tool outcome: text blocks joined by newlines, other
/// blocks summarized, structured content as JSON when there is no text.
pub fn outcome(server: &str, tool: &str, r: CallToolResult) -> ToolOutcome {
    let blocks = serde_json::to_value(&r.content).unwrap_or(Value::Null);
    let mut parts = Vec::new();
    for b in blocks.as_array().into_iter().flatten() {
        let s = |k: &str| b.get(k).and_then(Value::as_str).unwrap_or("");
        let part = match s("type") {
            "text" => s("text").to_string(),
            "image" | "audio" => format!("[{} {}, {} bytes of base64]", s("type"), s("mimeType"), s("data").len()),
            "resource" => {
                let res = &b["resource"];
                match res.get("text").and_then(Value::as_str) {
                    Some(t) => t.to_string(),
                    None => format!("[resource {}]", res.get("uri").and_then(Value::as_str).unwrap_or("")),
                }
            }
            "resource_link" => format!("[resource link {} {}]", s("uri"), s("name")).trim_end().to_string(),
            other => format!("[{other} content]"),
        };
        parts.push(part);
    }
    if parts.is_empty()
        && let Some(sc) = &r.structured_content
    {
        parts.push(sc.to_string());
    }
    let content = parts.join("\n");
    let mut details = json!({"mcp": {"server": server, "tool": tool}});
    if let Some(sc) = &r.structured_content {
        details["mcp"]["structured_content"] = sc.clone();
    }
    let mut o = if r.is_error == Some(true) {
        ToolOutcome::error(codes::MCP_TOOL_ERROR, content)
    } else {
        ToolOutcome::ok(content)
    };
    o.details = Some(details);
    o
}

/// Ends turns while a required server is unavailable.
struct RequiredGuard {
    manager: Arc<McpManager>,
    plugin: PluginRef,
}

impl Hook for RequiredGuard {
    fn plugin(&self) -> &PluginRef {
        &self.plugin
    }

    fn subscriptions(&self) -> &[(HookPoint, i32)] {
        &[(HookPoint::AgentPreStep, i32::MIN)]
    }

    fn handle(
        &self,
        _point: HookPoint,
        _payload: Value,
    ) -> BoxFuture<'_, Result<HookOutcome, wharf_core::plugin::PluginError>> {
        Box::pin(async move {
            for s in self.manager.servers.iter().filter(|s| s.config.required) {
                let status = settle(s).await;
                if status.state != State::Ready {
                    return Ok(HookOutcome::Reject(unavailable(&s.config.name, &status)));
                }
            }
            Ok(HookOutcome::Pass)
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn names_are_prefixed_clean_short_and_unique() {
        let mut used = std::collections::HashSet::new();
        assert_eq!(exposed_name("fx", "echo", &mut used), "mcp__fx__echo");
        assert_eq!(exposed_name("fx", "echo", &mut used), "mcp__fx__echo_2");
        assert_eq!(exposed_name("fx", "a.b/c", &mut used), "mcp__fx__a_b_c");
        let long = exposed_name("fx", &"x".repeat(100), &mut used);
        assert_eq!(long.len(), 64);
        assert!(long.starts_with("mcp__fx__xxx"));
        // A server name the cut would split (a client may pass any name).
        let server = format!("a{}", "\u{e9}".repeat(40));
        let multi = exposed_name(&server, "t", &mut used);
        assert!(multi.len() <= 64 && multi.starts_with("mcp__a\u{e9}"), "{multi}");
        let again = exposed_name(&server, "t", &mut used);
        assert!(again.len() <= 64 && again != multi, "{again}");
    }

    #[test]
    fn results_become_outcomes() {
        let r: CallToolResult = serde_json::from_value(json!({
            "content": [{"type": "text", "text": "hi"}, {"type": "image", "data": "AAAA", "mimeType": "image/png"}],
            "isError": true
        }))
        .unwrap();
        let o = outcome("fx", "t", r);
        assert!(o.is_error);
        assert_eq!(o.error_code, Some(codes::MCP_TOOL_ERROR));
        assert_eq!(o.content, "hi\n[image image/png, 4 bytes of base64]");
        let r: CallToolResult = serde_json::from_value(json!({"structuredContent": {"n": 3}})).unwrap();
        let o = outcome("fx", "t", r);
        assert!(!o.is_error);
        assert_eq!(o.content, r#"{"n":3}"#);
    }
}
