//! `{{name}}`: a Wharf permission policy.
//!
//! Configuration (the profile row's `config` table):
//! `blocked_tools = ["write"]` denies those tools, `ask_tools = ["edit"]`
//! asks a human first; everything else is allowed.

use serde::Deserialize;
use wharf_sdk::prelude::*;

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Config {
    blocked_tools: Vec<String>,
    ask_tools: Vec<String>,
}

struct Plugin;

impl PolicyPlugin for Plugin {
    fn info() -> PluginInfo {
        PluginInfo::new("{{name}}", env!("CARGO_PKG_VERSION"), "Denies or asks before configured tools.")
    }

    /// Runs when the plugin loads: a bad configuration refuses it.
    fn validate_config() -> Result<(), String> {
        wharf_sdk::config::get::<Config>().map(|_| ()).map_err(|e| e.to_string())
    }

    fn evaluate(req: PolicyRequest) -> Decision {
        match wharf_sdk::config::get::<Config>() {
            Ok(cfg) => decide(&cfg, &req.tool),
            // Fail closed on a bad configuration.
            Err(e) => Decision::deny(format!("{{name}}: {e}")),
        }
    }
}

fn decide(cfg: &Config, tool: &str) -> Decision {
    if cfg.blocked_tools.iter().any(|t| t == tool) {
        Decision::deny(format!("`{tool}` is blocked by {{name}}"))
    } else if cfg.ask_tools.iter().any(|t| t == tool) {
        Decision::ask(format!("`{tool}` needs approval"))
    } else {
        Decision::Allow
    }
}

wharf_sdk::export_policy!(Plugin);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_config_is_refused() {
        wharf_sdk::testing::set_config(&serde_json::json!({"blocked_tools": "write"}));
        assert!(Plugin::validate_config().is_err());
        wharf_sdk::testing::set_config(&serde_json::json!({"blocked_tools": ["write"]}));
        assert!(Plugin::validate_config().is_ok());
    }

    #[test]
    fn decides_by_tool() {
        let cfg = Config { blocked_tools: vec!["write".into()], ask_tools: vec!["edit".into()] };
        assert_eq!(decide(&cfg, "write").kind(), "deny");
        assert_eq!(decide(&cfg, "edit").kind(), "ask");
        assert_eq!(decide(&cfg, "read").kind(), "allow");
    }
}
