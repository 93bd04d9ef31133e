//! `run_code` with `language: "python"`: the program runs on Monty (the
//! `monty` crate, a Python interpreter in Rust, compiled into this
//! component), with the same door as JavaScript: the `tools` import.
//!
//! In the program `tools` is a host object: `tools.NAME(key=value, …)` (or
//! one positional dict) is a call of tool NAME with those arguments as a
//! JSON object, `tools.call(name, {…})` calls any tool by name. A call is a
//! coroutine: `await tools.read(path="a")` waits for its answer; the calls a
//! program starts before it next blocks (`asyncio.gather(*[tools.read(…) for
//! …])`) go to the host as ONE batch (`call_batch`), which runs them in the
//! scheduler's pool and answers in order. A refused or failed call raises
//! `RuntimeError("CODE: message")` the program may catch. `print` writes
//! to stdout. The result is stdout plus the program's value as JSON: the
//! value of its last expression, or of a `main()` (`async` or not) that the
//! program defines and never calls itself. Errors carry the line:column.
//!
//! Monty pauses at every external call (`RunProgress`), and its paused state
//! is serialisable: the seam for durable programs (issue 38 item 3).

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write as _;

use monty::{MontyRun, RunProgress};
use monty_types::{
    CallArgs, CompileOptions, ExcType, ExtFunctionResult, MontyException, MontyObject, MontyUuid, NameLookupResult,
    ObjectRef, PrintWriter, PrintWriterCallback, ResourceLimits, ResourceTracker,
};

use crate::wharf::plugin::tools;
use crate::wharf::plugin::types::{ToolError, ToolOutput};
use crate::{DEFAULT_MAX_CALLS, DEFAULT_MAX_OUTPUT, config_usize, cut, err, session_err};

/// The program's file name in tracebacks.
const SCRIPT: &str = "program.py";
/// Longest tool name a program may call.
const MAX_NAME_BYTES: usize = 256;
/// Largest arguments of one call, bytes of JSON.
const MAX_ARGS_BYTES: usize = 1 << 20;
/// Most calls sent to the host in one batch (the host's bound).
const MAX_BATCH: usize = 256;
/// Most nested Python calls: past it a `RecursionError` (Monty keeps its
/// frames on its own heap, so this bounds memory, not the wasm stack).
const MAX_RECURSION: usize = 1000;
/// Deepest value converted to JSON (arguments and the result); deeper
/// levels become their `repr`.
const MAX_JSON_DEPTH: usize = 200;
/// The class name and ids of the `tools` object (ids are the host's; any
/// fixed value is unique within one program).
const TOOLS_CLASS: &str = "Tools";
const TOOLS_CLASS_ID: u128 = 0x7768_6172_665f_746f_6f6c_735f_636c_7373;
const TOOLS_ID: u128 = 0x7768_6172_665f_746f_6f6c_735f_6f62_6a31;

/// What the language section of `run_code`'s description says about Python.
pub(crate) const DESCRIPTION: &str = "With `language: \"python\"` the program is Python (the Monty interpreter: a \
large subset of Python 3 with functions, closures, classes, dataclasses, comprehensions, f-strings, async/await, \
`asyncio.gather`, try/except and modules json, re, math, datetime, collections, itertools, functools; no third-party \
packages, no `open`, `os` calls, `subprocess`, sleep, file or network access). There `tools` is an object: `await \
tools.NAME(arg=value, ...)` returns the tool's text output; start several calls and `await asyncio.gather(*calls)` \
(after `import asyncio`) to run them concurrently; `await tools.call(name, {...})` calls any tool by name; `await tools.search(\"words\")` lists the callable tools \
matching the words as dicts `{name, description, arguments}`; a refused or failed call raises `RuntimeError` whose message starts with the code (`DENIED: ...`; catch it to go on). `print` \
prints. The result is what was printed plus the value of the last expression as JSON, or of a `main()` (async or \
not) you define and do not call. Top-level `await` works.";

/// Stdout of the program, cut at the output limit.
struct Stdout {
    text: String,
    max: usize,
    cut: bool,
}

impl Stdout {
    fn push(&mut self, s: &str) {
        if self.cut {
            return;
        }
        let kept = if self.text.len() + s.len() > self.max {
            self.cut = true;
            let mut t = s.to_string();
            cut(&mut t, self.max.saturating_sub(self.text.len()));
            t
        } else {
            s.to_string()
        };
        self.text.push_str(&kept);
        // The host reads the component's stdout as the call's output so
        // far: what a yielded cell shows before its result (as
        // JavaScript's `console.log`).
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(kept.as_bytes());
        if kept.ends_with('\n') {
            let _ = out.flush();
        }
    }
}

impl PrintWriterCallback for Stdout {
    fn stdout_write(&mut self, output: Cow<'_, str>) -> Result<(), MontyException> {
        self.push(&output);
        Ok(())
    }

    fn stdout_push(&mut self, end: char) -> Result<(), MontyException> {
        let mut b = [0u8; 4];
        self.push(end.encode_utf8(&mut b));
        Ok(())
    }
}

/// A failure: the tool error code and the message.
type Failure = (String, String);

/// Runs `code` as Python; the tool output (stdout and result) or error, as
/// the JavaScript path formats them.
pub(crate) fn run_code(code: &str) -> Result<ToolOutput, ToolError> {
    let max_calls = config_usize("max_calls", DEFAULT_MAX_CALLS);
    let max_output = config_usize("max_output_bytes", DEFAULT_MAX_OUTPUT);
    let mut out = Stdout { text: String::new(), max: max_output, cut: false };
    let outcome = run(code, max_calls, &mut out);
    if let Err((c, m)) = &outcome
        && (c == "NO_SESSION" || c == "NOT_GRANTED")
    {
        // As in JavaScript: a call without the grant or a session fails the
        // program with that reason.
        return Err(err(c, m.clone()));
    }
    let mut text = String::new();
    if !out.text.is_empty() {
        text.push_str("stdout:\n");
        text.push_str(&out.text);
        if out.cut {
            text.push_str("\n[… stdout cut]");
        }
        if !text.ends_with('\n') {
            text.push('\n');
        }
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

/// Whether the program defines a top-level `main` (and whether it is
/// `async`) and never names `main(` elsewhere: then it is called.
fn main_to_call(code: &str) -> Option<bool> {
    let mut found = None;
    let mut calls = 0usize;
    for line in code.lines() {
        let t = line.trim_end();
        if let Some(rest) = t.strip_prefix("async def main") {
            if rest.trim_start().starts_with('(') {
                found = Some(true);
                continue;
            }
        } else if let Some(rest) = t.strip_prefix("def main")
            && rest.trim_start().starts_with('(')
        {
            found = Some(false);
            continue;
        }
        calls += line.matches("main(").count();
    }
    if calls == 0 { found } else { None }
}

fn run(code: &str, max_calls: usize, out: &mut Stdout) -> Result<String, Failure> {
    let mut source = code.to_string();
    match main_to_call(code) {
        Some(true) => source.push_str("\nawait main()\n"),
        Some(false) => source.push_str("\nmain()\n"),
        None => {}
    }
    // Every source is scanned for nesting before the parser (which
    // recurses per level on the component's stack) sees it.
    let options = CompileOptions { source_scan_threshold: 0, ..CompileOptions::default() };
    let runner = MontyRun::new(source, SCRIPT, vec!["tools".to_string()], options).map_err(failure)?;
    let tools_id = MontyUuid::from_u128(TOOLS_ID);
    let class = MontyObject::class_type(TOOLS_CLASS, MontyUuid::from_u128(TOOLS_CLASS_ID), true, false, Vec::new());
    let tools_obj = MontyObject::class_instance(class, tools_id, Vec::new());
    let limits = ResourceLimits {
        max_recursion_depth: MAX_RECURSION,
        // Every call suspends at most twice (the call, its await); name
        // lookups on `tools` once more. Past this the calls limit has
        // long answered.
        max_suspensions: max_calls.saturating_mul(4).saturating_add(1000),
        ..ResourceLimits::default()
    };
    let mut progress =
        runner.start(vec![tools_obj], ResourceTracker::new(limits), PrintWriter::Callback(out)).map_err(failure)?;
    let mut calls = 0usize;
    // The catalogue `tools.search` looks in: listed by the host at the
    // program's first search, then kept for the rest of the run.
    let mut catalog_loaded = false;
    // Calls started and not yet sent; answers not yet delivered.
    let mut pending: Vec<(u32, String, String)> = Vec::new();
    let mut answers: HashMap<u32, ExtFunctionResult> = HashMap::new();
    loop {
        progress = match progress {
            RunProgress::Complete(value) => {
                // Calls started and never awaited still run, as in
                // JavaScript (each is logged).
                if !pending.is_empty() {
                    send(&mut pending, &mut answers)?;
                }
                return Ok(to_json(value.as_ref(), 0).to_string());
            }
            RunProgress::FunctionCall(call) => {
                // `tools.NAME(...)`: a method of the `tools` object, or the
                // function a read of `tools.NAME` gave (named `tools.NAME`).
                // A call of any other unknown name is the program's
                // `NameError`, never a tool call.
                let method = match call.object_id {
                    Some(id) if id == tools_id => Some(call.function_name.as_str()),
                    Some(_) => None,
                    None => call.function_name.strip_prefix("tools."),
                };
                if method == Some("search") {
                    // `tools.search(query, limit?)`: answered here from the
                    // catalogue the host listed (no tool call), awaitable
                    // like a call.
                    let found = search(&call.args, &mut catalog_loaded);
                    if call.allow_eager_await {
                        call.resume_eager(found, PrintWriter::Callback(out))
                    } else {
                        let answer = match found {
                            Ok(v) => ExtFunctionResult::Return(v),
                            Err(e) => ExtFunctionResult::Error(e),
                        };
                        answers.insert(call.call_id, answer);
                        call.resume_pending(PrintWriter::Callback(out))
                    }
                } else {
                    let prepared = match method {
                        Some(m) => request(m, &call.args),
                        None => Err(exception(
                            ExcType::NameError,
                            format!(
                                "name '{}' is not defined",
                                call.function_name.chars().take(100).collect::<String>()
                            ),
                        )),
                    };
                    match prepared {
                        Err(e) => call.resume(ExtFunctionResult::Error(e), PrintWriter::Callback(out)),
                        Ok(_) if calls >= max_calls => call.resume(
                            ExtFunctionResult::Error(exception(
                                ExcType::RuntimeError,
                                format!("a program may make at most {max_calls} tool calls"),
                            )),
                            PrintWriter::Callback(out),
                        ),
                        Ok((name, args)) => {
                            calls += 1;
                            pending.push((call.call_id, name, args));
                            if call.allow_eager_await {
                                // Awaited at once: send it now, with every call
                                // started before it.
                                let id = call.call_id;
                                send(&mut pending, &mut answers)?;
                                let answer = match answers.remove(&id) {
                                    Some(ExtFunctionResult::Return(v)) => Ok(v),
                                    Some(ExtFunctionResult::Error(e)) => Err(e),
                                    _ => Err(exception(ExcType::RuntimeError, "the call has no answer".into())),
                                };
                                call.resume_eager(answer, PrintWriter::Callback(out))
                            } else {
                                call.resume_pending(PrintWriter::Callback(out))
                            }
                        }
                    }
                }
            }
            RunProgress::ResolveFutures(wait) => {
                let ids: Vec<u32> = wait.pending_call_ids().to_vec();
                if ids.iter().any(|id| !answers.contains_key(id)) && !pending.is_empty() {
                    send(&mut pending, &mut answers)?;
                }
                let ready: Vec<(u32, ExtFunctionResult)> =
                    ids.iter().filter_map(|id| answers.remove(id).map(|a| (*id, a))).collect();
                if ready.is_empty() {
                    return Err(("SCRIPT_ERROR".into(), "the program waits on a call that was never made".into()));
                }
                wait.resume(ready, PrintWriter::Callback(out))
            }
            RunProgress::NameLookup(lookup) => {
                // `tools.NAME` read without a call: a function calling NAME.
                let answer = if lookup.object_id() == Some(tools_id) && !lookup.name.starts_with('_') {
                    NameLookupResult::Value(MontyObject::function(format!("tools.{}", lookup.name), None))
                } else {
                    NameLookupResult::Undefined
                };
                lookup.resume(answer, PrintWriter::Callback(out))
            }
            RunProgress::OsCall(os) => {
                // No file, environment, clock-sleep or import of the host's:
                // the program's only door is `tools`.
                let e = match &os.function_call {
                    monty_types::OsFunctionCall::Import(m) => {
                        let mut m = m.clone();
                        cut(&mut m, MAX_NAME_BYTES);
                        ExtFunctionResult::NotFound(m)
                    }
                    other => ExtFunctionResult::Error(exception(
                        ExcType::PermissionError,
                        format!("`{}` is not available in run_code: the program's only door is `tools`", other.name()),
                    )),
                };
                os.resume(e, PrintWriter::Callback(out))
            }
        }
        .map_err(failure)?;
    }
}

/// Sends the started calls to the host, in batches of at most
/// [`MAX_BATCH`]; their answers go to `answers`.
fn send(
    pending: &mut Vec<(u32, String, String)>,
    answers: &mut HashMap<u32, ExtFunctionResult>,
) -> Result<(), Failure> {
    let mut batch = std::mem::take(pending);
    while !batch.is_empty() {
        let rest = batch.split_off(batch.len().min(MAX_BATCH));
        let reqs: Vec<tools::ToolRequest> =
            batch.iter().map(|(_, n, a)| tools::ToolRequest { name: n.clone(), arguments: a.clone() }).collect();
        let results = tools::call_batch(&reqs).map_err(|e| {
            let t = session_err(e);
            (t.code, t.message)
        })?;
        for ((id, _, _), r) in batch.iter().zip(results) {
            let answer = match r {
                Ok(o) => ExtFunctionResult::Return(MontyObject::string(o.content)),
                Err(e) => {
                    ExtFunctionResult::Error(exception(ExcType::RuntimeError, format!("{}: {}", e.code, e.message)))
                }
            };
            answers.insert(*id, answer);
        }
        batch = rest;
    }
    Ok(())
}

/// `tools.search(query, limit?)` (positional or by keyword): the matching
/// tools as a list of dicts `{name, description, arguments}`.
fn search(args: &CallArgs, catalog_loaded: &mut bool) -> Result<MontyObject, MontyException> {
    let type_err = |m: &str| exception(ExcType::TypeError, m.to_string());
    let positional: Vec<ObjectRef<'_>> = args.args().collect();
    if positional.len() > 2 {
        return Err(type_err("tools.search(query, limit=None) takes at most two arguments"));
    }
    let text = |o: &ObjectRef<'_>| {
        o.as_str().map(str::to_string).ok_or_else(|| type_err("tools.search: the query must be a str"))
    };
    let count = |o: &ObjectRef<'_>| match o.type_name() {
        "NoneType" => Ok(None),
        _ => o
            .as_int()
            .map(|n| Some(usize::try_from(n.max(1)).unwrap_or(1)))
            .ok_or_else(|| type_err("tools.search: the limit must be an int")),
    };
    let mut query = positional.first().map(text).transpose()?.unwrap_or_default();
    let mut limit = positional.get(1).map(count).transpose()?.flatten();
    for (k, v) in args.kwargs() {
        match k.as_str() {
            Some("query") => query = text(&v)?,
            Some("limit") => limit = count(&v)?,
            _ => return Err(type_err("tools.search takes `query` and `limit`")),
        }
    }
    if !*catalog_loaded {
        crate::load_catalog().map_err(|e| exception(ExcType::RuntimeError, format!("{}: {}", e.code, e.message)))?;
        *catalog_loaded = true;
    }
    let found = crate::search_tools(&query, limit).into_iter().map(|f| {
        MontyObject::dict([
            (MontyObject::string("name"), MontyObject::string(f.name)),
            (MontyObject::string("description"), MontyObject::string(f.description)),
            (MontyObject::string("arguments"), MontyObject::string(f.arguments)),
        ])
    });
    Ok(MontyObject::list(found))
}

fn exception(t: ExcType, msg: String) -> MontyException {
    MontyException::new(t, Some(msg))
}

/// The tool name and JSON arguments of `tools.NAME(...)`: keyword
/// arguments, or one positional dict; `tools.call(name, dict)` names any
/// tool.
fn request(method: &str, args: &CallArgs) -> Result<(String, String), MontyException> {
    let type_err = |m: String| exception(ExcType::TypeError, m);
    let positional: Vec<ObjectRef<'_>> = args.args().collect();
    let (name, rest) = if method == "call" {
        let Some(first) = positional.first() else {
            return Err(type_err("tools.call(name, args) needs the tool's name".into()));
        };
        let Some(n) = first.as_str() else {
            return Err(type_err("tools.call: the tool's name must be a str".into()));
        };
        (n.to_string(), &positional[1..])
    } else {
        (method.to_string(), &positional[..])
    };
    if name.len() > MAX_NAME_BYTES {
        return Err(exception(ExcType::ValueError, format!("a tool name holds at most {MAX_NAME_BYTES} bytes")));
    }
    let mut object = serde_json::Map::new();
    match rest {
        [] => {}
        [one] if one.type_name() == "dict" => match to_json(*one, 0) {
            serde_json::Value::Object(m) => object = m,
            _ => return Err(type_err("tool arguments must be a dict".into())),
        },
        _ => {
            return Err(type_err(format!(
                "tools.{name}: pass the arguments by keyword (path=...) or as one dict, not positionally"
            )));
        }
    }
    for (k, v) in args.kwargs() {
        let key = k.as_str().map(str::to_string).unwrap_or_else(|| k.py_repr());
        object.insert(key, to_json(v, 0));
    }
    let json = serde_json::Value::Object(object).to_string();
    if json.len() > MAX_ARGS_BYTES {
        return Err(exception(
            ExcType::ValueError,
            format!("a tool call's arguments hold at most {MAX_ARGS_BYTES} bytes of JSON"),
        ));
    }
    Ok((name, json))
}

/// A Python value as JSON: None, bools, ints, floats, strings, lists,
/// tuples, sets and dicts map over; anything else (and anything deeper than
/// [`MAX_JSON_DEPTH`]) is its `repr`.
fn to_json(v: ObjectRef<'_>, depth: usize) -> serde_json::Value {
    use serde_json::Value as J;
    if depth > MAX_JSON_DEPTH {
        return J::String("…".into());
    }
    match v.type_name() {
        "NoneType" => return J::Null,
        "bool" => return v.as_bool().map_or(J::Null, J::Bool),
        "str" => return v.as_str().map_or(J::Null, |s| J::String(s.to_string())),
        "int" => {
            if let Some(i) = v.as_int() {
                return J::from(i);
            }
        }
        "float" => {
            if let Some(f) = v.as_float() {
                return serde_json::Number::from_f64(f).map_or(J::Null, J::Number);
            }
        }
        "dict" => {
            if let Some(pairs) = v.pairs() {
                let mut m = serde_json::Map::new();
                for (k, val) in pairs {
                    let key = k.as_str().map(str::to_string).unwrap_or_else(|| k.py_repr());
                    m.insert(key, to_json(val, depth + 1));
                }
                return J::Object(m);
            }
        }
        _ => {
            if let Some(items) = v.items() {
                return J::Array(items.into_iter().map(|i| to_json(i, depth + 1)).collect());
            }
        }
    }
    J::String(v.py_repr())
}

/// An exception's code (`SYNTAX_ERROR` or `SCRIPT_ERROR`) and text with
/// the innermost position in the program.
fn failure(e: MontyException) -> Failure {
    let code = if e.exc_type() == ExcType::SyntaxError { "SYNTAX_ERROR" } else { "SCRIPT_ERROR" };
    let mut msg = e.summary();
    if let Some(f) = e.traceback().iter().rev().find(|f| f.filename == SCRIPT) {
        let _ = write!(msg, " (at line {}:{})", f.start.line, f.start.column);
    }
    (code.to_string(), msg)
}
