//! Embeds the WIT docs of `tests/generic/wit` as a `package-docs` custom
//! section (wit-parser's `PackageMetadata`, the format `wasm-tools` and
//! `wit-docs-inject` write), so the component carries its doc comments:
//! neither `wit-bindgen` nor `wasm-component-ld` keeps them.
//!
//! Writes `$OUT_DIR/package_docs.rs`, a `#[link_section = "package-docs"]`
//! static that `src/lib.rs` includes; the linker keeps it as a custom
//! section of the component's core module.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let wit = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../generic/wit");
    println!("cargo:rerun-if-changed={}", wit.display());
    let mut resolve = wit_parser::Resolve::default();
    let (pkg, _files) = resolve.push_dir(&wit)?;
    let section = wit_parser::PackageMetadata::extract(&resolve, pkg).encode()?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("package-docs.bin"), &section)?;
    std::fs::write(
        out.join("package_docs.rs"),
        format!(
            "/// The WIT docs of `tests/generic/wit` (see `build.rs`).\n\
             #[used]\n#[unsafe(link_section = \"package-docs\")]\n\
             static PACKAGE_DOCS: [u8; {}] = *include_bytes!(concat!(env!(\"OUT_DIR\"), \"/package-docs.bin\"));\n",
            section.len()
        ),
    )?;
    Ok(())
}
