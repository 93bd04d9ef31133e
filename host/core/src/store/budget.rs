//! One retry budget for all the store operations of a request.
//!
//! A backend that retries an unavailable database (PostgreSQL) gives each
//! operation a budget. A request of `wharf serve` may need several
//! operations (look the session up, list, open it …); inside
//! [`retry_scope`] they share one clock, started by the first failure, so
//! the request gives up after one budget, not one per operation.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Instant;

tokio::task_local! {
    static CLOCK: RetryClock;
}

/// The shared clock of a [`retry_scope`]. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct RetryClock {
    first_failure: Arc<Mutex<Option<Instant>>>,
}

impl RetryClock {
    /// When the scope's first retried failure happened: now, if this is it.
    /// A backend retries until this instant plus its budget.
    pub fn failing_since(&self) -> Instant {
        let mut t = self.first_failure.lock().unwrap_or_else(|e| e.into_inner());
        *t.get_or_insert_with(Instant::now)
    }

    /// Runs `fut` in this clock's scope (e.g. on another runtime, for an
    /// operation started inside a [`retry_scope`]).
    pub async fn scope<F: Future>(self, fut: F) -> F::Output {
        CLOCK.scope(self, fut).await
    }
}

/// Runs `fut` with a fresh [`RetryClock`] shared by the store operations
/// made from its task (not from tasks it spawns).
pub async fn retry_scope<F: Future>(fut: F) -> F::Output {
    CLOCK.scope(RetryClock::default(), fut).await
}

/// The clock of the [`retry_scope`] the calling task runs in, if any.
pub fn retry_clock() -> Option<RetryClock> {
    CLOCK.try_with(Clone::clone).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_clock_per_scope() {
        assert!(retry_clock().is_none());
        let (a, b) = retry_scope(async {
            let first = retry_clock().map(|c| c.failing_since());
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            (first, retry_clock().map(|c| c.failing_since()))
        })
        .await;
        assert!(a.is_some());
        assert_eq!(a, b, "the first failure starts the clock for the whole scope");
        let c = retry_scope(async { retry_clock().map(|c| c.failing_since()) }).await;
        assert_ne!(a, c, "another scope has its own clock");
    }
}
