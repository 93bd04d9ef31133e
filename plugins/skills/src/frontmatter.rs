//! The front matter of a `SKILL.md`: a small YAML subset.
//!
//! Enough for Agent Skills headers: top-level `key: value` lines between
//! `---` fences, with plain, single- or double-quoted values, plain values
//! continued on indented lines, and `>` / `|` block scalars (with `-`/`+`
//! chomping). Nested mappings and lists (`metadata:`, `allowed-tools:`) are
//! skipped; comments and blank lines are ignored.

use std::collections::BTreeMap;

/// A `SKILL.md` split into its header keys and its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// Top-level scalar keys of the front matter.
    pub keys: BTreeMap<String, String>,
    /// Everything after the closing fence, leading blank lines removed.
    pub body: String,
}

/// Why a front matter could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrontMatterError {
    /// The file does not start with a `---` line.
    NoFrontMatter,
    /// No closing `---` line.
    Unterminated,
    /// A line that is not `key: value` (1-based line number).
    BadLine(usize),
    /// A quoted value without its closing quote (1-based line number).
    UnterminatedQuote(usize),
}

impl std::fmt::Display for FrontMatterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoFrontMatter => write!(f, "no front matter (the file must start with a `---` line)"),
            Self::Unterminated => write!(f, "front matter has no closing `---` line"),
            Self::BadLine(n) => write!(f, "line {n}: expected `key: value`"),
            Self::UnterminatedQuote(n) => write!(f, "line {n}: quoted value has no closing quote"),
        }
    }
}

fn is_fence(line: &str) -> bool {
    line.trim_end() == "---"
}

fn indented(line: &str) -> bool {
    line.starts_with(' ') || line.starts_with('\t')
}

/// Splits `text` into front matter keys and body.
pub fn parse(text: &str) -> Result<Document, FrontMatterError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let lines: Vec<&str> = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).collect();
    if !lines.first().is_some_and(|l| is_fence(l)) {
        return Err(FrontMatterError::NoFrontMatter);
    }
    let end = lines.iter().skip(1).position(|l| is_fence(l) || l.trim_end() == "...").map(|i| i + 1);
    let end = end.ok_or(FrontMatterError::Unterminated)?;
    let keys = parse_keys(&lines[1..end], 2)?;
    let body_lines = &lines[end + 1..];
    let start = body_lines.iter().position(|l| !l.trim().is_empty()).unwrap_or(body_lines.len());
    let body = body_lines[start..].join("\n").trim_end().to_string();
    Ok(Document { keys, body })
}

fn parse_keys(lines: &[&str], first_line_no: usize) -> Result<BTreeMap<String, String>, FrontMatterError> {
    let mut keys = BTreeMap::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let no = first_line_no + i;
        i += 1;
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if indented(line) || line.starts_with('-') {
            // Part of a nested value we skip (a mapping or list under a key).
            continue;
        }
        let Some((key, rest)) = line.split_once(':') else {
            return Err(FrontMatterError::BadLine(no));
        };
        let key = key.trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err(FrontMatterError::BadLine(no));
        }
        let rest = rest.trim();
        // The indented lines that follow belong to this key.
        let cont_end =
            lines[i..].iter().position(|l| !l.trim().is_empty() && !indented(l)).map_or(lines.len(), |p| i + p);
        let cont = &lines[i..cont_end];
        let value = if let Some(header) =
            rest.strip_prefix('>').map(|h| ('>', h)).or_else(|| rest.strip_prefix('|').map(|h| ('|', h)))
        {
            Some(block_scalar(header.0, header.1, cont))
        } else if rest.starts_with('"') || rest.starts_with('\'') {
            let joined = std::iter::once(rest).chain(cont.iter().map(|l| l.trim())).collect::<Vec<_>>().join(" ");
            Some(quoted(&joined).ok_or(FrontMatterError::UnterminatedQuote(no))?)
        } else if rest.is_empty() {
            // A nested mapping or list: not a scalar key.
            None
        } else {
            let mut words = vec![strip_comment(rest)];
            words.extend(cont.iter().map(|l| l.trim()).filter(|l| !l.is_empty()));
            Some(words.join(" "))
        };
        i = cont_end;
        if let Some(v) = value {
            keys.insert(key.to_string(), v);
        }
    }
    Ok(keys)
}

/// A plain value without a trailing ` # comment`.
fn strip_comment(s: &str) -> &str {
    match s.find(" #") {
        Some(i) => s[..i].trim_end(),
        None => s,
    }
}

/// A `>` (folded) or `|` (literal) block scalar; `header` holds the
/// chomping indicator (`-`, `+`) and any indentation digit.
fn block_scalar(style: char, header: &str, lines: &[&str]) -> String {
    let header = strip_comment(header.trim());
    let indent =
        lines.iter().filter(|l| !l.trim().is_empty()).map(|l| l.len() - l.trim_start().len()).min().unwrap_or(0);
    let body: Vec<&str> = lines.iter().map(|l| if l.len() >= indent { &l[indent..] } else { l.trim_start() }).collect();
    let mut text = String::new();
    if style == '|' {
        text = body.join("\n");
    } else {
        // Folding: lines of a paragraph join with spaces, a blank line is a
        // newline, and more-indented lines keep their breaks.
        let mut prev_plain = false;
        for line in &body {
            if line.trim().is_empty() {
                text.push('\n');
                prev_plain = false;
            } else if line.starts_with(' ') || line.starts_with('\t') {
                if !text.is_empty() && !text.ends_with('\n') {
                    text.push('\n');
                }
                text.push_str(line);
                text.push('\n');
                prev_plain = false;
            } else {
                if prev_plain {
                    text.push(' ');
                }
                text.push_str(line);
                prev_plain = true;
            }
        }
    }
    let content = text.trim_end_matches('\n');
    if header.contains('-') {
        content.to_string()
    } else if header.contains('+') {
        format!("{text}\n")
    } else {
        format!("{content}\n")
    }
}

/// A double- or single-quoted scalar (the whole of `s`, which starts with
/// the quote); `None` without a closing quote.
fn quoted(s: &str) -> Option<String> {
    let mut chars = s.chars();
    let q = chars.next()?;
    let mut out = String::new();
    while let Some(c) = chars.next() {
        match (q, c) {
            ('\'', '\'') => {
                if chars.clone().next() == Some('\'') {
                    chars.next();
                    out.push('\'');
                } else {
                    return Some(out);
                }
            }
            ('"', '"') => return Some(out),
            ('"', '\\') => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                '"' => out.push('"'),
                '\\' => out.push('\\'),
                '/' => out.push('/'),
                other => {
                    out.push('\\');
                    out.push(other);
                }
            },
            _ => out.push(c),
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_quoted_values() {
        let d = parse("---\nname: pdf\ndescription: \"Fill \\\"PDF\\\" forms: fast\"\nlicense: 'it''s MIT'\n---\n\n# PDF\nBody.\n")
            .unwrap();
        assert_eq!(d.keys["name"], "pdf");
        assert_eq!(d.keys["description"], "Fill \"PDF\" forms: fast");
        assert_eq!(d.keys["license"], "it's MIT");
        assert_eq!(d.body, "# PDF\nBody.");
    }

    #[test]
    fn folded_literal_and_continued_values() {
        let text = "---\r\nname: x # a comment\r\ndescription: >\r\n  Extract text\r\n  from PDFs.\r\n\r\n  Second.\r\n\
                    notes: |-\r\n  a\r\n  b\r\nsummary: one\r\n  two\r\nmetadata:\r\n  author: me\r\nallowed-tools:\r\n  - Read\r\n---\r\nBody\r\n";
        let d = parse(text).unwrap();
        assert_eq!(d.keys["name"], "x");
        assert_eq!(d.keys["description"], "Extract text from PDFs.\nSecond.\n");
        assert_eq!(d.keys["notes"], "a\nb");
        assert_eq!(d.keys["summary"], "one two");
        assert!(!d.keys.contains_key("metadata") && !d.keys.contains_key("author"));
        assert_eq!(d.body, "Body");
    }

    #[test]
    fn errors_name_the_problem() {
        assert_eq!(parse("# no header"), Err(FrontMatterError::NoFrontMatter));
        assert_eq!(parse("---\nname: x\n"), Err(FrontMatterError::Unterminated));
        assert_eq!(parse("---\nname x\n---\n"), Err(FrontMatterError::BadLine(2)));
        assert_eq!(parse("---\nname: \"x\n---\n"), Err(FrontMatterError::UnterminatedQuote(2)));
        assert_eq!(parse("\u{feff}---\n---\nB").unwrap().body, "B");
    }
}
