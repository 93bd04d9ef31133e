//! Permission policies end to end: a headless turn (in-process, built as
//! `wharf run --output jsonl` builds its host) with the real `policy-rules`
//! and `policy-fixed` components, the scripted model and the `fs`/`text`
//! tools. Each test writes its own profile into a temporary home; every
//! session log is checked with `wharf_core::invariants::check`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};
use wharf_core::events::Event;
use wharf_tests::host::{TestHost, TestHostBuilder};
use wharf_tests::plugins;

pub(crate) struct Env {
    home: tempfile::TempDir,
    ws: tempfile::TempDir,
    pub(crate) sessions: PathBuf,
}

pub(crate) fn env() -> Env {
    let home = tempfile::tempdir().expect("creating a temp dir");
    let ws = tempfile::tempdir().expect("creating a temp dir");
    std::fs::write(ws.path().join("README.md"), "# Sample\n\nA sample project.\n").expect("writing README.md");
    let sessions = home.path().join("sessions");
    Env { home, ws, sessions }
}

/// One finished headless turn: what `wharf run --output jsonl` shows.
pub(crate) struct Run {
    /// `wharf run`'s exit code: 0 the turn completed, 1 it ended otherwise,
    /// 2 the host did not start or the run failed.
    pub(crate) code: i32,
    /// The events as the live session log streamed them (the `--output
    /// jsonl` lines).
    pub(crate) events: Vec<Value>,
    /// What `wharf run` says on stderr besides its logs: the host's
    /// notices, one a line, then the error that stopped it (as `wharf: …`
    /// prints it, without the prefix).
    pub(crate) stderr: String,
    /// The session's id (empty when none was opened).
    pub(crate) session: String,
}

impl Run {
    /// Events of type `ty` about call `call_id` (`data.call_id` or, for
    /// `tool/call`, `data.id`).
    pub(crate) fn about(&self, ty: &str, call_id: &str) -> Vec<&Value> {
        self.events
            .iter()
            .filter(|e| e["type"] == ty && (e["data"]["call_id"] == call_id || e["data"]["id"] == call_id))
            .collect()
    }

    /// The one event of type `ty` about `call_id`.
    pub(crate) fn one(&self, ty: &str, call_id: &str) -> &Value {
        match self.about(ty, call_id).as_slice() {
            [e] => e,
            other => panic!("expected one `{ty}` for {call_id}, got {}:\n{}", other.len(), self.dump()),
        }
    }

    /// The content of the last assistant message: what the scripted model
    /// echoed back of the last tool result it was sent.
    pub(crate) fn last_text(&self) -> String {
        let msg = self.events.iter().rev().find(|e| e["type"] == "assistant/message");
        msg.and_then(|m| m["data"]["content"].as_str()).unwrap_or_default().to_string()
    }

    pub(crate) fn dump(&self) -> String {
        let lines: Vec<String> = self.events.iter().map(Value::to_string).collect();
        format!("{}\nstderr: {}", lines.join("\n"), self.stderr)
    }
}

/// The vote of `plugin` in a `policy/decision` event.
fn vote<'a>(decision: &'a Value, plugin: &str) -> &'a Value {
    let votes = decision["data"]["votes"].as_array().map(Vec::as_slice).unwrap_or_default();
    votes.iter().find(|v| v["plugin"] == plugin).unwrap_or_else(|| panic!("no vote of `{plugin}` in {decision}"))
}

fn seq(e: &Value) -> u64 {
    e["seq"].as_u64().unwrap_or_default()
}

impl Env {
    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.ws.path().join(rel)
    }

    /// Writes a profile: `[agent]` with the scripted adapter, the `fs` and
    /// `text` tools, then `body` (policy rows, the scripted model).
    pub(crate) fn profile(&self, name: &str, body: &str) -> PathBuf {
        let text = format!(
            r#"
[agent]
adapter = "scripted"
max_steps = 10

[[plugin]]
id = "fs"
path = "${{plugin_dir}}/fs.wasm"
[plugin.grant]
dirs = ["${{workspace}}:rw"]

[[plugin]]
id = "text"
path = "${{plugin_dir}}/text.wasm"
[plugin.grant]
dirs = ["${{workspace}}:ro"]
{body}
"#
        );
        let path = self.home.path().join(format!("{name}.toml"));
        std::fs::write(&path, text).expect("writing the file");
        path
    }

    /// A host of `profile` (a file or a shipped profile's name) in this
    /// environment: its home, workspace and session directory, files not
    /// watched — `wharf run --profile P --workspace WS --session-dir S
    /// --no-watch` with `HOME` the temporary home.
    pub(crate) fn host(&self, profile: impl Into<String>) -> TestHostBuilder {
        // Built components must exist before the host resolves ${plugin_dir}.
        for p in [
            plugins::FS,
            plugins::TEXT,
            plugins::LLM_SCRIPTED,
            plugins::POLICY_RULES,
            plugins::POLICY_FIXED,
            plugins::COMPACTION,
            plugins::SUBAGENT,
        ] {
            let _ = wharf_tests::plugin(p);
        }
        TestHost::builder().profile(profile).home(self.home.path()).workspace(self.ws.path()).sessions(&self.sessions)
    }

    /// `wharf run "do the task" --output jsonl` with `--max-steps
    /// max_steps` and each of `set` as `-c KEY=VALUE`, in-process (see
    /// [`Env::run_host`]).
    pub(crate) fn run(&self, profile: &Path, max_steps: Option<u32>, set: &[&str]) -> Run {
        let host = set.iter().fold(self.host(profile.display().to_string()), |b, kv| b.set(*kv));
        self.run_host(host, None, "do the task", max_steps)
    }

    /// Starts the host `builder` describes and runs `task` as one headless
    /// turn (of session `resume`, or a new one) on a runtime of its own;
    /// checks that every streamed event is a valid event, that the stored
    /// log keeps the invariants, and that the stream is the stored log from
    /// where it starts.
    pub(crate) fn run_host(
        &self,
        builder: TestHostBuilder,
        resume: Option<&str>,
        task: &str,
        max_steps: Option<u32>,
    ) -> Run {
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("building a tokio runtime");
        let run = rt.block_on(async {
            let host = match builder.start_in(self.home.path()).await {
                Ok(h) => h,
                Err(e) => {
                    let stderr = wharf_cli_common::output::error_text(&e);
                    return Run { code: 2, events: Vec::new(), stderr, session: String::new() };
                }
            };
            let outcome = host.run_with(resume, task, max_steps).await;
            let mut stderr = host.notices();
            host.close().await;
            match outcome {
                Ok(run) => Run {
                    code: run.exit_code(),
                    events: run.streamed.iter().map(|e| serde_json::to_value(e).expect("an event as JSON")).collect(),
                    stderr: stderr.join("\n"),
                    session: run.session,
                },
                Err(e) => {
                    stderr.push(wharf_cli_common::output::error_text(&e));
                    Run { code: 2, events: Vec::new(), stderr: stderr.join("\n"), session: String::new() }
                }
            }
        });
        rt.shutdown_timeout(Duration::from_secs(5));
        for e in &run.events {
            if let Err(err) = serde_json::from_value::<Event>(e.clone()) {
                panic!("streamed event is not an event ({err}): {e}");
            }
        }
        if !run.session.is_empty() {
            let store = wharf_core::SessionStore::new(&self.sessions);
            let id = &run.session;
            let log = store.load(id).with_context(|| format!("loading session {id}")).expect("the session log loads");
            if let Err(e) = wharf_core::invariants::check(&log.events) {
                panic!("session log breaks an invariant: {e}\n{}", run.dump());
            }
            // The stream is the stored log from wherever it starts.
            let first = run.events.first().map(seq).unwrap_or(1) as usize;
            let stored: Vec<Value> = log
                .events
                .iter()
                .skip(first.saturating_sub(1))
                .map(|e| serde_json::to_value(e).unwrap_or(Value::Null))
                .collect();
            assert_eq!(stored, run.events, "the stream and the stored log differ\n{}", run.dump());
        }
        run
    }
}

/// A TOML basic string holding `s` (JSON string escapes are valid TOML).
pub(crate) fn toml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// The scripted model's rows: step `k` makes the calls `steps[k]` (ids
/// `call_<k>_<i>`); the last turn echoes the last tool result it was sent,
/// which shows what the model saw.
fn scripted(steps: &[&[(&str, Value)]]) -> String {
    let mut s = String::from(
        "\n[[plugin]]\nid = \"scripted\"\npath = \"${plugin_dir}/llm-scripted.wasm\"\n[plugin.config]\nmodel = \"scripted-policy\"\n",
    );
    for calls in steps {
        let list: Vec<String> = calls
            .iter()
            .map(|(name, args)| format!("{{ name = \"{name}\", arguments = {} }}", toml_str(&args.to_string())))
            .collect();
        let _ = write!(s, "\n[[plugin.config.turns]]\ntool_calls = [{}]\n", list.join(", "));
    }
    s.push_str(
        "\n[[plugin.config.turns]]\ntext = \"The tool said: \"\necho_last_tool_result = true\nfinish = \"stop\"\n",
    );
    s
}

/// A policy row: `config` and `grant` are TOML table bodies.
pub(crate) fn policy(id: &str, component: &str, config: &str, grant: &str) -> String {
    let mut s = format!("\n[[plugin]]\nid = \"{id}\"\npath = \"${{plugin_dir}}/{component}.wasm\"\n");
    if !config.is_empty() {
        let _ = write!(s, "[plugin.config]\n{config}\n");
    }
    if !grant.is_empty() {
        let _ = write!(s, "[plugin.grant]\n{grant}\n");
    }
    s
}

#[test]
fn denied_call_is_logged_and_the_model_sees_the_reason() {
    let env = env();
    let rules = policy(
        "rules",
        "policy-rules",
        r#"
mode = "workspace-write"
[[plugin.config.rules]]
tool = ["write", "edit"]
path = "secrets/**"
action = "deny"
reason = "secrets are off limits"
"#,
        "",
    );
    let steps: &[&[(&str, Value)]] = &[&[
        ("read", json!({"path": "README.md"})),
        ("write", json!({"path": "secrets/key.txt", "content": "hunter2"})),
    ]];
    let profile = env.profile("deny", &format!("{rules}{}", scripted(steps)));
    let run = env.run(&profile, None, &[]);
    assert_eq!(run.code, 0, "a denied call does not fail the turn\n{}", run.dump());

    let loaded = run.events.iter().find(|e| e["type"] == "plugin/loaded" && e["data"]["id"] == "rules");
    assert_eq!(loaded.map(|e| e["data"]["kinds"].clone()), Some(json!(["policy"])), "{}", run.dump());

    // The allowed call in the same step is unaffected.
    let read = run.one("tool/result", "call_0_0");
    assert_eq!(read["data"]["is_error"], false, "{}", run.dump());
    assert_eq!(run.one("policy/decision", "call_0_0")["data"]["verdict"], "allow");

    // The denied call: tool/call, then policy/decision, then tool/result.
    let call = run.one("tool/call", "call_0_1");
    assert_eq!(call["data"]["name"], "write");
    let decision = run.one("policy/decision", "call_0_1");
    let result = run.one("tool/result", "call_0_1");
    assert!(seq(call) < seq(decision) && seq(decision) < seq(result), "{}", run.dump());
    let reason = "rules: secrets are off limits (rule 1)";
    assert_eq!(decision["data"]["verdict"], "deny");
    assert_eq!(decision["data"]["reason"], reason);
    let votes = decision["data"]["votes"].as_array().cloned().unwrap_or_default();
    assert_eq!(votes.len(), 1, "{}", run.dump());
    assert_eq!(votes[0]["source"], "policy");
    assert_eq!(votes[0]["plugin"], "rules");
    assert_eq!(votes[0]["decision"], json!({"decision": "deny", "reason": "secrets are off limits (rule 1)"}));
    assert_eq!(result["data"]["is_error"], true);
    assert_eq!(result["data"]["error_code"], "DENIED");
    assert_eq!(result["data"]["plugin"], "fs");
    let content = result["data"]["content"].as_str().unwrap_or_default();
    assert!(content.contains(reason), "{content}");
    assert!(!env.path("secrets/key.txt").exists(), "the denied write must not run");

    // The model got the reason as the tool result.
    assert!(run.last_text().contains(reason), "{}", run.dump());
    assert!(run.about("approval/asked", "call_0_1").is_empty());
}

#[test]
fn ask_in_headless_mode_resolves_by_the_configured_rule() {
    // The shipped `guarded` profile: workspace-write plus "ask before writing outside src/".
    let profile = wharf_tests::root().join("profiles/guarded.toml");

    // Default rule: deny.
    let env1 = env();
    let run = env1.run(&profile, None, &[]);
    assert_eq!(run.code, 0, "{}", run.dump());
    assert_eq!(run.one("policy/decision", "call_0_0")["data"]["verdict"], "allow", "src/ is allowed by the preset");
    assert_eq!(run.one("tool/result", "call_0_0")["data"]["is_error"], false);
    assert!(env1.path("src/lib.rs").exists());

    let decision = run.one("policy/decision", "call_1_0");
    assert_eq!(decision["data"]["verdict"], "ask", "{}", run.dump());
    let reason = decision["data"]["reason"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains("writes outside src/ need approval"), "{reason}");
    let asked = run.one("approval/asked", "call_1_0");
    assert_eq!(asked["data"]["tool"], "write");
    assert_eq!(asked["data"]["reason"], reason.as_str());
    assert_eq!(asked["data"]["arguments"]["path"], "NOTES.md");
    let decided = run.one("approval/decided", "call_1_0");
    assert_eq!(decided["data"]["outcome"], "rejected");
    assert_eq!(decided["data"]["by"], "headless(rule=deny)");
    let note = decided["data"]["note"].as_str().unwrap_or_default();
    assert!(note.contains("configured rule `deny`"), "the log says how it was resolved: {note}");
    let result = run.one("tool/result", "call_1_0");
    assert!(seq(decision) < seq(asked) && seq(asked) < seq(decided) && seq(decided) < seq(result));
    assert_eq!(result["data"]["error_code"], "APPROVAL_REJECTED");
    assert!(!env1.path("NOTES.md").exists());
    let told = run.last_text();
    assert!(told.contains("writes outside src/ need approval") && told.contains("rule `deny`"), "{told}");

    // `-c agent.ask=allow` lets it run, and says so.
    let env2 = env();
    let run = env2.run(&profile, None, &["agent.ask=allow"]);
    assert_eq!(run.code, 0, "{}", run.dump());
    assert_eq!(run.one("policy/decision", "call_1_0")["data"]["verdict"], "ask");
    let decided = run.one("approval/decided", "call_1_0");
    assert_eq!(decided["data"]["outcome"], "allowed-once", "{}", run.dump());
    assert_eq!(decided["data"]["by"], "headless(rule=allow)");
    assert!(decided["data"]["note"].as_str().unwrap_or_default().contains("configured rule `allow`"));
    assert_eq!(run.one("tool/result", "call_1_0")["data"]["is_error"], false);
    assert!(env2.path("NOTES.md").exists());
    assert!(run.last_text().contains("NOTES.md"), "{}", run.dump());
}

#[test]
fn rewrite_changes_the_arguments() {
    let env = env();
    let rules = policy(
        "rules",
        "policy-rules",
        r#"
mode = "workspace-write"
[[plugin.config.rules]]
tool = "write"
path = "drafts/**"
action = "rewrite"
set = { path = "src/draft.md" }
"#,
        "",
    );
    let steps: &[&[(&str, Value)]] = &[&[("write", json!({"path": "drafts/a.md", "content": "draft"}))]];
    let profile = env.profile("rewrite", &format!("{rules}{}", scripted(steps)));
    let run = env.run(&profile, None, &[]);
    assert_eq!(run.code, 0, "{}", run.dump());

    // The log keeps what the model asked for …
    let call = run.one("tool/call", "call_0_0");
    let asked: Value = serde_json::from_str(call["data"]["arguments"].as_str().unwrap_or("null")).unwrap_or_default();
    assert_eq!(asked["path"], "drafts/a.md");
    // … and what ran instead.
    let decision = run.one("policy/decision", "call_0_0");
    assert_eq!(decision["data"]["verdict"], "allow");
    assert_eq!(decision["data"]["rewritten"], json!({"path": "src/draft.md", "content": "draft"}));
    assert_eq!(decision["data"]["votes"][0]["decision"]["decision"], "rewrite");
    let result = run.one("tool/result", "call_0_0");
    assert_eq!(result["data"]["is_error"], false, "{}", run.dump());
    assert_eq!(std::fs::read_to_string(env.path("src/draft.md")).unwrap_or_default(), "draft");
    assert!(!env.path("drafts").exists());
}

#[test]
fn policies_compose_deny_beats_ask_beats_allow() {
    let env = env();
    // Profile order: rules, fixed-deny, fixed-ask.
    let rules = policy(
        "rules",
        "policy-rules",
        r#"
mode = "full-access"
rules = [
  { tool = "write", action = "ask", reason = "rules ask for writes" },
  { tool = "grep", action = "deny", reason = "rules deny grep" },
  { tool = "read", action = "rewrite", set = { limit = 1 } },
  { tool = "list", action = "rewrite", set = { depth = 2 } },
]
"#,
        "",
    );
    let deny = policy(
        "fixed-deny",
        "policy-fixed",
        "decision = \"deny\"\nreason = \"fixed says no\"\ntools = [\"write\"]",
        "",
    );
    let ask = policy(
        "fixed-ask",
        "policy-fixed",
        "decision = \"ask\"\nreason = \"fixed wants a human\"\ntools = [\"read\", \"grep\"]",
        "",
    );
    let steps: &[&[(&str, Value)]] = &[&[
        ("write", json!({"path": "a.txt", "content": "x"})),
        ("grep", json!({"pattern": "Sample"})),
        ("read", json!({"path": "README.md"})),
        ("list", json!({"path": "."})),
        ("glob", json!({"pattern": "*.md"})),
    ]];
    let profile = env.profile("compose", &format!("{rules}{deny}{ask}{}", scripted(steps)));
    let run = env.run(&profile, None, &[]);
    assert_eq!(run.code, 0, "{}", run.dump());

    // Each vote as `plugin=decision`, sorted by plugin id. (The logged order
    // is the order evaluations finished in, not profile order as the event
    // docs say; the verdict does not depend on it.)
    let votes = |id: &str| -> Vec<String> {
        let d = run.one("policy/decision", id);
        let v = d["data"]["votes"].as_array().cloned().unwrap_or_default();
        let mut v: Vec<String> = v
            .iter()
            .map(|v| {
                format!("{}={}", v["plugin"].as_str().unwrap_or("?"), v["decision"]["decision"].as_str().unwrap_or("?"))
            })
            .collect();
        v.sort();
        v
    };
    let verdict = |id: &str| run.one("policy/decision", id)["data"].clone();

    // write: ask + deny + allow → deny (only the denier's reason).
    assert_eq!(votes("call_0_0"), ["fixed-ask=allow", "fixed-deny=deny", "rules=ask"]);
    assert_eq!(verdict("call_0_0")["verdict"], "deny");
    assert_eq!(verdict("call_0_0")["reason"], "fixed-deny: fixed says no");
    assert_eq!(run.one("tool/result", "call_0_0")["data"]["error_code"], "DENIED");
    assert!(run.about("approval/asked", "call_0_0").is_empty(), "deny wins before anyone is asked");
    assert!(!env.path("a.txt").exists());

    // grep: deny + allow + ask → deny.
    assert_eq!(votes("call_0_1"), ["fixed-ask=ask", "fixed-deny=allow", "rules=deny"]);
    assert_eq!(verdict("call_0_1")["verdict"], "deny");
    assert_eq!(verdict("call_0_1")["reason"], "rules: rules deny grep (rule 2)");
    assert_eq!(run.one("tool/result", "call_0_1")["data"]["error_code"], "DENIED");

    // read: rewrite + allow + ask → ask, and the human is shown the rewritten arguments.
    assert_eq!(votes("call_0_2"), ["fixed-ask=ask", "fixed-deny=allow", "rules=rewrite"]);
    assert_eq!(verdict("call_0_2")["verdict"], "ask");
    assert_eq!(verdict("call_0_2")["reason"], "fixed-ask: fixed wants a human");
    assert_eq!(run.one("approval/asked", "call_0_2")["data"]["arguments"], json!({"path": "README.md", "limit": 1}));
    assert_eq!(run.one("approval/decided", "call_0_2")["data"]["outcome"], "rejected");
    assert_eq!(run.one("tool/result", "call_0_2")["data"]["error_code"], "APPROVAL_REJECTED");

    // list: rewrite + allow + allow → allow with the rewritten arguments.
    assert_eq!(votes("call_0_3"), ["fixed-ask=allow", "fixed-deny=allow", "rules=rewrite"]);
    assert_eq!(verdict("call_0_3")["verdict"], "allow");
    assert_eq!(verdict("call_0_3")["rewritten"], json!({"path": ".", "depth": 2}));
    assert_eq!(run.one("tool/result", "call_0_3")["data"]["is_error"], false);

    // glob: allow everywhere → allow, nothing rewritten.
    assert_eq!(votes("call_0_4"), ["fixed-ask=allow", "fixed-deny=allow", "rules=allow"]);
    assert_eq!(verdict("call_0_4")["verdict"], "allow");
    assert!(verdict("call_0_4").get("rewritten").is_none());
    assert_eq!(run.one("tool/result", "call_0_4")["data"]["is_error"], false);
}

#[test]
fn failing_policies_fail_closed_with_a_logged_reason() {
    let env = env();
    // Both load fine, then fail on every call: `oom` traps (a panic in the
    // guest), `slow` spins until its 300 ms limit stops it.
    let oom = policy("oom", "policy-fixed", "trap = true", "");
    let slow = policy("slow", "policy-fixed", "spin = true", "timeout_ms = 300");
    let steps: &[&[(&str, Value)]] = &[&[("list", json!({"path": "."}))]];
    let profile = env.profile("failing", &format!("{oom}{slow}{}", scripted(steps)));
    let run = env.run(&profile, None, &[]);
    assert_eq!(run.code, 0, "the host survives and the turn completes\n{}", run.dump());

    let decision = run.one("policy/decision", "call_0_0");
    assert_eq!(decision["data"]["verdict"], "deny", "{}", run.dump());
    assert_eq!(decision["data"]["votes"].as_array().map(Vec::len), Some(2), "{}", run.dump());
    let oom = vote(decision, "oom");
    assert!(oom.get("decision").is_none());
    let oom_err = oom["error"].as_str().unwrap_or_default();
    assert!(oom_err.contains("TRAP"), "{oom_err}");
    let slow = vote(decision, "slow");
    assert!(slow.get("decision").is_none());
    let slow_err = slow["error"].as_str().unwrap_or_default();
    assert!(slow_err.contains("TIMEOUT"), "{slow_err}");
    let reason = decision["data"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("oom: policy failed") && reason.contains("slow: policy failed"), "{reason}");
    assert!(reason.contains("failing closed"), "{reason}");

    let result = run.one("tool/result", "call_0_0");
    assert_eq!(result["data"]["error_code"], "DENIED");
    assert!(run.last_text().contains("failing closed"), "the model is told why\n{}", run.dump());
}

#[test]
fn malformed_rules_are_refused_never_ignored() {
    let env = env();
    // If either problem were skipped, `workspace-write` would allow the read.
    let bad = policy(
        "rules",
        "policy-rules",
        r#"
mode = "workspace-write"
[[plugin.config.rules]]
tool = "write"
acton = "deny"
[[plugin.config.rules]]
name = "no-rm"
tool = "bash"
command = "rm -rf ["
action = "deny"
"#,
        "",
    );
    // A policy row without any configuration is refused too.
    let empty = policy("rules-empty", "policy-rules", "", "");
    let steps: &[&[(&str, Value)]] = &[&[("read", json!({"path": "README.md"}))]];
    let profile = env.profile("malformed", &format!("{bad}{empty}{}", scripted(steps)));
    let run = env.run(&profile, None, &[]);

    // The host validates plugin configuration at load (`configure.validate`)
    // and refuses to start, naming the plugin and every problem.
    assert_eq!(run.code, 2, "{}", run.dump());
    assert!(run.events.iter().all(|e| e["type"] != "turn/start"), "{}", run.dump());
    assert!(run.stderr.contains("plugin `rules`") && run.stderr.contains("invalid configuration"), "{}", run.stderr);
    assert!(run.stderr.contains("rule 1: unknown field `acton`"), "{}", run.stderr);
    assert!(run.stderr.contains("rule 2 \"no-rm\": `command` pattern `rm -rf [`: unclosed `[`"), "{}", run.stderr);
    assert!(run.stderr.contains("plugin `rules-empty`") && run.stderr.contains("nothing configured"), "{}", run.stderr);
    // If it ever ran with a bad config, the policy would deny every call
    // listing the same problems (its unit tests check that path).
}

/// Issue 40: under `wharf run` a policy's question (`policy-ask`, granted
/// `questions`) is declined at once by the headless approver, and the
/// policy's decline branch decides (deny, saying so in the log). Without
/// the grant the import answers `not-granted`: nobody is asked, and the
/// policy denies with that reason.
#[test]
fn a_policys_question_is_declined_under_wharf_run_and_needs_the_grant() {
    let env = env();
    let _ = wharf_tests::plugin(plugins::POLICY_ASK);
    let body = |grant: &str| {
        format!(
            r#"
[[plugin]]
id = "why"
path = "${{plugin_dir}}/policy-ask.wasm"
[plugin.config]
tools = ["word_count"]
[plugin.grant]
{grant}

[[plugin]]
id = "scripted"
path = "${{plugin_dir}}/llm-scripted.wasm"
[[plugin.config.turns]]
tool_calls = [{{ name = "word_count", arguments = {{ path = "README.md" }} }}]
[[plugin.config.turns]]
text = "The tool said: "
echo_last_tool_result = true
"#
        )
    };
    let cases = [
        ("granted", "questions = true", 1, "no reason given for `word_count` (the question was declined)"),
        ("ungranted", "", 0, "cannot ask for a reason for `word_count`: the `questions` capability is not granted"),
    ];
    for (name, grant, asked, why) in cases {
        let profile = env.profile(name, &body(grant));
        let out = crate::code_mode::run_command(&env, &profile, "count the words").output().expect("running wharf run");
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(0), "{name}: {stdout}\n{stderr}");
        let streamed = crate::code_mode::parse_events(&stdout);
        let id = streamed
            .iter()
            .find(|e| e["type"] == "session/start")
            .and_then(|e| e["data"]["id"].as_str())
            .unwrap_or_else(|| panic!("{name}: no session/start: {stdout}\n{stderr}"))
            .to_string();
        let events: Vec<Value> = crate::code_mode::stored(&env, &id)
            .iter()
            .map(|e| serde_json::to_value(e).unwrap_or(Value::Null))
            .collect();
        let of = |ty: &str| events.iter().filter(|e| e["type"] == ty).collect::<Vec<_>>();
        assert_eq!(of("question/asked").len(), asked, "{name}: {events:#?}");
        if asked > 0 {
            let a = of("question/answered");
            assert_eq!(
                (a[0]["data"]["action"].as_str(), a[0]["data"]["by"].as_str()),
                (Some("decline"), Some("headless"))
            );
        }
        let decision = of("policy/decision");
        let v = vote(decision[0], "why");
        assert_eq!(v["decision"]["decision"], "deny", "{name}: {v}");
        assert_eq!(v["decision"]["reason"].as_str(), Some(format!("policy-ask: {why}").as_str()), "{name}: {v}");
        let result = of("tool/result");
        assert_eq!(result[0]["data"]["error_code"], "DENIED", "{name}: {:?}", result[0]);
    }
}
