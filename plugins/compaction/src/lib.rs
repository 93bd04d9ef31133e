//! `compaction`: writes the summary that replaces older history when the
//! host compacts a session (world `compactor-plugin`).
//!
//! The host picks the range (never splitting a tool call from its result)
//! and calls `summarize`; this component renders the messages as a plain
//! transcript (tool calls and results included, long texts clipped),
//! asks the session's model for a summary through the `model` import (grant
//! `model = true`), and prefixes a header with the counts it covers:
//!
//! ```text
//! Summary of the earlier conversation (12 messages, 5 assistant replies):
//! ```
//!
//! The counts include those of an earlier summary inside the range, so they
//! always describe the whole compacted history (the scripted test model
//! reads them to keep its turn numbering across compactions).
//!
//! Config: `instructions` (extra text for the summary prompt),
//! `max_message_chars` (per-message clip in the transcript, default 4000).

use wharf_sdk::prelude::*;

const DEFAULT_CLIP: usize = 4000;

const PROMPT: &str = "You compact the history of a coding-agent session. Write a faithful, \
dense summary of the transcript you are given so the agent can continue without it: the user's \
goals and constraints, decisions made, files and commands involved (exact paths, names and \
values), results of tool calls that still matter, open problems and next steps. Prefer facts over \
narration; keep identifiers verbatim; omit pleasantries. Do not invent anything.";

struct Compaction;

/// Counts of an earlier summary's header, if `text` holds one.
fn earlier_counts(text: &str) -> Option<(u64, u64)> {
    let start = text.find("Summary of the earlier conversation (")? + "Summary of the earlier conversation (".len();
    let rest = &text[start..];
    let (msgs, rest) = rest.split_once(" messages, ")?;
    let (assistants, _) = rest.split_once(" assistant replies)")?;
    Some((msgs.trim().parse().ok()?, assistants.trim().parse().ok()?))
}

fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut head = max / 2;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - max / 2;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!("{} […{} bytes clipped…] {}", &text[..head], tail - head, &text[tail..])
}

/// The transcript the model summarises, and the counts it covers.
fn transcript(messages: &[Message], clip_at: usize) -> (String, u64, u64) {
    let (mut count, mut assistants) = (0u64, 0u64);
    let mut out = String::new();
    for m in messages {
        let role = match m.role {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool result",
        };
        match earlier_counts(&m.content).filter(|_| m.role == Role::User) {
            Some((c, a)) => {
                count += c;
                assistants += a;
            }
            None => {
                count += 1;
                if m.role == Role::Assistant {
                    assistants += 1;
                }
            }
        }
        out.push_str(&format!("### {role}\n{}\n", clip(&m.content, clip_at)));
        for c in &m.tool_calls {
            out.push_str(&format!("[tool call {} {}]\n", c.name, clip(&c.arguments, clip_at / 4)));
        }
        out.push('\n');
    }
    (out, count, assistants)
}

impl CompactorPlugin for Compaction {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "compaction",
            env!("CARGO_PKG_VERSION"),
            "Summarises older history with the session's model when the context fills up.",
        )
    }

    fn summarize(messages: Vec<Message>, target_tokens: u32) -> Result<String, String> {
        let clip_at = wharf_sdk::config::key::<u64>("max_message_chars")
            .ok()
            .flatten()
            .map_or(DEFAULT_CLIP, |v| v.clamp(200, 1_000_000) as usize);
        let extra = wharf_sdk::config::key::<String>("instructions").ok().flatten().unwrap_or_default();
        let (text, count, assistants) = transcript(&messages, clip_at);
        let system = format!(
            "{PROMPT} Stay under about {target_tokens} tokens.{}{extra}",
            if extra.is_empty() { "" } else { "\n" }
        );
        let request = vec![Message {
            role: Role::User,
            content: format!("Summarise this transcript:\n\n{text}"),
            reasoning: None,
            tool_calls: vec![],
            tool_call_id: None,
        }];
        let summary = wharf_sdk::model::complete(&system, &request, Some(target_tokens.saturating_mul(2)))
            .map_err(|e| wharf_sdk::session::describe(&e))?;
        Ok(format!(
            "Summary of the earlier conversation ({count} messages, {assistants} assistant replies):\n{}",
            summary.trim()
        ))
    }
}

wharf_sdk::export_compactor!(Compaction);

#[cfg(test)]
mod tests {
    use super::*;

    fn m(role: Role, content: &str) -> Message {
        Message { role, content: content.into(), reasoning: None, tool_calls: vec![], tool_call_id: None }
    }

    #[test]
    fn counts_include_earlier_summaries() {
        let earlier = "<compacted-summary>\nSummary of the earlier conversation (7 messages, 3 assistant replies):\nx\n</compacted-summary>";
        let msgs = vec![m(Role::User, earlier), m(Role::Assistant, "a"), m(Role::Tool, "r"), m(Role::User, "u")];
        let (text, count, assistants) = transcript(&msgs, 100);
        assert_eq!((count, assistants), (10, 4));
        assert!(text.contains("### tool result\nr"));
    }

    #[test]
    fn clipping_keeps_head_and_tail() {
        let t = format!("{}{}", "a".repeat(1000), "b".repeat(1000));
        let c = clip(&t, 100);
        assert!(c.starts_with("aaaa") && c.ends_with("bbbb") && c.len() < 200);
        assert_eq!(clip("short", 100), "short");
    }
}
