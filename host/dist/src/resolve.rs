//! The load path: a profile row's `source` (and `digest` pin, and `verify`
//! key) to a checked component file in the local store, pulling only what
//! the store lacks.
//!
//! - The digest is the pin, else the source's `@sha256:…`, else the tag as
//!   the store's index last saw it (a pull or push), else the registry's
//!   answer for the tag (then recorded). So once a tag was pulled, a row
//!   without a pin keeps loading that digest until the next `wharf plugin
//!   pull`, and a pinned row never follows a tag.
//! - The manifest and the layer are read from the store and checked
//!   against their digests on every resolve: changed bytes are refused.
//! - With a key, a cosign signature of the digest must verify, from the
//!   store first (offline), else after fetching the signature artifact.

use std::path::PathBuf;

use p256::ecdsa::VerifyingKey;

use crate::registry::{Registry, stored_signatures};
use crate::sign::{self, Mismatch};
use crate::{BlobStore, Digest, DistError, MAX_COMPONENT_BYTES, MAX_SMALL_BLOB_BYTES, OciRef, Result, wasm};

/// A component resolved to the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The manifest digest (what rows pin and signatures sign).
    pub manifest: Digest,
    /// The component layer's digest.
    pub layer: Digest,
    /// The component file in the store.
    pub path: PathBuf,
    /// Whether a signature was verified.
    pub verified: bool,
}

/// Resolves `manifest` from the store alone, checking every byte.
pub fn resolve_local(store: &BlobStore, manifest: &Digest) -> Result<Resolved> {
    let bytes = store.read_manifest(manifest)?;
    let m = wasm::parse_manifest(&bytes)?;
    store.read(&m.layer, MAX_COMPONENT_BYTES, "the component layer")?;
    Ok(Resolved { manifest: manifest.clone(), path: store.blob_path(&m.layer), layer: m.layer, verified: false })
}

/// Checks the stored signatures of `digest` (repository of `r`) with `key`.
pub fn verify_local(store: &BlobStore, r: &OciRef, digest: &Digest, key: &VerifyingKey) -> Result<()> {
    let refuse = |why: String| DistError::Signature { reference: r.at_digest(digest).to_string(), why };
    let sigs = match stored_signatures(store, r, digest) {
        Ok(Some(s)) => s,
        Ok(None) => return Err(refuse(sign::reason(&[]))),
        Err(e) => return Err(refuse(format!("unreadable signature artifact: {e}"))),
    };
    let mut mismatches = Vec::new();
    for s in &sigs {
        let payload = match store.read(&s.payload, MAX_SMALL_BLOB_BYTES, "a signature payload") {
            Ok(p) => p,
            Err(e) => {
                mismatches.push(Mismatch::Malformed(e.to_string()));
                continue;
            }
        };
        match sign::verify(key, &payload, &s.signature, digest) {
            Ok(()) => return Ok(()),
            Err(m) => mismatches.push(m),
        }
    }
    Err(refuse(sign::reason(&mismatches)))
}

/// Resolves a row: see the module docs. `pin` is the row's `digest`, `key`
/// its verify key.
pub async fn resolve(
    store: &BlobStore,
    source: &OciRef,
    pin: Option<&Digest>,
    key: Option<&VerifyingKey>,
) -> Result<Resolved> {
    if let (Some(p), Some(d)) = (pin, &source.digest)
        && p != d
    {
        return Err(DistError::DigestMismatch {
            what: format!("source {source}"),
            expected: p.to_string(),
            actual: d.to_string(),
        });
    }
    let digest = match pin.or(source.digest.as_ref()) {
        Some(d) => d.clone(),
        None => match source.tag_key().and_then(|k| store.lookup(&k)) {
            Some(d) => d,
            None => Registry::for_ref(source).await?.fetch(source, store).await?,
        },
    };
    let mut resolved = match resolve_local(store, &digest) {
        Ok(r) => r,
        Err(DistError::NotInStore(_)) => {
            Registry::for_ref(source).await?.fetch(&source.at_digest(&digest), store).await?;
            resolve_local(store, &digest)?
        }
        Err(e) => return Err(e),
    };
    if let Some(key) = key {
        if let Err(local) = verify_local(store, source, &digest, key) {
            // The signature may be new: fetch the artifact and check again.
            match async { Registry::for_ref(source).await?.fetch_signatures(source, &digest, store).await }.await {
                Ok(_) => verify_local(store, source, &digest, key)?,
                Err(e) => {
                    return Err(match local {
                        DistError::Signature { reference, why } => {
                            DistError::Signature { reference, why: format!("{why}; and the registry: {e}") }
                        }
                        other => other,
                    });
                }
            }
        }
        resolved.verified = true;
    }
    Ok(resolved)
}
