//! What the page cannot safely or cheaply do itself: model markdown rendered
//! to sanitised HTML, and unified diffs for `edit`/`write` cards. Both are
//! added to the events the stream sends (`html`, `diff` next to `data`);
//! the log is not changed.

use serde_json::Value;
use wharf_core::events::{Event, EventKind};
use wharf_core::util::cut_str;

/// Markdown longer than this is rendered up to here (the rest is dropped).
const MAX_MARKDOWN: usize = 256 * 1024;
/// Each side of a diff is cut to this many bytes.
const MAX_DIFF_SIDE: usize = 128 * 1024;
/// A diff longer than this is cut (on a line).
const MAX_DIFF: usize = 64 * 1024;

/// Renders model markdown to HTML that is safe to insert: raw HTML in the
/// text is shown as text, and the result goes through `ammonia` (no
/// scripts, event handlers, styles, or links but `http`, `https`, `mailto`
/// and relative ones).
pub fn markdown(text: &str) -> String {
    use pulldown_cmark::{Event as Md, Options, Parser, html};
    let text = cut_str(text, MAX_MARKDOWN);
    let opts = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    // Raw HTML becomes text: the model's `<img onerror=…>` is shown, not parsed.
    let events = Parser::new_ext(text, opts).map(|e| match e {
        Md::Html(h) | Md::InlineHtml(h) => Md::Text(h),
        e => e,
    });
    let mut out = String::with_capacity(text.len() + text.len() / 2);
    html::push_html(&mut out, events);
    ammonia::Builder::default()
        .url_schemes(["http", "https", "mailto"].into_iter().collect())
        .link_rel(Some("noopener noreferrer nofollow"))
        .add_tag_attributes("code", ["class"])
        .attribute_filter(|element, attribute, value| {
            // Only the `language-…` class pulldown-cmark puts on code blocks.
            if element == "code" && attribute == "class" {
                return value
                    .strip_prefix("language-")
                    .filter(|l| l.chars().all(|c| c.is_ascii_alphanumeric() || "+-_#.".contains(c)))
                    .map(|_| value.into());
            }
            Some(value.into())
        })
        .clean(&out)
        .to_string()
        // The text of a message is what the model wrote, not the renderer's
        // trailing newline.
        .trim_end()
        .to_string()
}

/// A unified diff of `old` → `new` for `path` (3 lines of context), cut to
/// a bound.
pub fn unified_diff(path: &str, old: &str, new: &str) -> String {
    let (old, new) = (cut_str(old, MAX_DIFF_SIDE), cut_str(new, MAX_DIFF_SIDE));
    let diff = similar::TextDiff::from_lines(old, new);
    let mut out = diff.unified_diff().context_radius(3).header(&format!("a/{path}"), &format!("b/{path}")).to_string();
    if out.len() > MAX_DIFF {
        let cut = cut_str(&out, MAX_DIFF);
        let end = cut.rfind('\n').map_or(cut.len(), |i| i + 1);
        out.truncate(end);
        out.push_str("… (diff cut)\n");
    }
    out
}

/// The file-changing calls a card gets a diff for, from the call's
/// arguments: `edit` (old → new string) and `write` (all added; the result
/// may later bring the previous content).
fn call_diff(name: &str, arguments: &str) -> Option<(String, String, String)> {
    let args: Value = serde_json::from_str(cut_str(arguments, 2 * MAX_DIFF_SIDE + 4096)).ok()?;
    let path = args.get("path").or_else(|| args.get("file_path")).and_then(Value::as_str).unwrap_or("file");
    let path = cut_str(path, 512).to_string();
    let s = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_string);
    match name {
        "edit" => Some((path, s("old_string")?, s("new_string")?)),
        "write" => Some((path, String::new(), s("content")?)),
        _ => None,
    }
}

/// The diff an `edit`/`write` result's details carry (the `fs` component
/// diffs the file's previous content against the new one, hunks only), with
/// a file header, cut to the bound.
fn result_diff(details: &Value) -> Option<String> {
    let hunks = details.get("diff")?.as_str()?;
    let path = details.get("path").and_then(Value::as_str).map_or("file", |p| cut_str(p, 512));
    let mut out = format!("--- a/{path}\n+++ b/{path}\n");
    let cut = cut_str(hunks, MAX_DIFF);
    out.push_str(cut);
    if cut.len() < hunks.len() {
        out.truncate(out.rfind('\n').map_or(out.len(), |i| i + 1));
        out.push_str("… (diff cut)\n");
    } else if !out.ends_with('\n') {
        out.push('\n');
    }
    Some(out)
}

/// Adds what the page shows but cannot compute to events on their way out.
#[derive(Default)]
pub struct Decorator;

impl Decorator {
    /// The event as the stream sends it: its JSON line, plus `html` for
    /// assistant messages, `diff` for `edit`/`write` calls (from the
    /// arguments: old → new string, or the new file all added) and their
    /// results (from the file's previous content, when the details have it),
    /// and `notice` (`NAME reloaded`, `NAME reloaded (dev)`) for a
    /// `plugin/loaded` that replaced another component of the row.
    pub fn json(&self, ev: &Event) -> Option<String> {
        let extra = match &ev.kind {
            EventKind::AssistantMessage(m) if !m.content.is_empty() => Some(("html", markdown(&m.content))),
            EventKind::ToolCall(c) => {
                call_diff(&c.name, &c.arguments).map(|(path, old, new)| ("diff", unified_diff(&path, &old, &new)))
            }
            EventKind::ToolResult(r) if matches!(r.name.as_str(), "edit" | "write") && !r.is_error => {
                r.details.as_ref().and_then(result_diff).map(|d| ("diff", d))
            }
            EventKind::PluginLoaded(p) => p.reload_notice().map(|n| ("notice", n)),
            _ => None,
        };
        let line = ev.to_json_line().ok()?;
        let Some((key, value)) = extra else { return Some(line) };
        // The event's line is one JSON object: the extra member goes before
        // its closing brace, without building the event again as a tree.
        let body = line.strip_suffix('}')?;
        let value = serde_json::to_string(&value).ok()?;
        let mut out = String::with_capacity(line.len() + key.len() + value.len() + 4);
        out.push_str(body);
        if !body.ends_with('{') {
            out.push(',');
        }
        out.push('"');
        out.push_str(key);
        out.push_str("\":");
        out.push_str(&value);
        out.push('}');
        Some(out)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn markdown_renders_and_is_sanitised() {
        let html = markdown(
            "# Title\n\n```rust\nfn main() {}\n```\n\n<img src=x onerror=alert(1)> <script>alert(2)</script>\n\n\
             [x](javascript:alert(1)) [ok](https://example.com) <a href=\"javascript:alert(3)\">y</a>",
        );
        assert!(html.contains("<h1>Title</h1>"), "{html}");
        assert!(html.contains("<pre><code class=\"language-rust\">fn main() {}"), "{html}");
        assert!(
            !html.contains("<img") && !html.contains("<script") && !html.contains("<a href=\"javascript"),
            "{html}"
        );
        // No tag keeps a `javascript:` URL (the escaped raw `<a>` is text).
        let tags: Vec<&str> = html.split('<').skip(1).map(|t| t.split('>').next().unwrap_or("")).collect();
        assert!(tags.iter().all(|t| !t.contains("javascript:")), "{tags:?}");
        assert!(
            html.contains("<a rel=\"noopener noreferrer nofollow\">x</a>"),
            "the javascript: link lost its href: {html}"
        );
        assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;"), "raw HTML shown as text: {html}");
        assert!(html.contains("href=\"https://example.com\""), "{html}");
    }

    #[test]
    fn a_decorated_event_is_its_line_with_one_member_more() {
        let msg: Event = serde_json::from_value(serde_json::json!({"seq": 7, "time": "t", "type": "assistant/message",
            "data": {"turn": 1, "step": 2, "content": "**hi** \"there\" }"}}))
        .unwrap();
        let line = msg.to_json_line().unwrap();
        let out = Decorator.json(&msg).unwrap();
        let v: Value = serde_json::from_str(&out).unwrap();
        let mut plain: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["html"], "<p><strong>hi</strong> \"there\" }</p>", "{out}");
        plain.as_object_mut().unwrap().insert("html".into(), v["html"].clone());
        assert_eq!(v, plain, "every member of the event is kept");
    }

    #[test]
    fn code_classes_other_than_a_language_are_dropped() {
        let html = markdown("```\" onclick=\"x\nhi\n```");
        assert!(!html.contains("onclick"), "{html}");
    }

    #[test]
    fn a_write_result_with_the_previous_content_diff_replaces_the_call_diff() {
        let call: Event = serde_json::from_value(serde_json::json!({"seq": 5, "time": "", "type": "tool/call",
            "data": {"turn": 1, "step": 1, "id": "c1", "name": "write", "arguments": "{\"path\":\"a.txt\",\"content\":\"x\\ny\\n\"}"}}))
        .unwrap();
        let v: Value = serde_json::from_str(&Decorator.json(&call).unwrap()).unwrap();
        assert_eq!(v["diff"], "--- a/a.txt\n+++ b/a.txt\n@@ -0,0 +1,2 @@\n+x\n+y\n", "{v}");
        let result: Event = serde_json::from_value(serde_json::json!({"seq": 6, "time": "", "type": "tool/result",
            "data": {"turn": 1, "step": 1, "call_id": "c1", "name": "write", "content": "ok",
                     "details": {"path": "a.txt", "diff": "@@ -1,2 +1,2 @@\n-x\n+x\n y\n"}}}))
        .unwrap();
        let v: Value = serde_json::from_str(&Decorator.json(&result).unwrap()).unwrap();
        assert_eq!(v["diff"], "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n-x\n+x\n y\n", "{v}");
        assert_eq!(v["data"]["content"], "ok");
    }

    #[test]
    fn diff_is_unified_and_bounded() {
        let d = unified_diff("f.rs", "a\nb\nc\n", "a\nB\nc\n");
        assert!(d.starts_with("--- a/f.rs\n+++ b/f.rs\n@@"), "{d}");
        assert!(d.contains("\n-b\n+B\n"), "{d}");
        let big: String = (0..40_000).map(|i| format!("line {i}\n")).collect();
        let d = unified_diff("big", "", &big);
        assert!(d.len() <= MAX_DIFF + 32 && d.ends_with("(diff cut)\n"), "{}", d.len());
    }
}
