//! Bounds on everything a component hands the host, and errors that keep
//! their cause (issue 13, items 2 and 3).
//!
//! Each class runs the `wharf` binary as a child process and measures the
//! child's peak resident memory with `wait4(2)`: the kernel's `ru_maxrss`
//! of that one child (KiB on Linux), so tests running in parallel in this
//! binary do not disturb each other (unlike `getrusage(RUSAGE_CHILDREN)`,
//! the maximum over every child reaped so far). The stated bound is the
//! call's memory grant + the output cap (16 MiB) + a constant, over a
//! baseline: the same command calling the `ok` tool. The component's own
//! linear memory is part of the grant, so the guest builds its payload
//! inside the grant; what the host must not do is copy it (again).
//!
//! "The next call is served" is checked in process, on the same loaded
//! version (`wharf_runtime`), after each class. The measured runs stay on
//! the binary: a peak RSS of its own needs a process of its own.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};

use anyhow::Context;
use serde_json::{Value, json};
use wharf_core::plugin::ToolErrorCode;
use wharf_runtime::grants::Grant;
use wharf_runtime::{CallContext, PluginSpec, PluginVersion, Runtime, RuntimeOptions};
use wharf_tests::{Plugin, plugins};

/// The output cap every call here runs with (the default grant).
const OUTPUT_CAP_MIB: u64 = 16;
/// Slack over baseline + grant + cap: allocator rounding, the lift's fuel
/// slack, stdout/stderr pipes, wasmtime's bookkeeping.
const CONSTANT_MIB: u64 = 32;
/// The memory grant of the big-payload calls: room for a 96 MiB payload in
/// the guest, not for a second copy.
const GRANT_MIB: u64 = 112;
/// The payload the guest builds, MiB.
const PAYLOAD_MIB: u64 = 96;

/// What a child process did.
struct Measured {
    code: i32,
    stdout: String,
    stderr: String,
    /// Peak resident set, MiB.
    peak_mib: u64,
}

/// Runs `cmd`, collecting its output, and reaps it with `wait4` for its own
/// peak RSS.
// The child is reaped by `wait4`, which clippy cannot see.
#[allow(clippy::zombie_processes)]
fn measured(mut cmd: Command) -> Measured {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawning the command");
    let mut out = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let mut err = child.stderr.take().unwrap_or_else(|| panic!("no stderr"));
    let out_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = out.read_to_end(&mut b);
        b
    });
    let err_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = err.read_to_end(&mut b);
        b
    });
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our child, not yet reaped (std reaps only in
    // `wait`/`try_wait`, which are never called on it); the pointers are
    // valid for the call.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid, "wait4 failed: {}", std::io::Error::last_os_error());
    let code = if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { -libc::WTERMSIG(status) };
    let stdout = String::from_utf8_lossy(&out_t.join().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&err_t.join().unwrap_or_default()).into_owned();
    Measured { code, stdout, stderr, peak_mib: (usage.ru_maxrss as u64) >> 10 }
}

fn home() -> &'static Path {
    static HOME: OnceLock<tempfile::TempDir> = OnceLock::new();
    HOME.get_or_init(|| tempfile::tempdir().expect("creating a temp dir")).path()
}

/// `wharf plugin call PLUGIN TOOL ARGS EXTRA…`, measured.
fn plugin_call(plugin: Plugin, tool: &str, args: &Value, extra: &[&str]) -> Measured {
    let mut c = wharf_tests::wharf(home());
    c.args(["plugin", "call"]).arg(wharf_tests::plugin(plugin)).args([tool, &args.to_string()]).args(extra);
    measured(c)
}

/// Peak RSS of `wharf plugin call evil ok` with the big calls' grant, MiB.
fn baseline_mib() -> u64 {
    static BASE: OnceLock<u64> = OnceLock::new();
    *BASE.get_or_init(|| {
        let m = plugin_call(plugins::EVIL, "ok", &json!({}), &["--memory-mb", &GRANT_MIB.to_string()]);
        assert_eq!(m.code, 0, "{} {}", m.stdout, m.stderr);
        m.peak_mib
    })
}

/// Asserts the stated bound: baseline + grant + output cap + constant.
fn assert_within_bound(m: &Measured, grant_mib: u64, what: &str) {
    let bound = baseline_mib() + grant_mib + OUTPUT_CAP_MIB + CONSTANT_MIB;
    assert!(
        m.peak_mib <= bound,
        "{what}: peak RSS {} MiB over the bound {bound} MiB (baseline {} + grant {grant_mib} + cap {OUTPUT_CAP_MIB} + {CONSTANT_MIB})",
        m.peak_mib,
        baseline_mib()
    );
}

fn result(m: &Measured) -> anyhow::Result<Value> {
    serde_json::from_str(m.stdout.trim()).with_context(|| {
        format!("the output is not JSON: stdout {:?}\nstderr: {}", &m.stdout[..m.stdout.len().min(300)], m.stderr)
    })
}

fn runtime() -> Arc<Runtime> {
    let cache = wharf_tests::target_dir().join("test-cache");
    Runtime::new(RuntimeOptions { cache_dir: Some(cache), ..Default::default() }).expect("creating the runtime")
}

fn load(rt: &Runtime, plugin: Plugin, config: Value, grant: Grant) -> Result<Arc<PluginVersion>, String> {
    let spec = PluginSpec {
        id: plugin.name().into(),
        path: wharf_tests::plugin(plugin),
        config,
        grant,
        warm: false,
        on_invalid_config: Default::default(),
    };
    rt.load(&spec).map_err(|e| e.to_string())
}

/// Calls a tool in process: (error code, content).
async fn call(v: &PluginVersion, tool: &str, args: Value) -> (Option<ToolErrorCode>, String) {
    let ctx = CallContext { session_id: "t".into(), call_id: "c".into(), ..CallContext::default() };
    match v.call_tool(tool, &args.to_string(), &ctx).await {
        Ok(o) => (o.error_code, o.content),
        Err(e) => (Some(e.code), e.message),
    }
}

/// Runs `tool` on a fresh in-process `evil` and then `ok` on the same
/// version: the next call is served. Returns the first call's result.
async fn then_next_call_served(tool: &str, args: Value, grant: Grant) -> (Option<ToolErrorCode>, String) {
    let rt = runtime();
    let v = load(&rt, plugins::EVIL, json!({}), grant).expect("loading the component");
    let first = call(&v, tool, args).await;
    let (code, content) = call(&v, "ok", json!({})).await;
    assert_eq!((code, content.as_str()), (None, "ok"), "the call after {tool} was not served");
    first
}

fn big_grant() -> Grant {
    Grant { memory_mb: Some(GRANT_MIB as u32), ..Grant::default() }
}

// ------------------------------------------------------------ tool errors

#[test]
fn an_oversized_error_code_is_not_copied_out() -> anyhow::Result<()> {
    let args = json!({"code": "A", "repeat": PAYLOAD_MIB << 20});
    let m = plugin_call(plugins::EVIL, "bad_code", &args, &["--memory-mb", &GRANT_MIB.to_string()]);
    assert!(m.stdout.len() < 4096, "{} bytes on stdout", m.stdout.len());
    let v = result(&m)?;
    assert_eq!((m.code, v["error_code"].as_str()), (1, Some("OUTPUT_LIMIT")), "{v}");
    assert!(v["content"].as_str().unwrap_or("").contains("more than"), "{v}");
    assert_within_bound(&m, GRANT_MIB, "100 MiB error code");
    let rt = tokio::runtime::Runtime::new().context("creating a tokio runtime")?;
    let (code, _) = rt.block_on(then_next_call_served("bad_code", args, big_grant()));
    assert_eq!(code.as_deref(), Some("OUTPUT_LIMIT"));
    Ok(())
}

#[tokio::test]
async fn an_invalid_error_code_becomes_tool_error_with_the_original_in_the_message() {
    let (code, content) =
        then_next_call_served("bad_code", json!({"code": "no good\n", "repeat": 3}), Grant::default()).await;
    assert_eq!(code.as_deref(), Some("TOOL_ERROR"), "{content}");
    assert!(content.starts_with("failed with a strange code"), "{content}");
    assert!(content.contains("`no good\\nno good\\nno good\\n`"), "{content}");
    assert!(content.contains("replaced by TOOL_ERROR"), "{content}");
    // Too long, though made of code characters: cut to 64 bytes.
    let (code, content) =
        then_next_call_served("bad_code", json!({"code": "A", "repeat": 1000}), Grant::default()).await;
    assert_eq!(code.as_deref(), Some("TOOL_ERROR"), "{content}");
    assert!(content.contains(&format!("`{}…` (1000 bytes)", "A".repeat(64))), "{content}");
    assert!(!content.contains(&"A".repeat(65)), "{content}");
    // A valid code passes as is.
    let (code, _) =
        then_next_call_served("bad_code", json!({"code": "MY_CODE_2", "repeat": 1}), Grant::default()).await;
    assert_eq!(code.as_deref(), Some("MY_CODE_2"));
}

#[test]
fn an_error_message_is_cut_on_a_character_boundary() -> anyhow::Result<()> {
    // Over the output cap (so it is cut to 4096 bytes), with `é` across
    // byte 4096; within the cap's copy slack, so it reaches the cut.
    let args = json!({"bytes": (OUTPUT_CAP_MIB << 20) + 100});
    let m = plugin_call(plugins::EVIL, "utf8_cut", &args, &[]);
    assert!(!m.stderr.contains("panicked"), "{}", m.stderr);
    let v = result(&m)?;
    assert_eq!((m.code, v["error_code"].as_str()), (1, Some("CUT")), "{}", m.stderr);
    let content = v["content"].as_str().unwrap_or("");
    assert!(content.starts_with(&"x".repeat(4095)), "{}", &content[..100]);
    assert_eq!(content.chars().nth(4095), Some(' '), "the cut keeps 4095 bytes: {}", &content[4000..]);
    assert!(content.contains("error message truncated"), "{}", &content[4000..]);
    assert!(content.len() < 4096 + 200);
    assert_within_bound(&m, 256, "16 MiB error message");
    let rt = tokio::runtime::Runtime::new().context("creating a tokio runtime")?;
    let (code, _) = rt.block_on(then_next_call_served("utf8_cut", args, Grant::default()));
    assert_eq!(code.as_deref(), Some("CUT"));
    Ok(())
}

#[test]
fn a_huge_output_stops_at_the_copy() -> anyhow::Result<()> {
    let args = json!({"mb": PAYLOAD_MIB});
    let m = plugin_call(plugins::EVIL, "huge_output", &args, &["--memory-mb", &GRANT_MIB.to_string()]);
    let v = result(&m)?;
    assert_eq!(v["error_code"], "OUTPUT_LIMIT", "{v}");
    assert!(v["content"].as_str().unwrap_or("").contains("output limit 16777216 bytes"), "{v}");
    assert_within_bound(&m, GRANT_MIB, "96 MiB output");
    Ok(())
}

// ---------------------------------------------------------------- kv

#[test]
fn a_kv_entry_flood_is_refused() -> anyhow::Result<()> {
    // Millions of empty values: entries are counted and charged overhead.
    let args = json!({"count": 3_000_000, "bytes": 0});
    let m = plugin_call(plugins::EVIL, "kv_flood", &args, &[]);
    let v = result(&m)?;
    let content = v["content"].as_str().unwrap_or("");
    assert!(content.starts_with("stored 65536 entries, then:") && content.contains("key-value store is full"), "{v}");
    assert_within_bound(&m, 256, "kv entry flood");
    // Values: the byte quota counts each entry's overhead too.
    let m = plugin_call(plugins::EVIL, "kv_flood", &json!({"count": 100, "bytes": 1 << 20}), &[]);
    let content = result(&m)?["content"].as_str().unwrap_or("").to_string();
    assert!(content.starts_with("stored 15 entries, then:") && content.contains("key-value quota"), "{content}");
    let rt = tokio::runtime::Runtime::new().context("creating a tokio runtime")?;
    let (code, content) = rt.block_on(then_next_call_served("kv_flood", args, Grant::default()));
    assert_eq!(code, None, "{content}");
    Ok(())
}

// ---------------------------------------------------------------- log

/// `s` without ANSI escape sequences.
fn strip_ansi(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

// On the binary: the forged line is checked in the process's stderr log,
// formatted by the binary's own subscriber at `WHARF_LOG=debug`.
#[test]
fn a_component_cannot_forge_a_host_log_line() {
    let mut c = wharf_tests::wharf(home());
    c.env("WHARF_LOG", "debug")
        .args(["plugin", "call"])
        .arg(wharf_tests::plugin(plugins::EVIL))
        .args(["log_forge", "{}"]);
    let m = measured(c);
    assert_eq!(m.code, 0, "{}", m.stderr);
    let stderr = strip_ansi(&m.stderr);
    let forged: Vec<&str> = stderr.lines().filter(|l| l.contains("FORGED-HOST-LINE")).collect();
    // The log line and the captured stderr: one line each, the forgery
    // escaped inside them.
    assert_eq!(forged.len(), 2, "{stderr}");
    for line in &forged {
        assert!(!line.trim_start().starts_with("2026-01-01T00:00:00.000000Z"), "forged line: {line}");
        assert!(line.contains("innocent\\n2026-01-01") || line.contains("stderr line\\n2026-01-01"), "{line}");
    }
}

// On the binary: the bound is on the bytes the process writes to stderr.
#[test]
fn a_log_flood_stays_within_the_call_budget() {
    // 1000 lines of 16 KiB would be 16 MiB of host log.
    let m = plugin_call(plugins::EVIL, "log_flood", &json!({"count": 5000, "bytes": 16 << 10}), &[]);
    assert_eq!(m.code, 0, "{}", &m.stderr[..m.stderr.len().min(500)]);
    assert!(m.stderr.len() < 512 << 10, "{} bytes of log from one call", m.stderr.len());
    assert!(m.stderr.contains("log budget of this call"), "{}", &m.stderr[m.stderr.len().saturating_sub(500)..]);
}

// ---------------------------------------------------------------- causes

#[tokio::test]
async fn a_guest_exit_keeps_its_status() {
    let (code, content) = then_next_call_served("exit", json!({"status": 3}), Grant::default()).await;
    // wasip2 carries only success or failure: any non-zero status is 1.
    assert_eq!(code.as_deref(), Some("TRAP"), "{content}");
    assert!(content.contains("exited with status 1"), "{content}");
    assert!(!content.contains("wasm backtrace"), "{content}");
    assert!(!content.contains('\n'), "{content}");
}

#[test]
fn a_resource_flood_hits_the_table_limit_with_its_cause() -> anyhow::Result<()> {
    // 2 million header-field resources: ~1 million (wasmtime's default
    // table size) of host allocations without a bound of our own.
    let args = json!({"count": 2_000_000});
    let m = plugin_call(plugins::EVIL, "resource_flood", &args, &[]);
    let v = result(&m)?;
    let content = v["content"].as_str().unwrap_or("");
    assert_eq!(v["error_code"], "MEMORY_LIMIT", "{v}");
    assert!(content.contains("more than 16384 host resources") && content.contains("resource table"), "{v}");
    assert!(!content.contains("wasm backtrace"), "{v}");
    assert_within_bound(&m, 256, "resource flood");
    let rt = tokio::runtime::Runtime::new().context("creating a tokio runtime")?;
    let (code, _) = rt.block_on(then_next_call_served("resource_flood", args, Grant::default()));
    assert_eq!(code.as_deref(), Some("MEMORY_LIMIT"));
    Ok(())
}

#[tokio::test]
async fn a_trap_names_its_kind() {
    let (code, content) = then_next_call_served("trap", json!({}), Grant::default()).await;
    assert_eq!(code.as_deref(), Some("TRAP"), "{content}");
    assert!(content.contains("unreachable"), "{content}");
    assert!(!content.contains("wasm backtrace"), "{content}");
}

// ---------------------------------------------------------------- describe

/// `wharf plugin call PLUGIN t0 --config CONFIG`: must be refused at load
/// with one line naming `reason`.
fn refused_at_load(plugin: Plugin, config: Value, grant_mib: u64, reason: &str) {
    let m = plugin_call(
        plugin,
        "t0",
        &json!({}),
        &["--config", &config.to_string(), "--memory-mb", &grant_mib.to_string()],
    );
    assert_eq!(m.code, 2, "{config}: {} {}", m.stdout, &m.stderr[..m.stderr.len().min(500)]);
    let err = m.stderr.trim();
    assert!(err.len() < 1024 && err.lines().count() == 1, "not one short line: {}", &err[..err.len().min(500)]);
    assert!(err.contains(reason), "{config}: {err}");
    assert_within_bound(&m, grant_mib, plugin.name());
}

/// After a refusal, the same file with a sane config loads and serves.
async fn loads_when_sane(plugin: Plugin, refused: Value) {
    let rt = runtime();
    assert!(load(&rt, plugin, refused, big_grant()).is_err());
    let v = load(&rt, plugin, json!({}), Grant::default()).expect("loading the component");
    if plugin == plugins::HUGE_DESCRIBE {
        assert_eq!(call(&v, "t0", json!({})).await, (None, "ok".to_string()));
    }
}

#[tokio::test]
async fn huge_describe_output_is_refused_at_load() {
    let _ = baseline_mib();
    for (config, reason) in [
        (json!({"schema_bytes": PAYLOAD_MIB << 20}), "tool.list-tools() failed: OUTPUT_LIMIT"),
        (json!({"tools": 10_001}), "returned 10001 tools; a plugin may register at most 10000"),
        (json!({"schema_bytes": 100_000}), "input schema of 100000 bytes is larger than 65536 bytes"),
        (json!({"description_bytes": 20_000}), "description of 20000 bytes is longer than 16384 bytes"),
    ] {
        refused_at_load(plugins::HUGE_DESCRIBE, config.clone(), GRANT_MIB, reason);
        loads_when_sane(plugins::HUGE_DESCRIBE, config).await;
    }
    for (config, reason) in [
        (json!({"sections": 1, "section_bytes": PAYLOAD_MIB << 20}), "hooks.subscriptions() failed: OUTPUT_LIMIT"),
        (json!({"sections": 1000, "section_bytes": 1}), "returned 1000 sections; at most 16 are allowed"),
        (json!({"sections": 1, "section_bytes": 100_000}), "section `s0` of 100000 bytes is longer than 65536 bytes"),
    ] {
        refused_at_load(plugins::HUGE_SECTIONS, config.clone(), GRANT_MIB, reason);
        loads_when_sane(plugins::HUGE_SECTIONS, config).await;
    }
}

// ---------------------------------------------------------------- events

struct Session {
    home: tempfile::TempDir,
    ws: tempfile::TempDir,
}

impl Session {
    fn new() -> Self {
        Self {
            home: tempfile::tempdir().expect("creating a temp dir"),
            ws: tempfile::tempdir().expect("creating a temp dir"),
        }
    }

    fn sessions(&self) -> PathBuf {
        self.home.path().join("sessions")
    }

    /// `wharf run` with the scripted model making `calls` (one turn each,
    /// then "done"), measured; returns the measurement and the log's size.
    /// (On the binary: the peak RSS is the child's own, from `wait4`.)
    fn run(&self, calls: &[(&str, Value)]) -> (Measured, Vec<Value>, u64) {
        let mut turns = String::new();
        for (tool, args) in calls {
            turns.push_str(&format!(
                "[[plugin.config.turns]]\ntool_calls = [{{ name = \"{tool}\", arguments = {} }}]\n\n",
                toml_inline(args)
            ));
        }
        turns.push_str("[[plugin.config.turns]]\ntext = \"done\"\n");
        let profile = format!(
            r#"
[agent]
adapter = "scripted"
max_steps = 20

[[plugin]]
id = "evil"
path = "${{plugin_dir}}/evil.wasm"
[plugin.grant]
memory_mb = 64

[[plugin]]
id = "scripted"
path = "${{plugin_dir}}/llm-scripted.wasm"
[plugin.config]
model = "scripted-test"

{turns}"#
        );
        let path = self.home.path().join("profile.toml");
        std::fs::write(&path, profile).expect("writing the file");
        let mut c = wharf_tests::wharf(self.home.path());
        c.current_dir(self.ws.path())
            .args(["run", "go", "--output", "jsonl", "--profile"])
            .arg(&path)
            .arg("--session-dir")
            .arg(self.sessions());
        let m = measured(c);
        let events: Vec<Value> = m.stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        let size = std::fs::read_dir(self.sessions())
            .map(|d| d.filter_map(Result::ok).filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum())
            .unwrap_or(0);
        (m, events, size)
    }
}

/// A JSON object as a TOML inline table (strings and numbers only).
fn toml_inline(v: &Value) -> String {
    let fields: Vec<String> =
        v.as_object().map(|o| o.iter().map(|(k, v)| format!("{k} = {v}")).collect()).unwrap_or_default();
    format!("{{ {} }}", fields.join(", "))
}

#[test]
fn an_event_flood_is_refused_and_the_log_stays_small() {
    let _ = (wharf_tests::plugin(plugins::EVIL), wharf_tests::plugin(plugins::LLM_SCRIPTED));
    let base = Session::new().run(&[("ok", json!({}))]).0.peak_mib;
    let s = Session::new();
    let (m, events, log_bytes) = s.run(&[
        // 2000 events of 60 KB: 120 MB of log without the bounds.
        ("event_flood", json!({"count": 2000, "bytes": 60_000})),
        // One event over the size bound.
        ("event_flood", json!({"count": 1, "bytes": 70_000})),
        ("ok", json!({})),
    ]);
    assert_eq!(m.code, 0, "{}", &m.stderr[..m.stderr.len().min(1000)]);
    let results: Vec<&Value> = events.iter().filter(|e| e["type"] == "tool/result").collect();
    assert_eq!(results.len(), 3, "{events:?}");
    let text = |i: usize| results[i]["data"]["content"].as_str().unwrap_or("").to_string();
    assert!(text(0).starts_with("recorded 16 events, then:") && text(0).contains("at most 16 events"), "{}", text(0));
    assert!(text(1).starts_with("recorded 0 events, then:") && text(1).contains("at most 65536 bytes"), "{}", text(1));
    assert_eq!(text(2), "ok", "the next call was not served");
    assert_eq!(events.iter().filter(|e| e["type"] == "todo/updated").count(), 16);
    // 16 events of ~60 KB, plus the rest of the session.
    assert!(log_bytes < (16 * 64 + 256) << 10, "session log of {log_bytes} bytes");
    let bound = base + 64 + OUTPUT_CAP_MIB + CONSTANT_MIB;
    assert!(m.peak_mib <= bound, "peak RSS {} MiB over {bound} MiB (baseline {base})", m.peak_mib);
}
