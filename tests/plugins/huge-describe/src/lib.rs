//! Fixture: a tool plugin whose `list-tools` answer is as large as its
//! configuration says, to test the host's bounds on describe output.
//!
//! ```json
//! {"tools": 10000, "schema_bytes": 104857600, "description_bytes": 0}
//! ```
//!
//! Each tool is `t0`, `t1`, …, with a JSON object schema padded to
//! `schema_bytes` and a description of `description_bytes`. With no
//! configuration it registers one small tool, `t0`, which returns `ok`.

use serde::Deserialize;
use wharf_sdk::prelude::*;

#[derive(Deserialize)]
#[serde(default)]
struct Config {
    tools: usize,
    schema_bytes: usize,
    description_bytes: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self { tools: 1, schema_bytes: 0, description_bytes: 0 }
    }
}

/// A JSON object schema of at least `bytes` bytes.
fn schema(bytes: usize) -> String {
    const HEAD: &str = r#"{"type":"object","description":""#;
    const TAIL: &str = r#""}"#;
    let pad = bytes.saturating_sub(HEAD.len() + TAIL.len());
    let mut s = String::with_capacity(HEAD.len() + pad + TAIL.len());
    s.push_str(HEAD);
    s.extend(std::iter::repeat_n('x', pad));
    s.push_str(TAIL);
    s
}

struct HugeDescribe;

impl ToolPlugin for HugeDescribe {
    fn info() -> PluginInfo {
        PluginInfo::new("huge-describe", env!("CARGO_PKG_VERSION"), "Test plugin: describe output sized by config.")
    }

    fn tools() -> Vec<ToolSpec> {
        let cfg = wharf_sdk::config::get::<Config>().unwrap_or_default();
        let schema = schema(cfg.schema_bytes);
        let description = "d".repeat(cfg.description_bytes);
        let spec = |i: usize, input_schema: String| ToolSpec {
            name: format!("t{i}"),
            description: description.clone(),
            input_schema,
            mode: ToolMode::Parallel,
        };
        let n = cfg.tools.max(1);
        let mut tools: Vec<ToolSpec> = (0..n - 1).map(|i| spec(i, schema.clone())).collect();
        // The last one takes the schema itself: a huge schema exists once.
        tools.push(spec(n - 1, schema));
        tools
    }

    fn call(_name: &str, _args: Args, _ctx: &CallContext) -> ToolResult {
        Ok(ToolOutput::text("ok"))
    }
}

wharf_sdk::export_tool!(HugeDescribe);
