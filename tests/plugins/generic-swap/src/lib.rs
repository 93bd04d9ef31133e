//! Fixture: the second version of a generic component. Put in place of
//! `generic-rust` while `wharf mcp serve` runs, it drops the `kinds`
//! interface, keeps `greet` (with another answer) and adds `farewell`
//! (tests/all/generic_components.rs).

// The generated bindings carry no doc comments of their own.
#![allow(missing_docs)]

wit_bindgen::generate!({ path: "wit", world: "swap" });

struct Fixture;

impl Guest for Fixture {
    fn greet(name: String) -> String {
        format!("Hello again, {name}!")
    }

    fn farewell(name: String) -> String {
        format!("Goodbye, {name}!")
    }
}

export!(Fixture);
