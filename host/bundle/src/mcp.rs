//! MCP servers of a bundle (`.mcp.json`, or `mcpServers` in the manifest):
//! `{"mcpServers": {"NAME": {"command", "args", "env", "cwd"} | {"type":
//! "http", "url", "headers"}}}` (the `mcpServers` wrapper is optional). The
//! bundle root variables are resolved everywhere, a relative `cwd` is
//! relative to the bundle root (Codex's rule; the default `cwd` is the
//! root too), and any other `${NAME}` in `env` or `headers` becomes Wharf's
//! `${env:NAME}` (read from the host's environment when the server
//! starts). SSE servers and `${NAME}` elsewhere are issues.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::{BundleError, resolve_root};

/// Longest MCP server name Wharf takes (its tools are `mcp__NAME__TOOL`).
pub const SERVER_NAME_MAX_LEN: usize = 32;

/// One MCP server a bundle declares.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct McpDecl {
    /// Wharf's name for it: `BUNDLE-SERVER` (sanitised, at most
    /// [`SERVER_NAME_MAX_LEN`]).
    pub name: String,
    /// Its name in the bundle.
    pub server: String,
    /// Program of a stdio server.
    pub command: Option<String>,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its extra environment.
    pub env: BTreeMap<String, String>,
    /// Its working directory.
    pub cwd: Option<PathBuf>,
    /// Endpoint of an HTTP server.
    pub url: Option<String>,
    /// Its headers.
    pub headers: BTreeMap<String, String>,
}

/// Wharf's name for server `server` of bundle `bundle`.
pub fn server_name(bundle: &str, server: &str) -> String {
    let clean: String = server.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' }).collect();
    let mut name = format!("{bundle}-{clean}");
    while name.contains("__") {
        name = name.replace("__", "_");
    }
    if name.len() > SERVER_NAME_MAX_LEN {
        name.truncate(SERVER_NAME_MAX_LEN);
    }
    name
}

/// `${NAME}` (not a root variable) → `${env:NAME}`; `None` when the text
/// holds a reference Wharf cannot take (`${NAME:-default}`).
fn env_refs(text: &str) -> Option<String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let end = after.find('}')?;
        let name = &after[..end];
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return None;
        }
        out.push_str("${env:");
        out.push_str(name);
        out.push('}');
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Some(out)
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

/// Reads the servers of one `.mcp.json` value into `out`.
pub(crate) fn parse(
    v: &Value,
    file: &Path,
    root: &Path,
    bundle: &str,
    out: &mut Vec<McpDecl>,
    issues: &mut Vec<String>,
) -> Result<(), BundleError> {
    let shown = file.strip_prefix(root).unwrap_or(file).display().to_string();
    let servers = v.get("mcpServers").unwrap_or(v);
    let Some(servers) = servers.as_object() else {
        return Err(BundleError::invalid(file, "`mcpServers` must be an object of servers"));
    };
    for (server, s) in servers {
        let r = |t: &str| resolve_root(t, root);
        let kind =
            s.get("type").and_then(Value::as_str).unwrap_or(if s.get("url").is_some() { "http" } else { "stdio" });
        let mut decl = McpDecl {
            name: server_name(bundle, server),
            server: server.clone(),
            command: None,
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
            url: None,
            headers: BTreeMap::new(),
        };
        let mut bad = Vec::new();
        let mut map = |key: &str, dst: &mut BTreeMap<String, String>| {
            if let Some(m) = s.get(key).and_then(Value::as_object) {
                for (k, val) in m {
                    match val.as_str().map(r).and_then(|t| env_refs(&t)) {
                        Some(t) => {
                            dst.insert(k.clone(), t);
                        }
                        None => bad.push(format!("{key}.{k}")),
                    }
                }
            }
        };
        match kind {
            "stdio" => {
                let Some(command) = s.get("command").and_then(Value::as_str) else {
                    issues.push(format!("{shown}: MCP server `{server}` has no `command` (not started)"));
                    continue;
                };
                map("env", &mut decl.env);
                decl.command = Some(r(command));
                decl.args = strings(s.get("args")).iter().map(|a| r(a)).collect();
                let cwd = s.get("cwd").and_then(Value::as_str).map(r).unwrap_or_else(|| ".".into());
                decl.cwd = Some(if Path::new(&cwd).is_absolute() { PathBuf::from(cwd) } else { root.join(cwd) });
            }
            "http" | "streamable-http" | "streamableHttp" => {
                let Some(url) = s.get("url").and_then(Value::as_str) else {
                    issues.push(format!("{shown}: MCP server `{server}` has no `url` (not started)"));
                    continue;
                };
                map("headers", &mut decl.headers);
                decl.url = Some(r(url));
            }
            other => {
                issues.push(format!(
                    "{shown}: MCP server `{server}` of type `{other}` is not supported by Wharf (stdio and \
                     streamable HTTP only; not started)"
                ));
                continue;
            }
        }
        let leftover = decl.command.iter().chain(&decl.args).chain(&decl.url).any(|t| t.contains("${"));
        if leftover {
            bad.push("a variable in command, args or url".into());
        }
        if !bad.is_empty() {
            issues.push(format!(
                "{shown}: MCP server `{server}`: {} uses a variable Wharf cannot resolve (not started)",
                bad.join(", ")
            ));
            continue;
        }
        out.push(decl);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn servers_roots_and_env() {
        let root = Path::new("/b");
        let v = json!({"mcpServers": {
            "notes": {"command": "${CLAUDE_PLUGIN_ROOT}/server.py", "args": ["--dir", "${PLUGIN_ROOT}/data"], "env": {"TOKEN": "${MY_TOKEN}"}},
            "remote": {"type": "http", "url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${KEY}"}},
            "old": {"type": "sse", "url": "https://x"},
            "odd": {"command": "x", "env": {"A": "${B:-c}"}}
        }});
        let (mut out, mut issues) = (Vec::new(), Vec::new());
        parse(&v, Path::new("/b/.mcp.json"), root, "demo", &mut out, &mut issues).unwrap();
        assert_eq!(out.len(), 2, "{out:?}");
        let notes = out.iter().find(|d| d.server == "notes").unwrap();
        assert_eq!((notes.name.as_str(), notes.command.as_deref()), ("demo-notes", Some("/b/server.py")));
        assert_eq!(notes.args, ["--dir", "/b/data"]);
        assert_eq!(notes.env["TOKEN"], "${env:MY_TOKEN}");
        assert_eq!(notes.cwd.as_deref(), Some(Path::new("/b/.")));
        let remote = out.iter().find(|d| d.server == "remote").unwrap();
        assert_eq!(remote.headers["Authorization"], "Bearer ${env:KEY}");
        assert_eq!(issues.len(), 2, "{issues:?}");
        assert_eq!(server_name("b", "a__b.c"), "b-a--b-c");
    }
}
