//! Wharf core: the session event log, the event bus, the agent loop and the
//! tool pipeline. Nothing here knows about WebAssembly; capabilities arrive
//! through the traits in [`plugin`] and are owned per plugin version by the
//! [`registry`].
//!
//! Modules:
//!
//! - [`plugin`] — the seams: `Tool`, `LlmAdapter`/`LlmStream`, `Policy`,
//!   `Hook`, prompt sections, message and LLM types.
//! - [`registry`] — per-plugin-version registrations, atomic swap and revoke.
//! - [`events`] — typed session events and their JSON envelope.
//! - [`projection`] — the incremental model-visible projection
//!   (`derive_messages`).
//! - [`store`] — the session store over a [`store::Backend`] (JSONL files by
//!   default): create, resume with crash repair, list, load, fork, export;
//!   one writer per session; batched fsync.
//! - [`bus`] — hook dispatch: emit, waterfall, serial, parallel.
//! - [`schema`] — JSON Schema validation of tool arguments (bounded).
//! - [`catalog`] — Code Mode's tool catalogue in a calling tool's description.
//! - [`policy`] — composition of permission decisions.
//! - [`approval`] — the approval service (`Approver`, headless and channel).
//! - [`cells`] — long-running tool calls that yield and resume.
//! - [`pipeline`] — one tool call from `tool/call` to `tool/result`.
//! - [`scheduler`] — parallel pool, exclusive barriers, model-order commits.
//! - [`retry`] — backoff policy for failed model requests.
//! - [`agent`] — the agent loop: inbox, turns, steps, cancellation.
//! - [`attach`] — `@path` attachments in user prompts.
//! - [`compaction`] — when and what to compact; the `compaction/summary` step.
//! - [`services`] — what plugins may ask of their session (events, the
//!   model, subagents).
//! - [`invariants`] — structural checks of a log, for tests and fault suites.
//! - [`testkit`] — native fakes (scripted LLM, fake tools and policies).
//! - [`util`] — timestamps, ids, randomness.

pub mod agent;
pub mod approval;
pub mod attach;
pub mod bus;
pub mod catalog;
pub mod cells;
pub mod compaction;
pub mod durable;
pub mod events;
pub mod images;
pub mod invariants;
pub mod pipeline;
pub mod plugin;
pub mod policy;
pub mod projection;
pub mod question;
pub mod registry;
#[cfg(test)]
mod registry_layer_tests;
pub mod retry;
pub mod scheduler;
pub mod schema;
pub mod services;
pub mod store;
pub mod testkit;
pub mod util;

pub use agent::{Agent, AgentConfig, AgentError, TurnSummary};
pub use events::{Event, EventKind, StopReason};
pub use projection::{Projection, derive_messages};
pub use store::{SessionLog, SessionStore, StoreError};
