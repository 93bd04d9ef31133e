//! Builders for [`PluginInfo`] and [`GrantRequest`].

use crate::raw::wharf::plugin::types::{FsAccess, GrantRequest, PluginInfo};

impl Default for GrantRequest {
    fn default() -> Self {
        Self::none()
    }
}

impl GrantRequest {
    /// Asks for nothing: no files, hosts, environment or processes.
    pub fn none() -> Self {
        Self { filesystem: FsAccess::None, hosts: Vec::new(), env: Vec::new(), process: false, memory_mb: None }
    }
}

impl PluginInfo {
    /// A plugin that asks for no capabilities; add them with the builder
    /// methods ([`filesystem`](Self::filesystem), [`hosts`](Self::hosts) …).
    ///
    /// `name` is a short machine name (`text`), `version` the plugin's semver
    /// (usually `env!("CARGO_PKG_VERSION")`).
    pub fn new(name: impl Into<String>, version: impl Into<String>, description: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            version: version.into(),
            description: description.into(),
            requests: GrantRequest::none(),
        }
    }

    /// Asks for this access to the directories the operator grants.
    pub fn filesystem(mut self, access: FsAccess) -> Self {
        self.requests.filesystem = access;
        self
    }

    /// Asks for outbound HTTP to these host patterns (`api.example.com`,
    /// `*.example.com`, `*`).
    pub fn hosts<I, S>(mut self, hosts: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.requests.hosts = hosts.into_iter().map(Into::into).collect();
        self
    }

    /// Asks to read these environment variables.
    pub fn env<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.requests.env = names.into_iter().map(Into::into).collect();
        self
    }

    /// Asks for the `process` host capability.
    pub fn process(mut self, wanted: bool) -> Self {
        self.requests.process = wanted;
        self
    }

    /// Says how much memory the plugin needs, in MiB.
    pub fn memory_mb(mut self, mb: u32) -> Self {
        self.requests.memory_mb = Some(mb);
        self
    }
}
