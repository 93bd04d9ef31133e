//! Token usage, cost and context-window use of a session, from its log.
//!
//! The log is the source of truth: every step's `step/end` carries the usage
//! of its model request(s), and a [`MODEL_EVENT`] (`session/model`, marked
//! ignorable so older readers skip it) records which adapter and model serve
//! from that point on (at session start, on resume when it changed, and at
//! every `/model` or `--model` switch). Prices come from the adapter row's
//! config, per model and per 1M tokens:
//!
//! ```toml
//! [plugin.config.prices."deepseek-v4-flash"]
//! input_cache_hit = 0.0028
//! input_cache_miss = 0.14
//! output = 0.28
//! currency = "USD"
//! context_window = 1048576   # optional, tokens
//! ```
//!
//! A step's cost is `cache_hit × input_cache_hit + cache_miss ×
//! input_cache_miss + completion × output` (÷ 1M); when an adapter reports
//! no cache split, every prompt token counts as a miss.

use serde::Serialize;
use serde_json::Value;
use wharf_config::Config;
use wharf_core::events::{Event, EventKind};
use wharf_core::plugin::Usage;

pub use wharf_core::events::MODEL_EVENT;

/// The prices of one model, per 1M tokens.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelPrice {
    /// Input tokens served from the provider's cache.
    pub input_cache_hit: f64,
    /// Input tokens not served from cache.
    pub input_cache_miss: f64,
    /// Output (completion, incl. reasoning) tokens.
    pub output: f64,
    /// Currency code (`USD`).
    pub currency: Option<String>,
    /// The model's context window, tokens, when the table gives it.
    pub context_window: Option<u64>,
}

impl ModelPrice {
    /// Cost of one request's (or a sum of requests') usage.
    pub fn cost(&self, u: &Usage) -> f64 {
        let (hit, miss) = split_prompt(u);
        (hit as f64 * self.input_cache_hit
            + miss as f64 * self.input_cache_miss
            + u.completion_tokens as f64 * self.output)
            / 1_000_000.0
    }

    fn from_value(v: &Value) -> Option<Self> {
        let num = |k: &str| v.get(k).and_then(Value::as_f64).filter(|x| x.is_finite() && *x >= 0.0);
        Some(Self {
            input_cache_hit: num("input_cache_hit").or_else(|| num("input_cache_miss"))?,
            input_cache_miss: num("input_cache_miss")?,
            output: num("output")?,
            currency: v.get("currency").and_then(Value::as_str).map(|c| wharf_core::util::cut_str(c, 16).to_string()),
            context_window: v.get("context_window").and_then(Value::as_u64),
        })
    }
}

/// Cache-hit and cache-miss prompt tokens (all misses when not split).
fn split_prompt(u: &Usage) -> (u64, u64) {
    if u.cache_hit_tokens == 0 && u.cache_miss_tokens == 0 {
        (0, u.prompt_tokens)
    } else {
        (u.cache_hit_tokens, u.cache_miss_tokens)
    }
}

/// Usage of one turn.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TurnUsage {
    /// Turn number.
    pub turn: u64,
    /// The model that served the turn's last step.
    pub model: Option<String>,
    /// Steps run.
    pub steps: u64,
    /// Prompt tokens (all requests of the turn).
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Prompt tokens served from cache.
    pub cache_hit_tokens: u64,
    /// Prompt tokens not served from cache.
    pub cache_miss_tokens: u64,
    /// Cost of the turn (`None`: no price for its model).
    pub cost: Option<f64>,
}

/// Usage, cost and context use of a session.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct UsageSummary {
    /// The adapter plugin id in force at the end of the log.
    pub adapter: Option<String>,
    /// The model in force at the end of the log.
    pub model: Option<String>,
    /// Steps run in all turns.
    pub steps: u64,
    /// Prompt tokens, all requests.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Prompt tokens served from cache.
    pub cache_hit_tokens: u64,
    /// Prompt tokens not served from cache.
    pub cache_miss_tokens: u64,
    /// Total cost (`None`: no priced step).
    pub cost: Option<f64>,
    /// Whether every step with usage had a price (else `cost` is a lower bound).
    pub cost_complete: bool,
    /// Currency of `cost`.
    pub currency: Option<String>,
    /// The context window of the current model, tokens (0: unknown).
    pub context_window: u64,
    /// Prompt tokens of the last request.
    pub context_used_tokens: u64,
    /// `context_used_tokens / context_window`, percent.
    pub context_percent: Option<f64>,
    /// How the last turn ended (`completed`, `cancelled`, `interrupted`,
    /// `error` …), `running` while a turn is open, `new` before any turn.
    pub status: String,
    /// Per-turn usage, in turn order.
    pub turns: Vec<TurnUsage>,
}

/// The adapter plugin row in force when the log names none: `agent.adapter`,
/// else the first row whose config has a `model` key.
pub fn default_adapter(config: &Config) -> Option<String> {
    config.agent.adapter.clone().or_else(|| {
        config.plugins.iter().find(|r| r.config.get("model").and_then(Value::as_str).is_some()).map(|r| r.id.clone())
    })
}

/// The `model` config key of plugin row `adapter`.
pub fn configured_model(config: &Config, adapter: &str) -> Option<String> {
    config.plugin(adapter)?.config.get("model").and_then(Value::as_str).map(str::to_string)
}

/// The price table entry of `model` in adapter `adapter`'s config.
pub fn price(config: &Config, adapter: &str, model: &str) -> Option<ModelPrice> {
    ModelPrice::from_value(config.plugin(adapter)?.config.get("prices")?.get(model)?)
}

/// The context window for `model` on `adapter`: `agent.context_window`,
/// else the price table's, else the adapter config's `context_window`, else 0.
pub fn context_window(config: &Config, adapter: Option<&str>, model: Option<&str>) -> u64 {
    if let Some(w) = config.agent.context_window {
        return u64::from(w);
    }
    let Some(adapter) = adapter else { return 0 };
    if let Some(w) = model.and_then(|m| price(config, adapter, m)).and_then(|p| p.context_window) {
        return w;
    }
    config.plugin(adapter).and_then(|r| r.config.get("context_window")).and_then(Value::as_u64).unwrap_or(0)
}

/// The last `session/model` event of a log: `(adapter, model)`.
pub fn logged_model(events: &[Event]) -> Option<(String, String)> {
    events.iter().rev().find_map(model_event)
}

fn model_event(ev: &Event) -> Option<(String, String)> {
    match &ev.kind {
        EventKind::Unknown { type_name, data } if type_name == MODEL_EVENT => {
            let s =
                |k: &str| data.get(k).and_then(Value::as_str).map(|v| wharf_core::util::cut_str(v, 200).to_string());
            Some((s("adapter")?, s("model")?))
        }
        _ => None,
    }
}

/// Adds up a session's usage and prices it with `config`'s tables. The
/// model of each step is the one the log's last `session/model` event before
/// it names (else the config's).
pub fn summarize(config: &Config, events: &[Event]) -> UsageSummary {
    let mut adapter = default_adapter(config);
    let mut model = adapter.as_deref().and_then(|a| configured_model(config, a));
    let mut out = UsageSummary { cost_complete: true, status: "new".into(), ..UsageSummary::default() };
    let mut currency: Option<Option<String>> = None;
    for ev in events {
        if let Some((a, m)) = model_event(ev) {
            adapter = Some(a);
            model = Some(m);
            continue;
        }
        match &ev.kind {
            EventKind::TurnStart(t) => {
                out.status = "running".into();
                out.turns.push(TurnUsage { turn: t.turn, model: model.clone(), ..TurnUsage::default() });
            }
            EventKind::TurnEnd(t) => out.status = t.reason.as_str().to_string(),
            EventKind::StepEnd(s) => {
                out.steps += 1;
                let turn = match out.turns.last_mut() {
                    Some(t) if t.turn == s.turn => t,
                    _ => {
                        out.turns.push(TurnUsage { turn: s.turn, ..TurnUsage::default() });
                        let Some(t) = out.turns.last_mut() else { continue };
                        t
                    }
                };
                turn.steps += 1;
                turn.model.clone_from(&model);
                let Some(u) = &s.usage else { continue };
                let (hit, miss) = split_prompt(u);
                turn.prompt_tokens += u.prompt_tokens;
                turn.completion_tokens += u.completion_tokens;
                turn.cache_hit_tokens += hit;
                turn.cache_miss_tokens += miss;
                out.prompt_tokens += u.prompt_tokens;
                out.completion_tokens += u.completion_tokens;
                out.cache_hit_tokens += hit;
                out.cache_miss_tokens += miss;
                out.context_used_tokens = u.prompt_tokens;
                let p = adapter.as_deref().zip(model.as_deref()).and_then(|(a, m)| price(config, a, m));
                match p {
                    Some(p) => {
                        let c = p.cost(u);
                        turn.cost = Some(turn.cost.unwrap_or(0.0) + c);
                        out.cost = Some(out.cost.unwrap_or(0.0) + c);
                        match &currency {
                            None => currency = Some(p.currency.clone()),
                            Some(cur) if *cur != p.currency => out.cost_complete = false,
                            Some(_) => {}
                        }
                    }
                    None => out.cost_complete = false,
                }
            }
            _ => {}
        }
    }
    out.currency = currency.flatten();
    out.context_window = context_window(config, adapter.as_deref(), model.as_deref());
    if out.context_window > 0 {
        out.context_percent = Some(out.context_used_tokens as f64 * 100.0 / out.context_window as f64);
    }
    out.adapter = adapter;
    out.model = model;
    out
}

/// Tokens, steps and status without a config (no prices, no window).
pub fn summarize_unpriced(events: &[Event]) -> UsageSummary {
    let mut s = UsageSummary { cost_complete: true, status: "new".into(), ..UsageSummary::default() };
    for ev in events {
        match &ev.kind {
            EventKind::TurnStart(_) => s.status = "running".into(),
            EventKind::TurnEnd(t) => s.status = t.reason.as_str().to_string(),
            EventKind::StepEnd(e) => {
                s.steps += 1;
                if let Some(u) = &e.usage {
                    s.prompt_tokens += u.prompt_tokens;
                    s.completion_tokens += u.completion_tokens;
                }
            }
            _ => {}
        }
    }
    s.cost_complete = s.steps == 0;
    s
}

/// One line: model, cost (with the cache split) and context use.
pub fn describe(u: &UsageSummary) -> String {
    let model = match (&u.adapter, &u.model) {
        (Some(a), Some(m)) => format!("{a}/{m}"),
        (_, Some(m)) => m.clone(),
        _ => "(unknown model)".into(),
    };
    let cost = match u.cost {
        Some(c) if u.cost_complete => format!("cost {}", format_cost(c, u.currency.as_deref())),
        Some(c) => format!("cost ≥ {} (some steps unpriced)", format_cost(c, u.currency.as_deref())),
        None => "cost unknown (no price for the model)".into(),
    };
    let context = match u.context_percent {
        Some(p) => format!("context {} / {} tokens ({p:.1} %)", u.context_used_tokens, u.context_window),
        None => format!("context {} tokens (window unknown)", u.context_used_tokens),
    };
    format!(
        "model {model} · {cost} · cache hit {} / miss {} prompt tokens · {context}",
        u.cache_hit_tokens, u.cache_miss_tokens
    )
}

/// A cost for display: `$0.0123` for USD, else `0.0123 EUR`; more digits
/// for tiny amounts so that a cheap turn does not show as zero.
pub fn format_cost(cost: f64, currency: Option<&str>) -> String {
    let digits = if cost == 0.0 || cost >= 0.01 { 4 } else { 6 };
    match currency {
        Some("USD") | None => format!("${cost:.digits$}"),
        Some(c) => format!("{cost:.digits$} {c}"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use wharf_core::events::{StepEnd, StopReason, TurnEnd, TurnStart};

    fn config_from(toml: &str) -> Config {
        // The config is loaded (and the profile read) before the directory goes.
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let profile = dir.join("p.toml");
        std::fs::write(&profile, toml).unwrap();
        let opts = wharf_config::LoadOptions {
            profile: profile.display().to_string(),
            workspace: dir.clone(),
            home: None,
            plugin_dir: dir.clone(),
            patches: vec![],
            overrides: vec![],
        };
        wharf_config::load(&opts).unwrap()
    }

    const PROFILE: &str = r#"
[agent]
adapter = "ds"
[[plugin]]
id = "ds"
path = "/x.wasm"
[plugin.config]
model = "MODEL"
context_window = 4000
[plugin.config.prices.m1]
input_cache_hit = 0.5
input_cache_miss = 2.0
output = 8.0
currency = "USD"
context_window = 1000
[plugin.config.prices.m2]
input_cache_hit = 1.0
input_cache_miss = 4.0
output = 16.0
currency = "USD"
"#;

    fn config() -> Config {
        config_from(&PROFILE.replace("MODEL", "m1"))
    }

    fn ev(seq: u64, kind: EventKind) -> Event {
        Event { seq, time: String::new(), ignorable: matches!(kind, EventKind::Unknown { .. }), kind }
    }

    fn step(turn: u64, step: u32, p: u64, c: u64, hit: u64, miss: u64) -> EventKind {
        let usage = Usage {
            prompt_tokens: p,
            completion_tokens: c,
            cache_hit_tokens: hit,
            cache_miss_tokens: miss,
            reasoning_tokens: 0,
        };
        EventKind::StepEnd(StepEnd { turn, step, usage: Some(usage) })
    }

    #[test]
    fn costs_follow_the_model_in_force_per_step() {
        let events = vec![
            ev(2, EventKind::TurnStart(TurnStart { turn: 1 })),
            ev(3, step(1, 1, 100, 10, 60, 40)),
            ev(4, step(1, 2, 200, 20, 0, 0)),
            ev(5, EventKind::TurnEnd(TurnEnd { turn: 1, reason: StopReason::Completed })),
            ev(
                6,
                EventKind::Unknown {
                    type_name: MODEL_EVENT.into(),
                    data: serde_json::json!({"adapter": "ds", "model": "m2", "reason": "change"}),
                },
            ),
            ev(7, EventKind::TurnStart(TurnStart { turn: 2 })),
            ev(8, step(2, 1, 300, 30, 100, 200)),
        ];
        let s = summarize(&config(), &events);
        let t1 = (60.0 * 0.5 + 40.0 * 2.0 + 10.0 * 8.0) / 1e6 + (200.0 * 2.0 + 20.0 * 8.0) / 1e6;
        let t2 = (100.0 * 1.0 + 200.0 * 4.0 + 30.0 * 16.0) / 1e6;
        assert_eq!(s.turns.len(), 2);
        assert!((s.turns[0].cost.unwrap() - t1).abs() < 1e-12);
        assert!((s.turns[1].cost.unwrap() - t2).abs() < 1e-12);
        assert!((s.cost.unwrap() - (t1 + t2)).abs() < 1e-12);
        assert_eq!(s.turns[0].model.as_deref(), Some("m1"));
        assert_eq!(s.turns[1].model.as_deref(), Some("m2"));
        assert_eq!(
            (s.prompt_tokens, s.completion_tokens, s.cache_hit_tokens, s.cache_miss_tokens),
            (600, 60, 160, 440)
        );
        assert_eq!(s.steps, 3);
        assert_eq!(s.status, "running");
        assert_eq!(s.model.as_deref(), Some("m2"));
        // m2 has no window of its own: the adapter config's.
        assert_eq!(s.context_window, 4000);
        assert_eq!(s.context_used_tokens, 300);
        assert!((s.context_percent.unwrap() - 7.5).abs() < 1e-9);
        assert!(s.cost_complete);
    }

    #[test]
    fn unpriced_models_have_no_cost() {
        let c = config_from(&PROFILE.replace("MODEL", "other"));
        let events = vec![ev(2, EventKind::TurnStart(TurnStart { turn: 1 })), ev(3, step(1, 1, 10, 1, 0, 0))];
        let s = summarize(&c, &events);
        assert_eq!(s.cost, None);
        assert!(!s.cost_complete);
        assert_eq!(s.context_window, 4000);
    }

    #[test]
    fn formats_small_costs_visibly() {
        assert_eq!(format_cost(0.000_123, Some("USD")), "$0.000123");
        assert_eq!(format_cost(1.5, Some("EUR")), "1.5000 EUR");
    }
}
