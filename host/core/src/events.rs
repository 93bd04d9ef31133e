//! Typed session events: the vocabulary of the append-only session log.
//!
//! Every event is one JSON object on one line:
//!
//! ```json
//! {"seq":7,"time":"2026-05-01T12:34:56.789Z","type":"tool/call","data":{"turn":1,"step":1,"id":"call_1","name":"read","arguments":"{\"path\":\"a.txt\"}"}}
//! ```
//!
//! - `seq` is contiguous from 1 within a session (the header `session/start`
//!   is seq 1);
//! - `time` is RFC 3339 UTC with milliseconds (human-readable in `jq`, sorts
//!   lexicographically; ordering is always by `seq`, never by `time`);
//! - `type` names the variant of [`EventKind`], `data` holds its fields;
//! - `ignorable: true` (omitted when false) marks an event an older reader may
//!   skip. A reader **refuses** an unknown `type` unless the event carries
//!   `ignorable: true`, in which case it is kept verbatim as
//!   [`EventKind::Unknown`] (so it round-trips through fork and export).

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::plugin::{Decision, FinishReason, LlmErrorCode, ToolCall, ToolErrorCode, Usage};

/// Version of the on-disk format written in `session/start`.
pub const FORMAT_VERSION: u32 = 1;

/// One committed event: the envelope plus its typed payload.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Position in the session, contiguous from 1.
    pub seq: u64,
    /// Commit time, RFC 3339 UTC with milliseconds.
    pub time: String,
    /// Whether an older reader may skip this event if it does not know its type.
    pub ignorable: bool,
    /// The typed payload (`type` + `data` on the wire).
    pub kind: EventKind,
}

impl Event {
    /// The wire name of the event type (`tool/call` …).
    pub fn type_name(&self) -> &str {
        self.kind.type_name()
    }

    /// Serializes to one JSON line (without the trailing newline).
    pub fn to_json_line(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }

    /// Parses one JSON line, distinguishing an unknown, non-ignorable type
    /// ([`DecodeError::UnknownType`]) from malformed text.
    pub fn decode(line: &str) -> Result<Event, DecodeError> {
        let raw: RawEvent = serde_json::from_str(line).map_err(|e| DecodeError::Malformed(e.to_string()))?;
        Event::from_raw(raw)
    }

    fn from_raw(raw: RawEvent) -> Result<Event, DecodeError> {
        let kind = if EventKind::is_known_type(&raw.type_name) {
            let tagged = serde_json::json!({ "type": raw.type_name, "data": raw.data });
            serde_json::from_value::<EventKind>(tagged)
                .map_err(|e| DecodeError::Malformed(format!("`{}` data: {e}", raw.type_name)))?
        } else if raw.ignorable {
            EventKind::Unknown { type_name: raw.type_name, data: raw.data }
        } else {
            return Err(DecodeError::UnknownType(raw.type_name));
        };
        Ok(Event { seq: raw.seq, time: raw.time, ignorable: raw.ignorable, kind })
    }
}

/// Why one line could not become an [`Event`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// A type this reader does not know, not marked `ignorable`.
    #[error("unknown event type `{0}` (not marked ignorable)")]
    UnknownType(String),
    /// Not a valid event.
    #[error("malformed event: {0}")]
    Malformed(String),
}

#[derive(Deserialize)]
struct RawEvent {
    seq: u64,
    time: String,
    #[serde(rename = "type")]
    type_name: String,
    #[serde(default)]
    data: Value,
    #[serde(default)]
    ignorable: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[derive(Serialize)]
struct KnownOut<'a> {
    seq: u64,
    time: &'a str,
    #[serde(flatten)]
    kind: &'a EventKind,
    #[serde(skip_serializing_if = "is_false")]
    ignorable: bool,
}

#[derive(Serialize)]
struct UnknownOut<'a> {
    seq: u64,
    time: &'a str,
    #[serde(rename = "type")]
    type_name: &'a str,
    data: &'a Value,
    #[serde(skip_serializing_if = "is_false")]
    ignorable: bool,
}

impl Serialize for Event {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.kind {
            EventKind::Unknown { type_name, data } => {
                UnknownOut { seq: self.seq, time: &self.time, type_name, data, ignorable: self.ignorable }.serialize(s)
            }
            kind => KnownOut { seq: self.seq, time: &self.time, kind, ignorable: self.ignorable }.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = RawEvent::deserialize(d)?;
        Event::from_raw(raw).map_err(D::Error::custom)
    }
}

/// The typed payload of an event. On the wire: `"type": <name>, "data": {…}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data")]
pub enum EventKind {
    /// Session header; always seq 1.
    #[serde(rename = "session/start")]
    SessionStart(SessionStart),
    /// The writer found a torn last line when reopening and terminated it.
    #[serde(rename = "session/repaired")]
    SessionRepaired(SessionRepaired),
    /// A turn begins.
    #[serde(rename = "turn/start")]
    TurnStart(TurnStart),
    /// A turn ends, with its stop reason.
    #[serde(rename = "turn/end")]
    TurnEnd(TurnEnd),
    /// A step (one model request and its tool calls) begins.
    #[serde(rename = "step/start")]
    StepStart(StepStart),
    /// A step ends.
    #[serde(rename = "step/end")]
    StepEnd(StepEnd),
    /// A user message (model-visible).
    #[serde(rename = "user/message")]
    UserMessage(UserMessage),
    /// A streamed delta (persisted for surfaces and replay, never model-visible).
    #[serde(rename = "assistant/chunk")]
    AssistantChunk(AssistantChunk),
    /// The model's committed answer of one step (model-visible).
    #[serde(rename = "assistant/message")]
    AssistantMessage(AssistantMessage),
    /// A tool call about to go through the pipeline.
    #[serde(rename = "tool/call")]
    ToolCall(ToolCallEvent),
    /// The result of a tool call (model-visible).
    #[serde(rename = "tool/result")]
    ToolResult(ToolResultEvent),
    /// Output a running tool call streamed before its result (persisted for
    /// surfaces and replay, never model-visible).
    #[serde(rename = "tool/progress")]
    ToolProgress(ToolProgress),
    /// A plugin version was loaded.
    #[serde(rename = "plugin/loaded")]
    PluginLoaded(PluginChange),
    /// A plugin version was unloaded (its registrations revoked).
    #[serde(rename = "plugin/unloaded")]
    PluginUnloaded(PluginChange),
    /// A new plugin version failed to load; the old one (if any) stays.
    #[serde(rename = "plugin/reload-failed")]
    PluginReloadFailed(PluginChange),
    /// The composed permission decision for a tool call.
    #[serde(rename = "policy/decision")]
    PolicyDecision(PolicyDecisionEvent),
    /// A call was sent to the approval service.
    #[serde(rename = "approval/asked")]
    ApprovalAsked(ApprovalAsked),
    /// The approval service answered.
    #[serde(rename = "approval/decided")]
    ApprovalDecided(ApprovalDecided),
    /// A failed model request will be retried.
    #[serde(rename = "llm/retry")]
    LlmRetry(LlmRetry),
    /// A summary replaces a range of the model-visible history.
    #[serde(rename = "compaction/summary")]
    CompactionSummary(CompactionSummary),
    /// The inbox changed.
    #[serde(rename = "inbox/spliced")]
    InboxSpliced(InboxSpliced),
    /// The todo list was replaced.
    #[serde(rename = "todo/updated")]
    TodoUpdated(TodoUpdated),
    /// An event of a type this build does not know, kept because it was
    /// marked ignorable. Never produced by serde directly.
    #[serde(skip)]
    Unknown {
        /// The wire type name.
        type_name: String,
        /// The raw data.
        data: Value,
    },
}

/// Every known wire type name (keep in sync with [`EventKind`]; a test checks).
pub const KNOWN_TYPES: &[&str] = &[
    "session/start",
    "session/repaired",
    "turn/start",
    "turn/end",
    "step/start",
    "step/end",
    "user/message",
    "assistant/chunk",
    "assistant/message",
    "tool/call",
    "tool/result",
    "tool/progress",
    "plugin/loaded",
    "plugin/unloaded",
    "plugin/reload-failed",
    "policy/decision",
    "approval/asked",
    "approval/decided",
    "llm/retry",
    "compaction/summary",
    "inbox/spliced",
    "todo/updated",
];

/// `session/model`, ignorable: which adapter and model serve the session
/// from this point on, `{adapter, model, reason}` with reason `initial`,
/// `resume` or `change` (appended by the host, read by usage and cost
/// reports).
pub const MODEL_EVENT: &str = "session/model";

/// `compaction/failed`, ignorable: an automatic compaction failed,
/// `{error}`; none is tried again for the rest of the turn.
pub const COMPACTION_FAILED_EVENT: &str = "compaction/failed";

/// The ignorable event types the host itself appends (kept as
/// [`EventKind::Unknown`] by readers; a plugin's own types are not listed).
pub const HOST_IGNORABLE_TYPES: &[&str] =
    &[MODEL_EVENT, COMPACTION_FAILED_EVENT, crate::question::ASKED_EVENT, crate::question::ANSWERED_EVENT];

impl EventKind {
    /// Whether this build knows the wire type name.
    pub fn is_known_type(name: &str) -> bool {
        KNOWN_TYPES.contains(&name)
    }

    /// The wire type name.
    pub fn type_name(&self) -> &str {
        match self {
            Self::SessionStart(_) => "session/start",
            Self::SessionRepaired(_) => "session/repaired",
            Self::TurnStart(_) => "turn/start",
            Self::TurnEnd(_) => "turn/end",
            Self::StepStart(_) => "step/start",
            Self::StepEnd(_) => "step/end",
            Self::UserMessage(_) => "user/message",
            Self::AssistantChunk(_) => "assistant/chunk",
            Self::AssistantMessage(_) => "assistant/message",
            Self::ToolCall(_) => "tool/call",
            Self::ToolResult(_) => "tool/result",
            Self::ToolProgress(_) => "tool/progress",
            Self::PluginLoaded(_) => "plugin/loaded",
            Self::PluginUnloaded(_) => "plugin/unloaded",
            Self::PluginReloadFailed(_) => "plugin/reload-failed",
            Self::PolicyDecision(_) => "policy/decision",
            Self::ApprovalAsked(_) => "approval/asked",
            Self::ApprovalDecided(_) => "approval/decided",
            Self::LlmRetry(_) => "llm/retry",
            Self::CompactionSummary(_) => "compaction/summary",
            Self::InboxSpliced(_) => "inbox/spliced",
            Self::TodoUpdated(_) => "todo/updated",
            Self::Unknown { type_name, .. } => type_name,
        }
    }
}

/// `session/start`: the header of a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionStart {
    /// The session id.
    pub id: String,
    /// On-disk format version ([`FORMAT_VERSION`]).
    #[serde(default)]
    pub format: u32,
    /// Creation time (RFC 3339).
    pub created: String,
    /// The session this one was forked from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The last seq copied from the parent (events 2..=fork_seq are the parent's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork_seq: Option<u64>,
    /// Workspace directory (the session's cwd).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// Profile the session was started with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// For a subagent's session: the parent session and tool call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spawned_by: Option<SpawnedBy>,
}

/// Links a subagent's session to the tool call that started it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpawnedBy {
    /// The parent session id.
    pub session: String,
    /// The parent's tool call id.
    pub call_id: String,
    /// The child's depth (1 for a child of a top-level agent).
    pub depth: u32,
}

/// `session/repaired`: the line `torn_line` was a torn write that the writer
/// terminated with a newline before appending again. Loaders skip exactly
/// that line, and only because this event vouches for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRepaired {
    /// 1-based physical line number of the torn bytes.
    pub torn_line: u64,
    /// Length of the torn bytes.
    pub torn_bytes: u64,
}

/// `turn/start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnStart {
    /// Turn number, from 1, increasing by one.
    pub turn: u64,
}

/// `turn/end`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnEnd {
    /// The turn that ends.
    pub turn: u64,
    /// Why it ended (flattened: `"reason": "completed"`, plus `code` and
    /// `message` for errors).
    #[serde(flatten)]
    pub reason: StopReason,
}

/// Why a turn ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum StopReason {
    /// The model answered without asking for tools.
    Completed,
    /// The step budget ran out while the model still wanted to continue.
    MaxSteps,
    /// Cancelled by the user or host.
    Cancelled,
    /// An `agent/pre-step` hook rejected the step.
    Blocked {
        /// The hook's reason.
        #[serde(default)]
        message: String,
    },
    /// The model request failed (after retries) or the loop could not proceed.
    Error {
        /// Stable code (`RATE_LIMIT`, `NO_ADAPTER`, …).
        code: String,
        /// Human-readable message.
        #[serde(default)]
        message: String,
    },
    /// The model hit its output cap without asking for tools.
    MaxTokens,
    /// Written only by crash repair: the process died inside this turn.
    Interrupted,
}

impl StopReason {
    /// The reason as a short string (`completed`, `error` …).
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::MaxSteps => "max_steps",
            Self::Cancelled => "cancelled",
            Self::Blocked { .. } => "blocked",
            Self::Error { .. } => "error",
            Self::MaxTokens => "max_tokens",
            Self::Interrupted => "interrupted",
        }
    }

    /// An error stop from an LLM error code.
    pub fn llm_error(code: LlmErrorCode, message: impl Into<String>) -> Self {
        Self::Error { code: code.as_str().to_string(), message: message.into() }
    }
}

/// `step/start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepStart {
    /// Turn number.
    pub turn: u64,
    /// Step number within the turn, from 1.
    pub step: u32,
}

/// `step/end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepEnd {
    /// Turn number.
    pub turn: u64,
    /// Step number within the turn.
    pub step: u32,
    /// Token usage of the step's model request(s), if reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// Where an inbox message was queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InboxKind {
    /// Next turn; wakes the agent.
    Followup,
    /// Next step; wakes the agent.
    Steer,
    /// Next step; does not wake the agent.
    Inject,
}

/// `user/message`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserMessage {
    /// The text.
    pub content: String,
    /// The inbox item it came from, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inbox_id: Option<String>,
    /// Images after the text, inline and bounded ([`crate::images`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<crate::images::Image>,
}

/// `assistant/chunk`: one streamed delta (text and/or reasoning).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssistantChunk {
    /// Turn number.
    pub turn: u64,
    /// Step number.
    pub step: u32,
    /// Visible text delta.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
    /// Reasoning delta.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reasoning: String,
}

/// `tool/progress`: a delta of a running call's output (a component's
/// streamed result), in order; the call's `tool/result` holds the whole
/// output. Bounded by [`crate::services::MAX_PROGRESS_BYTES_PER_CALL`] and
/// [`crate::services::MAX_PROGRESS_EVENTS_PER_CALL`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolProgress {
    /// The call's id (its `tool/call`).
    pub call_id: String,
    /// The text delta.
    pub text: String,
}

/// `assistant/message`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    /// Turn number.
    pub turn: u64,
    /// Step number.
    pub step: u32,
    /// Visible text.
    #[serde(default)]
    pub content: String,
    /// Reasoning text (kept: some providers require it sent back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// Tool calls the model asked for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Token usage of the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Why the model stopped (absent when interrupted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish: Option<FinishReason>,
    /// The stream was cut by a cancellation (or a crash): this is the prefix
    /// delivered so far.
    #[serde(default, skip_serializing_if = "is_false")]
    pub interrupted: bool,
}

/// `tool/call`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallEvent {
    /// Turn number.
    pub turn: u64,
    /// Step number.
    pub step: u32,
    /// The model's call id.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Raw argument text as the model produced it.
    pub arguments: String,
    /// For a call a program made (`run_code`): the id of the calling call.
    /// Such calls are not part of the model's conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
}

/// `tool/result`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResultEvent {
    /// Turn number.
    pub turn: u64,
    /// Step number.
    pub step: u32,
    /// The call answered.
    pub call_id: String,
    /// Tool name.
    pub name: String,
    /// Text for the model (truncated if it was over the cap).
    pub content: String,
    /// Whether the call failed.
    #[serde(default)]
    pub is_error: bool,
    /// Stable error code (`UNKNOWN_TOOL`, `DENIED`, `ABORTED_BEFORE_DISPATCH` …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<ToolErrorCode>,
    /// Plugin id of the tool (absent when no tool ran, e.g. unknown tool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<String>,
    /// Content digest of the plugin version that ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Whether `content` was truncated.
    #[serde(default, skip_serializing_if = "is_false")]
    pub truncated: bool,
    /// Size in bytes of the untruncated output (set when truncated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_bytes: Option<u64>,
    /// The untruncated output, kept in the log when truncated (up to a hard
    /// cap); never model-visible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_content: Option<String>,
    /// Wall time of the execution in milliseconds, if it executed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// Structured details for surfaces (not model-visible).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

/// `plugin/loaded`, `plugin/unloaded`, `plugin/reload-failed`.
///
/// A row's configuration is part of its version: `config` names the config
/// (its digest, as in every `policy/decision` vote) and `generation` counts
/// the configs the host has taken in for the row, so each edit of a row's
/// config — applied, refused, or edited back to the one loaded — is one
/// event with its own generation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginChange {
    /// Plugin id.
    pub id: String,
    /// Content digest of the version concerned (empty if unknown).
    #[serde(default)]
    pub digest: String,
    /// Kinds it exports (`tool`, `llm` …), when loaded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kinds: Vec<String>,
    /// Why it failed, for `reload-failed`; for `loaded`, what of it was
    /// refused (tool names an earlier plugin has).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Digest of the row's configuration (hex sha-256 of its JSON, keys
    /// sorted): on `loaded` and `unloaded` the config the version runs with;
    /// on `reload-failed` the config that could not be applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    /// The row's config generation: 1 at its first load, one more for every
    /// config change the host takes in (several edits read at once are one
    /// generation, with `coalesced` saying how many).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
    /// For a policy row: `true` when, after this event, the policy denies
    /// every call because its latest config could not be applied (the row's
    /// `on_invalid_config = "deny"`); `false` on the event that ends such a
    /// period, and on a `reload-failed` after which the last good config
    /// keeps deciding (`on_invalid_config = "keep"`). Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_closed: Option<bool>,
    /// How many distinct writes of the config files the host saw before it
    /// read them for this generation, when more than one (only the last
    /// content was read; the earlier ones never applied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coalesced: Option<u32>,
    /// On `loaded`: the digest of the version this one replaced (a hot
    /// reload; equal to `digest` when only the row's config changed).
    /// Absent on a first load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
    /// On `loaded`: the row is a dev build (`dev = true`, `wharf plugin dev`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dev: bool,
}

impl PluginChange {
    /// What a surface announces for a `plugin/loaded` that replaced another
    /// version of the row's component: `NAME reloaded`, or
    /// `NAME reloaded (dev)` for a dev row. `None` for a first load and for
    /// a change of the row's config only (same component).
    pub fn reload_notice(&self) -> Option<String> {
        let old = self.replaces.as_deref()?;
        (old != self.digest).then(|| format!("{} reloaded{}", self.id, if self.dev { " (dev)" } else { "" }))
    }
}

/// One participant's vote in a permission decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyVote {
    /// `policy` or `hook`.
    pub source: String,
    /// Plugin id.
    pub plugin: String,
    /// Plugin version digest.
    pub version: String,
    /// Digest of the plugin's configuration that decided (as in the row's
    /// `plugin/loaded`), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    /// The decision, when it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    /// Why it failed (counted as deny), when it did not answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The composed verdict of a permission decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "lowercase")]
pub enum Verdict {
    /// Proceed.
    Allow,
    /// Refuse.
    Deny {
        /// Reasons of every deny, joined.
        reason: String,
    },
    /// Ask the approval service.
    Ask {
        /// Reasons of every ask, joined.
        reason: String,
    },
}

/// `policy/decision`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyDecisionEvent {
    /// The call concerned.
    pub call_id: String,
    /// Tool name.
    pub tool: String,
    /// The composed verdict.
    #[serde(flatten)]
    pub verdict: Verdict,
    /// The arguments after rewrites, when some participant rewrote them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewritten: Option<Value>,
    /// Every vote, in profile order.
    #[serde(default)]
    pub votes: Vec<PolicyVote>,
}

/// Outcome of an approval request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalOutcome {
    /// Run this call.
    AllowedOnce,
    /// Run this call and later calls of the same tool in this session.
    AllowedForSession,
    /// Do not run it.
    Rejected,
    /// The question was withdrawn (turn cancelled, surface gone).
    Cancelled,
}

/// `approval/asked`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalAsked {
    /// The call concerned.
    pub call_id: String,
    /// Tool name.
    pub tool: String,
    /// Why approval is needed.
    pub reason: String,
    /// The arguments that would run.
    pub arguments: Value,
}

/// `approval/decided`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalDecided {
    /// The call concerned.
    pub call_id: String,
    /// The outcome.
    pub outcome: ApprovalOutcome,
    /// Who decided (`headless(rule=deny)`, `session-grant`, a surface name …).
    pub by: String,
    /// Explanation, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// `llm/retry`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LlmRetry {
    /// Turn number.
    pub turn: u64,
    /// Step number.
    pub step: u32,
    /// Retry number, from 1.
    pub attempt: u32,
    /// The error that caused it.
    pub code: LlmErrorCode,
    /// Wait before the retry.
    pub delay_ms: u64,
    /// The error message.
    #[serde(default)]
    pub message: String,
}

/// `compaction/summary`: model-visible history from `from_seq` to `to_seq`
/// (inclusive) is replaced by `summary`; the raw events stay in the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactionSummary {
    /// First seq replaced.
    pub from_seq: u64,
    /// Last seq replaced.
    pub to_seq: u64,
    /// The summary text.
    pub summary: String,
}

/// What happened to the inbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InboxOp {
    /// A message was queued.
    Added,
    /// A step took the message (a `user/message` follows).
    Claimed,
    /// The message was dropped (cancellation).
    Discarded,
}

/// `inbox/spliced`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboxSpliced {
    /// The change.
    pub op: InboxOp,
    /// Item id (unique within the session).
    pub id: String,
    /// Queue of the item.
    pub kind: InboxKind,
    /// The text (on `added` only).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
}

/// `todo/updated`: the whole todo list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TodoUpdated {
    /// The list as the todo tool reports it.
    pub items: Value,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn samples() -> Vec<EventKind> {
        let change = PluginChange {
            id: "p".into(),
            digest: "d".into(),
            config: Some("c".into()),
            generation: Some(2),
            fail_closed: Some(true),
            coalesced: Some(3),
            replaces: Some("o".into()),
            dev: true,
            ..PluginChange::default()
        };
        vec![
            EventKind::SessionStart(SessionStart {
                id: "s".into(),
                format: FORMAT_VERSION,
                created: "t".into(),
                parent: None,
                fork_seq: None,
                workspace: None,
                profile: Some("p".into()),
                spawned_by: Some(SpawnedBy { session: "parent".into(), call_id: "c1".into(), depth: 1 }),
            }),
            EventKind::SessionRepaired(SessionRepaired { torn_line: 3, torn_bytes: 10 }),
            EventKind::TurnStart(TurnStart { turn: 1 }),
            EventKind::TurnEnd(TurnEnd { turn: 1, reason: StopReason::Completed }),
            EventKind::StepStart(StepStart { turn: 1, step: 1 }),
            EventKind::StepEnd(StepEnd { turn: 1, step: 1, usage: None }),
            EventKind::UserMessage(UserMessage { content: "hi".into(), inbox_id: None, images: vec![] }),
            EventKind::AssistantChunk(AssistantChunk { turn: 1, step: 1, text: "a".into(), reasoning: String::new() }),
            EventKind::AssistantMessage(AssistantMessage {
                turn: 1,
                step: 1,
                content: "x".into(),
                reasoning: None,
                tool_calls: vec![],
                usage: None,
                finish: None,
                interrupted: false,
            }),
            EventKind::ToolCall(ToolCallEvent {
                turn: 1,
                step: 1,
                id: "c".into(),
                name: "n".into(),
                arguments: "{}".into(),
                parent: None,
            }),
            EventKind::ToolResult(ToolResultEvent {
                turn: 1,
                step: 1,
                call_id: "c".into(),
                name: "n".into(),
                content: "ok".into(),
                is_error: false,
                error_code: None,
                plugin: None,
                version: None,
                truncated: false,
                original_bytes: None,
                full_content: None,
                duration_ms: None,
                details: None,
            }),
            EventKind::PluginLoaded(change.clone()),
            EventKind::PluginUnloaded(change.clone()),
            EventKind::PluginReloadFailed(change),
            EventKind::PolicyDecision(PolicyDecisionEvent {
                call_id: "c".into(),
                tool: "n".into(),
                verdict: Verdict::Deny { reason: "no".into() },
                rewritten: None,
                votes: vec![],
            }),
            EventKind::ApprovalAsked(ApprovalAsked {
                call_id: "c".into(),
                tool: "n".into(),
                reason: "r".into(),
                arguments: Value::Null,
            }),
            EventKind::ApprovalDecided(ApprovalDecided {
                call_id: "c".into(),
                outcome: ApprovalOutcome::AllowedForSession,
                by: "x".into(),
                note: None,
            }),
            EventKind::LlmRetry(LlmRetry {
                turn: 1,
                step: 1,
                attempt: 1,
                code: LlmErrorCode::RateLimit,
                delay_ms: 5,
                message: String::new(),
            }),
            EventKind::CompactionSummary(CompactionSummary { from_seq: 2, to_seq: 3, summary: "s".into() }),
            EventKind::InboxSpliced(InboxSpliced {
                op: InboxOp::Added,
                id: "i".into(),
                kind: InboxKind::Followup,
                text: "t".into(),
            }),
            EventKind::TodoUpdated(TodoUpdated { items: serde_json::json!([]) }),
            EventKind::ToolProgress(ToolProgress { call_id: "c".into(), text: "1\n".into() }),
        ]
    }

    #[test]
    fn every_variant_round_trips_and_is_listed() {
        let samples = samples();
        assert_eq!(samples.len(), KNOWN_TYPES.len());
        for (i, kind) in samples.into_iter().enumerate() {
            let name = kind.type_name().to_string();
            assert!(EventKind::is_known_type(&name), "{name} missing from KNOWN_TYPES");
            let ev = Event { seq: i as u64 + 1, time: "t".into(), ignorable: false, kind };
            let line = ev.to_json_line().unwrap();
            let v: Value = serde_json::from_str(&line).unwrap();
            assert_eq!(v["type"], Value::String(name.clone()));
            assert!(v.get("ignorable").is_none());
            assert_eq!(Event::decode(&line).unwrap(), ev, "{line}");
        }
    }

    #[test]
    fn wire_shape_of_turn_end_and_envelope() {
        let ev = Event {
            seq: 9,
            time: "2026-05-01T00:00:00.000Z".into(),
            ignorable: false,
            kind: EventKind::TurnEnd(TurnEnd {
                turn: 2,
                reason: StopReason::Error { code: "RATE_LIMIT".into(), message: "slow down".into() },
            }),
        };
        assert_eq!(
            ev.to_json_line().unwrap(),
            r#"{"seq":9,"time":"2026-05-01T00:00:00.000Z","type":"turn/end","data":{"turn":2,"reason":"error","code":"RATE_LIMIT","message":"slow down"}}"#
        );
        let done = r#"{"seq":3,"time":"t","type":"turn/end","data":{"turn":1,"reason":"completed"}}"#;
        let ev = Event::decode(done).unwrap();
        assert_eq!(ev.kind, EventKind::TurnEnd(TurnEnd { turn: 1, reason: StopReason::Completed }));
    }

    #[test]
    fn unknown_types_refused_unless_ignorable() {
        let line = r#"{"seq":2,"time":"t","type":"future/thing","data":{"x":1}}"#;
        assert_eq!(Event::decode(line), Err(DecodeError::UnknownType("future/thing".into())));
        assert!(serde_json::from_str::<Event>(line).is_err());

        let line = r#"{"seq":2,"time":"t","type":"future/thing","data":{"x":1},"ignorable":true}"#;
        let ev = Event::decode(line).unwrap();
        assert!(matches!(&ev.kind, EventKind::Unknown { type_name, .. } if type_name == "future/thing"));
        assert_eq!(ev.to_json_line().unwrap(), line);
    }

    #[test]
    fn host_ignorable_types_stay_outside_the_typed_vocabulary() {
        // Older readers must be able to skip them: never a known type.
        for name in HOST_IGNORABLE_TYPES {
            assert!(!EventKind::is_known_type(name), "{name}");
        }
        let line = r#"{"seq":4,"time":"t","type":"session/model","data":{"adapter":"a","model":"m","reason":"initial"},"ignorable":true}"#;
        let ev = Event::decode(line).unwrap();
        assert_eq!(ev.type_name(), MODEL_EVENT);
        assert_eq!(ev.to_json_line().unwrap(), line);
    }

    #[test]
    fn old_tool_results_parse_and_encode_byte_for_byte() {
        // Lines as older builds wrote them: a host code and a tool's own.
        for line in [
            r#"{"seq":9,"time":"2026-05-01T00:00:00.000Z","type":"tool/result","data":{"turn":1,"step":1,"call_id":"c1","name":"t","content":"Error: denied by policy: no","is_error":true,"error_code":"DENIED"}}"#,
            r#"{"seq":9,"time":"t","type":"tool/result","data":{"turn":1,"step":1,"call_id":"c1","name":"t","content":"gone","is_error":true,"error_code":"NOT_FOUND","plugin":"fs","version":"d"}}"#,
            r#"{"seq":9,"time":"t","type":"tool/result","data":{"turn":1,"step":1,"call_id":"c1","name":"t","content":"ok","is_error":false}}"#,
        ] {
            let ev = Event::decode(line).unwrap();
            assert_eq!(ev.to_json_line().unwrap(), line);
        }
        let ev = Event::decode(r#"{"seq":1,"time":"t","type":"tool/result","data":{"turn":1,"step":1,"call_id":"c","name":"t","content":"","is_error":true,"error_code":"INTERRUPTED"}}"#).unwrap();
        assert!(matches!(ev.kind, EventKind::ToolResult(r) if r.error_code == Some(ToolErrorCode::Interrupted)));
    }

    #[test]
    fn known_type_with_bad_data_is_malformed() {
        let line = r#"{"seq":2,"time":"t","type":"turn/start","data":{"turn":"x"}}"#;
        assert!(matches!(Event::decode(line), Err(DecodeError::Malformed(_))));
        assert!(matches!(Event::decode("{\"seq\":"), Err(DecodeError::Malformed(_))));
    }

    #[test]
    fn a_reload_of_another_component_is_announced_a_config_change_is_not() {
        let mut p = PluginChange { id: "wc".into(), digest: "new".into(), ..PluginChange::default() };
        assert_eq!(p.reload_notice(), None, "first load");
        p.replaces = Some("new".into());
        assert_eq!(p.reload_notice(), None, "config only");
        p.replaces = Some("old".into());
        assert_eq!(p.reload_notice().as_deref(), Some("wc reloaded"));
        p.dev = true;
        assert_eq!(p.reload_notice().as_deref(), Some("wc reloaded (dev)"));
        // Older logs without the fields still read.
        let ev =
            Event::decode(r#"{"seq":1,"time":"t","type":"plugin/loaded","data":{"id":"wc","digest":"d"}}"#).unwrap();
        assert!(matches!(ev.kind, EventKind::PluginLoaded(c) if !c.dev && c.replaces.is_none()));
    }
}
