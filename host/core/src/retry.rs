//! Retry policy for failed model requests.
//!
//! A retry happens inside the same turn and step: the failed attempt's chunks
//! stay in the log (as `assistant/chunk`) but never become a message, and each
//! retry is logged as `llm/retry{attempt, code, delay_ms}`. The
//! `agent/request-error` waterfall can override the decision (see
//! [`crate::agent`]).
//!
//! A server's `Retry-After` is obeyed, not shortened: up to
//! [`RetryPolicy::max_retry_after`] (60 s by default, long enough for the
//! usual per-minute rate windows, short enough that an interactive turn is
//! not silently parked) the retry waits exactly that long, without jitter
//! and regardless of `max_delay`; beyond it the policy gives up at once and
//! the turn stops with the error's own code (`RATE_LIMIT` for a 429), its
//! message naming the time the server asked for
//! ([`RetryPolicy::retry_after_too_long`]).

use std::time::Duration;

use crate::plugin::{LlmError, LlmErrorCode};

/// Bounded exponential backoff with jitter.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 disables retrying).
    pub max_retries: u32,
    /// Delay before the first retry.
    pub initial_delay: Duration,
    /// Upper bound of the backoff (not of a server's `Retry-After`).
    pub max_delay: Duration,
    /// Longest server `Retry-After` waited; a longer one ends the retries.
    pub max_retry_after: Duration,
    /// Growth factor per retry.
    pub multiplier: f64,
    /// Relative jitter: the delay is scaled by a random factor in
    /// `[1 - jitter, 1 + jitter]` (then capped).
    pub jitter: f64,
    /// Codes worth retrying.
    pub retry_on: Vec<LlmErrorCode>,
}

impl Default for RetryPolicy {
    /// 5 retries, 500 ms doubling to 10 s, ±10 % jitter, a `Retry-After`
    /// of up to 60 s waited as asked, on `RATE_LIMIT`, `SERVER`, `TIMEOUT`,
    /// `TRANSPORT`, `STREAM_CLOSED`, `EMPTY_RESPONSE` (never `AUTH`,
    /// `QUOTA`, `INVALID_REQUEST` …).
    fn default() -> Self {
        Self {
            max_retries: 5,
            initial_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(10),
            max_retry_after: Duration::from_secs(60),
            multiplier: 2.0,
            jitter: 0.1,
            retry_on: vec![
                LlmErrorCode::RateLimit,
                LlmErrorCode::Server,
                LlmErrorCode::Timeout,
                LlmErrorCode::Transport,
                LlmErrorCode::StreamClosed,
                LlmErrorCode::EmptyResponse,
            ],
        }
    }
}

impl RetryPolicy {
    /// No retries at all.
    pub fn none() -> Self {
        Self { max_retries: 0, ..Self::default() }
    }

    /// Whether `code` is retried by this policy.
    pub fn retries(&self, code: LlmErrorCode) -> bool {
        self.retry_on.contains(&code)
    }

    /// The delay before retry number `retry` (1-based) after `err`, or `None`
    /// to give up. `unit` is a random number in `[0, 1)` for the jitter. A
    /// server's `Retry-After` replaces the backoff and is waited exactly;
    /// one longer than `max_retry_after` gives up.
    pub fn delay(&self, err: &LlmError, retry: u32, unit: f64) -> Option<Duration> {
        if retry == 0 || retry > self.max_retries || !self.retries(err.code) {
            return None;
        }
        if let Some(ms) = err.retry_after_ms {
            let asked = Duration::from_millis(ms);
            return (asked <= self.max_retry_after).then_some(asked);
        }
        let base = self.initial_delay.as_secs_f64() * self.multiplier.max(1.0).powi(retry as i32 - 1);
        let factor = 1.0 + self.jitter.clamp(0.0, 1.0) * (2.0 * unit.clamp(0.0, 1.0) - 1.0);
        let secs = (base.min(self.max_delay.as_secs_f64()) * factor).min(self.max_delay.as_secs_f64());
        Some(Duration::from_secs_f64(secs.max(0.0)))
    }

    /// When `err` is retryable but its `Retry-After` is beyond
    /// `max_retry_after`: the time asked for (so the stop can name it).
    pub fn retry_after_too_long(&self, err: &LlmError) -> Option<Duration> {
        let asked = Duration::from_millis(err.retry_after_ms?);
        (self.retries(err.code) && asked > self.max_retry_after).then_some(asked)
    }
}

/// `asked` for a message: `90 s`, `1.5 s`, `2 h 5 min`.
pub fn describe_wait(asked: Duration) -> String {
    let secs = asked.as_secs();
    if secs >= 3600 {
        let (h, m) = (secs / 3600, secs % 3600 / 60);
        if h > 24 * 365 { "more than a year".to_string() } else { format!("{h} h {m} min") }
    } else if asked.subsec_millis() == 0 {
        format!("{secs} s")
    } else {
        format!("{:.1} s", asked.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn err(code: LlmErrorCode) -> LlmError {
        LlmError::new(code, "x")
    }

    #[test]
    fn exponential_bounded_and_jittered() {
        let p = RetryPolicy::default();
        let e = err(LlmErrorCode::Server);
        let ms = |r, u| p.delay(&e, r, u).map(|d| d.as_millis());
        assert_eq!(ms(1, 0.5), Some(500));
        assert_eq!(ms(2, 0.5), Some(1000));
        assert_eq!(ms(3, 0.5), Some(2000));
        assert_eq!(ms(5, 0.5), Some(8000));
        assert_eq!(ms(6, 0.5), None, "only 5 retries");
        assert_eq!(ms(1, 0.0), Some(450));
        assert_eq!(ms(1, 0.999_999), Some(549));
        // Capped at 10 s even with jitter.
        let p = RetryPolicy { max_retries: 10, ..RetryPolicy::default() };
        assert_eq!(p.delay(&e, 9, 0.999).unwrap(), Duration::from_secs(10));
    }

    #[test]
    fn retry_after_is_waited_exactly_up_to_the_bound_then_ends_the_retries() {
        let p = RetryPolicy::default();
        let mut e = err(LlmErrorCode::RateLimit);
        e.retry_after_ms = Some(3000);
        assert_eq!(p.delay(&e, 1, 0.0), Some(Duration::from_secs(3)));
        // Beyond max_delay (the backoff cap) but within the bound: as asked.
        e.retry_after_ms = Some(11_000);
        assert_eq!(p.delay(&e, 1, 0.999), Some(Duration::from_secs(11)));
        e.retry_after_ms = Some(60_000);
        assert_eq!(p.delay(&e, 1, 0.0), Some(Duration::from_secs(60)));
        assert_eq!(p.retry_after_too_long(&e), None);
        // Beyond the bound: no retry, and the time is there to name.
        e.retry_after_ms = Some(90_000);
        assert_eq!(p.delay(&e, 1, 0.0), None);
        assert_eq!(p.retry_after_too_long(&e), Some(Duration::from_secs(90)));
        e.retry_after_ms = Some(u64::MAX);
        assert_eq!(p.delay(&e, 1, 0.0), None);
        // Not for codes the policy would not retry anyway.
        let mut auth = err(LlmErrorCode::Auth);
        auth.retry_after_ms = Some(90_000);
        assert_eq!(p.retry_after_too_long(&auth), None);
        assert_eq!(describe_wait(Duration::from_secs(90)), "90 s");
        assert_eq!(describe_wait(Duration::from_millis(1500)), "1.5 s");
        assert_eq!(describe_wait(Duration::from_secs(7500)), "2 h 5 min");
        assert_eq!(describe_wait(Duration::from_millis(u64::MAX)), "more than a year");
    }

    #[test]
    fn which_codes() {
        let p = RetryPolicy::default();
        for c in [
            LlmErrorCode::RateLimit,
            LlmErrorCode::Server,
            LlmErrorCode::Timeout,
            LlmErrorCode::Transport,
            LlmErrorCode::StreamClosed,
            LlmErrorCode::EmptyResponse,
        ] {
            assert!(p.delay(&err(c), 1, 0.5).is_some(), "{c:?}");
        }
        for c in [
            LlmErrorCode::Auth,
            LlmErrorCode::Quota,
            LlmErrorCode::InvalidRequest,
            LlmErrorCode::ContextWindowExceeded,
            LlmErrorCode::Aborted,
            LlmErrorCode::MalformedResponse,
        ] {
            assert!(p.delay(&err(c), 1, 0.5).is_none(), "{c:?}");
        }
        assert!(RetryPolicy::none().delay(&err(LlmErrorCode::Server), 1, 0.5).is_none());
    }
}
