//! The plugin author's edit loop (issue 39): for a scaffolded tool in
//! Python, JavaScript, Rust and C (when its toolchain is there), one line of the source is edited and the
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
//! the compile cache, as a host's reload does).
//!
//! **Cold** (one round each, same run): a fresh compile cache
//! (`WHARF_CACHE_DIR`) with no dev runtime in it — dev: save → `wharf
//! plugin dev` started (builds the language's runtime, compiles it) →
//! `ready` → the call answers; release: save → `wharf plugin build` into
//! another fresh cache → the call answers. Cargo's own target directory
//! stays warm for Rust (the SDK's dependencies are not the loop).
//!
//! Writes `target/bench/dev_loop.{md,json}`; `WHARF_BENCH_QUICK=1` runs
//! one warm round per language instead of three.

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

/// `wharf` with `cache` as its compile cache (`None`: the shared one).
fn wharf_with(home: &Path, cache: Option<&Path>) -> Command {
    let mut c = wharf(home);
    if let Some(dir) = cache {
        c.env("WHARF_CACHE_DIR", dir);
    }
    c
}

/// `--profile` for `plugin build` and `plugin dev`: an empty profile, so
/// their shadowing check (the built tools against the profile's rows,
/// which loads every row) is not part of the loop measured.
fn no_rows(home: &Path) -> anyhow::Result<[String; 2]> {
    let p = home.join("no-rows.toml");
    std::fs::write(&p, "")?;
    Ok(["--profile".to_string(), p.display().to_string()])
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(f64::NAN)
}

/// `wharf plugin call FILE TOOL` answers with `want` in its content.
fn call_answers(home: &Path, file: &Path, tool: &str, want: &str) -> anyhow::Result<()> {
    call_answers_with(home, None, file, tool, want)
}

/// [`call_answers`] with a compile cache of its own.
fn call_answers_with(home: &Path, cache: Option<&Path>, file: &Path, tool: &str, want: &str) -> anyhow::Result<()> {
    let o =
        wharf_with(home, cache).args(["plugin", "call"]).arg(file).arg(tool).arg(r#"{"name": "bench"}"#).output()?;
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

const LANGS: [Lang; 4] = [
    Lang { lang: "python", file: "app.py", line: "f\"WORD, {args.name}!\"", target_ms: 1000.0 },
    Lang { lang: "js", file: "app.js", line: "`WORD, ${name}!`", target_ms: 1000.0 },
    Lang { lang: "rust", file: "src/lib.rs", line: "format!(\"WORD, {}!\", args.name)", target_ms: 3000.0 },
    Lang { lang: "c", file: "src/component.c", line: "pre[] = \"WORD, \"", target_ms: 3000.0 },
];

/// C needs clang, wasm-ld, wit-bindgen and wasm-tools (and wasi-libc);
/// without them its rows are left out (and said so).
fn c_toolchain_present() -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    ["clang", "wasm-ld", "wit-bindgen", "wasm-tools"]
        .iter()
        .all(|t| std::env::split_paths(&path).any(|d| d.join(t).is_file()))
}

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

fn start_dev(home: &Path, cache: Option<&Path>, dir: &Path) -> anyhow::Result<Dev> {
    let mut child = wharf_with(home, cache)
        .args(["plugin", "dev"])
        .args(no_rows(home)?)
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
    let mut cold_rows = Vec::new();
    for l in &LANGS {
        if l.lang == "c" && !c_toolchain_present() {
            eprintln!("dev_loop: C left out (clang, wasm-ld, wit-bindgen or wasm-tools missing)");
            continue;
        }
        let name = format!("loop-{}", l.lang);
        let tool = name.replace('-', "_");
        let o = wharf(home).current_dir(work.path()).args(["plugin", "new", &name, "--lang", l.lang]).output()?;
        if !o.status.success() {
            bail!("plugin new {}: {}", l.lang, String::from_utf8_lossy(&o.stderr));
        }
        let dir: PathBuf = work.path().join(&name);
        let build_with = |dir: &Path, cache: Option<&Path>| -> anyhow::Result<PathBuf> {
            let o =
                wharf_with(home, cache).args(["plugin", "build", "--json"]).args(no_rows(home)?).arg(dir).output()?;
            if !o.status.success() {
                bail!("plugin build: {}", String::from_utf8_lossy(&o.stderr));
            }
            let v: Value = serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim())?;
            Ok(PathBuf::from(v["path"].as_str().unwrap_or("")))
        };
        let build = |dir: &Path| build_with(dir, None);
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
        let dev = start_dev(home, None, &dir)?;
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

        // Cold: fresh compile caches, no dev runtime; one round each.
        let caches = tempfile::tempdir()?;
        let (cold_rel_cache, cold_dev_cache) = (caches.path().join("release"), caches.path().join("dev"));
        set_word(&dir, l, &word, "ColdRel")?;
        let t0 = Instant::now();
        let out = build_with(&dir, Some(&cold_rel_cache))?;
        call_answers_with(home, Some(&cold_rel_cache), &out, &tool, "ColdRel, bench!")?;
        let cold_release = t0.elapsed().as_secs_f64() * 1e3;
        set_word(&dir, l, "ColdRel", "ColdDev")?;
        let t0 = Instant::now();
        let dev = start_dev(home, Some(&cold_dev_cache), &dir)?;
        dev.next("ready")?;
        call_answers_with(home, Some(&cold_dev_cache), &wasm, &tool, "ColdDev, bench!")?;
        let cold_dev = t0.elapsed().as_secs_f64() * 1e3;
        drop(dev);
        set_word(&dir, l, "ColdDev", &word)?;
        cold_rows.push(format!(
            "| {} | {:.0} ms | {:.0} ms | {:.3}× |",
            l.lang,
            cold_dev,
            cold_release,
            cold_dev / cold_release
        ));

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
                            "release_median_ms": r, "dev_vs_release": d / r, "target_ms": l.target_ms, "met": met,
                            "cold_dev_ms": cold_dev, "cold_release_ms": cold_release,
                            "cold_dev_vs_release": cold_dev / cold_release}));
    }
    let md = format!(
        "Save of one edited line of a scaffolded tool → the first call answered by the new code, warm, median of \
         {rounds} round(s): `wharf plugin dev` (dev runtime for Python/JavaScript, incremental cargo for Rust, the release steps for C) \
         against the release path (`wharf plugin build` with its check), both ending in one `wharf plugin call`:\n\n\
         | language | dev | release rebuild | dev / release | target |\n| --- | --- | --- | --- | --- |\n{}\n\n\
         Cold (fresh compile cache, no dev runtime; one round): save → `wharf plugin dev` started → `ready` → the \
         call answers, against save → `wharf plugin build` → the call, each with a fresh cache:\n\n\
         | language | cold dev | cold release | dev / release |\n| --- | --- | --- | --- |\n{}\n",
        rows.join("\n"),
        cold_rows.join("\n")
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
