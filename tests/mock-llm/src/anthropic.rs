//! A mock of the Anthropic Messages API (`POST /v1/messages`, streaming) on
//! its own port, which **validates every request** and records it.
//!
//! Checked (each broken rule is a [`Violation`] and the request is answered
//! with a 400 `invalid_request_error` — 401 `authentication_error` for the
//! key — in Anthropic's error shape; the scripted reply stays queued):
//!
//! - headers: `x-api-key` equal to the script's `api_key` (its value is
//!   never recorded), `anthropic-version` equal to `version` (default
//!   `2023-06-01`), `content-type: application/json`;
//! - body: `model` (equal to `model` when set), `max_tokens` ≥ 1,
//!   `stream: true`, `system` a string or non-empty text blocks;
//! - `messages`: non-empty, starting with `user`, roles alternating, content
//!   a non-empty string or non-empty block list of known block types
//!   (user: `text`, `tool_result`; assistant: `thinking`,
//!   `redacted_thinking`, `text`, `tool_use`), no empty text, thinking
//!   blocks first;
//! - every `tool_use` (with a unique id and an object `input`) is answered
//!   by exactly one `tool_result` in the very next (user) message, before
//!   its text; no `tool_result` answers an id the previous turn did not use;
//! - `tools`: unique names `[a-zA-Z0-9_-]{1,64}`, `input_schema` an object
//!   schema (`type: object`);
//! - `cache_control`: `{"type": "ephemeral"}` (optional `ttl` `5m`/`1h`), at
//!   most 4 in the request;
//! - `thinking`: `{type: enabled, budget_tokens ≥ 1024 and < max_tokens}` or
//!   `{type: disabled}`; with thinking enabled, a last assistant turn that
//!   calls tools must start with its thinking;
//! - every thinking block the mock streamed with a tool-calling turn comes
//!   back in that turn byte-identical, text and `signature`.
//!
//! Replies (`kind`): `stream` ([`StreamReply`]: `blocks` of `thinking`
//! (`thinking`, `signature`), `redacted_thinking` (`data`), `text`,
//! `tool_use` (`id`, `name`, `input`), streamed as `message_start`, `ping`,
//! `content_block_start`/`_delta` (`chunk_chars` per delta, default 5)
//! /`_stop`, `message_delta` (`stop_reason`, default `tool_use` when a tool
//! is used else `end_turn`; output usage) and `message_stop`; `usage`
//! fields go to `message_start`; `error_after_blocks` ends the stream with
//! an `error` event of `error_type` instead; `event_delay_ms` paces the
//! events) or `error` ([`ErrorReply`]:
//! `status`, `error_type`, `message`, `retry_after`).

use std::collections::{HashMap, HashSet, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::{MockError, Violation};

/// Largest request body read, bytes.
const MAX_BODY: usize = 32 << 20;

/// One content block of a streamed reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum MockBlock {
    /// Thinking with its signature.
    Thinking {
        /// Text.
        thinking: String,
        /// Signature.
        signature: String,
    },
    /// Encrypted thinking.
    RedactedThinking {
        /// Payload.
        data: String,
    },
    /// Visible text.
    Text {
        /// Text.
        text: String,
    },
    /// A tool call.
    ToolUse {
        /// Id.
        id: String,
        /// Tool name.
        name: String,
        /// Arguments.
        input: Value,
    },
}

/// A `200 text/event-stream` reply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StreamReply {
    /// The content blocks.
    pub blocks: Vec<MockBlock>,
    /// `stop_reason`; default from the blocks.
    pub stop_reason: Option<String>,
    /// `input_tokens`, `output_tokens`, `cache_read_input_tokens`, `cache_creation_input_tokens`.
    pub usage: Option<Value>,
    /// Characters per delta (default 5).
    pub chunk_chars: Option<usize>,
    /// Stop after this many blocks with an `error` event.
    pub error_after_blocks: Option<usize>,
    /// That event's `error.type` (default `overloaded_error`).
    pub error_type: Option<String>,
    /// Pause between events, ms (0: the whole body at once).
    pub event_delay_ms: u64,
}

/// An error reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorReply {
    /// HTTP status.
    pub status: u16,
    /// `error.type` (default after the status).
    #[serde(default)]
    pub error_type: Option<String>,
    /// `error.message`.
    #[serde(default)]
    pub message: Option<String>,
    /// `retry-after` header.
    #[serde(default)]
    pub retry_after: Option<String>,
}

/// A scripted reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MockReply {
    /// A stream.
    Stream(StreamReply),
    /// An HTTP error.
    Error(ErrorReply),
}

/// The script: replies in order, and what requests must carry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AnthropicScript {
    /// Replies, one per request.
    pub replies: Vec<MockReply>,
    /// Expected `x-api-key`.
    pub api_key: Option<String>,
    /// Expected `model`.
    pub model: Option<String>,
    /// Expected `anthropic-version` (default `2023-06-01`).
    pub version: Option<String>,
}

/// One recorded request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnthropicRequest {
    /// Arrival index.
    pub index: usize,
    /// Path.
    pub path: String,
    /// Headers (lowercase), without `x-api-key` and `authorization`.
    pub headers: HashMap<String, String>,
    /// Whether `x-api-key` was present.
    pub key_present: bool,
    /// The body, if it parsed.
    pub body: Option<Value>,
    /// What the mock answered.
    pub reply: String,
    /// Violations found.
    pub violations: Vec<Violation>,
    /// Milliseconds since the mock started.
    pub received_ms: u64,
}

#[derive(Debug, Default)]
struct State {
    queue: VecDeque<MockReply>,
    script: AnthropicScript,
    requests: Vec<AnthropicRequest>,
    violations: Vec<Violation>,
    /// tool_use id → the thinking blocks streamed in its turn.
    served_thinking: HashMap<String, Vec<Value>>,
    started: Option<Instant>,
}

type Shared = Arc<Mutex<State>>;

fn lock(s: &Shared) -> MutexGuard<'_, State> {
    s.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A running mock; dropping it stops the server.
pub struct AnthropicMock {
    addr: SocketAddr,
    shared: Shared,
    shutdown: watch::Sender<bool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for AnthropicMock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicMock").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl AnthropicMock {
    /// Starts the server on `127.0.0.1:0`, on its own thread and runtime.
    pub fn start_background(script: AnthropicScript) -> Result<Self, MockError> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let std_listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let shared: Shared = Arc::new(Mutex::new(State {
            queue: script.replies.clone().into(),
            script,
            started: Some(Instant::now()),
            ..State::default()
        }));
        let (shutdown, rx) = watch::channel(false);
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new().name("anthropic-mock".into()).spawn(move || {
            runtime.block_on(async move {
                if let Ok(listener) = TcpListener::from_std(std_listener) {
                    serve(listener, thread_shared, rx).await;
                }
            });
        })?;
        Ok(Self { addr, shared, shutdown, thread: Some(thread) })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL (`{url}/v1/messages` is the endpoint).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<AnthropicRequest> {
        lock(&self.shared).requests.clone()
    }

    /// Every violation so far.
    pub fn violations(&self) -> Vec<Violation> {
        lock(&self.shared).violations.clone()
    }

    /// Panics, listing them, if any request broke a rule.
    pub fn assert_no_violations(&self) {
        let v = self.violations();
        assert!(
            v.is_empty(),
            "anthropic mock saw {} violation(s):\n{}",
            v.len(),
            v.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")
        );
    }
}

impl Drop for AnthropicMock {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn serve(listener: TcpListener, shared: Shared, mut shutdown: watch::Receiver<bool>) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => return,
        };
        let Ok((stream, _)) = accepted else { continue };
        let shared = shared.clone();
        let mut conn_shutdown = shutdown.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let shared = shared.clone();
                async move { Ok::<_, Infallible>(handle(req, shared).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = conn => {}
                _ = conn_shutdown.changed() => {}
            }
        });
    }
}

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

fn respond(status: u16, content_type: &str, headers: &[(&str, String)], body: String) -> Response<Body> {
    let mut b =
        Response::builder().status(status).header("content-type", content_type).header("request-id", "req_mock");
    for (k, v) in headers {
        b = b.header(*k, v.as_str());
    }
    b.body(Full::new(Bytes::from(body)).boxed())
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::from_static(b"mock: bad response")).boxed()))
}

fn error_body(kind: &str, message: &str) -> String {
    json!({"type": "error", "error": {"type": kind, "message": message}}).to_string()
}

fn default_error_type(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    }
}

async fn handle(req: Request<Incoming>, shared: Shared) -> Response<Body> {
    let path = req.uri().path().to_string();
    if path != "/v1/messages" || req.method() != hyper::Method::POST {
        return respond(404, "application/json", &[], error_body("not_found_error", &format!("no route {path}")));
    }
    let mut headers = HashMap::new();
    for (k, v) in req.headers() {
        headers.insert(k.as_str().to_ascii_lowercase(), String::from_utf8_lossy(v.as_bytes()).into_owned());
    }
    let key = headers.remove("x-api-key");
    headers.remove("authorization");
    let bytes = match http_body_util::Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(c) => c.to_bytes(),
        Err(_) => return respond(413, "application/json", &[], error_body("request_too_large", "body too large")),
    };
    let body: Option<Value> = serde_json::from_slice(&bytes).ok();

    let mut st = lock(&shared);
    let index = st.requests.len();
    let received_ms = st.started.map_or(0, |t| u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX));
    let mut v = Checker { index, out: Vec::new() };
    let expected_key = st.script.api_key.clone();
    let auth_ok = match &expected_key {
        Some(k) => key.as_deref() == Some(k.as_str()),
        None => key.as_deref().is_some_and(|k| !k.is_empty()),
    };
    if !auth_ok {
        v.bad("x_api_key", "x-api-key missing or wrong");
    }
    let version = st.script.version.clone().unwrap_or_else(|| "2023-06-01".into());
    if headers.get("anthropic-version") != Some(&version) {
        v.bad(
            "anthropic_version",
            format!("anthropic-version must be {version:?}, got {:?}", headers.get("anthropic-version")),
        );
    }
    if !headers.get("content-type").is_some_and(|c| c.starts_with("application/json")) {
        v.bad("content_type", "content-type must be application/json");
    }
    match &body {
        Some(b) => check_body(b, &st, &mut v),
        None => v.bad("json", "the body is not JSON"),
    }
    let violations = v.out;
    let (reply_text, response) = if !violations.is_empty() {
        let auth = violations.iter().any(|x| x.rule == "x_api_key");
        let (status, kind) = if auth { (401, "authentication_error") } else { (400, "invalid_request_error") };
        let message = violations.iter().map(|x| x.message.clone()).collect::<Vec<_>>().join("; ");
        (format!("error {status} (violation)"), respond(status, "application/json", &[], error_body(kind, &message)))
    } else {
        match st.queue.pop_front() {
            None => (
                "error 500 (script exhausted)".to_string(),
                respond(500, "application/json", &[], error_body("api_error", "mock script exhausted")),
            ),
            Some(MockReply::Error(e)) => {
                let kind = e.error_type.clone().unwrap_or_else(|| default_error_type(e.status).to_string());
                let msg = e.message.clone().unwrap_or_else(|| format!("mock {kind}"));
                let mut hs = Vec::new();
                if let Some(r) = &e.retry_after {
                    hs.push(("retry-after", r.clone()));
                }
                (format!("error {}", e.status), respond(e.status, "application/json", &hs, error_body(&kind, &msg)))
            }
            Some(MockReply::Stream(s)) => {
                let (text, served) = sse(&s, st.script.model.as_deref().unwrap_or("mock"));
                for (id, blocks) in served {
                    st.served_thinking.insert(id, blocks);
                }
                let label = if s.error_after_blocks.is_some() { "stream (error event)" } else { "stream" };
                let response = if s.event_delay_ms > 0 {
                    paced(text, s.event_delay_ms)
                } else {
                    respond(200, "text/event-stream", &[], text)
                };
                (label.to_string(), response)
            }
        }
    };
    st.violations.extend(violations.iter().cloned());
    st.requests.push(AnthropicRequest {
        index,
        path,
        headers,
        key_present: key.is_some(),
        body,
        reply: reply_text,
        violations,
        received_ms,
    });
    response
}

/// A body fed by a channel.
struct ChanBody(tokio::sync::mpsc::Receiver<Bytes>);

impl hyper::body::Body for ChanBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        self.get_mut().0.poll_recv(cx).map(|b| b.map(|b| Ok(hyper::body::Frame::data(b))))
    }
}

/// The SSE body one event at a time, `delay_ms` apart.
fn paced(text: String, delay_ms: u64) -> Response<Body> {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        for event in text.split_inclusive("\n\n") {
            if tx.send(Bytes::from(event.to_string())).await.is_err() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(delay_ms)).await;
        }
    });
    Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .body(ChanBody(rx).boxed())
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::from_static(b"mock: bad response")).boxed()))
}

struct Checker {
    index: usize,
    out: Vec<Violation>,
}

impl Checker {
    fn bad(&mut self, rule: &str, message: impl Into<String>) {
        self.out.push(Violation { request: self.index, rule: rule.into(), message: message.into() });
    }
}

fn valid_tool_name(n: &str) -> bool {
    (1..=64).contains(&n.len()) && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn count_cache_control(v: &Value, c: &mut Checker, n: &mut usize) {
    match v {
        Value::Object(o) => {
            if let Some(cc) = o.get("cache_control") {
                *n += 1;
                let ttl_ok = cc.get("ttl").is_none_or(|t| t == "5m" || t == "1h");
                if cc.get("type") != Some(&json!("ephemeral")) || !ttl_ok {
                    c.bad("cache_control", format!("cache_control must be {{\"type\":\"ephemeral\"}}, got {cc}"));
                }
            }
            for (k, x) in o {
                if k != "cache_control" && k != "input_schema" {
                    count_cache_control(x, c, n);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| count_cache_control(x, c, n)),
        _ => {}
    }
}

fn check_body(b: &Value, st: &State, c: &mut Checker) {
    let Some(o) = b.as_object() else { return c.bad("json", "the body is not an object") };
    match o.get("model").and_then(Value::as_str) {
        Some(m) if !m.is_empty() => {
            if let Some(want) = &st.script.model
                && m != want
            {
                c.bad("model", format!("model {m:?}, expected {want:?}"));
            }
        }
        _ => c.bad("model", "model missing or empty"),
    }
    let max_tokens = o.get("max_tokens").and_then(Value::as_u64).unwrap_or(0);
    if max_tokens == 0 {
        c.bad("max_tokens", "max_tokens must be a positive integer");
    }
    if o.get("stream") != Some(&json!(true)) {
        c.bad("stream", "stream must be true");
    }
    match o.get("system") {
        None | Some(Value::String(_)) => {}
        Some(Value::Array(blocks)) if !blocks.is_empty() => {
            for s in blocks {
                if s["type"] != "text" || s["text"].as_str().is_none_or(str::is_empty) {
                    c.bad("system", format!("system blocks must be non-empty text blocks, got {s}"));
                }
            }
        }
        Some(other) => c.bad("system", format!("system must be a string or text blocks, got {other}")),
    }
    if let Some(tools) = o.get("tools") {
        let mut names = HashSet::new();
        for t in tools.as_array().map(Vec::as_slice).unwrap_or_default() {
            let name = t["name"].as_str().unwrap_or("");
            if !valid_tool_name(name) || !names.insert(name.to_string()) {
                c.bad("tools", format!("invalid or repeated tool name {name:?}"));
            }
            if t["input_schema"]["type"] != "object" {
                c.bad("tools", format!("tool {name}: input_schema must be an object schema"));
            }
            if t.get("description").is_some_and(|d| !d.is_string()) {
                c.bad("tools", format!("tool {name}: description must be a string"));
            }
        }
        if !tools.is_array() {
            c.bad("tools", "tools must be an array");
        }
    }
    let mut n = 0;
    count_cache_control(b, c, &mut n);
    if n > 4 {
        c.bad("cache_control", format!("{n} cache_control breakpoints (at most 4)"));
    }
    let thinking_on = match o.get("thinking") {
        None => false,
        Some(t) if t["type"] == "disabled" => false,
        Some(t) if t["type"] == "enabled" => {
            let budget = t["budget_tokens"].as_u64().unwrap_or(0);
            if budget < 1024 || budget >= max_tokens {
                c.bad("thinking", format!("budget_tokens {budget} must be >= 1024 and < max_tokens {max_tokens}"));
            }
            true
        }
        Some(t) => {
            c.bad("thinking", format!("invalid thinking {t}"));
            false
        }
    };
    let Some(messages) = o.get("messages").and_then(Value::as_array).filter(|m| !m.is_empty()) else {
        return c.bad("messages", "messages must be a non-empty array");
    };
    let mut prev_role = "";
    let mut pending: Vec<String> = Vec::new();
    let mut seen_ids = HashSet::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or("");
        if role != "user" && role != "assistant" {
            c.bad("roles", format!("message {i}: role {role:?}"));
        }
        if i == 0 && role != "user" {
            c.bad("roles", "the first message must be a user message");
        }
        if role == prev_role {
            c.bad("roles", format!("message {i}: two {role} messages in a row"));
        }
        prev_role = role;
        let blocks: Vec<Value> = match &m["content"] {
            Value::String(s) if !s.is_empty() => vec![json!({"type": "text", "text": s})],
            Value::Array(a) if !a.is_empty() => a.clone(),
            other => {
                c.bad("content", format!("message {i}: content must be a non-empty string or block list, got {other}"));
                continue;
            }
        };
        // Answers to the previous turn's tool_use, all of them, first.
        let mut answered = Vec::new();
        let mut after_text = false;
        for (j, blk) in blocks.iter().enumerate() {
            let t = blk["type"].as_str().unwrap_or("");
            let allowed: &[&str] = if role == "user" {
                &["text", "tool_result", "image", "document"]
            } else {
                &["text", "thinking", "redacted_thinking", "tool_use"]
            };
            if !allowed.contains(&t) {
                c.bad("content", format!("message {i} block {j}: type {t:?} not allowed for {role}"));
            }
            match t {
                "text" => {
                    if blk["text"].as_str().is_none_or(str::is_empty) {
                        c.bad("content", format!("message {i} block {j}: empty text"));
                    }
                    after_text = true;
                }
                "tool_result" => {
                    let id = blk["tool_use_id"].as_str().unwrap_or("").to_string();
                    if after_text {
                        c.bad("tool_result", format!("message {i}: tool_result {id} after text"));
                    }
                    if !pending.contains(&id) || answered.contains(&id) {
                        c.bad("tool_result", format!("message {i}: tool_result for {id:?}, which the previous turn did not use (or answered twice)"));
                    }
                    if !(blk["content"].is_string() || blk["content"].is_array()) {
                        c.bad("tool_result", format!("message {i}: tool_result {id} content"));
                    }
                    answered.push(id);
                }
                "thinking" | "redacted_thinking" => {
                    if j > 0 && !matches!(blocks[j - 1]["type"].as_str(), Some("thinking" | "redacted_thinking")) {
                        c.bad("thinking", format!("message {i}: thinking must come first"));
                    }
                    if t == "thinking"
                        && (!blk["thinking"].is_string() || blk["signature"].as_str().is_none_or(str::is_empty))
                    {
                        c.bad("thinking", format!("message {i}: thinking block without text or signature"));
                    }
                }
                "tool_use" => {
                    let id = blk["id"].as_str().unwrap_or("");
                    if id.is_empty() || !seen_ids.insert(id.to_string()) {
                        c.bad("tool_use", format!("message {i}: tool_use id {id:?} empty or repeated"));
                    }
                    if !blk["input"].is_object() || !valid_tool_name(blk["name"].as_str().unwrap_or("")) {
                        c.bad("tool_use", format!("message {i}: tool_use {id} needs a name and an object input"));
                    }
                }
                _ => {}
            }
        }
        if role == "user" {
            for id in &pending {
                if !answered.contains(id) {
                    c.bad("tool_result", format!("message {i}: tool_use {id} is not answered"));
                }
            }
            pending.clear();
        } else {
            if !pending.is_empty() {
                c.bad("tool_result", format!("message {i}: tool_use {pending:?} not answered before this turn"));
            }
            pending = blocks
                .iter()
                .filter(|b| b["type"] == "tool_use")
                .filter_map(|b| b["id"].as_str())
                .map(str::to_string)
                .collect();
            // The thinking the mock streamed with these calls, unchanged.
            for id in &pending {
                if let Some(served) = st.served_thinking.get(id) {
                    let sent: Vec<&Value> = blocks
                        .iter()
                        .filter(|b| matches!(b["type"].as_str(), Some("thinking" | "redacted_thinking")))
                        .collect();
                    let same = sent.len() == served.len() && sent.iter().zip(served).all(|(a, b)| *a == b);
                    if !same {
                        c.bad(
                            "thinking_passback",
                            format!("message {i}: the thinking blocks of {id} did not come back unchanged"),
                        );
                    }
                }
            }
            if thinking_on
                && i == messages.len() - 1
                && !pending.is_empty()
                && !matches!(blocks[0]["type"].as_str(), Some("thinking" | "redacted_thinking"))
            {
                c.bad("thinking", "with thinking on, the last assistant turn calling tools must start with thinking");
            }
        }
    }
    if !pending.is_empty() && prev_role == "assistant" {
        c.bad("tool_result", format!("tool_use {pending:?} at the end is not answered"));
    }
}

fn chunks(s: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    chars.chunks(n.max(1)).map(|c| c.iter().collect()).collect()
}

fn ev(out: &mut String, name: &str, data: &Value) {
    out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
}

/// The SSE body, and the thinking served per tool_use id.
fn sse(s: &StreamReply, model: &str) -> (String, Vec<(String, Vec<Value>)>) {
    let n = s.chunk_chars.unwrap_or(5);
    let mut out = String::new();
    let u = s.usage.clone().unwrap_or_else(|| json!({"input_tokens": 10, "output_tokens": 5}));
    let mut start_usage = u.clone();
    if let Some(o) = start_usage.as_object_mut() {
        o.insert("output_tokens".into(), json!(1));
    }
    ev(
        &mut out,
        "message_start",
        &json!({"type": "message_start", "message": {"id": "msg_mock", "type": "message", "role": "assistant", "model": model, "content": [], "stop_reason": null, "usage": start_usage}}),
    );
    ev(&mut out, "ping", &json!({"type": "ping"}));
    let mut thinking = Vec::new();
    let mut tool_ids = Vec::new();
    for (i, b) in s.blocks.iter().enumerate() {
        if s.error_after_blocks == Some(i) {
            let kind = s.error_type.clone().unwrap_or_else(|| "overloaded_error".into());
            ev(&mut out, "error", &json!({"type": "error", "error": {"type": kind, "message": "Overloaded"}}));
            return (out, Vec::new());
        }
        let start = |cb: Value| json!({"type": "content_block_start", "index": i, "content_block": cb});
        let delta = |d: Value| json!({"type": "content_block_delta", "index": i, "delta": d});
        match b {
            MockBlock::Thinking { thinking: t, signature } => {
                ev(
                    &mut out,
                    "content_block_start",
                    &start(json!({"type": "thinking", "thinking": "", "signature": ""})),
                );
                for c in chunks(t, n) {
                    ev(&mut out, "content_block_delta", &delta(json!({"type": "thinking_delta", "thinking": c})));
                }
                ev(&mut out, "content_block_delta", &delta(json!({"type": "signature_delta", "signature": signature})));
                thinking.push(json!({"type": "thinking", "thinking": t, "signature": signature}));
            }
            MockBlock::RedactedThinking { data } => {
                ev(&mut out, "content_block_start", &start(json!({"type": "redacted_thinking", "data": data})));
                thinking.push(json!({"type": "redacted_thinking", "data": data}));
            }
            MockBlock::Text { text } => {
                ev(&mut out, "content_block_start", &start(json!({"type": "text", "text": ""})));
                for c in chunks(text, n) {
                    ev(&mut out, "content_block_delta", &delta(json!({"type": "text_delta", "text": c})));
                }
            }
            MockBlock::ToolUse { id, name, input } => {
                ev(
                    &mut out,
                    "content_block_start",
                    &start(json!({"type": "tool_use", "id": id, "name": name, "input": {}})),
                );
                for c in chunks(&input.to_string(), n) {
                    ev(&mut out, "content_block_delta", &delta(json!({"type": "input_json_delta", "partial_json": c})));
                }
                tool_ids.push(id.clone());
            }
        }
        ev(&mut out, "content_block_stop", &json!({"type": "content_block_stop", "index": i}));
    }
    if s.error_after_blocks.is_some_and(|k| k >= s.blocks.len()) {
        ev(
            &mut out,
            "error",
            &json!({"type": "error", "error": {"type": s.error_type.clone().unwrap_or_else(|| "overloaded_error".into()), "message": "Overloaded"}}),
        );
        return (out, Vec::new());
    }
    let stop = s
        .stop_reason
        .clone()
        .unwrap_or_else(|| if tool_ids.is_empty() { "end_turn".into() } else { "tool_use".into() });
    ev(
        &mut out,
        "message_delta",
        &json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": u["output_tokens"]}}),
    );
    ev(&mut out, "message_stop", &json!({"type": "message_stop"}));
    let served = tool_ids.into_iter().map(|id| (id, thinking.clone())).filter(|(_, t)| !t.is_empty()).collect();
    (out, served)
}
