//! The flags every command that runs an agent takes ([`HostArgs`]), and
//! turning them and the environment into [`HostOptions`] (with [`crate::env`],
//! the only places the surfaces read the environment).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Result;
use clap::Args;
use wharf_harness::{HostOptions, MAX_STEPS_LIMIT, Notice};

/// Options shared by every command that runs an agent.
#[derive(Args, Clone, Debug)]
pub struct HostArgs {
    /// Profile: a shipped name (`default`, `demo`, …) or a path to a TOML file.
    #[arg(long, short = 'p', default_value = "default")]
    pub profile: String,
    /// Extra config layer, applied after the user and project layers (repeatable).
    #[arg(long = "patch", value_name = "FILE")]
    pub patches: Vec<PathBuf>,
    /// Override one key, e.g. `-c agent.max_steps=5` or `-c plugin.fs.grant.memory_mb=512`.
    #[arg(short = 'c', value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// The workspace directory (default: the current directory).
    #[arg(long, short = 'w')]
    pub workspace: Option<PathBuf>,
    /// Where session logs live (overrides `session.dir`).
    #[arg(long = "session-dir", value_name = "DIR")]
    pub session_dir: Option<PathBuf>,
    /// Do not watch component and config files for changes.
    #[arg(long = "no-watch")]
    pub no_watch: bool,
    /// The model: `NAME` (for the configured adapter), `ADAPTER/NAME` or
    /// `ADAPTER:NAME`, or an adapter's plugin id (its configured model).
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,
}

impl Default for HostArgs {
    /// What no flags mean: the `default` profile (a derived `Default` would
    /// give an empty profile name, which loads nothing).
    fn default() -> Self {
        Self {
            profile: "default".into(),
            patches: Vec::new(),
            overrides: Vec::new(),
            workspace: None,
            session_dir: None,
            no_watch: false,
            model: None,
        }
    }
}

impl HostArgs {
    /// The harness options of these flags, with `HOME`, the plugin and
    /// cache directories from the environment and notices printed to
    /// stderr as `wharf: warning: …`.
    pub fn options(&self) -> HostOptions {
        let (plugin_dir, plugin_dir_explicit) = plugin_dir();
        HostOptions {
            profile: self.profile.clone(),
            patches: self.patches.clone(),
            overrides: self.overrides.clone(),
            workspace: self.workspace.clone(),
            session_dir: self.session_dir.clone(),
            watch: !self.no_watch,
            model: self.model.clone(),
            home: home(),
            plugin_dir,
            plugin_dir_explicit,
            cache_dir: std::env::var_os("WHARF_CACHE_DIR").map(PathBuf::from),
            runtime: crate::env::runtime_options(),
            notices: Some(Arc::new(|n: Notice| eprintln!("wharf: {n}"))),
        }
    }

    /// The workspace, absolute (see [`HostOptions::workspace`]).
    pub fn workspace(&self) -> Result<PathBuf> {
        self.options().workspace()
    }

    /// The layered config (see [`HostOptions::load_config`]).
    pub fn load_config(&self) -> Result<wharf_config::Config> {
        self.options().load_config()
    }
}

/// The user's home directory, from `HOME`.
pub fn home() -> Option<PathBuf> {
    std::env::var_os("HOME").map(PathBuf::from)
}

/// Where the built components are, and whether it was set explicitly:
/// `$WHARF_PLUGIN_DIR`, else, next to the binary's directory,
/// `lib/wharf/plugins` (the layout `cargo xtask install --prefix DIR`
/// writes: `DIR/bin/wharf`, `DIR/lib/wharf/plugins`) or `plugins`
/// (`target/plugins` for a binary in `target/debug`), else
/// `./target/plugins`.
pub fn plugin_dir() -> (PathBuf, bool) {
    if let Some(d) = std::env::var_os("WHARF_PLUGIN_DIR") {
        return (PathBuf::from(d), true);
    }
    if let Ok(exe) = std::env::current_exe()
        && let Some(d) = exe.parent().and_then(Path::parent)
    {
        for candidate in [d.join("lib").join("wharf").join("plugins"), d.join("plugins")] {
            if candidate.is_dir() {
                return (candidate, false);
            }
        }
    }
    (PathBuf::from("target/plugins"), false)
}

/// Parses a `--max-steps` value: 1 to [`MAX_STEPS_LIMIT`] (a budget of 0
/// would end every turn before its first step, so it is refused rather than
/// rounded up).
pub fn parse_max_steps(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(n) if (1..=MAX_STEPS_LIMIT).contains(&n) => Ok(n),
        _ => Err(format!("expected a step budget from 1 to {MAX_STEPS_LIMIT}, got `{s}`")),
    }
}

/// The compile cache of `config`: `$WHARF_CACHE_DIR` over `engine.cache_dir`.
pub fn cache_dir(config: &wharf_config::Config) -> PathBuf {
    std::env::var_os("WHARF_CACHE_DIR").map(PathBuf::from).unwrap_or_else(|| config.engine.cache_dir.clone())
}
