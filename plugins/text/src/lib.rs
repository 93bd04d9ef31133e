//! `text`: small read-only text tools, all `parallel`.
//!
//! - `word_count {path}`: lines, words and bytes of a file (like `wc`).
//! - `regex_search {path, pattern, max_matches?}`: matching lines with their
//!   line numbers.
//! - `echo {text}`: returns the text unchanged (used to measure per-call
//!   overhead).
//!
//! Files are read with plain `std::fs`; the host preopens granted
//! directories at their host paths, so an ungranted path fails inside the
//! sandbox and is reported as `NOT_FOUND` / `PERMISSION_DENIED`.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};

use regex::Regex;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use wharf_sdk::prelude::*;

/// Longest line text returned by `regex_search`, in characters.
const MAX_LINE_CHARS: usize = 500;
/// Default and largest `max_matches`.
const DEFAULT_MATCHES: usize = 100;
const MAX_MATCHES: usize = 10_000;

#[derive(Deserialize, JsonSchema)]
struct PathArgs {
    /// File to read: absolute, or relative to the session workspace.
    path: String,
}

#[derive(Deserialize, JsonSchema)]
struct SearchArgs {
    /// File to search: absolute, or relative to the session workspace.
    path: String,
    /// Regular expression (Rust `regex` syntax), matched against each line.
    pattern: String,
    /// Stop after this many matching lines (default 100, at most 10000).
    max_matches: Option<u32>,
}

#[derive(Deserialize, JsonSchema)]
struct EchoArgs {
    /// Text to return unchanged.
    text: String,
}

struct Text;

impl ToolPlugin for Text {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "text",
            env!("CARGO_PKG_VERSION"),
            "Read-only text tools: word counts and regex search over files, and echo.",
        )
        .filesystem(FsAccess::ReadOnly)
    }

    fn tools() -> Vec<ToolSpec> {
        vec![
            ToolSpec::new::<PathArgs>(
                "word_count",
                "Counts the lines, words and bytes of a text file, like `wc`. \
                 Lines are newline characters; words are runs of non-whitespace.",
                ToolMode::Parallel,
            ),
            ToolSpec::new::<SearchArgs>(
                "regex_search",
                "Searches one file for lines matching a regular expression and returns them \
                 as `LINE_NUMBER: text` (1-based). Use it to locate code or text before reading.",
                ToolMode::Parallel,
            ),
            ToolSpec::new::<EchoArgs>("echo", "Returns `text` unchanged.", ToolMode::Parallel),
        ]
    }

    fn call(name: &str, args: Args, ctx: &CallContext) -> ToolResult {
        match name {
            "word_count" => word_count(args.parse()?, ctx),
            "regex_search" => regex_search(args.parse()?, ctx),
            "echo" => {
                let a: EchoArgs = args.parse()?;
                Ok(ToolOutput::text(a.text))
            }
            other => Err(ToolError::unknown_tool(other)),
        }
    }
}

wharf_sdk::export_tool!(Text);

fn open(path: &str, ctx: &CallContext) -> Result<(String, File), ToolError> {
    let resolved = wharf_sdk::path::resolve(ctx.workspace.as_deref(), path)?;
    let shown = resolved.display().to_string();
    let file = File::open(&resolved).map_err(|e| ToolError::io_at(&shown, &e))?;
    match file.metadata() {
        Ok(m) if m.is_dir() => Err(ToolError::new("IS_A_DIRECTORY", format!("{shown} is a directory"))),
        _ => Ok((shown, file)),
    }
}

/// Counts like `wc`: newlines, whitespace-separated words, bytes.
#[derive(Debug, Default, PartialEq, Eq)]
struct Counts {
    lines: u64,
    words: u64,
    bytes: u64,
}

fn count(mut reader: impl Read) -> std::io::Result<Counts> {
    let mut c = Counts::default();
    let mut in_word = false;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        c.bytes += n as u64;
        for &b in &buf[..n] {
            if b == b'\n' {
                c.lines += 1;
            }
            let space = b.is_ascii_whitespace() || b == 0x0b;
            if !space && !in_word {
                c.words += 1;
            }
            in_word = !space;
        }
    }
    Ok(c)
}

fn word_count(a: PathArgs, ctx: &CallContext) -> ToolResult {
    let (shown, file) = open(&a.path, ctx)?;
    let c = count(file).map_err(|e| ToolError::io_at(&shown, &e))?;
    Ok(ToolOutput::text(format!("{} lines, {} words, {} bytes: {shown}", c.lines, c.words, c.bytes))
        .with_details(&json!({"path": shown, "lines": c.lines, "words": c.words, "bytes": c.bytes})))
}

fn truncate_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        None => s.to_string(),
        Some((i, _)) => format!("{}… [line truncated]", &s[..i]),
    }
}

fn regex_search(a: SearchArgs, ctx: &CallContext) -> ToolResult {
    let re = Regex::new(&a.pattern).map_err(|e| ToolError::invalid_argument(format!("invalid pattern: {e}")))?;
    let max = a.max_matches.map_or(DEFAULT_MATCHES, |m| (m as usize).clamp(1, MAX_MATCHES));
    let (shown, file) = open(&a.path, ctx)?;
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    let mut line_no = 0u64;
    let mut hits: Vec<(u64, String)> = Vec::new();
    let mut more = false;
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line).map_err(|e| ToolError::io_at(&shown, &e))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        if re.is_match(text) {
            if hits.len() == max {
                more = true;
                break;
            }
            hits.push((line_no, truncate_chars(text, MAX_LINE_CHARS)));
        }
    }
    let mut out = String::new();
    if hits.is_empty() {
        out.push_str(&format!("no lines match `{}` in {shown}", a.pattern));
    } else {
        for (n, t) in &hits {
            out.push_str(&format!("{n}: {t}\n"));
        }
        if more {
            out.push_str(&format!("[stopped after {max} matches; raise max_matches or narrow the pattern]\n"));
        }
    }
    let details = json!({
        "path": shown,
        "matches": hits.iter().map(|(n, t)| json!({"line": n, "text": t})).collect::<Vec<_>>(),
        "truncated": more,
    });
    Ok(ToolOutput::text(out).with_details(&details))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn counts_like_wc() {
        let c = count(&b"hello world\n  two  lines\nno newline"[..]).unwrap();
        assert_eq!(c, Counts { lines: 2, words: 6, bytes: 35 });
        assert_eq!(count(&b""[..]).unwrap(), Counts::default());
    }

    #[test]
    fn truncates_on_char_boundary() {
        assert_eq!(truncate_chars("héllo", 10), "héllo");
        assert!(truncate_chars("héllo", 2).starts_with("hé…"));
    }
}
