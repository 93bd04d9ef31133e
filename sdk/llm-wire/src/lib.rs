//! The OpenAI-style Chat Completions wire format, as spoken by DeepSeek and
//! OpenAI-compatible servers — shared by Wharf's `llm-deepseek` and
//! `llm-openai` adapter components.
//!
//! The core is pure Rust without I/O (serde, serde_json, thiserror only), so
//! it builds for native tests and for `wasm32-wasip2` components alike; the
//! I/O comes in through traits. It owns the formats and the driver:
//!
//! - [`request`]: adapter request + [`Config`] → request body
//!   ([`build_request`], [`build_request_json`]), including DeepSeek's
//!   `reasoning_content` pass-back on tool-calling turns;
//! - [`sse`]: an incremental Server-Sent Events parser ([`SseParser`]);
//! - [`stream`]: chunk JSON → adapter [`Event`]s ([`StreamAssembler`]), and
//!   [`StreamDecoder`] combining both (bytes in, events out);
//! - [`error`]: stable [`ErrorCode`]s, HTTP status/body → [`WireError`]
//!   ([`map_http_error`]), [`redact`];
//! - [`retry_after`]: `Retry-After` (seconds or HTTP-date) → milliseconds;
//! - [`adapter`]: the adapter itself — configuration ([`AdapterConfig`],
//!   [`Settings`]), the request/response exchange over a [`Transport`] and
//!   the pull-based [`Completion`] with its idle timeout — so the two
//!   components share it instead of copying it;
//! - `component` (feature `component`): the conversion to and from the
//!   SDK's WIT types and the `wasi:http/outgoing-handler` transport; a
//!   component is then `info()` plus three one-line calls.
//!
//! A component's `next()` typically looks like:
//!
//! ```
//! use wharf_llm_wire::{Event, StreamDecoder};
//!
//! let mut decoder = StreamDecoder::new();
//! let mut events = Vec::new();
//! for bytes in [&b"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n"[..], b"\ndata: [DONE]\n\n"] {
//!     let out = decoder.feed(bytes)?; // reset the idle timer if out.comments > 0
//!     events.extend(out.events);
//! }
//! events.extend(decoder.finish()?.events); // at EOF; STREAM_CLOSED without [DONE]
//! assert_eq!(events[0], Event::Text("Hi".into()));
//! # Ok::<(), wharf_llm_wire::WireError>(())
//! ```

pub mod adapter;
mod chunk;
#[cfg(feature = "component")]
pub mod component;
pub mod error;
pub mod request;
pub mod retry_after;
pub mod sse;
pub mod stream;

pub use adapter::{AdapterConfig, Completion, Flavor, ResponseBody, Settings, Transport};
pub use error::{ErrorBody, ErrorCode, WireError, is_context_overflow, map_http_error, map_stream_error, redact};
pub use request::{
    BODY_CACHE_MAX_BYTES, BodyCache, BuildError, ChatRequest, Config, Dialect, Image, MaxTokensField, Message,
    ReasoningEffort, Request, Role, ToolCall, ToolSpec, build_request, build_request_json, is_valid_tool_name,
};
pub use retry_after::{parse_http_date, parse_retry_after};
pub use sse::{SseError, SseEvent, SseParser};
pub use stream::{Decoded, Event, FinishReason, StreamAssembler, StreamDecoder, Usage, decode_all};
