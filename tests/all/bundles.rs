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
        "Notification": [{"hooks": [{"type": "command", "command": "true"}]}]
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
    ensure!(out.contains("hook event `Notification` is not supported"), "unsupported parts reported: {out}");
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
