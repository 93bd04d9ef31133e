//! Small helpers: RFC 3339 timestamps, cheap randomness, sortable ids, and
//! text cut on character boundaries or escaped for one log line.
//!
//! Kept dependency-free on purpose: the core needs only UTC formatting (never
//! parsing) and non-cryptographic randomness (backoff jitter, id suffixes).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 if the clock is before 1970).
pub fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// The current time as RFC 3339 UTC with milliseconds, e.g.
/// `2026-05-01T12:34:56.789Z`.
pub fn now_rfc3339() -> String {
    rfc3339_from_ms(unix_ms())
}

/// Formats Unix milliseconds as RFC 3339 UTC with milliseconds.
pub fn rfc3339_from_ms(ms: u64) -> String {
    let (y, mo, d, h, mi, s, milli) = civil(ms);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{milli:03}Z")
}

/// Parses what [`rfc3339_from_ms`] writes (`YYYY-MM-DDTHH:MM:SS[.mmm]Z`)
/// back into Unix milliseconds; `None` for anything else.
pub fn ms_from_rfc3339(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> { s.get(r)?.parse::<i64>().ok() };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let rest = s.get(19..)?.strip_suffix('Z')?;
    let milli = match rest.strip_prefix('.') {
        Some(f) if !f.is_empty() && f.len() <= 9 && f.bytes().all(|c| c.is_ascii_digit()) => {
            format!("{f:0<3}").get(..3)?.parse::<i64>().ok()?
        }
        None if rest.is_empty() => 0,
        _ => return None,
    };
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    // Days from civil (Howard Hinnant), the inverse of `civil`.
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if mo > 2 { mo - 3 } else { mo + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let ms = ((days * 86_400 + h * 3600 + mi * 60 + sec) * 1000) + milli;
    u64::try_from(ms).ok()
}

/// Splits Unix milliseconds into UTC calendar fields (proleptic Gregorian;
/// the "days from civil" inverse by Howard Hinnant).
fn civil(ms: u64) -> (i64, u32, u32, u32, u32, u32, u32) {
    let milli = (ms % 1000) as u32;
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (h, mi, s) = ((rem / 3600) as u32, ((rem % 3600) / 60) as u32, (rem % 60) as u32);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let mo = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = if mo <= 2 { y + 1 } else { y };
    (y, mo, d, h, mi, s, milli)
}

/// A non-cryptographic random number (std's per-process random hash keys
/// mixed with a counter and the clock). Good for jitter and id suffixes only.
pub fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.finish()
}

/// A random float in `[0, 1)`.
pub fn random_unit() -> f64 {
    (random_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// A new session id: UTC time to the millisecond plus 32 random bits, e.g.
/// `20260501T123456789Z-1a2b3c4d`. Lexicographic order is creation order
/// (to the millisecond); uniqueness is also enforced by exclusive creation.
pub fn new_session_id() -> String {
    let (y, mo, d, h, mi, s, milli) = civil(unix_ms());
    format!("{y:04}{mo:02}{d:02}T{h:02}{mi:02}{s:02}{milli:03}Z-{:08x}", random_u64() as u32)
}

/// A short random id (for inbox items).
pub fn short_id() -> String {
    format!("{:012x}", random_u64() & 0xffff_ffff_ffff)
}

/// The largest character boundary of `s` at or below `max` bytes.
pub fn floor_char_boundary(s: &str, max: usize) -> usize {
    let mut i = max.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// `s` cut to at most `max` bytes, on a character boundary (never panics).
pub fn cut_str(s: &str, max: usize) -> &str {
    &s[..floor_char_boundary(s, max)]
}

/// Truncates `s` to at most `max` bytes on a character boundary; returns
/// whether anything was cut.
pub fn truncate_str(s: &mut String, max: usize) -> bool {
    if s.len() <= max {
        return false;
    }
    let cut = floor_char_boundary(s, max);
    s.truncate(cut);
    true
}

/// Whether `c` must not appear raw in a log line.
fn breaks_a_line(c: char) -> bool {
    c.is_control() || c == '\u{2028}' || c == '\u{2029}'
}

/// `s` as one log line: newlines, carriage returns, tabs and every other
/// control character (and the Unicode line/paragraph separators) escaped as
/// `\n`, `\r`, `\t`, `\u{..}`, so text from a component can never start a
/// line that looks like the host's own.
pub fn escape_line(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(breaks_a_line) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if breaks_a_line(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_times_read_back_to_the_same_milliseconds() {
        for ms in [0u64, 1, 951_782_400_123, 1_796_563_414_916, 4_102_444_799_999] {
            assert_eq!(ms_from_rfc3339(&rfc3339_from_ms(ms)), Some(ms), "{}", rfc3339_from_ms(ms));
        }
        assert_eq!(ms_from_rfc3339("2026-12-06T13:24:18Z"), Some(1_796_563_458_000));
        assert_eq!(ms_from_rfc3339("2026-13-06T13:24:18Z"), None);
        assert_eq!(ms_from_rfc3339("yesterday"), None);
    }

    #[test]
    fn cuts_never_split_a_character() {
        let s = "ab\u{e9}cd"; // `é` is 2 bytes, at 2..4
        assert_eq!(cut_str(s, 3), "ab");
        assert_eq!(cut_str(s, 4), "ab\u{e9}");
        assert_eq!(cut_str(s, 100), s);
        let mut t = "\u{1f600}\u{1f600}".to_string();
        assert!(truncate_str(&mut t, 5));
        assert_eq!(t, "\u{1f600}");
        assert!(!truncate_str(&mut t, 4));
        for max in 0..10 {
            assert!(cut_str("\u{e9}\u{1f600}x", max).len() <= max);
        }
    }

    #[test]
    fn log_lines_cannot_be_forged() {
        assert_eq!(escape_line("plain é"), "plain é");
        assert_eq!(
            escape_line("a\nINFO wharf: forged\r\t\u{1b}[31m\u{2028}"),
            "a\\nINFO wharf: forged\\r\\t\\u{1b}[31m\\u{2028}"
        );
        assert!(!escape_line("x\ny\rz").contains(['\n', '\r']));
    }

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339_from_ms(0), "1970-01-01T00:00:00.000Z");
        // 2000-02-29T12:34:56.789Z (leap day).
        assert_eq!(rfc3339_from_ms(951_827_696_789), "2000-02-29T12:34:56.789Z");
        // 2024-12-31T23:59:59.999Z.
        assert_eq!(rfc3339_from_ms(1_735_689_599_999), "2024-12-31T23:59:59.999Z");
    }

    #[test]
    fn ids_are_distinct_and_shaped() {
        let a = new_session_id();
        let b = new_session_id();
        assert_ne!(a, b);
        assert_eq!(a.len(), "20260501T123456789Z-1a2b3c4d".len());
        assert!(random_unit() < 1.0);
    }
}
