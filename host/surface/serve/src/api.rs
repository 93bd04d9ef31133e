//! The routes of the API: JSON requests and answers, and the event streams.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use axum::{Json, Router};
use futures::Stream;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use wharf_core::Projection;
use wharf_core::approval::Approval;
use wharf_core::events::{ApprovalOutcome, Event, EventKind, InboxKind};
use wharf_core::store::{SessionSummary, StoreError};

use crate::ServeError;
use crate::render::Decorator;
use crate::server::{Server, lock};

/// The OpenAPI document of these routes.
pub const OPENAPI: &str = include_str!("../../../../docs/openapi.json");

/// Longest prompt, steer or followup text accepted (bytes).
pub const MAX_TEXT: usize = 1 << 20;
/// Most events one `history` answer holds.
pub const MAX_HISTORY: usize = 10_000;
/// Per-turn rows kept in a usage answer (the latest ones).
const MAX_USAGE_TURNS: usize = 200;

/// An API failure: a status and a message.
pub(crate) struct ApiError(StatusCode, String);

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
            StoreError::Locked { .. }
            | StoreError::AlreadyExists(_)
            | StoreError::Leased { .. }
            | StoreError::Fenced { .. } => StatusCode::CONFLICT,
            StoreError::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError(status, e.to_string())
    }
}

impl From<ServeError> for ApiError {
    fn from(e: ServeError) -> Self {
        match e {
            ServeError::SessionStore(s) => s.into(),
            e => ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        }
    }
}

type ApiResult<T> = Result<T, ApiError>;
type AppState = State<Arc<Server>>;

/// Every API route: path, method and handler. The router and
/// [`route_table`] are both built from this list.
fn routes() -> Vec<(&'static str, Method, MethodRouter<Arc<Server>>)> {
    vec![
        ("/api/info", Method::GET, get(info)),
        ("/api/openapi.json", Method::GET, get(openapi)),
        ("/api/sessions", Method::GET, get(list_sessions)),
        ("/api/sessions", Method::POST, post(new_session)),
        ("/api/sessions/{id}", Method::GET, get(session)),
        ("/api/sessions/{id}/history", Method::GET, get(history)),
        ("/api/sessions/{id}/events", Method::GET, get(session_events)),
        ("/api/sessions/{id}/prompt", Method::POST, post(prompt)),
        ("/api/sessions/{id}/followup", Method::POST, post(followup)),
        ("/api/sessions/{id}/steer", Method::POST, post(steer)),
        ("/api/sessions/{id}/cancel", Method::POST, post(cancel)),
        ("/api/sessions/{id}/approvals", Method::GET, get(approvals)),
        ("/api/sessions/{id}/approvals/{call}", Method::POST, post(approve)),
        ("/api/sessions/{id}/questions", Method::GET, get(questions)),
        ("/api/sessions/{id}/questions/{call}", Method::POST, post(answer_question)),
        ("/api/sessions/{id}/resume", Method::POST, post(resume)),
        ("/api/sessions/{id}/unload", Method::POST, post(unload)),
        ("/api/sessions/{id}/fork", Method::POST, post(fork)),
        ("/api/plugins", Method::GET, get(plugins)),
        ("/api/plugins/events", Method::GET, get(plugin_events)),
    ]
}

/// The API's routes as (method, path) pairs, in the router's path syntax
/// (`{id}`), e.g. to check them against the OpenAPI document.
pub fn route_table() -> Vec<(String, String)> {
    routes().into_iter().map(|(p, m, _)| (m.as_str().to_string(), p.to_string())).collect()
}

/// The API routes over `server` (without the security middleware).
pub(crate) fn api_router(server: Arc<Server>) -> Router {
    let mut by_path: Vec<(&'static str, MethodRouter<Arc<Server>>)> = Vec::new();
    for (path, _, handler) in routes() {
        match by_path.iter_mut().find(|(p, _)| *p == path) {
            Some((_, r)) => *r = std::mem::take(r).merge(handler),
            None => by_path.push((path, handler)),
        }
    }
    let mut router = Router::new();
    for (path, handler) in by_path {
        router = router.route(path, handler);
    }
    router
        .route("/api/{*rest}", axum::routing::any(|| async { ApiError(StatusCode::NOT_FOUND, "not found".into()) }))
        .with_state(server)
}

/// `GET /api/info`: the host, and how many sessions it has loaded.
#[derive(serde::Serialize)]
struct InfoView {
    #[serde(flatten)]
    host: wharf_harness::views::HostInfo,
    loaded: usize,
    /// The bundles' slash commands (`/NAME ARGS` in any input expands).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    commands: Vec<wharf_harness::commands::SlashCommand>,
}

async fn info(State(app): AppState) -> Json<InfoView> {
    Json(InfoView { host: app.harness.info(), loaded: app.loaded().len(), commands: app.harness.bundle_commands() })
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

/// A session's usage, recomputed when its log grew.
fn usage_of(app: &Server, s: &SessionSummary) -> Value {
    if let Some((bytes, v)) = lock(&app.usage).get(&s.id)
        && *bytes == s.bytes
    {
        return v.clone();
    }
    let v = match app.harness.store.load(&s.id) {
        Ok(loaded) => {
            let mut u = crate::harness_ops::usage(&app.harness, &loaded.events);
            let extra = u.summary.turns.len().saturating_sub(MAX_USAGE_TURNS);
            u.summary.turns.drain(..extra);
            serde_json::to_value(&u).unwrap_or(Value::Null)
        }
        Err(e) => {
            tracing::debug!(session = %s.id, "usage: {e}");
            return Value::Null;
        }
    };
    let mut cache = lock(&app.usage);
    if cache.len() > 10_000 {
        cache.clear();
    }
    cache.insert(s.id.clone(), (s.bytes, v.clone()));
    v
}

fn summary_json(app: &Server, s: &SessionSummary, turns: bool) -> Value {
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
        "live": live.is_some() || app.is_loaded(&s.id),
        "running": live.as_ref().is_some_and(|l| l.agent.is_running()),
        "pending_approvals": live.as_ref().map_or(0, |l| l.approvals.list().len()),
    })
}

#[derive(Deserialize, Default)]
struct ListQuery {
    /// Only sessions whose header names this workspace.
    workspace: Option<String>,
}

async fn list_sessions(State(app): AppState, Query(q): Query<ListQuery>) -> ApiResult<Json<Value>> {
    let mut list = app.harness.store.list()?;
    list.reverse();
    let want = q.workspace.filter(|w| !w.is_empty());
    Ok(Json(Value::Array(
        list.iter()
            .filter(|s| want.as_deref().is_none_or(|w| s.header.workspace.as_deref() == Some(w)))
            .map(|s| summary_json(&app, s, false))
            .collect(),
    )))
}

async fn session(State(app): AppState, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    let list = app.harness.store.list()?;
    let s = list
        .iter()
        .find(|s| s.id == id)
        .ok_or_else(|| ApiError(StatusCode::NOT_FOUND, format!("session `{id}` not found")))?;
    Ok(Json(summary_json(&app, s, true)))
}

#[derive(Deserialize, Default)]
struct HistoryQuery {
    from: Option<u64>,
    limit: Option<usize>,
}

/// The stored events from `from` (default 1), at most `limit`.
async fn history(
    State(app): AppState,
    Path(id): Path<String>,
    Query(q): Query<HistoryQuery>,
) -> ApiResult<Json<Value>> {
    let from = q.from.unwrap_or(1).max(1);
    let limit = q.limit.unwrap_or(1000).clamp(1, MAX_HISTORY);
    let events = app.harness.store.load(&id)?.events;
    let last = events.last().map_or(0, |e| e.seq);
    let page: Vec<&Event> = events.iter().filter(|e| e.seq >= from).take(limit).collect();
    let next = page.last().map_or(from, |e| e.seq + 1);
    Ok(Json(json!({"events": page, "next": next, "last_seq": last})))
}

#[derive(Deserialize, Default)]
struct TextBody {
    #[serde(default)]
    text: String,
}

fn check_text(text: &str) -> ApiResult<()> {
    if text.trim().is_empty() {
        return Err(ApiError(StatusCode::BAD_REQUEST, "empty text".into()));
    }
    if text.len() > MAX_TEXT {
        return Err(ApiError(StatusCode::PAYLOAD_TOO_LARGE, format!("text longer than {MAX_TEXT} bytes")));
    }
    Ok(())
}

async fn new_session(State(app): AppState, body: Option<Json<TextBody>>) -> ApiResult<Json<Value>> {
    let text = body.map(|b| b.0.text).unwrap_or_default();
    if !text.trim().is_empty() {
        check_text(&text)?;
    }
    let text = app.harness.expand_command(&text).unwrap_or(text);
    let (id, inbox) = app
        .with_session(None, |l| {
            let inbox = if text.trim().is_empty() { None } else { Some(l.agent.followup(text)) };
            (l.agent.session_id().to_string(), inbox)
        })
        .await?;
    let inbox = inbox.transpose()?;
    Ok(Json(json!({"id": id, "inbox_id": inbox})))
}

/// How an input reaches the agent.
#[derive(Clone, Copy)]
enum Input {
    /// A new turn now; refused while one runs.
    Prompt,
    /// After the running turn (or now, when idle).
    Followup,
    /// Into the running turn at its next step (or a new turn, when idle).
    Steer,
}

async fn input(app: &Arc<Server>, id: &str, text: String, how: Input) -> ApiResult<Json<Value>> {
    check_text(&text)?;
    // A bundle's slash command stands for its prompt.
    let text = app.harness.expand_command(&text).unwrap_or(text);
    let mut routed = false;
    let r = loop {
        let t = text.clone();
        let r = app
            .with_session(Some(id), |l| match how {
                // Busy while the log shows the turn open: a client that has
                // seen `turn/end` may prompt at once, while the agent is
                // still returning from that turn (the prompt then runs next).
                Input::Prompt if l.agent.is_running() && l.agent.log().open_turn().is_some() => None,
                Input::Prompt | Input::Followup => Some(l.agent.followup(t)),
                Input::Steer => Some(l.agent.steer(t)),
            })
            .await;
        match r {
            Err(ServeError::SessionStore(StoreError::Leased { holder, .. })) => {
                return remote_input(app, id, &text, how, &holder);
            }
            // Fenced while logging it: this host just lost the session
            // (dropped here now); try again, which routes to the new owner.
            Ok(Some(Err(StoreError::Fenced { .. }))) if !routed => {
                routed = true;
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            r => break r?,
        }
    };
    match r {
        None => Err(ApiError(
            StatusCode::CONFLICT,
            "a turn is running: send a steer (this turn) or a followup (after it)".into(),
        )),
        Some(inbox) => Ok(Json(json!({"id": id, "inbox_id": inbox?}))),
    }
}

/// Input for a session another host owns: stored for it (the owner logs it
/// and marks it delivered in one transaction; if the owner dies first, the
/// host that takes the session over does).
fn remote_input(app: &Server, id: &str, text: &str, how: Input, holder: &str) -> ApiResult<Json<Value>> {
    let store = &app.harness.store;
    if matches!(how, Input::Prompt) {
        let loaded = store.load(id)?;
        if Projection::from_events(&loaded.events).open_turn().is_some() {
            return Err(ApiError(
                StatusCode::CONFLICT,
                format!("a turn is running on {holder}: send a steer (this turn) or a followup (after it)"),
            ));
        }
    }
    let kind = match how {
        Input::Prompt | Input::Followup => InboxKind::Followup,
        Input::Steer => InboxKind::Steer,
    };
    let inbox = store.push_input(id, kind, text)?;
    Ok(Json(json!({"id": id, "inbox_id": inbox, "owner": holder})))
}

async fn prompt(State(app): AppState, Path(id): Path<String>, Json(body): Json<TextBody>) -> ApiResult<Json<Value>> {
    input(&app, &id, body.text, Input::Prompt).await
}

async fn followup(State(app): AppState, Path(id): Path<String>, Json(body): Json<TextBody>) -> ApiResult<Json<Value>> {
    input(&app, &id, body.text, Input::Followup).await
}

async fn steer(State(app): AppState, Path(id): Path<String>, Json(body): Json<TextBody>) -> ApiResult<Json<Value>> {
    input(&app, &id, body.text, Input::Steer).await
}

async fn cancel(State(app): AppState, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    let cancelled = app.live(&id).is_some_and(|l| {
        l.touch();
        l.agent.cancel()
    });
    Ok(Json(json!({"cancelled": cancelled})))
}

async fn resume(State(app): AppState, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    let id = app.with_session(Some(&id), |l| l.agent.session_id().to_string()).await?;
    Ok(Json(json!({"id": id, "live": true})))
}

async fn unload(State(app): AppState, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    if !app.is_loaded(&id) {
        return Ok(Json(json!({"unloaded": false, "live": false})));
    }
    let unloaded = app.unload(&id);
    Ok(Json(json!({"unloaded": unloaded, "live": !unloaded})))
}

#[derive(Deserialize, Default)]
struct ForkBody {
    at_seq: Option<u64>,
}

async fn fork(State(app): AppState, Path(id): Path<String>, body: Option<Json<ForkBody>>) -> ApiResult<Json<Value>> {
    let store = &app.harness.store;
    let at = match body.and_then(|b| b.0.at_seq) {
        Some(s) => s,
        None => {
            // The last turn boundary.
            let loaded = store.load(&id)?;
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
    let log = store.fork(&id, at)?;
    let new_id = log.id().to_string();
    log.flush().await?;
    drop(log);
    app.with_session(Some(&new_id), |_| ()).await?;
    Ok(Json(json!({"id": new_id, "parent": id, "at_seq": at})))
}

async fn approvals(State(app): AppState, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    let pending = match app.live(&id) {
        Some(l) => l.approvals.list(),
        None => {
            // Not loaded here: nothing can be waiting (but say 404 for no session).
            app.harness.store.load(&id)?;
            Vec::new()
        }
    };
    Ok(Json(json!({"id": id, "pending": pending})))
}

#[derive(Deserialize)]
struct ApprovalBody {
    outcome: ApprovalOutcome,
    #[serde(default)]
    note: Option<String>,
}

async fn approve(
    State(app): AppState,
    Path((id, call)): Path<(String, String)>,
    Json(body): Json<ApprovalBody>,
) -> ApiResult<Json<Value>> {
    if body.outcome == ApprovalOutcome::Cancelled {
        return Err(ApiError(StatusCode::BAD_REQUEST, "answer allowed-once, allowed-for-session or rejected".into()));
    }
    let l =
        app.live(&id).ok_or_else(|| ApiError(StatusCode::NOT_FOUND, format!("session `{id}` is not running here")))?;
    let Some((_, reply)) = l.approvals.take(&call).await else {
        return Err(ApiError(StatusCode::NOT_FOUND, format!("no approval question for call `{call}`")));
    };
    let note = body.note.filter(|n| !n.is_empty()).map(|n| wharf_core::util::cut_str(&n, 4096).to_string());
    let approval = Approval { outcome: body.outcome, by: app.options.surface.clone(), note };
    l.touch();
    if reply.send(approval).is_err() {
        return Err(ApiError(StatusCode::CONFLICT, "the question was withdrawn (the turn ended)".into()));
    }
    Ok(Json(json!({"ok": true})))
}

async fn questions(State(app): AppState, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    let pending = match app.live(&id) {
        Some(l) => l.questions.list(),
        None => {
            app.harness.store.load(&id)?;
            Vec::new()
        }
    };
    Ok(Json(json!({"id": id, "pending": pending})))
}

#[derive(Deserialize)]
struct QuestionBody {
    action: String,
    #[serde(default)]
    content: Option<Value>,
}

/// Answers a tool's question; an `accept` whose content does not fit the
/// form is 400 and the question stays open.
async fn answer_question(
    State(app): AppState,
    Path((id, call)): Path<(String, String)>,
    Json(body): Json<QuestionBody>,
) -> ApiResult<Json<Value>> {
    use wharf_core::question::{Answer, Reply};
    let bad = |m: String| ApiError(StatusCode::BAD_REQUEST, m);
    if !matches!(body.action.as_str(), "accept" | "decline" | "cancel") {
        return Err(bad("answer with action accept (and content), decline or cancel".into()));
    }
    let l =
        app.live(&id).ok_or_else(|| ApiError(StatusCode::NOT_FOUND, format!("session `{id}` is not running here")))?;
    let Some((question, reply)) = l.questions.take(&call).await else {
        return Err(ApiError(StatusCode::NOT_FOUND, format!("no question for call `{call}`")));
    };
    let answer = match body.action.as_str() {
        "accept" => match question.form.check(body.content.as_ref().unwrap_or(&Value::Null)) {
            Ok(content) => Answer::Accept(content),
            Err(e) => {
                // Still open: put it back for a corrected answer.
                l.questions.put(question, reply, app.options.max_pending_approvals.max(1));
                return Err(bad(format!("the content does not fit the form: {e}")));
            }
        },
        "decline" => Answer::Decline,
        _ => Answer::Cancel,
    };
    l.touch();
    if reply.send(Reply { answer, by: app.options.surface.clone(), note: None }).is_err() {
        return Err(ApiError(StatusCode::CONFLICT, "the question was withdrawn (the call ended)".into()));
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

/// Sends `ev` if it is the next one; whether the client is still there.
async fn forward(tx: &mpsc::Sender<SseEvent>, dec: &Decorator, next: &mut u64, ev: &Event) -> bool {
    if ev.seq < *next {
        return true;
    }
    *next = ev.seq + 1;
    match sse_event(dec, ev) {
        Some(e) => tx.send(e).await.is_ok(),
        None => true,
    }
}

/// The log from `from` (or `Last-Event-ID` + 1), then live events: while
/// the session is loaded here, from its log; while it is not (never
/// opened, or unloaded), from the file, waiting for it to be loaded. Every
/// event is sent once, in seq order, whatever happens in between.
async fn session_events(
    State(app): AppState,
    Path(id): Path<String>,
    Query(q): Query<FromQuery>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let last_id = headers.get("last-event-id").and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u64>().ok());
    let from = last_id.map(|s| s.saturating_add(1)).or(q.from).unwrap_or(1).max(1);
    // 404 before the stream starts.
    if !app.is_loaded(&id) {
        app.harness.store.load(&id)?;
    }
    let (tx, rx) = mpsc::channel::<SseEvent>(256);
    let shutdown = app.shutdown.clone();
    tokio::spawn(async move {
        let dec = Decorator;
        let mut next = from;
        loop {
            // Subscribe to loadings before looking, so one cannot slip between.
            let mut opened = app.opened.subscribe();
            let sub = match app.live(&id) {
                Some(l) => match l.agent.log().subscribe_from(next) {
                    Ok(rx) => Some((rx, l.closed.clone())),
                    Err(e) => {
                        let _ = tx.send(SseEvent::default().event("error").data(e.to_string())).await;
                        return;
                    }
                },
                None => None,
            };
            match sub {
                Some((mut events, closed)) => loop {
                    tokio::select! {
                        ev = events.recv() => match ev {
                            Some(ev) => if !forward(&tx, &dec, &mut next, &ev).await { return },
                            None => break,
                        },
                        _ = closed.cancelled() => {
                            while let Ok(ev) = events.try_recv() {
                                if !forward(&tx, &dec, &mut next, &ev).await { return }
                            }
                            break;
                        }
                        _ = tx.closed() => return,
                        _ = shutdown.cancelled() => return,
                    }
                },
                None => {
                    // Not loaded here: another host's writes, through the
                    // store (NOTIFY), until it is loaded here.
                    match app.harness.store.watch(&id, next) {
                        Ok(mut events) => loop {
                            tokio::select! {
                                ev = events.recv() => match ev {
                                    Some(ev) => if !forward(&tx, &dec, &mut next, &ev).await { return },
                                    None => break,
                                },
                                r = opened.recv() => match r {
                                    Ok(s) if s == id => break,
                                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {
                                        if app.is_loaded(&id) { break }
                                    }
                                    Err(broadcast::error::RecvError::Closed) => return,
                                },
                                _ = tx.closed() => return,
                                _ = shutdown.cancelled() => return,
                            }
                        },
                        Err(StoreError::Unsupported { .. }) => {}
                        Err(e) => {
                            let _ = tx.send(SseEvent::default().event("error").data(e.to_string())).await;
                            return;
                        }
                    }
                    if app.is_loaded(&id) {
                        continue;
                    }
                    match app.harness.store.load(&id) {
                        Ok(stored) => {
                            for ev in &stored.events {
                                if !forward(&tx, &dec, &mut next, ev).await {
                                    return;
                                }
                            }
                        }
                        Err(e) => {
                            let _ = tx.send(SseEvent::default().event("error").data(e.to_string())).await;
                            return;
                        }
                    }
                    // Not loaded: wait until it is (prompt, resume).
                    loop {
                        tokio::select! {
                            r = opened.recv() => match r {
                                Ok(s) if s == id => break,
                                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {
                                    if app.is_loaded(&id) { break }
                                }
                                Err(broadcast::error::RecvError::Closed) => return,
                            },
                            _ = tx.closed() => return,
                            _ = shutdown.cancelled() => return,
                        }
                    }
                }
            }
        }
    });
    Ok(sse(rx).into_response())
}

async fn plugins(State(app): AppState) -> Json<wharf_harness::views::PluginsView> {
    Json(app.harness.plugins_view())
}

/// Plugin changes: the history so far, a `ready` event, then live.
async fn plugin_events(State(app): AppState) -> ApiResult<Response> {
    let mut feed = crate::harness_ops::plugin_feed(&app.harness);
    let (tx, rx) = mpsc::channel::<SseEvent>(256);
    let shutdown = app.shutdown.clone();
    tokio::spawn(async move {
        for e in feed.history.drain(..) {
            if tx.send(SseEvent::default().data(e)).await.is_err() {
                return;
            }
        }
        let _ = tx.send(SseEvent::default().event("ready").data("{}")).await;
        loop {
            tokio::select! {
                r = feed.live.recv() => match r {
                    Some(e) => if tx.send(SseEvent::default().data(e)).await.is_err() { return },
                    None => return,
                },
                _ = tx.closed() => return,
                _ = shutdown.cancelled() => return,
            }
        }
    });
    Ok(sse(rx).into_response())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// Every route is in the OpenAPI document and every documented
    /// operation is a route.
    #[test]
    fn openapi_matches_the_router() {
        let doc: Value = serde_json::from_str(OPENAPI).unwrap();
        let mut documented: Vec<(String, String)> = Vec::new();
        for (path, ops) in doc["paths"].as_object().unwrap() {
            for method in ops.as_object().unwrap().keys() {
                if ["get", "post", "put", "delete", "patch"].contains(&method.as_str()) {
                    documented.push((method.to_uppercase(), path.clone()));
                }
            }
        }
        documented.sort();
        let mut routed = route_table();
        routed.sort();
        assert_eq!(routed, documented);
    }
}
