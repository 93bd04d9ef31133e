//! Markdown for the terminal, rendered line by line as the model streams:
//! headings, lists, quotes, rules and inline styles (emphasis, strong,
//! `code`, links) through `pulldown-cmark`, fenced code blocks highlighted
//! by `syntect` one line at a time (its highlighter keeps state across
//! lines, so an open fence needs no buffering). Without colour the text is
//! passed through untouched.

use std::io::Write;
use std::sync::OnceLock;

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
use syntect::easy::HighlightLines;
use syntect::highlighting::{Theme, ThemeSet};
use syntect::parsing::SyntaxSet;

/// A line longer than this is rendered without waiting for its newline
/// (bounds what is held back).
const MAX_PENDING: usize = 16 * 1024;

const RESET: &str = "\x1b[0m";

/// The bundled syntaxes (Sublime's defaults: Rust, Python, shell, JSON,
/// YAML, C, Go, JavaScript …), loaded once on the first code block.
fn syntaxes() -> &'static SyntaxSet {
    static SET: OnceLock<SyntaxSet> = OnceLock::new();
    SET.get_or_init(SyntaxSet::load_defaults_nonewlines)
}

/// A dark theme that reads on most terminals; `None` if the bundle lacks it.
fn theme() -> Option<&'static Theme> {
    static THEMES: OnceLock<ThemeSet> = OnceLock::new();
    THEMES.get_or_init(ThemeSet::load_defaults).themes.get("base16-ocean.dark")
}

/// An open code fence.
struct Fence {
    marker: char,
    len: usize,
    highlighter: Option<HighlightLines<'static>>,
}

/// Streaming markdown renderer: [`push`](Self::push) chunks as they come,
/// [`finish`](Self::finish) when the message ends.
pub struct Markdown {
    color: bool,
    pending: String,
    fence: Option<Fence>,
}

impl Markdown {
    /// A renderer; without `color` it writes the text as it is.
    pub fn new(color: bool) -> Self {
        Self { color, pending: String::new(), fence: None }
    }

    /// Renders every line of `text` that is complete (plain mode: all of it).
    pub fn push(&mut self, text: &str, out: &mut dyn Write) {
        if !self.color {
            let _ = out.write_all(text.as_bytes());
            return;
        }
        self.pending.push_str(text);
        while let Some(i) = self.pending.find('\n') {
            let line: String = self.pending.drain(..=i).collect();
            let line = self.line(line.trim_end_matches(['\n', '\r']));
            let _ = writeln!(out, "{line}");
        }
        if self.pending.len() > MAX_PENDING {
            let line = std::mem::take(&mut self.pending);
            let line = self.line(&line);
            let _ = writeln!(out, "{line}");
        }
    }

    /// Renders what is left of the message (a last line without newline)
    /// and closes an unterminated fence. Returns whether it wrote a line.
    pub fn finish(&mut self, out: &mut dyn Write) -> bool {
        let wrote = if self.pending.is_empty() {
            false
        } else {
            let rest = std::mem::take(&mut self.pending);
            let line = self.line(&rest);
            let _ = write!(out, "{line}");
            true
        };
        self.fence = None;
        wrote
    }

    /// Whether text is held back waiting for its newline.
    #[cfg(test)]
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// A whole message rendered at once (history, `wharf run`'s replay).
    pub fn render_all(color: bool, text: &str) -> String {
        let mut md = Self::new(color);
        let mut out = Vec::new();
        md.push(text, &mut out);
        md.finish(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// One complete line, styled.
    fn line(&mut self, line: &str) -> String {
        let trimmed = line.trim_start();
        if let Some(fence) = &mut self.fence {
            if is_fence_close(trimmed, fence.marker, fence.len) {
                self.fence = None;
                return format!("\x1b[2m{line}{RESET}");
            }
            let Some(h) = &mut fence.highlighter else {
                return line.to_string();
            };
            return match h.highlight_line(line, syntaxes()) {
                Ok(ranges) => format!("{}{RESET}", syntect::util::as_24_bit_terminal_escaped(&ranges, false)),
                Err(_) => line.to_string(),
            };
        }
        if let Some((marker, len, lang)) = fence_open(trimmed) {
            let highlighter = theme().map(|t| {
                let set = syntaxes();
                let syntax = set
                    .find_syntax_by_token(lang)
                    .or_else(|| set.find_syntax_by_extension(lang))
                    .unwrap_or_else(|| set.find_syntax_plain_text());
                HighlightLines::new(syntax, t)
            });
            self.fence = Some(Fence { marker, len, highlighter });
            return format!("\x1b[2m{line}{RESET}");
        }
        block_line(line)
    }
}

/// `(marker, length, language)` when `line` opens a fenced code block.
fn fence_open(line: &str) -> Option<(char, usize, &str)> {
    let marker = line.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let len = line.chars().take_while(|c| *c == marker).count();
    if len < 3 {
        return None;
    }
    let info = line[len..].trim();
    // A backtick fence's info string cannot hold a backtick.
    if marker == '`' && info.contains('`') {
        return None;
    }
    Some((marker, len, info.split_whitespace().next().unwrap_or("")))
}

fn is_fence_close(line: &str, marker: char, len: usize) -> bool {
    let n = line.chars().take_while(|c| *c == marker).count();
    n >= len && line[n..].trim().is_empty()
}

/// A line outside code: its block marker (heading, item, quote, rule)
/// replaced by a styled one, then the inline styles of the rest.
fn block_line(line: &str) -> String {
    let indent = &line[..line.len() - line.trim_start().len()];
    let rest = line.trim_start();
    if rest.is_empty() {
        return String::new();
    }
    let compact: String = rest.chars().filter(|c| !c.is_whitespace()).collect();
    if compact.len() >= 3 && ["-", "*", "_"].iter().any(|m| compact.chars().all(|c| c.to_string() == *m)) {
        return format!("{indent}\x1b[2m{}{RESET}", "─".repeat(40));
    }
    let hashes = rest.chars().take_while(|c| *c == '#').count();
    if (1..=6).contains(&hashes) && rest[hashes..].starts_with([' ', '\t'])
        || (1..=6).contains(&hashes) && rest.len() == hashes
    {
        let text = rest[hashes..].trim().trim_end_matches('#').trim_end();
        let style = if hashes == 1 { "1;4;35" } else { "1;36" };
        return format!("{indent}{}", inline(text, style));
    }
    if let Some(q) = rest.strip_prefix('>') {
        return format!("{indent}\x1b[2m│{RESET} {}", inline(q.trim_start(), "3"));
    }
    for bullet in ["- ", "* ", "+ "] {
        if let Some(item) = rest.strip_prefix(bullet) {
            let (mark, item) = if let Some(t) = item.strip_prefix("[ ] ") {
                ("☐", t)
            } else if let Some(t) = item.strip_prefix("[x] ").or_else(|| item.strip_prefix("[X] ")) {
                ("☑", t)
            } else {
                ("•", item)
            };
            return format!("{indent}\x1b[33m{mark}{RESET} {}", inline(item, ""));
        }
    }
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    if (1..=9).contains(&digits) && (rest[digits..].starts_with(". ") || rest[digits..].starts_with(") ")) {
        let (num, item) = rest.split_at(digits + 1);
        return format!("{indent}\x1b[33m{num}{RESET} {}", inline(item.trim_start(), ""));
    }
    format!("{indent}{}", inline(rest, ""))
}

/// Inline markdown of one line with `base` (an SGR code, may be empty)
/// under everything. Styles are a stack re-applied after each end, so a
/// closing span never clears the style around it.
fn inline(text: &str, base: &str) -> String {
    let mut out = String::new();
    let mut stack: Vec<&'static str> = Vec::new();
    let mut links: Vec<String> = Vec::new();
    let apply = |out: &mut String, stack: &[&str]| {
        out.push_str(RESET);
        if !base.is_empty() {
            out.push_str(&format!("\x1b[{base}m"));
        }
        for code in stack {
            out.push_str(&format!("\x1b[{code}m"));
        }
    };
    apply(&mut out, &stack);
    for ev in Parser::new_ext(text, Options::ENABLE_STRIKETHROUGH) {
        match ev {
            Event::Text(t) | Event::Html(t) | Event::InlineHtml(t) => out.push_str(&t),
            Event::Code(c) => {
                out.push_str("\x1b[38;5;180m");
                out.push_str(&c);
                apply(&mut out, &stack);
            }
            Event::SoftBreak | Event::HardBreak => out.push(' '),
            Event::Start(tag) => {
                let code = match tag {
                    Tag::Emphasis => "3",
                    Tag::Strong => "1",
                    Tag::Strikethrough => "9",
                    Tag::Link { dest_url, .. } => {
                        links.push(dest_url.to_string());
                        "4;34"
                    }
                    _ => continue,
                };
                stack.push(code);
                apply(&mut out, &stack);
            }
            Event::End(end) => {
                if !matches!(end, TagEnd::Emphasis | TagEnd::Strong | TagEnd::Strikethrough | TagEnd::Link) {
                    continue;
                }
                stack.pop();
                apply(&mut out, &stack);
                if end == TagEnd::Link
                    && let Some(url) = links.pop()
                    && !out.ends_with(url.as_str())
                {
                    out.push_str(&format!("\x1b[2m ({url}){RESET}"));
                    apply(&mut out, &stack);
                }
            }
            _ => {}
        }
    }
    out.push_str(RESET);
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn strip(s: &str) -> String {
        let mut out = String::new();
        let mut chars = s.chars();
        while let Some(c) = chars.next() {
            if c == '\x1b' {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            } else {
                out.push(c);
            }
        }
        out
    }

    const SAMPLE: &str = "# Title\n\nSome *emphasis*, **bold** and `code`.\n\n- one\n- two\n1. first\n\n```rust\nfn main() { let x = 1; }\n```\n[docs](https://example.com)\n";

    #[test]
    fn colour_mode_styles_blocks_and_highlights_code() {
        let out = Markdown::render_all(true, SAMPLE);
        let lines: Vec<&str> = out.lines().collect();
        // The heading loses its hashes and is bold.
        assert!(lines[0].contains("\x1b[1;4;35m") && strip(lines[0]) == "Title", "{:?}", lines[0]);
        assert!(lines[2].contains("\x1b[3memphasis") && lines[2].contains("\x1b[1mbold"), "{:?}", lines[2]);
        assert!(lines[2].contains("\x1b[38;5;180mcode"), "{:?}", lines[2]);
        assert_eq!(strip(lines[2]), "Some emphasis, bold and code.");
        assert_eq!(strip(lines[4]), "• one");
        assert_eq!(strip(lines[6]), "1. first");
        // The code line is highlighted with 24-bit colours, text intact.
        let code = lines.iter().find(|l| strip(l).starts_with("fn main")).unwrap();
        assert!(code.matches("\x1b[38;2;").count() >= 3, "{code:?}");
        assert_eq!(strip(code), "fn main() { let x = 1; }");
        let link = lines.last().unwrap();
        assert_eq!(strip(link), "docs (https://example.com)");
        assert!(link.contains("\x1b[4;34m"));
    }

    #[test]
    fn plain_mode_is_verbatim() {
        assert_eq!(Markdown::render_all(false, SAMPLE), SAMPLE);
        let mut md = Markdown::new(false);
        let mut out = Vec::new();
        md.push("# a", &mut out);
        assert_eq!(out, b"# a");
    }

    #[test]
    fn a_fence_split_across_chunks_renders_like_a_whole_one() {
        let whole = Markdown::render_all(true, SAMPLE);
        // Cut everywhere, including inside the fence markers.
        for size in [1, 2, 3, 5, 7] {
            let mut md = Markdown::new(true);
            let mut out = Vec::new();
            let chars: Vec<char> = SAMPLE.chars().collect();
            for chunk in chars.chunks(size) {
                md.push(&chunk.iter().collect::<String>(), &mut out);
            }
            md.finish(&mut out);
            assert_eq!(String::from_utf8(out).unwrap(), whole, "chunk size {size}");
        }
        // Complete lines come out before the message ends; a partial one waits.
        let mut md = Markdown::new(true);
        let mut out = Vec::new();
        md.push("```py\nx = 1\ny =", &mut out);
        let shown = strip(&String::from_utf8_lossy(&out));
        assert_eq!(shown, "```py\nx = 1\n");
        assert!(md.has_pending());
        md.push(" 2\n```\nafter `it`\n", &mut out);
        let shown = strip(&String::from_utf8_lossy(&out));
        assert_eq!(shown, "```py\nx = 1\ny = 2\n```\nafter it\n");
    }

    #[test]
    fn unterminated_fences_end_with_the_message() {
        let mut md = Markdown::new(true);
        let mut out = Vec::new();
        md.push("```\ncode\n", &mut out);
        md.finish(&mut out);
        out.clear();
        // The next message starts outside code.
        md.push("# Next\n", &mut out);
        assert!(String::from_utf8_lossy(&out).contains("\x1b[1;4;35m"));
    }
}
