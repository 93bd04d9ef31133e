//! Terminal presentation shared by `wharf chat` and `wharf run`: markdown
//! with highlighted code blocks, unified diffs of file edits, one-line tool
//! call summaries and multi-line result previews.

pub mod diff;
pub mod markdown;
pub mod summary;

use std::collections::HashMap;

use wharf_core::events::{ToolCallEvent, ToolResultEvent};
use wharf_core::util::cut_str;

/// Most characters of one preview line before it is cut.
const PREVIEW_LINE_CHARS: usize = 200;

/// The first `max_lines` lines of tool output, each cut to a readable width,
/// then `… K more lines` when there were more. Bytes beyond `max_bytes` are
/// not looked at (a tool result can be large).
pub fn preview(content: &str, max_lines: usize, max_bytes: usize) -> Vec<String> {
    let head = cut_str(content, max_bytes);
    let text = head.trim_end_matches(['\n', '\r']);
    if text.is_empty() {
        return Vec::new();
    }
    let total = text.lines().count();
    let mut out: Vec<String> =
        text.lines().take(max_lines).map(|l| cut_chars(l.trim_end_matches('\r'), PREVIEW_LINE_CHARS)).collect();
    let more = total.saturating_sub(max_lines);
    if more > 0 || head.len() < content.len() {
        let more = if head.len() < content.len() { format!("{more}+") } else { more.to_string() };
        out.push(format!("… {more} more line{}", if more == "1" { "" } else { "s" }));
    }
    out
}

/// Columns of the terminal on stdout; `None` when stdout is not a terminal
/// (or it reports no size).
pub fn terminal_width() -> Option<usize> {
    let mut size = std::mem::MaybeUninit::<libc::winsize>::zeroed();
    // SAFETY: TIOCGWINSZ fills the `winsize` it is given; it is read only
    // when the call succeeded.
    let rc = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, size.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: initialised by the successful call above.
    let cols = unsafe { size.assume_init() }.ws_col;
    (cols > 0).then_some(usize::from(cols))
}

/// `s` cut to `max` characters, with `…` when cut.
pub use wharf_cli_common::output::cut_chars;

/// `s` wrapped in the SGR `code` when `color`.
pub fn paint(color: bool, code: &str, s: &str) -> String {
    if color { format!("\x1b[{code}m{s}\x1b[0m") } else { s.to_string() }
}

/// Lines of tool output shown under a result.
const PREVIEW_LINES: usize = 6;
/// Lines of a diff shown under a `write` or `edit` result.
const DIFF_LINES: usize = 40;
/// Calls remembered while waiting for their results (a model sends a few
/// at a time; more means results were lost, e.g. a cancelled turn).
const MAX_OPEN_CALLS: usize = 256;

/// Formats tool calls and results for a terminal transcript, remembering
/// each call's arguments until its result (to diff an `edit`).
#[derive(Default)]
pub struct Tools {
    open: HashMap<String, (String, String)>,
}

impl Tools {
    /// The call's one-line summary (without the leading mark).
    pub fn call(&mut self, c: &ToolCallEvent) -> String {
        if self.open.len() >= MAX_OPEN_CALLS {
            self.open.clear();
        }
        let args = cut_str(&c.arguments, diff::MAX_INPUT).to_string();
        self.open.insert(c.id.clone(), (c.name.clone(), args));
        summary::summarize(&c.name, &c.arguments)
    }

    /// The result's body lines (already indented), shown under its status
    /// line: a unified diff for a file change, else the first lines of the
    /// output. A one-line output is returned as the status line's tail.
    pub fn result(&mut self, r: &ToolResultEvent, color: bool) -> (String, Vec<String>) {
        let args = self.open.remove(&r.call_id).map(|(_, a)| a).unwrap_or_default();
        let mut lines = preview(&r.content, PREVIEW_LINES, 64 * 1024);
        let diff = if r.is_error { None } else { diff::for_result(&r.name, &args, r.details.as_ref()) };
        if let Some(diff) = diff {
            // The plugin's own message (its first line), then the diff.
            let head = lines.first().cloned().unwrap_or_default();
            let body = diff::paint_lines(&diff, color, DIFF_LINES).into_iter().map(|l| format!("    {l}")).collect();
            return (head, body);
        }
        if lines.len() <= 1 {
            return (lines.pop().unwrap_or_default(), Vec::new());
        }
        (String::new(), lines.into_iter().map(|l| format!("    {}", paint(color, "2", &l))).collect())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn preview_keeps_lines_and_counts_the_rest() {
        let text = "a\nb\nc\nd\ne\n";
        assert_eq!(preview(text, 3, 1 << 20), vec!["a", "b", "c", "… 2 more lines"]);
        assert_eq!(preview("one\n", 3, 1 << 20), vec!["one"]);
        assert_eq!(preview("x\ny\n", 1, 1 << 20), vec!["x", "… 1 more line"]);
        assert!(preview("\n", 3, 100).is_empty());
        // Past the byte cap the count is a lower bound.
        assert_eq!(preview("a\nb\nc\nd", 1, 4), vec!["a", "… 1+ more lines"]);
        assert_eq!(cut_chars("héllo", 2), "hé…");
    }

    fn call(id: &str, name: &str, arguments: &str) -> ToolCallEvent {
        ToolCallEvent { turn: 1, step: 1, id: id.into(), name: name.into(), arguments: arguments.into(), parent: None }
    }

    fn result(id: &str, name: &str, content: &str, details: Option<serde_json::Value>) -> ToolResultEvent {
        ToolResultEvent {
            turn: 1,
            step: 1,
            call_id: id.into(),
            name: name.into(),
            content: content.into(),
            is_error: false,
            error_code: None,
            plugin: None,
            version: None,
            truncated: false,
            original_bytes: None,
            full_content: None,
            duration_ms: None,
            details,
        }
    }

    #[test]
    fn an_edit_result_shows_the_diff_of_its_call() {
        let mut t = Tools::default();
        let args = r#"{"path":"a.rs","old_string":"let x = 1;","new_string":"let x = 2;"}"#;
        assert_eq!(t.call(&call("c1", "edit", args)), "edit a.rs");
        let (head, body) = t.result(
            &result(
                "c1",
                "edit",
                "Edited a.rs: replaced 1 occurrence.\n 3\tlet x = 2;",
                Some(serde_json::json!({"line": 3})),
            ),
            false,
        );
        assert_eq!(head, "Edited a.rs: replaced 1 occurrence.");
        assert_eq!(body, vec!["    @@ -3,1 +3,1 @@", "    -let x = 1;", "    +let x = 2;"]);
        // The call is forgotten once answered.
        assert!(t.open.is_empty());
    }

    #[test]
    fn multi_line_output_stays_multi_line() {
        let mut t = Tools::default();
        t.call(&call("c2", "bash", r#"{"command":"ls"}"#));
        let (head, body) = t.result(&result("c2", "bash", "a\nb\nc\nd\ne\nf\ng\nh\n", None), false);
        assert_eq!(head, "");
        assert_eq!(body.len(), PREVIEW_LINES + 1);
        assert_eq!(body[0], "    a");
        assert_eq!(body[PREVIEW_LINES], "    … 2 more lines");
        let (head, body) = t.result(&result("c3", "bash", "only\n", None), false);
        assert_eq!((head.as_str(), body.len()), ("only", 0));
    }
}
