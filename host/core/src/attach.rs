//! `@path` attachments in a user prompt.
//!
//! A token `@some/file.rs` or `@"path with spaces"` in a user message asks
//! the host to attach that file. The agent turns the attachments of the
//! messages it claims into calls of the tool the host names
//! ([`AttachTool`], e.g. a file-reading tool), in a step of their own, before
//! the model is asked anything, so the normal tool pipeline applies (grants,
//! policies, approvals, hooks, output caps) and the model sees the content as
//! those calls' results. A denied or missing path is an error result. The
//! core knows no tool: without an [`AttachTool`] nothing is attached.
//!
//! The rule for what is an attachment: `@` at the start of the text or after
//! whitespace or an opening bracket (so never inside an e-mail address),
//! outside backtick code (inline or fenced), followed by either a quoted
//! path, or a path that exists relative to the workspace, or a token that
//! looks like a file path (it contains `/`, or a `.` after its first
//! character). Trailing sentence punctuation (`.,;:!?)`) is not part of the
//! path. At most [`MAX_ATTACHMENTS`] per message; duplicates count once.

use std::path::Path;

use crate::plugin::ToolCall;

/// Attachments taken from one message; later ones are ignored.
pub const MAX_ATTACHMENTS: usize = 8;

/// Longest path (bytes) an attachment may name.
pub const MAX_PATH_BYTES: usize = 4096;

/// Prefix of the ids of the calls attachments become.
pub const CALL_ID_PREFIX: &str = "attach-";

/// The tool attachments become calls of, as the host configures it: the
/// tool's name and the name of its argument that takes the path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachTool {
    /// The tool to call (registered by some plugin).
    pub tool: String,
    /// The argument of that tool that takes the attached path.
    pub path_argument: String,
}

/// The attachments of `text`, in order, without duplicates, at most
/// [`MAX_ATTACHMENTS`]. `workspace` resolves relative paths for the
/// existence test.
pub fn find(text: &str, workspace: Option<&Path>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    let mut in_code = false;
    while i < chars.len() && out.len() < MAX_ATTACHMENTS {
        let c = chars[i];
        if c == '`' {
            // A run of backticks opens or closes code (fences included).
            while i < chars.len() && chars[i] == '`' {
                i += 1;
            }
            in_code = !in_code;
            continue;
        }
        let word_start = i == 0 || matches!(chars[i - 1], ' ' | '\t' | '\n' | '\r' | '(' | '[' | '{');
        if c != '@' || in_code || !word_start {
            i += 1;
            continue;
        }
        i += 1;
        let (token, quoted) = if chars.get(i) == Some(&'"') {
            let start = i + 1;
            let Some(len) = chars[start..].iter().position(|&c| c == '"' || c == '\n') else {
                break;
            };
            i = start + len + 1;
            if chars[start + len] != '"' {
                continue;
            }
            (chars[start..start + len].iter().collect::<String>(), true)
        } else {
            let start = i;
            while i < chars.len() && !chars[i].is_whitespace() && !matches!(chars[i], '`' | '"' | '\'' | '<' | '>') {
                i += 1;
            }
            let mut t: String = chars[start..i].iter().collect();
            while t.ends_with(['.', ',', ';', ':', '!', '?', ')', ']', '}']) {
                t.pop();
            }
            (t, false)
        };
        if token.is_empty() || token.len() > MAX_PATH_BYTES || out.contains(&token) {
            continue;
        }
        if quoted || looks_like_path(&token) || exists(&token, workspace) {
            out.push(token);
        }
    }
    out
}

fn looks_like_path(t: &str) -> bool {
    t.contains('/') || t.char_indices().any(|(i, c)| c == '.' && i > 0)
}

fn exists(t: &str, workspace: Option<&Path>) -> bool {
    let p = Path::new(t);
    if p.is_absolute() {
        return p.exists();
    }
    workspace.is_some_and(|w| w.join(p).exists())
}

/// The calls of `tool` that attach `paths`; ids are unique per turn
/// (`attach-<turn>-<n>`).
pub fn calls(tool: &AttachTool, paths: &[String], turn: u64) -> Vec<ToolCall> {
    paths
        .iter()
        .enumerate()
        .map(|(n, p)| {
            let mut args = serde_json::Map::new();
            args.insert(tool.path_argument.clone(), serde_json::Value::String(p.clone()));
            ToolCall {
                id: format!("{CALL_ID_PREFIX}{turn}-{}", n + 1),
                name: tool.tool.clone(),
                arguments: serde_json::Value::Object(args).to_string(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn attach_finds_paths_at_word_starts() {
        let got = find("look at @src/main.rs and @README.md, then (@a/b.txt).", None);
        assert_eq!(got, vec!["src/main.rs", "README.md", "a/b.txt"]);
    }

    #[test]
    fn attach_quoted_path_with_spaces() {
        assert_eq!(find(r#"see @"my notes/plan one.md" please"#, None), vec!["my notes/plan one.md"]);
        // An unterminated quote on its line is not an attachment.
        assert!(find("see @\"broken\nline\"", None).is_empty());
    }

    #[test]
    fn attach_ignores_emails_code_and_plain_words() {
        assert!(find("mail me at bob@example.com", None).is_empty());
        assert!(find("use `@Override` or ```\n@x/y.rs\n```", None).is_empty());
        assert!(find("ping @alice about it", None).is_empty());
        // The same word is an attachment when it exists in the workspace.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("alice"), "x").unwrap();
        assert_eq!(find("ping @alice about it", Some(dir.path())), vec!["alice"]);
    }

    #[test]
    fn attach_is_bounded_and_deduplicated() {
        let text: String = (0..20).map(|i| format!("@f{i}.txt @f{i}.txt ")).collect();
        let got = find(&text, None);
        assert_eq!(got.len(), MAX_ATTACHMENTS);
        assert_eq!(got[0], "f0.txt");
        assert_eq!(got[1], "f1.txt");
        let long = format!("@{}.rs", "a".repeat(MAX_PATH_BYTES));
        assert!(find(&long, None).is_empty());
    }

    #[test]
    fn attach_calls_are_calls_of_the_configured_tool() {
        let tool = AttachTool { tool: "open_file".into(), path_argument: "file".into() };
        let c = calls(&tool, &["a b.md".to_string()], 3);
        assert_eq!(c[0].id, "attach-3-1");
        assert_eq!(c[0].name, "open_file");
        let v: serde_json::Value = serde_json::from_str(&c[0].arguments).unwrap();
        assert_eq!(v, serde_json::json!({ "file": "a b.md" }));
    }
}
