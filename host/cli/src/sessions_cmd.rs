//! `wharf sessions list|show|export|fork`: views over the stored logs.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Subcommand;
use wharf_core::events::EventKind;
use wharf_core::store::{ExportFormat, Store};

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
        /// Session id.
        id: String,
    },
    /// Export a session log (JSONL by default).
    Export {
        /// Session id.
        id: String,
        /// Export as one JSON array instead of JSONL.
        #[arg(long)]
        json: bool,
    },
    /// Fork a session at a turn boundary into a new session.
    Fork {
        /// Session id.
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

/// Runs a sessions subcommand.
pub fn run(cmd: SessionsCommand, dir: Option<PathBuf>) -> Result<ExitCode> {
    let store = store(dir)?;
    match cmd {
        SessionsCommand::List { json } => {
            let list = store.list()?;
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
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                for s in list {
                    println!("{}  {}  {}", s.id, s.header.created, s.title.as_deref().unwrap_or("(no prompt)"));
                }
            }
        }
        SessionsCommand::Show { id } => {
            let loaded = store.load(&id)?;
            for w in &loaded.warnings {
                eprintln!("warning: {w}");
            }
            let mut renderer = crate::render::TextRenderer::default();
            let mut out = std::io::stdout().lock();
            let mut usage = wharf_core::plugin::Usage::default();
            let mut steps = 0;
            for ev in &loaded.events {
                match &ev.kind {
                    EventKind::UserMessage(m) => {
                        use std::io::Write;
                        let _ = writeln!(out, "\n> {}", m.content);
                    }
                    EventKind::AssistantMessage(m) => {
                        use std::io::Write;
                        if !m.content.is_empty() {
                            let _ = writeln!(out, "{}", m.content);
                        }
                        if let Some(u) = &m.usage {
                            usage.add(u);
                        }
                    }
                    EventKind::StepEnd(s) => {
                        steps += 1;
                        if let Some(u) = &s.usage {
                            use std::io::Write;
                            let _ = writeln!(
                                out,
                                "  · step {}.{}: {} prompt ({} cached) / {} completion tokens",
                                s.turn, s.step, u.prompt_tokens, u.cache_hit_tokens, u.completion_tokens
                            );
                        }
                    }
                    EventKind::AssistantChunk(_) => {}
                    _ => renderer.render(ev, &mut out),
                }
            }
            println!(
                "\nsession {id}: {} events, {steps} steps, tokens {} prompt ({} cached) / {} completion ({} reasoning)",
                loaded.events.len(),
                usage.prompt_tokens,
                usage.cache_hit_tokens,
                usage.completion_tokens,
                usage.reasoning_tokens
            );
        }
        SessionsCommand::Export { id, json } => {
            let fmt = if json { ExportFormat::JsonArray } else { ExportFormat::Jsonl };
            let mut out = std::io::stdout().lock();
            store.export(&id, fmt, &mut out)?;
        }
        SessionsCommand::Fork { id, at } => {
            let log = store.fork(&id, at)?;
            println!("{}", log.id());
        }
    }
    Ok(ExitCode::SUCCESS)
}
