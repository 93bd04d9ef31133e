//! A tool's question to the user in the terminal ([`wharf_core::question`]):
//! the message, then one prompt per field; `:decline` or `:cancel` at any
//! prompt ends it so, an empty line keeps an optional field empty (or its
//! default). Without an interactive stdin the question is declined.

use serde_json::{Map, Value};
use wharf_core::approval::PendingQuestion;
use wharf_core::question::{Answer, FieldKind, Reply};

/// `by` of the chat's answers.
const BY: &str = "chat(user)";

/// A question being answered field by field.
pub(super) struct FormState {
    pending: PendingQuestion,
    next: usize,
    values: Map<String, Value>,
}

/// What a line did to the form.
pub(super) enum Step {
    /// More to answer; a warning to show first, if the line was refused.
    More(Box<FormState>, Option<String>),
    /// Answered (sent).
    Done,
}

impl FormState {
    pub(super) fn new(pending: PendingQuestion) -> Self {
        Self { pending, next: 0, values: Map::new() }
    }

    /// Whether the asker stopped waiting.
    pub(super) fn withdrawn(&self) -> bool {
        self.pending.reply.is_closed()
    }

    /// The lines that introduce the question.
    pub(super) fn intro(&self) -> Vec<String> {
        let q = &self.pending.question;
        let mut lines = vec![format!("? {} asks: {}", q.source, q.form.message)];
        lines.push("  answer each field (Enter leaves an optional one empty); :decline or :cancel to refuse".into());
        lines.into_iter().map(|l| wharf_core::util::escape_line(&l).into_owned()).collect()
    }

    /// The prompt of the current field (`None` once every field is answered).
    pub(super) fn prompt(&self) -> Option<String> {
        let Some(f) = self.pending.question.form.fields.get(self.next) else {
            return self.pending.question.form.fields.is_empty().then(|| "  (Enter accepts) › ".to_string());
        };
        let kind = match &f.kind {
            FieldKind::String { options: Some(o), .. } => format!("one of {}", o.join("/")),
            FieldKind::String { format: Some(fmt), .. } => fmt.clone(),
            FieldKind::String { .. } => "text".into(),
            FieldKind::Number { .. } => "number".into(),
            FieldKind::Integer { .. } => "integer".into(),
            FieldKind::Boolean => "y/n".into(),
        };
        let mut p = format!("  {} ({kind}", f.label());
        if f.required {
            p.push_str(", required");
        }
        if let Some(d) = &f.default {
            p.push_str(&format!(", default {d}"));
        }
        p.push_str(") › ");
        Some(wharf_core::util::escape_line(wharf_core::util::cut_str(&p, 300)).into_owned())
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
            Ok(None) if field.default.is_some() => {
                self.values.insert(field.name.clone(), field.default.clone().unwrap_or(Value::Null));
            }
            Ok(None) if field.required => return Step::More(Box::new(self), Some("this field is required".into())),
            Ok(None) => {}
            Err(e) => return Step::More(Box::new(self), Some(e)),
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
}

/// Declines a question nobody can answer here (no interactive input),
/// saying so in the log.
pub(super) fn decline_unanswerable(p: PendingQuestion, why: &str) {
    tracing::warn!(
        session = %p.question.session_id,
        "declined {}'s question: {why}",
        wharf_core::util::escape_line(wharf_core::util::cut_str(&p.question.source, 64))
    );
    let _ = p.reply.send(Reply::decline(BY, format!("the chat cannot ask: {why}")));
}
