//! Slash commands the host offers beyond a surface's own (`/model`,
//! `/compact`, …): today the `commands/*.md` of `[[bundle]]` rows. A
//! surface lists them ([`Harness::commands`]) and turns `/NAME ARGS` into
//! the prompt it stands for ([`Harness::expand_command`]).

use serde::Serialize;

use crate::Harness;

/// One slash command, as surfaces show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlashCommand {
    /// Typed as `/NAME`.
    pub name: String,
    /// Also typed as `/QUALIFIED` (`BUNDLE:NAME`).
    pub qualified: String,
    /// What it does.
    pub description: String,
    /// What arguments it takes, if it says.
    pub argument_hint: Option<String>,
    /// Where it comes from (`bundle:NAME`).
    pub source: String,
}

impl Harness {
    /// The commands of the host's bundles, in row order. A name two bundles
    /// share is typed qualified for the second.
    pub fn commands(&self) -> Vec<SlashCommand> {
        let mut out: Vec<SlashCommand> = Vec::new();
        for lb in self.bundles() {
            for c in &lb.bundle.commands {
                let qualified = format!("{}:{}", lb.row.name, c.name);
                let name = if out.iter().any(|o| o.name == c.name) { qualified.clone() } else { c.name.clone() };
                out.push(SlashCommand {
                    name,
                    qualified,
                    description: c.description.clone(),
                    argument_hint: c.argument_hint.clone(),
                    source: format!("bundle:{}", lb.row.name),
                });
            }
        }
        out
    }

    /// The prompt `line` (`/NAME ARGS`) stands for, when `NAME` is one of
    /// [`Harness::commands`]; `None` for any other line. The command's file
    /// is read again, so an edit shows at once.
    pub fn expand_command(&self, line: &str) -> Option<String> {
        let rest = line.trim_start().strip_prefix('/')?;
        let (name, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        let listed = self.commands();
        let hit = listed.iter().find(|c| c.name == name || c.qualified == name)?;
        let (bundle, cmd) = hit.qualified.split_once(':')?;
        let lb = self.bundles().iter().find(|b| b.row.name == bundle)?;
        let c = lb.bundle.commands.iter().find(|c| c.name == cmd)?;
        let fresh = c.reread().unwrap_or_else(|_| c.clone());
        Some(fresh.expand(args))
    }
}
