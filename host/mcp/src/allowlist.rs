//! An HTTP (`url`) MCP server's host allowlist: the client reaches the
//! URL's own host and port, plus the hosts of the row's `[mcp.sandbox]
//! hosts` (`name`, `name:port`, `*.suffix`, `*`), and nothing else. A
//! redirect is followed only to an allowed host and only when it keeps the
//! request (307, 308); a redirect to another host is refused, and the
//! connection error says which host and how to allow it.

use std::sync::{Arc, Mutex};

use crate::config::McpServerConfig;

/// Most redirects followed for one request.
const MAX_REDIRECTS: usize = 10;

/// `host:port` of a URL (the scheme's port when none is written).
fn authority(url: &reqwest::Url) -> Option<(String, u16)> {
    Some((url.host_str()?.to_ascii_lowercase(), url.port_or_known_default()?))
}

/// Whether `pattern` (`name`, `name:port`, `*.suffix`, `*`) admits `host:port`.
fn admits(pattern: &str, host: &str, port: u16) -> bool {
    let pattern = pattern.trim().to_ascii_lowercase();
    if pattern == "*" {
        return true;
    }
    let (name, want_port) = match pattern.rsplit_once(':') {
        Some((n, p)) if !n.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => (n.to_string(), p.parse().ok()),
        _ => (pattern.clone(), None),
    };
    let name = name.trim_start_matches('[').trim_end_matches(']');
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let name_ok = match name.strip_prefix("*.") {
        Some(suffix) => host.ends_with(&format!(".{suffix}")),
        None => name == host,
    };
    name_ok && want_port.is_none_or(|p: u16| p == port)
}

/// The client for row `c`: redirects only to allowed hosts; a refusal is
/// also written to `refused`, for the connection error.
pub(crate) fn http_client(c: &McpServerConfig, refused: Arc<Mutex<Option<String>>>) -> Result<reqwest::Client, String> {
    let url = c.url.as_deref().unwrap_or_default();
    let own = reqwest::Url::parse(url)
        .ok()
        .as_ref()
        .and_then(authority)
        .ok_or_else(|| format!("`url` {url}: not an http(s) URL with a host"))?;
    let extra = c.sandbox.hosts.clone();
    let name = c.name.clone();
    let policy = reqwest::redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() > MAX_REDIRECTS {
            return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
        }
        let Some((host, port)) = authority(attempt.url()) else {
            return attempt.error("a redirect to a URL without a host");
        };
        let allowed = (host == own.0 && port == own.1) || extra.iter().any(|p| admits(p, &host, port));
        if !allowed {
            let allows = std::iter::once(format!("{}:{}", own.0, own.1)).chain(extra.iter().cloned());
            let why = format!(
                "MCP server `{name}` redirected to {host}:{port}, which is not in its host allowlist ({}): refused. \
                 An HTTP MCP server reaches only its own host unless its row widens the list: \
                 `[mcp.sandbox] hosts = [\"{host}\"]` (`wharf mcp add --host {host} …`), or `[bundle.sandbox] hosts` \
                 for a bundle's server",
                allows.collect::<Vec<_>>().join(", ")
            );
            let mut slot = refused.lock().unwrap_or_else(|e| e.into_inner());
            *slot = Some(why.clone());
            return attempt.error(why);
        }
        // 301/302/303 would turn the POST into a bodyless GET: not followed.
        if matches!(attempt.status(), reqwest::StatusCode::TEMPORARY_REDIRECT | reqwest::StatusCode::PERMANENT_REDIRECT)
        {
            attempt.follow()
        } else {
            attempt.stop()
        }
    });
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .redirect(policy)
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_admit_their_hosts_only() {
        assert!(admits("localhost", "localhost", 8080));
        assert!(admits("LOCALHOST:8080", "localhost", 8080));
        assert!(!admits("localhost:8081", "localhost", 8080));
        assert!(admits("*.example.com", "api.example.com", 443));
        assert!(!admits("*.example.com", "example.com", 443));
        assert!(!admits("example.com", "evil-example.com", 443));
        assert!(admits("*", "anything", 1));
        assert!(admits("[::1]:9", "[::1]", 9));
    }
}
