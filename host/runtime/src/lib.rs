//! Wharf runtime: turns WebAssembly components into the core's tools,
//! adapters, policies and hooks. Takes every option as a value
//! ([`RuntimeOptions`]); it reads no environment of its own.
//!
//! - [`engine`]: the shared wasmtime engine (epochs, pooling probe).
//! - [`cache`]: the on-disk compile cache.
//! - [`dev`]: source snapshots of dev builds (`wharf plugin dev`).
//! - [`component`]: loading, describing and calling a component under limits
//!   ([`component::generic`]: components of plain WIT functions).
//! - [`bindings`]: the host side of each `wharf:plugin` contract version.
//! - [`registrations`]: what a version registers with the core (tools,
//!   adapters, policies, hooks).
//! - [`plugins`]: the plugin host — loads, hot-reloads and revokes versions.
//! - [`grants`]: request ∩ grant, deny by default.
//! - [`state`]: per-call store state and the host imports.
//! - [`services`]: the `session`, `model`, `agents` and `tools` imports.
//! - [`skills`]: skills plugins in the system prompt.
//! - [`process`]: the `process` host capability and its OS sandbox.
//! - [`fs_guard`], [`net`]: file-system and network checks of grants.
//! - [`wit_json`]: the WIT ↔ JSON mapping of generic components.
//! - [`error`]: typed load errors.

pub mod bindings;
pub mod cache;
pub mod component;
pub mod dev;
pub mod engine;
pub mod error;
pub mod fs_guard;
pub mod grants;
pub mod net;
pub mod plugins;
pub mod process;
pub mod registrations;
pub mod services;
pub mod skills;
pub mod state;
mod stream_write;
pub mod wit_json;

pub use component::{
    CallContext, CallError, FirstTierCompiler, Kind, OnInvalidConfig, PluginInfo, PluginSpec, PluginVersion, Runtime,
    RuntimeOptions, TieringOptions,
};
pub use error::LoadError;
