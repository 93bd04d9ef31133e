//! Hot reload with revocation, against real components: swap a tool while a
//! session runs, swap a policy, refuse broken versions, revoke on unload,
//! change a grant live, and 100 policy swaps under 10,000 concurrent calls.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use wharf_core::approval::HeadlessApprover;
use wharf_core::events::{Event, EventKind};
use wharf_core::plugin::{
    BoxFuture, FinishReason, LlmAdapter, LlmError, LlmEvent, LlmRequest, LlmStream, ModelInfo, PluginRef, Role,
    ToolCall,
};
use wharf_core::registry::{Registrations, Registry};
use wharf_core::store::{NewSession, SessionStore};
use wharf_core::{Agent, AgentConfig};
use wharf_runtime::grants::{Access, DirGrant, Grant};
use wharf_runtime::plugins::PluginHost;
use wharf_runtime::{OnInvalidConfig, PluginSpec, Runtime, RuntimeOptions};
use wharf_tests::{Plugin, plugins};

/// A model whose replies the test hands over step by step.
struct ControlledModel {
    plugin: PluginRef,
    replies: tokio::sync::Mutex<mpsc::UnboundedReceiver<Vec<LlmEvent>>>,
    requests: Mutex<Vec<LlmRequest>>,
}

struct Once(Option<Vec<LlmEvent>>);

impl LlmStream for Once {
    fn next(&mut self) -> BoxFuture<'_, Result<Option<Vec<LlmEvent>>, LlmError>> {
        Box::pin(async move { Ok(self.0.take()) })
    }
}

impl LlmAdapter for ControlledModel {
    fn plugin(&self) -> &PluginRef {
        &self.plugin
    }
    fn model(&self) -> ModelInfo {
        ModelInfo { model: "controlled".into(), context_window: 1 << 20 }
    }
    fn start<'a>(&'a self, request: &'a LlmRequest) -> BoxFuture<'a, Result<Box<dyn LlmStream>, LlmError>> {
        Box::pin(async move {
            self.requests.lock().unwrap_or_else(|e| e.into_inner()).push(request.clone());
            let ev = self.replies.lock().await.recv().await.unwrap_or_else(|| stop("no more replies"));
            Ok(Box::new(Once(Some(ev))) as Box<dyn LlmStream>)
        })
    }
}

/// A model that asks for `per_step` echo calls per step for `steps` steps.
struct FanOutModel {
    plugin: PluginRef,
    steps: usize,
    per_step: usize,
}

impl LlmAdapter for FanOutModel {
    fn plugin(&self) -> &PluginRef {
        &self.plugin
    }
    fn model(&self) -> ModelInfo {
        ModelInfo { model: "fan-out".into(), context_window: 1 << 30 }
    }
    fn start<'a>(&'a self, request: &'a LlmRequest) -> BoxFuture<'a, Result<Box<dyn LlmStream>, LlmError>> {
        let step = request.messages.iter().filter(|m| m.role == Role::Assistant).count();
        let ev = if step < self.steps {
            let mut v: Vec<LlmEvent> = (0..self.per_step)
                .map(|i| {
                    LlmEvent::ToolCall(ToolCall {
                        id: format!("c{step}_{i}"),
                        name: "echo".into(),
                        arguments: json!({"text": format!("{step}/{i}")}).to_string(),
                    })
                })
                .collect();
            v.push(LlmEvent::Finish(FinishReason::ToolCalls));
            v
        } else {
            stop("done")
        };
        Box::pin(async move { Ok(Box::new(Once(Some(ev))) as Box<dyn LlmStream>) })
    }
}

fn stop(text: &str) -> Vec<LlmEvent> {
    vec![LlmEvent::Text(text.into()), LlmEvent::Finish(FinishReason::Stop)]
}

fn call(id: &str, name: &str, args: Value) -> Vec<LlmEvent> {
    vec![
        LlmEvent::ToolCall(ToolCall { id: id.into(), name: name.into(), arguments: args.to_string() }),
        LlmEvent::Finish(FinishReason::ToolCalls),
    ]
}

struct Fixture {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    host: Arc<PluginHost>,
    registry: Arc<Registry>,
    store: SessionStore,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().expect("creating a temp dir");
    let dir = std::fs::canonicalize(tmp.path()).expect("canonicalizing the temp dir");
    let cache = wharf_tests::target_dir().join("test-cache");
    let rt =
        Runtime::new(RuntimeOptions { cache_dir: Some(cache), ..Default::default() }).expect("creating the runtime");
    let registry = Arc::new(Registry::new());
    let host = PluginHost::new(rt, registry.clone());
    let store = SessionStore::new(dir.join("sessions"));
    Fixture { _tmp: tmp, dir, host, registry, store }
}

/// Writes `bytes` to `path` atomically (as build tools do).
fn replace(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).expect("writing the temp file");
    std::fs::rename(&tmp, path).expect("moving the new file in place");
}

fn bytes(name: Plugin) -> Vec<u8> {
    std::fs::read(wharf_tests::plugin(name)).expect("reading the component")
}

/// The same component with a custom section appended: identical behaviour,
/// a different digest (a new "version").
fn variant(base: &[u8], generation: u32) -> Vec<u8> {
    let name = b"wharf-test-generation";
    let payload = generation.to_le_bytes();
    let mut body = vec![name.len() as u8];
    body.extend_from_slice(name);
    body.extend_from_slice(&payload);
    let mut out = base.to_vec();
    out.push(0); // custom section id
    out.push(body.len() as u8); // fits in one LEB128 byte
    out.extend_from_slice(&body);
    out
}

fn spec(id: &str, path: &Path, config: Value, grant: Grant) -> PluginSpec {
    PluginSpec {
        id: id.into(),
        path: path.to_path_buf(),
        config,
        grant,
        warm: false,
        on_invalid_config: Default::default(),
    }
}

/// Forwards plugin changes into the session log, as the CLI does.
fn log_plugin_events(host: &PluginHost, log: &wharf_core::SessionLog) {
    for ev in host.history() {
        let _ = log.append(ev);
    }
    let mut rx = host.subscribe();
    let log = log.clone();
    tokio::spawn(async move {
        while let Ok(ev) = rx.recv().await {
            let _ = log.append(ev);
        }
    });
}

async fn wait_for(
    rx: &mut tokio::sync::broadcast::Receiver<EventKind>,
    pred: impl Fn(&EventKind) -> bool,
) -> EventKind {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Ok(ev)) if pred(&ev) => return ev,
            Ok(Ok(_)) => {}
            Ok(Err(e)) => panic!("plugin event stream: {e}"),
            Err(_) => panic!("timed out waiting for a plugin event"),
        }
    }
}

fn results(events: &[Event]) -> Vec<(String, bool, Option<String>, String)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolResult(r) => Some((r.call_id.clone(), r.is_error, r.version.clone(), r.content.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapping_a_tool_file_changes_the_next_step_without_a_restart() -> anyhow::Result<()> {
    let f = fixture();
    let path = f.dir.join("tool.wasm");
    let text = bytes(plugins::TEXT);
    let fs = bytes(plugins::FS);
    replace(&path, &text);
    std::fs::write(f.dir.join("note.txt"), "swapped in\n").context("writing note.txt")?;
    let grant =
        Grant { dirs: vec![DirGrant::new(&f.dir, Access::Rw).context("granting the directory")?], ..Grant::default() };
    f.host
        .load_all(vec![spec("tool", &path, json!({}), grant)])
        .await
        .map_err(anyhow::Error::from)
        .context("loading the plugins")?;
    let _watch = f.host.watch(vec![], None).context("watching the config")?;
    let mut plugin_events = f.host.subscribe();

    let (tx, rx) = mpsc::unbounded_channel();
    let model = Arc::new(ControlledModel {
        plugin: PluginRef::native("model"),
        replies: tokio::sync::Mutex::new(rx),
        requests: Mutex::new(Vec::new()),
    });
    f.registry
        .install(model.plugin.clone(), Registrations { llm: Some(model.clone()), ..Registrations::default() })
        .context("installing the model")?;
    let log = f.store.create(NewSession::default()).context("creating a session")?;
    log_plugin_events(&f.host, &log);
    let mut cfg = AgentConfig::default();
    cfg.pipeline.workspace = Some(f.dir.display().to_string());
    let agent = Agent::new(log.clone(), f.registry.clone(), Arc::new(HeadlessApprover::default()), cfg);
    // Turn 1 uses the text component's `echo`.
    let _ = tx.send(call("c1", "echo", json!({"text": "before"})));
    let _ = tx.send(stop("first turn done"));
    let first = agent.prompt("go").await.context("running the turn")?;
    assert_eq!(first.reason, wharf_core::StopReason::Completed);
    // Rebuild the tool while the session is open: a different component.
    replace(&path, &fs);
    let fs_digest = wharf_runtime::cache::digest(&fs);
    wait_for(&mut plugin_events, |e| matches!(e, EventKind::PluginLoaded(c) if c.digest == fs_digest)).await;
    // The next step sees the new tool list and runs the new version.
    let _ = tx.send(call("c2", "read", json!({"path": "note.txt"})));
    let _ = tx.send(stop("done"));
    let summary = agent.prompt("again").await.context("running the turn")?;
    assert_eq!(summary.reason, wharf_core::StopReason::Completed);

    let reqs = model.requests.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let names = |r: &LlmRequest| r.tools.iter().map(|t| t.name.clone()).collect::<HashSet<_>>();
    assert!(names(&reqs[0]).contains("echo") && !names(&reqs[0]).contains("read"));
    let next = &reqs[2];
    assert!(names(next).contains("read") && !names(next).contains("echo"), "{:?}", names(next));
    let text_digest = wharf_runtime::cache::digest(&text);
    // The swap is in the session log with both digests. The helper task
    // logs the host's events as it gets to run (the turn above may not
    // yield to it), so wait for them.
    let logged = |events: &[Event]| {
        events.iter().any(|e| matches!(&e.kind, EventKind::PluginUnloaded(c) if c.digest == text_digest))
            && events.iter().any(|e| matches!(&e.kind, EventKind::PluginLoaded(c) if c.digest == fs_digest))
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let events = loop {
        let events = f.store.load(log.id()).context("loading the session")?.events;
        if logged(&events) {
            break events;
        }
        assert!(tokio::time::Instant::now() < deadline, "the swap's plugin events were never logged");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let res = results(&events);
    assert_eq!(res[0].2.as_deref(), Some(text_digest.as_str()));
    assert_eq!((res[1].1, res[1].2.as_deref()), (false, Some(fs_digest.as_str())), "{res:?}");
    assert!(res[1].3.contains("swapped in"));
    assert!(res.iter().all(|r| !r.1), "no failed call: {res:?}");
    wharf_core::invariants::check(&events).map_err(anyhow::Error::msg).context("checking the log's invariants")?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_versions_never_replace_a_working_one() -> anyhow::Result<()> {
    let f = fixture();
    let path = f.dir.join("tool.wasm");
    let text = bytes(plugins::TEXT);
    replace(&path, &text);
    f.host
        .load_all(vec![spec("tool", &path, json!({}), Grant::default())])
        .await
        .map_err(anyhow::Error::from)
        .context("loading the plugins")?;
    let _watch = f.host.watch(vec![], None).context("watching the config")?;
    let mut events = f.host.subscribe();
    let log = f.store.create(NewSession::default()).context("creating a session")?;
    log_plugin_events(&f.host, &log);
    let good = wharf_runtime::cache::digest(&text);
    // Each broken version, with what its failure says.
    let broken_versions = [
        (b"garbage, not wasm at all".to_vec(), "not a WebAssembly file"),
        (bytes(plugins::WRONG_WORLD), "not a Wharf plugin"),
        (bytes(plugins::FUTURE_VERSION), "built against"),
    ];
    for (broken, why) in &broken_versions {
        replace(&path, broken);
        let digest = wharf_runtime::cache::digest(broken);
        let ev = wait_for(&mut events, |e| matches!(e, EventKind::PluginReloadFailed(c) if c.digest == digest)).await;
        let EventKind::PluginReloadFailed(c) = ev else { unreachable!() };
        assert_eq!(c.id, "tool");
        assert!(c.error.as_deref().is_some_and(|e| e.contains(why)), "{c:?}");
        assert!(c.error.as_deref().is_some_and(|e| e.contains("tool.wasm")), "{c:?}");
        // The old version keeps serving.
        assert_eq!(f.registry.version_of("tool").map(|p| p.digest), Some(good.clone()));
        let snap = f.registry.snapshot();
        let echo = snap.tools.get("echo").cloned().unwrap_or_else(|| panic!("echo revoked"));
        let out = echo
            .call(
                wharf_core::plugin::ToolInvocation {
                    call_id: "x".into(),
                    name: "echo".into(),
                    arguments: json!({"text": "still here"}),
                    session_id: "s".into(),
                    workspace: None,
                    services: None,
                },
                tokio_util::sync::CancellationToken::new(),
            )
            .await;
        assert_eq!(out.content, "still here");
    }
    // A good file afterwards is picked up.
    replace(&path, &variant(&text, 7));
    wait_for(&mut events, |e| matches!(e, EventKind::PluginLoaded(_))).await;
    assert_ne!(f.registry.version_of("tool").map(|p| p.digest), Some(good));
    // On disk, each `plugin/reload-failed` (retries included) pairs a
    // version's digest with that version's error.
    let on_disk = f.store.load(log.id()).context("loading the session")?.events;
    let failed: Vec<_> = on_disk
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::PluginReloadFailed(c) => Some(c.clone()),
            _ => None,
        })
        .collect();
    assert!(failed.len() >= broken_versions.len(), "{failed:?}");
    for c in &failed {
        let (_, why) = broken_versions
            .iter()
            .find(|(b, _)| wharf_runtime::cache::digest(b) == c.digest)
            .unwrap_or_else(|| panic!("a digest of no failed version: {c:?}"));
        assert!(c.error.as_deref().is_some_and(|e| e.contains(why)), "{c:?}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unload_revokes_every_registration() -> anyhow::Result<()> {
    let f = fixture();
    let specs = vec![
        spec("tool", &wharf_tests::plugin(plugins::TEXT), json!({}), Grant::default()),
        spec("pol", &wharf_tests::plugin(plugins::POLICY_FIXED), json!({"decision": "allow"}), Grant::default()),
        spec(
            "hk",
            &wharf_tests::plugin(plugins::HOOKS_FIXED),
            json!({"sections": [{"id": "s", "order": 1, "text": "be brief"}]}),
            Grant::default(),
        ),
    ];
    f.host.load_all(specs).await.map_err(anyhow::Error::from).context("loading the plugins")?;
    for id in ["tool", "pol", "hk"] {
        assert!(f.registry.snapshot().count_owned_by(id) > 0 || id == "hk", "{id} registered nothing");
        assert!(f.host.unload(id).await);
        assert_eq!(f.registry.snapshot().count_owned_by(id), 0, "{id} left registrations behind");
        assert!(f.registry.version_of(id).is_none());
    }
    assert!(f.registry.snapshot().tools.is_empty());
    assert!(f.registry.snapshot().policies.is_empty());
    assert!(f.registry.snapshot().prompt_sections.is_empty());
    let hist = f.host.history();
    assert_eq!(hist.iter().filter(|e| matches!(e, EventKind::PluginUnloaded(_))).count(), 3);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_change_swaps_a_policy_and_a_grant_live() -> anyhow::Result<()> {
    let f = fixture();
    let data = f.dir.join("data");
    std::fs::create_dir_all(&data).context("creating data")?;
    std::fs::write(data.join("a.txt"), "one two\n").context("writing a.txt")?;
    // The "config file": which decision the policy takes and whether the
    // text tool may read `data/`.
    let conf = f.dir.join("live.json");
    std::fs::write(&conf, r#"{"decision": "allow", "grant": false}"#).context("writing conf")?;
    let (text, pol) = (wharf_tests::plugin(plugins::TEXT), wharf_tests::plugin(plugins::POLICY_FIXED));
    let data_c = data.clone();
    let conf_c = conf.clone();
    let source: wharf_runtime::plugins::SpecSource = Arc::new(move || {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&conf_c).map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
        let dirs = if v["grant"] == true {
            vec![DirGrant::new(&data_c, Access::Ro).map_err(|e| e.to_string())?]
        } else {
            vec![]
        };
        Ok(vec![
            spec("text", &text, json!({}), Grant { dirs, ..Grant::default() }),
            spec("pol", &pol, json!({"decision": v["decision"], "tools": ["word_count"]}), Grant::default()),
        ])
    });
    f.host
        .load_all(source().map_err(anyhow::Error::msg).context("reading the config source")?)
        .await
        .map_err(anyhow::Error::from)
        .context("loading the plugins")?;
    let _watch = f.host.watch(vec![conf.clone()], Some(source)).context("watching the config")?;
    let mut plugin_events = f.host.subscribe();

    let file = data.join("a.txt").display().to_string();
    let run = |id: &'static str| {
        let registry = f.registry.clone();
        let store = f.store.clone();
        let file = file.clone();
        async move {
            let (tx, rx) = mpsc::unbounded_channel();
            let model = Arc::new(ControlledModel {
                plugin: PluginRef::native(id),
                replies: tokio::sync::Mutex::new(rx),
                requests: Mutex::new(Vec::new()),
            });
            registry
                .install(PluginRef::native("model"), Registrations { llm: Some(model), ..Registrations::default() })
                .context("installing the model")?;
            let log = store.create(NewSession::default()).context("creating a session")?;
            let agent =
                Agent::new(log.clone(), registry, Arc::new(HeadlessApprover::default()), AgentConfig::default());
            let _ = tx.send(call("c", "word_count", json!({"path": file})));
            let _ = tx.send(stop("ok"));
            agent.prompt("count").await.context("running the turn")?;
            Ok::<_, anyhow::Error>(results(&store.load(log.id()).context("loading the session")?.events).remove(0))
        }
    };
    // Allowed, but no grant: the sandbox refuses the read.
    let (_, err, _, content) = run("m1").await?;
    assert!(err, "read without a grant: {content}");
    // Grant the directory live.
    std::fs::write(&conf, r#"{"decision": "allow", "grant": true}"#).context("writing conf")?;
    wait_for(&mut plugin_events, |e| matches!(e, EventKind::PluginLoaded(c) if c.id == "text")).await;
    let (_, err, _, content) = run("m2").await?;
    assert!(!err, "read with the new grant: {content}");
    assert!(content.contains('2'), "{content}");
    // Swap the policy to deny: the next call is denied.
    std::fs::write(&conf, r#"{"decision": "deny", "grant": true}"#).context("writing conf")?;
    wait_for(&mut plugin_events, |e| matches!(e, EventKind::PluginLoaded(c) if c.id == "pol")).await;
    let (_, err, _, content) = run("m3").await?;
    assert!(err, "policy should deny now: {content}");
    // A malformed config is refused and the running plugins keep serving.
    std::fs::write(&conf, "{not json").context("writing conf")?;
    wait_for(&mut plugin_events, |e| matches!(e, EventKind::PluginReloadFailed(c) if c.id == "config")).await;
    assert!(f.registry.snapshot().tools.contains_key("word_count"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_swapped_100_times_under_10000_calls() -> anyhow::Result<()> {
    let f = fixture();
    let base = bytes(plugins::POLICY_FIXED);
    let pol_path = f.dir.join("policy.wasm");
    replace(&pol_path, &variant(&base, 0));
    let specs = vec![
        spec("text", &wharf_tests::plugin(plugins::TEXT), json!({}), Grant::default()),
        spec("pol", &pol_path, json!({"decision": "allow"}), Grant::default()),
    ];
    f.host.load_all(specs).await.map_err(anyhow::Error::from).context("loading the plugins")?;
    let (steps, per_step) = (100, 100);
    let model = Arc::new(FanOutModel { plugin: PluginRef::native("fan"), steps, per_step });
    f.registry
        .install(model.plugin.clone(), Registrations { llm: Some(model), ..Registrations::default() })
        .context("installing the model")?;
    let log = f.store.create(NewSession::default()).context("creating a session")?;
    let cfg = AgentConfig { max_steps: (steps + 2) as u32, ..AgentConfig::default() };
    let agent = Agent::new(log.clone(), f.registry.clone(), Arc::new(HeadlessApprover::default()), cfg);
    let runner = tokio::spawn(async move { agent.prompt("fan out").await });

    // 100 new versions of the policy while the calls run.
    let mut digests = HashSet::from([wharf_runtime::cache::digest(&variant(&base, 0))]);
    for generation in 1..=100u32 {
        let b = variant(&base, generation);
        digests.insert(wharf_runtime::cache::digest(&b));
        let p = f.dir.join(format!("policy-{generation}.wasm"));
        std::fs::write(&p, &b).context("writing the file")?;
        f.host
            .reload(spec("pol", &p, json!({"decision": "allow"}), Grant::default()))
            .await
            .map_err(anyhow::Error::msg)
            .context("reloading the policy")?;
    }
    let summary = runner.await.context("joining the agent's task")?.context("running the turn")?;
    assert_eq!(summary.reason, wharf_core::StopReason::Completed);
    let events = f.store.load(log.id()).context("loading the session")?.events;
    let res = results(&events);
    assert_eq!(res.len(), steps * per_step);
    let failed: Vec<_> = res.iter().filter(|r| r.1).collect();
    assert!(failed.is_empty(), "{} failed calls, e.g. {:?}", failed.len(), failed.first());
    let mut decided_by = HashSet::new();
    let mut decisions = 0;
    for e in &events {
        if let EventKind::PolicyDecision(d) = &e.kind {
            decisions += 1;
            assert_eq!(d.votes.len(), 1, "call {} decided by {} versions", d.call_id, d.votes.len());
            let v = &d.votes[0];
            assert_eq!(v.plugin, "pol");
            assert!(digests.contains(&v.version), "unknown version {}", v.version);
            decided_by.insert(v.version.clone());
        }
    }
    assert_eq!(decisions, steps * per_step);
    assert!(decided_by.len() > 1, "the swaps did not overlap the calls");
    wharf_core::invariants::check(&events).map_err(anyhow::Error::msg).context("checking the log's invariants")?;
    Ok(())
}

/// What the loaded policy `id` decides on a call of `tool`.
async fn decide(registry: &Registry, id: &str, tool: &str) -> wharf_core::plugin::Decision {
    let snap = registry.snapshot();
    let pol = snap.policies.iter().find(|p| p.plugin().id == id).unwrap_or_else(|| panic!("policy `{id}` is gone"));
    let req = wharf_core::plugin::PolicyRequest {
        tool: tool.into(),
        plugin: "t".into(),
        arguments: json!({}),
        session_id: "s".into(),
        agent_depth: 0,
        workspace: None,
    };
    pol.evaluate(req).await.expect("evaluating the policy")
}

fn deny_reason(d: &wharf_core::plugin::Decision) -> String {
    match d {
        wharf_core::plugin::Decision::Deny { reason } => reason.clone(),
        other => panic!("expected a denial, got {other:?}"),
    }
}

/// A policy config edited while the component file is broken stays pending
/// (the policy fails closed meanwhile) and applies once the file is back —
/// restored byte for byte, or fixed with a new build.
async fn pending_config_applies_when_the_component_recovers(new_build: bool) {
    let f = fixture();
    let base = bytes(plugins::POLICY_FIXED);
    let pol = f.dir.join("policy.wasm");
    replace(&pol, &base);
    let conf = f.dir.join("live.json");
    std::fs::write(&conf, r#"{"decision": "allow"}"#).expect("writing conf");
    let (pol_c, conf_c) = (pol.clone(), conf.clone());
    let source: wharf_runtime::plugins::SpecSource = Arc::new(move || {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&conf_c).map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
        let config = json!({"decision": v["decision"], "reason": "the v2 rules"});
        Ok(vec![spec("pol", &pol_c, config, Grant::default())])
    });
    f.host.load_all(source().expect("reading the config source")).await.expect("loading the plugins");
    let _watch = f.host.watch(vec![conf.clone()], Some(source)).expect("watching the config");
    let mut events = f.host.subscribe();
    assert_eq!(decide(&f.registry, "pol", "write").await, wharf_core::plugin::Decision::Allow);

    // The component breaks; then the operator tightens the rules.
    replace(&pol, b"not a component");
    wait_for(&mut events, |e| matches!(e, EventKind::PluginReloadFailed(c) if c.id == "pol")).await;
    std::fs::write(&conf, r#"{"decision": "deny"}"#).expect("writing conf");
    let ev = wait_for(&mut events, |e| {
        matches!(e, EventKind::PluginReloadFailed(c) if c.id == "pol"
            && c.error.as_deref().is_some_and(|m| m.contains("pending")))
    })
    .await;
    let EventKind::PluginReloadFailed(c) = ev else { unreachable!() };
    assert!(c.error.as_deref().is_some_and(|m| m.contains("denies every call")), "{c:?}");
    // Meanwhile the old rules do not decide: the policy fails closed.
    let reason = deny_reason(&decide(&f.registry, "pol", "write").await);
    assert!(reason.contains("could not be applied"), "{reason}");

    // The component comes back: the latest config wins.
    let restored = if new_build { variant(&base, 1) } else { base.clone() };
    replace(&pol, &restored);
    let digest = wharf_runtime::cache::digest(&restored);
    wait_for(&mut events, |e| matches!(e, EventKind::PluginLoaded(c) if c.id == "pol" && c.digest == digest)).await;
    assert_eq!(deny_reason(&decide(&f.registry, "pol", "write").await), "the v2 rules");
    assert_eq!(f.registry.version_of("pol").map(|p| p.digest), Some(digest));

    // Nothing is pending any more: going back to the old rules applies them.
    std::fs::write(&conf, r#"{"decision": "allow"}"#).expect("writing conf");
    wait_for(&mut events, |e| matches!(e, EventKind::PluginLoaded(c) if c.id == "pol")).await;
    assert_eq!(decide(&f.registry, "pol", "write").await, wharf_core::plugin::Decision::Allow);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_edit_made_while_the_file_is_broken_applies_when_the_bytes_come_back() {
    pending_config_applies_when_the_component_recovers(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_edit_made_while_the_file_is_broken_applies_to_the_fixed_build() {
    pending_config_applies_when_the_component_recovers(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_file_replaced_by_another_kind_is_refused_and_keeps_denying() -> anyhow::Result<()> {
    let f = fixture();
    let base = bytes(plugins::POLICY_FIXED);
    let pol = f.dir.join("policy.wasm");
    replace(&pol, &base);
    let config = json!({"decision": "deny", "reason": "no writes", "tools": ["write"]});
    f.host
        .load_all(vec![spec("pol", &pol, config, Grant::default())])
        .await
        .map_err(anyhow::Error::from)
        .context("loading the plugins")?;
    let _watch = f.host.watch(vec![], None).context("watching the config")?;
    let mut events = f.host.subscribe();
    // A valid component, but a compactor: it must not take the policy's place.
    replace(&pol, &bytes(plugins::COMPACTION));
    let ev = wait_for(&mut events, |e| matches!(e, EventKind::PluginReloadFailed(c) if c.id == "pol")).await;
    let EventKind::PluginReloadFailed(c) = ev else { unreachable!() };
    let msg = c.error.clone().unwrap_or_default();
    assert!(msg.contains("does not export policy") && msg.contains("policy.wasm"), "{msg}");
    assert_eq!(c.digest, wharf_runtime::cache::digest(&bytes(plugins::COMPACTION)));
    // The old version keeps serving, and keeps denying.
    assert_eq!(f.registry.version_of("pol").map(|p| p.digest), Some(wharf_runtime::cache::digest(&base)));
    assert!(f.registry.snapshot().compactors.is_empty());
    assert_eq!(deny_reason(&decide(&f.registry, "pol", "write").await), "no writes");
    // A policy again (a new build) is accepted.
    let fixed = variant(&base, 2);
    replace(&pol, &fixed);
    let digest = wharf_runtime::cache::digest(&fixed);
    wait_for(&mut events, |e| matches!(e, EventKind::PluginLoaded(c) if c.id == "pol" && c.digest == digest)).await;
    assert_eq!(deny_reason(&decide(&f.registry, "pol", "write").await), "no writes");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_name_two_rows_offer_belongs_to_the_first_row_and_the_profile_starts() -> anyhow::Result<()> {
    let f = fixture();
    let evil_fs = bytes(plugins::EVIL_FS);
    let first = f.dir.join("first.wasm");
    replace(&first, &evil_fs);
    // `second` is the same component: every one of its tool names is taken
    // by `first`, except the one only it has. `text` comes after both.
    let specs = vec![
        spec("first", &first, json!({}), Grant::default()),
        spec(
            "second",
            &wharf_tests::plugin(plugins::EVIL_FS),
            json!({"extra_tools": ["second_only"]}),
            Grant::default(),
        ),
        spec("text", &wharf_tests::plugin(plugins::TEXT), json!({}), Grant::default()),
    ];
    f.host.load_all(specs).await.map_err(anyhow::Error::from).context("starting the profile")?;
    let owner = |tool: &str| f.registry.snapshot().tools.get(tool).map(|t| t.plugin().clone());
    assert_eq!(owner("symlink").map(|p| p.id).as_deref(), Some("first"));
    assert_eq!(owner("ok").map(|p| p.id).as_deref(), Some("first"));
    assert_eq!(owner("second_only").map(|p| p.id).as_deref(), Some("second"));
    assert_eq!(owner("echo").map(|p| p.id).as_deref(), Some("text"));
    // The refusal is logged with both rows, in `second`'s `plugin/loaded`.
    let warning = f
        .host
        .history()
        .iter()
        .find_map(|e| match e {
            EventKind::PluginLoaded(c) if c.id == "second" => c.error.clone(),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no warning for `second`"));
    assert!(warning.contains("`symlink`") && warning.contains("`first`") && warning.contains("`second`"), "{warning}");
    assert!(
        f.registry.snapshot().tool_conflicts.iter().all(|c| c.holder == "first" && c.refused == "second"),
        "{:?}",
        f.registry.snapshot().tool_conflicts
    );

    // A hot reload of the holder keeps its names.
    let _watch = f.host.watch(vec![], None).context("watching the config")?;
    let mut events = f.host.subscribe();
    let next = variant(&evil_fs, 1);
    replace(&first, &next);
    let digest = wharf_runtime::cache::digest(&next);
    wait_for(&mut events, |e| matches!(e, EventKind::PluginLoaded(c) if c.id == "first" && c.digest == digest)).await;
    assert_eq!(owner("symlink").map(|p| (p.id, p.digest)), Some(("first".into(), digest)));
    assert_eq!(owner("second_only").map(|p| p.id).as_deref(), Some("second"));

    // One plugin naming a tool twice is refused at load, saying so.
    let dup = spec(
        "dup",
        &wharf_tests::plugin(plugins::EVIL_FS),
        json!({"extra_tools": ["twice", "twice"]}),
        Grant::default(),
    );
    let err = f.host.load_all(vec![dup]).await.err().unwrap_or_else(|| panic!("a duplicate name was accepted"));
    assert!(err.to_string().contains("`twice` twice"), "{err:?}");
    assert!(f.registry.version_of("dup").is_none());
    Ok(())
}

/// Issue 36 item 18: the watcher read and hashed one version, and the file
/// changed before that version's failure was reported: the
/// `plugin/reload-failed` event (live and in the session log) names the
/// bytes that failed, not what the file holds by then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_failed_names_the_digest_of_the_bytes_that_failed() -> anyhow::Result<()> {
    let f = fixture();
    let path = f.dir.join("tool.wasm");
    let text = bytes(plugins::TEXT);
    replace(&path, &text);
    f.host
        .load_all(vec![spec("tool", &path, json!({}), Grant::default())])
        .await
        .map_err(anyhow::Error::from)
        .context("loading the plugins")?;
    let log = f.store.create(NewSession::default()).context("creating a session")?;
    log_plugin_events(&f.host, &log);
    let mut events = f.host.subscribe();
    // The version that fails (a component of the wrong world), and the
    // next one, written since.
    let failed = bytes(plugins::WRONG_WORLD);
    replace(&path, &variant(&text, 3));
    let err = f.host.reload_bytes(spec("tool", &path, json!({}), Grant::default()), failed.clone()).await;
    assert!(err.is_err_and(|e| e.message.contains("not a Wharf plugin")));
    let want = wharf_runtime::cache::digest(&failed);
    let ev = wait_for(&mut events, |e| matches!(e, EventKind::PluginReloadFailed(_))).await;
    let EventKind::PluginReloadFailed(c) = ev else { unreachable!() };
    assert_eq!(c.digest, want, "{c:?}");
    // On disk too.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let on_disk = f.store.load(log.id()).context("loading the session")?.events;
        let logged = on_disk.iter().find_map(|e| match &e.kind {
            EventKind::PluginReloadFailed(c) => Some(c.clone()),
            _ => None,
        });
        if let Some(c) = logged {
            assert_eq!(c.digest, want, "{c:?}");
            assert!(c.error.as_deref().is_some_and(|e| e.contains("not a Wharf plugin")), "{c:?}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no plugin/reload-failed in the log");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// One policy row whose `config` is the JSON in `conf`, as a profile row's
/// `[plugin.config]` would be, with `on_invalid_config = mode`.
fn policy_row(id: &str, component: PathBuf, conf: &Path, mode: OnInvalidConfig) -> wharf_runtime::plugins::SpecSource {
    let (id, conf) = (id.to_string(), conf.to_path_buf());
    Arc::new(move || {
        let config: Value = serde_json::from_str(&std::fs::read_to_string(&conf).map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
        let mut s = spec(&id, &component, config, Grant::default());
        s.on_invalid_config = mode;
        Ok(vec![s])
    })
}

/// An event as it is on the wire (`{"type", "data"}`).
fn wire(e: &EventKind) -> Value {
    serde_json::to_value(e).expect("serializing an event")
}

fn change_of<'a>(e: &'a EventKind, ty: &str, id: &str) -> Option<&'a wharf_core::events::PluginChange> {
    match e {
        EventKind::PluginLoaded(c) if ty == "plugin/loaded" && c.id == id => Some(c),
        EventKind::PluginReloadFailed(c) if ty == "plugin/reload-failed" && c.id == id => Some(c),
        _ => None,
    }
}

/// Waits for the `ty` event of row `id` whose wire `data` satisfies `pred`.
async fn wait_row(
    rx: &mut tokio::sync::broadcast::Receiver<EventKind>,
    ty: &str,
    id: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let ev = wait_for(rx, |e| change_of(e, ty, id).is_some() && pred(&wire(e)["data"])).await;
    wire(&ev)["data"].clone()
}

/// Issue 36, item 19: two configs of one policy component are two versions
/// in the log — `plugin/loaded` names each config (digest and generation)
/// and every vote names the config that decided it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn votes_and_plugin_loaded_name_the_policy_config_that_decided() -> anyhow::Result<()> {
    let f = fixture();
    let conf = f.dir.join("pol.json");
    let (allow, deny) = (json!({"decision": "allow"}), json!({"decision": "deny", "reason": "v2 says no"}));
    std::fs::write(&conf, allow.to_string()).context("writing conf")?;
    let pol = policy_row("pol", wharf_tests::plugin(plugins::POLICY_FIXED), &conf, OnInvalidConfig::Deny);
    let source: wharf_runtime::plugins::SpecSource = Arc::new(move || {
        let mut specs = vec![spec("text", &wharf_tests::plugin(plugins::TEXT), json!({}), Grant::default())];
        specs.extend(pol()?);
        Ok(specs)
    });
    f.host
        .load_all(source().map_err(anyhow::Error::msg).context("reading the config source")?)
        .await
        .map_err(anyhow::Error::from)
        .context("loading the plugins")?;
    let _watch = f.host.watch(vec![conf.clone()], Some(source)).context("watching the config")?;
    let mut plugin_events = f.host.subscribe();

    let (tx, rx) = mpsc::unbounded_channel();
    let model = Arc::new(ControlledModel {
        plugin: PluginRef::native("model"),
        replies: tokio::sync::Mutex::new(rx),
        requests: Mutex::new(Vec::new()),
    });
    f.registry
        .install(model.plugin.clone(), Registrations { llm: Some(model), ..Registrations::default() })
        .context("installing the model")?;
    let log = f.store.create(NewSession::default()).context("creating a session")?;
    log_plugin_events(&f.host, &log);
    let agent =
        Agent::new(log.clone(), f.registry.clone(), Arc::new(HeadlessApprover::default()), AgentConfig::default());
    let _ = tx.send(call("c1", "echo", json!({"text": "one"})));
    let _ = tx.send(stop("ok"));
    agent.prompt("one").await.context("running the turn")?;
    // The operator edits the policy's config (the component is unchanged).
    std::fs::write(&conf, deny.to_string()).context("writing conf")?;
    let deny_digest = wharf_runtime::component::config_digest(&deny);
    wait_row(&mut plugin_events, "plugin/loaded", "pol", |d| d["config"] == json!(deny_digest)).await;
    let _ = tx.send(call("c2", "echo", json!({"text": "two"})));
    let _ = tx.send(stop("ok"));
    agent.prompt("two").await.context("running the turn")?;

    let events: Vec<Value> = f
        .store
        .load(log.id())
        .context("loading the session")?
        .events
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()
        .context("serializing the events")?;
    let loaded: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "plugin/loaded" && e["data"]["id"] == "pol")
        .map(|e| &e["data"])
        .collect();
    assert_eq!(loaded.len(), 2, "{loaded:?}");
    let allow_digest = wharf_runtime::component::config_digest(&allow);
    assert_eq!((&loaded[0]["config"], &loaded[0]["generation"]), (&json!(allow_digest), &json!(1)), "{loaded:?}");
    assert_eq!((&loaded[1]["config"], &loaded[1]["generation"]), (&json!(deny_digest), &json!(2)), "{loaded:?}");
    // Same component: only the config tells the two versions apart.
    assert_eq!(loaded[0]["digest"], loaded[1]["digest"]);
    let vote = |call: &str| {
        let d = events
            .iter()
            .find(|e| e["type"] == "policy/decision" && e["data"]["call_id"] == call)
            .unwrap_or_else(|| panic!("no decision for {call}"));
        d["data"]["votes"][0].clone()
    };
    let (v1, v2) = (vote("c1"), vote("c2"));
    assert_eq!((&v1["plugin"], &v1["config"]), (&json!("pol"), &json!(allow_digest)), "{v1}");
    assert_eq!((&v2["plugin"], &v2["config"]), (&json!("pol"), &json!(deny_digest)), "{v2}");
    assert_eq!(v2["decision"]["reason"], json!("v2 says no"), "{v2}");
    // The old config's version is unloaded, naming its config.
    assert!(
        events.iter().any(|e| e["type"] == "plugin/unloaded" && e["data"]["config"] == json!(allow_digest)),
        "no plugin/unloaded for the first config"
    );
    Ok(())
}

/// Issue 36, items 19 and 20: a policy config the component refuses fails
/// closed (`on_invalid_config = "deny"`, the default) with a reason that says
/// the config was refused — not that the component failed to load — and the
/// log says when the period starts and ends; editing the config back to the
/// loaded one is logged too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_policy_config_fails_closed_truthfully_and_editing_it_back_is_logged() -> anyhow::Result<()> {
    let f = fixture();
    let conf = f.dir.join("rules.json");
    let (good, bad) = (json!({"default": "allow"}), json!({}));
    std::fs::write(&conf, good.to_string()).context("writing conf")?;
    let source = policy_row("rules", wharf_tests::plugin(plugins::POLICY_RULES), &conf, OnInvalidConfig::Deny);
    f.host
        .load_all(source().map_err(anyhow::Error::msg).context("reading the config source")?)
        .await
        .map_err(anyhow::Error::from)
        .context("loading the plugins")?;
    let _watch = f.host.watch(vec![conf.clone()], Some(source)).context("watching the config")?;
    let mut events = f.host.subscribe();
    assert_eq!(decide(&f.registry, "rules", "write").await, wharf_core::plugin::Decision::Allow);

    std::fs::write(&conf, bad.to_string()).context("writing conf")?;
    let bad_digest = wharf_runtime::component::config_digest(&bad);
    let failed = wait_row(&mut events, "plugin/reload-failed", "rules", |_| true).await;
    let msg = failed["error"].as_str().unwrap_or_default().to_string();
    assert!(msg.contains("nothing configured") && msg.contains("was refused"), "{failed}");
    assert!(!msg.contains("failed to load"), "the component did load: {failed}");
    assert_eq!(
        (&failed["config"], &failed["generation"], &failed["fail_closed"]),
        (&json!(bad_digest), &json!(2), &json!(true))
    );
    // Every call is denied meanwhile, saying why truthfully; the vote names
    // the refused config.
    let reason = deny_reason(&decide(&f.registry, "rules", "write").await);
    assert!(reason.contains("new config was refused") && reason.contains("nothing configured"), "{reason}");
    assert!(!reason.contains("failed to load"), "{reason}");
    let snap = f.registry.snapshot();
    let pol = snap.policies.iter().find(|p| p.plugin().id == "rules").unwrap_or_else(|| panic!("no policy"));
    assert_eq!(pol.plugin().config.as_deref(), Some(bad_digest.as_str()));

    // Edited back to what is loaded: logged, and the fail-closed period ends.
    std::fs::write(&conf, good.to_string()).context("writing conf")?;
    let good_digest = wharf_runtime::component::config_digest(&good);
    let back = wait_row(&mut events, "plugin/loaded", "rules", |_| true).await;
    assert_eq!(
        (&back["config"], &back["generation"], &back["fail_closed"]),
        (&json!(good_digest), &json!(3), &json!(false)),
        "{back}"
    );
    assert_eq!(decide(&f.registry, "rules", "write").await, wharf_core::plugin::Decision::Allow);
    Ok(())
}

/// Issue 36, item 20: with `on_invalid_config = "keep"` a refused config is
/// logged and the last good config keeps deciding; the next valid config
/// applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_policy_config_keeps_the_last_good_one_when_the_row_says_keep() -> anyhow::Result<()> {
    let f = fixture();
    let conf = f.dir.join("rules.json");
    let good = json!({"default": "allow"});
    std::fs::write(&conf, good.to_string()).context("writing conf")?;
    let source = policy_row("rules", wharf_tests::plugin(plugins::POLICY_RULES), &conf, OnInvalidConfig::Keep);
    f.host
        .load_all(source().map_err(anyhow::Error::msg).context("reading the config source")?)
        .await
        .map_err(anyhow::Error::from)
        .context("loading the plugins")?;
    let _watch = f.host.watch(vec![conf.clone()], Some(source)).context("watching the config")?;
    let mut events = f.host.subscribe();

    std::fs::write(&conf, "{}").context("writing conf")?;
    let failed = wait_row(&mut events, "plugin/reload-failed", "rules", |_| true).await;
    let msg = failed["error"].as_str().unwrap_or_default();
    assert!(msg.contains("was refused") && msg.contains("keeps deciding"), "{failed}");
    assert_eq!(failed["fail_closed"], json!(false), "{failed}");
    // The last good config still decides, and votes say so.
    assert_eq!(decide(&f.registry, "rules", "write").await, wharf_core::plugin::Decision::Allow);
    let good_digest = wharf_runtime::component::config_digest(&good);
    assert_eq!(f.registry.version_of("rules").and_then(|p| p.config), Some(good_digest));

    // A valid config applies.
    let deny = json!({"default": "deny"});
    std::fs::write(&conf, deny.to_string()).context("writing conf")?;
    let deny_digest = wharf_runtime::component::config_digest(&deny);
    wait_row(&mut events, "plugin/loaded", "rules", |d| d["config"] == json!(deny_digest)).await;
    assert!(matches!(decide(&f.registry, "rules", "write").await, wharf_core::plugin::Decision::Deny { .. }));
    Ok(())
}

/// Issue 36, item 21: a config-only change does not compile anything — it
/// applies while the component's tier-up compile (and any load compile) is
/// held — and the tier-up, once it runs, reaches the new version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_only_change_applies_while_compiles_are_held() -> anyhow::Result<()> {
    if std::env::var("WHARF_TIERED").is_ok_and(|v| v == "0") {
        wharf_tests::skip(&wharf_tests::current_test(), "WHARF_TIERED=0 is set");
        return Ok(());
    }
    let tmp = tempfile::tempdir().context("creating a temp dir")?;
    let dir = std::fs::canonicalize(tmp.path()).context("canonicalizing the temp dir")?;
    // An empty compile cache: the session's first seconds.
    let rt =
        Runtime::new(RuntimeOptions { cache_dir: Some(dir.join("cache")), ..wharf_cli_common::env::runtime_options() })
            .context("creating the runtime")?;
    rt.enable_tiering();
    let registry = Arc::new(Registry::new());
    let host = PluginHost::new(rt.clone(), registry.clone());
    let tier_up = rt.hold_tier_up();
    let conf = dir.join("pol.json");
    std::fs::write(&conf, r#"{"decision": "allow"}"#).context("writing conf")?;
    let source = policy_row("pol", wharf_tests::plugin(plugins::POLICY_FIXED), &conf, OnInvalidConfig::Deny);
    host.load_all(source().map_err(anyhow::Error::msg).context("reading the config source")?)
        .await
        .map_err(anyhow::Error::from)
        .context("loading the plugins")?;
    let first_tier = host.versions().get("pol").map(|v| v.tier()).unwrap_or_else(|| panic!("not loaded"));
    assert_eq!(rt.tier_up_pending(), 1, "the optimised compile should be queued");
    let _watch = host.watch(vec![conf.clone()], Some(source)).context("watching the config")?;
    let mut events = host.subscribe();

    // Nothing may compile from here on.
    let loads = rt.hold_load_compiles();
    std::fs::write(&conf, r#"{"decision": "deny", "reason": "new rules"}"#).context("writing conf")?;
    let digest = wharf_runtime::component::config_digest(&json!({"decision": "deny", "reason": "new rules"}));
    wait_row(&mut events, "plugin/loaded", "pol", |d| d["config"] == json!(digest)).await;
    assert_eq!(deny_reason(&decide(&registry, "pol", "write").await), "new rules");
    assert_eq!(rt.tier_up_pending(), 1, "the tier-up must still be waiting");

    // Released, the tier-up reaches the version now serving.
    drop((loads, tier_up));
    let rt2 = rt.clone();
    let done = tokio::task::spawn_blocking(move || rt2.wait_tier_up(Duration::from_secs(120)))
        .await
        .context("joining the blocking task")?;
    assert!(done, "tier-up did not finish in 120 s");
    let now = host.versions().get("pol").map(|v| v.tier()).unwrap_or_else(|| panic!("not loaded"));
    assert_ne!(now, first_tier, "the tier-up did not reach the reconfigured version");
    assert_eq!(deny_reason(&decide(&registry, "pol", "write").await), "new rules");
    Ok(())
}
