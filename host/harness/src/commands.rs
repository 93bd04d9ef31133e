//! Slash commands a host offers to its surfaces ([`Harness::commands`]):
//! a typed list that a surface shows (ACP's `available_commands_update`)
//! and expands when a prompt starts with `/NAME` ([`expand`]).
//!
//! The list holds the skills of the loaded skills plugins (one command per
//! skill, `/NAME ARGS` asks the model to load and follow that skill for
//! `ARGS`) and the `commands/*.md` of `[[bundle]]` rows
//! ([`CommandAction::Bundle`], re-read at each use so an edit shows at
//! once). [`CommandAction::Prompt`] is a plain prompt template with
//! `$ARGUMENTS`. Names are unique: the first source to claim a name keeps
//! it. Surfaces without an async context (chat, the web API) use
//! [`Harness::bundle_commands`] and [`Harness::expand_command`].

use std::collections::HashSet;

use serde::Serialize;

use wharf_runtime::component::Kind;

use crate::Harness;

/// Longest command name kept, in characters.
pub const MAX_NAME_CHARS: usize = 64;
/// Longest description kept, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 300;
/// Most commands listed.
pub const MAX_COMMANDS: usize = 200;

/// One slash command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// The name typed after `/` (`[A-Za-z0-9_.:-]`, no spaces).
    pub name: String,
    /// What it does, one line.
    pub description: String,
    /// A hint for the text typed after the name (`None`: it takes none).
    pub input_hint: Option<String>,
    /// What the command does with that text.
    pub action: CommandAction,
}

/// What running a command does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandAction {
    /// Use a skill of a skills plugin: the prompt asks the model to load it
    /// (with `tool`, when the plugin has one) and follow it.
    Skill {
        /// The skills plugin's id.
        plugin: String,
        /// The skill's name in its catalog.
        skill: String,
        /// The tool that loads a skill (`None`: ask for it by name).
        tool: Option<String>,
    },
    /// A prompt template; `$ARGUMENTS` is replaced by the typed text (which
    /// is appended after a blank line when the template does not use it).
    Prompt {
        /// The template.
        template: String,
    },
    /// A bundle's command file: its body (re-read now) with `$ARGUMENTS`.
    Bundle {
        /// The command as the bundle was loaded.
        command: wharf_bundle::Command,
    },
}

impl Command {
    /// The prompt a run of this command with `args` sends.
    pub fn prompt(&self, args: &str) -> String {
        let args = args.trim();
        match &self.action {
            CommandAction::Skill { skill, tool, .. } => {
                let how = match tool {
                    Some(t) => format!("Load the skill `{skill}` with the `{t}` tool and follow it"),
                    None => format!("Use the skill `{skill}` and follow it"),
                };
                if args.is_empty() { format!("{how}.") } else { format!("{how} for this request:\n\n{args}") }
            }
            CommandAction::Prompt { template } => {
                if template.contains("$ARGUMENTS") {
                    template.replace("$ARGUMENTS", args)
                } else if args.is_empty() {
                    template.clone()
                } else {
                    format!("{}\n\n{args}", template.trim_end())
                }
            }
            CommandAction::Bundle { command } => command.reread().unwrap_or_else(|_| command.clone()).expand(args),
        }
    }
}

/// The command a prompt invokes and its expansion: a prompt whose first
/// word is `/NAME` of a listed command becomes that command's prompt with
/// the rest of the text as its arguments; `None` for any other prompt.
pub fn expand<'a>(commands: &'a [Command], prompt: &str) -> Option<(&'a Command, String)> {
    let rest = prompt.trim_start().strip_prefix('/')?;
    let (name, args) = match rest.find(char::is_whitespace) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let command = commands.iter().find(|c| c.name == name)?;
    Some((command, command.prompt(args)))
}

/// A name as a command name: characters outside `[A-Za-z0-9_.:-]` become
/// `-`, at most [`MAX_NAME_CHARS`]; `None` when nothing is left.
pub fn command_name(raw: &str) -> Option<String> {
    let name: String = raw
        .trim()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-') { c } else { '-' })
        .take(MAX_NAME_CHARS)
        .collect();
    let name = name.trim_matches('-');
    (!name.is_empty()).then(|| name.to_string())
}

fn one_line(s: &str, max: usize) -> String {
    let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if s.chars().count() <= max {
        return s;
    }
    let mut cut: String = s.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

impl Harness {
    /// The slash commands this host offers now: one per skill of every
    /// loaded skills plugin (a catalog that fails is logged and skipped),
    /// at most [`MAX_COMMANDS`], names unique.
    pub async fn commands(&self) -> Vec<Command> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        for (id, version) in self.plugins.versions() {
            if !version.kinds.contains(&Kind::Skills) {
                continue;
            }
            let list = match version.call_skills_catalog().await {
                Ok(list) => list,
                Err(e) => {
                    tracing::warn!(plugin = %id, error = %e, "skills catalog failed: its commands are not listed");
                    continue;
                }
            };
            let names: Vec<&str> = version.tools.iter().map(|t| t.name.as_str()).collect();
            let tool = if names.contains(&"skill") {
                Some("skill".to_string())
            } else {
                (names.len() == 1).then(|| names[0].to_string())
            };
            for s in list {
                let Some(name) = command_name(&s.name) else { continue };
                if out.len() >= MAX_COMMANDS || !seen.insert(name.clone()) {
                    continue;
                }
                out.push(Command {
                    name,
                    description: one_line(&s.description, MAX_DESCRIPTION_CHARS),
                    input_hint: Some("what to use the skill for".into()),
                    action: CommandAction::Skill { plugin: id.clone(), skill: s.name.clone(), tool: tool.clone() },
                });
            }
        }
        for c in self.bundle_commands() {
            if out.len() >= MAX_COMMANDS || !seen.insert(c.name.clone()) {
                continue;
            }
            let Some(command) = self.bundle_command(&c.qualified) else { continue };
            out.push(Command {
                name: c.name,
                description: one_line(&c.description, MAX_DESCRIPTION_CHARS),
                input_hint: c.argument_hint,
                action: CommandAction::Bundle { command },
            });
        }
        out
    }
}

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
    /// The commands of the host's bundles, in row order (what chat and the
    /// web API list; [`Harness::commands`] adds the skills). A name two bundles
    /// share is typed qualified for the second.
    pub fn bundle_commands(&self) -> Vec<SlashCommand> {
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
        let listed = self.bundle_commands();
        let hit = listed.iter().find(|c| c.name == name || c.qualified == name)?;
        let c = self.bundle_command(&hit.qualified)?;
        let fresh = c.reread().unwrap_or_else(|_| c.clone());
        Some(fresh.expand(args))
    }

    /// The bundle command `BUNDLE:NAME` as loaded.
    fn bundle_command(&self, qualified: &str) -> Option<wharf_bundle::Command> {
        let (bundle, cmd) = qualified.split_once(':')?;
        let lb = self.bundles().iter().find(|b| b.row.name == bundle)?;
        lb.bundle.commands.iter().find(|c| c.name == cmd).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skill(name: &str) -> Command {
        Command {
            name: name.into(),
            description: "d".into(),
            input_hint: None,
            action: CommandAction::Skill { plugin: "skills".into(), skill: name.into(), tool: Some("skill".into()) },
        }
    }

    #[test]
    fn prompts_expand_known_commands_only() {
        let list = vec![
            skill("review"),
            Command {
                name: "fix".into(),
                description: "d".into(),
                input_hint: None,
                action: CommandAction::Prompt { template: "Fix $ARGUMENTS now.".into() },
            },
        ];
        let (c, p) = expand(&list, "/review  the parser ").unwrap_or_else(|| panic!("not expanded"));
        assert_eq!(c.name, "review");
        assert_eq!(p, "Load the skill `review` with the `skill` tool and follow it for this request:\n\nthe parser");
        assert_eq!(expand(&list, "/fix bug 3").map(|(_, p)| p).as_deref(), Some("Fix bug 3 now."));
        assert_eq!(
            expand(&list, "/review").map(|(_, p)| p).as_deref(),
            Some("Load the skill `review` with the `skill` tool and follow it.")
        );
        assert!(expand(&list, "/unknown x").is_none());
        assert!(expand(&list, "review x").is_none());
        assert_eq!(command_name("My Skill!"), Some("My-Skill".into()));
        assert_eq!(command_name("  "), None);
    }
}
