//! `wharf plugin dev`: the plugin author's edit loop, through the `wharf`
//! binary and an in-process host.
//!
//! - a Python and a JavaScript plugin edited while `wharf plugin dev` runs
//!   answer `wharf plugin call` with the new code; a save with a syntax error
//!   is reported as `FILE:LINE` and the previous version keeps serving;
//! - a host with a `dev = true` row picks up each published version through
//!   hot reload;
//! - the dev runtime and the release build (`wharf plugin build`) give the
//!   same results on the SDK examples' calls, Python third-party packages
//!   (a venv's site-packages, vendored, by name from `dependencies`)
//!   included; both commands name the row that wins when another row of
//!   the profile offers the same tool;
//! - C: each save rebuilds with the release steps; a compile error is
//!   clang's FILE:LINE and the previous version keeps serving.
//!
//! Needs the Python/JavaScript toolchains (see `plugins_langs`); the dev
//! runtimes are built once into the tests' compile cache.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use wharf_tests::host::TestHost;

fn on_path(name: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|d| d.join(name).is_file())
}

/// True when componentize-py, componentize-js and esbuild are there; else
/// the test is reported as skipped.
fn toolchains_ready(test: &str) -> bool {
    let bin = wharf_tests::root().join("sdk/js/node_modules/.bin");
    let mut missing = Vec::new();
    if std::env::var_os("WHARF_COMPONENTIZE_PY").is_none() && !on_path("componentize-py") {
        missing.push("componentize-py");
    }
    for tool in ["componentize-js", "esbuild"] {
        if !bin.join(tool).is_file() && !on_path(tool) {
            missing.push(tool);
        }
    }
    if missing.is_empty() {
        return true;
    }
    wharf_tests::skip(test, &format!("missing {}; run sdk/install-toolchains.sh", missing.join(", ")));
    false
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A running `wharf plugin dev DIR --json`: its events, line by line.
struct DevProcess {
    child: Child,
    events: mpsc::Receiver<Value>,
}

impl DevProcess {
    fn start(home: &Path, dir: &Path) -> anyhow::Result<Self> {
        let mut child = wharf_tests::wharf(home)
            .args(["plugin", "dev"])
            .arg(dir)
            .arg("--json")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("spawning wharf plugin dev")?;
        let out = child.stdout.take().context("no stdout")?;
        let (tx, events) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    let _ = tx.send(v);
                }
            }
        });
        Ok(Self { child, events })
    }

    /// The next event named `name` (others before it are skipped). The
    /// wait is a hang guard only: the first one builds the dev runtime.
    fn next(&mut self, name: &str) -> anyhow::Result<Value> {
        loop {
            let v = self
                .events
                .recv_timeout(Duration::from_secs(600))
                .with_context(|| format!("wharf plugin dev: no `{name}` event (it ended or hangs)"))?;
            if v["event"] == name {
                return Ok(v);
            }
            eprintln!("plugin dev event (skipped while waiting for {name}): {v}");
        }
    }
}

impl Drop for DevProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `wharf plugin call FILE TOOL ARGS`: the result JSON.
fn call(home: &Path, file: &Path, tool: &str, args: &Value, flags: &[&str]) -> anyhow::Result<Value> {
    let o = wharf_tests::wharf(home)
        .args(["plugin", "call"])
        .arg(file)
        .arg(tool)
        .arg(args.to_string())
        .args(flags)
        .output()
        .context("spawning wharf plugin call")?;
    serde_json::from_str(text(&o.stdout).trim())
        .with_context(|| format!("plugin call output is not JSON: {}\n{}", text(&o.stdout), text(&o.stderr)))
}

fn scaffold(home: &Path, work: &Path, name: &str, lang: &str) -> anyhow::Result<PathBuf> {
    let o = wharf_tests::wharf(home)
        .current_dir(work)
        .args(["plugin", "new", name, "--lang", lang])
        .output()
        .context("spawning wharf plugin new")?;
    anyhow::ensure!(o.status.success(), "plugin new {lang}: {}", text(&o.stderr));
    Ok(work.join(name))
}

fn edit(file: &Path, from: &str, to: &str) -> anyhow::Result<()> {
    let t = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    anyhow::ensure!(t.contains(from), "{} has no `{from}`", file.display());
    std::fs::write(file, t.replace(from, to)).with_context(|| format!("writing {}", file.display()))
}

/// Python and JavaScript: save → the new code answers; a syntax error is
/// reported as FILE:LINE and the previous version keeps serving; fixing it
/// serves again.
#[test]
fn python_and_js_dev_plugins_answer_with_the_new_code_and_survive_a_syntax_error() -> anyhow::Result<()> {
    if !toolchains_ready("python_and_js_dev_plugins_answer_with_the_new_code_and_survive_a_syntax_error") {
        return Ok(());
    }
    let home = tempfile::tempdir()?;
    let work = tempfile::tempdir()?;
    for (lang, file, broken) in [("python", "app.py", "def broken(:\n"), ("js", "app.js", "let broken = ;\n")] {
        let name = format!("dev-{lang}");
        let tool = name.replace('-', "_");
        let dir = scaffold(home.path(), work.path(), &name, lang)?;
        let wasm = dir.join("target/dev").join(format!("{tool}.wasm"));
        let mut dev = DevProcess::start(home.path(), &dir)?;
        let ready = dev.next("ready")?;
        assert_eq!(ready["tools"], json!([tool]), "{lang}: {ready}");
        let greet = |args: Value| call(home.path(), &wasm, &tool, &args, &[]);
        assert_eq!(greet(json!({"name": "Wharf"}))?["content"], "Hello, Wharf!", "{lang}");

        let src = dir.join(file);
        edit(&src, "Hello, ", "Howdy, ")?;
        dev.next("reloaded")?;
        let v = greet(json!({"name": "Wharf", "times": 2}))?;
        assert_eq!(v["content"], "Howdy, Wharf!\nHowdy, Wharf!", "{lang}: {v}");

        // A syntax error: reported with the file and line, not published.
        let good = std::fs::read_to_string(&src)?;
        let line = good.lines().count() + 1;
        std::fs::write(&src, format!("{good}{broken}"))?;
        let err = dev.next("error")?;
        let msg = err["error"].as_str().unwrap_or("");
        assert!(msg.starts_with(&format!("{file}:{line}:")), "{lang}: {err}");
        let v = greet(json!({"name": "Wharf"}))?;
        assert_eq!(v["content"], "Howdy, Wharf!", "{lang}: the previous version keeps serving: {v}");

        // An error at import time (Python) / evaluation (JS): file:line too.
        let raise = if lang == "python" { "raise ValueError('top')\n" } else { "throw new Error('top');\n" };
        std::fs::write(&src, format!("{good}{raise}"))?;
        let err = dev.next("error")?;
        let msg = err["error"].as_str().unwrap_or("");
        assert!(msg.starts_with(&format!("{file}:")) && msg.contains("top"), "{lang}: {err}");

        std::fs::write(&src, good.replace("Howdy, ", "Welcome, "))?;
        dev.next("reloaded")?;
        assert_eq!(greet(json!({"name": "Wharf"}))?["content"], "Welcome, Wharf!", "{lang}");

        // Another file of the plugin, imported relatively (JavaScript: it
        // imports an npm package in turn); saving it alone reloads.
        let (module, import, word, words_src) = if lang == "python" {
            ("words.py", "import words\n", "{words.WORD}, ", "WORD = \"Bonjour\"\n")
        } else {
            let pkg = dir.join("node_modules/tiny-words");
            std::fs::create_dir_all(&pkg)?;
            std::fs::write(
                pkg.join("package.json"),
                r#"{"name": "tiny-words", "version": "1.0.0", "main": "index.js"}"#,
            )?;
            std::fs::write(pkg.join("index.js"), "exports.word = \"Bonjour\";\n")?;
            (
                "words.js",
                "import { WORD } from \"./words.js\";\n",
                "${WORD}, ",
                "import { word } from \"tiny-words\";\nexport const WORD = word;\n",
            )
        };
        std::fs::write(dir.join(module), words_src)?;
        std::fs::write(&src, format!("{import}{}", good.replace("Howdy, ", word)))?;
        dev.next("reloaded")?;
        assert_eq!(greet(json!({"name": "Wharf"}))?["content"], "Bonjour, Wharf!", "{lang}");
        std::fs::write(dir.join(module), words_src.replace("word;", "\"Salut\";").replace("Bonjour", "Salut"))?;
        dev.next("reloaded")?;
        assert_eq!(greet(json!({"name": "Wharf"}))?["content"], "Salut, Wharf!", "{lang}");

        // A package that is not installed: FILE:LINE (line 1), and the
        // previous version keeps serving.
        let serving = std::fs::read_to_string(&src)?;
        let missing = if lang == "python" { "import not_installed_pkg\n" } else { "import \"not-installed-pkg\";\n" };
        std::fs::write(&src, format!("{missing}{serving}"))?;
        let err = dev.next("error")?;
        let msg = err["error"].as_str().unwrap_or("");
        assert!(
            msg.starts_with(&format!("{file}:1:")) && msg.contains("not") && msg.contains("installed"),
            "{lang}: {err}"
        );
        assert_eq!(greet(json!({"name": "Wharf"}))?["content"], "Salut, Wharf!", "{lang}: the previous version serves");
    }
    Ok(())
}

/// C: each save runs the release build's steps (wit-bindgen c, clang with
/// wasi-libc, wasm-tools component new) and publishes the component once it
/// loads; a compile error is clang's FILE:LINE and the previous version
/// keeps serving.
#[test]
fn c_dev_plugin_rebuilds_on_save_and_survives_a_compile_error() -> anyhow::Result<()> {
    if let Some(missing) = crate::generic_langs::c_toolchain_missing() {
        wharf_tests::skip("c_dev_plugin_rebuilds_on_save_and_survives_a_compile_error", &missing);
        return Ok(());
    }
    let home = tempfile::tempdir()?;
    let work = tempfile::tempdir()?;
    let dir = scaffold(home.path(), work.path(), "dev-c", "c")?;
    let mut dev = DevProcess::start(home.path(), &dir)?;
    let ready = dev.next("ready")?;
    let tool = ready["tools"][0].as_str().context("no tool")?.to_string();
    let wasm = dir.join("target/dev/dev_c.wasm");
    // A generic component's result is JSON text (here a JSON string).
    let greet = || -> anyhow::Result<Value> {
        let v = call(home.path(), &wasm, &tool, &json!({"name": "C", "times": 2}), &[])?;
        Ok(json!({"content": serde_json::from_str::<Value>(v["content"].as_str().unwrap_or("null"))?}))
    };
    assert_eq!(greet()?["content"], "Hello, C!\nHello, C!", "{ready}");

    let src = dir.join("src/component.c");
    edit(&src, "\"Hello, \"", "\"Howdy, \"")?;
    dev.next("reloaded")?;
    assert_eq!(greet()?["content"], "Howdy, C!\nHowdy, C!");

    let good = std::fs::read_to_string(&src)?;
    let line = good.lines().count() + 1;
    std::fs::write(&src, format!("{good}int broken( {{\n"))?;
    let err = dev.next("error")?;
    let msg = err["error"].as_str().unwrap_or("");
    assert!(msg.starts_with(&format!("src/component.c:{line}: error:")), "{err}");
    assert_eq!(greet()?["content"], "Howdy, C!\nHowdy, C!", "the previous version keeps serving");

    std::fs::write(&src, good.replace("\"Howdy, \"", "\"Welcome, \""))?;
    dev.next("reloaded")?;
    assert_eq!(greet()?["content"], "Welcome, C!\nWelcome, C!");
    Ok(())
}

/// A host with a `dev = true` row: each version `wharf plugin dev`
/// publishes reaches its sessions through hot reload.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_with_a_dev_row_serves_each_published_version() -> anyhow::Result<()> {
    if !toolchains_ready("a_host_with_a_dev_row_serves_each_published_version") {
        return Ok(());
    }
    let home = tempfile::tempdir()?;
    let work = tempfile::tempdir()?;
    let dir = scaffold(home.path(), work.path(), "dev-row", "python")?;
    let publish = || -> anyhow::Result<Value> {
        let o = wharf_tests::wharf(home.path())
            .args(["plugin", "dev", "--once", "--json"])
            .arg(&dir)
            .output()
            .context("spawning wharf plugin dev --once")?;
        anyhow::ensure!(o.status.success(), "plugin dev --once: {}\n{}", text(&o.stdout), text(&o.stderr));
        Ok(serde_json::from_str(text(&o.stdout).lines().last().unwrap_or(""))?)
    };
    publish()?;
    let wasm = dir.join("target/dev/dev_row.wasm");
    let turn = r#"
[[plugin.config.turns]]
text = "Greeting."
tool_calls = [{ name = "dev_row", arguments = { name = "host" } }]

[[plugin.config.turns]]
text = "Done."
"#;
    let profile = format!(
        "[agent]\nadapter = \"scripted\"\nmax_steps = 4\n\n[[plugin]]\nid = \"dev_row\"\npath = {}\ndev = true\n\n{}",
        crate::policy::toml_str(&wasm.display().to_string()),
        wharf_tests::host::scripted_model(&format!("{turn}{turn}")),
    );
    let host = TestHost::builder().profile_text(profile).watch(true).start_in(home.path()).await?;
    let result = |events: &[Value]| {
        events
            .iter()
            .find(|e| e["type"] == "tool/result" && e["data"]["name"] == "dev_row")
            .map(|e| e["data"]["content"].as_str().unwrap_or("").to_string())
    };
    let first = host.run("greet").await?;
    assert_eq!(result(&first.json()).as_deref(), Some("Hello, host!"));
    let before = host.harness.plugins.versions().get("dev_row").map(|v| v.digest.clone());
    assert!(host.harness.plugins.versions().get("dev_row").is_some_and(|v| v.is_dev()));

    edit(&dir.join("app.py"), "Hello, ", "Ahoy, ")?;
    publish()?;
    // The host's watcher sees the new source link and reloads the row.
    let mut events = host.harness.plugins.subscribe();
    let mut reloaded = host.harness.plugins.versions().get("dev_row").map(|v| v.digest.clone()) != before;
    while !reloaded {
        match tokio::time::timeout(Duration::from_secs(120), events.recv()).await {
            // A load of the row may also come from the runtime component
            // being rewritten before the new source is linked (same
            // version again): only a new digest is the new source.
            Ok(Ok(wharf_core::events::EventKind::PluginLoaded(p))) if p.id == "dev_row" => {
                reloaded = host.harness.plugins.versions().get("dev_row").map(|v| v.digest.clone()) != before;
            }
            Ok(Ok(wharf_core::events::EventKind::PluginReloadFailed(p))) if p.id == "dev_row" => {
                bail!("the host refused the new version: {:?}", p.error)
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => bail!("plugin events: {e}"),
            Err(_) => {
                reloaded = host.harness.plugins.versions().get("dev_row").map(|v| v.digest.clone()) != before;
                anyhow::ensure!(reloaded, "the host did not reload the dev row");
            }
        }
    }
    let second = host.run_with(Some(&first.session), "greet again", None).await?;
    assert_eq!(result(&second.json()).as_deref(), Some("Ahoy, host!"));
    host.close().await;
    Ok(())
}

/// The SDK examples' calls give the same results from the dev runtime as
/// from the release build.
#[test]
fn dev_runtime_and_release_build_agree_on_the_sdk_examples() -> anyhow::Result<()> {
    if !toolchains_ready("dev_runtime_and_release_build_agree_on_the_sdk_examples") {
        return Ok(());
    }
    let home = tempfile::tempdir()?;
    let work = tempfile::tempdir()?;
    let ws = tempfile::tempdir()?;
    std::fs::write(ws.path().join("sales.csv"), "region,product,amount\nEU,apple,10\nUS,pear,3\nEU,pear,5\n")?;
    let ro = format!("{}:ro", ws.path().display());
    let ws_flag = ws.path().display().to_string();
    let csv_flags: Vec<&str> = vec!["--allow-dir", &ro, "--workspace", &ws_flag];
    let examples: [Example; 2] = [
        (
            "python/examples/csv_query",
            "csv_query",
            vec![
                (
                    json!({"path": "sales.csv", "group_by": ["region"], "aggregate": [{"fn": "sum", "column": "amount"}],
                           "order_by": "sum(amount)", "descending": true}),
                    csv_flags.clone(),
                ),
                (
                    json!({"path": "sales.csv", "where": [{"column": "nope", "op": "==", "value": "x"}]}),
                    csv_flags.clone(),
                ),
                (json!({"path": "sales.csv"}), vec!["--workspace", &ws_flag]),
                (json!({"path": "sales.csv", "limit": 1}), csv_flags.clone()),
            ],
        ),
        (
            "js/examples/json_diff",
            "json_diff",
            vec![
                (json!({"before": {"a": [1, 2], "b": "x"}, "after": {"a": [1, 3], "c": null}}), vec![]),
                (json!({"before": "{", "after": 1, "parse_strings": true}), vec![]),
                (json!({"before": [1, {"k": true}], "after": [1, {"k": false}, 3]}), vec![]),
            ],
        ),
    ];
    // Third-party packages (no network): a venv's site-packages with a
    // package, the module it imports and a package loaded by name only
    // (listed in `[project] dependencies`); the plugin directory vendors a
    // package and a module site-packages also has (the project's wins).
    let venv = work.path().join("venv");
    let site = venv.join("lib/python3.12/site-packages");
    for (file, body) in [
        ("tinypkg/__init__.py", "from .fmt import shout\n"),
        ("tinypkg/fmt.py", "import tinydep\n\n\ndef shout(s):\n    return s.upper() + tinydep.MARK\n"),
        ("tinydep.py", "MARK = \"!\"\n"),
        ("dynpkg/__init__.py", "VALUE = 7\n"),
        ("dynpkg-1.0.dist-info/top_level.txt", "dynpkg\n"),
        ("order_probe.py", "WHERE = \"site\"\n"),
    ] {
        std::fs::create_dir_all(site.join(file).parent().context("parent")?)?;
        std::fs::write(site.join(file), body)?;
    }
    for (rel, tool, calls) in &examples {
        let dir = work.path().join(tool);
        copy_dir(&wharf_tests::root().join("sdk").join(rel), &dir)?;
        if *tool == "csv_query" {
            std::fs::create_dir_all(dir.join("vendored"))?;
            std::fs::write(dir.join("vendored/__init__.py"), "def tag():\n    return \"vendored\"\n")?;
            std::fs::write(dir.join("order_probe.py"), "WHERE = \"project\"\n")?;
            let app = std::fs::read_to_string(dir.join("app.py"))?;
            std::fs::write(
                dir.join("app.py"),
                format!(
                    "{app}\n\nimport importlib\nimport order_probe\nimport tinypkg\nimport vendored\n\n\
                     _dyn = importlib.import_module(\"dyn\" + \"pkg\")\n\n\n\
                     @dataclass\nclass ProbeArgs:\n    word: str = wharf.arg(\"A word.\")\n\n\n\
                     @wharf.tool()\ndef pkg_probe(args: ProbeArgs, ctx: wharf.Context) -> str:\n\
                     \x20   \"\"\"Answers with third-party packages.\"\"\"\n\
                     \x20   return f\"{{tinypkg.shout(args.word)}} {{vendored.tag()}} {{order_probe.WHERE}} {{_dyn.VALUE}}\"\n"
                ),
            )?;
            let pyproject = std::fs::read_to_string(dir.join("pyproject.toml"))?;
            std::fs::write(
                dir.join("pyproject.toml"),
                pyproject.replace("requires-python", "dependencies = [\"dynpkg>=1.0\"]\nrequires-python"),
            )?;
        }
        // The JS example depends on the SDK by a path relative to the checkout.
        let pkg = dir.join("package.json");
        if pkg.is_file() {
            let sdk_js = wharf_tests::root().join("sdk/js");
            let t = std::fs::read_to_string(&pkg)?.replace("file:../..", &format!("file:{}", sdk_js.display()));
            std::fs::write(&pkg, t)?;
            let _ = std::fs::remove_file(dir.join("package-lock.json"));
        }
        let release = work.path().join(format!("{tool}.release.wasm"));
        let dev = dir.join("target/dev").join(format!("{tool}.wasm"));
        // A profile with both builds as rows: `release` (first) and the dev
        // row `mine` offer the same tool, so each command names the winner.
        let profile = work.path().join(format!("{tool}.toml"));
        std::fs::write(
            &profile,
            format!(
                "[[plugin]]\nid = \"release\"\npath = {}\n\n[[plugin]]\nid = \"mine\"\npath = {}\ndev = true\n",
                crate::policy::toml_str(&release.display().to_string()),
                crate::policy::toml_str(&dev.display().to_string())
            ),
        )?;
        let with_profile = ["--profile", &profile.display().to_string(), "-w", &ws_flag].map(str::to_string);
        let dev_once = || -> anyhow::Result<String> {
            let o = wharf_tests::wharf(home.path())
                .env("VIRTUAL_ENV", &venv)
                .args(["plugin", "dev", "--once", "--json"])
                .args(&with_profile)
                .arg(&dir)
                .output()?;
            anyhow::ensure!(o.status.success(), "plugin dev {rel}: {}\n{}", text(&o.stdout), text(&o.stderr));
            Ok(text(&o.stderr))
        };
        // Which row wins, where each is, why, how to change it (the
        // sentence of `wharf doctor` and session start).
        let p = profile.display().to_string();
        let shadowed = |out: &str| {
            let line =
                out.lines().find(|l| l.starts_with(&format!("wharf: warning: tool `{tool}`: row `release` ({p}:")));
            line.is_some_and(|l| {
                l.contains(&format!("wins over row `mine` ({p}:"))
                    && l.contains("(the earlier row of one layer wins)")
                    && l.contains("move row `mine` above row `release`")
            })
        };
        // No release build yet: nothing to report.
        let first = dev_once()?;
        assert!(!first.contains("wharf: warning: tool"), "{first}");
        let o = wharf_tests::wharf(home.path())
            .env("VIRTUAL_ENV", &venv)
            .args(["plugin", "build"])
            .arg(&dir)
            .arg("-o")
            .arg(&release)
            .args(&with_profile)
            .output()?;
        anyhow::ensure!(o.status.success(), "plugin build {rel}: {}", text(&o.stderr));
        assert!(shadowed(&text(&o.stderr)), "plugin build {rel}: {}", text(&o.stderr));
        let again = dev_once()?;
        assert!(shadowed(&again), "plugin dev {rel}: {again}");
        for (args, flags) in calls {
            let a = call(home.path(), &release, tool, args, flags)?;
            let b = call(home.path(), &dev, tool, args, flags)?;
            assert_eq!(a, b, "{tool} {args}: release and dev differ");
            assert!(a["content"].as_str().is_some_and(|c| !c.is_empty()), "{tool} {args}: {a}");
        }
        if *tool == "csv_query" {
            let args = json!({"word": "hi"});
            let a = call(home.path(), &release, "pkg_probe", &args, &[])?;
            let b = call(home.path(), &dev, "pkg_probe", &args, &[])?;
            assert_eq!(a["content"], "HI! vendored project 7", "release: {a}");
            assert_eq!(a, b, "pkg_probe: release and dev differ");
        }
    }
    Ok(())
}

/// An example: its directory under `sdk/`, its tool, and calls (arguments,
/// `wharf plugin call` flags).
type Example<'a> = (&'a str, &'a str, Vec<(Value, Vec<&'a str>)>);

fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from).with_context(|| format!("{}", from.display()))? {
        let e = e?;
        let name = e.file_name();
        if name == "node_modules" || name == "target" || name == "__pycache__" {
            continue;
        }
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &to.join(&name))?;
        } else {
            std::fs::copy(e.path(), to.join(&name))?;
        }
    }
    Ok(())
}
