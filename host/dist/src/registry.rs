//! Push and pull over the OCI distribution API (`oci-client`), in the CNCF
//! Wasm layout, through the local [`Store`]. Registries on loopback
//! (`localhost`, `127.x`, `[::1]`) are spoken to over plain HTTP, every
//! other one over HTTPS (rustls, ring). Blobs are pulled by digest only
//! (descriptor `urls` are never followed), bounded by their descriptor's
//! size and the limits in the crate root, and checked against their digest
//! before they enter the store.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use oci_client::Client;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;

use crate::reference::shown;
use crate::sign::{PAYLOAD_MEDIA_TYPE, SIGNATURE_ANNOTATION, SIGNATURE_CONFIG_MEDIA_TYPE};
use crate::wasm::{self, MANIFEST_MEDIA_TYPE};
use crate::{Digest, DistError, MAX_COMPONENT_BYTES, MAX_MANIFEST_BYTES, MAX_SMALL_BLOB_BYTES, OciRef, Result, Store};

/// A client for one registry.
pub struct Registry {
    client: Client,
    registry: String,
    auth: RegistryAuth,
}

/// One signature found in a signature artifact.
#[derive(Debug, Clone)]
pub struct StoredSignature {
    /// The payload blob (in the store).
    pub payload: Digest,
    /// The base64 signature from the layer annotation.
    pub signature: String,
}

impl Registry {
    /// A client for the registry of `r`, with its credentials
    /// ([`crate::creds::auth_for`]).
    pub fn for_ref(r: &OciRef) -> Self {
        // reqwest is built without a rustls provider: the tree uses ring.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let config = ClientConfig {
            protocol: if r.is_loopback() { ClientProtocol::Http } else { ClientProtocol::Https },
            connect_timeout: Some(Duration::from_secs(10)),
            read_timeout: Some(Duration::from_secs(60)),
            ..ClientConfig::default()
        };
        Self { client: Client::new(config), registry: r.registry.clone(), auth: crate::creds::auth_for(&r.registry) }
    }

    fn err(&self, e: impl std::fmt::Display) -> DistError {
        DistError::Registry { registry: self.registry.clone(), why: shown(&e.to_string().replace('\n', " ")) }
    }

    async fn login(&self) {
        self.client.store_auth_if_needed(&self.registry, &self.auth).await;
    }

    async fn blob(&self, r: &OciRef, digest: &Digest, limit: u64, what: &str) -> Result<Vec<u8>> {
        let mut out = Bounded { buf: Vec::new(), limit, over: false };
        self.client.pull_blob(&r.to_client(), digest.as_str(), &mut out).await.map_err(|e| {
            if out.over {
                DistError::TooLarge { what: what.to_string(), limit }
            } else {
                self.err(format!("{what} {digest}: {e}"))
            }
        })?;
        digest.check(&out.buf, what)?;
        Ok(out.buf)
    }

    /// The raw manifest at `r` and its digest; `None` when the registry has
    /// no such manifest.
    async fn manifest(&self, r: &OciRef) -> Result<Option<(Vec<u8>, Digest)>> {
        self.login().await;
        let got = self.client.pull_manifest_raw(&r.to_client(), &self.auth, &[MANIFEST_MEDIA_TYPE]).await;
        let (bytes, digest) = match got {
            Ok(v) => v,
            Err(e) if is_not_found(&e) => return Ok(None),
            Err(e) => return Err(self.err(format!("{r}: {e}"))),
        };
        if bytes.len() as u64 > MAX_MANIFEST_BYTES {
            return Err(DistError::TooLarge { what: format!("the manifest of {r}"), limit: MAX_MANIFEST_BYTES });
        }
        // Whatever the registry says, the digest is that of the bytes.
        let digest = Digest::parse(&digest).unwrap_or_else(|_| Digest::of(&bytes));
        digest.check(&bytes, &format!("the manifest of {r}"))?;
        if let Some(want) = &r.digest {
            want.check(&bytes, &format!("the manifest of {r}"))?;
        }
        Ok(Some((bytes.to_vec(), digest)))
    }

    /// Pushes `component` to `r` (a tag, or a digest) in the CNCF Wasm
    /// layout and keeps a copy in `store`; returns the manifest digest.
    pub async fn push_component(&self, r: &OciRef, component: &[u8], store: &Store) -> Result<Digest> {
        if component.len() as u64 > MAX_COMPONENT_BYTES {
            return Err(DistError::TooLarge { what: "the component".into(), limit: MAX_COMPONENT_BYTES });
        }
        let config = wasm::config_for(component)?;
        let manifest = wasm::manifest_for(component, &config)?;
        let digest = Digest::of(&manifest);
        if let Some(want) = &r.digest
            && want != &digest
        {
            return Err(DistError::DigestMismatch {
                what: format!("push to {r}"),
                expected: want.to_string(),
                actual: digest.to_string(),
            });
        }
        self.login().await;
        // Pushing needs the push scope; the first call fetches its token.
        let cr = r.to_client();
        self.client
            .auth(&cr, &self.auth, oci_client::RegistryOperation::Push)
            .await
            .map_err(|e| self.err(format!("log in for push: {e}")))?;
        for bytes in [component, &config] {
            let d = Digest::of(bytes);
            self.client
                .push_blob(&cr, bytes.to_vec(), d.as_str())
                .await
                .map_err(|e| self.err(format!("push blob {d}: {e}")))?;
        }
        let content_type = reqwest_header(MANIFEST_MEDIA_TYPE)?;
        self.client
            .push_manifest_raw(&cr, manifest.clone(), content_type)
            .await
            .map_err(|e| self.err(format!("push manifest to {r}: {e}")))?;
        store.put(component)?;
        store.put(&config)?;
        store.put(&manifest)?;
        if let Some(key) = r.tag_key() {
            store.record(&key, &digest)?;
        }
        Ok(digest)
    }

    /// Pulls the component at `r` (tag or digest) into `store` (manifest,
    /// config, layer; each checked) and returns the manifest digest. A tag
    /// is recorded in the store's index.
    pub async fn fetch(&self, r: &OciRef, store: &Store) -> Result<Digest> {
        let (bytes, digest) = self.manifest(r).await?.ok_or_else(|| self.err(format!("{r}: no such manifest")))?;
        let m = wasm::parse_manifest(&bytes).map_err(|e| match e {
            DistError::Layout(why) => DistError::Layout(format!("{r}: {why}")),
            other => other,
        })?;
        let at = r.at_digest(&digest);
        if store.read(&m.config, MAX_SMALL_BLOB_BYTES, "config").is_err() {
            let config = self.blob(&at, &m.config, m.config_size.min(MAX_SMALL_BLOB_BYTES), "the config blob").await?;
            store.put_checked(&m.config, &config, "the config blob")?;
        }
        if store.read(&m.layer, MAX_COMPONENT_BYTES, "layer").is_err() {
            let layer = self.blob(&at, &m.layer, m.layer_size, "the component layer").await?;
            store.put_checked(&m.layer, &layer, "the component layer")?;
        }
        store.put(&bytes)?;
        if let Some(key) = r.tag_key() {
            store.record(&key, &digest)?;
        }
        Ok(digest)
    }

    /// Pulls the cosign signature artifact of `digest` (the
    /// `sha256-<hex>.sig` tag in the repository of `r`) into `store`.
    /// `false` when there is none.
    pub async fn fetch_signatures(&self, r: &OciRef, digest: &Digest, store: &Store) -> Result<bool> {
        let sig_ref = r.signature_of(digest);
        let Some((bytes, sig_digest)) = self.manifest(&sig_ref).await? else { return Ok(false) };
        let m: oci_client::manifest::OciImageManifest =
            serde_json::from_slice(&bytes).map_err(|e| self.err(format!("{sig_ref}: bad manifest: {e}")))?;
        let at = sig_ref.at_digest(&sig_digest);
        for layer in m.layers.iter().filter(|l| l.media_type == PAYLOAD_MEDIA_TYPE).take(64) {
            let d = Digest::parse(&layer.digest)?;
            let size = u64::try_from(layer.size).unwrap_or(u64::MAX);
            if size > MAX_SMALL_BLOB_BYTES {
                continue;
            }
            if store.read(&d, MAX_SMALL_BLOB_BYTES, "payload").is_err() {
                let payload = self.blob(&at, &d, size, "a signature payload").await?;
                store.put_checked(&d, &payload, "a signature payload")?;
            }
        }
        store.put(&bytes)?;
        if let Some(key) = sig_ref.tag_key() {
            store.record(&key, &sig_digest)?;
        }
        Ok(true)
    }

    /// Adds a signature of `digest` (its simple-signing `payload` and the
    /// base64 `signature`) to the `sha256-<hex>.sig` artifact in the
    /// repository of `r`, keeping the signatures already there. Returns
    /// the signature manifest's digest.
    pub async fn push_signature(
        &self,
        r: &OciRef,
        digest: &Digest,
        payload: &[u8],
        signature: &str,
        store: &Store,
    ) -> Result<Digest> {
        let sig_ref = r.signature_of(digest);
        let mut layers: Vec<serde_json::Value> = Vec::new();
        if let Some((bytes, _)) = self.manifest(&sig_ref).await? {
            let m: serde_json::Value =
                serde_json::from_slice(&bytes).map_err(|e| self.err(format!("{sig_ref}: {e}")))?;
            layers = m.get("layers").and_then(|l| l.as_array()).cloned().unwrap_or_default();
        }
        let payload_digest = Digest::of(payload);
        let same = |l: &serde_json::Value| {
            l["digest"] == payload_digest.as_str() && l["annotations"][SIGNATURE_ANNOTATION] == signature
        };
        if !layers.iter().any(same) {
            layers.push(serde_json::json!({
                "mediaType": PAYLOAD_MEDIA_TYPE,
                "digest": payload_digest.to_string(),
                "size": payload.len(),
                "annotations": {SIGNATURE_ANNOTATION: signature},
            }));
        }
        let diff_ids: Vec<&serde_json::Value> = layers.iter().map(|l| &l["digest"]).collect();
        let config = serde_json::to_vec(&serde_json::json!({
            "architecture": "", "os": "", "config": {},
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        }))
        .map_err(|e| self.err(e))?;
        let manifest = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "config": {"mediaType": SIGNATURE_CONFIG_MEDIA_TYPE, "digest": Digest::of(&config).to_string(), "size": config.len()},
            "layers": layers,
        }))
        .map_err(|e| self.err(e))?;
        let cr = sig_ref.to_client();
        self.client
            .auth(&cr, &self.auth, oci_client::RegistryOperation::Push)
            .await
            .map_err(|e| self.err(format!("log in for push: {e}")))?;
        for bytes in [payload, &config] {
            let d = Digest::of(bytes);
            self.client
                .push_blob(&cr, bytes.to_vec(), d.as_str())
                .await
                .map_err(|e| self.err(format!("push blob {d}: {e}")))?;
        }
        self.client
            .push_manifest_raw(&cr, manifest.clone(), reqwest_header(MANIFEST_MEDIA_TYPE)?)
            .await
            .map_err(|e| self.err(format!("push manifest to {sig_ref}: {e}")))?;
        let sig_digest = store.put(&manifest)?;
        store.put(payload)?;
        if let Some(key) = sig_ref.tag_key() {
            store.record(&key, &sig_digest)?;
        }
        Ok(sig_digest)
    }
}

fn reqwest_header(v: &str) -> Result<http::HeaderValue> {
    http::HeaderValue::from_str(v).map_err(|e| DistError::Layout(e.to_string()))
}

/// The signatures of `digest` in the store (from the last
/// [`Registry::fetch_signatures`] or [`Registry::push_signature`]).
pub fn stored_signatures(store: &Store, r: &OciRef, digest: &Digest) -> Result<Option<Vec<StoredSignature>>> {
    let Some(key) = r.signature_of(digest).tag_key() else { return Ok(None) };
    let Some(sig_digest) = store.lookup(&key) else { return Ok(None) };
    let bytes = store.read_manifest(&sig_digest)?;
    let m: oci_client::manifest::OciImageManifest = serde_json::from_slice(&bytes)
        .map_err(|e| DistError::Layout(format!("the stored signature manifest of {digest}: {e}")))?;
    let mut out = Vec::new();
    for layer in m.layers.iter().filter(|l| l.media_type == PAYLOAD_MEDIA_TYPE) {
        let signature =
            layer.annotations.as_ref().and_then(|a| a.get(SIGNATURE_ANNOTATION)).cloned().unwrap_or_default();
        out.push(StoredSignature { payload: Digest::parse(&layer.digest)?, signature });
    }
    Ok(Some(out))
}

fn is_not_found(e: &OciDistributionError) -> bool {
    match e {
        OciDistributionError::RegistryError { envelope, .. } => {
            envelope.errors.iter().any(|x| matches!(x.code, OciErrorCode::ManifestUnknown | OciErrorCode::NameUnknown))
        }
        OciDistributionError::ServerError { code, .. } => *code == 404,
        OciDistributionError::ImageManifestNotFoundError(_) => true,
        _ => false,
    }
}

/// An `AsyncWrite` into memory that fails past `limit` bytes.
struct Bounded {
    buf: Vec<u8>,
    limit: u64,
    over: bool,
}

impl tokio::io::AsyncWrite for Bounded {
    fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        if (self.buf.len() + data.len()) as u64 > self.limit {
            let limit = self.limit;
            self.over = true;
            return Poll::Ready(Err(std::io::Error::other(format!("more than {limit} bytes"))));
        }
        self.buf.extend_from_slice(data);
        Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
