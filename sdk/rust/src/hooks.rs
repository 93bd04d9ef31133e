//! Hook listeners and static prompt sections: the [`HooksPlugin`] trait.
//!
//! Payloads are JSON text whose shape depends on the hook point (the shapes
//! the session log uses; see `docs/architecture.md`).

use serde::Serialize;

pub use crate::raw::wharf::plugin::hooks::{HookPoint, Outcome, PromptSection, Subscription};
use crate::raw::wharf::plugin::types::PluginInfo;

/// A component that listens on hook points and/or contributes system-prompt
/// sections (world `hooks-plugin`). Export it with
/// [`export_hooks!`](crate::export_hooks).
pub trait HooksPlugin {
    /// Self-description. Must not depend on configuration or grants.
    fn info() -> PluginInfo;

    /// Points this plugin listens on. Called once per loaded version.
    fn subscriptions() -> Vec<Subscription> {
        Vec::new()
    }

    /// Static system-prompt sections. Called once per loaded version.
    fn prompt_sections() -> Vec<PromptSection> {
        Vec::new()
    }

    /// Handles one event at `point`; `payload` is JSON text.
    fn handle(point: HookPoint, payload: &str) -> Outcome {
        let _ = (point, payload);
        Outcome::Pass
    }
}

impl Subscription {
    /// Listens on `point`; lower `priority` runs first.
    pub fn new(point: HookPoint, priority: i32) -> Self {
        Self { point, priority }
    }
}

impl PromptSection {
    /// A section with a stable id (unique within the plugin) and sort key.
    pub fn new(id: impl Into<String>, order: i32, text: impl Into<String>) -> Self {
        Self { id: id.into(), order, text: text.into() }
    }
}

impl Outcome {
    /// Carries on with this payload instead (waterfall points only).
    pub fn replace_json<T: Serialize + ?Sized>(payload: &T) -> Self {
        match serde_json::to_string(payload) {
            Ok(text) => Self::Replace(text),
            Err(e) => Self::Reject(format!("hook could not serialize its payload: {e}")),
        }
    }

    /// Stops with a reason: rejects the step, objects to stopping, or blocks
    /// the call, depending on the point.
    pub fn reject(reason: impl Into<String>) -> Self {
        Self::Reject(reason.into())
    }
}

impl HookPoint {
    /// The name the host uses (`agent/pre-step` …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SystemPrompt => "system-prompt",
            Self::AgentPreStep => "agent/pre-step",
            Self::AgentRequest => "agent/request",
            Self::AgentRequestError => "agent/request-error",
            Self::AgentTurnStopping => "agent/turn-stopping",
            Self::ToolsPreExecute => "tools/pre-execute",
            Self::ToolsPostExecute => "tools/post-execute",
            Self::ToolsResult => "tools/result",
            Self::SessionEvent => "session/event",
        }
    }

    /// Parses a host name (`agent/pre-step`) or WIT name (`agent-pre-step`).
    pub fn parse(name: &str) -> Option<Self> {
        let all = [
            Self::SystemPrompt,
            Self::AgentPreStep,
            Self::AgentRequest,
            Self::AgentRequestError,
            Self::AgentTurnStopping,
            Self::ToolsPreExecute,
            Self::ToolsPostExecute,
            Self::ToolsResult,
            Self::SessionEvent,
        ];
        let wanted = name.replace('/', "-");
        all.into_iter().find(|p| p.as_str().replace('/', "-") == wanted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hook_point_names_round_trip() {
        assert_eq!(HookPoint::parse("agent/pre-step"), Some(HookPoint::AgentPreStep));
        assert_eq!(HookPoint::parse("tools-pre-execute"), Some(HookPoint::ToolsPreExecute));
        assert_eq!(HookPoint::parse("system-prompt"), Some(HookPoint::SystemPrompt));
        assert_eq!(HookPoint::parse("nope"), None);
    }
}
