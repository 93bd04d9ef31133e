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
//! `instructions` (text added to every child's system prompt), `presets`
//! (named children: `[{name, description, instructions, tools}]`, which
//! the host fills from plugin bundles' `agents/*.md`). A preset's name is
//! offered as the `agent` argument (its names and descriptions are in the
//! tool's description); its instructions become the child's system-prompt
//! text and its `tools` bound what the child may use.

use serde::Deserialize;
use wharf_sdk::agents::AgentTask;
use wharf_sdk::prelude::*;

const DEFAULT_MAX_STEPS: u32 = 20;
/// Most presets named in the tool's description.
const MAX_LISTED_PRESETS: usize = 32;
/// Most characters of one preset's description there.
const MAX_PRESET_DESCRIPTION: usize = 300;

/// A named child (config `presets`).
#[derive(Deserialize, Clone)]
struct Preset {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    instructions: String,
    /// Tools the child may use; empty: the caller's choice (all of its).
    #[serde(default)]
    tools: Vec<String>,
}

fn presets() -> Vec<Preset> {
    wharf_sdk::config::key::<Vec<Preset>>("presets").ok().flatten().unwrap_or_default()
}

const DESCRIPTION: &str = "Delegate a self-contained task to a child agent and get its final answer. The child \
    starts with an empty conversation (put everything it needs in `task`), may use only the tools you list \
    (default: all of yours), and is subject to the same permissions. Use it for focused research or work whose \
    intermediate steps you do not need to see. Children can nest at most 3 deep.";

fn description(presets: &[Preset]) -> String {
    if presets.is_empty() {
        return DESCRIPTION.to_string();
    }
    let mut d = format!(
        "{DESCRIPTION}\n\nPresets (pass the name as `agent`; the preset gives the child its instructions and \
         tools):"
    );
    for p in presets.iter().take(MAX_LISTED_PRESETS) {
        let text: String = p.description.chars().take(MAX_PRESET_DESCRIPTION).collect();
        d.push_str(&format!("\n- {}: {}", p.name, text.replace('\n', " ")));
    }
    if presets.len() > MAX_LISTED_PRESETS {
        d.push_str(&format!("\n(and {} more)", presets.len() - MAX_LISTED_PRESETS));
    }
    d
}

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
    /// A preset to run (see the description): its instructions and tools.
    #[serde(default)]
    agent: Option<String>,
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
        let presets = presets();
        let spec = ToolSpec::new::<SubagentArgs>("subagent", description(&presets), ToolMode::Parallel);
        if presets.is_empty() {
            return vec![spec];
        }
        // The preset names as the `agent` argument's choices.
        let Ok(mut schema) = serde_json::from_str::<serde_json::Value>(&spec.input_schema) else { return vec![spec] };
        let names: Vec<&str> = presets.iter().map(|p| p.name.as_str()).collect();
        if let Some(agent) = schema.pointer_mut("/properties/agent") {
            *agent = serde_json::json!({
                "type": "string",
                "enum": names,
                "description": "A preset to run (see the description): its instructions and tools."
            });
        }
        vec![ToolSpec::with_schema("subagent", spec.description, &schema, ToolMode::Parallel)]
    }

    fn call(name: &str, args: Args, _ctx: &CallContext) -> ToolResult {
        if name != "subagent" {
            return Err(ToolError::unknown_tool(name));
        }
        let a: SubagentArgs = args.parse()?;
        let default_steps = wharf_sdk::config::key::<u32>("max_steps").ok().flatten().unwrap_or(DEFAULT_MAX_STEPS);
        let mut instructions = wharf_sdk::config::key::<String>("instructions").ok().flatten();
        let mut tools = a.tools;
        if let Some(name) = a.agent.as_deref().filter(|n| !n.is_empty()) {
            let all = presets();
            let Some(p) = all.iter().find(|p| p.name == name) else {
                let names: Vec<&str> = all.iter().map(|p| p.name.as_str()).collect();
                return Err(ToolError::new(
                    "UNKNOWN_PRESET",
                    format!(
                        "no preset `{name}` (presets: {})",
                        if names.is_empty() { "none".into() } else { names.join(", ") }
                    ),
                ));
            };
            if !p.tools.is_empty() {
                // The preset bounds the child's tools; a list given too narrows it.
                let narrowed: Vec<String> = if tools.is_empty() {
                    p.tools.clone()
                } else {
                    tools.into_iter().filter(|t| p.tools.contains(t)).collect()
                };
                if narrowed.is_empty() {
                    return Err(ToolError::new(
                        "INVALID_ARGUMENTS",
                        format!("preset `{name}` may use only {}", p.tools.join(", ")),
                    ));
                }
                tools = narrowed;
            }
            let own = p.instructions.trim();
            instructions = match (instructions.filter(|i| !i.trim().is_empty()), own.is_empty()) {
                (Some(i), false) => Some(format!("{own}\n\n{i}")),
                (Some(i), true) => Some(i),
                (None, false) => Some(own.to_string()),
                (None, true) => None,
            };
        }
        let task =
            AgentTask { prompt: a.task, tools, max_steps: Some(a.max_steps.unwrap_or(default_steps)), instructions };
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
