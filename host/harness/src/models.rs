//! Which model serves: `--model` / `/model` arguments resolved against the
//! profile's adapter rows, and the API key an adapter needs.

use anyhow::{Context, Result};
use wharf_config::Config;

/// What a `--model` / `/model` argument names: an adapter plugin row and,
/// unless only the adapter was named, a model id for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelChoice {
    /// Plugin id of the adapter.
    pub adapter: String,
    /// The model id (`None`: keep the adapter's).
    pub model: Option<String>,
    /// Set when the model is not one the profile knows for the adapter
    /// (see [`known_models`]): it is used, and this says so.
    pub warning: Option<String>,
}

/// The adapter rows of the config: rows with a `model` in their config.
pub fn adapter_rows(config: &Config) -> Vec<&str> {
    config.plugins.iter().filter(|r| r.config.get("model").is_some()).map(|r| r.id.as_str()).collect()
}

/// The models the profile knows for adapter row `adapter`: its configured
/// `model`, then every model its `prices` table names.
pub fn known_models(config: &Config, adapter: &str) -> Vec<String> {
    let Some(row) = config.plugin(adapter) else { return Vec::new() };
    let mut out: Vec<String> =
        row.config.get("model").and_then(|m| m.as_str()).map(str::to_string).into_iter().collect();
    if let Some(prices) = row.config.get("prices").and_then(|p| p.as_object()) {
        out.extend(prices.keys().filter(|k| !out.contains(k)).cloned().collect::<Vec<_>>());
    }
    out
}

/// A choice of `model` for `adapter`, warning when the profile does not
/// know that model.
fn model_choice(config: &Config, adapter: &str, model: &str) -> ModelChoice {
    let known = known_models(config, adapter);
    let warning = (!known.iter().any(|k| k == model)).then(|| {
        let listed = if known.is_empty() { "none".to_string() } else { known.join(", ") };
        format!(
            "`{model}` is not a model the profile lists for `{adapter}` (it lists: {listed}); \
             it is sent to the provider as is"
        )
    });
    ModelChoice { adapter: adapter.to_string(), model: Some(model.to_string()), warning }
}

/// Resolves a model argument against the config's rows: `ADAPTER/NAME` and
/// `ADAPTER:NAME` when `ADAPTER` is a row id (model ids may themselves hold
/// `/` or `:`, as `qwen3:8b` does), a bare row id, else a model of
/// `current`. A name with a `/` whose first part is no row is refused
/// unless the current adapter lists it (`bogus/x` names no adapter; a
/// provider's `org/model` id is given as `ADAPTER/org/model`). A model the
/// profile does not list is used with a [`ModelChoice::warning`].
pub fn resolve_model_spec(config: &Config, current: Option<&str>, spec: &str) -> Result<ModelChoice> {
    let spec = spec.trim();
    anyhow::ensure!(!spec.is_empty(), "empty model name");
    anyhow::ensure!(
        spec.len() <= 200 && !spec.contains(char::is_control),
        "not a model name: `{}`",
        wharf_core::util::cut_str(spec, 60)
    );
    for sep in ['/', ':'] {
        if let Some((a, m)) = spec.split_once(sep)
            && config.plugin(a).is_some()
            && !m.trim().is_empty()
        {
            return Ok(model_choice(config, a, m.trim()));
        }
    }
    if config.plugin(spec).is_some() {
        return Ok(ModelChoice { adapter: spec.to_string(), model: None, warning: None });
    }
    let adapter = current
        .map(str::to_string)
        .or_else(|| crate::usage::default_adapter(config))
        .context("no model adapter is configured (set `agent.adapter`)")?;
    if let Some((prefix, _)) = spec.split_once('/')
        && !known_models(config, &adapter).iter().any(|k| k == spec)
    {
        anyhow::bail!(
            "no model adapter `{prefix}` in this profile (adapters: {}); a model id holding `/` is given \
             with its adapter, e.g. `{adapter}/{spec}`",
            adapter_rows(config).join(", ")
        );
    }
    Ok(model_choice(config, &adapter, spec))
}

/// An API key the model adapter in force needs and the environment lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingKey {
    /// Plugin id of the adapter.
    pub adapter: String,
    /// The environment variable its row's `api_key_env` names.
    pub var: String,
}

impl std::fmt::Display for MissingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{var} is not set: the model adapter `{adapter}` reads its API key from it. Set it \
             (`export {var}=…`), or try Wharf without a key: `--profile demo` (a scripted model)",
            var = self.var,
            adapter = self.adapter
        )
    }
}

/// The key the adapter `model` (a `--model` argument) and `config` select would need and the
/// environment does not have: the adapter row's `config.api_key_env` names
/// the variable (rows without one are not checked). `is_set` tells whether a
/// variable holds a value.
pub fn missing_model_key(config: &Config, model: Option<&str>, is_set: impl Fn(&str) -> bool) -> Option<MissingKey> {
    let adapter = match model {
        Some(spec) => resolve_model_spec(config, config.agent.adapter.as_deref(), spec).ok()?.adapter,
        None => crate::usage::default_adapter(config)?,
    };
    let var = config.plugin(&adapter)?.config.get("api_key_env")?.as_str()?.trim();
    (!var.is_empty() && !is_set(var)).then(|| MissingKey { adapter, var: var.to_string() })
}

/// Whether the model adapter `model` (a `--model` argument) and `config`
/// select exports `wharf:plugin/llm-images`: a look at its component's
/// export names, without loading it (ACP's `promptCapabilities.image` is
/// answered before any session loads). The loaded adapter's
/// `llm-images.support()` still decides each prompt. `false` when the row
/// has no local file (an OCI `source`) or it cannot be read or parsed.
pub fn adapter_exports_images(config: &Config, model: Option<&str>) -> bool {
    /// Larger files are not read for this look.
    const MAX_COMPONENT_BYTES: u64 = 256 << 20;
    let adapter = match model {
        Some(spec) => match resolve_model_spec(config, config.agent.adapter.as_deref(), spec) {
            Ok(r) => r.adapter,
            Err(_) => return false,
        },
        None => match crate::usage::default_adapter(config) {
            Some(a) => a,
            None => return false,
        },
    };
    let Some(row) = config.plugin(&adapter) else { return false };
    if row.source.is_some() || row.path.as_os_str().is_empty() {
        return false;
    }
    let small = std::fs::metadata(&row.path).is_ok_and(|m| m.len() <= MAX_COMPONENT_BYTES);
    let Some(bytes) = small.then(|| std::fs::read(&row.path).ok()).flatten() else { return false };
    wharf_dist::component::component_info(&bytes)
        .is_ok_and(|info| info.exports.iter().any(|e| e.starts_with("wharf:plugin/llm-images@0.1.")))
}

/// Whether environment variable `name` holds a non-empty value.
pub fn env_is_set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}

/// Fails at start, before plugins load, when the model adapter in force
/// needs a key that is not set (rather than at the first model request).
pub fn require_model_key(config: &Config, model: Option<&str>) -> Result<()> {
    match missing_model_key(config, model, env_is_set) {
        Some(m) => anyhow::bail!("{m}"),
        None => Ok(()),
    }
}
