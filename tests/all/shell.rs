//! The `shell` plugin through the runtime's `process` capability: the OS
//! sandbox confines writes, network, the environment and reads of protected
//! paths; timeouts and cancellation kill the whole process group; large
//! output is capped and spilled; background jobs belong to their plugin.
//!
//! On a machine without Landlock every test instead asserts the refusal path
//! (`SANDBOX_UNAVAILABLE`) and stops there; this machine and CI have it.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};
use wharf_core::plugin::ToolErrorCode;
use wharf_runtime::grants::{Access, DirGrant, Grant};
use wharf_runtime::process::{Level, sandbox_level};
use wharf_runtime::{CallContext, PluginSpec, PluginVersion, Runtime, RuntimeOptions};
use wharf_tests::plugins;

fn runtime() -> Arc<Runtime> {
    let cache = wharf_tests::target_dir().join("test-cache");
    Runtime::new(RuntimeOptions { cache_dir: Some(cache), ..Default::default() }).expect("creating the runtime")
}

fn load(rt: &Runtime, id: &str, grant: Grant) -> Arc<PluginVersion> {
    let spec = PluginSpec {
        id: id.into(),
        path: wharf_tests::plugin(plugins::SHELL),
        config: json!({}),
        grant,
        warm: false,
        on_invalid_config: Default::default(),
    };
    rt.load(&spec).expect("load shell")
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("creating a temp dir")
}

fn rw(path: &Path) -> DirGrant {
    DirGrant::new(path, Access::Rw).expect("granting the directory")
}

/// `process` plus read-write access to `ws`.
fn grant(ws: &Path) -> Grant {
    Grant { dirs: vec![rw(ws)], process: true, ..Grant::default() }
}

#[derive(Debug)]
struct Out {
    is_error: bool,
    code: Option<ToolErrorCode>,
    content: String,
    details: Value,
}

async fn call(v: &PluginVersion, tool: &str, args: Value) -> Out {
    let ctx = CallContext { session_id: "t".into(), call_id: "c".into(), ..CallContext::default() };
    match v.call_tool(tool, &args.to_string(), &ctx).await {
        Ok(o) => Out {
            is_error: o.is_error,
            code: o.error_code,
            content: o.content,
            details: o.details.unwrap_or(Value::Null),
        },
        Err(e) => Out { is_error: true, code: Some(e.code), content: e.message, details: Value::Null },
    }
}

async fn bash(v: &PluginVersion, command: &str) -> Out {
    call(v, "bash", json!({ "command": command })).await
}

/// False (after checking that commands are refused) when this machine has
/// no OS sandbox.
async fn sandboxed(v: &PluginVersion) -> bool {
    if sandbox_level().0 != Level::None {
        return true;
    }
    let out = bash(v, "echo hi").await;
    assert!(out.is_error, "ran without a sandbox: {out:?}");
    assert_eq!(out.code.as_deref(), Some("SANDBOX_UNAVAILABLE"), "{out:?}");
    wharf_tests::skip(
        &wharf_tests::current_test(),
        "no OS sandbox (Landlock) on this machine: only the refusal path was checked",
    );
    false
}

/// Whether a pid is gone (or a zombie waiting for its reaper).
fn dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

fn assert_dies(pid: u32, what: &str) {
    let t0 = Instant::now();
    while !dead(pid) {
        assert!(t0.elapsed() < Duration::from_secs(10), "{what} (pid {pid}) is still alive");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

#[tokio::test]
async fn writes_outside_the_granted_dirs_fail() {
    let rt = runtime();
    let ws = tempdir();
    let outside = tempdir();
    let v = load(&rt, "shell-writes", grant(ws.path()));
    if !sandboxed(&v).await {
        return;
    }
    let level = sandbox_level().0;
    let desc = &v.tools.iter().find(|t| t.name == "bash").unwrap_or_else(|| panic!("no bash tool")).description;
    assert!(desc.contains(&format!("Sandbox: {level}")), "{desc}");

    let inside = ws.path().join("in.txt");
    let out_file = outside.path().join("out.txt");
    let cmd = format!(
        "echo in > {}; echo out > {}; echo rc=$?; touch /etc/wharf-escape",
        inside.display(),
        out_file.display()
    );
    let out = bash(&v, &cmd).await;
    assert!(!out.is_error, "{out:?}");
    assert_eq!(std::fs::read_to_string(&inside).unwrap_or_default(), "in\n");
    assert!(!out_file.exists(), "wrote outside the workspace: {}", out.content);
    assert!(!Path::new("/etc/wharf-escape").exists());
    assert!(out.content.contains("rc=1") && out.content.contains("Permission denied"), "{}", out.content);
    // The last command failed: a normal result that says so.
    assert_eq!(out.details["exit_code"], 1, "{out:?}");
    assert!(out.content.contains("exit code 1: the command failed"), "{}", out.content);

    // A workdir outside the granted directories is refused up front.
    let out = call(&v, "bash", json!({"command": "pwd", "workdir": outside.path()})).await;
    assert!(out.is_error && out.code.as_deref() == Some("INVALID_ARGUMENT"), "{out:?}");
}

#[tokio::test]
async fn protected_paths_are_not_readable() -> anyhow::Result<()> {
    let rt = runtime();
    let ws = tempdir();
    let other = tempdir();
    let secret = other.path().join("sessions");
    std::fs::create_dir_all(&secret).context("creating secret")?;
    std::fs::write(secret.join("log.jsonl"), "top secret").context("writing log.jsonl")?;
    std::fs::write(other.path().join("public.txt"), "public").context("writing public.txt")?;
    wharf_runtime::process::protect_paths([secret.canonicalize().context("canonicalizing the secret directory")?]);
    let v = load(&rt, "shell-protected", grant(ws.path()));
    if !sandboxed(&v).await {
        return Ok(());
    }
    let out = bash(&v, &format!("cat {}/public.txt; cat {}/log.jsonl", other.path().display(), secret.display())).await;
    assert!(out.content.contains("public"), "{}", out.content);
    assert!(!out.content.contains("top secret"), "{}", out.content);
    assert!(out.content.contains("Permission denied"), "{}", out.content);
    Ok(())
}

fn has_bash() -> bool {
    ["/bin/bash", "/usr/bin/bash"].iter().any(|p| Path::new(p).exists())
}

#[tokio::test]
async fn tcp_connect_needs_a_host_grant() -> anyhow::Result<()> {
    if !has_bash() {
        wharf_tests::skip("shell::tcp_connect_needs_a_host_grant", "no bash for the /dev/tcp check");
        return Ok(());
    }
    let rt = runtime();
    let ws = tempdir();
    let listener = TcpListener::bind("127.0.0.1:0").context("binding a local port")?;
    listener.set_nonblocking(true).context("making the listener non-blocking")?;
    let port = listener.local_addr().map(|a| a.port()).context("reading the local port")?;
    let cmd = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED || echo REFUSED");

    let v = load(&rt, "shell-net", grant(ws.path()));
    if !sandboxed(&v).await {
        return Ok(());
    }
    let out = bash(&v, &cmd).await;
    assert!(out.content.contains("REFUSED") && !out.content.contains("CONNECTED"), "{}", out.content);
    assert!(listener.accept().is_err(), "the listener saw a connection");

    // Control: the same command connects once a host is granted (any host:
    // the kernel cannot filter TCP by host).
    let v = load(&rt, "shell-net", Grant { hosts: vec!["127.0.0.1".into()], ..grant(ws.path()) });
    let out = bash(&v, &cmd).await;
    assert!(out.content.contains("CONNECTED"), "{}", out.content);
    Ok(())
}

// On the binary: `wharf plugin call` (a CLI command) with the key in the
// host process's environment, where this process must not have it.
#[test]
fn api_key_is_not_in_the_environment() -> anyhow::Result<()> {
    let h = tempdir();
    let ws = tempdir();
    let shell = wharf_tests::plugin(plugins::SHELL);
    let shell = shell.to_str().unwrap_or("");
    let dir = format!("{}:rw", ws.path().display());
    let args = json!({"command": "echo \"key=[$DEEPSEEK_API_KEY]\"; env; tr '\\0' '\\n' < /proc/$PPID/environ"});
    let args = args.to_string();
    let run = |extra: &[&str]| -> anyhow::Result<String> {
        let out = wharf_tests::wharf(h.path())
            .env("DEEPSEEK_API_KEY", "sk-wharf-test-secret")
            .args(["plugin", "call", shell, "bash", &args, "--allow-process", "--allow-dir", &dir])
            .args(extra)
            .output()
            .context("running wharf plugin call")?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let stdout = run(&[])?;
    if sandbox_level().0 == Level::None {
        assert!(stdout.contains("SANDBOX_UNAVAILABLE"), "{stdout}");
        wharf_tests::skip(
            "shell::api_key_is_not_in_the_environment",
            "no OS sandbox (Landlock) on this machine: only the refusal path was checked",
        );
        return Ok(());
    }
    assert!(stdout.contains("key=[]"), "{stdout}");
    assert!(!stdout.contains("sk-wharf-test-secret"), "the API key leaked: {stdout}");
    // Granted by name, it is passed on.
    let stdout = run(&["--allow-env", "DEEPSEEK_API_KEY"])?;
    assert!(stdout.contains("key=[sk-wharf-test-secret]"), "{stdout}");
    Ok(())
}

#[tokio::test]
async fn timeout_kills_the_command_and_its_children() {
    let rt = runtime();
    let ws = tempdir();
    let v = load(&rt, "shell-timeout", grant(ws.path()));
    if !sandboxed(&v).await {
        return;
    }
    let (bg, sh) = (ws.path().join("bg.pid"), ws.path().join("sh.pid"));
    let cmd = format!("sleep 1000 & echo $! > {}; echo $$ > {}; sleep 1000", bg.display(), sh.display());
    let t0 = Instant::now();
    let out = call(&v, "bash", json!({"command": cmd, "timeout_ms": 1500})).await;
    assert!(!out.is_error, "{out:?}");
    assert_eq!(out.details["timed_out"], true, "{out:?}");
    assert!(out.content.contains("timed out after 1500 ms"), "{}", out.content);
    assert!(t0.elapsed() < Duration::from_secs(15), "took {:?}", t0.elapsed());
    assert_dies(read_pid(&bg).unwrap_or_else(|| panic!("no child pid")), "the background child");
    assert_dies(read_pid(&sh).unwrap_or_else(|| panic!("no shell pid")), "the shell");

    // The tool call's own limit applies whatever the guest asked.
    let v = load(&rt, "shell-timeout", Grant { timeout_ms: Some(2500), ..grant(ws.path()) });
    let t0 = Instant::now();
    let out = call(&v, "bash", json!({"command": "sleep 1000", "timeout_ms": 600_000})).await;
    assert!(!out.is_error, "{out:?}");
    assert_eq!(out.details["timed_out"], true, "{out:?}");
    assert!(t0.elapsed() < Duration::from_secs(15), "took {:?}", t0.elapsed());
}

#[tokio::test]
async fn large_output_is_capped_and_spilled() {
    let rt = runtime();
    let ws = tempdir();
    let v = load(&rt, "shell-big", grant(ws.path()));
    if !sandboxed(&v).await {
        return;
    }
    const N: u64 = 50_000_000;
    let out = bash(&v, &format!("echo FIRST; yes 0123456789abcdef | head -c {N}; echo; echo LAST")).await;
    assert!(!out.is_error, "{}", &out.content[..out.content.len().min(500)]);
    let total = N + "FIRST\n".len() as u64 + 1 + "LAST\n".len() as u64;
    assert_eq!(out.details["output_bytes"], total, "{:?}", out.details);
    assert!(out.content.len() < 40 << 10, "{} bytes returned", out.content.len());
    assert!(out.content.starts_with("FIRST\n0123456789abcdef\n"), "{}", &out.content[..100]);
    assert!(out.content.contains("LAST\n[exit code 0]"), "{}", &out.content[out.content.len() - 400..]);
    let spill = PathBuf::from(out.details["spill_path"].as_str().unwrap_or_else(|| panic!("no spill path")));
    assert!(spill.starts_with(ws.path().canonicalize().unwrap_or_default()), "{}", spill.display());
    assert!(out.content.contains(&spill.display().to_string()));
    assert_eq!(std::fs::metadata(&spill).map(|m| m.len()).unwrap_or(0), total);
}

#[tokio::test]
async fn cancelling_the_call_kills_the_process_group() {
    let rt = runtime();
    let ws = tempdir();
    let v = load(&rt, "shell-cancel", Grant { timeout_ms: Some(120_000), ..grant(ws.path()) });
    if !sandboxed(&v).await {
        return;
    }
    let (bg, sh) = (ws.path().join("bg.pid"), ws.path().join("sh.pid"));
    let cmd = format!("sleep 1000 & echo $! > {}; echo $$ > {}; sleep 1000", bg.display(), sh.display());
    let args = json!({ "command": cmd }).to_string();
    let ctx = CallContext::default();
    {
        let fut = v.call_tool("bash", &args, &ctx);
        tokio::pin!(fut);
        let t0 = Instant::now();
        while read_pid(&bg).is_none() || read_pid(&sh).is_none() {
            assert!(t0.elapsed() < Duration::from_secs(30), "the command never started");
            tokio::select! {
                r = &mut fut => panic!("the call finished: {r:?}"),
                () = tokio::time::sleep(Duration::from_millis(50)) => {}
            }
        }
        // Dropping the call's future is what the host does on cancel.
    }
    assert_dies(read_pid(&bg).unwrap_or_default(), "the background child");
    assert_dies(read_pid(&sh).unwrap_or_default(), "the shell");
}

#[tokio::test]
async fn without_the_process_grant_tools_are_refused() {
    let rt = runtime();
    let ws = tempdir();
    let v = load(&rt, "shell-denied", Grant { dirs: vec![rw(ws.path())], ..Grant::default() });
    assert!(!v.effective.process);
    let out = bash(&v, "echo hi").await;
    assert!(out.is_error, "{out:?}");
    assert_eq!(out.code.as_deref(), Some("PERMISSION_DENIED"), "{out:?}");
    assert!(out.content.contains("not granted"), "{}", out.content);
    let out = call(&v, "job_output", json!({"id": 1})).await;
    assert_eq!(out.code.as_deref(), Some("PERMISSION_DENIED"), "{out:?}");
}

#[tokio::test]
async fn background_jobs_belong_to_their_plugin() {
    let rt = runtime();
    let ws = tempdir();
    let v = load(&rt, "shell-jobs", grant(ws.path()));
    if !sandboxed(&v).await {
        return;
    }
    let out =
        call(&v, "bash", json!({"command": "echo started; sleep 0.3; echo finished", "run_in_background": true})).await;
    assert!(!out.is_error, "{out:?}");
    let id = out.details["job_id"].as_u64().unwrap_or_else(|| panic!("no job id: {out:?}"));
    let t0 = Instant::now();
    let done = loop {
        let o = call(&v, "job_output", json!({ "id": id })).await;
        assert!(!o.is_error, "{o:?}");
        if o.details["running"] == false {
            break o;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "job never finished: {o:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(done.content.contains("started\nfinished\n"), "{}", done.content);
    assert!(done.content.contains("exit code 0"), "{}", done.content);
    let spill = done.details["spill_path"].as_str().unwrap_or_else(|| panic!("no spill file: {done:?}"));
    assert_eq!(std::fs::read_to_string(spill).unwrap_or_default(), "started\nfinished\n");

    // A long job: listed as running, killed with its children.
    let pid_file = ws.path().join("job.pid");
    let cmd = format!("sleep 1000 & echo $! > {}; wait", pid_file.display());
    let out = call(&v, "bash", json!({"command": cmd, "run_in_background": true})).await;
    let long = out.details["job_id"].as_u64().unwrap_or_else(|| panic!("no job id: {out:?}"));
    let list = call(&v, "job_list", json!({})).await;
    assert!(list.content.contains(&format!("{long}\trunning\tsleep 1000 &")), "{}", list.content);
    // Another plugin cannot see or kill it.
    let other = load(&rt, "shell-jobs-other", grant(ws.path()));
    let o = call(&other, "job_kill", json!({ "id": long })).await;
    assert!(o.is_error && o.code.as_deref() == Some("INVALID_ARGUMENT"), "{o:?}");
    let t0 = Instant::now();
    while read_pid(&pid_file).is_none() {
        assert!(t0.elapsed() < Duration::from_secs(30), "the job never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let o = call(&v, "job_kill", json!({ "id": long })).await;
    assert!(!o.is_error, "{o:?}");
    assert_dies(read_pid(&pid_file).unwrap_or_default(), "the job's child");
    let t0 = Instant::now();
    loop {
        let o = call(&v, "job_output", json!({ "id": long })).await;
        if o.details["running"] == false {
            assert_eq!(o.details["signal"], 9, "{o:?}");
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "job still running after kill: {o:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
