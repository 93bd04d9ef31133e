//! One generic component (`tests/generic/wit/types.wit`, no `wharf:plugin`
//! world) written four times — Rust (`tests/plugins/generic-rust`),
//! JavaScript (`tests/generic/js`, componentize-js), Python
//! (`tests/generic/python`, componentize-py) and C (`tests/generic/c`,
//! `wharf plugin build`: wit-bindgen c, clang + wasi-libc, wasm-tools) — and
//! called through the `wharf` binary (and an in-process host):
//!
//! - every function through `wharf plugin call` with the same inputs gives
//!   the same outputs in every language (a table of cases with edge cases:
//!   u64 beyond 2^53, chars around the surrogates, empty lists, none/some,
//!   `err` results), and the four derive the same tools and schemas;
//! - the Python and the JavaScript ones in an agent session (a headless
//!   turn in-process, as `wharf run`; scripted model) and over `wharf mcp
//!   serve`;
//! - `wharf plugin new NAME --lang c` → `wharf plugin build` → `wharf plugin
//!   call`.
//!
//! The JavaScript, Python and C components are built once per source change
//! and cached in `target/generic-langs/` (10–20 MB each for JS and Python).
//! A missing toolchain (`sdk/install-toolchains.sh`; C also needs clang, lld
//! and wasi-libc) skips, and fails under `CI`. Sizes and build times are
//! printed as `FIGURES` lines (`--nocapture`).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Instant;

use anyhow::Context;
use serde_json::{Value, json};

use crate::policy::{env, toml_str};
use wharf_tests::plugins;

fn root() -> PathBuf {
    wharf_tests::root()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

fn output(cmd: &mut Command) -> Output {
    cmd.output().with_context(|| format!("spawning {cmd:?}")).expect("the command starts")
}

/// The first line a tool prints for `--version` (part of the cache key).
fn version_of(tool: &Path, arg: &str) -> String {
    Command::new(tool)
        .arg(arg)
        .output()
        .map(|o| text(&o.stdout).lines().next().unwrap_or("").to_string())
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------
// Building the components (once per source change)
// ---------------------------------------------------------------------------

/// The languages, in the order results are reported.
const LANGS: [&str; 4] = ["rust", "js", "python", "c"];

/// Why a language's component is not there: a missing toolchain skips, a
/// failed build fails.
#[derive(Clone, Debug)]
enum Unbuilt {
    Missing(String),
    Failed(String),
}

/// Hashes the files of `dir` (not `target/`, `node_modules/`), by path and
/// content, into `h`.
fn hash_dir(dir: &Path, h: &mut DefaultHasher) {
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|r| r.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    entries.sort();
    for p in entries {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("").to_string();
        if p.is_dir() {
            if !["target", "node_modules", "__pycache__"].contains(&name.as_str()) {
                hash_dir(&p, h);
            }
        } else {
            name.hash(h);
            std::fs::read(&p).unwrap_or_default().hash(h);
        }
    }
}

/// `target/generic-langs/LANG-KEY.wasm`, built by `build` into a temporary
/// file and renamed into place unless it is there already.
fn cached(lang: &str, key: u64, build: impl FnOnce(&Path) -> Result<(), Unbuilt>) -> Result<PathBuf, Unbuilt> {
    let dir = wharf_tests::target_dir().join("generic-langs");
    std::fs::create_dir_all(&dir).map_err(|e| Unbuilt::Failed(format!("{}: {e}", dir.display())))?;
    let out = dir.join(format!("{lang}-{key:016x}.wasm"));
    if out.is_file() {
        return Ok(out);
    }
    let tmp = dir.join(format!("{lang}-{key:016x}.{}.tmp.wasm", std::process::id()));
    let t0 = Instant::now();
    build(&tmp)?;
    let size = std::fs::metadata(&tmp).map(|m| m.len()).unwrap_or(0);
    eprintln!(
        "FIGURES generic-langs {lang}: built in {:.1} s, {:.2} MiB ({size} bytes)",
        t0.elapsed().as_secs_f64(),
        size as f64 / 1048576.0
    );
    std::fs::rename(&tmp, &out).map_err(|e| Unbuilt::Failed(format!("rename {}: {e}", tmp.display())))?;
    Ok(out)
}

fn run_build(cmd: &mut Command, what: &str) -> Result<(), Unbuilt> {
    let o = output(cmd);
    if o.status.success() {
        Ok(())
    } else {
        Err(Unbuilt::Failed(format!("{what} failed ({}):\n{}\n{}", o.status, text(&o.stdout), text(&o.stderr))))
    }
}

fn build_js() -> Result<PathBuf, Unbuilt> {
    let bin = root().join("sdk/js/node_modules/.bin/componentize-js");
    if !bin.is_file() {
        return Err(Unbuilt::Missing("componentize-js (npm ci in sdk/js, or sdk/install-toolchains.sh --js)".into()));
    }
    let src = root().join("tests/generic/js");
    let mut h = DefaultHasher::new();
    hash_dir(&src, &mut h);
    hash_dir(&root().join("tests/generic/wit"), &mut h);
    std::fs::read(root().join("sdk/js/package-lock.json")).unwrap_or_default().hash(&mut h);
    cached("js", h.finish(), |out| {
        run_build(
            Command::new(&bin)
                .arg("app.js")
                .arg("--wit")
                .arg(root().join("tests/generic/wit"))
                .args(["-n", "types", "-d", "http", "-d", "fetch-event", "-o"])
                .arg(out)
                .current_dir(&src),
            "componentize-js",
        )
    })
}

fn build_python() -> Result<PathBuf, Unbuilt> {
    let Some(cpy) = std::env::var_os("WHARF_COMPONENTIZE_PY").map(PathBuf::from).or_else(|| on_path("componentize-py"))
    else {
        return Err(Unbuilt::Missing("componentize-py (sdk/install-toolchains.sh --python)".into()));
    };
    let src = root().join("tests/generic/python");
    let mut h = DefaultHasher::new();
    hash_dir(&src, &mut h);
    hash_dir(&root().join("tests/generic/wit"), &mut h);
    version_of(&cpy, "--version").hash(&mut h);
    cached("python", h.finish(), |out| {
        run_build(
            Command::new(&cpy)
                .arg("-d")
                .arg(root().join("tests/generic/wit"))
                .args(["-w", "types", "componentize", "app", "-p"])
                .arg(&src)
                .arg("-o")
                .arg(out)
                .current_dir(&src),
            "componentize-py",
        )
    })
}

/// What building C components needs and this machine lacks.
pub(crate) fn c_toolchain_missing() -> Option<String> {
    let mut missing: Vec<&str> =
        ["clang", "wasm-ld", "wit-bindgen", "wasm-tools"].into_iter().filter(|t| on_path(t).is_none()).collect();
    let libc = std::env::var_os("WHARF_WASI_SYSROOT").is_some()
        || Path::new("/usr/lib/wasm32-wasi/libc.a").is_file()
        || Path::new("/usr/share/wasi-sysroot/lib/wasm32-wasi/libc.a").is_file();
    if !libc {
        missing.push("wasi-libc");
    }
    (!missing.is_empty()).then(|| {
        format!(
            "the C component toolchain is missing: {} (apt-get install clang lld wasi-libc; sdk/install-toolchains.sh --c)",
            missing.join(", ")
        )
    })
}

fn build_c() -> Result<PathBuf, Unbuilt> {
    if let Some(m) = c_toolchain_missing() {
        return Err(Unbuilt::Missing(m));
    }
    let src = root().join("tests/generic/c");
    let mut h = DefaultHasher::new();
    hash_dir(&src, &mut h);
    hash_dir(&root().join("tests/generic/wit"), &mut h);
    std::fs::read(root().join("host/surface/plugin-tools/src/build.rs")).unwrap_or_default().hash(&mut h);
    for t in ["clang", "wit-bindgen", "wasm-tools"] {
        version_of(&on_path(t).unwrap_or_default(), "--version").hash(&mut h);
    }
    let home = tempfile::tempdir().map_err(|e| Unbuilt::Failed(e.to_string()))?;
    cached("c", h.finish(), |out| {
        run_build(
            wharf_tests::wharf(home.path()).args(["plugin", "build"]).arg(&src).arg("-o").arg(out).arg("--no-check"),
            "wharf plugin build tests/generic/c",
        )
    })
}

/// The component of `lang`, built once per test process (and cached on
/// disk across runs).
fn component(lang: &str) -> Result<PathBuf, Unbuilt> {
    static JS: OnceLock<Result<PathBuf, Unbuilt>> = OnceLock::new();
    static PY: OnceLock<Result<PathBuf, Unbuilt>> = OnceLock::new();
    static C: OnceLock<Result<PathBuf, Unbuilt>> = OnceLock::new();
    match lang {
        "rust" => Ok(wharf_tests::plugin(plugins::GENERIC_RUST)),
        "js" => JS.get_or_init(build_js).clone(),
        "python" => PY.get_or_init(build_python).clone(),
        "c" => C.get_or_init(build_c).clone(),
        other => Err(Unbuilt::Failed(format!("no language {other}"))),
    }
}

/// Every language's component, or `None` after reporting the skip (a build
/// failure panics).
fn components(test: &str, langs: &[&'static str]) -> Option<Vec<(&'static str, PathBuf)>> {
    let built: Vec<(&'static str, Result<PathBuf, Unbuilt>)> = std::thread::scope(|s| {
        let handles: Vec<_> = langs.iter().map(|l| (*l, s.spawn(move || component(l)))).collect();
        handles
            .into_iter()
            .map(|(l, h)| (l, h.join().unwrap_or_else(|_| Err(Unbuilt::Failed("build thread panicked".into())))))
            .collect()
    });
    let mut out = Vec::new();
    let mut missing = Vec::new();
    for (lang, r) in built {
        match r {
            Ok(p) => out.push((lang, p)),
            Err(Unbuilt::Missing(m)) => missing.push(format!("{lang}: {m}")),
            Err(Unbuilt::Failed(f)) => panic!("building the {lang} component: {f}"),
        }
    }
    if !missing.is_empty() {
        wharf_tests::skip(test, &missing.join("; "));
        return None;
    }
    Some(out)
}

// ---------------------------------------------------------------------------
// Calling
// ---------------------------------------------------------------------------

/// What a call gave: the result as JSON, or the tool error's message.
#[derive(Debug, Clone)]
enum Outcome {
    Ok(Value),
    Err(String),
}

/// `wharf plugin call FILE TOOL ARGS`: a successful call's content is the
/// result as JSON text; a failed one is an error with its message.
fn call(home: &Path, file: &Path, tool: &str, args: &Value) -> Outcome {
    let o = output(wharf_tests::wharf(home).args(["plugin", "call"]).arg(file).arg(tool).arg(args.to_string()));
    let stdout = text(&o.stdout);
    let v: Value = serde_json::from_str(stdout.trim())
        .with_context(|| format!("{tool}: the call output is not JSON: {stdout}\n{}", text(&o.stderr)))
        .expect("wharf plugin call prints JSON");
    let content = v["content"].as_str().unwrap_or("").to_string();
    if o.status.success() && v["is_error"] != true {
        let result = serde_json::from_str(&content).with_context(|| format!("{tool}: the content is not JSON: {v}"));
        Outcome::Ok(result.expect("a successful call's content is JSON"))
    } else {
        Outcome::Err(content)
    }
}

/// JSON equality with numbers compared by value (`0` and `0.0` are one
/// number; integers beyond 2^53 are strings in this mapping).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// Standard padded base64 (the mapping of `list<u8>`).
fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                s.push(char::from(A[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// One row of the table: a tool, its arguments and what every language
/// must answer.
struct Case {
    tool: &'static str,
    args: Value,
    want: Outcome,
    /// componentize-js 0.23.0 traps when a function returns a negative
    /// `s64` directly (not inside a tuple or record); such rows are checked
    /// to still trap in JS, so a fixed componentize-js shows up here.
    js_traps: bool,
}

fn ok(tool: &'static str, args: Value, want: Value) -> Case {
    Case { tool, args, want: Outcome::Ok(want), js_traps: false }
}

fn err(tool: &'static str, args: Value, msg: &str) -> Case {
    Case { tool, args, want: Outcome::Err(msg.to_string()), js_traps: false }
}

fn cases() -> Vec<Case> {
    // The WIT says 3.141592653589793, which is exactly f64::consts::PI.
    let pi = std::f64::consts::PI;
    let bytes: Vec<u8> = (0..=255).collect();
    let reversed: Vec<u8> = bytes.iter().rev().copied().collect();
    let mut v = vec![
        ok("greet", json!({"name": "Wharf"}), json!("Hello, Wharf!")),
        ok("greet", json!({"name": ""}), json!("Hello, !")),
        ok("greet", json!({"name": "wörld 🌊"}), json!("Hello, wörld 🌊!")),
        ok("kinds_add", json!({"a": 2, "b": 3}), json!(5)),
        ok("kinds_add", json!({"a": i32::MAX, "b": 1}), json!(i32::MIN)),
        ok("kinds_add", json!({"a": i32::MIN, "b": -1}), json!(i32::MAX)),
        ok(
            "kinds_ints",
            json!({"a": 255, "b": -128, "c": 65535, "d": -32768, "e": u32::MAX, "f": i32::MIN,
                   "g": u64::MAX.to_string(), "h": i64::MIN.to_string()}),
            json!([255, -128, 65535, -32768, u32::MAX, i32::MIN, u64::MAX.to_string(), i64::MIN.to_string()]),
        ),
        // 2^53 − 1 is still a JSON integer; 2^53 + 1 (not a double) a string.
        ok(
            "kinds_ints",
            json!({"a": 0, "b": 0, "c": 0, "d": 0, "e": 0, "f": 0, "g": (1u64 << 53) - 1, "h": -((1i64 << 53) - 1)}),
            json!([0, 0, 0, 0, 0, 0, (1u64 << 53) - 1, -((1i64 << 53) - 1)]),
        ),
        ok(
            "kinds_ints",
            json!({"a": 1, "b": -1, "c": 1, "d": -1, "e": 1, "f": -1,
                   "g": ((1u64 << 53) + 1).to_string(), "h": i64::MAX.to_string()}),
            json!([1, -1, 1, -1, 1, -1, ((1u64 << 53) + 1).to_string(), i64::MAX.to_string()]),
        ),
        ok("kinds_floats", json!({"a": 1.5, "b": 2.25}), json!(3.75)),
        // `a` is an f32: 0.1 is rounded to f32 first, then added in f64.
        ok("kinds_floats", json!({"a": 0.1, "b": 0.2}), json!(f64::from(0.1_f32) + 0.2)),
        ok("kinds_floats", json!({"a": -0.0, "b": 0.0}), json!(0.0)),
        ok("kinds_next_char", json!({"c": "a"}), json!("b")),
        ok("kinds_next_char", json!({"c": "\u{D7FE}"}), json!("\u{D7FF}")),
        ok("kinds_next_char", json!({"c": "\u{D7FF}"}), json!("\u{E000}")),
        ok("kinds_next_char", json!({"c": "\u{FFFF}"}), json!("\u{10000}")),
        ok("kinds_next_char", json!({"c": "🌊"}), json!("🌋")),
        ok("kinds_next_char", json!({"c": "\u{10FFFF}"}), json!("\u{0}")),
        ok("kinds_shout", json!({"s": "hello, wörld"}), json!("HELLO, WöRLD!")),
        ok("kinds_shout", json!({"s": ""}), json!("!")),
        ok("kinds_reverse_bytes", json!({"data": base64(&[1, 2, 3, 255])}), json!(base64(&[255, 3, 2, 1]))),
        ok("kinds_reverse_bytes", json!({"data": base64(&bytes)}), json!(base64(&reversed))),
        ok("kinds_reverse_bytes", json!({"data": ""}), json!("")),
        ok("kinds_sum", json!({"xs": []}), json!(0)),
        ok("kinds_sum", json!({"xs": [1, 2, 3]}), json!(6)),
        ok("kinds_sum", json!({"xs": [(1i64 << 53) - 1, 1]}), json!((1u64 << 53).to_string())),
        ok("kinds_sum", json!({"xs": [i64::MIN.to_string(), "-1"]}), json!(i64::MAX.to_string())),
        ok(
            "kinds_mid",
            json!({"a": {"x": 1.0, "y": 2.0, "label": null}, "b": {"x": 3.0, "y": 5.0, "label": "b"}}),
            json!({"x": 2.0, "y": 3.5, "label": "b"}),
        ),
        ok(
            "kinds_mid",
            json!({"a": {"x": -1.0, "y": 0.5, "label": "a"}, "b": {"x": 1.0, "y": 0.5, "label": "b"}}),
            json!({"x": 0.0, "y": 0.5, "label": "a"}),
        ),
        // An `option` field may be left out.
        ok("kinds_mid", json!({"a": {"x": 0, "y": 0}, "b": {"x": 2, "y": 4}}), json!({"x": 1, "y": 2, "label": null})),
        ok("kinds_swap", json!({"t": ["a", 7]}), json!([7, "a"])),
        ok("kinds_swap", json!({"t": ["", u32::MAX]}), json!([u32::MAX, ""])),
        ok("kinds_area", json!({"s": {"circle": 2.0}}), json!(pi * 2.0 * 2.0)),
        ok("kinds_area", json!({"s": {"rect": {"x": 2.5, "y": 4.0, "label": null}}}), json!(10.0)),
        ok("kinds_area", json!({"s": "empty"}), json!(0.0)),
        ok("kinds_rotate", json!({"c": "red"}), json!("green")),
        ok("kinds_rotate", json!({"c": "green"}), json!("blue")),
        ok("kinds_rotate", json!({"c": "blue"}), json!("red")),
        ok("kinds_toggle", json!({"p": []}), json!(["read", "write", "exec"])),
        ok("kinds_toggle", json!({"p": ["exec", "read"]}), json!(["write"])),
        ok("kinds_toggle", json!({"p": ["read", "write", "exec"]}), json!([])),
        ok("kinds_double", json!({"x": null}), json!(null)),
        ok("kinds_double", json!({"x": 21}), json!(42)),
        ok("kinds_double", json!({"x": 2147483648u32}), json!(0)),
        ok("kinds_double", json!({"x": u32::MAX}), json!(u32::MAX - 1)),
        ok("kinds_divide", json!({"a": 7, "b": 2}), json!(3)),
        ok("kinds_divide", json!({"a": -7, "b": 2}), json!(-3)),
        ok("kinds_divide", json!({"a": i32::MIN, "b": 1}), json!(i32::MIN)),
        err("kinds_divide", json!({"a": 1, "b": 0}), "division by zero"),
        err("kinds_divide", json!({"a": i32::MIN, "b": -1}), "overflow"),
    ];
    for (xs, want) in [
        (json!([-1]), json!(-1)),
        (json!([i64::MAX.to_string(), 1]), json!(i64::MIN.to_string())),
        (json!([-5, 2]), json!(-3)),
    ] {
        v.push(Case { tool: "kinds_sum", args: json!({ "xs": xs }), want: Outcome::Ok(want), js_traps: true });
    }
    v
}

/// `wharf plugin inspect FILE --json`: (tool name, input schema) pairs.
fn tools_of(home: &Path, file: &Path) -> Vec<(String, Value)> {
    let o = output(wharf_tests::wharf(home).args(["plugin", "inspect"]).arg(file).arg("--json"));
    assert!(o.status.success(), "inspect {}: {}", file.display(), text(&o.stderr));
    let v: Value = serde_json::from_str(text(&o.stdout).trim()).expect("inspect JSON");
    let mut tools: Vec<(String, Value)> = v["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            let schema = match &t["input_schema"] {
                Value::String(s) => serde_json::from_str(s).unwrap_or(Value::Null),
                other => other.clone(),
            };
            (t["name"].as_str().unwrap_or("").to_string(), schema)
        })
        .collect();
    tools.sort_by(|a, b| a.0.cmp(&b.0));
    tools
}

#[test]
fn every_language_gives_the_same_outputs_for_the_same_inputs() -> anyhow::Result<()> {
    let Some(comps) = components("every_language_gives_the_same_outputs_for_the_same_inputs", &LANGS) else {
        return Ok(());
    };
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let home = home.path();

    // The same tools with the same schemas, derived from the same WIT.
    let (_, rust) = &comps[0];
    let want_tools = tools_of(home, rust);
    let names: Vec<&str> = want_tools.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.len(), 15, "{names:?}");
    assert!(names.contains(&"greet") && names.contains(&"kinds_next_char"), "{names:?}");
    for (lang, file) in &comps[1..] {
        // Exactly: componentize-py's own `exports.init` is not a tool.
        let tools = tools_of(home, file);
        assert_eq!(tools, want_tools, "{lang} derives other tools or schemas than rust");
    }

    // Every case in every language, the languages side by side.
    let cases = cases();
    let tools_called: std::collections::BTreeSet<&str> = cases.iter().map(|c| c.tool).collect();
    assert_eq!(tools_called.len(), names.len(), "every function is in the table");
    let results: Vec<(&str, Vec<Outcome>)> = std::thread::scope(|s| {
        let handles: Vec<_> = comps
            .iter()
            .map(|(lang, file)| {
                let cases = &cases;
                (*lang, s.spawn(move || cases.iter().map(|c| call(home, file, c.tool, &c.args)).collect::<Vec<_>>()))
            })
            .collect();
        handles.into_iter().map(|(l, h)| (l, h.join().unwrap_or_else(|_| panic!("{l}: calls panicked")))).collect()
    });
    let t0 = Instant::now();
    let mut failures = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        for (lang, outcomes) in &results {
            let got = &outcomes[i];
            let good = match (&case.want, got) {
                _ if case.js_traps && *lang == "js" => {
                    matches!(got, Outcome::Err(m) if m.contains("trap") || m.contains("unreachable"))
                }
                (Outcome::Ok(w), Outcome::Ok(g)) => same(w, g),
                (Outcome::Err(w), Outcome::Err(g)) => g == w,
                _ => false,
            };
            if !good {
                failures.push(format!("{lang} {}({}) = {got:?}, want {:?}", case.tool, case.args, case.want));
            }
        }
    }
    eprintln!(
        "FIGURES generic-langs: {} cases x {} languages through `wharf plugin call` ({:.1} s to compare)",
        cases.len(),
        comps.len(),
        t0.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
    Ok(())
}

/// A tool row for a component at an absolute path.
fn row(id: &str, file: &Path) -> String {
    format!("\n[[plugin]]\nid = \"{id}\"\npath = {}\n", toml_str(&file.display().to_string()))
}

#[test]
fn the_python_component_runs_in_an_agent_session_and_over_mcp() -> anyhow::Result<()> {
    in_a_session_and_over_mcp("the_python_component_runs_in_an_agent_session_and_over_mcp", "python")
}

#[test]
fn the_js_component_runs_in_an_agent_session_and_over_mcp() -> anyhow::Result<()> {
    in_a_session_and_over_mcp("the_js_component_runs_in_an_agent_session_and_over_mcp", "js")
}

/// The component of `lang` in a headless turn (scripted model, two
/// calls, one `err`) and `wharf mcp serve` (list, two calls).
fn in_a_session_and_over_mcp(test: &str, lang: &'static str) -> anyhow::Result<()> {
    let Some(comps) = components(test, &[lang]) else {
        return Ok(());
    };
    let file = &comps[0].1;

    // Exactly the WIT's functions (for Python: componentize-py's
    // build-time `exports.init`, still exported by the component, is left
    // out).
    let inspect_home = tempfile::tempdir().context("creating a temp dir")?;
    let names: Vec<String> = tools_of(inspect_home.path(), file).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, crate::generic_components::TOOLS, "the {lang} component's tools");

    // A headless turn: the scripted model calls two of its tools, one `err`.
    let env = env();
    let calls = [
        ("kinds_mid", json!({"a": {"x": 1, "y": 1, "label": "p"}, "b": {"x": 3, "y": 5}})),
        ("kinds_divide", json!({"a": 1, "b": 0})),
    ];
    let list: Vec<String> =
        calls.iter().map(|(n, a)| format!("{{ name = \"{n}\", arguments = {} }}", toml_str(&a.to_string()))).collect();
    let body = format!(
        "{}\n[[plugin]]\nid = \"scripted\"\npath = \"${{plugin_dir}}/llm-scripted.wasm\"\n[plugin.config]\n\
         model = \"scripted-generic\"\n\n[[plugin.config.turns]]\ntool_calls = [{}]\nfinish = \"tool_calls\"\n\n\
         [[plugin.config.turns]]\ntext = \"done\"\nfinish = \"stop\"\n",
        row("types", file),
        list.join(", ")
    );
    let profile = env.profile(&format!("generic-{lang}"), &body);
    let run = env.run(&profile, None, &[]);
    assert_eq!(run.code, 0, "{}", run.dump());
    let results: Vec<&Value> = run.events.iter().filter(|e| e["type"] == "tool/result").map(|e| &e["data"]).collect();
    assert_eq!(results.len(), 2, "{}", run.dump());
    let by_name = |n: &str| results.iter().find(|r| r["name"] == n).copied().cloned().unwrap_or_default();
    let mid = by_name("kinds_mid");
    assert_eq!(mid["is_error"], false, "{mid}");
    let got: Value = serde_json::from_str(mid["content"].as_str().unwrap_or("")).unwrap_or_default();
    assert!(same(&got, &json!({"x": 2, "y": 3, "label": "p"})), "{mid}");
    let div = by_name("kinds_divide");
    assert_eq!(div["is_error"], true, "{div}");
    assert!(div["content"].as_str().unwrap_or("").contains("division by zero"), "{div}");

    // `wharf mcp serve`: the same tools listed, one called.
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let ws = tempfile::tempdir().context("creating a temp dir")?;
    let profile = home.path().join("serve.toml");
    std::fs::write(&profile, row("types", file)).context("writing profile")?;
    let mut c = Command::new(crate::mcp::fixture());
    c.arg("client")
        .args(["--call", &format!("kinds_next_char={}", json!({"c": "\u{D7FF}"}))])
        .args(["--call", &format!("kinds_divide={}", json!({"a": -2147483648i64, "b": -1}))])
        .arg("--")
        .arg(wharf_tests::wharf_bin())
        .args(["mcp", "serve", "--profile"])
        .arg(&profile)
        .arg("-w")
        .arg(ws.path())
        .arg("--session-dir")
        .arg(home.path().join("sessions"))
        .env("HOME", home.path())
        .env("WHARF_CACHE_DIR", wharf_tests::target_dir().join("test-cache"))
        .env("WHARF_LOG", "warn");
    let o = output(&mut c);
    let stdout = text(&o.stdout);
    assert!(o.status.success(), "{stdout}\n{}", text(&o.stderr));
    let report: Value = serde_json::from_str(stdout.trim())
        .with_context(|| format!("the MCP client's report is not JSON: {stdout}"))?;
    let mut names: Vec<&str> =
        report["tools"].as_array().into_iter().flatten().filter_map(|t| t["name"].as_str()).collect();
    names.sort();
    assert_eq!(names, crate::generic_components::TOOLS, "over MCP");
    let c = report["calls"].as_array().cloned().unwrap_or_default();
    let text_of = |v: &Value| v["result"]["content"][0]["text"].as_str().unwrap_or("").to_string();
    assert_eq!(c[0]["result"]["isError"], false, "{}", c[0]);
    assert_eq!(serde_json::from_str::<Value>(&text_of(&c[0])).unwrap_or_default(), json!("\u{E000}"), "{}", c[0]);
    assert_eq!(c[1]["result"]["isError"], true, "{}", c[1]);
    assert!(text_of(&c[1]).contains("overflow"), "{}", c[1]);
    Ok(())
}

#[test]
fn plugin_new_lang_c_builds_and_calls() -> anyhow::Result<()> {
    if let Some(m) = c_toolchain_missing() {
        wharf_tests::skip("plugin_new_lang_c_builds_and_calls", &m);
        return Ok(());
    }
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let home = home.path();
    let work = tempfile::tempdir().context("creating a temp dir")?;
    let work = work.path();

    // Only tools: other kinds need the wharf:plugin world.
    let o = output(
        wharf_tests::wharf(home).current_dir(work).args(["plugin", "new", "p", "--lang", "c", "--kind", "policy"]),
    );
    assert!(!o.status.success() && text(&o.stderr).contains("--kind tool"), "{}", text(&o.stderr));
    assert!(!work.join("p").exists());

    let o = output(wharf_tests::wharf(home).current_dir(work).args(["plugin", "new", "hello-c", "--lang", "c"]));
    assert!(o.status.success(), "{}", text(&o.stderr));
    let dir = work.join("hello-c");
    for f in ["component.toml", "wit/world.wit", "src/component.c", "README.md"] {
        assert!(dir.join(f).is_file(), "{f}: {}", text(&o.stdout));
    }
    let t0 = Instant::now();
    let o = output(wharf_tests::wharf(home).args(["plugin", "build"]).arg(&dir).arg("--json"));
    assert!(o.status.success(), "build:\n{}\n{}", text(&o.stdout), text(&o.stderr));
    let report: Value = serde_json::from_str(text(&o.stdout).trim()).context("parsing JSON")?;
    assert_eq!(report["lang"], "c", "{report}");
    assert_eq!(report["tools"][0]["name"], "hello_c", "{report}");
    let wasm = PathBuf::from(report["path"].as_str().unwrap_or(""));
    assert_eq!(wasm, dir.join("target/hello_c.wasm"));
    eprintln!(
        "FIGURES plugin new --lang c: {} bytes, built and checked in {:.1} s",
        report["size"],
        t0.elapsed().as_secs_f64()
    );

    match call(home, &wasm, "hello_c", &json!({"name": "Wharf", "times": 2})) {
        Outcome::Ok(v) => assert_eq!(v, json!("Hello, Wharf!\nHello, Wharf!")),
        e => panic!("{e:?}"),
    }
    match call(home, &wasm, "hello_c", &json!({"name": "é"})) {
        Outcome::Ok(v) => assert_eq!(v, json!("Hello, é!")),
        e => panic!("{e:?}"),
    }
    match call(home, &wasm, "hello_c", &json!({"name": "x", "times": 11})) {
        Outcome::Err(m) => assert!(m.contains("between 1 and 10"), "{m}"),
        e => panic!("{e:?}"),
    }
    assert!(matches!(call(home, &wasm, "hello_c", &json!({})), Outcome::Err(_)), "a missing name is an error");

    // A compile error is the build's failure, with clang's message.
    std::fs::write(dir.join("src/component.c"), "int broken( {\n").context("writing src/component.c")?;
    let o = output(wharf_tests::wharf(home).args(["plugin", "build"]).arg(&dir));
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("clang failed"), "{}", text(&o.stderr));
    Ok(())
}
