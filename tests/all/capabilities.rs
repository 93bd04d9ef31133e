//! Compaction and subagents end to end: a headless turn (in-process, as
//! `wharf run`) with the scripted model, the real `compaction` and
//! `subagent` components, the `fs`/`text` tools and the `policy-rules`
//! policy (profile and run helpers from policy.rs).

use std::fmt::Write as _;

use anyhow::Context;
use serde_json::{Value, json};
use wharf_core::SessionStore;
use wharf_core::events::EventKind;

use crate::policy::{env, policy, toml_str};

/// A scripted turn calling `tool` with `args`.
fn call_turn(tool: &str, args: &Value) -> String {
    format!(
        "\n[[plugin.config.turns]]\ntool_calls = [{{ name = \"{tool}\", arguments = {} }}]\n",
        toml_str(&args.to_string())
    )
}

const ECHO_LAST: &str = "text = \"The tool said: \"\necho_last_tool_result = true\nfinish = \"stop\"\n";

#[test]
fn a_long_session_is_compacted_and_the_log_keeps_everything() -> anyhow::Result<()> {
    let env = env();
    // Twelve steps, each echoing ~1.6 KB (about 400 tokens) through the
    // `echo` tool, against a 3000-token window: without compaction the
    // requests would grow to ~10k tokens.
    let steps = 12;
    let mut model = String::from(
        "\n[[plugin]]\nid = \"scripted\"\npath = \"${plugin_dir}/llm-scripted.wasm\"\n[plugin.config]\n\
         context_window = 3000\ncomplete_text = \"The agent echoed long texts; nothing else happened.\"\n",
    );
    for i in 0..steps {
        let text = format!("chunk {i} ") + &"lorem ipsum dolor sit amet ".repeat(60);
        model.push_str(&call_turn("echo", &json!({ "text": text })));
    }
    let _ = write!(model, "\n[[plugin.config.turns]]\n{ECHO_LAST}");
    let compactor = policy("compaction", "compaction", "", "model = true");
    let profile = env.profile("compact", &format!("{compactor}{model}"));
    let run = env.run(&profile, Some(20), &[]);
    assert_eq!(run.code, 0, "{}", run.dump());

    // Every tool call ran and every raw result is still in the log.
    let results: Vec<&Value> = run.events.iter().filter(|e| e["type"] == "tool/result").collect();
    assert_eq!(results.len(), steps, "{}", run.dump());
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["data"]["is_error"], false, "{r}");
        assert!(r["data"]["content"].as_str().unwrap_or("").starts_with(&format!("chunk {i} ")), "{r}");
    }
    // The model kept its place in the script across compactions: the last
    // scripted turn played, echoing the last result.
    assert!(run.last_text().starts_with(&format!("The tool said: chunk {} ", steps - 1)), "{}", run.dump());

    let summaries: Vec<&Value> = run.events.iter().filter(|e| e["type"] == "compaction/summary").collect();
    assert!(!summaries.is_empty(), "no compaction happened\n{}", run.dump());
    assert!(summaries.len() <= steps, "at most one compaction per step");
    for s in &summaries {
        let text = s["data"]["summary"].as_str().unwrap_or("");
        assert!(text.starts_with("Summary of the earlier conversation ("), "{s}");
        assert!(text.contains("nothing else happened"), "the model's summary is used: {s}");
    }
    assert!(!run.events.iter().any(|e| e["type"] == "compaction/failed"), "{}", run.dump());

    // Replaying the log: before every model request the projected history
    // stays under the window, and no tool result is ever separated from its
    // call.
    let id = run.session.clone();
    assert!(!id.is_empty(), "no session id\n{}", run.dump());
    let log = SessionStore::new(&env.sessions).load(&id).context("loading the session")?;
    let mut proj = wharf_core::Projection::new();
    let mut max_seen = 0;
    for ev in &log.events {
        if matches!(ev.kind, EventKind::StepStart(_)) {
            let msgs = proj.messages();
            let tokens = wharf_core::compaction::request_tokens(&msgs, &[]);
            max_seen = max_seen.max(tokens);
            assert!(tokens < 3000, "a request of ~{tokens} tokens went out at seq {}", ev.seq);
            for (i, m) in msgs.iter().enumerate() {
                if m.role == wharf_core::plugin::Role::Tool {
                    let id = m.tool_call_id.clone().unwrap_or_default();
                    let owner = msgs[..i].iter().rev().find(|p| p.role == wharf_core::plugin::Role::Assistant);
                    assert!(
                        owner.is_some_and(|o| o.tool_calls.iter().any(|c| c.id == id)),
                        "tool result {id} lost its call at seq {}",
                        ev.seq
                    );
                }
            }
        }
        proj.apply(ev);
    }
    // Without the summaries the same history would not have fitted.
    let raw: Vec<_> =
        log.events.iter().filter(|e| !matches!(e.kind, EventKind::CompactionSummary(_))).cloned().collect();
    let uncompacted = wharf_core::compaction::request_tokens(&wharf_core::derive_messages(&raw), &[]);
    assert!(uncompacted > 3000 && max_seen < uncompacted / 2, "max {max_seen} of {uncompacted} tokens");
    Ok(())
}

#[test]
fn compaction_without_the_model_grant_fails_once_and_the_session_goes_on() {
    let env = env();
    let mut model = String::from(
        "\n[[plugin]]\nid = \"scripted\"\npath = \"${plugin_dir}/llm-scripted.wasm\"\n[plugin.config]\n\
         context_window = 2000\ncomplete_text = \"summary\"\n",
    );
    for i in 0..6 {
        let text = format!("chunk {i} ") + &"lorem ipsum dolor sit amet ".repeat(60);
        model.push_str(&call_turn("echo", &json!({ "text": text })));
    }
    let _ = write!(model, "\n[[plugin.config.turns]]\n{ECHO_LAST}");
    // No `model = true`: the compactor cannot ask the model.
    let compactor = policy("compaction", "compaction", "", "");
    let profile = env.profile("nogrant", &format!("{compactor}{model}"));
    let run = env.run(&profile, Some(20), &[]);
    assert_eq!(run.code, 0, "{}", run.dump());
    let failed: Vec<&Value> = run.events.iter().filter(|e| e["type"] == "compaction/failed").collect();
    assert_eq!(failed.len(), 1, "one failure per turn, no retry loop\n{}", run.dump());
    let err = failed[0]["data"]["error"].as_str().unwrap_or("");
    assert!(err.contains("`model` capability is not granted"), "{err}");
    assert!(!run.events.iter().any(|e| e["type"] == "compaction/summary"));
}

/// The scripted model with a main script and a `CHILD` branch.
fn parent_and_child(main: &str, child: &str) -> String {
    format!(
        "\n[[plugin]]\nid = \"scripted\"\npath = \"${{plugin_dir}}/llm-scripted.wasm\"\n[plugin.config]\nmodel = \"scripted\"\n\
         {main}\n[[plugin.config.branches]]\nwhen = \"CHILD\"\n{child}\n"
    )
}

#[test]
fn a_subagent_runs_in_its_own_linked_log_under_the_parents_policy() -> anyhow::Result<()> {
    let env = env();
    let rules = policy(
        "rules",
        "policy-rules",
        r#"
mode = "workspace-write"
[[plugin.config.rules]]
tool = "write"
action = "deny"
reason = "no writes in this test"
[[plugin.config.rules]]
tool = "subagent"
action = "allow"
"#,
        "",
    );
    let sub = policy("subagent", "subagent", "max_steps = 5", "agents = true\ntimeout_ms = 120000");
    let main = call_turn(
        "subagent",
        &json!({"task": "CHILD: read the README and try to write notes", "tools": ["read", "write"]}),
    ) + "\n[[plugin.config.turns]]\n"
        + ECHO_LAST;
    // The child: a read (allowed), a write (denied by the parent's policy),
    // then it reports the last tool result.
    let child = r#"
[[plugin.config.branches.turns]]
tool_calls = [{ name = "read", arguments = '{"path": "README.md"}' }]
[[plugin.config.branches.turns]]
tool_calls = [{ name = "write", arguments = '{"path": "notes.md", "content": "x"}' }]
[[plugin.config.branches.turns]]
text = "Child saw: "
echo_last_tool_result = true
finish = "stop"
"#;
    let profile = env.profile("sub", &format!("{rules}{sub}{}", parent_and_child(&main, child)));
    let run = env.run(&profile, None, &[]);
    assert_eq!(run.code, 0, "{}", run.dump());

    let result = run.one("tool/result", "call_0_0");
    assert_eq!(result["data"]["is_error"], false, "{}", run.dump());
    let content = result["data"]["content"].as_str().unwrap_or("");
    assert!(content.starts_with("Child saw: ") && content.contains("no writes in this test"), "{content}");
    assert!(!env.path("notes.md").exists(), "the denied write did not happen");
    let child_id = result["data"]["details"]["session_id"].as_str().unwrap_or("").to_string();
    assert!(!child_id.is_empty(), "{result}");

    // The child's own log: linked to the parent call, its write denied by
    // the parent's policy at depth 1, its invariants intact.
    let parent_id = run.session.clone();
    let store = SessionStore::new(&env.sessions);
    let child = store.load(&child_id).with_context(|| format!("child log {child_id}"))?;
    wharf_core::invariants::check(&child.events)
        .map_err(anyhow::Error::msg)
        .context("checking the child log's invariants")?;
    let EventKind::SessionStart(h) = &child.events[0].kind else { panic!("no header") };
    let link = h.spawned_by.clone().unwrap_or_else(|| panic!("child header not linked: {h:?}"));
    assert_eq!((link.session.as_str(), link.call_id.as_str(), link.depth), (parent_id.as_str(), "call_0_0", 1));
    let denied = child.events.iter().any(|e| match &e.kind {
        EventKind::ToolResult(r) => r.is_error && r.error_code.as_deref() == Some("DENIED"),
        _ => false,
    });
    assert!(denied, "the child's write was denied: {:?}", child.events);
    // The child offered only the tools it was given.
    let parent_tools = run.events.iter().any(|e| e["type"] == "tool/call" && e["data"]["name"] == "subagent");
    assert!(parent_tools);
    Ok(())
}

#[test]
fn subagents_nest_at_most_three_deep() -> anyhow::Result<()> {
    let env = env();
    let sub = policy("subagent", "subagent", "", "agents = true\ntimeout_ms = 120000");
    // Every level (the main script and the CHILD branch) delegates again,
    // then reports what its call returned.
    let nest = call_turn("subagent", &json!({"task": "CHILD: go deeper"}));
    let main = nest.clone() + "\n[[plugin.config.turns]]\n" + ECHO_LAST;
    let child = nest.replace("[[plugin.config.turns]]", "[[plugin.config.branches.turns]]")
        + "\n[[plugin.config.branches.turns]]\n"
        + ECHO_LAST;
    let profile = env.profile("nest", &format!("{sub}{}", parent_and_child(&main, &child)));
    let run = env.run(&profile, None, &[]);
    assert_eq!(run.code, 0, "{}", run.dump());
    let text = run.last_text();
    // Depth 1, 2 and 3 ran; the fourth level was refused.
    assert_eq!(text.matches("The tool said: ").count(), 4, "{text}");
    assert!(text.contains("nest at most 3 deep"), "{text}");
    let sessions: Vec<_> = SessionStore::new(&env.sessions).list().context("listing the sessions")?;
    assert_eq!(sessions.len(), 4, "parent + three children");
    Ok(())
}

/// Issue 40: a component's question (the `questions` import, `evil`'s
/// `ask`) when nobody answers it ends with the call's deadline (`TIMEOUT`,
/// the question logged cancelled) instead of holding the worker; headless
/// (`wharf run`'s approver) it is declined at once; without the grant the
/// import answers `not-granted` and nobody is asked.
#[tokio::test(flavor = "multi_thread")]
async fn a_components_question_ends_at_its_deadline_is_declined_headless_and_needs_the_grant() -> anyhow::Result<()> {
    use std::sync::Arc;
    use wharf_core::approval::ChannelApprover;
    use wharf_tests::host::{TestHost, scripted_model};

    let _ = wharf_tests::plugin(wharf_tests::plugins::EVIL);
    let turns = "[[plugin.config.turns]]\ntool_calls = [{ name = \"ask\", arguments = {} }]\n\
                 [[plugin.config.turns]]\ntext = \"Done.\"\n";
    let profile = |grant: &str| {
        format!(
            "[agent]\nadapter = \"scripted\"\nmax_steps = 4\n\n{}\n[[plugin]]\nid = \"evil\"\n\
             path = \"${{plugin_dir}}/evil.wasm\"\n[plugin.grant]\n{grant}\n",
            scripted_model(turns)
        )
    };
    let answers = |events: &[wharf_core::Event]| -> Vec<Value> {
        events
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::Unknown { type_name, data } if type_name == "question/answered" => Some(data.clone()),
                _ => None,
            })
            .collect()
    };
    let result_of = |events: &[wharf_core::Event]| {
        events.iter().find_map(|e| match &e.kind {
            EventKind::ToolResult(t) => Some(t.clone()),
            _ => None,
        })
    };
    let dir = tempfile::tempdir().context("creating a temp dir")?;
    let host =
        TestHost::builder().profile_text(profile("questions = true\ntimeout_ms = 500")).start_in(dir.path()).await?;

    // Headless: declined at once, saying why.
    let run = host.run("go").await?;
    let result = result_of(&run.events).context("no tool result")?;
    assert_eq!(result.content, "declined", "{result:?}");
    let a = answers(&run.events);
    assert_eq!(
        (a.len(), a[0]["action"].as_str(), a[0]["by"].as_str()),
        (1, Some("decline"), Some("headless")),
        "{a:?}"
    );

    // A surface that never answers: the call's deadline (500 ms) ends it.
    let (approver, _approvals, mut asked) = ChannelApprover::with_questions();
    let h = &host.harness;
    let stop = tokio_util::sync::CancellationToken::new();
    let (agent, _) = h.open_agent_until(None, Arc::new(approver), None, stop.clone())?;
    let summary = agent.prompt("go".to_string()).await?;
    assert_eq!(summary.reason, wharf_core::events::StopReason::Completed, "{summary:?}");
    // The question reached the surface (and stays unanswered in its queue).
    let pending = asked.try_recv().context("the question did not reach the surface")?;
    assert_eq!((pending.question.source.as_str(), pending.question.form.fields.len()), ("evil", 3));
    agent.log().flush().await?;
    let events = h.store.load(agent.session_id())?.events;
    let result = result_of(&events).context("no tool result")?;
    assert_eq!(result.error_code.as_ref().map(|c| c.to_string()).as_deref(), Some("TIMEOUT"), "{result:?}");
    let a = answers(&events);
    assert_eq!((a.len(), a[0]["action"].as_str()), (1, Some("cancel")), "{a:?}");
    stop.cancel();
    drop(agent);
    host.close().await;

    // Without the grant: refused by the import, nobody asked.
    let dir = tempfile::tempdir().context("creating a temp dir")?;
    let host = TestHost::builder().profile_text(profile("")).start_in(dir.path()).await?;
    let run = host.run("go").await?;
    let result = result_of(&run.events).context("no tool result")?;
    assert_eq!(result.content, "ask failed: the `questions` capability is not granted", "{result:?}");
    assert!(answers(&run.events).is_empty());
    host.close().await;
    Ok(())
}
