//! Turning streamed `chat.completion.chunk`s into adapter events.
//!
//! [`StreamAssembler`] consumes parsed SSE items (or chunk JSON directly) and
//! yields [`Event`]s in this order:
//!
//! 1. `Reasoning` / `Text` as their deltas arrive (empty deltas are skipped);
//! 2. at `data: [DONE]`: every complete `ToolCall` — fragments joined per
//!    `index`, in index order (a fragment carrying a *different* id at an
//!    index already in use closes the earlier call, which then comes first);
//!    then `Usage` (the last usage seen, normally the usage-only final chunk
//!    with `choices: []`); then `Finish`.
//!
//! Tool calls are held back until `[DONE]` because arguments are only known
//! to be complete then, and parallel calls may interleave.
//!
//! Finish mapping: `stop` → `Stop`, `tool_calls`/`function_call` →
//! `ToolCalls`, `length` → `MaxTokens`, `content_filter` → `ContentFilter`,
//! `insufficient_system_resource` → `Retryable`; no finish reason → `Stop`;
//! `Stop` with tool calls → `ToolCalls` (some servers say `stop`). Any other
//! reason → `MALFORMED_RESPONSE`.
//!
//! Errors: unparseable chunk JSON (or a chunk that is not an object) →
//! `MALFORMED_RESPONSE`; an `error` object in the stream (or an SSE
//! `event: error`) → mapped by [`map_stream_error`]; end of input without
//! `[DONE]` → `STREAM_CLOSED`; `[DONE]` with neither text nor tool calls and
//! a `stop`/absent finish reason → `EMPTY_RESPONSE` (a `length`,
//! `content_filter` or `insufficient_system_resource` finish is reported as
//! such instead). A tool call without a name → `MALFORMED_RESPONSE`; one
//! without an id gets `call_<index>`. After the first error the assembler is
//! finished and yields nothing more.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde_json::Value;

use crate::chunk::{Chunk, Fragment};
use crate::error::{ErrorBody, ErrorCode, WireError, map_stream_error, truncate_chars};
use crate::request::ToolCall;
use crate::sse::{SseEvent, SseParser};

/// Token accounting (WIT `llm.usage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// `prompt_tokens`.
    pub prompt_tokens: u64,
    /// `completion_tokens`.
    pub completion_tokens: u64,
    /// `prompt_cache_hit_tokens` (DeepSeek) or
    /// `prompt_tokens_details.cached_tokens` (OpenAI).
    pub cache_hit_tokens: u64,
    /// `prompt_cache_miss_tokens` (DeepSeek), else prompt minus hits.
    pub cache_miss_tokens: u64,
    /// `completion_tokens_details.reasoning_tokens`.
    pub reasoning_tokens: u64,
}

impl Usage {
    /// Reads a `usage` object; `None` if `value` is not an object.
    pub fn from_value(value: &Value) -> Option<Self> {
        let obj = value.as_object()?;
        let num = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
        let prompt = num(obj.get("prompt_tokens"));
        let ds_hit = obj.get("prompt_cache_hit_tokens").and_then(Value::as_u64);
        let oa_hit = obj.get("prompt_tokens_details").and_then(|d| d.get("cached_tokens")).and_then(Value::as_u64);
        let hit = ds_hit.or(oa_hit).unwrap_or(0);
        let miss =
            obj.get("prompt_cache_miss_tokens").and_then(Value::as_u64).unwrap_or_else(|| prompt.saturating_sub(hit));
        Some(Self {
            prompt_tokens: prompt,
            completion_tokens: num(obj.get("completion_tokens")),
            cache_hit_tokens: hit,
            cache_miss_tokens: miss,
            reasoning_tokens: num(obj.get("completion_tokens_details").and_then(|d| d.get("reasoning_tokens"))),
        })
    }
}

/// Why the model stopped (WIT `llm.finish-reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FinishReason {
    /// Natural end.
    Stop,
    /// The model wants tool results.
    ToolCalls,
    /// The output cap was reached.
    MaxTokens,
    /// The provider filtered the output.
    ContentFilter,
    /// The provider ran out of capacity; retry.
    Retryable,
}

impl FinishReason {
    /// Maps a wire `finish_reason`; `None` for unknown values.
    pub fn from_wire(value: &str) -> Option<Self> {
        match value {
            "stop" => Some(Self::Stop),
            "tool_calls" | "function_call" => Some(Self::ToolCalls),
            "length" => Some(Self::MaxTokens),
            "content_filter" => Some(Self::ContentFilter),
            "insufficient_system_resource" => Some(Self::Retryable),
            _ => None,
        }
    }
}

/// One adapter event (WIT `llm.event`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Visible text delta.
    Text(String),
    /// Reasoning delta.
    Reasoning(String),
    /// A complete tool call.
    ToolCall(ToolCall),
    /// Token usage.
    Usage(Usage),
    /// End of the turn.
    Finish(FinishReason),
}

#[derive(Debug, Clone, Default)]
struct PartialCall {
    id: Option<String>,
    name: Option<String>,
    arguments: String,
}

/// The stream state machine. See the module docs.
#[derive(Debug, Clone, Default)]
pub struct StreamAssembler {
    calls: BTreeMap<u64, PartialCall>,
    closed_calls: Vec<(u64, PartialCall)>,
    saw_text: bool,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    done: bool,
    failed: bool,
    /// Read every chunk through a `serde_json::Value` (tests compare the
    /// two readers).
    generic_only: bool,
}

impl StreamAssembler {
    /// A fresh assembler.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `[DONE]` was seen or an error ended the stream.
    pub fn is_finished(&self) -> bool {
        self.done || self.failed
    }

    /// Handles one parsed SSE item. Comments yield nothing.
    pub fn push_sse(&mut self, event: &SseEvent) -> Result<Vec<Event>, WireError> {
        let mut out = Vec::new();
        self.push_sse_into(event, &mut out)?;
        Ok(out)
    }

    /// Like [`push_sse`](Self::push_sse), appending to `out`.
    pub fn push_sse_into(&mut self, event: &SseEvent, out: &mut Vec<Event>) -> Result<(), WireError> {
        if self.is_finished() {
            return Ok(());
        }
        match event {
            SseEvent::Comment(_) => Ok(()),
            SseEvent::Done => self.guard(|s| s.done_into(out)),
            SseEvent::Message { event: Some(name), data } if name == "error" => {
                let body = serde_json::from_str::<Value>(data)
                    .ok()
                    .and_then(|v| ErrorBody::from_value(&v))
                    .unwrap_or(ErrorBody { message: Some(data.clone()), ..ErrorBody::default() });
                self.failed = true;
                Err(map_stream_error(&body))
            }
            SseEvent::Message { data, .. } => self.push_chunk_into(data, out),
        }
    }

    /// Handles one chunk's JSON text (the `data` of an SSE event).
    pub fn push_chunk_into(&mut self, data: &str, out: &mut Vec<Event>) -> Result<(), WireError> {
        if self.is_finished() {
            return Ok(());
        }
        self.guard(|s| {
            // The common chunk is read typed; anything unusual goes through
            // a `Value`, which decides (see `crate::chunk`).
            if !s.generic_only
                && let Some(chunk) = Chunk::parse_typed(data)
            {
                s.apply(chunk, out);
                return Ok(());
            }
            let value: Value = serde_json::from_str(data).map_err(|e| {
                WireError::new(
                    ErrorCode::MalformedResponse,
                    format!("bad chunk JSON ({e}): {}", truncate_chars(data, 200)),
                )
            })?;
            s.apply(Chunk::from_value(&value)?, out);
            Ok(())
        })
    }

    /// Handles one parsed chunk.
    pub fn push_value_into(&mut self, chunk: &Value, out: &mut Vec<Event>) -> Result<(), WireError> {
        if self.is_finished() {
            return Ok(());
        }
        self.guard(|s| {
            s.apply(Chunk::from_value(chunk)?, out);
            Ok(())
        })
    }

    /// Ends the input. Without a prior `[DONE]` this is `STREAM_CLOSED`
    /// (text already yielded stays valid as a prefix).
    pub fn finish(&mut self) -> Result<Vec<Event>, WireError> {
        if self.is_finished() {
            return Ok(Vec::new());
        }
        self.failed = true;
        Err(WireError::new(ErrorCode::StreamClosed, "stream ended without [DONE]"))
    }

    fn guard<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T, WireError>) -> Result<T, WireError> {
        let r = f(self);
        if r.is_err() {
            self.failed = true;
        }
        r
    }

    fn apply(&mut self, chunk: Chunk<'_>, out: &mut Vec<Event>) {
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage);
        }
        for choice in chunk.choices {
            if let Some(r) = choice.reasoning.filter(|r| !r.is_empty()) {
                out.push(Event::Reasoning(r.into_owned()));
            }
            if let Some(t) = choice.content.filter(|t| !t.is_empty()) {
                self.saw_text = true;
                out.push(Event::Text(t.into_owned()));
            }
            for frag in choice.fragments {
                self.fragment(frag);
            }
            if let Some(r) = choice.finish_reason {
                self.finish_reason = Some(r.into_owned());
            }
        }
    }

    fn fragment(&mut self, frag: Fragment<'_>) {
        let Fragment { index, id, name, arguments } = frag;
        let id = id.filter(|s| !s.is_empty());
        let name = name.filter(|s| !s.is_empty());
        // A different id at an index in use starts a new call.
        if let (Some(new_id), Some(existing)) = (id.as_deref(), self.calls.get(&index))
            && existing.id.as_deref().is_some_and(|old| old != new_id)
            && let Some(prev) = self.calls.remove(&index)
        {
            self.closed_calls.push((index, prev));
        }
        let call = self.calls.entry(index).or_default();
        if call.id.is_none() {
            call.id = id.map(Cow::into_owned);
        }
        if call.name.is_none() {
            call.name = name.map(Cow::into_owned);
        }
        if let Some(a) = arguments {
            call.arguments.push_str(&a);
        }
    }

    fn done_into(&mut self, out: &mut Vec<Event>) -> Result<(), WireError> {
        let mut calls = std::mem::take(&mut self.closed_calls);
        calls.extend(std::mem::take(&mut self.calls));
        let mut complete = Vec::with_capacity(calls.len());
        for (index, c) in calls {
            let Some(name) = c.name else {
                return Err(malformed(&format!("tool call at index {index} has no name")));
            };
            complete.push(ToolCall {
                id: c.id.unwrap_or_else(|| format!("call_{index}")),
                name,
                arguments: c.arguments,
            });
        }
        let reason = match self.finish_reason.as_deref() {
            None => FinishReason::Stop,
            Some(r) => FinishReason::from_wire(r)
                .ok_or_else(|| malformed(&format!("unknown finish_reason {:?}", truncate_chars(r, 64))))?,
        };
        let reason = match reason {
            FinishReason::Stop if !complete.is_empty() => FinishReason::ToolCalls,
            r => r,
        };
        if !self.saw_text && complete.is_empty() && reason == FinishReason::Stop {
            return Err(WireError::new(ErrorCode::EmptyResponse, "the model returned neither text nor tool calls"));
        }
        self.done = true;
        out.extend(complete.into_iter().map(Event::ToolCall));
        if let Some(u) = self.usage {
            out.push(Event::Usage(u));
        }
        out.push(Event::Finish(reason));
        Ok(())
    }
}

fn malformed(msg: &str) -> WireError {
    WireError::new(ErrorCode::MalformedResponse, msg.to_string())
}

/// What one [`StreamDecoder::feed`] produced.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Decoded {
    /// Adapter events, in order.
    pub events: Vec<Event>,
    /// SSE comment lines seen (keep-alives): reset the idle timer when > 0.
    pub comments: usize,
    /// Whether the stream is complete (`[DONE]` processed).
    pub done: bool,
}

/// [`SseParser`] and [`StreamAssembler`] together: bytes in, events out.
#[derive(Debug, Clone, Default)]
pub struct StreamDecoder {
    parser: SseParser,
    assembler: StreamAssembler,
}

impl StreamDecoder {
    /// A fresh decoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// A decoder whose SSE parser caps one event at `max_event_bytes`.
    pub fn with_max_event_bytes(max_event_bytes: usize) -> Self {
        Self { parser: SseParser::with_max_event_bytes(max_event_bytes), assembler: StreamAssembler::new() }
    }

    /// Like [`with_max_event_bytes`](Self::with_max_event_bytes), reading
    /// every chunk through a `serde_json::Value` instead of the typed reader
    /// first: the fuzz target checks that both decode alike.
    #[doc(hidden)]
    pub fn generic_only(max_event_bytes: usize) -> Self {
        let mut d = Self::with_max_event_bytes(max_event_bytes);
        d.assembler.generic_only = true;
        d
    }

    /// Whether the stream is complete or failed.
    pub fn is_finished(&self) -> bool {
        self.assembler.is_finished()
    }

    /// Feeds response body bytes.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Decoded, WireError> {
        let mut decoded = Decoded::default();
        if self.is_finished() {
            decoded.done = self.assembler.done;
            return Ok(decoded);
        }
        // Items parsed before a parse error still count, so the outcome does
        // not depend on where the body was split (an earlier error event or
        // `[DONE]` wins over a later oversized line).
        let mut items = Vec::new();
        let parsed = self.parser.feed_into(bytes, &mut items);
        self.process(&items, &mut decoded)?;
        if let Err(e) = parsed
            && !self.is_finished()
        {
            self.assembler.failed = true;
            return Err(WireError::from(e));
        }
        Ok(decoded)
    }

    /// Ends the input (the connection closed cleanly). `STREAM_CLOSED`
    /// unless `[DONE]` was seen.
    pub fn finish(&mut self) -> Result<Decoded, WireError> {
        let mut decoded = Decoded::default();
        if !self.is_finished() {
            let items = self.parser.finish();
            self.process(&items, &mut decoded)?;
        }
        decoded.events.extend(self.assembler.finish()?);
        decoded.done = self.assembler.done;
        Ok(decoded)
    }

    fn process(&mut self, items: &[SseEvent], decoded: &mut Decoded) -> Result<(), WireError> {
        for item in items {
            if matches!(item, SseEvent::Comment(_)) {
                decoded.comments += 1;
            }
            self.assembler.push_sse_into(item, &mut decoded.events)?;
        }
        decoded.done = self.assembler.done;
        Ok(())
    }
}

/// Decodes a whole response body at once (tests, non-streaming callers).
pub fn decode_all(body: &[u8]) -> Result<Vec<Event>, WireError> {
    let mut d = StreamDecoder::new();
    let mut events = d.feed(body)?.events;
    events.extend(d.finish()?.events);
    Ok(events)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use serde_json::json;

    fn sse(chunks: &[Value], done: bool) -> String {
        let mut s = String::new();
        for c in chunks {
            s.push_str(&format!("data: {c}\n\n"));
        }
        if done {
            s.push_str("data: [DONE]\n\n");
        }
        s
    }

    fn delta(d: Value) -> Value {
        json!({"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": d, "finish_reason": null}], "usage": null})
    }

    fn finish(reason: &str) -> Value {
        json!({"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
    }

    fn usage_chunk() -> Value {
        json!({"id": "x", "choices": [], "usage": {
            "prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
            "prompt_cache_hit_tokens": 60, "prompt_cache_miss_tokens": 40,
            "completion_tokens_details": {"reasoning_tokens": 7}}})
    }

    fn tc(index: u64, id: Option<&str>, name: Option<&str>, args: &str) -> Value {
        let mut f = json!({"arguments": args});
        if let Some(n) = name {
            f["name"] = json!(n);
        }
        let mut c = json!({"index": index, "function": f});
        if let Some(id) = id {
            c["id"] = json!(id);
            c["type"] = json!("function");
        }
        delta(json!({"tool_calls": [c]}))
    }

    #[test]
    fn text_and_reasoning_stream() {
        let body = sse(
            &[
                delta(json!({"role": "assistant", "content": null, "reasoning_content": ""})),
                delta(json!({"reasoning_content": "Think"})),
                delta(json!({"reasoning_content": "ing.", "content": null})),
                delta(json!({"content": "Hel"})),
                delta(json!({"content": "lo"})),
                finish("stop"),
                usage_chunk(),
            ],
            true,
        );
        assert_eq!(
            decode_all(body.as_bytes()).unwrap(),
            vec![
                Event::Reasoning("Think".into()),
                Event::Reasoning("ing.".into()),
                Event::Text("Hel".into()),
                Event::Text("lo".into()),
                Event::Usage(Usage {
                    prompt_tokens: 100,
                    completion_tokens: 20,
                    cache_hit_tokens: 60,
                    cache_miss_tokens: 40,
                    reasoning_tokens: 7
                }),
                Event::Finish(FinishReason::Stop),
            ]
        );
    }

    #[test]
    fn interleaved_parallel_tool_calls() {
        let body = sse(
            &[
                delta(json!({"reasoning_content": "two reads"})),
                tc(0, Some("call_a"), Some("read"), ""),
                tc(1, Some("call_b"), Some("grep"), ""),
                tc(0, None, None, "{\"pa"),
                tc(1, None, None, "{\"pattern\":"),
                tc(0, None, None, "th\":\"a.t"),
                tc(1, None, None, "\"fo\\u00e9\"}"),
                tc(0, None, None, "xt\"}"),
                finish("tool_calls"),
                usage_chunk(),
            ],
            true,
        );
        let events = decode_all(body.as_bytes()).unwrap();
        assert_eq!(events[0], Event::Reasoning("two reads".into()));
        assert_eq!(
            events[1],
            Event::ToolCall(ToolCall {
                id: "call_a".into(),
                name: "read".into(),
                arguments: r#"{"path":"a.txt"}"#.into()
            })
        );
        assert_eq!(
            events[2],
            Event::ToolCall(ToolCall {
                id: "call_b".into(),
                name: "grep".into(),
                arguments: r#"{"pattern":"fo\u00e9"}"#.into()
            })
        );
        assert!(matches!(events[3], Event::Usage(_)));
        assert_eq!(events[4], Event::Finish(FinishReason::ToolCalls));
        assert_eq!(events.len(), 5);
    }

    #[test]
    fn several_calls_in_one_delta_without_index() {
        let d = delta(json!({"tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "x", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "y", "arguments": "{}"}}
        ]}));
        let events = decode_all(sse(&[d, finish("stop")], true).as_bytes()).unwrap();
        assert_eq!(events.len(), 3);
        assert_eq!(events[2], Event::Finish(FinishReason::ToolCalls));
    }

    #[test]
    fn new_id_at_same_index_closes_previous_call() {
        let body = sse(
            &[tc(0, Some("a"), Some("x"), "{}"), tc(0, Some("b"), Some("y"), "{\"k\":1}"), finish("tool_calls")],
            true,
        );
        let events = decode_all(body.as_bytes()).unwrap();
        let names: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                Event::ToolCall(c) => Some((c.id.as_str(), c.name.as_str(), c.arguments.as_str())),
                _ => None,
            })
            .collect();
        assert_eq!(names, vec![("a", "x", "{}"), ("b", "y", "{\"k\":1}")]);
    }

    #[test]
    fn missing_id_is_synthesized_missing_name_is_malformed() {
        let body = sse(&[tc(3, None, Some("x"), "{}"), finish("tool_calls")], true);
        let events = decode_all(body.as_bytes()).unwrap();
        assert!(matches!(&events[0], Event::ToolCall(c) if c.id == "call_3"));
        let body = sse(&[tc(0, Some("a"), None, "{}"), finish("tool_calls")], true);
        assert_eq!(decode_all(body.as_bytes()).unwrap_err().code, ErrorCode::MalformedResponse);
    }

    #[test]
    fn finish_reasons() {
        let cases = [
            ("stop", FinishReason::Stop),
            ("length", FinishReason::MaxTokens),
            ("content_filter", FinishReason::ContentFilter),
            ("insufficient_system_resource", FinishReason::Retryable),
            ("tool_calls", FinishReason::ToolCalls),
        ];
        for (wire, want) in cases {
            let body = sse(&[delta(json!({"content": "x"})), finish(wire)], true);
            assert_eq!(decode_all(body.as_bytes()).unwrap().last(), Some(&Event::Finish(want)), "{wire}");
        }
        let body = sse(&[delta(json!({"content": "x"})), finish(""), finish("length"), finish("")], true);
        assert_eq!(decode_all(body.as_bytes()).unwrap().last(), Some(&Event::Finish(FinishReason::MaxTokens)));
        let body = sse(&[delta(json!({"content": "x"})), finish("weird")], true);
        assert_eq!(decode_all(body.as_bytes()).unwrap_err().code, ErrorCode::MalformedResponse);
        // No finish reason at all: stop.
        let body = sse(&[delta(json!({"content": "x"}))], true);
        assert_eq!(decode_all(body.as_bytes()).unwrap().last(), Some(&Event::Finish(FinishReason::Stop)));
    }

    #[test]
    fn empty_response() {
        let body = sse(&[delta(json!({"role": "assistant", "content": ""})), finish("stop"), usage_chunk()], true);
        assert_eq!(decode_all(body.as_bytes()).unwrap_err().code, ErrorCode::EmptyResponse);
        // Reasoning only, then stop: still empty.
        let body = sse(&[delta(json!({"reasoning_content": "hmm"})), finish("stop")], true);
        assert_eq!(decode_all(body.as_bytes()).unwrap_err().code, ErrorCode::EmptyResponse);
        // Reasoning only, cut by the cap: reported as max tokens.
        let body = sse(&[delta(json!({"reasoning_content": "hmm"})), finish("length")], true);
        assert_eq!(decode_all(body.as_bytes()).unwrap().last(), Some(&Event::Finish(FinishReason::MaxTokens)));
        let body = sse(&[finish("insufficient_system_resource")], true);
        assert_eq!(decode_all(body.as_bytes()).unwrap(), vec![Event::Finish(FinishReason::Retryable)]);
        assert_eq!(decode_all(b"data: [DONE]\n\n").unwrap_err().code, ErrorCode::EmptyResponse);
    }

    #[test]
    fn missing_done_is_stream_closed_after_prefix() {
        let body = sse(&[delta(json!({"content": "partial"})), finish("stop")], false);
        let mut d = StreamDecoder::new();
        assert_eq!(d.feed(body.as_bytes()).unwrap().events, vec![Event::Text("partial".into())]);
        assert_eq!(d.finish().unwrap_err().code, ErrorCode::StreamClosed);
        // Totally empty body too.
        assert_eq!(decode_all(b"").unwrap_err().code, ErrorCode::StreamClosed);
    }

    #[test]
    fn malformed_chunks() {
        for bad in [
            "{\"choices\":[{\"delta\":{\"content\":\"oops\"",
            "[1,2]",
            "{\"choices\":{}}",
            "{\"choices\":[{\"delta\":{\"content\":5}}]}",
        ] {
            let body = format!("data: {bad}\n\ndata: [DONE]\n\n");
            assert_eq!(decode_all(body.as_bytes()).unwrap_err().code, ErrorCode::MalformedResponse, "{bad}");
        }
    }

    #[test]
    fn error_inside_stream() {
        let body = format!(
            "{}data: {}\n\n",
            sse(&[delta(json!({"content": "a"}))], false),
            json!({"error": {"message": "Rate limit reached", "type": "rate_limit_error", "code": "rate_limit_exceeded"}})
        );
        let mut d = StreamDecoder::new();
        let e = d.feed(body.as_bytes()).unwrap_err();
        assert_eq!(e.code, ErrorCode::RateLimit);
        assert!(e.message.contains("Rate limit reached"));
        // Finished after an error: no STREAM_CLOSED on top.
        assert_eq!(d.finish().unwrap(), Decoded::default());

        let body = "event: error\ndata: {\"error\":{\"message\":\"overloaded\",\"code\":503}}\n\n";
        assert_eq!(decode_all(body.as_bytes()).unwrap_err().code, ErrorCode::Server);
        let body = "event: error\ndata: plain text\n\n";
        assert_eq!(decode_all(body.as_bytes()).unwrap_err().message, "stream error: plain text");
    }

    #[test]
    fn keepalive_comments_are_counted() {
        let mut d = StreamDecoder::new();
        let r = d.feed(b": keep-alive\n\n: keep-alive\n\n").unwrap();
        assert_eq!((r.comments, r.events.len(), r.done), (2, 0, false));
        let body = sse(&[delta(json!({"content": "x"}))], true);
        let r = d.feed(body.as_bytes()).unwrap();
        assert!(r.done);
        assert!(d.is_finished());
        // Data after [DONE] is ignored.
        assert_eq!(d.feed(b"data: {\"bad\n\n").unwrap().events, vec![]);
        assert!(d.finish().unwrap().done);
    }

    #[test]
    fn openai_usage_shape() {
        let u = Usage::from_value(&json!({
            "prompt_tokens": 50, "completion_tokens": 9,
            "prompt_tokens_details": {"cached_tokens": 30},
            "completion_tokens_details": {"reasoning_tokens": 4}
        }))
        .unwrap();
        assert_eq!(
            u,
            Usage {
                prompt_tokens: 50,
                completion_tokens: 9,
                cache_hit_tokens: 30,
                cache_miss_tokens: 20,
                reasoning_tokens: 4
            }
        );
        assert_eq!(Usage::from_value(&Value::Null), None);
    }

    #[test]
    fn usage_with_finish_chunk_also_counts() {
        let mut f = finish("stop");
        f["usage"] = json!({"prompt_tokens": 1, "completion_tokens": 2});
        let events = decode_all(sse(&[delta(json!({"content": "x"})), f], true).as_bytes()).unwrap();
        assert_eq!(
            events[1],
            Event::Usage(Usage { prompt_tokens: 1, completion_tokens: 2, cache_miss_tokens: 1, ..Usage::default() })
        );
    }

    #[test]
    fn oversized_event_is_malformed() {
        let mut d = StreamDecoder::with_max_event_bytes(16);
        assert_eq!(d.feed(&[b'a'; 40]).unwrap_err().code, ErrorCode::MalformedResponse);
        assert!(d.is_finished());
    }

    /// Found by the `sse` fuzz target: an error event followed, in the same
    /// read, by an oversized line must end the stream as the error event
    /// does when the two arrive in separate reads.
    #[test]
    fn an_earlier_error_event_wins_over_a_later_oversized_line_in_one_read() {
        let body = [&b"event: error\ndata: {\"error\":{\"message\":\"boom\"}}\n\n"[..], &[b'x'; 200]].concat();
        let mut whole = StreamDecoder::with_max_event_bytes(64);
        let mut split = StreamDecoder::with_max_event_bytes(64);
        let split_code = split.feed(&body[..49]).and_then(|_| split.feed(&body[49..])).unwrap_err().code;
        assert_eq!(whole.feed(&body).unwrap_err().code, split_code);
        assert_ne!(split_code, ErrorCode::MalformedResponse);
    }
}
