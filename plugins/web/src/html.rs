//! A small, forgiving HTML → markdown / plain-text converter.
//!
//! Not a full HTML5 parser: it tokenizes tags, attributes, comments and
//! character references, drops what is noise to a reader (scripts, styles,
//! navigation, forms, embedded media) and renders headings, paragraphs,
//! links, lists, block quotes, preformatted code and simple tables. Broken
//! markup (including a body cut off at the size cap) degrades to text.

use crate::url::{Url, has_scheme};

/// Output flavour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// Markdown: `#` headings, `[text](url)` links, `**bold**`, fences.
    Markdown,
    /// Plain text: the same layout without markup.
    Text,
}

/// A converted page.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Page {
    /// The `<title>`, whitespace collapsed.
    pub title: Option<String>,
    /// The body as markdown or text.
    pub body: String,
}

/// Elements whose whole content is dropped.
const SKIP: &[&str] = &[
    "script", "style", "noscript", "template", "svg", "math", "nav", "aside", "footer", "form", "iframe", "button",
    "select", "canvas", "object", "dialog",
];
/// Elements whose content is raw text (no tags inside).
const RAW_TEXT: &[&str] = &["script", "style", "textarea", "title", "xmp", "noscript", "template"];
/// Elements that start and end a block (a blank line around them).
const BLOCK: &[&str] = &[
    "p",
    "div",
    "section",
    "article",
    "main",
    "header",
    "figure",
    "figcaption",
    "address",
    "details",
    "summary",
    "dl",
    "fieldset",
    "center",
    "hgroup",
    "body",
    "html",
];

#[derive(Debug, PartialEq, Eq)]
enum Token<'a> {
    Start { name: String, attrs: Vec<(String, String)>, self_closing: bool },
    End { name: String },
    Text(&'a str),
}

/// Splits `html` into tokens. Raw-text elements yield one `Text` token.
fn tokenize<'a>(html: &'a str) -> Vec<Token<'a>> {
    let mut out = Vec::new();
    let b = html.as_bytes();
    let mut i = 0;
    let mut text_start = 0;
    while i < b.len() {
        if b[i] != b'<' {
            i += 1;
            continue;
        }
        let next = b.get(i + 1).copied().unwrap_or(0);
        let flush = |out: &mut Vec<Token<'a>>, end: usize| {
            if end > text_start {
                out.push(Token::Text(&html[text_start..end]));
            }
        };
        if html[i..].starts_with("<!--") {
            flush(&mut out, i);
            i = html[i + 4..].find("-->").map_or(b.len(), |j| i + 4 + j + 3);
            text_start = i;
        } else if next == b'!' || next == b'?' {
            flush(&mut out, i);
            i = html[i..].find('>').map_or(b.len(), |j| i + j + 1);
            text_start = i;
        } else if next == b'/' && b.get(i + 2).is_some_and(u8::is_ascii_alphabetic) {
            flush(&mut out, i);
            let name_end = html[i + 2..].find(|c: char| !c.is_ascii_alphanumeric()).map_or(b.len(), |j| i + 2 + j);
            let name = html[i + 2..name_end].to_ascii_lowercase();
            i = html[name_end..].find('>').map_or(b.len(), |j| name_end + j + 1);
            text_start = i;
            out.push(Token::End { name });
        } else if next.is_ascii_alphabetic() {
            flush(&mut out, i);
            let (name, attrs, self_closing, end) = parse_start_tag(html, i + 1);
            i = end;
            text_start = i;
            if RAW_TEXT.contains(&name.as_str()) && !self_closing {
                let close = format!("</{name}");
                let rest = &html[i..];
                let stop = find_ascii_ci(rest, &close).unwrap_or(rest.len());
                let content = &rest[..stop];
                out.push(Token::Start { name: name.clone(), attrs, self_closing });
                if !content.is_empty() {
                    out.push(Token::Text(content));
                }
                out.push(Token::End { name });
                let after = i + stop;
                i = html[after..].find('>').map_or(b.len(), |j| after + j + 1);
                text_start = i;
            } else {
                out.push(Token::Start { name, attrs, self_closing });
            }
        } else {
            i += 1;
        }
    }
    if text_start < b.len() {
        out.push(Token::Text(&html[text_start..]));
    }
    out
}

fn find_ascii_ci(hay: &str, needle: &str) -> Option<usize> {
    let (h, n) = (hay.as_bytes(), needle.as_bytes());
    if n.len() > h.len() {
        return None;
    }
    (0..=h.len() - n.len()).find(|&k| h[k..k + n.len()].eq_ignore_ascii_case(n))
}

/// Parses `name attr=value …>` from `start` (just after `<`); returns the
/// lower-cased name, the attributes, whether it ends in `/>` and the index
/// after `>`.
fn parse_start_tag(html: &str, start: usize) -> (String, Vec<(String, String)>, bool, usize) {
    let b = html.as_bytes();
    let mut i = start;
    while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'-' || b[i] == b':') {
        i += 1;
    }
    let name = html[start..i].to_ascii_lowercase();
    let mut attrs = Vec::new();
    loop {
        while i < b.len() && (b[i].is_ascii_whitespace() || b[i] == b'/') {
            i += 1;
        }
        if i >= b.len() {
            return (name, attrs, false, b.len());
        }
        if b[i] == b'>' {
            return (name, attrs, b[i - 1] == b'/', i + 1);
        }
        let an_start = i;
        while i < b.len() && !b[i].is_ascii_whitespace() && !matches!(b[i], b'=' | b'>' | b'/') {
            i += 1;
        }
        let an = html[an_start..i].to_ascii_lowercase();
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        let mut value = String::new();
        if i < b.len() && b[i] == b'=' {
            i += 1;
            while i < b.len() && b[i].is_ascii_whitespace() {
                i += 1;
            }
            if i < b.len() && (b[i] == b'"' || b[i] == b'\'') {
                let q = b[i];
                let vs = i + 1;
                let ve = html[vs..].find(q as char).map_or(b.len(), |j| vs + j);
                value = decode_entities(&html[vs..ve]);
                i = (ve + 1).min(b.len());
            } else {
                let vs = i;
                while i < b.len() && !b[i].is_ascii_whitespace() && b[i] != b'>' {
                    i += 1;
                }
                value = decode_entities(&html[vs..i]);
            }
        }
        if !an.is_empty() {
            attrs.push((an, value));
        }
    }
}

/// Named character references worth knowing; others are left as written.
const ENTITIES: &[(&str, &str)] = &[
    ("amp", "&"),
    ("lt", "<"),
    ("gt", ">"),
    ("quot", "\""),
    ("apos", "'"),
    ("nbsp", "\u{a0}"),
    ("shy", ""),
    ("zwj", "\u{200d}"),
    ("zwnj", "\u{200c}"),
    ("ensp", " "),
    ("emsp", " "),
    ("thinsp", " "),
    ("copy", "©"),
    ("reg", "®"),
    ("trade", "™"),
    ("hellip", "…"),
    ("mdash", "—"),
    ("ndash", "–"),
    ("minus", "−"),
    ("lsquo", "‘"),
    ("rsquo", "’"),
    ("sbquo", "‚"),
    ("ldquo", "“"),
    ("rdquo", "”"),
    ("bdquo", "„"),
    ("laquo", "«"),
    ("raquo", "»"),
    ("lsaquo", "‹"),
    ("rsaquo", "›"),
    ("middot", "·"),
    ("bull", "•"),
    ("deg", "°"),
    ("times", "×"),
    ("divide", "÷"),
    ("plusmn", "±"),
    ("euro", "€"),
    ("pound", "£"),
    ("yen", "¥"),
    ("cent", "¢"),
    ("sect", "§"),
    ("para", "¶"),
    ("frac12", "½"),
    ("frac14", "¼"),
    ("frac34", "¾"),
    ("larr", "←"),
    ("rarr", "→"),
    ("uarr", "↑"),
    ("darr", "↓"),
    ("harr", "↔"),
    ("le", "≤"),
    ("ge", "≥"),
    ("ne", "≠"),
    ("asymp", "≈"),
    ("infin", "∞"),
    ("micro", "µ"),
    ("alpha", "α"),
    ("beta", "β"),
    ("pi", "π"),
];

/// Decodes `&name;`, `&#NNN;` and `&#xHH;`; anything unknown stays as is.
pub fn decode_entities(s: &str) -> String {
    if !s.contains('&') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let after = &rest[amp + 1..];
        let semi = after.find(';').filter(|&j| j <= 32);
        let decoded = semi.and_then(|j| {
            let name = &after[..j];
            let ch = if let Some(num) = name.strip_prefix('#') {
                let code = match num.strip_prefix(['x', 'X']) {
                    Some(hex) => u32::from_str_radix(hex, 16).ok(),
                    None => num.parse::<u32>().ok(),
                };
                code.map(|c| char::from_u32(c).filter(|&c| c != '\0').unwrap_or('\u{fffd}').to_string())
            } else {
                ENTITIES.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
            };
            ch.map(|c| (c, j))
        });
        match decoded {
            Some((c, j)) => {
                out.push_str(&c);
                rest = &after[j + 1..];
            }
            None => {
                out.push('&');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

struct ListState {
    ordered: bool,
    next: u64,
}

/// The output under construction.
struct Writer {
    flavor: Flavor,
    out: String,
    /// Whitespace seen since the last text (collapsed into one space).
    space: bool,
    pre: usize,
    quote: usize,
    lists: Vec<ListState>,
    /// Open links: `Some((start of link text in out, href))` when rendered.
    links: Vec<Option<(usize, String)>>,
    /// Cells in the current table row, and whether the row had `<th>`.
    row_cells: usize,
    row_header: bool,
    header_done: bool,
}

impl Writer {
    fn md(&self) -> bool {
        self.flavor == Flavor::Markdown
    }

    fn at_line_start(&self) -> bool {
        self.out.is_empty() || self.out.ends_with('\n')
    }

    /// Ends the current line and makes sure `n` line breaks precede what
    /// comes next (2 = a blank line).
    fn block(&mut self, n: usize) {
        self.space = false;
        if self.out.is_empty() {
            return;
        }
        while self.out.ends_with(' ') {
            self.out.pop();
        }
        let have = self.out.len() - self.out.trim_end_matches('\n').len();
        for _ in have..n {
            self.out.push('\n');
        }
    }

    fn line_prefix(&mut self) {
        if self.at_line_start() && self.quote > 0 && self.md() {
            for _ in 0..self.quote {
                self.out.push_str("> ");
            }
        }
    }

    /// Writes markup (only in markdown) at the current position.
    fn mark(&mut self, s: &str) {
        if self.md() {
            self.flush_space();
            self.line_prefix();
            self.out.push_str(s);
        }
    }

    fn flush_space(&mut self) {
        if self.space && !self.at_line_start() && !self.out.ends_with(' ') {
            self.out.push(' ');
        }
        self.space = false;
    }

    fn text(&mut self, raw: &str) {
        let t = decode_entities(raw);
        if self.pre > 0 {
            // A newline right after `<pre>` is not content.
            let t = if self.out.ends_with("```\n") || self.at_line_start() {
                t.strip_prefix('\n').unwrap_or(&t)
            } else {
                &t
            };
            for (k, line) in t.split('\n').enumerate() {
                if k > 0 {
                    self.out.push('\n');
                }
                self.line_prefix();
                self.out.push_str(line);
            }
            return;
        }
        for c in t.chars() {
            if c.is_whitespace() {
                self.space = true;
            } else {
                self.flush_space();
                self.line_prefix();
                self.out.push(c);
            }
        }
    }

    fn start(&mut self, name: &str, attrs: &[(String, String)], base: &Url) {
        let attr = |k: &str| attrs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        match name {
            "h1" | "h2" | "h3" | "h4" | "h5" | "h6" => {
                self.block(2);
                let level = name[1..].parse::<usize>().unwrap_or(1);
                self.mark(&format!("{} ", "#".repeat(level)));
            }
            "br" => {
                while self.out.ends_with(' ') {
                    self.out.pop();
                }
                self.out.push('\n');
                self.space = false;
            }
            "hr" => {
                self.block(2);
                self.mark("---");
                self.block(2);
            }
            "pre" => {
                self.block(2);
                self.mark("```");
                if self.md() {
                    self.out.push('\n');
                }
                self.pre += 1;
            }
            "blockquote" => {
                self.block(2);
                self.quote += 1;
            }
            "ul" | "ol" => {
                self.block(if self.lists.is_empty() { 2 } else { 1 });
                let next = attr("start").and_then(|s| s.trim().parse().ok()).unwrap_or(1);
                self.lists.push(ListState { ordered: name == "ol", next });
            }
            "li" => {
                self.block(1);
                let depth = self.lists.len().max(1);
                let marker = match self.lists.last_mut() {
                    Some(l) if l.ordered => {
                        l.next += 1;
                        format!("{}. ", l.next - 1)
                    }
                    _ => "- ".to_string(),
                };
                self.line_prefix();
                self.out.push_str(&"  ".repeat(depth - 1));
                self.out.push_str(&marker);
            }
            "dt" | "dd" | "tr" | "caption" => {
                self.block(1);
                if name == "tr" {
                    self.row_cells = 0;
                    self.row_header = false;
                    self.mark("|");
                }
            }
            "td" | "th" => {
                self.row_cells += 1;
                self.row_header |= name == "th";
                self.space = true;
            }
            "table" => {
                self.block(2);
                self.header_done = false;
            }
            "a" => {
                let href = attr("href").map(str::trim).unwrap_or("");
                let target = resolve_link(base, href);
                if let (Some(t), true, 0) = (target, self.md(), self.pre) {
                    self.mark("[");
                    self.links.push(Some((self.out.len(), t)));
                } else {
                    self.links.push(None);
                }
            }
            "img" => {
                let alt = attr("alt").map(str::trim).unwrap_or("");
                if !alt.is_empty() {
                    match (self.md(), attr("src").and_then(|s| resolve_link(base, s.trim()))) {
                        (true, Some(src)) => self.mark(&format!("![{}]({src})", alt.replace(['[', ']'], ""))),
                        _ => self.text(alt),
                    }
                }
            }
            "strong" | "b" if self.pre == 0 => self.mark("**"),
            "em" | "i" if self.pre == 0 => self.mark("*"),
            "code" | "kbd" | "samp" if self.pre == 0 => self.mark("`"),
            n if BLOCK.contains(&n) => self.block(2),
            _ => {}
        }
    }

    fn end(&mut self, name: &str) {
        match name {
            "h1" | "h2" | "h3" | "h4" | "h5" | "h6" | "p" => self.block(2),
            "pre" => {
                self.pre = self.pre.saturating_sub(1);
                if self.md() {
                    if !self.at_line_start() {
                        self.out.push('\n');
                    }
                    self.line_prefix();
                    self.out.push_str("```");
                }
                self.block(2);
            }
            "blockquote" => {
                self.block(2);
                self.quote = self.quote.saturating_sub(1);
            }
            "ul" | "ol" => {
                self.lists.pop();
                self.block(if self.lists.is_empty() { 2 } else { 1 });
            }
            "li" | "dt" | "dd" | "caption" => self.block(1),
            "td" | "th" => {
                self.space = false;
                while self.out.ends_with(' ') {
                    self.out.pop();
                }
                self.out.push_str(if self.md() { " |" } else { "\t" });
            }
            "tr" => {
                if self.md() && self.row_header && !self.header_done && self.row_cells > 0 {
                    self.out.push('\n');
                    self.out.push('|');
                    self.out.push_str(&"---|".repeat(self.row_cells));
                }
                self.header_done = true;
                self.block(1);
            }
            "table" => self.block(2),
            "a" => {
                if let Some(Some((start, href))) = self.links.pop() {
                    if self.out[start..].trim().is_empty() {
                        // No link text (an icon): drop the bracket.
                        self.out.truncate(start.saturating_sub(1));
                    } else {
                        self.out.push_str(&format!("]({href})"));
                    }
                }
            }
            "strong" | "b" if self.pre == 0 => self.mark("**"),
            "em" | "i" if self.pre == 0 => self.mark("*"),
            "code" | "kbd" | "samp" if self.pre == 0 => self.mark("`"),
            n if BLOCK.contains(&n) => self.block(2),
            _ => {}
        }
    }
}

/// A link target worth showing: resolved against the page, `http(s)` or
/// another scheme as written; `None` for fragments, `javascript:` and
/// `data:`.
fn resolve_link(base: &Url, href: &str) -> Option<String> {
    if href.is_empty() || href.starts_with('#') {
        return None;
    }
    if has_scheme(href) {
        let scheme = href.split(':').next().unwrap_or("").to_ascii_lowercase();
        return match scheme.as_str() {
            "javascript" | "data" | "vbscript" => None,
            "http" | "https" => Some(Url::parse(href).map(|u| u.to_string()).unwrap_or_else(|_| href.to_string())),
            _ => Some(href.to_string()),
        };
    }
    base.join(href).ok().map(|u| u.to_string())
}

/// Converts an HTML document; links are resolved against `base`.
pub fn convert(html: &str, base: &Url, flavor: Flavor) -> Page {
    let mut w = Writer {
        flavor,
        out: String::new(),
        space: false,
        pre: 0,
        quote: 0,
        lists: Vec::new(),
        links: Vec::new(),
        row_cells: 0,
        row_header: false,
        header_done: false,
    };
    let mut title: Option<String> = None;
    let mut in_title = false;
    // The element being skipped and how deeply it nests.
    let mut skip: Option<(String, usize)> = None;
    for tok in tokenize(html) {
        if let Some((name, depth)) = &mut skip {
            match &tok {
                Token::Start { name: n, self_closing: false, .. } if n == name => *depth += 1,
                Token::End { name: n } if n == name => {
                    *depth -= 1;
                    if *depth == 0 {
                        skip = None;
                    }
                }
                _ => {}
            }
            continue;
        }
        match tok {
            Token::Start { name, .. } if name == "title" => in_title = true,
            Token::End { name } if name == "title" => in_title = false,
            Token::Text(t) if in_title => {
                let t = decode_entities(t);
                let t = t.split_whitespace().collect::<Vec<_>>().join(" ");
                if !t.is_empty() && title.is_none() {
                    title = Some(t);
                }
            }
            Token::Start { name, self_closing, .. } if SKIP.contains(&name.as_str()) => {
                if !self_closing {
                    skip = Some((name, 1));
                }
            }
            Token::Start { name, attrs, .. } => w.start(&name, &attrs, base),
            Token::End { name } => w.end(&name),
            Token::Text(t) => w.text(t),
        }
    }
    // Links left open by a cut-off body.
    while !w.links.is_empty() {
        w.end("a");
    }
    Page { title, body: tidy(&w.out) }
}

/// Trims line ends and collapses runs of blank lines.
fn tidy(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut blank = 0;
    for line in s.lines() {
        let line = line.trim_end().replace('\u{a0}', " ");
        if line.trim().is_empty() {
            blank += 1;
            continue;
        }
        if !out.is_empty() {
            out.push_str(if blank > 0 { "\n\n" } else { "\n" });
        }
        blank = 0;
        out.push_str(&line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Url {
        Url::parse("http://example.test/docs/index.html").expect("a test URL")
    }

    const PAGE: &str = r##"<!DOCTYPE html>
<html><head><title>The  Wharf &amp; Co</title>
<style>body { color: red }</style>
<script>var x = "<p>not text</p>";</script></head>
<body>
<nav><a href="/">Home</a> | <a href="/about">About</a></nav>
<!-- a comment <p>hidden</p> -->
<h1>Getting   started</h1>
<p>Read the <a href="guide.html">guide</a> and the <a href="https://other.test/x">other   page</a>.<br>
New line &mdash; &lt;ok&gt; &#169; &#x263A;</p>
<ul><li>one</li><li>two<ul><li>nested</li></ul></li></ul>
<ol start="3"><li>three</li><li>four</li></ol>
<pre><code>fn main() {
    println!("hi &lt;3");
}</code></pre>
<blockquote><p>Quoted <em>words</em></p></blockquote>
<table><tr><th>Name</th><th>Value</th></tr><tr><td>a</td><td>1</td></tr></table>
<p><a href="#top"><img src="x.png"></a><strong>Bold</strong> and <code>code</code></p>
<footer>Copyright junk</footer>
</body></html>"##;

    #[test]
    fn markdown() {
        let p = convert(PAGE, &base(), Flavor::Markdown);
        assert_eq!(p.title.as_deref(), Some("The Wharf & Co"));
        let want = "\
# Getting started

Read the [guide](http://example.test/docs/guide.html) and the [other page](https://other.test/x).
New line — <ok> © ☺

- one
- two
  - nested

3. three
4. four

```
fn main() {
    println!(\"hi <3\");
}
```

> Quoted *words*

| Name | Value |
|---|---|
| a | 1 |

**Bold** and `code`";
        assert_eq!(p.body, want, "\n{}", p.body);
    }

    #[test]
    fn plain_text() {
        let p = convert(PAGE, &base(), Flavor::Text);
        assert!(p.body.starts_with("Getting started\n\nRead the guide and the other page.\nNew line"), "{}", p.body);
        assert!(!p.body.contains('['), "{}", p.body);
        assert!(!p.body.contains("```"), "{}", p.body);
        assert!(p.body.contains("fn main() {\n    println!(\"hi <3\");\n}"), "{}", p.body);
    }

    #[test]
    fn noise_is_dropped() {
        let p = convert(PAGE, &base(), Flavor::Markdown);
        for noise in ["color: red", "not text", "Home", "About", "hidden", "Copyright", "x.png"] {
            assert!(!p.body.contains(noise), "{noise:?} leaked into:\n{}", p.body);
        }
    }

    #[test]
    fn broken_markup_degrades_to_text() {
        let base = base();
        assert_eq!(convert("plain <b>bold", &base, Flavor::Text).body, "plain bold");
        assert_eq!(convert("a < b and c > d", &base, Flavor::Text).body, "a < b and c > d");
        assert_eq!(convert("<p>cut off <a href=\"x", &base, Flavor::Markdown).body, "cut off");
        assert_eq!(convert("<script>never closed", &base, Flavor::Text).body, "");
        assert_eq!(convert("<div><nav><nav>x</nav>y</nav>z</div>", &base, Flavor::Text).body, "z");
        assert_eq!(convert("<P CLASS=x>Upper</P><SCRIPT>no</SCRIPT>", &base, Flavor::Text).body, "Upper");
    }

    #[test]
    fn entities() {
        assert_eq!(
            decode_entities("a &amp;&amp; b &unknown; &#65;&#x42; & c &#0;"),
            "a && b &unknown; AB & c \u{fffd}"
        );
    }
}
