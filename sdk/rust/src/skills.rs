//! Skills sources (progressive disclosure): the [`SkillsPlugin`] trait.
//!
//! The host adds the catalog to the system prompt and loads a skill's full
//! text only when the model asks for it. A skills component also exports
//! `tool` (usually offering a `skill` tool), so it implements
//! [`ToolPlugin`] too.

pub use crate::raw::wharf::plugin::skills::SkillSummary;
use crate::tool::ToolPlugin;

/// A component that serves skills (world `skills-plugin`: `plugin`, `skills`
/// and `tool`). Export it with [`export_skills!`](crate::export_skills).
pub trait SkillsPlugin: ToolPlugin {
    /// The catalog; re-read when the plugin's files change.
    fn catalog() -> Result<Vec<SkillSummary>, String>;

    /// The full text of one skill (`SKILL.md` without front matter).
    fn load(name: &str) -> Result<String, String>;
}

impl SkillSummary {
    /// A catalog entry.
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        Self { name: name.into(), description: description.into() }
    }
}
