//! `wharf mcp add | list | remove`: `[[mcp]]` rows written into, listed
//! from and removed from the config layers, the way Claude Code and Codex
//! users add servers.
//!
//! - `wharf mcp add NAME -- COMMAND ARGS…` (stdio) or `wharf mcp add NAME
//!   URL` (streamable HTTP: a single `http://` or `https://` argument)
//!   appends a row to the project layer (`WORKSPACE/.wharf/config.toml`) or,
//!   with `--scope user`, to `~/.wharf/config.toml`, keeping the rest of the
//!   file as it was ([`wharf_config::edit`]). A stdio row is **sandboxed**:
//!   nothing is written for it, because confinement is the schema's default
//!   (`--dir`, `--network` and `--pass-env` write its `[mcp.sandbox]`
//!   grants); only `--no-sandbox` writes the opt-out, `unsandboxed = true`.
//!   A name any layer already defines is refused (naming the file and line),
//!   as is an invalid name or row (naming the file). After writing, the
//!   composed config is loaded again: if it does not load, or the row is not
//!   in it, the file is put back as it was and the error says why.
//! - `wharf mcp list` shows the composed rows with the layer file that
//!   defines each and its confinement (`--check` also starts each one, with
//!   `--timeout`, and says whether it answered).
//! - `wharf mcp remove NAME [--scope project|user]` takes the row out of
//!   that layer (without `--scope`: the project layer, else the user layer).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use serde_json::json;
use wharf_cli_common::HostArgs;
use wharf_config::{McpSandbox, McpServer};
use wharf_core::registry::Registry;
use wharf_mcp::McpManager;

/// Which layer file a command edits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Scope {
    /// `WORKSPACE/.wharf/config.toml`.
    Project,
    /// `~/.wharf/config.toml`.
    User,
}

impl Scope {
    fn as_str(self) -> &'static str {
        match self {
            Self::Project => "project",
            Self::User => "user",
        }
    }
}

/// Arguments of `wharf mcp add`.
#[derive(Args, Debug)]
pub struct AddArgs {
    #[allow(missing_docs)] // flattened: the flags document themselves
    #[command(flatten)]
    pub host: HostArgs,
    /// The layer to write: `project` (`.wharf/config.toml` in the
    /// workspace) or `user` (`~/.wharf/config.toml`).
    #[arg(long, value_enum, default_value = "project")]
    pub scope: Scope,
    /// An environment variable of a stdio server, `KEY=VALUE` (VALUE may be
    /// `${env:NAME}`, read from Wharf's environment when it starts; repeatable).
    #[arg(long = "env", short = 'e', value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// An HTTP header of a URL server, `"KEY: VALUE"` (repeatable).
    #[arg(long = "header", short = 'H', value_name = "KEY: VALUE")]
    pub headers: Vec<String>,
    /// A directory the sandboxed server may use, `PATH[:ro|:rw]`
    /// (read-only by default; repeatable).
    #[arg(long = "dir", value_name = "PATH[:ro|:rw]")]
    pub dirs: Vec<String>,
    /// Let the sandboxed server open network connections (any host).
    #[arg(long)]
    pub network: bool,
    /// A host environment variable the sandboxed server gets by name (repeatable).
    #[arg(long = "pass-env", value_name = "NAME")]
    pub pass_env: Vec<String>,
    /// Another host an HTTP server may redirect to, `HOST`, `HOST:PORT` or
    /// `*.DOMAIN` (by default it reaches only its own host; repeatable).
    #[arg(long = "host", value_name = "HOST")]
    pub hosts: Vec<String>,
    /// Run the stdio server WITHOUT the OS sandbox (writes `unsandboxed = true`).
    #[arg(long = "no-sandbox")]
    pub no_sandbox: bool,
    /// Turns wait for this server and fail without it.
    #[arg(long)]
    pub required: bool,
    /// The server's name (its tools are `mcp__NAME__TOOL`).
    pub name: String,
    /// `URL` of a streamable HTTP server, or `-- COMMAND ARGS…` of a stdio one.
    #[arg(required = true, num_args = 1.., trailing_var_arg = true, allow_hyphen_values = true, value_name = "URL | -- COMMAND ARGS")]
    pub target: Vec<String>,
}

/// Arguments of `wharf mcp list`.
#[derive(Args, Debug)]
pub struct ListArgs {
    #[allow(missing_docs)] // flattened: the flags document themselves
    #[command(flatten)]
    pub host: HostArgs,
    /// Also start each server and say whether it answers (exit 1 if one does not).
    #[arg(long)]
    pub check: bool,
    /// How long `--check` waits for each server, in seconds.
    #[arg(long, default_value_t = 10, value_name = "SECS")]
    pub timeout: u64,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `wharf mcp remove`.
#[derive(Args, Debug)]
pub struct RemoveArgs {
    #[allow(missing_docs)] // flattened: the flags document themselves
    #[command(flatten)]
    pub host: HostArgs,
    /// The layer to edit (default: the project layer if it has the row, else
    /// the user layer).
    #[arg(long, value_enum)]
    pub scope: Option<Scope>,
    /// The server's name.
    pub name: String,
}

/// A layer file and how it is shown.
struct Layer {
    scope: Scope,
    path: PathBuf,
    shown: String,
}

fn layer(host: &HostArgs, scope: Scope) -> Result<Layer> {
    let path = match scope {
        Scope::Project => host.workspace()?.join(".wharf").join("config.toml"),
        Scope::User => match wharf_cli_common::args::home() {
            Some(h) => h.join(".wharf").join("config.toml"),
            None => bail!("--scope user needs a home directory (HOME is not set)"),
        },
    };
    let shown = match wharf_cli_common::args::home().and_then(|h| path.strip_prefix(&h).ok().map(Path::to_path_buf)) {
        Some(rest) => format!("~/{}", rest.display()),
        None => path.display().to_string(),
    };
    Ok(Layer { scope, path, shown })
}

/// The file's text; empty when it does not exist yet.
fn read(l: &Layer) -> Result<Option<String>> {
    match std::fs::read_to_string(&l.path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", l.shown)),
    }
}

/// Replaces the file's text at once (a temporary file renamed over it).
fn write(l: &Layer, text: &str) -> Result<()> {
    if let Some(dir) = l.path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let tmp = l.path.with_extension(format!("toml.wharf-{}.tmp", std::process::id()));
    std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &l.path).with_context(|| format!("cannot replace {}", l.shown))
}

/// Puts the file back as it was before an edit.
fn restore(l: &Layer, before: Option<&str>) {
    let put_back = match before {
        Some(text) => write(l, text),
        None => std::fs::remove_file(&l.path).map_err(anyhow::Error::from),
    };
    if let Err(e) = put_back {
        eprintln!("wharf: could not restore {}: {e:#}", l.shown);
    }
}

/// `KEY=VALUE` or `KEY: VALUE`.
fn pair(s: &str, sep: char, what: &str, example: &str) -> Result<(String, String)> {
    match s.split_once(sep) {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.trim_start().to_string())),
        _ => bail!("{what} `{s}`: expected {example}"),
    }
}

/// The row the flags describe.
fn row_of(args: &AddArgs, workspace: &Path, scope: Scope) -> Result<McpServer> {
    let url_first = args.target.first().is_some_and(|t| t.starts_with("http://") || t.starts_with("https://"));
    if url_first && args.target.len() > 1 {
        bail!(
            "`{}` is a URL, then `{}`: options go before the name (`wharf mcp add [OPTIONS] NAME URL`)",
            args.target[0],
            args.target[1]
        );
    }
    let is_url = url_first && args.target.len() == 1;
    let mut row: McpServer = serde_json::from_value(json!({"name": args.name}))?;
    if is_url {
        row.url = Some(args.target[0].clone());
    } else {
        let (command, rest) = args.target.split_first().context("no command after `--`")?;
        row.command = Some(command.clone());
        row.args = rest.to_vec();
    }
    for e in &args.env {
        let (k, v) = pair(e, '=', "--env", "KEY=VALUE")?;
        row.env.insert(k, v);
    }
    for h in &args.headers {
        let (k, v) = pair(h, ':', "--header", "\"KEY: VALUE\"")?;
        row.headers.insert(k, v);
    }
    row.required = args.required;
    row.unsandboxed = args.no_sandbox;
    if args.no_sandbox && (!args.dirs.is_empty() || args.network || !args.pass_env.is_empty()) {
        bail!("--no-sandbox runs the server unconfined: --dir, --network and --pass-env do not apply");
    }
    if !is_url && !args.hosts.is_empty() {
        bail!("--host widens an HTTP server's host allowlist; a stdio server's network is `--network`");
    }
    row.sandbox = McpSandbox {
        dirs: args.dirs.iter().map(|d| dir_spec(d, workspace, scope)).collect::<Result<_>>()?,
        network: args.network,
        env: args.pass_env.clone(),
        hosts: args.hosts.clone(),
    };
    Ok(row)
}

/// A `--dir` as written in the file: absolute (relative paths are taken
/// from the current directory), and under the workspace as
/// `${workspace}/…` in the project layer, so the file can move with it.
fn dir_spec(spec: &str, workspace: &Path, scope: Scope) -> Result<String> {
    let (path, suffix) = match spec.rsplit_once(':') {
        Some((p, s @ ("ro" | "rw"))) => (p, format!(":{s}")),
        _ => (spec, String::new()),
    };
    if path.is_empty() {
        bail!("--dir `{spec}`: expected PATH[:ro|:rw]");
    }
    if path.contains("${") || path.starts_with("~/") {
        return Ok(spec.to_string());
    }
    let abs = std::path::absolute(path).with_context(|| format!("--dir `{spec}`"))?;
    let abs = std::fs::canonicalize(&abs).unwrap_or(abs);
    let shown = match abs.strip_prefix(workspace) {
        Ok(rest) if scope == Scope::Project && rest.as_os_str().is_empty() => "${workspace}".to_string(),
        Ok(rest) if scope == Scope::Project => format!("${{workspace}}/{}", rest.display()),
        _ => abs.display().to_string(),
    };
    Ok(format!("{shown}{suffix}"))
}

/// Where the composed config's row `name` was defined (`FILE:LINE`).
fn defined_at(config: &wharf_config::Config, name: &str) -> Option<String> {
    let key = format!("mcp.{}.name", toml_key(name));
    config.origin(&key).map(wharf_config::Location::short)
}

/// A name as a `-c` key segment (quoted unless bare).
fn toml_key(name: &str) -> String {
    if name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        name.to_string()
    } else {
        format!("\"{name}\"")
    }
}

/// Runs `wharf mcp add`.
pub async fn add(args: AddArgs) -> Result<ExitCode> {
    let l = layer(&args.host, args.scope)?;
    let workspace = args.host.workspace()?;
    let row = row_of(&args, &workspace, args.scope).with_context(|| format!("cannot add `{}`", args.name))?;
    if let Err((_, why)) = row.validate() {
        bail!("cannot add `{}` to {}: {why}", args.name, l.shown);
    }
    // A name any layer defines is refused: a second row would merge into it.
    let config = args
        .host
        .load_config()
        .with_context(|| format!("cannot add `{}`: the current config does not load", args.name))?;
    if let Some(at) = defined_at(&config, &row.name) {
        bail!(
            "cannot add `{}` to {}: an MCP server of that name is already defined at {at} \
             (remove it first: wharf mcp remove {})",
            row.name,
            l.shown,
            row.name
        );
    }
    let before = read(&l)?;
    let text = wharf_config::edit::add_mcp_row(before.as_deref().unwrap_or(""), &row)
        .map_err(|e| anyhow::anyhow!("cannot add `{}` to {}: {e}", row.name, l.shown))?;
    write(&l, &text)?;
    // The composed config must load, with the row in it from this file.
    let check = args.host.load_config().and_then(|c| match defined_at(&c, &row.name) {
        Some(at) if at.starts_with(&format!("{}:", l.shown)) => Ok(c),
        _ => bail!("the row does not appear in the composed config (a layer may disable `{}`)", row.name),
    });
    let config = match check {
        Ok(c) => c,
        Err(e) => {
            restore(&l, before.as_deref());
            return Err(e.context(format!("cannot add `{}` to {} (the file is unchanged)", row.name, l.shown)));
        }
    };
    let added = config.mcp.iter().find(|r| r.name == row.name).unwrap_or(&row);
    let kind = if added.is_http() { "HTTP" } else { "stdio" };
    println!("Added {kind} MCP server `{}` to {} ({} layer).", row.name, l.shown, l.scope.as_str());
    let (_, how) = wharf_mcp::config::describe(added, &workspace);
    println!("  {how}");
    println!("  Its tools are mcp__{}__*; check it with `wharf mcp list --check`.", row.name);
    Ok(ExitCode::SUCCESS)
}

/// Runs `wharf mcp remove`.
pub async fn remove(args: RemoveArgs) -> Result<ExitCode> {
    let scopes = match args.scope {
        Some(s) => vec![s],
        None => vec![Scope::Project, Scope::User],
    };
    let mut looked = Vec::new();
    for scope in scopes {
        let l = match layer(&args.host, scope) {
            Ok(l) => l,
            Err(e) if args.scope.is_none() => {
                tracing::debug!("skipping the {} layer: {e:#}", scope.as_str());
                continue;
            }
            Err(e) => return Err(e),
        };
        let Some(before) = read(&l)? else {
            looked.push(l.shown);
            continue;
        };
        let edited = wharf_config::edit::remove_mcp_row(&before, &args.name)
            .map_err(|e| anyhow::anyhow!("cannot remove `{}` from {}: {e}", args.name, l.shown))?;
        let Some(text) = edited else {
            looked.push(l.shown);
            continue;
        };
        write(&l, &text)?;
        if let Err(e) = args.host.load_config() {
            restore(&l, Some(&before));
            return Err(e.context(format!("cannot remove `{}` from {} (the file is unchanged)", args.name, l.shown)));
        }
        println!("Removed MCP server `{}` from {} ({} layer).", args.name, l.shown, scope.as_str());
        return Ok(ExitCode::SUCCESS);
    }
    let elsewhere = args.host.load_config().ok().and_then(|c| defined_at(&c, &args.name));
    match elsewhere {
        Some(at) => bail!(
            "no MCP server named `{}` in {}; it is defined at {at}, which `wharf mcp remove` does not edit",
            args.name,
            looked.join(" or ")
        ),
        None => bail!("no MCP server named `{}` in {}", args.name, looked.join(" or ")),
    }
}

/// Runs `wharf mcp list`.
pub async fn list(args: ListArgs) -> Result<ExitCode> {
    let workspace = args.host.workspace()?;
    let config = args.host.load_config()?;
    let rows = config.mcp.clone();
    let statuses = if args.check && !rows.is_empty() {
        let limit = args.timeout.max(1).saturating_mul(1000);
        let timed: Vec<McpServer> = rows
            .iter()
            .cloned()
            .map(|mut r| {
                r.startup_timeout_ms = Some(r.startup_timeout_ms.map_or(limit, |t| t.min(limit)));
                r
            })
            .collect();
        let manager = McpManager::start(Arc::new(Registry::new()), timed, &workspace);
        manager.wait_all().await;
        let s = manager.status();
        manager.stop().await;
        Some(s)
    } else {
        None
    };
    let mut all_ok = true;
    let mut out = Vec::new();
    for r in &rows {
        let (startable, how) = wharf_mcp::config::describe(r, &workspace);
        let status = statuses.as_ref().and_then(|s| s.iter().find(|s| s.server == r.name));
        if status.is_some_and(|s| !s.is_ready()) {
            all_ok = false;
        }
        let target = match (&r.url, &r.command) {
            (Some(u), _) => u.clone(),
            (None, Some(c)) => {
                std::iter::once(c.as_str()).chain(r.args.iter().map(String::as_str)).collect::<Vec<_>>().join(" ")
            }
            (None, None) => String::new(),
        };
        out.push(json!({
            "name": r.name,
            "transport": if r.is_http() { "http" } else { "stdio" },
            "target": target,
            "layer": defined_at(&config, &r.name),
            "sandboxed": !r.is_http() && !r.unsandboxed,
            "confinement": how,
            "startable": startable,
            "required": r.required,
            "check": status.map(|s| json!({"state": s.state, "error": s.error, "tools": s.tools.as_ref().map(Vec::len)})),
        }));
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json!({"servers": out}))?);
    } else if out.is_empty() {
        println!("No MCP servers configured. Add one: wharf mcp add NAME -- COMMAND ARGS… (or NAME URL)");
    } else {
        for s in &out {
            let str_of = |k: &str| s[k].as_str().unwrap_or("").to_string();
            println!("{} ({}): {}", str_of("name"), str_of("transport"), str_of("target"));
            println!("  defined at {}", s["layer"].as_str().unwrap_or("-c"));
            println!("  {}", str_of("confinement"));
            if let Some(c) = s["check"].as_object() {
                let state = c.get("state").and_then(|v| v.as_str()).unwrap_or("");
                match (c.get("error").and_then(|v| v.as_str()), c.get("tools").and_then(|v| v.as_u64())) {
                    (Some(e), _) => println!("  check: {state}: {e}"),
                    (None, Some(n)) => println!("  check: {state}, {n} tools"),
                    (None, None) => println!("  check: {state}"),
                }
            }
        }
    }
    Ok(if all_ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
