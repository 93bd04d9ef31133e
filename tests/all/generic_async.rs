//! WASI 0.3 components as tools (issue 39 item 2): the third-party fixture
//! `tests/plugins/generic-async` (`tests/generic/async/wit/streams.wit`,
//! built from source with wit-bindgen's async support) exports `async`
//! functions returning a value, a `stream<u8>`, a `stream<string>`, a
//! `stream<list<u8>>`, a `future<string>` and an endless `stream<u8>`.
//! Called through `wharf plugin call` (the binary) and in a session (the
//! in-process host with the scripted model): the streamed text is the
//! call's `tool/progress` while it runs and the whole of it the result; a
//! deadline ends the endless stream with what it streamed.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::{Value, json};
use wharf_tests::host::TestHost;
use wharf_tests::plugins;

fn fixture() -> PathBuf {
    wharf_tests::plugin(plugins::GENERIC_ASYNC)
}

/// `wharf plugin call FILE TOOL ARGS EXTRA…`: (exit code, the printed
/// outcome, stderr).
fn call(home: &Path, tool: &str, args: &Value, extra: &[&str]) -> anyhow::Result<(i32, Value, String)> {
    let file = fixture().display().to_string();
    let out = wharf_tests::wharf(home)
        .args(["plugin", "call", &file, tool, &args.to_string()])
        .args(extra)
        .output()
        .context("running wharf plugin call")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let v: Value =
        serde_json::from_str(stdout.trim()).with_context(|| format!("{tool}: not JSON: {stdout}\n{stderr}"))?;
    Ok((out.status.code().unwrap_or(-1), v, stderr))
}

#[test]
fn async_functions_streams_and_futures_through_plugin_call() -> anyhow::Result<()> {
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let home = home.path();
    // An async function returning a value.
    let (code, out, _) = call(home, "jobs_slow_add", &json!({"a": 2, "b": 3}), &[])?;
    assert_eq!((code, &out["content"]), (0, &json!("5")), "{out}");
    // stream<u8>: the whole text is the result; it streamed to stderr first.
    let (code, out, err) = call(home, "jobs_count", &json!({"n": 3}), &[])?;
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(out["is_error"], false, "{out}");
    assert_eq!(out["content"], "1\n2\n3\n", "{out}");
    assert!(err.contains("1\n2\n3\n"), "the stream went to stderr as progress: {err}");
    // stream<string> and stream<list<u8>>.
    let (code, out, _) = call(home, "jobs_words", &json!({"text": "to be  or"}), &[])?;
    assert_eq!((code, &out["content"]), (0, &json!("to be or ")), "{out}");
    let (code, out, _) = call(home, "jobs_chunks", &json!({"n": 2, "size": 3}), &[])?;
    assert_eq!((code, &out["content"]), (0, &json!("xxx\nxxx\n")), "{out}");
    // future<string>: awaited, its value the output (JSON, like a return).
    let (code, out, _) = call(home, "jobs_later", &json!({"name": "Wharf"}), &[])?;
    assert_eq!((code, &out["content"]), (0, &json!("\"Hello, Wharf!\"")), "{out}");
    Ok(())
}

#[test]
fn a_deadline_stops_an_endless_stream_keeping_what_it_streamed() -> anyhow::Result<()> {
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let (code, out, err) = call(home.path(), "jobs_forever", &json!({"interval-ms": 20}), &["--timeout-ms", "1000"])?;
    assert_eq!(code, 1, "{out}\n{err}");
    assert_eq!(out["is_error"], true, "{out}");
    assert_eq!(out["error_code"], "TIMEOUT", "{out}");
    let content = out["content"].as_str().unwrap_or_default();
    assert!(content.starts_with("tick 1\n"), "{content}");
    assert!(content.ends_with("[stream stopped: call exceeded its time limit of 1000 ms]"), "{content}");
    assert!(err.contains("tick 1\n"), "{err}");
    Ok(())
}

#[test]
fn inspect_shows_async_signatures() -> anyhow::Result<()> {
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let file = fixture().display().to_string();
    let out = wharf_tests::wharf(home.path())
        .args(["plugin", "inspect", &file, "--json"])
        .output()
        .context("running wharf plugin inspect")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_str(&stdout).with_context(|| format!("parsing JSON: {stdout}"))?;
    let funcs = v["functions"].as_array().cloned().unwrap_or_default();
    let sig = |tool: &str| funcs.iter().find(|f| f["tool"] == tool).map(|f| f["signature"].clone());
    assert_eq!(sig("jobs_count"), Some(json!("async func(n: u32) -> stream<u8>")), "{funcs:?}");
    assert_eq!(sig("jobs_words"), Some(json!("async func(text: string) -> stream<string>")));
    assert_eq!(sig("jobs_chunks"), Some(json!("async func(n: u32, size: u32) -> stream<list<u8>>")));
    assert_eq!(sig("jobs_later"), Some(json!("async func(name: string) -> future<string>")));
    assert_eq!(sig("jobs_slow_add"), Some(json!("async func(a: u32, b: u32) -> u32")));
    Ok(())
}

/// In a session: the scripted model calls the stream, the future and the
/// endless stream (its row's deadline 1.5 s) in one step; the streamed
/// deltas are `tool/progress` events of each call, logged before its
/// result, and add up to the result.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_sees_the_streamed_progress_before_the_result() -> anyhow::Result<()> {
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let ws = tempfile::tempdir().context("creating a temp dir")?;
    let _ = wharf_tests::plugin(plugins::LLM_SCRIPTED);
    let profile = home.path().join("async.toml");
    let text = format!(
        r#"
[agent]
adapter = "scripted"
max_steps = 4

[[plugin]]
id = "jobs"
path = {}
[plugin.grant]
timeout_ms = 1500

[[plugin]]
id = "scripted"
path = "${{plugin_dir}}/llm-scripted.wasm"
[plugin.config]
model = "scripted-test"

[[plugin.config.turns]]
text = "Working."
tool_calls = [
  {{ name = "jobs_count", arguments = {{ n = 40 }} }},
  {{ name = "jobs_later", arguments = {{ name = "session" }} }},
  {{ name = "jobs_forever", arguments = {{ "interval-ms" = 20 }} }},
]

[[plugin.config.turns]]
text = "Done."
"#,
        crate::policy::toml_str(&fixture().display().to_string())
    );
    std::fs::write(&profile, text).context("writing profile")?;
    let host = TestHost::builder()
        .profile(profile.display().to_string())
        .home(home.path())
        .workspace(ws.path())
        .start_in(home.path())
        .await?;
    let run = host.run("stream please").await;
    host.close().await;
    let run = run?;
    let events = run.json();
    let dump = format!("{events:#?}");
    assert_eq!(run.exit_code(), 0, "{:?}\n{dump}", run.summary);
    let call_id = |tool: &str| {
        events
            .iter()
            .find(|e| e["type"] == "tool/call" && e["data"]["name"] == tool)
            .and_then(|e| e["data"]["id"].as_str().map(str::to_string))
            .unwrap_or_else(|| panic!("no call of {tool}: {dump}"))
    };
    let result = |id: &str| {
        events
            .iter()
            .position(|e| e["type"] == "tool/result" && e["data"]["call_id"] == id)
            .unwrap_or_else(|| panic!("no result of {id}: {dump}"))
    };
    let progress = |id: &str| -> Vec<(usize, String)> {
        events
            .iter()
            .enumerate()
            .filter(|(_, e)| e["type"] == "tool/progress" && e["data"]["call_id"] == id)
            .map(|(i, e)| (i, e["data"]["text"].as_str().unwrap_or_default().to_string()))
            .collect()
    };
    // The counted stream: its deltas add up to its result, all before it.
    let count = call_id("jobs_count");
    let at = result(&count);
    let deltas = progress(&count);
    assert!(!deltas.is_empty(), "no progress for the stream: {dump}");
    assert!(deltas.iter().all(|(i, _)| *i < at), "progress after the result: {dump}");
    let streamed: String = deltas.iter().map(|(_, t)| t.as_str()).collect();
    let want: String = (1..=40).map(|i| format!("{i}\n")).collect();
    assert_eq!(streamed, want);
    assert_eq!(events[at]["data"]["content"], want.as_str());
    assert_eq!(events[at]["data"]["is_error"], false, "{}", events[at]);
    assert_eq!(events[at]["data"]["plugin"], "jobs");
    // The future: awaited, no progress.
    let later = call_id("jobs_later");
    assert_eq!(events[result(&later)]["data"]["content"], "\"Hello, session!\"");
    assert!(progress(&later).is_empty());
    // The endless stream: stopped by its row's deadline, with its ticks.
    let forever = call_id("jobs_forever");
    let r = &events[result(&forever)]["data"];
    assert_eq!(r["error_code"], "TIMEOUT", "{r}");
    let content = r["content"].as_str().unwrap_or_default();
    assert!(content.starts_with("tick 1\n") && content.contains("[stream stopped:"), "{r}");
    let ticks: String = progress(&forever).into_iter().map(|(_, t)| t).collect();
    assert!(ticks.starts_with("tick 1\n"), "{ticks}");
    assert!(content.starts_with(&ticks), "the result holds what streamed: {ticks:?} / {content:?}");
    let end = events.last().cloned().unwrap_or_default();
    assert_eq!(end["data"]["reason"], "completed", "{end}");
    Ok(())
}

#[test]
fn a_host_without_component_model_async_refuses_wasi_0_3_components_and_serves_the_rest() -> anyhow::Result<()> {
    // `WHARF_COMPONENT_MODEL_ASYNC=0`: the engine skips the component
    // model's async machinery (cheaper calls); a component that needs it
    // is refused with a message saying why, a WASI 0.2 one still runs.
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let file = fixture().display().to_string();
    let out = wharf_tests::wharf(home.path())
        .env("WHARF_COMPONENT_MODEL_ASYNC", "0")
        .args(["plugin", "call", &file, "jobs_slow_add", r#"{"a": 2, "b": 3}"#])
        .output()
        .context("running wharf plugin call")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("without component-model async"), "the refusal says why: {stderr}");
    let echo = wharf_tests::plugin(plugins::ECHO).display().to_string();
    let out = wharf_tests::wharf(home.path())
        .env("WHARF_COMPONENT_MODEL_ASYNC", "0")
        .args(["plugin", "call", &echo, "echo", r#"{"text": "still here"}"#])
        .output()
        .context("running wharf plugin call")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_str(stdout.trim()).with_context(|| format!("not JSON: {stdout}"))?;
    assert_eq!(v["content"], "still here", "{v}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wasi_0_3_component_is_cached_for_its_own_engine() -> anyhow::Result<()> {
    // Such a component runs on the runtime's second engine: loaded again in
    // the same process it comes from memory, and in the next process from
    // disk, each time code of that engine (code of one engine cannot run in
    // another's stores), and it answers.
    use wharf_runtime::cache::CacheOutcome;
    use wharf_runtime::grants::Grant;
    use wharf_runtime::{CallContext, PluginSpec, Runtime, RuntimeOptions};
    let dir = tempfile::tempdir().context("creating a temp dir")?;
    let spec = PluginSpec {
        id: "jobs".into(),
        path: fixture(),
        config: json!({}),
        grant: Grant::default(),
        warm: false,
        on_invalid_config: Default::default(),
    };
    let ctx = CallContext { session_id: "s".into(), call_id: "c".into(), workspace: None, services: None };
    let mut seen = Vec::new();
    for _process in 0..2 {
        let rt = Runtime::new(RuntimeOptions { cache_dir: Some(dir.path().to_path_buf()), ..Default::default() })?;
        for _load in 0..2 {
            let v = rt.load(&spec).context("loading the WASI 0.3 component")?;
            seen.push(v.cache);
            let out = v.call_tool("jobs_slow_add", r#"{"a": 2, "b": 3}"#, &ctx).await.context("calling it")?;
            assert_eq!(out.content, "5", "{out:?}");
        }
    }
    assert_eq!(
        seen,
        [CacheOutcome::Compiled, CacheOutcome::Memory, CacheOutcome::Disk, CacheOutcome::Memory],
        "where each load's code came from"
    );
    Ok(())
}
