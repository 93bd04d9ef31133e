//! Code Mode's tool catalogue: the description of a tool that calls tools
//! ([`Tool::reach`], e.g. `run_code`) is completed, at every model request,
//! with the tools it may call then — their names and compact argument
//! signatures (`read({path: string, limit?: integer})`) — so the model
//! knows the program's API without a listing call, and the list follows
//! the registry (a plugin loaded, unloaded or reloaded, MCP tools).
//!
//! Bounded: a line per tool of at most [`MAX_LINE`] bytes, at most
//! [`MAX_CATALOG`] bytes in all (the names past it are listed, cut, too).
//!
//! **The listing budget** ([`ListingConfig`]): with a tool that calls tools
//! loaded, the tools offered to the model directly stay within
//! `budget_bytes` of specs (name, description, schema) whatever the number
//! of tools. Under the budget everything is listed (direct calls, as in a
//! small session); over it, the calling tools first, then the tools of the
//! rows not marked lazy, in name order, while they fit; the others are
//! reached from a program (`tools.search`, `tools.call`), and the calling
//! tool's description says so instead of listing them. Tools of a lazy row
//! (`ListingConfig::lazy_plugins`) are never listed while a calling tool
//! can reach them.

use std::fmt::Write as _;

use serde_json::Value;

use crate::plugin::{Tool, ToolReach, ToolSpec};
use crate::registry::Snapshot;
use crate::util::truncate_str;

/// Most bytes of one tool's line in the catalogue.
pub const MAX_LINE: usize = 400;
/// Most bytes of the catalogue appended to one description.
pub const MAX_CATALOG: usize = 12 << 10;
/// How deep nested object schemas are spelled out.
const MAX_DEPTH: usize = 2;

/// Which tools the model is offered directly (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListingConfig {
    /// Most bytes of tool specs offered directly when a tool that calls
    /// tools is loaded; `None`: no bound.
    pub budget_bytes: Option<usize>,
    /// Plugin ids (rows) whose tools are only in the catalogue while a
    /// calling tool can reach them.
    pub lazy_plugins: std::collections::BTreeSet<String>,
}

/// Bytes a spec costs in a request: name, description, schema, framing.
pub fn spec_bytes(spec: &ToolSpec) -> usize {
    spec.name.len() + spec.description.len() + spec.input_schema.to_string().len() + 48
}

/// The specs of `snap`'s tools as the model sees them: a tool with a
/// [`Tool::reach`] gets the catalogue of the tools it may call appended to
/// its description. Everything, unbounded: [`model_specs_within`] applies
/// a listing budget.
pub fn model_specs(snap: &Snapshot) -> Vec<ToolSpec> {
    model_specs_within(snap, &ListingConfig::default())
}

/// [`model_specs`] within `listing` (see the module docs).
pub fn model_specs_within(snap: &Snapshot, listing: &ListingConfig) -> Vec<ToolSpec> {
    let callers: Vec<&std::sync::Arc<dyn Tool>> = snap.tools.values().filter(|t| t.reach().is_some()).collect();
    // A tool is listed only in the catalogue when a calling tool reaches it.
    let reached = |t: &dyn Tool| {
        callers.iter().any(|c| {
            c.plugin().id != t.plugin().id
                && match c.reach() {
                    Some(ToolReach::All) => true,
                    Some(ToolReach::Only(names)) => names.iter().any(|n| *n == t.spec().name),
                    None => false,
                }
        })
    };
    let mut listed: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    let mut catalogued = 0usize;
    let budgeted = listing.budget_bytes.filter(|_| !callers.is_empty());
    for t in snap.tools.values() {
        let lazy = listing.lazy_plugins.contains(&t.plugin().id) && reached(t.as_ref());
        if !lazy {
            listed.insert(t.spec().name.clone());
        }
    }
    if let Some(budget) = budgeted
        && snap.tools.values().map(|t| spec_bytes(t.spec())).sum::<usize>() > budget
    {
        // The calling tools first (their own specs, with a short note),
        // then the others in name order while they fit.
        let mut used: usize = callers.iter().map(|c| spec_bytes(c.spec()) + 512).sum();
        let names: Vec<String> = listed.iter().cloned().collect();
        for name in names {
            let Some(t) = snap.tools.get(&name) else { continue };
            if t.reach().is_some() {
                continue;
            }
            let cost = spec_bytes(t.spec());
            if used + cost <= budget || !reached(t.as_ref()) {
                used += cost;
            } else {
                listed.remove(&name);
            }
        }
    }
    for t in snap.tools.values() {
        if !listed.contains(&t.spec().name) {
            catalogued += 1;
        }
    }
    snap.tools
        .values()
        .filter(|t| listed.contains(&t.spec().name))
        .map(|t| {
            let mut spec = t.spec().clone();
            if let Some(reach) = t.reach() {
                let callable = callable(snap, t.as_ref(), reach);
                spec.description.push_str("\n\n");
                if catalogued == 0 {
                    spec.description.push_str(&catalog(&callable));
                } else {
                    spec.description.push_str(&catalog_note(callable.len(), catalogued));
                }
            }
            spec
        })
        .collect()
}

/// The calling tool's note when some tools are only in the catalogue.
fn catalog_note(callable: usize, catalogued: usize) -> String {
    format!(
        "A program can call {callable} tools: the tools offered to you directly (same names and arguments, \
         `tools.NAME(args)`) and {catalogued} more that are not listed here. Find them with `await \
         tools.search(\"words\")` (each result: `{{name, description, arguments}}`) and call one with `await \
         tools.call(name, args)`."
    )
}

/// The tools of `snap` that `tool` may call: not its plugin's own, only
/// those `reach` names.
fn callable<'a>(snap: &'a Snapshot, tool: &dyn Tool, reach: &ToolReach) -> Vec<&'a ToolSpec> {
    snap.tools
        .values()
        .filter(|t| t.plugin().id != tool.plugin().id)
        .filter(|t| match reach {
            ToolReach::All => true,
            ToolReach::Only(names) => names.iter().any(|n| *n == t.spec().name),
        })
        .map(|t| t.spec())
        .collect()
}

/// The catalogue text for `specs` (in their order).
pub fn catalog(specs: &[&ToolSpec]) -> String {
    if specs.is_empty() {
        return "No tools can be called from a program in this session.".to_string();
    }
    let mut out = String::from("Tools a program can call now (each returns a Promise of the tool's text output):");
    let mut left: Vec<&str> = Vec::new();
    for spec in specs {
        let line = line(spec);
        if left.is_empty() && out.len() + line.len() < MAX_CATALOG {
            out.push('\n');
            out.push_str(&line);
        } else {
            left.push(&spec.name);
        }
    }
    if !left.is_empty() {
        let mut names = left.join(", ");
        // The names alone may be long (many MCP tools): keep them bounded too.
        if truncate_str(&mut names, MAX_CATALOG / 2) {
            names.push('…');
        }
        let _ = write!(out, "\n(and {} more, arguments not shown: {names})", left.len());
    }
    out
}

/// `- tools.read({path: string, limit?: integer}) — first sentence.`
fn line(spec: &ToolSpec) -> String {
    let callee = if is_identifier(&spec.name) {
        format!("tools.{}(", spec.name)
    } else {
        format!("tools.call({}, ", Value::String(spec.name.clone()))
    };
    let mut line = format!("- {callee}{})", shape(&spec.input_schema, 0));
    let summary = summary(&spec.description);
    if !summary.is_empty() {
        let _ = write!(line, " — {summary}");
    }
    if truncate_str(&mut line, MAX_LINE) {
        line.push('…');
    }
    line
}

/// The first sentence (or line) of a description, at most 160 bytes.
fn summary(description: &str) -> String {
    let first = description.trim().lines().next().unwrap_or_default();
    let end = first.find(". ").map_or(first.len(), |i| i + 1);
    let mut s = first[..end].trim().to_string();
    if truncate_str(&mut s, 160) {
        s.push('…');
    }
    s
}

fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '$')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
        && name != "call"
}

/// A TypeScript-like spelling of a JSON Schema.
fn shape(schema: &Value, depth: usize) -> String {
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let parts: Vec<String> = values.iter().take(8).map(Value::to_string).collect();
        let more = if values.len() > 8 { "|…" } else { "" };
        return format!("{}{more}", parts.join("|"));
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(alts) = schema.get(key).and_then(Value::as_array) {
            let parts: Vec<String> = alts.iter().take(4).map(|a| shape(a, depth)).collect();
            return parts.join("|");
        }
    }
    let ty = match schema.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => {
            let names: Vec<&str> = ts.iter().filter_map(Value::as_str).filter(|t| *t != "null").collect();
            match names.as_slice() {
                [one] => (*one).to_string(),
                _ => return "any".into(),
            }
        }
        _ if schema.get("properties").is_some() => "object".into(),
        _ => return "any".into(),
    };
    match ty.as_str() {
        "array" => {
            let item = schema.get("items").map_or_else(|| "any".to_string(), |i| shape(i, depth + 1));
            if item.contains('|') { format!("({item})[]") } else { format!("{item}[]") }
        }
        "object" => {
            let Some(props) = schema.get("properties").and_then(Value::as_object) else {
                return "object".into();
            };
            if depth >= MAX_DEPTH {
                return "object".into();
            }
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let fields: Vec<String> = props
                .iter()
                .map(|(k, v)| {
                    let opt = if required.contains(&k.as_str()) { "" } else { "?" };
                    let key =
                        if is_identifier(k) || k == "call" { k.clone() } else { Value::String(k.clone()).to_string() };
                    format!("{key}{opt}: {}", shape(v, depth + 1))
                })
                .collect();
            format!("{{{}}}", fields.join(", "))
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::plugin::ToolMode;

    fn spec(name: &str, description: &str, schema: Value) -> ToolSpec {
        ToolSpec { name: name.into(), description: description.into(), input_schema: schema, mode: ToolMode::Parallel }
    }

    #[test]
    fn signatures_are_compact_typescript_like_shapes() {
        let read = spec(
            "read",
            "Read a file. Lines are numbered.\nMore text.",
            json!({"type": "object", "properties": {
                "path": {"type": "string"},
                "limit": {"type": "integer"},
                "mode": {"enum": ["a", "b"]},
                "tags": {"type": "array", "items": {"type": "string"}},
                "opt": {"type": ["string", "null"]}
            }, "required": ["path"]}),
        );
        let mcp = spec("mcp__srv__do-it", "", json!({"type": "object", "properties": {}}));
        let text = catalog(&[&read, &mcp]);
        let line = text.lines().find(|l| l.starts_with("- tools.read({")).unwrap_or_default();
        for part in ["path: string", "limit?: integer", r#"mode?: "a"|"b""#, "tags?: string[]", "opt?: string"] {
            assert!(line.contains(part), "{part} in {line}");
        }
        assert!(line.ends_with("}) — Read a file."), "{line}");
        assert!(text.contains(r#"- tools.call("mcp__srv__do-it", {})"#), "{text}");
        assert!(!text.contains("More text"), "{text}");
    }

    #[test]
    fn the_catalogue_is_bounded_and_names_what_it_leaves_out() {
        let big: Vec<ToolSpec> =
            (0..400).map(|i| spec(&format!("tool_{i:03}"), &"x".repeat(1000), json!({"type": "object"}))).collect();
        let refs: Vec<&ToolSpec> = big.iter().collect();
        let text = catalog(&refs);
        assert!(text.len() <= MAX_CATALOG + MAX_CATALOG / 2 + 64, "{}", text.len());
        assert!(text.contains("more, arguments not shown: "), "{text}");
        assert!(text.lines().all(|l| l.len() <= MAX_CATALOG / 2 + 64));
        assert!(text.contains("tool_000("));
        assert!(catalog(&[]).contains("No tools"));
    }
}
