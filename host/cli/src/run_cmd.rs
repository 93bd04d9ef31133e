//! `wharf run "TASK"`: one headless turn. Exit 0 only when the turn ends
//! `completed`; `--output jsonl` streams every event as it is appended.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, ValueEnum};
use wharf_core::events::{EventKind, StopReason};

use wharf_chat::render::{TextRenderer, reason_text};
use wharf_cli_common::HostArgs;

/// Output formats of `wharf run`.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Output {
    /// A readable transcript on stdout, a summary on stderr.
    Text,
    /// Every session event as one JSON line, as it is appended.
    Jsonl,
}

/// How often `wharf run`'s printer looks for new events while a turn
/// produces them.
const PRINT_TICK: std::time::Duration = std::time::Duration::from_millis(2);
/// Empty looks after which the printer waits to be woken instead.
const PRINT_IDLE_TICKS: u32 = 16;

/// Arguments of `wharf run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The task for the agent; `-` reads it from stdin, as does leaving it
    /// out when stdin is not a terminal (`echo "…" | wharf run`).
    pub task: Option<String>,
    #[command(flatten)]
    pub host: HostArgs,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub output: Output,
    /// Step budget for this turn, at least 1 (overrides `agent.max_steps`).
    #[arg(long = "max-steps", value_name = "N", value_parser = wharf_cli_common::parse_max_steps)]
    pub max_steps: Option<u32>,
    /// Continue an existing session (a unique prefix of its id is enough)
    /// instead of starting a new one; it must belong to this workspace.
    #[arg(long, value_name = "ID", conflicts_with = "continue_")]
    pub resume: Option<String>,
    /// Continue this workspace's latest session.
    #[arg(long = "continue", id = "continue_")]
    pub continue_: bool,
    /// Replay a recorded session's model outputs instead of calling a model
    /// (regression tests, bug reports): the tools run again for real (a
    /// unique prefix of the id is enough).
    #[arg(long, value_name = "SESSION_ID", conflicts_with_all = ["resume", "continue_", "model"])]
    pub replay: Option<String>,
    /// Attach an image (PNG, JPEG, GIF, WebP) to the task; repeatable. Only
    /// for a model adapter that takes images (llm-openai, llm-anthropic).
    #[arg(long = "image", value_name = "PATH")]
    pub images: Vec<std::path::PathBuf>,
}

/// Longest task read from stdin.
const MAX_STDIN_TASK: u64 = 4 << 20;

/// The task: the argument, or stdin for `-` or no argument with stdin not a
/// terminal.
async fn task_text(arg: Option<&str>) -> Result<String> {
    use std::io::IsTerminal;
    match arg {
        Some(task) if task != "-" => return Ok(task.to_string()),
        None if std::io::stdin().is_terminal() => {
            anyhow::bail!("no task: give it as an argument (`wharf run \"…\"`), or pipe it in (`… | wharf run -`)")
        }
        _ => {}
    }
    let bytes = tokio::task::spawn_blocking(|| {
        use std::io::Read;
        let mut buf = Vec::new();
        std::io::stdin().lock().take(MAX_STDIN_TASK + 1).read_to_end(&mut buf).map(|_| buf)
    })
    .await
    .map_err(|e| anyhow::anyhow!("reading the task from stdin: {e}"))?
    .map_err(|e| anyhow::anyhow!("reading the task from stdin: {e}"))?;
    anyhow::ensure!(
        bytes.len() as u64 <= MAX_STDIN_TASK,
        "the task on stdin is longer than {} MiB",
        MAX_STDIN_TASK >> 20
    );
    let text = String::from_utf8(bytes).map_err(|_| anyhow::anyhow!("the task on stdin is not UTF-8 text"))?;
    // `echo "…" |` ends the task with a newline.
    Ok(text.trim_end().to_string())
}

/// Runs `wharf run`.
pub async fn run(args: RunArgs) -> Result<ExitCode> {
    let task = task_text(args.task.as_deref()).await?;
    anyhow::ensure!(!task.trim().is_empty(), "the task is empty: say what the agent should do");
    let images = args.images.iter().map(|p| wharf_harness::images::read_image(p)).collect::<Result<Vec<_>>>()?;
    // Nobody can answer an ask here: the `ask` preset runs as `auto`.
    let host = wharf_harness::headless::start(&args.host.options(), args.replay.as_deref()).await?;
    let approver = host.headless_approver();
    let resume = match (&args.resume, args.continue_) {
        (_, true) => Some(host.latest_session()?),
        (r, false) => r.clone(),
    };
    let (agent, first_seq) = host.open_agent(resume.as_deref(), approver, args.max_steps)?;
    wharf_harness::images::check_for(&agent, &images)?;
    let session_id = agent.session_id().to_string();
    let log_path = agent.log().describe().to_string();
    let mut rx = agent.log().subscribe_from(first_seq)?;
    let output = args.output;
    // Set when the turn is over, so the printer does not wait out its tick.
    let turn_over = std::sync::Arc::new(tokio::sync::Notify::new());
    let printer_turn_over = turn_over.clone();
    let printer = tokio::spawn(async move {
        let mut renderer = TextRenderer::new(true, wharf_cli_common::output::color());
        let stdout = std::io::stdout();
        // What arrived since the last look is printed with one write: a
        // step's events come in bursts.
        let mut buf: Vec<u8> = Vec::new();
        // While events flow, the printer looks every PRINT_TICK instead of
        // waiting to be woken: a wake-up from the agent's task would put the
        // printer ahead of the step's own work (the model request, a tool
        // call) or cost the step a cross-thread wake-up. Idle for
        // PRINT_IDLE_TICKS, it waits to be woken again (a model's reply is
        // seconds away; one wake-up then costs nothing).
        let mut idle = PRINT_IDLE_TICKS;
        loop {
            let first = if idle >= PRINT_IDLE_TICKS {
                match rx.recv().await {
                    Some(ev) => ev,
                    None => return,
                }
            } else {
                tokio::select! {
                    _ = tokio::time::sleep(PRINT_TICK) => {}
                    _ = printer_turn_over.notified() => {}
                }
                match rx.try_recv() {
                    Ok(ev) => ev,
                    Err(tokio::sync::mpsc::error::TryRecvError::Empty) => {
                        idle += 1;
                        continue;
                    }
                    Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => return,
                }
            };
            idle = 0;
            let mut next = Some(first);
            let mut ended = false;
            while let Some(ev) = next.take() {
                match output {
                    Output::Jsonl => {
                        if let Ok(line) = ev.to_json_line() {
                            buf.extend_from_slice(line.as_bytes());
                            buf.push(b'\n');
                        }
                    }
                    Output::Text => renderer.render(&ev, &mut buf),
                }
                // A headless run is one turn: its end is the last event.
                ended = matches!(ev.kind, EventKind::TurnEnd(_));
                if !ended && buf.len() < 1 << 20 {
                    next = rx.try_recv().ok();
                }
            }
            let mut out = stdout.lock();
            let _ = out.write_all(&buf);
            let _ = out.flush();
            buf.clear();
            if ended {
                return;
            }
        }
    });

    // Ctrl-C cancels the turn (the loop commits what streamed so far).
    let canceller = agent.clone();
    let ctrl_c = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            canceller.cancel();
        }
    });
    // Required MCP servers first, so the first step sees their tools. If one
    // is not available, the turn ends `blocked` naming it (exit 1).
    if let Err(e) = host.mcp_ready().await {
        eprintln!("wharf: {e}");
    }
    let summary = match images.is_empty() {
        true => agent.prompt(task).await,
        false => match agent.followup_with_images(task, images) {
            Ok(_) => agent.run_until_idle().await.and_then(|mut t| t.pop().ok_or(wharf_core::AgentError::NothingRan)),
            Err(e) => Err(e.into()),
        },
    };
    // The session closes with the run: cells still running end now, each
    // logging its end (bounded by the cancel grace).
    agent.close_cells().await;
    turn_over.notify_one();
    ctrl_c.abort();
    agent.log().flush().await?;
    host.close().await;
    let summary = summary?;
    // The printer ends at the turn's last event (bounded, in case the turn
    // ended without one because the store failed).
    drop(agent);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), printer).await;

    let usage = summary.usage;
    // Cost and context use of this turn, from the log (the model of each step).
    let turn = host.store.load(&session_id).ok().and_then(|l| {
        let u = wharf_harness::usage::summarize(&host.config, &l.events);
        u.turns.last().cloned().map(|t| (t, u))
    });
    let priced = match &turn {
        Some((t, u)) => {
            let cost =
                t.cost.map(|c| format!(" · cost {}", wharf_harness::usage::format_cost(c, u.currency.as_deref())));
            let context = u.context_percent.map(|p| format!(" · context {p:.1} %")).unwrap_or_default();
            let model = u.model.as_deref().map(|m| format!(" · {m}")).unwrap_or_default();
            format!("{model}{}{context}", cost.unwrap_or_default())
        }
        None => String::new(),
    };
    eprintln!(
        "session {session_id} · {} · {} step(s) · tokens {} in / {} out{priced} · log {}",
        reason_text(&summary.reason),
        summary.steps,
        usage.prompt_tokens,
        usage.completion_tokens,
        log_path
    );
    Ok(match summary.reason {
        StopReason::Completed => ExitCode::SUCCESS,
        _ => ExitCode::from(1),
    })
}
