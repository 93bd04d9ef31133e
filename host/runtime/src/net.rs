//! Outbound network checks (destination addresses).
//!
//! Every `wasi:http` request a component makes passes two checks in
//! [`crate::state::HttpPolicy`]: its host must match the plugin's effective
//! allowlist, and every address the host resolves to must be public
//! ([`classify`]). Private, loopback, link-local and other special-purpose
//! addresses are reachable only when the grant has `private_network`, or when
//! an allowlist entry that matches the request names the host literally as
//! an IP address or `localhost` (the operator who writes `127.0.0.1:8080`
//! means it). A wildcard (`*`, `*.domain`) never grants private addresses.
//!
//! **DNS rebinding.** The name is resolved here, then connected to by
//! [`send_pooled`], which would resolve it again.
//! For plain `http` the request is pinned to the vetted address (see
//! [`Vetted::pin`]); for `https` the name stays in the URI because TLS needs
//! it for SNI and certificate verification, so a second lookup may return a
//! different address. A rebound name then only reaches a server that presents
//! a valid certificate for that name, which an internal service will not.
//!
//! **Connection pool.** A vetted request is sent by [`send_pooled`], which
//! keeps HTTP/1.1 keep-alive connections per (plugin, scheme, connect
//! authority) across stores: a model adapter gets a fresh `wasi:http`
//! context for every stream, and without the pool each model request paid
//! a TCP (and TLS) handshake. The pool sits *behind* the checks: every
//! request passes the allowlist first, and a connection is only ever reused
//! for the same plugin and the same destination it was opened to (for plain
//! `http`, the pinned address). The address rule is checked for every new
//! connection: for plain `http` before the request (the address is pinned),
//! for `https` by name when [`send_pooled`] opens one ([`ConnectCheck`]); a
//! request on a pooled connection goes nowhere that was not checked, so it
//! does not resolve the name again.
//!
//! A connection whose response the guest has finished with (an adapter
//! drops its body at `data: [DONE]`) is *coming back*: its pump still has to
//! read the message's end before pooling it, and on a busy worker that pump
//! may not have run yet when the next request of the same plugin looks for
//! an idle connection. That request waits for it (bounded by
//! [`POOL_RETURN_WAIT`]) instead of opening a second connection, which for
//! `https` would cost a TLS handshake.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::client::conn::http1::SendRequest;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody};

use crate::grants::host_allowed;

/// How long a name lookup may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a destination was refused.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum Denial {
    /// No allowlist entry matches the host.
    #[error("{host}:{port} is not in the plugin's allowed hosts (grant.hosts)")]
    NotAllowed {
        /// Host as requested.
        host: String,
        /// Port (explicit or the scheme's default).
        port: u16,
    },
    /// The host is, or resolves to, a non-public address.
    #[error(
        "{host} resolves to {addr}, a {class} address; private networks are not granted \
         (grant.private_network, or list the address literally in grant.hosts)"
    )]
    Private {
        /// Host as requested.
        host: String,
        /// The offending address.
        addr: IpAddr,
        /// Its class, e.g. `loopback (127.0.0.0/8)`.
        class: &'static str,
    },
    /// The name did not resolve.
    #[error("cannot resolve {host}: {reason}")]
    Lookup {
        /// Host as requested.
        host: String,
        /// The resolver's error.
        reason: String,
    },
    /// The lookup took longer than the lookup timeout.
    #[error("resolving {host} timed out")]
    LookupTimeout {
        /// Host as requested.
        host: String,
    },
    /// The request has no usable destination.
    #[error("request URI has no host or port: {0}")]
    BadUri(String),
}

impl Denial {
    /// The `wasi:http` error code the guest sees.
    pub fn code(&self) -> wasmtime_wasi_http::Error {
        use wasmtime_wasi_http::Error as E;
        match self {
            Denial::NotAllowed { .. } => E::HttpRequestDenied,
            Denial::Private { .. } => E::DestinationIpProhibited,
            Denial::Lookup { reason, .. } => E::DnsError { rcode: Some(reason.clone()), info_code: None },
            Denial::LookupTimeout { .. } => E::DnsTimeout,
            Denial::BadUri(_) => E::HttpRequestUriInvalid,
        }
    }
}

/// A destination that passed the checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vetted {
    /// The vetted address to connect to instead of resolving the name
    /// again; `None` when any address is acceptable (nothing to pin).
    pub pin: Option<SocketAddr>,
}

/// Checks a destination against the allowlist `hosts` and the address rule.
/// `host` is without IPv6 brackets; `port` is explicit or the scheme's.
pub async fn vet(hosts: &[String], private_network: bool, host: &str, port: u16) -> Result<Vetted, Denial> {
    if !admit(hosts, private_network, host, port)? {
        return Ok(Vetted { pin: None });
    }
    Ok(Vetted { pin: Some(resolve_public(host, port).await?) })
}

/// The allowlist half of [`vet`]: whether `host:port` is admitted, and if
/// so whether its addresses must still be checked ([`resolve_public`]);
/// they need not be under `private_network` or when a matching entry names
/// the host literally.
pub fn admit(hosts: &[String], private_network: bool, host: &str, port: u16) -> Result<bool, Denial> {
    if host.is_empty() {
        return Err(Denial::BadUri("empty host".into()));
    }
    // Which entries match, and whether one of them names the host literally.
    let (mut matched, mut literal) = (false, false);
    for p in hosts {
        if host_allowed(std::slice::from_ref(p), host, Some(port)) {
            matched = true;
            literal |= names_literal_host(p);
        }
    }
    if !matched {
        return Err(Denial::NotAllowed { host: host.to_string(), port });
    }
    Ok(!(private_network || literal))
}

/// The address half of [`vet`]: resolves `host` (an IP address as is) and
/// requires every address to be public; returns the first.
pub async fn resolve_public(host: &str, port: u16) -> Result<SocketAddr, Denial> {
    let addrs: Vec<SocketAddr> = if let Ok(ip) = host.parse::<IpAddr>() {
        vec![SocketAddr::new(ip, port)]
    } else {
        match tokio::time::timeout(LOOKUP_TIMEOUT, tokio::net::lookup_host((host, port))).await {
            Err(_) => return Err(Denial::LookupTimeout { host: host.to_string() }),
            Ok(Err(e)) => return Err(Denial::Lookup { host: host.to_string(), reason: e.to_string() }),
            Ok(Ok(it)) => it.collect(),
        }
    };
    // All of them: the connector may pick any, and a name that mixes public
    // and private answers is suspicious anyway.
    for a in &addrs {
        if let Some(class) = classify(a.ip()) {
            return Err(Denial::Private { host: host.to_string(), addr: a.ip(), class });
        }
    }
    addrs.first().copied().ok_or_else(|| Denial::Lookup { host: host.to_string(), reason: "no addresses".into() })
}

/// A destination whose addresses are checked ([`resolve_public`]) only when
/// [`send_pooled`] opens a new connection to it: an `https` request by name,
/// whose pooled connections were checked when they were opened. A request
/// that rides one connects nowhere new, so it does not resolve the name
/// again (a lookup per model request, through the system resolver, cost a
/// step up to milliseconds).
#[derive(Debug, Clone)]
pub struct ConnectCheck {
    /// Host as requested.
    pub host: String,
    /// Port (explicit or the scheme's).
    pub port: u16,
}

/// `uri` (plain `http`) with its authority replaced by the vetted address,
/// so the connector does not resolve the name again; `None` if it cannot be
/// built. The `Host` header, set from the original authority, is unchanged.
pub fn pinned_uri(uri: &http::Uri, addr: SocketAddr) -> Option<http::Uri> {
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    http::Uri::builder().scheme("http").authority(addr.to_string()).path_and_query(path).build().ok()
}

/// Whether allowlist pattern `pat` names one host literally as an IP
/// address or `localhost` (with or without a port); wildcards never do.
pub fn names_literal_host(pat: &str) -> bool {
    let name = if let Some(rest) = pat.strip_prefix('[') {
        match rest.split_once(']') {
            Some((inner, _)) => inner,
            None => return false,
        }
    } else {
        match pat.split_once(':') {
            // One colon: `host:port`; more: a bare IPv6 address.
            Some((h, port)) if !port.contains(':') => h,
            _ => pat,
        }
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<IpAddr>().is_ok()
}

/// How long an idle pooled connection is kept.
const POOL_IDLE: Duration = Duration::from_secs(60);
/// Idle connections kept per key, and in all.
const POOL_PER_KEY: usize = 4;
const POOL_TOTAL: usize = 256;
/// How long a pooled connection may take to report ready before a new one
/// is opened instead (it is normally ready at once).
const POOL_READY_WAIT: Duration = Duration::from_millis(50);
/// How long a request with no idle connection waits for one that is coming
/// back (its pump reading the last bytes of a finished response) before it
/// opens a new one. Normally µs; a server that is slow to end its message
/// costs at most this, less than a new TLS connection.
const POOL_RETURN_WAIT: Duration = Duration::from_millis(25);

/// Which connections may serve a request: same plugin, scheme and connect
/// authority (for TLS also the server name, which is the authority's host).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PoolKey {
    plugin: Arc<str>,
    tls: bool,
    authority: String,
}

struct IdleConn {
    sender: SendRequest<WasiBody>,
    since: Instant,
}

/// One key's connections in the pool: the idle ones, and how many are
/// coming back (see the module docs).
#[derive(Default)]
struct KeyConns {
    idle: Vec<IdleConn>,
    returning: usize,
}

/// What [`ConnPool::take`] found.
enum Taken {
    Idle(SendRequest<WasiBody>),
    /// None idle, but some coming back.
    Returning,
    Nothing,
}

/// Idle keep-alive connections, process-wide (see the module docs).
#[derive(Default)]
pub struct ConnPool {
    conns: Mutex<HashMap<PoolKey, KeyConns>>,
    /// Signalled when a connection that was coming back is pooled or closed.
    returned: tokio::sync::Notify,
    opened: AtomicU64,
    reused: AtomicU64,
}

/// Connections opened and reused so far (for benches and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    /// New TCP connections.
    pub opened: u64,
    /// Requests sent on a pooled connection.
    pub reused: u64,
}

impl ConnPool {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PoolKey, KeyConns>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn take(&self, key: &PoolKey) -> Taken {
        let mut conns = self.lock();
        let Some(k) = conns.get_mut(key) else { return Taken::Nothing };
        while let Some(c) = k.idle.pop() {
            if !c.sender.is_closed() && c.since.elapsed() < POOL_IDLE {
                return Taken::Idle(c.sender);
            }
        }
        if k.returning > 0 {
            return Taken::Returning;
        }
        conns.remove(key);
        Taken::Nothing
    }

    /// An idle connection for `key`, waiting up to [`POOL_RETURN_WAIT`] for
    /// one that is coming back when none is idle.
    async fn take_or_wait(&self, key: &PoolKey) -> Option<SendRequest<WasiBody>> {
        let deadline = tokio::time::Instant::now() + POOL_RETURN_WAIT;
        loop {
            // Registered before looking, so a return between the look and
            // the wait is not missed.
            let returned = self.returned.notified();
            tokio::pin!(returned);
            returned.as_mut().enable();
            match self.take(key) {
                Taken::Idle(s) => return Some(s),
                Taken::Nothing => return None,
                Taken::Returning => {}
            }
            if tokio::time::timeout_at(deadline, returned).await.is_err() {
                return match self.take(key) {
                    Taken::Idle(s) => Some(s),
                    Taken::Returning | Taken::Nothing => None,
                };
            }
        }
    }

    fn put(&self, key: PoolKey, sender: SendRequest<WasiBody>) {
        if sender.is_closed() {
            return;
        }
        let mut conns = self.lock();
        let total: usize = conns.values().map(|k| k.idle.len()).sum();
        if total >= POOL_TOTAL {
            // Forget the stale ones; if still full, do not keep this one.
            conns.retain(|_, k| {
                k.idle.retain(|c| !c.sender.is_closed() && c.since.elapsed() < POOL_IDLE);
                !k.idle.is_empty() || k.returning > 0
            });
            if conns.values().map(|k| k.idle.len()).sum::<usize>() >= POOL_TOTAL {
                return;
            }
        }
        let k = conns.entry(key).or_default();
        if k.idle.len() < POOL_PER_KEY {
            k.idle.push(IdleConn { sender, since: Instant::now() });
        }
    }

    fn returning(&self, key: &PoolKey, coming: bool) {
        let mut conns = self.lock();
        if coming {
            conns.entry(key.clone()).or_default().returning += 1;
        } else if let Some(k) = conns.get_mut(key) {
            k.returning = k.returning.saturating_sub(1);
            if k.returning == 0 && k.idle.is_empty() {
                conns.remove(key);
            }
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> PoolStats {
        PoolStats { opened: self.opened.load(Ordering::Relaxed), reused: self.reused.load(Ordering::Relaxed) }
    }
}

/// The process-wide connection pool.
pub fn pool() -> &'static ConnPool {
    static POOL: OnceLock<ConnPool> = OnceLock::new();
    POOL.get_or_init(ConnPool::default)
}

/// The TLS client configuration (webpki roots), built once: building it
/// parses every root certificate.
fn tls_config() -> Arc<rustls::ClientConfig> {
    static TLS: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    TLS.get_or_init(|| {
        let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.into() };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = match rustls::ClientConfig::builder_with_provider(provider).with_safe_default_protocol_versions() {
            Ok(b) => b.with_root_certificates(roots).with_no_client_auth(),
            // The ring provider supports the default versions; keep the
            // process-default builder as a fallback anyway.
            Err(_) => rustls::ClientConfig::builder()
                .with_root_certificates(rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.into() })
                .with_no_client_auth(),
        };
        Arc::new(config)
    })
    .clone()
}

/// The TLS server name for `authority` (`host:port`, IPv6 in brackets).
fn server_name(authority: &str) -> Result<rustls::pki_types::ServerName<'static>, HttpError> {
    use rustls::pki_types::ServerName;
    if let Ok(addr) = authority.parse::<SocketAddr>() {
        return Ok(ServerName::from(addr.ip()));
    }
    let host = authority.rsplit_once(':').map_or(authority, |(h, _)| h);
    ServerName::try_from(host).map(|n| n.to_owned()).map_err(|_| HttpError::HttpRequestUriInvalid)
}

trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static> Stream for T {}

/// Opens a connection to `authority` and spawns its driver task.
async fn connect(authority: &str, tls: bool, timeout: Duration) -> Result<SendRequest<WasiBody>, HttpError> {
    let tcp = match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(authority)).await {
        Ok(s) => s.map_err(HttpError::Connect)?,
        Err(_) => return Err(HttpError::ConnectionTimeout),
    };
    // Requests are written in several pieces (head, body chunks): without
    // this, Nagle holds the last piece until the previous one is ACKed.
    let _ = tcp.set_nodelay(true);
    let stream: Box<dyn Stream> = if tls {
        let name = server_name(authority)?;
        let connector = tokio_rustls::TlsConnector::from(tls_config());
        match tokio::time::timeout(timeout, connector.connect(name, tcp)).await {
            Ok(s) => Box::new(s.map_err(HttpError::Tls)?),
            Err(_) => return Err(HttpError::ConnectionTimeout),
        }
    } else {
        Box::new(tcp)
    };
    // hyper copies every body chunk into its own buffer unless the
    // transport says it takes vectored writes; this adapter forwards them
    // (wasmtime-wasi-http's does not).
    let io = hyper_util::rt::TokioIo::new(stream);
    let (sender, conn) = match tokio::time::timeout(timeout, hyper::client::conn::http1::handshake(io)).await {
        Ok(r) => r?,
        Err(_) => return Err(HttpError::ConnectionTimeout),
    };
    pool().opened.fetch_add(1, Ordering::Relaxed);
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("pooled HTTP connection ended: {e}");
        }
    });
    Ok(sender)
}

/// What [`send_pooled`] returns: the response and the I/O future the
/// `wasi:http` hook contract asks for (the connection is driven by its own
/// task, so this one completes at once).
pub type Sent = (http::Response<WasiBody>, Box<dyn Future<Output = Result<(), HttpError>> + Send>);

/// Sends a request that already passed [`vet`] (its URI is the one to
/// connect to: pinned for plain `http`), on a pooled keep-alive connection
/// of `plugin` to the same destination when one is idle, else on a new one,
/// which `check`, if any, must pass first (the address half of the vetting,
/// deferred to here). Timeouts as `wasmtime_wasi_http::default_send_request`'s.
pub async fn send_pooled(
    plugin: &Arc<str>,
    mut req: http::Request<WasiBody>,
    options: Option<RequestOptions>,
    check: Option<&ConnectCheck>,
) -> Result<Sent, HttpError> {
    let uri = req.uri();
    let authority = uri.authority().ok_or(HttpError::HttpRequestUriInvalid)?;
    let tls = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
    let authority = match authority.port() {
        Some(_) => authority.to_string(),
        None => format!("{authority}:{}", if tls { 443 } else { 80 }),
    };
    let opt =
        |f: fn(&RequestOptions) -> Option<Duration>| options.as_ref().and_then(f).unwrap_or(Duration::from_secs(600));
    let connect_timeout = opt(|o| o.connect_timeout);
    let first_byte_timeout = opt(|o| o.first_byte_timeout);
    let between_bytes = opt(|o| o.between_bytes_timeout).max(Duration::from_nanos(1));
    // Origin form on the wire (scheme and authority only go to proxies).
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str()).to_string();
    *req.uri_mut() = http::Uri::builder().path_and_query(path).build().map_err(|_| HttpError::HttpRequestUriInvalid)?;
    let key = PoolKey { plugin: plugin.clone(), tls, authority };

    // A pooled connection first; if the server closed it before the
    // request went out, hyper hands the request back and a new one is used.
    let mut req = Some(req);
    let mut attempt = 0;
    let (sender, res) = loop {
        attempt += 1;
        let Some(r) = req.take() else { return Err(HttpError::InternalError(Some("request lost".into()))) };
        let pooled = if attempt <= 2 { pool().take_or_wait(&key).await } else { None };
        let (mut sender, reused) = match pooled {
            Some(mut s) => match tokio::time::timeout(POOL_READY_WAIT, s.ready()).await {
                Ok(Ok(())) => (s, true),
                _ => {
                    req = Some(r);
                    continue;
                }
            },
            None => {
                if let Some(c) = check
                    && let Err(d) = resolve_public(&c.host, c.port).await
                {
                    tracing::warn!(plugin = %plugin, "denied outbound HTTP request: {d}");
                    return Err(d.code());
                }
                (connect(&key.authority, tls, connect_timeout).await?, false)
            }
        };
        let sent = tokio::time::timeout(first_byte_timeout, sender.try_send_request(r)).await;
        match sent {
            Err(_) => return Err(HttpError::ConnectionReadTimeout),
            Ok(Ok(res)) => {
                if reused {
                    pool().reused.fetch_add(1, Ordering::Relaxed);
                }
                break (sender, res);
            }
            Ok(Err(mut e)) => match e.take_message() {
                Some(r) if reused => req = Some(r),
                _ => return Err(HttpError::from(e.into_error())),
            },
        }
    };
    // The sender goes back to the pool when the body has been read to its
    // end (a body dropped early closes the connection with it, after a
    // bounded drain).
    let (parts, incoming) = res.into_parts();
    let (tx, rx) = tokio::sync::mpsc::channel(PUMP_FRAMES);
    let handback = Arc::new(Handback { key: key.clone(), state: Mutex::new(HandbackState::default()) });
    tokio::spawn(pump(incoming, tx, (key, sender), PumpDone(handback.clone())));
    let mut timeout = tokio::time::interval(between_bytes);
    timeout.reset();
    let body = PooledBody { rx, pending: None, timeout, ended: false, _handback: BodyDone(handback) };
    Ok((http::Response::from_parts(parts, body.boxed_unsync()), Box::new(async { Ok(()) })))
}

/// Frames a response's pump queues for the guest, and the most it gathers
/// before queueing them (each at most hyper's read buffer), so its memory
/// is bounded: twice this, plus the one in hyper's hands.
const PUMP_FRAMES: usize = 16;
/// The most a guest's read gets in one piece when several frames wait.
const COALESCE_MAX: usize = 64 << 10;

type PumpItem = Result<http_body::Frame<Bytes>, HttpError>;

/// Reads a response body off its connection as fast as frames arrive (up
/// to [`PUMP_FRAMES`] queued ahead), so a streamed reply is not handed to
/// the guest one chunk per round trip between the guest and hyper's
/// connection task (hyper's body channel holds one chunk), and a burst of
/// chunks reaches the guest in one wake-up (gathered first); returns the
/// connection to the pool at the message's end.
///
/// A client that stops reading at its protocol's end marker (an SSE
/// `data: [DONE]`) drops the body before the HTTP message ended: the pump
/// then reads the rest, bounded in bytes and time, and pools the connection
/// only if the message ends; otherwise it is closed.
async fn pump(
    mut incoming: hyper::body::Incoming,
    tx: tokio::sync::mpsc::Sender<PumpItem>,
    back: (PoolKey, SendRequest<WasiBody>),
    // Dropped when the pump returns: after the connection was pooled, or
    // when it is not (a waiter then finds none and opens a new one).
    _done: PumpDone,
) {
    let mut held: Vec<http_body::Frame<Bytes>> = Vec::with_capacity(PUMP_FRAMES);
    loop {
        // A reader that gave up (dropped the body, e.g. after its
        // between-bytes timeout) must not leave the pump waiting on a
        // silent server.
        let frame = tokio::select! {
            f = incoming.frame() => f,
            _ = tx.closed() => break,
        };
        let mut end = match frame {
            None => Some(Ok(())),
            Some(Err(e)) => Some(Err(e)),
            Some(Ok(frame)) => {
                held.push(frame);
                None
            }
        };
        // Gather what hyper decodes from bytes it has already read before
        // waking the reader: each chunk takes a turn of hyper's connection
        // task, and waking the reader per chunk has the guest take each in
        // a call of its own. One yield per chunk lets the connection task
        // run; a yield that brings nothing ends the gathering.
        while end.is_none() && !held.is_empty() && held.len() < PUMP_FRAMES {
            tokio::task::yield_now().await;
            let polled = std::future::poll_fn(|cx| {
                Poll::Ready(match http_body::Body::poll_frame(Pin::new(&mut incoming), cx) {
                    Poll::Ready(f) => Some(f),
                    Poll::Pending => None,
                })
            })
            .await;
            match polled {
                None => break,
                Some(None) => end = Some(Ok(())),
                Some(Some(Err(e))) => end = Some(Err(e)),
                Some(Some(Ok(frame))) => held.push(frame),
            }
        }
        for frame in held.drain(..) {
            if tx.send(Ok(frame)).await.is_err() {
                break;
            }
        }
        match end {
            None if tx.is_closed() => break,
            None => {}
            Some(Ok(())) => {
                // Pooled before the guest sees the end, so its next request
                // finds the connection.
                pool().put(back.0, back.1);
                return;
            }
            Some(Err(e)) => {
                let e = if e.is_timeout() { HttpError::HttpResponseTimeout } else { HttpError::from(e) };
                let _ = tx.send(Err(e)).await;
                return;
            }
        }
    }
    // The reader is gone before the end.
    if http_body::Body::is_end_stream(&incoming) {
        pool().put(back.0, back.1);
        return;
    }
    let drained = tokio::time::timeout(DRAIN_MAX_TIME, async {
        let mut left = DRAIN_MAX_BYTES;
        while let Some(frame) = incoming.frame().await {
            let Ok(frame) = frame else { return false };
            let n = frame.data_ref().map_or(0, Bytes::len);
            if n > left {
                return false;
            }
            left -= n;
        }
        true
    })
    .await;
    if drained == Ok(true) {
        pool().put(back.0, back.1);
    }
}

/// A response body fed by its [`pump`]; applies the between-bytes timeout
/// and hands the guest every data frame already read in one piece (up to
/// [`COALESCE_MAX`]).
struct PooledBody {
    rx: tokio::sync::mpsc::Receiver<PumpItem>,
    /// A frame taken while coalescing that was not data (trailers, an error).
    pending: Option<PumpItem>,
    timeout: tokio::time::Interval,
    ended: bool,
    _handback: BodyDone,
}

/// What a response's body and its pump tell each other so the pool can
/// count its connection as coming back: it is from when the guest drops the
/// body until the pump has pooled (or closed) the connection.
struct Handback {
    key: PoolKey,
    state: Mutex<HandbackState>,
}

#[derive(Default)]
struct HandbackState {
    body_dropped: bool,
    pump_done: bool,
}

impl Handback {
    fn state(&self) -> std::sync::MutexGuard<'_, HandbackState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Held by the body: the guest is done with the response when it drops.
struct BodyDone(Arc<Handback>);

impl Drop for BodyDone {
    fn drop(&mut self) {
        let mut s = self.0.state();
        s.body_dropped = true;
        if !s.pump_done {
            pool().returning(&self.0.key, true);
        }
    }
}

/// Held by the pump: the connection is pooled or gone when it drops.
struct PumpDone(Arc<Handback>);

impl Drop for PumpDone {
    fn drop(&mut self) {
        let mut s = self.0.state();
        s.pump_done = true;
        if s.body_dropped {
            pool().returning(&self.0.key, false);
            drop(s);
            pool().returned.notify_waiters();
        }
    }
}

impl http_body::Body for PooledBody {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, HttpError>>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        let next = match this.pending.take() {
            Some(item) => Poll::Ready(Some(item)),
            None => this.rx.poll_recv(cx),
        };
        match next {
            Poll::Ready(None) => {
                this.ended = true;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                this.ended = true;
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(Some(Ok(frame))) => {
                this.timeout.reset();
                let first = match frame.into_data() {
                    Ok(data) => data,
                    Err(trailers) => return Poll::Ready(Some(Ok(trailers))),
                };
                Poll::Ready(Some(Ok(http_body::Frame::data(this.coalesce(first)))))
            }
            Poll::Pending => match this.timeout.poll_tick(cx) {
                Poll::Ready(_) => {
                    this.ended = true;
                    Poll::Ready(Some(Err(HttpError::ConnectionReadTimeout)))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }
}

impl PooledBody {
    /// `first` plus the data frames already waiting, up to [`COALESCE_MAX`];
    /// anything else waits for the next poll.
    fn coalesce(&mut self, first: Bytes) -> Bytes {
        if first.len() >= COALESCE_MAX || self.rx.is_empty() {
            return first;
        }
        let mut buf = bytes::BytesMut::from(first);
        while buf.len() < COALESCE_MAX {
            // Only data frames are merged; anything else is kept for the
            // next poll.
            match self.rx.try_recv() {
                Ok(Ok(f)) => match f.into_data() {
                    Ok(d) => buf.extend_from_slice(&d),
                    Err(trailers) => {
                        self.pending = Some(Ok(trailers));
                        break;
                    }
                },
                Ok(Err(e)) => {
                    self.pending = Some(Err(e));
                    break;
                }
                Err(_) => break,
            }
        }
        buf.freeze()
    }
}

/// What a dropped body may still read so its connection can be reused.
const DRAIN_MAX_BYTES: usize = 64 << 10;
const DRAIN_MAX_TIME: Duration = Duration::from_millis(500);

/// `None` for a public (globally routable) address, else the class that
/// makes it non-public, e.g. `loopback (127.0.0.0/8)`.
pub fn classify(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

/// Non-public IPv4 ranges (IANA special-purpose registry), most specific
/// first where they nest.
const V4_RANGES: &[([u8; 4], u32, &str)] = &[
    ([0, 0, 0, 0], 32, "unspecified (0.0.0.0)"),
    ([0, 0, 0, 0], 8, "\"this network\" (0.0.0.0/8)"),
    ([10, 0, 0, 0], 8, "private (10.0.0.0/8)"),
    ([100, 64, 0, 0], 10, "carrier-grade NAT (100.64.0.0/10)"),
    ([127, 0, 0, 0], 8, "loopback (127.0.0.0/8)"),
    ([169, 254, 0, 0], 16, "link-local (169.254.0.0/16)"),
    ([172, 16, 0, 0], 12, "private (172.16.0.0/12)"),
    ([192, 0, 0, 0], 24, "IETF protocol assignment (192.0.0.0/24)"),
    ([192, 0, 2, 0], 24, "documentation (192.0.2.0/24)"),
    ([192, 88, 99, 0], 24, "6to4 relay anycast (192.88.99.0/24)"),
    ([192, 168, 0, 0], 16, "private (192.168.0.0/16)"),
    ([198, 18, 0, 0], 15, "benchmarking (198.18.0.0/15)"),
    ([198, 51, 100, 0], 24, "documentation (198.51.100.0/24)"),
    ([203, 0, 113, 0], 24, "documentation (203.0.113.0/24)"),
    ([224, 0, 0, 0], 4, "multicast (224.0.0.0/4)"),
    ([255, 255, 255, 255], 32, "broadcast (255.255.255.255)"),
    ([240, 0, 0, 0], 4, "reserved (240.0.0.0/4)"),
];

fn classify_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let n = u32::from(ip);
    V4_RANGES.iter().find(|(base, bits, _)| prefix_match32(n, u32::from(Ipv4Addr::from(*base)), *bits)).map(|r| r.2)
}

fn prefix_match32(a: u32, b: u32, bits: u32) -> bool {
    let mask = if bits == 0 { 0 } else { u32::MAX << (32 - bits) };
    a & mask == b & mask
}

fn prefix_match128(a: u128, b: u128, bits: u32) -> bool {
    let mask = if bits == 0 { 0 } else { u128::MAX << (128 - bits) };
    a & mask == b & mask
}

/// Non-public IPv6 ranges that do not embed an IPv4 address.
const V6_RANGES: &[(u128, u32, &str)] = &[
    (0, 128, "unspecified (::)"),
    (1, 128, "loopback (::1)"),
    (0x0064_ff9b_0001 << 80, 48, "local-use NAT64 (64:ff9b:1::/48)"),
    (0x0100 << 112, 64, "discard-only (100::/64)"),
    (0x2001_0db8 << 96, 32, "documentation (2001:db8::/32)"),
    (0x2001 << 112, 23, "IETF special-purpose (2001::/23)"),
    (0x3fff << 112, 20, "documentation (3fff::/20)"),
    (0xfc00 << 112, 7, "unique local (fc00::/7)"),
    (0xfe80 << 112, 10, "link-local (fe80::/10)"),
    (0xfec0 << 112, 10, "site-local (fec0::/10)"),
    (0xff00 << 112, 8, "multicast (ff00::/8)"),
];

fn classify_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let n = u128::from(ip);
    if let Some(r) = V6_RANGES.iter().find(|(base, bits, _)| prefix_match128(n, *base, *bits)) {
        return Some(r.2);
    }
    // Forms that carry an IPv4 address: judged by that address.
    let embedded = if prefix_match128(n, 0xffff << 32, 96) || prefix_match128(n, 0, 96) {
        // IPv4-mapped ::ffff:a.b.c.d and IPv4-compatible ::a.b.c.d.
        Some(n as u32)
    } else if prefix_match128(n, 0x0064_ff9b << 96, 96) {
        // NAT64 well-known prefix 64:ff9b::/96.
        Some(n as u32)
    } else if prefix_match128(n, 0x2002 << 112, 16) {
        // 6to4 2002:AABB:CCDD::/48.
        Some((n >> 80) as u32)
    } else {
        None
    };
    embedded.and_then(|v4| classify_v4(Ipv4Addr::from(v4))).map(|_| match ip.segments()[0] {
        0x2002 => "6to4 form of a non-public IPv4 address",
        0x0064 => "NAT64 form of a non-public IPv4 address",
        _ => "IPv4-mapped/compatible form of a non-public IPv4 address",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use anyhow::Context as _;

    fn class(s: &str) -> Option<&'static str> {
        classify(s.parse().with_context(|| format!("not an address: {s}")).expect("a test address"))
    }

    #[test]
    fn public_addresses_pass() {
        for a in [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.215.14",
            "100.63.255.255",
            "100.128.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "192.169.0.1",
            "198.20.0.1",
            "223.255.255.255",
            "2606:4700:4700::1111",
            "2a00:1450:4001:80b::200e",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:0808:0808::1",
        ] {
            assert_eq!(class(a), None, "{a} should be public");
        }
    }

    #[test]
    fn non_public_addresses_are_classified() {
        let cases = [
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "this network"),
            ("10.1.2.3", "private"),
            ("100.64.0.1", "carrier-grade NAT"),
            ("100.127.255.255", "carrier-grade NAT"),
            ("127.0.0.1", "loopback"),
            ("127.255.255.254", "loopback"),
            ("169.254.169.254", "link-local"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.0.0.8", "IETF"),
            ("192.0.2.1", "documentation"),
            ("192.168.1.1", "private"),
            ("198.18.0.1", "benchmarking"),
            ("198.19.255.255", "benchmarking"),
            ("198.51.100.7", "documentation"),
            ("203.0.113.9", "documentation"),
            ("224.0.0.1", "multicast"),
            ("239.255.255.250", "multicast"),
            ("240.0.0.1", "reserved"),
            ("255.255.255.255", "broadcast"),
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("fc00::1", "unique local"),
            ("fd12:3456::1", "unique local"),
            ("fe80::1", "link-local"),
            ("febf::1", "link-local"),
            ("fec0::1", "site-local"),
            ("ff02::1", "multicast"),
            ("2001:db8::1", "documentation"),
            ("2001::1", "IETF special-purpose"),
            ("100::1", "discard"),
            ("::ffff:127.0.0.1", "IPv4-mapped"),
            ("::ffff:10.0.0.1", "IPv4-mapped"),
            ("::ffff:169.254.169.254", "IPv4-mapped"),
            ("::127.0.0.1", "IPv4-mapped/compatible"),
            ("64:ff9b::7f00:1", "NAT64"),
            ("64:ff9b:1::1", "local-use NAT64"),
            ("2002:7f00:0001::1", "6to4"),
            ("2002:c0a8:0101::1", "6to4"),
        ];
        for (a, want) in cases {
            let got = class(a).unwrap_or_else(|| panic!("{a} should not be public"));
            assert!(got.contains(want), "{a}: got {got:?}, want {want:?}");
        }
    }

    #[test]
    fn literal_host_patterns() {
        for p in
            ["127.0.0.1", "127.0.0.1:8080", "localhost", "LOCALHOST:3000", "[::1]", "[::1]:8080", "::1", "10.0.0.5"]
        {
            assert!(names_literal_host(p), "{p}");
        }
        for p in ["*", "*.localhost", "example.com", "example.com:443", "*.10.0.0.1", "localhost.example.com", "[::1"] {
            assert!(!names_literal_host(p), "{p}");
        }
    }

    fn hosts(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[tokio::test]
    async fn allowlist_then_addresses() -> anyhow::Result<()> {
        // Not in the allowlist at all.
        let d = vet(&hosts(&["example.com"]), true, "127.0.0.1", 80).await;
        assert_eq!(d, Err(Denial::NotAllowed { host: "127.0.0.1".into(), port: 80 }));
        // A wildcard does not grant loopback…
        let d = vet(&hosts(&["*"]), false, "127.0.0.1", 8080).await;
        assert!(matches!(d, Err(Denial::Private { class, .. }) if class.contains("loopback")), "{d:?}");
        let d = vet(&hosts(&["*"]), false, "::ffff:10.1.1.1", 80).await;
        assert!(matches!(d, Err(Denial::Private { .. })), "{d:?}");
        // …nor a name that resolves to it.
        let d = vet(&hosts(&["*"]), false, "localhost", 8080).await;
        assert!(matches!(d, Err(Denial::Private { .. })), "{d:?}");
        // `private_network` does.
        assert_eq!(vet(&hosts(&["*"]), true, "127.0.0.1", 8080).await, Ok(Vetted { pin: None }));
        // So does an entry naming the address or `localhost` literally.
        assert_eq!(vet(&hosts(&["127.0.0.1:8080"]), false, "127.0.0.1", 8080).await, Ok(Vetted { pin: None }));
        assert_eq!(vet(&hosts(&["*", "localhost"]), false, "localhost", 9).await, Ok(Vetted { pin: None }));
        // A literal entry for another port does not match, so `*` decides.
        let d = vet(&hosts(&["*", "127.0.0.1:8080"]), false, "127.0.0.1", 8081).await;
        assert!(matches!(d, Err(Denial::Private { .. })), "{d:?}");
        // A public literal passes and is pinned.
        assert_eq!(
            vet(&hosts(&["*"]), false, "1.1.1.1", 443).await,
            Ok(Vetted { pin: Some("1.1.1.1:443".parse().context("parsing 1.1.1.1:443")?) })
        );
        Ok(())
    }

    #[test]
    fn pinning_keeps_path_and_query() -> anyhow::Result<()> {
        let uri: http::Uri =
            "http://example.com:8080/a/b?c=d".parse().context("parsing http://example.com:8080/a/b?c=d")?;
        let v4 = pinned_uri(&uri, "93.184.215.14:8080".parse().context("parsing 93.184.215.14:8080")?);
        assert_eq!(v4.map(|u| u.to_string()).as_deref(), Some("http://93.184.215.14:8080/a/b?c=d"));
        let bare: http::Uri = "http://example.com".parse().context("parsing http://example.com")?;
        let v6 = pinned_uri(&bare, "[2606:4700::1]:80".parse().context("parsing [2606:4700::1]:80")?);
        assert_eq!(v6.map(|u| u.to_string()).as_deref(), Some("http://[2606:4700::1]:80/"));
        Ok(())
    }

    #[test]
    fn denials_map_to_guest_codes() {
        use wasmtime_wasi_http::Error as E;
        assert!(matches!(Denial::NotAllowed { host: "a".into(), port: 1 }.code(), E::HttpRequestDenied));
        let p = Denial::Private { host: "a".into(), addr: IpAddr::V4(Ipv4Addr::LOCALHOST), class: "loopback" };
        assert!(matches!(p.code(), E::DestinationIpProhibited));
        assert!(p.to_string().contains("grant.private_network"), "{p}");
    }

    /// A loopback HTTP/1.1 server answering every request with `hello`
    /// (keep-alive); returns its address and a counter of accepted
    /// connections.
    /// How [`keepalive_server`] answers each request.
    #[derive(Clone, Copy)]
    enum Reply {
        /// `hello`, with a content length.
        Hello,
        /// A chunked `[DONE]`, and the message's end 3 ms later, as a model
        /// server's stream ends after its `data: [DONE]`.
        LateEnd,
    }

    /// A keep-alive server answering every GET with `reply`; counts
    /// connections.
    async fn keepalive_server(reply: Reply) -> (SocketAddr, Arc<AtomicU64>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("binding a local port");
        let addr = listener.local_addr().expect("reading the local address");
        let accepted = Arc::new(AtomicU64::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                // A late end goes out at once, not held by Nagle until the
                // client's delayed ACK of the data before it.
                let _ = s.set_nodelay(true);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        let Ok(n) = s.read(&mut chunk).await else { return };
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        // GET requests without a body: one per blank line.
                        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            buf.drain(..end + 4);
                            let sent = match reply {
                                Reply::Hello => s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello").await,
                                Reply::LateEnd => {
                                    let head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n6\r\n[DONE]\r\n";
                                    match s.write_all(head).await {
                                        Ok(()) => {
                                            tokio::time::sleep(Duration::from_millis(3)).await;
                                            s.write_all(b"0\r\n\r\n").await
                                        }
                                        Err(e) => Err(e),
                                    }
                                }
                            };
                            if sent.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        (addr, accepted)
    }

    /// `GET http://ADDR/x` with an empty body.
    fn get_request(addr: SocketAddr) -> http::Request<WasiBody> {
        let body: WasiBody = http_body_util::Empty::<Bytes>::new().map_err(|never| match never {}).boxed_unsync();
        http::Request::get(format!("http://{addr}/x")).body(body).expect("building the request")
    }

    /// Sends [`get_request`] on `plugin`'s pool; its response.
    async fn send_get(plugin: &Arc<str>, addr: SocketAddr) -> http::Response<WasiBody> {
        let (res, _io) = send_pooled(plugin, get_request(addr), None, None).await.expect("sending the request");
        res
    }

    /// Sends [`get_request`], reads the response's first data frame and
    /// drops the body there (as an adapter does at `data: [DONE]`).
    async fn first_data_then_drop(plugin: &Arc<str>, addr: SocketAddr) -> Option<Bytes> {
        let mut body = send_get(plugin, addr).await.into_body();
        body.frame().await.and_then(|f| f.ok()).and_then(|f| f.into_data().ok())
    }

    async fn get(plugin: &Arc<str>, addr: SocketAddr) -> String {
        let bytes = send_get(plugin, addr).await.into_body().collect().await.expect("reading the body").to_bytes();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The next request of a plugin that dropped its previous response at
    /// its protocol's end marker waits for that connection to come back
    /// rather than opening another (for `https`, another TLS handshake).
    #[tokio::test(flavor = "current_thread")]
    async fn a_request_waits_for_the_connection_a_finished_response_is_handing_back() {
        let (addr, accepted) = keepalive_server(Reply::LateEnd).await;
        let p: Arc<str> = Arc::from("pool-test-handback");
        for round in 0..3 {
            // Done at the marker: the message's end is still on its way, so
            // the pump cannot have pooled the connection yet.
            assert_eq!(first_data_then_drop(&p, addr).await.as_deref(), Some(&b"[DONE]"[..]), "round {round}");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1, "each request after the first reused the connection");
        let key = PoolKey { plugin: p.clone(), tls: false, authority: addr.to_string() };
        // The last one comes back too.
        let back = pool().take_or_wait(&key).await;
        assert!(back.is_some());
    }

    /// A server whose replies never end after their data; counts
    /// connections and notes when the first one is closed.
    async fn never_ending_server() -> (SocketAddr, Arc<AtomicU64>, Arc<std::sync::atomic::AtomicBool>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("binding a local port");
        let addr = listener.local_addr().expect("reading the local address");
        let accepted = Arc::new(AtomicU64::new(0));
        let first_closed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (count, closed) = (accepted.clone(), first_closed.clone());
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let n = count.fetch_add(1, Ordering::SeqCst);
                let _ = s.set_nodelay(true);
                let closed = closed.clone();
                tokio::spawn(async move {
                    let mut chunk = [0u8; 4096];
                    let _ = s.read(&mut chunk).await;
                    let head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n6\r\n[DONE]\r\n";
                    let _ = s.write_all(head).await;
                    // Then never the end; note when the client gives up.
                    while let Ok(n) = s.read(&mut chunk).await {
                        if n == 0 {
                            break;
                        }
                    }
                    if n == 0 {
                        closed.store(true, Ordering::SeqCst);
                    }
                });
            }
        });
        (addr, accepted, first_closed)
    }

    /// A connection whose message never ends is waited for only briefly:
    /// the next request opens another while the first one's pump is still
    /// draining it (it gives up after `DRAIN_MAX_TIME`).
    #[tokio::test(flavor = "current_thread")]
    async fn the_wait_for_a_connection_coming_back_is_bounded() {
        let (addr, accepted, first_closed) = never_ending_server().await;
        let p: Arc<str> = Arc::from("pool-test-handback-never");
        for round in 0..2 {
            assert_eq!(first_data_then_drop(&p, addr).await.as_deref(), Some(&b"[DONE]"[..]), "round {round}");
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 2, "the second request opened its own connection");
        assert!(
            !first_closed.load(Ordering::SeqCst),
            "the second request waited until the first connection was given up"
        );
        // And the pump does give up on it.
        let deadline = tokio::time::Instant::now() + DRAIN_MAX_TIME * 4;
        while !first_closed.load(Ordering::SeqCst) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(first_closed.load(Ordering::SeqCst), "the never-ending connection was not closed");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pooled_connections_are_reused_per_plugin_only() {
        let (addr, accepted) = keepalive_server(Reply::Hello).await;
        let a: Arc<str> = Arc::from("pool-test-a");
        let b: Arc<str> = Arc::from("pool-test-b");
        for _ in 0..3 {
            assert_eq!(get(&a, addr).await, "hello");
        }
        // Three requests of one plugin: one connection.
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
        // Another plugin never gets that plugin's connection.
        assert_eq!(get(&b, addr).await, "hello");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        assert_eq!(get(&a, addr).await, "hello");
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_address_check_runs_when_a_connection_is_opened_not_when_one_is_reused() -> anyhow::Result<()> {
        let (addr, accepted) = keepalive_server(Reply::Hello).await;
        let p: Arc<str> = Arc::from("pool-test-check");
        let request = || get_request(addr);
        // `localhost` resolves to a loopback address: the check refuses it.
        let refused = ConnectCheck { host: "localhost".into(), port: addr.port() };
        let denied = send_pooled(&p, request(), None, Some(&refused)).await;
        assert!(matches!(denied, Err(HttpError::DestinationIpProhibited)), "{:?}", denied.map(|_| ()));
        assert_eq!(accepted.load(Ordering::SeqCst), 0, "no connection was opened");
        // A connection opened under a check that passed (here: none needed)…
        let (res, _io) = send_pooled(&p, request(), None, None).await.context("sending the request")?;
        let _ = res.into_body().collect().await.context("reading the body")?;
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
        // …serves the next request without resolving again: it connects
        // nowhere new.
        let (res, _io) = send_pooled(&p, request(), None, Some(&refused)).await.context("sending the request")?;
        let bytes = res.into_body().collect().await.context("reading the body")?.to_bytes();
        assert_eq!(&bytes[..], b"hello");
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
        assert!(pool().stats().reused >= 1);
        Ok(())
    }

    #[tokio::test]
    async fn admit_then_resolve_is_vet() -> anyhow::Result<()> {
        // Admitted without an address check: a literal entry, or private networks granted.
        assert_eq!(admit(&hosts(&["127.0.0.1:8080"]), false, "127.0.0.1", 8080), Ok(false));
        assert_eq!(admit(&hosts(&["*"]), true, "example.com", 443), Ok(false));
        // A name under a wildcard needs one; its addresses decide.
        assert_eq!(admit(&hosts(&["*"]), false, "localhost", 443), Ok(true));
        assert!(matches!(resolve_public("localhost", 443).await, Err(Denial::Private { .. })));
        assert_eq!(resolve_public("1.1.1.1", 443).await, Ok("1.1.1.1:443".parse().context("parsing 1.1.1.1:443")?));
        assert!(matches!(admit(&hosts(&["example.com"]), false, "other.com", 443), Err(Denial::NotAllowed { .. })));
        assert!(matches!(admit(&hosts(&["*"]), false, "", 443), Err(Denial::BadUri(_))));
        Ok(())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_body_dropped_unread_does_not_lose_the_connection() {
        let (addr, accepted) = keepalive_server(Reply::Hello).await;
        let p: Arc<str> = Arc::from("pool-test-drop");
        let res = send_get(&p, addr).await;
        drop(res);
        // The drain runs in the background; the next request may open a
        // connection before it is back only if the drain is slow.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(get(&p, addr).await, "hello");
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    /// A loopback server answering one request with `n` chunks of a chunked
    /// body, all written at once.
    async fn chunked_server(n: usize) -> SocketAddr {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("binding a local port");
        let addr = listener.local_addr().expect("reading the local address");
        tokio::spawn(async move {
            let Ok((mut s, _)) = listener.accept().await else { return };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            let mut reply = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
            for i in 0..n {
                reply.extend_from_slice(format!("a\r\nchunk-{i:03}\n\r\n").as_bytes());
            }
            reply.extend_from_slice(b"0\r\n\r\n");
            let _ = s.write_all(&reply).await;
            let _ = s.read(&mut buf).await;
        });
        addr
    }

    /// Chunks that came in one read reach a reader already waiting in one
    /// piece, not one chunk per wake-up (for an adapter, one guest call
    /// per chunk). A current-thread runtime, so the reader could run
    /// between any two of the pump's turns.
    #[tokio::test(flavor = "current_thread")]
    async fn chunks_read_together_reach_a_waiting_reader_together() -> anyhow::Result<()> {
        let n = 12;
        let addr = chunked_server(n).await;
        let p: Arc<str> = Arc::from("pool-test-gather");
        let res = send_get(&p, addr).await;
        let mut body = res.into_body();
        // The reader is a task of its own, as the agent's is: each wake-up
        // queues it behind the tasks already woken.
        let reader = tokio::spawn(async move {
            let mut pieces = Vec::new();
            while let Some(frame) = body.frame().await {
                let frame = frame.context("reading the body")?;
                pieces.push(frame.into_data().ok().context("a trailers frame, not data")?.len() / 10);
            }
            anyhow::Ok(pieces)
        });
        let pieces = reader.await.context("joining the reader")??;
        assert_eq!(pieces, vec![n], "chunks per piece");
        Ok(())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_streamed_body_is_read_ahead_boundedly_and_handed_over_in_pieces() -> anyhow::Result<()> {
        let n = 200;
        let addr = chunked_server(n).await;
        let p: Arc<str> = Arc::from("pool-test-coalesce");
        let res = send_get(&p, addr).await;
        let mut body = res.into_body();
        // The pump reads ahead while nobody reads the body…
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut frames = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.context("reading the body")?;
            frames.push(frame.into_data().ok().context("a trailers frame, not data")?);
        }
        // …so the first read gets several chunks in one piece, never more
        // than one gathered piece may hold. (How many chunks that is depends
        // on when the pump task ran during the sleep — on a loaded machine
        // hyper may hand it dozens at once — so the bound is the byte cap.)
        let first = frames[0].len() / 10;
        assert!(first >= 2, "first piece holds {first} chunks");
        assert!(frames.iter().all(|f| f.len() <= COALESCE_MAX), "a piece exceeds the gathering cap");
        let all: Vec<u8> = frames.iter().flat_map(|f| f.iter().copied()).collect();
        let want: String = (0..n).map(|i| format!("chunk-{i:03}\n")).collect();
        assert_eq!(String::from_utf8_lossy(&all), want);
        assert!(frames.len() < n, "{} pieces for {n} chunks", frames.len());
        Ok(())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_body_dropped_while_the_server_is_silent_closes_its_connection() -> anyhow::Result<()> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.context("binding a local port")?;
        let addr = listener.local_addr().context("reading the local address")?;
        let (closed_tx, closed_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let Ok((mut s, _)) = listener.accept().await else { return };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n").await;
            // Then nothing: wait for the client to close the connection.
            let eof = loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break true,
                    Ok(_) => continue,
                }
            };
            let _ = closed_tx.send(eof);
        });
        let p: Arc<str> = Arc::from("pool-test-silent");
        assert_eq!(first_data_then_drop(&p, addr).await.as_deref(), Some(&b"hello"[..]));
        // The pump notices, drains for at most DRAIN_MAX_TIME, then closes.
        let closed = tokio::time::timeout(DRAIN_MAX_TIME * 4, closed_rx).await;
        assert!(matches!(closed, Ok(Ok(true))), "the connection stayed open after the body was dropped");
        let key = PoolKey { plugin: p, tls: false, authority: addr.to_string() };
        assert!(matches!(pool().take(&key), Taken::Nothing));
        Ok(())
    }
}
