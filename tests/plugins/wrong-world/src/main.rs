//! Fixture: a plain `wasi:cli/run` command. Built for `wasm32-wasip2` it is a
//! valid component, but it exports no `wharf:plugin` interface, so the host
//! must refuse to load it as a plugin (no kinds detected).

fn main() {
    println!("I am a command, not a wharf plugin.");
}
