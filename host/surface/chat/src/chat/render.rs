//! Rendering session events for `wharf chat`.

use std::collections::HashSet;
use std::io::Write;
use std::path::Path;

use serde_json::Value;
use wharf_core::approval::ApprovalRequest;
use wharf_core::events::{ApprovalOutcome, Event, EventKind};

use crate::render::reason_text;
use crate::term::markdown::Markdown;
use crate::term::{Tools, paint};

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
    /// The digest of the version of the plugin whose `plugin/reload-failed`
    /// is rendered next that is loaded (set by the chat before rendering it).
    pub(super) serving: Option<String>,
    /// Failed versions already reported (plugin id, digest): a broken file
    /// is retried several times and each retry fails again.
    failed: HashSet<(String, String)>,
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
            serving: None,
            failed: HashSet::new(),
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
                    for image in &m.images {
                        let _ = writeln!(out, "{}", self.paint("1", &format!("  {}", image.placeholder())));
                    }
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
                // A failure of a later version is news again.
                self.failed.retain(|(id, _)| *id != p.id);
                self.end_stream(out);
                let verb = if matches!(ev.kind, EventKind::PluginLoaded(_)) { "loaded" } else { "unloaded" };
                let digest = p.digest.get(..12).unwrap_or(&p.digest);
                let _ = writeln!(out, "{}", self.paint("2", &format!("↻ plugin {} {verb} ({digest})", p.id)));
            }
            EventKind::PluginReloadFailed(p) if !self.history => {
                let serving = self.serving.take();
                if self.failed.len() >= MAX_FAILED {
                    self.failed.clear();
                }
                if !self.failed.insert((p.id.clone(), p.digest.clone())) {
                    return;
                }
                self.end_stream(out);
                let msg = crate::render::reload_failed_notice(
                    p,
                    serving.as_deref(),
                    wharf_cli_common::output::log_file_shown().as_deref(),
                );
                let _ = writeln!(out, "{}", self.paint("33", &format!("⚠ {msg}")));
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
            // A long-running call (a program past its yield window): its
            // state (`wharf_core::cells`).
            EventKind::Unknown { type_name, data } if type_name == wharf_core::cells::CELL_EVENT => {
                self.end_stream(out);
                let field = |k: &str| data.get(k).and_then(|v| v.as_str()).unwrap_or("?").to_string();
                let mut msg = format!("◇ cell {} ({}): {}", field("cell"), field("tool"), field("state"));
                if let Some(code) = data.get("error_code").and_then(|v| v.as_str()) {
                    msg.push_str(&format!(" ({code})"));
                }
                let msg = wharf_core::util::escape_line(wharf_core::util::cut_str(&msg, 512)).into_owned();
                let _ = writeln!(out, "{}", self.paint("36", &msg));
            }
            EventKind::Unknown { type_name, data } if crate::render::question_line(type_name, data).is_some() => {
                self.end_stream(out);
                let line = crate::render::question_line(type_name, data).unwrap_or_default();
                let _ = writeln!(out, "{}", self.paint("35", &line));
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

/// Lines of a diff, command or arguments shown with an approval question.
const APPROVAL_LINES: usize = 40;

/// What an approval question shows, as the web UI does: the call's one-line
/// summary, and below it what would run: the diff of a `write` (against the
/// file in `workspace`, if it exists there) or an `edit`, the whole command
/// of `bash`, else the arguments as JSON.
pub(super) fn approval_text(r: &ApprovalRequest, workspace: &Path, color: bool) -> (String, Vec<String>) {
    let raw = serde_json::to_string(&r.arguments).unwrap_or_default();
    let head = crate::term::summary::summarize(&r.tool, &raw);
    let s = |k: &str| r.arguments.get(k).and_then(Value::as_str);
    let indent = |lines: Vec<String>| lines.into_iter().map(|l| format!("    {l}")).collect::<Vec<_>>();
    let path = s("path").or_else(|| s("file_path"));
    let body = match (r.tool.as_str(), path) {
        ("write", Some(path)) if s("content").is_some() => {
            let new = s("content").unwrap_or_default();
            let old = workspace_file(workspace, path);
            let what = if old.is_some() { "" } else { " (new file)" };
            let mut lines =
                vec![paint(color, "1", &format!("--- a/{path}")), paint(color, "1", &format!("+++ b/{path}{what}"))];
            match crate::term::diff::unified(old.as_deref().unwrap_or(""), new, 1) {
                Some(d) => lines.extend(crate::term::diff::paint_lines(&d, color, APPROVAL_LINES)),
                None if old.as_deref() == Some(new) => lines.push("(the file already has this content)".into()),
                None => lines.push(format!("({} bytes: too large to diff here)", new.len())),
            }
            indent(lines)
        }
        ("edit", Some(path)) if s("old_string").is_some() && s("new_string").is_some() => {
            let (old, new) = (s("old_string").unwrap_or_default(), s("new_string").unwrap_or_default());
            // Number the hunk from where the text is in the file now.
            let line = workspace_file(workspace, path)
                .and_then(|text| text.find(old).map(|i| text[..i].matches('\n').count() + 1))
                .unwrap_or(1);
            let all = r.arguments.get("replace_all").and_then(Value::as_bool) == Some(true);
            let what = if all { " (every occurrence)" } else { "" };
            let mut lines =
                vec![paint(color, "1", &format!("--- a/{path}")), paint(color, "1", &format!("+++ b/{path}{what}"))];
            match crate::term::diff::unified(old, new, line) {
                Some(d) => lines.extend(crate::term::diff::paint_lines(&d, color, APPROVAL_LINES)),
                None => lines.push("(no change)".into()),
            }
            indent(lines)
        }
        ("bash", _) if s("command").is_some() => {
            let command = s("command").unwrap_or_default();
            let mut lines: Vec<String> = command
                .lines()
                .take(APPROVAL_LINES)
                .enumerate()
                .map(|(i, l)| format!("{} {}", if i == 0 { "$" } else { " " }, crate::term::cut_chars(l, 300)))
                .collect();
            let more = command.lines().count().saturating_sub(APPROVAL_LINES);
            if more > 0 {
                lines.push(paint(color, "2", &format!("  … {more} more lines")));
            }
            for k in ["cwd", "workdir", "timeout", "timeout_ms"] {
                if let Some(v) = r.arguments.get(k).filter(|v| !v.is_null()) {
                    lines.push(paint(
                        color,
                        "2",
                        &format!("  ({k}: {})", v.as_str().map_or_else(|| v.to_string(), str::to_string)),
                    ));
                }
            }
            if r.arguments.get("run_in_background").and_then(Value::as_bool) == Some(true) {
                lines.push(paint(color, "2", "  (in the background)"));
            }
            indent(lines)
        }
        _ => {
            let pretty = serde_json::to_string_pretty(&r.arguments).unwrap_or_default();
            indent(crate::term::preview(&pretty, APPROVAL_LINES, 64 * 1024))
        }
    };
    (head, body)
}

/// The text of `path` (relative to `workspace` or absolute) when it is a
/// readable file inside the workspace and small enough to diff.
fn workspace_file(workspace: &Path, path: &str) -> Option<String> {
    let root = std::fs::canonicalize(workspace).ok()?;
    let file = std::fs::canonicalize(root.join(path)).ok()?;
    let meta = std::fs::metadata(&file).ok()?;
    if !file.starts_with(&root) || !meta.is_file() || meta.len() > crate::term::diff::MAX_INPUT as u64 {
        return None;
    }
    std::fs::read_to_string(file).ok()
}

/// Failed versions remembered for [`Renderer::failed`].
const MAX_FAILED: usize = 1024;

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

    fn request(tool: &str, arguments: Value) -> ApprovalRequest {
        ApprovalRequest {
            session_id: "s".into(),
            call_id: "c".into(),
            tool: tool.into(),
            arguments,
            reason: "r".into(),
        }
    }

    #[test]
    fn approvals_show_the_diff_or_the_command() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("notes.md"), "# Notes\nold line\n").unwrap();
        let w = request("write", serde_json::json!({"path": "notes.md", "content": "# Notes\nnew line\n"}));
        let (head, body) = approval_text(&w, ws.path(), false);
        assert_eq!(head, "write notes.md (2 lines)");
        assert_eq!(
            body,
            [
                "    --- a/notes.md",
                "    +++ b/notes.md",
                "    @@ -1,2 +1,2 @@",
                "     # Notes",
                "    -old line",
                "    +new line"
            ]
        );
        let w = request("write", serde_json::json!({"path": "new.md", "content": "hi\n"}));
        let (_, body) = approval_text(&w, ws.path(), false);
        assert_eq!(body, ["    --- a/new.md", "    +++ b/new.md (new file)", "    @@ -0,0 +1,1 @@", "    +hi"]);
        // Outside the workspace nothing is read: all of it is new.
        let w = request("write", serde_json::json!({"path": "../x", "content": "a\n"}));
        assert!(approval_text(&w, ws.path(), false).1.iter().any(|l| l.contains("(new file)")));
        let e =
            request("edit", serde_json::json!({"path": "notes.md", "old_string": "old line", "new_string": "edited"}));
        let (_, body) = approval_text(&e, ws.path(), false);
        assert_eq!(&body[2..], ["    @@ -2,1 +2,1 @@", "    -old line", "    +edited"]);
        let b = request("bash", serde_json::json!({"command": "cargo test\nrm -rf target"}));
        let (head, body) = approval_text(&b, ws.path(), false);
        assert_eq!(head, "bash: cargo test (+1 lines)");
        assert_eq!(body, ["    $ cargo test", "      rm -rf target"]);
        let o = request("fetch", serde_json::json!({"url": "https://example.com"}));
        let (_, body) = approval_text(&o, ws.path(), false);
        assert!(body.iter().any(|l| l.contains("\"url\": \"https://example.com\"")), "{body:?}");
    }

    fn failed(id: &str, digest: &str) -> Event {
        let change = wharf_core::events::PluginChange {
            id: id.into(),
            digest: digest.into(),
            kinds: Vec::new(),
            error: Some("invalid component: failed to parse\nmore detail".into()),
            config: None,
            generation: None,
            fail_closed: None,
            coalesced: None,
            ..Default::default()
        };
        Event { seq: 1, time: String::new(), ignorable: false, kind: EventKind::PluginReloadFailed(change) }
    }

    #[test]
    fn a_failed_version_is_reported_once() {
        let mut r = Renderer::new(false, false);
        let mut out = Vec::new();
        for _ in 0..6 {
            r.serving = Some("0123456789abcdef".into());
            r.render(&failed("word_count", "fedcba9876543210"), &mut out);
        }
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "⚠ word_count: new version fedcba987654 failed to load (invalid component: failed to parse); \
             the previous version 0123456789ab keeps serving\n"
        );
        // Another broken version is news.
        let mut out = Vec::new();
        r.render(&failed("word_count", "another"), &mut out);
        assert!(String::from_utf8(out).unwrap().contains("failed to load"));
    }

    #[test]
    fn todo_items_render() {
        let items =
            serde_json::json!([{"content": "a", "status": "completed"}, {"text": "b", "status": "active"}, "c"]);
        assert_eq!(todo_lines(&items), vec!["☑ a", "◐ b", "☐ c"]);
    }
}
