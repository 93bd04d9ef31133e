//! The input side of `wharf chat`: a `reedline` line editor on a terminal, a
//! plain line reader otherwise.
//!
//! On a terminal the editor owns the input line for the whole session (on a
//! thread of its own) and everything chat prints goes through its external
//! printer, so output appears above the line being typed and never mixes
//! with it. History is kept per workspace in
//! `~/.wharf/history/<hash of the workspace>.txt` ([`HISTORY_ENTRIES`]
//! entries); Up/Down and Ctrl-R search it; Alt-Enter or Ctrl-J inserts a
//! newline; a bracketed paste is one message even with newlines; Tab
//! completes `@path` from the workspace.
//!
//! Without a terminal (pipes, tests) lines are read plainly; a bracketed
//! paste (`ESC[200~ … ESC[201~`) is still one message, and escape sequences
//! and other control characters are removed so none reaches the model.

use std::borrow::Cow;
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex};

use reedline::{
    ColumnarMenu, Completer, EditCommand, EditMode, Emacs, ExternalPrinter, FileBackedHistory, KeyCode, KeyModifiers,
    MenuBuilder, Prompt, PromptEditMode, PromptHistorySearch, PromptHistorySearchStatus, Reedline, ReedlineEvent,
    ReedlineMenu, ReedlineRawEvent, Signal, Span, Suggestion, default_emacs_keybindings,
};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use wharf_core::util::cut_str;

/// History entries kept per workspace.
pub(super) const HISTORY_ENTRIES: usize = 1000;

/// Longest message accepted from the input (bytes); longer input is cut.
pub(super) const MAX_INPUT_BYTES: usize = 256 * 1024;

/// How long [`Terminal::shutdown`] lets the editor print what it was sent
/// (it polls every 100 ms).
const PRINT_DRAIN: std::time::Duration = std::time::Duration::from_millis(300);

/// Longest partial line [`Screen`] holds back (bytes) before showing it.
const MAX_PARTIAL: usize = 16 * 1024;

/// Most `@path` completions offered at once.
const MAX_COMPLETIONS: usize = 200;

/// What the input side reports.
#[derive(Debug)]
pub(super) enum Input {
    /// A submitted message (may hold newlines).
    Line(String),
    /// Ctrl-C in the editor (the terminal is raw, so no SIGINT).
    Interrupt,
    /// End of input: Ctrl-D at an empty line (the editor keeps reading,
    /// so output still shows and Ctrl-C still cancels), or the end of piped
    /// input (the channel closes after it).
    Eof,
}

/// The prompt texts, changed by the chat loop and read at every repaint.
#[derive(Default)]
pub(super) struct PromptState {
    /// Left prompt (`› `, the approval question, …).
    pub(super) left: String,
    /// Right prompt: the status line.
    pub(super) right: String,
    /// An approval question waits: its answer keys ([`ANSWER_KEYS`]) answer
    /// at once, without Enter, when the input line is empty.
    pub(super) answer_keys: bool,
}

/// The keys that answer an approval question on their own.
pub(super) const ANSWER_KEYS: [char; 4] = ['y', 'a', 'n', 't'];

/// Where chat writes and what it reads.
pub(super) struct Terminal {
    pub(super) input: mpsc::UnboundedReceiver<Input>,
    /// The editor's printer: `Some` while a line editor owns the terminal.
    pub(super) printer: Option<SyncSender<String>>,
    pub(super) prompt: Arc<Mutex<PromptState>>,
    /// Repaints the editor's prompt (after [`PromptState`] changed).
    pub(super) repaint: Option<Arc<dyn Fn() + Send + Sync>>,
    /// Stops the editor: set, then join `thread`, so the terminal leaves raw
    /// mode before the process exits.
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Terminal {
    /// Ends the line editor (if any) and waits, briefly, for it to restore
    /// the terminal; later output goes straight to stdout.
    pub(super) fn shutdown(&mut self) {
        if self.thread.is_some() {
            // The editor prints what it was sent once per poll and looks at
            // the stop signal first: the last lines (a turn's end) would be
            // dropped without a few polls' wait.
            std::thread::sleep(PRINT_DRAIN);
        }
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
            while !t.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        self.printer = None;
    }
}

/// The terminal's input settings for the whole chat, restored on drop
/// (or by [`restore_terminal`]).
///
/// The line editor switches the terminal to raw mode only inside each
/// `read_line` and back to the settings it found in between (and before the
/// first one, while plugins load). Keys typed in those windows were read in
/// cooked mode: echoed by the terminal, and Enter turned into a line feed,
/// which in raw mode is Ctrl-J — "insert a newline" — so a command typed
/// ahead was not submitted. With CR→LF translation, echo and line buffering
/// off for the whole session, typed-ahead keys wait unchanged until the
/// editor reads them. Signals (Ctrl-C) and output processing are untouched.
pub(super) struct TypeAhead(());

/// The settings [`TypeAhead`] replaced, for [`restore_terminal`].
static SAVED: Mutex<Option<libc::termios>> = Mutex::new(None);

/// Puts back the terminal settings chat found, if it changed them; for exits
/// that skip destructors (SIGTERM). The line editor's raw mode is undone
/// too: it was entered from the held settings.
pub fn restore_terminal() {
    if let Some(saved) = SAVED.lock().unwrap_or_else(|e| e.into_inner()).take() {
        // SAFETY: the settings read from this terminal in `TypeAhead::hold`.
        unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &saved) };
    }
}

impl TypeAhead {
    /// Applies the settings when stdin and stdout are a terminal.
    pub(super) fn hold() -> Option<Self> {
        if !(std::io::stdin().is_terminal() && std::io::stdout().is_terminal()) {
            return None;
        }
        let mut t = std::mem::MaybeUninit::<libc::termios>::zeroed();
        // SAFETY: `tcgetattr` fills the `termios` it is given; on failure it
        // is not read.
        if unsafe { libc::tcgetattr(libc::STDIN_FILENO, t.as_mut_ptr()) } != 0 {
            return None;
        }
        // SAFETY: initialised by the successful `tcgetattr` above.
        let saved = unsafe { t.assume_init() };
        let mut held = saved;
        held.c_iflag &= !(libc::ICRNL | libc::INLCR | libc::IGNCR);
        held.c_lflag &= !(libc::ICANON | libc::ECHO);
        held.c_cc[libc::VMIN] = 1;
        held.c_cc[libc::VTIME] = 0;
        // TCSANOW: keys already typed stay queued for the editor.
        // SAFETY: a valid `termios` for a terminal file descriptor.
        if unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &held) } != 0 {
            return None;
        }
        *SAVED.lock().unwrap_or_else(|e| e.into_inner()) = Some(saved);
        Some(Self(()))
    }
}

impl Drop for TypeAhead {
    fn drop(&mut self) {
        restore_terminal();
    }
}

/// The history file of `workspace`.
pub(super) fn history_path(home: &Path, workspace: &Path) -> PathBuf {
    let digest = Sha256::digest(workspace.to_string_lossy().as_bytes());
    let hash = hex::encode(&digest[..8]);
    home.join(".wharf").join("history").join(format!("{hash}.txt"))
}

/// Starts the input side: the line editor when stdin and stdout are a
/// terminal, else the plain reader.
pub(super) fn start(workspace: &Path) -> Terminal {
    let prompt = Arc::new(Mutex::new(PromptState { left: "› ".into(), ..PromptState::default() }));
    let (tx, rx) = mpsc::unbounded_channel();
    let tty = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    let stop = Arc::new(AtomicBool::new(false));
    if !tty {
        spawn_plain(tx);
        return Terminal { input: rx, printer: None, prompt, repaint: None, stop, thread: None };
    }
    let history = std::env::var_os("HOME").map(|h| history_path(Path::new(&h), workspace));
    let printer = ExternalPrinter::<String>::new(1024);
    let sender = printer.sender();
    let mut editor = build_editor(history.as_deref(), workspace.to_path_buf(), printer, prompt.clone())
        .with_break_signal(stop.clone());
    let signal = editor.repaint_signal();
    let repaint: Arc<dyn Fn() + Send + Sync> = Arc::new(move || signal.request_repaint());
    let p = prompt.clone();
    let quit = stop.clone();
    let thread = std::thread::spawn(move || run_editor(editor, p, tx, quit));
    Terminal { input: rx, printer: Some(sender), prompt, repaint: Some(repaint), stop, thread: Some(thread) }
}

fn build_editor(
    history: Option<&Path>,
    workspace: PathBuf,
    printer: ExternalPrinter<String>,
    prompt: Arc<Mutex<PromptState>>,
) -> Reedline {
    let mut keys = default_emacs_keybindings();
    for (m, k) in [(KeyModifiers::ALT, KeyCode::Enter), (KeyModifiers::CONTROL, KeyCode::Char('j'))] {
        keys.add_binding(m, k, ReedlineEvent::Edit(vec![EditCommand::InsertNewline]));
    }
    keys.add_binding(
        KeyModifiers::NONE,
        KeyCode::Tab,
        ReedlineEvent::UntilFound(vec![ReedlineEvent::Menu("completion_menu".into()), ReedlineEvent::MenuNext]),
    );
    let menu = ColumnarMenu::default().with_name("completion_menu");
    let mut answering = keys.clone();
    for c in ANSWER_KEYS {
        for m in [KeyModifiers::NONE, KeyModifiers::SHIFT] {
            answering.add_binding(m, KeyCode::Char(c), ReedlineEvent::ExecuteHostCommand(c.to_string()));
        }
    }
    let modes = AnswerKeys { typing: Emacs::new(keys), answering: Emacs::new(answering), prompt };
    let mut editor = Reedline::create()
        .with_edit_mode(Box::new(modes))
        .with_completer(Box::new(PathCompleter { workspace }))
        .with_menu(ReedlineMenu::EngineCompleter(Box::new(menu)))
        .use_bracketed_paste(true)
        .with_external_printer(printer);
    if let Some(path) = history {
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        match FileBackedHistory::with_file(HISTORY_ENTRIES, path.to_path_buf()) {
            Ok(h) => editor = editor.with_history(Box::new(h)),
            Err(e) => eprintln!("wharf: history {} not available: {e}", path.display()),
        }
    }
    editor
}

fn run_editor(
    mut editor: Reedline,
    prompt: Arc<Mutex<PromptState>>,
    tx: mpsc::UnboundedSender<Input>,
    stop: Arc<AtomicBool>,
) {
    let prompt = ChatPrompt(prompt);
    loop {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let input = match editor.read_line(&prompt) {
            Ok(Signal::ExternalBreak(_)) => return,
            Ok(Signal::Success(text)) => Input::Line(bounded(&text)),
            Ok(Signal::CtrlC) => Input::Interrupt,
            Ok(Signal::CtrlD) => Input::Eof,
            // An answer key: the answer, unless a line is being typed.
            Ok(Signal::HostCommand(key)) => {
                if editor.current_buffer_contents().is_empty() {
                    Input::Line(key)
                } else {
                    editor.run_edit_commands(&[EditCommand::InsertString(key)]);
                    continue;
                }
            }
            Ok(_) => continue,
            Err(e) => {
                eprintln!("wharf: line editor: {e}");
                let _ = tx.send(Input::Eof);
                return;
            }
        };
        // After Ctrl-D the editor goes on (until chat stops it): chat may
        // wait for a running turn, whose output is printed through it, and
        // Ctrl-C must still cancel that turn.
        if tx.send(input).is_err() {
            return;
        }
    }
}

/// The editing keys, or while an approval question waits, the same keys
/// with [`ANSWER_KEYS`] answering it.
struct AnswerKeys {
    typing: Emacs,
    answering: Emacs,
    prompt: Arc<Mutex<PromptState>>,
}

impl EditMode for AnswerKeys {
    fn parse_event(&mut self, event: ReedlineRawEvent) -> ReedlineEvent {
        if self.prompt.lock().unwrap_or_else(|e| e.into_inner()).answer_keys {
            self.answering.parse_event(event)
        } else {
            self.typing.parse_event(event)
        }
    }

    fn edit_mode(&self) -> PromptEditMode {
        self.typing.edit_mode()
    }
}

fn bounded(text: &str) -> String {
    cut_str(text, MAX_INPUT_BYTES).to_string()
}

struct ChatPrompt(Arc<Mutex<PromptState>>);

impl ChatPrompt {
    fn with<R>(&self, f: impl FnOnce(&PromptState) -> R) -> R {
        f(&self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Prompt for ChatPrompt {
    fn render_prompt_left(&self) -> Cow<'_, str> {
        Cow::Owned(self.with(|p| p.left.clone()))
    }

    fn render_prompt_right(&self) -> Cow<'_, str> {
        Cow::Owned(self.with(|p| p.right.clone()))
    }

    fn render_prompt_indicator(&self, _mode: PromptEditMode) -> Cow<'_, str> {
        Cow::Borrowed("")
    }

    fn render_prompt_multiline_indicator(&self) -> Cow<'_, str> {
        Cow::Borrowed("┆ ")
    }

    fn render_prompt_history_search_indicator(&self, search: PromptHistorySearch) -> Cow<'_, str> {
        let failing = if matches!(search.status, PromptHistorySearchStatus::Failing) { "failing " } else { "" };
        Cow::Owned(format!("({failing}reverse-search: {}) ", search.term))
    }
}

/// Tab completion of the `@path` token under the cursor from the workspace.
struct PathCompleter {
    workspace: PathBuf,
}

impl Completer for PathCompleter {
    fn complete(&mut self, line: &str, pos: usize) -> reedline::CompletionResult {
        reedline::CompletionResult::fresh(complete_path(&self.workspace, line, pos))
    }
}

/// The completions of the `@path` token ending at `pos` (a byte offset):
/// entries of its directory, relative to `workspace`, whose name starts with
/// what was typed; directories end with `/`. Bounded to [`MAX_COMPLETIONS`].
///
/// A path the attachment parser (`wharf_core::attach`) would not read back
/// whole unquoted (a space, a quote-like character, trailing punctuation) is
/// completed quoted, `@"docs/my notes.md"`, and so is any path typed after
/// `@"`; a directory's quote is left open so completion can go on inside it.
pub(super) fn complete_path(workspace: &Path, line: &str, pos: usize) -> Vec<Suggestion> {
    let Some(before) = line.get(..pos) else {
        return Vec::new();
    };
    let Some((start, typed, quoted)) = path_token(before) else {
        return Vec::new();
    };
    let (dir, prefix) = match typed.rfind('/') {
        Some(i) => (&typed[..=i], &typed[i + 1..]),
        None => ("", typed),
    };
    let Ok(entries) = std::fs::read_dir(workspace.join(dir)) else {
        return Vec::new();
    };
    let mut names: Vec<(String, bool)> = entries
        .filter_map(|e| e.ok())
        .take(MAX_COMPLETIONS * 20)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let hidden = name.starts_with('.') && !prefix.starts_with('.');
            // Neither form can carry a double quote or a line break.
            let unnameable = name.contains(['"', '\n', '\r']);
            (name.starts_with(prefix) && !hidden && !unnameable)
                .then(|| (name, e.file_type().is_ok_and(|t| t.is_dir())))
        })
        .collect();
    names.sort();
    names.truncate(MAX_COMPLETIONS);
    names
        .into_iter()
        .map(|(name, is_dir)| {
            let slash = if is_dir { "/" } else { "" };
            let path = format!("{dir}{name}{slash}");
            let value = match (quoted || needs_quotes(&path), is_dir) {
                (false, _) => format!("@{path}"),
                (true, true) => format!("@\"{path}"),
                (true, false) => format!("@\"{path}\""),
            };
            Suggestion { value, span: Span::new(start, pos), append_whitespace: !is_dir, ..Suggestion::default() }
        })
        .collect()
}

/// The `@path` token that `before` ends in: its byte start (at `@`), the
/// path typed so far and whether it was opened with a quote (`@"my no`).
fn path_token(before: &str) -> Option<(usize, &str, bool)> {
    let at_word_start =
        |i: usize| before[..i].chars().next_back().is_none_or(|c| c.is_whitespace() || "([{".contains(c));
    // An open quote: `@"` at a word start, no closing quote or newline since.
    if let Some(i) = before.rfind("@\"")
        && at_word_start(i)
        && !before[i + 2..].contains(['"', '\n'])
    {
        return Some((i, &before[i + 2..], true));
    }
    let start = before
        .char_indices()
        .rfind(|&(_, c)| c.is_whitespace() || "([{".contains(c))
        .map(|(i, c)| i + c.len_utf8())
        .unwrap_or(0);
    let typed = before[start..].strip_prefix('@')?;
    Some((start, typed, false))
}

/// Whether `path` must be quoted to be read back whole as an attachment:
/// unquoted, the parser stops at whitespace and quote-like characters and
/// drops trailing sentence punctuation.
fn needs_quotes(path: &str) -> bool {
    path.contains(|c: char| c.is_whitespace() || matches!(c, '`' | '"' | '\'' | '<' | '>'))
        || path.ends_with(['.', ',', ';', ':', '!', '?', ')', ']', '}'])
}

fn spawn_plain(tx: mpsc::UnboundedSender<Input>) {
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        let mut lock = stdin.lock();
        let mut pending: Option<String> = None;
        loop {
            let mut raw = Vec::new();
            match lock.read_until(b'\n', &mut raw) {
                Ok(0) | Err(_) => {
                    if let Some(p) = pending.take() {
                        let _ = tx.send(Input::Line(clean(&p)));
                    }
                    let _ = tx.send(Input::Eof);
                    return;
                }
                Ok(_) => {}
            }
            let line = String::from_utf8_lossy(&raw);
            let line = line.trim_end_matches(['\n', '\r']);
            // A bracketed paste spans lines until its end marker.
            let text = match pending.take() {
                Some(mut p) => {
                    p.push('\n');
                    p.push_str(line);
                    p
                }
                None => line.to_string(),
            };
            let open = text.rfind(PASTE_START).is_some_and(|s| !text[s..].contains(PASTE_END));
            if open && text.len() < MAX_INPUT_BYTES {
                pending = Some(text);
                continue;
            }
            if tx.send(Input::Line(clean(&text))).is_err() {
                return;
            }
        }
    });
}

const PASTE_START: &str = "\x1b[200~";
const PASTE_END: &str = "\x1b[201~";

/// `text` without escape sequences (CSI, OSC, two-byte escapes) and control
/// characters other than newline and tab; bounded to [`MAX_INPUT_BYTES`].
pub(super) fn clean(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_INPUT_BYTES));
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' => match chars.next() {
                // CSI: parameters and intermediates up to a final byte.
                Some('[') => {
                    for c in chars.by_ref() {
                        if ('\x40'..='\x7e').contains(&c) {
                            break;
                        }
                    }
                }
                // OSC: up to BEL or ST.
                Some(']') => {
                    while let Some(c) = chars.next() {
                        if c == '\x07' || (c == '\x1b' && chars.next_if_eq(&'\\').is_some()) {
                            break;
                        }
                    }
                }
                // SS3 and other two-character escapes (ESC O A, Alt-x).
                Some('O') => {
                    chars.next();
                }
                _ => {}
            },
            '\n' | '\t' => out.push(c),
            c if c.is_control() => {}
            c => out.push(c),
        }
        if out.len() >= MAX_INPUT_BYTES {
            break;
        }
    }
    bounded(&out)
}

/// Where [`Screen`] sends whole lines.
enum Sink {
    /// The line editor's printer: the line appears above the input line.
    Printer(SyncSender<String>),
    /// Straight to stdout (no line editor).
    Stdout,
}

/// Text printed line by line, above the editor's input line or to stdout: a
/// partial line waits for its end (or [`Screen::finish`]), so a
/// [`notice`](Screen::notice) printed meanwhile lands between lines, never
/// inside a streamed one.
pub(super) struct Screen {
    sink: Sink,
    partial: Vec<u8>,
}

impl Screen {
    /// Lines for the line editor's printer.
    pub(super) fn new(printer: SyncSender<String>) -> Self {
        Self { sink: Sink::Printer(printer), partial: Vec::new() }
    }

    /// Lines for stdout.
    pub(super) fn stdout() -> Self {
        Self { sink: Sink::Stdout, partial: Vec::new() }
    }

    /// Sends the partial line, if any.
    pub(super) fn finish(&mut self) {
        if !self.partial.is_empty() {
            let line = String::from_utf8_lossy(&self.partial).into_owned();
            self.partial.clear();
            self.emit(&line);
        }
    }

    /// Prints `line` as a line of its own, before the partial line being
    /// streamed (which stays held and goes on when its text does).
    pub(super) fn notice(&mut self, line: &str) {
        for l in line.split('\n') {
            self.emit(l.trim_end_matches('\r'));
        }
    }

    /// Whether a partial line is held.
    #[cfg(test)]
    pub(super) fn has_partial(&self) -> bool {
        !self.partial.is_empty()
    }

    fn emit(&mut self, line: &str) {
        match &self.sink {
            // The editor splits what it is sent into lines with
            // `str::lines`, which yields nothing for "": with the newline
            // kept, an empty line is one (blank lines between paragraphs).
            Sink::Printer(p) => {
                let _ = p.send(format!("{line}\n"));
            }
            Sink::Stdout => {
                let mut o = std::io::stdout().lock();
                let _ = writeln!(o, "{line}");
                let _ = o.flush();
            }
        }
    }
}

impl Write for Screen {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        for &b in buf {
            if b == b'\n' {
                let line = String::from_utf8_lossy(&self.partial).into_owned();
                self.partial.clear();
                self.emit(line.trim_end_matches('\r'));
            } else if b != b'\r' || !self.partial.is_empty() {
                // A very long line is shown in parts (at a character start).
                if self.partial.len() >= MAX_PARTIAL && (b & 0xC0) != 0x80 {
                    self.finish();
                }
                self.partial.push(b);
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn clean_removes_escape_sequences() {
        assert_eq!(clean("\x1b[A"), "");
        assert_eq!(clean("hi\x1b[1;5Cthere\x1bOA"), "hithere");
        assert_eq!(clean("\x1b[200~a\nb\x1b[201~"), "a\nb");
        assert_eq!(clean("t\x1b]0;title\x07ok\x08"), "tok");
    }

    #[test]
    fn completes_paths_from_the_workspace() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/main.rs"), "").unwrap();
        std::fs::write(dir.path().join("README.md"), "").unwrap();
        let s = complete_path(dir.path(), "see @R", 6);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].value, "@README.md");
        assert_eq!((s[0].span.start, s[0].span.end), (4, 6));
        let s = complete_path(dir.path(), "@s", 2);
        assert_eq!(s[0].value, "@src/");
        let s = complete_path(dir.path(), "@src/m", 6);
        assert_eq!(s[0].value, "@src/main.rs");
        assert!(complete_path(dir.path(), "no at", 5).is_empty());
    }

    /// A path with a space is completed quoted, in the form the attachment
    /// parser reads back whole (unquoted it read `docs/my`).
    #[test]
    fn completes_paths_with_spaces_quoted() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("docs/old notes")).unwrap();
        std::fs::write(dir.path().join("docs/my notes.md"), "").unwrap();
        std::fs::write(dir.path().join("docs/old notes/a b.txt"), "").unwrap();
        std::fs::write(dir.path().join("docs/plain.md"), "").unwrap();
        let line = "read @docs/my";
        let s = complete_path(dir.path(), line, line.len());
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].value, "@\"docs/my notes.md\"");
        assert_eq!((s[0].span.start, s[0].span.end), (5, line.len()));
        let done = format!("{}{} please", &line[..s[0].span.start], s[0].value);
        assert_eq!(wharf_core::attach::find(&done, None), vec!["docs/my notes.md"]);
        // A directory keeps its quote open; completion goes on inside it.
        let s = complete_path(dir.path(), "@docs/o", 7);
        assert_eq!(s[0].value, "@\"docs/old notes/");
        let line = "see @\"docs/old notes/a";
        let s = complete_path(dir.path(), line, line.len());
        assert_eq!(s[0].value, "@\"docs/old notes/a b.txt\"");
        assert_eq!(s[0].span.start, 4);
        // Inside an opened quote even a plain name stays quoted.
        let line = "@\"docs/pl";
        assert_eq!(complete_path(dir.path(), line, line.len())[0].value, "@\"docs/plain.md\"");
        // Without a space, no quotes.
        assert_eq!(complete_path(dir.path(), "@docs/pl", 8)[0].value, "@docs/plain.md");
        // A closed quote is not completed again.
        let line = "@\"docs/my notes.md\" and";
        assert!(complete_path(dir.path(), line, line.len()).is_empty());
    }

    /// What the editor shows of the messages sent to its printer: it
    /// splits each into lines with `str::lines`.
    fn printed(rx: &std::sync::mpsc::Receiver<String>) -> Vec<String> {
        rx.try_iter().flat_map(|m| m.lines().map(str::to_string).collect::<Vec<_>>()).collect()
    }

    #[test]
    fn blank_lines_reach_the_editor() {
        let (tx, rx) = std::sync::mpsc::sync_channel(16);
        let mut s = Screen::new(tx);
        s.write_all(b"# Title\n\nText.\n").unwrap();
        s.notice("");
        assert_eq!(printed(&rx), vec!["# Title", "", "Text.", ""]);
    }

    #[test]
    fn a_notice_goes_before_the_line_being_streamed() {
        let (tx, rx) = std::sync::mpsc::sync_channel(16);
        let mut s = Screen::new(tx);
        s.write_all(b"Read the file caref").unwrap();
        s.notice("\u{21b3} queued for the next step: hi");
        assert!(s.has_partial());
        s.write_all(b"ully before editing.\nNext").unwrap();
        s.finish();
        assert_eq!(
            printed(&rx),
            vec!["\u{21b3} queued for the next step: hi", "Read the file carefully before editing.", "Next"]
        );
        // A line without end is shown in parts past the bound, whole characters.
        s.write_all("é".repeat(MAX_PARTIAL).as_bytes()).unwrap();
        s.finish();
        let parts = printed(&rx);
        assert_eq!(parts.len(), 2);
        assert_eq!(parts.concat(), "é".repeat(MAX_PARTIAL));
    }

    #[test]
    fn history_is_per_workspace() {
        let a = history_path(Path::new("/h"), Path::new("/w/a"));
        let b = history_path(Path::new("/h"), Path::new("/w/b"));
        assert_ne!(a, b);
        assert!(a.starts_with("/h/.wharf/history"));
    }
}
