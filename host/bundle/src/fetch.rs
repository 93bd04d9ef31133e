//! Git sources: `git clone` into a directory and the commit it checked out.
//! Runs the `git` program with prompts off; nothing here is sandboxed (it
//! only fetches; nothing fetched runs until a host loads the bundle).

use std::path::Path;
use std::process::Command;

use crate::BundleError;

/// Whether `s` names a git repository rather than a local directory or a
/// marketplace entry: `https://`, `http://`, `ssh://`, `git://`, `file://`,
/// `git@HOST:…`, or anything ending in `.git`.
pub fn is_git_url(s: &str) -> bool {
    ["https://", "http://", "ssh://", "git://", "file://", "git@"].iter().any(|p| s.starts_with(p))
        || s.trim_end_matches('/').ends_with(".git")
}

fn git(args: &[&str], dir: Option<&Path>) -> Result<String, BundleError> {
    let mut c = Command::new("git");
    if let Some(d) = dir {
        c.arg("-C").arg(d);
    }
    c.args(args).env("GIT_TERMINAL_PROMPT", "0").env("GIT_ASKPASS", "true");
    let out = c.output().map_err(|e| BundleError::Git(format!("cannot run git: {e}")))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let err: String = err.trim().chars().take(500).collect();
        return Err(BundleError::Git(format!("git {} failed: {err}", args.first().copied().unwrap_or_default())));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Clones `url` into `dest` (which must not exist), checks out `rev` when
/// given, and returns the commit checked out.
pub fn clone(url: &str, rev: Option<&str>, dest: &Path) -> Result<String, BundleError> {
    if dest.exists() {
        return Err(BundleError::Refused(format!("{} exists already", dest.display())));
    }
    let d = dest.to_string_lossy();
    git(&["clone", "--quiet", "--", url, &d], None)?;
    if let Some(r) = rev {
        git(&["checkout", "--quiet", "--detach", r], Some(dest))?;
    }
    git(&["rev-parse", "HEAD"], Some(dest))
}
