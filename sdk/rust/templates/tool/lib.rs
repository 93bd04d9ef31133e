//! `{{name}}`: a Wharf tool plugin.

use serde::Deserialize;
use wharf_sdk::prelude::*;

/// Arguments of `{{ident}}`. The doc comments become the JSON Schema
/// descriptions the model reads.
#[derive(Deserialize, JsonSchema)]
struct GreetArgs {
    /// Who to greet.
    name: String,
    /// How many times (1 to 10, default 1).
    #[serde(default)]
    times: Option<u32>,
}

struct Plugin;

impl ToolPlugin for Plugin {
    fn info() -> PluginInfo {
        // Ask for grants with the builder: `.filesystem(FsAccess::ReadOnly)`, `.hosts(["api.example.com"])` …
        PluginInfo::new("{{name}}", env!("CARGO_PKG_VERSION"), "Greets people.")
    }

    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec::new::<GreetArgs>("{{ident}}", "Greets someone by name.", ToolMode::Parallel)]
    }

    fn call(name: &str, args: Args, _ctx: &CallContext) -> ToolResult {
        match name {
            "{{ident}}" => greet(args.parse()?),
            other => Err(ToolError::unknown_tool(other)),
        }
    }
}

fn greet(args: GreetArgs) -> ToolResult {
    let times = args.times.unwrap_or(1);
    if !(1..=10).contains(&times) {
        return Err(ToolError::invalid_argument("`times` must be between 1 and 10"));
    }
    wharf_sdk::log::debug!("greeting {} x{times}", args.name);
    Ok(ToolOutput::text(vec![format!("Hello, {}!", args.name); times as usize].join("\n")))
}

wharf_sdk::export_tool!(Plugin);

#[cfg(test)]
mod tests {
    use super::*;

    use serde_json::json;

    // Natively, `wharf_sdk::testing` stands in for the host (config, kv, log).
    fn call(args: serde_json::Value) -> ToolResult {
        wharf_sdk::testing::call::<Plugin>("{{ident}}", &args, None)
    }

    #[test]
    fn greets() {
        assert_eq!(call(json!({"name": "Wharf"})).map(|o| o.content), Ok("Hello, Wharf!".to_string()));
    }

    #[test]
    fn bad_arguments_are_tool_errors() {
        assert_eq!(call(json!({"name": "x", "times": 0})).map_err(|e| e.code), Err("INVALID_ARGUMENT".to_string()));
        assert_eq!(call(json!({})).map_err(|e| e.code), Err("INVALID_ARGUMENT".to_string()));
    }

    #[test]
    fn schema_describes_arguments() {
        let spec = &Plugin::tools()[0];
        let schema: serde_json::Value = serde_json::from_str(&spec.input_schema).unwrap_or_default();
        assert_eq!(schema["properties"]["name"]["type"], "string");
    }
}
