//! Messages API server-sent events → adapter events.
//!
//! `message_start` (input usage), `content_block_start` / `_delta` /
//! `_stop` (`text_delta` → text, `thinking_delta` → reasoning,
//! `signature_delta` kept, `input_json_delta` joined into the call's
//! arguments, emitted at the block's stop), `message_delta` (stop reason,
//! output usage), `message_stop` (usage, finish; the turn's thinking
//! blocks kept for the next request), `ping` (nothing; it resets the idle
//! timer), `error` (mapped like an HTTP error of that type). The text of
//! two thinking blocks in one turn is joined with a blank line.
//!
//! Usage: `prompt_tokens` = `input_tokens` + `cache_read_input_tokens` +
//! `cache_creation_input_tokens` (every prompt token, as the other
//! adapters report it); `cache_hit_tokens` = cache reads;
//! `cache_miss_tokens` = the rest (uncached input and cache writes);
//! `completion_tokens` = `output_tokens` (thinking included: the API does
//! not report reasoning tokens apart, so `reasoning_tokens` is 0).

use serde_json::Value;
use wharf_llm_wire::{ErrorCode, Event, FinishReason, SseEvent, SseParser, ToolCall, Usage, WireError};

use crate::errors::map_error_object;
use crate::thinking::{self, Block, MAX_SIGNATURE_BYTES};

/// Largest tool-call argument text accepted, bytes.
pub const MAX_TOOL_INPUT_BYTES: usize = 4 << 20;
/// Largest SSE event accepted, bytes.
pub const MAX_EVENT_BYTES: usize = 8 << 20;

enum Open {
    Text,
    Thinking { text: String, signature: String },
    Redacted { data: String },
    ToolUse { id: String, name: String, json: String },
    Other,
}

/// Decodes one response stream.
pub struct Decoder {
    parser: SseParser,
    blocks: Vec<(u64, Open)>,
    kept: Vec<Block>,
    tool_ids: Vec<String>,
    reasoning: String,
    thinking_blocks: usize,
    input: u64,
    cache_read: u64,
    cache_write: u64,
    output: u64,
    stop_reason: Option<String>,
    done: bool,
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new()
    }
}

/// What one feed produced.
#[derive(Debug, Default)]
pub struct Decoded {
    /// Events, in order.
    pub events: Vec<Event>,
    /// Whether anything at all (a ping included) arrived.
    pub activity: bool,
    /// `message_stop` was seen.
    pub done: bool,
}

fn malformed(m: impl std::fmt::Display) -> WireError {
    WireError::new(ErrorCode::MalformedResponse, format!("Messages stream: {m}"))
}

fn u(v: &Value, k: &str) -> Option<u64> {
    v.get(k).and_then(Value::as_u64)
}

impl Decoder {
    /// A decoder for one response.
    pub fn new() -> Self {
        Self {
            parser: SseParser::with_max_event_bytes(MAX_EVENT_BYTES),
            blocks: Vec::new(),
            kept: Vec::new(),
            tool_ids: Vec::new(),
            reasoning: String::new(),
            thinking_blocks: 0,
            input: 0,
            cache_read: 0,
            cache_write: 0,
            output: 0,
            stop_reason: None,
            done: false,
        }
    }

    /// Feeds bytes.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Decoded, WireError> {
        let items = self.parser.feed(bytes)?;
        self.handle(items, !bytes.is_empty())
    }

    /// At EOF: the rest, or `STREAM_CLOSED` when `message_stop` never came.
    pub fn finish(&mut self) -> Result<Decoded, WireError> {
        let items = self.parser.finish();
        let out = self.handle(items, false)?;
        if !self.done {
            return Err(WireError::new(ErrorCode::StreamClosed, "the stream ended before message_stop"));
        }
        Ok(out)
    }

    fn handle(&mut self, items: Vec<SseEvent>, activity: bool) -> Result<Decoded, WireError> {
        let mut out = Decoded { activity, ..Decoded::default() };
        for item in items {
            if self.done {
                break;
            }
            let SseEvent::Message { data, .. } = item else { continue };
            let v: Value = serde_json::from_str(&data).map_err(|e| malformed(format!("bad JSON: {e}")))?;
            self.event(&v, &mut out.events)?;
        }
        out.done = self.done;
        Ok(out)
    }

    fn usage(&mut self, usage: &Value) {
        if let Some(n) = u(usage, "input_tokens") {
            self.input = n;
        }
        if let Some(n) = u(usage, "cache_read_input_tokens") {
            self.cache_read = n;
        }
        if let Some(n) = u(usage, "cache_creation_input_tokens") {
            self.cache_write = n;
        }
        if let Some(n) = u(usage, "output_tokens") {
            self.output = n;
        }
    }

    fn block(&mut self, index: u64) -> Option<&mut Open> {
        self.blocks.iter_mut().find(|(i, _)| *i == index).map(|(_, b)| b)
    }

    fn event(&mut self, v: &Value, out: &mut Vec<Event>) -> Result<(), WireError> {
        let kind = v.get("type").and_then(Value::as_str).unwrap_or("");
        let index = u(v, "index").unwrap_or(0);
        match kind {
            "message_start" => {
                if let Some(usage) = v.pointer("/message/usage") {
                    self.usage(usage);
                }
            }
            "content_block_start" => {
                let b = v.get("content_block").unwrap_or(&Value::Null);
                let text = |k: &str| b.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                let open = match b.get("type").and_then(Value::as_str).unwrap_or("") {
                    "text" => {
                        let t = text("text");
                        if !t.is_empty() {
                            out.push(Event::Text(t));
                        }
                        Open::Text
                    }
                    "thinking" => {
                        let t = text("thinking");
                        self.thinking_start(out);
                        if !t.is_empty() {
                            self.reasoning_delta(&t, out);
                        }
                        Open::Thinking { text: t, signature: text("signature") }
                    }
                    "redacted_thinking" => Open::Redacted { data: text("data") },
                    "tool_use" => Open::ToolUse { id: text("id"), name: text("name"), json: String::new() },
                    _ => Open::Other,
                };
                self.blocks.push((index, open));
            }
            "content_block_delta" => {
                let d = v.get("delta").unwrap_or(&Value::Null);
                let s = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or("");
                match d.get("type").and_then(Value::as_str).unwrap_or("") {
                    "text_delta" if !s("text").is_empty() => out.push(Event::Text(s("text").to_string())),
                    "thinking_delta" => {
                        let t = s("thinking").to_string();
                        if let Some(Open::Thinking { text, .. }) = self.block(index) {
                            text.push_str(&t);
                        }
                        self.reasoning_delta(&t, out);
                    }
                    "signature_delta" => {
                        let sig = s("signature").to_string();
                        if let Some(Open::Thinking { signature, .. }) = self.block(index) {
                            if signature.len() + sig.len() > MAX_SIGNATURE_BYTES {
                                return Err(malformed(format!("thinking signature over {MAX_SIGNATURE_BYTES} bytes")));
                            }
                            signature.push_str(&sig);
                        }
                    }
                    "input_json_delta" => {
                        let part = s("partial_json").to_string();
                        if let Some(Open::ToolUse { json, .. }) = self.block(index) {
                            if json.len() + part.len() > MAX_TOOL_INPUT_BYTES {
                                return Err(malformed(format!("tool input over {MAX_TOOL_INPUT_BYTES} bytes")));
                            }
                            json.push_str(&part);
                        }
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                let Some(pos) = self.blocks.iter().position(|(i, _)| *i == index) else { return Ok(()) };
                match self.blocks.remove(pos).1 {
                    Open::Thinking { text, signature } => {
                        self.kept.push(Block::Thinking { thinking: text, signature });
                    }
                    Open::Redacted { data } => self.kept.push(Block::RedactedThinking { data }),
                    Open::ToolUse { id, name, json } => {
                        let arguments = if json.trim().is_empty() { "{}".to_string() } else { json };
                        self.tool_ids.push(id.clone());
                        out.push(Event::ToolCall(ToolCall { id, name, arguments }));
                    }
                    Open::Text | Open::Other => {}
                }
            }
            "message_delta" => {
                if let Some(r) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(r.to_string());
                }
                if let Some(usage) = v.get("usage") {
                    self.usage(usage);
                }
            }
            "message_stop" => {
                self.done = true;
                out.push(Event::Usage(Usage {
                    prompt_tokens: self.input + self.cache_read + self.cache_write,
                    completion_tokens: self.output,
                    cache_hit_tokens: self.cache_read,
                    cache_miss_tokens: self.input + self.cache_write,
                    reasoning_tokens: 0,
                }));
                out.push(Event::Finish(finish_reason(self.stop_reason.as_deref())));
                thinking::save(&thinking::Record {
                    reasoning: std::mem::take(&mut self.reasoning),
                    tool_ids: std::mem::take(&mut self.tool_ids),
                    blocks: std::mem::take(&mut self.kept),
                });
            }
            "error" => {
                let e = v.get("error").unwrap_or(&Value::Null);
                return Err(map_error_object(e, None, "stream error"));
            }
            // `ping` and anything new.
            _ => {}
        }
        Ok(())
    }

    fn thinking_start(&mut self, out: &mut Vec<Event>) {
        if self.thinking_blocks > 0 && !self.reasoning.is_empty() {
            self.reasoning_delta("\n\n", out);
        }
        self.thinking_blocks += 1;
    }

    fn reasoning_delta(&mut self, t: &str, out: &mut Vec<Event>) {
        if t.is_empty() {
            return;
        }
        self.reasoning.push_str(t);
        out.push(Event::Reasoning(t.to_string()));
    }
}

/// `stop_reason` → finish reason.
pub fn finish_reason(r: Option<&str>) -> FinishReason {
    match r {
        Some("tool_use") => FinishReason::ToolCalls,
        Some("max_tokens" | "model_context_window_exceeded") => FinishReason::MaxTokens,
        Some("refusal") => FinishReason::ContentFilter,
        // end_turn, stop_sequence, pause_turn, unknown.
        _ => FinishReason::Stop,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::config::Config;
    use serde_json::json;
    use wharf_llm_wire::{Message, Request, Role, ToolCall as WireCall};

    fn sse(events: &[Value]) -> String {
        events.iter().map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap())).collect()
    }

    fn turn() -> String {
        sse(&[
            json!({"type":"message_start","message":{"usage":{"input_tokens":7,"cache_read_input_tokens":100,"cache_creation_input_tokens":20,"output_tokens":1}}}),
            json!({"type":"ping"}),
            json!({"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}),
            json!({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me "}}),
            json!({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"look."}}),
            json!({"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"SIG-1"}}),
            json!({"type":"content_block_stop","index":0}),
            json!({"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}),
            json!({"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Reading."}}),
            json!({"type":"content_block_stop","index":1}),
            json!({"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"read","input":{}}}),
            json!({"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"pa"}}),
            json!({"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"th\":\"a\"}"}}),
            json!({"type":"content_block_stop","index":2}),
            json!({"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":42}}),
            json!({"type":"message_stop"}),
        ])
    }

    #[test]
    fn a_turn_decodes_byte_by_byte_and_its_thinking_goes_back() {
        let mut d = Decoder::new();
        let mut events = Vec::new();
        for b in turn().as_bytes() {
            events.extend(d.feed(std::slice::from_ref(b)).unwrap().events);
        }
        events.extend(d.finish().unwrap().events);
        let reasoning: String =
            events.iter().filter_map(|e| if let Event::Reasoning(r) = e { Some(r.as_str()) } else { None }).collect();
        assert_eq!(reasoning, "Let me look.");
        assert!(events.contains(&Event::Text("Reading.".into())));
        assert!(events.contains(&Event::ToolCall(ToolCall {
            id: "toolu_1".into(),
            name: "read".into(),
            arguments: "{\"path\":\"a\"}".into()
        })));
        assert!(events.contains(&Event::Usage(Usage {
            prompt_tokens: 127,
            completion_tokens: 42,
            cache_hit_tokens: 100,
            cache_miss_tokens: 27,
            reasoning_tokens: 0
        })));
        assert_eq!(events.last(), Some(&Event::Finish(FinishReason::ToolCalls)));

        // The next request carries the block, signature unchanged, first.
        let s =
            Config::from_json(r#"{"model":"m","max_tokens":4096,"thinking_budget":1024}"#).unwrap().resolve().unwrap();
        let call = WireCall { id: "toolu_1".into(), name: "read".into(), arguments: "{\"path\":\"a\"}".into() };
        let req = Request {
            system: "sys".into(),
            messages: vec![
                Message::user("go"),
                Message {
                    role: Role::Assistant,
                    content: "Reading.".into(),
                    reasoning: Some("Let me look.".into()),
                    tool_calls: vec![call],
                    tool_call_id: None,
                    images: vec![],
                },
                Message {
                    role: Role::Tool,
                    content: "alpha".into(),
                    reasoning: None,
                    tool_calls: vec![],
                    tool_call_id: Some("toolu_1".into()),
                    images: vec![],
                },
            ],
            tools: vec![],
            max_tokens: None,
        };
        let body = crate::request::build(&req, &s);
        let turn = &body["messages"][1]["content"];
        assert_eq!(turn[0], json!({"type":"thinking","thinking":"Let me look.","signature":"SIG-1"}));
        assert_eq!(turn[2]["input"], json!({"path":"a"}));
        assert_eq!(body["messages"][2]["content"][0]["tool_use_id"], "toolu_1");
        assert_eq!(body["thinking"]["budget_tokens"], 1024);
        // Another reasoning text: not found, so thinking is off for the request.
        let mut other = req.clone();
        other.messages[1].reasoning = Some("something else".into());
        let body = crate::request::build(&other, &s);
        assert_eq!(body["messages"][1]["content"][0]["type"], "text");
        assert!(body.get("thinking").is_none());
    }

    #[test]
    fn errors_and_truncation() {
        let mut d = Decoder::new();
        let e = d
            .feed(b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n")
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::Server);
        let mut d = Decoder::new();
        d.feed(turn().split("message_delta").next().unwrap().as_bytes()).unwrap();
        assert_eq!(d.finish().unwrap_err().code, ErrorCode::StreamClosed);
        assert_eq!(Decoder::new().feed(b"data: {nope\n\n").unwrap_err().code, ErrorCode::MalformedResponse);
        assert_eq!(finish_reason(Some("refusal")), FinishReason::ContentFilter);
        assert_eq!(finish_reason(Some("max_tokens")), FinishReason::MaxTokens);
        assert_eq!(finish_reason(Some("end_turn")), FinishReason::Stop);
    }
}
