//! What the page cannot safely or cheaply do itself: model markdown rendered
//! to sanitised HTML, and unified diffs for `edit`/`write` cards. Both are
//! added to the events the stream sends (`html`, `diff` next to `data`);
//! the log is not changed.

use std::collections::VecDeque;

use serde_json::{Value, json};
use wharf_core::events::{Event, EventKind};
use wharf_core::util::cut_str;

/// Markdown longer than this is rendered up to here (the rest is dropped).
const MAX_MARKDOWN: usize = 256 * 1024;
/// Each side of a diff is cut to this many bytes.
const MAX_DIFF_SIDE: usize = 128 * 1024;
/// A diff longer than this is cut (on a line).
const MAX_DIFF: usize = 64 * 1024;
/// `write` calls remembered until their result (for the previous content).
const MAX_PENDING_WRITES: usize = 32;

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

/// The previous content a `write` result's details may carry.
fn previous_content(details: &Value) -> Option<&str> {
    ["previous", "previous_content", "old_content", "before"].iter().find_map(|k| details.get(*k)?.as_str())
}

/// Per-stream state: `write` calls waiting for their result.
#[derive(Default)]
pub struct Decorator {
    writes: VecDeque<(String, String, String)>,
}

impl Decorator {
    /// The event as the stream sends it: its JSON line, plus `html` for
    /// assistant messages and `diff` for `edit`/`write` calls and results.
    pub fn json(&mut self, ev: &Event) -> Option<String> {
        let extra = match &ev.kind {
            EventKind::AssistantMessage(m) if !m.content.is_empty() => Some(("html", markdown(&m.content))),
            EventKind::ToolCall(c) => call_diff(&c.name, &c.arguments).map(|(path, old, new)| {
                let diff = unified_diff(&path, &old, &new);
                if c.name == "write" {
                    if self.writes.len() >= MAX_PENDING_WRITES {
                        self.writes.pop_front();
                    }
                    self.writes.push_back((c.id.clone(), path, new));
                }
                ("diff", diff)
            }),
            EventKind::ToolResult(r) if r.name == "write" && !r.is_error => {
                let pos = self.writes.iter().position(|(id, _, _)| *id == r.call_id);
                let pending = pos.and_then(|i| self.writes.remove(i));
                let details: Option<Value> = r.details.clone();
                match (pending, details.as_ref().and_then(previous_content)) {
                    (Some((_, path, new)), Some(old)) => Some(("diff", unified_diff(&path, old, &new))),
                    _ => None,
                }
            }
            _ => None,
        };
        let Some((key, value)) = extra else { return ev.to_json_line().ok() };
        let mut v = serde_json::to_value(ev).ok()?;
        if let Some(o) = v.as_object_mut() {
            o.insert(key.into(), json!(value));
        }
        serde_json::to_string(&v).ok()
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
        assert!(!html.contains("href=\"javascript"), "{html}");
        assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;"), "raw HTML shown as text: {html}");
        assert!(html.contains("href=\"https://example.com\""), "{html}");
    }

    #[test]
    fn code_classes_other_than_a_language_are_dropped() {
        let html = markdown("```\" onclick=\"x\nhi\n```");
        assert!(!html.contains("onclick"), "{html}");
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
