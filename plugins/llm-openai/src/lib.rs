//! `llm-openai`: streams any OpenAI-compatible Chat Completions endpoint
//! (OpenAI, Ollama, vLLM, llama.cpp's server, OpenRouter …) over
//! `wasi:http`.
//!
//! The same code as `llm-deepseek` (both are thin shells over
//! `wharf-llm-wire`), in the OpenAI dialect: no `reasoning_content` is ever
//! sent back, no `thinking` field, the output cap goes in
//! `max_completion_tokens` unless `max_tokens_field = "max_tokens"` (older
//! servers), and the key is optional.
//!
//! Images: exports `llm-images` — a user message's images go out as
//! `image_url` content parts with `data:` URLs after its text (PNG, JPEG,
//! GIF, WebP, ≤ 20 MiB each).
//!
//! # Configuration (the profile row's `config` table)
//!
//! ```toml
//! [plugin.config]
//! base_url = "http://127.0.0.1:11434/v1"  # required; {base_url}/chat/completions
//! model = "qwen3:8b"                      # required
//! api_key_env = "OPENAI_API_KEY"          # optional: without it no Authorization is sent
//! reasoning_effort = "low"                # optional: minimal | low | medium | high | xhigh
//! max_tokens = 4096                       # optional output cap
//! max_tokens_field = "max_tokens"         # optional: max_tokens | max_completion_tokens (default)
//! idle_timeout_ms = 120000                # silence before TIMEOUT
//! context_window = 131072                 # reported to the host
//! ```
//!
//! `thinking = false` suppresses `reasoning_effort`; otherwise `thinking` is
//! not sent in this dialect.
//!
//! # Grants
//!
//! Like `llm-deepseek`, the plugin requests `hosts = ["*"]` and `env = ["*"]`
//! (`info()` cannot depend on configuration) and the operator's grant narrows
//! it: grant exactly the endpoint's host (e.g. `127.0.0.1:11434`) and, if a
//! key is used, its variable.

use wharf_llm_wire::adapter::OPENAI;
use wharf_llm_wire::component::{self, Stream};
use wharf_sdk::prelude::*;

struct OpenAi;

impl LlmPlugin for OpenAi {
    type Stream = Stream;

    fn info() -> PluginInfo {
        component::plugin_info(
            "llm-openai",
            env!("CARGO_PKG_VERSION"),
            "Any OpenAI-compatible Chat Completions endpoint (OpenAI, Ollama, vLLM, llama.cpp, OpenRouter) over wasi:http.",
        )
    }

    fn model() -> ModelInfo {
        component::model()
    }

    fn start(req: LlmRequest) -> Result<Stream, LlmError> {
        component::start(&OPENAI, req)
    }
}

/// Chat Completions takes images as `image_url` content parts; a `data:`
/// URL carries the bytes. 20 MiB each, OpenAI's documented limit.
impl wharf_sdk::llm::LlmImages for OpenAi {
    fn image_support() -> wharf_sdk::llm::ImageSupport {
        component::image_support(20 << 20)
    }

    fn start_with_images(req: LlmRequest, images: Vec<wharf_sdk::llm::Image>) -> Result<Stream, LlmError> {
        component::start_with_images(&OPENAI, req, images)
    }
}

wharf_sdk::export_llm_images!(OpenAi);
