//! Adversarial components against the runtime: every escape attempt and
//! resource abuse is contained with its error code, and the next normal call
//! on the same host succeeds.

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use serde_json::json;
use wharf_core::plugin::ToolErrorCode;
use wharf_runtime::grants::{Access, DirGrant, Grant};
use wharf_runtime::{CallContext, PluginSpec, PluginVersion, Runtime, RuntimeOptions};
use wharf_tests::plugins;

fn runtime() -> Arc<Runtime> {
    let cache = wharf_tests::target_dir().join("test-cache");
    Runtime::new(RuntimeOptions { cache_dir: Some(cache), ..Default::default() }).expect("creating the runtime")
}

fn load(rt: &Runtime, grant: Grant) -> Arc<PluginVersion> {
    let spec = PluginSpec {
        id: "evil".into(),
        path: wharf_tests::plugin(plugins::EVIL),
        config: json!({}),
        grant,
        warm: false,
        on_invalid_config: Default::default(),
    };
    rt.load(&spec).expect("load evil")
}

/// `evil` with instances reused between calls.
fn load_warm(rt: &Runtime) -> Arc<PluginVersion> {
    let spec = PluginSpec {
        id: "evil-warm".into(),
        path: wharf_tests::plugin(plugins::EVIL),
        config: json!({}),
        grant: Grant::default(),
        warm: true,
        on_invalid_config: Default::default(),
    };
    rt.load(&spec).expect("load evil (warm)")
}

/// Calls a tool; returns (is_error, error_code, content).
async fn call(v: &PluginVersion, tool: &str, args: serde_json::Value) -> (bool, Option<ToolErrorCode>, String) {
    let ctx = CallContext { session_id: "t".into(), call_id: "c".into(), ..CallContext::default() };
    match v.call_tool(tool, &args.to_string(), &ctx).await {
        Ok(o) => (o.is_error, o.error_code, o.content),
        Err(e) => (true, Some(e.code), e.message),
    }
}

async fn assert_still_serving(v: &PluginVersion) {
    let (err, code, content) = call(v, "ok", json!({})).await;
    assert!(!err, "normal call after containment failed: {code:?} {content}");
    assert_eq!(content, "ok");
}

fn grant_dir(path: &Path, access: Access) -> DirGrant {
    DirGrant::new(path, access).expect("granting the directory")
}

#[tokio::test]
async fn cannot_read_etc_passwd() -> anyhow::Result<()> {
    let rt = runtime();
    let ws = tempfile::tempdir().context("creating a temp dir")?;
    let v = load(&rt, Grant { dirs: vec![grant_dir(ws.path(), Access::Rw)], ..Grant::default() });
    let (err, code, content) = call(&v, "read_file", json!({"path": "/etc/passwd"})).await;
    assert!(err, "read /etc/passwd succeeded: {content}");
    assert!(!content.contains("root:"), "leaked: {content}");
    assert!(code.is_some());
    assert_still_serving(&v).await;
    Ok(())
}

#[tokio::test]
async fn writes_stay_inside_granted_dirs() -> anyhow::Result<()> {
    let rt = runtime();
    let outer = tempfile::tempdir().context("creating a temp dir")?;
    let ws = outer.path().join("ws");
    let ro = outer.path().join("ro");
    std::fs::create_dir_all(&ws).context("creating ws")?;
    std::fs::create_dir_all(&ro).context("creating ro")?;
    let ws = std::fs::canonicalize(&ws).context("canonicalizing the workspace")?;
    let ro = std::fs::canonicalize(&ro).context("canonicalizing ro")?;
    let outer_c = ws.parent().map(Path::to_path_buf).unwrap_or_default();
    // A symlink planted inside the granted dir, pointing outside it.
    std::os::unix::fs::symlink(&outer_c, ws.join("escape")).context("linking escape")?;
    std::os::unix::fs::symlink("/etc/passwd", ws.join("passwd")).context("linking passwd")?;
    let v = load(&rt, Grant { dirs: vec![grant_dir(&ws, Access::Rw), grant_dir(&ro, Access::Ro)], ..Grant::default() });

    // Positive control: writing inside the rw dir works.
    let inside = ws.join("inside.txt");
    let (err, _, content) = call(&v, "write_file", json!({"path": inside, "content": "hi"})).await;
    assert!(!err, "write inside the grant failed: {content}");
    assert_eq!(std::fs::read_to_string(&inside).unwrap_or_default(), "hi");

    let attempts = [
        outer_c.join("outside.txt"),
        ws.join("../outside-dotdot.txt"),
        ws.join("escape/outside-symlink.txt"),
        ro.join("readonly.txt"),
    ];
    for target in &attempts {
        let (err, code, content) = call(&v, "write_file", json!({"path": target, "content": "pwned"})).await;
        assert!(err, "write to {} succeeded: {content}", target.display());
        assert!(code.is_some());
    }
    assert!(!outer_c.join("outside.txt").exists());
    assert!(!outer_c.join("outside-dotdot.txt").exists());
    assert!(!outer_c.join("outside-symlink.txt").exists());
    assert!(!ro.join("readonly.txt").exists());

    // Reading through a planted symlink to /etc/passwd fails too.
    let (err, _, content) = call(&v, "read_file", json!({"path": ws.join("passwd")})).await;
    assert!(err && !content.contains("root:"), "read through symlink: {content}");
    assert_still_serving(&v).await;
    Ok(())
}

#[tokio::test]
async fn env_is_not_inherited() {
    let rt = runtime();
    // PATH and HOME are set in the test process; nothing is granted.
    let v = load(&rt, Grant { env: vec!["PATH".into()], ..Grant::default() });
    for name in ["PATH", "HOME", "SECRET_TOKEN"] {
        let (err, _, content) = call(&v, "read_env", json!({"name": name})).await;
        assert!(err, "env {name} visible: {content}");
    }
    assert_still_serving(&v).await;
}

/// A listener that records whether anything connected.
fn listener() -> (String, Arc<AtomicBool>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("binding a local port");
    let addr = l.local_addr().map(|a| a.to_string()).unwrap_or_default();
    let hit = Arc::new(AtomicBool::new(false));
    let h = hit.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            h.store(true, Ordering::SeqCst);
            if let Ok(mut s) = s {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf);
                let _ = std::io::Write::write_all(
                    &mut s,
                    b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello",
                );
            }
        }
    });
    (addr, hit)
}

#[tokio::test]
async fn network_needs_a_grant() {
    let rt = runtime();
    let (addr, hit) = listener();
    let v = load(&rt, Grant::default());
    let (err, _, content) = call(&v, "tcp_connect", json!({"addr": addr})).await;
    assert!(err, "raw TCP connect succeeded: {content}");
    let (err, _, content) = call(&v, "http_get", json!({"url": format!("http://{addr}/")})).await;
    assert!(err, "HTTP to a non-granted host succeeded: {content}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!hit.load(Ordering::SeqCst), "the listener saw a connection");
    assert_still_serving(&v).await;
}

#[tokio::test]
async fn granted_host_is_reachable_over_http_only() {
    let rt = runtime();
    let (addr, hit) = listener();
    // The evil plugin requests no hosts, so even an operator grant does not
    // open the network: the effective grant is the intersection.
    let v = load(&rt, Grant { hosts: vec![addr.clone()], ..Grant::default() });
    assert!(v.effective.hosts.is_empty());
    let (err, _, _) = call(&v, "http_get", json!({"url": format!("http://{addr}/")})).await;
    assert!(err);
    assert!(!hit.load(Ordering::SeqCst));
}

#[tokio::test]
async fn infinite_loop_times_out() {
    let rt = runtime();
    let v = load(&rt, Grant { timeout_ms: Some(300), ..Grant::default() });
    let t0 = std::time::Instant::now();
    let (err, code, content) = call(&v, "spin", json!({})).await;
    assert!(err, "spin returned: {content}");
    assert_eq!(code.as_deref(), Some("TIMEOUT"), "{content}");
    assert!(t0.elapsed() < Duration::from_secs(5), "deadline not enforced promptly");
    assert_still_serving(&v).await;
}

#[tokio::test]
async fn memory_bomb_hits_the_limit() {
    let rt = runtime();
    let v = load(&rt, Grant { memory_mb: Some(64), ..Grant::default() });
    let (err, code, content) = call(&v, "alloc", json!({"mb": 1024})).await;
    assert!(err, "alloc returned: {content}");
    assert_eq!(code.as_deref(), Some("MEMORY_LIMIT"), "{content}");
    assert_still_serving(&v).await;
}

#[tokio::test]
async fn stack_overflow_is_contained() {
    let rt = runtime();
    let v = load(&rt, Grant::default());
    let (err, code, content) = call(&v, "recurse", json!({"depth": 100_000_000u64})).await;
    assert!(err, "recurse returned: {content}");
    assert_eq!(code.as_deref(), Some("STACK_OVERFLOW"), "{content}");
    assert_still_serving(&v).await;
}

#[tokio::test]
async fn huge_output_is_refused() {
    let rt = runtime();
    let v = load(&rt, Grant::default());
    let (err, code, content) = call(&v, "huge_output", json!({"mb": 100})).await;
    assert!(err);
    assert_eq!(code.as_deref(), Some("OUTPUT_LIMIT"), "{}", &content[..content.len().min(200)]);
    assert!(content.len() < 1024);
    assert_still_serving(&v).await;
}

#[tokio::test]
async fn trap_is_contained() {
    let rt = runtime();
    let v = load(&rt, Grant::default());
    let (err, code, content) = call(&v, "trap", json!({})).await;
    assert!(err);
    assert_eq!(code.as_deref(), Some("TRAP"), "{content}");
    assert_still_serving(&v).await;
}

/// Waits until `v` has the next call's sandbox prepared, as it is by the
/// time a session's model has answered.
async fn until_spare(v: &PluginVersion) {
    for _ in 0..400 {
        if v.spare_ready() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("no sandbox was prepared after a call");
}

#[tokio::test]
async fn every_fresh_call_gets_an_instance_no_call_ran_in() {
    let rt = runtime();
    let v = load(&rt, Grant::default());
    for i in 0..3 {
        let (err, code, content) = call(&v, "count", json!({})).await;
        assert!(!err, "{code:?} {content}");
        assert_eq!(content, "1", "call {i} ran in an instance an earlier call had used");
        until_spare(&v).await;
    }
    assert_eq!(rt.engine().held(), 1, "the prepared sandbox counts against the idle budget");
    drop(v);
    assert_eq!(rt.engine().held(), 0, "an unloaded version's prepared sandbox is released");
    // The same tool in a reused instance does count up.
    let w = load_warm(&rt);
    let counts = [call(&w, "count", json!({})).await.2, call(&w, "count", json!({})).await.2];
    assert_eq!(counts, ["1", "2"]);
}

#[tokio::test]
async fn a_prepared_sandbox_never_serves_a_replaced_directory() -> anyhow::Result<()> {
    let ws = tempfile::tempdir().context("creating a temp dir")?;
    let dir = ws.path().join("granted");
    let file = dir.join("a.txt");
    std::fs::create_dir(&dir).context("creating the directory")?;
    std::fs::write(&file, "before").context("writing the file")?;
    let rt = runtime();
    let v = load(&rt, Grant { dirs: vec![grant_dir(&dir, Access::Rw)], ..Grant::default() });
    let path = file.to_string_lossy().to_string();
    let (err, code, content) = call(&v, "read_file", json!({"path": path})).await;
    assert!(!err && content == "before", "{code:?} {content}");
    // The next call's sandbox holds the directory open by now; the path is
    // then given to a new directory.
    until_spare(&v).await;
    std::fs::rename(&dir, ws.path().join("old")).context("renaming dir")?;
    std::fs::create_dir(&dir).context("creating the directory")?;
    std::fs::write(&file, "after").context("writing the file")?;
    let (err, code, content) = call(&v, "read_file", json!({"path": path})).await;
    assert!(!err, "{code:?} {content}");
    assert_eq!(content, "after", "the call was served by the directory the path no longer names");
    Ok(())
}

#[tokio::test]
async fn warm_instance_survives_and_recovers_from_a_trap() {
    let rt = runtime();
    let v = load_warm(&rt);
    assert_still_serving(&v).await;
    let (_, code, _) = call(&v, "trap", json!({})).await;
    assert_eq!(code.as_deref(), Some("TRAP"));
    assert_still_serving(&v).await;
}

/// A warm tool whose imports cannot wait or reach outside (`pure`) is
/// called on the synchronous path, and every limit holds there: an endless
/// loop ends at its deadline, memory, stack and output limits and traps end
/// the call with their codes, a call that waits (`sleep`) is served, and
/// the instance keeps serving after each.
#[tokio::test]
async fn warm_calls_on_the_synchronous_path_keep_every_limit() {
    let rt = runtime();
    let spec = PluginSpec {
        id: "pure".into(),
        path: wharf_tests::plugin(plugins::PURE),
        config: json!({}),
        // 1 s: touching 64 MiB (the memory test), re-run on the async path
        // after an epoch tick, must end at its memory limit, not its
        // deadline, also on a loaded 2-core machine (300 ms did not).
        grant: Grant { timeout_ms: Some(1000), memory_mb: Some(64), ..Grant::default() },
        warm: true,
        on_invalid_config: Default::default(),
    };
    let v = rt.load(&spec).expect("load pure (warm)");
    assert!(v.calls_synchronously(), "a tool importing only wasi:cli/io/clocks is called synchronously");
    assert!(!load_warm(&rt).calls_synchronously(), "a tool with outside imports is not");
    let counts = [call(&v, "count", json!({})).await.2, call(&v, "count", json!({})).await.2];
    assert_eq!(counts, ["1", "2"], "the synchronous path reuses its instance");

    let t0 = std::time::Instant::now();
    let (err, code, content) = call(&v, "spin", json!({})).await;
    assert!(err, "spin returned: {content}");
    assert_eq!(code.as_deref(), Some("TIMEOUT"), "{content}");
    assert!(t0.elapsed() < Duration::from_secs(5), "deadline not enforced promptly");
    assert_still_serving(&v).await;

    let (_, code, content) = call(&v, "alloc", json!({"mb": 1024})).await;
    assert_eq!(code.as_deref(), Some("MEMORY_LIMIT"), "{content}");
    let (_, code, content) = call(&v, "recurse", json!({"depth": 100_000_000u64})).await;
    assert_eq!(code.as_deref(), Some("STACK_OVERFLOW"), "{content}");
    let (_, code, content) = call(&v, "huge_output", json!({"mb": 20})).await;
    assert_eq!(code.as_deref(), Some("OUTPUT_LIMIT"), "{}", &content[..content.len().min(200)]);
    let (_, code, content) = call(&v, "trap", json!({})).await;
    assert_eq!(code.as_deref(), Some("TRAP"), "{content}");
    assert_still_serving(&v).await;

    // A wait cannot happen on the synchronous path: the call is run again
    // on the async path and served.
    let (err, code, content) = call(&v, "sleep", json!({"ms": 30})).await;
    assert!(!err, "{code:?} {content}");
    assert_eq!(content, "slept 30 ms");
    assert_still_serving(&v).await;
}
