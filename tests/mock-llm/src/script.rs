//! The script: what the mock answers, and what it checks.
//!
//! Everything here is serde JSON (unknown fields are rejected, so a typo in
//! a script fails loudly); see the crate docs for the format and an example.

use serde::{Deserialize, Serialize};

/// A whole script.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// Replies, one per chat request, in order.
    #[serde(default)]
    pub replies: Vec<Reply>,
    /// The reply once `replies` is used up; without one, an extra request
    /// gets a 500 and a `script_exhausted` violation.
    #[serde(default, rename = "default")]
    pub default_reply: Option<Reply>,
    /// What every request is checked for.
    #[serde(default)]
    pub checks: Checks,
}

impl Script {
    /// A script answering with `replies` in order.
    pub fn new(replies: Vec<Reply>) -> Self {
        Self { replies, ..Self::default() }
    }

    /// Sets the reply used when the queue is empty.
    #[must_use]
    pub fn with_default(mut self, reply: Reply) -> Self {
        self.default_reply = Some(reply);
        self
    }

    /// Sets the checks.
    #[must_use]
    pub fn with_checks(mut self, checks: Checks) -> Self {
        self.checks = checks;
        self
    }
}

/// What the mock requires of `reasoning_content` on assistant messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningCheck {
    /// DeepSeek: every assistant message with tool calls carries
    /// `reasoning_content` (a string, possibly empty); when the mock itself
    /// streamed those calls, it must equal the reasoning it streamed.
    #[default]
    Required,
    /// OpenAI: no message carries `reasoning_content`.
    Forbidden,
    /// Not checked.
    Ignore,
}

/// Request checks. Every violation is recorded; none fails the request
/// unless `reject_violations` is set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Checks {
    /// When set, `Authorization` must be exactly `Bearer <api_key>`.
    pub api_key: Option<String>,
    /// When set, `model` must equal it.
    pub model: Option<String>,
    /// The reasoning pass-back rule.
    pub reasoning: ReasoningCheck,
    /// Every assistant tool call is answered by a `tool` message with its
    /// `tool_call_id` before the next user/assistant/system message (and
    /// before the end); no tool message answers an unknown or already
    /// answered call.
    pub tool_answers: bool,
    /// Tool definitions are well-formed: `type: function`, a name matching
    /// `[a-zA-Z0-9_-]{1,64}` (unique), `parameters` an object schema.
    pub tool_schemas: bool,
    /// `stream_options.include_usage` is `true`.
    pub include_usage: bool,
    /// Answer a violating request with HTTP 400 (DeepSeek's own message for
    /// a missing `reasoning_content`) instead of its scripted reply, which
    /// then stays queued.
    pub reject_violations: bool,
}

impl Default for Checks {
    fn default() -> Self {
        Self {
            api_key: None,
            model: None,
            reasoning: ReasoningCheck::Required,
            tool_answers: true,
            tool_schemas: true,
            include_usage: true,
            reject_violations: false,
        }
    }
}

/// One reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[allow(clippy::large_enum_variant)] // a few per test script
pub enum Reply {
    /// A `200 text/event-stream` completion, possibly with a fault.
    Stream(StreamReply),
    /// An HTTP error with an OpenAI-style error body.
    Error(ErrorReply),
    /// DeepSeek's context-overflow 400.
    ContextOverflow {
        /// The context window named in the message.
        #[serde(default = "default_context_window")]
        limit: u64,
    },
    /// Exactly these bytes.
    Raw(RawReply),
}

fn default_context_window() -> u64 {
    131_072
}

impl Reply {
    /// A streamed plain-text answer.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Stream(StreamReply { text: text.into(), ..StreamReply::default() })
    }

    /// A streamed answer with reasoning and text.
    pub fn reasoning_text(reasoning: impl Into<String>, text: impl Into<String>) -> Self {
        Self::Stream(StreamReply { reasoning: reasoning.into(), text: text.into(), ..StreamReply::default() })
    }

    /// A streamed turn with reasoning and tool calls.
    pub fn tool_calls(reasoning: impl Into<String>, calls: Vec<MockToolCall>) -> Self {
        Self::Stream(StreamReply { reasoning: reasoning.into(), tool_calls: calls, ..StreamReply::default() })
    }

    /// An HTTP error with the default message for `status`.
    pub fn error(status: u16) -> Self {
        Self::Error(ErrorReply::new(status))
    }

    /// DeepSeek's context-overflow 400.
    pub fn context_overflow() -> Self {
        Self::ContextOverflow { limit: default_context_window() }
    }

    /// A short description for records (`stream`, `error 429` …).
    pub fn describe(&self) -> String {
        match self {
            Self::Stream(s) => match &s.fault {
                Some(f) => format!("stream ({})", f.name()),
                None => "stream".to_string(),
            },
            Self::Error(e) => format!("error {}", e.status),
            Self::ContextOverflow { .. } => "context_overflow".to_string(),
            Self::Raw(r) => format!("raw {}", r.status),
        }
    }
}

/// A tool call the mock streams.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MockToolCall {
    /// Call id.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments JSON text (split into fragments when streamed).
    #[serde(default)]
    pub arguments: String,
}

impl MockToolCall {
    /// A call.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: impl Into<String>) -> Self {
        Self { id: id.into(), name: name.into(), arguments: arguments.into() }
    }
}

/// Usage reported in the stream. `prompt_cache_miss_tokens` is
/// `prompt_tokens - cache_hit_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MockUsage {
    /// `prompt_tokens`.
    pub prompt_tokens: u64,
    /// `completion_tokens`.
    pub completion_tokens: u64,
    /// `prompt_cache_hit_tokens` (and `prompt_tokens_details.cached_tokens`).
    #[serde(default)]
    pub cache_hit_tokens: u64,
    /// `completion_tokens_details.reasoning_tokens`.
    #[serde(default)]
    pub reasoning_tokens: u64,
}

impl Default for MockUsage {
    fn default() -> Self {
        Self { prompt_tokens: 100, completion_tokens: 20, cache_hit_tokens: 60, reasoning_tokens: 5 }
    }
}

fn default_usage() -> Option<MockUsage> {
    Some(MockUsage::default())
}

fn default_chunk_chars() -> usize {
    8
}

/// A streamed completion.
///
/// Chunks, in order: a role chunk; `reasoning` in `reasoning_content`
/// pieces; `text` in `content` pieces; per tool call a first fragment
/// (`index`, `id`, `type`, `name`, empty `arguments`) then argument pieces
/// (round-robin across calls when `interleave_tool_calls`); a chunk with
/// `finish_reason`; a usage-only chunk with `choices: []`; `data: [DONE]`.
/// Pieces are `chunk_chars` characters long, so arguments are cut
/// mid-token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StreamReply {
    /// Reasoning text.
    pub reasoning: String,
    /// Visible text.
    pub text: String,
    /// Tool calls.
    pub tool_calls: Vec<MockToolCall>,
    /// `finish_reason`; default `tool_calls` when there are calls, else
    /// `stop`. Any string (`length`, `content_filter`,
    /// `insufficient_system_resource` …).
    pub finish: Option<String>,
    /// Usage; `null` sends none. Default: [`MockUsage::default`].
    #[serde(default = "default_usage")]
    pub usage: Option<MockUsage>,
    /// Put usage on the finish chunk instead of a final usage-only chunk.
    pub usage_in_finish_chunk: bool,
    /// Characters per piece; 0 sends each string whole. Default 8.
    #[serde(default = "default_chunk_chars")]
    pub chunk_chars: usize,
    /// Interleave the fragments of parallel tool calls.
    pub interleave_tool_calls: bool,
    /// Send `: keep-alive` after every N data chunks (0: never).
    pub keepalive_every: usize,
    /// Write the body in pieces of N bytes (0: one write per SSE event), so
    /// clients see lines and UTF-8 sequences split across reads.
    pub write_bytes: usize,
    /// Pause after each write, in milliseconds.
    pub chunk_delay_ms: u64,
    /// Wait this long before sending the response head.
    pub headers_delay_ms: u64,
    /// `model` in the chunks; default: the request's model.
    pub model: Option<String>,
    /// A fault to inject.
    pub fault: Option<Fault>,
    /// Extra response headers (e.g. `["x-request-id", "req-1"]`).
    pub headers: Vec<(String, String)>,
}

impl Default for StreamReply {
    fn default() -> Self {
        Self {
            reasoning: String::new(),
            text: String::new(),
            tool_calls: Vec::new(),
            finish: None,
            usage: default_usage(),
            usage_in_finish_chunk: false,
            chunk_chars: default_chunk_chars(),
            interleave_tool_calls: false,
            keepalive_every: 0,
            write_bytes: 0,
            chunk_delay_ms: 0,
            headers_delay_ms: 0,
            model: None,
            fault: None,
            headers: Vec::new(),
        }
    }
}

impl StreamReply {
    /// The same reply with a fault.
    #[must_use]
    pub fn with_fault(mut self, fault: Fault) -> Self {
        self.fault = Some(fault);
        self
    }

    /// The finish reason that will be sent.
    pub fn finish_reason(&self) -> String {
        self.finish
            .clone()
            .unwrap_or_else(|| if self.tool_calls.is_empty() { "stop" } else { "tool_calls" }.to_string())
    }
}

/// A fault injected into a stream. `after_chunks` counts `data:` chunks
/// already sent (the role chunk is chunk 1); past the last chunk it means
/// "just before `[DONE]`".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Fault {
    /// Reset the TCP connection (RST) mid-stream.
    Reset {
        /// Chunks sent first.
        after_chunks: usize,
    },
    /// Stall mid-stream, then carry on.
    Stall {
        /// Chunks sent first.
        after_chunks: usize,
        /// How long.
        ms: u64,
        /// Send `: keep-alive` this often while stalled (0: never).
        #[serde(default)]
        keepalive_every_ms: u64,
    },
    /// Send a chunk of truncated JSON, then carry on.
    MalformedJson {
        /// Chunks sent first.
        after_chunks: usize,
    },
    /// Send everything but `data: [DONE]`, then end the body cleanly.
    MissingDone,
    /// End the body cleanly after some chunks (no finish, no `[DONE]`).
    Eof {
        /// Chunks sent first.
        after_chunks: usize,
    },
    /// Send an `{"error":{…}}` chunk, then end the body.
    ErrorEvent {
        /// Chunks sent first.
        after_chunks: usize,
        /// `error.message`.
        #[serde(default = "default_stream_error_message")]
        message: String,
        /// `error.type`.
        #[serde(default = "default_stream_error_type", rename = "error_type")]
        kind: String,
        /// `error.code`, if any.
        #[serde(default)]
        code: Option<serde_json::Value>,
    },
}

fn default_stream_error_message() -> String {
    "Server overloaded, please retry later".to_string()
}

fn default_stream_error_type() -> String {
    "server_error".to_string()
}

impl Fault {
    /// The fault's `type` tag.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Reset { .. } => "reset",
            Self::Stall { .. } => "stall",
            Self::MalformedJson { .. } => "malformed_json",
            Self::MissingDone => "missing_done",
            Self::Eof { .. } => "eof",
            Self::ErrorEvent { .. } => "error_event",
        }
    }
}

/// An HTTP error reply: `{"error":{"message","type","param":null,"code"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorReply {
    /// HTTP status.
    pub status: u16,
    /// `error.message`; default per status (DeepSeek's error table).
    #[serde(default)]
    pub message: Option<String>,
    /// `error.type`; default per status.
    #[serde(default, rename = "type")]
    pub error_type: Option<String>,
    /// `error.code`; default: the type.
    #[serde(default)]
    pub code: Option<String>,
    /// `Retry-After` header value (seconds or an HTTP-date).
    #[serde(default)]
    pub retry_after: Option<String>,
    /// Replace the whole body with this text.
    #[serde(default)]
    pub body: Option<String>,
    /// Extra response headers (e.g. `["x-request-id", "req-1"]`).
    #[serde(default)]
    pub headers: Vec<(String, String)>,
}

impl ErrorReply {
    /// An error with the defaults for `status`.
    pub fn new(status: u16) -> Self {
        Self { status, message: None, error_type: None, code: None, retry_after: None, body: None, headers: Vec::new() }
    }

    /// The same error with an extra response header.
    #[must_use]
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// The same error with a `Retry-After` value.
    #[must_use]
    pub fn with_retry_after(mut self, value: impl Into<String>) -> Self {
        self.retry_after = Some(value.into());
        self
    }

    /// The body that will be sent.
    pub fn body_text(&self) -> String {
        if let Some(body) = &self.body {
            return body.clone();
        }
        let (message, kind) = default_error(self.status);
        let kind = self.error_type.clone().unwrap_or_else(|| kind.to_string());
        serde_json::json!({"error": {
            "message": self.message.clone().unwrap_or_else(|| message.to_string()),
            "type": kind,
            "param": null,
            "code": self.code.clone().unwrap_or_else(|| kind.clone()),
        }})
        .to_string()
    }
}

/// Default message and type per status, after DeepSeek's error table.
fn default_error(status: u16) -> (&'static str, &'static str) {
    match status {
        400 => ("Invalid request body format.", "invalid_request_error"),
        401 => ("Authentication Fails, your api key is invalid.", "authentication_error"),
        402 => ("Insufficient Balance.", "insufficient_balance_error"),
        403 => ("Permission denied.", "permission_error"),
        404 => ("Not found.", "not_found_error"),
        422 => ("Invalid Parameters.", "invalid_request_error"),
        429 => ("Rate Limit Reached.", "rate_limit_error"),
        500 => ("Server Error.", "server_error"),
        503 => ("Server Overloaded.", "service_unavailable_error"),
        _ => ("Error.", "api_error"),
    }
}

/// Raw bytes with a status and headers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReply {
    /// HTTP status (default 200).
    #[serde(default = "default_raw_status")]
    pub status: u16,
    /// `Content-Type` (default `text/event-stream`).
    #[serde(default = "default_raw_content_type")]
    pub content_type: String,
    /// Extra headers.
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    /// The body.
    #[serde(default)]
    pub body: String,
}

fn default_raw_status() -> u16 {
    200
}

fn default_raw_content_type() -> String {
    "text/event-stream".to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn parses_documented_example() {
        let script: Script = serde_json::from_str(crate::EXAMPLE_SCRIPT).unwrap();
        assert_eq!(script.replies.len(), 5);
        assert_eq!(script.checks.api_key.as_deref(), Some("sk-test"));
        assert!(script.default_reply.is_some());
        let Reply::Stream(s) = &script.replies[2] else { panic!("not a stream") };
        assert_eq!(s.fault, Some(Fault::Stall { after_chunks: 2, ms: 300, keepalive_every_ms: 100 }));
        assert_eq!(s.chunk_chars, 8);
        assert_eq!(s.usage, Some(MockUsage::default()));
    }

    #[test]
    fn defaults_and_nulls() {
        let s: StreamReply = serde_json::from_str(r#"{"text":"x","usage":null}"#).unwrap();
        assert_eq!(s.usage, None);
        assert_eq!(s.finish_reason(), "stop");
        let r: Reply = serde_json::from_str(r#"{"kind":"context_overflow"}"#).unwrap();
        assert_eq!(r, Reply::ContextOverflow { limit: 131_072 });
        let r: Reply = serde_json::from_str(r#"{"kind":"raw","body":"x"}"#).unwrap();
        assert_eq!(r.describe(), "raw 200");
    }

    #[test]
    fn typos_are_rejected() {
        assert!(serde_json::from_str::<Reply>(r#"{"kind":"stream","txt":"x"}"#).is_err());
        assert!(serde_json::from_str::<Script>(r#"{"reply":[]}"#).is_err());
        assert!(serde_json::from_str::<Fault>(r#"{"type":"reset","after":1}"#).is_err(), "unknown fault field");
    }

    #[test]
    fn error_bodies() {
        let e = ErrorReply::new(429);
        let v: serde_json::Value = serde_json::from_str(&e.body_text()).unwrap();
        assert_eq!(v["error"]["type"], "rate_limit_error");
        assert_eq!(v["error"]["param"], serde_json::Value::Null);
        let e = ErrorReply { body: Some("<html>".into()), ..ErrorReply::new(502) };
        assert_eq!(e.body_text(), "<html>");
    }
}
