//! Wharf core: the session event log, the event bus, the agent loop and the
//! tool pipeline. Nothing here knows about WebAssembly; capabilities arrive
//! through the traits in [`plugin`] and are owned per plugin version by the
//! [`registry`].

pub mod plugin;
pub mod registry;
