//! The tool-argument validator (`wharf_core::schema`) with an arbitrary
//! schema and an arbitrary value: no panic, no runaway recursion (`$ref`
//! cycles, deep nesting), at most 20 errors, each naming a JSON Pointer,
//! the same verdict twice, and `true` accepts everything.
//!
//! Input: schema JSON, a NUL byte, value JSON (if either is not JSON, the
//! other is used for both).
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use wharf_core::schema::validate;
use wharf_fuzz::Input;

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let schema = serde_json::from_slice::<Value>(input.field(0)).ok();
    let value = serde_json::from_slice::<Value>(input.rest()).ok();
    let (schema, value) = match (schema, value) {
        (Some(s), Some(v)) => (s, v),
        (Some(s), None) => (s.clone(), s),
        (None, Some(v)) => (v.clone(), v),
        (None, None) => return,
    };
    let verdict = validate(&schema, &value);
    if let Err(errs) = &verdict {
        assert!(!errs.0.is_empty() && errs.0.len() <= 20, "{} errors", errs.0.len());
        for e in &errs.0 {
            assert!(e.path.is_empty() || e.path.starts_with('/'), "not a JSON Pointer: {:?}", e.path);
            assert!(!e.message.is_empty());
        }
        let _ = errs.to_string();
    }
    assert_eq!(validate(&schema, &value), verdict, "validation is not deterministic");
    assert!(validate(&Value::Bool(true), &value).is_ok());
    assert!(validate(&serde_json::json!({}), &value).is_ok());
});
