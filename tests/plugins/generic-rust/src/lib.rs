//! Fixture: the shared generic WIT (`tests/generic/wit/types.wit`) in Rust,
//! built with `wit-bindgen` directly: a component that knows nothing of
//! Wharf. Every function does exactly what its doc comment in the WIT says;
//! the JavaScript, Python and C fixtures behave identically. `build.rs`
//! embeds the WIT's doc comments (a `package-docs` section), so Wharf shows
//! them as the tools' descriptions.

// The generated bindings carry no doc comments of their own.
#![allow(missing_docs)]

wit_bindgen::generate!({ path: "../../generic/wit", world: "types" });

// The WIT's doc comments, as the component's `package-docs` section.
include!(concat!(env!("OUT_DIR"), "/package_docs.rs"));

use exports::example::types::kinds::{Color, Guest as Kinds, Perms, Point, Shape};

struct Fixture;

impl Guest for Fixture {
    fn greet(name: String) -> String {
        format!("Hello, {name}!")
    }
}

impl Kinds for Fixture {
    fn add(a: i32, b: i32) -> i32 {
        a.wrapping_add(b)
    }

    #[allow(clippy::type_complexity)]
    fn ints(a: u8, b: i8, c: u16, d: i16, e: u32, f: i32, g: u64, h: i64) -> (u8, i8, u16, i16, u32, i32, u64, i64) {
        (a, b, c, d, e, f, g, h)
    }

    fn floats(a: f32, b: f64) -> f64 {
        f64::from(a) + b
    }

    fn next_char(c: char) -> char {
        match c {
            '\u{D7FF}' => '\u{E000}',
            '\u{10FFFF}' => '\u{0}',
            c => char::from_u32(c as u32 + 1).unwrap_or('\u{0}'),
        }
    }

    fn shout(s: String) -> String {
        let mut out = s.to_ascii_uppercase();
        out.push('!');
        out
    }

    fn reverse_bytes(mut data: Vec<u8>) -> Vec<u8> {
        data.reverse();
        data
    }

    fn sum(xs: Vec<i64>) -> i64 {
        xs.into_iter().fold(0i64, i64::wrapping_add)
    }

    fn mid(a: Point, b: Point) -> Point {
        Point { x: (a.x + b.x) / 2.0, y: (a.y + b.y) / 2.0, label: a.label.or(b.label) }
    }

    fn swap(t: (String, u32)) -> (u32, String) {
        (t.1, t.0)
    }

    fn area(s: Shape) -> f64 {
        match s {
            Shape::Circle(r) => std::f64::consts::PI * r * r,
            Shape::Rect(p) => p.x * p.y,
            Shape::Empty => 0.0,
        }
    }

    fn rotate(c: Color) -> Color {
        match c {
            Color::Red => Color::Green,
            Color::Green => Color::Blue,
            Color::Blue => Color::Red,
        }
    }

    fn toggle(p: Perms) -> Perms {
        (Perms::READ | Perms::WRITE | Perms::EXEC) ^ p
    }

    fn double(x: Option<u32>) -> Option<u32> {
        x.map(|x| x.wrapping_mul(2))
    }

    fn divide(a: i32, b: i32) -> Result<i32, String> {
        if b == 0 {
            return Err("division by zero".into());
        }
        a.checked_div(b).ok_or_else(|| "overflow".to_string())
    }
}

export!(Fixture);
