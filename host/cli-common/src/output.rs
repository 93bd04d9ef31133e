//! What every command prints through: colour only on a terminal without
//! `NO_COLOR`, stdout that notices a reader going away (`wharf sessions
//! export ID | head`), error chains without repeated causes, and where the
//! log goes ([`init_logging`]).

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// Whether stdout gets ANSI colour: it is a terminal and `NO_COLOR` is
/// unset or empty (<https://no-color.org>).
pub fn color() -> bool {
    io::stdout().is_terminal() && no_color_unset()
}

/// Whether stderr gets ANSI colour (the same rule as [`color`]).
pub fn stderr_color() -> bool {
    io::stderr().is_terminal() && no_color_unset()
}

fn no_color_unset() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// A log file past this size is moved to `NAME.log.1` when a command starts.
const LOG_ROTATE_BYTES: u64 = 8 << 20;
/// Notices waiting for the surface; more are dropped (they are in the log).
const NOTICE_QUEUE: usize = 64;
/// Distinct notice texts remembered to show each once.
const NOTICE_SEEN: usize = 256;
/// Most characters of one notice.
const NOTICE_CHARS: usize = 240;
/// Log targets whose warnings reach the surface as session events already
/// (the plugin host publishes every failed reload as `plugin/reload-failed`,
/// shown once per failed version), so they are not repeated as notices.
const SHOWN_AS_EVENTS: &[&str] = &["wharf_runtime::plugins"];

/// The log file of this process, when it logs to one.
static LOG_FILE: OnceLock<PathBuf> = OnceLock::new();
/// The receiving end of the notices, for the surface that shows them.
static NOTICES: Mutex<Option<tokio::sync::mpsc::Receiver<String>>> = Mutex::new(None);

/// Sets up tracing. With `file` (`wharf chat`, `wharf web`, whose screen is
/// not the log's place) the log goes to `~/.wharf/logs/FILE.log`, without
/// colour, and each distinct warning or error becomes one line for
/// [`take_notices`]; the surface shows it as a notice. Otherwise the log
/// goes to stderr, coloured only when stderr is a terminal and `NO_COLOR` is
/// unset. `filter` is the `--log` filter (`warn` if it does not parse).
pub fn init_logging(filter: &str, file: Option<&str>) {
    use tracing_subscriber::prelude::*;
    let env = || tracing_subscriber::EnvFilter::try_new(filter).unwrap_or_else(|_| "warn".into());
    let opened = file.map(|name| {
        let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
        let dir = home.join(".wharf").join("logs");
        open_log(&dir, name).map_err(|e| format!("cannot open the log file in {}: {e}", dir.display()))
    });
    match opened {
        Some(Ok((path, f))) => {
            let _ = LOG_FILE.set(path);
            let (tx, rx) = tokio::sync::mpsc::channel(NOTICE_QUEUE);
            *NOTICES.lock().unwrap_or_else(|e| e.into_inner()) = Some(rx);
            let notices = NoticeLayer { tx, seen: Mutex::new(HashSet::new()) };
            let _ = tracing_subscriber::registry()
                .with(tracing_subscriber::fmt::layer().with_ansi(false).with_writer(Mutex::new(f)).with_filter(env()))
                .with(notices.with_filter(env()))
                .try_init();
        }
        other => {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(env())
                .with_ansi(stderr_color())
                .with_writer(io::stderr)
                .try_init();
            if let Some(Err(e)) = other {
                tracing::warn!("{e}; logging to stderr");
            }
        }
    }
}

/// Opens (appending) `dir/NAME.log`, moving a large one aside first, and
/// writes a line saying which process starts logging.
fn open_log(dir: &Path, name: &str) -> io::Result<(PathBuf, File)> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(format!("{name}.log"));
    if std::fs::metadata(&path).is_ok_and(|m| m.len() > LOG_ROTATE_BYTES) {
        let _ = std::fs::rename(&path, dir.join(format!("{name}.log.1")));
    }
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
    writeln!(
        f,
        "{} wharf {name} started (pid {}, version {})",
        wharf_core::util::now_rfc3339(),
        std::process::id(),
        env!("CARGO_PKG_VERSION")
    )?;
    Ok((path, f))
}

/// The log file this process writes, if it logs to a file.
pub fn log_file() -> Option<&'static Path> {
    LOG_FILE.get().map(PathBuf::as_path)
}

/// The log file for a notice: `~/…` under the home directory.
pub fn log_file_shown() -> Option<String> {
    let path = log_file()?;
    let home = std::env::var_os("HOME").map(PathBuf::from);
    Some(match home.as_deref().and_then(|h| path.strip_prefix(h).ok()) {
        Some(rest) => format!("~/{}", rest.display()),
        None => path.display().to_string(),
    })
}

/// The notices (one line per distinct warning or error logged), for the one
/// surface that shows them; `None` when the log goes to stderr or another
/// caller took them.
pub fn take_notices() -> Option<tokio::sync::mpsc::Receiver<String>> {
    NOTICES.lock().unwrap_or_else(|e| e.into_inner()).take()
}

/// Turns warnings and errors into one-line notices, each distinct text once.
struct NoticeLayer {
    tx: tokio::sync::mpsc::Sender<String>,
    seen: Mutex<HashSet<String>>,
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for NoticeLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: tracing_subscriber::layer::Context<'_, S>) {
        let meta = event.metadata();
        if *meta.level() > tracing::Level::WARN || SHOWN_AS_EVENTS.iter().any(|t| meta.target().starts_with(t)) {
            return;
        }
        let mut fields = NoticeFields::default();
        event.record(&mut fields);
        let text = notice_text(&fields);
        {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            if seen.len() >= NOTICE_SEEN {
                seen.clear();
            }
            if !seen.insert(text.clone()) {
                return;
            }
        }
        let _ = self.tx.try_send(text);
    }
}

/// The message and the other fields of a log event.
#[derive(Default)]
struct NoticeFields {
    message: String,
    plugin: Option<String>,
    rest: Vec<String>,
}

impl tracing::field::Visit for NoticeFields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        let v = format!("{value:?}");
        match field.name() {
            "message" => self.message = v,
            "plugin" => self.plugin = Some(v),
            name => self.rest.push(format!("{name}={v}")),
        }
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        match field.name() {
            "message" => self.message = value.to_string(),
            "plugin" => self.plugin = Some(value.to_string()),
            name => self.rest.push(format!("{name}={value}")),
        }
    }
}

/// `plugin: message (k=v …)` on one line, cut to [`NOTICE_CHARS`].
fn notice_text(f: &NoticeFields) -> String {
    let mut text = match &f.plugin {
        Some(p) => format!("{p}: {}", f.message),
        None => f.message.clone(),
    };
    if !f.rest.is_empty() {
        text.push_str(&format!(" ({})", f.rest.join(", ")));
    }
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(NOTICE_CHARS) {
        Some((i, _)) => format!("{}…", &flat[..i]),
        None => flat,
    }
}

/// Locked stdout that remembers whether the reader closed the pipe, so a
/// command can stop quietly instead of reporting `Broken pipe`.
pub struct Stdout {
    inner: io::StdoutLock<'static>,
    closed: bool,
}

impl Stdout {
    /// Locks stdout.
    pub fn new() -> Self {
        Self { inner: io::stdout().lock(), closed: false }
    }

    /// Whether a write failed because the reader went away.
    pub fn closed(&self) -> bool {
        self.closed
    }

    fn note<T>(&mut self, r: io::Result<T>) -> io::Result<T> {
        if let Err(e) = &r
            && e.kind() == io::ErrorKind::BrokenPipe
        {
            self.closed = true;
        }
        r
    }
}

impl Default for Stdout {
    fn default() -> Self {
        Self::new()
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let r = self.inner.write(buf);
        self.note(r)
    }

    fn flush(&mut self) -> io::Result<()> {
        let r = self.inner.flush();
        self.note(r)
    }
}

/// An error and its causes joined by `: `, leaving out a cause whose text
/// already ends the message before it (errors that print their source in
/// their own message, such as an unreadable config file).
pub fn error_text(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !text.is_empty() && out.ends_with(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// Whether an error comes from writing to a closed stdout pipe.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<io::Error>().is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe))
}

/// One line for a failed (re)load of plugin `p`: what failed (the error's
/// first line), and whether an earlier version (`serving`, its digest) still
/// answers; `log` is where the details are.
pub fn reload_failed_notice(p: &wharf_core::events::PluginChange, serving: Option<&str>, log: Option<&str>) -> String {
    let error = p.error.as_deref().unwrap_or("").lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    let error = cut_chars(error, 160);
    let short = |d: &str| d.get(..12).unwrap_or(d).to_string();
    let mut msg = match (p.id.as_str(), serving) {
        ("config", _) => format!("config: the change was not applied ({error}); the previous config stays"),
        ("", _) => format!("plugin load failed ({error})"),
        (id, Some(old)) if old != p.digest => {
            let new = if p.digest.is_empty() { String::new() } else { format!(" {}", short(&p.digest)) };
            format!(
                "{id}: new version{new} failed to load ({error}); the previous version {} keeps serving",
                short(old)
            )
        }
        (id, Some(_)) => format!("{id}: reload failed ({error}); the loaded version keeps serving"),
        (id, None) => format!("{id}: failed to load ({error}); it is not available"),
    };
    if let Some(log) = log {
        msg.push_str(&format!(" · details in {log}"));
    }
    msg
}

/// `s` cut to `max` characters, with `…` when cut.
pub fn cut_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn causes_already_in_the_message_are_not_repeated() {
        let io = io::Error::new(io::ErrorKind::NotFound, "No such file or directory (os error 2)");
        let e = anyhow::Error::new(io).context("p.toml: cannot read: No such file or directory (os error 2)");
        assert_eq!(error_text(&e), "p.toml: cannot read: No such file or directory (os error 2)");
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(error_text(&e), "outer: inner");
    }

    #[test]
    fn notices_are_one_line_and_name_the_plugin() {
        let f = NoticeFields {
            message: "denied outbound\nrequest".into(),
            plugin: Some("web".into()),
            rest: vec!["host=example.com".into()],
        };
        assert_eq!(notice_text(&f), "web: denied outbound request (host=example.com)");
        let long = NoticeFields { message: "é".repeat(NOTICE_CHARS + 5), ..NoticeFields::default() };
        assert_eq!(notice_text(&long).chars().count(), NOTICE_CHARS + 1);
    }

    #[test]
    fn log_files_are_appended_and_rotated() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = open_log(dir.path(), "chat").unwrap();
        assert_eq!(path, dir.path().join("chat.log"));
        let (_, _) = open_log(dir.path(), "chat").unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().filter(|l| l.contains("wharf chat started")).count(), 2, "{text}");
        std::fs::write(&path, vec![b'x'; LOG_ROTATE_BYTES as usize + 1]).unwrap();
        open_log(dir.path(), "chat").unwrap();
        assert!(dir.path().join("chat.log.1").exists());
        assert!(std::fs::metadata(&path).unwrap().len() < 1024);
    }
}
