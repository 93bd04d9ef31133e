//! `cargo xtask bench [--quick]`: every benchmark in one invocation on one
//! machine, one report: `target/bench/report.md` and `report.json`.
//!
//! - `call_overhead` (host/runtime/benches): the same trivial tool natively,
//!   as a component (fresh instance per call, warm instance) and through two
//!   MCP stdio servers built or installed here (`tests/mcp-bench/rmcp-echo`,
//!   `tests/mcp-bench/ts-echo` with `npm ci`);
//! - `harness` (tests/benches): step overhead, fan-out steps/s, startup
//!   cold/warm and RSS, session-log rates, hot-reload latency (the large
//!   component is the Python example `csv_query`, built once with
//!   `wharf plugin build` into `target/bench/large/`);
//! - `sessions` (tests/benches): concurrent sessions against the mock LLM;
//! - `code_mode`, `wire` (tests/benches): Code Mode against one tool per
//!   step; wire-level step overhead, edit loop and cold start;
//! - `fleet` (tests/benches): PostgreSQL vs JSONL append rate, takeover
//!   latency, 1,000 sessions over two `wharf serve` hosts;
//! - `policy_swap` (tests/benches): a policy config write → the new config
//!   deciding, under load with a fresh compile cache, against idle;
//! - `long_session` (tests/benches): per-step host overhead at steps 10,
//!   100 and 500 of a session whose history grows to ~2 MiB, against the
//!   time to write each request's bytes;
//! - `load` (tests/benches): the load driver — the demo turn over `wharf
//!   serve`'s API by 50 clients at a time, one host on JSONL and two on
//!   PostgreSQL: turns/s, p50/p99 latency, RSS per loaded session;
//! - `dev_loop` (tests/benches): save of one line of a scaffolded Python,
//!   JavaScript and Rust tool → the first call answered by the new code,
//!   `wharf plugin dev` against the release rebuild (`plugin build`).
//!
//! `--quick` (or `WHARF_BENCH_QUICK=1`) shrinks every count for a smoke run;
//! `--only KEY` runs one section (e.g. `--only dev_loop`), skipping the
//! others and the shared set-up they need.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::{build_plugins, run as sh, target_dir};

/// One benchmark section of the report.
struct Section {
    key: &'static str,
    title: &'static str,
    result: Result<()>,
}

fn bench_cmd(root: &Path, package: &str, bench: &str) -> Command {
    let mut c = Command::new("cargo");
    c.current_dir(root).args(["bench", "-q", "--profile", "dev"]);
    if package == "wharf-tests" {
        // tests/benches is one binary; the section is picked by name. Its
        // feature pins make `-p wharf-tests` resolve like the test build.
        c.args(["-p", package, "--bench", "all"]).env("WHARF_BENCH_SECTION", bench);
    } else {
        // Another crate's bench alone would resolve its dependencies' features
        // for that crate only and build wasmtime again: select what the test
        // build selects, and only this bench.
        c.args(crate::host_selection(&crate::plugin_crates(root).unwrap_or_default())).args(["--bench", bench]);
    }
    c
}

/// The `call_overhead` bench (`host/runtime/benches`): Wharf's components
/// against the rmcp (and, when installed, TypeScript) MCP servers.
fn call_overhead_cmd(root: &Path, target: &Path, out: &Path, quick: bool, ts: Option<&Path>) -> Command {
    let mut c = bench_cmd(root, "wharf-runtime", "call_overhead");
    c.arg("--")
        .arg(target.join("plugins/echo.wasm"))
        .arg(out.join("call_overhead.json"))
        .env("WHARF_BENCH_MCP_RMCP", target.join("debug/rmcp-echo"))
        .env("WHARF_BENCH_LARGER", target.join("plugins/text.wasm"))
        .env("WHARF_BENCH_FS", target.join("plugins/fs.wasm"));
    if let Some(ts) = ts {
        c.env("WHARF_BENCH_MCP_TS", ts);
    }
    if quick {
        c.env("WHARF_BENCH_ROUNDS", "5");
    }
    c
}

/// `npm ci` in `dir` unless its dependencies are already installed.
fn npm_ci(dir: &Path) -> Result<()> {
    if dir.join("node_modules/@modelcontextprotocol/sdk/package.json").exists() {
        return Ok(());
    }
    sh(Command::new("npm").current_dir(dir).args(["ci", "--no-audit", "--no-fund"]))
}

/// The large component for the hot-reload figure: a Python example built
/// once (then the JS one if Python's toolchain is missing).
fn large_component(root: &Path, wharf: &Path) -> Option<PathBuf> {
    let out_dir = target_dir(root).join("bench/large");
    for (example, name) in [("sdk/python/examples/csv_query", "csv_query"), ("sdk/js/examples/json_diff", "json_diff")]
    {
        let out = out_dir.join(format!("{name}.wasm"));
        if out.exists() {
            return Some(out);
        }
        let _ = std::fs::create_dir_all(&out_dir);
        let built = sh(Command::new(wharf)
            .current_dir(root)
            .args(["plugin", "build"])
            .arg(root.join(example))
            .arg("-o")
            .arg(&out));
        match built {
            Ok(()) if out.exists() => return Some(out),
            Ok(()) => eprintln!("warning: `wharf plugin build {example}` wrote no {}", out.display()),
            Err(e) => eprintln!("warning: cannot build {example} ({e:#}); trying the next large component"),
        }
    }
    None
}

/// A JSON string literal (xtask has no JSON library).
fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The machine, for the report: (Markdown line, JSON object).
fn machine() -> (String, String) {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    let mem_kib: u64 = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0);
    let git = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let load = read("/proc/loadavg").split_whitespace().take(3).collect::<Vec<_>>().join(" ");
    let gib = mem_kib as f64 / 1048576.0;
    let profile = "dev (dependencies at opt-level 2, workspace crates at 1), the same for Wharf and rmcp-echo";
    let md = format!(
        "{cpu} ({cores} cores, {gib:.0} GiB), git {git}, load average at start {load}; build profile {profile}"
    );
    let json = format!(
        "{{\"cpu\": {}, \"cores\": {cores}, \"memory_gib\": {gib:.1}, \"loadavg_at_start\": {}, \"git\": {}, \"profile\": {}}}",
        json_str(&cpu),
        json_str(&load),
        json_str(&git),
        json_str(profile)
    );
    (md, json)
}

/// Runs the benchmarks and writes `target/bench/report.{md,json}`.
pub fn run_all(root: &Path, quick: bool, only: Option<&str>) -> Result<()> {
    let started = std::time::Instant::now();
    let wall_start = std::time::SystemTime::now();
    let machine = machine();
    if let Some(key) = only {
        let out = target_dir(root).join("bench");
        std::fs::create_dir_all(&out)?;
        if key == "call_overhead" {
            // `host/runtime/benches`, not a `tests/benches` section.
            build_plugins(root)?;
            sh(Command::new("cargo").current_dir(root).args(["build", "-q", "-p", "wharf-mcp-bench-rmcp"]))?;
            let ts_dir = root.join("tests/mcp-bench/ts-echo");
            let ts = npm_ci(&ts_dir).ok().map(|()| ts_dir.join("server.mjs"));
            return sh(&mut call_overhead_cmd(root, &target_dir(root), &out, quick, ts.as_deref()));
        }
        sh(Command::new("cargo").current_dir(root).args(["build", "-q", "-p", "wharf"]))?;
        return run_one(root, &out, quick, key);
    }
    build_plugins(root)?;
    sh(Command::new("cargo").current_dir(root).args([
        "build",
        "-q",
        "-p",
        "wharf",
        "-p",
        "wharf-mock-llm",
        "-p",
        "wharf-mcp-bench-rmcp",
    ]))?;
    let target = target_dir(root);
    let out = target.join("bench");
    std::fs::create_dir_all(&out)?;
    let wharf = target.join("debug/wharf");
    let ts_dir = root.join("tests/mcp-bench/ts-echo");
    let ts = match npm_ci(&ts_dir) {
        Ok(()) => Some(ts_dir.join("server.mjs")),
        Err(e) => {
            eprintln!("warning: no TypeScript MCP baseline ({e:#})");
            None
        }
    };
    let large = large_component(root, &wharf);

    let mut sections = Vec::new();
    let mut c = call_overhead_cmd(root, &target, &out, quick, ts.as_deref());
    sections.push(Section { key: "call_overhead", title: "Tool-call overhead", result: sh(&mut c) });

    let mut c = bench_cmd(root, "wharf-tests", "harness");
    if let Some(large) = &large {
        c.env("WHARF_BENCH_LARGE_COMPONENT", large);
    }
    if quick {
        c.env("WHARF_BENCH_QUICK", "1");
    }
    sections.push(Section { key: "harness", title: "Harness", result: sh(&mut c) });

    let mut c = bench_cmd(root, "wharf-tests", "sessions");
    if quick {
        c.env("WHARF_BENCH_SESSIONS", "100");
    }
    sections.push(Section { key: "sessions", title: "Concurrent sessions", result: sh(&mut c) });

    // Issue 15/18 benches: each writes its own `KEY.md` and `KEY.json`.
    for (key, title) in [
        ("code_mode", "Code Mode"),
        ("wire", "Wire-level step overhead, edit loop and cold start"),
        ("fleet", "Fleet: PostgreSQL store, takeover, sessions over two hosts"),
        ("stream_decode", "Decoding a streamed reply (llm-wire)"),
        ("policy_swap", "Policy config swaps under load"),
        ("long_session", "Long sessions: per-step overhead as the history grows"),
        ("load", "Throughput at scale: the demo turn over `wharf serve`, one host (JSONL) and two (PostgreSQL)"),
        ("dev_loop", "Plugin authors: save to serving (dev mode vs release rebuild)"),
    ] {
        let mut c = bench_cmd(root, "wharf-tests", key);
        if quick {
            c.env("WHARF_BENCH_QUICK", "1");
        }
        sections.push(Section { key, title, result: sh(&mut c) });
    }

    let minutes = started.elapsed().as_secs_f64() / 60.0;
    let (machine_md, machine_json) = machine;
    let mut report = format!(
        "# Wharf benchmark report\n\n{machine_md}. `cargo xtask bench{}` took {minutes:.1} min including builds.\n\n",
        if quick { " --quick" } else { "" },
    );
    // report.json: the machine plus each benchmark's own JSON, spliced.
    let mut all = format!("{{\n\"machine\": {machine_json},\n\"quick\": {quick},\n\"minutes\": {minutes:.2}");
    let mut failed = Vec::new();
    for s in &sections {
        if let Err(e) = &s.result {
            failed.push(format!("{}: {e:#}", s.key));
            report.push_str(&format!("## {}\n\n**failed**: {e:#}\n\n", s.title));
            // A bench that measured and then found errors still wrote its table.
            let fresh = std::fs::metadata(out.join(format!("{}.md", s.key)))
                .and_then(|m| m.modified())
                .is_ok_and(|t| t >= wall_start);
            if !fresh {
                continue;
            }
        }
        let md = std::fs::read_to_string(out.join(format!("{}.md", s.key)))
            .with_context(|| format!("{} wrote no {}.md", s.key, s.key))?;
        report.push_str(&format!("## {}\n\n{md}\n", s.title));
        let j = std::fs::read_to_string(out.join(format!("{}.json", s.key)))
            .with_context(|| format!("{} wrote no {}.json", s.key, s.key))?;
        all.push_str(&format!(",\n\"{}\": {}", s.key, j.trim()));
    }
    all.push_str("\n}\n");
    std::fs::write(out.join("report.json"), &all)?;
    std::fs::write(out.join("report.md"), &report)?;
    eprintln!("{report}\nreport: {} and report.json", out.join("report.md").display());
    if !failed.is_empty() {
        bail!("benchmarks failed:\n{}", failed.join("\n"));
    }
    Ok(())
}

/// One section of `tests/benches` alone (`--only KEY`): its own
/// `KEY.md` and `KEY.json`, printed; the report files are left alone.
fn run_one(root: &Path, out: &Path, quick: bool, key: &str) -> Result<()> {
    let mut c = bench_cmd(root, "wharf-tests", key);
    if quick {
        c.env("WHARF_BENCH_QUICK", "1");
    }
    sh(&mut c)?;
    let md =
        std::fs::read_to_string(out.join(format!("{key}.md"))).with_context(|| format!("{key} wrote no {key}.md"))?;
    eprintln!("{md}\nsection report: {}", out.join(format!("{key}.md")).display());
    Ok(())
}

/// Entry point: `cargo xtask bench [--quick] [--only KEY]`.
pub fn run(root: &Path, args: &[String]) -> Result<()> {
    let quick = args.iter().any(|a| a == "--quick") || std::env::var_os("WHARF_BENCH_QUICK").is_some();
    let mut only = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => {}
            "--only" => only = Some(it.next().context("--only needs a section key (e.g. dev_loop)")?.clone()),
            other => bail!("cargo xtask bench: unknown option `{other}` (--quick, --only KEY)"),
        }
    }
    run_all(root, quick, only.as_deref())
}
