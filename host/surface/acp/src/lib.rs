//! `wharf acp`: the Agent Client Protocol (v1) over stdio, for editors such
//! as Zed. The editor spawns `wharf acp --profile …` and speaks
//! newline-delimited JSON-RPC 2.0 on its stdin/stdout; **stdout carries only
//! protocol messages**, logs go to stderr.
//!
//! Messages (agent side), after the stable v1 schema of the
//! `agent-client-protocol` crate (schema crate 1.17):
//!
//! - `initialize`: protocol version 1; `agentCapabilities`: `loadSession`,
//!   `promptCapabilities.embeddedContext` (text `resource` blocks are inlined
//!   into the prompt; `text` and `resource_link` are always accepted;
//!   `image` is true when the profile's model adapter exports
//!   `wharf:plugin/llm-images` (looked up in its component's export names
//!   at start, [`wharf_harness::models::adapter_exports_images`]); `audio`
//!   is false, see `session/prompt`),
//!   `mcpCapabilities.http` (not `sse`), `sessionCapabilities` `list`,
//!   `resume`, `close` and `systemPrompt` with `mode.override`.
//!   `authMethods`: when the profile's model adapter reads its API key from
//!   an environment variable (its row's `api_key_env`), one `agent` method,
//!   `env-api-key`, naming it; else none. The client's
//!   `session.compaction` and `session.notices` capabilities are kept (see
//!   the table below).
//! - `authenticate {methodId}`: succeeds when that variable is set now (it
//!   cannot be set over the protocol: the editor starts `wharf acp` with it
//!   in its environment), else `-32000`.
//! - A `session/new` or `session/prompt` whose adapter needs a key that is
//!   not set fails with `-32000` "Authentication required" (the variable and
//!   how to set it in `data`), before any model request.
//! - `session/new {cwd, mcpServers, systemPrompt}`: the cwd is the session's
//!   workspace (the profile is composed for it, so `${workspace}` grants and
//!   the project's `.wharf/config.toml` apply; one host per distinct cwd).
//!   Each ACP session is one Wharf session log; the session id is the log's
//!   id. After the response, an `available_commands_update` lists the
//!   host's slash commands ([`wharf_harness::commands`]: one per skill of
//!   the loaded skills plugins) when there are any.
//! - `systemPrompt` (in `session/new`, `session/load`, `session/resume`):
//!   `append` adds the text after everything else in the system prompt;
//!   `override` replaces the profile's base prompt (`agent.system_prompt`)
//!   while plugin sections (skills catalog, project context) stay. Text
//!   blocks only, not empty, at most 256 KiB; another mode or block type is
//!   `-32602` and no session is opened. It lives with the session in this
//!   process (a `session/load` without one keeps it; a new process uses the
//!   profile's prompt unless the client sends it again, as ACP asks).
//! - `mcpServers` (in `session/new`, `session/load` and `session/resume`):
//!   the client's stdio and streamable HTTP servers are started for that
//!   session only, as `[[mcp]]` rows of its own
//!   (`mcp__NAME__TOOL`, plugin id `mcp:NAME`, the same pipeline: guards,
//!   hooks, the profile's policies, approval): their tools live in a
//!   registry layered over the host's, so other sessions never see them.
//!   The name is cut to `[A-Za-z0-9_-]` (other characters become `_`, at
//!   most 32 characters, `_2`… on a repeat); a server named like one of the
//!   profile's `[[mcp]]` rows is not started (the profile's serves). The
//!   client's `env` and `headers` are passed verbatim (no `${env:…}`
//!   expansion). Stdio servers run under the OS sandbox of stdio MCP
//!   servers with the session's workspace read-write, no network and no
//!   other host variables (`wharf_mcp::config`); an HTTP server is reached
//!   at the URL the client gives, like a profile's `url` row (its own host
//!   only: a redirect to another host is refused, see `wharf-mcp`). An HTTP+SSE server (`type: sse`) is
//!   refused with `-32602` before any session is opened. The response waits
//!   until each server has connected or failed its first attempt (a failure
//!   is a warning on stderr and a `plugin/reload-failed` in the log, not an
//!   error). They stop with the session: `session/close`, or the process
//!   exiting.
//! - `session/load {sessionId, cwd, mcpServers}`: reopens the log (crash
//!   repair included), replays its history as `session/update`
//!   notifications (then a `usage_update` with the usage so far), then
//!   responds. A session already open in this process keeps the servers
//!   and system prompt it has.
//! - `session/resume {sessionId, cwd, mcpServers}`
//!   (`sessionCapabilities.resume`): `session/load` without the replay.
//! - `session/list {cwd?, cursor?}` (`sessionCapabilities.list`): the
//!   profile's stored top-level sessions (not subagents') that name a
//!   workspace, filtered by `cwd`, newest activity first (`updatedAt`: the
//!   log file's modification time, else its creation), `title` the first
//!   user message; 100 a page, `nextCursor` the offset of the next. The
//!   store is the profile's (`session.dir` / `session.store`, or
//!   `--session-dir`); a project layer naming another store is not read.
//! - `session/close {sessionId}` (`sessionCapabilities.close`): cancels a
//!   running prompt and stops the session's own MCP servers; a later
//!   `session/load` or `session/resume` continues it (with the servers that
//!   request passes).
//! - `session/prompt`: the prompt becomes a `followup` in the session inbox
//!   and the agent runs until idle. A prompt whose text starts with `/NAME`
//!   of an announced command is expanded to that command's prompt (the rest
//!   of the text as its arguments); any other `/…` is sent as typed. Image
//!   blocks (`Session::prompt_images`) go with the text when the session's
//!   adapter declared images (`llm-images.support()`): each decoded and
//!   bounded by `wharf_core::images` (PNG, JPEG, GIF, WebP; ≤ 5 MiB each
//!   and the adapter's own limit, ≤ 16 and 10 MiB per prompt), logged
//!   inline in the `user/message` and replayed by `session/load` as a
//!   placeholder line (`[image image/png, 12.0 KiB]`); over a limit, or
//!   for a text-only adapter, they are refused with `-32602` naming the
//!   limit or the adapter, before the prompt reaches the log. Audio and
//!   binary resource blocks are refused the same way: a prompt is never
//!   sent with part of it dropped. Updates stream while it runs and all of
//!   them are sent before the response, whose `stopReason` maps the turn's
//!   stop reason: completed → `end_turn`, max_steps → `max_turn_requests`,
//!   max_tokens → `max_tokens`, blocked and a provider content filter →
//!   `refusal`, cancelled → `cancelled`; a failed model request is a JSON-RPC
//!   error (`-32603`, with `data.code`). One prompt at a time per session.
//! - `session/cancel`: cancels the running turn (the loop commits what
//!   streamed, drains started tools, aborts the rest). A permission request
//!   still open is withdrawn with `$/cancel_request` and logged as
//!   `approval/decided{cancelled}`. **The prompt's answer is the turn's
//!   logged stop reason**: a cancel that reaches the turn while it runs ends
//!   it `cancelled` (and a turn that failed after a cancel answers
//!   `cancelled` too, never an error); a cancel that arrives after the loop
//!   has decided how the turn ends — even before the response is written —
//!   finds nothing to cancel, and the response says what the log says
//!   (e.g. `end_turn`). So the answer never disagrees with the log or a
//!   later `session/load`.
//! - `session/request_permission` (agent → client): a policy's `ask`. Options
//!   `allow_once`, `allow_always` (the tool is allowed for the rest of the
//!   session) and `reject_once`. Questions and updates leave through one
//!   ordered task, and the log events before a question (its `tool/call`
//!   and `approval/asked`) are forwarded first, so a request never
//!   precedes the `tool_call` update it refers to.
//! - `elicitation/create` (agent → client): a tool's question to the user
//!   (an MCP server's elicitation or a component's `questions` import
//!   during a call, [`wharf_core::question`]):
//!   form mode, scoped to the session and the tool call, the bounded
//!   message and a flat schema of primitive fields. Sent only to clients
//!   that advertise `elicitation.form`; others get the question declined
//!   (logged). The client's `accept` content is checked against the form
//!   (a misfit answers `cancel`); when the call ends first the request is
//!   withdrawn with `$/cancel_request`. Both ends are in the log
//!   (`question/asked`, `question/answered`).
//! - Session modes are the permission presets (`read-only`, `ask`, `auto`,
//!   `full-access`; `session/new`, `session/load` and `session/resume`
//!   answer `modes` with the current one when the profile has a `permissions` row).
//!   `session/set_mode` switches the preset of the workspace's host, so
//!   every session open in that workspace changes; the others get a
//!   `current_mode_update`.
//!
//! Every update is a projection of the session log ([`Projector`]), the same
//! for live streaming and for replay, so what an editor shows never drifts
//! from the log:
//!
//! | log event | `session/update` |
//! |---|---|
//! | `user/message` | `user_message_chunk` (live: only messages the client did not send itself) |
//! | `assistant/chunk` | `agent_message_chunk` / `agent_thought_chunk` (live) |
//! | `assistant/message` | the same, whole (replay) |
//! | `tool/call` | `tool_call` (`name` the tool's, kind from it, title, locations, raw input, a diff for write/edit) |
//! | `policy/decision` allow, `approval/decided` allowed | `tool_call_update{in_progress}` |
//! | `tool/result` | `tool_call_update{completed\|failed}` with the result text and raw output |
//! | `todo/updated` | `plan` |
//! | `turn/end` error or blocked | `agent_message_chunk` noting it (replay) |
//! | `step/end` | `usage_update` (live; replay: once, at the end): `used` the last request's prompt tokens, `size` the context window (config, else the adapter's), `cost` when every step is priced in one currency |
//! | `compaction/summary` | `compaction_update{completed, summary}` if the client has `session.compaction`, else a live `notice` (info) if it has `session.notices`, else nothing |
//! | `compaction/failed` | `compaction_update{failed, error}`, else a live `notice` (warning), else nothing |
//! | `plugin/loaded` of a new component for a row (hot reload) | live: a `notice` (info) `↻ NAME reloaded` (`… (dev)` for a `dev = true` row) if the client has `session.notices`, else that line as an `agent_message_chunk` |

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agent_client_protocol as sdk;
use agent_client_protocol::v1::schema as acp;
use anyhow::Result;
use clap::Args;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use wharf_core::Agent;
use wharf_core::approval::{Approval, Approver, ChannelApprover, PendingApproval, PendingQuestion};
use wharf_core::events::{
    ApprovalOutcome, COMPACTION_FAILED_EVENT, Event, EventKind, MODEL_EVENT, StopReason, ToolCallEvent,
    ToolResultEvent, Verdict,
};
use wharf_core::plugin::HookPoint;
use wharf_core::question::{Answer, Reply};
use wharf_core::registry::Registry;
use wharf_core::store::SessionStore;

use wharf_cli_common::HostArgs;
use wharf_harness::Harness;
use wharf_harness::commands::Command;
use wharf_mcp::McpManager;
use wharf_mcp::config::McpServerConfig;

/// Arguments of `wharf acp`.
#[derive(Args, Debug)]
pub struct AcpArgs {
    /// Profile and config layers. The workspace of each session is the `cwd`
    /// the editor sends (`--workspace` is ignored).
    #[allow(missing_docs)] // flattened: the flags document themselves
    #[command(flatten)]
    pub host: HostArgs,
}

/// The connection to the editor.
type Cx = sdk::v1::ConnectionTo<sdk::Client>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `wharf acp` until the editor closes stdin.
pub async fn run(args: AcpArgs) -> Result<ExitCode> {
    // Fail fast on a broken profile instead of at the first session/new.
    let config = args.host.load_config()?;
    // The key the profile's adapter reads, set or not (the auth method).
    let key = wharf_harness::models::missing_model_key(&config, args.host.model.as_deref(), |_| false);
    // `promptCapabilities.image`: whether the profile's adapter takes images.
    let images = wharf_harness::models::adapter_exports_images(&config, args.host.model.as_deref());
    // `session/list` reads the profile's store (a workspace's project layer
    // may name another; see the module docs).
    let session_dir = args.host.session_dir.clone().unwrap_or_else(|| config.session.dir.clone());
    let store = wharf_harness::sessions::open_store(config.session.store.as_deref(), session_dir)?;
    let server = Arc::new(Server {
        key,
        images,
        args: args.host,
        store,
        hosts: tokio::sync::Mutex::new(HashMap::new()),
        sessions: Mutex::new(HashMap::new()),
        closed: Mutex::new(HashMap::new()),
        client: Mutex::new(None),
        caps: Mutex::new(ClientCaps::default()),
    });
    // One handle per handler (each closure owns its clone).
    let (on_init, on_new, on_load, on_prompt, on_cancel, on_close) =
        (server.clone(), server.clone(), server.clone(), server.clone(), server.clone(), server.clone());
    let (on_mode, on_auth, on_list, on_resume) = (server.clone(), server.clone(), server.clone(), server.clone());
    let result = sdk::Agent
        .v1()
        .name("wharf")
        .on_receive_request(
            async move |req: acp::InitializeRequest, responder, _cx| {
                if let Some(info) = &req.client_info {
                    *lock(&on_init.client) = Some(info.name.clone());
                }
                *lock(&on_init.caps) = ClientCaps::of(&req.client_capabilities);
                responder.respond(initialize_response(on_init.key.as_ref(), on_init.images))
            },
            sdk::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: acp::AuthenticateRequest, responder, _cx: Cx| {
                responder.respond_with_result(on_auth.authenticate(&req))
            },
            sdk::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: acp::NewSessionRequest, responder, cx: Cx| {
                let server = on_new.clone();
                tokio::spawn(async move {
                    let r = server.new_session(req, cx.clone()).await;
                    let opened = r.as_ref().ok().map(|r| r.session_id.clone());
                    let _ = responder.respond_with_result(r);
                    if let Some(id) = opened {
                        server.announce_commands(&id, &cx).await;
                    }
                });
                Ok(())
            },
            sdk::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: acp::LoadSessionRequest, responder, cx: Cx| {
                let server = on_load.clone();
                tokio::spawn(async move {
                    let id = req.session_id.clone();
                    let reopen = Reopen {
                        id: req.session_id,
                        cwd: req.cwd,
                        servers: req.mcp_servers,
                        system_prompt: req.system_prompt,
                        replay: true,
                    };
                    let r = server.reopen(reopen, cx.clone()).await;
                    let ok = r.is_ok();
                    let _ =
                        responder.respond_with_result(r.map(|(modes, _)| acp::LoadSessionResponse::new().modes(modes)));
                    if ok {
                        server.announce_commands(&id, &cx).await;
                    }
                });
                Ok(())
            },
            sdk::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: acp::ResumeSessionRequest, responder, cx: Cx| {
                let server = on_resume.clone();
                tokio::spawn(async move {
                    let id = req.session_id.clone();
                    let reopen = Reopen {
                        id: req.session_id,
                        cwd: req.cwd,
                        servers: req.mcp_servers,
                        system_prompt: req.system_prompt,
                        replay: false,
                    };
                    let r = server.reopen(reopen, cx.clone()).await;
                    let ok = r.is_ok();
                    let _ = responder
                        .respond_with_result(r.map(|(modes, _)| acp::ResumeSessionResponse::new().modes(modes)));
                    if ok {
                        server.announce_commands(&id, &cx).await;
                    }
                });
                Ok(())
            },
            sdk::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: acp::ListSessionsRequest, responder, _cx: Cx| {
                let server = on_list.clone();
                tokio::spawn(async move {
                    let r = server.list_sessions(&req);
                    let _ = responder.respond_with_result(r);
                });
                Ok(())
            },
            sdk::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: acp::PromptRequest, responder, _cx: Cx| {
                let session = match on_prompt.session(&req.session_id) {
                    Ok(session) => session,
                    Err(e) => return responder.respond_with_error(e),
                };
                if let Err(e) = check_key(&session.host, &on_prompt.args) {
                    return responder.respond_with_error(e);
                }
                // Refused before the prompt reaches the log (and before it
                // takes the session's one prompt slot).
                let images = match session.prompt_images(&req.prompt) {
                    Ok(images) => images,
                    Err(e) => return responder.respond_with_error(e),
                };
                let text = match prompt_text(&req.prompt) {
                    Ok(text) => session.expand_command(text),
                    Err(e) => return responder.respond_with_error(e),
                };
                let token = match session.begin_prompt() {
                    Ok(t) => t,
                    Err(e) => return responder.respond_with_error(e),
                };
                tokio::spawn(async move {
                    let r = session.prompt(text, images, token).await;
                    let _ = responder.respond_with_result(r);
                });
                Ok(())
            },
            sdk::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: acp::CloseSessionRequest, responder, _cx: Cx| {
                let server = on_close.clone();
                tokio::spawn(async move {
                    let r = server.close_session(&req.session_id).await;
                    let _ = responder.respond_with_result(r);
                });
                Ok(())
            },
            sdk::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: acp::SetSessionModeRequest, responder, cx: Cx| {
                let server = on_mode.clone();
                tokio::spawn(async move {
                    let r = server.set_mode(req, cx).await;
                    let _ = responder.respond_with_result(r);
                });
                Ok(())
            },
            sdk::on_receive_request!(),
        )
        .on_receive_notification(
            async move |n: acp::CancelNotification, _cx: Cx| {
                if let Ok(session) = on_cancel.session(&n.session_id) {
                    session.cancel();
                }
                Ok(())
            },
            sdk::on_receive_notification!(),
        )
        .connect_to(sdk::Stdio::new())
        .await;
    // The editor went away: cancel running turns so every log ends its turn.
    server.shutdown().await;
    match result {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            tracing::error!("acp connection failed: {e:?}");
            Ok(ExitCode::from(2))
        }
    }
}

/// The auth method of an adapter key read from the environment.
const ENV_AUTH_METHOD: &str = "env-api-key";

fn initialize_response(key: Option<&wharf_harness::models::MissingKey>, images: bool) -> acp::InitializeResponse {
    let methods = key
        .map(|k| {
            vec![acp::AuthMethod::Agent(
                acp::AuthMethodAgent::new(ENV_AUTH_METHOD, format!("API key in {}", k.var)).description(format!(
                    "The model adapter `{}` reads its API key from the environment variable {}: set it in the \
                     environment the editor starts `wharf acp` with, then restart the agent.",
                    k.adapter, k.var
                )),
            )]
        })
        .unwrap_or_default();
    let caps = acp::AgentCapabilities::new()
        .load_session(true)
        // Images when the profile's adapter exports `llm-images`; audio
        // never (refused, not dropped).
        .prompt_capabilities(acp::PromptCapabilities::new().embedded_context(true).image(images).audio(false))
        // Stdio and streamable HTTP servers; not the deprecated HTTP+SSE.
        .mcp_capabilities(acp::McpCapabilities::new().http(true).sse(false))
        .session_capabilities(
            acp::SessionCapabilities::new()
                .list(acp::SessionListCapabilities::new())
                .resume(acp::SessionResumeCapabilities::new())
                .close(acp::SessionCloseCapabilities::new())
                .system_prompt(
                    acp::SessionSystemPromptCapabilities::new().mode(
                        acp::SessionSystemPromptModeCapabilities::new()
                            .override_(acp::SessionSystemPromptOverrideCapabilities::new()),
                    ),
                ),
        );
    acp::InitializeResponse::new(sdk::schema::ProtocolVersion::V1)
        .agent_capabilities(caps)
        .auth_methods(methods)
        .agent_info(acp::Implementation::new("wharf", env!("CARGO_PKG_VERSION")).title("Wharf"))
}

fn invalid_params(message: impl Into<String>) -> sdk::Error {
    sdk::Error::new(sdk::ErrorCode::INVALID_PARAMS, message)
}

fn internal(message: impl Into<String>) -> sdk::Error {
    sdk::Error::new(sdk::ErrorCode::INTERNAL_ERROR, message)
}

/// `-32000` "Authentication required", with the variable to set.
fn auth_required(key: &wharf_harness::models::MissingKey) -> sdk::Error {
    sdk::Error::auth_required().data(json!({
        "message": key.to_string(),
        "env": key.var,
        "adapter": key.adapter,
        "authMethods": [ENV_AUTH_METHOD],
    }))
}

/// Refuses work that needs the model when its key is not set.
fn check_key(host: &Harness, args: &HostArgs) -> Result<(), sdk::Error> {
    match wharf_harness::models::missing_model_key(
        &host.config,
        args.model.as_deref(),
        wharf_harness::models::env_is_set,
    ) {
        Some(k) => Err(auth_required(&k)),
        None => Ok(()),
    }
}

/// Process-wide state: hosts per workspace and the open sessions.
struct Server {
    args: HostArgs,
    /// The API key variable the profile's adapter reads (set or not).
    key: Option<wharf_harness::models::MissingKey>,
    /// Whether the profile's adapter takes images (`promptCapabilities.image`).
    images: bool,
    /// The profile's session store, for `session/list`.
    store: SessionStore,
    /// One host (config, plugins, store) per workspace; the async mutex makes
    /// concurrent `session/new` calls for one cwd share one load.
    hosts: tokio::sync::Mutex<HashMap<PathBuf, Arc<Harness>>>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// Sessions closed by `session/close`: their log stays open in this
    /// process (the host still logs plugin changes to it), so a later
    /// `session/load` continues it.
    closed: Mutex<HashMap<String, (Agent, Arc<Harness>)>>,
    /// The client's name from `initialize`, for `approval/decided.by`.
    client: Mutex<Option<String>>,
    /// What the client said it can show (from `initialize`).
    caps: Mutex<ClientCaps>,
}

/// The client capabilities the projection depends on.
#[derive(Debug, Clone, Copy, Default)]
struct ClientCaps {
    /// `session.compaction`: `compaction_update` notifications.
    compaction: bool,
    /// `session.notices`: `notice` notifications.
    notices: bool,
    /// `elicitation.form`: `elicitation/create` requests.
    elicitation: bool,
}

impl ClientCaps {
    fn of(caps: &acp::ClientCapabilities) -> Self {
        let session = caps.session.as_ref();
        Self {
            compaction: session.is_some_and(|s| s.compaction.is_some()),
            notices: session.is_some_and(|s| s.notices.is_some()),
            elicitation: caps.elicitation.as_ref().is_some_and(|e| e.form.is_some()),
        }
    }
}

/// `session/load` or `session/resume`.
struct Reopen {
    id: acp::SessionId,
    cwd: PathBuf,
    servers: Vec<acp::McpServer>,
    system_prompt: Option<acp::SystemPrompt>,
    /// `session/load`: send the history first.
    replay: bool,
}

/// Sessions per `session/list` page.
const LIST_PAGE: usize = 100;

impl Server {
    fn session(&self, id: &acp::SessionId) -> Result<Arc<Session>, sdk::Error> {
        lock(&self.sessions).get(id.0.as_ref()).cloned().ok_or_else(|| {
            invalid_params(format!("unknown session `{id}` (create it with session/new or session/load)"))
        })
    }

    async fn host_for(&self, cwd: &Path) -> Result<Arc<Harness>, sdk::Error> {
        if !cwd.is_absolute() {
            return Err(invalid_params(format!("cwd must be an absolute path, got `{}`", cwd.display())));
        }
        let workspace = std::fs::canonicalize(cwd)
            .map_err(|e| invalid_params(format!("cwd `{}` is not usable: {e}", cwd.display())))?;
        if !workspace.is_dir() {
            return Err(invalid_params(format!("cwd `{}` is not a directory", cwd.display())));
        }
        let mut hosts = self.hosts.lock().await;
        if let Some(h) = hosts.get(&workspace) {
            return Ok(h.clone());
        }
        let args = HostArgs { workspace: Some(workspace.clone()), ..self.args.clone() };
        let started = std::time::Instant::now();
        eprintln!("wharf acp: loading plugins for {}…", workspace.display());
        let host =
            Harness::start(&args.options()).await.map_err(|e| internal(format!("cannot start the host: {e:#}")))?;
        // Required MCP servers before the first prompt, so its first step
        // sees their tools (a failed one blocks turns with its error).
        if let Err(e) = host.mcp_ready().await {
            eprintln!("wharf acp: {e}");
        }
        eprintln!(
            "wharf acp: {} plugin(s) ready in {} ms",
            host.plugins.versions().len(),
            started.elapsed().as_millis()
        );
        let host = Arc::new(host);
        hosts.insert(workspace, host.clone());
        Ok(host)
    }

    fn approver_name(&self) -> String {
        match lock(&self.client).as_deref() {
            Some(name) => format!("acp:{name}"),
            None => "acp".to_string(),
        }
    }

    /// Opens (or resumes) a session's agent; with client MCP servers, on a
    /// registry of its own layered over the host's, once they have settled;
    /// with the client's system prompt, if any.
    async fn open(
        &self,
        host: &Arc<Harness>,
        origin: Origin<'_>,
        servers: &[acp::McpServer],
        system: Option<&ClientPrompt>,
    ) -> Result<Opened, sdk::Error> {
        let rows = client_servers(servers, &host.config.mcp);
        let (approver, approvals, questions) = ChannelApprover::with_questions();
        let approver: Arc<dyn Approver> = Arc::new(approver);
        let (base, first_seq, reused) = match origin {
            Origin::Closed(old) => {
                let next = old.log().last_seq() + 1;
                (old, next, true)
            }
            Origin::New | Origin::Resume(_) => {
                let resume = match origin {
                    Origin::Resume(id) => Some(id),
                    _ => None,
                };
                let (agent, first_seq) = host.open_agent(resume, approver.clone(), None).map_err(|e| match resume {
                    Some(id) => invalid_params(format!("cannot load session `{id}`: {e:#}")),
                    None => internal(format!("{e:#}")),
                })?;
                (agent, first_seq, false)
            }
        };
        if rows.is_empty() && !reused && system.is_none() {
            return Ok(Opened { agent: base, first_seq, approvals, questions, mcp: None });
        }
        let (registry, mcp) = if rows.is_empty() {
            (host.plugins.registry().clone(), None)
        } else {
            let registry = Arc::new(Registry::layered(host.plugins.registry().clone()));
            let mcp = McpManager::start(registry.clone(), rows, &host.workspace);
            (registry, Some(mcp))
        };
        let mut config = base.config().clone();
        if let Some(prompt) = system {
            prompt.apply(&mut config, &host.config.agent.system_prompt);
        }
        // The same log, bus (and its listeners); the registry, the approver
        // and the system prompt are this session's.
        let agent = Agent::with_bus(base.log().clone(), registry, base.bus().clone(), approver, config);
        let Some(mcp) = mcp else {
            return Ok(Opened { agent, first_seq, approvals, questions, mcp: None });
        };
        if let Err(e) = mcp.attach_agent(&agent) {
            mcp.stop().await;
            return Err(internal(format!("{e:#}")));
        }
        if !mcp.wait_all().await {
            for s in mcp.status().into_iter().filter(|s| !s.is_ready()) {
                let why = s.error.clone().unwrap_or_else(|| "not ready".into());
                tracing::warn!(session = %agent.session_id(), "the client's MCP server `{}` is not available: {why}", s.server);
            }
        }
        Ok(Opened { agent, first_seq, approvals, questions, mcp: Some(mcp) })
    }

    /// `authenticate`: the method's variable must be set in this process's
    /// environment.
    fn authenticate(&self, req: &acp::AuthenticateRequest) -> Result<acp::AuthenticateResponse, sdk::Error> {
        let Some(key) = self.key.as_ref().filter(|_| req.method_id.0.as_ref() == ENV_AUTH_METHOD) else {
            return Err(invalid_params(format!("unknown authentication method `{}`", req.method_id.0)));
        };
        if wharf_harness::models::env_is_set(&key.var) {
            Ok(acp::AuthenticateResponse::new())
        } else {
            Err(auth_required(key))
        }
    }

    async fn new_session(&self, req: acp::NewSessionRequest, cx: Cx) -> Result<acp::NewSessionResponse, sdk::Error> {
        // Everything the client sent is checked before a session exists.
        let system = req.system_prompt.as_ref().map(client_prompt).transpose()?;
        check_servers(&req.mcp_servers)?;
        let host = self.host_for(&req.cwd).await?;
        check_key(&host, &self.args)?;
        let opened = self.open(&host, Origin::New, &req.mcp_servers, system.as_ref()).await?;
        let id = opened.agent.session_id().to_string();
        let modes = session_modes(&host);
        let session = Session::start(opened, host, cx, self.approver_name(), self.caps())?;
        lock(&self.sessions).insert(id.clone(), session);
        tracing::info!(session = %id, "acp session created");
        Ok(acp::NewSessionResponse::new(acp::SessionId::new(id)).modes(modes))
    }

    fn caps(&self) -> ClientCaps {
        *lock(&self.caps)
    }

    /// `session/load` (history replayed first) and `session/resume` (no
    /// replay): the session's modes.
    async fn reopen(&self, req: Reopen, cx: Cx) -> Result<(Option<acp::SessionModeState>, ()), sdk::Error> {
        let system = req.system_prompt.as_ref().map(client_prompt).transpose()?;
        check_servers(&req.servers)?;
        let id = req.id.0.to_string();
        let open = lock(&self.sessions).get(&id).cloned();
        if let Some(session) = open {
            // Already open in this process: replay its log as it is now.
            if req.replay {
                let events = session.agent.log().subscribe_from(1).map_err(|e| internal(e.to_string()))?;
                let last = session.agent.log().last_seq();
                replay(&cx, &req.id, &session.host, &session.agent, self.caps(), drain(events, last));
            }
            if !req.servers.is_empty() || system.is_some() {
                tracing::warn!(session = %id, "reopening an open session: it keeps its MCP servers and system prompt");
            }
            return Ok((session_modes(&session.host), ()));
        }
        let closed = lock(&self.closed).remove(&id);
        let (host, opened) = match closed {
            Some((agent, host)) => {
                let same = std::fs::canonicalize(&req.cwd).is_ok_and(|c| c == host.workspace);
                if !same {
                    let theirs = host.workspace.display().to_string();
                    lock(&self.closed).insert(id.clone(), (agent, host));
                    return Err(invalid_params(format!("session `{id}` belongs to workspace {theirs}")));
                }
                let opened = self.open(&host, Origin::Closed(agent), &req.servers, system.as_ref()).await?;
                (host, opened)
            }
            None => {
                let host = self.host_for(&req.cwd).await?;
                let opened = self.open(&host, Origin::Resume(&id), &req.servers, system.as_ref()).await?;
                (host, opened)
            }
        };
        if req.replay {
            // History before this process opened the log; what open_agent
            // appended (plugin events) and everything later streams live.
            let history = opened.agent.log().subscribe_from(1).map_err(|e| internal(e.to_string()));
            let history = match history {
                Ok(h) => h,
                Err(e) => {
                    if let Some(m) = &opened.mcp {
                        m.stop().await;
                    }
                    return Err(e);
                }
            };
            let events = drain(history, opened.first_seq.saturating_sub(1));
            replay(&cx, &req.id, &host, &opened.agent, self.caps(), events);
        }
        let modes = session_modes(&host);
        let session = Session::start(opened, host, cx, self.approver_name(), self.caps())?;
        lock(&self.sessions).insert(id, session);
        Ok((modes, ()))
    }

    /// `session/list`: the stored top-level sessions (not subagents') that
    /// name a workspace, newest activity first, [`LIST_PAGE`] a page; the
    /// cursor is the offset of the next page.
    fn list_sessions(&self, req: &acp::ListSessionsRequest) -> Result<acp::ListSessionsResponse, sdk::Error> {
        let cwd = match &req.cwd {
            Some(c) if !c.is_absolute() => {
                return Err(invalid_params(format!("cwd must be an absolute path, got `{}`", c.display())));
            }
            Some(c) => Some(std::fs::canonicalize(c).unwrap_or_else(|_| c.clone())),
            None => None,
        };
        let start = match req.cursor.as_deref() {
            None => 0,
            Some(c) => {
                c.parse::<usize>().map_err(|_| invalid_params(format!("invalid cursor `{}`", one_line(c, 40))))?
            }
        };
        let mut list = self.store.list().map_err(|e| internal(format!("cannot list sessions: {e:#}")))?;
        list.retain(|s| {
            s.header.spawned_by.is_none()
                && s.header.workspace.as_deref().is_some_and(|w| Path::new(w).is_absolute())
                && cwd.as_deref().is_none_or(|w| wharf_harness::sessions::same_workspace(&s.header, w))
        });
        let mut rows: Vec<(String, acp::SessionInfo)> = list
            .into_iter()
            .map(|s| {
                let updated = updated_at(&s.location).unwrap_or_else(|| s.header.created.clone());
                let cwd = PathBuf::from(s.header.workspace.clone().unwrap_or_default());
                let info = acp::SessionInfo::new(acp::SessionId::new(s.id), cwd)
                    .title(s.title.map(|t| one_line(&t, 200)))
                    .updated_at(updated.clone());
                (updated, info)
            })
            .collect();
        rows.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.session_id.0.cmp(&b.1.session_id.0)));
        let total = rows.len();
        let page: Vec<acp::SessionInfo> = rows.into_iter().skip(start).take(LIST_PAGE).map(|(_, i)| i).collect();
        let next = start.saturating_add(LIST_PAGE);
        Ok(acp::ListSessionsResponse::new(page).next_cursor((next < total).then(|| next.to_string())))
    }

    /// Sends the session's `available_commands_update` (after its
    /// `session/new|load|resume` response) when the host offers commands,
    /// and keeps the list for expanding prompts.
    async fn announce_commands(&self, id: &acp::SessionId, cx: &Cx) {
        let Ok(session) = self.session(id) else { return };
        let list = session.host.commands().await;
        if list.is_empty() {
            return;
        }
        let shown = list
            .iter()
            .map(|c| {
                let cmd = acp::AvailableCommand::new(c.name.clone(), c.description.clone());
                match &c.input_hint {
                    Some(h) => cmd
                        .input(acp::AvailableCommandInput::Unstructured(acp::UnstructuredCommandInput::new(h.clone()))),
                    None => cmd,
                }
            })
            .collect();
        *lock(&session.commands) = list;
        let update = acp::SessionUpdate::AvailableCommandsUpdate(acp::AvailableCommandsUpdate::new(shown));
        let _ = cx.send_notification(acp::SessionNotification::new(id.clone(), update));
    }

    /// `session/set_mode`: switches the permission preset of the session's
    /// workspace host (shared by every session open in that workspace, which
    /// each get a `current_mode_update`).
    async fn set_mode(
        &self,
        req: acp::SetSessionModeRequest,
        cx: Cx,
    ) -> Result<acp::SetSessionModeResponse, sdk::Error> {
        let session = self.session(&req.session_id)?;
        wharf_harness::permissions::preset(&req.mode_id.0).map_err(|e| invalid_params(format!("{e:#}")))?;
        let preset = wharf_harness::permissions::switch(&session.host, &req.mode_id.0)
            .await
            .map_err(|e| internal(format!("{e:#}")))?;
        let others: Vec<String> = lock(&self.sessions)
            .iter()
            .filter(|(id, s)| Arc::ptr_eq(&s.host, &session.host) && id.as_str() != req.session_id.0.as_ref())
            .map(|(id, _)| id.clone())
            .collect();
        for id in others {
            let update = acp::SessionUpdate::CurrentModeUpdate(acp::CurrentModeUpdate::new(preset));
            let _ = cx.send_notification(acp::SessionNotification::new(acp::SessionId::new(id), update));
        }
        tracing::info!(session = %req.session_id, "permission preset: {preset}");
        Ok(acp::SetSessionModeResponse::new())
    }

    async fn close_session(&self, id: &acp::SessionId) -> Result<acp::CloseSessionResponse, sdk::Error> {
        let session = lock(&self.sessions).remove(id.0.as_ref()).ok_or_else(|| {
            invalid_params(format!("unknown session `{id}` (create it with session/new or session/load)"))
        })?;
        session.end().await;
        lock(&self.closed).insert(id.0.to_string(), (session.agent.clone(), session.host.clone()));
        tracing::info!(session = %id, "acp session closed");
        Ok(acp::CloseSessionResponse::new())
    }

    async fn shutdown(&self) {
        let sessions: Vec<Arc<Session>> = lock(&self.sessions).drain().map(|(_, s)| s).collect();
        futures::future::join_all(sessions.iter().map(|s| s.end())).await;
        let hosts: Vec<Arc<Harness>> = self.hosts.lock().await.values().cloned().collect();
        for h in hosts {
            h.close().await;
        }
    }
}

/// The ACP session modes: the permission presets, when the profile has a
/// `permissions` row.
fn session_modes(host: &Harness) -> Option<acp::SessionModeState> {
    let current = wharf_harness::permissions::current(host)?;
    let mut modes: Vec<acp::SessionMode> = wharf_harness::permissions::PRESETS
        .iter()
        .map(|(id, what)| acp::SessionMode::new(*id, *id).description(what.to_string()))
        .collect();
    // A profile's own mode (e.g. `workspace-write`) is listed too.
    if wharf_harness::permissions::describe(&current).is_none() {
        modes.push(acp::SessionMode::new(current.clone(), current.clone()));
    }
    Some(acp::SessionModeState::new(current, modes))
}

/// Where [`Server::open`] takes a session's log from.
enum Origin<'a> {
    /// A new session.
    New,
    /// A stored session, by id.
    Resume(&'a str),
    /// A session closed earlier in this process (its log is still open).
    Closed(Agent),
}

/// A session's agent as [`Server::open`] made it.
struct Opened {
    agent: Agent,
    /// First seq the live forwarder sends.
    first_seq: u64,
    approvals: tokio::sync::mpsc::UnboundedReceiver<PendingApproval>,
    /// Tools' questions to the user.
    questions: tokio::sync::mpsc::UnboundedReceiver<PendingQuestion>,
    /// The client's MCP servers of this session.
    mcp: Option<Arc<McpManager>>,
}

/// Longest server name taken from a client.
const MAX_CLIENT_SERVER_NAME: usize = 32;

/// A client's server name as an `[[mcp]]` name: `[A-Za-z0-9_-]`, no `__`,
/// at most [`MAX_CLIENT_SERVER_NAME`] characters, `client` if nothing is left.
fn server_name(raw: &str) -> String {
    let mut out = String::new();
    for c in raw.chars() {
        let c = if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' };
        if !(c == '_' && out.ends_with('_')) {
            out.push(c);
        }
    }
    let cut: String = out.trim_matches('_').chars().take(MAX_CLIENT_SERVER_NAME).collect();
    let cut = cut.trim_matches('_');
    if cut.is_empty() { "client".to_string() } else { cut.to_string() }
}

/// The client's stdio and HTTP servers as `[[mcp]]` rows of one session
/// (see the module docs for names and what is skipped).
fn client_servers(servers: &[acp::McpServer], profile: &[McpServerConfig]) -> Vec<McpServerConfig> {
    let mut used = HashSet::new();
    let mut rows = Vec::new();
    // Values are the client's, verbatim: `${` is escaped from expansion.
    let verbatim = |v: &str| Value::String(v.replace("${", "$${"));
    for server in servers {
        let raw_name = match server {
            acp::McpServer::Stdio(s) => &s.name,
            acp::McpServer::Http(s) => &s.name,
            // Refused before the session was opened (`check_servers`).
            _ => continue,
        };
        let base = server_name(raw_name);
        if profile.iter().any(|r| r.name == base) {
            tracing::warn!("not starting the client's MCP server `{raw_name}`: the profile has a server `{base}`");
            continue;
        }
        let mut name = base.clone();
        let mut n = 2;
        while !used.insert(name.clone()) {
            name = format!("{base}_{n}");
            n += 1;
        }
        let row = match server {
            acp::McpServer::Stdio(s) => {
                let env: serde_json::Map<String, Value> =
                    s.env.iter().map(|v| (v.name.clone(), verbatim(&v.value))).collect();
                // Sandboxed (see `mcp::config`): the session's workspace
                // read-write (`.` is relative to it), no network, the
                // client's `env` only.
                json!({"name": name, "command": s.command.display().to_string(), "args": s.args, "env": env,
                       "sandbox": {"dirs": [".:rw"]}})
            }
            acp::McpServer::Http(s) => {
                // A remote server, reached where the client says, with the
                // client's headers; its tools go through the pipeline like
                // every MCP row's.
                let headers: serde_json::Map<String, Value> =
                    s.headers.iter().map(|h| (h.name.clone(), verbatim(&h.value))).collect();
                json!({"name": name, "url": s.url, "headers": headers})
            }
            _ => continue,
        };
        match serde_json::from_value::<McpServerConfig>(row).map_err(|e| e.to_string()).and_then(|r| {
            r.validate().map_err(|(_, m)| m)?;
            Ok(r)
        }) {
            Ok(r) => rows.push(r),
            Err(e) => tracing::warn!("not starting the client's MCP server `{raw_name}`: {e}"),
        }
    }
    rows
}

/// Refuses the servers this agent does not speak to (HTTP+SSE, and any
/// transport newer than this build), naming them, before a session opens.
fn check_servers(servers: &[acp::McpServer]) -> Result<(), sdk::Error> {
    for server in servers {
        match server {
            acp::McpServer::Stdio(_) | acp::McpServer::Http(_) => {}
            acp::McpServer::Sse(s) => {
                return Err(invalid_params(format!(
                    "MCP server `{}`: the HTTP+SSE transport is not supported (mcpCapabilities.sse is false); \
                     pass it as a streamable HTTP (`type: http`) or stdio server",
                    one_line(&s.name, 64)
                )));
            }
            _ => return Err(invalid_params("an MCP server of an unsupported transport (stdio and http are)")),
        }
    }
    Ok(())
}

/// Longest client system prompt, in bytes.
const MAX_SYSTEM_PROMPT_BYTES: usize = 256 * 1024;

/// The client's `systemPrompt` of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ClientPrompt {
    /// Appended after everything else in the system prompt.
    Append(String),
    /// Replaces the profile's base prompt (`agent.system_prompt`); skills,
    /// project context and other plugin sections stay.
    Override(String),
}

impl ClientPrompt {
    /// Applies it to a session's agent settings; `default` is the profile's
    /// base prompt (so a new value replaces an earlier client prompt).
    fn apply(&self, config: &mut wharf_core::AgentConfig, default: &str) {
        config.system_prompt = default.to_string();
        config.instructions = None;
        match self {
            Self::Append(text) => config.instructions = Some(text.clone()),
            Self::Override(text) => config.system_prompt = text.clone(),
        }
    }
}

/// Checks the client's `systemPrompt`: `append` or `override`, text blocks
/// only, not empty, at most [`MAX_SYSTEM_PROMPT_BYTES`].
fn client_prompt(p: &acp::SystemPrompt) -> Result<ClientPrompt, sdk::Error> {
    if p.content.is_empty() {
        return Err(invalid_params("systemPrompt.content is empty"));
    }
    let mut parts = Vec::new();
    for block in &p.content {
        match block {
            acp::ContentBlock::Text(t) => parts.push(t.text.as_str()),
            _ => return Err(invalid_params("systemPrompt.content: only text blocks are supported")),
        }
    }
    let text = parts.join("\n\n");
    if text.len() > MAX_SYSTEM_PROMPT_BYTES {
        return Err(invalid_params(format!(
            "systemPrompt is {} bytes; at most {MAX_SYSTEM_PROMPT_BYTES} are accepted",
            text.len()
        )));
    }
    match &p.mode {
        acp::SystemPromptMode::Append => Ok(ClientPrompt::Append(text)),
        acp::SystemPromptMode::Override => Ok(ClientPrompt::Override(text)),
        other => Err(invalid_params(format!(
            "systemPrompt.mode `{}` is not supported (append, override)",
            one_line(&serde_json::to_value(other).unwrap_or_default().to_string(), 40)
        ))),
    }
}

/// The last change of a session log file, RFC 3339 (`None`: not a file).
fn updated_at(location: &str) -> Option<String> {
    let modified = std::fs::metadata(location).ok()?.modified().ok()?;
    let ms = modified.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis();
    Some(wharf_core::util::rfc3339_from_ms(u64::try_from(ms).ok()?))
}

/// Takes the events already delivered by `subscribe_from` up to `last`.
fn drain(mut rx: tokio::sync::mpsc::UnboundedReceiver<Event>, last: u64) -> Vec<Event> {
    let mut out = Vec::new();
    while let Ok(ev) = rx.try_recv() {
        if ev.seq > last {
            break;
        }
        out.push(ev);
    }
    out
}

/// Sends a session's history as updates, then its usage so far.
fn replay(cx: &Cx, id: &acp::SessionId, host: &Arc<Harness>, agent: &Agent, caps: ClientCaps, events: Vec<Event>) {
    let mut p = Projector::new(host.clone(), Mode::Replay, Arc::default(), caps, adapter_window(agent));
    let send = |update| {
        let _ = cx.send_notification(acp::SessionNotification::new(id.clone(), update));
    };
    for ev in &events {
        p.updates(ev, false).into_iter().for_each(send);
    }
    if let Some(update) = p.usage_update() {
        send(update);
    }
}

/// The context window the session's adapter reports (0: unknown).
fn adapter_window(agent: &Agent) -> u64 {
    agent.snapshot().llm(agent.config().llm.as_deref()).map_or(0, |a| u64::from(a.model().context_window))
}

/// One ACP session: a Wharf agent over one session log.
struct Session {
    agent: Agent,
    host: Arc<Harness>,
    /// Seq of the last event the forwarder has turned into updates.
    forwarded: watch::Receiver<u64>,
    /// Inbox ids of the prompts this client sent (not echoed back live).
    own_inbox: Arc<Mutex<HashSet<String>>>,
    /// Set while a prompt runs; cancelled by `session/cancel`.
    prompt: Mutex<Option<CancellationToken>>,
    /// The client's MCP servers of this session.
    mcp: Option<Arc<McpManager>>,
    /// Cancelled when the session ends (stops the forwarder).
    closed: CancellationToken,
    /// The slash commands announced to the client (prompts starting with
    /// `/NAME` of one are expanded).
    commands: Mutex<Vec<Command>>,
}

impl Session {
    /// Starts the forwarder: log events → `session/update`s (from
    /// `first_seq`) and `ask` → `session/request_permission`, in one task so
    /// they leave in order.
    fn start(
        opened: Opened,
        host: Arc<Harness>,
        cx: Cx,
        approver_name: String,
        caps: ClientCaps,
    ) -> Result<Arc<Self>, sdk::Error> {
        let Opened { agent, first_seq, mut approvals, mut questions, mcp } = opened;
        let id = acp::SessionId::new(agent.session_id());
        let mut rx = agent.log().subscribe_from(first_seq).map_err(|e| internal(e.to_string()))?;
        let (tx, forwarded) = watch::channel(first_seq.saturating_sub(1));
        let own_inbox: Arc<Mutex<HashSet<String>>> = Arc::default();
        let session = Arc::new(Self {
            agent: agent.clone(),
            host: host.clone(),
            forwarded,
            own_inbox: own_inbox.clone(),
            prompt: Mutex::new(None),
            mcp,
            closed: CancellationToken::new(),
            commands: Mutex::new(Vec::new()),
        });

        let mut projector = Projector::new(host.clone(), Mode::Live, own_inbox, caps, adapter_window(&agent));
        // Usage counts the steps logged before this process opened the log.
        if first_seq > 1
            && let Ok(history) = agent.log().subscribe_from(1)
        {
            for ev in drain(history, first_seq - 1) {
                projector.track_usage(&ev);
            }
        }
        let mut fwd = Forwarder {
            cx,
            id,
            agent,
            projector,
            workspace: host.workspace.clone(),
            by: approver_name,
            tx,
            elicit: caps.elicitation,
        };
        let closed = session.closed.clone();
        tokio::spawn(async move {
            let (mut asking, mut questioning) = (true, true);
            loop {
                tokio::select! {
                    biased;
                    () = closed.cancelled() => return,
                    ev = rx.recv() => match ev {
                        Some(ev) => if !fwd.event(&ev) { return },
                        None => return,
                    },
                    pending = approvals.recv(), if asking => match pending {
                        Some(pending) => {
                            // The call's `tool/call` and `approval/asked`
                            // were appended before the question was asked, so
                            // they are queued already: send them first.
                            while let Ok(ev) = rx.try_recv() {
                                if !fwd.event(&ev) {
                                    return;
                                }
                            }
                            fwd.ask(pending);
                        }
                        None => asking = false,
                    },
                    pending = questions.recv(), if questioning => match pending {
                        Some(pending) => {
                            // Its `question/asked` goes out first.
                            while let Ok(ev) = rx.try_recv() {
                                if !fwd.event(&ev) {
                                    return;
                                }
                            }
                            fwd.elicit(pending);
                        }
                        None => questioning = false,
                    },
                }
            }
        });
        Ok(session)
    }

    /// The prompt a `/NAME ARGS` of an announced command stands for (the
    /// text itself otherwise).
    fn expand_command(&self, text: String) -> String {
        let commands = lock(&self.commands);
        match wharf_harness::commands::expand(&commands, &text) {
            Some((command, prompt)) => {
                tracing::info!(session = %self.agent.session_id(), "slash command /{}", command.name);
                prompt
            }
            None => text,
        }
    }

    fn is_prompting(&self) -> bool {
        lock(&self.prompt).is_some()
    }

    fn begin_prompt(&self) -> Result<CancellationToken, sdk::Error> {
        let mut p = lock(&self.prompt);
        if p.is_some() {
            return Err(sdk::Error::new(
                sdk::ErrorCode::INVALID_REQUEST,
                "a prompt is already running in this session (cancel it or wait for its response)",
            ));
        }
        let token = CancellationToken::new();
        *p = Some(token.clone());
        Ok(token)
    }

    fn cancel(&self) {
        if let Some(token) = lock(&self.prompt).as_ref() {
            token.cancel();
        }
        self.agent.cancel();
    }

    /// Ends the session: cancels a running prompt (waiting up to 5 s for it
    /// to answer), stops its own MCP servers, flushes the log and stops the
    /// forwarder.
    async fn end(&self) {
        self.cancel();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while self.is_prompting() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if let Some(m) = &self.mcp {
            m.stop().await;
        }
        let _ = self.agent.log().flush().await;
        // Let the forwarder send what the last turn logged before it stops.
        let last = self.agent.log().last_seq();
        let mut forwarded = self.forwarded.clone();
        let _ = tokio::time::timeout(Duration::from_secs(2), forwarded.wait_for(|&s| s >= last)).await;
        self.closed.cancel();
    }

    /// Runs one prompt to its stop reason; every update is sent before this
    /// returns. The answer is the logged stop reason (module docs).
    async fn prompt(
        &self,
        text: String,
        images: Vec<wharf_core::images::Image>,
        token: CancellationToken,
    ) -> Result<acp::PromptResponse, sdk::Error> {
        let result = self.run(text, images, &token).await;
        *lock(&self.prompt) = None;
        // All updates of the turn go out before the response.
        let last = self.agent.log().last_seq();
        let mut forwarded = self.forwarded.clone();
        let _ = tokio::time::timeout(Duration::from_secs(10), forwarded.wait_for(|&s| s >= last)).await;
        let reason = match result {
            // ACP: a cancelled prompt never answers with an error.
            Ok(StopReason::Error { .. }) | Err(_) if token.is_cancelled() => StopReason::Cancelled,
            r => r?,
        };
        stop_reason(&reason).map(acp::PromptResponse::new)
    }
    async fn run(
        &self,
        text: String,
        images: Vec<wharf_core::images::Image>,
        token: &CancellationToken,
    ) -> Result<StopReason, sdk::Error> {
        if text.trim().is_empty() && images.is_empty() {
            return Err(invalid_params("the prompt is empty"));
        }
        let agent = &self.agent;
        let inbox_id = agent.followup_with_images(text, images).map_err(|e| internal(e.to_string()))?;
        lock(&self.own_inbox).insert(inbox_id);
        let run = agent.run_until_idle();
        tokio::pin!(run);
        // A cancel that lands before the turn has started is a no-op for the
        // agent, so keep cancelling until the run is over.
        let mut cancelling = false;
        let turns = loop {
            tokio::select! {
                r = &mut run => break r,
                _ = token.cancelled(), if !cancelling => {
                    cancelling = true;
                    agent.cancel();
                }
                _ = tokio::time::sleep(Duration::from_millis(25)), if cancelling => {
                    agent.cancel();
                }
            }
        };
        let turns = turns.map_err(|e| internal(e.to_string()))?;
        let last = turns.last().ok_or_else(|| internal("no turn ran"))?;
        Ok(last.reason.clone())
    }
}

impl Session {
    /// The image blocks of a prompt, decoded and bounded: each a taken
    /// media type within the per-image limit, all within the per-prompt
    /// limits ([`wharf_core::images`]); refused (`-32602`, naming the
    /// limit or the adapter) when the session's adapter takes text only.
    fn prompt_images(&self, blocks: &[acp::ContentBlock]) -> Result<Vec<wharf_core::images::Image>, sdk::Error> {
        use base64::Engine as _;
        use wharf_core::images::{Image, MAX_IMAGE_BYTES, MAX_PROMPT_IMAGES};
        let found: Vec<&acp::ImageContent> = blocks
            .iter()
            .filter_map(|b| match b {
                acp::ContentBlock::Image(i) => Some(i),
                _ => None,
            })
            .collect();
        if found.is_empty() {
            return Ok(Vec::new());
        }
        let adapter = self.agent.snapshot().llm(self.agent.config().llm.as_deref());
        let Some(support) = adapter.as_ref().and_then(|a| a.image_support()) else {
            let name = adapter.map(|a| a.plugin().id.clone()).unwrap_or_else(|| "(none loaded)".into());
            return Err(invalid_params(format!(
                "image prompt content is not supported by the model adapter `{name}`: it takes text only \
                 (promptCapabilities.image); send text, or use an adapter that takes images"
            )));
        };
        if found.len() > MAX_PROMPT_IMAGES {
            return Err(invalid_params(format!(
                "{} images in one prompt; the limit is {MAX_PROMPT_IMAGES}",
                found.len()
            )));
        }
        let mut images = Vec::with_capacity(found.len());
        for (n, block) in found.iter().enumerate() {
            // Base64 is 4/3 of the bytes: refuse before decoding what
            // cannot fit.
            if block.data.len() / 4 * 3 > MAX_IMAGE_BYTES + 3 {
                return Err(invalid_params(format!(
                    "image {} is over the per-image limit of {MAX_IMAGE_BYTES} bytes",
                    n + 1
                )));
            }
            let data = base64::engine::general_purpose::STANDARD
                .decode(block.data.trim())
                .map_err(|e| invalid_params(format!("image {}: its data is not base64: {e}", n + 1)))?;
            images.push(Image { mime_type: block.mime_type.trim().to_ascii_lowercase(), data });
        }
        wharf_core::images::check_prompt_images(&images, Some(&support)).map_err(invalid_params)?;
        Ok(images)
    }
}

/// The ACP stop reason of a turn; a failed model request is an error.
fn stop_reason(reason: &StopReason) -> Result<acp::StopReason, sdk::Error> {
    Ok(match reason {
        StopReason::Completed | StopReason::Interrupted => acp::StopReason::EndTurn,
        StopReason::MaxSteps => acp::StopReason::MaxTurnRequests,
        StopReason::MaxTokens => acp::StopReason::MaxTokens,
        StopReason::Cancelled => acp::StopReason::Cancelled,
        StopReason::Blocked { .. } => acp::StopReason::Refusal,
        StopReason::Error { code, .. } if code == "CONTENT_FILTER" => acp::StopReason::Refusal,
        StopReason::Error { code, message } => {
            return Err(internal(format!("the turn failed: {code}: {message}"))
                .data(json!({ "code": code, "message": message })));
        }
    })
}

/// The prompt as text: text blocks verbatim, resource links as Markdown
/// links, embedded text resources inlined in a `<context>` element. Image
/// blocks are left to [`Session::prompt_images`]; audio and binary blocks
/// are refused (`-32602`): a prompt is never sent with part of it silently
/// dropped.
fn prompt_text(blocks: &[acp::ContentBlock]) -> Result<String, sdk::Error> {
    let refuse = |what: &str| {
        invalid_params(format!(
            "{what} prompt content is not supported: Wharf's model adapters take text and images only \
             (promptCapabilities.audio is false); send text, images, resource links or text resources"
        ))
    };
    let mut out = String::new();
    for block in blocks {
        let piece = match block {
            acp::ContentBlock::Text(t) => t.text.clone(),
            acp::ContentBlock::ResourceLink(l) => format!("[{}]({})", l.name, l.uri),
            acp::ContentBlock::Resource(r) => match &r.resource {
                acp::EmbeddedResourceResource::TextResourceContents(t) => {
                    format!("\n<context uri=\"{}\">\n{}\n</context>\n", t.uri, t.text)
                }
                acp::EmbeddedResourceResource::BlobResourceContents(b) => {
                    return Err(invalid_params(format!(
                        "binary resource {} is not supported: embed text resources or link it",
                        one_line(&b.uri, 200)
                    )));
                }
                _ => return Err(invalid_params("an embedded resource of an unknown kind is not supported")),
            },
            // Taken (or refused) by `Session::prompt_images`.
            acp::ContentBlock::Image(_) => continue,
            acp::ContentBlock::Audio(_) => return Err(refuse("audio")),
            _ => return Err(invalid_params("a prompt content block of an unknown type is not supported")),
        };
        let needs_space = !out.is_empty()
            && !out.ends_with(char::is_whitespace)
            && !piece.starts_with(char::is_whitespace)
            && !piece.is_empty();
        if needs_space {
            out.push(' ');
        }
        out.push_str(&piece);
    }
    Ok(out)
}

/// The one task that talks to the client for a session: updates and
/// permission questions in log order.
struct Forwarder {
    cx: Cx,
    id: acp::SessionId,
    agent: Agent,
    projector: Projector,
    workspace: PathBuf,
    /// `approval/decided.by` of the client's answers.
    by: String,
    tx: watch::Sender<u64>,
    /// The client takes `elicitation/create` (form mode).
    elicit: bool,
}

impl Forwarder {
    /// Sends the updates of one event; `false` when the connection is gone.
    fn event(&mut self, ev: &Event) -> bool {
        let snap = self.agent.snapshot();
        let unguarded =
            snap.policies.is_empty() && snap.hooks.get(&HookPoint::ToolsPreExecute).is_none_or(|h| h.is_empty());
        for update in self.projector.updates(ev, unguarded) {
            if self.cx.send_notification(acp::SessionNotification::new(self.id.clone(), update)).is_err() {
                return false;
            }
        }
        let _ = self.tx.send(ev.seq);
        true
    }

    /// Sends the question of one `ask` now (so it is ordered after the
    /// updates already sent) and answers the pipeline from another task. If
    /// the pipeline stops waiting (the turn was cancelled), the request is
    /// withdrawn with `$/cancel_request` (dropping the sent request does that).
    fn ask(&self, pending: PendingApproval) {
        let PendingApproval { request, mut reply } = pending;
        let args = request.arguments.clone();
        let fields = acp::ToolCallUpdateFields::new()
            .title(tool_title(&request.tool, &args))
            .name(request.tool.clone())
            .kind(tool_kind(&request.tool))
            .status(acp::ToolCallStatus::Pending)
            .locations(tool_locations(&self.workspace, &args))
            .raw_input(args);
        let options = vec![
            acp::PermissionOption::new("allow_once", "Allow once", acp::PermissionOptionKind::AllowOnce),
            acp::PermissionOption::new(
                "allow_always",
                format!("Always allow `{}` in this session", request.tool),
                acp::PermissionOptionKind::AllowAlways,
            ),
            acp::PermissionOption::new("reject_once", "Reject", acp::PermissionOptionKind::RejectOnce),
        ];
        let mut meta = serde_json::Map::new();
        meta.insert("wharf/reason".into(), Value::String(request.reason.clone()));
        let question = acp::RequestPermissionRequest::new(
            self.id.clone(),
            acp::ToolCallUpdate::new(request.call_id.clone(), fields),
            options,
        )
        .meta(meta);
        let sent = self.cx.send_request(question);
        let by = self.by.clone();
        tokio::spawn(async move {
            let answer = tokio::select! {
                r = sent.block_task() => r,
                // The pipeline gave up waiting (turn cancelled): withdraw.
                () = reply.closed() => return,
            };
            // The pipeline may have stopped waiting meanwhile; then nobody listens.
            let _ = reply.send(client_answer(answer, &by));
        });
    }
}

impl Forwarder {
    /// Sends a tool's question as `elicitation/create` (see the module
    /// docs) and answers the asker from another task; a client without
    /// `elicitation.form` gets no request and the question is declined.
    fn elicit(&self, pending: PendingQuestion) {
        let PendingQuestion { question, mut reply } = pending;
        if !self.elicit {
            tracing::info!(session = %self.id, "declined a question from {}: the client does not take elicitation/create", question.source);
            let _ = reply.send(Reply::decline(
                &self.by,
                "the ACP client does not support elicitation (clientCapabilities.elicitation.form)",
            ));
            return;
        }
        let schema = match serde_json::from_value::<acp::ElicitationSchema>(question.form.schema()) {
            Ok(s) => s,
            Err(e) => {
                let _ = reply.send(Reply::decline(&self.by, format!("the form cannot be sent over ACP: {e}")));
                return;
            }
        };
        let scope = acp::ElicitationSessionScope::new(self.id.clone())
            .tool_call_id(acp::ToolCallId::new(question.call_id.as_str()));
        let mode = acp::ElicitationMode::Form(acp::ElicitationFormMode::new(scope, schema));
        let mut meta = serde_json::Map::new();
        meta.insert("wharf/source".into(), Value::String(question.source.clone()));
        let request = acp::CreateElicitationRequest::new(mode, question.form.message.clone()).meta(meta);
        let sent = self.cx.send_request(request);
        let by = self.by.clone();
        tokio::spawn(async move {
            let answer = tokio::select! {
                r = sent.block_task() => r,
                // The call ended or the turn was cancelled: withdraw.
                () = reply.closed() => return,
            };
            let _ = reply.send(elicitation_answer(answer, &by));
        });
    }
}

/// The asker's reply from the client's `elicitation/create` answer (the
/// content is checked against the form by the core).
fn elicitation_answer(answer: Result<acp::CreateElicitationResponse, sdk::Error>, by: &str) -> Reply {
    let reply = |answer| Reply { answer, by: by.to_string(), note: None };
    match answer {
        Ok(resp) => match resp.action {
            acp::ElicitationAction::Accept(a) => {
                let content = serde_json::to_value(a.content.unwrap_or_default()).unwrap_or(Value::Null);
                match content {
                    Value::Object(m) => reply(Answer::Accept(m)),
                    _ => Reply::cancel(by, "the client's content is not an object"),
                }
            }
            acp::ElicitationAction::Decline => reply(Answer::Decline),
            acp::ElicitationAction::Cancel => reply(Answer::Cancel),
            _ => Reply::cancel(by, "the client answered with an unknown action"),
        },
        Err(e) => Reply::cancel(by, format!("the elicitation request failed: {} {}", e.code.value(), e.message)),
    }
}

/// The pipeline's approval from the client's answer.
fn client_answer(answer: Result<acp::RequestPermissionResponse, sdk::Error>, by: &str) -> Approval {
    match answer {
        Ok(resp) => match resp.outcome {
            acp::RequestPermissionOutcome::Selected(s) => match s.option_id.0.as_ref() {
                "allow_once" => approval(ApprovalOutcome::AllowedOnce, by, None),
                "allow_always" => approval(ApprovalOutcome::AllowedForSession, by, None),
                "reject_once" => approval(ApprovalOutcome::Rejected, by, None),
                other => approval(ApprovalOutcome::Rejected, by, Some(format!("unknown option `{other}`"))),
            },
            acp::RequestPermissionOutcome::Cancelled => {
                approval(ApprovalOutcome::Cancelled, by, Some("the client cancelled the request".into()))
            }
            _ => approval(ApprovalOutcome::Rejected, by, Some("unknown outcome".into())),
        },
        Err(e) => approval(
            ApprovalOutcome::Cancelled,
            by,
            Some(format!("the permission request failed: {} {}", e.code.value(), e.message)),
        ),
    }
}

fn approval(outcome: ApprovalOutcome, by: &str, note: Option<String>) -> Approval {
    Approval { outcome, by: by.to_string(), note }
}

/// The ACP tool kind of a tool, from its name.
pub fn tool_kind(name: &str) -> acp::ToolKind {
    let n = name.rsplit(['.', '/', ':']).next().unwrap_or(name).to_ascii_lowercase();
    match n.as_str() {
        "read" | "read_file" | "list" | "ls" | "list_directory" | "view" | "cat" | "word_count" | "job_output"
        | "job_list" => acp::ToolKind::Read,
        "write" | "edit" | "write_file" | "edit_file" | "apply_patch" | "patch" | "multi_edit" | "str_replace" => {
            acp::ToolKind::Edit
        }
        "delete" | "rm" | "remove" | "delete_path" => acp::ToolKind::Delete,
        "move" | "mv" | "rename" | "move_path" => acp::ToolKind::Move,
        "glob" | "grep" | "search" | "regex_search" | "find" | "find_path" => acp::ToolKind::Search,
        "bash" | "shell" | "exec" | "exec_command" | "run" | "terminal" | "job_kill" => acp::ToolKind::Execute,
        "fetch" | "web_fetch" | "webfetch" | "http" | "web_search" | "websearch" => acp::ToolKind::Fetch,
        "think" | "thinking" => acp::ToolKind::Think,
        _ => acp::ToolKind::Other,
    }
}

fn str_arg<'a>(args: &'a Value, keys: &[&str]) -> Option<&'a str> {
    keys.iter().find_map(|k| args.get(*k).and_then(Value::as_str))
}

fn one_line(s: &str, max: usize) -> String {
    let flat: String = s.chars().map(|c| if c == '\n' { ' ' } else { c }).collect();
    if flat.chars().count() > max { format!("{}…", flat.chars().take(max).collect::<String>()) } else { flat }
}

/// A short title: the tool name and its main argument.
fn tool_title(name: &str, args: &Value) -> String {
    match str_arg(args, &["command", "path", "pattern", "url", "query", "file_path"]) {
        Some(main) => format!("{name} {}", one_line(main, 80)),
        None => name.to_string(),
    }
}

/// Files a call touches (absolute, as ACP requires).
fn tool_locations(workspace: &Path, args: &Value) -> Vec<acp::ToolCallLocation> {
    match str_arg(args, &["path", "file_path"]) {
        Some(p) => vec![acp::ToolCallLocation::new(workspace.join(p))],
        None => vec![],
    }
}

/// Parsed arguments (the raw text when they are not JSON).
fn parse_args(text: &str) -> Value {
    if text.trim().is_empty() {
        return json!({});
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

/// Diffs for calls that write files, so editors can show the change.
fn tool_diffs(name: &str, workspace: &Path, args: &Value) -> Vec<acp::ToolCallContent> {
    let Some(path) = str_arg(args, &["path", "file_path"]) else {
        return vec![];
    };
    let path = workspace.join(path);
    match (tool_kind(name), str_arg(args, &["content"]), str_arg(args, &["old_string"]), str_arg(args, &["new_string"]))
    {
        (acp::ToolKind::Edit, Some(content), _, _) => {
            vec![acp::ToolCallContent::Diff(acp::Diff::new(path, content))]
        }
        (acp::ToolKind::Edit, None, Some(old), Some(new)) => {
            vec![acp::ToolCallContent::Diff(acp::Diff::new(path, new).old_text(old.to_string()))]
        }
        _ => vec![],
    }
}

/// Live updates or a replay of history.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Streaming as events are appended: chunks, progress, no echo of the
    /// client's own prompts.
    Live,
    /// Rebuilding a transcript: whole messages, final tool states.
    Replay,
}

/// Turns session events into `session/update`s.
struct Projector {
    host: Arc<Harness>,
    workspace: PathBuf,
    mode: Mode,
    own_inbox: Arc<Mutex<HashSet<String>>>,
    /// Content sent with each `tool_call` (diffs), kept on the final update.
    calls: HashMap<String, Vec<acp::ToolCallContent>>,
    caps: ClientCaps,
    /// The events usage is summed from (`turn/*`, `step/end`,
    /// `session/model`).
    usage: Vec<Event>,
    /// The adapter's context window, when the config names none.
    window: u64,
    /// A running call's streamed output so far (`tool/progress`), its
    /// last [`MAX_PROGRESS_SHOWN`] bytes; dropped at its result.
    progress: HashMap<String, String>,
}

/// Longest compaction summary sent to a client, in bytes.
const MAX_SUMMARY_BYTES: usize = 64 * 1024;
/// Most bytes of a running call's output shown in its `tool_call_update`
/// (the latest part).
const MAX_PROGRESS_SHOWN: usize = 16 * 1024;

/// The last `max` bytes of `s`, cut on a character boundary.
fn tail(s: &str, max: usize) -> &str {
    let mut start = s.len().saturating_sub(max);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

impl Projector {
    fn new(
        host: Arc<Harness>,
        mode: Mode,
        own_inbox: Arc<Mutex<HashSet<String>>>,
        caps: ClientCaps,
        window: u64,
    ) -> Self {
        let workspace = host.workspace.clone();
        Self {
            host,
            workspace,
            mode,
            own_inbox,
            calls: HashMap::new(),
            caps,
            usage: Vec::new(),
            window,
            progress: HashMap::new(),
        }
    }

    /// `usage_update`: the tokens of the last request (what the context
    /// holds) against the window, and the cost when every step is priced
    /// in one currency; `None` before any step or with no known window.
    fn usage_update(&self) -> Option<acp::SessionUpdate> {
        if !self.usage.iter().any(|e| matches!(e.kind, EventKind::StepEnd(_))) {
            return None;
        }
        let u = wharf_harness::usage::summarize(&self.host.config, &self.usage);
        let size = if u.context_window > 0 { u.context_window } else { self.window };
        if size == 0 {
            return None;
        }
        let mut update = acp::UsageUpdate::new(u.context_used_tokens, size);
        if let (Some(cost), Some(currency), true) = (u.cost, u.currency.as_ref(), u.cost_complete) {
            update = update.cost(acp::Cost::new(cost, currency.clone()));
        }
        Some(acp::SessionUpdate::UsageUpdate(update))
    }

    /// A compaction that happened (`Ok(summary)`) or failed: a
    /// `compaction_update` for clients that show them, else a live
    /// `notice` for clients that show those, else nothing.
    fn compaction(&self, seq: u64, outcome: Result<&str, &str>) -> Vec<acp::SessionUpdate> {
        if self.caps.compaction {
            let id = format!("compaction-{seq}");
            let update = match outcome {
                Ok(summary) => acp::CompactionUpdate::new(id, acp::CompactionStatus::Completed).summary(vec![
                    acp::ContentBlock::from(wharf_core::util::cut_str(summary, MAX_SUMMARY_BYTES).to_string()),
                ]),
                Err(error) => {
                    acp::CompactionUpdate::new(id, acp::CompactionStatus::Failed).error(one_line(error, 1000))
                }
            };
            return vec![acp::SessionUpdate::CompactionUpdate(update)];
        }
        if self.caps.notices && self.mode == Mode::Live {
            let notice = match outcome {
                Ok(_) => acp::Notice::new(acp::NoticeSeverity::Info, "Context compacted")
                    .description("Earlier messages were summarized to fit the model's context window.".to_string()),
                Err(error) => acp::Notice::new(acp::NoticeSeverity::Warning, "Context compaction failed")
                    .description(one_line(error, 1000)),
            };
            return vec![acp::SessionUpdate::Notice(notice)];
        }
        vec![]
    }

    /// The updates for one event. `unguarded`: no policy or pre-execute hook
    /// is loaded, so a call starts right after `tool/call`.
    fn updates(&mut self, ev: &Event, unguarded: bool) -> Vec<acp::SessionUpdate> {
        let live = self.mode == Mode::Live;
        let text = |t: &str| acp::ContentChunk::new(acp::ContentBlock::from(t.to_string()));
        match &ev.kind {
            EventKind::UserMessage(m) => {
                let own = m.inbox_id.as_ref().is_some_and(|id| lock(&self.own_inbox).contains(id));
                if live && own {
                    return vec![];
                }
                let mut out = vec![acp::SessionUpdate::UserMessageChunk(text(&m.content))];
                // A replayed image is a placeholder line, never its bytes.
                out.extend(
                    m.images
                        .iter()
                        .map(|i| acp::SessionUpdate::UserMessageChunk(text(&format!("\n{}", i.placeholder())))),
                );
                out
            }
            EventKind::AssistantChunk(c) if live => {
                let mut out = vec![];
                if !c.reasoning.is_empty() {
                    out.push(acp::SessionUpdate::AgentThoughtChunk(text(&c.reasoning)));
                }
                if !c.text.is_empty() {
                    out.push(acp::SessionUpdate::AgentMessageChunk(text(&c.text)));
                }
                out
            }
            EventKind::AssistantMessage(m) if !live => {
                let mut out = vec![];
                if let Some(r) = m.reasoning.as_deref().filter(|r| !r.is_empty()) {
                    out.push(acp::SessionUpdate::AgentThoughtChunk(text(r)));
                }
                if !m.content.is_empty() {
                    out.push(acp::SessionUpdate::AgentMessageChunk(text(&m.content)));
                }
                out
            }
            EventKind::ToolCall(c) => self.tool_call(c, live && unguarded),
            EventKind::PolicyDecision(d) if live && d.verdict == Verdict::Allow => {
                vec![in_progress(&d.call_id)]
            }
            EventKind::ApprovalDecided(d)
                if live && matches!(d.outcome, ApprovalOutcome::AllowedOnce | ApprovalOutcome::AllowedForSession) =>
            {
                vec![in_progress(&d.call_id)]
            }
            EventKind::ToolResult(r) => vec![self.tool_result(r)],
            EventKind::ToolProgress(p) if live => vec![self.tool_progress(&p.call_id, &p.text)],
            EventKind::TodoUpdated(t) => vec![acp::SessionUpdate::Plan(acp::Plan::new(plan_entries(&t.items)))],
            EventKind::TurnStart(_) | EventKind::TurnEnd(_) | EventKind::StepEnd(_) | EventKind::Unknown { .. }
                if self.track_usage(ev) =>
            {
                // Live: after every step; a replay sends it once at the end.
                let mut out = match &ev.kind {
                    EventKind::TurnEnd(t) if !live => self.turn_end_note(&t.reason),
                    _ => vec![],
                };
                if live && matches!(ev.kind, EventKind::StepEnd(_)) {
                    out.extend(self.usage_update());
                }
                out
            }
            EventKind::CompactionSummary(c) => self.compaction(ev.seq, Ok(&c.summary)),
            EventKind::Unknown { type_name, data } if type_name == COMPACTION_FAILED_EVENT => {
                let error = data.get("error").and_then(Value::as_str).unwrap_or("unknown error");
                self.compaction(ev.seq, Err(error))
            }
            EventKind::Unknown { type_name, data } if type_name == wharf_core::cells::CELL_EVENT => {
                cell_update(data).into_iter().collect()
            }
            EventKind::PluginLoaded(p) if live => self.reload_notice(p),
            _ => vec![],
        }
    }

    /// A new component of a row (`NAME reloaded`, `NAME reloaded (dev)` for
    /// a dev row): a live `notice` (info) for clients with
    /// `session.notices`, else an agent message line (the schema's advice
    /// for information the user should still see).
    fn reload_notice(&self, p: &wharf_core::events::PluginChange) -> Vec<acp::SessionUpdate> {
        let Some(text) = p.reload_notice() else { return vec![] };
        if self.caps.notices {
            return vec![acp::SessionUpdate::Notice(acp::Notice::new(acp::NoticeSeverity::Info, format!("↻ {text}")))];
        }
        vec![acp::SessionUpdate::AgentMessageChunk(acp::ContentChunk::new(acp::ContentBlock::from(format!(
            "\n↻ {text}\n"
        ))))]
    }

    /// Keeps the events usage is summed from; `true` for those.
    fn track_usage(&mut self, ev: &Event) -> bool {
        let keep = match &ev.kind {
            EventKind::TurnStart(_) | EventKind::TurnEnd(_) | EventKind::StepEnd(_) => true,
            EventKind::Unknown { type_name, .. } => type_name == MODEL_EVENT,
            _ => false,
        };
        if keep {
            self.usage.push(ev.clone());
        }
        keep
    }

    /// The note a replay shows for a turn that failed or was blocked.
    fn turn_end_note(&self, reason: &StopReason) -> Vec<acp::SessionUpdate> {
        let text =
            |t: String| acp::SessionUpdate::AgentMessageChunk(acp::ContentChunk::new(acp::ContentBlock::from(t)));
        match reason {
            StopReason::Error { code, message } => vec![text(format!("\n[turn failed: {code}: {message}]"))],
            StopReason::Blocked { message } => vec![text(format!("\n[turn blocked: {message}]"))],
            _ => vec![],
        }
    }

    fn tool_call(&mut self, c: &ToolCallEvent, started: bool) -> Vec<acp::SessionUpdate> {
        let args = parse_args(&c.arguments);
        let diffs = tool_diffs(&c.name, &self.workspace, &args);
        self.calls.insert(c.id.clone(), diffs.clone());
        let status = if started { acp::ToolCallStatus::InProgress } else { acp::ToolCallStatus::Pending };
        let call = acp::ToolCall::new(c.id.clone(), tool_title(&c.name, &args))
            .name(c.name.clone())
            .kind(tool_kind(&c.name))
            .status(status)
            .content(diffs)
            .locations(tool_locations(&self.workspace, &args))
            .raw_input(args);
        vec![acp::SessionUpdate::ToolCall(call)]
    }

    /// A running call's output so far (after its diffs, if any), as an
    /// `in_progress` update.
    fn tool_progress(&mut self, call_id: &str, text: &str) -> acp::SessionUpdate {
        let so_far = self.progress.entry(call_id.to_string()).or_default();
        so_far.push_str(text);
        if so_far.len() > MAX_PROGRESS_SHOWN * 2 {
            *so_far = tail(so_far, MAX_PROGRESS_SHOWN).to_string();
        }
        let shown = tail(so_far, MAX_PROGRESS_SHOWN).to_string();
        let mut content = self.calls.get(call_id).cloned().unwrap_or_default();
        content.push(acp::ToolCallContent::from(shown));
        let fields = acp::ToolCallUpdateFields::new().status(acp::ToolCallStatus::InProgress).content(content);
        acp::SessionUpdate::ToolCallUpdate(acp::ToolCallUpdate::new(call_id.to_string(), fields))
    }

    fn tool_result(&mut self, r: &ToolResultEvent) -> acp::SessionUpdate {
        self.progress.remove(&r.call_id);
        let mut content = self.calls.remove(&r.call_id).unwrap_or_default();
        let shown = match (&r.error_code, r.is_error) {
            (Some(code), true) => format!("{code}: {}", r.content),
            _ => r.content.clone(),
        };
        if !shown.is_empty() {
            content.push(acp::ToolCallContent::from(shown));
        }
        let status = if r.is_error { acp::ToolCallStatus::Failed } else { acp::ToolCallStatus::Completed };
        let raw = json!({
            "content": r.content,
            "is_error": r.is_error,
            "error_code": r.error_code,
            "plugin": r.plugin,
            "version": r.version,
            "duration_ms": r.duration_ms,
            "truncated": r.truncated,
        });
        let fields = acp::ToolCallUpdateFields::new().status(status).content(content).raw_output(raw);
        acp::SessionUpdate::ToolCallUpdate(acp::ToolCallUpdate::new(r.call_id.clone(), fields))
    }
}

/// A Code Mode cell's state change (`tool/cell`, the cell id is its
/// call's id) as a status update of that call: `running` (it yielded and
/// goes on) is `in_progress`, `finished` `completed`, `failed` and
/// `cancelled` `failed`; `rawOutput` names the state.
fn cell_update(data: &Value) -> Option<acp::SessionUpdate> {
    let id = data.get("cell").and_then(Value::as_str)?;
    let state = data.get("state").and_then(Value::as_str)?;
    let status = match state {
        "running" => acp::ToolCallStatus::InProgress,
        "finished" => acp::ToolCallStatus::Completed,
        "failed" | "cancelled" => acp::ToolCallStatus::Failed,
        _ => return None,
    };
    let raw = json!({"cell": wharf_core::util::cut_str(id, 256), "state": state, "error_code": data.get("error_code")});
    let fields = acp::ToolCallUpdateFields::new().status(status).raw_output(raw);
    Some(acp::SessionUpdate::ToolCallUpdate(acp::ToolCallUpdate::new(
        wharf_core::util::cut_str(id, 256).to_string(),
        fields,
    )))
}

fn in_progress(call_id: &str) -> acp::SessionUpdate {
    let fields = acp::ToolCallUpdateFields::new().status(acp::ToolCallStatus::InProgress);
    acp::SessionUpdate::ToolCallUpdate(acp::ToolCallUpdate::new(call_id.to_string(), fields))
}

/// Plan entries from a todo list: an array (or `{todos|items: [...]}`) of
/// strings or objects with `content|text|title|task`, `status`
/// (`pending`, `in_progress`/`active`, `completed`/`done`) or `done: bool`,
/// and an optional `priority` (`high|medium|low`, default medium).
fn plan_entries(items: &Value) -> Vec<acp::PlanEntry> {
    let list = items
        .as_array()
        .or_else(|| items.get("todos").and_then(Value::as_array))
        .or_else(|| items.get("items").and_then(Value::as_array));
    let Some(list) = list else {
        return vec![];
    };
    list.iter()
        .filter_map(|item| {
            let content = match item {
                Value::String(s) => s.clone(),
                _ => str_arg(item, &["content", "text", "title", "task", "description"])?.to_string(),
            };
            let status = match item.get("status").and_then(Value::as_str).map(str::to_ascii_lowercase).as_deref() {
                Some("in_progress" | "in-progress" | "active" | "doing" | "started") => {
                    acp::PlanEntryStatus::InProgress
                }
                Some("completed" | "complete" | "done" | "finished") => acp::PlanEntryStatus::Completed,
                _ if item.get("done").and_then(Value::as_bool) == Some(true) => acp::PlanEntryStatus::Completed,
                _ => acp::PlanEntryStatus::Pending,
            };
            let priority = match item.get("priority").and_then(Value::as_str) {
                Some("high") => acp::PlanEntryPriority::High,
                Some("low") => acp::PlanEntryPriority::Low,
                _ => acp::PlanEntryPriority::Medium,
            };
            Some(acp::PlanEntry::new(content, priority, status))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn tool_kinds_from_names() {
        assert_eq!(tool_kind("read"), acp::ToolKind::Read);
        assert_eq!(tool_kind("write"), acp::ToolKind::Edit);
        assert_eq!(tool_kind("edit"), acp::ToolKind::Edit);
        assert_eq!(tool_kind("bash"), acp::ToolKind::Execute);
        assert_eq!(tool_kind("web_fetch"), acp::ToolKind::Fetch);
        assert_eq!(tool_kind("grep"), acp::ToolKind::Search);
        assert_eq!(tool_kind("mcp.server/fetch"), acp::ToolKind::Fetch);
        assert_eq!(tool_kind("word_count"), acp::ToolKind::Read);
        assert_eq!(tool_kind("frobnicate"), acp::ToolKind::Other);
    }

    #[test]
    fn prompt_blocks_become_text() {
        let blocks = vec![
            acp::ContentBlock::from("look at"),
            acp::ContentBlock::ResourceLink(acp::ResourceLink::new("a.rs", "file:///w/a.rs")),
            acp::ContentBlock::from(" please"),
        ];
        assert_eq!(prompt_text(&blocks).unwrap(), "look at [a.rs](file:///w/a.rs) please");
        // Image blocks are `Session::prompt_images`'s; audio is refused.
        let image = acp::ContentBlock::Image(acp::ImageContent::new("AA==", "image/png"));
        assert_eq!(prompt_text(&[acp::ContentBlock::from("see"), image]).unwrap(), "see");
        let audio = acp::ContentBlock::Audio(acp::AudioContent::new("AA==", "audio/wav"));
        let err = prompt_text(&[acp::ContentBlock::from("hear"), audio]).unwrap_err();
        assert_eq!(err.code, sdk::ErrorCode::INVALID_PARAMS);
        assert!(err.message.contains("audio"), "{}", err.message);
    }

    #[test]
    fn client_system_prompts() {
        let text = |t: &str| vec![acp::ContentBlock::from(t)];
        let append = client_prompt(&acp::SystemPrompt::new(text("extra"))).unwrap();
        assert_eq!(append, ClientPrompt::Append("extra".into()));
        let mut config = wharf_core::AgentConfig::default();
        append.apply(&mut config, "base");
        assert_eq!((config.system_prompt.as_str(), config.instructions.as_deref()), ("base", Some("extra")));
        let over = client_prompt(&acp::SystemPrompt::new(text("mine")).mode(acp::SystemPromptMode::Override)).unwrap();
        over.apply(&mut config, "base");
        assert_eq!((config.system_prompt.as_str(), config.instructions.as_deref()), ("mine", None));
        assert!(client_prompt(&acp::SystemPrompt::new(vec![])).is_err());
        let other = acp::SystemPrompt::new(text("x")).mode(acp::SystemPromptMode::Other("_custom".into()));
        assert!(client_prompt(&other).is_err());
    }

    #[test]
    fn plan_from_todo_items() {
        let items = json!([
            {"content": "read", "status": "completed"},
            {"text": "write", "status": "in_progress", "priority": "high"},
            "test",
            {"title": "ship", "done": true},
            {"nothing": 1}
        ]);
        let v = serde_json::to_value(plan_entries(&items)).unwrap();
        assert_eq!(
            v,
            json!([
                {"content": "read", "priority": "medium", "status": "completed"},
                {"content": "write", "priority": "high", "status": "in_progress"},
                {"content": "test", "priority": "medium", "status": "pending"},
                {"content": "ship", "priority": "medium", "status": "completed"}
            ])
        );
        assert_eq!(plan_entries(&json!({"todos": ["a"]})).len(), 1);
    }

    #[test]
    fn client_server_names_and_rows() {
        assert_eq!(server_name("ed"), "ed");
        assert_eq!(server_name("My Server / v2"), "My_Server_v2");
        assert_eq!(server_name("a__b"), "a_b");
        assert_eq!(server_name("__"), "client");
        assert_eq!(server_name("日本"), "client");
        assert_eq!(server_name(&"x".repeat(100)).len(), MAX_CLIENT_SERVER_NAME);
        let stdio = |name: &str| {
            acp::McpServer::Stdio(
                acp::McpServerStdio::new(name, "/bin/srv").env(vec![acp::EnvVariable::new("K", "${env:HOME}")]),
            )
        };
        let profile: Vec<McpServerConfig> = serde_json::from_value(json!([{"name": "taken", "command": "x"}])).unwrap();
        let http = acp::McpServer::Http(
            acp::McpServerHttp::new("web", "http://127.0.0.1:1/mcp")
                .headers(vec![acp::HttpHeader::new("Authorization", "Bearer ${env:TOKEN}")]),
        );
        let rows = client_servers(&[stdio("ed"), stdio("ed"), stdio("taken"), http], &profile);
        let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["ed", "ed_2", "web"]);
        assert_eq!(rows[0].command.as_deref(), Some("/bin/srv"));
        assert_eq!(rows[0].env["K"], "$${env:HOME}");
        assert!(!rows[0].required);
        assert_eq!(rows[2].url.as_deref(), Some("http://127.0.0.1:1/mcp"));
        assert_eq!(rows[2].headers["Authorization"], "Bearer $${env:TOKEN}");
        let sse = acp::McpServer::Sse(acp::McpServerSse::new("old", "http://127.0.0.1:1/sse"));
        assert!(check_servers(&[sse]).is_err());
    }

    #[test]
    fn stop_reasons_map() {
        assert_eq!(stop_reason(&StopReason::Completed).unwrap(), acp::StopReason::EndTurn);
        assert_eq!(stop_reason(&StopReason::MaxSteps).unwrap(), acp::StopReason::MaxTurnRequests);
        assert_eq!(stop_reason(&StopReason::MaxTokens).unwrap(), acp::StopReason::MaxTokens);
        assert_eq!(stop_reason(&StopReason::Cancelled).unwrap(), acp::StopReason::Cancelled);
        assert_eq!(stop_reason(&StopReason::Blocked { message: "x".into() }).unwrap(), acp::StopReason::Refusal);
        let err = stop_reason(&StopReason::Error { code: "AUTH".into(), message: "bad key".into() }).unwrap_err();
        assert_eq!(err.code, sdk::ErrorCode::INTERNAL_ERROR);
    }
}
