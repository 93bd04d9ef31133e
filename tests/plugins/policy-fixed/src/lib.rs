//! proto
use wharf_sdk::raw::wharf::plugin::types::*;
use wharf_sdk::raw::wharf::plugin::policy::*;
struct P;
impl P {
    fn info() -> PluginInfo { PluginInfo { name: "pol".into(), version: "0.1.0".into(), description: "x".into(), requests: GrantRequest { filesystem: FsAccess::None, hosts: vec![], env: vec![], process: false, memory_mb: None } } }
    fn evaluate(r: Request) -> Decision { Decision::Deny(r.tool) }
}
wharf_sdk::export_policy!(P);
