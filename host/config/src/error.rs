//! Typed errors. Every error that comes from a layer names where: the file
//! (or the `-c` argument), the line and the column.

use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

use crate::vars::VarError;

/// A place in a configuration layer: a file position, or a whole `-c`
/// argument, or `default` for built-in defaults.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Location {
    /// The layer: a file path as shown to people (`~/…` under the home
    /// directory, `shipped:profiles/NAME.toml` for an embedded profile),
    /// `-c KEY=VALUE` for an override, or `default`.
    pub source: String,
    /// 1-based line, when the layer is a file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// 1-based column (in characters), when the layer is a file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<u32>,
    /// For a profile reached through `extends`: the profiles that extend
    /// it, from the one asked for down to its direct child (`["code"]` for
    /// a value of `default` under `--profile code`). Empty otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub via: Vec<String>,
}

impl Location {
    /// A location without a position (a `-c` argument, or `default`).
    pub fn whole(source: impl Into<String>) -> Self {
        Self { source: source.into(), line: None, column: None, via: Vec::new() }
    }

    /// The location of built-in defaults.
    pub fn default_value() -> Self {
        Self::whole(DEFAULT_SOURCE)
    }

    /// Whether this is a built-in default.
    pub fn is_default(&self) -> bool {
        self.source == DEFAULT_SOURCE && self.line.is_none()
    }

    /// `source:line` (no column) and ` (via A > B)` if reached through
    /// `extends`, as used in `dump()` comments.
    pub fn short(&self) -> String {
        let place = match self.line {
            Some(line) => format!("{}:{line}", self.source),
            None => self.source.clone(),
        };
        format!("{place}{}", self.via_suffix())
    }

    /// ` (via A > B)`, or nothing.
    fn via_suffix(&self) -> String {
        if self.via.is_empty() { String::new() } else { format!(" (via {})", self.via.join(" > ")) }
    }
}

pub(crate) const DEFAULT_SOURCE: &str = "default";

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
            if let Some(col) = self.column {
                write!(f, ":{col}")?;
            }
        }
        f.write_str(&self.via_suffix())
    }
}

/// Why a configuration could not be loaded. Nothing is returned with an
/// error: a load either yields the whole validated config or one of these.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A layer file exists (or is required) but could not be read.
    #[error("{shown}: cannot read: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The file as shown to people.
        shown: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The profile name is neither a shipped profile nor a `.toml` path.
    #[error("unknown profile `{name}` (shipped: {known}; or give a path to a .toml file)")]
    UnknownProfile {
        /// The name asked for.
        name: String,
        /// The shipped profile names, comma-separated.
        known: String,
    },
    /// Malformed TOML (or a malformed `-c` argument).
    #[error("{at}: {message}")]
    Syntax {
        /// Where.
        at: Location,
        /// What the parser expected.
        message: String,
    },
    /// A key that the schema does not know.
    #[error("{at}: unknown key `{key}` in {table}{} (expected one of: {expected})", did_you_mean(.suggestion))]
    UnknownKey {
        /// Where the key is.
        at: Location,
        /// The key.
        key: String,
        /// The table it is in, e.g. `[plugin.grant]`.
        table: String,
        /// The keys allowed there, comma-separated.
        expected: String,
        /// A close allowed key, if any.
        suggestion: Option<String>,
    },
    /// A value of the wrong type.
    #[error("{at}: `{key}` in {table} must be {expected}, found {found}")]
    Type {
        /// Where the value is.
        at: Location,
        /// The key.
        key: String,
        /// The table it is in.
        table: String,
        /// What was expected, e.g. `an integer`.
        expected: &'static str,
        /// What was found, e.g. `a string`.
        found: &'static str,
    },
    /// A `${…}` variable that is unknown, unset or unterminated.
    #[error("{at}: {error}")]
    Variable {
        /// Where the string is.
        at: Location,
        /// What is wrong with it.
        #[source]
        error: VarError,
    },
    /// A `-c plugin.ID.…` override names no plugin row.
    #[error("{at}: no plugin with id `{id}` (known: {known})")]
    UnknownPlugin {
        /// The `-c` argument.
        at: Location,
        /// The id asked for.
        id: String,
        /// The known ids, comma-separated.
        known: String,
    },
    /// A value that is well-typed but not allowed (range, enum, id format,
    /// duplicate id, missing `path`, `adapter` naming no enabled plugin …).
    #[error("{at}: {message}")]
    Invalid {
        /// Where the offending value is.
        at: Location,
        /// What is wrong.
        message: String,
    },
}

fn did_you_mean(s: &Option<String>) -> String {
    match s {
        Some(k) => format!(" (did you mean `{k}`?)"),
        None => String::new(),
    }
}

impl ConfigError {
    /// Where the error is, when it is in a layer.
    pub fn location(&self) -> Option<&Location> {
        match self {
            Self::Read { .. } | Self::UnknownProfile { .. } => None,
            Self::Syntax { at, .. }
            | Self::UnknownKey { at, .. }
            | Self::Type { at, .. }
            | Self::Variable { at, .. }
            | Self::UnknownPlugin { at, .. }
            | Self::Invalid { at, .. } => Some(at),
        }
    }

    pub(crate) fn invalid(at: &Location, message: impl Into<String>) -> Self {
        Self::Invalid { at: at.clone(), message: message.into() }
    }
}
