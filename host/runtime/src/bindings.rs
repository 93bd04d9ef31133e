//! Host-side bindings generated from `wit/` (world `host`: every import the
//! host provides and every export kind a component may have).
#![allow(missing_docs)]

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "host",
    imports: {
        "wharf:plugin/process": async | trappable,
        "wharf:plugin/model": async | trappable,
        "wharf:plugin/agents": async | trappable,
        "wharf:plugin/tools": async | trappable,
        default: trappable,
    },
    exports: { default: async },
});

/// The WIT package version this host implements.
pub const WIT_PACKAGE: &str = "wharf:plugin";
/// Major/minor of the package; any 0.1.x component is accepted.
pub const WIT_VERSION: (u64, u64, u64) = (0, 1, 0);
