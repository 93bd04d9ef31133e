//! A fleet: two `wharf serve` hosts on one PostgreSQL database (issue 17).
//!
//! - A session created on host A and prompted through host B runs on A
//!   (B stores the input, A logs it), and B's event stream shows A's events.
//! - A killed with `kill -9` mid-turn (inside a blocking tool call): B takes
//!   the session over once A's lease expires, appends the repair (aborted
//!   tool result, `turn/end{interrupted}`), and the session continues with a
//!   prompt through B; B's stream saw every event once, in seq order, and
//!   the log keeps the core invariants. A second session of A, inside a
//!   durable Code Mode program, is taken over too and its program re-run
//!   on B at once: each inner call that had a result is answered from the
//!   log, never run or logged again (issue 38).
//! - The database restarted mid-turn: requests made while it is down fail
//!   with a clear 503, the running turn waits (its appends retry) and
//!   completes, nothing is lost, and the session takes new prompts.
//!
//! A stale writer refused by fencing is shown at the store level:
//! `host/store-pg/tests/pg.rs`, `stale_writer_is_refused_by_fencing`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};
use wharf_core::events::{Event, EventKind, StopReason};
use wharf_tests::pg::{PgServer, ServeHost};

use super::web::{Sse, open_sse};
use wharf_tests::plugins;

/// Lease and renewal of the test hosts (short, so takeovers are quick).
pub const LEASE_MS: u64 = 600;
const RENEW_MS: u64 = 150;

/// The scripted fleet profile: a first user message containing `slow`
/// blocks in a 60 s tool call (to be killed); `restart` streams slowly for
/// about four seconds; anything else runs a short tool call, then answers.
const SCRIPT: &str = r#"
[[plugin.config.branches]]
when = "slow"
[[plugin.config.branches.turns]]
text = "Sleeping in a tool."
tool_calls = [{ name = "sleep", arguments = { ms = 60000 } }]
[[plugin.config.branches.turns]]
text = "Continued after the takeover."

[[plugin.config.branches]]
when = "restart"
[[plugin.config.branches.turns]]
text = "This answer streams slowly, four characters at a time, so that the database can restart while it is being written."
delay_ms = 120
[[plugin.config.branches.turns]]
text = "Second turn after the restart."

[[plugin.config.turns]]
text = "Napping briefly."
tool_calls = [{ name = "sleep", arguments = { ms = 200 } }]
[[plugin.config.turns]]
text = "Done."
"#;

/// A home, a workspace and a profile whose sessions live in one database.
pub struct Fleet {
    pub home: tempfile::TempDir,
    pub ws: tempfile::TempDir,
    pub profile: PathBuf,
    /// The database URL (without Wharf's parameters).
    pub url: String,
}

impl Fleet {
    /// On database `url`, with `extra` Wharf URL parameters.
    pub fn new(url: String, extra: &str) -> Fleet {
        Self::with(url, extra, "", "")
    }

    /// Like [`new`](Self::new), with `rows` before the fleet's plugin rows
    /// and `branches` (scripted-model branches) before its script.
    pub fn with(url: String, extra: &str, rows: &str, branches: &str) -> Fleet {
        let home = tempfile::tempdir().expect("creating a temp dir");
        let ws = tempfile::tempdir().expect("creating a temp dir");
        std::fs::write(ws.path().join("README.md"), "# Fleet\n").expect("writing README.md");
        let _ = wharf_tests::plugin(plugins::EVIL);
        let store = format!("{url}?wharf_lease_ms={LEASE_MS}&wharf_renew_ms={RENEW_MS}{extra}");
        let text = format!(
            r#"
[agent]
adapter = "scripted"
max_steps = 10

[session]
store = "{store}"
{rows}
[[plugin]]
id = "evil"
path = "${{plugin_dir}}/evil.wasm"

[[plugin]]
id = "scripted"
path = "${{plugin_dir}}/llm-scripted.wasm"
[plugin.config]
model = "scripted-fleet"
chunk_size = 4
{branches}{SCRIPT}"#
        );
        let profile = home.path().join("fleet.toml");
        std::fs::write(&profile, text).expect("writing profile");
        Fleet { home, ws, profile, url }
    }

    /// Starts host `name` (extra `wharf serve` arguments in `extra`).
    pub fn host(&self, name: &str, extra: &[&str]) -> ServeHost {
        ServeHost::start(self.home.path(), self.ws.path(), &self.profile, name, extra).expect("starting wharf serve")
    }

    /// A store on the same database, for checks.
    pub fn store(&self) -> wharf_core::SessionStore {
        let options = wharf_store_pg::PgOptions { holder: "test-reader".into(), ..Default::default() };
        wharf_store_pg::store(&self.url, options).expect("opening the store")
    }
}

/// The shared test server, or a skip.
pub fn shared_pg(test: &str) -> Option<&'static PgServer> {
    match PgServer::shared() {
        Ok(pg) => Some(pg),
        Err(reason) => {
            wharf_tests::skip(test, &reason);
            None
        }
    }
}

/// An event stream of `host`.
pub fn events(host: &ServeHost, path: &str) -> Sse {
    let (status, sse) = open_sse(host.port, path, &[("X-Wharf-Token", &host.token)]);
    assert_eq!(status, 200, "{path}");
    sse.unwrap_or_else(|| panic!("no stream"))
}

/// Reads `sse` until an event matches `stop` (included); all events read.
pub fn read_until(sse: &mut Sse, what: &str, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
    let mut out = Vec::new();
    loop {
        let e = sse.next().unwrap_or_else(|| panic!("stream ended waiting for {what}; got {:?}", types(&out)));
        let v = e.json();
        assert_eq!(e.id, v["seq"].as_u64().map(|s| s.to_string()), "SSE id is the seq");
        let done = stop(&v);
        out.push(v);
        if done {
            return out;
        }
    }
}

pub fn types(events: &[Value]) -> Vec<String> {
    events.iter().map(|e| e["type"].as_str().unwrap_or("?").to_string()).collect()
}

pub fn is_type(v: &Value, t: &str) -> bool {
    v["type"] == t
}

/// Whether `v` is a `turn/end` with `reason`.
pub fn turn_end(v: &Value, reason: &str) -> bool {
    v["type"] == "turn/end" && v["data"]["reason"]["kind"].as_str().or(v["data"]["reason"].as_str()) == Some(reason)
}

/// Creates a session on `host` (with a first prompt when `text` is set).
pub fn create(host: &ServeHost, text: Option<&str>) -> String {
    let body = text.map_or(json!({}), |t| json!({ "text": t }));
    let (code, r) = host.call("POST", "/api/sessions", Some(&body));
    assert_eq!(code, 200, "{r}\n{}", host.stderr());
    r["id"].as_str().unwrap_or_else(|| panic!("no id in {r}")).to_string()
}

/// The session's log, checked: seqs 1..n without gaps and the core log
/// invariants.
pub fn checked_log(store: &wharf_core::SessionStore, id: &str) -> Vec<Event> {
    let events = store.load(id).expect("loading the session").events;
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>(), "seqs contiguous");
    wharf_core::invariants::check(&events).expect("checking the log's invariants");
    events
}

/// How many times a user message with `text` was logged, and its inbox item.
pub fn logged_inputs(events: &[Event], text: &str) -> (usize, usize) {
    let users = events.iter().filter(|e| matches!(&e.kind, EventKind::UserMessage(m) if m.content == text)).count();
    let spliced = events
        .iter()
        .filter(|e| {
            matches!(&e.kind, EventKind::InboxSpliced(s)
                if s.text == text && s.op == wharf_core::events::InboxOp::Added)
        })
        .count();
    (users, spliced)
}

/// Waits until `cond` holds (polling), at most `within`.
pub fn wait_for(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn prompt_through_another_host_runs_on_the_owner_and_streams_everywhere() -> anyhow::Result<()> {
    let Some(pg) = shared_pg("fleet::prompt_through_another_host_runs_on_the_owner_and_streams_everywhere") else {
        return Ok(());
    };
    let f = Fleet::new(pg.database().map_err(anyhow::Error::msg).context("creating a database")?, "");
    let a = f.host("a", &[]);
    let b = f.host("b", &[]);
    let id = create(&a, None);
    let mut on_b = events(&b, &format!("/api/sessions/{id}/events?from=1"));
    let (code, r) = b.call("POST", &format!("/api/sessions/{id}/prompt"), Some(&json!({"text": "hello fleet"})));
    assert_eq!(code, 200, "{r}\n{}", b.stderr());
    assert!(r["owner"].as_str().is_some_and(|o| o.ends_with(&format!(":{}", a.pid()))), "routed to A: {r}");
    assert!(r["inbox_id"].as_str().is_some_and(|i| i.starts_with("pg-")), "{r}");
    // B's stream shows the turn A runs, from the header on.
    let streamed = read_until(&mut on_b, "the turn's end", |v| is_type(v, "turn/end"));
    assert!(turn_end(streamed.last().unwrap_or(&Value::Null), "completed"), "{:?}", streamed.last());
    assert_eq!(streamed[0]["type"], "session/start");
    let store = f.store();
    let log = checked_log(&store, &id);
    let seqs: Vec<u64> = streamed.iter().filter_map(|v| v["seq"].as_u64()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "streamed once each, in order");
    assert_eq!(logged_inputs(&log, "hello fleet"), (1, 1), "input logged exactly once");
    // It ran on A: A holds the lease, B never loaded it.
    let lease = store.lease(&id).context("reading the lease")?.unwrap_or_else(|| panic!("no lease"));
    assert!(lease.holder.ends_with(&format!(":{}", a.pid())), "{lease:?}");
    assert_eq!(b.call("GET", &format!("/api/sessions/{id}"), None).1["live"], false);
    assert_eq!(a.call("GET", &format!("/api/sessions/{id}"), None).1["live"], true);
    // History through B is the same log.
    let (code, h) = b.call("GET", &format!("/api/sessions/{id}/history"), None);
    assert_eq!(code, 200, "{h}");
    assert_eq!(h["last_seq"].as_u64(), Some(log.len() as u64));
    // A followup through B, then a prompt through A: each logged once.
    let (code, r) = b.call("POST", &format!("/api/sessions/{id}/followup"), Some(&json!({"text": "third"})));
    assert_eq!(code, 200, "{r}");
    read_until(&mut on_b, "the second turn's end", |v| is_type(v, "turn/end"));
    let (code, _) = a.call("POST", &format!("/api/sessions/{id}/prompt"), Some(&json!({"text": "fourth"})));
    assert_eq!(code, 200);
    read_until(&mut on_b, "the third turn's end", |v| is_type(v, "turn/end"));
    let log = checked_log(&store, &id);
    assert_eq!(logged_inputs(&log, "third"), (1, 1));
    assert_eq!(logged_inputs(&log, "fourth"), (1, 1));
    assert_eq!(log.iter().filter(|e| matches!(e.kind, EventKind::TurnEnd(_))).count(), 3);
    Ok(())
}

/// The `fs` tools and a durable Code Mode row (issue 38): a program a dead
/// host left unfinished is re-run by the host that takes its session over.
fn durable_rows() -> String {
    let _ = wharf_tests::plugin(plugins::FS);
    let _ = wharf_tests::plugin(plugins::CODE);
    "\n[[plugin]]\nid = \"fs\"\npath = \"${plugin_dir}/fs.wasm\"\n[plugin.grant]\ndirs = [\"${workspace}:rw\"]\n\
     \n[[plugin]]\nid = \"code\"\npath = \"${plugin_dir}/code.wasm\"\n[plugin.grant]\ntools = true\n\
     timeout_ms = 120000\ndurable = true\n"
        .to_string()
}

/// A 21-call program: ten writes, a minute's sleep (the host dies in it),
/// ten more writes. (No `${…}` in it: the profile would expand it.)
const DURABLE_PROGRAM: &str = r#"
const put = (i) => tools.write({path: "d" + i + ".txt", content: String(i)});
for (let i = 1; i <= 10; i++) await put(i);
let slow;
try { slow = await tools.sleep({ms: 60000}); } catch (e) { slow = e.code; }
for (let i = 11; i <= 20; i++) await put(i);
return {slow, written: 20};
"#;

/// [`DURABLE_PROGRAM`] in Python, writing `p1.txt` … `p20.txt`.
const DURABLE_PYTHON: &str = r#"
for i in range(1, 11):
    await tools.write(path="p" + str(i) + ".txt", content=str(i))
slow = None
try:
    slow = await tools.sleep(ms=60000)
except RuntimeError as e:
    slow = str(e).split(":")[0]
for i in range(11, 21):
    await tools.write(path="p" + str(i) + ".txt", content=str(i))
{"slow": slow, "written": 20}
"#;

/// The scripted branches of a first message containing `durable` (one
/// `run_code` call, id `call_code`, of [`DURABLE_PROGRAM`]) or `python`
/// (the same of [`DURABLE_PYTHON`]).
fn durable_branch() -> String {
    let branch = |when: &str, language: &str, code: &str| {
        let args = json!({"language": language, "code": code}).to_string();
        format!(
            "\n[[plugin.config.branches]]\nwhen = \"{when}\"\n[[plugin.config.branches.turns]]\n\
             tool_calls = [{{ id = \"call_code\", name = \"run_code\", arguments = {} }}]\n\
             [[plugin.config.branches.turns]]\ntext = \"The program is done.\"\n",
            crate::policy::toml_str(&args)
        )
    };
    format!("{}{}", branch("durable", "javascript", DURABLE_PROGRAM), branch("python", "python", DURABLE_PYTHON))
}

/// The checks of a durable program re-run on the host that took its
/// session over: its turn (the one the crash cut) ends interrupted with the
/// program's result; each of its 21 inner calls is logged once with one
/// result, ten of them before `crash_seq`; the call in flight was
/// answered `INTERRUPTED`; the ten files written before the crash
/// (`PREFIX1.txt` … `PREFIX10.txt`, modified at `written`) were not written
/// again.
fn assert_rerun_program(
    store: &wharf_core::SessionStore,
    sid: &str,
    streamed: &[Value],
    crash_seq: u64,
    ws: &std::path::Path,
    prefix: &str,
    written: &[std::time::SystemTime],
) -> anyhow::Result<()> {
    assert!(turn_end(streamed.last().unwrap_or(&Value::Null), "interrupted"), "{:?}", types(streamed));
    let log: Vec<Value> = checked_log(store, sid).iter().map(|e| serde_json::to_value(e).unwrap_or_default()).collect();
    let seqs: Vec<u64> = streamed.iter().filter_map(|v| v["seq"].as_u64()).collect();
    assert_eq!(seqs, (1..=log.len() as u64).collect::<Vec<_>>(), "B's stream of the program: each event once");
    let of = |ty: &str, call: &str| -> Vec<&Value> {
        log.iter().filter(|e| e["type"] == ty && (e["data"]["id"] == call || e["data"]["call_id"] == call)).collect()
    };
    let inner: Vec<&str> = log
        .iter()
        .filter(|e| e["type"] == "tool/call" && e["data"]["parent"] == "call_code")
        .filter_map(|e| e["data"]["id"].as_str())
        .collect();
    assert_eq!(inner.len(), 21, "ten writes, the sleep, ten writes: {log:#?}");
    let mut before = 0;
    for call in &inner {
        assert_eq!(of("tool/call", call).len(), 1, "{call} logged once: {log:#?}");
        let results = of("tool/result", call);
        assert_eq!(results.len(), 1, "{call} answered once: {log:#?}");
        if results[0]["seq"].as_u64().unwrap_or(u64::MAX) <= crash_seq {
            before += 1;
        }
    }
    assert_eq!(before, 10, "ten results logged by A before the crash: {log:#?}");
    let sleep = log
        .iter()
        .find(|e| is_type(e, "tool/call") && e["data"]["name"] == "sleep")
        .and_then(|e| e["data"]["id"].as_str())
        .unwrap_or_default();
    assert_eq!(of("tool/result", sleep)[0]["data"]["error_code"], "INTERRUPTED", "{log:#?}");
    let replay = log.iter().find(|e| e["type"] == "tool/replay").unwrap_or_else(|| panic!("no tool/replay: {log:#?}"));
    assert_eq!((&replay["data"]["call"], &replay["data"]["logged"]), (&json!("call_code"), &json!(11)), "{replay}");
    let result = of("tool/result", "call_code");
    assert_eq!(result.len(), 1, "{log:#?}");
    let content = result[0]["data"]["content"].as_str().unwrap_or_default();
    assert_eq!(result[0]["data"]["is_error"], false, "{content}");
    assert!(content.contains(r#"result: {"slow":"INTERRUPTED","written":20}"#), "{content}");
    // Each side effect once: the first ten files were not written again.
    for i in 1..=20 {
        let path = ws.join(format!("{prefix}{i}.txt"));
        assert_eq!(std::fs::read_to_string(&path).unwrap_or_default(), i.to_string(), "{prefix}{i}.txt");
        if i <= 10 {
            let mtime = std::fs::metadata(&path).and_then(|m| m.modified()).context("a file's mtime")?;
            assert_eq!(mtime, written[i - 1], "{prefix}{i}.txt was written again");
        }
    }
    Ok(())
}

/// The modification times of `PREFIX1.txt` … `PREFIX10.txt` in `ws`.
fn first_ten(ws: &std::path::Path, prefix: &str) -> anyhow::Result<Vec<std::time::SystemTime>> {
    (1..=10)
        .map(|i| std::fs::metadata(ws.join(format!("{prefix}{i}.txt"))).and_then(|m| m.modified()))
        .collect::<Result<_, _>>()
        .with_context(|| format!("the program's first ten files ({prefix}…)"))
}

/// Three sessions on A when it is killed: one inside a plain tool call, two
/// inside a durable program, one in JavaScript and one in Python (ten of
/// its calls done, the eleventh in flight). B takes them over: the first is
/// repaired, each program is re-run at once (no new input) with its ten
/// logged calls answered from the log, the call in flight an `INTERRUPTED`
/// error the program catches, the other ten run on B; every inner call is
/// logged once with one result.
#[test]
fn kill_9_of_the_owner_mid_turn_then_the_other_host_takes_over() -> anyhow::Result<()> {
    let Some(pg) = shared_pg("fleet::kill_9_of_the_owner_mid_turn_then_the_other_host_takes_over") else {
        return Ok(());
    };
    let url = pg.database().map_err(anyhow::Error::msg).context("creating a database")?;
    let f = Fleet::with(url, "", &durable_rows(), &durable_branch());
    let mut a = f.host("a", &[]);
    let b = f.host("b", &[]);
    let id = create(&a, Some("slow: sleep in a tool"));
    let prog = create(&a, Some("run the durable program"));
    let py = create(&a, Some("run the python program"));
    let mut on_b = events(&b, &format!("/api/sessions/{id}/events?from=1"));
    let mut prog_on_b = events(&b, &format!("/api/sessions/{prog}/events?from=1"));
    let mut py_on_b = events(&b, &format!("/api/sessions/{py}/events?from=1"));
    let mut streamed = read_until(&mut on_b, "the tool call", |v| is_type(v, "tool/call"));
    let is_inner_sleep = |v: &Value| is_type(v, "tool/call") && v["data"]["name"] == "sleep";
    let mut prog_streamed = read_until(&mut prog_on_b, "the program's sleep", is_inner_sleep);
    let mut py_streamed = read_until(&mut py_on_b, "the Python program's sleep", is_inner_sleep);
    // The tools block for a minute: A dies inside them.
    std::thread::sleep(Duration::from_millis(100));
    let written = first_ten(f.ws.path(), "d")?;
    let py_written = first_ten(f.ws.path(), "p")?;
    a.kill9();
    let killed = Instant::now();
    let crash_seq = prog_streamed.last().and_then(|v| v["seq"].as_u64()).unwrap_or(0);
    let py_crash_seq = py_streamed.last().and_then(|v| v["seq"].as_u64()).unwrap_or(0);
    // B takes over once the lease expires and repairs the open turn.
    let repair = read_until(&mut on_b, "the repaired turn end", |v| is_type(v, "turn/end"));
    let took = killed.elapsed();
    assert!(turn_end(repair.last().unwrap_or(&Value::Null), "interrupted"), "{:?}", types(&repair));
    let aborted = repair
        .iter()
        .find(|v| is_type(v, "tool/result"))
        .unwrap_or_else(|| panic!("no aborted result in {:?}", types(&repair)));
    assert_eq!(aborted["data"]["error_code"], "INTERRUPTED", "{aborted}");
    streamed.extend(repair);
    let store = f.store();
    let lease = store.lease(&id).context("reading the lease")?.unwrap_or_else(|| panic!("no lease"));
    assert!(lease.holder.ends_with(&format!(":{}", b.pid())), "B holds it: {lease:?}");
    assert_eq!(lease.token, 2, "one takeover: {lease:?}");
    eprintln!("fleet: takeover {} ms after kill -9 (lease {LEASE_MS} ms)", took.as_millis());

    // Each program finishes on B by itself: its turn ends (interrupted, the
    // turn the crash cut) with the program's result logged.
    prog_streamed.extend(read_until(&mut prog_on_b, "the re-run program's turn end", |v| is_type(v, "turn/end")));
    assert_rerun_program(&store, &prog, &prog_streamed, crash_seq, f.ws.path(), "d", &written)?;
    py_streamed.extend(read_until(&mut py_on_b, "the re-run Python program's turn end", |v| is_type(v, "turn/end")));
    assert_rerun_program(&store, &py, &py_streamed, py_crash_seq, f.ws.path(), "p", &py_written)?;
    let lease = store.lease(&prog).context("reading the lease")?.unwrap_or_else(|| panic!("no lease"));
    assert!(lease.holder.ends_with(&format!(":{}", b.pid())), "B re-ran it: {lease:?}");

    // The first session goes on through B.
    let (code, r) = b.call("POST", &format!("/api/sessions/{id}/prompt"), Some(&json!({"text": "go on"})));
    assert_eq!(code, 200, "{r}\n{}", b.stderr());
    assert!(r.get("owner").is_none(), "B owns it now: {r}");
    streamed.extend(read_until(&mut on_b, "the new turn's end", |v| is_type(v, "turn/end")));
    assert!(turn_end(streamed.last().unwrap_or(&Value::Null), "completed"), "{:?}", streamed.last());
    let log = checked_log(&store, &id);
    let seqs: Vec<u64> = streamed.iter().filter_map(|v| v["seq"].as_u64()).collect();
    assert_eq!(seqs, (1..=log.len() as u64).collect::<Vec<_>>(), "no event lost or repeated on B's stream");
    assert!(log.iter().any(|e| matches!(&e.kind, EventKind::TurnEnd(t) if t.reason == StopReason::Interrupted)));
    assert_eq!(logged_inputs(&log, "go on"), (1, 1));
    Ok(())
}

#[test]
fn database_restart_mid_turn_clear_errors_then_nothing_lost() -> anyhow::Result<()> {
    let test = "fleet::database_restart_mid_turn_clear_errors_then_nothing_lost";
    if wharf_tests::pg::bin_dir().is_none() {
        wharf_tests::skip(test, "PostgreSQL is not installed");
        return Ok(());
    }
    let pg = PgServer::start().map_err(anyhow::Error::msg).context("starting postgres")?;
    // Reads give up after 1 s (a clear error); the writer retries for 30 s.
    let f = Fleet::new(
        pg.database().map_err(anyhow::Error::msg).context("creating a database")?,
        "&wharf_read_retry_ms=1000&wharf_retry_ms=30000",
    );
    let a = f.host("a", &[]);
    let id = create(&a, Some("restart: stream slowly"));
    let mut sse = events(&a, &format!("/api/sessions/{id}/events?from=1"));
    let mut streamed = read_until(&mut sse, "the first chunk", |v| is_type(v, "assistant/chunk"));
    pg.stop().map_err(anyhow::Error::msg).context("stopping postgres")?;
    let down = Instant::now();
    // While it is down: a clear error, quickly.
    let (code, r) = a.call("GET", &format!("/api/sessions/{id}/history"), None);
    assert_eq!(code, 503, "{r}");
    let msg = r["error"].as_str().unwrap_or_default();
    assert!(msg.contains("session store postgres://") && msg.contains("gave up after retrying"), "{msg}");
    let (code, r) = a.call("POST", "/api/sessions", Some(&json!({})));
    assert_eq!(code, 503, "{r}");
    assert!(down.elapsed() < Duration::from_secs(10), "errors took {:?}", down.elapsed());
    std::thread::sleep(Duration::from_millis(2500u64.saturating_sub(down.elapsed().as_millis() as u64)));
    pg.restart_after_stop().map_err(anyhow::Error::msg).context("restarting postgres")?;
    // The turn waited for the database and completes.
    streamed.extend(read_until(&mut sse, "the turn's end", |v| is_type(v, "turn/end")));
    assert!(turn_end(streamed.last().unwrap_or(&Value::Null), "completed"), "{:?}", streamed.last());
    let (code, r) = a.call("POST", &format!("/api/sessions/{id}/prompt"), Some(&json!({"text": "after the restart"})));
    assert_eq!(code, 200, "{r}");
    streamed.extend(read_until(&mut sse, "the second turn's end", |v| is_type(v, "turn/end")));
    let log = checked_log(&f.store(), &id);
    let seqs: Vec<u64> = streamed.iter().filter_map(|v| v["seq"].as_u64()).collect();
    assert_eq!(seqs, (1..=log.len() as u64).collect::<Vec<_>>(), "every streamed event is stored, once");
    assert_eq!(
        log.iter().filter(|e| matches!(&e.kind, EventKind::TurnEnd(t) if t.reason == StopReason::Completed)).count(),
        2
    );
    assert!(a.stderr().contains("retrying"), "the host said it was retrying: {}", a.stderr());
    Ok(())
}

/// The retry budget is per request, not per store operation: reopening an
/// unloaded session while the database is down needs several operations
/// (look the session up, list, take the lease …), and the request still
/// answers 503 after about one budget.
#[test]
fn a_request_while_the_database_is_down_waits_one_budget_not_one_per_operation() -> anyhow::Result<()> {
    let test = "fleet::a_request_while_the_database_is_down_waits_one_budget_not_one_per_operation";
    if wharf_tests::pg::bin_dir().is_none() {
        wharf_tests::skip(test, "PostgreSQL is not installed");
        return Ok(());
    }
    let pg = PgServer::start().map_err(anyhow::Error::msg).context("starting postgres")?;
    let budget = Duration::from_millis(1500);
    let f = Fleet::new(
        pg.database().map_err(anyhow::Error::msg).context("creating a database")?,
        &format!("&wharf_read_retry_ms={}", budget.as_millis()),
    );
    let a = f.host("a", &[]);
    let id = create(&a, None);
    let (code, r) = a.call("POST", &format!("/api/sessions/{id}/unload"), None);
    assert_eq!((code, r["unloaded"].as_bool()), (200, Some(true)), "{r}");
    wait_for("the unload", Duration::from_secs(10), || {
        a.call("GET", &format!("/api/sessions/{id}"), None).1["live"] == false
    });
    pg.stop().map_err(anyhow::Error::msg).context("stopping postgres")?;
    let asked = Instant::now();
    let (code, r) = a.call("POST", &format!("/api/sessions/{id}/resume"), None);
    let took = asked.elapsed();
    assert_eq!(code, 503, "{r}");
    let msg = r["error"].as_str().unwrap_or_default();
    assert!(msg.contains("gave up after retrying"), "{msg}");
    assert!(took < budget * 2, "the request waited {took:?}, more than one budget ({budget:?}) and its slack");
    Ok(())
}
