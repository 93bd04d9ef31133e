//! The fleet benchmark (issue 17): sessions on PostgreSQL behind `wharf
//! serve` hosts. A PostgreSQL server is started on loopback for the run
//! (`wharf_tests::pg`, with `fsync` on so commits are durable); writes
//! `target/bench/fleet.{md,json}`. `WHARF_BENCH_QUICK` shrinks every count.
//!
//! 1. **Durable append rate**, in this process: `WHARF_BENCH_FLEET_WRITERS`
//!    (default 8) sessions written at once, each `WHARF_BENCH_FLEET_ROUNDS`
//!    (default 40) rounds of a 16-event batch followed by a flush (durable
//!    on return), into PostgreSQL and into the JSONL store (same disk, same
//!    run): events/s of each and their ratio. Also the rate without a flush
//!    per batch (the default durability of both stores: synced in the
//!    background).
//! 2. **Takeover latency** with the default lease: host A runs a turn
//!    blocked in a tool, A is killed with `SIGKILL`, and the time until host
//!    B holds the session (lease taken, repair appended) is measured, over
//!    `WHARF_BENCH_FLEET_TAKEOVERS` (default 3) kills.
//! 3. **Concurrent sessions over two hosts**: `WHARF_BENCH_FLEET_SESSIONS`
//!    (default 1,000) sessions, created alternately on A and B, each
//!    prompted through the *other* host (stored input routed to the owner),
//!    all at once, against the scripted model (one tool call, then an
//!    answer): turns/s over the wall time, RSS per loaded session on each
//!    host (after minus before), and errors: any failed request, a turn that
//!    did not complete, or a log that breaks the invariants.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use wharf_core::events::{
    AssistantMessage, EventKind, StepEnd, StepStart, StopReason, TurnEnd, TurnStart, UserMessage,
};
use wharf_core::store::{NewSession, SessionStore};
use wharf_store_pg::PgOptions;
use wharf_tests::pg::{PgServer, ServeHost};
use wharf_tests::plugins;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(default)
}

/// One round's batch: a complete turn of 16 events.
fn batch(turn: u64) -> Vec<EventKind> {
    let mut out = vec![
        EventKind::TurnStart(TurnStart { turn }),
        EventKind::UserMessage(UserMessage {
            content: format!("round {turn}: append rate"),
            inbox_id: None,
            images: vec![],
        }),
    ];
    for step in 1..=4u32 {
        out.push(EventKind::StepStart(StepStart { turn, step }));
        out.push(EventKind::AssistantMessage(AssistantMessage {
            turn,
            step,
            content: "x".repeat(120),
            reasoning: None,
            tool_calls: vec![],
            usage: None,
            finish: None,
            interrupted: false,
        }));
        out.push(EventKind::StepEnd(StepEnd { turn, step, usage: None }));
    }
    out.push(EventKind::UserMessage(UserMessage { content: "padding".into(), inbox_id: None, images: vec![] }));
    out.push(EventKind::TurnEnd(TurnEnd { turn, reason: StopReason::Completed }));
    out
}

/// Events per second for `writers` sessions of `rounds` batches at once.
fn append_rate(store: &SessionStore, writers: usize, rounds: usize, durable: bool) -> Result<f64> {
    let logs = (0..writers).map(|_| store.create(NewSession::default())).collect::<Result<Vec<_>, _>>()?;
    let start = Instant::now();
    let handles: Vec<_> = logs
        .into_iter()
        .map(|log| {
            std::thread::spawn(move || -> Result<usize> {
                let mut n = 0;
                for r in 0..rounds {
                    let b = batch(r as u64 + 1);
                    n += b.len();
                    log.append_batch(b)?;
                    if durable {
                        log.flush_blocking()?;
                    }
                }
                log.flush_blocking()?;
                Ok(n)
            })
        })
        .collect();
    let mut total = 0;
    for h in handles {
        total += h.join().map_err(|_| anyhow::anyhow!("writer panicked"))??;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

fn profile(home: &Path, store_url: &str) -> Result<std::path::PathBuf> {
    let text = format!(
        r#"
[agent]
adapter = "scripted"
max_steps = 10

[session]
store = "{store_url}"

[[plugin]]
id = "evil"
path = "${{plugin_dir}}/evil.wasm"

[[plugin]]
id = "scripted"
path = "${{plugin_dir}}/llm-scripted.wasm"
[plugin.config]
model = "scripted-fleet-bench"

[[plugin.config.branches]]
when = "block"
[[plugin.config.branches.turns]]
text = "Blocking in a tool."
tool_calls = [{{ name = "sleep", arguments = {{ ms = 60000 }} }}]

[[plugin.config.turns]]
text = "Looking."
tool_calls = [{{ name = "sleep", arguments = {{ ms = 20 }} }}]
[[plugin.config.turns]]
text = "Done."
"#
    );
    let path = home.join("fleet-bench.toml");
    std::fs::write(&path, text)?;
    Ok(path)
}

fn host(home: &Path, ws: &Path, profile: &Path, name: &str) -> Result<ServeHost> {
    ServeHost::start(home, ws, profile, name, &["--idle-timeout", "0"]).map_err(anyhow::Error::msg)
}

fn post(h: &ServeHost, path: &str, body: Value) -> Result<Value> {
    let (code, r) = h.try_call("POST", path, Some(&body)).map_err(anyhow::Error::msg)?;
    if code != 200 {
        bail!("POST {path}: {code} {r}");
    }
    Ok(r)
}

/// Kill-to-takeover times (ms) with the default lease.
fn takeovers(pg: &PgServer, rounds: usize) -> Result<Vec<f64>> {
    let url = pg.database().map_err(anyhow::Error::msg)?;
    let home = tempfile::tempdir()?;
    let ws = tempfile::tempdir()?;
    let p = profile(home.path(), &url)?;
    let store = wharf_store_pg::store(&url, PgOptions { holder: "bench-reader".into(), ..PgOptions::default() })?;
    let mut b = host(home.path(), ws.path(), &p, "b")?;
    let mut out = Vec::new();
    for i in 0..rounds {
        let mut a = host(home.path(), ws.path(), &p, &format!("a{i}"))?;
        let id =
            post(&a, "/api/sessions", json!({"text": "block in a tool"}))?["id"].as_str().context("no id")?.to_string();
        // Wait until the tool runs (the call is logged).
        let t = Instant::now();
        while !store.load(&id)?.events.iter().any(|e| e.type_name() == "tool/call") {
            if t.elapsed() > Duration::from_secs(60) {
                bail!("the turn never reached its tool call: {}", a.stderr());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        a.kill9();
        let killed = Instant::now();
        let b_holder = format!(":{}", b.pid());
        loop {
            let lease = store.lease(&id)?.context("no lease")?;
            let repaired = lease.holder.ends_with(&b_holder)
                && store.load(&id)?.events.iter().any(|e| matches!(&e.kind, EventKind::TurnEnd(_)));
            if repaired {
                break;
            }
            if killed.elapsed() > Duration::from_secs(30) {
                bail!("B did not take the session over: {}", b.stderr());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        out.push(killed.elapsed().as_secs_f64() * 1000.0);
        // Let B drop it (idle) so the next round starts alike.
        let _ = b.call("POST", &format!("/api/sessions/{id}/unload"), None);
    }
    b.kill9();
    Ok(out)
}

struct Concurrent {
    sessions: usize,
    secs: f64,
    turns_per_s: f64,
    events: usize,
    rss_per_session_kib: [f64; 2],
    rss_kib: [u64; 2],
    errors: Vec<String>,
}

fn concurrent(pg: &PgServer, n: usize) -> Result<Concurrent> {
    let url = pg.database().map_err(anyhow::Error::msg)?;
    let home = tempfile::tempdir()?;
    let ws = tempfile::tempdir()?;
    let p = profile(home.path(), &format!("{url}?wharf_pool=32"))?;
    let hosts = Arc::new([host(home.path(), ws.path(), &p, "a")?, host(home.path(), ws.path(), &p, "b")?]);
    // Warm each host (first agent load) before measuring RSS.
    for h in hosts.iter() {
        post(h, "/api/sessions", json!({}))?;
    }
    std::thread::sleep(Duration::from_millis(500));
    let before = [rss_kib(hosts[0].pid()), rss_kib(hosts[1].pid())];
    let errors = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let ids = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let workers: Vec<_> = (0..32)
        .map(|_| {
            let (hosts, errors, ids, next) = (hosts.clone(), errors.clone(), ids.clone(), next.clone());
            std::thread::spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= n {
                        return;
                    }
                    let (owner, other) = (&hosts[i % 2], &hosts[(i + 1) % 2]);
                    let r = post(owner, "/api/sessions", json!({})).and_then(|r| {
                        let id = r["id"].as_str().context("no id")?.to_string();
                        post(other, &format!("/api/sessions/{id}/prompt"), json!({"text": format!("session {i}")}))?;
                        Ok(id)
                    });
                    match r {
                        Ok(id) => ids.lock().unwrap_or_else(|e| e.into_inner()).push(id),
                        Err(e) => errors.lock().unwrap_or_else(|e| e.into_inner()).push(format!("{e:#}")),
                    }
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
    let ids: Vec<String> = ids.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let store = wharf_store_pg::store(&url, PgOptions { holder: "bench-reader".into(), ..PgOptions::default() })?;
    // Wait until every turn ended.
    let mut pending: Vec<String> = ids.clone();
    let deadline = Instant::now() + Duration::from_secs(600);
    while !pending.is_empty() && Instant::now() < deadline {
        pending.retain(|id| {
            store.load(id).map(|l| !l.events.iter().any(|e| matches!(e.kind, EventKind::TurnEnd(_)))).unwrap_or(true)
        });
        if !pending.is_empty() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let after = [rss_kib(hosts[0].pid()), rss_kib(hosts[1].pid())];
    let mut errors = errors.lock().unwrap_or_else(|e| e.into_inner()).clone();
    for id in &pending {
        errors.push(format!("session {id}: no turn end after 600 s"));
    }
    let mut events = 0;
    for id in &ids {
        match store.load(id) {
            Ok(l) => {
                events += l.events.len();
                if let Err(v) = wharf_core::invariants::check(&l.events) {
                    errors.push(format!("session {id}: {v:?}"));
                }
                let completed = l
                    .events
                    .iter()
                    .any(|e| matches!(&e.kind, EventKind::TurnEnd(t) if t.reason == StopReason::Completed));
                if !completed && !pending.contains(id) {
                    errors.push(format!("session {id}: the turn did not complete"));
                }
            }
            Err(e) => errors.push(format!("session {id}: {e}")),
        }
    }
    let per_host = (n as f64 / 2.0).max(1.0);
    let rss_per = [0, 1].map(|i| after[i].saturating_sub(before[i]) as f64 / per_host);
    Ok(Concurrent {
        sessions: ids.len(),
        secs,
        turns_per_s: (ids.len() - pending.len()) as f64 / secs,
        events,
        rss_per_session_kib: rss_per,
        rss_kib: after,
        errors,
    })
}

pub fn main() -> Result<()> {
    let quick = std::env::var_os("WHARF_BENCH_QUICK").is_some();
    let writers = env_usize("WHARF_BENCH_FLEET_WRITERS", 8);
    let rounds = env_usize("WHARF_BENCH_FLEET_ROUNDS", if quick { 10 } else { 40 });
    let kills = env_usize("WHARF_BENCH_FLEET_TAKEOVERS", if quick { 1 } else { 3 });
    let sessions = env_usize("WHARF_BENCH_FLEET_SESSIONS", if quick { 100 } else { 1000 });
    let out_dir = wharf_tests::target_dir().join("bench");
    std::fs::create_dir_all(&out_dir)?;
    let _ = wharf_tests::plugin(plugins::EVIL);
    let pg = PgServer::start_durable().map_err(anyhow::Error::msg).context("starting PostgreSQL")?;

    // 1. Append rates.
    let tmp = tempfile::tempdir()?;
    let jsonl = SessionStore::new(tmp.path().join("sessions"));
    let db = wharf_store_pg::store(&pg.database().map_err(anyhow::Error::msg)?, PgOptions::default())?;
    let jsonl_durable = append_rate(&jsonl, writers, rounds, true)?;
    let pg_durable = append_rate(&db, writers, rounds, true)?;
    let jsonl_bg = append_rate(&jsonl, writers, rounds, false)?;
    let pg_bg = append_rate(&db, writers, rounds, false)?;
    eprintln!("fleet: append rates done");

    // 2. Takeover latency with the default lease.
    let lease_ms = PgOptions::default().lease.as_millis();
    let mut took = takeovers(&pg, kills)?;
    took.sort_by(f64::total_cmp);
    let median = took.get(took.len() / 2).copied().unwrap_or(f64::NAN);
    let worst = took.last().copied().unwrap_or(f64::NAN);
    eprintln!("fleet: takeovers {took:?} ms");

    // 3. Concurrent sessions over two hosts.
    let c = concurrent(&pg, sessions)?;
    eprintln!("fleet: {} sessions in {:.1} s, {} errors", c.sessions, c.secs, c.errors.len());

    let md = format!(
        "PostgreSQL {pgver} on loopback (`fsync` on), the JSONL store on the same disk, same run.\n\n\
| measure | value |\n|---|---|\n\
| durable appends, PostgreSQL ({writers} sessions × {rounds} batches of 16, flush after each) | {pg_durable:.0} events/s |\n\
| durable appends, JSONL (same) | {jsonl_durable:.0} events/s |\n\
| **ratio PostgreSQL / JSONL, durable** | **{r1:.2}** |\n\
| appends synced in the background, PostgreSQL | {pg_bg:.0} events/s |\n\
| appends synced in the background, JSONL | {jsonl_bg:.0} events/s |\n\
| ratio PostgreSQL / JSONL, background sync | {r2:.2} |\n\
| takeover after `kill -9`, default lease {lease_ms} ms (median / worst of {kills}) | {median:.0} / {worst:.0} ms (target ≤ 2000) |\n\
| concurrent sessions over two hosts (created on one, prompted through the other) | {sessions_done} |\n\
| wall time, first request → last turn end | {secs:.1} s |\n\
| turns/s | {tps:.1} |\n\
| events logged | {events} |\n\
| RSS per loaded session, host A / B | {ra:.0} / {rb:.0} KiB |\n\
| RSS at the end, host A / B | {fa} / {fb} MiB |\n\
| errors | {nerr} |\n",
        pgver = pg.version(),
        r1 = pg_durable / jsonl_durable,
        r2 = pg_bg / jsonl_bg,
        sessions_done = c.sessions,
        secs = c.secs,
        tps = c.turns_per_s,
        events = c.events,
        ra = c.rss_per_session_kib[0],
        rb = c.rss_per_session_kib[1],
        fa = c.rss_kib[0] / 1024,
        fb = c.rss_kib[1] / 1024,
        nerr = c.errors.len(),
    );
    let json = json!({
        "append": {
            "writers": writers, "rounds": rounds, "batch": 16,
            "durable_events_per_s": {"postgres": pg_durable, "jsonl": jsonl_durable, "ratio": pg_durable / jsonl_durable},
            "background_events_per_s": {"postgres": pg_bg, "jsonl": jsonl_bg, "ratio": pg_bg / jsonl_bg},
        },
        "takeover_ms": {"lease_ms": lease_ms as u64, "all": took, "median": median, "worst": worst, "target": 2000},
        "concurrent": {
            "sessions": c.sessions, "secs": c.secs, "turns_per_s": c.turns_per_s, "events": c.events,
            "rss_per_session_kib": c.rss_per_session_kib, "rss_end_kib": c.rss_kib,
            "errors": c.errors.len(), "first_errors": c.errors.iter().take(5).collect::<Vec<_>>(),
        },
    });
    std::fs::write(out_dir.join("fleet.md"), &md)?;
    std::fs::write(out_dir.join("fleet.json"), serde_json::to_string_pretty(&json)?)?;
    println!("{md}");
    if !c.errors.is_empty() {
        bail!("{} errors, first: {:?}", c.errors.len(), c.errors.iter().take(5).collect::<Vec<_>>());
    }
    Ok(())
}
