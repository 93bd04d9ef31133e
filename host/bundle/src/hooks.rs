//! Command hooks (`hooks/hooks.json`) and their protocol.
//!
//! A hooks file maps events to matcher groups of hooks:
//!
//! ```json
//! {"hooks": {"PreToolUse": [{"matcher": "Bash|Write",
//!   "hooks": [{"type": "command", "command": "${CLAUDE_PLUGIN_ROOT}/hooks/check.py", "timeout": 10}]}]}}
//! ```
//!
//! Wharf runs `command` hooks of the events in [`HookEvent`]; any other
//! event (`PreCompact`, `SessionEnd`, `PermissionRequest`,
//! `SubagentStart`…), hook type or a matcher that is not a valid pattern
//! is listed as an issue. A matcher is Claude Code's: empty or `*` matches
//! everything, else it is a regular expression that must match the whole
//! name — for tool events the tool's Wharf name (`bash`) or its Claude
//! Code name (`Bash`, see [`claude_tool_name`]); for `SessionStart` the
//! source (`startup`, `resume`); for `Notification` the notification type
//! (`permission_prompt`).
//!
//! What a hook gets on stdin is [`input`]; what its exit code and stdout
//! mean is [`interpret`], with one rule Claude Code does not have: a hook
//! that crashes (an exit code other than 0 and 2, a signal), times out or
//! prints something that is not a JSON object fails closed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::{BundleError, resolve_root};

/// Default deadline of one hook (Claude Code's is 60 s; Wharf's policies
/// get 10 s, so a tool hook's is capped below that by the host).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Most bytes of a hook's stdout or stderr that are read.
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;

/// The events Wharf runs hooks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum HookEvent {
    /// Before a tool call: allow, deny, ask or rewrite its input (a policy).
    PreToolUse,
    /// After a tool call succeeded: block its result or add context.
    PostToolUse,
    /// After a tool call failed: add context (or block: the result stays
    /// an error).
    PostToolUseFailure,
    /// When a turn's input reaches the agent: block the turn, or add
    /// context for it (plain stdout or `additionalContext`).
    UserPromptSubmit,
    /// Once per session and host, before its first model request
    /// (`source`: `startup` for a new session, `resume` for a reopened
    /// one): add context for the session (plain stdout or
    /// `additionalContext`).
    SessionStart,
    /// When the agent would end its turn: keep it going with a reason.
    Stop,
    /// When a subagent (the `subagent` tool's child) would end its turn.
    SubagentStop,
    /// When the agent needs the user (`permission_prompt`: an approval
    /// question was asked). Observes only.
    Notification,
}

impl HookEvent {
    /// Every event Wharf runs.
    pub const ALL: [Self; 8] = [
        Self::PreToolUse,
        Self::PostToolUse,
        Self::PostToolUseFailure,
        Self::UserPromptSubmit,
        Self::SessionStart,
        Self::Stop,
        Self::SubagentStop,
        Self::Notification,
    ];

    /// Its name in hooks files.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PreToolUse => "PreToolUse",
            Self::PostToolUse => "PostToolUse",
            Self::PostToolUseFailure => "PostToolUseFailure",
            Self::UserPromptSubmit => "UserPromptSubmit",
            Self::SessionStart => "SessionStart",
            Self::Stop => "Stop",
            Self::SubagentStop => "SubagentStop",
            Self::Notification => "Notification",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.as_str() == s)
    }

    fn has_matcher(self) -> bool {
        matches!(
            self,
            Self::PreToolUse | Self::PostToolUse | Self::PostToolUseFailure | Self::SessionStart | Self::Notification
        )
    }

    /// Whether plain stdout (not JSON) on exit 0 is context for the model
    /// (Claude Code's rule for these two events).
    pub fn stdout_is_context(self) -> bool {
        matches!(self, Self::UserPromptSubmit | Self::SessionStart)
    }
}

/// Which tools (sources, notification types) a hook applies to.
#[derive(Debug, Clone)]
pub enum Matcher {
    /// Everything.
    Any,
    /// Names that match whole (for a tool, Wharf's or Claude Code's name).
    Pattern(regex::Regex),
}

impl Matcher {
    /// Whether `name` (a tool, a session source, a notification type)
    /// matches.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            Self::Any => true,
            Self::Pattern(re) => re.is_match(name) || claude_tool_name(name).is_some_and(|c| re.is_match(c)),
        }
    }
}

/// One command hook.
#[derive(Debug, Clone)]
pub struct HookRule {
    /// When it runs.
    pub event: HookEvent,
    /// For tool events: which tools.
    pub matcher: Matcher,
    /// The matcher as written.
    pub matcher_text: String,
    /// The shell command, bundle root variables resolved.
    pub command: String,
    /// Its deadline.
    pub timeout: Duration,
    /// The hooks file it comes from.
    pub file: PathBuf,
}

impl HookRule {
    /// Files below `root` the command names (its scripts), for the digest
    /// of the version that decided.
    pub fn scripts(&self, root: &Path) -> Vec<PathBuf> {
        self.command
            .split_whitespace()
            .map(|w| w.trim_matches(|c| c == '"' || c == '\''))
            .map(|w| if Path::new(w).is_absolute() { PathBuf::from(w) } else { root.join(w) })
            .filter(|p| p.starts_with(root) && p.is_file())
            .collect()
    }
}

/// Claude Code's name of a Wharf tool, where one corresponds.
pub fn claude_tool_name(wharf: &str) -> Option<&'static str> {
    Some(match wharf {
        "bash" => "Bash",
        "read" => "Read",
        "write" => "Write",
        "edit" => "Edit",
        "glob" => "Glob",
        "grep" => "Grep",
        "list" => "LS",
        "web_fetch" => "WebFetch",
        "todo_write" => "TodoWrite",
        "subagent" => "Task",
        _ => return None,
    })
}

/// Reads the hooks of one hooks file (`v`, from `file`) into `out`.
pub(crate) fn parse(
    v: &Value,
    file: &Path,
    root: &Path,
    out: &mut Vec<HookRule>,
    issues: &mut Vec<String>,
) -> Result<(), BundleError> {
    let shown = file.strip_prefix(root).unwrap_or(file).display().to_string();
    let events = v.get("hooks").unwrap_or(v);
    let Some(events) = events.as_object() else {
        return Err(BundleError::invalid(file, "`hooks` must be an object of events"));
    };
    for (event_name, groups) in events {
        let Some(event) = HookEvent::parse(event_name) else {
            if event_name != "description" {
                // Events Claude Code has that Wharf's loop has no point for.
                let why = match event_name.as_str() {
                    "PreCompact" => ": the loop has no hook point before a compaction",
                    "SessionEnd" => ": the loop has no hook point when a session ends",
                    _ => "",
                };
                issues.push(format!("{shown}: hook event `{event_name}` is not supported by Wharf{why} (not run)"));
            }
            continue;
        };
        let Some(groups) = groups.as_array() else {
            return Err(BundleError::invalid(file, format!("`{event_name}` must be an array of matcher groups")));
        };
        for g in groups {
            let matcher_text = g.get("matcher").and_then(Value::as_str).unwrap_or_default().to_string();
            let matcher = if matcher_text.is_empty() || matcher_text == "*" {
                Matcher::Any
            } else if !event.has_matcher() {
                issues.push(format!("{shown}: {event_name} has no tool to match; matcher `{matcher_text}` ignored"));
                Matcher::Any
            } else {
                match regex::RegexBuilder::new(&format!("^(?:{matcher_text})$")).size_limit(1 << 20).build() {
                    Ok(re) => Matcher::Pattern(re),
                    Err(e) => {
                        let e = e.to_string().replace('\n', " ");
                        issues.push(format!(
                            "{shown}: {event_name} matcher `{matcher_text}` is not a pattern Wharf can use ({e}); \
                             its hooks are not run"
                        ));
                        continue;
                    }
                }
            };
            let Some(list) = g.get("hooks").and_then(Value::as_array) else {
                return Err(BundleError::invalid(file, format!("a `{event_name}` group has no `hooks` array")));
            };
            for h in list {
                let kind = h.get("type").and_then(Value::as_str).unwrap_or("command");
                let Some(command) = h.get("command").and_then(Value::as_str).filter(|_| kind == "command") else {
                    issues.push(format!(
                        "{shown}: {event_name} hook of type `{kind}` is not supported by Wharf (only `command`)"
                    ));
                    continue;
                };
                if h.get("async").and_then(Value::as_bool) == Some(true) {
                    issues.push(format!("{shown}: {event_name} hook `{command}`: `async` is ignored (Wharf waits)"));
                }
                let timeout = h
                    .get("timeout")
                    .and_then(Value::as_f64)
                    .filter(|t| t.is_finite() && *t > 0.0)
                    .map_or(DEFAULT_TIMEOUT, |t| Duration::from_secs_f64(t.min(3600.0)));
                out.push(HookRule {
                    event,
                    matcher: matcher.clone(),
                    matcher_text: matcher_text.clone(),
                    command: resolve_root(command, root),
                    timeout,
                    file: file.to_path_buf(),
                });
            }
        }
    }
    Ok(())
}

/// What a hook gets on stdin: the common fields (`session_id`, `cwd`,
/// `hook_event_name`, `permission_mode`) and the event's own (`extra`:
/// `tool_name`, `tool_input`, `tool_use_id`, `tool_response`, `error`,
/// `prompt`, `source`, `stop_hook_active`, `agent_id`, `message`,
/// `notification_type`).
pub fn input(event: HookEvent, session_id: &str, cwd: &Path, extra: Value) -> Value {
    let mut v = json!({
        "session_id": session_id,
        "transcript_path": Value::Null,
        "cwd": cwd.display().to_string(),
        "hook_event_name": event.as_str(),
        "permission_mode": "default",
    });
    if let (Some(o), Value::Object(extra)) = (v.as_object_mut(), extra) {
        o.extend(extra);
    }
    v
}

/// How one hook process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookRun {
    /// Its exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    /// Its stdout (at most [`MAX_OUTPUT_BYTES`]).
    pub stdout: String,
    /// Its stderr (at most [`MAX_OUTPUT_BYTES`]).
    pub stderr: String,
    /// Whether it was killed at its deadline.
    pub timed_out: bool,
}

/// What a hook answered, folded from its exit code and stdout.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// Nothing to say: go on.
    Pass,
    /// Allow (a tool call), with other input if given.
    Allow {
        /// `updatedInput`.
        input: Option<Value>,
    },
    /// Ask a human (a tool call), with other input if given.
    Ask {
        /// Why.
        reason: String,
        /// `updatedInput`.
        input: Option<Value>,
    },
    /// Go on with other input (a tool call), no opinion on permission.
    Rewrite {
        /// `updatedInput`.
        input: Value,
    },
    /// Deny the call, block the result or prompt, or (Stop) keep going.
    Block {
        /// Why (shown to the model).
        reason: String,
    },
    /// Go on, adding this text for the model (`additionalContext`).
    Context {
        /// The text.
        text: String,
    },
}

/// A hook that failed: it denies (fail closed), saying this.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HookFailure(pub String);

fn one_line(s: &str, max: usize) -> String {
    let s = s.trim().replace(['\n', '\r'], " ");
    if s.chars().count() <= max { s } else { format!("{}…", s.chars().take(max).collect::<String>()) }
}

/// Folds a hook's exit and output (see the module docs):
///
/// - killed at its deadline, by a signal, or an exit code other than 0 and
///   2: a [`HookFailure`];
/// - exit 2: [`Answer::Block`] with stderr as the reason;
/// - exit 0 and nothing on stdout: [`Answer::Pass`];
/// - exit 0 and a JSON object: `continue: false` blocks (`stopReason`);
///   `hookSpecificOutput.permissionDecision` `allow` / `deny` / `ask` /
///   `defer` with `permissionDecisionReason` and `updatedInput`
///   (PreToolUse); `decision: "block"` with `reason` (the legacy
///   `approve` too); `hookSpecificOutput.additionalContext`;
/// - exit 0 and anything else on stdout: a [`HookFailure`] — except for
///   UserPromptSubmit and SessionStart, whose plain stdout is context
///   ([`HookEvent::stdout_is_context`]).
pub fn interpret(event: HookEvent, run: &HookRun) -> Result<Answer, HookFailure> {
    if run.timed_out {
        return Err(HookFailure("timed out".into()));
    }
    let code = match run.code {
        None => return Err(HookFailure(format!("was killed by a signal; stderr: {}", one_line(&run.stderr, 300)))),
        Some(c) => c,
    };
    if code == 2 {
        let r = one_line(&run.stderr, 2000);
        return Ok(Answer::Block { reason: if r.is_empty() { "blocked by hook (exit 2)".into() } else { r } });
    }
    if code != 0 {
        let err = one_line(&run.stderr, 300);
        return Err(HookFailure(format!(
            "exited with status {code}{}",
            if err.is_empty() { String::new() } else { format!(": {err}") }
        )));
    }
    let out = run.stdout.trim();
    if out.is_empty() {
        return Ok(Answer::Pass);
    }
    let v: Value = match serde_json::from_str(out) {
        Ok(v @ Value::Object(_)) => v,
        _ if event.stdout_is_context() => return Ok(Answer::Context { text: out.to_string() }),
        _ => {
            return Err(HookFailure(format!("printed something that is not a JSON object: {}", one_line(out, 200))));
        }
    };
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(|s| one_line(s, 2000));
    if v.get("continue").and_then(Value::as_bool) == Some(false) {
        return Ok(Answer::Block { reason: text(&v, "stopReason").unwrap_or_else(|| "stopped by hook".into()) });
    }
    let specific = v.get("hookSpecificOutput").cloned().unwrap_or(Value::Null);
    let input = specific.get("updatedInput").cloned();
    if let Some(i) = &input
        && !i.is_object()
    {
        return Err(HookFailure("`updatedInput` is not a JSON object".into()));
    }
    if event == HookEvent::PreToolUse
        && let Some(d) = specific.get("permissionDecision")
    {
        let reason = text(&specific, "permissionDecisionReason").unwrap_or_default();
        return match d.as_str() {
            Some("allow") => Ok(Answer::Allow { input }),
            Some("deny") => {
                Ok(Answer::Block { reason: if reason.is_empty() { "denied by hook".into() } else { reason } })
            }
            Some("ask") => {
                Ok(Answer::Ask { reason: if reason.is_empty() { "a hook asks".into() } else { reason }, input })
            }
            Some("defer") => Ok(input.map_or(Answer::Pass, |input| Answer::Rewrite { input })),
            _ => Err(HookFailure(format!("unknown permissionDecision {}", one_line(&d.to_string(), 100)))),
        };
    }
    match v.get("decision").and_then(Value::as_str) {
        Some("block") => {
            return Ok(Answer::Block { reason: text(&v, "reason").unwrap_or_else(|| "blocked by hook".into()) });
        }
        Some("approve") if event == HookEvent::PreToolUse => return Ok(Answer::Allow { input }),
        Some(other) if !other.is_empty() => {
            return Err(HookFailure(format!("unknown decision `{}`", one_line(other, 100))));
        }
        _ => {}
    }
    if let Some(input) = input.filter(|_| event == HookEvent::PreToolUse) {
        return Ok(Answer::Rewrite { input });
    }
    if let Some(ctx) = specific.get("additionalContext").and_then(Value::as_str).filter(|s| !s.trim().is_empty()) {
        return Ok(Answer::Context { text: ctx.to_string() });
    }
    Ok(Answer::Pass)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn run(code: Option<i32>, stdout: &str, stderr: &str) -> HookRun {
        HookRun { code, stdout: stdout.into(), stderr: stderr.into(), timed_out: false }
    }

    #[test]
    fn exit_codes_and_json() {
        let pre = HookEvent::PreToolUse;
        assert_eq!(interpret(pre, &run(Some(0), "", "")), Ok(Answer::Pass));
        assert_eq!(interpret(pre, &run(Some(2), "", "no rm\n")), Ok(Answer::Block { reason: "no rm".into() }));
        assert!(interpret(pre, &run(Some(1), "", "Traceback")).unwrap_err().0.contains("status 1: Traceback"));
        assert!(interpret(pre, &run(None, "", "")).is_err());
        assert!(interpret(pre, &run(Some(0), "hello", "")).unwrap_err().0.contains("not a JSON object"));
        let mut slow = run(Some(0), "", "");
        slow.timed_out = true;
        assert_eq!(interpret(pre, &slow), Err(HookFailure("timed out".into())));
        let ask = r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask","permissionDecisionReason":"sure?"}}"#;
        assert_eq!(interpret(pre, &run(Some(0), ask, "")), Ok(Answer::Ask { reason: "sure?".into(), input: None }));
        let rw = r#"{"hookSpecificOutput":{"permissionDecision":"allow","updatedInput":{"command":"ls"}}}"#;
        assert_eq!(interpret(pre, &run(Some(0), rw, "")), Ok(Answer::Allow { input: Some(json!({"command":"ls"})) }));
        let bad = r#"{"hookSpecificOutput":{"permissionDecision":"maybe"}}"#;
        assert!(interpret(pre, &run(Some(0), bad, "")).is_err());
        let block = r#"{"decision":"block","reason":"tests fail"}"#;
        assert_eq!(
            interpret(HookEvent::PostToolUse, &run(Some(0), block, "")),
            Ok(Answer::Block { reason: "tests fail".into() })
        );
        for e in [HookEvent::UserPromptSubmit, HookEvent::SessionStart] {
            assert_eq!(
                interpret(e, &run(Some(0), "some context", "")),
                Ok(Answer::Context { text: "some context".into() })
            );
        }
        assert!(interpret(HookEvent::Stop, &run(Some(0), "some context", "")).is_err());
        let ctx = r#"{"hookSpecificOutput":{"hookEventName":"SessionStart","additionalContext":"use tabs"}}"#;
        assert_eq!(
            interpret(HookEvent::SessionStart, &run(Some(0), ctx, "")),
            Ok(Answer::Context { text: "use tabs".into() })
        );
        assert_eq!(
            interpret(HookEvent::Stop, &run(Some(0), r#"{"continue":false,"stopReason":"x"}"#, "")),
            Ok(Answer::Block { reason: "x".into() })
        );
    }

    #[test]
    fn matchers_and_unsupported_parts() {
        let root = Path::new("/b");
        let v = json!({"hooks": {
            "PreToolUse": [{"matcher": "Bash|Write", "hooks": [{"type": "command", "command": "${CLAUDE_PLUGIN_ROOT}/h.sh", "timeout": 5}]},
                           {"matcher": "(", "hooks": [{"type": "command", "command": "x"}]}],
            "PreCompact": [{"hooks": [{"type": "command", "command": "y"}]}],
            "SessionEnd": [{"hooks": [{"type": "command", "command": "y"}]}],
            "SessionStart": [{"matcher": "startup", "hooks": [{"type": "command", "command": "z"}]}],
            "Stop": [{"hooks": [{"type": "prompt", "prompt": "ok?"}]}]
        }});
        let (mut out, mut issues) = (Vec::new(), Vec::new());
        parse(&v, Path::new("/b/hooks/hooks.json"), root, &mut out, &mut issues).unwrap();
        assert_eq!(out.len(), 2);
        out.sort_by_key(|r| r.event.as_str());
        assert_eq!(out[0].command, "/b/h.sh");
        assert!(out[1].event == HookEvent::SessionStart && out[1].matcher.matches("startup"));
        assert!(!out[1].matcher.matches("resume"));
        assert_eq!(out[0].timeout, Duration::from_secs(5));
        assert!(out[0].matcher.matches("bash") && out[0].matcher.matches("write") && !out[0].matcher.matches("read"));
        assert_eq!(issues.len(), 4, "{issues:?}");
        assert!(
            issues.iter().any(|i| i.contains("`PreCompact` is not supported by Wharf: the loop has no hook point"))
        );
        assert!(
            issues.iter().any(|i| i.contains("`SessionEnd` is not supported by Wharf: the loop has no hook point"))
        );
        assert!(issues.iter().any(|i| i.contains("matcher `(`")));
        assert!(issues.iter().any(|i| i.contains("type `prompt`")));
    }
}
