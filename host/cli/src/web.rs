//! `wharf web`: a local web UI over the session logs.
//!
//! The server is a view: every page is built from session events (read back
//! from the log file, then streamed live from [`SessionLog::subscribe_from`])
//! and every action goes through the agent (`followup`, `cancel`) or the
//! approval channel, whose answers the pipeline logs. Nothing the pages show
//! is kept only here.
//!
//! # Security
//!
//! - Binds `127.0.0.1` by default. A non-loopback `--bind` is refused unless
//!   `--allow-remote` is given **and** a token is configured (`--token` or
//!   `WHARF_WEB_TOKEN`, at least 16 characters).
//! - Every request needs the token: the URL printed at start carries it once
//!   (`/?token=…`); the server answers with an `HttpOnly`, `SameSite=Strict`
//!   cookie and a redirect to `/`. API clients may send `Authorization:
//!   Bearer TOKEN` or `X-Wharf-Token: TOKEN` instead. Missing or wrong: 401.
//! - The `Host` header must name the server (`127.0.0.1:PORT`,
//!   `localhost:PORT`, `[::1]:PORT`, the bound address, or an
//!   `--allowed-host`): 403 otherwise (DNS rebinding).
//! - On state-changing requests and event streams, an `Origin` header (which
//!   browsers send cross-origin) must be `http://` + the request's own
//!   allowed `Host`, and `Sec-Fetch-Site: cross-site` is refused: 403.
//! - Pages are plain HTML/CSS/JS embedded in the binary, served with a strict
//!   Content-Security-Policy; everything from sessions is inserted as text,
//!   except model markdown, which the server renders and sanitises
//!   (`render.rs`: raw HTML shown as text, `ammonia` over the result).
//!
//! # API (JSON unless noted)
//!
//! | method and path | what |
//! |---|---|
//! | `GET /api/info` | version, profile, workspace |
//! | `GET /api/sessions?workspace=DIR` | stored sessions (of that workspace only, if given), newest first, with `live`/`running`, `workspace` and `usage` |
//! | `POST /api/sessions` `{text?}` | new session (a live agent); `text` is its first prompt |
//! | `GET /api/sessions/{id}` | one session's summary (with `usage`) |
//! | `GET /api/sessions/{id}/events?from=SEQ` | SSE: the log from `SEQ` (or `Last-Event-ID`+1), then live; assistant messages carry `html` (sanitised markdown), `edit`/`write` calls a unified `diff` |
//! | `POST /api/sessions/{id}/prompt` `{text}` | queue a followup (resumes the session if needed) |
//! | `POST /api/sessions/{id}/cancel` | cancel the running turn |
//! | `POST /api/sessions/{id}/approvals/{call}` `{outcome}` | answer an `ask`: `allowed-once`, `allowed-for-session`, `rejected` |
//! | `POST /api/sessions/{id}/resume` | open the session for new turns |
//! | `POST /api/sessions/{id}/fork` `{at_seq?}` | fork at a turn boundary (default: the last) and open it |
//! | `GET /api/plugins` | loaded components (grants, versions, tools) and MCP servers |
//! | `GET /api/plugins/events` | SSE: plugin and MCP status changes, history first |

mod api;
mod render;
mod security;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Args;
use tokio_util::sync::CancellationToken;

use crate::host_ctx::{HostArgs, HostCtx};

/// Arguments of `wharf web`.
#[derive(Args, Debug)]
pub struct WebArgs {
    #[command(flatten)]
    pub host: HostArgs,
    /// Address to listen on. Anything but loopback needs `--allow-remote` and a configured token.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1")]
    pub bind: String,
    /// Port; 0 picks a free one.
    #[arg(long, default_value_t = 8787)]
    pub port: u16,
    /// Access token (default: a random one per launch). Required with `--allow-remote`.
    #[arg(long, env = "WHARF_WEB_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Allow a non-loopback `--bind`.
    #[arg(long = "allow-remote")]
    pub allow_remote: bool,
    /// Another `Host` the server may be reached as (`name` or `name:port`; repeatable).
    #[arg(long = "allowed-host", value_name = "HOST")]
    pub allowed_hosts: Vec<String>,
    /// More MCP servers, over the profile's `[[mcp]]` rows by name (JSON:
    /// `{"mcp": [{"name", "command", "args", "env"} | {"name", "url", "headers"}, "required"]}`).
    #[arg(long = "mcp-config", value_name = "FILE")]
    pub mcp_config: Option<PathBuf>,
    /// Step budget per turn (overrides `agent.max_steps`).
    #[arg(long = "max-steps", value_name = "N", value_parser = crate::host_ctx::parse_max_steps)]
    pub max_steps: Option<u32>,
}

/// Where the server listens and whom it lets in.
#[derive(Debug, Clone)]
pub struct Access {
    /// The per-launch (or configured) token.
    pub token: String,
    /// `Host` values accepted (lowercase `host:port`).
    pub hosts: Vec<String>,
    /// Accept any `Host` (remote mode on an unspecified address).
    pub any_host: bool,
    /// Name of the auth cookie (per port: cookies ignore ports).
    pub cookie: String,
}

/// Checks the bind address and token rules; the address to bind.
pub fn check_bind(args: &WebArgs) -> Result<(IpAddr, Option<String>)> {
    let ip: IpAddr = match args.bind.as_str() {
        "localhost" => IpAddr::from([127, 0, 0, 1]),
        s => s.trim_start_matches('[').trim_end_matches(']').parse().with_context(|| format!("--bind `{s}`"))?,
    };
    let token = args.token.clone().filter(|t| !t.is_empty());
    if let Some(t) = &token
        && (t.len() < 16 || t.chars().any(|c| c.is_whitespace() || c.is_control() || c == ';' || c == ','))
    {
        bail!("the token must be at least 16 characters, without spaces, `;` or `,`");
    }
    if !ip.is_loopback() {
        if !args.allow_remote {
            bail!(
                "refusing to listen on non-loopback address {ip}: the UI can run tools on this machine; \
                 pass --allow-remote (with --token or WHARF_WEB_TOKEN) if you mean it"
            );
        }
        if token.is_none() {
            bail!("--allow-remote needs a configured token (--token or WHARF_WEB_TOKEN)");
        }
    }
    Ok((ip, token))
}

fn random_token() -> Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness for the access token: {e}"))?;
    Ok(hex::encode(bytes))
}

/// Runs `wharf web`.
pub async fn run(args: WebArgs) -> Result<ExitCode> {
    let (ip, token) = check_bind(&args)?;
    let token = match token {
        Some(t) => t,
        None => random_token()?,
    };
    let file = args.mcp_config.clone();
    let host = HostCtx::start_with(&args.host, |config| crate::mcp::add_file(config, file.as_deref())).await?;
    let mcp = host.mcp.clone();
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(ip, args.port))
        .await
        .with_context(|| format!("cannot listen on {ip}:{}", args.port))?;
    let addr = listener.local_addr()?;
    let port = addr.port();
    let mut hosts = vec![format!("127.0.0.1:{port}"), format!("localhost:{port}"), format!("[::1]:{port}")];
    if !ip.is_unspecified() {
        hosts.push(match ip {
            IpAddr::V4(v4) => format!("{v4}:{port}"),
            IpAddr::V6(v6) => format!("[{v6}]:{port}"),
        });
    }
    for h in &args.allowed_hosts {
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
    let access = Access {
        token: token.clone(),
        hosts,
        any_host: args.allow_remote && ip.is_unspecified() && args.allowed_hosts.is_empty(),
        cookie: format!("wharf_token_{port}"),
    };
    // The address to print: where a browser on this machine reaches us.
    let shown = match ip {
        IpAddr::V4(v4) if v4.is_unspecified() => format!("127.0.0.1:{port}"),
        IpAddr::V4(v4) => format!("{v4}:{port}"),
        IpAddr::V6(v6) if v6.is_unspecified() => format!("[::1]:{port}"),
        IpAddr::V6(v6) => format!("[{v6}]:{port}"),
    };
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "http://{shown}/?token={token}")?;
        out.flush()?;
    }
    eprintln!(
        "wharf web: profile `{}`, workspace {}, sessions in {} (Ctrl-C to stop)",
        host.args.profile,
        host.workspace.display(),
        host.store.root().display()
    );
    let shutdown = CancellationToken::new();
    let app = api::App::new(host, mcp.clone(), args.max_steps, shutdown.clone());
    let router = api::router(app.clone(), access);
    let stop = shutdown.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            stop.cancel();
        }
    });
    let graceful = shutdown.clone();
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { graceful.cancelled().await })
        .await
        .context("web server failed")?;
    app.close().await;
    if let Some(m) = mcp {
        m.stop().await;
    }
    Ok(ExitCode::SUCCESS)
}
