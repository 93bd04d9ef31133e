//! Wharf runtime: turns WebAssembly components into the core's tools,
//! adapters, policies and hooks.
//!
//! - [`engine`]: the shared wasmtime engine (epochs, pooling probe).
//! - [`cache`]: the on-disk compile cache.
//! - [`grants`]: request ∩ grant, deny by default.
//! - [`state`]: per-store state and the host imports.
//! - [`process`]: the `process` host capability and its OS sandbox.
//! - [`component`]: loading, describing and calling a component under limits.

pub mod adapters;
pub mod bindings;
pub mod cache;
pub mod component;
pub mod engine;
pub mod error;
pub mod fs_guard;
pub mod grants;
pub mod host;
pub mod net;
pub mod process;
pub mod services;
pub mod skills;
pub mod state;
pub mod wit_json;

pub use component::{
    CallContext, CallError, Kind, OnInvalidConfig, PluginInfo, PluginSpec, PluginVersion, Runtime, RuntimeOptions,
};
pub use error::LoadError;
