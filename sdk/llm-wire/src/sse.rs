//! An incremental Server-Sent Events parser (WHATWG HTML §9.2.6).
//!
//! Feed it byte chunks split anywhere — mid-line, mid-CRLF, mid-UTF-8 — and
//! it yields one [`SseEvent`] per dispatched event:
//!
//! - lines end with LF, CRLF or a lone CR (a CR at the end of one chunk and
//!   an LF at the start of the next count as one CRLF);
//! - a leading UTF-8 BOM is skipped; invalid UTF-8 becomes U+FFFD;
//! - `data:` lines of one event are joined with `\n`; a blank line
//!   dispatches; an event with no `data` field dispatches nothing;
//! - `event:` names the next event ([`SseEvent::Message::event`]); `id:` and
//!   `retry:` are accepted and ignored (there is no reconnection here);
//!   unknown fields are ignored;
//! - a data payload of exactly `[DONE]` (surrounding whitespace ignored) is
//!   reported as [`SseEvent::Done`];
//! - comment lines (`:` …, e.g. DeepSeek's `: keep-alive`) are reported as
//!   [`SseEvent::Comment`] so the caller can reset its idle timer.
//!
//! At end of input ([`SseParser::finish`]) an event whose `data` lines were
//! complete but which lacked the final blank line is still dispatched (a
//! lenient reading that servers closing right after `data: [DONE]\n` need);
//! an unterminated last line is dropped, as the spec says.

use thiserror::Error;

/// Default cap on one line or one event's data, in bytes.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// One parsed SSE item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseEvent {
    /// An event with data.
    Message {
        /// The `event:` name, if one was given.
        event: Option<String>,
        /// The data lines, joined with `\n`.
        data: String,
    },
    /// A `data: [DONE]` terminator.
    Done,
    /// A comment line (text after the colon, one leading space removed).
    Comment(String),
}

/// Parse failures.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SseError {
    /// A line or an event's data grew past the configured cap.
    #[error("SSE event larger than {limit} bytes")]
    TooLarge {
        /// The cap in bytes.
        limit: usize,
    },
}

/// The incremental parser. See the module docs.
#[derive(Debug, Clone)]
pub struct SseParser {
    line: Vec<u8>,
    after_cr: bool,
    bom_checked: bool,
    data: String,
    has_data: bool,
    event: Option<String>,
    max_event_bytes: usize,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::new()
    }
}

impl SseParser {
    /// A parser with the [`DEFAULT_MAX_EVENT_BYTES`] cap.
    pub fn new() -> Self {
        Self::with_max_event_bytes(DEFAULT_MAX_EVENT_BYTES)
    }

    /// A parser with a cap on one line and one event's data, in bytes.
    pub fn with_max_event_bytes(max_event_bytes: usize) -> Self {
        Self {
            line: Vec::new(),
            after_cr: false,
            bom_checked: false,
            data: String::new(),
            has_data: false,
            event: None,
            max_event_bytes,
        }
    }

    /// Feeds a chunk; returns the events it completed, in order.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>, SseError> {
        let mut out = Vec::new();
        self.feed_into(bytes, &mut out)?;
        Ok(out)
    }

    /// Like [`feed`](Self::feed), appending to `out`.
    pub fn feed_into(&mut self, mut bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if !self.bom_checked {
            // Wait until three bytes are known before deciding on a BOM.
            const BOM: &[u8] = b"\xEF\xBB\xBF";
            let mut probe = self.line.clone();
            probe.extend_from_slice(&bytes[..bytes.len().min(3)]);
            if probe.len() < 3 && BOM.starts_with(&probe) {
                self.line = probe;
                return Ok(());
            }
            self.bom_checked = true;
            if probe.starts_with(BOM) {
                let consumed_from_line = self.line.len();
                self.line.clear();
                bytes = &bytes[3 - consumed_from_line..];
            }
        }
        for &b in bytes {
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    continue;
                }
            }
            match b {
                b'\n' => self.end_line(out)?,
                b'\r' => {
                    self.after_cr = true;
                    self.end_line(out)?;
                }
                _ => {
                    if self.line.len() >= self.max_event_bytes {
                        return Err(SseError::TooLarge { limit: self.max_event_bytes });
                    }
                    self.line.push(b);
                }
            }
        }
        Ok(())
    }

    /// Ends the input: dispatches a pending event whose lines were complete
    /// (see the module docs) and drops an unterminated last line.
    pub fn finish(&mut self) -> Vec<SseEvent> {
        let mut out = Vec::new();
        self.line.clear();
        self.after_cr = false;
        self.dispatch(&mut out);
        out
    }

    fn end_line(&mut self, out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        let raw = std::mem::take(&mut self.line);
        if raw.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        let line = String::from_utf8_lossy(&raw);
        let (field, value) = match line.find(':') {
            Some(0) => {
                let text = &line[1..];
                out.push(SseEvent::Comment(text.strip_prefix(' ').unwrap_or(text).to_string()));
                return Ok(());
            }
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (&line[..], ""),
        };
        match field {
            "data" => {
                if self.data.len() + value.len() + 1 > self.max_event_bytes {
                    return Err(SseError::TooLarge { limit: self.max_event_bytes });
                }
                self.data.push_str(value);
                self.data.push('\n');
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_string()),
            // `id` and `retry` only matter for reconnection, which a
            // completion stream never does; unknown fields are ignored.
            _ => {}
        }
        Ok(())
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = self.event.take();
        if !self.has_data {
            self.data.clear();
            return;
        }
        self.has_data = false;
        let mut data = std::mem::take(&mut self.data);
        if data.ends_with('\n') {
            data.pop();
        }
        if data.trim() == "[DONE]" {
            out.push(SseEvent::Done);
        } else {
            out.push(SseEvent::Message { event: event.filter(|e| !e.is_empty()), data });
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn msg(data: &str) -> SseEvent {
        SseEvent::Message { event: None, data: data.to_string() }
    }

    fn parse_all(input: &[u8]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut out = p.feed(input).unwrap();
        out.extend(p.finish());
        out
    }

    fn parse_bytewise(input: &[u8]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for b in input {
            p.feed_into(std::slice::from_ref(b), &mut out).unwrap();
        }
        out.extend(p.finish());
        out
    }

    #[test]
    fn basic_lf_crlf_cr() {
        for sep in ["\n", "\r\n", "\r"] {
            let input = format!("data: a{sep}{sep}data: b{sep}{sep}data: [DONE]{sep}{sep}");
            let want = vec![msg("a"), msg("b"), SseEvent::Done];
            assert_eq!(parse_all(input.as_bytes()), want, "{sep:?}");
            assert_eq!(parse_bytewise(input.as_bytes()), want, "{sep:?}");
        }
    }

    #[test]
    fn multiline_data_and_fields() {
        let input = b"event: update\nid: 7\nretry: 100\ndata: line1\ndata:line2\ndata\nfoo: bar\n\n";
        assert_eq!(
            parse_all(input),
            vec![SseEvent::Message { event: Some("update".into()), data: "line1\nline2\n".into() }]
        );
    }

    #[test]
    fn comments_and_blank_events() {
        let input = b": keep-alive\n\n:\n\nid: 1\n\ndata: x\n\n";
        assert_eq!(
            parse_all(input),
            vec![SseEvent::Comment("keep-alive".into()), SseEvent::Comment(String::new()), msg("x")]
        );
    }

    #[test]
    fn event_name_resets_per_event() {
        let input = b"event: error\ndata: e\n\ndata: d\n\n";
        assert_eq!(
            parse_all(input),
            vec![SseEvent::Message { event: Some("error".into()), data: "e".into() }, msg("d")]
        );
    }

    #[test]
    fn utf8_split_anywhere() {
        let input = "data: héllo → 世界 🎉\n\n".as_bytes();
        for cut in 0..=input.len() {
            let mut p = SseParser::new();
            let mut out = p.feed(&input[..cut]).unwrap();
            out.extend(p.feed(&input[cut..]).unwrap());
            assert_eq!(out, vec![msg("héllo → 世界 🎉")], "cut {cut}");
        }
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        assert_eq!(parse_all(b"data: a\xFFb\n\n"), vec![msg("a\u{FFFD}b")]);
    }

    #[test]
    fn bom_is_skipped_even_when_split() {
        let input = b"\xEF\xBB\xBFdata: x\n\n";
        assert_eq!(parse_all(input), vec![msg("x")]);
        assert_eq!(parse_bytewise(input), vec![msg("x")]);
        // A BOM later in the stream is data.
        assert_eq!(parse_all(b"data: \xEF\xBB\xBFx\n\n"), vec![msg("\u{FEFF}x")]);
        // Bytes that only start like a BOM are kept.
        assert_eq!(parse_bytewise(b"\xEFdata\n"), vec![]);
    }

    #[test]
    fn done_variants() {
        assert_eq!(parse_all(b"data:[DONE]\n\n"), vec![SseEvent::Done]);
        assert_eq!(parse_all(b"data: [DONE] \n\n"), vec![SseEvent::Done]);
        assert_eq!(parse_all(b"data: [DONE]x\n\n"), vec![msg("[DONE]x")]);
    }

    #[test]
    fn eof_handling() {
        // Complete data line without the blank line: dispatched at finish.
        assert_eq!(parse_all(b"data: [DONE]\n"), vec![SseEvent::Done]);
        // Unterminated line: dropped.
        assert_eq!(parse_all(b"data: {\"trunc"), vec![]);
        // Complete line then unterminated continuation: the complete part only.
        assert_eq!(parse_all(b"data: a\ndata: b"), vec![msg("a")]);
    }

    #[test]
    fn size_cap() {
        let mut p = SseParser::with_max_event_bytes(8);
        assert_eq!(p.feed(b"data: 123456789"), Err(SseError::TooLarge { limit: 8 }));
        let mut p = SseParser::with_max_event_bytes(9);
        assert!(p.feed(b"data:1234\n").is_ok());
        assert_eq!(p.feed(b"data:5678\n"), Err(SseError::TooLarge { limit: 9 }));
    }
}
