//! Fixture: a hooks component whose subscriptions, prompt sections and
//! outcomes come from its configuration, for event-bus tests.
//!
//! ```json
//! {
//!   "subscriptions": [{"point": "tools/pre-execute", "priority": 0}],
//!   "sections": [{"id": "rules", "order": 10, "text": "Be brief."}],
//!   "outcomes": {
//!     "tools/pre-execute": {"reject": "blocked by hooks-fixed"},
//!     "system-prompt": {"replace": "a new prompt"},
//!     "agent/turn-stopping": "pass"
//!   },
//!   "log_events": true
//! }
//! ```
//!
//! Points may be written as the host names them (`agent/pre-step`) or as in
//! the WIT (`agent-pre-step`). `replace` takes any JSON value; its JSON text
//! becomes the new payload. A point without an outcome passes. With
//! `log_events`, every handled event is written to the host log as
//! `hooks-fixed <point> <payload>`.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;
use wharf_sdk::prelude::*;

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Config {
    subscriptions: Vec<Sub>,
    sections: Vec<Section>,
    outcomes: BTreeMap<String, OutcomeSpec>,
    log_events: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Sub {
    point: String,
    #[serde(default)]
    priority: i32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    id: String,
    #[serde(default)]
    order: i32,
    text: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "lowercase")]
enum OutcomeSpec {
    Pass,
    Replace(Value),
    Reject(String),
}

fn config() -> Config {
    wharf_sdk::config::get::<Config>().unwrap_or_else(|e| {
        wharf_sdk::log::error!("hooks-fixed: {e}");
        Config::default()
    })
}

fn outcome_for(cfg: &Config, point: HookPoint) -> Outcome {
    let spec = cfg.outcomes.iter().find_map(|(k, v)| (HookPoint::parse(k) == Some(point)).then_some(v));
    match spec {
        None | Some(OutcomeSpec::Pass) => Outcome::Pass,
        Some(OutcomeSpec::Replace(v)) => Outcome::Replace(v.to_string()),
        Some(OutcomeSpec::Reject(r)) => Outcome::reject(r.clone()),
    }
}

struct HooksFixed;

impl HooksPlugin for HooksFixed {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "hooks-fixed",
            env!("CARGO_PKG_VERSION"),
            "Test hooks: subscriptions, prompt sections and outcomes from its configuration.",
        )
    }

    fn subscriptions() -> Vec<Subscription> {
        let mut out = Vec::new();
        for s in config().subscriptions {
            match HookPoint::parse(&s.point) {
                Some(p) => out.push(Subscription::new(p, s.priority)),
                None => wharf_sdk::log::error!("hooks-fixed: unknown hook point `{}`", s.point),
            }
        }
        out
    }

    fn prompt_sections() -> Vec<PromptSection> {
        config().sections.into_iter().map(|s| PromptSection::new(s.id, s.order, s.text)).collect()
    }

    fn handle(point: HookPoint, payload: &str) -> Outcome {
        let cfg = config();
        if cfg.log_events {
            wharf_sdk::log::info!("hooks-fixed {} {payload}", point.as_str());
        }
        outcome_for(&cfg, point)
    }
}

wharf_sdk::export_hooks!(HooksFixed);

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn outcomes_from_config() {
        let cfg: Config = serde_json::from_value(json!({
            "outcomes": {
                "tools/pre-execute": {"reject": "no"},
                "system-prompt": {"replace": "new"},
                "agent-turn-stopping": "pass"
            }
        }))
        .unwrap();
        assert!(matches!(outcome_for(&cfg, HookPoint::ToolsPreExecute), Outcome::Reject(r) if r == "no"));
        assert!(matches!(outcome_for(&cfg, HookPoint::SystemPrompt), Outcome::Replace(v) if v == "\"new\""));
        assert!(matches!(outcome_for(&cfg, HookPoint::AgentTurnStopping), Outcome::Pass));
        assert!(matches!(outcome_for(&cfg, HookPoint::SessionEvent), Outcome::Pass));
    }
}
