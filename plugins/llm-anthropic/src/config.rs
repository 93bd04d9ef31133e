//! The plugin's configuration (its profile row's `config` table).

use serde::Deserialize;
use wharf_llm_wire::adapter::Endpoint;
use wharf_llm_wire::{ErrorCode, WireError};

/// `base_url` when the configuration has none.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// `api_key_env` when the configuration has none.
pub const DEFAULT_API_KEY_ENV: &str = "ANTHROPIC_API_KEY";
/// `anthropic-version` header when the configuration has none.
pub const DEFAULT_VERSION: &str = "2023-06-01";
/// Output cap when neither the configuration nor the request sets one
/// (`max_tokens` is required by the Messages API).
pub const DEFAULT_MAX_TOKENS: u32 = 8192;
/// Smallest thinking budget the API accepts.
pub const MIN_THINKING_BUDGET: u32 = 1024;
/// Default idle timeout, ms.
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 120_000;
/// Default context window reported by `model()`, tokens.
pub const DEFAULT_CONTEXT_WINDOW: u32 = 200_000;

/// Per-model prices per million tokens (read by the host's cost display;
/// the adapter only accepts the table so a typo elsewhere is still refused).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prices {
    /// Cache reads.
    pub input_cache_hit: Option<f64>,
    /// Uncached input.
    pub input_cache_miss: Option<f64>,
    /// Cache writes.
    pub cache_write: Option<f64>,
    /// Output.
    pub output: Option<f64>,
    /// Currency code.
    pub currency: Option<String>,
}

/// The configuration as written. Unknown keys are refused.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `http(s)://host[:port][/prefix]`; requests go to `{base_url}/v1/messages`.
    pub base_url: Option<String>,
    /// Model id (required).
    pub model: Option<String>,
    /// Name of the environment variable holding the key.
    pub api_key_env: Option<String>,
    /// Default output cap.
    pub max_tokens: Option<u32>,
    /// Extended thinking budget; unset or 0: no thinking.
    pub thinking_budget: Option<u32>,
    /// `anthropic-version` header.
    pub anthropic_version: Option<String>,
    /// Idle timeout, ms.
    pub idle_timeout_ms: Option<u64>,
    /// Context window reported to the host, tokens.
    pub context_window: Option<u32>,
    /// Prices per model id.
    pub prices: Option<std::collections::BTreeMap<String, Prices>>,
}

/// A checked configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The messages endpoint.
    pub endpoint: Endpoint,
    /// Model id.
    pub model: String,
    /// The key's variable.
    pub api_key_env: String,
    /// Output cap.
    pub max_tokens: u32,
    /// Thinking budget, when enabled.
    pub thinking_budget: Option<u32>,
    /// `anthropic-version`.
    pub version: String,
    /// Idle timeout, ms.
    pub idle_timeout_ms: u64,
}

fn invalid(m: impl std::fmt::Display) -> WireError {
    WireError::new(ErrorCode::InvalidRequest, format!("llm-anthropic: {m}"))
}

impl Config {
    /// Parses the configuration JSON (`""` counts as `{}`).
    pub fn from_json(text: &str) -> Result<Self, WireError> {
        let text = if text.trim().is_empty() { "{}" } else { text };
        serde_json::from_str(text).map_err(|e| invalid(format!("invalid plugin configuration: {e}")))
    }

    /// Model id and context window, even when the rest is incomplete.
    pub fn model_info(&self) -> (String, u32) {
        let model = self.model.clone().filter(|m| !m.trim().is_empty()).unwrap_or_else(|| "(unconfigured)".into());
        (model, self.context_window.unwrap_or(DEFAULT_CONTEXT_WINDOW))
    }

    /// Checks the configuration and fills in the defaults.
    pub fn resolve(&self) -> Result<Settings, WireError> {
        let base = self.base_url.as_deref().unwrap_or(DEFAULT_BASE_URL);
        let mut endpoint = Endpoint::from_base_url(base)?;
        // `from_base_url` appends the Chat Completions path; ours is `/v1/messages`.
        let prefix = endpoint.path.strip_suffix("/chat/completions").unwrap_or("").to_string();
        let prefix = prefix.strip_suffix("/v1").unwrap_or(&prefix);
        endpoint.path = format!("{prefix}/v1/messages");
        let model =
            self.model.clone().filter(|m| !m.trim().is_empty()).ok_or_else(|| invalid("`model` is not configured"))?;
        let api_key_env = self.api_key_env.as_deref().unwrap_or(DEFAULT_API_KEY_ENV).trim().to_string();
        if api_key_env.is_empty() {
            return Err(invalid("`api_key_env` is empty"));
        }
        let max_tokens = self.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
        if max_tokens == 0 {
            return Err(invalid("max_tokens must be positive"));
        }
        let thinking_budget = match self.thinking_budget {
            None | Some(0) => None,
            Some(b) if b < MIN_THINKING_BUDGET => {
                return Err(invalid(format!("thinking_budget must be at least {MIN_THINKING_BUDGET} (or 0: off)")));
            }
            Some(b) if b >= max_tokens => {
                return Err(invalid(format!("thinking_budget ({b}) must be below max_tokens ({max_tokens})")));
            }
            Some(b) => Some(b),
        };
        let version = self.anthropic_version.clone().unwrap_or_else(|| DEFAULT_VERSION.to_string());
        if version.is_empty() || !version.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(invalid("invalid anthropic_version"));
        }
        let idle_timeout_ms = self.idle_timeout_ms.unwrap_or(DEFAULT_IDLE_TIMEOUT_MS);
        if idle_timeout_ms == 0 {
            return Err(invalid("idle_timeout_ms must be positive"));
        }
        Ok(Settings { endpoint, model, api_key_env, max_tokens, thinking_budget, version, idle_timeout_ms })
    }
}

impl Settings {
    /// The key from `lookup` (the environment); `AUTH` naming the variable
    /// (never a value) when it is missing or unusable.
    pub fn api_key(&self, lookup: impl Fn(&str) -> Option<String>) -> Result<String, WireError> {
        let name = &self.api_key_env;
        let auth = |m: String| WireError::new(ErrorCode::Auth, format!("llm-anthropic: {m}"));
        match lookup(name).map(|k| k.trim().to_string()).filter(|k| !k.is_empty()) {
            Some(key) if key.bytes().all(|b| (0x21..0x7f).contains(&b)) => Ok(key),
            Some(_) => Err(auth(format!("the API key in {name} contains characters not allowed in a header"))),
            None => Err(auth(format!(
                "no API key: the environment variable {name} is not set, or not granted to this plugin \
                 (grant.env = [\"{name}\"])"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn defaults_and_checks() {
        let s = Config::from_json(r#"{"model":"claude-x"}"#).unwrap().resolve().unwrap();
        assert_eq!(s.endpoint.url(), "https://api.anthropic.com/v1/messages");
        assert_eq!((s.api_key_env.as_str(), s.version.as_str()), ("ANTHROPIC_API_KEY", "2023-06-01"));
        assert_eq!((s.max_tokens, s.thinking_budget), (DEFAULT_MAX_TOKENS, None));
        let s = Config::from_json(r#"{"model":"m","base_url":"http://127.0.0.1:9/v1/"}"#).unwrap().resolve().unwrap();
        assert_eq!(s.endpoint.url(), "http://127.0.0.1:9/v1/messages");
        let err = |j: &str| Config::from_json(j).unwrap().resolve().unwrap_err().message;
        assert!(err("{}").contains("model"));
        assert!(err(r#"{"model":"m","thinking_budget":100}"#).contains("at least"));
        assert!(err(r#"{"model":"m","thinking_budget":9000,"max_tokens":4096}"#).contains("below max_tokens"));
        assert!(Config::from_json(r#"{"modle":"m"}"#).is_err());
        let p = Config::from_json(
            r#"{"model":"m","prices":{"m":{"input_cache_hit":0.3,"input_cache_miss":3,"cache_write":3.75,"output":15,"currency":"USD"}}}"#,
        );
        assert!(p.is_ok());
    }
}
