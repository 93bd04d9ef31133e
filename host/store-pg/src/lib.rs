//! PostgreSQL backend of the session-log store: events, leases with fencing,
//! inbox and LISTEN/NOTIFY fan-out.
//!
//! [`connect`] opens a pool (`deadpool-postgres` over `tokio-postgres`),
//! applies the embedded migrations (`migrations/*.sql`, under an advisory
//! lock, recorded in `wharf_schema`) and returns a [`PgBackend`] for
//! [`wharf_core::SessionStore::with_backend`]; [`store`] does both.
//!
//! - **Events** are rows `(session_id, seq, body)`; `body` is the text the
//!   core encoded, so it is byte-identical to the JSONL line.
//! - **Appends are group-committed**: a writer's append goes to a queue on
//!   the backend's runtime and waits for its own answer (a thread waits
//!   in [`Writer::append`]; a task in `SessionLog::append_async`, through
//!   [`Writer::start_append`], holds no thread). A worker
//!   ([`PgOptions::append_workers`], 2 by default, at most half the pool)
//!   takes everything queued (up to
//!   [`PgOptions::append_group`] sessions, about 1 MiB, one batch per
//!   session) and send it as one call of the SQL function
//!   `wharf_append_many`: one transaction that locks the sessions in id
//!   order (two hosts cannot deadlock), and for each batch checks the
//!   fencing token and that the batch continues the log (`last_seq + 1`),
//!   inserts it, renews the lease and marks the inbox rows it logs
//!   delivered; it returns a status per batch (a fenced or broken session
//!   fails alone) and sends one `wharf_events` notification of
//!   `id last_seq` lines per ~7900 bytes for the sessions some host
//!   watches (below); a call that touches none sends none. Under load the
//!   appends that arrive while a call is in the database share the next
//!   one: a worker whose group is ready while another group is in the
//!   database takes what arrives until that call ends (at most 2 ms, so a
//!   call stuck on a lock holds the others up no longer). The
//!   per-transaction cost is paid per group, not per session (on the load
//!   bench, 2 hosts and the database on 2 cores: about 10 calls per turn
//!   of 26 appends, 16 without the hold). A writer's retries (below) send its batch again,
//!   to a later group; each waits for one attempt at a time, as before.
//! - **Durability** mirrors the JSONL store: appends commit with
//!   `synchronous_commit = off` (they survive the death of the host at once,
//!   and of the database server after its WAL writer's next flush, within
//!   about 3 × `wal_writer_delay`); [`SessionLog::flush`](wharf_core::SessionLog::flush)
//!   renews the lease with a synchronous commit, which waits for the WAL
//!   flush that covers every earlier append. [`PgOptions::durable_appends`]
//!   makes every append wait instead.
//! - **Lease**: [`Backend::open`] takes a free or expired lease and bumps its
//!   fencing token; while held, it is renewed every
//!   [`PgOptions::renew_every`] by one task per backend that renews all of
//!   its writers' leases in one statement (skipping those an append renewed
//!   since the last round: every append renews it too). An append whose
//!   token is no longer current (another host took the session over) is
//!   refused with [`StoreError::Fenced`]. Dropping the writer releases the
//!   lease.
//! - **Failures**: connection-level errors (server restarting, refused,
//!   closed) are retried with backoff, a writer's for
//!   [`PgOptions::retry_for`] and everything else for
//!   [`PgOptions::read_retry_for`] (inside a
//!   [`retry_scope`](wharf_core::store::retry_scope), e.g. one `wharf serve`
//!   request, counted from the scope's first failure, so its operations
//!   together wait one budget), and so are deadlocks and serialization
//!   failures (the transaction was rolled back whole); a retried append
//!   whose first attempt did commit is recognised by its bytes. Then the error is
//!   [`StoreError::Unavailable`] naming the cause, and nothing of the failed
//!   batch is in the log.
//! - **Inbox**: [`Backend::push_input`] stores an item for the session's
//!   owner on any host and notifies `wharf_inbox`; the owner's writer
//!   streams pending items ([`Writer::take_inputs`]), and the append that
//!   logs an item (`inbox/spliced` with its kind and text) marks it
//!   delivered in the same transaction. The stream ends when the writer
//!   loses the lease.
//! - **Orphans**: [`Backend::orphans`] lists sessions whose lease expired
//!   unreleased, or with input waiting and no writer, for a fleet host to
//!   take over.
//! - **URL parameters**: [`apply_url_options`].
//! - **Watch**: [`Backend::watch`] streams another writer's events, woken by
//!   `LISTEN wharf_events` on one connection per backend (with a slow poll as
//!   a safety net, and a catch-up after the listener reconnects). Each watch
//!   has a row in `wharf_watches` (written before its first read, renewed
//!   every few seconds, deleted when it ends, expiring if its host dies):
//!   appends announce only watched sessions, since every notification wakes
//!   every listening connection of every host.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::NoTls;
use wharf_core::events::{Event, EventKind, InboxKind, InboxOp, SessionStart};
use wharf_core::store::backend::{TITLE_SCAN, decode_rows, summary_title};
use wharf_core::store::{
    AppendDone, Backend, Encoded, LeaseInfo, RawLog, RemoteInput, SessionSummary, StoreError, StoreOptions, Syncer,
    Writer,
};

/// The embedded migrations, applied in order at [`connect`].
const MIGRATIONS: &[(i32, &str)] = &[
    (1, include_str!("../migrations/0001_sessions.sql")),
    (2, include_str!("../migrations/0002_inbox_ack.sql")),
    (3, include_str!("../migrations/0003_renew_many.sql")),
    (4, include_str!("../migrations/0004_append_many.sql")),
    (5, include_str!("../migrations/0005_watched_notify.sql")),
];

/// Most leases one renewal statement carries.
const RENEW_BATCH: usize = 1000;

/// Most event bytes one group commit carries (it takes one batch more than
/// that at most, and always at least one).
const APPEND_GROUP_BYTES: i64 = 1 << 20;

/// How long a group waits, at most, for a group already in the database
/// before it is sent too (see [`AppendQueue::next_group`]).
const GROUP_HOLD: Duration = Duration::from_millis(2);

/// How long a watch's row in `wharf_watches` lives without renewal, and
/// how often a running watch renews it (it wakes at least every [`POLL`]).
const WATCH_TTL: Duration = Duration::from_secs(20);
const WATCH_RENEW: Duration = Duration::from_secs(5);

/// Backends made in this process, for their watcher names.
static BACKENDS: AtomicU64 = AtomicU64::new(0);

/// Advisory lock key serialising migrations across hosts.
const MIGRATION_LOCK: i64 = 0x5748_4152_4631; // "WHARF1"

/// Whether `s` names a PostgreSQL store (`postgres://` or `postgresql://`).
pub fn is_postgres_url(s: &str) -> bool {
    s.starts_with("postgres://") || s.starts_with("postgresql://")
}

/// Tuning of the PostgreSQL backend.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// How long a lease lasts without renewal.
    pub lease: Duration,
    /// How often an open writer renews its lease.
    pub renew_every: Duration,
    /// How long a writer's connection-level failures (appends, lease
    /// renewals, syncs) are retried before they fail with
    /// [`StoreError::Unavailable`]: a database restart shorter than this
    /// only delays a running turn.
    pub retry_for: Duration,
    /// The same for everything else (reads, listings, opening, stored
    /// input), so a caller learns quickly that the store is down.
    pub read_retry_for: Duration,
    /// Pool size.
    pub pool_size: usize,
    /// Wait for the WAL flush on every append (default: on flush only).
    pub durable_appends: bool,
    /// Most sessions' batches one group commit (one `wharf_append_many`
    /// call, one transaction) carries; 1 commits each append alone.
    pub append_group: usize,
    /// How many group commits may be in the database at once (at most half
    /// the pool). Fewer make larger groups, which cost the database less
    /// per append; more let a slow call not hold up the others.
    pub append_workers: usize,
    /// How long one database round trip (an attempt) may go unanswered
    /// before it counts as a connection failure: a database that stopped
    /// answering (paused, or a lock held elsewhere) fails the call once its
    /// retry budget is spent, instead of holding it.
    pub attempt_timeout: Duration,
    /// Name recorded as the lease holder (default `HOSTNAME:PID`).
    pub holder: String,
}

impl Default for PgOptions {
    fn default() -> Self {
        Self {
            lease: Duration::from_millis(1500),
            renew_every: Duration::from_millis(500),
            retry_for: Duration::from_secs(15),
            read_retry_for: Duration::from_secs(3),
            pool_size: 16,
            durable_appends: false,
            append_group: 64,
            append_workers: 2,
            attempt_timeout: Duration::from_secs(30),
            holder: default_holder(),
        }
    }
}

fn default_holder() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into());
    format!("{host}:{}", std::process::id())
}

/// Connects and returns a [`wharf_core::SessionStore`] over PostgreSQL.
pub fn store(url: &str, options: PgOptions) -> Result<wharf_core::SessionStore, StoreError> {
    Ok(wharf_core::SessionStore::with_backend(Arc::new(connect(url, options)?)))
}

/// Takes Wharf's own settings out of a store URL's query (`wharf_lease_ms`,
/// `wharf_renew_ms`, `wharf_retry_ms`, `wharf_read_retry_ms`, `wharf_pool`,
/// `wharf_durable`, `wharf_append_group`, `wharf_append_workers`,
/// `wharf_attempt_ms`),
/// applying them to `options`; returns the URL for the driver (which
/// refuses parameters it does not know).
pub fn apply_url_options(url: &str, options: &mut PgOptions) -> Result<String, StoreError> {
    let Some((base, query)) = url.split_once('?') else { return Ok(url.to_string()) };
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let Some(name) = k.strip_prefix("wharf_") else {
            kept.push(pair);
            continue;
        };
        let bad = |why: &str| StoreError::Unavailable {
            location: redact(base),
            detail: format!("invalid store URL parameter `{k}={}`: {why}", wharf_core::util::cut_str(v, 64)),
        };
        let ms = || v.parse::<u64>().map(Duration::from_millis).map_err(|_| bad("expected milliseconds"));
        match name {
            "lease_ms" => options.lease = ms()?.max(Duration::from_millis(50)),
            "renew_ms" => options.renew_every = ms()?.max(Duration::from_millis(10)),
            "retry_ms" => options.retry_for = ms()?,
            "read_retry_ms" => options.read_retry_for = ms()?,
            "pool" => options.pool_size = v.parse().map_err(|_| bad("expected a number"))?,
            "durable" => options.durable_appends = matches!(v, "1" | "true" | "on"),
            "append_group" => options.append_group = v.parse().map_err(|_| bad("expected a number"))?,
            "append_workers" => options.append_workers = v.parse().map_err(|_| bad("expected a number"))?,
            "attempt_ms" => options.attempt_timeout = ms()?.max(Duration::from_millis(10)),
            _ => return Err(bad("unknown Wharf parameter")),
        }
    }
    if options.renew_every >= options.lease {
        options.renew_every = options.lease / 3;
    }
    Ok(if kept.is_empty() { base.to_string() } else { format!("{base}?{}", kept.join("&")) })
}

/// Connects to `url`, applies the migrations and returns the backend.
/// Wharf's own URL parameters ([`apply_url_options`]) override `options`.
pub fn connect(url: &str, mut options: PgOptions) -> Result<PgBackend, StoreError> {
    let url = &apply_url_options(url, &mut options)?;
    let mut config: tokio_postgres::Config = url.parse().map_err(|e| StoreError::Unavailable {
        location: redact(url),
        detail: format!("invalid PostgreSQL URL: {e}"),
    })?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_secs(5));
    }
    config.application_name("wharf");
    let location = display_url(&config);
    let (htx, hrx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("wharf-pg".into())
        .spawn(move || match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => {
                let _ = htx.send(Ok(rt.handle().clone()));
                rt.block_on(async {
                    let _ = stop_rx.await;
                });
            }
            Err(e) => {
                let _ = htx.send(Err(e));
            }
        })
        .map_err(|e| unavailable(&location, format!("cannot start the database thread: {e}")))?;
    let handle = hrx
        .recv()
        .map_err(|_| unavailable(&location, "the database thread stopped".into()))?
        .map_err(|e| unavailable(&location, format!("cannot start the database runtime: {e}")))?;
    let mgr = Manager::from_config(config.clone(), NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
    let pool_size = options.pool_size.max(1);
    let pool = run_on(&handle, async move {
        Pool::builder(mgr)
            .max_size(pool_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(Duration::from_secs(10)))
            .create_timeout(Some(Duration::from_secs(5)))
            .build()
    })
    .ok_or_else(|| unavailable(&location, "the database thread stopped".into()))?
    .map_err(|e| unavailable(&location, format!("cannot build the connection pool: {e}")))?;
    let (appends, queue) = mpsc::unbounded_channel();
    let options_holder = options.holder.clone();
    let inner = Arc::new(Inner {
        location,
        config,
        pool,
        handle,
        options,
        wakers: Mutex::new(Wakers::default()),
        listening: AtomicBool::new(false),
        polling_inbox: AtomicBool::new(false),
        leases: Mutex::new(HashMap::new()),
        renewing: AtomicBool::new(false),
        appends,
        watcher: format!("{}/{}", options_holder, BACKENDS.fetch_add(1, Ordering::Relaxed)),
        watches: AtomicU64::new(0),
        _stop: stop_tx,
    });
    // The group-commit workers share one queue; while some wait for the
    // database, appends pile up for the next one to take together.
    let queue = Arc::new(tokio::sync::Mutex::new(AppendQueue {
        rx: queue,
        deferred: Vec::new(),
        flight: Arc::new(Flight::default()),
    }));
    // At most half the pool: the other connections serve everything else.
    for _ in 0..inner.options.append_workers.clamp(1, (pool_size / 2).max(1)) {
        inner.handle.spawn(append_worker(Arc::downgrade(&inner), queue.clone()));
    }
    let i2 = inner.clone();
    inner.call(async move { i2.migrate().await })?;
    Ok(PgBackend { inner })
}

/// `postgres://user:***@host/db` → `postgres://user@host/db` for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let cred = &url[s + 3..at];
            let user = cred.split(':').next().unwrap_or("");
            format!("{}{user}@{}", &url[..s + 3], &url[at + 1..])
        }
        _ => url.to_string(),
    }
}

fn display_url(c: &tokio_postgres::Config) -> String {
    let host = match c.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = c.get_ports().first().copied().unwrap_or(5432);
    let user = c.get_user().map(|u| format!("{u}@")).unwrap_or_default();
    format!("postgres://{user}{host}:{port}/{}", c.get_dbname().unwrap_or(""))
}

fn unavailable(location: &str, detail: String) -> StoreError {
    StoreError::Unavailable { location: location.to_string(), detail }
}

/// Runs `fut` on the backend's runtime thread and waits for it from any
/// thread (also from inside another runtime, where `Handle::block_on`
/// panics). `None` if the runtime stopped.
fn run_on<T: Send + 'static>(
    handle: &tokio::runtime::Handle,
    fut: impl Future<Output = T> + Send + 'static,
) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    handle.spawn(async move {
        let _ = tx.send(fut.await);
    });
    // On a worker of a multi-threaded runtime (the agent loop's), waiting
    // for the round trip would take the worker from every other session on
    // the host: `block_in_place` hands its tasks to another thread first.
    // Elsewhere (a plain thread, a current-thread runtime) it just waits.
    let on_worker = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if on_worker { tokio::task::block_in_place(|| rx.recv().ok()) } else { rx.recv().ok() }
}

/// A PostgreSQL session store. Cheap to clone.
#[derive(Clone)]
pub struct PgBackend {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PgBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgBackend").field("location", &self.inner.location).finish()
    }
}

#[derive(Default)]
struct Wakers {
    events: HashMap<String, Vec<mpsc::UnboundedSender<()>>>,
    inbox: HashMap<String, Vec<mpsc::UnboundedSender<()>>>,
}

struct Inner {
    /// The URL without password, for people.
    location: String,
    config: tokio_postgres::Config,
    pool: Pool,
    handle: tokio::runtime::Handle,
    options: PgOptions,
    wakers: Mutex<Wakers>,
    listening: AtomicBool,
    /// Whether the inbox poll runs ([`Inner::ensure_inbox_poll`]).
    polling_inbox: AtomicBool,
    /// The leases this backend's writers hold, by session: renewed
    /// together by one task ([`Inner::ensure_renewer`]).
    leases: Mutex<HashMap<String, Lease>>,
    /// Whether the renewal task runs.
    renewing: AtomicBool,
    /// The group-commit queue ([`append_worker`]).
    appends: mpsc::UnboundedSender<AppendReq>,
    /// This backend's name in `wharf_watches` (the holder name and a
    /// number unique in the process: two backends of one process are two
    /// watchers).
    watcher: String,
    /// The last watch number given out (a watch's row is `watcher/N`).
    watches: AtomicU64,
    /// Dropped with the backend: stops the runtime thread.
    _stop: oneshot::Sender<()>,
}

/// A lease a writer of this backend holds.
struct Lease {
    token: i64,
    held: Arc<Held>,
    /// When it was last renewed (by an append, a sync or the renewal task).
    renewed: std::time::Instant,
}

/// A failure inside one attempt.
enum Fail {
    /// Worth retrying (connection-level).
    Transient(String),
    /// Final.
    Fatal(StoreError),
}

impl From<StoreError> for Fail {
    fn from(e: StoreError) -> Self {
        Fail::Fatal(e)
    }
}

fn pg_fail(what: &str, e: tokio_postgres::Error) -> Fail {
    use tokio_postgres::error::SqlState;
    let detail = match e.as_db_error() {
        Some(db) => format!("{what}: {} ({})", db.message(), db.code().code()),
        None => match std::error::Error::source(&e) {
            Some(cause) => format!("{what}: {e}: {cause}"),
            None => format!("{what}: {e}"),
        },
    };
    let io = std::error::Error::source(&e).is_some_and(|s| s.downcast_ref::<std::io::Error>().is_some());
    let text = e.to_string();
    let connection = e.is_closed()
        || io
        || text.starts_with("error connecting")
        || text.starts_with("error communicating")
        || text.starts_with("timeout");
    match e.code() {
        None if connection => Fail::Transient(detail),
        None => Fail::Fatal(StoreError::Unavailable { location: String::new(), detail }),
        Some(c)
            if *c == SqlState::ADMIN_SHUTDOWN
                || *c == SqlState::CRASH_SHUTDOWN
                || *c == SqlState::CANNOT_CONNECT_NOW
                // The transaction was rolled back whole: trying again is safe.
                || *c == SqlState::T_R_DEADLOCK_DETECTED
                || *c == SqlState::T_R_SERIALIZATION_FAILURE
                || c.code().starts_with("08") =>
        {
            Fail::Transient(detail)
        }
        Some(_) => Fail::Fatal(StoreError::Unavailable { location: String::new(), detail }),
    }
}

fn pool_fail(e: deadpool_postgres::PoolError) -> Fail {
    match e {
        deadpool_postgres::PoolError::Backend(e) => pg_fail("connecting", e),
        other => Fail::Transient(format!("connecting: {other}")),
    }
}

impl Inner {
    fn lock_wakers(&self) -> MutexGuard<'_, Wakers> {
        self.wakers.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_leases(&self) -> MutexGuard<'_, HashMap<String, Lease>> {
        self.leases.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that session `id`'s lease (under `token`) was just renewed.
    fn touch(&self, id: &str, token: i64, at: std::time::Instant) {
        if let Some(l) = self.lock_leases().get_mut(id)
            && l.token == token
        {
            l.renewed = l.renewed.max(at);
        }
    }

    /// Starts the task that renews this backend's leases, once. Every
    /// `renew_every` it renews, in one statement per [`RENEW_BATCH`], each
    /// lease not renewed since the last round (an append renews its
    /// session's lease too), and tells the writers whose lease was taken
    /// over.
    fn ensure_renewer(self: &Arc<Self>) {
        if self.renewing.swap(true, Ordering::SeqCst) {
            return;
        }
        let weak = Arc::downgrade(self);
        let every = self.options.renew_every;
        self.handle.spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                inner.renew_due(every).await;
            }
        });
    }

    async fn renew_due(&self, every: Duration) {
        let mut due: Vec<(String, i64)> = self
            .lock_leases()
            .iter()
            .filter(|(_, l)| l.renewed.elapsed() >= every)
            .map(|(id, l)| (id.clone(), l.token))
            .collect();
        // One order for every host's statements: no lock-order cycles.
        due.sort();
        for chunk in due.chunks(RENEW_BATCH) {
            let started = std::time::Instant::now();
            let ids: Vec<&str> = chunk.iter().map(|(id, _)| id.as_str()).collect();
            let tokens: Vec<i64> = chunk.iter().map(|(_, t)| *t).collect();
            let renewed = async {
                let c = self.client().await?;
                let rows = c
                    .query(
                        "SELECT wharf_renew_many($1, $2, $3, $4)",
                        &[&ids, &tokens, &self.options.holder, &self.ttl_ms()],
                    )
                    .await
                    .map_err(|e| pg_fail("renewing the leases", e))?;
                Ok::<_, Fail>(rows.iter().map(|r| r.get::<_, String>(0)).collect::<std::collections::HashSet<String>>())
            };
            let renewed = match self.bounded("renewing the leases", renewed).await {
                Ok(r) => r,
                Err(Fail::Transient(d)) | Err(Fail::Fatal(StoreError::Unavailable { detail: d, .. })) => {
                    tracing::warn!(store = %self.location, sessions = chunk.len(), "could not renew the leases: {d}");
                    continue;
                }
                Err(Fail::Fatal(e)) => {
                    tracing::warn!(store = %self.location, sessions = chunk.len(), error = %e, "could not renew the leases");
                    continue;
                }
            };
            let mut leases = self.lock_leases();
            for (id, token) in chunk {
                let Some(l) = leases.get_mut(id).filter(|l| l.token == *token) else { continue };
                if renewed.contains(id) {
                    l.renewed = l.renewed.max(started);
                } else {
                    tracing::warn!(session = %id, token, "lease lost: another host took the session over");
                    l.held.lose();
                    leases.remove(id);
                }
            }
        }
    }

    /// Runs `fut` on the backend's runtime and waits for it (from any thread).
    fn call<T: Send + 'static>(
        &self,
        fut: impl Future<Output = Result<T, StoreError>> + Send + 'static,
    ) -> Result<T, StoreError> {
        // The caller's request budget (if any) goes along to the runtime.
        let clock = wharf_core::store::retry_clock();
        let fut = async move {
            match clock {
                Some(c) => c.scope(fut).await,
                None => fut.await,
            }
        };
        run_on(&self.handle, fut).unwrap_or_else(|| Err(self.err("the database thread stopped".into())))
    }

    fn err(&self, detail: String) -> StoreError {
        unavailable(&self.location, detail)
    }

    /// Retries a writer's `attempt` on connection-level failures for
    /// `retry_for`.
    async fn retry<T, F, Fut>(&self, what: &str, attempt: F) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Fail>>,
    {
        self.retry_within(self.options.retry_for, what, attempt).await
    }

    /// Retries a reader's `attempt` for `read_retry_for`.
    async fn retry_read<T, F, Fut>(&self, what: &str, attempt: F) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Fail>>,
    {
        self.retry_within(self.options.read_retry_for, what, attempt).await
    }

    async fn retry_within<T, F, Fut>(&self, budget: Duration, what: &str, mut attempt: F) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Fail>>,
    {
        // Inside a request's retry scope the budget runs from the request's
        // first failure: its operations together wait one budget at most.
        let mut since: Option<std::time::Instant> = None;
        let mut delay = Duration::from_millis(50);
        let mut warned = false;
        loop {
            match self.bounded(what, attempt()).await {
                Ok(v) => {
                    if warned {
                        tracing::info!(store = %self.location, "{what}: the session store is back");
                    }
                    return Ok(v);
                }
                Err(Fail::Fatal(StoreError::Unavailable { location, detail })) if location.is_empty() => {
                    return Err(self.err(detail));
                }
                Err(Fail::Fatal(e)) => return Err(e),
                Err(Fail::Transient(detail)) => {
                    let start = *since.get_or_insert_with(|| {
                        wharf_core::store::retry_clock().map_or_else(std::time::Instant::now, |c| c.failing_since())
                    });
                    if start.elapsed() >= budget {
                        let detail = if detail.starts_with(what) { detail } else { format!("{what}: {detail}") };
                        return Err(
                            self.err(format!("{detail} (gave up after retrying for {} s)", budget.as_secs_f32()))
                        );
                    }
                    if !warned {
                        tracing::warn!(store = %self.location, "{detail}; retrying");
                        warned = true;
                    }
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(1));
                }
            }
        }
    }

    /// `attempt` under [`PgOptions::attempt_timeout`]; past it, a
    /// connection-level failure (retried like one). What the abandoned
    /// statement still does is what a connection lost mid-statement leaves:
    /// a writer's retry of the same batch is recognised by its bytes.
    async fn bounded<T>(&self, what: &str, attempt: impl Future<Output = Result<T, Fail>>) -> Result<T, Fail> {
        match tokio::time::timeout(self.options.attempt_timeout, attempt).await {
            Ok(r) => r,
            Err(_) => Err(self.unanswered(what)),
        }
    }

    /// Registers (or renews) watch `key` of session `id` in
    /// `wharf_watches`, so appends to it are announced; rows of watches
    /// whose host died without removing them are dropped on the way. Waits
    /// at most one [`POLL`]: a watch not registered still catches up at its
    /// polls, and a database that stopped answering must not hold up its
    /// reads longer than they would wait anyway.
    async fn register_watch(&self, id: &str, key: &str) -> Result<(), Fail> {
        let what = "registering a watch";
        let ttl = i64::try_from(WATCH_TTL.as_millis()).unwrap_or(i64::MAX);
        self.on_connection(what, POLL.min(self.options.attempt_timeout), async |c| {
            c.execute("DELETE FROM wharf_watches WHERE expires < now() - interval '1 minute'", &[])
                .await
                .map_err(|e| pg_fail(what, e))?;
            c.execute(
                "INSERT INTO wharf_watches (session_id, watcher, expires)
                 VALUES ($1, $2, now() + $3::bigint * interval '1 millisecond')
                 ON CONFLICT (session_id, watcher) DO UPDATE SET expires = EXCLUDED.expires",
                &[&id, &key, &ttl],
            )
            .await
            .map_err(|e| pg_fail(what, e))?;
            Ok(())
        })
        .await
    }

    /// Runs `f` on a pooled connection for at most `wait`. A connection
    /// whose statement is still unanswered then is closed, not pooled: its
    /// next statement would wait behind that one.
    async fn on_connection<T>(
        &self,
        what: &str,
        wait: Duration,
        f: impl AsyncFnOnce(&deadpool_postgres::Object) -> Result<T, Fail>,
    ) -> Result<T, Fail> {
        let late = || Fail::Transient(format!("{what}: no answer from the database within {} ms", wait.as_millis()));
        let deadline = tokio::time::Instant::now() + wait;
        let c = tokio::time::timeout_at(deadline, self.client()).await.map_err(|_| late())??;
        let r = tokio::time::timeout_at(deadline, f(&c)).await;
        match r {
            Ok(r) => r,
            Err(_) => {
                drop(deadpool_postgres::Object::take(c));
                Err(late())
            }
        }
    }

    fn unanswered(&self, what: &str) -> Fail {
        Fail::Transient(format!(
            "{what}: no answer from the database within {} ms",
            self.options.attempt_timeout.as_millis()
        ))
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, Fail> {
        self.pool.get().await.map_err(pool_fail)
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        self.retry_read("applying migrations", || async {
            let mut c = self.client().await?;
            let tx = c.transaction().await.map_err(|e| pg_fail("migrating", e))?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
                .await
                .map_err(|e| pg_fail("migrating", e))?;
            tx.batch_execute(
                "CREATE TABLE IF NOT EXISTS wharf_schema (version int PRIMARY KEY, applied timestamptz NOT NULL DEFAULT now())",
            )
            .await
            .map_err(|e| pg_fail("migrating", e))?;
            let row = tx
                .query_one("SELECT coalesce(max(version), 0) FROM wharf_schema", &[])
                .await
                .map_err(|e| pg_fail("migrating", e))?;
            let current: i32 = row.get(0);
            for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > current) {
                tx.batch_execute(sql).await.map_err(|e| pg_fail(&format!("applying migration {version}"), e))?;
                tx.execute("INSERT INTO wharf_schema (version) VALUES ($1)", &[version])
                    .await
                    .map_err(|e| pg_fail("migrating", e))?;
            }
            tx.commit().await.map_err(|e| pg_fail("migrating", e))?;
            Ok(())
        })
        .await
    }

    fn ttl_ms(&self) -> i64 {
        i64::try_from(self.options.lease.as_millis()).unwrap_or(i64::MAX)
    }

    async fn lease_info(&self, id: &str) -> Result<Option<LeaseInfo>, StoreError> {
        self.retry_read("reading the lease", || async {
            let c = self.client().await?;
            let row = c
                .query_opt(
                    "SELECT coalesce(lease_holder, ''), lease_token,
                            CASE WHEN lease_expires > now()
                                 THEN ceil(extract(epoch FROM lease_expires - now()) * 1000)::bigint END
                       FROM wharf_sessions WHERE id = $1",
                    &[&id],
                )
                .await
                .map_err(|e| pg_fail("reading the lease", e))?;
            Ok(row.map(|r| LeaseInfo {
                holder: r.get(0),
                token: u64::try_from(r.get::<_, i64>(1)).unwrap_or(0),
                expires_in_ms: r.get::<_, Option<i64>>(2).map(|m| u64::try_from(m).unwrap_or(0)),
            }))
        })
        .await
    }

    async fn renew(&self, id: &str, token: i64, durable: bool) -> Result<bool, Fail> {
        let c = self.client().await?;
        let row = c
            .query_one(
                "SELECT wharf_renew($1, $2, $3, $4, $5)",
                &[&id, &token, &self.options.holder, &self.ttl_ms(), &durable],
            )
            .await
            .map_err(|e| pg_fail("renewing the lease", e))?;
        Ok(row.get(0))
    }

    async fn fenced(&self, id: &str, token: i64) -> StoreError {
        let detail = match self.lease_info(id).await {
            Ok(Some(l)) => format!("{} holds it with fencing token {}, this writer had {token}", l.holder, l.token),
            Ok(None) => "the session was deleted".into(),
            Err(e) => format!("fencing token {token} is stale ({e})"),
        };
        StoreError::Fenced { id: id.to_string(), detail }
    }

    async fn load(&self, id: &str, from_seq: i64) -> Result<Vec<(u64, String)>, StoreError> {
        self.load_range(id, from_seq, i64::MAX).await
    }

    /// The events `from_seq..=to_seq` of `id`.
    async fn load_range(&self, id: &str, from_seq: i64, to_seq: i64) -> Result<Vec<(u64, String)>, StoreError> {
        self.retry_read("reading events", || async {
            let c = self.client().await?;
            let rows = c
                .query(
                    "SELECT seq, body FROM wharf_events WHERE session_id = $1 AND seq >= $2 AND seq <= $3 ORDER BY seq",
                    &[&id, &from_seq, &to_seq],
                )
                .await
                .map_err(|e| pg_fail("reading events", e))?;
            Ok(rows.iter().map(|r| (u64::try_from(r.get::<_, i64>(0)).unwrap_or(0), r.get::<_, String>(1))).collect())
        })
        .await
    }

    async fn exists(&self, id: &str) -> Result<bool, StoreError> {
        self.retry_read("looking up a session", || async {
            let c = self.client().await?;
            let row = c
                .query_one("SELECT EXISTS (SELECT 1 FROM wharf_sessions WHERE id = $1)", &[&id])
                .await
                .map_err(|e| pg_fail("looking up a session", e))?;
            Ok(row.get(0))
        })
        .await
    }

    /// Starts the LISTEN connection once.
    fn ensure_listener(self: &Arc<Self>) {
        if self.listening.swap(true, Ordering::SeqCst) {
            return;
        }
        let weak = Arc::downgrade(self);
        self.handle.spawn(async move {
            let mut delay = Duration::from_millis(100);
            loop {
                let Some(inner) = weak.upgrade() else { return };
                let config = inner.config.clone();
                drop(inner);
                match listen_once(&weak, config).await {
                    Ok(()) => delay = Duration::from_millis(100),
                    Err(e) => {
                        tracing::warn!(error = %e, "session store listener lost; reconnecting");
                        delay = (delay * 2).min(Duration::from_secs(2));
                    }
                }
                tokio::time::sleep(delay).await;
            }
        });
    }

    /// The safety net under `LISTEN wharf_inbox` (a notification can be
    /// missed while the listener reconnects): every [`POLL`], one query
    /// for all of this backend's sessions with an input stream finds those
    /// with undelivered input and wakes them. One statement per backend,
    /// not one per loaded session: a host with thousands of sessions loaded
    /// would otherwise poll the database thousands of times per round.
    fn ensure_inbox_poll(self: &Arc<Self>) {
        if self.polling_inbox.swap(true, Ordering::SeqCst) {
            return;
        }
        let weak = Arc::downgrade(self);
        self.handle.spawn(async move {
            loop {
                tokio::time::sleep(POLL).await;
                let Some(inner) = weak.upgrade() else { return };
                let ids: Vec<String> = inner.lock_wakers().inbox.keys().cloned().collect();
                for chunk in ids.chunks(INBOX_POLL_BATCH) {
                    let found = inner
                        .bounded("polling the inbox", async {
                            let c = inner.client().await?;
                            let rows = c
                                .query(
                                    "SELECT DISTINCT session_id FROM wharf_inbox
                                      WHERE delivered IS NULL AND session_id = ANY($1)",
                                    &[&chunk],
                                )
                                .await
                                .map_err(|e| pg_fail("polling the inbox", e))?;
                            Ok(rows.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>())
                        })
                        .await;
                    match found {
                        Ok(ids) => {
                            for id in ids {
                                inner.wake("wharf_inbox", &id);
                            }
                        }
                        // The next round tries again; the listener still wakes.
                        Err(Fail::Transient(e)) => tracing::debug!(error = %e, "polling the inbox"),
                        Err(Fail::Fatal(e)) => tracing::debug!(error = %e, "polling the inbox"),
                    }
                }
            }
        });
    }

    fn wake_all(&self) {
        let w = self.lock_wakers();
        for tx in w.events.values().chain(w.inbox.values()).flatten() {
            let _ = tx.send(());
        }
    }

    /// Wakes the watchers of every session a notification names: lines
    /// `id last_seq` (one line from `wharf_append` or an older host, many
    /// from `wharf_append_many`), or a bare `id` (`wharf_inbox`).
    fn wake(&self, channel: &str, payload: &str) {
        let mut w = self.lock_wakers();
        let map = if channel == "wharf_inbox" { &mut w.inbox } else { &mut w.events };
        for id in notified_ids(payload) {
            if let Some(list) = map.get_mut(id) {
                list.retain(|tx| tx.send(()).is_ok());
                if list.is_empty() {
                    map.remove(id);
                }
            }
        }
    }

    fn register(&self, inbox: bool, id: &str) -> mpsc::UnboundedReceiver<()> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut w = self.lock_wakers();
        let map = if inbox { &mut w.inbox } else { &mut w.events };
        map.entry(id.to_string()).or_default().push(tx);
        rx
    }
}

/// The session ids of a notification's payload (see [`Inner::wake`]).
fn notified_ids(payload: &str) -> impl Iterator<Item = &str> {
    payload.lines().filter_map(|l| l.split(' ').next()).filter(|id| !id.is_empty())
}

/// One LISTEN connection until it fails; wakes everybody after connecting
/// (notifications sent while it was down are caught up by a re-read).
async fn listen_once(weak: &std::sync::Weak<Inner>, config: tokio_postgres::Config) -> Result<(), String> {
    let (client, mut conn) = config.connect(NoTls).await.map_err(|e| e.to_string())?;
    let (ntx, mut nrx) = mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| conn.poll_message(cx)).await {
                Some(Ok(tokio_postgres::AsyncMessage::Notification(n))) => {
                    if ntx.send((n.channel().to_string(), n.payload().to_string())).is_err() {
                        return Ok(());
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e.to_string()),
                None => return Err("the listener connection closed".to_string()),
            }
        }
    });
    client.batch_execute("LISTEN wharf_events; LISTEN wharf_inbox").await.map_err(|e| e.to_string())?;
    if let Some(inner) = weak.upgrade() {
        inner.wake_all();
    }
    while let Some((channel, payload)) = nrx.recv().await {
        let Some(inner) = weak.upgrade() else { return Ok(()) };
        inner.wake(&channel, &payload);
    }
    drop(client);
    match driver.await {
        Ok(r) => r,
        Err(e) => Err(e.to_string()),
    }
}

/// The safety-net poll of watchers and inbox streams.
const POLL: Duration = Duration::from_secs(2);

/// Most sessions one inbox poll statement names.
const INBOX_POLL_BATCH: usize = 1000;

impl Backend for PgBackend {
    fn describe(&self) -> String {
        self.inner.location.clone()
    }

    /// Reads seq 1 alone.
    fn header(&self, id: &str) -> Result<SessionStart, StoreError> {
        let inner = self.inner.clone();
        let sid = id.to_string();
        let rows = self.inner.call(async move {
            let rows = inner.load_range(&sid, 1, 1).await?;
            if rows.is_empty() && !inner.exists(&sid).await? {
                return Err(StoreError::NotFound(sid));
            }
            Ok(rows)
        })?;
        let raw = decode_rows(&self.describe_session(id), rows)?;
        match raw.events.into_iter().next().map(|e| e.kind) {
            Some(EventKind::SessionStart(h)) => Ok(h),
            _ => Err(StoreError::MissingHeader { location: self.describe_session(id) }),
        }
    }

    fn create(&self, id: &str, _options: &StoreOptions) -> Result<Box<dyn Writer>, StoreError> {
        let inner = self.inner.clone();
        let sid = id.to_string();
        let token = self.inner.call(async move {
            inner
                .retry_read("creating a session", || async {
                    let c = inner.client().await?;
                    let n = c
                        .execute(
                            "INSERT INTO wharf_sessions (id, lease_token, lease_holder, lease_expires)
                             VALUES ($1, 1, $2, now() + $3::bigint * interval '1 millisecond')
                             ON CONFLICT (id) DO NOTHING",
                            &[&sid, &inner.options.holder, &inner.ttl_ms()],
                        )
                        .await
                        .map_err(|e| pg_fail("creating a session", e))?;
                    if n == 0 {
                        return Err(Fail::Fatal(StoreError::AlreadyExists(sid.clone())));
                    }
                    Ok(1i64)
                })
                .await
        })?;
        Ok(Box::new(PgWriter::start(self.inner.clone(), id.to_string(), token, 0)))
    }

    fn discard(&self, id: &str) {
        let inner = self.inner.clone();
        let sid = id.to_string();
        let r = self.inner.call(async move {
            inner
                .retry_read("removing a failed session", || async {
                    let c = inner.client().await?;
                    c.execute("DELETE FROM wharf_sessions WHERE id = $1 AND last_seq = 0", &[&sid])
                        .await
                        .map_err(|e| pg_fail("removing a failed session", e))?;
                    Ok(())
                })
                .await
        });
        if let Err(e) = r {
            tracing::warn!(error = %e, session = id, "could not remove a half-created session");
        }
    }

    fn open(&self, id: &str, _options: &StoreOptions) -> Result<(Box<dyn Writer>, RawLog), StoreError> {
        let inner = self.inner.clone();
        let sid = id.to_string();
        let (token, last_seq) = self.inner.call(async move {
            let got = inner
                .retry_read("taking the lease", || async {
                    let c = inner.client().await?;
                    let row = c
                        .query_opt(
                            "UPDATE wharf_sessions
                                SET lease_token = lease_token + 1, lease_holder = $2,
                                    lease_expires = now() + $3::bigint * interval '1 millisecond'
                              WHERE id = $1 AND (lease_expires IS NULL OR lease_expires <= now())
                          RETURNING lease_token, last_seq",
                            &[&sid, &inner.options.holder, &inner.ttl_ms()],
                        )
                        .await
                        .map_err(|e| pg_fail("taking the lease", e))?;
                    Ok(row.map(|r| (r.get::<_, i64>(0), r.get::<_, i64>(1))))
                })
                .await?;
            match got {
                Some(t) => Ok(t),
                None => match inner.lease_info(&sid).await? {
                    None => Err(StoreError::NotFound(sid.clone())),
                    Some(l) => Err(StoreError::Leased {
                        id: sid.clone(),
                        holder: l.holder,
                        expires_in_ms: l.expires_in_ms.unwrap_or(0),
                    }),
                },
            }
        })?;
        let mut writer = PgWriter::start(self.inner.clone(), id.to_string(), token, last_seq);
        let raw = decode_rows(&self.describe_session(id), writer.read_rows(1)?)?;
        writer.ack_logged_inputs(&raw.events);
        Ok((Box::new(writer), raw))
    }

    fn load(&self, id: &str) -> Result<RawLog, StoreError> {
        let inner = self.inner.clone();
        let sid = id.to_string();
        let rows = self.inner.call(async move {
            let rows = inner.load(&sid, 1).await?;
            if rows.is_empty() && !inner.exists(&sid).await? {
                return Err(StoreError::NotFound(sid));
            }
            Ok(rows)
        })?;
        decode_rows(&self.describe_session(id), rows)
    }

    fn list(&self) -> Result<Vec<SessionSummary>, StoreError> {
        let inner = self.inner.clone();
        let rows = self.inner.call(async move {
            inner
                .retry_read("listing sessions", || async {
                    let c = inner.client().await?;
                    let rows = c
                        .query(
                            "SELECT s.id, e.body, s.title, s.bytes FROM wharf_sessions s
                               JOIN wharf_events e ON e.session_id = s.id AND e.seq = 1",
                            &[],
                        )
                        .await
                        .map_err(|e| pg_fail("listing sessions", e))?;
                    Ok(rows
                        .iter()
                        .map(|r| {
                            (
                                r.get::<_, String>(0),
                                r.get::<_, String>(1),
                                r.get::<_, Option<String>>(2),
                                r.get::<_, i64>(3),
                            )
                        })
                        .collect::<Vec<_>>())
                })
                .await
        })?;
        let mut out = Vec::with_capacity(rows.len());
        for (id, body, title, bytes) in rows {
            match Event::decode(&body).map(|e| e.kind) {
                Ok(EventKind::SessionStart(header)) => out.push(SessionSummary {
                    location: self.describe_session(&id),
                    id,
                    header,
                    title,
                    bytes: u64::try_from(bytes).unwrap_or(0),
                }),
                _ => tracing::warn!(session = %id, "skipping a session without a readable header"),
            }
        }
        Ok(out)
    }

    fn exists(&self, id: &str) -> Result<bool, StoreError> {
        let inner = self.inner.clone();
        let sid = id.to_string();
        self.inner.call(async move { inner.exists(&sid).await })
    }

    fn lease(&self, id: &str) -> Result<Option<LeaseInfo>, StoreError> {
        let inner = self.inner.clone();
        let sid = id.to_string();
        self.inner.call(async move { inner.lease_info(&sid).await })
    }

    fn push_input(&self, id: &str, kind: InboxKind, text: &str) -> Result<String, StoreError> {
        let inner = self.inner.clone();
        let sid = id.to_string();
        let text = text.to_string();
        let kind = kind_name(kind).to_string();
        self.inner.call(async move {
            let got = inner
                .retry_read("storing input", || async {
                    let c = inner.client().await?;
                    let row = c
                        .query_opt(
                            "WITH i AS (INSERT INTO wharf_inbox (session_id, kind, body)
                                        SELECT $1, $2, $3 WHERE EXISTS (SELECT 1 FROM wharf_sessions WHERE id = $1)
                                        RETURNING id)
                             SELECT id, pg_notify('wharf_inbox', $1) FROM i",
                            &[&sid, &kind, &text],
                        )
                        .await
                        .map_err(|e| pg_fail("storing input", e))?;
                    Ok(row.map(|r| r.get::<_, i64>(0)))
                })
                .await?;
            match got {
                Some(n) => Ok(input_id(n)),
                None => Err(StoreError::NotFound(sid)),
            }
        })
    }

    fn orphans(&self, limit: usize) -> Result<Vec<String>, StoreError> {
        let inner = self.inner.clone();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.inner.call(async move {
            inner
                .retry_read("looking for orphaned sessions", || async {
                    let c = inner.client().await?;
                    let rows = c
                        .query(
                            "SELECT s.id FROM wharf_sessions s
                              WHERE s.last_seq > 0
                                AND ((s.lease_expires IS NOT NULL AND s.lease_expires <= now())
                                  OR (s.lease_expires IS NULL AND EXISTS (
                                        SELECT 1 FROM wharf_inbox i
                                         WHERE i.session_id = s.id AND i.delivered IS NULL)))
                              ORDER BY random()
                              LIMIT $1",
                            &[&limit],
                        )
                        .await
                        .map_err(|e| pg_fail("looking for orphaned sessions", e))?;
                    Ok(rows.iter().map(|r| r.get::<_, String>(0)).collect())
                })
                .await
        })
    }

    fn watch(&self, id: &str, from_seq: u64) -> Result<mpsc::UnboundedReceiver<Event>, StoreError> {
        if !self.exists(id)? {
            return Err(StoreError::NotFound(id.to_string()));
        }
        self.inner.ensure_listener();
        let (tx, rx) = mpsc::unbounded_channel();
        let mut wake = self.inner.register(false, id);
        let weak = Arc::downgrade(&self.inner);
        let sid = id.to_string();
        let location = self.describe_session(id);
        let key = format!("{}/{}", self.inner.watcher, self.inner.watches.fetch_add(1, Ordering::Relaxed));
        self.inner.handle.spawn(async move {
            // Removed from `wharf_watches` however the watch ends.
            let _row = WatchRow { inner: weak.clone(), id: sid.clone(), key: key.clone() };
            let mut registered: Option<std::time::Instant> = None;
            let mut next = i64::try_from(from_seq.max(1)).unwrap_or(i64::MAX);
            loop {
                let Some(inner) = weak.upgrade() else { return };
                // Before the read: an append committed after it is announced.
                if registered.is_none_or(|t| t.elapsed() >= WATCH_RENEW) {
                    match inner.register_watch(&sid, &key).await {
                        Ok(()) => registered = Some(std::time::Instant::now()),
                        // Unannounced, the watch still catches up at each poll.
                        Err(Fail::Transient(e)) => tracing::debug!(error = %e, "registering a watch"),
                        Err(Fail::Fatal(e)) => tracing::warn!(error = %e, "registering a watch"),
                    }
                }
                match inner.load(&sid, next).await {
                    Ok(rows) => {
                        for (seq, body) in rows {
                            match Event::decode(&body) {
                                Ok(ev) => {
                                    if tx.send(ev).is_err() {
                                        return;
                                    }
                                    next = i64::try_from(seq).unwrap_or(i64::MAX) + 1;
                                }
                                Err(e) => {
                                    tracing::warn!(session = %location, seq, error = %e, "watch stopped at an unreadable event");
                                    return;
                                }
                            }
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "watching a session"),
                }
                drop(inner);
                tokio::select! {
                    _ = wake.recv() => { while wake.try_recv().is_ok() {} }
                    _ = tokio::time::sleep(POLL) => {}
                    _ = tx.closed() => return,
                }
            }
        });
        Ok(rx)
    }
}

/// A watch's row in `wharf_watches`, deleted when the watch ends.
struct WatchRow {
    inner: std::sync::Weak<Inner>,
    id: String,
    key: String,
}

impl Drop for WatchRow {
    fn drop(&mut self) {
        let Some(inner) = self.inner.upgrade() else { return };
        let (id, key) = (std::mem::take(&mut self.id), std::mem::take(&mut self.key));
        let i2 = inner.clone();
        // Best effort: a row left behind expires after WATCH_TTL.
        inner.handle.spawn(async move {
            let what = "ending a watch";
            let r = i2
                .on_connection(what, i2.options.attempt_timeout, async |c| {
                    c.execute("DELETE FROM wharf_watches WHERE session_id = $1 AND watcher = $2", &[&id, &key])
                        .await
                        .map_err(|e| pg_fail(what, e))?;
                    Ok(())
                })
                .await;
            match r {
                Ok(()) => {}
                Err(Fail::Transient(e)) => tracing::debug!(error = %e, "ending a watch"),
                Err(Fail::Fatal(e)) => tracing::debug!(error = %e, "ending a watch"),
            }
        });
    }
}

fn kind_name(k: InboxKind) -> &'static str {
    match k {
        InboxKind::Followup => "followup",
        InboxKind::Steer => "steer",
        InboxKind::Inject => "inject",
    }
}

fn kind_of(s: &str) -> InboxKind {
    match s {
        "steer" => InboxKind::Steer,
        "inject" => InboxKind::Inject,
        _ => InboxKind::Followup,
    }
}

/// Inbox item ids of this store: `pg-N`.
fn input_id(n: i64) -> String {
    format!("pg-{n}")
}

fn parse_input_id(id: &str) -> Option<i64> {
    id.strip_prefix("pg-").and_then(|n| n.parse().ok())
}

// ---------------------------------------------------------------------------
// Group commit.

/// One writer's batch of events, as a group commit sends it.
struct AppendBatch {
    id: String,
    token: i64,
    first: i64,
    bodies: Vec<String>,
    /// The batch's size in JSONL (each line plus its newline).
    bytes: i64,
    title: Option<String>,
    /// Inbox rows the batch logs: marked delivered by its transaction.
    ack: Vec<i64>,
}

/// A batch waiting in the group-commit queue, and where its status goes.
struct AppendReq {
    batch: Arc<AppendBatch>,
    reply: oneshot::Sender<Result<String, GroupFail>>,
}

/// Why a whole group commit failed (told to each of its writers, whose own
/// retry loop decides whether to send the batch again).
#[derive(Clone)]
enum GroupFail {
    Transient(String),
    Fatal(String),
}

impl From<Fail> for GroupFail {
    fn from(f: Fail) -> Self {
        match f {
            Fail::Transient(d) => GroupFail::Transient(d),
            Fail::Fatal(StoreError::Unavailable { detail, .. }) => GroupFail::Fatal(detail),
            Fail::Fatal(e) => GroupFail::Fatal(e.to_string()),
        }
    }
}

impl From<GroupFail> for Fail {
    fn from(f: GroupFail) -> Self {
        match f {
            GroupFail::Transient(d) => Fail::Transient(d),
            GroupFail::Fatal(detail) => Fail::Fatal(StoreError::Unavailable { location: String::new(), detail }),
        }
    }
}

/// The queue the group-commit workers share.
struct AppendQueue {
    rx: mpsc::UnboundedReceiver<AppendReq>,
    /// Taken from `rx` but left for the next group: a second batch of a
    /// session already in the group, or more than the group could carry.
    deferred: Vec<AppendReq>,
    /// The groups in the database now.
    flight: Arc<Flight>,
}

/// How many group commits are in the database, and a signal when one ends.
#[derive(Default)]
struct Flight {
    calls: std::sync::atomic::AtomicUsize,
    ended: tokio::sync::Notify,
}

/// One group commit in the database; counted down (and signalled) when
/// dropped, however the call ends.
struct InFlight(Arc<Flight>);

impl InFlight {
    fn start(flight: Arc<Flight>) -> InFlight {
        flight.calls.fetch_add(1, Ordering::SeqCst);
        InFlight(flight)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.calls.fetch_sub(1, Ordering::SeqCst);
        self.0.ended.notify_waiters();
    }
}

impl AppendQueue {
    /// Waits for the next append, then takes along everything queued, up
    /// to `max` batches and about [`APPEND_GROUP_BYTES`], at most one batch
    /// per session. `None` once the backend is gone.
    async fn next_group(&mut self, max: usize) -> Option<Vec<AppendReq>> {
        let mut group = Group { max: max.max(1), taken: Vec::new(), bytes: 0, later: Vec::new() };
        // Deferred batches first: they have waited longest.
        for r in std::mem::take(&mut self.deferred) {
            group.admit(r);
        }
        while group.taken.is_empty() {
            let r = self.rx.recv().await?;
            group.admit(r);
        }
        while !group.full() {
            match self.rx.try_recv() {
                Ok(r) => group.admit(r),
                Err(_) => break,
            }
        }
        // While another group is in the database, this one takes what
        // arrives until that call ends (at most GROUP_HOLD, so a call the
        // database leaves unanswered does not hold it up): the appends made
        // during one call go together in the next transaction instead of
        // one small transaction per arrival, which is most of the
        // database's cost per append.
        let until = tokio::time::Instant::now() + GROUP_HOLD;
        while !group.full() {
            let ended = self.flight.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self.flight.calls.load(Ordering::SeqCst) == 0 {
                break;
            }
            tokio::select! {
                r = self.rx.recv() => match r {
                    Some(r) => group.admit(r),
                    None => break,
                },
                _ = &mut ended => break,
                _ = tokio::time::sleep_until(until) => break,
            }
        }
        self.deferred = group.later;
        Some(group.taken)
    }
}

/// A group being assembled.
struct Group {
    max: usize,
    taken: Vec<AppendReq>,
    bytes: i64,
    later: Vec<AppendReq>,
}

impl Group {
    fn full(&self) -> bool {
        self.taken.len() >= self.max || self.bytes >= APPEND_GROUP_BYTES
    }

    fn admit(&mut self, r: AppendReq) {
        if r.reply.is_closed() {
            // Nobody waits for it (its caller is gone): the writer could not
            // learn that it was written, so it is not.
            return;
        }
        if self.full() || self.taken.iter().any(|g| g.batch.id == r.batch.id) {
            self.later.push(r);
        } else {
            self.bytes += r.batch.bytes;
            self.taken.push(r);
        }
    }
}

/// A group-commit worker: takes the queued appends together, commits them
/// with one `wharf_append_many` call and answers each writer with its own
/// status. Several run per backend, so one group is built while others are
/// in the database.
async fn append_worker(weak: std::sync::Weak<Inner>, queue: Arc<tokio::sync::Mutex<AppendQueue>>) {
    loop {
        let Some(max) = weak.upgrade().map(|i| i.options.append_group) else { return };
        let (group, _in_flight) = {
            let mut q = queue.lock().await;
            match q.next_group(max).await {
                // Counted before the queue is let go: the next worker holds
                // its group for this one.
                Some(g) => (g, InFlight::start(q.flight.clone())),
                None => return,
            }
        };
        let Some(inner) = weak.upgrade() else { return };
        inner.commit_group(group).await;
    }
}

impl Inner {
    /// One attempt at appending `batch` through the group commit: its
    /// status (`ok`, `fenced`, `missing`, `gap`, `diverged`).
    async fn append_grouped(&self, batch: Arc<AppendBatch>) -> Result<String, Fail> {
        let (reply, answer) = oneshot::channel();
        self.appends.send(AppendReq { batch, reply }).map_err(|_| {
            Fail::Fatal(self.err("the group-commit workers stopped (the database runtime shut down)".into()))
        })?;
        match answer.await {
            Ok(r) => r.map_err(Fail::from),
            Err(_) => Err(Fail::Fatal(
                self.err(
                    "the group-commit worker stopped before answering (it panicked or the database runtime shut down)"
                        .into(),
                ),
            )),
        }
    }

    /// Sends one group (one attempt, one transaction) and answers its
    /// writers; a failure of the call is every writer's.
    async fn commit_group(&self, group: Vec<AppendReq>) {
        let result = self.append_many(&group).await;
        match result {
            Ok(statuses) => {
                for (r, status) in group.into_iter().zip(statuses) {
                    let _ = r.reply.send(Ok(status));
                }
            }
            Err(f) => {
                let f = GroupFail::from(f);
                for r in group {
                    let _ = r.reply.send(Err(f.clone()));
                }
            }
        }
    }

    async fn append_many(&self, group: &[AppendReq]) -> Result<Vec<String>, Fail> {
        let what = "group commit";
        let mut ids = Vec::with_capacity(group.len());
        let mut tokens = Vec::with_capacity(group.len());
        let mut firsts = Vec::with_capacity(group.len());
        let mut counts = Vec::with_capacity(group.len());
        let mut bodies: Vec<&str> = Vec::new();
        let mut bytes = Vec::with_capacity(group.len());
        let mut titles = Vec::with_capacity(group.len());
        let mut ack_counts = Vec::with_capacity(group.len());
        let mut acks: Vec<i64> = Vec::new();
        for r in group {
            let b = &r.batch;
            ids.push(b.id.as_str());
            tokens.push(b.token);
            firsts.push(b.first);
            counts.push(i32::try_from(b.bodies.len()).unwrap_or(i32::MAX));
            bodies.extend(b.bodies.iter().map(String::as_str));
            bytes.push(b.bytes);
            titles.push(b.title.as_deref());
            ack_counts.push(i32::try_from(b.ack.len()).unwrap_or(i32::MAX));
            acks.extend_from_slice(&b.ack);
        }
        let c = self.bounded(what, self.client()).await?;
        let call = async {
            let stmt = c
                .prepare_cached("SELECT wharf_append_many($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)")
                .await
                .map_err(|e| pg_fail(what, e))?;
            c.query_one(
                &stmt,
                &[
                    &ids,
                    &tokens,
                    &firsts,
                    &counts,
                    &bodies,
                    &bytes,
                    &titles,
                    &ack_counts,
                    &acks,
                    &self.options.holder,
                    &self.ttl_ms(),
                    &self.options.durable_appends,
                ],
            )
            .await
            .map_err(|e| pg_fail(what, e))
        };
        let row = match tokio::time::timeout(self.options.attempt_timeout, call).await {
            Ok(r) => r?,
            Err(_) => {
                // Not back to the pool: its next statement would wait behind
                // the unanswered one. Dropped, the connection closes.
                drop(deadpool_postgres::Object::take(c));
                return Err(self.unanswered(what));
            }
        };
        let statuses: Vec<String> = row.try_get(0).map_err(|e| pg_fail(what, e))?;
        if statuses.len() != group.len() {
            return Err(Fail::Fatal(self.err(format!(
                "{what}: the database answered {} statuses for {} batches",
                statuses.len(),
                group.len()
            ))));
        }
        Ok(statuses)
    }
}

// ---------------------------------------------------------------------------
// The writer.

struct PgWriter {
    inner: Arc<Inner>,
    id: String,
    token: i64,
    sync: Arc<PgSyncer>,
    held: Arc<Held>,
    inputs_taken: bool,
    stop_inputs: Option<oneshot::Sender<()>>,
}

/// What a writer's background tasks share with it.
#[derive(Default)]
struct Held {
    /// Set (once) when the lease was found taken over: the input stream
    /// ends, so the owner learns it is no longer the owner.
    lost: tokio::sync::watch::Sender<bool>,
    /// Stored input handed to the owner and not yet logged, oldest first:
    /// `(row id, kind, text)`. The append that logs its `inbox/spliced`
    /// marks the row delivered in the same transaction (exactly once).
    outstanding: Mutex<Vec<(i64, InboxKind, String)>>,
}

impl Held {
    fn lose(&self) {
        self.lost.send_replace(true);
    }

    fn outstanding(&self) -> MutexGuard<'_, Vec<(i64, InboxKind, String)>> {
        self.outstanding.lock().unwrap_or_else(|e| e.into_inner())
    }
}

struct PgSyncer {
    inner: Arc<Inner>,
    id: String,
    token: i64,
    held: Arc<Held>,
}

impl Syncer for PgSyncer {
    fn sync(&self) -> Result<(), StoreError> {
        let inner = self.inner.clone();
        let (id, token) = (self.id.clone(), self.token);
        let held = self.held.clone();
        self.inner.call(async move {
            let started = std::time::Instant::now();
            let ok = inner.retry("syncing", || inner.renew(&id, token, true)).await?;
            if ok {
                inner.touch(&id, token, started);
                Ok(())
            } else {
                held.lose();
                Err(inner.fenced(&id, token).await)
            }
        })
    }
}

impl PgWriter {
    fn start(inner: Arc<Inner>, id: String, token: i64, _last_seq: i64) -> PgWriter {
        let held: Arc<Held> = Arc::default();
        // Opening took (or renewed) the lease just now.
        inner.lock_leases().insert(id.clone(), Lease { token, held: held.clone(), renewed: std::time::Instant::now() });
        inner.ensure_renewer();
        let sync = Arc::new(PgSyncer { inner: inner.clone(), id: id.clone(), token, held: held.clone() });
        PgWriter { inner, id, token, sync, held, inputs_taken: false, stop_inputs: None }
    }

    fn read_rows(&mut self, from_seq: u64) -> Result<Vec<(u64, String)>, StoreError> {
        let inner = self.inner.clone();
        let id = self.id.clone();
        let from = i64::try_from(from_seq).unwrap_or(i64::MAX);
        self.inner.call(async move { inner.load(&id, from).await })
    }

    /// Marks delivered the stored inputs that the log already shows as
    /// queued (`inbox/spliced` with a `pg-N` id): a previous owner logged
    /// them and died before acknowledging.
    fn ack_logged_inputs(&mut self, events: &[Event]) {
        let ids: Vec<i64> = events
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::InboxSpliced(s) => parse_input_id(&s.id),
                _ => None,
            })
            .collect();
        if ids.is_empty() {
            return;
        }
        let inner = self.inner.clone();
        let sid = self.id.clone();
        let r = self.inner.call(async move {
            inner
                .retry("acknowledging input", || async {
                    let c = inner.client().await?;
                    c.execute(
                        "UPDATE wharf_inbox SET delivered = now() WHERE session_id = $1 AND id = ANY($2) AND delivered IS NULL",
                        &[&sid, &ids],
                    )
                    .await
                    .map_err(|e| pg_fail("acknowledging input", e))?;
                    Ok(())
                })
                .await
        });
        if let Err(e) = r {
            tracing::warn!(error = %e, "could not acknowledge logged input");
        }
    }
}

impl PgWriter {
    /// The append of `batch` as a future for the backend's thread: handed
    /// to the group commit and retried from here (each writer keeps its own
    /// retry budget); on success the lease counts as renewed and the stored
    /// input it logs as acknowledged.
    fn append_future(
        &mut self,
        batch: &[Encoded<'_>],
    ) -> Option<impl Future<Output = Result<(), StoreError>> + Send + 'static> {
        let first = batch.first()?;
        let first_seq = i64::try_from(first.event.seq).unwrap_or(i64::MAX);
        let bodies: Vec<String> = batch.iter().map(|e| e.line.to_string()).collect();
        let bytes: i64 = batch.iter().map(|e| e.line.len() as i64 + 1).sum();
        let title = batch.iter().filter(|e| e.event.seq <= TITLE_SCAN).find_map(|e| summary_title(e.event));
        // Stored input this batch logs: acknowledged by the same transaction.
        let ack: Vec<i64> = {
            let out = self.held.outstanding();
            let mut taken = Vec::new();
            for e in batch {
                if let EventKind::InboxSpliced(sp) = &e.event.kind
                    && sp.op == InboxOp::Added
                    && let Some((n, _, _)) =
                        out.iter().find(|(n, k, t)| *k == sp.kind && *t == sp.text && !taken.contains(n))
                {
                    taken.push(*n);
                }
            }
            taken
        };
        let inner = self.inner.clone();
        let (id, token) = (self.id.clone(), self.token);
        let what = format!("appending event {} ({})", first.event.seq, first.event.type_name());
        let held = self.held.clone();
        let acked = ack.clone();
        let batch = Arc::new(AppendBatch { id: id.clone(), token, first: first_seq, bodies, bytes, title, ack });
        let started = std::time::Instant::now();
        Some(async move {
            let status = inner.retry(&what, || inner.append_grouped(batch.clone())).await?;
            match status.as_str() {
                "ok" => {
                    // The append renewed the lease too.
                    inner.touch(&id, token, started);
                    if !acked.is_empty() {
                        held.outstanding().retain(|(n, _, _)| !acked.contains(n));
                    }
                    Ok(())
                }
                "fenced" => {
                    held.lose();
                    Err(inner.fenced(&id, token).await)
                }
                "missing" => Err(StoreError::NotFound(id)),
                "gap" => Err(StoreError::Poisoned {
                    id,
                    cause: format!(
                        "the database does not end at seq {} (events acknowledged earlier are missing)",
                        first_seq - 1
                    ),
                }),
                _ => Err(StoreError::Poisoned {
                    id,
                    cause: format!("other events are already stored at seq {first_seq}"),
                }),
            }
        })
    }
}

/// Calls an append's `done` exactly once: with the append's outcome, or,
/// when the backend's thread drops the append unfinished (it stopped),
/// with that.
struct DoneOnce {
    done: Option<AppendDone>,
    location: String,
}

impl DoneOnce {
    fn finish(mut self, r: Result<(), StoreError>) {
        if let Some(done) = self.done.take() {
            done(r);
        }
    }
}

impl Drop for DoneOnce {
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            // Maybe dropped inside `start_append` (a stopped runtime drops
            // a spawned task at once), where the caller still holds what
            // `done` takes: answer from another thread.
            let err = unavailable(&self.location, "the database thread stopped".into());
            let _ = std::thread::Builder::new().name("wharf-pg-done".into()).spawn(move || done(Err(err)));
        }
    }
}

impl Writer for PgWriter {
    fn append(&mut self, batch: &[Encoded<'_>]) -> Result<(), StoreError> {
        match self.append_future(batch) {
            Some(fut) => self.inner.call(fut),
            None => Ok(()),
        }
    }

    /// The append runs on the backend's thread; the agent's worker is not
    /// held for the round trip (no `block_in_place`).
    fn start_append(&mut self, batch: &[Encoded<'_>], done: AppendDone) -> Result<(), AppendDone> {
        let Some(fut) = self.append_future(batch) else { return Err(done) };
        // The caller's request budget (if any) goes along, as in `call`.
        let clock = wharf_core::store::retry_clock();
        let once = DoneOnce { done: Some(done), location: self.inner.location.clone() };
        self.inner.handle.spawn(async move {
            let r = match clock {
                Some(c) => c.scope(fut).await,
                None => fut.await,
            };
            once.finish(r);
        });
        Ok(())
    }

    fn syncer(&self) -> Arc<dyn Syncer> {
        self.sync.clone()
    }

    fn read_from(&mut self, from_seq: u64) -> Result<Vec<Event>, StoreError> {
        let rows = self.read_rows(from_seq)?;
        let mut out = Vec::with_capacity(rows.len());
        for (seq, body) in rows {
            let ev = Event::decode(&body).map_err(|e| StoreError::Corrupt {
                location: format!("{}#{}", self.inner.location, self.id),
                line: seq,
                detail: e.to_string(),
            })?;
            out.push(ev);
        }
        Ok(out)
    }

    fn take_inputs(&mut self) -> Option<mpsc::UnboundedReceiver<RemoteInput>> {
        if self.inputs_taken {
            return None;
        }
        self.inputs_taken = true;
        self.inner.ensure_listener();
        self.inner.ensure_inbox_poll();
        let (tx, rx) = mpsc::unbounded_channel();
        let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
        self.stop_inputs = Some(stop_tx);
        let mut wake = self.inner.register(true, &self.id);
        let weak = Arc::downgrade(&self.inner);
        let sid = self.id.clone();
        let held = self.held.clone();
        let mut lost = held.lost.subscribe();
        let fut = async move {
            let mut after = 0i64;
            loop {
                if *lost.borrow_and_update() {
                    // Ending the stream tells the owner it no longer is.
                    return;
                }
                let Some(inner) = weak.upgrade() else { return };
                // Boxed: the query's state lives only while it runs, not in
                // every loaded session's parked task (~4 KiB each).
                let rows = Box::pin(inner.retry_read("reading input", || async {
                    let c = inner.client().await?;
                    let rows = c
                        .query(
                            "SELECT id, kind, body FROM wharf_inbox
                                  WHERE session_id = $1 AND delivered IS NULL AND id > $2 ORDER BY id",
                            &[&sid, &after],
                        )
                        .await
                        .map_err(|e| pg_fail("reading input", e))?;
                    Ok(rows
                        .iter()
                        .map(|r| (r.get::<_, i64>(0), r.get::<_, String>(1), r.get::<_, String>(2)))
                        .collect::<Vec<_>>())
                }))
                .await;
                drop(inner);
                match rows {
                    Ok(rows) => {
                        for (n, kind, text) in rows {
                            after = after.max(n);
                            let kind = kind_of(&kind);
                            held.outstanding().push((n, kind, text.clone()));
                            if tx.send(RemoteInput { id: input_id(n), kind, text }).is_err() {
                                return;
                            }
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "reading stored input"),
                }
                // Woken by a notification, or by the backend's inbox poll
                // (`ensure_inbox_poll`) when one was missed.
                tokio::select! {
                    _ = wake.recv() => { while wake.try_recv().is_ok() {} }
                    _ = lost.changed() => {}
                    _ = &mut stop_rx => return,
                    _ = tx.closed() => return,
                }
            }
        };
        self.inner.handle.spawn(fut);
        Some(rx)
    }

    fn ack_input(&mut self, id: &str) -> Result<(), StoreError> {
        let Some(n) = parse_input_id(id) else { return Ok(()) };
        self.held.outstanding().retain(|(m, _, _)| *m != n);
        let inner = self.inner.clone();
        let sid = self.id.clone();
        self.inner.call(async move {
            inner
                .retry("acknowledging input", || async {
                    let c = inner.client().await?;
                    c.execute(
                        "UPDATE wharf_inbox SET delivered = now() WHERE session_id = $1 AND id = $2",
                        &[&sid, &n],
                    )
                    .await
                    .map_err(|e| pg_fail("acknowledging input", e))?;
                    Ok(())
                })
                .await
        })
    }
}

impl Drop for PgWriter {
    fn drop(&mut self) {
        {
            let mut leases = self.inner.lock_leases();
            if leases.get(&self.id).is_some_and(|l| l.token == self.token) {
                leases.remove(&self.id);
            }
        }
        if let Some(s) = self.stop_inputs.take() {
            let _ = s.send(());
        }
        // Release the lease (a synchronous commit: also the final sync), so
        // another host can open the session at once.
        let inner = self.inner.clone();
        let (id, token) = (self.id.clone(), self.token);
        let r = self.inner.call(async move {
            let attempt = async {
                let c = inner.client().await.map_err(|_| ())?;
                c.execute(
                    "UPDATE wharf_sessions SET lease_expires = NULL WHERE id = $1 AND lease_token = $2",
                    &[&id, &token],
                )
                .await
                .map_err(|_| ())
            };
            match tokio::time::timeout(Duration::from_secs(2), attempt).await {
                Ok(Ok(_)) => Ok(()),
                _ => Err(StoreError::Unavailable { location: String::new(), detail: "releasing the lease".into() }),
            }
        });
        if r.is_err() {
            tracing::warn!(session = %self.id, "could not release the lease; it expires on its own");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notifications_name_one_or_many_sessions() {
        // An older host's `wharf_append`, `wharf_inbox`, `wharf_append_many`.
        assert_eq!(notified_ids("s-1 12").collect::<Vec<_>>(), ["s-1"]);
        assert_eq!(notified_ids("s-1").collect::<Vec<_>>(), ["s-1"]);
        assert_eq!(notified_ids("a 3\nb.c 14\nd_e 1").collect::<Vec<_>>(), ["a", "b.c", "d_e"]);
        assert_eq!(notified_ids("").count(), 0);
    }
}
