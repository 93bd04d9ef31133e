//! Images in user messages: the type the log and the requests carry, the
//! host's bounds, and media-type detection.
//!
//! An image is stored **inline** in its `user/message` event (`images`:
//! media type and base64 bytes), bounded by [`MAX_IMAGE_BYTES`] each and
//! [`MAX_PROMPT_IMAGE_BYTES`] per message, so a session log stays
//! self-contained (a fork, an export or a replay to the model needs nothing
//! else). Surfaces never print the bytes: [`Image::placeholder`] is the line
//! `sessions show` and replays show. A request lowers images only to an
//! adapter that declared support ([`crate::plugin::LlmAdapter::image_support`]);
//! for any other the turn stops with `IMAGES_UNSUPPORTED`, naming it.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Largest image the host takes, in bytes (the Messages API's limit; an
/// adapter may declare a lower one).
pub const MAX_IMAGE_BYTES: usize = 5 << 20;
/// Largest total of the images of one prompt, in bytes.
pub const MAX_PROMPT_IMAGE_BYTES: usize = 10 << 20;
/// Most images in one prompt.
pub const MAX_PROMPT_IMAGES: usize = 16;
/// Media types the host takes (the intersection of what the shipped
/// adapters' models accept).
pub const IMAGE_MIME_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// One image of a user message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    /// IANA media type, one of [`IMAGE_MIME_TYPES`].
    pub mime_type: String,
    /// The encoded image; base64 in the log.
    #[serde(serialize_with = "to_base64", deserialize_with = "from_base64")]
    pub data: Vec<u8>,
}

impl Image {
    /// The line surfaces show instead of the bytes: `[image image/png, 12.3 KiB]`.
    pub fn placeholder(&self) -> String {
        format!("[image {}, {}]", self.mime_type, size_text(self.data.len()))
    }
}

/// An image of a request: the index of its message in
/// [`crate::plugin::LlmRequest::messages`] and the image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestImage {
    /// Index of the (user) message it follows.
    pub message: u32,
    /// The image.
    pub image: Image,
}

/// What an adapter accepts (WIT `llm-images.image-support`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ImageSupport {
    /// Media types its model takes.
    pub mime_types: Vec<String>,
    /// Largest image, in bytes.
    pub max_bytes: u64,
}

/// `1234 bytes`, `12.3 KiB`, `1.2 MiB`.
pub fn size_text(n: usize) -> String {
    match n {
        n if n < 1024 => format!("{n} bytes"),
        n if n < 1 << 20 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
    }
}

/// The media type of `bytes` from its magic bytes, if a taken one.
pub fn sniff_mime(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

/// Checks one prompt's images against the host's bounds and, when given,
/// the adapter's: each a taken media type, at most [`MAX_IMAGE_BYTES`] (and
/// the adapter's `max_bytes`), at most [`MAX_PROMPT_IMAGES`] images and
/// [`MAX_PROMPT_IMAGE_BYTES`] in all. The error says which limit, with its
/// value.
pub fn check_prompt_images(images: &[Image], support: Option<&ImageSupport>) -> Result<(), String> {
    if images.len() > MAX_PROMPT_IMAGES {
        return Err(format!("{} images in one prompt; the limit is {MAX_PROMPT_IMAGES}", images.len()));
    }
    let per_image =
        support.map_or(MAX_IMAGE_BYTES, |s| MAX_IMAGE_BYTES.min(usize::try_from(s.max_bytes).unwrap_or(usize::MAX)));
    let mut total = 0usize;
    for (i, image) in images.iter().enumerate() {
        let n = i + 1;
        if !IMAGE_MIME_TYPES.contains(&image.mime_type.as_str()) {
            return Err(format!(
                "image {n} is of type `{}`; the types taken are {}",
                crate::util::cut_str(&image.mime_type, 64),
                IMAGE_MIME_TYPES.join(", ")
            ));
        }
        if let Some(s) = support
            && !s.mime_types.iter().any(|m| m.eq_ignore_ascii_case(&image.mime_type))
        {
            return Err(format!("image {n} is of type `{}`, which the model adapter does not take", image.mime_type));
        }
        if image.data.len() > per_image {
            return Err(format!(
                "image {n} is {} bytes; the per-image limit is {per_image} bytes ({})",
                image.data.len(),
                size_text(per_image)
            ));
        }
        total += image.data.len();
    }
    if total > MAX_PROMPT_IMAGE_BYTES {
        return Err(format!(
            "the prompt's images are {total} bytes together; the per-prompt limit is {MAX_PROMPT_IMAGE_BYTES} bytes ({})",
            size_text(MAX_PROMPT_IMAGE_BYTES)
        ));
    }
    Ok(())
}

fn to_base64<S: Serializer>(data: &[u8], s: S) -> Result<S::Ok, S::Error> {
    use base64::Engine as _;
    s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(data))
}

fn from_base64<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    use base64::Engine as _;
    let text = String::deserialize(d)?;
    base64::engine::general_purpose::STANDARD.decode(text.as_bytes()).map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_round_trip_as_base64_and_are_bounded() {
        let png = Image { mime_type: "image/png".into(), data: b"\x89PNG\r\n\x1a\nxyz".to_vec() };
        let text = serde_json::to_string(&png).unwrap();
        assert!(text.contains("\"iVBORw0KGgp4eXo=\""), "{text}");
        assert_eq!(serde_json::from_str::<Image>(&text).unwrap(), png);
        assert_eq!(sniff_mime(&png.data), Some("image/png"));
        assert_eq!(png.placeholder(), "[image image/png, 11 bytes]");
        check_prompt_images(std::slice::from_ref(&png), None).unwrap();
        let big = Image { mime_type: "image/png".into(), data: vec![0; MAX_IMAGE_BYTES + 1] };
        let e = check_prompt_images(&[big], None).unwrap_err();
        assert!(e.contains("per-image limit"), "{e}");
        let svg = Image { mime_type: "image/svg+xml".into(), data: vec![1] };
        assert!(check_prompt_images(&[svg], None).unwrap_err().contains("image/svg+xml"));
        let four = vec![Image { mime_type: "image/png".into(), data: vec![0; 3 << 20] }; 4];
        assert!(check_prompt_images(&four, None).unwrap_err().contains("per-prompt limit"));
    }
}
