//! Finding stored sessions (by any unique part of the id, the latest of a
//! workspace) and opening the store a profile names.

use std::path::{Path, PathBuf};

use anyhow::Result;
use wharf_core::events::SessionStart;
use wharf_core::store::SessionStore;

/// The stored session `part` names: an exact id, else the only id that
/// starts with it, else the only id that holds it anywhere (its random
/// suffix, say). Several matches are an error listing them.
pub fn resolve_session(store: &SessionStore, part: &str) -> Result<String> {
    anyhow::ensure!(!part.trim().is_empty(), "empty session id");
    if store.exists(part).unwrap_or(false) {
        return Ok(part.to_string());
    }
    let list = store.list()?;
    let ids = || list.iter().map(|s| s.id.as_str());
    let mut matches: Vec<&str> = ids().filter(|id| id.starts_with(part)).collect();
    if matches.is_empty() {
        matches = ids().filter(|id| id.contains(part)).collect();
    }
    match matches.as_slice() {
        [one] => Ok((*one).to_string()),
        // Typed, so surfaces can tell "not found" (the web API's 404).
        [] => Err(wharf_core::store::StoreError::NotFound(part.to_string()).into()),
        many => {
            const SHOWN: usize = 10;
            let mut lines: Vec<String> = many.iter().take(SHOWN).map(|id| format!("  {id}")).collect();
            if many.len() > SHOWN {
                lines.push(format!("  … and {} more", many.len() - SHOWN));
            }
            anyhow::bail!(
                "`{part}` matches {} sessions; type more of the id (any unique part of it works):\n{}",
                many.len(),
                lines.join("\n")
            )
        }
    }
}

/// Whether a session header's workspace is `workspace` (absolute).
pub fn same_workspace(header: &SessionStart, workspace: &Path) -> bool {
    header.workspace.as_deref().is_some_and(|theirs| {
        Path::new(theirs) == workspace || std::fs::canonicalize(theirs).is_ok_and(|p| p == workspace)
    })
}

/// The newest top-level session (not a subagent's) whose header names
/// `workspace`.
pub fn latest_session(store: &SessionStore, workspace: &Path) -> Result<Option<String>> {
    let mut list = store.list()?;
    list.retain(|s| s.header.spawned_by.is_none() && same_workspace(&s.header, workspace));
    Ok(list.into_iter().max_by(|a, b| (&a.header.created, &a.id).cmp(&(&b.header.created, &b.id))).map(|s| s.id))
}

/// Whether `s` names a PostgreSQL store (`postgres://…`) rather than a
/// directory, whether or not this build has that store.
pub fn is_postgres_url(s: &str) -> bool {
    s.starts_with("postgres://") || s.starts_with("postgresql://")
}

/// The session store a host uses: `session.store` when set (`postgres://…`),
/// else the JSONL directory `dir`.
pub fn open_store(store: Option<&str>, dir: PathBuf) -> Result<SessionStore> {
    match store.map(str::trim).filter(|s| !s.is_empty()) {
        None => Ok(SessionStore::new(dir)),
        #[cfg(feature = "postgres")]
        Some(url) if is_postgres_url(url) => Ok(wharf_store_pg::store(url, wharf_store_pg::PgOptions::default())?),
        #[cfg(not(feature = "postgres"))]
        Some(url) if is_postgres_url(url) => anyhow::bail!(
            "session.store = \"{}\": this wharf was built without the PostgreSQL store ({})",
            url.split('@').next_back().unwrap_or_default(),
            crate::FULL_BUILD
        ),
        Some(other) => anyhow::bail!(
            "session.store = \"{other}\" is not a store this build knows (expected postgres://…; leave it unset for the JSONL files in session.dir)"
        ),
    }
}
