//! The CNCF Wasm OCI artifact layout: an OCI image manifest whose config
//! has media type [`CONFIG_MEDIA_TYPE`] and whose one layer is the
//! component ([`LAYER_MEDIA_TYPE`]).

use serde::{Deserialize, Serialize};

pub use crate::component::{ComponentInfo, component_info};
use crate::{Digest, DistError};

/// The OCI image manifest media type.
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// The Wasm config media type.
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The component layer media type.
pub const LAYER_MEDIA_TYPE: &str = "application/wasm";

/// The config blob (`application/vnd.wasm.config.v0+json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WasmConfig {
    /// RFC 3339 creation time.
    pub created: String,
    /// Always `wasm`.
    pub architecture: String,
    /// `wasip2` for components.
    pub os: String,
    /// The layer digests, in manifest order.
    pub layer_digests: Vec<String>,
    /// The component's top-level imports and exports.
    pub component: Option<ComponentInfo>,
}

/// The config blob of `component` (its bytes are the one layer).
pub fn config_for(component: &[u8]) -> Result<Vec<u8>, DistError> {
    let config = WasmConfig {
        created: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        architecture: "wasm".into(),
        os: "wasip2".into(),
        layer_digests: vec![Digest::of(component).to_string()],
        component: Some(component_info(component)?),
    };
    serde_json::to_vec(&config).map_err(|e| DistError::Layout(format!("cannot encode the config: {e}")))
}

/// What a Wasm artifact manifest points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WasmManifest {
    /// The config blob.
    pub config: Digest,
    /// Its size.
    pub config_size: u64,
    /// The component layer.
    pub layer: Digest,
    /// Its size.
    pub layer_size: u64,
}

/// Parses a Wasm artifact manifest, checking the layout: an OCI image
/// manifest, config [`CONFIG_MEDIA_TYPE`], exactly one layer of
/// [`LAYER_MEDIA_TYPE`] no larger than [`crate::MAX_COMPONENT_BYTES`].
pub fn parse_manifest(manifest: &[u8]) -> Result<WasmManifest, DistError> {
    let m: oci_client::manifest::OciImageManifest =
        serde_json::from_slice(manifest).map_err(|e| DistError::Layout(format!("bad manifest: {e}")))?;
    if let Some(mt) = &m.media_type
        && mt != MANIFEST_MEDIA_TYPE
    {
        return Err(DistError::Layout(format!("manifest media type {mt}, expected {MANIFEST_MEDIA_TYPE}")));
    }
    if m.config.media_type != CONFIG_MEDIA_TYPE {
        return Err(DistError::Layout(format!(
            "config media type {}, expected {CONFIG_MEDIA_TYPE}",
            crate::reference::shown(&m.config.media_type)
        )));
    }
    let [layer] = m.layers.as_slice() else {
        return Err(DistError::Layout(format!("{} layers, expected one", m.layers.len())));
    };
    if layer.media_type != LAYER_MEDIA_TYPE {
        return Err(DistError::Layout(format!(
            "layer media type {}, expected {LAYER_MEDIA_TYPE}",
            crate::reference::shown(&layer.media_type)
        )));
    }
    let size = u64::try_from(layer.size).map_err(|_| DistError::Layout("negative layer size".into()))?;
    if size > crate::MAX_COMPONENT_BYTES {
        return Err(DistError::TooLarge { what: "the component layer".into(), limit: crate::MAX_COMPONENT_BYTES });
    }
    let config_size = u64::try_from(m.config.size).map_err(|_| DistError::Layout("negative config size".into()))?;
    if config_size > crate::MAX_SMALL_BLOB_BYTES {
        return Err(DistError::TooLarge { what: "the config blob".into(), limit: crate::MAX_SMALL_BLOB_BYTES });
    }
    Ok(WasmManifest {
        config: Digest::parse(&m.config.digest)?,
        config_size,
        layer: Digest::parse(&layer.digest)?,
        layer_size: size,
    })
}

/// The manifest of a component pushed with `config` as its config blob:
/// canonical JSON bytes (their digest is the manifest digest).
pub fn manifest_for(component: &[u8], config: &[u8]) -> Result<Vec<u8>, DistError> {
    let desc = |media_type: &str, bytes: &[u8]| {
        serde_json::json!({
            "mediaType": media_type,
            "digest": Digest::of(bytes).to_string(),
            "size": bytes.len(),
        })
    };
    let m = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": desc(CONFIG_MEDIA_TYPE, config),
        "layers": [desc(LAYER_MEDIA_TYPE, component)],
    });
    serde_json::to_vec(&m).map_err(|e| DistError::Layout(format!("cannot encode the manifest: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    use anyhow::Context;

    // The smallest component: the preamble with the component layer/version.
    const EMPTY_COMPONENT: &[u8] = &[0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];
    const EMPTY_MODULE: &[u8] = &[0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];

    #[test]
    fn layout_round_trip() -> anyhow::Result<()> {
        assert!(component_info(EMPTY_COMPONENT).is_ok());
        assert!(component_info(EMPTY_MODULE).is_err());
        assert!(component_info(b"not wasm").is_err());
        let config = config_for(EMPTY_COMPONENT).context("building the config")?;
        let c: WasmConfig = serde_json::from_slice(&config).context("parsing JSON")?;
        assert_eq!((c.architecture.as_str(), c.os.as_str()), ("wasm", "wasip2"));
        assert_eq!(c.layer_digests, vec![Digest::of(EMPTY_COMPONENT).to_string()]);
        let m = manifest_for(EMPTY_COMPONENT, &config).context("building the manifest")?;
        let w = parse_manifest(&m).context("parsing the manifest")?;
        assert_eq!((w.layer, w.layer_size), (Digest::of(EMPTY_COMPONENT), EMPTY_COMPONENT.len() as u64));
        assert_eq!(w.config, Digest::of(&config));
        Ok(())
    }

    #[test]
    fn other_layouts_are_refused() {
        let d = Digest::of(b"x").to_string();
        let m = |config: &str, layers: serde_json::Value| {
            serde_json::to_vec(&serde_json::json!({
                "schemaVersion": 2, "mediaType": MANIFEST_MEDIA_TYPE,
                "config": {"mediaType": config, "digest": d, "size": 1},
                "layers": layers,
            }))
            .unwrap_or_default()
        };
        let layer = |mt: &str| serde_json::json!({"mediaType": mt, "digest": d, "size": 1});
        assert!(parse_manifest(&m(CONFIG_MEDIA_TYPE, serde_json::json!([layer(LAYER_MEDIA_TYPE)]))).is_ok());
        assert!(
            parse_manifest(&m(
                "application/vnd.oci.image.config.v1+json",
                serde_json::json!([layer(LAYER_MEDIA_TYPE)])
            ))
            .is_err()
        );
        assert!(parse_manifest(&m(CONFIG_MEDIA_TYPE, serde_json::json!([]))).is_err());
        assert!(
            parse_manifest(&m(
                CONFIG_MEDIA_TYPE,
                serde_json::json!([layer(LAYER_MEDIA_TYPE), layer(LAYER_MEDIA_TYPE)])
            ))
            .is_err()
        );
        assert!(
            parse_manifest(&m(CONFIG_MEDIA_TYPE, serde_json::json!([layer("application/vnd.oci.image.layer.v1.tar")])))
                .is_err()
        );
    }
}
