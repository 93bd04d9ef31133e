//! Fixture: a tool plugin for `wharf:plugin@0.2.0`, a package version the
//! host does not implement (it has 0.1.x). Built from the copy of the WIT in
//! `wit/since_v0.1.0/` (same contract, version bumped), so the only thing
//! wrong with it is the version: the host must reject it with a clear
//! "unsupported WIT version" error rather than a generic link failure.
//!
//! It does not use `wharf-sdk`, which is bound to 0.1.0.

#[allow(missing_docs, clippy::all)]
mod bindings {
    wit_bindgen::generate!({
        world: "tool-plugin",
        path: "wit",
    });
}

use bindings::exports::wharf::plugin::{plugin, tool};
use bindings::wharf::plugin::types::{
    CallContext, FsAccess, GrantRequest, PluginInfo, ToolError, ToolMode, ToolOutput, ToolSpec,
};

struct Future;

impl plugin::Guest for Future {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "future-version".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "Fixture built against wharf:plugin@0.2.0.".into(),
            requests: GrantRequest {
                filesystem: FsAccess::None,
                hosts: Vec::new(),
                env: Vec::new(),
                process: false,
                memory_mb: None,
            },
        }
    }
}

impl tool::Guest for Future {
    fn list_tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "ok".into(),
            description: "Returns `ok`.".into(),
            input_schema: r#"{"type":"object","properties":{}}"#.into(),
            mode: ToolMode::Parallel,
        }]
    }

    fn call(name: String, _arguments: String, _context: CallContext) -> Result<ToolOutput, ToolError> {
        match name.as_str() {
            "ok" => Ok(ToolOutput { content: "ok".into(), details: None }),
            _ => Err(ToolError { code: "UNKNOWN_TOOL".into(), message: format!("no tool `{name}`") }),
        }
    }
}

bindings::export!(Future with_types_in bindings);
