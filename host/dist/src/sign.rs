//! cosign-compatible signatures.
//!
//! A signature of manifest `sha256:H` in repository `HOST/REPO` lives at
//! the tag `HOST/REPO:sha256-H.sig`: an OCI image manifest whose layers are
//! simple-signing payloads ([`PAYLOAD_MEDIA_TYPE`]), each with its ECDSA
//! P-256 / SHA-256 signature (ASN.1 DER, base64) in the layer annotation
//! [`SIGNATURE_ANNOTATION`]. The payload names the signed digest in
//! `critical.image.docker-manifest-digest`; `critical.identity` is not
//! checked (as in cosign). Keys are PEM: public keys as SPKI (`PUBLIC
//! KEY`, what `cosign.pub` holds), private keys as PKCS#8 (`PRIVATE KEY`)
//! or SEC1 (`EC PRIVATE KEY`); cosign's encrypted `cosign.key` is not read.

use std::path::Path;

use base64::Engine as _;
use p256::ecdsa::signature::{Signer as _, Verifier as _};
use p256::ecdsa::{Signature, SigningKey, VerifyingKey};
use p256::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey, LineEnding};
use serde::Deserialize;

use crate::{Digest, DistError};

/// The media type of a simple-signing payload layer.
pub const PAYLOAD_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The layer annotation holding the base64 signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// `critical.type` of a cosign signature.
pub const SIGNATURE_TYPE: &str = "cosign container image signature";
/// The config media type of a signature manifest (as cosign writes it).
pub const SIGNATURE_CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";

/// A new key pair: `(private key PEM (PKCS#8), public key PEM (SPKI))`.
pub fn generate_key_pair() -> Result<(String, String), DistError> {
    use p256::elliptic_curve::Generate as _;
    let key = SigningKey::try_generate()
        .map_err(|e| DistError::Key { path: "(new)".into(), why: format!("no randomness: {e}") })?;
    let private = key
        .to_pkcs8_pem(LineEnding::LF)
        .map_err(|e| DistError::Key { path: "(new)".into(), why: e.to_string() })?
        .to_string();
    let public = key
        .verifying_key()
        .to_public_key_pem(LineEnding::LF)
        .map_err(|e| DistError::Key { path: "(new)".into(), why: e.to_string() })?;
    Ok((private, public))
}

fn read_key_file(path: &Path) -> Result<String, DistError> {
    use std::io::Read;
    let key_err = |why: String| DistError::Key { path: path.display().to_string(), why };
    let f = std::fs::File::open(path).map_err(|e| key_err(e.to_string()))?;
    let mut text = String::new();
    f.take(64 << 10).read_to_string(&mut text).map_err(|e| key_err(e.to_string()))?;
    Ok(text)
}

/// Reads a PEM private key (PKCS#8 or SEC1).
pub fn load_signing_key(path: &Path) -> Result<SigningKey, DistError> {
    let text = read_key_file(path)?;
    let key_err = |why: &str| DistError::Key { path: path.display().to_string(), why: why.to_string() };
    if text.contains("ENCRYPTED") {
        return Err(key_err("an encrypted key (cosign.key); give an unencrypted PKCS#8 P-256 key"));
    }
    if let Ok(k) = SigningKey::from_pkcs8_pem(&text) {
        return Ok(k);
    }
    p256::SecretKey::from_sec1_pem(&text)
        .map(SigningKey::from)
        .map_err(|_| key_err("not a PEM P-256 private key (PKCS#8 `PRIVATE KEY` or SEC1 `EC PRIVATE KEY`)"))
}

/// Reads a PEM public key (SPKI, `PUBLIC KEY`).
pub fn load_verifying_key(path: &Path) -> Result<VerifyingKey, DistError> {
    let text = read_key_file(path)?;
    VerifyingKey::from_public_key_pem(&text).map_err(|_| DistError::Key {
        path: path.display().to_string(),
        why: "not a PEM P-256 public key (`PUBLIC KEY`)".into(),
    })
}

/// The simple-signing payload for `digest` in `repo` (`HOST/REPO`).
pub fn payload(repo: &str, digest: &Digest) -> Vec<u8> {
    let v = serde_json::json!({
        "critical": {
            "identity": {"docker-reference": repo},
            "image": {"docker-manifest-digest": digest.to_string()},
            "type": SIGNATURE_TYPE,
        },
        "optional": null,
    });
    serde_json::to_vec(&v).unwrap_or_default()
}

/// Signs `payload`: base64 of the DER signature.
pub fn sign(key: &SigningKey, payload: &[u8]) -> String {
    let sig: Signature = key.sign(payload);
    base64::engine::general_purpose::STANDARD.encode(sig.to_der().as_bytes())
}

#[derive(Deserialize)]
struct Payload {
    critical: Critical,
}

#[derive(Deserialize)]
struct Critical {
    image: Image,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct Image {
    // The spec's example capitalises it; cosign reads it case-insensitively.
    #[serde(rename = "docker-manifest-digest", alias = "Docker-manifest-digest")]
    digest: String,
}

/// Why one signature does not vouch for a digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// The signature does not verify with the key (another key, or the
    /// payload was changed).
    BadSignature,
    /// A valid signature, of another digest.
    OtherDigest(String),
    /// Not a cosign simple-signing payload or signature.
    Malformed(String),
}

/// Checks one signature: `sig_b64` over `payload` with `key`, and the
/// payload names `digest`.
pub fn verify(key: &VerifyingKey, payload: &[u8], sig_b64: &str, digest: &Digest) -> Result<(), Mismatch> {
    let der = base64::engine::general_purpose::STANDARD
        .decode(sig_b64.trim())
        .map_err(|_| Mismatch::Malformed("the signature is not base64".into()))?;
    let sig = Signature::from_der(&der).map_err(|_| Mismatch::Malformed("the signature is not DER ECDSA".into()))?;
    key.verify(payload, &sig).map_err(|_| Mismatch::BadSignature)?;
    let p: Payload = serde_json::from_slice(payload)
        .map_err(|_| Mismatch::Malformed("the payload is not a simple-signing document".into()))?;
    if p.critical.kind != SIGNATURE_TYPE {
        return Err(Mismatch::Malformed(format!("critical.type is not \"{SIGNATURE_TYPE}\"")));
    }
    if p.critical.image.digest != digest.as_str() {
        return Err(Mismatch::OtherDigest(crate::reference::shown(&p.critical.image.digest)));
    }
    Ok(())
}

/// The one-line reason a set of signatures refused a digest (the most
/// telling mismatch wins: another digest, then a bad signature).
pub fn reason(mismatches: &[Mismatch]) -> String {
    if let Some(Mismatch::OtherDigest(d)) = mismatches.iter().find(|m| matches!(m, Mismatch::OtherDigest(_))) {
        return format!("the signature is for another digest ({d})");
    }
    if mismatches.contains(&Mismatch::BadSignature) {
        return "no signature verifies with the key (signed with another key, or the payload was changed)".into();
    }
    match mismatches.first() {
        Some(Mismatch::Malformed(why)) => format!("malformed signature: {why}"),
        _ => "unsigned: no signature".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use anyhow::Context;

    #[test]
    fn sign_and_verify() -> anyhow::Result<()> {
        let dir = tempfile::tempdir().context("creating a temp dir")?;
        let (private, public) = generate_key_pair().context("generating a key pair")?;
        assert!(private.contains("BEGIN PRIVATE KEY") && public.contains("BEGIN PUBLIC KEY"));
        let (kp, pp) = (dir.path().join("k"), dir.path().join("k.pub"));
        std::fs::write(&kp, &private).context("writing the private key")?;
        std::fs::write(&pp, &public).context("writing the public key")?;
        let key = load_signing_key(&kp).context("loading the signing key")?;
        let pubkey = load_verifying_key(&pp).context("loading the verifying key")?;
        assert!(load_verifying_key(&kp).is_err());

        let d = Digest::of(b"manifest");
        let p = payload("h/r", &d);
        let s = sign(&key, &p);
        assert_eq!(verify(&pubkey, &p, &s, &d), Ok(()));

        // Another digest, a changed payload, another key, garbage.
        let other = Digest::of(b"other");
        assert!(matches!(verify(&pubkey, &p, &s, &other), Err(Mismatch::OtherDigest(_))));
        let mut changed = p.clone();
        changed[5] ^= 1;
        assert_eq!(verify(&pubkey, &changed, &s, &d), Err(Mismatch::BadSignature));
        let (_, public2) = generate_key_pair().context("generating a key pair")?;
        std::fs::write(&pp, &public2).context("writing the public key")?;
        let wrong = load_verifying_key(&pp).context("loading the verifying key")?;
        assert_eq!(verify(&wrong, &p, &s, &d), Err(Mismatch::BadSignature));
        assert!(matches!(verify(&pubkey, &p, "!!", &d), Err(Mismatch::Malformed(_))));
        assert_eq!(reason(&[]), "unsigned: no signature");
        assert!(reason(&[Mismatch::BadSignature, Mismatch::OtherDigest("x".into())]).contains("another digest"));
        Ok(())
    }
}
