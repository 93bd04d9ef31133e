//! The script: configuration types and how a request becomes a stream.

use std::collections::VecDeque;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use wharf_sdk::llm::estimate_tokens;
use wharf_sdk::prelude::*;

const DEFAULT_MODEL: &str = "scripted";
const DEFAULT_CONTEXT_WINDOW: u32 = 65_536;
const DEFAULT_CHUNK: usize = 16;
const DEFAULT_EXHAUSTED_TEXT: &str = "(the scripted adapter has no more turns)";

/// The plugin configuration.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    model: Option<String>,
    context_window: Option<u32>,
    turns: Vec<Turn>,
    chunk_size: Option<usize>,
    chunks_per_batch: Option<usize>,
    on_exhausted: Exhausted,
    exhausted_text: Option<String>,
    fail: Option<Fail>,
    /// Answer to tool-less one-shot requests (a plugin's `model.complete`,
    /// e.g. compaction) instead of playing a turn.
    complete_text: Option<String>,
    /// Alternative scripts chosen by the first user message (subagents).
    branches: Vec<Branch>,
    /// Per-model prices: the host reads them for its cost figures (the
    /// key every adapter row may carry); the script ignores them.
    #[allow(dead_code)]
    prices: Option<serde_json::Value>,
}

/// A script used when the session's first user message contains `when`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Branch {
    when: String,
    turns: Vec<Turn>,
}

/// Assistant replies an earlier compaction summary stands for (the header
/// the `compaction` component writes).
fn summarised_replies(text: &str) -> usize {
    const HEAD: &str = "Summary of the earlier conversation (";
    let Some(i) = text.find(HEAD) else { return 0 };
    let rest = &text[i + HEAD.len()..];
    rest.split_once(" messages, ")
        .and_then(|(_, r)| r.split_once(" assistant replies)"))
        .and_then(|(n, _)| n.trim().parse().ok())
        .unwrap_or(0)
}

/// What happens past the last turn.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Exhausted {
    /// Reply with `exhausted_text` and finish with `stop`.
    #[default]
    Stop,
    /// Fail `start` with `invalid-request`.
    Error,
}

/// One scripted model turn.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Turn {
    reasoning: Option<String>,
    text: Option<String>,
    tool_calls: Vec<ScriptedCall>,
    finish: Option<String>,
    usage: Option<Usage>,
    error: Option<Fail>,
    echo_last_tool_result: bool,
    delay_ms: Option<u64>,
}

/// A scripted tool call.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptedCall {
    #[serde(default)]
    id: Option<String>,
    name: String,
    #[serde(default)]
    arguments: Option<Value>,
}

/// An injected failure.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Fail {
    code: String,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    http_status: Option<u16>,
    #[serde(default)]
    retry_after_ms: Option<u64>,
    /// Fail only the first N attempts of the same request.
    #[serde(default)]
    times: Option<u32>,
    /// `start` (default) or `stream`.
    #[serde(default)]
    during: Option<String>,
    /// With `during: stream`: batches played before the error.
    #[serde(default)]
    after_batches: Option<usize>,
}

/// Counts attempts of a request across instances (the `kv` store).
pub trait Counter {
    /// Increments the count under `key` and returns the previous value.
    fn bump(&self, key: &str) -> u32;
}

impl Config {
    /// What `model()` reports.
    pub fn model_info(&self) -> ModelInfo {
        ModelInfo::new(
            self.model.clone().unwrap_or_else(|| DEFAULT_MODEL.to_string()),
            self.context_window.unwrap_or(DEFAULT_CONTEXT_WINDOW),
        )
    }
}

fn invalid(message: impl Into<String>) -> LlmError {
    LlmError::new(LlmErrorCode::InvalidRequest, message)
}

impl Fail {
    fn error(&self) -> Result<LlmError, LlmError> {
        let code = LlmErrorCode::parse(&self.code)
            .ok_or_else(|| invalid(format!("llm-scripted: unknown error code `{}`", self.code)))?;
        let mut e =
            LlmError::new(code, self.message.clone().unwrap_or_else(|| format!("scripted {} error", code.as_str())));
        e.http_status = self.http_status;
        e.retry_after_ms = self.retry_after_ms;
        Ok(e)
    }

    fn in_stream(&self) -> Result<bool, LlmError> {
        match self.during.as_deref() {
            None | Some("start") => Ok(false),
            Some("stream") => Ok(true),
            Some(other) => Err(invalid(format!("llm-scripted: `during` must be `start` or `stream`, not `{other}`"))),
        }
    }
}

/// A scripted completion in progress.
pub struct ScriptStream {
    batches: VecDeque<Vec<Event>>,
    /// Error returned by `next` once this many batches were played.
    fail_after: Option<(usize, LlmError)>,
    played: usize,
    delay: Option<Duration>,
}

impl CompletionStream for ScriptStream {
    fn next(&mut self) -> Result<Option<Vec<Event>>, LlmError> {
        if let Some((after, err)) = &self.fail_after
            && self.played >= *after
        {
            return Err(err.clone());
        }
        if let Some(d) = self.delay
            && !self.batches.is_empty()
        {
            // A host call (wasi:clocks subscribe + poll), not a busy loop.
            std::thread::sleep(d);
        }
        self.played += 1;
        Ok(self.batches.pop_front())
    }
}

/// FNV-1a 64, to key attempt counts by request.
fn fnv(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in p.as_bytes().iter().chain(&[0xff]) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

fn request_key(turn: usize, req: &LlmRequest) -> String {
    let messages = serde_json::to_string(&req.messages).unwrap_or_default();
    format!("attempts/{turn}/{:016x}", fnv(&[&req.system, &messages]))
}

/// Splits `s` into chunks of `size` characters.
fn chunks(s: &str, size: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut n = 0;
    for c in s.chars() {
        cur.push(c);
        n += 1;
        if n == size {
            out.push(std::mem::take(&mut cur));
            n = 0;
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn estimate_prompt(req: &LlmRequest) -> u64 {
    let mut t = estimate_tokens(&req.system);
    for m in &req.messages {
        t += 4 + estimate_tokens(&m.content);
        t += m.reasoning.as_deref().map_or(0, estimate_tokens);
        for c in &m.tool_calls {
            t += estimate_tokens(&c.name) + estimate_tokens(&c.arguments);
        }
    }
    for tool in &req.tools {
        t += estimate_tokens(&tool.name) + estimate_tokens(&tool.description) + estimate_tokens(&tool.input_schema);
    }
    t
}

/// Starts the completion for `req`.
pub fn start(cfg: &Config, req: &LlmRequest, counter: &dyn Counter) -> Result<ScriptStream, LlmError> {
    let complete = cfg.complete_text.as_ref().filter(|_| req.tools.is_empty());
    let index = req
        .messages
        .iter()
        .map(|m| match m.role {
            Role::Assistant => 1,
            Role::User => summarised_replies(&m.content),
            _ => 0,
        })
        .sum::<usize>();
    let first_user = req.messages.iter().find(|m| m.role == Role::User).map(|m| m.content.as_str()).unwrap_or("");
    let turns = cfg.branches.iter().find(|b| first_user.contains(&b.when)).map_or(&cfg.turns, |b| &b.turns);
    let scripted = if complete.is_some() { None } else { turns.get(index) };
    let turn = match scripted {
        _ if complete.is_some() => Turn { text: complete.cloned(), ..Turn::default() },
        Some(t) => t.clone(),
        None if cfg.on_exhausted == Exhausted::Error => {
            return Err(invalid(format!(
                "llm-scripted: the script has {} turns and this is turn {}",
                turns.len(),
                index + 1
            )));
        }
        None => Turn {
            text: Some(cfg.exhausted_text.clone().unwrap_or_else(|| DEFAULT_EXHAUSTED_TEXT.to_string())),
            ..Turn::default()
        },
    };

    // Injected failure: the turn's own, else the global one (not past the
    // end of the script).
    let mut fail_after = None;
    let fail = turn.error.as_ref().or(scripted.and(cfg.fail.as_ref()));
    if let Some(f) = fail {
        let err = f.error()?;
        let in_stream = f.in_stream()?;
        let fails_now = match f.times {
            None => true,
            Some(n) => counter.bump(&request_key(index, req)) < n,
        };
        if fails_now {
            if in_stream {
                fail_after = Some((f.after_batches.unwrap_or(1), err));
            } else {
                return Err(err);
            }
        }
    }

    let size = cfg.chunk_size.filter(|&n| n > 0).unwrap_or(DEFAULT_CHUNK);
    let per_batch = cfg.chunks_per_batch.filter(|&n| n > 0).unwrap_or(1);
    let reasoning = turn.reasoning.clone().unwrap_or_default();
    let mut text = turn.text.clone().unwrap_or_default();
    if turn.echo_last_tool_result
        && let Some(m) = req.messages.iter().rev().find(|m| m.role == Role::Tool)
    {
        text.push_str(&m.content);
    }

    let mut events: Vec<Event> = Vec::new();
    events.extend(chunks(&reasoning, size).into_iter().map(Event::Reasoning));
    events.extend(chunks(&text, size).into_iter().map(Event::Text));
    let mut batches: VecDeque<Vec<Event>> = events.chunks(per_batch).map(<[Event]>::to_vec).collect();

    let mut tail = Vec::new();
    let mut call_tokens = 0;
    for (i, c) in turn.tool_calls.iter().enumerate() {
        let arguments = match &c.arguments {
            None => "{}".to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(v) => v.to_string(),
        };
        call_tokens += estimate_tokens(&c.name) + estimate_tokens(&arguments);
        let id = c.id.clone().unwrap_or_else(|| format!("call_{index}_{i}"));
        tail.push(Event::tool_call(id, c.name.clone(), arguments));
    }
    let usage = turn.usage.unwrap_or_else(|| {
        let prompt = estimate_prompt(req);
        let reasoning_tokens = estimate_tokens(&reasoning);
        Usage {
            prompt_tokens: prompt,
            completion_tokens: reasoning_tokens + estimate_tokens(&text) + call_tokens,
            cache_hit_tokens: 0,
            cache_miss_tokens: prompt,
            reasoning_tokens,
        }
    });
    tail.push(Event::Usage(usage));
    let finish = match turn.finish.as_deref() {
        Some(name) => {
            FinishReason::parse(name).ok_or_else(|| invalid(format!("llm-scripted: unknown finish reason `{name}`")))?
        }
        None if !turn.tool_calls.is_empty() => FinishReason::ToolCalls,
        None => FinishReason::Stop,
    };
    tail.push(Event::Finish(finish));
    batches.push_back(tail);

    Ok(ScriptStream {
        batches,
        fail_after,
        played: 0,
        delay: turn.delay_ms.filter(|&d| d > 0).map(Duration::from_millis),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::cell::RefCell;
    use std::collections::HashMap;

    use serde_json::json;

    use super::*;

    #[derive(Default)]
    struct Mem(RefCell<HashMap<String, u32>>);

    impl Counter for Mem {
        fn bump(&self, key: &str) -> u32 {
            let mut m = self.0.borrow_mut();
            let n = m.entry(key.to_string()).or_insert(0);
            *n += 1;
            *n - 1
        }
    }

    fn cfg(v: serde_json::Value) -> Config {
        serde_json::from_value(v).unwrap()
    }

    fn msg(role: Role, content: &str) -> Message {
        Message { role, content: content.into(), reasoning: None, tool_calls: vec![], tool_call_id: None }
    }

    fn req(messages: Vec<Message>) -> LlmRequest {
        LlmRequest { system: "sys".into(), messages, tools: vec![], max_tokens: None }
    }

    fn drain(mut s: ScriptStream) -> (Vec<Vec<Event>>, Option<LlmError>) {
        let mut out = Vec::new();
        loop {
            match s.next() {
                Ok(Some(b)) => out.push(b),
                Ok(None) => return (out, None),
                Err(e) => return (out, Some(e)),
            }
        }
    }

    fn flat(batches: &[Vec<Event>]) -> (String, String, Vec<ToolCall>, Option<FinishReason>) {
        let (mut r, mut t, mut calls, mut fin) = (String::new(), String::new(), vec![], None);
        for e in batches.iter().flatten() {
            match e {
                Event::Reasoning(s) => r.push_str(s),
                Event::Text(s) => t.push_str(s),
                Event::ToolCall(c) => calls.push(c.clone()),
                Event::Finish(f) => fin = Some(*f),
                Event::Usage(_) => {}
            }
        }
        (r, t, calls, fin)
    }

    #[test]
    fn turn_is_the_number_of_assistant_messages() {
        let c = cfg(json!({"chunk_size": 4, "turns": [
            {"reasoning": "think", "text": "hello world", "tool_calls": [{"name": "list", "arguments": {"path": "."}}]},
            {"text": "done"}
        ]}));
        let (b, e) = drain(start(&c, &req(vec![msg(Role::User, "hi")]), &Mem::default()).unwrap());
        assert!(e.is_none());
        // "think" → 2 chunks, "hello world" → 3 chunks, then the tail.
        assert_eq!(b.len(), 6);
        let (r, t, calls, fin) = flat(&b);
        assert_eq!((r.as_str(), t.as_str()), ("think", "hello world"));
        assert_eq!(calls[0].id, "call_0_0");
        assert_eq!(calls[0].arguments, r#"{"path":"."}"#);
        assert_eq!(fin, Some(FinishReason::ToolCalls));

        let two = vec![msg(Role::User, "hi"), msg(Role::Assistant, ""), msg(Role::Tool, "a b")];
        let (b, _) = drain(start(&c, &req(two), &Mem::default()).unwrap());
        let (_, t, calls, fin) = flat(&b);
        assert_eq!(t, "done");
        assert!(calls.is_empty());
        assert_eq!(fin, Some(FinishReason::Stop));
    }

    #[test]
    fn exhausted_script_stops_or_errors() {
        let r = req(vec![msg(Role::Assistant, "")]);
        let (b, _) = drain(start(&cfg(json!({"turns": []})), &r, &Mem::default()).unwrap());
        assert_eq!(flat(&b).1, DEFAULT_EXHAUSTED_TEXT);
        let e = start(&cfg(json!({"on_exhausted": "error"})), &r, &Mem::default()).err().unwrap();
        assert_eq!(e.code, LlmErrorCode::InvalidRequest);
    }

    #[test]
    fn echoes_the_last_tool_result() {
        let c = cfg(json!({"chunk_size": 100, "turns": [{}, {"text": "Result: ", "echo_last_tool_result": true}]}));
        let r = req(vec![msg(Role::Assistant, ""), msg(Role::Tool, "first"), msg(Role::Tool, "42 files")]);
        let (b, _) = drain(start(&c, &r, &Mem::default()).unwrap());
        assert_eq!(flat(&b).1, "Result: 42 files");
    }

    #[test]
    fn errors_at_start_with_and_without_times() {
        let c = cfg(json!({"turns": [{"error": {"code": "rate-limit", "message": "slow", "retry_after_ms": 5}}]}));
        let e = start(&c, &req(vec![]), &Mem::default()).err().unwrap();
        assert_eq!((e.code, e.message.as_str(), e.retry_after_ms), (LlmErrorCode::RateLimit, "slow", Some(5)));

        let c = cfg(json!({"turns": [{"text": "ok", "error": {"code": "SERVER", "times": 2}}]}));
        let mem = Mem::default();
        assert!(start(&c, &req(vec![]), &mem).is_err());
        assert!(start(&c, &req(vec![]), &mem).is_err());
        let (b, _) = drain(start(&c, &req(vec![]), &mem).unwrap());
        assert_eq!(flat(&b).1, "ok");
    }

    #[test]
    fn global_fail_during_stream() {
        let c = cfg(
            json!({"chunk_size": 2, "fail": {"code": "stream-closed", "during": "stream", "after_batches": 2, "times": 1},
                           "turns": [{"text": "abcdef"}]}),
        );
        let mem = Mem::default();
        let (b, e) = drain(start(&c, &req(vec![]), &mem).unwrap());
        assert_eq!(b.len(), 2);
        assert_eq!(e.unwrap().code, LlmErrorCode::StreamClosed);
        let (b, e) = drain(start(&c, &req(vec![]), &mem).unwrap());
        assert!(e.is_none());
        assert_eq!(flat(&b).1, "abcdef");
    }

    #[test]
    fn usage_is_given_or_estimated_and_config_is_strict() {
        let c = cfg(json!({"turns": [{"text": "x", "usage": {"prompt_tokens": 7, "completion_tokens": 3}}]}));
        let (b, _) = drain(start(&c, &req(vec![]), &Mem::default()).unwrap());
        let usage = b
            .iter()
            .flatten()
            .find_map(|e| match e {
                Event::Usage(u) => Some(*u),
                _ => None,
            })
            .unwrap();
        assert_eq!((usage.prompt_tokens, usage.completion_tokens), (7, 3));
        let c = cfg(json!({"turns": [{"text": "12345678"}]}));
        let (b, _) = drain(start(&c, &req(vec![]), &Mem::default()).unwrap());
        let usage = b
            .iter()
            .flatten()
            .find_map(|e| match e {
                Event::Usage(u) => Some(*u),
                _ => None,
            })
            .unwrap();
        assert_eq!(usage.completion_tokens, 2);
        assert!(serde_json::from_value::<Config>(json!({"turns": [{"txt": "typo"}]})).is_err());
        let bad = cfg(json!({"turns": [{"finish": "nope"}]}));
        assert!(start(&bad, &req(vec![]), &Mem::default()).is_err());
    }

    #[test]
    fn chunks_by_chars() {
        assert_eq!(chunks("héllo", 2), ["hé", "ll", "o"]);
        assert!(chunks("", 3).is_empty());
    }
}
