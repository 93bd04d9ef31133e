//! [`Harness`]: a running host assembled from [`HostOptions`] — layered
//! config → runtime → loaded plugins → MCP servers → session store. Every
//! surface (run, chat, web, serve, acp, mcp) builds its host here, so they
//! all see the same plugins, MCP tools, grants and sessions.
//!
//! The profile's `[[mcp]]` servers connect in the background as soon as the
//! host starts ([`McpManager`]); their tools join the registry
//! as `mcp__SERVER__TOOL`. A surface awaits [`Harness::mcp_ready`] before a
//! session's first turn (so the first step already sees the tools of the
//! required servers), every agent from [`Harness::open_agent`] logs the
//! servers' `plugin/*` events and ends turns `blocked` while a required
//! server is unavailable, and [`Harness::close`] (or dropping the host)
//! stops the servers.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::mcp::McpManager;
use anyhow::{Context, Result};
use wharf_config::Config;
use wharf_core::agent::{AttachTool, CompactionConfig};
use wharf_core::approval::{Approver, HeadlessApprover, HeadlessRule};
use wharf_core::pipeline::{OutputLimits, PipelineConfig};
use wharf_core::registry::Registry;
use wharf_core::store::{NewSession, SessionStore};
use wharf_core::{Agent, AgentConfig};
use wharf_runtime::engine::EngineOptions;
use wharf_runtime::plugins::{PluginHost, SpecSource, WatchHandle};
use wharf_runtime::{Runtime, RuntimeOptions};

use crate::models::resolve_model_spec;
use crate::options::{HostOptions, Notice, check_plugin_dir};
use crate::plugin_specs::{
    ConfigSeen, LiveOverrides, ReloadCauses, apply_live, merge_keys, shadowing_text, specs, tool_precedence,
};
use crate::sessions::{latest_session, resolve_session};

/// The tool `@path` attachments become calls of (the `fs` plugin's), and
/// its argument taking the path: the host's choice, the core knows no tool.
const ATTACH_TOOL: &str = "read";
/// See [`ATTACH_TOOL`].
const ATTACH_PATH_ARGUMENT: &str = "path";

/// A running host: config, plugins and the session store.
pub struct Harness {
    /// The composed config.
    pub config: Config,
    /// The loaded plugins.
    pub plugins: Arc<PluginHost>,
    /// Session logs.
    pub store: SessionStore,
    /// The workspace.
    pub workspace: PathBuf,
    /// What the host was built from (for reloads).
    pub options: HostOptions,
    /// The configured MCP servers (`None` when there are none).
    pub mcp: Option<Arc<McpManager>>,
    /// Config keys changed at run time (see [`Harness::reconfigure_plugin`]).
    pub live: LiveOverrides,
    /// Why plugins were reloaded (see [`Harness::take_reload_cause`]).
    reload_causes: ReloadCauses,
    /// The `[[bundle]]` rows' bundles.
    bundles: Vec<crate::bundles::LoadedBundle>,
    /// Their session hooks, attached to every agent opened here.
    bundle_hooks: crate::bundles::HookSet,
    /// The adapter new agents use (`agent.adapter`, changed by `--model` /
    /// `/model ADAPTER…`; `None`: the first loaded).
    adapter: Arc<Mutex<Option<String>>>,
    _watch: Option<WatchHandle>,
}

impl Drop for Harness {
    fn drop(&mut self) {
        // Stdio servers are killed when their connections drop.
        if let Some(m) = &self.mcp {
            m.shutdown();
        }
    }
}

impl Harness {
    /// Loads config and plugins. Any plugin that fails to load fails the
    /// start (nothing runs half-configured).
    pub async fn start(options: &HostOptions) -> Result<Self> {
        Self::start_with(options, |_| Ok(())).await
    }

    /// Like [`Harness::start`], editing the composed config before plugins
    /// load (used by `--replay` to swap in the replay adapter).
    pub async fn start_with(options: &HostOptions, edit: impl FnOnce(&mut Config) -> Result<()>) -> Result<Self> {
        let args = options;
        let mut config = args.load_config()?;
        let seen = ConfigSeen::of(&config);
        edit(&mut config)?;
        // Bundles: skills and MCP servers become rows; hooks are installed
        // below, once the registry exists.
        let bundles = crate::bundles::load(&config)?;
        for skipped in crate::bundles::apply(&mut config, &bundles) {
            args.notify(Notice::Warning(skipped));
        }
        let live: LiveOverrides = Arc::default();
        // `--model`: a live override from the start, so config reloads keep it.
        if let Some(spec) = &args.model {
            let choice = resolve_model_spec(&config, config.agent.adapter.as_deref(), spec)?;
            if let Some(w) = &choice.warning {
                args.notify(Notice::Warning(format!("--model: {w}")));
            }
            if let Some(m) = &choice.model {
                let mut set = serde_json::Map::new();
                set.insert("model".into(), serde_json::Value::String(m.clone()));
                live.lock().unwrap_or_else(|e| e.into_inner()).insert(choice.adapter.clone(), set);
            }
            config.agent.adapter = Some(choice.adapter);
        }
        check_plugin_dir(&config, &args.plugin_dir, args.plugin_dir_explicit)?;
        let workspace = args.workspace()?;
        let base = args.runtime.clone();
        let runtime = Runtime::new(RuntimeOptions {
            engine: EngineOptions { pooling: config.engine.pooling && base.engine.pooling, ..base.engine },
            cache_dir: Some(args.cache_dir_for(&config)),
            tiering: base.tiering,
        })?;
        if let Some(max) = config.engine.max_tools_per_plugin {
            runtime.set_max_tools(max);
        }
        // A cold cache compiles on the first tier (Winch) and optimises in the
        // background (`Runtime::enable_tiering`).
        runtime.enable_tiering();
        let registry = Arc::new(Registry::new());
        registry.set_precedence(tool_precedence(&config));
        let bundle_hooks = crate::bundles::install_hooks(&registry, &bundles, &workspace)?;
        let plugins = PluginHost::new(runtime, registry.clone());
        // MCP servers connect while the components load.
        #[cfg(feature = "mcp")]
        let mcp = (!config.mcp.is_empty()).then(|| McpManager::start(registry, config.mcp.clone(), &workspace));
        #[cfg(not(feature = "mcp"))]
        let mcp: Option<Arc<McpManager>> = match config.mcp.is_empty() {
            true => None,
            false => return Err(crate::mcp::unavailable(&config.mcp)),
        };
        let mut initial = specs(&config)?;
        apply_live(&mut initial, &live);
        if let Err(errors) = plugins.load_all(initial).await {
            if let Some(m) = &mcp {
                m.stop().await;
            }
            return Err(errors.into());
        }
        // A tool name another row already has: the author hears of it at
        // start, not from a model that calls the other row's tool.
        for c in plugins.registry().snapshot().tool_conflicts.iter() {
            if config.plugins.iter().any(|r| r.id == c.holder) && config.plugins.iter().any(|r| r.id == c.refused) {
                args.notify(Notice::Warning(shadowing_text(&config, &c.tool, &c.holder, &c.refused)));
            }
        }
        let session_dir = args.session_dir.clone().unwrap_or_else(|| config.session.dir.clone());
        // Processes run by plugins must not read or rewrite session logs,
        // the compile cache or config layers outside the workspace.
        let mut protected = vec![session_dir.clone(), args.cache_dir_for(&config)];
        protected.extend(config.sources.iter().filter(|p| !p.starts_with(&workspace)).cloned());
        wharf_runtime::process::protect_paths(
            protected.into_iter().filter_map(|p| std::fs::canonicalize(&p).ok().or(Some(p))),
        );
        let store = crate::sessions::open_store(config.session.store.as_deref(), session_dir)?;
        let reload_causes = ReloadCauses::default();
        let watch = if !args.watch {
            None
        } else {
            let opts = args.load_options()?;
            let live = live.clone();
            let registry = plugins.registry().clone();
            let (causes, seen, ws) = (reload_causes.clone(), Mutex::new(seen), workspace.clone());
            let home = args.home.clone();
            let source: SpecSource = Arc::new(move || {
                let mut c = wharf_config::load(&opts).map_err(|e| e.to_string())?;
                // The same bundle rows as at the start (skills directories).
                let b = crate::bundles::load(&c).map_err(|e| format!("{e:#}"))?;
                crate::bundles::apply(&mut c, &b);
                registry.set_precedence(tool_precedence(&c));
                let now = ConfigSeen::of(&c);
                let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                seen.changes(&now, &ws, home.as_deref(), &causes);
                *seen = now;
                let mut s = specs(&c)?;
                apply_live(&mut s, &live);
                Ok(s)
            });
            match plugins.watch(config.watch.clone(), Some(source)) {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::warn!("hot reload disabled: cannot watch files: {e:#}");
                    None
                }
            }
        };
        let adapter = Arc::new(Mutex::new(config.agent.adapter.clone()));
        Ok(Self {
            config,
            plugins,
            store,
            workspace,
            options: args.clone(),
            mcp,
            live,
            reload_causes,
            bundles,
            bundle_hooks,
            adapter,
            _watch: watch,
        })
    }

    /// The bundles of the host's `[[bundle]]` rows.
    pub fn bundles(&self) -> &[crate::bundles::LoadedBundle] {
        &self.bundles
    }

    /// The effective `config` of plugin row `id`: the composed config with
    /// the live overrides merged over it (`None`: no such row).
    pub fn plugin_config(&self, id: &str) -> Option<serde_json::Value> {
        let row = self.config.plugins.iter().find(|r| r.id == id)?;
        let mut config = row.config.clone();
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(set) = live.get(id) {
            merge_keys(&mut config, set);
        }
        Some(config)
    }

    /// Why plugin `id` was last reloaded with its config changed, once:
    /// `Some(Some(FILES))` after a config file change, `Some(None)` after
    /// [`Harness::reconfigure_plugin`] (its caller reports that), `None`
    /// when nothing was recorded.
    pub fn take_reload_cause(&self, id: &str) -> Option<Option<String>> {
        self.reload_causes.lock().unwrap_or_else(|e| e.into_inner()).remove(id)
    }

    /// Changes top-level keys of plugin `id`'s config while the host runs
    /// and reloads the plugin with it (a hot swap: calls in flight finish on
    /// the old version). The change survives later hot reloads; if the new
    /// version fails to load, the old one keeps serving and the change is
    /// dropped.
    pub async fn reconfigure_plugin(&self, id: &str, set: serde_json::Map<String, serde_json::Value>) -> Result<()> {
        if !self.config.plugins.iter().any(|r| r.id == id) {
            anyhow::bail!("no plugin `{id}` in the profile");
        }
        let before = {
            let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
            let before = live.get(id).cloned();
            let entry = live.entry(id.to_string()).or_default();
            for (k, v) in &set {
                entry.insert(k.clone(), v.clone());
            }
            before
        };
        let mut all = specs(&self.config)?;
        apply_live(&mut all, &self.live);
        let spec = all.into_iter().find(|s| s.id == id).context("the plugin row disappeared")?;
        self.reload_causes.lock().unwrap_or_else(|e| e.into_inner()).insert(id.to_string(), None);
        if let Err(e) = self.plugins.reload(spec).await {
            let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
            match before {
                Some(b) => live.insert(id.to_string(), b),
                None => live.remove(id),
            };
            anyhow::bail!("cannot reconfigure `{id}`: {e}");
        }
        Ok(())
    }

    /// The adapter new agents use: the chosen one, else the first loaded.
    pub fn adapter(&self) -> Option<String> {
        let chosen = self.adapter.lock().unwrap_or_else(|e| e.into_inner()).clone();
        chosen.or_else(|| self.plugins.registry().snapshot().llm(None).map(|a| a.plugin().id.clone()))
    }

    /// The adapter and model in force: the model is the adapter's effective
    /// `model` config key, else what the loaded version reports.
    pub fn current_model(&self) -> Option<(String, String)> {
        let adapter = self.adapter()?;
        let model = self
            .plugin_config(&adapter)
            .and_then(|c| c.get("model").and_then(serde_json::Value::as_str).map(str::to_string))
            .or_else(|| self.plugins.versions().get(&adapter).and_then(|v| v.model_info.clone()).map(|i| i.model))?;
        Some((adapter, model))
    }

    /// Switches the model (see [`resolve_model_spec`]): a new model of an
    /// adapter reconfigures that plugin (a hot swap; the next request
    /// carries it), a new adapter serves agents built from now on (see
    /// [`Harness::rebuild_agent`]). Returns the adapter and model in force,
    /// and the warning of a model the profile does not list.
    pub async fn switch_model(&self, spec: &str) -> Result<(String, String, Option<String>)> {
        let current = self.adapter();
        let choice = resolve_model_spec(&self.config, current.as_deref(), spec)?;
        let loaded = self.plugins.registry().snapshot().llm(Some(&choice.adapter)).is_some();
        anyhow::ensure!(loaded, "`{}` is not a loaded model adapter", choice.adapter);
        if let Some(m) = &choice.model {
            let now = self.plugin_config(&choice.adapter);
            if now.as_ref().and_then(|c| c.get("model")).and_then(serde_json::Value::as_str) != Some(m.as_str()) {
                let mut set = serde_json::Map::new();
                set.insert("model".into(), serde_json::Value::String(m.clone()));
                self.reconfigure_plugin(&choice.adapter, set).await?;
            }
        }
        *self.adapter.lock().unwrap_or_else(|e| e.into_inner()) = Some(choice.adapter);
        let (adapter, model) = self.current_model().context("the adapter reports no model")?;
        Ok((adapter, model, choice.warning))
    }

    /// Logs the adapter and model in force into `log` as a
    /// [`crate::usage::MODEL_EVENT`] when they differ from the last logged
    /// (`reason`: `initial`, `resume`, `change`).
    pub fn log_model(&self, log: &wharf_core::store::SessionLog, reason: &str) -> Result<()> {
        let Some((adapter, model)) = self.current_model() else {
            return Ok(());
        };
        let logged = self.store.load(log.id()).ok().and_then(|l| crate::usage::logged_model(&l.events));
        if logged.as_ref().is_some_and(|(a, m)| *a == adapter && *m == model) {
            return Ok(());
        }
        let data = serde_json::json!({ "adapter": adapter, "model": model, "reason": reason });
        log.append_ignorable(crate::usage::MODEL_EVENT, data)?;
        Ok(())
    }

    /// The `session/model` event for the model in force, if there is one.
    fn model_event(&self, reason: &str) -> Option<wharf_core::events::EventKind> {
        let (adapter, model) = self.current_model()?;
        let data = serde_json::json!({ "adapter": adapter, "model": model, "reason": reason });
        Some(wharf_core::events::EventKind::Unknown { type_name: crate::usage::MODEL_EVENT.to_string(), data })
    }

    /// A new agent over `old`'s session log with the current settings (the
    /// adapter in force). `old` must be idle; it should be dropped.
    pub fn rebuild_agent(&self, old: &Agent, approver: Arc<dyn Approver>, max_steps: Option<u32>) -> Result<Agent> {
        let agent =
            Agent::new(old.log().clone(), self.plugins.registry().clone(), approver, self.agent_config(max_steps));
        if let Some(m) = &self.mcp {
            let _guard = m.attach_agent(&agent)?;
        }
        self.bundle_hooks.attach(&agent, true);
        Ok(agent)
    }

    /// The latest session of this workspace (by creation time), for
    /// `--continue`.
    /// Says so on stderr when that session was started with another
    /// profile than this host's.
    pub fn latest_session(&self) -> Result<String> {
        let id = latest_session(&self.store, &self.workspace)?.with_context(|| {
            format!(
                "no session to continue in workspace {} (sessions in {}); start one without --continue",
                self.workspace.display(),
                self.store.describe()
            )
        })?;
        let header = self.store.header(&id).ok();
        if let Some(theirs) = header.and_then(|h| h.profile)
            && theirs != self.options.profile
        {
            self.options.notify(Notice::Note(format!(
                "continuing session {id}, started with profile `{theirs}`, with profile `{}` \
                 (its plugins and model from now on); pass `--profile {theirs}` to keep the session's own",
                self.options.profile
            )));
        }
        Ok(id)
    }

    /// Waits until every required MCP server has connected or failed its
    /// first attempt; `Err` names each that is not available (turns of
    /// agents from [`open_agent`](Self::open_agent) then end `blocked` with
    /// that message).
    pub async fn mcp_ready(&self) -> Result<(), crate::mcp::NotReady> {
        match &self.mcp {
            Some(m) => m.wait_required().await,
            None => Ok(()),
        }
    }

    /// Stops the MCP servers and waits (briefly) for their processes to end.
    /// Also lets the background tier-up finish (at most 60 s), so the
    /// optimised code of a cold start reaches the on-disk cache.
    pub async fn close(&self) {
        if let Some(m) = &self.mcp {
            m.stop().await;
        }
        let rt = self.plugins.runtime().clone();
        if rt.tier_up_pending() > 0 {
            let done = tokio::task::spawn_blocking(move || rt.wait_tier_up(std::time::Duration::from_secs(60))).await;
            if !matches!(done, Ok(true)) {
                tracing::warn!("optimised code not cached yet: the next start compiles again");
            }
        }
    }

    /// The agent settings from the config.
    pub fn agent_config(&self, max_steps: Option<u32>) -> AgentConfig {
        AgentConfig {
            max_steps: max_steps.unwrap_or(self.config.agent.max_steps).max(1),
            llm: self.adapter.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            pipeline: PipelineConfig {
                tool_pool: self.config.agent.tool_pool.max(1) as usize,
                output: OutputLimits {
                    max_model_bytes: self.config.agent.tool_output_limit,
                    ..OutputLimits::default()
                },
                workspace: Some(self.workspace.display().to_string()),
                ..PipelineConfig::default()
            },
            max_depth: self.config.agent.max_subagent_depth,
            system_prompt: self.config.agent.system_prompt.clone(),
            compaction: CompactionConfig {
                enabled: self.config.agent.compaction,
                threshold: f64::from(self.config.agent.compact_at_percent) / 100.0,
                context_window: self.config.agent.context_window,
                ..CompactionConfig::default()
            },
            attach: Some(AttachTool { tool: ATTACH_TOOL.into(), path_argument: ATTACH_PATH_ARGUMENT.into() }),
            listing: wharf_core::catalog::ListingConfig {
                budget_bytes: Some(self.config.agent.tool_list_budget),
                lazy_plugins: self.config.agent.lazy_rows.iter().cloned().collect(),
            },
            ..AgentConfig::default()
        }
    }

    /// Refuses to resume session `id` here when its header names another
    /// workspace.
    fn check_workspace(&self, id: &str) -> Result<()> {
        // The header is the first line; the whole log is read by `open`.
        let header = self.store.header(id).ok();
        let Some(theirs) = header.and_then(|h| h.workspace) else {
            return Ok(());
        };
        let same =
            Path::new(&theirs) == self.workspace || std::fs::canonicalize(&theirs).is_ok_and(|p| p == self.workspace);
        anyhow::ensure!(
            same,
            "session {id} belongs to workspace {theirs}, not {}: run it from there (or pass `--workspace {theirs}`)",
            self.workspace.display()
        );
        Ok(())
    }

    /// The headless approver from the config's `ask` rule.
    pub fn headless_approver(&self) -> Arc<dyn Approver> {
        let rule = match self.config.agent.ask {
            wharf_config::AskRule::Deny => HeadlessRule::Deny,
            wharf_config::AskRule::Allow => HeadlessRule::Allow,
        };
        Arc::new(HeadlessApprover::new(rule))
    }

    /// Opens a new session, or resumes `resume` (an id or a unique prefix),
    /// and builds its agent. A session resumes only in the workspace it was
    /// created in (its tools would otherwise act on another tree than its
    /// history talks about). The plugin load history is logged first and
    /// later changes are logged live.
    pub fn open_agent(
        &self,
        resume: Option<&str>,
        approver: Arc<dyn Approver>,
        max_steps: Option<u32>,
    ) -> Result<(Agent, u64)> {
        self.open_agent_until(resume, approver, max_steps, tokio_util::sync::CancellationToken::new())
    }

    /// Like [`open_agent`](Self::open_agent); the task that logs later
    /// plugin changes into the session ends when `stop` fires, so the log
    /// can close (a server unloading an idle session).
    pub fn open_agent_until(
        &self,
        resume: Option<&str>,
        approver: Arc<dyn Approver>,
        max_steps: Option<u32>,
        stop: tokio_util::sync::CancellationToken,
    ) -> Result<(Agent, u64)> {
        let resume = resume.map(|p| resolve_session(&self.store, p)).transpose()?;
        let resume = resume.as_deref();
        let log = match resume {
            Some(id) => {
                self.check_workspace(id)?;
                // A durable program the crash interrupted stays open for
                // the agent to re-run (wharf_core::durable).
                let snap = self.plugins.registry().snapshot();
                let keep = |c: &wharf_core::plugin::ToolCall| wharf_core::durable::is_durable_call(&snap, c);
                let (log, report) = self.store.open_with(id, &keep)?;
                for w in &report.warnings {
                    self.options.notify(Notice::Warning(w.to_string()));
                }
                log
            }
            None => self.store.create(NewSession {
                id: None,
                workspace: Some(self.workspace.display().to_string()),
                profile: Some(self.options.profile.clone()),
            })?,
        };
        // A new session streams from its header; a resumed one from here on.
        let first_seq = if resume.is_some() { log.last_seq() + 1 } else { 1 };
        // The plugins in force and the model, in one append (one database
        // transaction on a fleet store).
        let mut opening = self.plugins.history();
        if resume.is_some() {
            if !opening.is_empty() {
                log.append_batch(opening)?;
            }
            self.log_model(&log, "resume")?;
        } else {
            // A new log has no model logged yet: nothing to read back.
            if let Some(model) = self.model_event("initial") {
                opening.push(model);
            }
            if !opening.is_empty() {
                log.append_batch(opening)?;
            }
        }
        let mut rx = self.plugins.subscribe();
        let live = log.clone();
        tokio::spawn(async move {
            loop {
                let ev = tokio::select! {
                    r = rx.recv() => match r { Ok(ev) => ev, Err(_) => return },
                    _ = stop.cancelled() => return,
                };
                if live.append(ev).is_err() {
                    return;
                }
            }
        });
        let agent = Agent::new(log, self.plugins.registry().clone(), approver, self.agent_config(max_steps));
        if let Some(m) = &self.mcp {
            // The guard stays registered on the agent's own bus for the
            // agent's lifetime, so its handle is not kept.
            let _guard = m.attach_agent(&agent)?;
        }
        self.bundle_hooks.attach(&agent, resume.is_some());
        Ok((agent, first_seq))
    }
}
