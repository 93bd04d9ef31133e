//! Push and pull over the OCI distribution API, in the CNCF Wasm layout,
//! through the local [`BlobStore`]. Registries on loopback (`localhost`,
//! `127.x`, `[::1]`) are spoken to over plain HTTP, every other one over
//! HTTPS (rustls, ring).
//!
//! Pulls (manifests, config blobs, layers, signature payloads) are plain
//! `GET`s made here, so every response is bounded before it is read: a
//! `Content-Length` over the limit is refused before the body is touched,
//! and the body is read chunk by chunk and refused as soon as it passes the
//! limit (manifests [`MAX_MANIFEST_BYTES`]; a blob its descriptor's size,
//! itself within [`MAX_SMALL_BLOB_BYTES`] or [`MAX_COMPONENT_BYTES`]; an
//! error body 4 KiB, for its message). Blobs are pulled by digest only
//! (descriptor `urls` are never followed) and checked against their digest
//! before they enter the store. `oci-client` does the token handshake and
//! the pushes.

use std::collections::HashMap;
use std::time::Duration;

use oci_client::Client;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;

use crate::reference::shown;
use crate::sign::{PAYLOAD_MEDIA_TYPE, SIGNATURE_ANNOTATION, SIGNATURE_CONFIG_MEDIA_TYPE};
use crate::wasm::{self, MANIFEST_MEDIA_TYPE};
use crate::{
    BlobStore, Digest, DistError, MAX_COMPONENT_BYTES, MAX_MANIFEST_BYTES, MAX_SMALL_BLOB_BYTES, OciRef, Result,
};

/// Longest error body read from a registry, for its message.
const MAX_ERROR_BODY: u64 = 4 << 10;

/// A client for one registry.
pub struct Registry {
    client: Client,
    http: reqwest::Client,
    scheme: &'static str,
    registry: String,
    auth: RegistryAuth,
    /// Pull tokens by repository (`None`: the registry asked for none).
    tokens: tokio::sync::Mutex<HashMap<String, Option<String>>>,
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
    /// ([`crate::creds::auth_for`]: the environment, the Docker config file
    /// or its credential helper).
    pub async fn for_ref(r: &OciRef) -> Result<Self> {
        // reqwest is built without a rustls provider: the tree uses ring.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let (connect, read) = (Duration::from_secs(10), Duration::from_secs(60));
        let config = ClientConfig {
            protocol: if r.is_loopback() { ClientProtocol::Http } else { ClientProtocol::Https },
            connect_timeout: Some(connect),
            read_timeout: Some(read),
            ..ClientConfig::default()
        };
        let registry = r.registry.clone();
        let http = reqwest::Client::builder()
            .connect_timeout(connect)
            .read_timeout(read)
            .user_agent(concat!("wharf/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| DistError::Registry { registry: registry.clone(), why: format!("HTTP client: {e}") })?;
        Ok(Self {
            client: Client::new(config),
            http,
            scheme: if r.is_loopback() { "http" } else { "https" },
            auth: crate::creds::auth_for(&registry).await,
            registry,
            tokens: tokio::sync::Mutex::new(HashMap::new()),
        })
    }

    fn err(&self, e: impl std::fmt::Display) -> DistError {
        DistError::Registry { registry: self.registry.clone(), why: shown(&e.to_string().replace('\n', " ")) }
    }

    async fn login(&self) {
        self.client.store_auth_if_needed(&self.registry, &self.auth).await;
    }

    /// `req` with the credentials for pulling from the repository of `r`:
    /// the registry's bearer token (fetched once per repository), else the
    /// configured ones.
    async fn authorized(&self, r: &OciRef, req: reqwest::RequestBuilder) -> Result<reqwest::RequestBuilder> {
        let mut tokens = self.tokens.lock().await;
        let token = match tokens.get(&r.repository) {
            Some(t) => t.clone(),
            None => {
                let t = self
                    .client
                    .auth(&r.to_client(), &self.auth, oci_client::RegistryOperation::Pull)
                    .await
                    .map_err(|e| self.err(format!("log in for {r}: {e}")))?;
                tokens.insert(r.repository.clone(), t.clone());
                t
            }
        };
        Ok(match (token.as_ref(), &self.auth) {
            (Some(t), _) | (None, RegistryAuth::Bearer(t)) => req.bearer_auth(t),
            (None, RegistryAuth::Basic(user, pass)) => req.basic_auth(user, Some(pass)),
            (None, RegistryAuth::Anonymous) => req,
        })
    }

    /// `GET /v2/REPO/{kind}/{reference}`, its body read only up to `limit`
    /// bytes: `None` on 404; a `Content-Length` or a body over `limit` is
    /// [`DistError::TooLarge`] (the body is not read past it); any other
    /// failure names the status and the start of the registry's message.
    async fn get_bounded(
        &self,
        r: &OciRef,
        kind: &str,
        reference: &str,
        accept: Option<&str>,
        limit: u64,
        what: &str,
    ) -> Result<Option<Vec<u8>>> {
        let cr = r.to_client();
        let url = format!("{}://{}/v2/{}/{kind}/{reference}", self.scheme, cr.resolve_registry(), cr.repository());
        let mut req = self.http.get(&url);
        if let Some(a) = accept {
            req = req.header(http::header::ACCEPT, a);
        }
        let mut res = self.authorized(r, req).await?.send().await.map_err(|e| self.err(format!("{what}: {e}")))?;
        let status = res.status();
        if status == http::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !status.is_success() {
            let body = read_limited(&mut res, MAX_ERROR_BODY).await.unwrap_or_default();
            let text = String::from_utf8_lossy(&body.0);
            return Err(self.err(format!("{what}: HTTP {status}: {}", text.trim())));
        }
        if res.content_length().is_some_and(|n| n > limit) {
            return Err(DistError::TooLarge { what: what.to_string(), limit });
        }
        match read_limited(&mut res, limit).await {
            Ok((body, false)) => Ok(Some(body)),
            Ok((_, true)) => Err(DistError::TooLarge { what: what.to_string(), limit }),
            Err(e) => Err(self.err(format!("{what}: {e}"))),
        }
    }

    /// The blob `digest` of the repository of `r`, at most `limit` bytes
    /// (its descriptor's size), checked against its digest.
    async fn blob(&self, r: &OciRef, digest: &Digest, limit: u64, what: &str) -> Result<Vec<u8>> {
        let bytes = self
            .get_bounded(r, "blobs", digest.as_str(), None, limit, what)
            .await?
            .ok_or_else(|| self.err(format!("{what} {digest}: not found")))?;
        digest.check(&bytes, what)?;
        Ok(bytes)
    }

    /// The raw manifest at `r` and its digest; `None` when the registry has
    /// no such manifest.
    async fn manifest(&self, r: &OciRef) -> Result<Option<(Vec<u8>, Digest)>> {
        let reference = match (&r.digest, &r.tag) {
            (Some(d), _) => d.to_string(),
            (None, Some(t)) => t.clone(),
            (None, None) => "latest".to_string(),
        };
        let what = format!("the manifest of {r}");
        let Some(bytes) =
            self.get_bounded(r, "manifests", &reference, Some(MANIFEST_MEDIA_TYPE), MAX_MANIFEST_BYTES, &what).await?
        else {
            return Ok(None);
        };
        // Whatever the registry says, the digest is that of the bytes.
        let digest = Digest::of(&bytes);
        if let Some(want) = &r.digest {
            want.check(&bytes, &what)?;
        }
        Ok(Some((bytes, digest)))
    }

    /// Pushes `component` to `r` (a tag, or a digest) in the CNCF Wasm
    /// layout and keeps a copy in `store`; returns the manifest digest.
    pub async fn push_component(&self, r: &OciRef, component: &[u8], store: &BlobStore) -> Result<Digest> {
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
    pub async fn fetch(&self, r: &OciRef, store: &BlobStore) -> Result<Digest> {
        let (bytes, digest) = self.manifest(r).await?.ok_or_else(|| self.err(format!("{r}: no such manifest")))?;
        let m = wasm::parse_manifest(&bytes).map_err(|e| match e {
            DistError::Layout(why) => DistError::Layout(format!("{r}: {why}")),
            other => other,
        })?;
        let at = r.at_digest(&digest);
        if store.read(&m.config, MAX_SMALL_BLOB_BYTES, "config").is_err() {
            let config = self.blob(&at, &m.config, m.config_size, "the config blob").await?;
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
    pub async fn fetch_signatures(&self, r: &OciRef, digest: &Digest, store: &BlobStore) -> Result<bool> {
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
        store: &BlobStore,
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
pub fn stored_signatures(store: &BlobStore, r: &OciRef, digest: &Digest) -> Result<Option<Vec<StoredSignature>>> {
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

/// Reads `res`'s body up to `limit` bytes: the bytes, and whether there
/// was more (the rest is not read).
async fn read_limited(res: &mut reqwest::Response, limit: u64) -> reqwest::Result<(Vec<u8>, bool)> {
    let mut buf = Vec::new();
    while let Some(chunk) = res.chunk().await? {
        let room = usize::try_from(limit).unwrap_or(usize::MAX).saturating_sub(buf.len());
        if chunk.len() > room {
            buf.extend_from_slice(&chunk[..room]);
            return Ok((buf, true));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok((buf, false))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A registry on loopback that answers by path: `/v2/` (no auth), and
    /// under `/v2/REPO/…` one behaviour per repository.
    async fn fake_registry() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut b = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") && head.len() < 16 << 10 {
                        if sock.read(&mut b).await.unwrap_or(0) == 0 {
                            return;
                        }
                        head.push(b[0]);
                    }
                    let head = String::from_utf8_lossy(&head).into_owned();
                    let path = head.split(' ').nth(1).unwrap_or("").to_string();
                    let send = |status: &str, headers: &str| {
                        format!("HTTP/1.1 {status}\r\nConnection: close\r\n{headers}\r\n")
                    };
                    let mb = vec![b'x'; 1 << 20];
                    let _ = match path.as_str() {
                        "/v2/" => sock
                            .write_all(send("200 OK", "Content-Length: 2\r\n").as_bytes())
                            .await
                            .and(sock.write_all(b"{}").await),
                        // Claims 2 MiB: refused from the header.
                        "/v2/claims/manifests/v1" => {
                            let _ = sock.write_all(send("200 OK", "Content-Length: 2097152\r\n").as_bytes()).await;
                            sock.write_all(&mb).await
                        }
                        // No length, 4 MiB: refused after the first 1 MiB.
                        "/v2/floods/manifests/v1" => {
                            let _ = sock.write_all(send("200 OK", "").as_bytes()).await;
                            let mut r = Ok(());
                            for _ in 0..4 {
                                r = sock.write_all(&mb).await;
                                if r.is_err() {
                                    break;
                                }
                            }
                            r
                        }
                        // A 3 MiB error page: only its start is read.
                        "/v2/fails/manifests/v1" => {
                            let _ = sock.write_all(send("500 Oops", "").as_bytes()).await;
                            let _ = sock.write_all(b"the registry is down ").await;
                            let _ = sock.write_all(&mb).await;
                            let _ = sock.write_all(&mb).await;
                            sock.write_all(&mb).await
                        }
                        p if p.starts_with("/v2/blobs/blobs/") => {
                            // 20 bytes whatever the descriptor says.
                            let _ = sock.write_all(send("200 OK", "").as_bytes()).await;
                            sock.write_all(&[7u8; 20]).await
                        }
                        "/v2/small/manifests/v1" => {
                            let body = br#"{"schemaVersion":2}"#;
                            let _ = sock
                                .write_all(send("200 OK", &format!("Content-Length: {}\r\n", body.len())).as_bytes())
                                .await;
                            sock.write_all(body).await
                        }
                        _ => sock.write_all(send("404 Not Found", "Content-Length: 0\r\n").as_bytes()).await,
                    };
                    let _ = sock.shutdown().await;
                });
            }
        });
        addr.to_string()
    }

    #[tokio::test]
    async fn every_pulled_response_is_bounded_before_it_is_read() {
        let host = fake_registry().await;
        let at = |repo: &str| OciRef::parse(&format!("oci://{host}/{repo}:v1")).unwrap();
        let reg = Registry::for_ref(&at("small")).await.unwrap();

        let (bytes, digest) = reg.manifest(&at("small")).await.unwrap().unwrap();
        assert_eq!(bytes, br#"{"schemaVersion":2}"#);
        assert_eq!(digest, Digest::of(&bytes));
        assert!(reg.manifest(&at("absent")).await.unwrap().is_none(), "a 404 is no manifest");

        for repo in ["claims", "floods"] {
            match reg.manifest(&at(repo)).await {
                Err(DistError::TooLarge { what, limit }) => {
                    assert_eq!(limit, MAX_MANIFEST_BYTES);
                    assert!(what.contains(repo), "{what}");
                }
                other => panic!("{repo}: {other:?}"),
            }
        }

        let e = reg.manifest(&at("fails")).await.unwrap_err().to_string();
        assert!(e.contains("HTTP 500") && e.contains("the registry is down"), "{e}");
        assert!(e.len() < 1000, "the error page is cut: {} bytes", e.len());

        // A blob larger than its descriptor's size is refused, not stored.
        let d = Digest::of(&[7u8; 10]);
        match reg.blob(&at("blobs"), &d, 10, "the component layer").await {
            Err(DistError::TooLarge { what, limit }) => assert_eq!((what.as_str(), limit), ("the component layer", 10)),
            other => panic!("{other:?}"),
        }
        // Within its size but not its digest: refused.
        let e = reg.blob(&at("blobs"), &d, 20, "the component layer").await.unwrap_err();
        assert!(matches!(e, DistError::DigestMismatch { .. }), "{e}");
        assert_eq!(reg.blob(&at("blobs"), &Digest::of(&[7u8; 20]), 20, "b").await.unwrap(), vec![7u8; 20]);
    }
}
