//! Parsing, validation and evaluation of the rules (the format is documented
//! in the crate docs). Everything here is plain Rust, tested natively.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Map, Value};
use wharf_sdk::prelude::{Decision, PolicyRequest};

use crate::glob::{PathGlob, Segments, TextGlob};

/// Tools known not to change anything: Wharf's first-party `fs` and `text`
/// read tools. `read_only_tools` in the config adds to these.
pub const READ_ONLY_TOOLS: &[&str] = &["read", "list", "glob", "grep", "word_count", "regex_search", "echo"];
/// Tools known to run commands. `command_tools` adds to these; a call with a
/// string argument named by `command_keys` counts as a command too.
pub const COMMAND_TOOLS: &[&str] = &["bash", "shell", "sh", "exec", "run", "terminal"];
/// Argument names that hold paths (top-level; a string or a list of strings).
pub const PATH_KEYS: &[&str] = &[
    "path",
    "paths",
    "file",
    "file_path",
    "dir",
    "directory",
    "cwd",
    "workdir",
    "source",
    "destination",
    "from",
    "to",
];
/// Argument names that hold shell commands.
pub const COMMAND_KEYS: &[&str] = &["command", "cmd", "script"];

/// A mode preset: what happens to a call that no rule matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Read-only tools run; everything else is denied.
    ReadOnly,
    /// Read-only tools run; everything else (commands, writes anywhere,
    /// unknown tools) asks: the interactive default.
    Ask,
    /// Like [`Mode::WorkspaceWrite`], and the `sandboxed_tools` (the OS
    /// sandboxed `bash`) run without asking.
    Auto,
    /// Read-only tools run; writes inside the workspace run, writes outside
    /// it, commands and unknown tools ask.
    WorkspaceWrite,
    /// Everything runs.
    FullAccess,
}

impl Mode {
    fn parse(s: &str) -> Result<Self, String> {
        match s {
            "read-only" => Ok(Self::ReadOnly),
            "ask" => Ok(Self::Ask),
            "auto" => Ok(Self::Auto),
            "workspace-write" => Ok(Self::WorkspaceWrite),
            "full-access" => Ok(Self::FullAccess),
            other => Err(format!("`mode` must be one of {}, not \"{other}\"", MODES.join(", "))),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::ReadOnly => "read-only",
            Self::Ask => "ask",
            Self::Auto => "auto",
            Self::WorkspaceWrite => "workspace-write",
            Self::FullAccess => "full-access",
        }
    }
}

/// Every `mode` value, mildest first.
pub const MODES: &[&str] = &["read-only", "ask", "auto", "workspace-write", "full-access"];

/// What a rule does when it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Let the call run.
    Allow,
    /// Refuse it.
    Deny,
    /// Ask the approval service.
    Ask,
    /// Let it run with changed arguments.
    Rewrite,
}

impl Action {
    fn parse(s: &str, what: &str, allowed: &[Action]) -> Result<Self, String> {
        let a = match s {
            "allow" => Some(Self::Allow),
            "deny" => Some(Self::Deny),
            "ask" => Some(Self::Ask),
            "rewrite" => Some(Self::Rewrite),
            _ => None,
        };
        match a {
            Some(a) if allowed.contains(&a) => Ok(a),
            _ => {
                let names: Vec<String> = allowed.iter().map(|a| format!("\"{}\"", a.name())).collect();
                Err(format!("{what} must be one of {}, not \"{s}\"", names.join(", ")))
            }
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Deny => "deny",
            Self::Ask => "ask",
            Self::Rewrite => "rewrite",
        }
    }

    /// Deny and ask restrict: their argument conditions hold when *any*
    /// value matches. Allow and rewrite permit: *every* value must match.
    fn restrictive(self) -> bool {
        matches!(self, Self::Deny | Self::Ask)
    }
}

/// A string or a list of strings.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            Self::One(s) => vec![s],
            Self::Many(v) => v,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    mode: Option<String>,
    default: Option<String>,
    #[serde(default)]
    rules: Vec<Value>,
    read_only_tools: Option<OneOrMany>,
    command_tools: Option<OneOrMany>,
    sandboxed_tools: Option<OneOrMany>,
    path_keys: Option<OneOrMany>,
    command_keys: Option<OneOrMany>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    name: Option<String>,
    tool: Option<OneOrMany>,
    plugin: Option<OneOrMany>,
    path: Option<OneOrMany>,
    not_path: Option<OneOrMany>,
    command: Option<OneOrMany>,
    args: Option<BTreeMap<String, OneOrMany>>,
    action: Option<String>,
    reason: Option<String>,
    set: Option<Map<String, Value>>,
    unset: Option<OneOrMany>,
}

/// One compiled rule.
#[derive(Debug, Clone)]
pub struct Rule {
    /// `rule 3` or `rule 3 "no-rm"`, for reasons and errors.
    pub label: String,
    tools: Vec<TextGlob>,
    plugins: Vec<TextGlob>,
    paths: Vec<PathGlob>,
    not_paths: Vec<PathGlob>,
    commands: Vec<TextGlob>,
    args: Vec<(String, Vec<TextGlob>)>,
    /// What it does.
    pub action: Action,
    reason: Option<String>,
    set: Map<String, Value>,
    unset: Vec<String>,
}

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Rules {
    /// The preset under the rules, if any.
    pub mode: Option<Mode>,
    /// The action when nothing matched and there is no mode.
    pub default: Action,
    /// The rules, in order.
    pub rules: Vec<Rule>,
    read_only: Vec<TextGlob>,
    command_tools: Vec<TextGlob>,
    sandboxed_tools: Vec<TextGlob>,
    path_keys: Vec<String>,
    command_keys: Vec<String>,
}

/// Compiles tool-name or plugin-id patterns; `what` names the key in errors.
fn name_globs(values: Vec<String>, what: &str, errors: &mut Vec<String>) -> Vec<TextGlob> {
    if values.is_empty() {
        errors.push(format!("`{what}` is an empty list (it would match nothing)"));
    }
    let mut out = Vec::new();
    for v in values {
        let ok = v.chars().all(|c| c.is_ascii_alphanumeric() || "_-*?[]!^".contains(c));
        if !ok {
            let hint = if v.contains([',', ' ']) { " (use a list: [\"a\", \"b\"])" } else { "" };
            errors.push(format!("`{what}` pattern \"{v}\" has characters no name can contain{hint}"));
            continue;
        }
        match TextGlob::new(&v) {
            Ok(g) => out.push(g),
            Err(e) => errors.push(format!("`{what}` pattern {e}")),
        }
    }
    out
}

fn text_globs(values: Vec<String>, what: &str, errors: &mut Vec<String>) -> Vec<TextGlob> {
    if values.is_empty() {
        errors.push(format!("`{what}` is an empty list (it would match nothing)"));
    }
    let mut out = Vec::new();
    for v in values {
        let v = if what == "command" { squash(&v) } else { v };
        match TextGlob::new(&v) {
            Ok(g) => out.push(g),
            Err(e) => errors.push(format!("`{what}` pattern {e}")),
        }
    }
    out
}

fn path_globs(values: Vec<String>, what: &str, errors: &mut Vec<String>) -> Vec<PathGlob> {
    if values.is_empty() {
        errors.push(format!("`{what}` is an empty list (it would match nothing)"));
    }
    let mut out = Vec::new();
    for v in values {
        match PathGlob::new(&v) {
            Ok(g) => out.push(g),
            Err(e) => errors.push(format!("`{what}` pattern {e}")),
        }
    }
    out
}

fn keys(values: Vec<String>, what: &str, errors: &mut Vec<String>) -> Vec<String> {
    if values.iter().any(String::is_empty) {
        errors.push(format!("`{what}` contains an empty name"));
    }
    values
}

/// `serde_json`'s messages without the meaningless position of the
/// host-generated JSON text.
fn serde_message(e: &serde_json::Error) -> String {
    let s = e.to_string();
    match s.find(" at line ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

impl Rules {
    /// Parses and validates the plugin's configuration (JSON text of its
    /// profile `config` table). Every problem is reported, each with its
    /// rule; nothing malformed is ever skipped.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let text = if text.trim().is_empty() { "{}" } else { text };
        let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        Self::from_value(value)
    }

    /// [`from_json`](Self::from_json) on a parsed value.
    pub fn from_value(value: Value) -> Result<Self, String> {
        if !value.is_object() {
            return Err("the configuration must be a table".into());
        }
        let raw: RawConfig = serde_json::from_value(value).map_err(|e| serde_message(&e))?;
        let mut errors = Vec::new();
        let mode = match raw.mode.as_deref().map(Mode::parse).transpose() {
            Ok(m) => m,
            Err(e) => {
                errors.push(e);
                None
            }
        };
        let default = match raw.default.as_deref() {
            None => Action::Deny,
            Some(d) => {
                if let Some(m) = raw.mode.as_deref() {
                    errors.push(format!(
                        "`default` has no effect with `mode = \"{m}\"` (the preset decides every call no rule \
                         matched); remove it, or add a last rule with `tool = \"*\"`"
                    ));
                }
                Action::parse(d, "`default`", &[Action::Allow, Action::Deny, Action::Ask]).unwrap_or_else(|e| {
                    errors.push(e);
                    Action::Deny
                })
            }
        };
        if raw.mode.is_none() && raw.default.is_none() && raw.rules.is_empty() {
            errors.push(
                "nothing configured: set a `mode` (read-only, ask, auto, workspace-write, full-access), `rules` or a \
                 `default`"
                    .into(),
            );
        }
        let mut read_only: Vec<TextGlob> = READ_ONLY_TOOLS.iter().filter_map(|t| TextGlob::new(t).ok()).collect();
        if let Some(v) = raw.read_only_tools {
            read_only.extend(name_globs(v.into_vec(), "read_only_tools", &mut errors));
        }
        let mut command_tools: Vec<TextGlob> = COMMAND_TOOLS.iter().filter_map(|t| TextGlob::new(t).ok()).collect();
        if let Some(v) = raw.command_tools {
            command_tools.extend(name_globs(v.into_vec(), "command_tools", &mut errors));
        }
        let sandboxed_tools = match raw.sandboxed_tools {
            Some(v) => name_globs(v.into_vec(), "sandboxed_tools", &mut errors),
            None => Vec::new(),
        };
        let path_keys = match raw.path_keys {
            Some(v) => keys(v.into_vec(), "path_keys", &mut errors),
            None => PATH_KEYS.iter().map(|s| s.to_string()).collect(),
        };
        let command_keys = match raw.command_keys {
            Some(v) => keys(v.into_vec(), "command_keys", &mut errors),
            None => COMMAND_KEYS.iter().map(|s| s.to_string()).collect(),
        };
        let mut rules = Vec::new();
        for (i, v) in raw.rules.into_iter().enumerate() {
            let name = v.get("name").and_then(Value::as_str).map(str::to_string);
            let label = match &name {
                Some(n) => format!("rule {} \"{n}\"", i + 1),
                None => format!("rule {}", i + 1),
            };
            let mut rule_errors = Vec::new();
            if let Some(rule) = compile_rule(v, label.clone(), &mut rule_errors) {
                rules.push(rule);
            }
            errors.extend(rule_errors.into_iter().map(|e| format!("{label}: {e}")));
        }
        if !errors.is_empty() {
            return Err(errors.join("; "));
        }
        Ok(Self { mode, default, rules, read_only, command_tools, sandboxed_tools, path_keys, command_keys })
    }
}

fn compile_rule(v: Value, label: String, errors: &mut Vec<String>) -> Option<Rule> {
    if !v.is_object() {
        errors.push("a rule must be a table".into());
        return None;
    }
    let raw: RawRule = match serde_json::from_value(v) {
        Ok(r) => r,
        Err(e) => {
            errors.push(serde_message(&e));
            return None;
        }
    };
    let tools = match raw.tool {
        Some(t) => name_globs(t.into_vec(), "tool", errors),
        None => {
            errors.push("`tool` is required (a name, a glob such as \"fs_*\", a list, or \"*\" for any tool)".into());
            Vec::new()
        }
    };
    let plugins = raw.plugin.map(|p| name_globs(p.into_vec(), "plugin", errors)).unwrap_or_default();
    let paths = raw.path.map(|p| path_globs(p.into_vec(), "path", errors)).unwrap_or_default();
    let not_paths = raw.not_path.map(|p| path_globs(p.into_vec(), "not_path", errors)).unwrap_or_default();
    let commands = raw.command.map(|c| text_globs(c.into_vec(), "command", errors)).unwrap_or_default();
    let mut args = Vec::new();
    for (k, pats) in raw.args.unwrap_or_default() {
        if k.is_empty() {
            errors.push("`args` has an empty argument name".into());
        }
        args.push((k.clone(), text_globs(pats.into_vec(), &format!("args.{k}"), errors)));
    }
    let all = [Action::Allow, Action::Deny, Action::Ask, Action::Rewrite];
    let action = match raw.action.as_deref() {
        Some(a) => Action::parse(a, "`action`", &all).map_err(|e| errors.push(e)).ok()?,
        None => {
            errors.push("`action` is required (allow, deny, ask or rewrite)".into());
            return None;
        }
    };
    if matches!(&raw.name, Some(n) if n.trim().is_empty()) {
        errors.push("`name` is empty".into());
    }
    if raw.reason.is_some() && !action.restrictive() {
        errors.push(format!("`reason` is only shown for deny and ask, not for {}", action.name()));
    }
    if matches!(&raw.reason, Some(r) if r.trim().is_empty()) {
        errors.push("`reason` is empty".into());
    }
    let set = raw.set.unwrap_or_default();
    let unset = raw.unset.map(OneOrMany::into_vec).unwrap_or_default();
    if action == Action::Rewrite {
        if set.is_empty() && unset.is_empty() {
            errors.push("a rewrite needs `set` (arguments to set) or `unset` (arguments to remove)".into());
        }
        if let Some(k) = unset.iter().find(|k| set.contains_key(*k)) {
            errors.push(format!("`{k}` is both in `set` and in `unset`"));
        }
    } else if !set.is_empty() || !unset.is_empty() {
        errors.push(format!("`set` and `unset` are only for rewrite, not for {}", action.name()));
    }
    Some(Rule { label, tools, plugins, paths, not_paths, commands, args, action, reason: raw.reason, set, unset })
}

/// Collapses whitespace runs to one space and trims, so that `rm  -rf /`
/// and `rm -rf /` look the same to a command pattern.
fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The simple commands of a command line, split at `;`, `&`, `|` and line
/// breaks. Not a shell parser: quotes are not honoured, so a quoted `;` also
/// splits, which only makes restrictive rules match more.
fn segments(cmd: &str) -> Vec<String> {
    cmd.split([';', '&', '|', '\n']).map(squash).filter(|s| !s.is_empty()).collect()
}

/// Shell features an allow rule's command pattern cannot see through.
fn opaque(cmd: &str) -> bool {
    ["$(", "`", "<(", ">(", ">", "<"].iter().any(|m| cmd.contains(m))
}

/// The facts about one call that rules and presets look at.
pub struct Call<'a> {
    tool: &'a str,
    plugin: &'a str,
    args: Value,
    /// The normalized workspace, when the request has an absolute one.
    ws_path: Option<PathBuf>,
    workspace: Option<Segments>,
}

impl<'a> Call<'a> {
    /// From a policy request.
    pub fn new(req: &'a PolicyRequest) -> Self {
        let ws_path = req
            .workspace
            .as_deref()
            .filter(|w| Path::new(w).is_absolute())
            .map(|w| wharf_sdk::path::normalize(Path::new(w)));
        let workspace = ws_path.as_deref().map(Segments::of);
        let args = if req.arguments.trim().is_empty() { Value::Object(Map::new()) } else { req.args() };
        Self { tool: &req.tool, plugin: &req.plugin, args, ws_path, workspace }
    }

    fn strings(&self, key: &str) -> Vec<String> {
        match self.args.get(key) {
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(|v| match v {
                    Value::String(s) => Some(s.clone()),
                    Value::Number(_) | Value::Bool(_) => Some(v.to_string()),
                    _ => None,
                })
                .collect(),
            Some(v @ (Value::Number(_) | Value::Bool(_))) => vec![v.to_string()],
            _ => Vec::new(),
        }
    }

    /// Every path argument, resolved against the workspace and normalized
    /// (lexically, the way `wharf_sdk::path::resolve` does for tools).
    fn paths(&self, keys: &[String]) -> Vec<(String, Segments)> {
        let mut out = Vec::new();
        for k in keys {
            for raw in self.strings(k) {
                let p = Path::new(if raw.is_empty() { "." } else { &raw });
                let joined = match &self.ws_path {
                    Some(ws) if !p.is_absolute() => ws.join(p),
                    _ => p.to_path_buf(),
                };
                out.push((raw.clone(), Segments::of(&wharf_sdk::path::normalize(&joined))));
            }
        }
        out
    }

    fn commands(&self, keys: &[String]) -> Vec<String> {
        keys.iter().flat_map(|k| self.strings(k)).collect()
    }
}

impl Rule {
    fn matches(&self, call: &Call<'_>, cfg: &Rules) -> bool {
        if !self.tools.iter().any(|g| g.matches(call.tool)) {
            return false;
        }
        if !self.plugins.is_empty() && !self.plugins.iter().any(|g| g.matches(call.plugin)) {
            return false;
        }
        let restrictive = self.action.restrictive();
        let quantify =
            |n: usize, ok: &dyn Fn(usize) -> bool| n > 0 && if restrictive { (0..n).any(ok) } else { (0..n).all(ok) };
        if !self.paths.is_empty() || !self.not_paths.is_empty() {
            let paths = call.paths(&cfg.path_keys);
            let ws = call.workspace.as_ref();
            let fits = |i: usize| {
                let p = &paths[i].1;
                (self.paths.is_empty() || self.paths.iter().any(|g| g.matches(p, ws)))
                    && !self.not_paths.iter().any(|g| g.matches(p, ws))
            };
            if !quantify(paths.len(), &fits) {
                return false;
            }
        }
        if !self.commands.is_empty() {
            let cmds = call.commands(&cfg.command_keys);
            let fits = |i: usize| {
                let cmd = &cmds[i];
                let hit = |s: &str| self.commands.iter().any(|g| g.matches(s));
                if restrictive {
                    hit(&squash(cmd)) || segments(cmd).iter().any(|s| hit(s))
                } else {
                    let segs = segments(cmd);
                    !opaque(cmd) && !segs.is_empty() && segs.iter().all(|s| hit(s))
                }
            };
            if !quantify(cmds.len(), &fits) {
                return false;
            }
        }
        for (key, globs) in &self.args {
            let values = call.strings(key);
            if !quantify(values.len(), &|i| globs.iter().any(|g| g.matches(&values[i]))) {
                return false;
            }
        }
        true
    }

    fn decide(&self, call: &Call<'_>) -> Decision {
        match self.action {
            Action::Allow => Decision::Allow,
            Action::Deny => Decision::deny(match &self.reason {
                Some(r) => format!("{r} ({})", self.label),
                None => format!("`{}` is denied by {}", call.tool, self.label),
            }),
            Action::Ask => Decision::ask(match &self.reason {
                Some(r) => format!("{r} ({})", self.label),
                None => format!("`{}` needs approval by {}", call.tool, self.label),
            }),
            Action::Rewrite => {
                let mut args = match &call.args {
                    Value::Object(m) => m.clone(),
                    _ => Map::new(),
                };
                for k in &self.unset {
                    args.remove(k);
                }
                args.extend(self.set.clone());
                Decision::rewrite(&Value::Object(args))
            }
        }
    }
}

/// Which rule or preset decided, for the host log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecidedBy {
    /// A rule (its label).
    Rule(String),
    /// The mode preset.
    Mode(&'static str),
    /// The `default` action.
    Default,
}

impl Rules {
    /// Decides on one call: the first matching rule wins; if none matches,
    /// the mode preset decides; without a mode, the `default` action.
    pub fn evaluate(&self, req: &PolicyRequest) -> (Decision, DecidedBy) {
        let call = Call::new(req);
        if let Some(rule) = self.rules.iter().find(|r| r.matches(&call, self)) {
            return (rule.decide(&call), DecidedBy::Rule(rule.label.clone()));
        }
        match self.mode {
            Some(mode) => (self.preset(mode, &call), DecidedBy::Mode(mode.name())),
            None => {
                let d = match self.default {
                    Action::Allow | Action::Rewrite => Decision::Allow,
                    Action::Deny => Decision::deny(format!("`{}` matches no rule (default: deny)", call.tool)),
                    Action::Ask => Decision::ask(format!("`{}` matches no rule (default: ask)", call.tool)),
                };
                (d, DecidedBy::Default)
            }
        }
    }

    fn is_read_only(&self, tool: &str) -> bool {
        self.read_only.iter().any(|g| g.matches(tool))
    }

    fn is_command(&self, call: &Call<'_>) -> bool {
        self.command_tools.iter().any(|g| g.matches(call.tool)) || !call.commands(&self.command_keys).is_empty()
    }

    fn preset(&self, mode: Mode, call: &Call<'_>) -> Decision {
        let tool = call.tool;
        match mode {
            Mode::FullAccess => Decision::Allow,
            _ if self.is_read_only(tool) => Decision::Allow,
            Mode::ReadOnly => Decision::deny(format!("read-only mode: `{tool}` is not known to be read-only")),
            Mode::Ask if self.is_command(call) => Decision::ask(format!("ask mode: `{tool}` runs commands")),
            Mode::Ask if !call.paths(&self.path_keys).is_empty() => {
                Decision::ask(format!("ask mode: `{tool}` may change files"))
            }
            Mode::Ask => Decision::ask(format!("ask mode: `{tool}` is not known to be read-only")),
            // The OS sandbox, not this policy, confines what those run.
            Mode::Auto if self.sandboxed_tools.iter().any(|g| g.matches(tool)) => Decision::Allow,
            Mode::WorkspaceWrite | Mode::Auto => {
                let name = mode.name();
                if self.is_command(call) {
                    return Decision::ask(format!("{name} mode: `{tool}` runs commands"));
                }
                let paths = call.paths(&self.path_keys);
                if paths.is_empty() {
                    return Decision::ask(format!(
                        "{name} mode: `{tool}` is not known to be read-only and names no path to check"
                    ));
                }
                let outside: Vec<&str> = paths
                    .iter()
                    .filter(|(_, p)| !call.workspace.as_ref().is_some_and(|ws| p.starts_with(ws)))
                    .map(|(raw, _)| raw.as_str())
                    .collect();
                if outside.is_empty() {
                    return Decision::Allow;
                }
                let mut msg = format!("{name} mode: `{tool}` writes outside the workspace:");
                for p in outside {
                    let _ = write!(msg, " `{p}`");
                }
                Decision::ask(msg)
            }
        }
    }
}
