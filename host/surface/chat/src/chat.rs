//! `wharf chat`: an interactive terminal session.
//!
//! On a terminal a line editor ([`editor`], `reedline`) owns the input line
//! and what the agent does is printed above it, rendered from the session log
//! as events are appended, so the screen is a view of the log: reasoning
//! (dimmed), text, tool calls with their result, approvals, plugin reloads.
//! Without a terminal input is read line by line (escape sequences removed).
//!
//! - **Editing**: history per workspace (Up/Down, Ctrl-R search), Alt-Enter
//!   or Ctrl-J for a newline, a bracketed paste is one message, Tab completes
//!   `@path`. The status line is the right prompt (a dim line before the
//!   prompt without a terminal).
//! - **`@path`** attaches a workspace file: the agent reads it through the
//!   `read` tool before the first model request (`wharf_core::attach`).
//!
//! - **Approvals** (a policy's `ask`) show what would run (the diff of a
//!   `write` or `edit`, the command of `bash`, else the arguments) and are
//!   answered with one key: `y` allows once, `a` allows the tool for the rest
//!   of the session, `n` rejects, `t` rejects with a note for the model (the
//!   next line; it is in the tool result the model sees).
//! - **Questions** a tool asks (an MCP server's elicitation, a component's
//!   `questions` import) show their message, then ask the form's fields one
//!   by one at the prompt ([`questions`]: each line checked against its
//!   field, Enter skips an optional one, `:decline` / `:cancel`); one at a
//!   time, after any open approval. Without a line editor (piped input)
//!   they are declined with a warning naming the asker.
//! - **Ctrl-C** cancels the running turn (what streamed so far is kept as an
//!   interrupted message); a second Ctrl-C within two seconds, or Ctrl-C at
//!   an idle prompt followed by another, quits. **Ctrl-D** (end of input)
//!   quits, after the running turn if there is one (drawn to its end; the
//!   notice is printed once, also when piped input ends).
//! - Until a turn's first token a spinner with the elapsed time and how to
//!   cancel runs before the input line (without an editor: on stderr, if
//!   it is a terminal).
//! - Output is printed line by line: a notice (`↳ queued…`, `^C`, …) goes
//!   between lines, never inside a streamed one.
//! - Text submitted while a turn runs is queued as a `steer` message for the
//!   next step (`↳ queued for the next step: …`). Ctrl-C drops the queued
//!   messages the model has not seen yet together with the turn, and says so
//!   for each one (`↳ dropped: …`); they stay in the history (Up).
//! - Slash commands: `/help`, `/sessions`, `/resume ID` (a unique prefix is
//!   enough), `/new`, `/plugins`, `/model`, `/compact`, `/quit`.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use wharf_core::approval::{Approval, Approver, ChannelApprover, PendingApproval, PendingQuestion};
use wharf_core::events::{ApprovalOutcome, Event, EventKind, InboxOp, StopReason};
use wharf_core::{Agent, AgentError, TurnSummary};

pub(crate) mod editor;
pub use editor::restore_terminal;
mod model;
mod permissions;
mod questions;
mod render;
mod status;

use editor::{Input, Screen};
use render::Renderer;

use crate::render::reason_text;
use wharf_cli_common::HostArgs;
use wharf_harness::Harness;

/// Arguments of `wharf chat`.
#[derive(Args, Debug)]
pub struct ChatArgs {
    #[command(flatten)]
    #[allow(missing_docs)] // flattened: the flags document themselves
    pub host: HostArgs,
    /// Continue an existing session (a unique prefix of its id is enough)
    /// instead of starting a new one; it must belong to this workspace.
    #[arg(long, value_name = "ID", conflicts_with = "continue_")]
    pub resume: Option<String>,
    /// Continue this workspace's latest session.
    #[arg(long = "continue", id = "continue_")]
    pub continue_: bool,
    /// Step budget per turn (overrides `agent.max_steps`).
    #[arg(long = "max-steps", value_name = "N", value_parser = wharf_cli_common::parse_max_steps)]
    pub max_steps: Option<u32>,
    /// Do not show the model's reasoning.
    #[arg(long = "hide-reasoning")]
    pub hide_reasoning: bool,
}

/// Most bytes of a running call's streamed output the chat keeps.
const MAX_PROGRESS_KEPT: usize = 4096;
/// Most characters of its live line.
const MAX_PROGRESS_CHARS: usize = 100;

/// The live line of a call's streamed output: its last non-empty line,
/// control characters escaped, cut at [`MAX_PROGRESS_CHARS`] characters.
fn progress_line(kept: &str) -> String {
    let last = kept.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default().trim();
    one_line(&wharf_core::util::escape_line(last), MAX_PROGRESS_CHARS)
}

/// How often the spinner shown until a turn's first token moves.
const SPINNER_TICK: Duration = Duration::from_millis(100);

/// How long a first Ctrl-C waits for a second one to mean "quit".
const DOUBLE_CTRL_C: Duration = Duration::from_secs(2);

const HELP: &str = "\
Type a message and press Enter. While a turn runs, Enter queues the text for its next step.
  Alt-Enter or Ctrl-J  new line (a paste is one message)   Up/Down, Ctrl-R  history of this workspace
  @path       attach a workspace file (read before the model is asked; Tab completes)
  Ctrl-C      cancel the running turn and drop its queued messages (listed); twice: quit
  Ctrl-D      quit
  /sessions   list stored sessions                        /resume [ID]  switch to a session (prefix ok; none: pick)
  /new        start a new session                         /plugins    loaded plugins and reload events
  /model [NAME]  show, or switch (NAME, ADAPTER/NAME)      /compact    compact the history
  /permissions [PRESET]  show or switch: read-only, ask, auto, full-access
  /help       this help                                   /quit       quit";

/// The chat's own slash commands (a bundle command of the same name is
/// reached as `/BUNDLE:NAME`).
const BUILTIN_COMMANDS: &[&str] =
    &["help", "h", "?", "quit", "exit", "q", "compact", "sessions", "resume", "new", "plugins", "model", "permissions"];

/// Runs `wharf chat`.
pub async fn run(args: ChatArgs) -> Result<ExitCode> {
    let out = Out::new();
    let config = args.host.load_config()?;
    // A missing key is said now, not at the first model request.
    wharf_harness::models::require_model_key(&config, args.host.model.as_deref())?;
    // Before loading, so keys typed while plugins compile reach the editor
    // intact; Ctrl-C is handled from here on so the settings are restored.
    let _typeahead = editor::TypeAhead::hold();
    let mut interrupts =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).context("cannot handle Ctrl-C")?;
    let host = load_with_progress(&args.host, config.plugins.len(), &mut interrupts).await?;
    let (approver, approvals, asked) = ChannelApprover::with_questions();
    let mut term = editor::start(&host.workspace);
    let mut out = out;
    out.attach(&term);
    let mut chat = Chat {
        host,
        approver: Arc::new(approver),
        agents: HashMap::new(),
        agent: None,
        events: None,
        quiet_until: 0,
        render: Renderer::new(!args.hide_reasoning, out.color),
        out,
        max_steps: args.max_steps,
        steers: HashMap::new(),
        bye: None,
        picker: Vec::new(),
        why: false,
        spinner: None,
        progress: None,
        form_prompt: None,
    };
    let resume = if args.continue_ { Some(chat.host.latest_session()?) } else { args.resume.clone() };
    chat.switch(resume.as_deref())?;
    chat.out.line(&chat.out.dim("/help for commands · Ctrl-C cancels a turn · Ctrl-D quits"));
    let input = std::mem::replace(&mut term.input, mpsc::unbounded_channel().1);
    let r = chat.run(approvals, asked, input, &mut interrupts).await;
    chat.out.detach();
    term.shutdown();
    if let Some(line) = chat.bye.take() {
        chat.out.line(&line);
    }
    r
}

/// Starts the host, with a spinner on stderr while components compile.
async fn load_with_progress(
    args: &HostArgs,
    count: usize,
    interrupts: &mut tokio::signal::unix::Signal,
) -> Result<Harness> {
    let tty = std::io::stderr().is_terminal();
    let label = format!("loading {count} plugin{}…", if count == 1 { "" } else { "s" });
    let started = Instant::now();
    if !tty {
        eprintln!("{label}");
    }
    let options = args.options();
    let start = Harness::start(&options);
    tokio::pin!(start);
    let frames = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut i = 0usize;
    let host = loop {
        tokio::select! {
            r = &mut start => break r,
            _ = interrupts.recv() => {
                if tty {
                    eprint!("\r\x1b[2K");
                }
                anyhow::bail!("interrupted while loading plugins");
            }
            _ = tick.tick(), if tty => {
                eprint!("\r{} {label} {:.1}s", frames[i % frames.len()], started.elapsed().as_secs_f64());
                let _ = std::io::stderr().flush();
                i += 1;
            }
        }
    };
    if tty {
        eprint!("\r\x1b[2K");
    }
    let host = host?;
    let versions = host.plugins.versions();
    let detail: Vec<String> =
        versions.values().map(|v| format!("{} ({})", v.id, format!("{:?}", v.cache).to_lowercase())).collect();
    eprintln!("loaded {} plugin(s) in {} ms: {}", versions.len(), started.elapsed().as_millis(), detail.join(", "));
    if let Some(m) = &host.mcp {
        // The first turn needs the required servers' tools; the others keep
        // connecting in the background.
        if let Err(e) = host.mcp_ready().await {
            eprintln!("wharf: {e} (turns are blocked until it connects)");
        }
        let ready = m.status().iter().filter(|s| s.is_ready()).count();
        eprintln!("MCP: {ready} of {} server(s) ready", m.status().len());
    }
    Ok(host)
}

/// Terminal output with optional colour: above the line editor's input line
/// through its printer, or to stdout; line by line either way, so a notice
/// never cuts a streamed line.
struct Out {
    color: bool,
    /// The line editor's printer (`None` without an editor).
    screen: Option<RefCell<Screen>>,
    /// Lines for stdout, when there is no editor (or after it ended).
    plain: RefCell<Screen>,
    prompt: Option<Arc<std::sync::Mutex<editor::PromptState>>>,
    repaint: Option<Arc<dyn Fn() + Send + Sync>>,
    /// A spinner row is on stderr (no editor, stderr a terminal).
    spinning: std::cell::Cell<bool>,
}

impl Out {
    fn new() -> Self {
        Self {
            color: wharf_cli_common::output::color(),
            screen: None,
            plain: RefCell::new(Screen::stdout()),
            prompt: None,
            repaint: None,
            spinning: std::cell::Cell::new(false),
        }
    }

    /// Prints through the line editor of `term`, if it has one.
    fn attach(&mut self, term: &editor::Terminal) {
        if let Some(p) = &term.printer {
            self.screen = Some(RefCell::new(Screen::new(p.clone())));
            self.prompt = Some(term.prompt.clone());
            self.repaint = term.repaint.clone();
        }
    }

    /// Back to stdout (the editor is ending).
    fn detach(&mut self) {
        if let Some(s) = self.screen.take() {
            s.into_inner().finish();
        }
        self.prompt = None;
    }

    fn target(&self) -> &RefCell<Screen> {
        self.screen.as_ref().unwrap_or(&self.plain)
    }

    /// Writes with `f` to the screen (the editor's printer or stdout), whole
    /// lines at a time.
    fn draw(&self, f: impl FnOnce(&mut dyn Write)) {
        self.clear_spinner();
        f(&mut *self.target().borrow_mut());
    }

    /// Ends a partial line held back.
    fn finish(&self) {
        self.clear_spinner();
        self.target().borrow_mut().finish();
    }

    /// Draws a spinner row on stderr (without an editor; the editor shows it
    /// in its status line instead).
    fn spin(&self, text: &str) {
        if self.screen.is_some() || !std::io::stderr().is_terminal() {
            return;
        }
        eprint!("\r\x1b[2K{text}");
        let _ = std::io::stderr().flush();
        self.spinning.set(true);
    }

    /// Removes the spinner row, if one is drawn.
    fn clear_spinner(&self) {
        if self.spinning.replace(false) {
            eprint!("\r\x1b[2K");
            let _ = std::io::stderr().flush();
        }
    }

    /// Sets the editor's prompt and status line; `false` without an editor.
    fn set_prompt(&self, left: &str, right: &str) -> bool {
        let Some(p) = &self.prompt else {
            return false;
        };
        let mut st = p.lock().unwrap_or_else(|e| e.into_inner());
        if st.left != left || st.right != right {
            st.left = left.to_string();
            st.right = right.to_string();
            drop(st);
            if let Some(r) = &self.repaint {
                r();
            }
        }
        true
    }

    fn paint(&self, code: &str, s: &str) -> String {
        if self.color { format!("\x1b[{code}m{s}\x1b[0m") } else { s.to_string() }
    }

    fn dim(&self, s: &str) -> String {
        self.paint("2", s)
    }

    fn bold(&self, s: &str) -> String {
        self.paint("1", s)
    }

    fn warn(&self, s: &str) -> String {
        self.paint("33", s)
    }

    /// Prints `s` as whole line(s), before a streamed line in progress (that
    /// one stays held and goes on), so notices fall between lines.
    fn line(&self, s: &str) {
        self.clear_spinner();
        self.target().borrow_mut().notice(s);
    }

    /// Whether the answer keys of an approval question answer at once.
    fn answer_keys(&self, on: bool) {
        if let Some(p) = &self.prompt {
            p.lock().unwrap_or_else(|e| e.into_inner()).answer_keys = on;
        }
    }

    /// A prompt without a line editor (the editor draws its own).
    fn prompt(&self, s: &str) {
        if self.screen.is_some() {
            return;
        }
        self.clear_spinner();
        let mut o = std::io::stdout().lock();
        let _ = write!(o, "{s}");
        let _ = o.flush();
    }
}

/// The running turn.
struct Running {
    handle: JoinHandle<Result<Option<TurnSummary>, AgentError>>,
    /// Ctrl-C was pressed: keep cancelling until the turn is over (a cancel
    /// that lands before the turn starts is a no-op).
    cancelling: bool,
}

struct Chat {
    host: Harness,
    approver: Arc<dyn Approver>,
    /// Sessions opened by this process (a log stays open once opened).
    agents: HashMap<String, Agent>,
    agent: Option<Agent>,
    events: Option<mpsc::UnboundedReceiver<Event>>,
    /// Events up to this seq were in the log before the view started.
    quiet_until: u64,
    render: Renderer,
    out: Out,
    max_steps: Option<u32>,
    /// Steers queued by this chat that the model has not seen yet (id → text).
    steers: HashMap<String, String>,
    /// The goodbye line, printed once the editor has let go of the terminal.
    bye: Option<String>,
    /// Session ids a bare `/resume` offered, by number (the next line picks).
    picker: Vec<String>,
    /// The next line is the note of a rejection (`t` at an approval question).
    why: bool,
    /// When the running turn started, while it has shown nothing yet (a
    /// spinner with the elapsed time runs until its first token).
    spinner: Option<Instant>,
    /// A running call's streamed output (`tool/progress`): its id and the
    /// latest part, shown as one live line until its result.
    progress: Option<(String, String)>,
    /// The prompt of the tool question's field being asked.
    form_prompt: Option<String>,
}

impl Chat {
    fn agent(&self) -> Result<&Agent> {
        self.agent.as_ref().context("no session is open")
    }

    /// Opens (or switches to) a session: `None` starts a new one.
    fn switch(&mut self, resume: Option<&str>) -> Result<()> {
        let agent = match resume.and_then(|id| self.agents.get(id)) {
            Some(a) => a.clone(),
            None => {
                let (agent, _) = self.host.open_agent(resume, self.approver.clone(), self.max_steps)?;
                self.agents.insert(agent.session_id().to_string(), agent.clone());
                agent
            }
        };
        let id = agent.session_id().to_string();
        self.quiet_until = agent.log().last_seq();
        if resume.is_some() {
            self.print_history(&id);
        }
        self.events = Some(agent.log().subscribe_from(self.quiet_until + 1)?);
        self.agent = Some(agent);
        self.render = Renderer::new(self.render.show_reasoning, self.out.color);
        let ws = self.host.workspace.display().to_string();
        self.out.line(&self.out.dim(&format!("session {id} · profile {} · {ws}", self.host.options.profile)));
        Ok(())
    }

    /// The last few turns of a resumed session.
    fn print_history(&self, id: &str) {
        let Ok(loaded) = self.host.store.load(id) else {
            return;
        };
        let starts: Vec<usize> = loaded
            .events
            .iter()
            .enumerate()
            .filter(|(_, e)| matches!(e.kind, EventKind::TurnStart(_)))
            .map(|(i, _)| i)
            .collect();
        let from = starts.len().saturating_sub(3);
        let Some(&first) = starts.get(from) else {
            return;
        };
        if from > 0 {
            self.out.line(&self.out.dim(&format!("… {from} earlier turn(s)")));
        }
        let mut r = Renderer::new(false, self.out.color);
        r.history = true;
        let mut buf = Vec::new();
        for ev in &loaded.events[first..] {
            r.render(ev, &mut buf);
        }
        self.out.draw(|o| {
            let _ = o.write_all(&buf);
        });
        self.out.finish();
    }

    async fn run(
        &mut self,
        mut approvals: mpsc::UnboundedReceiver<PendingApproval>,
        mut asked: mpsc::UnboundedReceiver<PendingQuestion>,
        mut input: mpsc::UnboundedReceiver<Input>,
        interrupts: &mut tokio::signal::unix::Signal,
    ) -> Result<ExitCode> {
        let mut running: Option<Running> = None;
        let mut asking: Option<PendingApproval> = None;
        let mut queue: VecDeque<PendingApproval> = VecDeque::new();
        // Tools' questions: the one being answered, and those waiting.
        let mut form: Option<questions::FormState> = None;
        let mut forms: VecDeque<PendingQuestion> = VecDeque::new();
        let mut last_ctrl_c: Option<Instant> = None;
        let mut show_prompt = true;
        let mut quit_after_turn = false;
        let mut ctrl_c = false;
        // Warnings logged meanwhile (the log itself goes to a file).
        let mut notices = wharf_cli_common::output::take_notices().unwrap_or_else(|| mpsc::channel(1).1);
        // Piped input ended (the channel is closed: reading it again would
        // return at once, forever).
        let mut input_open = true;
        let mut tick = tokio::time::interval(SPINNER_TICK);
        // Not polled while no spinner runs: no burst of missed ticks after.
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if asking.is_none() {
                self.why = false;
                asking = next_question(&mut queue);
                if asking.is_some() {
                    self.stop_spinner();
                }
                if !input_open && let Some(p) = asking.take() {
                    reject_unanswerable(p);
                    continue;
                }
                if let Some(p) = &asking {
                    self.ask(p);
                }
            }
            if form.as_ref().is_some_and(questions::FormState::withdrawn)
                && let Some(f) = form.take()
            {
                self.out.line(&self.out.dim(&format!("  ↳ {}'s question was withdrawn", f.source())));
            }
            if asking.is_none() && form.is_none() {
                form = self.next_form(&mut forms, input_open);
            }
            self.form_prompt = form.as_ref().map(questions::FormState::prompt);
            self.update_prompt(asking.is_some(), running.is_some());
            if show_prompt && running.is_none() && asking.is_none() {
                if quit_after_turn {
                    return self.quit(None).await;
                }
                if self.out.screen.is_none() {
                    let status = self.status_line();
                    if !status.is_empty() {
                        self.out.line(&self.out.dim(&status));
                    }
                }
                self.out.prompt(&self.out.bold("› "));
                show_prompt = false;
            }
            if ctrl_c {
                ctrl_c = false;
                let now = Instant::now();
                let double = last_ctrl_c.is_some_and(|t| now.duration_since(t) < DOUBLE_CTRL_C);
                last_ctrl_c = Some(now);
                self.stop_spinner();
                self.end_stream();
                if double {
                    return self.quit(running.take()).await;
                }
                match running.as_mut() {
                    Some(r) => {
                        r.cancelling = true;
                        if let Ok(a) = self.agent() {
                            a.cancel();
                        }
                        // Questions of this turn are withdrawn by the loop.
                        asking = None;
                        queue.clear();
                        form = None;
                        forms.clear();
                        let queued = match self.steers.len() {
                            0 => String::new(),
                            n => format!("; {n} queued message(s) dropped with it"),
                        };
                        self.out
                            .line(&self.out.warn(&format!("^C cancelling the turn{queued}… (Ctrl-C again to quit)")));
                    }
                    None => {
                        asking = None;
                        self.out.line(&self.out.dim("^C (press Ctrl-C again to quit, or type /quit)"));
                        show_prompt = true;
                    }
                }
                continue;
            }
            let cancelling = running.as_ref().is_some_and(|r| r.cancelling);
            let turn_done = async {
                match running.as_mut() {
                    Some(r) => (&mut r.handle).await,
                    None => std::future::pending().await,
                }
            };
            let events = async {
                match self.events.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                Some(ev) = events => {
                    if ev.seq > self.quiet_until {
                        self.event(&ev);
                    }
                }
                _ = interrupts.recv() => ctrl_c = true,
                r = turn_done => {
                    running = None;
                    asking = None;
                    queue.clear();
                    form = None;
                    forms.clear();
                    self.stop_spinner();
                    self.end_stream();
                    self.turn_finished(r);
                    show_prompt = true;
                }
                Some(p) = approvals.recv() => {
                    queue.push_back(p);
                }
                Some(q) = asked.recv() => {
                    forms.push_back(q);
                }
                Some(n) = notices.recv() => self.notice(&n),
                _ = tick.tick(), if self.spinner.is_some() => self.spin(running.is_some()),
                line = input.recv(), if input_open => {
                    let line = match line {
                        Some(Input::Line(l)) => Some(l),
                        Some(Input::Interrupt) => {
                            ctrl_c = true;
                            None
                        }
                        Some(Input::Eof) => None,
                        None => {
                            input_open = false;
                            // A question on screen has nobody left to answer it.
                            if let Some(p) = asking.take() {
                                reject_unanswerable(p);
                            }
                            if let Some(f) = form.take() {
                                f.abandon("end of input");
                            }
                            None
                        }
                    };
                    let Some(line) = line else {
                        if ctrl_c {
                            continue;
                        }
                        // End of input: Ctrl-D, or the end of piped input
                        // (both may come: say it once).
                        if running.is_some() {
                            if !quit_after_turn {
                                self.out.line(
                                    &self.out.dim("(end of input: quitting when this turn ends; Ctrl-C cancels it)"),
                                );
                            }
                            quit_after_turn = true;
                            continue;
                        }
                        self.out.line("");
                        return self.quit(None).await;
                    };
                    if let Some(p) = asking.take() {
                        asking = self.reply(p, &line);
                        continue;
                    }
                    if let Some(f) = form.take() {
                        form = self.fill(f, &line);
                        continue;
                    }
                    match self.handle_line(&line, running.is_some()) {
                        Ok(Action::Nothing) => {}
                        Ok(Action::Start(handle)) => {
                            running = Some(Running { handle, cancelling: false });
                            self.spinner = Some(Instant::now());
                        }
                        Ok(Action::Compact) => self.compact_now().await,
                        Ok(Action::Quit) => return self.quit(running.take()).await,
                        Err(e) => self.out.line(&self.out.warn(&format!("error: {}", wharf_cli_common::output::error_text(&e)))),
                    }
                    show_prompt = true;
                }
                _ = tokio::time::sleep(Duration::from_millis(25)), if cancelling => {
                    if let Ok(a) = self.agent() {
                        a.cancel();
                    }
                }
            }
        }
    }

    /// Renders one new log event; reports queued steers the model saw or
    /// that a cancel dropped.
    fn event(&mut self, ev: &Event) {
        if let EventKind::InboxSpliced(s) = &ev.kind
            && let Some(text) = self.steers.get(&s.id).cloned()
        {
            match s.op {
                InboxOp::Discarded => {
                    self.steers.remove(&s.id);
                    self.end_stream();
                    self.out.line(&self.out.warn(&format!("↳ dropped (not sent): {}", one_line(&text, 160))));
                }
                InboxOp::Claimed => {
                    self.steers.remove(&s.id);
                }
                _ => {}
            }
        }
        if self.config_reload_notice(ev) {
            return;
        }
        if let EventKind::ToolProgress(p) = &ev.kind {
            self.tool_progress(&p.call_id, &p.text);
            return;
        }
        if let EventKind::PluginReloadFailed(p) = &ev.kind {
            self.render.serving = self.host.plugins.versions().get(&p.id).map(|v| v.digest.clone());
        }
        if matches!(
            ev.kind,
            EventKind::AssistantChunk(_)
                | EventKind::AssistantMessage(_)
                | EventKind::ToolCall(_)
                | EventKind::ToolResult(_)
                | EventKind::TurnEnd(_)
        ) {
            self.stop_spinner();
        }
        let mut buf = Vec::new();
        self.render.render(ev, &mut buf);
        if !buf.is_empty() {
            self.out.draw(|o| {
                let _ = o.write_all(&buf);
            });
        }
    }

    /// Keeps the latest part of a running call's streamed output and shows
    /// its last line (the editor's status line, else a row on stderr).
    fn tool_progress(&mut self, call_id: &str, text: &str) {
        let kept = match &mut self.progress {
            Some((id, kept)) if id == call_id => kept,
            _ => &mut self.progress.insert((call_id.to_string(), String::new())).1,
        };
        kept.push_str(text);
        if kept.len() > MAX_PROGRESS_KEPT {
            let mut start = kept.len() - MAX_PROGRESS_KEPT;
            while !kept.is_char_boundary(start) {
                start += 1;
            }
            kept.drain(..start);
        }
        if self.out.prompt.is_none()
            && let Some(text) = self.spinner_text()
        {
            self.out.spin(&self.out.dim(&text));
        }
    }

    /// The spinner's text: a running call's live output line, or a frame,
    /// the time since the turn started and how to cancel.
    fn spinner_text(&self) -> Option<String> {
        if let Some((_, kept)) = &self.progress {
            return Some(format!("⋯ {} · Ctrl-C to cancel", progress_line(kept)));
        }
        let started = self.spinner?;
        let frames = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
        let elapsed = started.elapsed();
        let frame = frames[(elapsed.as_millis() / SPINNER_TICK.as_millis().max(1)) as usize % frames.len()];
        Some(format!("{frame} waiting for the model · {:.1}s · Ctrl-C to cancel", elapsed.as_secs_f64()))
    }

    /// Moves the spinner: the editor's prompt shows it (the loop repaints
    /// the prompt), else a row on stderr when that is a terminal.
    fn spin(&self, running: bool) {
        if !running || self.out.prompt.is_some() {
            return;
        }
        if let Some(text) = self.spinner_text() {
            self.out.spin(&self.out.dim(&text));
        }
    }

    /// Ends the spinner (the turn showed something, or ended).
    fn stop_spinner(&mut self) {
        self.spinner = None;
        self.progress = None;
        self.out.clear_spinner();
    }

    /// A warning from the log (the details are in the log file), as one line.
    fn notice(&mut self, text: &str) {
        self.end_stream();
        self.out.line(&self.out.warn(&format!("⚠ {text}")));
    }

    fn end_stream(&mut self) {
        let render = &mut self.render;
        self.out.draw(|o| render.end_stream(o));
        self.out.finish();
    }

    /// The editor's prompt for the loop's state, with the status line.
    fn update_prompt(&self, asking: bool, running: bool) {
        if self.out.prompt.is_none() {
            return;
        }
        self.out.answer_keys(asking && !self.why);
        let form = self.form_prompt.as_deref().filter(|_| !asking);
        let left = if let Some(p) = form {
            p
        } else if asking && self.why {
            "why? › "
        } else if asking {
            "allow? [y/a/n/t] › "
        } else if running {
            "↳ "
        } else {
            "› "
        };
        let left = match self.spinner_text() {
            Some(spin) if running && !asking && form.is_none() => {
                format!("{} {}", self.out.dim(&spin), self.out.bold(left))
            }
            _ => self.out.bold(left),
        };
        self.out.set_prompt(&left, &self.out.dim(&self.status_line()));
    }

    /// The next tool question to answer, introduced; a withdrawn one is
    /// skipped, and without a line editor (or input) each is declined.
    fn next_form(&mut self, forms: &mut VecDeque<PendingQuestion>, input_open: bool) -> Option<questions::FormState> {
        while let Some(q) = forms.pop_front() {
            if q.reply.is_closed() {
                continue;
            }
            let why = if self.out.screen.is_none() {
                Some("wharf chat's input is not a terminal, so nobody can fill in the form")
            } else if !input_open {
                Some("end of input")
            } else {
                None
            };
            if let Some(why) = why {
                self.end_stream();
                let who = wharf_core::util::escape_line(wharf_core::util::cut_str(&q.question.source, 64)).into_owned();
                self.out.line(&self.out.warn(&format!("⚠ declined {who}'s question: {why}")));
                questions::decline(q, why);
                continue;
            }
            self.stop_spinner();
            self.end_stream();
            let f = questions::FormState::new(q);
            self.out.line(&self.out.warn(&f.intro()));
            if let Some(h) = f.help() {
                self.out.line(&self.out.dim(&h));
            }
            return Some(f);
        }
        None
    }

    /// Takes a typed line for the open tool question; returns it while
    /// fields remain (the next one's help line shown, or why the line did
    /// not fit).
    fn fill(&mut self, f: questions::FormState, line: &str) -> Option<questions::FormState> {
        match f.feed(line) {
            questions::Step::More(f, warning) => {
                if let Some(w) = warning {
                    self.out.line(&self.out.warn(&format!("  {w}")));
                } else if let Some(h) = f.help() {
                    self.out.line(&self.out.dim(&h));
                }
                Some(*f)
            }
            questions::Step::Done => None,
        }
    }

    /// Shows an approval question: the call's summary, why the policies
    /// ask, what would run, and the answers.
    fn ask(&self, p: &PendingApproval) {
        let r = &p.request;
        let o = &self.out;
        // Before the question shows: a key pressed once it is seen answers.
        o.answer_keys(!self.why);
        let (head, body) = render::approval_text(r, &self.host.workspace, o.color);
        o.line(&o.warn(&format!("⚠ approval needed: {head}")));
        if !r.reason.is_empty() {
            o.line(&o.dim(&format!("  reason: {}", r.reason)));
        }
        for line in body {
            o.line(&line);
        }
        let question = "  allow? [y]es once · [a]lways this session · [n]o · [t]ell the model why (no, with a note) › ";
        if o.screen.is_some() {
            // The editor's prompt asks; the question stays on screen.
            o.line(&o.bold(question.trim_end_matches(" › ")));
        } else {
            o.prompt(&o.bold(question));
        }
    }

    /// Handles a line (or an answer key) while question `p` waits; returns
    /// `p` when it still waits (an unclear answer, or `t`: the note comes
    /// next).
    fn reply(&mut self, p: PendingApproval, line: &str) -> Option<PendingApproval> {
        let send = |p: PendingApproval, outcome, note: Option<String>| {
            let _ = p.reply.send(Approval { outcome, by: "chat(user)".into(), note });
        };
        if std::mem::take(&mut self.why) {
            let note = line.trim();
            send(p, ApprovalOutcome::Rejected, (!note.is_empty()).then(|| note.to_string()));
            return None;
        }
        let o = &self.out;
        if line.trim().is_empty() {
            return Some(p);
        }
        match answer(line) {
            Some(Answer::Decided(outcome)) => send(p, outcome, None),
            Some(Answer::Why(Some(note))) => send(p, ApprovalOutcome::Rejected, Some(note)),
            Some(Answer::Why(None)) => {
                // Before the text: keys typed once it shows are the note.
                o.answer_keys(false);
                o.line(&o.dim("  why not? Type a note for the model and press Enter (it is sent with the rejection)"));
                o.prompt(&o.bold("  why? › "));
                self.why = true;
                return Some(p);
            }
            None => {
                o.line(&o.warn("please answer y (yes, once), a (always), n (no) or t (no, and tell the model why)"));
                self.ask(&p);
                return Some(p);
            }
        }
        None
    }

    /// `/compact`: the compactor summarises all but the latest exchange; the
    /// `compaction/summary` event is then rendered from the log like any other.
    async fn compact_now(&mut self) {
        let Ok(agent) = self.agent().cloned() else {
            self.out.line(&self.out.warn("no session is open"));
            return;
        };
        self.out.line(&self.out.dim("⋯ compacting the history (asking the model for a summary)"));
        match agent.compact().await {
            Ok(c) => {
                let tokens = wharf_core::compaction::request_tokens(&agent.log().messages(), &[]);
                self.out.line(&self.out.dim(&format!(
                    "⋯ events {}–{} replaced by a summary of {} bytes; the history is now ~{tokens} tokens",
                    c.from_seq,
                    c.to_seq,
                    c.summary.len()
                )));
            }
            Err(e) => self.out.line(&self.out.warn(&format!("/compact: {e}"))),
        }
    }

    fn turn_finished(&mut self, r: Result<Result<Option<TurnSummary>, AgentError>, tokio::task::JoinError>) {
        let o = &self.out;
        match r {
            Ok(Ok(Some(s))) => {
                let u = s.usage;
                let text = format!(
                    "— {} · {} step(s) · tokens {} in / {} out{}",
                    reason_text(&s.reason),
                    s.steps,
                    u.prompt_tokens,
                    u.completion_tokens,
                    self.turn_cost_text()
                );
                let line = match s.reason {
                    StopReason::Completed => o.dim(&text),
                    _ => o.warn(&text),
                };
                o.line(&line);
            }
            Ok(Ok(None)) => o.line(&o.dim("— nothing to do")),
            Ok(Err(e)) => o.line(&o.warn(&format!("the turn failed: {e}"))),
            Err(e) => o.line(&o.warn(&format!("the turn task failed: {e}"))),
        }
    }

    fn handle_line(&mut self, line: &str, running: bool) -> Result<Action> {
        let trimmed = line.trim();
        if let Some(pick) = self.picked(trimmed) {
            match pick {
                Some(id) if self.agent.as_ref().is_some_and(|a| a.session_id() == id) => {
                    self.out.line(&self.out.dim("already in that session"))
                }
                Some(id) if !running => self.switch(Some(&id))?,
                _ => self.out.line(&self.out.dim("(no session picked)")),
            }
            return Ok(Action::Nothing);
        }
        if trimmed.is_empty() {
            return Ok(Action::Nothing);
        }
        if let Some(cmd) = trimmed.strip_prefix('/') {
            return self.command(cmd, running);
        }
        self.send(trimmed, running)
    }

    /// Sends `trimmed` as input: a steer while a turn runs, else a
    /// follow-up that starts one.
    fn send(&mut self, trimmed: &str, running: bool) -> Result<Action> {
        let agent = self.agent()?.clone();
        if running {
            let id = agent.steer(trimmed)?;
            self.render.own_inbox.insert(id.clone());
            self.steers.insert(id, trimmed.to_string());
            self.out.line(&self.out.dim(&format!("↳ queued for the next step: {}", one_line(trimmed, 160))));
            return Ok(Action::Nothing);
        }
        let id = agent.followup(trimmed)?;
        self.render.own_inbox.insert(id);
        let handle = tokio::spawn(async move { agent.run_until_idle().await.map(|mut turns| turns.pop()) });
        Ok(Action::Start(handle))
    }

    fn command(&mut self, cmd: &str, running: bool) -> Result<Action> {
        let (name, rest) = cmd.split_once(char::is_whitespace).unwrap_or((cmd, ""));
        let rest = rest.trim();
        // A bundle's command (`commands/NAME.md`): its prompt, sent as typed.
        if !BUILTIN_COMMANDS.contains(&name)
            && let Some(prompt) = self.host.expand_command(&format!("/{cmd}"))
        {
            return self.send(&prompt, running);
        }
        let o = &self.out;
        let busy = |what: &str| {
            o.line(&o.warn(&format!("{what} is not possible while a turn runs (Ctrl-C cancels it)")));
            Ok(Action::Nothing)
        };
        match name {
            "help" | "h" | "?" => {
                o.line(HELP);
                for c in self.host.bundle_commands() {
                    let hint = c.argument_hint.map(|h| format!(" {h}")).unwrap_or_default();
                    o.line(&format!("  /{}{hint}  {} ({})", c.name, c.description, c.source));
                }
            }
            "quit" | "exit" | "q" => return Ok(Action::Quit),
            "compact" => {
                if running {
                    return busy("/compact");
                }
                return Ok(Action::Compact);
            }
            "sessions" => self.list_sessions()?,
            "resume" => {
                if running {
                    return busy("/resume");
                }
                if rest.is_empty() {
                    self.resume_picker()?;
                    return Ok(Action::Nothing);
                }
                let id = self.resolve_session(rest)?;
                if self.agent.as_ref().is_some_and(|a| a.session_id() == id) {
                    o.line(&o.dim("already in that session"));
                    return Ok(Action::Nothing);
                }
                self.switch(Some(&id))?;
            }
            "new" => {
                if running {
                    return busy("/new");
                }
                self.switch(None)?;
            }
            "plugins" => self.show_plugins(),
            "model" => self.model_command(rest, running)?,
            "permissions" => self.permissions_command(rest),
            _ => o.line(&o.warn(&format!("unknown command /{name} (try /help)"))),
        }
        Ok(Action::Nothing)
    }

    fn resolve_session(&self, prefix: &str) -> Result<String> {
        wharf_harness::sessions::resolve_session(&self.host.store, prefix)
    }

    fn list_sessions(&self) -> Result<()> {
        let list = self.host.store.list()?;
        let o = &self.out;
        if list.is_empty() {
            o.line(&o.dim("no stored sessions"));
            return Ok(());
        }
        let current = self.agent.as_ref().map(|a| a.session_id().to_string()).unwrap_or_default();
        let skip = list.len().saturating_sub(20);
        if skip > 0 {
            o.line(&o.dim(&format!("… {skip} older session(s)")));
        }
        for s in &list[skip..] {
            let mark = if s.id == current { "*" } else { " " };
            let title = s.title.as_deref().unwrap_or("(no prompt)");
            o.line(&format!("{mark} {}  {}  {}", s.id, o.dim(&s.header.created), one_line(title, 60)));
        }
        Ok(())
    }

    fn show_plugins(&self) {
        let o = &self.out;
        let versions = self.host.plugins.versions();
        o.line(&o.bold(&format!("plugins ({} loaded)", versions.len())));
        for v in versions.values() {
            let kinds: Vec<String> = v.kinds.iter().map(|k| format!("{k:?}").to_lowercase()).collect();
            o.line(&format!(
                "  {:<12} {:<14} {}  wharf:plugin@{}  {} in {} ms",
                v.id,
                kinds.join(","),
                o.dim(v.digest.get(..12).unwrap_or(&v.digest)),
                v.wit_version,
                format!("{:?}", v.cache).to_lowercase(),
                v.load_time.as_millis()
            ));
        }
        let history = self.host.plugins.history();
        o.line(&o.bold(&format!("load and reload events ({})", history.len())));
        for (i, ev) in history.iter().enumerate() {
            let text = match ev {
                EventKind::PluginLoaded(p) => {
                    format!(
                        "loaded        {} {} [{}]",
                        p.id,
                        p.digest.get(..12).unwrap_or(&p.digest),
                        p.kinds.join(",")
                    )
                }
                EventKind::PluginUnloaded(p) => {
                    format!("unloaded      {} {}", p.id, p.digest.get(..12).unwrap_or(&p.digest))
                }
                EventKind::PluginReloadFailed(p) => format!(
                    "reload failed {} {}: {}",
                    p.id,
                    p.digest.get(..12).unwrap_or(&p.digest),
                    p.error.as_deref().unwrap_or("")
                ),
                other => other.type_name().to_string(),
            };
            o.line(&format!("  {:>3}. {text}", i + 1));
        }
    }

    fn show_model(&self) {
        let o = &self.out;
        let wanted = self.host.config.agent.adapter.clone();
        let snap = self.host.plugins.registry().snapshot();
        match snap.llm(wanted.as_deref()) {
            Some(adapter) => {
                let plugin = adapter.plugin().clone();
                let info = self
                    .host
                    .plugins
                    .versions()
                    .get(&plugin.id)
                    .and_then(|v| v.model_info.clone())
                    .unwrap_or_else(|| adapter.model());
                let how = if wanted.is_some() { "configured" } else { "first loaded" };
                o.line(&format!(
                    "adapter  {} ({how}) @ {}",
                    plugin.id,
                    o.dim(plugin.digest.get(..12).unwrap_or(&plugin.digest))
                ));
                o.line(&format!("model    {} · context window {} tokens", info.model, info.context_window));
            }
            None => o.line(&o.warn(&format!(
                "no model adapter loaded{}",
                wanted.map(|w| format!(" (configured: `{w}`)")).unwrap_or_default()
            ))),
        }
        if let Ok(agent) = self.agent() {
            let u = agent.usage();
            o.line(&format!(
                "usage    {} in / {} out tokens this session (cache hit {}, reasoning {})",
                u.prompt_tokens, u.completion_tokens, u.cache_hit_tokens, u.reasoning_tokens
            ));
        }
    }

    async fn quit(&mut self, running: Option<Running>) -> Result<ExitCode> {
        if let Some(r) = running {
            if let Ok(a) = self.agent() {
                a.cancel();
            }
            // Wait for the turn to close in the log (cancel again in case it
            // had not started yet).
            let agent = self.agent.clone();
            let mut handle = r.handle;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
            loop {
                tokio::select! {
                    _ = &mut handle => break,
                    _ = tokio::time::sleep(Duration::from_millis(25)) => {
                        if let Some(a) = &agent {
                            a.cancel();
                        }
                        if tokio::time::Instant::now() > deadline {
                            break;
                        }
                    }
                }
            }
        }
        for agent in self.agents.values() {
            let _ = agent.log().flush().await;
        }
        self.host.close().await;
        if let Ok(a) = self.agent() {
            let id = a.session_id().to_string();
            self.bye = Some(self.out.dim(&format!("bye · session {id} · resume with `wharf chat --resume {id}`")));
        }
        Ok(ExitCode::SUCCESS)
    }
}

enum Action {
    Nothing,
    Start(JoinHandle<Result<Option<TurnSummary>, AgentError>>),
    /// `/compact`: summarise the older history now.
    Compact,
    Quit,
}

/// The next question whose turn still waits for it.
fn next_question(queue: &mut VecDeque<PendingApproval>) -> Option<PendingApproval> {
    while let Some(p) = queue.pop_front() {
        if !p.reply.is_closed() {
            return Some(p);
        }
    }
    None
}

/// An answer to an approval question.
#[derive(Debug, PartialEq)]
enum Answer {
    Decided(ApprovalOutcome),
    /// Reject and tell the model why: the note, or `None` when it comes on
    /// the next line.
    Why(Option<String>),
}

/// `y`, `a`, `n` (or the words), `t` alone or `t NOTE`.
fn answer(line: &str) -> Option<Answer> {
    let line = line.trim();
    let (word, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    let rest = rest.trim();
    match (word.to_ascii_lowercase().as_str(), rest.is_empty()) {
        ("y" | "yes", true) => Some(Answer::Decided(ApprovalOutcome::AllowedOnce)),
        ("a" | "always", true) => Some(Answer::Decided(ApprovalOutcome::AllowedForSession)),
        ("n" | "no", true) => Some(Answer::Decided(ApprovalOutcome::Rejected)),
        ("t" | "tell", _) => Some(Answer::Why((!rest.is_empty()).then(|| rest.to_string()))),
        _ => None,
    }
}

fn one_line(s: &str, max: usize) -> String {
    let flat: String = s.chars().map(|c| if c == '\n' { ' ' } else { c }).collect();
    if flat.chars().count() > max { format!("{}…", flat.chars().take(max).collect::<String>()) } else { flat }
}

/// Rejects a question nobody can answer any more (the input has ended).
fn reject_unanswerable(p: PendingApproval) {
    let note = Some("end of input".to_string());
    let _ = p.reply.send(Approval { outcome: ApprovalOutcome::Rejected, by: "chat(user)".into(), note });
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn answers() {
        assert_eq!(answer("y"), Some(Answer::Decided(ApprovalOutcome::AllowedOnce)));
        assert_eq!(answer(" Always "), Some(Answer::Decided(ApprovalOutcome::AllowedForSession)));
        assert_eq!(answer("n"), Some(Answer::Decided(ApprovalOutcome::Rejected)));
        assert_eq!(answer("t"), Some(Answer::Why(None)));
        assert_eq!(answer("t  use docs/ instead "), Some(Answer::Why(Some("use docs/ instead".into()))));
        assert_eq!(answer("maybe"), None);
        assert_eq!(answer("yes please"), None);
    }
}
