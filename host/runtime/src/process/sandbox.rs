//! The OS sandbox of a process on Linux, set up in the child between `fork`
//! and `exec`:
//!
//! - a new session and process group (`setsid`), so the host can kill the
//!   command with everything it started;
//! - every inherited descriptor above stderr marked close-on-exec;
//! - resource limits ([`Rlimits`]);
//! - `no_new_privs`, and every capability dropped (bounding, ambient,
//!   effective, permitted, inheritable), so even a root host runs commands
//!   without privileges;
//! - a **Landlock** domain: writes only beneath the granted read-write
//!   directories, the job's private tmp directory and `/dev/null`; reads and
//!   execution everywhere except the protected paths (Wharf's config, session
//!   and cache directories, credential stores); TCP `connect`/`bind` denied
//!   unless the plugin was granted hosts (ABI ≥ 4); signals and abstract UNIX
//!   sockets scoped to the sandbox (ABI ≥ 6);
//! - a **seccomp** filter: no `setsid`/`setpgid` (nothing escapes the
//!   process group), no `io_uring` (it bypasses seccomp), and, without
//!   granted hosts, no IPv4/IPv6/packet sockets at all (covers UDP, which
//!   Landlock does not filter).
//!
//! Everything that allocates or opens paths (the Landlock ruleset, the BPF
//! program) is prepared in the parent; the child only makes system calls, as
//! required after `fork` in a multi-threaded process.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

// ---- Landlock (include/uapi/linux/landlock.h) ----

const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
const LANDLOCK_RULE_PATH_BENEATH: u32 = 1;

const FS_EXECUTE: u64 = 1 << 0;
const FS_WRITE_FILE: u64 = 1 << 1;
const FS_READ_FILE: u64 = 1 << 2;
const FS_READ_DIR: u64 = 1 << 3;
const FS_REFER: u64 = 1 << 13;
const FS_TRUNCATE: u64 = 1 << 14;
const FS_IOCTL_DEV: u64 = 1 << 15;
/// Rights that apply to a file (not only to directories).
const FS_FILE_RIGHTS: u64 = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV;

const NET_BIND_TCP: u64 = 1 << 0;
const NET_CONNECT_TCP: u64 = 1 << 1;

const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// Every filesystem right the kernel's ABI knows.
fn fs_rights(abi: i32) -> u64 {
    let mut r = (1 << 13) - 1; // ABI 1: EXECUTE ..= MAKE_SYM
    if abi >= 2 {
        r |= FS_REFER;
    }
    if abi >= 3 {
        r |= FS_TRUNCATE;
    }
    if abi >= 5 {
        r |= FS_IOCTL_DEV;
    }
    r
}

/// The Landlock ABI version of the running kernel, or why there is none.
pub fn landlock_abi() -> Result<i32, String> {
    // SAFETY: the version query takes no attribute pointer.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if v >= 1 {
        return Ok(v as i32);
    }
    let e = io::Error::last_os_error();
    Err(match e.raw_os_error() {
        Some(libc::ENOSYS) => "the kernel was built without Landlock".into(),
        Some(libc::EOPNOTSUPP) => "Landlock is disabled at boot (add `landlock` to the `lsm=` kernel parameter)".into(),
        _ => format!("Landlock unavailable: {e}"),
    })
}

/// Whether a seccomp filter can be installed (kernel support and a
/// supported architecture).
pub fn seccomp_available() -> bool {
    if AUDIT_ARCH.is_none() {
        return false;
    }
    // SAFETY: PR_GET_SECCOMP takes no pointers.
    unsafe {
        libc::prctl(
            libc::PR_GET_SECCOMP,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        ) >= 0
    }
}

/// What the Landlock domain allows.
pub struct FsPolicy<'a> {
    /// Granted read-write directories.
    pub rw: &'a [PathBuf],
    /// Granted read-only directories.
    pub ro: &'a [PathBuf],
    /// The job's private tmp directory (read-write).
    pub tmp: &'a Path,
    /// Paths never readable (unless inside a granted directory).
    pub protected: &'a [PathBuf],
    /// TCP allowed (the plugin was granted hosts).
    pub allow_tcp: bool,
}

fn open_path(path: &Path) -> io::Result<OwnedFd> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: a valid C string; the returned descriptor is owned below.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn add_path_rule(ruleset: &OwnedFd, path: &Path, mut access: u64) -> io::Result<()> {
    let fd = open_path(path)?;
    let is_dir = std::fs::metadata(path).map(|m| m.is_dir()).unwrap_or(false);
    if !is_dir {
        access &= FS_FILE_RIGHTS;
    }
    if access == 0 {
        return Ok(());
    }
    let attr = PathBeneathAttr { allowed_access: access, parent_fd: fd.as_raw_fd() };
    // SAFETY: valid ruleset descriptor and attribute pointer for the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            LANDLOCK_RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0u32,
        )
    };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// The roots to allow reading: `/` minus the protected paths. Landlock only
/// adds rights, so a protected path is cut out by allowing each sibling on
/// the way down to it instead of its ancestor.
pub fn read_roots(protected: &[PathBuf]) -> Vec<PathBuf> {
    /// A directory this big on the way to a protected path is not
    /// enumerated (it is left unreadable instead).
    const MAX_ENTRIES: usize = 20_000;
    fn walk(dir: &Path, protected: &[PathBuf], out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for (i, e) in entries.enumerate() {
            if i >= MAX_ENTRIES {
                return;
            }
            let Ok(e) = e else { continue };
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            // A symlink's target is covered (or not) by its own location.
            if ft.is_symlink() || protected.iter().any(|h| h == &p) {
                continue;
            }
            if ft.is_dir() && protected.iter().any(|h| h.starts_with(&p)) {
                walk(&p, protected, out);
            } else {
                out.push(p);
            }
        }
    }
    let root = PathBuf::from("/");
    if protected.iter().all(|p| p == &root || !p.starts_with(&root)) {
        return vec![root];
    }
    let mut out = Vec::new();
    walk(&root, protected, &mut out);
    out
}

/// Builds the Landlock ruleset (in the parent).
pub fn landlock_ruleset(abi: i32, p: &FsPolicy<'_>) -> io::Result<OwnedFd> {
    let all = fs_rights(abi);
    let attr = RulesetAttr {
        handled_access_fs: all,
        handled_access_net: if abi >= 4 && !p.allow_tcp { NET_BIND_TCP | NET_CONNECT_TCP } else { 0 },
        scoped: if abi >= 6 { SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL } else { 0 },
    };
    // SAFETY: valid attribute pointer and size; the kernel checks that the
    // fields it does not know are zero.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            std::mem::size_of::<RulesetAttr>(),
            0u32,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor (close-on-exec) owned by nobody else.
    let ruleset = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let read = (FS_EXECUTE | FS_READ_FILE | FS_READ_DIR | FS_IOCTL_DEV) & all;
    for root in read_roots(p.protected) {
        // Unreadable or vanished entries are simply not allowed.
        let _ = add_path_rule(&ruleset, &root, read);
    }
    fn ctx(d: &Path) -> impl FnOnce(io::Error) -> io::Error + '_ {
        move |e| io::Error::new(e.kind(), format!("{}: {e}", d.display()))
    }
    for d in p.ro {
        add_path_rule(&ruleset, d, read).map_err(ctx(d))?;
    }
    for d in p.rw.iter().map(PathBuf::as_path).chain([p.tmp]) {
        add_path_rule(&ruleset, d, all).map_err(ctx(d))?;
    }
    let null = Path::new("/dev/null");
    add_path_rule(&ruleset, null, (FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV) & all)
        .map_err(ctx(null))?;
    Ok(ruleset)
}

// ---- seccomp ----

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: Option<u32> = Some(0xc000_003e);
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: Option<u32> = Some(0xc000_00b7);
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const AUDIT_ARCH: Option<u32> = None;

/// One classic BPF instruction (`struct sock_filter`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SockFilter {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

#[repr(C)]
struct SockFprog {
    len: u16,
    filter: *const SockFilter,
}

const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x15;
#[cfg(target_arch = "x86_64")]
const JGE_K: u16 = 0x35;
const RET_K: u16 = 0x06;
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ERRNO: u32 = 0x0005_0000;

fn ins(code: u16, jt: u8, jf: u8, k: u32) -> SockFilter {
    SockFilter { code, jt, jf, k }
}

/// The seccomp program (see the module docs). `None` on an architecture
/// without a filter.
pub fn seccomp_program(deny_inet: bool) -> Option<Vec<SockFilter>> {
    let arch = AUDIT_ARCH?;
    let eperm = RET_ERRNO | libc::EPERM as u32;
    let mut p = vec![
        // seccomp_data.arch: another ABI (e.g. i386 through int 0x80) could
        // use other syscall numbers: kill it.
        ins(LD_W_ABS, 0, 0, 4),
        ins(JEQ_K, 1, 0, arch),
        ins(RET_K, 0, 0, RET_KILL_PROCESS),
        // seccomp_data.nr
        ins(LD_W_ABS, 0, 0, 0),
    ];
    #[cfg(target_arch = "x86_64")]
    {
        // The x32 ABI numbers syscalls from 0x40000000.
        p.push(ins(JGE_K, 0, 1, 0x4000_0000));
        p.push(ins(RET_K, 0, 0, eperm));
    }
    for nr in [libc::SYS_setsid, libc::SYS_setpgid, libc::SYS_io_uring_setup] {
        p.push(ins(JEQ_K, 0, 1, nr as u32));
        p.push(ins(RET_K, 0, 0, eperm));
    }
    if deny_inet {
        let eacces = RET_ERRNO | libc::EACCES as u32;
        p.push(ins(JEQ_K, 1, 0, libc::SYS_socket as u32));
        p.push(ins(RET_K, 0, 0, RET_ALLOW));
        // seccomp_data.args[0] (low half; both arches are little-endian).
        p.push(ins(LD_W_ABS, 0, 0, 16));
        for domain in [libc::AF_INET, libc::AF_INET6, libc::AF_PACKET] {
            p.push(ins(JEQ_K, 0, 1, domain as u32));
            p.push(ins(RET_K, 0, 0, eacces));
        }
    }
    p.push(ins(RET_K, 0, 0, RET_ALLOW));
    Some(p)
}

// ---- resource limits ----

/// Resource limits applied in the child.
#[derive(Debug, Clone)]
pub struct Rlimits(Vec<(Resource, libc::rlimit)>);

#[cfg(target_env = "gnu")]
type Resource = libc::__rlimit_resource_t;
#[cfg(not(target_env = "gnu"))]
type Resource = libc::c_int;

/// CPU seconds per process (SIGXCPU, then SIGKILL 10 s later).
pub const CPU_SECONDS: u64 = 60 * 60;
/// Largest file a process may write.
pub const FILE_SIZE: u64 = 4 << 30;
/// Address space per process: a guard against runaway allocation, not a
/// memory quota (that needs cgroups). Generous, because runtimes reserve far
/// more address space than they use (wasmtime ~4 GiB per instance, V8, Go);
/// tools that reserve terabytes (AddressSanitizer) cannot run.
pub const ADDRESS_SPACE: u64 = 32 << 30;
/// Tasks (processes and threads) the user may add while the command runs:
/// a fork-bomb cap. `RLIMIT_NPROC` counts every task of the user, so the
/// limit is the current count plus this; the kernel does not apply it to
/// root.
pub const EXTRA_TASKS: u64 = 2048;

impl Rlimits {
    /// Sensible defaults, never above the host's own hard limits.
    pub fn defaults() -> Self {
        let nproc = count_user_tasks() + EXTRA_TASKS;
        let want: [(Resource, u64, u64); 5] = [
            (libc::RLIMIT_CPU, CPU_SECONDS, CPU_SECONDS + 10),
            (libc::RLIMIT_FSIZE, FILE_SIZE, FILE_SIZE),
            (libc::RLIMIT_AS, ADDRESS_SPACE, ADDRESS_SPACE),
            (libc::RLIMIT_NPROC, nproc, nproc),
            (libc::RLIMIT_CORE, 0, 0),
        ];
        let mut out = Vec::new();
        for (res, soft, hard) in want {
            let mut cur = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            // SAFETY: valid out pointer.
            if unsafe { libc::getrlimit(res, &mut cur) } != 0 {
                continue;
            }
            let max = hard.min(cur.rlim_max);
            out.push((res, libc::rlimit { rlim_cur: soft.min(max), rlim_max: max }));
        }
        Self(out)
    }
}

/// Tasks (threads) of this user's processes, as `RLIMIT_NPROC` counts them.
fn count_user_tasks() -> u64 {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: no arguments.
    let uid = unsafe { libc::getuid() };
    let Ok(rd) = std::fs::read_dir("/proc") else { return 1 << 16 };
    rd.filter_map(Result::ok)
        .filter(|e| e.file_name().as_bytes().iter().all(u8::is_ascii_digit))
        .filter(|e| e.metadata().is_ok_and(|m| m.uid() == uid))
        .map(|e| {
            // Field 20 of `stat`, `num_threads`: the 18th after `comm`.
            std::fs::read_to_string(e.path().join("stat"))
                .ok()
                .and_then(|s| s.rsplit_once(") ").and_then(|(_, rest)| rest.split(' ').nth(17)?.parse::<u64>().ok()))
                .unwrap_or(1)
        })
        .sum()
}

// ---- the child side ----

/// Everything the child applies before `exec`, prepared in the parent.
pub struct ChildSetup {
    /// The Landlock ruleset to enforce (`None`: no Landlock).
    pub ruleset: Option<OwnedFd>,
    /// The seccomp program (`None`: no filter).
    pub seccomp: Option<Vec<SockFilter>>,
    /// Resource limits.
    pub rlimits: Rlimits,
    /// Drop every capability (always, unless the sandbox is off).
    pub drop_caps: bool,
    /// Kill the child when the host dies: `Some(host pid)`.
    pub parent_death: Option<libc::pid_t>,
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
/// A zero `unsigned long` argument of the variadic `prctl`.
const Z: libc::c_ulong = 0;

fn check(r: libc::c_long) -> io::Result<()> {
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

impl ChildSetup {
    /// Runs in the child between `fork` and `exec`.
    ///
    /// # Safety
    ///
    /// Only call it there: it changes the calling process irreversibly. It
    /// makes only async-signal-safe system calls (no allocation, no locks).
    pub unsafe fn apply(&self) -> io::Result<()> {
        // SAFETY (whole block): plain system calls on this process, with
        // pointers to live values of the layout the kernel expects.
        unsafe {
            check(libc::setsid() as libc::c_long)?;
            // Nothing the host opened leaks into the command.
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC);
            if let Some(ppid) = self.parent_death {
                check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, Z, Z, Z) as libc::c_long)?;
                if libc::getppid() != ppid {
                    libc::_exit(137);
                }
            }
            for (res, lim) in &self.rlimits.0 {
                check(libc::setrlimit(*res, lim) as libc::c_long)?;
            }
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, Z, Z, Z) as libc::c_long)?;
            if self.drop_caps {
                for cap in 0..64 as libc::c_ulong {
                    // EINVAL past the last capability; EPERM without
                    // CAP_SETPCAP (then there is nothing to drop).
                    libc::prctl(libc::PR_CAPBSET_DROP, cap, Z, Z, Z);
                }
                libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong, Z, Z, Z);
                let hdr = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
                let data = [
                    CapData { effective: 0, permitted: 0, inheritable: 0 },
                    CapData { effective: 0, permitted: 0, inheritable: 0 },
                ];
                check(libc::syscall(libc::SYS_capset, &hdr as *const CapHeader, data.as_ptr()))?;
            }
            if let Some(fd) = &self.ruleset {
                check(libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0u32))?;
            }
            if let Some(prog) = &self.seccomp {
                let fprog = SockFprog { len: prog.len() as u16, filter: prog.as_ptr() };
                check(libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER as libc::c_ulong,
                    &fprog as *const SockFprog,
                    Z,
                    Z,
                ) as libc::c_long)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn read_roots_cut_out_protected_paths() {
        assert_eq!(read_roots(&[]), vec![PathBuf::from("/")]);
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(base.join("a/secret")).unwrap();
        std::fs::create_dir_all(base.join("a/open")).unwrap();
        std::fs::write(base.join("b"), "x").unwrap();
        let roots = read_roots(&[base.join("a/secret")]);
        assert!(roots.contains(&base.join("a/open")));
        assert!(roots.contains(&base.join("b")));
        assert!(!roots.iter().any(|r| base.join("a/secret").starts_with(r)), "{roots:?}");
        assert!(roots.contains(&PathBuf::from("/usr")) || !Path::new("/usr").exists());
    }

    #[test]
    fn counts_this_process_threads() {
        let _t = std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_millis(300)));
        assert!(count_user_tasks() >= 2);
    }

    #[test]
    fn seccomp_program_shape() {
        if let Some(p) = seccomp_program(true) {
            assert_eq!(p.last().map(|i| i.k), Some(RET_ALLOW));
            assert!(p.len() < 40);
        }
    }
}
