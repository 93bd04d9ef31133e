//! The WIT ↔ JSON mapping for generic components (components that export
//! plain WIT functions instead of the `wharf:plugin` world).
//!
//! [`WitType`] is the runtime's own copy of a WIT value type, made from
//! wasmtime's [`Type`] by [`WitType::from_wasmtime`], which refuses what a
//! tool cannot take or return (resources, streams, futures, error contexts).
//! From it come the JSON Schema of a tool's arguments ([`WitType::schema`],
//! [`params_schema`]), the conversion of JSON arguments into wasmtime
//! [`Val`]s ([`to_val`], [`params_to_vals`]; errors name the path, e.g.
//! `a.label`) and of results back to JSON ([`to_json`]).
//!
//! The mapping (one rule per type; the schema says exactly this):
//!
//! | WIT | JSON |
//! | --- | --- |
//! | `bool` | boolean |
//! | `u8` … `s32` | integer with the type's `minimum` / `maximum` |
//! | `u64`, `s64` | an integer within ±(2^53−1) (the safe range of a JSON number), or a decimal string for any value of the type; results are integers within that range, decimal strings beyond it |
//! | `f32`, `f64` | number (arguments must be finite; a NaN or infinite result is the string `"NaN"`, `"Infinity"` or `"-Infinity"`) |
//! | `char` | a string of exactly one Unicode scalar value |
//! | `string` | string |
//! | `list<u8>` | a base64 string (standard alphabet, padded) |
//! | `list<T>` | array |
//! | `list<T, N>` | array of exactly N items |
//! | `map<K, V>` | array of `[key, value]` pairs |
//! | `record` | object of its fields (WIT names as written); every field required unless an `option`; no other properties |
//! | `tuple<…>` | array of exactly its items (`prefixItems`) |
//! | `variant` | a case with a payload is an object with one property, the case name (`{"circle": 1.5}`); a case without one is the bare name (`"empty"`) |
//! | `enum` | one of the names, a string |
//! | `flags` | array of the names that are set (unique; results in declaration order) |
//! | `option<T>` | `null` for none, else the value; when `T` is itself an option, `some` is `{"some": value}` |
//! | `result<T, E>` | `{"ok": value}` or `{"err": value}` (`null` for a missing payload); as a function's result, `ok` is the tool's output and `err` a tool error |

use base64::Engine as _;
use serde_json::{Map, Number, Value, json};
use wasmtime::component::{Type, Val};

/// The largest integer a JSON number (an IEEE double) holds exactly and
/// unambiguously: 2^53 − 1.
pub const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// A WIT value type a generic component's function may take or return.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WitType {
    /// `bool`.
    Bool,
    /// `s8`.
    S8,
    /// `u8`.
    U8,
    /// `s16`.
    S16,
    /// `u16`.
    U16,
    /// `s32`.
    S32,
    /// `u32`.
    U32,
    /// `s64`.
    S64,
    /// `u64`.
    U64,
    /// `f32`.
    F32,
    /// `f64`.
    F64,
    /// `char`.
    Char,
    /// `string`.
    String,
    /// `list<T>` (`list<u8>` maps to base64).
    List(Box<WitType>),
    /// `list<T, N>`.
    FixedList(Box<WitType>, u32),
    /// `map<K, V>`.
    Map(Box<WitType>, Box<WitType>),
    /// `record { name: T, … }`.
    Record(Vec<(String, WitType)>),
    /// `tuple<…>`.
    Tuple(Vec<WitType>),
    /// `variant { case(T), case, … }`.
    Variant(Vec<(String, Option<WitType>)>),
    /// `enum { name, … }`.
    Enum(Vec<String>),
    /// `option<T>`.
    Option(Box<WitType>),
    /// `result<T, E>` (either side may be absent).
    Result(Option<Box<WitType>>, Option<Box<WitType>>),
    /// `flags { name, … }`.
    Flags(Vec<String>),
}

/// A type a generic tool cannot take or return.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("uses {what}")]
pub struct Unsupported {
    /// What was found: `a resource (own<…>)`, `a stream`, ….
    pub what: String,
}

/// A JSON value that does not fit a WIT type, or a value that does not fit
/// its type on the way back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{path}`: {message}")]
pub struct ConvError {
    /// Where: the argument name, then `.field`, `[index]`, `.case`.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

fn err<T>(path: &str, message: impl Into<String>) -> Result<T, ConvError> {
    Err(ConvError { path: path.to_string(), message: message.into() })
}

/// A short description of a JSON value for error messages.
fn kind_of(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => {
            let cut = wharf_core::util::cut_str(s, 40);
            let more = if cut.len() < s.len() { "…" } else { "" };
            format!("the string {:?}{more}", cut)
        }
        Value::Array(a) => format!("an array of {} items", a.len()),
        Value::Object(_) => "an object".into(),
    }
}

impl WitType {
    /// The runtime type for wasmtime's `ty`; resources, streams, futures
    /// and error contexts anywhere inside are refused.
    pub fn from_wasmtime(ty: &Type) -> Result<Self, Unsupported> {
        let boxed = |t: &Type| Self::from_wasmtime(t).map(Box::new);
        Ok(match ty {
            Type::Bool => Self::Bool,
            Type::S8 => Self::S8,
            Type::U8 => Self::U8,
            Type::S16 => Self::S16,
            Type::U16 => Self::U16,
            Type::S32 => Self::S32,
            Type::U32 => Self::U32,
            Type::S64 => Self::S64,
            Type::U64 => Self::U64,
            Type::Float32 => Self::F32,
            Type::Float64 => Self::F64,
            Type::Char => Self::Char,
            Type::String => Self::String,
            Type::List(l) => Self::List(boxed(&l.ty())?),
            Type::FixedLengthList(l) => Self::FixedList(boxed(&l.ty())?, l.len()),
            Type::Map(m) => Self::Map(boxed(&m.key())?, boxed(&m.value())?),
            Type::Record(r) => Self::Record(
                r.fields().map(|f| Ok((f.name.to_string(), Self::from_wasmtime(&f.ty)?))).collect::<Result<_, _>>()?,
            ),
            Type::Tuple(t) => Self::Tuple(t.types().map(|t| Self::from_wasmtime(&t)).collect::<Result<_, _>>()?),
            Type::Variant(v) => Self::Variant(
                v.cases()
                    .map(|c| Ok((c.name.to_string(), c.ty.as_ref().map(Self::from_wasmtime).transpose()?)))
                    .collect::<Result<_, _>>()?,
            ),
            Type::Enum(e) => Self::Enum(e.names().map(str::to_string).collect()),
            Type::Option(o) => Self::Option(boxed(&o.ty())?),
            Type::Result(r) => {
                Self::Result(r.ok().as_ref().map(boxed).transpose()?, r.err().as_ref().map(boxed).transpose()?)
            }
            Type::Flags(f) => Self::Flags(f.names().map(str::to_string).collect()),
            Type::Own(_) => return Err(Unsupported { what: "a resource (`own<…>`)".into() }),
            Type::Borrow(_) => return Err(Unsupported { what: "a resource (`borrow<…>`)".into() }),
            Type::Future(_) => return Err(Unsupported { what: "a future".into() }),
            Type::Stream(_) => return Err(Unsupported { what: "a stream".into() }),
            Type::ErrorContext => return Err(Unsupported { what: "an error-context".into() }),
        })
    }

    /// Whether a value of this type can be JSON `null` (only options can).
    fn nullable(&self) -> bool {
        matches!(self, Self::Option(_))
    }

    /// The inclusive range of an integer type.
    fn int_range(&self) -> Option<(i128, i128)> {
        Some(match self {
            Self::S8 => (i8::MIN.into(), i8::MAX.into()),
            Self::U8 => (0, u8::MAX.into()),
            Self::S16 => (i16::MIN.into(), i16::MAX.into()),
            Self::U16 => (0, u16::MAX.into()),
            Self::S32 => (i32::MIN.into(), i32::MAX.into()),
            Self::U32 => (0, u32::MAX.into()),
            Self::S64 => (i64::MIN.into(), i64::MAX.into()),
            Self::U64 => (0, u64::MAX.into()),
            _ => return None,
        })
    }

    /// The JSON Schema (2020-12) of this type's JSON form.
    pub fn schema(&self) -> Value {
        match self {
            Self::Bool => json!({"type": "boolean"}),
            Self::S8 | Self::U8 | Self::S16 | Self::U16 | Self::S32 | Self::U32 => {
                let (min, max) = self.int_range().unwrap_or((0, 0));
                json!({"type": "integer", "minimum": min as i64, "maximum": max as i64})
            }
            Self::S64 => json!({
                "description": "s64: an integer within ±(2^53-1), or a decimal string",
                "anyOf": [
                    {"type": "integer", "minimum": -MAX_SAFE_INTEGER, "maximum": MAX_SAFE_INTEGER},
                    {"type": "string", "pattern": "^-?(0|[1-9][0-9]{0,18})$"},
                ],
            }),
            Self::U64 => json!({
                "description": "u64: an integer up to 2^53-1, or a decimal string",
                "anyOf": [
                    {"type": "integer", "minimum": 0, "maximum": MAX_SAFE_INTEGER},
                    {"type": "string", "pattern": "^(0|[1-9][0-9]{0,19})$"},
                ],
            }),
            Self::F32 | Self::F64 => json!({"type": "number"}),
            Self::Char => json!({"type": "string", "minLength": 1, "maxLength": 1}),
            Self::String => json!({"type": "string"}),
            Self::List(t) if **t == Self::U8 => json!({
                "type": "string",
                "contentEncoding": "base64",
                "pattern": "^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$",
            }),
            Self::List(t) => json!({"type": "array", "items": t.schema()}),
            Self::FixedList(t, n) => json!({"type": "array", "items": t.schema(), "minItems": n, "maxItems": n}),
            Self::Map(k, v) => json!({
                "type": "array",
                "items": {"type": "array", "prefixItems": [k.schema(), v.schema()], "items": false, "minItems": 2},
            }),
            Self::Record(fields) => {
                let mut props = Map::new();
                let mut required = Vec::new();
                for (name, ty) in fields {
                    props.insert(name.clone(), ty.schema());
                    if !matches!(ty, Self::Option(_)) {
                        required.push(Value::String(name.clone()));
                    }
                }
                json!({"type": "object", "properties": props, "required": required, "additionalProperties": false})
            }
            Self::Tuple(items) => {
                let n = items.len();
                json!({
                    "type": "array",
                    "prefixItems": items.iter().map(Self::schema).collect::<Vec<_>>(),
                    "items": false,
                    "minItems": n,
                })
            }
            Self::Variant(cases) => {
                let alts: Vec<Value> = cases
                    .iter()
                    .map(|(name, ty)| match ty {
                        None => json!({"const": name}),
                        Some(t) => json!({
                            "type": "object",
                            "properties": {name.clone(): t.schema()},
                            "required": [name],
                            "additionalProperties": false,
                        }),
                    })
                    .collect();
                json!({"oneOf": alts})
            }
            Self::Enum(names) => json!({"type": "string", "enum": names}),
            Self::Flags(names) => json!({"type": "array", "items": {"enum": names}, "uniqueItems": true}),
            Self::Option(t) => {
                let some = if t.nullable() {
                    json!({"type": "object", "properties": {"some": t.schema()}, "required": ["some"], "additionalProperties": false})
                } else {
                    t.schema()
                };
                json!({"anyOf": [{"type": "null"}, some]})
            }
            Self::Result(ok, er) => {
                let side = |name: &str, t: &Option<Box<WitType>>| {
                    let inner = t.as_ref().map_or_else(|| json!({"type": "null"}), |t| t.schema());
                    json!({
                        "type": "object",
                        "properties": {name: inner},
                        "required": [name],
                        "additionalProperties": false,
                    })
                };
                json!({"oneOf": [side("ok", ok), side("err", er)]})
            }
        }
    }

    /// The type written as WIT (structurally: records, variants, enums and
    /// flags show their members, not their names, which the binary does not
    /// keep for function signatures).
    pub fn wit(&self) -> String {
        let list = |items: &mut dyn Iterator<Item = String>| items.collect::<Vec<_>>().join(", ");
        match self {
            Self::Bool => "bool".into(),
            Self::S8 => "s8".into(),
            Self::U8 => "u8".into(),
            Self::S16 => "s16".into(),
            Self::U16 => "u16".into(),
            Self::S32 => "s32".into(),
            Self::U32 => "u32".into(),
            Self::S64 => "s64".into(),
            Self::U64 => "u64".into(),
            Self::F32 => "f32".into(),
            Self::F64 => "f64".into(),
            Self::Char => "char".into(),
            Self::String => "string".into(),
            Self::List(t) => format!("list<{}>", t.wit()),
            Self::FixedList(t, n) => format!("list<{}, {n}>", t.wit()),
            Self::Map(k, v) => format!("map<{}, {}>", k.wit(), v.wit()),
            Self::Record(f) => {
                format!("record {{ {} }}", list(&mut f.iter().map(|(n, t)| format!("{n}: {}", t.wit()))))
            }
            Self::Tuple(t) => format!("tuple<{}>", list(&mut t.iter().map(Self::wit))),
            Self::Variant(c) => format!(
                "variant {{ {} }}",
                list(&mut c.iter().map(|(n, t)| match t {
                    Some(t) => format!("{n}({})", t.wit()),
                    None => n.clone(),
                }))
            ),
            Self::Enum(n) => format!("enum {{ {} }}", n.join(", ")),
            Self::Flags(n) => format!("flags {{ {} }}", n.join(", ")),
            Self::Option(t) => format!("option<{}>", t.wit()),
            Self::Result(None, None) => "result".into(),
            Self::Result(Some(o), None) => format!("result<{}>", o.wit()),
            Self::Result(o, Some(e)) => {
                format!("result<{}, {}>", o.as_ref().map_or_else(|| "_".to_string(), |o| o.wit()), e.wit())
            }
        }
    }
}

/// The JSON Schema of a function's arguments: an object with one property
/// per parameter (required unless an `option`), nothing else.
pub fn params_schema(params: &[(String, WitType)]) -> Value {
    WitType::Record(params.to_vec()).schema()
}

/// A function's JSON arguments (an object, or `null` for no arguments) as
/// the values to call it with, in parameter order.
pub fn params_to_vals(params: &[(String, WitType)], args: &Value) -> Result<Vec<Val>, ConvError> {
    let empty = Map::new();
    let obj = match args {
        Value::Object(o) => o,
        Value::Null => &empty,
        other => return err("arguments", format!("expected an object of the arguments, got {}", kind_of(other))),
    };
    if let Some(k) = obj.keys().find(|k| !params.iter().any(|(n, _)| n == *k)) {
        let known: Vec<&str> = params.iter().map(|(n, _)| n.as_str()).collect();
        return err(k, format!("no such argument (the arguments are: {})", known.join(", ")));
    }
    params
        .iter()
        .map(|(name, ty)| match obj.get(name) {
            Some(v) => to_val(ty, v, name),
            None if matches!(ty, WitType::Option(_)) => Ok(Val::Option(None)),
            None => err(name, format!("missing (required, {})", ty.wit())),
        })
        .collect()
}

fn int_of(ty: &WitType, v: &Value, path: &str) -> Result<i128, ConvError> {
    let (min, max) = ty.int_range().unwrap_or((0, 0));
    let wide = matches!(ty, WitType::S64 | WitType::U64);
    let n: i128 = match v {
        Value::Number(n) => {
            let exact = n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from)).or_else(|| {
                n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() <= MAX_SAFE_INTEGER as f64).map(|f| f as i128)
            });
            let Some(x) = exact else {
                return err(path, format!("expected an integer ({}), got {}", ty.wit(), kind_of(v)));
            };
            if wide && x.abs() > i128::from(MAX_SAFE_INTEGER) {
                return err(
                    path,
                    format!("{x} is beyond ±(2^53-1), where JSON numbers are inexact: pass it as a decimal string"),
                );
            }
            x
        }
        Value::String(s) if wide => {
            let digits = s.strip_prefix('-').unwrap_or(s);
            let canonical = !digits.is_empty()
                && digits.len() <= 20
                && digits.bytes().all(|b| b.is_ascii_digit())
                && (digits == "0" || !digits.starts_with('0'));
            match s.parse::<i128>() {
                Ok(x) if canonical => x,
                _ => return err(path, format!("expected a decimal integer string ({}), got {}", ty.wit(), kind_of(v))),
            }
        }
        _ => {
            let what = if wide { "an integer or a decimal string" } else { "an integer" };
            return err(path, format!("expected {what} ({}), got {}", ty.wit(), kind_of(v)));
        }
    };
    if n < min || n > max {
        return err(path, format!("{n} is out of range for {} ({min}..={max})", ty.wit()));
    }
    Ok(n)
}

fn float_of(ty: &WitType, v: &Value, path: &str) -> Result<f64, ConvError> {
    let Value::Number(n) = v else {
        return err(path, format!("expected a number ({}), got {}", ty.wit(), kind_of(v)));
    };
    let Some(f) = n.as_f64().filter(|f| f.is_finite()) else {
        return err(path, format!("{n} is not a finite number"));
    };
    Ok(f)
}

fn str_of<'a>(ty: &WitType, v: &'a Value, path: &str) -> Result<&'a str, ConvError> {
    match v {
        Value::String(s) => Ok(s),
        other => err(path, format!("expected a string ({}), got {}", ty.wit(), kind_of(other))),
    }
}

fn arr_of<'a>(ty: &WitType, v: &'a Value, path: &str) -> Result<&'a Vec<Value>, ConvError> {
    match v {
        Value::Array(a) => Ok(a),
        other => err(path, format!("expected an array ({}), got {}", ty.wit(), kind_of(other))),
    }
}

fn obj_of<'a>(ty: &WitType, v: &'a Value, path: &str) -> Result<&'a Map<String, Value>, ConvError> {
    match v {
        Value::Object(o) => Ok(o),
        other => err(path, format!("expected an object ({}), got {}", ty.wit(), kind_of(other))),
    }
}

/// The single `{"name": value}` of an object (variants, results, nested
/// options).
fn single<'a>(ty: &WitType, v: &'a Value, path: &str, names: &[&str]) -> Result<(&'a String, &'a Value), ConvError> {
    let o = obj_of(ty, v, path)?;
    let mut it = o.iter();
    match (it.next(), it.next()) {
        (Some((k, v)), None) if names.contains(&k.as_str()) => Ok((k, v)),
        _ => err(path, format!("expected an object with exactly one of {} ({})", names.join(", "), ty.wit())),
    }
}

/// JSON → value of `ty`; `path` names the place in errors.
pub fn to_val(ty: &WitType, v: &Value, path: &str) -> Result<Val, ConvError> {
    Ok(match ty {
        WitType::Bool => match v {
            Value::Bool(b) => Val::Bool(*b),
            other => return err(path, format!("expected a boolean, got {}", kind_of(other))),
        },
        // The range checks in `int_of` make these casts exact.
        WitType::S8 => Val::S8(int_of(ty, v, path)? as i8),
        WitType::U8 => Val::U8(int_of(ty, v, path)? as u8),
        WitType::S16 => Val::S16(int_of(ty, v, path)? as i16),
        WitType::U16 => Val::U16(int_of(ty, v, path)? as u16),
        WitType::S32 => Val::S32(int_of(ty, v, path)? as i32),
        WitType::U32 => Val::U32(int_of(ty, v, path)? as u32),
        WitType::S64 => Val::S64(int_of(ty, v, path)? as i64),
        WitType::U64 => Val::U64(int_of(ty, v, path)? as u64),
        WitType::F32 => {
            let f = float_of(ty, v, path)?;
            if f.abs() > f64::from(f32::MAX) {
                return err(path, format!("{f} is out of range for f32"));
            }
            // Rounded from the decimal text, not from the nearest f64.
            Val::Float32(v.to_string().parse::<f32>().unwrap_or(f as f32))
        }
        WitType::F64 => Val::Float64(float_of(ty, v, path)?),
        WitType::Char => {
            let s = str_of(ty, v, path)?;
            let mut chars = s.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => Val::Char(c),
                _ => return err(path, format!("expected a string of one character, got {}", kind_of(v))),
            }
        }
        WitType::String => Val::String(str_of(ty, v, path)?.to_string()),
        WitType::List(t) if **t == WitType::U8 => {
            let s = str_of(ty, v, path)?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(s)
                .map_err(|e| ConvError { path: path.into(), message: format!("expected base64 (list<u8>): {e}") })?;
            Val::List(bytes.into_iter().map(Val::U8).collect())
        }
        WitType::List(t) => Val::List(
            arr_of(ty, v, path)?
                .iter()
                .enumerate()
                .map(|(i, x)| to_val(t, x, &format!("{path}[{i}]")))
                .collect::<Result<_, _>>()?,
        ),
        WitType::FixedList(t, n) => {
            let a = arr_of(ty, v, path)?;
            if a.len() != *n as usize {
                return err(path, format!("expected exactly {n} items ({}), got {}", ty.wit(), a.len()));
            }
            Val::FixedLengthList(
                a.iter().enumerate().map(|(i, x)| to_val(t, x, &format!("{path}[{i}]"))).collect::<Result<_, _>>()?,
            )
        }
        WitType::Map(k, val) => {
            let a = arr_of(ty, v, path)?;
            let mut out = Vec::with_capacity(a.len());
            for (i, pair) in a.iter().enumerate() {
                let p = format!("{path}[{i}]");
                match pair {
                    Value::Array(kv) if kv.len() == 2 => {
                        out.push((to_val(k, &kv[0], &format!("{p}[0]"))?, to_val(val, &kv[1], &format!("{p}[1]"))?));
                    }
                    other => return err(&p, format!("expected a [key, value] pair, got {}", kind_of(other))),
                }
            }
            Val::Map(out)
        }
        WitType::Record(fields) => {
            let o = obj_of(ty, v, path)?;
            if let Some(k) = o.keys().find(|k| !fields.iter().any(|(n, _)| n == *k)) {
                let known: Vec<&str> = fields.iter().map(|(n, _)| n.as_str()).collect();
                return err(&format!("{path}.{k}"), format!("no such field (the fields are: {})", known.join(", ")));
            }
            let mut out = Vec::with_capacity(fields.len());
            for (name, t) in fields {
                let p = format!("{path}.{name}");
                let val = match o.get(name) {
                    Some(x) => to_val(t, x, &p)?,
                    None if matches!(t, WitType::Option(_)) => Val::Option(None),
                    None => return err(&p, format!("missing (required, {})", t.wit())),
                };
                out.push((name.clone(), val));
            }
            Val::Record(out)
        }
        WitType::Tuple(items) => {
            let a = arr_of(ty, v, path)?;
            if a.len() != items.len() {
                return err(path, format!("expected exactly {} items ({}), got {}", items.len(), ty.wit(), a.len()));
            }
            Val::Tuple(
                items
                    .iter()
                    .zip(a)
                    .enumerate()
                    .map(|(i, (t, x))| to_val(t, x, &format!("{path}[{i}]")))
                    .collect::<Result<_, _>>()?,
            )
        }
        WitType::Variant(cases) => {
            let names: Vec<&str> = cases.iter().map(|(n, _)| n.as_str()).collect();
            match v {
                Value::String(s) => match cases.iter().find(|(n, _)| n == s) {
                    Some((n, None)) => Val::Variant(n.clone(), None),
                    Some((n, Some(t))) => {
                        return err(path, format!("case `{n}` takes a value ({}): write {{\"{n}\": …}}", t.wit()));
                    }
                    None => return err(path, format!("no case {} (the cases are: {})", kind_of(v), names.join(", "))),
                },
                _ => {
                    let (k, x) = single(ty, v, path, &names)?;
                    match cases.iter().find(|(n, _)| n == k) {
                        Some((n, Some(t))) => {
                            Val::Variant(n.clone(), Some(Box::new(to_val(t, x, &format!("{path}.{n}"))?)))
                        }
                        Some((n, None)) => return err(path, format!("case `{n}` takes no value: write \"{n}\"")),
                        None => return err(path, format!("no case `{k}`")),
                    }
                }
            }
        }
        WitType::Enum(names) => {
            let s = str_of(ty, v, path)?;
            if !names.iter().any(|n| n == s) {
                return err(path, format!("expected one of {}, got {}", names.join(", "), kind_of(v)));
            }
            Val::Enum(s.to_string())
        }
        WitType::Flags(names) => {
            let a = arr_of(ty, v, path)?;
            let mut set: Vec<String> = Vec::with_capacity(a.len());
            for (i, x) in a.iter().enumerate() {
                let p = format!("{path}[{i}]");
                let s = str_of(ty, x, &p)?;
                if !names.iter().any(|n| n == s) {
                    return err(&p, format!("expected one of {}, got {}", names.join(", "), kind_of(x)));
                }
                if set.iter().any(|n| n == s) {
                    return err(&p, format!("flag `{s}` named twice"));
                }
                set.push(s.to_string());
            }
            // Declaration order, as wasmtime lifts them.
            Val::Flags(names.iter().filter(|n| set.contains(n)).cloned().collect())
        }
        WitType::Option(t) => match v {
            Value::Null => Val::Option(None),
            _ if t.nullable() => {
                let (_, x) = single(ty, v, path, &["some"])?;
                Val::Option(Some(Box::new(to_val(t, x, &format!("{path}.some"))?)))
            }
            _ => Val::Option(Some(Box::new(to_val(t, v, path)?))),
        },
        WitType::Result(ok, er) => {
            let (k, x) = single(ty, v, path, &["ok", "err"])?;
            let side = if k == "ok" { ok } else { er };
            let p = format!("{path}.{k}");
            let payload = match side {
                Some(t) => Some(Box::new(to_val(t, x, &p)?)),
                None if x.is_null() => None,
                None => return err(&p, format!("takes no value: write null, got {}", kind_of(x))),
            };
            Val::Result(if k == "ok" { Ok(payload) } else { Err(payload) })
        }
    })
}

fn wide_int(n: i128) -> Value {
    if n.abs() <= i128::from(MAX_SAFE_INTEGER) {
        Value::Number(Number::from(n as i64))
    } else {
        Value::String(n.to_string())
    }
}

fn float_json(f: f64) -> Value {
    match Number::from_f64(f) {
        Some(n) => Value::Number(n),
        None if f.is_nan() => Value::String("NaN".into()),
        None if f > 0.0 => Value::String("Infinity".into()),
        None => Value::String("-Infinity".into()),
    }
}

/// A value of `ty` (a function's result) → JSON; `path` names the place
/// when the value does not have the type.
pub fn to_json(ty: &WitType, val: &Val, path: &str) -> Result<Value, ConvError> {
    let mismatch = || err(path, format!("the component returned {val:?} where {} was declared", ty.wit()));
    Ok(match (ty, val) {
        (WitType::Bool, Val::Bool(b)) => Value::Bool(*b),
        (WitType::S8, Val::S8(n)) => json!(n),
        (WitType::U8, Val::U8(n)) => json!(n),
        (WitType::S16, Val::S16(n)) => json!(n),
        (WitType::U16, Val::U16(n)) => json!(n),
        (WitType::S32, Val::S32(n)) => json!(n),
        (WitType::U32, Val::U32(n)) => json!(n),
        (WitType::S64, Val::S64(n)) => wide_int(i128::from(*n)),
        (WitType::U64, Val::U64(n)) => wide_int(i128::from(*n)),
        // The shortest decimal that reads back as the same f32.
        (WitType::F32, Val::Float32(f)) => float_json(f.to_string().parse::<f64>().unwrap_or(f64::from(*f))),
        (WitType::F64, Val::Float64(f)) => float_json(*f),
        (WitType::Char, Val::Char(c)) => Value::String(c.to_string()),
        (WitType::String, Val::String(s)) => Value::String(s.clone()),
        (WitType::List(t), Val::List(items)) if **t == WitType::U8 => {
            let mut bytes = Vec::with_capacity(items.len());
            for (i, x) in items.iter().enumerate() {
                match x {
                    Val::U8(b) => bytes.push(*b),
                    _ => return err(&format!("{path}[{i}]"), "not a u8"),
                }
            }
            Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
        }
        (WitType::List(t), Val::List(items)) | (WitType::FixedList(t, _), Val::FixedLengthList(items)) => Value::Array(
            items.iter().enumerate().map(|(i, x)| to_json(t, x, &format!("{path}[{i}]"))).collect::<Result<_, _>>()?,
        ),
        (WitType::Map(k, v), Val::Map(pairs)) => Value::Array(
            pairs
                .iter()
                .enumerate()
                .map(|(i, (a, b))| {
                    let p = format!("{path}[{i}]");
                    Ok(json!([to_json(k, a, &format!("{p}[0]"))?, to_json(v, b, &format!("{p}[1]"))?]))
                })
                .collect::<Result<_, _>>()?,
        ),
        (WitType::Record(fields), Val::Record(vals)) => {
            if fields.len() != vals.len() {
                return mismatch();
            }
            let mut o = Map::new();
            for ((name, t), (vname, x)) in fields.iter().zip(vals) {
                if name != vname {
                    return mismatch();
                }
                o.insert(name.clone(), to_json(t, x, &format!("{path}.{name}"))?);
            }
            Value::Object(o)
        }
        (WitType::Tuple(types), Val::Tuple(vals)) if types.len() == vals.len() => Value::Array(
            types
                .iter()
                .zip(vals)
                .enumerate()
                .map(|(i, (t, x))| to_json(t, x, &format!("{path}[{i}]")))
                .collect::<Result<_, _>>()?,
        ),
        (WitType::Variant(cases), Val::Variant(name, payload)) => {
            match (cases.iter().find(|(n, _)| n == name), payload) {
                (Some((n, None)), None) => Value::String(n.clone()),
                (Some((n, Some(t))), Some(x)) => json!({n.clone(): to_json(t, x, &format!("{path}.{n}"))?}),
                _ => return mismatch(),
            }
        }
        (WitType::Enum(names), Val::Enum(name)) if names.contains(name) => Value::String(name.clone()),
        (WitType::Flags(names), Val::Flags(set)) if set.iter().all(|s| names.contains(s)) => {
            Value::Array(names.iter().filter(|n| set.contains(n)).map(|n| Value::String(n.clone())).collect())
        }
        (WitType::Option(_), Val::Option(None)) => Value::Null,
        (WitType::Option(t), Val::Option(Some(x))) => {
            if t.nullable() {
                json!({"some": to_json(t, x, &format!("{path}.some"))?})
            } else {
                to_json(t, x, path)?
            }
        }
        (WitType::Result(ok, er), Val::Result(r)) => {
            let (k, side, payload) = match r {
                Ok(p) => ("ok", ok, p),
                Err(p) => ("err", er, p),
            };
            let inner = match (side, payload) {
                (Some(t), Some(x)) => to_json(t, x, &format!("{path}.{k}"))?,
                (None, None) => Value::Null,
                _ => return mismatch(),
            };
            json!({k: inner})
        }
        _ => return mismatch(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn point() -> WitType {
        WitType::Record(vec![
            ("x".into(), WitType::F64),
            ("y".into(), WitType::F64),
            ("label".into(), WitType::Option(Box::new(WitType::String))),
        ])
    }

    fn shape() -> WitType {
        WitType::Variant(vec![
            ("circle".into(), Some(WitType::F64)),
            ("rect".into(), Some(point())),
            ("empty".into(), None),
        ])
    }

    fn validator(schema: &Value) -> jsonschema::Validator {
        jsonschema::draft202012::meta::validate(schema).expect("a 2020-12 schema");
        jsonschema::draft202012::new(schema).unwrap()
    }

    #[test]
    fn integers_carry_their_range() {
        assert_eq!(WitType::U8.schema(), json!({"type": "integer", "minimum": 0, "maximum": 255}));
        assert_eq!(WitType::S32.schema()["minimum"], json!(i32::MIN));
        let e = to_val(&WitType::U8, &json!(256), "a").unwrap_err();
        assert_eq!(e.path, "a");
        assert!(e.message.contains("out of range"), "{e}");
        assert_eq!(to_val(&WitType::S8, &json!(-128), "a").unwrap(), Val::S8(-128));
        assert!(to_val(&WitType::S8, &json!(1.5), "a").is_err());
        assert_eq!(to_val(&WitType::S8, &json!(3.0), "a").unwrap(), Val::S8(3));
        assert!(to_val(&WitType::U32, &json!("5"), "a").is_err(), "only 64-bit integers take strings");
    }

    #[test]
    fn wide_integers_beyond_2_53_are_strings() {
        let big = u64::MAX;
        assert_eq!(to_json(&WitType::U64, &Val::U64(big), "r").unwrap(), json!(big.to_string()));
        assert_eq!(to_json(&WitType::U64, &Val::U64(1 << 53), "r").unwrap(), json!((1u64 << 53).to_string()));
        assert_eq!(to_json(&WitType::U64, &Val::U64((1 << 53) - 1), "r").unwrap(), json!((1u64 << 53) - 1));
        assert_eq!(to_json(&WitType::S64, &Val::S64(i64::MIN), "r").unwrap(), json!(i64::MIN.to_string()));
        assert_eq!(to_val(&WitType::U64, &json!(big.to_string()), "g").unwrap(), Val::U64(big));
        assert_eq!(to_val(&WitType::S64, &json!("-9223372036854775808"), "h").unwrap(), Val::S64(i64::MIN));
        let e = to_val(&WitType::U64, &json!(1u64 << 60), "g").unwrap_err();
        assert!(e.message.contains("decimal string"), "{e}");
        assert!(to_val(&WitType::U64, &json!("18446744073709551616"), "g").is_err(), "u64::MAX + 1");
        assert!(to_val(&WitType::U64, &json!("-1"), "g").is_err());
        assert!(to_val(&WitType::S64, &json!("007"), "g").is_err(), "not canonical");
        assert!(to_val(&WitType::S64, &json!("1e3"), "g").is_err());
    }

    #[test]
    fn errors_name_the_path() {
        let params = vec![("a".to_string(), point()), ("b".to_string(), point())];
        let e =
            params_to_vals(&params, &json!({"a": {"x": 1, "y": 2, "label": 5}, "b": {"x": 0, "y": 0}})).unwrap_err();
        assert_eq!(e.path, "a.label");
        assert!(e.to_string().starts_with("`a.label`: expected a string"), "{e}");
        let e = params_to_vals(&params, &json!({"a": {"x": 1, "y": 2}})).unwrap_err();
        assert_eq!(e.path, "b");
        assert!(e.message.contains("missing"), "{e}");
        let e = params_to_vals(&params, &json!({"a": {"x": 1, "y": 2, "z": 1}, "b": {"x": 0, "y": 0}})).unwrap_err();
        assert_eq!(e.path, "a.z");
        let e = params_to_vals(&params, &json!({"a": {"x": 1, "y": 2}, "b": {"x": 0, "y": 0}, "c": 1})).unwrap_err();
        assert_eq!(e.path, "c");
        let list = WitType::List(Box::new(shape()));
        let e = to_val(&list, &json!([{"circle": 1}, {"rect": {"x": 1, "y": "no"}}]), "s").unwrap_err();
        assert_eq!(e.path, "s[1].rect.y");
    }

    #[test]
    fn variants_options_results_and_flags() {
        let s = shape();
        assert_eq!(to_val(&s, &json!("empty"), "s").unwrap(), Val::Variant("empty".into(), None));
        assert_eq!(
            to_val(&s, &json!({"circle": 1.5}), "s").unwrap(),
            Val::Variant("circle".into(), Some(Box::new(Val::Float64(1.5))))
        );
        assert!(to_val(&s, &json!("circle"), "s").unwrap_err().message.contains("takes a value"));
        assert!(to_val(&s, &json!({"circle": 1, "empty": null}), "s").is_err());
        let nested = WitType::Option(Box::new(WitType::Option(Box::new(WitType::U8))));
        assert_eq!(
            to_json(&nested, &Val::Option(Some(Box::new(Val::Option(None)))), "o").unwrap(),
            json!({"some": null})
        );
        assert_eq!(to_val(&nested, &json!(null), "o").unwrap(), Val::Option(None));
        let r = WitType::Result(None, Some(Box::new(WitType::String)));
        assert_eq!(to_json(&r, &Val::Result(Ok(None)), "r").unwrap(), json!({"ok": null}));
        assert!(to_val(&r, &json!({"ok": 1}), "r").is_err());
        let f = WitType::Flags(vec!["read".into(), "write".into(), "exec".into()]);
        assert_eq!(to_val(&f, &json!(["exec", "read"]), "p").unwrap(), Val::Flags(vec!["read".into(), "exec".into()]));
        assert_eq!(to_val(&f, &json!(["read", "read"]), "p").unwrap_err().path, "p[1]");
        let bytes = WitType::List(Box::new(WitType::U8));
        assert_eq!(to_val(&bytes, &json!("AQID"), "d").unwrap(), Val::List(vec![Val::U8(1), Val::U8(2), Val::U8(3)]));
        assert!(to_val(&bytes, &json!("not base64!"), "d").is_err());
        assert_eq!(to_val(&WitType::Char, &json!("é"), "c").unwrap(), Val::Char('é'));
        assert!(to_val(&WitType::Char, &json!("ab"), "c").is_err());
        assert!(to_val(&WitType::F32, &json!(1e300), "f").is_err());
        assert_eq!(to_json(&WitType::F64, &Val::Float64(f64::NAN), "f").unwrap(), json!("NaN"));
        assert_eq!(to_json(&WitType::F32, &Val::Float32(0.1), "f").unwrap(), json!(0.1));
    }

    #[test]
    fn record_fields_are_required_unless_options() {
        let schema = point().schema();
        assert_eq!(schema["required"], json!(["x", "y"]));
        assert_eq!(schema["additionalProperties"], json!(false));
        let v = validator(&schema);
        assert!(v.is_valid(&json!({"x": 1, "y": 2})));
        assert!(!v.is_valid(&json!({"x": 1})));
        assert!(!v.is_valid(&json!({"x": 1, "y": 2, "z": 3})));
    }

    #[test]
    fn wasmtime_types_map_and_resources_are_refused() {
        let engine = wasmtime::Engine::default();
        let wat = r#"(component
            (type $p (record (field "x" f64) (field "label" (option string))))
            (import "point" (type $point (eq $p)))
            (type $c (enum "red" "green"))
            (import "color" (type $color (eq $c)))
            (import "r" (type $r (sub resource)))
            (import "f" (func (param "a" $point) (param "c" $color) (param "t" (tuple u64 (list u8))) (result (result s32 (error string)))))
            (import "g" (func (param "h" (own $r))))
            (import "s" (func (param "l" (list (borrow $r)))))
        )"#;
        let bytes = wat::parse_str(wat).unwrap();
        let c = wasmtime::component::Component::new(&engine, &bytes).unwrap();
        let mut seen = 0;
        for (name, item) in c.component_type().imports(&engine) {
            let wasmtime::component::types::ComponentItem::ComponentFunc(f) = item.ty else { continue };
            seen += 1;
            let params: Vec<Result<WitType, Unsupported>> =
                f.params().map(|(_, t)| WitType::from_wasmtime(&t)).collect();
            match name {
                "f" => {
                    let got: Vec<WitType> = params.into_iter().map(Result::unwrap).collect();
                    assert_eq!(
                        got,
                        vec![
                            WitType::Record(vec![
                                ("x".into(), WitType::F64),
                                ("label".into(), WitType::Option(Box::new(WitType::String)))
                            ]),
                            WitType::Enum(vec!["red".into(), "green".into()]),
                            WitType::Tuple(vec![WitType::U64, WitType::List(Box::new(WitType::U8))]),
                        ]
                    );
                    let r = WitType::from_wasmtime(&f.results().next().unwrap()).unwrap();
                    assert_eq!(r.wit(), "result<s32, string>");
                }
                "g" => assert!(params[0].as_ref().unwrap_err().what.contains("own")),
                "s" => assert!(params[0].as_ref().unwrap_err().what.contains("borrow")),
                other => panic!("unexpected import {other}"),
            }
        }
        assert_eq!(seen, 3);
    }

    fn arb_name(i: usize) -> String {
        format!("n{i}-x")
    }

    fn arb_type() -> impl Strategy<Value = WitType> {
        let leaf = prop_oneof![
            Just(WitType::Bool),
            Just(WitType::S8),
            Just(WitType::U8),
            Just(WitType::S16),
            Just(WitType::U16),
            Just(WitType::S32),
            Just(WitType::U32),
            Just(WitType::S64),
            Just(WitType::U64),
            Just(WitType::F32),
            Just(WitType::F64),
            Just(WitType::Char),
            Just(WitType::String),
            (1usize..5).prop_map(|n| WitType::Enum((0..n).map(arb_name).collect())),
            (1usize..5).prop_map(|n| WitType::Flags((0..n).map(arb_name).collect())),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                inner.clone().prop_map(|t| WitType::List(Box::new(t))),
                (inner.clone(), 0u32..4).prop_map(|(t, n)| WitType::FixedList(Box::new(t), n)),
                (inner.clone(), inner.clone()).prop_map(|(k, v)| WitType::Map(Box::new(k), Box::new(v))),
                prop::collection::vec(inner.clone(), 1..4).prop_map(|ts| WitType::Record(
                    ts.into_iter().enumerate().map(|(i, t)| (arb_name(i), t)).collect()
                )),
                prop::collection::vec(inner.clone(), 1..4).prop_map(WitType::Tuple),
                prop::collection::vec(prop::option::of(inner.clone()), 1..4).prop_map(|ts| WitType::Variant(
                    ts.into_iter().enumerate().map(|(i, t)| (arb_name(i), t)).collect()
                )),
                inner.clone().prop_map(|t| WitType::Option(Box::new(t))),
                (prop::option::of(inner.clone()), prop::option::of(inner))
                    .prop_map(|(o, e)| WitType::Result(o.map(Box::new), e.map(Box::new))),
            ]
        })
    }

    fn arb_val(ty: &WitType) -> BoxedStrategy<Val> {
        match ty.clone() {
            WitType::Bool => any::<bool>().prop_map(Val::Bool).boxed(),
            WitType::S8 => any::<i8>().prop_map(Val::S8).boxed(),
            WitType::U8 => any::<u8>().prop_map(Val::U8).boxed(),
            WitType::S16 => any::<i16>().prop_map(Val::S16).boxed(),
            WitType::U16 => any::<u16>().prop_map(Val::U16).boxed(),
            WitType::S32 => any::<i32>().prop_map(Val::S32).boxed(),
            WitType::U32 => any::<u32>().prop_map(Val::U32).boxed(),
            WitType::S64 => any::<i64>().prop_map(Val::S64).boxed(),
            WitType::U64 => any::<u64>().prop_map(Val::U64).boxed(),
            WitType::F32 => any::<f32>().prop_filter("finite", |f| f.is_finite()).prop_map(Val::Float32).boxed(),
            WitType::F64 => any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Val::Float64).boxed(),
            WitType::Char => any::<char>().prop_map(Val::Char).boxed(),
            WitType::String => ".{0,8}".prop_map(Val::String).boxed(),
            WitType::List(t) => prop::collection::vec(arb_val(&t), 0..4).prop_map(Val::List).boxed(),
            WitType::FixedList(t, n) => {
                prop::collection::vec(arb_val(&t), n as usize).prop_map(Val::FixedLengthList).boxed()
            }
            WitType::Map(k, v) => prop::collection::vec((arb_val(&k), arb_val(&v)), 0..3).prop_map(Val::Map).boxed(),
            WitType::Record(fields) => {
                let names: Vec<String> = fields.iter().map(|(n, _)| n.clone()).collect();
                fields
                    .iter()
                    .map(|(_, t)| arb_val(t))
                    .collect::<Vec<_>>()
                    .prop_map(move |vals| Val::Record(names.iter().cloned().zip(vals).collect()))
                    .boxed()
            }
            WitType::Tuple(ts) => ts.iter().map(arb_val).collect::<Vec<_>>().prop_map(Val::Tuple).boxed(),
            WitType::Variant(cases) => {
                let alts: Vec<BoxedStrategy<Val>> = cases
                    .into_iter()
                    .map(|(n, t)| match t {
                        None => Just(Val::Variant(n, None)).boxed(),
                        Some(t) => arb_val(&t).prop_map(move |v| Val::Variant(n.clone(), Some(Box::new(v)))).boxed(),
                    })
                    .collect();
                prop::strategy::Union::new(alts).boxed()
            }
            WitType::Enum(names) => prop::sample::select(names).prop_map(Val::Enum).boxed(),
            WitType::Flags(names) => {
                prop::sample::subsequence(names.clone(), 0..=names.len()).prop_map(Val::Flags).boxed()
            }
            WitType::Option(t) => prop::option::of(arb_val(&t)).prop_map(|o| Val::Option(o.map(Box::new))).boxed(),
            WitType::Result(o, e) => {
                let side = |t: Option<Box<WitType>>| match t {
                    None => Just(None).boxed(),
                    Some(t) => arb_val(&t).prop_map(|v| Some(Box::new(v))).boxed(),
                };
                prop_oneof![side(o).prop_map(|p| Val::Result(Ok(p))), side(e).prop_map(|p| Val::Result(Err(p)))].boxed()
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// JSON → value → JSON is the identity for the JSON form of random
        /// values of random types; the value survives too, and the JSON is
        /// valid under the type's schema, itself a valid 2020-12 schema.
        #[test]
        fn json_round_trips((ty, val) in arb_type().prop_flat_map(|t| { let v = arb_val(&t); (Just(t), v) })) {
            let json = to_json(&ty, &val, "v").unwrap();
            let back = to_val(&ty, &json, "v").unwrap();
            prop_assert_eq!(&back, &val, "type {}", ty.wit());
            prop_assert_eq!(to_json(&ty, &back, "v").unwrap(), json.clone());
            let schema = ty.schema();
            let v = validator(&schema);
            prop_assert!(v.is_valid(&json), "{} does not validate against {} ({})", json, schema, ty.wit());
        }
    }
}
