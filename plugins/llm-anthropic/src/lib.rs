//! `llm-anthropic`: streams the Anthropic Messages API over `wasi:http`.
//!
//! `POST {base_url}/v1/messages` with `x-api-key` and `anthropic-version`,
//! `stream: true`; the server-sent events become the WIT llm events
//! ([`stream`]); the request body is built in [`request`] (tool results as
//! user-role `tool_result` blocks, prompt-caching breakpoints, extended
//! thinking); errors are mapped in [`errors`]. Thinking blocks are passed
//! back with their signatures unchanged from the plugin's private `kv`
//! ([`thinking`]), so no signature ever reaches the session log or a
//! surface.
//!
//! # Configuration (the profile row's `config` table)
//!
//! ```toml
//! [plugin.config]
//! base_url = "https://api.anthropic.com"   # default; {base_url}/v1/messages
//! model = "claude-sonnet-4-5"              # required: model ids are config, never code
//! api_key_env = "ANTHROPIC_API_KEY"        # default; the variable's *name*
//! max_tokens = 8192                        # default output cap (required by the API)
//! thinking_budget = 4096                   # optional: extended thinking (>= 1024, < max_tokens)
//! anthropic_version = "2023-06-01"         # default
//! idle_timeout_ms = 120000                 # silence (not even a ping) before TIMEOUT
//! context_window = 200000                  # reported to the host
//! [plugin.config.prices."claude-sonnet-4-5"]  # per 1M tokens
//! input_cache_miss = 3.0
//! input_cache_hit = 0.3                    # cache reads
//! cache_write = 3.75                       # cache writes (5-minute TTL)
//! output = 15.0
//! currency = "USD"
//! ```
//!
//! # Grants
//!
//! As for `llm-deepseek`: the plugin requests any host and any variable,
//! the profile row's grant decides (`hosts = ["api.anthropic.com"]`,
//! `env = ["ANTHROPIC_API_KEY"]`). The key is read at each request and is
//! never logged or put in an error.

pub mod config;
pub mod errors;
#[cfg(target_arch = "wasm32")]
use wharf_llm_wire::component::wasi_http as http;
pub mod request;
pub mod stream;
pub mod thinking;

use wharf_llm_wire::adapter::{Endpoint, HttpRequest, HttpResponse, ReadOutcome, ResponseBody, Transport};
use wharf_llm_wire::component::{from_sdk_request, to_sdk_error, to_sdk_event};
use wharf_llm_wire::error::{request_id, truncate_chars};
use wharf_llm_wire::{ErrorCode, Event, WireError, redact};
use wharf_sdk::llm::{CompletionStream, Event as SdkEvent};
use wharf_sdk::prelude::*;

use crate::config::{Config, Settings};
use crate::stream::Decoder;

/// Most bytes handed to the decoder per `next()` call.
const MAX_BATCH_BYTES: usize = 256 << 10;
/// Most bytes asked of the body per read.
const READ_SIZE: usize = 64 << 10;
/// Most bytes of an error body read.
const MAX_ERROR_BODY: usize = 64 << 10;

fn config() -> Result<Config, WireError> {
    Config::from_json(&wharf_sdk::config::json())
}

/// The HTTP request for `body`.
pub fn http_request(s: &Settings, key: &str, body: &serde_json::Value) -> HttpRequest {
    HttpRequest {
        endpoint: Endpoint { ..s.endpoint.clone() },
        headers: vec![
            ("content-type", "application/json".to_string()),
            ("accept", "text/event-stream".to_string()),
            ("anthropic-version", s.version.clone()),
            ("x-api-key", key.to_string()),
            ("user-agent", format!("wharf-llm-anthropic/{}", env!("CARGO_PKG_VERSION"))),
        ],
        body: body.to_string().into_bytes(),
        timeout_ms: s.idle_timeout_ms,
    }
}

fn read_capped<B: ResponseBody>(body: &mut B, cap: usize, idle_ms: u64) -> Vec<u8> {
    let mut out = Vec::new();
    while out.len() < cap {
        match body.read((cap - out.len()).min(READ_SIZE), idle_ms) {
            Ok(ReadOutcome::Bytes(b)) => out.extend_from_slice(&b),
            _ => break,
        }
    }
    out.truncate(cap);
    out
}

/// Sends the request and checks the response head.
pub fn open<T: Transport>(
    transport: &mut T,
    s: &Settings,
    key: &str,
    body: &serde_json::Value,
) -> Result<Completion<T::Body>, WireError> {
    let mut resp: HttpResponse<T::Body> = transport.send(&http_request(s, key, body)).map_err(|e| e.redacted(key))?;
    let id = request_id(resp.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map(|id| redact(&id, key))
        .filter(|id| !id.contains(wharf_llm_wire::error::REDACTED));
    if !(200..300).contains(&resp.status) {
        let bytes = read_capped(&mut resp.body, MAX_ERROR_BODY, s.idle_timeout_ms);
        let retry_after = resp.header("retry-after").map(str::to_string);
        let e = errors::map_http(resp.status, &bytes, retry_after.as_deref(), transport.unix_secs(), &s.api_key_env);
        return Err(e.redacted(key).with_request_id(id.as_deref()));
    }
    let ct = resp.header("content-type").unwrap_or("").to_ascii_lowercase();
    if ct.starts_with("application/json") {
        let bytes = read_capped(&mut resp.body, MAX_ERROR_BODY, s.idle_timeout_ms);
        let e = errors::map_http(200, &bytes, None, 0, &s.api_key_env);
        let e = if e.code == ErrorCode::Server {
            WireError::new(
                ErrorCode::MalformedResponse,
                format!("expected an event stream, got: {}", truncate_chars(&String::from_utf8_lossy(&bytes), 200)),
            )
        } else {
            e
        };
        return Err(e.redacted(key).with_request_id(id.as_deref()));
    }
    let last_activity = resp.body.now_ms();
    Ok(Completion {
        body: Some(resp.body),
        decoder: Decoder::new(),
        idle_ms: s.idle_timeout_ms,
        last_activity,
        secret: key.to_string(),
        deferred: None,
        request_id: id,
    })
}

/// An in-flight completion: each `next_batch` blocks until bytes arrive
/// (any byte, a `ping` included, resets the idle timer), decodes what is
/// buffered and returns its events; `None` after `message_stop`.
pub struct Completion<B> {
    body: Option<B>,
    decoder: Decoder,
    idle_ms: u64,
    last_activity: u64,
    secret: String,
    deferred: Option<WireError>,
    request_id: Option<String>,
}

impl<B: ResponseBody> Completion<B> {
    /// The next batch (see the type's docs). After an error the stream is over.
    pub fn next_batch(&mut self) -> Result<Option<Vec<Event>>, WireError> {
        if let Some(e) = self.deferred.take() {
            self.body = None;
            return Err(self.tag(e));
        }
        let r = self.pull();
        if r.is_err() {
            self.body = None;
        }
        r.map_err(|e| self.tag(e))
    }

    fn tag(&self, e: WireError) -> WireError {
        e.redacted(&self.secret).with_request_id(self.request_id.as_deref())
    }

    fn pull(&mut self) -> Result<Option<Vec<Event>>, WireError> {
        let Some(body) = self.body.as_mut() else { return Ok(None) };
        loop {
            let now = body.now_ms();
            let deadline = self.last_activity.saturating_add(self.idle_ms);
            if now >= deadline {
                return Err(WireError::new(
                    ErrorCode::Timeout,
                    format!("no data from the model for {} ms (idle_timeout_ms)", self.idle_ms),
                ));
            }
            let mut buf = match body.read(READ_SIZE, deadline - now)? {
                ReadOutcome::TimedOut => continue,
                ReadOutcome::Eof => {
                    self.body = None;
                    let out = self.decoder.finish()?;
                    return Ok(Some(out.events));
                }
                ReadOutcome::Bytes(b) => b,
            };
            self.last_activity = body.now_ms();
            let mut eof = false;
            let mut failure = None;
            while buf.len() < MAX_BATCH_BYTES {
                match body.read(READ_SIZE, 0) {
                    Ok(ReadOutcome::Bytes(b)) => buf.extend_from_slice(&b),
                    Ok(ReadOutcome::Eof) => {
                        eof = true;
                        break;
                    }
                    Ok(ReadOutcome::TimedOut) => break,
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
            }
            let mut out = self.decoder.feed(&buf)?;
            if out.done {
                self.body = None;
                return Ok(Some(out.events));
            }
            if eof || failure.is_some() {
                self.body = None;
                let err = match failure {
                    Some(e) => Some(e),
                    None => match self.decoder.finish() {
                        Ok(tail) => {
                            out.events.extend(tail.events);
                            None
                        }
                        Err(e) => Some(e),
                    },
                };
                if let Some(e) = err {
                    if out.events.is_empty() {
                        return Err(e);
                    }
                    self.deferred = Some(e);
                }
                return Ok(Some(out.events));
            }
            if !out.events.is_empty() || out.activity {
                return Ok(Some(out.events));
            }
        }
    }
}

#[cfg(target_arch = "wasm32")]
type Body = http::WasiBody;

/// Stand-in body off `wasm32` (never constructed).
#[cfg(not(target_arch = "wasm32"))]
pub struct Body(std::convert::Infallible);

#[cfg(not(target_arch = "wasm32"))]
impl ResponseBody for Body {
    fn read(&mut self, _max: usize, _wait_ms: u64) -> Result<ReadOutcome, WireError> {
        match self.0 {}
    }

    fn now_ms(&self) -> u64 {
        match self.0 {}
    }
}

/// The component's stream.
pub struct Stream(Completion<Body>);

impl CompletionStream for Stream {
    fn next(&mut self) -> Result<Option<Vec<SdkEvent>>, LlmError> {
        match self.0.next_batch() {
            Ok(batch) => Ok(batch.map(|events| events.into_iter().map(to_sdk_event).collect())),
            Err(e) => {
                wharf_sdk::log::debug!("llm-anthropic: stream failed: {e}");
                Err(to_sdk_error(e))
            }
        }
    }
}

#[cfg(target_arch = "wasm32")]
fn send(s: &Settings, key: &str, body: &serde_json::Value) -> Result<Completion<Body>, WireError> {
    open(&mut http::WasiTransport, s, key, body)
}

#[cfg(not(target_arch = "wasm32"))]
fn send(_s: &Settings, _key: &str, _body: &serde_json::Value) -> Result<Completion<Body>, WireError> {
    Err(WireError::new(ErrorCode::Transport, "HTTP is only available in the wasm32 component build"))
}

struct Anthropic;

impl LlmPlugin for Anthropic {
    type Stream = Stream;

    fn info() -> PluginInfo {
        wharf_llm_wire::component::plugin_info(
            "llm-anthropic",
            env!("CARGO_PKG_VERSION"),
            "Anthropic Messages API (streaming, tool use, extended thinking, prompt caching) over wasi:http.",
        )
    }

    fn model() -> ModelInfo {
        let cfg = config().unwrap_or_else(|e| {
            wharf_sdk::log::warn!("{}", e.message);
            Config::default()
        });
        let (model, window) = cfg.model_info();
        ModelInfo::new(model, window)
    }

    fn start(req: LlmRequest) -> Result<Stream, LlmError> {
        start_request(from_sdk_request(req))
    }
}

/// The Messages API takes images as `image` blocks with a base64 source;
/// 5 MiB each, the API's limit.
impl wharf_sdk::llm::LlmImages for Anthropic {
    fn image_support() -> wharf_sdk::llm::ImageSupport {
        wharf_llm_wire::component::image_support(5 << 20)
    }

    fn start_with_images(req: LlmRequest, images: Vec<wharf_sdk::llm::Image>) -> Result<Stream, LlmError> {
        start_request(wharf_llm_wire::component::from_sdk_request_with_images(req, images)?)
    }
}

fn start_request(request: wharf_llm_wire::Request) -> Result<Stream, LlmError> {
    {
        let settings = config().and_then(|c| c.resolve()).map_err(to_sdk_error)?;
        let key = settings.api_key(|name| std::env::var(name).ok()).map_err(to_sdk_error)?;
        let body = request::build(&request, &settings);
        wharf_sdk::log::debug!(
            "llm-anthropic: POST {} model={} messages={}",
            settings.endpoint.url(),
            settings.model,
            body["messages"].as_array().map_or(0, Vec::len)
        );
        send(&settings, &key, &body).map(Stream).map_err(|e| {
            wharf_sdk::log::debug!("llm-anthropic: request failed: {e}");
            to_sdk_error(e)
        })
    }
}

wharf_sdk::export_llm_images!(Anthropic);
