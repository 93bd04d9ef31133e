//! `cargo xtask bench` section `wire` (being written).

fn main() {
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench");
    let _ = std::fs::create_dir_all(&out);
    let _ = std::fs::write(out.join("wire.md"), "not measured yet\n");
    let _ = std::fs::write(out.join("wire.json"), "{}\n");
}
