//! Per-call store state: the WASI context built from the plugin's effective
//! grants, resource limits, and the host imports (`log`, `config`, `kv`,
//! `process`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView};

use crate::bindings::wharf::plugin as wit;
use crate::grants::{Access, EffectiveGrant};

/// Bytes of guest stdout/stderr kept per call (the rest is dropped).
const STDIO_CAP: usize = 64 << 10;
/// Log lines a plugin may write per call.
const LOG_LINES_PER_CALL: usize = 1000;
/// Longest log line kept, bytes.
const LOG_LINE_CAP: usize = 16 << 10;
/// Bytes of log a plugin may write per call (after escaping).
const LOG_BYTES_PER_CALL: usize = 256 << 10;
/// Per-plugin key-value quota, bytes: keys, values and [`KV_ENTRY_OVERHEAD`]
/// per entry.
pub const KV_QUOTA: usize = 16 << 20;
/// Bytes each key-value entry is charged beyond its key and value (what the
/// map spends on it: the key and value headers, allocations and tree node).
pub const KV_ENTRY_OVERHEAD: usize = 128;
/// Most host resources (files, streams, HTTP fields, …) one store may hold
/// at once: each costs host memory, so a component must not create millions
/// (wasmtime's default is 1 000 000).
pub const MAX_RESOURCES: usize = 16_384;
/// Most key-value entries per plugin.
pub const KV_MAX_ENTRIES: usize = 65_536;
/// Longest key, bytes.
pub const KV_MAX_KEY: usize = 1024;

/// Why a call hit a limit (carried as the error out of the call).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum LimitError {
    /// The call ran past its deadline.
    #[error("call exceeded its time limit of {0} ms")]
    Timeout(u64),
    /// The guest tried to grow memory past the limit.
    #[error("memory limit of {0} MiB exceeded")]
    Memory(u32),
    /// The guest tried to grow a table past the limit.
    #[error("table limit of {0} elements exceeded")]
    Table(usize),
}

/// State shared by every call of one plugin id (across versions).
pub struct PluginShared {
    /// Plugin id.
    pub id: String,
    /// The plugin's config table as JSON.
    pub config: serde_json::Value,
    /// Key-value store.
    pub kv: KvStore,
    /// A dev build's source snapshot, preopened read-only at
    /// [`crate::dev::GUEST_DIR`] in every sandbox (see [`crate::dev`]).
    pub dev_snapshot: Option<std::path::PathBuf>,
}

/// A small in-memory key-value store with a byte quota.
#[derive(Default)]
pub struct KvStore {
    map: Mutex<BTreeMap<String, Vec<u8>>>,
    bytes: AtomicUsize,
}

impl KvStore {
    fn get(&self, key: &str) -> Option<Vec<u8>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).get(key).cloned()
    }

    fn set(&self, key: String, value: Vec<u8>) -> Result<(), String> {
        if key.len() > KV_MAX_KEY {
            return Err(format!("a key holds at most {KV_MAX_KEY} bytes, got {}", key.len()));
        }
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let old = map.get(&key).map(|v| v.len() + key.len() + KV_ENTRY_OVERHEAD);
        if old.is_none() && map.len() >= KV_MAX_ENTRIES {
            return Err(format!("key-value store is full: at most {KV_MAX_ENTRIES} entries"));
        }
        let new = value.len() + key.len() + KV_ENTRY_OVERHEAD;
        let total = self.bytes.load(Ordering::Relaxed) - old.unwrap_or(0) + new;
        if total > KV_QUOTA {
            return Err(format!(
                "key-value quota of {KV_QUOTA} bytes exceeded (keys, values and {KV_ENTRY_OVERHEAD} bytes per entry)"
            ));
        }
        self.bytes.store(total, Ordering::Relaxed);
        map.insert(key, value);
        Ok(())
    }

    fn delete(&self, key: &str) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = map.remove(key) {
            self.bytes.fetch_sub(v.len() + key.len() + KV_ENTRY_OVERHEAD, Ordering::Relaxed);
        }
    }

    fn keys(&self, prefix: &str) -> Vec<String> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.range(prefix.to_string()..).take_while(|(k, _)| k.starts_with(prefix)).map(|(k, _)| k.clone()).collect()
    }
}

/// See [`HttpPolicy::p2_outgoing_body_buffer_chunks`] (wasmtime's default is 1).
const OUTGOING_BODY_BUFFER_CHUNKS: usize = 4;

/// Outbound HTTP hooks enforcing the host allowlist and, through
/// [`crate::net::admit`] and [`crate::net::resolve_public`], the
/// private-address rule (for `https` by name, when a connection is opened).
pub struct HttpPolicy {
    hosts: Arc<Vec<String>>,
    plugin: Arc<str>,
    private_network: bool,
}

impl WasiHttpHooks for HttpPolicy {
    /// Chunks (of up to 1 MiB each) a request body may have in flight: a
    /// long session's request (megabytes) is handed over in a few writes
    /// without the guest waiting on the connection between them. Bounded:
    /// at most this many chunks per request are buffered.
    fn p2_outgoing_body_buffer_chunks(&mut self) -> usize {
        OUTGOING_BODY_BUFFER_CHUNKS
    }

    fn send_request(
        &mut self,
        mut request: http::Request<wasmtime_wasi_http::WasiBody>,
        options: Option<wasmtime_wasi_http::RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
    ) -> Box<
        dyn Future<
                Output = wasmtime_wasi_http::Result<(
                    http::Response<wasmtime_wasi_http::WasiBody>,
                    Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
                )>,
            > + Send,
    > {
        let _ = fut;
        let hosts = self.hosts.clone();
        let plugin = self.plugin.clone();
        let private_network = self.private_network;
        Box::new(async move {
            let uri = request.uri();
            let host = uri.host().unwrap_or("").trim_start_matches('[').trim_end_matches(']').to_string();
            let https = uri.scheme_str() == Some("https");
            let port = uri.port_u16().or(match uri.scheme_str() {
                Some("http") => Some(80),
                Some("https") => Some(443),
                _ => None,
            });
            let deny = |d: crate::net::Denial| {
                tracing::warn!(plugin = %plugin, "denied outbound HTTP request: {d}");
                d.code()
            };
            let Some(port) = port else { return Err(deny(crate::net::Denial::BadUri(uri.to_string()))) };
            let mut check = None;
            if crate::net::admit(&hosts, private_network, &host, port).map_err(deny)? {
                if https && host.parse::<std::net::IpAddr>().is_err() {
                    // Checked when a connection is opened (a pooled one was).
                    check = Some(crate::net::ConnectCheck { host, port });
                } else {
                    let addr = crate::net::resolve_public(&host, port).await.map_err(deny)?;
                    // Plain HTTP connects to the vetted address (the Host
                    // header keeps the name); HTTPS keeps the name for TLS,
                    // see crate::net.
                    if !https {
                        match crate::net::pinned_uri(request.uri(), addr) {
                            Some(u) => *request.uri_mut() = u,
                            None => return Err(wasmtime_wasi_http::Error::HttpRequestUriInvalid),
                        }
                    }
                }
            }
            // Pooled keep-alive connections per plugin and destination
            // (crate::net::send_pooled); the checks above ran for this request.
            crate::net::send_pooled(&plugin, request, options, check.as_ref()).await
        })
    }
}

/// Resource limits of one store.
pub struct Limits {
    memory_bytes: usize,
    memory_mb: u32,
    table_elements: usize,
    /// Set when a limit was hit, so a later trap can be attributed to it.
    pub hit: Option<LimitError>,
}

impl wasmtime::ResourceLimiter for Limits {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.memory_bytes {
            let e = LimitError::Memory(self.memory_mb);
            self.hit = Some(e.clone());
            return Err(e.into());
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.table_elements {
            let e = LimitError::Table(self.table_elements);
            self.hit = Some(e.clone());
            return Err(e.into());
        }
        Ok(true)
    }

    fn instances(&self) -> usize {
        64
    }

    fn tables(&self) -> usize {
        64
    }

    fn memories(&self) -> usize {
        16
    }
}

/// What a store built now binds from the host: the identity of each granted
/// directory and the value of each granted variable. A sandbox prepared
/// ahead of its call serves the call only if these still match then, so the
/// call sees what a sandbox built at call time would (a directory replaced
/// in between is the new one, not the old one still open).
#[derive(Debug, PartialEq, Eq)]
pub struct HostBinding {
    dirs: Vec<(u64, u64)>,
    env: Vec<Option<String>>,
}

impl HostBinding {
    /// The binding as of now (one `stat` per directory), or `None` where a
    /// directory's identity cannot be told. Taken before the store is built,
    /// so a change racing the build shows as a mismatch.
    pub fn now(effective: &EffectiveGrant) -> Option<Self> {
        Some(Self {
            dirs: effective.dirs.iter().map(|d| dir_identity(&d.path)).collect::<Option<_>>()?,
            // The granted variables' values (a grant names them; the
            // values are the host's, read as the grant allows).
            env: effective.env.iter().map(|n| std::env::var(n).ok()).collect(),
        })
    }
}

/// A directory's (device, inode).
#[cfg(unix)]
fn dir_identity(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(not(unix))]
fn dir_identity(_path: &std::path::Path) -> Option<(u64, u64)> {
    None
}

/// The data of one `Store`.
pub struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    http: WasiHttpCtx,
    http_policy: HttpPolicy,
    /// Limits (the store's limiter).
    pub limits: Limits,
    shared: Arc<PluginShared>,
    pub(crate) effective: Arc<EffectiveGrant>,
    log_lines: usize,
    stdout: MemoryOutputPipe,
    stderr: MemoryOutputPipe,
    /// When the current call must end.
    pub deadline: Instant,
    /// The current call's time limit, ms (for the error message).
    pub timeout_ms: u64,
    /// The session behind the current call (tool calls, compactions and
    /// policies that may ask the user).
    pub services: Option<Arc<dyn wharf_core::plugin::SessionServices>>,
    /// The current call is a policy's evaluation: a question's wait ends
    /// shortly before the deadline with `cancel`, so the policy still
    /// decides (a tool's question ends the call at its deadline instead).
    pub(crate) policy_call: bool,
    /// The current call's clock and random seed, when durable.
    determinism: DeterminismSlot,
    /// `determinism` holds a durable call's clock and seed.
    determined: bool,
    /// The store's hostcall fuel: bytes one lift out of the guest may copy
    /// (for the `OUTPUT_LIMIT` message).
    pub(crate) hostcall_fuel: usize,
    log_bytes: usize,
    log_dropped: bool,
    /// Bytes of stdout and stderr already forwarded to the host log.
    stdio_flushed: [usize; 2],
    /// Whether every file operation runs on the blocking pool (a granted
    /// directory is not on a local filesystem).
    fs_on_pool: bool,
}

impl HostState {
    /// Builds the state for one call (or one warm instance) from the
    /// plugin's effective grants. Nothing is inherited from the host.
    pub fn new(shared: Arc<PluginShared>, effective: Arc<EffectiveGrant>) -> anyhow::Result<Self> {
        let mut b = WasiCtxBuilder::new();
        let stdout = MemoryOutputPipe::new(STDIO_CAP);
        let stderr = MemoryOutputPipe::new(STDIO_CAP);
        b.stdout(stdout.clone()).stderr(stderr.clone());
        b.allow_tcp(false).allow_udp(false).allow_ip_name_lookup(false);
        // File operations run on the calling thread instead of a hop to
        // tokio's blocking pool and back for each (open, stat, read …): a
        // tool's reads are small local I/O, and the hops were most of an
        // `fs` call's wall time (perf, issue 18). Only what cannot block:
        // `open-at` gives FIFOs and devices handles whose I/O runs on the
        // pool (crate::fs_guard), and a granted directory on a network or
        // FUSE filesystem puts the whole store's file I/O there, where the
        // call's deadline still fires while an operation waits.
        let fs_on_pool = effective.dirs.iter().any(|d| !crate::fs_guard::is_local_fs(&d.path));
        b.allow_blocking_current_thread(!fs_on_pool);
        // A granted variable reaches the guest with the host's value: the
        // runtime doing what the profile allows, not an option of its own.
        for name in &effective.env {
            if let Ok(v) = std::env::var(name) {
                b.env(name, v);
            }
        }
        for d in &effective.dirs {
            let perms = match d.access {
                Access::Ro => FsPerms::ReadOnly,
                Access::Rw => FsPerms::ReadWrite,
            };
            let guest = d.path.to_string_lossy();
            b.preopened_dir(&d.path, &guest, perms)
                .map_err(|e| anyhow::anyhow!("cannot preopen {}: {e:#}", d.path.display()))?;
        }
        if let Some(snap) = &shared.dev_snapshot {
            b.preopened_dir(snap, crate::dev::GUEST_DIR, FsPerms::ReadOnly)
                .map_err(|e| anyhow::anyhow!("cannot preopen the dev source {}: {e:#}", snap.display()))?;
        }
        // The clock and random numbers a durable call's program sees come
        // from the call (`Determinism`): set per call, real otherwise.
        let determinism = DeterminismSlot::default();
        b.wall_clock(SwitchClock { slot: determinism.clone(), real: wasmtime_wasi::clocks::WallClock::new() });
        b.secure_random(SwitchRng { slot: determinism.clone(), real: wasmtime_wasi::random::thread_rng(), salt: 1 });
        b.insecure_random(SwitchRng { slot: determinism.clone(), real: wasmtime_wasi::random::thread_rng(), salt: 2 });
        let timeout_ms = effective.timeout_ms;
        Ok(Self {
            determinism,
            determined: false,
            wasi: b.build(),
            table: {
                let mut t = ResourceTable::new();
                t.set_max_capacity(MAX_RESOURCES);
                t
            },
            http: WasiHttpCtx::new(),
            http_policy: HttpPolicy {
                hosts: Arc::new(effective.hosts.clone()),
                plugin: shared.id.as_str().into(),
                private_network: effective.private_network,
            },
            limits: Limits {
                memory_bytes: (effective.memory_mb as usize) << 20,
                memory_mb: effective.memory_mb,
                table_elements: 1_000_000,
                hit: None,
            },
            shared,
            effective,
            log_lines: 0,
            stdout,
            stderr,
            deadline: Instant::now(),
            timeout_ms,
            services: None,
            policy_call: false,
            hostcall_fuel: 0,
            log_bytes: 0,
            log_dropped: false,
            stdio_flushed: [0; 2],
            fs_on_pool,
        })
    }

    /// The id of the plugin (row) this sandbox runs.
    pub fn plugin_id(&self) -> &str {
        &self.shared.id
    }

    /// Whether this sandbox runs a dev build (its source preopened).
    pub fn is_dev(&self) -> bool {
        self.shared.dev_snapshot.is_some()
    }

    /// What the guest wrote to stderr so far (at most 64 KiB).
    pub fn stderr_contents(&self) -> bytes::Bytes {
        self.stderr.contents()
    }

    /// Sets the session behind the current call (`None` after it), and
    /// with it the clock and random numbers of a durable call
    /// ([`wharf_core::plugin::SessionServices::determinism`]).
    pub fn set_services(&mut self, services: Option<Arc<dyn wharf_core::plugin::SessionServices>>) {
        let det = services.as_ref().and_then(|s| s.determinism());
        // Most calls are not durable: the slot is left alone (no lock on a
        // warm call's path) unless a durable call set it or sets it now.
        if det.is_some() || self.determined {
            self.determined = det.is_some();
            *self.determinism.0.lock().unwrap_or_else(|e| e.into_inner()) = det.map(|d| Determined {
                rng: [d.seed ^ 0x5851_f42d_4c95_7f2d, d.seed.rotate_left(17) ^ 0x1405_7b7e_f767_814f],
                clock_ms: d.clock_ms,
            });
        }
        self.services = services;
    }

    /// The guest's stdout (at most 64 KiB kept per call).
    pub fn stdout_pipe(&self) -> MemoryOutputPipe {
        self.stdout.clone()
    }

    /// Whether every file operation of this store runs on tokio's blocking
    /// pool rather than on the calling thread.
    pub fn fs_on_pool(&self) -> bool {
        self.fs_on_pool
    }

    /// Starts a new call: resets per-call budgets.
    pub fn begin_call(&mut self, timeout_ms: u64) {
        self.begin_call_until(timeout_ms, Instant::now() + std::time::Duration::from_millis(timeout_ms));
    }

    /// [`Self::begin_call`] with the deadline already taken (one clock read
    /// per call on the warm path).
    pub fn begin_call_until(&mut self, timeout_ms: u64, deadline: Instant) {
        self.log_lines = 0;
        self.log_bytes = 0;
        self.log_dropped = false;
        self.limits.hit = None;
        self.policy_call = false;
        self.timeout_ms = timeout_ms;
        self.deadline = deadline;
    }

    /// When the wall-clock limit around the current call fires: the
    /// deadline plus a grace, so the epoch deadline's precise error wins
    /// where guest code is running; the wall clock also bounds host calls
    /// (HTTP waits) that epochs cannot interrupt.
    pub fn wall_deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.deadline + std::time::Duration::from_millis(250))
    }

    /// Forwards what the guest printed to the host log (never to stdout,
    /// which may carry a protocol).
    pub fn flush_stdio(&mut self) {
        for (i, (name, pipe)) in [("stdout", &self.stdout), ("stderr", &self.stderr)].into_iter().enumerate() {
            // The pipe keeps what was written (up to its cap): only what
            // came since the last flush is new (a reused instance flushes
            // after each of its calls).
            let all = pipe.contents();
            let bytes = all.get(self.stdio_flushed[i]..).unwrap_or_default();
            self.stdio_flushed[i] = all.len();
            if !bytes.is_empty() {
                let text = String::from_utf8_lossy(bytes);
                let text = wharf_core::util::escape_line(text.trim_end());
                tracing::debug!(plugin = %self.shared.id, "{name}: {text}");
            }
        }
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView { ctx: &mut self.http, table: &mut self.table, hooks: &mut self.http_policy }
    }
}

impl wit::types::Host for HostState {}

impl wit::log::Host for HostState {
    fn write(&mut self, level: wit::log::Level, message: String) -> wasmtime::Result<()> {
        self.log_lines += 1;
        let id = &self.shared.id;
        if self.log_lines > LOG_LINES_PER_CALL || self.log_bytes >= LOG_BYTES_PER_CALL {
            if !self.log_dropped {
                self.log_dropped = true;
                tracing::warn!(
                    plugin = %id,
                    "log budget of this call ({LOG_LINES_PER_CALL} lines, {LOG_BYTES_PER_CALL} bytes) used up; \
                     further lines are dropped"
                );
            }
            return Ok(());
        }
        let mut msg = message;
        if wharf_core::util::truncate_str(&mut msg, LOG_LINE_CAP) {
            msg.push_str(" …[truncated]");
        }
        // One line per write, whatever the text holds: a newline must not
        // start a line that looks like the host's own.
        let msg = wharf_core::util::escape_line(&msg);
        self.log_bytes += msg.len();
        match level {
            wit::log::Level::Trace => tracing::trace!(plugin = %id, "{msg}"),
            wit::log::Level::Debug => tracing::debug!(plugin = %id, "{msg}"),
            wit::log::Level::Info => tracing::info!(plugin = %id, "{msg}"),
            wit::log::Level::Warn => tracing::warn!(plugin = %id, "{msg}"),
            wit::log::Level::Error => tracing::error!(plugin = %id, "{msg}"),
        }
        Ok(())
    }
}

impl wit::config::Host for HostState {
    fn get_json(&mut self) -> wasmtime::Result<String> {
        Ok(self.shared.config.to_string())
    }

    fn get(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        Ok(self.shared.config.get(&key).map(|v| match v {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        }))
    }
}

impl wit::kv::Host for HostState {
    fn get(&mut self, key: String) -> wasmtime::Result<Option<Vec<u8>>> {
        Ok(self.shared.kv.get(&key))
    }

    fn set(&mut self, key: String, value: Vec<u8>) -> wasmtime::Result<Result<(), String>> {
        Ok(self.shared.kv.set(key, value))
    }

    fn delete(&mut self, key: String) -> wasmtime::Result<()> {
        self.shared.kv.delete(&key);
        Ok(())
    }

    fn list_keys(&mut self, prefix: String) -> wasmtime::Result<Vec<String>> {
        Ok(self.shared.kv.keys(&prefix))
    }
}

impl wit::process::Host for HostState {
    async fn run(
        &mut self,
        cmd: wit::process::Command,
    ) -> wasmtime::Result<Result<wit::process::CommandOutput, wit::process::ProcessError>> {
        if let Err(e) = self.process_denied() {
            return Ok(Err(e));
        }
        Ok(crate::process::run(&self.shared.id, &self.effective, cmd, self.deadline).await)
    }

    async fn spawn(&mut self, cmd: wit::process::Command) -> wasmtime::Result<Result<u64, wit::process::ProcessError>> {
        Ok(self.process_denied().and_then(|()| crate::process::spawn(&self.shared.id, &self.effective, cmd)))
    }

    async fn job_output(
        &mut self,
        id: u64,
    ) -> wasmtime::Result<Result<wit::process::CommandOutput, wit::process::ProcessError>> {
        Ok(self.process_denied().and_then(|()| crate::process::job_output(&self.shared.id, id)))
    }

    async fn job_kill(&mut self, id: u64) -> wasmtime::Result<Result<(), wit::process::ProcessError>> {
        Ok(self.process_denied().and_then(|()| crate::process::job_kill(&self.shared.id, id)))
    }

    async fn job_list(&mut self) -> wasmtime::Result<Vec<wit::process::JobInfo>> {
        Ok(if self.process_denied().is_ok() { crate::process::job_list(&self.shared.id) } else { Vec::new() })
    }

    async fn sandbox(&mut self) -> wasmtime::Result<wit::process::SandboxLevel> {
        Ok(crate::process::guest_level(&self.effective))
    }
}

impl HostState {
    /// `not-granted` unless the plugin's effective grant has `process`
    /// (the sandbox checks come later, in [`crate::process`]).
    fn process_denied(&self) -> Result<(), wit::process::ProcessError> {
        if self.effective.process { Ok(()) } else { Err(wit::process::ProcessError::NotGranted) }
    }
}

/// The per-call view of time and randomness of a durable call; `None`: the
/// real ones.
#[derive(Clone, Default)]
struct DeterminismSlot(Arc<Mutex<Option<Determined>>>);

struct Determined {
    /// SplitMix64 states, one per random source (secure, insecure).
    rng: [u64; 2],
    /// The next wall-clock reading, Unix ms.
    clock_ms: u64,
}

/// The wall clock: a durable call's starts at its logged start and moves
/// one millisecond per reading, so a replay reads the same times.
struct SwitchClock {
    slot: DeterminismSlot,
    real: wasmtime_wasi::clocks::WallClock,
}

impl wasmtime_wasi::HostWallClock for SwitchClock {
    fn resolution(&self) -> std::time::Duration {
        self.real.resolution()
    }

    fn now(&self) -> std::time::Duration {
        let mut slot = self.slot.0.lock().unwrap_or_else(|e| e.into_inner());
        match slot.as_mut() {
            Some(d) => {
                let now = d.clock_ms;
                d.clock_ms = d.clock_ms.saturating_add(1);
                std::time::Duration::from_millis(now)
            }
            None => self.real.now(),
        }
    }
}

/// A random source: a durable call's is seeded from the call (SplitMix64),
/// else the real one.
struct SwitchRng {
    slot: DeterminismSlot,
    real: Box<dyn rand_core::Rng + Send>,
    /// Which of the call's two streams (1: secure, 2: insecure).
    salt: usize,
}

impl rand_core::TryRng for SwitchRng {
    type Error = std::convert::Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        Ok((self.try_next_u64()? >> 32) as u32)
    }

    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        let mut slot = self.slot.0.lock().unwrap_or_else(|e| e.into_inner());
        match slot.as_mut() {
            Some(d) => {
                let st = &mut d.rng[self.salt - 1];
                *st = st.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = *st;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                Ok(z ^ (z >> 31))
            }
            None => Ok(self.real.next_u64()),
        }
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
        for chunk in dst.chunks_mut(8) {
            let v = self.try_next_u64()?.to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
        Ok(())
    }
}
