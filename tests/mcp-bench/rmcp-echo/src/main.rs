//! `rmcp-echo`: an MCP server on stdio (the `rmcp` crate) with one tool,
//! `echo {text}`, which returns `text` as a text content block. It is the
//! Rust MCP baseline of `cargo xtask bench`: the same trivial work as the
//! `text` component's `echo`, behind a JSON-RPC round trip over pipes.

use std::sync::Arc;

use anyhow::Result;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};

struct Echo {
    tools: Vec<Tool>,
}

impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(rmcp::model::Implementation::new("rmcp-echo", env!("CARGO_PKG_VERSION")))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name != "echo" {
            return Err(ErrorData::invalid_params(format!("unknown tool `{}`", request.name), None));
        }
        let Some(text) = request.arguments.as_ref().and_then(|a| a.get("text")).and_then(Value::as_str) else {
            return Err(ErrorData::invalid_params("echo: `text` (a string) is required", None));
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let schema = json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]});
    let schema = Arc::new(schema.as_object().cloned().unwrap_or_default());
    let echo = Echo { tools: vec![Tool::new("echo", "Returns `text` unchanged.", schema)] };
    let running = echo.serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    Ok(())
}
