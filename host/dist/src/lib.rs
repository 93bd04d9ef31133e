//! Component distribution: OCI registries (CNCF Wasm layout), a
//! content-addressed local store and cosign-compatible signatures. No
//! wasmtime.
//!
//! - [`reference`]: `oci://HOST/REPO:TAG` / `oci://HOST/REPO@sha256:…`.
//! - [`store`]: `ROOT/blobs/sha256/<hex>` plus a reference → digest index
//!   (`ROOT/index.json`), so pinned components load offline.
//! - [`registry`]: push and pull over the OCI distribution API
//!   (`oci-client`), in the CNCF Wasm artifact layout ([`wasm`]).
//! - [`creds`]: registry credentials from the environment or the Docker
//!   config file.
//! - [`sign`]: cosign-compatible signatures (simple-signing payload, ECDSA
//!   P-256, `sha256-<hex>.sig` tags) and key pairs.
//! - [`resolve`]: what the host's load path calls: a row's source and pin
//!   to a verified file in the store.
//! - [`lock`]: writing `digest = …` into profile rows, keeping the file's
//!   formatting.
//! - [`component`]: a component's top-level imports and exports.
//!
//! Everything but [`component`] is the `oci` feature (on by default): a
//! build without it (`cargo xtask demo`'s) compiles no OCI client, HTTP
//! client or signature code.

pub mod component;
#[cfg(feature = "oci")]
pub mod creds;
#[cfg(feature = "oci")]
pub mod digest;
#[cfg(feature = "oci")]
pub mod lock;
#[cfg(feature = "oci")]
pub mod reference;
#[cfg(feature = "oci")]
pub mod registry;
#[cfg(feature = "oci")]
pub mod resolve;
#[cfg(feature = "oci")]
pub mod sign;
#[cfg(feature = "oci")]
pub mod store;
#[cfg(feature = "oci")]
pub mod wasm;

#[cfg(feature = "oci")]
pub use self::{digest::Digest, reference::OciRef, resolve::Resolved, resolve::resolve, store::BlobStore};

/// Largest component layer pulled or pushed: 256 MiB.
pub const MAX_COMPONENT_BYTES: u64 = 256 << 20;
/// Largest config blob or signature payload: 64 KiB.
pub const MAX_SMALL_BLOB_BYTES: u64 = 64 << 10;
/// Largest manifest read from the store: 1 MiB.
pub const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// Everything that can go wrong in distribution. Each message is one line
/// that says what was refused and why.
#[derive(Debug, thiserror::Error)]
pub enum DistError {
    /// A reference that is not `oci://HOST/REPO[:TAG][@sha256:HEX]`.
    #[error("bad OCI reference \"{reference}\": {why}")]
    BadReference {
        /// What was given.
        reference: String,
        /// What is wrong with it.
        why: String,
    },
    /// A digest that is not `sha256:` and 64 lowercase hex digits.
    #[error("bad digest \"{0}\": expected sha256: and 64 lowercase hex digits")]
    BadDigest(String),
    /// Bytes whose digest is not the one they were asked for.
    #[error("{what}: digest {actual} differs from the pinned {expected}")]
    DigestMismatch {
        /// What was being checked.
        what: String,
        /// The digest asked for.
        expected: String,
        /// The digest of the bytes found.
        actual: String,
    },
    /// Something larger than its limit.
    #[error("{what} is larger than {limit} bytes")]
    TooLarge {
        /// What was being read.
        what: String,
        /// The limit.
        limit: u64,
    },
    /// An artifact that is not a Wasm component in the CNCF layout.
    #[error("not a Wasm component artifact: {0}")]
    Layout(String),
    /// Nothing in the local store for a reference, and no registry reached.
    #[error("{0}")]
    NotInStore(String),
    /// A signature check that refused the component.
    #[error("signature check refused {reference}: {why}")]
    Signature {
        /// The component.
        reference: String,
        /// The one-line reason.
        why: String,
    },
    /// A key file that cannot be used.
    #[error("key {path}: {why}")]
    Key {
        /// The key file.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// The registry refused or failed.
    #[error("registry {registry}: {why}")]
    Registry {
        /// The registry host.
        registry: String,
        /// What it said.
        why: String,
    },
    /// A profile file that cannot be edited.
    #[error("{0}")]
    Profile(String),
    /// Local I/O.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

impl DistError {
    #[cfg_attr(not(feature = "oci"), allow(dead_code))]
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io { what: what.into(), source }
    }
}

/// `Result` with [`DistError`].
pub type Result<T, E = DistError> = std::result::Result<T, E>;
