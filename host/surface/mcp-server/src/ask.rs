//! A component's question (`wharf:plugin/questions`) reaches the MCP client
//! whose `tools/call` it is running in.
//!
//! The session's approval service is a [`Router`]: approvals go to the
//! headless approver as before; a question goes to whatever the call was
//! registered with ([`Asker`]):
//!
//! - [`Asker::Elicit`]: a server→client `elicitation/create` (form mode) on
//!   the client's connection, tied to the `tools/call` it serves (over
//!   Streamable HTTP it rides that POST's event stream); the client's
//!   `ElicitResult` is the answer. Used for a client on a revision with a
//!   handshake (2025-11-25 and older) that declared `elicitation` (form);
//! - [`Asker::Channel`]: the question is handed to whoever drives the call —
//!   the `tools/call` handler of a 2026-07-28 client (multi round-trip:
//!   `input_required`, see [`crate::server`]) or a task (`tasks/update`,
//!   [`crate::tasks`]);
//! - [`Asker::Nobody`] (or a call not registered): the headless decline.
//!
//! What a client sends back is bounded and checked against the form before
//! it reaches the component ([`reply_of`]); the core checks it again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::model::{
    ClientResult, ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, GetExtensions, InputRequest,
    RequestId, ServerRequest,
};
use rmcp::service::{OriginatingRequestId, PeerRequestOptions};
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use wharf_core::approval::{Approval, ApprovalRequest, Approver};
use wharf_core::plugin::BoxFuture;
use wharf_core::question::{Answer, Form, MAX_ANSWER_BYTES, MAX_FIELDS, MAX_TEXT_BYTES, Question, Reply};

/// Who answered, in the session log.
pub(crate) const BY: &str = "mcp-client";

/// Largest answer taken from a client, bytes of JSON: every field at its
/// longest, plus room for the envelope.
pub(crate) const MAX_ANSWER_JSON: usize = MAX_FIELDS * (MAX_ANSWER_BYTES + MAX_TEXT_BYTES + 16) + 1024;

/// A question handed to whoever drives the call, with where its answer goes.
pub(crate) struct Asked {
    /// The question (bounded by [`Form::parse`]).
    pub form: Form,
    /// The answer; dropping it withdraws the question (`cancel`).
    pub reply: oneshot::Sender<Reply>,
}

/// Where the questions of one call go.
#[derive(Clone)]
pub(crate) enum Asker {
    /// Nobody: the headless decline.
    Nobody,
    /// `elicitation/create` to this peer, tied to the request `origin`.
    Elicit { peer: Peer<RoleServer>, origin: RequestId },
    /// To the driver of the call.
    Channel(mpsc::Sender<Asked>),
}

/// The session's approval service: approvals headless, questions routed by
/// the asking call's id.
pub(crate) struct Router {
    headless: Arc<dyn Approver>,
    askers: Mutex<HashMap<String, Asker>>,
}

/// Keeps a call's [`Asker`] registered; unregisters it when dropped.
pub(crate) struct Registered {
    router: Arc<Router>,
    call_id: String,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.router.lock().remove(&self.call_id);
    }
}

impl Router {
    pub(crate) fn new(headless: Arc<dyn Approver>) -> Arc<Self> {
        Arc::new(Self { headless, askers: Mutex::new(HashMap::new()) })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Asker>> {
        self.askers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Routes the questions of call `call_id` to `asker` while the guard lives.
    pub(crate) fn register(self: &Arc<Self>, call_id: &str, asker: Asker) -> Registered {
        self.lock().insert(call_id.to_string(), asker);
        Registered { router: self.clone(), call_id: call_id.to_string() }
    }
}

impl Approver for Router {
    fn decide(&self, request: ApprovalRequest, cancel: CancellationToken) -> BoxFuture<'_, Approval> {
        self.headless.decide(request, cancel)
    }

    fn ask(&self, question: Question, cancel: CancellationToken) -> BoxFuture<'_, Reply> {
        let asker = self.lock().get(&question.call_id).cloned();
        match asker {
            None | Some(Asker::Nobody) => self.headless.ask(question, cancel),
            Some(Asker::Elicit { peer, origin }) => Box::pin(elicit(peer, origin, question.form, cancel)),
            Some(Asker::Channel(driver)) => Box::pin(async move {
                let (tx, rx) = oneshot::channel();
                tokio::select! {
                    sent = driver.send(Asked { form: question.form, reply: tx }) => {
                        if sent.is_err() {
                            return Reply::cancel(BY, "the call no longer takes answers");
                        }
                    }
                    () = cancel.cancelled() => return Reply::cancel(BY, "the call was cancelled"),
                }
                tokio::select! {
                    r = rx => r.unwrap_or_else(|_| Reply::cancel(BY, "the question was withdrawn")),
                    () = cancel.cancelled() => Reply::cancel(BY, "the call was cancelled"),
                }
            }),
        }
    }
}

/// The `elicitation/create` params of a form (form mode). rmcp's typed
/// schema knows the spec's string formats only; another format (a hint) is
/// left out.
pub(crate) fn elicit_params(form: &Form) -> Result<ElicitRequestParams, String> {
    let mut schema = form.schema();
    if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        for p in props.values_mut() {
            if let Some(p) = p.as_object_mut()
                && !matches!(
                    p.get("format").and_then(Value::as_str),
                    None | Some("email" | "uri" | "date" | "date-time")
                )
            {
                p.remove("format");
            }
        }
    }
    serde_json::from_value(json!({"mode": "form", "message": form.message, "requestedSchema": schema}))
        .map_err(|e| format!("the question cannot be sent as an MCP form: {e}"))
}

/// The question as an entry of `inputRequests` (multi round-trip, tasks).
pub(crate) fn input_request(form: &Form) -> Result<InputRequest, String> {
    elicit_params(form).map(|p| InputRequest::Elicitation(ElicitRequest::new(p)))
}

/// The answer in a client's `ElicitResult` (JSON), bounded and checked
/// against the form; the error says what is wrong with it.
pub(crate) fn reply_of(v: &Value, form: &Form) -> Result<Reply, String> {
    let size = serde_json::to_vec(v).map(|b| b.len()).unwrap_or(usize::MAX);
    if size > MAX_ANSWER_JSON {
        return Err(format!("the answer is {size} bytes of JSON (at most {MAX_ANSWER_JSON})"));
    }
    let r: ElicitResult = serde_json::from_value(v.clone())
        .map_err(|e| format!("not an elicitation result ({{action, content}}): {e}"))?;
    answer_of(r, form)
}

fn answer_of(r: ElicitResult, form: &Form) -> Result<Reply, String> {
    let answer = match r.action {
        ElicitationAction::Accept => {
            let content = r.content.unwrap_or_else(|| json!({}));
            Answer::Accept(form.check(&content).map_err(|e| format!("the answer does not fit the form: {e}"))?)
        }
        ElicitationAction::Decline => Answer::Decline,
        _ => Answer::Cancel,
    };
    Ok(Reply { answer, by: BY.to_string(), note: None })
}

/// Tells the client a pending `elicitation/create` is withdrawn unless
/// disarmed (the call ended or was cancelled before the answer).
struct Withdraw(Option<(Peer<RoleServer>, RequestId)>);

impl Drop for Withdraw {
    fn drop(&mut self) {
        if let Some((peer, id)) = self.0.take()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(async move {
                let params = rmcp::model::CancelledNotificationParam::new(
                    Some(id),
                    Some("the tool call ended before an answer".to_string()),
                );
                if let Err(e) = peer.notify_cancelled(params).await {
                    tracing::debug!("cannot withdraw an elicitation: {e}");
                }
            });
        }
    }
}

/// Asks `peer` with `elicitation/create`, tied to request `origin`.
async fn elicit(peer: Peer<RoleServer>, origin: RequestId, form: Form, cancel: CancellationToken) -> Reply {
    let params = match elicit_params(&form) {
        Ok(p) => p,
        Err(e) => return Reply::decline(BY, e),
    };
    let mut request = ElicitRequest::new(params);
    request.extensions_mut().insert(OriginatingRequestId(origin));
    let mut handle = match peer
        .send_cancellable_request(ServerRequest::ElicitRequest(request), PeerRequestOptions::no_options())
        .await
    {
        Ok(h) => h,
        Err(e) => return Reply::cancel(BY, format!("cannot send elicitation/create: {e}")),
    };
    let mut withdraw = Withdraw(Some((peer, handle.id.clone())));
    let answered = tokio::select! {
        r = &mut handle.rx => r,
        () = cancel.cancelled() => return Reply::cancel(BY, "the call was cancelled"),
    };
    withdraw.0 = None;
    match answered {
        Ok(Ok(ClientResult::ElicitResult(r))) => {
            let size = serde_json::to_vec(&r).map(|b| b.len()).unwrap_or(usize::MAX);
            if size > MAX_ANSWER_JSON {
                return Reply::cancel(BY, format!("the answer is {size} bytes of JSON (at most {MAX_ANSWER_JSON})"));
            }
            answer_of(r, &form).unwrap_or_else(|e| Reply::cancel(BY, e))
        }
        Ok(Ok(_)) => Reply::cancel(BY, "the client answered elicitation/create with another kind of result"),
        Ok(Err(e)) => Reply::cancel(BY, format!("the client did not answer: {e}")),
        Err(_) => Reply::cancel(BY, "the client's connection closed"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn form() -> Form {
        Form::parse(
            "Who?",
            &json!({"type": "object", "properties": {
                "name": {"type": "string", "maxLength": 8, "format": "hostname"},
                "n": {"type": "integer", "minimum": 1}
            }, "required": ["name"]}),
        )
        .unwrap()
    }

    #[test]
    fn forms_become_elicitations_and_answers_are_checked() {
        let f = form();
        let v = serde_json::to_value(input_request(&f).unwrap()).unwrap();
        assert_eq!(v["method"], "elicitation/create", "{v}");
        assert_eq!(v["params"]["message"], "Who?", "{v}");
        assert_eq!(v["params"]["requestedSchema"]["required"], json!(["name"]), "{v}");
        assert!(v["params"]["requestedSchema"]["properties"]["name"].get("format").is_none(), "{v}");

        let ok = reply_of(&json!({"action": "accept", "content": {"name": "ada", "n": 2}}), &f).unwrap();
        assert!(matches!(&ok.answer, Answer::Accept(c) if c["name"] == "ada"), "{ok:?}");
        assert_eq!(reply_of(&json!({"action": "decline"}), &f).unwrap().answer, Answer::Decline);
        assert_eq!(reply_of(&json!({"action": "cancel"}), &f).unwrap().answer, Answer::Cancel);
        assert!(reply_of(&json!({"action": "accept", "content": {"n": 2}}), &f).unwrap_err().contains("required"));
        assert!(reply_of(&json!({"action": "accept", "content": {"name": "toolongname"}}), &f).is_err());
        assert!(reply_of(&json!({"nope": 1}), &f).is_err());
        let big = json!({"action": "accept", "content": {"name": "x".repeat(MAX_ANSWER_JSON)}});
        assert!(reply_of(&big, &f).unwrap_err().contains("bytes of JSON"));
    }
}
