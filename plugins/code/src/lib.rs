//! `code`: the `run_code` tool runs a JavaScript program (the boa engine,
//! inside this component) whose only door to the world is the host's tool
//! pipeline: the `tools` import (grant `tools`).
//!
//! In the program, `tools.NAME(args)` (one function per tool the host lists
//! at call time) and `tools.call(name, args)` return Promises; the calls a
//! program starts before it next waits (`Promise.all([...])`) go to the host
//! as ONE batch, which runs them in the scheduler's pool and answers in
//! order. A refused call (denied, unknown, invalid) rejects its Promise with
//! an `Error` whose `code` is the pipeline's code. `console.log` writes to
//! the program's stdout. The result the model sees is that stdout plus the
//! program's value as JSON: the value of the last expression, or of what a
//! `return` at the top level returns (top-level `await` is allowed), or of
//! an `async function main()` the program defines.
//!
//! Config: `max_calls` (inner calls per program, default 200),
//! `max_output_bytes` (stdout + result, default 65536).

#![allow(missing_docs)]

use std::cell::RefCell;
use std::fmt::Write as _;

use boa_engine::object::builtins::JsPromise;
use boa_engine::{
    Context, JsError, JsNativeError, JsObject, JsResult, JsString, JsValue, NativeFunction, Script, Source, js_string,
};

wit_bindgen::generate!({
    path: "../../wit",
    world: "code-plugin",
    generate_all,
});

use exports::wharf::plugin::plugin::Guest as PluginGuest;
use exports::wharf::plugin::tool::Guest as ToolGuest;
use wharf::plugin::tools;
use wharf::plugin::types::{
    CallContext, FsAccess, GrantRequest, PluginInfo, ToolError, ToolMode, ToolOutput, ToolSpec,
};

const DEFAULT_MAX_CALLS: usize = 200;
const DEFAULT_MAX_OUTPUT: usize = 64 << 10;
/// Largest program text, bytes.
const MAX_CODE_BYTES: usize = 256 << 10;

const INTRO: &str = "Run a JavaScript program that calls your tools, in a sandbox with no file, network, process or \
environment access of its own: every tool call goes through the usual permissions. Use it to do many tool calls in \
one step (globbing then reading many files, aggregating results). In the program: `await tools.NAME({..args})` \
returns the tool's text output (a Promise; start several before awaiting, e.g. `await Promise.all(paths.map(p => \
tools.read({path: p})))`, and they run concurrently); `tools.call(name, args)` calls any tool by name; a refused or \
failed call rejects with an Error whose `code` says why (catch it to go on). `console.log(...)` prints. The result \
is what was printed plus the program's value as JSON: the last expression (in a program without top-level `await`), \
a top-level `return`, or the value of an `async function main()`. Top-level `await` works. There is no `require`, `fetch`, `process` or filesystem.";

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
}

#[derive(Default)]
struct State {
    /// Calls started since the last batch: (promise id, name, args JSON).
    pending: Vec<(u32, String, String)>,
    next_id: u32,
    calls: usize,
    max_calls: usize,
    stdout: String,
    max_output: usize,
    stdout_cut: bool,
}

fn config_usize(key: &str, default: usize) -> usize {
    wharf::plugin::config::get(key).and_then(|v| v.trim().parse::<usize>().ok()).filter(|n| *n > 0).unwrap_or(default)
}

struct Code;

impl PluginGuest for Code {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "code".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "run_code: a JavaScript program that calls the session's tools through the pipeline.".into(),
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

/// Cuts `s` to at most `max` bytes on a char boundary.
fn cut(s: &mut String, max: usize) {
    if s.len() > max {
        let mut i = max;
        while !s.is_char_boundary(i) {
            i -= 1;
        }
        s.truncate(i);
    }
}

fn description() -> String {
    // The tools are the model's own (the same names and arguments); the
    // host lists them to the program at call time.
    format!("{INTRO}\n\nEvery tool you have (except run_code) is `tools.NAME(args)` with the same arguments.")
}

impl ToolGuest for Code {
    fn list_tools() -> Vec<ToolSpec> {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {
                "language": {"type": "string", "enum": ["javascript"], "description": "The program's language."},
                "code": {"type": "string", "description": "The program."},
                "timeout_ms": {"type": "integer", "minimum": 1, "description": "Wall-time limit (capped by the operator's)."}
            },
            "required": ["code"],
            "additionalProperties": false
        });
        vec![ToolSpec {
            name: "run_code".into(),
            description: description(),
            input_schema: schema.to_string(),
            mode: ToolMode::Parallel,
        }]
    }

    fn call(name: String, arguments: String, _context: CallContext) -> Result<ToolOutput, ToolError> {
        if name != "run_code" {
            return Err(err("UNKNOWN_TOOL", format!("unknown tool `{name}`")));
        }
        let args: serde_json::Value =
            serde_json::from_str(&arguments).map_err(|e| err("INVALID_ARGUMENTS", e.to_string()))?;
        let lang = args.get("language").and_then(|v| v.as_str()).unwrap_or("javascript");
        if !matches!(lang, "javascript" | "js") {
            return Err(err("INVALID_ARGUMENTS", format!("language `{lang}` is not supported (javascript only)")));
        }
        let code = args.get("code").and_then(|v| v.as_str()).unwrap_or_default();
        if code.len() > MAX_CODE_BYTES {
            return Err(err("INVALID_ARGUMENTS", format!("a program holds at most {MAX_CODE_BYTES} bytes")));
        }
        if let Some(ms) = args.get("timeout_ms").and_then(|v| v.as_u64()) {
            tools::limit_time(ms);
        }
        STATE.with_borrow_mut(|s| {
            *s = State {
                max_calls: config_usize("max_calls", DEFAULT_MAX_CALLS),
                max_output: config_usize("max_output_bytes", DEFAULT_MAX_OUTPUT),
                ..State::default()
            }
        });
        let names: Vec<String> = match tools::list_tools() {
            Ok(l) => l.into_iter().map(|t| t.name).collect(),
            Err(e) => return Err(session_err(e)),
        };
        let outcome = run(code, &names);
        let (stdout, cut_out, max_output) = STATE.with_borrow(|s| (s.stdout.clone(), s.stdout_cut, s.max_output));
        let mut text = String::new();
        if !stdout.is_empty() {
            text.push_str("stdout:\n");
            text.push_str(&stdout);
            if cut_out {
                text.push_str("\n[… stdout cut]");
            }
            text.push('\n');
        }
        match outcome {
            Ok(json) => {
                let mut json = json;
                let room = max_output.saturating_sub(text.len()).max(256);
                if json.len() > room {
                    cut(&mut json, room);
                    json.push_str(" [… result cut]");
                }
                let _ = write!(text, "result: {json}");
                Ok(ToolOutput { content: text, details: None })
            }
            Err((code, msg)) => {
                let _ = write!(text, "error: {msg}");
                Err(ToolError { code, message: text })
            }
        }
    }
}

fn err(code: &str, message: String) -> ToolError {
    ToolError { code: code.into(), message }
}

fn session_err(e: wharf::plugin::session::SessionError) -> ToolError {
    use wharf::plugin::session::SessionError as S;
    match e {
        S::NoSession => err("NO_SESSION", "run_code needs a session (it calls the session's tools)".into()),
        S::NotGranted(c) => err("NOT_GRANTED", format!("the `{c}` capability is not granted to this plugin")),
        S::Invalid(m) => err("INVALID", m),
        S::Failed(m) => err("FAILED", m),
        S::Cancelled => err("ABORTED", "cancelled".into()),
    }
}

const PRELUDE: &str = r#"(() => {
  const pending = new Map();
  const enqueue = __wharf_enqueue, print = __wharf_print;
  delete globalThis.__wharf_enqueue; delete globalThis.__wharf_print;
  const fmt = (v) => { if (typeof v === 'string') return v; try { const s = JSON.stringify(v); return s === undefined ? String(v) : s; } catch (_) { return String(v); } };
  function call(name, args) {
    return new Promise((resolve, reject) => {
      const id = enqueue(String(name), JSON.stringify(args === undefined ? {} : args));
      pending.set(id, [resolve, reject]);
    });
  }
  const api = { call };
  for (const n of NAMES) if (n !== 'call') api[n] = (args) => call(n, args);
  globalThis.tools = Object.freeze(api);
  const log = (...a) => print(a.map(fmt).join(' '));
  globalThis.console = Object.freeze({ log, info: log, warn: log, error: log, debug: log });
  return (id, ok, payload, code) => {
    const p = pending.get(id); if (!p) return; pending.delete(id);
    if (ok) p[0](payload); else { const e = new Error(payload); e.name = 'ToolError'; e.code = code; p[1](e); }
  };
})()"#;

fn enqueue(_this: &JsValue, args: &[JsValue], ctx: &mut Context) -> JsResult<JsValue> {
    let name = args.first().cloned().unwrap_or_default().to_string(ctx)?.to_std_string_escaped();
    let json = args.get(1).cloned().unwrap_or_default().to_string(ctx)?.to_std_string_escaped();
    STATE.with_borrow_mut(|s| {
        if s.calls >= s.max_calls {
            return Err(JsNativeError::range()
                .with_message(format!("a program may make at most {} tool calls", s.max_calls))
                .into());
        }
        s.calls += 1;
        let id = s.next_id;
        s.next_id += 1;
        s.pending.push((id, name, json));
        Ok(JsValue::from(id))
    })
}

fn print(_this: &JsValue, args: &[JsValue], ctx: &mut Context) -> JsResult<JsValue> {
    let text = args.first().cloned().unwrap_or_default().to_string(ctx)?.to_std_string_escaped();
    STATE.with_borrow_mut(|s| {
        if s.stdout.len() + text.len() + 1 > s.max_output {
            s.stdout_cut = true;
            let mut t = text;
            cut(&mut t, s.max_output.saturating_sub(s.stdout.len()));
            s.stdout.push_str(&t);
        } else {
            s.stdout.push_str(&text);
            s.stdout.push('\n');
        }
    });
    Ok(JsValue::undefined())
}

/// Text of a thrown value with its position (`line:column` in the
/// program) when the engine has one.
fn describe_error(e: JsError, ctx: &mut Context, line_shift: u32) -> String {
    let value = e.into_opaque(ctx).unwrap_or_default();
    let mut msg = value.to_string(ctx).map(|s| s.to_std_string_escaped()).unwrap_or_else(|_| "error".into());
    if let Some(obj) = value.as_object()
        && let Ok(stack) = obj.get(js_string!("stack"), ctx)
        && let Some(s) = stack.as_string()
    {
        let s = s.to_std_string_escaped();
        if let Some(pos) = first_position(&s, line_shift) {
            let _ = write!(msg, " (at {pos})");
        }
    }
    msg
}

/// The first `program.js:L:C` position in a stack text.
fn first_position(stack: &str, line_shift: u32) -> Option<String> {
    let i = stack.find("program.js:")?;
    let rest = &stack[i + "program.js:".len()..];
    let mut parts = rest.split(|c: char| !c.is_ascii_digit());
    let line: u32 = parts.next()?.parse().ok()?;
    let col: u32 = parts.next()?.parse().ok()?;
    Some(format!("line {}:{}", line.saturating_sub(line_shift).max(1), col))
}

type Failure = (String, String);

fn run(code: &str, names: &[String]) -> Result<String, Failure> {
    let mut ctx = Context::default();
    ctx.runtime_limits_mut().set_recursion_limit(1024);
    let fail = |c: &str, m: String| (c.to_string(), m);
    ctx.register_global_callable(js_string!("__wharf_enqueue"), 2, NativeFunction::from_fn_ptr(enqueue))
        .map_err(|e| fail("HOST_ERROR", e.to_string()))?;
    ctx.register_global_callable(js_string!("__wharf_print"), 1, NativeFunction::from_fn_ptr(print))
        .map_err(|e| fail("HOST_ERROR", e.to_string()))?;
    let names_json = serde_json::to_string(names).unwrap_or_else(|_| "[]".into());
    let prelude = PRELUDE.replace("NAMES", &names_json);
    let settle = ctx
        .eval(Source::from_bytes(prelude.as_bytes()))
        .map_err(|e| fail("HOST_ERROR", e.to_string()))?
        .as_object()
        .ok_or_else(|| fail("HOST_ERROR", "prelude".into()))?;

    // A plain script keeps the value of its last expression; one with
    // top-level `await` or `return` runs as the body of an async function
    // (on the same line, so positions stay the program's).
    let path = std::path::Path::new("program.js");
    let (value, shift) = match Script::parse(Source::from_bytes(code.as_bytes()).with_path(path), None, &mut ctx) {
        Ok(script) => (script.evaluate(&mut ctx), 0),
        Err(plain_err) => {
            let wrapped = format!("(async () => {{\n{code}\n}})()");
            match Script::parse(Source::from_bytes(wrapped.as_bytes()).with_path(path), None, &mut ctx) {
                Ok(script) => (script.evaluate(&mut ctx), 1),
                Err(_) => {
                    let msg = plain_err.to_string();
                    return Err(fail("SYNTAX_ERROR", msg));
                }
            }
        }
    };
    let mut value = value.map_err(|e| fail("SCRIPT_ERROR", describe_error(e, &mut ctx, shift)))?;
    if value.is_undefined()
        && let Ok(main) = ctx.global_object().get(js_string!("main"), &mut ctx)
        && let Some(f) = main.as_callable()
    {
        value = f
            .call(&JsValue::undefined(), &[], &mut ctx)
            .map_err(|e| fail("SCRIPT_ERROR", describe_error(e, &mut ctx, shift)))?;
    }
    drive(&mut ctx, &settle)?;
    let value = match value.as_object().and_then(|o| JsPromise::from_object(o.clone()).ok()) {
        Some(p) => match p.state() {
            boa_engine::builtins::promise::PromiseState::Fulfilled(v) => v,
            boa_engine::builtins::promise::PromiseState::Rejected(e) => {
                return Err(fail("SCRIPT_ERROR", describe_error(JsError::from_opaque(e), &mut ctx, shift)));
            }
            boa_engine::builtins::promise::PromiseState::Pending => {
                return Err(fail("SCRIPT_ERROR", "the program's promise never settled".into()));
            }
        },
        None => value,
    };
    let stringify = ctx
        .global_object()
        .get(js_string!("JSON"), &mut ctx)
        .ok()
        .and_then(|j| j.as_object())
        .and_then(|j| j.get(js_string!("stringify"), &mut ctx).ok())
        .and_then(|f| f.as_callable());
    let json = match stringify {
        Some(f) => match f.call(&JsValue::undefined(), &[value], &mut ctx) {
            Ok(v) if v.is_undefined() => "null".to_string(),
            Ok(v) => v.to_string(&mut ctx).map(|s| s.to_std_string_escaped()).unwrap_or_else(|_| "null".into()),
            Err(e) => {
                return Err(fail(
                    "SCRIPT_ERROR",
                    format!("the result is not JSON: {}", describe_error(e, &mut ctx, shift)),
                ));
            }
        },
        None => "null".into(),
    };
    Ok(json)
}

/// Runs jobs; sends the calls started meanwhile as one batch; settles
/// their promises; until no call is left.
fn drive(ctx: &mut Context, settle: &JsObject) -> Result<(), Failure> {
    loop {
        ctx.run_jobs().map_err(|e| ("SCRIPT_ERROR".to_string(), e.to_string()))?;
        let batch = STATE.with_borrow_mut(|s| std::mem::take(&mut s.pending));
        if batch.is_empty() {
            return Ok(());
        }
        let reqs: Vec<tools::ToolRequest> =
            batch.iter().map(|(_, n, a)| tools::ToolRequest { name: n.clone(), arguments: a.clone() }).collect();
        let results = tools::call_batch(&reqs).map_err(|e| {
            let t = session_err(e);
            (t.code, t.message)
        })?;
        for ((id, _, _), r) in batch.iter().zip(results) {
            let (ok, payload, code) = match r {
                Ok(o) => (true, o.content, String::new()),
                Err(e) => (false, e.message, e.code),
            };
            let args = [
                JsValue::from(*id),
                JsValue::from(ok),
                JsValue::from(JsString::from(payload.as_str())),
                JsValue::from(JsString::from(code.as_str())),
            ];
            settle.call(&JsValue::undefined(), &args, ctx).map_err(|e| ("SCRIPT_ERROR".to_string(), e.to_string()))?;
        }
    }
}

export!(Code);
