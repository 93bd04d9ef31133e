//! Plugin rows with an OCI `source`: the pinned, verified component file.

use std::path::PathBuf;

use wharf_config::{Config, PluginRow};
use wharf_dist::{BlobStore, Digest, OciRef, sign};

use crate::RowError;

/// The component file of a row with a `source`: resolved through the local
/// OCI store (pulling only what it lacks), refusing any bytes whose digest
/// is not the pin, and, with a `verify` key on the row or profile-wide,
/// anything without a cosign signature that verifies. The one-line reason
/// of a refusal is logged and returned.
pub fn resolve_row(row: &PluginRow, config: &Config) -> Result<PathBuf, RowError> {
    let fail = |e: String| {
        tracing::error!(plugin = %row.id, "refused: {e}");
        RowError { row: row.id.clone(), reason: e }
    };
    let source = row.source.as_deref().ok_or_else(|| fail("no `source`".into()))?;
    let r = OciRef::parse(source).map_err(|e| fail(e.to_string()))?;
    let pin = row.digest.as_deref().map(Digest::parse).transpose().map_err(|e| fail(e.to_string()))?;
    if pin.is_none() && r.digest.is_none() {
        tracing::warn!(plugin = %row.id, "{source} is not pinned: `wharf plugin lock` writes its digest");
    }
    let key = row
        .verify
        .as_ref()
        .or(config.verify.as_ref())
        .map(|v| sign::load_verifying_key(&v.key))
        .transpose()
        .map_err(|e| fail(e.to_string()))?;
    let store = BlobStore::open_default().map_err(|e| fail(e.to_string()))?;
    // Called from sync code, inside or outside a runtime: a thread of its own.
    let resolved = std::thread::scope(|s| {
        s.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
            rt.block_on(wharf_dist::resolve(&store, &r, pin.as_ref(), key.as_ref())).map_err(|e| e.to_string())
        })
        .join()
        .unwrap_or_else(|_| Err("the resolver thread panicked".into()))
    })
    .map_err(fail)?;
    tracing::info!(plugin = %row.id, digest = %resolved.manifest, verified = resolved.verified, "resolved {source}");
    Ok(resolved.path)
}
