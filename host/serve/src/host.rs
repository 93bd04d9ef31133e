//! What the server needs from the process that embeds it: a way to build an
//! agent for a session, and the views of the host (info, usage, plugins) the
//! API shows. `wharf serve` and `wharf web` implement it over their
//! configured host (plugins, MCP servers, session store).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use wharf_core::Agent;
use wharf_core::approval::Approver;
use wharf_core::events::Event;
use wharf_core::store::Store;

/// A boxed future the trait's async methods return.
pub type HostFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Plugin status changes for `GET /api/plugins/events`: what happened so
/// far, then a live feed (each item one JSON object, sent as one SSE
/// `data`). The feed ends when the receiver is dropped.
pub struct PluginFeed {
    /// The history, oldest first.
    pub history: Vec<String>,
    /// Later changes.
    pub live: mpsc::Receiver<String>,
}

/// The host behind a server.
pub trait SessionHost: Send + Sync + 'static {
    /// The session store every session is read from and written to.
    fn store(&self) -> &Store;

    /// Builds the agent of a new session (`id` `None`) or of stored session
    /// `id` (opened for writing), asking `approver` on `ask`. Work the host
    /// starts for this agent (e.g. logging plugin changes into its log)
    /// must end when `stop` fires, so the log can close when the session is
    /// unloaded.
    fn open_agent(
        &self,
        id: Option<&str>,
        approver: Arc<dyn Approver>,
        stop: CancellationToken,
    ) -> anyhow::Result<Agent>;

    /// Awaited before a freshly opened session's first turn (e.g. until
    /// required MCP servers are connected). `Err` is logged, and the session
    /// serves turns anyway (the host's own guards decide what they do).
    fn ready(&self) -> HostFuture<'_, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }

    /// `GET /api/info`: a JSON object describing the host.
    fn info(&self) -> Value;

    /// A session's usage (tokens, cost, context use) from its events.
    fn usage(&self, events: &[Event]) -> Value;

    /// `GET /api/plugins`: the loaded components and other tool sources.
    fn plugins(&self) -> Value;

    /// `GET /api/plugins/events`: plugin changes, history first.
    fn plugin_feed(&self) -> PluginFeed;
}
