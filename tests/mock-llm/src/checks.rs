//! The request checker: every rule a real DeepSeek/OpenAI endpoint enforces
//! (or that our adapters promise), as recordable violations.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::script::{Checks, ReasoningCheck};

/// Rule names, as found in [`Violation::rule`].
pub mod rule {
    /// The body is not a JSON object.
    pub const JSON: &str = "json";
    /// `Content-Type` is not `application/json`.
    pub const CONTENT_TYPE: &str = "content_type";
    /// `model` missing, empty, or not the expected one.
    pub const MODEL: &str = "model";
    /// `messages` missing or malformed.
    pub const MESSAGES: &str = "messages";
    /// `stream` is not `true`.
    pub const STREAM: &str = "stream";
    /// `stream_options.include_usage` is not `true`.
    pub const INCLUDE_USAGE: &str = "include_usage";
    /// `Authorization` missing or not the expected bearer key.
    pub const AUTH: &str = "auth";
    /// A tool-calling assistant message lacks `reasoning_content`.
    pub const REASONING_PASSBACK: &str = "reasoning_passback";
    /// `reasoning_content` differs from what the mock streamed.
    pub const REASONING_MISMATCH: &str = "reasoning_mismatch";
    /// `reasoning_content` sent where the dialect forbids it.
    pub const REASONING_FORBIDDEN: &str = "reasoning_forbidden";
    /// A tool call not answered, or a tool message answering nothing.
    pub const TOOL_ANSWERS: &str = "tool_answers";
    /// A malformed `tool_calls` entry on an assistant message.
    pub const TOOL_CALL_SHAPE: &str = "tool_call_shape";
    /// A malformed tool definition.
    pub const TOOL_SCHEMA: &str = "tool_schema";
    /// A request arrived after the script ran out.
    pub const SCRIPT_EXHAUSTED: &str = "script_exhausted";
}

/// One broken rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    /// Index of the request (0-based, in arrival order).
    pub request: usize,
    /// Rule name (see [`rule`]).
    pub rule: String,
    /// What was wrong.
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "request #{}: {}: {}", self.request, self.rule, self.message)
    }
}

/// What the checker needs besides the body.
#[derive(Debug, Clone, Copy)]
pub struct RequestMeta<'a> {
    /// Request index.
    pub index: usize,
    /// The `Content-Type` header.
    pub content_type: Option<&'a str>,
    /// The `Authorization` header.
    pub authorization: Option<&'a str>,
}

/// Whether `name` matches `[a-zA-Z0-9_-]{1,64}`.
pub fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Checks one request. `served_reasoning` maps tool-call ids the mock
/// streamed to the reasoning it streamed with them.
pub fn check_request(
    checks: &Checks,
    meta: RequestMeta<'_>,
    body: Option<&Value>,
    served_reasoning: &HashMap<String, String>,
) -> Vec<Violation> {
    let mut c = Collector { request: meta.index, out: Vec::new() };
    if let Some(key) = &checks.api_key {
        match meta.authorization {
            None => c.push(rule::AUTH, "no Authorization header".into()),
            Some(h) if h != format!("Bearer {key}") => {
                c.push(rule::AUTH, "Authorization is not `Bearer <expected key>`".into());
            }
            Some(_) => {}
        }
    }
    if !meta.content_type.is_some_and(|t| t.trim().to_ascii_lowercase().starts_with("application/json")) {
        c.push(rule::CONTENT_TYPE, format!("Content-Type is {:?}", meta.content_type));
    }
    let Some(obj) = body.and_then(Value::as_object) else {
        c.push(rule::JSON, "body is not a JSON object".into());
        return c.out;
    };
    match obj.get("model") {
        Some(Value::String(m)) if !m.is_empty() => {
            if let Some(want) = &checks.model
                && m != want
            {
                c.push(rule::MODEL, format!("model is {m:?}, expected {want:?}"));
            }
        }
        other => c.push(rule::MODEL, format!("model must be a non-empty string, got {other:?}")),
    }
    if obj.get("stream") != Some(&Value::Bool(true)) {
        c.push(rule::STREAM, format!("stream must be true, got {:?}", obj.get("stream")));
    }
    if checks.include_usage
        && obj.get("stream_options").and_then(|o| o.get("include_usage")) != Some(&Value::Bool(true))
    {
        c.push(rule::INCLUDE_USAGE, "stream_options.include_usage must be true".into());
    }
    match obj.get("messages") {
        Some(Value::Array(msgs)) if !msgs.is_empty() => check_messages(checks, msgs, served_reasoning, &mut c),
        _ => c.push(rule::MESSAGES, "messages must be a non-empty array".into()),
    }
    if checks.tool_schemas {
        check_tools(obj.get("tools"), &mut c);
    }
    c.out
}

struct Collector {
    request: usize,
    out: Vec<Violation>,
}

impl Collector {
    fn push(&mut self, rule: &str, message: String) {
        self.out.push(Violation { request: self.request, rule: rule.to_string(), message });
    }
}

fn check_messages(checks: &Checks, msgs: &[Value], served_reasoning: &HashMap<String, String>, c: &mut Collector) {
    // Ids of the latest tool-calling assistant turn not yet answered.
    let mut pending: Vec<String> = Vec::new();
    let mut answered: HashSet<String> = HashSet::new();
    for (i, m) in msgs.iter().enumerate() {
        let Some(m) = m.as_object() else {
            c.push(rule::MESSAGES, format!("message {i} is not an object"));
            continue;
        };
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        let has_reasoning = m.contains_key("reasoning_content");
        if checks.reasoning == ReasoningCheck::Forbidden && has_reasoning {
            c.push(rule::REASONING_FORBIDDEN, format!("message {i} carries reasoning_content"));
        }
        match role {
            "system" | "user" => {
                if !matches!(m.get("content"), Some(Value::String(_) | Value::Array(_))) {
                    c.push(rule::MESSAGES, format!("{role} message {i} has no string content"));
                }
                unanswered(&mut pending, i, c, checks);
            }
            "assistant" => {
                unanswered(&mut pending, i, c, checks);
                let calls = match m.get("tool_calls") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(Value::Array(calls)) => calls.clone(),
                    Some(_) => {
                        c.push(rule::TOOL_CALL_SHAPE, format!("message {i}: tool_calls is not an array"));
                        Vec::new()
                    }
                };
                match m.get("content") {
                    Some(Value::String(_)) => {}
                    None | Some(Value::Null) if !calls.is_empty() => {}
                    other => c.push(
                        rule::MESSAGES,
                        format!(
                            "assistant message {i}: content must be a string (or null with tool_calls), got {other:?}"
                        ),
                    ),
                }
                let ids = tool_call_ids(i, &calls, c);
                if !calls.is_empty() {
                    check_reasoning(checks, i, m.get("reasoning_content"), &ids, served_reasoning, c);
                }
                answered.clear();
                pending = ids;
            }
            "tool" => match m.get("tool_call_id").and_then(Value::as_str) {
                None => c.push(rule::TOOL_ANSWERS, format!("tool message {i} has no tool_call_id")),
                Some(id) => {
                    if !matches!(m.get("content"), Some(Value::String(_) | Value::Array(_))) {
                        c.push(rule::MESSAGES, format!("tool message {i} has no string content"));
                    }
                    if let Some(pos) = pending.iter().position(|p| p == id) {
                        pending.remove(pos);
                        answered.insert(id.to_string());
                    } else if checks.tool_answers {
                        let why = if answered.contains(id) { "answers it twice" } else { "answers no open call" };
                        c.push(rule::TOOL_ANSWERS, format!("tool message {i} (tool_call_id {id:?}) {why}"));
                    }
                }
            },
            other => c.push(rule::MESSAGES, format!("message {i} has invalid role {other:?}")),
        }
    }
    unanswered(&mut pending, msgs.len(), c, checks);
}

fn unanswered(pending: &mut Vec<String>, at: usize, c: &mut Collector, checks: &Checks) {
    if !pending.is_empty() && checks.tool_answers {
        c.push(rule::TOOL_ANSWERS, format!("tool calls {pending:?} not answered before message {at}"));
    }
    pending.clear();
}

fn tool_call_ids(i: usize, calls: &[Value], c: &mut Collector) -> Vec<String> {
    let mut ids = Vec::new();
    for (k, call) in calls.iter().enumerate() {
        let id = call.get("id").and_then(Value::as_str).filter(|s| !s.is_empty());
        let kind = call.get("type").and_then(Value::as_str);
        let f = call.get("function");
        let name = f.and_then(|f| f.get("name")).and_then(Value::as_str);
        let args = f.and_then(|f| f.get("arguments"));
        let mut problems = Vec::new();
        if id.is_none() {
            problems.push("no id");
        }
        if kind != Some("function") {
            problems.push("type is not \"function\"");
        }
        if !name.is_some_and(valid_tool_name) {
            problems.push("invalid function.name");
        }
        if !matches!(args, Some(Value::String(_))) {
            problems.push("function.arguments is not a string");
        }
        if !problems.is_empty() {
            c.push(rule::TOOL_CALL_SHAPE, format!("message {i}, tool call {k}: {}", problems.join(", ")));
        }
        if let Some(id) = id {
            if ids.iter().any(|x| x == id) {
                c.push(rule::TOOL_CALL_SHAPE, format!("message {i}: duplicate tool call id {id:?}"));
            } else {
                ids.push(id.to_string());
            }
        }
    }
    ids
}

fn check_reasoning(
    checks: &Checks,
    i: usize,
    reasoning: Option<&Value>,
    ids: &[String],
    served_reasoning: &HashMap<String, String>,
    c: &mut Collector,
) {
    if checks.reasoning != ReasoningCheck::Required {
        return;
    }
    match reasoning {
        Some(Value::String(sent)) => {
            if let Some(want) = ids.iter().find_map(|id| served_reasoning.get(id))
                && sent != want
            {
                c.push(
                    rule::REASONING_MISMATCH,
                    format!(
                        "assistant message {i}: reasoning_content ({} chars) differs from the reasoning streamed with its tool calls ({} chars)",
                        sent.chars().count(),
                        want.chars().count()
                    ),
                );
            }
        }
        other => c.push(
            rule::REASONING_PASSBACK,
            format!("assistant message {i} made tool calls but reasoning_content is {other:?}, not a string"),
        ),
    }
}

fn check_tools(tools: Option<&Value>, c: &mut Collector) {
    let tools = match tools {
        None | Some(Value::Null) => return,
        Some(Value::Array(t)) => t,
        Some(_) => {
            c.push(rule::TOOL_SCHEMA, "tools is not an array".into());
            return;
        }
    };
    let mut names = HashSet::new();
    for (k, t) in tools.iter().enumerate() {
        let mut problems: Vec<String> = Vec::new();
        if t.get("type").and_then(Value::as_str) != Some("function") {
            problems.push("type is not \"function\"".into());
        }
        let f = t.get("function");
        match f.and_then(|f| f.get("name")).and_then(Value::as_str) {
            Some(n) if valid_tool_name(n) => {
                if !names.insert(n.to_string()) {
                    problems.push(format!("duplicate name {n:?}"));
                }
            }
            other => problems.push(format!("invalid name {other:?}")),
        }
        if let Some(d) = f.and_then(|f| f.get("description"))
            && !d.is_string()
        {
            problems.push("description is not a string".into());
        }
        match f.and_then(|f| f.get("parameters")) {
            Some(Value::Object(p)) => {
                if p.get("type").and_then(Value::as_str) != Some("object") {
                    problems.push("parameters.type is not \"object\"".into());
                }
                let props = p.get("properties");
                if props.is_some_and(|v| !v.is_object()) {
                    problems.push("parameters.properties is not an object".into());
                }
                match p.get("required") {
                    None => {}
                    Some(Value::Array(req)) => {
                        for r in req {
                            match r.as_str() {
                                Some(r) if props.and_then(|p| p.get(r)).is_some() => {}
                                _ => problems.push(format!("required entry {r} is not a declared property")),
                            }
                        }
                    }
                    Some(_) => problems.push("parameters.required is not an array".into()),
                }
            }
            _ => problems.push("parameters is not an object schema".into()),
        }
        if !problems.is_empty() {
            c.push(rule::TOOL_SCHEMA, format!("tool {k}: {}", problems.join(", ")));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use serde_json::json;

    fn meta() -> RequestMeta<'static> {
        RequestMeta { index: 0, content_type: Some("application/json"), authorization: Some("Bearer k") }
    }

    fn rules(checks: &Checks, body: &Value) -> Vec<String> {
        check_request(checks, meta(), Some(body), &HashMap::new()).into_iter().map(|v| v.rule).collect()
    }

    fn good() -> Value {
        json!({
            "model": "m", "stream": true, "stream_options": {"include_usage": true},
            "messages": [
                {"role": "system", "content": "s"},
                {"role": "user", "content": "u"},
                {"role": "assistant", "content": null, "reasoning_content": "r",
                 "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "read", "arguments": "{}"}},
                    {"id": "b", "type": "function", "function": {"name": "read", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "b", "content": "B"},
                {"role": "tool", "tool_call_id": "a", "content": "A"},
                {"role": "assistant", "content": "done"},
                {"role": "user", "content": "again"}
            ],
            "tools": [{"type": "function", "function": {"name": "read", "description": "d",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]
        })
    }

    #[test]
    fn good_request_passes() {
        let checks = Checks { api_key: Some("k".into()), model: Some("m".into()), ..Checks::default() };
        assert_eq!(rules(&checks, &good()), Vec::<String>::new());
    }

    #[test]
    fn basics() {
        let c = Checks::default();
        let mut b = good();
        b["stream"] = json!(false);
        b["model"] = json!("");
        b.as_object_mut().unwrap().remove("stream_options");
        assert_eq!(rules(&c, &b), vec![rule::MODEL, rule::STREAM, rule::INCLUDE_USAGE]);
        b["messages"] = json!([]);
        assert!(rules(&c, &b).contains(&rule::MESSAGES.to_string()));
        let v = check_request(&c, meta(), None, &HashMap::new());
        assert_eq!(v[0].rule, rule::JSON);
        let m = RequestMeta { content_type: Some("text/plain"), ..meta() };
        let v = check_request(&c, m, Some(&good()), &HashMap::new());
        assert_eq!(v[0].rule, rule::CONTENT_TYPE);
    }

    #[test]
    fn auth() {
        let c = Checks { api_key: Some("k".into()), ..Checks::default() };
        let bad = RequestMeta { authorization: Some("Bearer nope"), ..meta() };
        let v = check_request(&c, bad, Some(&good()), &HashMap::new());
        assert_eq!(v.len(), 1);
        assert!(!v[0].message.contains("nope"), "never echo the header");
        let none = RequestMeta { authorization: None, ..meta() };
        assert_eq!(check_request(&c, none, Some(&good()), &HashMap::new())[0].rule, rule::AUTH);
    }

    #[test]
    fn reasoning_rules() {
        let mut b = good();
        b["messages"][2].as_object_mut().unwrap().remove("reasoning_content");
        assert_eq!(rules(&Checks::default(), &b), vec![rule::REASONING_PASSBACK]);
        let ignore = Checks { reasoning: ReasoningCheck::Ignore, ..Checks::default() };
        assert!(rules(&ignore, &b).is_empty());
        let forbid = Checks { reasoning: ReasoningCheck::Forbidden, ..Checks::default() };
        assert_eq!(rules(&forbid, &good()), vec![rule::REASONING_FORBIDDEN]);
        // Exact match against what the mock streamed.
        let served = HashMap::from([("a".to_string(), "r".to_string())]);
        assert!(check_request(&Checks::default(), meta(), Some(&good()), &served).is_empty());
        let served = HashMap::from([("b".to_string(), "other".to_string())]);
        let v = check_request(&Checks::default(), meta(), Some(&good()), &served);
        assert_eq!(v[0].rule, rule::REASONING_MISMATCH);
        // Empty string is a valid pass-back.
        let mut b = good();
        b["messages"][2]["reasoning_content"] = json!("");
        assert!(rules(&Checks::default(), &b).is_empty());
        b["messages"][2]["reasoning_content"] = json!(null);
        assert_eq!(rules(&Checks::default(), &b), vec![rule::REASONING_PASSBACK]);
    }

    #[test]
    fn tool_answer_rules() {
        let c = Checks::default();
        // One answer missing, before the next assistant message.
        let mut b = good();
        b["messages"].as_array_mut().unwrap().remove(4);
        let v = check_request(&c, meta(), Some(&b), &HashMap::new());
        assert_eq!(v.len(), 1);
        assert!(v[0].message.contains("[\"a\"]") && v[0].message.contains("message 4"), "{}", v[0]);
        // Unanswered at the end.
        let mut b = good();
        b["messages"].as_array_mut().unwrap().truncate(3);
        assert_eq!(rules(&c, &b), vec![rule::TOOL_ANSWERS]);
        // Orphan and duplicate answers.
        let mut b = good();
        b["messages"]
            .as_array_mut()
            .unwrap()
            .insert(5, json!({"role": "tool", "tool_call_id": "a", "content": "again"}));
        b["messages"].as_array_mut().unwrap().insert(1, json!({"role": "tool", "tool_call_id": "zz", "content": "?"}));
        let v = check_request(&c, meta(), Some(&b), &HashMap::new());
        let msgs: Vec<_> = v.iter().map(|v| v.message.as_str()).collect();
        assert_eq!(v.len(), 2, "{msgs:?}");
        assert!(msgs[0].contains("answers no open call"));
        assert!(msgs[1].contains("answers it twice"));
        let off = Checks { tool_answers: false, ..Checks::default() };
        assert!(rules(&off, &b).is_empty());
    }

    #[test]
    fn tool_call_shapes() {
        let mut b = good();
        b["messages"][2]["tool_calls"][1] =
            json!({"id": "a", "type": "fn", "function": {"name": "bad name", "arguments": {}}});
        b["messages"].as_array_mut().unwrap().remove(3);
        let v = check_request(&Checks::default(), meta(), Some(&b), &HashMap::new());
        let r: Vec<_> = v.iter().map(|v| v.rule.as_str()).collect();
        assert_eq!(r, vec![rule::TOOL_CALL_SHAPE, rule::TOOL_CALL_SHAPE], "{v:?}");
    }

    #[test]
    fn tool_schema_rules() {
        let c = Checks::default();
        let bads = [
            json!({"type": "fn", "function": {"name": "x", "parameters": {"type": "object"}}}),
            json!({"type": "function", "function": {"name": "x y", "parameters": {"type": "object"}}}),
            json!({"type": "function", "function": {"name": "x"}}),
            json!({"type": "function", "function": {"name": "x", "parameters": {"type": "string"}}}),
            json!({"type": "function", "function": {"name": "x", "parameters": {"type": "object", "required": ["q"]}}}),
            json!({"type": "function", "function": {"name": "x", "description": 3, "parameters": {"type": "object"}}}),
        ];
        for bad in bads {
            let mut b = good();
            b["tools"] = json!([bad]);
            assert_eq!(rules(&c, &b), vec![rule::TOOL_SCHEMA], "{bad}");
        }
        let mut b = good();
        b["tools"] = json!([b["tools"][0], b["tools"][0]]);
        assert_eq!(rules(&c, &b), vec![rule::TOOL_SCHEMA]);
        let off = Checks { tool_schemas: false, ..Checks::default() };
        assert!(rules(&off, &b).is_empty());
    }
}
