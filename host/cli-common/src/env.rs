//! What the `wharf` binary reads from the environment for the libraries,
//! which take everything as values: the runtime's options and the default
//! session directory. The knobs:
//!
//! | variable | effect | default |
//! |---|---|---|
//! | `WHARF_POOLING=0` | on-demand instance allocation | pooling |
//! | `WHARF_POOLING_INSTANCES` | live instances the pool holds | 1000 |
//! | `WHARF_KEEP_RESIDENT_KB` | KiB of each memory kept resident per slot | 512 |
//! | `WHARF_SPARE=0` | no sandbox prepared ahead of a fresh call | on |
//! | `WHARF_SYNC_CALLS=0` | warm tool calls always on the async path | on |
//! | `WHARF_COMPONENT_MODEL_ASYNC=0` | WASI 0.3 (component-model async) components are refused: no engine is built for them | on |
//! | `WHARF_INCREMENTAL=0` | no incremental compilation cache | on |
//! | `WHARF_TIERED=0` | no tiered compilation | on |
//! | `WHARF_FIRST_TIER=cranelift` | Cranelift's fast settings, not Winch, as the first tier | Winch |
//! | `WHARF_CACHE_DIR`, `XDG_CACHE_HOME`, `HOME` | compile cache directory | `~/.cache/wharf/components` |
//! | `WHARF_HOME`, `HOME` | session directory | `~/.wharf/sessions` |

use std::path::PathBuf;

use wharf_runtime::engine::EngineOptions;
use wharf_runtime::{FirstTierCompiler, RuntimeOptions, TieringOptions};

/// The runtime options the environment asks for, over the runtime's
/// defaults, with the compile cache in [`default_cache_dir`]. A host built
/// from a profile puts the profile's cache directory over it.
pub fn runtime_options() -> RuntimeOptions {
    runtime_options_from(|name| std::env::var(name).ok())
}

/// [`runtime_options`] over any variable lookup.
pub fn runtime_options_from(var: impl Fn(&str) -> Option<String>) -> RuntimeOptions {
    let on = |name: &str, default: bool| var(name).map_or(default, |v| v != "0");
    let d = EngineOptions::default();
    let engine = EngineOptions {
        pooling: on("WHARF_POOLING", d.pooling),
        max_instances: var("WHARF_POOLING_INSTANCES").and_then(|v| v.parse().ok()).unwrap_or(d.max_instances),
        keep_resident: var("WHARF_KEEP_RESIDENT_KB")
            .and_then(|v| v.parse::<usize>().ok())
            .map_or(d.keep_resident, |kb| kb << 10),
        spare: on("WHARF_SPARE", d.spare),
        sync_calls: on("WHARF_SYNC_CALLS", d.sync_calls),
        incremental: on("WHARF_INCREMENTAL", d.incremental),
        concurrency: on("WHARF_COMPONENT_MODEL_ASYNC", d.concurrency),
        ..d
    };
    let t = TieringOptions::default();
    let tiering = TieringOptions {
        enabled: on("WHARF_TIERED", t.enabled),
        first: match var("WHARF_FIRST_TIER").as_deref() {
            Some("cranelift") => FirstTierCompiler::Cranelift,
            _ => t.first,
        },
    };
    RuntimeOptions { engine, cache_dir: cache_dir_from(&var), tiering }
}

/// The default compile cache directory: `$WHARF_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/wharf/components`, else `~/.cache/wharf/components`
/// (`None` without any of them).
pub fn default_cache_dir() -> Option<PathBuf> {
    cache_dir_from(&|name: &str| std::env::var(name).ok())
}

fn cache_dir_from(var: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(d) = var("WHARF_CACHE_DIR") {
        return Some(PathBuf::from(d));
    }
    if let Some(d) = var("XDG_CACHE_HOME") {
        return Some(PathBuf::from(d).join("wharf/components"));
    }
    var("HOME").map(|h| PathBuf::from(h).join(".cache/wharf/components"))
}

/// The default session directory: `$WHARF_HOME/sessions`, else
/// `$HOME/.wharf/sessions`.
pub fn default_session_dir() -> Result<PathBuf, NoHome> {
    if let Some(h) = std::env::var_os("WHARF_HOME").filter(|h| !h.is_empty()) {
        return Ok(PathBuf::from(h).join("sessions"));
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(h) => Ok(PathBuf::from(h).join(".wharf").join("sessions")),
        None => Err(NoHome),
    }
}

/// Neither `$WHARF_HOME` nor `$HOME` is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoHome;

impl std::fmt::Display for NoHome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("cannot find the session directory: neither $WHARF_HOME nor $HOME is set")
    }
}

impl std::error::Error for NoHome {}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(vars: &[(&str, &str)]) -> RuntimeOptions {
        runtime_options_from(|n| vars.iter().find(|(k, _)| *k == n).map(|(_, v)| v.to_string()))
    }

    #[test]
    fn no_variable_keeps_the_runtime_defaults() {
        let o = from(&[]);
        let d = RuntimeOptions::default();
        assert_eq!(o.engine.pooling, d.engine.pooling);
        assert_eq!(o.engine.max_instances, d.engine.max_instances);
        assert_eq!(o.engine.keep_resident, d.engine.keep_resident);
        assert_eq!((o.engine.spare, o.engine.incremental), (d.engine.spare, d.engine.incremental));
        assert_eq!(o.tiering, d.tiering);
        assert_eq!(o.cache_dir, None);
    }

    #[test]
    fn every_knob_is_read() {
        let o = from(&[
            ("WHARF_POOLING", "0"),
            ("WHARF_POOLING_INSTANCES", "7"),
            ("WHARF_KEEP_RESIDENT_KB", "64"),
            ("WHARF_SPARE", "0"),
            ("WHARF_INCREMENTAL", "0"),
            ("WHARF_TIERED", "0"),
            ("WHARF_FIRST_TIER", "cranelift"),
            ("HOME", "/h"),
        ]);
        assert!(!o.engine.pooling && !o.engine.spare && !o.engine.incremental && !o.tiering.enabled);
        assert_eq!((o.engine.max_instances, o.engine.keep_resident), (7, 64 << 10));
        assert_eq!(o.tiering.first, FirstTierCompiler::Cranelift);
        assert_eq!(o.cache_dir, Some(PathBuf::from("/h/.cache/wharf/components")));
        let o = from(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/h")]);
        assert_eq!(o.cache_dir, Some(PathBuf::from("/x/wharf/components")));
        let o = from(&[("WHARF_CACHE_DIR", "/c"), ("XDG_CACHE_HOME", "/x")]);
        assert_eq!(o.cache_dir, Some(PathBuf::from("/c")));
    }
}
