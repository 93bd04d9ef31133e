//! `subagent`: the `subagent` tool runs a child agent on a self-contained
//! task and returns its final answer (the `agents` import; grant
//! `agents = true`).
//!
//! The host gives the child its own session log (its header links it to
//! this call), the tools asked for (a subset of the parent's; by default all
//! of them except `subagent` itself at the deepest level), the same
//! policies, hooks and grants, and cancels it with this call. Nesting stops
//! at depth 3.
//!
//! Config: `max_steps` (default step budget of a child, default 20),
//! `instructions` (text added to every child's system prompt).

use serde::Deserialize;
use wharf_sdk::agents::AgentTask;
use wharf_sdk::prelude::*;

const DEFAULT_MAX_STEPS: u32 = 20;

#[derive(Deserialize, JsonSchema)]
struct SubagentArgs {
    /// The task, self-contained: the child sees nothing of this conversation.
    task: String,
    /// Tools the child may use (names from your own tool list). Omit for
    /// all of yours.
    #[serde(default)]
    tools: Vec<String>,
    /// Step budget of the child (default from the plugin config).
    #[serde(default)]
    max_steps: Option<u32>,
}

struct Subagent;

impl ToolPlugin for Subagent {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "subagent",
            env!("CARGO_PKG_VERSION"),
            "Runs a child agent on a self-contained task and returns its answer.",
        )
    }

    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec::new::<SubagentArgs>(
            "subagent",
            "Delegate a self-contained task to a child agent and get its final answer. The child starts \
             with an empty conversation (put everything it needs in `task`), may use only the tools you \
             list (default: all of yours), and is subject to the same permissions. Use it for focused \
             research or work whose intermediate steps you do not need to see. Children can nest at most \
             3 deep.",
            ToolMode::Parallel,
        )]
    }

    fn call(name: &str, args: Args, _ctx: &CallContext) -> ToolResult {
        if name != "subagent" {
            return Err(ToolError::unknown_tool(name));
        }
        let a: SubagentArgs = args.parse()?;
        let default_steps = wharf_sdk::config::key::<u32>("max_steps").ok().flatten().unwrap_or(DEFAULT_MAX_STEPS);
        let instructions = wharf_sdk::config::key::<String>("instructions").ok().flatten();
        let task = AgentTask {
            prompt: a.task,
            tools: a.tools,
            max_steps: Some(a.max_steps.unwrap_or(default_steps)),
            instructions,
        };
        let r = wharf_sdk::agents::run(&task).map_err(|e| wharf_sdk::session::to_tool_error(&e))?;
        let text = if r.text.trim().is_empty() { "(the subagent gave no answer)".to_string() } else { r.text };
        let mut out = ToolOutput::text(if r.stop_reason == "completed" {
            text
        } else {
            format!("{text}\n\n(the subagent stopped early: {} after {} steps)", r.stop_reason, r.steps)
        });
        out.details = Some(
            serde_json::json!({"session_id": r.session_id, "stop_reason": r.stop_reason, "steps": r.steps}).to_string(),
        );
        Ok(out)
    }
}

wharf_sdk::export_tool!(Subagent);
