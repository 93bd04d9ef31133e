//! `sha256:<hex>` content digests.

use std::fmt;

use sha2::{Digest as _, Sha256};

use crate::DistError;

/// A SHA-256 content digest, `sha256:` and 64 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Digest(String);

impl Digest {
    /// Parses `sha256:<64 lowercase hex>`.
    pub fn parse(s: &str) -> Result<Self, DistError> {
        let hex = s.strip_prefix("sha256:").ok_or_else(|| DistError::BadDigest(crate::reference::shown(s)))?;
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            return Err(DistError::BadDigest(crate::reference::shown(s)));
        }
        Ok(Self(s.to_string()))
    }

    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self(format!("sha256:{}", hex::encode(Sha256::digest(bytes))))
    }

    /// The 64 hex digits.
    pub fn hex(&self) -> &str {
        self.0.strip_prefix("sha256:").unwrap_or(&self.0)
    }

    /// `sha256:<hex>`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The cosign signature tag of this digest: `sha256-<hex>.sig`.
    pub fn signature_tag(&self) -> String {
        format!("sha256-{}.sig", self.hex())
    }

    /// Checks that `bytes` have this digest; `what` names them in the error.
    pub fn check(&self, bytes: &[u8], what: &str) -> Result<(), DistError> {
        let actual = Self::of(bytes);
        if &actual != self {
            return Err(DistError::DigestMismatch {
                what: what.to_string(),
                expected: self.0.clone(),
                actual: actual.0,
            });
        }
        Ok(())
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_only_lowercase_sha256() {
        let d = Digest::of(b"abc");
        assert_eq!(d.as_str(), "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(Digest::parse(d.as_str()).ok(), Some(d.clone()));
        assert!(Digest::parse(&d.as_str().to_uppercase()).is_err());
        assert!(Digest::parse("sha512:00").is_err());
        assert!(Digest::parse(&d.as_str()[..70]).is_err());
        assert_eq!(d.signature_tag(), format!("sha256-{}.sig", d.hex()));
        assert!(d.check(b"abc", "x").is_ok());
        assert!(d.check(b"abd", "x").is_err());
    }
}
