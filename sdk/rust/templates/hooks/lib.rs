//! `{{name}}`: Wharf hook listeners and a system-prompt section.

use wharf_sdk::prelude::*;

struct Plugin;

impl HooksPlugin for Plugin {
    fn info() -> PluginInfo {
        PluginInfo::new("{{name}}", env!("CARGO_PKG_VERSION"), "Adds a prompt section and blocks `rm -rf /`.")
    }

    fn subscriptions() -> Vec<Subscription> {
        vec![Subscription::new(HookPoint::ToolsPreExecute, 0)]
    }

    fn prompt_sections() -> Vec<PromptSection> {
        vec![PromptSection::new("{{ident}}", 100, "Prefer small, reviewable changes.")]
    }

    fn handle(point: HookPoint, payload: &str) -> Outcome {
        match point {
            HookPoint::ToolsPreExecute => check_call(payload),
            _ => Outcome::Pass,
        }
    }
}

/// Rejects a call whose arguments mention `rm -rf /`.
fn check_call(payload: &str) -> Outcome {
    if payload.contains("rm -rf /") {
        Outcome::reject("refusing to delete the root directory")
    } else {
        Outcome::Pass
    }
}

wharf_sdk::export_hooks!(Plugin);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_dangerous_calls() {
        assert!(matches!(check_call(r#"{"arguments":{"command":"rm -rf /"}}"#), Outcome::Reject(_)));
        assert!(matches!(check_call(r#"{"arguments":{"command":"ls"}}"#), Outcome::Pass));
    }
}
