//! `[[bundle]]` rows: Claude Code / Codex plugin bundles (`wharf-bundle`)
//! as parts of a host.
//!
//! - **skills**: the bundle's `skills/` joins the `skills` row's `dirs`
//!   (read-only grant), so the catalogue offers them;
//! - **commands**: [`crate::commands`] (`Harness::commands`);
//! - **MCP servers**: `[[mcp]]` rows named `BUNDLE-SERVER`, a stdio server
//!   confined in the OS sandbox with the bundle's `[bundle.sandbox]` grants
//!   (the bundle read-only, nothing else writable unless granted), an HTTP
//!   server through its host allowlist: its own host, plus the row's
//!   `sandbox.hosts` (enforced by `wharf-mcp` on every redirect);
//! - **agents**: `agents/*.md` become the `presets` of the `subagent` row's
//!   config (name, description, instructions, tools as Wharf names), so
//!   the `subagent` tool offers them by name (`agent`);
//! - **hooks**: one native registration per bundle, plugin `bundle:NAME`:
//!   its `PreToolUse` hooks are a [`Policy`] (allow, deny, ask, rewrite),
//!   `PostToolUse` / `PostToolUseFailure` a `tools/post-execute` listener
//!   (by the outcome). The session's own hooks are a listener on each
//!   agent's bus ([`HookSet::attach`], called when the harness opens an
//!   agent): `SessionStart` (once per session and host, source `startup` or
//!   `resume`) and `UserPromptSubmit` (on steps that took user input) at
//!   `agent/pre-step`, their context (plain stdout or `additionalContext`,
//!   ≤ 10 000 characters a hook) added to the system prompt — the
//!   session's for the session, a prompt's for its turn — and logged as
//!   `bundle/context` (ignorable); `Stop` (this session) and `SubagentStop`
//!   (a child sharing its bus) at `agent/turn-stopping`; `Notification`
//!   (`permission_prompt`) on each logged `approval/asked`. Each hook is a
//!   process: `/bin/sh -c
//!   COMMAND` started by `wharf_runtime::process::native` in the same OS
//!   sandbox as the `bash` tool's commands and stdio MCP servers (Landlock,
//!   seccomp, rlimits, a scrubbed environment), with the hook protocol of
//!   `wharf_bundle::hooks`. The command and its scripts are read at each
//!   run, so an edit takes effect at the next call, and the digest of what
//!   ran is the version logged with the decision. A hook that cannot start,
//!   crashes, times out or prints something that is not a JSON object
//!   denies: the call, the result, or the turn (`SessionStart`,
//!   `UserPromptSubmit`); a `Stop`, `SubagentStop` or `Notification`
//!   hook's failure only logs a warning.
//!
//! A row with a `digest` loads only if the bundle's content still has that
//! digest.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wharf_bundle::hooks::{Answer, HookEvent, HookRule, HookRun, MAX_OUTPUT_BYTES, claude_tool_name, input, interpret};
use wharf_bundle::{Bundle, BundleError};
use wharf_config::{BundleRow, Config, McpSandbox, McpServer};
use wharf_core::plugin::{
    BoxFuture, Decision, Hook, HookOutcome, HookPoint, PluginError, PluginRef, Policy, PolicyRequest, ToolErrorCode,
};
use wharf_core::registry::{Registrations, Registry};
use wharf_core::store::LogRelease;
use wharf_runtime::process::native::{NativeCommand, NativeGrant, NativeProcess, NativeStdio};

/// The row whose `dirs` bundle skills join (the harness's choice, like the
/// `@path` tool).
const SKILLS_ROW: &str = "skills";
/// A tool hook's deadline is capped below the pipeline's 10 s for a policy.
const TOOL_HOOK_CAP: Duration = Duration::from_secs(9);
/// Other hooks' below the bus's 30 s for a listener.
const OTHER_HOOK_CAP: Duration = Duration::from_secs(25);
/// Most times `Stop` hooks keep one turn going.
const MAX_STOP_CONTINUES: u32 = 3;
/// The row whose config gets the bundles' `agents/*.md` as `presets`.
const SUBAGENT_ROW: &str = "subagent";
/// Most characters of one hook's context (Claude Code's cap too).
const MAX_CONTEXT_CHARS: usize = 10_000;
/// The ignorable event that records context a hook added.
pub const CONTEXT_EVENT: &str = "bundle/context";

/// A bundle a host loaded, with its row.
#[derive(Debug, Clone)]
pub struct LoadedBundle {
    /// The `[[bundle]]` row.
    pub row: BundleRow,
    /// What was read.
    pub bundle: Arc<Bundle>,
}

/// Reads every `[[bundle]]` row's bundle, checking pinned digests.
pub fn load(config: &Config) -> Result<Vec<LoadedBundle>> {
    let mut out = Vec::new();
    for row in &config.bundles {
        let bundle = Bundle::load(&row.path).with_context(|| format!("bundle `{}`", row.name))?;
        if bundle.name() != row.name {
            tracing::debug!(row = %row.name, bundle = %bundle.name(), "bundle row named differently from its manifest");
        }
        if let Some(pinned) = &row.digest {
            let found = bundle.digest().with_context(|| format!("bundle `{}`", row.name))?;
            if &found != pinned {
                return Err(BundleError::Changed { name: row.name.clone(), pinned: pinned.clone(), found }.into());
            }
        }
        out.push(LoadedBundle { row: row.clone(), bundle: Arc::new(bundle) });
    }
    Ok(out)
}

/// Puts the bundles' skills and MCP servers into `config`; returns what it
/// could not (one line each).
pub fn apply(config: &mut Config, bundles: &[LoadedBundle]) -> Vec<String> {
    let mut skipped = Vec::new();
    for lb in bundles {
        let (b, row) = (&lb.bundle, &lb.row);
        if let Some(dir) = &b.skills_dir {
            match config.plugins.iter_mut().find(|r| r.id == SKILLS_ROW) {
                Some(skills) => {
                    let d = dir.display().to_string();
                    if let Value::Object(m) = &mut skills.config {
                        let dirs = m.entry("dirs").or_insert_with(|| json!([]));
                        if let Value::Array(a) = dirs
                            && !a.iter().any(|v| v.as_str() == Some(&d))
                        {
                            a.push(json!(d));
                        }
                    } else {
                        skills.config = json!({ "dirs": [d] });
                    }
                    let grant = format!("{d}:ro");
                    if !skills.grant.dirs.contains(&grant) {
                        skills.grant.dirs.push(grant);
                    }
                }
                None => skipped.push(format!(
                    "bundle `{}`: its skills need a `{SKILLS_ROW}` plugin row, and this profile has none",
                    row.name
                )),
            }
        }
        if !b.agents.is_empty() {
            match config.plugins.iter_mut().find(|r| r.id == SUBAGENT_ROW) {
                Some(sub) => {
                    if !sub.config.is_object() {
                        sub.config = json!({});
                    }
                    if let Value::Object(m) = &mut sub.config {
                        let presets = m.entry("presets").or_insert_with(|| json!([]));
                        if let Value::Array(a) = presets {
                            for agent in &b.agents {
                                if a.iter().any(|p| p["name"] == agent.name.as_str()) {
                                    skipped.push(format!(
                                        "bundle `{}`: subagent preset `{}` exists already; not added",
                                        row.name, agent.name
                                    ));
                                    continue;
                                }
                                a.push(json!({
                                    "name": agent.name,
                                    "description": agent.description,
                                    "instructions": agent.instructions,
                                    "tools": agent.tools,
                                    "source": format!("bundle:{}", row.name),
                                }));
                            }
                        }
                    }
                }
                None => skipped.push(format!(
                    "bundle `{}`: its agents need a `{SUBAGENT_ROW}` plugin row, and this profile has none",
                    row.name
                )),
            }
        }
        for decl in &b.mcp {
            if config.mcp.iter().any(|m| m.name == decl.name) {
                skipped.push(format!("bundle `{}`: MCP server `{}` exists already; not added", row.name, decl.name));
                continue;
            }
            let mut dirs = vec![format!("{}:ro", b.root.display())];
            dirs.extend(row.sandbox.dirs.iter().cloned());
            let stdio = decl.command.is_some();
            config.mcp.push(McpServer {
                name: decl.name.clone(),
                command: decl.command.clone(),
                args: decl.args.clone(),
                env: decl.env.clone(),
                cwd: decl.cwd.clone(),
                url: decl.url.clone(),
                headers: decl.headers.clone(),
                required: false,
                startup_timeout_ms: None,
                tool_timeout_ms: None,
                enabled: true,
                // HTTP: the server's own host, and the hosts the bundle
                // row widens its allowlist with (host/mcp enforces it).
                sandbox: if stdio {
                    McpSandbox { dirs, network: row.sandbox.network, env: row.sandbox.env.clone(), hosts: Vec::new() }
                } else {
                    McpSandbox { hosts: row.sandbox.hosts.clone(), ..McpSandbox::default() }
                },
                unsandboxed: false,
            });
        }
    }
    skipped
}

/// The bundles' hooks, for the sessions a host opens: see
/// [`HookSet::attach`].
#[derive(Clone, Default)]
pub struct HookSet(Vec<Arc<BundleHooks>>);

impl std::fmt::Debug for HookSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.iter().map(|h| &h.name)).finish()
    }
}

impl HookSet {
    /// Registers the session hooks (`SessionStart`, `UserPromptSubmit`,
    /// `Stop`, `SubagentStop`, `Notification`) of every bundle on
    /// `agent`'s bus, for its session (`resumed`: a session opened again,
    /// source `resume`). They stay registered for the agent's lifetime and
    /// write to its log only while it is open.
    pub fn attach(&self, agent: &wharf_core::Agent, resumed: bool) {
        for hooks in &self.0 {
            let s = SessionHooks::new(hooks.clone(), agent, resumed);
            if !s.subscriptions.is_empty() {
                // The listener lives as long as the agent's bus.
                let _handle = agent.bus().register(Arc::new(s));
            }
        }
    }
}

/// Installs the hooks of every bundle that has some, as plugin
/// `bundle:NAME` (see the module docs); the session hooks are returned for
/// [`HookSet::attach`].
pub fn install_hooks(registry: &Registry, bundles: &[LoadedBundle], workspace: &Path) -> Result<HookSet> {
    let mut set = HookSet::default();
    for lb in bundles {
        if lb.bundle.hooks.is_empty() {
            continue;
        }
        let plugin = PluginRef {
            id: format!("bundle:{}", lb.row.name),
            digest: lb.row.digest.as_deref().map_or("unpinned", |d| d.trim_start_matches("sha256:")).to_string(),
            config: None,
        };
        let hooks = Arc::new(BundleHooks::new(lb, plugin.clone(), workspace)?);
        let has = |e: HookEvent| lb.bundle.hooks.iter().any(|h| h.event == e);
        let regs = Registrations {
            policy: has(HookEvent::PreToolUse).then(|| hooks.clone() as Arc<dyn Policy>),
            hooks: (!hooks.subscriptions.is_empty()).then(|| hooks.clone() as Arc<dyn Hook>),
            ..Registrations::default()
        };
        registry.install(plugin, regs)?;
        set.0.push(hooks);
    }
    Ok(set)
}

/// The hooks of one bundle, as a policy and a hook listener.
pub(crate) struct BundleHooks {
    plugin: PluginRef,
    name: String,
    root: PathBuf,
    rules: Vec<HookRule>,
    subscriptions: Vec<(HookPoint, i32)>,
    workspace: PathBuf,
    grant: NativeGrant,
    env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
}

fn parse_dirs(specs: &[String], workspace: &Path, grant: &mut NativeGrant) -> Result<()> {
    for spec in specs {
        let (spec, optional) = spec.strip_suffix('?').map_or((spec.as_str(), false), |s| (s, true));
        let (path, rw) = match spec.rsplit_once(':') {
            Some((p, "rw")) => (p, true),
            Some((p, "ro")) => (p, false),
            _ => (spec, false),
        };
        let path = if Path::new(path).is_relative() { workspace.join(path) } else { PathBuf::from(path) };
        if !path.is_dir() {
            if optional {
                continue;
            }
            bail!("granted directory {} does not exist", path.display());
        }
        if rw { grant.rw.push(path) } else { grant.ro.push(path) }
    }
    Ok(())
}

impl BundleHooks {
    fn new(lb: &LoadedBundle, plugin: PluginRef, workspace: &Path) -> Result<Self> {
        let b = &lb.bundle;
        let mut grant = NativeGrant {
            ro: vec![b.root.clone(), workspace.to_path_buf()],
            network: lb.row.sandbox.network,
            ..Default::default()
        };
        parse_dirs(&lb.row.sandbox.dirs, workspace, &mut grant).with_context(|| format!("bundle `{}`", lb.row.name))?;
        let root = b.root.display().to_string();
        let mut env: Vec<(std::ffi::OsString, std::ffi::OsString)> = vec![
            ("CLAUDE_PLUGIN_ROOT".into(), root.clone().into()),
            ("PLUGIN_ROOT".into(), root.into()),
            ("CLAUDE_PROJECT_DIR".into(), workspace.as_os_str().to_owned()),
        ];
        for name in std::iter::once("PATH").chain(lb.row.sandbox.env.iter().map(String::as_str)) {
            if let Some(v) = std::env::var_os(name) {
                env.push((name.into(), v));
            }
        }
        let mut subscriptions = Vec::new();
        if b.hooks.iter().any(|h| matches!(h.event, HookEvent::PostToolUse | HookEvent::PostToolUseFailure)) {
            subscriptions.push((HookPoint::ToolsPostExecute, 0));
        }
        Ok(Self {
            plugin,
            name: lb.row.name.clone(),
            root: b.root.clone(),
            rules: b.hooks.clone(),
            subscriptions,
            workspace: workspace.to_path_buf(),
            grant,
            env,
        })
    }

    fn has(&self, event: HookEvent) -> bool {
        self.rules.iter().any(|r| r.event == event)
    }

    /// The rules of `event` for `tool` (any tool when `None`).
    fn matching(&self, event: HookEvent, tool: Option<&str>) -> Vec<&HookRule> {
        self.rules.iter().filter(|r| r.event == event && tool.is_none_or(|t| r.matcher.matches(t))).collect()
    }

    /// `FILE@DIGEST12` of what runs for `rule` now: the command and the
    /// bytes of the scripts it names, read now.
    fn version(&self, rule: &HookRule) -> (String, String) {
        let mut h = Sha256::new();
        h.update(rule.command.as_bytes());
        let scripts = rule.scripts(&self.root);
        for s in &scripts {
            h.update([0]);
            h.update(std::fs::read(s).unwrap_or_default());
        }
        let digest = hex::encode(h.finalize());
        let shown = scripts
            .first()
            .map(|s| s.strip_prefix(&self.root).unwrap_or(s).display().to_string())
            .unwrap_or_else(|| rule.command.chars().take(60).collect());
        (shown, digest)
    }

    /// Runs one hook (see the module docs).
    async fn run(&self, rule: &HookRule, stdin: &Value, cap: Duration) -> HookRun {
        let failed = |why: String| HookRun { code: Some(-1), stdout: String::new(), stderr: why, timed_out: false };
        let cmd = NativeCommand {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), rule.command.clone().into()],
            cwd: self.workspace.clone(),
            env: self.env.clone(),
            sandbox: Some(self.grant.clone()),
        };
        let (proc, io) = match NativeProcess::spawn(cmd) {
            Ok(p) => p,
            Err(e) => return failed(format!("could not start in the OS sandbox: {e}")),
        };
        let body = serde_json::to_vec(stdin).unwrap_or_default();
        let timeout = rule.timeout.min(cap);
        let NativeStdio { mut stdin, mut stdout, mut stderr } = io;
        let work = async {
            let write = async move {
                // A hook that does not read its input is fine.
                let _ = stdin.write_all(&body).await;
                drop(stdin);
            };
            let (_, out, err) = tokio::join!(write, read_bounded(&mut stdout), read_bounded(&mut stderr));
            proc.exited().await;
            (out, err)
        };
        match tokio::time::timeout(timeout, work).await {
            Err(_) => {
                proc.kill();
                HookRun { code: None, stdout: String::new(), stderr: String::new(), timed_out: true }
            }
            Ok((stdout, stderr)) => {
                let status = proc.wait().await;
                let code = status.and_then(|s| s.code());
                HookRun { code, stdout, stderr, timed_out: false }
            }
        }
    }

    /// Runs the hooks of `event` for `tool` in order; the first that
    /// blocks, asks or fails decides. Returns the answers with each hook's
    /// `FILE@DIGEST`.
    async fn run_all(
        &self,
        event: HookEvent,
        tool: Option<&str>,
        stdin: &Value,
        cap: Duration,
    ) -> Vec<(String, String, Result<Answer, String>)> {
        let mut out = Vec::new();
        for rule in self.matching(event, tool) {
            let (file, digest) = self.version(rule);
            let run = self.run(rule, stdin, cap).await;
            let answer = interpret(event, &run).map_err(|e| e.0);
            if let Err(e) = &answer {
                tracing::warn!(bundle = %self.name, hook = %file, version = %&digest[..12], "hook failed: {e}");
            }
            out.push((file, digest, answer));
        }
        out
    }

    fn tool_input(tool: &str, args: &Value) -> Value {
        json!({ "tool_name": claude_tool_name(tool).unwrap_or(tool), "tool_input": args })
    }
}

async fn read_bounded<R: tokio::io::AsyncRead + Unpin>(r: &mut R) -> String {
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = MAX_OUTPUT_BYTES.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}

fn short(d: &str) -> &str {
    d.get(..12).unwrap_or(d)
}

impl Policy for BundleHooks {
    fn plugin(&self) -> &PluginRef {
        &self.plugin
    }

    fn evaluate(&self, request: PolicyRequest) -> BoxFuture<'_, Result<Decision, PluginError>> {
        Box::pin(async move { self.evaluate_versioned(request).await.map(|(d, _)| d) })
    }

    fn evaluate_versioned(
        &self,
        request: PolicyRequest,
    ) -> BoxFuture<'_, Result<(Decision, Option<PluginRef>), PluginError>> {
        Box::pin(async move {
            let extra = Self::tool_input(&request.tool, &request.arguments);
            let stdin = input(HookEvent::PreToolUse, &request.session_id, &self.workspace, extra);
            let answers = self.run_all(HookEvent::PreToolUse, Some(&request.tool), &stdin, TOOL_HOOK_CAP).await;
            // The version that decided: the digest of every hook that ran.
            let mut h = Sha256::new();
            for (_, d, _) in &answers {
                h.update(d.as_bytes());
            }
            let version = PluginRef { digest: hex::encode(h.finalize()), ..self.plugin.clone() };
            let mut decision = Decision::Allow;
            let mut rewrite = None;
            for (file, digest, answer) in answers {
                let at = format!("{} hook {file}@{}", self.name, short(&digest));
                match answer {
                    Err(e) => {
                        return Err(PluginError::failed(
                            ToolErrorCode::Denied,
                            format!("{at} failed, so the call is denied: {e}"),
                        ));
                    }
                    Ok(Answer::Block { reason }) => {
                        return Ok((Decision::Deny { reason: format!("{at}: {reason}") }, Some(version)));
                    }
                    Ok(Answer::Ask { reason, input }) => {
                        let note = if input.is_some() { " (its updatedInput is not applied to an ask)" } else { "" };
                        decision = Decision::Ask { reason: format!("{at}: {reason}{note}") };
                    }
                    Ok(Answer::Allow { input: Some(i) } | Answer::Rewrite { input: i }) => rewrite = Some(i),
                    Ok(Answer::Allow { input: None } | Answer::Pass | Answer::Context { .. }) => {}
                }
            }
            if let (Decision::Allow, Some(args)) = (&decision, rewrite) {
                decision = Decision::Rewrite { args };
            }
            Ok((decision, Some(version)))
        })
    }
}

impl Hook for BundleHooks {
    fn plugin(&self) -> &PluginRef {
        &self.plugin
    }

    fn subscriptions(&self) -> &[(HookPoint, i32)] {
        &self.subscriptions
    }

    fn handle(&self, point: HookPoint, payload: Value) -> BoxFuture<'_, Result<HookOutcome, PluginError>> {
        Box::pin(async move {
            let session = payload.get("session_id").and_then(Value::as_str).unwrap_or_default().to_string();
            match point {
                HookPoint::ToolsPostExecute => {
                    let tool = payload.get("tool").and_then(Value::as_str).unwrap_or_default().to_string();
                    let mut extra = Self::tool_input(&tool, payload.get("arguments").unwrap_or(&Value::Null));
                    extra["tool_use_id"] = payload.get("call_id").cloned().unwrap_or(Value::Null);
                    let outcome = payload.get("outcome").cloned().unwrap_or(Value::Null);
                    let event = if outcome.get("is_error").and_then(Value::as_bool) == Some(true) {
                        extra["error"] = outcome.get("content").cloned().unwrap_or(Value::Null);
                        extra["is_interrupt"] = json!(false);
                        HookEvent::PostToolUseFailure
                    } else {
                        extra["tool_response"] = outcome;
                        HookEvent::PostToolUse
                    };
                    if !self.has(event) {
                        return Ok(HookOutcome::Pass);
                    }
                    let stdin = input(event, &session, &self.workspace, extra);
                    let mut contexts = Vec::new();
                    for (file, digest, answer) in self.run_all(event, Some(&tool), &stdin, OTHER_HOOK_CAP).await {
                        let at = format!("{} hook {file}@{}", self.name, short(&digest));
                        match answer {
                            Err(e) => return Ok(HookOutcome::Reject(format!("{at} failed: {e}"))),
                            Ok(Answer::Block { reason }) => return Ok(HookOutcome::Reject(format!("{at}: {reason}"))),
                            Ok(Answer::Context { text }) => contexts.push(text),
                            Ok(_) => {}
                        }
                    }
                    if contexts.is_empty() {
                        return Ok(HookOutcome::Pass);
                    }
                    let mut p = payload;
                    if let Some(c) = p.pointer_mut("/outcome/content")
                        && let Some(text) = c.as_str()
                    {
                        *c = json!(format!("{text}\n\n{}", contexts.join("\n")));
                    }
                    Ok(HookOutcome::Replace(p))
                }
                _ => Ok(HookOutcome::Pass),
            }
        })
    }
}

/// Context a hook added, cut to [`MAX_CONTEXT_CHARS`].
fn bounded_context(text: &str) -> String {
    let text = text.trim();
    match text.char_indices().nth(MAX_CONTEXT_CHARS) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

/// What one session's hooks keep.
#[derive(Default)]
struct SessionState {
    /// `SessionStart` hooks ran and succeeded.
    started: bool,
    /// Their context: for every step of the session.
    session_context: Vec<String>,
    /// The turn of `turn_context`.
    turn: u64,
    /// `UserPromptSubmit` context: for the steps of that turn.
    turn_context: Vec<String>,
    /// `Stop` / `SubagentStop` continuations per session and turn.
    stops: HashMap<(String, u64), u32>,
}

/// One bundle's session hooks on one agent's bus (see [`HookSet::attach`]).
struct SessionHooks {
    hooks: Arc<BundleHooks>,
    session: String,
    log: LogRelease,
    source: &'static str,
    subscriptions: Vec<(HookPoint, i32)>,
    state: Mutex<SessionState>,
}

impl SessionHooks {
    fn new(hooks: Arc<BundleHooks>, agent: &wharf_core::Agent, resumed: bool) -> Self {
        let mut subscriptions = Vec::new();
        let context = hooks.has(HookEvent::SessionStart) || hooks.has(HookEvent::UserPromptSubmit);
        if context {
            subscriptions.push((HookPoint::AgentPreStep, 0));
            subscriptions.push((HookPoint::SystemPrompt, 0));
        }
        if hooks.has(HookEvent::Stop) || hooks.has(HookEvent::SubagentStop) {
            subscriptions.push((HookPoint::AgentTurnStopping, 0));
        }
        if hooks.has(HookEvent::Notification) {
            subscriptions.push((HookPoint::SessionEvent, 0));
        }
        Self {
            hooks,
            session: agent.session_id().to_string(),
            log: agent.log().watch_release(),
            source: if resumed { "resume" } else { "startup" },
            subscriptions,
            state: Mutex::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, SessionState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Logs context a hook added (while the session's log is open).
    fn log_context(&self, event: HookEvent, turn: u64, hook: &str, text: &str) {
        let Some(log) = self.log.upgrade() else { return };
        let data = json!({
            "bundle": self.hooks.name,
            "event": event.as_str(),
            "hook": hook,
            "turn": turn,
            "text": text,
        });
        if let Err(e) = log.append_ignorable(CONTEXT_EVENT, data) {
            tracing::warn!(bundle = %self.hooks.name, "could not log a hook's context: {e}");
        }
    }

    /// Runs `event`'s hooks (`matched`: the source for `SessionStart`);
    /// their contexts, or why the turn is blocked.
    async fn contexts(
        &self,
        event: HookEvent,
        matched: Option<&str>,
        extra: Value,
        turn: u64,
    ) -> Result<Vec<String>, String> {
        let stdin = input(event, &self.session, &self.hooks.workspace, extra);
        let mut out = Vec::new();
        for (file, digest, answer) in self.hooks.run_all(event, matched, &stdin, OTHER_HOOK_CAP).await {
            let at = format!("{} hook {file}@{}", self.hooks.name, short(&digest));
            match answer {
                Err(e) => return Err(format!("{at} failed: {e}")),
                Ok(Answer::Block { reason }) => return Err(format!("{at}: {reason}")),
                Ok(Answer::Context { text }) => {
                    let text = bounded_context(&text);
                    self.log_context(event, turn, &format!("{file}@{}", short(&digest)), &text);
                    out.push(format!(
                        "Context from the `{}` plugin's {} hook:\n{text}",
                        self.hooks.name,
                        event.as_str()
                    ));
                }
                Ok(_) => {}
            }
        }
        Ok(out)
    }

    async fn pre_step(&self, payload: &Value) -> HookOutcome {
        let turn = payload.get("turn").and_then(Value::as_u64).unwrap_or_default();
        if self.hooks.has(HookEvent::SessionStart) && !self.state().started {
            // Fail closed: the turn is blocked, and the next one tries again.
            match self
                .contexts(HookEvent::SessionStart, Some(self.source), json!({ "source": self.source }), turn)
                .await
            {
                Ok(ctx) => {
                    let mut st = self.state();
                    st.started = true;
                    st.session_context = ctx;
                }
                Err(why) => return HookOutcome::Reject(why),
            }
        }
        let Some(inputs) = payload.get("input").and_then(Value::as_array).filter(|a| !a.is_empty()) else {
            return HookOutcome::Pass;
        };
        if !self.hooks.has(HookEvent::UserPromptSubmit) {
            return HookOutcome::Pass;
        }
        let prompt = inputs.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("\n\n");
        match self.contexts(HookEvent::UserPromptSubmit, None, json!({ "prompt": prompt }), turn).await {
            Ok(ctx) => {
                let mut st = self.state();
                if st.turn != turn {
                    st.turn = turn;
                    st.turn_context.clear();
                }
                st.turn_context.extend(ctx);
                HookOutcome::Pass
            }
            Err(why) => HookOutcome::Reject(why),
        }
    }

    fn system_prompt(&self, payload: Value) -> HookOutcome {
        let turn = payload.get("turn").and_then(Value::as_u64).unwrap_or_default();
        let extra: Vec<String> = {
            let st = self.state();
            let mut v = st.session_context.clone();
            if st.turn == turn {
                v.extend(st.turn_context.iter().cloned());
            }
            v
        };
        if extra.is_empty() {
            return HookOutcome::Pass;
        }
        let mut p = payload;
        let prompt = p.get("prompt").and_then(Value::as_str).unwrap_or_default().trim_end().to_string();
        p["prompt"] = json!(format!("{prompt}\n\n{}", extra.join("\n\n")));
        HookOutcome::Replace(p)
    }

    async fn turn_stopping(&self, payload: &Value, session: &str) -> HookOutcome {
        // A child (the `subagent` tool's) shares its parent's bus.
        let (event, extra_id) = if session == self.session {
            (HookEvent::Stop, None)
        } else {
            (HookEvent::SubagentStop, Some(session.to_string()))
        };
        if !self.hooks.has(event) {
            return HookOutcome::Pass;
        }
        let turn = payload.get("turn").and_then(Value::as_u64).unwrap_or_default();
        let key = (session.to_string(), turn);
        let done = self.state().stops.get(&key).copied().unwrap_or(0);
        if done >= MAX_STOP_CONTINUES {
            return HookOutcome::Pass;
        }
        let mut extra = json!({ "stop_hook_active": done > 0 });
        if let Some(id) = extra_id {
            extra["agent_id"] = json!(id);
        }
        let stdin = input(event, &self.session, &self.hooks.workspace, extra);
        for (file, digest, answer) in self.hooks.run_all(event, None, &stdin, OTHER_HOOK_CAP).await {
            if let Ok(Answer::Block { reason }) = answer {
                let mut st = self.state();
                if st.stops.len() >= 4096 {
                    st.stops.clear();
                }
                *st.stops.entry(key).or_default() += 1;
                return HookOutcome::Reject(format!("{} hook {file}@{}: {reason}", self.hooks.name, short(&digest)));
            }
        }
        HookOutcome::Pass
    }

    async fn notify(&self, payload: &Value) {
        if payload.get("type").and_then(Value::as_str) != Some("approval/asked") {
            return;
        }
        let data = payload.get("data").cloned().unwrap_or(Value::Null);
        let tool = data.get("tool").and_then(Value::as_str).unwrap_or_default();
        let reason = data.get("reason").and_then(Value::as_str).unwrap_or_default();
        let message = format!(
            "Wharf needs your permission to use {}: {}",
            claude_tool_name(tool).unwrap_or(tool),
            reason.chars().take(2000).collect::<String>()
        );
        let extra =
            json!({ "message": message, "title": "Permission needed", "notification_type": "permission_prompt" });
        let stdin = input(HookEvent::Notification, &self.session, &self.hooks.workspace, extra);
        // Failures are logged by `run_all`; a notification decides nothing.
        let _ = self.hooks.run_all(HookEvent::Notification, Some("permission_prompt"), &stdin, OTHER_HOOK_CAP).await;
    }
}

impl Hook for SessionHooks {
    fn plugin(&self) -> &PluginRef {
        &self.hooks.plugin
    }

    fn subscriptions(&self) -> &[(HookPoint, i32)] {
        &self.subscriptions
    }

    fn handle(&self, point: HookPoint, payload: Value) -> BoxFuture<'_, Result<HookOutcome, PluginError>> {
        Box::pin(async move {
            // `session/event` payloads are events, without a session id.
            let session = payload.get("session_id").and_then(Value::as_str).unwrap_or_default().to_string();
            Ok(match point {
                HookPoint::AgentPreStep if session == self.session => self.pre_step(&payload).await,
                HookPoint::SystemPrompt if session == self.session => self.system_prompt(payload),
                HookPoint::AgentTurnStopping => self.turn_stopping(&payload, &session).await,
                HookPoint::SessionEvent => {
                    self.notify(&payload).await;
                    HookOutcome::Pass
                }
                _ => HookOutcome::Pass,
            })
        })
    }
}
