//! [`CliHost`]: the server's [`SessionHost`] over this binary's [`HostCtx`]
//! (plugins, MCP servers, session store, usage prices).

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use wharf_core::Agent;
use wharf_core::approval::Approver;
use wharf_core::events::{Event, EventKind};
use wharf_core::store::{Store, StoreError};
use wharf_serve::{HostFuture, PluginFeed, SessionHost};

use crate::host_ctx::HostCtx;

/// The host behind `wharf web` and `wharf serve`.
pub struct CliHost {
    host: HostCtx,
    max_steps: Option<u32>,
}

impl CliHost {
    /// A host over `host`, with `--max-steps`.
    pub fn new(host: HostCtx, max_steps: Option<u32>) -> Self {
        Self { host, max_steps }
    }
}

fn plugin_json(v: &wharf_runtime::PluginVersion) -> Value {
    json!({
        "id": v.id,
        "name": v.info.name,
        "version": v.info.version,
        "description": v.info.description,
        "path": v.path,
        "digest": v.digest,
        "size": v.size,
        "wit": format!("wharf:plugin@{}", v.wit_version),
        "kinds": v.kinds,
        "requested": v.info.requests,
        "effective": *v.effective,
        "tools": v.tools.iter().map(|t| json!({"name": t.name, "mode": t.mode, "description": t.description})).collect::<Vec<_>>(),
        "load_ms": (v.load_time.as_secs_f64() * 1000.0).round(),
        "cache": format!("{:?}", v.cache).to_lowercase(),
    })
}

impl SessionHost for CliHost {
    fn store(&self) -> &Store {
        &self.host.store
    }

    fn open_agent(
        &self,
        id: Option<&str>,
        approver: Arc<dyn Approver>,
        stop: CancellationToken,
    ) -> anyhow::Result<Agent> {
        // The API names sessions by exact id (no prefixes).
        if let Some(id) = id
            && crate::host_ctx::resolve_session(&self.host.store, id)? != id
        {
            return Err(StoreError::NotFound(id.to_string()).into());
        }
        let (agent, _) = self.host.open_agent_until(id, approver, self.max_steps, stop)?;
        Ok(agent)
    }

    fn ready(&self) -> HostFuture<'_, Result<(), String>> {
        Box::pin(self.host.mcp_ready())
    }

    fn info(&self) -> Value {
        let h = &self.host;
        json!({
            "version": env!("CARGO_PKG_VERSION"),
            "profile": h.args.profile,
            "workspace": h.workspace,
            "session_dir": h.store.describe(),
            "mcp": h.mcp.as_ref().map(|m| m.status()).unwrap_or_default(),
        })
    }

    /// [`crate::usage::summarize`] (tokens, cost from the adapter's price
    /// table, context-window use), plus `total_tokens`.
    fn usage(&self, events: &[Event]) -> Value {
        let u = crate::usage::summarize(&self.host.config, events);
        let total = u.prompt_tokens + u.completion_tokens;
        let mut v = serde_json::to_value(&u).unwrap_or(Value::Null);
        if let Some(o) = v.as_object_mut() {
            o.insert("total_tokens".into(), json!(total));
        }
        v
    }

    fn plugins(&self) -> Value {
        let versions = self.host.plugins.versions();
        let snap = self.host.plugins.registry().snapshot();
        let mcp_tools: Vec<Value> = snap
            .tools
            .values()
            .filter(|t| t.plugin().id.starts_with("mcp:"))
            .map(|t| json!({"name": t.spec().name, "plugin": t.plugin().id, "digest": t.plugin().digest}))
            .collect();
        json!({
            "plugins": versions.values().map(|v| plugin_json(v)).collect::<Vec<_>>(),
            "mcp": self.host.mcp.as_ref().map(|m| m.status()).unwrap_or_default(),
            "mcp_tools": mcp_tools,
            "generation": snap.generation,
        })
    }

    fn plugin_feed(&self) -> PluginFeed {
        let mut plugin_rx = self.host.plugins.subscribe();
        let history = self.host.plugins.history();
        let (mcp_history, mut mcp_rx) = match &self.host.mcp {
            Some(m) => {
                let (h, rx) = m.subscribe_with_history();
                (h, Some(rx))
            }
            None => (Vec::new(), None),
        };
        let plugin = |k: &EventKind| serde_json::to_string(k).ok();
        let mcp = |d: Value| json!({"type": crate::mcp::client::STATUS_EVENT, "data": d}).to_string();
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
}
