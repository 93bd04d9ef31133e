//! YAML-ish front matter of commands and agents: `---`, `key: value` lines
//! (quotes stripped; a value continued on indented lines is joined), `---`,
//! then the body. Anything fancier is read as text.

/// A markdown file split into front matter and body.
#[derive(Debug, Default)]
pub(crate) struct Doc {
    keys: Vec<(String, String)>,
    pub body: String,
}

impl Doc {
    /// The value of `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.keys.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

fn unquote(v: &str) -> String {
    let v = v.trim();
    let q = |c: char| v.len() >= 2 && v.starts_with(c) && v.ends_with(c);
    if q('"') || q('\'') { v[1..v.len() - 1].to_string() } else { v.to_string() }
}

/// Splits `text` (see the module docs).
pub(crate) fn parse(text: &str) -> Doc {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.lines();
    if lines.next().map(str::trim_end) != Some("---") {
        return Doc { keys: Vec::new(), body: text.to_string() };
    }
    let mut keys: Vec<(String, String)> = Vec::new();
    let mut consumed = text.find('\n').map_or(text.len(), |i| i + 1);
    let mut closed = false;
    for line in lines {
        consumed += line.len() + 1;
        if line.trim_end() == "---" {
            closed = true;
            break;
        }
        if line.starts_with([' ', '\t']) {
            if let Some((_, v)) = keys.last_mut() {
                if !v.is_empty() {
                    v.push(' ');
                }
                v.push_str(line.trim());
            }
            continue;
        }
        if let Some((k, v)) = line.split_once(':') {
            let v = v.trim();
            let v = if matches!(v, "|" | ">" | "|-" | ">-") { String::new() } else { unquote(v) };
            keys.push((k.trim().to_string(), v));
        }
    }
    if !closed {
        return Doc { keys: Vec::new(), body: text.to_string() };
    }
    let body = text.get(consumed.min(text.len())..).unwrap_or_default().to_string();
    Doc { keys, body }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn front_matter_and_body() {
        let d = parse("---\ndescription: \"Say hi\"\nargument-hint: [name]\nlong: a\n  b\n---\nHello $ARGUMENTS\n");
        assert_eq!(d.get("description"), Some("Say hi"));
        assert_eq!(d.get("argument-hint"), Some("[name]"));
        assert_eq!(d.get("long"), Some("a b"));
        assert_eq!(d.body, "Hello $ARGUMENTS\n");
        let plain = parse("no front matter");
        assert_eq!((plain.get("x"), plain.body.as_str()), (None, "no front matter"));
    }
}
