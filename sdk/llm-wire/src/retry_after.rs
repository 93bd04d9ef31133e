//! `Retry-After` parsing: delay-seconds or an HTTP-date (RFC 9110 §10.2.3).

/// Parses a `Retry-After` value into milliseconds from now.
///
/// Accepts delay-seconds (`"7"`; a fractional `"1.5"` is tolerated) and the
/// three HTTP-date forms (IMF-fixdate `Sun, 06 Nov 1994 08:49:37 GMT`, RFC 850
/// `Sunday, 06-Nov-94 08:49:37 GMT`, asctime `Sun Nov  6 08:49:37 1994`).
/// A date in the past gives `Some(0)`. `now_unix_secs` is the current time
/// (this crate does no I/O, so the caller supplies it). Returns `None` for
/// anything else.
pub fn parse_retry_after(value: &str, now_unix_secs: u64) -> Option<u64> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    if value.bytes().all(|b| b.is_ascii_digit()) {
        return value.parse::<u64>().ok().map(|s| s.saturating_mul(1000)).or(Some(u64::MAX));
    }
    if value.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let secs: f64 = value.parse().ok()?;
        if secs.is_finite() && secs >= 0.0 {
            // Bounded above by the check; `as` saturates for huge values.
            return Some((secs * 1000.0).round() as u64);
        }
        return None;
    }
    let at = parse_http_date(value)?;
    Some(at.saturating_sub(now_unix_secs).saturating_mul(1000))
}

/// Parses an HTTP-date into seconds since the Unix epoch, with the
/// `httpdate` crate: the three forms of RFC 9110 §5.6.7, exactly as written
/// there (GMT, English names, the weekday matching the date, years 1970-9999).
pub fn parse_http_date(value: &str) -> Option<u64> {
    let at = httpdate::parse_http_date(value.trim()).ok()?;
    at.duration_since(std::time::UNIX_EPOCH).ok().map(|d| d.as_secs())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    const T: u64 = 784_111_777; // 1994-11-06T08:49:37Z

    #[test]
    fn seconds() {
        assert_eq!(parse_retry_after("0", 0), Some(0));
        assert_eq!(parse_retry_after(" 30 ", 0), Some(30_000));
        assert_eq!(parse_retry_after("1.5", 0), Some(1500));
        assert_eq!(parse_retry_after("99999999999999999999999", 0), Some(u64::MAX));
        assert_eq!(parse_retry_after("-1", 0), None);
        assert_eq!(parse_retry_after("", 0), None);
        assert_eq!(parse_retry_after("later", 0), None);
    }

    #[test]
    fn dates() {
        assert_eq!(parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"), Some(T));
        assert_eq!(parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"), Some(T));
        assert_eq!(parse_http_date("Sun Nov  6 08:49:37 1994"), Some(T));
        assert_eq!(parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(parse_http_date("Tue, 29 Feb 2028 12:00:00 GMT"), Some(1_835_438_400));
        assert_eq!(parse_http_date("Sun, 06 Foo 1994 08:49:37 GMT"), None);
        assert_eq!(parse_http_date("Sun, 06 Nov 1994 25:49:37 GMT"), None);
        assert_eq!(parse_http_date("Sun, 06 Nov 1994 08:49:37 PST"), None);
        // A weekday that does not match the date.
        assert_eq!(parse_http_date("Mon, 06 Nov 1994 08:49:37 GMT"), None);
        assert_eq!(parse_http_date("Sun, 06 Nov 1994"), None);
    }

    #[test]
    fn date_relative_to_now() {
        assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", T - 3), Some(3000));
        assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", T + 100), Some(0));
    }
}
