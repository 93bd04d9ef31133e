//! `/model`, context-window use and cost in `wharf chat`.
//!
//! Every figure comes from the session log ([`wharf_harness::usage::summarize`]):
//! the model each step ran on is the one the last `session/model` event
//! before it names, priced with the adapter config's `prices` table.

use anyhow::Result;
use wharf_core::events::{Event, EventKind, PluginChange};

use super::Chat;
use wharf_harness::usage::{self, UsageSummary};

/// At most this many sessions are offered by the `/resume` picker.
const PICKER_SIZE: usize = 10;

impl Chat {
    fn usage_summary(&self) -> Option<UsageSummary> {
        let agent = self.agent.as_ref()?;
        let loaded = self.host.store.load(agent.session_id()).ok()?;
        Some(usage::summarize(&self.host.config, &loaded.events))
    }

    /// The model part of the status line (model, context %, cost).
    pub(super) fn model_status(&self) -> Option<String> {
        let (_, model) = self.host.current_model()?;
        let mut parts = vec![model];
        if let Some(u) = self.usage_summary() {
            if let Some(p) = u.context_percent {
                parts.push(format!("ctx {p:.0}%"));
            }
            if let Some(c) = u.cost {
                let turn = u.turns.last().and_then(|t| t.cost).unwrap_or(0.0);
                let cur = u.currency.as_deref();
                parts.push(format!("{} session · {} turn", usage::format_cost(c, cur), usage::format_cost(turn, cur)));
            }
        }
        Some(parts.join(" · "))
    }

    /// The cost part of the per-turn summary line (empty when unpriced).
    pub(super) fn turn_cost_text(&self) -> String {
        let Some(u) = self.usage_summary() else {
            return String::new();
        };
        let cur = u.currency.as_deref();
        let mut s = String::new();
        if let Some(c) = u.turns.last().and_then(|t| t.cost) {
            s.push_str(&format!(" · {}", usage::format_cost(c, cur)));
            if let Some(total) = u.cost {
                s.push_str(&format!(" ({} this session)", usage::format_cost(total, cur)));
            }
        }
        if let Some(p) = u.context_percent {
            s.push_str(&format!(" · context {p:.1} %"));
        }
        s
    }

    /// `/model` shows the adapter, model, configured adapters and usage;
    /// `/model NAME` (or `ADAPTER/NAME`, `ADAPTER:NAME`, `ADAPTER`) switches
    /// and logs the change, so the next request carries the new model.
    pub(super) fn model_command(&mut self, arg: &str, running: bool) -> Result<()> {
        if arg.is_empty() {
            self.show_model_status();
            return Ok(());
        }
        if running {
            self.out.line(&self.out.warn("/model NAME is not possible while a turn runs (Ctrl-C cancels it)"));
            return Ok(());
        }
        let before = self.host.adapter();
        // The chat loop is synchronous here; the switch is a short plugin
        // reload (the component is compiled already).
        let host = &self.host;
        let switched =
            tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(host.switch_model(arg)));
        let (adapter, model, warning) = match switched {
            Ok(m) => m,
            Err(e) => {
                self.out.line(&self.out.warn(&format!("/model: {}", wharf_cli_common::output::error_text(&e))));
                return Ok(());
            }
        };
        // Another adapter: the session's agent is rebuilt to use it.
        if before.as_deref() != Some(adapter.as_str())
            && let Some(old) = self.agent.take()
        {
            let agent = self.host.rebuild_agent(&old, self.approver.clone(), self.max_steps)?;
            self.agents.insert(agent.session_id().to_string(), agent.clone());
            self.agent = Some(agent);
        }
        if let Some(agent) = &self.agent {
            self.host.log_model(agent.log(), "change")?;
        }
        if let Some(w) = warning {
            self.out.line(&self.out.warn(&format!("/model: {w}")));
        }
        self.out.line(&self.out.dim(&format!("model: {adapter}/{model}")));
        Ok(())
    }

    /// Announces a reload that kept the component and changed only its
    /// config (a `plugin/loaded` and `plugin/unloaded` pair of one digest)
    /// as `↻ config of ID changed (from FILE)`, once; `true` when `ev` was
    /// such a pair's half (then it is not rendered as a load or unload).
    /// A change `/model` or `/permissions` made is reported by the command.
    pub(super) fn config_reload_notice(&mut self, ev: &Event) -> bool {
        let history = self.host.plugins.history();
        if self.dev_reload_notice(ev, &history) {
            return true;
        }
        match &ev.kind {
            EventKind::PluginLoaded(p) => {
                if !same_component_reload(&history, p) {
                    return false;
                }
                let from = match self.host.take_reload_cause(&p.id) {
                    Some(None) => return true,
                    Some(Some(files)) => format!(" (from {files})"),
                    None => String::new(),
                };
                self.end_stream();
                self.out.line(&self.out.dim(&format!("↻ config of {} changed{from}", p.id)));
                true
            }
            EventKind::PluginUnloaded(p) => {
                let at = history.iter().rposition(|e| matches!(e, EventKind::PluginUnloaded(u) if u == p));
                at.and_then(|i| i.checked_sub(1))
                    .and_then(|i| history.get(i))
                    .is_some_and(|e| matches!(e, EventKind::PluginLoaded(l) if l.id == p.id && l.digest == p.digest))
            }
            _ => false,
        }
    }
}

impl Chat {
    /// A new version of a dev build (`wharf plugin dev`, a `dev = true`
    /// row) as `↻ NAME reloaded (dev)`; the old version's unload that
    /// follows it is not shown. `true` when `ev` was handled.
    fn dev_reload_notice(&mut self, ev: &Event, history: &[EventKind]) -> bool {
        let is_dev = |id: &str, digest: &str| {
            self.host.plugins.versions().get(id).is_some_and(|v| v.is_dev() && v.digest == digest)
        };
        match &ev.kind {
            EventKind::PluginLoaded(p) if p.dev || is_dev(&p.id, &p.digest) => {
                let earlier =
                    history.iter().filter(|e| matches!(e, EventKind::PluginLoaded(l) if l.id == p.id)).count();
                if earlier < 2 {
                    return false;
                }
                self.end_stream();
                self.out.line(&self.out.dim(&format!("↻ {} reloaded (dev)", p.id)));
                true
            }
            EventKind::PluginUnloaded(p) => {
                let at = history.iter().rposition(|e| matches!(e, EventKind::PluginUnloaded(u) if u == p));
                at.and_then(|i| i.checked_sub(1)).and_then(|i| history.get(i)).is_some_and(
                    |e| matches!(e, EventKind::PluginLoaded(l) if l.id == p.id && l.digest != p.digest && (l.dev || is_dev(&l.id, &l.digest))),
                )
            }
            _ => false,
        }
    }
}

/// Whether `loaded` replaced a version of the same component (digest): the
/// plugin's previous `plugin/loaded` in `history` has that digest and no
/// `plugin/unloaded` of it came between.
fn same_component_reload(history: &[EventKind], loaded: &PluginChange) -> bool {
    let Some(at) = history.iter().rposition(|e| matches!(e, EventKind::PluginLoaded(l) if l == loaded)) else {
        return false;
    };
    for e in history[..at].iter().rev() {
        match e {
            EventKind::PluginLoaded(l) if l.id == loaded.id => return l.digest == loaded.digest,
            EventKind::PluginUnloaded(u) if u.id == loaded.id => {
                // The unload that follows a same-digest load is part of it.
                continue;
            }
            _ => {}
        }
    }
    false
}

impl Chat {
    fn show_model_status(&self) {
        self.show_model();
        let o = &self.out;
        let current = self.host.adapter();
        let adapters: Vec<String> = self
            .host
            .config
            .plugins
            .iter()
            .filter(|r| r.config.get("model").is_some())
            .map(|r| {
                let model = self
                    .host
                    .current_model()
                    .filter(|(a, _)| *a == r.id)
                    .map(|(_, m)| m)
                    .or_else(|| r.config.get("model").and_then(serde_json::Value::as_str).map(str::to_string));
                let mark = if current.as_deref() == Some(r.id.as_str()) { "*" } else { " " };
                let priced: Vec<&str> = r
                    .config
                    .get("prices")
                    .and_then(|p| p.as_object())
                    .map(|m| m.keys().map(String::as_str).collect())
                    .unwrap_or_default();
                let priced =
                    if priced.is_empty() { String::new() } else { format!(" · priced: {}", priced.join(", ")) };
                format!("  {mark} {}/{}{priced}", r.id, model.unwrap_or_default())
            })
            .collect();
        if !adapters.is_empty() {
            o.line("adapters (switch with /model NAME, /model ADAPTER/NAME or /model ADAPTER)");
            for a in adapters {
                o.line(&a);
            }
        }
        if let Some(u) = self.usage_summary() {
            o.line(&format!("cost     {}", usage::describe(&u)));
        }
    }

    /// `/resume` without an id: this workspace's latest sessions, numbered;
    /// typing a number next opens one.
    pub(super) fn resume_picker(&mut self) -> Result<()> {
        let mut list = self.host.store.list()?;
        // The session open now is not offered: it is where the user is.
        let current = self.agent.as_ref().map(|a| a.session_id().to_string()).unwrap_or_default();
        list.retain(|s| {
            s.id != current
                && s.header.spawned_by.is_none()
                && wharf_harness::sessions::same_workspace(&s.header, &self.host.workspace)
        });
        list.sort_by(|a, b| (&b.header.created, &b.id).cmp(&(&a.header.created, &a.id)));
        list.truncate(PICKER_SIZE);
        let o = &self.out;
        if list.is_empty() {
            o.line(&o.dim("no other sessions in this workspace yet"));
            return Ok(());
        }
        o.line(&o.bold("recent sessions in this workspace:"));
        for (i, s) in list.iter().enumerate() {
            let title = s.title.as_deref().unwrap_or("(no prompt)");
            o.line(&format!("{:>3}. {}  {}  {}", i + 1, s.id, o.dim(&s.header.created), super::one_line(title, 60)));
        }
        o.line(&o.dim("type a number to resume it (anything else cancels)"));
        self.picker = list.into_iter().map(|s| s.id).collect();
        Ok(())
    }

    /// The answer to a pending `/resume` picker: `Some(id)` for a listed
    /// number; any line ends the picker.
    pub(super) fn picked(&mut self, line: &str) -> Option<Option<String>> {
        if self.picker.is_empty() {
            return None;
        }
        let list = std::mem::take(&mut self.picker);
        Some(line.trim().parse::<usize>().ok().and_then(|n| n.checked_sub(1)).and_then(|i| list.get(i).cloned()))
    }
}
