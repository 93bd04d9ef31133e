//! Tool plugins: the [`ToolPlugin`] trait, typed arguments and results.

use std::io;

use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::raw::wharf::plugin::types::{CallContext, PluginInfo, ToolError, ToolMode, ToolOutput, ToolSpec};

/// What a tool call returns.
pub type ToolResult = Result<ToolOutput, ToolError>;

/// A component that offers tools (world `tool-plugin`). Export it with
/// [`export_tool!`](crate::export_tool).
///
/// Every call runs in a fresh instance (unless the operator opts the plugin
/// into warm instances): keep nothing in memory between calls, use
/// [`kv`](crate::kv) instead.
pub trait ToolPlugin {
    /// Self-description. Must not depend on configuration or grants.
    fn info() -> PluginInfo;

    /// The tools offered. Called once per loaded version.
    fn tools() -> Vec<ToolSpec>;

    /// Runs tool `name`. The host has already validated `args` against the
    /// tool's schema; [`Args::parse`] turns them into your type. Return
    /// [`ToolError`]s for failures the model should see and repair; a panic
    /// traps the instance and is reported as `TRAP`.
    fn call(name: &str, args: Args, ctx: &CallContext) -> ToolResult;
}

/// The arguments of a call: a JSON object as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    json: String,
}

impl Args {
    /// Wraps the JSON text of an arguments object.
    pub fn new(json: impl Into<String>) -> Self {
        Self { json: json.into() }
    }

    /// The JSON text as received (`{}` when the host sent nothing).
    pub fn as_str(&self) -> &str {
        if self.json.trim().is_empty() { "{}" } else { &self.json }
    }

    /// Deserializes the arguments into `T`; a mismatch becomes an
    /// `INVALID_ARGUMENT` error that tells the model what was wrong.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, ToolError> {
        serde_json::from_str(self.as_str()).map_err(|e| ToolError::invalid_argument(format!("invalid arguments: {e}")))
    }

    /// The arguments as a JSON value.
    pub fn value(&self) -> Result<Value, ToolError> {
        self.parse()
    }
}

/// The arguments type of a tool that takes none: its schema is an empty
/// object.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
pub struct NoArgs {}

impl ToolSpec {
    /// A tool whose input schema is derived from `A` (see
    /// [`schema::schema_for`](crate::schema::schema_for)). Document the fields
    /// of `A`: their doc comments are what the model reads.
    pub fn new<A: JsonSchema>(name: impl Into<String>, description: impl Into<String>, mode: ToolMode) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            input_schema: crate::schema::schema_text_for::<A>(),
            mode,
        }
    }

    /// A tool with a hand-written JSON Schema.
    pub fn with_schema(
        name: impl Into<String>,
        description: impl Into<String>,
        schema: &Value,
        mode: ToolMode,
    ) -> Self {
        Self { name: name.into(), description: description.into(), input_schema: schema.to_string(), mode }
    }
}

impl ToolOutput {
    /// Text for the model, no details.
    pub fn text(content: impl Into<String>) -> Self {
        Self { content: content.into(), details: None }
    }

    /// Adds structured details for surfaces (never shown to the model).
    pub fn with_details(mut self, details: &Value) -> Self {
        self.details = Some(details.to_string());
        self
    }
}

impl From<String> for ToolOutput {
    fn from(content: String) -> Self {
        Self::text(content)
    }
}

impl From<&str> for ToolOutput {
    fn from(content: &str) -> Self {
        Self::text(content)
    }
}

impl ToolError {
    /// An error with a stable `SCREAMING_SNAKE_CASE` code.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self { code: code.into(), message: message.into() }
    }

    /// `INVALID_ARGUMENT`: the arguments make no sense.
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Self::new("INVALID_ARGUMENT", message)
    }

    /// `NOT_FOUND`: the thing named does not exist.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new("NOT_FOUND", message)
    }

    /// `PERMISSION_DENIED`: not allowed (by the sandbox or the plugin's rules).
    pub fn permission_denied(message: impl Into<String>) -> Self {
        Self::new("PERMISSION_DENIED", message)
    }

    /// `UNKNOWN_TOOL`: the plugin does not offer a tool of that name.
    pub fn unknown_tool(name: &str) -> Self {
        Self::new("UNKNOWN_TOOL", format!("this plugin has no tool named `{name}`"))
    }

    /// `INTERNAL`: a bug or an unexpected state in the plugin.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new("INTERNAL", message)
    }

    /// Maps an I/O error to a stable code (see [`io_code`]).
    pub fn io(err: &io::Error) -> Self {
        Self::new(io_code(err), err.to_string())
    }

    /// [`ToolError::io`] with what was being done, e.g. the path:
    /// `NOT_FOUND: /tmp/x: No such file or directory (os error 44)`.
    pub fn io_at(context: impl std::fmt::Display, err: &io::Error) -> Self {
        Self::new(io_code(err), format!("{context}: {err}"))
    }
}

impl From<io::Error> for ToolError {
    fn from(err: io::Error) -> Self {
        Self::io(&err)
    }
}

impl From<serde_json::Error> for ToolError {
    fn from(err: serde_json::Error) -> Self {
        Self::invalid_argument(err.to_string())
    }
}

/// The stable error code for an I/O error: `NOT_FOUND`, `PERMISSION_DENIED`
/// (also for a read-only filesystem), `ALREADY_EXISTS`, `NOT_A_DIRECTORY`,
/// `IS_A_DIRECTORY`, `DIRECTORY_NOT_EMPTY`, `INVALID_ARGUMENT`, `TIMEOUT`,
/// `UNSUPPORTED`, `RESOURCE_EXHAUSTED`, `NETWORK`, else `IO`.
pub fn io_code(err: &io::Error) -> &'static str {
    use io::ErrorKind as K;
    match err.kind() {
        K::NotFound => "NOT_FOUND",
        K::PermissionDenied | K::ReadOnlyFilesystem => "PERMISSION_DENIED",
        K::AlreadyExists => "ALREADY_EXISTS",
        K::NotADirectory => "NOT_A_DIRECTORY",
        K::IsADirectory => "IS_A_DIRECTORY",
        K::DirectoryNotEmpty => "DIRECTORY_NOT_EMPTY",
        K::InvalidInput | K::InvalidData | K::InvalidFilename => "INVALID_ARGUMENT",
        K::TimedOut => "TIMEOUT",
        K::Unsupported => "UNSUPPORTED",
        K::StorageFull | K::QuotaExceeded | K::FileTooLarge | K::OutOfMemory => "RESOURCE_EXHAUSTED",
        K::ConnectionRefused
        | K::ConnectionReset
        | K::ConnectionAborted
        | K::NotConnected
        | K::HostUnreachable
        | K::NetworkUnreachable
        | K::NetworkDown
        | K::AddrInUse
        | K::AddrNotAvailable => "NETWORK",
        _ => "IO",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize, JsonSchema, PartialEq)]
    struct A {
        path: String,
    }

    #[test]
    fn parse_ok_and_invalid() {
        let a: A = Args::new(r#"{"path":"x"}"#).parse().unwrap();
        assert_eq!(a, A { path: "x".into() });
        let e = Args::new(r#"{"nope":1}"#).parse::<A>().unwrap_err();
        assert_eq!(e.code, "INVALID_ARGUMENT");
        assert!(e.message.contains("path"), "{}", e.message);
        let _: NoArgs = Args::new("").parse().unwrap();
    }

    #[test]
    fn io_codes() {
        let e = ToolError::io_at("/x", &io::Error::from(io::ErrorKind::NotFound));
        assert_eq!(e.code, "NOT_FOUND");
        assert!(e.message.starts_with("/x: "));
        assert_eq!(io_code(&io::Error::from(io::ErrorKind::PermissionDenied)), "PERMISSION_DENIED");
        assert_eq!(io_code(&io::Error::other("x")), "IO");
    }

    #[test]
    fn spec_has_schema() {
        let s = ToolSpec::new::<A>("t", "d", ToolMode::Parallel);
        let v: Value = serde_json::from_str(&s.input_schema).unwrap();
        assert_eq!(v["properties"]["path"]["type"], "string");
    }
}
