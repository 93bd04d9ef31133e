//! Stable error codes and the mapping of provider failures onto them.
//!
//! Every failure an adapter reports carries one [`ErrorCode`]; the host's
//! retry policy keys on it. The codes mirror `error-code` in
//! `wit/since_v0.1.0/llm.wit`.
//!
//! Messages are built from the response **body only** (never from request
//! headers), are truncated to [`MAX_MESSAGE_CHARS`], and can be scrubbed of
//! the API key with [`redact`] / [`WireError::redacted`].

use serde_json::Value;

use crate::retry_after::parse_retry_after;

/// Longest message (in characters) kept from a provider error body.
pub const MAX_MESSAGE_CHARS: usize = 500;

/// What replaces a secret in redacted text.
pub const REDACTED: &str = "[REDACTED]";

/// Stable error codes, as in `wit/since_v0.1.0/llm.wit` (`error-code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// 401/403: the key is missing, wrong or not allowed.
    Auth,
    /// 402 (or 429 `insufficient_quota`): out of balance or quota.
    Quota,
    /// 429: rate or concurrency limit.
    RateLimit,
    /// The prompt does not fit the model's context window.
    ContextWindowExceeded,
    /// 400/404/413/422 and other client errors: the request is wrong.
    InvalidRequest,
    /// 5xx or a provider-side failure.
    Server,
    /// Connection failure (produced by the adapter, not by this crate).
    Transport,
    /// Idle or total timeout (produced by the adapter).
    Timeout,
    /// Cancelled (produced by the adapter).
    Aborted,
    /// The stream ended without `data: [DONE]`.
    StreamClosed,
    /// The response could not be parsed.
    MalformedResponse,
    /// The stream finished without text or tool calls.
    EmptyResponse,
}

impl ErrorCode {
    /// The code as written in logs (`RATE_LIMIT` …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auth => "AUTH",
            Self::Quota => "QUOTA",
            Self::RateLimit => "RATE_LIMIT",
            Self::ContextWindowExceeded => "CONTEXT_WINDOW_EXCEEDED",
            Self::InvalidRequest => "INVALID_REQUEST",
            Self::Server => "SERVER",
            Self::Transport => "TRANSPORT",
            Self::Timeout => "TIMEOUT",
            Self::Aborted => "ABORTED",
            Self::StreamClosed => "STREAM_CLOSED",
            Self::MalformedResponse => "MALFORMED_RESPONSE",
            Self::EmptyResponse => "EMPTY_RESPONSE",
        }
    }

    /// Whether a request failing with this code is worth retrying as is
    /// (the host's policy has the last word).
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            Self::RateLimit | Self::Server | Self::Transport | Self::Timeout | Self::StreamClosed | Self::EmptyResponse
        )
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed request, shaped like the WIT `error` record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct WireError {
    /// Stable code.
    pub code: ErrorCode,
    /// Human-readable message; never contains request headers.
    pub message: String,
    /// HTTP status, when there was one.
    pub http_status: Option<u16>,
    /// Server-requested delay, from `Retry-After`.
    pub retry_after_ms: Option<u64>,
    /// The provider's id of the failed request (`x-request-id` …), for
    /// support; also named at the end of `message`.
    pub request_id: Option<String>,
}

impl WireError {
    /// An error without HTTP details.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), http_status: None, retry_after_ms: None, request_id: None }
    }

    /// The same error tagged with the provider's request id: kept in
    /// `request_id` and appended to the message as `[request id: ID]` (the
    /// WIT error record has no field of its own for it, and the message is
    /// what reaches the session log). `None` or a second tag changes nothing.
    #[must_use]
    pub fn with_request_id(mut self, id: Option<&str>) -> Self {
        if let Some(id) = id
            && self.request_id.is_none()
        {
            self.message = format!("{} [request id: {id}]", self.message);
            self.request_id = Some(id.to_string());
        }
        self
    }

    /// The same error with every occurrence of `secret` in the message
    /// replaced by [`REDACTED`].
    #[must_use]
    pub fn redacted(mut self, secret: &str) -> Self {
        self.message = redact(&self.message, secret);
        self
    }
}

impl From<crate::request::BuildError> for WireError {
    /// A body that cannot be built is an `INVALID_REQUEST`.
    fn from(e: crate::request::BuildError) -> Self {
        Self::new(ErrorCode::InvalidRequest, e.to_string())
    }
}

impl From<crate::sse::SseError> for WireError {
    /// An unparseable event stream is a `MALFORMED_RESPONSE`.
    fn from(e: crate::sse::SseError) -> Self {
        Self::new(ErrorCode::MalformedResponse, e.to_string())
    }
}

/// Replaces every occurrence of `secret` in `text` with [`REDACTED`]; also
/// the value of any `Bearer <token>` it contains. An empty secret redacts
/// only bearer tokens.
pub fn redact(text: &str, secret: &str) -> String {
    let out = if secret.is_empty() { text.to_string() } else { text.replace(secret, REDACTED) };
    redact_bearer(&out)
}

/// Replaces the token after each `Bearer ` (case-insensitive) with
/// [`REDACTED`].
fn redact_bearer(text: &str) -> String {
    const NEEDLE: &str = "bearer ";
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut pos = 0;
    while let Some(found) = lower[pos..].find(NEEDLE) {
        let start = pos + found + NEEDLE.len();
        let token_len = text[start..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ',' | ';' | ')' | '<' | '>'))
            .unwrap_or(text.len() - start);
        out.push_str(&text[pos..start]);
        if token_len > 0 && &text[start..start + token_len] != REDACTED {
            out.push_str(REDACTED);
        } else {
            out.push_str(&text[start..start + token_len]);
        }
        pos = start + token_len;
    }
    out.push_str(&text[pos..]);
    out
}

/// Truncates `text` to at most `max` characters, appending `…` when cut.
pub fn truncate_chars(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((cut, _)) => {
            let mut s = text[..cut].to_string();
            s.push('…');
            s
        }
    }
}

/// The parts of an OpenAI-style error body `{"error":{"message","type","code"}}`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorBody {
    /// `error.message`.
    pub message: Option<String>,
    /// `error.type`.
    pub kind: Option<String>,
    /// `error.code` (numbers are kept as their decimal text).
    pub code: Option<String>,
}

impl ErrorBody {
    /// Reads an error object: either the whole body `{"error":{…}}`, the
    /// inner object itself, or `{"error":"text"}`. Returns `None` when
    /// `value` has none of these shapes.
    pub fn from_value(value: &Value) -> Option<Self> {
        let obj = value.as_object()?;
        let inner = match obj.get("error") {
            Some(Value::Object(inner)) => inner,
            Some(Value::String(s)) => {
                return Some(Self { message: Some(s.clone()), ..Self::default() });
            }
            Some(_) => return None,
            None if obj.contains_key("message") => obj,
            None => return None,
        };
        let text = |key: &str| match inner.get(key) {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        };
        Some(Self { message: text("message"), kind: text("type"), code: text("code") })
    }

    /// Parses a response body; `None` if it is not an error object.
    pub fn parse(body: &[u8]) -> Option<Self> {
        let value: Value = serde_json::from_slice(body).ok()?;
        Self::from_value(&value)
    }

    fn haystack(&self) -> String {
        let mut s = String::new();
        for part in [&self.message, &self.kind, &self.code].into_iter().flatten() {
            s.push_str(&part.to_ascii_lowercase());
            s.push(' ');
        }
        s
    }
}

/// Error codes (lowercase) providers use for a prompt over the context window.
const CONTEXT_OVERFLOW_CODES: &[&str] =
    &["context_length_exceeded", "context_window_exceeded", "model_context_window_exceeded", "prompt_too_long"];

/// Words that, next to "context", say it is too small for the request.
const CONTEXT_CAPACITY_WORDS: &[&str] =
    &["length", "window", "limit", "size", "exceed", "too large", "too long", "maximum", "overflow", "too many tokens"];

/// What the request is called when it is too long for the model.
const INPUT_NOUNS: &[&str] = &["prompt", "input", "message", "request", "conversation"];

/// Ways of saying "does not fit".
const TOO_BIG: &[&str] = &["too long", "too large", "too many tokens", "exceeds"];

/// Phrases about throughput (tokens per minute), never about the context.
const RATE_WORDS: &[&str] =
    &["per min", "per minute", "per second", "per day", "rate limit", "rate_limit", "tpm", "rpm"];

/// Phrases about the output cap (`max_tokens`), which are invalid requests.
const OUTPUT_CAP_WORDS: &[&str] = &["max_tokens", "max_completion_tokens", "output tokens", "completion tokens"];

/// Whether `text` says the prompt does not fit the model's context window.
///
/// Recognises the wordings rather than one phrase list: a context-overflow
/// error code (`context_length_exceeded` …); "context" together with a
/// capacity word ("maximum context length", "context window exceeded",
/// "too large for model context", "exceeds the available context size" …);
/// the prompt/input/messages being "too long", "too large", "too many
/// tokens" or "exceeds" a token limit ("prompt is too long", "input token
/// count exceeds the maximum number of tokens"); "too many tokens"; "reduce
/// the length of the messages". Text about throughput ("tokens per
/// minute", "rate limit") or only about the output cap (`max_tokens`
/// without "context") is not an overflow, nor is any other "exceeds
/// maximum" ("temperature exceeds maximum allowed value").
pub fn is_context_overflow(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| lower.contains(w));
    if has(CONTEXT_OVERFLOW_CODES) {
        return true;
    }
    if has(RATE_WORDS) {
        return false;
    }
    if lower.contains("context") && has(CONTEXT_CAPACITY_WORDS) {
        return true;
    }
    if has(OUTPUT_CAP_WORDS) {
        return false;
    }
    let tokens_over = lower.contains("token") && (lower.contains("exceed") || lower.contains("maximum"));
    (has(INPUT_NOUNS) && (has(&TOO_BIG[..3]) || tokens_over))
        || lower.contains("too many tokens")
        || lower.contains("reduce the length")
}

/// Response headers that carry the provider's request id, in order of
/// preference (lowercase). Any other header ending in `request-id` or
/// `requestid` is taken after these.
pub const REQUEST_ID_HEADERS: &[&str] = &["x-request-id", "request-id", "x-deepseek-request-id", "openai-request-id"];

/// Longest request id kept, in characters.
pub const MAX_REQUEST_ID_CHARS: usize = 128;

/// The provider's request id among `headers` (name, value), cleaned: only
/// printable ASCII without spaces, at most [`MAX_REQUEST_ID_CHARS`]. `None`
/// when there is none (or nothing printable is left).
pub fn request_id<'a>(headers: impl IntoIterator<Item = (&'a str, &'a str)> + Clone) -> Option<String> {
    let clean = |v: &str| -> Option<String> {
        let id: String = v.trim().chars().filter(|c| c.is_ascii_graphic()).take(MAX_REQUEST_ID_CHARS).collect();
        (!id.is_empty()).then_some(id)
    };
    for name in REQUEST_ID_HEADERS {
        if let Some(id) =
            headers.clone().into_iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).and_then(|(_, v)| clean(v))
        {
            return Some(id);
        }
    }
    headers.into_iter().find_map(|(k, v)| {
        let k = k.to_ascii_lowercase();
        if k.ends_with("request-id") || k.ends_with("requestid") { clean(v) } else { None }
    })
}

/// Maps a non-2xx HTTP response onto a [`WireError`].
///
/// - `status`: the HTTP status;
/// - `body`: the response body (only the body is ever quoted);
/// - `retry_after`: the `Retry-After` header value, if any (delay-seconds or
///   an HTTP-date); `now_unix_secs` is the current time, used for dates;
/// - `secret`: the API key, redacted from the message (may be empty).
///
/// Codes: 400/404/413/422 and other 4xx → `INVALID_REQUEST`; 401/403 →
/// `AUTH`; 402 → `QUOTA`; 408 → `TIMEOUT`; 429 → `RATE_LIMIT` (or `QUOTA`
/// when the body says `insufficient_quota`); 5xx and anything else →
/// `SERVER`. A 400/413/422 whose body reports a context overflow →
/// `CONTEXT_WINDOW_EXCEEDED`.
pub fn map_http_error(
    status: u16,
    body: &[u8],
    retry_after: Option<&str>,
    now_unix_secs: u64,
    secret: &str,
) -> WireError {
    let parsed = ErrorBody::parse(body);
    let haystack = match &parsed {
        Some(b) => b.haystack(),
        None => String::from_utf8_lossy(body).to_ascii_lowercase(),
    };
    let code = match status {
        400 | 413 | 422 if is_context_overflow(&haystack) => ErrorCode::ContextWindowExceeded,
        401 | 403 => ErrorCode::Auth,
        402 => ErrorCode::Quota,
        408 => ErrorCode::Timeout,
        429 if haystack.contains("insufficient_quota") => ErrorCode::Quota,
        429 => ErrorCode::RateLimit,
        400..=499 => ErrorCode::InvalidRequest,
        _ => ErrorCode::Server,
    };
    let detail = match parsed.as_ref().and_then(|b| b.message.clone()) {
        Some(m) if !m.trim().is_empty() => m,
        _ => collapse_whitespace(&String::from_utf8_lossy(body)),
    };
    let message = if detail.is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status}: {}", truncate_chars(&detail, MAX_MESSAGE_CHARS))
    };
    WireError {
        code,
        message: redact(&message, secret),
        http_status: Some(status),
        retry_after_ms: retry_after.and_then(|v| parse_retry_after(v, now_unix_secs)),
        request_id: None,
    }
}

/// Maps an `error` object that arrived inside a 200 stream (or an SSE
/// `event: error`). The code is inferred from `error.type` / `error.code` /
/// the message; a numeric code is treated as an HTTP status.
pub fn map_stream_error(body: &ErrorBody) -> WireError {
    let haystack = body.haystack();
    let status = body.code.as_deref().and_then(|c| c.parse::<u16>().ok());
    let code = if is_context_overflow(&haystack) {
        ErrorCode::ContextWindowExceeded
    } else if let Some(status) = status.filter(|s| (400..=599).contains(s)) {
        map_http_error(status, b"", None, 0, "").code
    } else if haystack.contains("insufficient_quota") || haystack.contains("insufficient balance") {
        ErrorCode::Quota
    } else if RATE_WORDS.iter().any(|w| haystack.contains(w)) {
        ErrorCode::RateLimit
    } else if haystack.contains("authentication") || haystack.contains("invalid_api_key") {
        ErrorCode::Auth
    } else if haystack.contains("invalid_request") {
        ErrorCode::InvalidRequest
    } else {
        ErrorCode::Server
    };
    let detail = body.message.clone().unwrap_or_else(|| "error in stream".to_string());
    WireError::new(code, format!("stream error: {}", truncate_chars(&detail, MAX_MESSAGE_CHARS)))
}

fn collapse_whitespace(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn body(message: &str, kind: &str, code: &str) -> Vec<u8> {
        serde_json::json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn status_table() {
        let cases = [
            (400, ErrorCode::InvalidRequest),
            (401, ErrorCode::Auth),
            (402, ErrorCode::Quota),
            (403, ErrorCode::Auth),
            (404, ErrorCode::InvalidRequest),
            (408, ErrorCode::Timeout),
            (413, ErrorCode::InvalidRequest),
            (422, ErrorCode::InvalidRequest),
            (429, ErrorCode::RateLimit),
            (500, ErrorCode::Server),
            (502, ErrorCode::Server),
            (503, ErrorCode::Server),
            (302, ErrorCode::Server),
        ];
        for (status, code) in cases {
            let e = map_http_error(status, &body("x", "t", "c"), None, 0, "");
            assert_eq!(e.code, code, "status {status}");
            assert_eq!(e.http_status, Some(status));
        }
    }

    #[test]
    fn message_comes_from_error_body() {
        let e = map_http_error(
            400,
            &body(
                "The reasoning_content in the thinking mode must be passed back to the API.",
                "invalid_request_error",
                "invalid_request_error",
            ),
            None,
            0,
            "",
        );
        assert_eq!(e.code, ErrorCode::InvalidRequest);
        assert_eq!(e.message, "HTTP 400: The reasoning_content in the thinking mode must be passed back to the API.");
    }

    #[test]
    fn context_overflow_is_recognised() {
        let ds = body(
            "This model's maximum context length is 131072 tokens. However, you requested 140000 tokens.",
            "invalid_request_error",
            "invalid_request_error",
        );
        assert_eq!(map_http_error(400, &ds, None, 0, "").code, ErrorCode::ContextWindowExceeded);
        let oa = body("too long", "invalid_request_error", "context_length_exceeded");
        assert_eq!(map_http_error(400, &oa, None, 0, "").code, ErrorCode::ContextWindowExceeded);
        assert_eq!(map_http_error(422, b"prompt is too long", None, 0, "").code, ErrorCode::ContextWindowExceeded);
        // A 429 mentioning tokens is still a rate limit.
        let rl = body("Rate limit reached: too many tokens per min", "rate_limit_error", "x");
        assert_eq!(map_http_error(429, &rl, None, 0, "").code, ErrorCode::RateLimit);
    }

    #[test]
    fn context_overflow_wordings() {
        let overflow = [
            "request too large for model context",
            "This model's maximum context length is 8192 tokens.",
            "the request exceeds the available context size, try increasing it",
            "Input length exceeds maximum context length",
            "Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context length",
            "prompt is too long: 215000 tokens > 200000 maximum",
            "Input is too long for requested model.",
            "The input token count (1234567) exceeds the maximum number of tokens allowed (1048576).",
            "too many tokens in the conversation",
            "Please reduce the length of the messages or completion.",
            "context window exceeded",
            "x (code: model_context_window_exceeded)",
        ];
        for text in overflow {
            assert!(is_context_overflow(text), "{text}");
            let b = body(text, "invalid_request_error", "invalid_request_error");
            assert_eq!(map_http_error(400, &b, None, 0, "").code, ErrorCode::ContextWindowExceeded, "{text}");
        }
        let other = [
            "invalid input: temperature exceeds maximum allowed value",
            "max_tokens is too large: 100000. This model supports at most 4096 completion tokens",
            "Rate limit reached: too many tokens per min",
            "Invalid request body format.",
            "tool name must match ^[a-zA-Z0-9_-]+$",
            "messages: at least one message is required",
        ];
        for text in other {
            assert!(!is_context_overflow(text), "{text}");
        }
        // A stream error about throughput stays a rate limit.
        let v = serde_json::json!({"error": {"message": "too many tokens per minute"}});
        assert_eq!(map_stream_error(&ErrorBody::from_value(&v).unwrap()).code, ErrorCode::RateLimit);
    }

    #[test]
    fn request_ids() {
        let h = |pairs: &[(&'static str, &'static str)]| request_id(pairs.iter().copied());
        assert_eq!(h(&[("X-Request-Id", " req-429 ")]).as_deref(), Some("req-429"));
        assert_eq!(h(&[("x-deepseek-request-id", "deepseek-503")]).as_deref(), Some("deepseek-503"));
        assert_eq!(h(&[("request-id", "b"), ("x-request-id", "a")]).as_deref(), Some("a"), "preference order");
        assert_eq!(h(&[("x-amzn-requestid", "amz")]).as_deref(), Some("amz"));
        assert_eq!(h(&[("content-type", "x")]), None);
        assert_eq!(h(&[("x-request-id", "\u{7}\n ")]), None);
        let long = "é".repeat(10) + &"a".repeat(500);
        let id = request_id([("x-request-id", long.as_str())]).unwrap();
        assert_eq!(id.len(), MAX_REQUEST_ID_CHARS);
        let e = WireError::new(ErrorCode::Server, "HTTP 503").with_request_id(Some("r-1")).with_request_id(Some("r-2"));
        assert_eq!((e.message.as_str(), e.request_id.as_deref()), ("HTTP 503 [request id: r-1]", Some("r-1")));
        assert_eq!(WireError::new(ErrorCode::Server, "x").with_request_id(None).message, "x");
    }

    #[test]
    fn quota_429() {
        let b = body("You exceeded your current quota", "insufficient_quota", "insufficient_quota");
        assert_eq!(map_http_error(429, &b, None, 0, "").code, ErrorCode::Quota);
    }

    #[test]
    fn retry_after_seconds_and_date() {
        let e = map_http_error(429, &body("slow down", "rate_limit_error", "x"), Some("7"), 0, "");
        assert_eq!(e.retry_after_ms, Some(7000));
        // 1994-11-06T08:49:37Z = 784111777.
        let e = map_http_error(503, b"", Some("Sun, 06 Nov 1994 08:49:37 GMT"), 784_111_770, "");
        assert_eq!(e.retry_after_ms, Some(7000));
        assert_eq!(e.message, "HTTP 503");
        let e = map_http_error(429, b"", Some("soon"), 0, "");
        assert_eq!(e.retry_after_ms, None);
    }

    #[test]
    fn non_json_body_is_quoted_truncated() {
        let long = "<html> bad gateway </html> ".repeat(100);
        let e = map_http_error(502, long.as_bytes(), None, 0, "");
        assert!(e.message.starts_with("HTTP 502: <html> bad gateway </html> <html>"));
        assert!(e.message.ends_with('…'));
        assert!(e.message.chars().count() <= MAX_MESSAGE_CHARS + "HTTP 502: ".len() + 1);
    }

    #[test]
    fn key_never_leaks() {
        let key = "sk-secret-1234567890";
        let b = body(&format!("Incorrect API key provided: {key}"), "authentication_error", "x");
        let e = map_http_error(401, &b, None, 0, key);
        assert_eq!(e.code, ErrorCode::Auth);
        assert!(!e.message.contains(key), "{}", e.message);
        assert!(e.message.contains(REDACTED));
        let b = b"echo: Authorization: Bearer abc.def-ghi, rest";
        let e = map_http_error(400, b, None, 0, "");
        assert!(!e.message.contains("abc.def-ghi"), "{}", e.message);
        assert!(e.message.ends_with("Bearer [REDACTED], rest"), "{}", e.message);
    }

    #[test]
    fn redact_helper() {
        assert_eq!(redact("a KEY b KEY", "KEY"), "a [REDACTED] b [REDACTED]");
        assert_eq!(redact("nothing", ""), "nothing");
        assert_eq!(redact("BEARER tok", ""), "BEARER [REDACTED]");
        assert_eq!(redact("bearer ", ""), "bearer ");
        assert_eq!(redact("x: Bearer sk-1", "sk-1"), "x: Bearer [REDACTED]");
        assert_eq!(redact("(Bearer sk-1) <Bearer t>", "sk-1"), "(Bearer [REDACTED]) <Bearer [REDACTED]>");
        let e = WireError::new(ErrorCode::Server, "got sk-1 back").redacted("sk-1");
        assert_eq!(e.message, "got [REDACTED] back");
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        assert_eq!(truncate_chars("héllo", 2), "hé…");
        assert_eq!(truncate_chars("héllo", 5), "héllo");
        assert_eq!(truncate_chars("", 0), "");
    }

    #[test]
    fn stream_error_mapping() {
        let cases = [
            (r#"{"error":{"message":"Rate limit reached","type":"rate_limit_error"}}"#, ErrorCode::RateLimit),
            (r#"{"error":{"message":"boom","type":"server_error"}}"#, ErrorCode::Server),
            (r#"{"error":{"message":"x","code":503}}"#, ErrorCode::Server),
            (r#"{"error":{"message":"x","code":401}}"#, ErrorCode::Auth),
            (r#"{"error":{"message":"x","code":"context_length_exceeded"}}"#, ErrorCode::ContextWindowExceeded),
            (r#"{"error":{"message":"x","type":"insufficient_quota"}}"#, ErrorCode::Quota),
            (r#"{"error":{"message":"bad","type":"invalid_request_error"}}"#, ErrorCode::InvalidRequest),
            (r#"{"error":"overloaded"}"#, ErrorCode::Server),
            (r#"{"message":"Authentication failed"}"#, ErrorCode::Auth),
        ];
        for (json, code) in cases {
            let v: Value = serde_json::from_str(json).unwrap();
            let b = ErrorBody::from_value(&v).unwrap();
            assert_eq!(map_stream_error(&b).code, code, "{json}");
        }
        assert!(ErrorBody::from_value(&serde_json::json!({"choices": []})).is_none());
    }

    #[test]
    fn conversions() {
        let e: WireError = crate::request::BuildError::MissingModel.into();
        assert_eq!((e.code, e.message.as_str()), (ErrorCode::InvalidRequest, "no model configured"));
        let e: WireError = crate::sse::SseError::TooLarge { limit: 4 }.into();
        assert_eq!(e.code, ErrorCode::MalformedResponse);
        assert_eq!(e.to_string(), "MALFORMED_RESPONSE: SSE event larger than 4 bytes");
    }

    #[test]
    fn retryable_codes() {
        assert!(ErrorCode::RateLimit.is_retryable());
        assert!(ErrorCode::StreamClosed.is_retryable());
        assert!(!ErrorCode::Auth.is_retryable());
        assert!(!ErrorCode::ContextWindowExceeded.is_retryable());
        assert_eq!(ErrorCode::ContextWindowExceeded.to_string(), "CONTEXT_WINDOW_EXCEEDED");
    }
}
