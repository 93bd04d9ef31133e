//! `llm-scripted`: an LLM adapter that **replays a script** from its
//! configuration, so the agent loop runs offline and deterministically. It is
//! for demos and tests; it is not a model and reads nothing it is sent except
//! to pick the turn and to echo tool results.
//!
//! # Configuration (the plugin's profile `config` table)
//!
//! ```json
//! {
//!   "model": "scripted",            // reported by model(); default "scripted"
//!   "context_window": 65536,        // default 65536
//!   "chunk_size": 16,               // chars per streamed text/reasoning chunk (default 16)
//!   "chunks_per_batch": 1,          // chunks per next() batch (default 1)
//!   "on_exhausted": "stop",         // past the last turn: "stop" (default) or "error"
//!   "exhausted_text": "…",          // text of the "stop" reply past the last turn
//!   "fail": { … },                  // optional failure injected into every turn (see below)
//!   "turns": [
//!     { "reasoning": "Let me look.", "text": "Listing files.",
//!       "tool_calls": [ { "name": "list", "arguments": { "path": "." } } ],
//!       "finish": "tool_calls",      // stop | tool_calls | max_tokens | content_filter | retryable;
//!                                    // default: tool_calls if there are calls, else stop
//!       "usage": { "prompt_tokens": 10, "completion_tokens": 5 },  // optional, else estimated
//!       "delay_ms": 0 },             // optional sleep before each batch
//!     { "text": "The tool said: ", "echo_last_tool_result": true },
//!     { "error": { "code": "rate-limit", "message": "slow down", "retry_after_ms": 10 } }
//!   ]
//! }
//! ```
//!
//! **Which turn plays.** Every completion runs in a fresh instance, so the
//! turn is derived statelessly from the request: turn *i* is played when the
//! request holds *i* assistant messages (the first request of a session has
//! none and plays `turns[0]`).
//!
//! Past compactions count too: a user message holding the `compaction`
//! component's header ("Summary of the earlier conversation (N messages, A
//! assistant replies)") adds A, so a compacted session keeps its place in
//! the script.
//!
//! **`complete_text`**: a request without tools (a plugin's one-shot
//! `model.complete`, e.g. a compaction summary) is answered with this text
//! instead of playing a turn.
//!
//! **`branches`**: `[{ "when": "SUBSTRING", "turns": [...] }]` — a session
//! whose first user message contains `when` plays that branch's turns
//! instead of `turns` (how subagents get their own script).
//!
//! **Tool calls** get deterministic ids `call_<turn>_<i>` unless the entry
//! sets `"id"`. `arguments` may be a JSON object or a string (sent verbatim,
//! so invalid JSON can be scripted).
//!
//! **Streaming.** Reasoning, then text, in chunks of `chunk_size` characters,
//! `chunks_per_batch` per `next()`; then one batch with the tool calls, the
//! usage (estimated at ~4 characters per token unless given) and the finish
//! reason.
//!
//! **`echo_last_tool_result`**: the turn's text becomes `text` (if any)
//! followed by the content of the last `tool` message in the request.
//!
//! **Errors.** A turn's `error` object (`code` as `rate-limit`, `RATE_LIMIT`
//! …, `message`, optional `http_status`, `retry_after_ms`) makes `start` fail
//! with it. With `"times": N` only the first N attempts of that exact request
//! fail (counted in the plugin's `kv` store, keyed by a hash of the request),
//! after which the turn plays normally: that is how retries are tested. With
//! `"during": "stream"` the error comes from `next()` after `after_batches`
//! batches (default 1) instead of from `start`. The top-level `fail` object
//! does the same for every turn that has no `error` of its own.

mod script;

use wharf_sdk::prelude::*;

use crate::script::{Config, Counter, ScriptStream};

/// Attempt counts in the host `kv` store.
struct KvCounter;

impl Counter for KvCounter {
    fn bump(&self, key: &str) -> u32 {
        let n: u32 = wharf_sdk::kv::get_json(key).unwrap_or(0);
        if let Err(e) = wharf_sdk::kv::set_json(key, &(n + 1)) {
            wharf_sdk::log::warn!("scripted adapter could not count attempts: {e}");
            return u32::MAX;
        }
        n
    }
}

struct Scripted;

fn config() -> Result<Config, LlmError> {
    wharf_sdk::config::get::<Config>()
        .map_err(|e| LlmError::new(LlmErrorCode::InvalidRequest, format!("llm-scripted: {e}")))
}

impl LlmPlugin for Scripted {
    type Stream = ScriptStream;

    fn info() -> PluginInfo {
        PluginInfo::new(
            "llm-scripted",
            env!("CARGO_PKG_VERSION"),
            "Scripted LLM adapter: replays turns from its configuration (demos and tests, not a model).",
        )
    }

    fn model() -> ModelInfo {
        match config() {
            Ok(c) => c.model_info(),
            Err(_) => Config::default().model_info(),
        }
    }

    fn start(req: LlmRequest) -> Result<ScriptStream, LlmError> {
        script::start(&config()?, &req, &KvCounter)
    }
}

wharf_sdk::export_llm!(Scripted);
