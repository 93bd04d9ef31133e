//! A component binary's top-level imports and exports, read without
//! compiling it (what the CNCF Wasm config records, and what the harness
//! checks before it loads a model adapter).

use serde::{Deserialize, Serialize};

use crate::DistError;

/// `component` of the CNCF Wasm config blob (`wasm::WasmConfig`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ComponentInfo {
    /// Top-level export names (`wasi:cli/run@0.2.0`, `wharf:plugin/tool@0.1.0` …).
    pub exports: Vec<String>,
    /// Top-level import names.
    pub imports: Vec<String>,
    /// The target world, when known (never set by Wharf).
    pub target: Option<String>,
}

/// The top-level imports and exports of a component binary. Refuses a core
/// module or anything that is not Wasm.
pub fn component_info(bytes: &[u8]) -> Result<ComponentInfo, DistError> {
    use wasmparser::{Encoding, Parser, Payload};
    let mut info = ComponentInfo::default();
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(|e| DistError::Layout(format!("not a valid Wasm binary: {e}")))?;
        match payload {
            Payload::Version { encoding, .. } => {
                if depth == 0 && encoding != Encoding::Component {
                    return Err(DistError::Layout("a core Wasm module, not a component".into()));
                }
                depth += 1;
            }
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(s) if depth == 1 => {
                for i in s {
                    let i = i.map_err(|e| DistError::Layout(format!("bad import section: {e}")))?;
                    info.imports.push(i.name.name.to_string());
                }
            }
            Payload::ComponentExportSection(s) if depth == 1 => {
                for e in s {
                    let e = e.map_err(|e| DistError::Layout(format!("bad export section: {e}")))?;
                    info.exports.push(e.name.name.to_string());
                }
            }
            _ => {}
        }
    }
    if depth != 0 && info.exports.is_empty() && info.imports.is_empty() {
        return Err(DistError::Layout("a truncated Wasm binary".into()));
    }
    Ok(info)
}
