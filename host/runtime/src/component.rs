//! Loading a component into a plugin version and calling it under limits.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, RwLock, Weak};
use std::time::{Duration, Instant};

use serde::Serialize;
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, InstancePre, Linker, ResourceAny};
use wasmtime::{Store, Trap, UpdateDeadline};
use wharf_core::plugin::{PluginError, ToolErrorCode};
use wharf_core::projection::HistoryMark;

use crate::bindings::exports::wharf::plugin as ex;
use crate::bindings::wharf::plugin::types as wt;
use crate::cache::{CacheOutcome, CompileCache, digest};
use crate::engine::{CompileTier, EngineOptions, WharfEngine};
use crate::error::LoadError;
use crate::grants::{EffectiveGrant, FsRequest, Grant, GrantRequest};
use crate::state::{HostBinding, HostState, LimitError, PluginShared};

/// Bytes a call's results may hold beyond the output cap before the copy out
/// of the guest is stopped (wasmtime's hostcall fuel is the output cap plus
/// this): room for the record around the output, so an output just over the
/// cap still gets the precise `OUTPUT_LIMIT` message.
pub const FUEL_SLACK: usize = 64 << 10;
/// Bytes one describe call (`info`, `list-tools`, `subscriptions` +
/// `prompt-sections`, `model`) may hand the host.
pub const DESCRIBE_BUDGET: usize = 4 << 20;
/// Most tools one plugin may register unless the operator sets another
/// bound ([`Runtime::set_max_tools`], `engine.max_tools_per_plugin`):
/// room for a component generated from a large API (thousands of
/// operations: Microsoft Graph, a cloud provider's SDK), with the size of
/// all of them bounded by [`MAX_TOOL_SPECS_TOTAL`].
pub const DEFAULT_MAX_TOOLS: usize = 10_000;
/// The operator setting that bounds the tools of one plugin, as load errors
/// name it.
pub const MAX_TOOLS_SETTING: &str = "engine.max_tools_per_plugin";
/// Most bytes of names, descriptions and input schemas of one plugin's
/// tools together (also what `tool.list-tools()` may hand the host): as
/// much as a call's output may be by default; 1.6 KiB a tool at
/// [`DEFAULT_MAX_TOOLS`].
pub const MAX_TOOL_SPECS_TOTAL: usize = 16 << 20;
/// Longest tool description, bytes.
pub const MAX_TOOL_DESCRIPTION: usize = 16 << 10;
/// Longest tool input schema, bytes of JSON text.
pub const MAX_TOOL_SCHEMA: usize = 64 << 10;
/// Most prompt sections one plugin may register.
pub const MAX_PROMPT_SECTIONS: usize = 16;
/// Longest prompt section, bytes.
pub const MAX_PROMPT_SECTION: usize = 64 << 10;
/// Most hook subscriptions one plugin may register.
pub const MAX_SUBSCRIPTIONS: usize = 64;
/// Longest name, version, section id or model name in a self-description,
/// bytes.
pub const MAX_NAME: usize = 128;
/// Longest plugin description, bytes.
pub const MAX_PLUGIN_DESCRIPTION: usize = 4 << 10;
/// Most host patterns or env names a plugin may request.
pub const MAX_REQUESTS: usize = 64;
/// Longest tool error code: a token of `A-Z`, `0-9`, `_`.
pub const MAX_ERROR_CODE: usize = 64;
/// What an error message over the output cap is cut to, bytes.
pub const ERROR_MESSAGE_CUT: usize = 4096;

/// Text from a component fit for a one-line message: cut to `max` bytes on
/// a character boundary (with `…`) and with control characters escaped.
fn shown(text: &str, max: usize) -> String {
    let cut = wharf_core::util::cut_str(text, max);
    let mut out = wharf_core::util::escape_line(cut).into_owned();
    if cut.len() < text.len() {
        out.push('…');
    }
    out
}

/// Whether `code` is a valid tool error code.
fn valid_code(code: &str) -> bool {
    !code.is_empty()
        && code.len() <= MAX_ERROR_CODE
        && code.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// Runs `$body` against a fresh instance of `$v` (bound to `$store` and
/// `$inst`; prepared after the previous call where it can be, see
/// [`PluginVersion::take_spare`]) with the wall-clock limit around it:
/// epochs stop guest code, the timeout also bounds host calls (HTTP waits)
/// that epochs cannot interrupt.
/// `$fuel` bounds the bytes one lift may copy out of the guest (its results,
/// or the arguments of one import call). Evaluates to `Result<_, CallError>`.
/// `code = C;` names the version's [`Code`] the body's export indices came
/// from (a tier-up may swap the version's code between two calls, never
/// within one); without it the current code is used.
macro_rules! sandboxed {
    ($v:expr, $effective:expr, $timeout_ms:expr, $fuel:expr, |$store:ident, $inst:ident| $body:block) => {{
        let code = $v.code();
        sandboxed!(code = code; $v, $effective, $timeout_ms, $fuel, |$store, $inst| $body)
    }};
    (code = $code:expr; $v:expr, $effective:expr, $timeout_ms:expr, $fuel:expr, |$store:ident, $inst:ident| $body:block) => {{
        let timeout_ms: u64 = $timeout_ms;
        let effective: std::sync::Arc<$crate::grants::EffectiveGrant> = $effective;
        // A sandbox prepared after the previous call, when there is one that
        // still fits; else one made now.
        let (made, ready) = match $v.take_spare(&$code, &effective, $fuel) {
            Some((store, inst)) => (Ok(store), Some(inst)),
            None => ($v.new_store(&$code, effective.clone(), $fuel), None),
        };
        match made {
            Err(e) => Err(e),
            Ok(mut $store) => {
                $store.data_mut().begin_call(timeout_ms);
                let wall = $store.data().wall_deadline();
                // Pinned where it is built: a call's future is kilobytes,
                // and moving it into the timeout costs a copy per call.
                let res = {
                    let fut = std::pin::pin!(async {
                        let $inst = match ready {
                            Some(inst) => inst,
                            None => $code.pre.instantiate_async(&mut $store).await?,
                        };
                        $body
                    });
                    tokio::time::timeout_at(wall, fut).await
                };
                let out = match res {
                    Err(_) => {
                        Err(CallError::new(ToolErrorCode::Timeout, format!("call exceeded its time limit of {timeout_ms} ms")))
                    }
                    Ok(Ok(v)) => Ok(v),
                    Ok(Err(e)) => Err(classify_error(&e, $store.data())),
                };
                $store.data_mut().flush_stdio();
                $v.prepare_spare(&effective, $store);
                out
            }
        }
    }};
}

// After `sandboxed!`, which they use.
pub mod generic;
mod streams;
mod sync_call;

/// A plugin kind, detected from a component's exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// Exports `tool`.
    Tool,
    /// Exports `llm`.
    Llm,
    /// Exports `policy`.
    Policy,
    /// Exports `hooks`.
    Hooks,
    /// Exports `skills`.
    Skills,
    /// Exports `compactor`.
    Compactor,
}

impl Kind {
    fn from_interface(name: &str) -> Option<Self> {
        Some(match name {
            "tool" => Self::Tool,
            "llm" => Self::Llm,
            "policy" => Self::Policy,
            "hooks" => Self::Hooks,
            "skills" => Self::Skills,
            "compactor" => Self::Compactor,
            _ => return None,
        })
    }
}

/// What the runtime needs to load one plugin.
#[derive(Debug, Clone)]
pub struct PluginSpec {
    /// Stable id (profile row id).
    pub id: String,
    /// Component file.
    pub path: PathBuf,
    /// The plugin's config table.
    pub config: serde_json::Value,
    /// What the operator grants.
    pub grant: Grant,
    /// Reuse instances between calls (opt-in; default is a fresh sandbox
    /// per call so nothing leaks between calls).
    pub warm: bool,
    /// What a policy row does while a new config of it cannot be applied.
    pub on_invalid_config: OnInvalidConfig,
}

/// What decides a policy row's calls while its latest config cannot be
/// applied (the component refuses it, or the component itself fails to load
/// with it). Other kinds always keep their last good version serving.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnInvalidConfig {
    /// Deny every call until the row loads with its latest config (fail
    /// closed: the old rules might allow what the new ones deny).
    #[default]
    Deny,
    /// The last good version and config keep deciding (as Envoy and OPA do
    /// with a rejected update); the refusal is logged.
    Keep,
}

/// The digest of a plugin configuration: hex sha-256 of its JSON with object
/// keys sorted (two tables differing only in key order have one digest).
pub fn config_digest(config: &serde_json::Value) -> String {
    fn canonical(v: &serde_json::Value) -> serde_json::Value {
        match v {
            serde_json::Value::Object(m) => {
                let mut entries: Vec<(&String, &serde_json::Value)> = m.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                serde_json::Value::Object(entries.into_iter().map(|(k, v)| (k.clone(), canonical(v))).collect())
            }
            serde_json::Value::Array(a) => serde_json::Value::Array(a.iter().map(canonical).collect()),
            other => other.clone(),
        }
    }
    digest(canonical(config).to_string().as_bytes())
}

/// A self-description returned by the component.
#[derive(Debug, Clone, Serialize)]
pub struct PluginInfo {
    /// Name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Description.
    pub description: String,
    /// What it asks to be granted.
    pub requests: GrantRequest,
}

/// A load that failed, with the digest of the bytes that failed (`None`
/// when the file could not be read).
#[derive(Debug)]
pub struct FailedLoad {
    /// Why.
    pub error: LoadError,
    /// The digest of the bytes that were loaded.
    pub digest: Option<String>,
}

/// Options for the runtime: values only, the library reads no
/// environment.
#[derive(Debug, Clone, Default)]
pub struct RuntimeOptions {
    /// Engine settings.
    pub engine: EngineOptions,
    /// Compile cache directory (`None`: memory only).
    pub cache_dir: Option<PathBuf>,
    /// Tiered compilation (see [`Runtime::enable_tiering`]).
    pub tiering: TieringOptions,
}

/// Tiered compilation settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TieringOptions {
    /// Whether [`Runtime::enable_tiering`] turns tiering on (off: every
    /// cache miss compiles optimised code directly).
    pub enabled: bool,
    /// The first tier's compiler.
    pub first: FirstTierCompiler,
}

impl Default for TieringOptions {
    fn default() -> Self {
        Self { enabled: true, first: FirstTierCompiler::Winch }
    }
}

/// Which compiler serves a cache miss first when tiering is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FirstTierCompiler {
    /// Winch ([`CompileTier::Baseline`]) where wasmtime supports it
    /// (x86_64), else Cranelift's fast settings.
    #[default]
    Winch,
    /// Cranelift's fast settings ([`CompileTier::Fast`]).
    Cranelift,
}

/// The runtime: one engine, one linker, one compile cache; with tiering on,
/// a fast-tier engine and the background tier-up thread. These engines run
/// without the component model's async ABI, so wasmtime skips its per-call
/// task bookkeeping; a component that needs it (WASI 0.3: `async`
/// functions, streams, futures) runs on one more engine, built when the
/// first such component loads.
pub struct Runtime {
    engine: Arc<WharfEngine>,
    linker: Linker<HostState>,
    /// The linker of warm tools' synchronous path (`sync_call.rs`).
    sync_linker: Linker<HostState>,
    cache: CompileCache,
    /// Engine options, for the first tier's engine.
    engine_opts: EngineOptions,
    /// Tiering settings.
    tiering: TieringOptions,
    /// Compile cache misses with the first tier first (see [`Runtime::enable_tiering`]).
    tiered: AtomicBool,
    /// The first tier's engine and linker, built on first use.
    first_engine: OnceLock<Result<FirstTier, String>>,
    /// The engine with component-model async, and its linkers, built on
    /// first use (never when [`EngineOptions::concurrency`] is off).
    concurrent_engine: OnceLock<Result<FirstTier, String>>,
    /// Jobs for the tier-up thread (started on the first job).
    tier_up: Mutex<Option<std::sync::mpsc::Sender<TierUpJob>>>,
    /// Tier-up jobs not finished yet, and its condition.
    tier_up_pending: Arc<(Mutex<usize>, Condvar)>,
    /// Loads running now: a tier-up waits for them (start-up's fast
    /// compiles get both cores).
    loading: AtomicUsize,
    /// Most tools one plugin may register ([`Runtime::set_max_tools`]).
    max_tools: AtomicUsize,
    /// Held compiles (see [`Runtime::hold_tier_up`]): (tier-up holds, load
    /// holds).
    holds: Arc<(Mutex<(usize, usize)>, Condvar)>,
    me: Weak<Runtime>,
}

/// Holds compiles while alive (see [`Runtime::hold_tier_up`] and
/// [`Runtime::hold_load_compiles`]).
pub struct CompileHold {
    holds: Arc<(Mutex<(usize, usize)>, Condvar)>,
    loads: bool,
}

impl Drop for CompileHold {
    fn drop(&mut self) {
        let (lock, cv) = &*self.holds;
        let mut h = lock.lock().unwrap_or_else(|e| e.into_inner());
        if self.loads {
            h.1 = h.1.saturating_sub(1);
        } else {
            h.0 = h.0.saturating_sub(1);
        }
        cv.notify_all();
    }
}

/// The first tier: its own engine (code compiled by one engine runs only in
/// that engine's stores) and a linker for it. Also the shape of the engine
/// with component-model async.
struct FirstTier {
    engine: Arc<WharfEngine>,
    linker: Linker<HostState>,
    /// The linker of warm tools' synchronous path (`sync_call.rs`).
    sync_linker: Linker<HostState>,
    /// [`CompileTier::Baseline`] (Winch) on x86_64 unless the options ask
    /// for [`FirstTierCompiler::Cranelift`] or Winch is unavailable here,
    /// then [`CompileTier::Fast`].
    tier: CompileTier,
}

/// What [`Runtime::compile_optimised`] gives: the code, where it came from,
/// its engine, linker and synchronous-path linker.
type Optimised<'a> = (Component, CacheOutcome, &'a Arc<WharfEngine>, &'a Linker<HostState>, &'a Linker<HostState>);

/// A version served by first-tier code, to be given optimised code.
struct TierUpJob {
    /// The code slot every version of these bytes shares (a config-only
    /// change makes a new version on the same slot).
    slot: Weak<CodeSlot>,
    /// The version queued, for its warm instances and spare.
    version: Weak<PluginVersion>,
    kinds: Vec<Kind>,
    path: PathBuf,
    id: String,
    digest: String,
    bytes: Vec<u8>,
}

/// The code calls of a version instantiate, shared by the versions a
/// config-only change makes from it (see [`Runtime::reconfigure`]), so a
/// tier-up reaches them all.
type CodeSlot = RwLock<Arc<CompiledCode>>;

/// The compiled code of a version: what a call instantiates, the typed
/// export indices into it, and the engine its stores belong to. A version
/// first served by the first tier has it swapped once, for the optimised
/// code, by the tier-up thread; a call keeps the code it started with.
pub(crate) struct CompiledCode {
    pre: InstancePre<HostState>,
    indices: Indices,
    engine: Arc<WharfEngine>,
    tier: CompileTier,
    /// A tool's synchronous path, when its imports allow one
    /// (`sync_call.rs`).
    sync: Option<sync_call::SyncTool>,
}

/// Builds the linker with every import a plugin may use.
fn new_linker(engine: &wasmtime::Engine) -> anyhow::Result<Linker<HostState>> {
    let mut linker: Linker<HostState> = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    crate::fs_guard::add_to_linker(&mut linker)?;
    crate::stream_write::add_to_linker(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    crate::bindings::Host_::add_to_linker::<HostState, wasmtime::component::HasSelf<HostState>>(&mut linker, |s| s)?;
    Ok(linker)
}

/// Typed indices of each export kind, resolved once per version.
struct Indices {
    /// `None` for a generic component (see [`generic`]).
    plugin: Option<ex::plugin::GuestIndices>,
    configure: Option<ex::configure::GuestIndices>,
    tool: Option<ex::tool::GuestIndices>,
    llm: Option<ex::llm::GuestIndices>,
    /// The optional `llm-images` export of an adapter (added within 0.1).
    llm_images: Option<ex::llm_images::GuestIndices>,
    /// The optional `llm-history` export of an adapter (added within 0.1).
    llm_history: Option<ex::llm_history::GuestIndices>,
    policy: Option<ex::policy::GuestIndices>,
    hooks: Option<ex::hooks::GuestIndices>,
    skills: Option<ex::skills::GuestIndices>,
    compactor: Option<ex::compactor::GuestIndices>,
}

/// One loaded version of a plugin: compiled, linked and described.
pub struct PluginVersion {
    /// Plugin id.
    pub id: String,
    /// Component file.
    pub path: PathBuf,
    /// Content digest (hex sha-256).
    pub digest: String,
    /// Digest of the config it runs with (see [`config_digest`]).
    pub config_digest: String,
    /// Size in bytes.
    pub size: u64,
    /// WIT package version the component was built against.
    pub wit_version: String,
    /// Kinds, from the exports.
    pub kinds: Vec<Kind>,
    /// Self-description.
    pub info: PluginInfo,
    /// The effective grants (request ∩ grant).
    pub effective: Arc<EffectiveGrant>,
    /// Tools (empty unless a tool plugin).
    pub tools: Vec<wharf_core::plugin::ToolSpec>,
    /// Hook subscriptions (hooks plugins).
    pub hook_subscriptions: Vec<(wharf_core::plugin::HookPoint, i32)>,
    /// Static prompt sections: (id, order, text).
    pub prompt_sections: Vec<(String, i32, String)>,
    /// Model info (LLM adapters).
    pub model_info: Option<wharf_core::plugin::ModelInfo>,
    /// What `llm-images.support()` said (`None`: no such export, or no
    /// media type listed: text only).
    pub image_support: Option<wharf_core::images::ImageSupport>,
    /// Where the compiled code came from.
    pub cache: CacheOutcome,
    /// Time to compile or load the code.
    pub load_time: Duration,
    code: Arc<CodeSlot>,
    shared: Arc<PluginShared>,
    warm: Option<Mutex<Vec<WarmInstance>>>,
    /// Sandboxes (stores) made for this version so far.
    sandboxes: std::sync::atomic::AtomicU64,
    /// History messages lowered into this adapter's instances (see
    /// [`PluginVersion::llm_messages_lowered`]).
    llm_messages_lowered: std::sync::atomic::AtomicU64,
    /// A generic component's functions (see [`generic`]).
    generic: Option<Arc<generic::GenericExports>>,
    /// This version, for the task that prepares its next sandbox (set once
    /// loaded; unset while describing, which prepares none).
    me: OnceLock<Weak<PluginVersion>>,
    /// The next fresh call's sandbox, prepared after the last call.
    spare: Mutex<Option<PreparedInstance>>,
    /// A task is preparing `spare`.
    preparing: AtomicBool,
    /// Warm calls the synchronous path handed to the async path (see
    /// [`MAX_SYNC_MISSES`]).
    sync_misses: std::sync::atomic::AtomicU64,
    /// Warm calls served on the synchronous path.
    sync_served: std::sync::atomic::AtomicU64,
}

/// A sandbox prepared off a call's path for the next fresh call: its store
/// and instance, no call has run in it yet. The call takes it only if it is
/// of the current code and the host binding it was built with still holds.
struct PreparedInstance {
    store: Store<HostState>,
    inst: wasmtime::component::Instance,
    code: Arc<CompiledCode>,
    binding: HostBinding,
    _permit: crate::engine::HoldPermit,
}

/// A started completion: its store, bindings, resource and the code it
/// runs.
pub(crate) struct StartedCompletion {
    pub(crate) store: Store<HostState>,
    pub(crate) guest: LlmGuests,
    pub(crate) handle: ResourceAny,
    pub(crate) code: Arc<CompiledCode>,
    /// What the instance now holds of the conversation (see [`HeldAdapter`]).
    pub(crate) sent: SentHistory,
}

/// The messages a held adapter instance was last started with, as the host
/// sent them, when it exports `llm-history` and the request carried no
/// images (else empty): the next request's messages are compared with
/// these, and only those after the shared prefix are lowered
/// (`llm-history.start-after`).
#[derive(Default)]
pub(crate) struct SentHistory(pub(crate) Vec<wharf_core::plugin::Message>, pub(crate) HistoryMark);

/// An adapter's instance between two requests of one agent turn (kept in
/// the turn's [`wharf_core::plugin::AdapterScope`]): the same session's
/// next request skips instantiation and finds its memory already paged in.
pub(crate) struct HeldAdapter {
    store: Store<HostState>,
    guest: LlmGuests,
    code: Arc<CompiledCode>,
    sent: SentHistory,
    _permit: crate::engine::HoldPermit,
}

/// An adapter instance's exports: `llm`, and `llm-images` and
/// `llm-history` when it has them.
#[derive(Clone)]
pub(crate) struct LlmGuests {
    pub(crate) llm: ex::llm::Guest,
    pub(crate) images: Option<ex::llm_images::Guest>,
    pub(crate) history: Option<ex::llm_history::Guest>,
}

/// Most media types an adapter's `llm-images.support()` may list.
const MAX_IMAGE_MIME_TYPES: usize = 16;

struct WarmInstance {
    store: Store<HostState>,
    tool: WarmTool,
    /// The code it was instantiated from (a pool keeps only current code's).
    code: Arc<CompiledCode>,
}

/// How a warm instance is called.
enum WarmTool {
    /// Through the store's event loop (`call_async`).
    Async(ex::tool::Guest),
    /// With wasmtime's synchronous `call` (`sync_call.rs`): `tool.call`,
    /// type-checked as [`ToolCallFn`] when the instance was made.
    Sync(wasmtime::component::Func),
}

/// `tool.call`'s type on the synchronous path: the call context is lowered
/// from borrowed strings (no copy on the host before the one into the
/// guest).
type ToolCallFn<'a> = wasmtime::component::TypedFunc<
    (&'a str, &'a str, &'a CallContextRef<'a>),
    (Result<wt::ToolOutput, wt::ToolError>,),
>;

/// `wharf:plugin/types.call-context`, borrowed from the host's
/// [`CallContext`]: the same record, field for field.
#[derive(wasmtime::component::ComponentType, wasmtime::component::Lower)]
#[component(record)]
struct CallContextRef<'a> {
    #[component(name = "session-id")]
    session_id: &'a str,
    #[component(name = "call-id")]
    call_id: &'a str,
    workspace: Option<&'a str>,
}

/// The call context as the generated bindings take it (owned strings).
fn owned_context(ctx: &CallContext) -> wt::CallContext {
    wt::CallContext {
        session_id: ctx.session_id.clone(),
        call_id: ctx.call_id.clone(),
        workspace: ctx.workspace.clone(),
    }
}

/// Calls on the synchronous path that had to be run again on the async
/// path (a wait, or a guest running past its first epoch tick) a version may
/// have before it calls only on the async path, if they are also more than
/// one in [`SYNC_MISS_RATIO`] of its synchronous calls: its calls are not
/// short. (A short call also misses when its thread is descheduled across
/// two ticks on a loaded machine: rare, and not a reason to give up.)
const MAX_SYNC_MISSES: u64 = 8;
/// See [`MAX_SYNC_MISSES`].
const SYNC_MISS_RATIO: u64 = 16;

/// How a sandboxed call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct CallError {
    /// Stable code: `TIMEOUT`, `MEMORY_LIMIT`, `STACK_OVERFLOW`, `TRAP`,
    /// `OUTPUT_LIMIT`, `ABORTED`, `HOST_ERROR`, or the tool's own code.
    pub code: ToolErrorCode,
    /// What happened.
    pub message: String,
}

impl CallError {
    fn new(code: ToolErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }
}

/// A sandbox failure of a policy, hook or compactor call, as the core's
/// seams carry it (printed as before: `CODE: message`).
impl From<CallError> for PluginError {
    fn from(e: CallError) -> Self {
        let message = e.to_string();
        PluginError::failed(e.code, message)
    }
}

/// Context passed to a tool call.
#[derive(Clone, Default)]
pub struct CallContext {
    /// Session id.
    pub session_id: String,
    /// Call id.
    pub call_id: String,
    /// Workspace dir.
    pub workspace: Option<String>,
    /// The session's services (`session`, `model`, `agents` imports).
    pub services: Option<Arc<dyn wharf_core::plugin::SessionServices>>,
}

impl std::fmt::Debug for CallContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallContext")
            .field("session_id", &self.session_id)
            .field("call_id", &self.call_id)
            .field("workspace", &self.workspace)
            .field("services", &self.services.is_some())
            .finish()
    }
}

impl Runtime {
    /// A runtime with its own engine.
    pub fn new(opts: RuntimeOptions) -> anyhow::Result<Arc<Self>> {
        // The incremental (per-function) compile cache lives beside the
        // artifact cache unless the engine options name another place.
        let mut engine_opts = opts.engine.clone();
        if engine_opts.incremental_dir.is_none() {
            engine_opts.incremental_dir = opts.cache_dir.as_ref().map(|d| d.join("incremental"));
        }
        // Component-model async only on the second engine (see [`Runtime`]).
        let engine = WharfEngine::new(&EngineOptions { concurrency: false, ..engine_opts.clone() })?;
        let linker = new_linker(engine.engine())?;
        let sync_linker = sync_call::new_linker(engine.engine())?;
        let cache = CompileCache::new(engine.engine(), opts.cache_dir);
        Ok(Arc::new_cyclic(|me| Self {
            engine,
            linker,
            sync_linker,
            cache,
            engine_opts,
            tiering: opts.tiering,
            tiered: AtomicBool::new(false),
            first_engine: OnceLock::new(),
            concurrent_engine: OnceLock::new(),
            tier_up: Mutex::new(None),
            tier_up_pending: Arc::new((Mutex::new(0), Condvar::new())),
            loading: AtomicUsize::new(0),
            max_tools: AtomicUsize::new(DEFAULT_MAX_TOOLS),
            holds: Arc::new((Mutex::new((0, 0)), Condvar::new())),
            me: me.clone(),
        }))
    }

    /// Bounds the tools one plugin may register (default
    /// [`DEFAULT_MAX_TOOLS`]; the operator's `engine.max_tools_per_plugin`):
    /// a component with more is refused at load, its error naming the
    /// setting. Applies to loads from now on.
    pub fn set_max_tools(&self, max: usize) {
        self.max_tools.store(max, Ordering::Relaxed);
    }

    /// The bound of [`Runtime::set_max_tools`].
    pub fn max_tools(&self) -> usize {
        self.max_tools.load(Ordering::Relaxed)
    }

    /// Tiered compilation: from now on a component whose optimised code is
    /// in neither cache is compiled by a first tier — Winch
    /// ([`CompileTier::Baseline`]), else Cranelift's fast settings
    /// ([`CompileTier::Fast`]) — several times quicker to compile, serves at once, and gets its
    /// optimised code in the background (one thread, Cranelift's parallel
    /// compiler), which is also written to the on-disk cache. The swap is
    /// per version and between calls: no reload, no event, the same
    /// description. Generic components are compiled optimised directly.
    /// Does nothing when [`TieringOptions::enabled`] is off.
    pub fn enable_tiering(&self) {
        self.tiered.store(self.tiering.enabled, Ordering::Relaxed);
    }

    /// Holds tier-up compiles until the returned guard drops (tests and
    /// benchmarks: a tier-up still running while something else happens).
    pub fn hold_tier_up(&self) -> CompileHold {
        self.holds.0.lock().unwrap_or_else(|e| e.into_inner()).0 += 1;
        CompileHold { holds: self.holds.clone(), loads: false }
    }

    /// Holds every compile a load would start (a miss in the compile cache)
    /// until the returned guard drops (tests: a change that must not wait
    /// for a compile).
    pub fn hold_load_compiles(&self) -> CompileHold {
        self.holds.0.lock().unwrap_or_else(|e| e.into_inner()).1 += 1;
        CompileHold { holds: self.holds.clone(), loads: true }
    }

    /// Waits while compiles of this sort are held.
    fn wait_holds(&self, loads: bool) {
        let (lock, cv) = &*self.holds;
        let guard = lock.lock().unwrap_or_else(|e| e.into_inner());
        let _released =
            cv.wait_while(guard, |h| if loads { h.1 > 0 } else { h.0 > 0 }).unwrap_or_else(|e| e.into_inner());
    }

    /// Tier-up jobs not finished yet.
    pub fn tier_up_pending(&self) -> usize {
        *self.tier_up_pending.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until every tier-up job has finished (their optimised code is in
    /// the cache), at most `timeout`. Returns whether none is left.
    pub fn wait_tier_up(&self, timeout: Duration) -> bool {
        let (lock, cv) = &*self.tier_up_pending;
        let guard = lock.lock().unwrap_or_else(|e| e.into_inner());
        let (guard, _) = cv.wait_timeout_while(guard, timeout, |n| *n > 0).unwrap_or_else(|e| e.into_inner());
        *guard == 0
    }

    fn first_tier_engine(&self) -> Result<&FirstTier, String> {
        self.first_engine
            .get_or_init(|| {
                // Winch is in wasmtime's tier 1 on x86_64 only.
                let winch = cfg!(target_arch = "x86_64") && self.tiering.first == FirstTierCompiler::Winch;
                let tiers: &[CompileTier] =
                    if winch { &[CompileTier::Baseline, CompileTier::Fast] } else { &[CompileTier::Fast] };
                let mut last = String::new();
                for &tier in tiers {
                    // On-demand allocation: first-tier code serves only until
                    // its tier-up, and a second pool would double the
                    // reservation.
                    let opts = EngineOptions {
                        tier,
                        pooling: false,
                        incremental_dir: None,
                        concurrency: false,
                        ..self.engine_opts.clone()
                    };
                    let built = WharfEngine::new(&opts).and_then(|engine| {
                        let linker = new_linker(engine.engine())?;
                        let sync_linker = sync_call::new_linker(engine.engine())?;
                        Ok((engine, linker, sync_linker))
                    });
                    match built {
                        Ok((engine, linker, sync_linker)) => {
                            return Ok(FirstTier { engine, linker, sync_linker, tier });
                        }
                        Err(e) => {
                            tracing::debug!(?tier, "first compile tier unavailable: {e:#}");
                            last = format!("{e:#}");
                        }
                    }
                }
                Err(last)
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The engine with component-model async (optimised tier, on-demand
    /// allocation: such components are few), built on first use.
    fn concurrent_engine(&self) -> Result<&FirstTier, String> {
        self.concurrent_engine
            .get_or_init(|| {
                let opts = EngineOptions { concurrency: true, pooling: false, ..self.engine_opts.clone() };
                let engine = WharfEngine::new(&opts).map_err(|e| format!("{e:#}"))?;
                let linker = new_linker(engine.engine()).map_err(|e| format!("{e:#}"))?;
                let sync_linker = sync_call::new_linker(engine.engine()).map_err(|e| format!("{e:#}"))?;
                Ok(FirstTier { engine, linker, sync_linker, tier: self.engine_opts.tier })
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Optimised code of `bytes` (from the cache or compiled), with the
    /// engine and linkers it runs on: the runtime's own engine, or for a
    /// component that uses component-model async (the own engine refuses
    /// it), the one that has it. A component neither takes gets the latter's
    /// error, the more telling one.
    fn compile_optimised(&self, digest: &str, bytes: &[u8]) -> wasmtime::Result<Optimised<'_>> {
        let plain = match self.cache.get_or_compile(self.engine.engine(), digest, bytes) {
            Ok((c, outcome)) => return Ok((c, outcome, &self.engine, &self.linker, &self.sync_linker)),
            Err(e) => e,
        };
        if !self.engine_opts.concurrency {
            return Err(plain);
        }
        let ce = match self.concurrent_engine() {
            Ok(ce) => ce,
            Err(e) => {
                tracing::warn!("the engine with component-model async is unavailable: {e}");
                return Err(plain);
            }
        };
        let (c, outcome) = self.cache.get_or_compile(ce.engine.engine(), digest, bytes)?;
        Ok((c, outcome, &ce.engine, &ce.linker, &ce.sync_linker))
    }

    /// Queues `v` (fast-tier code of `bytes`) for its optimised code.
    fn queue_tier_up(&self, v: &Arc<PluginVersion>, bytes: &[u8]) {
        let job = TierUpJob {
            slot: Arc::downgrade(&v.code),
            version: Arc::downgrade(v),
            kinds: v.kinds.clone(),
            path: v.path.clone(),
            id: v.id.clone(),
            // The compile cache's key: the bytes' digest (a dev build's
            // version digest also covers its source).
            digest: digest(bytes),
            bytes: bytes.to_vec(),
        };
        let mut tx = self.tier_up.lock().unwrap_or_else(|e| e.into_inner());
        if tx.is_none() {
            let (send, recv) = std::sync::mpsc::channel::<TierUpJob>();
            let me = self.me.clone();
            let spawned = std::thread::Builder::new().name("wharf-tier-up".into()).spawn(move || {
                for job in recv {
                    let Some(rt) = me.upgrade() else { return };
                    // After the loads of this start-up or reload (bounded).
                    let t0 = Instant::now();
                    while rt.loading.load(Ordering::Relaxed) > 0 && t0.elapsed() < Duration::from_secs(30) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    rt.tier_up(job);
                    let (lock, cv) = &*rt.tier_up_pending;
                    let mut n = lock.lock().unwrap_or_else(|e| e.into_inner());
                    *n = n.saturating_sub(1);
                    cv.notify_all();
                }
            });
            match spawned {
                Ok(_) => *tx = Some(send),
                Err(e) => {
                    tracing::warn!("no tier-up thread ({e}): `{}` keeps its fast-tier code", v.id);
                    return;
                }
            }
        }
        let Some(sender) = tx.as_ref() else { return };
        *self.tier_up_pending.0.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        if sender.send(job).is_err() {
            *self.tier_up_pending.0.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        }
    }

    /// Compiles a job's optimised code (into the cache) and swaps it into
    /// its version, if that version is still alive.
    fn tier_up(&self, job: TierUpJob) {
        self.wait_holds(false);
        if job.slot.strong_count() == 0 {
            return;
        }
        let t0 = Instant::now();
        let code = self
            .cache
            .get_or_compile(self.engine.engine(), &job.digest, &job.bytes)
            .map_err(|e| first_line(&e))
            .and_then(|(component, _)| {
                let pre = self.linker.instantiate_pre(&component).map_err(|e| first_line(&e))?;
                let indices = Indices::new(&pre, &job.kinds, &job.path).map_err(|e| e.to_string())?;
                let sync = job
                    .kinds
                    .contains(&Kind::Tool)
                    .then(|| sync_call::SyncTool::new(&self.sync_linker, &component))
                    .flatten();
                Ok(CompiledCode { pre, indices, engine: self.engine.clone(), tier: self.engine_opts.tier, sync })
            });
        let Some(slot) = job.slot.upgrade() else { return };
        match code {
            Ok(code) => {
                *slot.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(code);
                // Other versions on the slot drop theirs lazily (a spare or
                // warm instance of old code is never used).
                if let Some(v) = job.version.upgrade() {
                    v.drop_stale();
                }
                tracing::debug!("`{}` tiered up in {:?}", job.id, t0.elapsed());
            }
            Err(e) => tracing::warn!("`{}` keeps its fast-tier code: optimised compile failed: {e}", job.id),
        }
    }

    /// The engine.
    pub fn engine(&self) -> &Arc<WharfEngine> {
        &self.engine
    }

    /// The compile cache.
    pub fn cache(&self) -> &CompileCache {
        &self.cache
    }

    /// Compiles (or loads from cache), checks, links and describes a
    /// component. Blocking: run it off the async loop.
    pub fn load(&self, spec: &PluginSpec) -> Result<Arc<PluginVersion>, LoadError> {
        self.load_file(spec).map_err(|f| f.error)
    }

    /// Like [`Runtime::load`], a failure keeping the digest of the bytes
    /// that failed: the file may hold others by the time the failure is
    /// reported (`plugin/reload-failed` names the version that failed).
    pub fn load_file(&self, spec: &PluginSpec) -> Result<Arc<PluginVersion>, FailedLoad> {
        let path = &spec.path;
        let bytes = std::fs::read(path)
            .map_err(|source| FailedLoad { error: LoadError::Read { path: path.clone(), source }, digest: None })?;
        self.load_bytes(spec, &bytes).map_err(|error| FailedLoad { error, digest: Some(digest(&bytes)) })
    }

    /// Like [`Runtime::load`] with the bytes already read.
    pub fn load_bytes(&self, spec: &PluginSpec, bytes: &[u8]) -> Result<Arc<PluginVersion>, LoadError> {
        self.load_inner(spec, bytes, true)
    }

    /// Loads for inspection (`wharf plugin inspect|check`): everything
    /// [`Runtime::load`] checks except the plugin's own configuration, which
    /// an inspection does not have.
    pub fn load_for_inspection(&self, spec: &PluginSpec) -> Result<Arc<PluginVersion>, LoadError> {
        let path = &spec.path;
        let bytes = std::fs::read(path).map_err(|source| LoadError::Read { path: path.clone(), source })?;
        self.load_inner(spec, &bytes, false)
    }

    /// A new version of `current` for `spec` — the same component bytes with
    /// another config, grant or mode — on `current`'s compiled code: nothing
    /// is compiled (a tier-up still running reaches both), only the
    /// self-description and the config check run again. Blocking (it calls
    /// the component): run it off the async loop.
    pub fn reconfigure(
        &self,
        current: &Arc<PluginVersion>,
        spec: &PluginSpec,
    ) -> Result<Arc<PluginVersion>, LoadError> {
        let t0 = Instant::now();
        let path = spec.path.clone();
        spec.grant.validate().map_err(|e| LoadError::Invalid { path: path.clone(), reason: e.to_string() })?;
        let shared = Arc::new(PluginShared {
            id: spec.id.clone(),
            config: spec.config.clone(),
            kv: Default::default(),
            dev_snapshot: current.shared.dev_snapshot.clone(),
        });
        let mut version = PluginVersion {
            id: spec.id.clone(),
            path: path.clone(),
            digest: current.digest.clone(),
            config_digest: config_digest(&spec.config),
            size: current.size,
            wit_version: current.wit_version.clone(),
            kinds: current.kinds.clone(),
            info: current.info.clone(),
            effective: Arc::new(Grant::default().intersect(&GrantRequest::default())),
            tools: Vec::new(),
            hook_subscriptions: Vec::new(),
            prompt_sections: Vec::new(),
            model_info: None,
            image_support: None,
            cache: CacheOutcome::Memory,
            load_time: Duration::ZERO,
            code: current.code.clone(),
            shared,
            warm: spec.warm.then(|| Mutex::new(Vec::new())).filter(|_| current.generic.is_none()),
            sandboxes: std::sync::atomic::AtomicU64::new(0),
            llm_messages_lowered: std::sync::atomic::AtomicU64::new(0),
            generic: current.generic.clone(),
            me: OnceLock::new(),
            spare: Mutex::new(None),
            preparing: AtomicBool::new(false),
            sync_misses: std::sync::atomic::AtomicU64::new(0),
            sync_served: std::sync::atomic::AtomicU64::new(0),
        };
        version
            .describe_kind(&spec.grant, true, self.max_tools())
            .map_err(|reason| LoadError::Invalid { path, reason })?;
        version.load_time = t0.elapsed();
        let version = Arc::new(version);
        let _ = version.me.set(Arc::downgrade(&version));
        Ok(version)
    }

    fn load_inner(&self, spec: &PluginSpec, bytes: &[u8], validate: bool) -> Result<Arc<PluginVersion>, LoadError> {
        struct Loading<'a>(&'a AtomicUsize);
        impl Drop for Loading<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.loading.fetch_add(1, Ordering::Relaxed);
        let _loading = Loading(&self.loading);
        let path = spec.path.clone();
        check_header(&path, bytes)?;
        let digest = digest(bytes);
        if !self.cache.has(&digest) {
            self.wait_holds(true);
        }
        let t0 = Instant::now();
        let no_async = !self.engine_opts.concurrency;
        let compile_err = |e: wasmtime::Error| {
            let mut reason = first_line(&e);
            if no_async {
                reason.push_str(" (this host runs without component-model async, which WASI 0.3 components need)");
            }
            LoadError::Compile { path: path.clone(), reason }
        };
        // Tiering: a miss in both caches compiles on the first tier.
        let first_engine = if self.tiered.load(Ordering::Relaxed) && !self.cache.has(&digest) {
            match self.first_tier_engine() {
                Ok(f) => Some(f),
                Err(e) => {
                    tracing::warn!("first compile tier unavailable ({e}); compiling optimised code");
                    None
                }
            }
        } else {
            None
        };
        // A component the first tier cannot compile (a feature Winch lacks)
        // is compiled optimised instead; a real error shows there too.
        let first = first_engine.and_then(|f| match Component::new(f.engine.engine(), bytes) {
            Ok(c) => Some((c, f)),
            Err(e) => {
                tracing::debug!(path = %path.display(), "first tier refused the component ({}); compiling optimised code", first_line(&e));
                None
            }
        });
        // `first_tier`: served by first-tier code, to be tiered up.
        let (mut component, mut cache, mut engine, mut linker, mut sync_linker, mut tier, mut first_tier) = match first
        {
            Some((c, f)) => (c, CacheOutcome::Compiled, &f.engine, &f.linker, &f.sync_linker, f.tier, true),
            None => {
                let (c, outcome, e, l, sl) = self.compile_optimised(&digest, bytes).map_err(compile_err)?;
                (c, outcome, e, l, sl, self.engine_opts.tier, false)
            }
        };
        let mut generic = generic::detect(&path, engine.engine(), &component, bytes, self.max_tools())?.map(Arc::new);
        if generic.is_some() && first_tier {
            // A generic component's functions are indexed into its code
            // (`generic.rs`); it is not swapped later, so optimise now.
            let (c, outcome, e, l, sl) = self.compile_optimised(&digest, bytes).map_err(compile_err)?;
            (component, cache, engine, linker, sync_linker, tier) = (c, outcome, e, l, sl, self.engine_opts.tier);
            first_tier = false;
            generic = generic::detect(&path, engine.engine(), &component, bytes, self.max_tools())?.map(Arc::new);
        }
        let load_time = t0.elapsed();
        let (wit_version, kinds) = match generic {
            Some(_) => (String::new(), vec![Kind::Tool]),
            None => inspect_names(&path, engine.engine(), &component)?,
        };
        let pre = linker.instantiate_pre(&component).map_err(|e| link_error(&path, &e))?;
        let indices = if generic.is_some() { generic::no_indices() } else { Indices::new(&pre, &kinds, &path)? };
        let sync = (generic.is_none() && kinds.contains(&Kind::Tool))
            .then(|| sync_call::SyncTool::new(sync_linker, &component))
            .flatten();
        let code = CompiledCode { pre, indices, engine: engine.clone(), tier, sync };
        spec.grant.validate().map_err(|e| LoadError::Invalid { path: path.clone(), reason: e.to_string() })?;
        // A dev build: the source directory's snapshot is part of the
        // version (`dev.rs`), and of its digest.
        let (dev_snapshot, digest) = match spec.grant.dev_source.as_deref().filter(|d| d.is_dir()) {
            Some(src) => {
                let snap = crate::dev::snapshot(src, &crate::dev::base_dir(self.cache.dir()))
                    .map_err(|reason| LoadError::Invalid { path: path.clone(), reason })?;
                let combined = crate::cache::digest(format!("{digest}+dev-source:{}", snap.digest).as_bytes());
                (Some(snap.dir), combined)
            }
            None => (None, digest),
        };
        let shared = Arc::new(PluginShared {
            id: spec.id.clone(),
            config: spec.config.clone(),
            kv: Default::default(),
            dev_snapshot,
        });
        let mut version = PluginVersion {
            id: spec.id.clone(),
            path: path.clone(),
            config_digest: config_digest(&spec.config),
            digest,
            size: bytes.len() as u64,
            wit_version,
            kinds,
            info: PluginInfo {
                name: String::new(),
                version: String::new(),
                description: String::new(),
                requests: GrantRequest::default(),
            },
            effective: Arc::new(Grant::default().intersect(&GrantRequest::default())),
            tools: Vec::new(),
            hook_subscriptions: Vec::new(),
            prompt_sections: Vec::new(),
            model_info: None,
            image_support: None,
            cache,
            load_time,
            code: Arc::new(RwLock::new(Arc::new(code))),
            shared,
            warm: spec.warm.then(|| Mutex::new(Vec::new())).filter(|_| generic.is_none()),
            sandboxes: std::sync::atomic::AtomicU64::new(0),
            llm_messages_lowered: std::sync::atomic::AtomicU64::new(0),
            generic,
            me: OnceLock::new(),
            spare: Mutex::new(None),
            preparing: AtomicBool::new(false),
            sync_misses: std::sync::atomic::AtomicU64::new(0),
            sync_served: std::sync::atomic::AtomicU64::new(0),
        };
        version
            .describe_kind(&spec.grant, validate, self.max_tools())
            .map_err(|reason| LoadError::Invalid { path: path.clone(), reason })?;
        let version = Arc::new(version);
        let _ = version.me.set(Arc::downgrade(&version));
        if first_tier {
            self.queue_tier_up(&version, bytes);
        }
        Ok(version)
    }
}

impl Indices {
    /// The typed export indices of `pre` for `kinds`.
    fn new(pre: &InstancePre<HostState>, kinds: &[Kind], path: &Path) -> Result<Self, LoadError> {
        let bad = |e: wasmtime::Error| LoadError::Invalid { path: path.to_path_buf(), reason: first_line(&e) };
        Ok(Self {
            plugin: Some(ex::plugin::GuestIndices::new(pre).map_err(bad)?),
            // Optional: components built before `configure` existed load as before.
            configure: ex::configure::GuestIndices::new(pre).ok(),
            tool: kinds.contains(&Kind::Tool).then(|| ex::tool::GuestIndices::new(pre)).transpose().map_err(bad)?,
            llm: kinds.contains(&Kind::Llm).then(|| ex::llm::GuestIndices::new(pre)).transpose().map_err(bad)?,
            // Optional: adapters built before `llm-images` existed (or that
            // take text only) load as before.
            llm_images: kinds.contains(&Kind::Llm).then(|| ex::llm_images::GuestIndices::new(pre).ok()).flatten(),
            // Optional: adapters built before `llm-history` existed get the
            // whole history at every request, as before.
            llm_history: kinds.contains(&Kind::Llm).then(|| ex::llm_history::GuestIndices::new(pre).ok()).flatten(),
            policy: kinds
                .contains(&Kind::Policy)
                .then(|| ex::policy::GuestIndices::new(pre))
                .transpose()
                .map_err(bad)?,
            hooks: kinds.contains(&Kind::Hooks).then(|| ex::hooks::GuestIndices::new(pre)).transpose().map_err(bad)?,
            skills: kinds
                .contains(&Kind::Skills)
                .then(|| ex::skills::GuestIndices::new(pre))
                .transpose()
                .map_err(bad)?,
            compactor: kinds
                .contains(&Kind::Compactor)
                .then(|| ex::compactor::GuestIndices::new(pre))
                .transpose()
                .map_err(bad)?,
        })
    }
}

fn check_header(path: &Path, bytes: &[u8]) -> Result<(), LoadError> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(LoadError::NotWasm { path: path.to_path_buf() });
    }
    // Core modules have layer 0 (`01 00 00 00`); components layer 1.
    if bytes[6..8] == [0, 0] {
        return Err(LoadError::CoreModule { path: path.to_path_buf() });
    }
    Ok(())
}

fn first_line(e: &wasmtime::Error) -> String {
    let s = format!("{e:#}");
    s.lines().next().unwrap_or("").to_string()
}

fn link_error(path: &Path, e: &wasmtime::Error) -> LoadError {
    let msg = format!("{e:#}");
    // wasmtime: "component imports instance `x`, but a matching
    // implementation was not found in the linker".
    if let Some(rest) = msg.split("component imports ").nth(1)
        && let Some(name) = rest.split('`').nth(1)
    {
        return LoadError::MissingImport { path: path.to_path_buf(), import: name.to_string() };
    }
    LoadError::Invalid { path: path.to_path_buf(), reason: msg.lines().next().unwrap_or("").to_string() }
}

/// Splits `ns:pkg/iface@ver` into (`ns:pkg`, `iface`, `ver`).
fn parse_name(name: &str) -> Option<(&str, &str, Option<&str>)> {
    let (pkg, rest) = name.split_once('/')?;
    let (iface, ver) = match rest.split_once('@') {
        Some((i, v)) => (i, Some(v)),
        None => (rest, None),
    };
    Some((pkg, iface, ver))
}

fn compatible(ver: &str) -> bool {
    let mut parts = ver.split(['.', '-', '+']).map(|p| p.parse::<u64>().ok());
    let (maj, min) = (parts.next().flatten(), parts.next().flatten());
    let (hm, hn, _) = crate::bindings::WIT_VERSION;
    // Semver for 0.x: the minor version is the compatibility boundary.
    maj == Some(hm) && min == Some(hn)
}

fn inspect_names(
    path: &Path,
    engine: &wasmtime::Engine,
    component: &Component,
) -> Result<(String, Vec<Kind>), LoadError> {
    let ty = component.component_type();
    let mut kinds = Vec::new();
    let mut version = None;
    let mut exports = Vec::new();
    let mut names: Vec<(String, bool)> = ty.imports(engine).map(|(n, _)| (n.to_string(), false)).collect();
    for (n, item) in ty.exports(engine) {
        if matches!(item.ty, ComponentItem::ComponentInstance(_)) {
            names.push((n.to_string(), true));
        }
        exports.push(n.to_string());
    }
    for (name, is_export) in &names {
        let Some((pkg, iface, ver)) = parse_name(name) else { continue };
        if pkg != crate::bindings::WIT_PACKAGE {
            continue;
        }
        let ver = ver.unwrap_or("");
        if !compatible(ver) {
            return Err(LoadError::UnsupportedVersion {
                path: path.to_path_buf(),
                found: format!("wharf:plugin@{ver}"),
                supported: "0.1.0".into(),
            });
        }
        if *is_export {
            version.get_or_insert_with(|| ver.to_string());
            if let Some(k) = Kind::from_interface(iface)
                && !kinds.contains(&k)
            {
                kinds.push(k);
            }
        }
    }
    kinds.sort();
    let has_plugin =
        names.iter().any(|(n, e)| *e && parse_name(n).is_some_and(|(p, i, _)| p == "wharf:plugin" && i == "plugin"));
    if kinds.is_empty() || !has_plugin {
        let exports = if exports.is_empty() { "none".to_string() } else { exports.join(", ") };
        if kinds.is_empty() {
            return Err(LoadError::WrongWorld { path: path.to_path_buf(), exports });
        }
        return Err(LoadError::Invalid {
            path: path.to_path_buf(),
            reason: "exports a plugin kind but not wharf:plugin/plugin (the self-description)".into(),
        });
    }
    Ok((version.unwrap_or_default(), kinds))
}

fn convert_request(r: wt::GrantRequest) -> GrantRequest {
    GrantRequest {
        filesystem: match r.filesystem {
            wt::FsAccess::None => FsRequest::None,
            wt::FsAccess::ReadOnly => FsRequest::ReadOnly,
            wt::FsAccess::ReadWrite => FsRequest::ReadWrite,
        },
        hosts: r.hosts,
        env: r.env,
        process: r.process,
        memory_mb: r.memory_mb,
    }
}

/// Maps an error out of a wasm call to a stable code. The message keeps
/// the root cause: the error's chain (without wasmtime's backtrace context),
/// on one line.
pub(crate) fn classify_error(err: &wasmtime::Error, state: &HostState) -> CallError {
    if let Some(l) = err.downcast_ref::<LimitError>().or(state.limits.hit.as_ref()) {
        return match l {
            LimitError::Timeout(_) => CallError::new(ToolErrorCode::Timeout, l.to_string()),
            LimitError::Memory(_) | LimitError::Table(_) => CallError::new(ToolErrorCode::MemoryLimit, l.to_string()),
        };
    }
    let cause = root_causes(err);
    // wasmtime's `HostcallFuelExhausted` is private: recognised by its text.
    if cause.contains("fuel allocated for hostcalls has been exhausted") {
        return CallError::new(
            ToolErrorCode::OutputLimit,
            format!(
                "the plugin tried to hand the host more than {} bytes in one go (output limit {} bytes): {cause}",
                state.hostcall_fuel, state.effective.output_limit_bytes
            ),
        );
    }
    if matches!(
        err.downcast_ref::<wasmtime::component::ResourceTableError>(),
        Some(wasmtime::component::ResourceTableError::Full)
    ) || cause.contains("resource table has no free keys")
    {
        return CallError::new(
            ToolErrorCode::MemoryLimit,
            format!("the plugin holds more than {} host resources at once: {cause}", crate::state::MAX_RESOURCES),
        );
    }
    if let Some(exit) = err.downcast_ref::<wasmtime_wasi::I32Exit>() {
        return CallError::new(ToolErrorCode::Trap, format!("the plugin exited with status {} ({cause})", exit.0));
    }
    if let Some(trap) = err.downcast_ref::<Trap>() {
        return match trap {
            Trap::StackOverflow => CallError::new(ToolErrorCode::StackOverflow, "the plugin overflowed its stack"),
            Trap::Interrupt => CallError::new(
                ToolErrorCode::Timeout,
                format!("call exceeded its time limit of {} ms", state.timeout_ms),
            ),
            Trap::MemoryOutOfBounds if deep_recursion(err) => {
                // Guests keep a shadow stack at the bottom of linear memory;
                // overflowing it wraps the stack pointer and faults there.
                CallError::new(ToolErrorCode::StackOverflow, "the plugin overflowed its stack (deep recursion)")
            }
            other => {
                // A dev build's loader prints `FILE:LINE: error` last before
                // it traps (a syntax or import error in the source).
                let printed = state
                    .is_dev()
                    .then(|| crate::dev::last_stderr_line(&state.stderr_contents()))
                    .flatten()
                    .map(|l| format!("; it printed: {l}"))
                    .unwrap_or_default();
                CallError::new(ToolErrorCode::Trap, format!("the plugin trapped: {other} ({cause}){printed}"))
            }
        };
    }
    CallError::new(ToolErrorCode::Trap, format!("the plugin failed: {cause}"))
}

/// Longest cause chain kept in a call error, bytes.
const MAX_CAUSE: usize = 2048;

/// The error's chain, outermost first, joined by `: `, on one line: the
/// contexts wasmtime adds (`error while executing at wasm backtrace: …`)
/// are left out, so what remains is what went wrong.
fn root_causes(err: &wasmtime::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for e in err.chain() {
        let text = e.to_string();
        let first = text.lines().next().unwrap_or("").trim();
        if first.is_empty() || first.starts_with("error while executing at wasm backtrace") {
            continue;
        }
        let text = wharf_core::util::escape_line(text.trim()).into_owned();
        if parts.last() != Some(&text) {
            parts.push(text);
        }
    }
    let mut out = if parts.is_empty() { first_line(err) } else { parts.join(": ") };
    if wharf_core::util::truncate_str(&mut out, MAX_CAUSE) {
        out.push('…');
    }
    out
}

/// Whether the trap's backtrace is a deep run of one function: the shape of
/// a recursion that ran out of (shadow) stack.
fn deep_recursion(err: &wasmtime::Error) -> bool {
    let Some(bt) = err.downcast_ref::<wasmtime::WasmBacktrace>() else { return false };
    let frames = bt.frames();
    // With a 128 KiB shadow stack and large frames, a runaway recursion can
    // fault after a couple of dozen frames.
    if frames.len() < 8 {
        return false;
    }
    let mut counts = std::collections::HashMap::new();
    for f in frames {
        *counts.entry((f.module().name().map(str::to_string), f.func_index())).or_insert(0usize) += 1;
    }
    counts.values().copied().max().unwrap_or(0) * 2 >= frames.len()
}

impl PluginVersion {
    /// Whether this version is a dev build running a source snapshot
    /// ([`crate::dev`]; a row with `dev = true`).
    pub fn is_dev(&self) -> bool {
        self.shared.dev_snapshot.is_some()
    }

    /// A `PluginRef` for the core.
    pub fn plugin_ref(&self) -> wharf_core::plugin::PluginRef {
        wharf_core::plugin::PluginRef {
            id: self.id.clone(),
            digest: self.digest.clone(),
            config: Some(self.config_digest.clone()),
        }
    }

    /// The plugin's configuration (its profile `config` table).
    pub fn config(&self) -> &serde_json::Value {
        &self.shared.config
    }

    /// Bytes one lift out of a call's store may copy: the output cap plus
    /// [`FUEL_SLACK`].
    fn call_fuel(&self) -> usize {
        self.effective.output_limit_bytes.saturating_add(FUEL_SLACK)
    }

    /// How many sandboxes (a store, then an instance) this version has made:
    /// one per fresh call, fewer where instances are reused.
    pub fn sandboxes_made(&self) -> u64 {
        self.sandboxes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many history messages `start` and `start-after` calls have
    /// lowered into this adapter's instances: with `llm-history`, a held
    /// instance is given only the messages it does not have yet.
    pub fn llm_messages_lowered(&self) -> u64 {
        self.llm_messages_lowered.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether warm calls of this version take the synchronous path
    /// (`component/sync_call.rs`): a warm tool whose imports cannot wait or
    /// reach outside its sandbox, on an engine with the path on, that has
    /// not had to hand many calls to the async path.
    pub fn calls_synchronously(&self) -> bool {
        let code = self.code();
        self.warm.is_some() && code.sync.is_some() && code.engine.sync_calls() && self.sync_misses_allow()
    }

    /// Whether the synchronous path's misses so far still allow it (see
    /// [`MAX_SYNC_MISSES`]).
    fn sync_misses_allow(&self) -> bool {
        let misses = self.sync_misses.load(Ordering::Relaxed);
        misses < MAX_SYNC_MISSES || misses.saturating_mul(SYNC_MISS_RATIO) <= self.sync_served.load(Ordering::Relaxed)
    }

    /// Whether the next fresh call's sandbox is prepared (see
    /// [`Self::take_spare`]).
    pub fn spare_ready(&self) -> bool {
        self.spare.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    /// The code calls instantiate now.
    fn code(&self) -> Arc<CompiledCode> {
        self.code.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether `code` is still this version's code (not swapped by a
    /// tier-up), without taking a reference to it.
    fn is_current(&self, code: &Arc<CompiledCode>) -> bool {
        Arc::ptr_eq(code, &self.code.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// After a tier-up swapped the code: warm instances and the spare of the
    /// old code are dropped (calls already running keep theirs).
    fn drop_stale(&self) {
        if let Some(pool) = &self.warm {
            pool.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
        let old = self.spare.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(old);
    }

    /// The tier of the code calls use now.
    pub fn tier(&self) -> CompileTier {
        self.code().tier
    }

    fn new_store(
        &self,
        code: &CompiledCode,
        effective: Arc<EffectiveGrant>,
        fuel: usize,
    ) -> Result<Store<HostState>, CallError> {
        self.sandboxes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.build_store(code, effective, fuel)
    }

    fn build_store(
        &self,
        code: &CompiledCode,
        effective: Arc<EffectiveGrant>,
        fuel: usize,
    ) -> Result<Store<HostState>, CallError> {
        let mut state = HostState::new(self.shared.clone(), effective)
            .map_err(|e| CallError::new(ToolErrorCode::HostError, format!("cannot set up the sandbox: {e:#}")))?;
        state.hostcall_fuel = fuel;
        let mut store = Store::new(code.engine.engine(), state);
        // What one lift may copy out of the guest (results of an export, or
        // the arguments of one import call): the host's memory for a call
        // stays within the memory grant + this + a constant.
        store.set_hostcall_fuel(fuel);
        store.limiter(|s| &mut s.limits);
        store.set_epoch_deadline(1);
        // Yield to the executor every tick (fairness for other tasks) until
        // the call's deadline, then stop the guest wherever it is.
        store.epoch_deadline_callback(|ctx| {
            let s = ctx.data();
            if Instant::now() >= s.deadline {
                Err(LimitError::Timeout(s.timeout_ms).into())
            } else {
                Ok(UpdateDeadline::Yield(1))
            }
        });
        Ok(store)
    }

    /// The sandbox prepared for a call with `effective` and `code`, if one is
    /// ready and still fits: calls with the version's own grants only (not
    /// `describe`'s), of the current code, and with the host binding
    /// ([`HostBinding`]) unchanged since it was built. Counted as made now.
    fn take_spare(
        &self,
        code: &Arc<CompiledCode>,
        effective: &Arc<EffectiveGrant>,
        fuel: usize,
    ) -> Option<(Store<HostState>, wasmtime::component::Instance)> {
        if !Arc::ptr_eq(effective, &self.effective) {
            return None;
        }
        let spare = self.spare.lock().unwrap_or_else(|e| e.into_inner()).take()?;
        if !Arc::ptr_eq(&spare.code, code) || HostBinding::now(effective).as_ref() != Some(&spare.binding) {
            return None;
        }
        let PreparedInstance { mut store, inst, .. } = spare;
        store.data_mut().hostcall_fuel = fuel;
        store.set_hostcall_fuel(fuel);
        // Its deadline was set when it was built; epochs have passed since.
        store.set_epoch_deadline(1);
        self.sandboxes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some((store, inst))
    }

    /// After a fresh call (`used` is its store): unless one is ready or on
    /// its way, prepares the next call's sandbox on a task of the current
    /// runtime, so the used one is released and the next instantiated while
    /// the caller waits on something else (a model's reply). Held against
    /// the engine's budget for idle instances.
    fn prepare_spare(&self, effective: &Arc<EffectiveGrant>, used: Store<HostState>) {
        let code = self.code();
        if !code.engine.spares() || !Arc::ptr_eq(effective, &self.effective) {
            return;
        }
        let Some(me) = self.me.get().and_then(Weak::upgrade) else { return };
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        if self.spare.lock().unwrap_or_else(|e| e.into_inner()).is_some() || self.preparing.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let Some(permit) = code.engine.try_hold() else {
            self.preparing.store(false, Ordering::Release);
            return;
        };
        rt.spawn(async move {
            // Spawned from a worker, the task sits in that worker's
            // next-task slot, which other workers cannot steal, and would
            // run as soon as the step's task waits, in front of the reply
            // that wakes it. Yielding once moves it to the worker's queue,
            // behind the step's work.
            tokio::task::yield_now().await;
            drop(used);
            me.make_spare(code, permit).await
        });
    }

    async fn make_spare(&self, code: Arc<CompiledCode>, permit: crate::engine::HoldPermit) {
        struct Done<'a>(&'a AtomicBool);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Release);
            }
        }
        let _done = Done(&self.preparing);
        let Some(binding) = HostBinding::now(&self.effective) else { return };
        let Ok(mut store) = self.build_store(&code, self.effective.clone(), self.call_fuel()) else { return };
        store.data_mut().begin_call(self.effective.timeout_ms);
        let wall = store.data().wall_deadline();
        // A failure here is the next call's to report: it makes its own.
        let Ok(Ok(inst)) = tokio::time::timeout_at(wall, code.pre.instantiate_async(&mut store)).await else { return };
        *self.spare.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(PreparedInstance { store, inst, code, binding, _permit: permit });
    }

    /// Calls `plugin.info()` with no grants, then computes the effective
    /// grant and asks the kinds for their registrations.
    /// Describes a generic component from its exports, a Wharf plugin by
    /// calling it.
    fn describe_kind(&mut self, grant: &Grant, validate: bool, max_tools: usize) -> Result<(), String> {
        if self.generic.is_some() { self.describe_generic(grant) } else { self.describe(grant, validate, max_tools) }
    }

    fn describe(&mut self, grant: &Grant, validate: bool, max_tools: usize) -> Result<(), String> {
        // Loading is blocking; when called from inside an async runtime
        // (tests, `block_in_place` callers) run the describe calls on a
        // scoped thread with their own small runtime.
        if tokio::runtime::Handle::try_current().is_ok() {
            return std::thread::scope(|s| {
                s.spawn(|| self.describe_blocking(grant, validate, max_tools))
                    .join()
                    .unwrap_or_else(|_| Err("describe panicked".into()))
            });
        }
        self.describe_blocking(grant, validate, max_tools)
    }

    fn describe_blocking(&mut self, grant: &Grant, validate: bool, max_tools: usize) -> Result<(), String> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
        rt.block_on(async {
            let none = Arc::new(Grant::default().intersect(&GrantRequest::default()));
            let code = self.code();
            let plugin_idx = code.indices.plugin.as_ref().ok_or("exports no wharf:plugin/plugin")?;
            let info = sandboxed!(code = code; self, none, 10_000, DESCRIBE_BUDGET, |store, inst| {
                {
                    let guest = plugin_idx.load(&mut store, &inst)?;
                    guest.call_info(&mut store).await
                }
            })
            .map_err(|e| format!("plugin.info() failed: {e}"))?;
            check_info(&info)?;
            self.info = PluginInfo {
                name: info.name,
                version: info.version,
                description: info.description,
                requests: convert_request(info.requests),
            };
            self.effective = Arc::new(grant.intersect(&self.info.requests));
            if let Some(idx) = code.indices.configure.as_ref().filter(|_| validate) {
                let verdict =
                    sandboxed!(code = code; self, self.effective.clone(), 10_000, DESCRIBE_BUDGET, |store, inst| {
                        {
                            let guest = idx.load(&mut store, &inst)?;
                            guest.call_validate(&mut store).await
                        }
                    })
                    .map_err(|e| format!("configure.validate() failed: {e}"))?;
                verdict.map_err(|msg| format!("invalid configuration: {}", shown(&msg, 1024)))?;
            }
            if let Some(tool_idx) = &code.indices.tool {
                // Every tool's spec in one list: the total bound, not one
                // describe call's.
                let budget = MAX_TOOL_SPECS_TOTAL.max(DESCRIBE_BUDGET);
                let specs = sandboxed!(code = code; self, self.effective.clone(), 10_000, budget, |store, inst| {
                    {
                        let guest = tool_idx.load(&mut store, &inst)?;
                        guest.call_list_tools(&mut store).await
                    }
                })
                .map_err(|e| format!("tool.list-tools() failed: {e}"))?;
                if specs.len() > max_tools {
                    return Err(format!(
                        "tool.list-tools() returned {} tools; a plugin may register at most {max_tools} (the operator \
                         setting `{MAX_TOOLS_SETTING}`)",
                        specs.len()
                    ));
                }
                let mut tools: Vec<wharf_core::plugin::ToolSpec> = Vec::new();
                let mut names = std::collections::HashSet::new();
                for s in specs {
                    let spec = convert_spec(s)?;
                    if spec.name.starts_with("mcp__") {
                        return Err(format!(
                            "tool name `{}` is reserved (`mcp__` names belong to MCP servers)",
                            spec.name
                        ));
                    }
                    if !names.insert(spec.name.clone()) {
                        return Err(format!("tool.list-tools() names the tool `{}` twice", spec.name));
                    }
                    tools.push(spec);
                }
                self.tools = tools;
            }
            if let Some(hooks_idx) = &code.indices.hooks {
                let (subs, sections) =
                    sandboxed!(code = code; self, self.effective.clone(), 10_000, DESCRIBE_BUDGET, |store, inst| {
                        let guest = hooks_idx.load(&mut store, &inst)?;
                        let subs = guest.call_subscriptions(&mut store).await?;
                        let sections = guest.call_prompt_sections(&mut store).await?;
                        Ok::<_, wasmtime::Error>((subs, sections))
                    })
                    .map_err(|e| format!("hooks.subscriptions() failed: {e}"))?;
                check_hooks(&subs, &sections)?;
                self.hook_subscriptions =
                    subs.into_iter().map(|s| (crate::registrations::from_wit_point(s.point), s.priority)).collect();
                self.prompt_sections = sections.into_iter().map(|s| (s.id, s.order, s.text)).collect();
            }
            if let Some(llm_idx) = &code.indices.llm {
                let m = sandboxed!(code = code; self, self.effective.clone(), 10_000, DESCRIBE_BUDGET, |store, inst| {
                    let guest = llm_idx.load(&mut store, &inst)?;
                    guest.call_model(&mut store).await
                })
                .map_err(|e| format!("llm.model() failed: {e}"))?;
                if m.model.len() > MAX_NAME {
                    return Err(format!(
                        "llm.model(): model name `{}` is longer than {MAX_NAME} bytes",
                        shown(&m.model, 64)
                    ));
                }
                self.model_info =
                    Some(wharf_core::plugin::ModelInfo { model: m.model, context_window: m.context_window });
                if let Some(images_idx) = &code.indices.llm_images {
                    let s =
                        sandboxed!(code = code; self, self.effective.clone(), 10_000, DESCRIBE_BUDGET, |store, inst| {
                            let guest = images_idx.load(&mut store, &inst)?;
                            guest.call_support(&mut store).await
                        })
                        .map_err(|e| format!("llm-images.support() failed: {e}"))?;
                    if s.mime_types.len() > MAX_IMAGE_MIME_TYPES
                        || s.mime_types.iter().any(|m| m.is_empty() || m.len() > MAX_NAME)
                    {
                        return Err(format!(
                            "llm-images.support(): at most {MAX_IMAGE_MIME_TYPES} media types of at most {MAX_NAME} bytes"
                        ));
                    }
                    self.image_support = (!s.mime_types.is_empty())
                        .then_some(wharf_core::images::ImageSupport { mime_types: s.mime_types, max_bytes: s.max_bytes });
                }
            }
            Ok(())
        })
    }

    /// One tool call in a fresh sandbox (or a warm instance if opted in).
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: &str,
        ctx: &CallContext,
    ) -> Result<wharf_core::plugin::ToolOutcome, CallError> {
        if let Some(g) = &self.generic {
            return self.call_generic(g, name, arguments, ctx).await;
        }
        let code = self.code();
        let Some(tool_idx) = &code.indices.tool else {
            return Err(CallError::new(ToolErrorCode::NotATool, format!("plugin `{}` exports no tools", self.id)));
        };
        let timeout = self.effective.timeout_ms;
        let res = if self.warm.is_some() {
            self.call_warm(&code, name, arguments, ctx).await
        } else {
            let wctx = owned_context(ctx);
            sandboxed!(code = code; self, self.effective.clone(), timeout, self.call_fuel(), |store, inst| {
                {
                    store.data_mut().set_services(ctx.services.clone());
                    // What the guest printed so far is the call's progress
                    // (shown when a call running as a cell yields).
                    if let Some(s) = &ctx.services {
                        let pipe = store.data().stdout_pipe();
                        s.set_progress(std::sync::Arc::new(move || {
                            String::from_utf8_lossy(&pipe.contents()).into_owned()
                        }));
                    }
                    let guest = tool_idx.load(&mut store, &inst)?;
                    guest.call_call(&mut store, name, arguments, &wctx).await
                }
            })
        }?;
        self.finish_tool(res)
    }

    fn finish_tool(
        &self,
        res: Result<wt::ToolOutput, wt::ToolError>,
    ) -> Result<wharf_core::plugin::ToolOutcome, CallError> {
        match res {
            Ok(out) => {
                let size = out.content.len() + out.details.as_ref().map_or(0, |d| d.len());
                if size > self.effective.output_limit_bytes {
                    return Err(CallError::new(
                        ToolErrorCode::OutputLimit,
                        format!(
                            "output of {size} bytes exceeds the limit of {} bytes",
                            self.effective.output_limit_bytes
                        ),
                    ));
                }
                let details = out.details.and_then(|d| serde_json::from_str(&d).ok());
                Ok(wharf_core::plugin::ToolOutcome { content: out.content, is_error: false, error_code: None, details })
            }
            Err(e) => {
                let (code, message) = tool_error(e, self.effective.output_limit_bytes);
                Ok(wharf_core::plugin::ToolOutcome {
                    content: message,
                    is_error: true,
                    error_code: Some(code),
                    details: None,
                })
            }
        }
    }

    /// Evaluates a policy in a fresh sandbox. With `services` (a policy
    /// granted `questions`) it may ask the session's user about the call;
    /// its question ends with `cancel` shortly before its deadline
    /// ([`crate::services::policy_reserve`]), so the policy still decides.
    pub async fn call_policy(
        &self,
        req: ex::policy::Request,
        services: Option<Arc<dyn wharf_core::plugin::SessionServices>>,
    ) -> Result<ex::policy::Decision, CallError> {
        let code = self.code();
        let Some(idx) = &code.indices.policy else {
            return Err(CallError::new(ToolErrorCode::HostError, format!("plugin `{}` is not a policy", self.id)));
        };
        sandboxed!(code = code; self, self.effective.clone(), self.effective.timeout_ms, self.call_fuel(), |store, inst| {
            if services.is_some() {
                store.data_mut().set_services(services.clone());
                store.data_mut().policy_call = true;
            }
            let guest = idx.load(&mut store, &inst)?;
            guest.call_evaluate(&mut store, &req).await
        })
    }

    /// Runs a hook listener in a fresh sandbox.
    pub async fn call_hook(
        &self,
        point: ex::hooks::HookPoint,
        payload: String,
    ) -> Result<ex::hooks::Outcome, CallError> {
        let code = self.code();
        let Some(idx) = &code.indices.hooks else {
            return Err(CallError::new(ToolErrorCode::HostError, format!("plugin `{}` has no hooks", self.id)));
        };
        sandboxed!(code = code; self, self.effective.clone(), self.effective.timeout_ms, self.call_fuel(), |store, inst| {
            let guest = idx.load(&mut store, &inst)?;
            guest.call_handle(&mut store, point, &payload).await
        })
    }

    /// The skills catalog of a skills plugin (its own error as
    /// [`PluginError::Answer`]).
    pub async fn call_skills_catalog(&self) -> Result<Vec<ex::skills::SkillSummary>, PluginError> {
        let code = self.code();
        let Some(idx) = &code.indices.skills else {
            return Err(CallError::new(ToolErrorCode::HostError, format!("plugin `{}` has no skills", self.id)).into());
        };
        let answer = sandboxed!(code = code; self, self.effective.clone(), self.effective.timeout_ms, self.call_fuel(), |store, inst| {
            let guest = idx.load(&mut store, &inst)?;
            guest.call_catalog(&mut store).await
        })?;
        answer.map_err(PluginError::Answer)
    }

    /// Asks a compactor for a summary of `messages`.
    pub async fn call_compactor(
        &self,
        messages: &[wt::Message],
        target_tokens: u32,
        services: Arc<dyn wharf_core::plugin::SessionServices>,
    ) -> Result<String, PluginError> {
        let code = self.code();
        let Some(idx) = &code.indices.compactor else {
            return Err(
                CallError::new(ToolErrorCode::HostError, format!("plugin `{}` is not a compactor", self.id)).into()
            );
        };
        let answer = sandboxed!(code = code; self, self.effective.clone(), self.effective.timeout_ms, self.call_fuel(), |store, inst| {
            store.data_mut().services = Some(services);
            let guest = idx.load(&mut store, &inst)?;
            guest.call_summarize(&mut store, messages, target_tokens).await
        })?;
        answer.map_err(PluginError::Answer)
    }

    /// Starts a completion of `messages` with `req`'s system prompt, tools
    /// and cap (`req.messages` is ignored): on `held`'s instance when it is
    /// of the current code (the turn's previous request left it), else a
    /// fresh one. A held instance exporting `llm-history` is given only the
    /// messages after the prefix it was already sent, unchanged since. The
    /// store stays with the stream.
    pub(crate) async fn start_completion(
        &self,
        mut req: ex::llm::Request,
        messages: &[wharf_core::plugin::Message],
        mark: HistoryMark,
        images: Vec<ex::llm_images::Image>,
        held: Option<HeldAdapter>,
    ) -> Result<StartedCompletion, crate::registrations::StartError> {
        use crate::registrations::StartError;
        let code = self.code();
        let Some(idx) = &code.indices.llm else {
            return Err(StartError::Sandbox(CallError::new(
                ToolErrorCode::HostError,
                format!("plugin `{}` is not an LLM adapter", self.id),
            )));
        };
        let timeout_ms = self.effective.timeout_ms;
        // An instance of code swapped out since (a tier-up) is dropped.
        let held = held.filter(|h| Arc::ptr_eq(&h.code, &code));
        let (mut store, held_guest, mut sent) = match held {
            Some(mut h) => {
                // As for a warm tool call: a new deadline from now.
                h.store.set_epoch_deadline(1);
                (h.store, Some(h.guest), h.sent)
            }
            None => (
                self.new_store(&code, self.effective.clone(), self.call_fuel()).map_err(StartError::Sandbox)?,
                None,
                SentHistory::default(),
            ),
        };
        // How many of `messages` the instance already holds: the longest
        // prefix equal to what it was sent last (a compaction or rewrite
        // shortens it). The agent loop's marks say so for a history that
        // only grew; other requests are compared. Images always go the
        // whole way.
        let kept = if images.is_empty() && held_guest.as_ref().is_some_and(|g| g.history.is_some()) {
            match mark.continues(&sent.1) {
                Some(n) if n == sent.0.len() && n <= messages.len() => n,
                _ => sent.0.iter().zip(messages).take_while(|(a, b)| a == b).count(),
            }
        } else {
            0
        };
        let kept = u32::try_from(kept).unwrap_or(0);
        let mut from = 0usize;
        store.data_mut().begin_call(timeout_ms);
        let wall = store.data().wall_deadline();
        let res = {
            let fut = std::pin::pin!(async {
                let guest = match held_guest {
                    Some(g) => g,
                    None => {
                        let inst = code.pre.instantiate_async(&mut store).await?;
                        let llm = idx.load(&mut store, &inst)?;
                        let images = match &code.indices.llm_images {
                            Some(i) => Some(i.load(&mut store, &inst)?),
                            None => None,
                        };
                        let history = match &code.indices.llm_history {
                            Some(i) => Some(i.load(&mut store, &inst)?),
                            None => None,
                        };
                        LlmGuests { llm, images, history }
                    }
                };
                let lowered = |n: usize| {
                    self.llm_messages_lowered.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
                };
                if let (Some(h), true) = (&guest.history, kept > 0) {
                    req.messages = messages[kept as usize..].iter().map(crate::registrations::to_wit_message).collect();
                    lowered(req.messages.len());
                    match h.call_start_after(&mut store, kept, &req).await? {
                        Ok(Some(handle)) => {
                            from = kept as usize;
                            return Ok((guest, Ok(handle)));
                        }
                        Ok(None) => {}
                        Err(e) => return Ok((guest, Err(e))),
                    }
                }
                req.messages = messages.iter().map(crate::registrations::to_wit_message).collect();
                lowered(req.messages.len());
                let handle = match (&guest.images, images.is_empty()) {
                    (_, true) => guest.llm.call_start(&mut store, &req).await?,
                    (Some(g), false) => g.call_start_with_images(&mut store, &req, &images).await?,
                    (None, false) => {
                        return Err(wasmtime::Error::msg(format!(
                            "the model adapter `{}` does not export wharf:plugin/llm-images: it takes text only",
                            self.id
                        )));
                    }
                };
                Ok::<_, wasmtime::Error>((guest, handle))
            });
            tokio::time::timeout_at(wall, fut).await
        };
        let out = match res {
            Err(_) => Err(StartError::Sandbox(CallError::new(
                ToolErrorCode::Timeout,
                format!("adapter start exceeded {timeout_ms} ms"),
            ))),
            Ok(Err(e)) => Err(StartError::Sandbox(classify_error(&e, store.data()))),
            Ok(Ok((_, Err(e)))) => Err(StartError::Adapter(e)),
            Ok(Ok((guest, Ok(handle)))) => Ok((guest, handle)),
        };
        store.data_mut().flush_stdio();
        let (guest, handle) = out?;
        // What the instance holds now: the request's messages (kept ones
        // not copied again), when it keeps them and the request was text.
        if guest.history.is_some() && images.is_empty() {
            sent.0.truncate(from);
            sent.0.extend_from_slice(&messages[from..]);
            sent.1 = mark;
        } else {
            sent = SentHistory::default();
        }
        Ok(StartedCompletion { store, guest, handle, code, sent })
    }

    /// Keeps a finished stream's instance for the turn's next request:
    /// only of the current code, and only within the engine's budget of
    /// idle instances.
    pub(crate) fn hold_adapter(
        &self,
        store: Store<HostState>,
        guest: LlmGuests,
        code: Arc<CompiledCode>,
        sent: SentHistory,
    ) -> Option<HeldAdapter> {
        if !Arc::ptr_eq(&code, &self.code()) {
            return None;
        }
        let permit = code.engine.try_hold()?;
        Some(HeldAdapter { store, guest, code, sent, _permit: permit })
    }

    async fn call_warm(
        &self,
        code: &Arc<CompiledCode>,
        name: &str,
        arguments: &str,
        ctx: &CallContext,
    ) -> Result<Result<wt::ToolOutput, wt::ToolError>, CallError> {
        let (Some(pool), Some(tool_idx)) = (&self.warm, &code.indices.tool) else {
            return Err(CallError::new(ToolErrorCode::HostError, "not a warm tool plugin"));
        };
        let timeout = self.effective.timeout_ms;
        // One deadline for the call, kept if the synchronous attempt hands
        // it to the async path.
        let deadline = Instant::now() + Duration::from_millis(timeout);
        let sync = code.sync.as_ref().filter(|_| code.engine.sync_calls() && self.sync_misses_allow());
        if let Some(st) = sync {
            match self.call_warm_sync(code, st, pool, name, arguments, ctx, deadline) {
                Some(done) => return done,
                None => {
                    self.sync_misses.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        let taken = pool
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .filter(|w| Arc::ptr_eq(&w.code, code) && matches!(w.tool, WarmTool::Async(_)));
        let mut w = match taken {
            Some(w) => w,
            None => {
                let mut store = self.new_store(code, self.effective.clone(), self.call_fuel())?;
                store.data_mut().begin_call_until(timeout, deadline);
                let inst =
                    code.pre.instantiate_async(&mut store).await.map_err(|e| classify_error(&e, store.data()))?;
                let tool = tool_idx.load(&mut store, &inst).map_err(|e| classify_error(&e, store.data()))?;
                WarmInstance { store, tool: WarmTool::Async(tool), code: code.clone() }
            }
        };
        w.store.data_mut().begin_call_until(timeout, deadline);
        // Epochs have passed since its last call: without this its first
        // check would find the deadline passed and yield for nothing.
        w.store.set_epoch_deadline(1);
        w.store.data_mut().set_services(ctx.services.clone());
        let wall = w.store.data().wall_deadline();
        let wctx = owned_context(ctx);
        let res = match &w.tool {
            WarmTool::Async(tool) => {
                let call = std::pin::pin!(tool.call_call(&mut w.store, name, arguments, &wctx));
                tokio::time::timeout_at(wall, call).await
            }
            WarmTool::Sync(_) => {
                return Err(CallError::new(ToolErrorCode::HostError, "warm instance of the wrong path"));
            }
        };
        w.store.data_mut().set_services(None);
        match res {
            Ok(Ok(v)) => {
                // An instance of code swapped out meanwhile is not kept.
                if self.is_current(&w.code) {
                    pool.lock().unwrap_or_else(|e| e.into_inner()).push(w);
                }
                Ok(v)
            }
            // A trap poisons the store: drop the instance.
            Ok(Err(e)) => Err(classify_error(&e, w.store.data())),
            Err(_) => {
                Err(CallError::new(ToolErrorCode::Timeout, format!("call exceeded its time limit of {timeout} ms")))
            }
        }
    }

    /// A warm call on the synchronous path (`sync_call.rs`), inline on the
    /// calling thread. `None`: it reached something that would wait, or ran
    /// past its first epoch tick; its instance is dropped and the call is
    /// to be run on the async path with the same `deadline`.
    #[allow(clippy::too_many_arguments)]
    fn call_warm_sync(
        &self,
        code: &Arc<CompiledCode>,
        st: &sync_call::SyncTool,
        pool: &Mutex<Vec<WarmInstance>>,
        name: &str,
        arguments: &str,
        ctx: &CallContext,
        deadline: Instant,
    ) -> Option<Result<Result<wt::ToolOutput, wt::ToolError>, CallError>> {
        let timeout = self.effective.timeout_ms;
        let taken = pool
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .filter(|w| Arc::ptr_eq(&w.code, code) && matches!(w.tool, WarmTool::Sync(_)));
        let mut w = match taken {
            Some(w) => w,
            None => {
                let mut store = match self.new_store(code, self.effective.clone(), self.call_fuel()) {
                    Ok(s) => s,
                    Err(e) => return Some(Err(e)),
                };
                // Nothing on this path may wait: past its first full tick a
                // call goes to the async path (which yields every tick),
                // unless its deadline has come.
                store.epoch_deadline_callback(|ctx| {
                    let s = ctx.data();
                    if Instant::now() >= s.deadline {
                        Err(LimitError::Timeout(s.timeout_ms).into())
                    } else {
                        Err(sync_call::NeedsAsync.into())
                    }
                });
                store.data_mut().begin_call_until(timeout, deadline);
                store.set_epoch_deadline(2);
                let made = st.pre.instantiate(&mut store).and_then(|inst| {
                    let func = inst
                        .get_func(&mut store, st.call)
                        .ok_or_else(|| wasmtime::format_err!("the component exports no `tool.call`"))?;
                    // Type-checked once here; each call uses it unchecked.
                    func.typed::<(&str, &str, &CallContextRef), (Result<wt::ToolOutput, wt::ToolError>,)>(&store)?;
                    Ok(func)
                });
                match made {
                    Ok(func) => WarmInstance { store, tool: WarmTool::Sync(func), code: code.clone() },
                    Err(e) if sync_call::needs_async(&e) => return None,
                    Err(e) => return Some(Err(classify_error(&e, store.data()))),
                }
            }
        };
        let WarmTool::Sync(func) = w.tool else { return None };
        w.store.data_mut().begin_call_until(timeout, deadline);
        // At least one full tick before the callback above runs.
        w.store.set_epoch_deadline(2);
        w.store.data_mut().set_services(ctx.services.clone());
        let wctx =
            CallContextRef { session_id: &ctx.session_id, call_id: &ctx.call_id, workspace: ctx.workspace.as_deref() };
        // SAFETY: `func` was type-checked as `ToolCallFn` (the same
        // parameter and result types; lifetimes do not change a component
        // type) when this instance was made, in this store.
        let typed: ToolCallFn<'_> = unsafe { wasmtime::component::TypedFunc::new_unchecked(func) };
        let res = typed.call(&mut w.store, (name, arguments, &wctx));
        w.store.data_mut().set_services(None);
        match res {
            Ok((v,)) => {
                self.sync_served.fetch_add(1, Ordering::Relaxed);
                // An instance of code swapped out meanwhile is not kept.
                if self.is_current(&w.code) {
                    pool.lock().unwrap_or_else(|e| e.into_inner()).push(w);
                }
                Some(Ok(v))
            }
            // The store is dropped with whatever the attempt did.
            Err(e) if sync_call::needs_async(&e) => None,
            // A trap poisons the store: drop the instance.
            Err(e) => Some(Err(classify_error(&e, w.store.data()))),
        }
    }
}

fn convert_spec(s: wt::ToolSpec) -> Result<wharf_core::plugin::ToolSpec, String> {
    let valid_name = !s.name.is_empty()
        && s.name.len() <= 64
        && s.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !valid_name {
        return Err(format!("tool name `{}` is invalid (want [a-zA-Z0-9_-]{{1,64}})", shown(&s.name, 64)));
    }
    if s.description.len() > MAX_TOOL_DESCRIPTION {
        return Err(format!(
            "tool `{}`: description of {} bytes is longer than {MAX_TOOL_DESCRIPTION} bytes",
            s.name,
            s.description.len()
        ));
    }
    if s.input_schema.len() > MAX_TOOL_SCHEMA {
        return Err(format!(
            "tool `{}`: input schema of {} bytes is larger than {MAX_TOOL_SCHEMA} bytes",
            s.name,
            s.input_schema.len()
        ));
    }
    let schema: serde_json::Value = serde_json::from_str(&s.input_schema)
        .map_err(|e| format!("tool `{}`: input schema is not JSON: {e}", s.name))?;
    if !schema.is_object() {
        return Err(format!("tool `{}`: input schema must be a JSON object", s.name));
    }
    // Compiled now (and kept for the calls): an invalid schema fails here.
    wharf_core::schema::compiled(&schema).map_err(|e| format!("tool `{}`: {e}", s.name))?;
    Ok(wharf_core::plugin::ToolSpec {
        name: s.name,
        description: s.description,
        input_schema: schema,
        mode: match s.mode {
            wt::ToolMode::Parallel => wharf_core::plugin::ToolMode::Parallel,
            wt::ToolMode::Exclusive => wharf_core::plugin::ToolMode::Exclusive,
        },
    })
}

/// A tool's error as (code, message) for the outcome. The code must be a
/// token of `A-Z`, `0-9`, `_` of at most [`MAX_ERROR_CODE`] bytes; an empty
/// one becomes `TOOL_ERROR`, anything else `TOOL_ERROR` with the original
/// (cut, escaped) noted in the message. A message over the output cap is cut
/// to [`ERROR_MESSAGE_CUT`] bytes on a character boundary.
fn tool_error(e: wt::ToolError, output_limit: usize) -> (ToolErrorCode, String) {
    let mut message = e.message;
    if message.len() > output_limit {
        let total = message.len();
        wharf_core::util::truncate_str(&mut message, output_limit.min(ERROR_MESSAGE_CUT));
        message.push_str(&format!(" …[error message truncated: {total} bytes in total]"));
    }
    if e.code.is_empty() {
        return (ToolErrorCode::ToolError, message);
    }
    if valid_code(&e.code) {
        return (e.code.into(), message);
    }
    message.push_str(&format!(
        "\n[the tool's error code `{}` ({} bytes) is not a code (1-{MAX_ERROR_CODE} of A-Z, 0-9, _): replaced by TOOL_ERROR]",
        shown(&e.code, MAX_ERROR_CODE),
        e.code.len()
    ));
    (ToolErrorCode::ToolError, message)
}

/// Checks the bounds of `plugin.info()`.
fn check_info(info: &wt::PluginInfo) -> Result<(), String> {
    for (what, text, max) in [
        ("name", &info.name, MAX_NAME),
        ("version", &info.version, MAX_NAME),
        ("description", &info.description, MAX_PLUGIN_DESCRIPTION),
    ] {
        if text.len() > max {
            return Err(format!("plugin.info(): {what} of {} bytes is longer than {max} bytes", text.len()));
        }
    }
    for (what, list) in [("hosts", &info.requests.hosts), ("env", &info.requests.env)] {
        if list.len() > MAX_REQUESTS {
            return Err(format!(
                "plugin.info(): requests {} {what} entries; at most {MAX_REQUESTS} are allowed",
                list.len()
            ));
        }
        if let Some(long) = list.iter().find(|h| h.len() > MAX_NAME) {
            return Err(format!(
                "plugin.info(): requested {what} entry `{}` is longer than {MAX_NAME} bytes",
                shown(long, 64)
            ));
        }
    }
    Ok(())
}

/// Checks the bounds of a hooks plugin's registrations.
fn check_hooks(subs: &[ex::hooks::Subscription], sections: &[ex::hooks::PromptSection]) -> Result<(), String> {
    if subs.len() > MAX_SUBSCRIPTIONS {
        return Err(format!(
            "hooks.subscriptions() returned {} subscriptions; at most {MAX_SUBSCRIPTIONS} are allowed",
            subs.len()
        ));
    }
    if sections.len() > MAX_PROMPT_SECTIONS {
        return Err(format!(
            "hooks.prompt-sections() returned {} sections; at most {MAX_PROMPT_SECTIONS} are allowed",
            sections.len()
        ));
    }
    for s in sections {
        if s.id.len() > MAX_NAME {
            return Err(format!(
                "hooks.prompt-sections(): section id `{}` is longer than {MAX_NAME} bytes",
                shown(&s.id, 64)
            ));
        }
        if s.text.len() > MAX_PROMPT_SECTION {
            return Err(format!(
                "hooks.prompt-sections(): section `{}` of {} bytes is longer than {MAX_PROMPT_SECTION} bytes",
                shown(&s.id, 64),
                s.text.len()
            ));
        }
    }
    Ok(())
}
