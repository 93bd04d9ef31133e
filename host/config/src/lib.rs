//! Wharf configuration: layered TOML profiles, composed with provenance.
//!
//! A **profile** is TOML with optional `[agent]`, `[session]` and `[engine]`
//! tables (every key has a default) and `[[plugin]]` rows:
//!
//! ```toml
//! [agent]
//! adapter = "deepseek"       # plugin id of the model adapter (default: unset, the host picks)
//! max_steps = 50
//!
//! [[plugin]]
//! id = "fs"                        # stable id, [a-z0-9_-]+
//! path = "${plugin_dir}/fs.wasm"   # component file
//! [plugin.grant]
//! dirs = ["${workspace}:rw"]       # PATH[:ro|:rw], read-only without a suffix
//! ```
//!
//! and `[[mcp]]` rows, MCP servers whose tools the agent gets as
//! `mcp__NAME__TOOL`:
//!
//! ```toml
//! [[mcp]]
//! name = "files"                   # [a-zA-Z0-9_-]+ without `__`, unique
//! command = "my-mcp-server"        # stdio: command, args, env, cwd
//! args = ["--root", "${workspace}"]
//! env = { LOG = "1", TOKEN = "${env:FILES_TOKEN}" }
//! required = true                  # the first turn waits; failing fails it
//! startup_timeout_ms = 10000
//! tool_timeout_ms = 60000
//!
//! [[mcp]]
//! name = "search"
//! url = "https://mcp.example.com/mcp"   # streamable HTTP: url, headers
//! headers = { Authorization = "Bearer ${env:SEARCH_TOKEN}" }
//! ```
//!
//! Unknown keys anywhere (outside a plugin's free-form `config`) are errors.
//!
//! # Layers
//!
//! Later layers win:
//!
//! 1. built-in defaults (shown as `default` in [`Config::dump`]);
//! 2. the shipped profile, by name ([`shipped_profiles`], embedded from
//!    `profiles/NAME.toml`), or a path to a `.toml` file, over the profiles
//!    it extends (see [Extending a profile](#extending-a-profile));
//! 3. the user file `~/.wharf/config.toml` (skipped if missing, or if no home
//!    directory is known);
//! 4. the project file `.wharf/config.toml` in the workspace (skipped if
//!    missing);
//! 5. each `--patch FILE`, in order (required: a missing patch is an error);
//! 6. each `-c key=value`, in order.
//!
//! A layer file that exists but cannot be read, parsed or validated is an
//! error. [`load`] returns either the whole composed, validated [`Config`] or
//! an error: never a partial config.
//!
//! # Merge rules
//!
//! - **Tables deep-merge** key by key (`[agent]` in a patch changes only
//!   the keys it sets).
//! - **Scalars and arrays are replaced** whole (a patch's `dirs = [...]`
//!   replaces the list; it does not append).
//! - **`[[plugin]]` rows merge by `id`.** A row whose id already exists
//!   replaces, *wholesale*, each top-level key it sets (`path`, `config`,
//!   `grant`, `enabled`, `warm`) and keeps the keys it does not set. So a
//!   patch row's `config` replaces that row's whole `config` table, and its
//!   `grant` replaces the whole `grant` table. A row with a new id is appended.
//!   Within one layer an id may appear only once.
//! - **`[[mcp]]` rows merge by `name`** the same way (`enabled = false`
//!   drops one; `-c mcp.NAME.KEY=VALUE` sets a key). After merging, each
//!   kept row must set exactly one of `command` (stdio) and `url` (HTTP),
//!   and only the keys of its transport.
//! - **`enabled = false`** drops the row from the composed result. The row
//!   is kept while layers merge, so a later layer (or `-c
//!   plugin.ID.enabled=true`) can enable it again with its earlier keys.
//! - **`-c KEY=VALUE`** sets one key: `KEY` is a dotted TOML key
//!   (`agent.max_steps`, `plugin.fs.grant.memory_mb`, quoted segments
//!   allowed), plugin rows are addressed by id (`plugin.ID.…`), and `VALUE`
//!   is parsed as a TOML value (`5`, `true`, `"x"`, `["a","b"]`, `{a = 1}`)
//!   or, if it is not one, taken as a plain string. Setting a row's
//!   top-level key (`plugin.fs.config={...}`) replaces it as a row would;
//!   deeper keys (`plugin.fs.config.model="x"`) set just that key, creating
//!   tables inside `config` as needed; a table value for any other key
//!   deep-merges. A `-c` that names an unknown key or a plugin id that no
//!   layer defined is an error; rows cannot be added with `-c`.
//!
//! After merging, every enabled row must have a `path` or a `source`, and
//! `agent.adapter` (if set) must name an enabled row.
//!
//! # Extending a profile
//!
//! A profile may hold only what differs from another one: a top-level
//! `extends = "NAME"` names a shipped profile, `extends = "PATH.toml"` (or
//! any value with a `/`) a file, relative to the extending file (variables
//! and `~/` allowed; a shipped profile extends only shipped ones). The
//! named profile is read first and the extending one merged over it by the
//! rules above, as a later layer is: its `[agent]` keys replace inherited
//! ones; a row with an inherited id replaces the keys it sets (its `config`
//! or `grant` whole) and keeps its place; a row with a new id is appended
//! after the inherited rows; `enabled = false` drops an inherited row.
//! Chains are allowed (A extends B extends `default`), up to
//! [`MAX_PROFILE_CHAIN`] files; a cycle, a longer chain or an unknown name
//! is an error that names the files (or lists the shipped names). Each file
//! is checked on its own, so `${profile_dir}` and relative paths follow the
//! file that holds them. The chain is one layer, the profile (layer 0 of
//! [`Config::row_layer`]). `extends` is for profiles only: a user, project
//! or patch file already merges over the profile, and `extends` there (or
//! in `-c`) is an error.
//!
//! # Components from OCI registries
//!
//! A row may take its component from a registry instead of a file:
//! `source = "oci://HOST/REPO:TAG"` (or `…@sha256:…`), `digest =
//! "sha256:…"` (the pinned manifest digest; `wharf plugin lock` writes
//! it) and `verify = { key = "PATH.pub" }` (a cosign signature must verify
//! with this PEM public key). A top-level `[verify]` table with a `key`
//! applies to every row with a `source` and no `verify` of its own. When
//! `source` is set, `path` is not used. `digest` and `verify` need a
//! `source`.
//!
//! # Strings
//!
//! Every string may use `${workspace}`, `${repo_root}` (the nearest ancestor
//! of the workspace, or the workspace itself, holding `.git`; else the
//! workspace), `${plugin_dir}`, `${home}` and `${profile_dir}` (the
//! directory of the file that holds the string; it has
//! no value in embedded profiles and `-c`); `$${` is a literal `${`; any
//! other `${name}` is an error. The values of an `[[mcp]]` row's `env` and
//! `headers` tables may also use `${env:NAME}`: it is kept as written and
//! resolved from the host's environment when the server starts (see
//! [`resolve_env`]), so secrets never enter the composed config; dumps show
//! those values as `"<redacted>"` anyway. Path keys (`plugin.path`, `grant.dirs`,
//! `session.dir`, `engine.cache_dir`, `mcp.cwd`) also expand a leading `~/` to the home
//! directory and resolve a relative path against the directory of the file
//! that set it (the workspace for embedded profiles, defaults and `-c`).
//! `grant.dirs` entries are normalized to `ABSOLUTE_PATH:ro` or `:rw`.
//!
//! # Provenance
//!
//! Each leaf of the composed config (a scalar or an array) remembers the
//! file (layer) that set it: [`Config::provenance`], [`Config::dump`],
//! [`Config::dump_json`]. A value of a profile that was reached through
//! `extends` also names the profiles it came through, from the one asked
//! for ([`Location::via`]).
//!
//! ```text
//! [agent]
//! max_steps = 80  # from ~/.wharf/config.toml:2
//! ...
//! [[plugin]]
//! id = "fs"  # from shipped:profiles/default.toml:18 (via code)
//! [plugin.grant]
//! memory_mb = 512  # from -c plugin.fs.grant.memory_mb=512
//! ```

// `ConfigError` carries a located, self-explaining message (file, line,
// column, key, table, allowed keys). It is only built on the cold path of a
// failed load, so its size does not matter; boxing it would only make the
// public API clumsier to match on.
#![allow(clippy::result_large_err)]

mod dump;
pub mod edit;
mod error;
mod merge;
mod overrides;
mod profiles;
mod schema;
mod tree;
mod vars;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use crate::error::{ConfigError, Location};
pub use crate::profiles::MAX_PROFILE_CHAIN;
pub use crate::schema::{
    BYTES_LIMIT, ID_MAX_LEN, MAX_STEPS_LIMIT, MAX_TOOLS_PER_PLUGIN_LIMIT, MCP_NAME_MAX_LEN, MEMORY_MB_LIMIT,
    TIMEOUT_MS_LIMIT, TOOL_POOL_LIMIT,
};
pub use crate::vars::{VARIABLES, VarError, Vars, resolve_env};

use crate::schema::{AGENT, Ctx, ENGINE, Field, GRANT, MCP, ROOT, ROW, SESSION, TOP, check_table};
use crate::tree::{Entry, Node, SourceText, Table, Val};

/// Default `agent.max_steps`.
pub const DEFAULT_MAX_STEPS: u32 = 50;
/// Default `agent.tool_pool`.
pub const DEFAULT_TOOL_POOL: u32 = 10;
/// Default `agent.tool_output_limit`, bytes.
pub const DEFAULT_TOOL_OUTPUT_LIMIT: usize = 32 * 1024;
/// Default `agent.system_prompt`.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are Wharf, a careful software agent working in the user's \
workspace. Use the tools you are given to inspect and change files; read before you edit, keep \
changes small and focused, and finish with a short summary of what you did.";

/// The shipped profiles: `(name, TOML text)`. A text that `extends`
/// another shipped profile holds only what differs from it; [`load`]
/// composes the whole profile.
pub fn shipped_profiles() -> &'static [(&'static str, &'static str)] {
    profiles::SHIPPED
}

/// What to load.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// A shipped profile name (see [`shipped_profiles`]) or a path to a
    /// `.toml` file (anything ending in `.toml` or containing a `/`).
    pub profile: String,
    /// The session workspace: `${workspace}`, and where `.wharf/config.toml`
    /// is looked for.
    pub workspace: PathBuf,
    /// The home directory: `${home}`, `~/`, and where `.wharf/config.toml`
    /// (the user layer) is looked for. `None` skips the user layer.
    pub home: Option<PathBuf>,
    /// Where the built components are: `${plugin_dir}`.
    pub plugin_dir: PathBuf,
    /// `--patch FILE` layers, in order.
    pub patches: Vec<PathBuf>,
    /// `-c key=value` overrides, in order.
    pub overrides: Vec<String>,
}

/// How a headless run resolves an `ask` decision.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AskRule {
    /// Deny (the default).
    #[default]
    Deny,
    /// Allow.
    Allow,
}

/// Whether a plugin's `process` capability must run under the OS sandbox.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Sandbox {
    /// The process sandbox must be available (the default).
    #[default]
    Required,
    /// Run processes without the sandbox.
    Off,
}

/// `[agent]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// Plugin id of the model adapter; `None` lets the host pick the first
    /// LLM plugin.
    #[serde(default)]
    pub adapter: Option<String>,
    /// Step budget per turn.
    pub max_steps: u32,
    /// Parallel tool calls per step.
    pub tool_pool: u32,
    /// The base system-prompt section.
    pub system_prompt: String,
    /// How headless runs resolve `ask` decisions.
    pub ask: AskRule,
    /// Bytes of tool output shown to the model before truncation.
    pub tool_output_limit: usize,
    /// Compact the history automatically when a compactor plugin is loaded.
    #[serde(default = "default_true")]
    pub compaction: bool,
    /// Percent of the context window that triggers compaction.
    #[serde(default = "default_compact_at")]
    pub compact_at_percent: u32,
    /// Context window for compaction, tokens (`None`: the adapter's).
    #[serde(default)]
    pub context_window: Option<u32>,
    /// Deepest subagent nesting.
    #[serde(default = "default_subagent_depth")]
    pub max_subagent_depth: u32,
    /// With a tool that calls tools loaded (`run_code`), most bytes of tool
    /// specs offered to the model directly; the other tools are found from
    /// a program (`tools.search`). `wharf_core::catalog`.
    #[serde(default = "default_tool_list_budget")]
    pub tool_list_budget: usize,
    /// Rows (plugin ids; an MCP server is `mcp:NAME`) whose tools are only
    /// in a program's catalogue, never offered directly, while a tool that
    /// calls tools can reach them.
    #[serde(default)]
    pub lazy_rows: Vec<String>,
}

/// Default `agent.tool_list_budget`, bytes (about 6 000 tokens).
pub const DEFAULT_TOOL_LIST_BUDGET: usize = 24 << 10;

fn default_tool_list_budget() -> usize {
    DEFAULT_TOOL_LIST_BUDGET
}

fn default_true() -> bool {
    true
}

/// Default `agent.compact_at_percent`.
pub const DEFAULT_COMPACT_AT_PERCENT: u32 = 80;
/// Default `agent.max_subagent_depth`.
pub const DEFAULT_SUBAGENT_DEPTH: u32 = 3;

fn default_compact_at() -> u32 {
    DEFAULT_COMPACT_AT_PERCENT
}

fn default_subagent_depth() -> u32 {
    DEFAULT_SUBAGENT_DEPTH
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            adapter: None,
            max_steps: DEFAULT_MAX_STEPS,
            tool_pool: DEFAULT_TOOL_POOL,
            system_prompt: DEFAULT_SYSTEM_PROMPT.to_string(),
            ask: AskRule::Deny,
            tool_output_limit: DEFAULT_TOOL_OUTPUT_LIMIT,
            compaction: true,
            compact_at_percent: DEFAULT_COMPACT_AT_PERCENT,
            context_window: None,
            max_subagent_depth: DEFAULT_SUBAGENT_DEPTH,
            tool_list_budget: DEFAULT_TOOL_LIST_BUDGET,
            lazy_rows: Vec::new(),
        }
    }
}

/// `[session]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionConfig {
    /// Where session logs live (default `~/.wharf/sessions`, or
    /// `WORKSPACE/.wharf/sessions` without a home directory).
    pub dir: PathBuf,
    /// Another session store instead of the JSONL files in `dir`:
    /// `postgres://USER@HOST:PORT/DB` (the `wharf-store-pg` backend).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<String>,
}

/// `[engine]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineConfig {
    /// Use the pooling allocator where the machine allows it.
    pub pooling: bool,
    /// The compiled-component cache (default `~/.cache/wharf/components`, or
    /// `WORKSPACE/.wharf/cache/components` without a home directory).
    pub cache_dir: PathBuf,
    /// Most tools one plugin may register; a component with more is
    /// refused at load (`None`: the runtime's default, 10,000). Read at
    /// start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tools_per_plugin: Option<usize>,
}

/// What the operator grants one plugin: the runtime's `Grant` as plain data
/// (the CLI turns `dirs` into `DirGrant`s).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantConfig {
    /// Directories as `ABSOLUTE_PATH:ro` or `ABSOLUTE_PATH:rw` (expanded).
    #[serde(default)]
    pub dirs: Vec<String>,
    /// Outbound HTTP host patterns.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Environment variables passed by name.
    #[serde(default)]
    pub env: Vec<String>,
    /// The `process` capability.
    #[serde(default)]
    pub process: bool,
    /// Memory limit per instance, MiB (`None`: the runtime default).
    #[serde(default)]
    pub memory_mb: Option<u32>,
    /// Wall-clock limit per call, ms (`None`: the runtime default).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// A tool call still running after this many ms answers with its
    /// output so far and goes on as a cell of the session (`None`: calls
    /// run to their end). The call's deadline stays `timeout_ms`.
    #[serde(default)]
    pub yield_ms: Option<u64>,
    /// A call interrupted by a crash is re-run when its session reopens,
    /// its inner calls answered from the log (durable Code Mode programs).
    #[serde(default)]
    pub durable: bool,
    /// Cap on a call's output, bytes (`None`: the runtime default).
    #[serde(default)]
    pub output_limit_bytes: Option<usize>,
    /// Whether processes must run under the OS sandbox.
    #[serde(default)]
    pub sandbox: Sandbox,
    /// Outbound HTTP may reach private, loopback and link-local addresses.
    #[serde(default)]
    pub private_network: bool,
    /// The `model` import (one-shot requests to the session's model).
    #[serde(default)]
    pub model: bool,
    /// The `agents` import (child agents).
    #[serde(default)]
    pub agents: bool,
    /// The `questions` import (a tool call asks the session's user).
    #[serde(default)]
    pub questions: bool,
    /// The `tools` import: `true` for every tool of the session, or the
    /// names of the tools the plugin may call.
    #[serde(default)]
    pub tools: ToolsConfig,
}

/// `grant.tools`: `true`/`false` or a list of tool names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ToolsConfig {
    /// Every tool (`true`) or none (`false`).
    All(bool),
    /// Only these tools.
    Only(Vec<String>),
}

impl Default for ToolsConfig {
    fn default() -> Self {
        Self::All(false)
    }
}

/// One enabled `[[plugin]]` row of the composed config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginRow {
    /// Stable id, `[a-z0-9_-]+`.
    pub id: String,
    /// The component file (expanded, absolute). Not used when `source` is
    /// set (empty when the row sets no `path`): the host resolves the
    /// component from the OCI store.
    #[serde(default)]
    pub path: PathBuf,
    /// `oci://HOST/REPO:TAG` or `oci://HOST/REPO@sha256:…`: the component
    /// comes from an OCI registry through the local store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The pinned manifest digest (`sha256:…`) of `source`: any other bytes
    /// are refused (`wharf plugin lock` writes it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// The key a cosign signature of the component must verify with
    /// (overrides the profile-wide `[verify]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<VerifyConfig>,
    /// The plugin's own configuration, given to the component as JSON
    /// (an object; empty if none).
    #[serde(default)]
    pub config: serde_json::Value,
    /// What the operator grants it.
    #[serde(default)]
    pub grant: GrantConfig,
    /// Reuse instances between calls.
    #[serde(default)]
    pub warm: bool,
    /// What a policy row does while a new config of it cannot be applied
    /// (refused by the component, or the component fails to load):
    /// `"deny"` (the default) denies every call until it can, `"keep"`
    /// keeps the last good config deciding. Either way the refusal is
    /// logged (`plugin/reload-failed`).
    #[serde(default, skip_serializing_if = "is_default")]
    pub on_invalid_config: OnInvalidConfig,
    /// A dev build of `wharf plugin dev`: `path` is the dev component
    /// (`PROJECT/target/dev/NAME.wasm`) and the directory beside it with the
    /// same stem (`NAME.src`), when there is one, the plugin's source, read
    /// by the component at each load (Python, JavaScript). Each save is
    /// picked up by hot reload; `doctor` and `config dump` mark the row.
    #[serde(default, skip_serializing_if = "is_default")]
    pub dev: bool,
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// A row's `on_invalid_config`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnInvalidConfig {
    /// Fail closed: every call is denied until the latest config applies.
    #[default]
    Deny,
    /// The last good config keeps deciding.
    Keep,
}

/// `verify = { key = "PATH.pub" }` of a row, or the profile-wide `[verify]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyConfig {
    /// A PEM (SPKI) ECDSA P-256 public key (expanded, absolute).
    pub key: PathBuf,
}

/// One `[[mcp]]` row: an MCP server whose tools the agent gets as
/// `mcp__NAME__TOOL`. Exactly one of `command` (stdio) and `url`
/// (streamable HTTP) is set. `env` and `headers` values may hold
/// `${env:NAME}` references, kept as written: resolve them with
/// [`resolve_env`] when the server starts.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServer {
    /// Server name, `[a-zA-Z0-9_-]+` without `__`.
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
    /// The first turn waits for this server, and fails if it cannot connect.
    #[serde(default)]
    pub required: bool,
    /// Time to connect and list tools, ms (`None`: the host's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_timeout_ms: Option<u64>,
    /// Deadline of one tool call, ms (`None`: none beyond the pipeline's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_timeout_ms: Option<u64>,
    /// `false` drops the row (always `true` in a composed [`Config`]).
    #[serde(default = "enabled_default")]
    pub enabled: bool,
    /// What a stdio server may do inside its OS sandbox (`[mcp.sandbox]`);
    /// nothing beyond reading by default.
    #[serde(default, skip_serializing_if = "McpSandbox::is_empty")]
    pub sandbox: McpSandbox,
    /// Start the stdio server without the OS sandbox (an explicit opt-out).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unsandboxed: bool,
}

/// The grants of a sandboxed stdio MCP server (`[mcp.sandbox]` of a row),
/// and an HTTP server's host allowlist. Deny by default: no writes outside
/// a private tmp directory, no network, no host environment variables
/// beyond the basic ones; an HTTP server reaches only its own host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpSandbox {
    /// Directories, `PATH[:ro|:rw][?]` like a plugin grant's (`:ro` by
    /// default; a relative path is relative to the workspace).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dirs: Vec<String>,
    /// TCP and UDP to any host (the kernel cannot filter by host).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub network: bool,
    /// Host environment variables passed through by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// An HTTP (`url`) server's host allowlist beyond the URL's own host
    /// and port: hosts a redirect may lead to (`name`, `name:port`,
    /// `*.suffix`; the request's headers go along). Empty: the server's
    /// own host only; a redirect elsewhere is refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
}

impl McpSandbox {
    /// No grant at all.
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

fn enabled_default() -> bool {
    true
}

// Secrets stay out of debug output.
impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys = |m: &BTreeMap<String, String>| m.keys().cloned().collect::<Vec<_>>();
        f.debug_struct("McpServer")
            .field("name", &self.name)
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env_keys", &keys(&self.env))
            .field("cwd", &self.cwd)
            .field("url", &self.url)
            .field("header_keys", &keys(&self.headers))
            .field("required", &self.required)
            .field("startup_timeout_ms", &self.startup_timeout_ms)
            .field("tool_timeout_ms", &self.tool_timeout_ms)
            .field("enabled", &self.enabled)
            .field("sandbox", &self.sandbox)
            .field("unsandboxed", &self.unsandboxed)
            .finish()
    }
}

impl McpServer {
    /// Whether the server is reached over streamable HTTP (else stdio).
    pub fn is_http(&self) -> bool {
        self.url.is_some()
    }

    /// Checks what one row needs on its own (after layers merged): the
    /// name, exactly one transport, and keys that fit it. On error, the key
    /// at fault and the message.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        let n = &self.name;
        if !schema::valid_mcp_name(n) {
            return Err((
                "name",
                format!(
                    "bad MCP server name \"{n}\": use 1 to {MCP_NAME_MAX_LEN} of A-Z, a-z, 0-9, `_` and `-`, \
                     without `__`"
                ),
            ));
        }
        match (&self.command, &self.url) {
            (Some(_), Some(_)) => {
                return Err(("url", format!("MCP server `{n}`: set `command` (stdio) or `url` (HTTP), not both")));
            }
            (None, None) => {
                return Err(("name", format!("MCP server `{n}`: set `command` (stdio) or `url` (streamable HTTP)")));
            }
            (Some(c), None) if c.trim().is_empty() => {
                return Err(("command", format!("MCP server `{n}`: `command` is empty")));
            }
            (None, Some(u)) if !(u.starts_with("http://") || u.starts_with("https://")) => {
                return Err((
                    "url",
                    format!("MCP server `{n}`: `url` must start with http:// or https://, found \"{u}\""),
                ));
            }
            _ => {}
        }
        if self.url.is_some() {
            for (key, set) in [
                ("args", !self.args.is_empty()),
                ("env", !self.env.is_empty()),
                ("cwd", self.cwd.is_some()),
                // An HTTP server's only sandbox key is its host allowlist.
                ("sandbox", !McpSandbox { hosts: Vec::new(), ..self.sandbox.clone() }.is_empty()),
                ("unsandboxed", self.unsandboxed),
            ] {
                if set {
                    return Err((key, format!("MCP server `{n}`: `{key}` applies to stdio servers (`command`) only")));
                }
            }
        } else if !self.headers.is_empty() {
            return Err(("headers", format!("MCP server `{n}`: `headers` apply to HTTP servers (`url`) only")));
        } else if !self.sandbox.hosts.is_empty() {
            return Err((
                "sandbox",
                format!(
                    "MCP server `{n}`: `sandbox.hosts` is an HTTP server's (`url`) host allowlist; a stdio server's \
                     network is `sandbox.network`"
                ),
            ));
        }
        Ok(())
    }
}

/// One `[[bundle]]` row: a Claude Code / Codex plugin bundle whose skills,
/// commands, hooks and MCP servers the host loads (`wharf-bundle`,
/// `wharf plugin add`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleRow {
    /// The bundle's name.
    pub name: String,
    /// Its directory.
    pub path: PathBuf,
    /// The content digest it was pinned at (`sha256:…`): a bundle whose
    /// content differs does not load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// `false` drops the row (always `true` in a composed [`Config`]).
    #[serde(default = "enabled_default")]
    pub enabled: bool,
    /// What its hooks and MCP servers may do beyond reading.
    #[serde(default)]
    pub sandbox: BundleSandbox,
}

/// `[bundle.sandbox]`: the grants of a bundle's hook processes and stdio
/// MCP servers (read-only, no network, no host variables by default) and
/// the hosts its HTTP MCP servers may be.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleSandbox {
    /// Directories, `PATH[:ro|:rw][?]` (`:ro` by default).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dirs: Vec<String>,
    /// TCP and UDP to any host.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub network: bool,
    /// Host environment variables passed through by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Hosts the bundle's HTTP MCP servers may be (`*` any; none by default).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
}

/// The composed, validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `[agent]`.
    pub agent: AgentConfig,
    /// `[session]`.
    pub session: SessionConfig,
    /// `[engine]`.
    pub engine: EngineConfig,
    /// `[verify]`: the key for every row with a `source` that has no
    /// `verify` of its own.
    pub verify: Option<VerifyConfig>,
    /// Enabled plugin rows, in order of first definition.
    pub plugins: Vec<PluginRow>,
    /// Enabled `[[mcp]]` rows, in order of first definition.
    pub mcp: Vec<McpServer>,
    /// Enabled `[[bundle]]` rows, in order of first definition.
    pub bundles: Vec<BundleRow>,
    /// The layer files that were read, in layer order (for hot reload).
    pub sources: Vec<PathBuf>,
    /// Every layer file that was consulted, read or missing (a missing
    /// optional file that appears later should trigger a reload too).
    pub watch: Vec<PathBuf>,
    composed: Table,
    provenance: Vec<(String, Location)>,
    /// The files of each layer read, as shown in locations, in layer order
    /// (the profile and the profiles it extends first).
    layers: Vec<Vec<String>>,
}

impl Config {
    /// The enabled plugin row with this id.
    pub fn plugin(&self, id: &str) -> Option<&PluginRow> {
        self.plugins.iter().find(|p| p.id == id)
    }

    /// Where each leaf came from, keyed like `-c` keys (`agent.max_steps`,
    /// `plugin.fs.grant.dirs`), in dump order.
    pub fn provenance(&self) -> &[(String, Location)] {
        &self.provenance
    }

    /// Where the leaf at `key` (a `-c`-style dotted key) came from.
    pub fn origin(&self, key: &str) -> Option<&Location> {
        self.provenance.iter().find(|(k, _)| k == key).map(|(_, l)| l)
    }

    /// The layer that defined plugin row `id` (its `id` key, which later
    /// layers never replace): 0 for the profile (any file of its `extends`
    /// chain), then the user, project and patch files that were read, in
    /// order; a row a `-c` override made comes after all of them. `None`:
    /// no such row.
    pub fn row_layer(&self, id: &str) -> Option<usize> {
        let at = self.origin(&format!("plugin.{}.id", tree::toml_key(id)))?;
        Some(self.layers.iter().position(|l| l.contains(&at.source)).unwrap_or(self.layers.len()))
    }

    /// The composed config as TOML, each leaf followed by
    /// `# from LAYER:LINE` (`# from -c KEY=VALUE`, `# from default`; a
    /// value of an extended profile adds ` (via PROFILE > …)`). The
    /// text parses as TOML. Disabled rows are not shown; MCP `env` and
    /// `headers` values are shown as `"<redacted>"`.
    pub fn dump(&self) -> String {
        dump::render(&dump::redacted(&self.composed))
    }

    /// The same as [`Config::dump`] (secrets redacted too) as JSON: `{"config": {...composed values,
    /// "plugin": [rows]...}, "provenance": {"agent.max_steps": {"source":
    /// "...", "line": 3, "column": 13, "via": ["code"]}, ...}, "sources":
    /// [...]}` (`via` only for a value of an extended profile).
    pub fn dump_json(&self) -> serde_json::Value {
        let provenance: serde_json::Map<String, serde_json::Value> = self
            .provenance
            .iter()
            .map(|(k, l)| (k.clone(), serde_json::to_value(l).unwrap_or(serde_json::Value::Null)))
            .collect();
        serde_json::json!({
            "config": dump::redacted(&self.composed).to_json(),
            "provenance": provenance,
            "sources": self.sources.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        })
    }
}

/// Loads and composes every layer named by `opts`; see the crate docs.
pub fn load(opts: &LoadOptions) -> Result<Config, ConfigError> {
    let workspace = absolute(&opts.workspace)?;
    let vars = Vars {
        repo_root: vars::repo_root(&workspace),
        workspace,
        plugin_dir: absolute(&opts.plugin_dir)?,
        home: opts.home.as_deref().map(absolute).transpose()?,
        profile_dir: None,
    };
    let mut loader = Loader { vars, sources: Vec::new(), watch: Vec::new(), layers: Vec::new() };

    let mut root = loader.defaults()?;

    // The profile, after the profiles it extends.
    for layer in loader.profile_chain(&opts.profile)? {
        merge::merge_layer(&mut root, layer);
    }

    // User, project, patches.
    if let Some(home) = loader.vars.home.clone()
        && let Some(layer) = loader.file(&home.join(".wharf").join("config.toml"), false)?
    {
        merge::merge_layer(&mut root, layer);
    }
    let project = loader.vars.workspace.join(".wharf").join("config.toml");
    if let Some(layer) = loader.file(&project, false)? {
        merge::merge_layer(&mut root, layer);
    }
    for patch in &opts.patches {
        if let Some(layer) = loader.file(patch, true)? {
            merge::merge_layer(&mut root, layer);
        }
    }

    // Overrides.
    let ctx = Ctx { vars: &loader.vars, base_dir: &loader.vars.workspace };
    for arg in &opts.overrides {
        overrides::apply(&mut root, arg, &ctx)?;
    }

    let composed = finalize(root)?;
    let typed: Composed = serde_json::from_value(composed.to_json())
        .map_err(|e| ConfigError::invalid(&Location::whole("composed config"), e.to_string()))?;
    let provenance = dump::leaves(&composed);
    Ok(Config {
        agent: typed.agent,
        session: typed.session,
        engine: typed.engine,
        verify: typed.verify,
        plugins: typed.plugin,
        mcp: typed.mcp,
        bundles: typed.bundle,
        sources: loader.sources,
        watch: loader.watch,
        composed,
        provenance,
        layers: loader.layers,
    })
}

/// The typed view of the composed tree.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Composed {
    agent: AgentConfig,
    session: SessionConfig,
    engine: EngineConfig,
    #[serde(default)]
    verify: Option<VerifyConfig>,
    #[serde(default)]
    plugin: Vec<PluginRow>,
    #[serde(default)]
    mcp: Vec<McpServer>,
    #[serde(default)]
    bundle: Vec<BundleRow>,
}

fn absolute(p: &Path) -> Result<PathBuf, ConfigError> {
    std::path::absolute(p).map_err(|source| ConfigError::Read {
        path: p.to_path_buf(),
        shown: p.display().to_string(),
        source,
    })
}

struct Loader {
    vars: Vars,
    sources: Vec<PathBuf>,
    watch: Vec<PathBuf>,
    /// Shown names of the files of each layer parsed, in order (a profile
    /// and the profiles it extends are one layer).
    layers: Vec<Vec<String>>,
}

impl Loader {
    /// The built-in defaults, as a layer.
    fn defaults(&self) -> Result<Table, ConfigError> {
        let at = Location::default_value();
        let node = |val| Node::new(val, at.clone());
        let table = |pairs: Vec<(&str, Val)>| {
            Val::Table(Table {
                entries: pairs
                    .into_iter()
                    .map(|(k, v)| Entry { key: k.to_string(), key_at: at.clone(), node: node(v) })
                    .collect(),
            })
        };
        let home = self.vars.home.is_some();
        let mut root = Table {
            entries: vec![
                Entry {
                    key: "agent".into(),
                    key_at: at.clone(),
                    node: node(table(vec![
                        ("max_steps", Val::Int(DEFAULT_MAX_STEPS.into())),
                        ("tool_pool", Val::Int(DEFAULT_TOOL_POOL.into())),
                        ("system_prompt", Val::Str(DEFAULT_SYSTEM_PROMPT.into())),
                        ("ask", Val::Str("deny".into())),
                        ("tool_output_limit", Val::Int(i64::try_from(DEFAULT_TOOL_OUTPUT_LIMIT).unwrap_or(i64::MAX))),
                    ])),
                },
                Entry {
                    key: "session".into(),
                    key_at: at.clone(),
                    node: node(table(vec![(
                        "dir",
                        Val::Str(if home { "~/.wharf/sessions" } else { "${workspace}/.wharf/sessions" }.into()),
                    )])),
                },
                Entry {
                    key: "engine".into(),
                    key_at: at.clone(),
                    node: node(table(vec![
                        ("pooling", Val::Bool(true)),
                        (
                            "cache_dir",
                            Val::Str(
                                if home { "~/.cache/wharf/components" } else { "${workspace}/.wharf/cache/components" }
                                    .into(),
                            ),
                        ),
                    ])),
                },
            ],
        };
        let ctx = Ctx { vars: &self.vars, base_dir: &self.vars.workspace };
        check_table(ROOT, &mut root, TOP, &ctx)?;
        Ok(root)
    }

    /// Parses and checks one layer's text.
    fn layer(
        &mut self,
        text: &str,
        shown: &str,
        profile_dir: Option<PathBuf>,
        base: &Path,
    ) -> Result<Table, ConfigError> {
        self.layers.push(vec![shown.to_string()]);
        let src = SourceText::new(shown, text);
        let mut table = src.parse()?;
        if let Some(e) = table.entry(profiles::EXTENDS) {
            return Err(ConfigError::invalid(
                &e.key_at,
                "`extends` belongs in a profile (the --profile file, or a profile it extends), not in a config \
                 layer: this file is already merged over the profile, so set the keys here",
            ));
        }
        let vars = self.vars.with_profile_dir(profile_dir);
        check_table(ROOT, &mut table, TOP, &Ctx { vars: &vars, base_dir: base })?;
        Ok(table)
    }

    /// Reads one layer file; a missing optional file is `None`.
    fn file(&mut self, path: &Path, required: bool) -> Result<Option<Table>, ConfigError> {
        let abs = absolute(path)?;
        let shown = self.shown(path, &abs);
        self.watch.push(abs.clone());
        let text = match std::fs::read_to_string(&abs) {
            Ok(t) => t,
            Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(ConfigError::Read { path: abs, shown, source });
            }
        };
        self.sources.push(abs.clone());
        let dir = abs.parent().map_or_else(|| self.vars.workspace.clone(), Path::to_path_buf);
        self.layer(&text, &shown, Some(dir.clone()), &dir).map(Some)
    }

    /// A path as shown to people: `~/…` under the home directory, else as
    /// given.
    fn shown(&self, given: &Path, abs: &Path) -> String {
        if let Some(rest) = self.vars.home.as_deref().and_then(|h| abs.strip_prefix(h).ok()) {
            return format!("~/{}", rest.display());
        }
        given.display().to_string()
    }
}

/// Drops disabled rows, checks what only the composed config can show,
/// fills row defaults and puts keys in schema order.
fn finalize(mut root: Table) -> Result<Table, ConfigError> {
    let (rows, rows_at, key_at) = match root.entry("plugin") {
        Some(e) => (e.node.clone(), e.node.at.clone(), e.key_at.clone()),
        None => (
            Node::new(Val::Array(Vec::new()), Location::default_value()),
            Location::default_value(),
            Location::default_value(),
        ),
    };
    let Val::Array(rows) = rows.val else {
        return Err(ConfigError::invalid(&rows_at, "`plugin` must be [[plugin]] rows"));
    };
    let mut kept = Vec::new();
    let mut disabled = Vec::new();
    for row in rows {
        let Node { val: Val::Table(mut t), at } = row else {
            continue;
        };
        let id = match t.get("id").map(|n| &n.val) {
            Some(Val::Str(id)) => id.clone(),
            _ => return Err(ConfigError::invalid(&at, "[[plugin]] row has no `id`")),
        };
        let id_at = t.get("id").map_or_else(|| at.clone(), |n| n.at.clone());
        if let Some(Node { val: Val::Bool(false), .. }) = t.remove("enabled") {
            disabled.push(id);
            continue;
        }
        if t.get("path").is_none() && t.get("source").is_none() {
            return Err(ConfigError::invalid(
                &id_at,
                format!("plugin `{id}` has no `path` or `source` (a row that adds a new id must set one)"),
            ));
        }
        check_source(&id, &t)?;
        let dflt = Location::default_value();
        let fill = |t: &mut Table, key: &str, val: Val| {
            if t.get(key).is_none() {
                t.set(key, dflt.clone(), Node::new(val, dflt.clone()));
            }
        };
        fill(&mut t, "warm", Val::Bool(false));
        fill(&mut t, "config", Val::Table(Table::default()));
        fill(&mut t, "grant", Val::Table(Table::default()));
        if let Some(Node { val: Val::Table(g), .. }) = t.get_mut("grant") {
            fill(g, "dirs", Val::Array(Vec::new()));
            fill(g, "hosts", Val::Array(Vec::new()));
            fill(g, "env", Val::Array(Vec::new()));
            fill(g, "process", Val::Bool(false));
            fill(g, "sandbox", Val::Str("required".into()));
            order(g, GRANT);
        }
        order(&mut t, ROW);
        kept.push(Node { val: Val::Table(t), at });
    }
    let ids: Vec<String> = kept.iter().filter_map(merge::row_id).map(str::to_string).collect();
    root.set("plugin", key_at, Node::new(Val::Array(kept), rows_at));

    if let Some(Node { val: Val::Table(agent), .. }) = root.get("agent")
        && let Some(Node { val: Val::Str(adapter), at }) = agent.get("adapter")
        && !ids.contains(adapter)
    {
        let why = if disabled.contains(adapter) { "is disabled" } else { "is not a plugin id" };
        let known = if ids.is_empty() { "none".to_string() } else { ids.join(", ") };
        return Err(ConfigError::invalid(
            at,
            format!("`adapter` in [agent] names \"{adapter}\", which {why} (enabled plugins: {known})"),
        ));
    }

    finalize_mcp(&mut root)?;
    finalize_bundles(&mut root)?;

    for (key, fields) in [("agent", AGENT), ("session", SESSION), ("engine", ENGINE)] {
        if let Some(Node { val: Val::Table(t), .. }) = root.get_mut(key) {
            order(t, fields);
        }
    }
    order(&mut root, ROOT);
    Ok(root)
}

/// A row's `source`, `digest` and `verify` (issue 16): `source` is an
/// `oci://` reference, `digest` a `sha256:` pin, and both `digest` and
/// `verify` need a `source`.
fn check_source(id: &str, t: &Table) -> Result<(), ConfigError> {
    let source = t.get("source");
    if let Some(Node { val: Val::Str(s), at }) = source
        && !(s.starts_with("oci://") && s.len() > "oci://".len())
    {
        return Err(ConfigError::invalid(
            at,
            format!("plugin `{id}`: `source` must be oci://HOST/REPO:TAG or oci://HOST/REPO@sha256:…, found \"{s}\""),
        ));
    }
    if let Some(Node { val: Val::Str(d), at }) = t.get("digest") {
        let ok = d
            .strip_prefix("sha256:")
            .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        if !ok {
            return Err(ConfigError::invalid(
                at,
                format!("plugin `{id}`: `digest` must be sha256: and 64 lowercase hex digits, found \"{d}\""),
            ));
        }
    }
    for key in ["digest", "verify"] {
        if source.is_none()
            && let Some(n) = t.get(key)
        {
            return Err(ConfigError::invalid(&n.at, format!("plugin `{id}`: `{key}` needs a `source` (oci://…)")));
        }
    }
    Ok(())
}

/// Drops disabled `[[mcp]]` rows and checks each kept row as a whole.
fn finalize_mcp(root: &mut Table) -> Result<(), ConfigError> {
    let Some(entry) = root.entry("mcp") else { return Ok(()) };
    let (key_at, rows_at) = (entry.key_at.clone(), entry.node.at.clone());
    let Val::Array(rows) = entry.node.val.clone() else {
        return Err(ConfigError::invalid(&rows_at, "`mcp` must be [[mcp]] rows"));
    };
    let mut kept = Vec::new();
    for row in rows {
        let Node { val: Val::Table(mut t), at } = row else { continue };
        if let Some(Node { val: Val::Bool(false), .. }) = t.remove("enabled") {
            continue;
        }
        let typed: McpServer =
            serde_json::from_value(t.to_json()).map_err(|e| ConfigError::invalid(&at, format!("[[mcp]] row: {e}")))?;
        if let Err((key, message)) = typed.validate() {
            let place = t.get(key).or_else(|| t.get("name")).map_or_else(|| at.clone(), |n| n.at.clone());
            return Err(ConfigError::invalid(&place, message));
        }
        if t.get("required").is_none() {
            let dflt = Location::default_value();
            t.set("required", dflt.clone(), Node::new(Val::Bool(false), dflt));
        }
        order(&mut t, MCP);
        kept.push(Node { val: Val::Table(t), at });
    }
    root.set("mcp", key_at, Node::new(Val::Array(kept), rows_at));
    Ok(())
}

/// Drops disabled `[[bundle]]` rows and checks each kept row's `digest`.
fn finalize_bundles(root: &mut Table) -> Result<(), ConfigError> {
    let Some(entry) = root.entry("bundle") else { return Ok(()) };
    let (key_at, rows_at) = (entry.key_at.clone(), entry.node.at.clone());
    let Val::Array(rows) = entry.node.val.clone() else {
        return Err(ConfigError::invalid(&rows_at, "`bundle` must be [[bundle]] rows"));
    };
    let mut kept = Vec::new();
    for row in rows {
        let Node { val: Val::Table(mut t), at } = row else { continue };
        if let Some(Node { val: Val::Bool(false), .. }) = t.remove("enabled") {
            continue;
        }
        if t.get("path").is_none() {
            return Err(ConfigError::invalid(&at, "[[bundle]] row has no `path`"));
        }
        if let Some(Node { val: Val::Str(d), at }) = t.get("digest")
            && !d.strip_prefix("sha256:").is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            return Err(ConfigError::invalid(
                at,
                format!("bundle `digest` must be sha256: and 64 hex digits, found \"{d}\""),
            ));
        }
        order(&mut t, schema::BUNDLE);
        kept.push(Node { val: Val::Table(t), at });
    }
    root.set("bundle", key_at, Node::new(Val::Array(kept), rows_at));
    Ok(())
}

/// Sorts a table's entries into schema order.
fn order(t: &mut Table, fields: &[Field]) {
    t.entries.sort_by_key(|e| fields.iter().position(|f| f.name == e.key).unwrap_or(usize::MAX));
}
