//! `wharf sessions list|show|export|fork|migrate`: views over the stored
//! logs, and copies between stores (JSONL directory ⇄ PostgreSQL).

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;
use wharf_core::events::{Event, EventKind, SessionStart};
use wharf_core::store::{ExportFormat, SessionStore, SessionSummary};

use wharf_chat::render::TextRenderer;
use wharf_cli_common::HostArgs;
use wharf_cli_common::output::Stdout;
use wharf_harness::sessions::{is_postgres_url, open_store, resolve_session, same_workspace};
use wharf_harness::usage::{self, UsageSummary};

/// Session subcommands.
#[derive(Subcommand, Debug)]
pub enum SessionsCommand {
    /// List this workspace's sessions, newest first, with status, steps,
    /// tokens and cost.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Every stored session, of any workspace.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        pricing: Pricing,
    },
    /// Show a session's transcript, token usage, cost and context use.
    Show {
        /// Session id (a unique prefix is enough).
        id: String,
        #[command(flatten)]
        pricing: Pricing,
    },
    /// Export a session log (JSONL by default).
    Export {
        /// Session id (a unique prefix is enough).
        id: String,
        /// Export as one JSON array instead of JSONL.
        #[arg(long)]
        json: bool,
    },
    /// Fork a session at a turn boundary into a new session.
    Fork {
        /// Session id (a unique prefix is enough).
        id: String,
        /// Copy events up to and including this seq (must end a turn).
        #[arg(long)]
        at: u64,
    },
    /// Copy sessions to another store, event text byte for byte: a
    /// directory of JSONL logs or `postgres://…`. Sessions already there
    /// with the same events are skipped.
    Migrate {
        /// The target store: a directory or a `postgres://` URL.
        #[arg(long, value_name = "DIR|URL")]
        to: String,
        /// Only these sessions (default: all).
        #[arg(value_name = "ID")]
        ids: Vec<String>,
    },
}

/// Where prices come from and which workspace is "this" one.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Pricing {
    /// Price with this profile's adapter tables (default: each session's own profile).
    #[arg(long, short = 'p', value_name = "PROFILE")]
    profile: Option<String>,
    /// The workspace (default: the current directory).
    #[arg(long, short = 'w', value_name = "DIR")]
    workspace: Option<PathBuf>,
}

/// Configs to price sessions with, loaded once per profile name (a profile
/// that no longer loads prices nothing).
struct Prices {
    pricing: Pricing,
    loaded: HashMap<String, Option<wharf_config::Config>>,
}

impl Prices {
    fn new(pricing: Pricing) -> Self {
        Self { pricing, loaded: HashMap::new() }
    }

    fn workspace(&self) -> Result<PathBuf> {
        HostArgs { workspace: self.pricing.workspace.clone(), ..HostArgs::default() }.workspace()
    }

    fn summarize(&mut self, header: &SessionStart, events: &[Event]) -> Option<UsageSummary> {
        let profile =
            self.pricing.profile.clone().or_else(|| header.profile.clone()).unwrap_or_else(|| "default".into());
        let workspace = self.pricing.workspace.clone();
        let config = self.loaded.entry(profile.clone()).or_insert_with(|| {
            let args = HostArgs { profile, workspace, ..HostArgs::default() };
            args.load_config().map_err(|e| tracing::debug!("cannot load the profile for prices: {e:#}")).ok()
        });
        config.as_ref().map(|c| usage::summarize(c, events))
    }
}

fn store(dir: Option<PathBuf>) -> Result<SessionStore> {
    if let Some(d) = &dir
        && let Some(url) = d.to_str().filter(|u| is_postgres_url(u))
    {
        return open_store(Some(url), PathBuf::new());
    }
    let dir = match dir {
        Some(d) => d,
        None => {
            // `session.store` of the default profile, when it names a database.
            let configured = HostArgs::default().load_config().ok().and_then(|c| c.session.store);
            if configured.is_some() {
                return open_store(configured.as_deref(), PathBuf::new());
            }
            wharf_cli_common::env::default_session_dir()?
        }
    };
    Ok(SessionStore::new(dir))
}

/// `wharf sessions migrate`: copies sessions from `src` to `target`.
fn migrate(src: &SessionStore, target: &str, ids: Vec<String>, out: &mut Stdout) -> Result<()> {
    let dst = if is_postgres_url(target) {
        open_store(Some(target), PathBuf::new())?
    } else {
        SessionStore::new(PathBuf::from(target))
    };
    let ids = if ids.is_empty() {
        src.list()?.into_iter().map(|s| s.id).collect()
    } else {
        ids.iter().map(|p| resolve_session(src, p)).collect::<Result<Vec<_>>>()?
    };
    let (mut copied, mut skipped) = (0, 0);
    for id in ids {
        let loaded = src.load(&id)?;
        if dst.exists(&id)? {
            let there = dst.load(&id)?;
            anyhow::ensure!(
                there.lines == loaded.lines,
                "session {id} already exists in {} with other events; not overwritten",
                dst.describe()
            );
            writeln!(out, "skipped {id} (already there, {} events)", there.lines.len())?;
            skipped += 1;
            continue;
        }
        let log = dst.import(&loaded.lines)?;
        drop(log);
        writeln!(out, "copied {id} ({} events)", loaded.lines.len())?;
        copied += 1;
    }
    writeln!(out, "{copied} copied, {skipped} skipped: {} -> {}", src.describe(), dst.describe())?;
    Ok(())
}

/// Runs a sessions subcommand. A reader that closes stdout early
/// (`wharf sessions export ID | head`) ends the command quietly, exit 0.
pub fn run(cmd: SessionsCommand, dir: Option<PathBuf>) -> Result<ExitCode> {
    let store = store(dir)?;
    let mut out = Stdout::new();
    match print(cmd, &store, &mut out) {
        Err(_) if out.closed() => Ok(ExitCode::SUCCESS),
        r => r.map(|()| ExitCode::SUCCESS),
    }
}

fn print(cmd: SessionsCommand, store: &SessionStore, out: &mut Stdout) -> Result<()> {
    match cmd {
        SessionsCommand::List { json, all, pricing } => {
            let mut prices = Prices::new(pricing);
            let mut list = store.list()?;
            if !all {
                let ws = prices.workspace()?;
                list.retain(|s| same_workspace(&s.header, &ws));
            }
            // Newest first: by creation time, then id (ids start with it).
            list.sort_by(|a, b| (&b.header.created, &b.id).cmp(&(&a.header.created, &a.id)));
            let rows: Vec<(SessionSummary, UsageSummary)> = list
                .into_iter()
                .map(|s| {
                    let events = store.load(&s.id).map(|l| l.events).unwrap_or_default();
                    let u = prices.summarize(&s.header, &events).unwrap_or_else(|| usage::summarize_unpriced(&events));
                    (s, u)
                })
                .collect();
            if json {
                let v: Vec<serde_json::Value> = rows
                    .iter()
                    .map(|(s, u)| {
                        serde_json::json!({
                            "id": s.id,
                            "title": s.title,
                            "created": s.header.created,
                            "workspace": s.header.workspace,
                            "parent": s.header.parent,
                            "path": s.location,
                            "bytes": s.bytes,
                            "status": u.status,
                            "steps": u.steps,
                            "tokens": u.prompt_tokens + u.completion_tokens,
                            "cost": u.cost,
                            "currency": u.currency,
                            "model": u.model,
                        })
                    })
                    .collect();
                writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
            } else if rows.is_empty() {
                let hint = if all { "" } else { " in this workspace (--all lists every one)" };
                writeln!(out, "no sessions{hint}")?;
            } else {
                writeln!(
                    out,
                    "{:<26}  {:<20}  {:<11}  {:>5}  {:>9}  {:>10}  title",
                    "id", "created", "status", "steps", "tokens", "cost"
                )?;
                for (s, u) in rows {
                    let cost =
                        u.cost.map(|c| usage::format_cost(c, u.currency.as_deref())).unwrap_or_else(|| "-".into());
                    let created = wharf_core::util::cut_str(&s.header.created, 19).replace('T', " ");
                    let title = s.title.as_deref().unwrap_or("(no prompt)");
                    writeln!(
                        out,
                        "{:<26}  {created:<20}  {:<11}  {:>5}  {:>9}  {cost:>10}  {}",
                        s.id,
                        u.status,
                        u.steps,
                        u.prompt_tokens + u.completion_tokens,
                        one_line(title, 60)
                    )?;
                }
            }
        }
        SessionsCommand::Show { id, pricing } => {
            let id = resolve_session(store, &id)?;
            let loaded = store.load(&id)?;
            for w in &loaded.warnings {
                eprintln!("warning: {w}");
            }
            let mut renderer = TextRenderer::new(false, false);
            let mut usage = wharf_core::plugin::Usage::default();
            let mut steps = 0;
            for ev in &loaded.events {
                match &ev.kind {
                    EventKind::UserMessage(m) => {
                        writeln!(out, "\n> {}", m.content)?;
                        for image in &m.images {
                            writeln!(out, "> {}", image.placeholder())?;
                        }
                    }
                    EventKind::AssistantMessage(m) => {
                        if !m.content.is_empty() {
                            writeln!(out, "{}", m.content)?;
                        }
                        if let Some(u) = &m.usage {
                            usage.add(u);
                        }
                    }
                    EventKind::StepEnd(s) => {
                        steps += 1;
                        if let Some(u) = &s.usage {
                            writeln!(
                                out,
                                "  · step {}.{}: {} prompt ({} cached) / {} completion tokens",
                                s.turn, s.step, u.prompt_tokens, u.cache_hit_tokens, u.completion_tokens
                            )?;
                        }
                    }
                    EventKind::AssistantChunk(_) => {}
                    _ => renderer.render(ev, out),
                }
                if out.closed() {
                    return Ok(());
                }
            }
            writeln!(
                out,
                "\nsession {id}: {} events, {steps} steps, tokens {} prompt ({} cached) / {} completion ({} reasoning)",
                loaded.events.len(),
                usage.prompt_tokens,
                usage.cache_hit_tokens,
                usage.completion_tokens,
                usage.reasoning_tokens
            )?;
            if let Some(u) = Prices::new(pricing).summarize(&loaded.header, &loaded.events) {
                writeln!(out, "{}", usage::describe(&u))?;
            }
        }
        SessionsCommand::Export { id, json } => {
            let id = resolve_session(store, &id)?;
            let fmt = if json { ExportFormat::JsonArray } else { ExportFormat::Jsonl };
            store.export(&id, fmt, out)?;
        }
        SessionsCommand::Fork { id, at } => {
            let id = resolve_session(store, &id)?;
            let log = store.fork(&id, at)?;
            writeln!(out, "{}", log.id())?;
        }
        SessionsCommand::Migrate { to, ids } => migrate(store, &to, ids, out)?,
    }
    out.flush()?;
    Ok(())
}

fn one_line(s: &str, max: usize) -> String {
    let flat: String = s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if flat.chars().count() > max { format!("{}…", flat.chars().take(max).collect::<String>()) } else { flat }
}
