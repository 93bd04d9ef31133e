//! The shipped profiles, embedded from `profiles/NAME.toml`, and the chain
//! of profiles one profile `extends`.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use crate::error::{ConfigError, Location};
use crate::schema::{Ctx, ROOT, TOP, check_table};
use crate::tree::{Node, SourceText, Table, Val};
use crate::{Loader, absolute};

/// `(name, TOML text)` of each shipped profile.
pub(crate) const SHIPPED: &[(&str, &str)] = &[
    ("anthropic", include_str!("../../../profiles/anthropic.toml")),
    ("code", include_str!("../../../profiles/code.toml")),
    ("default", include_str!("../../../profiles/default.toml")),
    ("demo", include_str!("../../../profiles/demo.toml")),
    ("demo-deepseek", include_str!("../../../profiles/demo-deepseek.toml")),
    ("guarded", include_str!("../../../profiles/guarded.toml")),
    ("openai", include_str!("../../../profiles/openai.toml")),
    ("polyglot", include_str!("../../../profiles/polyglot.toml")),
];

/// Most profile files in one chain: the profile asked for and every
/// profile it extends, directly or not.
pub const MAX_PROFILE_CHAIN: usize = 8;

/// The key that names the profile a profile extends.
pub(crate) const EXTENDS: &str = "extends";

/// The shipped profile names, comma-separated, for messages.
pub(crate) fn shipped_names() -> String {
    SHIPPED.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

/// Whether a profile reference is a path rather than a shipped name (as
/// for `--profile`): it ends in `.toml` or holds a path separator.
fn is_path(s: &str) -> bool {
    s.ends_with(".toml") || s.contains('/') || s.contains('\\')
}

/// Where one profile of a chain comes from.
enum Source {
    /// A shipped profile: its name and text.
    Shipped(&'static str, &'static str),
    /// A file: as given (for display) and absolute.
    File { given: PathBuf, abs: PathBuf },
}

impl Source {
    fn shipped(name: &str) -> Option<Self> {
        SHIPPED.iter().find(|(n, _)| *n == name).map(|(n, t)| Self::Shipped(n, t))
    }

    /// What a cycle is recognised by: the name, or the file's real path.
    fn identity(&self) -> String {
        match self {
            Self::Shipped(name, _) => format!("shipped:{name}"),
            Self::File { abs, .. } => std::fs::canonicalize(abs).unwrap_or_else(|_| abs.clone()).display().to_string(),
        }
    }
}

/// One profile of a chain, parsed but not yet checked.
struct Link {
    /// As in [`Location::via`]: the shipped name, or the file as shown.
    label: String,
    /// As in locations: `shipped:profiles/NAME.toml`, or the file as shown.
    shown: String,
    identity: String,
    /// The file, for `sources` and `watch` (none for a shipped profile).
    file: Option<PathBuf>,
    /// `${profile_dir}` and the base of relative paths (none for a shipped
    /// profile: the workspace).
    dir: Option<PathBuf>,
    /// The text's keys without `extends`.
    table: Table,
}

impl Loader {
    /// Reads the profile `spec` (a shipped name or a path) and every profile
    /// it `extends`, and checks each on its own (so errors and provenance
    /// point into the file that holds the key). Returns the layers to merge
    /// in order: the last profile of the chain (the base) first, `spec`
    /// last.
    pub(crate) fn profile_chain(&mut self, spec: &str) -> Result<Vec<Table>, ConfigError> {
        let first = if let Some(s) = Source::shipped(spec) {
            s
        } else if is_path(spec) {
            Source::File { given: PathBuf::from(spec), abs: absolute(Path::new(spec))? }
        } else {
            return Err(ConfigError::UnknownProfile { name: spec.to_string(), known: shipped_names() });
        };
        let mut links: Vec<Link> = Vec::new();
        let mut next = Some((first, None::<Location>));
        while let Some((source, from)) = next.take() {
            let identity = source.identity();
            let label = match &source {
                Source::Shipped(name, _) => (*name).to_string(),
                Source::File { given, abs } => self.shown(given, abs),
            };
            let names =
                || links.iter().map(|l| l.label.as_str()).chain([label.as_str()]).collect::<Vec<_>>().join(" > ");
            if let Some(at) = &from {
                if links.iter().any(|l| l.identity == identity) {
                    return Err(ConfigError::invalid(at, format!("`extends` makes a cycle: {}", names())));
                }
                if links.len() >= MAX_PROFILE_CHAIN {
                    return Err(ConfigError::invalid(
                        at,
                        format!("`extends` chains more than {MAX_PROFILE_CHAIN} profiles: {}", names()),
                    ));
                }
            }
            let (shown, text, file, dir) = match &source {
                Source::Shipped(name, text) => {
                    (format!("shipped:profiles/{name}.toml"), Cow::Borrowed(*text), None, None)
                }
                Source::File { abs, .. } => {
                    self.watch.push(abs.clone());
                    let text = std::fs::read_to_string(abs).map_err(|source| ConfigError::Read {
                        path: abs.clone(),
                        shown: label.clone(),
                        source,
                    })?;
                    let dir = abs.parent().map_or_else(|| self.vars.workspace.clone(), Path::to_path_buf);
                    (label.clone(), Cow::Owned(text), Some(abs.clone()), Some(dir))
                }
            };
            let via = links.iter().map(|l| l.label.clone()).collect();
            let mut table = SourceText::new(&shown, &text).with_via(via).parse()?;
            if let Some((parent, at)) = take_extends(&mut table)? {
                next = Some((self.resolve_extends(&parent, &at, &source, dir.as_deref())?, Some(at)));
            }
            links.push(Link { label, shown, identity, file, dir, table });
        }

        self.layers.push(links.iter().map(|l| l.shown.clone()).collect());
        let mut layers = Vec::with_capacity(links.len());
        for link in links.into_iter().rev() {
            self.sources.extend(link.file);
            let base = link.dir.clone().unwrap_or_else(|| self.vars.workspace.clone());
            let vars = self.vars.with_profile_dir(link.dir);
            let mut table = link.table;
            check_table(ROOT, &mut table, TOP, &Ctx { vars: &vars, base_dir: &base })?;
            layers.push(table);
        }
        Ok(layers)
    }

    /// The profile that `extends = "VALUE"` (at `at`, in the profile `from`
    /// whose directory is `dir`) names: a shipped name, or a path relative
    /// to `dir` (variables and `~/` allowed).
    fn resolve_extends(
        &self,
        value: &str,
        at: &Location,
        from: &Source,
        dir: Option<&Path>,
    ) -> Result<Source, ConfigError> {
        if let Some(s) = Source::shipped(value) {
            return Ok(s);
        }
        if !is_path(value) {
            return Err(ConfigError::invalid(
                at,
                format!(
                    "`extends` names no shipped profile \"{value}\" (shipped: {}; or give a path to a .toml file, \
                     relative to this file)",
                    shipped_names()
                ),
            ));
        }
        let (Source::File { .. }, Some(dir)) = (from, dir) else {
            return Err(ConfigError::invalid(
                at,
                format!(
                    "a shipped profile can only extend a shipped profile (shipped: {}), not \"{value}\"",
                    shipped_names()
                ),
            ));
        };
        let abs = self
            .vars
            .with_profile_dir(Some(dir.to_path_buf()))
            .expand_path(value, dir)
            .map_err(|error| ConfigError::Variable { at: at.clone(), error })?;
        // Shown without the `..` of a path relative to the extending file.
        let abs = std::fs::canonicalize(&abs).unwrap_or(abs);
        Ok(Source::File { given: abs.clone(), abs })
    }
}

/// Removes `extends` from a profile's top level: its value and where it is.
fn take_extends(table: &mut Table) -> Result<Option<(String, Location)>, ConfigError> {
    let Some(i) = table.entries.iter().position(|e| e.key == EXTENDS) else { return Ok(None) };
    let e = table.entries.remove(i);
    match e.node {
        Node { val: Val::Str(s), at } => Ok(Some((s, at))),
        Node { val, at } => Err(ConfigError::Type {
            at,
            key: EXTENDS.to_string(),
            table: TOP.to_string(),
            expected: "a string (a shipped profile name or a path to a .toml file)",
            found: val.type_name(),
        }),
    }
}
