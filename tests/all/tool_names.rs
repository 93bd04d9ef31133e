//! Tool-name collisions through a headless turn: two profile rows offering the
//! same tool names no longer stop the profile from starting. The first row
//! keeps the names, the later row's tools of those names are refused with a
//! warning naming both rows, and the turn runs.

use anyhow::Context;
use wharf_tests::host::TestHost;
use wharf_tests::plugins;

const PROFILE: &str = r#"
[agent]
adapter = "scripted"
max_steps = 5

[[plugin]]
id = "fs"
path = "${plugin_dir}/fs.wasm"
[plugin.grant]
dirs = ["${workspace}:rw"]

# The same component again: every tool name is taken by the row above.
[[plugin]]
id = "fs_again"
path = "${plugin_dir}/fs.wasm"
[plugin.grant]
dirs = ["${workspace}:rw"]

[[plugin]]
id = "scripted"
path = "${plugin_dir}/llm-scripted.wasm"
[plugin.config]
model = "scripted-test"

[[plugin.config.turns]]
text = "Reading."
tool_calls = [{ name = "read", arguments = { path = "README.md" } }]

[[plugin.config.turns]]
text = "Done."
"#;

#[tokio::test(flavor = "multi_thread")]
async fn the_first_row_keeps_a_shared_tool_name_and_the_run_completes() -> anyhow::Result<()> {
    let dir = tempfile::tempdir().context("creating a temp dir")?;
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).context("creating the workspace")?;
    std::fs::write(ws.join("README.md"), "# Sample\n").context("writing README.md")?;
    let _ = wharf_tests::plugin(plugins::FS);
    let _ = wharf_tests::plugin(plugins::LLM_SCRIPTED);
    let host = TestHost::builder().profile_text(PROFILE).workspace(&ws).start_in(dir.path()).await?;
    let run = host.run("Read the README").await?;
    assert_eq!(run.exit_code(), 0, "the profile did not run: {:?}", run.summary);
    let events = run.json();
    // The call ran on the first row.
    let result =
        events.iter().find(|e| e["type"] == "tool/result").unwrap_or_else(|| panic!("no tool result: {events:?}"));
    assert_eq!(result["data"]["plugin"], "fs", "{result}");
    assert_ne!(result["data"]["is_error"], true, "{result}");
    // The refusal is logged, naming both rows: the host logs each of the
    // registry's conflicts as it is (the binary's stderr line), and the
    // session has it.
    let conflicts: Vec<String> =
        host.harness.plugins.registry().snapshot().tool_conflicts.iter().map(ToString::to_string).collect();
    assert!(
        conflicts.iter().any(|c| c.contains("`read` of plugin `fs_again` refused") && c.contains("plugin `fs`")),
        "{conflicts:?}"
    );
    let loaded = events
        .iter()
        .find(|e| e["type"] == "plugin/loaded" && e["data"]["id"] == "fs_again")
        .unwrap_or_else(|| panic!("fs_again not loaded: {events:?}"));
    let warning = loaded["data"]["error"].as_str().unwrap_or_default();
    assert!(warning.contains("`read`") && warning.contains("`fs`"), "{loaded}");
    host.close().await;
    Ok(())
}
