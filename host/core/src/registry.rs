//! The registry of everything plugins provide, owned per plugin version.
//!
//! Each loaded plugin version owns a set of registrations (tools, LLM
//! adapters, policies, hooks, prompt sections). Replacing a plugin swaps its
//! whole set atomically; unloading revokes all of it. Readers take a cheap
//! [`Snapshot`] (an `Arc`), so a step sees one consistent view and in-flight
//! calls keep the version they started with.
//!
//! A registry can be **layered** over another ([`Registry::layered`]): its
//! snapshot is the parent's current view, then its own registrations (an
//! ACP session's own MCP servers over the host's plugins). On a tool-name
//! clash between the layers the parent keeps the name.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

use crate::plugin::{Compactor, Hook, HookPoint, LlmAdapter, PluginRef, Policy, PromptSection, Tool};

/// Everything one plugin version registers.
#[derive(Default, Clone)]
pub struct Registrations {
    /// Tools.
    pub tools: Vec<Arc<dyn Tool>>,
    /// LLM adapter, if the plugin is one.
    pub llm: Option<Arc<dyn LlmAdapter>>,
    /// Policy, if the plugin is one.
    pub policy: Option<Arc<dyn Policy>>,
    /// Hook listener, if any.
    pub hooks: Option<Arc<dyn Hook>>,
    /// Static prompt sections.
    pub prompt_sections: Vec<PromptSection>,
    /// History compactor, if the plugin is one.
    pub compactor: Option<Arc<dyn Compactor>>,
}

impl Registrations {
    /// Whether nothing is registered.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
            && self.llm.is_none()
            && self.policy.is_none()
            && self.hooks.is_none()
            && self.prompt_sections.is_empty()
            && self.compactor.is_none()
    }
}

/// A registration set the registry refuses as a whole.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RegistryError {
    /// One plugin offers two tools of the same name.
    #[error("plugin `{plugin}` offers the tool `{tool}` twice")]
    DuplicateToolInPlugin {
        /// Tool name.
        tool: String,
        /// The plugin.
        plugin: String,
    },
}

/// A tool name offered by two plugins: the plugin of higher precedence
/// ([`Registry::set_precedence`]; the host gives a row of a later config
/// layer more), else the one installed first (at start, the earlier row in
/// profile order), has it; the other's tool is refused and stays refused
/// while the holder offers that name. When the holder stops offering it
/// (unload, or a version without it), the next plugin in that order that
/// offers the name gets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolConflict {
    /// Tool name.
    pub tool: String,
    /// Plugin id that has the name.
    pub holder: String,
    /// Plugin id whose tool of that name is refused.
    pub refused: String,
}

impl std::fmt::Display for ToolConflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "tool `{}` of plugin `{}` refused: plugin `{}` provides it (higher precedence, else earlier in load order)",
            self.tool, self.refused, self.holder
        )
    }
}

struct Entry {
    plugin: PluginRef,
    order: usize,
    regs: Registrations,
}

/// An immutable view of the registry at one moment.
#[derive(Default)]
pub struct Snapshot {
    /// Generation counter (bumps on every change).
    pub generation: u64,
    /// Tools by name.
    pub tools: BTreeMap<String, Arc<dyn Tool>>,
    /// LLM adapters by plugin id, in load order.
    pub llms: Vec<(String, Arc<dyn LlmAdapter>)>,
    /// Policies in profile (load) order.
    pub policies: Vec<Arc<dyn Policy>>,
    /// Hooks per point, sorted by priority then load order.
    pub hooks: BTreeMap<HookPoint, Vec<Arc<dyn Hook>>>,
    /// Prompt sections sorted by order, then plugin load order.
    pub prompt_sections: Vec<PromptSection>,
    /// Loaded plugin versions in load order.
    pub plugins: Vec<PluginRef>,
    /// Compactors in load order (the first one is used).
    pub compactors: Vec<Arc<dyn Compactor>>,
    /// Tools refused because an earlier plugin has their name.
    pub tool_conflicts: Vec<ToolConflict>,
    /// The model's tool listing per listing configuration, computed on the
    /// first step that asks ([`Snapshot::model_specs`]): every step of every
    /// session on this view offers the same specs.
    model_specs: Mutex<Vec<(crate::catalog::ListingConfig, Arc<[crate::plugin::ToolSpec]>)>>,
}

/// Most listing configurations one snapshot keeps computed listings for
/// (sessions with their own listing settings beyond that compute theirs
/// each step).
const MODEL_SPECS_KEPT: usize = 8;

impl Snapshot {
    /// The same view with only the tools named in `allowed` (a subagent's
    /// restricted tool set); everything else is shared.
    pub fn restricted(&self, allowed: &std::collections::BTreeSet<String>) -> Snapshot {
        Snapshot {
            generation: self.generation,
            tools: self
                .tools
                .iter()
                .filter(|(n, _)| allowed.contains(*n))
                .map(|(n, t)| (n.clone(), t.clone()))
                .collect(),
            llms: self.llms.clone(),
            policies: self.policies.clone(),
            hooks: self.hooks.clone(),
            prompt_sections: self.prompt_sections.clone(),
            plugins: self.plugins.clone(),
            compactors: self.compactors.clone(),
            tool_conflicts: self.tool_conflicts.clone(),
            model_specs: Mutex::default(),
        }
    }

    /// The specs offered to the model under `listing`
    /// ([`crate::catalog::model_specs_within`]), computed once per snapshot
    /// and listing.
    pub fn model_specs(&self, listing: &crate::catalog::ListingConfig) -> Arc<[crate::plugin::ToolSpec]> {
        let mut kept = self.model_specs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, specs)) = kept.iter().find(|(l, _)| l == listing) {
            return specs.clone();
        }
        let specs: Arc<[crate::plugin::ToolSpec]> = crate::catalog::model_specs_within(self, listing).into();
        if kept.len() < MODEL_SPECS_KEPT {
            kept.push((listing.clone(), specs.clone()));
        }
        specs
    }

    /// The conflicts a plugin is part of, as holder or as the refused side.
    pub fn conflicts_of(&self, plugin_id: &str) -> Vec<ToolConflict> {
        self.tool_conflicts.iter().filter(|c| c.holder == plugin_id || c.refused == plugin_id).cloned().collect()
    }

    /// The tool specs, sorted by name.
    pub fn tool_specs(&self) -> Vec<crate::plugin::ToolSpec> {
        self.tools.values().map(|t| t.spec().clone()).collect()
    }

    /// An adapter by plugin id, or the first one loaded.
    pub fn llm(&self, id: Option<&str>) -> Option<Arc<dyn LlmAdapter>> {
        match id {
            Some(id) => self.llms.iter().find(|(p, _)| p == id).map(|(_, a)| a.clone()),
            None => self.llms.first().map(|(_, a)| a.clone()),
        }
    }

    /// Number of registrations owned by a plugin id (0 after it unloads).
    pub fn count_owned_by(&self, plugin_id: &str) -> usize {
        self.tools.values().filter(|t| t.plugin().id == plugin_id).count()
            + self.llms.iter().filter(|(p, _)| p == plugin_id).count()
            + self.policies.iter().filter(|p| p.plugin().id == plugin_id).count()
            + self.hooks.values().flatten().filter(|h| h.plugin().id == plugin_id).count()
            + self.prompt_sections.iter().filter(|s| s.plugin.id == plugin_id).count()
            + self.compactors.iter().filter(|c| c.plugin().id == plugin_id).count()
    }
}

/// The live registry.
#[derive(Default)]
pub struct Registry {
    inner: RwLock<Inner>,
    /// The registry this one is layered over.
    parent: Option<Arc<Registry>>,
    /// The merged view, with the parent's and the own generation it was built from.
    merged: Mutex<Option<(u64, u64, Arc<Snapshot>)>>,
}

#[derive(Default)]
struct Inner {
    entries: BTreeMap<String, Entry>,
    next_order: usize,
    generation: u64,
    snapshot: Arc<Snapshot>,
    /// Tool-name precedence by plugin id (absent: 0).
    precedence: BTreeMap<String, i32>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty registry layered over `parent`: its snapshots show the
    /// parent's current registrations, then its own.
    pub fn layered(parent: Arc<Registry>) -> Self {
        Self { parent: Some(parent), ..Self::default() }
    }

    /// Installs `regs` as the registrations of `plugin.id`, atomically
    /// replacing (and so revoking) whatever an earlier version registered.
    /// A plugin keeps its place in the load order across versions.
    ///
    /// A tool name another plugin also offers is not an error: the one of
    /// higher precedence, else the earlier in load order, keeps the name
    /// and the other's tool is refused
    /// (listed in [`Snapshot::tool_conflicts`]; see [`ToolConflict`]).
    /// Fails without changing anything when `regs` names one tool twice.
    pub fn install(&self, plugin: PluginRef, regs: Registrations) -> Result<(), RegistryError> {
        let mut seen = std::collections::BTreeSet::new();
        for tool in &regs.tools {
            let name = &tool.spec().name;
            if !seen.insert(name.as_str()) {
                return Err(RegistryError::DuplicateToolInPlugin { tool: name.clone(), plugin: plugin.id.clone() });
            }
        }
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let order = match inner.entries.get(&plugin.id) {
            Some(e) => e.order,
            None => {
                inner.next_order += 1;
                inner.next_order
            }
        };
        inner.entries.insert(plugin.id.clone(), Entry { plugin, order, regs });
        inner.rebuild();
        Ok(())
    }

    /// Sets which plugins win a tool name both offer: higher precedence
    /// first, equal precedence by load order (ids not listed have 0). The
    /// view is rebuilt when this changes it.
    pub fn set_precedence(&self, precedence: BTreeMap<String, i32>) {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        if inner.precedence != precedence {
            inner.precedence = precedence;
            inner.rebuild();
        }
    }

    /// Revokes every registration of `plugin_id`. Returns the version that
    /// was removed, if any.
    pub fn revoke(&self, plugin_id: &str) -> Option<PluginRef> {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let removed = inner.entries.remove(plugin_id).map(|e| e.plugin);
        if removed.is_some() {
            inner.rebuild();
        }
        removed
    }

    /// The current view (of a layered registry: the parent's, then its own).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        let own = self.inner.read().unwrap_or_else(|e| e.into_inner()).snapshot.clone();
        let Some(parent) = &self.parent else {
            return own;
        };
        let base = parent.snapshot();
        let mut merged = self.merged.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((p, o, snap)) = merged.as_ref()
            && *p == base.generation
            && *o == own.generation
        {
            return snap.clone();
        }
        let snap = Arc::new(layer(&base, &own));
        *merged = Some((base.generation, own.generation, snap.clone()));
        snap
    }

    /// The loaded version of a plugin id (own registrations first).
    pub fn version_of(&self, plugin_id: &str) -> Option<PluginRef> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        let own = inner.entries.get(plugin_id).map(|e| e.plugin.clone());
        drop(inner);
        own.or_else(|| self.parent.as_ref().and_then(|p| p.version_of(plugin_id)))
    }
}

/// `own` over `base`: everything of both, `base` first, and `base` keeps a
/// clashing tool name. Generations only grow, so their sum changes whenever
/// either side does.
fn layer(base: &Snapshot, own: &Snapshot) -> Snapshot {
    let mut tools = base.tools.clone();
    let mut tool_conflicts: Vec<ToolConflict> =
        base.tool_conflicts.iter().chain(&own.tool_conflicts).cloned().collect();
    for (name, t) in &own.tools {
        match tools.get(name) {
            Some(holder) => tool_conflicts.push(ToolConflict {
                tool: name.clone(),
                holder: holder.plugin().id.clone(),
                refused: t.plugin().id.clone(),
            }),
            None => {
                tools.insert(name.clone(), t.clone());
            }
        }
    }
    let mut hooks = base.hooks.clone();
    for (point, list) in &own.hooks {
        let all = hooks.entry(*point).or_default();
        all.extend(list.iter().cloned());
        // Stable: equal priorities keep the parent's hooks first.
        all.sort_by_key(|h| h.subscriptions().iter().find(|(p, _)| p == point).map_or(0, |(_, prio)| *prio));
    }
    let mut prompt_sections: Vec<PromptSection> =
        base.prompt_sections.iter().chain(&own.prompt_sections).cloned().collect();
    prompt_sections.sort_by_key(|s| s.order);
    Snapshot {
        generation: base.generation + own.generation,
        tools,
        llms: base.llms.iter().chain(&own.llms).cloned().collect(),
        policies: base.policies.iter().chain(&own.policies).cloned().collect(),
        hooks,
        prompt_sections,
        plugins: base.plugins.iter().chain(&own.plugins).cloned().collect(),
        compactors: base.compactors.iter().chain(&own.compactors).cloned().collect(),
        tool_conflicts,
        model_specs: Mutex::default(),
    }
}

impl Inner {
    fn rebuild(&mut self) {
        self.generation += 1;
        let mut entries: Vec<&Entry> = self.entries.values().collect();
        entries.sort_by_key(|e| e.order);
        let mut snap = Snapshot { generation: self.generation, ..Snapshot::default() };
        let mut hooks: Vec<(i32, usize, HookPoint, Arc<dyn Hook>)> = Vec::new();
        let mut sections: Vec<(i32, usize, PromptSection)> = Vec::new();
        // Tool name -> the plugin that has it: the highest precedence, then
        // the first in load order.
        let mut by_precedence = entries.clone();
        by_precedence
            .sort_by_key(|e| (std::cmp::Reverse(self.precedence.get(&e.plugin.id).copied().unwrap_or(0)), e.order));
        let mut holders: BTreeMap<String, String> = BTreeMap::new();
        for e in by_precedence {
            for t in &e.regs.tools {
                let name = &t.spec().name;
                match holders.get(name) {
                    Some(holder) => snap.tool_conflicts.push(ToolConflict {
                        tool: name.clone(),
                        holder: holder.clone(),
                        refused: e.plugin.id.clone(),
                    }),
                    None => {
                        holders.insert(name.clone(), e.plugin.id.clone());
                        snap.tools.insert(name.clone(), t.clone());
                    }
                }
            }
        }
        for e in entries {
            snap.plugins.push(e.plugin.clone());
            if let Some(l) = &e.regs.llm {
                snap.llms.push((e.plugin.id.clone(), l.clone()));
            }
            if let Some(p) = &e.regs.policy {
                snap.policies.push(p.clone());
            }
            if let Some(c) = &e.regs.compactor {
                snap.compactors.push(c.clone());
            }
            if let Some(h) = &e.regs.hooks {
                for (point, prio) in h.subscriptions() {
                    hooks.push((*prio, e.order, *point, h.clone()));
                }
            }
            for s in &e.regs.prompt_sections {
                sections.push((s.order, e.order, s.clone()));
            }
        }
        hooks.sort_by_key(|(prio, order, _, _)| (*prio, *order));
        for (_, _, point, h) in hooks {
            snap.hooks.entry(point).or_default().push(h);
        }
        sections.sort_by_key(|(o, order, _)| (*o, *order));
        snap.prompt_sections = sections.into_iter().map(|(_, _, s)| s).collect();
        self.snapshot = Arc::new(snap);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;
    use crate::plugin::ToolMode;
    use crate::testkit::FakeTool;

    /// Registrations of fake parallel tools owned by `plugin`.
    pub(crate) fn tools(plugin: &str, names: &[&str]) -> Registrations {
        let plugin = PluginRef::native(plugin);
        Registrations {
            tools: names
                .iter()
                .map(|n| Arc::new(FakeTool::new(n, ToolMode::Parallel).plugin_ref(plugin.clone())) as Arc<dyn Tool>)
                .collect(),
            ..Registrations::default()
        }
    }

    /// The id of the plugin that holds `tool` in the current snapshot.
    pub(crate) fn holder(reg: &Registry, tool: &str) -> Option<String> {
        reg.snapshot().tools.get(tool).map(|t| t.plugin().id.clone())
    }

    #[test]
    fn the_first_plugin_keeps_a_shared_tool_name_and_the_later_one_still_loads() {
        let reg = Registry::new();
        reg.install(PluginRef::native("a"), tools("a", &["read", "grep"])).unwrap();
        // `b` claims `read` too: its other tool loads, its `read` is refused.
        reg.install(PluginRef::native("b"), tools("b", &["read", "b_only"])).unwrap();
        assert_eq!(holder(&reg, "read").as_deref(), Some("a"));
        assert_eq!(holder(&reg, "b_only").as_deref(), Some("b"));
        let snap = reg.snapshot();
        let c = ToolConflict { tool: "read".into(), holder: "a".into(), refused: "b".into() };
        assert_eq!(snap.tool_conflicts, vec![c.clone()]);
        assert_eq!(snap.conflicts_of("b"), vec![c.clone()]);
        assert_eq!(snap.conflicts_of("a"), vec![c.clone()]);
        let text = c.to_string();
        assert!(text.contains("`read`") && text.contains("`a`") && text.contains("`b`"), "{text}");
        // A reload of the holder keeps its names and its place.
        reg.install(PluginRef::native("a"), tools("a", &["read", "grep", "new"])).unwrap();
        assert_eq!(holder(&reg, "read").as_deref(), Some("a"));
        // A reload of the refused plugin is still refused.
        reg.install(PluginRef::native("b"), tools("b", &["read"])).unwrap();
        assert_eq!(holder(&reg, "read").as_deref(), Some("a"));
        // When the holder drops the name, the next plugin in order has it.
        reg.install(PluginRef::native("a"), tools("a", &["grep"])).unwrap();
        assert_eq!(holder(&reg, "read").as_deref(), Some("b"));
        assert!(reg.snapshot().tool_conflicts.is_empty());
        // Order is load order, not the order of the latest install: `a`
        // (loaded first) takes the name back when it offers it again.
        reg.install(PluginRef::native("a"), tools("a", &["grep", "read"])).unwrap();
        assert_eq!(holder(&reg, "read").as_deref(), Some("a"));
        reg.revoke("a");
        assert_eq!(holder(&reg, "read").as_deref(), Some("b"));
    }

    #[test]
    fn the_model_listing_is_computed_once_per_snapshot_and_follows_a_reload() {
        let reg = Registry::new();
        reg.install(PluginRef::native("a"), tools("a", &["read", "grep"])).unwrap();
        let snap = reg.snapshot();
        let listing = crate::catalog::ListingConfig::default();
        let first = snap.model_specs(&listing);
        let names: Vec<&str> = first.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["grep", "read"]);
        // Every later step on this view shares the computed listing.
        assert!(Arc::ptr_eq(&first, &snap.model_specs(&listing)));
        let lazy = crate::catalog::ListingConfig {
            budget_bytes: Some(1),
            lazy_plugins: ["a".to_string()].into_iter().collect(),
        };
        assert!(!Arc::ptr_eq(&first, &snap.model_specs(&lazy)), "another listing is its own");
        // A reload makes a new view, with a listing of its own tools.
        reg.install(PluginRef::native("a"), tools("a", &["read"])).unwrap();
        let after = reg.snapshot().model_specs(&listing);
        assert_eq!(after.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["read"]);
        // The view an agent holds keeps its own.
        assert_eq!(snap.model_specs(&listing).len(), 2);
    }

    #[test]
    fn a_plugin_of_higher_precedence_wins_a_shared_tool_name() {
        let reg = Registry::new();
        reg.install(PluginRef::native("shipped"), tools("shipped", &["count", "grep"])).unwrap();
        reg.install(PluginRef::native("project"), tools("project", &["count"])).unwrap();
        assert_eq!(holder(&reg, "count").as_deref(), Some("shipped"));
        reg.set_precedence([("project".to_string(), 1)].into_iter().collect());
        assert_eq!(holder(&reg, "count").as_deref(), Some("project"));
        assert_eq!(holder(&reg, "grep").as_deref(), Some("shipped"));
        let c = ToolConflict { tool: "count".into(), holder: "project".into(), refused: "shipped".into() };
        assert_eq!(reg.snapshot().tool_conflicts, vec![c]);
        // A reload of the shipped plugin does not take the name back.
        reg.install(PluginRef::native("shipped"), tools("shipped", &["count", "grep"])).unwrap();
        assert_eq!(holder(&reg, "count").as_deref(), Some("project"));
        // Without the project plugin the shipped one has it again.
        reg.revoke("project");
        assert_eq!(holder(&reg, "count").as_deref(), Some("shipped"));
        assert!(reg.snapshot().tool_conflicts.is_empty());
    }

    #[test]
    fn a_layered_registry_lists_the_names_its_parent_kept() {
        let parent = Arc::new(Registry::new());
        parent.install(PluginRef::native("a"), tools("a", &["read"])).unwrap();
        let child = Registry::layered(parent);
        child.install(PluginRef::native("mcp:s"), tools("mcp:s", &["read", "own"])).unwrap();
        let snap = child.snapshot();
        assert_eq!(snap.tools.get("read").map(|t| t.plugin().id.clone()).as_deref(), Some("a"));
        assert!(snap.tools.contains_key("own"));
        let c = ToolConflict { tool: "read".into(), holder: "a".into(), refused: "mcp:s".into() };
        assert_eq!(snap.tool_conflicts, vec![c]);
    }

    #[test]
    fn a_plugin_offering_one_name_twice_is_refused_whole() {
        let reg = Registry::new();
        reg.install(PluginRef::native("a"), tools("a", &["x"])).unwrap();
        let err = reg.install(PluginRef::native("a"), tools("a", &["y", "y"])).unwrap_err();
        assert_eq!(err, RegistryError::DuplicateToolInPlugin { tool: "y".into(), plugin: "a".into() });
        assert!(err.to_string().contains("`y` twice"), "{err}");
        // Nothing changed: the old version still serves.
        assert_eq!(holder(&reg, "x").as_deref(), Some("a"));
        assert!(holder(&reg, "y").is_none());
    }
}
