//! Editing `[[mcp]]` rows of one layer file in place, keeping the rest of
//! the file — comments, order, spacing, other rows — as it was (what
//! `wharf mcp add` and `wharf mcp remove` write).
//!
//! The functions work on a file's text and return the new text; reading,
//! writing and checking the composed result are the caller's.

use toml_edit::{Array, ArrayOfTables, DocumentMut, InlineTable, Item, Table, Value};

use crate::McpServer;
use crate::schema::{MCP, MCP_SANDBOX};

/// Why a layer file's `[[mcp]]` rows could not be edited.
#[derive(Debug, thiserror::Error)]
pub enum EditError {
    /// The file is not TOML.
    #[error("not valid TOML: {0}")]
    Toml(String),
    /// `mcp` is there but is not an array of tables.
    #[error("`mcp` is not a list of [[mcp]] rows")]
    Shape,
    /// A row of that name is already in the file.
    #[error("an MCP server named `{0}` is already in this file")]
    Duplicate(String),
    /// The row cannot be written (a value TOML cannot hold).
    #[error("cannot write the row: {0}")]
    Value(String),
}

fn parse(text: &str) -> Result<DocumentMut, EditError> {
    text.parse::<DocumentMut>().map_err(|e| EditError::Toml(e.to_string().replace('\n', " ").trim().to_string()))
}

/// The `name` of each `[[mcp]]` row of `text`, in file order (rows written
/// as an inline array `mcp = [{...}]` included; a row without a name is
/// skipped).
pub fn mcp_row_names(text: &str) -> Result<Vec<String>, EditError> {
    let doc = parse(text)?;
    let Some(item) = doc.get("mcp") else { return Ok(Vec::new()) };
    let name = |v: Option<&Item>| v.and_then(Item::as_str).map(str::to_string);
    match item {
        Item::ArrayOfTables(rows) => Ok(rows.iter().filter_map(|t| name(t.get("name"))).collect()),
        Item::Value(Value::Array(rows)) => {
            Ok(rows.iter().filter_map(|v| v.as_inline_table()?.get("name")?.as_str().map(str::to_string)).collect())
        }
        _ => Err(EditError::Shape),
    }
}

/// `text` with `row` appended as a `[[mcp]]` row (keys in the schema's
/// order, `[mcp.sandbox]` as a sub-table, defaults left out). Refuses a
/// name the file already has.
pub fn add_mcp_row(text: &str, row: &McpServer) -> Result<String, EditError> {
    let mut doc = parse(text)?;
    if mcp_row_names(text)?.iter().any(|n| n == &row.name) {
        return Err(EditError::Duplicate(row.name.clone()));
    }
    let fields = serde_json::to_value(row).map_err(|e| EditError::Value(e.to_string()))?;
    let mut table = Table::new();
    for field in MCP {
        let Some(v) = fields.get(field.name) else { continue };
        match (field.name, v) {
            // Defaults are not written: `enabled = true`, `required = false`.
            ("enabled", serde_json::Value::Bool(true)) | ("required", serde_json::Value::Bool(false)) => {}
            ("sandbox", serde_json::Value::Object(grants)) => {
                let mut sandbox = Table::new();
                for f in MCP_SANDBOX {
                    if let Some(g) = grants.get(f.name) {
                        sandbox.insert(f.name, Item::Value(toml_value(g)?));
                    }
                }
                if !sandbox.is_empty() {
                    table.insert("sandbox", Item::Table(sandbox));
                }
            }
            (key, v) => {
                table.insert(key, Item::Value(toml_value(v)?));
            }
        }
    }
    match doc.get_mut("mcp") {
        None => {
            let mut rows = ArrayOfTables::new();
            rows.push(table);
            doc.insert("mcp", Item::ArrayOfTables(rows));
        }
        Some(Item::ArrayOfTables(rows)) => rows.push(table),
        Some(Item::Value(Value::Array(rows))) => {
            let mut inline = table.into_inline_table();
            // An inline array cannot hold a sub-table: the sandbox goes inline too.
            inline.fmt();
            rows.push(Value::InlineTable(inline));
        }
        Some(_) => return Err(EditError::Shape),
    }
    let mut out = doc.to_string();
    if !out.ends_with('\n') {
        out.push('\n');
    }
    Ok(out)
}

/// `text` without the `[[mcp]]` row named `name` (and its sub-tables);
/// `None` when the file has no such row.
pub fn remove_mcp_row(text: &str, name: &str) -> Result<Option<String>, EditError> {
    let mut doc = parse(text)?;
    let Some(item) = doc.get_mut("mcp") else { return Ok(None) };
    let removed = match item {
        Item::ArrayOfTables(rows) => {
            let before = rows.len();
            rows.retain(|t| t.get("name").and_then(Item::as_str) != Some(name));
            before != rows.len()
        }
        Item::Value(Value::Array(rows)) => {
            let before = rows.len();
            rows.retain(|v| v.as_inline_table().and_then(|t| t.get("name")).and_then(Value::as_str) != Some(name));
            before != rows.len()
        }
        _ => return Err(EditError::Shape),
    };
    if !removed {
        return Ok(None);
    }
    if doc.get("mcp").is_some_and(|i| match i {
        Item::ArrayOfTables(rows) => rows.is_empty(),
        Item::Value(Value::Array(rows)) => rows.is_empty(),
        _ => false,
    }) {
        doc.remove("mcp");
    }
    Ok(Some(doc.to_string()))
}

/// A JSON value of a row as a TOML value (objects become inline tables).
fn toml_value(v: &serde_json::Value) -> Result<Value, EditError> {
    Ok(match v {
        serde_json::Value::String(s) => Value::from(s.as_str()),
        serde_json::Value::Bool(b) => Value::from(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::from(i),
            None => return Err(EditError::Value(format!("{n} is not a TOML integer"))),
        },
        serde_json::Value::Array(items) => {
            let mut a = Array::new();
            for i in items {
                a.push(toml_value(i)?);
            }
            Value::Array(a)
        }
        serde_json::Value::Object(m) => {
            let mut t = InlineTable::new();
            for (k, v) in m {
                t.insert(k, toml_value(v)?);
            }
            Value::InlineTable(t)
        }
        serde_json::Value::Null => return Err(EditError::Value("null has no TOML form".into())),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn row(name: &str) -> McpServer {
        serde_json::from_value(serde_json::json!({"name": name, "command": "srv", "args": ["--root", "."]})).unwrap()
    }

    const FILE: &str =
        "# my project\n[agent]\nmax_steps = 7 # keep\n\n[[mcp]]\nname = \"old\"\nurl = \"http://h/mcp\"\n";

    #[test]
    fn adds_after_the_rest_and_keeps_comments() {
        let mut r = row("files");
        r.env.insert("TOKEN".into(), "${env:T}".into());
        r.sandbox.dirs.push("${workspace}:rw".into());
        let out = add_mcp_row(FILE, &r).unwrap();
        assert!(out.starts_with(FILE), "{out}");
        let added = &out[FILE.len()..];
        assert_eq!(
            added,
            "\n[[mcp]]\nname = \"files\"\ncommand = \"srv\"\nargs = [\"--root\", \".\"]\nenv = { TOKEN = \"${env:T}\" }\n\
             \n[mcp.sandbox]\ndirs = [\"${workspace}:rw\"]\n"
        );
        // It parses back as the same row.
        let doc: toml::Table = toml::from_str(&out).unwrap();
        let rows = doc["mcp"].as_array().unwrap();
        assert_eq!(rows[1]["sandbox"]["dirs"][0].as_str(), Some("${workspace}:rw"));
        assert_eq!(mcp_row_names(&out).unwrap(), ["old", "files"]);
    }

    #[test]
    fn an_opt_out_is_written_and_an_empty_file_gets_a_row() {
        let mut r = row("free");
        r.unsandboxed = true;
        let out = add_mcp_row("", &r).unwrap();
        assert!(out.contains("unsandboxed = true\n") && out.starts_with("[[mcp]]\n"), "{out}");
        assert!(!out.contains("required") && !out.contains("enabled"), "{out}");
    }

    #[test]
    fn refuses_duplicates_and_bad_files() {
        assert!(matches!(add_mcp_row(FILE, &row("old")), Err(EditError::Duplicate(n)) if n == "old"));
        assert!(matches!(add_mcp_row("[[mcp]\n", &row("x")), Err(EditError::Toml(_))));
        assert!(matches!(add_mcp_row("mcp = 5\n", &row("x")), Err(EditError::Shape)));
        let inline = "mcp = [{ name = \"a\", command = \"x\" }]\n";
        assert!(matches!(add_mcp_row(inline, &row("a")), Err(EditError::Duplicate(_))));
        let out = add_mcp_row(inline, &row("b")).unwrap();
        assert_eq!(mcp_row_names(&out).unwrap(), ["a", "b"]);
    }

    #[test]
    fn removes_one_row_and_its_sub_tables() {
        let mut r = row("files");
        r.sandbox.network = true;
        let two = add_mcp_row(FILE, &r).unwrap();
        let out = remove_mcp_row(&two, "files").unwrap().unwrap();
        assert_eq!(out, FILE);
        assert_eq!(remove_mcp_row(&two, "nope").unwrap(), None);
        let none = remove_mcp_row(FILE, "old").unwrap().unwrap();
        assert_eq!(none, "# my project\n[agent]\nmax_steps = 7 # keep\n");
        assert_eq!(remove_mcp_row("", "x").unwrap(), None);
    }
}
