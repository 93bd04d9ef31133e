//! `-c dotted.key=VALUE` overrides.

use toml::de::DeValue;

use crate::error::{ConfigError, Location};
use crate::merge::{merge_entry, row_key};
use crate::schema::{Ctx, ROOT, RowKind, Shape, TOP, check_node, child_table_name, field};
use crate::tree::{Entry, Node, Table, Val, from_value};

/// Applies one `-c` argument to the composed tree.
pub(crate) fn apply(root: &mut Table, arg: &str, ctx: &Ctx<'_>) -> Result<(), ConfigError> {
    let at = Location::whole(format!("-c {arg}"));
    let (path, raw) = split_assignment(arg).map_err(|message| ConfigError::Syntax { at: at.clone(), message })?;
    let mut value = parse_value(raw, &at)?;

    if let Some(kind) = RowKind::of(&path[0]) {
        let (what, example) = match kind {
            RowKind::Plugin => ("a plugin row", "plugin.fs.grant.memory_mb=512"),
            RowKind::Mcp => ("an MCP server row", "mcp.files.required=true"),
            RowKind::Bundle => ("a bundle row", "bundle.demo.enabled=false"),
        };
        let (Some(id), Some(rest)) = (path.get(1), path.get(2..).filter(|r| !r.is_empty())) else {
            return Err(ConfigError::invalid(
                &at,
                format!("address {what}'s key by its {}: {}.ID.KEY=VALUE (e.g. {example})", kind.id_key(), kind.key()),
            ));
        };
        if rest[0] == kind.id_key() {
            return Err(ConfigError::invalid(&at, format!("{what}'s `{}` cannot be changed with -c", kind.id_key())));
        }
        let (shape, key, table) = resolve(kind.fields(), rest, kind.table(), &at)?;
        check_node(shape, &mut value, &key, &table, ctx)?;
        let rows = match root.get_mut(kind.key()) {
            Some(Node { val: Val::Array(rows), .. }) => rows.as_mut_slice(),
            _ => &mut [],
        };
        let known: Vec<String> = rows.iter().filter_map(|r| row_key(r, kind)).map(str::to_string).collect();
        let Some(Node { val: Val::Table(row), .. }) = rows.iter_mut().find(|r| row_key(r, kind) == Some(id)) else {
            let known = if known.is_empty() { "none".into() } else { known.join(", ") };
            return Err(match kind {
                RowKind::Plugin => ConfigError::UnknownPlugin { at, id: id.clone(), known },
                RowKind::Mcp => ConfigError::invalid(&at, format!("no MCP server named `{id}` (known: {known})")),
                RowKind::Bundle => ConfigError::invalid(&at, format!("no bundle named `{id}` (known: {known})")),
            });
        };
        // A row's top-level key is replaced wholesale, as a layer row would.
        set(row, rest, value, &at, true)
    } else {
        let (shape, key, table) = resolve(ROOT, &path, TOP, &at)?;
        if let Shape::Plugins | Shape::McpRows | Shape::BundleRows = shape {
            return Err(ConfigError::invalid(
                &at,
                "rows cannot be set with -c; address one by id: plugin.ID.KEY=VALUE or mcp.NAME.KEY=VALUE",
            ));
        }
        check_node(shape, &mut value, &key, &table, ctx)?;
        set(root, &path, value, &at, false)
    }
}

/// The shape at `path` below a table with `fields`, with the last key and
/// the name of the table holding it.
fn resolve(
    fields: &'static [crate::schema::Field],
    path: &[String],
    table: &str,
    at: &Location,
) -> Result<(Shape, String, String), ConfigError> {
    let mut fields = fields;
    let mut table = table.to_string();
    for (i, key) in path.iter().enumerate() {
        let fd = field(fields, key, &table, at)?;
        if i + 1 == path.len() {
            return Ok((fd.shape, key.clone(), table));
        }
        match fd.shape {
            Shape::Table(sub) => {
                table = child_table_name(&table, key);
                fields = sub;
            }
            Shape::Free => {
                // Anything goes below a plugin's `config`.
                let mut t = child_table_name(&table, key);
                for k in &path[i + 1..path.len() - 1] {
                    t = child_table_name(&t, k);
                }
                return Ok((Shape::Any, path[path.len() - 1].clone(), t));
            }
            _ => {
                return Err(ConfigError::invalid(at, format!("`{key}` in {table} is not a table")));
            }
        }
    }
    Err(ConfigError::invalid(at, "empty key"))
}

/// Sets `path` in `t`, creating tables on the way. At the end, a table value
/// deep-merges into an existing table unless `replace`, and anything else
/// replaces.
fn set(t: &mut Table, path: &[String], value: Node, at: &Location, replace: bool) -> Result<(), ConfigError> {
    let Some((key, rest)) = path.split_first() else {
        return Ok(());
    };
    if rest.is_empty() {
        if replace {
            t.set(key, at.clone(), value);
        } else {
            merge_entry(t, Entry { key: key.clone(), key_at: at.clone(), node: value });
        }
        return Ok(());
    }
    if t.get(key).is_none() {
        t.set(key, at.clone(), Node::new(Val::Table(Table::default()), at.clone()));
    }
    match t.get_mut(key) {
        Some(Node { val: Val::Table(sub), .. }) => set(sub, rest, value, at, false),
        Some(other) => Err(ConfigError::invalid(
            at,
            format!("`{key}` is {} (set at {}), not a table", other.val.type_name(), other.at),
        )),
        None => Ok(()),
    }
}

/// The value: TOML if it parses as a TOML value, else the plain string.
fn parse_value(raw: &str, at: &Location) -> Result<Node, ConfigError> {
    let trimmed = raw.trim();
    match DeValue::parse(trimmed) {
        Ok(v) => from_value(v.get_ref(), at),
        Err(_) => Ok(Node::new(Val::Str(trimmed.to_string()), at.clone())),
    }
}

/// Splits `a.b."c d"=VALUE` into its key segments and the raw value.
fn split_assignment(arg: &str) -> Result<(Vec<String>, &str), String> {
    let mut segs = Vec::new();
    let mut rest = arg.trim_start();
    loop {
        let (seg, after) = key_segment(rest)?;
        segs.push(seg);
        let after = after.trim_start();
        if let Some(a) = after.strip_prefix('.') {
            rest = a.trim_start();
        } else if let Some(value) = after.strip_prefix('=') {
            return Ok((segs, value));
        } else if after.is_empty() {
            return Err("expected KEY=VALUE (no `=` found)".into());
        } else {
            return Err(format!(
                "unexpected `{}` in the key; expected `.` or `=`",
                after.chars().next().unwrap_or(' ')
            ));
        }
    }
}

/// One key segment at the start of `s`: bare, "basic" or 'literal'.
fn key_segment(s: &str) -> Result<(String, &str), String> {
    if let Some(body) = s.strip_prefix('\'') {
        let end = body.find('\'').ok_or("unterminated '…' in the key")?;
        return Ok((body[..end].to_string(), &body[end + 1..]));
    }
    if s.starts_with('"') {
        let mut escaped = false;
        for (i, c) in s.char_indices().skip(1) {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => {
                    let quoted = &s[..=i];
                    return match DeValue::parse(quoted).map(|v| v.into_inner()) {
                        Ok(DeValue::String(k)) => Ok((k.into_owned(), &s[i + 1..])),
                        _ => Err(format!("bad quoted key {quoted}")),
                    };
                }
                _ => {}
            }
        }
        return Err("unterminated \"…\" in the key".into());
    }
    let end = s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-')).unwrap_or(s.len());
    if end == 0 {
        return Err(if s.is_empty() || s.starts_with('=') {
            "expected KEY=VALUE (empty key)".into()
        } else {
            format!("unexpected `{}` in the key", s.chars().next().unwrap_or(' '))
        });
    }
    Ok((s[..end].to_string(), &s[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_keys() {
        let (k, v) = split_assignment("plugin.fs.config.\"a.b\" = 5").expect("a valid assignment");
        assert_eq!(k, ["plugin", "fs", "config", "a.b"]);
        assert_eq!(v, " 5");
        let (k, v) = split_assignment("agent.system_prompt=a=b").expect("a valid assignment");
        assert_eq!(k, ["agent", "system_prompt"]);
        assert_eq!(v, "a=b");
        assert!(split_assignment("agent.max_steps").is_err());
        assert!(split_assignment("=5").is_err());
        assert!(split_assignment("agent..x=5").is_err());
        assert!(split_assignment("a b=5").is_err());
    }

    #[test]
    fn values_fall_back_to_strings() {
        let at = Location::whole("-c");
        assert_eq!(parse_value("5", &at).map(|n| n.val).ok(), Some(Val::Int(5)));
        assert_eq!(parse_value("abc", &at).map(|n| n.val).ok(), Some(Val::Str("abc".into())));
        assert_eq!(parse_value("\"x\"", &at).map(|n| n.val).ok(), Some(Val::Str("x".into())));
        assert_eq!(parse_value("", &at).map(|n| n.val).ok(), Some(Val::Str(String::new())));
        let arr = parse_value("[\"a\",\"b\"]", &at).map(|n| n.to_json()).ok();
        assert_eq!(arr, Some(serde_json::json!(["a", "b"])));
    }
}
