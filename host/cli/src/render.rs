//! Rendering session events for a terminal (headless text output and chat).

use std::io::Write;

use wharf_core::events::{Event, EventKind};

/// Renders events as a readable transcript.
#[derive(Default)]
pub struct TextRenderer {
    in_text: bool,
    in_reasoning: bool,
    /// Show reasoning deltas (dimmed).
    pub show_reasoning: bool,
    /// Use ANSI styles (see [`crate::output::color`]).
    pub color: bool,
}

fn one_line(s: &str, max: usize) -> String {
    let flat: String = s.chars().map(|c| if c == '\n' { ' ' } else { c }).collect();
    if flat.chars().count() > max {
        let cut: String = flat.chars().take(max).collect();
        format!("{cut}…")
    } else {
        flat
    }
}

impl TextRenderer {
    /// A renderer; `show_reasoning` prints reasoning deltas (dimmed when
    /// `color`).
    pub fn new(show_reasoning: bool, color: bool) -> Self {
        Self { in_text: false, in_reasoning: false, show_reasoning, color }
    }

    /// Ends a streamed block (and the dimming of reasoning).
    fn end_stream(&mut self, out: &mut dyn Write) {
        if self.in_reasoning && self.color {
            let _ = write!(out, "\x1b[0m");
        }
        if self.in_text || self.in_reasoning {
            let _ = writeln!(out);
        }
        self.in_text = false;
        self.in_reasoning = false;
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
                    let _ = write!(out, "{}", c.text);
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
                let _ = writeln!(out, "⏺ {}({})", c.name, one_line(&c.arguments, 120));
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
                let _ = writeln!(out, "  ⎿ {status}{by}: {}", one_line(&r.content, 160));
            }
            EventKind::ApprovalDecided(_) | EventKind::PolicyDecision(_) => {}
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
                let _ = writeln!(out, "— turn {} ended: {}", t.turn, crate::run_cmd::reason_text(&t.reason));
            }
            _ => {}
        }
    }
}
