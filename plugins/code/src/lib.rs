//! `code`: the `run_code` tool runs a JavaScript program (the boa engine,
//! inside this component) whose only door to the world is the host's tool
//! pipeline: the `tools` import (grant `tools`).
//!
//! In the program, `tools.NAME(args)` (one function per tool the host lists
//! at call time; any other name and `tools.call(name, args)` are sent to
//! the host too, which refuses what it does not offer) returns a Promise;
//! the calls a program starts before it next waits (`Promise.all([...])`)
//! go to the host as ONE batch, which runs them in the scheduler's pool and
//! answers in order. A refused call (denied, unknown, invalid) rejects its
//! Promise with a `ToolError` whose `code` is the pipeline's code.
//! `console.log` writes to the program's stdout. The result the model sees
//! is that stdout plus the program's value as JSON: the value of the last
//! expression, or of what a `return` at the top level returns (top-level
//! `await` is allowed), or of an `async function main()` the program
//! defines. Errors carry the line:column in the program.
//!
//! Config: `max_calls` (inner calls per program, default 200),
//! `max_output_bytes` (stdout + result, default 65536). Wall time and
//! memory are the operator's (`grant.timeout_ms`, `grant.memory_mb`);
//! `timeout_ms` in the arguments only shortens the wall time.

#![allow(missing_docs)]

use std::cell::RefCell;
use std::fmt::Write as _;

use boa_engine::object::builtins::JsPromise;
use boa_engine::{
    Context, JsError, JsNativeError, JsObject, JsResult, JsString, JsValue, NativeFunction, Script, Source, js_string,
};

wit_bindgen::generate!({
    path: "../../wit/since_v0.1.0",
    world: "code-plugin",
    generate_all,
});

// h38-python: `language: "python"` runs on Monty (src/python.rs).
mod python;

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
a top-level `return`, or the value of an `async function main()`. Top-level `await` works. There is no `require`, `fetch`, `process` or filesystem. \
`await tools.search(\"words\")` lists the callable tools matching the words, each `{name, description, arguments}` \
(use it when the tool you need is not listed below).";

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
    /// The tools the host listed at call time (`tools.search` looks here).
    static CATALOG: RefCell<Vec<ToolSpec>> = const { RefCell::new(Vec::new()) };
}

/// Most results one `tools.search` gives.
const MAX_SEARCH_RESULTS: usize = 50;
/// Results of a `tools.search` without `limit`.
const DEFAULT_SEARCH_RESULTS: usize = 8;
/// Bytes of a tool's description in a search result.
const SEARCH_DESCRIPTION_BYTES: usize = 300;

/// A compact argument signature of a JSON schema: `{path: string, limit?: integer}`.
fn signature(schema: &serde_json::Value, depth: usize) -> String {
    let ty = |v: &serde_json::Value| -> String {
        if let Some(e) = v.get("enum").and_then(|e| e.as_array()) {
            let parts: Vec<String> = e.iter().take(8).map(|x| x.to_string()).collect();
            return parts.join(" | ");
        }
        match v.get("type") {
            Some(serde_json::Value::String(t)) if t == "object" && depth < 2 => signature(v, depth + 1),
            Some(serde_json::Value::String(t)) if t == "array" => {
                format!("{}[]", v.get("items").map(signature_type).unwrap_or_else(|| "any".into()))
            }
            Some(serde_json::Value::String(t)) => t.clone(),
            Some(serde_json::Value::Array(ts)) => ts.iter().filter_map(|t| t.as_str()).collect::<Vec<_>>().join(" | "),
            _ => "any".into(),
        }
    };
    let Some(props) = schema.get("properties").and_then(|p| p.as_object()) else { return "{}".into() };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(|r| r.as_array())
        .map(|r| r.iter().filter_map(|x| x.as_str()).collect())
        .unwrap_or_default();
    let parts: Vec<String> = props
        .iter()
        .take(24)
        .map(|(k, v)| format!("{k}{}: {}", if required.contains(&k.as_str()) { "" } else { "?" }, ty(v)))
        .collect();
    format!("{{{}}}", parts.join(", "))
}

fn signature_type(v: &serde_json::Value) -> String {
    v.get("type").and_then(|t| t.as_str()).unwrap_or("any").to_string()
}

/// `__wharf_search(query, limit)`: [`search_tools`] as JSON.
fn search(_this: &JsValue, args: &[JsValue], ctx: &mut Context) -> JsResult<JsValue> {
    let query = args.first().cloned().unwrap_or_default().to_string(ctx)?.to_std_string_escaped();
    let limit = match args.get(1) {
        Some(v) if v.is_number() => Some(v.to_number(ctx)?.max(1.0) as usize),
        _ => None,
    };
    let found: Vec<serde_json::Value> = search_tools(&query, limit)
        .into_iter()
        .map(|f| serde_json::json!({"name": f.name, "description": f.description, "arguments": f.arguments}))
        .collect();
    let json = serde_json::to_string(&found).unwrap_or_else(|_| "[]".into());
    Ok(JsValue::from(JsString::from(json.as_str())))
}

/// Fills the catalogue `tools.search` looks in from the host's list at
/// this moment (Python's first `tools.search` of a run calls it; without a
/// session or the grant it is empty).
pub(crate) fn load_catalog() -> Result<(), ToolError> {
    let specs: Vec<ToolSpec> = match tools::list_tools() {
        Ok(l) => l,
        Err(wharf::plugin::session::SessionError::NoSession | wharf::plugin::session::SessionError::NotGranted(_)) => {
            Vec::new()
        }
        Err(e) => return Err(session_err(e)),
    };
    CATALOG.with_borrow_mut(|c| *c = specs);
    Ok(())
}

/// One tool `tools.search` found.
pub(crate) struct Found {
    /// The tool's name.
    pub name: String,
    /// Its description, cut at [`SEARCH_DESCRIPTION_BYTES`].
    pub description: String,
    /// Its compact argument signature ([`signature`]).
    pub arguments: String,
}

/// The listed tools best matching the words of `query` (in the name counts
/// most, then the description), at most `limit` (default
/// [`DEFAULT_SEARCH_RESULTS`], at most [`MAX_SEARCH_RESULTS`]); both
/// languages' `tools.search`.
pub(crate) fn search_tools(query: &str, limit: Option<usize>) -> Vec<Found> {
    let query = query.to_lowercase();
    let limit = limit.map_or(DEFAULT_SEARCH_RESULTS, |l| l.clamp(1, MAX_SEARCH_RESULTS));
    let words: Vec<&str> = query.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).take(16).collect();
    CATALOG.with_borrow(|specs| {
        let mut scored: Vec<(usize, usize)> = specs
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let name = t.name.to_lowercase();
                let desc = t.description.to_lowercase();
                let mut score = 0;
                if name == query.trim() {
                    score += 100;
                }
                for w in &words {
                    if name.contains(w) {
                        score += 10;
                    }
                    if desc.contains(w) {
                        score += 3;
                    }
                }
                (score, i)
            })
            .filter(|(score, _)| words.is_empty() || *score > 0)
            .collect();
        // Best first; equal scores keep the host's order.
        scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        scored
            .into_iter()
            .take(limit)
            .map(|(_, i)| {
                let t = &specs[i];
                let mut description = t.description.clone();
                cut(&mut description, SEARCH_DESCRIPTION_BYTES);
                let schema: serde_json::Value = serde_json::from_str(&t.input_schema).unwrap_or_default();
                Found { name: t.name.clone(), description, arguments: signature(&schema, 0) }
            })
            .collect()
    })
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
    // The tools are the model's own (the same names and arguments). The host
    // appends the catalogue of the tools a program may call (names and
    // argument shapes) to this description at every model request, and lists
    // them to the program at call time.
    let calls = config_usize("max_calls", DEFAULT_MAX_CALLS);
    let output = config_usize("max_output_bytes", DEFAULT_MAX_OUTPUT);
    format!(
        "{INTRO}\n\nEvery tool you have (except run_code) is `tools.NAME(args)` with the same arguments. Errors \
         carry the line:column in your program. Limits per program: {calls} tool calls, {output} bytes of output \
         (stdout and result, cut past it); the operator bounds its wall time and memory.\n\n{}",
        python::DESCRIPTION // h38-python
    )
}

impl ToolGuest for Code {
    fn list_tools() -> Vec<ToolSpec> {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {
                "language": {"type": "string", "enum": ["javascript", "python"], "description": "The program's language: \"javascript\" (the default) or \"python\"."},
                "code": {"type": "string", "description": "The program."},
                "timeout_ms": {"type": "integer", "minimum": 1, "description": "Wall-time limit (capped by the operator's)."},
                "resume": {"type": "string", "description": "Instead of `code`: the id of a cell (a program still running) to wait for: its new output, or its result once it ends."},
                "wait_ms": {"type": "integer", "minimum": 1, "description": "With `resume`: wait at most this long for the result (default: the yield window)."},
                "cancel": {"type": "string", "description": "Instead of `code`: the id of a cell to end."}
            },
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
        if !matches!(lang, "javascript" | "js" | "python" | "py") {
            // The host's schema check answers first (`enum`); this is for a
            // caller that does not check the schema.
            return Err(err(
                "INVALID_ARGUMENTS",
                format!("language `{lang}` is not supported: run_code runs \"javascript\" or \"python\""),
            ));
        }
        if args.get("resume").is_some() || args.get("cancel").is_some() {
            // The host answers these itself when the operator lets calls
            // yield (`grant.yield_ms`); here they reach no cell.
            return Err(err(
                "INVALID_ARGUMENTS",
                "there are no cells to resume or cancel: programs here run to their end (the operator has not set \
                 `grant.yield_ms`)"
                    .into(),
            ));
        }
        let Some(code) = args.get("code").and_then(|v| v.as_str()) else {
            return Err(err("INVALID_ARGUMENTS", "give the program as `code` (or `resume` / `cancel` a cell)".into()));
        };
        if code.len() > MAX_CODE_BYTES {
            return Err(err("INVALID_ARGUMENTS", format!("a program holds at most {MAX_CODE_BYTES} bytes")));
        }
        if let Some(ms) = args.get("timeout_ms").and_then(|v| v.as_u64()) {
            tools::limit_time(ms);
        }
        // h38-python: dispatch by language.
        if matches!(lang, "python" | "py") {
            return python::run_code(code);
        }
        STATE.with_borrow_mut(|s| {
            *s = State {
                max_calls: config_usize("max_calls", DEFAULT_MAX_CALLS),
                max_output: config_usize("max_output_bytes", DEFAULT_MAX_OUTPUT),
                ..State::default()
            }
        });
        // The API is generated from the host's list at call time. Without a
        // session (`wharf plugin call`) or without the grant a program still
        // runs; each tool call it makes then fails with that reason.
        let specs: Vec<ToolSpec> = match tools::list_tools() {
            Ok(l) => l,
            Err(
                wharf::plugin::session::SessionError::NoSession | wharf::plugin::session::SessionError::NotGranted(_),
            ) => Vec::new(),
            Err(e) => return Err(session_err(e)),
        };
        let names: Vec<String> = specs.iter().map(|t| t.name.clone()).collect();
        CATALOG.with_borrow_mut(|c| *c = specs);
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
        let room = max_output.saturating_sub(text.len()).max(256);
        match outcome {
            Ok(mut json) => {
                if json.len() > room {
                    cut(&mut json, room);
                    json.push_str(" [… result cut]");
                }
                let _ = write!(text, "result: {json}");
                Ok(ToolOutput { content: text, details: None })
            }
            Err((code, mut msg)) => {
                if msg.len() > room {
                    cut(&mut msg, room);
                    msg.push_str(" [… cut]");
                }
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
        S::NoSession => err("NO_SESSION", "run_code needs a session to call tools".into()),
        S::NotGranted(c) => err("NOT_GRANTED", format!("the `{c}` capability is not granted to this plugin")),
        S::Invalid(m) => err("INVALID", m),
        S::Failed(m) => err("FAILED", m),
        S::Cancelled => err("ABORTED", "cancelled".into()),
    }
}

/// Sets up `tools`, `console` and the depth-bounded `JSON.stringify`;
/// returns the function that settles a call's Promise and that
/// `JSON.stringify`. The program cannot reach the host functions (taken
/// out of the global object here) nor the pending calls.
const PRELUDE: &str = r#"(() => {
  // Everything the plumbing uses is captured here, before the program runs:
  // a program replacing globals or prototypes breaks only its own view.
  const pending = Object.create(null);
  const enqueue = __wharf_enqueue, print = __wharf_print, searchTools = __wharf_search;
  delete globalThis.__wharf_enqueue; delete globalThis.__wharf_print; delete globalThis.__wharf_search;
  const JSONobj = JSON, nativeStringify = JSON.stringify, apply = Reflect.apply;
  const PromiseCtor = Promise, ErrorCtor = Error, RangeErrorCtor = RangeError, Str = String, isArray = Array.isArray;
  const NumberCtor = Number, BooleanCtor = Boolean;
  const freeze = Object.freeze, define = Object.defineProperty, ProxyCtor = Proxy, create = Object.create;
  const MapCtor = Map, mapGet = Map.prototype.get, mapSet = Map.prototype.set;
  // The engine's JSON.stringify recurses per level of the value, on the
  // component's stack. Plain data checked shallow enough goes to it as is;
  // anything else (a `toJSON`, a replacer function, deep data) through a
  // replacer that sees every value before it is entered (with its holder
  // as `this`) and refuses one deeper than MAX_JSON_DEPTH. A program's
  // replacer runs first; an allow-list of keys becomes objects holding
  // just those keys.
  const plainAndShallow = __wharf_plain; delete globalThis.__wharf_plain;
  function stringify(value, replacer, space) {
    if (typeof replacer !== 'function' && plainAndShallow(value)) return apply(nativeStringify, JSONobj, [value, replacer, space]);
    let fn = null, allow = null;
    if (typeof replacer === 'function') fn = replacer;
    else if (isArray(replacer)) {
      allow = [];
      for (let i = 0; i < replacer.length; i++) {
        const v = replacer[i];
        let k;
        if (typeof v === 'string') k = v;
        else if (typeof v === 'number' || v instanceof Str || v instanceof NumberCtor) k = Str(v);
        if (k !== undefined && allow.indexOf(k) < 0) allow.push(k);
      }
    }
    const depths = new MapCtor();
    function guard(key, v) {
      if (fn !== null) v = apply(fn, this, [key, v]);
      if (v === null || (typeof v !== 'object' && typeof v !== 'function')) return v;
      const d = (apply(mapGet, depths, [this]) || 0) + 1;
      if (d > MAX_JSON_DEPTH) throw new RangeErrorCtor('Maximum call stack size exceeded: JSON.stringify of a value nested deeper than MAX_JSON_DEPTH levels');
      if (allow !== null && typeof v === 'object' && !isArray(v) && !(v instanceof NumberCtor) && !(v instanceof Str) && !(v instanceof BooleanCtor)) {
        const o = create(null);
        for (let i = 0; i < allow.length; i++) { const k = allow[i]; define(o, k, { value: v[k], writable: true, enumerable: true, configurable: true }); }
        v = o;
      }
      apply(mapSet, depths, [v, d]);
      return v;
    }
    return apply(nativeStringify, JSONobj, [value, guard, space]);
  }
  define(stringify, 'length', { value: 3, configurable: true });
  define(JSONobj, 'stringify', { value: stringify, writable: true, enumerable: false, configurable: true });
  const objectTag = Object.prototype.toString;
  // Not JSON (a cycle, too deep): its tag, not its `String()` (which
  // recurses into nested arrays).
  const fmt = (v) => { if (typeof v === 'string') return v; try { const s = stringify(v); return s === undefined ? Str(v) : s; } catch (_) { return typeof v === 'object' && v !== null ? apply(objectTag, v, []) : Str(v); } };
  function call(name, args) {
    const n = Str(name);
    return new PromiseCtor((resolve, reject) => {
      const id = enqueue(n, stringify(args === undefined ? {} : args));
      pending[id] = [resolve, reject, n];
    });
  }
  const parse = JSON.parse;
  // tools.search(query, limit?): the callable tools best matching `query`,
  // each {name, description, arguments} (a Promise, like a call).
  function search(query, limit) {
    return PromiseCtor.resolve(apply(parse, JSONobj, [searchTools(Str(query === undefined ? '' : query), limit)]));
  }
  const api = { call, search };
  for (const n of NAMES) if (n !== 'call' && n !== 'search') api[n] = (args) => call(n, args);
  freeze(api);
  // Any other name is a call too: the host says whether it exists.
  globalThis.tools = new ProxyCtor(api, {
    get(t, k) {
      if (typeof k !== 'string' || k === 'then' || k === 'toJSON') return t[k];
      if (k in t) return t[k];
      return (args) => call(k, args);
    },
    set() { return false; }, defineProperty() { return false; }, deleteProperty() { return false; },
  });
  const log = (...a) => { let s = ''; for (let i = 0; i < a.length; i++) { if (i) s += ' '; s += fmt(a[i]); } print(s); };
  globalThis.console = freeze({ log, info: log, warn: log, error: log, debug: log });
  const prop = (o, k, v) => define(o, k, { value: v, writable: true, enumerable: false, configurable: true });
  const settle = (id, ok, payload, code) => {
    const p = pending[id]; if (!p) return; delete pending[id];
    if (ok) { p[0](payload); return; }
    const e = new ErrorCtor(payload); prop(e, 'name', 'ToolError'); prop(e, 'code', code); prop(e, 'tool', p[2]); p[1](e);
  };
  return [settle, stringify];
})()"#;

/// Longest tool name a program may call.
const MAX_NAME_BYTES: usize = 256;
/// Largest arguments of one call, bytes of JSON.
const MAX_ARGS_BYTES: usize = 1 << 20;
/// Most calls sent to the host in one batch (the host's bound).
const MAX_BATCH: usize = 256;

fn enqueue(_this: &JsValue, args: &[JsValue], ctx: &mut Context) -> JsResult<JsValue> {
    let name = args.first().cloned().unwrap_or_default().to_string(ctx)?.to_std_string_escaped();
    let json = match args.get(1) {
        Some(v) if v.is_string() => v.to_string(ctx)?.to_std_string_escaped(),
        // `JSON.stringify` of a function or a symbol.
        _ => return Err(JsNativeError::typ().with_message("tool arguments must be a JSON object").into()),
    };
    if name.len() > MAX_NAME_BYTES {
        return Err(JsNativeError::range()
            .with_message(format!("a tool name holds at most {MAX_NAME_BYTES} bytes"))
            .into());
    }
    if json.len() > MAX_ARGS_BYTES {
        return Err(JsNativeError::range()
            .with_message(format!("a tool call's arguments hold at most {MAX_ARGS_BYTES} bytes of JSON"))
            .into());
    }
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
        if s.stdout_cut {
            return;
        }
        if s.stdout.len() + text.len() + 1 > s.max_output {
            s.stdout_cut = true;
            let mut t = text;
            cut(&mut t, s.max_output.saturating_sub(s.stdout.len()));
            s.stdout.push_str(&t);
        } else {
            s.stdout.push_str(&text);
            s.stdout.push('\n');
            // The host reads the component's stdout as the call's output
            // so far: what a yielded cell shows before its result.
            use std::io::Write as _;
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{text}");
            let _ = out.flush();
        }
    });
    Ok(JsValue::undefined())
}

/// `__wharf_plain(value)`: whether the engine's `JSON.stringify` may take
/// `value` as it is: no level deeper than [`MAX_JSON_DEPTH`], no proxy and
/// no callable `toJSON` (either could hand it something else). An
/// iterative walk over own string keys (array elements by index); an
/// object met again is walked again only deeper. Reads may run getters,
/// as the serialisation does.
fn plain(_this: &JsValue, args: &[JsValue], ctx: &mut Context) -> JsResult<JsValue> {
    use boa_engine::object::builtins::JsProxy;
    use boa_engine::property::PropertyKey;
    let Some(root) = args.first().and_then(JsValue::as_object) else { return Ok(JsValue::from(true)) };
    let mut seen: std::collections::HashMap<JsObject, usize> = std::collections::HashMap::new();
    let mut todo: Vec<(JsObject, usize)> = vec![(root, 1)];
    while let Some((o, d)) = todo.pop() {
        if d > MAX_JSON_DEPTH || JsProxy::from_object(o.clone()).is_ok() {
            return Ok(JsValue::from(false));
        }
        if seen.get(&o).is_some_and(|was| *was >= d) {
            continue;
        }
        seen.insert(o.clone(), d);
        if o.get(js_string!("toJSON"), ctx)?.is_callable() {
            return Ok(JsValue::from(false));
        }
        let mut push = |v: JsValue| {
            if let Some(child) = v.as_object()
                && !child.is_callable()
            {
                todo.push((child, d + 1));
            }
        };
        if o.is_array() {
            let len = o.get(js_string!("length"), ctx)?.to_length(ctx)?;
            for i in 0..len {
                push(o.get(i, ctx)?);
            }
        } else {
            for key in o.own_property_keys(ctx)? {
                if !matches!(key, PropertyKey::Symbol(_)) {
                    push(o.get(key, ctx)?);
                }
            }
        }
    }
    Ok(JsValue::from(true))
}

/// Text of a thrown value with its position (`line L:C` in the program)
/// when the engine has one.
fn describe_error(e: JsError, ctx: &mut Context, line_shift: u32) -> String {
    if let Some(engine) = e.as_engine() {
        // The engine's own limits are not catchable and have no Error
        // object: their text, and the innermost program frame of the
        // backtrace the engine kept.
        use boa_engine::error::{EngineError, RuntimeLimitError};
        let mut msg = match engine {
            EngineError::RuntimeLimit(RuntimeLimitError::Recursion | RuntimeLimitError::StackSize) => {
                format!("RangeError: Maximum call stack size exceeded (more than {MAX_RECURSION} nested calls)")
            }
            other => other.to_string(),
        };
        if let Some((line, col)) = stack_position(&e.to_string()) {
            let _ = write!(msg, " (at line {}:{col})", line.saturating_sub(line_shift).max(1));
        }
        return msg;
    }
    let value = e.into_opaque(ctx).unwrap_or_default();
    let mut msg = value.to_string(ctx).map(|s| s.to_std_string_escaped()).unwrap_or_else(|_| "error".into());
    if let Some(obj) = value.as_object() {
        if let Ok(code) = obj.get(js_string!("code"), ctx)
            && let Some(code) = code.as_string()
            && let Ok(tool) = obj.get(js_string!("tool"), ctx)
            && let Some(tool) = tool.as_string()
        {
            msg = format!(
                "uncaught {msg} (code {}, from tools.{})",
                code.to_std_string_escaped(),
                tool.to_std_string_escaped()
            );
        }
        if let Ok(stack) = obj.get(js_string!("stack"), ctx)
            && let Some(s) = stack.as_string()
            && let Some((line, col)) = stack_position(&s.to_std_string_escaped())
        {
            let _ = write!(msg, " (at line {}:{col})", line.saturating_sub(line_shift).max(1));
        }
    }
    msg
}

/// The first `program.js:L:C` position in a stack text.
fn stack_position(stack: &str) -> Option<(u32, u32)> {
    let i = stack.find("program.js:")?;
    let rest = &stack[i + "program.js:".len()..];
    let mut parts = rest.split(|c: char| !c.is_ascii_digit());
    let line: u32 = parts.next()?.parse().ok()?;
    let col: u32 = parts.next()?.parse().ok()?;
    Some((line, col))
}

/// A parse error's text and position (boa writes `at line L, col C`).
fn syntax_error(e: &JsError, line_shift: u32) -> (String, Option<(u32, u32)>) {
    let text = e.to_string();
    let Some(i) = text.rfind(" at line ") else { return (text, None) };
    let rest = &text[i + " at line ".len()..];
    let mut parts = rest.split(|c: char| !c.is_ascii_digit()).filter(|p| !p.is_empty());
    let pos = match (parts.next().and_then(|l| l.parse::<u32>().ok()), parts.next().and_then(|c| c.parse().ok())) {
        (Some(l), Some(c)) => Some((l.saturating_sub(line_shift).max(1), c)),
        _ => None,
    };
    match pos {
        Some((l, c)) => (format!("{} (at line {l}:{c})", &text[..i]), pos),
        None => (text, None),
    }
}

type Failure = (String, String);

/// Most nested JavaScript calls: past it the program fails with a
/// `RangeError`-like message (the engine's own limit, set well below the
/// point where the component's stack would run out).
const MAX_RECURSION: usize = 1024;
/// Deepest value `JSON.stringify` serialises (the engine recurses per
/// level). `JSON.parse` needs no bound of its own: the engine checks the
/// text with serde_json first, which refuses nesting deeper than 128.
const MAX_JSON_DEPTH: usize = 1000;
/// Bound on [`nesting_cost`]: the parser and compiler recurse per bracket
/// and per operator of an expression, on the component's stack (the host
/// allows 1 MiB of wasm stack; measured, it runs out near 2000 units).
const MAX_NESTING_COST: usize = 1000;
/// What one open bracket costs, in operators (measured: a bracket level
/// takes about seven times an operator's stack).
const BRACKET_COST: usize = 8;

/// Where the estimated depth of a program's syntax tree first exceeds
/// [`MAX_NESTING_COST`]: its line and column (1-based, in chars). Each open
/// bracket (`(`, `[`, `{`, `${`) costs [`BRACKET_COST`]; each operator
/// character and each operator keyword costs 1 until the next `,`, `;` or
/// line break at its bracket level. Strings, template text and comments
/// are skipped; a regular expression literal is read as code (it can only
/// add to the estimate).
fn too_deep(text: &str) -> Option<(usize, usize)> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mode {
        Code,
        Str(char),
        Template,
        LineComment,
        BlockComment,
    }
    const KEYWORDS: [&str; 10] =
        ["typeof", "void", "delete", "await", "new", "if", "else", "in", "instanceof", "yield"];
    let mut mode = Mode::Code;
    // Per open bracket: the mode it returns to and the operator count of
    // the level it opened from; `cost` is the sum along the stack.
    let mut open: Vec<(Mode, usize)> = Vec::new();
    let (mut chain, mut cost) = (0usize, 0usize);
    let (mut line, mut col) = (1usize, 0usize);
    let mut word = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\n' {
            line += 1;
            col = 0;
        } else {
            col += 1;
        }
        if mode == Mode::Code {
            if c.is_alphanumeric() || c == '_' || c == '$' && chars.peek() != Some(&'{') {
                if word.len() < 16 {
                    word.push(c);
                }
                continue;
            }
            if KEYWORDS.contains(&word.as_str()) {
                chain += 1;
                cost += 1;
            }
            word.clear();
        }
        match mode {
            Mode::Code => match c {
                '(' | '[' | '{' => {
                    open.push((Mode::Code, chain));
                    chain = 0;
                    cost += BRACKET_COST;
                }
                ')' | ']' | '}' => {
                    cost = cost.saturating_sub(chain + BRACKET_COST);
                    if let Some((back, outer)) = open.pop() {
                        mode = back;
                        chain = outer;
                    } else {
                        chain = 0;
                    }
                }
                ',' | ';' | '\n' => {
                    cost -= chain;
                    chain = 0;
                }
                '"' | '\'' => mode = Mode::Str(c),
                '`' => mode = Mode::Template,
                '/' if chars.peek() == Some(&'/') => mode = Mode::LineComment,
                '/' if chars.peek() == Some(&'*') => {
                    chars.next();
                    col += 1;
                    mode = Mode::BlockComment;
                }
                '+' | '-' | '*' | '/' | '%' | '&' | '|' | '^' | '!' | '~' | '<' | '>' | '=' | '?' | ':' | '.' => {
                    chain += 1;
                    cost += 1;
                }
                _ => {}
            },
            Mode::Str(q) => match c {
                '\\' => {
                    if chars.next() == Some('\n') {
                        line += 1;
                        col = 0;
                    } else {
                        col += 1;
                    }
                }
                '\n' => mode = Mode::Code,
                _ if c == q => mode = Mode::Code,
                _ => {}
            },
            Mode::Template => match c {
                '\\' => {
                    if chars.next() == Some('\n') {
                        line += 1;
                        col = 0;
                    } else {
                        col += 1;
                    }
                }
                '`' => mode = Mode::Code,
                '$' if chars.peek() == Some(&'{') => {
                    chars.next();
                    col += 1;
                    open.push((Mode::Template, chain));
                    chain = 0;
                    cost += BRACKET_COST;
                    mode = Mode::Code;
                }
                _ => {}
            },
            Mode::LineComment => {
                if c == '\n' {
                    mode = Mode::Code;
                    cost -= chain;
                    chain = 0;
                }
            }
            Mode::BlockComment => {
                if c == '*' && chars.peek() == Some(&'/') {
                    chars.next();
                    col += 1;
                    mode = Mode::Code;
                }
            }
        }
        if cost > MAX_NESTING_COST {
            return Some((line, col));
        }
    }
    None
}

fn run(code: &str, names: &[String]) -> Result<String, Failure> {
    let mut ctx = Context::default();
    ctx.runtime_limits_mut().set_recursion_limit(MAX_RECURSION);
    let fail = |c: &str, m: String| (c.to_string(), m);
    // The parser and compiler recurse per level of the syntax tree: a
    // program nested deeper would run the component out of stack before
    // the engine could say so.
    if let Some((line, col)) = too_deep(code) {
        return Err(fail(
            "SYNTAX_ERROR",
            format!(
                "SyntaxError: the program nests too deeply (brackets, or operators in one expression) \
                 (at line {line}:{col})"
            ),
        ));
    }
    ctx.register_global_callable(js_string!("__wharf_enqueue"), 2, NativeFunction::from_fn_ptr(enqueue))
        .map_err(|e| fail("HOST_ERROR", e.to_string()))?;
    ctx.register_global_callable(js_string!("__wharf_print"), 1, NativeFunction::from_fn_ptr(print))
        .map_err(|e| fail("HOST_ERROR", e.to_string()))?;
    ctx.register_global_callable(js_string!("__wharf_plain"), 1, NativeFunction::from_fn_ptr(plain))
        .map_err(|e| fail("HOST_ERROR", e.to_string()))?;
    ctx.register_global_callable(js_string!("__wharf_search"), 2, NativeFunction::from_fn_ptr(search))
        .map_err(|e| fail("HOST_ERROR", e.to_string()))?;
    let names_json = serde_json::to_string(names).unwrap_or_else(|_| "[]".into());
    let prelude = PRELUDE.replace("NAMES", &names_json).replace("MAX_JSON_DEPTH", &MAX_JSON_DEPTH.to_string());
    // The prelude returns the function settling a call's Promise and the
    // depth-bounded `JSON.stringify`, taken before the program can replace
    // it: the result is the program's value, not what it says.
    let plumbing = ctx
        .eval(Source::from_bytes(prelude.as_bytes()))
        .map_err(|e| fail("HOST_ERROR", e.to_string()))?
        .as_object()
        .ok_or_else(|| fail("HOST_ERROR", "prelude".into()))?;
    let settle = plumbing
        .get(0, &mut ctx)
        .ok()
        .and_then(|f| f.as_object())
        .ok_or_else(|| fail("HOST_ERROR", "prelude".into()))?;
    let stringify = plumbing.get(1, &mut ctx).ok().and_then(|f| f.as_callable());

    // A plain script keeps the value of its last expression; one with
    // top-level `await` or `return` runs as the body of an async function
    // (from the next line on, so columns stay the program's and lines are
    // shifted back by one).
    let path = std::path::Path::new("program.js");
    let lines = u32::try_from(code.lines().count()).unwrap_or(u32::MAX).max(1);
    let (value, shift) = match Script::parse(Source::from_bytes(code.as_bytes()).with_path(path), None, &mut ctx) {
        Ok(script) => (script.evaluate(&mut ctx), 0),
        Err(plain_err) => {
            let wrapped = format!("(async () => {{\n{code}\n}})()");
            match Script::parse(Source::from_bytes(wrapped.as_bytes()).with_path(path), None, &mut ctx) {
                Ok(script) => (script.evaluate(&mut ctx), 1),
                Err(wrapped_err) => {
                    // The wrapped program's error is the real one unless it
                    // lies before the plain one (the plain parse stops at the
                    // first top-level `await`) or past the program's end (a
                    // stray `}` closed the wrapper).
                    let (plain, p_pos) = syntax_error(&plain_err, 0);
                    let (inner, w_pos) = syntax_error(&wrapped_err, 1);
                    let use_wrapped = match (w_pos, p_pos) {
                        (Some(w), Some(p)) => w.0 <= lines && w >= p,
                        (Some(w), None) => w.0 <= lines,
                        _ => false,
                    };
                    return Err(fail("SYNTAX_ERROR", if use_wrapped { inner } else { plain }));
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
    drive(&mut ctx, &settle, shift)?;
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

/// Runs jobs; sends the calls started meanwhile as one batch (or several of
/// at most [`MAX_BATCH`]); settles their promises; until no call is left.
fn drive(ctx: &mut Context, settle: &JsObject, shift: u32) -> Result<(), Failure> {
    loop {
        ctx.run_jobs().map_err(|e| ("SCRIPT_ERROR".to_string(), describe_error(e, ctx, shift)))?;
        let mut batch = STATE.with_borrow_mut(|s| std::mem::take(&mut s.pending));
        if batch.is_empty() {
            return Ok(());
        }
        while !batch.is_empty() {
            let rest = batch.split_off(batch.len().min(MAX_BATCH));
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
                settle
                    .call(&JsValue::undefined(), &args, ctx)
                    .map_err(|e| ("SCRIPT_ERROR".to_string(), describe_error(e, ctx, shift)))?;
            }
            batch = rest;
        }
    }
}

export!(Code);
