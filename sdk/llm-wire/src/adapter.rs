//! The adapter driver shared by the `llm-deepseek` and `llm-openai`
//! components: configuration, the HTTP exchange and a pull-based completion
//! stream with an idle timeout — everything except the actual I/O, which
//! comes through the [`Transport`] and [`ResponseBody`] traits (wasi:http in
//! the components, see the `component` feature; fakes in the tests).
//!
//! # Configuration
//!
//! The plugin's `config` table ([`AdapterConfig`]; unknown keys are refused,
//! so a typo fails the first request with `INVALID_REQUEST` instead of being
//! ignored):
//!
//! | key | meaning | default |
//! |-----|---------|---------|
//! | `base_url` | `http(s)://host[:port][/prefix]`; the request goes to `{base_url}/chat/completions` | DeepSeek: `https://api.deepseek.com`; OpenAI-compatible: required |
//! | `model` | model id sent as `model` (never built in) | required |
//! | `api_key_env` | name of the environment variable holding the key (the operator grants it by name: `grant.env`) | DeepSeek: `DEEPSEEK_API_KEY`; OpenAI-compatible: none (no `Authorization`) |
//! | `thinking` | `true`/`false` (or `"on"`/`"off"`, `"enabled"`/`"disabled"`): DeepSeek's `thinking` switch; unset = the provider's default | unset |
//! | `reasoning_effort` | `minimal`, `low`, `medium`, `high`, `xhigh`, `max` (mapped to what the dialect knows) | unset |
//! | `max_tokens` | default output cap (the request's own cap wins) | unset |
//! | `max_tokens_field` | `max_tokens` or `max_completion_tokens` | DeepSeek: `max_tokens`; OpenAI-compatible: `max_completion_tokens` |
//! | `idle_timeout_ms` | longest silence (no byte, not even a `: keep-alive`) while waiting for the response head or the stream, before `TIMEOUT` | 120000 |
//! | `context_window` | reported by `model()` for surfaces and compaction | 131072 |
//! | `prices."MODEL"` | per-model table for the host's cost figures (`input_cache_hit`, `input_cache_miss`, `output` per 1M tokens, `currency`); its `context_window` wins over the key above for that model | none |
//!
//! The key itself is never part of the configuration: only the variable's
//! name is. Every error message is passed through [`redact`](crate::error::redact) with the key.
//!
//! # The stream
//!
//! [`start`] sends the request and waits (idle timeout) for the response
//! head. A non-2xx status becomes the error of `start`
//! ([`map_http_error`], with `Retry-After`). A 2xx body is then read lazily
//! by [`Completion::next_batch`]: each call blocks until some bytes arrive,
//! drains what is already buffered (up to [`MAX_BATCH_BYTES`]), decodes it
//! and returns the events — or an empty batch when only keep-alive comments
//! came, so that no single call outlives the host's per-call timeout while a
//! queued request is kept alive. Any byte resets the idle timer. The stream
//! ends (`None`) after `data: [DONE]`; EOF without it is `STREAM_CLOSED`.
//! Every error after the response head names the provider's request id
//! ([`request_id`]: `x-request-id`, `request-id`, `x-deepseek-request-id` …)
//! at the end of its message (`[request id: ID]`), for support.

use serde::Deserialize;

use crate::error::{
    ErrorBody, ErrorCode, WireError, map_http_error, map_stream_error, redact, request_id, truncate_chars,
};
use crate::request::{
    BodyCache, Config as WireConfig, Dialect, MaxTokensField, ReasoningEffort, Request, build_request_json,
};
use crate::stream::{Event, StreamDecoder};

/// Default idle timeout, ms.
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 120_000;
/// Default context window reported by `model()`, tokens.
pub const DEFAULT_CONTEXT_WINDOW: u32 = 131_072;
/// Most bytes handed to the decoder per `next()` call.
pub const MAX_BATCH_BYTES: usize = 256 << 10;
/// Most bytes asked of the body per read.
pub const READ_SIZE: usize = 64 << 10;
/// Most bytes of an error body read.
pub const MAX_ERROR_BODY: usize = 64 << 10;

/// What distinguishes the two components.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flavor {
    /// Plugin name, used in messages and the `User-Agent`.
    pub name: &'static str,
    /// Wire dialect.
    pub dialect: Dialect,
    /// `base_url` when the configuration has none.
    pub default_base_url: Option<&'static str>,
    /// `api_key_env` when the configuration has none.
    pub default_api_key_env: Option<&'static str>,
    /// Whether a request without a key is refused (`AUTH`) before it is sent.
    pub key_required: bool,
}

/// `llm-deepseek`.
pub const DEEPSEEK: Flavor = Flavor {
    name: "llm-deepseek",
    dialect: Dialect::DeepSeek,
    default_base_url: Some("https://api.deepseek.com"),
    default_api_key_env: Some("DEEPSEEK_API_KEY"),
    key_required: true,
};

/// `llm-openai`: any OpenAI-compatible Chat Completions endpoint.
pub const OPENAI: Flavor = Flavor {
    name: "llm-openai",
    dialect: Dialect::OpenAi,
    default_base_url: None,
    default_api_key_env: None,
    key_required: false,
};

/// An on/off switch written as a boolean or a word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Toggle(pub bool);

impl<'de> Deserialize<'de> for Toggle {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bool(bool),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bool(b) => Ok(Self(b)),
            Raw::Text(t) => match t.trim().to_ascii_lowercase().as_str() {
                "on" | "true" | "enabled" | "yes" => Ok(Self(true)),
                "off" | "false" | "disabled" | "no" => Ok(Self(false)),
                other => Err(serde::de::Error::custom(format!("expected on/off, got {other:?}"))),
            },
        }
    }
}

/// The plugin configuration, as written in the profile. See the module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdapterConfig {
    /// `http(s)://host[:port][/prefix]`.
    pub base_url: Option<String>,
    /// Name of the environment variable with the API key.
    pub api_key_env: Option<String>,
    /// Model id.
    pub model: Option<String>,
    /// DeepSeek's thinking switch.
    pub thinking: Option<Toggle>,
    /// Reasoning effort.
    pub reasoning_effort: Option<String>,
    /// Default output cap.
    pub max_tokens: Option<u32>,
    /// `max_tokens` or `max_completion_tokens`.
    pub max_tokens_field: Option<String>,
    /// Idle timeout, ms.
    pub idle_timeout_ms: Option<u64>,
    /// Context window, tokens.
    pub context_window: Option<u32>,
    /// Per-model prices for the host's cost figures (`prices."MODEL"`);
    /// the adapter reads only each model's `context_window`.
    pub prices: std::collections::BTreeMap<String, ModelEntry>,
}

/// One model's row of `prices`: the host reads the prices, the adapter the
/// window (other keys are the host's and ignored here).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct ModelEntry {
    /// The model's context window, tokens (wins over the top-level key).
    pub context_window: Option<u32>,
}

impl AdapterConfig {
    /// Parses the configuration JSON (`""` counts as `{}`).
    pub fn from_json(text: &str) -> Result<Self, WireError> {
        let text = if text.trim().is_empty() { "{}" } else { text };
        serde_json::from_str(text)
            .map_err(|e| WireError::new(ErrorCode::InvalidRequest, format!("invalid plugin configuration: {e}")))
    }

    /// The model id and context window to report, even when the rest of the
    /// configuration is incomplete.
    pub fn model_info(&self) -> (String, u32) {
        let model = self.model.clone().filter(|m| !m.trim().is_empty()).unwrap_or_else(|| "(unconfigured)".into());
        let window = self.prices.get(&model).and_then(|p| p.context_window).or(self.context_window);
        (model, window.unwrap_or(DEFAULT_CONTEXT_WINDOW))
    }
}

/// Where requests go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `https` (else `http`).
    pub https: bool,
    /// `host[:port]`.
    pub authority: String,
    /// Path of the chat endpoint, e.g. `/v1/chat/completions`.
    pub path: String,
}

impl Endpoint {
    /// Parses a `base_url` and appends `/chat/completions`.
    pub fn from_base_url(base: &str) -> Result<Self, WireError> {
        let bad = |why: &str| WireError::new(ErrorCode::InvalidRequest, format!("invalid base_url {base:?}: {why}"));
        let base = base.trim();
        let (https, rest) = if let Some(r) = base.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = base.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(bad("must start with http:// or https://"));
        };
        if rest.contains(['?', '#']) {
            return Err(bad("must not have a query or fragment"));
        }
        let (authority, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.is_empty() {
            return Err(bad("no host"));
        }
        if authority.contains('@') {
            return Err(bad("credentials in the URL are not supported; use api_key_env"));
        }
        if authority.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("invalid host"));
        }
        let prefix = prefix.trim_end_matches('/');
        Ok(Self { https, authority: authority.to_string(), path: format!("{prefix}/chat/completions") })
    }

    /// The URL, for messages.
    pub fn url(&self) -> String {
        format!("{}://{}{}", if self.https { "https" } else { "http" }, self.authority, self.path)
    }
}

/// A configuration checked and resolved against a [`Flavor`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Plugin name.
    pub name: &'static str,
    /// The chat endpoint.
    pub endpoint: Endpoint,
    /// The key's environment variable, if any.
    pub api_key_env: Option<String>,
    /// Whether a key is required.
    pub key_required: bool,
    /// What shapes the body.
    pub wire: WireConfig,
    /// Idle timeout, ms.
    pub idle_timeout_ms: u64,
}

impl Settings {
    /// Checks `cfg` and fills in the flavor's defaults.
    pub fn resolve(cfg: &AdapterConfig, flavor: &Flavor) -> Result<Self, WireError> {
        let invalid = |m: String| WireError::new(ErrorCode::InvalidRequest, format!("{}: {m}", flavor.name));
        let base = cfg
            .base_url
            .as_deref()
            .or(flavor.default_base_url)
            .ok_or_else(|| invalid("`base_url` is not configured".into()))?;
        let endpoint = Endpoint::from_base_url(base)?;
        let model = cfg.model.clone().filter(|m| !m.trim().is_empty());
        let model = model.ok_or_else(|| invalid("`model` is not configured".into()))?;
        let reasoning_effort = match &cfg.reasoning_effort {
            None => None,
            Some(e) => Some(ReasoningEffort::parse(e).ok_or_else(|| {
                invalid(format!("unknown reasoning_effort {e:?} (minimal, low, medium, high, xhigh, max)"))
            })?),
        };
        let max_tokens_field = match cfg.max_tokens_field.as_deref() {
            None => None,
            Some("max_tokens") => Some(MaxTokensField::MaxTokens),
            Some("max_completion_tokens") => Some(MaxTokensField::MaxCompletionTokens),
            Some(other) => {
                return Err(invalid(format!(
                    "unknown max_tokens_field {other:?} (max_tokens or max_completion_tokens)"
                )));
            }
        };
        let api_key_env = match &cfg.api_key_env {
            Some(name) if name.trim().is_empty() => None,
            Some(name) => Some(name.trim().to_string()),
            None => flavor.default_api_key_env.map(str::to_string),
        };
        let idle_timeout_ms = cfg.idle_timeout_ms.unwrap_or(DEFAULT_IDLE_TIMEOUT_MS);
        if idle_timeout_ms == 0 {
            return Err(invalid("idle_timeout_ms must be positive".into()));
        }
        Ok(Self {
            name: flavor.name,
            endpoint,
            api_key_env,
            key_required: flavor.key_required,
            wire: WireConfig {
                model,
                dialect: flavor.dialect,
                thinking: cfg.thinking.map(|t| t.0),
                reasoning_effort,
                max_tokens: cfg.max_tokens,
                max_tokens_field,
            },
            idle_timeout_ms,
        })
    }

    /// The API key: looked up (by `lookup`, i.e. the environment) under
    /// `api_key_env`. `Ok(None)` when no key is configured and none is
    /// required; `AUTH` when one is required or configured but absent.
    /// The message names the variable, never a value.
    pub fn api_key(&self, lookup: impl Fn(&str) -> Option<String>) -> Result<Option<String>, WireError> {
        let auth = |m: String| WireError::new(ErrorCode::Auth, format!("{}: {m}", self.name));
        let Some(name) = &self.api_key_env else {
            if self.key_required {
                return Err(auth("no API key: `api_key_env` is empty".into()));
            }
            return Ok(None);
        };
        match lookup(name).map(|k| k.trim().to_string()).filter(|k| !k.is_empty()) {
            Some(key) if key.bytes().all(|b| (0x21..0x7f).contains(&b)) => Ok(Some(key)),
            Some(_) => Err(auth(format!("the API key in {name} contains characters not allowed in a header"))),
            None => Err(auth(format!(
                "no API key: the environment variable {name} is not set, or not granted to this plugin \
                 (grant.env = [\"{name}\"])"
            ))),
        }
    }
}

/// One HTTP request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    /// Where.
    pub endpoint: Endpoint,
    /// Headers (lowercase names). May hold the key: never log them.
    pub headers: Vec<(&'static str, String)>,
    /// The JSON body.
    pub body: Vec<u8>,
    /// How long to wait for the response head, ms.
    pub timeout_ms: u64,
}

/// A response head with its body still to read.
pub struct HttpResponse<B> {
    /// Status code.
    pub status: u16,
    /// Headers, lowercase names.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: B,
}

impl<B> HttpResponse<B> {
    /// The first header named `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// What a read produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadOutcome {
    /// Some bytes (never empty).
    Bytes(Vec<u8>),
    /// The body ended cleanly.
    Eof,
    /// Nothing arrived in time.
    TimedOut,
}

/// A response body being read.
pub trait ResponseBody {
    /// Waits up to `wait_ms` (0: do not wait) for up to `max` bytes. A
    /// broken connection is an error (normally `TRANSPORT`).
    fn read(&mut self, max: usize, wait_ms: u64) -> Result<ReadOutcome, WireError>;

    /// A monotonic clock, ms.
    fn now_ms(&self) -> u64;
}

/// Sends requests.
pub trait Transport {
    /// Its response bodies.
    type Body: ResponseBody;

    /// Sends `req` and waits up to `req.timeout_ms` for the response head
    /// (`TIMEOUT` after that; `TRANSPORT` when the connection fails).
    /// The request is borrowed: a caller may keep its body for the next
    /// request ([`start_cached`]).
    fn send(&mut self, req: &HttpRequest) -> Result<HttpResponse<Self::Body>, WireError>;

    /// Wall-clock time, seconds since the Unix epoch (for `Retry-After`
    /// dates).
    fn unix_secs(&self) -> u64;
}

/// Builds the request for `req`: the body and the headers.
pub fn http_request(settings: &Settings, key: Option<&str>, req: &Request) -> Result<HttpRequest, WireError> {
    let body = build_request_json(req, &settings.wire)?;
    Ok(http_request_with_body(settings, key, body.into_bytes()))
}

/// The request carrying `body`, with the headers.
fn http_request_with_body(settings: &Settings, key: Option<&str>, body: Vec<u8>) -> HttpRequest {
    let mut headers = vec![
        ("content-type", "application/json".to_string()),
        ("accept", "text/event-stream".to_string()),
        ("user-agent", format!("wharf-{}/{}", settings.name, env!("CARGO_PKG_VERSION"))),
    ];
    if let Some(k) = key {
        headers.push(("authorization", format!("Bearer {k}")));
    }
    HttpRequest { endpoint: settings.endpoint.clone(), headers, body, timeout_ms: settings.idle_timeout_ms }
}

/// Starts a completion: sends the request, checks the response head, and
/// returns the stream. Every error is redacted with `key`.
pub fn start<T: Transport>(
    transport: &mut T,
    settings: &Settings,
    key: Option<&str>,
    req: &Request,
) -> Result<Completion<T::Body>, WireError> {
    let http = http_request(settings, key, req)?;
    let sent = transport.send(&http);
    open_stream(transport, settings, key, sent)
}

/// [`start`] for an instance that serves a conversation's requests in
/// order: the body is built in `cache`, which keeps it (and `req`'s
/// messages) so the next request encodes only its new messages. The bytes
/// sent are exactly [`start`]'s.
pub fn start_cached<T: Transport>(
    transport: &mut T,
    settings: &Settings,
    key: Option<&str>,
    req: Request,
    cache: &mut BodyCache,
) -> Result<Completion<T::Body>, WireError> {
    let body = cache.build(req, &settings.wire)?;
    let http = http_request_with_body(settings, key, body);
    let sent = transport.send(&http);
    cache.give_back(http.body);
    open_stream(transport, settings, key, sent)
}

/// [`start_cached`] for the request whose messages are the first `kept`
/// of the last one `cache` built, followed by `req.messages`
/// (`llm-history.start-after`). `None` (nothing sent) when `cache` does not
/// hold them ([`BodyCache::build_after`]).
pub fn start_cached_after<T: Transport>(
    transport: &mut T,
    settings: &Settings,
    key: Option<&str>,
    kept: usize,
    req: Request,
    cache: &mut BodyCache,
) -> Option<Result<Completion<T::Body>, WireError>> {
    let body = match cache.build_after(kept, req, &settings.wire)? {
        Ok(body) => body,
        Err(e) => return Some(Err(e.into())),
    };
    let http = http_request_with_body(settings, key, body);
    let sent = transport.send(&http);
    cache.give_back(http.body);
    Some(open_stream(transport, settings, key, sent))
}

/// Checks the response head of a sent request and opens its stream.
fn open_stream<T: Transport>(
    transport: &mut T,
    settings: &Settings,
    key: Option<&str>,
    sent: Result<HttpResponse<T::Body>, WireError>,
) -> Result<Completion<T::Body>, WireError> {
    let secret = key.unwrap_or_default();
    let mut resp = sent.map_err(|e| e.redacted(secret))?;
    let status = resp.status;
    let request_id = request_id(resp.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map(|id| redact(&id, secret))
        .filter(|id| !id.contains(crate::error::REDACTED));
    if !(200..300).contains(&status) {
        let body = read_capped(&mut resp.body, MAX_ERROR_BODY, settings.idle_timeout_ms);
        let retry_after = resp.header("retry-after").map(str::to_string);
        return Err(map_http_error(status, &body, retry_after.as_deref(), transport.unix_secs(), secret)
            .with_request_id(request_id.as_deref()));
    }
    let content_type = resp.header("content-type").unwrap_or("").to_ascii_lowercase();
    if content_type.starts_with("application/json") {
        // Some servers answer 200 with a JSON error (or ignore `stream`).
        let body = read_capped(&mut resp.body, MAX_ERROR_BODY, settings.idle_timeout_ms);
        let err = match ErrorBody::parse(&body) {
            Some(b) => map_stream_error(&b),
            None => WireError::new(
                ErrorCode::MalformedResponse,
                format!(
                    "expected an event stream, got application/json: {}",
                    truncate_chars(&String::from_utf8_lossy(&body), 200)
                ),
            ),
        };
        return Err(err.redacted(secret).with_request_id(request_id.as_deref()));
    }
    let mut completion = Completion::new(resp.body, settings.idle_timeout_ms, secret.to_string());
    completion.request_id = request_id;
    Ok(completion)
}

/// Reads up to `cap` bytes of a body, giving up quietly after `idle_ms` of
/// silence or on an error (an error body is best effort).
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

/// An in-flight completion. See the module docs.
pub struct Completion<B> {
    body: Option<B>,
    decoder: StreamDecoder,
    idle_ms: u64,
    last_activity: u64,
    secret: String,
    ended: bool,
    /// An error met after some events were decoded: reported by the next
    /// call, so the events before it are delivered first.
    deferred: Option<WireError>,
    /// The provider's request id from the response head, added to errors.
    request_id: Option<String>,
}

impl<B: ResponseBody> Completion<B> {
    /// A stream over `body` (a 2xx event-stream body).
    pub fn new(body: B, idle_ms: u64, secret: String) -> Self {
        let last_activity = body.now_ms();
        Self {
            body: Some(body),
            decoder: StreamDecoder::new(),
            idle_ms,
            last_activity,
            secret,
            ended: false,
            deferred: None,
            request_id: None,
        }
    }

    /// The provider's id of this request (`x-request-id` …), if it sent one.
    pub fn request_id(&self) -> Option<&str> {
        self.request_id.as_deref()
    }

    /// Whether the stream has ended (finished or failed).
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    /// The next batch: `Some(events)` (possibly empty after keep-alives),
    /// `None` once finished. After an error the stream is over.
    pub fn next_batch(&mut self) -> Result<Option<Vec<Event>>, WireError> {
        if let Some(e) = self.deferred.take() {
            self.ended = true;
            self.body = None;
            return Err(e.redacted(&self.secret).with_request_id(self.request_id.as_deref()));
        }
        if self.ended {
            return Ok(None);
        }
        let r = self.pull();
        if r.is_err() {
            self.ended = true;
            self.body = None;
        }
        r.map_err(|e| e.redacted(&self.secret).with_request_id(self.request_id.as_deref()))
    }

    fn pull(&mut self) -> Result<Option<Vec<Event>>, WireError> {
        let Some(body) = self.body.as_mut() else {
            self.ended = true;
            return Ok(None);
        };
        loop {
            let now = body.now_ms();
            let deadline = self.last_activity.saturating_add(self.idle_ms);
            if now >= deadline {
                return Err(WireError::new(
                    ErrorCode::Timeout,
                    format!("no data from the model for {} ms (idle_timeout_ms)", self.idle_ms),
                ));
            }
            let first = match body.read(READ_SIZE, deadline - now)? {
                ReadOutcome::TimedOut => continue,
                ReadOutcome::Eof => return self.eof(Vec::new()),
                ReadOutcome::Bytes(b) => b,
            };
            self.last_activity = body.now_ms();
            let mut buf = first;
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
            let decoded = self.decoder.feed(&buf)?;
            if decoded.done {
                // Whatever follows `[DONE]` is ignored.
                self.ended = true;
                self.body = None;
                return Ok(Some(decoded.events));
            }
            if let Some(e) = failure {
                return self.defer(decoded.events, e);
            }
            if eof {
                return self.eof(decoded.events);
            }
            if !decoded.events.is_empty() || decoded.comments > 0 {
                return Ok(Some(decoded.events));
            }
        }
    }

    fn eof(&mut self, mut events: Vec<Event>) -> Result<Option<Vec<Event>>, WireError> {
        self.body = None;
        match self.decoder.finish() {
            Ok(tail) => {
                self.ended = true;
                events.extend(tail.events);
                Ok(if events.is_empty() { None } else { Some(events) })
            }
            Err(e) => self.defer(events, e),
        }
    }

    /// Delivers `events` now and `err` at the next call (or `err` now when
    /// there are no events).
    fn defer(&mut self, events: Vec<Event>, err: WireError) -> Result<Option<Vec<Event>>, WireError> {
        self.body = None;
        if events.is_empty() {
            return Err(err);
        }
        self.deferred = Some(err);
        Ok(Some(events))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::cell::Cell;
    use std::collections::VecDeque;
    use std::rc::Rc;

    use super::*;
    use crate::request::Message;
    use crate::stream::FinishReason;

    /// A scripted body on a fake clock.
    enum Step {
        Bytes(&'static str),
        /// Silence for this long.
        Wait(u64),
        Fail,
    }

    struct FakeBody {
        steps: VecDeque<Step>,
        clock: Rc<Cell<u64>>,
    }

    impl ResponseBody for FakeBody {
        fn read(&mut self, _max: usize, wait_ms: u64) -> Result<ReadOutcome, WireError> {
            match self.steps.front_mut() {
                None => Ok(ReadOutcome::Eof),
                Some(Step::Bytes(b)) => {
                    let b = b.as_bytes().to_vec();
                    self.steps.pop_front();
                    Ok(ReadOutcome::Bytes(b))
                }
                Some(Step::Fail) => Err(WireError::new(ErrorCode::Transport, "connection reset")),
                Some(Step::Wait(left)) => {
                    if wait_ms >= *left {
                        self.clock.set(self.clock.get() + *left);
                        self.steps.pop_front();
                        self.read(_max, 0)
                    } else {
                        self.clock.set(self.clock.get() + wait_ms);
                        *left -= wait_ms;
                        Ok(ReadOutcome::TimedOut)
                    }
                }
            }
        }

        fn now_ms(&self) -> u64 {
            self.clock.get()
        }
    }

    fn body(steps: Vec<Step>) -> FakeBody {
        FakeBody { steps: steps.into(), clock: Rc::new(Cell::new(1_000)) }
    }

    fn text_chunk(t: &str) -> String {
        format!("data: {}\n\n", serde_json::json!({"choices": [{"index": 0, "delta": {"content": t}}]}))
    }

    fn leak(s: String) -> &'static str {
        Box::leak(s.into_boxed_str())
    }

    struct FakeTransport {
        status: u16,
        headers: Vec<(String, String)>,
        body: Option<FakeBody>,
        sent: Vec<HttpRequest>,
    }

    impl Transport for FakeTransport {
        type Body = FakeBody;

        fn send(&mut self, req: &HttpRequest) -> Result<HttpResponse<FakeBody>, WireError> {
            self.sent.push(req.clone());
            let body = self.body.take().ok_or_else(|| WireError::new(ErrorCode::Transport, "refused"))?;
            Ok(HttpResponse { status: self.status, headers: self.headers.clone(), body })
        }

        fn unix_secs(&self) -> u64 {
            1_800_000_000
        }
    }

    fn settings(flavor: &Flavor, json: &str) -> Settings {
        Settings::resolve(&AdapterConfig::from_json(json).unwrap(), flavor).unwrap()
    }

    fn request() -> Request {
        Request { messages: vec![Message::user("hi")], ..Request::default() }
    }

    #[test]
    fn config_defaults_and_checks() {
        let s = settings(&DEEPSEEK, r#"{"model":"deepseek-v4-pro","thinking":"off","reasoning_effort":"max"}"#);
        assert_eq!(s.endpoint.url(), "https://api.deepseek.com/chat/completions");
        assert_eq!(s.api_key_env.as_deref(), Some("DEEPSEEK_API_KEY"));
        assert_eq!(s.wire.thinking, Some(false));
        assert_eq!(s.wire.reasoning_effort, Some(ReasoningEffort::Max));
        assert_eq!(s.idle_timeout_ms, DEFAULT_IDLE_TIMEOUT_MS);
        let s = settings(&OPENAI, r#"{"model":"m","base_url":"http://127.0.0.1:11434/v1/","thinking":true}"#);
        assert_eq!(
            s.endpoint,
            Endpoint { https: false, authority: "127.0.0.1:11434".into(), path: "/v1/chat/completions".into() }
        );
        assert_eq!(s.api_key_env, None);
        let err = |flavor: &Flavor, json: &str| {
            Settings::resolve(&AdapterConfig::from_json(json).unwrap(), flavor).unwrap_err().message
        };
        assert!(err(&DEEPSEEK, "{}").contains("`model` is not configured"));
        assert!(err(&OPENAI, r#"{"model":"m"}"#).contains("`base_url` is not configured"));
        assert!(err(&OPENAI, r#"{"model":"m","base_url":"ftp://x"}"#).contains("http:// or https://"));
        assert!(err(&OPENAI, r#"{"model":"m","base_url":"https://u:p@x"}"#).contains("credentials"));
        assert!(err(&DEEPSEEK, r#"{"model":"m","reasoning_effort":"huge"}"#).contains("reasoning_effort"));
        assert!(err(&DEEPSEEK, r#"{"model":"m","max_tokens_field":"n"}"#).contains("max_tokens_field"));
        let typo = AdapterConfig::from_json(r#"{"modle":"m"}"#).unwrap_err();
        assert_eq!(typo.code, ErrorCode::InvalidRequest);
        assert!(AdapterConfig::from_json(r#"{"thinking":"maybe"}"#).is_err());
        assert_eq!(
            AdapterConfig::from_json("").unwrap().model_info(),
            ("(unconfigured)".into(), DEFAULT_CONTEXT_WINDOW)
        );
    }

    #[test]
    fn api_key_lookup() {
        let ds = settings(&DEEPSEEK, r#"{"model":"m","api_key_env":"MY_KEY"}"#);
        assert_eq!(ds.api_key(|n| (n == "MY_KEY").then(|| " sk-1 ".to_string())).unwrap(), Some("sk-1".into()));
        let e = ds.api_key(|_| None).unwrap_err();
        assert_eq!(e.code, ErrorCode::Auth);
        assert!(e.message.contains("MY_KEY") && e.message.contains("grant.env"), "{}", e.message);
        let e = ds.api_key(|_| Some("sk\nx".into())).unwrap_err();
        assert!(!e.message.contains("sk\nx"));
        let oa = settings(&OPENAI, r#"{"model":"m","base_url":"http://h"}"#);
        assert_eq!(oa.api_key(|_| Some("ignored".into())).unwrap(), None);
        let oa = settings(&OPENAI, r#"{"model":"m","base_url":"http://h","api_key_env":"K"}"#);
        assert_eq!(oa.api_key(|_| None).unwrap_err().code, ErrorCode::Auth);
        let ds = settings(&DEEPSEEK, r#"{"model":"m","api_key_env":""}"#);
        assert_eq!(ds.api_key(|_| Some("k".into())).unwrap_err().code, ErrorCode::Auth);
    }

    #[test]
    fn request_headers_and_body() {
        let s = settings(&DEEPSEEK, r#"{"model":"m","max_tokens":7}"#);
        let r = http_request(&s, Some("sk-1"), &request()).unwrap();
        assert!(r.headers.contains(&("authorization", "Bearer sk-1".into())));
        assert!(r.headers.contains(&("content-type", "application/json".into())));
        let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(body["max_tokens"], 7);
        let r = http_request(&s, None, &request()).unwrap();
        assert!(r.headers.iter().all(|(k, _)| *k != "authorization"));
    }

    #[test]
    fn streams_batches_as_they_arrive() {
        let chunks: Vec<Step> = vec![
            Step::Bytes(leak(text_chunk("Hel"))),
            Step::Wait(50),
            Step::Bytes(": keep-alive\n\n"),
            Step::Wait(50),
            Step::Bytes(leak(text_chunk("lo"))),
            Step::Bytes("data: [DONE]\n\n"),
        ];
        let mut c = Completion::new(body(chunks), 100, String::new());
        assert_eq!(c.next_batch().unwrap(), Some(vec![Event::Text("Hel".into())]));
        assert_eq!(c.next_batch().unwrap(), Some(vec![]), "a keep-alive hands control back");
        assert_eq!(
            c.next_batch().unwrap(),
            Some(vec![Event::Text("lo".into()), Event::Finish(FinishReason::Stop)]),
            "buffered bytes are drained into one batch"
        );
        assert_eq!(c.next_batch().unwrap(), None);
        assert_eq!(c.next_batch().unwrap(), None);
    }

    #[test]
    fn keepalives_reset_the_idle_timer_and_silence_times_out() {
        let steps = vec![
            Step::Bytes(leak(text_chunk("a"))),
            Step::Wait(80),
            Step::Bytes(": keep-alive\n\n"),
            Step::Wait(80),
            Step::Bytes(": keep-alive\n\n"),
            Step::Wait(150),
            Step::Bytes(leak(text_chunk("never"))),
        ];
        let mut c = Completion::new(body(steps), 100, String::new());
        assert!(matches!(c.next_batch(), Ok(Some(_))));
        assert_eq!(c.next_batch().unwrap(), Some(vec![]));
        assert_eq!(c.next_batch().unwrap(), Some(vec![]));
        let e = c.next_batch().unwrap_err();
        assert_eq!(e.code, ErrorCode::Timeout);
        assert!(c.is_ended());
        assert_eq!(c.next_batch().unwrap(), None);
    }

    #[test]
    fn eof_without_done_and_transport_errors() {
        let mut c = Completion::new(body(vec![Step::Bytes(leak(text_chunk("a")))]), 100, String::new());
        assert!(matches!(c.next_batch(), Ok(Some(_))));
        assert_eq!(c.next_batch().unwrap_err().code, ErrorCode::StreamClosed);
        assert_eq!(c.next_batch().unwrap(), None);
        // A failure noticed while draining: the text before it comes first.
        let mut c = Completion::new(body(vec![Step::Bytes(leak(text_chunk("a"))), Step::Fail]), 100, "x".into());
        assert_eq!(c.next_batch().unwrap(), Some(vec![Event::Text("a".into())]));
        assert_eq!(c.next_batch().unwrap_err().code, ErrorCode::Transport);
        assert_eq!(c.next_batch().unwrap(), None);
        let mut c = Completion::new(body(vec![Step::Bytes("data: {nope\n\n")]), 100, String::new());
        assert_eq!(c.next_batch().unwrap_err().code, ErrorCode::MalformedResponse);
    }

    #[test]
    fn http_errors_are_mapped_and_redacted() {
        let s = settings(&DEEPSEEK, r#"{"model":"m"}"#);
        let mut t = FakeTransport {
            status: 401,
            headers: vec![("retry-after".into(), "3".into())],
            body: Some(body(vec![Step::Bytes(
                r#"{"error":{"message":"bad key sk-secret-1","type":"authentication_error"}}"#,
            )])),
            sent: Vec::new(),
        };
        let e = start(&mut t, &s, Some("sk-secret-1"), &request()).err().unwrap();
        assert_eq!((e.code, e.http_status, e.retry_after_ms), (ErrorCode::Auth, Some(401), Some(3000)));
        assert!(!e.message.contains("sk-secret-1") && e.message.contains("[REDACTED]"), "{}", e.message);
        assert_eq!(t.sent.len(), 1);

        let mut t = FakeTransport {
            status: 200,
            headers: vec![("content-type".into(), "application/json".into())],
            body: Some(body(vec![Step::Bytes(
                r#"{"error":{"message":"Rate limit reached","type":"rate_limit_error"}}"#,
            )])),
            sent: Vec::new(),
        };
        assert_eq!(start(&mut t, &s, None, &request()).err().unwrap().code, ErrorCode::RateLimit);

        let mut t = FakeTransport {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            body: Some(body(vec![Step::Bytes(leak(text_chunk("ok"))), Step::Bytes("data: [DONE]\n\n")])),
            sent: Vec::new(),
        };
        let mut c = start(&mut t, &s, None, &request()).ok().unwrap();
        assert_eq!(c.next_batch().unwrap(), Some(vec![Event::Text("ok".into()), Event::Finish(FinishReason::Stop)]));
    }

    #[test]
    fn the_provider_request_id_is_kept_in_errors() {
        let s = settings(&DEEPSEEK, r#"{"model":"m"}"#);
        let mut t = FakeTransport {
            status: 429,
            headers: vec![("retry-after".into(), "2".into()), ("x-request-id".into(), "req-429".into())],
            body: Some(body(vec![Step::Bytes(r#"{"error":{"message":"slow down"}}"#)])),
            sent: Vec::new(),
        };
        let e = start(&mut t, &s, None, &request()).err().unwrap();
        assert_eq!(
            (e.code, e.retry_after_ms, e.request_id.as_deref()),
            (ErrorCode::RateLimit, Some(2000), Some("req-429"))
        );
        assert_eq!(e.message, "HTTP 429: slow down [request id: req-429]");

        // On a 2xx stream, a later failure names the id of the response head.
        let mut t = FakeTransport {
            status: 200,
            headers: vec![
                ("content-type".into(), "text/event-stream".into()),
                ("x-deepseek-request-id".into(), "deepseek-1".into()),
            ],
            body: Some(body(vec![Step::Bytes(leak(text_chunk("a")))])),
            sent: Vec::new(),
        };
        let mut c = start(&mut t, &s, None, &request()).ok().unwrap();
        assert_eq!(c.request_id(), Some("deepseek-1"));
        assert!(matches!(c.next_batch(), Ok(Some(_))));
        let e = c.next_batch().unwrap_err();
        assert_eq!((e.code, e.request_id.as_deref()), (ErrorCode::StreamClosed, Some("deepseek-1")));
        assert!(e.message.ends_with("[request id: deepseek-1]"), "{}", e.message);
    }
}
