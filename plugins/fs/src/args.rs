//! Tool arguments. Their doc comments become the schema descriptions the
//! model reads.

use schemars::JsonSchema;
use serde::Deserialize;

/// Arguments of `read`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ReadArgs {
    /// File to read: relative to the workspace, or absolute inside it.
    pub path: String,
    /// First line to return, 1-based (default 1).
    pub offset: Option<u32>,
    /// Most lines to return (default 2000).
    pub limit: Option<u32>,
}

/// Arguments of `write`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WriteArgs {
    /// File to create or replace: relative to the workspace, or absolute
    /// inside it. Missing parent directories are created.
    pub path: String,
    /// The complete new content of the file.
    pub content: String,
}

/// Arguments of `edit`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct EditArgs {
    /// File to edit: relative to the workspace, or absolute inside it.
    pub path: String,
    /// Exact text to replace, including whitespace and indentation. Must
    /// occur exactly once unless `replace_all` is set.
    pub old_string: String,
    /// Replacement text.
    pub new_string: String,
    /// Replace every occurrence of `old_string` (default false).
    pub replace_all: Option<bool>,
}

/// Arguments of `list`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListArgs {
    /// Directory to list (default: the workspace root).
    pub path: Option<String>,
    /// How many levels to descend (default 1, at most 5).
    pub depth: Option<u32>,
}

/// Arguments of `glob`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct GlobArgs {
    /// Glob pattern. Without `/` it matches file names at any depth
    /// (`*.rs`); with `/` it matches the path relative to `path`
    /// (`src/**/*.rs`). `*` and `?` stay within one directory, `**` crosses
    /// directories.
    pub pattern: String,
    /// Directory to search (default: the workspace root).
    pub path: Option<String>,
}

/// Arguments of `grep`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct GrepArgs {
    /// Regular expression (Rust `regex` syntax) matched against each line.
    pub pattern: String,
    /// File or directory to search (default: the workspace root).
    pub path: Option<String>,
    /// Only search files matching this glob (same rules as `glob`), e.g.
    /// `*.rs`.
    pub glob: Option<String>,
    /// Match case-insensitively (default false).
    pub case_insensitive: Option<bool>,
    /// Return only the paths of files that match (default false).
    pub files_only: Option<bool>,
    /// Stop after this many matching lines (default 200, at most 5000).
    pub max_matches: Option<u32>,
}
