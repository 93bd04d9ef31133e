//! Merging one layer into the layers below it (see the crate docs for the
//! rules).

use crate::tree::{Entry, Node, Table, Val};

use crate::schema::RowKind;

/// Merges `layer` over `base`: tables deep-merge, scalars and arrays are
/// replaced, and the top-level `plugin` rows merge by `id`, `mcp` rows by
/// `name`.
pub(crate) fn merge_layer(base: &mut Table, layer: Table) {
    for e in layer.entries {
        match RowKind::of(&e.key) {
            Some(kind) => merge_rows(base, e, kind),
            None => merge_entry(base, e),
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
    row_key(row, RowKind::Plugin)
}

/// The id (`id` or `name`) of a (checked) row of `kind`.
pub(crate) fn row_key(row: &Node, kind: RowKind) -> Option<&str> {
    match &row.val {
        Val::Table(t) => match t.get(kind.id_key()).map(|n| &n.val) {
            Some(Val::Str(id)) => Some(id),
            _ => None,
        },
        _ => None,
    }
}

/// Merges a layer's rows by id: an existing id has each top-level key the
/// row sets replaced wholesale (other keys kept); a new id appends.
fn merge_rows(base: &mut Table, e: Entry, kind: RowKind) {
    let Val::Array(rows) = e.node.val else { return };
    let key = kind.key();
    let target = match base.get_mut(key) {
        Some(Node { val: Val::Array(existing), .. }) => existing,
        _ => {
            base.set(key, e.key_at, Node { val: Val::Array(Vec::new()), at: e.node.at });
            match base.get_mut(key) {
                Some(Node { val: Val::Array(existing), .. }) => existing,
                _ => return,
            }
        }
    };
    for row in rows {
        let id = row_key(&row, kind).map(str::to_string);
        let found = target.iter_mut().find(|r| id.is_some() && row_key(r, kind) == id.as_deref());
        match (found, row.val) {
            (Some(Node { val: Val::Table(existing), .. }), Val::Table(t)) => {
                for c in t.entries {
                    if c.key != kind.id_key() {
                        existing.set(&c.key, c.key_at, c.node);
                    }
                }
            }
            (_, val) => target.push(Node { val, at: row.at }),
        }
    }
}
