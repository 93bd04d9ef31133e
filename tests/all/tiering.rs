//! Tiered compilation (issue 18): with tiering on, a component missing from
//! the compile cache serves from fast-tier code at once, under the same
//! limits, and gets its optimised code in the background — swapped in
//! between calls and written to the on-disk cache.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use serde_json::json;
use wharf_core::plugin::ToolErrorCode;
use wharf_runtime::engine::CompileTier;
use wharf_runtime::grants::Grant;
use wharf_runtime::{CallContext, PluginSpec, PluginVersion, Runtime, RuntimeOptions};
use wharf_tests::{Plugin, plugins};

fn tiered_runtime(cache: &std::path::Path) -> Arc<Runtime> {
    // The knobs `wharf` reads (`WHARF_TIERED`, `WHARF_FIRST_TIER` …), so
    // the skips below match what the runtime was given.
    let rt = Runtime::new(RuntimeOptions {
        cache_dir: Some(cache.to_path_buf()),
        ..wharf_cli_common::env::runtime_options()
    })
    .expect("creating the runtime");
    rt.enable_tiering();
    rt
}

fn tiering_disabled_by_env() -> bool {
    std::env::var("WHARF_TIERED").is_ok_and(|v| v == "0")
}

/// The first tier a cache miss gets: Winch unless the operator chose
/// Cranelift's fast settings.
fn first_tier() -> CompileTier {
    if !cfg!(target_arch = "x86_64") || std::env::var("WHARF_FIRST_TIER").is_ok_and(|v| v == "cranelift") {
        CompileTier::Fast
    } else {
        CompileTier::Baseline
    }
}

fn load(rt: &Runtime, plugin: Plugin, grant: Grant) -> anyhow::Result<Arc<PluginVersion>> {
    let spec = PluginSpec {
        id: plugin.name().into(),
        path: wharf_tests::plugin(plugin),
        config: json!({}),
        grant,
        warm: false,
        on_invalid_config: Default::default(),
    };
    rt.load(&spec).with_context(|| format!("loading {plugin}"))
}

async fn call(v: &PluginVersion, tool: &str, args: serde_json::Value) -> (bool, Option<ToolErrorCode>, String) {
    let ctx = CallContext { session_id: "t".into(), call_id: "c".into(), ..CallContext::default() };
    match v.call_tool(tool, &args.to_string(), &ctx).await {
        Ok(o) => (o.is_error, o.error_code, o.content),
        Err(e) => (true, Some(e.code), e.message),
    }
}

fn artifacts(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .map(|d| d.flatten().filter(|e| e.path().extension().is_some_and(|x| x == "cwasm")).count())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_miss_serves_fast_code_then_swaps_in_optimised_code() -> anyhow::Result<()> {
    if tiering_disabled_by_env() {
        wharf_tests::skip(&wharf_tests::current_test(), "WHARF_TIERED=0 is set");
        return Ok(());
    }
    let cache = tempfile::tempdir().context("creating a temp dir")?;
    let rt = tiered_runtime(cache.path());
    let v = load(&rt, plugins::TEXT, Grant::default())?;
    assert_eq!(v.tier(), first_tier(), "an empty cache must serve from the first tier");
    let (err, _, out) = call(&v, "echo", json!({"text": "first"})).await;
    assert!(!err && out.contains("first"), "fast-tier call failed: {out}");
    let rt2 = rt.clone();
    let done = tokio::task::spawn_blocking(move || rt2.wait_tier_up(Duration::from_secs(120)))
        .await
        .context("joining the blocking task")?;
    assert!(done, "tier-up did not finish in 120 s");
    assert_eq!(rt.tier_up_pending(), 0);
    assert_eq!(v.tier(), CompileTier::Optimized, "the version was not swapped to optimised code");
    let (err, _, out) = call(&v, "echo", json!({"text": "second"})).await;
    assert!(!err && out.contains("second"), "call after the swap failed: {out}");
    // The same description on both tiers (describe ran on the fast one).
    assert!(v.tools.iter().any(|t| t.name == "echo"));
    // The optimised artifact reached the disk: a new process starts warm.
    assert_eq!(artifacts(cache.path()), 1, "no optimised artifact on disk");
    let rt3 = tiered_runtime(cache.path());
    let v3 = load(&rt3, plugins::TEXT, Grant::default())?;
    assert_eq!(v3.tier(), CompileTier::Optimized, "a cached component must load optimised code directly");
    assert_eq!(rt3.tier_up_pending(), 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_hold_on_the_fast_tier() -> anyhow::Result<()> {
    if tiering_disabled_by_env() {
        wharf_tests::skip(&wharf_tests::current_test(), "WHARF_TIERED=0 is set");
        return Ok(());
    }
    let cache = tempfile::tempdir().context("creating a temp dir")?;
    let rt = tiered_runtime(cache.path());
    let spin = load(&rt, plugins::EVIL, Grant { timeout_ms: Some(300), ..Grant::default() })?;
    assert_eq!(spin.tier(), first_tier());
    let (err, code, content) = call(&spin, "spin", json!({})).await;
    assert!(err, "spin returned on the fast tier: {content}");
    assert_eq!(code.as_deref(), Some("TIMEOUT"), "{content}");
    let alloc = load(&rt, plugins::EVIL, Grant { memory_mb: Some(64), ..Grant::default() })?;
    let (err, code, content) = call(&alloc, "alloc", json!({"mb": 1024})).await;
    assert!(err, "alloc returned on the fast tier: {content}");
    assert_eq!(code.as_deref(), Some("MEMORY_LIMIT"), "{content}");
    // Whichever tier `alloc` got (the first load's tier-up may have
    // cached the code by now), the normal call still works.
    let (err, _, content) = call(&alloc, "ok", json!({})).await;
    assert!(!err, "normal call after containment failed: {content}");
    let rt2 = rt.clone();
    let _ = tokio::task::spawn_blocking(move || rt2.wait_tier_up(Duration::from_secs(120))).await;
    Ok(())
}

/// Every containment the sandbox promises, on code compiled by Winch alone
/// (a runtime whose only engine is the baseline tier, so no tier-up can
/// swap the code during the test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_holds_on_winch_code() -> anyhow::Result<()> {
    if !cfg!(target_arch = "x86_64") {
        wharf_tests::skip(&wharf_tests::current_test(), "Winch is used on x86_64 only");
        return Ok(());
    }
    let engine = wharf_runtime::engine::EngineOptions { tier: CompileTier::Baseline, ..Default::default() };
    let rt = Runtime::new(RuntimeOptions { engine, cache_dir: None, ..Default::default() }).context("Winch engine")?;
    let small = load(&rt, plugins::EVIL, Grant { memory_mb: Some(64), ..Grant::default() })?;
    let (err, code, content) = call(&small, "alloc", json!({"mb": 1024})).await;
    assert!(err && code.as_deref() == Some("MEMORY_LIMIT"), "alloc on Winch code: {code:?} {content}");
    let timed = load(&rt, plugins::EVIL, Grant { timeout_ms: Some(300), ..Grant::default() })?;
    let (err, code, content) = call(&timed, "spin", json!({})).await;
    assert!(err && code.as_deref() == Some("TIMEOUT"), "spin on Winch code: {code:?} {content}");
    let v = load(&rt, plugins::EVIL, Grant::default())?;
    assert_eq!(v.tier(), CompileTier::Baseline);
    let expect = [
        ("recurse", json!({"depth": 100_000_000u64}), "STACK_OVERFLOW"),
        ("huge_output", json!({"mb": 100}), "OUTPUT_LIMIT"),
        ("trap", json!({}), "TRAP"),
    ];
    for (tool, args, want) in expect {
        let (err, code, content) = call(&v, tool, args).await;
        assert!(err, "{tool} returned on Winch code: {}", &content[..content.len().min(200)]);
        assert_eq!(code.as_deref(), Some(want), "{tool}: {}", &content[..content.len().min(200)]);
    }
    // No grant, no file: the same refusal as on Cranelift code.
    let (err, _, content) = call(&v, "read_file", json!({"path": "/etc/passwd"})).await;
    assert!(err, "read_file outside any grant returned: {content}");
    assert!(!content.contains("root:"), "{content}");
    let (err, _, content) = call(&v, "ok", json!({})).await;
    assert!(!err, "a normal call after every containment failed: {content}");
    // A first-party tool computes the same result as on optimised code.
    let text = load(&rt, plugins::TEXT, Grant::default())?;
    let (err, _, out) = call(&text, "echo", json!({"text": "über ✓"})).await;
    assert!(!err && out.contains("über ✓"), "{out}");
    Ok(())
}
