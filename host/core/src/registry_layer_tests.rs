//! [`Registry::layered`]: a session's own registrations over the host's.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use crate::plugin::{Decision, PluginRef};
use crate::registry::tests::{holder, tools};
use crate::registry::{Registrations, Registry};
use crate::testkit::FakePolicy;

#[test]
fn a_layered_registry_shows_the_parent_then_its_own() {
    let host = Arc::new(Registry::new());
    host.install(PluginRef::native("fs"), tools("fs", &["read"])).unwrap();
    let session = Registry::layered(host.clone());
    session.install(PluginRef::native("mcp:ed"), tools("mcp:ed", &["mcp__ed__echo", "read"])).unwrap();

    let snap = session.snapshot();
    let names: Vec<&str> = snap.tools.keys().map(String::as_str).collect();
    assert_eq!(names, ["mcp__ed__echo", "read"]);
    // The parent keeps a clashing name; the parent never sees the layer.
    assert_eq!(holder(&session, "read").as_deref(), Some("fs"));
    assert!(holder(&host, "mcp__ed__echo").is_none());
    let plugins: Vec<&str> = snap.plugins.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(plugins, ["fs", "mcp:ed"]);
    // Cached while nothing changes.
    assert!(Arc::ptr_eq(&snap, &session.snapshot()));

    // A change of the parent (a hot reload, a new policy) shows at once.
    let policy =
        Registrations { policy: Some(Arc::new(FakePolicy::new("gate", Ok(Decision::Allow)))), ..Default::default() };
    host.install(PluginRef::native("gate"), policy).unwrap();
    let after = session.snapshot();
    assert_eq!(after.policies.len(), 1);
    assert!(after.generation > snap.generation);
    assert_eq!(session.version_of("gate").map(|p| p.id).as_deref(), Some("gate"));

    // Once the parent drops the name, the layer's tool is visible.
    host.revoke("fs");
    assert_eq!(holder(&session, "read").as_deref(), Some("mcp:ed"));
    // Revoking the layer's plugin leaves the parent's view.
    session.revoke("mcp:ed");
    assert!(session.snapshot().tools.is_empty());
    assert!(session.version_of("mcp:ed").is_none());
    assert_eq!(session.snapshot().policies.len(), 1);
}
