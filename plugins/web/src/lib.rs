//! `web`: the `web_fetch` tool — GET a URL over `wasi:http` and return it
//! as markdown (default), plain text or the raw body.
//!
//! # What may be reached
//!
//! The component requests `hosts = ["*"]`; the effective allowlist is that
//! request intersected with the operator's grant, i.e. exactly the profile
//! row's `grant.hosts` (a row without hosts reaches nothing). The host checks
//! every request: the host must be allowlisted and, unless the grant has
//! `private_network` or the allowlist names the host literally by address or
//! as `localhost`, every address it resolves to must be public. Redirects are
//! followed here, one new request per hop, so each hop passes the same
//! checks; a refused hop is reported with the URL it tried to reach.
//!
//! # Configuration (the profile row's `config` table)
//!
//! ```toml
//! [plugin.config]
//! max_bytes = 1048576          # ceiling for a call's max_bytes (body bytes read)
//! default_max_bytes = 262144   # when the call gives none
//! max_redirects = 5            # hops followed before giving up
//! user_agent = "…"             # default: wharf-web-fetch/VERSION
//! ```
//!
//! The call's wall-clock limit is the host's (`grant.timeout_ms`).

mod html;
mod url;
#[cfg(target_arch = "wasm32")]
mod wasi_http;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use wharf_sdk::prelude::*;

use crate::html::Flavor;
use crate::url::Url;

/// Largest `max_bytes` unless configured.
const DEFAULT_MAX_BYTES: usize = 1 << 20;
/// `max_bytes` of a call that gives none, unless configured.
const DEFAULT_CALL_BYTES: usize = 256 << 10;
/// Redirect hops followed unless configured.
const DEFAULT_REDIRECTS: u32 = 5;
/// Body bytes shown with an HTTP error status.
const ERROR_BODY_CHARS: usize = 2000;

#[derive(Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
enum Format {
    /// HTML converted to markdown; other text as is.
    #[default]
    Markdown,
    /// HTML converted to plain text; other text as is.
    Text,
    /// The body as received (decoded as text).
    Raw,
}

#[derive(Deserialize, JsonSchema)]
struct FetchArgs {
    /// The http:// or https:// URL to fetch.
    url: String,
    /// `markdown` (default: HTML becomes markdown with links), `text` (HTML
    /// becomes plain text) or `raw` (the body as received).
    format: Option<Format>,
    /// Read at most this many bytes of the body (default 262144; the
    /// operator's configured maximum applies). Longer bodies are cut off and
    /// marked as truncated.
    max_bytes: Option<u64>,
}

/// The plugin's configuration.
#[derive(Deserialize, Debug)]
#[serde(default, deny_unknown_fields)]
struct Config {
    max_bytes: usize,
    default_max_bytes: usize,
    max_redirects: u32,
    user_agent: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_bytes: DEFAULT_MAX_BYTES,
            default_max_bytes: DEFAULT_CALL_BYTES,
            max_redirects: DEFAULT_REDIRECTS,
            user_agent: None,
        }
    }
}

/// Status line and headers of a response (names lower case).
pub(crate) struct Head {
    pub status: u16,
    pub headers: Vec<(String, String)>,
}

impl Head {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// Why a request failed, as far as the guest can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code, reason = "built by the wasi:http transport"))]
pub(crate) enum NetError {
    /// The host refused: not in the allowlist.
    Denied,
    /// The host refused: a non-public destination address.
    Prohibited,
    /// The name did not resolve.
    Dns(String),
    /// Connecting or waiting timed out.
    Timeout(String),
    /// Anything else.
    Other(String),
}

/// One HTTP exchange (`wasi:http` in the component, a fake in tests).
pub(crate) trait Transport {
    type Body: Body;
    /// Sends `GET url` with `headers`; returns once the head has arrived.
    fn get(&mut self, url: &Url, headers: &[(&str, &str)]) -> Result<(Head, Self::Body), NetError>;
}

/// A response body.
pub(crate) trait Body {
    /// Reads up to `cap` bytes; `true` when more followed.
    fn read_capped(self, cap: usize) -> Result<(Vec<u8>, bool), NetError>;
}

struct Web;

impl ToolPlugin for Web {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "web",
            env!("CARGO_PKG_VERSION"),
            "web_fetch: fetch a web page (HTML as markdown or text) from the hosts the operator allows.",
        )
        .hosts(["*"])
    }

    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec::new::<FetchArgs>(
            "web_fetch",
            "Fetches a URL with HTTP GET and returns the page: HTML converted to markdown (default) or plain \
             text, other text (plain, JSON, XML…) as is. Only http/https and only the hosts the operator has \
             allowed can be reached; private, loopback and link-local addresses are refused unless granted. \
             Redirects are followed (a few hops), each checked the same way. Binary content (images, PDFs, \
             archives) is refused. Bodies longer than max_bytes are cut off and marked as truncated.",
            ToolMode::Parallel,
        )]
    }

    fn call(name: &str, args: Args, _ctx: &CallContext) -> ToolResult {
        match name {
            "web_fetch" => {
                let a: FetchArgs = args.parse()?;
                let cfg: Config = wharf_sdk::config::get().map_err(|e| {
                    ToolError::new("INVALID_CONFIG", format!("web plugin configuration is invalid: {e}"))
                })?;
                fetch_with_default_transport(a, &cfg)
            }
            other => Err(ToolError::unknown_tool(other)),
        }
    }
}

wharf_sdk::export_tool!(Web);

#[cfg(target_arch = "wasm32")]
fn fetch_with_default_transport(a: FetchArgs, cfg: &Config) -> ToolResult {
    fetch(&mut wasi_http::WasiTransport, a, cfg)
}

#[cfg(not(target_arch = "wasm32"))]
fn fetch_with_default_transport(a: FetchArgs, cfg: &Config) -> ToolResult {
    fetch(&mut NoNetwork, a, cfg)
}

/// Off `wasm32` (native unit tests of the SDK glue) there is no network.
#[cfg(not(target_arch = "wasm32"))]
struct NoNetwork;

#[cfg(not(target_arch = "wasm32"))]
impl Transport for NoNetwork {
    type Body = NoBody;
    fn get(&mut self, _url: &Url, _headers: &[(&str, &str)]) -> Result<(Head, NoBody), NetError> {
        Err(NetError::Other("web_fetch needs wasi:http (build for wasm32-wasip2)".into()))
    }
}

/// Never constructed.
#[cfg(not(target_arch = "wasm32"))]
struct NoBody(std::convert::Infallible);

#[cfg(not(target_arch = "wasm32"))]
impl Body for NoBody {
    fn read_capped(self, _cap: usize) -> Result<(Vec<u8>, bool), NetError> {
        match self.0 {}
    }
}

/// What a content type says about the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Html,
    Text,
    /// No content type: decided by looking at the bytes.
    Unknown,
}

fn kind_of(mime: &str) -> Option<Kind> {
    let textual_app = [
        "json",
        "xml",
        "javascript",
        "ecmascript",
        "x-javascript",
        "x-ndjson",
        "yaml",
        "x-yaml",
        "toml",
        "x-sh",
        "sql",
        "graphql",
        "csv",
        "x-www-form-urlencoded",
    ];
    match mime {
        "" => Some(Kind::Unknown),
        "text/html" | "application/xhtml+xml" => Some(Kind::Html),
        m if m.starts_with("text/") => Some(Kind::Text),
        m if m.ends_with("+json") || m.ends_with("+xml") => Some(Kind::Text),
        m => m.strip_prefix("application/").filter(|s| textual_app.contains(s)).map(|_| Kind::Text),
    }
}

fn looks_binary(bytes: &[u8]) -> bool {
    let head = &bytes[..bytes.len().min(8192)];
    if head.contains(&0) {
        return true;
    }
    // Count invalid UTF-8 sequences (a cut at the end is fine).
    let mut bad = 0;
    let mut rest = head;
    while let Err(e) = std::str::from_utf8(rest) {
        match e.error_len() {
            Some(n) => {
                bad += 1;
                rest = &rest[e.valid_up_to() + n..];
            }
            None => break,
        }
    }
    bad * 20 > head.len().max(1) && !head.is_empty()
}

/// Decodes the body per the declared charset (UTF-8 unless it says
/// ISO-8859-1/Windows-1252); returns the text and a note if the charset was
/// not understood.
fn decode(bytes: &[u8], charset: Option<&str>, truncated: bool) -> (String, Option<String>) {
    let cs = charset.map(|c| c.trim().trim_matches('"').to_ascii_lowercase());
    match cs.as_deref() {
        None | Some("utf-8" | "utf8" | "us-ascii" | "ascii") => {
            let mut s = String::from_utf8_lossy(bytes).into_owned();
            if truncated {
                // A character cut in half by the cap.
                while s.ends_with('\u{fffd}') {
                    s.pop();
                }
            }
            (s, None)
        }
        Some("iso-8859-1" | "latin1" | "iso8859-1" | "l1" | "windows-1252" | "cp1252") => {
            (bytes.iter().map(|&b| char::from(b)).collect(), None)
        }
        Some(other) => (
            String::from_utf8_lossy(bytes).into_owned(),
            Some(format!("charset {other} is not supported; the body was decoded as UTF-8")),
        ),
    }
}

fn net_error(url: &Url, e: &NetError) -> (&'static str, String) {
    match e {
        NetError::Denied => (
            "PERMISSION_DENIED",
            format!(
                "host {} is not in this plugin's allowed hosts (the operator's grant.hosts decides what web_fetch may reach)",
                url.authority()
            ),
        ),
        NetError::Prohibited => (
            "PERMISSION_DENIED",
            format!(
                "{} is, or resolves to, a private, loopback or link-local address, which this plugin may not reach \
                 unless the operator grants private_network",
                url.host
            ),
        ),
        NetError::Dns(d) => ("NETWORK", format!("cannot resolve {}: {d}", url.host)),
        NetError::Timeout(d) => ("TIMEOUT", format!("{} timed out: {d}", url.authority())),
        NetError::Other(d) => ("NETWORK", format!("request to {} failed: {d}", url.authority())),
    }
}

fn is_redirect(status: u16) -> bool {
    matches!(status, 301 | 302 | 303 | 307 | 308)
}

/// Fetches `a.url`, following redirects, and renders the body.
fn fetch<T: Transport>(t: &mut T, a: FetchArgs, cfg: &Config) -> ToolResult {
    let format = a.format.unwrap_or_default();
    let ceiling = cfg.max_bytes.max(1);
    let cap = match a.max_bytes {
        Some(0) => return Err(ToolError::invalid_argument("max_bytes must be at least 1")),
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX).min(ceiling),
        None => cfg.default_max_bytes.clamp(1, ceiling),
    };
    let ua = cfg.user_agent.clone().unwrap_or_else(|| format!("wharf-web-fetch/{}", env!("CARGO_PKG_VERSION")));
    let headers = [
        ("user-agent", ua.as_str()),
        ("accept", "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.9,*/*;q=0.5"),
        ("accept-encoding", "identity"),
    ];
    let start = Url::parse(&a.url).map_err(|e| ToolError::invalid_argument(format!("url: {e}")))?;
    let mut url = start.clone();
    let mut chain: Vec<Url> = Vec::new();
    let (head, body) = loop {
        let (head, body) = match t.get(&url, &headers) {
            Ok(r) => r,
            Err(e) => {
                let (code, reason) = net_error(&url, &e);
                let verb = if code == "PERMISSION_DENIED" { "refused" } else { "failed" };
                let msg = match chain.last() {
                    Some(prev) => format!("redirect from {prev} to {url} {verb}: {reason}"),
                    None => format!("fetching {url} {verb}: {reason}"),
                };
                return Err(ToolError::new(code, msg));
            }
        };
        let location = head.header("location").filter(|_| is_redirect(head.status));
        let Some(location) = location else { break (head, body) };
        if chain.len() as u32 >= cfg.max_redirects {
            return Err(ToolError::new(
                "TOO_MANY_REDIRECTS",
                format!("{start} redirected more than {} times (last: {url} → {location})", cfg.max_redirects),
            ));
        }
        let next = url.join(location).map_err(|e| {
            ToolError::new("BAD_REDIRECT", format!("{url} redirected to {location:?}, which cannot be followed: {e}"))
        })?;
        chain.push(url);
        url = next;
    };

    let content_type = head.header("content-type").unwrap_or("").to_string();
    let mut params = content_type.split(';');
    let mime = params.next().unwrap_or("").trim().to_ascii_lowercase();
    let charset =
        params.filter_map(|p| p.trim().split_once('=')).find(|(k, _)| k.trim().eq_ignore_ascii_case("charset"));
    let charset = charset.map(|(_, v)| v.to_string());
    let Some(mut kind) = kind_of(&mime) else {
        return Err(ToolError::new(
            "UNSUPPORTED_CONTENT_TYPE",
            format!("{url} returned {mime}, which web_fetch does not read (only HTML and text such as JSON or XML)"),
        ));
    };
    if let Some(enc) = head.header("content-encoding").map(str::trim).filter(|e| !e.eq_ignore_ascii_case("identity")) {
        return Err(ToolError::new(
            "UNSUPPORTED_CONTENT_TYPE",
            format!("{url} sent a {enc}-compressed body although identity was asked for; web_fetch cannot decode it"),
        ));
    }
    let error_status = head.status >= 400;
    let read_cap = if error_status { cap.min(64 << 10) } else { cap };
    let (bytes, truncated) = body.read_capped(read_cap).map_err(|e| {
        let (code, reason) = net_error(&url, &e);
        ToolError::new(code, format!("reading the body of {url} failed: {reason}"))
    })?;
    if looks_binary(&bytes) {
        return Err(ToolError::new(
            "UNSUPPORTED_CONTENT_TYPE",
            format!(
                "{url} returned binary content ({}), which web_fetch does not read",
                if mime.is_empty() { "no content type" } else { mime.as_str() }
            ),
        ));
    }
    if kind == Kind::Unknown {
        let lead = String::from_utf8_lossy(&bytes[..bytes.len().min(512)]).trim_start().to_ascii_lowercase();
        kind = if lead.starts_with("<!doctype html") || lead.starts_with("<html") { Kind::Html } else { Kind::Text };
    }
    let (text, charset_note) = decode(&bytes, charset.as_deref(), truncated);
    let (title, content) = match (kind, format) {
        (Kind::Html, Format::Markdown) => {
            let p = html::convert(&text, &url, Flavor::Markdown);
            (p.title, p.body)
        }
        (Kind::Html, Format::Text) => {
            let p = html::convert(&text, &url, Flavor::Text);
            (p.title, p.body)
        }
        _ => (None, text),
    };

    if error_status {
        let snippet: String = content.chars().take(ERROR_BODY_CHARS).collect();
        return Err(ToolError::new(
            "HTTP_ERROR",
            format!("GET {url} returned HTTP {}{}", head.status, if snippet.is_empty() { "" } else { ":\n\n" })
                + &snippet,
        ));
    }

    let shown_type = if mime.is_empty() { "no content type".to_string() } else { mime.clone() };
    let mut out = format!(
        "Fetched {url} (HTTP {}, {shown_type}, {} bytes{})\n",
        head.status,
        bytes.len(),
        if truncated { ", truncated" } else { "" }
    );
    if !chain.is_empty() {
        out.push_str(&format!(
            "Redirected from: {}\n",
            chain.iter().map(Url::to_string).collect::<Vec<_>>().join(" → ")
        ));
    }
    if let Some(t) = &title {
        out.push_str(&format!("Title: {t}\n"));
    }
    if let Some(n) = &charset_note {
        out.push_str(&format!("Note: {n}\n"));
    }
    out.push('\n');
    out.push_str(if content.trim().is_empty() { "(empty body)" } else { content.trim_end() });
    if truncated {
        out.push_str(&format!(
            "\n\n[truncated: stopped reading after {cap} bytes; the response is longer. A larger max_bytes (at most \
             {ceiling}) reads more.]"
        ));
    }
    let details = json!({
        "url": start.to_string(),
        "final_url": url.to_string(),
        "redirects": chain.iter().map(Url::to_string).collect::<Vec<_>>(),
        "status": head.status,
        "content_type": content_type,
        "bytes": bytes.len(),
        "truncated": truncated,
        "title": title,
    });
    Ok(ToolOutput::text(out).with_details(&details))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// Status, headers and body of a canned response.
    type Canned = (u16, Vec<(String, String)>, Vec<u8>);

    /// Canned responses by URL; a URL in `denied` fails like the host's
    /// allowlist would.
    #[derive(Default)]
    struct Fake {
        pages: HashMap<String, Canned>,
        denied: Vec<String>,
        seen: Vec<String>,
    }

    struct FakeBody(Vec<u8>);

    impl Body for FakeBody {
        fn read_capped(self, cap: usize) -> Result<(Vec<u8>, bool), NetError> {
            let more = self.0.len() > cap;
            Ok((self.0[..self.0.len().min(cap)].to_vec(), more))
        }
    }

    impl Transport for Fake {
        type Body = FakeBody;
        fn get(&mut self, url: &Url, _h: &[(&str, &str)]) -> Result<(Head, FakeBody), NetError> {
            let u = url.to_string();
            self.seen.push(u.clone());
            if self.denied.contains(&u) {
                return Err(NetError::Denied);
            }
            let (status, headers, body) = self.pages.get(&u).cloned().ok_or(NetError::Other("no such page".into()))?;
            Ok((Head { status, headers }, FakeBody(body)))
        }
    }

    fn page(fake: &mut Fake, url: &str, status: u16, headers: &[(&str, &str)], body: &str) {
        let h = headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        fake.pages.insert(url.to_string(), (status, h, body.as_bytes().to_vec()));
    }

    fn args(url: &str) -> FetchArgs {
        FetchArgs { url: url.into(), format: None, max_bytes: None }
    }

    #[test]
    fn follows_redirects_hop_by_hop() -> Result<(), Box<dyn std::error::Error>> {
        let mut f = Fake::default();
        page(&mut f, "http://a.test/start", 302, &[("location", "/next")], "");
        page(&mut f, "http://a.test/next", 301, &[("location", "https://b.test/page")], "");
        page(&mut f, "https://b.test/page", 200, &[("content-type", "text/html")], "<title>T</title><h2>Hi</h2>");
        let out = fetch(&mut f, args("http://a.test/start"), &Config::default())
            .map_err(|e| format!("fetching http://a.test/start: {e:?}"))?;
        assert_eq!(f.seen, ["http://a.test/start", "http://a.test/next", "https://b.test/page"]);
        assert!(out.content.starts_with("Fetched https://b.test/page (HTTP 200, text/html"), "{}", out.content);
        assert!(out.content.contains("Redirected from: http://a.test/start → http://a.test/next"), "{}", out.content);
        assert!(out.content.contains("Title: T\n\n## Hi"), "{}", out.content);
        Ok(())
    }

    #[test]
    fn refused_hop_names_the_url() {
        let mut f = Fake::default();
        page(&mut f, "http://a.test/r", 307, &[("location", "http://evil.test:81/x")], "");
        f.denied.push("http://evil.test:81/x".into());
        let e = fetch(&mut f, args("http://a.test/r"), &Config::default()).err().unwrap_or_else(|| panic!("ok"));
        assert_eq!(e.code, "PERMISSION_DENIED");
        assert!(
            e.message.contains("redirect from http://a.test/r to http://evil.test:81/x refused")
                && e.message.contains("evil.test:81 is not in this plugin's allowed hosts"),
            "{}",
            e.message
        );
    }

    #[test]
    fn redirect_loops_stop() {
        let mut f = Fake::default();
        page(&mut f, "http://a.test/loop", 302, &[("location", "/loop")], "");
        let cfg = Config { max_redirects: 3, ..Config::default() };
        let e = fetch(&mut f, args("http://a.test/loop"), &cfg).err().unwrap_or_else(|| panic!("ok"));
        assert_eq!(e.code, "TOO_MANY_REDIRECTS");
        assert_eq!(f.seen.len(), 4);
    }

    #[test]
    fn caps_binary_and_errors() -> Result<(), Box<dyn std::error::Error>> {
        let mut f = Fake::default();
        page(&mut f, "http://a.test/big", 200, &[("content-type", "text/plain")], &"x".repeat(5000));
        page(&mut f, "http://a.test/img", 200, &[("content-type", "image/png")], "\u{89}PNG");
        page(&mut f, "http://a.test/bin", 200, &[], "a\0b");
        page(&mut f, "http://a.test/404", 404, &[("content-type", "text/html")], "<p>Not here</p>");
        page(&mut f, "http://a.test/json", 200, &[("content-type", "application/json; charset=utf-8")], "{\"a\":1}");
        let cfg = Config { max_bytes: 1000, ..Config::default() };
        let a = FetchArgs { max_bytes: Some(1_000_000), ..args("http://a.test/big") };
        let out = fetch(&mut f, a, &cfg).map_err(|e| format!("fetching http://a.test/big: {e:?}"))?;
        assert!(out.content.contains("1000 bytes, truncated"), "{}", out.content);
        assert!(out.content.ends_with("(at most 1000) reads more.]"), "{}", out.content);
        assert!(out.content.contains(&"x".repeat(1000)) && !out.content.contains(&"x".repeat(1001)));
        for (u, code) in
            [("http://a.test/img", "UNSUPPORTED_CONTENT_TYPE"), ("http://a.test/bin", "UNSUPPORTED_CONTENT_TYPE")]
        {
            let e = fetch(&mut f, args(u), &cfg).err().unwrap_or_else(|| panic!("{u} ok"));
            assert_eq!(e.code, code, "{u}: {}", e.message);
        }
        let e = fetch(&mut f, args("http://a.test/404"), &cfg).err().unwrap_or_else(|| panic!("ok"));
        assert_eq!(
            (e.code.as_str(), e.message.as_str()),
            ("HTTP_ERROR", "GET http://a.test/404 returned HTTP 404:\n\nNot here")
        );
        let out = fetch(&mut f, args("http://a.test/json"), &cfg)
            .map_err(|e| format!("fetching http://a.test/json: {e:?}"))?;
        assert!(out.content.ends_with("\n\n{\"a\":1}"), "{}", out.content);
        let e = fetch(&mut f, args("file:///etc/passwd"), &cfg).err().unwrap_or_else(|| panic!("ok"));
        assert_eq!(e.code, "INVALID_ARGUMENT");
        Ok(())
    }
}
