//! `wharf plugin dev [DIR]`: the plugin author's edit loop. Watches the
//! project's sources and publishes each version that loads into
//! `DIR/target/dev/`, where a running host's hot reload picks it up:
//!
//! - `target/dev/NAME.wasm`: the component a row points at;
//! - `target/dev/NAME.src`: for Python and JavaScript, a link to the
//!   current source (`NAME.src.d/N/`), which the component reads when it is
//!   instantiated (a row with `dev = true`; `wharf plugin call` of the file
//!   does the same).
//!
//! Python and JavaScript are not componentized on each save: a **dev
//! runtime** per language and world (the interpreter, the SDK and a loader:
//! `sdk/python/dev/wharf_dev_runtime.py`, `sdk/js/dev/runtime.js`) is built
//! once with the same componentize-py / componentize-js as `plugin build`
//! and cached under the compile cache directory, keyed by the toolchain's
//! version, the WIT, the SDK and the loader. A save copies the sources
//! (Python) or bundles them with esbuild, the SDK left external (JavaScript),
//! and loads the result with the runtime like a host would (compile cache,
//! describe): a version that fails is reported as `FILE:LINE: error` and not
//! published, so the previous one keeps serving. A Python version also
//! holds the third-party packages the plugin imports, found where the
//! release build finds them ([`crate::pypath`]). Rust runs an incremental
//! `cargo build`, C the release build's steps (`wit-bindgen c`, clang with
//! wasi-libc, `wasm-tools component new`; a compile error is reported as
//! clang's `FILE:LINE: error: …`), and the component is published once it
//! loads; the load fills the compile cache the host then reads, so nothing
//! is compiled twice.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use notify::{RecursiveMode, Watcher};
use serde_json::{Value, json};
use wharf_runtime::grants::Grant;
use wharf_runtime::{PluginSpec, PluginVersion, Runtime, RuntimeOptions};

use crate::build::{Lang, PluginKind, Project, absolute, detect, find_program, sdk_dir, wit_dir, world_of};

/// Arguments of `wharf plugin dev`.
#[derive(clap::Args, Debug)]
pub struct DevArgs {
    /// The project directory (default: the current directory).
    pub dir: Option<PathBuf>,
    /// Publish the current sources once and exit (no watching).
    #[arg(long)]
    pub once: bool,
    /// Cargo profile for Rust projects.
    #[arg(long = "cargo-profile", value_name = "NAME", default_value = "release")]
    pub cargo_profile: String,
    /// One JSON object per line on stdout for each event (`ready`,
    /// `reloaded`, `error`) instead of text.
    #[arg(long)]
    pub json: bool,
    #[allow(missing_docs)] // flattened: the flags document themselves
    #[command(flatten)]
    pub profile: crate::shadow::ProfileFlags,
}

/// Debounce between a source change and the rebuild (editors write in
/// bursts).
const DEBOUNCE: Duration = Duration::from_millis(25);
/// Published source versions kept besides the current one (a host may be
/// reading the previous one).
const KEEP_VERSIONS: usize = 3;

/// Runs `wharf plugin dev`.
pub async fn run(args: DevArgs, opts: RuntimeOptions) -> anyhow::Result<ExitCode> {
    tokio::task::spawn_blocking(move || dev(args, opts)).await?
}

struct Dev {
    project: Project,
    kind: Option<PluginKind>,
    /// `DIR/target/dev`.
    out_dir: PathBuf,
    /// `DIR/target/dev/NAME.wasm`.
    component: PathBuf,
    runtime: std::sync::Arc<Runtime>,
    json: bool,
    cargo_profile: String,
    /// The number of the next published source version.
    next: u64,
    /// Python: the release build's site-packages, where third-party
    /// packages are looked up.
    site: Option<crate::pypath::SitePath>,
}

fn dev(args: DevArgs, opts: RuntimeOptions) -> anyhow::Result<ExitCode> {
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::current_dir().context("cannot determine the current directory")?,
    };
    let dir = std::fs::canonicalize(&dir).with_context(|| format!("project directory {}", dir.display()))?;
    let project = detect(&dir)?;
    let kind = match project.lang {
        Lang::Python | Lang::Js => {
            let k = world_of(&project)?;
            if k == PluginKind::Llm {
                bail!("model adapters (kind `llm`) have no dev runtime yet: use `wharf plugin build`");
            }
            if project.questions {
                bail!(
                    "components that ask questions (`questions = true`) have no dev runtime yet: use `wharf \
                     plugin build`"
                );
            }
            Some(k)
        }
        _ => None,
    };
    let out_dir = dir.join("target").join("dev");
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let component = out_dir.join(format!("{}.wasm", project.name));
    let cache_root = opts.cache_dir.clone().unwrap_or_else(|| std::env::temp_dir().join("wharf-cache"));
    let runtime = Runtime::new(opts)?;
    let site = (project.lang == Lang::Python).then(|| crate::pypath::SitePath::discover(&project.dir));
    let mut d = Dev {
        project,
        kind,
        out_dir,
        component,
        runtime,
        json: args.json,
        cargo_profile: args.cargo_profile,
        next: 1,
        site,
    };
    if let Some(kind) = d.kind {
        let t0 = Instant::now();
        let built = ensure_runtime(d.project.lang, kind, &cache_root)?;
        install_file(&built, &d.component)?;
        if !d.json {
            eprintln!(
                "wharf: {} dev runtime for world `{}`: {} ({:.1} s)",
                d.project.lang.as_str(),
                kind.world(),
                built.display(),
                t0.elapsed().as_secs_f64()
            );
        }
    }
    d.next = d.first_free_version();
    // Watching starts before the first version is published: a save made
    // as soon as `ready` is printed is seen.
    let (tx, rx) = mpsc::channel::<PathBuf>();
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        if let Ok(ev) = res {
            if matches!(ev.kind, notify::EventKind::Access(_)) {
                return;
            }
            for p in ev.paths {
                let _ = tx.send(p);
            }
        }
    })?;
    watcher.watch(&d.project.dir, RecursiveMode::Recursive)?;
    let first = d.publish();
    d.report(&first, "ready");
    let mut shadow_checked = d.shadowing(&first, &args.profile, None);
    if args.once {
        drop(watcher);
        return Ok(if first.is_ok() { ExitCode::SUCCESS } else { ExitCode::from(1) });
    }
    if !d.json {
        println!(
            "  row:      [[plugin]] id = \"{}\"  path = \"{}\"  dev = true",
            d.project.name,
            d.component.display()
        );
        println!("  watching: {} (Ctrl-C to stop)", d.project.dir.display());
    }
    loop {
        let Ok(first) = rx.recv() else { return Ok(ExitCode::SUCCESS) };
        let mut relevant = d.is_source(&first);
        std::thread::sleep(DEBOUNCE);
        while let Ok(p) = rx.try_recv() {
            relevant |= d.is_source(&p);
        }
        if relevant {
            let r = d.publish();
            d.report(&r, "reloaded");
            shadow_checked = d.shadowing(&r, &args.profile, shadow_checked);
        }
    }
}

/// What one publish did.
struct Published {
    version: Option<std::sync::Arc<PluginVersion>>,
    ms: f64,
}

impl Dev {
    /// Whether a change at `p` is one of the project's sources (not the
    /// build's output, dependencies or editor files).
    fn is_source(&self, p: &Path) -> bool {
        let Ok(rel) = p.strip_prefix(&self.project.dir) else { return false };
        let mut parts = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned());
        let Some(first) = parts.next() else { return false };
        if ["target", "node_modules", "__pycache__", ".git"].contains(&first.as_str()) {
            return false;
        }
        let name = rel.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if name.starts_with('.') || name.ends_with('~') || name.ends_with(".swp") || name.ends_with(".pyc") {
            return false;
        }
        match self.project.lang {
            Lang::Python => name.ends_with(".py") || name == "pyproject.toml",
            Lang::Js => {
                [".js", ".mjs", ".cjs", ".ts", ".json"].iter().any(|s| name.ends_with(s)) && name != "package-lock.json"
            }
            Lang::Rust => name.ends_with(".rs") || name == "Cargo.toml" || rel.starts_with("wit"),
            Lang::C => {
                name.ends_with(".c") || name.ends_with(".h") || name.ends_with(".wit") || name == "component.toml"
            }
        }
    }

    /// The first `NAME.src.d/N` number not used yet.
    fn first_free_version(&self) -> u64 {
        let d = self.versions_dir();
        std::fs::read_dir(&d)
            .map(|it| it.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok()).max().unwrap_or(0) + 1)
            .unwrap_or(1)
    }

    fn versions_dir(&self) -> PathBuf {
        self.out_dir.join(format!("{}.src.d", self.project.name))
    }

    fn link(&self) -> PathBuf {
        self.out_dir.join(format!("{}.src", self.project.name))
    }

    /// Builds the current sources, loads them like a host, and publishes
    /// them when they load. The error is `FILE:LINE: message` when one is
    /// known.
    fn publish(&mut self) -> Result<Published, String> {
        let t0 = Instant::now();
        let version = match self.project.lang {
            Lang::Rust | Lang::C => self.publish_built()?,
            _ => self.publish_source()?,
        };
        Ok(Published { version: Some(version), ms: t0.elapsed().as_secs_f64() * 1e3 })
    }

    fn publish_source(&mut self) -> Result<std::sync::Arc<PluginVersion>, String> {
        let n = self.next;
        self.next += 1;
        let staged = self.versions_dir().join(n.to_string());
        let _ = std::fs::remove_dir_all(&staged);
        std::fs::create_dir_all(&staged).map_err(|e| format!("{}: {e}", staged.display()))?;
        let made = match self.project.lang {
            Lang::Python => self.stage_python(&staged),
            _ => self.stage_js(&staged),
        };
        let loaded = made.and_then(|()| self.load(Some(&staged)));
        match loaded {
            Ok(v) => {
                swap_link(&self.link(), Path::new(&n.to_string())).map_err(|e| format!("publishing: {e}"))?;
                self.prune(n);
                Ok(v)
            }
            Err(e) => {
                let _ = std::fs::remove_dir_all(&staged);
                Err(e)
            }
        }
    }

    /// Removes published versions older than the last few.
    fn prune(&self, current: u64) {
        let Ok(it) = std::fs::read_dir(self.versions_dir()) else { return };
        for e in it.flatten() {
            if let Some(n) = e.file_name().to_str().and_then(|s| s.parse::<u64>().ok())
                && n + (KEEP_VERSIONS as u64) < current
            {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }

    /// Python: the project's `.py` files (and `pyproject.toml`) as they
    /// are, and the third-party packages they need from the release build's
    /// site-packages ([`crate::pypath`]).
    fn stage_python(&self, staged: &Path) -> Result<(), String> {
        copy_sources(&self.project.dir, staged, &|name| name.ends_with(".py") || name == "pyproject.toml", 0)
            .map_err(|e| format!("copying the sources: {e}"))?;
        let pyproject = std::fs::read_to_string(self.project.dir.join("pyproject.toml")).unwrap_or_default();
        let path = match &self.site {
            Some(site) => crate::pypath::stage_site_packages(staged, site, &crate::pypath::dependencies(&pyproject))?,
            None => Vec::new(),
        };
        let meta = json!({"lang": "python", "module": self.project.entry, "path": path});
        std::fs::write(staged.join("wharf-dev.json"), meta.to_string()).map_err(|e| e.to_string())
    }

    /// JavaScript: esbuild bundles the entry and its imports into one
    /// CommonJS script, `wharf-sdk` left to the runtime.
    fn stage_js(&self, staged: &Path) -> Result<(), String> {
        let sdk_js = sdk_dir().map_err(|e| e.to_string())?.join("js");
        let bins = [self.project.dir.join("node_modules/.bin"), sdk_js.join("node_modules/.bin")];
        let esbuild = find_program("esbuild", "WHARF_ESBUILD", &bins)
            .ok_or_else(|| format!("esbuild not found: run `npm ci` in {}", sdk_js.display()))?;
        let out = Command::new(esbuild)
            .arg(&self.project.entry)
            .args([
                "--bundle",
                "--format=cjs",
                "--platform=neutral",
                "--main-fields=module,main",
                "--conditions=wharf-component",
                "--external:wharf-sdk",
                "--external:wharf:*",
                "--log-level=error",
                "--color=false",
            ])
            .arg(format!("--outfile={}", staged.join("app.cjs").display()))
            .current_dir(&self.project.dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run esbuild: {e}"))?;
        if !out.status.success() {
            return Err(esbuild_error(&String::from_utf8_lossy(&out.stderr)));
        }
        let meta = json!({"lang": "js", "entry": self.project.entry, "bundle": "app.cjs"});
        std::fs::write(staged.join("wharf-dev.json"), meta.to_string()).map_err(|e| e.to_string())
    }

    /// Rust: an incremental `cargo build`; C: the release build's steps
    /// (`wit-bindgen c`, clang, `wasm-tools component new`). The component
    /// is then loaded (filling the compile cache) and moved into place.
    fn publish_built(&mut self) -> Result<std::sync::Arc<PluginVersion>, String> {
        let staged = self.out_dir.join(format!(".{}.wasm.new", self.project.name));
        if self.project.lang == Lang::C {
            crate::build::build_c(&self.project, &staged).map_err(|e| e.to_string())??;
        } else {
            let artifact = crate::build::build_rust(&self.project, &self.cargo_profile)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "cargo build failed (see above)".to_string())?;
            std::fs::copy(&artifact, &staged).map_err(|e| format!("{}: {e}", staged.display()))?;
        }
        let v = self.load_file(&staged, None);
        match v {
            Ok(v) => {
                std::fs::rename(&staged, &self.component).map_err(|e| format!("publishing: {e}"))?;
                Ok(v)
            }
            Err(e) => {
                let _ = std::fs::remove_file(&staged);
                Err(e)
            }
        }
    }

    fn load(&self, source: Option<&Path>) -> Result<std::sync::Arc<PluginVersion>, String> {
        self.load_file(&self.component, source)
    }

    fn load_file(&self, file: &Path, source: Option<&Path>) -> Result<std::sync::Arc<PluginVersion>, String> {
        let spec = PluginSpec {
            id: self.project.name.clone(),
            path: file.to_path_buf(),
            config: json!({}),
            grant: Grant { dev_source: source.map(Path::to_path_buf), ..Grant::default() },
            warm: false,
            on_invalid_config: Default::default(),
        };
        self.runtime.load_for_inspection(&spec).map_err(|e| source_error(&e.to_string()))
    }

    /// Reports the published version's tool names other rows of the
    /// profile offer ([`crate::shadow`]) when they differ from `checked`
    /// (the names last checked); the names now checked.
    fn shadowing(
        &self,
        r: &Result<Published, String>,
        profile: &crate::shadow::ProfileFlags,
        checked: Option<Vec<String>>,
    ) -> Option<Vec<String>> {
        let Ok(Published { version: Some(v), .. }) = r else { return checked };
        let tools: Vec<String> = v.tools.iter().map(|t| t.name.clone()).collect();
        if checked.as_ref() != Some(&tools) {
            crate::shadow::warn(profile, &self.component, &tools, &self.runtime);
        }
        Some(tools)
    }

    fn report(&self, r: &Result<Published, String>, event: &str) {
        let name = &self.project.name;
        match r {
            Ok(p) => {
                let tools: Vec<String> =
                    p.version.iter().flat_map(|v| v.tools.iter().map(|t| t.name.clone())).collect();
                let digest = p.version.as_ref().map(|v| v.digest.chars().take(12).collect::<String>());
                if self.json {
                    println!(
                        "{}",
                        json!({"event": event, "name": name, "path": self.component, "ms": (p.ms * 10.0).round() / 10.0,
                               "tools": tools, "digest": digest})
                    );
                } else if event == "ready" {
                    println!("{name} (dev): serving {} — tools: {}", self.component.display(), tools.join(", "));
                } else {
                    println!("{name} reloaded (dev) in {:.0} ms — tools: {}", p.ms, tools.join(", "));
                }
            }
            Err(e) => {
                if self.json {
                    println!("{}", json!({"event": "error", "name": name, "error": e}));
                } else {
                    println!("{name}: {e}");
                    println!("  (not published: the previous version keeps serving)");
                }
            }
        }
        use std::io::Write;
        let _ = std::io::stdout().flush();
    }
}

/// The `FILE:LINE: error` a dev loader printed, from a load error (the
/// runtime quotes it after `it printed: `); else the error as is.
fn source_error(load_error: &str) -> String {
    match load_error.rsplit_once("it printed: ") {
        Some((_, line)) => line.trim().to_string(),
        None => load_error.to_string(),
    }
}

/// esbuild's first error as `FILE:LINE: message` (its text is
/// `✘ [ERROR] message` then `    FILE:LINE:COL:`).
fn esbuild_error(stderr: &str) -> String {
    let mut message = None;
    for line in stderr.lines() {
        let t = line.trim();
        if message.is_none() && t.contains("[ERROR]") {
            message = t.split_once("[ERROR]").map(|(_, m)| m.trim().to_string());
            continue;
        }
        if let Some(m) = &message {
            let mut parts = t.splitn(3, ':');
            if let (Some(file), Some(line_no)) = (parts.next(), parts.next())
                && !file.is_empty()
                && line_no.chars().all(|c| c.is_ascii_digit())
                && !line_no.is_empty()
            {
                return format!("{file}:{line_no}: {m}");
            }
        }
    }
    match message {
        Some(m) => m,
        None => format!("esbuild failed: {}", stderr.trim()),
    }
}

/// Copies the files `keep` accepts from `from` into `to`, skipping build
/// output, dependencies and hidden entries.
fn copy_sources(from: &Path, to: &Path, keep: &dyn Fn(&str) -> bool, depth: usize) -> std::io::Result<()> {
    if depth > 8 {
        return Ok(());
    }
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || ["target", "node_modules", "__pycache__"].contains(&name.as_str()) {
            continue;
        }
        let ty = e.file_type()?;
        // A virtual environment inside the project is not source: its
        // packages come through the site-packages list.
        if ty.is_dir() && e.path().join("pyvenv.cfg").is_file() {
            continue;
        }
        if ty.is_dir() {
            copy_sources(&e.path(), &to.join(&name), keep, depth + 1)?;
        } else if ty.is_file() && keep(&name) {
            std::fs::create_dir_all(to)?;
            std::fs::copy(e.path(), to.join(&name))?;
        }
    }
    Ok(())
}

/// Points `link` at `target` (relative), atomically.
fn swap_link(link: &Path, target: &Path) -> std::io::Result<()> {
    let name = link.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = link.with_file_name(format!(".{name}.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let dir_name = link.with_extension("src.d");
    let rel = Path::new(dir_name.file_name().unwrap_or_default()).join(target);
    std::os::unix::fs::symlink(rel, &tmp)?;
    std::fs::rename(&tmp, link)
}

/// Copies `from` to `to` unless `to` already holds the same bytes (a host
/// watching `to` then sees no change).
fn install_file(from: &Path, to: &Path) -> anyhow::Result<()> {
    let same = match (std::fs::metadata(from), std::fs::metadata(to)) {
        (Ok(a), Ok(b)) if a.len() == b.len() => {
            std::fs::read(from).ok().map(|b| wharf_runtime::cache::digest(&b))
                == std::fs::read(to).ok().map(|b| wharf_runtime::cache::digest(&b))
        }
        _ => false,
    };
    if !same {
        let tmp = to.with_extension("wasm.tmp");
        std::fs::copy(from, &tmp).with_context(|| format!("copying to {}", tmp.display()))?;
        std::fs::rename(&tmp, to).with_context(|| format!("writing {}", to.display()))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Dev runtimes
// ---------------------------------------------------------------------------

const PY_LOADER: &str =
    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../sdk/python/dev/wharf_dev_runtime.py"));
const JS_LOADER: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../sdk/js/dev/runtime.js"));
/// The WASI interfaces the JavaScript loader imports to read its source
/// (from wasmtime-wasi 48, the versions this host links).
const WASI_WIT: [(&str, &str); 3] = [
    ("io", include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../sdk/js/dev/wit/wasi-io.wit"))),
    ("clocks", include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../sdk/js/dev/wit/wasi-clocks.wit"))),
    ("filesystem", include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../sdk/js/dev/wit/wasi-filesystem.wit"))),
];

/// The exports of `kind`'s world, as the JavaScript SDK names them.
fn js_exports(kind: PluginKind) -> &'static str {
    match kind {
        PluginKind::Tool => "plugin, tool",
        PluginKind::Policy => "plugin, configure, policy",
        PluginKind::Hooks => "plugin, hooks",
        PluginKind::Skills => "plugin, skills, tool",
        PluginKind::Llm => "plugin",
    }
}

/// The digest of the files of `dir` (names and contents, sorted).
fn dir_digest(dir: &Path) -> anyhow::Result<String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("{}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let mut all = Vec::new();
    for f in files {
        all.extend_from_slice(f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default().as_bytes());
        all.push(0);
        all.extend(std::fs::read(&f)?);
        all.push(0);
    }
    Ok(wharf_runtime::cache::digest(&all))
}

fn tool_version(program: &Path, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .stderr(Stdio::null())
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// The cached dev runtime of `lang` and `kind`'s world, built when missing
/// (the first `wharf plugin dev` of a language takes as long as one
/// `plugin build`).
pub fn ensure_runtime(lang: Lang, kind: PluginKind, cache_root: &Path) -> anyhow::Result<PathBuf> {
    let sdk = sdk_dir()?;
    let wit = wit_dir()?;
    let wit_digest = dir_digest(&wit)?;
    let dir = cache_root.join("dev-runtimes");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    match lang {
        Lang::Python => {
            let cpy = find_program("componentize-py", "WHARF_COMPONENTIZE_PY", &[]).context(
                "componentize-py not found: `pip install componentize-py==0.25.1` (or run sdk/install-toolchains.sh)",
            )?;
            let sdk_py = sdk.join("python");
            let sdk_src = std::fs::read(sdk_py.join("wharf_sdk.py")).context("reading the Python SDK")?;
            let key = wharf_runtime::cache::digest(
                format!(
                    "{}|{wit_digest}|{}|{}|{}",
                    tool_version(&cpy, &["--version"]),
                    kind.world(),
                    wharf_runtime::cache::digest(&sdk_src),
                    wharf_runtime::cache::digest(PY_LOADER.as_bytes())
                )
                .as_bytes(),
            );
            let out = dir.join(format!("python-{}-{}.wasm", kind.as_str(), &key[..16]));
            if out.is_file() {
                return Ok(out);
            }
            let build = dir.join(format!(".python-{}-{}", kind.as_str(), std::process::id()));
            std::fs::create_dir_all(&build)?;
            std::fs::write(build.join("wharf_dev_runtime.py"), PY_LOADER)?;
            let tmp = build.join("runtime.wasm");
            let ok = crate::build::run_step(
                Command::new(cpy)
                    .arg("-d")
                    .arg(&wit)
                    .args(["-w", kind.world(), "componentize", "wharf_dev_runtime", "-p"])
                    .arg(&build)
                    .arg("-p")
                    .arg(&sdk_py)
                    .arg("-o")
                    .arg(&tmp)
                    .current_dir(&build),
                "componentize-py (dev runtime)",
            )?;
            if !ok {
                bail!("building the Python dev runtime failed (see above)");
            }
            std::fs::rename(&tmp, &out)?;
            let _ = std::fs::remove_dir_all(&build);
            Ok(out)
        }
        Lang::Js => {
            let sdk_js = sdk.join("js");
            let bins = [sdk_js.join("node_modules/.bin")];
            let esbuild = find_program("esbuild", "WHARF_ESBUILD", &bins)
                .with_context(|| format!("esbuild not found: run `npm ci` in {}", sdk_js.display()))?;
            let cjs = find_program("componentize-js", "WHARF_COMPONENTIZE_JS", &bins)
                .with_context(|| format!("componentize-js not found: run `npm ci` in {}", sdk_js.display()))?;
            let mut sdk_src = Vec::new();
            for f in ["wharf_sdk.js", "host_component.js", "package.json"] {
                sdk_src.extend(std::fs::read(sdk_js.join(f)).with_context(|| format!("reading sdk/js/{f}"))?);
            }
            let cjs_version = std::fs::canonicalize(&cjs)
                .ok()
                .and_then(|p| p.parent().and_then(Path::parent).map(|d| d.join("package.json")))
                .and_then(|p| std::fs::read_to_string(p).ok())
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .and_then(|v| v["version"].as_str().map(String::from))
                .unwrap_or_default();
            let key = wharf_runtime::cache::digest(
                format!(
                    "{cjs_version}|{}|{wit_digest}|{}|{}|{}",
                    tool_version(&esbuild, &["--version"]),
                    kind.world(),
                    wharf_runtime::cache::digest(&sdk_src),
                    wharf_runtime::cache::digest(JS_LOADER.as_bytes())
                )
                .as_bytes(),
            );
            let out = dir.join(format!("js-{}-{}.wasm", kind.as_str(), &key[..16]));
            if out.is_file() {
                return Ok(out);
            }
            let build = dir.join(format!(".js-{}-{}", kind.as_str(), std::process::id()));
            let wit_out = build.join("wit");
            std::fs::create_dir_all(&wit_out)?;
            for e in std::fs::read_dir(&wit)? {
                let p = e?.path();
                if p.is_file() {
                    std::fs::copy(&p, wit_out.join(p.file_name().unwrap_or_default()))?;
                }
            }
            for (name, text) in WASI_WIT {
                let d = wit_out.join("deps").join(name);
                std::fs::create_dir_all(&d)?;
                std::fs::write(d.join(format!("{name}.wit")), text)?;
            }
            let world = format!("{}-dev", kind.world());
            std::fs::write(
                wit_out.join("dev.wit"),
                format!(
                    "/// `wharf plugin dev`'s JavaScript runtime: `{}` plus reading the preopened source.\n\
                     world {world} {{\n    include {};\n    import wasi:filesystem/preopens@0.2.12;\n}}\n",
                    kind.world(),
                    kind.world()
                ),
            )?;
            // The loader, re-exporting only the world's exports.
            let runtime_js = sdk_js.join("dev").join("runtime.js");
            std::fs::write(
                build.join("entry.js"),
                format!(
                    "export {{ {} }} from {};\n",
                    js_exports(kind),
                    json!(absolute(runtime_js).display().to_string())
                ),
            )?;
            let bundle = build.join("runtime.bundle.js");
            let ok = crate::build::run_step(
                Command::new(esbuild)
                    .arg("entry.js")
                    .args([
                        "--bundle",
                        "--format=esm",
                        "--platform=neutral",
                        "--main-fields=module,main",
                        "--conditions=wharf-component",
                        "--external:wharf:*",
                        "--external:wasi:*",
                        "--log-level=warning",
                    ])
                    .arg(format!("--outfile={}", bundle.display()))
                    .current_dir(&build),
                "esbuild (dev runtime)",
            )?;
            if !ok {
                bail!("bundling the JavaScript dev runtime failed (see above)");
            }
            let tmp = build.join("runtime.wasm");
            let ok = crate::build::run_step(
                Command::new(cjs)
                    .arg("runtime.bundle.js")
                    .arg("--wit")
                    .arg(&wit_out)
                    .args(["-n", &world, "-d", "fetch-event", "http", "-o"])
                    .arg(&tmp)
                    .current_dir(&build),
                "componentize-js (dev runtime)",
            )?;
            if !ok {
                bail!("building the JavaScript dev runtime failed (see above)");
            }
            std::fs::rename(&tmp, &out)?;
            let _ = std::fs::remove_dir_all(&build);
            Ok(out)
        }
        Lang::Rust | Lang::C => bail!("no dev runtime for {}", lang.as_str()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn esbuild_errors_become_file_line() {
        let err = "✘ [ERROR] Expected \";\" but found \"x\"\n\n    app.js:7:12:\n      7 │ let a = 1 x\n";
        assert_eq!(esbuild_error(err), "app.js:7: Expected \";\" but found \"x\"");
        assert_eq!(
            source_error("x.wasm: plugin.info() failed: the plugin trapped: …; it printed: app.py:3: SyntaxError: bad"),
            "app.py:3: SyntaxError: bad"
        );
    }
}
