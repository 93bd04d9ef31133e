//! Filesystem hardening against a hostile component (`tests/plugins/evil-fs`):
//! a component with a read-write grant cannot leave a symlink that points
//! out of the grant — not by `symlink-at`, and not by hard-linking or
//! renaming a link so that its relative target means something else. Links
//! that point below their own directory still work, and the next call is
//! served.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use serde_json::json;
use wharf_runtime::grants::{Access, DirGrant, Grant};
use wharf_runtime::{CallContext, PluginSpec, PluginVersion, Runtime, RuntimeOptions};
use wharf_tests::plugins;

fn runtime() -> Arc<Runtime> {
    let cache = wharf_tests::target_dir().join("test-cache");
    Runtime::new(RuntimeOptions { cache_dir: Some(cache), ..Default::default() }).expect("creating the runtime")
}

/// Calls a tool; returns (is_error, content).
async fn call(v: &PluginVersion, tool: &str, args: serde_json::Value) -> (bool, String) {
    let ctx = CallContext { session_id: "t".into(), call_id: "c".into(), ..CallContext::default() };
    match v.call_tool(tool, &args.to_string(), &ctx).await {
        Ok(o) => (o.is_error, o.content),
        Err(e) => (true, format!("{}: {}", e.code, e.message)),
    }
}

struct Ws {
    _tmp: tempfile::TempDir,
    /// The parent of the grant (outside it).
    outer: PathBuf,
    /// The read-write grant.
    ws: PathBuf,
    v: Arc<PluginVersion>,
}

fn setup() -> Ws {
    let tmp = tempfile::tempdir().expect("creating a temp dir");
    let outer = std::fs::canonicalize(tmp.path()).expect("canonicalizing the temp dir");
    let ws = outer.join("ws");
    std::fs::create_dir_all(ws.join("sub/deep")).expect("creating sub/deep");
    std::fs::write(ws.join("sub/file.txt"), "inside\n").expect("writing sub/file.txt");
    std::fs::write(outer.join("secret.txt"), "outside\n").expect("writing secret.txt");
    let grant =
        Grant { dirs: vec![DirGrant::new(&ws, Access::Rw).expect("granting the directory")], ..Grant::default() };
    let spec = PluginSpec {
        id: "evil-fs".into(),
        path: wharf_tests::plugin(plugins::EVIL_FS),
        config: json!({}),
        grant,
        warm: false,
        on_invalid_config: Default::default(),
    };
    let v = runtime().load(&spec).expect("load evil-fs");
    Ws { _tmp: tmp, outer, ws, v }
}

fn is_symlink(p: &Path) -> bool {
    std::fs::symlink_metadata(p).map(|m| m.file_type().is_symlink()).unwrap_or(false)
}

async fn assert_still_serving(v: &PluginVersion) {
    let (err, content) = call(v, "ok", json!({})).await;
    assert!(!err && content == "ok", "normal call after a refusal failed: {content}");
}

#[tokio::test]
async fn symlinks_pointing_out_of_the_grant_are_refused() {
    let w = setup();
    let secret = w.outer.join("secret.txt");
    let outward = [
        ("../secret.txt", w.ws.join("up")),
        ("../../etc/passwd", w.ws.join("sub/passwd")),
        ("../../../../../../../../etc/passwd", w.ws.join("sub/deep/passwd")),
        ("/etc/passwd", w.ws.join("abs")),
        ("/", w.ws.join("root")),
        (secret.to_str().unwrap_or_default(), w.ws.join("abs_secret")),
        ("sub/../../secret.txt", w.ws.join("dotdot_mid")),
        // Inside the grant from `sub/`, but `..` is refused whatever follows:
        // the link's meaning would change if `sub/` were moved.
        ("../sub/file.txt", w.ws.join("sub/sibling")),
        ("", w.ws.join("empty")),
    ];
    for (target, link) in &outward {
        let (err, content) = call(&w.v, "symlink", json!({"target": target, "link": link})).await;
        assert!(err, "symlink {} -> {target} was created: {content}", link.display());
        assert!(content.contains("not-permitted") || target.is_empty(), "{target}: {content}");
        assert!(!is_symlink(link), "{} exists on the host", link.display());
    }
    // Links below their own directory still work.
    let inside =
        [("sub/file.txt", w.ws.join("down")), ("file.txt", w.ws.join("sub/same_dir")), (".", w.ws.join("dot"))];
    for (target, link) in &inside {
        let (err, content) = call(&w.v, "symlink", json!({"target": target, "link": link})).await;
        assert!(!err, "symlink {} -> {target} refused: {content}", link.display());
        assert_eq!(std::fs::read_link(link).unwrap_or_default(), Path::new(target));
    }
    assert_eq!(std::fs::read_to_string(w.ws.join("down")).unwrap_or_default(), "inside\n");
    assert_still_serving(&w.v).await;
}

#[tokio::test]
async fn hard_links_and_renames_cannot_move_a_link_outward() -> anyhow::Result<()> {
    let w = setup();
    // A link the user planted, pointing inside the grant from where it is
    // (`sub/deep/../../sub/file.txt` is `sub/file.txt`) but outside from the
    // grant's root: moving it up must be refused.
    let planted = w.ws.join("sub/deep/up");
    std::os::unix::fs::symlink("../../sub/file.txt", &planted).context("linking planted")?;
    let abs = w.ws.join("sub/abs");
    std::os::unix::fs::symlink("/etc/passwd", &abs).context("linking abs")?;
    for tool in ["hard_link", "rename"] {
        for (from, to) in [(&planted, w.ws.join("moved_up")), (&abs, w.ws.join("sub/deep/abs_copy"))] {
            let (err, content) = call(&w.v, tool, json!({"from": from, "to": to})).await;
            assert!(err, "{tool} {} -> {} succeeded: {content}", from.display(), to.display());
            assert!(content.contains("not-permitted"), "{tool}: {content}");
            assert!(!is_symlink(&to), "{tool} left {} on the host", to.display());
            assert!(is_symlink(from), "{tool} removed {}", from.display());
        }
    }
    // A link created by the component (downward only) can be moved and
    // hard-linked anywhere in the grant: it still points below itself.
    let link = w.ws.join("sub/down");
    let (err, content) = call(&w.v, "symlink", json!({"target": "deep", "link": link})).await;
    assert!(!err, "{content}");
    let (err, content) = call(&w.v, "hard_link", json!({"from": link, "to": w.ws.join("sub/deep/down2")})).await;
    assert!(!err, "hard link of a downward link refused: {content}");
    let (err, content) = call(&w.v, "rename", json!({"from": link, "to": w.ws.join("down_moved")})).await;
    assert!(!err, "rename of a downward link refused: {content}");
    assert_eq!(std::fs::read_link(w.ws.join("down_moved")).unwrap_or_default(), Path::new("deep"));
    // Files and directories still move and link as before.
    let (err, content) =
        call(&w.v, "hard_link", json!({"from": w.ws.join("sub/file.txt"), "to": w.ws.join("file_link.txt")})).await;
    assert!(!err, "hard link of a file refused: {content}");
    let (err, content) = call(&w.v, "rename", json!({"from": w.ws.join("sub/deep"), "to": w.ws.join("deep")})).await;
    assert!(!err, "rename of a directory refused: {content}");
    // Nothing escapes through the grant's parent either.
    let (err, _) = call(&w.v, "rename", json!({"from": w.ws.join("file_link.txt"), "to": w.outer.join("x")})).await;
    assert!(err);
    assert!(!w.outer.join("x").exists());
    assert_still_serving(&w.v).await;
    Ok(())
}

/// Makes a FIFO at `path`.
pub(crate) fn mkfifo(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("the path as a C string");
    // SAFETY: a NUL-terminated path.
    let r = unsafe { libc::mkfifo(c.as_ptr(), 0o644) };
    assert_eq!(r, 0, "mkfifo {}: {}", path.display(), std::io::Error::last_os_error());
}

/// Holds a FIFO's write end open without ever writing: a reader waits for
/// data that never comes. (`O_RDWR` opens a FIFO without waiting for the
/// other end.)
pub(crate) fn silent_writer(path: &Path) -> std::fs::File {
    std::fs::OpenOptions::new().read(true).write(true).open(path).expect("opening the FIFO")
}

/// Runs `wharf plugin call` to its end, or kills it after `limit` (a hang):
/// (exit code, stdout), or `None` when it had to be killed.
fn plugin_call_within<S: AsRef<std::ffi::OsStr>>(args: &[S], limit: std::time::Duration) -> Option<(i32, String)> {
    use std::io::Read;
    let home = tempfile::tempdir().expect("creating a temp dir");
    let mut child = wharf_tests::wharf(home.path())
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn wharf");
    let end = std::time::Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("polling the child") {
            let mut out = String::new();
            if let Some(mut s) = child.stdout.take() {
                let _ = s.read_to_string(&mut out);
            }
            return Some((status.code().unwrap_or(-1), out));
        }
        if std::time::Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A tool reading a FIFO from its grant (`fs` `read`) cannot hold the call
/// past its time limit: with a writer that never writes the call ends in
/// `TIMEOUT` at its deadline; without any writer the open does not wait
/// for one and the read finds the pipe empty. (Before, the open or the read
/// blocked the runtime's worker, so the deadline never fired and `wharf
/// plugin call` hung until killed.)
// On the binary: the hang it guards against was `wharf plugin call` (a CLI
// command) never returning, which only a child process can be killed for.
#[test]
fn reading_a_fifo_ends_at_the_time_limit_not_never() -> anyhow::Result<()> {
    let ws = tempfile::tempdir().context("creating a temp dir")?;
    let ws = std::fs::canonicalize(ws.path()).context("canonicalizing the workspace")?;
    let fs_wasm = wharf_tests::plugin(plugins::FS);
    let fs_wasm = fs_wasm.to_str().unwrap_or("");
    let grant = format!("{}:ro", ws.display());
    let wsarg = ws.display().to_string();
    // Far longer than the call's limit of 2 s, far shorter than a hang.
    let limit = std::time::Duration::from_secs(60);

    // `wharf plugin call` of `fs` `read` with ARGS, the workspace granted, 2 s.
    let read_call = |args: &str| -> Vec<String> {
        let a = ["plugin", "call", fs_wasm, "read", args, "--workspace", &wsarg, "--allow-dir", &grant];
        a.iter().map(|s| s.to_string()).chain(["--timeout-ms".into(), "2000".into()]).collect()
    };
    let pipe = ws.join("pipe");
    mkfifo(&pipe);
    let writer = silent_writer(&pipe);
    let args = json!({ "path": pipe }).to_string();
    let call = read_call(&args);
    let (code, out) =
        plugin_call_within(&call, limit).unwrap_or_else(|| panic!("a read of a silent FIFO hung the call"));
    assert_eq!(code, 1, "{out}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).with_context(|| format!("parsing JSON: {out}"))?;
    // The read ends: at the deadline (TIMEOUT) or at once (wasmtime-wasi's
    // stream reads are positional: `pread` of a pipe is ESPIPE, IO).
    assert_eq!(v["is_error"], json!(true), "{out}");
    assert!(v["error_code"] == json!("TIMEOUT") || v["error_code"] == json!("IO"), "{out}");
    drop(writer);

    // No writer at all: the open does not wait for one.
    let lonely = ws.join("lonely");
    mkfifo(&lonely);
    let args = json!({ "path": lonely }).to_string();
    let call = read_call(&args);
    let (code, out) =
        plugin_call_within(&call, limit).unwrap_or_else(|| panic!("opening a FIFO without a writer hung the call"));
    assert!(code == 0 || code == 1, "{out}");

    // Regular files next to them read as before.
    std::fs::write(ws.join("a.txt"), "alpha\n").context("writing a.txt")?;
    let args = json!({ "path": ws.join("a.txt") }).to_string();
    let call = read_call(&args);
    let (code, out) = plugin_call_within(&call, limit).unwrap_or_else(|| panic!("a regular read hung"));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("alpha"), "{out}");
    Ok(())
}
