//! `wharf plugin add | list | remove`: Claude Code / Codex plugin bundles
//! (`wharf-bundle`) as `[[bundle]]` rows.
//!
//! `add` takes a bundle directory (used in place), a git URL (cloned into
//! `.wharf/bundles/NAME`), or a marketplace entry, `NAME@MARKETPLACE` or
//! `NAME --marketplace MARKETPLACE`, where the marketplace is a directory
//! or a git URL holding `.claude-plugin/marketplace.json`. It reads the
//! bundle, reports what Wharf will load and everything it cannot honour,
//! pins the content digest (and the commit of a git source) in
//! `bundles.lock`, and writes the `[[bundle]]` row with that digest into
//! the project layer (`WORKSPACE/.wharf/config.toml`) or, with `--user`,
//! `~/.wharf/config.toml`. A bundle already pinned whose content changed
//! is refused unless `--update`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use wharf_bundle::fetch::{clone, is_git_url};
use wharf_bundle::lock::{LockEntry, LockFile};
use wharf_bundle::marketplace::{Marketplace, Source};
use wharf_bundle::{Bundle, BundleError, layer, valid_name};

/// The bundle subcommands of `wharf plugin`.
#[derive(Subcommand, Debug)]
pub enum BundleCommand {
    /// Add a Claude Code / Codex plugin bundle: DIR, GIT-URL, or
    /// NAME@MARKETPLACE (a marketplace directory or git URL).
    Add(AddArgs),
    /// List the bundles added to this project (and, with --user, yours).
    List(WhereArgs),
    /// Remove a bundle's row, lock entry and installed copy.
    Remove {
        /// The bundle's name.
        name: String,
        /// Which layer.
        #[command(flatten)]
        at: WhereArgs,
    },
}

/// Which layer: the project's or the user's.
#[derive(Args, Debug, Clone)]
pub struct WhereArgs {
    /// The user layer (`~/.wharf/`) instead of the project's.
    #[arg(long)]
    pub user: bool,
    /// The workspace (default: the current directory).
    #[arg(long, short = 'w')]
    pub workspace: Option<PathBuf>,
}

/// `wharf plugin add`.
#[derive(Args, Debug)]
pub struct AddArgs {
    /// DIR, GIT-URL, or NAME@MARKETPLACE.
    pub source: String,
    /// The marketplace listing SOURCE (a directory or git URL).
    #[arg(long, value_name = "DIR|GIT-URL")]
    pub marketplace: Option<String>,
    /// Branch, tag or commit of a git source.
    #[arg(long = "ref", value_name = "REV")]
    pub rev: Option<String>,
    /// Accept content that differs from what was pinned.
    #[arg(long)]
    pub update: bool,
    /// Which layer.
    #[command(flatten)]
    pub at: WhereArgs,
}

/// Where one layer keeps its config, lock file and installed copies.
struct Layer {
    config: PathBuf,
    lock: PathBuf,
    installs: PathBuf,
}

impl Layer {
    fn of(at: &WhereArgs) -> Result<Self> {
        let dir = if at.user {
            let home = std::env::var_os("HOME").context("--user needs HOME")?;
            PathBuf::from(home).join(".wharf")
        } else {
            let ws = match &at.workspace {
                Some(w) => w.clone(),
                None => std::env::current_dir().context("the current directory")?,
            };
            std::path::absolute(ws)?.join(".wharf")
        };
        Ok(Self { config: dir.join("config.toml"), lock: dir.join("bundles.lock"), installs: dir.join("bundles") })
    }
}

/// Runs a bundle subcommand.
pub fn run(cmd: BundleCommand) -> Result<ExitCode> {
    match cmd {
        BundleCommand::Add(a) => add(a),
        BundleCommand::List(at) => list(&at),
        BundleCommand::Remove { name, at } => remove(&name, &at),
    }
}

/// What `add` resolved the source to.
struct Fetched {
    /// The bundle directory.
    path: PathBuf,
    /// A clone to move into place (git sources): (staging dir, bundle subpath).
    staged: Option<(PathBuf, PathBuf)>,
    commit: Option<String>,
    marketplace: Option<String>,
}

fn staging(layer: &Layer) -> Result<PathBuf> {
    std::fs::create_dir_all(&layer.installs).with_context(|| format!("creating {}", layer.installs.display()))?;
    let dir = layer.installs.join(format!(".staging-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    Ok(dir)
}

fn fetch(a: &AddArgs, layer: &Layer) -> Result<Fetched> {
    let (entry, market) = match &a.marketplace {
        Some(m) => (Some(a.source.clone()), Some(m.clone())),
        None if Path::new(&a.source).is_dir() => (None, None),
        None if is_git_url(&a.source) => (None, None),
        None => match a.source.split_once('@') {
            Some((n, m)) if valid_name(n) => (Some(n.to_string()), Some(m.to_string())),
            _ => bail!("`{}` is not a directory, a git URL or NAME@MARKETPLACE", a.source),
        },
    };
    let Some(market) = market else {
        if Path::new(&a.source).is_dir() {
            let path = std::fs::canonicalize(&a.source).with_context(|| a.source.clone())?;
            return Ok(Fetched { path, staged: None, commit: None, marketplace: None });
        }
        let dir = staging(layer)?;
        let commit = clone(&a.source, a.rev.as_deref(), &dir)?;
        return Ok(Fetched {
            path: dir.clone(),
            staged: Some((dir, PathBuf::new())),
            commit: Some(commit),
            marketplace: None,
        });
    };
    let entry = entry.unwrap_or_default();
    if Path::new(&market).is_dir() {
        let m = Marketplace::load(Path::new(&market))?;
        return Ok(match &m.entry(&entry)?.source {
            Source::Path(p) => Fetched { path: p.clone(), staged: None, commit: None, marketplace: Some(market) },
            Source::Git { url, rev } => {
                let dir = staging(layer)?;
                let commit = clone(url, a.rev.as_deref().or(rev.as_deref()), &dir)?;
                Fetched {
                    path: dir.clone(),
                    staged: Some((dir, PathBuf::new())),
                    commit: Some(commit),
                    marketplace: Some(market),
                }
            }
        });
    }
    if !is_git_url(&market) {
        bail!("marketplace `{market}` is neither a directory nor a git URL");
    }
    // A git marketplace: clone it; a path entry is a directory of that clone.
    let dir = staging(layer)?;
    let commit = clone(&market, None, &dir)?;
    let m = Marketplace::load(&dir)?;
    let found = m.entry(&entry).map(|e| e.source.clone());
    match found {
        Ok(Source::Path(p)) => {
            let root = std::fs::canonicalize(&dir)?;
            let sub = p.strip_prefix(&root).unwrap_or(Path::new("")).to_path_buf();
            Ok(Fetched { path: p, staged: Some((dir, sub)), commit: Some(commit), marketplace: Some(market) })
        }
        Ok(Source::Git { url, rev }) => {
            let _ = std::fs::remove_dir_all(&dir);
            let dir = staging(layer)?;
            let commit = clone(&url, a.rev.as_deref().or(rev.as_deref()), &dir)?;
            Ok(Fetched {
                path: dir.clone(),
                staged: Some((dir, PathBuf::new())),
                commit: Some(commit),
                marketplace: Some(market),
            })
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            Err(e.into())
        }
    }
}

fn add(a: AddArgs) -> Result<ExitCode> {
    let layer = Layer::of(&a.at)?;
    let fetched = fetch(&a, &layer)?;
    let cleanup = |f: &Fetched| {
        if let Some((dir, _)) = &f.staged {
            let _ = std::fs::remove_dir_all(dir);
        }
    };
    let result = install(&a, &layer, &fetched);
    if result.is_err() {
        cleanup(&fetched);
    }
    result
}

fn install(a: &AddArgs, layer: &Layer, f: &Fetched) -> Result<ExitCode> {
    let bundle = Bundle::load(&f.path)?;
    let name = bundle.name().to_string();
    let digest = bundle.digest()?;
    let mut lock = LockFile::load(&layer.lock)?;
    if let Some(old) = lock.get(&name)
        && old.digest != digest
        && !a.update
    {
        return Err(BundleError::Changed { name, pinned: old.digest.clone(), found: digest }.into());
    }
    // A clone moves to .wharf/bundles/NAME.
    let path = match &f.staged {
        None => f.path.clone(),
        Some((dir, sub)) => {
            let dest = layer.installs.join(&name);
            if dest.exists() {
                std::fs::remove_dir_all(&dest).with_context(|| format!("replacing {}", dest.display()))?;
            }
            std::fs::rename(dir, &dest).with_context(|| format!("moving the clone to {}", dest.display()))?;
            dest.join(sub)
        }
    };
    let text = match std::fs::read_to_string(&layer.config) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| layer.config.display().to_string()),
    };
    let text = layer::set_row(&text, &layer.config, &name, &path, &digest)?;
    if let Some(d) = layer.config.parent() {
        std::fs::create_dir_all(d)?;
    }
    std::fs::write(&layer.config, text).with_context(|| layer.config.display().to_string())?;
    lock.upsert(LockEntry {
        name: name.clone(),
        source: a.source.clone(),
        marketplace: f.marketplace.clone(),
        commit: f.commit.clone(),
        digest: digest.clone(),
        path: path.clone(),
    });
    lock.save(&layer.lock)?;
    println!("added bundle `{name}` from {}", a.source);
    println!("  path     {}", path.display());
    println!("  digest   {digest}");
    if let Some(c) = &f.commit {
        println!("  commit   {c}");
    }
    print_parts(&bundle);
    if !bundle.issues.is_empty() {
        println!("  not honoured by Wharf:");
        for i in &bundle.issues {
            println!("    - {i}");
        }
    }
    println!("  row      [[bundle]] name = \"{name}\" in {}", layer.config.display());
    Ok(ExitCode::SUCCESS)
}

fn print_parts(b: &Bundle) {
    let names = |v: Vec<String>| if v.is_empty() { "none".to_string() } else { v.join(", ") };
    println!("  skills   {}", names(b.skills.clone()));
    println!("  commands {}", names(b.commands.iter().map(|c| format!("/{}", c.name)).collect()));
    println!("  agents   {}", names(b.agents.iter().map(|a| a.name.clone()).collect()));
    println!(
        "  hooks    {}",
        names(
            b.hooks
                .iter()
                .map(|h| if h.matcher_text.is_empty() {
                    h.event.as_str().to_string()
                } else {
                    format!("{} [{}]", h.event.as_str(), h.matcher_text)
                })
                .collect()
        )
    );
    println!("  mcp      {}", names(b.mcp.iter().map(|m| format!("{} (mcp__{}__*)", m.server, m.name)).collect()));
}

fn list(at: &WhereArgs) -> Result<ExitCode> {
    let mut layers = vec![("project", Layer::of(&WhereArgs { user: false, workspace: at.workspace.clone() })?)];
    if at.user {
        layers.push(("user", Layer::of(at)?));
    }
    let mut any = false;
    for (label, layer) in layers {
        let lock = LockFile::load(&layer.lock)?;
        for e in &lock.bundles {
            any = true;
            let state = match Bundle::load(&e.path).and_then(|b| b.digest().map(|d| (b, d))) {
                Ok((_, d)) if d == e.digest => "ok".to_string(),
                Ok((_, d)) => format!("CHANGED (now {})", &d[..d.len().min(19)]),
                Err(err) => format!("MISSING ({err})"),
            };
            let d = &e.digest[..e.digest.len().min(19)];
            println!("{}  [{label}]  {d}  {state}  {}", e.name, e.source);
        }
    }
    if !any {
        println!("no bundles (add one with `wharf plugin add DIR|GIT-URL|NAME@MARKETPLACE`)");
    }
    Ok(ExitCode::SUCCESS)
}

fn remove(name: &str, at: &WhereArgs) -> Result<ExitCode> {
    let layer = Layer::of(at)?;
    let mut lock = LockFile::load(&layer.lock)?;
    let entry = lock.remove(name);
    let mut removed_row = false;
    if let Ok(text) = std::fs::read_to_string(&layer.config) {
        let (text, removed) = layer::remove_row(&text, &layer.config, name)?;
        if removed {
            std::fs::write(&layer.config, text)?;
            removed_row = true;
        }
    }
    if entry.is_none() && !removed_row {
        bail!("no bundle `{name}` in {}", layer.config.display());
    }
    lock.save(&layer.lock)?;
    let copy = layer.installs.join(name);
    if copy.is_dir() {
        std::fs::remove_dir_all(&copy).with_context(|| format!("removing {}", copy.display()))?;
    }
    println!("removed bundle `{name}`");
    Ok(ExitCode::SUCCESS)
}
