//! The `process` host capability: `/bin/sh -c COMMAND` under the host's OS
//! sandbox, for plugins granted `process`.
//!
//! # Enforcement
//!
//! Each command runs in a new session and process group, with a scrubbed
//! environment (`PATH`, `HOME` and `TMPDIR` = a private per-job tmp
//! directory, `LANG`, `TERM=dumb`, plus the env vars granted to the plugin by
//! name — never anything else, so never the model's API key unless the
//! operator grants it), in a working directory inside a granted directory.
//! On Linux the child confines itself before `exec` (see `sandbox.rs`):
//! Landlock (writes only in the granted read-write directories, the private
//! tmp directory and `/dev/null`; reads everywhere except the
//! [protected paths](protect_paths); TCP denied unless the plugin was granted
//! hosts — Landlock cannot filter by host, so *any* granted host allows all
//! TCP), seccomp (no IPv4/IPv6 sockets at all without granted hosts, no new
//! sessions or process groups, no io_uring), `no_new_privs`, no
//! capabilities, and resource limits.
//!
//! [`sandbox_level`] reports how much of that this machine enforces. When
//! Landlock is missing, commands are refused with `sandbox-unavailable`
//! unless the plugin's grant turns the sandbox off.
//!
//! # Lifetimes
//!
//! A foreground command (`run`) is killed with its whole process group at
//! its timeout — the guest's `timeout-ms`, never later than the end of the
//! calling tool call — and when the call is cancelled (the host drops the
//! call's future and store: a guard kills the group). Processes it left
//! running in the background are killed when it exits. Background jobs
//! (`spawn`) belong to the plugin id and live until `job-kill`, their own
//! `timeout-ms`, the end of the async runtime, or host exit ([`kill_all`]
//! also runs at `exit`).
//!
//! # Output
//!
//! Combined stdout+stderr; the first and last 16 KiB are returned, and once
//! the output outgrows that (background jobs: from the start) all of it is
//! written to a spill file under `<first read-write dir>/.wharf/spill/<run>/`
//! (or `$TMPDIR/wharf-spill-<uid>/<run>/` without one), whose path is
//! returned so the model can read it with file tools.
//!
//! # Native programs
//!
//! [`native`] starts other long-lived programs (stdio MCP servers) under the
//! same sandbox with a grant of their own instead of a plugin's.

mod capture;
pub mod native;
#[cfg(target_os = "linux")]
mod sandbox;

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Once, OnceLock, RwLock};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;

use crate::bindings::wharf::plugin::process as wit;
use crate::grants::{Access, EffectiveGrant};
use capture::Capture;

/// Background jobs one plugin may have running at once.
pub const MAX_RUNNING_JOBS: usize = 16;
/// Finished background jobs remembered per plugin (oldest forgotten first).
pub const MAX_FINISHED_JOBS: usize = 64;
/// Time left to the guest between a command's forced end and the end of the
/// tool call, to format its result.
const CALL_MARGIN: Duration = Duration::from_millis(300);
/// How long output is still read after the process group was killed.
const DRAIN: Duration = Duration::from_secs(2);
/// `PATH` when the host has none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How strongly processes are confined on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Filesystem, network, signals and process group all confined.
    Full,
    /// Some of it (the detail string says what is missing).
    Partial,
    /// No OS sandbox: processes are refused unless the grant turns it off.
    None,
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Full => "full",
            Self::Partial => "partial",
            Self::None => "none",
        })
    }
}

struct Support {
    /// Landlock ABI, or why there is none.
    landlock: Result<i32, String>,
    seccomp: bool,
}

fn support() -> &'static Support {
    static S: OnceLock<Support> = OnceLock::new();
    S.get_or_init(|| {
        #[cfg(target_os = "linux")]
        {
            Support { landlock: sandbox::landlock_abi(), seccomp: sandbox::seccomp_available() }
        }
        #[cfg(not(target_os = "linux"))]
        {
            Support { landlock: Err("the process sandbox needs Linux (Landlock)".into()), seccomp: false }
        }
    })
}

/// The enforcement level processes get on this machine, and a one-paragraph
/// explanation of what is and is not confined (for `wharf doctor`).
pub fn sandbox_level() -> (Level, String) {
    level_of(support())
}

fn level_of(s: &Support) -> (Level, String) {
    let abi = match &s.landlock {
        Err(why) => {
            return (
                Level::None,
                format!(
                    "no OS sandbox: {why}. Plugins granted `process` are refused (`sandbox-unavailable`) \
                     unless their grant sets sandbox = \"off\"."
                ),
            );
        }
        Ok(abi) => *abi,
    };
    let mut missing = Vec::new();
    if abi < 3 {
        missing.push("truncating files outside the granted directories is not blocked (Landlock ABI < 3)");
    }
    if abi < 4 && !s.seccomp {
        missing.push("network not confined (Landlock ABI < 4 and no seccomp)");
    }
    if abi < 6 {
        missing.push("signals to processes outside the sandbox are not blocked (Landlock ABI < 6)");
    }
    if !s.seccomp {
        missing.push("no seccomp: UDP not blocked, and processes may leave the process group (setsid)");
    }
    let level = if missing.is_empty() { Level::Full } else { Level::Partial };
    let mut text = format!(
        "Landlock ABI {abi}{}: writes only in the granted read-write directories, a private tmp directory and \
         /dev/null; reads anywhere except Wharf's config, session and cache directories and credential stores \
         (~/.ssh, ~/.aws, …); network denied unless the plugin is granted hosts (then all TCP/UDP is allowed: \
         the kernel cannot filter by host); new process group killed with SIGKILL on timeout or cancel; \
         no_new_privs, no capabilities, rlimits (CPU {} s, file size {} GiB, address space {} GiB, tasks), \
         scrubbed environment. Not confined: connecting to pathname UNIX sockets the user may use \
         (e.g. a Docker socket), writes under a protected path inside a granted directory.",
        if s.seccomp { " + seccomp" } else { "" },
        CPU_SECONDS,
        FILE_SIZE >> 30,
        ADDRESS_SPACE >> 30,
    );
    if !missing.is_empty() {
        text.push_str(" Missing on this machine: ");
        text.push_str(&missing.join("; "));
        text.push('.');
    }
    (level, text)
}

#[cfg(target_os = "linux")]
use sandbox::{ADDRESS_SPACE, CPU_SECONDS, FILE_SIZE};
#[cfg(not(target_os = "linux"))]
const CPU_SECONDS: u64 = 0;
#[cfg(not(target_os = "linux"))]
const FILE_SIZE: u64 = 0;
#[cfg(not(target_os = "linux"))]
const ADDRESS_SPACE: u64 = 0;

/// The level a plugin's `sandbox()` import reports.
pub(crate) fn guest_level(eff: &EffectiveGrant) -> wit::SandboxLevel {
    if eff.sandbox_off {
        return wit::SandboxLevel::None;
    }
    match sandbox_level().0 {
        Level::Full => wit::SandboxLevel::Full,
        Level::Partial => wit::SandboxLevel::Partial,
        Level::None => wit::SandboxLevel::None,
    }
}

static PROTECTED: RwLock<Vec<PathBuf>> = RwLock::new(Vec::new());

/// Adds paths that sandboxed processes may never read (unless they are
/// inside a directory granted to the plugin): the host should register its
/// session directory and config directories here. `~/.wharf`, Wharf's XDG
/// directories and common credential stores are protected by default.
pub fn protect_paths(paths: impl IntoIterator<Item = PathBuf>) {
    let mut p = PROTECTED.write().unwrap_or_else(|e| e.into_inner());
    for path in paths {
        if path.is_absolute() && !p.contains(&path) {
            p.push(path);
        }
    }
}

fn protected_paths() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    // The environment read here is part of enforcing grants, not a runtime
    // option: the sandbox keeps the user's own directories out of reach
    // wherever this user's HOME and XDG directories are.
    let home = std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute());
    let xdg = |var: &str, default: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| home.as_ref().map(|h| h.join(default)))
            .map(|d| d.join("wharf"))
    };
    out.extend(xdg("XDG_CONFIG_HOME", ".config"));
    out.extend(xdg("XDG_CACHE_HOME", ".cache"));
    out.extend(xdg("XDG_DATA_HOME", ".local/share"));
    out.extend(xdg("XDG_STATE_HOME", ".local/state"));
    if let Some(h) = &home {
        for rel in [
            ".wharf",
            ".ssh",
            ".gnupg",
            ".aws",
            ".azure",
            ".kube",
            ".docker",
            ".netrc",
            ".git-credentials",
            ".config/gcloud",
        ] {
            out.push(h.join(rel));
        }
    }
    out.extend(PROTECTED.read().unwrap_or_else(|e| e.into_inner()).iter().cloned());
    let mut canon: Vec<PathBuf> = out.iter().filter_map(|p| std::fs::canonicalize(p).ok()).collect();
    canon.sort();
    canon.dedup();
    canon
}

// ---- process groups ----

/// Process groups whose leader is not reaped yet. A group id is signalled
/// only while its leader is in this set, and removed from it only when the
/// leader is reaped (under the same lock), so a recycled pid is never hit.
static LIVE: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

fn live() -> std::sync::MutexGuard<'static, BTreeSet<i32>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// SIGKILLs a group if its leader is not reaped yet.
fn kill_group(pgid: i32) -> bool {
    let live = live();
    if live.contains(&pgid) {
        // SAFETY: plain syscall; the group id is reserved while its leader
        // is unreaped.
        unsafe { libc::killpg(pgid, libc::SIGKILL) };
        true
    } else {
        false
    }
}

/// Kills every process group started by this host (foreground commands and
/// background jobs of every plugin). Also registered to run at `exit`.
pub fn kill_all() {
    for pgid in live().iter() {
        // SAFETY: see `kill_group`.
        unsafe { libc::killpg(*pgid, libc::SIGKILL) };
    }
}

/// The private tmp directories of started commands not removed yet: a
/// command still running when the host exits, or one whose reaper thread
/// had not finished, leaves its directory to the exit hook.
static TMP_DIRS: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

fn tmp_dirs() -> std::sync::MutexGuard<'static, BTreeSet<PathBuf>> {
    TMP_DIRS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Removes a command's private tmp directory (none: an empty path) and
/// forgets it.
fn remove_tmp(tmp: &Path) {
    if tmp.as_os_str().is_empty() {
        return;
    }
    let _ = std::fs::remove_dir_all(tmp);
    tmp_dirs().remove(tmp);
}

extern "C" fn kill_all_at_exit() {
    // Never block at exit: skip if another thread holds a lock.
    if let Ok(live) = LIVE.try_lock() {
        for pgid in live.iter() {
            // SAFETY: see `kill_group`.
            unsafe { libc::killpg(*pgid, libc::SIGKILL) };
        }
    }
    if let Ok(dirs) = TMP_DIRS.try_lock() {
        for dir in dirs.iter() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn register_exit_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a plain `extern "C"` function.
        unsafe { libc::atexit(kill_all_at_exit) };
    });
}

/// Whether the process exited (without reaping it).
fn has_exited(pid: i32) -> bool {
    // SAFETY: zeroed siginfo is a valid out value; WNOWAIT leaves the
    // zombie in place.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let r = libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT);
        r != 0 || info.si_pid() != 0
    }
}

/// A started command: the leader of its process group, not reaped yet.
/// Dropping it kills the group (cancellation) and reaps it on a thread.
struct Proc {
    child: Option<std::process::Child>,
    pid: i32,
    pidfd: Option<AsyncFd<OwnedFd>>,
    tmp: PathBuf,
}

impl Proc {
    /// A started command; its tmp directory (if any) is removed when it is
    /// reaped, or at the latest when the host exits.
    fn new(child: std::process::Child, pid: i32, tmp: PathBuf) -> Self {
        if !tmp.as_os_str().is_empty() {
            tmp_dirs().insert(tmp.clone());
        }
        Proc { pidfd: pidfd_open(pid), child: Some(child), pid, tmp }
    }

    /// Waits until the leader exits (it stays a zombie until [`Proc::reap`]).
    async fn exited(&self) {
        loop {
            if has_exited(self.pid) {
                return;
            }
            match &self.pidfd {
                Some(fd) => match fd.readable().await {
                    Ok(mut guard) => {
                        if has_exited(self.pid) {
                            return;
                        }
                        guard.clear_ready();
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(25)).await,
                },
                None => tokio::time::sleep(Duration::from_millis(25)).await,
            }
        }
    }

    fn kill(&self) {
        kill_group(self.pid);
    }

    /// Reaps the (exited) leader.
    fn reap(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        let status = {
            let mut live = live();
            live.remove(&self.pid);
            child.wait().ok()
        };
        remove_tmp(&self.tmp);
        status
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        kill_group(self.pid);
        let (pid, tmp) = (self.pid, std::mem::take(&mut self.tmp));
        let reap = move || {
            // Wait for the SIGKILLed leader without reaping, then reap under
            // the lock so the group id is never signalled once recycled.
            // SAFETY: zeroed siginfo is a valid out value.
            unsafe {
                let mut info: libc::siginfo_t = std::mem::zeroed();
                libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOWAIT);
            }
            {
                let mut live = live();
                live.remove(&pid);
                let _ = child.wait();
            }
            remove_tmp(&tmp);
        };
        let _ = std::thread::Builder::new().name("wharf-reap".into()).spawn(reap);
    }
}

// ---- planning and starting ----

/// Everything needed to start one command, checked and prepared.
struct Plan {
    id: u64,
    command: String,
    workdir: PathBuf,
    tmp: PathBuf,
    env: Vec<(String, String)>,
    #[cfg(target_os = "linux")]
    setup: sandbox::ChildSetup,
    spill: PathBuf,
    stdin: Option<Vec<u8>>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn invalid(msg: impl Into<String>) -> wit::ProcessError {
    wit::ProcessError::Invalid(msg.into())
}

/// Resolves and checks the working directory: inside a granted directory.
fn resolve_workdir(eff: &EffectiveGrant, requested: Option<&str>) -> Result<Option<PathBuf>, wit::ProcessError> {
    let base = eff.dirs.iter().find(|d| d.access == Access::Rw).or(eff.dirs.first()).map(|d| d.path.clone());
    let path = match (requested.filter(|s| !s.is_empty()), &base) {
        (None, None) => return Ok(None),
        (None, Some(b)) => b.clone(),
        (Some(r), _) if Path::new(r).is_absolute() => PathBuf::from(r),
        (Some(r), Some(b)) => b.join(r),
        (Some(r), None) => {
            return Err(invalid(format!("relative workdir `{r}` but no directory is granted; use an absolute path")));
        }
    };
    let canon = std::fs::canonicalize(&path).map_err(|e| invalid(format!("workdir {}: {e}", path.display())))?;
    if !canon.is_dir() {
        return Err(invalid(format!("workdir {} is not a directory", path.display())));
    }
    if !eff.dirs.iter().any(|d| canon.starts_with(&d.path)) {
        let granted: Vec<String> = eff.dirs.iter().map(|d| d.path.display().to_string()).collect();
        return Err(invalid(format!(
            "workdir {} is outside the granted directories ({})",
            path.display(),
            if granted.is_empty() { "none".to_string() } else { granted.join(", ") }
        )));
    }
    Ok(Some(canon))
}

/// Identifies this host process in spill paths.
fn run_tag() -> &'static str {
    static TAG: OnceLock<String> = OnceLock::new();
    TAG.get_or_init(|| {
        let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        format!("{secs}-{}", std::process::id())
    })
}

fn spill_path(plugin: &str, eff: &EffectiveGrant, name: &str) -> PathBuf {
    let safe: String =
        plugin.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
    let dir = match eff.dirs.iter().find(|d| d.access == Access::Rw) {
        Some(d) => d.path.join(".wharf").join("spill").join(run_tag()),
        // SAFETY: no arguments.
        None => std::env::temp_dir().join(format!("wharf-spill-{}", unsafe { libc::getuid() })).join(run_tag()),
    };
    dir.join(format!("{safe}-{name}.log"))
}

/// The process's environment. Reading the host's here is the grant at
/// work, not a runtime option: PATH and LANG pass through (a command needs
/// them to run), HOME and TMPDIR are the private directory, and each
/// granted variable gets the host's value.
fn make_env(eff: &EffectiveGrant, tmp: &Path) -> Vec<(String, String)> {
    let var = |n: &str| std::env::var(n).ok().filter(|v| !v.is_empty());
    let tmp = tmp.display().to_string();
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), var("PATH").unwrap_or_else(|| DEFAULT_PATH.into())),
        ("HOME".into(), tmp.clone()),
        ("TMPDIR".into(), tmp),
        ("LANG".into(), var("LANG").unwrap_or_else(|| "C.UTF-8".into())),
        ("TERM".into(), "dumb".into()),
    ];
    for name in &eff.env {
        if let Ok(v) = std::env::var(name) {
            env.retain(|(k, _)| k != name);
            env.push((name.clone(), v));
        }
    }
    env
}

fn plan(plugin: &str, eff: &EffectiveGrant, cmd: wit::Command, background: bool) -> Result<Plan, wit::ProcessError> {
    if cmd.command.trim().is_empty() {
        return Err(invalid("empty command"));
    }
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(wit::ProcessError::Failed("processes need the host's async runtime".into()));
    }
    if cmd.command.contains('\0') {
        return Err(invalid("the command contains a NUL byte"));
    }
    if !eff.sandbox_off
        && let Err(why) = &support().landlock
    {
        return Err(wit::ProcessError::SandboxUnavailable(format!(
            "{why}; the operator can set sandbox = \"off\" in this plugin's grant to run processes unconfined"
        )));
    }
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let tmp = std::env::temp_dir().join(format!("wharf-job-{}-{id}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    capture::create_private_dir_all(&tmp)
        .map_err(|e| wit::ProcessError::Failed(format!("cannot create {}: {e}", tmp.display())))?;
    let cleanup = |e| {
        let _ = std::fs::remove_dir_all(&tmp);
        e
    };
    let workdir = resolve_workdir(eff, cmd.workdir.as_deref()).map_err(cleanup)?.unwrap_or_else(|| tmp.clone());
    #[cfg(target_os = "linux")]
    let setup = child_setup(eff, &tmp, background).map_err(cleanup)?;
    let name = if background { format!("job{id}") } else { format!("run{id}") };
    Ok(Plan {
        id,
        command: cmd.command,
        env: make_env(eff, &tmp),
        workdir,
        #[cfg(target_os = "linux")]
        setup,
        spill: spill_path(plugin, eff, &name),
        stdin: cmd.stdin,
        tmp,
    })
}

#[cfg(target_os = "linux")]
fn child_setup(eff: &EffectiveGrant, tmp: &Path, background: bool) -> Result<sandbox::ChildSetup, wit::ProcessError> {
    // SAFETY: no arguments.
    let parent_death = (!background).then(|| unsafe { libc::getpid() });
    let rlimits = sandbox::Rlimits::defaults();
    if eff.sandbox_off {
        return Ok(sandbox::ChildSetup { ruleset: None, seccomp: None, rlimits, drop_caps: false, parent_death });
    }
    let s = support();
    let abi = s.landlock.clone().map_err(wit::ProcessError::SandboxUnavailable)?;
    let rw: Vec<PathBuf> = eff.dirs.iter().filter(|d| d.access == Access::Rw).map(|d| d.path.clone()).collect();
    let ro: Vec<PathBuf> = eff.dirs.iter().filter(|d| d.access == Access::Ro).map(|d| d.path.clone()).collect();
    let allow_net = !eff.hosts.is_empty();
    let protected = protected_paths();
    let policy = sandbox::FsPolicy { rw: &rw, ro: &ro, tmp, protected: &protected, allow_tcp: allow_net };
    let ruleset = sandbox::landlock_ruleset(abi, &policy)
        .map_err(|e| wit::ProcessError::SandboxUnavailable(format!("cannot set up Landlock: {e}")))?;
    let seccomp = if s.seccomp { sandbox::seccomp_program(!allow_net) } else { None };
    Ok(sandbox::ChildSetup { ruleset: Some(ruleset), seccomp, rlimits, drop_caps: true, parent_death })
}

fn pidfd_open(pid: i32) -> Option<AsyncFd<OwnedFd>> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain syscall; the descriptor is owned below.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return None;
        }
        // SAFETY: a new descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        // SAFETY: an `OwnedFd` keeps returning the same open descriptor
        // until the `AsyncFd` drops it.
        unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }.ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = pid;
        None
    }
}

struct Started {
    proc: Proc,
    output: pipe::Receiver,
}

fn start(plan: Plan) -> Result<Started, wit::ProcessError> {
    let failed = |what: &str, e: std::io::Error| wit::ProcessError::Failed(format!("{what}: {e}"));
    let (tx, rx) = pipe::pipe().map_err(|e| failed("cannot create a pipe", e))?;
    let out = tx.into_blocking_fd().map_err(|e| failed("pipe", e))?;
    let err = out.try_clone().map_err(|e| failed("pipe", e))?;
    let mut c = std::process::Command::new("/bin/sh");
    c.arg("-c")
        .arg(&plan.command)
        .current_dir(&plan.workdir)
        .env_clear()
        .envs(plan.env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .stdin(if plan.stdin.is_some() { Stdio::piped() } else { Stdio::null() });
    #[cfg(target_os = "linux")]
    {
        let setup = plan.setup;
        // SAFETY: `apply` makes only async-signal-safe system calls.
        unsafe {
            c.pre_exec(move || setup.apply());
        }
    }
    register_exit_hook();
    let spawned = c.spawn();
    // Drops the parent's copies of the pipe's write end and the ruleset.
    drop(c);
    let mut child = spawned.map_err(|e| {
        let _ = std::fs::remove_dir_all(&plan.tmp);
        failed("cannot start /bin/sh in the sandbox", e)
    })?;
    let pid = child.id() as i32;
    live().insert(pid);
    let stdin = child.stdin.take();
    let proc = Proc::new(child, pid, plan.tmp);
    if let (Some(stdin), Some(bytes)) = (stdin, plan.stdin)
        && let Ok(mut tx) = pipe::Sender::from_owned_fd(OwnedFd::from(stdin))
    {
        tokio::spawn(async move {
            let _ = tx.write_all(&bytes).await;
        });
    }
    Ok(Started { proc, output: rx })
}

fn outcome(status: Option<ExitStatus>, timed_out: bool, cap: &Capture) -> wit::CommandOutput {
    wit::CommandOutput {
        exit_code: status.and_then(|s| s.code()),
        signal: status.and_then(|s| s.signal()),
        timed_out,
        output: cap.text(),
        output_bytes: cap.total(),
        spill_path: cap.spill_path(),
    }
}

/// Reads what is left in the pipe after the group was killed (bounded: a
/// process outside the group could hold the pipe open).
async fn drain(rx: &mut pipe::Receiver, mut push: impl FnMut(&[u8])) {
    let mut buf = vec![0u8; 64 << 10];
    let _ = tokio::time::timeout(DRAIN, async {
        loop {
            match rx.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => push(&buf[..n]),
            }
        }
    })
    .await;
}

/// Runs a command to completion (`process.run`). `deadline` is the end of
/// the calling tool call: the command is killed before it.
pub(crate) async fn run(
    plugin: &str,
    eff: &EffectiveGrant,
    cmd: wit::Command,
    deadline: Instant,
) -> Result<wit::CommandOutput, wit::ProcessError> {
    let cap_time = deadline.saturating_duration_since(Instant::now()).saturating_sub(CALL_MARGIN);
    let timeout = cmd.timeout_ms.map_or(cap_time, |ms| Duration::from_millis(ms).min(cap_time));
    let plan = plan(plugin, eff, cmd, false)?;
    let mut capture = Capture::new(plan.spill.clone(), false);
    let Started { mut proc, output: mut rx } = start(plan)?;
    let mut buf = vec![0u8; 64 << 10];
    let mut open = true;
    let mut timed_out = false;
    let sleep = tokio::time::sleep(timeout);
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            r = rx.read(&mut buf), if open => match r {
                Ok(0) | Err(_) => open = false,
                Ok(n) => capture.push(&buf[..n]),
            },
            () = proc.exited() => break,
            () = &mut sleep, if !timed_out => {
                timed_out = true;
                proc.kill();
            }
        }
    }
    // Whatever the command left running in the background goes too.
    proc.kill();
    if open {
        drain(&mut rx, |d| capture.push(d)).await;
    }
    let status = proc.reap();
    capture.flush();
    Ok(outcome(status, timed_out, &capture))
}

// ---- background jobs ----

struct Job {
    id: u64,
    plugin: String,
    command: String,
    state: Mutex<JobState>,
}

struct JobState {
    capture: Capture,
    pgid: i32,
    running: bool,
    status: Option<ExitStatus>,
    timed_out: bool,
}

impl Job {
    fn state(&self) -> std::sync::MutexGuard<'_, JobState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

static JOBS: LazyLock<Mutex<BTreeMap<u64, Arc<Job>>>> = LazyLock::new(Default::default);

fn jobs() -> std::sync::MutexGuard<'static, BTreeMap<u64, Arc<Job>>> {
    JOBS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Marks a job finished if its task ends without reaping it (the runtime
/// shut down: the task's `Proc` guard killed the group).
struct MarkDone(Arc<Job>);

impl Drop for MarkDone {
    fn drop(&mut self) {
        self.0.state().running = false;
    }
}

/// Starts a background job (`process.spawn`).
pub(crate) fn spawn(plugin: &str, eff: &EffectiveGrant, cmd: wit::Command) -> Result<u64, wit::ProcessError> {
    let running = jobs().values().filter(|j| j.plugin == plugin && j.state().running).count();
    if running >= MAX_RUNNING_JOBS {
        return Err(invalid(format!(
            "{MAX_RUNNING_JOBS} background jobs are already running; kill one with job_kill first"
        )));
    }
    let timeout = cmd.timeout_ms.map(Duration::from_millis);
    let mut command = cmd.command.clone();
    if command.len() > 500 {
        let mut cut = 500;
        while !command.is_char_boundary(cut) {
            cut -= 1;
        }
        command.truncate(cut);
        command.push('…');
    }
    let plan = plan(plugin, eff, cmd, true)?;
    let id = plan.id;
    let capture = Capture::new(plan.spill.clone(), true);
    let Started { proc, output } = start(plan)?;
    let job = Arc::new(Job {
        id,
        plugin: plugin.to_string(),
        command,
        state: Mutex::new(JobState { capture, pgid: proc.pid, running: true, status: None, timed_out: false }),
    });
    {
        let mut all = jobs();
        all.insert(id, job.clone());
        let finished: Vec<u64> =
            all.values().filter(|j| j.plugin == plugin && !j.state().running).map(|j| j.id).collect();
        for old in finished.iter().take(finished.len().saturating_sub(MAX_FINISHED_JOBS)) {
            all.remove(old);
        }
    }
    tokio::spawn(job_task(job, proc, output, timeout));
    Ok(id)
}

async fn job_task(job: Arc<Job>, mut proc: Proc, mut rx: pipe::Receiver, timeout: Option<Duration>) {
    let _done = MarkDone(job.clone());
    let mut buf = vec![0u8; 64 << 10];
    let mut open = true;
    let mut timed_out = false;
    let sleep = tokio::time::sleep(timeout.unwrap_or(Duration::from_secs(100 * 365 * 24 * 3600)));
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            r = rx.read(&mut buf), if open => match r {
                Ok(0) | Err(_) => open = false,
                Ok(n) => job.state().capture.push(&buf[..n]),
            },
            () = proc.exited() => break,
            () = &mut sleep, if timeout.is_some() && !timed_out => {
                timed_out = true;
                job.state().timed_out = true;
                proc.kill();
            }
        }
    }
    proc.kill();
    if open {
        drain(&mut rx, |d| job.state().capture.push(d)).await;
    }
    let mut st = job.state();
    st.status = proc.reap();
    st.running = false;
    st.capture.flush();
}

fn find_job(plugin: &str, id: u64) -> Result<Arc<Job>, wit::ProcessError> {
    jobs()
        .get(&id)
        .filter(|j| j.plugin == plugin)
        .cloned()
        .ok_or_else(|| invalid(format!("no background job {id} (see job_list)")))
}

/// Output so far of a background job (`process.job-output`): `exit-code`
/// and `signal` are both empty while it runs.
pub(crate) fn job_output(plugin: &str, id: u64) -> Result<wit::CommandOutput, wit::ProcessError> {
    let job = find_job(plugin, id)?;
    let mut st = job.state();
    st.capture.flush();
    Ok(outcome(st.status, st.timed_out, &st.capture))
}

/// Kills a background job's process group (`process.job-kill`); killing a
/// finished job is not an error.
pub(crate) fn job_kill(plugin: &str, id: u64) -> Result<(), wit::ProcessError> {
    let job = find_job(plugin, id)?;
    let st = job.state();
    if st.running {
        kill_group(st.pgid);
    }
    Ok(())
}

/// The plugin's background jobs (`process.job-list`), oldest first.
pub(crate) fn job_list(plugin: &str) -> Vec<wit::JobInfo> {
    jobs()
        .values()
        .filter(|j| j.plugin == plugin)
        .map(|j| {
            let st = j.state();
            wit::JobInfo {
                id: j.id,
                command: j.command.clone(),
                running: st.running,
                exit_code: st.status.and_then(|s| s.code()),
            }
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::grants::{DirGrant, FsRequest, Grant, GrantRequest};

    fn effective(ws: &Path, sandbox_off: bool) -> EffectiveGrant {
        let g = Grant {
            dirs: vec![DirGrant::new(ws, Access::Rw).unwrap()],
            process: true,
            sandbox_off,
            ..Grant::default()
        };
        g.intersect(&GrantRequest { filesystem: FsRequest::ReadWrite, process: true, ..GrantRequest::default() })
    }

    fn cmd(command: &str, stdin: Option<&[u8]>) -> wit::Command {
        wit::Command {
            command: command.into(),
            workdir: None,
            timeout_ms: Some(20_000),
            stdin: stdin.map(<[u8]>::to_vec),
        }
    }

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    #[tokio::test]
    async fn stdin_workdir_and_exit_status() {
        let ws = tempfile::tempdir().unwrap();
        let eff = effective(ws.path(), false);
        let res = run("unit", &eff, cmd("cat; pwd; exit 3", Some(b"from stdin\n")), far()).await;
        if sandbox_level().0 == Level::None {
            assert!(matches!(res, Err(wit::ProcessError::SandboxUnavailable(_))), "{res:?}");
            return;
        }
        let out = res.unwrap();
        let canon = ws.path().canonicalize().unwrap();
        assert_eq!(out.output, format!("from stdin\n{}\n", canon.display()));
        assert_eq!((out.exit_code, out.signal, out.timed_out), (Some(3), None, false));
        let res = run("unit", &eff, cmd("true", None), far()).await;
        assert_eq!(res.unwrap().output, "");
        let mut c = cmd("pwd", None);
        c.workdir = Some("/".into());
        assert!(matches!(run("unit", &eff, c, far()).await, Err(wit::ProcessError::Invalid(_))));
    }

    #[tokio::test]
    async fn sandbox_off_runs_unconfined() {
        let ws = tempfile::tempdir().unwrap();
        let eff = effective(ws.path(), true);
        assert_eq!(guest_level(&eff), wit::SandboxLevel::None);
        let out = run("unit", &eff, cmd("grep -c NoNewPrivs:.1 /proc/self/status; echo $TERM", None), far()).await;
        let out = out.unwrap();
        assert_eq!(out.output, "1\ndumb\n");
    }

    #[tokio::test]
    async fn the_call_deadline_wins() {
        let ws = tempfile::tempdir().unwrap();
        let eff = effective(ws.path(), true);
        let t0 = Instant::now();
        let deadline = Instant::now() + Duration::from_millis(800);
        let out = run("unit", &eff, cmd("sleep 100", None), deadline).await.unwrap();
        assert!(out.timed_out);
        assert_eq!(out.signal, Some(libc::SIGKILL));
        assert!(t0.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn levels_are_reported_honestly() {
        let (l, text) = level_of(&Support { landlock: Err("nope".into()), seccomp: true });
        assert_eq!(l, Level::None);
        assert!(text.contains("nope") && text.contains("sandbox-unavailable"), "{text}");
        let (l, _) = level_of(&Support { landlock: Ok(7), seccomp: true });
        assert_eq!(l, Level::Full);
        let (l, text) = level_of(&Support { landlock: Ok(3), seccomp: true });
        assert_eq!(l, Level::Partial);
        assert!(text.contains("signals"), "{text}");
        let (l, _) = level_of(&Support { landlock: Ok(7), seccomp: false });
        assert_eq!(l, Level::Partial);
    }
}
