//! The server state: the sessions loaded in this process (each with its own
//! agent, serving task and approval questions), and the idle unloader.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use wharf_core::Agent;
use wharf_core::approval::ChannelApprover;
use wharf_core::events::InboxKind;
use wharf_core::store::{LogRelease, RemoteInput, StoreError};

use crate::ServeError;
use crate::questions::{Approvals, Questions};
use wharf_harness::Harness;

/// Settings of a server.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// A loaded session with no turn running, no approval pending and no
    /// queued input for this long is unloaded (its agent dropped, its log
    /// closed); the next request that needs it loads it again. `None`:
    /// never.
    pub idle_timeout: Option<Duration>,
    /// Pending approval questions kept per session (more are answered
    /// `rejected` by dropping them).
    pub max_pending_approvals: usize,
    /// Who answered, as logged in `approval/decided` (`by`): e.g. `web`, `api`.
    pub surface: String,
    /// How often this host asks a store with leases for orphaned sessions
    /// (their host died, or input waits with no owner) and takes them over.
    /// `None`: never (another host must).
    pub adopt_every: Option<Duration>,
    /// Step budget per turn (`None`: the profile's `agent.max_steps`).
    pub max_steps: Option<u32>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            idle_timeout: Some(Duration::from_secs(15 * 60)),
            max_pending_approvals: 64,
            surface: "api".into(),
            adopt_every: Some(Duration::from_millis(250)),
            max_steps: None,
        }
    }
}

/// Most orphaned sessions taken over per round.
const ADOPT_BATCH: usize = 64;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A session loaded in this server: its agent and the approval questions
/// waiting for an answer (runtime handles only; what they mean is in the
/// log).
pub(crate) struct Live {
    pub agent: Agent,
    pub approvals: Arc<Approvals>,
    /// Tools' questions to the user waiting for an answer.
    pub(crate) questions: Arc<Questions>,
    /// Stops the serving task and the host's work for this agent.
    stop: CancellationToken,
    /// Fired when the session is unloaded (event streams fall back to the file).
    pub closed: CancellationToken,
    serving: tokio::task::JoinHandle<()>,
    last_used: Mutex<Instant>,
    /// Tells this loading apart from a later one of the same session.
    generation: u64,
}

impl Live {
    /// Marks the session used now (the idle clock restarts).
    pub fn touch(&self) {
        *lock(&self.last_used) = Instant::now();
    }

    fn idle_for(&self) -> Duration {
        lock(&self.last_used).elapsed()
    }

    /// Whether nothing is happening or waiting in this session.
    fn quiet(&self) -> bool {
        !self.agent.is_running()
            && self.approvals.is_empty()
            && self.questions.is_empty()
            && self.agent.log().pending_inbox().is_empty()
    }
}

#[derive(Default)]
struct Sessions {
    live: HashMap<String, Arc<Live>>,
    /// Sessions being unloaded: fired when their log is closed.
    unloading: HashMap<String, CancellationToken>,
}

/// The state of a server.
pub struct Server {
    pub(crate) harness: Arc<Harness>,
    pub(crate) options: ServeOptions,
    sessions: Mutex<Sessions>,
    /// Ids of sessions as they are loaded (event streams wait for these).
    pub(crate) opened: broadcast::Sender<String>,
    pub(crate) shutdown: CancellationToken,
    /// Usage per session, keyed by the log size it was computed at.
    pub(crate) usage: Mutex<HashMap<String, (u64, Value)>>,
    generations: AtomicU64,
    /// Orphans this host failed to take over, and when it may try again.
    adopt_failed: Mutex<HashMap<String, Instant>>,
}

impl Server {
    /// A server over `harness`'s sessions; stops their work when
    /// `shutdown` fires. Starts the idle unloader (needs a Tokio runtime).
    pub fn new(harness: Arc<Harness>, options: ServeOptions, shutdown: CancellationToken) -> Arc<Self> {
        let (opened, _) = broadcast::channel(256);
        let server = Arc::new(Self {
            harness,
            options,
            sessions: Mutex::default(),
            opened,
            shutdown,
            usage: Mutex::default(),
            generations: AtomicU64::new(1),
            adopt_failed: Mutex::default(),
        });
        if let Some(every) = server.options.adopt_every {
            let weak = Arc::downgrade(&server);
            let stop = server.shutdown.clone();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep(every) => {}
                        _ = stop.cancelled() => return,
                    }
                    let Some(server) = weak.upgrade() else { return };
                    server.adopt_orphans().await;
                }
            });
        }
        if let Some(idle) = server.options.idle_timeout {
            let weak = Arc::downgrade(&server);
            let stop = server.shutdown.clone();
            let every = (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(5));
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep(every) => {}
                        _ = stop.cancelled() => return,
                    }
                    let Some(server) = weak.upgrade() else { return };
                    server.unload_idle(idle);
                }
            });
        }
        server
    }

    /// The loaded session `id`, if it is.
    pub(crate) fn live(&self, id: &str) -> Option<Arc<Live>> {
        lock(&self.sessions).live.get(id).cloned()
    }

    /// Whether session `id` is loaded here.
    /// A session being unloaded counts until its log is released, so a
    /// caller that sees `false` may open the log itself.
    pub fn is_loaded(&self, id: &str) -> bool {
        let s = lock(&self.sessions);
        s.live.contains_key(id) || s.unloading.contains_key(id)
    }

    /// Ids of the loaded sessions.
    pub fn loaded(&self) -> Vec<String> {
        let s = lock(&self.sessions);
        let mut v: Vec<String> = s.live.keys().chain(s.unloading.keys()).cloned().collect();
        drop(s);
        v.sort();
        v.dedup();
        v
    }

    /// Runs `f` on session `id` loaded for turns (loading it, or creating a
    /// new session when `id` is `None`), with no unload in between.
    /// [`StoreError::Leased`] when another host owns the session.
    pub(crate) async fn with_session<T>(
        self: &Arc<Self>,
        id: Option<&str>,
        f: impl FnOnce(&Arc<Live>) -> T,
    ) -> Result<T, ServeError> {
        // A log being closed by an unload cannot be opened until it is, and
        // a host's clean-up of an old agent may hold it a moment longer.
        let mut attempts = 0u32;
        let mut f = Some(f);
        loop {
            let wait = {
                let mut s = lock(&self.sessions);
                let loaded = id.and_then(|id| s.live.get(id).cloned());
                let unloading = id.and_then(|id| s.unloading.get(id).cloned());
                if let Some(l) = loaded {
                    l.touch();
                    let f = f.take().ok_or(ServeError::Host("session callback reused".into()))?;
                    return Ok(f(&l));
                }
                match unloading {
                    Some(done) => Some(done),
                    None => match self.load(&mut s, id) {
                        Ok(l) => {
                            let f = f.take().ok_or(ServeError::Host("session callback reused".into()))?;
                            let out = f(&l);
                            drop(s);
                            let _ = self.opened.send(l.agent.session_id().to_string());
                            return Ok(out);
                        }
                        Err(ServeError::SessionStore(StoreError::Locked { .. })) if attempts < 40 && id.is_some() => {
                            attempts += 1;
                            None
                        }
                        Err(e) => return Err(e),
                    },
                }
            };
            match wait {
                Some(done) => done.cancelled().await,
                None => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// Builds the agent of a session and starts serving its turns (and the
    /// input other hosts store for it).
    fn load(self: &Arc<Self>, s: &mut Sessions, id: Option<&str>) -> Result<Arc<Live>, ServeError> {
        let (approver, mut questions, mut asked) = ChannelApprover::with_questions();
        let stop = self.shutdown.child_token();
        let agent =
            crate::harness_ops::open_agent(&self.harness, id, Arc::new(approver), self.options.max_steps, stop.clone())
                .map_err(ServeError::from_host)?;
        let approvals: Arc<Approvals> = Arc::default();
        let pending = approvals.clone();
        let max = self.options.max_pending_approvals.max(1);
        tokio::spawn(async move {
            while let Some(q) = questions.recv().await {
                pending.put(q.request, q.reply, max);
            }
        });
        let asks: Arc<Questions> = Arc::default();
        let open = asks.clone();
        tokio::spawn(async move {
            while let Some(q) = asked.recv().await {
                open.put(q.question, q.reply, max);
            }
        });
        let generation = self.generations.fetch_add(1, Ordering::Relaxed);
        let (runner, token, host, weak) = (agent.clone(), stop.clone(), self.harness.clone(), Arc::downgrade(self));
        let serving = tokio::spawn(async move {
            tokio::select! {
                r = host.mcp_ready() => if let Err(e) = r { tracing::warn!("{e}") },
                _ = token.cancelled() => return,
            }
            // A session taken over from a dead host (or reopened after a
            // crash) first finishes the durable programs the crash cut
            // (`Agent::recover`), without waiting for new input.
            let served = async {
                let rerun = runner.recover().await?;
                if rerun > 0 {
                    tracing::info!(session = %runner.session_id(), programs = rerun, "re-ran the durable programs a crash cut");
                }
                runner.serve(token).await
            };
            if let Err(e) = served.await {
                // Its writer was fenced or the store stayed down: drop this
                // loading; the next request reopens (and repairs) the session
                // here or routes to the host that took it over.
                tracing::error!(session = %runner.session_id(), "the agent stopped: {e}");
                if let Some(server) = weak.upgrade() {
                    server.evict(runner.session_id(), generation);
                }
            }
        });
        if let Some(inputs) = agent.log().take_inputs() {
            tokio::spawn(deliver_inputs(agent.clone(), inputs, stop.clone(), Arc::downgrade(self), generation));
        }
        let id = agent.session_id().to_string();
        let l = Arc::new(Live {
            agent,
            approvals,
            questions: asks,
            stop,
            closed: CancellationToken::new(),
            serving,
            last_used: Mutex::new(Instant::now()),
            generation,
        });
        s.live.insert(id, l.clone());
        Ok(l)
    }

    /// Unloads the sessions quiet for longer than `idle`.
    fn unload_idle(self: &Arc<Self>, idle: Duration) {
        let ids: Vec<String> = {
            let s = lock(&self.sessions);
            s.live.iter().filter(|(_, l)| l.quiet() && l.idle_for() >= idle).map(|(id, _)| id.clone()).collect()
        };
        for id in ids {
            self.unload_if(&id, |l| l.quiet() && l.idle_for() >= idle);
        }
    }

    /// Unloads session `id` now if it is loaded and quiet; whether it was.
    pub fn unload(self: &Arc<Self>, id: &str) -> bool {
        self.unload_if(id, Live::quiet)
    }

    /// Drops loading `generation` of session `id`, busy or not: this host
    /// lost the session (fenced) or its agent stopped.
    fn evict(self: &Arc<Self>, id: &str, generation: u64) {
        if let Some(l) = self.live(id).filter(|l| l.generation == generation) {
            l.agent.cancel();
            tracing::warn!(session = %id, "dropping the session here (its writer lost the session or failed)");
        }
        self.unload_if(id, |l| l.generation == generation);
    }

    /// Takes over the sessions the store reports orphaned (see
    /// [`wharf_core::store::Backend::orphans`]); each host races for them
    /// and the store's lease lets one win.
    async fn adopt_orphans(self: &Arc<Self>) {
        let harness = self.harness.clone();
        let ids = match tokio::task::spawn_blocking(move || harness.store.backend().orphans(ADOPT_BATCH)).await {
            Ok(Ok(ids)) => ids,
            Ok(Err(e)) => {
                tracing::debug!("looking for orphaned sessions: {e}");
                return;
            }
            Err(_) => return,
        };
        for id in ids {
            if self.shutdown.is_cancelled() {
                return;
            }
            if self.is_loaded(&id) || lock(&self.adopt_failed).get(&id).is_some_and(|t| Instant::now() < *t) {
                continue;
            }
            match self.with_session(Some(&id), |_| ()).await {
                Ok(()) => tracing::info!(session = %id, "took over an orphaned session"),
                Err(ServeError::SessionStore(
                    StoreError::Leased { .. } | StoreError::NotFound(_) | StoreError::Locked { .. },
                )) => {}
                Err(e) => {
                    // E.g. a session of another workspace: not this host's to
                    // serve; look again later (another host may take it).
                    tracing::warn!(session = %id, "could not take over an orphaned session (retrying in 60 s): {e}");
                    let mut failed = lock(&self.adopt_failed);
                    let now = Instant::now();
                    failed.retain(|_, t| *t > now);
                    failed.insert(id, now + Duration::from_secs(60));
                }
            }
        }
    }

    fn unload_if(self: &Arc<Self>, id: &str, cond: impl Fn(&Live) -> bool) -> bool {
        let (l, done) = {
            let mut s = lock(&self.sessions);
            if !s.live.get(id).is_some_and(|l| cond(l)) {
                return false;
            }
            let Some(l) = s.live.remove(id) else { return false };
            let done = CancellationToken::new();
            s.unloading.insert(id.to_string(), done.clone());
            (l, done)
        };
        tracing::info!(session = %id, "unloading the session");
        let server = self.clone();
        let id = id.to_string();
        tokio::spawn(async move {
            // The session counts as loaded until its lock is free, so a
            // caller told it is unloaded can open the log.
            wait_released(&id, close(l).await).await;
            lock(&server.sessions).unloading.remove(&id);
            done.cancel();
        });
        true
    }

    /// Stops every loaded session (their logs are flushed).
    pub async fn close(&self) {
        let all: Vec<Arc<Live>> = lock(&self.sessions).live.drain().map(|(_, l)| l).collect();
        for l in all {
            l.agent.cancel();
            // Shutting down: the logs close with the process.
            drop(close(l).await);
        }
    }
}

/// Logs the input other hosts store for a session (its `inbox/spliced`
/// append also marks the stored item delivered), until the session is
/// unloaded; when the stream ends on its own, this host lost the session.
async fn deliver_inputs(
    agent: Agent,
    mut inputs: tokio::sync::mpsc::UnboundedReceiver<RemoteInput>,
    stop: CancellationToken,
    server: std::sync::Weak<Server>,
    generation: u64,
) {
    let evict = |why: &str| {
        tracing::warn!(session = %agent.session_id(), "{why}");
        if let Some(server) = server.upgrade() {
            server.evict(agent.session_id(), generation);
        }
    };
    loop {
        let item = tokio::select! {
            item = inputs.recv() => item,
            _ = stop.cancelled() => return,
        };
        let Some(item) = item else {
            if !stop.is_cancelled() {
                evict("another host took the session over");
            }
            return;
        };
        let mut warned = false;
        loop {
            let text = item.text.clone();
            let r = match item.kind {
                InboxKind::Followup => agent.followup(text),
                InboxKind::Steer => agent.steer(text),
                InboxKind::Inject => agent.inject(text),
            };
            match r {
                Ok(_) => break,
                Err(StoreError::Fenced { .. }) => {
                    evict("another host took the session over");
                    return;
                }
                Err(e) => {
                    // Still stored (undelivered): retried here, or delivered
                    // by the next owner.
                    if !warned {
                        tracing::warn!(session = %agent.session_id(), input = %item.id, "logging stored input: {e}; retrying");
                        warned = true;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                        _ = stop.cancelled() => return,
                    }
                }
            }
        }
    }
}

/// Stops a session's serving task, flushes its log and drops it; the
/// returned handle tells when the log's last clone is gone.
async fn close(l: Arc<Live>) -> LogRelease {
    l.stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        while !l.serving.is_finished() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    if let Err(e) = l.agent.log().flush().await {
        tracing::warn!("flushing {}: {e}", l.agent.session_id());
    }
    let released = l.agent.log().watch_release();
    l.closed.cancel();
    released
}

/// Waits (bounded) until every handle on an unloaded session's log is gone:
/// event streams and host tasks drop theirs once `closed` and `stop` fire.
async fn wait_released(id: &str, released: LogRelease) {
    let waited = tokio::time::timeout(Duration::from_secs(10), async {
        while !released.is_released() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    if waited.is_err() {
        tracing::warn!(session = %id, "the session's log is still held 10 s after unloading");
    }
}
