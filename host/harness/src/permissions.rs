//! Permission presets, shared by `wharf chat`, `wharf web`, `wharf acp` and
//! `wharf run`.
//!
//! A preset is the `mode` of the profile's `policy-rules` rows (see that
//! component's module doc for what each mode decides), found by what the
//! row loads, not by its id: the shipped profiles call theirs
//! `permissions`, `--profile guarded` calls its own `rules`. The shipped
//! profiles set `ask`, the interactive default;
//! `-c plugin.permissions.config.mode=PRESET` picks another at start and the
//! surfaces switch it at run time with [`switch`] (a hot swap of every such
//! row with the new `mode`). `wharf run` cannot ask anyone, so there
//! [`headless`] turns `ask` into `auto`; what still asks is resolved by
//! `agent.ask` (deny unless set).

use anyhow::{Context, Result};
use wharf_config::{Config, PluginRow};

use crate::Harness;

/// The id the shipped profiles give their preset row.
pub const ROW: &str = "permissions";

/// The name the rules component reports (and the stem of its file,
/// `policy-rules.wasm`): rows loading it carry the preset in `mode`.
pub const RULES_COMPONENT: &str = "policy-rules";

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

/// Whether config row `row` loads the rules component, judged before it
/// loads: its file (`…/policy-rules.wasm`) or OCI source names it, or it is
/// the shipped profiles' [`ROW`].
pub fn is_rules_row(row: &PluginRow) -> bool {
    let file = row.path.file_stem().and_then(|s| s.to_str()).is_some_and(|s| s == RULES_COMPONENT);
    let source = row.source.as_deref().is_some_and(|s| {
        let last = s.rsplit('/').next().unwrap_or(s);
        last.split([':', '@']).next() == Some(RULES_COMPONENT)
    });
    file || source || row.id == ROW
}

/// The ids of the rows whose `mode` is the preset, in profile order: rows
/// whose loaded component reports itself as [`RULES_COMPONENT`] (rows not
/// loaded are judged by [`is_rules_row`]).
pub fn rows(host: &Harness) -> Vec<String> {
    let versions = host.plugins.versions();
    host.config
        .plugins
        .iter()
        .filter(|r| match versions.get(&r.id) {
            Some(v) => v.info.name == RULES_COMPONENT,
            None => is_rules_row(r),
        })
        .map(|r| r.id.clone())
        .collect()
}

/// The current preset (the rules rows' `mode`, live overrides included;
/// rows that disagree are listed as `mixed (ID: MODE, …)`); `None` when
/// the profile has no rules row or none sets a mode.
pub fn current(host: &Harness) -> Option<String> {
    let modes: Vec<(String, String)> = rows(host)
        .into_iter()
        .filter_map(|id| {
            let mode = host.plugin_config(&id)?.get("mode")?.as_str()?.to_string();
            Some((id, mode))
        })
        .collect();
    let (_, first) = modes.first()?;
    if modes.iter().all(|(_, m)| m == first) {
        return Some(first.clone());
    }
    let each: Vec<String> = modes.iter().map(|(id, m)| format!("{id}: {m}")).collect();
    Some(format!("mixed ({})", each.join(", ")))
}

/// Switches to preset `name` while the host runs: every rules row is
/// reloaded with the new `mode` (calls being decided finish on the old
/// one). Returns the preset's static name.
pub async fn switch(host: &Harness, name: &str) -> Result<&'static str> {
    let preset = preset(name)?;
    let ids = rows(host);
    anyhow::ensure!(
        !ids.is_empty(),
        "this profile has no `{RULES_COMPONENT}` policy row, so it has no permission presets"
    );
    for id in ids {
        let mut set = serde_json::Map::new();
        set.insert("mode".into(), serde_json::Value::from(preset));
        host.reconfigure_plugin(&id, set).await?;
    }
    Ok(preset)
}

/// For `wharf run`, before the plugins load: the rules rows' `ask` becomes
/// `auto`, since no one can answer; other modes stay as configured.
/// `true` when it changed a row (then [`pin_headless`] keeps the change
/// across hot reloads of the config files).
pub fn headless(config: &mut Config) -> bool {
    let mut changed = false;
    for row in config.plugins.iter_mut().filter(|r| is_rules_row(r)) {
        if let Some(mode) = row.config.get_mut("mode")
            && mode.as_str() == Some("ask")
        {
            *mode = serde_json::Value::from(HEADLESS_FOR_ASK);
            changed = true;
        }
    }
    changed
}

/// Records [`headless`]'s change as a live override of each rules row the
/// config files set to `ask`, so a hot reload of them does not bring `ask`
/// back.
pub fn pin_headless(host: &Harness) {
    let on_disk = host.options.load_config().ok();
    let mut live = host.live.lock().unwrap_or_else(|e| e.into_inner());
    for id in rows(host) {
        let asks = match on_disk.as_ref().and_then(|c| c.plugin(&id)) {
            Some(row) => row.config.get("mode").and_then(|m| m.as_str()) == Some("ask"),
            // Unreadable now: the row was changed at start, keep that.
            None => true,
        };
        if asks {
            live.entry(id).or_default().insert("mode".into(), serde_json::Value::from(HEADLESS_FOR_ASK));
        }
    }
}

/// The `/permissions` listing: every preset, the current one marked.
pub fn listing(current: Option<&str>) -> String {
    let mut out = match current {
        Some(c) => format!("permissions: {c}"),
        None => format!("permissions: none (the profile has no `{RULES_COMPONENT}` row)"),
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
        assert!(listing(None).contains("no `policy-rules` row"));
    }
}
