//! Adapter request → Messages API body.
//!
//! - `system`: the host's system prompt (and any system-role message) as
//!   text blocks;
//! - user text → a `text` block, then a `image` block (base64 source) per
//!   image of the message; a tool result → a `tool_result` block
//!   answering its `tool_use_id`, in a **user** message; consecutive
//!   messages of one role are merged (so the results of one turn's calls go
//!   back as one user message, results first);
//! - an assistant turn → its kept thinking blocks (see [`crate::thinking`]),
//!   its text, then a `tool_use` block per call (`input` parsed from the
//!   arguments; empty arguments are `{}`, anything else that is not a JSON
//!   object is wrapped as `{"_raw": TEXT}` so the model sees what it sent);
//! - prompt caching: `cache_control: {"type": "ephemeral"}` on the last
//!   system block, the last tool and the last block of the last message —
//!   three breakpoints, within the API's four;
//! - extended thinking (`thinking_budget`): `thinking: {type: "enabled",
//!   budget_tokens}`, left out for a request whose cap is not above the
//!   budget, or whose last assistant turn called tools but has no kept
//!   thinking blocks (the API refuses such a turn with thinking on).

use serde_json::{Map, Value, json};
use wharf_llm_wire::{Message, Request, Role};

use crate::config::Settings;
use crate::thinking::{self, Block};

fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

fn tool_input(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ if arguments.trim().is_empty() => json!({}),
        _ => json!({ "_raw": arguments }),
    }
}

fn assistant_blocks(m: &Message, thinking_out: &mut bool) -> Vec<Value> {
    let mut blocks = Vec::new();
    let ids: Vec<String> = m.tool_calls.iter().map(|c| c.id.clone()).collect();
    let reasoning = m.reasoning.as_deref().unwrap_or("");
    *thinking_out = false;
    if (!reasoning.is_empty() || !ids.is_empty())
        && let Some(kept) = thinking::load(reasoning, &ids)
    {
        *thinking_out = true;
        for b in kept {
            blocks.push(match b {
                Block::Thinking { thinking, signature } => {
                    json!({"type": "thinking", "thinking": thinking, "signature": signature})
                }
                Block::RedactedThinking { data } => json!({"type": "redacted_thinking", "data": data}),
            });
        }
    }
    if !m.content.is_empty() {
        blocks.push(json!({"type": "text", "text": m.content}));
    }
    for c in &m.tool_calls {
        blocks.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": tool_input(&c.arguments)}));
    }
    blocks
}

/// The request body.
pub fn build(req: &Request, s: &Settings) -> Value {
    let mut system: Vec<Value> = Vec::new();
    if !req.system.trim().is_empty() {
        system.push(json!({"type": "text", "text": req.system}));
    }
    // (role, blocks), merged per role.
    let mut messages: Vec<(&'static str, Vec<Value>)> = Vec::new();
    let mut last_assistant_calls_without_thinking = false;
    for m in &req.messages {
        let (role, blocks) = match m.role {
            Role::System => {
                if !m.content.trim().is_empty() {
                    system.push(json!({"type": "text", "text": m.content}));
                }
                continue;
            }
            Role::User if m.content.is_empty() && m.images.is_empty() => continue,
            Role::User if m.images.is_empty() => ("user", vec![json!({"type": "text", "text": m.content})]),
            Role::User => {
                // The text, then each image as a base64 `image` block.
                let mut blocks = vec![json!({"type": "text", "text": m.content})];
                blocks.extend(m.images.iter().map(|i| {
                    json!({"type": "image", "source": {"type": "base64", "media_type": i.mime_type, "data": i.base64()}})
                }));
                ("user", blocks)
            }
            Role::Tool => {
                let content = if m.content.is_empty() { "(no output)".to_string() } else { m.content.clone() };
                let id = m.tool_call_id.clone().unwrap_or_default();
                ("user", vec![json!({"type": "tool_result", "tool_use_id": id, "content": content})])
            }
            Role::Assistant => {
                let mut kept = false;
                let blocks = assistant_blocks(m, &mut kept);
                if blocks.is_empty() {
                    continue;
                }
                last_assistant_calls_without_thinking = !m.tool_calls.is_empty() && !kept;
                ("assistant", blocks)
            }
        };
        match messages.last_mut() {
            Some((r, prev)) if *r == role => prev.extend(blocks),
            _ => messages.push((role, blocks)),
        }
    }
    // The API wants a user message first.
    if messages.first().is_some_and(|(r, _)| *r == "assistant") {
        messages.insert(0, ("user", vec![json!({"type": "text", "text": "(continued)"})]));
    }
    if messages.is_empty() {
        messages.push(("user", vec![json!({"type": "text", "text": "(empty)"})]));
    }
    // Tool results lead their user message (the API requires it).
    for (role, blocks) in &mut messages {
        if *role == "user" {
            blocks.sort_by_key(|b| b["type"] != "tool_result");
        }
    }
    if let Some(last) = system.last_mut().and_then(Value::as_object_mut) {
        last.insert("cache_control".into(), ephemeral());
    }
    if let Some(last) = messages.last_mut().and_then(|(_, b)| b.last_mut()).and_then(Value::as_object_mut) {
        last.insert("cache_control".into(), ephemeral());
    }
    let mut tools: Vec<Value> = req
        .tools
        .iter()
        .map(|t| {
            let schema = serde_json::from_str::<Value>(&t.input_schema)
                .ok()
                .filter(Value::is_object)
                .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
            let mut o = Map::new();
            o.insert("name".into(), t.name.clone().into());
            if !t.description.is_empty() {
                o.insert("description".into(), t.description.clone().into());
            }
            o.insert("input_schema".into(), schema);
            Value::Object(o)
        })
        .collect();
    if let Some(last) = tools.last_mut().and_then(Value::as_object_mut) {
        last.insert("cache_control".into(), ephemeral());
    }

    let max_tokens = req.max_tokens.filter(|&n| n > 0).unwrap_or(s.max_tokens);
    let mut body = Map::new();
    body.insert("model".into(), s.model.clone().into());
    body.insert("max_tokens".into(), max_tokens.into());
    body.insert("stream".into(), true.into());
    if !system.is_empty() {
        body.insert("system".into(), Value::Array(system));
    }
    body.insert(
        "messages".into(),
        Value::Array(messages.into_iter().map(|(role, content)| json!({"role": role, "content": content})).collect()),
    );
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(budget) = s.thinking_budget
        && budget < max_tokens
        && !last_assistant_calls_without_thinking
    {
        body.insert("thinking".into(), json!({"type": "enabled", "budget_tokens": budget}));
    }
    Value::Object(body)
}
