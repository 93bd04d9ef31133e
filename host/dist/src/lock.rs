//! `wharf plugin lock`: writes `digest = "sha256:…"` into the `[[plugin]]`
//! rows of a profile file that have a `source` and no `digest`, keeping
//! the rest of the file (comments, order, spacing) as it was.

use toml_edit::{DocumentMut, Item, value};

use crate::DistError;

/// A row to lock: its id and source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unlocked {
    /// The row's `id`.
    pub id: String,
    /// Its `source`.
    pub source: String,
}

fn parse(text: &str) -> Result<DocumentMut, DistError> {
    text.parse::<DocumentMut>()
        .map_err(|e| DistError::Profile(format!("not valid TOML: {}", e.to_string().replace('\n', " "))))
}

/// The rows of `text` with a `source` and no `digest`.
pub fn unlocked(text: &str) -> Result<Vec<Unlocked>, DistError> {
    let doc = parse(text)?;
    let Some(rows) = doc.get("plugin").and_then(Item::as_array_of_tables) else { return Ok(Vec::new()) };
    Ok(rows
        .iter()
        .filter(|t| !t.contains_key("digest"))
        .filter_map(|t| {
            let source = t.get("source")?.as_str()?.to_string();
            let id = t.get("id").and_then(Item::as_str).unwrap_or_default().to_string();
            Some(Unlocked { id, source })
        })
        .collect())
}

/// `text` with `digest = "<digest>"` set on the row `id` (placed after its
/// `source`). An id that is not a row with a `source` is an error.
pub fn set_digest(text: &str, id: &str, digest: &str) -> Result<String, DistError> {
    let mut doc = parse(text)?;
    let rows = doc
        .get_mut("plugin")
        .and_then(Item::as_array_of_tables_mut)
        .ok_or_else(|| DistError::Profile("no [[plugin]] rows".into()))?;
    let row = rows
        .iter_mut()
        .find(|t| t.get("id").and_then(Item::as_str) == Some(id) && t.contains_key("source"))
        .ok_or_else(|| DistError::Profile(format!("no [[plugin]] row `{id}` with a `source`")))?;
    // Keep `digest` right after `source`: rank every key by its place,
    // `digest` just after `source`, and sort (stable, decor kept).
    let ranks: Vec<(String, usize)> = row.iter().enumerate().map(|(i, (k, _))| (k.to_string(), 2 * i)).collect();
    let source_rank = ranks.iter().find(|(k, _)| k == "source").map_or(0, |(_, r)| *r);
    row.insert("digest", value(digest));
    let rank = |k: &str| {
        if k == "digest" { source_rank + 1 } else { ranks.iter().find(|(n, _)| n == k).map_or(usize::MAX, |(_, r)| *r) }
    };
    row.sort_values_by(|k1, _, k2, _| rank(k1.get()).cmp(&rank(k2.get())));
    Ok(doc.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    use anyhow::Context;

    #[test]
    fn locks_rows_keeping_the_file() -> anyhow::Result<()> {
        let text = "# my profile\n[agent]\nmax_steps = 3 # keep\n\n[[plugin]]\nid = \"echo\"\nsource = \"oci://h/r:v1\"  # from CI\nwarm = true\n\n[[plugin]]\nid = \"fs\"\npath = \"/x/fs.wasm\"\n\n[[plugin]]\nid = \"done\"\nsource = \"oci://h/d:v1\"\ndigest = \"sha256:00\"\n";
        let rows = unlocked(text).context("listing the unlocked rows")?;
        assert_eq!(rows, vec![Unlocked { id: "echo".into(), source: "oci://h/r:v1".into() }]);
        let out = set_digest(text, "echo", "sha256:ab").context("setting the digest")?;
        assert_eq!(out, text.replace("# from CI\n", "# from CI\ndigest = \"sha256:ab\"\n"),);
        assert!(unlocked(&out).unwrap_or_default().is_empty());
        assert!(set_digest(text, "fs", "sha256:ab").is_err());
        assert!(set_digest("not = [toml", "echo", "x").is_err());
        Ok(())
    }
}
