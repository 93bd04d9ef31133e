//! The plugin author's edit loop (issue 39): for a scaffolded tool in
//! Python, JavaScript and Rust, one line of the source is edited and the
//! time from the save to the first call answered by the new code is
//! measured, warm (dev runtime, compile cache and cargo's incremental state
//! present), two ways in the same run:
//!
//! - **dev**: `wharf plugin dev DIR --json` running; save → its `reloaded`
//!   event (source published, loaded like a host loads it) → `wharf plugin
//!   call target/dev/NAME.wasm` answers with the new text;
//! - **release** (the baseline): save → `wharf plugin build DIR` (build and
//!   the compile check) → `wharf plugin call` of the built file answers.
//!
//! Both end in one `wharf plugin call` process (a fresh host loading from
//! the compile cache, as a host's reload does). Writes
//! `target/bench/dev_loop.{md,json}`; `WHARF_BENCH_QUICK=1` runs one round
//! per language instead of three.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

fn wharf(home: &Path) -> Command {
    let mut c = wharf_tests::wharf(home);
    // Rust plugins: the SDK's dependencies compile once per checkout.
    c.env("CARGO_TARGET_DIR", wharf_tests::target_dir().join("plugin-new"));
    c
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(f64::NAN)
}

/// `wharf plugin call FILE TOOL` answers with `want` in its content.
fn call_answers(home: &Path, file: &Path, tool: &str, want: &str) -> anyhow::Result<()> {
    let o = wharf(home).args(["plugin", "call"]).arg(file).arg(tool).arg(r#"{"name": "bench"}"#).output()?;
    let v: Value = serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim())
        .with_context(|| format!("plugin call: {}", String::from_utf8_lossy(&o.stderr)))?;
    let content = v["content"].as_str().unwrap_or("");
    if !content.contains(want) {
        bail!("the call answered `{content}`, not the new code's `{want}`");
    }
    Ok(())
}

struct Lang {
    lang: &'static str,
    file: &'static str,
    /// The text of the line that changes, `WORD` the round's word.
    line: &'static str,
    target_ms: f64,
}

const LANGS: [Lang; 3] = [
    Lang { lang: "python", file: "app.py", line: "f\"WORD, {args.name}!\"", target_ms: 1000.0 },
    Lang { lang: "js", file: "app.js", line: "`WORD, ${name}!`", target_ms: 1000.0 },
    Lang { lang: "rust", file: "src/lib.rs", line: "format!(\"WORD, {}!\", args.name)", target_ms: 3000.0 },
];

fn line_of(l: &Lang, word: &str) -> String {
    l.line.replace("WORD", word)
}

fn set_word(dir: &Path, l: &Lang, from: &str, to: &str) -> anyhow::Result<()> {
    let path = dir.join(l.file);
    let text = std::fs::read_to_string(&path)?;
    let (a, b) = (line_of(l, from), line_of(l, to));
    if !text.contains(&a) {
        bail!("{} has no `{a}`", path.display());
    }
    std::fs::write(&path, text.replace(&a, &b))?;
    Ok(())
}

struct Dev {
    child: Child,
    events: mpsc::Receiver<Value>,
}

impl Dev {
    fn next(&self, name: &str) -> anyhow::Result<Value> {
        loop {
            let v = self.events.recv_timeout(Duration::from_secs(900)).context("wharf plugin dev stopped")?;
            if v["event"] == name {
                return Ok(v);
            }
            if v["event"] == "error" {
                bail!("wharf plugin dev: {v}");
            }
        }
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_dev(home: &Path, dir: &Path) -> anyhow::Result<Dev> {
    let mut child = wharf(home)
        .args(["plugin", "dev"])
        .arg(dir)
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let out = child.stdout.take().context("no stdout")?;
    let (tx, events) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                let _ = tx.send(v);
            }
        }
    });
    Ok(Dev { child, events })
}

pub fn main() -> anyhow::Result<()> {
    let quick = std::env::var_os("WHARF_BENCH_QUICK").is_some();
    let rounds = if quick { 1 } else { 3 };
    let home = tempfile::tempdir()?;
    let home = home.path();
    let work = tempfile::tempdir()?;
    let mut rows = Vec::new();
    let mut results = Vec::new();
    for l in &LANGS {
        let name = format!("loop-{}", l.lang);
        let tool = name.replace('-', "_");
        let o = wharf(home).current_dir(work.path()).args(["plugin", "new", &name, "--lang", l.lang]).output()?;
        if !o.status.success() {
            bail!("plugin new {}: {}", l.lang, String::from_utf8_lossy(&o.stderr));
        }
        let dir: PathBuf = work.path().join(&name);
        let build = |dir: &Path| -> anyhow::Result<PathBuf> {
            let o = wharf(home).args(["plugin", "build", "--json"]).arg(dir).output()?;
            if !o.status.success() {
                bail!("plugin build: {}", String::from_utf8_lossy(&o.stderr));
            }
            let v: Value = serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim())?;
            Ok(PathBuf::from(v["path"].as_str().unwrap_or("")))
        };
        // Warm-up: the release path once (toolchain caches, compile cache).
        let out = build(&dir)?;
        call_answers(home, &out, &tool, "Hello, bench!")?;
        let mut word = "Hello".to_string();
        let mut release = Vec::new();
        for i in 0..rounds {
            let next = format!("Rel{i}");
            set_word(&dir, l, &word, &next)?;
            let t0 = Instant::now();
            let out = build(&dir)?;
            call_answers(home, &out, &tool, &format!("{next}, bench!"))?;
            release.push(t0.elapsed().as_secs_f64() * 1e3);
            word = next;
        }
        // Dev: the runtime built and the first version loaded before timing.
        let dev = start_dev(home, &dir)?;
        dev.next("ready")?;
        let wasm = dir.join("target/dev").join(format!("{tool}.wasm"));
        let mut devs = Vec::new();
        for i in 0..rounds {
            let next = format!("Dev{i}");
            set_word(&dir, l, &word, &next)?;
            let t0 = Instant::now();
            dev.next("reloaded")?;
            call_answers(home, &wasm, &tool, &format!("{next}, bench!"))?;
            devs.push(t0.elapsed().as_secs_f64() * 1e3);
            word = next;
        }
        drop(dev);
        let (d, r) = (median(&devs), median(&release));
        let met = d <= l.target_ms;
        rows.push(format!(
            "| {} | {:.0} ms | {:.0} ms | {:.3}× | ≤ {:.0} ms: **{}** |",
            l.lang,
            d,
            r,
            d / r,
            l.target_ms,
            if met { "met" } else { "not met" }
        ));
        results.push(json!({"lang": l.lang, "dev_ms": devs, "release_ms": release, "dev_median_ms": d,
                            "release_median_ms": r, "dev_vs_release": d / r, "target_ms": l.target_ms, "met": met}));
    }
    let md = format!(
        "Save of one edited line of a scaffolded tool → the first call answered by the new code, warm, median of \
         {rounds} round(s): `wharf plugin dev` (dev runtime for Python/JavaScript, incremental cargo for Rust) \
         against the release path (`wharf plugin build` with its check), both ending in one `wharf plugin call`:\n\n\
         | language | dev | release rebuild | dev / release | target |\n| --- | --- | --- | --- | --- |\n{}\n",
        rows.join("\n")
    );
    let out = wharf_tests::target_dir().join("bench");
    std::fs::create_dir_all(&out)?;
    std::fs::write(out.join("dev_loop.md"), &md)?;
    std::fs::write(
        out.join("dev_loop.json"),
        serde_json::to_string_pretty(&json!({"unit": "ms", "rounds": rounds, "languages": results}))? + "\n",
    )?;
    println!("{md}");
    Ok(())
}
