//! What the `llm-deepseek` and `llm-openai` components have in common, on
//! top of [`crate::adapter`]: the conversion between the SDK's WIT types and
//! this crate's, and the `wasi:http/outgoing-handler` transport (only on
//! `wasm32`; elsewhere [`start`] fails with `TRANSPORT`).
//!
//! A component is then a few lines:
//!
//! ```ignore
//! use wharf_llm_wire::component::{self, Stream};
//! use wharf_sdk::prelude::*;
//!
//! struct DeepSeek;
//!
//! impl LlmPlugin for DeepSeek {
//!     type Stream = Stream;
//!     fn info() -> PluginInfo { component::plugin_info("llm-deepseek", env!("CARGO_PKG_VERSION"), "…") }
//!     fn model() -> ModelInfo { component::model() }
//!     fn start(req: LlmRequest) -> Result<Stream, LlmError> { component::start(&wharf_llm_wire::adapter::DEEPSEEK, req) }
//! }
//!
//! wharf_sdk::export_llm!(DeepSeek);
//! ```
//!
//! **Grants.** `info()` must not depend on configuration, so the components
//! cannot name the host of their `base_url` or the variable of their
//! `api_key_env` there. They request `hosts = ["*"]` and `env = ["*"]`; the
//! effective grant is that request intersected with the operator's grant,
//! i.e. exactly the hosts and variable names the profile row grants (deny by
//! default: a row without `grant.hosts` reaches nothing).

use wharf_sdk::llm::{
    CompletionStream, Event as SdkEvent, FinishReason as SdkFinish, Image as SdkImage, ImageSupport, Usage as SdkUsage,
};
use wharf_sdk::prelude::{LlmError, LlmErrorCode, LlmRequest, ModelInfo, PluginInfo};
use wharf_sdk::{Role as SdkRole, ToolCall as SdkToolCall};

use crate::adapter::{AdapterConfig, Completion, Flavor, Settings};
use crate::error::{ErrorCode, WireError};
use crate::request::{Image, Message, Request, Role, ToolCall, ToolSpec};
use crate::stream::{Event, FinishReason};

/// The `wasi:http` transport, shared with adapters that speak another wire
/// format over the same exchange (`llm-anthropic`).
#[cfg(target_arch = "wasm32")]
pub mod wasi_http;

#[cfg(target_arch = "wasm32")]
type Body = wasi_http::WasiBody;

/// Stand-in body off `wasm32` (never constructed).
#[cfg(not(target_arch = "wasm32"))]
pub struct Body(std::convert::Infallible);

#[cfg(not(target_arch = "wasm32"))]
impl crate::adapter::ResponseBody for Body {
    fn read(&mut self, _max: usize, _wait_ms: u64) -> Result<crate::adapter::ReadOutcome, WireError> {
        match self.0 {}
    }

    fn now_ms(&self) -> u64 {
        match self.0 {}
    }
}

/// The plugin's self-description with the grant request both adapters make:
/// any host and any variable, narrowed by the operator's grant.
pub fn plugin_info(name: &str, version: &str, description: &str) -> PluginInfo {
    PluginInfo::new(name, version, description).hosts(["*"]).env(["*"])
}

/// The configuration from the host (`INVALID_REQUEST` when it does not
/// parse).
pub fn config() -> Result<AdapterConfig, WireError> {
    AdapterConfig::from_json(&wharf_sdk::config::json())
}

/// `model()`: the configured model id and context window.
pub fn model() -> ModelInfo {
    let cfg = config().unwrap_or_else(|e| {
        wharf_sdk::log::warn!("{}", e.message);
        AdapterConfig::default()
    });
    let (model, window) = cfg.model_info();
    ModelInfo::new(model, window)
}

/// An in-flight completion.
pub struct Stream {
    inner: Completion<Body>,
    name: &'static str,
}

impl CompletionStream for Stream {
    fn next(&mut self) -> Result<Option<Vec<SdkEvent>>, LlmError> {
        match self.inner.next_batch() {
            Ok(batch) => Ok(batch.map(|events| events.into_iter().map(to_sdk_event).collect())),
            Err(e) => {
                wharf_sdk::log::debug!("{}: stream failed: {e}", self.name);
                Err(to_sdk_error(e))
            }
        }
    }
}

/// `start()`: reads the configuration and the key, sends the request and
/// returns the stream.
pub fn start(flavor: &Flavor, req: LlmRequest) -> Result<Stream, LlmError> {
    start_request(flavor, from_sdk_request(req))
}

/// `llm-history.start-after()`: [`start`] for the request whose messages
/// are the first `kept` of the last request this instance started,
/// followed by `req`'s; `Ok(None)` (nothing sent) when the instance does
/// not hold them. The bytes sent are [`start`]'s for the whole request.
pub fn start_after(flavor: &Flavor, kept: u32, req: LlmRequest) -> Result<Option<Stream>, LlmError> {
    let (settings, key) = prepare(flavor)?;
    let request = from_sdk_request(req);
    wharf_sdk::log::debug!(
        "{}: POST {} model={} messages={kept}+{} tools={}",
        flavor.name,
        settings.endpoint.url(),
        settings.wire.model,
        request.messages.len(),
        request.tools.len()
    );
    match open_after(&settings, key.as_deref(), kept as usize, request) {
        None => Ok(None),
        Some(Ok(inner)) => Ok(Some(Stream { inner, name: flavor.name })),
        Some(Err(e)) => {
            wharf_sdk::log::debug!("{}: request failed: {e}", flavor.name);
            Err(to_sdk_error(e))
        }
    }
}

/// The settings and the key of a request.
fn prepare(flavor: &Flavor) -> Result<(Settings, Option<String>), LlmError> {
    let settings = config().and_then(|c| Settings::resolve(&c, flavor)).map_err(to_sdk_error)?;
    let key = settings.api_key(|name| std::env::var(name).ok()).map_err(to_sdk_error)?;
    Ok((settings, key))
}

fn start_request(flavor: &Flavor, request: Request) -> Result<Stream, LlmError> {
    let settings = config().and_then(|c| Settings::resolve(&c, flavor)).map_err(to_sdk_error)?;
    let key = settings.api_key(|name| std::env::var(name).ok()).map_err(to_sdk_error)?;
    wharf_sdk::log::debug!(
        "{}: POST {} model={} messages={} tools={}",
        flavor.name,
        settings.endpoint.url(),
        settings.wire.model,
        request.messages.len(),
        request.tools.len()
    );
    let inner = open(&settings, key.as_deref(), request).map_err(|e| {
        wharf_sdk::log::debug!("{}: request failed: {e}", flavor.name);
        to_sdk_error(e)
    })?;
    Ok(Stream { inner, name: flavor.name })
}

#[cfg(target_arch = "wasm32")]
thread_local! {
    /// The last body this instance sent (see [`crate::request::BodyCache`]):
    /// the host keeps an instance for the requests of one agent turn, so
    /// each step encodes only the messages added since the last one. It
    /// lives and dies with the instance (a reloaded adapter starts empty).
    static BODY: std::cell::RefCell<crate::request::BodyCache> = std::cell::RefCell::default();
}

#[cfg(target_arch = "wasm32")]
fn open(settings: &Settings, key: Option<&str>, request: Request) -> Result<Completion<Body>, WireError> {
    BODY.with(|cache| {
        crate::adapter::start_cached(&mut wasi_http::WasiTransport, settings, key, request, &mut cache.borrow_mut())
    })
}

#[cfg(target_arch = "wasm32")]
fn open_after(
    settings: &Settings,
    key: Option<&str>,
    kept: usize,
    request: Request,
) -> Option<Result<Completion<Body>, WireError>> {
    BODY.with(|cache| {
        crate::adapter::start_cached_after(
            &mut wasi_http::WasiTransport,
            settings,
            key,
            kept,
            request,
            &mut cache.borrow_mut(),
        )
    })
}

#[cfg(not(target_arch = "wasm32"))]
fn open_after(
    _settings: &Settings,
    _key: Option<&str>,
    _kept: usize,
    _request: Request,
) -> Option<Result<Completion<Body>, WireError>> {
    Some(Err(WireError::new(ErrorCode::Transport, "HTTP is only available in the wasm32 component build")))
}

#[cfg(not(target_arch = "wasm32"))]
fn open(_settings: &Settings, _key: Option<&str>, _request: Request) -> Result<Completion<Body>, WireError> {
    Err(WireError::new(ErrorCode::Transport, "HTTP is only available in the wasm32 component build"))
}

/// SDK request → wire request.
pub fn from_sdk_request(req: LlmRequest) -> Request {
    Request {
        system: req.system,
        messages: req
            .messages
            .into_iter()
            .map(|m| Message {
                role: match m.role {
                    SdkRole::System => Role::System,
                    SdkRole::User => Role::User,
                    SdkRole::Assistant => Role::Assistant,
                    SdkRole::Tool => Role::Tool,
                },
                content: m.content,
                reasoning: m.reasoning,
                tool_calls: m
                    .tool_calls
                    .into_iter()
                    .map(|c| ToolCall { id: c.id, name: c.name, arguments: c.arguments })
                    .collect(),
                tool_call_id: m.tool_call_id,
                images: Vec::new(),
            })
            .collect(),
        tools: req
            .tools
            .into_iter()
            .map(|t| ToolSpec { name: t.name, description: t.description, input_schema: t.input_schema })
            .collect(),
        max_tokens: req.max_tokens,
    }
}

/// SDK request and its images (`llm-images`) → wire request: each image
/// joins the message it names (an index past the end is an
/// `INVALID_REQUEST`; so is an image on a message that is not the user's).
pub fn from_sdk_request_with_images(req: LlmRequest, images: Vec<SdkImage>) -> Result<Request, LlmError> {
    let mut request = from_sdk_request(req);
    for image in images {
        let at = image.message as usize;
        let Some(m) = request.messages.get_mut(at) else {
            return Err(LlmError::new(
                LlmErrorCode::InvalidRequest,
                format!("an image names message {at} of {}", request.messages.len()),
            ));
        };
        if m.role != Role::User {
            return Err(LlmError::new(LlmErrorCode::InvalidRequest, format!("an image on message {at}, not a user's")));
        }
        m.images.push(Image { mime_type: image.mime_type, data: image.data });
    }
    Ok(request)
}

/// Media types both Chat Completions and the Messages API take.
pub const IMAGE_MIME_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// `llm-images.support()` for an adapter taking [`IMAGE_MIME_TYPES`] up to
/// `max_bytes` each.
pub fn image_support(max_bytes: u64) -> ImageSupport {
    ImageSupport { mime_types: IMAGE_MIME_TYPES.iter().map(|m| m.to_string()).collect(), max_bytes }
}

/// `llm-images.start-with-images()`: [`start`] with the images joined to
/// their messages (OpenAI dialect: `image_url` parts with `data:` URLs).
pub fn start_with_images(flavor: &Flavor, req: LlmRequest, images: Vec<SdkImage>) -> Result<Stream, LlmError> {
    let request = from_sdk_request_with_images(req, images)?;
    start_request(flavor, request)
}

/// Wire event → SDK event.
pub fn to_sdk_event(e: Event) -> SdkEvent {
    match e {
        Event::Text(t) => SdkEvent::Text(t),
        Event::Reasoning(r) => SdkEvent::Reasoning(r),
        Event::ToolCall(c) => SdkEvent::ToolCall(SdkToolCall { id: c.id, name: c.name, arguments: c.arguments }),
        Event::Usage(u) => SdkEvent::Usage(SdkUsage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            cache_hit_tokens: u.cache_hit_tokens,
            cache_miss_tokens: u.cache_miss_tokens,
            reasoning_tokens: u.reasoning_tokens,
        }),
        Event::Finish(f) => SdkEvent::Finish(match f {
            FinishReason::Stop => SdkFinish::Stop,
            FinishReason::ToolCalls => SdkFinish::ToolCalls,
            FinishReason::MaxTokens => SdkFinish::MaxTokens,
            FinishReason::ContentFilter => SdkFinish::ContentFilter,
            FinishReason::Retryable => SdkFinish::Retryable,
        }),
    }
}

/// Wire error → SDK error.
pub fn to_sdk_error(e: WireError) -> LlmError {
    let code = match e.code {
        ErrorCode::Auth => LlmErrorCode::Auth,
        ErrorCode::Quota => LlmErrorCode::Quota,
        ErrorCode::RateLimit => LlmErrorCode::RateLimit,
        ErrorCode::ContextWindowExceeded => LlmErrorCode::ContextWindowExceeded,
        ErrorCode::InvalidRequest => LlmErrorCode::InvalidRequest,
        ErrorCode::Server => LlmErrorCode::Server,
        ErrorCode::Transport => LlmErrorCode::Transport,
        ErrorCode::Timeout => LlmErrorCode::Timeout,
        ErrorCode::Aborted => LlmErrorCode::Aborted,
        ErrorCode::StreamClosed => LlmErrorCode::StreamClosed,
        ErrorCode::MalformedResponse => LlmErrorCode::MalformedResponse,
        ErrorCode::EmptyResponse => LlmErrorCode::EmptyResponse,
    };
    LlmError { code, message: e.message, http_status: e.http_status, retry_after_ms: e.retry_after_ms }
}
