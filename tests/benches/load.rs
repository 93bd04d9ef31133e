//! The load driver (issue 41, "throughput at scale"): many sessions of the
//! demo profile's turn — four model steps and three tool calls through the
//! real `fs` and `text` components, the `context` hook and the permission
//! policy — created and prompted over `wharf serve`'s HTTP API by a fixed
//! number of concurrent clients, the way an outside load check drives it.
//!
//! Two set-ups, each measured in the same run: **one host on the JSONL
//! store**, and **two hosts on one PostgreSQL** (started on loopback for
//! the run, `fsync` on). Each client repeatedly creates a session on a host
//! (alternating), opens its event stream (SSE), sends the prompt and waits
//! for `turn/end` on the stream: a turn's latency runs from the moment the
//! prompt is sent to the moment its end arrives. Reported: turns/s over the
//! wall time, p50/p90/p99/max latency, RSS per loaded session on each host
//! (after minus before, sessions stay loaded), failed turns.
//!
//! Knobs: `WHARF_LOAD_SESSIONS` (1,000; 100 with `WHARF_BENCH_QUICK`),
//! `WHARF_LOAD_CLIENTS` (50), `WHARF_LOAD_SETUPS` (`jsonl,pg`),
//! `WHARF_LOAD_PG_PARAMS` (appended to the PostgreSQL store URL, e.g.
//! `&wharf_append_workers=1`).
//! `WHARF_LOAD_PERF=1` records each host with `perf record -g` during the
//! load and writes the top symbols (self time) beside the report
//! (`target/bench/load-perf-SETUP-HOST.txt`, and including callees in
//! `….children.txt`; `WHARF_LOAD_PERF=dwarf` unwinds with DWARF so the
//! callers are right; `WHARF_LOAD_PERF_KEEP=1` keeps the recording beside
//! the report as `….data` for `perf report -i`). The PostgreSQL set-up also reports the database's
//! top statements (`pg_stat_statements`). Writes
//! `target/bench/load.{md,json}`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use wharf_tests::pg::{PgServer, ServeHost};
use wharf_tests::plugins;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(default)
}

/// CPU seconds (user + system) a process has used so far.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) in parentheses:
    // utime and stime are the 12th and 13th, in clock ticks.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    (ticks(11) + ticks(12)) as f64 / clock_ticks()
}

/// CPU seconds used so far by every process named `postgres` (the
/// database's server processes; exited backends' time is not counted).
fn postgres_cpu_secs() -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc") else { return 0.0 };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "postgres"))
        .map(cpu_secs)
        .sum()
}

/// The machine's busy and total CPU time so far (`/proc/stat`), seconds.
fn machine_cpu_secs() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<u64> =
        stat.lines().next().unwrap_or("").split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    let total: u64 = f.iter().take(8).sum();
    // idle and iowait are not busy.
    let idle = f.get(3).copied().unwrap_or(0) + f.get(4).copied().unwrap_or(0);
    ((total - idle.min(total)) as f64 / clock_ticks(), total as f64 / clock_ticks())
}

/// Linux reports CPU time in USER_HZ ticks, 100 per second on every
/// architecture the kernel's ABI exposes.
fn clock_ticks() -> f64 {
    100.0
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// The shipped demo profile with the permission preset set to `auto` (a
/// served session would otherwise wait for an approval of the write) and
/// the session store given.
fn profile(dir: &Path, store: Option<&str>) -> Result<PathBuf> {
    let demo = wharf_tests::root().join("profiles/demo.toml");
    let text = std::fs::read_to_string(&demo).with_context(|| format!("reading {}", demo.display()))?;
    if !text.contains("mode = \"ask\"") {
        bail!("{}: no `mode = \"ask\"` line to switch to auto", demo.display());
    }
    let mut text = text.replacen("mode = \"ask\"", "mode = \"auto\"", 1);
    if let Some(url) = store {
        text = text.replacen("[agent]", &format!("[session]\nstore = \"{url}\"\n\n[agent]"), 1);
    }
    let path = dir.join("load.toml");
    std::fs::write(&path, text)?;
    Ok(path)
}

fn post(h: &ServeHost, path: &str, body: Value) -> Result<Value> {
    let (code, r) = h.try_call("POST", path, Some(&body)).map_err(anyhow::Error::msg)?;
    if code != 200 {
        bail!("POST {path}: {code} {r}");
    }
    Ok(r)
}

/// An open `GET /api/sessions/ID/events` stream (HTTP/1.1, chunked).
struct EventStream {
    reader: BufReader<TcpStream>,
    /// Decoded body bytes not yet split into lines.
    pending: Vec<u8>,
    chunked: bool,
}

impl EventStream {
    fn open(h: &ServeHost, id: &str) -> Result<EventStream> {
        let mut s = TcpStream::connect(("127.0.0.1", h.port)).context("connect")?;
        s.set_read_timeout(Some(Duration::from_secs(120)))?;
        s.set_nodelay(true)?;
        let head = format!(
            "GET /api/sessions/{id}/events HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nX-Wharf-Token: {}\r\nAccept: text/event-stream\r\n\r\n",
            h.port, h.token
        );
        s.write_all(head.as_bytes())?;
        let mut reader = BufReader::new(s);
        let mut status = String::new();
        reader.read_line(&mut status)?;
        if !status.contains(" 200") {
            bail!("events of {id}: {}", status.trim());
        }
        let mut chunked = false;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 {
                bail!("events of {id}: the stream closed in its head");
            }
            let l = line.trim().to_ascii_lowercase();
            if l.is_empty() {
                break;
            }
            chunked |= l.starts_with("transfer-encoding:") && l.contains("chunked");
        }
        Ok(EventStream { reader, pending: Vec::new(), chunked })
    }

    /// More body bytes into `pending`; false at the end of the stream.
    fn fill(&mut self) -> Result<bool> {
        if !self.chunked {
            let mut buf = [0u8; 8192];
            let n = self.reader.read(&mut buf)?;
            self.pending.extend_from_slice(&buf[..n]);
            return Ok(n > 0);
        }
        let mut size = String::new();
        if self.reader.read_line(&mut size)? == 0 {
            return Ok(false);
        }
        let n = usize::from_str_radix(size.trim(), 16).with_context(|| format!("chunk size {size:?}"))?;
        if n == 0 {
            return Ok(false);
        }
        let start = self.pending.len();
        self.pending.resize(start + n + 2, 0);
        self.reader.read_exact(&mut self.pending[start..])?;
        self.pending.truncate(start + n);
        Ok(true)
    }

    /// Reads until an event of type `kind`; its JSON.
    fn wait_for(&mut self, kind: &str) -> Result<Value> {
        loop {
            while let Some(eol) = self.pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=eol).collect();
                let Some(data) = line.strip_prefix(b"data:") else { continue };
                if let Ok(v) = serde_json::from_slice::<Value>(data)
                    && v["type"] == kind
                {
                    return Ok(v);
                }
            }
            if !self.fill()? {
                bail!("the event stream ended before `{kind}`");
            }
        }
    }
}

/// One client's turn on `h`: create, stream, prompt, wait for the end.
/// The latency from the prompt's send to `turn/end`, and the end's reason.
fn one_turn(h: &ServeHost, i: usize) -> Result<(Duration, String)> {
    let id = post(h, "/api/sessions", json!({}))?["id"].as_str().context("no session id")?.to_string();
    let mut events = EventStream::open(h, &id)?;
    let sent = Instant::now();
    post(h, &format!("/api/sessions/{id}/prompt"), json!({"text": format!("summarise the workspace ({i})")}))?;
    let end = events.wait_for("turn/end").with_context(|| format!("session {id}"))?;
    let latency = sent.elapsed();
    let reason = end["data"]["reason"].as_str().or(end["reason"].as_str()).unwrap_or("?").to_string();
    Ok((latency, reason))
}

/// `perf record` attached to a host for the length of the load.
struct Perf {
    child: std::process::Child,
    data: PathBuf,
    out: PathBuf,
}

impl Perf {
    fn start(pid: u32, data: PathBuf, out: PathBuf) -> Option<Perf> {
        // `WHARF_LOAD_PERF=dwarf`: call graphs unwound with DWARF (the
        // host is built without frame pointers), for `…-children.txt`.
        let dwarf = std::env::var("WHARF_LOAD_PERF").is_ok_and(|v| v == "dwarf");
        let graph: &[&str] = if dwarf { &["-F", "149", "--call-graph", "dwarf,16384"] } else { &["-F", "499", "-g"] };
        let child = std::process::Command::new("perf")
            .arg("record")
            .args(graph)
            .args(["-q", "-o"])
            .arg(&data)
            .args(["-p", &pid.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(|e| eprintln!("load: perf not started ({e})"))
            .ok()?;
        Some(Perf { child, data, out })
    }

    /// Stops recording and writes the top symbols by self time, and
    /// beside it (`…-children.txt`) by time including callees, which says
    /// who the allocator's and `memmove`'s time is spent for.
    fn finish(mut self) {
        // SIGINT makes perf write its data file and exit.
        let _ = std::process::Command::new("kill").args(["-INT", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
        let children = self.out.with_extension("children.txt");
        for (mode, sort, limit, out) in
            [("--no-children", "dso,symbol", "0.7", &self.out), ("--children", "symbol", "3", &children)]
        {
            let report = std::process::Command::new("perf")
                .args([
                    "report",
                    "--stdio",
                    "--no-inline",
                    mode,
                    "--sort",
                    sort,
                    "--percent-limit",
                    limit,
                    "-g",
                    "none",
                    "-i",
                ])
                .arg(&self.data)
                // perf reads a pipe on stdin as its data otherwise.
                .stdin(std::process::Stdio::null())
                .output();
            match report {
                Ok(o) => {
                    let text = String::from_utf8_lossy(&o.stdout);
                    // perf pads its columns to the terminal's width: one space.
                    let top: String = text
                        .lines()
                        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
                        .take(60)
                        .fold(String::new(), |mut acc, l| {
                            acc.push_str(&l.split_whitespace().collect::<Vec<_>>().join(" "));
                            acc.push('\n');
                            acc
                        });
                    let _ = std::fs::write(out, top);
                }
                Err(e) => eprintln!("load: perf report failed ({e})"),
            }
        }
        if std::env::var_os("WHARF_LOAD_PERF_KEEP").is_some() {
            let kept = self.out.with_extension("data");
            let _ = std::fs::rename(&self.data, &kept);
            eprintln!("load: perf data kept in {}", kept.display());
        } else {
            let _ = std::fs::remove_file(&self.data);
        }
    }
}

struct Outcome {
    setup: &'static str,
    hosts: usize,
    sessions: usize,
    clients: usize,
    secs: f64,
    latencies_ms: Vec<f64>,
    rss_per_session_kib: Vec<f64>,
    rss_end_kib: Vec<u64>,
    errors: Vec<String>,
    /// CPU milliseconds the hosts together used per completed turn.
    host_cpu_ms_per_turn: f64,
    /// CPU milliseconds this driver (its clients) used per turn.
    driver_cpu_ms_per_turn: f64,
    /// CPU milliseconds the database's processes used per turn (PostgreSQL
    /// set-up only).
    db_cpu_ms_per_turn: Option<f64>,
    /// The machine's busy share of all its CPUs during the load.
    machine_busy: f64,
    /// The database's top statements by execution time during the load:
    /// (calls, total ms, statement).
    statements: Vec<(u64, f64, String)>,
}

impl Outcome {
    fn pct(&self, p: f64) -> f64 {
        if self.latencies_ms.is_empty() {
            return f64::NAN;
        }
        let i = ((self.latencies_ms.len() as f64 - 1.0) * p).round() as usize;
        self.latencies_ms[i.min(self.latencies_ms.len() - 1)]
    }

    fn turns_per_s(&self) -> f64 {
        self.latencies_ms.len() as f64 / self.secs
    }
}

fn run_setup(setup: &'static str, pg: Option<&PgServer>, sessions: usize, clients: usize) -> Result<Outcome> {
    let home = tempfile::tempdir()?;
    let db = match pg {
        Some(pg) => Some(pg.database().map_err(anyhow::Error::msg)?),
        None => None,
    };
    let store = db
        .as_ref()
        .map(|url| format!("{url}?wharf_pool=32{}", std::env::var("WHARF_LOAD_PG_PARAMS").unwrap_or_default()));
    // The database's name, for its statement statistics.
    let db_name = db.as_deref().and_then(|u| u.rsplit('/').next()).map(str::to_string);
    let prof = profile(home.path(), store.as_deref())?;
    let n_hosts = if pg.is_some() { 2 } else { 1 };
    let mut hosts = Vec::new();
    let mut workspaces = Vec::new();
    for h in 0..n_hosts {
        // A workspace per host: the demo's README to read and SUMMARY.md to write.
        let ws = tempfile::tempdir()?;
        std::fs::write(ws.path().join("README.md"), "# Load\n\nA small project the load driver's agent summarises.\n")?;
        let name = format!("{setup}-{h}");
        hosts.push(
            ServeHost::start(home.path(), ws.path(), &prof, &name, &["--idle-timeout", "0"])
                .map_err(anyhow::Error::msg)?,
        );
        workspaces.push(ws);
    }
    // Warm each host (components loaded, one turn played) before the
    // RSS baseline.
    for h in &hosts {
        one_turn(h, 0).context("warm-up turn")?;
    }
    if let (Some(pg), Some(db)) = (pg, &db_name) {
        pg.psql(db, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            .and_then(|_| pg.psql(db, "SELECT pg_stat_statements_reset()"))
            .map_err(anyhow::Error::msg)?;
    }
    std::thread::sleep(Duration::from_millis(300));
    let before: Vec<u64> = hosts.iter().map(|h| rss_kib(h.pid())).collect();
    let perf = std::env::var("WHARF_LOAD_PERF").is_ok_and(|v| v == "1" || v == "dwarf");
    let out_dir = wharf_tests::target_dir().join("bench");
    let perfs: Vec<Perf> = if perf {
        hosts
            .iter()
            .enumerate()
            .filter_map(|(i, h)| {
                Perf::start(
                    h.pid(),
                    home.path().join(format!("perf-{i}.data")),
                    out_dir.join(format!("load-perf-{setup}-{i}.txt")),
                )
            })
            .collect()
    } else {
        Vec::new()
    };
    let cpu_before: Vec<f64> = hosts.iter().map(|h| cpu_secs(h.pid())).collect();
    let driver_before = cpu_secs(std::process::id());
    let db_before = pg.map(|_| postgres_cpu_secs());
    let machine_before = machine_cpu_secs();
    let hosts = Arc::new(hosts);
    let latencies = Arc::new(Mutex::new(Vec::<f64>::with_capacity(sessions)));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let workers: Vec<_> = (0..clients)
        .map(|_| {
            let (hosts, latencies, errors, next) = (hosts.clone(), latencies.clone(), errors.clone(), next.clone());
            std::thread::spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= sessions {
                        return;
                    }
                    let h = &hosts[i % hosts.len()];
                    match one_turn(h, i + 1) {
                        Ok((d, reason)) if reason == "completed" => {
                            latencies.lock().unwrap_or_else(|e| e.into_inner()).push(d.as_secs_f64() * 1000.0)
                        }
                        Ok((_, reason)) => {
                            errors.lock().unwrap_or_else(|e| e.into_inner()).push(format!("turn {i}: ended `{reason}`"))
                        }
                        Err(e) => errors.lock().unwrap_or_else(|e| e.into_inner()).push(format!("turn {i}: {e:#}")),
                    }
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
    let secs = start.elapsed().as_secs_f64();
    let machine_after = machine_cpu_secs();
    let driver_cpu = cpu_secs(std::process::id()) - driver_before;
    let db_cpu = db_before.map(|b| postgres_cpu_secs() - b);
    let host_cpu: Vec<f64> = hosts.iter().zip(&cpu_before).map(|(h, b)| cpu_secs(h.pid()) - b).collect();
    for p in perfs {
        p.finish();
    }
    let after: Vec<u64> = hosts.iter().map(|h| rss_kib(h.pid())).collect();
    let per_host = (sessions as f64 / n_hosts as f64).max(1.0);
    let rss_per_session_kib = before.iter().zip(&after).map(|(b, a)| a.saturating_sub(*b) as f64 / per_host).collect();
    let mut latencies_ms = latencies.lock().unwrap_or_else(|e| e.into_inner()).clone();
    latencies_ms.sort_by(f64::total_cmp);
    let errors = errors.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if !errors.is_empty() {
        for h in hosts.iter() {
            let err = h.stderr();
            eprintln!(
                "load: host stderr (last 2 KiB): {}",
                &err[err.floor_char_boundary(err.len().saturating_sub(2048))..]
            );
        }
    }
    let statements = match (pg, &db_name) {
        (Some(pg), Some(db)) => pg
            .psql(
                db,
                "SELECT calls, round(total_exec_time::numeric, 1), \
                 left(regexp_replace(query, '\\s+', ' ', 'g'), 90) FROM pg_stat_statements \
                 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                 ORDER BY total_exec_time DESC LIMIT 8",
            )
            .map_err(anyhow::Error::msg)?
            .lines()
            .filter_map(|l| {
                let mut f = l.splitn(3, '|');
                Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?, f.next()?.to_string()))
            })
            .collect(),
        _ => Vec::new(),
    };
    drop(workspaces);
    let done = latencies_ms.len().max(1) as f64;
    let busy = (machine_after.0 - machine_before.0) / (machine_after.1 - machine_before.1).max(1e-9);
    Ok(Outcome {
        host_cpu_ms_per_turn: host_cpu.iter().sum::<f64>() * 1000.0 / done,
        driver_cpu_ms_per_turn: driver_cpu * 1000.0 / done,
        db_cpu_ms_per_turn: db_cpu.map(|c| c * 1000.0 / done),
        machine_busy: busy,
        statements,
        setup,
        hosts: n_hosts,
        sessions,
        clients,
        secs,
        latencies_ms,
        rss_per_session_kib,
        rss_end_kib: after,
        errors,
    })
}

pub fn main() -> Result<()> {
    let quick = std::env::var_os("WHARF_BENCH_QUICK").is_some();
    let sessions = env_usize("WHARF_LOAD_SESSIONS", if quick { 100 } else { 1000 });
    let clients = env_usize("WHARF_LOAD_CLIENTS", 50).max(1);
    let setups = std::env::var("WHARF_LOAD_SETUPS").unwrap_or_else(|_| "jsonl,pg".into());
    for p in [plugins::FS, plugins::TEXT, plugins::CONTEXT, plugins::POLICY_RULES, plugins::LLM_SCRIPTED] {
        let _ = wharf_tests::plugin(p);
    }
    let out_dir = wharf_tests::target_dir().join("bench");
    std::fs::create_dir_all(&out_dir)?;
    let mut outcomes = Vec::new();
    for setup in setups.split(',').map(str::trim) {
        match setup {
            "jsonl" => outcomes.push(run_setup("jsonl", None, sessions, clients)?),
            "pg" => {
                let pg = PgServer::start_durable().map_err(anyhow::Error::msg).context("starting PostgreSQL")?;
                outcomes.push(run_setup("pg", Some(&pg), sessions, clients)?);
            }
            other => bail!("WHARF_LOAD_SETUPS: unknown set-up `{other}` (jsonl, pg)"),
        }
        if let Some(o) = outcomes.last() {
            eprintln!(
                "load: {}: {} turns in {:.1} s, {} errors",
                o.setup,
                o.latencies_ms.len(),
                o.secs,
                o.errors.len()
            );
        }
    }
    let mut md = format!(
        "The demo profile's turn (4 model steps, 3 tool calls through `fs`/`text`, the `context` hook, the \
         permission policy) over `wharf serve`'s API: {clients} clients at a time, each creating a session, \
         opening its event stream and sending the prompt; latency from the prompt's send to `turn/end` on \
         the stream. Targets (issue 41): ≥ 300 turns/s at p99 ≤ 500 ms, ≤ 100 KiB RSS per loaded session.\n\n\
         Host CPU is the hosts' user + system time together per completed turn; the driver's (its \
         client threads) and the database's (its server processes) likewise; busy is the machine's share \
         of all its CPUs in use during the load.\n\n\
         | set-up | turns | turns/s | p50 | p90 | p99 | max | RSS per loaded session | RSS at the end | host CPU per turn | driver CPU per turn | database CPU per turn | busy | errors |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    );
    let mut json_rows = Vec::new();
    for o in &outcomes {
        let label = match o.setup {
            "pg" => format!("{} hosts, PostgreSQL", o.hosts),
            _ => format!("{} host, JSONL", o.hosts),
        };
        let rss: Vec<String> = o.rss_per_session_kib.iter().map(|k| format!("{k:.0} KiB")).collect();
        let end: Vec<String> = o.rss_end_kib.iter().map(|k| format!("{} MiB", k / 1024)).collect();
        md.push_str(&format!(
            "| {label} | {}/{} | {:.1} | {:.0} ms | {:.0} ms | {:.0} ms | {:.0} ms | {} | {} | {:.2} ms | {:.2} ms | {} | {:.0} % | {} |\n",
            o.latencies_ms.len(),
            o.sessions,
            o.turns_per_s(),
            o.pct(0.5),
            o.pct(0.9),
            o.pct(0.99),
            o.pct(1.0),
            rss.join(" / "),
            end.join(" / "),
            o.host_cpu_ms_per_turn,
            o.driver_cpu_ms_per_turn,
            o.db_cpu_ms_per_turn.map_or("–".to_string(), |c| format!("{c:.2} ms")),
            o.machine_busy * 100.0,
            o.errors.len(),
        ));
        json_rows.push(json!({
            "setup": o.setup, "hosts": o.hosts, "sessions": o.sessions, "clients": o.clients,
            "completed": o.latencies_ms.len(), "secs": o.secs, "turns_per_s": o.turns_per_s(),
            "latency_ms": {"p50": o.pct(0.5), "p90": o.pct(0.9), "p99": o.pct(0.99), "max": o.pct(1.0)},
            "rss_per_session_kib": o.rss_per_session_kib, "rss_end_kib": o.rss_end_kib,
            "host_cpu_ms_per_turn": o.host_cpu_ms_per_turn, "driver_cpu_ms_per_turn": o.driver_cpu_ms_per_turn,
            "db_cpu_ms_per_turn": o.db_cpu_ms_per_turn,
            "machine_busy": o.machine_busy,
            "errors": o.errors.len(), "first_errors": o.errors.iter().take(5).collect::<Vec<_>>(),
            "db_statements": o.statements.iter().map(|(c, ms, q)| json!({"calls": c, "total_ms": ms, "query": q})).collect::<Vec<_>>(),
        }));
    }
    for o in outcomes.iter().filter(|o| !o.statements.is_empty()) {
        md.push_str(&format!(
            "\nPostgreSQL's top statements during the `{}` load (`pg_stat_statements`, execution time in \
             the server):\n\n| statement | calls | per turn | total ms | per call µs |\n|---|---|---|---|---|\n",
            o.setup
        ));
        for (calls, ms, query) in &o.statements {
            md.push_str(&format!(
                "| `{}` | {calls} | {:.1} | {ms:.0} | {:.0} |\n",
                query.replace('|', "\\|"),
                *calls as f64 / o.sessions as f64,
                ms * 1000.0 / (*calls).max(1) as f64
            ));
        }
    }
    std::fs::write(out_dir.join("load.md"), &md)?;
    std::fs::write(out_dir.join("load.json"), serde_json::to_string_pretty(&json!({"setups": json_rows}))?)?;
    println!("{md}");
    let failed: Vec<&String> = outcomes.iter().flat_map(|o| o.errors.iter()).collect();
    if !failed.is_empty() {
        bail!("{} failed turns, first: {:?}", failed.len(), failed.iter().take(5).collect::<Vec<_>>());
    }
    Ok(())
}
