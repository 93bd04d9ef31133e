//! `[[bundle]]` rows in a config layer's text, edited in place (comments
//! and the rest of the file kept).

use std::path::Path;

use toml_edit::{ArrayOfTables, DocumentMut, Item, Table, value};

use crate::BundleError;

fn parse(text: &str, file: &Path) -> Result<DocumentMut, BundleError> {
    text.parse::<DocumentMut>()
        .map_err(|e| BundleError::invalid(file, format!("not valid TOML: {}", e.to_string().replace('\n', " "))))
}

/// `text` with the row of `name` set to `path` and `digest` (added when
/// missing).
pub fn set_row(text: &str, file: &Path, name: &str, path: &Path, digest: &str) -> Result<String, BundleError> {
    let mut doc = parse(text, file)?;
    let rows = doc.entry("bundle").or_insert(Item::ArrayOfTables(ArrayOfTables::new()));
    let Some(rows) = rows.as_array_of_tables_mut() else {
        return Err(BundleError::invalid(file, "`bundle` is not a list of [[bundle]] rows"));
    };
    let existing = rows.iter_mut().find(|t| t.get("name").and_then(Item::as_str) == Some(name));
    let row = match existing {
        Some(t) => t,
        None => {
            let mut t = Table::new();
            t["name"] = value(name);
            rows.push(t);
            match rows.iter_mut().last() {
                Some(t) => t,
                None => return Err(BundleError::invalid(file, "cannot add a row")),
            }
        }
    };
    row["path"] = value(path.display().to_string());
    row["digest"] = value(digest);
    Ok(doc.to_string())
}

/// `text` without the row of `name`, and whether there was one.
pub fn remove_row(text: &str, file: &Path, name: &str) -> Result<(String, bool), BundleError> {
    let mut doc = parse(text, file)?;
    let Some(rows) = doc.get_mut("bundle").and_then(Item::as_array_of_tables_mut) else {
        return Ok((text.to_string(), false));
    };
    let before = rows.len();
    rows.retain(|t| t.get("name").and_then(Item::as_str) != Some(name));
    let removed = rows.len() != before;
    if rows.is_empty() {
        doc.remove("bundle");
    }
    Ok((doc.to_string(), removed))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn add_replace_remove() {
        let f = Path::new("c.toml");
        let t = set_row("# mine\n[agent]\nmax_steps = 3\n", f, "demo", Path::new("/b"), "sha256:1").unwrap();
        assert!(t.starts_with("# mine\n") && t.contains("[[bundle]]\nname = \"demo\"\npath = \"/b\""), "{t}");
        let t = set_row(&t, f, "demo", Path::new("/c"), "sha256:2").unwrap();
        assert_eq!(t.matches("[[bundle]]").count(), 1);
        assert!(t.contains("/c") && t.contains("sha256:2"));
        let (t, removed) = remove_row(&t, f, "demo").unwrap();
        assert!(removed && !t.contains("bundle") && t.contains("max_steps = 3"), "{t}");
    }
}
