//! MCP server configuration: one row per server.
//!
//! In a profile (once the config crate knows the table) each row is an
//! `[[mcp]]` entry; until then `--mcp-config FILE` reads the same rows from
//! JSON. The file may hold an array of rows, `{"mcp": [rows]}`, or the
//! `.mcp.json` shape `{"mcpServers": {"NAME": {row without name}}}`.
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
//! `env`. MCP servers are native processes, not sandboxed components: every
//! call to their tools still goes through the policy pipeline.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Environment variables a stdio server inherits from the host.
pub const INHERITED_ENV: &[&str] =
    &["PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "TERM", "TMPDIR", "TZ"];

/// Default time for a server to start and answer `initialize` + `tools/list`.
pub const DEFAULT_STARTUP_TIMEOUT_MS: u64 = 30_000;

/// One MCP server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// Server name, `[a-z0-9_-]+` without `__`; tools appear as `mcp__NAME__TOOL`.
    pub name: String,
    /// Program of a stdio server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Extra environment of a stdio server.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Working directory of a stdio server (default: the workspace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// Endpoint of a streamable HTTP server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Extra HTTP headers (e.g. `Authorization`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The first turn waits for this server; if it cannot connect, turns end `blocked`.
    #[serde(default)]
    pub required: bool,
    /// Time to connect and list tools (default 30 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_timeout_ms: Option<u64>,
    /// Deadline of one tool call (default: the pipeline's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_timeout_ms: Option<u64>,
    /// `false` skips the row.
    #[serde(default = "yes")]
    pub enabled: bool,
}

fn yes() -> bool {
    true
}

/// How a server is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking newline-delimited JSON-RPC on stdio.
    Stdio,
    /// Streamable HTTP.
    Http,
}

impl Transport {
    /// `stdio` or `http`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stdio => "stdio",
            Self::Http => "http",
        }
    }
}

impl McpServerConfig {
    /// The transport (valid rows only).
    pub fn transport(&self) -> Transport {
        if self.url.is_some() { Transport::Http } else { Transport::Stdio }
    }

    /// Checks one row.
    pub fn validate(&self) -> Result<()> {
        let n = &self.name;
        if n.is_empty()
            || n.len() > 32
            || !n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
            || n.contains("__")
        {
            bail!("MCP server name `{n}` must be 1-32 characters of [a-z0-9_-] without `__`");
        }
        match (&self.command, &self.url) {
            (Some(_), Some(_)) => bail!("MCP server `{n}`: set `command` or `url`, not both"),
            (None, None) => bail!("MCP server `{n}`: set `command` (stdio) or `url` (streamable HTTP)"),
            (Some(c), None) if c.trim().is_empty() => bail!("MCP server `{n}`: empty `command`"),
            (None, Some(u)) if !(u.starts_with("http://") || u.starts_with("https://")) => {
                bail!("MCP server `{n}`: `url` must be http:// or https://, got `{u}`")
            }
            _ => {}
        }
        if self.url.is_some() && (!self.args.is_empty() || !self.env.is_empty() || self.cwd.is_some()) {
            bail!("MCP server `{n}`: `args`, `env` and `cwd` apply to stdio servers only");
        }
        if self.command.is_some() && !self.headers.is_empty() {
            bail!("MCP server `{n}`: `headers` apply to HTTP servers only");
        }
        Ok(())
    }
}

/// Parses the rows of a JSON config (see the module docs for the shapes).
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
        r.validate()?;
        if !seen.insert(r.name.clone()) {
            bail!("MCP server `{}` is configured twice", r.name);
        }
    }
    Ok(rows.into_iter().filter(|r| r.enabled).collect())
}

/// Reads `--mcp-config FILE`.
pub fn load_file(path: &Path) -> Result<Vec<McpServerConfig>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse(&text).with_context(|| format!("MCP config {}", path.display()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parses_every_shape_and_validates() {
        let rows = parse(r#"[{"name": "a", "command": "x", "required": true}]"#).unwrap();
        assert_eq!(rows[0].transport(), Transport::Stdio);
        assert!(rows[0].required);
        let rows = parse(r#"{"mcp": [{"name": "b", "url": "http://127.0.0.1:1/mcp"}]}"#).unwrap();
        assert_eq!(rows[0].transport(), Transport::Http);
        let rows = parse(r#"{"mcpServers": {"c": {"type": "stdio", "command": "y", "args": ["1"]}}}"#).unwrap();
        assert_eq!((rows[0].name.as_str(), rows[0].args.len()), ("c", 1));
        assert!(parse(r#"[{"name": "A", "command": "x"}]"#).is_err());
        assert!(parse(r#"[{"name": "a__b", "command": "x"}]"#).is_err());
        assert!(parse(r#"[{"name": "a"}]"#).is_err());
        assert!(parse(r#"[{"name": "a", "command": "x", "url": "http://h"}]"#).is_err());
        assert!(parse(r#"[{"name": "a", "url": "ftp://h"}]"#).is_err());
        assert!(parse(r#"[{"name": "a", "command": "x", "bogus": 1}]"#).is_err());
        assert!(parse(r#"[{"name": "a", "command": "x"}, {"name": "a", "command": "y"}]"#).is_err());
        assert!(parse(r#"[{"name": "a", "command": "x", "enabled": false}]"#).unwrap().is_empty());
    }
}
