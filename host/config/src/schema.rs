//! What keys exist, what types they have, and which values are allowed.
//! Each layer is checked on its own, so an error points into the layer that
//! has it; strings are expanded (variables, `~/`, relative paths) here too,
//! because `${profile_dir}` and relative paths depend on the layer's file.

use std::collections::HashMap;
use std::path::Path;

use crate::error::{ConfigError, Location};
use crate::tree::{Node, Table, Val};
use crate::vars::Vars;

/// Largest `agent.max_steps`.
pub const MAX_STEPS_LIMIT: i64 = 100_000;
/// Largest `agent.tool_pool`.
pub const TOOL_POOL_LIMIT: i64 = 1_024;
/// Largest byte count (`agent.tool_output_limit`, `grant.output_limit_bytes`): 1 GiB.
pub const BYTES_LIMIT: i64 = 1 << 30;
/// Largest `grant.memory_mb`: 64 GiB.
pub const MEMORY_MB_LIMIT: i64 = 65_536;
/// Largest `grant.timeout_ms`: one day.
pub const TIMEOUT_MS_LIMIT: i64 = 86_400_000;
/// Longest plugin id.
pub const ID_MAX_LEN: usize = 64;
/// Longest MCP server name (its tools are named `mcp__NAME__TOOL`, at most
/// 64 characters).
pub const MCP_NAME_MAX_LEN: usize = 32;

/// The type of a value.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Shape {
    /// Any string; variables expanded.
    Str,
    /// A plugin id: `[a-z0-9_-]+`.
    Id,
    /// A non-empty path: variables, `~/`, relative to the layer's directory.
    Path,
    /// One of these strings (not expanded).
    Enum(&'static [&'static str]),
    /// An integer in `min..=max`.
    Int {
        min: i64,
        max: i64,
    },
    Bool,
    /// An array of strings of one kind.
    List(Item),
    /// `true`/`false` or an array of strings of one kind (`grant.tools`).
    BoolOrList(Item),
    /// A table with these keys only.
    Table(&'static [Field]),
    /// A table with any keys (a plugin's `config`); strings expanded.
    Free,
    /// Anything (inside a `Free` table); strings expanded.
    Any,
    /// The `[[plugin]]` rows.
    Plugins,
    /// An MCP server name: `[a-zA-Z0-9_-]+` without `__`.
    McpName,
    /// The `[[mcp]]` rows.
    McpRows,
    /// The `[[bundle]]` rows.
    BundleRows,
    /// A table of string values that may hold secrets (MCP `env`, `headers`):
    /// variables expanded except `${env:NAME}`, which is kept for the host
    /// to resolve when it starts the server.
    Secrets(SecretKeys),
}

/// What the keys of a [`Shape::Secrets`] table are.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SecretKeys {
    /// Environment variable names.
    Env,
    /// HTTP header names.
    Header,
}

/// The kind of string in a [`Shape::List`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Item {
    /// `PATH[:ro|:rw]`: normalized to `ABSOLUTE_PATH:ro` or `:rw`.
    Dir,
    /// An outbound HTTP host pattern: `HOST`, `HOST:PORT`, `*.DOMAIN`, `*`.
    Host,
    /// An environment variable name.
    Env,
    /// Any string; variables expanded.
    Str,
}

/// One allowed key of a table.
#[derive(Debug)]
pub(crate) struct Field {
    pub(crate) name: &'static str,
    pub(crate) shape: Shape,
}

const fn f(name: &'static str, shape: Shape) -> Field {
    Field { name, shape }
}

/// `agent.ask` values.
pub(crate) const ASK: &[&str] = &["deny", "allow"];
/// `grant.sandbox` values.
pub(crate) const SANDBOX: &[&str] = &["required", "off"];
pub(crate) const ON_INVALID_CONFIG: &[&str] = &["deny", "keep"];

pub(crate) const AGENT: &[Field] = &[
    f("adapter", Shape::Id),
    f("max_steps", Shape::Int { min: 1, max: MAX_STEPS_LIMIT }),
    f("tool_pool", Shape::Int { min: 1, max: TOOL_POOL_LIMIT }),
    f("system_prompt", Shape::Str),
    f("ask", Shape::Enum(ASK)),
    f("tool_output_limit", Shape::Int { min: 1, max: BYTES_LIMIT }),
    f("compaction", Shape::Bool),
    f("compact_at_percent", Shape::Int { min: 10, max: 99 }),
    f("context_window", Shape::Int { min: 1024, max: 100_000_000 }),
    f("max_subagent_depth", Shape::Int { min: 0, max: 8 }),
    f("tool_list_budget", Shape::Int { min: 1024, max: BYTES_LIMIT }),
    f("lazy_rows", Shape::List(Item::Str)),
];

pub(crate) const SESSION: &[Field] = &[f("dir", Shape::Path), f("store", Shape::Str)];

/// Largest `engine.max_tools_per_plugin` (the runtime also bounds the total
/// size of one plugin's tool specs).
pub const MAX_TOOLS_PER_PLUGIN_LIMIT: i64 = 100_000;

pub(crate) const ENGINE: &[Field] = &[
    f("pooling", Shape::Bool),
    f("cache_dir", Shape::Path),
    f("max_tools_per_plugin", Shape::Int { min: 1, max: MAX_TOOLS_PER_PLUGIN_LIMIT }),
];

pub(crate) const GRANT: &[Field] = &[
    f("dirs", Shape::List(Item::Dir)),
    f("hosts", Shape::List(Item::Host)),
    f("env", Shape::List(Item::Env)),
    f("process", Shape::Bool),
    f("memory_mb", Shape::Int { min: 1, max: MEMORY_MB_LIMIT }),
    f("timeout_ms", Shape::Int { min: 1, max: TIMEOUT_MS_LIMIT }),
    f("yield_ms", Shape::Int { min: 1, max: TIMEOUT_MS_LIMIT }),
    f("durable", Shape::Bool),
    f("output_limit_bytes", Shape::Int { min: 1, max: BYTES_LIMIT }),
    f("sandbox", Shape::Enum(SANDBOX)),
    f("private_network", Shape::Bool),
    f("model", Shape::Bool),
    f("agents", Shape::Bool),
    f("questions", Shape::Bool),
    f("tools", Shape::BoolOrList(Item::Str)),
];

pub(crate) const ROW: &[Field] = &[
    f("id", Shape::Id),
    f("path", Shape::Path),
    f("source", Shape::Str),
    f("digest", Shape::Str),
    f("verify", Shape::Table(VERIFY)),
    f("enabled", Shape::Bool),
    f("warm", Shape::Bool),
    f("on_invalid_config", Shape::Enum(ON_INVALID_CONFIG)),
    f("dev", Shape::Bool),
    f("config", Shape::Free),
    f("grant", Shape::Table(GRANT)),
];

pub(crate) const MCP: &[Field] = &[
    f("name", Shape::McpName),
    f("command", Shape::Str),
    f("args", Shape::List(Item::Str)),
    f("env", Shape::Secrets(SecretKeys::Env)),
    f("cwd", Shape::Path),
    f("url", Shape::Str),
    f("headers", Shape::Secrets(SecretKeys::Header)),
    f("required", Shape::Bool),
    f("startup_timeout_ms", Shape::Int { min: 1, max: TIMEOUT_MS_LIMIT }),
    f("tool_timeout_ms", Shape::Int { min: 1, max: TIMEOUT_MS_LIMIT }),
    f("enabled", Shape::Bool),
    f("sandbox", Shape::Table(MCP_SANDBOX)),
    f("unsandboxed", Shape::Bool),
];

/// `[[bundle]]`: a Claude Code / Codex plugin bundle (`wharf-bundle`).
pub(crate) const BUNDLE: &[Field] = &[
    f("name", Shape::Id),
    f("path", Shape::Path),
    f("digest", Shape::Str),
    f("enabled", Shape::Bool),
    f("sandbox", Shape::Table(BUNDLE_SANDBOX)),
];

/// `[bundle.sandbox]`: what the bundle's hooks and MCP servers may do
/// beyond reading (`hosts`: the HTTP MCP servers it may reach).
pub(crate) const BUNDLE_SANDBOX: &[Field] = &[
    f("dirs", Shape::List(Item::Dir)),
    f("network", Shape::Bool),
    f("env", Shape::List(Item::Env)),
    f("hosts", Shape::List(Item::Str)),
];

/// `[mcp.sandbox]`: a stdio server's OS-sandbox grants; `hosts`: an HTTP
/// server's host allowlist beyond its own host.
pub(crate) const MCP_SANDBOX: &[Field] = &[
    f("dirs", Shape::List(Item::Dir)),
    f("network", Shape::Bool),
    f("env", Shape::List(Item::Env)),
    f("hosts", Shape::List(Item::Host)),
];

/// `verify = { key = "PATH.pub" }` of a row, or `[verify]` for every row
/// with a `source`: the PEM public key cosign signatures must verify with.
pub(crate) const VERIFY: &[Field] = &[f("key", Shape::Path)];

pub(crate) const ROOT: &[Field] = &[
    f("agent", Shape::Table(AGENT)),
    f("session", Shape::Table(SESSION)),
    f("engine", Shape::Table(ENGINE)),
    f("verify", Shape::Table(VERIFY)),
    f("plugin", Shape::Plugins),
    f("mcp", Shape::McpRows),
    f("bundle", Shape::BundleRows),
];

/// The two kinds of rows that merge by a key: `[[plugin]]` by `id`,
/// `[[mcp]]` by `name`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RowKind {
    Plugin,
    Mcp,
    Bundle,
}

impl RowKind {
    /// The top-level key holding the rows.
    pub(crate) fn key(self) -> &'static str {
        match self {
            Self::Plugin => "plugin",
            Self::Mcp => "mcp",
            Self::Bundle => "bundle",
        }
    }

    /// The key that names a row.
    pub(crate) fn id_key(self) -> &'static str {
        match self {
            Self::Plugin => "id",
            Self::Mcp | Self::Bundle => "name",
        }
    }

    /// The row's keys.
    pub(crate) fn fields(self) -> &'static [Field] {
        match self {
            Self::Plugin => ROW,
            Self::Mcp => MCP,
            Self::Bundle => BUNDLE,
        }
    }

    /// `[[plugin]]` or `[[mcp]]`.
    pub(crate) fn table(self) -> &'static str {
        match self {
            Self::Plugin => "[[plugin]]",
            Self::Mcp => "[[mcp]]",
            Self::Bundle => "[[bundle]]",
        }
    }

    /// The kind of rows under a top-level key.
    pub(crate) fn of(key: &str) -> Option<Self> {
        match key {
            "plugin" => Some(Self::Plugin),
            "mcp" => Some(Self::Mcp),
            "bundle" => Some(Self::Bundle),
            _ => None,
        }
    }
}

/// The display name of the top-level table.
pub(crate) const TOP: &str = "the top level";

/// Looks up `key` in `fields`, or says which keys are allowed.
pub(crate) fn field<'f>(fields: &'f [Field], key: &str, table: &str, at: &Location) -> Result<&'f Field, ConfigError> {
    fields.iter().find(|f| f.name == key).ok_or_else(|| {
        let names: Vec<&str> = fields.iter().map(|f| f.name).collect();
        ConfigError::UnknownKey {
            at: at.clone(),
            key: key.to_string(),
            table: table.to_string(),
            expected: names.join(", "),
            suggestion: suggest(key, &names),
        }
    })
}

/// The closest name within edit distance 2, if any.
fn suggest(key: &str, names: &[&str]) -> Option<String> {
    names
        .iter()
        .map(|n| (distance(key, n), n))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, n)| (*n).to_string())
}

/// Levenshtein distance with adjacent transpositions.
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

/// The name of the table at `key` inside `table`: `[agent]`,
/// `[plugin.grant]`, `[plugin.config.x]` (plugin rows are shown without
/// their id, as in the file).
pub(crate) fn child_table_name(table: &str, key: &str) -> String {
    let key = crate::tree::toml_key(key);
    if table == TOP {
        format!("[{key}]")
    } else if let Some(rows) = table.strip_prefix("[[").and_then(|t| t.strip_suffix("]]")) {
        format!("[{rows}.{key}]")
    } else {
        let inner = table.trim_start_matches('[').trim_end_matches(']');
        format!("[{inner}.{key}]")
    }
}

/// What a layer's strings are expanded with.
pub(crate) struct Ctx<'a> {
    pub(crate) vars: &'a Vars,
    /// Relative paths are resolved against this directory.
    pub(crate) base_dir: &'a Path,
}

impl Ctx<'_> {
    fn expand(&self, s: &str, at: &Location) -> Result<String, ConfigError> {
        self.vars.expand(s).map_err(|error| ConfigError::Variable { at: at.clone(), error })
    }

    fn expand_keeping_env(&self, s: &str, at: &Location) -> Result<String, ConfigError> {
        self.vars.expand_keeping_env(s).map_err(|error| ConfigError::Variable { at: at.clone(), error })
    }

    fn expand_path(&self, s: &str, at: &Location) -> Result<String, ConfigError> {
        let p =
            self.vars.expand_path(s, self.base_dir).map_err(|error| ConfigError::Variable { at: at.clone(), error })?;
        p.to_str()
            .map(str::to_string)
            .ok_or_else(|| ConfigError::invalid(at, format!("path {} is not valid UTF-8", p.display())))
    }
}

/// Checks (and expands) every entry of `t` against `fields`.
pub(crate) fn check_table(fields: &[Field], t: &mut Table, table: &str, ctx: &Ctx<'_>) -> Result<(), ConfigError> {
    for e in &mut t.entries {
        let fd = field(fields, &e.key, table, &e.key_at)?;
        check_node(fd.shape, &mut e.node, &e.key, table, ctx)?;
    }
    Ok(())
}

/// Checks (and expands) the value of `key` in `table`.
pub(crate) fn check_node(
    shape: Shape,
    node: &mut Node,
    key: &str,
    table: &str,
    ctx: &Ctx<'_>,
) -> Result<(), ConfigError> {
    if let Shape::Any = shape {
        return expand_any(node, ctx);
    }
    let Node { val, at } = node;
    let mismatch = |expected: &'static str, found: &Val| ConfigError::Type {
        at: at.clone(),
        key: key.to_string(),
        table: table.to_string(),
        expected,
        found: found.type_name(),
    };
    match (shape, &mut *val) {
        (Shape::Str, Val::Str(s)) => *s = ctx.expand(s, at)?,
        (Shape::Id, Val::Str(s)) => check_id(s, at)?,
        (Shape::Path, Val::Str(s)) => {
            if s.is_empty() {
                return Err(ConfigError::invalid(at, format!("`{key}` in {table} must not be empty")));
            }
            *s = ctx.expand_path(s, at)?;
        }
        (Shape::Enum(options), Val::Str(s)) => {
            if !options.contains(&s.as_str()) {
                let quoted: Vec<String> = options.iter().map(|o| format!("\"{o}\"")).collect();
                return Err(ConfigError::invalid(
                    at,
                    format!("`{key}` in {table} must be one of {}, found \"{s}\"", quoted.join(", ")),
                ));
            }
        }
        (Shape::Int { min, max }, Val::Int(i)) => {
            if *i < min || *i > max {
                return Err(ConfigError::invalid(
                    at,
                    format!("`{key}` in {table} must be between {min} and {max}, found {i}"),
                ));
            }
        }
        (Shape::Bool | Shape::BoolOrList(_), Val::Bool(_)) => {}
        (Shape::List(item) | Shape::BoolOrList(item), Val::Array(items)) => {
            for n in items.iter_mut() {
                let Val::Str(s) = &mut n.val else {
                    return Err(ConfigError::Type {
                        at: n.at.clone(),
                        key: key.to_string(),
                        table: table.to_string(),
                        expected: "an array of strings",
                        found: "an array holding another type",
                    });
                };
                *s = check_item(item, s, key, &n.at, ctx)?;
            }
            // Optional directories whose path names an unknown place (no
            // home directory) are dropped.
            items.retain(|n| !matches!(&n.val, Val::Str(s) if s.is_empty()));
        }
        (Shape::Table(fields), Val::Table(t)) => {
            check_table(fields, t, &child_table_name(table, key), ctx)?;
        }
        (Shape::Free, Val::Table(t)) => {
            for e in &mut t.entries {
                expand_any(&mut e.node, ctx)?;
            }
        }
        (Shape::Plugins, Val::Array(rows)) => check_rows(RowKind::Plugin, rows, ctx)?,
        (Shape::McpRows, Val::Array(rows)) => check_rows(RowKind::Mcp, rows, ctx)?,
        (Shape::BundleRows, Val::Array(rows)) => check_rows(RowKind::Bundle, rows, ctx)?,
        (Shape::McpName, Val::Str(s)) => check_mcp_name(s, at)?,
        (Shape::Secrets(keys), Val::Table(t)) => {
            let name = child_table_name(table, key);
            for e in &mut t.entries {
                check_secret_key(keys, &e.key, &name, &e.key_at)?;
                match &mut e.node.val {
                    Val::Str(s) => *s = ctx.expand_keeping_env(s, &e.node.at)?,
                    other => {
                        return Err(ConfigError::Type {
                            at: e.node.at.clone(),
                            key: e.key.clone(),
                            table: name,
                            expected: "a string",
                            found: other.type_name(),
                        });
                    }
                }
            }
        }
        (shape, found) => return Err(mismatch(expected_name(shape), found)),
    }
    Ok(())
}

fn expected_name(shape: Shape) -> &'static str {
    match shape {
        Shape::Str | Shape::Id | Shape::Path | Shape::Enum(_) => "a string",
        Shape::Int { .. } => "an integer",
        Shape::Bool => "a boolean",
        Shape::List(_) => "an array of strings",
        Shape::BoolOrList(_) => "a boolean or an array of strings",
        Shape::Table(_) | Shape::Free => "a table",
        Shape::Plugins => "an array of tables ([[plugin]] rows)",
        Shape::McpRows => "an array of tables ([[mcp]] rows)",
        Shape::BundleRows => "an array of tables ([[bundle]] rows)",
        Shape::McpName => "a string",
        Shape::Secrets(_) => "a table of strings",
        Shape::Any => "a value",
    }
}

/// Expands variables in every string inside `node`.
fn expand_any(node: &mut Node, ctx: &Ctx<'_>) -> Result<(), ConfigError> {
    match &mut node.val {
        Val::Str(s) => *s = ctx.expand(s, &node.at)?,
        Val::Array(items) => {
            for n in items {
                expand_any(n, ctx)?;
            }
        }
        Val::Table(t) => {
            for e in &mut t.entries {
                expand_any(&mut e.node, ctx)?;
            }
        }
        Val::Int(_) | Val::Float(_) | Val::Bool(_) | Val::Datetime(_) => {}
    }
    Ok(())
}

/// Checks the `[[plugin]]` or `[[mcp]]` rows of one layer: each is a table
/// with its id key, and no id appears twice.
fn check_rows(kind: RowKind, rows: &mut [Node], ctx: &Ctx<'_>) -> Result<(), ConfigError> {
    let (table, id_key) = (kind.table(), kind.id_key());
    let mut seen: HashMap<String, Location> = HashMap::new();
    for row in rows {
        let Val::Table(t) = &mut row.val else {
            return Err(ConfigError::Type {
                at: row.at.clone(),
                key: kind.key().into(),
                table: TOP.into(),
                expected: match kind {
                    RowKind::Plugin => "an array of tables ([[plugin]] rows)",
                    RowKind::Mcp => "an array of tables ([[mcp]] rows)",
                    RowKind::Bundle => "an array of tables ([[bundle]] rows)",
                },
                found: "an array holding another type",
            });
        };
        check_table(kind.fields(), t, table, ctx)?;
        let Some(Val::Str(id)) = t.get(id_key).map(|n| &n.val) else {
            return Err(ConfigError::invalid(&row.at, format!("{table} row has no `{id_key}`")));
        };
        let id_at = t.get(id_key).map_or_else(|| row.at.clone(), |n| n.at.clone());
        if let Some(first) = seen.get(id) {
            let what = match kind {
                RowKind::Plugin => "plugin id",
                RowKind::Mcp => "MCP server name",
                RowKind::Bundle => "bundle name",
            };
            return Err(ConfigError::invalid(
                &id_at,
                format!("duplicate {what} `{id}` (first at {first}); a layer may list it once"),
            ));
        }
        seen.insert(id.clone(), id_at);
    }
    Ok(())
}

/// Checks an MCP server name: `[a-zA-Z0-9_-]+`, without `__` (which
/// separates the parts of `mcp__SERVER__TOOL`).
pub(crate) fn check_mcp_name(s: &str, at: &Location) -> Result<(), ConfigError> {
    if valid_mcp_name(s) {
        Ok(())
    } else {
        Err(ConfigError::invalid(
            at,
            format!(
                "bad MCP server name \"{s}\": use 1 to {MCP_NAME_MAX_LEN} of A-Z, a-z, 0-9, `_` and `-`, without `__` \
                 (its tools are named mcp__NAME__TOOL)"
            ),
        ))
    }
}

/// Whether `s` is a valid MCP server name.
pub(crate) fn valid_mcp_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MCP_NAME_MAX_LEN
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && !s.contains("__")
}

fn check_secret_key(keys: SecretKeys, key: &str, table: &str, at: &Location) -> Result<(), ConfigError> {
    let ok = match keys {
        SecretKeys::Env => !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
        // RFC 9110 token characters.
        SecretKeys::Header => {
            !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c))
        }
    };
    if ok {
        Ok(())
    } else {
        let what = match keys {
            SecretKeys::Env => "environment variable name (A-Z, a-z, 0-9, `_`)",
            SecretKeys::Header => "HTTP header name",
        };
        Err(ConfigError::invalid(at, format!("bad key \"{key}\" in {table}: expected an {what}")))
    }
}

/// Checks a plugin id (and `agent.adapter`): `[a-z0-9_-]+`.
pub(crate) fn check_id(s: &str, at: &Location) -> Result<(), ConfigError> {
    let ok = !s.is_empty()
        && s.len() <= ID_MAX_LEN
        && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(ConfigError::invalid(at, format!("bad plugin id \"{s}\": use 1 to {ID_MAX_LEN} of a-z, 0-9, `_` and `-`")))
    }
}

fn check_item(item: Item, s: &str, key: &str, at: &Location, ctx: &Ctx<'_>) -> Result<String, ConfigError> {
    match item {
        Item::Dir => {
            // A trailing `?` makes the grant optional: skipped when the
            // directory does not exist (e.g. `~/.wharf/skills`).
            let (spec, optional) = match s.strip_suffix('?') {
                Some(rest) => (rest, "?"),
                None => (s, ""),
            };
            let (path, access) = match spec.rsplit_once(':') {
                Some((p, "ro")) => (p, "ro"),
                Some((p, "rw")) => (p, "rw"),
                _ => (spec, "ro"),
            };
            if path.is_empty() {
                return Err(ConfigError::invalid(at, format!("empty directory in `{key}`: \"{s}\"")));
            }
            match ctx.expand_path(path, at) {
                Ok(p) => Ok(format!("{p}:{access}{optional}")),
                // An optional grant under a variable with no value here.
                Err(ConfigError::Variable { .. }) if !optional.is_empty() => Ok(String::new()),
                Err(e) => Err(e),
            }
        }
        Item::Host => {
            let h = ctx.expand(s, at)?;
            if valid_host_pattern(&h) {
                Ok(h)
            } else {
                Err(ConfigError::invalid(
                    at,
                    format!("bad host pattern \"{h}\": expected HOST, HOST:PORT, *.DOMAIN or *"),
                ))
            }
        }
        Item::Str => ctx.expand(s, at),
        Item::Env => {
            if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                Ok(s.to_string())
            } else {
                Err(ConfigError::invalid(
                    at,
                    format!("bad environment variable name \"{s}\": use A-Z, a-z, 0-9 and `_`"),
                ))
            }
        }
    }
}

/// `*`, or `[*.]NAME[:PORT]` where NAME is letters, digits, `.`, `-`, or a
/// bracketed IPv6 address.
fn valid_host_pattern(p: &str) -> bool {
    if p == "*" {
        return true;
    }
    let host = p.strip_prefix("*.").unwrap_or(p);
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        match rest.split_once(']') {
            Some((v6, tail)) if !v6.is_empty() && v6.chars().all(|c| c.is_ascii_hexdigit() || c == ':') => match tail {
                "" => return true,
                t => {
                    return t.strip_prefix(':').is_some_and(|port| port.parse::<u16>().is_ok());
                }
            },
            _ => return false,
        }
    } else {
        match host.split_once(':') {
            Some((n, port)) => (n, Some(port)),
            None => (host, None),
        }
    };
    !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
        && port.is_none_or(|p| p.parse::<u16>().is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_patterns() {
        for ok in ["*", "api.deepseek.com", "*.svc.local", "127.0.0.1:8080", "[::1]:80", "[::1]"] {
            assert!(valid_host_pattern(ok), "{ok}");
        }
        for bad in ["", "a b", "host:99999", "*.", "http://x", "[zz]"] {
            assert!(!valid_host_pattern(bad), "{bad}");
        }
    }

    #[test]
    fn suggestions() {
        assert_eq!(suggest("memroy_mb", &["dirs", "memory_mb"]), Some("memory_mb".into()));
        assert_eq!(suggest("zzz", &["dirs", "memory_mb"]), None);
    }
}
