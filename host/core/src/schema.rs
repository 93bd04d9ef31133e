//! A small JSON Schema validator for tool arguments.
//!
//! Supports the subset tool schemas use: `type` (a name or an array of names,
//! `integer` included), `enum`, `const`, `properties`, `required`,
//! `additionalProperties` (bool or schema), `minProperties`/`maxProperties`,
//! `items` (schema, or an array = tuple form), `prefixItems`,
//! `minItems`/`maxItems`, `uniqueItems`, `minimum`/`maximum`,
//! `exclusiveMinimum`/`exclusiveMaximum` (numeric form), `multipleOf`,
//! `minLength`/`maxLength` (in characters), `allOf`/`anyOf`/`oneOf`/`not`,
//! `if`/`then`/`else`, boolean schemas and local `$ref` (`#/…`).
//!
//! Not enforced (accepted silently): `pattern`, `patternProperties`, `format`
//! and anything else unknown. When `patternProperties` is present,
//! `additionalProperties` is not enforced either (we cannot tell which keys the
//! patterns would match), erring on the side of running the tool.
//!
//! Errors name the JSON Pointer of the offending value:
//! `/path: expected string, got number` (the root is shown as `/`).

use std::cell::Cell;

use serde_json::{Map, Value};

const MAX_ERRORS: usize = 20;
const MAX_DEPTH: usize = 64;
/// Sub-schema checks per validation. Branching keywords over a recursive
/// `$ref` (`anyOf: [{$ref: "#"}, {$ref: "#"}]`) are otherwise exponential in
/// `MAX_DEPTH`: a plugin's schema could hang the host (found by fuzzing).
const MAX_STEPS: usize = 100_000;

/// One validation failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaError {
    /// JSON Pointer to the value ("" for the root).
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for SchemaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let path = if self.path.is_empty() { "/" } else { &self.path };
        write!(f, "{path}: {}", self.message)
    }
}

/// All failures of one validation (at most 20), joined by `; ` when displayed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", join(.0))]
pub struct SchemaErrors(pub Vec<SchemaError>);

fn join(errs: &[SchemaError]) -> String {
    errs.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

/// Validates `instance` against `schema`. A schema too costly to check
/// (over 100 000 sub-schema checks) fails validation with one error.
pub fn validate(schema: &Value, instance: &Value) -> Result<(), SchemaErrors> {
    let steps = Cell::new(0);
    let mut v = Validator { root: schema, errors: Vec::new(), steps: &steps };
    v.check(schema, instance, "", 0);
    if steps.get() > MAX_STEPS {
        // Whatever the branches concluded after the budget ran out is moot.
        let message = format!("schema too complex to check (over {MAX_STEPS} steps; recursive $ref?)");
        return Err(SchemaErrors(vec![SchemaError { path: String::new(), message }]));
    }
    if v.errors.is_empty() { Ok(()) } else { Err(SchemaErrors(v.errors)) }
}

struct Validator<'a> {
    root: &'a Value,
    errors: Vec<SchemaError>,
    /// Checks so far, shared with every probe of this validation.
    steps: &'a Cell<usize>,
}

fn type_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn is_integer(v: &Value) -> bool {
    match v {
        Value::Number(n) => n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0),
        _ => false,
    }
}

fn has_type(v: &Value, name: &str) -> bool {
    match name {
        "integer" => is_integer(v),
        "number" => v.is_number(),
        other => type_of(v) == other,
    }
}

/// JSON equality where numbers compare by value (`1 == 1.0`).
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 40 { format!("{}…", s.chars().take(40).collect::<String>()) } else { s }
}

impl<'a> Validator<'a> {
    fn err(&mut self, path: &str, message: String) {
        if self.errors.len() < MAX_ERRORS {
            self.errors.push(SchemaError { path: path.to_string(), message });
        }
    }

    /// Runs `check` in isolation and returns its errors.
    fn probe(&self, schema: &Value, inst: &Value, path: &str, depth: usize) -> Vec<SchemaError> {
        let mut sub = Validator { root: self.root, errors: Vec::new(), steps: self.steps };
        sub.check(schema, inst, path, depth);
        sub.errors
    }

    fn check(&mut self, schema: &Value, inst: &Value, path: &str, depth: usize) {
        self.steps.set(self.steps.get() + 1);
        if self.steps.get() > MAX_STEPS {
            return;
        }
        if depth > MAX_DEPTH {
            self.err(path, "schema nesting too deep (recursive $ref?)".into());
            return;
        }
        let s: &Map<String, Value> = match schema {
            Value::Bool(true) => return,
            Value::Bool(false) => return self.err(path, "no value is allowed here".into()),
            Value::Object(s) => s,
            _ => return, // not a schema: nothing to enforce
        };
        if let Some(Value::String(r)) = s.get("$ref") {
            match r.strip_prefix('#').and_then(|p| if p.is_empty() { Some(self.root) } else { self.root.pointer(p) }) {
                Some(target) => self.check(target, inst, path, depth + 1),
                None => self.err(path, format!("unresolvable $ref `{r}`")),
            }
        }
        if let Some(t) = s.get("type") {
            let names: Vec<&str> = match t {
                Value::String(n) => vec![n.as_str()],
                Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                _ => vec![],
            };
            if !names.is_empty() && !names.iter().any(|n| has_type(inst, n)) {
                return self.err(path, format!("expected {}, got {}", names.join(" or "), type_of(inst)));
            }
        }
        if let Some(Value::Array(options)) = s.get("enum")
            && !options.iter().any(|o| json_eq(o, inst))
        {
            let opts: Vec<String> = options.iter().map(short).collect();
            self.err(path, format!("{} is not one of [{}]", short(inst), opts.join(", ")));
        }
        if let Some(c) = s.get("const")
            && !json_eq(c, inst)
        {
            self.err(path, format!("expected {}, got {}", short(c), short(inst)));
        }
        match inst {
            Value::Number(n) => self.check_number(s, n.as_f64().unwrap_or(f64::NAN), path),
            Value::String(st) => self.check_string(s, st, path),
            Value::Array(items) => self.check_array(s, items, path, depth),
            Value::Object(obj) => self.check_object(s, obj, path, depth),
            _ => {}
        }
        self.check_combinators(s, inst, path, depth);
    }

    fn check_number(&mut self, s: &Map<String, Value>, x: f64, path: &str) {
        let num = |k: &str| s.get(k).and_then(Value::as_f64);
        if let Some(m) = num("minimum")
            && x < m
        {
            self.err(path, format!("{x} is less than the minimum {m}"));
        }
        if let Some(m) = num("maximum")
            && x > m
        {
            self.err(path, format!("{x} is greater than the maximum {m}"));
        }
        if let Some(m) = num("exclusiveMinimum")
            && x <= m
        {
            self.err(path, format!("{x} must be greater than {m}"));
        }
        if let Some(m) = num("exclusiveMaximum")
            && x >= m
        {
            self.err(path, format!("{x} must be less than {m}"));
        }
        if let Some(m) = num("multipleOf")
            && m > 0.0
            && ((x / m).round() * m - x).abs() > 1e-9 * x.abs().max(1.0)
        {
            self.err(path, format!("{x} is not a multiple of {m}"));
        }
    }

    fn check_string(&mut self, s: &Map<String, Value>, st: &str, path: &str) {
        let len = st.chars().count() as u64;
        if let Some(m) = s.get("minLength").and_then(Value::as_u64)
            && len < m
        {
            self.err(path, format!("string is shorter than {m} characters"));
        }
        if let Some(m) = s.get("maxLength").and_then(Value::as_u64)
            && len > m
        {
            self.err(path, format!("string is longer than {m} characters"));
        }
    }

    fn check_array(&mut self, s: &Map<String, Value>, items: &[Value], path: &str, depth: usize) {
        let n = items.len() as u64;
        if let Some(m) = s.get("minItems").and_then(Value::as_u64)
            && n < m
        {
            self.err(path, format!("expected at least {m} items, got {n}"));
        }
        if let Some(m) = s.get("maxItems").and_then(Value::as_u64)
            && n > m
        {
            self.err(path, format!("expected at most {m} items, got {n}"));
        }
        if s.get("uniqueItems") == Some(&Value::Bool(true)) {
            for i in 0..items.len() {
                if let Some(j) = (i + 1..items.len()).find(|j| json_eq(&items[i], &items[*j])) {
                    self.err(path, format!("items {i} and {j} are equal but must be unique"));
                    break;
                }
            }
        }
        let (prefix, rest): (Option<&Vec<Value>>, Option<&Value>) = match (s.get("prefixItems"), s.get("items")) {
            (Some(Value::Array(p)), items) => (Some(p), items),
            (None, Some(Value::Array(p))) => (Some(p), s.get("additionalItems")),
            (_, items) => (None, items),
        };
        let skip = prefix.map(Vec::len).unwrap_or(0);
        if let Some(p) = prefix {
            for (i, (sch, item)) in p.iter().zip(items).enumerate() {
                self.check(sch, item, &format!("{path}/{i}"), depth + 1);
            }
        }
        if let Some(rest) = rest {
            for (i, item) in items.iter().enumerate().skip(skip) {
                self.check(rest, item, &format!("{path}/{i}"), depth + 1);
            }
        }
    }

    fn check_object(&mut self, s: &Map<String, Value>, obj: &Map<String, Value>, path: &str, depth: usize) {
        if let Some(Value::Array(req)) = s.get("required") {
            for k in req.iter().filter_map(Value::as_str) {
                if !obj.contains_key(k) {
                    self.err(path, format!("missing required property `{k}`"));
                }
            }
        }
        let n = obj.len() as u64;
        if let Some(m) = s.get("minProperties").and_then(Value::as_u64)
            && n < m
        {
            self.err(path, format!("expected at least {m} properties, got {n}"));
        }
        if let Some(m) = s.get("maxProperties").and_then(Value::as_u64)
            && n > m
        {
            self.err(path, format!("expected at most {m} properties, got {n}"));
        }
        let props = s.get("properties").and_then(Value::as_object);
        let additional = if s.contains_key("patternProperties") { None } else { s.get("additionalProperties") };
        for (k, v) in obj {
            let child = format!("{path}/{}", escape(k));
            match props.and_then(|p| p.get(k)) {
                Some(sch) => self.check(sch, v, &child, depth + 1),
                None => match additional {
                    Some(Value::Bool(false)) => self.err(&child, "additional property is not allowed".into()),
                    Some(sch @ Value::Object(_)) => self.check(sch, v, &child, depth + 1),
                    _ => {}
                },
            }
        }
    }

    fn check_combinators(&mut self, s: &Map<String, Value>, inst: &Value, path: &str, depth: usize) {
        if let Some(Value::Array(all)) = s.get("allOf") {
            for sch in all {
                self.check(sch, inst, path, depth + 1);
            }
        }
        if let Some(Value::Array(any)) = s.get("anyOf") {
            let results: Vec<Vec<SchemaError>> = any.iter().map(|sch| self.probe(sch, inst, path, depth + 1)).collect();
            if !results.iter().any(Vec::is_empty) {
                self.err(path, format!("does not match any schema in anyOf{}", closest(&results, path)));
            }
        }
        if let Some(Value::Array(one)) = s.get("oneOf") {
            let results: Vec<Vec<SchemaError>> = one.iter().map(|sch| self.probe(sch, inst, path, depth + 1)).collect();
            match results.iter().filter(|r| r.is_empty()).count() {
                1 => {}
                0 => self.err(path, format!("does not match any schema in oneOf{}", closest(&results, path))),
                k => self.err(path, format!("matches {k} schemas in oneOf, expected exactly one")),
            }
        }
        if let Some(not) = s.get("not")
            && self.probe(not, inst, path, depth + 1).is_empty()
        {
            self.err(path, "must not match the `not` schema".into());
        }
        if let Some(cond) = s.get("if") {
            let branch = if self.probe(cond, inst, path, depth + 1).is_empty() { s.get("then") } else { s.get("else") };
            if let Some(b) = branch {
                self.check(b, inst, path, depth + 1);
            }
        }
    }
}

/// " (closest: …)" from the most plausible branch: one whose `type` matched,
/// then the one with the fewest errors.
fn closest(results: &[Vec<SchemaError>], path: &str) -> String {
    let wrong_type = |r: &Vec<SchemaError>| r.iter().any(|e| e.path == path && e.message.starts_with("expected "));
    match results.iter().min_by_key(|r| (wrong_type(r), r.len())) {
        Some(best) if !best.is_empty() => format!(" (closest: {})", join(best)),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    fn errs(schema: Value, inst: Value) -> String {
        validate(&schema, &inst).unwrap_err().to_string()
    }

    #[test]
    fn types_and_paths() {
        let schema = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "n": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "opt": {"type": ["string", "null"]},
                "a/b": {"type": "boolean"}
            },
            "required": ["path"],
            "additionalProperties": false
        });
        assert!(validate(&schema, &json!({"path": "x", "n": 3, "tags": ["a"], "opt": null})).is_ok());
        assert!(validate(&schema, &json!({"path": "x", "n": 3.0})).is_ok());
        assert_eq!(errs(schema.clone(), json!({"path": 5})), "/path: expected string, got number");
        assert_eq!(errs(schema.clone(), json!({"path": "x", "n": 1.5})), "/n: expected integer, got number");
        assert_eq!(
            errs(schema.clone(), json!({"path": "x", "tags": ["a", 1]})),
            "/tags/1: expected string, got number"
        );
        assert_eq!(errs(schema.clone(), json!({})), "/: missing required property `path`");
        assert_eq!(errs(schema.clone(), json!({"path": "x", "zzz": 1})), "/zzz: additional property is not allowed");
        assert_eq!(errs(schema.clone(), json!({"path": "x", "a/b": 1})), "/a~1b: expected boolean, got number");
        assert_eq!(errs(schema.clone(), json!({"path": "x", "opt": 1})), "/opt: expected string or null, got number");
        assert_eq!(errs(schema, json!([1])), "/: expected object, got array");
    }

    #[test]
    fn bounds_enum_const() {
        let s = json!({"type": "object", "properties": {
            "k": {"enum": ["a", "b"]},
            "c": {"const": 1},
            "x": {"type": "number", "minimum": 0, "maximum": 10, "exclusiveMaximum": 10},
            "s": {"type": "string", "minLength": 2, "maxLength": 3},
            "l": {"type": "array", "minItems": 1, "maxItems": 2, "uniqueItems": true}
        }, "additionalProperties": {"type": "integer"}});
        assert!(validate(&s, &json!({"k": "a", "c": 1.0, "x": 0, "s": "éé", "l": [1], "extra": 4})).is_ok());
        assert_eq!(errs(s.clone(), json!({"k": "z"})), r#"/k: "z" is not one of ["a", "b"]"#);
        assert_eq!(errs(s.clone(), json!({"c": 2})), "/c: expected 1, got 2");
        assert_eq!(errs(s.clone(), json!({"x": -1})), "/x: -1 is less than the minimum 0");
        assert_eq!(errs(s.clone(), json!({"x": 10})), "/x: 10 must be less than 10");
        assert_eq!(errs(s.clone(), json!({"s": "a"})), "/s: string is shorter than 2 characters");
        assert_eq!(errs(s.clone(), json!({"s": "abcd"})), "/s: string is longer than 3 characters");
        assert_eq!(errs(s.clone(), json!({"l": []})), "/l: expected at least 1 items, got 0");
        assert_eq!(errs(s.clone(), json!({"l": [1, 2, 3]})), "/l: expected at most 2 items, got 3");
        assert_eq!(errs(s.clone(), json!({"l": [1, 1]})), "/l: items 0 and 1 are equal but must be unique");
        assert_eq!(errs(s, json!({"extra": "no"})), "/extra: expected integer, got string");
    }

    #[test]
    fn combinators_and_refs() {
        let s = json!({
            "$defs": {"pos": {"type": "integer", "minimum": 1}},
            "type": "object",
            "properties": {
                "a": {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/pos"}]},
                "o": {"oneOf": [{"type": "integer"}, {"type": "number"}]},
                "all": {"allOf": [{"type": "string"}, {"maxLength": 1}]},
                "n": {"not": {"type": "null"}}
            }
        });
        assert!(validate(&s, &json!({"a": "x", "o": 1.5, "all": "y", "n": 1})).is_ok());
        assert!(validate(&s, &json!({"a": 3})).is_ok());
        assert_eq!(
            errs(s.clone(), json!({"a": 0})),
            "/a: does not match any schema in anyOf (closest: /a: 0 is less than the minimum 1)"
        );
        assert_eq!(errs(s.clone(), json!({"o": 1})), "/o: matches 2 schemas in oneOf, expected exactly one");
        assert_eq!(errs(s.clone(), json!({"all": "yy"})), "/all: string is longer than 1 characters");
        assert_eq!(errs(s.clone(), json!({"n": null})), "/n: must not match the `not` schema");
        assert!(validate(&json!({"$ref": "#/nope"}), &json!(1)).is_err());
        assert!(validate(&json!(true), &json!(1)).is_ok());
        assert_eq!(errs(json!(false), json!(1)), "/: no value is allowed here");
        // Self-recursive refs terminate.
        assert!(validate(&json!({"$ref": "#"}), &json!(1)).is_err());
    }

    #[test]
    fn several_errors_are_joined() {
        let s = json!({"type": "object", "required": ["a", "b"]});
        assert_eq!(errs(s, json!({})), "/: missing required property `a`; /: missing required property `b`");
    }

    /// Found by the `tool_args` fuzz target: two recursive branches per
    /// level made validation exponential in the depth limit (a hang).
    #[test]
    fn exponential_recursive_schema_is_refused_quickly() {
        let s = json!({"anyOf": [{"type": "string"}, {"$ref": "#"}, {"$ref": "#"}]});
        assert!(errs(s, json!([1])).contains("schema too complex"));
        let s = json!({"not": {"anyOf": [{"$ref": "#/not"}, {"$ref": "#/not"}]}});
        assert!(validate(&s, &json!(1)).is_err(), "an exhausted budget must not pass through `not`");
    }
}
