//! Fixture: a permission policy that asks the session's user for a reason
//! before allowing the tools it names (the `questions` import, world
//! `policy-questions-plugin`; the row needs `questions = true`).
//!
//! ```json
//! {
//!   "tools": ["write"],          // ask before these tools; allow the rest
//!   "on_accept": "allow",        // allow (default) | ask: a human approves, shown the reason
//!   "on_decline": "deny",        // deny (default) | allow | ask
//!   "on_cancel": "deny"          // deny (default) | allow | ask: nobody answered
//! }
//! ```
//!
//! The reason given is logged and, under `on_accept = "ask"`, is the
//! approval's reason. A question declined (`wharf run` declines every
//! question), unanswered (the policy's deadline, a cancelled turn) or not
//! possible (no grant) follows its branch; the default fails closed.

use serde::Deserialize;
use wharf_sdk::prelude::*;
use wharf_sdk::questions::{self, Answer};

/// Longest reason quoted in a decision, characters.
const MAX_REASON_CHARS: usize = 200;

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Config {
    tools: Vec<String>,
    on_accept: Option<String>,
    on_decline: Option<String>,
    on_cancel: Option<String>,
}

/// The question's form, as text (the fields asked in this order).
const FORM: &str = r#"{"type": "object", "properties": {
    "reason": {"type": "string", "title": "Reason", "description": "Why should this call run?", "minLength": 1, "maxLength": 200}
}, "required": ["reason"]}"#;

fn branch(choice: Option<&str>, default: &str, why: String) -> Decision {
    match choice.unwrap_or(default) {
        "allow" => Decision::Allow,
        "ask" => Decision::ask(why),
        "deny" => Decision::deny(why),
        other => Decision::deny(format!("policy-ask: unknown choice `{other}` in config; {why}")),
    }
}

fn decide(cfg: &Config, req: &PolicyRequest, answer: Result<Answer, questions::SessionError>) -> Decision {
    let tool = &req.tool;
    match answer {
        Ok(Answer::Accept(values)) => {
            let reason: String =
                values.get("reason").and_then(|v| v.as_str()).unwrap_or("").chars().take(MAX_REASON_CHARS).collect();
            wharf_sdk::log::info!("policy-ask: `{tool}` allowed for the reason: {reason}");
            branch(cfg.on_accept.as_deref(), "allow", format!("policy-ask: reason given for `{tool}`: {reason}"))
        }
        Ok(Answer::Decline) => branch(
            cfg.on_decline.as_deref(),
            "deny",
            format!("policy-ask: no reason given for `{tool}` (the question was declined)"),
        ),
        Ok(Answer::Cancel) => branch(
            cfg.on_cancel.as_deref(),
            "deny",
            format!("policy-ask: no reason given for `{tool}` (nobody answered)"),
        ),
        Err(e) => Decision::deny(format!(
            "policy-ask: cannot ask for a reason for `{tool}`: {}",
            wharf_sdk::session::describe(&e)
        )),
    }
}

struct PolicyAsk;

impl PolicyPlugin for PolicyAsk {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "policy-ask",
            env!("CARGO_PKG_VERSION"),
            "Test policy: asks the user for a reason before allowing the tools it names.",
        )
    }

    fn evaluate(req: PolicyRequest) -> Decision {
        let cfg = match wharf_sdk::config::get::<Config>() {
            Ok(c) => c,
            Err(e) => return Decision::deny(format!("policy-ask: {e}")),
        };
        if !cfg.tools.iter().any(|t| t == &req.tool) {
            return Decision::Allow;
        }
        let message = format!("A reason is needed before `{}` runs.", req.tool);
        let answer = questions::ask_text(&message, FORM);
        decide(&cfg, &req, answer)
    }
}

wharf_sdk::export_policy!(PolicyAsk);

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::{Map, Value, json};

    use super::*;

    fn req() -> PolicyRequest {
        PolicyRequest {
            tool: "write".into(),
            plugin: "fs".into(),
            arguments: "{}".into(),
            session_id: "s".into(),
            agent_depth: 0,
            workspace: None,
        }
    }

    #[test]
    fn branches() {
        let cfg: Config = serde_json::from_value(json!({"tools": ["write"], "on_accept": "ask"})).unwrap();
        let mut values = Map::new();
        values.insert("reason".into(), Value::String("tests need it".into()));
        assert!(
            matches!(decide(&cfg, &req(), Ok(Answer::Accept(values))), Decision::Ask(r) if r.ends_with("tests need it"))
        );
        assert!(matches!(decide(&cfg, &req(), Ok(Answer::Decline)), Decision::Deny(r) if r.contains("declined")));
        assert!(matches!(decide(&cfg, &req(), Ok(Answer::Cancel)), Decision::Deny(r) if r.contains("nobody")));
        let open: Config = serde_json::from_value(json!({"on_cancel": "allow"})).unwrap();
        assert!(matches!(decide(&open, &req(), Ok(Answer::Cancel)), Decision::Allow));
        let e = questions::SessionError::NotGranted("questions".into());
        assert!(matches!(decide(&cfg, &req(), Err(e)), Decision::Deny(r) if r.contains("not granted")));
    }
}
