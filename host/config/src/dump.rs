//! Rendering the composed config with where each value came from.

use crate::error::Location;
use crate::merge::row_key;
use crate::schema::RowKind;
use crate::tree::{Node, Table, Val, inline, toml_key};

/// What secret values (MCP `env` and `headers` values) are shown as.
pub(crate) const REDACTED: &str = "<redacted>";

/// A copy of the composed tree with every MCP `env` and `headers` value
/// replaced by [`REDACTED`] (keys and provenance kept), for showing.
pub(crate) fn redacted(root: &Table) -> Table {
    let mut out = root.clone();
    if let Some(Node { val: Val::Array(rows), .. }) = out.get_mut("mcp") {
        for row in rows {
            let Val::Table(t) = &mut row.val else { continue };
            for key in ["env", "headers"] {
                if let Some(Node { val: Val::Table(secrets), .. }) = t.get_mut(key) {
                    for e in &mut secrets.entries {
                        e.node.val = Val::Str(REDACTED.into());
                    }
                }
            }
        }
    }
    out
}

/// Arrays whose one-line form is longer than this are written one element
/// per line.
const INLINE_MAX: usize = 80;

/// Every leaf (a scalar or an array) of the composed tree, keyed by its
/// dotted `-c` key (plugin rows by id, MCP rows by name), in dump order.
pub(crate) fn leaves(root: &Table) -> Vec<(String, Location)> {
    let mut out = Vec::new();
    for e in &root.entries {
        match (RowKind::of(&e.key), &e.node.val) {
            (Some(kind), Val::Array(rows)) => {
                for row in rows {
                    if let (Some(id), Val::Table(t)) = (row_key(row, kind), &row.val) {
                        collect(t, &format!("{}.{}", kind.key(), toml_key(id)), &mut out);
                    }
                }
            }
            (_, Val::Table(t)) => collect(t, &toml_key(&e.key), &mut out),
            (_, _) => out.push((toml_key(&e.key), e.node.at.clone())),
        }
    }
    out
}

fn collect(t: &Table, prefix: &str, out: &mut Vec<(String, Location)>) {
    for e in &t.entries {
        let key = format!("{prefix}.{}", toml_key(&e.key));
        match &e.node.val {
            Val::Table(sub) => collect(sub, &key, out),
            _ => out.push((key, e.node.at.clone())),
        }
    }
}

/// The composed tree as TOML, with a `# from LAYER:LINE` comment on each
/// leaf.
pub(crate) fn render(root: &Table) -> String {
    let mut out = String::from("# Composed Wharf configuration; each value notes the layer that set it.\n");
    for e in &root.entries {
        match (&e.key[..], &e.node.val) {
            (key @ ("plugin" | "mcp" | "bundle"), Val::Array(rows)) => {
                for row in rows {
                    if let Val::Table(t) = &row.val {
                        out.push_str(&format!("\n[[{key}]]\n"));
                        body(t, key, &mut out);
                    }
                }
            }
            (key, Val::Table(t)) => {
                out.push_str(&format!("\n[{}]\n", toml_key(key)));
                body(t, &toml_key(key), &mut out);
            }
            (key, _) => leaf(key, &e.node, &mut out),
        }
    }
    out
}

/// A table's leaves, then its sub-tables under `[header.key]`.
fn body(t: &Table, header: &str, out: &mut String) {
    for e in &t.entries {
        if !matches!(e.node.val, Val::Table(_)) {
            leaf(&e.key, &e.node, out);
        }
    }
    for e in &t.entries {
        if let Val::Table(sub) = &e.node.val {
            let h = format!("{header}.{}", toml_key(&e.key));
            out.push_str(&format!("[{h}]\n"));
            body(sub, &h, out);
        }
    }
}

fn leaf(key: &str, node: &Node, out: &mut String) {
    let from = comment(&node.at);
    let one_line = inline(&node.val);
    match &node.val {
        Val::Array(items)
            if !items.is_empty()
                && (one_line.len() > INLINE_MAX || items.iter().any(|n| matches!(n.val, Val::Table(_)))) =>
        {
            out.push_str(&format!("{} = [  {from}\n", toml_key(key)));
            for n in items {
                out.push_str(&format!("    {},\n", inline(&n.val)));
            }
            out.push_str("]\n");
        }
        _ => out.push_str(&format!("{} = {one_line}  {from}\n", toml_key(key))),
    }
}

fn comment(at: &Location) -> String {
    let text = at.short();
    let clean: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    format!("# from {clean}")
}
