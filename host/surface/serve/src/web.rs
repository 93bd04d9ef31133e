//! `wharf web` and `wharf serve` as commands: the flags, starting a
//! [`Harness`], and serving the session API over it — `wharf web` with the
//! web UI's pages beside it (the page is a client of that same API). The
//! routes, the security rules (token, `Host`, `Origin`, non-loopback only
//! with `--allow-remote` and a configured token) and the event streams are
//! the rest of this crate (see `docs/api.md` and `docs/openapi.json`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use clap::Args;
use tokio_util::sync::CancellationToken;
use wharf_cli_common::HostArgs;
use wharf_harness::Harness;

use crate::{Access, BindRequest, ServeOptions, Server};

const INDEX_HTML: &str = include_str!("../assets/index.html");
const APP_JS: &str = include_str!("../assets/app.js");
const APP_CSS: &str = include_str!("../assets/app.css");

/// Listening and session flags shared by `wharf web` and `wharf serve`.
#[derive(Args, Debug, Clone)]
pub struct NetArgs {
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
    #[arg(long = "max-steps", value_name = "N", value_parser = wharf_cli_common::parse_max_steps)]
    pub max_steps: Option<u32>,
    /// Unload a session after this many seconds without a turn, a pending
    /// approval, queued input or a request (it loads again on demand); 0: never.
    #[arg(long = "idle-timeout", value_name = "SECS", default_value_t = 900.0)]
    pub idle_timeout: f64,
}

/// Arguments of `wharf web`.
#[derive(Args, Debug)]
pub struct WebArgs {
    #[allow(missing_docs)] // flattened: the flags document themselves
    #[command(flatten)]
    pub host: HostArgs,
    #[allow(missing_docs)]
    #[command(flatten)]
    pub net: NetArgs,
}

/// Arguments of `wharf serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    #[allow(missing_docs)] // flattened: the flags document themselves
    #[command(flatten)]
    pub host: HostArgs,
    #[allow(missing_docs)]
    #[command(flatten)]
    pub net: NetArgs,
}

/// Runs `wharf web`.
pub async fn run_web(args: WebArgs) -> Result<ExitCode> {
    serve(&args.host, &args.net, Surface::Web).await
}

/// Runs `wharf serve`: a long-running multi-session host over the HTTP
/// API, without the page.
pub async fn run_serve(args: ServeArgs) -> Result<ExitCode> {
    serve(&args.host, &args.net, Surface::Serve).await
}

/// Which command is serving.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    /// `wharf web`: the API and the UI's pages.
    Web,
    /// `wharf serve`: the API only.
    Serve,
}

impl Surface {
    fn name(self) -> &'static str {
        match self {
            Surface::Web => "web",
            Surface::Serve => "serve",
        }
    }
}

/// The UI's pages (behind the same middleware as the API).
fn ui_router() -> Router {
    fn asset(content_type: &'static str, body: &'static str) -> Response {
        ([(header::CONTENT_TYPE, content_type)], body).into_response()
    }
    Router::new()
        .route("/", get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }))
        .route("/app.js", get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }))
        .route("/app.css", get(|| async { asset("text/css; charset=utf-8", APP_CSS) }))
        .route("/favicon.ico", get(|| async { StatusCode::NO_CONTENT }))
}

/// `wharf web` logs to a file; its terminal gets one line per warning and
/// per failed plugin version (not per retry), saying what keeps serving.
fn spawn_notices(host: &Harness) {
    let mut notices = wharf_cli_common::output::take_notices();
    let mut changes = host.plugins.subscribe();
    let plugins = host.plugins.clone();
    tokio::spawn(async move {
        let mut failed = std::collections::HashSet::new();
        loop {
            let line = tokio::select! {
                Some(n) = async { match notices.as_mut() { Some(rx) => rx.recv().await, None => std::future::pending().await } } => n,
                r = changes.recv() => match r {
                    Ok(wharf_core::events::EventKind::PluginReloadFailed(p)) => {
                        if failed.len() >= 1024 {
                            failed.clear();
                        }
                        if !failed.insert((p.id.clone(), p.digest.clone())) {
                            continue;
                        }
                        let serving = plugins.versions().get(&p.id).map(|v| v.digest.clone());
                        let log = wharf_cli_common::output::log_file_shown();
                        wharf_cli_common::output::reload_failed_notice(&p, serving.as_deref(), log.as_deref())
                    }
                    Ok(wharf_core::events::EventKind::PluginLoaded(p) | wharf_core::events::EventKind::PluginUnloaded(p)) => {
                        failed.retain(|(id, _)| *id != p.id);
                        continue;
                    }
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                },
            };
            eprintln!("wharf web: ⚠ {line}");
        }
    });
}

/// Starts the host and serves the API (and, for `web`, the UI) until Ctrl-C.
pub async fn serve(host_args: &HostArgs, net: &NetArgs, surface: Surface) -> Result<ExitCode> {
    let req = BindRequest {
        bind: net.bind.clone(),
        token: net.token.clone(),
        allow_remote: net.allow_remote,
        allowed_hosts: net.allowed_hosts.clone(),
    };
    let (ip, token) = crate::check_bind(&req)?;
    let token = match token {
        Some(t) => t,
        None => crate::random_token()?,
    };
    anyhow::ensure!(
        net.idle_timeout.is_finite() && net.idle_timeout >= 0.0 && net.idle_timeout <= 365.0 * 86400.0,
        "--idle-timeout: expected seconds from 0 to a year"
    );
    let file = net.mcp_config.clone();
    let host = Harness::start_with(&host_args.options(), |config| wharf_mcp::config::add_file(config, file.as_deref()))
        .await?;
    let mcp = host.mcp.clone();
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(ip, net.port))
        .await
        .with_context(|| format!("cannot listen on {ip}:{}", net.port))?;
    let addr = listener.local_addr()?;
    let access = Access::new(&req, addr, token.clone());
    let shown = crate::shown_addr(addr);
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "http://{shown}/?token={token}")?;
        out.flush()?;
    }
    let idle = (net.idle_timeout > 0.0).then(|| Duration::from_secs_f64(net.idle_timeout));
    eprintln!(
        "wharf {}: profile `{}`, workspace {}, sessions in {} (Ctrl-C to stop)",
        surface.name(),
        host.options.profile,
        host.workspace.display(),
        host.store.describe()
    );
    if surface == Surface::Web {
        spawn_notices(&host);
    }
    let shutdown = CancellationToken::new();
    let options = ServeOptions {
        idle_timeout: idle,
        surface: surface.name().into(),
        max_steps: net.max_steps,
        ..ServeOptions::default()
    };
    let server = Server::new(Arc::new(host), options, shutdown.clone());
    let ui = (surface == Surface::Web).then(ui_router);
    let router = crate::router(server.clone(), access, ui);
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
        .context("server failed")?;
    server.close().await;
    if let Some(m) = mcp {
        m.stop().await;
    }
    Ok(ExitCode::SUCCESS)
}
