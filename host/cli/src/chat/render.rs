//! Rendering session events for `wharf chat`.

use std::collections::HashSet;
use std::io::Write;

use serde_json::Value;
use wharf_core::events::{ApprovalOutcome, Event, EventKind};

use crate::run_cmd::reason_text;
use crate::term::Tools;
use crate::term::markdown::Markdown;

use super::one_line;

/// Renders session events for the chat (adapted from `render::TextRenderer`:
/// colour, approvals, plugin reloads, todo lists, history mode): assistant
/// markdown styled as it streams, tool calls as one-line summaries, file
/// changes as diffs.
pub(super) struct Renderer {
    pub(super) in_text: bool,
    pub(super) in_reasoning: bool,
    pub(super) show_reasoning: bool,
    pub(super) color: bool,
    /// Render whole messages instead of chunks (a resumed session's past).
    pub(super) history: bool,
    /// Inbox ids of messages typed in this chat (already on screen).
    pub(super) own_inbox: HashSet<String>,
    /// The streaming assistant message's markdown state.
    md: Markdown,
    /// Whether the last text written ended a line.
    at_line_start: bool,
    tools: Tools,
}

impl Renderer {
    pub(super) fn new(show_reasoning: bool, color: bool) -> Self {
        Self {
            in_text: false,
            in_reasoning: false,
            show_reasoning,
            color,
            history: false,
            own_inbox: HashSet::new(),
            md: Markdown::new(color),
            at_line_start: true,
            tools: Tools::default(),
        }
    }

    fn paint(&self, code: &str, s: &str) -> String {
        if self.color { format!("\x1b[{code}m{s}\x1b[0m") } else { s.to_string() }
    }

    pub(super) fn end_stream(&mut self, out: &mut dyn Write) {
        if self.in_reasoning && self.color {
            let _ = write!(out, "\x1b[0m");
        }
        if self.in_text && self.md.finish(out) {
            self.at_line_start = false;
        }
        if self.in_reasoning || (self.in_text && !self.at_line_start) {
            let _ = writeln!(out);
        }
        self.in_text = false;
        self.in_reasoning = false;
        self.at_line_start = true;
        let _ = out.flush();
    }

    pub(super) fn render(&mut self, ev: &Event, out: &mut dyn Write) {
        match &ev.kind {
            EventKind::UserMessage(m) => {
                let own = m.inbox_id.as_ref().is_some_and(|id| self.own_inbox.contains(id));
                if self.history {
                    self.end_stream(out);
                    let _ = writeln!(out, "{}", self.paint("1", &format!("› {}", m.content)));
                } else if !own {
                    self.end_stream(out);
                    let _ = writeln!(out, "{}", self.paint("2", &format!("↳ {}", one_line(&m.content, 200))));
                }
            }
            EventKind::AssistantChunk(c) if !self.history => {
                if !c.reasoning.is_empty() && self.show_reasoning {
                    if !self.in_reasoning {
                        self.end_stream(out);
                        let _ = write!(out, "{}", if self.color { "\x1b[2m✻ " } else { "✻ " });
                        self.in_reasoning = true;
                    }
                    let _ = write!(out, "{}", c.reasoning);
                }
                if !c.text.is_empty() {
                    if !self.in_text {
                        self.end_stream(out);
                        self.in_text = true;
                    }
                    self.md.push(&c.text, out);
                    // Colour mode writes whole lines only.
                    self.at_line_start = self.color || c.text.ends_with('\n');
                }
                let _ = out.flush();
            }
            EventKind::AssistantMessage(m) => {
                if self.history && !m.content.is_empty() {
                    let text = Markdown::render_all(self.color, &m.content);
                    let _ = writeln!(out, "{}", text.trim_end_matches('\n'));
                }
                self.end_stream(out);
                if m.interrupted {
                    let _ = writeln!(out, "{}", self.paint("33", "[interrupted]"));
                }
            }
            EventKind::ToolCall(c) => {
                self.end_stream(out);
                let summary = self.tools.call(c);
                let _ = writeln!(out, "{} {summary}", self.paint("36", "⏺"));
            }
            EventKind::ToolResult(r) => {
                self.end_stream(out);
                let status = if r.is_error {
                    self.paint("31", &format!("error {}", r.error_code.as_deref().unwrap_or("")))
                } else {
                    self.paint("32", "ok")
                };
                let by = match (&r.plugin, &r.version) {
                    (Some(p), Some(v)) => format!(" [{p}@{}]", v.get(..12).unwrap_or(v)),
                    _ => String::new(),
                };
                let ms = r.duration_ms.map(|d| format!(" {d} ms")).unwrap_or_default();
                let (head, body) = self.tools.result(r, self.color);
                let head = if head.is_empty() { String::new() } else { format!(": {head}") };
                let _ = writeln!(out, "  ⎿ {status}{}{head}", self.paint("2", &format!("{by}{ms}")));
                for line in body {
                    let _ = writeln!(out, "{line}");
                }
            }
            EventKind::ApprovalDecided(d) if !self.history => {
                self.end_stream(out);
                let (mark, what) = match d.outcome {
                    ApprovalOutcome::AllowedOnce => ("✓", "allowed once"),
                    ApprovalOutcome::AllowedForSession => ("✓", "allowed for this session"),
                    ApprovalOutcome::Rejected => ("✗", "rejected"),
                    ApprovalOutcome::Cancelled => ("✗", "cancelled"),
                };
                let note = d.note.as_deref().map(|n| format!(" — {n}")).unwrap_or_default();
                let _ = writeln!(out, "  {}", self.paint("2", &format!("{mark} {what} (by {}){note}", d.by)));
            }
            EventKind::PluginLoaded(p) | EventKind::PluginUnloaded(p) if !self.history => {
                self.end_stream(out);
                let verb = if matches!(ev.kind, EventKind::PluginLoaded(_)) { "loaded" } else { "unloaded" };
                let digest = p.digest.get(..12).unwrap_or(&p.digest);
                let _ = writeln!(out, "{}", self.paint("2", &format!("↻ plugin {} {verb} ({digest})", p.id)));
            }
            EventKind::PluginReloadFailed(p) if !self.history => {
                self.end_stream(out);
                let msg = format!("⚠ plugin {} failed to reload: {}", p.id, p.error.as_deref().unwrap_or(""));
                let _ = writeln!(out, "{}", self.paint("33", &msg));
            }
            EventKind::LlmRetry(r) if !self.history => {
                self.end_stream(out);
                let msg = format!(
                    "↻ model request failed ({}: {}), retry {} in {} ms",
                    r.code.as_str(),
                    r.message,
                    r.attempt,
                    r.delay_ms
                );
                let _ = writeln!(out, "{}", self.paint("33", &msg));
            }
            EventKind::TodoUpdated(t) => {
                self.end_stream(out);
                let _ = writeln!(out, "{}", self.paint("1", "plan:"));
                for line in todo_lines(&t.items) {
                    let _ = writeln!(out, "  {line}");
                }
            }
            EventKind::CompactionSummary(c) => {
                self.end_stream(out);
                let msg = format!("⋯ history compacted (events {}–{})", c.from_seq, c.to_seq);
                let _ = writeln!(out, "{}", self.paint("2", &msg));
            }
            EventKind::TurnEnd(t) => {
                self.end_stream(out);
                if self.history {
                    let _ = writeln!(out, "{}", self.paint("2", &format!("— {}", reason_text(&t.reason))));
                }
            }
            _ => {}
        }
    }
}

/// One line per todo item: `☐`, `◐` (in progress) or `☑`.
fn todo_lines(items: &Value) -> Vec<String> {
    let list = items
        .as_array()
        .or_else(|| items.get("todos").and_then(Value::as_array))
        .or_else(|| items.get("items").and_then(Value::as_array));
    let Some(list) = list else {
        return vec![one_line(&items.to_string(), 200)];
    };
    list.iter()
        .map(|item| {
            let text = match item {
                Value::String(s) => s.clone(),
                _ => ["content", "text", "title", "task"]
                    .iter()
                    .find_map(|k| item.get(*k).and_then(Value::as_str))
                    .map(str::to_string)
                    .unwrap_or_else(|| item.to_string()),
            };
            let status = item.get("status").and_then(Value::as_str).unwrap_or("");
            let done = item.get("done").and_then(Value::as_bool) == Some(true);
            let mark = match status {
                "completed" | "complete" | "done" => "☑",
                "in_progress" | "in-progress" | "active" => "◐",
                _ if done => "☑",
                _ => "☐",
            };
            format!("{mark} {text}")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn todo_items_render() {
        let items =
            serde_json::json!([{"content": "a", "status": "completed"}, {"text": "b", "status": "active"}, "c"]);
        assert_eq!(todo_lines(&items), vec!["☑ a", "◐ b", "☐ c"]);
    }
}
