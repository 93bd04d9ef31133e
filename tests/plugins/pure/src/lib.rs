//! `pure`: an adversarial tool plugin whose only imports are `wasi:cli`,
//! `wasi:io`, `wasi:clocks` and the types of `wharf:plugin`, so its warm
//! calls take the host's synchronous path (`component/sync_call.rs`). The
//! tests check that every limit holds there as on the async path: an
//! endless loop ends at its deadline, memory, stack and output limits end
//! the call with their codes, and a call that waits (`sleep`) or prints is
//! served.

use std::hint::black_box;
use std::io::Write;

use schemars::JsonSchema;
use serde::Deserialize;
use wharf_sdk::prelude::*;

/// Calls of `count` this instance has served.
static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

#[derive(Deserialize, JsonSchema)]
struct MbArg {
    /// Mebibytes.
    mb: u32,
}

#[derive(Deserialize, JsonSchema)]
struct DepthArg {
    /// Recursion depth.
    depth: u64,
}

#[derive(Deserialize, JsonSchema)]
struct MsArg {
    /// Milliseconds.
    ms: u64,
}

struct Pure;

fn spec<A: JsonSchema>(name: &str, description: &str) -> ToolSpec {
    ToolSpec::new::<A>(name, description, ToolMode::Parallel)
}

impl ToolPlugin for Pure {
    fn info() -> PluginInfo {
        PluginInfo::new("pure", env!("CARGO_PKG_VERSION"), "Adversarial test plugin without outside imports.")
    }

    fn tools() -> Vec<ToolSpec> {
        vec![
            spec::<NoArgs>("ok", "Returns `ok`."),
            spec::<NoArgs>("count", "Counts the calls this instance has served."),
            spec::<NoArgs>("spin", "Loops forever without yielding."),
            spec::<MsArg>("sleep", "Waits `ms` milliseconds (wasi:clocks), then prints and returns."),
            spec::<MbArg>("alloc", "Allocates and touches `mb` MiB of memory."),
            spec::<DepthArg>("recurse", "Recurses `depth` levels to overflow the stack."),
            spec::<MbArg>("huge_output", "Returns a string of `mb` MiB."),
            spec::<NoArgs>("trap", "Executes `unreachable`."),
        ]
    }

    fn call(name: &str, args: Args, _ctx: &CallContext) -> ToolResult {
        match name {
            "ok" => Ok(ToolOutput::text("ok")),
            "count" => {
                let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                Ok(ToolOutput::text(n.to_string()))
            }
            "spin" => {
                let mut x = 0u64;
                loop {
                    x = black_box(x.wrapping_add(1));
                }
            }
            "sleep" => {
                let ms = args.parse::<MsArg>()?.ms;
                std::thread::sleep(std::time::Duration::from_millis(ms));
                let mut out = std::io::stdout();
                let _ = writeln!(out, "slept {ms} ms");
                let _ = out.flush();
                Ok(ToolOutput::text(format!("slept {ms} ms")))
            }
            "alloc" => {
                let mb = args.parse::<MbArg>()?.mb;
                let mut chunks: Vec<Vec<u8>> = Vec::new();
                for done in 0..mb {
                    let mut chunk: Vec<u8> = Vec::new();
                    if let Err(e) = chunk.try_reserve_exact(1 << 20) {
                        return Err(ToolError::new("RESOURCE_EXHAUSTED", format!("allocated {done} MiB: {e}")));
                    }
                    chunk.resize(1 << 20, 1);
                    chunks.push(black_box(chunk));
                }
                Ok(ToolOutput::text(format!("allocated {mb} MiB")))
            }
            "recurse" => {
                let depth = args.parse::<DepthArg>()?.depth;
                Ok(ToolOutput::text(format!("recursed: {}", recurse(depth, [0u8; 512]))))
            }
            "huge_output" => {
                let mb = args.parse::<MbArg>()?.mb as usize;
                Ok(ToolOutput::text("x".repeat(mb << 20)))
            }
            "trap" => trap(),
            other => Err(ToolError::unknown_tool(other)),
        }
    }
}

#[inline(never)]
fn recurse(depth: u64, frame: [u8; 512]) -> u64 {
    let mut frame = black_box(frame);
    if depth == 0 {
        return u64::from(frame[0]);
    }
    frame[(depth % 512) as usize] = depth as u8;
    // Not a tail call: the addition happens after the call returns.
    recurse(depth - 1, frame) + u64::from(black_box(frame)[(depth % 512) as usize])
}

fn trap() -> ToolResult {
    #[cfg(target_arch = "wasm32")]
    core::arch::wasm32::unreachable();
    #[cfg(not(target_arch = "wasm32"))]
    panic!("trap: unreachable");
}

wharf_sdk::export_tool!(Pure);
