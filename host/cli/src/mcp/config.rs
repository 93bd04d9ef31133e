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
//! MCP servers are native processes, not sandboxed components: every
//! call to their tools still goes through the policy pipeline.

use std::path::Path;

use anyhow::{Context, Result, bail};
use serde_json::Value;

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
