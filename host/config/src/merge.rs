//! Merging one layer into the layers below it (see the crate docs for the
//! rules).

use crate::tree::{Entry, Node, Table, Val};

/// Merges `layer` over `base`: tables deep-merge, scalars and arrays are
/// replaced, and the top-level `plugin` rows merge by `id`.
pub(crate) fn merge_layer(base: &mut Table, layer: Table) {
    for e in layer.entries {
        if e.key == "plugin" {
            merge_rows(base, e);
        } else {
            merge_entry(base, e);
        }
    }
}

/// Deep-merges one entry into `base`.
pub(crate) fn merge_entry(base: &mut Table, e: Entry) {
    let Entry { key, key_at, node } = e;
    match node.val {
        Val::Table(t) => {
            if let Some(Node { val: Val::Table(bt), .. }) = base.get_mut(&key) {
                for c in t.entries {
                    merge_entry(bt, c);
                }
            } else {
                base.set(&key, key_at, Node { val: Val::Table(t), at: node.at });
            }
        }
        val => base.set(&key, key_at, Node { val, at: node.at }),
    }
}

/// The id of a (checked) plugin row.
pub(crate) fn row_id(row: &Node) -> Option<&str> {
    match &row.val {
        Val::Table(t) => match t.get("id").map(|n| &n.val) {
            Some(Val::Str(id)) => Some(id),
            _ => None,
        },
        _ => None,
    }
}

/// Merges a layer's `plugin` rows by id: an existing id has each top-level
/// key the row sets replaced wholesale (other keys kept); a new id appends.
fn merge_rows(base: &mut Table, e: Entry) {
    let Val::Array(rows) = e.node.val else { return };
    let target = match base.get_mut("plugin") {
        Some(Node { val: Val::Array(existing), .. }) => existing,
        _ => {
            base.set("plugin", e.key_at, Node { val: Val::Array(Vec::new()), at: e.node.at });
            match base.get_mut("plugin") {
                Some(Node { val: Val::Array(existing), .. }) => existing,
                _ => return,
            }
        }
    };
    for row in rows {
        let id = row_id(&row).map(str::to_string);
        let found = target.iter_mut().find(|r| id.is_some() && row_id(r) == id.as_deref());
        match (found, row.val) {
            (Some(Node { val: Val::Table(existing), .. }), Val::Table(t)) => {
                for c in t.entries {
                    if c.key != "id" {
                        existing.set(&c.key, c.key_at, c.node);
                    }
                }
            }
            (_, val) => target.push(Node { val, at: row.at }),
        }
    }
}
