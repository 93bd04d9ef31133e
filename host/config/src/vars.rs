//! `${…}` variables and `~/` in configuration strings.

use std::path::{Component, Path, PathBuf};

/// The variable names a string may use.
pub const VARIABLES: &[&str] = &["workspace", "plugin_dir", "home", "profile_dir"];

/// The values of the variables a configuration string may use. The caller
/// supplies them; [`crate::load`] builds them from its [`crate::LoadOptions`]
/// and sets `profile_dir` per layer file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vars {
    /// `${workspace}`: the session workspace directory.
    pub workspace: PathBuf,
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
    #[error("unknown variable `${{{0}}}` (known: workspace, plugin_dir, home, profile_dir)")]
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
}

fn unset_hint(name: &str) -> &'static str {
    match name {
        "profile_dir" => " (only strings in a profile or config file have a containing directory)",
        "home" => " (no home directory is known)",
        _ => "",
    }
}

impl Vars {
    /// The same values with `profile_dir` set.
    pub fn with_profile_dir(&self, dir: Option<PathBuf>) -> Self {
        Self { profile_dir: dir, ..self.clone() }
    }

    fn value(&self, name: &str) -> Result<&Path, VarError> {
        let v = match name {
            "workspace" => Some(self.workspace.as_path()),
            "plugin_dir" => Some(self.plugin_dir.as_path()),
            "home" => self.home.as_deref(),
            "profile_dir" => self.profile_dir.as_deref(),
            _ => return Err(VarError::Unknown(name.to_string())),
        };
        v.ok_or_else(|| VarError::Unset(name.to_string()))
    }

    /// Replaces each `${name}` in `s` by its value; `$${` is a literal `${`.
    pub fn expand(&self, s: &str) -> Result<String, VarError> {
        let mut out = String::with_capacity(s.len());
        let mut rest = s;
        while let Some(i) = rest.find('$') {
            out.push_str(&rest[..i]);
            let tail = &rest[i..];
            if let Some(after) = tail.strip_prefix("$${") {
                out.push_str("${");
                rest = after;
            } else if let Some(after) = tail.strip_prefix("${") {
                let end = after.find('}').ok_or(VarError::Unterminated)?;
                let name = &after[..end];
                let value = self.value(name)?;
                out.push_str(value.to_str().ok_or_else(|| VarError::NotUtf8(name.to_string()))?);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> Vars {
        Vars { workspace: "/ws".into(), plugin_dir: "/plugins".into(), home: Some("/home/u".into()), profile_dir: None }
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
