//! Native programs under the shell tool's OS sandbox: the host starts
//! long-lived helper processes (stdio MCP servers) with the same
//! confinement as `process.run` commands, but with their own grant instead
//! of a plugin's.
//!
//! A [`NativeCommand`] with a [`NativeGrant`] starts (Linux) in a new session
//! and process group, with no inherited descriptors beyond stdio, rlimits,
//! `no_new_privs`, no capabilities, a Landlock domain (writes only in the
//! grant's read-write directories, a private tmp directory and `/dev/null`;
//! reads everywhere except the [protected paths](super::protect_paths),
//! unless a read-only or read-write grant names them; TCP denied without
//! `network`) and the seccomp filter (no IPv4/IPv6/packet sockets without
//! `network`, no `setsid`/`setpgid`, no io_uring). Its environment is
//! exactly the command's `env`, plus `HOME` and `TMPDIR` set to the private
//! tmp directory unless `env` names them. Without a grant (`sandbox: None`)
//! the program still gets its own process group, rlimits and
//! `no_new_privs`, nothing else.
//!
//! The process group is killed (SIGKILL) when the [`NativeProcess`] is
//! dropped, at host exit ([`super::kill_all`]), and when the host process
//! dies (`PR_SET_PDEATHSIG`; the fork happens on a thread that lives as long
//! as the process, since the signal follows the forking thread).

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::Ordering;
use std::sync::mpsc;

use tokio::net::unix::pipe;

use super::{NEXT_ID, Proc, capture, live, register_exit_hook, support};

/// What a confined native program may do beyond reading the filesystem.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NativeGrant {
    /// Read-write directories (absolute; canonicalized when the process starts).
    pub rw: Vec<PathBuf>,
    /// Read-only directories: readable even under a protected path.
    pub ro: Vec<PathBuf>,
    /// TCP and UDP to any host (the kernel cannot filter by host).
    pub network: bool,
}

/// A program to start.
#[derive(Debug, Clone)]
pub struct NativeCommand {
    /// The program (looked up in the `PATH` of `env` when it has no `/`).
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Working directory.
    pub cwd: PathBuf,
    /// The whole environment (nothing else is inherited).
    pub env: Vec<(OsString, OsString)>,
    /// `Some`: confined by this grant; `None`: unconfined.
    pub sandbox: Option<NativeGrant>,
}

/// Why a program did not start.
#[derive(Debug, thiserror::Error)]
pub enum NativeError {
    /// The OS sandbox is missing or cannot be set up here.
    #[error("{0}")]
    SandboxUnavailable(String),
    /// The grant is invalid (e.g. a directory that does not exist).
    #[error("{0}")]
    Invalid(String),
    /// Starting failed.
    #[error("{0}")]
    Failed(String),
}

/// The child's stdio, as async pipes.
#[derive(Debug)]
pub struct NativeStdio {
    /// Its stdin.
    pub stdin: pipe::Sender,
    /// Its stdout.
    pub stdout: pipe::Receiver,
    /// Its stderr.
    pub stderr: pipe::Receiver,
}

/// A started program, leader of its own process group. Dropping it kills
/// the group and reaps the leader on a thread.
pub struct NativeProcess {
    proc: Proc,
}

impl std::fmt::Debug for NativeProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeProcess").field("pid", &self.proc.pid).finish_non_exhaustive()
    }
}

impl NativeProcess {
    /// Starts `cmd` (see the module docs). Needs the host's async runtime.
    pub fn spawn(cmd: NativeCommand) -> Result<(Self, NativeStdio), NativeError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(NativeError::Failed("processes need the host's async runtime".into()));
        }
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let mut env = cmd.env;
        let mut tmp = PathBuf::new();
        #[cfg(target_os = "linux")]
        let setup = match &cmd.sandbox {
            None => super::sandbox::ChildSetup {
                ruleset: None,
                seccomp: None,
                rlimits: super::sandbox::Rlimits::defaults(),
                drop_caps: false,
                parent_death: Some(std::process::id() as libc::pid_t),
            },
            Some(grant) => {
                let abi = support().landlock.clone().map_err(NativeError::SandboxUnavailable)?;
                tmp = std::env::temp_dir().join(format!("wharf-native-{}-{id}", std::process::id()));
                let _ = std::fs::remove_dir_all(&tmp);
                capture::create_private_dir_all(&tmp)
                    .map_err(|e| NativeError::Failed(format!("cannot create {}: {e}", tmp.display())))?;
                match confine(abi, grant, &tmp) {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = std::fs::remove_dir_all(&tmp);
                        return Err(e);
                    }
                }
            }
        };
        #[cfg(not(target_os = "linux"))]
        if cmd.sandbox.is_some() {
            return Err(NativeError::SandboxUnavailable(
                support().landlock.clone().err().unwrap_or_else(|| "no OS sandbox".into()),
            ));
        }
        if cmd.sandbox.is_some() {
            for var in ["HOME", "TMPDIR"] {
                if !env.iter().any(|(k, _)| k == var) {
                    env.push((var.into(), tmp.clone().into_os_string()));
                }
            }
        }
        let mut c = std::process::Command::new(&cmd.program);
        c.args(&cmd.args)
            .current_dir(&cmd.cwd)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        #[cfg(target_os = "linux")]
        {
            use std::os::unix::process::CommandExt;
            // SAFETY: `apply` makes only async-signal-safe system calls.
            unsafe {
                c.pre_exec(move || setup.apply());
            }
        }
        register_exit_hook();
        let cleanup = |tmp: &PathBuf| {
            if !tmp.as_os_str().is_empty() {
                let _ = std::fs::remove_dir_all(tmp);
            }
        };
        let mut child = match fork_on_spawner(c) {
            Ok(child) => child,
            Err(e) => {
                cleanup(&tmp);
                return Err(NativeError::Failed(format!("cannot start `{}`: {e}", cmd.program.to_string_lossy())));
            }
        };
        let pid = child.id() as i32;
        live().insert(pid);
        let stdio = (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let proc = Proc::new(child, pid, tmp);
        // On an error `proc` drops: the group is killed.
        let (Some(i), Some(o), Some(e)) = stdio else {
            return Err(NativeError::Failed("stdio pipes missing".into()));
        };
        let pipes = async_pipes(i, o, e).map_err(|e| NativeError::Failed(format!("stdio pipes: {e}")))?;
        Ok((Self { proc }, pipes))
    }

    /// The leader's process id (also the process group id).
    pub fn pid(&self) -> u32 {
        self.proc.pid as u32
    }

    /// Waits until the leader exits (without reaping it).
    pub async fn exited(&self) {
        self.proc.exited().await
    }

    /// Sends SIGTERM to the process group (if its leader is not reaped yet).
    pub fn terminate(&self) {
        let live = live();
        if live.contains(&self.proc.pid) {
            // SAFETY: plain syscall; the group id is reserved while its
            // leader is unreaped (see `kill_group`).
            unsafe { libc::killpg(self.proc.pid, libc::SIGTERM) };
        }
    }

    /// SIGKILLs the process group (if its leader is not reaped yet).
    pub fn kill(&self) {
        self.proc.kill();
    }

    /// Kills what is left of the group and reaps the (exited) leader.
    pub async fn wait(mut self) -> Option<ExitStatus> {
        self.proc.exited().await;
        self.proc.kill();
        self.proc.reap()
    }
}

fn async_pipes(
    i: std::process::ChildStdin,
    o: std::process::ChildStdout,
    e: std::process::ChildStderr,
) -> std::io::Result<NativeStdio> {
    Ok(NativeStdio {
        stdin: pipe::Sender::from_owned_fd(OwnedFd::from(i))?,
        stdout: pipe::Receiver::from_owned_fd(OwnedFd::from(o))?,
        stderr: pipe::Receiver::from_owned_fd(OwnedFd::from(e))?,
    })
}

#[cfg(target_os = "linux")]
fn confine(abi: i32, grant: &NativeGrant, tmp: &std::path::Path) -> Result<super::sandbox::ChildSetup, NativeError> {
    let canon = |dirs: &[PathBuf]| -> Result<Vec<PathBuf>, NativeError> {
        dirs.iter()
            .map(|d| {
                let c = std::fs::canonicalize(d)
                    .map_err(|e| NativeError::Invalid(format!("granted directory {}: {e}", d.display())))?;
                if !c.is_dir() {
                    return Err(NativeError::Invalid(format!("granted path {} is not a directory", d.display())));
                }
                Ok(c)
            })
            .collect()
    };
    let rw = canon(&grant.rw)?;
    let ro = canon(&grant.ro)?;
    let protected = super::protected_paths();
    let policy = super::sandbox::FsPolicy { rw: &rw, ro: &ro, tmp, protected: &protected, allow_tcp: grant.network };
    let ruleset = super::sandbox::landlock_ruleset(abi, &policy)
        .map_err(|e| NativeError::SandboxUnavailable(format!("cannot set up Landlock: {e}")))?;
    let seccomp = if support().seccomp { super::sandbox::seccomp_program(!grant.network) } else { None };
    Ok(super::sandbox::ChildSetup {
        ruleset: Some(ruleset),
        seccomp,
        rlimits: super::sandbox::Rlimits::defaults(),
        drop_caps: true,
        parent_death: Some(std::process::id() as libc::pid_t),
    })
}

type SpawnJob = (std::process::Command, mpsc::Sender<std::io::Result<std::process::Child>>);

/// Forks on a thread that lives as long as the process: `PR_SET_PDEATHSIG`
/// fires when the *thread* that forked exits, and async runtimes retire
/// their threads.
fn fork_on_spawner(cmd: std::process::Command) -> std::io::Result<std::process::Child> {
    static SPAWNER: OnceLock<Option<std::sync::Mutex<mpsc::Sender<SpawnJob>>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnJob>();
        let started = std::thread::Builder::new().name("wharf-spawner".into()).spawn(move || {
            while let Ok((mut cmd, reply)) = rx.recv() {
                let r = cmd.spawn();
                // The parent's copies of the pipes' other ends and the
                // ruleset go with the command.
                drop(cmd);
                let _ = reply.send(r);
            }
        });
        started.ok().map(|_| std::sync::Mutex::new(tx))
    });
    let Some(tx) = spawner else {
        return Err(std::io::Error::other("cannot start the spawner thread"));
    };
    let (reply, answer) = mpsc::channel();
    tx.lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((cmd, reply))
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?;
    answer.recv().map_err(|_| std::io::Error::other("the spawner thread is gone"))?
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::process::{Level, sandbox_level};

    fn sh(script: &str, sandbox: Option<NativeGrant>, cwd: &std::path::Path) -> NativeCommand {
        NativeCommand {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), script.into()],
            cwd: cwd.to_path_buf(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            sandbox,
        }
    }

    async fn output(cmd: NativeCommand) -> String {
        let (p, mut io) = NativeProcess::spawn(cmd).unwrap();
        io.stdin.write_all(b"in\n").await.unwrap();
        drop(io.stdin);
        let mut out = String::new();
        io.stdout.read_to_string(&mut out).await.unwrap();
        p.wait().await;
        out
    }

    #[tokio::test]
    async fn confined_writes_only_where_granted() {
        if sandbox_level().0 == Level::None {
            let ws = tempfile::tempdir().unwrap();
            let r = NativeProcess::spawn(sh("true", Some(NativeGrant::default()), ws.path()));
            assert!(matches!(r, Err(NativeError::SandboxUnavailable(_))), "{r:?}");
            return;
        }
        let ws = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let grant = NativeGrant { rw: vec![ws.path().to_path_buf()], ..NativeGrant::default() };
        let script = format!(
            "read l; echo $l; echo a > ok.txt && echo wrote; echo b > {}/no.txt 2>/dev/null || echo refused; \
             echo $HOME | grep -q wharf-native && echo private-home; grep -c NoNewPrivs:.1 /proc/self/status",
            other.path().display()
        );
        let out = output(sh(&script, Some(grant), ws.path())).await;
        assert_eq!(out, "in\nwrote\nrefused\nprivate-home\n1\n");
        assert!(ws.path().join("ok.txt").exists());
        assert!(!other.path().join("no.txt").exists());
        // Unconfined: the same write works.
        let out = output(sh(&script, None, ws.path())).await;
        assert!(out.starts_with("in\nwrote\n") && !out.contains("refused"), "{out}");
        assert!(other.path().join("no.txt").exists());
    }

    /// What the host does in `a_command_running_at_exit_leaves_no_tmp_directory`'s
    /// child process: start a confined command, print its private tmp
    /// directory, and exit with the command still running.
    #[test]
    #[ignore = "run in a child process by the test below"]
    fn exit_with_a_command_running() {
        let Some(ws) = std::env::var_os("WHARF_TEST_EXIT_WS") else { return };
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let grant = NativeGrant { rw: vec![ws.clone().into()], ..NativeGrant::default() };
            let (p, mut io) = NativeProcess::spawn(sh("echo $HOME; exec sleep 100", Some(grant), ws.as_ref())).unwrap();
            let mut line = Vec::new();
            let mut byte = [0u8; 1];
            while io.stdout.read(&mut byte).await.unwrap() == 1 && byte[0] != b'\n' {
                line.push(byte[0]);
            }
            println!("TMP={}", String::from_utf8(line).unwrap());
            // The host exits without dropping it, as on Ctrl-C.
            std::mem::forget(p);
            std::process::exit(0);
        });
    }

    #[test]
    fn a_command_running_at_exit_leaves_no_tmp_directory() {
        let ws = tempfile::tempdir().unwrap();
        if sandbox_level().0 == Level::None {
            let rt = tokio::runtime::Runtime::new().unwrap();
            let r = rt.block_on(async { NativeProcess::spawn(sh("true", Some(NativeGrant::default()), ws.path())) });
            assert!(matches!(r, Err(NativeError::SandboxUnavailable(_))), "{r:?}");
            return;
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "process::native::tests::exit_with_a_command_running", "--nocapture"])
            .env("WHARF_TEST_EXIT_WS", ws.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let tmp =
            stdout.lines().find_map(|l| l.strip_prefix("TMP=")).unwrap_or_else(|| panic!("no TMP line: {stdout}"));
        assert!(tmp.contains("wharf-native"), "{tmp}");
        assert!(!std::path::Path::new(tmp).exists(), "{tmp} is left behind");
    }

    #[tokio::test]
    async fn dropping_kills_the_group() {
        let ws = tempfile::tempdir().unwrap();
        let (p, mut io) = NativeProcess::spawn(sh("sleep 100 & echo $!; wait", None, ws.path())).unwrap();
        let mut buf = [0u8; 32];
        let n = io.stdout.read(&mut buf).await.unwrap();
        let child: i32 = std::str::from_utf8(&buf[..n]).unwrap().trim().parse().unwrap();
        // SAFETY: signal 0 only checks that the process exists.
        assert_eq!(unsafe { libc::kill(child, 0) }, 0);
        drop(p);
        // Gone, or a zombie nobody reaped yet (a container's init may not).
        let gone = || {
            let state = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
            state.is_empty() || state.contains(") Z")
        };
        let t0 = std::time::Instant::now();
        while !gone() && t0.elapsed() < std::time::Duration::from_secs(5) {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(gone(), "the group's background child {child} survived");
    }

    #[tokio::test]
    async fn a_missing_program_is_an_error() {
        let ws = tempfile::tempdir().unwrap();
        let mut c = sh("true", None, ws.path());
        c.program = "/nonexistent/prog".into();
        let e = NativeProcess::spawn(c).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/prog"), "{e}");
    }
}
