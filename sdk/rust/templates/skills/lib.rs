//! `{{name}}`: a Wharf skills source. The host lists the catalog in the
//! system prompt; the model loads a skill's text with the `skill` tool.

use serde::Deserialize;
use wharf_sdk::prelude::*;

/// The skills: (name, description, text). Real plugins read `SKILL.md`
/// files from a granted directory instead.
const SKILLS: &[(&str, &str, &str)] = &[(
    "commit-message",
    "How to write a good commit message.",
    "Write a short imperative summary line (under 72 characters), a blank line, then why the change was made.",
)];

#[derive(Deserialize, JsonSchema)]
struct SkillArgs {
    /// The skill's name, from the catalog.
    name: String,
}

struct Plugin;

impl ToolPlugin for Plugin {
    fn info() -> PluginInfo {
        PluginInfo::new("{{name}}", env!("CARGO_PKG_VERSION"), "A small skills library.")
    }

    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec::new::<SkillArgs>("skill", "Loads the full text of a skill from the catalog.", ToolMode::Parallel)]
    }

    fn call(name: &str, args: Args, _ctx: &CallContext) -> ToolResult {
        match name {
            "skill" => {
                let a: SkillArgs = args.parse()?;
                Self::load(&a.name).map(ToolOutput::text).map_err(ToolError::not_found)
            }
            other => Err(ToolError::unknown_tool(other)),
        }
    }
}

impl SkillsPlugin for Plugin {
    fn catalog() -> Result<Vec<SkillSummary>, String> {
        Ok(SKILLS.iter().map(|(n, d, _)| SkillSummary::new(*n, *d)).collect())
    }

    fn load(name: &str) -> Result<String, String> {
        SKILLS.iter().find(|(n, _, _)| *n == name).map(|(_, _, t)| t.to_string()).ok_or(format!("no skill `{name}`"))
    }
}

wharf_sdk::export_skills!(Plugin);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_and_load() {
        assert_eq!(Plugin::catalog().map(|c| c.len()), Ok(1));
        assert!(Plugin::load("commit-message").is_ok());
        assert!(Plugin::load("nope").is_err());
    }
}
