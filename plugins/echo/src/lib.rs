//! `echo`: returns its `text` argument unchanged. It needs no grant and
//! does no I/O, which makes it the subject of the per-call overhead
//! benchmark (`cargo xtask bench`): what a trivial tool costs as a sandboxed
//! component, against the same tool as a native function and as MCP servers.

use schemars::JsonSchema;
use serde::Deserialize;
use wharf_sdk::prelude::*;

#[derive(Deserialize, JsonSchema)]
struct EchoArgs {
    /// Text to return unchanged.
    text: String,
}

struct Echo;

impl ToolPlugin for Echo {
    fn info() -> PluginInfo {
        PluginInfo::new("echo", env!("CARGO_PKG_VERSION"), "Returns text unchanged.")
    }

    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec::new::<EchoArgs>("echo", "Returns `text` unchanged.", ToolMode::Parallel)]
    }

    fn call(name: &str, args: Args, _ctx: &CallContext) -> ToolResult {
        match name {
            "echo" => {
                let a: EchoArgs = args.parse()?;
                Ok(ToolOutput::text(a.text))
            }
            other => Err(ToolError::unknown_tool(other)),
        }
    }
}

wharf_sdk::export_tool!(Echo);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoes() {
        let out = wharf_sdk::testing::call::<Echo>("echo", &wharf_sdk::serde_json::json!({"text": "hi"}), None);
        assert_eq!(out.map(|o| o.content).ok().as_deref(), Some("hi"));
    }
}
