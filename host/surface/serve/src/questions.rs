//! Tools' questions to the user (`wharf_core::question`) waiting for an
//! answer over HTTP: `GET /api/sessions/{id}/questions` lists them,
//! `POST /api/sessions/{id}/questions/{call}` answers one with
//! `{"action": "accept", "content": {…}}`, `{"action": "decline"}` or
//! `{"action": "cancel"}`. The session's event stream shows each as its
//! logged `question/asked` and `question/answered` events.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::oneshot;
use wharf_core::question::{Question, Reply};

struct Pending {
    question: Question,
    reply: oneshot::Sender<Reply>,
}

/// Open questions of one session, by call id.
#[derive(Default)]
pub(crate) struct Questions {
    pending: Mutex<HashMap<String, Pending>>,
    arrived: tokio::sync::Notify,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Questions {
    /// Keeps a question until it is answered or withdrawn; past `max`
    /// open questions a new one is dropped (answered `cancel`).
    pub(crate) fn put(&self, question: Question, reply: oneshot::Sender<Reply>, max: usize) {
        let mut p = lock(&self.pending);
        p.retain(|_, q| !q.reply.is_closed());
        if p.len() >= max {
            tracing::warn!(session = %question.session_id, "too many pending questions; dropping one");
            return;
        }
        // A later question of the same call replaces an earlier one (which
        // its asker has stopped waiting for).
        p.insert(question.call_id.clone(), Pending { question, reply });
        drop(p);
        self.arrived.notify_waiters();
    }

    pub(crate) fn is_empty(&self) -> bool {
        let mut p = lock(&self.pending);
        p.retain(|_, q| !q.reply.is_closed());
        p.is_empty()
    }

    /// The open questions, as JSON (`call_id`, `source`, `message`, `schema`).
    pub(crate) fn list(&self) -> Vec<Value> {
        let mut p = lock(&self.pending);
        p.retain(|_, q| !q.reply.is_closed());
        let mut out: Vec<Value> = p
            .values()
            .map(|q| {
                json!({
                    "call_id": q.question.call_id,
                    "source": q.question.source,
                    "message": q.question.form.message,
                    "schema": q.question.form.schema(),
                })
            })
            .collect();
        out.sort_by(|a, b| a["call_id"].as_str().cmp(&b["call_id"].as_str()));
        out
    }

    /// `call`'s question and its reply channel, waiting up to 2 s for it
    /// (the answer may race the question).
    pub(crate) async fn take(&self, call: &str) -> Option<(Question, oneshot::Sender<Reply>)> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        loop {
            let arrived = self.arrived.notified();
            if let Some(q) = lock(&self.pending).remove(call) {
                return Some((q.question, q.reply));
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return None;
            }
        }
    }
}
