//! Host-side bindings of contract `wharf:plugin@0.1.0`, generated from
//! `wit/since_v0.1.0/` (world `host`: every import the host provides and
//! every export kind a component may have).
#![allow(missing_docs)]

wasmtime::component::bindgen!({
    path: "../../wit/since_v0.1.0",
    world: "host",
    imports: {
        "wharf:plugin/process": async | trappable,
        "wharf:plugin/model": async | trappable,
        "wharf:plugin/agents": async | trappable,
        "wharf:plugin/tools": async | trappable,
        "wharf:plugin/questions": async | trappable,
        default: trappable,
    },
    exports: { default: async },
});

/// The folder of `wit/` this module binds.
pub const WIT_DIR: &str = "since_v0.1.0";
/// Major/minor/patch of the package in that folder; any 0.1.x component is
/// accepted.
pub const WIT_VERSION: (u64, u64, u64) = (0, 1, 0);
