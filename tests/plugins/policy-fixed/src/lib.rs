//! Fixture: a permission policy whose decision comes from its configuration,
//! for policy composition and hot-reload tests.
//!
//! ```json
//! {
//!   "decision": "deny",                 // allow (default) | deny | ask | rewrite
//!   "reason": "no writes today",        // for deny/ask (a default names the plugin)
//!   "args": {"path": "/safe"},          // for rewrite: the new arguments object
//!   "merge": false,                     // rewrite: merge `args` over the call's arguments
//!   "tools": ["write", "edit"]          // only decide on these tools; allow the rest
//! }
//! ```
//!
//! An invalid configuration denies (fail closed) with the parse error as the
//! reason.

use serde::Deserialize;
use serde_json::{Map, Value};
use wharf_sdk::prelude::*;

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Config {
    decision: Option<String>,
    reason: Option<String>,
    args: Option<Map<String, Value>>,
    merge: bool,
    tools: Option<Vec<String>>,
    /// Trap on every evaluation (tests fail-closed on a crashing policy).
    trap: bool,
    /// Spin forever on every evaluation (tests fail-closed on a hung policy).
    spin: bool,
}

struct PolicyFixed;

fn decide(cfg: &Config, req: &PolicyRequest) -> Decision {
    if cfg.trap {
        panic!("policy-fixed: configured to trap");
    }
    if cfg.spin {
        let mut n = 0u64;
        loop {
            n = std::hint::black_box(n.wrapping_add(1));
        }
    }
    if let Some(tools) = &cfg.tools
        && !tools.iter().any(|t| t == &req.tool)
    {
        return Decision::Allow;
    }
    let reason = || cfg.reason.clone().unwrap_or_else(|| format!("policy-fixed decided on `{}`", req.tool));
    match cfg.decision.as_deref().unwrap_or("allow") {
        "allow" => Decision::Allow,
        "deny" => Decision::deny(reason()),
        "ask" => Decision::ask(reason()),
        "rewrite" => {
            let new = cfg.args.clone().unwrap_or_default();
            let args = if cfg.merge {
                let mut merged = match req.args() {
                    Value::Object(m) => m,
                    _ => Map::new(),
                };
                merged.extend(new);
                merged
            } else {
                new
            };
            Decision::rewrite(&Value::Object(args))
        }
        other => Decision::deny(format!("policy-fixed: unknown decision `{other}` in config")),
    }
}

impl PolicyPlugin for PolicyFixed {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "policy-fixed",
            env!("CARGO_PKG_VERSION"),
            "Test policy: returns the decision named in its configuration.",
        )
    }

    fn evaluate(req: PolicyRequest) -> Decision {
        match wharf_sdk::config::get::<Config>() {
            Ok(cfg) => decide(&cfg, &req),
            Err(e) => Decision::deny(format!("policy-fixed: {e}")),
        }
    }
}

wharf_sdk::export_policy!(PolicyFixed);

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn req(tool: &str, args: Value) -> PolicyRequest {
        PolicyRequest {
            tool: tool.into(),
            plugin: "fs".into(),
            arguments: args.to_string(),
            session_id: "s".into(),
            agent_depth: 0,
            workspace: None,
        }
    }

    fn cfg(v: Value) -> Config {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn decisions() {
        let r = req("write", json!({"path": "/a", "content": "x"}));
        assert!(matches!(decide(&cfg(json!({})), &r), Decision::Allow));
        assert!(
            matches!(decide(&cfg(json!({"decision": "deny", "reason": "no"})), &r), Decision::Deny(m) if m == "no")
        );
        assert!(matches!(decide(&cfg(json!({"decision": "ask"})), &r), Decision::Ask(_)));
        assert!(matches!(decide(&cfg(json!({"decision": "deny", "tools": ["edit"]})), &r), Decision::Allow));
        let Decision::Rewrite(a) = decide(&cfg(json!({"decision": "rewrite", "args": {"path": "/b"}})), &r) else {
            panic!("expected rewrite")
        };
        assert_eq!(serde_json::from_str::<Value>(&a).unwrap(), json!({"path": "/b"}));
        let Decision::Rewrite(a) =
            decide(&cfg(json!({"decision": "rewrite", "args": {"path": "/b"}, "merge": true})), &r)
        else {
            panic!("expected rewrite")
        };
        assert_eq!(serde_json::from_str::<Value>(&a).unwrap(), json!({"path": "/b", "content": "x"}));
        assert!(matches!(decide(&cfg(json!({"decision": "maybe"})), &r), Decision::Deny(_)));
    }
}
