//! Where the server listens and whom it lets in: the bind rules, the token
//! and the `Host` values accepted.

use std::net::{IpAddr, SocketAddr};

/// The bind address or token breaks the rules (the message says which and
/// why).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AccessError(pub String);

/// What the operator asked for on the command line.
#[derive(Debug, Clone, Default)]
pub struct BindRequest {
    /// Address to listen on (`127.0.0.1`, `localhost`, `::1`, `0.0.0.0`, …).
    pub bind: String,
    /// A configured token (`None` or empty: a random one per launch).
    pub token: Option<String>,
    /// Whether a non-loopback address was explicitly allowed.
    pub allow_remote: bool,
    /// More `Host` values the server may be reached as (`name` or `name:port`).
    pub allowed_hosts: Vec<String>,
}

/// Who may talk to the server (checked by the middleware on every request).
#[derive(Debug, Clone)]
pub struct Access {
    /// The per-launch (or configured) token.
    pub token: String,
    /// `Host` values accepted (lowercase `host:port`).
    pub hosts: Vec<String>,
    /// Accept any `Host` (remote mode on an unspecified address, no `--allowed-host`).
    pub any_host: bool,
    /// Name of the auth cookie (per port: cookies ignore ports).
    pub cookie: String,
}

/// The shortest token accepted.
pub const MIN_TOKEN_LEN: usize = 16;

/// Checks the bind address and token rules: a non-loopback address needs
/// `allow_remote` **and** a configured token of at least
/// [`MIN_TOKEN_LEN`] characters. Returns the address and the configured
/// token.
pub fn check_bind(req: &BindRequest) -> Result<(IpAddr, Option<String>), AccessError> {
    let ip: IpAddr = match req.bind.as_str() {
        "localhost" => IpAddr::from([127, 0, 0, 1]),
        s => s
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .map_err(|e| AccessError(format!("--bind `{s}`: {e}")))?,
    };
    let token = req.token.clone().filter(|t| !t.is_empty());
    if let Some(t) = &token {
        check_token(t)?;
    }
    if !ip.is_loopback() {
        if !req.allow_remote {
            return Err(AccessError(format!(
                "refusing to listen on non-loopback address {ip}: the API can run tools on this machine; \
                 pass --allow-remote (with --token or WHARF_WEB_TOKEN) if you mean it"
            )));
        }
        if token.is_none() {
            return Err(AccessError("--allow-remote needs a configured token (--token or WHARF_WEB_TOKEN)".into()));
        }
    }
    Ok((ip, token))
}

/// A configured token must be at least [`MIN_TOKEN_LEN`] characters,
/// without spaces, control characters, `;` or `,` (it goes into a cookie).
pub fn check_token(t: &str) -> Result<(), AccessError> {
    if t.len() < MIN_TOKEN_LEN || t.chars().any(|c| c.is_whitespace() || c.is_control() || c == ';' || c == ',') {
        return Err(AccessError("the token must be at least 16 characters, without spaces, `;` or `,`".into()));
    }
    Ok(())
}

/// The `Host` values a server bound to `ip:port` answers to: loopback
/// names, the bound address, and each `extra` name (`name` or `name:port`).
pub fn allowed_hosts(ip: IpAddr, port: u16, extra: &[String]) -> Vec<String> {
    let mut hosts = vec![format!("127.0.0.1:{port}"), format!("localhost:{port}"), format!("[::1]:{port}")];
    if !ip.is_unspecified() {
        hosts.push(match ip {
            IpAddr::V4(v4) => format!("{v4}:{port}"),
            IpAddr::V6(v6) => format!("[{v6}]:{port}"),
        });
    }
    for h in extra {
        let h = h.to_ascii_lowercase();
        hosts.push(if h.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) && !h.ends_with(']') {
            h
        } else {
            format!("{h}:{port}")
        });
    }
    if port == 80 {
        let bare: Vec<String> = hosts.iter().filter_map(|h| h.strip_suffix(":80").map(str::to_string)).collect();
        hosts.extend(bare);
    }
    hosts
}

/// A random token (32 bytes, hex).
pub fn random_token() -> Result<String, AccessError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| AccessError(format!("no randomness for the access token: {e}")))?;
    Ok(hex::encode(bytes))
}

impl Access {
    /// The access rules of a server bound to `addr` (the listener's actual
    /// address) for `req`, with `token`.
    pub fn new(req: &BindRequest, addr: SocketAddr, token: String) -> Access {
        let (ip, port) = (addr.ip(), addr.port());
        let hosts = allowed_hosts(ip, port, &req.allowed_hosts);
        Access {
            token,
            hosts,
            any_host: req.allow_remote && ip.is_unspecified() && req.allowed_hosts.is_empty(),
            cookie: format!("wharf_token_{port}"),
        }
    }
}

/// The address to print for `addr`: where a client on this machine reaches it.
pub fn shown_addr(addr: SocketAddr) -> String {
    let port = addr.port();
    match addr.ip() {
        IpAddr::V4(v4) if v4.is_unspecified() => format!("127.0.0.1:{port}"),
        IpAddr::V4(v4) => format!("{v4}:{port}"),
        IpAddr::V6(v6) if v6.is_unspecified() => format!("[::1]:{port}"),
        IpAddr::V6(v6) => format!("[{v6}]:{port}"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn req(bind: &str, token: Option<&str>, remote: bool) -> BindRequest {
        BindRequest { bind: bind.into(), token: token.map(str::to_string), allow_remote: remote, allowed_hosts: vec![] }
    }

    #[test]
    fn remote_binds_need_the_flag_and_a_token() {
        assert!(check_bind(&req("127.0.0.1", None, false)).is_ok());
        assert!(check_bind(&req("localhost", None, false)).is_ok());
        assert!(check_bind(&req("0.0.0.0", None, false)).is_err());
        assert!(check_bind(&req("0.0.0.0", None, true)).is_err());
        assert!(check_bind(&req("0.0.0.0", Some("short"), true)).is_err());
        assert!(check_bind(&req("0.0.0.0", Some("0123456789abcdef"), true)).is_ok());
        assert!(check_bind(&req("127.0.0.1", Some("0123456789 abcdef"), false)).is_err());
    }

    #[test]
    fn hosts_name_the_port() {
        let r = BindRequest { allowed_hosts: vec!["Box.Lan".into()], ..req("127.0.0.1", None, false) };
        let a = Access::new(&r, "127.0.0.1:4000".parse().unwrap(), "t".into());
        assert!(a.hosts.contains(&"box.lan:4000".to_string()), "{:?}", a.hosts);
        assert!(a.hosts.contains(&"localhost:4000".to_string()));
        assert!(!a.any_host);
        assert_eq!(a.cookie, "wharf_token_4000");
    }
}
