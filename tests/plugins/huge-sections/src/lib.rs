//! Fixture: a hooks plugin whose prompt sections are as many and as large
//! as its configuration says (`{"sections": 1, "section_bytes": 104857600}`),
//! to test the host's bounds on describe output. Subscribes to nothing.

use serde::Deserialize;
use wharf_sdk::prelude::*;

#[derive(Deserialize, Default)]
#[serde(default)]
struct Config {
    sections: usize,
    section_bytes: usize,
}

struct HugeSections;

impl HooksPlugin for HugeSections {
    fn info() -> PluginInfo {
        PluginInfo::new("huge-sections", env!("CARGO_PKG_VERSION"), "Test hooks: prompt sections sized by config.")
    }

    fn subscriptions() -> Vec<Subscription> {
        Vec::new()
    }

    fn prompt_sections() -> Vec<PromptSection> {
        let cfg = wharf_sdk::config::get::<Config>().unwrap_or_default();
        let text = "s".repeat(cfg.section_bytes);
        let mut out: Vec<PromptSection> =
            (1..cfg.sections).map(|i| PromptSection::new(format!("s{i}"), i as i32, text.clone())).collect();
        // Section `s0` takes the text itself: a huge text exists once.
        if cfg.sections > 0 {
            out.insert(0, PromptSection::new("s0", 0, text));
        }
        out
    }

    fn handle(_point: HookPoint, _payload: &str) -> Outcome {
        Outcome::Pass
    }
}

wharf_sdk::export_hooks!(HugeSections);
