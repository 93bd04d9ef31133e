//! Permission policies: the [`PolicyPlugin`] trait.
//!
//! Policies compose with a fixed precedence: any `deny` wins, then any `ask`,
//! then `rewrite` (in profile order), then `allow`. A policy that traps, times
//! out or returns an invalid rewrite counts as `deny`.

use serde_json::Value;

pub use crate::raw::wharf::plugin::policy::{Decision, Request as PolicyRequest};
use crate::raw::wharf::plugin::types::PluginInfo;

/// A component that decides on tool calls (world `policy-plugin`). Export it
/// with [`export_policy!`](crate::export_policy). It may ask the session's
/// user before deciding with [`crate::questions::ask`] (grant `questions`;
/// the component then targets `policy-questions-plugin`).
pub trait PolicyPlugin {
    /// Self-description. Must not depend on configuration or grants.
    fn info() -> PluginInfo;

    /// Decides on one call. Runs on every call of every tool: keep it cheap.
    fn evaluate(req: PolicyRequest) -> Decision;

    /// Checks the plugin's configuration when a version loads; an error
    /// refuses the version (exported as `wharf:plugin/configure`).
    fn validate_config() -> Result<(), String> {
        Ok(())
    }
}

impl PolicyRequest {
    /// The call's arguments as JSON (`Null` if the text is not JSON).
    pub fn args(&self) -> Value {
        serde_json::from_str(&self.arguments).unwrap_or(Value::Null)
    }
}

impl Decision {
    /// Refuses, with a reason shown to the model.
    pub fn deny(reason: impl Into<String>) -> Self {
        Self::Deny(reason.into())
    }

    /// Asks a human (or the headless rule), with a reason.
    pub fn ask(reason: impl Into<String>) -> Self {
        Self::Ask(reason.into())
    }

    /// Allows the call with these arguments instead (must be an object).
    pub fn rewrite(args: &Value) -> Self {
        Self::Rewrite(args.to_string())
    }

    /// The decision's name: `allow`, `deny`, `ask` or `rewrite`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Deny(_) => "deny",
            Self::Ask(_) => "ask",
            Self::Rewrite(_) => "rewrite",
        }
    }
}
