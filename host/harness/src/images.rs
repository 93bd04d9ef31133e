//! Images the user attaches from files (`wharf run --image PATH`): read by
//! the host as user input, typed by their magic bytes (else the file's
//! extension), bounded by [`wharf_core::images`]' limits, and checked
//! against the session's model adapter before anything is logged.

use std::io::Read as _;
use std::path::Path;

use anyhow::{Context as _, Result};
use wharf_core::Agent;
use wharf_core::images::{IMAGE_MIME_TYPES, Image, MAX_IMAGE_BYTES, check_prompt_images, sniff_mime};

/// Reads the image at `path`: at most [`MAX_IMAGE_BYTES`] (a larger file is
/// refused naming the limit, without reading it all), a PNG, JPEG, GIF or
/// WebP.
pub fn read_image(path: &Path) -> Result<Image> {
    let file = std::fs::File::open(path).with_context(|| format!("cannot open the image {}", path.display()))?;
    let mut data = Vec::new();
    file.take(MAX_IMAGE_BYTES as u64 + 1)
        .read_to_end(&mut data)
        .with_context(|| format!("cannot read the image {}", path.display()))?;
    anyhow::ensure!(
        data.len() <= MAX_IMAGE_BYTES,
        "the image {} is over the per-image limit of {MAX_IMAGE_BYTES} bytes",
        path.display()
    );
    let by_extension = || {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        Some(match ext.as_str() {
            "png" => "image/png",
            "jpg" | "jpeg" => "image/jpeg",
            "gif" => "image/gif",
            "webp" => "image/webp",
            _ => return None,
        })
    };
    let Some(mime) = sniff_mime(&data).or_else(by_extension) else {
        anyhow::bail!("{} is not an image Wharf takes ({})", path.display(), IMAGE_MIME_TYPES.join(", "));
    };
    Ok(Image { mime_type: mime.to_string(), data })
}

/// Refuses `images` unless the agent's model adapter takes them and they
/// are within the per-prompt limits and the adapter's own; the error
/// names the adapter or the limit.
pub fn check_for(agent: &Agent, images: &[Image]) -> Result<()> {
    if images.is_empty() {
        return Ok(());
    }
    let adapter = agent.snapshot().llm(agent.config().llm.as_deref());
    let Some(adapter) = adapter else { anyhow::bail!("no model adapter is loaded to take the images") };
    let Some(support) = adapter.image_support() else {
        anyhow::bail!(
            "the model adapter `{}` takes text only: it cannot be given images (--image); \
             use an adapter that takes them (llm-openai, llm-anthropic)",
            adapter.plugin().id
        );
    };
    check_prompt_images(images, Some(&support)).map_err(|e| anyhow::anyhow!("{e}"))
}
