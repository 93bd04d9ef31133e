//! What a host is built from: the profile and its layers, the workspace,
//! where components, sessions and the compile cache are, and who hears the
//! host's notices. Surfaces fill these in (the `wharf` binary from its flags
//! and the environment); nothing here reads either.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use wharf_config::{Config, LoadOptions};
use wharf_runtime::RuntimeOptions;

/// Something the host tells the person running it, outside any session
/// (a `--model` the profile does not list, a resumed session's profile,
/// a damaged log line skipped): the surface shows it its own way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// Worth a look; the host goes on.
    Warning(String),
    /// For information.
    Note(String),
}

impl std::fmt::Display for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Warning(t) => write!(f, "warning: {t}"),
            Self::Note(t) => write!(f, "note: {t}"),
        }
    }
}

/// Receives a host's [`Notice`]s.
pub type NoticeSink = Arc<dyn Fn(Notice) + Send + Sync>;

/// How to build a host ([`crate::Harness::start`]).
#[derive(Clone)]
pub struct HostOptions {
    /// Profile: a shipped name (`default`, `demo`, …) or a path to a TOML file.
    pub profile: String,
    /// Extra config layers, applied after the user and project layers.
    pub patches: Vec<PathBuf>,
    /// `KEY=VALUE` overrides, e.g. `agent.max_steps=5`.
    pub overrides: Vec<String>,
    /// The workspace directory (`None`: the current directory).
    pub workspace: Option<PathBuf>,
    /// Where session logs live (overrides `session.dir`).
    pub session_dir: Option<PathBuf>,
    /// Whether component and config files are watched for changes.
    pub watch: bool,
    /// The model: `NAME`, `ADAPTER/NAME`, `ADAPTER:NAME` or an adapter's row id.
    pub model: Option<String>,
    /// The user's home directory (the user config layer, `~` in paths).
    pub home: Option<PathBuf>,
    /// Where the built components are (`${plugin_dir}` in profiles).
    pub plugin_dir: PathBuf,
    /// Whether [`plugin_dir`](Self::plugin_dir) was set explicitly (said in
    /// the error when components are missing from it).
    pub plugin_dir_explicit: bool,
    /// The compile cache, over the profile's `engine.cache_dir`.
    pub cache_dir: Option<PathBuf>,
    /// The runtime's engine and tiering settings (the binary reads them
    /// from the environment); the profile's `engine.pooling` and the
    /// compile cache above override theirs.
    pub runtime: RuntimeOptions,
    /// Receives the host's notices (`None`: they go to the log).
    pub notices: Option<NoticeSink>,
}

impl Default for HostOptions {
    fn default() -> Self {
        Self {
            profile: "default".into(),
            patches: Vec::new(),
            overrides: Vec::new(),
            workspace: None,
            session_dir: None,
            watch: true,
            model: None,
            home: None,
            plugin_dir: PathBuf::from("target/plugins"),
            plugin_dir_explicit: false,
            cache_dir: None,
            runtime: RuntimeOptions::default(),
            notices: None,
        }
    }
}

impl std::fmt::Debug for HostOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostOptions")
            .field("profile", &self.profile)
            .field("workspace", &self.workspace)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

/// Fails, naming `WHARF_PLUGIN_DIR` and the install command, when enabled
/// rows point into the plugin directory at components that are not there
/// (a binary copied away from its components); other missing paths are left
/// to the loader's own error.
pub(crate) fn check_plugin_dir(config: &Config, dir: &Path, from_env: bool) -> Result<()> {
    let dir = &std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let missing: Vec<String> = config
        .plugins
        .iter()
        .filter(|p| p.path.starts_with(dir) && !p.path.exists())
        .filter_map(|p| p.path.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let how = if from_env {
        "from $WHARF_PLUGIN_DIR"
    } else {
        "found next to the binary or in ./target/plugins; WHARF_PLUGIN_DIR is not set"
    };
    anyhow::bail!(
        "the components this profile needs are not in the plugin directory {} ({how}); missing: {}.\n\
         Install wharf with its components: `cargo xtask install --prefix DIR` in a Wharf checkout \
         (then run DIR/bin/wharf, which finds DIR/lib/wharf/plugins), or set WHARF_PLUGIN_DIR to a \
         directory holding them (`cargo xtask build-plugins` builds them into target/plugins).",
        dir.display(),
        missing.join(", ")
    )
}

impl HostOptions {
    /// The workspace, absolute: a directory this process can list (checked
    /// here so an unreadable workspace is reported as such, not as its
    /// `.wharf/config.toml`).
    pub fn workspace(&self) -> Result<PathBuf> {
        let w = match &self.workspace {
            Some(w) => w.clone(),
            None => std::env::current_dir().context("cannot determine the current directory")?,
        };
        let abs = std::fs::canonicalize(&w).with_context(|| format!("workspace {}", w.display()))?;
        anyhow::ensure!(abs.is_dir(), "workspace {} is not a directory", w.display());
        std::fs::read_dir(&abs).with_context(|| format!("workspace {} is not readable", w.display()))?;
        Ok(abs)
    }

    /// The layered config.
    pub fn load_config(&self) -> Result<Config> {
        let opts = self.load_options()?;
        Ok(wharf_config::load(&opts)?)
    }

    /// What [`wharf_config::load`] is given.
    pub fn load_options(&self) -> Result<LoadOptions> {
        Ok(LoadOptions {
            profile: self.profile.clone(),
            workspace: self.workspace()?,
            home: self.home.clone(),
            plugin_dir: self.plugin_dir.clone(),
            patches: self.patches.clone(),
            overrides: self.overrides.clone(),
        })
    }

    /// The compile cache: [`cache_dir`](Self::cache_dir) wins over
    /// `engine.cache_dir`, so tests and CI can share one cache across
    /// throwaway homes.
    pub fn cache_dir_for(&self, config: &Config) -> PathBuf {
        self.cache_dir.clone().unwrap_or_else(|| config.engine.cache_dir.clone())
    }

    /// Tells the surface (or the log, with no sink).
    pub fn notify(&self, notice: Notice) {
        match &self.notices {
            Some(sink) => sink(notice),
            None => tracing::warn!("{notice}"),
        }
    }
}

/// Largest step budget per turn (the same bound as `agent.max_steps` in a profile).
pub const MAX_STEPS_LIMIT: u32 = 100_000;
