//! MCP server configuration: one row per server.
//!
//! In a profile each row is an `[[mcp]]` entry (see the `wharf-config`
//! docs). `--mcp-config FILE` (on `wharf web` and `wharf mcp tools`) reads
//! more rows from JSON, added over the profile's by name. The file may hold
//! an array of rows, `{"mcp": [rows]}`, or the `.mcp.json` shape
//! `{"mcpServers": {"NAME": {row without name}}}`.
//!
//! ```json
//! {"mcp": [
//!   {"name": "files", "command": "my-mcp-server", "args": ["--root", "."], "env": {"LOG": "1"}, "required": true},
//!   {"name": "search", "url": "http://127.0.0.1:8080/mcp", "headers": {"Authorization": "Bearer …"}}
//! ]}
//! ```
//!
//! A stdio server starts in the workspace (or `cwd`) with a **clean
//! environment**: only `PATH`, `HOME`, `USER`, `LOGNAME`, `SHELL`, `LANG`,
//! `LC_ALL`, `TERM`, `TMPDIR` and `TZ` are passed through, plus the row's
//! `env`. `env` and `headers` values may use `${env:NAME}` (resolved from the
//! host's environment when the server starts; unset fails that server).
//! MCP servers are native processes, not components: every call to their
//! tools goes through the policy pipeline, and a stdio server runs under
//! the shell tool's OS sandbox (below).
//!
//! # The OS sandbox of stdio servers
//!
//! A stdio server starts confined (`wharf_runtime::process::native`: a new
//! process group killed when the connection ends or Wharf exits, Landlock,
//! seccomp, rlimits, `no_new_privs`, no capabilities) with the grants of its
//! row's `sandbox` table, deny by default:
//!
//! ```toml
//! [[mcp]]
//! name = "files"
//! command = "my-mcp-server"
//! [mcp.sandbox]
//! dirs = ["${workspace}:rw", "~/notes:ro"]   # PATH[:ro|:rw][?], :ro by default, `?`: skip if missing
//! network = false                             # true: TCP/UDP to any host
//! env = ["GITHUB_TOKEN"]                      # host variables passed by name
//! ```
//!
//! - **Reads**: everywhere (so the workspace, the program and its runtime
//!   are readable) except the protected paths — Wharf's config, session and
//!   cache directories and credential stores (`~/.ssh`, `~/.aws`,
//!   `~/.gnupg`, …) — unless a `dirs` entry names one.
//! - **Writes**: only in the `:rw` directories, a private tmp directory
//!   (`HOME` and `TMPDIR` point there unless the row's `env` sets them) and
//!   `/dev/null`. The workspace is read-only unless granted `:rw`.
//! - **Network**: none (no IPv4/IPv6 sockets at all) unless `network = true`.
//! - **Environment**: `PATH`, `USER`, `LOGNAME`, `SHELL`, `LANG`, `LC_ALL`,
//!   `TERM`, `TZ`, the `sandbox.env` names and the row's `env` values.
//!
//! `unsandboxed = true` on a row is the explicit opt-out: the server starts
//! unconfined (its own process group, rlimits and `no_new_privs` only) with
//! the environment of [`INHERITED_ENV`] plus `env`. Without an OS sandbox on
//! the machine (no Landlock: `wharf doctor` says so) a sandboxed row fails
//! to start, naming the opt-out. `wharf doctor` prints each row's
//! confinement ([`describe`]).
//!
//! Servers an ACP client passes in `session/new` are sandboxed with the
//! session's workspace read-write, no network and no host variables beyond
//! the basic ones (the client's `env` values are passed).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::Value;
use wharf_runtime::process::native::NativeGrant;
use wharf_runtime::process::{Level, sandbox_level};

/// Environment variables a stdio server inherits from the host.
pub const INHERITED_ENV: &[&str] =
    &["PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "TERM", "TMPDIR", "TZ"];

/// Default time for a server to start and answer `initialize` + `tools/list`.
pub const DEFAULT_STARTUP_TIMEOUT_MS: u64 = 30_000;

/// One MCP server: the config crate's `[[mcp]]` row.
pub use wharf_config::McpServer as McpServerConfig;

/// How a server is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking newline-delimited JSON-RPC on stdio.
    Stdio,
    /// Streamable HTTP.
    Http,
}

impl Transport {
    /// The transport of a (valid) row.
    pub fn of(c: &McpServerConfig) -> Self {
        if c.is_http() { Self::Http } else { Self::Stdio }
    }

    /// `stdio` or `http`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stdio => "stdio",
            Self::Http => "http",
        }
    }
}

/// Variables of [`INHERITED_ENV`] a sandboxed server does not get from the
/// host (they point at its private tmp directory instead).
pub const PRIVATE_ENV: &[&str] = &["HOME", "TMPDIR"];

/// How a row's server runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confinement {
    /// Reached over HTTP: not a local process.
    Remote,
    /// `unsandboxed = true`.
    Unsandboxed,
    /// Under the OS sandbox with these grants (`env`: host variable names).
    Sandboxed {
        /// Directories and network.
        grant: NativeGrant,
        /// Host variables passed by name.
        env: Vec<String>,
    },
}

/// The confinement of a row: its `sandbox` grants resolved (relative
/// directories against `workspace`; a missing optional one skipped).
pub(crate) fn confinement(c: &McpServerConfig, workspace: &Path) -> Result<Confinement, String> {
    if c.is_http() {
        return Ok(Confinement::Remote);
    }
    if c.unsandboxed {
        return Ok(Confinement::Unsandboxed);
    }
    let mut grant = NativeGrant { network: c.sandbox.network, ..NativeGrant::default() };
    for spec in &c.sandbox.dirs {
        if spec.is_empty() {
            // An optional grant whose variable had no value.
            continue;
        }
        let (spec, optional) = match spec.strip_suffix('?') {
            Some(rest) => (rest, true),
            None => (spec.as_str(), false),
        };
        let (path, rw) = match spec.rsplit_once(':') {
            Some((p, "rw")) => (p, true),
            Some((p, "ro")) => (p, false),
            _ => (spec, false),
        };
        if path.is_empty() {
            return Err(format!("MCP server `{}`: empty directory in `sandbox.dirs`", c.name));
        }
        let path = if Path::new(path).is_relative() { workspace.join(path) } else { PathBuf::from(path) };
        if !path.is_dir() {
            if optional {
                continue;
            }
            return Err(format!(
                "MCP server `{}`: granted directory {} does not exist (end it with `?` to make it optional)",
                c.name,
                path.display()
            ));
        }
        if rw { grant.rw.push(path) } else { grant.ro.push(path) }
    }
    Ok(Confinement::Sandboxed { grant, env: c.sandbox.env.clone() })
}

/// One line for `wharf doctor`: whether the server can start as
/// configured on this machine, and how it is confined.
pub fn describe(c: &McpServerConfig, workspace: &Path) -> (bool, String) {
    let show = |d: &[PathBuf]| {
        if d.is_empty() {
            "none".to_string()
        } else {
            d.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        }
    };
    match confinement(c, workspace) {
        Err(e) => (false, format!("cannot start: {e}")),
        Ok(Confinement::Remote) => {
            let widened =
                if c.sandbox.hosts.is_empty() { String::new() } else { format!(" and {}", c.sandbox.hosts.join(", ")) };
            (
                true,
                format!(
                    "remote ({}): not a local process; the client reaches its own host{widened} only",
                    c.url.as_deref().unwrap_or("")
                ),
            )
        }
        Ok(Confinement::Unsandboxed) => (
            true,
            "UNCONFINED (`unsandboxed = true`): a native process with your full authority (own process group, \
             killed on exit)"
                .to_string(),
        ),
        Ok(Confinement::Sandboxed { grant, env }) => {
            let (level, why) = sandbox_level();
            if level == Level::None {
                return (
                    false,
                    format!("sandboxed, but will not start: {why} (set `unsandboxed = true` to run it unconfined)"),
                );
            }
            (
                true,
                format!(
                    "sandboxed ({level}): writes {}; extra reads {}; network {}; host env {}; reads elsewhere \
                     except credential stores and Wharf's directories",
                    show(&grant.rw),
                    show(&grant.ro),
                    if grant.network { "any host" } else { "denied" },
                    if env.is_empty() { "basic only".to_string() } else { env.join(", ") },
                ),
            )
        }
    }
}

/// Adds `extra` rows over `base` by name (a later row replaces an earlier
/// one of the same name; a disabled one removes it).
pub fn merge(base: &mut Vec<McpServerConfig>, extra: Vec<McpServerConfig>) {
    for row in extra {
        base.retain(|r| r.name != row.name);
        if row.enabled {
            base.push(row);
        }
    }
}

/// Parses the rows of a JSON config (see the module docs for the shapes).
/// Disabled rows are kept: [`merge`] drops them (and the rows they name).
pub fn parse(text: &str) -> Result<Vec<McpServerConfig>> {
    let v: Value = serde_json::from_str(text).context("not valid JSON")?;
    let rows: Vec<McpServerConfig> = match v {
        Value::Array(_) => serde_json::from_value(v)?,
        Value::Object(mut m) if m.contains_key("mcp") => {
            serde_json::from_value(m.remove("mcp").unwrap_or(Value::Null)).context("`mcp`")?
        }
        Value::Object(mut m) if m.contains_key("mcpServers") => {
            let Some(Value::Object(servers)) = m.remove("mcpServers") else {
                bail!("`mcpServers` must be an object of servers by name");
            };
            let mut rows = Vec::new();
            for (name, mut row) in servers {
                if let Value::Object(r) = &mut row {
                    r.insert("name".into(), Value::String(name.clone()));
                    // `.mcp.json` files mark the transport; the shape says it already.
                    r.remove("type");
                }
                rows.push(serde_json::from_value(row).with_context(|| format!("server `{name}`"))?);
            }
            rows
        }
        _ => bail!("expected an array of servers, {{\"mcp\": [...]}} or {{\"mcpServers\": {{...}}}}"),
    };
    let mut seen = std::collections::BTreeSet::new();
    for r in &rows {
        if r.enabled
            && let Err((_, message)) = r.validate()
        {
            bail!("{message}");
        }
        if !seen.insert(r.name.clone()) {
            bail!("MCP server `{}` is configured twice", r.name);
        }
    }
    Ok(rows)
}

/// Reads `--mcp-config FILE`.
pub fn load_file(path: &Path) -> Result<Vec<McpServerConfig>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse(&text).with_context(|| format!("MCP config {}", path.display()))
}

/// Adds the servers of an `--mcp-config FILE` (if given) over a config's
/// own, by name.
pub fn add_file(config: &mut wharf_config::Config, file: Option<&Path>) -> Result<()> {
    if let Some(file) = file {
        merge(&mut config.mcp, load_file(file)?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parses_every_shape_and_validates() {
        let rows = parse(r#"[{"name": "a", "command": "x", "required": true}]"#).unwrap();
        assert_eq!(Transport::of(&rows[0]), Transport::Stdio);
        assert!(rows[0].required);
        let rows = parse(r#"{"mcp": [{"name": "b", "url": "http://127.0.0.1:1/mcp"}]}"#).unwrap();
        assert_eq!(Transport::of(&rows[0]), Transport::Http);
        let rows = parse(r#"{"mcpServers": {"c": {"type": "stdio", "command": "y", "args": ["1"]}}}"#).unwrap();
        assert_eq!((rows[0].name.as_str(), rows[0].args.len()), ("c", 1));
        assert!(parse(r#"[{"name": "A b", "command": "x"}]"#).is_err());
        assert!(parse(r#"[{"name": "a__b", "command": "x"}]"#).is_err());
        assert!(parse(r#"[{"name": "a"}]"#).is_err());
        assert!(parse(r#"[{"name": "a", "command": "x", "url": "http://h"}]"#).is_err());
        assert!(parse(r#"[{"name": "a", "url": "ftp://h"}]"#).is_err());
        assert!(parse(r#"[{"name": "a", "command": "x", "bogus": 1}]"#).is_err());
        assert!(parse(r#"[{"name": "a", "command": "x"}, {"name": "a", "command": "y"}]"#).is_err());
        assert!(!parse(r#"[{"name": "a", "command": "x", "enabled": false}]"#).unwrap()[0].enabled);
    }

    #[test]
    fn extra_rows_replace_and_remove_by_name() {
        let mut base = parse(r#"[{"name": "a", "command": "x"}, {"name": "b", "command": "y"}]"#).unwrap();
        let extra: Vec<McpServerConfig> = serde_json::from_str(
            r#"[{"name": "a", "url": "http://h/mcp"}, {"name": "b", "command": "y", "enabled": false}, {"name": "c", "command": "z"}]"#,
        )
        .unwrap();
        merge(&mut base, extra);
        let names: Vec<(&str, bool)> = base.iter().map(|r| (r.name.as_str(), r.is_http())).collect();
        assert_eq!(names, [("a", true), ("c", false)]);
    }
}
