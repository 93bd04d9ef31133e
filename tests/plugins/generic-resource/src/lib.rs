//! Fixture: a plain WIT component that exports a resource and a function
//! taking one (`counters.peek(c: borrow<counter>)`). A tool's arguments are
//! JSON, which cannot carry a handle, so Wharf must refuse to load it and say
//! which function and parameter are at fault.

// The generated bindings carry no doc comments of their own.
#![allow(missing_docs)]

use std::cell::Cell;

wit_bindgen::generate!({ path: "wit", world: "counter" });

use exports::example::counter::counters::{CounterBorrow, Guest, GuestCounter};

struct Fixture;

/// The resource's state.
pub struct Count(Cell<u32>);

impl GuestCounter for Count {
    fn new() -> Self {
        Self(Cell::new(0))
    }

    fn bump(&self) -> u32 {
        let n = self.0.get().wrapping_add(1);
        self.0.set(n);
        n
    }
}

impl Guest for Fixture {
    type Counter = Count;

    fn peek(c: CounterBorrow<'_>) -> u32 {
        c.get::<Count>().0.get()
    }

    fn version() -> String {
        "0.1.0".into()
    }
}

export!(Fixture);
