//! Unified diffs of `write` and `edit` results: from the diff the fs plugin
//! puts in the result's details, or else computed from the call's
//! arguments (`old_string` → `new_string`, or a new file's content).

use std::fmt::Write as _;

use serde_json::Value;
use similar::{ChangeTag, TextDiff};

use super::paint;

/// Most bytes of old plus new text diffed here; larger inputs get no diff.
pub const MAX_INPUT: usize = 256 * 1024;

/// A unified diff of `old` → `new` (hunks only, three lines of context),
/// numbering lines from `first_line` (where `old` starts in its file).
/// `None` when the texts are equal or too large to diff.
pub fn unified(old: &str, new: &str, first_line: usize) -> Option<String> {
    if old == new || old.len() + new.len() > MAX_INPUT {
        return None;
    }
    let diff = TextDiff::from_lines(old, new);
    let offset = first_line.saturating_sub(1);
    let mut out = String::new();
    for group in diff.grouped_ops(3) {
        let (Some(first), Some(last)) = (group.first(), group.last()) else {
            continue;
        };
        let (o, n) = (first.old_range().start..last.old_range().end, first.new_range().start..last.new_range().end);
        // An empty side starts at the line before it, as in `diff -u`.
        let start = |r: &std::ops::Range<usize>| if r.is_empty() { r.start + offset } else { r.start + offset + 1 };
        let _ = writeln!(out, "@@ -{},{} +{},{} @@", start(&o), o.len(), start(&n), n.len());
        for op in &group {
            for change in diff.iter_changes(op) {
                let sign = match change.tag() {
                    ChangeTag::Delete => '-',
                    ChangeTag::Insert => '+',
                    ChangeTag::Equal => ' ',
                };
                let line = change.value();
                out.push(sign);
                out.push_str(line.strip_suffix('\n').unwrap_or(line));
                out.push('\n');
            }
        }
    }
    Some(out)
}

/// The diff to show for a finished call of `tool`: the result's
/// `details.diff` when the plugin gave one, else one computed from the
/// arguments (an `edit`'s strings, a `write` that created a file).
pub fn for_result(tool: &str, arguments: &str, details: Option<&Value>) -> Option<String> {
    if let Some(d) = details.and_then(|d| d.get("diff")).and_then(Value::as_str) {
        return (!d.is_empty()).then(|| d.to_string());
    }
    if arguments.len() > MAX_INPUT {
        return None;
    }
    let args: Value = serde_json::from_str(arguments).ok()?;
    let s = |k: &str| args.get(k).and_then(Value::as_str);
    match tool {
        "edit" => {
            let line = details.and_then(|d| d.get("line")).and_then(Value::as_u64).unwrap_or(1);
            unified(s("old_string")?, s("new_string")?, usize::try_from(line).unwrap_or(1))
        }
        "write" if details.and_then(|d| d.get("created")).and_then(Value::as_bool) == Some(true) => {
            unified("", s("content")?, 1)
        }
        _ => None,
    }
}

/// Diff lines ready to print: `-` red, `+` green, `@@` cyan when `color`;
/// at most `max_lines`, then `… K more lines`.
pub fn paint_lines(diff: &str, color: bool, max_lines: usize) -> Vec<String> {
    let total = diff.lines().count();
    let mut out: Vec<String> = diff
        .lines()
        .take(max_lines)
        .map(|l| {
            let l = super::cut_chars(l, 300);
            let code = match l.chars().next() {
                Some('+') if !l.starts_with("+++") => "32",
                Some('-') if !l.starts_with("---") => "31",
                Some('@') => "36",
                _ => "",
            };
            if code.is_empty() { l } else { paint(color, code, &l) }
        })
        .collect();
    if total > max_lines {
        let more = total - max_lines;
        out.push(paint(color, "2", &format!("… {more} more line{}", if more == 1 { "" } else { "s" })));
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn unified_hunks_are_numbered_from_the_edit() {
        let d = unified("a\nb\nc\n", "a\nB\nc\n", 10).unwrap();
        assert_eq!(d, "@@ -10,3 +10,3 @@\n a\n-b\n+B\n c\n");
        let created = unified("", "x\ny\n", 1).unwrap();
        assert_eq!(created, "@@ -0,0 +1,2 @@\n+x\n+y\n");
        assert!(unified("same", "same", 1).is_none());
        assert!(unified(&"x".repeat(MAX_INPUT), "y", 1).is_none());
    }

    #[test]
    fn results_prefer_the_plugins_diff() {
        let details = serde_json::json!({"diff": "@@ -1 +1 @@\n-a\n+b\n"});
        assert_eq!(for_result("write", "{}", Some(&details)).unwrap(), "@@ -1 +1 @@\n-a\n+b\n");
        let args = r#"{"path":"f","old_string":"old line\n","new_string":"new line\n"}"#;
        let d = for_result("edit", args, Some(&serde_json::json!({"line": 4}))).unwrap();
        assert_eq!(d, "@@ -4,1 +4,1 @@\n-old line\n+new line\n");
        let d = for_result("write", r#"{"path":"n","content":"hi\n"}"#, Some(&serde_json::json!({"created": true})));
        assert_eq!(d.unwrap(), "@@ -0,0 +1,1 @@\n+hi\n");
        // An overwrite without the plugin's diff: nothing to compare against.
        assert!(
            for_result("write", r#"{"path":"n","content":"hi"}"#, Some(&serde_json::json!({"created": false})))
                .is_none()
        );
        assert!(for_result("read", r#"{"path":"n"}"#, None).is_none());
    }

    #[test]
    fn painted_lines_are_coloured_and_capped() {
        let lines = paint_lines("@@ -1 +1 @@\n-a\n+b\n c\n", true, 3);
        assert_eq!(lines[0], "\x1b[36m@@ -1 +1 @@\x1b[0m");
        assert_eq!(lines[1], "\x1b[31m-a\x1b[0m");
        assert_eq!(lines[2], "\x1b[32m+b\x1b[0m");
        assert!(lines[3].contains("1 more line"));
        assert_eq!(paint_lines("-a\n+b\n", false, 10), vec!["-a", "+b"]);
    }
}
