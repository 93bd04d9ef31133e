//! Just enough of URLs for `web_fetch`: absolute `http`/`https` URLs and
//! RFC 3986 reference resolution (redirect `Location`s, links in pages).

use std::fmt;

/// An absolute `http` or `https` URL without credentials or fragment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    /// `http` or `https`.
    pub https: bool,
    /// Host, lower case; IPv6 literals keep their brackets.
    pub host: String,
    /// Explicit port, if any.
    pub port: Option<u16>,
    /// Path and query, starting with `/`, percent-encoded where needed.
    pub path_query: String,
}

impl Url {
    /// Parses an absolute URL. Only `http` and `https` are accepted.
    pub fn parse(s: &str) -> Result<Url, String> {
        let s = s.trim();
        let Some((scheme, rest)) = s.split_once("://") else {
            return Err(format!("`{s}` is not an absolute URL (expected http://… or https://…)"));
        };
        let https = match scheme.to_ascii_lowercase().as_str() {
            "http" => false,
            "https" => true,
            other => return Err(format!("unsupported URL scheme `{other}`: only http and https can be fetched")),
        };
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        if authority.contains('@') {
            return Err("URLs with credentials (user@host) are not supported".into());
        }
        let (host, port) = split_host_port(authority)?;
        let tail = tail.split('#').next().unwrap_or("");
        let path_query = if tail.starts_with('/') { tail.to_string() } else { format!("/{tail}") };
        Ok(Url { https, host, port, path_query: encode(&path_query) })
    }

    /// `host` or `host:port` as it goes on the wire.
    pub fn authority(&self) -> String {
        match self.port {
            Some(p) => format!("{}:{p}", self.host),
            None => self.host.clone(),
        }
    }

    fn path(&self) -> &str {
        self.path_query.split('?').next().unwrap_or("/")
    }

    /// Resolves `reference` (absolute, `//host…`, `/path`, `?query`,
    /// `relative/path` or `#fragment`) against this URL.
    pub fn join(&self, reference: &str) -> Result<Url, String> {
        let r = reference.trim();
        if has_scheme(r) {
            return Url::parse(r);
        }
        if let Some(rest) = r.strip_prefix("//") {
            return Url::parse(&format!("{}://{rest}", if self.https { "https" } else { "http" }));
        }
        let r = r.split('#').next().unwrap_or("");
        let path_query = if r.is_empty() {
            self.path_query.clone()
        } else if r.starts_with('?') {
            format!("{}{r}", self.path())
        } else {
            let (p, q) = match r.split_once('?') {
                Some((p, q)) => (p, Some(q)),
                None => (r, None),
            };
            let merged = if p.starts_with('/') {
                p.to_string()
            } else {
                let base = self.path();
                let dir = &base[..base.rfind('/').map_or(0, |i| i + 1)];
                format!("{dir}{p}")
            };
            let mut out = remove_dot_segments(&merged);
            if let Some(q) = q {
                out.push('?');
                out.push_str(q);
            }
            out
        };
        Ok(Url { path_query: encode(&path_query), ..self.clone() })
    }
}

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}{}", if self.https { "https" } else { "http" }, self.authority(), self.path_query)
    }
}

/// Whether `r` starts with `scheme:` (letters, digits, `+-.`, before any
/// `/?#`).
pub fn has_scheme(r: &str) -> bool {
    match r.find(':') {
        Some(i) if i > 0 => {
            let s = &r[..i];
            s.starts_with(|c: char| c.is_ascii_alphabetic())
                && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        }
        _ => false,
    }
}

fn split_host_port(authority: &str) -> Result<(String, Option<u16>), String> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let Some((inner, after)) = rest.split_once(']') else {
            return Err(format!("bad IPv6 host in `{authority}`"));
        };
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p),
            None if after.is_empty() => None,
            None => return Err(format!("bad host `{authority}`")),
        };
        (format!("[{}]", inner.to_ascii_lowercase()), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_ascii_lowercase(), Some(p)),
            None => (authority.to_ascii_lowercase(), None),
        }
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if bare.is_empty() {
        return Err("the URL has no host".into());
    }
    if !bare.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':')) {
        return Err(format!("host `{bare}` is not a plain ASCII host name (use the punycode form for IDNs)"));
    }
    let port = match port {
        None | Some("") => None,
        Some(p) => Some(p.parse::<u16>().map_err(|_| format!("bad port `{p}`"))?),
    };
    Ok((host, port))
}

/// RFC 3986 §5.2.4, on an absolute path.
fn remove_dot_segments(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let segs: Vec<&str> = path.split('/').skip(1).collect();
    let mut trailing = false;
    for (i, seg) in segs.iter().enumerate() {
        let last = i + 1 == segs.len();
        match *seg {
            "." => trailing = last,
            ".." => {
                out.pop();
                trailing = last;
            }
            s => {
                out.push(s);
                trailing = false;
            }
        }
    }
    let mut s = format!("/{}", out.join("/"));
    if trailing && !s.ends_with('/') {
        s.push('/');
    }
    s
}

/// Percent-encodes what may not appear raw in a request target (spaces,
/// controls, non-ASCII, a few delimiters); existing escapes are kept.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_graphic() && !matches!(b, b'"' | b'<' | b'>' | b'`' | b'{' | b'}' | b'|' | b'\\' | b'^') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(s: &str) -> Url {
        Url::parse(s).expect("a test URL")
    }

    #[test]
    fn parses_and_prints() {
        let x = u("HTTP://Example.COM:8080/a b?q=1#frag");
        assert_eq!(x.to_string(), "http://example.com:8080/a%20b?q=1");
        assert_eq!(x.port, Some(8080));
        assert_eq!(u("https://example.com").to_string(), "https://example.com/");
        assert_eq!(u("https://example.com?x").path_query, "/?x");
        assert_eq!(u("http://[::1]:9/").authority(), "[::1]:9");
        assert_eq!(u("https://[::1]/").port, None);
        for bad in ["ftp://x/", "example.com", "http:///x", "http://user:pw@host/", "http://h:99999/", "http://hé/"] {
            assert!(Url::parse(bad).is_err(), "{bad} should not parse");
        }
    }

    #[test]
    fn resolves_references() {
        let base = u("http://a.example/b/c/d;p?q");
        for (r, want) in [
            ("g", "http://a.example/b/c/g"),
            ("./g", "http://a.example/b/c/g"),
            ("g/", "http://a.example/b/c/g/"),
            ("/g", "http://a.example/g"),
            ("//other.example/g", "http://other.example/g"),
            ("?y", "http://a.example/b/c/d;p?y"),
            ("g?y", "http://a.example/b/c/g?y"),
            ("#s", "http://a.example/b/c/d;p?q"),
            ("", "http://a.example/b/c/d;p?q"),
            (".", "http://a.example/b/c/"),
            ("..", "http://a.example/b/"),
            ("../g", "http://a.example/b/g"),
            ("../../../g", "http://a.example/g"),
            ("https://secure.example:8443/x", "https://secure.example:8443/x"),
        ] {
            assert_eq!(base.join(r).map(|x| x.to_string()), Ok(want.to_string()), "{r}");
        }
        assert!(base.join("mailto:x@y").is_err());
        assert!(base.join("javascript:alert(1)").is_err());
    }
}
