//! Project context on the wire: the shipped `default` profile's `context`
//! component puts `~/.wharf/AGENTS.md` and the `AGENTS.md` files (or
//! `CLAUDE.md` where a directory has none) from the repository root down to
//! the workspace into the system prompt, which `wharf-mock-llm` records. The
//! DeepSeek row of the profile is pointed at the mock with `-c`. `wharf
//! doctor` lists the files a workspace's prompt gets.
//!
//! The tests of `~/.wharf/AGENTS.md` run `wharf run`: the `context`
//! component resolves `~` with the `HOME` it is granted, which is the
//! process's (the temporary home only in a child given it), and its log
//! line is on the binary's stderr. The others run in-process.

use std::path::{Path, PathBuf};
use std::process::Output;

use anyhow::Context;
use serde_json::{Value, json};
use wharf_mock_llm::{MockLlm, RecordedRequest, Script};
use wharf_tests::host::{TEST_KEY, TEST_KEY_ENV, TestHost};
use wharf_tests::plugins;

/// The key the mock expects: the one in this process's environment, which
/// children inherit too.
const KEY: &str = TEST_KEY;
const MODEL: &str = "deepseek-v4-flash";

fn write(path: &Path, text: &str) {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).expect("creating the directory");
    }
    std::fs::write(path, text).expect("writing the file");
}

/// A temp HOME, a directory tree for the workspace, and a mock model.
struct World {
    home: tempfile::TempDir,
    tree: tempfile::TempDir,
    mock: MockLlm,
}

impl World {
    fn new(replies: Value) -> Self {
        for p in [
            plugins::FS,
            plugins::SHELL,
            plugins::WEB,
            plugins::TODO,
            plugins::SKILLS,
            plugins::CONTEXT,
            plugins::COMPACTION,
            plugins::SUBAGENT,
            plugins::POLICY_RULES,
            plugins::LLM_DEEPSEEK,
        ] {
            let _ = wharf_tests::plugin(p);
        }
        let script: Script = serde_json::from_value(json!({
            "checks": {"api_key": KEY, "model": MODEL},
            "replies": replies,
            "default": {"kind": "stream", "text": "Default."},
        }))
        .expect("parsing JSON");
        let mock = MockLlm::start_background(script).expect("starting the mock LLM");
        let home = tempfile::tempdir().expect("creating a temp dir");
        let tree = tempfile::tempdir().expect("creating a temp dir");
        Self { home, tree, mock }
    }

    /// A path in the tree, canonical (as the workspace is shown to the model).
    fn path(&self, rel: &str) -> PathBuf {
        let base = std::fs::canonicalize(self.tree.path()).expect("canonicalizing tree");
        base.join(rel)
    }

    /// `wharf run TASK --profile default` in `ws`, the model at the mock.
    fn run(&self, ws: &Path, extra: &[&str]) -> Output {
        let port = self.mock.addr().port();
        let mut c = wharf_tests::wharf(self.home.path());
        c.current_dir(ws).env("DEEPSEEK_API_KEY", KEY).env("WHARF_LOG", "info").args([
            "run",
            "Follow the project rules.",
            "--profile",
            "default",
            "--no-watch",
            "--session-dir",
            &self.home.path().join("sessions").display().to_string(),
            "-c",
            &format!("plugin.deepseek.config.base_url={}/v1", self.mock.url()),
            "-c",
            &format!("plugin.deepseek.grant.hosts=[\"127.0.0.1:{port}\"]"),
        ]);
        c.args(extra);
        let out = c.output().expect("running the command");
        assert_eq!(
            out.status.code(),
            Some(0),
            "stdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        self.mock.assert_no_violations();
        out
    }

    /// The same turn in-process (the key under [`TEST_KEY_ENV`], set in
    /// this process, instead of `DEEPSEEK_API_KEY`).
    async fn run_in_process(&self, ws: &Path) -> anyhow::Result<()> {
        let port = self.mock.addr().port();
        let host = TestHost::builder()
            .profile("default")
            .home(self.home.path())
            .workspace(ws)
            .sessions(self.home.path().join("sessions"))
            .set(format!("plugin.deepseek.config.base_url={}/v1", self.mock.url()))
            .set(format!("plugin.deepseek.grant.hosts=[\"127.0.0.1:{port}\"]"))
            .set(format!("plugin.deepseek.config.api_key_env={TEST_KEY_ENV}"))
            .set(format!("plugin.deepseek.grant.env=[\"{TEST_KEY_ENV}\"]"))
            .start_in(self.home.path())
            .await?;
        let run = host.run("Follow the project rules.").await;
        let notices = host.notices();
        host.close().await;
        let run = run?;
        assert_eq!(run.exit_code(), 0, "{:?}\n{:#?}\n{notices:?}", run.summary, run.json());
        self.mock.assert_no_violations();
        Ok(())
    }
}

/// The system message of a recorded request.
fn system(req: &RecordedRequest) -> String {
    let msgs = req.body.as_ref().and_then(|b| b["messages"].as_array().cloned()).unwrap_or_default();
    assert_eq!(msgs.first().map(|m| m["role"].clone()), Some(json!("system")), "{}", req.raw_body);
    msgs[0]["content"].as_str().unwrap_or_default().to_string()
}

/// The `## PATH` headings of the project-instructions section, in order.
fn headings(prompt: &str) -> Vec<String> {
    let Some(at) = prompt.find("# Project instructions") else { return Vec::new() };
    prompt[at..].lines().filter_map(|l| l.strip_prefix("## ")).map(str::to_string).collect()
}

#[test]
fn agents_files_from_the_repository_root_down_and_the_global_one() -> anyhow::Result<()> {
    let w = World::new(json!([{"kind": "stream", "text": "Done."}]));
    write(&w.home.path().join(".wharf/AGENTS.md"), "GLOBAL: answer in English.\n");
    write(&w.path("AGENTS.md"), "ABOVE: outside the repository, never read.\n");
    std::fs::create_dir_all(w.path("repo/.git")).context("creating repo/.git")?;
    write(&w.path("repo/AGENTS.md"), "ROOT: run cargo fmt.\n");
    write(&w.path("repo/CLAUDE.md"), "ROOT-CLAUDE: shadowed by AGENTS.md.\n");
    write(&w.path("repo/crates/CLAUDE.md"), "MIDDLE: a CLAUDE.md where there is no AGENTS.md.\n");
    let ws = w.path("repo/crates/app");
    std::fs::create_dir_all(&ws).context("creating ws")?;

    let out = w.run(&ws, &[]);
    let reqs = w.mock.requests();
    assert_eq!(reqs.len(), 1);
    let prompt = system(&reqs[0]);
    let home = std::fs::canonicalize(w.home.path()).context("canonicalizing home")?;
    assert_eq!(
        headings(&prompt),
        [
            home.join(".wharf/AGENTS.md").display().to_string(),
            w.path("repo/AGENTS.md").display().to_string(),
            w.path("repo/crates/CLAUDE.md").display().to_string(),
        ],
        "only the files that exist, global first, then root → workspace:\n{prompt}"
    );
    let (g, r, m) = (
        prompt.find("GLOBAL: answer in English."),
        prompt.find("ROOT: run cargo fmt."),
        prompt.find("MIDDLE: a CLAUDE.md"),
    );
    assert!(g.is_some() && r.is_some() && m.is_some() && g < r && r < m, "{prompt}");
    assert!(!prompt.contains("ABOVE:"), "a file above the repository root: {prompt}");
    assert!(!prompt.contains("ROOT-CLAUDE"), "CLAUDE.md next to an AGENTS.md: {prompt}");
    // The base prompt comes first.
    assert!(!prompt.starts_with("# Project instructions"), "{prompt}");
    // Which files were loaded is in the log.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr.lines().find(|l| l.contains("context: loaded")).unwrap_or_default();
    assert!(line.contains(&w.path("repo/AGENTS.md").display().to_string()), "{stderr}");
    assert!(line.contains(&w.path("repo/crates/CLAUDE.md").display().to_string()), "{line}");
    // And `wharf doctor` in the workspace says what the prompt gets.
    let doctor =
        wharf_tests::wharf(w.home.path()).current_dir(&ws).arg("doctor").output().context("running wharf doctor")?;
    let stdout = String::from_utf8_lossy(&doctor.stdout);
    let want = format!(
        "[ok  ]   system prompt: adds {}, {}, {}",
        home.join(".wharf/AGENTS.md").display(),
        w.path("repo/AGENTS.md").display(),
        w.path("repo/crates/CLAUDE.md").display()
    );
    assert!(stdout.lines().any(|l| l == want), "want {want:?} in\n{stdout}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_repository_only_the_workspace_and_no_section_without_files() -> anyhow::Result<()> {
    let w = World::new(json!([{"kind": "stream", "text": "Done."}, {"kind": "stream", "text": "Done."}]));
    write(&w.path("AGENTS.md"), "PARENT: not a repository, so never read.\n");
    let ws = w.path("ws");
    write(&ws.join("AGENTS.md"), "WORKSPACE: keep changes small.\n");
    // The repository walk must stop at the workspace even if the temp dir
    // is inside a repository.
    if w.path("").ancestors().any(|d| d.join(".git").exists()) {
        wharf_tests::skip(&wharf_tests::current_test(), "the temp directory is inside a git repository");
        return Ok(());
    }
    w.run_in_process(&ws).await?;
    let prompt = system(&w.mock.requests()[0]);
    assert_eq!(headings(&prompt), [ws.join("AGENTS.md").display().to_string()], "{prompt}");
    assert!(prompt.contains("WORKSPACE: keep changes small."), "{prompt}");
    assert!(!prompt.contains("PARENT:"), "{prompt}");

    // No file at all (and no ~/.wharf): no section.
    let empty = w.path("empty");
    std::fs::create_dir_all(&empty).context("creating empty")?;
    w.run_in_process(&empty).await?;
    let prompt = system(&w.mock.requests()[1]);
    assert!(!prompt.contains("# Project instructions"), "{prompt}");
    Ok(())
}

#[test]
fn re_read_at_every_step_and_bounded() -> anyhow::Result<()> {
    let big = format!("BIG: {}", "é".repeat(200));
    let w = World::new(json!([
        {"kind": "stream", "tool_calls": [{
            "id": "call_1",
            "name": "write",
            "arguments": json!({"path": "AGENTS.md", "content": "WRITTEN: appears from the next step.\n"}).to_string(),
        }]},
        {"kind": "stream", "text": "Done."},
    ]));
    let ws = w.path("ws");
    std::fs::create_dir_all(ws.join(".git")).context("creating .git")?;
    write(&ws.join("sub/AGENTS.md"), "SUB: not an ancestor, never read.\n");
    write(&w.home.path().join(".wharf/AGENTS.md"), &big);
    // 102 bytes: "BIG: ", 48 two-byte characters and half of the next, which is dropped.
    w.run(&ws, &["-c", "plugin.context.config.max_bytes=102", "-c", "agent.ask=allow"]);
    let reqs = w.mock.requests();
    assert_eq!(reqs.len(), 2);
    let first = system(&reqs[0]);
    let kept = format!("BIG: {}", "é".repeat(48));
    assert!(first.contains(&format!("{kept}\n")), "cut on a character boundary: {first}");
    assert!(!first.contains(&format!("{kept}é")), "{first}");
    assert!(first.contains("[truncated: the first 101 of 405 bytes of "), "{first}");
    assert!(!first.contains("WRITTEN:") && !first.contains("SUB:"), "{first}");
    // The model wrote AGENTS.md in step 1; step 2's prompt has it, and it
    // takes the budget first (it is the most specific file).
    let second = system(&reqs[1]);
    assert!(second.contains("WRITTEN: appears from the next step."), "{second}");
    assert!(!second.contains(&kept), "the global file got what was left: {second}");
    Ok(())
}

/// The default profile offers each capability once: every tool spec rides in
/// every request, so the first request on the wire carries exactly the daily
/// driver's tools (no `text` row: `regex_search` duplicated `grep`).
#[tokio::test(flavor = "multi_thread")]
async fn the_default_profile_offers_each_tool_once() -> anyhow::Result<()> {
    let w = World::new(json!([{"kind": "stream", "text": "Done."}]));
    let ws = w.path("ws");
    std::fs::create_dir_all(&ws).context("creating ws")?;
    w.run_in_process(&ws).await?;
    let reqs = w.mock.requests();
    assert_eq!(reqs.len(), 1);
    let tools = reqs[0].body.as_ref().and_then(|b| b["tools"].as_array().cloned()).unwrap_or_default();
    let mut names: Vec<String> =
        tools.iter().map(|t| t["function"]["name"].as_str().unwrap_or_default().to_string()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "bash",
            "edit",
            "glob",
            "grep",
            "job_kill",
            "job_list",
            "job_output",
            "list",
            "read",
            "skill",
            "subagent",
            "todo_read",
            "todo_write",
            "web_fetch",
            "write"
        ],
        "{}",
        reqs[0].raw_body
    );
    Ok(())
}
