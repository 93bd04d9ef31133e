//! The one shared wasmtime [`Engine`]: component model, epoch interruption,
//! and the pooling allocator where the machine allows it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig, RegallocAlgorithm, Strategy,
};

/// How often the epoch advances. Deadlines are rounded up to this.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Which instance allocator the engine ended up with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allocator {
    /// The pooling allocator (copy-on-write memory images, warm slots).
    Pooling,
    /// On-demand allocation, with the reason pooling was not used.
    OnDemand(String),
}

impl std::fmt::Display for Allocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Pooling => f.write_str("pooling"),
            Self::OnDemand(why) => write!(f, "on-demand ({why})"),
        }
    }
}

/// How much work Cranelift spends on the code it generates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CompileTier {
    /// Optimised code (`opt_level = speed`, backtracking register
    /// allocator): what every artifact on disk holds.
    #[default]
    Optimized,
    /// A fast baseline: no mid-end optimisation and the single-pass register
    /// allocator. The same Cranelift backend and the same runtime checks
    /// (bounds checks, epoch interruption, the store's memory limiter), so
    /// the sandbox is unchanged; the code is slower.
    Fast,
    /// Winch, wasmtime's single-pass baseline compiler: one pass from wasm
    /// to machine code, with the same runtime checks (bounds checks through
    /// guard pages or explicit checks, epoch checks at function entry and
    /// loop headers, the store's memory limiter).
    Baseline,
}

/// Engine settings the operator may tune. Values only: the library reads
/// no environment (the `wharf` binary maps its `WHARF_*` variables onto
/// these).
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Try the pooling allocator first.
    pub pooling: bool,
    /// Maximum concurrently live component instances (pooling only).
    pub max_instances: u32,
    /// Largest linear memory any plugin may be granted, in MiB (pooling
    /// reserves this per slot; per-plugin limits are enforced per store).
    pub max_memory_mb: u32,
    /// Wasm stack limit in bytes (recursion past it traps).
    pub max_wasm_stack: usize,
    /// Bytes of each linear memory kept resident (zeroed with memset) when a
    /// pooling slot is reused, instead of being decommitted and faulted in.
    pub keep_resident: usize,
    /// Directory of Cranelift's incremental compilation cache (per-function
    /// artifacts, see [`crate::cache::IncrementalStore`]); `None`: beside
    /// the runtime's compile cache, if any.
    pub incremental_dir: Option<std::path::PathBuf>,
    /// Use the incremental compilation cache at all.
    pub incremental: bool,
    /// The compiler tier (see [`CompileTier`]).
    pub tier: CompileTier,
    /// Prepare each fresh-sandbox plugin's next sandbox (store and instance)
    /// off the call's path, after a call.
    pub spare: bool,
    /// Call warm tools whose imports cannot wait or reach outside their
    /// sandbox with wasmtime's synchronous call, without a fiber or the
    /// store's event loop (`component/sync_call.rs`).
    pub sync_calls: bool,
    /// The component model's async ABI (WASI 0.3 components: `async`
    /// functions, `stream<T>`, `future<T>`) and the store's concurrent
    /// call machinery in this engine. A [`crate::Runtime`] builds its own
    /// engines without it (wasmtime then skips its per-call task
    /// bookkeeping) and, when this is on, one more with it for the
    /// components that need it; off, those are refused.
    pub concurrency: bool,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            pooling: true,
            max_instances: 1000,
            max_memory_mb: 4096,
            max_wasm_stack: 1 << 20,
            // Measured with first-party components (128 KiB guest stack):
            // 512 KiB covers stack, data and the first heap pages, so a
            // fresh instance takes no page faults; more only adds memset.
            keep_resident: 512 << 10,
            incremental_dir: None,
            incremental: true,
            tier: CompileTier::Optimized,
            spare: true,
            sync_calls: true,
            concurrency: true,
        }
    }
}

/// The shared engine plus what we learned building it.
pub struct WharfEngine {
    engine: Engine,
    allocator: Allocator,
    /// Idle instances held between calls (an adapter's, kept for its turn's
    /// next request) and how many may be: a quarter of the pool, so held
    /// instances never starve fresh ones.
    held: AtomicUsize,
    hold_budget: usize,
    spare: bool,
    sync_calls: AtomicBool,
}

/// One idle instance counted against [`WharfEngine`]'s budget; released
/// when dropped.
pub struct HoldPermit {
    engine: Arc<WharfEngine>,
}

impl Drop for HoldPermit {
    fn drop(&mut self) {
        self.engine.held.fetch_sub(1, Ordering::AcqRel);
    }
}

impl std::fmt::Debug for HoldPermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HoldPermit")
    }
}

impl WharfEngine {
    /// Builds the engine, probing the pooling allocator and falling back to
    /// on-demand allocation (with the reason) when the machine refuses the
    /// address-space reservation.
    pub fn new(opts: &EngineOptions) -> anyhow::Result<Arc<Self>> {
        let (engine, allocator) = if opts.pooling {
            match Engine::new(&Self::config(opts, true)) {
                Ok(e) => (e, Allocator::Pooling),
                Err(err) => {
                    let why = format!("pooling allocator unavailable: {err:#}");
                    tracing::warn!("{why}; falling back to on-demand allocation");
                    (Engine::new(&Self::config(opts, false))?, Allocator::OnDemand(why))
                }
            }
        } else {
            (Engine::new(&Self::config(opts, false))?, Allocator::OnDemand("disabled by configuration".into()))
        };
        let hold_budget = (opts.max_instances as usize / 4).max(1);
        let this = Arc::new(Self {
            engine,
            allocator,
            held: AtomicUsize::new(0),
            hold_budget,
            spare: opts.spare,
            sync_calls: AtomicBool::new(opts.sync_calls),
        });
        spawn_epoch_ticker(Arc::downgrade(&this));
        Ok(this)
    }

    fn config(opts: &EngineOptions, pooling: bool) -> Config {
        let mut c = Config::new();
        c.wasm_component_model(true);
        // The component model's async ABI (WASI 0.3): `async` functions,
        // `stream<T>` and `future<T>`, which generic components may export
        // (`component/streams.rs`). With it every call runs in the store's
        // event loop; limits are the same.
        c.wasm_component_model_async(opts.concurrency);
        c.concurrency_support(opts.concurrency);
        c.epoch_interruption(true);
        c.max_wasm_stack(opts.max_wasm_stack);
        // Async stacks must hold the wasm stack plus host frames.
        c.async_stack_size(opts.max_wasm_stack + (2 << 20));
        c.memory_init_cow(true);
        c.parallel_compilation(true);
        // `.eh_frame` only serves native unwinders walking through wasm
        // frames: wasmtime walks its own frames by frame pointer and host
        // panics never unwind through guest code. Without it a compile
        // builds and registers less (~4% of Winch's wall time for a 18 MiB
        // Python component).
        c.native_unwind_info(false);
        match opts.tier {
            CompileTier::Fast => {
                c.cranelift_opt_level(OptLevel::None);
                c.cranelift_regalloc_algorithm(RegallocAlgorithm::SinglePass);
            }
            CompileTier::Baseline => {
                c.strategy(Strategy::Winch);
                // Winch compiles the functions; Cranelift still compiles
                // the trampolines (one per escaping function and per
                // component import). Unoptimised they cost ~13% less CPU
                // for the default profile, and they only serve until the
                // tier-up.
                c.cranelift_opt_level(OptLevel::None);
                c.cranelift_regalloc_algorithm(RegallocAlgorithm::SinglePass);
                // The native-to-wasm offset map only serves backtrace
                // offsets, which the host strips from errors (traps are
                // classified by code and function index); the first tier
                // serves until the tier-up, so it goes without (~4% less).
                c.generate_address_map(false);
            }
            CompileTier::Optimized => {}
        }
        if let Some(dir) = &opts.incremental_dir
            && opts.tier == CompileTier::Optimized
            && opts.incremental
        {
            let store = Arc::new(crate::cache::IncrementalStore::new(dir.clone()));
            if let Err(e) = c.enable_incremental_compilation(store) {
                tracing::warn!("incremental compilation cache disabled: {e:#}");
            }
        }
        if pooling {
            let mut p = PoolingAllocationConfig::new();
            let n = opts.max_instances.max(1);
            p.total_component_instances(n);
            p.total_core_instances(n.saturating_mul(4));
            p.total_memories(n.saturating_mul(2));
            p.total_tables(n.saturating_mul(4));
            p.total_stacks(n);
            p.max_core_instances_per_component(64);
            p.max_memories_per_component(8);
            p.max_tables_per_component(16);
            p.max_memories_per_module(2);
            p.max_tables_per_module(4);
            p.table_elements(200_000);
            p.max_component_instance_size(4 << 20);
            p.max_core_instance_size(8 << 20);
            p.max_memory_size((opts.max_memory_mb as usize) << 20);
            // Keep the first pages resident so a fresh instance does not pay
            // page faults for its stack and data on every call.
            p.linear_memory_keep_resident(opts.keep_resident);
            p.table_keep_resident(64 << 10);
            p.async_stack_keep_resident(128 << 10);
            p.max_unused_warm_slots(n.min(100));
            c.allocation_strategy(InstanceAllocationStrategy::Pooling(p));
        }
        c
    }

    /// The wasmtime engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The allocator in use.
    pub fn allocator(&self) -> &Allocator {
        &self.allocator
    }

    /// A permit to keep one idle instance, unless the budget is spent.
    pub fn try_hold(self: &Arc<Self>) -> Option<HoldPermit> {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.hold_budget).then_some(n + 1))
            .ok()
            .map(|_| HoldPermit { engine: self.clone() })
    }

    /// Whether fresh calls' sandboxes are prepared ahead of the call.
    pub fn spares(&self) -> bool {
        self.spare
    }

    /// Whether warm tool calls take the synchronous path where a tool
    /// allows it ([`EngineOptions::sync_calls`]).
    pub fn sync_calls(&self) -> bool {
        self.sync_calls.load(Ordering::Relaxed)
    }

    /// Turns the synchronous path of warm tool calls on or off for calls
    /// from now on (instances already made keep theirs until they are used
    /// by a call of the other path, which drops them).
    pub fn set_sync_calls(&self, on: bool) {
        self.sync_calls.store(on, Ordering::Relaxed);
    }

    /// Idle instances held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }
}

/// Advances the epoch every [`EPOCH_TICK`] until the engine is dropped.
fn spawn_epoch_ticker(engine: Weak<WharfEngine>) {
    let spawned = std::thread::Builder::new().name("wharf-epoch".into()).spawn(move || {
        loop {
            std::thread::sleep(EPOCH_TICK);
            match engine.upgrade() {
                Some(e) => e.engine.increment_epoch(),
                None => return,
            }
        }
    });
    if let Err(e) = spawned {
        // Without a ticker deadlines cannot fire; the wall-clock timeout
        // around every call still bounds host-side waits.
        tracing::error!("could not start the epoch ticker thread: {e}");
    }
}
