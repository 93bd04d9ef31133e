//! A fault-injecting mock of the OpenAI/DeepSeek Chat Completions streaming
//! API, for Wharf's tests.
//!
//! It listens on `127.0.0.1:0` only, answers `POST /v1/chat/completions` and
//! `POST /chat/completions` from a [`Script`], **checks every request** and
//! records it. Use it in-process ([`MockLlm::start`],
//! [`MockLlm::start_background`]) or as the `wharf-mock-llm` binary
//! (`wharf-mock-llm SCRIPT.json` prints the base URL as its first stdout
//! line and serves until killed).
//!
//! ```no_run
//! # async fn demo() -> Result<(), wharf_mock_llm::MockError> {
//! use wharf_mock_llm::{MockLlm, MockToolCall, Reply, Script};
//!
//! let mock = MockLlm::start(Script::new(vec![
//!     Reply::tool_calls("Need the file.", vec![MockToolCall::new("call_1", "read", r#"{"path":"a"}"#)]),
//!     Reply::text("Done."),
//! ]))
//! .await?;
//! // … point the adapter at mock.url(), run the agent …
//! mock.assert_no_violations();
//! assert_eq!(mock.requests().len(), 2);
//! # Ok(()) }
//! ```
//!
//! # Replies
//!
//! Each chat request takes the next reply from the queue (`replies`), or
//! `default` once the queue is empty (without one: a 500 and a
//! `script_exhausted` violation). Replies can be appended while running
//! ([`MockLlm::push_reply`], or `POST /_mock/replies` with one reply or an
//! array). A reply is one of (`kind`):
//!
//! - `stream` ([`StreamReply`]): a `200 text/event-stream` body of
//!   `chat.completion.chunk`s — role chunk, `reasoning` as
//!   `reasoning_content` pieces, `text` as `content` pieces, `tool_calls`
//!   as a first fragment (`index`, `id`, `type`, `name`, `arguments: ""`)
//!   plus argument pieces (so arguments split mid-token; with
//!   `interleave_tool_calls` two parallel calls alternate), a
//!   `finish_reason` chunk, a usage-only chunk with `choices: []`, and
//!   `data: [DONE]`. Options: `finish`, `usage` (`null` = none),
//!   `usage_in_finish_chunk`, `chunk_chars` (default 8; 0 = whole strings),
//!   `keepalive_every` (a `: keep-alive` comment after every N chunks),
//!   `write_bytes` (split the body into N-byte writes, cutting lines and
//!   UTF-8 sequences), `chunk_delay_ms`, `headers_delay_ms`, `model`,
//!   `headers` (extra response headers as `[name, value]` pairs, e.g. a
//!   provider's `x-request-id`), and one `fault` ([`Fault`], tagged by
//!   `type`):
//!   - `reset {after_chunks}`: the TCP connection is reset (RST);
//!   - `stall {after_chunks, ms, keepalive_every_ms}`: pause, optionally
//!     sending `: keep-alive`, then carry on;
//!   - `malformed_json {after_chunks}`: a chunk of truncated JSON;
//!   - `missing_done`: everything but `[DONE]`, then a clean end;
//!   - `eof {after_chunks}`: a clean end mid-stream;
//!   - `error_event {after_chunks, message, error_type, code}`: an
//!     `{"error":{…}}` chunk, then the end.
//! - `error` ([`ErrorReply`]): `status` with an OpenAI-style body
//!   `{"error":{"message","type","param":null,"code"}}` (defaults per
//!   status after DeepSeek's table: 400, 401, 402, 403, 422, 429, 500,
//!   503 …; `message`, `type`, `code` override them), optional
//!   `retry_after` (the `Retry-After` header), extra `headers`, or a raw
//!   `body`.
//! - `context_overflow {limit}`: DeepSeek's 400 "This model's maximum
//!   context length is … tokens …".
//! - `raw` ([`RawReply`]): `status`, `content_type`, `headers`, `body` as
//!   given.
//!
//! # Checks
//!
//! Every chat request is checked ([`Checks`]); each broken rule becomes a
//! [`Violation`] (rule names in [`checks::rule`]), recorded on the request
//! and in [`MockLlm::violations`]:
//!
//! - the body is a JSON object with a non-empty string `model` (equal to
//!   `checks.model` when set), a non-empty `messages` array and
//!   `stream: true`; `Content-Type: application/json`;
//!   `stream_options.include_usage: true` (`include_usage`, default on);
//! - `reasoning` (default `required`): every assistant message with tool
//!   calls carries `reasoning_content` as a string — and when the mock
//!   streamed those calls, exactly the reasoning it streamed; `forbidden`:
//!   no message carries it (OpenAI dialect); `ignore`;
//! - `tool_answers` (default on): every assistant tool call is answered by
//!   a `tool` message with its `tool_call_id` before the next
//!   user/assistant/system message and before the end, once; tool calls
//!   have an id, `type: function`, a valid name and string arguments;
//! - `tool_schemas` (default on): tools are `{"type":"function","function":
//!   {name, description?, parameters}}` with names `[a-zA-Z0-9_-]{1,64}`,
//!   unique, and `parameters` an object schema (`type: object`, `required`
//!   naming declared properties);
//! - `api_key`: when set, `Authorization` must be `Bearer <api_key>`. The
//!   header's value is never recorded: only present/absent and matched.
//!
//! With `reject_violations`, a violating request is answered with a 400
//! (DeepSeek's own message for a missing `reasoning_content`; 401 for auth)
//! instead of its scripted reply, which stays queued.
//!
//! # Script format
//!
//! ```json
#![doc = include_str!("../example-script.json")]
//! ```
//!
//! # Inspection over HTTP (for the binary)
//!
//! `GET /_mock/requests` and `GET /_mock/violations` return the records as
//! JSON (each request with its arrival time, `received_ms` since the mock
//! started, so a test can measure how long a client waited between tries); `POST /_mock/replies` queues more replies; `GET /v1/models` lists
//! `mock-model`.

pub mod anthropic;
pub mod checks;
pub mod plan;
pub mod script;
mod server;

use std::net::SocketAddr;

use tokio::net::TcpListener;
use tokio::sync::watch;

pub use checks::Violation;
pub use script::{
    Checks, ErrorReply, Fault, MockToolCall, MockUsage, RawReply, ReasoningCheck, Reply, Script, StreamReply,
};
pub use server::{AuthRecord, RecordedRequest};

/// The documented example script (also parsed by the tests).
pub const EXAMPLE_SCRIPT: &str = include_str!("../example-script.json");

/// Failures starting the mock.
#[derive(Debug, thiserror::Error)]
pub enum MockError {
    /// Binding `127.0.0.1:0` or building the runtime failed.
    #[error("mock-llm I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The background thread did not report its address.
    #[error("mock-llm background thread failed to start")]
    Thread,
    /// A script file did not parse.
    #[error("mock-llm script: {0}")]
    Script(#[from] serde_json::Error),
}

enum Backing {
    Task(tokio::task::JoinHandle<()>),
    Thread(Option<std::thread::JoinHandle<()>>),
}

/// A running mock server. Dropping it stops the server (and every open
/// connection).
pub struct MockLlm {
    addr: SocketAddr,
    shared: server::Shared,
    shutdown: watch::Sender<bool>,
    backing: Backing,
}

impl std::fmt::Debug for MockLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockLlm").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl MockLlm {
    /// Starts the server on the current tokio runtime.
    pub async fn start(script: Script) -> Result<Self, MockError> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let shared = server::Shared::new(script);
        let (shutdown, rx) = watch::channel(false);
        let task = tokio::spawn(server::serve(listener, shared.clone(), rx));
        Ok(Self { addr, shared, shutdown, backing: Backing::Task(task) })
    }

    /// Starts the server on its own thread and runtime, for synchronous
    /// tests.
    pub fn start_background(script: Script) -> Result<Self, MockError> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let std_listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let shared = server::Shared::new(script);
        let (shutdown, rx) = watch::channel(false);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), std::io::Error>>();
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new().name("wharf-mock-llm".into()).spawn(move || {
            runtime.block_on(async move {
                match TcpListener::from_std(std_listener) {
                    Ok(listener) => {
                        let _ = ready_tx.send(Ok(()));
                        server::serve(listener, thread_shared, rx).await;
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            });
        })?;
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(MockError::Io(e)),
            Err(_) => return Err(MockError::Thread),
        }
        Ok(Self { addr, shared, shutdown, backing: Backing::Thread(Some(thread)) })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL, `http://127.0.0.1:PORT` (both `/chat/completions` and
    /// `/v1/chat/completions` work under it).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The full chat endpoint, `http://127.0.0.1:PORT/v1/chat/completions`.
    pub fn chat_url(&self) -> String {
        format!("http://{}/v1/chat/completions", self.addr)
    }

    /// Every chat request so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// Keeps the body (`body`, `raw_body`) only of requests of at most
    /// `max` bytes from now on; longer ones are recorded with their length
    /// and timestamps alone. A session of hundreds of ~1 MiB requests
    /// would otherwise hold gigabytes.
    pub fn record_bodies_up_to(&self, max: usize) {
        self.shared.lock().record_max = Some(max);
    }

    /// Every violation so far.
    pub fn violations(&self) -> Vec<Violation> {
        self.shared.lock().violations.clone()
    }

    /// Panics, listing them, if any request broke a rule.
    pub fn assert_no_violations(&self) {
        let v = self.violations();
        if !v.is_empty() {
            let lines: Vec<String> = v.iter().map(ToString::to_string).collect();
            panic!("mock-llm saw {} violation(s):\n{}", v.len(), lines.join("\n"));
        }
    }

    /// Appends a reply to the queue.
    pub fn push_reply(&self, reply: Reply) {
        self.shared.lock().queue.push_back(reply);
    }

    /// Replies still queued.
    pub fn remaining_replies(&self) -> usize {
        self.shared.lock().queue.len()
    }

    /// Stops the server and waits for it.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        if let Backing::Task(task) = &mut self.backing {
            let _ = task.await;
        }
    }
}

impl Drop for MockLlm {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        match &mut self.backing {
            Backing::Task(task) => task.abort(),
            Backing::Thread(thread) => {
                if let Some(t) = thread.take() {
                    let _ = t.join();
                }
            }
        }
    }
}
