//! JSON Schema validation of tool arguments, by the `jsonschema` crate.
//!
//! A tool's schema is compiled once: [`compiled`] keeps every schema it has
//! compiled (by content), so the runtime compiling a plugin's schemas when it
//! registers the tools makes the calls find them ready, and a tool registered
//! elsewhere (an MCP server's) is compiled on its first call.
//!
//! The schema comes from a plugin and the arguments from a model: neither is
//! trusted, so both are bounded.
//!
//! - The schema: at most [`MAX_SCHEMA_BYTES`] of JSON nested at most
//!   [`MAX_SCHEMA_DEPTH`] levels. `$schema` picks the draft; without it
//!   2020-12, or draft 7 (then 4) for a schema valid only there (tuple
//!   `items`, boolean `exclusiveMinimum`), as the hand-written validator
//!   this replaces accepted both. References stay inside the schema: a
//!   `$ref` is a `#…` JSON Pointer or a `$anchor`; nothing is ever fetched
//!   (no HTTP or file resolver is compiled in, and the validator is built
//!   offline). `$id` below the root and `$dynamicRef`/`$recursiveRef` are
//!   refused, so the cost bound below can follow every reference.
//! - `pattern` runs on the linear-time `regex` engine with a size limit: a
//!   hostile pattern cannot backtrack, and one that needs look-around or
//!   back-references makes the schema invalid. `format` is an annotation,
//!   not checked (as before).
//! - The arguments: at most [`MAX_ARGS_BYTES`] of JSON nested at most
//!   [`MAX_ARGS_DEPTH`] levels, checked before validation.
//! - The work: before validating, the sub-schema evaluations deciding the
//!   arguments' validity are counted over them (through `$ref`s, every
//!   branch); over [`MAX_STEPS`] the call is refused. Branching over a
//!   recursive `$ref` (`anyOf: [{$ref: "#/$defs/a"}, {$ref: "#/$defs/a"}]`
//!   down a chain) is otherwise exponential: a plugin's schema could hang
//!   the host (found by fuzzing). Reporting the errors of invalid arguments
//!   decides branches again as it walks; past ten times that bound the error
//!   says only that the arguments do not match.
//!
//! Errors name the JSON Pointer of the offending value:
//! `/path: expected string, got number` (the root is shown as `/`).

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, LazyLock, Mutex};

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{Draft, PatternOptions, ValidationError, Validator};
use serde_json::{Map, Value};

/// Largest schema, bytes of JSON.
pub const MAX_SCHEMA_BYTES: usize = 256 << 10;
/// Deepest schema, levels of JSON nesting (serde_json's own parsing limit).
pub const MAX_SCHEMA_DEPTH: usize = 128;
/// Largest arguments, bytes of JSON.
pub const MAX_ARGS_BYTES: usize = 4 << 20;
/// Deepest arguments, levels of arrays and objects.
pub const MAX_ARGS_DEPTH: usize = 64;
/// Most sub-schema evaluations one validation may take.
pub const MAX_STEPS: u64 = 100_000;
/// Most sub-schema evaluations the report of an invalid value's errors may
/// take (deciding branches again as it walks).
const MAX_REPORT_STEPS: u64 = 10 * MAX_STEPS;
/// Deepest chain of sub-schemas one evaluation may go through.
const MAX_NESTING: usize = 256;
const MAX_ERRORS: usize = 20;
/// Longest "closest" hint of an `anyOf`/`oneOf` error, bytes.
const MAX_HINT: usize = 300;
/// Compiled size of one `pattern` (and its lazy DFA's cache).
const REGEX_SIZE_LIMIT: usize = 256 << 10;
/// Most patterns (`pattern`, `patternProperties`) in one schema: each is
/// compiled up front, up to [`REGEX_SIZE_LIMIT`].
pub const MAX_PATTERNS: usize = 256;
/// Compiled schemas kept by [`compiled`] before the unused ones are dropped.
const CACHE_ENTRIES: usize = 1024;

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

impl SchemaErrors {
    fn one(path: impl Into<String>, message: impl Into<String>) -> Self {
        SchemaErrors(vec![SchemaError { path: path.into(), message: message.into() }])
    }
}

/// Why a schema cannot be used; displayed as `input schema …`, for the
/// caller to prefix with the tool's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("input schema {0}")]
pub struct InvalidSchema(String);

/// A tool's input schema, compiled.
pub struct ToolSchema {
    schema: Value,
    validator: Validator,
    /// Every `$ref` the schema holds, resolved to a JSON Pointer into it.
    refs: HashMap<String, String>,
}

impl std::fmt::Debug for ToolSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolSchema").field("schema", &self.schema).finish_non_exhaustive()
    }
}

/// The compiled schema of `schema`, compiled on first use and then shared
/// (a failure is kept too, so a bad schema is not recompiled per call).
pub fn compiled(schema: &Value) -> Result<Arc<ToolSchema>, InvalidSchema> {
    static CACHE: LazyLock<Mutex<HashMap<u64, Vec<Cached>>>> = LazyLock::new(Mutex::default);
    // Hashing walks the schema without recursion and stops at the depth
    // bound, so `==` and the compiler below only see bounded nesting.
    let key = fingerprint(schema)?;
    {
        let cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(hit) = cache.get(&key).and_then(|list| list.iter().find(|c| c.schema() == schema)) {
            return hit.result();
        }
    }
    let entry = match ToolSchema::compile(schema) {
        Ok(s) => Cached::Ok(Arc::new(s)),
        Err(e) => Cached::Err(schema.clone(), e),
    };
    let result = entry.result();
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if cache.values().map(Vec::len).sum::<usize>() >= CACHE_ENTRIES {
        // Keep what a caller still holds; if that is everything, start over.
        for list in cache.values_mut() {
            list.retain(|c| matches!(c, Cached::Ok(s) if Arc::strong_count(s) > 1));
        }
        cache.retain(|_, list| !list.is_empty());
        if cache.values().map(Vec::len).sum::<usize>() >= CACHE_ENTRIES {
            cache.clear();
        }
    }
    let list = cache.entry(key).or_default();
    if !list.iter().any(|c| c.schema() == schema) {
        list.push(entry);
    }
    result
}

enum Cached {
    Ok(Arc<ToolSchema>),
    Err(Value, InvalidSchema),
}

impl Cached {
    fn schema(&self) -> &Value {
        match self {
            Cached::Ok(s) => &s.schema,
            Cached::Err(v, _) => v,
        }
    }

    fn result(&self) -> Result<Arc<ToolSchema>, InvalidSchema> {
        match self {
            Cached::Ok(s) => Ok(s.clone()),
            Cached::Err(_, e) => Err(e.clone()),
        }
    }
}

/// A hash of `v` consistent with `==`, or the depth error.
fn fingerprint(v: &Value) -> Result<u64, InvalidSchema> {
    let mut h = DefaultHasher::new();
    let mut stack = vec![(v, 0usize)];
    while let Some((v, depth)) = stack.pop() {
        if depth > MAX_SCHEMA_DEPTH {
            return Err(InvalidSchema(format!("nests deeper than {MAX_SCHEMA_DEPTH} levels")));
        }
        match v {
            Value::Null => 0u8.hash(&mut h),
            Value::Bool(b) => (1u8, b).hash(&mut h),
            Value::Number(n) => (2u8, n.as_u64(), n.as_i64(), n.as_f64().map(f64::to_bits)).hash(&mut h),
            Value::String(s) => (3u8, s).hash(&mut h),
            Value::Array(a) => {
                (4u8, a.len()).hash(&mut h);
                stack.extend(a.iter().rev().map(|x| (x, depth + 1)));
            }
            Value::Object(o) => {
                (5u8, o.len()).hash(&mut h);
                for (k, x) in o {
                    k.hash(&mut h);
                    stack.push((x, depth + 1));
                }
            }
        }
    }
    Ok(h.finish())
}

/// Validates `instance` against `schema` (compiled once, see [`compiled`]).
/// A schema that cannot be used fails validation with one error saying why.
pub fn validate(schema: &Value, instance: &Value) -> Result<(), SchemaErrors> {
    match compiled(schema) {
        Ok(s) => s.validate(instance),
        Err(e) => Err(SchemaErrors::one("", e.to_string())),
    }
}

/// Checks the bounds of arguments: at most [`MAX_ARGS_BYTES`] of JSON and
/// [`MAX_ARGS_DEPTH`] levels of nesting.
pub fn check_arguments(args: &Value) -> Result<(), SchemaErrors> {
    // Depth first: serializing recurses.
    if let Some(segments) = too_deep(args, 0) {
        let path: String = segments.iter().rev().map(|s| format!("/{s}")).collect();
        return Err(SchemaErrors::one(path, format!("arguments nest deeper than {MAX_ARGS_DEPTH} levels")));
    }
    let mut bytes = 0;
    if serde_json::to_writer(LimitedWriter { written: &mut bytes, limit: MAX_ARGS_BYTES }, args).is_err() {
        return Err(SchemaErrors::one("", format!("arguments are larger than {MAX_ARGS_BYTES} bytes of JSON")));
    }
    Ok(())
}

/// The path (segments, innermost first) to the first array or object
/// inside [`MAX_ARGS_DEPTH`] others.
fn too_deep(v: &Value, depth: usize) -> Option<Vec<String>> {
    if !(v.is_array() || v.is_object()) {
        return None;
    }
    if depth >= MAX_ARGS_DEPTH {
        return Some(Vec::new());
    }
    let (segment, mut path) = match v {
        Value::Array(a) => a.iter().enumerate().find_map(|(i, x)| Some((i.to_string(), too_deep(x, depth + 1)?)))?,
        Value::Object(o) => o.iter().find_map(|(k, x)| Some((escape(k), too_deep(x, depth + 1)?)))?,
        _ => return None,
    };
    path.push(segment);
    Some(path)
}

impl ToolSchema {
    /// Compiles `schema` within the bounds in the [module docs](self).
    pub fn compile(schema: &Value) -> Result<ToolSchema, InvalidSchema> {
        fingerprint(schema)?;
        if !schema.is_object() && !schema.is_boolean() {
            return Err(InvalidSchema("must be a JSON object".into()));
        }
        let mut bytes = 0usize;
        let fits = serde_json::to_writer(LimitedWriter { written: &mut bytes, limit: MAX_SCHEMA_BYTES }, schema);
        if fits.is_err() {
            return Err(InvalidSchema(format!("is larger than {MAX_SCHEMA_BYTES} bytes")));
        }
        if patterns(schema) > MAX_PATTERNS {
            return Err(InvalidSchema(format!("has more than {MAX_PATTERNS} patterns")));
        }
        let (validator, draft) = build(schema)?;
        let refs = references(schema, draft)?;
        Ok(ToolSchema { schema: schema.clone(), validator, refs })
    }

    /// The schema as given.
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// Validates `args`: their bounds ([`check_arguments`]), the cost of the
    /// check ([`MAX_STEPS`]), then the schema. At most 20 errors.
    pub fn validate(&self, args: &Value) -> Result<(), SchemaErrors> {
        check_arguments(args)?;
        let mut cost = Cost::new(self);
        let steps = cost.of(&self.schema, args, 0);
        if cost.too_deep {
            return Err(SchemaErrors::one("", "schema nesting too deep (recursive $ref?)"));
        }
        if cost.exhausted() || steps.check > MAX_STEPS {
            let message = format!("schema too complex to check (over {MAX_STEPS} steps; recursive $ref?)");
            return Err(SchemaErrors::one("", message));
        }
        if self.validator.is_valid(args) {
            return Ok(());
        }
        if steps.report > MAX_REPORT_STEPS {
            let message = format!("does not match the schema (too costly to say where: over {MAX_REPORT_STEPS} steps)");
            return Err(SchemaErrors::one("", message));
        }
        let mut errors = Vec::new();
        for e in self.validator.iter_errors(args) {
            self.report(&e, args, &mut errors);
            if errors.len() >= MAX_ERRORS {
                break;
            }
        }
        errors.truncate(MAX_ERRORS);
        if errors.is_empty() {
            // `is_valid` and the error walk disagree: never let that pass.
            errors.push(SchemaError { path: String::new(), message: "does not match the schema".into() });
        }
        Err(SchemaErrors(errors))
    }

    /// The target of a `$ref` value (every one was resolved at compile time).
    fn target(&self, r: &Value) -> Option<&Value> {
        r.as_str().and_then(|r| self.refs.get(r)).and_then(|p| self.schema.pointer(p))
    }

    /// Appends `e` in Wharf's words: one error, or one per unexpected
    /// property.
    fn report(&self, e: &ValidationError<'_>, args: &Value, out: &mut Vec<SchemaError>) {
        let path = e.instance_path().as_str();
        let inst: &Value = e.instance();
        let count = |v: &Value| v.as_array().map_or(0, Vec::len).max(v.as_object().map_or(0, Map::len));
        let message = match e.kind() {
            ValidationErrorKind::Type { kind } => {
                format!("expected {}, got {}", self.type_names(e, kind).join(" or "), type_of(inst))
            }
            ValidationErrorKind::Enum { options } => {
                let opts: Vec<String> = options.as_array().map(|a| a.iter().map(short).collect()).unwrap_or_default();
                format!("{} is not one of [{}]", short(inst), opts.join(", "))
            }
            ValidationErrorKind::Constant { expected_value } => {
                format!("expected {}, got {}", short(expected_value), short(inst))
            }
            ValidationErrorKind::Minimum { limit } => {
                format!("{} is less than the minimum {}", number(inst), number(limit))
            }
            ValidationErrorKind::Maximum { limit } => {
                format!("{} is greater than the maximum {}", number(inst), number(limit))
            }
            ValidationErrorKind::ExclusiveMinimum { limit } => {
                format!("{} must be greater than {}", number(inst), number(limit))
            }
            ValidationErrorKind::ExclusiveMaximum { limit } => {
                format!("{} must be less than {}", number(inst), number(limit))
            }
            ValidationErrorKind::MultipleOf { multiple_of } => {
                format!("{} is not a multiple of {multiple_of}", number(inst))
            }
            ValidationErrorKind::MinLength { limit } => format!("string is shorter than {limit} characters"),
            ValidationErrorKind::MaxLength { limit } => format!("string is longer than {limit} characters"),
            ValidationErrorKind::MinItems { limit } => format!("expected at least {limit} items, got {}", count(inst)),
            ValidationErrorKind::MaxItems { limit } => format!("expected at most {limit} items, got {}", count(inst)),
            ValidationErrorKind::AdditionalItems { limit } => {
                format!("expected at most {limit} items, got {}", count(inst))
            }
            ValidationErrorKind::UniqueItems => match inst.as_array().and_then(|a| duplicate(a)) {
                Some((i, j)) => format!("items {i} and {j} are equal but must be unique"),
                None => "items must be unique".into(),
            },
            ValidationErrorKind::Contains => "no item matches the `contains` schema".into(),
            ValidationErrorKind::Required { property } => {
                format!(
                    "missing required property `{}`",
                    property.as_str().map_or_else(|| property.to_string(), str::to_string)
                )
            }
            ValidationErrorKind::MinProperties { limit } => {
                format!("expected at least {limit} properties, got {}", count(inst))
            }
            ValidationErrorKind::MaxProperties { limit } => {
                format!("expected at most {limit} properties, got {}", count(inst))
            }
            ValidationErrorKind::AdditionalProperties { unexpected } => {
                return each(out, path, unexpected, "additional property is not allowed");
            }
            ValidationErrorKind::UnevaluatedProperties { unexpected } => {
                return each(out, path, unexpected, "unevaluated property is not allowed");
            }
            ValidationErrorKind::UnevaluatedItems { unexpected } => {
                return each(out, path, unexpected, "unevaluated item is not allowed");
            }
            ValidationErrorKind::PropertyNames { error } => {
                let mut inner = Vec::new();
                self.report(error, args, &mut inner);
                let why: Vec<&str> = inner.iter().map(|e| e.message.as_str()).collect();
                format!("property name {} is not allowed: {}", short(error.instance()), why.join("; "))
            }
            // `additionalProperties: false` with no `properties` reports the
            // object (with its first value) this way: every key is extra.
            ValidationErrorKind::FalseSchema if e.schema_path().as_str().ends_with("/additionalProperties") => {
                let keys: Vec<String> = args
                    .pointer(path)
                    .and_then(Value::as_object)
                    .map_or_else(Vec::new, |o| o.keys().cloned().collect());
                return each(out, path, &keys, "additional property is not allowed");
            }
            ValidationErrorKind::FalseSchema => "no value is allowed here".into(),
            ValidationErrorKind::Not { .. } => "must not match the `not` schema".into(),
            ValidationErrorKind::AnyOf { context } => {
                format!("does not match any schema in anyOf{}", closest(&self.branches(context, args), path))
            }
            ValidationErrorKind::OneOfNotValid { context } => {
                format!("does not match any schema in oneOf{}", closest(&self.branches(context, args), path))
            }
            ValidationErrorKind::OneOfMultipleValid { context } => {
                let k = context.iter().filter(|b| b.is_empty()).count();
                format!("matches {k} schemas in oneOf, expected exactly one")
            }
            ValidationErrorKind::Pattern { pattern } => {
                format!("{} does not match the pattern `{pattern}`", short(inst))
            }
            ValidationErrorKind::BacktrackLimitExceeded { .. } | ValidationErrorKind::RegexEngineFailure { .. } => {
                format!("{} could not be checked against its pattern", short(inst))
            }
            ValidationErrorKind::Format { format } => format!("{} is not a valid `{format}`", short(inst)),
            ValidationErrorKind::ContentEncoding { content_encoding } => {
                format!("is not valid `{content_encoding}`")
            }
            ValidationErrorKind::ContentMediaType { content_media_type } => {
                format!("is not valid `{content_media_type}`")
            }
            ValidationErrorKind::FromUtf8 { .. } => "decoded content is not UTF-8".into(),
            ValidationErrorKind::Custom { message, .. } => message.clone(),
            ValidationErrorKind::Referencing(r) => format!("unresolvable $ref: {r}"),
        };
        out.push(SchemaError { path: path.to_string(), message });
    }

    /// The errors of each branch of an `anyOf`/`oneOf`.
    fn branches(&self, context: &[Vec<ValidationError<'static>>], args: &Value) -> Vec<Vec<SchemaError>> {
        context
            .iter()
            .map(|branch| {
                let mut errs = Vec::new();
                for e in branch {
                    self.report(e, args, &mut errs);
                }
                errs
            })
            .collect()
    }

    /// The type names of a failed `type`, in the schema's order.
    fn type_names(&self, e: &ValidationError<'_>, kind: &TypeKind) -> Vec<String> {
        let written = match self.schema.pointer(e.schema_path().as_str()) {
            Some(Value::String(t)) => vec![t.clone()],
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).map(str::to_string).collect(),
            _ => Vec::new(),
        };
        if !written.is_empty() {
            return written;
        }
        match kind {
            TypeKind::Single(t) => vec![t.as_str().to_string()],
            TypeKind::Multiple(set) => set.iter().map(|t| t.as_str().to_string()).collect(),
        }
    }
}

/// Appends one error per unexpected property (or item) below `path`.
fn each(out: &mut Vec<SchemaError>, path: &str, names: &[String], message: &str) {
    for n in names {
        out.push(SchemaError { path: format!("{path}/{}", escape(n)), message: message.into() });
    }
}

/// A writer that counts bytes and fails past `limit`.
struct LimitedWriter<'a> {
    written: &'a mut usize,
    limit: usize,
}

impl std::io::Write for LimitedWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        *self.written += buf.len();
        if *self.written > self.limit {
            return Err(std::io::Error::other("over the bound"));
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Builds the validator: offline, linear-time patterns, formats not
/// asserted; without `$schema`, 2020-12 first, then drafts 7 and 4.
fn build(schema: &Value) -> Result<(Validator, Draft), InvalidSchema> {
    let patterns = PatternOptions::regex().size_limit(REGEX_SIZE_LIMIT).dfa_size_limit(REGEX_SIZE_LIMIT);
    let options = jsonschema::options().offline().with_pattern_options(patterns).should_validate_formats(false);
    let declared = schema.get("$schema").is_some();
    let first = match options.build(schema) {
        Ok(v) => {
            let draft = v.draft();
            return Ok((v, draft));
        }
        Err(e) => e,
    };
    if !declared {
        for draft in [Draft::Draft7, Draft::Draft4] {
            if let Ok(v) = options.clone().with_draft(draft).build(schema) {
                return Ok((v, draft));
            }
        }
    }
    Err(invalid(&first))
}

/// A compile error in words: where in the schema and what.
fn invalid(e: &ValidationError<'_>) -> InvalidSchema {
    let at = e.instance_path().as_str();
    let at = if at.is_empty() { "/" } else { at };
    let note = match e.kind() {
        ValidationErrorKind::Format { format } if format == "regex" => {
            " (patterns run on a linear-time engine: no look-around or back-references)"
        }
        _ => "",
    };
    InvalidSchema(format!("is not a valid JSON Schema: {at}: {e}{note}"))
}

/// Keywords whose value is one schema.
const ONE: &[&str] = &[
    "additionalProperties",
    "additionalItems",
    "unevaluatedProperties",
    "unevaluatedItems",
    "items",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
    "contentSchema",
];
/// Keywords whose value is an array of schemas.
const LIST: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems", "items"];
/// Keywords whose value maps names to schemas.
const MAP: &[&str] = &["properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"];

/// The sub-schemas of schema `s` (in the positions of every draft).
fn children(s: &Value) -> impl Iterator<Item = &Value> {
    entries(s).flat_map(|(k, v)| {
        let k = k.as_str();
        let one = ONE.contains(&k).then_some(v);
        let list = if LIST.contains(&k) { v.as_array().map(|a| a.iter()) } else { None };
        let map = if MAP.contains(&k) { v.as_object().map(|m| m.values()) } else { None };
        one.into_iter().chain(list.into_iter().flatten()).chain(map.into_iter().flatten())
    })
}

/// The `pattern`s and `patternProperties` keys of `schema`.
fn patterns(schema: &Value) -> usize {
    let mut count = 0;
    let mut todo = vec![schema];
    while let Some(s) = todo.pop() {
        count += usize::from(s.get("pattern").is_some_and(Value::is_string));
        count += s.get("patternProperties").and_then(Value::as_object).map_or(0, Map::len);
        todo.extend(children(s));
    }
    count
}

/// Every `$ref` of `schema` (in a schema position, or reached through
/// another `$ref`), resolved to a JSON Pointer; refuses what the cost bound
/// could not follow.
fn references(schema: &Value, draft: Draft) -> Result<HashMap<String, String>, InvalidSchema> {
    let mut anchors: HashMap<String, String> = HashMap::new();
    let mut refs: Vec<(String, String)> = Vec::new();
    let mut seen: HashSet<*const Value> = HashSet::new();
    let mut todo = vec![(String::new(), schema)];
    let mut resolved: HashMap<String, String> = HashMap::new();
    loop {
        while let Some((at, s)) = todo.pop() {
            if !seen.insert(s as *const Value) {
                continue;
            }
            let Value::Object(o) = s else { continue };
            let nested_id =
                o.contains_key("$id") || (draft == Draft::Draft4 && o.get("id").is_some_and(Value::is_string));
            if !at.is_empty() && nested_id {
                return Err(InvalidSchema(format!(
                    "has an `$id` at {at}: tool schemas may only use references inside themselves"
                )));
            }
            for k in ["$dynamicRef", "$recursiveRef"] {
                if o.contains_key(k) {
                    return Err(InvalidSchema(format!("uses `{k}` at {at}, which tool schemas may not")));
                }
            }
            for k in ["$anchor", "$dynamicAnchor"] {
                if let Some(Value::String(a)) = o.get(k) {
                    anchors.entry(a.clone()).or_insert_with(|| at.clone());
                }
            }
            if let Some(Value::String(r)) = o.get("$ref") {
                refs.push((r.clone(), at.clone()));
            }
            for (k, v) in o {
                let here = format!("{at}/{}", escape(k));
                if ONE.contains(&k.as_str()) {
                    todo.push((here.clone(), v));
                }
                if LIST.contains(&k.as_str())
                    && let Value::Array(a) = v
                {
                    todo.extend(a.iter().enumerate().map(|(i, x)| (format!("{here}/{i}"), x)));
                }
                if MAP.contains(&k.as_str())
                    && let Value::Object(m) = v
                {
                    todo.extend(m.iter().map(|(n, x)| (format!("{here}/{}", escape(n)), x)));
                }
            }
        }
        // Resolve the references found; a target outside the positions
        // walked so far (below an unknown keyword) is walked too.
        let mut more = false;
        for (r, at) in std::mem::take(&mut refs) {
            if resolved.contains_key(&r) {
                continue;
            }
            let pointer = match r.strip_prefix('#') {
                Some("") => Some(String::new()),
                Some(p) if p.starts_with('/') => percent_decode(p),
                Some(name) => anchors.get(name).cloned(),
                None => None,
            };
            let Some((pointer, target)) = pointer.and_then(|p| schema.pointer(&p).map(|t| (p, t))) else {
                return Err(InvalidSchema(format!(
                    "has `$ref: {r}` at {}: only references inside the schema (`#/…` pointers and \
                     `$anchor`s) are followed, nothing is fetched",
                    if at.is_empty() { "/" } else { &at }
                )));
            };
            if !seen.contains(&(target as *const Value)) {
                todo.push((pointer.clone(), target));
                more = true;
            }
            resolved.insert(r, pointer);
        }
        if !more {
            return Ok(resolved);
        }
    }
}

/// `%XX` escapes of a URI fragment decoded (`None` if not UTF-8 or malformed).
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// A property name's stand-in: `propertyNames` checks strings without
/// children, whichever they are.
static NAME: Value = Value::String(String::new());

/// Sub-schema evaluations validating one value takes, upper bounds of the
/// validator's work: `check` deciding whether it is valid (each branch
/// once), `report` collecting the errors of an invalid one (which decides
/// every branch and sub-schema again before walking into it: at most
/// `check` times the nesting).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Steps {
    check: u64,
    report: u64,
}

impl Steps {
    const ONE: Steps = Steps { check: 1, report: 1 };

    fn add(self, other: Steps) -> Steps {
        Steps { check: self.check.saturating_add(other.check), report: self.report.saturating_add(other.report) }
    }

    /// `other` as decided but not reported on (`not`, `if`).
    fn add_checked(self, other: Steps) -> Steps {
        Steps { check: self.check.saturating_add(other.check), report: self.report }
    }
}

/// Counts [`Steps`] over the arguments (see the module docs). Counts
/// through a `$ref` are remembered per (target, value), so counting stays
/// within [`MAX_STEPS`] visits even where the counts themselves are
/// exponential.
struct Cost<'a> {
    schema: &'a ToolSchema,
    /// Visits so far (the counting's own work).
    visits: u64,
    memo: HashMap<(*const Value, *const Value), Steps>,
    /// (target, value) pairs being counted: a cycle without progress, which
    /// the validator also stops at.
    active: HashSet<(*const Value, *const Value)>,
    too_deep: bool,
}

impl<'a> Cost<'a> {
    fn new(schema: &'a ToolSchema) -> Self {
        Cost { schema, visits: 0, memo: HashMap::new(), active: HashSet::new(), too_deep: false }
    }

    fn exhausted(&self) -> bool {
        self.visits > MAX_STEPS || self.too_deep
    }

    /// The steps of schema `s` on value `v`, saturating.
    fn of(&mut self, s: &'a Value, v: &'a Value, nesting: usize) -> Steps {
        if self.exhausted() {
            return Steps::ONE;
        }
        if nesting > MAX_NESTING {
            self.too_deep = true;
            return Steps::ONE;
        }
        self.visits += 1;
        let Value::Object(o) = s else { return Steps::ONE };
        let n = nesting + 1;
        let mut inner = Steps { check: 0, report: 0 };
        for (k, x) in o {
            if self.exhausted() {
                break;
            }
            inner = match (k.as_str(), v) {
                ("$ref", _) => match self.schema.target(x) {
                    Some(t) => inner.add(self.through_ref(t, v, n)),
                    None => inner,
                },
                ("allOf" | "anyOf" | "oneOf", _) => inner.add(self.all(items(x), v, n)),
                ("then" | "else", _) => inner.add(self.of(x, v, n)),
                ("not" | "if", _) => inner.add_checked(self.of(x, v, n)),
                ("dependentSchemas" | "dependencies", Value::Object(props)) => {
                    let schemas = entries(x).filter(|(p, s)| props.contains_key(*p) && !s.is_array());
                    inner.add(self.all(schemas.map(|(_, s)| s), v, n))
                }
                ("properties", Value::Object(props)) => {
                    for (p, child) in props {
                        if let Some(s) = x.get(p) {
                            inner = inner.add(self.of(s, child, n));
                        }
                    }
                    inner
                }
                ("patternProperties", Value::Object(props)) => {
                    for (_, s) in entries(x) {
                        inner = inner.add(self.each(s, props.values(), n));
                    }
                    inner
                }
                ("additionalProperties" | "unevaluatedProperties", Value::Object(props)) => {
                    inner.add(self.each(x, props.values(), n))
                }
                ("propertyNames", Value::Object(props)) => inner.add(self.each(x, props.keys().map(|_| &NAME), n)),
                ("items" | "prefixItems", Value::Array(list)) if x.is_array() => {
                    for (s, item) in items(x).zip(list) {
                        inner = inner.add(self.of(s, item, n));
                    }
                    inner
                }
                ("items" | "additionalItems" | "unevaluatedItems" | "contains", Value::Array(list)) => {
                    inner.add(self.each(x, list.iter(), n))
                }
                _ => inner,
            };
        }
        let check = inner.check.saturating_add(1);
        Steps { check, report: inner.report.saturating_add(check) }
    }

    /// Each schema of `schemas` on `v`.
    fn all(&mut self, schemas: impl Iterator<Item = &'a Value>, v: &'a Value, n: usize) -> Steps {
        let mut sum = Steps { check: 0, report: 0 };
        for s in schemas {
            sum = sum.add(self.of(s, v, n));
        }
        sum
    }

    /// Schema `s` on each of `values`.
    fn each(&mut self, s: &'a Value, values: impl Iterator<Item = &'a Value>, n: usize) -> Steps {
        let mut sum = Steps { check: 0, report: 0 };
        for v in values {
            if self.exhausted() {
                break;
            }
            sum = sum.add(self.of(s, v, n));
        }
        sum
    }

    fn through_ref(&mut self, target: &'a Value, v: &'a Value, n: usize) -> Steps {
        let key = (target as *const Value, v as *const Value);
        if let Some(&c) = self.memo.get(&key) {
            self.visits += 1;
            return c;
        }
        if !self.active.insert(key) {
            return Steps::ONE;
        }
        let c = self.of(target, v, n);
        self.active.remove(&key);
        if !self.exhausted() {
            self.memo.insert(key, c);
        }
        c
    }
}

fn items(v: &Value) -> impl Iterator<Item = &Value> {
    v.as_array().into_iter().flatten()
}

fn entries(v: &Value) -> impl Iterator<Item = (&String, &Value)> {
    v.as_object().into_iter().flatten()
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

/// A number as the messages show it: integers exactly, others as `f64`
/// (`1.0` as `1`).
fn number(v: &Value) -> String {
    match v {
        Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
        Value::Number(n) => n.as_f64().map_or_else(|| n.to_string(), |f| f.to_string()),
        other => short(other),
    }
}

/// The first pair of equal items (numbers compare by value: `1 == 1.0`).
fn duplicate(items: &[Value]) -> Option<(usize, usize)> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (j, item) in items.iter().enumerate() {
        let mut key = String::new();
        canonical(item, &mut key);
        if let Some(&i) = seen.get(&key) {
            return Some((i, j));
        }
        seen.insert(key, j);
    }
    None
}

/// A text equal for values JSON Schema calls equal (sorted keys, integral
/// numbers as integers).
fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Number(n) => match n.as_f64() {
            Some(f) if !(n.is_i64() || n.is_u64()) && f.fract() == 0.0 && f.abs() < 9.2e18 => {
                out.push_str(&(f as i64).to_string());
            }
            _ => out.push_str(&n.to_string()),
        },
        Value::Array(a) => {
            out.push('[');
            for x in a {
                canonical(x, out);
                out.push(',');
            }
            out.push(']');
        }
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            out.push('{');
            for k in keys {
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                if let Some(x) = o.get(k) {
                    canonical(x, out);
                }
                out.push(',');
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 40 { format!("{}…", s.chars().take(40).collect::<String>()) } else { s }
}

/// " (closest: …)" from the most plausible branch: one whose `type` matched,
/// then the one with the fewest errors.
fn closest(results: &[Vec<SchemaError>], path: &str) -> String {
    let wrong_type = |r: &Vec<SchemaError>| r.iter().any(|e| e.path == path && e.message.starts_with("expected "));
    match results.iter().min_by_key(|r| (wrong_type(r), r.len())) {
        Some(best) if !best.is_empty() => {
            // Nested branches nest their hints: keep the outer ones.
            let mut hint = join(best);
            if hint.len() > MAX_HINT {
                crate::util::truncate_str(&mut hint, MAX_HINT);
                hint.push('…');
            }
            format!(" (closest: {hint})")
        }
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

    fn compile_err(schema: Value) -> String {
        ToolSchema::compile(&schema).unwrap_err().to_string()
    }

    /// `[[…["x"]…]]`, `depth` arrays deep.
    fn nested(depth: usize) -> Value {
        (0..depth).fold(json!("x"), |v, _| json!([v]))
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
        assert_eq!(
            errs(s.clone(), json!({"l": [{"a": [1]}, {"a": [1.0]}]})),
            "/l: items 0 and 1 are equal but must be unique"
        );
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
        // A reference that only leads back to itself constrains nothing (the
        // library's reading; the hand-written validator refused the value
        // once its depth bound was reached). It terminates either way.
        assert!(validate(&json!({"$ref": "#"}), &json!(1)).is_ok());
        // `$anchor` and percent-escaped pointers are followed.
        let s = json!({"$defs": {"a b": {"$anchor": "pos", "minimum": 1}}, "properties": {
            "p": {"$ref": "#pos"}, "q": {"$ref": "#/$defs/a%20b"}}});
        assert_eq!(errs(s.clone(), json!({"p": 0})), "/p: 0 is less than the minimum 1");
        assert_eq!(errs(s, json!({"q": 0})), "/q: 0 is less than the minimum 1");
    }

    #[test]
    fn several_errors_are_joined() {
        let s = json!({"type": "object", "required": ["a", "b"]});
        assert_eq!(errs(s, json!({})), "/: missing required property `a`; /: missing required property `b`");
    }

    #[test]
    fn at_most_twenty_errors() {
        let s = json!({"type": "object", "additionalProperties": false});
        let many: Map<String, Value> = (0..50).map(|i| (format!("k{i:02}"), json!(i))).collect();
        let e = validate(&s, &Value::Object(many)).unwrap_err();
        assert_eq!(e.0.len(), 20, "{e}");
        assert_eq!(e.0[0].to_string(), "/k00: additional property is not allowed");
    }

    /// Found by the `tool_args` fuzz target: two recursive branches per
    /// level made validation exponential in the depth bound (a hang). The
    /// count of the work before validating refuses it instead.
    #[test]
    fn exponential_recursive_schema_is_refused_quickly() {
        let s = json!({"anyOf": [
            {"type": "array", "items": {"$ref": "#"}},
            {"type": "array", "items": {"$ref": "#"}},
            {"type": "integer"}
        ]});
        assert!(validate(&s, &nested(3)).is_err());
        assert!(validate(&s, &json!([[1], [2, [3]]])).is_ok());
        assert!(errs(s.clone(), nested(30)).contains("schema too complex"));
        assert!(validate(&s, &nested(60)).is_err());
        // Without any recursion: a chain of definitions, each two branches
        // over the next, is 2^40 paths on one value.
        let mut defs = Map::new();
        for k in 0..40 {
            let next = json!({"$ref": format!("#/$defs/d{}", k + 1)});
            defs.insert(format!("d{k}"), json!({"anyOf": [next, next]}));
        }
        defs.insert("d40".into(), json!({"type": "integer"}));
        let s = json!({"$defs": defs, "$ref": "#/$defs/d0"});
        assert!(validate(&s, &json!(1)).is_err(), "{:?}", validate(&s, &json!(1)));
        assert!(errs(s, json!("x")).contains("schema too complex"));
        // Branches over a self-reference on the same value: the library
        // stops at the cycle; whatever it concludes is not an exhausted
        // budget passing through `not`.
        let s = json!({"anyOf": [{"type": "string"}, {"$ref": "#"}, {"$ref": "#"}]});
        assert!(validate(&s, &json!([1])).is_ok());
        let s = json!({"not": {"anyOf": [{"$ref": "#/not"}, {"$ref": "#/not"}]}});
        assert!(validate(&s, &json!(1)).is_err(), "an exhausted budget must not pass through `not`");
    }

    #[test]
    fn a_long_reference_chain_is_refused_not_overflowed() {
        let mut defs = Map::new();
        for k in 0..1000 {
            defs.insert(format!("d{k}"), json!({"$ref": format!("#/$defs/d{}", k + 1)}));
        }
        defs.insert("d1000".into(), json!({"type": "integer"}));
        let s = json!({"$defs": defs, "$ref": "#/$defs/d0"});
        assert_eq!(errs(s, json!(1)), "/: schema nesting too deep (recursive $ref?)");
    }

    /// A schema for any JSON value (recursive, a branch per kind): deep
    /// arguments are checked and reported in linear time, and the deepest
    /// allowed arguments go through the deepest allowed nesting of
    /// sub-schemas without overflowing a 2 MiB stack (a Tokio worker's).
    #[test]
    fn deep_arguments_on_a_recursive_schema() {
        let s = json!({"$defs": {"v": {"anyOf": [
            {"type": ["null", "boolean", "number"]},
            {"type": "object", "additionalProperties": {"$ref": "#/$defs/v"}},
            {"type": "array", "items": {"allOf": [{"$ref": "#/$defs/v"}]}}
        ]}}, "$ref": "#/$defs/v"});
        let s = ToolSchema::compile(&s).unwrap();
        let deep = (0..MAX_ARGS_DEPTH).fold(json!(1), |v, i| if i % 2 == 0 { json!([v, 2]) } else { json!({"k": v}) });
        let bad = (0..MAX_ARGS_DEPTH).fold(json!("x"), |v, i| if i % 2 == 0 { json!([v, 2]) } else { json!({"k": v}) });
        std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || {
                assert_eq!(s.validate(&deep), Ok(()));
                let e = s.validate(&bad).unwrap_err().to_string();
                assert!(e.starts_with("/: does not match any schema in anyOf (closest: /k: does not match"), "{e}");
                assert!(e.len() < 2 * MAX_HINT, "{e}");
                // The innermost error, on its own.
                let inner = s.validate(&bad.pointer(&"/k/0".repeat(31)).unwrap().clone()).unwrap_err().to_string();
                assert!(
                    inner.ends_with("(closest: /k/0: expected null or boolean or number, got string)))"),
                    "{inner}"
                );
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn arguments_are_bounded_before_validation() {
        let any = ToolSchema::compile(&json!({})).unwrap();
        assert!(any.validate(&nested(MAX_ARGS_DEPTH)).is_ok());
        let deep = nested(MAX_ARGS_DEPTH + 1);
        let e = any.validate(&deep).unwrap_err();
        let path = "/0".repeat(MAX_ARGS_DEPTH);
        assert_eq!(e.to_string(), format!("{path}: arguments nest deeper than 64 levels"));
        // Deeper than serde_json would parse, built in code: no overflow.
        assert!(any.validate(&nested(1_000)).is_err());

        let big = json!({"text": "a".repeat(MAX_ARGS_BYTES)});
        assert_eq!(
            any.validate(&big).unwrap_err().to_string(),
            format!("/: arguments are larger than {MAX_ARGS_BYTES} bytes of JSON")
        );
        assert!(any.validate(&json!({"text": "a".repeat(MAX_ARGS_BYTES - 20)})).is_ok());
        // An object with no properties allowed: each key is named.
        let none = ToolSchema::compile(&json!({"properties": {"o": {"additionalProperties": false}}})).unwrap();
        assert_eq!(
            none.validate(&json!({"o": {"a": 1, "b": 2}})).unwrap_err().to_string(),
            "/o/a: additional property is not allowed; /o/b: additional property is not allowed"
        );
        // Many values, each cheap: the count of the work bounds them too.
        let items = ToolSchema::compile(&json!({"items": {"type": "integer"}})).unwrap();
        assert!(items.validate(&json!(vec![1; 1000])).is_ok());
        let e = items.validate(&json!(vec![1; MAX_STEPS as usize])).unwrap_err();
        assert!(e.to_string().contains("schema too complex"), "{e}");
    }

    /// `^(a+)+$` on `aaa…ab` backtracks exponentially on a backtracking
    /// engine; the linear-time engine matches it in one pass. A pattern
    /// that only a backtracking engine can run is refused at compile time.
    #[test]
    fn patterns_run_on_the_linear_time_engine() {
        let s = json!({"properties": {"p": {"type": "string", "pattern": "^(a+)+$"}}});
        let hostile = format!("{}b", "a".repeat(100_000));
        assert_eq!(
            errs(s.clone(), json!({"p": hostile})),
            format!("/p: \"{}… does not match the pattern `^(a+)+$`", "a".repeat(39))
        );
        assert!(validate(&s, &json!({"p": "aaaa"})).is_ok());
        let e = compile_err(json!({"properties": {"p": {"pattern": "^(?=a)a$"}}}));
        assert!(e.starts_with("input schema is not a valid JSON Schema: /properties/p/pattern: "), "{e}");
        assert!(e.contains("linear-time engine"), "{e}");
        // Back-references and huge repetitions are refused too.
        assert!(ToolSchema::compile(&json!({"pattern": "(a)\\1"})).is_err());
        assert!(ToolSchema::compile(&json!({"pattern": "a{1000}{1000}"})).is_err());
        // Each pattern is compiled up front: their number is bounded.
        let many: Map<String, Value> =
            (0..=MAX_PATTERNS).map(|i| (format!("p{i}"), json!({"pattern": "^a"}))).collect();
        assert_eq!(
            compile_err(json!({"properties": many})),
            format!("input schema has more than {MAX_PATTERNS} patterns")
        );
    }

    #[test]
    fn nothing_outside_the_schema_is_fetched() {
        for r in ["http://127.0.0.1:9/schema.json", "https://example.com/s.json#/a", "file:///etc/passwd"] {
            let e = compile_err(json!({"properties": {"a": {"$ref": r}}}));
            assert!(e.starts_with("input schema is not a valid JSON Schema: "), "{r}: {e}");
            let document = r.split('#').next().unwrap_or(r);
            assert!(e.contains(document) && e.contains("disabled"), "{r}: {e}");
            assert!(validate(&json!({"$ref": r}), &json!(1)).is_err());
        }
        let e = compile_err(json!({"$ref": "other.json"}));
        assert!(e.starts_with("input schema is not a valid JSON Schema: ") && e.contains("other.json"), "{e}");
        // Below a root `$id`, a relative reference names another document.
        let e = compile_err(json!({"$id": "https://example.com/root.json", "$ref": "other.json"}));
        assert!(e.contains("https://example.com/other.json") && e.contains("disabled"), "{e}");
        // What the cost count could not follow is refused.
        let e = compile_err(json!({"properties": {"a": {"$id": "https://example.com/a", "type": "string"}}}));
        assert_eq!(
            e,
            "input schema has an `$id` at /properties/a: tool schemas may only use references inside themselves"
        );
        let e = compile_err(json!({"$dynamicAnchor": "x", "properties": {"a": {"$dynamicRef": "#x"}}}));
        assert_eq!(e, "input schema uses `$dynamicRef` at /properties/a, which tool schemas may not");
        // A root `$id` is fine, as are its own `#` references.
        let s = json!({"$id": "https://example.com/root.json", "$defs": {"n": {"type": "integer"}},
            "properties": {"n": {"$ref": "#/$defs/n"}}});
        assert_eq!(errs(s, json!({"n": "x"})), "/n: expected integer, got string");
    }

    #[test]
    fn invalid_and_oversized_schemas_are_refused_at_compile_time() {
        let e = compile_err(json!({"type": "object", "properties": {"n": {"type": "integr"}}}));
        assert!(e.starts_with("input schema is not a valid JSON Schema: /properties/n/type: "), "{e}");
        assert_eq!(compile_err(json!([1])), "input schema must be a JSON object");
        let big = json!({"description": "x".repeat(MAX_SCHEMA_BYTES)});
        assert_eq!(compile_err(big), format!("input schema is larger than {MAX_SCHEMA_BYTES} bytes"));
        let mut deep = json!({"type": "integer"});
        for _ in 0..MAX_SCHEMA_DEPTH {
            deep = json!({"items": deep});
        }
        assert_eq!(compile_err(deep), format!("input schema nests deeper than {MAX_SCHEMA_DEPTH} levels"));
        // A declared draft is not second-guessed.
        let e = compile_err(json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "items": [{}]}));
        assert!(e.contains("/items"), "{e}");
    }

    #[test]
    fn older_drafts_are_read_as_such() {
        // Tuple `items` with `additionalItems` (draft 7).
        let s = json!({"type": "array", "items": [{"type": "string"}, {"type": "integer"}], "additionalItems": false});
        assert!(validate(&s, &json!(["a", 1])).is_ok());
        assert_eq!(errs(s.clone(), json!(["a", "b"])), "/1: expected integer, got string");
        assert!(validate(&s, &json!(["a", 1, 2])).is_err());
        // Boolean `exclusiveMinimum` (draft 4).
        let s = json!({"type": "number", "minimum": 0, "exclusiveMinimum": true});
        assert!(validate(&s, &json!(1)).is_ok());
        assert!(validate(&s, &json!(0)).is_err());
        // Declared.
        let s = json!({"$schema": "http://json-schema.org/draft-07/schema#", "definitions": {"n": {"type": "integer"}},
            "properties": {"n": {"$ref": "#/definitions/n"}}});
        assert_eq!(errs(s, json!({"n": "x"})), "/n: expected integer, got string");
    }

    #[test]
    fn format_is_an_annotation() {
        let s = json!({"properties": {"e": {"type": "string", "format": "email"}, "r": {"format": "regex"}}});
        assert!(validate(&s, &json!({"e": "not an email", "r": "(unclosed"})).is_ok());
    }

    #[test]
    fn compiled_once_and_shared() {
        let s = json!({"type": "object", "properties": {"unique_to_this_test": {"type": "string"}}});
        let a = compiled(&s).unwrap();
        let b = compiled(&s.clone()).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let bad = json!({"type": "nonsense-for-the-cache-test"});
        assert_eq!(compiled(&bad).unwrap_err(), compiled(&bad).unwrap_err());
    }
}
