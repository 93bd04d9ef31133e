//! Routes of `wharf web`: static pages, the JSON API and the event streams.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router, middleware};
use futures::Stream;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use wharf_core::approval::{Approval, ChannelApprover};
use wharf_core::events::{ApprovalOutcome, Event, EventKind};
use wharf_core::store::StoreError;
use wharf_core::{Agent, Projection};

use super::render::Decorator;
use super::{Access, security};
use crate::host_ctx::HostCtx;
use crate::mcp::McpManager;

const INDEX_HTML: &str = include_str!("index.html");
const APP_JS: &str = include_str!("app.js");
const APP_CSS: &str = include_str!("app.css");

/// A session open for turns in this server: its agent and the approval
/// questions waiting for an answer (runtime handles only; what they mean is
/// in the log).
struct Live {
    agent: Agent,
    approvals: Arc<Approvals>,
    stop: CancellationToken,
    serving: tokio::task::JoinHandle<()>,
}

/// Approval questions by call id. The pipeline logs `approval/asked` just
/// before it asks, so an answer may arrive a moment before its question:
/// [`Approvals::take`] waits briefly for it.
#[derive(Default)]
struct Approvals {
    pending: Mutex<HashMap<String, oneshot::Sender<Approval>>>,
    arrived: tokio::sync::Notify,
}

impl Approvals {
    fn put(&self, call: String, reply: oneshot::Sender<Approval>) {
        let mut p = lock(&self.pending);
        p.retain(|_, tx| !tx.is_closed());
        p.insert(call, reply);
        drop(p);
        self.arrived.notify_waiters();
    }

    async fn take(&self, call: &str) -> Option<oneshot::Sender<Approval>> {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
        loop {
            let arrived = self.arrived.notified();
            if let Some(tx) = lock(&self.pending).remove(call) {
                return Some(tx);
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return None;
            }
        }
    }
}

/// The server state.
pub struct App {
    host: HostCtx,
    mcp: Option<Arc<McpManager>>,
    max_steps: Option<u32>,
    live: Mutex<HashMap<String, Arc<Live>>>,
    opened: broadcast::Sender<String>,
    shutdown: CancellationToken,
    /// Usage per session, keyed by the log size it was computed at.
    usage: Mutex<HashMap<String, (u64, Value)>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An API failure: a status and a message.
struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({"error": self.1}))).into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        let status = match &e {
            StoreError::NotFound(_) => StatusCode::NOT_FOUND,
            StoreError::InvalidId(_) | StoreError::InvalidForkPoint { .. } => StatusCode::BAD_REQUEST,
            StoreError::Locked { .. } | StoreError::AlreadyExists(_) => StatusCode::CONFLICT,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError(status, e.to_string())
    }
}

impl From<anyhow::Error> for ApiError {
    fn from(e: anyhow::Error) -> Self {
        match e.downcast::<StoreError>() {
            Ok(s) => s.into(),
            Err(e) => ApiError(StatusCode::INTERNAL_SERVER_ERROR, crate::output::error_text(&e)),
        }
    }
}

type ApiResult<T> = Result<T, ApiError>;

impl App {
    /// The state of a server over `host`.
    pub fn new(
        host: HostCtx,
        mcp: Option<Arc<McpManager>>,
        max_steps: Option<u32>,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        let (opened, _) = broadcast::channel(64);
        Arc::new(Self {
            host,
            mcp,
            max_steps,
            live: Mutex::new(HashMap::new()),
            opened,
            shutdown,
            usage: Mutex::default(),
        })
    }

    fn live(&self, id: &str) -> Option<Arc<Live>> {
        lock(&self.live).get(id).cloned()
    }

    /// Opens a session for turns (a new one when `id` is `None`).
    fn open(&self, id: Option<&str>) -> ApiResult<Arc<Live>> {
        let mut live = lock(&self.live);
        if let Some(l) = id.and_then(|id| live.get(id)) {
            return Ok(l.clone());
        }
        let (approver, mut questions) = ChannelApprover::new();
        let (agent, _) = self.host.open_agent(id, Arc::new(approver), self.max_steps)?;
        let approvals: Arc<Approvals> = Arc::default();
        let pending = approvals.clone();
        tokio::spawn(async move {
            while let Some(q) = questions.recv().await {
                pending.put(q.request.call_id.clone(), q.reply);
            }
        });
        let stop = self.shutdown.child_token();
        let (runner, token, mcp) = (agent.clone(), stop.clone(), self.mcp.clone());
        let serving = tokio::spawn(async move {
            // Required MCP servers first, so the first step sees their tools
            // (if one fails, the pre-step guard ends turns `blocked`).
            if let Some(m) = mcp {
                tokio::select! {
                    r = m.wait_required() => if let Err(e) = r { tracing::warn!("{e}") },
                    _ = token.cancelled() => return,
                }
            }
            if let Err(e) = runner.serve(token).await {
                tracing::error!(session = %runner.session_id(), "the agent stopped: {e}");
            }
        });
        let id = agent.session_id().to_string();
        let l = Arc::new(Live { agent, approvals, stop, serving });
        live.insert(id.clone(), l.clone());
        drop(live);
        let _ = self.opened.send(id);
        Ok(l)
    }

    /// Stops every live session (their logs are flushed).
    pub async fn close(&self) {
        let all: Vec<Arc<Live>> = lock(&self.live).drain().map(|(_, l)| l).collect();
        for l in all {
            l.agent.cancel();
            l.stop.cancel();
            let _ = tokio::time::timeout(std::time::Duration::from_secs(5), async {
                while !l.serving.is_finished() {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
            })
            .await;
            if let Err(e) = l.agent.log().flush().await {
                tracing::warn!("flushing {}: {e}", l.agent.session_id());
            }
        }
    }
}

/// The router, behind the security middleware.
pub fn router(app: Arc<App>, access: Access) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/app.js", get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }))
        .route("/app.css", get(|| async { asset("text/css; charset=utf-8", APP_CSS) }))
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
        .route("/api/info", get(info))
        .route("/api/sessions", get(list_sessions).post(new_session))
        .route("/api/sessions/{id}", get(session))
        .route("/api/sessions/{id}/events", get(session_events))
        .route("/api/sessions/{id}/prompt", post(prompt))
        .route("/api/sessions/{id}/cancel", post(cancel))
        .route("/api/sessions/{id}/approvals/{call}", post(approve))
        .route("/api/sessions/{id}/resume", post(resume))
        .route("/api/sessions/{id}/fork", post(fork))
        .route("/api/plugins", get(plugins))
        .route("/api/plugins/events", get(plugin_events))
        .fallback(|| async { ApiError(StatusCode::NOT_FOUND, "not found".into()) })
        .with_state(app)
        .layer(middleware::from_fn_with_state(access, security::guard))
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

async fn info(State(app): State<Arc<App>>) -> Json<Value> {
    let h = &app.host;
    Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "profile": h.args.profile,
        "workspace": h.workspace,
        "session_dir": h.store.root(),
        "mcp": app.mcp.as_ref().map(|m| m.status()).unwrap_or_default(),
    }))
}

/// A session's tokens, cost and context use, recomputed when its log grew.
fn usage_of(app: &App, s: &wharf_core::store::SessionSummary) -> Value {
    if let Some((bytes, v)) = lock(&app.usage).get(&s.id)
        && *bytes == s.bytes
    {
        return v.clone();
    }
    let v = match app.host.store.load(&s.id) {
        Ok(loaded) => usage_json(app, &loaded.events),
        Err(e) => {
            tracing::debug!(session = %s.id, "usage: {e}");
            return Value::Null;
        }
    };
    lock(&app.usage).insert(s.id.clone(), (s.bytes, v.clone()));
    v
}

/// Per-turn rows kept in a usage answer (the latest ones).
const MAX_USAGE_TURNS: usize = 200;

/// The usage summary of `events` ([`crate::usage::summarize`]: tokens, cost
/// from the adapter's price table, context-window use), plus `total_tokens`.
fn usage_json(app: &App, events: &[Event]) -> Value {
    let mut u = crate::usage::summarize(&app.host.config, events);
    let extra = u.turns.len().saturating_sub(MAX_USAGE_TURNS);
    u.turns.drain(..extra);
    let total = u.prompt_tokens + u.completion_tokens;
    let mut v = serde_json::to_value(&u).unwrap_or(Value::Null);
    if let Some(o) = v.as_object_mut() {
        o.insert("total_tokens".into(), json!(total));
    }
    v
}

fn summary_json(app: &App, s: &wharf_core::store::SessionSummary, turns: bool) -> Value {
    let live = app.live(&s.id);
    let mut usage = usage_of(app, s);
    if !turns && let Some(o) = usage.as_object_mut() {
        o.remove("turns");
    }
    json!({
        "usage": usage,
        "id": s.id,
        "title": s.title,
        "created": s.header.created,
        "parent": s.header.parent,
        "fork_seq": s.header.fork_seq,
        "profile": s.header.profile,
        "workspace": s.header.workspace,
        "bytes": s.bytes,
        "live": live.is_some(),
        "running": live.is_some_and(|l| l.agent.is_running()),
    })
}

#[derive(Deserialize, Default)]
struct ListQuery {
    /// Only sessions whose header names this workspace.
    workspace: Option<String>,
}

async fn list_sessions(State(app): State<Arc<App>>, Query(q): Query<ListQuery>) -> ApiResult<Json<Value>> {
    let mut list = app.host.store.list()?;
    list.reverse();
    let want = q.workspace.filter(|w| !w.is_empty());
    Ok(Json(Value::Array(
        list.iter()
            .filter(|s| want.as_deref().is_none_or(|w| s.header.workspace.as_deref() == Some(w)))
            .map(|s| summary_json(&app, s, false))
            .collect(),
    )))
}

async fn session(State(app): State<Arc<App>>, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    let list = app.host.store.list()?;
    let s = list
        .iter()
        .find(|s| s.id == id)
        .ok_or_else(|| ApiError(StatusCode::NOT_FOUND, format!("session `{id}` not found")))?;
    Ok(Json(summary_json(&app, s, true)))
}

#[derive(Deserialize, Default)]
struct TextBody {
    #[serde(default)]
    text: String,
}

async fn new_session(State(app): State<Arc<App>>, body: Option<Json<TextBody>>) -> ApiResult<Json<Value>> {
    let l = app.open(None)?;
    let text = body.map(|b| b.0.text).unwrap_or_default();
    let inbox = if text.trim().is_empty() { None } else { Some(l.agent.followup(text)?) };
    Ok(Json(json!({"id": l.agent.session_id(), "inbox_id": inbox})))
}

async fn prompt(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Json(body): Json<TextBody>,
) -> ApiResult<Json<Value>> {
    if body.text.trim().is_empty() {
        return Err(ApiError(StatusCode::BAD_REQUEST, "empty prompt".into()));
    }
    let l = app.open(Some(&id))?;
    let inbox = l.agent.followup(body.text)?;
    Ok(Json(json!({"id": id, "inbox_id": inbox})))
}

async fn cancel(State(app): State<Arc<App>>, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    let cancelled = app.live(&id).is_some_and(|l| l.agent.cancel());
    Ok(Json(json!({"cancelled": cancelled})))
}

async fn resume(State(app): State<Arc<App>>, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    let l = app.open(Some(&id))?;
    Ok(Json(json!({"id": l.agent.session_id(), "live": true})))
}

#[derive(Deserialize, Default)]
struct ForkBody {
    at_seq: Option<u64>,
}

async fn fork(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    body: Option<Json<ForkBody>>,
) -> ApiResult<Json<Value>> {
    let at = match body.and_then(|b| b.0.at_seq) {
        Some(s) => s,
        None => {
            // The last turn boundary.
            let loaded = app.host.store.load(&id)?;
            let p = Projection::from_events(&loaded.events);
            match p.open_turn() {
                None => loaded.events.last().map(|e| e.seq).unwrap_or(1),
                Some(_) => loaded
                    .events
                    .iter()
                    .rev()
                    .find(|e| matches!(e.kind, EventKind::TurnEnd(_)))
                    .map(|e| e.seq)
                    .unwrap_or(1),
            }
        }
    };
    let log = app.host.store.fork(&id, at)?;
    let new_id = log.id().to_string();
    log.flush().await?;
    drop(log);
    app.open(Some(&new_id))?;
    Ok(Json(json!({"id": new_id, "parent": id, "at_seq": at})))
}

#[derive(Deserialize)]
struct ApprovalBody {
    outcome: ApprovalOutcome,
    #[serde(default)]
    note: Option<String>,
}

async fn approve(
    State(app): State<Arc<App>>,
    Path((id, call)): Path<(String, String)>,
    Json(body): Json<ApprovalBody>,
) -> ApiResult<Json<Value>> {
    if body.outcome == ApprovalOutcome::Cancelled {
        return Err(ApiError(StatusCode::BAD_REQUEST, "answer allowed-once, allowed-for-session or rejected".into()));
    }
    let l =
        app.live(&id).ok_or_else(|| ApiError(StatusCode::NOT_FOUND, format!("session `{id}` is not running here")))?;
    let Some(reply) = l.approvals.take(&call).await else {
        return Err(ApiError(StatusCode::NOT_FOUND, format!("no approval question for call `{call}`")));
    };
    let approval = Approval { outcome: body.outcome, by: "web".into(), note: body.note.filter(|n| !n.is_empty()) };
    if reply.send(approval).is_err() {
        return Err(ApiError(StatusCode::CONFLICT, "the question was withdrawn (the turn ended)".into()));
    }
    Ok(Json(json!({"ok": true})))
}

fn sse_event(dec: &Decorator, ev: &Event) -> Option<SseEvent> {
    let line = dec.json(ev)?;
    Some(SseEvent::default().id(ev.seq.to_string()).data(line))
}

fn sse(rx: mpsc::Receiver<SseEvent>) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let mut rx = rx;
    let stream = futures::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|o| o.map(Ok)));
    Sse::new(stream).keep_alive(KeepAlive::default())
}

#[derive(Deserialize, Default)]
struct FromQuery {
    from: Option<u64>,
}

/// The log from `from`, then live events (waiting for the session to be
/// opened in this server if it is not).
async fn session_events(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Query(q): Query<FromQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let last_id = headers.get("last-event-id").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    let from = last_id.map(|s| s + 1).or(q.from).unwrap_or(1).max(1);
    // Subscribe to openings before looking, so an opening cannot slip between.
    let mut opened = app.opened.subscribe();
    let stored = match app.live(&id) {
        Some(_) => None,
        None => Some(app.host.store.load(&id)?.events),
    };
    let (tx, rx) = mpsc::channel::<SseEvent>(256);
    let shutdown = app.shutdown.clone();
    let app2 = app.clone();
    tokio::spawn(async move {
        let dec = Decorator;
        let mut next = from;
        if let Some(events) = stored {
            for ev in events.iter().filter(|e| e.seq >= from) {
                let Some(e) = sse_event(&dec, ev) else { continue };
                if tx.send(e).await.is_err() {
                    return;
                }
                next = ev.seq + 1;
            }
            // Not live: wait until it is opened here (resume, prompt).
            loop {
                tokio::select! {
                    r = opened.recv() => match r {
                        Ok(s) if s == id => break,
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {
                            if app2.live(&id).is_some() { break }
                        }
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                    _ = tx.closed() => return,
                    _ = shutdown.cancelled() => return,
                }
            }
        }
        let Some(l) = app2.live(&id) else { return };
        let mut events = match l.agent.log().subscribe_from(next) {
            Ok(rx) => rx,
            Err(e) => {
                let _ = tx.send(SseEvent::default().event("error").data(e.to_string())).await;
                return;
            }
        };
        drop(l);
        loop {
            tokio::select! {
                ev = events.recv() => match ev {
                    Some(ev) => {
                        let Some(e) = sse_event(&dec, &ev) else { continue };
                        if tx.send(e).await.is_err() { return; }
                    }
                    None => return,
                },
                _ = tx.closed() => return,
                _ = shutdown.cancelled() => return,
            }
        }
    });
    Ok(sse(rx).into_response())
}

fn plugin_json(v: &wharf_runtime::PluginVersion) -> Value {
    json!({
        "id": v.id,
        "name": v.info.name,
        "version": v.info.version,
        "description": v.info.description,
        "path": v.path,
        "digest": v.digest,
        "size": v.size,
        "wit": format!("wharf:plugin@{}", v.wit_version),
        "kinds": v.kinds,
        "requested": v.info.requests,
        "effective": *v.effective,
        "tools": v.tools.iter().map(|t| json!({"name": t.name, "mode": t.mode, "description": t.description})).collect::<Vec<_>>(),
        "load_ms": (v.load_time.as_secs_f64() * 1000.0).round(),
        "cache": format!("{:?}", v.cache).to_lowercase(),
    })
}

async fn plugins(State(app): State<Arc<App>>) -> Json<Value> {
    let versions = app.host.plugins.versions();
    let snap = app.host.plugins.registry().snapshot();
    let mcp_tools: Vec<Value> = snap
        .tools
        .values()
        .filter(|t| t.plugin().id.starts_with("mcp:"))
        .map(|t| json!({"name": t.spec().name, "plugin": t.plugin().id, "digest": t.plugin().digest}))
        .collect();
    Json(json!({
        "plugins": versions.values().map(|v| plugin_json(v)).collect::<Vec<_>>(),
        "mcp": app.mcp.as_ref().map(|m| m.status()).unwrap_or_default(),
        "mcp_tools": mcp_tools,
        "generation": snap.generation,
    }))
}

/// Plugin and MCP changes: the history so far, then live.
async fn plugin_events(State(app): State<Arc<App>>) -> ApiResult<Response> {
    let mut plugin_rx = app.host.plugins.subscribe();
    let history = app.host.plugins.history();
    let (mcp_history, mut mcp_rx) = match &app.mcp {
        Some(m) => {
            let (h, rx) = m.subscribe_with_history();
            (h, Some(rx))
        }
        None => (Vec::new(), None),
    };
    let (tx, rx) = mpsc::channel::<SseEvent>(256);
    let shutdown = app.shutdown.clone();
    tokio::spawn(async move {
        let plugin = |k: &EventKind| serde_json::to_string(k).ok().map(|s| SseEvent::default().data(s));
        let mcp = |d: Value| {
            SseEvent::default().data(json!({"type": crate::mcp::client::STATUS_EVENT, "data": d}).to_string())
        };
        let mut first: Vec<SseEvent> = history.iter().filter_map(plugin).collect();
        first.extend(mcp_history.into_iter().map(mcp));
        for e in first {
            if tx.send(e).await.is_err() {
                return;
            }
        }
        let _ = tx.send(SseEvent::default().event("ready").data("{}")).await;
        loop {
            let e = tokio::select! {
                r = plugin_rx.recv() => match r {
                    Ok(k) => plugin(&k),
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                r = async { match mcp_rx.as_mut() { Some(rx) => rx.recv().await, None => std::future::pending().await } } => match r {
                    Ok(d) => Some(mcp(d)),
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => { mcp_rx = None; continue }
                },
                _ = tx.closed() => return,
                _ = shutdown.cancelled() => return,
            };
            if let Some(e) = e
                && tx.send(e).await.is_err()
            {
                return;
            }
        }
    });
    Ok(sse(rx).into_response())
}
