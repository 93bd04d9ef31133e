//! `oci://` references.

use std::fmt;

use crate::{Digest, DistError};

/// The scheme every reference starts with.
pub const SCHEME: &str = "oci://";

/// A reference shown in messages: at most 200 characters (cut on a char
/// boundary), so hostile input cannot flood a log line.
pub(crate) fn shown(s: &str) -> String {
    match s.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// `oci://HOST[:PORT]/REPO[:TAG][@sha256:HEX]`. Without a tag or digest the
/// tag is `latest`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciRef {
    /// `HOST[:PORT]`.
    pub registry: String,
    /// The repository path (`team/tool`).
    pub repository: String,
    /// The tag, if any.
    pub tag: Option<String>,
    /// The manifest digest, if any.
    pub digest: Option<Digest>,
}

impl OciRef {
    /// Parses an `oci://` reference.
    pub fn parse(s: &str) -> Result<Self, DistError> {
        let bad = |why: &str| DistError::BadReference { reference: shown(s), why: why.to_string() };
        if s.len() > 1024 {
            return Err(bad("longer than 1024 bytes"));
        }
        let rest = s.strip_prefix(SCHEME).ok_or_else(|| bad("it must start with oci://"))?;
        let (registry, path) = rest.split_once('/').ok_or_else(|| bad("no repository after the host"))?;
        if registry.is_empty()
            || !registry.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'))
        {
            return Err(bad("the host must be HOST or HOST:PORT"));
        }
        let (name, digest) = match path.split_once('@') {
            Some((n, d)) => (n, Some(Digest::parse(d)?)),
            None => (path, None),
        };
        let last = name.rsplit('/').next().unwrap_or(name);
        let (repository, tag) = match last.rfind(':') {
            Some(i) => {
                let cut = name.len() - last.len() + i;
                (&name[..cut], Some(name[cut + 1..].to_string()))
            }
            None => (name, None),
        };
        let component_ok = |c: &str| {
            !c.is_empty()
                && c.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-'))
                && c.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        };
        if !repository.split('/').all(component_ok) {
            return Err(bad("the repository must be lowercase a-z, 0-9, `.`, `_`, `-` between `/`"));
        }
        if let Some(t) = &tag {
            let ok = !t.is_empty()
                && t.len() <= 128
                && t.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
                && t.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !ok {
                return Err(bad("a tag is 1 to 128 of A-Z, a-z, 0-9, `.`, `_`, `-`"));
            }
        }
        let tag = if tag.is_none() && digest.is_none() { Some("latest".to_string()) } else { tag };
        Ok(Self { registry: registry.to_string(), repository: repository.to_string(), tag, digest })
    }

    /// The same repository at `digest` (no tag).
    pub fn at_digest(&self, digest: &Digest) -> Self {
        Self {
            registry: self.registry.clone(),
            repository: self.repository.clone(),
            tag: None,
            digest: Some(digest.clone()),
        }
    }

    /// The same repository at `tag` (no digest).
    pub fn at_tag(&self, tag: &str) -> Self {
        Self {
            registry: self.registry.clone(),
            repository: self.repository.clone(),
            tag: Some(tag.to_string()),
            digest: None,
        }
    }

    /// The cosign signature artifact of `digest` in this repository.
    pub fn signature_of(&self, digest: &Digest) -> Self {
        self.at_tag(&digest.signature_tag())
    }

    /// `HOST/REPO`, without tag or digest (the `docker-reference` of a
    /// signature).
    pub fn repo(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// The index key of a tag reference: `HOST/REPO:TAG` (`None` without a tag).
    pub fn tag_key(&self) -> Option<String> {
        self.tag.as_ref().map(|t| format!("{}:{t}", self.repo()))
    }

    /// Whether the registry is on this machine (`localhost`, `127.x`,
    /// `[::1]`): such registries are spoken to over plain HTTP.
    pub fn is_loopback(&self) -> bool {
        let host = match self.registry.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(v6),
            None => self.registry.split(':').next().unwrap_or(&self.registry),
        };
        host == "localhost" || host == "::1" || host.starts_with("127.")
    }

    /// The `oci-client` form.
    pub fn to_client(&self) -> oci_client::Reference {
        let (r, p) = (self.registry.clone(), self.repository.clone());
        match (&self.tag, &self.digest) {
            (Some(t), Some(d)) => oci_client::Reference::with_tag_and_digest(r, p, t.clone(), d.to_string()),
            (None, Some(d)) => oci_client::Reference::with_digest(r, p, d.to_string()),
            (Some(t), None) => oci_client::Reference::with_tag(r, p, t.clone()),
            (None, None) => oci_client::Reference::with_tag(r, p, "latest".into()),
        }
    }
}

impl fmt::Display for OciRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}{}", self.repo())?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use anyhow::Context;

    #[test]
    fn parses_tags_digests_and_ports() -> anyhow::Result<()> {
        let r = OciRef::parse("oci://127.0.0.1:5000/team/echo:v1").context("parsing the reference")?;
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str(), r.tag.as_deref()),
            ("127.0.0.1:5000", "team/echo", Some("v1"))
        );
        assert!(r.is_loopback());
        assert_eq!(r.to_string(), "oci://127.0.0.1:5000/team/echo:v1");
        assert_eq!(r.tag_key().as_deref(), Some("127.0.0.1:5000/team/echo:v1"));

        let d = Digest::of(b"x");
        let r = OciRef::parse(&format!("oci://ghcr.io/a/b@{d}")).context("parsing the reference")?;
        assert_eq!((r.tag.as_deref(), r.digest.as_ref()), (None, Some(&d)));
        assert!(!r.is_loopback());
        assert_eq!(r.signature_of(&d).tag, Some(d.signature_tag()));

        let r = OciRef::parse("oci://localhost/x").context("parsing the reference")?;
        assert_eq!(r.tag.as_deref(), Some("latest"));
        assert!(r.is_loopback());
        Ok(())
    }

    #[test]
    fn refuses_malformed_references() {
        for bad in [
            "ghcr.io/a/b",
            "oci://ghcr.io",
            "oci:///a",
            "oci://ghcr.io/A/b",
            "oci://ghcr.io/a/b:",
            "oci://ghcr.io/a/b@sha256:zz",
            "oci://gh cr.io/a",
            "oci://ghcr.io/a//b",
        ] {
            assert!(OciRef::parse(bad).is_err(), "{bad}");
        }
        let long = format!("oci://h/{}", "é".repeat(2000));
        let msg = OciRef::parse(&long).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.len() < 600, "{msg}");
    }
}
