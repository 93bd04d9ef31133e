//! Tests: sessions on PostgreSQL through the `wharf` binary (issue 17):
//! `wharf run` and `--resume` with `session.store = "postgres://…"`, a
//! `kill -9` mid-turn resumed after the lease expires, and `wharf sessions
//! migrate` JSONL → PostgreSQL → JSONL byte for byte. The backend's own
//! suite (contract, fencing, takeover, restart, inbox, watch) is in
//! `host/store-pg/tests/pg.rs`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::Value;
use wharf_core::events::Event;
use wharf_tests::pg::PgServer;
use wharf_tests::plugins;

struct Env {
    home: tempfile::TempDir,
    ws: tempfile::TempDir,
    url: String,
}

fn env(test: &str) -> Option<Env> {
    let pg = match PgServer::shared() {
        Ok(pg) => pg,
        Err(reason) => {
            wharf_tests::skip(test, &reason);
            return None;
        }
    };
    let url = pg.database().expect("creating a database");
    let home = tempfile::tempdir().expect("creating a temp dir");
    let ws = tempfile::tempdir().expect("creating a temp dir");
    std::fs::write(ws.path().join("README.md"), "# Sample\n\nA sample project.\n").expect("writing README.md");
    Some(Env { home, ws, url })
}

impl Env {
    fn wharf(&self) -> Command {
        let _ = wharf_tests::plugin(plugins::FS);
        let mut c = wharf_tests::wharf(self.home.path());
        c.current_dir(self.ws.path());
        c
    }

    fn profile(&self, name: &str, turns: &str) -> PathBuf {
        let text = format!(
            r#"
[agent]
adapter = "scripted"
max_steps = 10

[session]
store = "{url}"

[[plugin]]
id = "fs"
path = "${{plugin_dir}}/fs.wasm"
[plugin.grant]
dirs = ["${{workspace}}:rw"]

[[plugin]]
id = "scripted"
path = "${{plugin_dir}}/llm-scripted.wasm"
[plugin.config]
model = "scripted-test"
{turns}
"#,
            url = self.url
        );
        let path = self.home.path().join(format!("{name}.toml"));
        std::fs::write(&path, text).expect("writing the file");
        path
    }

    fn run(&self, profile: &Path, task: &str, extra: &[&str]) -> (i32, Vec<Value>, String) {
        let profile = profile.display().to_string();
        let mut args = vec!["run", task, "--profile", &profile, "--output", "jsonl"];
        args.extend_from_slice(extra);
        let out = self.wharf().args(&args).output().expect("running wharf");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let events = stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        (out.status.code().unwrap_or(-1), events, String::from_utf8_lossy(&out.stderr).into_owned())
    }

    /// `wharf sessions --session-dir STORE ARGS…` → stdout.
    fn sessions(&self, store: &str, args: &[&str]) -> String {
        let out = self
            .wharf()
            .args(["sessions", "--session-dir", store])
            .args(args)
            .output()
            .expect("running wharf sessions");
        assert!(out.status.success(), "wharf sessions {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The session's events, read back from the database through the CLI.
    fn log(&self, id: &str) -> Vec<Event> {
        self.sessions(&self.url, &["export", id])
            .lines()
            .map(|l| Event::decode(l).with_context(|| format!("not an event: {l}")).expect("the export is a log"))
            .collect()
    }
}

/// Appends one complete turn.
fn one_turn(log: &wharf_core::SessionLog, text: &str) {
    use wharf_core::events::*;
    let kinds = [
        EventKind::TurnStart(TurnStart { turn: 1 }),
        EventKind::UserMessage(UserMessage { content: text.into(), inbox_id: None, images: vec![] }),
        EventKind::StepStart(StepStart { turn: 1, step: 1 }),
        EventKind::AssistantMessage(AssistantMessage {
            turn: 1,
            step: 1,
            content: format!("re: {text}"),
            reasoning: None,
            tool_calls: vec![],
            usage: None,
            finish: None,
            interrupted: false,
        }),
        EventKind::StepEnd(StepEnd { turn: 1, step: 1, usage: None }),
        EventKind::TurnEnd(TurnEnd { turn: 1, reason: StopReason::Completed }),
    ];
    for k in kinds {
        log.append(k).expect("appending an event");
    }
}

fn session_id(events: &[Value]) -> String {
    events
        .iter()
        .find(|e| e["type"] == "session/start")
        .and_then(|e| e["data"]["id"].as_str())
        .unwrap_or_default()
        .to_string()
}

const TWO_TURNS: &str = r#"
[[plugin.config.turns]]
text = "Reading."
tool_calls = [{ name = "read", arguments = { path = "README.md" } }]

[[plugin.config.turns]]
text = "It is a sample project."

[[plugin.config.turns]]
text = "Still a sample project."
"#;

#[test]
fn run_and_resume_against_postgres() -> anyhow::Result<()> {
    let Some(e) = env("store_pg::run_and_resume_against_postgres") else { return Ok(()) };
    let p = e.profile("pg", TWO_TURNS);
    let (code, events, err) = e.run(&p, "What is this?", &[]);
    assert_eq!(code, 0, "{err}");
    let id = session_id(&events);
    assert!(!id.is_empty(), "{err}");
    let (code, _, err) = e.run(&p, "And now?", &["--resume", &id]);
    assert_eq!(code, 0, "{err}");
    let log = e.log(&id);
    wharf_core::invariants::check(&log).map_err(anyhow::Error::msg).context("checking the log's invariants")?;
    let turns = log.iter().filter(|ev| ev.type_name() == "turn/end").count();
    assert_eq!(turns, 2);
    assert!(log.iter().any(|ev| matches!(&ev.kind, wharf_core::EventKind::UserMessage(m) if m.content == "And now?")));
    // Nothing went to the JSONL directory.
    assert!(!e.home.path().join(".wharf/sessions").join(format!("{id}.jsonl")).exists());
    let list = e.sessions(&e.url, &["list", "--all"]);
    assert!(list.contains(&id), "{list}");
    Ok(())
}

#[test]
fn kill_9_mid_turn_then_resume_after_the_lease_expires() -> anyhow::Result<()> {
    let Some(e) = env("store_pg::kill_9_mid_turn_then_resume_after_the_lease_expires") else { return Ok(()) };
    let turns = r#"
chunk_size = 4

[[plugin.config.turns]]
text = "Reading the file slowly, chunk by chunk, so there is time to kill me."
delay_ms = 150
tool_calls = [{ name = "read", arguments = { path = "README.md" } }]

[[plugin.config.turns]]
text = "Resumed and finished."
"#;
    let p = e.profile("slow", turns);
    let mut child = e
        .wharf()
        .args(["run", "go", "--profile", &p.display().to_string(), "--output", "jsonl"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("spawning wharf run go")?;
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap_or_else(|| panic!("no stdout")));
    let mut id = String::new();
    let t0 = Instant::now();
    loop {
        assert!(t0.elapsed() < Duration::from_secs(60), "run never streamed");
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut stdout, &mut line).unwrap_or(0) == 0 {
            panic!("run ended before streaming");
        }
        let Ok(v) = serde_json::from_str::<Value>(&line) else { continue };
        if v["type"] == "session/start" {
            id = v["data"]["id"].as_str().unwrap_or_default().to_string();
        }
        if v["type"] == "assistant/chunk" {
            break;
        }
    }
    // SAFETY: signalling our own child by its pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
    // The lease (1.5 s) is still live: a resume is refused naming the holder.
    let (code, _, err) = e.run(&p, "continue", &["--resume", &id]);
    if code != 0 {
        assert!(err.contains("is open on"), "{err}");
        std::thread::sleep(Duration::from_millis(2000));
    }
    let (code, _, err) = if code != 0 { e.run(&p, "continue", &["--resume", &id]) } else { (code, vec![], err) };
    assert_eq!(code, 0, "{err}");
    let log = e.log(&id);
    wharf_core::invariants::check(&log).map_err(anyhow::Error::msg).context("checking the log's invariants")?;
    assert!(
        log.iter().any(|ev| matches!(&ev.kind, wharf_core::EventKind::TurnEnd(t) if t.reason == wharf_core::StopReason::Interrupted)),
        "repair closed the killed turn"
    );
    Ok(())
}

#[test]
fn migrate_jsonl_to_postgres_and_back_is_byte_identical() -> anyhow::Result<()> {
    let Some(e) = env("store_pg::migrate_jsonl_to_postgres_and_back_is_byte_identical") else { return Ok(()) };
    let a = e.home.path().join("a");
    let b = e.home.path().join("b");
    // Two sessions in a JSONL directory, written by the store.
    let store = wharf_core::SessionStore::new(&a);
    let mut ids = Vec::new();
    for text in ["first é \"quoted\"", "second \u{1F600}"] {
        let log = store
            .create(wharf_core::store::NewSession { workspace: Some("/w".into()), ..Default::default() })
            .context("creating a session")?;
        one_turn(&log, text);
        ids.push(log.id().to_string());
    }
    let out = e.sessions(&a.display().to_string(), &["migrate", "--to", &e.url]);
    assert!(out.contains("2 copied, 0 skipped"), "{out}");
    // Again: nothing to do.
    let out = e.sessions(&a.display().to_string(), &["migrate", "--to", &e.url]);
    assert!(out.contains("0 copied, 2 skipped"), "{out}");
    let out = e.sessions(&e.url, &["migrate", "--to", &b.display().to_string()]);
    assert!(out.contains("2 copied"), "{out}");
    for id in &ids {
        let f = format!("{id}.jsonl");
        let orig = std::fs::read(a.join(&f)).with_context(|| format!("reading the original {f}"))?;
        let back = std::fs::read(b.join(&f)).with_context(|| format!("reading the migrated {f}"))?;
        assert_eq!(back, orig, "{id}");
    }
    Ok(())
}
