//! A tool's question to the user at the chat prompt
//! ([`wharf_core::question`]): its fields are asked one by one at the line
//! editor's prompt — the same input line as everything else, read by the
//! chat loop, so nothing else reads the terminal meanwhile. Each line is
//! checked against its field (type, range, length, options) and asked again
//! when it does not fit; Enter leaves an optional field empty (or takes its
//! default); `:decline` refuses the question, `:cancel` dismisses it. The
//! core checks the whole answer against the form again before the tool
//! sees it. Without a line editor (stdin or stdout not a terminal) questions
//! are declined, with a warning.

use serde_json::{Map, Value};
use wharf_core::approval::PendingQuestion;
use wharf_core::question::{Answer, Field, FieldKind, Reply};
use wharf_core::util::{cut_str, escape_line};

/// `by` of the answers typed at the prompt.
const BY: &str = "chat(user)";

/// Longest prompt shown, bytes (a field's label and options are bounded by
/// the form already; this keeps the input line usable).
const MAX_PROMPT: usize = 160;

/// A question being answered field by field.
pub(super) struct FormState {
    pending: PendingQuestion,
    /// The field asked now (`fields.len()`: the form has no fields).
    next: usize,
    values: Map<String, Value>,
}

/// What a typed line did.
pub(super) enum Step {
    /// More to answer; a warning to show first when the line did not fit.
    More(Box<FormState>, Option<String>),
    /// Answered: sent to the asker.
    Done,
}

impl FormState {
    pub(super) fn new(pending: PendingQuestion) -> Self {
        Self { pending, next: 0, values: Map::new() }
    }

    /// Whether the asker stopped waiting (the call ended, the turn was
    /// cancelled).
    pub(super) fn withdrawn(&self) -> bool {
        self.pending.reply.is_closed()
    }

    /// Who asks, for messages.
    pub(super) fn source(&self) -> String {
        escape_line(cut_str(&self.pending.question.source, 64)).into_owned()
    }

    /// The line that introduces the question (the log's `question/asked`,
    /// rendered just before, shows who asks and the message).
    pub(super) fn intro(&self) -> String {
        match self.pending.question.form.fields.len() {
            0 => "  Enter accepts · :decline refuses · :cancel dismisses".to_string(),
            n => format!(
                "  answer {n} field(s) one at a time · Enter skips an optional one · :decline refuses · :cancel dismisses"
            ),
        }
    }

    /// The help line of the field asked now, if it has a description.
    pub(super) fn help(&self) -> Option<String> {
        let f = self.pending.question.form.fields.get(self.next)?;
        let d = f.description.as_deref()?;
        Some(format!("  {}", escape_line(cut_str(d, 300))))
    }

    /// The prompt of the field asked now.
    pub(super) fn prompt(&self) -> String {
        let Some(f) = self.pending.question.form.fields.get(self.next) else {
            return "accept? (Enter) › ".into();
        };
        let mut p = format!("{} ({}", f.label(), kind_text(f));
        if f.required {
            p.push_str(", required");
        }
        if let Some(d) = &f.default {
            p.push_str(&format!(", default {d}"));
        }
        let p = escape_line(cut_str(&p, MAX_PROMPT)).into_owned();
        format!("{p}) › ")
    }

    /// Takes one typed line.
    pub(super) fn feed(mut self, line: &str) -> Step {
        match line.trim() {
            ":decline" => return self.finish(Answer::Decline),
            ":cancel" => return self.finish(Answer::Cancel),
            _ => {}
        }
        let Some(field) = self.pending.question.form.fields.get(self.next) else {
            return self.accept();
        };
        match field.parse_input(line) {
            Ok(Some(v)) => {
                self.values.insert(field.name.clone(), v);
            }
            Ok(None) => match &field.default {
                Some(d) => {
                    self.values.insert(field.name.clone(), d.clone());
                }
                None if field.required => {
                    return Step::More(Box::new(self), Some("this field is required (:decline to refuse)".into()));
                }
                None => {}
            },
            Err(e) => return Step::More(Box::new(self), Some(escape_line(cut_str(&e, 300)).into_owned())),
        }
        self.next += 1;
        if self.next < self.pending.question.form.fields.len() {
            Step::More(Box::new(self), None)
        } else {
            self.accept()
        }
    }

    fn accept(self) -> Step {
        let values = self.values.clone();
        self.finish(Answer::Accept(values))
    }

    fn finish(self, answer: Answer) -> Step {
        let _ = self.pending.reply.send(Reply { answer, by: BY.into(), note: None });
        Step::Done
    }

    /// Declines: nobody can answer any more (the input ended).
    pub(super) fn abandon(self, why: &str) {
        decline(self.pending, why);
    }
}

/// What a field takes, for its prompt.
fn kind_text(f: &Field) -> String {
    match &f.kind {
        FieldKind::String { options: Some(o), .. } => format!("one of {}", o.join(" / ")),
        FieldKind::String { format: Some(fmt), .. } => fmt.clone(),
        FieldKind::String { .. } => "text".into(),
        FieldKind::Number { minimum, maximum } => range("number", *minimum, *maximum),
        FieldKind::Integer { minimum, maximum } => range("integer", *minimum, *maximum),
        FieldKind::Boolean => "y/n".into(),
    }
}

fn range<T: std::fmt::Display>(what: &str, min: Option<T>, max: Option<T>) -> String {
    match (min, max) {
        (Some(a), Some(b)) => format!("{what} {a}–{b}"),
        (Some(a), None) => format!("{what} ≥ {a}"),
        (None, Some(b)) => format!("{what} ≤ {b}"),
        (None, None) => what.into(),
    }
}

/// Declines a question nobody can answer here (the caller shows the
/// warning; the session log records the decline and why).
pub(super) fn decline(p: PendingQuestion, why: &str) {
    let who = escape_line(cut_str(&p.question.source, 64)).into_owned();
    tracing::info!(session = %p.question.session_id, "declined {who}'s question: {why}");
    let _ = p.reply.send(Reply::decline("chat", why.to_string()));
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;
    use wharf_core::question::{Form, Question};

    fn pending() -> (PendingQuestion, tokio::sync::oneshot::Receiver<Reply>) {
        let form = Form::parse(
            "Who?",
            &json!({"type": "object", "properties": {
                "name": {"type": "string", "title": "Name"},
                "n": {"type": "integer", "minimum": 1, "maximum": 9},
                "ok": {"type": "boolean", "default": true}
            }, "required": ["name"]}),
        )
        .unwrap();
        let question = Question { session_id: "s".into(), call_id: "c".into(), source: "evil".into(), form };
        let (reply, rx) = tokio::sync::oneshot::channel();
        (PendingQuestion { question, reply }, rx)
    }

    fn more(step: Step) -> (FormState, Option<String>) {
        match step {
            Step::More(f, w) => (*f, w),
            Step::Done => panic!("answered too early"),
        }
    }

    #[test]
    fn fields_are_asked_one_by_one_and_checked() {
        let (p, mut rx) = pending();
        let f = FormState::new(p);
        assert_eq!(f.prompt(), "Name (text, required) › ");
        let (f, w) = more(f.feed(""));
        assert!(w.unwrap().contains("required"));
        let (f, w) = more(f.feed("Ada"));
        assert_eq!((w, f.prompt()), (None, "n (integer 1–9) › ".to_string()));
        let (f, w) = more(f.feed("12"));
        assert!(w.unwrap().contains("out of bounds"));
        let (f, w) = more(f.feed("x"));
        assert!(w.unwrap().contains("not an integer"));
        let (f, _) = more(f.feed("3"));
        assert_eq!(f.prompt(), "ok (y/n, default true) › ");
        assert!(matches!(f.feed(""), Step::Done));
        let reply = rx.try_recv().unwrap();
        assert_eq!(
            reply.answer,
            Answer::Accept(json!({"name": "Ada", "n": 3, "ok": true}).as_object().unwrap().clone())
        );
        assert_eq!(reply.by, "chat(user)");

        let (p, mut rx) = pending();
        let (f, _) = more(FormState::new(p).feed("Bo"));
        assert!(matches!(f.feed(" :decline "), Step::Done));
        assert_eq!(rx.try_recv().unwrap().answer, Answer::Decline);
    }
}
