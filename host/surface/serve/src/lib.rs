//! The HTTP API of a multi-session Wharf host, used by `wharf serve` and
//! `wharf web` (whose page is a client of this API, served alongside it).
//!
//! The server is a view over the session store: every answer is built from
//! session events (read back from the log, then streamed live from
//! [`wharf_core::store::SessionLog::subscribe_from`]) and every action goes
//! through a session's agent (`followup`, `steer`, `cancel`) or its approval
//! channel, whose answers the pipeline logs. Each session has its own agent,
//! serving task and approval questions, so a question pending in one never
//! blocks another. A session idle for [`ServeOptions::idle_timeout`] is
//! unloaded (agent dropped, log flushed and closed) and loaded again by the
//! next request that needs it; event streams open across an unload keep
//! going (from the file, then live again), with no event lost or repeated.
//!
//! # Several hosts on one store
//!
//! With a store that has leases (PostgreSQL), a session is loaded on one
//! host at a time. Input sent to a host that does not own the session is
//! stored for the owner ([`wharf_core::SessionStore::push_input`]; the answer names
//! the `owner`), and each loaded session logs the input stored for it. A
//! host's event streams of sessions it does not own follow the store
//! ([`wharf_core::SessionStore::watch`]). Every [`ServeOptions::adopt_every`] a
//! host takes over the sessions the store reports orphaned (their host
//! died) and at once re-runs the durable programs the dead host left
//! unfinished ([`wharf_core::Agent::recover`]); a host that finds it lost a session (input stream ended, append
//! fenced, agent stopped on a store error) drops its loading of it.
//!
//! Sessions' agents come from a [`wharf_harness::Harness`] (its plugins,
//! MCP servers and store); [`run`] is the whole `wharf web` / `wharf
//! serve` command over one. The routes are documented in `docs/api.md` and
//! `docs/openapi.json` (served at `GET /api/openapi.json`; a test checks it
//! against [`route_table`]).
//!
//! # Security
//!
//! Every route is behind [`wharf_http_access::guard`] (the token, `Host`
//! and `Origin` checks, the security headers) and [`check_bind`]'s rules:
//! loopback by default, a non-loopback address only with `allow_remote`
//! and a configured token.

mod api;
mod errors;
mod harness_ops;
mod questions;
pub mod render;
mod server;
pub mod web;

use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use axum::middleware;
use wharf_core::store::StoreError;

pub use api::{MAX_HISTORY, MAX_TEXT, OPENAPI, route_table};
pub use harness_ops::{PluginFeed, UsageView};
pub use server::{ServeOptions, Server};
pub use wharf_http_access::{
    Access, AccessError, BindRequest, MIN_TOKEN_LEN, allowed_hosts, check_bind, check_token, guard, random_token,
    shown_addr,
};

/// A failure of the server (not of one request).
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The bind address or token breaks the rules.
    #[error(transparent)]
    Bind(#[from] AccessError),
    /// The session store failed.
    #[error(transparent)]
    SessionStore(#[from] StoreError),
    /// The host failed (building an agent, …).
    #[error("{0}")]
    Host(String),
}

impl ServeError {
    /// A host error: a store error stays typed (so "not found" is a 404).
    pub fn from_host(e: anyhow::Error) -> Self {
        match e.downcast::<StoreError>() {
            Ok(s) => ServeError::SessionStore(s),
            Err(e) => {
                let mut out = String::new();
                for cause in e.chain() {
                    let text = cause.to_string();
                    if text.is_empty() || out.ends_with(&text) {
                        continue;
                    }
                    if !out.is_empty() {
                        out.push_str(": ");
                    }
                    out.push_str(&text);
                }
                ServeError::Host(out)
            }
        }
    }
}

/// The whole service: the API routes, `extra` routes (e.g. the web UI's
/// pages) beside them, a JSON 404 for anything else, every error answer as
/// `{"error": "…"}` (the framework's own rejections too), all behind the
/// token, Host and Origin checks. Each request's store operations share
/// one retry budget ([`wharf_core::store::retry_scope`]).
pub fn router(server: Arc<Server>, access: Access, extra: Option<Router>) -> Router {
    let mut r = api::api_router(server);
    if let Some(extra) = extra {
        r = r.merge(extra);
    }
    r.fallback(|| async { (StatusCode::NOT_FOUND, axum::Json(serde_json::json!({"error": "not found"}))) })
        .layer(middleware::from_fn(errors::json_errors))
        .layer(middleware::from_fn(|req: axum::extract::Request, next: middleware::Next| {
            wharf_core::store::retry_scope(next.run(req))
        }))
        .layer(middleware::from_fn_with_state(access, guard))
}
