//! The component's shadow stack: 8 MiB instead of the 128 KiB the
//! workspace gives guests (`.cargo/config.toml`), so that the engine's own
//! recursion (the parser and compiler, `JSON.stringify`, native calls
//! re-entering the interpreter) stays within it up to the limits the
//! plugin sets (`MAX_RECURSION`, `MAX_NESTING_COST`, `MAX_JSON_DEPTH` in
//! `src/lib.rs`): past those the program gets an error, not a trap. The
//! parser takes several KiB of shadow stack per bracket; with 8 MiB the
//! host's 1 MiB of wasm stack is the tighter bound, and the limits are
//! measured against it. Only the pages a program's recursion touches are
//! used.

fn main() {
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("wasm32") {
        println!("cargo:rustc-link-arg=-zstack-size={}", 8 << 20);
    }
}
