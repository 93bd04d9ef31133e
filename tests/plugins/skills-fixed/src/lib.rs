//! Fixture: a skills source whose catalog comes from its configuration, with
//! the usual `skill` tool that loads one skill for the model.
//!
//! ```json
//! {
//!   "skills": [
//!     {"name": "release", "description": "How to cut a release.", "text": "1. Bump the version…"}
//!   ]
//! }
//! ```

use schemars::JsonSchema;
use serde::Deserialize;
use wharf_sdk::prelude::*;

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Config {
    skills: Vec<Skill>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Skill {
    name: String,
    description: String,
    text: String,
}

#[derive(Deserialize, JsonSchema)]
struct SkillArgs {
    /// Name of the skill to load, as listed in the skills catalog.
    name: String,
}

fn config() -> Result<Config, String> {
    wharf_sdk::config::get::<Config>().map_err(|e| e.to_string())
}

fn find(cfg: &Config, name: &str) -> Result<String, String> {
    cfg.skills.iter().find(|s| s.name == name).map(|s| s.text.clone()).ok_or_else(|| {
        let names: Vec<&str> = cfg.skills.iter().map(|s| s.name.as_str()).collect();
        format!("no skill named `{name}` (available: {})", names.join(", "))
    })
}

struct SkillsFixed;

impl ToolPlugin for SkillsFixed {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "skills-fixed",
            env!("CARGO_PKG_VERSION"),
            "Test skills source: a catalog from its configuration, loaded with the `skill` tool.",
        )
    }

    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec::new::<SkillArgs>(
            "skill",
            "Loads the full instructions of a skill from the skills catalog. Call it before \
             doing a task that a listed skill covers.",
            ToolMode::Parallel,
        )]
    }

    fn call(name: &str, args: Args, _ctx: &CallContext) -> ToolResult {
        match name {
            "skill" => {
                let a: SkillArgs = args.parse()?;
                let cfg = config().map_err(|e| ToolError::new("CONFIG", e))?;
                find(&cfg, &a.name).map(ToolOutput::text).map_err(ToolError::not_found)
            }
            other => Err(ToolError::unknown_tool(other)),
        }
    }
}

impl SkillsPlugin for SkillsFixed {
    fn catalog() -> Result<Vec<SkillSummary>, String> {
        Ok(config()?.skills.into_iter().map(|s| SkillSummary::new(s.name, s.description)).collect())
    }

    fn load(name: &str) -> Result<String, String> {
        find(&config()?, name)
    }
}

wharf_sdk::export_skills!(SkillsFixed);
