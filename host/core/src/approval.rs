//! The approval service: who answers a policy's `ask`.
//!
//! The pipeline logs `approval/asked`, awaits [`Approver::decide`] (racing the
//! turn's cancellation, which resolves to [`ApprovalOutcome::Cancelled`]) and
//! logs `approval/decided`. `allowed-for-session` is remembered by the agent:
//! later asks for the same tool in the session are answered without asking
//! (logged with `by: "session-grant"`).
//!
//! - [`HeadlessApprover`]: for `wharf run`; never waits, answers by a
//!   configured rule (default deny) and says so in the logged note.
//! - [`ChannelApprover`]: for interactive surfaces; forwards each question
//!   over a channel and awaits the reply.
//!
//! The same service answers a tool's questions to the user
//! ([`Approver::ask`], [`crate::question`]): by default it declines (a
//! surface that cannot show forms); [`ChannelApprover::with_questions`]
//! forwards them to the surface, and the headless approver declines saying
//! nobody can answer.

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::events::ApprovalOutcome;
use crate::plugin::BoxFuture;
use crate::question::{Question, Reply};

/// A question for the approval service.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRequest {
    /// Session id.
    pub session_id: String,
    /// The call concerned.
    pub call_id: String,
    /// Tool name.
    pub tool: String,
    /// The arguments that would run (after policy rewrites).
    pub arguments: Value,
    /// Why the policies ask.
    pub reason: String,
}

/// The answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    /// The outcome.
    pub outcome: ApprovalOutcome,
    /// Who answered.
    pub by: String,
    /// Explanation, if any.
    pub note: Option<String>,
}

/// Answers `ask` decisions.
pub trait Approver: Send + Sync {
    /// Decides on one call. Should return promptly with
    /// [`ApprovalOutcome::Cancelled`] when `cancel` fires (the pipeline also
    /// stops waiting then).
    fn decide(&self, request: ApprovalRequest, cancel: CancellationToken) -> BoxFuture<'_, Approval>;

    /// Asks the user a tool's question ([`crate::question`]). Should return
    /// [`crate::question::Answer::Cancel`] promptly when `cancel` fires (the
    /// caller also stops waiting then). The default declines: the surface
    /// cannot show questions.
    fn ask(&self, question: Question, cancel: CancellationToken) -> BoxFuture<'_, Reply> {
        let _ = (question, cancel);
        Box::pin(async { Reply::decline("surface", "this surface cannot ask the user questions") })
    }
}

/// What a headless run answers to `ask`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HeadlessRule {
    /// Reject (the default).
    #[default]
    Deny,
    /// Allow once.
    Allow,
}

/// Answers every question immediately by a fixed rule.
#[derive(Debug, Clone, Default)]
pub struct HeadlessApprover {
    /// The rule.
    pub rule: HeadlessRule,
}

impl HeadlessApprover {
    /// An approver with the given rule.
    pub fn new(rule: HeadlessRule) -> Self {
        Self { rule }
    }
}

impl Approver for HeadlessApprover {
    fn decide(&self, request: ApprovalRequest, _cancel: CancellationToken) -> BoxFuture<'_, Approval> {
        let (outcome, name) = match self.rule {
            HeadlessRule::Deny => (ApprovalOutcome::Rejected, "deny"),
            HeadlessRule::Allow => (ApprovalOutcome::AllowedOnce, "allow"),
        };
        let note = format!(
            "headless mode: nobody can answer approval questions, so `{}` was resolved by the configured rule `{name}`",
            request.tool
        );
        Box::pin(async move { Approval { outcome, by: format!("headless(rule={name})"), note: Some(note) } })
    }

    fn ask(&self, question: Question, _cancel: CancellationToken) -> BoxFuture<'_, Reply> {
        let note = format!(
            "headless mode: nobody can answer `{}`'s question, so it was declined",
            crate::util::escape_line(crate::util::cut_str(&question.source, 64))
        );
        tracing::warn!(session = %question.session_id, call = %question.call_id, "{note}");
        Box::pin(async move { Reply::decline("headless", note) })
    }
}

/// A question waiting for a surface's answer.
#[derive(Debug)]
pub struct PendingApproval {
    /// The question.
    pub request: ApprovalRequest,
    /// Where to send the answer. Dropping it answers `cancelled`.
    pub reply: oneshot::Sender<Approval>,
}

/// A tool's question waiting for a surface's answer.
#[derive(Debug)]
pub struct PendingQuestion {
    /// The question.
    pub question: Question,
    /// Where to send the answer. Dropping it answers `cancel`.
    pub reply: oneshot::Sender<Reply>,
}

/// Forwards questions to a surface over a channel.
#[derive(Debug, Clone)]
pub struct ChannelApprover {
    tx: mpsc::UnboundedSender<PendingApproval>,
    /// Where tools' questions go; `None`: they are declined.
    questions: Option<mpsc::UnboundedSender<PendingQuestion>>,
}

impl ChannelApprover {
    /// The approver and the receiving end for the surface; tools'
    /// questions are declined.
    pub fn new() -> (Self, mpsc::UnboundedReceiver<PendingApproval>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Self { tx, questions: None }, rx)
    }

    /// Like [`new`](Self::new), and tools' questions go to the second receiver.
    pub fn with_questions() -> (Self, mpsc::UnboundedReceiver<PendingApproval>, mpsc::UnboundedReceiver<PendingQuestion>)
    {
        let (tx, rx) = mpsc::unbounded_channel();
        let (qtx, qrx) = mpsc::unbounded_channel();
        (Self { tx, questions: Some(qtx) }, rx, qrx)
    }
}

impl Approver for ChannelApprover {
    fn decide(&self, request: ApprovalRequest, cancel: CancellationToken) -> BoxFuture<'_, Approval> {
        let cancelled = |note: &str| Approval {
            outcome: ApprovalOutcome::Cancelled,
            by: "surface".into(),
            note: Some(note.to_string()),
        };
        let (reply, rx) = oneshot::channel();
        let sent = self.tx.send(PendingApproval { request, reply }).is_ok();
        Box::pin(async move {
            if !sent {
                return cancelled("no surface is listening for approval questions");
            }
            tokio::select! {
                r = rx => r.unwrap_or_else(|_| cancelled("the surface dropped the question")),
                _ = cancel.cancelled() => cancelled("the turn was cancelled"),
            }
        })
    }

    fn ask(&self, question: Question, cancel: CancellationToken) -> BoxFuture<'_, Reply> {
        let Some(tx) = &self.questions else {
            return Box::pin(async { Reply::decline("surface", "this surface cannot ask the user questions") });
        };
        let (reply, rx) = oneshot::channel();
        let sent = tx.send(PendingQuestion { question, reply }).is_ok();
        Box::pin(async move {
            if !sent {
                return Reply::cancel("surface", "no surface is listening for questions");
            }
            tokio::select! {
                r = rx => r.unwrap_or_else(|_| Reply::cancel("surface", "the surface dropped the question")),
                _ = cancel.cancelled() => Reply::cancel("surface", "the question was withdrawn"),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn req() -> ApprovalRequest {
        ApprovalRequest {
            session_id: "s".into(),
            call_id: "c".into(),
            tool: "shell".into(),
            arguments: Value::Null,
            reason: "r".into(),
        }
    }

    #[tokio::test]
    async fn headless_answers_by_rule_and_says_so() {
        let a = HeadlessApprover::default().decide(req(), CancellationToken::new()).await;
        assert_eq!(a.outcome, ApprovalOutcome::Rejected);
        assert_eq!(a.by, "headless(rule=deny)");
        assert!(a.note.unwrap().contains("configured rule `deny`"));
        let a = HeadlessApprover::new(HeadlessRule::Allow).decide(req(), CancellationToken::new()).await;
        assert_eq!(a.outcome, ApprovalOutcome::AllowedOnce);
    }

    #[tokio::test]
    async fn channel_approver_round_trip_and_cancel() {
        let (ap, mut rx) = ChannelApprover::new();
        let task = tokio::spawn({
            let ap = ap.clone();
            async move { ap.decide(req(), CancellationToken::new()).await }
        });
        let p = rx.recv().await.unwrap();
        assert_eq!(p.request.tool, "shell");
        p.reply.send(Approval { outcome: ApprovalOutcome::AllowedForSession, by: "user".into(), note: None }).unwrap();
        assert_eq!(task.await.unwrap().outcome, ApprovalOutcome::AllowedForSession);

        let token = CancellationToken::new();
        token.cancel();
        let a = ap.decide(req(), token).await;
        assert_eq!(a.outcome, ApprovalOutcome::Cancelled);
        drop(rx);
        let a = ap.decide(req(), CancellationToken::new()).await;
        assert_eq!(a.outcome, ApprovalOutcome::Cancelled);
    }
}
