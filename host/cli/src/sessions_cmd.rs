//! `wharf sessions list|show|export|fork`: views over the stored logs.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;
use wharf_core::events::EventKind;
use wharf_core::store::{ExportFormat, Store};

use crate::host_ctx::resolve_session;
use crate::output::Stdout;
use crate::render::TextRenderer;

/// Session subcommands.
#[derive(Subcommand, Debug)]
pub enum SessionsCommand {
    /// List sessions, newest first.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show a session's transcript and token usage.
    Show {
        /// Session id (a unique prefix is enough).
        id: String,
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
}

fn store(dir: Option<PathBuf>) -> Result<Store> {
    let dir = match dir {
        Some(d) => d,
        None => Store::default_root()?,
    };
    Ok(Store::new(dir))
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

fn print(cmd: SessionsCommand, store: &Store, out: &mut Stdout) -> Result<()> {
    match cmd {
        SessionsCommand::List { json } => {
            let mut list = store.list()?;
            // Newest first: by creation time, then id (ids start with it).
            list.sort_by(|a, b| (&b.header.created, &b.id).cmp(&(&a.header.created, &a.id)));
            if json {
                let v: Vec<serde_json::Value> = list
                    .iter()
                    .map(|s| {
                        serde_json::json!({
                            "id": s.id,
                            "title": s.title,
                            "created": s.header.created,
                            "workspace": s.header.workspace,
                            "parent": s.header.parent,
                            "path": s.path,
                            "bytes": s.bytes,
                        })
                    })
                    .collect();
                writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
            } else {
                for s in list {
                    writeln!(out, "{}  {}  {}", s.id, s.header.created, s.title.as_deref().unwrap_or("(no prompt)"))?;
                }
            }
        }
        SessionsCommand::Show { id } => {
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
                    EventKind::UserMessage(m) => writeln!(out, "\n> {}", m.content)?,
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
    }
    out.flush()?;
    Ok(())
}
