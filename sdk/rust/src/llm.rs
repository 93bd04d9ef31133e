//! Model adapters: the [`LlmPlugin`] trait and streaming.
//!
//! `start` returns a stream that the host owns and pulls with `next` until it
//! yields `None`; dropping it (on cancel) aborts the request. Each `next`
//! returns a *batch* of events, so an adapter can hand over whatever it has
//! parsed so far in one call.

use std::cell::RefCell;
use std::collections::VecDeque;

use crate::raw::wharf::plugin::types::{PluginInfo, ToolCall};
pub use crate::raw::wharf::sdk::llm_types::{
    Error as LlmError, ErrorCode as LlmErrorCode, Event, FinishReason, Image, ImageSupport, ModelInfo,
    Request as LlmRequest, Usage,
};

/// A component that talks to a model (world `llm-plugin`). Export it with
/// [`export_llm!`](crate::export_llm).
pub trait LlmPlugin {
    /// The stream of one completion.
    type Stream: CompletionStream;

    /// Self-description. Must not depend on configuration or grants.
    fn info() -> PluginInfo;

    /// Model name and context window, from the configuration.
    fn model() -> ModelInfo;

    /// Starts a completion. Errors here (auth, rate limits …) are retried by
    /// the host according to their [`LlmErrorCode`].
    fn start(req: LlmRequest) -> Result<Self::Stream, LlmError>;
}

/// An adapter that also accepts images in user messages (the optional
/// `llm-images` export). Export it with
/// [`export_llm_images!`](crate::export_llm_images); the host sends it every
/// request that carries images through [`LlmImages::start_with_images`].
pub trait LlmImages: LlmPlugin {
    /// Which media types, and how large an image, the model takes.
    fn image_support() -> ImageSupport;

    /// Starts a completion whose messages carry `images` (each names the
    /// index of its message in `req.messages`).
    fn start_with_images(req: LlmRequest, images: Vec<Image>) -> Result<Self::Stream, LlmError>;
}

/// An adapter that keeps, in its instance, the messages of the last request
/// it started (the optional `llm-history` export), so the host sends a
/// long conversation's next request as only its new messages. Export it
/// with [`export_llm_history!`](crate::export_llm_history).
pub trait LlmHistory: LlmPlugin {
    /// Starts the completion whose messages are the first `kept` messages of
    /// the last request this instance started, followed by `req.messages`.
    /// `Ok(None)` when the instance does not hold those messages: the host
    /// then sends the whole request through [`LlmPlugin::start`].
    fn start_after(kept: u32, req: LlmRequest) -> Result<Option<Self::Stream>, LlmError>;
}

/// An in-flight completion.
pub trait CompletionStream: 'static {
    /// The next batch of events; `Ok(None)` once the stream is finished.
    fn next(&mut self) -> Result<Option<Vec<Event>>, LlmError>;
}

/// A stream that plays precomputed batches, one per `next`.
#[derive(Debug, Clone, Default)]
pub struct BatchStream {
    batches: VecDeque<Vec<Event>>,
}

impl BatchStream {
    /// Plays `batches` in order, then ends.
    pub fn new(batches: impl IntoIterator<Item = Vec<Event>>) -> Self {
        Self { batches: batches.into_iter().collect() }
    }

    /// Appends a batch.
    pub fn push(&mut self, batch: Vec<Event>) {
        self.batches.push_back(batch);
    }

    /// Batches not yet played.
    pub fn remaining(&self) -> usize {
        self.batches.len()
    }
}

impl CompletionStream for BatchStream {
    fn next(&mut self) -> Result<Option<Vec<Event>>, LlmError> {
        Ok(self.batches.pop_front())
    }
}

/// Holds a [`CompletionStream`] behind the `&self` methods of the exported
/// resource. Used by [`export_llm!`](crate::export_llm).
#[doc(hidden)]
pub struct StreamCell<S> {
    inner: RefCell<S>,
}

impl<S: CompletionStream> StreamCell<S> {
    /// Wraps a stream.
    pub fn new(stream: S) -> Self {
        Self { inner: RefCell::new(stream) }
    }

    /// Pulls the next batch.
    pub fn next_batch(&self) -> Result<Option<Vec<Event>>, LlmError> {
        match self.inner.try_borrow_mut() {
            Ok(mut s) => s.next(),
            Err(_) => Err(LlmError::new(LlmErrorCode::InvalidRequest, "re-entrant call to next")),
        }
    }
}

impl LlmError {
    /// An error without HTTP details.
    pub fn new(code: LlmErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), http_status: None, retry_after_ms: None }
    }

    /// Adds the HTTP status.
    pub fn with_status(mut self, status: u16) -> Self {
        self.http_status = Some(status);
        self
    }

    /// Adds the server-requested retry delay.
    pub fn with_retry_after_ms(mut self, ms: u64) -> Self {
        self.retry_after_ms = Some(ms);
        self
    }
}

const ERROR_CODES: [LlmErrorCode; 12] = [
    LlmErrorCode::Auth,
    LlmErrorCode::Quota,
    LlmErrorCode::RateLimit,
    LlmErrorCode::ContextWindowExceeded,
    LlmErrorCode::InvalidRequest,
    LlmErrorCode::Server,
    LlmErrorCode::Transport,
    LlmErrorCode::Timeout,
    LlmErrorCode::Aborted,
    LlmErrorCode::StreamClosed,
    LlmErrorCode::MalformedResponse,
    LlmErrorCode::EmptyResponse,
];

/// `rate-limit`, `rate_limit` and `RATE_LIMIT` all name the same thing.
fn normalize(name: &str) -> String {
    name.trim().to_ascii_uppercase().replace('-', "_")
}

impl LlmErrorCode {
    /// The code as the host logs it (`RATE_LIMIT` …).
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

    /// Parses `rate-limit`, `rate_limit` or `RATE_LIMIT`.
    pub fn parse(name: &str) -> Option<Self> {
        let n = normalize(name);
        ERROR_CODES.into_iter().find(|c| c.as_str() == n)
    }
}

impl FinishReason {
    /// `stop`, `tool_calls`, `max_tokens`, `content_filter` or `retryable`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::ToolCalls => "tool_calls",
            Self::MaxTokens => "max_tokens",
            Self::ContentFilter => "content_filter",
            Self::Retryable => "retryable",
        }
    }

    /// Parses any of the [`as_str`](Self::as_str) names, with `-` or `_`.
    pub fn parse(name: &str) -> Option<Self> {
        let n = normalize(name);
        [Self::Stop, Self::ToolCalls, Self::MaxTokens, Self::ContentFilter, Self::Retryable]
            .into_iter()
            .find(|r| r.as_str().to_ascii_uppercase() == n)
    }
}

impl Usage {
    /// Usage with only prompt and completion counts.
    pub fn new(prompt_tokens: u64, completion_tokens: u64) -> Self {
        Self { prompt_tokens, completion_tokens, ..Self::default() }
    }
}

impl Event {
    /// A visible-text event.
    pub fn text(s: impl Into<String>) -> Self {
        Self::Text(s.into())
    }

    /// A reasoning-text event.
    pub fn reasoning(s: impl Into<String>) -> Self {
        Self::Reasoning(s.into())
    }

    /// A complete tool call.
    pub fn tool_call(id: impl Into<String>, name: impl Into<String>, arguments: impl Into<String>) -> Self {
        Self::ToolCall(ToolCall { id: id.into(), name: name.into(), arguments: arguments.into() })
    }
}

impl ModelInfo {
    /// A model name and its context window in tokens.
    pub fn new(model: impl Into<String>, context_window: u32) -> Self {
        Self { model: model.into(), context_window }
    }
}

/// A rough token estimate for text: one token per four bytes, rounded up.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_names() {
        assert_eq!(LlmErrorCode::parse("rate-limit"), Some(LlmErrorCode::RateLimit));
        assert_eq!(LlmErrorCode::parse("CONTEXT_WINDOW_EXCEEDED"), Some(LlmErrorCode::ContextWindowExceeded));
        assert_eq!(LlmErrorCode::parse("nope"), None);
        assert_eq!(FinishReason::parse("tool_calls"), Some(FinishReason::ToolCalls));
        assert_eq!(FinishReason::parse("tool-calls"), Some(FinishReason::ToolCalls));
        assert_eq!(FinishReason::parse("stop"), Some(FinishReason::Stop));
    }

    #[test]
    fn batch_stream_plays_in_order() {
        let mut s = BatchStream::new([vec![Event::text("a")], vec![Event::Finish(FinishReason::Stop)]]);
        assert!(matches!(s.next(), Ok(Some(b)) if matches!(&b[0], Event::Text(t) if t == "a")));
        assert!(matches!(s.next(), Ok(Some(_))));
        assert!(matches!(s.next(), Ok(None)));
    }
}
