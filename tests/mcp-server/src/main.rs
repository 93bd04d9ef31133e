//! Test fixture for Wharf's MCP tests, built on `rmcp`.
//!
//! ```text
//! wharf-mcp-fixture stdio [--linger]      serve the fixture tools on stdio (with
//!                                         --linger, stay alive 60 s after stdin
//!                                         closes: only a kill ends it early)
//! wharf-mcp-fixture http                  serve them over streamable HTTP on 127.0.0.1
//!                                         (prints http://127.0.0.1:PORT/mcp first on stdout)
//! wharf-mcp-fixture client [--call NAME=JSON]... [--wait-list-changed SECS] -- CMD [ARGS...]
//!                                         spawn CMD as a stdio MCP server, list its tools,
//!                                         make the calls and print a JSON report on stdout
//! ```
//!
//! Fixture tools: `echo {text}`, `add {a, b}` (text and structured content),
//! `fail {}` (an `isError` result), `slow {ms}`, `env {name}` (a variable of
//! the server's environment), `pid {}` (the server's process id), `grow {}`
//! (adds the tool `extra` and sends `notifications/tools/list_changed`),
//! `extra {}` (after `grow`), `read_file {path}` (the file's text),
//! `write_file {path, text}`, `connect {addr}` (a TCP connection to
//! `HOST:PORT`) — the last three answer the OS error as an `isError` result
//! (the sandbox tests).
//!
//! With `stdio --elicit`, one more tool: `ask {fields?, pad?}` sends an
//! `elicitation/create` (form: `name` string (required), `count` integer,
//! `ok` boolean; with `fields: N`, N string fields instead; `pad: B` adds B
//! bytes to the message) and answers `accepted: {content}`, `declined`,
//! `cancelled` or `elicitation failed: ERROR`.
//!
//! With `--wait-list-changed SECS` the client prints `listed` on stderr after
//! the first `tools/list`, waits up to SECS for a `tools/list_changed`, lists
//! again and reports `relisted`.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams, ElicitationAction,
    ElicitationSchema, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::transport::TokioChildProcess;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ClientHandler, ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};
use tokio::sync::Notify;

fn schema(props: Value, required: &[&str]) -> Arc<Map<String, Value>> {
    let v = json!({"type": "object", "properties": props, "required": required});
    Arc::new(v.as_object().cloned().unwrap_or_default())
}

fn base_tools() -> Vec<Tool> {
    vec![
        Tool::new("echo", "Returns `text`.", schema(json!({"text": {"type": "string"}}), &["text"])),
        Tool::new(
            "add",
            "Adds two numbers.",
            schema(json!({"a": {"type": "number"}, "b": {"type": "number"}}), &["a", "b"]),
        ),
        Tool::new("fail", "Always fails.", schema(json!({}), &[])),
        Tool::new("slow", "Sleeps `ms` milliseconds.", schema(json!({"ms": {"type": "integer"}}), &["ms"])),
        Tool::new("env", "Reads an environment variable.", schema(json!({"name": {"type": "string"}}), &["name"])),
        Tool::new("pid", "The server's process id.", schema(json!({}), &[])),
        Tool::new("grow", "Adds the tool `extra`.", schema(json!({}), &[])),
        Tool::new("read_file", "Reads a text file.", schema(json!({"path": {"type": "string"}}), &["path"])),
        Tool::new(
            "write_file",
            "Writes a text file.",
            schema(json!({"path": {"type": "string"}, "text": {"type": "string"}}), &["path", "text"]),
        ),
        Tool::new("connect", "Opens a TCP connection.", schema(json!({"addr": {"type": "string"}}), &["addr"])),
    ]
}

#[derive(Clone)]
struct Fixture {
    tools: Arc<Mutex<Vec<Tool>>>,
}

fn text(s: impl Into<String>) -> Vec<ContentBlock> {
    vec![ContentBlock::text(s)]
}

impl ServerHandler for Fixture {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_tool_list_changed().build())
            .with_server_info(rmcp::model::Implementation::new("wharf-mcp-fixture", "0.1.0"))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self.tools.lock().map(|t| t.clone()).unwrap_or_default();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.clone().unwrap_or_default();
        let arg = |k: &str| args.get(k).cloned().unwrap_or(Value::Null);
        let known = self.tools.lock().map(|t| t.iter().any(|t| t.name == request.name)).unwrap_or(false);
        if !known {
            return Err(ErrorData::invalid_params(format!("unknown tool `{}`", request.name), None));
        }
        let result = match request.name.as_ref() {
            "echo" => CallToolResult::success(text(arg("text").as_str().unwrap_or(""))),
            "add" => {
                let sum = arg("a").as_f64().unwrap_or(0.0) + arg("b").as_f64().unwrap_or(0.0);
                let mut r = CallToolResult::success(text(format!("sum: {sum}")));
                r.structured_content = Some(json!({"sum": sum}));
                r
            }
            "fail" => CallToolResult::error(text("this tool always fails")),
            "slow" => {
                let ms = arg("ms").as_u64().unwrap_or(1000);
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
                    _ = context.ct.cancelled() => return Ok(CallToolResult::error(text("cancelled")).into()),
                }
                CallToolResult::success(text(format!("slept {ms} ms")))
            }
            "env" => {
                let name = arg("name").as_str().unwrap_or("").to_string();
                CallToolResult::success(text(std::env::var(&name).unwrap_or_else(|_| "(unset)".into())))
            }
            "grow" => {
                if let Ok(mut t) = self.tools.lock()
                    && !t.iter().any(|t| t.name == "extra")
                {
                    t.push(Tool::new("extra", "Appears after `grow`.", schema(json!({}), &[])));
                }
                let _ = context.peer.notify_tool_list_changed().await;
                CallToolResult::success(text("grown"))
            }
            "extra" => CallToolResult::success(text("extra!")),
            "read_file" => match std::fs::read_to_string(arg("path").as_str().unwrap_or("")) {
                Ok(t) => CallToolResult::success(text(t)),
                Err(e) => CallToolResult::error(text(format!("read failed: {e}"))),
            },
            "write_file" => {
                let body = arg("text").as_str().unwrap_or("").to_string();
                match std::fs::write(arg("path").as_str().unwrap_or(""), &body) {
                    Ok(()) => CallToolResult::success(text(format!("wrote {} bytes", body.len()))),
                    Err(e) => CallToolResult::error(text(format!("write failed: {e}"))),
                }
            }
            "connect" => match tokio::net::TcpStream::connect(arg("addr").as_str().unwrap_or("")).await {
                Ok(_) => CallToolResult::success(text("connected")),
                Err(e) => CallToolResult::error(text(format!("connect failed: {e}"))),
            },
            "pid" => CallToolResult::success(text(std::process::id().to_string())),
            "ask" => {
                let schema = match arg("fields").as_u64() {
                    Some(n) => {
                        let props: Map<String, Value> =
                            (0..n).map(|i| (format!("f{i}"), json!({"type": "string"}))).collect();
                        serde_json::from_value::<ElicitationSchema>(json!({"type": "object", "properties": props}))
                            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?
                    }
                    None => serde_json::from_value::<ElicitationSchema>(json!({
                        "type": "object",
                        "properties": {
                            "name": {"type": "string", "title": "Your name"},
                            "count": {"type": "integer", "minimum": 1},
                            "ok": {"type": "boolean"}
                        },
                        "required": ["name"]
                    }))
                    .map_err(|e| ErrorData::internal_error(e.to_string(), None))?,
                };
                let pad = "x".repeat(arg("pad").as_u64().unwrap_or(0) as usize);
                let params = ElicitRequestParams::FormElicitationParams {
                    meta: None,
                    message: format!("Who is asking?{pad}"),
                    requested_schema: schema,
                };
                // (`Peer::create_elicitation` needs rmcp's `elicitation` feature.)
                let request = rmcp::model::ServerRequest::ElicitRequest(rmcp::model::ElicitRequest::new(params));
                match context.peer.send_request(request).await {
                    Ok(rmcp::model::ClientResult::ElicitResult(r)) => match r.action {
                        ElicitationAction::Accept => {
                            CallToolResult::success(text(format!("accepted: {}", r.content.unwrap_or(Value::Null))))
                        }
                        ElicitationAction::Decline => CallToolResult::success(text("declined")),
                        _ => CallToolResult::success(text("cancelled")),
                    },
                    Ok(_) => CallToolResult::error(text("elicitation failed: unexpected answer")),
                    Err(e) => CallToolResult::error(text(format!("elicitation failed: {e}"))),
                }
            }
            // The generated catalogue (`stdio --many N`): each answers with
            // its name and arguments.
            other if other.starts_with("cat_") => {
                CallToolResult::success(text(format!("{other} answered {}", Value::Object(args.clone()))))
            }
            other => return Err(ErrorData::invalid_params(format!("unknown tool `{other}`"), None)),
        };
        Ok(result.into())
    }
}

fn fixture() -> Fixture {
    Fixture { tools: Arc::new(Mutex::new(base_tools())) }
}

/// Topics of the generated catalogue's tools.
const TOPICS: [&str; 12] = [
    "invoice",
    "shipment",
    "weather",
    "payroll",
    "ticket",
    "inventory",
    "calendar",
    "refund",
    "lead",
    "badge",
    "lease",
    "quota",
];

/// `n` generated tools, `cat_NNN_TOPIC`, each with a description of a few
/// sentences and a schema of four arguments (a large MCP server's list).
fn catalogue(n: usize) -> Vec<Tool> {
    (0..n)
        .map(|i| {
            let topic = TOPICS[i % TOPICS.len()];
            let name = format!("cat_{i:03}_{topic}");
            let description = format!(
                "Looks up the {topic} record number {i} in the back office. Returns the record as text with its \
                 status, owner and the date it last changed. Use `region` to pick the site and `verbose` for every \
                 field."
            );
            let schema = schema(
                json!({
                    "id": {"type": "string", "description": format!("The {topic} id.")},
                    "region": {"type": "string", "enum": ["eu", "us", "apac"], "description": "The site."},
                    "verbose": {"type": "boolean", "description": "Every field, not only the summary."},
                    "limit": {"type": "integer", "description": "At most this many lines."}
                }),
                &["id"],
            );
            Tool::new(name, description, schema)
        })
        .collect()
}

async fn serve_stdio(linger: bool, many: usize, elicit: bool) -> Result<()> {
    let fx = fixture();
    if let Ok(mut t) = fx.tools.lock() {
        t.extend(catalogue(many));
        if elicit {
            t.push(Tool::new(
                "ask",
                "Asks the user (elicitation/create).",
                schema(json!({"fields": {"type": "integer"}, "pad": {"type": "integer"}}), &[]),
            ));
        }
    }
    let running = fx.serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    if linger {
        tokio::time::sleep(Duration::from_secs(60)).await;
    }
    Ok(())
}

async fn serve_http() -> Result<()> {
    let service = StreamableHttpService::new(
        || Ok(fixture()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    println!("http://{addr}/mcp");
    use std::io::Write;
    std::io::stdout().flush()?;
    axum::serve(listener, router).await?;
    Ok(())
}

#[derive(Clone)]
struct Client {
    changed: Arc<Notify>,
}

impl ClientHandler for Client {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed.notify_one();
    }
}

async fn client(args: Vec<String>) -> Result<()> {
    let mut calls: Vec<(String, Value)> = Vec::new();
    let mut wait_changed: Option<u64> = None;
    let mut it = args.into_iter();
    let mut command = Vec::new();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--call" => {
                let spec = it.next().context("--call NAME=JSON")?;
                let (name, json) = spec.split_once('=').unwrap_or((spec.as_str(), "{}"));
                calls.push((name.to_string(), serde_json::from_str(json).context("--call arguments")?));
            }
            "--wait-list-changed" => wait_changed = Some(it.next().context("--wait-list-changed SECS")?.parse()?),
            "--" => {
                command.extend(it.by_ref());
            }
            other => bail!("unknown client argument `{other}`"),
        }
    }
    let Some((program, rest)) = command.split_first() else { bail!("client: no server command after `--`") };
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(rest);
    let changed = Arc::new(Notify::new());
    let running = Client { changed: changed.clone() }.serve(TokioChildProcess::new(cmd)?).await?;
    let info = running.peer_info().map(|i| serde_json::to_value(&*i).unwrap_or(Value::Null)).unwrap_or(Value::Null);
    let tools = running.list_all_tools().await?;
    let mut report = json!({
        "server": info,
        "tools": serde_json::to_value(&tools)?,
        "calls": [],
    });
    for (name, args) in calls {
        let mut params = CallToolRequestParams::new(Cow::Owned(name.clone()));
        if let Value::Object(m) = args {
            params = params.with_arguments(m);
        }
        let entry = match running.call_tool(params).await {
            Ok(r) => json!({"name": name, "result": serde_json::to_value(&r)?}),
            Err(e) => json!({"name": name, "error": e.to_string()}),
        };
        if let Some(a) = report["calls"].as_array_mut() {
            a.push(entry);
        }
    }
    if let Some(secs) = wait_changed {
        eprintln!("listed");
        let got = tokio::time::timeout(Duration::from_secs(secs), changed.notified()).await.is_ok();
        report["list_changed"] = json!(got);
        let tools = running.list_all_tools().await?;
        report["relisted"] = serde_json::to_value(&tools)?;
    }
    println!("{}", serde_json::to_string(&report)?);
    let _ = running.cancel().await;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mode = if args.is_empty() { "stdio".to_string() } else { args.remove(0) };
    match mode.as_str() {
        "stdio" => {
            // `--many N`: N more tools (a large server's catalogue).
            let many = args
                .iter()
                .position(|a| a == "--many")
                .and_then(|i| args.get(i + 1))
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            serve_stdio(args.iter().any(|a| a == "--linger"), many, args.iter().any(|a| a == "--elicit")).await
        }
        "http" => serve_http().await,
        "client" => client(args).await,
        other => bail!("unknown mode `{other}` (stdio, http, client)"),
    }
}
