//! Retry policy for failed model requests.
//!
//! A retry happens inside the same turn and step: the failed attempt's chunks
//! stay in the log (as `assistant/chunk`) but never become a message, and each
//! retry is logged as `llm/retry{attempt, code, delay_ms}`. The
//! `agent/request-error` waterfall can override the decision (see
//! [`crate::agent`]).

use std::time::Duration;

use crate::plugin::{LlmError, LlmErrorCode};

/// Bounded exponential backoff with jitter.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 disables retrying).
    pub max_retries: u32,
    /// Delay before the first retry.
    pub initial_delay: Duration,
    /// Upper bound of any delay, including a server's `Retry-After`.
    pub max_delay: Duration,
    /// Growth factor per retry.
    pub multiplier: f64,
    /// Relative jitter: the delay is scaled by a random factor in
    /// `[1 - jitter, 1 + jitter]` (then capped).
    pub jitter: f64,
    /// Codes worth retrying.
    pub retry_on: Vec<LlmErrorCode>,
}

impl Default for RetryPolicy {
    /// 5 retries, 500 ms doubling to 10 s, ±10 % jitter, on `RATE_LIMIT`,
    /// `SERVER`, `TIMEOUT`, `TRANSPORT`, `STREAM_CLOSED`, `EMPTY_RESPONSE`
    /// (never `AUTH`, `QUOTA`, `INVALID_REQUEST` …).
    fn default() -> Self {
        Self {
            max_retries: 5,
            initial_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(10),
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
    /// server's `Retry-After` replaces the backoff, capped at `max_delay`.
    pub fn delay(&self, err: &LlmError, retry: u32, unit: f64) -> Option<Duration> {
        if retry == 0 || retry > self.max_retries || !self.retries(err.code) {
            return None;
        }
        if let Some(ms) = err.retry_after_ms {
            return Some(Duration::from_millis(ms).min(self.max_delay));
        }
        let base = self.initial_delay.as_secs_f64() * self.multiplier.max(1.0).powi(retry as i32 - 1);
        let factor = 1.0 + self.jitter.clamp(0.0, 1.0) * (2.0 * unit.clamp(0.0, 1.0) - 1.0);
        let secs = (base.min(self.max_delay.as_secs_f64()) * factor).min(self.max_delay.as_secs_f64());
        Some(Duration::from_secs_f64(secs.max(0.0)))
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
    fn retry_after_honoured_up_to_the_cap() {
        let p = RetryPolicy::default();
        let mut e = err(LlmErrorCode::RateLimit);
        e.retry_after_ms = Some(3000);
        assert_eq!(p.delay(&e, 1, 0.0), Some(Duration::from_secs(3)));
        e.retry_after_ms = Some(60_000);
        assert_eq!(p.delay(&e, 1, 0.0), Some(Duration::from_secs(10)));
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
