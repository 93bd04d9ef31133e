//! Symlinks a component creates must point inside its grant.
//!
//! The sandbox never follows a symlink out of a preopen, but a link a
//! component leaves in a read-write grant persists on the host, where native
//! tools (the shell, the user's editor) do follow it. So the host refuses,
//! with `not-permitted`, every `wasi:filesystem` call that would leave a
//! symlink whose target can resolve outside the directory the link sits in:
//!
//! - `symlink-at` with an absolute target, an empty one, or one with a `..`
//!   component;
//! - `link-at` and `rename-at` of an existing symlink whose target breaks the
//!   same rule (a relative target means something else at the new place).
//!
//! The rule is lexical and about the link's own directory, not the grant
//! root, on purpose: a target without `..` resolves below the link's
//! directory wherever the link or any directory above it is later moved or
//! hard-linked, and through any chain of such links, so no sequence of
//! allowed calls builds an outward link. A target like `../sibling` that
//! would stay inside the grant is refused too — the price of a rule that
//! survives renames. Symlinks that were already in the grant (placed by the
//! user) are the user's own; the host does not rewrite them.
//!
//! The three functions are redefined in the linker (shadowing the
//! wasmtime-wasi definitions) and delegate to them once the check passes.
//!
//! **No host I/O outlives the call's deadline.** File operations run on the
//! calling thread (`WasiCtxBuilder::allow_blocking_current_thread`, the fast
//! path: a hop to tokio's blocking pool per `open`, `stat` and `read` was
//! most of a tool call's wall time). That is safe only for what cannot
//! block, so `open-at` is redefined too ([`open_at`]): it opens with
//! `O_NONBLOCK` (which never waits, not even for a FIFO without a writer),
//! looks at what it opened and clears the flag again. Regular files and
//! directories keep the fast path; anything else — a FIFO, a device, a
//! socket — gets a handle whose reads and writes run on the blocking pool,
//! where the call's wall-clock deadline still fires while the read waits
//! (the thread stays until the read returns, but no runtime worker waits
//! with it). A granted directory on a filesystem not known to be local
//! ([`is_local_fs`]: NFS, SMB, FUSE, …) puts every file operation of the
//! store on the blocking pool, opens included. Handles on the blocking
//! pool are bounded process-wide ([`SLOW_HANDLES_MAX`]): a component cannot
//! park every thread of the pool on pipes that never speak.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::filesystem::{Descriptor, Dir, File, WasiFilesystemCtxView, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::filesystem::types::{
    self as fs, DescriptorFlags, DescriptorType, ErrorCode, HostDescriptor, OpenFlags, PathFlags,
};
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream, FsError, FsResult};
use wasmtime_wasi::{FsPerms, OpenMode};

use crate::state::HostState;

/// The `wasi:filesystem/types` instance wasmtime-wasi defines (its WIT
/// package version); guests built against any 0.2.x link to it.
const TYPES: &str = "wasi:filesystem/types@0.2.12";

/// Why a symlink target is refused, if it is: it must be a non-empty
/// relative path without `..` components.
pub fn symlink_target_refusal(target: &str) -> Option<&'static str> {
    if target.is_empty() {
        Some("the target is empty")
    } else if target.starts_with('/') {
        Some("the target is an absolute path")
    } else if target.split('/').any(|c| c == "..") {
        Some("the target climbs out of the link's directory with `..`")
    } else {
        None
    }
}

/// Redefines `symlink-at`, `link-at` and `rename-at` with the check in front,
/// and `open-at` and the three `*-via-stream` functions (see the module
/// doc). Call after `wasmtime_wasi::p2::add_to_linker_async`.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> anyhow::Result<()> {
    // Prove the instance and function exist (defining them again without
    // shadowing must fail); otherwise a wasmtime-wasi upgrade would leave the
    // guard in an instance nobody links to.
    {
        let mut probe = linker.instance(TYPES)?;
        if probe.func_wrap_async("[method]descriptor.symlink-at", symlink_at).is_ok() {
            anyhow::bail!("wasmtime-wasi does not define `{TYPES}`: the symlink guard needs updating");
        }
    }
    linker.allow_shadowing(true);
    let res = (|| {
        let mut inst = linker.instance(TYPES)?;
        inst.func_wrap_async("[method]descriptor.symlink-at", symlink_at)?;
        inst.func_wrap_async("[method]descriptor.link-at", link_at)?;
        inst.func_wrap_async("[method]descriptor.rename-at", rename_at)?;
        inst.func_wrap_async("[method]descriptor.open-at", open_at)?;
        inst.func_wrap("[method]descriptor.read-via-stream", read_via_stream)?;
        inst.func_wrap("[method]descriptor.write-via-stream", write_via_stream)?;
        inst.func_wrap("[method]descriptor.append-via-stream", append_via_stream)?;
        anyhow::Ok(())
    })();
    linker.allow_shadowing(false);
    res
}

type Out<'a, R> = Box<dyn Future<Output = wasmtime::Result<(Result<R, ErrorCode>,)>> + Send + 'a>;

fn symlink_at(
    mut caller: StoreContextMut<'_, HostState>,
    (fd, target, link): (Resource<Descriptor>, String, String),
) -> Out<'_, ()> {
    Box::new(async move {
        if let Some(why) = symlink_target_refusal(&target) {
            tracing::debug!("refused symlink `{link}` -> `{target}`: {why}");
            return Ok((Err(ErrorCode::NotPermitted),));
        }
        let mut view = caller.data_mut().filesystem();
        let r = HostDescriptor::symlink_at(&mut view, fd, target, link).await;
        Ok((convert(&mut view, r)?,))
    })
}

fn link_at(
    mut caller: StoreContextMut<'_, HostState>,
    (fd, flags, old, new_fd, new): (Resource<Descriptor>, PathFlags, String, Resource<Descriptor>, String),
) -> Out<'_, ()> {
    Box::new(async move {
        let mut view = caller.data_mut().filesystem();
        if moves_outward_link(&mut view, &fd, &old).await {
            return Ok((Err(ErrorCode::NotPermitted),));
        }
        let r = HostDescriptor::link_at(&mut view, fd, flags, old, new_fd, new).await;
        Ok((convert(&mut view, r)?,))
    })
}

fn rename_at(
    mut caller: StoreContextMut<'_, HostState>,
    (fd, old, new_fd, new): (Resource<Descriptor>, String, Resource<Descriptor>, String),
) -> Out<'_, ()> {
    Box::new(async move {
        let mut view = caller.data_mut().filesystem();
        if moves_outward_link(&mut view, &fd, &old).await {
            return Ok((Err(ErrorCode::NotPermitted),));
        }
        let r = HostDescriptor::rename_at(&mut view, fd, old, new_fd, new).await;
        Ok((convert(&mut view, r)?,))
    })
}

/// Whether `path` (under `fd`, not followed) is a symlink whose target the
/// rule refuses. An unreadable link counts as refused; a path that does not
/// exist is left to the real call to report.
async fn moves_outward_link(view: &mut WasiFilesystemCtxView<'_>, fd: &Resource<Descriptor>, path: &str) -> bool {
    let borrow = || Resource::<Descriptor>::new_borrow(fd.rep());
    match HostDescriptor::stat_at(view, borrow(), PathFlags::empty(), path.to_string()).await {
        Ok(st) if st.type_ == DescriptorType::SymbolicLink => {
            match HostDescriptor::readlink_at(view, borrow(), path.to_string()).await {
                Ok(target) => {
                    let why = symlink_target_refusal(&target);
                    if let Some(why) = why {
                        tracing::debug!("refused moving symlink `{path}` -> `{target}`: {why}");
                    }
                    why.is_some()
                }
                Err(_) => true,
            }
        }
        _ => false,
    }
}

/// Most handles whose I/O runs on tokio's blocking pool (on FIFOs, devices,
/// sockets, or anything under a granted directory that is not on a local
/// filesystem), plus opens running there, the whole process holds at once:
/// descriptors, their streams, and reads still waiting after the call that
/// started them ended. Past it, such an `open-at` (or a new stream on such a
/// handle) fails with `busy`. Well below tokio's pool of 512 threads, so a
/// component cannot leave the pool without threads for everyone else.
pub const SLOW_HANDLES_MAX: usize = 64;

/// The handles on the blocking pool ([`SLOW_HANDLES_MAX`]): a weak reference
/// to each slow file (its strong count is the handles on it, read tasks
/// still running included), and opens under way there.
struct Slow {
    files: Vec<Weak<std::fs::File>>,
    opening: usize,
}

static SLOW: Mutex<Slow> = Mutex::new(Slow { files: Vec::new(), opening: 0 });

fn slow() -> MutexGuard<'static, Slow> {
    SLOW.lock().unwrap_or_else(|e| e.into_inner())
}

impl Slow {
    /// Handles held now (forgets files nobody holds any more).
    fn held(&mut self) -> usize {
        self.files.retain(|w| w.strong_count() > 0);
        self.files.iter().map(Weak::strong_count).sum::<usize>() + self.opening
    }

    /// Counts `file` among the slow ones, unless the budget is spent.
    fn admit(&mut self, file: &Arc<std::fs::File>) -> bool {
        if self.held() >= SLOW_HANDLES_MAX {
            return false;
        }
        self.files.push(Arc::downgrade(file));
        true
    }

    /// Whether `file` is a slow one.
    fn holds(&self, file: &Arc<std::fs::File>) -> bool {
        let p = Arc::as_ptr(file);
        self.files.iter().any(|w| std::ptr::eq(w.as_ptr(), p))
    }
}

/// Handles on the blocking pool held now, process-wide (for tests and
/// diagnostics).
pub fn slow_handles() -> usize {
    slow().held()
}

/// One open running on the blocking pool, counted while it runs.
struct Opening;

impl Opening {
    fn start() -> Option<Self> {
        let mut s = slow();
        if s.held() >= SLOW_HANDLES_MAX {
            return None;
        }
        s.opening += 1;
        Some(Opening)
    }
}

impl Drop for Opening {
    fn drop(&mut self) {
        let mut s = slow();
        s.opening = s.opening.saturating_sub(1);
    }
}

/// An `open-at` request, checked and translated as wasmtime-wasi does, with
/// `O_NONBLOCK` added.
struct OpenPlan {
    opts: cap_primitives::fs::OpenOptions,
    mode: OpenMode,
    want_dir: bool,
}

impl OpenPlan {
    fn new(
        path_flags: PathFlags,
        oflags: OpenFlags,
        flags: DescriptorFlags,
        perms: FsPerms,
    ) -> Result<Self, ErrorCode> {
        use cap_primitives::fs::{FollowSymlinks, OpenOptionsExt};
        let mut opts = cap_primitives::fs::OpenOptions::new();
        let mut mode = OpenMode::empty();
        let mut create = false;
        if oflags.contains(OpenFlags::CREATE) {
            if oflags.contains(OpenFlags::EXCLUSIVE) {
                opts.create_new(true);
            } else {
                opts.create(true);
            }
            create = true;
            opts.write(true);
            mode |= OpenMode::WRITE;
        }
        if oflags.contains(OpenFlags::TRUNCATE) {
            opts.truncate(true).write(true);
            mode |= OpenMode::WRITE;
        }
        if flags.contains(DescriptorFlags::READ) {
            opts.read(true);
            mode |= OpenMode::READ;
        }
        if flags.contains(DescriptorFlags::WRITE) {
            opts.write(true);
            mode |= OpenMode::WRITE;
        } else {
            // As wasmtime-wasi: open for reading at least; the permissions
            // refuse what the descriptor was not opened for.
            opts.read(true);
            mode |= OpenMode::READ;
        }
        opts._cap_fs_ext_follow(if path_flags.contains(PathFlags::SYMLINK_FOLLOW) {
            FollowSymlinks::Yes
        } else {
            FollowSymlinks::No
        });
        if flags.intersects(
            DescriptorFlags::FILE_INTEGRITY_SYNC
                | DescriptorFlags::DATA_INTEGRITY_SYNC
                | DescriptorFlags::REQUESTED_WRITE_SYNC,
        ) {
            return Err(ErrorCode::Unsupported);
        }
        let want_dir = oflags.contains(OpenFlags::DIRECTORY);
        if want_dir && oflags.intersects(OpenFlags::CREATE | OpenFlags::EXCLUSIVE | OpenFlags::TRUNCATE) {
            return Err(ErrorCode::Invalid);
        }
        if perms.write_not_permitted() && (create || mode.contains(OpenMode::WRITE)) {
            return Err(ErrorCode::NotPermitted);
        }
        // Never waits in `open`: not for a FIFO's other end, not for a
        // device (cleared once open, below).
        opts.custom_flags(libc::O_NONBLOCK);
        Ok(Self { opts, mode, want_dir })
    }

    /// Opens `path` under `dir` (sandboxed like wasmtime-wasi's own open) and
    /// tells what it is; may run on any thread.
    fn open(&self, dir: &std::fs::File, path: &str) -> std::io::Result<Opened> {
        let file = cap_primitives::fs::open(dir, Path::new(path), &self.opts)?;
        let ty = file.metadata()?.file_type();
        set_blocking(&file)?;
        Ok(if ty.is_dir() {
            Opened::Dir(file)
        } else if self.want_dir {
            Opened::NotDir
        } else {
            Opened::File { regular: ty.is_file(), file }
        })
    }
}

/// What [`OpenPlan::open`] found.
enum Opened {
    Dir(std::fs::File),
    File { file: std::fs::File, regular: bool },
    NotDir,
}

/// Clears the `O_NONBLOCK` the file was opened with. `F_SETFL` sets only the
/// status flags `O_APPEND`, `O_ASYNC`, `O_DIRECT`, `O_NOATIME` and
/// `O_NONBLOCK`, and `open-at` sets none but the last: clearing all is one
/// system call.
#[cfg(unix)]
fn set_blocking(file: &std::fs::File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: `fcntl(F_SETFL)` on a descriptor this function borrows open;
    // it reads no memory.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETFL, 0) } == -1 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Filesystems (`statfs` magic numbers) on which an open, a `stat` or a read
/// of a regular file does not wait on anything but the local machine.
#[cfg(target_os = "linux")]
const LOCAL_FS: [i64; 18] = [
    0xEF53,      // ext2/3/4
    0x5846_5342, // xfs
    0x9123_683E, // btrfs
    0x0102_1994, // tmpfs (and devtmpfs)
    0x794C_7630, // overlayfs
    0x2FC1_2FC1, // zfs
    0xF2F5_2010, // f2fs
    0x8584_58F6, // ramfs
    0xCA45_1A4E, // bcachefs
    0x3153_464A, // jfs
    0x5265_4973, // reiserfs
    0x7371_7368, // squashfs
    0x9660,      // iso9660
    0x4D44,      // vfat
    0x2011_BAB0, // exfat
    0x5346_544E, // ntfs3
    0x3434,      // nilfs2
    0xE0F5_E1E2, // erofs
];

/// Whether `path` is on a filesystem known to be local (see [`LOCAL_FS`]);
/// `false` for network and FUSE filesystems, and where it cannot be told.
#[cfg(target_os = "linux")]
pub fn is_local_fs(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else { return false };
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path and `st` a buffer of the type the
    // call writes.
    if unsafe { libc::statfs(c.as_ptr(), st.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: `statfs` succeeded, so it filled `st`.
    let st = unsafe { st.assume_init() };
    // `f_type`'s width differs between targets (i64 on x86_64).
    #[allow(clippy::useless_conversion)]
    let ty = i64::from(st.f_type);
    LOCAL_FS.contains(&ty)
}

/// Whether `path` is on a filesystem known to be local: assumed elsewhere.
#[cfg(not(target_os = "linux"))]
pub fn is_local_fs(_path: &Path) -> bool {
    true
}

/// `open-at`, opening without waiting and choosing, by what was opened,
/// whether the new handle's I/O may run on the calling thread (see the
/// module doc). The checks and errors are wasmtime-wasi's.
fn open_at(
    mut caller: StoreContextMut<'_, HostState>,
    (fd, path_flags, path, oflags, flags): (Resource<Descriptor>, PathFlags, String, OpenFlags, DescriptorFlags),
) -> Out<'_, Resource<Descriptor>> {
    Box::new(async move {
        let on_pool = caller.data().fs_on_pool();
        let mut view = caller.data_mut().filesystem();
        let (dir, perms) = match view.table.get(&fd)? {
            Descriptor::Dir(d) => (d.dir.clone(), d.perms),
            Descriptor::File(_) => return Ok((Err(ErrorCode::NotDirectory),)),
        };
        let plan = match OpenPlan::new(path_flags, oflags, flags, perms) {
            Ok(p) => p,
            Err(code) => return Ok((Err(code),)),
        };
        let mode = plan.mode;
        let opened = if on_pool {
            let Some(opening) = Opening::start() else { return Ok((Err(ErrorCode::Busy),)) };
            let job = tokio::task::spawn_blocking(move || {
                let _opening = opening;
                plan.open(&dir, &path)
            });
            job.await.map_err(|e| wasmtime::Error::msg(format!("open-at on the blocking pool failed: {e}")))?
        } else {
            plan.open(&dir, &path)
        };
        let desc = match opened {
            Err(e) => return Ok((convert(&mut view, Err(FsError::from(e)))?,)),
            Ok(Opened::NotDir) => return Ok((Err(ErrorCode::NotDirectory),)),
            Ok(Opened::Dir(d)) => {
                let d = Dir::new(d, perms, mode, !on_pool);
                if on_pool && !slow().admit(&d.dir) {
                    return Ok((Err(ErrorCode::Busy),));
                }
                Descriptor::Dir(d)
            }
            Ok(Opened::File { file, regular }) => {
                let fast = regular && !on_pool;
                let f = File::new(file, perms, mode, fast);
                if !fast && !slow().admit(&f.file) {
                    return Ok((Err(ErrorCode::Busy),));
                }
                Descriptor::File(f)
            }
        };
        Ok((Ok(view.table.push(desc)?),))
    })
}

/// `busy` where `fd` is a slow file and the budget of handles on the
/// blocking pool is spent (a stream is one more handle, and its read can
/// wait there).
fn stream_refused(view: &WasiFilesystemCtxView<'_>, fd: &Resource<Descriptor>) -> Option<ErrorCode> {
    let Ok(Descriptor::File(f)) = view.table.get(fd) else { return None };
    let mut s = slow();
    (s.holds(&f.file) && s.held() >= SLOW_HANDLES_MAX).then_some(ErrorCode::Busy)
}

type SyncOut<R> = wasmtime::Result<(Result<R, ErrorCode>,)>;

fn read_via_stream(
    mut caller: StoreContextMut<'_, HostState>,
    (fd, offset): (Resource<Descriptor>, u64),
) -> SyncOut<Resource<DynInputStream>> {
    let mut view = caller.data_mut().filesystem();
    if let Some(code) = stream_refused(&view, &fd) {
        return Ok((Err(code),));
    }
    let r = HostDescriptor::read_via_stream(&mut view, fd, offset);
    Ok((convert(&mut view, r)?,))
}

fn write_via_stream(
    mut caller: StoreContextMut<'_, HostState>,
    (fd, offset): (Resource<Descriptor>, u64),
) -> SyncOut<Resource<DynOutputStream>> {
    let mut view = caller.data_mut().filesystem();
    if let Some(code) = stream_refused(&view, &fd) {
        return Ok((Err(code),));
    }
    let r = HostDescriptor::write_via_stream(&mut view, fd, offset);
    Ok((convert(&mut view, r)?,))
}

fn append_via_stream(
    mut caller: StoreContextMut<'_, HostState>,
    (fd,): (Resource<Descriptor>,),
) -> SyncOut<Resource<DynOutputStream>> {
    let mut view = caller.data_mut().filesystem();
    if let Some(code) = stream_refused(&view, &fd) {
        return Ok((Err(code),));
    }
    let r = HostDescriptor::append_via_stream(&mut view, fd);
    Ok((convert(&mut view, r)?,))
}

fn convert<R>(view: &mut WasiFilesystemCtxView<'_>, r: FsResult<R>) -> wasmtime::Result<Result<R, ErrorCode>> {
    match r {
        Ok(v) => Ok(Ok(v)),
        Err(e) => Ok(Err(fs::Host::convert_error_code(view, e)?)),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::os::fd::AsRawFd;
    use std::sync::Arc;

    use super::symlink_target_refusal as refusal;
    use super::{DescriptorFlags, FsPerms, OpenFlags, OpenPlan, Opened, PathFlags};

    fn mkfifo(path: &std::path::Path) {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    }

    fn open(dir: &std::fs::File, path: &str, flags: DescriptorFlags) -> std::io::Result<Opened> {
        OpenPlan::new(PathFlags::SYMLINK_FOLLOW, OpenFlags::empty(), flags, FsPerms::ReadWrite).unwrap().open(dir, path)
    }

    fn nonblocking(f: &std::fs::File) -> bool {
        // SAFETY: F_GETFL on an open descriptor.
        unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETFL) & libc::O_NONBLOCK != 0 }
    }

    #[test]
    fn opens_never_wait_and_tell_regular_files_from_pipes() {
        let tmp = tempfile::tempdir().unwrap();
        mkfifo(&tmp.path().join("pipe"));
        std::fs::write(tmp.path().join("file"), "x").unwrap();
        std::fs::create_dir(tmp.path().join("sub")).unwrap();
        let dir = std::fs::File::open(tmp.path()).unwrap();
        // A FIFO without a writer: opened for reading at once (a blocking
        // open would wait here for ever), blocking again once open.
        match open(&dir, "pipe", DescriptorFlags::READ).unwrap() {
            Opened::File { file, regular: false } => assert!(!nonblocking(&file)),
            _ => panic!("the FIFO is not a slow file"),
        }
        // For writing without a reader: refused at once, not waited on.
        assert!(open(&dir, "pipe", DescriptorFlags::WRITE).is_err());
        match open(&dir, "file", DescriptorFlags::READ).unwrap() {
            Opened::File { file, regular: true } => assert!(!nonblocking(&file)),
            _ => panic!("the regular file is not a regular file"),
        }
        assert!(matches!(open(&dir, "sub", DescriptorFlags::READ).unwrap(), Opened::Dir(_)));
        // The sandbox still holds.
        assert!(open(&dir, "../", DescriptorFlags::READ).is_err());
        assert!(!super::is_local_fs(&tmp.path().join("missing")), "unknown counts as not local");
    }

    #[test]
    fn handles_on_the_blocking_pool_are_bounded() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        std::fs::write(&path, "x").unwrap();
        let mut held = Vec::new();
        loop {
            let f = Arc::new(std::fs::File::open(&path).unwrap());
            if !super::slow().admit(&f) {
                break;
            }
            held.push(f);
            assert!(held.len() <= super::SLOW_HANDLES_MAX);
        }
        // A handle cloned (a stream, a read task) counts too.
        let extra = held[0].clone();
        held.pop();
        assert!(!super::slow().admit(&Arc::new(std::fs::File::open(&path).unwrap())));
        drop(extra);
        let f = Arc::new(std::fs::File::open(&path).unwrap());
        assert!(super::slow().admit(&f));
        assert!(super::slow().holds(&f) && !super::slow().holds(&Arc::new(std::fs::File::open(&path).unwrap())));
        drop((held, f));
        assert_eq!(super::slow_handles(), 0);
    }

    #[test]
    fn only_relative_downward_targets_pass() {
        for ok in ["a", "a/b", "./a", "a/./b", ".", "a..b", "..a", "a/b.."] {
            assert_eq!(refusal(ok), None, "{ok}");
        }
        for bad in ["", "/etc/passwd", "/", "..", "../x", "a/../b", "a/..", "../../etc/passwd", "a//../../b"] {
            assert!(refusal(bad).is_some(), "{bad}");
        }
    }
}
