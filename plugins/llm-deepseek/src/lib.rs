//! `llm-deepseek`: streams DeepSeek Chat Completions over `wasi:http`.
//!
//! Everything but the self-description lives in `wharf-llm-wire` (shared
//! with `llm-openai`): request building with DeepSeek's `reasoning_content`
//! pass-back on tool-calling turns and its `thinking` switch, SSE decoding
//! (`: keep-alive` comments reset the idle timer), tool-call fragments joined
//! per index, the usage-only final chunk (cache hit/miss, reasoning tokens),
//! finish reasons (`insufficient_system_resource` → retryable) and the
//! mapping of every failure onto the stable error codes.
//!
//! Long conversations: the component exports `llm-history`, so an instance
//! that served the turn's previous request is sent only the new messages
//! (it keeps the last request's messages and encoded body,
//! `wharf_llm_wire::request::BodyCache`); the bytes on the wire are the
//! whole request's either way.
//!
//! Text only: DeepSeek's Chat Completions API takes no images, so the
//! component does not export `llm-images`, and the host refuses a prompt
//! with an image for it, naming the adapter (`wharf run --image`, an ACP
//! image block).
//!
//! # Configuration (the profile row's `config` table)
//!
//! ```toml
//! [plugin.config]
//! base_url = "https://api.deepseek.com"   # default; {base_url}/chat/completions
//! model = "deepseek-v4-pro"               # required: model ids are config, never code
//! api_key_env = "DEEPSEEK_API_KEY"        # default; the variable's *name*
//! thinking = true                         # optional: thinking on/off (unset: provider default)
//! reasoning_effort = "high"               # optional: low | high | max (minimal/medium/xhigh mapped)
//! max_tokens = 8192                       # optional output cap
//! idle_timeout_ms = 120000                # silence (not even a keep-alive) before TIMEOUT
//! context_window = 1048576                # reported to the host (compaction, surfaces)
//! ```
//!
//! # Grants
//!
//! `info()` cannot depend on the configuration, so the plugin requests any
//! host and any environment variable (`hosts = ["*"]`, `env = ["*"]`); the
//! effective grant is that request ∩ the operator's grant, so the profile
//! decides — e.g. `hosts = ["api.deepseek.com"]`, `env = ["DEEPSEEK_API_KEY"]`.
//! Set the grant's `timeout_ms` above `idle_timeout_ms`: the host bounds
//! every `start`/`next` call by it.
//!
//! The key is read from the granted variable at each request and is never
//! logged, put in an error, or part of the configuration.

use wharf_llm_wire::adapter::DEEPSEEK;
use wharf_llm_wire::component::{self, Stream};
use wharf_sdk::llm::LlmHistory;
use wharf_sdk::prelude::*;

struct DeepSeek;

impl LlmPlugin for DeepSeek {
    type Stream = Stream;

    fn info() -> PluginInfo {
        component::plugin_info(
            "llm-deepseek",
            env!("CARGO_PKG_VERSION"),
            "DeepSeek Chat Completions (streaming, tool calls, thinking mode) over wasi:http.",
        )
    }

    fn model() -> ModelInfo {
        component::model()
    }

    fn start(req: LlmRequest) -> Result<Stream, LlmError> {
        component::start(&DEEPSEEK, req)
    }
}

impl LlmHistory for DeepSeek {
    fn start_after(kept: u32, req: LlmRequest) -> Result<Option<Stream>, LlmError> {
        component::start_after(&DEEPSEEK, kept, req)
    }
}

wharf_sdk::export_llm_history!(DeepSeek);
