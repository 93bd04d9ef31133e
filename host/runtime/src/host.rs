//! The plugin host: loads a set of plugins into the registry, swaps versions
//! atomically when a component or the configuration changes, and revokes
//! everything an unloaded version registered.
//!
//! Every change is published as a [`PluginChange`] event (`plugin/loaded`,
//! `plugin/unloaded`, `plugin/reload-failed`) that sessions append to their
//! logs. A version that fails to compile, link or describe never replaces a
//! working one; reloads of a broken file are retried with backoff.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use notify::{RecursiveMode, Watcher};
use tokio::sync::{broadcast, mpsc};
use wharf_core::events::{EventKind, PluginChange};
use wharf_core::registry::Registry;

use crate::adapters::registrations;
use crate::component::{FailedLoad, PluginSpec, PluginVersion, Runtime};
use crate::error::LoadError;

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

/// `plugin/loaded`; `warning` says what of it was refused (tool names an
/// earlier plugin has).
fn loaded(v: &PluginVersion, warning: Option<String>) -> EventKind {
    EventKind::PluginLoaded(PluginChange {
        id: v.id.clone(),
        digest: v.digest.clone(),
        kinds: kinds_of(v),
        error: warning,
    })
}

fn unloaded(v: &PluginVersion) -> EventKind {
    EventKind::PluginUnloaded(PluginChange {
        id: v.id.clone(),
        digest: v.digest.clone(),
        kinds: kinds_of(v),
        error: None,
    })
}

fn failed(id: &str, digest: &str, err: &str) -> EventKind {
    EventKind::PluginReloadFailed(PluginChange {
        id: id.to_string(),
        digest: digest.to_string(),
        kinds: Vec::new(),
        error: Some(err.to_string()),
    })
}

/// Produces the current plugin specs (re-reading configuration files).
pub type SpecSource = Arc<dyn Fn() -> Result<Vec<PluginSpec>, String> + Send + Sync>;

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
    ) -> wharf_core::plugin::BoxFuture<'_, Result<wharf_core::plugin::Decision, String>> {
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
    pub async fn load_all(&self, specs: Vec<PluginSpec>) -> Result<(), Vec<String>> {
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
            return Err(errors);
        }
        for (spec, v) in ok {
            if let Err(e) = self.install(spec, v) {
                errors.push(e);
            }
        }
        if errors.is_empty() { Ok(()) } else { Err(errors) }
    }

    fn install(&self, spec: PluginSpec, v: Arc<PluginVersion>) -> Result<(), String> {
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
        self.registry.install(v.plugin_ref(), registrations(&v)).map_err(|e| format!("{}: {e}", v.path.display()))?;
        let conflicts = self.registry.snapshot().conflicts_of(&v.id);
        for c in &conflicts {
            tracing::warn!("{c}");
        }
        let warning =
            (!conflicts.is_empty()).then(|| conflicts.iter().map(|c| c.to_string()).collect::<Vec<_>>().join("; "));
        let old = {
            let mut st = self.lock();
            st.specs.insert(spec.id.clone(), spec);
            st.pending.remove(&v.id);
            st.versions.insert(v.id.clone(), v.clone())
        };
        self.publish(loaded(&v, warning));
        if let Some(old) = old
            && (old.digest != v.digest || !Arc::ptr_eq(&old, &v))
        {
            self.publish(unloaded(&old));
        }
        Ok(())
    }

    /// Loads (or reloads) one plugin. On failure the old version, if any,
    /// keeps serving and `plugin/reload-failed` is published.
    pub async fn reload(&self, spec: PluginSpec) -> Result<Arc<PluginVersion>, String> {
        let _guard = self.swap_lock.lock().await;
        let pending = self.lock().pending.contains_key(&spec.id);
        self.reload_locked(spec, pending).await
    }

    /// Like [`reload`](Self::reload) from bytes already read (the watcher
    /// has just read and hashed the file; reading it again costs time on
    /// large components).
    pub async fn reload_bytes(&self, spec: PluginSpec, bytes: Vec<u8>) -> Result<Arc<PluginVersion>, String> {
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
        self.finish_reload(spec, compiled, pending)
    }

    async fn reload_locked(&self, spec: PluginSpec, pending: bool) -> Result<Arc<PluginVersion>, String> {
        let compiled = self.compile(spec.clone()).await;
        self.finish_reload(spec, compiled, pending)
    }

    /// Installs a compiled version, or publishes why not. With `pending`
    /// (`spec` is a config change not applied yet), a failure keeps `spec`
    /// pending for the next load of the row.
    fn finish_reload(
        &self,
        spec: PluginSpec,
        compiled: Result<Arc<PluginVersion>, FailedLoad>,
        pending: bool,
    ) -> Result<Arc<PluginVersion>, String> {
        let id = spec.id.clone();
        let (digest, msg) = match compiled {
            Ok(v) => match self.install(spec.clone(), v.clone()) {
                Ok(()) => return Ok(v),
                Err(e) => (v.digest.clone(), e),
            },
            // The digest of the bytes that failed (the file may hold others
            // by now); none when the file could not be read.
            Err(f) => (f.digest.unwrap_or_default(), f.error.to_string()),
        };
        let msg = if pending { format!("{msg}; {}", self.keep_pending(spec)) } else { msg };
        self.publish(failed(&id, &digest, &msg));
        Err(msg)
    }

    /// Keeps a config change that could not be applied for the next load of
    /// its row; a loaded policy fails closed meanwhile. Returns what that
    /// means, for the log.
    fn keep_pending(&self, spec: PluginSpec) -> String {
        let id = spec.id.clone();
        let old = {
            let mut st = self.lock();
            st.pending.insert(id.clone(), spec);
            st.versions.get(&id).cloned()
        };
        let mut note = format!("the new config of `{id}` stays pending and applies when the component loads");
        if let Some(old) = old.filter(|v| v.kinds.contains(&crate::component::Kind::Policy)) {
            let reason = format!(
                "policy `{id}` denies every call: its new config could not be applied yet (the component failed to load)"
            );
            let mut regs = registrations(&old);
            regs.policy = Some(Arc::new(FailClosedPolicy { plugin: old.plugin_ref(), reason }));
            match self.registry.install(old.plugin_ref(), regs) {
                Ok(()) => note.push_str("; meanwhile the policy denies every call"),
                Err(e) => tracing::error!("cannot fail policy `{id}` closed: {e}"),
            }
        }
        tracing::warn!("{note}");
        note
    }

    /// Drops a pending config change of `id` (the config went back to what
    /// is loaded), restoring the loaded version's own registrations.
    fn drop_pending(&self, id: &str) {
        let loaded = {
            let mut st = self.lock();
            st.pending.remove(id);
            st.versions.get(id).cloned()
        };
        if let Some(v) = loaded {
            if let Err(e) = self.registry.install(v.plugin_ref(), registrations(&v)) {
                tracing::error!("cannot restore plugin `{id}`: {e}");
            }
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
        let old = {
            let mut st = self.lock();
            st.specs.remove(id);
            st.pending.remove(id);
            st.versions.remove(id)
        };
        match old {
            Some(v) => {
                self.publish(unloaded(&v));
                true
            }
            None => false,
        }
    }

    /// Applies a new set of specs: loads added ids, unloads removed ones and
    /// reloads those whose path, config, grant or mode changed. A change
    /// that fails to load stays pending: the next load of the row (its file
    /// fixed or restored) uses the latest config.
    pub async fn apply(&self, specs: Vec<PluginSpec>) -> Vec<String> {
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
                    self.drop_pending(&spec.id);
                }
                continue;
            }
            if pending.get(&spec.id).is_some_and(|p| same_spec(p, &spec)) {
                continue;
            }
            if let Err(e) = self.reload_locked(spec, true).await {
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
        let (tx, rx) = mpsc::unbounded_channel::<PathBuf>();
        let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            if let Ok(ev) = res {
                if matches!(ev.kind, notify::EventKind::Access(_)) {
                    return;
                }
                for p in ev.paths {
                    let _ = tx.send(p);
                }
            }
        })?;
        // Watch directories (editors and build tools replace files by
        // rename, which a file watch would lose).
        let mut dirs: Vec<PathBuf> = Vec::new();
        let files: Vec<PathBuf> =
            self.lock().specs.values().map(|s| s.path.clone()).chain(config_files.iter().cloned()).collect();
        for f in &files {
            if let Some(d) = f.parent() {
                let d = if d.as_os_str().is_empty() { Path::new(".") } else { d };
                if d.exists() && !dirs.iter().any(|x| x == d) {
                    watcher.watch(d, RecursiveMode::NonRecursive)?;
                    dirs.push(d.to_path_buf());
                }
            }
        }
        let host = self.clone();
        let task = tokio::spawn(async move { host.watch_loop(rx, config_files, source).await });
        Ok(WatchHandle { _watcher: watcher, task })
    }

    async fn watch_loop(
        self: Arc<Self>,
        mut rx: mpsc::UnboundedReceiver<PathBuf>,
        config_files: Vec<PathBuf>,
        source: Option<SpecSource>,
    ) {
        let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let config_set: Vec<PathBuf> = config_files.iter().map(|p| canon(p)).collect();
        let mut retries: HashMap<String, (u32, Instant)> = HashMap::new();
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
            let mut changed: Vec<PathBuf> = first.into_iter().collect();
            tokio::time::sleep(DEBOUNCE).await;
            while let Ok(p) = rx.try_recv() {
                changed.push(p);
            }
            let changed: Vec<PathBuf> = changed.iter().map(|p| canon(p)).collect();
            if changed.iter().any(|p| config_set.contains(p))
                && let Some(src) = &source
            {
                match src() {
                    Ok(specs) => {
                        for e in self.apply(specs).await {
                            tracing::warn!("config reload: {e}");
                        }
                    }
                    Err(e) => {
                        tracing::warn!("config reload refused: {e}");
                        self.publish(failed("config", "", &e));
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
                let touched = changed.iter().any(|p| *p == canon(&spec.path));
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
    a.path == b.path && a.config == b.config && a.grant == b.grant && a.warm == b.warm
}

/// Keeps a watch alive; dropping it stops watching.
pub struct WatchHandle {
    _watcher: notify::RecommendedWatcher,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for WatchHandle {
    fn drop(&mut self) {
        self.task.abort();
    }
}
