//! Permission presets, shared by `wharf chat`, `wharf web`, `wharf acp` and
//! `wharf run`.
//!
//! A preset is the `mode` of the profile's `permissions` row, a
//! `policy-rules` component (see its module doc for what each mode
//! decides). The shipped profiles set `ask`, the interactive default;
//! `-c plugin.permissions.config.mode=PRESET` picks another at start and the
//! surfaces switch it at run time with [`switch`] (a hot swap of that
//! plugin with the new `mode`). `wharf run` cannot ask anyone, so there
//! [`headless`] turns `ask` into `auto`; what still asks is resolved by
//! `agent.ask` (deny unless set).

use anyhow::{Context, Result};

use crate::host_ctx::HostCtx;

/// The id of the profile row whose `mode` is the preset.
pub const ROW: &str = "permissions";

/// The presets a user switches between, mildest first, each with what it
/// does.
pub const PRESETS: &[(&str, &str)] = &[
    ("read-only", "reads run; writes, commands and other tools are denied"),
    ("ask", "reads run; bash, file writes and other tools ask (once / always this session / no)"),
    ("auto", "reads, writes inside the workspace and the sandboxed bash run; anything else asks"),
    ("full-access", "everything runs without asking"),
];

/// The preset `wharf run` uses instead of `ask`.
pub const HEADLESS_FOR_ASK: &str = "auto";

/// The preset named `name`, as its static name (`Err` names the presets).
pub fn preset(name: &str) -> Result<&'static str> {
    PRESETS.iter().map(|(p, _)| *p).find(|p| *p == name).with_context(|| {
        let names: Vec<&str> = PRESETS.iter().map(|(p, _)| *p).collect();
        format!("unknown permission preset `{name}`: use one of {}", names.join(", "))
    })
}

/// What preset `name` does (`None` for a mode that is not a preset, e.g.
/// `workspace-write` set in a profile).
pub fn describe(name: &str) -> Option<&'static str> {
    PRESETS.iter().find(|(p, _)| *p == name).map(|(_, d)| *d)
}

/// The current preset (the `permissions` row's `mode`, live overrides
/// included); `None` when the profile has no such row or it sets no mode.
pub fn current(host: &HostCtx) -> Option<String> {
    let config = host.plugin_config(ROW)?;
    config.get("mode").and_then(|m| m.as_str()).map(str::to_string)
}

/// Switches to preset `name` while the host runs: the `permissions` plugin
/// is reloaded with the new `mode` (calls being decided finish on the old
/// one). Returns the preset's static name.
pub async fn switch(host: &HostCtx, name: &str) -> Result<&'static str> {
    let preset = preset(name)?;
    anyhow::ensure!(
        host.config.plugins.iter().any(|r| r.id == ROW),
        "this profile has no `{ROW}` policy row, so it has no permission presets"
    );
    let mut set = serde_json::Map::new();
    set.insert("mode".into(), serde_json::Value::from(preset));
    host.reconfigure_plugin(ROW, set).await?;
    Ok(preset)
}

/// For `wharf run`, before the plugins load: the `permissions` row's `ask`
/// becomes `auto`, since no one can answer; other modes stay as configured.
/// `true` when it changed the row (then [`pin_headless`] keeps the change
/// across hot reloads of the config files).
pub fn headless(config: &mut wharf_config::Config) -> bool {
    let Some(row) = config.plugins.iter_mut().find(|r| r.id == ROW) else { return false };
    match row.config.get_mut("mode") {
        Some(mode) if mode.as_str() == Some("ask") => {
            *mode = serde_json::Value::from(HEADLESS_FOR_ASK);
            true
        }
        _ => false,
    }
}

/// Records [`headless`]'s change as a live override, so a hot reload of the
/// config files does not bring `ask` back.
pub fn pin_headless(host: &HostCtx) {
    let mut live = host.live.lock().unwrap_or_else(|e| e.into_inner());
    live.entry(ROW.to_string()).or_default().insert("mode".into(), serde_json::Value::from(HEADLESS_FOR_ASK));
}

/// The `/permissions` listing: every preset, the current one marked.
pub fn listing(current: Option<&str>) -> String {
    let mut out = match current {
        Some(c) => format!("permissions: {c}"),
        None => format!("permissions: none (the profile has no `{ROW}` row)"),
    };
    for (name, what) in PRESETS {
        let mark = if current == Some(*name) { "*" } else { " " };
        out.push_str(&format!("\n  {mark} {name:<12} {what}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_resolve_and_unknown_names_list_them() {
        assert_eq!(preset("auto").ok(), Some("auto"));
        let e = preset("yolo").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("read-only, ask, auto, full-access"), "{e}");
        assert!(describe("ask").is_some_and(|d| d.contains("always this session")));
        assert_eq!(describe("workspace-write"), None);
    }

    #[test]
    fn listing_marks_the_current_preset() {
        let l = listing(Some("ask"));
        assert!(l.starts_with("permissions: ask"), "{l}");
        assert!(l.lines().any(|x| x.trim_start().starts_with("* ask")), "{l}");
        assert_eq!(l.lines().filter(|x| x.trim_start().starts_with('*')).count(), 1, "{l}");
        assert!(listing(None).contains("no `permissions` row"));
    }
}
