//! What a session waits on a person for, answered over HTTP: approvals
//! (`…/approvals`) and tools' questions (`wharf_core::question`):
//! `GET /api/sessions/{id}/questions` lists them,
//! `POST /api/sessions/{id}/questions/{call}` answers one with
//! `{"action": "accept", "content": {…}}`, `{"action": "decline"}` or
//! `{"action": "cancel"}`. The session's event stream shows each as its
//! logged `question/asked` and `question/answered` events.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::oneshot;
use wharf_core::approval::{Approval, ApprovalRequest};
use wharf_core::question::{Question, Reply};

/// Open asks of one session, by call id, each with the channel its answer
/// goes back on. The pipeline logs the ask just before it asks, so an
/// answer may arrive a moment before its ask: [`Waiting::take`] waits
/// briefly for it.
pub(crate) struct Waiting<Q, R> {
    pending: Mutex<HashMap<String, (Q, oneshot::Sender<R>)>>,
    arrived: tokio::sync::Notify,
}

/// Approval questions by call id.
pub(crate) type Approvals = Waiting<ApprovalRequest, Approval>;
/// Tools' questions to the user by call id.
pub(crate) type Questions = Waiting<Question, Reply>;

impl<Q, R> Default for Waiting<Q, R> {
    fn default() -> Self {
        Self { pending: Mutex::new(HashMap::new()), arrived: tokio::sync::Notify::new() }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<Q, R> Waiting<Q, R> {
    /// Keeps an ask until it is answered or withdrawn (its asker stops
    /// waiting); a later ask of the same call replaces an earlier one.
    /// Past `max` open asks a new one is dropped, which answers it
    /// `cancelled` (bounded memory); `false` then.
    fn keep(&self, call: String, ask: Q, reply: oneshot::Sender<R>, max: usize) -> bool {
        let mut p = lock(&self.pending);
        p.retain(|_, (_, r)| !r.is_closed());
        if p.len() >= max {
            return false;
        }
        p.insert(call, (ask, reply));
        drop(p);
        self.arrived.notify_waiters();
        true
    }

    pub(crate) fn is_empty(&self) -> bool {
        let mut p = lock(&self.pending);
        p.retain(|_, (_, r)| !r.is_closed());
        p.is_empty()
    }

    /// The open asks as JSON (`show`), by call id.
    fn list_with(&self, show: impl Fn(&Q) -> Value) -> Vec<Value> {
        let mut p = lock(&self.pending);
        p.retain(|_, (_, r)| !r.is_closed());
        let mut open: Vec<(&String, Value)> = p.iter().map(|(call, (q, _))| (call, show(q))).collect();
        open.sort_by(|a, b| a.0.cmp(b.0));
        open.into_iter().map(|(_, v)| v).collect()
    }

    /// `call`'s ask and its reply channel, waiting up to 2 s for it (the
    /// answer may race the ask).
    pub(crate) async fn take(&self, call: &str) -> Option<(Q, oneshot::Sender<R>)> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        loop {
            let arrived = self.arrived.notified();
            if let Some(found) = lock(&self.pending).remove(call) {
                return Some(found);
            }
            if tokio::time::timeout_at(deadline, arrived).await.is_err() {
                return None;
            }
        }
    }
}

impl Approvals {
    /// Keeps an approval question (see [`Waiting::keep`]).
    pub(crate) fn put(&self, request: ApprovalRequest, reply: oneshot::Sender<Approval>, max: usize) {
        let session = request.session_id.clone();
        if !self.keep(request.call_id.clone(), request, reply, max) {
            tracing::warn!(session = %session, "too many pending approvals; dropping one");
        }
    }

    /// The open approval questions, as JSON.
    pub(crate) fn list(&self) -> Vec<Value> {
        self.list_with(|q| json!({"call_id": q.call_id, "tool": q.tool, "arguments": q.arguments, "reason": q.reason}))
    }
}

impl Questions {
    /// Keeps a tool's question (see [`Waiting::keep`]).
    pub(crate) fn put(&self, question: Question, reply: oneshot::Sender<Reply>, max: usize) {
        let session = question.session_id.clone();
        if !self.keep(question.call_id.clone(), question, reply, max) {
            tracing::warn!(session = %session, "too many pending questions; dropping one");
        }
    }

    /// The open questions, as JSON (`call_id`, `source`, `message`, `schema`).
    pub(crate) fn list(&self) -> Vec<Value> {
        self.list_with(|q| {
            json!({
                "call_id": q.call_id,
                "source": q.source,
                "message": q.form.message,
                "schema": q.form.schema(),
            })
        })
    }
}
