//! Every benchmark section under `tests/benches` in one binary, so the
//! test dependencies (wasmtime among them) are linked once rather than once
//! per section. `cargo xtask bench` picks the section with
//! `WHARF_BENCH_SECTION`; each module is the section's former `main`.

#[path = "code_mode.rs"]
mod code_mode;
#[path = "dev_loop.rs"]
mod dev_loop;
#[path = "fleet.rs"]
mod fleet;
#[path = "harness.rs"]
mod harness;
#[path = "load.rs"]
mod load;
#[path = "long_session.rs"]
mod long_session;
#[path = "policy_swap.rs"]
mod policy_swap;
#[path = "sessions.rs"]
mod sessions;
#[path = "stream_decode.rs"]
mod stream_decode;
#[path = "wire.rs"]
mod wire;

/// A section's entry point.
type Section = fn() -> anyhow::Result<()>;

/// The sections by name, in report order.
const SECTIONS: &[(&str, Section)] = &[
    ("harness", harness::main),
    ("sessions", sessions::main),
    ("code_mode", code_mode::main),
    ("wire", wire::main),
    ("fleet", fleet::main),
    ("stream_decode", stream_decode::main),
    ("policy_swap", policy_swap::main),
    ("long_session", long_session::main),
    ("load", load::main),
    ("dev_loop", dev_loop::main),
];

fn main() -> anyhow::Result<()> {
    let names = || SECTIONS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ");
    let Ok(section) = std::env::var("WHARF_BENCH_SECTION") else {
        anyhow::bail!("set WHARF_BENCH_SECTION to one of: {} (or run `cargo xtask bench`)", names());
    };
    match SECTIONS.iter().find(|(n, _)| *n == section) {
        Some((_, run)) => run(),
        None => anyhow::bail!("unknown WHARF_BENCH_SECTION `{section}`: one of {}", names()),
    }
}
