//! What the `wharf` binary reads from the environment for the libraries,
//! which take everything as values. The knobs:
//!
//! | variable | effect | default |
//! |---|---|---|
//! | `WHARF_HOME`, `HOME` | session directory | `~/.wharf/sessions` |

use std::path::PathBuf;

/// The default session directory: `$WHARF_HOME/sessions`, else
/// `$HOME/.wharf/sessions`.
pub fn default_session_dir() -> Result<PathBuf, NoHome> {
    if let Some(h) = std::env::var_os("WHARF_HOME").filter(|h| !h.is_empty()) {
        return Ok(PathBuf::from(h).join("sessions"));
    }
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(h) => Ok(PathBuf::from(h).join(".wharf").join("sessions")),
        None => Err(NoHome),
    }
}

/// Neither `$WHARF_HOME` nor `$HOME` is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoHome;

impl std::fmt::Display for NoHome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("cannot find the session directory: neither $WHARF_HOME nor $HOME is set")
    }
}

impl std::error::Error for NoHome {}
