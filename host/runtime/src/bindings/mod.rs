//! Host-side bindings of the plugin contract, one module per contract
//! version (`wit/since_vX.Y.Z/` is bound in `since_vX_Y_Z.rs`), so a
//! component built against an older contract keeps loading once a newer
//! one exists.
//!
//! The newest version is re-exported here: the rest of the runtime names
//! `crate::bindings::…` and implements that version.
//!
//! Adding a version (e.g. 0.2.0): copy `wit/since_v0.1.0/` to
//! `wit/since_v0.2.0/` and change it there (the old folder is never edited
//! again); add `since_v0_2_0.rs` with its own `bindgen!` and point the
//! re-export below at it; keep `since_v0_1_0` and give it a thin layer that
//! adds its imports to the linker and calls its exports by converting its
//! types to and from the new ones; pick the module per component from the
//! package version in its import and export names (`component.rs`,
//! `inspect_names`/`compatible`).

pub mod since_v0_1_0;

pub use since_v0_1_0::*;

/// The WIT package every contract version belongs to.
pub const WIT_PACKAGE: &str = "wharf:plugin";
