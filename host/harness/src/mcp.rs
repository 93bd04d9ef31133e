//! The MCP client as the harness sees it: `wharf-mcp`'s manager with the
//! `mcp` feature (on by default), and uninhabited stand-ins without it (the
//! build `cargo xtask demo` makes), so a host of that build never holds a
//! manager and [`Harness::start`](crate::Harness::start) refuses a profile
//! that lists `[[mcp]]` servers instead of ignoring them.

#[cfg(feature = "mcp")]
pub use wharf_mcp::{McpManager, NotReady, ServerStatus, client::TOOL_PREFIX};

#[cfg(not(feature = "mcp"))]
pub use absent::{McpManager, NotReady, ServerStatus, TOOL_PREFIX};

/// Whether `plugin_id` is an MCP server's (its tools are MCP tools).
pub(crate) fn is_mcp_plugin(plugin_id: &str) -> bool {
    #[cfg(feature = "mcp")]
    return plugin_id.starts_with(wharf_mcp::client::PLUGIN_ID_PREFIX);
    #[cfg(not(feature = "mcp"))]
    {
        let _ = plugin_id;
        false
    }
}

/// Why a profile's `[[mcp]]` rows cannot run on this build.
#[cfg(not(feature = "mcp"))]
pub(crate) fn unavailable(servers: &[wharf_config::McpServer]) -> anyhow::Error {
    let names: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
    anyhow::anyhow!(
        "the profile lists MCP servers ({}), but this wharf was built without the MCP client ({})",
        names.join(", "),
        crate::FULL_BUILD
    )
}

#[cfg(not(feature = "mcp"))]
mod absent {
    use std::sync::Arc;

    /// How MCP tools' names start (`mcp__SERVER__TOOL`); none is loaded in
    /// this build, but transcripts of other builds' sessions show them.
    pub const TOOL_PREFIX: &str = "mcp__";

    /// No MCP manager exists in a build without the MCP client.
    pub enum McpManager {}

    impl McpManager {
        pub(crate) fn status(&self) -> Vec<ServerStatus> {
            match *self {}
        }

        pub(crate) fn attach_agent(self: &Arc<Self>, _: &wharf_core::Agent) -> anyhow::Result<Option<()>> {
            match **self {}
        }

        pub(crate) async fn wait_required(&self) -> Result<(), NotReady> {
            match *self {}
        }

        pub(crate) fn shutdown(&self) {
            match *self {}
        }

        pub(crate) async fn stop(&self) {
            match *self {}
        }
    }

    /// An MCP server's state: none in this build.
    #[derive(Debug, Clone, serde::Serialize)]
    pub enum ServerStatus {}

    /// A required MCP server that is not available: none in this build.
    #[derive(Debug)]
    pub enum NotReady {}

    impl std::fmt::Display for NotReady {
        fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            match *self {}
        }
    }

    impl std::error::Error for NotReady {}
}
