//! What every command prints through: colour only on a terminal without
//! `NO_COLOR`, stdout that notices a reader going away (`wharf sessions
//! export ID | head`), and error chains without repeated causes.

use std::io::{self, IsTerminal, Write};

/// Whether stdout gets ANSI colour: it is a terminal and `NO_COLOR` is
/// unset or empty (<https://no-color.org>).
pub fn color() -> bool {
    io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_already_in_the_message_are_not_repeated() {
        let io = io::Error::new(io::ErrorKind::NotFound, "No such file or directory (os error 2)");
        let e = anyhow::Error::new(io).context("p.toml: cannot read: No such file or directory (os error 2)");
        assert_eq!(error_text(&e), "p.toml: cannot read: No such file or directory (os error 2)");
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(error_text(&e), "outer: inner");
    }
}
