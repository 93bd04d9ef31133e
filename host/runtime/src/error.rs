//! Typed errors for loading components. Each names the file and the problem
//! in one line, so `wharf` can print it as is.

use std::path::PathBuf;

/// Why a component could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        /// File.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// Not WebAssembly at all.
    #[error("{}: not a WebAssembly file (bad magic bytes)", path.display())]
    NotWasm {
        /// File.
        path: PathBuf,
    },
    /// A core module, not a component.
    #[error("{}: is a core WebAssembly module, not a component (build for wasm32-wasip2, or wrap it with `wasm-tools component new`)", path.display())]
    CoreModule {
        /// File.
        path: PathBuf,
    },
    /// Compilation failed (invalid or unsupported wasm).
    #[error("{}: invalid component: {reason}", path.display())]
    Compile {
        /// File.
        path: PathBuf,
        /// Cause.
        reason: String,
    },
    /// Built against a WIT package version this host does not implement.
    #[error("{}: built against {found}, but this host implements wharf:plugin@{supported} (compatible: 0.1.x)", path.display())]
    UnsupportedVersion {
        /// File.
        path: PathBuf,
        /// The version found.
        found: String,
        /// The host's version.
        supported: String,
    },
    /// Exports no Wharf plugin interface.
    #[error("{}: not a Wharf plugin: it exports no wharf:plugin interface (exports: {exports})", path.display())]
    WrongWorld {
        /// File.
        path: PathBuf,
        /// What it exports.
        exports: String,
    },
    /// An import the host does not provide.
    #[error("{}: imports `{import}`, which this host does not provide", path.display())]
    MissingImport {
        /// File.
        path: PathBuf,
        /// The import.
        import: String,
    },
    /// Linking or the describe calls failed.
    #[error("{}: {reason}", path.display())]
    Invalid {
        /// File.
        path: PathBuf,
        /// Cause.
        reason: String,
    },
}
