//! Questions to the user: structured input a tool asks for while it runs
//! (an MCP server's `elicitation/create`, form mode; a component's
//! `questions` import).
//!
//! A [`Form`] is a message and a flat list of primitive fields (string,
//! number, integer, boolean; a string may offer fixed options), parsed from
//! an untrusted JSON Schema by [`Form::parse`] within fixed bounds
//! ([`MAX_MESSAGE_BYTES`], [`MAX_FIELDS`], [`MAX_SCHEMA_BYTES`], …). A call
//! asks through its session services
//! ([`crate::plugin::SessionServices::ask_user`]); the session's approval
//! service answers ([`crate::approval::Approver::ask`]): a surface shows the
//! question, the headless one declines. The answer is [`Answer::Accept`]
//! with content checked against the form ([`Form::check`]),
//! [`Answer::Decline`] or [`Answer::Cancel`] (also when the turn is
//! cancelled or the call ends first).
//!
//! Both ends are logged as ignorable events (older readers skip them):
//! [`ASKED_EVENT`] `{call_id, source, message, schema}` and
//! [`ANSWERED_EVENT`] `{call_id, action, content?, by, note?}`.

use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::util;

/// `question/asked` (ignorable).
pub const ASKED_EVENT: &str = "question/asked";
/// `question/answered` (ignorable).
pub const ANSWERED_EVENT: &str = "question/answered";

/// Longest message shown to the user, bytes.
pub const MAX_MESSAGE_BYTES: usize = 4096;
/// Most fields of one form.
pub const MAX_FIELDS: usize = 16;
/// Largest schema accepted, bytes of JSON text.
pub const MAX_SCHEMA_BYTES: usize = 16 << 10;
/// Longest field name, title or description, bytes.
pub const MAX_TEXT_BYTES: usize = 512;
/// Most options of one string field.
pub const MAX_OPTIONS: usize = 64;
/// Longest string in an answer, bytes.
pub const MAX_ANSWER_BYTES: usize = 4096;

/// Why a form was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FormError(pub String);

/// The type of a field and its constraints.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FieldKind {
    /// Text, optionally one of fixed `options`.
    String {
        /// Least length in characters.
        #[serde(rename = "minLength", skip_serializing_if = "Option::is_none")]
        min_length: Option<u32>,
        /// Greatest length in characters (at most [`MAX_ANSWER_BYTES`] bytes anyway).
        #[serde(rename = "maxLength", skip_serializing_if = "Option::is_none")]
        max_length: Option<u32>,
        /// `email`, `uri`, `date` or `date-time` (shown as a hint; `email` is checked loosely).
        #[serde(skip_serializing_if = "Option::is_none")]
        format: Option<String>,
        /// The allowed values, when fixed.
        #[serde(rename = "enum", skip_serializing_if = "Option::is_none")]
        options: Option<Vec<String>>,
    },
    /// A number.
    Number {
        /// Least value.
        #[serde(skip_serializing_if = "Option::is_none")]
        minimum: Option<f64>,
        /// Greatest value.
        #[serde(skip_serializing_if = "Option::is_none")]
        maximum: Option<f64>,
    },
    /// A whole number.
    Integer {
        /// Least value.
        #[serde(skip_serializing_if = "Option::is_none")]
        minimum: Option<i64>,
        /// Greatest value.
        #[serde(skip_serializing_if = "Option::is_none")]
        maximum: Option<i64>,
    },
    /// Yes or no.
    Boolean,
}

/// One field of a form.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Field {
    /// The key in the answer.
    pub name: String,
    /// A label.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Help text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether an accepted answer must hold it.
    pub required: bool,
    /// The type and its constraints.
    #[serde(flatten)]
    pub kind: FieldKind,
    /// The suggested value (already valid for the field).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
}

/// A bounded question: a message and flat primitive fields.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Form {
    /// What the asker wants to know (at most [`MAX_MESSAGE_BYTES`]).
    pub message: String,
    /// The fields, in the schema's order.
    pub fields: Vec<Field>,
}

/// A question as the approval service sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    /// Session id.
    pub session_id: String,
    /// The tool call that asks.
    pub call_id: String,
    /// Who asks (`mcp:SERVER`, a plugin id).
    pub source: String,
    /// What is asked.
    pub form: Form,
}

/// The user's answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The values, checked against the form.
    Accept(Map<String, Value>),
    /// The user said no (the tool may go on without).
    Decline,
    /// Nobody answered: withdrawn, cancelled, timed out.
    Cancel,
}

impl Answer {
    /// `accept`, `decline` or `cancel`.
    pub fn action(&self) -> &'static str {
        match self {
            Self::Accept(_) => "accept",
            Self::Decline => "decline",
            Self::Cancel => "cancel",
        }
    }
}

/// An answer and who gave it.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The answer.
    pub answer: Answer,
    /// Who answered (`headless`, a surface name, `user`).
    pub by: String,
    /// Why, when it was not the user's choice.
    pub note: Option<String>,
}

impl Reply {
    /// A decline by `by`, saying why.
    pub fn decline(by: &str, note: impl Into<String>) -> Self {
        Self { answer: Answer::Decline, by: by.to_string(), note: Some(note.into()) }
    }

    /// A cancel by `by`, saying why.
    pub fn cancel(by: &str, note: impl Into<String>) -> Self {
        Self { answer: Answer::Cancel, by: by.to_string(), note: Some(note.into()) }
    }
}

fn text_of(v: Option<&Value>, what: &str) -> Result<Option<String>, FormError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.len() <= MAX_TEXT_BYTES => Ok(Some(s.clone())),
        Some(Value::String(_)) => Err(FormError(format!("{what} is longer than {MAX_TEXT_BYTES} bytes"))),
        Some(_) => Err(FormError(format!("{what} is not a string"))),
    }
}

impl Form {
    /// Parses a message and a requested schema (`{"type": "object",
    /// "properties": {…}, "required": […]}`), refusing anything outside the
    /// bounds or not a flat object of primitive fields.
    pub fn parse(message: &str, schema: &Value) -> Result<Self, FormError> {
        if message.len() > MAX_MESSAGE_BYTES {
            return Err(FormError(format!("the message is {} bytes (at most {MAX_MESSAGE_BYTES})", message.len())));
        }
        let size = serde_json::to_vec(schema).map(|v| v.len()).unwrap_or(usize::MAX);
        if size > MAX_SCHEMA_BYTES {
            return Err(FormError(format!("the schema is {size} bytes of JSON (at most {MAX_SCHEMA_BYTES})")));
        }
        let obj = schema.as_object().ok_or_else(|| FormError("the schema is not an object".into()))?;
        if obj.get("type").is_some_and(|t| t.as_str() != Some("object")) {
            return Err(FormError("the schema's type is not `object`".into()));
        }
        let empty = Map::new();
        let props = match obj.get("properties") {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(p)) => p,
            Some(_) => return Err(FormError("`properties` is not an object".into())),
        };
        if props.len() > MAX_FIELDS {
            return Err(FormError(format!("the form has {} fields (at most {MAX_FIELDS})", props.len())));
        }
        let required: Vec<&str> = match obj.get("required") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(r)) => r.iter().filter_map(Value::as_str).collect(),
            Some(_) => return Err(FormError("`required` is not an array".into())),
        };
        if let Some(missing) = required.iter().find(|r| !props.contains_key(**r)) {
            return Err(FormError(format!("required field `{}` is not defined", util::cut_str(missing, 64))));
        }
        let mut fields = Vec::with_capacity(props.len());
        for (name, p) in props {
            if name.is_empty() || name.len() > MAX_TEXT_BYTES || name.chars().any(char::is_control) {
                return Err(FormError("a field name is empty, too long or has control characters".into()));
            }
            let field = Self::field(name, p, required.contains(&name.as_str()))
                .map_err(|e| FormError(format!("field `{}`: {}", util::escape_line(util::cut_str(name, 64)), e.0)))?;
            fields.push(field);
        }
        Ok(Self { message: message.to_string(), fields })
    }

    fn field(name: &str, p: &Value, required: bool) -> Result<Field, FormError> {
        let p = p.as_object().ok_or_else(|| FormError("not an object".into()))?;
        let title = text_of(p.get("title"), "the title")?;
        let description = text_of(p.get("description"), "the description")?;
        let u32_of = |k: &str| p.get(k).and_then(Value::as_u64).map(|n| n.min(u64::from(u32::MAX)) as u32);
        let kind = match p.get("type").and_then(Value::as_str) {
            Some("string") => {
                let mut options: Option<Vec<String>> = None;
                if let Some(e) = p.get("enum") {
                    let e = e.as_array().ok_or_else(|| FormError("`enum` is not an array".into()))?;
                    options = Some(e.iter().filter_map(Value::as_str).map(str::to_string).collect());
                } else if let Some(o) = p.get("oneOf") {
                    let o = o.as_array().ok_or_else(|| FormError("`oneOf` is not an array".into()))?;
                    options = Some(o.iter().filter_map(|c| c.get("const")?.as_str()).map(str::to_string).collect());
                }
                if let Some(o) = &options
                    && (o.is_empty() || o.len() > MAX_OPTIONS || o.iter().any(|s| s.len() > MAX_TEXT_BYTES))
                {
                    return Err(FormError(format!(
                        "between 1 and {MAX_OPTIONS} options of at most {MAX_TEXT_BYTES} bytes"
                    )));
                }
                let format = text_of(p.get("format"), "the format")?;
                FieldKind::String { min_length: u32_of("minLength"), max_length: u32_of("maxLength"), format, options }
            }
            Some("number") => FieldKind::Number {
                minimum: p.get("minimum").and_then(Value::as_f64),
                maximum: p.get("maximum").and_then(Value::as_f64),
            },
            Some("integer") => FieldKind::Integer {
                minimum: p.get("minimum").and_then(Value::as_i64),
                maximum: p.get("maximum").and_then(Value::as_i64),
            },
            Some("boolean") => FieldKind::Boolean,
            Some(other) => {
                return Err(FormError(format!(
                    "type `{}` is not a primitive (string, number, integer, boolean)",
                    util::escape_line(util::cut_str(other, 32))
                )));
            }
            None => return Err(FormError("no `type`".into())),
        };
        let mut field = Field { name: name.to_string(), title, description, required, kind, default: None };
        // A default that does not fit the field is dropped, not trusted.
        field.default = p.get("default").and_then(|d| field.check(d).ok());
        Ok(field)
    }

    /// The form as a clean JSON Schema (what surfaces send on).
    pub fn schema(&self) -> Value {
        let mut props = Map::new();
        for f in &self.fields {
            let mut v = serde_json::to_value(f).unwrap_or(Value::Null);
            if let Some(o) = v.as_object_mut() {
                o.remove("name");
                o.remove("required");
            }
            props.insert(f.name.clone(), v);
        }
        let required: Vec<&str> = self.fields.iter().filter(|f| f.required).map(|f| f.name.as_str()).collect();
        json!({"type": "object", "properties": props, "required": required})
    }

    /// Checks an accepted answer: an object holding every required field,
    /// only known fields, each of its type and within its constraints.
    pub fn check(&self, content: &Value) -> Result<Map<String, Value>, String> {
        let obj = content.as_object().ok_or("the answer is not an object")?;
        if let Some(k) = obj.keys().find(|k| !self.fields.iter().any(|f| &f.name == *k)) {
            return Err(format!("unknown field `{}`", util::escape_line(util::cut_str(k, 64))));
        }
        let mut out = Map::new();
        for f in &self.fields {
            match obj.get(&f.name) {
                None | Some(Value::Null) if f.required => return Err(format!("`{}` is required", f.name)),
                None | Some(Value::Null) => {}
                Some(v) => {
                    out.insert(f.name.clone(), f.check(v).map_err(|e| format!("`{}`: {e}", f.name))?);
                }
            }
        }
        Ok(out)
    }
}

impl Field {
    /// A label for prompts: the title, else the name.
    pub fn label(&self) -> &str {
        self.title.as_deref().unwrap_or(&self.name)
    }

    /// Checks one value (numbers given as whole floats are made integers).
    pub fn check(&self, v: &Value) -> Result<Value, String> {
        match &self.kind {
            FieldKind::String { min_length, max_length, format, options } => {
                let s = v.as_str().ok_or("not a string")?;
                if s.len() > MAX_ANSWER_BYTES {
                    return Err(format!("longer than {MAX_ANSWER_BYTES} bytes"));
                }
                let n = s.chars().count();
                if min_length.is_some_and(|m| n < m as usize) || max_length.is_some_and(|m| n > m as usize) {
                    return Err(format!("length {n} is out of bounds"));
                }
                if let Some(o) = options
                    && !o.iter().any(|x| x == s)
                {
                    return Err(format!("not one of {}", o.join(", ")));
                }
                if format.as_deref() == Some("email") && !s.contains('@') {
                    return Err("not an email address".into());
                }
                Ok(v.clone())
            }
            FieldKind::Number { minimum, maximum } => {
                let x = v.as_f64().ok_or("not a number")?;
                if minimum.is_some_and(|m| x < m) || maximum.is_some_and(|m| x > m) {
                    return Err(format!("{x} is out of bounds"));
                }
                Ok(v.clone())
            }
            FieldKind::Integer { minimum, maximum } => {
                let x = match v.as_i64() {
                    Some(x) => x,
                    None => match v.as_f64() {
                        Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => f as i64,
                        _ => return Err("not an integer".into()),
                    },
                };
                if minimum.is_some_and(|m| x < m) || maximum.is_some_and(|m| x > m) {
                    return Err(format!("{x} is out of bounds"));
                }
                Ok(Value::from(x))
            }
            FieldKind::Boolean => v.as_bool().map(Value::Bool).ok_or_else(|| "not true or false".into()),
        }
    }

    /// A typed value from what a user typed (`yes`/`no` for booleans);
    /// `None` for an empty line.
    pub fn parse_input(&self, text: &str) -> Result<Option<Value>, String> {
        let t = text.trim();
        if t.is_empty() {
            return Ok(None);
        }
        let v = match &self.kind {
            FieldKind::String { .. } => Value::String(t.to_string()),
            FieldKind::Number { .. } => {
                Value::from(t.parse::<f64>().map_err(|_| format!("`{}` is not a number", util::cut_str(t, 32)))?)
            }
            FieldKind::Integer { .. } => {
                Value::from(t.parse::<i64>().map_err(|_| format!("`{}` is not an integer", util::cut_str(t, 32)))?)
            }
            FieldKind::Boolean => match t.to_ascii_lowercase().as_str() {
                "y" | "yes" | "true" | "1" => Value::Bool(true),
                "n" | "no" | "false" | "0" => Value::Bool(false),
                _ => return Err("answer yes or no".into()),
            },
        };
        self.check(&v).map(Some)
    }
}

/// The data of a [`ASKED_EVENT`].
pub fn asked_data(q: &Question) -> Value {
    json!({"call_id": q.call_id, "source": q.source, "message": q.form.message, "schema": q.form.schema()})
}

/// The data of an [`ANSWERED_EVENT`].
pub fn answered_data(call_id: &str, reply: &Reply) -> Value {
    let mut v = json!({"call_id": call_id, "action": reply.answer.action(), "by": reply.by});
    if let Answer::Accept(c) = &reply.answer {
        v["content"] = Value::Object(c.clone());
    }
    if let Some(n) = &reply.note {
        v["note"] = Value::String(util::cut_str(n, 1024).to_string());
    }
    v
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn form() -> Form {
        Form::parse(
            "Who?",
            &json!({"type": "object", "properties": {
                "name": {"type": "string", "title": "Name", "maxLength": 5},
                "n": {"type": "integer", "minimum": 1, "default": 0},
                "ok": {"type": "boolean", "default": true},
                "c": {"type": "string", "enum": ["a", "b"]}
            }, "required": ["name"]}),
        )
        .unwrap()
    }

    #[test]
    fn forms_are_bounded_flat_and_answers_checked() {
        let f = form();
        assert_eq!(f.fields.len(), 4);
        assert_eq!(f.fields.iter().find(|x| x.name == "n").unwrap().default, None, "an invalid default is dropped");
        assert_eq!(f.fields.iter().find(|x| x.name == "ok").unwrap().default, Some(json!(true)));
        assert_eq!(f.schema()["required"], json!(["name"]));
        assert_eq!(f.schema()["properties"]["c"]["enum"], json!(["a", "b"]));
        let ok = f.check(&json!({"name": "ada", "n": 2.0, "c": "a"})).unwrap();
        assert_eq!(ok["n"], json!(2));
        assert!(f.check(&json!({"n": 2})).unwrap_err().contains("required"));
        assert!(f.check(&json!({"name": "toolong"})).is_err());
        assert!(f.check(&json!({"name": "a", "x": 1})).unwrap_err().contains("unknown"));
        assert!(f.check(&json!({"name": "a", "c": "z"})).is_err());
        assert!(f.check(&json!({"name": "a", "n": 0})).is_err());
        let ok = f.fields.iter().find(|x| x.name == "ok").unwrap();
        assert_eq!(ok.parse_input(" yes ").unwrap(), Some(json!(true)));
        assert!(ok.parse_input("maybe").is_err());

        let many: Map<String, Value> = (0..=MAX_FIELDS).map(|i| (format!("f{i}"), json!({"type": "string"}))).collect();
        assert!(Form::parse("m", &json!({"properties": many})).unwrap_err().0.contains("fields"));
        assert!(Form::parse(&"x".repeat(MAX_MESSAGE_BYTES + 1), &json!({})).is_err());
        let nested = json!({"properties": {"o": {"type": "object"}}});
        assert!(Form::parse("m", &nested).unwrap_err().0.contains("primitive"));
        assert!(Form::parse("m", &json!({"properties": {}, "required": ["gone"]})).is_err());
    }
}
