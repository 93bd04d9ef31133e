//! Fixture: a normal tool plugin that also imports `acme:extra/thing@1.0.0`
//! (declared in `wit/extra.wit`), which no host provides. The host must
//! refuse it at link time with an error naming the missing import.
//!
//! The `ping` tool calls the import, so the import is really used and
//! survives into the component (unused imports are dropped).

#[allow(missing_docs, clippy::all)]
mod extra {
    wit_bindgen::generate!({
        world: "extra",
        path: "wit",
    });
}

use wharf_sdk::prelude::*;

struct MissingImport;

impl ToolPlugin for MissingImport {
    fn info() -> PluginInfo {
        PluginInfo::new("missing-import", env!("CARGO_PKG_VERSION"), "Fixture that imports acme:extra/thing@1.0.0.")
    }

    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec::new::<NoArgs>("ping", "Calls acme:extra/thing.ping.", ToolMode::Parallel)]
    }

    fn call(name: &str, _args: Args, _ctx: &CallContext) -> ToolResult {
        match name {
            "ping" => Ok(ToolOutput::text(extra::acme::extra::thing::ping())),
            other => Err(ToolError::unknown_tool(other)),
        }
    }
}

wharf_sdk::export_tool!(MissingImport);
