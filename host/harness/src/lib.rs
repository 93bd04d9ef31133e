//! A Wharf host as a library: [`Harness::start`] turns [`HostOptions`]
//! (a profile and its layers, a workspace, where components and sessions
//! are) into a running host — config, runtime, loaded plugins, MCP servers,
//! session store — and opens sessions' agents on it. Around it: which model
//! serves ([`models`]), permission presets ([`permissions`]), usage and cost
//! from a session's log ([`usage`]), and typed views of the loaded plugins
//! for surfaces ([`views`]).
//!
//! Features (all on by default): `mcp` (the MCP client), `oci` (plugin
//! rows with an OCI `source`) and `postgres` (the PostgreSQL session
//! store). `cargo xtask demo` builds without them; a profile that needs one
//! is then refused with a message naming the full build.
//!
//! Every surface (`wharf run`, `chat`, `web`, `serve`, `acp`, `mcp serve`)
//! and the in-process tests build hosts here. Nothing in this crate parses
//! command-line flags, reads the environment for its options or prints: a
//! surface fills in [`HostOptions`] and shows [`Notice`]s its own way.

pub mod bundles;
pub mod commands;
mod harness;
pub mod headless;
pub mod images;
pub mod mcp;
pub mod models;
#[cfg(feature = "oci")]
mod oci;
mod options;
pub mod permissions;
mod plugin_specs;
pub mod sessions;
pub mod usage;
pub mod views;

pub use harness::Harness;

/// What a build without some of these features (the demo's) says to build
/// instead, after naming the part it lacks.
pub const FULL_BUILD: &str = "`cargo xtask demo` builds only what its demo needs; build the full command with \
                              `cargo build -p wharf` or `cargo xtask install`";
#[cfg(feature = "oci")]
pub use oci::resolve_row;
pub use options::{HostOptions, MAX_STEPS_LIMIT, Notice, NoticeSink};
pub use plugin_specs::{
    LiveOverrides, ReloadCauses, RowError, apply_live, shadowed_by_text, shadowed_tools, shadowing_text, specs,
    tool_precedence,
};
