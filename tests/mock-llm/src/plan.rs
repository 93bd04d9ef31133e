//! Turning a [`StreamReply`] into the exact sequence of writes, pauses and
//! faults the server performs.

use serde_json::{Value, json};

use crate::script::{Fault, MockUsage, StreamReply};

/// One step of a streamed response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Write these bytes (split per `write_bytes`).
    Write(Vec<u8>),
    /// Pause, sending `: keep-alive` every `keepalive_every_ms` (0: never).
    Stall {
        /// Total pause.
        ms: u64,
        /// Keep-alive period.
        keepalive_every_ms: u64,
    },
    /// Reset the connection.
    Reset,
}

/// The `created` timestamp in every chunk.
const CREATED: u64 = 1_793_577_600;

/// The SSE keep-alive comment.
pub const KEEPALIVE: &[u8] = b": keep-alive\n\n";

/// Builds the `data:` chunk JSON of a reply (without faults, keep-alives
/// and `[DONE]`).
pub fn chunks(reply: &StreamReply, model: &str, request_index: usize) -> Vec<Value> {
    let id = format!("chatcmpl-mock-{request_index}");
    let model = reply.model.as_deref().unwrap_or(model);
    let chunk = |delta: Value, finish: Value| {
        json!({
            "id": id, "object": "chat.completion.chunk", "created": CREATED, "model": model,
            "system_fingerprint": "fp_mock",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
            "usage": null,
        })
    };
    let mut out = Vec::new();
    out.push(if reply.reasoning.is_empty() {
        chunk(json!({"role": "assistant", "content": ""}), Value::Null)
    } else {
        chunk(json!({"role": "assistant", "content": null, "reasoning_content": ""}), Value::Null)
    });
    for piece in pieces(&reply.reasoning, reply.chunk_chars) {
        out.push(chunk(json!({"content": null, "reasoning_content": piece}), Value::Null));
    }
    for piece in pieces(&reply.text, reply.chunk_chars) {
        out.push(chunk(json!({"content": piece}), Value::Null));
    }
    let per_call: Vec<Vec<Value>> = reply
        .tool_calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut frags = vec![json!({"index": i, "id": c.id, "type": "function",
                "function": {"name": c.name, "arguments": ""}})];
            frags.extend(
                pieces(&c.arguments, reply.chunk_chars)
                    .into_iter()
                    .map(|p| json!({"index": i, "function": {"arguments": p}})),
            );
            frags
        })
        .collect();
    let ordered: Vec<Value> = if reply.interleave_tool_calls {
        let longest = per_call.iter().map(Vec::len).max().unwrap_or(0);
        (0..longest).flat_map(|k| per_call.iter().filter_map(move |f| f.get(k).cloned())).collect()
    } else {
        per_call.into_iter().flatten().collect()
    };
    for frag in ordered {
        out.push(chunk(json!({"tool_calls": [frag]}), Value::Null));
    }
    let mut finish = chunk(json!({}), Value::String(reply.finish_reason()));
    if let Some(u) = &reply.usage {
        if reply.usage_in_finish_chunk {
            finish["usage"] = usage_json(u);
            out.push(finish);
        } else {
            out.push(finish);
            out.push(json!({
                "id": id, "object": "chat.completion.chunk", "created": CREATED, "model": model,
                "system_fingerprint": "fp_mock", "choices": [], "usage": usage_json(u),
            }));
        }
    } else {
        out.push(finish);
    }
    out
}

/// The wire `usage` object.
pub fn usage_json(u: &MockUsage) -> Value {
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cache_hit_tokens},
        "prompt_cache_hit_tokens": u.cache_hit_tokens,
        "prompt_cache_miss_tokens": u.prompt_tokens.saturating_sub(u.cache_hit_tokens),
        "completion_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
    })
}

/// Splits `text` into pieces of `n` characters (`n == 0`: one piece).
pub fn pieces(text: &str, n: usize) -> Vec<String> {
    if text.is_empty() {
        return Vec::new();
    }
    if n == 0 {
        return vec![text.to_string()];
    }
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(n).map(|c| c.iter().collect()).collect()
}

fn data_event(value: &Value) -> Vec<u8> {
    format!("data: {value}\n\n").into_bytes()
}

/// The full plan for a streamed reply: chunks, keep-alives, the fault and
/// `[DONE]`.
pub fn plan(reply: &StreamReply, model: &str, request_index: usize) -> Vec<Step> {
    let data = chunks(reply, model, request_index);
    let fault_at = match &reply.fault {
        Some(
            Fault::Reset { after_chunks }
            | Fault::Stall { after_chunks, .. }
            | Fault::MalformedJson { after_chunks }
            | Fault::Eof { after_chunks }
            | Fault::ErrorEvent { after_chunks, .. },
        ) => Some((*after_chunks).min(data.len())),
        Some(Fault::MissingDone) => Some(data.len()),
        None => None,
    };
    let mut steps = Vec::new();
    for i in 0..=data.len() {
        if Some(i) == fault_at {
            match &reply.fault {
                Some(Fault::Reset { .. }) => {
                    steps.push(Step::Reset);
                    return steps;
                }
                Some(Fault::Stall { ms, keepalive_every_ms, .. }) => {
                    steps.push(Step::Stall { ms: *ms, keepalive_every_ms: *keepalive_every_ms });
                }
                Some(Fault::MalformedJson { .. }) => {
                    let bad = format!(
                        "data: {{\"id\":\"chatcmpl-mock-{request_index}\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"trunc\n\n"
                    );
                    steps.push(Step::Write(bad.into_bytes()));
                }
                Some(Fault::MissingDone | Fault::Eof { .. }) => return steps,
                Some(Fault::ErrorEvent { message, kind, code, .. }) => {
                    let err = json!({"error": {"message": message, "type": kind, "param": null,
                        "code": code.clone().unwrap_or(Value::Null)}});
                    steps.push(Step::Write(data_event(&err)));
                    return steps;
                }
                None => {}
            }
        }
        let Some(chunk) = data.get(i) else { break };
        steps.push(Step::Write(data_event(chunk)));
        if reply.keepalive_every > 0 && (i + 1) % reply.keepalive_every == 0 {
            steps.push(Step::Write(KEEPALIVE.to_vec()));
        }
    }
    steps.push(Step::Write(b"data: [DONE]\n\n".to_vec()));
    steps
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::script::MockToolCall;

    fn text_of(steps: &[Step]) -> String {
        steps
            .iter()
            .map(|s| match s {
                Step::Write(b) => String::from_utf8_lossy(b).into_owned(),
                Step::Stall { ms, .. } => format!("<stall {ms}>"),
                Step::Reset => "<reset>".to_string(),
            })
            .collect()
    }

    #[test]
    fn pieces_split_by_chars() {
        assert_eq!(pieces("héllo", 2), vec!["hé", "ll", "o"]);
        assert_eq!(pieces("abc", 0), vec!["abc"]);
        assert!(pieces("", 3).is_empty());
    }

    #[test]
    fn interleaved_tool_calls() {
        let reply = StreamReply {
            tool_calls: vec![
                MockToolCall::new("a", "read", r#"{"path":"x"}"#),
                MockToolCall::new("b", "grep", r#"{"q":"yy"}"#),
            ],
            chunk_chars: 5,
            interleave_tool_calls: true,
            ..StreamReply::default()
        };
        let c = chunks(&reply, "m", 0);
        let idx: Vec<u64> =
            c.iter().filter_map(|v| v["choices"][0]["delta"]["tool_calls"][0]["index"].as_u64()).collect();
        assert_eq!(idx, vec![0, 1, 0, 1, 0, 1, 0]);
        // Last two chunks: finish, then usage-only with empty choices.
        assert_eq!(c[c.len() - 2]["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(c[c.len() - 1]["choices"], json!([]));
    }

    #[test]
    fn faults_shape_the_plan() {
        let base = StreamReply { text: "hi".into(), ..StreamReply::default() };
        let full = text_of(&plan(&base, "m", 0));
        assert!(full.ends_with("data: [DONE]\n\n"));
        let p = plan(&base.clone().with_fault(Fault::Reset { after_chunks: 1 }), "m", 0);
        assert_eq!(p.len(), 2);
        assert_eq!(p[1], Step::Reset);
        let t = text_of(&plan(&base.clone().with_fault(Fault::MissingDone), "m", 0));
        assert!(!t.contains("[DONE]") && t.contains("prompt_tokens"));
        let t = text_of(&plan(&base.clone().with_fault(Fault::Eof { after_chunks: 1 }), "m", 0));
        assert_eq!(t.matches("data:").count(), 1);
        let t = text_of(&plan(
            &base.clone().with_fault(Fault::Stall { after_chunks: 99, ms: 5, keepalive_every_ms: 0 }),
            "m",
            0,
        ));
        assert!(t.ends_with("<stall 5>data: [DONE]\n\n"));
        let t = text_of(&plan(&StreamReply { keepalive_every: 1, ..base.clone() }, "m", 0));
        assert_eq!(t.matches(": keep-alive").count(), 4);
    }
}
