//! The seams between the core and whatever provides capabilities.
//!
//! The core never knows it is talking to WebAssembly: the runtime crate turns
//! components into these traits, and tests use native fakes. Every
//! implementation names the plugin version that produced it ([`PluginRef`]),
//! so results in the session log can be traced to an exact component digest.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// A boxed, sendable future (the traits here must be object-safe).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Which plugin version provided something: the profile row id, the
/// content digest of the component (hex sha-256) and, for a component, the
/// digest of the configuration it runs with (two configs of one component
/// are two versions).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PluginRef {
    /// Stable id of the plugin (profile row id).
    pub id: String,
    /// Content digest of the loaded version.
    pub digest: String,
    /// Digest of the version's configuration (hex sha-256 of its JSON with
    /// object keys sorted), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
}

impl PluginRef {
    /// A reference for native code (tests, host-internal listeners).
    pub fn native(id: &str) -> Self {
        Self { id: id.to_string(), digest: "native".to_string(), config: None }
    }

    /// The first 12 hex digits of the config digest, for humans.
    pub fn short_config(&self) -> Option<&str> {
        self.config.as_deref().map(|c| c.get(..12).unwrap_or(c))
    }

    /// The first 12 hex digits of the digest, for humans.
    pub fn short_digest(&self) -> &str {
        self.digest.get(..12).unwrap_or(&self.digest)
    }
}

/// How a tool may be scheduled next to other calls of the same step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolMode {
    /// May run concurrently with other parallel calls.
    Parallel,
    /// A barrier: runs alone.
    Exclusive,
}

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Unique tool name.
    pub name: String,
    /// Description for the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub input_schema: Value,
    /// Scheduling mode.
    pub mode: ToolMode,
}

/// One call to execute (arguments already validated by the pipeline).
#[derive(Clone)]
pub struct ToolInvocation {
    /// The model's id for the call.
    pub call_id: String,
    /// Tool name.
    pub name: String,
    /// Arguments object.
    pub arguments: Value,
    /// Session id.
    pub session_id: String,
    /// Session workspace directory, if any.
    pub workspace: Option<String>,
    /// What the call may ask of its session (events, the model, child
    /// agents); `None` outside a session.
    pub services: Option<Arc<dyn SessionServices>>,
}

impl std::fmt::Debug for ToolInvocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolInvocation")
            .field("call_id", &self.call_id)
            .field("name", &self.name)
            .field("arguments", &self.arguments)
            .field("session_id", &self.session_id)
            .field("workspace", &self.workspace)
            .field("services", &self.services.is_some())
            .finish()
    }
}

/// Why a session service refused or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceError {
    /// No session is behind the call.
    #[error("no session is attached to this call")]
    NoSession,
    /// The operator did not grant the capability.
    #[error("the `{0}` capability is not granted")]
    NotGranted(String),
    /// The request was malformed.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The host could not do it.
    #[error("{0}")]
    Failed(String),
    /// The call was cancelled.
    #[error("cancelled")]
    Cancelled,
}

/// A one-shot model request from a plugin (no tools).
#[derive(Debug, Clone, PartialEq)]
pub struct CompleteRequest {
    /// System prompt.
    pub system: String,
    /// Messages after it.
    pub messages: Vec<Message>,
    /// Output cap.
    pub max_tokens: Option<u32>,
}

/// What a child agent should do.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AgentTask {
    /// The child's first user message.
    pub prompt: String,
    /// Tools the child may use (subset of the parent's); empty = all of the
    /// parent's (nesting is bounded by the depth limit).
    pub tools: Vec<String>,
    /// Step budget (capped by the parent's).
    pub max_steps: Option<u32>,
    /// Extra system-prompt text.
    pub instructions: Option<String>,
}

/// How a child agent ended.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentOutcome {
    /// The child's session id.
    pub session_id: String,
    /// Text of its last assistant message.
    pub text: String,
    /// Why its turn ended (`completed`, `max_steps`, `cancelled`, ...).
    pub stop_reason: String,
    /// Steps taken.
    pub steps: u32,
}

/// What a plugin working for a session may ask of it: the `session`,
/// `model` and `agents` imports. The agent provides one per tool call (and
/// per compaction); grants are checked by the runtime before these run.
pub trait SessionServices: Send + Sync {
    /// Agent depth: 0 for a top-level agent.
    fn depth(&self) -> u32;
    /// Appends a plugin-reported event (kinds: `todo/updated`).
    fn record_event(&self, kind: &str, data: Value) -> Result<(), ServiceError>;
    /// Reports a delta of the running call's output (`tool/progress`);
    /// surfaces show it while the call runs. Past the call's progress
    /// bounds the text is dropped (`Ok(false)`): the result still holds
    /// everything.
    fn tool_progress(&self, text: &str) -> Result<bool, ServiceError> {
        let _ = text;
        Err(ServiceError::NoSession)
    }
    /// A one-shot request to the session's model; the text of the answer.
    fn complete(&self, request: CompleteRequest) -> BoxFuture<'_, Result<String, ServiceError>>;
    /// Runs a child agent to the end of its turn.
    fn run_agent(&self, task: AgentTask) -> BoxFuture<'_, Result<AgentOutcome, ServiceError>>;
    /// The session's tools the caller may call: those in `allowed` (all
    /// when `None`), never the caller's own.
    fn list_tools(&self, allowed: Option<&[String]>) -> Result<Vec<ToolSpec>, ServiceError> {
        let _ = allowed;
        Err(ServiceError::NoSession)
    }
    /// Runs `calls` through the whole tool pipeline as one scheduled batch,
    /// each logged with this call as its parent; outcomes in order.
    fn call_tools(
        &self,
        calls: Vec<ToolRequest>,
        allowed: Option<Vec<String>>,
    ) -> BoxFuture<'_, Result<Vec<ToolOutcome>, ServiceError>> {
        let _ = (calls, allowed);
        Box::pin(async { Err(ServiceError::NoSession) })
    }
    /// Registers what the call has output so far (a component's stdout):
    /// a call running as a cell shows it when it yields ([`crate::cells`]).
    /// Ignored by calls that cannot yield.
    fn set_progress(&self, source: crate::cells::ProgressFn) {
        let _ = source;
    }
    /// For a durable call ([`Tool::durable`]): the clock and random seed
    /// its sandbox must give the program. `None`: the real ones.
    fn determinism(&self) -> Option<Determinism> {
        None
    }
    /// Asks the session's user a question for this call
    /// ([`crate::question`]): logged (`question/asked`, `question/answered`),
    /// answered by the session's approval service, withdrawn (`cancel`) when
    /// the turn is cancelled or the call ends first. `source` names the asker.
    fn ask_user(
        &self,
        source: String,
        form: crate::question::Form,
    ) -> BoxFuture<'_, Result<crate::question::Reply, ServiceError>> {
        let _ = (source, form);
        Box::pin(async { Err(ServiceError::NoSession) })
    }
}

/// One call a program asks for (the `tools` import).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolRequest {
    /// Tool name.
    pub name: String,
    /// Arguments as JSON text.
    pub arguments: String,
}

/// Writes compaction summaries (a `compactor` plugin).
pub trait Compactor: Send + Sync {
    /// The plugin version providing it.
    fn plugin(&self) -> &PluginRef;
    /// Summarises `messages` in at most about `target_tokens` tokens.
    fn summarize(
        &self,
        messages: Vec<Message>,
        target_tokens: u32,
        services: Arc<dyn SessionServices>,
    ) -> BoxFuture<'_, Result<String, PluginError>>;
}

/// What a tool execution produced. Errors are data, never panics: the loop
/// turns them into `tool/result{is_error}` so the model can repair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolOutcome {
    /// Text for the model.
    pub content: String,
    /// Whether the call failed.
    pub is_error: bool,
    /// Stable error code when it failed (`TIMEOUT`, `TRAP`, `NOT_FOUND` …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<ToolErrorCode>,
    /// Structured details for surfaces (not shown to the model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

impl ToolOutcome {
    /// A successful result.
    pub fn ok(content: impl Into<String>) -> Self {
        Self { content: content.into(), is_error: false, error_code: None, details: None }
    }

    /// A failed result with a stable code.
    pub fn error(code: impl Into<ToolErrorCode>, message: impl Into<String>) -> Self {
        Self { content: message.into(), is_error: true, error_code: Some(code.into()), details: None }
    }
}

/// A callable tool.
pub trait Tool: Send + Sync {
    /// The tool's spec.
    fn spec(&self) -> &ToolSpec;
    /// The plugin version providing it.
    fn plugin(&self) -> &PluginRef;
    /// Executes one call. Must honour `cancel` (return promptly with an
    /// `ABORTED` error when it fires) and never panic.
    fn call(&self, call: ToolInvocation, cancel: CancellationToken) -> BoxFuture<'_, ToolOutcome>;
    /// The session's tools this tool's calls may call in turn (Code Mode:
    /// the runtime's `tools` grant); `None` for an ordinary tool. The agent
    /// appends the catalogue of those tools to the description the model
    /// sees ([`crate::catalog`]).
    fn reach(&self) -> Option<&ToolReach> {
        None
    }
    /// When set, a call still running after this long returns with its
    /// output so far and goes on as a cell of the session
    /// ([`crate::cells`]): the operator's opt-in (a row's grant), never the
    /// tool's own. `None`: calls run to their end, as usual.
    fn yield_window(&self) -> Option<std::time::Duration> {
        None
    }
    /// Whether a call of this tool interrupted by a crash is re-run when
    /// its session reopens, its inner calls answered from the log
    /// ([`crate::durable`]): the operator's opt-in (a row's grant), for a
    /// tool whose only effects go through the calls it makes and that is
    /// deterministic given their results, the clock and random numbers of
    /// [`SessionServices::determinism`].
    fn durable(&self) -> bool {
        false
    }
}

/// What a durable call's program sees as its clock and random numbers
/// ([`crate::durable`]): both come from the log, so a replay sees the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Determinism {
    /// Seeds the call's random numbers (from the session and call ids).
    pub seed: u64,
    /// The wall clock's first reading, Unix ms (the call's logged start);
    /// each reading after it is one millisecond later.
    pub clock_ms: u64,
}

/// Which of the session's tools a tool may call (see [`Tool::reach`]);
/// never the tools of its own plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolReach {
    /// Every tool of the session.
    All,
    /// Only these names.
    Only(Vec<String>),
}

/// Role of a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// System prompt.
    System,
    /// The user.
    User,
    /// The model.
    Assistant,
    /// A tool result.
    Tool,
}

/// A tool call requested by the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Provider id of the call.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments as JSON text, exactly as the model produced them.
    pub arguments: String,
}

/// One message of the model-visible conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Who speaks.
    pub role: Role,
    /// Text content.
    #[serde(default)]
    pub content: String,
    /// Reasoning text of an assistant message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// Tool calls of an assistant message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For tool messages: the call answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

/// A request for one model turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlmRequest {
    /// System prompt.
    pub system: String,
    /// Conversation derived from the log.
    pub messages: Vec<Message>,
    /// Tools offered (shared: the same listing serves every step on one
    /// registry snapshot).
    pub tools: Arc<[ToolSpec]>,
    /// Output cap override.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Images of user messages, each naming its message by index (lowered
    /// only to adapters with [`LlmAdapter::image_support`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<crate::images::RequestImage>,
    /// Which copy of the session's history `messages` is, when the agent
    /// loop built it from the log: an adapter holding an earlier request's
    /// messages learns from two marks that those are still the first ones
    /// (see [`crate::projection::HistoryMark::continues`]) without
    /// comparing them. Unmarked (the default) for any other request.
    #[serde(skip)]
    pub history: crate::projection::HistoryMark,
}

/// Token accounting of one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Prompt tokens served from cache.
    #[serde(default)]
    pub cache_hit_tokens: u64,
    /// Prompt tokens not served from cache.
    #[serde(default)]
    pub cache_miss_tokens: u64,
    /// Completion tokens spent reasoning.
    #[serde(default)]
    pub reasoning_tokens: u64,
}

impl Usage {
    /// Adds another request's usage to this one.
    pub fn add(&mut self, other: &Usage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.cache_hit_tokens += other.cache_hit_tokens;
        self.cache_miss_tokens += other.cache_miss_tokens;
        self.reasoning_tokens += other.reasoning_tokens;
    }
}

/// Why the model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// Natural end.
    Stop,
    /// The model wants tool results.
    ToolCalls,
    /// Output cap reached.
    MaxTokens,
    /// Provider filtered the output.
    ContentFilter,
    /// Provider capacity problem; retry.
    Retryable,
}

/// One streamed event from an adapter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data", rename_all = "snake_case")]
pub enum LlmEvent {
    /// Visible text delta.
    Text(String),
    /// Reasoning delta.
    Reasoning(String),
    /// A complete tool call.
    ToolCall(ToolCall),
    /// Usage.
    Usage(Usage),
    /// End of the turn.
    Finish(FinishReason),
}

/// Stable LLM error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum LlmErrorCode {
    /// 401/403.
    Auth,
    /// 402.
    Quota,
    /// 429.
    RateLimit,
    /// Prompt too long for the model.
    ContextWindowExceeded,
    /// 400/422.
    InvalidRequest,
    /// 5xx.
    Server,
    /// Connection failure.
    Transport,
    /// Idle or total timeout.
    Timeout,
    /// Cancelled.
    Aborted,
    /// EOF before `[DONE]`.
    StreamClosed,
    /// Unparseable response.
    MalformedResponse,
    /// Nothing returned.
    EmptyResponse,
}

impl LlmErrorCode {
    /// The code as it appears in logs (`RATE_LIMIT` …).
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
}

/// Stable codes of failed tool calls, beside [`LlmErrorCode`]: the host's
/// own — the pipeline's, the runtime's sandbox, crash repair, MCP — and,
/// as [`ToolErrorCode::Other`], whatever code a tool reports. Each reads,
/// prints and serializes as its wire string (`TIMEOUT` …), exactly what
/// session logs hold, and parsing a string gives the host's variant when
/// there is one, so every code has one spelling.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ToolErrorCode {
    /// `UNKNOWN_TOOL`: no tool of that name in the snapshot.
    UnknownTool,
    /// `INVALID_ARGUMENTS`: the arguments are not JSON or fail the schema.
    InvalidArguments,
    /// `DENIED`: a policy or pre-execute hook denied the call.
    Denied,
    /// `APPROVAL_REJECTED`: the approval service rejected the call.
    ApprovalRejected,
    /// `APPROVAL_CANCELLED`: the approval service withdrew the question.
    ApprovalCancelled,
    /// `ABORTED_BEFORE_DISPATCH`: the turn was cancelled before dispatch.
    AbortedBeforeDispatch,
    /// `ABORTED`: the call was cancelled (and did not stop within the
    /// grace period, for the pipeline).
    Aborted,
    /// `TIMEOUT`: the call exceeded its deadline.
    Timeout,
    /// `HOST_PANIC`: the host panicked while running the call (a bug in
    /// Wharf; a component's own crash is a `TRAP`).
    HostPanic,
    /// `BLOCKED`: a post-execute hook blocked the result.
    Blocked,
    /// `INTERRUPTED`: the host stopped before the call finished (crash
    /// repair).
    Interrupted,
    /// `REPLAY_DIVERGED`: a durable program re-run after a crash asked for
    /// a call other than the one its log holds at that place
    /// ([`crate::durable`]); nothing was re-run.
    ReplayDiverged,
    /// `TRAP`: the component trapped or exited.
    Trap,
    /// `MEMORY_LIMIT`: the component went past its memory grant.
    MemoryLimit,
    /// `STACK_OVERFLOW`: the component overflowed its stack.
    StackOverflow,
    /// `OUTPUT_LIMIT`: the component's output went past the host's bound.
    OutputLimit,
    /// `HOST_ERROR`: the host could not run the call (no such export, no
    /// sandbox).
    HostError,
    /// `NOT_A_TOOL`: the component exports no tools.
    NotATool,
    /// `TOOL_ERROR`: the tool failed without a usable code of its own.
    ToolError,
    /// `MCP_TOOL_ERROR`: an MCP server answered with `isError: true`.
    McpToolError,
    /// `MCP_ERROR`: an MCP request failed (transport, protocol).
    McpError,
    /// A code outside the host's vocabulary, as a tool reported it
    /// (`NOT_FOUND`, `PERMISSION_DENIED` …).
    Other(OtherCode),
}

/// A tool's own error code ([`ToolErrorCode::Other`]); made only by
/// parsing, so it never spells one of the host's codes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OtherCode(String);

impl OtherCode {
    /// The code as the tool reported it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl ToolErrorCode {
    /// Every code of the host's own, in declaration order.
    pub const HOST: [ToolErrorCode; 21] = [
        Self::UnknownTool,
        Self::InvalidArguments,
        Self::Denied,
        Self::ApprovalRejected,
        Self::ApprovalCancelled,
        Self::AbortedBeforeDispatch,
        Self::Aborted,
        Self::Timeout,
        Self::HostPanic,
        Self::Blocked,
        Self::Interrupted,
        Self::Trap,
        Self::MemoryLimit,
        Self::StackOverflow,
        Self::OutputLimit,
        Self::HostError,
        Self::NotATool,
        Self::ToolError,
        Self::McpToolError,
        Self::McpError,
        Self::ReplayDiverged,
    ];

    /// The code as it appears in logs and on the wire (`TIMEOUT` …).
    pub fn as_str(&self) -> &str {
        match self {
            Self::UnknownTool => "UNKNOWN_TOOL",
            Self::InvalidArguments => "INVALID_ARGUMENTS",
            Self::Denied => "DENIED",
            Self::ApprovalRejected => "APPROVAL_REJECTED",
            Self::ApprovalCancelled => "APPROVAL_CANCELLED",
            Self::AbortedBeforeDispatch => "ABORTED_BEFORE_DISPATCH",
            Self::Aborted => "ABORTED",
            Self::Timeout => "TIMEOUT",
            Self::HostPanic => "HOST_PANIC",
            Self::Blocked => "BLOCKED",
            Self::Interrupted => "INTERRUPTED",
            Self::ReplayDiverged => "REPLAY_DIVERGED",
            Self::Trap => "TRAP",
            Self::MemoryLimit => "MEMORY_LIMIT",
            Self::StackOverflow => "STACK_OVERFLOW",
            Self::OutputLimit => "OUTPUT_LIMIT",
            Self::HostError => "HOST_ERROR",
            Self::NotATool => "NOT_A_TOOL",
            Self::ToolError => "TOOL_ERROR",
            Self::McpToolError => "MCP_TOOL_ERROR",
            Self::McpError => "MCP_ERROR",
            Self::Other(c) => c.as_str(),
        }
    }

    /// The code spelled `code`: the host's variant, else [`Self::Other`].
    pub fn parse(code: &str) -> Self {
        Self::HOST.iter().find(|c| c.as_str() == code).cloned().unwrap_or_else(|| Self::Other(OtherCode(code.into())))
    }
}

impl std::ops::Deref for ToolErrorCode {
    type Target = str;

    /// Reads as its wire string.
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Display for ToolErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&str> for ToolErrorCode {
    fn from(code: &str) -> Self {
        Self::parse(code)
    }
}

impl From<String> for ToolErrorCode {
    fn from(code: String) -> Self {
        match Self::parse(&code) {
            Self::Other(_) => Self::Other(OtherCode(code)),
            host => host,
        }
    }
}

impl PartialEq<str> for ToolErrorCode {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ToolErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for ToolErrorCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ToolErrorCode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Self::from)
    }
}

/// Why a call into a policy, hook or compactor failed. It prints as its
/// message, which is what `policy/decision` votes and hook traces log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PluginError {
    /// The plugin could not be run to an answer: its sandbox failed, it
    /// timed out or the host panicked; `code` says which.
    #[error("{message}")]
    Failed {
        /// The failure's code (`TIMEOUT`, `TRAP`, `HOST_PANIC` …).
        code: ToolErrorCode,
        /// What happened, naming the plugin where known.
        message: String,
    },
    /// The plugin answered with an error of its own, or with something
    /// the host cannot use.
    #[error("{0}")]
    Answer(String),
}

impl PluginError {
    /// A failure with `code`.
    pub fn failed(code: ToolErrorCode, message: impl Into<String>) -> Self {
        Self::Failed { code, message: message.into() }
    }

    /// The failure's code, if the plugin did not answer.
    pub fn code(&self) -> Option<&ToolErrorCode> {
        match self {
            Self::Failed { code, .. } => Some(code),
            Self::Answer(_) => None,
        }
    }
}

impl From<String> for PluginError {
    fn from(message: String) -> Self {
        Self::Answer(message)
    }
}

impl From<&str> for PluginError {
    fn from(message: &str) -> Self {
        Self::Answer(message.into())
    }
}

/// A failed model request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct LlmError {
    /// Stable code.
    pub code: LlmErrorCode,
    /// Human-readable message (never contains secrets).
    pub message: String,
    /// HTTP status, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    /// Server-requested retry delay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

impl LlmError {
    /// An error without HTTP details.
    pub fn new(code: LlmErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), http_status: None, retry_after_ms: None }
    }
}

/// Model name and context window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelInfo {
    /// Model id.
    pub model: String,
    /// Context window in tokens.
    pub context_window: u32,
}

/// An in-flight completion. Dropping it aborts the request.
pub trait LlmStream: Send {
    /// The next batch of events; `Ok(None)` at the end.
    fn next(&mut self) -> BoxFuture<'_, Result<Option<Vec<LlmEvent>>, LlmError>>;
}

/// A model adapter.
pub trait LlmAdapter: Send + Sync {
    /// The plugin version providing it.
    fn plugin(&self) -> &PluginRef;
    /// Model information.
    fn model(&self) -> ModelInfo;
    /// Which images the adapter takes in user messages; `None` (the
    /// default): text only, and a request with images is never sent to it.
    fn image_support(&self) -> Option<crate::images::ImageSupport> {
        None
    }
    /// Starts a completion. The request is borrowed: an adapter copies
    /// what it needs (a retry reuses it, and the history can be large).
    fn start<'a>(&'a self, request: &'a LlmRequest) -> BoxFuture<'a, Result<Box<dyn LlmStream>, LlmError>>;
    /// Starts a completion for one agent turn's request. `scope` lives for
    /// the turn and belongs to its agent alone; an adapter may keep there
    /// what it can reuse for the turn's next request (a component adapter:
    /// its instance). The default ignores it.
    fn start_in<'a>(
        &'a self,
        request: &'a LlmRequest,
        scope: &'a Arc<AdapterScope>,
    ) -> BoxFuture<'a, Result<Box<dyn LlmStream>, LlmError>> {
        let _ = scope;
        self.start(request)
    }
}

/// What an adapter keeps between the requests of one agent turn (see
/// [`LlmAdapter::start_in`]): one slot, emptied when the turn ends, so an
/// idle session holds nothing and no other session ever sees it.
#[derive(Default)]
pub struct AdapterScope {
    slot: std::sync::Mutex<Option<Box<dyn std::any::Any + Send>>>,
}

impl AdapterScope {
    /// Takes what the slot holds (another adapter's leftovers included:
    /// the taker checks it is its own).
    pub fn take(&self) -> Option<Box<dyn std::any::Any + Send>> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Puts `value` in the slot, dropping what was there.
    pub fn put(&self, value: Box<dyn std::any::Any + Send>) {
        let old = self.slot.lock().unwrap_or_else(|e| e.into_inner()).replace(value);
        drop(old);
    }

    /// Whether the slot holds something.
    pub fn is_empty(&self) -> bool {
        self.slot.lock().unwrap_or_else(|e| e.into_inner()).is_none()
    }
}

impl std::fmt::Debug for AdapterScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdapterScope").field("held", &!self.is_empty()).finish()
    }
}

/// The call a policy reviews.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyRequest {
    /// Tool name.
    pub tool: String,
    /// Plugin providing the tool.
    pub plugin: String,
    /// Arguments object.
    pub arguments: Value,
    /// Session id.
    pub session_id: String,
    /// 0 for the top agent, 1+ for subagents.
    pub agent_depth: u32,
    /// Session workspace.
    pub workspace: Option<String>,
}

/// A policy verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "lowercase")]
pub enum Decision {
    /// No objection.
    Allow,
    /// Refuse.
    Deny {
        /// Why, shown to the model.
        reason: String,
    },
    /// Ask the approval service.
    Ask {
        /// Why, shown to the human.
        reason: String,
    },
    /// Allow with other arguments.
    Rewrite {
        /// Replacement arguments object.
        args: Value,
    },
}

/// A permission policy. An `Err` means the policy failed; the pipeline treats
/// that as `deny` (fail closed) and logs the reason.
pub trait Policy: Send + Sync {
    /// The plugin version providing it.
    fn plugin(&self) -> &PluginRef;
    /// Decides on one call.
    fn evaluate(&self, request: PolicyRequest) -> BoxFuture<'_, Result<Decision, PluginError>>;
    /// Like [`Policy::evaluate`], also naming the version that decided when
    /// it is not [`Policy::plugin`]'s — a policy that reads its rules from
    /// files at each call (a bundle's hooks) names the digest of what ran.
    /// The pipeline logs that version with the vote.
    fn evaluate_versioned(
        &self,
        request: PolicyRequest,
    ) -> BoxFuture<'_, Result<(Decision, Option<PluginRef>), PluginError>> {
        Box::pin(async move { self.evaluate(request).await.map(|d| (d, None)) })
    }
    /// `Some(deadline)` when this policy may ask the session's user while
    /// it decides (a component granted `questions`): the pipeline then
    /// calls [`Policy::evaluate_asking`] with services scoped to the call
    /// under review and waits up to this deadline (the policy's own, not
    /// [`crate::pipeline::PipelineConfig::policy_timeout`]). `None` (the
    /// default): [`Policy::evaluate_versioned`] within the pipeline's
    /// policy deadline.
    fn asks(&self) -> Option<std::time::Duration> {
        None
    }
    /// [`Policy::evaluate_versioned`] with `services` through which the
    /// policy may ask the session's user about the call
    /// ([`SessionServices::ask_user`]; nothing else of them is offered). A
    /// question open when the turn is cancelled answers `cancel`, and the
    /// policy still decides.
    fn evaluate_asking(
        &self,
        request: PolicyRequest,
        services: Arc<dyn SessionServices>,
    ) -> BoxFuture<'_, Result<(Decision, Option<PluginRef>), PluginError>> {
        let _ = services;
        self.evaluate_versioned(request)
    }
}

/// Hook points of the event bus.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum HookPoint {
    /// `system-prompt` (waterfall over the prompt text).
    #[serde(rename = "system-prompt")]
    SystemPrompt,
    /// `agent/pre-step` (waterfall: enter / reject).
    #[serde(rename = "agent/pre-step")]
    AgentPreStep,
    /// `agent/request` (waterfall over the request).
    #[serde(rename = "agent/request")]
    AgentRequest,
    /// `agent/request-error` (waterfall: retry or give up).
    #[serde(rename = "agent/request-error")]
    AgentRequestError,
    /// `agent/turn-stopping` (serial: may object).
    #[serde(rename = "agent/turn-stopping")]
    AgentTurnStopping,
    /// `tools/pre-execute` (waterfall over the call).
    #[serde(rename = "tools/pre-execute")]
    ToolsPreExecute,
    /// `tools/post-execute` (waterfall over the outcome).
    #[serde(rename = "tools/post-execute")]
    ToolsPostExecute,
    /// `tools/result` (emit).
    #[serde(rename = "tools/result")]
    ToolsResult,
    /// `session/event` (emit, after commit).
    #[serde(rename = "session/event")]
    SessionEvent,
}

/// What a hook listener answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", content = "value", rename_all = "lowercase")]
pub enum HookOutcome {
    /// Continue unchanged.
    Pass,
    /// Continue with this payload (waterfall points).
    Replace(Value),
    /// Stop / object, with a reason.
    Reject(String),
}

/// A hook listener provided by a plugin.
pub trait Hook: Send + Sync {
    /// The plugin version providing it.
    fn plugin(&self) -> &PluginRef;
    /// Points and priorities (lower runs first).
    fn subscriptions(&self) -> &[(HookPoint, i32)];
    /// Handles one event. An `Err` is logged; at waterfall points it leaves
    /// the payload unchanged, except `tools/pre-execute`, where it blocks.
    fn handle(&self, point: HookPoint, payload: Value) -> BoxFuture<'_, Result<HookOutcome, PluginError>>;
}

/// A static system-prompt section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptSection {
    /// Id unique within its plugin.
    pub id: String,
    /// Sort key (lower first).
    pub order: i32,
    /// The text.
    pub text: String,
    /// The plugin version providing it.
    pub plugin: PluginRef,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The strings logs have always held, in [`ToolErrorCode::HOST`] order.
    const OLD_STRINGS: [&str; 21] = [
        "UNKNOWN_TOOL",
        "INVALID_ARGUMENTS",
        "DENIED",
        "APPROVAL_REJECTED",
        "APPROVAL_CANCELLED",
        "ABORTED_BEFORE_DISPATCH",
        "ABORTED",
        "TIMEOUT",
        "HOST_PANIC",
        "BLOCKED",
        "INTERRUPTED",
        "TRAP",
        "MEMORY_LIMIT",
        "STACK_OVERFLOW",
        "OUTPUT_LIMIT",
        "HOST_ERROR",
        "NOT_A_TOOL",
        "TOOL_ERROR",
        "MCP_TOOL_ERROR",
        "MCP_ERROR",
        "REPLAY_DIVERGED",
    ];

    #[test]
    fn tool_error_codes_round_trip_the_exact_old_strings() {
        for (code, old) in ToolErrorCode::HOST.iter().zip(OLD_STRINGS) {
            assert_eq!(code.as_str(), old);
            assert_eq!(code.to_string(), old);
            assert_eq!(serde_json::to_value(code).unwrap(), serde_json::json!(old));
            assert_eq!(serde_json::from_value::<ToolErrorCode>(serde_json::json!(old)).unwrap(), *code);
            assert_eq!(ToolErrorCode::from(old.to_string()), *code, "a host code is never `Other`");
        }
        // A tool's own code is kept as it came.
        let own = ToolErrorCode::from("NOT_FOUND");
        assert!(matches!(&own, ToolErrorCode::Other(c) if c.as_str() == "NOT_FOUND"));
        assert_eq!(serde_json::to_string(&own).unwrap(), r#""NOT_FOUND""#);
        assert_eq!(Some(own).as_deref(), Some("NOT_FOUND"));
    }

    #[test]
    fn outcomes_keep_their_wire_shape() {
        let text = r#"{"content":"no","is_error":true,"error_code":"DENIED"}"#;
        let o: ToolOutcome = serde_json::from_str(text).unwrap();
        assert_eq!(o, ToolOutcome::error(ToolErrorCode::Denied, "no"));
        assert_eq!(serde_json::to_string(&o).unwrap(), text);
    }

    #[test]
    fn plugin_errors_print_their_message() {
        let e = PluginError::failed(ToolErrorCode::Timeout, "timed out after 5 ms");
        assert_eq!((e.to_string(), e.code()), ("timed out after 5 ms".to_string(), Some(&ToolErrorCode::Timeout)));
        assert_eq!(PluginError::from("bad rewrite").to_string(), "bad rewrite");
    }
}
