//! Bakes the absolute path of the WIT package into the export macros.
//!
//! The per-world bindings are generated in the plugin crate (by the export
//! macro), so only the worlds a plugin actually exports end up in its
//! component. `wit_bindgen::generate!` resolves relative paths against the
//! *calling* crate's manifest, so the macros need an absolute path.

use std::env;
use std::fs;
use std::path::PathBuf;

/// `with` entries shared by every world: the types and imports generated once
/// in `wharf_sdk::raw`.
const WITH_IMPORTS: &str = r#""wharf:plugin/types@0.1.0": ::wharf_sdk::raw::wharf::plugin::types,
                    "wharf:plugin/log@0.1.0": ::wharf_sdk::raw::wharf::plugin::log,
                    "wharf:plugin/config@0.1.0": ::wharf_sdk::raw::wharf::plugin::config,
                    "wharf:plugin/kv@0.1.0": ::wharf_sdk::raw::wharf::plugin::kv,
                    "wharf:plugin/process@0.1.0": ::wharf_sdk::raw::wharf::plugin::process,
                    "wharf:plugin/session@0.1.0": ::wharf_sdk::raw::wharf::plugin::session,
                    "wharf:plugin/model@0.1.0": ::wharf_sdk::raw::wharf::plugin::model,
                    "wharf:plugin/agents@0.1.0": ::wharf_sdk::raw::wharf::plugin::agents,"#;

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let wit = manifest.join("../../wit/since_v0.1.0");
    let wit = fs::canonicalize(&wit).unwrap_or(wit);
    let template = manifest.join("src/export_macros.rs.in");
    println!("cargo::rerun-if-changed={}", template.display());
    println!("cargo::rerun-if-changed={}", wit.display());
    let text = match fs::read_to_string(&template) {
        Ok(t) => t,
        Err(e) => panic!("reading {}: {e}", template.display()),
    };
    let wit_str = wit.display().to_string().replace('\\', "/");
    let out = text.replace("@WIT_DIR@", &wit_str).replace("@WITH_IMPORTS@", WITH_IMPORTS);
    let dest = PathBuf::from(env::var_os("OUT_DIR").unwrap_or_default()).join("export_macros.rs");
    if let Err(e) = fs::write(&dest, out) {
        panic!("writing {}: {e}", dest.display());
    }
}
