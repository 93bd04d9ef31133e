//! One `chat.completion.chunk`, read into what the stream assembler uses.
//!
//! Two readers produce the same [`Chunk`]:
//!
//! - [`Chunk::parse_typed`] reads the chunk's JSON text straight into typed
//!   fields, borrowing strings from the text where they have no escapes and
//!   skipping members it does not use. A stream is hundreds of chunks, and
//!   building a `serde_json::Value` (a map and an owned string per member)
//!   for each was most of the adapter's work per chunk.
//! - [`Chunk::from_value`] reads a parsed `Value`, with the lenient rules of
//!   the module docs of [`crate::stream`] and their error messages.
//!
//! The typed reader accepts only chunks it reads as [`Chunk::from_value`]
//! would: every object must be an object (never an array in its place),
//! every member it uses must have its expected type (or be `null`), and no
//! member it uses may appear twice. Anything else, and any chunk with an
//! `error` member, gives `None`, and the caller reads the chunk through a
//! `Value` instead, which then decides the outcome. The one difference is
//! in members neither reader uses: the typed reader skips them without
//! decoding them, so a lone UTF-16 surrogate escape or a number out of
//! `f64` range there does not fail the chunk as it does through a `Value`.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, Error as _, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;

use crate::error::{ErrorBody, ErrorCode, WireError, map_stream_error, truncate_chars};
use crate::stream::Usage;

/// What the assembler takes from one chunk.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Chunk<'a> {
    /// The last `usage` object of the chunk, if it is one.
    pub usage: Option<Usage>,
    /// The choices with index 0, in order (only one is ever requested).
    pub choices: Vec<Choice<'a>>,
}

/// One index-0 choice's delta and finish reason.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Choice<'a> {
    pub reasoning: Option<Cow<'a, str>>,
    pub content: Option<Cow<'a, str>>,
    pub fragments: Vec<Fragment<'a>>,
    /// A non-empty `finish_reason`.
    pub finish_reason: Option<Cow<'a, str>>,
}

/// One `tool_calls` fragment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Fragment<'a> {
    /// Its `index`, else its position in the delta's list.
    pub index: u64,
    pub id: Option<Cow<'a, str>>,
    pub name: Option<Cow<'a, str>>,
    pub arguments: Option<Cow<'a, str>>,
}

fn malformed(msg: &str) -> WireError {
    WireError::new(ErrorCode::MalformedResponse, msg.to_string())
}

/// A string member that may be absent or null.
fn str_field<'a>(v: &'a Value, key: &str) -> Result<Option<Cow<'a, str>>, WireError> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(Cow::Borrowed(s))),
        Some(_) => Err(malformed(&format!("{key} is not a string"))),
    }
}

impl<'a> Chunk<'a> {
    /// Reads a parsed chunk; an `error` member is the stream's error.
    pub fn from_value(chunk: &'a Value) -> Result<Self, WireError> {
        let Some(obj) = chunk.as_object() else {
            return Err(WireError::new(
                ErrorCode::MalformedResponse,
                format!("chunk is not an object: {}", truncate_chars(&chunk.to_string(), 200)),
            ));
        };
        if let Some(err) = obj.get("error").filter(|e| !e.is_null()) {
            let body = ErrorBody::from_value(&serde_json::json!({ "error": err })).unwrap_or_default();
            return Err(map_stream_error(&body));
        }
        let mut out = Chunk { usage: obj.get("usage").and_then(Usage::from_value), choices: Vec::new() };
        let choices = match obj.get("choices") {
            None | Some(Value::Null) => return Ok(out),
            Some(Value::Array(c)) => c,
            Some(_) => return Err(malformed("choices is not an array")),
        };
        for choice in choices {
            if choice.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
                continue;
            }
            let mut c = Choice::default();
            if let Some(delta) = choice.get("delta").filter(|d| !d.is_null()) {
                c.reasoning = str_field(delta, "reasoning_content")?;
                c.content = str_field(delta, "content")?;
                match delta.get("tool_calls") {
                    None | Some(Value::Null) => {}
                    Some(Value::Array(calls)) => {
                        for (pos, frag) in calls.iter().enumerate() {
                            let function = frag.get("function").filter(|f| !f.is_null());
                            c.fragments.push(Fragment {
                                index: frag.get("index").and_then(Value::as_u64).unwrap_or(pos as u64),
                                id: str_field(frag, "id")?,
                                name: match function {
                                    Some(f) => str_field(f, "name")?,
                                    None => None,
                                },
                                arguments: match function {
                                    Some(f) => str_field(f, "arguments")?,
                                    None => None,
                                },
                            });
                        }
                    }
                    Some(_) => return Err(malformed("tool_calls is not an array")),
                }
            }
            c.finish_reason = match choice.get("finish_reason") {
                None | Some(Value::Null) => None,
                Some(Value::String(r)) => Some(Cow::Borrowed(r.as_str())).filter(|r| !r.is_empty()),
                Some(_) => return Err(malformed("finish_reason is not a string")),
            };
            out.choices.push(c);
        }
        Ok(out)
    }

    /// Reads a chunk's JSON text directly; `None` for anything the typed
    /// reader does not take exactly as [`Chunk::from_value`] would (see the
    /// module docs).
    pub fn parse_typed(data: &'a str) -> Option<Self> {
        let raw: RawChunk<'a> = serde_json::from_str(data).ok()?;
        if raw.error.is_some() {
            return None;
        }
        let mut out = Chunk { usage: raw.usage.as_ref().and_then(Usage::from_value), choices: Vec::new() };
        for choice in raw.choices.unwrap_or_default() {
            if choice.index.as_ref().and_then(Value::as_u64).unwrap_or(0) != 0 {
                continue;
            }
            let mut c = Choice {
                finish_reason: choice.finish_reason.map(|t| t.0).filter(|r| !r.is_empty()),
                ..Choice::default()
            };
            if let Some(delta) = choice.delta {
                c.reasoning = delta.reasoning_content.map(|t| t.0);
                c.content = delta.content.map(|t| t.0);
                for (pos, frag) in delta.tool_calls.unwrap_or_default().into_iter().enumerate() {
                    let (name, arguments) = match frag.function {
                        Some(f) => (f.name.map(|t| t.0), f.arguments.map(|t| t.0)),
                        None => (None, None),
                    };
                    c.fragments.push(Fragment {
                        index: frag.index.as_ref().and_then(Value::as_u64).unwrap_or(pos as u64),
                        id: frag.id.map(|t| t.0),
                        name,
                        arguments,
                    });
                }
            }
            out.choices.push(c);
        }
        Some(out)
    }
}

/// A JSON string, borrowed from the text when it has no escapes.
struct Text<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// A struct read only from a JSON object (derived structs also take
/// arrays), with every listed member optional (`null` is absent), a member
/// listed twice an error, and other members skipped.
macro_rules! object {
    ($name:ident<$de:lifetime> { $($field:ident: $ty:ty,)* }) => {
        struct $name<$de> {
            $($field: Option<$ty>,)*
            _text: PhantomData<&$de str>,
        }

        impl<$de> Deserialize<$de> for $name<$de> {
            fn deserialize<D: Deserializer<$de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<$de> Visitor<$de> for V {
                    type Value = $name<$de>;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str("an object")
                    }
                    fn visit_map<A: MapAccess<$de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                        $(let mut $field: Option<Option<$ty>> = None;)*
                        while let Some(key) = map.next_key::<Text<$de>>()? {
                            match key.0.as_ref() {
                                $(stringify!($field) => {
                                    if $field.is_some() {
                                        return Err(A::Error::custom(concat!("duplicate member ", stringify!($field))));
                                    }
                                    $field = Some(map.next_value()?);
                                })*
                                _ => {
                                    map.next_value::<IgnoredAny>()?;
                                }
                            }
                        }
                        Ok($name { $($field: $field.flatten(),)* _text: PhantomData })
                    }
                }
                d.deserialize_map(V)
            }
        }
    };
}

object!(RawChunk<'de> {
    error: IgnoredAny,
    usage: Value,
    choices: Vec<RawChoice<'de>>,
});

object!(RawChoice<'de> {
    index: Value,
    delta: RawDelta<'de>,
    finish_reason: Text<'de>,
});

object!(RawDelta<'de> {
    reasoning_content: Text<'de>,
    content: Text<'de>,
    tool_calls: Vec<RawFragment<'de>>,
});

object!(RawFragment<'de> {
    index: Value,
    id: Text<'de>,
    function: RawFunction<'de>,
});

object!(RawFunction<'de> {
    name: Text<'de>,
    arguments: Text<'de>,
});

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use proptest::prelude::*;

    /// Both readers on one chunk text: the typed one, when it takes the
    /// chunk, must agree with the generic one.
    fn agree(text: &str) {
        let Some(typed) = Chunk::parse_typed(text) else { return };
        let value: Value = serde_json::from_str(text).expect("the typed reader took text that is not JSON");
        let generic = Chunk::from_value(&value).expect("the typed reader took a chunk the generic one refuses");
        assert_eq!(typed, generic, "{text}");
    }

    #[test]
    fn typical_chunks_are_read_typed_with_borrowed_text() {
        let text = r#"{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Hel","reasoning_content":null},"logprobs":null,"finish_reason":null}],"usage":null}"#;
        let c = Chunk::parse_typed(text).unwrap();
        assert!(matches!(c.choices[0].content, Some(Cow::Borrowed("Hel"))));
        agree(text);
        let escaped = r#"{"choices":[{"index":0,"delta":{"content":"a\nb \u00e9"}}]}"#;
        assert_eq!(Chunk::parse_typed(escaped).unwrap().choices[0].content.as_deref(), Some("a\nb é"));
        agree(escaped);
        let calls = r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"c","type":"function","function":{"name":"read","arguments":"{\"p"}},{"function":{"arguments":"x"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#;
        let c = Chunk::parse_typed(calls).unwrap();
        assert_eq!(c.choices[0].fragments.len(), 2);
        assert_eq!(c.choices[0].fragments[1].index, 1, "no index: its position");
        agree(calls);
    }

    #[test]
    fn what_the_typed_reader_leaves_to_the_generic_one() {
        for text in [
            // Not an object, or an array in an object's place.
            "[null,null,null]",
            r#"{"choices":[[0,{"content":"x"}]]}"#,
            r#"{"choices":[{"delta":["x"]}]}"#,
            // A member twice (the generic reader keeps the last).
            r#"{"choices":[{"delta":{"content":"a","content":"b"}}]}"#,
            // Another type.
            r#"{"choices":[{"delta":{"content":5}}]}"#,
            r#"{"choices":{}}"#,
            // An error.
            r#"{"error":{"message":"x"}}"#,
        ] {
            assert_eq!(Chunk::parse_typed(text), None, "{text}");
        }
        // Unknown members and nulls are fine; unknown members are skipped
        // without being decoded.
        assert!(Chunk::parse_typed(r#"{"error":null,"x":[1,{"y":2}],"choices":null}"#).is_some());
        assert!(Chunk::parse_typed(r#"{"id":"\ud800","n":1e999,"choices":[]}"#).is_some());
        // Members it uses are decoded in full.
        assert_eq!(Chunk::parse_typed(r#"{"choices":[{"delta":{"content":"\ud800"}}]}"#), None);
        // Not JSON at all.
        assert_eq!(Chunk::parse_typed(r#"{"choices":[{"delta":{"content":"x"#), None);
    }

    fn json_leaf() -> impl Strategy<Value = Value> {
        // Mostly what a member may be (null, a string, a small index), so
        // many chunks pass the typed reader.
        prop_oneof![
            4 => Just(Value::Null),
            4 => "[a-c\\n\"é]{0,3}".prop_map(Value::String),
            2 => (0u64..3).prop_map(Value::from),
            1 => any::<bool>().prop_map(Value::Bool),
            1 => Just(Value::from(-1)),
            1 => Just(Value::from(1.5)),
        ]
    }

    /// An object with each of `members` present or not, mostly of its own
    /// shape, sometimes any leaf instead (so of another type, or null).
    fn object(members: Vec<(&'static str, BoxedStrategy<Value>)>) -> BoxedStrategy<Value> {
        let parts: Vec<_> = members
            .into_iter()
            .map(|(k, v)| {
                proptest::option::weighted(0.7, prop_oneof![4 => v, 1 => json_leaf()]).prop_map(move |v| (k, v))
            })
            .collect();
        parts
            .prop_map(|kv| Value::Object(kv.into_iter().filter_map(|(k, v)| Some((k.to_string(), v?))).collect()))
            .boxed()
    }

    fn text() -> BoxedStrategy<Value> {
        "[a-c\\n\"é]{0,3}".prop_map(Value::String).boxed()
    }

    /// Chunk-shaped JSON with every member's type and presence varied.
    fn chunkish() -> impl Strategy<Value = Value> {
        let index = || (0u64..3).prop_map(Value::from).boxed();
        let function = object(vec![("name", text()), ("arguments", text())]);
        let frag = prop_oneof![
            4 => object(vec![("index", index()), ("id", text()), ("function", function), ("type", text())]),
            1 => json_leaf()
        ];
        let delta = object(vec![
            ("content", text()),
            ("reasoning_content", text()),
            ("tool_calls", proptest::collection::vec(frag, 0..4).prop_map(Value::Array).boxed()),
        ]);
        let choice = prop_oneof![
            4 => object(vec![("index", index()), ("delta", delta), ("finish_reason", text())]),
            1 => json_leaf()
        ];
        let usage = object(vec![("prompt_tokens", index()), ("completion_tokens", index())]);
        object(vec![
            ("choices", proptest::collection::vec(choice, 0..3).prop_map(Value::Array).boxed()),
            ("usage", usage),
            ("error", json_leaf().boxed()),
            ("id", text()),
        ])
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn the_typed_reader_agrees_with_the_generic_one(chunk in chunkish()) {
            agree(&chunk.to_string());
        }

        /// Duplicate members only exist in text: splice one in.
        #[test]
        fn duplicate_members_are_left_to_the_generic_one(chunk in chunkish(), dup in json_leaf()) {
            let text = chunk.to_string();
            if let Some(rest) = text.strip_prefix('{') {
                let spliced = format!("{{\"choices\":{dup},{rest}");
                if serde_json::from_str::<Value>(&spliced).is_ok() {
                    agree(&spliced);
                }
            }
        }
    }
}
