//! MCP, the client side: the profile's `[[mcp]]` servers become tools named
//! `mcp__SERVER__TOOL` in a host's registry ([`McpManager`]), and a
//! session's log records the servers as plugins (`plugin/*` events with the
//! id `mcp:SERVER`). The server side (`wharf mcp serve`) is the
//! `wharf-mcp-server` surface.

mod allowlist;
pub mod client;
pub mod config;

pub use client::{McpManager, NotReady, ServerStatus, TOOL_PREFIX, plugin_id};
pub use config::McpServerConfig;
