//! Assembling a host from the command line: layered config → runtime →
//! loaded plugins → MCP servers → session store. Every surface (run, chat,
//! web, acp, mcp) starts here, so they all see the same plugins, MCP tools,
//! grants and sessions.
//!
//! The profile's `[[mcp]]` servers connect in the background as soon as the
//! host starts ([`crate::mcp::McpManager`]); their tools join the registry
//! as `mcp__SERVER__TOOL`. A surface awaits [`HostCtx::mcp_ready`] before a
//! session's first turn (so the first step already sees the tools of the
//! required servers), every agent from [`HostCtx::open_agent`] logs the
//! servers' `plugin/*` events and ends turns `blocked` while a required
//! server is unavailable, and [`HostCtx::close`] (or dropping the host)
//! stops the servers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use clap::Args;
use wharf_config::{Config, LoadOptions};
use wharf_core::agent::{AttachTool, CompactionConfig};
use wharf_core::approval::{Approver, HeadlessApprover, HeadlessRule};
use wharf_core::events::SessionStart;
use wharf_core::pipeline::{OutputLimits, PipelineConfig};
use wharf_core::registry::Registry;
use wharf_core::store::{NewSession, Store};
use wharf_core::{Agent, AgentConfig};
use wharf_runtime::engine::EngineOptions;
use wharf_runtime::grants::{DirGrant, Grant};
use wharf_runtime::host::{PluginHost, SpecSource, WatchHandle};
use wharf_runtime::{PluginSpec, Runtime, RuntimeOptions};

use crate::mcp::McpManager;

/// Options shared by every command that runs an agent.
#[derive(Args, Clone, Debug, Default)]
pub struct HostArgs {
    /// Profile: a shipped name (`default`, `demo`, …) or a path to a TOML file.
    #[arg(long, short = 'p', default_value = "default")]
    pub profile: String,
    /// Extra config layer, applied after the user and project layers (repeatable).
    #[arg(long = "patch", value_name = "FILE")]
    pub patches: Vec<PathBuf>,
    /// Override one key, e.g. `-c agent.max_steps=5` or `-c plugin.fs.grant.memory_mb=512`.
    #[arg(short = 'c', value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// The workspace directory (default: the current directory).
    #[arg(long, short = 'w')]
    pub workspace: Option<PathBuf>,
    /// Where session logs live (overrides `session.dir`).
    #[arg(long = "session-dir", value_name = "DIR")]
    pub session_dir: Option<PathBuf>,
    /// Do not watch component and config files for changes.
    #[arg(long = "no-watch")]
    pub no_watch: bool,
    /// The model: `NAME` (for the configured adapter), `ADAPTER/NAME` or
    /// `ADAPTER:NAME`, or an adapter's plugin id (its configured model).
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,
}

/// What a `--model` / `/model` argument names: an adapter plugin row and,
/// unless only the adapter was named, a model id for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelChoice {
    /// Plugin id of the adapter.
    pub adapter: String,
    /// The model id (`None`: keep the adapter's).
    pub model: Option<String>,
    /// Set when the model is not one the profile knows for the adapter
    /// (see [`known_models`]): it is used, and this says so.
    pub warning: Option<String>,
}

/// The adapter rows of the config: rows with a `model` in their config.
pub fn adapter_rows(config: &Config) -> Vec<&str> {
    config.plugins.iter().filter(|r| r.config.get("model").is_some()).map(|r| r.id.as_str()).collect()
}

/// The models the profile knows for adapter row `adapter`: its configured
/// `model`, then every model its `prices` table names.
pub fn known_models(config: &Config, adapter: &str) -> Vec<String> {
    let Some(row) = config.plugin(adapter) else { return Vec::new() };
    let mut out: Vec<String> =
        row.config.get("model").and_then(|m| m.as_str()).map(str::to_string).into_iter().collect();
    if let Some(prices) = row.config.get("prices").and_then(|p| p.as_object()) {
        out.extend(prices.keys().filter(|k| !out.contains(k)).cloned().collect::<Vec<_>>());
    }
    out
}

/// A choice of `model` for `adapter`, warning when the profile does not
/// know that model.
fn model_choice(config: &Config, adapter: &str, model: &str) -> ModelChoice {
    let known = known_models(config, adapter);
    let warning = (!known.iter().any(|k| k == model)).then(|| {
        let listed = if known.is_empty() { "none".to_string() } else { known.join(", ") };
        format!(
            "`{model}` is not a model the profile lists for `{adapter}` (it lists: {listed}); \
             it is sent to the provider as is"
        )
    });
    ModelChoice { adapter: adapter.to_string(), model: Some(model.to_string()), warning }
}

/// Resolves a model argument against the config's rows: `ADAPTER/NAME` and
/// `ADAPTER:NAME` when `ADAPTER` is a row id (model ids may themselves hold
/// `/` or `:`, as `qwen3:8b` does), a bare row id, else a model of
/// `current`. A name with a `/` whose first part is no row is refused
/// unless the current adapter lists it (`bogus/x` names no adapter; a
/// provider's `org/model` id is given as `ADAPTER/org/model`). A model the
/// profile does not list is used with a [`ModelChoice::warning`].
pub fn resolve_model_spec(config: &Config, current: Option<&str>, spec: &str) -> Result<ModelChoice> {
    let spec = spec.trim();
    anyhow::ensure!(!spec.is_empty(), "empty model name");
    anyhow::ensure!(
        spec.len() <= 200 && !spec.contains(char::is_control),
        "not a model name: `{}`",
        wharf_core::util::cut_str(spec, 60)
    );
    for sep in ['/', ':'] {
        if let Some((a, m)) = spec.split_once(sep)
            && config.plugin(a).is_some()
            && !m.trim().is_empty()
        {
            return Ok(model_choice(config, a, m.trim()));
        }
    }
    if config.plugin(spec).is_some() {
        return Ok(ModelChoice { adapter: spec.to_string(), model: None, warning: None });
    }
    let adapter = current
        .map(str::to_string)
        .or_else(|| crate::usage::default_adapter(config))
        .context("no model adapter is configured (set `agent.adapter`)")?;
    if let Some((prefix, _)) = spec.split_once('/')
        && !known_models(config, &adapter).iter().any(|k| k == spec)
    {
        anyhow::bail!(
            "no model adapter `{prefix}` in this profile (adapters: {}); a model id holding `/` is given \
             with its adapter, e.g. `{adapter}/{spec}`",
            adapter_rows(config).join(", ")
        );
    }
    Ok(model_choice(config, &adapter, spec))
}

/// Where the built components are: `$WHARF_PLUGIN_DIR`, else, next to the
/// binary's directory, `lib/wharf/plugins` (the layout `cargo xtask install
/// --prefix DIR` writes: `DIR/bin/wharf`, `DIR/lib/wharf/plugins`) or
/// `plugins` (`target/plugins` for a binary in `target/debug`), else
/// `./target/plugins`.
pub fn plugin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("WHARF_PLUGIN_DIR") {
        return PathBuf::from(d);
    }
    if let Ok(exe) = std::env::current_exe()
        && let Some(d) = exe.parent().and_then(Path::parent)
    {
        for candidate in [d.join("lib").join("wharf").join("plugins"), d.join("plugins")] {
            if candidate.is_dir() {
                return candidate;
            }
        }
    }
    PathBuf::from("target/plugins")
}

/// Fails, naming `WHARF_PLUGIN_DIR` and the install command, when enabled
/// rows point into the plugin directory at components that are not there
/// (a binary copied away from its components); other missing paths are left
/// to the loader's own error.
fn check_plugin_dir(config: &Config, dir: &Path) -> Result<()> {
    let dir = &std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let missing: Vec<String> = config
        .plugins
        .iter()
        .filter(|p| p.path.starts_with(dir) && !p.path.exists())
        .filter_map(|p| p.path.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let how = if std::env::var_os("WHARF_PLUGIN_DIR").is_some() {
        "from $WHARF_PLUGIN_DIR"
    } else {
        "found next to the binary or in ./target/plugins; WHARF_PLUGIN_DIR is not set"
    };
    anyhow::bail!(
        "the components this profile needs are not in the plugin directory {} ({how}); missing: {}.\n\
         Install wharf with its components: `cargo xtask install --prefix DIR` in a Wharf checkout \
         (then run DIR/bin/wharf, which finds DIR/lib/wharf/plugins), or set WHARF_PLUGIN_DIR to a \
         directory holding them (`cargo xtask build-plugins` builds them into target/plugins).",
        dir.display(),
        missing.join(", ")
    )
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME").map(PathBuf::from)
}

impl HostArgs {
    /// The workspace, absolute: a directory this process can list (checked
    /// here so an unreadable workspace is reported as such, not as its
    /// `.wharf/config.toml`).
    pub fn workspace(&self) -> Result<PathBuf> {
        let w = match &self.workspace {
            Some(w) => w.clone(),
            None => std::env::current_dir().context("cannot determine the current directory")?,
        };
        let abs = std::fs::canonicalize(&w).with_context(|| format!("workspace {}", w.display()))?;
        anyhow::ensure!(abs.is_dir(), "workspace {} is not a directory", w.display());
        std::fs::read_dir(&abs).with_context(|| format!("workspace {} is not readable", w.display()))?;
        Ok(abs)
    }

    /// The layered config.
    pub fn load_config(&self) -> Result<Config> {
        let opts = self.load_options()?;
        Ok(wharf_config::load(&opts)?)
    }

    fn load_options(&self) -> Result<LoadOptions> {
        Ok(LoadOptions {
            profile: self.profile.clone(),
            workspace: self.workspace()?,
            home: home(),
            plugin_dir: plugin_dir(),
            patches: self.patches.clone(),
            overrides: self.overrides.clone(),
        })
    }
}

/// Largest `--max-steps` (the same bound as `agent.max_steps` in a profile).
pub const MAX_STEPS_LIMIT: u32 = 100_000;

/// Parses a `--max-steps` value: 1 to [`MAX_STEPS_LIMIT`] (a budget of 0
/// would end every turn before its first step, so it is refused rather than
/// rounded up).
pub fn parse_max_steps(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(n) if (1..=MAX_STEPS_LIMIT).contains(&n) => Ok(n),
        _ => Err(format!("expected a step budget from 1 to {MAX_STEPS_LIMIT}, got `{s}`")),
    }
}

/// The stored session `part` names: an exact id, else the only id that
/// starts with it, else the only id that holds it anywhere (its random
/// suffix, say). Several matches are an error listing them.
pub fn resolve_session(store: &Store, part: &str) -> Result<String> {
    anyhow::ensure!(!part.trim().is_empty(), "empty session id");
    if store.exists(part).unwrap_or(false) {
        return Ok(part.to_string());
    }
    let list = store.list()?;
    let ids = || list.iter().map(|s| s.id.as_str());
    let mut matches: Vec<&str> = ids().filter(|id| id.starts_with(part)).collect();
    if matches.is_empty() {
        matches = ids().filter(|id| id.contains(part)).collect();
    }
    match matches.as_slice() {
        [one] => Ok((*one).to_string()),
        // Typed, so surfaces can tell "not found" (the web API's 404).
        [] => Err(wharf_core::store::StoreError::NotFound(part.to_string()).into()),
        many => {
            const SHOWN: usize = 10;
            let mut lines: Vec<String> = many.iter().take(SHOWN).map(|id| format!("  {id}")).collect();
            if many.len() > SHOWN {
                lines.push(format!("  … and {} more", many.len() - SHOWN));
            }
            anyhow::bail!(
                "`{part}` matches {} sessions; type more of the id (any unique part of it works):\n{}",
                many.len(),
                lines.join("\n")
            )
        }
    }
}

/// An API key the model adapter in force needs and the environment lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingKey {
    /// Plugin id of the adapter.
    pub adapter: String,
    /// The environment variable its row's `api_key_env` names.
    pub var: String,
}

impl std::fmt::Display for MissingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{var} is not set: the model adapter `{adapter}` reads its API key from it. Set it \
             (`export {var}=…`), or try Wharf without a key: `--profile demo` (a scripted model)",
            var = self.var,
            adapter = self.adapter
        )
    }
}

/// The key the adapter `args` and `config` select would need and the
/// environment does not have: the adapter row's `config.api_key_env` names
/// the variable (rows without one are not checked). `is_set` tells whether a
/// variable holds a value.
pub fn missing_model_key(config: &Config, args: &HostArgs, is_set: impl Fn(&str) -> bool) -> Option<MissingKey> {
    let adapter = match &args.model {
        Some(spec) => resolve_model_spec(config, config.agent.adapter.as_deref(), spec).ok()?.adapter,
        None => crate::usage::default_adapter(config)?,
    };
    let var = config.plugin(&adapter)?.config.get("api_key_env")?.as_str()?.trim();
    (!var.is_empty() && !is_set(var)).then(|| MissingKey { adapter, var: var.to_string() })
}

/// Whether environment variable `name` holds a non-empty value.
pub fn env_is_set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}

/// Fails at start, before plugins load, when the model adapter in force
/// needs a key that is not set (rather than at the first model request).
pub fn require_model_key(config: &Config, args: &HostArgs) -> Result<()> {
    match missing_model_key(config, args, env_is_set) {
        Some(m) => anyhow::bail!("{m}"),
        None => Ok(()),
    }
}

/// Whether a session header's workspace is `workspace` (absolute).
pub fn same_workspace(header: &SessionStart, workspace: &Path) -> bool {
    header.workspace.as_deref().is_some_and(|theirs| {
        Path::new(theirs) == workspace || std::fs::canonicalize(theirs).is_ok_and(|p| p == workspace)
    })
}

/// The newest top-level session (not a subagent's) whose header names
/// `workspace`.
pub fn latest_session(store: &Store, workspace: &Path) -> Result<Option<String>> {
    let mut list = store.list()?;
    list.retain(|s| s.header.spawned_by.is_none() && same_workspace(&s.header, workspace));
    Ok(list.into_iter().max_by(|a, b| (&a.header.created, &a.id).cmp(&(&b.header.created, &b.id))).map(|s| s.id))
}

/// The tool `@path` attachments become calls of (the `fs` plugin's), and
/// its argument taking the path: the host's choice, the core knows no tool.
const ATTACH_TOOL: &str = "read";
/// See [`ATTACH_TOOL`].
const ATTACH_PATH_ARGUMENT: &str = "path";

/// The compile cache: `$WHARF_CACHE_DIR` wins over `engine.cache_dir`, so
/// tests and CI can share one cache across throwaway homes.
pub fn cache_dir(config: &Config) -> PathBuf {
    std::env::var_os("WHARF_CACHE_DIR").map(PathBuf::from).unwrap_or_else(|| config.engine.cache_dir.clone())
}

/// Turns config rows into runtime specs.
pub fn specs(config: &Config) -> Result<Vec<PluginSpec>, String> {
    let mut out = Vec::new();
    for row in &config.plugins {
        let dirs = row
            .grant
            .dirs
            .iter()
            .filter_map(|d| match d.strip_suffix('?') {
                // Optional grant (`PATH:ro?`): skipped when the directory is missing.
                Some(spec) => {
                    let path = spec.rsplit_once(':').map_or(spec, |(p, _)| p);
                    std::path::Path::new(path).is_dir().then(|| DirGrant::parse(spec))
                }
                None => Some(DirGrant::parse(d)),
            })
            .map(|g| g.map_err(|e| format!("plugin `{}`: {e}", row.id)))
            .collect::<Result<Vec<_>, _>>()?;
        out.push(PluginSpec {
            id: row.id.clone(),
            // An OCI row: the pinned (and verified) file in the local store.
            path: match &row.source {
                Some(_) => crate::plugin_oci::resolve_row(row, config)?,
                None => row.path.clone(),
            },
            config: row.config.clone(),
            grant: Grant {
                dirs,
                hosts: row.grant.hosts.clone(),
                env: row.grant.env.clone(),
                process: row.grant.process,
                memory_mb: row.grant.memory_mb,
                timeout_ms: row.grant.timeout_ms,
                output_limit_bytes: row.grant.output_limit_bytes,
                sandbox_off: row.grant.sandbox == wharf_config::Sandbox::Off,
                private_network: row.grant.private_network,
                model: row.grant.model,
                agents: row.grant.agents,
                tools: match &row.grant.tools {
                    wharf_config::ToolsConfig::All(true) => wharf_runtime::grants::ToolsGrant::All,
                    wharf_config::ToolsConfig::All(false) => wharf_runtime::grants::ToolsGrant::None,
                    wharf_config::ToolsConfig::Only(n) => wharf_runtime::grants::ToolsGrant::Only(n.clone()),
                },
            },
            warm: row.warm,
            on_invalid_config: match row.on_invalid_config {
                wharf_config::OnInvalidConfig::Deny => wharf_runtime::OnInvalidConfig::Deny,
                wharf_config::OnInvalidConfig::Keep => wharf_runtime::OnInvalidConfig::Keep,
            },
        });
    }
    Ok(out)
}

/// Which row wins a tool name two rows offer: the row defined in the later
/// config layer (a project's `.wharf/config.toml` row over a shipped
/// profile's), see [`Config::row_layer`]; rows of one layer keep profile
/// order.
pub fn tool_precedence(config: &Config) -> BTreeMap<String, i32> {
    config
        .plugins
        .iter()
        .map(|r| (r.id.clone(), config.row_layer(&r.id).map_or(0, |l| i32::try_from(l).unwrap_or(i32::MAX))))
        .collect()
}

/// Config keys changed while the host runs (`/model`, `/permissions`):
/// plugin id → top-level keys merged over the row's `config`. They stay in
/// force across hot reloads of the config files, until the process ends.
pub type LiveOverrides = Arc<Mutex<BTreeMap<String, serde_json::Map<String, serde_json::Value>>>>;

/// Why a plugin was last reloaded with the same component: plugin id →
/// `Some(FILES)` for a config file change (the layer files that changed,
/// as shown to people), `None` for a change made at run time (`/model`,
/// `/permissions`, which report it themselves). Taken by the surface that
/// announces the reload.
pub type ReloadCauses = Arc<Mutex<BTreeMap<String, Option<String>>>>;

/// What the config files and rows were at the last (re)load: each layer
/// file's content hash, each row's fingerprint.
#[derive(Default)]
struct ConfigSeen {
    files: BTreeMap<PathBuf, Option<u64>>,
    rows: BTreeMap<String, String>,
}

impl ConfigSeen {
    fn of(config: &Config) -> Self {
        use std::hash::{Hash, Hasher};
        let files = config
            .watch
            .iter()
            .map(|p| {
                let hash = std::fs::read(p).ok().map(|b| {
                    let mut h = std::collections::hash_map::DefaultHasher::new();
                    b.hash(&mut h);
                    h.finish()
                });
                (p.clone(), hash)
            })
            .collect();
        let rows = config.plugins.iter().map(|r| (r.id.clone(), format!("{r:?}"))).collect();
        Self { files, rows }
    }

    /// Records in `causes` the rows of `now` that differ from `self`, with
    /// the files that changed.
    fn changes(&self, now: &Self, workspace: &Path, causes: &ReloadCauses) {
        let files: Vec<String> = now
            .files
            .iter()
            .filter(|(p, h)| self.files.get(*p) != Some(*h))
            .map(|(p, _)| shown_path(p, workspace))
            .collect();
        let files = if files.is_empty() { "the config files".to_string() } else { files.join(", ") };
        let mut causes = causes.lock().unwrap_or_else(|e| e.into_inner());
        for (id, row) in &now.rows {
            if self.rows.get(id) != Some(row) {
                causes.insert(id.clone(), Some(files.clone()));
            }
        }
    }
}

/// A path as shown to people: relative to the workspace inside it, `~/…`
/// under the home directory, else whole.
fn shown_path(p: &Path, workspace: &Path) -> String {
    if let Ok(rest) = p.strip_prefix(workspace) {
        return rest.display().to_string();
    }
    if let Some(rest) = home().and_then(|h| p.strip_prefix(h).ok().map(Path::to_path_buf)) {
        return format!("~/{}", rest.display());
    }
    p.display().to_string()
}

/// Merges the live overrides into the specs of their rows.
pub fn apply_live(specs: &mut [PluginSpec], live: &LiveOverrides) {
    let live = live.lock().unwrap_or_else(|e| e.into_inner());
    for spec in specs.iter_mut() {
        if let Some(set) = live.get(&spec.id) {
            merge_keys(&mut spec.config, set);
        }
    }
}

fn merge_keys(config: &mut serde_json::Value, set: &serde_json::Map<String, serde_json::Value>) {
    if !config.is_object() {
        *config = serde_json::Value::Object(serde_json::Map::new());
    }
    if let Some(obj) = config.as_object_mut() {
        for (k, v) in set {
            obj.insert(k.clone(), v.clone());
        }
    }
}

/// A running host: config, plugins and the session store.
pub struct HostCtx {
    /// The composed config.
    pub config: Config,
    /// The loaded plugins.
    pub plugins: Arc<PluginHost>,
    /// Session logs.
    pub store: Store,
    /// The workspace.
    pub workspace: PathBuf,
    /// How the command was invoked (for reloads).
    pub args: HostArgs,
    /// The configured MCP servers (`None` when there are none).
    pub mcp: Option<Arc<McpManager>>,
    /// Config keys changed at run time (see [`HostCtx::reconfigure_plugin`]).
    pub live: LiveOverrides,
    /// Why plugins were reloaded (see [`HostCtx::take_reload_cause`]).
    reload_causes: ReloadCauses,
    /// The adapter new agents use (`agent.adapter`, changed by `--model` /
    /// `/model ADAPTER…`; `None`: the first loaded).
    adapter: Arc<Mutex<Option<String>>>,
    _watch: Option<WatchHandle>,
}

impl Drop for HostCtx {
    fn drop(&mut self) {
        // Stdio servers are killed when their connections drop.
        if let Some(m) = &self.mcp {
            m.shutdown();
        }
    }
}

impl HostCtx {
    /// Loads config and plugins. Any plugin that fails to load fails the
    /// start (nothing runs half-configured).
    pub async fn start(args: &HostArgs) -> Result<Self> {
        Self::start_with(args, |_| Ok(())).await
    }

    /// Like [`HostCtx::start`], editing the composed config before plugins
    /// load (used by `--replay` to swap in the replay adapter).
    pub async fn start_with(args: &HostArgs, edit: impl FnOnce(&mut Config) -> Result<()>) -> Result<Self> {
        let mut config = args.load_config()?;
        let seen = ConfigSeen::of(&config);
        edit(&mut config)?;
        let live: LiveOverrides = Arc::default();
        // `--model`: a live override from the start, so config reloads keep it.
        if let Some(spec) = &args.model {
            let choice = resolve_model_spec(&config, config.agent.adapter.as_deref(), spec)?;
            if let Some(w) = &choice.warning {
                eprintln!("wharf: warning: --model: {w}");
            }
            if let Some(m) = &choice.model {
                let mut set = serde_json::Map::new();
                set.insert("model".into(), serde_json::Value::String(m.clone()));
                live.lock().unwrap_or_else(|e| e.into_inner()).insert(choice.adapter.clone(), set);
            }
            config.agent.adapter = Some(choice.adapter);
        }
        check_plugin_dir(&config, &plugin_dir())?;
        let workspace = args.workspace()?;
        let runtime = Runtime::new(RuntimeOptions {
            engine: EngineOptions { pooling: config.engine.pooling, ..EngineOptions::default() },
            cache_dir: Some(cache_dir(&config)),
        })?;
        if let Some(max) = config.engine.max_tools_per_plugin {
            runtime.set_max_tools(max);
        }
        // A cold cache compiles on the first tier (Winch) and optimises in the
        // background (`Runtime::enable_tiering`, issue 18).
        runtime.enable_tiering();
        let registry = Arc::new(Registry::new());
        registry.set_precedence(tool_precedence(&config));
        let plugins = PluginHost::new(runtime, registry.clone());
        // MCP servers connect while the components load.
        let mcp = (!config.mcp.is_empty()).then(|| McpManager::start(registry, config.mcp.clone(), &workspace));
        let mut initial = specs(&config).map_err(anyhow::Error::msg)?;
        apply_live(&mut initial, &live);
        if let Err(errors) = plugins.load_all(initial).await {
            if let Some(m) = &mcp {
                m.stop().await;
            }
            anyhow::bail!("{}", errors.join("\n"));
        }
        let session_dir = args.session_dir.clone().unwrap_or_else(|| config.session.dir.clone());
        // Processes run by plugins must not read or rewrite session logs,
        // the compile cache or config layers outside the workspace.
        let mut protected = vec![session_dir.clone(), cache_dir(&config)];
        protected.extend(config.sources.iter().filter(|p| !p.starts_with(&workspace)).cloned());
        wharf_runtime::process::protect_paths(
            protected.into_iter().filter_map(|p| std::fs::canonicalize(&p).ok().or(Some(p))),
        );
        let store = crate::sessions_cmd::open_store(config.session.store.as_deref(), session_dir)?;
        let reload_causes = ReloadCauses::default();
        let watch = if args.no_watch {
            None
        } else {
            let opts = args.load_options()?;
            let live = live.clone();
            let registry = plugins.registry().clone();
            let (causes, seen, ws) = (reload_causes.clone(), Mutex::new(seen), workspace.clone());
            let source: SpecSource = Arc::new(move || {
                let c = wharf_config::load(&opts).map_err(|e| e.to_string())?;
                registry.set_precedence(tool_precedence(&c));
                let now = ConfigSeen::of(&c);
                let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                seen.changes(&now, &ws, &causes);
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
            args: args.clone(),
            mcp,
            live,
            reload_causes,
            adapter,
            _watch: watch,
        })
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
    /// [`HostCtx::reconfigure_plugin`] (its caller reports that), `None`
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
        let mut all = specs(&self.config).map_err(anyhow::Error::msg)?;
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
    /// [`HostCtx::rebuild_agent`]). Returns the adapter and model in force,
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

    /// A new agent over `old`'s session log with the current settings (the
    /// adapter in force). `old` must be idle; it should be dropped.
    pub fn rebuild_agent(&self, old: &Agent, approver: Arc<dyn Approver>, max_steps: Option<u32>) -> Result<Agent> {
        let agent =
            Agent::new(old.log().clone(), self.plugins.registry().clone(), approver, self.agent_config(max_steps));
        if let Some(m) = &self.mcp {
            let _guard = m.attach_agent(&agent)?;
        }
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
            && theirs != self.args.profile
        {
            eprintln!(
                "wharf: note: continuing session {id}, started with profile `{theirs}`, with profile `{}` \
                 (its plugins and model from now on); pass `--profile {theirs}` to keep the session's own",
                self.args.profile
            );
        }
        Ok(id)
    }

    /// Waits until every required MCP server has connected or failed its
    /// first attempt; `Err` names each that is not available (turns of
    /// agents from [`open_agent`](Self::open_agent) then end `blocked` with
    /// that message).
    pub async fn mcp_ready(&self) -> Result<(), String> {
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
                let (log, report) = self.store.open(id)?;
                for w in &report.warnings {
                    eprintln!("wharf: warning: {w}");
                }
                log
            }
            None => self.store.create(NewSession {
                id: None,
                workspace: Some(self.workspace.display().to_string()),
                profile: Some(self.args.profile.clone()),
            })?,
        };
        // A new session streams from its header; a resumed one from here on.
        let first_seq = if resume.is_some() { log.last_seq() + 1 } else { 1 };
        for ev in self.plugins.history() {
            log.append(ev)?;
        }
        self.log_model(&log, if resume.is_some() { "resume" } else { "initial" })?;
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
        Ok((agent, first_seq))
    }
}
