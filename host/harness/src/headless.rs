//! A host for work nobody can answer questions about: `wharf run`, and the
//! in-process tests that stand in for it. The model key is checked before
//! any plugin loads, the `ask` permission preset runs as `auto` (what still
//! asks is decided by `agent.ask`), and `--replay` swaps the model for a
//! recorded session's outputs.

use anyhow::Result;
use serde_json::{Value, json};
use wharf_core::events::EventKind;
use wharf_core::plugin::FinishReason;
use wharf_core::store::SessionStore;

use crate::{Harness, HostOptions, permissions};

/// The plugin row id the replayed model is loaded as.
pub const REPLAY_ROW: &str = "replay";
/// The component that plays a script back (in the plugin directory).
const REPLAY_COMPONENT: &str = "llm-scripted.wasm";

/// Starts a headless host: the configured model (its key must be set), or,
/// with `replay` (a session id or a unique part of one), that session's
/// recorded model outputs played back while the tools run again for real.
pub async fn start(options: &HostOptions, replay: Option<&str>) -> Result<Harness> {
    let mut headless = false;
    let host = match replay {
        None => {
            Harness::start_with(options, |config| {
                // A missing key is said now, not at the first model request.
                crate::models::require_model_key(config, options.model.as_deref())?;
                headless = permissions::headless(config);
                Ok(())
            })
            .await?
        }
        Some(id) => {
            let dir = match &options.session_dir {
                Some(d) => d.clone(),
                None => options.load_config()?.session.dir,
            };
            let store = SessionStore::new(dir);
            let id = crate::sessions::resolve_session(&store, id)?;
            let turns = replay_turns(&store, &id)?;
            Harness::start_with(options, |config| {
                headless = permissions::headless(config);
                config.plugins.retain(|p| p.id != REPLAY_ROW);
                config.plugins.push(wharf_config::PluginRow {
                    id: REPLAY_ROW.into(),
                    path: options.plugin_dir.join(REPLAY_COMPONENT),
                    config: json!({
                        "model": format!("replay:{id}"),
                        "turns": turns,
                        "on_exhausted": "error",
                    }),
                    grant: wharf_config::GrantConfig::default(),
                    warm: false,
                    source: None,
                    digest: None,
                    verify: None,
                    on_invalid_config: Default::default(),
                    dev: false,
                });
                config.agent.adapter = Some(REPLAY_ROW.into());
                Ok(())
            })
            .await?
        }
    };
    if headless {
        permissions::pin_headless(&host);
    }
    Ok(host)
}

/// Turns a recorded session's assistant messages into a script for the
/// scripted adapter: turn i answers the request holding i assistant
/// messages, exactly as the recording did.
pub fn replay_turns(store: &SessionStore, id: &str) -> Result<Value> {
    let loaded = store.load(id)?;
    let mut turns = Vec::new();
    for ev in &loaded.events {
        if let EventKind::AssistantMessage(m) = &ev.kind {
            let finish = match m.finish {
                Some(FinishReason::ToolCalls) => "tool_calls",
                Some(FinishReason::MaxTokens) => "max_tokens",
                Some(FinishReason::ContentFilter) => "content_filter",
                _ if !m.tool_calls.is_empty() => "tool_calls",
                _ => "stop",
            };
            let calls: Vec<Value> =
                m.tool_calls.iter().map(|c| json!({"id": c.id, "name": c.name, "arguments": c.arguments})).collect();
            let mut turn = json!({"text": m.content, "tool_calls": calls, "finish": finish});
            if let Some(r) = &m.reasoning {
                turn["reasoning"] = Value::from(r.clone());
            }
            if let Some(u) = &m.usage {
                turn["usage"] = serde_json::to_value(u)?;
            }
            turns.push(turn);
        }
    }
    anyhow::ensure!(!turns.is_empty(), "session {id} has no model output to replay");
    Ok(Value::Array(turns))
}
