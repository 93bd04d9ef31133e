//! The plugin host: loads a set of plugins into the registry, swaps versions
//! atomically when a component or the configuration changes, and revokes
//! everything an unloaded version registered.
//!
//! Every change is published as a [`PluginChange`] event (`plugin/loaded`,
//! `plugin/unloaded`, `plugin/reload-failed`) that sessions append to their
//! logs. A version that fails to compile, link or describe never replaces a
//! working one; reloads of a broken file are retried with backoff.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use notify::{RecursiveMode, Watcher};
use tokio::sync::{broadcast, mpsc};
use wharf_core::events::{EventKind, PluginChange};
use wharf_core::registry::Registry;

use crate::component::{FailedLoad, OnInvalidConfig, PluginSpec, PluginVersion, Runtime, config_digest};
use crate::error::LoadError;
use crate::registrations;

/// Debounce between a file event and the reload (editors write in bursts).
pub const DEBOUNCE: Duration = Duration::from_millis(25);
/// First retry delay after a failed reload; doubles up to [`RETRY_MAX`].
pub const RETRY_BASE: Duration = Duration::from_millis(250);
/// Longest retry delay.
pub const RETRY_MAX: Duration = Duration::from_secs(8);
/// Retries of one broken file before waiting for the next change.
pub const RETRY_LIMIT: u32 = 5;

/// A plugin change as a session event.
pub type PluginEvent = EventKind;

fn kinds_of(v: &PluginVersion) -> Vec<String> {
    v.kinds.iter().map(|k| format!("{k:?}").to_lowercase()).collect()
}

/// What an event says about the row's config beyond the version: its
/// generation, whether the policy fails closed after it, how many config
/// writes it stands for.
#[derive(Debug, Clone, Copy, Default)]
struct RowState {
    generation: Option<u64>,
    fail_closed: Option<bool>,
    coalesced: Option<u32>,
}

/// `plugin/loaded`; `warning` says what of it was refused (tool names an
/// earlier plugin has); `replaces` the digest of the version it replaced;
/// `dev` whether the row is a dev build.
fn loaded(v: &PluginVersion, warning: Option<String>, row: RowState, replaces: Option<String>, dev: bool) -> EventKind {
    EventKind::PluginLoaded(PluginChange {
        replaces,
        dev,
        id: v.id.clone(),
        digest: v.digest.clone(),
        kinds: kinds_of(v),
        error: warning,
        config: Some(v.config_digest.clone()),
        generation: row.generation,
        fail_closed: row.fail_closed,
        coalesced: row.coalesced,
    })
}

fn unloaded(v: &PluginVersion, fail_closed: Option<bool>) -> EventKind {
    EventKind::PluginUnloaded(PluginChange {
        id: v.id.clone(),
        digest: v.digest.clone(),
        kinds: kinds_of(v),
        config: Some(v.config_digest.clone()),
        fail_closed,
        ..PluginChange::default()
    })
}

fn failed(id: &str, digest: &str, err: &str) -> EventKind {
    failed_with(id, digest, err, None, RowState::default())
}

fn failed_with(id: &str, digest: &str, err: &str, config: Option<String>, row: RowState) -> EventKind {
    EventKind::PluginReloadFailed(PluginChange {
        id: id.to_string(),
        digest: digest.to_string(),
        kinds: Vec::new(),
        error: Some(err.to_string()),
        config,
        generation: row.generation,
        fail_closed: row.fail_closed,
        coalesced: row.coalesced,
        ..PluginChange::default()
    })
}

/// Why a row's new config could not be applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// The component (unchanged) refused the config, or the grant is invalid.
    Config,
    /// The component file failed to load (with whatever config).
    Component,
}

/// Produces the current plugin specs (re-reading configuration files).
pub type SpecSource = Arc<dyn Fn() -> Result<Vec<PluginSpec>, SpecError> + Send + Sync>;

/// Why a [`SpecSource`] produced no specs: whatever its owner's
/// configuration loader reports (the runtime only logs it).
pub type SpecError = Box<dyn std::error::Error + Send + Sync>;

/// The plugins [`PluginHost::load_all`] could not load or install: one
/// line each, naming the plugin and why (printed one per line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.join("\n"))]
pub struct LoadFailures(pub Vec<String>);

/// Why a reload did not install a new version. The old version, if any,
/// keeps serving; `plugin/reload-failed` was published with the same text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ReloadError {
    /// The plugin row.
    pub id: String,
    /// What failed (the load error, or why the new version could not be
    /// installed), as logged.
    pub message: String,
}

/// Loaded plugins and their registrations.
pub struct PluginHost {
    runtime: Arc<Runtime>,
    registry: Arc<Registry>,
    state: Mutex<HostInner>,
    events: broadcast::Sender<EventKind>,
    /// Serializes load/unload/swap so two reloads never interleave.
    swap_lock: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct HostInner {
    versions: BTreeMap<String, Arc<PluginVersion>>,
    /// The spec each loaded version was loaded with.
    specs: BTreeMap<String, PluginSpec>,
    /// Config changes that could not be applied yet (the component failed
    /// to load with them), latest per id: the next load of the row uses
    /// it, so the latest config wins once the component recovers.
    pending: BTreeMap<String, PluginSpec>,
    /// The latest config generation of each row (see
    /// [`PluginChange::generation`]).
    generations: BTreeMap<String, u64>,
    /// Policy rows that deny every call meanwhile (fail closed).
    failing_closed: BTreeSet<String>,
    history: Vec<EventKind>,
}

/// Stands in for a policy whose latest config could not be applied: the old
/// rules might allow what the new ones deny, so every call is denied until
/// the row loads with its latest config (fail closed).
struct FailClosedPolicy {
    plugin: wharf_core::plugin::PluginRef,
    reason: String,
}

impl wharf_core::plugin::Policy for FailClosedPolicy {
    fn plugin(&self) -> &wharf_core::plugin::PluginRef {
        &self.plugin
    }

    fn evaluate(
        &self,
        _request: wharf_core::plugin::PolicyRequest,
    ) -> wharf_core::plugin::BoxFuture<'_, Result<wharf_core::plugin::Decision, wharf_core::plugin::PluginError>> {
        let reason = self.reason.clone();
        Box::pin(async move { Ok(wharf_core::plugin::Decision::Deny { reason }) })
    }
}

impl PluginHost {
    /// A host with an empty registry.
    pub fn new(runtime: Arc<Runtime>, registry: Arc<Registry>) -> Arc<Self> {
        let (events, _) = broadcast::channel(1024);
        Arc::new(Self {
            runtime,
            registry,
            state: Mutex::new(HostInner::default()),
            events,
            swap_lock: tokio::sync::Mutex::new(()),
        })
    }

    /// The registry this host installs into.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// The runtime.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// Live plugin changes.
    pub fn subscribe(&self) -> broadcast::Receiver<EventKind> {
        self.events.subscribe()
    }

    /// Every change so far (a session opened later logs these first).
    pub fn history(&self) -> Vec<EventKind> {
        self.lock().history.clone()
    }

    /// The loaded versions by id.
    pub fn versions(&self) -> BTreeMap<String, Arc<PluginVersion>> {
        self.lock().versions.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HostInner> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn publish(&self, ev: EventKind) {
        self.lock().history.push(ev.clone());
        let _ = self.events.send(ev);
    }

    async fn compile(&self, spec: PluginSpec) -> Result<Arc<PluginVersion>, FailedLoad> {
        let rt = self.runtime.clone();
        let path = spec.path.clone();
        match tokio::task::spawn_blocking(move || rt.load_file(&spec)).await {
            Ok(r) => r,
            Err(e) => Err(FailedLoad {
                error: LoadError::Invalid { path, reason: format!("loader task failed: {e}") },
                digest: None,
            }),
        }
    }

    /// Loads every spec (compiling in parallel) and installs them. Fails
    /// with every error if any plugin fails: nothing starts half-loaded.
    pub async fn load_all(&self, specs: Vec<PluginSpec>) -> Result<(), LoadFailures> {
        let _guard = self.swap_lock.lock().await;
        // Start every compile before awaiting any: they run on the blocking
        // pool in parallel.
        let handles: Vec<_> = specs
            .iter()
            .cloned()
            .map(|spec| {
                let rt = self.runtime.clone();
                tokio::task::spawn_blocking(move || rt.load(&spec))
            })
            .collect();
        let mut results = Vec::new();
        for (h, spec) in handles.into_iter().zip(&specs) {
            results.push(match h.await {
                Ok(r) => r,
                Err(e) => {
                    Err(LoadError::Invalid { path: spec.path.clone(), reason: format!("loader task failed: {e}") })
                }
            });
        }
        let mut errors = Vec::new();
        let mut ok = Vec::new();
        for (spec, r) in specs.into_iter().zip(results) {
            match r {
                Ok(v) => ok.push((spec, v)),
                Err(e) => errors.push(format!("plugin `{}`: {e}", spec.id)),
            }
        }
        if !errors.is_empty() {
            return Err(LoadFailures(errors));
        }
        for (spec, v) in ok {
            self.bump(&spec.id);
            let row = self.row(&spec.id, None);
            if let Err(e) = self.install(spec, v, row) {
                errors.push(e);
            }
        }
        if errors.is_empty() { Ok(()) } else { Err(LoadFailures(errors)) }
    }

    /// The next config generation of `id` (1 at its first load).
    fn bump(&self, id: &str) -> u64 {
        let mut st = self.lock();
        let g = st.generations.entry(id.to_string()).or_insert(0);
        *g += 1;
        *g
    }

    /// The row's state for an event: its latest generation, `coalesced`.
    fn row(&self, id: &str, coalesced: Option<u32>) -> RowState {
        RowState { generation: self.lock().generations.get(id).copied(), fail_closed: None, coalesced }
    }

    fn install(&self, spec: PluginSpec, v: Arc<PluginVersion>, row: RowState) -> Result<(), String> {
        // A new version keeps every kind its row had: a policy row whose
        // file became a compactor must not silently stop deciding.
        if let Some(old) = self.lock().versions.get(&v.id).cloned() {
            let lost: Vec<String> =
                old.kinds.iter().filter(|k| !v.kinds.contains(k)).map(|k| format!("{k:?}").to_lowercase()).collect();
            if !lost.is_empty() {
                return Err(format!(
                    "{}: the new version does not export {} (row `{}` has [{}], the new version [{}]); \
                     a reload must keep every kind of its row, so the old version keeps serving",
                    v.path.display(),
                    lost.join(", "),
                    v.id,
                    kinds_of(&old).join(", "),
                    kinds_of(&v).join(", "),
                ));
            }
        }
        self.registry
            .install(v.plugin_ref(), registrations::of_version(&v))
            .map_err(|e| format!("{}: {e}", v.path.display()))?;
        let conflicts = self.registry.snapshot().conflicts_of(&v.id);
        for c in &conflicts {
            tracing::warn!("{c}");
        }
        let warning =
            (!conflicts.is_empty()).then(|| conflicts.iter().map(|c| c.to_string()).collect::<Vec<_>>().join("; "));
        let dev = spec.grant.dev_source.is_some();
        let (old, was_closed) = {
            let mut st = self.lock();
            st.specs.insert(spec.id.clone(), spec);
            st.pending.remove(&v.id);
            let was_closed = st.failing_closed.remove(&v.id);
            (st.versions.insert(v.id.clone(), v.clone()), was_closed)
        };
        // A fail-closed period ends here: the row runs its latest config.
        let row = RowState { fail_closed: was_closed.then_some(false), ..row };
        self.publish(loaded(&v, warning, row, old.as_ref().map(|o| o.digest.clone()), dev));
        if let Some(old) = old
            && (old.digest != v.digest || !Arc::ptr_eq(&old, &v))
        {
            self.publish(unloaded(&old, None));
        }
        Ok(())
    }

    /// Loads (or reloads) one plugin. On failure the old version, if any,
    /// keeps serving and `plugin/reload-failed` is published.
    pub async fn reload(&self, spec: PluginSpec) -> Result<Arc<PluginVersion>, ReloadError> {
        let _guard = self.swap_lock.lock().await;
        let (pending, changed) = {
            let st = self.lock();
            let changed = st.specs.get(&spec.id).is_none_or(|old| !same_settings(old, &spec));
            (st.pending.contains_key(&spec.id), changed)
        };
        if changed && !pending {
            self.bump(&spec.id);
        }
        self.reload_locked(spec, pending, None).await
    }

    /// Like [`reload`](Self::reload) from bytes already read (the watcher
    /// has just read and hashed the file; reading it again costs time on
    /// large components).
    pub async fn reload_bytes(&self, spec: PluginSpec, bytes: Vec<u8>) -> Result<Arc<PluginVersion>, ReloadError> {
        let _guard = self.swap_lock.lock().await;
        let rt = self.runtime.clone();
        let s = spec.clone();
        // A failure names these bytes, whatever the file holds by then.
        let load = move || {
            rt.load_bytes(&s, &bytes).map_err(|error| FailedLoad { error, digest: Some(crate::cache::digest(&bytes)) })
        };
        let compiled = match tokio::task::spawn_blocking(load).await {
            Ok(r) => r,
            Err(e) => Err(FailedLoad {
                error: LoadError::Invalid { path: spec.path.clone(), reason: format!("loader task failed: {e}") },
                digest: None,
            }),
        };
        let pending = self.lock().pending.contains_key(&spec.id);
        let row = self.row(&spec.id, None);
        self.finish_reload(spec, compiled, pending.then_some(Refusal::Component), row)
    }

    async fn reload_locked(
        &self,
        spec: PluginSpec,
        pending: bool,
        coalesced: Option<u32>,
    ) -> Result<Arc<PluginVersion>, ReloadError> {
        let compiled = self.compile(spec.clone()).await;
        let row = self.row(&spec.id, coalesced);
        self.finish_reload(spec, compiled, pending.then_some(Refusal::Component), row)
    }

    /// A config-only change (the component file holds the bytes of the
    /// loaded version): a new version on the loaded one's compiled code, no
    /// compile. `None` when the change is not config-only.
    async fn reconfigure(
        &self,
        spec: &PluginSpec,
    ) -> Option<(Arc<PluginVersion>, Result<Arc<PluginVersion>, LoadError>)> {
        let current = self.lock().versions.get(&spec.id).cloned()?;
        if current.path != spec.path {
            return None;
        }
        let (rt, s, cur) = (self.runtime.clone(), spec.clone(), current.clone());
        let done = tokio::task::spawn_blocking(move || {
            // Only when the file still holds the loaded bytes: a changed or
            // broken file is a component change, compiled as such.
            let same = std::fs::read(&s.path).is_ok_and(|b| crate::cache::digest(&b) == cur.digest);
            same.then(|| rt.reconfigure(&cur, &s))
        })
        .await;
        match done {
            Ok(Some(r)) => Some((current, r)),
            _ => None,
        }
    }

    /// Installs a compiled version, or publishes why not. With `pending`
    /// (`spec` is a config change not applied yet, refused for that
    /// reason), a failure keeps `spec` pending for the next load of the row.
    fn finish_reload(
        &self,
        spec: PluginSpec,
        compiled: Result<Arc<PluginVersion>, FailedLoad>,
        pending: Option<Refusal>,
        row: RowState,
    ) -> Result<Arc<PluginVersion>, ReloadError> {
        let id = spec.id.clone();
        let config = config_digest(&spec.config);
        let (digest, msg) = match compiled {
            Ok(v) => match self.install(spec.clone(), v.clone(), row) {
                Ok(()) => return Ok(v),
                Err(e) => (v.digest.clone(), e),
            },
            // The digest of the bytes that failed (the file may hold others
            // by now); none when the file could not be read.
            Err(f) => (f.digest.unwrap_or_default(), f.error.to_string()),
        };
        let (msg, fail_closed) = match pending {
            Some(why) => {
                let (note, fail_closed) = self.keep_pending(spec, why, &msg);
                (format!("{msg}; {note}"), fail_closed)
            }
            None => (msg, None),
        };
        let config = pending.is_some().then_some(config);
        self.publish(failed_with(&id, &digest, &msg, config, RowState { fail_closed, ..row }));
        Err(ReloadError { id, message: msg })
    }

    /// Keeps a config change that could not be applied for the next load of
    /// its row. Meanwhile a loaded policy fails closed, or with
    /// `on_invalid_config = "keep"` its last good version keeps deciding.
    /// Returns what that means, for the log, and for a policy whether it
    /// now fails closed.
    fn keep_pending(&self, spec: PluginSpec, why: Refusal, error: &str) -> (String, Option<bool>) {
        let id = spec.id.clone();
        let mode = spec.on_invalid_config;
        let new_config = config_digest(&spec.config);
        // The component's own words, without the file name in front.
        let prefix = format!("{}: ", spec.path.display());
        let error = error.strip_prefix(prefix.as_str()).unwrap_or(error);
        let short = |d: &str| d.get(..12).unwrap_or(d).to_string();
        let old = {
            let mut st = self.lock();
            st.pending.insert(id.clone(), spec);
            st.versions.get(&id).cloned()
        };
        let mut note = match why {
            Refusal::Config => format!(
                "the new config of `{id}` (sha256 {}) was refused; it stays pending and applies when the \
                 component accepts a config (a fixed config, or a new build)",
                short(&new_config)
            ),
            Refusal::Component => {
                format!("the new config of `{id}` stays pending and applies when the component loads")
            }
        };
        let Some(old) = old.filter(|v| v.kinds.contains(&crate::component::Kind::Policy)) else {
            tracing::warn!("{note}");
            return (note, None);
        };
        let was_closed = self.lock().failing_closed.contains(&id);
        let fail_closed = match mode {
            OnInvalidConfig::Deny => {
                let reason = match why {
                    Refusal::Config => format!(
                        "policy `{id}` denies every call: its new config was refused ({}), and the row fails \
                         closed until its config is valid (on_invalid_config = \"deny\")",
                        wharf_core::util::cut_str(error, 300)
                    ),
                    Refusal::Component => format!(
                        "policy `{id}` denies every call: its new config could not be applied yet (the component \
                         failed to load)"
                    ),
                };
                let plugin = wharf_core::plugin::PluginRef { config: Some(new_config), ..old.plugin_ref() };
                let mut regs = registrations::of_version(&old);
                regs.policy = Some(Arc::new(FailClosedPolicy { plugin: plugin.clone(), reason }));
                match self.registry.install(plugin, regs) {
                    Ok(()) => {
                        note.push_str("; meanwhile the policy denies every call (on_invalid_config = \"deny\")");
                        self.lock().failing_closed.insert(id.clone());
                        true
                    }
                    Err(e) => {
                        tracing::error!("cannot fail policy `{id}` closed: {e}");
                        was_closed
                    }
                }
            }
            OnInvalidConfig::Keep => {
                if was_closed {
                    self.restore(&old);
                }
                note.push_str(&format!(
                    "; meanwhile its last good config (sha256 {}) keeps deciding (on_invalid_config = \"keep\")",
                    short(&old.config_digest)
                ));
                false
            }
        };
        tracing::warn!("{note}");
        (note, Some(fail_closed))
    }

    /// Installs a loaded version's own registrations again (ending a
    /// fail-closed period).
    fn restore(&self, v: &Arc<PluginVersion>) {
        match self.registry.install(v.plugin_ref(), registrations::of_version(v)) {
            Ok(()) => {
                self.lock().failing_closed.remove(&v.id);
            }
            Err(e) => tracing::error!("cannot restore plugin `{}`: {e}", v.id),
        }
    }

    /// Drops a pending config change of `id` (the config went back to what
    /// is loaded), restoring the loaded version's own registrations; logged
    /// as a `plugin/loaded` of that version with the new generation.
    fn drop_pending(&self, id: &str, row: RowState) {
        let (loaded_v, was_closed) = {
            let mut st = self.lock();
            st.pending.remove(id);
            (st.versions.get(id).cloned(), st.failing_closed.contains(id))
        };
        if let Some(v) = loaded_v {
            self.restore(&v);
            let fail_closed = (was_closed && !self.lock().failing_closed.contains(id)).then_some(false);
            let dev = self.lock().specs.get(id).is_some_and(|s| s.grant.dev_source.is_some());
            self.publish(loaded(&v, None, RowState { fail_closed, ..row }, None, dev));
            tracing::info!("the config of `{id}` is back to the loaded one; nothing pending");
        }
    }

    /// Unloads a plugin: revokes all its registrations.
    pub async fn unload(&self, id: &str) -> bool {
        let _guard = self.swap_lock.lock().await;
        self.unload_locked(id)
    }

    fn unload_locked(&self, id: &str) -> bool {
        self.registry.revoke(id);
        let (old, was_closed) = {
            let mut st = self.lock();
            st.specs.remove(id);
            st.pending.remove(id);
            st.generations.remove(id);
            (st.versions.remove(id), st.failing_closed.remove(id))
        };
        match old {
            Some(v) => {
                self.publish(unloaded(&v, was_closed.then_some(false)));
                true
            }
            None => false,
        }
    }

    /// Applies a new set of specs: loads added ids, unloads removed ones and
    /// reloads those whose path, config, grant or mode changed. A change of
    /// config, grant or mode alone (the file holds the loaded bytes) makes a
    /// new version on the loaded one's compiled code, without compiling. A
    /// change that fails to load stays pending: the next load of the row
    /// (its file fixed or restored) uses the latest config. Every change is
    /// a new config generation of its row.
    pub async fn apply(&self, specs: Vec<PluginSpec>) -> Vec<ReloadError> {
        self.apply_counted(specs, None).await
    }

    /// [`apply`](Self::apply), saying in each event that the specs stand for
    /// `coalesced` config writes.
    async fn apply_counted(&self, specs: Vec<PluginSpec>, coalesced: Option<u32>) -> Vec<ReloadError> {
        let _guard = self.swap_lock.lock().await;
        let (current, pending) = {
            let st = self.lock();
            (st.specs.clone(), st.pending.clone())
        };
        let mut errors = Vec::new();
        let new_ids: Vec<String> = specs.iter().map(|s| s.id.clone()).collect();
        for id in current.keys().chain(pending.keys()) {
            if !new_ids.contains(id) {
                self.unload_locked(id);
            }
        }
        for spec in specs {
            if current.get(&spec.id).is_some_and(|old| same_spec(old, &spec)) {
                if pending.contains_key(&spec.id) {
                    self.bump(&spec.id);
                    self.drop_pending(&spec.id, self.row(&spec.id, coalesced));
                }
                continue;
            }
            if pending.get(&spec.id).is_some_and(|p| same_spec(p, &spec)) {
                continue;
            }
            self.bump(&spec.id);
            let result = match self.reconfigure(&spec).await {
                Some((current, made)) => {
                    let row = self.row(&spec.id, coalesced);
                    // A refused config names the loaded bytes: nothing else was tried.
                    let made = made.map_err(|error| FailedLoad { error, digest: Some(current.digest.clone()) });
                    self.finish_reload(spec, made, Some(Refusal::Config), row)
                }
                None => self.reload_locked(spec, true, coalesced).await,
            };
            if let Err(e) = result {
                errors.push(e);
            }
        }
        errors
    }

    /// Watches every loaded component file and the given config files,
    /// reloading on change until the returned handle is dropped.
    pub fn watch(
        self: &Arc<Self>,
        config_files: Vec<PathBuf>,
        source: Option<SpecSource>,
    ) -> anyhow::Result<WatchHandle> {
        let (tx, rx) = mpsc::unbounded_channel::<(PathBuf, Option<String>)>();
        // A config file's content is hashed as each write is seen, so a batch
        // read at once can say how many distinct writes it stands for.
        let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let config_paths: Vec<PathBuf> = config_files.iter().flat_map(|p| [p.clone(), canon(p)]).collect::<Vec<_>>();
        let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            if let Ok(ev) = res {
                if matches!(ev.kind, notify::EventKind::Access(_)) {
                    return;
                }
                for p in ev.paths {
                    let seen = config_paths
                        .contains(&p)
                        .then(|| std::fs::read(&p).ok().map(|b| crate::cache::digest(&b)))
                        .flatten();
                    let _ = tx.send((p, seen));
                }
            }
        })?;
        // Watch directories (editors and build tools replace files by
        // rename, which a file watch would lose).
        let mut dirs: Vec<PathBuf> = Vec::new();
        // A dev row's source directory is replaced as a whole (`wharf plugin
        // dev` swaps a link to the new snapshot): watched beside the file.
        let files: Vec<PathBuf> = self
            .lock()
            .specs
            .values()
            .flat_map(|s| std::iter::once(s.path.clone()).chain(s.grant.dev_source.clone()))
            .chain(config_files.iter().cloned())
            .collect();
        for f in &files {
            if let Some(d) = f.parent() {
                let d = if d.as_os_str().is_empty() { Path::new(".") } else { d };
                if d.exists() && !dirs.iter().any(|x| x == d) {
                    watcher.watch(d, RecursiveMode::NonRecursive)?;
                    dirs.push(d.to_path_buf());
                }
            }
        }
        // The loop runs on a thread and runtime of its own: a host whose
        // workers are all busy (calls that rarely yield) still applies a
        // change at once — a config-only swap waits for no worker, as it
        // waits for no compile.
        let host = self.clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        std::thread::Builder::new().name("wharf-watch".into()).spawn(move || {
            rt.block_on(async move {
                tokio::select! {
                    () = host.watch_loop(rx, config_files, source) => {}
                    _ = stopped => {}
                }
            });
        })?;
        Ok(WatchHandle { _watcher: watcher, _stop: stop })
    }

    async fn watch_loop(
        self: Arc<Self>,
        mut rx: mpsc::UnboundedReceiver<(PathBuf, Option<String>)>,
        config_files: Vec<PathBuf>,
        source: Option<SpecSource>,
    ) {
        let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let config_set: Vec<PathBuf> = config_files.iter().map(|p| canon(p)).collect();
        let mut retries: HashMap<String, (u32, Instant)> = HashMap::new();
        // The content last read of each config file.
        let mut config_read: HashMap<PathBuf, String> = config_set
            .iter()
            .filter_map(|p| std::fs::read(p).ok().map(|b| (p.clone(), crate::cache::digest(&b))))
            .collect();
        loop {
            // Wait for the first event, or for the next retry to fall due.
            let next_retry = retries.values().map(|(_, at)| *at).min();
            let first = match next_retry {
                Some(at) => tokio::select! {
                    p = rx.recv() => p,
                    _ = tokio::time::sleep_until(at.into()) => None,
                },
                None => match rx.recv().await {
                    Some(p) => Some(p),
                    None => return,
                },
            };
            let mut seen: Vec<(PathBuf, Option<String>)> = first.into_iter().collect();
            tokio::time::sleep(DEBOUNCE).await;
            while let Ok(p) = rx.try_recv() {
                seen.push(p);
            }
            let seen: Vec<(PathBuf, Option<String>)> = seen.into_iter().map(|(p, d)| (canon(&p), d)).collect();
            let changed: Vec<PathBuf> = seen.iter().map(|(p, _)| p.clone()).collect();
            if changed.iter().any(|p| config_set.contains(p))
                && let Some(src) = &source
            {
                // Distinct new contents seen since the last read, per file.
                let mut writes = 0u32;
                for file in &config_set {
                    let mut last = config_read.get(file).cloned();
                    for (_, d) in seen.iter().filter(|(p, _)| p == file) {
                        if let Some(d) = d
                            && last.as_ref() != Some(d)
                        {
                            writes += 1;
                            last = Some(d.clone());
                        }
                    }
                    if let Ok(b) = std::fs::read(file) {
                        config_read.insert(file.clone(), crate::cache::digest(&b));
                    }
                }
                let coalesced = (writes > 1).then_some(writes);
                if let Some(n) = coalesced {
                    tracing::info!("{n} config writes read at once: their last content applies as one generation");
                }
                match src() {
                    Ok(specs) => {
                        for e in self.apply_counted(specs, coalesced).await {
                            tracing::warn!("config reload: {e}");
                        }
                    }
                    Err(e) => {
                        tracing::warn!("config reload refused: {e}");
                        self.publish(failed("config", "", &e.to_string()));
                    }
                }
            }
            // Every row, with its pending config where one is waiting.
            let (mut specs, pending) = {
                let st = self.lock();
                (st.specs.clone(), st.pending.clone())
            };
            specs.extend(pending.clone());
            let now = Instant::now();
            for (id, spec) in specs {
                let is_pending = pending.contains_key(&id);
                let dev_source = spec.grant.dev_source.as_deref().map(canon);
                let touched = changed.iter().any(|p| *p == canon(&spec.path) || Some(p) == dev_source.as_ref());
                let due = retries.get(&id).is_some_and(|(_, at)| *at <= now);
                if !touched && !due {
                    continue;
                }
                if touched {
                    retries.remove(&id);
                }
                // Read once, off the async loop and outside the state lock;
                // skip identical bytes (touch, rebuild with no change) and
                // load from these bytes otherwise.
                let path = spec.path.clone();
                let read = tokio::task::spawn_blocking(move || {
                    std::fs::read(&path).map(|b| {
                        let d = crate::cache::digest(&b);
                        (b, d)
                    })
                })
                .await;
                let current = self.lock().versions.get(&id).map(|v| v.digest.clone());
                let result = match read {
                    // Identical bytes are a no-op, unless a config change is
                    // waiting for this component to load again.
                    Ok(Ok((_, digest))) if !is_pending && current.as_deref() == Some(digest.as_str()) => {
                        retries.remove(&id);
                        continue;
                    }
                    Ok(Ok((bytes, _))) => {
                        if is_pending {
                            tracing::info!("loading `{id}` with its pending config");
                        }
                        self.reload_bytes(spec, bytes).await
                    }
                    // Unreadable (mid-write, removed): the loader reports why.
                    _ => self.reload(spec).await,
                };
                match result {
                    Ok(_) => {
                        retries.remove(&id);
                    }
                    Err(e) => {
                        let n = retries.get(&id).map(|(n, _)| n + 1).unwrap_or(1);
                        if n <= RETRY_LIMIT {
                            let delay = (RETRY_BASE * 2u32.pow(n - 1)).min(RETRY_MAX);
                            retries.insert(id.clone(), (n, Instant::now() + delay));
                            tracing::warn!("reload of `{id}` failed (attempt {n}, retry in {delay:?}): {e}");
                        } else {
                            retries.remove(&id);
                            tracing::warn!("reload of `{id}` failed {n} times; waiting for the next change: {e}");
                        }
                    }
                }
            }
        }
    }
}

fn same_spec(a: &PluginSpec, b: &PluginSpec) -> bool {
    a.path == b.path && same_settings(a, b)
}

/// Same config, grant and modes (the component file aside).
fn same_settings(a: &PluginSpec, b: &PluginSpec) -> bool {
    a.config == b.config && a.grant == b.grant && a.warm == b.warm && a.on_invalid_config == b.on_invalid_config
}

/// Keeps a watch alive; dropping it stops watching.
pub struct WatchHandle {
    _watcher: notify::RecommendedWatcher,
    /// Dropped with the handle: the loop's thread then ends.
    _stop: tokio::sync::oneshot::Sender<()>,
}
