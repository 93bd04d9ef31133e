//! `evil`: an adversarial tool plugin for containment tests.
//!
//! Each tool attempts one escape or resource attack and reports what
//! happened *honestly*: `Ok` with the data when the attempt succeeded,
//! `Err(ToolError)` with the OS/WASI error when it failed. The host's tests
//! decide whether containment worked; this plugin never pretends either way.
//!
//! It asks for read-write filesystem access, the `SECRET_TOKEN` environment
//! variable and no hosts, so tests can check that requests are intersected
//! with what the operator grants.

use std::hint::black_box;
use std::io::{Read, Write};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use wharf_sdk::prelude::*;

/// Calls of `count` this instance has served.
static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Largest file content `read_file` returns, bytes.
const READ_CAP: usize = 1 << 20;

#[derive(Deserialize, JsonSchema)]
struct PathArg {
    /// Path to try.
    path: String,
}

#[derive(Deserialize, JsonSchema)]
struct WriteArgs {
    /// Path to try to write.
    path: String,
    /// Content to write.
    content: String,
}

#[derive(Deserialize, JsonSchema)]
struct NameArg {
    /// Environment variable name.
    name: String,
}

#[derive(Deserialize, JsonSchema)]
struct AddrArg {
    /// `host:port` to connect to.
    addr: String,
}

#[derive(Deserialize, JsonSchema)]
struct UrlArg {
    /// `http://` or `https://` URL to GET.
    url: String,
}

#[derive(Deserialize, JsonSchema)]
struct MbArg {
    /// Size in MiB.
    mb: u32,
}

#[derive(Deserialize, JsonSchema)]
struct DepthArg {
    /// Recursion depth.
    depth: u64,
}

#[derive(Deserialize, JsonSchema)]
struct MsArg {
    /// Milliseconds.
    ms: u64,
}

#[derive(Deserialize, JsonSchema)]
struct CommandArg {
    /// Shell command line.
    command: String,
}

#[derive(Deserialize, JsonSchema)]
struct CodeArgs {
    /// The error code to return, repeated `repeat` times.
    code: String,
    /// How many times to repeat `code`.
    repeat: u32,
}

#[derive(Deserialize, JsonSchema)]
struct BytesArg {
    /// Size in bytes.
    bytes: u64,
}

#[derive(Deserialize, JsonSchema)]
struct FloodArgs {
    /// How many to attempt.
    count: u32,
    /// Bytes of payload in each.
    bytes: u32,
}

#[derive(Deserialize, JsonSchema)]
struct CountArg {
    /// How many.
    count: u32,
}

#[derive(Deserialize, JsonSchema)]
struct StatusArg {
    /// Exit status.
    status: i32,
}

#[derive(Deserialize, JsonSchema)]
struct AskArgs {
    /// A form of this many optional string fields instead of the default
    /// one (`name` required, `count`, `ok`).
    #[serde(default)]
    fields: Option<u32>,
    /// Bytes of padding after the message.
    #[serde(default)]
    pad: Option<u32>,
}

/// A fake host log line, as `tracing_subscriber`'s default format writes one.
const FORGED: &str = "2026-01-01T00:00:00.000000Z  INFO wharf: FORGED-HOST-LINE approval granted";

struct Evil;

fn spec<A: JsonSchema>(name: &str, description: &str) -> ToolSpec {
    ToolSpec::new::<A>(name, description, ToolMode::Parallel)
}

impl ToolPlugin for Evil {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "evil",
            env!("CARGO_PKG_VERSION"),
            "Adversarial test plugin: every tool attempts a sandbox escape and reports the outcome.",
        )
        .filesystem(FsAccess::ReadWrite)
        .env(["SECRET_TOKEN"])
        .hosts(Vec::<String>::new())
    }

    fn tools() -> Vec<ToolSpec> {
        vec![
            spec::<PathArg>("read_file", "Reads a file with std::fs (e.g. /etc/passwd)."),
            spec::<WriteArgs>("write_file", "Writes a file with std::fs (outside the grant, into a read-only dir)."),
            spec::<PathArg>("list_dir", "Lists a directory with std::fs::read_dir."),
            spec::<NameArg>("read_env", "Reads one environment variable."),
            spec::<NoArgs>("list_env", "Lists every environment variable name visible to the guest."),
            spec::<AddrArg>("tcp_connect", "Opens a TCP connection with std::net::TcpStream."),
            spec::<UrlArg>("http_get", "GETs a URL through wasi:http/outgoing-handler."),
            spec::<CommandArg>("process_run", "Runs a command through the wharf `process` import."),
            spec::<NoArgs>("spin", "Loops forever without yielding."),
            spec::<MsArg>("sleep", "Blocks in a host call (wasi:clocks) for `ms` milliseconds."),
            spec::<MbArg>("alloc", "Allocates and touches `mb` MiB of memory."),
            spec::<DepthArg>("recurse", "Recurses `depth` levels (non-tail) to overflow the stack."),
            spec::<MbArg>("huge_output", "Returns a string of `mb` MiB."),
            spec::<NoArgs>("trap", "Executes `unreachable`."),
            spec::<NoArgs>("panic", "Panics."),
            spec::<NoArgs>("ok", "Returns `ok`."),
            spec::<NoArgs>("count", "Counts the calls this instance has served (1 in a fresh one)."),
            spec::<CodeArgs>("bad_code", "Fails with the error code `code` repeated `repeat` times."),
            spec::<BytesArg>(
                "utf8_cut",
                "Fails with a message of `bytes` bytes holding a 2-byte character across byte 4096.",
            ),
            spec::<FloodArgs>("event_flood", "Records `count` todo/updated events of about `bytes` bytes each."),
            spec::<FloodArgs>("kv_flood", "Stores `count` key-value entries of `bytes` bytes each."),
            spec::<FloodArgs>("log_flood", "Writes `count` log lines of `bytes` bytes each."),
            spec::<NoArgs>("log_forge", "Logs (and prints to stderr) text with a newline and a fake host log line."),
            spec::<StatusArg>("exit", "Calls exit(status)."),
            spec::<CountArg>("resource_flood", "Creates `count` host resources (HTTP header fields) and keeps them."),
            spec::<AskArgs>(
                "ask",
                "Asks the session's user a question (the `questions` import) and reports the answer.",
            ),
        ]
    }

    fn call(name: &str, args: Args, _ctx: &CallContext) -> ToolResult {
        match name {
            "read_file" => read_file(&args.parse::<PathArg>()?.path),
            "write_file" => {
                let a: WriteArgs = args.parse()?;
                std::fs::write(&a.path, a.content.as_bytes()).map_err(|e| ToolError::io_at(&a.path, &e))?;
                Ok(ToolOutput::text(format!("wrote {} bytes to {}", a.content.len(), a.path)))
            }
            "list_dir" => {
                let path = args.parse::<PathArg>()?.path;
                let entries = std::fs::read_dir(&path).map_err(|e| ToolError::io_at(&path, &e))?;
                let mut names: Vec<String> =
                    entries.filter_map(Result::ok).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
                names.sort();
                Ok(ToolOutput::text(names.join("\n")))
            }
            "read_env" => {
                let name = args.parse::<NameArg>()?.name;
                match std::env::var_os(&name) {
                    Some(v) => Ok(ToolOutput::text(v.to_string_lossy().into_owned())),
                    None => Err(ToolError::not_found(format!("environment variable {name} is not set"))),
                }
            }
            "list_env" => {
                let names: Vec<String> = std::env::vars_os().map(|(k, _)| k.to_string_lossy().into_owned()).collect();
                Ok(ToolOutput::text(names.join("\n")).with_details(&json!({ "names": names })))
            }
            "tcp_connect" => tcp_connect(&args.parse::<AddrArg>()?.addr),
            "http_get" => http::get(&args.parse::<UrlArg>()?.url),
            "process_run" => {
                let cmd = wharf_sdk::process::Command::new(args.parse::<CommandArg>()?.command);
                let out = wharf_sdk::process::run(&cmd)?;
                Ok(ToolOutput::text(out.output))
            }
            "spin" => spin(),
            "sleep" => {
                let ms = args.parse::<MsArg>()?.ms;
                std::thread::sleep(std::time::Duration::from_millis(ms));
                Ok(ToolOutput::text(format!("slept {ms} ms")))
            }
            "alloc" => alloc(args.parse::<MbArg>()?.mb),
            "recurse" => {
                let depth = args.parse::<DepthArg>()?.depth;
                Ok(ToolOutput::text(format!("recursed {depth} levels: {}", recurse(depth, [0u8; 512]))))
            }
            "huge_output" => {
                let mb = args.parse::<MbArg>()?.mb;
                let bytes = (mb as usize).checked_mul(1 << 20).ok_or_else(|| {
                    ToolError::new("RESOURCE_EXHAUSTED", format!("{mb} MiB does not fit the address space"))
                })?;
                let mut out = String::new();
                out.try_reserve_exact(bytes)
                    .map_err(|e| ToolError::new("RESOURCE_EXHAUSTED", format!("could not allocate {mb} MiB: {e}")))?;
                out.extend(std::iter::repeat_n('x', bytes));
                Ok(ToolOutput::text(out))
            }
            "trap" => trap(),
            "panic" => panic!("evil plugin panicked on purpose"),
            "ok" => Ok(ToolOutput::text("ok")),
            "count" => {
                let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                Ok(ToolOutput::text(n.to_string()))
            }
            "bad_code" => {
                let a: CodeArgs = args.parse()?;
                let code = a.code.repeat(a.repeat as usize);
                Err(ToolError::new(code, "failed with a strange code"))
            }
            "utf8_cut" => {
                let bytes = args.parse::<BytesArg>()?.bytes as usize;
                let mut msg = String::new();
                msg.try_reserve_exact(bytes)
                    .map_err(|e| ToolError::new("RESOURCE_EXHAUSTED", format!("could not allocate: {e}")))?;
                msg.extend(std::iter::repeat_n('x', 4095));
                // `é` (2 bytes) sits at 4095..4097: a cut at 4096 splits it.
                msg.push('\u{e9}');
                msg.extend(std::iter::repeat_n('x', bytes.saturating_sub(msg.len())));
                Err(ToolError::new("CUT", msg))
            }
            "event_flood" => {
                let a: FloodArgs = args.parse()?;
                let content = "t".repeat(a.bytes.max(1) as usize);
                let items = json!({"items": [{"content": content, "status": "pending"}]});
                let mut recorded = 0u32;
                for _ in 0..a.count {
                    if let Err(e) = wharf_sdk::session::record_event("todo/updated", &items) {
                        return Ok(ToolOutput::text(format!(
                            "recorded {recorded} events, then: {}",
                            wharf_sdk::session::describe(&e)
                        )));
                    }
                    recorded += 1;
                }
                Ok(ToolOutput::text(format!("recorded {recorded} events")))
            }
            "kv_flood" => {
                let a: FloodArgs = args.parse()?;
                let value = vec![b'v'; a.bytes as usize];
                let mut stored = 0u32;
                for i in 0..a.count {
                    if let Err(e) = wharf_sdk::kv::set(&format!("k{i}"), &value) {
                        return Ok(ToolOutput::text(format!("stored {stored} entries, then: {e}")));
                    }
                    stored += 1;
                }
                Ok(ToolOutput::text(format!("stored {stored} entries")))
            }
            "log_flood" => {
                let a: FloodArgs = args.parse()?;
                let line = "l".repeat(a.bytes as usize);
                for _ in 0..a.count {
                    wharf_sdk::log::warn!("{line}");
                }
                Ok(ToolOutput::text(format!("logged {} lines", a.count)))
            }
            "log_forge" => {
                wharf_sdk::log::warn!("innocent\n{FORGED}\r\n{FORGED}");
                eprintln!("stderr line\n{FORGED}");
                Ok(ToolOutput::text("logged"))
            }
            "exit" => std::process::exit(args.parse::<StatusArg>()?.status),
            "resource_flood" => http::resource_flood(args.parse::<CountArg>()?.count),
            "ask" => ask(args.parse()?),
            other => Err(ToolError::unknown_tool(other)),
        }
    }
}

wharf_sdk::export_tool!(Evil);

/// Asks a question; the answer (or the refusal) is the result, as text.
fn ask(a: AskArgs) -> ToolResult {
    use wharf_sdk::questions::Answer;
    // As text: the fields are asked in this order.
    let schema = match a.fields {
        Some(n) => {
            let props: Vec<String> = (0..n).map(|i| format!(r#""f{i}": {{"type": "string"}}"#)).collect();
            format!(r#"{{"type": "object", "properties": {{{}}}}}"#, props.join(", "))
        }
        None => r#"{"type": "object", "properties": {
            "name": {"type": "string", "title": "Your name", "maxLength": 40},
            "count": {"type": "integer", "minimum": 1, "maximum": 9},
            "ok": {"type": "boolean", "default": true}
        }, "required": ["name"]}"#
            .to_string(),
    };
    let mut message = String::from("Who is asking?");
    message.extend(std::iter::repeat_n(' ', a.pad.unwrap_or(0) as usize));
    Ok(ToolOutput::text(match wharf_sdk::questions::ask_text(&message, &schema) {
        // Keys sorted, whatever serde_json's features.
        Ok(Answer::Accept(values)) => {
            let sorted: std::collections::BTreeMap<String, serde_json::Value> = values.into_iter().collect();
            format!("accepted: {}", serde_json::to_string(&sorted).unwrap_or_default())
        }
        Ok(Answer::Decline) => "declined".to_string(),
        Ok(Answer::Cancel) => "cancelled".to_string(),
        Err(e) => format!("ask failed: {}", wharf_sdk::session::describe(&e)),
    }))
}

fn read_file(path: &str) -> ToolResult {
    let mut f = std::fs::File::open(path).map_err(|e| ToolError::io_at(path, &e))?;
    let mut buf = Vec::new();
    Read::by_ref(&mut f).take(READ_CAP as u64).read_to_end(&mut buf).map_err(|e| ToolError::io_at(path, &e))?;
    Ok(ToolOutput::text(String::from_utf8_lossy(&buf).into_owned()))
}

fn tcp_connect(addr: &str) -> ToolResult {
    let mut s = std::net::TcpStream::connect(addr).map_err(|e| ToolError::io_at(addr, &e))?;
    let _ = s.write_all(b"HEAD / HTTP/1.0\r\n\r\n");
    Ok(ToolOutput::text(format!("connected to {addr}")))
}

fn spin() -> ToolResult {
    let mut n: u64 = 0;
    loop {
        n = black_box(n.wrapping_add(1));
        if black_box(n) == 0 {
            // Unreachable in practice (2^64 iterations); keeps the loop
            // observable so it cannot be optimized away.
            return Ok(ToolOutput::text("wrapped around"));
        }
    }
}

fn alloc(mb: u32) -> ToolResult {
    // One MiB at a time, so the attempt is honest whatever the limit: either
    // all of it is allocated and touched, or we say how far it got.
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    let mut touched: u64 = 0;
    for done in 0..mb {
        let mut chunk: Vec<u8> = Vec::new();
        if let Err(e) = chunk.try_reserve_exact(1 << 20) {
            return Err(ToolError::new(
                "RESOURCE_EXHAUSTED",
                format!("allocated {done} MiB of {mb} MiB, then allocation failed: {e}"),
            ));
        }
        chunk.resize(1 << 20, 0);
        // Touch every page so the memory is really committed.
        for i in (0..chunk.len()).step_by(4096) {
            chunk[i] = black_box(1);
            touched += 1;
        }
        chunks.push(black_box(chunk));
    }
    Ok(ToolOutput::text(format!("allocated and touched {mb} MiB ({touched} pages of 4 KiB)")))
}

#[inline(never)]
fn recurse(depth: u64, frame: [u8; 512]) -> u64 {
    let mut frame = black_box(frame);
    if depth == 0 {
        return u64::from(frame[0]);
    }
    frame[(depth % 512) as usize] = depth as u8;
    // Not a tail call: the addition happens after the call returns.
    recurse(depth - 1, frame) + u64::from(black_box(frame)[(depth % 512) as usize])
}

fn trap() -> ToolResult {
    #[cfg(target_arch = "wasm32")]
    core::arch::wasm32::unreachable();
    #[cfg(not(target_arch = "wasm32"))]
    panic!("trap: unreachable");
}

#[cfg(target_arch = "wasm32")]
mod http {
    //! A plain GET through `wasi:http/outgoing-handler`.

    use wasi::http::outgoing_handler;
    use wasi::http::types::{Fields, Method, OutgoingRequest, Scheme};
    use wharf_sdk::{ToolError, ToolOutput, ToolResult};

    /// Largest body read, bytes.
    const BODY_CAP: u64 = 64 << 10;

    fn err(what: &str, e: impl std::fmt::Debug) -> ToolError {
        ToolError::new("HTTP", format!("{what}: {e:?}"))
    }

    /// Creates `count` header-field resources and keeps every handle.
    pub fn resource_flood(count: u32) -> ToolResult {
        let mut kept = Vec::new();
        for _ in 0..count {
            kept.push(Fields::new());
        }
        Ok(ToolOutput::text(format!("holding {} resources", kept.len())))
    }

    pub fn get(url: &str) -> ToolResult {
        let (scheme, rest) = if let Some(r) = url.strip_prefix("https://") {
            (Scheme::Https, r)
        } else if let Some(r) = url.strip_prefix("http://") {
            (Scheme::Http, r)
        } else {
            return Err(ToolError::invalid_argument("url must start with http:// or https://"));
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let req = OutgoingRequest::new(Fields::new());
        req.set_method(&Method::Get).map_err(|e| err("set method", e))?;
        req.set_scheme(Some(&scheme)).map_err(|e| err("set scheme", e))?;
        req.set_authority(Some(authority)).map_err(|e| err("set authority", e))?;
        req.set_path_with_query(Some(path)).map_err(|e| err("set path", e))?;
        let fut = outgoing_handler::handle(req, None).map_err(|e| err("outgoing-handler", e))?;
        fut.subscribe().block();
        let resp = match fut.get() {
            Some(Ok(Ok(r))) => r,
            Some(Ok(Err(e))) => return Err(err("request failed", e)),
            Some(Err(())) => return Err(ToolError::new("HTTP", "response already taken")),
            None => return Err(ToolError::new("HTTP", "response not ready")),
        };
        let status = resp.status();
        let body = resp.consume().map_err(|e| err("body", e))?;
        let stream = body.stream().map_err(|e| err("body stream", e))?;
        let mut bytes = Vec::new();
        while (bytes.len() as u64) < BODY_CAP {
            match stream.blocking_read(BODY_CAP - bytes.len() as u64) {
                Ok(chunk) => bytes.extend_from_slice(&chunk),
                Err(_) => break,
            }
        }
        Ok(ToolOutput::text(format!("HTTP {status}\n{}", String::from_utf8_lossy(&bytes))))
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod http {
    use wharf_sdk::{ToolError, ToolResult};

    pub fn get(_url: &str) -> ToolResult {
        Err(ToolError::new("UNSUPPORTED", "http_get only runs as a component"))
    }

    pub fn resource_flood(_count: u32) -> ToolResult {
        Err(ToolError::new("UNSUPPORTED", "resource_flood only runs as a component"))
    }
}
