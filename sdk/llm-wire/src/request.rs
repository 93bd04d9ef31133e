//! Building the Chat Completions request body.
//!
//! The input types mirror the WIT records (`llm.request`, `types.message`,
//! `types.tool-spec`); a component converts its bindings into them and calls
//! [`build_request`] / [`build_request_json`].
//!
//! Rules applied (see also the crate docs):
//!
//! - a non-empty `system` becomes the first message (`role: system`);
//! - assistant messages with tool calls send `content: null` when their text
//!   is empty; assistant messages with neither text nor tool calls are
//!   dropped (providers reject them, and they carry nothing);
//! - **DeepSeek reasoning pass-back**: in the [`Dialect::DeepSeek`] dialect,
//!   every assistant message that made tool calls carries
//!   `reasoning_content` — its recorded reasoning, or `""` when none was
//!   recorded (DeepSeek answers 400 when the field is missing, including the
//!   empty-reasoning case). Assistant turns without tool calls never send it:
//!   DeepSeek ignores reasoning of plain turns, so sending it only costs
//!   bandwidth. [`Dialect::OpenAi`] never sends reasoning;
//! - tool-call arguments are sent as recorded; an empty string becomes `{}`;
//! - tool specs become `{"type":"function","function":{name, description,
//!   parameters}}`; the schema must be a JSON object and gets
//!   `"type":"object"` when it has no `type`;
//! - `stream: true` and `stream_options: {include_usage: true}` always.

use std::cell::RefCell;
use std::collections::HashMap;

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use thiserror::Error;

/// Role of a message (WIT `types.role`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// A system message.
    System,
    /// The user.
    User,
    /// The model.
    Assistant,
    /// A tool result.
    Tool,
}

/// A tool call made by the model (WIT `types.tool-call`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ToolCall {
    /// Provider-assigned id.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments as JSON text (possibly invalid if the model erred).
    pub arguments: String,
}

/// One conversation message (WIT `types.message`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Who speaks.
    pub role: Role,
    /// Text content.
    pub content: String,
    /// Reasoning of an assistant turn.
    pub reasoning: Option<String>,
    /// Tool calls of an assistant turn.
    pub tool_calls: Vec<ToolCall>,
    /// For tool messages: the id of the call answered.
    pub tool_call_id: Option<String>,
    /// Images of a user message (WIT `llm-images.image`), after its text.
    pub images: Vec<Image>,
}

/// An image of a user message: its media type and encoded bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// IANA media type (`image/png` …).
    pub mime_type: String,
    /// The encoded image.
    pub data: Vec<u8>,
}

impl Image {
    /// `data:MIME;base64,…` (Chat Completions' `image_url`).
    pub fn data_url(&self) -> String {
        format!("data:{};base64,{}", self.mime_type, self.base64())
    }

    /// The bytes in standard base64.
    pub fn base64(&self) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(&self.data)
    }
}

impl Message {
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::plain(Role::User, content.into())
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::plain(Role::System, content.into())
    }

    /// An assistant message.
    pub fn assistant(content: impl Into<String>, reasoning: Option<String>, tool_calls: Vec<ToolCall>) -> Self {
        Self {
            role: Role::Assistant,
            content: content.into(),
            reasoning,
            tool_calls,
            tool_call_id: None,
            images: Vec::new(),
        }
    }

    /// A tool result answering `call_id`.
    pub fn tool(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: Role::Tool,
            content: content.into(),
            reasoning: None,
            tool_calls: Vec::new(),
            tool_call_id: Some(call_id.into()),
            images: Vec::new(),
        }
    }

    fn plain(role: Role, content: String) -> Self {
        Self { role, content, reasoning: None, tool_calls: Vec::new(), tool_call_id: None, images: Vec::new() }
    }
}

/// A tool offered to the model (WIT `types.tool-spec`, without the
/// scheduling mode, which the provider never sees).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolSpec {
    /// Name, `[a-zA-Z0-9_-]{1,64}`.
    pub name: String,
    /// Description for the model.
    pub description: String,
    /// JSON Schema of the arguments object, as JSON text.
    pub input_schema: String,
}

/// A request for one model turn (WIT `llm.request`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Request {
    /// System prompt (may be empty).
    pub system: String,
    /// The conversation.
    pub messages: Vec<Message>,
    /// Tools the model may call.
    pub tools: Vec<ToolSpec>,
    /// Override of the configured output cap.
    pub max_tokens: Option<u32>,
}

/// Which provider flavour of Chat Completions to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Dialect {
    /// DeepSeek: `thinking`, `reasoning_content` pass-back, `max_tokens`.
    #[default]
    DeepSeek,
    /// OpenAI and compatible servers: no reasoning pass-back, no `thinking`.
    OpenAi,
}

/// Requested reasoning effort. Each dialect sends the nearest value it
/// knows (see [`ReasoningEffort::wire_value`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReasoningEffort {
    /// `minimal`.
    Minimal,
    /// `low`.
    Low,
    /// `medium`.
    Medium,
    /// `high`.
    High,
    /// `xhigh`.
    XHigh,
    /// `max` (DeepSeek's highest; also accepts `ultra`).
    Max,
}

impl ReasoningEffort {
    /// Parses a configuration value (`minimal`, `low`, `medium`, `high`,
    /// `xhigh`, `max`/`ultra`; case-insensitive).
    pub fn parse(value: &str) -> Option<Self> {
        match value.trim().to_ascii_lowercase().as_str() {
            "minimal" => Some(Self::Minimal),
            "low" => Some(Self::Low),
            "medium" => Some(Self::Medium),
            "high" => Some(Self::High),
            "xhigh" => Some(Self::XHigh),
            "max" | "ultra" => Some(Self::Max),
            _ => None,
        }
    }

    /// The value sent in `reasoning_effort`. DeepSeek knows `low`, `high`
    /// and `max` (minimal → low, medium/xhigh → high); OpenAI knows
    /// `minimal`…`xhigh` (max → xhigh).
    pub fn wire_value(self, dialect: Dialect) -> &'static str {
        match (dialect, self) {
            (Dialect::DeepSeek, Self::Minimal | Self::Low) => "low",
            (Dialect::DeepSeek, Self::Medium | Self::High | Self::XHigh) => "high",
            (Dialect::DeepSeek, Self::Max) => "max",
            (Dialect::OpenAi, Self::Minimal) => "minimal",
            (Dialect::OpenAi, Self::Low) => "low",
            (Dialect::OpenAi, Self::Medium) => "medium",
            (Dialect::OpenAi, Self::High) => "high",
            (Dialect::OpenAi, Self::XHigh | Self::Max) => "xhigh",
        }
    }
}

/// Which body field carries the output cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MaxTokensField {
    /// `max_tokens` (DeepSeek, most compatible servers).
    MaxTokens,
    /// `max_completion_tokens` (OpenAI; required by its reasoning models).
    MaxCompletionTokens,
}

/// Adapter configuration that shapes the body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Config {
    /// Model id, sent as `model`.
    pub model: String,
    /// Flavour of the API.
    pub dialect: Dialect,
    /// `Some(true)`/`Some(false)` sends DeepSeek's
    /// `thinking: {type: enabled|disabled}`; `None` leaves the provider's
    /// default. Ignored by the OpenAI dialect, except that `Some(false)`
    /// suppresses `reasoning_effort` there too.
    pub thinking: Option<bool>,
    /// `reasoning_effort`, not sent when thinking is disabled.
    pub reasoning_effort: Option<ReasoningEffort>,
    /// Default output cap (the request's `max_tokens` wins).
    pub max_tokens: Option<u32>,
    /// Field for the output cap; `None` = the dialect's default
    /// (`max_tokens` for DeepSeek, `max_completion_tokens` for OpenAI).
    pub max_tokens_field: Option<MaxTokensField>,
}

impl Config {
    /// A configuration for `model` in `dialect`, everything else default.
    pub fn new(model: impl Into<String>, dialect: Dialect) -> Self {
        Self { model: model.into(), dialect, ..Self::default() }
    }
}

/// Why a request body could not be built (the adapter reports these as
/// `INVALID_REQUEST`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BuildError {
    /// No model configured.
    #[error("no model configured")]
    MissingModel,
    /// A tool name outside `[a-zA-Z0-9_-]{1,64}`.
    #[error("invalid tool name {0:?} (must match [a-zA-Z0-9_-]{{1,64}})")]
    InvalidToolName(String),
    /// Two tools with one name.
    #[error("duplicate tool name {0:?}")]
    DuplicateTool(String),
    /// A tool schema that is not a JSON object.
    #[error("input schema of tool {tool:?} is not a JSON object: {reason}")]
    InvalidSchema {
        /// The tool.
        tool: String,
        /// What was wrong.
        reason: String,
    },
    /// A `tool` message without `tool_call_id`.
    #[error("tool message #{0} has no tool_call_id")]
    MissingToolCallId(usize),
    /// Serialization failed (not expected to happen).
    #[error("serializing the request failed: {0}")]
    Serialize(String),
}

/// `stream_options`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StreamOptions {
    /// Always `true`: usage arrives in a final chunk.
    pub include_usage: bool,
}

/// DeepSeek's `thinking` switch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Thinking {
    /// `enabled` or `disabled`.
    #[serde(rename = "type")]
    pub kind: &'static str,
}

/// `function` of a wire tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WireFunctionCall<'a> {
    /// Tool name.
    pub name: &'a str,
    /// Arguments JSON text.
    pub arguments: &'a str,
}

/// A tool call on an assistant message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WireToolCall<'a> {
    /// Call id.
    pub id: &'a str,
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The function called.
    pub function: WireFunctionCall<'a>,
}

/// One message of the body. It borrows the request's text: the history is
/// the bulk of every body, and copying it again would only touch more of a
/// fresh instance's memory before it is serialized.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireMessage<'a> {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: &'static str,
    /// Text; `None` serializes as `null` (assistant tool-call turns).
    pub content: Option<&'a str>,
    /// DeepSeek reasoning pass-back.
    pub reasoning_content: Option<&'a str>,
    /// Tool calls of an assistant message.
    pub tool_calls: Vec<WireToolCall<'a>>,
    /// The call a tool message answers.
    pub tool_call_id: Option<&'a str>,
    /// Images of a user message: with any, `content` goes out as a list of
    /// parts (a `text` part, then an `image_url` part per image, its URL a
    /// `data:` URL), as Chat Completions takes images.
    pub images: &'a [Image],
}

/// `function` of a tool definition.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WireFunction<'a> {
    /// Name.
    pub name: &'a str,
    /// Description.
    pub description: &'a str,
    /// JSON Schema object.
    pub parameters: Schema,
}

/// A tool's JSON Schema object, as the JSON text it is sent as (with
/// `type` and `properties` filled in).
#[derive(Debug, Clone)]
pub struct Schema(Box<RawValue>);

impl Schema {
    /// The JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// The schema as a JSON value.
    pub fn to_value(&self) -> Value {
        serde_json::from_str(self.0.get()).unwrap_or(Value::Null)
    }
}

impl PartialEq for Schema {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl Serialize for Schema {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

/// A tool definition.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WireTool<'a> {
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The function.
    pub function: WireFunction<'a>,
}

/// The request body. Fields serialize in declaration order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatRequest<'a> {
    /// Model id.
    pub model: String,
    /// Conversation.
    pub messages: Vec<WireMessage<'a>>,
    /// Tool definitions (omitted when empty).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<WireTool<'a>>,
    /// Always `true`.
    pub stream: bool,
    /// Always `{include_usage: true}`.
    pub stream_options: StreamOptions,
    /// Output cap, in the `max_tokens` field.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Output cap, in the `max_completion_tokens` field.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u32>,
    /// DeepSeek thinking switch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<Thinking>,
    /// Reasoning effort.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<&'static str>,
}

impl ChatRequest<'_> {
    /// The body as JSON text, written into a buffer sized up front from the
    /// text it carries (growing it by doubling would copy the body ~twice).
    ///
    /// The output is byte for byte what `serde_json::to_string(self)` gives
    /// (a test holds the two together), but the history's text is escaped
    /// eight bytes at a time: re-escaping the whole history at every step
    /// was the adapter's top function in long sessions.
    pub fn to_json(&self) -> Result<String, BuildError> {
        let mut out = Vec::with_capacity(self.estimated_json_len());
        self.write_head(&mut out);
        for (i, m) in self.messages.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            m.write_json(&mut out)?;
        }
        self.write_tail(&mut out)?;
        String::from_utf8(out).map_err(|e| BuildError::Serialize(e.to_string()))
    }

    /// The bytes before the first message: `{"model":…,"messages":[`.
    fn write_head(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"model\":");
        push_json_str(out, &self.model);
        out.extend_from_slice(b",\"messages\":[");
    }

    /// The bytes after the last message: `]`, the tools, the options, `}`.
    fn write_tail(&self, out: &mut Vec<u8>) -> Result<(), BuildError> {
        out.push(b']');
        if !self.tools.is_empty() {
            out.extend_from_slice(b",\"tools\":");
            push_list(out, &self.tools, |out, t| {
                out.extend_from_slice(b"{\"type\":");
                push_json_str(out, t.kind);
                out.extend_from_slice(b",\"function\":{\"name\":");
                push_json_str(out, t.function.name);
                out.extend_from_slice(b",\"description\":");
                push_json_str(out, t.function.description);
                out.extend_from_slice(b",\"parameters\":");
                out.extend_from_slice(t.function.parameters.get().as_bytes());
                out.extend_from_slice(b"}}");
                Ok(())
            })?;
        }
        out.extend_from_slice(if self.stream { b",\"stream\":true" } else { b",\"stream\":false" });
        out.extend_from_slice(if self.stream_options.include_usage {
            b",\"stream_options\":{\"include_usage\":true}"
        } else {
            b",\"stream_options\":{\"include_usage\":false}"
        });
        for (key, value) in [("max_tokens", self.max_tokens), ("max_completion_tokens", self.max_completion_tokens)] {
            if let Some(n) = value {
                out.extend_from_slice(format!(",\"{key}\":{n}").as_bytes());
            }
        }
        if let Some(t) = &self.thinking {
            out.extend_from_slice(b",\"thinking\":{\"type\":");
            push_json_str(out, t.kind);
            out.push(b'}');
        }
        if let Some(e) = self.reasoning_effort {
            out.extend_from_slice(b",\"reasoning_effort\":");
            push_json_str(out, e);
        }
        out.push(b'}');
        Ok(())
    }

    /// The body's size before escaping: its text plus ~1/8 for escapes and
    /// the fixed keys of each message and tool.
    fn estimated_json_len(&self) -> usize {
        let text = |s: Option<&str>| s.map_or(0, str::len);
        let messages: usize = self
            .messages
            .iter()
            .map(|m| {
                let calls: usize = m
                    .tool_calls
                    .iter()
                    .map(|c| c.id.len() + c.function.name.len() + c.function.arguments.len() + 64)
                    .sum();
                let images: usize = m.images.iter().map(|i| i.data.len() / 3 * 4 + i.mime_type.len() + 64).sum();
                text(m.content) + text(m.reasoning_content) + text(m.tool_call_id) + calls + images + 64
            })
            .sum();
        let tools: usize = self.tools.iter().map(|t| t.function.name.len() + t.function.description.len() + 512).sum();
        let raw = messages + tools + self.model.len() + 256;
        raw + raw / 8
    }
}

/// A content part of a user message with images (keys in the order the
/// fast writer uses).
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part<'a> {
    Text { text: &'a str },
    ImageUrl { image_url: PartUrl },
}

/// `image_url` of a [`Part`].
#[derive(Serialize)]
struct PartUrl {
    url: String,
}

impl Serialize for WireMessage<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("role", self.role)?;
        if self.images.is_empty() {
            map.serialize_entry("content", &self.content)?;
        } else {
            let mut parts = vec![Part::Text { text: self.content.unwrap_or_default() }];
            parts.extend(self.images.iter().map(|i| Part::ImageUrl { image_url: PartUrl { url: i.data_url() } }));
            map.serialize_entry("content", &parts)?;
        }
        if let Some(r) = self.reasoning_content {
            map.serialize_entry("reasoning_content", r)?;
        }
        if !self.tool_calls.is_empty() {
            map.serialize_entry("tool_calls", &self.tool_calls)?;
        }
        if let Some(id) = self.tool_call_id {
            map.serialize_entry("tool_call_id", id)?;
        }
        map.end()
    }
}

impl WireMessage<'_> {
    /// Appends the message as `serde_json` would serialize it.
    fn write_json(&self, out: &mut Vec<u8>) -> Result<(), BuildError> {
        out.extend_from_slice(b"{\"role\":");
        push_json_str(out, self.role);
        out.extend_from_slice(b",\"content\":");
        match self.content {
            _ if !self.images.is_empty() => {
                out.extend_from_slice(b"[{\"type\":\"text\",\"text\":");
                push_json_str(out, self.content.unwrap_or_default());
                out.push(b'}');
                for image in self.images {
                    out.extend_from_slice(b",{\"type\":\"image_url\",\"image_url\":{\"url\":");
                    // A media type and base64: nothing to escape but the
                    // type, which the host checked is a plain token.
                    push_json_str(out, &image.data_url());
                    out.extend_from_slice(b"}}");
                }
                out.push(b']');
            }
            Some(c) => push_json_str(out, c),
            None => out.extend_from_slice(b"null"),
        }
        if let Some(r) = self.reasoning_content {
            out.extend_from_slice(b",\"reasoning_content\":");
            push_json_str(out, r);
        }
        if !self.tool_calls.is_empty() {
            out.extend_from_slice(b",\"tool_calls\":");
            push_list(out, &self.tool_calls, |out, c| {
                out.extend_from_slice(b"{\"id\":");
                push_json_str(out, c.id);
                out.extend_from_slice(b",\"type\":");
                push_json_str(out, c.kind);
                out.extend_from_slice(b",\"function\":{\"name\":");
                push_json_str(out, c.function.name);
                out.extend_from_slice(b",\"arguments\":");
                push_json_str(out, c.function.arguments);
                out.extend_from_slice(b"}}");
                Ok(())
            })?;
        }
        if let Some(id) = self.tool_call_id {
            out.extend_from_slice(b",\"tool_call_id\":");
            push_json_str(out, id);
        }
        out.push(b'}');
        Ok(())
    }
}

/// The bytes of `w` (little-endian) that may need escaping in a JSON
/// string, a control character (< 0x20), `"` or `\`, as their high bits.
/// Zero exactly when none does; the lowest flag is always a true one (a
/// borrow can only add false flags above a true one).
const fn escape_flags(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let control = w.wrapping_sub(ONES * 0x20) & !w;
    let q = w ^ (ONES * b'"' as u64);
    let quote = q.wrapping_sub(ONES) & !q;
    let b = w ^ (ONES * b'\\' as u64);
    let backslash = b.wrapping_sub(ONES) & !b;
    (control | quote | backslash) & HIGH
}

/// Appends the escape of `byte`, a control character, `"` or `\`, as
/// `serde_json` writes it: the short forms, else `\u00XX` in lower-case hex.
fn push_escape(out: &mut Vec<u8>, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let short = match byte {
        b'"' => b'"',
        b'\\' => b'\\',
        0x08 => b'b',
        0x09 => b't',
        0x0a => b'n',
        0x0c => b'f',
        0x0d => b'r',
        _ => {
            out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 0xf)],
            ]);
            return;
        }
    };
    out.extend_from_slice(&[b'\\', short]);
}

/// Appends `s` as a JSON string literal. Clean runs are found eight bytes
/// at a time and copied whole; only a word holding an escape is looked at
/// byte by byte, from its first escape on.
fn push_json_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut run = 0;
    let mut i = 0;
    while let Some(chunk) = bytes.get(i..i + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let flags = escape_flags(u64::from_le_bytes(word));
        if flags != 0 {
            // Bytes below the lowest flag are clean; look at the rest.
            let first = (flags.trailing_zeros() / 8) as usize;
            escape_run(out, bytes, i + first..i + 8, &mut run);
        }
        i += 8;
    }
    escape_run(out, bytes, i..bytes.len(), &mut run);
    out.extend_from_slice(&bytes[run..]);
    out.push(b'"');
}

/// Looks at `bytes[range]` one by one: each byte that needs escaping ends
/// the clean run that started at `run` (copied out) and is escaped.
fn escape_run(out: &mut Vec<u8>, bytes: &[u8], range: std::ops::Range<usize>, run: &mut usize) {
    for at in range {
        let byte = bytes[at];
        if matches!(byte, 0x00..=0x1f | b'"' | b'\\') {
            out.extend_from_slice(&bytes[*run..at]);
            push_escape(out, byte);
            *run = at + 1;
        }
    }
}

/// Appends `items` as a JSON array, each written by `item`.
fn push_list<T>(
    out: &mut Vec<u8>,
    items: &[T],
    mut item: impl FnMut(&mut Vec<u8>, &T) -> Result<(), BuildError>,
) -> Result<(), BuildError> {
    out.push(b'[');
    for (i, t) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        item(out, t)?;
    }
    out.push(b']');
    Ok(())
}

/// Whether `name` matches `[a-zA-Z0-9_-]{1,64}`.
pub fn is_valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Builds the body for `req` under `cfg`. See the module docs for the rules.
pub fn build_request<'a>(req: &'a Request, cfg: &Config) -> Result<ChatRequest<'a>, BuildError> {
    if cfg.model.trim().is_empty() {
        return Err(BuildError::MissingModel);
    }
    let mut messages = Vec::with_capacity(req.messages.len() + 1);
    if !req.system.is_empty() {
        messages.push(text_message("system", &req.system));
    }
    for (i, m) in req.messages.iter().enumerate() {
        messages.extend(wire_message(i, m, cfg.dialect)?);
    }
    let mut body = request_shell(req, cfg)?;
    body.messages = messages;
    Ok(body)
}

/// Message `i` of a request as sent (`None`: dropped). It depends on the
/// message and the dialect alone, so a history's encoded prefix can be
/// kept ([`BodyCache`]).
fn wire_message(i: usize, m: &Message, dialect: Dialect) -> Result<Option<WireMessage<'_>>, BuildError> {
    Ok(Some(match m.role {
        Role::System => text_message("system", &m.content),
        Role::User => WireMessage { images: &m.images, ..text_message("user", &m.content) },
        Role::Tool => {
            let id = m.tool_call_id.as_deref().ok_or(BuildError::MissingToolCallId(i))?;
            WireMessage {
                role: "tool",
                content: Some(&m.content),
                reasoning_content: None,
                tool_calls: Vec::new(),
                tool_call_id: Some(id),
                images: &[],
            }
        }
        Role::Assistant => {
            if m.content.is_empty() && m.tool_calls.is_empty() {
                return Ok(None);
            }
            let has_calls = !m.tool_calls.is_empty();
            let reasoning_content = match dialect {
                Dialect::DeepSeek if has_calls => Some(m.reasoning.as_deref().unwrap_or_default()),
                _ => None,
            };
            WireMessage {
                role: "assistant",
                content: if m.content.is_empty() { None } else { Some(&m.content) },
                reasoning_content,
                tool_calls: m.tool_calls.iter().map(wire_tool_call).collect(),
                tool_call_id: None,
                images: &[],
            }
        }
    }))
}

/// The body of `req` without its messages: model, tools and options.
fn request_shell<'a>(req: &'a Request, cfg: &Config) -> Result<ChatRequest<'a>, BuildError> {
    let mut tools = Vec::with_capacity(req.tools.len());
    let mut seen = std::collections::HashSet::new();
    for t in &req.tools {
        if !is_valid_tool_name(&t.name) {
            return Err(BuildError::InvalidToolName(t.name.clone()));
        }
        if !seen.insert(t.name.as_str()) {
            return Err(BuildError::DuplicateTool(t.name.clone()));
        }
        tools.push(WireTool {
            kind: "function",
            function: WireFunction { name: &t.name, description: &t.description, parameters: parameters(t)? },
        });
    }

    let thinking_off = cfg.thinking == Some(false);
    let thinking = match (cfg.dialect, cfg.thinking) {
        (Dialect::DeepSeek, Some(on)) => Some(Thinking { kind: if on { "enabled" } else { "disabled" } }),
        _ => None,
    };
    let reasoning_effort = cfg.reasoning_effort.filter(|_| !thinking_off).map(|e| e.wire_value(cfg.dialect));
    let cap = req.max_tokens.or(cfg.max_tokens);
    let field = cfg.max_tokens_field.unwrap_or(match cfg.dialect {
        Dialect::DeepSeek => MaxTokensField::MaxTokens,
        Dialect::OpenAi => MaxTokensField::MaxCompletionTokens,
    });
    let (max_tokens, max_completion_tokens) = match field {
        MaxTokensField::MaxTokens => (cap, None),
        MaxTokensField::MaxCompletionTokens => (None, cap),
    };

    Ok(ChatRequest {
        model: cfg.model.clone(),
        messages: Vec::new(),
        tools,
        stream: true,
        stream_options: StreamOptions { include_usage: true },
        max_tokens,
        max_completion_tokens,
        thinking,
        reasoning_effort,
    })
}

/// `a == b`, with the texts compared by [`same_text`].
fn same_message(a: &Message, b: &Message) -> bool {
    let opt = |x: &Option<String>, y: &Option<String>| match (x, y) {
        (Some(x), Some(y)) => same_text(x, y),
        (None, None) => true,
        _ => false,
    };
    a.role == b.role
        && same_text(&a.content, &b.content)
        && opt(&a.reasoning, &b.reasoning)
        && opt(&a.tool_call_id, &b.tool_call_id)
        && a.tool_calls.len() == b.tool_calls.len()
        && a.tool_calls.iter().zip(&b.tool_calls).all(|(x, y)| {
            same_text(&x.id, &y.id) && same_text(&x.name, &y.name) && same_text(&x.arguments, &y.arguments)
        })
        && a.images.len() == b.images.len()
        && a.images.iter().zip(&b.images).all(|(x, y)| x.mime_type == y.mime_type && same_words(&x.data, &y.data))
}

/// Whether two texts are equal, compared 32 bytes at a time: `==` on
/// slices is a byte-at-a-time `memcmp` in a `wasm32` build, which made the
/// cache's comparison of the whole history the adapter's top function.
fn same_text(a: &str, b: &str) -> bool {
    same_words(a.as_bytes(), b.as_bytes())
}

/// `a == b`, 32 bytes at a time (see [`same_text`]).
fn same_words(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let word = |s: &[u8]| {
        let mut w = [0u8; 8];
        w.copy_from_slice(s);
        u64::from_ne_bytes(w)
    };
    let mut xa = a.chunks_exact(32);
    let mut xb = b.chunks_exact(32);
    for (x, y) in (&mut xa).zip(&mut xb) {
        let diff = (word(&x[..8]) ^ word(&y[..8]))
            | (word(&x[8..16]) ^ word(&y[8..16]))
            | (word(&x[16..24]) ^ word(&y[16..24]))
            | (word(&x[24..]) ^ word(&y[24..]));
        if diff != 0 {
            return false;
        }
    }
    xa.remainder().iter().zip(xb.remainder()).all(|(x, y)| x == y)
}

/// Largest body whose encoding a [`BodyCache`] keeps for the next request;
/// a larger one is encoded whole each time.
pub const BODY_CACHE_MAX_BYTES: usize = 32 << 20;

/// The last body an adapter instance sent and the messages it encoded, so
/// the next request of the same conversation encodes only the messages
/// after the prefix the two share.
///
/// An instance serves the requests of one agent turn in order (the host
/// drops it when the turn ends, when the adapter is reloaded, or when it
/// fails), and each step's history is the last one plus the new messages.
/// The prefix is found by comparing the messages themselves (not a hash),
/// and a message's encoding depends on nothing but the message and the
/// dialect ([`wire_message`]), so the body is byte for byte what
/// [`build_request_json`] gives; a compacted or rewritten history, another
/// model, dialect or system prompt only shortens the prefix reused (to
/// none). Bounded: a body over [`BODY_CACHE_MAX_BYTES`] is not kept.
#[derive(Debug, Default)]
pub struct BodyCache {
    /// Model, dialect and system prompt of the kept body (the bytes before
    /// the first history message depend on them).
    key: Option<(String, Dialect, String)>,
    /// The messages the kept body encodes.
    messages: Vec<Message>,
    /// `ends[i]`: the body's length after the head and messages `..i`.
    ends: Vec<usize>,
    /// The kept body (its tail past `ends.last()` is rewritten each time).
    body: Vec<u8>,
}

impl BodyCache {
    /// Builds the body of `req` under `cfg` into the cache and hands it
    /// out (give it back with [`BodyCache::give_back`] once sent); the
    /// messages are kept to compare the next request with.
    pub fn build(&mut self, req: Request, cfg: &Config) -> Result<Vec<u8>, BuildError> {
        self.build_known(req, cfg, None)
    }

    /// [`BodyCache::build`] for the request whose messages are the first
    /// `kept` of the last body's, followed by `req.messages` (the host's
    /// `llm-history.start-after`): the kept ones are not compared again.
    /// `None` (nothing changed) when the cache does not hold `kept`
    /// messages — it never built a body, the last build failed, the body
    /// was over the bound — or one of them carries images.
    pub fn build_after(&mut self, kept: usize, mut req: Request, cfg: &Config) -> Option<Result<Vec<u8>, BuildError>> {
        let held = self.messages.get(..kept)?;
        if held.iter().any(|m| !m.images.is_empty()) {
            return None;
        }
        let mut messages = std::mem::take(&mut self.messages);
        messages.truncate(kept);
        messages.append(&mut req.messages);
        req.messages = messages;
        Some(self.build_known(req, cfg, Some(kept)))
    }

    /// The number of messages the last body encodes (0 after a failure).
    pub fn messages_held(&self) -> usize {
        self.messages.len()
    }

    /// `build`, with the length of the prefix shared with the last body's
    /// messages when it is known (`build_after`; `self.messages` is then
    /// already taken).
    fn build_known(&mut self, req: Request, cfg: &Config, known: Option<usize>) -> Result<Vec<u8>, BuildError> {
        if cfg.model.trim().is_empty() {
            self.clear();
            return Err(BuildError::MissingModel);
        }
        let same_key = self.key.as_ref().is_some_and(|(model, dialect, system)| {
            *model == cfg.model && *dialect == cfg.dialect && *system == req.system
        });
        // A body handed out and not given back is gone: start over.
        let complete = self.ends.last().is_some_and(|&end| end <= self.body.len());
        let fresh = !same_key || !complete;
        if fresh {
            self.clear();
        }
        let shared = match known {
            _ if fresh => 0,
            Some(kept) => kept,
            None => self.messages.iter().zip(&req.messages).take_while(|(a, b)| same_message(a, b)).count(),
        };
        // The old messages are not needed past the comparison: freed before
        // the body grows, so the peak is one history less.
        self.messages = Vec::new();
        match self.encode(&req, cfg, shared) {
            Ok(()) => {}
            Err(e) => {
                self.clear();
                return Err(e);
            }
        }
        let body = std::mem::take(&mut self.body);
        if body.len() > BODY_CACHE_MAX_BYTES {
            self.clear();
        } else {
            self.key = Some((cfg.model.clone(), cfg.dialect, req.system));
            self.messages = req.messages;
        }
        Ok(body)
    }

    /// Returns the body [`BodyCache::build`] handed out, for the next
    /// request to start from (a body from elsewhere is refused).
    pub fn give_back(&mut self, body: Vec<u8>) {
        if self.body.is_empty() && self.ends.last().is_some_and(|&end| end <= body.len()) && !self.messages.is_empty() {
            self.body = body;
        }
    }

    /// Forgets the kept body.
    pub fn clear(&mut self) {
        self.key = None;
        self.messages.clear();
        self.ends.clear();
        self.body = Vec::new();
    }

    /// Writes the body: keeps the head and the first `shared` messages'
    /// encodings when there are some, encodes the rest and the tail.
    fn encode(&mut self, req: &Request, cfg: &Config, shared: usize) -> Result<(), BuildError> {
        let from = if self.ends.get(shared).is_some() { shared } else { 0 };
        // Every new message is checked before the tools, as `build_request` does.
        let mut kept = Vec::with_capacity(req.messages.len() - from);
        let mut fresh = Vec::with_capacity(req.messages.len() - from);
        for (i, m) in req.messages.iter().enumerate().skip(from) {
            let w = wire_message(i, m, cfg.dialect)?;
            kept.push(w.is_some());
            fresh.extend(w);
        }
        let mut shell = request_shell(req, cfg)?;
        shell.messages = fresh;
        match self.ends.get(from) {
            Some(&end) => {
                self.body.truncate(end);
                self.ends.truncate(from + 1);
            }
            None => {
                self.body.clear();
                self.ends.clear();
                self.body.reserve(shell.estimated_json_len() + req.system.len());
                shell.write_head(&mut self.body);
                if !req.system.is_empty() {
                    text_message("system", &req.system).write_json(&mut self.body)?;
                }
                self.ends.push(self.body.len());
            }
        }
        self.body.reserve(shell.estimated_json_len());
        let mut wire = shell.messages.iter();
        for sent in kept {
            if let Some(w) = if sent { wire.next() } else { None } {
                if self.body.last() != Some(&b'[') {
                    self.body.push(b',');
                }
                w.write_json(&mut self.body)?;
            }
            self.ends.push(self.body.len());
        }
        shell.write_tail(&mut self.body)
    }
}

/// [`build_request`] serialized to JSON text.
pub fn build_request_json(req: &Request, cfg: &Config) -> Result<String, BuildError> {
    build_request(req, cfg)?.to_json()
}

fn text_message<'a>(role: &'static str, content: &'a str) -> WireMessage<'a> {
    WireMessage {
        role,
        content: Some(content),
        reasoning_content: None,
        tool_calls: Vec::new(),
        tool_call_id: None,
        images: &[],
    }
}

fn wire_tool_call(c: &ToolCall) -> WireToolCall<'_> {
    let arguments = if c.arguments.trim().is_empty() { "{}" } else { c.arguments.as_str() };
    WireToolCall { id: &c.id, kind: "function", function: WireFunctionCall { name: &c.name, arguments } }
}

/// Bytes of schema text [`SCHEMAS`] keeps; past it, it starts over.
const SCHEMA_CACHE_BYTES: usize = 1 << 20;

thread_local! {
    /// Tool schemas as sent, by the text they came as. The same tools ride
    /// in every request of a session and an instance serves a whole turn,
    /// so each schema is parsed and written once instead of at every step.
    static SCHEMAS: RefCell<(HashMap<String, Schema>, usize)> = RefCell::new((HashMap::new(), 0));
}

fn parameters(t: &ToolSpec) -> Result<Schema, BuildError> {
    if let Some(hit) = SCHEMAS.with(|c| c.borrow().0.get(&t.input_schema).cloned()) {
        return Ok(hit);
    }
    let schema = normalized_schema(t)?;
    let text = serde_json::to_string(&schema).map_err(|e| BuildError::Serialize(e.to_string()))?;
    let raw = RawValue::from_string(text).map_err(|e| BuildError::Serialize(e.to_string()))?;
    let schema = Schema(raw);
    SCHEMAS.with(|c| {
        let (map, bytes) = &mut *c.borrow_mut();
        let cost = t.input_schema.len() + schema.get().len();
        if *bytes + cost > SCHEMA_CACHE_BYTES {
            map.clear();
            *bytes = 0;
        }
        if cost <= SCHEMA_CACHE_BYTES {
            *bytes += cost;
            map.insert(t.input_schema.clone(), schema.clone());
        }
    });
    Ok(schema)
}

fn normalized_schema(t: &ToolSpec) -> Result<Value, BuildError> {
    let invalid = |reason: String| BuildError::InvalidSchema { tool: t.name.clone(), reason };
    let schema = if t.input_schema.trim().is_empty() {
        Value::Object(Map::new())
    } else {
        serde_json::from_str::<Value>(&t.input_schema).map_err(|e| invalid(e.to_string()))?
    };
    let Value::Object(mut obj) = schema else {
        return Err(invalid("expected an object".to_string()));
    };
    match obj.get("type") {
        None => {
            obj.insert("type".to_string(), Value::String("object".to_string()));
        }
        Some(Value::String(s)) if s == "object" => {}
        Some(other) => return Err(invalid(format!("type is {other}, expected \"object\""))),
    }
    if !obj.contains_key("properties") {
        obj.insert("properties".to_string(), Value::Object(Map::new()));
    }
    Ok(Value::Object(obj))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use serde_json::json;

    fn call(id: &str, name: &str, args: &str) -> ToolCall {
        ToolCall { id: id.into(), name: name.into(), arguments: args.into() }
    }

    fn conversation() -> Request {
        Request {
            system: "You are terse.".into(),
            messages: vec![
                Message::user("read a and b"),
                Message::assistant(
                    "",
                    Some("I should read both.".into()),
                    vec![call("c1", "read", r#"{"path":"a"}"#), call("c2", "read", "")],
                ),
                Message::tool("c1", "A"),
                Message::tool("c2", "B"),
                Message::assistant("Done: A B", Some("Summarize.".into()), vec![]),
                Message::user("again"),
                Message::assistant("", None, vec![call("c3", "read", r#"{"path":"c"}"#)]),
                Message::tool("c3", "C"),
                Message::assistant("", Some("dropped".into()), vec![]),
            ],
            tools: vec![ToolSpec {
                name: "read".into(),
                description: "Read a file".into(),
                input_schema: r#"{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}"#.into(),
            }],
            max_tokens: None,
        }
    }

    #[test]
    fn deepseek_body_snapshot() {
        let mut cfg = Config::new("deepseek-v4-pro", Dialect::DeepSeek);
        cfg.thinking = Some(true);
        cfg.reasoning_effort = Some(ReasoningEffort::Medium);
        cfg.max_tokens = Some(4096);
        let body: Value = serde_json::from_str(&build_request_json(&conversation(), &cfg).unwrap()).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "deepseek-v4-pro",
                "messages": [
                    {"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "read a and b"},
                    {"role": "assistant", "content": null, "reasoning_content": "I should read both.",
                     "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a\"}"}},
                        {"id": "c2", "type": "function", "function": {"name": "read", "arguments": "{}"}}
                     ]},
                    {"role": "tool", "content": "A", "tool_call_id": "c1"},
                    {"role": "tool", "content": "B", "tool_call_id": "c2"},
                    {"role": "assistant", "content": "Done: A B"},
                    {"role": "user", "content": "again"},
                    {"role": "assistant", "content": null, "reasoning_content": "",
                     "tool_calls": [
                        {"id": "c3", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"c\"}"}}
                     ]},
                    {"role": "tool", "content": "C", "tool_call_id": "c3"}
                ],
                "tools": [{"type": "function", "function": {
                    "name": "read", "description": "Read a file",
                    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
                }}],
                "stream": true,
                "stream_options": {"include_usage": true},
                "max_tokens": 4096,
                "thinking": {"type": "enabled"},
                "reasoning_effort": "high"
            })
        );
    }

    #[test]
    fn field_order_is_stable() {
        let cfg = Config::new("m", Dialect::DeepSeek);
        let text =
            build_request_json(&Request { messages: vec![Message::user("hi")], ..Request::default() }, &cfg).unwrap();
        assert_eq!(
            text,
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}"#
        );
    }

    #[test]
    fn openai_never_sends_reasoning() {
        let mut cfg = Config::new("gpt-x", Dialect::OpenAi);
        cfg.thinking = Some(true);
        cfg.reasoning_effort = Some(ReasoningEffort::Max);
        let mut req = conversation();
        req.max_tokens = Some(100);
        let body = build_request(&req, &cfg).unwrap();
        assert!(body.messages.iter().all(|m| m.reasoning_content.is_none()));
        assert_eq!(body.thinking, None);
        assert_eq!(body.reasoning_effort, Some("xhigh"));
        assert_eq!((body.max_tokens, body.max_completion_tokens), (None, Some(100)));
        let text = body.to_json().unwrap();
        assert!(!text.contains("reasoning_content"));
        assert!(!text.contains("thinking"));
    }

    #[test]
    fn thinking_disabled_suppresses_effort() {
        let mut cfg = Config::new("m", Dialect::DeepSeek);
        cfg.thinking = Some(false);
        cfg.reasoning_effort = Some(ReasoningEffort::High);
        let req = conversation();
        let body = build_request(&req, &cfg).unwrap();
        assert_eq!(body.thinking, Some(Thinking { kind: "disabled" }));
        assert_eq!(body.reasoning_effort, None);
        // Pass-back still happens: it is harmless without thinking and
        // required if an earlier turn was made with thinking on.
        assert_eq!(body.messages[2].reasoning_content, Some("I should read both."));
    }

    #[test]
    fn the_body_is_written_without_regrowing_its_buffer() {
        // A long history of tool results (file text with newlines and quotes).
        let mut req = conversation();
        for i in 0..200 {
            let text: String = (0..40).map(|l| format!("file {i} line {l}: \"quoted\" text\n")).collect();
            req.messages.push(Message::assistant("", None, vec![call(&format!("r{i}"), "read", r#"{"path":"x"}"#)]));
            req.messages.push(Message::tool(format!("r{i}"), &text));
        }
        let body = build_request(&req, &Config::new("m", Dialect::DeepSeek)).unwrap();
        let estimate = body.estimated_json_len();
        let json = body.to_json().unwrap();
        assert_eq!(serde_json::from_str::<Value>(&json).unwrap()["messages"].as_array().map(Vec::len), Some(409));
        assert!(json.len() <= estimate, "{} > {estimate}", json.len());
        assert_eq!(json.capacity(), estimate, "the buffer was regrown");
        assert!(estimate < json.len() * 3 / 2, "estimate {estimate} for {} bytes", json.len());
    }

    #[test]
    fn images_go_as_image_url_parts_and_the_cache_compares_their_bytes() {
        let cfg = Config::new("gpt-x", Dialect::OpenAi);
        let mut req = conversation();
        let png = Image { mime_type: "image/png".into(), data: b"\x89PNG\r\n\x1a\nxyz".to_vec() };
        req.messages[0].images.push(png.clone());
        let mut cache = BodyCache::default();
        let text = cached_body(&mut cache, &req, &cfg);
        assert_eq!(text, serde_json::to_string(&build_request(&req, &cfg).unwrap()).unwrap(), "serde agrees");
        let body: Value = serde_json::from_str(&text).unwrap();
        let user = body["messages"].as_array().unwrap().iter().find(|m| m["role"] == "user").unwrap().clone();
        assert_eq!(
            user["content"],
            json!([
                {"type": "text", "text": "read a and b"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgp4eXo="}}
            ])
        );
        // Same history: reused. Other bytes of the same size: re-encoded.
        assert_eq!(cached_body(&mut cache, &req, &cfg), text);
        req.messages[0].images[0].data[9] = b'Y';
        let changed = cached_body(&mut cache, &req, &cfg);
        assert!(changed.contains("iVBORw0KGgp4WXo="), "{changed}");
    }

    /// Builds `req` through `cache` (giving the body back, as a sent
    /// request does) and checks it against the whole-history encoding.
    fn cached_body(cache: &mut BodyCache, req: &Request, cfg: &Config) -> String {
        let body = cache.build(req.clone(), cfg).unwrap();
        let text = String::from_utf8(body.clone()).unwrap();
        assert_eq!(text, build_request_json(req, cfg).unwrap(), "the cached body differs from the full encoding");
        cache.give_back(body);
        text
    }

    #[test]
    fn a_cached_body_is_byte_for_byte_the_full_encoding_as_the_history_changes() {
        let mut cfg = Config::new("m", Dialect::DeepSeek);
        cfg.thinking = Some(true);
        let mut cache = BodyCache::default();
        let mut req = conversation();
        cached_body(&mut cache, &req, &cfg);
        // Steps that append a tool call and its result (with escapes).
        for i in 0..6 {
            req.messages.push(Message::assistant(
                "",
                Some(format!("step {i}")),
                vec![call(&format!("s{i}"), "read", "")],
            ));
            req.messages.push(Message::tool(format!("s{i}"), format!("line \"{i}\"\n\tend")));
            cached_body(&mut cache, &req, &cfg);
            assert_eq!(cache.messages.len(), req.messages.len(), "the messages are kept");
        }
        // An empty assistant message (dropped on the wire) at the end, then followed.
        req.messages.push(Message::assistant("", None, vec![]));
        cached_body(&mut cache, &req, &cfg);
        req.messages.push(Message::user("more"));
        cached_body(&mut cache, &req, &cfg);
        // Compaction: the history's start is replaced by a summary.
        req.messages.splice(0..6, [Message::user("summary of the earlier conversation")]);
        cached_body(&mut cache, &req, &cfg);
        // A rewrite in the middle, a shorter history, another system
        // prompt, other tools, another cap, another model, another dialect.
        req.messages[3].content.push_str(" (edited)");
        cached_body(&mut cache, &req, &cfg);
        req.messages.truncate(4);
        cached_body(&mut cache, &req, &cfg);
        req.system = "Another prompt.".into();
        cached_body(&mut cache, &req, &cfg);
        req.system.clear();
        cached_body(&mut cache, &req, &cfg);
        req.tools.push(ToolSpec { name: "write".into(), description: "Write".into(), input_schema: String::new() });
        req.max_tokens = Some(77);
        cached_body(&mut cache, &req, &cfg);
        cfg.model = "other".into();
        cached_body(&mut cache, &req, &cfg);
        cfg.dialect = Dialect::OpenAi;
        cached_body(&mut cache, &req, &cfg);
        req.messages.clear();
        cached_body(&mut cache, &req, &cfg);
    }

    /// Builds `req` through `cache` given only the messages after the
    /// first `kept` (`llm-history.start-after`), gives the body back and
    /// checks it against the whole-history encoding; `None` when the cache
    /// does not hold them.
    fn continued_body(cache: &mut BodyCache, kept: usize, req: &Request, cfg: &Config) -> Option<String> {
        let mut tail = req.clone();
        tail.messages.drain(..kept);
        let body = cache.build_after(kept, tail, cfg)?.unwrap();
        let text = String::from_utf8(body.clone()).unwrap();
        assert_eq!(text, build_request_json(req, cfg).unwrap(), "the continued body differs from the full encoding");
        cache.give_back(body);
        Some(text)
    }

    #[test]
    fn a_continued_body_is_the_full_encoding_and_only_what_the_cache_holds_is_continued() {
        let mut cfg = Config::new("m", Dialect::DeepSeek);
        cfg.thinking = Some(true);
        let mut cache = BodyCache::default();
        let mut req = conversation();
        // Nothing held yet: only `kept == 0` continues (the whole request).
        assert!(cache.build_after(1, req.clone(), &cfg).is_none());
        assert_eq!(cache.messages_held(), 0);
        continued_body(&mut cache, 0, &req, &cfg).unwrap();
        for i in 0..5 {
            let kept = req.messages.len();
            req.messages.push(Message::assistant(
                "",
                Some(format!("step {i}")),
                vec![call(&format!("s{i}"), "read", "")],
            ));
            req.messages.push(Message::tool(format!("s{i}"), format!("out \"{i}\"\n")));
            continued_body(&mut cache, kept, &req, &cfg).unwrap();
            assert_eq!(cache.messages_held(), req.messages.len());
        }
        // More than it holds: nothing changes, and the next one still works.
        let held = cache.messages_held();
        assert!(cache.build_after(held + 1, Request { messages: vec![], ..req.clone() }, &cfg).is_none());
        assert_eq!(cache.messages_held(), held);
        // Compaction: the start replaced by a summary, continued after none
        // of it; then a rewrite past a shorter kept prefix.
        req.messages.splice(0..4, [Message::user("summary")]);
        continued_body(&mut cache, 0, &req, &cfg).unwrap();
        req.messages[3].content.push_str(" (edited)");
        req.messages.push(Message::user("next"));
        continued_body(&mut cache, 3, &req, &cfg).unwrap();
        // Another system prompt or model: the kept messages still serve.
        req.system = "Another prompt.".into();
        req.messages.push(Message::user("again"));
        continued_body(&mut cache, req.messages.len() - 1, &req, &cfg).unwrap();
        cfg.model = "other".into();
        continued_body(&mut cache, req.messages.len(), &req, &cfg).unwrap();
        // A mixed history: full builds and continued ones interleave.
        req.messages.push(Message::user("full"));
        cached_body(&mut cache, &req, &cfg);
        req.messages.push(Message::user("tail"));
        continued_body(&mut cache, req.messages.len() - 1, &req, &cfg).unwrap();
        // A failed build forgets the messages: only the whole request again.
        let mut bad = req.clone();
        bad.messages.push(Message { tool_call_id: None, ..Message::tool("x", "orphan") });
        let n = req.messages.len();
        assert!(matches!(continued_body_err(&mut cache, n, &bad, &cfg), Some(BuildError::MissingToolCallId(_))));
        assert!(cache.build_after(1, req.clone(), &cfg).is_none());
        continued_body(&mut cache, 0, &req, &cfg).unwrap();
        // Kept messages with images are never continued.
        let mut with_image = req.clone();
        with_image.messages[0].images.push(Image { mime_type: "image/png".into(), data: b"png".to_vec() });
        cached_body(&mut cache, &with_image, &Config::new("m", Dialect::OpenAi));
        assert!(cache.build_after(1, Request { messages: vec![], ..req.clone() }, &cfg).is_none());
    }

    fn continued_body_err(cache: &mut BodyCache, kept: usize, req: &Request, cfg: &Config) -> Option<BuildError> {
        let mut tail = req.clone();
        tail.messages.drain(..kept);
        cache.build_after(kept, tail, cfg)?.err()
    }

    #[test]
    fn a_body_cache_reports_errors_as_the_full_encoding_does_and_recovers() {
        let cfg = Config::new("m", Dialect::DeepSeek);
        let mut cache = BodyCache::default();
        let mut req = conversation();
        cached_body(&mut cache, &req, &cfg);
        let mut bad = req.clone();
        bad.messages.push(Message { tool_call_id: None, ..Message::tool("x", "orphan") });
        bad.tools.push(ToolSpec { name: "bad name".into(), description: String::new(), input_schema: String::new() });
        let want = build_request_json(&bad, &cfg).unwrap_err();
        assert_eq!(cache.build(bad, &cfg).unwrap_err(), want);
        assert!(matches!(want, BuildError::MissingToolCallId(9)), "{want:?}");
        req.messages.push(Message::user("next"));
        cached_body(&mut cache, &req, &cfg);
        // A body never given back (the send failed before) is not reused.
        let _lost = cache.build(req.clone(), &cfg).unwrap();
        req.messages.push(Message::user("after"));
        cached_body(&mut cache, &req, &cfg);
        assert_eq!(
            cache.build(req.clone(), &Config::new(" ", Dialect::DeepSeek)).unwrap_err(),
            BuildError::MissingModel
        );
        cached_body(&mut cache, &req, &cfg);
    }

    #[test]
    fn texts_compare_as_equal_exactly_when_they_are() {
        let base: String = (0..100).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
        for len in 0..base.len() {
            let s = &base[..len];
            assert!(same_text(s, s));
            assert!(!same_text(s, &base[..len + 1]));
            for at in 0..len {
                let mut other = s.to_string();
                other.replace_range(at..at + 1, "#");
                assert!(!same_text(s, &other), "a difference at {at} of {len} is missed");
            }
        }
        let a = Message::assistant("x", Some("r".into()), vec![call("1", "read", "{}")]);
        assert!(same_message(&a, &a.clone()));
        for b in [
            Message::assistant("x", None, vec![call("1", "read", "{}")]),
            Message::assistant("x", Some("r".into()), vec![call("1", "read", "{ }")]),
            Message::assistant("x", Some("r".into()), vec![]),
            Message { role: Role::User, ..a.clone() },
            Message { tool_call_id: Some("1".into()), ..a.clone() },
        ] {
            assert!(!same_message(&a, &b), "{b:?}");
        }
    }

    #[test]
    fn a_body_over_the_cache_bound_is_not_kept() {
        let cfg = Config::new("m", Dialect::DeepSeek);
        let mut cache = BodyCache::default();
        let mut req = conversation();
        req.messages.push(Message::user("x".repeat(BODY_CACHE_MAX_BYTES)));
        cached_body(&mut cache, &req, &cfg);
        assert!(cache.messages.is_empty() && cache.body.capacity() == 0, "a huge body is dropped, not kept");
        req.messages.truncate(2);
        cached_body(&mut cache, &req, &cfg);
        assert_eq!(cache.messages.len(), 2);
    }

    fn escaped(s: &str) -> String {
        let mut out = Vec::new();
        super::push_json_str(&mut out, s);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them_at_every_offset() {
        // Every ASCII byte at every offset of a word and across words, and
        // multi-byte characters next to escapes.
        for byte in 0u8..0x80 {
            for at in 0..19 {
                let mut s: String = "abcdefghijklmnopqrs".chars().take(19).collect();
                s.replace_range(at..at + 1, &char::from(byte).to_string());
                assert_eq!(escaped(&s), serde_json::to_string(&s).unwrap(), "byte {byte:#x} at {at}");
            }
        }
        for s in ["", "\"", "\\\\", "é\n漢字\u{1f600}\t\u{7f}\u{1f}", "line\r\nnext \"quoted\" \\ end\u{0}"] {
            assert_eq!(escaped(s), serde_json::to_string(s).unwrap());
        }
    }

    proptest::proptest! {
        #[test]
        fn any_string_is_escaped_as_serde_json_escapes_it(s in "(?s).{0,80}", bytes in proptest::collection::vec(0u8..0x80, 0..80)) {
            proptest::prop_assert_eq!(escaped(&s), serde_json::to_string(&s).unwrap());
            let ascii = String::from_utf8(bytes).unwrap();
            proptest::prop_assert_eq!(escaped(&ascii), serde_json::to_string(&ascii).unwrap());
        }

        #[test]
        fn the_body_is_what_serde_json_writes(
            texts in proptest::collection::vec("(?s)[a-z \"\\\\\n\t\u{1}é漢]{0,24}", 1..12),
            roles in proptest::collection::vec(0u8..4, 1..12),
            deepseek in proptest::bool::ANY,
            cap in proptest::option::of(1u32..100_000),
            thinking in proptest::option::of(proptest::bool::ANY),
        ) {
            let mut req = conversation();
            for (i, (text, role)) in texts.iter().zip(&roles).enumerate() {
                req.messages.push(match role {
                    0 => Message::user(text.as_str()),
                    1 => Message::assistant(text.as_str(), Some(text.clone()), vec![call(&format!("c{i}"), "read", text)]),
                    2 => Message::assistant(text.as_str(), None, Vec::new()),
                    _ => Message::tool(format!("c{i}\"{text}"), text.as_str()),
                });
            }
            req.system = texts[0].clone();
            req.max_tokens = cap;
            let mut cfg = Config::new(format!("model-{}", texts[0]), if deepseek { Dialect::DeepSeek } else { Dialect::OpenAi });
            cfg.thinking = thinking;
            cfg.reasoning_effort = Some(ReasoningEffort::High);
            let body = build_request(&req, &cfg).unwrap();
            proptest::prop_assert_eq!(body.to_json().unwrap(), serde_json::to_string(&body).unwrap());
        }
    }

    #[test]
    fn max_tokens_override_and_field() {
        let mut cfg = Config::new("m", Dialect::OpenAi);
        cfg.max_tokens = Some(10);
        cfg.max_tokens_field = Some(MaxTokensField::MaxTokens);
        let mut req = Request { messages: vec![Message::user("x")], ..Request::default() };
        let b = build_request(&req, &cfg).unwrap();
        assert_eq!((b.max_tokens, b.max_completion_tokens), (Some(10), None));
        req.max_tokens = Some(20);
        assert_eq!(build_request(&req, &cfg).unwrap().max_tokens, Some(20));
    }

    #[test]
    fn effort_mapping() {
        use ReasoningEffort::*;
        let ds: Vec<_> =
            [Minimal, Low, Medium, High, XHigh, Max].iter().map(|e| e.wire_value(Dialect::DeepSeek)).collect();
        assert_eq!(ds, ["low", "low", "high", "high", "high", "max"]);
        assert_eq!(ReasoningEffort::parse(" ULTRA "), Some(Max));
        assert_eq!(ReasoningEffort::parse("xhigh"), Some(XHigh));
        assert_eq!(ReasoningEffort::parse("off"), None);
    }

    #[test]
    fn schema_rules() {
        let spec =
            |schema: &str| ToolSpec { name: "t".into(), description: String::new(), input_schema: schema.into() };
        let build = |s: ToolSpec| {
            let req = Request { tools: vec![s], ..Request::default() };
            build_request(&req, &Config::new("m", Dialect::DeepSeek)).map(|b| b.tools[0].function.parameters.to_value())
        };
        let params = |s: &str| build(spec(s)).unwrap();
        assert_eq!(params(""), json!({"type": "object", "properties": {}}));
        assert_eq!(params("{}"), json!({"type": "object", "properties": {}}));
        assert_eq!(
            params(r#"{"properties":{"a":{"type":"integer"}}}"#),
            json!({"type": "object", "properties": {"a": {"type": "integer"}}})
        );
        assert!(matches!(build(spec("[1]")), Err(BuildError::InvalidSchema { .. })));
        assert!(matches!(build(spec("{nope")), Err(BuildError::InvalidSchema { .. })));
        assert!(matches!(build(spec(r#"{"type":"string"}"#)), Err(BuildError::InvalidSchema { .. })));
    }

    #[test]
    fn schemas_are_kept_as_sent_and_the_cache_stays_bounded() {
        let spec = |schema: String| ToolSpec { name: "t".into(), description: String::new(), input_schema: schema };
        let body = |schema: &str| {
            let req = Request { tools: vec![spec(schema.to_string())], ..Request::default() };
            build_request_json(&req, &Config::new("m", Dialect::DeepSeek)).unwrap()
        };
        let schema = r#"{"properties":{"a":{"type":"integer"}},"required":["a"]}"#;
        let first = body(schema);
        let sent: Value = serde_json::from_str(&first).unwrap();
        assert_eq!(
            sent["tools"][0]["function"]["parameters"],
            json!({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})
        );
        assert_eq!(body(schema), first, "a cached schema is sent as it was the first time");
        // Many distinct schemas: the cache starts over rather than grow.
        let pad = "x".repeat(10_000);
        for i in 0..300 {
            let s = format!(r#"{{"description":"{pad}{i}"}}"#);
            assert!(body(&s).contains(&format!("{pad}{i}")));
            SCHEMAS.with(|c| assert!(c.borrow().1 <= SCHEMA_CACHE_BYTES));
        }
        assert_eq!(body(schema), first);
    }

    #[test]
    fn tool_names_checked() {
        let cfg = Config::new("m", Dialect::DeepSeek);
        let tool = |n: &str| ToolSpec { name: n.into(), description: String::new(), input_schema: "{}".into() };
        for bad in ["", "has space", "dot.name", &"x".repeat(65)] {
            let req = Request { tools: vec![tool(bad)], ..Request::default() };
            assert_eq!(build_request(&req, &cfg), Err(BuildError::InvalidToolName(bad.to_string())));
        }
        let req = Request { tools: vec![tool("a-b_C9"), tool("a-b_C9")], ..Request::default() };
        assert_eq!(build_request(&req, &cfg), Err(BuildError::DuplicateTool("a-b_C9".into())));
        assert!(is_valid_tool_name(&"x".repeat(64)));
    }

    #[test]
    fn errors() {
        let req = Request { messages: vec![Message::user("x")], ..Request::default() };
        assert_eq!(build_request(&req, &Config::default()), Err(BuildError::MissingModel));
        let mut bad = Message::tool("x", "y");
        bad.tool_call_id = None;
        let req = Request { messages: vec![Message::user("x"), bad], ..Request::default() };
        assert_eq!(build_request(&req, &Config::new("m", Dialect::DeepSeek)), Err(BuildError::MissingToolCallId(1)));
    }

    #[test]
    fn system_messages_in_list_pass_through() {
        let req = Request { messages: vec![Message::system("s2"), Message::user("u")], ..Request::default() };
        let b = build_request(&req, &Config::new("m", Dialect::DeepSeek)).unwrap();
        assert_eq!(b.messages.len(), 2);
        assert_eq!(b.messages[0].role, "system");
    }
}
