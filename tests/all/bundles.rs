//! Claude Code / Codex plugin bundles (`wharf-bundle`, `[[bundle]]` rows,
//! `wharf plugin add|list|remove`), with bundles built in the test: a
//! skill, a command, an agent, an MCP server in `.mcp.json`, and
//! PreToolUse / PostToolUse / UserPromptSubmit hooks in Python and shell.
//!
//! In-process (the scripted model picks a branch by the session's first
//! message): the skill is offered and loads, the command expands and runs,
//! hooks deny, ask (a real approval through the approver), rewrite and add
//! context; a crashing or garbage-printing hook denies; an edited hook
//! decides the next call and the log names the new version; a prompt hook
//! blocks a turn; the bundle's MCP server cannot write outside its grant.
//! With a mock model recording the wire: `SessionStart` and
//! `UserPromptSubmit` context reaches the system prompt and the log, an
//! `agents/*.md` preset runs through the `subagent` tool with its
//! instructions and only its tools, and `SubagentStop` runs for the child.
//! On the binary: `plugin add NAME@MARKETPLACE` from a git repository pins
//! the commit and digest, reports what Wharf cannot honour, and a bundle
//! whose pinned content changed is refused by `plugin add` and by a host.

use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, ensure};
use serde_json::{Value, json};
use wharf_core::approval::{Approval, ApprovalRequest, Approver};
use wharf_core::events::{ApprovalOutcome, StopReason};
use wharf_core::plugin::BoxFuture;
use wharf_runtime::process::{Level, sandbox_level};
use wharf_tests::host::{TestHost, scripted_model};
use wharf_tests::plugins;

fn write(path: &Path, text: &str) -> Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// Why the OS sandbox hooks run in is missing here, if it is.
fn no_sandbox() -> Option<String> {
    let (level, detail) = sandbox_level();
    (level == Level::None).then(|| format!("no OS sandbox: {detail}"))
}

const GUARD_PY: &str = r#"import json, sys
data = json.load(sys.stdin)
cmd = data["tool_input"].get("command", "")
assert data["hook_event_name"] == "PreToolUse" and data["tool_name"] == "Bash"
def say(decision, reason, **more):
    out = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": decision,
                                  "permissionDecisionReason": reason, **more}}
    print(json.dumps(out))
if "rm -rf" in cmd:
    say("deny", "no rm -rf here")
elif "please-ask" in cmd:
    say("ask", "sure about this?")
elif "crash" in cmd:
    raise RuntimeError("the guard fell over")
elif "garbage" in cmd:
    print("this is not json")
elif "rewrite-me" in cmd:
    say("allow", "rewritten", updatedInput={"command": "echo rewritten by the hook"})
"#;

const POST_SH: &str = r#"#!/bin/sh
cat > /dev/null
printf '{"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "post-hook saw it"}}'
"#;

const PROMPT_PY: &str = r#"import json, sys
data = json.load(sys.stdin)
if "FORBIDDEN" in data["prompt"]:
    print("that word is forbidden", file=sys.stderr)
    sys.exit(2)
"#;

/// A bundle named `demo` in `dir`, its MCP server the test fixture.
fn make_bundle(dir: &Path, fixture: &Path) -> Result<()> {
    write(
        &dir.join(".claude-plugin/plugin.json"),
        r#"{"name": "demo", "version": "1.0.0", "description": "A test bundle"}"#,
    )?;
    write(
        &dir.join("skills/greeter/SKILL.md"),
        "---\nname: greeter\ndescription: Greets people in Klingon.\n---\n# Greeter\nSay nuqneH to everyone.\n",
    )?;
    write(
        &dir.join("commands/review.md"),
        "---\ndescription: Review a file\nargument-hint: FILE\n---\nReview the file $ARGUMENTS and list problems.\n",
    )?;
    write(
        &dir.join("agents/helper.md"),
        "---\nname: helper\ndescription: Helps.\ntools: Read, Grep\n---\nYou help.\n",
    )?;
    write(&dir.join("hooks/guard.py"), GUARD_PY)?;
    write(&dir.join("hooks/post.sh"), POST_SH)?;
    write(&dir.join("hooks/prompt.py"), PROMPT_PY)?;
    write(&dir.join("hooks/write_guard.sh"), "#!/bin/sh\nexit 0\n")?;
    let hooks = json!({"hooks": {
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "/usr/bin/python3 ${CLAUDE_PLUGIN_ROOT}/hooks/guard.py", "timeout": 8}]},
            {"matcher": "Write|Edit", "hooks": [{"type": "command", "command": "sh ${CLAUDE_PLUGIN_ROOT}/hooks/write_guard.sh"}]}
        ],
        "PostToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "sh ${CLAUDE_PLUGIN_ROOT}/hooks/post.sh"}]}],
        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "/usr/bin/python3 ${CLAUDE_PLUGIN_ROOT}/hooks/prompt.py"}]}],
        "PreCompact": [{"hooks": [{"type": "command", "command": "true"}]}]
    }});
    write(&dir.join("hooks/hooks.json"), &serde_json::to_string_pretty(&hooks)?)?;
    let mcp = json!({"mcpServers": {"jail": {"command": fixture.display().to_string(), "args": ["stdio"]}}});
    write(&dir.join(".mcp.json"), &serde_json::to_string_pretty(&mcp)?)?;
    Ok(())
}

/// A scripted branch: sessions whose first message holds `when` make the
/// call `tool(args)`, then end with `done`.
fn branch(when: &str, tool: &str, args: Value) -> String {
    let args = serde_json::to_string(&args.to_string()).unwrap_or_default();
    format!(
        "\n[[plugin.config.branches]]\nwhen = \"{when}\"\n[[plugin.config.branches.turns]]\ntool_calls = [{{ name = \
         \"{tool}\", arguments = {args} }}]\n[[plugin.config.branches.turns]]\ntext = \"done\"\n"
    )
}

fn profile(bundle: &Path, grant: &Path, branches: &str) -> String {
    for p in [plugins::FS, plugins::SHELL, plugins::SKILLS] {
        let _ = wharf_tests::plugin(p);
    }
    format!(
        "[agent]\nadapter = \"scripted\"\nmax_steps = 4\n\n\
         [[plugin]]\nid = \"fs\"\npath = \"${{plugin_dir}}/fs.wasm\"\n[plugin.grant]\ndirs = [\"${{workspace}}:rw\"]\n\n\
         [[plugin]]\nid = \"shell\"\npath = \"${{plugin_dir}}/shell.wasm\"\n[plugin.grant]\ndirs = \
         [\"${{workspace}}:rw\"]\nprocess = true\n\n\
         [[plugin]]\nid = \"skills\"\npath = \"${{plugin_dir}}/skills.wasm\"\n[plugin.config]\ndirs = []\n\n\
         [[bundle]]\nname = \"demo\"\npath = \"{}\"\n[bundle.sandbox]\ndirs = [\"{}:rw\"]\n\n{}",
        bundle.display(),
        grant.display(),
        scripted_model(&format!("[[plugin.config.turns]]\ntext = \"no branch\"\n{branches}"))
    )
}

/// Answers every question with `outcome` and keeps them.
struct Recorder {
    outcome: ApprovalOutcome,
    asked: Mutex<Vec<ApprovalRequest>>,
}

impl Approver for Recorder {
    fn decide(
        &self,
        request: ApprovalRequest,
        _cancel: tokio_util::sync::CancellationToken,
    ) -> BoxFuture<'_, Approval> {
        self.asked.lock().unwrap_or_else(|e| e.into_inner()).push(request);
        Box::pin(async move { Approval { outcome: self.outcome, by: "test".into(), note: None } })
    }
}

fn recorder(outcome: ApprovalOutcome) -> Arc<Recorder> {
    Arc::new(Recorder { outcome, asked: Mutex::default() })
}

/// One turn of `task` in a new session, answered by `approver`: how it
/// ended and the session's events as JSON.
async fn turn(h: &TestHost, approver: Arc<dyn Approver>, task: &str) -> Result<(StopReason, Vec<Value>)> {
    let stop = tokio_util::sync::CancellationToken::new();
    let (agent, _) = h.harness.open_agent_until(None, approver, None, stop.clone())?;
    h.harness.mcp_ready().await.map_err(|e| anyhow::anyhow!("MCP servers not ready: {e}"))?;
    let summary = agent.prompt(task.to_string()).await?;
    stop.cancel();
    agent.log().flush().await?;
    let id = agent.session_id().to_string();
    drop(agent);
    let events = h.harness.store.load(&id)?.events;
    let events = events.iter().filter_map(|e| serde_json::to_value(e).ok()).collect();
    Ok((summary.reason, events))
}

/// The `tool/result` data of the session's only call.
fn result(events: &[Value]) -> Value {
    let r: Vec<&Value> = events.iter().filter(|e| e["type"] == "tool/result").collect();
    assert_eq!(r.len(), 1, "one tool result expected: {events:#?}");
    r[0]["data"].clone()
}

/// The version logged for the bundle's vote on the session's call.
fn hook_version(events: &[Value]) -> String {
    let d = events.iter().find(|e| e["type"] == "policy/decision").unwrap_or_else(|| panic!("no policy/decision"));
    let votes = d["data"]["votes"].as_array().cloned().unwrap_or_default();
    let v = votes.iter().find(|v| v["plugin"] == "bundle:demo").unwrap_or_else(|| panic!("no bundle vote: {d}"));
    v["version"].as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bundle_offers_skills_commands_mcp_and_hooks_that_fail_closed() -> Result<()> {
    if let Some(why) = no_sandbox() {
        wharf_tests::skip(&wharf_tests::current_test(), &why);
        return Ok(());
    }
    let tmp = tempfile::tempdir()?;
    let (bundle, grant, outside) = (tmp.path().join("demo"), tmp.path().join("grant"), tmp.path().join("outside"));
    std::fs::create_dir_all(&grant)?;
    std::fs::create_dir_all(&outside)?;
    make_bundle(&bundle, &crate::mcp::fixture())?;
    let escaped = outside.join("escaped.txt");
    let granted = grant.join("granted.txt");
    let mut b = String::new();
    b += &branch("SKILL", "skill", json!({"name": "greeter"}));
    b += &branch("Review the file", "read", json!({"path": "notes.md"}));
    b += &branch("RMRF", "bash", json!({"command": "rm -rf build"}));
    b += &branch("ASKME", "bash", json!({"command": "echo please-ask"}));
    b += &branch("CRASH", "bash", json!({"command": "echo crash"}));
    b += &branch("GARBAGE", "bash", json!({"command": "echo garbage"}));
    b += &branch("REWRITE", "bash", json!({"command": "echo rewrite-me"}));
    b += &branch("WRITE-ONE", "write", json!({"path": "one.txt", "content": "1"}));
    b += &branch("WRITE-TWO", "write", json!({"path": "two.txt", "content": "2"}));
    b += &branch("MCP-OUT", "mcp__demo-jail__write_file", json!({"path": escaped.display().to_string(), "text": "x"}));
    b += &branch("MCP-IN", "mcp__demo-jail__write_file", json!({"path": granted.display().to_string(), "text": "ok"}));
    let h = TestHost::builder().profile_text(profile(&bundle, &grant, &b)).start_in(tmp.path()).await?;
    std::fs::write(h.workspace.join("notes.md"), "some notes\n")?;
    let deny = || recorder(ApprovalOutcome::Rejected);

    // The skill is offered and loads.
    let (_, ev) = turn(&h, deny(), "SKILL please").await?;
    let r = result(&ev);
    ensure!(r["is_error"] != true && r["content"].as_str().unwrap_or("").contains("nuqneH"), "{r}");

    // The command is listed, expands with $ARGUMENTS, and runs as a prompt.
    let cmds = h.harness.bundle_commands();
    ensure!(cmds.iter().any(|c| c.name == "review" && c.source == "bundle:demo"), "{cmds:?}");
    let prompt = h.harness.expand_command("/review notes.md").context("/review is a command")?;
    assert_eq!(prompt, "Review the file notes.md and list problems.");
    assert_eq!(h.harness.expand_command("/demo:review x").as_deref(), Some("Review the file x and list problems."));
    assert_eq!(h.harness.expand_command("/nope"), None);
    let (reason, ev) = turn(&h, deny(), &prompt).await?;
    assert_eq!(reason, StopReason::Completed);
    ensure!(result(&ev)["content"].as_str().unwrap_or("").contains("some notes"), "{ev:#?}");

    // A hook denies; one that crashes or prints garbage denies and says why.
    for (task, why) in [("RMRF", "no rm -rf here"), ("CRASH", "the guard fell over"), ("GARBAGE", "not a JSON object")]
    {
        let (_, ev) = turn(&h, deny(), task).await?;
        let r = result(&ev);
        assert_eq!(r["error_code"], "DENIED", "{task}: {r}");
        ensure!(r["content"].as_str().unwrap_or("").contains(why), "{task}: {r}");
        ensure!(r["content"].as_str().unwrap_or("").contains("hooks/guard.py@"), "{task}: names the hook: {r}");
    }

    // `ask` is a real approval question: rejected, then allowed.
    let no = deny();
    let (_, ev) = turn(&h, no.clone(), "ASKME").await?;
    assert_eq!(result(&ev)["error_code"], "APPROVAL_REJECTED");
    let asked = no.asked.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert_eq!(asked.len(), 1);
    ensure!(asked[0].reason.contains("sure about this?") && asked[0].tool == "bash", "{asked:?}");
    let yes = recorder(ApprovalOutcome::AllowedOnce);
    let (_, ev) = turn(&h, yes.clone(), "ASKME").await?;
    let r = result(&ev);
    ensure!(r["is_error"] != true && r["content"].as_str().unwrap_or("").contains("please-ask"), "{r}");
    assert_eq!(yes.asked.lock().unwrap_or_else(|e| e.into_inner()).len(), 1);

    // updatedInput rewrites the call; the PostToolUse hook adds context.
    let (_, ev) = turn(&h, deny(), "REWRITE").await?;
    let r = result(&ev);
    let content = r["content"].as_str().unwrap_or("");
    ensure!(content.contains("rewritten by the hook") && content.contains("post-hook saw it"), "{r}");

    // An edited hook decides the next call, and the log names its version.
    let (_, ev) = turn(&h, deny(), "WRITE-ONE").await?;
    ensure!(result(&ev)["is_error"] != true, "{ev:#?}");
    let v1 = hook_version(&ev);
    write(&bundle.join("hooks/write_guard.sh"), "#!/bin/sh\necho 'writes are frozen' >&2\nexit 2\n")?;
    let (_, ev) = turn(&h, deny(), "WRITE-TWO").await?;
    let r = result(&ev);
    assert_eq!(r["error_code"], "DENIED", "{r}");
    ensure!(r["content"].as_str().unwrap_or("").contains("writes are frozen"), "{r}");
    let v2 = hook_version(&ev);
    ensure!(!v1.is_empty() && v1 != v2, "versions {v1} / {v2}");
    ensure!(!h.workspace.join("two.txt").exists());

    // UserPromptSubmit blocks the turn.
    let (reason, _) = turn(&h, deny(), "say the FORBIDDEN word").await?;
    ensure!(
        matches!(&reason, StopReason::Blocked { message } if message.contains("that word is forbidden")),
        "{reason:?}"
    );

    // The bundle's MCP server is confined: its grant only.
    let (_, ev) = turn(&h, deny(), "MCP-OUT").await?;
    let r = result(&ev);
    assert_eq!(r["error_code"], "MCP_TOOL_ERROR", "{r}");
    ensure!(r["content"].as_str().unwrap_or("").contains("Permission denied"), "{r}");
    ensure!(!escaped.exists());
    let (_, ev) = turn(&h, deny(), "MCP-IN").await?;
    ensure!(result(&ev)["is_error"] != true, "{ev:#?}");
    assert_eq!(std::fs::read_to_string(&granted)?, "ok");
    h.close().await;
    Ok(())
}

fn git(dir: &Path, args: &[&str]) -> Result<()> {
    let ok = std::process::Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "init.defaultBranch=main"])
        .args(args)
        .status()?
        .success();
    ensure!(ok, "git {args:?} failed");
    Ok(())
}

fn wharf_out(home: &Path, ws: &Path, args: &[&str]) -> Result<(bool, String)> {
    let out = wharf_tests::wharf(home).current_dir(ws).args(args).output()?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    Ok((out.status.success(), text))
}

#[tokio::test(flavor = "multi_thread")]
async fn plugin_add_pins_marketplace_bundles_and_refuses_changed_content() -> Result<()> {
    if std::process::Command::new("git").arg("--version").output().is_err() {
        wharf_tests::skip(&wharf_tests::current_test(), "no git");
        return Ok(());
    }
    let tmp = tempfile::tempdir()?;
    let (home, ws, market) = (tmp.path().join("home"), tmp.path().join("ws"), tmp.path().join("market"));
    for d in [&home, &ws, &market] {
        std::fs::create_dir_all(d)?;
    }
    // A marketplace in a git repository, listing a bundle inside it.
    make_bundle(&market.join("plugins/demo"), Path::new("/bin/true"))?;
    write(
        &market.join(".claude-plugin/marketplace.json"),
        r#"{"name": "team", "owner": {"name": "t"}, "plugins": [{"name": "demo", "source": "./plugins/demo", "description": "d"}]}"#,
    )?;
    git(&market, &["init", "-q"])?;
    git(&market, &["add", "."])?;
    git(&market, &["commit", "-q", "-m", "market"])?;
    let url = format!("file://{}", market.display());

    let (ok, out) = wharf_out(&home, &ws, &["plugin", "add", &format!("demo@{url}")])?;
    ensure!(ok, "{out}");
    ensure!(out.contains("hook event `PreCompact` is not supported"), "unsupported parts reported: {out}");
    ensure!(out.contains("/review") && out.contains("greeter") && out.contains("mcp__demo-jail__"), "{out}");
    let config = std::fs::read_to_string(ws.join(".wharf/config.toml"))?;
    ensure!(
        config.contains("[[bundle]]") && config.contains("name = \"demo\"") && config.contains("digest = \"sha256:"),
        "{config}"
    );
    let lock = std::fs::read_to_string(ws.join(".wharf/bundles.lock"))?;
    ensure!(lock.contains("commit = ") && lock.contains("marketplace = "), "{lock}");
    ensure!(ws.join(".wharf/bundles/demo/plugins/demo/hooks/hooks.json").is_file());
    let (ok, out) = wharf_out(&home, &ws, &["plugin", "list"])?;
    ensure!(ok && out.contains("demo") && out.contains(" ok "), "{out}");

    // A directory bundle, pinned; changed content is refused by `add` and
    // by a host, until `--update` accepts it.
    let local = tmp.path().join("local");
    make_bundle(&local, Path::new("/bin/true"))?;
    write(&local.join(".claude-plugin/plugin.json"), r#"{"name": "local"}"#)?;
    let (ok, out) = wharf_out(&home, &ws, &["plugin", "add", &local.display().to_string()])?;
    ensure!(ok, "{out}");
    write(&local.join("commands/review.md"), "Review nothing.\n")?;
    let (ok, out) = wharf_out(&home, &ws, &["plugin", "add", &local.display().to_string()])?;
    ensure!(!ok && out.contains("changed since it was pinned"), "{out}");
    let (_, out) = wharf_out(&home, &ws, &["plugin", "list"])?;
    ensure!(out.contains("CHANGED"), "{out}");
    let started =
        TestHost::builder().profile_text(scripted_model("")).workspace(&ws).home(&home).start_in(tmp.path()).await;
    let err = match started {
        Ok(h) => {
            h.close().await;
            anyhow::bail!("a host loaded a bundle whose pinned content changed");
        }
        Err(e) => format!("{e:#}"),
    };
    ensure!(err.contains("bundle `local` changed since it was pinned"), "{err}");
    let (ok, out) = wharf_out(&home, &ws, &["plugin", "add", "--update", &local.display().to_string()])?;
    ensure!(ok, "{out}");

    // Remove: the row, the lock entry and the clone go.
    let (ok, out) = wharf_out(&home, &ws, &["plugin", "remove", "demo"])?;
    ensure!(ok, "{out}");
    let config = std::fs::read_to_string(ws.join(".wharf/config.toml"))?;
    ensure!(!config.contains("name = \"demo\"") && config.contains("name = \"local\""), "{config}");
    ensure!(!ws.join(".wharf/bundles/demo").exists());
    let lock = std::fs::read_to_string(ws.join(".wharf/bundles.lock"))?;
    ensure!(!lock.contains("name = \"demo\""), "{lock}");
    Ok(())
}

const START_SH: &str = "#!/bin/sh\ncat > /dev/null\necho 'Always answer in haiku.'\n";

const PROMPT_CTX_PY: &str = r#"import json, sys
data = json.load(sys.stdin)
if "CTX" in data["prompt"]:
    print(json.dumps({"hookSpecificOutput": {"hookEventName": "UserPromptSubmit",
                                             "additionalContext": "The ticket is WH-42."}}))
"#;

/// A bundle `ctx` with context hooks, a `SubagentStop` hook writing its
/// input to `out`, and a `reviewer` agent.
fn make_context_bundle(dir: &Path, out: &Path) -> Result<()> {
    write(&dir.join(".claude-plugin/plugin.json"), r#"{"name": "ctx"}"#)?;
    write(&dir.join("hooks/start.sh"), START_SH)?;
    write(&dir.join("hooks/prompt.py"), PROMPT_CTX_PY)?;
    write(&dir.join("hooks/substop.sh"), "#!/bin/sh\ncat > \"$1\"\n")?;
    write(
        &dir.join("agents/reviewer.md"),
        "---\nname: reviewer\ndescription: Reviews a file for problems.\ntools: Read, WebSearch\nmodel: sonnet\n---\n\
         You are the reviewer. Report problems only.\n",
    )?;
    let hooks = json!({"hooks": {
        "SessionStart": [{"matcher": "startup", "hooks": [{"type": "command", "command": "sh ${CLAUDE_PLUGIN_ROOT}/hooks/start.sh"}]}],
        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "/usr/bin/python3 ${CLAUDE_PLUGIN_ROOT}/hooks/prompt.py"}]}],
        "SubagentStop": [{"hooks": [{"type": "command", "command": format!("sh ${{CLAUDE_PLUGIN_ROOT}}/hooks/substop.sh {}", out.display())}]}]
    }});
    write(&dir.join("hooks/hooks.json"), &serde_json::to_string_pretty(&hooks)?)
}

/// The `tools` of a recorded request: (name, the whole spec).
fn wire_tools(body: &Value) -> Vec<(String, Value)> {
    body["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t["function"]["name"].as_str().unwrap_or_default().to_string(), t["function"].clone()))
        .collect()
}

fn wire_system(body: &Value) -> String {
    body["messages"][0]["content"].as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn hook_context_and_agent_presets_reach_the_wire() -> Result<()> {
    if let Some(why) = no_sandbox() {
        wharf_tests::skip(&wharf_tests::current_test(), &why);
        return Ok(());
    }
    for p in [plugins::FS, plugins::SUBAGENT, plugins::LLM_OPENAI] {
        let _ = wharf_tests::plugin(p);
    }
    let script: wharf_mock_llm::Script = serde_json::from_value(json!({
        "replies": [
            {"kind": "stream", "tool_calls": [{"id": "call_1", "name": "subagent",
                "arguments": json!({"task": "Review notes.md.", "agent": "reviewer"}).to_string()}]},
            {"kind": "stream", "text": "No problems."},
            {"kind": "stream", "text": "The reviewer found no problems."}
        ],
        "default": {"kind": "stream", "text": "Default."},
        "checks": {"reasoning": "ignore"},
    }))?;
    let mock = wharf_mock_llm::MockLlm::start_background(script)?;
    let tmp = tempfile::tempdir()?;
    let (bundle, grant) = (tmp.path().join("ctx"), tmp.path().join("grant"));
    std::fs::create_dir_all(&grant)?;
    let stopped = grant.join("substop.json");
    make_context_bundle(&bundle, &stopped)?;
    let profile = format!(
        r#"
[agent]
adapter = "model"
max_steps = 4

[[plugin]]
id = "fs"
path = "${{plugin_dir}}/fs.wasm"
[plugin.grant]
dirs = ["${{workspace}}:rw"]

[[plugin]]
id = "subagent"
path = "${{plugin_dir}}/subagent.wasm"
[plugin.grant]
agents = true
timeout_ms = 60000

[[plugin]]
id = "model"
path = "${{plugin_dir}}/llm-openai.wasm"
[plugin.config]
base_url = "{url}/v1"
model = "mock-model"
[plugin.grant]
hosts = ["127.0.0.1:{port}"]
timeout_ms = 20000

[[bundle]]
name = "ctx"
path = "{bundle}"
[bundle.sandbox]
dirs = ["{grant}:rw"]
"#,
        url = mock.url(),
        port = mock.addr().port(),
        bundle = bundle.display(),
        grant = grant.display(),
    );
    let h = TestHost::builder().profile_text(profile).start_in(tmp.path()).await?;
    let run = h.run("CTX: review the notes").await;
    h.close().await;
    let run = run?;
    let events = run.json();
    assert_eq!(run.exit_code(), 0, "{:?}\n{events:#?}", run.summary);
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 3, "parent, child, parent");
    let body = |i: usize| reqs[i].body.clone().unwrap_or_default();

    // The parent: both contexts in its system prompt; the preset offered.
    let system = wire_system(&body(0));
    ensure!(system.contains("SessionStart hook:\nAlways answer in haiku."), "{system}");
    ensure!(system.contains("UserPromptSubmit hook:\nThe ticket is WH-42."), "{system}");
    let tools = wire_tools(&body(0));
    let sub = tools.iter().find(|(n, _)| n == "subagent").map(|(_, t)| t.clone()).context("no subagent tool")?;
    ensure!(sub["description"].as_str().unwrap_or("").contains("- reviewer: Reviews a file for problems."), "{sub}");
    assert_eq!(sub["parameters"]["properties"]["agent"]["enum"], json!(["reviewer"]), "{sub}");
    ensure!(wire_system(&body(2)).contains("The ticket is WH-42."), "the turn's context stays for its steps");

    // The child: the preset's instructions last, only its tools, not the
    // parent's session context.
    let child = wire_system(&body(1));
    ensure!(child.ends_with("You are the reviewer. Report problems only."), "{child}");
    ensure!(!child.contains("WH-42") && !child.contains("haiku"), "{child}");
    let names: Vec<String> = wire_tools(&body(1)).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["read"], "Read is Wharf's `read`; WebSearch has no equivalent");

    // The log records the context and who added it; SubagentStop ran for the child.
    let ctx: Vec<&Value> = events.iter().filter(|e| e["type"] == "bundle/context").collect();
    assert_eq!(ctx.len(), 2, "{events:#?}");
    assert_eq!(ctx[0]["data"]["event"], "SessionStart");
    ensure!(ctx[0]["data"]["hook"].as_str().unwrap_or("").starts_with("hooks/start.sh@"), "{}", ctx[0]);
    assert_eq!(ctx[1]["data"]["text"], "The ticket is WH-42.");
    let result = events.iter().find(|e| e["type"] == "tool/result").context("no tool result")?;
    let child_id = result["data"]["details"]["session_id"].as_str().unwrap_or_default().to_string();
    let stop: Value = serde_json::from_str(&std::fs::read_to_string(&stopped).context("SubagentStop did not run")?)?;
    assert_eq!(stop["hook_event_name"], "SubagentStop");
    ensure!(!child_id.is_empty() && stop["agent_id"] == child_id.as_str(), "{stop} / {result}");
    mock.assert_no_violations();
    Ok(())
}

/// A bundle hook's `ask` in `wharf chat` (a pty): the question is asked at
/// the prompt with the hook's reason; `n` keeps the write from running,
/// `y` lets the next one run; the log records both answers.
#[test]
fn a_bundle_hook_asking_is_a_question_at_the_chat_prompt() -> Result<()> {
    if let Some(why) = no_sandbox() {
        wharf_tests::skip(&wharf_tests::current_test(), &why);
        return Ok(());
    }
    let e = crate::chat::env();
    let bundle = e.home.path().join("asker");
    write(&bundle.join(".claude-plugin/plugin.json"), r#"{"name": "asker"}"#)?;
    write(
        &bundle.join("hooks/ask.sh"),
        "#!/bin/sh\ncat > /dev/null\nprintf '{\"hookSpecificOutput\": {\"hookEventName\": \"PreToolUse\", \
         \"permissionDecision\": \"ask\", \"permissionDecisionReason\": \"the asker bundle wants a human\"}}'\n",
    )?;
    let hooks = json!({"hooks": {"PreToolUse": [{"matcher": "Write",
        "hooks": [{"type": "command", "command": "sh ${CLAUDE_PLUGIN_ROOT}/hooks/ask.sh"}]}]}});
    write(&bundle.join("hooks/hooks.json"), &hooks.to_string())?;
    let turns = r#"
[[plugin.config.turns]]
tool_calls = [{ name = "write", arguments = { path = "a.txt", content = "a" } }]
[[plugin.config.turns]]
tool_calls = [{ name = "write", arguments = { path = "b.txt", content = "b" } }]
[[plugin.config.turns]]
text = "All done."
"#;
    let p = e.profile("bundle-ask", turns, false);
    let mut text = std::fs::read_to_string(&p)?;
    text += &format!("\n[[bundle]]\nname = \"asker\"\npath = \"{}\"\n", bundle.display());
    std::fs::write(&p, text)?;
    let mut t = e.chat(&p.display().to_string(), &[]);
    t.expect("› ");
    t.line("write two files");
    t.expect("approval needed: write a.txt");
    t.expect("the asker bundle wants a human");
    t.expect("allow?");
    t.line("n");
    t.expect("rejected (by chat(user))");
    t.expect("error APPROVAL_REJECTED");
    t.expect("approval needed: write b.txt");
    t.expect("allow?");
    t.line("y");
    t.expect("allowed once (by chat(user))");
    t.expect("All done.");
    t.expect("— completed");
    t.line("/quit");
    ensure!(t.wait().success());
    ensure!(!e.ws.path().join("a.txt").exists(), "the rejected write ran");
    assert_eq!(std::fs::read_to_string(e.ws.path().join("b.txt"))?, "b");
    let events = e.events();
    let votes: Vec<String> = events
        .iter()
        .filter(|v| v["type"] == "policy/decision")
        .flat_map(|v| v["data"]["votes"].as_array().cloned().unwrap_or_default())
        .filter(|v| v["plugin"] == "bundle:asker")
        .map(|v| v.to_string())
        .collect();
    ensure!(votes.len() == 2 && votes.iter().all(|v| v.contains("wants a human")), "{votes:?}");
    let outcomes: Vec<Value> =
        events.iter().filter(|v| v["type"] == "approval/decided").map(|v| v["data"]["outcome"].clone()).collect();
    assert_eq!(outcomes, [json!("rejected"), json!("allowed-once")]);
    Ok(())
}
