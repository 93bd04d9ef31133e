//! Grants: what a plugin may do is what its manifest requests intersected
//! with what the operator grants. Everything else is denied: no inherited
//! environment, arguments, sockets or directories.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Access to a granted directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    /// Read only.
    Ro,
    /// Read and write.
    Rw,
}

/// A directory the operator grants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirGrant {
    /// Host path; the guest sees it at the same absolute path.
    pub path: PathBuf,
    /// Access level.
    pub access: Access,
}

impl DirGrant {
    /// Parses `PATH[:ro|:rw]` (read-only when no suffix is given, so a
    /// forgotten suffix never grants more than intended). The path is made
    /// absolute and canonical, and must be an existing directory.
    pub fn parse(spec: &str) -> Result<Self, GrantError> {
        let (path, access) = match spec.rsplit_once(':') {
            Some((p, "ro")) => (p, Access::Ro),
            Some((p, "rw")) => (p, Access::Rw),
            _ => (spec, Access::Ro),
        };
        Self::new(Path::new(path), access)
    }

    /// A grant of `path` with `access`, canonicalized.
    pub fn new(path: &Path, access: Access) -> Result<Self, GrantError> {
        let canon = std::fs::canonicalize(path)
            .map_err(|e| GrantError::BadDir { path: path.to_path_buf(), reason: e.to_string() })?;
        if !canon.is_dir() {
            return Err(GrantError::BadDir { path: path.to_path_buf(), reason: "not a directory".into() });
        }
        Ok(Self { path: canon, access })
    }
}

/// A malformed grant.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GrantError {
    /// A granted directory does not exist or is not a directory.
    #[error("cannot grant directory {}: {reason}", path.display())]
    BadDir {
        /// The path given.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A host pattern is malformed.
    #[error("bad host pattern `{0}`: expected HOST, HOST:PORT, *.DOMAIN or *")]
    BadHost(String),
    /// An env var name is malformed.
    #[error("bad environment variable name `{0}`")]
    BadEnv(String),
}

/// What the operator grants a plugin (a profile row, or CLI flags).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// Directories.
    #[serde(default)]
    pub dirs: Vec<DirGrant>,
    /// Outbound HTTP host patterns.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Environment variables passed by name (values from the host env).
    #[serde(default)]
    pub env: Vec<String>,
    /// The `process` capability.
    #[serde(default)]
    pub process: bool,
    /// Memory limit per instance, MiB.
    #[serde(default)]
    pub memory_mb: Option<u32>,
    /// Wall-clock limit per call, ms.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Operator-only: a tool call still running after this many ms yields
    /// (answers with its output so far; the call goes on as a cell of the
    /// session, `wharf_core::cells`).
    #[serde(default)]
    pub yield_ms: Option<u64>,
    /// Operator-only: a call of this row's tools interrupted by a crash is
    /// re-run when its session reopens, its inner calls answered from the
    /// log, its clock and random numbers replayed (`wharf_core::durable`).
    #[serde(default)]
    pub durable: bool,
    /// Cap on a call's output, bytes.
    #[serde(default)]
    pub output_limit_bytes: Option<usize>,
    /// Run `process` commands without the OS sandbox (`grant.sandbox =
    /// "off"`). By default a plugin's processes are refused when the sandbox
    /// cannot be set up.
    #[serde(default)]
    pub sandbox_off: bool,
    /// Outbound HTTP may reach private, loopback and link-local addresses.
    /// Without it only public addresses are reachable, except hosts the
    /// allowlist names literally as an IP address or `localhost`.
    #[serde(default)]
    pub private_network: bool,
    /// The `model` import: one-shot requests to the session's model.
    #[serde(default)]
    pub model: bool,
    /// The `agents` import: running child agents (subagents).
    #[serde(default)]
    pub agents: bool,
    /// The `questions` import: a tool call asks the session's user a
    /// question (a bounded form, `wharf_core::question`).
    #[serde(default)]
    pub questions: bool,
    /// The `tools` import: calling the session's tools through the pipeline.
    #[serde(default)]
    pub tools: ToolsGrant,
    /// Operator-only (a row with `dev = true`, `wharf plugin dev`): the
    /// directory holding the plugin's source for a dev runtime component.
    /// Each load snapshots it ([`crate::dev`]) and every sandbox of that
    /// version sees the snapshot read-only at [`crate::dev::GUEST_DIR`]. A
    /// missing directory is no snapshot (a Rust dev build needs none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev_source: Option<PathBuf>,
}

/// Which of the session's tools a plugin may call (`grant.tools`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolsGrant {
    /// None: the `tools` import answers `not-granted`.
    #[default]
    None,
    /// Every tool of the session (except the plugin's own).
    All,
    /// Only these names.
    Only(Vec<String>),
}

/// What the component asks for (from its `plugin.info()`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantRequest {
    /// Filesystem access wanted.
    pub filesystem: FsRequest,
    /// Host patterns wanted.
    pub hosts: Vec<String>,
    /// Env names wanted.
    pub env: Vec<String>,
    /// Process wanted.
    pub process: bool,
    /// Memory needed, MiB.
    pub memory_mb: Option<u32>,
}

/// Filesystem access requested by a plugin.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FsRequest {
    /// No filesystem.
    #[default]
    None,
    /// Read only.
    ReadOnly,
    /// Read and write.
    ReadWrite,
}

/// Default memory limit per instance, MiB.
pub const DEFAULT_MEMORY_MB: u32 = 256;
/// Default wall-clock limit per call, ms.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// Default cap on a call's output, bytes.
pub const DEFAULT_OUTPUT_LIMIT: usize = 16 << 20;

/// The effective capabilities of one plugin version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectiveGrant {
    /// Preopened directories.
    pub dirs: Vec<DirGrant>,
    /// Allowed outbound HTTP host patterns.
    pub hosts: Vec<String>,
    /// Env var names passed through.
    pub env: Vec<String>,
    /// Process capability.
    pub process: bool,
    /// Memory limit, MiB.
    pub memory_mb: u32,
    /// Wall-clock limit per call, ms.
    pub timeout_ms: u64,
    /// See [`Grant::yield_ms`].
    #[serde(default)]
    pub yield_ms: Option<u64>,
    /// See [`Grant::durable`].
    #[serde(default)]
    pub durable: bool,
    /// Output cap, bytes.
    pub output_limit_bytes: usize,
    /// Processes run without the OS sandbox (see [`Grant::sandbox_off`]).
    #[serde(default)]
    pub sandbox_off: bool,
    /// See [`Grant::private_network`].
    #[serde(default)]
    pub private_network: bool,
    /// See [`Grant::model`].
    #[serde(default)]
    pub model: bool,
    /// See [`Grant::agents`].
    #[serde(default)]
    pub agents: bool,
    /// See [`Grant::questions`].
    #[serde(default)]
    pub questions: bool,
    /// See [`Grant::tools`].
    #[serde(default)]
    pub tools: ToolsGrant,
    /// Things asked for but not granted (for `inspect`/`doctor`).
    pub denied: Vec<String>,
}

impl Grant {
    /// Checks host patterns and env names.
    pub fn validate(&self) -> Result<(), GrantError> {
        for h in &self.hosts {
            validate_host_pattern(h)?;
        }
        for e in &self.env {
            if e.is_empty() || !e.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(GrantError::BadEnv(e.clone()));
            }
        }
        Ok(())
    }

    /// The intersection of this grant with a plugin's request.
    pub fn intersect(&self, req: &GrantRequest) -> EffectiveGrant {
        let mut denied = Vec::new();
        let dirs = match req.filesystem {
            FsRequest::None => Vec::new(),
            FsRequest::ReadOnly => {
                self.dirs.iter().map(|d| DirGrant { path: d.path.clone(), access: Access::Ro }).collect()
            }
            FsRequest::ReadWrite => self.dirs.clone(),
        };
        if req.filesystem != FsRequest::None && self.dirs.is_empty() {
            denied.push("filesystem (no directory granted)".to_string());
        }
        let mut hosts = Vec::new();
        for r in &req.hosts {
            let mut matched = false;
            for g in &self.hosts {
                let m = if host_pattern_covers(r, g) {
                    Some(g.clone())
                } else if host_pattern_covers(g, r) {
                    Some(r.clone())
                } else {
                    None
                };
                if let Some(m) = m {
                    matched = true;
                    if !hosts.contains(&m) {
                        hosts.push(m);
                    }
                }
            }
            if !matched {
                denied.push(format!("host {r}"));
            }
        }
        let mut env = Vec::new();
        for e in &req.env {
            // `*`: whatever names the operator grants (the shell plugin passes
            // them on to its processes). Names are still granted one by one.
            if e == "*" {
                env.extend(self.env.iter().filter(|g| !req.env.contains(g)).cloned());
                continue;
            }
            if self.env.contains(e) {
                env.push(e.clone());
            } else {
                denied.push(format!("env {e}"));
            }
        }
        let process = req.process && self.process;
        if req.process && !self.process {
            denied.push("process".to_string());
        }
        let memory_mb = self.memory_mb.unwrap_or(DEFAULT_MEMORY_MB);
        if let Some(want) = req.memory_mb
            && want > memory_mb
        {
            denied.push(format!("memory {want} MiB (limit {memory_mb} MiB)"));
        }
        EffectiveGrant {
            dirs,
            hosts,
            env,
            process,
            memory_mb,
            timeout_ms: self.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS),
            yield_ms: self.yield_ms,
            durable: self.durable,
            output_limit_bytes: self.output_limit_bytes.unwrap_or(DEFAULT_OUTPUT_LIMIT),
            sandbox_off: self.sandbox_off,
            private_network: self.private_network,
            model: self.model,
            agents: self.agents,
            questions: self.questions,
            tools: self.tools.clone(),
            denied,
        }
    }
}

fn validate_host_pattern(p: &str) -> Result<(), GrantError> {
    if p == "*" {
        return Ok(());
    }
    let host = p.strip_prefix("*.").unwrap_or(p);
    let (name, port) = match host.rsplit_once(':') {
        Some((n, port)) if !n.contains(':') || n.starts_with('[') => (n, Some(port)),
        _ => (host, None),
    };
    let ok_name =
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '[' | ']' | ':'));
    let ok_port = port.is_none_or(|p| p.parse::<u16>().is_ok());
    if ok_name && ok_port { Ok(()) } else { Err(GrantError::BadHost(p.to_string())) }
}

/// Whether pattern `pat` covers everything pattern `other` matches.
fn host_pattern_covers(pat: &str, other: &str) -> bool {
    if pat == "*" {
        return true;
    }
    if other == "*" {
        return false;
    }
    if let Some(suffix) = pat.strip_prefix("*.") {
        let o = other.strip_prefix("*.").unwrap_or(other);
        return o.ends_with(&format!(".{suffix}")) || (other.starts_with("*.") && o == suffix);
    }
    if pat.eq_ignore_ascii_case(other) {
        return true;
    }
    // `host` (any port) covers `host:port`.
    match other.rsplit_once(':') {
        Some((h, port)) if port.parse::<u16>().is_ok() => h.eq_ignore_ascii_case(pat),
        _ => false,
    }
}

/// Whether an HTTP authority (`host` or `host:port`) is allowed by patterns.
pub fn host_allowed(patterns: &[String], host: &str, port: Option<u16>) -> bool {
    let with_port = port.map(|p| format!("{host}:{p}"));
    patterns.iter().any(|pat| {
        host_pattern_covers(pat, host) || with_port.as_deref().is_some_and(|hp| host_pattern_covers(pat, hp))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use anyhow::Context;

    #[test]
    fn host_patterns() {
        let p = vec!["api.example.com".to_string(), "*.svc.local".to_string(), "127.0.0.1:8080".to_string()];
        assert!(host_allowed(&p, "api.example.com", Some(443)));
        assert!(host_allowed(&p, "a.svc.local", None));
        assert!(!host_allowed(&p, "svc.local.evil.com", None));
        assert!(host_allowed(&p, "127.0.0.1", Some(8080)));
        assert!(!host_allowed(&p, "127.0.0.1", Some(8081)));
        assert!(!host_allowed(&p, "example.com", None));
        assert!(host_allowed(&["*".to_string()], "anything", Some(1)));
    }

    #[test]
    fn intersection_is_narrowest() {
        let g = Grant {
            hosts: vec!["*.example.com".into(), "other.org".into()],
            env: vec!["A".into(), "B".into()],
            process: false,
            ..Grant::default()
        };
        let r = GrantRequest {
            filesystem: FsRequest::None,
            hosts: vec!["api.example.com".into(), "evil.net".into()],
            env: vec!["B".into(), "C".into()],
            process: true,
            memory_mb: None,
        };
        let e = g.intersect(&r);
        assert_eq!(e.hosts, vec!["api.example.com".to_string()]);
        assert_eq!(e.env, vec!["B".to_string()]);
        assert!(!e.process);
        assert!(e.denied.iter().any(|d| d == "host evil.net"));
        assert!(e.denied.iter().any(|d| d == "env C"));
        assert!(e.denied.iter().any(|d| d == "process"));
    }

    #[test]
    fn dir_suffix_defaults_to_read_only() -> anyhow::Result<()> {
        let tmp = std::env::temp_dir();
        let d = DirGrant::parse(tmp.to_str().unwrap_or("/tmp")).context("parsing the grant")?;
        assert_eq!(d.access, Access::Ro);
        let d = DirGrant::parse(&format!("{}:rw", tmp.display())).context("parsing the grant")?;
        assert_eq!(d.access, Access::Rw);
        assert!(DirGrant::parse("/definitely/not/here:rw").is_err());
        Ok(())
    }
}
