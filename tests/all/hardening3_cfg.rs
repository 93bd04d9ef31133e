//! Issue 36 "Hardening 3", config and commands, seen by a new user driving
//! the real binary: `/permissions` finds the rules row by what it loads
//! (`--profile guarded` names it `rules`) and the offline demo asks before
//! its write; `/model` refuses an adapter the profile does not have and
//! warns about a model it does not list; a config-only reload is announced
//! as such; the README's own plugin example wins over the shipped `text`
//! tool of the same name (and `doctor` says so); `doctor` exits non-zero
//! with a `[FAIL]` line and fails a row all of whose tools are refused;
//! every shipped profile that talks to a real model knows its project.
//!
//! These are about the binary's chat, `doctor`, `config dump`, `plugin` and
//! `mcp serve` commands and spawn it; the demo's headless turn runs on an
//! in-process host.

use std::path::Path;
use std::process::{Command, Output};

use anyhow::Context;
use serde_json::{Value, json};

use crate::chat::env;
use wharf_tests::host::TestHost;
use wharf_tests::plugins;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn run(cmd: &mut Command) -> anyhow::Result<Output> {
    cmd.output().with_context(|| format!("spawning {cmd:?}"))
}

/// Item 6: `--profile guarded` calls its policy-rules row `rules`;
/// `/permissions` shows its mode and switches it.
#[test]
fn permissions_command_finds_the_rules_row_by_kind() {
    let e = env();
    let mut t = e.chat("guarded", &[]);
    t.expect("› ");
    t.line("/permissions");
    t.expect("permissions: workspace-write");
    t.expect("full-access");
    t.line("/permissions read-only");
    t.expect("permissions: read-only —");
    t.line("/permissions");
    t.expect("* read-only");
    t.send("\x04");
    assert!(t.wait().success());
}

/// Item 6: the offline demo has the documented `ask` default: chat asks
/// before the write, while a headless turn (`wharf run`, what `cargo xtask
/// demo` runs; here on an in-process host) completes without asking.
#[tokio::test(flavor = "multi_thread")]
async fn the_demo_asks_in_chat_and_runs_headless() -> anyhow::Result<()> {
    let e = env();
    let mut t = e.chat("demo", &[]);
    t.expect("› ");
    t.line("/permissions");
    t.expect("permissions: ask");
    t.expect("* ask");
    t.line("Summarize this workspace");
    t.expect("approval needed: write ");
    t.expect("allow?");
    t.line("n");
    t.expect("rejected (by chat(user))");
    t.expect("— completed");
    assert!(!e.ws.path().join("SUMMARY.md").exists());
    t.send("\x04");
    assert!(t.wait().success());

    let ws = tempfile::tempdir().context("creating a temp dir")?;
    std::fs::write(ws.path().join("README.md"), "# Sample\n").context("writing README.md")?;
    let host = TestHost::builder()
        .profile("demo")
        .workspace(ws.path())
        .home(e.home.path())
        .sessions(&e.sessions)
        .start_in(e.home.path())
        .await?;
    let turn = host.run("Summarise the README.").await;
    host.close().await;
    let turn = turn?;
    assert_eq!(turn.exit_code(), 0, "{:?}\n{:?}", turn.summary, turn.json());
    assert!(ws.path().join("SUMMARY.md").exists(), "{:?}", turn.json());
    Ok(())
}

/// Item 7: `/model bogus/x` names no adapter and is refused; a model the
/// profile does not list is used with a warning; a known one without.
#[test]
fn model_command_validates_adapters_and_warns_about_unknown_models() {
    let e = env();
    let mut t = e.chat("demo", &[]);
    t.expect("› ");
    t.line("/model bogus/x");
    t.expect("/model: no model adapter `bogus` in this profile (adapters: scripted)");
    t.line("/model");
    t.expect("scripted-demo");
    t.line("/model other-model");
    t.expect("`other-model` is not a model the profile lists for `scripted`");
    t.expect("model: scripted/other-model");
    t.line("/model scripted/scripted-demo");
    t.expect("model: scripted/scripted-demo");
    t.send("\x04");
    assert!(t.wait().success());
    let screen = t.screen();
    assert!(!screen.contains("model: scripted/bogus/x"), "{screen}");
    let warnings = screen.matches("is not a model the profile lists").count();
    assert_eq!(warnings, 1, "{screen}");
}

/// Item 7: a change to a row's config in a layer file (same component) is
/// announced as a config change naming the file, not as a load and an
/// unload of one digest.
#[test]
fn a_config_only_reload_is_announced_as_such() -> anyhow::Result<()> {
    let e = env();
    let turns = "[[plugin.config.turns]]\ntext = \"Hi.\"\n";
    let profile = e.profile("cfg", turns, false);
    let mut t = e.chat(&profile.display().to_string(), &[]);
    t.expect("› ");
    // Let the watcher settle before the edit.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let before = std::fs::read_to_string(&profile).context("reading profile")?;
    std::fs::write(&profile, before.replace("model = \"scripted-chat\"", "model = \"scripted-chat-2\""))
        .context("writing profile")?;
    t.expect("↻ config of scripted changed (from ~/cfg.toml)");
    // The session still answers, on the reloaded adapter.
    t.line("hello");
    t.expect("Hi.");
    t.expect("— completed");
    t.send("\x04");
    assert!(t.wait().success());
    let screen = t.screen();
    assert!(!screen.contains("↻ plugin scripted"), "{screen}");
    Ok(())
}

/// Follows the README's plugin quickstart literally under `--profile demo`:
/// scaffold `word_count`, build it into `.wharf/plugins`, add the README's
/// `.wharf/config.toml`; the project's `word_count` answers (over `mcp
/// serve`), and `doctor` names both rows and which wins.
#[test]
fn the_readme_plugin_example_wins_over_the_shipped_tool() -> anyhow::Result<()> {
    if Command::new("cargo").arg("--version").output().is_err() {
        wharf_tests::skip(&wharf_tests::current_test(), "cargo is not available to build the scaffold");
        return Ok(());
    }
    for p in [plugins::FS, plugins::TEXT, plugins::CONTEXT, plugins::POLICY_RULES, plugins::LLM_SCRIPTED] {
        let _ = wharf_tests::plugin(p);
    }
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let ws = tempfile::tempdir().context("creating a temp dir")?;
    let (home, ws) = (home.path(), ws.path());
    std::fs::write(ws.join("README.md"), "one two three\n").context("writing README.md")?;
    // Rust dependencies compile once per checkout (shared with plugins_langs).
    let cargo_target = wharf_tests::target_dir().join("plugin-new");
    let o = run(wharf_tests::wharf(home).current_dir(ws).args([
        "plugin",
        "new",
        "word_count",
        "--lang",
        "rust",
        "--kind",
        "tool",
    ]))?;
    assert!(o.status.success(), "plugin new: {}\n{}", text(&o.stdout), text(&o.stderr));
    let o = run(wharf_tests::wharf(home).current_dir(ws).env("CARGO_TARGET_DIR", &cargo_target).args([
        "plugin",
        "build",
        "word_count",
        "-o",
        ".wharf/plugins/word_count.wasm",
    ]))?;
    assert!(o.status.success(), "plugin build: {}\n{}", text(&o.stdout), text(&o.stderr));
    std::fs::write(ws.join(".wharf/config.toml"), readme_config()).context("writing .wharf/config.toml")?;

    // Over MCP: the project's plugin answers `word_count`.
    let sessions = home.join("sessions");
    let mut c = Command::new(crate::mcp::fixture());
    c.arg("client").args(["--call", &format!("word_count={}", json!({"name": "Wharf"}))]);
    c.arg("--").arg(wharf_tests::wharf_bin()).args(["mcp", "serve", "--profile", "demo", "--no-watch"]);
    c.arg("-w").arg(ws).arg("--session-dir").arg(&sessions);
    c.env("HOME", home)
        .env("WHARF_CACHE_DIR", wharf_tests::target_dir().join("test-cache"))
        .env("WHARF_LOG", "warn")
        .env_remove("DEEPSEEK_API_KEY");
    let out = run(&mut c)?;
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let report: Value = serde_json::from_str(stdout.trim()).with_context(|| format!("parsing JSON: {stdout}"))?;
    let call = &report["calls"][0];
    assert_eq!(call["result"]["_meta"]["wharf/plugin"], "word_count", "{call}");
    assert_eq!(call["result"]["content"][0]["text"], "Hello, Wharf!", "{call}");

    // `doctor` names both rows and which wins; nothing fails for it.
    let o = run(wharf_tests::wharf(home).current_dir(ws).args(["doctor", "--profile", "demo"]))?;
    let stdout = text(&o.stdout);
    let line = stdout.lines().find(|l| l.contains("tool `word_count`")).unwrap_or_default();
    assert!(line.starts_with("[warn]"), "{stdout}");
    assert!(line.contains("row `word_count` (") && line.contains("wins over row `text` ("), "{line}");
    assert!(line.contains(".wharf/config.toml") && line.contains("shipped:profiles/demo.toml"), "{line}");
    assert!(!stdout.lines().any(|l| l.starts_with("[FAIL]") && l.contains("word_count")), "{stdout}");
    Ok(())
}

/// The `.wharf/config.toml` the README shows after `wharf plugin build`.
fn readme_config() -> String {
    let readme = std::fs::read_to_string(wharf_tests::root().join("README.md")).expect("reading README.md");
    let start =
        readme.find("```toml\n# .wharf/config.toml\n").unwrap_or_else(|| panic!("README has no config example"));
    let body = &readme[start + "```toml\n".len()..];
    let end = body.find("```").unwrap_or(body.len());
    body[..end].to_string()
}

/// Item 10: a row all of whose tools other rows have fails the doctor
/// (exit 1), and the shadowed tool is named.
#[test]
fn doctor_fails_a_row_whose_tools_are_all_refused() -> anyhow::Result<()> {
    let _ = wharf_tests::plugin(plugins::TEXT);
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let ws = tempfile::tempdir().context("creating a temp dir")?;
    let profile = home.path().join("twice.toml");
    std::fs::write(
        &profile,
        "[[plugin]]\nid = \"text\"\npath = \"${plugin_dir}/text.wasm\"\n\n\
         [[plugin]]\nid = \"text_again\"\npath = \"${plugin_dir}/text.wasm\"\n",
    )
    .context("writing profile")?;
    let o = run(wharf_tests::wharf(home.path()).current_dir(ws.path()).arg("doctor").arg("--profile").arg(&profile))?;
    let stdout = text(&o.stdout);
    let fail = stdout.lines().find(|l| l.starts_with("[FAIL] plugin text_again")).unwrap_or_default();
    assert!(fail.contains("every tool it offers") && fail.contains("word_count"), "{stdout}");
    assert!(stdout.contains("row `text` (") && stdout.contains("wins over row `text_again`"), "{stdout}");
    assert_eq!(o.status.code(), Some(1), "{stdout}");
    Ok(())
}

/// Item 10: any `[FAIL]` line means a non-zero exit (here an unwritable
/// compile cache, which used to print `[FAIL]` and exit 0).
#[test]
fn doctor_exits_non_zero_when_it_prints_a_failure() -> anyhow::Result<()> {
    let _ = wharf_tests::plugin(plugins::FS);
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let ws = tempfile::tempdir().context("creating a temp dir")?;
    let not_a_dir = home.path().join("cache-file");
    std::fs::write(&not_a_dir, "x").context("writing not_a_dir")?;
    let profile = home.path().join("fs.toml");
    std::fs::write(&profile, "[[plugin]]\nid = \"fs\"\npath = \"${plugin_dir}/fs.wasm\"\n")
        .context("writing profile")?;
    let o = run(wharf_tests::wharf(home.path())
        .current_dir(ws.path())
        .env("WHARF_CACHE_DIR", &not_a_dir)
        .arg("doctor")
        .arg("--profile")
        .arg(&profile))?;
    let stdout = text(&o.stdout);
    assert!(stdout.lines().any(|l| l.starts_with("[FAIL] compile cache")), "{stdout}\n{}", text(&o.stderr));
    assert_eq!(o.status.code(), Some(1), "{stdout}");
    Ok(())
}

/// Item 23: every shipped profile whose adapter is a real model, and the
/// offline demo it mirrors, loads the project context (AGENTS.md) and the
/// permission presets.
#[test]
fn shipped_session_profiles_know_their_project() -> anyhow::Result<()> {
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let ws = tempfile::tempdir().context("creating a temp dir")?;
    let mut names: Vec<String> = std::fs::read_dir(wharf_tests::root().join("profiles"))
        .context("listing profiles")?
        .filter_map(|e| e.ok()?.path().file_stem()?.to_str().map(str::to_string))
        .collect();
    names.sort();
    let mut checked = Vec::new();
    for name in &names {
        let o = run(wharf_tests::wharf(home.path()).current_dir(ws.path()).args([
            "config",
            "dump",
            "--json",
            "--profile",
            name,
        ]))?;
        assert!(o.status.success(), "{name}: {}", text(&o.stderr));
        let dump: Value = serde_json::from_slice(&o.stdout).context("parsing JSON")?;
        let rows = dump["config"]["plugin"].as_array().cloned().unwrap_or_default();
        let file = |r: &Value| {
            Path::new(r["path"].as_str().unwrap_or("")).file_name().and_then(|n| n.to_str()).unwrap_or("").to_string()
        };
        let adapter = dump["config"]["agent"]["adapter"].as_str().unwrap_or("");
        let adapter_file = rows.iter().find(|r| r["id"] == adapter).map(file).unwrap_or_default();
        if adapter_file == "llm-scripted.wasm" && name != "demo" {
            continue;
        }
        checked.push(name.as_str());
        assert!(rows.iter().any(|r| file(r) == "context.wasm"), "profile `{name}` has no context row");
        let rules = rows.iter().find(|r| file(r) == "policy-rules.wasm");
        let mode = rules.map(|r| r["config"]["mode"].clone()).unwrap_or_default();
        assert_eq!(mode, "ask", "profile `{name}`: the permissions row and its documented `ask` default");
    }
    assert!(checked.contains(&"demo-deepseek") && checked.contains(&"demo"), "{checked:?}");
    Ok(())
}
