//! JSON Schemas of tool arguments, derived from Rust types with `schemars`.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::Value;

/// The JSON Schema (draft 2020-12) of `T`, shaped for tool specs: every
/// subschema inlined (no `$ref`/`$defs` unless the type is recursive), and
/// without the `$schema` and `title` keys, which models do not need.
///
/// Doc comments on the type's fields become `description`s, which is what
/// the model reads: document every argument.
pub fn schema_for<T: JsonSchema>() -> Value {
    let settings = SchemaSettings::draft2020_12().with(|s| {
        s.inline_subschemas = true;
        s.meta_schema = None;
    });
    let mut schema = settings.into_generator().into_root_schema_for::<T>();
    schema.remove("title");
    schema.to_value()
}

/// [`schema_for`] as JSON text, the form the WIT `tool-spec` carries.
pub fn schema_text_for<T: JsonSchema>() -> String {
    schema_for::<T>().to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[derive(JsonSchema)]
    #[allow(dead_code)]
    struct Args {
        /// The path.
        path: String,
        /// Cap.
        limit: Option<u32>,
        inner: Inner,
    }

    #[derive(JsonSchema)]
    #[allow(dead_code)]
    struct Inner {
        flag: bool,
    }

    #[test]
    fn schema_is_inline_object_without_meta() {
        let s = schema_for::<Args>();
        assert_eq!(s["type"], "object");
        assert!(s.get("$schema").is_none());
        assert!(s.get("title").is_none());
        assert!(s.get("$defs").is_none());
        assert_eq!(s["properties"]["path"]["description"], "The path.");
        assert_eq!(s["properties"]["inner"]["type"], "object");
        let required = s["required"].as_array().cloned().unwrap_or_default();
        assert!(required.contains(&Value::from("path")));
        assert!(!required.contains(&Value::from("limit")));
    }

    #[test]
    fn no_args_is_an_empty_object() {
        let s = schema_for::<crate::NoArgs>();
        assert_eq!(s["type"], "object");
    }
}
