//! One-line summaries of tool calls (`read README.md`, `bash: cargo test`)
//! instead of their raw JSON arguments.

use serde_json::{Map, Value};

use super::cut_chars;

/// Most characters of a summary.
const MAX: usize = 160;

/// A one-line summary of a call of tool `name` with the model's raw
/// `arguments` text. Unknown tools get `name key=value …`; arguments that
/// are not a JSON object are shown cut.
pub fn summarize(name: &str, arguments: &str) -> String {
    let args = match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(m)) => m,
        Ok(Value::Null) | Err(_) if arguments.trim().is_empty() => Map::new(),
        _ => return cut_chars(&flat(&format!("{name} {arguments}")), MAX),
    };
    let s = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_string);
    let quoted = |k: &str| s(k).map(|v| format!("\"{v}\""));
    let text = match (name, s("path")) {
        ("read", Some(p)) => {
            let from = args.get("offset").and_then(Value::as_u64);
            let limit = args.get("limit").and_then(Value::as_u64);
            match (from, limit) {
                (None, None) => format!("read {p}"),
                (f, l) => {
                    let f = f.unwrap_or(1);
                    let to = l.map(|l| (f + l).saturating_sub(1).to_string()).unwrap_or_default();
                    format!("read {p}:{f}-{to}")
                }
            }
        }
        ("write", Some(p)) => match s("content") {
            Some(c) => format!("write {p} ({} lines)", c.lines().count()),
            None => format!("write {p}"),
        },
        ("edit", Some(p)) => {
            let all = args.get("replace_all").and_then(Value::as_bool) == Some(true);
            format!("edit {p}{}", if all { " (all)" } else { "" })
        }
        ("list", p) => format!("list {}", p.unwrap_or_else(|| ".".into())),
        ("grep", p) => {
            let mut t = format!("grep {}", quoted("pattern").unwrap_or_default());
            if let Some(p) = p {
                t.push(' ');
                t.push_str(&p);
            }
            if let Some(g) = s("glob") {
                t.push_str(&format!(" ({g})"));
            }
            t
        }
        ("glob", p) => {
            let pat = s("pattern").unwrap_or_default();
            match p {
                Some(p) => format!("glob {pat} in {p}"),
                None => format!("glob {pat}"),
            }
        }
        ("bash", _) if s("command").is_some() => {
            let cmd = s("command").unwrap_or_default();
            let mut lines = cmd.lines();
            let first = lines.next().unwrap_or("");
            let more = lines.count();
            let bg = if args.get("run_in_background").and_then(Value::as_bool) == Some(true) { " &" } else { "" };
            let extra = if more > 0 { format!(" (+{more} lines)") } else { String::new() };
            format!("bash: {first}{bg}{extra}")
        }
        ("web_fetch", _) if s("url").is_some() => format!("web_fetch {}", s("url").unwrap_or_default()),
        ("web_search", _) if s("query").is_some() => format!("web_search {}", quoted("query").unwrap_or_default()),
        ("todo_write", _) => {
            let n = args.get("todos").and_then(Value::as_array).map_or(0, Vec::len);
            format!("todo_write ({n} item{})", if n == 1 { "" } else { "s" })
        }
        ("subagent", _) if s("task").is_some() => format!("subagent: {}", s("task").unwrap_or_default()),
        ("skill", _) if s("name").is_some() => format!("skill {}", s("name").unwrap_or_default()),
        _ => fallback(&display_name(name), &args),
    };
    cut_chars(&flat(&text), MAX)
}

/// `mcp__SERVER__TOOL` shown as `SERVER/TOOL`; other names as they are.
pub fn display_name(name: &str) -> String {
    match name.strip_prefix(wharf_harness::mcp::TOOL_PREFIX).and_then(|rest| rest.split_once("__")) {
        Some((server, tool)) => format!("{server}/{tool}"),
        None => name.to_string(),
    }
}

/// `name key=value …` with strings unquoted when they have no space and
/// nested values as compact JSON.
fn fallback(name: &str, args: &Map<String, Value>) -> String {
    let mut out = name.to_string();
    for (k, v) in args {
        let v = match v {
            Value::String(s) if !s.is_empty() && !s.contains(char::is_whitespace) => s.clone(),
            other => other.to_string(),
        };
        out.push_str(&format!(" {k}={}", cut_chars(&v, 60)));
        if out.len() > MAX * 2 {
            break;
        }
    }
    out
}

/// Newlines and tabs as spaces: a summary is one line.
fn flat(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn known_tools_read_like_commands() {
        assert_eq!(summarize("read", r#"{"path":"README.md"}"#), "read README.md");
        assert_eq!(summarize("read", r#"{"path":"a.rs","offset":10,"limit":5}"#), "read a.rs:10-14");
        assert_eq!(summarize("bash", r#"{"command":"cargo test"}"#), "bash: cargo test");
        assert_eq!(summarize("bash", r#"{"command":"cd x\nmake\nmake install"}"#), "bash: cd x (+2 lines)");
        assert_eq!(summarize("grep", r#"{"pattern":"foo","path":"src/"}"#), "grep \"foo\" src/");
        assert_eq!(summarize("glob", r#"{"pattern":"**/*.rs"}"#), "glob **/*.rs");
        assert_eq!(summarize("web_fetch", r#"{"url":"https://example.com/a"}"#), "web_fetch https://example.com/a");
        assert_eq!(summarize("todo_write", r#"{"todos":[{},{},{}]}"#), "todo_write (3 items)");
        assert_eq!(summarize("write", r#"{"path":"a.txt","content":"x\ny\n"}"#), "write a.txt (2 lines)");
        assert_eq!(summarize("edit", r#"{"path":"a.txt","old_string":"x","new_string":"y"}"#), "edit a.txt");
        assert_eq!(summarize("list", "{}"), "list .");
        assert_eq!(summarize("list", ""), "list .");
    }

    #[test]
    fn mcp_and_unknown_tools_are_compact() {
        assert_eq!(summarize("mcp__files__read_text", r#"{"uri":"file:///a"}"#), "files/read_text uri=file:///a");
        assert_eq!(
            summarize("frob", r#"{"deep":{"a":[1]},"n":3,"what":"two words"}"#),
            "frob deep={\"a\":[1]} n=3 what=\"two words\""
        );
        let long = format!(r#"{{"text":"{}"}}"#, "x".repeat(500));
        let s = summarize("frob", &long);
        assert!(s.chars().count() <= MAX + 1 && s.ends_with('…'), "{s}");
        assert_eq!(summarize("frob", "not json\nat all"), "frob not json at all");
    }
}
