//! Rendering session events for a terminal (headless text output and chat).

use std::io::Write;

use wharf_core::events::{Event, EventKind, StopReason};

use crate::term::Tools;
use crate::term::markdown::Markdown;

/// Renders events as a readable transcript: assistant markdown (styled
/// when `color`, verbatim otherwise), tool calls as one-line summaries,
/// results as multi-line previews or diffs.
pub struct TextRenderer {
    in_text: bool,
    in_reasoning: bool,
    md: Markdown,
    at_line_start: bool,
    tools: Tools,
    /// Show reasoning deltas (dimmed).
    pub show_reasoning: bool,
    /// Use ANSI styles (see [`wharf_cli_common::output::color`]).
    pub color: bool,
}

impl TextRenderer {
    /// A renderer; `show_reasoning` prints reasoning deltas (dimmed when
    /// `color`).
    pub fn new(show_reasoning: bool, color: bool) -> Self {
        Self {
            in_text: false,
            in_reasoning: false,
            md: Markdown::new(color),
            at_line_start: true,
            tools: Tools::default(),
            show_reasoning,
            color,
        }
    }

    /// Ends a streamed block (and the dimming of reasoning).
    fn end_stream(&mut self, out: &mut dyn Write) {
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
    }

    /// Writes one event.
    pub fn render(&mut self, ev: &Event, out: &mut dyn Write) {
        match &ev.kind {
            EventKind::AssistantChunk(c) => {
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
                self.end_stream(out);
                if m.interrupted {
                    let _ = writeln!(out, "[interrupted]");
                }
            }
            EventKind::ToolCall(c) => {
                self.end_stream(out);
                let _ = writeln!(out, "⏺ {}", self.tools.call(c));
            }
            EventKind::ToolResult(r) => {
                self.end_stream(out);
                let status = if r.is_error {
                    format!("error {}", r.error_code.as_deref().unwrap_or(""))
                } else {
                    "ok".to_string()
                };
                let by = match (&r.plugin, &r.version) {
                    (Some(p), Some(v)) => format!(" [{p}@{}]", v.get(..12).unwrap_or(v)),
                    _ => String::new(),
                };
                let (head, body) = self.tools.result(r, self.color);
                let head = if head.is_empty() { String::new() } else { format!(": {head}") };
                let _ = writeln!(out, "  ⎿ {status}{by}{head}");
                for line in body {
                    let _ = writeln!(out, "{line}");
                }
            }
            EventKind::ApprovalDecided(_) | EventKind::PolicyDecision(_) => {}
            EventKind::Unknown { type_name, data } if question_line(type_name, data).is_some() => {
                self.end_stream(out);
                let _ = writeln!(out, "{}", question_line(type_name, data).unwrap_or_default());
            }
            EventKind::PluginReloadFailed(p) => {
                self.end_stream(out);
                let _ = writeln!(out, "⚠ plugin {} failed to reload: {}", p.id, p.error.as_deref().unwrap_or(""));
            }
            EventKind::LlmRetry(r) => {
                self.end_stream(out);
                let _ = writeln!(
                    out,
                    "↻ model request failed ({}: {}), retry {} in {} ms",
                    r.code.as_str(),
                    r.message,
                    r.attempt,
                    r.delay_ms
                );
            }
            EventKind::TurnEnd(t) => {
                self.end_stream(out);
                let _ = writeln!(out, "— turn {} ended: {}", t.turn, reason_text(&t.reason));
            }
            _ => {}
        }
    }
}

pub use wharf_cli_common::output::reload_failed_notice;

/// One line for a logged `question/asked` or `question/answered`
/// ([`wharf_core::question`]); `None` for other event types. Bounded and
/// escaped.
pub fn question_line(type_name: &str, data: &serde_json::Value) -> Option<String> {
    use wharf_core::question::{ANSWERED_EVENT, ASKED_EVENT};
    let field = |k: &str| data.get(k).and_then(|v| v.as_str()).unwrap_or("").to_string();
    let line = if type_name == ASKED_EVENT {
        let names: Vec<&str> = data["schema"]["properties"]
            .as_object()
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default();
        format!("? {} asks: {} [{}]", field("source"), field("message"), names.join(", "))
    } else if type_name == ANSWERED_EVENT {
        let mut l = format!("  ↳ {} (by {})", field("action"), field("by"));
        if let Some(c) = data.get("content") {
            l.push_str(&format!(": {c}"));
        }
        if let Some(n) = data.get("note").and_then(|v| v.as_str()) {
            l.push_str(&format!(" — {n}"));
        }
        l
    } else {
        return None;
    };
    Some(wharf_core::util::escape_line(wharf_core::util::cut_str(&line, 1024)).into_owned())
}

/// A stop reason for humans.
pub fn reason_text(r: &StopReason) -> String {
    match r {
        StopReason::Completed => "completed".into(),
        StopReason::MaxSteps => "max_steps".into(),
        StopReason::Cancelled => "cancelled".into(),
        StopReason::Blocked { message } => format!("blocked: {message}"),
        StopReason::Error { code, message } => format!("error {code}: {message}"),
        StopReason::MaxTokens => "max_tokens".into(),
        StopReason::Interrupted => "interrupted".into(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use wharf_core::events::{AssistantChunk, ToolCallEvent, ToolResultEvent};

    fn ev(kind: EventKind) -> Event {
        Event { seq: 1, time: String::new(), ignorable: false, kind }
    }

    fn chunk(text: &str) -> Event {
        ev(EventKind::AssistantChunk(AssistantChunk { turn: 1, step: 1, text: text.into(), reasoning: String::new() }))
    }

    fn transcript(color: bool) -> String {
        let mut r = TextRenderer::new(false, color);
        let mut out = Vec::new();
        for e in [
            chunk("# Pl"),
            chunk("an\n```sh\nls\n"),
            chunk("```\ndone"),
            ev(EventKind::ToolCall(ToolCallEvent {
                turn: 1,
                step: 1,
                id: "c".into(),
                name: "edit".into(),
                arguments: r#"{"path":"f.txt","old_string":"old\n","new_string":"new\n"}"#.into(),
                parent: None,
            })),
            ev(EventKind::ToolResult(ToolResultEvent {
                turn: 1,
                step: 1,
                call_id: "c".into(),
                name: "edit".into(),
                content: "Edited f.txt: replaced 1 occurrence.".into(),
                is_error: false,
                error_code: None,
                plugin: None,
                version: None,
                truncated: false,
                original_bytes: None,
                full_content: None,
                duration_ms: None,
                details: Some(serde_json::json!({"line": 2})),
            })),
        ] {
            r.render(&e, &mut out);
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn run_output_summarises_calls_and_diffs_edits() {
        let plain = transcript(false);
        assert_eq!(
            plain,
            "# Plan\n```sh\nls\n```\ndone\n⏺ edit f.txt\n  ⎿ ok: Edited f.txt: replaced 1 occurrence.\n    @@ -2,1 +2,1 @@\n    -old\n    +new\n"
        );
        let color = transcript(true);
        assert!(color.contains("\x1b[1;4;35mPlan"), "{color:?}");
        assert!(color.contains("\x1b[31m-old\x1b[0m") && color.contains("\x1b[32m+new\x1b[0m"), "{color:?}");
        assert!(!color.contains("# Plan"));
    }
}
