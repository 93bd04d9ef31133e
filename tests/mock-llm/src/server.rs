//! The HTTP server: hyper 1 over tokio on `127.0.0.1:0`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming};
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use crate::checks::{RequestMeta, Violation, check_request, rule};
use crate::plan::{KEEPALIVE, Step, plan};
use crate::script::{Checks, ErrorReply, ReasoningCheck, Reply, Script};

/// How `Authorization` looked (its value is never recorded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthRecord {
    /// Whether the header was present.
    pub present: bool,
    /// Whether it equalled `Bearer <checks.api_key>`; `None` when no key is
    /// expected.
    pub matched: Option<bool>,
}

/// One recorded request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedRequest {
    /// Arrival index (0-based), counting every request to a chat path.
    pub index: usize,
    /// HTTP method.
    pub method: String,
    /// Request path.
    pub path: String,
    /// Headers (lowercase names; repeated values joined with `, `), without
    /// `Authorization` and `Proxy-Authorization`.
    pub headers: BTreeMap<String, String>,
    /// The `Authorization` header, as present/matched only.
    pub authorization: AuthRecord,
    /// The body as JSON, if it parsed.
    pub body: Option<Value>,
    /// The body as text (lossy UTF-8).
    pub raw_body: String,
    /// What the mock answered (`stream`, `stream (reset)`, `error 429`, …).
    pub reply: String,
    /// Violations found in this request.
    pub violations: Vec<Violation>,
    /// When it arrived: milliseconds since the mock started (to check how
    /// long a client waited between requests, e.g. for `Retry-After`).
    #[serde(default)]
    pub received_ms: u64,
    /// Wire timestamps: when the request head was parsed, in microseconds
    /// since the Unix epoch (comparable across processes on one machine).
    #[serde(default)]
    pub received_unix_us: u64,
    /// When the body had been read, µs since the Unix epoch.
    #[serde(default)]
    pub body_unix_us: u64,
    /// When a streamed reply's body ended (the server saw its last frame
    /// and wrote the terminating chunk), µs since the Unix epoch; `None`
    /// for other replies or a stream that did not end cleanly.
    #[serde(default)]
    pub stream_end_unix_us: Option<u64>,
    /// Which TCP connection carried the request (0-based, in accept order),
    /// so a client's connection reuse can be seen.
    #[serde(default)]
    pub connection: u64,
    /// The body's length in bytes (also when `raw_body` was left empty:
    /// see [`crate::MockLlm::record_bodies_up_to`]).
    #[serde(default)]
    pub body_len: usize,
}

/// Microseconds since the Unix epoch, now.
pub(crate) fn unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) queue: VecDeque<Reply>,
    pub(crate) default_reply: Option<Reply>,
    pub(crate) checks: Checks,
    pub(crate) requests: Vec<RecordedRequest>,
    pub(crate) violations: Vec<Violation>,
    /// Tool-call id → reasoning streamed with it.
    pub(crate) served_reasoning: HashMap<String, String>,
    /// When the mock started.
    pub(crate) started: Option<Instant>,
    /// Bodies longer than this are not kept (`body` and `raw_body` empty).
    pub(crate) record_max: Option<usize>,
}

/// Shared server state.
#[derive(Debug, Clone, Default)]
pub(crate) struct Shared(Arc<Mutex<State>>);

impl Shared {
    pub(crate) fn new(script: Script) -> Self {
        Self(Arc::new(Mutex::new(State {
            queue: script.replies.into(),
            default_reply: script.default_reply,
            checks: script.checks,
            started: Some(Instant::now()),
            ..State::default()
        })))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

type ResBody = BoxBody<Bytes, io::Error>;

/// A TCP stream that, when flagged, closes with an RST (`SO_LINGER` 0)
/// instead of a FIN.
struct Conn {
    inner: TcpStream,
    reset: Arc<AtomicBool>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        if self.reset.load(Ordering::SeqCst) {
            // Zero linger: close() sends RST and discards unsent data.
            let _ = self.inner.set_zero_linger();
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// A response body fed by a channel; an `Err` item aborts the connection.
/// When the channel ends cleanly, the end time is stamped on request
/// `index`'s record.
struct ChannelBody {
    rx: mpsc::Receiver<Result<Bytes, io::Error>>,
    stamp: Option<(Shared, usize)>,
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let polled = self.rx.poll_recv(cx);
        if let Poll::Ready(None) = polled
            && let Some((shared, index)) = self.stamp.take()
        {
            let now = unix_us();
            if let Some(r) = shared.lock().requests.get_mut(index) {
                r.stream_end_unix_us = Some(now);
            }
        }
        polled.map(|item| item.map(|r| r.map(Frame::data)))
    }
}

/// Accepts connections until `shutdown` turns true.
pub(crate) async fn serve(listener: TcpListener, shared: Shared, mut shutdown: watch::Receiver<bool>) {
    let mut next_connection = 0u64;
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => return,
        };
        let Ok((stream, _)) = accepted else { continue };
        let connection = next_connection;
        next_connection += 1;
        let _ = stream.set_nodelay(true);
        let reset = Arc::new(AtomicBool::new(false));
        let conn = Conn { inner: stream, reset: reset.clone() };
        let shared = shared.clone();
        let mut conn_shutdown = shutdown.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let shared = shared.clone();
                let reset = reset.clone();
                async move { Ok::<_, Infallible>(handle(req, shared, reset, connection).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(conn), service);
            tokio::select! {
                _ = conn => {}
                _ = conn_shutdown.changed() => {}
            }
        });
    }
}

fn full(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response<ResBody> {
    let mut res = Response::new(Full::new(body.into()).map_err(|never| match never {}).boxed());
    *res.status_mut() = status;
    res.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    res
}

fn json_response(status: StatusCode, value: &Value) -> Response<ResBody> {
    full(status, "application/json", value.to_string())
}

async fn handle(req: Request<Incoming>, shared: Shared, reset: Arc<AtomicBool>, connection: u64) -> Response<ResBody> {
    let arrived = unix_us();
    let path = req.uri().path().to_string();
    match (req.method(), path.as_str()) {
        (&Method::POST, "/v1/chat/completions" | "/chat/completions") => {
            chat(req, shared, reset, Wire { arrived, connection }).await
        }
        (&Method::GET, "/_mock/requests") => {
            let value = serde_json::to_value(&shared.lock().requests).unwrap_or(Value::Null);
            json_response(StatusCode::OK, &value)
        }
        (&Method::GET, "/_mock/violations") => {
            let value = serde_json::to_value(&shared.lock().violations).unwrap_or(Value::Null);
            json_response(StatusCode::OK, &value)
        }
        (&Method::POST, "/_mock/replies") => push_replies(req, shared).await,
        (&Method::GET, "/v1/models" | "/models") => {
            json_response(StatusCode::OK, &json!({"object": "list", "data": [{"id": "mock-model", "object": "model"}]}))
        }
        _ => json_response(
            StatusCode::NOT_FOUND,
            &json!({"error": {"message": format!("mock-llm: no route {path}"), "type": "not_found_error"}}),
        ),
    }
}

async fn push_replies(req: Request<Incoming>, shared: Shared) -> Response<ResBody> {
    let bytes = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return json_response(StatusCode::BAD_REQUEST, &json!({"error": e.to_string()})),
    };
    let replies: Vec<Reply> = match serde_json::from_slice::<Vec<Reply>>(&bytes) {
        Ok(r) => r,
        Err(_) => match serde_json::from_slice::<Reply>(&bytes) {
            Ok(r) => vec![r],
            Err(e) => {
                return json_response(StatusCode::BAD_REQUEST, &json!({"error": e.to_string()}));
            }
        },
    };
    let mut state = shared.lock();
    state.queue.extend(replies);
    json_response(StatusCode::OK, &json!({"queued": state.queue.len()}))
}

/// The DeepSeek message for a missing pass-back.
const REASONING_400: &str = "The reasoning_content in the thinking mode must be passed back to the API.";

/// Where and when a request arrived.
struct Wire {
    arrived: u64,
    connection: u64,
}

async fn chat(req: Request<Incoming>, shared: Shared, reset: Arc<AtomicBool>, wire: Wire) -> Response<ResBody> {
    let (parts, body) = req.into_parts();
    let collected = body.collect().await;
    // Stamped when the last byte is in, before the chunks are joined: the
    // mock's own copy is not the client's time.
    let body_unix_us = unix_us();
    let bytes = match collected {
        Ok(b) => b.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let mut headers = BTreeMap::new();
    for name in parts.headers.keys() {
        let n = name.as_str();
        if n == "authorization" || n == "proxy-authorization" {
            continue;
        }
        let joined: Vec<String> =
            parts.headers.get_all(name).iter().map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()).collect();
        headers.insert(n.to_string(), joined.join(", "));
    }
    let body_json: Option<Value> = serde_json::from_slice(&bytes).ok();
    let model =
        body_json.as_ref().and_then(|b| b.get("model")).and_then(Value::as_str).unwrap_or("mock-model").to_string();

    // Decide under the lock, act outside it.
    let (index, reply) = {
        let mut state = shared.lock();
        let index = state.requests.len();
        let authorization = header("authorization");
        let meta = RequestMeta { index, content_type: header("content-type"), authorization };
        let mut violations = check_request(&state.checks, meta, body_json.as_ref(), &state.served_reasoning);
        let auth = AuthRecord {
            present: authorization.is_some(),
            matched: state.checks.api_key.as_ref().map(|k| authorization == Some(format!("Bearer {k}").as_str())),
        };
        let reply = if state.checks.reject_violations && !violations.is_empty() {
            Err(rejection(&violations))
        } else if let Some(r) = state.queue.pop_front().or_else(|| state.default_reply.clone()) {
            Ok(r)
        } else {
            violations.push(Violation {
                request: index,
                rule: rule::SCRIPT_EXHAUSTED.to_string(),
                message: "no scripted reply left".to_string(),
            });
            Err(ErrorReply {
                message: Some(format!("mock-llm: no scripted reply left for request #{index}")),
                error_type: Some("mock_error".into()),
                ..ErrorReply::new(500)
            })
        };
        if let Ok(Reply::Stream(s)) = &reply
            && state.checks.reasoning == ReasoningCheck::Required
        {
            for call in &s.tool_calls {
                state.served_reasoning.insert(call.id.clone(), s.reasoning.clone());
            }
        }
        let described = match &reply {
            Ok(r) => r.describe(),
            Err(e) => format!("error {} (mock)", e.status),
        };
        state.violations.extend(violations.iter().cloned());
        let received_ms = state.started.map(|t| t.elapsed().as_millis() as u64).unwrap_or(0);
        let keep = state.record_max.is_none_or(|max| bytes.len() <= max);
        state.requests.push(RecordedRequest {
            index,
            method: parts.method.to_string(),
            path: parts.uri.path().to_string(),
            headers,
            authorization: auth,
            body: if keep { body_json } else { None },
            raw_body: if keep { String::from_utf8_lossy(&bytes).into_owned() } else { String::new() },
            body_len: bytes.len(),
            reply: described,
            violations,
            received_ms,
            received_unix_us: wire.arrived,
            body_unix_us,
            stream_end_unix_us: None,
            connection: wire.connection,
        });
        (index, reply)
    };

    match reply {
        Err(e) => error_response(&e),
        Ok(Reply::Error(e)) => error_response(&e),
        Ok(Reply::ContextOverflow { limit }) => error_response(&ErrorReply {
            message: Some(format!(
                "This model's maximum context length is {limit} tokens. However, you requested {} tokens ({} in the messages, 4096 in the completion). Please reduce the length of the messages or completion.",
                limit + 8_000,
                limit + 3_904
            )),
            error_type: Some("invalid_request_error".into()),
            code: Some("invalid_request_error".into()),
            ..ErrorReply::new(400)
        }),
        Ok(Reply::Raw(raw)) => {
            let status = StatusCode::from_u16(raw.status).unwrap_or(StatusCode::OK);
            let mut res = full(status, "text/event-stream", raw.body);
            if let Ok(v) = HeaderValue::from_str(&raw.content_type) {
                res.headers_mut().insert(CONTENT_TYPE, v);
            }
            add_headers(&mut res, &raw.headers);
            res
        }
        Ok(Reply::Stream(s)) => {
            if s.headers_delay_ms > 0 {
                tokio::time::sleep(Duration::from_millis(s.headers_delay_ms)).await;
            }
            let steps = plan(&s, &model, index);
            let (tx, rx) = mpsc::channel(16);
            tokio::spawn(drive(steps, s.write_bytes, s.chunk_delay_ms, tx, reset));
            let mut res = Response::new(ChannelBody { rx, stamp: Some((shared.clone(), index)) }.boxed());
            res.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
            res.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            add_headers(&mut res, &s.headers);
            res
        }
    }
}

fn rejection(violations: &[Violation]) -> ErrorReply {
    let message = if violations.iter().any(|v| v.rule == rule::REASONING_PASSBACK) {
        REASONING_400.to_string()
    } else {
        let all: Vec<String> = violations.iter().map(|v| format!("{}: {}", v.rule, v.message)).collect();
        format!("mock-llm: request violates the API contract: {}", all.join("; "))
    };
    let status = if violations.iter().any(|v| v.rule == rule::AUTH) { 401 } else { 400 };
    ErrorReply { message: Some(message), ..ErrorReply::new(status) }
}

fn error_response(e: &ErrorReply) -> Response<ResBody> {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut res = full(status, "application/json", e.body_text());
    if let Some(v) = e.retry_after.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
        res.headers_mut().insert(RETRY_AFTER, v);
    }
    add_headers(&mut res, &e.headers);
    res
}

/// Appends scripted headers (invalid names or values are left out).
fn add_headers(res: &mut Response<ResBody>, headers: &[(String, String)]) {
    for (k, v) in headers {
        if let (Ok(k), Ok(v)) = (hyper::header::HeaderName::from_bytes(k.as_bytes()), HeaderValue::from_str(v)) {
            res.headers_mut().append(k, v);
        }
    }
}

/// Plays a plan into the body channel. Stops quietly when the client goes
/// away (the send fails).
async fn drive(
    steps: Vec<Step>,
    write_bytes: usize,
    delay_ms: u64,
    tx: mpsc::Sender<Result<Bytes, io::Error>>,
    reset: Arc<AtomicBool>,
) {
    for step in steps {
        match step {
            Step::Write(bytes) => {
                let size = if write_bytes == 0 { bytes.len().max(1) } else { write_bytes };
                for piece in bytes.chunks(size) {
                    if tx.send(Ok(Bytes::copy_from_slice(piece))).await.is_err() {
                        return;
                    }
                    if delay_ms > 0 {
                        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                    } else if write_bytes > 0 {
                        // Let hyper flush each piece as its own write.
                        tokio::task::yield_now().await;
                    }
                }
            }
            Step::Stall { ms, keepalive_every_ms } => {
                let mut left = ms;
                while left > 0 {
                    let nap = if keepalive_every_ms == 0 { left } else { keepalive_every_ms.min(left) };
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(nap)) => {}
                        // The client went away: stop at once.
                        _ = tx.closed() => return,
                    }
                    left -= nap;
                    if keepalive_every_ms > 0 && left > 0 && tx.send(Ok(Bytes::from_static(KEEPALIVE))).await.is_err() {
                        return;
                    }
                }
            }
            Step::Reset => {
                // Give hyper a moment to put what was sent on the wire,
                // then abort: the connection is dropped with an RST.
                tokio::time::sleep(Duration::from_millis(30)).await;
                reset.store(true, Ordering::SeqCst);
                let _ = tx.send(Err(io::Error::new(io::ErrorKind::ConnectionReset, "mock-llm: injected reset"))).await;
                return;
            }
        }
    }
}
