//! Markdown for the terminal, rendered line by line as the model streams:
//! headings, lists, quotes, rules and inline styles (emphasis, strong,
//! `code`, links) through `pulldown-cmark`, fenced code blocks highlighted
//! by `syntect` one line at a time (its highlighter keeps state across
//! lines, so an open fence needs no buffering). Blank lines between blocks
//! are kept; text outside code is wrapped at the terminal's width on word
//! boundaries (continuation rows indented under the item or quote they
//! belong to; a word wider than a row is left whole, code is not wrapped).
//! Without colour the text is passed through untouched.

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

/// Narrower than this, text is not wrapped (rows would hold a word or two).
const MIN_WRAP: usize = 20;

/// Width of a horizontal rule, at most.
const RULE: usize = 40;

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
    /// Columns to wrap at; `None`: the terminal's, asked at every line (it
    /// may be resized). Fewer than [`MIN_WRAP`]: no wrapping.
    width: Option<usize>,
}

impl Markdown {
    /// A renderer; without `color` it writes the text as it is. Text is
    /// wrapped at the width of the terminal on stdout (if it is one).
    pub fn new(color: bool) -> Self {
        Self { color, pending: String::new(), fence: None, width: None }
    }

    /// A renderer wrapping at `columns` (`None`: not wrapping).
    #[cfg(test)]
    pub fn with_width(color: bool, columns: Option<usize>) -> Self {
        Self { width: Some(columns.unwrap_or(0)), ..Self::new(color) }
    }

    fn columns(&self) -> Option<usize> {
        self.width.or_else(super::terminal_width).filter(|&w| w >= MIN_WRAP)
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
        Self::new(color).render_whole(text)
    }

    /// `text` rendered as one whole message.
    pub fn render_whole(mut self, text: &str) -> String {
        let mut out = Vec::new();
        self.push(text, &mut out);
        self.finish(&mut out);
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
        block_line(line, self.columns())
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
/// replaced by a styled one, then the inline styles of the rest; wrapped at
/// `width` columns.
fn block_line(line: &str, width: Option<usize>) -> String {
    let indent = &line[..line.len() - line.trim_start().len()];
    let rest = line.trim_start();
    if rest.is_empty() {
        return String::new();
    }
    let indent_w = indent.chars().count();
    let fit = |styled: String, hang: String, hang_w: usize| match width {
        Some(w) => wrap(&styled, w, &hang, hang_w),
        None => styled,
    };
    let compact: String = rest.chars().filter(|c| !c.is_whitespace()).collect();
    if compact.len() >= 3 && ["-", "*", "_"].iter().any(|m| compact.chars().all(|c| c.to_string() == *m)) {
        let len = width.map_or(RULE, |w| w.saturating_sub(indent_w).clamp(1, RULE));
        return format!("{indent}\x1b[2m{}{RESET}", "─".repeat(len));
    }
    let hashes = rest.chars().take_while(|c| *c == '#').count();
    if (1..=6).contains(&hashes) && rest[hashes..].starts_with([' ', '\t'])
        || (1..=6).contains(&hashes) && rest.len() == hashes
    {
        let text = rest[hashes..].trim().trim_end_matches('#').trim_end();
        let style = if hashes == 1 { "1;4;35" } else { "1;36" };
        return fit(format!("{indent}{}", inline(text, style)), indent.to_string(), indent_w);
    }
    if let Some(q) = rest.strip_prefix('>') {
        let bar = format!("{indent}\x1b[2m│{RESET} ");
        return fit(format!("{bar}{}", inline(q.trim_start(), "3")), bar.clone(), indent_w + 2);
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
            let styled = format!("{indent}\x1b[33m{mark}{RESET} {}", inline(item, ""));
            return fit(styled, format!("{indent}  "), indent_w + 2);
        }
    }
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    if (1..=9).contains(&digits) && (rest[digits..].starts_with(". ") || rest[digits..].starts_with(") ")) {
        let (num, item) = rest.split_at(digits + 1);
        let styled = format!("{indent}\x1b[33m{num}{RESET} {}", inline(item.trim_start(), ""));
        let hang_w = indent_w + num.len() + 1;
        return fit(styled, " ".repeat(hang_w), hang_w);
    }
    fit(format!("{indent}{}", inline(rest, "")), indent.to_string(), indent_w)
}

/// Columns a character takes on a terminal: 0 for combining marks and
/// zero-width characters, 2 for wide (East Asian, emoji) ones, else 1.
fn char_width(c: char) -> usize {
    match c as u32 {
        0x0300..=0x036F | 0x200B..=0x200F | 0xFE00..=0xFE0F => 0,
        0x1100..=0x115F
        | 0x2E80..=0xA4CF
        | 0xAC00..=0xD7A3
        | 0xF900..=0xFAFF
        | 0xFE30..=0xFE4F
        | 0xFF00..=0xFF60
        | 0xFFE0..=0xFFE6
        | 0x1F300..=0x1F64F
        | 0x1F900..=0x1F9FF
        | 0x20000..=0x3FFFD => 2,
        _ => 1,
    }
}

/// A run of spaces then a word, escape sequences kept with the word.
#[derive(Default)]
struct Piece {
    spaces: String,
    spaces_w: usize,
    word: String,
    word_w: usize,
}

/// `styled` (text with SGR escapes) broken at spaces so that its rows are
/// at most `width` columns wide: a word that does not fit on the current
/// row starts the next one, which begins with `hang` (`hang_w` columns) and
/// the styles open at the break. The spaces at a break are dropped. A word
/// wider than a row is left whole (the terminal folds it).
fn wrap(styled: &str, width: usize, hang: &str, hang_w: usize) -> String {
    let mut pieces: Vec<Piece> = Vec::new();
    let mut cur = Piece::default();
    let mut chars = styled.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            let mut esc = String::from(c);
            if chars.peek() == Some(&'[') {
                for c in chars.by_ref() {
                    esc.push(c);
                    if ('\x40'..='\x7e').contains(&c) && c != '[' {
                        break;
                    }
                }
            }
            cur.word.push_str(&esc);
        } else if c == ' ' {
            if cur.word_w > 0 {
                pieces.push(std::mem::take(&mut cur));
            }
            cur.spaces.push(c);
            cur.spaces_w += 1;
        } else {
            cur.word.push(c);
            cur.word_w += char_width(c);
        }
    }
    pieces.push(cur);
    let mut out = String::with_capacity(styled.len() + 16);
    let mut col = 0;
    for p in pieces {
        if p.word_w > 0 && col > hang_w && col + p.spaces_w + p.word_w > width {
            let open = open_styles(&out);
            out.push_str(RESET);
            out.push('\n');
            out.push_str(hang);
            out.push_str(&open);
            col = hang_w;
        } else {
            out.push_str(&p.spaces);
            col += p.spaces_w;
        }
        out.push_str(&p.word);
        col += p.word_w;
    }
    out
}

/// The SGR sequences written since the last reset in `s`: the styles in
/// force at its end.
fn open_styles(s: &str) -> String {
    let tail = s.rfind(RESET).map_or(s, |i| &s[i + RESET.len()..]);
    let mut open = String::new();
    let mut rest = tail;
    while let Some(i) = rest.find("\x1b[") {
        let after = &rest[i + 2..];
        let Some(end) = after.find(|c: char| ('\x40'..='\x7e').contains(&c)) else {
            break;
        };
        if after[end..].starts_with('m') {
            open.push_str(&rest[i..i + 2 + end + 1]);
        }
        rest = &after[end + 1..];
    }
    open
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

    /// Rows of `text` rendered in colour at `width` columns, escapes removed.
    fn rows(text: &str, width: usize) -> Vec<String> {
        let out = Markdown::with_width(true, Some(width)).render_whole(text);
        out.lines().map(strip).collect()
    }

    #[test]
    fn text_wraps_on_word_boundaries_and_blank_lines_stay() {
        let text = "# A heading\n\nThe quick brown fox jumps over the lazy dog and keeps running **far away** from here.\n\n- an item whose text is long enough to need a second row\n> a quoted line that is also long enough to wrap\n\n```\nlet code = \"a long code line that is never wrapped, not even at 30\";\n```\n";
        assert_eq!(
            rows(text, 30),
            vec![
                "A heading",
                "",
                "The quick brown fox jumps over",
                "the lazy dog and keeps running",
                "far away from here.",
                "",
                "• an item whose text is long",
                "  enough to need a second row",
                "│ a quoted line that is also",
                "│ long enough to wrap",
                "",
                "```",
                "let code = \"a long code line that is never wrapped, not even at 30\";",
                "```",
            ]
        );
        // Wide enough: one row per line, as before.
        let wide = rows(text, 200);
        assert!(wide.contains(
            &"The quick brown fox jumps over the lazy dog and keeps running far away from here.".to_string()
        ));
        // A word longer than a row is not cut.
        let long = "x".repeat(40);
        assert_eq!(rows(&format!("a {long} b\n"), 30), vec!["a".to_string(), long.clone(), "b".to_string()]);
        // Numbered items hang under their text; wide characters count twice.
        assert_eq!(rows("12. one two three four five six\n", 20), vec!["12. one two three", "    four five six"]);
        assert_eq!(rows("漢字漢字 漢字漢字 漢字漢字\n", 20), vec!["漢字漢字 漢字漢字", "漢字漢字"]);
    }

    #[test]
    fn a_style_open_at_a_break_goes_on_in_the_next_row() {
        let out = Markdown::with_width(true, Some(20)).render_whole("plain **bold words that wrap over** end\n");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.iter().map(|l| strip(l)).collect::<Vec<_>>(), vec!["plain bold words", "that wrap over end"]);
        // The first row ends reset; the second starts bold again.
        assert!(lines[0].ends_with(RESET), "{:?}", lines[0]);
        assert!(lines[1].starts_with("\x1b[1m") || lines[1].starts_with("\x1b[0m\x1b[1m"), "{:?}", lines[1]);
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
