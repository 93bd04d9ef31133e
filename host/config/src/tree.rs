//! The configuration tree: TOML values that remember where they came from.

use serde_json::Value as Json;
use toml::de::{DeTable, DeValue};

use crate::error::{ConfigError, Location};

/// A value and the place that set it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Node {
    pub(crate) val: Val,
    pub(crate) at: Location,
}

/// A TOML value whose children are [`Node`]s.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Val {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    /// Kept as its TOML text.
    Datetime(String),
    Array(Vec<Node>),
    Table(Table),
}

/// A table whose entries keep their order.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Table {
    pub(crate) entries: Vec<Entry>,
}

/// One `key = value` of a table.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    pub(crate) key: String,
    pub(crate) key_at: Location,
    pub(crate) node: Node,
}

impl Val {
    /// `a string`, `an integer` … for messages.
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Val::Str(_) => "a string",
            Val::Int(_) => "an integer",
            Val::Float(_) => "a float",
            Val::Bool(_) => "a boolean",
            Val::Datetime(_) => "a datetime",
            Val::Array(_) => "an array",
            Val::Table(_) => "a table",
        }
    }
}

impl Node {
    pub(crate) fn new(val: Val, at: Location) -> Self {
        Self { val, at }
    }

    /// The value as plain JSON.
    pub(crate) fn to_json(&self) -> Json {
        match &self.val {
            Val::Str(s) | Val::Datetime(s) => Json::String(s.clone()),
            Val::Int(i) => Json::from(*i),
            Val::Float(f) => serde_json::Number::from_f64(*f).map_or(Json::Null, Json::Number),
            Val::Bool(b) => Json::Bool(*b),
            Val::Array(items) => Json::Array(items.iter().map(Node::to_json).collect()),
            Val::Table(t) => t.to_json(),
        }
    }
}

impl Table {
    pub(crate) fn get(&self, key: &str) -> Option<&Node> {
        self.entries.iter().find(|e| e.key == key).map(|e| &e.node)
    }

    pub(crate) fn get_mut(&mut self, key: &str) -> Option<&mut Node> {
        self.entries.iter_mut().find(|e| e.key == key).map(|e| &mut e.node)
    }

    pub(crate) fn entry(&self, key: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.key == key)
    }

    pub(crate) fn remove(&mut self, key: &str) -> Option<Node> {
        let i = self.entries.iter().position(|e| e.key == key)?;
        Some(self.entries.remove(i).node)
    }

    /// Sets `key`, replacing its value (and keeping its position) if present.
    pub(crate) fn set(&mut self, key: &str, key_at: Location, node: Node) {
        match self.entries.iter_mut().find(|e| e.key == key) {
            Some(e) => {
                e.key_at = key_at;
                e.node = node;
            }
            None => self.entries.push(Entry { key: key.to_string(), key_at, node }),
        }
    }

    pub(crate) fn to_json(&self) -> Json {
        Json::Object(self.entries.iter().map(|e| (e.key.clone(), e.node.to_json())).collect())
    }
}

/// The text of one layer, for turning byte offsets into line and column.
pub(crate) struct SourceText<'a> {
    /// The layer as shown to people.
    pub(crate) name: &'a str,
    text: &'a str,
    line_starts: Vec<usize>,
    /// The profiles that extend this one (see [`Location::via`]).
    via: Vec<String>,
}

impl<'a> SourceText<'a> {
    pub(crate) fn new(name: &'a str, text: &'a str) -> Self {
        let line_starts = std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect();
        Self { name, text, line_starts, via: Vec::new() }
    }

    /// The same text reached through the profiles `via` (`extends`).
    pub(crate) fn with_via(mut self, via: Vec<String>) -> Self {
        self.via = via;
        self
    }

    /// The location of byte `offset`.
    pub(crate) fn locate(&self, offset: usize) -> Location {
        let offset = offset.min(self.text.len());
        let line = self.line_starts.partition_point(|&s| s <= offset).max(1);
        let start = self.line_starts.get(line - 1).copied().unwrap_or(0);
        let column = self.text.get(start..offset).map_or(offset - start, |s| s.chars().count()) + 1;
        Location {
            source: self.name.to_string(),
            line: Some(u32::try_from(line).unwrap_or(u32::MAX)),
            column: Some(u32::try_from(column).unwrap_or(u32::MAX)),
            via: self.via.clone(),
        }
    }

    /// Parses the text as a TOML document.
    pub(crate) fn parse(&self) -> Result<Table, ConfigError> {
        let doc = DeTable::parse(self.text).map_err(|e| ConfigError::Syntax {
            at: self.locate(e.span().map_or(0, |s| s.start)),
            message: e.message().to_string(),
        })?;
        self.table(doc.get_ref())
    }

    fn table(&self, t: &DeTable<'_>) -> Result<Table, ConfigError> {
        let mut pairs: Vec<_> = t.iter().collect();
        // Source order, whatever order the parser's map keeps.
        pairs.sort_by_key(|(k, _)| k.span().start);
        let mut entries = Vec::with_capacity(pairs.len());
        for (k, v) in pairs {
            entries.push(Entry {
                key: k.get_ref().to_string(),
                key_at: self.locate(k.span().start),
                node: self.node(v.get_ref(), v.span().start)?,
            });
        }
        Ok(Table { entries })
    }

    fn node(&self, v: &DeValue<'_>, offset: usize) -> Result<Node, ConfigError> {
        let at = self.locate(offset);
        let val = convert(v, &at, |t| self.table(t), |v, o| self.node(v, o))?;
        Ok(Node { val, at })
    }
}

/// Converts a parsed value; `table` and `node` convert children.
fn convert(
    v: &DeValue<'_>,
    at: &Location,
    table: impl Fn(&DeTable<'_>) -> Result<Table, ConfigError>,
    node: impl Fn(&DeValue<'_>, usize) -> Result<Node, ConfigError>,
) -> Result<Val, ConfigError> {
    Ok(match v {
        DeValue::String(s) => Val::Str(s.to_string()),
        DeValue::Integer(i) => Val::Int(
            i64::from_str_radix(i.as_str(), i.radix())
                .map_err(|_| ConfigError::invalid(at, format!("integer {i} is out of range")))?,
        ),
        DeValue::Float(f) => {
            Val::Float(f.as_str().parse().map_err(|_| ConfigError::invalid(at, format!("float {f} is out of range")))?)
        }
        DeValue::Boolean(b) => Val::Bool(*b),
        DeValue::Datetime(d) => Val::Datetime(d.to_string()),
        DeValue::Array(a) => Val::Array(a.iter().map(|e| node(e.get_ref(), e.span().start)).collect::<Result<_, _>>()?),
        DeValue::Table(t) => Val::Table(table(t)?),
    })
}

/// Converts a value parsed from a `-c` argument: every part is located at
/// the argument itself.
pub(crate) fn from_value(v: &DeValue<'_>, at: &Location) -> Result<Node, ConfigError> {
    let table = |t: &DeTable<'_>| -> Result<Table, ConfigError> {
        let mut pairs: Vec<_> = t.iter().collect();
        pairs.sort_by_key(|(k, _)| k.span().start);
        let mut entries = Vec::with_capacity(pairs.len());
        for (k, v) in pairs {
            entries.push(Entry {
                key: k.get_ref().to_string(),
                key_at: at.clone(),
                node: from_value(v.get_ref(), at)?,
            });
        }
        Ok(Table { entries })
    };
    let val = convert(v, at, table, |v, _| from_value(v, at))?;
    Ok(Node { val, at: at.clone() })
}

/// Whether `key` can be written bare in TOML.
pub(crate) fn is_bare_key(key: &str) -> bool {
    !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// `key` as written in TOML: bare, or quoted.
pub(crate) fn toml_key(key: &str) -> String {
    if is_bare_key(key) { key.to_string() } else { toml_string(key) }
}

/// A TOML basic string.
pub(crate) fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A value as inline TOML.
pub(crate) fn inline(v: &Val) -> String {
    match v {
        Val::Str(s) => toml_string(s),
        Val::Int(i) => i.to_string(),
        Val::Float(f) => {
            if f.is_nan() {
                "nan".to_string()
            } else if f.is_infinite() {
                if *f > 0.0 { "inf".to_string() } else { "-inf".to_string() }
            } else {
                // `{:?}` keeps a `.0` on whole numbers, so it stays a float.
                format!("{f:?}")
            }
        }
        Val::Bool(b) => b.to_string(),
        Val::Datetime(d) => d.clone(),
        Val::Array(items) => {
            let parts: Vec<String> = items.iter().map(|n| inline(&n.val)).collect();
            format!("[{}]", parts.join(", "))
        }
        Val::Table(t) if t.entries.is_empty() => "{}".to_string(),
        Val::Table(t) => {
            let parts: Vec<String> =
                t.entries.iter().map(|e| format!("{} = {}", toml_key(&e.key), inline(&e.node.val))).collect();
            format!("{{ {} }}", parts.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locates_lines_and_columns() {
        let s = SourceText::new("f.toml", "a = 1\n[t]\n  \"é\" = \"x\"\n");
        let l = s.locate(12);
        assert_eq!((l.line, l.column), (Some(3), Some(3)));
        let t = s.parse().expect("test TOML parses");
        assert_eq!(t.entries[0].key, "a");
        let Some(Val::Table(inner)) = t.get("t").map(|n| &n.val) else { panic!("no table") };
        let e = &inner.entries[0];
        assert_eq!((e.key_at.line, e.key_at.column), (Some(3), Some(3)));
        assert_eq!(e.key, "é");
        assert_eq!((e.node.at.line, e.node.at.column), (Some(3), Some(9)));
    }

    #[test]
    fn inline_rendering_is_toml() {
        let s = SourceText::new("f", "x = [1, 2.0, \"a\\\"b\\n\", { k = true, \"a b\" = [] }]\n");
        let t = s.parse().expect("test TOML parses");
        let Some(x) = t.get("x") else { panic!("no x") };
        let text = format!("x = {}\n", inline(&x.val));
        assert_eq!(text, "x = [1, 2.0, \"a\\\"b\\n\", { k = true, \"a b\" = [] }]\n");
    }
}
