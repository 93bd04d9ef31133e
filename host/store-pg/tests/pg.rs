//! The PostgreSQL backend against a real server started on loopback
//! (`wharf_tests::pg`): the whole store contract, leases and fencing,
//! takeover with repair, a database restart, the shared inbox, watching
//! another writer, copies JSONL → PostgreSQL → JSONL, and the group commit
//! of many sessions' appends (`wharf_append_many`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::sync::mpsc;
use wharf_core::events::{EventKind, InboxKind, TurnStart};
use wharf_core::store::conformance::{self, OPEN_TURN_REPAIRS, turn, types, user};
use wharf_core::store::{NewSession, SessionStore, StoreError};
use wharf_store_pg::PgOptions;
use wharf_tests::pg::PgServer;

fn server(test: &str) -> Option<&'static PgServer> {
    match PgServer::shared() {
        Ok(s) => Some(s),
        Err(reason) => {
            wharf_tests::skip(test, &reason);
            None
        }
    }
}

fn pg_store(url: &str, options: PgOptions) -> SessionStore {
    wharf_store_pg::store(url, options).expect("opening the store")
}

/// Options of a host whose lease is short and never renewed in the
/// background (as if paused), so tests decide when it expires.
fn paused(holder: &str) -> PgOptions {
    PgOptions {
        lease: Duration::from_millis(300),
        renew_every: Duration::from_secs(3600),
        holder: holder.into(),
        ..PgOptions::default()
    }
}

fn recv_within<T>(rx: &mut mpsc::UnboundedReceiver<T>, within: Duration) -> Option<T> {
    let end = Instant::now() + within;
    loop {
        if let Ok(v) = rx.try_recv() {
            return Some(v);
        }
        if Instant::now() >= end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn postgres_backend_keeps_the_store_contract() {
    let Some(pg) = server("postgres_backend_keeps_the_store_contract") else { return };
    conformance::run_all(&|| pg_store(&pg.database().unwrap(), PgOptions::default()));
}

#[test]
fn open_while_leased_names_the_holder() {
    let Some(pg) = server("open_while_leased_names_the_holder") else { return };
    let url = pg.database().unwrap();
    let a = pg_store(&url, PgOptions { holder: "host-a:1".into(), ..PgOptions::default() });
    let b = pg_store(&url, PgOptions { holder: "host-b:2".into(), ..PgOptions::default() });
    let log = a.create(NewSession::default()).unwrap();
    let err = b.open(log.id()).unwrap_err();
    assert!(matches!(&err, StoreError::Leased { holder, .. } if holder == "host-a:1"), "{err}");
    assert!(err.to_string().contains("is open on host-a:1"), "{err}");
    // The lease is renewed in the background: still held after several
    // lease lengths.
    std::thread::sleep(Duration::from_millis(3200));
    assert!(matches!(b.open(log.id()), Err(StoreError::Leased { .. })));
    let lease = b.lease(log.id()).unwrap().unwrap();
    assert_eq!((lease.holder.as_str(), lease.token), ("host-a:1", 1));
    assert!(lease.expires_in_ms.is_some());
    // Released on drop: another host opens at once, with the next token.
    let id = log.id().to_string();
    drop(log);
    assert_eq!(b.lease(&id).unwrap().unwrap().expires_in_ms, None);
    let (_log, _) = b.open(&id).unwrap();
    assert_eq!(b.lease(&id).unwrap().unwrap().token, 2);
}

#[test]
fn stale_writer_is_refused_by_fencing() {
    let Some(pg) = server("stale_writer_is_refused_by_fencing") else { return };
    let url = pg.database().unwrap();
    let a = pg_store(&url, paused("host-a:1"));
    let b = pg_store(&url, paused("host-b:2"));
    let log_a = a.create(NewSession::default()).unwrap();
    turn(&log_a, 1, "from a");
    let id = log_a.id().to_string();
    std::thread::sleep(Duration::from_millis(400)); // A's lease expires (A is "paused").
    let (log_b, report) = b.open(&id).unwrap();
    assert!(report.repairs.is_empty());
    let err = log_a.append(user("late write from a")).unwrap_err();
    assert!(matches!(err, StoreError::Fenced { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("host-b:2 holds it with fencing token 2, this writer had 1"), "{msg}");
    assert!(matches!(log_a.flush_blocking(), Err(StoreError::Fenced { .. })));
    turn(&log_b, 2, "from b");
    drop(log_a); // A's release does not touch B's lease.
    assert_eq!(b.lease(&id).unwrap().unwrap().token, 2);
    let loaded = b.load(&id).unwrap();
    assert_eq!(loaded.events.len(), 13);
    assert!(!loaded.lines.iter().any(|l| l.contains("late write")));
    wharf_core::invariants::check(&loaded.events).unwrap();
    drop(log_b);
}

#[test]
fn takeover_after_expiry_runs_crash_repair() {
    let Some(pg) = server("takeover_after_expiry_runs_crash_repair") else { return };
    let url = pg.database().unwrap();
    let a = pg_store(&url, paused("host-a:1"));
    let b = pg_store(&url, paused("host-b:2"));
    let log = a.create(NewSession::default()).unwrap();
    conformance::open_turn_with_calls(&log);
    let id = log.id().to_string();
    let before = b.load(&id).unwrap().lines;
    // A dies mid-turn: no release, no renewal.
    std::mem::forget(log);
    assert!(matches!(b.open(&id), Err(StoreError::Leased { .. })));
    let start = Instant::now();
    let (log_b, report) = loop {
        match b.open(&id) {
            Ok(r) => break r,
            Err(StoreError::Leased { .. }) if start.elapsed() < Duration::from_secs(5) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(types(&report.repairs), OPEN_TURN_REPAIRS);
    turn(&log_b, 2, "continued on b");
    drop(log_b);
    let after = b.load(&id).unwrap();
    assert!(after.lines.starts_with(&before), "history was rewritten");
    wharf_core::invariants::check(&after.events).unwrap();
}

#[test]
fn database_restart_mid_session_loses_nothing() -> anyhow::Result<()> {
    let test = "database_restart_mid_session_loses_nothing";
    if wharf_tests::pg::bin_dir().is_none() {
        wharf_tests::skip(test, "PostgreSQL is not installed");
        return Ok(());
    }
    let pg = Arc::new(PgServer::start().map_err(anyhow::Error::msg).context("starting postgres")?);
    let store = pg_store(&pg.url(), PgOptions { retry_for: Duration::from_secs(30), ..PgOptions::default() });
    let log = store.create(NewSession::default()).unwrap();
    turn(&log, 1, "before");
    log.flush_blocking().unwrap();

    // Down briefly: appends wait (retrying) and then succeed.
    pg.stop().unwrap();
    let pg2 = pg.clone();
    let restarter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        pg2.restart_after_stop().unwrap();
    });
    let t0 = Instant::now();
    turn(&log, 2, "during");
    assert!(t0.elapsed() >= Duration::from_millis(1000), "the append did not wait for the server");
    restarter.join().unwrap();

    // Down longer than the retry window: a clear error, nothing half-written,
    // and the same seq is used once the server is back.
    let short = pg_store(&pg.url(), PgOptions { retry_for: Duration::from_millis(500), ..PgOptions::default() });
    let log2 = short.create(NewSession::default()).unwrap();
    pg.stop().unwrap();
    let err = log2.append(user("lost?")).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, StoreError::Unavailable { .. }), "{msg}");
    assert!(msg.contains("appending event 2 (user/message)") && msg.contains("gave up after retrying"), "{msg}");
    pg.restart_after_stop().unwrap();
    assert_eq!(log2.append(user("again")).unwrap().seq, 2);
    turn(&log, 3, "after");
    let (id, id2) = (log.id().to_string(), log2.id().to_string());
    drop(log);
    drop(log2);
    let loaded = store.load(&id).unwrap();
    assert_eq!(loaded.events.len(), 19);
    wharf_core::invariants::check(&loaded.events).unwrap();
    let seqs: Vec<u64> = loaded.events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=19).collect::<Vec<_>>());
    assert_eq!(store.load(&id2).unwrap().events.len(), 2);
    Ok(())
}

#[test]
fn input_sent_to_any_host_reaches_the_owner() {
    let Some(pg) = server("input_sent_to_any_host_reaches_the_owner") else { return };
    let url = pg.database().unwrap();
    let owner = pg_store(&url, PgOptions::default());
    let other = pg_store(&url, PgOptions::default());
    let log = owner.create(NewSession::default()).unwrap();
    let early = other.push_input(log.id(), InboxKind::Followup, "queued before").unwrap();
    let mut inputs = log.take_inputs().unwrap();
    assert!(log.take_inputs().is_none());
    let got = recv_within(&mut inputs, Duration::from_secs(5)).expect("pending input");
    assert_eq!((got.id.as_str(), got.kind, got.text.as_str()), (early.as_str(), InboxKind::Followup, "queued before"));
    log.ack_input(&got.id).unwrap();
    let t0 = Instant::now();
    let live = other.push_input(log.id(), InboxKind::Steer, "steer now").unwrap();
    let got = recv_within(&mut inputs, Duration::from_secs(5)).expect("live input");
    assert_eq!((got.id.as_str(), got.kind), (live.as_str(), InboxKind::Steer));
    assert!(t0.elapsed() < Duration::from_secs(1), "woken by NOTIFY, not the poll: {:?}", t0.elapsed());
    assert!(matches!(other.push_input("nope", InboxKind::Steer, "x"), Err(StoreError::NotFound(_))));
    // Unacknowledged input is delivered again to the next owner.
    let id = log.id().to_string();
    drop(inputs);
    drop(log);
    let (log, _) = other.open(&id).unwrap();
    let mut inputs = log.take_inputs().unwrap();
    let again = recv_within(&mut inputs, Duration::from_secs(5)).expect("redelivered");
    assert_eq!(again.id, live);
    assert!(recv_within(&mut inputs, Duration::from_millis(300)).is_none());
}

#[test]
fn input_whose_notification_was_missed_is_found_by_the_hosts_poll() {
    let Some(pg) = server("input_whose_notification_was_missed_is_found_by_the_hosts_poll") else { return };
    let url = pg.database().unwrap();
    let db = db_name(&url).to_string();
    let owner = pg_store(&url, PgOptions::default());
    // Many sessions with an input stream on one host: one poll serves all.
    let logs: Vec<_> = (0..30).map(|_| owner.create(NewSession::default()).unwrap()).collect();
    let mut streams: Vec<_> = logs.iter().map(|l| l.take_inputs().unwrap()).collect();
    std::thread::sleep(Duration::from_millis(200));
    // A row stored without `pg_notify`, as if the listener had been down.
    let target = logs[17].id().to_string();
    pg.psql(
        &db,
        &format!("INSERT INTO wharf_inbox (session_id, kind, body) VALUES ('{target}', 'followup', 'missed')"),
    )
    .unwrap();
    let got = recv_within(&mut streams[17], Duration::from_secs(6)).expect("input found by the poll");
    assert_eq!((got.kind, got.text.as_str()), (InboxKind::Followup, "missed"));
    // Nobody else was handed anything.
    for (i, s) in streams.iter_mut().enumerate().filter(|(i, _)| *i != 17) {
        assert!(s.try_recv().is_err(), "session {i} got input");
    }
}

#[test]
fn async_appends_of_many_sessions_land_in_order_and_a_cancelled_one_still_lands() {
    let Some(pg) = server("async_appends_of_many_sessions_land_in_order_and_a_cancelled_one_still_lands") else {
        return;
    };
    let url = pg.database().unwrap();
    let store = pg_store(&url, PgOptions::default());
    // One worker: sessions appending at once share it, as on a busy host.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let logs: Vec<_> = (0..16).map(|_| store.create(NewSession::default()).unwrap()).collect();
    let mut subs: Vec<_> = logs.iter().map(|l| l.subscribe()).collect();
    rt.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        for (n, log) in logs.iter().enumerate() {
            let log = log.clone();
            tasks.spawn(async move {
                for i in 0..12 {
                    let ev = log.append_async(user(&format!("{n}/{i}"))).await.unwrap();
                    // Applied when it returns: the state already has it.
                    assert_eq!(log.last_seq(), ev.seq);
                }
            });
        }
        while let Some(r) = tasks.join_next().await {
            r.unwrap();
        }
    });
    for (n, (log, sub)) in logs.iter().zip(subs.iter_mut()).enumerate() {
        let stored = store.load(log.id()).unwrap().events;
        let texts: Vec<String> = stored
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::UserMessage(u) => Some(u.content.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(texts, (0..12).map(|i| format!("{n}/{i}")).collect::<Vec<_>>());
        let seqs: Vec<u64> = stored.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=13).collect::<Vec<_>>(), "consecutive, header first");
        // Every subscriber saw each appended event once.
        let mut seen = Vec::new();
        while let Ok(ev) = sub.try_recv() {
            seen.push(ev.seq);
        }
        assert_eq!(seen, (2..=13).collect::<Vec<_>>());
    }
    // A caller that gives up while its append is in flight: the append
    // still ends and is applied; the next append follows it.
    let log = logs[0].clone();
    rt.block_on(async {
        let pending = log.append_async(user("abandoned"));
        // Polled once (handed to the database's thread), then dropped.
        let _ = tokio::time::timeout(Duration::ZERO, pending).await;
    });
    let next = rt.block_on(log.append_async(user("after"))).unwrap();
    assert_eq!(next.seq, 15, "the abandoned append took seq 14");
    let tail: Vec<String> = store.load(log.id()).unwrap().events[13..]
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::UserMessage(u) => Some(u.content.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(tail, ["abandoned", "after"]);
    // A synchronous append after the async ones continues the log.
    assert_eq!(log.append(user("sync")).unwrap().seq, 16);
}

#[test]
fn another_host_watches_the_writers_events() {
    let Some(pg) = server("another_host_watches_the_writers_events") else { return };
    let url = pg.database().unwrap();
    let writer = pg_store(&url, PgOptions::default());
    let reader = pg_store(&url, PgOptions::default());
    let log = writer.create(NewSession::default()).unwrap();
    log.append(user("one")).unwrap();
    let mut rx = reader.watch(log.id(), 2).unwrap();
    assert_eq!(recv_within(&mut rx, Duration::from_secs(5)).unwrap().seq, 2);
    let t0 = Instant::now();
    log.append(EventKind::TurnStart(TurnStart { turn: 1 })).unwrap();
    let ev = recv_within(&mut rx, Duration::from_secs(5)).unwrap();
    assert_eq!(ev.seq, 3);
    assert!(t0.elapsed() < Duration::from_secs(1), "woken by NOTIFY, not the poll: {:?}", t0.elapsed());
    log.append_batch(vec![user("a"), user("b")]).unwrap();
    let seqs: Vec<u64> = (0..2).map(|_| recv_within(&mut rx, Duration::from_secs(5)).unwrap().seq).collect();
    assert_eq!(seqs, vec![4, 5]);
    assert!(recv_within(&mut rx, Duration::from_millis(200)).is_none(), "no duplicates");
    // The watch is registered while it runs (appends to it are announced)
    // and removed when it ends.
    let db = db_name(&url);
    let rows = || {
        pg.psql(db, &format!("SELECT count(*) FROM wharf_watches WHERE session_id = '{}'", log.id()))
            .unwrap()
            .trim()
            .to_string()
    };
    assert_eq!(rows(), "1");
    drop(rx);
    let t0 = Instant::now();
    while rows() != "0" {
        assert!(t0.elapsed() < Duration::from_secs(5), "the ended watch's row is still there");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn copy_jsonl_to_postgres_and_back_is_byte_identical() {
    let Some(pg) = server("copy_jsonl_to_postgres_and_back_is_byte_identical") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let src = SessionStore::new(tmp.path().join("a"));
    let log = src.create(NewSession { workspace: Some("/w".into()), ..Default::default() }).unwrap();
    turn(&log, 1, "héllo \"quoted\" \u{1F600}");
    log.append_ignorable("x/plugin", serde_json::json!({"nested": {"k": [1, 2.5, null]}})).unwrap();
    turn(&log, 2, "second");
    let id = log.id().to_string();
    let path = std::path::PathBuf::from(log.describe());
    drop(log);
    let db = pg_store(&pg.database().unwrap(), PgOptions::default());
    drop(db.import(&src.load(&id).unwrap().lines).unwrap());
    let back = SessionStore::new(tmp.path().join("b"));
    drop(back.import(&db.load(&id).unwrap().lines).unwrap());
    assert_eq!(std::fs::read(tmp.path().join("b").join(format!("{id}.jsonl"))).unwrap(), std::fs::read(&path).unwrap());
    let listed = db.list().unwrap();
    assert_eq!(listed[0].bytes, std::fs::metadata(&path).unwrap().len());
}

#[test]
fn logging_stored_input_acknowledges_it_and_orphans_are_found() {
    use wharf_core::events::{InboxOp, InboxSpliced};
    let Some(pg) = server("logging_stored_input_acknowledges_it_and_orphans_are_found") else { return };
    let url = pg.database().unwrap();
    let a = pg_store(&url, paused("host-a:1"));
    // Wharf's URL parameters are taken out of the URL and applied.
    let b = pg_store(
        &format!("{url}?wharf_lease_ms=300&wharf_renew_ms=3600000&wharf_append_group=8&wharf_append_workers=1"),
        PgOptions::default(),
    );
    assert!(matches!(
        wharf_store_pg::store(&format!("{url}?wharf_nope=1"), PgOptions::default()),
        Err(StoreError::Unavailable { detail, .. }) if detail.contains("wharf_nope")
    ));
    let log = a.create(NewSession::default()).unwrap();
    let id = log.id().to_string();
    let mut inputs = log.take_inputs().unwrap();
    b.push_input(&id, InboxKind::Followup, "one").unwrap();
    let got = recv_within(&mut inputs, Duration::from_secs(5)).expect("input");
    // Logging it (no ack_input call) marks it delivered in the same append.
    log.append(EventKind::InboxSpliced(InboxSpliced {
        op: InboxOp::Added,
        id: "local-1".into(),
        kind: got.kind,
        text: got.text,
    }))
    .unwrap();
    b.push_input(&id, InboxKind::Steer, "two").unwrap();
    assert_eq!(recv_within(&mut inputs, Duration::from_secs(5)).expect("second").text, "two");
    assert!(b.backend().orphans(10).unwrap().is_empty(), "held: not an orphan");
    // A dies: once its lease expires the session is an orphan.
    std::mem::forget(log);
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(b.backend().orphans(10).unwrap(), vec![id.clone()]);
    let (log_b, _) = b.open(&id).unwrap();
    assert!(b.backend().orphans(10).unwrap().is_empty());
    let mut inputs_b = log_b.take_inputs().unwrap();
    // Only the unlogged item is delivered again.
    assert_eq!(recv_within(&mut inputs_b, Duration::from_secs(5)).expect("redelivered").text, "two");
    assert!(recv_within(&mut inputs_b, Duration::from_millis(300)).is_none());
    // Released with input waiting: an orphan too (nobody will read it).
    drop(inputs_b);
    drop(log_b);
    assert_eq!(b.backend().orphans(10).unwrap(), vec![id.clone()]);

    // A writer that loses the session sees its input stream end.
    let log = a.create(NewSession::default()).unwrap();
    let id = log.id().to_string();
    let mut inputs = log.take_inputs().unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let (_taken, _) = b.open(&id).unwrap();
    assert!(matches!(log.append(user("late")), Err(StoreError::Fenced { .. })));
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        match inputs.try_recv() {
            Err(mpsc::error::TryRecvError::Disconnected) => break,
            _ if Instant::now() > end => panic!("the input stream did not end"),
            _ => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// Group commit: many sessions appending at once from their own threads
/// share `wharf_append_many` calls; every log ends complete and in order,
/// with the right size, and another host's watchers are woken by the
/// multi-session notifications.
#[test]
fn concurrent_sessions_are_group_committed_in_order() {
    let Some(pg) = server("concurrent_sessions_are_group_committed_in_order") else { return };
    let url = pg.database().unwrap();
    // A small pool: two workers, so appends queue up and share calls.
    let writer = pg_store(&url, PgOptions { pool_size: 4, ..PgOptions::default() });
    let reader = pg_store(&url, PgOptions::default());
    const SESSIONS: usize = 40;
    const ROUNDS: usize = 20;
    let logs: Vec<_> = (0..SESSIONS).map(|_| writer.create(NewSession::default()).unwrap()).collect();
    let mut watchers: Vec<_> = logs.iter().map(|l| reader.watch(l.id(), 1).unwrap()).collect();
    let barrier = Arc::new(std::sync::Barrier::new(SESSIONS + 1));
    let threads: Vec<_> = logs
        .iter()
        .enumerate()
        .map(|(i, log)| {
            let (log, barrier) = (log.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                for r in 0..ROUNDS {
                    if r % 2 == 0 {
                        log.append(user(&format!("s{i} r{r}"))).unwrap();
                    } else {
                        log.append_batch(vec![user(&format!("s{i} r{r} a")), user(&format!("s{i} r{r} b"))]).unwrap();
                    }
                }
                // The last event together: the watchers must hear of it
                // from the notifications, not the poll.
                barrier.wait();
                log.append(user(&format!("s{i} last"))).unwrap();
            })
        })
        .collect();
    barrier.wait();
    barrier.wait();
    for t in threads {
        t.join().unwrap();
    }
    let done = Instant::now();
    let last = 1 + ROUNDS / 2 + 2 * (ROUNDS / 2) + 1;
    for (i, rx) in watchers.iter_mut().enumerate() {
        let mut seqs = Vec::new();
        while seqs.last() != Some(&(last as u64)) {
            let left = Duration::from_secs(1).saturating_sub(done.elapsed());
            match recv_within(rx, left) {
                Some(ev) => seqs.push(ev.seq),
                None => panic!("watcher {i} stopped at {seqs:?} ({:?} after the last append)", done.elapsed()),
            }
        }
        assert_eq!(seqs, (1..=last as u64).collect::<Vec<_>>(), "watcher {i}");
    }
    let listed = reader.list().unwrap();
    for (i, log) in logs.iter().enumerate() {
        let loaded = reader.load(log.id()).unwrap();
        let seqs: Vec<u64> = loaded.events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=last as u64).collect::<Vec<_>>(), "session {i}");
        let texts: Vec<String> = loaded
            .events
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::UserMessage(m) => Some(m.content.clone()),
                _ => None,
            })
            .collect();
        let mut want = Vec::new();
        for r in 0..ROUNDS {
            if r % 2 == 0 {
                want.push(format!("s{i} r{r}"));
            } else {
                want.push(format!("s{i} r{r} a"));
                want.push(format!("s{i} r{r} b"));
            }
        }
        want.push(format!("s{i} last"));
        assert_eq!(texts, want, "session {i}");
        let bytes: usize = loaded.lines.iter().map(|l| l.len() + 1).sum();
        let summary = listed.iter().find(|s| s.id == log.id()).unwrap();
        assert_eq!(summary.bytes, bytes as u64, "session {i}");
        assert_eq!(writer.lease(log.id()).unwrap().unwrap().token, 1);
    }
}

/// A session taken over by another host while its old writer appends
/// alongside healthy sessions of the same host: only that writer is
/// fenced; the others' appends commit.
#[test]
fn a_fenced_session_fails_alone_in_a_group() {
    let Some(pg) = server("a_fenced_session_fails_alone_in_a_group") else { return };
    let url = pg.database().unwrap();
    let a = pg_store(&url, PgOptions { pool_size: 2, ..paused("host-a:1") });
    let b = pg_store(&url, paused("host-b:2"));
    const SESSIONS: usize = 12;
    let logs: Vec<_> = (0..SESSIONS).map(|_| a.create(NewSession::default()).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(400)); // A's leases expire (nobody takes the healthy ones).
    let (taken, _) = b.open(logs[0].id()).unwrap();
    let barrier = Arc::new(std::sync::Barrier::new(SESSIONS));
    let threads: Vec<_> = logs
        .iter()
        .map(|log| {
            let (log, barrier) = (log.clone(), barrier.clone());
            std::thread::spawn(move || {
                (0..5)
                    .map(|r| {
                        barrier.wait();
                        log.append(user(&format!("r{r}"))).map(|e| e.seq)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for r in &results[0] {
        let err = r.as_ref().unwrap_err();
        assert!(matches!(err, StoreError::Fenced { .. }), "{err}");
        assert!(err.to_string().contains("host-b:2 holds it with fencing token 2, this writer had 1"), "{err}");
    }
    for (i, rs) in results.iter().enumerate().skip(1) {
        let seqs: Vec<u64> = rs.iter().map(|r| *r.as_ref().unwrap()).collect();
        assert_eq!(seqs, vec![2, 3, 4, 5, 6], "session {i}");
        assert_eq!(b.load(logs[i].id()).unwrap().events.len(), 6);
    }
    assert_eq!(b.load(logs[0].id()).unwrap().events.len(), 1);
    turn(&taken, 1, "the new owner writes on");
}

fn db_name(url: &str) -> &str {
    url.rsplit('/').next().unwrap()
}

/// `wharf_append_many` itself: one status per batch in one call (fenced,
/// gap, missing and diverged ones write nothing and do not abort the
/// others), a retried batch already stored is 'ok', the inbox rows a
/// batch logs are marked delivered, a session's second batch in the same
/// call continues its first, and the notifications carry every
/// `id last_seq` pair in payloads under the limit.
#[test]
fn append_many_returns_a_status_per_batch() {
    let Some(pg) = server("append_many_returns_a_status_per_batch") else { return };
    let url = pg.database().unwrap();
    drop(pg_store(&url, PgOptions::default())); // Applies the migrations.
    let db = db_name(&url);
    let sql = |q: &str| pg.psql(db, q).unwrap().trim().to_string();
    sql("INSERT INTO wharf_sessions (id, last_seq, lease_token) VALUES ('s1', 1, 1), ('s2', 1, 1), ('s3', 1, 1), ('s4', 1, 1);
         INSERT INTO wharf_events (session_id, seq, body) VALUES ('s1', 1, 'h1'), ('s2', 1, 'h2'), ('s3', 1, 'h3'), ('s4', 1, 'h4');
         INSERT INTO wharf_inbox (id, session_id, kind, body) VALUES (101, 's1', 'followup', 'x'), (102, 's2', 'followup', 'y')");
    let call = |ids: &str, tokens: &str, firsts: &str, counts: &str, bodies: &str, ack_counts: &str, acks: &str| {
        sql(&format!(
            "SELECT wharf_append_many(ARRAY[{ids}]::text[], ARRAY[{tokens}]::bigint[], ARRAY[{firsts}]::bigint[],
                    ARRAY[{counts}]::int[], ARRAY[{bodies}]::text[],
                    (SELECT array_agg(7::bigint) FROM unnest(ARRAY[{ids}]::text[])),
                    (SELECT array_agg(NULL::text) FROM unnest(ARRAY[{ids}]::text[])),
                    ARRAY[{ack_counts}]::int[], ARRAY[{acks}]::bigint[], 'h', 1000, false)"
        ))
    };
    // s1 ok (acks 101), s2 fenced (acks 102: not delivered), s3 gap,
    // nope missing, s4 two batches (2..3, then 4).
    let got = call(
        "'s1', 's2', 's3', 'nope', 's4', 's4'",
        "1, 2, 1, 1, 1, 1",
        "2, 2, 5, 2, 2, 4",
        "2, 1, 1, 1, 2, 1",
        "'a2', 'a3', 'b2', 'c5', 'd2', 'e2', 'e3', 'e4'",
        "1, 1, 0, 0, 0, 0",
        "101, 102",
    );
    assert_eq!(got, "{ok,fenced,gap,missing,ok,ok}");
    let state = || {
        sql("SELECT string_agg(s.id || ':' || s.last_seq || ':' || s.bytes || ':' ||
                    (SELECT string_agg(body, ',' ORDER BY seq) FROM wharf_events e WHERE e.session_id = s.id), ' ' ORDER BY s.id)
               FROM wharf_sessions s")
    };
    assert_eq!(state(), "s1:3:7:h1,a2,a3 s2:1:0:h2 s3:1:0:h3 s4:4:14:h4,e2,e3,e4");
    assert_eq!(
        sql("SELECT string_agg(id || ':' || (delivered IS NOT NULL), ' ' ORDER BY id) FROM wharf_inbox"),
        "101:true 102:false"
    );
    // The lease of a committed batch is renewed; a refused one's is not.
    assert_eq!(
        sql("SELECT string_agg(id || ':' || coalesce(lease_holder, '-'), ' ' ORDER BY id) FROM wharf_sessions"),
        "s1:h s2:- s3:- s4:h"
    );
    // A retry of a committed batch (the first attempt's answer was lost)
    // is 'ok' and writes nothing; other bodies at those seqs are not.
    let got = call("'s1', 's4'", "1, 1", "2, 3", "2, 1", "'a2', 'a3', 'other'", "1, 0", "101");
    assert_eq!(got, "{ok,diverged}");
    assert_eq!(state(), "s1:3:7:h1,a2,a3 s2:1:0:h2 s3:1:0:h3 s4:4:14:h4,e2,e3,e4");

    // Notifications: a pair for every watched session (every third is not
    // watched, one only by an expired watch), split under the payload limit.
    let n = 180;
    let ids: Vec<String> = (0..n).map(|i| format!("{i:0>100}")).collect();
    let watched = |i: usize| i % 3 != 2;
    let quoted = |f: &dyn Fn(usize) -> bool| {
        ids.iter().enumerate().filter(|(i, _)| f(*i)).map(|(_, id)| format!("'{id}'")).collect::<Vec<_>>().join(",")
    };
    sql(&format!("INSERT INTO wharf_sessions (id, lease_token) SELECT unnest(ARRAY[{}]), 1", quoted(&|_| true)));
    sql(&format!(
        "INSERT INTO wharf_watches (session_id, watcher, expires) SELECT unnest(ARRAY[{}]), 'w', now() + interval '1 minute';
         INSERT INTO wharf_watches (session_id, watcher, expires) SELECT unnest(ARRAY[{}]), 'gone', now() - interval '1 second'",
        quoted(&|i| watched(i)),
        quoted(&|i| !watched(i)),
    ));
    let list = |f: &dyn Fn(usize, &String) -> String| {
        ids.iter().enumerate().map(|(i, id)| f(i, id)).collect::<Vec<_>>().join(",")
    };
    let out = pg
        .psql(
            db,
            &format!(
                "LISTEN wharf_events; SELECT array_length(wharf_append_many(ARRAY[{}], ARRAY[{}]::bigint[], ARRAY[{}]::bigint[],
                   ARRAY[{}]::int[], ARRAY[{}], ARRAY[{}]::bigint[], ARRAY[{}]::text[], ARRAY[{}]::int[], '{{}}'::bigint[],
                   'h', 1000, false), 1)",
                list(&|_, id| format!("'{id}'")),
                list(&|_, _| "1".into()),
                list(&|_, _| "1".into()),
                list(&|i, _| (1 + i % 3).to_string()),
                ids.iter()
                    .enumerate()
                    .flat_map(|(i, id)| (0..1 + i % 3).map(move |k| format!("'{id}-{k}'")))
                    .collect::<Vec<_>>()
                    .join(","),
                list(&|_, _| "1".into()),
                list(&|_, _| "NULL".into()),
                list(&|_, _| "0".into()),
            ),
        )
        .unwrap();
    let payloads: Vec<&str> = out
        .split("Asynchronous notification \"wharf_events\" with payload \"")
        .skip(1)
        .map(|p| p.split('"').next().unwrap())
        .collect();
    assert!(payloads.len() >= 2, "{out}");
    let mut pairs = Vec::new();
    for p in &payloads {
        assert!(p.len() <= 7900, "{}", p.len());
        pairs.extend(p.lines().map(str::to_string));
    }
    let want: Vec<String> =
        ids.iter().enumerate().filter(|(i, _)| watched(*i)).map(|(i, id)| format!("{id} {}", i % 3 + 1)).collect();
    assert_eq!(pairs, want);

    // A call whose sessions nobody watches sends no notification.
    let (a, b) = (&ids[2], &ids[5]);
    let out = pg
        .psql(
            db,
            &format!(
                "LISTEN wharf_events; SELECT wharf_append_many(ARRAY['{a}', '{b}'], ARRAY[1, 1]::bigint[], ARRAY[4, 4]::bigint[],
                   ARRAY[1, 1]::int[], ARRAY['x', 'y'], ARRAY[1, 1]::bigint[], ARRAY[NULL, NULL]::text[], ARRAY[0, 0]::int[],
                   '{{}}'::bigint[], 'h', 1000, false)"
            ),
        )
        .unwrap();
    assert!(out.contains("{ok,ok}"), "{out}");
    assert!(!out.contains("Asynchronous notification"), "{out}");
}

/// A database that stops answering (here: another connection holds the
/// session's row lock) fails an append once the attempt deadline and the
/// writer's retry budget are spent, instead of holding the writer until the
/// lock goes; the store serves again afterwards.
/// Another connection locks session `id`'s row for `secs` seconds (its
/// thread answers when the lock is gone); returns once the lock is held.
fn hold_row_lock(
    pg: &'static PgServer,
    db: String,
    id: String,
    secs: u32,
) -> std::thread::JoinHandle<Result<String, String>> {
    let holder = std::thread::spawn(move || {
        pg.psql(
            &db,
            &format!(
                "BEGIN; SELECT 1 FROM wharf_sessions WHERE id = '{id}' FOR UPDATE; SELECT pg_sleep({secs}); COMMIT;"
            ),
        )
    });
    std::thread::sleep(Duration::from_millis(500));
    holder
}

#[test]
fn an_append_the_database_leaves_unanswered_ends_at_its_deadline() {
    let Some(pg) = server("an_append_the_database_leaves_unanswered_ends_at_its_deadline") else { return };
    let url = pg.database().unwrap();
    let store = pg_store(
        &format!("{url}?wharf_attempt_ms=300&wharf_retry_ms=600"),
        PgOptions { renew_every: Duration::from_secs(3600), ..PgOptions::default() },
    );
    let log = store.create(NewSession::default()).unwrap();
    let (db, id) = (db_name(&url).to_string(), log.id().to_string());
    let holder = hold_row_lock(pg, db, id, 4);
    let started = Instant::now();
    let err = log.append(user("while the row is locked")).unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err}");
    assert!(err.to_string().contains("no answer from the database within 300 ms"), "{err}");
    assert!(took < Duration::from_millis(3000), "the append ended after {took:?}, not at its deadline");
    holder.join().unwrap().unwrap();
    let other = store.create(NewSession::default()).unwrap();
    turn(&other, 1, "after the lock");
}

#[test]
fn a_group_stuck_in_the_database_holds_up_the_next_group_only_briefly() {
    let Some(pg) = server("a_group_stuck_in_the_database_holds_up_the_next_group_only_briefly") else { return };
    let url = pg.database().unwrap();
    let store = pg_store(&url, PgOptions { renew_every: Duration::from_secs(3600), ..PgOptions::default() });
    let stuck = store.create(NewSession::default()).unwrap();
    let others: Vec<_> = (0..4).map(|_| store.create(NewSession::default()).unwrap()).collect();
    let (db, id) = (db_name(&url).to_string(), stuck.id().to_string());
    let holder = hold_row_lock(pg, db, id, 3);
    // This group waits in the database for the lock.
    let waiting = std::thread::spawn(move || stuck.append(user("behind the lock")).map(|e| e.seq));
    std::thread::sleep(Duration::from_millis(200));
    // The next groups wait for it at most briefly, then go on their own.
    let started = Instant::now();
    for log in &others {
        log.append(user("not behind it")).unwrap();
    }
    let took = started.elapsed();
    assert!(took < Duration::from_millis(1500), "4 appends took {took:?} behind a stuck group");
    assert_eq!(waiting.join().unwrap().unwrap(), 2, "the stuck append lands once the lock is gone");
    holder.join().unwrap().unwrap();
}

/// A watch whose registration the database leaves unanswered (another
/// connection holds `wharf_watches` locked) still streams the session: it
/// gives up registering after one poll and reads, instead of waiting the
/// 30 s attempt deadline.
#[test]
fn a_watch_whose_registration_hangs_still_streams() {
    let Some(pg) = server("a_watch_whose_registration_hangs_still_streams") else { return };
    let url = pg.database().unwrap();
    let writer = pg_store(&url, PgOptions::default());
    let reader = pg_store(&url, PgOptions::default());
    let log = writer.create(NewSession::default()).unwrap();
    log.append(user("one")).unwrap();
    let db = db_name(&url).to_string();
    let holder = std::thread::spawn(move || {
        pg.psql(&db, "BEGIN; LOCK TABLE wharf_watches IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(8); COMMIT;")
    });
    std::thread::sleep(Duration::from_millis(500));
    let t0 = Instant::now();
    let mut rx = reader.watch(log.id(), 2).unwrap();
    let ev = recv_within(&mut rx, Duration::from_secs(6)).expect("the watch read nothing while its row was locked");
    assert_eq!(ev.seq, 2);
    assert!(t0.elapsed() < Duration::from_secs(5), "first event after {:?}", t0.elapsed());
    holder.join().unwrap().unwrap();
    // Registered at its next round once the lock is gone: announced again.
    std::thread::sleep(Duration::from_secs(6));
    let t1 = Instant::now();
    log.append(user("two")).unwrap();
    assert_eq!(recv_within(&mut rx, Duration::from_secs(5)).unwrap().seq, 3);
    assert!(t1.elapsed() < Duration::from_secs(1), "woken by NOTIFY, not the poll: {:?}", t1.elapsed());
}
