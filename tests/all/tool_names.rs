//! Tool-name collisions through `wharf run`: two profile rows offering the
//! same tool names no longer stop the profile from starting. The first row
//! keeps the names, the later row's tools of those names are refused with a
//! warning naming both rows, and the turn runs.

use anyhow::Context;
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

#[test]
fn the_first_row_keeps_a_shared_tool_name_and_the_run_completes() -> anyhow::Result<()> {
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let ws = tempfile::tempdir().context("creating a temp dir")?;
    std::fs::write(ws.path().join("README.md"), "# Sample\n").context("writing README.md")?;
    let _ = wharf_tests::plugin(plugins::FS);
    let profile = home.path().join("clash.toml");
    std::fs::write(&profile, PROFILE).context("writing profile")?;
    let sessions = home.path().join("sessions");
    let out = wharf_tests::wharf(home.path())
        .current_dir(ws.path())
        .args(["run", "Read the README", "--output", "jsonl", "--profile"])
        .arg(&profile)
        .arg("--session-dir")
        .arg(&sessions)
        .output()
        .context("running wharf run Read the README")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "the profile did not run: {stderr}");
    let events = wharf_tests::json_lines(&String::from_utf8_lossy(&out.stdout))?;
    // The call ran on the first row.
    let result =
        events.iter().find(|e| e["type"] == "tool/result").unwrap_or_else(|| panic!("no tool result: {events:?}"));
    assert_eq!(result["data"]["plugin"], "fs", "{result}");
    assert_ne!(result["data"]["is_error"], true, "{result}");
    // The refusal is logged, naming both rows: on stderr and in the session.
    assert!(stderr.contains("`read` of plugin `fs_again` refused") && stderr.contains("plugin `fs`"), "{stderr}");
    let loaded = events
        .iter()
        .find(|e| e["type"] == "plugin/loaded" && e["data"]["id"] == "fs_again")
        .unwrap_or_else(|| panic!("fs_again not loaded: {events:?}"));
    let warning = loaded["data"]["error"].as_str().unwrap_or_default();
    assert!(warning.contains("`read`") && warning.contains("`fs`"), "{loaded}");
    Ok(())
}
