//! Component distribution: OCI registries (CNCF Wasm layout), a content-addressed local store and cosign-compatible signatures. No wasmtime.
