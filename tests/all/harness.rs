//! The host as a library: `wharf-harness` builds a host in-process from a
//! profile, runs headless turns, resumes sessions, shows typed views and
//! hands notices to the embedder instead of printing them.

use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use wharf_core::events::{EventKind, StopReason};
use wharf_harness::{HostOptions, Notice};
use wharf_tests::host::{TestHost, scripted_model};

fn profile(turns: &str) -> String {
    let _ = wharf_tests::plugin(wharf_tests::plugins::FS);
    format!(
        "[agent]\nadapter = \"scripted\"\nmax_steps = 10\n\n[[plugin]]\nid = \"fs\"\npath = \"${{plugin_dir}}/fs.wasm\"\n\
         [plugin.grant]\ndirs = [\"${{workspace}}:rw\"]\n\n{}",
        scripted_model(turns)
    )
}

const READ_THEN_ANSWER: &str = r#"
[[plugin.config.turns]]
text = "Reading."
tool_calls = [{ name = "read", arguments = { path = "README.md" } }]

[[plugin.config.turns]]
text = "A sample project."

[[plugin.config.turns]]
text = "Still a sample project."
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_host_built_in_process_runs_a_turn_with_real_components() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws)?;
    std::fs::write(ws.join("README.md"), "# Sample\n")?;
    let host = TestHost::builder().profile_text(profile(READ_THEN_ANSWER)).workspace(&ws).start_in(dir.path()).await?;
    let run = host.run("What is this?").await?;
    assert_eq!(run.summary.reason, StopReason::Completed);
    assert_eq!(run.exit_code(), 0);
    let result = run
        .events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::ToolResult(r) => Some(r),
            _ => None,
        })
        .context("no tool result")?;
    assert_eq!(result.plugin.as_deref(), Some("fs"));
    assert!(!result.is_error, "{result:?}");
    assert!(result.content.contains("# Sample"), "{result:?}");
    // The session resumes by a unique part of its id, in the same store.
    let part = &run.session[run.session.len() - 6..];
    let again = host.run_with(Some(part), "And now?", None).await?;
    assert_eq!(again.session, run.session);
    assert_eq!(again.summary.text, "Still a sample project.");
    // Typed views: the loaded components and the host.
    let view = host.harness.plugins_view();
    let fs = view.plugins.iter().find(|p| p.id == "fs").context("fs not in the view")?;
    assert!(fs.tools.iter().any(|t| t.name == "read"), "{fs:?}");
    assert_eq!(host.harness.info().workspace, std::fs::canonicalize(&ws)?);
    host.close().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn notices_go_to_the_embedder_not_to_stderr() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws)?;
    let profile_path = dir.path().join("p.toml");
    std::fs::write(&profile_path, profile(READ_THEN_ANSWER))?;
    let seen: Arc<Mutex<Vec<Notice>>> = Arc::default();
    let sink = seen.clone();
    let options = HostOptions {
        profile: profile_path.display().to_string(),
        workspace: Some(ws),
        session_dir: Some(dir.path().join("sessions")),
        watch: false,
        model: Some("scripted/not-a-listed-model".into()),
        home: Some(dir.path().to_path_buf()),
        plugin_dir: wharf_tests::target_dir().join("plugins"),
        plugin_dir_explicit: true,
        cache_dir: Some(wharf_tests::target_dir().join("test-cache")),
        notices: Some(Arc::new(move |n| sink.lock().unwrap_or_else(|e| e.into_inner()).push(n))),
        ..HostOptions::default()
    };
    let host = wharf_harness::Harness::start(&options).await?;
    let notices = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert!(notices.iter().any(|n| matches!(n, Notice::Warning(t) if t.contains("not-a-listed-model"))), "{notices:?}");
    assert_eq!(host.current_model(), Some(("scripted".to_string(), "not-a-listed-model".to_string())));
    host.close().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_component_is_an_error_naming_the_plugin_directory() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let empty = dir.path().join("no-plugins");
    std::fs::create_dir_all(&empty)?;
    let options = HostOptions {
        profile: "default".into(),
        workspace: Some(dir.path().to_path_buf()),
        watch: false,
        home: Some(dir.path().to_path_buf()),
        plugin_dir: empty.clone(),
        plugin_dir_explicit: true,
        ..HostOptions::default()
    };
    let err = match wharf_harness::Harness::start(&options).await {
        Ok(_) => anyhow::bail!("a host started without its components"),
        Err(e) => format!("{e:#}"),
    };
    assert!(err.contains(&empty.display().to_string()) && err.contains("WHARF_PLUGIN_DIR"), "{err}");
    Ok(())
}
