//! What the server does with the [`Harness`] it serves: opening a session's
//! agent, a session's usage, and the plugin change feed.

use std::sync::Arc;

use serde::Serialize;
use serde_json::json;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use wharf_core::Agent;
use wharf_core::approval::Approver;
use wharf_core::events::{Event, EventKind};
use wharf_core::store::StoreError;
use wharf_harness::Harness;
use wharf_harness::usage::UsageSummary;

/// Plugin status changes for `GET /api/plugins/events`: what happened so
/// far, then a live feed (each item one JSON object, sent as one SSE
/// `data`; a reload's `plugin/loaded` has `notice`, as in a session's stream). The feed ends when the receiver is dropped.
pub struct PluginFeed {
    /// The history, oldest first.
    pub history: Vec<String>,
    /// Later changes.
    pub live: mpsc::Receiver<String>,
}

/// A session's usage as the API shows it: the summary plus `total_tokens`.
#[derive(Debug, Clone, Serialize)]
pub struct UsageView {
    /// Tokens, cost and context use (see [`wharf_harness::usage`]).
    #[serde(flatten)]
    pub summary: UsageSummary,
    /// Prompt plus completion tokens.
    pub total_tokens: u64,
}

/// Builds the agent of a new session (`id` `None`) or of stored session
/// `id` (exact: the API names sessions by whole ids), asking `approver` on
/// `ask`; the work started for it ends when `stop` fires.
pub fn open_agent(
    harness: &Harness,
    id: Option<&str>,
    approver: Arc<dyn Approver>,
    max_steps: Option<u32>,
    stop: CancellationToken,
) -> anyhow::Result<Agent> {
    if let Some(id) = id
        && wharf_harness::sessions::resolve_session(&harness.store, id)? != id
    {
        return Err(StoreError::NotFound(id.to_string()).into());
    }
    let (agent, _) = harness.open_agent_until(id, approver, max_steps, stop)?;
    Ok(agent)
}

/// A session's usage from its events, priced by the host's config.
pub fn usage(harness: &Harness, events: &[Event]) -> UsageView {
    let summary = wharf_harness::usage::summarize(&harness.config, events);
    let total_tokens = summary.prompt_tokens + summary.completion_tokens;
    UsageView { summary, total_tokens }
}

/// The plugin history (components, then MCP servers) and a live feed of
/// changes to both.
pub fn plugin_feed(harness: &Harness) -> PluginFeed {
    let mut plugin_rx = harness.plugins.subscribe();
    let history = harness.plugins.history();
    let (mcp_history, mut mcp_rx) = match &harness.mcp {
        Some(m) => {
            let (h, rx) = m.subscribe_with_history();
            (h, Some(rx))
        }
        None => (Vec::new(), None),
    };
    // A reload carries the surfaces' announcement (`NAME reloaded (dev)`).
    let plugin = |k: &EventKind| match k {
        EventKind::PluginLoaded(p) => {
            let mut v = serde_json::to_value(k).ok()?;
            if let (Some(n), Some(o)) = (p.reload_notice(), v.as_object_mut()) {
                o.insert("notice".into(), json!(n));
            }
            serde_json::to_string(&v).ok()
        }
        _ => serde_json::to_string(k).ok(),
    };
    let mcp = |d: wharf_mcp::ServerStatus| json!({"type": wharf_mcp::client::STATUS_EVENT, "data": d}).to_string();
    let mut first: Vec<String> = history.iter().filter_map(plugin).collect();
    first.extend(mcp_history.into_iter().map(mcp));
    let (tx, live) = mpsc::channel::<String>(256);
    tokio::spawn(async move {
        loop {
            let e = tokio::select! {
                r = plugin_rx.recv() => match r {
                    Ok(k) => plugin(&k),
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                r = async { match mcp_rx.as_mut() { Some(rx) => rx.recv().await, None => std::future::pending().await } } => match r {
                    Ok(d) => Some(mcp(d)),
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => { mcp_rx = None; continue }
                },
                _ = tx.closed() => return,
            };
            if let Some(e) = e
                && tx.send(e).await.is_err()
            {
                return;
            }
        }
    });
    PluginFeed { history: first, live }
}
