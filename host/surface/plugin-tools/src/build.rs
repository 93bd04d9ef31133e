//! `wharf plugin build [DIR]`: builds a plugin project into a component
//! (cargo for Rust, componentize-py for Python, esbuild + componentize-js for
//! JavaScript; for C `wit-bindgen c`, clang with wasi-libc and `wasm-tools
//! component new` with the preview1 reactor adapter), then loads it with the
//! runtime like `wharf plugin check` and prints its size, WIT version, kinds,
//! requested grants and tools.
//!
//! Also home of the lookups shared with `wharf plugin new`: where the SDKs
//! ([`sdk_dir`]) and the WIT package ([`wit_dir`]) are.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};
use wharf_runtime::grants::Grant;
use wharf_runtime::{PluginSpec, PluginVersion, Runtime, RuntimeOptions};

/// Arguments of `wharf plugin build`.
#[derive(clap::Args, Debug)]
pub struct BuildArgs {
    /// The project directory (default: the current directory). Its language
    /// is detected: `component.toml` with `lang = "c"` (C), `Cargo.toml`
    /// (Rust), `pyproject.toml` (Python), `package.json` (JavaScript).
    pub dir: Option<PathBuf>,
    /// Where to write the component (default: cargo's artifact for Rust,
    /// `DIR/target/NAME.wasm` otherwise).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Cargo profile for Rust projects.
    #[arg(long = "cargo-profile", value_name = "NAME", default_value = "release")]
    pub cargo_profile: String,
    /// Build only; do not load and check the component.
    #[arg(long = "no-check")]
    pub no_check: bool,
    /// Print the result as one JSON object on stdout (build output goes to
    /// stderr either way).
    #[arg(long)]
    pub json: bool,
    #[allow(missing_docs)] // flattened: the flags document themselves
    #[command(flatten)]
    pub profile: crate::shadow::ProfileFlags,
}

/// The languages `wharf plugin new` and `build` know.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// Rust with the `wharf-sdk` crate (cargo, wasm32-wasip2).
    Rust,
    /// Python with `wharf_sdk.py` (componentize-py).
    Python,
    /// JavaScript with the `wharf-sdk` package (esbuild + componentize-js).
    Js,
    /// C with wasi-libc: a generic component exporting the plain WIT functions
    /// of the project's own `wit/` world (clang, `wit-bindgen c`,
    /// `wasm-tools component new`).
    C,
}

impl Lang {
    /// The name used in messages and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rust => "rust",
            Self::Python => "python",
            Self::Js => "js",
            Self::C => "c",
        }
    }
}

/// Plugin kinds, each with its WIT world.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PluginKind {
    /// Tools the model can call (world `tool-plugin`).
    Tool,
    /// A permission policy (world `policy-plugin`).
    Policy,
    /// Hook listeners and prompt sections (world `hooks-plugin`).
    Hooks,
    /// A model adapter (world `llm-plugin`).
    Llm,
    /// A skills source with tools (world `skills-plugin`).
    Skills,
}

impl PluginKind {
    /// The kind's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tool => "tool",
            Self::Policy => "policy",
            Self::Hooks => "hooks",
            Self::Llm => "llm",
            Self::Skills => "skills",
        }
    }

    /// Parses a kind name.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Tool, Self::Policy, Self::Hooks, Self::Llm, Self::Skills].into_iter().find(|k| k.as_str() == s)
    }

    /// The WIT world a component of this kind targets.
    pub fn world(self) -> &'static str {
        match self {
            Self::Tool => "tool-plugin",
            Self::Policy => "policy-plugin",
            Self::Hooks => "hooks-plugin",
            Self::Llm => "llm-plugin",
            Self::Skills => "skills-plugin",
        }
    }

    /// The world of a project of this kind that imports `questions`
    /// (`questions = true` in its manifest): only tools and policies may ask.
    pub fn questions_world(self) -> anyhow::Result<&'static str> {
        match self {
            Self::Tool => Ok("tool-questions-plugin"),
            Self::Policy => Ok("policy-questions-plugin"),
            other => bail!(
                "`questions = true` works for kind tool or policy, not `{}` (no world of that kind imports \
                 `questions`)",
                other.as_str()
            ),
        }
    }

    /// The kinds the host detects in a component of this world.
    pub fn expected_kinds(self) -> &'static [&'static str] {
        match self {
            Self::Tool => &["tool"],
            Self::Policy => &["policy"],
            Self::Hooks => &["hooks"],
            Self::Llm => &["llm"],
            Self::Skills => &["tool", "skills"],
        }
    }
}

// ---------------------------------------------------------------------------
// Where things are
// ---------------------------------------------------------------------------

/// Directories from the `wharf` binary up: `target/debug/wharf` → the
/// checkout; `PREFIX/bin/wharf` → `PREFIX`.
fn exe_ancestors() -> Vec<PathBuf> {
    let Ok(exe) = std::env::current_exe() else { return Vec::new() };
    let exe = std::fs::canonicalize(&exe).unwrap_or(exe);
    exe.ancestors().skip(1).map(Path::to_path_buf).collect()
}

/// The checkout this binary was compiled from, if it is still there.
fn build_checkout() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..");
    std::fs::canonicalize(p).ok()
}

pub(crate) fn absolute(p: PathBuf) -> PathBuf {
    std::fs::canonicalize(&p).unwrap_or(p)
}

/// The SDK directory (holding `rust/`, `python/` and `js/`): `$WHARF_SDK_DIR`
/// (the `sdk` directory, or its `rust` subdirectory), else `sdk/` (or
/// `share/wharf/sdk/`) in a directory above the `wharf` binary, else the
/// checkout the binary was built from.
pub fn sdk_dir() -> anyhow::Result<PathBuf> {
    if let Some(d) = std::env::var_os("WHARF_SDK_DIR") {
        let d = absolute(PathBuf::from(d));
        if !d.join("rust/Cargo.toml").is_file()
            && d.join("Cargo.toml").is_file()
            && let Some(parent) = d.parent().filter(|p| p.join("python").is_dir() || p.join("js").is_dir())
        {
            return Ok(parent.to_path_buf());
        }
        if !d.is_dir() {
            bail!("WHARF_SDK_DIR={} is not a directory", d.display());
        }
        return Ok(d);
    }
    let mut candidates = Vec::new();
    for a in exe_ancestors() {
        candidates.push(a.join("sdk"));
        candidates.push(a.join("share/wharf/sdk"));
    }
    candidates.extend(build_checkout().map(|c| c.join("sdk")));
    candidates
        .into_iter()
        .find(|c| c.join("rust/Cargo.toml").is_file())
        .map(absolute)
        .context("cannot find the Wharf SDKs: set WHARF_SDK_DIR to the `sdk` directory of a Wharf checkout")
}

/// The WIT package directory of the contract this host binds
/// (`wit/since_vX.Y.Z`, [`wharf_runtime::bindings::WIT_DIR`]):
/// `$WHARF_WIT_DIR` (that folder, or the `wit` folder holding it), else
/// `wit/` (or `share/wharf/wit/`) in a directory above the `wharf` binary,
/// else the checkout the binary was built from.
pub fn wit_dir() -> anyhow::Result<PathBuf> {
    let version = wharf_runtime::bindings::WIT_DIR;
    if let Some(d) = std::env::var_os("WHARF_WIT_DIR") {
        let d = absolute(PathBuf::from(d));
        return [d.clone(), d.join(version)]
            .into_iter()
            .find(|c| c.join("worlds.wit").is_file())
            .with_context(|| format!("WHARF_WIT_DIR={} has no worlds.wit (nor {version}/worlds.wit)", d.display()));
    }
    let mut candidates = Vec::new();
    for a in exe_ancestors() {
        candidates.push(a.join("wit").join(version));
        candidates.push(a.join("share/wharf/wit").join(version));
    }
    candidates.extend(build_checkout().map(|c| c.join("wit").join(version)));
    candidates
        .into_iter()
        .find(|c| c.join("worlds.wit").is_file())
        .map(absolute)
        .context("cannot find the WIT package: set WHARF_WIT_DIR to the `wit` directory of a Wharf checkout")
}

/// Finds a program: `$ENV_VAR`, else the first `dirs` entry holding it, else
/// `PATH`.
pub(crate) fn find_program(name: &str, env_var: &str, dirs: &[PathBuf]) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env_var) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    dirs.iter().cloned().chain(std::env::split_paths(&path)).map(|d| d.join(name)).find(|p| p.is_file())
}

// ---------------------------------------------------------------------------
// Project manifests
// ---------------------------------------------------------------------------

/// Reads the string values of one table of a TOML file (`key = "value"`
/// lines only; enough for `[project]` and `[tool.wharf]`).
fn toml_strings(text: &str, table: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            current = line.trim_matches(|c| c == '[' || c == ']').trim().to_string();
            continue;
        }
        if current != table {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else { continue };
        let v = v.trim();
        let v = v.split(" #").next().unwrap_or(v).trim();
        let unquoted =
            if v.len() >= 2 && (v.starts_with('"') && v.ends_with('"') || v.starts_with('\'') && v.ends_with('\'')) {
                &v[1..v.len() - 1]
            } else {
                v
            };
        out.insert(k.trim().trim_matches('"').to_string(), unquoted.to_string());
    }
    out
}

/// What `build` needs to know about a project.
#[derive(Debug)]
pub(crate) struct Project {
    pub(crate) dir: PathBuf,
    pub(crate) lang: Lang,
    /// The kind from the manifest (Rust projects need none).
    pub(crate) kind: Option<PluginKind>,
    /// Output file stem.
    pub(crate) name: String,
    /// Python module / JS entry file.
    pub(crate) entry: String,
    /// JS: keep wasi:http (`fetch`).
    pub(crate) http: bool,
    /// Python, JS: the component imports `questions` (the manifest's
    /// `questions = true`): built for the kind's questions world.
    pub(crate) questions: bool,
    /// C: what `component.toml` says.
    c: Option<CProject>,
}

/// The `[component]` table of a C project's `component.toml`.
#[derive(Debug)]
struct CProject {
    /// The WIT directory (relative to the project).
    wit: PathBuf,
    /// The world in it that the component targets.
    world: String,
    /// The directory whose `*.c` files are compiled.
    src: PathBuf,
    /// Extra clang flags, split on whitespace.
    cflags: Vec<String>,
}

pub(crate) fn file_stem_name(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect()
}

pub(crate) fn detect(dir: &Path) -> anyhow::Result<Project> {
    let dir_name = dir.file_name().and_then(OsStr::to_str).unwrap_or("plugin").to_string();
    let parse_kind = |k: Option<&str>, file: &str| -> anyhow::Result<Option<PluginKind>> {
        match k {
            None => Ok(None),
            Some(k) => PluginKind::parse(k).map(Some).with_context(|| {
                format!("{file}: unknown plugin kind `{k}` (one of tool, policy, hooks, llm, skills)")
            }),
        }
    };
    if let Some(p) = detect_c(dir, &dir_name)? {
        return Ok(p);
    }
    if dir.join("Cargo.toml").is_file() {
        return Ok(Project {
            dir: dir.to_path_buf(),
            lang: Lang::Rust,
            kind: None,
            name: file_stem_name(&dir_name),
            entry: String::new(),
            http: false,
            questions: false,
            c: None,
        });
    }
    if dir.join("pyproject.toml").is_file() || dir.join("app.py").is_file() {
        let text = std::fs::read_to_string(dir.join("pyproject.toml")).unwrap_or_default();
        let wharf = toml_strings(&text, "tool.wharf");
        let project = toml_strings(&text, "project");
        let name = wharf.get("name").or(project.get("name")).cloned().unwrap_or(dir_name);
        return Ok(Project {
            dir: dir.to_path_buf(),
            lang: Lang::Python,
            kind: parse_kind(wharf.get("kind").map(String::as_str), "pyproject.toml [tool.wharf]")?,
            name: file_stem_name(&name),
            entry: wharf.get("module").cloned().unwrap_or_else(|| "app".into()),
            http: false,
            questions: wharf.get("questions").is_some_and(|v| v == "true"),
            c: None,
        });
    }
    if dir.join("package.json").is_file() {
        let text = std::fs::read_to_string(dir.join("package.json"))?;
        let pkg: Value = serde_json::from_str(&text).context("package.json is not valid JSON")?;
        let w = &pkg["wharf"];
        let name = w["name"].as_str().or(pkg["name"].as_str()).map(String::from).unwrap_or(dir_name);
        let name = name.rsplit('/').next().unwrap_or(&name).to_string();
        return Ok(Project {
            dir: dir.to_path_buf(),
            lang: Lang::Js,
            kind: parse_kind(w["kind"].as_str(), "package.json \"wharf\"")?,
            name: file_stem_name(&name),
            entry: w["entry"].as_str().or(pkg["main"].as_str()).unwrap_or("app.js").to_string(),
            http: w["http"].as_bool().unwrap_or(false),
            questions: w["questions"].as_bool().unwrap_or(false),
            c: None,
        });
    }
    bail!(
        "{}: not a plugin project (no component.toml, Cargo.toml, pyproject.toml or package.json); \
         `wharf plugin new` makes one",
        dir.display()
    )
}

/// A C project: `component.toml` whose `[component]` table says `lang = "c"`.
fn detect_c(dir: &Path, dir_name: &str) -> anyhow::Result<Option<Project>> {
    let manifest = dir.join("component.toml");
    if !manifest.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&manifest).with_context(|| format!("{}", manifest.display()))?;
    let c = toml_strings(&text, "component");
    match c.get("lang").map(String::as_str) {
        Some("c") => {}
        Some(other) => bail!("component.toml: lang `{other}` is not supported (only \"c\")"),
        None => return Ok(None),
    }
    let world = c.get("world").cloned().context("component.toml: set `world` under [component]")?;
    let name = c.get("name").cloned().unwrap_or_else(|| dir_name.to_string());
    Ok(Some(Project {
        dir: dir.to_path_buf(),
        lang: Lang::C,
        kind: None,
        name: file_stem_name(&name),
        entry: String::new(),
        http: false,
        questions: false,
        c: Some(CProject {
            wit: PathBuf::from(c.get("wit").map_or("wit", String::as_str)),
            world,
            src: PathBuf::from(c.get("src").map_or("src", String::as_str)),
            cflags: c.get("cflags").map_or("-O2", String::as_str).split_whitespace().map(String::from).collect(),
        }),
    }))
}

// ---------------------------------------------------------------------------
// Building
// ---------------------------------------------------------------------------

/// Runs a build step with its output on stderr; `Ok(false)` when it failed.
pub(crate) fn run_step(cmd: &mut Command, what: &str) -> anyhow::Result<bool> {
    tracing::debug!("running {cmd:?}");
    let status = cmd
        .stdout(Stdio::from(std::io::stderr()))
        .stderr(Stdio::inherit())
        .status()
        .with_context(|| format!("cannot run {what}"))?;
    if !status.success() {
        eprintln!("wharf: {what} failed ({status})");
    }
    Ok(status.success())
}

/// Runs a build step, copying its output to stderr once it ends;
/// `Ok(Err(why))` when it failed, `why` being its first error line
/// ([`first_error`]).
pub(crate) fn run_step_capturing(cmd: &mut Command, what: &str, dir: &Path) -> anyhow::Result<Result<(), String>> {
    use std::io::Write;
    tracing::debug!("running {cmd:?}");
    let out = cmd.stdin(Stdio::null()).output().with_context(|| format!("cannot run {what}"))?;
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(&out.stdout);
    let _ = err.write_all(&out.stderr);
    drop(err);
    if out.status.success() {
        return Ok(Ok(()));
    }
    eprintln!("wharf: {what} failed ({})", out.status);
    let text = String::from_utf8_lossy(&out.stderr);
    Ok(Err(first_error(&text, dir).unwrap_or_else(|| format!("{what} failed ({}; see above)", out.status))))
}

/// A compiler's first diagnostic `PATH:LINE:COL: error: message` as
/// `FILE:LINE: error: message`, FILE relative to `dir` when under it; else
/// the first line that says `error`. At most 1 KiB, cut on a character
/// boundary.
pub(crate) fn first_error(stderr: &str, dir: &Path) -> Option<String> {
    let cut = |s: String| {
        let mut end = s.len().min(1024);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s[..end].to_string()
    };
    for line in stderr.lines() {
        let Some(at) = line.find(": error: ").or_else(|| line.find(": fatal error: ")) else { continue };
        let (place, message) = (&line[..at], line[at + 2..].trim());
        let mut parts = place.rsplitn(3, ':');
        let (col, line_no, file) = (parts.next(), parts.next(), parts.next());
        let (file, line_no) = match (file, line_no, col) {
            (Some(f), Some(l), Some(_)) if l.chars().all(|c| c.is_ascii_digit()) => (f, l),
            (None, Some(f), Some(l)) if l.chars().all(|c| c.is_ascii_digit()) => (f, l),
            _ => continue,
        };
        let path = Path::new(file);
        let rel = path.strip_prefix(dir).unwrap_or(path);
        return Some(cut(format!("{}:{line_no}: {message}", rel.display())));
    }
    stderr.lines().map(str::trim).find(|l| l.to_lowercase().contains("error")).map(|l| cut(l.to_string()))
}

/// The WIT world a Python or JS project is built for: its kind's, or with
/// `questions = true` the kind's questions world.
pub(crate) fn world_name(p: &Project) -> anyhow::Result<&'static str> {
    let kind = world_of(p)?;
    if p.questions { kind.questions_world() } else { Ok(kind.world()) }
}

pub(crate) fn world_of(p: &Project) -> anyhow::Result<PluginKind> {
    p.kind.with_context(|| match p.lang {
        Lang::Python => {
            "pyproject.toml: set `kind` under [tool.wharf] (tool, policy, hooks, llm or skills)".to_string()
        }
        _ => "package.json: set \"kind\" under \"wharf\" (tool, policy, hooks, llm or skills)".to_string(),
    })
}

/// Builds a Rust project with cargo; returns the component path.
pub(crate) fn build_rust(p: &Project, profile: &str) -> anyhow::Result<Option<PathBuf>> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = p.dir.join("Cargo.toml");
    let mut child = Command::new(&cargo)
        .args(["build", "--target", "wasm32-wasip2", "--profile", profile, "--message-format=json-render-diagnostics"])
        .arg("--manifest-path")
        .arg(&manifest)
        .current_dir(&p.dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("cannot run cargo (is Rust installed? `rustup target add wasm32-wasip2`)")?;
    let manifest = absolute(manifest);
    let mut artifact = None;
    if let Some(out) = child.stdout.take() {
        for line in std::io::BufReader::new(out).lines() {
            let line = line?;
            let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                eprintln!("{line}");
                continue;
            };
            if msg["reason"] != "compiler-artifact" {
                continue;
            }
            let same_manifest =
                msg["manifest_path"].as_str().map(|m| absolute(PathBuf::from(m)) == manifest).unwrap_or(false);
            if !same_manifest {
                continue;
            }
            for f in msg["filenames"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                if f.ends_with(".wasm") {
                    artifact = Some(PathBuf::from(f));
                }
            }
        }
    }
    let status = child.wait()?;
    if !status.success() {
        eprintln!("wharf: cargo build failed ({status})");
        return Ok(None);
    }
    match artifact {
        Some(a) => Ok(Some(a)),
        None => bail!("cargo built no .wasm for {} (is it a `cdylib` crate?)", manifest.display()),
    }
}

fn build_python(p: &Project, out: &Path, sdk: &Path, wit: &Path) -> anyhow::Result<bool> {
    let world = world_name(p)?;
    let sdk_py = sdk.join("python");
    let Some(cpy) = find_program("componentize-py", "WHARF_COMPONENTIZE_PY", &[]) else {
        bail!(
            "componentize-py not found: `pip install componentize-py==0.25.1` (or run sdk/install-toolchains.sh), \
             or set WHARF_COMPONENTIZE_PY"
        );
    };
    let mut cmd = Command::new(cpy);
    cmd.arg("-d")
        .arg(wit)
        .args(["-w", world, "componentize", &p.entry, "-p"])
        .arg(&p.dir)
        .arg("-p")
        .arg(&sdk_py)
        .arg("-o")
        .arg(out)
        .current_dir(&p.dir);
    run_step(&mut cmd, "componentize-py")
}

fn build_js(p: &Project, out: &Path, sdk: &Path, wit: &Path) -> anyhow::Result<bool> {
    let world = world_name(p)?;
    let sdk_js = sdk.join("js");
    let pkg: Value = serde_json::from_str(&std::fs::read_to_string(p.dir.join("package.json"))?)?;
    let has_deps = pkg["dependencies"].as_object().is_some_and(|d| !d.is_empty());
    if has_deps && !p.dir.join("node_modules").is_dir() {
        let Some(npm) = find_program("npm", "WHARF_NPM", &[]) else {
            bail!("npm not found: install Node.js (20 or newer) to build JavaScript plugins")
        };
        // With a lockfile, `npm ci`: it installs exactly what is locked and
        // never rewrites the lockfile (`npm install` refreshes it, so a build
        // would modify a checked-in project). Without one, `npm install`.
        let locked = p.dir.join("package-lock.json").is_file();
        let step = if locked { "npm ci" } else { "npm install" };
        let mut cmd = Command::new(npm);
        cmd.args([if locked { "ci" } else { "install" }, "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&p.dir);
        if !run_step(&mut cmd, step)? {
            return Ok(false);
        }
    }
    let bins = [p.dir.join("node_modules/.bin"), sdk_js.join("node_modules/.bin")];
    let Some(esbuild) = find_program("esbuild", "WHARF_ESBUILD", &bins) else {
        bail!("esbuild not found: run `npm ci` in {} (or sdk/install-toolchains.sh)", sdk_js.display())
    };
    let Some(cjs) = find_program("componentize-js", "WHARF_COMPONENTIZE_JS", &bins) else {
        bail!("componentize-js not found: run `npm ci` in {} (or sdk/install-toolchains.sh)", sdk_js.display())
    };
    let build_dir = out.parent().map(Path::to_path_buf).unwrap_or_else(|| p.dir.join("target"));
    let bundle = build_dir.join(format!("{}.bundle.js", p.name));
    let mut cmd = Command::new(esbuild);
    cmd.arg(&p.entry)
        .args([
            "--bundle",
            "--format=esm",
            "--platform=neutral",
            "--main-fields=module,main",
            if p.questions { "--conditions=wharf-component,wharf-questions" } else { "--conditions=wharf-component" },
            "--external:wharf:*",
            "--log-level=warning",
        ])
        .arg(format!("--outfile={}", bundle.display()))
        .current_dir(&p.dir);
    if !run_step(&mut cmd, "esbuild")? {
        return Ok(false);
    }
    let mut cmd = Command::new(cjs);
    cmd.arg(bundle.file_name().unwrap_or_default()).arg("--wit").arg(wit).args(["-n", world, "-d", "fetch-event"]);
    if !p.http {
        cmd.arg("http");
    }
    // componentize-js resolves the source relative to the working directory.
    cmd.arg("-o").arg(out).current_dir(&build_dir);
    run_step(&mut cmd, "componentize-js")
}

/// The versions `sdk/install-toolchains.sh` installs (named in messages).
const WIT_BINDGEN_PIN: &str = "0.63.0";
const WASM_TOOLS_PIN: &str = "1.263.0";

/// The wasi-libc sysroot to hand clang: `$WHARF_WASI_SYSROOT`, else a
/// wasi-sdk style `/usr/share/wasi-sysroot` or `/opt/wasi-sdk/share/wasi-sysroot`;
/// `None` for Debian's layout (`/usr/include/wasm32-wasi`,
/// `/usr/lib/wasm32-wasi`), which Debian's clang finds by itself.
fn wasi_sysroot() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("WHARF_WASI_SYSROOT") {
        return Some(PathBuf::from(d));
    }
    ["/usr/share/wasi-sysroot", "/opt/wasi-sdk/share/wasi-sysroot"]
        .into_iter()
        .map(PathBuf::from)
        .find(|d| d.join("lib/wasm32-wasi/libc.a").is_file() || d.join("lib/wasm32-wasip1/libc.a").is_file())
}

/// Whether the compiler-rt builtins archive clang links for wasm32-wasi exists.
fn has_wasm_builtins(clang: &Path, sysroot: Option<&str>) -> bool {
    let out = Command::new(clang)
        .args(["--target=wasm32-wasi", "--print-libgcc-file-name"])
        .args(sysroot)
        .stderr(Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => {
            let path = String::from_utf8_lossy(&o.stdout).trim().to_string();
            Path::new(&path).is_file()
        }
        _ => true,
    }
}

/// The files of `dir` whose names end in `suffix`, sorted.
fn files_ending(dir: &Path, suffix: &str) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("{}", dir.display()))? {
        let path = e?.path();
        if path.is_file() && path.file_name().and_then(OsStr::to_str).is_some_and(|n| n.ends_with(suffix)) {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

/// Builds a C project: `wit-bindgen c` binds the world, clang compiles the
/// sources and the bindings into a wasip1 reactor module, and `wasm-tools
/// component new` wraps it with the preview1 reactor adapter (the bytes of
/// crate `wasi-preview1-component-adapter-provider`, the version matching
/// this host's wasmtime) into a component. `Ok(Err(why))` when a step
/// failed (its output is on stderr; `why` is its first error, for clang
/// `FILE:LINE: error: message`).
pub(crate) fn build_c(p: &Project, out: &Path) -> anyhow::Result<Result<(), String>> {
    let Some(c) = &p.c else { bail!("not a C project") };
    let Some(wit_bindgen) = find_program("wit-bindgen", "WHARF_WIT_BINDGEN", &[]) else {
        bail!(
            "wit-bindgen not found: `cargo install --locked wit-bindgen-cli@{WIT_BINDGEN_PIN}` \
             (or run sdk/install-toolchains.sh --c), or set WHARF_WIT_BINDGEN"
        );
    };
    let Some(wasm_tools) = find_program("wasm-tools", "WHARF_WASM_TOOLS", &[]) else {
        bail!(
            "wasm-tools not found: `cargo install --locked wasm-tools@{WASM_TOOLS_PIN}` \
             (or run sdk/install-toolchains.sh --c), or set WHARF_WASM_TOOLS"
        );
    };
    let Some(clang) = find_program("clang", "WHARF_CLANG", &[]) else {
        bail!("clang not found: install clang, lld and wasi-libc (Debian: apt-get install clang lld wasi-libc)");
    };
    let wit = p.dir.join(&c.wit);
    let src = p.dir.join(&c.src);
    let sources = files_ending(&src, ".c")?;
    if sources.is_empty() {
        bail!("{}: no .c files to compile", src.display());
    }
    let build_dir = p.dir.join("target").join("c");
    let bindings = build_dir.join("bindings");
    if bindings.is_dir() {
        std::fs::remove_dir_all(&bindings).with_context(|| format!("{}", bindings.display()))?;
    }
    std::fs::create_dir_all(&bindings)?;

    let mut cmd = Command::new(wit_bindgen);
    cmd.arg("c").arg(&wit).args(["--world", &c.world, "--out-dir"]).arg(&bindings).current_dir(&p.dir);
    if let Err(why) = run_step_capturing(&mut cmd, "wit-bindgen c", &p.dir)? {
        return Ok(Err(why));
    }
    let core = build_dir.join(format!("{}.core.wasm", p.name));
    let sysroot = wasi_sysroot().map(|s| format!("--sysroot={}", s.display()));
    let mut cmd = Command::new(&clang);
    cmd.args(["--target=wasm32-wasi", "-mexec-model=reactor"]).args(&sysroot);
    if !has_wasm_builtins(&clang, sysroot.as_deref()) {
        // Debian's clang links compiler-rt's wasm32 builtins, packaged apart
        // (`libclang-rt-NN-dev-wasm32`); without them link libc alone, which
        // is enough unless the code needs 128-bit or long double helpers.
        eprintln!(
            "wharf: clang's wasm32 compiler-rt builtins are not installed (Debian: libclang-rt-NN-dev-wasm32); \
             linking with -nodefaultlibs -lc"
        );
        cmd.args(["-nodefaultlibs", "-lc"]);
    }
    cmd.args(&c.cflags)
        .arg("-I")
        .arg(&bindings)
        .arg("-I")
        .arg(&src)
        .args(&sources)
        .args(files_ending(&bindings, ".c")?)
        .args(files_ending(&bindings, ".o")?)
        .arg("-o")
        .arg(&core)
        .current_dir(&p.dir);
    if let Err(why) = run_step_capturing(&mut cmd, "clang", &p.dir)? {
        return Ok(Err(why));
    }
    let adapter = build_dir.join("wasi_snapshot_preview1.reactor.wasm");
    std::fs::write(&adapter, wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER)
        .with_context(|| format!("writing {}", adapter.display()))?;
    let mut cmd = Command::new(wasm_tools);
    cmd.args(["component", "new"])
        .arg(&core)
        .arg("--adapt")
        .arg(format!(
            "{}={}",
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME,
            adapter.display()
        ))
        .arg("-o")
        .arg(out)
        .current_dir(&p.dir);
    run_step_capturing(&mut cmd, "wasm-tools component new", &p.dir)
}

/// Loads a component like `wharf plugin check` (no grants, default config).
pub fn check(path: &Path, opts: RuntimeOptions) -> anyhow::Result<std::sync::Arc<PluginVersion>> {
    let rt = Runtime::new(opts)?;
    check_with(&rt, path)
}

/// [`check`] with a runtime of the caller's.
fn check_with(rt: &Runtime, path: &Path) -> anyhow::Result<std::sync::Arc<PluginVersion>> {
    let id = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "plugin".into());
    let spec = PluginSpec {
        id,
        path: path.to_path_buf(),
        config: json!({}),
        grant: Grant::default(),
        warm: false,
        on_invalid_config: Default::default(),
    };
    Ok(rt.load_for_inspection(&spec)?)
}

fn kind_names(v: &PluginVersion) -> Vec<String> {
    v.kinds.iter().map(|k| format!("{k:?}").to_lowercase()).collect()
}

fn human_size(n: u64) -> String {
    if n >= 1 << 20 {
        format!("{:.1} MiB", n as f64 / f64::from(1 << 20))
    } else {
        format!("{:.1} KiB", n as f64 / 1024.0)
    }
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

/// Runs `wharf plugin build`.
pub async fn run(args: BuildArgs, opts: RuntimeOptions) -> anyhow::Result<ExitCode> {
    tokio::task::spawn_blocking(move || build(args, opts)).await?
}

fn build(args: BuildArgs, opts: RuntimeOptions) -> anyhow::Result<ExitCode> {
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::current_dir().context("cannot determine the current directory")?,
    };
    let dir = std::fs::canonicalize(&dir).with_context(|| format!("project directory {}", dir.display()))?;
    let project = detect(&dir)?;
    let t0 = Instant::now();
    let out = match project.lang {
        Lang::Rust => {
            let Some(artifact) = build_rust(&project, &args.cargo_profile)? else { return Ok(ExitCode::from(1)) };
            match &args.out {
                Some(o) => {
                    if let Some(parent) = o.parent().filter(|p| !p.as_os_str().is_empty()) {
                        std::fs::create_dir_all(parent)?;
                    }
                    std::fs::copy(&artifact, o).with_context(|| format!("copying to {}", o.display()))?;
                    o.clone()
                }
                None => artifact,
            }
        }
        Lang::Python | Lang::Js | Lang::C => {
            let out = args.out.clone().unwrap_or_else(|| dir.join("target").join(format!("{}.wasm", project.name)));
            let out = if out.is_relative() { std::env::current_dir()?.join(out) } else { out };
            if let Some(parent) = out.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let ok = if project.lang == Lang::C {
                build_c(&project, &out)?.is_ok()
            } else if project.lang == Lang::Python {
                let (sdk, wit) = (sdk_dir()?, wit_dir()?);
                build_python(&project, &out, &sdk, &wit)?
            } else {
                build_js(&project, &out, &sdk_dir()?, &wit_dir()?)?
            };
            if !ok {
                return Ok(ExitCode::from(1));
            }
            out
        }
    };
    let build_time = t0.elapsed();
    let size = std::fs::metadata(&out).with_context(|| format!("{}", out.display()))?.len();
    let mut report = json!({
        "path": out,
        "lang": project.lang.as_str(),
        "kind": project.kind.map(PluginKind::as_str),
        "world": project.kind.and_then(|_| world_name(&project).ok()),
        "size": size,
        "build_ms": ms(build_time),
    });
    if args.no_check {
        if args.json {
            println!("{report}");
        } else {
            println!("built {} ({}) in {:.1} s", out.display(), human_size(size), build_time.as_secs_f64());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let rt = Runtime::new(opts)?;
    let v = check_with(&rt, &out)?;
    let names: Vec<String> = v.tools.iter().map(|t| t.name.clone()).collect();
    crate::shadow::warn(&args.profile, &out, &names, &rt);
    let kinds = kind_names(&v);
    if let Some(kind) = project.kind {
        let expected: Vec<String> = kind.expected_kinds().iter().map(|s| s.to_string()).collect();
        if kinds != expected {
            bail!(
                "{}: built for world `{}` but exports kinds [{}] (expected [{}])",
                out.display(),
                world_name(&project).unwrap_or(kind.world()),
                kinds.join(", "),
                expected.join(", ")
            );
        }
    }
    let tools: Vec<Value> = v.tools.iter().map(|t| json!({"name": t.name, "mode": t.mode})).collect();
    let compile_source = format!("{:?}", v.cache).to_lowercase();
    if let Some(o) = report.as_object_mut() {
        // A generic component (plain WIT exports, e.g. `--lang c`) has no
        // wharf:plugin version.
        let wit = (!v.wit_version.is_empty()).then(|| format!("wharf:plugin@{}", v.wit_version));
        o.insert("wit".into(), json!(wit));
        o.insert("kinds".into(), json!(kinds));
        o.insert("name".into(), json!(v.info.name));
        o.insert("version".into(), json!(v.info.version));
        o.insert("requests".into(), json!(v.info.requests));
        o.insert("tools".into(), json!(tools));
        o.insert("compile".into(), json!({"source": compile_source, "ms": ms(v.load_time)}));
    }
    if args.json {
        println!("{report}");
        return Ok(ExitCode::SUCCESS);
    }
    let r = &v.info.requests;
    println!("built {} in {:.1} s", out.display(), build_time.as_secs_f64());
    println!("  plugin:   {} {} — {}", v.info.name, v.info.version, v.info.description);
    println!("  size:     {} ({size} bytes)", human_size(size));
    if v.wit_version.is_empty() {
        println!("  wit:      generic component (plain WIT exports, no wharf:plugin world)");
    } else {
        println!("  wit:      wharf:plugin@{}", v.wit_version);
    }
    println!("  kinds:    {}", kinds.join(", "));
    println!(
        "  requests: filesystem={} hosts={:?} env={:?} process={} memory_mb={}",
        serde_json::to_value(r.filesystem).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default(),
        r.hosts,
        r.env,
        r.process,
        r.memory_mb.map_or("default".to_string(), |m| m.to_string())
    );
    for t in &v.tools {
        let mode = serde_json::to_value(t.mode).ok().and_then(|m| m.as_str().map(String::from)).unwrap_or_default();
        println!("  tool:     {} ({mode})", t.name);
    }
    let how = match compile_source.as_str() {
        "compiled" => "compiled",
        "disk" => "loaded from the compile cache",
        _ => "found in memory",
    };
    println!("  check:    ok ({how} in {:.0} ms; later loads use the compile cache)", ms(v.load_time));
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_toml_tables() {
        let t = "[project]\nname = \"csv-query\"\n\n[tool.wharf]\nkind = \"tool\"  # the kind\nmodule = 'app'\n[other]\nkind = \"x\"\n";
        let w = toml_strings(t, "tool.wharf");
        assert_eq!(w.get("kind").map(String::as_str), Some("tool"));
        assert_eq!(w.get("module").map(String::as_str), Some("app"));
        assert_eq!(toml_strings(t, "project").get("name").map(String::as_str), Some("csv-query"));
    }

    #[test]
    fn kinds_and_worlds() {
        for k in ["tool", "policy", "hooks", "llm", "skills"] {
            let kind = PluginKind::parse(k).unwrap_or(PluginKind::Tool);
            assert_eq!(kind.as_str(), k);
            assert!(kind.world().starts_with(k));
        }
        assert_eq!(PluginKind::parse("nope"), None);
        assert_eq!(file_stem_name("json-diff"), "json_diff");
    }
}
