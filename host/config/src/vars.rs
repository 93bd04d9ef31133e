//! `${…}` variables and `~/` in configuration strings.

use std::path::{Component, Path, PathBuf};

/// The variable names a string may use.
pub const VARIABLES: &[&str] = &["workspace", "repo_root", "plugin_dir", "home", "profile_dir"];

/// The values of the variables a configuration string may use. The caller
/// supplies them; [`crate::load`] builds them from its [`crate::LoadOptions`]
/// and sets `profile_dir` per layer file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vars {
    /// `${workspace}`: the session workspace directory.
    pub workspace: PathBuf,
    /// `${repo_root}`: the nearest ancestor of the workspace (or the
    /// workspace itself) that holds `.git`, else the workspace; see
    /// [`repo_root`].
    pub repo_root: PathBuf,
    /// `${plugin_dir}`: where the built components are.
    pub plugin_dir: PathBuf,
    /// `${home}` and a leading `~/`: the user's home directory, if known.
    pub home: Option<PathBuf>,
    /// `${profile_dir}`: the directory of the file that contains the string
    /// (none for embedded profiles and `-c` arguments).
    pub profile_dir: Option<PathBuf>,
}

/// A string that cannot be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VarError {
    /// `${name}` with a name that is not a variable.
    #[error("unknown variable `${{{0}}}` (known: workspace, repo_root, plugin_dir, home, profile_dir)")]
    Unknown(String),
    /// A known variable that has no value here (no home directory; no
    /// containing file for `${profile_dir}`).
    #[error("variable `${{{0}}}` has no value here{hint}", hint = unset_hint(.0))]
    Unset(String),
    /// `${` without a closing `}`.
    #[error("unterminated `${{` (write `$${{` for a literal `${{`)")]
    Unterminated,
    /// A variable's value is not valid UTF-8.
    #[error("the value of `${{{0}}}` is not valid UTF-8")]
    NotUtf8(String),
    /// `${env:NAME}` where it is not allowed, or with a malformed name.
    #[error("{0}")]
    Env(String),
    /// `${env:NAME}` names an environment variable that is not set.
    #[error("environment variable `{0}` (from `${{env:{0}}}`) is not set")]
    EnvUnset(String),
}

fn unset_hint(name: &str) -> &'static str {
    match name {
        "profile_dir" => " (only strings in a profile or config file have a containing directory)",
        "home" => " (no home directory is known)",
        _ => "",
    }
}

/// The repository root of `workspace`: the nearest directory from the
/// workspace up that holds `.git` (a directory, or a file for worktrees and
/// submodules), else the workspace itself.
pub fn repo_root(workspace: &Path) -> PathBuf {
    workspace.ancestors().find(|d| std::fs::symlink_metadata(d.join(".git")).is_ok()).unwrap_or(workspace).to_path_buf()
}

impl Vars {
    /// The same values with `profile_dir` set.
    pub fn with_profile_dir(&self, dir: Option<PathBuf>) -> Self {
        Self { profile_dir: dir, ..self.clone() }
    }

    fn value(&self, name: &str) -> Result<&Path, VarError> {
        let v = match name {
            "workspace" => Some(self.workspace.as_path()),
            "repo_root" => Some(self.repo_root.as_path()),
            "plugin_dir" => Some(self.plugin_dir.as_path()),
            "home" => self.home.as_deref(),
            "profile_dir" => self.profile_dir.as_deref(),
            _ => return Err(VarError::Unknown(name.to_string())),
        };
        v.ok_or_else(|| VarError::Unset(name.to_string()))
    }

    /// Replaces each `${name}` in `s` by its value; `$${` is a literal `${`.
    pub fn expand(&self, s: &str) -> Result<String, VarError> {
        self.expand_with(s, false)
    }

    /// Like [`Vars::expand`], but `${env:NAME}` references and `$${` escapes
    /// are kept as written, for [`resolve_env`] to resolve when the value is
    /// used (MCP server `env` and `headers` values: secrets stay out of the
    /// composed config, and an unset variable only matters to the server
    /// that needs it).
    pub fn expand_keeping_env(&self, s: &str) -> Result<String, VarError> {
        self.expand_with(s, true)
    }

    fn expand_with(&self, s: &str, keep_env: bool) -> Result<String, VarError> {
        let mut out = String::with_capacity(s.len());
        let mut rest = s;
        while let Some(i) = rest.find('$') {
            out.push_str(&rest[..i]);
            let tail = &rest[i..];
            if let Some(after) = tail.strip_prefix("$${") {
                out.push_str(if keep_env { "$${" } else { "${" });
                rest = after;
            } else if let Some(after) = tail.strip_prefix("${") {
                let end = after.find('}').ok_or(VarError::Unterminated)?;
                let name = &after[..end];
                if let Some(var) = name.strip_prefix("env:") {
                    if !keep_env {
                        return Err(VarError::Env(format!(
                            "`${{env:{var}}}` is only allowed in the `env` and `headers` values of [[mcp]] rows"
                        )));
                    }
                    check_env_name(var)?;
                    out.push_str(&tail[..end + 3]);
                } else {
                    let value = self.value(name)?;
                    out.push_str(value.to_str().ok_or_else(|| VarError::NotUtf8(name.to_string()))?);
                }
                rest = &after[end + 1..];
            } else {
                out.push('$');
                rest = &tail[1..];
            }
        }
        out.push_str(rest);
        Ok(out)
    }

    /// Expands a path: variables, then a leading `~` / `~/` (the home
    /// directory); a relative result is resolved against `base`. `.`
    /// components are dropped (nothing is canonicalized: the path need not
    /// exist yet).
    pub fn expand_path(&self, s: &str, base: &Path) -> Result<PathBuf, VarError> {
        let expanded = self.expand(s)?;
        let path = if expanded == "~" {
            self.value("home")?.to_path_buf()
        } else if let Some(rest) = expanded.strip_prefix("~/") {
            self.value("home")?.join(rest)
        } else {
            PathBuf::from(expanded)
        };
        let abs = if path.is_absolute() { path } else { base.join(path) };
        Ok(abs.components().filter(|c| !matches!(c, Component::CurDir)).collect())
    }
}

fn check_env_name(name: &str) -> Result<(), VarError> {
    if !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        Ok(())
    } else {
        Err(VarError::Env(format!("bad environment variable name in `${{env:{name}}}`: use A-Z, a-z, 0-9 and `_`")))
    }
}

/// Resolves what [`Vars::expand_keeping_env`] kept: each `${env:NAME}`
/// becomes `lookup(NAME)` (unset is an error) and `$${` a literal `${`.
pub fn resolve_env(s: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<String, VarError> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(after) = tail.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
        } else if let Some(after) = tail.strip_prefix("${env:") {
            let end = after.find('}').ok_or(VarError::Unterminated)?;
            let name = &after[..end];
            check_env_name(name)?;
            out.push_str(&lookup(name).ok_or_else(|| VarError::EnvUnset(name.to_string()))?);
            rest = &after[end + 1..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> Vars {
        Vars {
            workspace: "/ws".into(),
            repo_root: "/ws".into(),
            plugin_dir: "/plugins".into(),
            home: Some("/home/u".into()),
            profile_dir: None,
        }
    }

    #[test]
    fn expands_known_variables() {
        let v = vars();
        assert_eq!(v.expand("${plugin_dir}/fs.wasm").ok(), Some("/plugins/fs.wasm".to_string()));
        assert_eq!(v.expand("a $b $${x} ${home}").ok(), Some("a $b ${x} /home/u".to_string()));
        assert_eq!(v.expand("${nope}"), Err(VarError::Unknown("nope".into())));
        assert_eq!(v.expand("${profile_dir}"), Err(VarError::Unset("profile_dir".into())));
        assert_eq!(v.expand("${home"), Err(VarError::Unterminated));
    }

    #[test]
    fn repo_root_is_the_nearest_ancestor_with_git_else_the_workspace() {
        let base = std::env::temp_dir().join(format!("wharf-repo-root-{}", std::process::id()));
        let ws = base.join("repo/a/b");
        std::fs::create_dir_all(&ws).expect("creating the workspace");
        let inside = repo_root(&ws);
        // The temp dir itself may sit in a repository; nothing below `base` has `.git` yet.
        assert!(!inside.starts_with(&base) || inside == ws, "{}", inside.display());
        std::fs::create_dir_all(base.join("repo/.git")).expect("creating repo/.git");
        assert_eq!(repo_root(&ws), base.join("repo"));
        std::fs::write(ws.join(".git"), "gitdir: elsewhere").expect("writing .git");
        assert_eq!(repo_root(&ws), ws);
        let _ = std::fs::remove_dir_all(base);
    }

    #[test]
    fn env_references_are_kept_then_resolved() {
        let v = vars();
        assert!(matches!(v.expand("${env:TOKEN}"), Err(VarError::Env(_))));
        let kept = v.expand_keeping_env("Bearer ${env:TOKEN} ${home} $${env:X}").ok();
        assert_eq!(kept.as_deref(), Some("Bearer ${env:TOKEN} /home/u $${env:X}"));
        assert!(matches!(v.expand_keeping_env("${env:BAD-NAME}"), Err(VarError::Env(_))));
        let lookup = |n: &str| (n == "TOKEN").then(|| "s3cret".to_string());
        let resolved = resolve_env(kept.as_deref().unwrap_or(""), lookup);
        assert_eq!(resolved.ok().as_deref(), Some("Bearer s3cret /home/u ${env:X}"));
        assert_eq!(resolve_env("${env:NOPE}", lookup), Err(VarError::EnvUnset("NOPE".into())));
    }

    #[test]
    fn expands_paths() {
        let v = vars();
        let base = Path::new("/base");
        assert_eq!(v.expand_path("~/.wharf/x", base).ok(), Some(PathBuf::from("/home/u/.wharf/x")));
        assert_eq!(v.expand_path("./p/./q", base).ok(), Some(PathBuf::from("/base/p/q")));
        assert_eq!(v.expand_path("${workspace}", base).ok(), Some(PathBuf::from("/ws")));
        let nohome = Vars { home: None, ..vars() };
        assert_eq!(nohome.expand_path("~/x", base), Err(VarError::Unset("home".into())));
    }
}
