//! Small helpers: RFC 3339 timestamps, cheap randomness and sortable ids.
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

#[cfg(test)]
mod tests {
    use super::*;

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
