//! The two glob dialects of the rules.
//!
//! - [`TextGlob`] matches a whole string: tool names, plugin ids, commands,
//!   argument values. `*` is any run of characters (including `/` and
//!   spaces), `?` one character, `[abc]`, `[a-z]`, `[!a-z]` (or `[^…]`) a
//!   character class, `\x` a literal `x`. Matching is case-sensitive.
//! - [`PathGlob`] matches a normalized path segment by segment: `*`, `?` and
//!   classes stay within one segment, a `**` segment matches zero or more
//!   whole segments (so `src/**` matches `src` itself and everything below
//!   it). `.` segments are dropped and `..` removes the segment before it, as
//!   for paths. A relative pattern is anchored at the request's workspace.
//!
//! Both compile once and match in O(pattern × text) time with the classic
//! "backtrack to the last star" loop: no pattern can make matching blow up.

use std::fmt;
use std::path::{Component, Path};

/// One token of a [`TextGlob`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Lit(char),
    One,
    Star,
    Class { negated: bool, ranges: Vec<(char, char)> },
}

impl Tok {
    fn matches(&self, c: char) -> bool {
        match self {
            Tok::Lit(l) => *l == c,
            Tok::One => true,
            Tok::Star => false,
            Tok::Class { negated, ranges } => ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != *negated,
        }
    }
}

/// A glob over a whole string (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextGlob {
    source: String,
    toks: Vec<Tok>,
}

impl fmt::Display for TextGlob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// Whether `s` contains a glob metacharacter (`*`, `?`, `[` or `\`).
pub fn has_meta(s: &str) -> bool {
    s.contains(['*', '?', '[', '\\'])
}

impl TextGlob {
    /// Compiles `pattern`; an empty pattern, an unclosed or empty class, a
    /// reversed range or a trailing `\` is an error.
    pub fn new(pattern: &str) -> Result<Self, String> {
        if pattern.is_empty() {
            return Err("empty pattern".into());
        }
        let mut toks = Vec::new();
        let mut chars = pattern.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '*' => {
                    if toks.last() != Some(&Tok::Star) {
                        toks.push(Tok::Star);
                    }
                }
                '?' => toks.push(Tok::One),
                '\\' => match chars.next() {
                    Some(e) => toks.push(Tok::Lit(e)),
                    None => return Err(format!("`{pattern}`: trailing `\\` escapes nothing")),
                },
                '[' => {
                    let negated = matches!(chars.peek(), Some('!' | '^'));
                    if negated {
                        chars.next();
                    }
                    let mut ranges = Vec::new();
                    let mut closed = false;
                    while let Some(c) = chars.next() {
                        let lo = match c {
                            ']' => {
                                closed = true;
                                break;
                            }
                            '\\' => chars.next().ok_or_else(|| format!("`{pattern}`: unclosed `[`"))?,
                            other => other,
                        };
                        let hi = if chars.peek() == Some(&'-') {
                            chars.next();
                            match chars.next() {
                                // `[a-]`: a literal `-` at the end.
                                Some(']') => {
                                    ranges.push((lo, lo));
                                    ranges.push(('-', '-'));
                                    closed = true;
                                    break;
                                }
                                Some('\\') => chars.next().ok_or_else(|| format!("`{pattern}`: unclosed `[`"))?,
                                Some(h) => h,
                                None => return Err(format!("`{pattern}`: unclosed `[`")),
                            }
                        } else {
                            lo
                        };
                        if hi < lo {
                            return Err(format!("`{pattern}`: reversed range `{lo}-{hi}`"));
                        }
                        ranges.push((lo, hi));
                    }
                    if !closed {
                        return Err(format!("`{pattern}`: unclosed `[`"));
                    }
                    if ranges.is_empty() {
                        return Err(format!("`{pattern}`: empty character class `[]`"));
                    }
                    toks.push(Tok::Class { negated, ranges });
                }
                other => toks.push(Tok::Lit(other)),
            }
        }
        Ok(Self { source: pattern.to_string(), toks })
    }

    /// Whether the pattern matches exactly one string (no metacharacters).
    pub fn is_literal(&self) -> bool {
        self.toks.iter().all(|t| matches!(t, Tok::Lit(_)))
    }

    /// Whether `text` matches the whole pattern.
    pub fn matches(&self, text: &str) -> bool {
        let t: Vec<char> = text.chars().collect();
        let p = &self.toks;
        let (mut ti, mut pi) = (0, 0);
        // (pattern index after the last star, text index it is retried from)
        let mut back: Option<(usize, usize)> = None;
        while ti < t.len() {
            if pi < p.len() {
                if p[pi] == Tok::Star {
                    pi += 1;
                    back = Some((pi, ti));
                    continue;
                }
                if p[pi].matches(t[ti]) {
                    pi += 1;
                    ti += 1;
                    continue;
                }
            }
            match back {
                Some((bp, bt)) => {
                    pi = bp;
                    ti = bt + 1;
                    back = Some((bp, bt + 1));
                }
                None => return false,
            }
        }
        p[pi..].iter().all(|t| *t == Tok::Star)
    }
}

/// One segment of a [`PathGlob`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Lit(String),
    Glob(TextGlob),
    /// `**`: zero or more segments.
    Any,
    /// `..` at the start of a relative pattern, applied to the workspace.
    Up,
}

impl Seg {
    fn matches(&self, s: &str) -> bool {
        match self {
            Seg::Lit(l) => l == s,
            Seg::Glob(g) => g.matches(s),
            Seg::Any | Seg::Up => false,
        }
    }
}

/// A path split into normal segments: `/a/b` is `(true, [a, b])`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segments {
    /// Starts at the root.
    pub absolute: bool,
    /// The segments after the root; a relative path may start with `..`.
    pub parts: Vec<String>,
}

impl Segments {
    /// Splits a path that was already normalized (`wharf_sdk::path::normalize`).
    pub fn of(path: &Path) -> Self {
        let mut absolute = false;
        let mut parts = Vec::new();
        for c in path.components() {
            match c {
                Component::RootDir | Component::Prefix(_) => absolute = true,
                Component::CurDir => {}
                Component::ParentDir => parts.push("..".to_string()),
                Component::Normal(n) => parts.push(n.to_string_lossy().into_owned()),
            }
        }
        Self { absolute, parts }
    }

    /// Whether `self` is `root` or inside it.
    pub fn starts_with(&self, root: &Segments) -> bool {
        self.absolute == root.absolute && self.parts.starts_with(&root.parts)
    }
}

/// A glob over a normalized path (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathGlob {
    source: String,
    absolute: bool,
    segs: Vec<Seg>,
}

impl fmt::Display for PathGlob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

impl PathGlob {
    /// Compiles `pattern`. Errors: an empty pattern, `**` mixed with other
    /// characters in one segment, `..` after a wildcard segment, and every
    /// [`TextGlob`] error of a segment.
    pub fn new(pattern: &str) -> Result<Self, String> {
        if pattern.is_empty() {
            return Err("empty path pattern".into());
        }
        let absolute = pattern.starts_with('/');
        let mut segs: Vec<Seg> = Vec::new();
        for raw in pattern.split('/') {
            match raw {
                "" | "." => {}
                ".." => match segs.last() {
                    Some(Seg::Lit(_)) => {
                        segs.pop();
                    }
                    Some(Seg::Glob(_) | Seg::Any) => {
                        return Err(format!("`{pattern}`: `..` after a wildcard segment is ambiguous"));
                    }
                    // `/..` is `/`, as for paths.
                    None if absolute => {}
                    None | Some(Seg::Up) => segs.push(Seg::Up),
                },
                "**" => {
                    if segs.last() != Some(&Seg::Any) {
                        segs.push(Seg::Any);
                    }
                }
                s if s.contains("**") => {
                    return Err(format!(
                        "`{pattern}`: `**` must be a whole path segment (e.g. `src/**/*.rs`), not part of `{s}`"
                    ));
                }
                s if has_meta(s) => {
                    let g = TextGlob::new(s).map_err(|e| format!("`{pattern}`: {e}"))?;
                    segs.push(if g.is_literal() { Seg::Lit(unescape(s)) } else { Seg::Glob(g) });
                }
                s => segs.push(Seg::Lit(s.to_string())),
            }
        }
        Ok(Self { source: pattern.to_string(), absolute, segs })
    }

    /// Whether `path` matches. A relative pattern is anchored at
    /// `workspace` (its segments are taken literally); without a workspace
    /// it only matches relative paths.
    pub fn matches(&self, path: &Segments, workspace: Option<&Segments>) -> bool {
        let anchored: Vec<Seg>;
        let (absolute, segs) = match workspace {
            Some(ws) if !self.absolute => {
                let mut out: Vec<Seg> = ws.parts.iter().cloned().map(Seg::Lit).collect();
                for s in &self.segs {
                    match s {
                        // Normalizing the workspace joined with a leading `..`.
                        Seg::Up => match out.last() {
                            Some(Seg::Lit(l)) if l != ".." => {
                                out.pop();
                            }
                            _ if ws.absolute => {}
                            _ => out.push(Seg::Lit("..".into())),
                        },
                        other => out.push(other.clone()),
                    }
                }
                anchored = out;
                (ws.absolute, anchored.as_slice())
            }
            _ => (self.absolute, self.segs.as_slice()),
        };
        if absolute != path.absolute {
            return false;
        }
        match_segments(segs, &path.parts)
    }
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(e) = chars.next() {
                out.push(e);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Segment matching with `**` as the star (same loop as [`TextGlob::matches`]).
fn match_segments(p: &[Seg], t: &[String]) -> bool {
    let (mut ti, mut pi) = (0, 0);
    let mut back: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() {
            if p[pi] == Seg::Any {
                pi += 1;
                back = Some((pi, ti));
                continue;
            }
            if p[pi] == Seg::Up {
                // A leading `..` of a pattern without workspace matches a
                // leading `..` of a relative path.
                if t[ti] == ".." {
                    pi += 1;
                    ti += 1;
                    continue;
                }
            } else if p[pi].matches(&t[ti]) {
                pi += 1;
                ti += 1;
                continue;
            }
        }
        match back {
            Some((bp, bt)) => {
                pi = bp;
                ti = bt + 1;
                back = Some((bp, bt + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|s| *s == Seg::Any)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn t(p: &str, s: &str) -> bool {
        TextGlob::new(p).unwrap().matches(s)
    }

    fn segs(p: &str) -> Segments {
        Segments::of(&wharf_sdk::path::normalize(&PathBuf::from(p)))
    }

    fn pm(pattern: &str, path: &str, ws: Option<&str>) -> bool {
        let ws = ws.map(segs);
        PathGlob::new(pattern).unwrap().matches(&segs(path), ws.as_ref())
    }

    #[test]
    fn text_globs() {
        assert!(t("write", "write"));
        assert!(!t("write", "writes"));
        assert!(t("*", ""));
        assert!(t("fs_*", "fs_read"));
        assert!(!t("fs_*", "xfs_read"));
        assert!(t("rm -rf *", "rm -rf /"));
        assert!(t("rm -rf *", "rm -rf build/a b"));
        assert!(!t("rm -rf *", "sudo rm -rf /"));
        assert!(t("*rm -rf*", "sudo rm -rf /"));
        assert!(t("a?c", "abc"));
        assert!(!t("a?c", "ac"));
        assert!(t("[ab]x", "bx"));
        assert!(t("[a-c]x", "cx"));
        assert!(!t("[!a-c]x", "cx"));
        assert!(t("[^a-c]x", "dx"));
        assert!(t("[a-]x", "-x"));
        assert!(t(r"\*", "*"));
        assert!(!t(r"\*", "a"));
        assert!(t("*a*b*c*", "xxaxxbxxcxx"));
        assert!(!t("*a*b*c*", "xxaxxcxxbxx"));
        assert!(t("é*", "éé"));
        // Pathological pattern: still fast (quadratic at worst).
        let long = "a".repeat(5_000);
        assert!(!t(&format!("{}b", "*a".repeat(50)), &long));
    }

    #[test]
    fn text_glob_errors() {
        for bad in ["", "[", "[abc", "[]", "[z-a]", "a\\"] {
            assert!(TextGlob::new(bad).is_err(), "{bad:?} should be refused");
        }
        assert!(TextGlob::new("write").unwrap().is_literal());
        assert!(!TextGlob::new("wri*").unwrap().is_literal());
    }

    #[test]
    fn path_globs_anchor_relative_patterns_at_the_workspace() {
        let ws = Some("/ws");
        assert!(pm("src/**", "/ws/src/a/b.rs", ws));
        assert!(pm("src/**", "/ws/src", ws));
        assert!(!pm("src/**", "/ws/srcx/a", ws));
        assert!(!pm("src/**", "/ws/lib/a.rs", ws));
        assert!(!pm("src/**", "/elsewhere/src/a.rs", ws));
        assert!(pm("src/*.rs", "/ws/src/a.rs", ws));
        assert!(!pm("src/*.rs", "/ws/src/x/a.rs", ws));
        assert!(pm("**/*.rs", "/ws/a.rs", ws));
        assert!(pm("**/*.rs", "/ws/x/y/a.rs", ws));
        assert!(pm("**", "/ws", ws));
        assert!(!pm("**", "/tmp/x", ws));
        assert!(pm("src/**/mod.rs", "/ws/src/mod.rs", ws));
        assert!(pm("src/**/mod.rs", "/ws/src/a/b/mod.rs", ws));
        assert!(pm("./src/../lib/*", "/ws/lib/x", ws));
        assert!(pm("../shared/**", "/shared/x", ws));
        assert!(pm("/etc/**", "/etc/passwd", ws));
        assert!(pm("/**", "/anything/at/all", ws));
        assert!(pm("src//a", "/ws/src/a", ws));
        // Without a workspace, relative patterns only match relative paths.
        assert!(pm("src/**", "src/a", None));
        assert!(!pm("src/**", "/ws/src/a", None));
        assert!(pm("../x", "../x", None));
        // Glob characters in the workspace are literal.
        assert!(pm("a", "/w[1]/a", Some("/w[1]")));
        assert!(!pm("a", "/w1/a", Some("/w[1]")));
    }

    #[test]
    fn path_glob_errors() {
        for bad in ["", "src/**.rs", "a**/b", "src/*/../x", "src/[", "**/.."] {
            assert!(PathGlob::new(bad).is_err(), "{bad:?} should be refused");
        }
        assert!(PathGlob::new("src/../../x").is_ok());
    }
}
