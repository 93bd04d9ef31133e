//! The file operations, independent of the component glue so they can be
//! tested natively against a temporary directory.

use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

use regex::RegexBuilder;
use serde_json::json;
use wharf_sdk::{ToolError, ToolOutput, ToolResult};

use crate::args::{EditArgs, GlobArgs, GrepArgs, ListArgs, ReadArgs, WriteArgs};
use crate::record::{Hasher, Records, Seen};
use crate::walk::{Glob, walk};

/// Default number of lines `read` returns.
pub const DEFAULT_READ_LINES: u32 = 2000;
/// Lines longer than this (in characters) are cut in `read` and `grep`.
pub const MAX_LINE_CHARS: usize = 2000;
/// Rough cap on the text a single call returns, in bytes.
pub const OUTPUT_BUDGET: usize = 256 * 1024;
/// Default and largest number of `grep` matches.
const DEFAULT_GREP_MATCHES: usize = 200;
const MAX_GREP_MATCHES: usize = 5000;
/// Files larger than this are skipped by `grep`.
const GREP_MAX_FILE: u64 = 16 << 20;
/// Most entries `glob` and `list` return.
const MAX_ENTRIES: usize = 1000;
/// How far `list` descends at most.
const MAX_LIST_DEPTH: u32 = 5;

/// One call's view: the workspace root, the session and its read records.
pub struct Cx<'a> {
    /// Normalized absolute workspace path.
    pub root: PathBuf,
    /// Session id, for read records.
    pub session: &'a str,
    /// Where read records live.
    pub records: &'a dyn Records,
}

impl Cx<'_> {
    /// Resolves a model-supplied path inside the workspace, before any
    /// filesystem access.
    fn resolve(&self, path: &str) -> Result<PathBuf, ToolError> {
        wharf_sdk::path::confine(&self.root.to_string_lossy(), path)
    }

    /// A path as shown to the model: relative to the workspace.
    fn show(&self, path: &Path) -> String {
        wharf_sdk::path::display_relative(&self.root, path)
    }

    fn io(&self, path: &Path, err: &io::Error) -> ToolError {
        ToolError::io_at(self.show(path), err)
    }

    /// Fails unless `current` is what this session last read or wrote.
    fn check_fresh(&self, path: &Path, current: &[u8]) -> Result<(), ToolError> {
        match self.records.get(self.session, path) {
            None => Err(ToolError::new(
                "NOT_READ",
                format!(
                    "{} has not been read in this session; read it with `read` before changing it",
                    self.show(path)
                ),
            )),
            Some(seen) if seen != Seen::of(current) => Err(ToolError::new(
                "STALE",
                format!("{} changed since it was last read; read it again before editing", self.show(path)),
            )),
            Some(_) => Ok(()),
        }
    }

    fn remember(&self, path: &Path, seen: Seen) {
        if let Err(e) = self.records.put(self.session, path, seen) {
            wharf_sdk::log::warn!("could not record read of {}: {e}", path.display());
        }
    }
}

/// Appends `s` to `out`, cut to `max` characters, saying so.
fn push_clipped(out: &mut String, s: &str, max: usize) {
    // At most `max` bytes is at most `max` characters: no scan needed.
    if s.len() <= max {
        out.push_str(s);
        return;
    }
    match s.char_indices().nth(max) {
        None => out.push_str(s),
        Some((i, _)) => {
            out.push_str(&s[..i]);
            let _ = write!(out, "… [line truncated: {} chars]", s.chars().count());
        }
    }
}

/// Appends line `n` of a file with `cat -n` numbering (right-aligned in
/// six columns, a tab), written in place: `read` of a large file is mostly
/// this, and the formatter's padding machinery was a fifth of it.
pub(crate) fn push_numbered(out: &mut String, n: usize, line: &str) {
    let mut digits = [b' '; 20];
    let mut i = digits.len();
    let mut rest = n;
    loop {
        i -= 1;
        digits[i] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    let start = i.min(digits.len() - 6);
    // Only ASCII digits and spaces were written.
    out.push_str(std::str::from_utf8(&digits[start..]).unwrap_or_default());
    out.push('\t');
    push_clipped(out, line, MAX_LINE_CHARS);
    out.push('\n');
}

/// `bytes` as text, invalid UTF-8 replaced: the strict check first, which
/// is word-at-a-time over ASCII, where the lossy decoder goes byte by byte.
fn lossy(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(s) => std::borrow::Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

fn strip_eol(bytes: &[u8]) -> &[u8] {
    let b = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    b.strip_suffix(b"\r").unwrap_or(b)
}

fn looks_binary(head: &[u8]) -> bool {
    head.iter().take(8192).any(|&b| b == 0)
}

fn not_a_file(cx: &Cx<'_>, path: &Path, meta: &fs::Metadata) -> Option<ToolError> {
    if meta.is_dir() {
        Some(ToolError::new("IS_A_DIRECTORY", format!("{} is a directory; use `list` or `glob`", cx.show(path))))
    } else {
        None
    }
}

/// `read`: numbered lines from `offset` (1-based), at most `limit` of them.
pub fn read(cx: &Cx<'_>, a: ReadArgs) -> ToolResult {
    let path = cx.resolve(&a.path)?;
    let meta = fs::metadata(&path).map_err(|e| cx.io(&path, &e))?;
    if let Some(e) = not_a_file(cx, &path, &meta) {
        return Err(e);
    }
    let offset = a.offset.unwrap_or(1).max(1) as usize;
    let limit = a.limit.unwrap_or(DEFAULT_READ_LINES).max(1) as usize;
    let file = File::open(&path).map_err(|e| cx.io(&path, &e))?;
    let mut reader = BufReader::new(file);
    let binary = looks_binary(reader.fill_buf().map_err(|e| cx.io(&path, &e))?);

    let mut hasher = Hasher::new();
    let mut len = 0u64;
    let mut line = Vec::new();
    let mut total = 0usize;
    // What is shown is about the file's size plus the numbering.
    let mut out = String::with_capacity((meta.len() as usize).min(OUTPUT_BUDGET) + 1024);
    let (mut first, mut last) = (0usize, 0usize);
    let mut cut_by_budget = false;
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line).map_err(|e| cx.io(&path, &e))?;
        if n == 0 {
            break;
        }
        hasher.update(&line);
        len += n as u64;
        total += 1;
        if binary || total < offset || total >= offset + limit || cut_by_budget {
            continue;
        }
        if out.len() >= OUTPUT_BUDGET {
            cut_by_budget = true;
            continue;
        }
        if first == 0 {
            first = total;
        }
        last = total;
        push_numbered(&mut out, total, &lossy(strip_eol(&line)));
    }
    cx.remember(&path, Seen { len, hash: hasher.finish() });

    let shown = cx.show(&path);
    if binary {
        out = format!("[binary file: {len} bytes, not shown]\n");
    } else if total == 0 {
        out = "[empty file]\n".to_string();
    } else if first == 0 {
        out = format!("[offset {offset} is past the end: {shown} has {total} lines]\n");
    } else if last < total {
        out.push_str(&format!("[showing lines {first}-{last} of {total}; continue with offset={}]\n", last + 1));
    }
    let details = json!({"path": shown, "lines": total, "bytes": len, "from": first, "to": last, "binary": binary});
    Ok(ToolOutput::text(out).with_details(&details))
}

/// `write`: creates or replaces a file (replacing needs a fresh read).
pub fn write(cx: &Cx<'_>, a: WriteArgs) -> ToolResult {
    let path = cx.resolve(&a.path)?;
    let previous = match fs::metadata(&path) {
        Ok(meta) => {
            if let Some(e) = not_a_file(cx, &path, &meta) {
                return Err(e);
            }
            let current = fs::read(&path).map_err(|e| cx.io(&path, &e))?;
            cx.check_fresh(&path, &current)?;
            Some(current)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(cx.io(&path, &e)),
    };
    let existed = previous.is_some();
    if let Some(parent) = path.parent().filter(|p| !p.exists()) {
        fs::create_dir_all(parent).map_err(|e| cx.io(parent, &e))?;
    }
    fs::write(&path, a.content.as_bytes()).map_err(|e| cx.io(&path, &e))?;
    cx.remember(&path, Seen::of(a.content.as_bytes()));
    let shown = cx.show(&path);
    let lines = a.content.lines().count();
    let verb = if existed { "Overwrote" } else { "Created" };
    let plural = if lines == 1 { "" } else { "s" };
    let mut details = json!({"path": shown, "bytes": a.content.len(), "created": !existed});
    // No diff against binary content.
    match previous.as_deref().map(std::str::from_utf8) {
        None => add_diff(&mut details, "", &a.content),
        Some(Ok(old)) => add_diff(&mut details, old, &a.content),
        Some(Err(_)) => {}
    }
    Ok(ToolOutput::text(format!("{verb} {shown} ({} bytes, {lines} line{plural})", a.content.len()))
        .with_details(&details))
}

/// `edit`: exact string replacement in a file read in this session.
pub fn edit(cx: &Cx<'_>, a: EditArgs) -> ToolResult {
    if a.old_string.is_empty() {
        return Err(ToolError::invalid_argument("old_string is empty; to create a file use `write`"));
    }
    if a.old_string == a.new_string {
        return Err(ToolError::invalid_argument("old_string and new_string are identical"));
    }
    let path = cx.resolve(&a.path)?;
    let meta = fs::metadata(&path).map_err(|e| cx.io(&path, &e))?;
    if let Some(e) = not_a_file(cx, &path, &meta) {
        return Err(e);
    }
    let bytes = fs::read(&path).map_err(|e| cx.io(&path, &e))?;
    cx.check_fresh(&path, &bytes)?;
    let shown = cx.show(&path);
    let text = String::from_utf8(bytes)
        .map_err(|_| ToolError::invalid_argument(format!("{shown} is not UTF-8 text; rewrite it with `write`")))?;
    let count = text.matches(a.old_string.as_str()).count();
    let first = match text.find(a.old_string.as_str()) {
        None => {
            return Err(ToolError::new(
                "NO_MATCH",
                format!(
                    "old_string was not found in {shown}; it must match exactly, including \
                     whitespace and indentation (read the file again if unsure)"
                ),
            ));
        }
        Some(i) => i,
    };
    let replace_all = a.replace_all.unwrap_or(false);
    if count > 1 && !replace_all {
        return Err(ToolError::new(
            "NOT_UNIQUE",
            format!(
                "old_string occurs {count} times in {shown}; include more surrounding lines to \
                 make it unique, or set replace_all to replace every occurrence"
            ),
        ));
    }
    let updated = if replace_all {
        text.replace(a.old_string.as_str(), &a.new_string)
    } else {
        text.replacen(a.old_string.as_str(), &a.new_string, 1)
    };
    fs::write(&path, updated.as_bytes()).map_err(|e| cx.io(&path, &e))?;
    cx.remember(&path, Seen::of(updated.as_bytes()));

    // A few numbered lines around the (first) replacement.
    let start_line = text[..first].matches('\n').count() + 1;
    let new_lines = a.new_string.matches('\n').count() + 1;
    let from = start_line.saturating_sub(3).max(1);
    let to = start_line + new_lines + 2;
    let mut snippet = String::new();
    for (i, l) in updated.lines().enumerate().skip(from - 1).take(to + 1 - from) {
        push_numbered(&mut snippet, i + 1, l);
    }
    let replaced = if replace_all { count } else { 1 };
    let plural = if replaced == 1 { "" } else { "s" };
    let mut details = json!({"path": shown, "replacements": replaced, "line": start_line});
    add_diff(&mut details, &text, &updated);
    Ok(ToolOutput::text(format!("Edited {shown}: replaced {replaced} occurrence{plural}.\n{snippet}"))
        .with_details(&details))
}

/// Most bytes of old plus new content diffed for the details.
const DIFF_INPUT_MAX: usize = 256 * 1024;
/// Most bytes of the diff kept in the details (cut at a line end).
const DIFF_MAX: usize = 16 * 1024;

/// Adds `diff` (unified, hunks only, three lines of context) of `old` →
/// `new` to a result's details, for surfaces to show; `diff_truncated` when
/// it was cut. Nothing when the content is too large to diff.
fn add_diff(details: &mut serde_json::Value, old: &str, new: &str) {
    if old.len() + new.len() > DIFF_INPUT_MAX || old == new {
        return;
    }
    let mut diff = similar::TextDiff::from_lines(old, new).unified_diff().context_radius(3).to_string();
    let truncated = diff.len() > DIFF_MAX;
    if truncated {
        let mut cut = DIFF_MAX;
        while !diff.is_char_boundary(cut) {
            cut -= 1;
        }
        let end = diff[..cut].rfind('\n').map_or(0, |i| i + 1);
        diff.truncate(end);
    }
    details["diff"] = json!(diff);
    if truncated {
        details["diff_truncated"] = json!(true);
    }
}

/// `list`: directory entries, `/` after directories, down to `depth`.
pub fn list(cx: &Cx<'_>, a: ListArgs) -> ToolResult {
    let path = cx.resolve(a.path.as_deref().unwrap_or("."))?;
    let meta = fs::metadata(&path).map_err(|e| cx.io(&path, &e))?;
    if !meta.is_dir() {
        return Err(ToolError::new("NOT_A_DIRECTORY", format!("{} is a file; use `read`", cx.show(&path))));
    }
    let depth = a.depth.unwrap_or(1).clamp(1, MAX_LIST_DEPTH);
    let mut lines = Vec::new();
    let mut truncated = false;
    list_into(&path, "", depth, &mut lines, &mut truncated).map_err(|e| cx.io(&path, &e))?;
    let shown = cx.show(&path);
    let mut out = if lines.is_empty() {
        format!("{shown} is empty\n")
    } else {
        let mut s = lines.join("\n");
        s.push('\n');
        s
    };
    if truncated {
        out.push_str(&format!("[stopped after {MAX_ENTRIES} entries; list a subdirectory]\n"));
    }
    Ok(ToolOutput::text(out).with_details(&json!({"path": shown, "entries": lines.len(), "truncated": truncated})))
}

fn list_into(dir: &Path, prefix: &str, depth: u32, lines: &mut Vec<String>, truncated: &mut bool) -> io::Result<()> {
    let mut entries: Vec<_> = fs::read_dir(dir)?.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        if lines.len() >= MAX_ENTRIES {
            *truncated = true;
            return Ok(());
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let rel = format!("{prefix}{name}");
        match entry.file_type() {
            Ok(ft) if ft.is_dir() => {
                lines.push(format!("{rel}/"));
                if depth > 1 && name != ".git" {
                    // An unreadable subdirectory is listed but not entered.
                    let _ = list_into(&entry.path(), &format!("{rel}/"), depth - 1, lines, truncated);
                }
            }
            Ok(ft) if ft.is_symlink() => lines.push(format!("{rel}@")),
            _ => lines.push(rel),
        }
    }
    Ok(())
}

/// `glob`: files under `path` whose path matches `pattern`.
pub fn glob(cx: &Cx<'_>, a: GlobArgs) -> ToolResult {
    let g = Glob::new(&a.pattern)?;
    let base = cx.resolve(a.path.as_deref().unwrap_or("."))?;
    let w = walk(&base)?;
    let mut hits = Vec::new();
    let mut more = false;
    for f in &w.files {
        if g.matches(&f.rel) {
            if hits.len() == MAX_ENTRIES {
                more = true;
                break;
            }
            hits.push(cx.show(&f.path));
        }
    }
    let mut out = if hits.is_empty() {
        format!("no files match `{}` under {}\n", a.pattern, cx.show(&base))
    } else {
        let mut s = hits.join("\n");
        s.push('\n');
        s
    };
    if more || w.truncated {
        out.push_str("[results truncated; narrow the pattern or the path]\n");
    }
    Ok(ToolOutput::text(out).with_details(&json!({"matches": hits.len(), "truncated": more || w.truncated})))
}

/// `grep`: lines matching a regex in files under `path`.
pub fn grep(cx: &Cx<'_>, a: GrepArgs) -> ToolResult {
    let re = RegexBuilder::new(&a.pattern)
        .case_insensitive(a.case_insensitive.unwrap_or(false))
        .build()
        .map_err(|e| ToolError::invalid_argument(format!("invalid pattern: {e}")))?;
    let filter = a.glob.as_deref().map(Glob::new).transpose()?;
    let base = cx.resolve(a.path.as_deref().unwrap_or("."))?;
    let max = a.max_matches.map_or(DEFAULT_GREP_MATCHES, |m| (m as usize).clamp(1, MAX_GREP_MATCHES));
    let files_only = a.files_only.unwrap_or(false);
    let w = walk(&base)?;
    let mut out = String::new();
    let (mut matches, mut files) = (0usize, 0usize);
    let mut stopped = false;
    'files: for f in &w.files {
        if filter.as_ref().is_some_and(|g| !g.matches(&f.rel)) {
            continue;
        }
        let Ok(meta) = fs::metadata(&f.path) else {
            continue;
        };
        if meta.len() > GREP_MAX_FILE {
            continue;
        }
        let Ok(bytes) = fs::read(&f.path) else {
            continue;
        };
        if looks_binary(&bytes) {
            continue;
        }
        let text = lossy(&bytes);
        let shown = cx.show(&f.path);
        let mut in_file = false;
        for (i, line) in text.lines().enumerate() {
            if !re.is_match(line) {
                continue;
            }
            if !in_file {
                in_file = true;
                files += 1;
                if files_only {
                    out.push_str(&shown);
                    out.push('\n');
                }
            }
            if files_only {
                break;
            }
            if matches == max || out.len() >= OUTPUT_BUDGET {
                stopped = true;
                break 'files;
            }
            matches += 1;
            let _ = write!(out, "{shown}:{}: ", i + 1);
            push_clipped(&mut out, line, MAX_LINE_CHARS);
            out.push('\n');
        }
        if files_only && (files >= MAX_ENTRIES || out.len() >= OUTPUT_BUDGET) {
            stopped = true;
            break;
        }
    }
    if out.is_empty() {
        out = format!("no matches for `{}` under {}\n", a.pattern, cx.show(&base));
    }
    if stopped || w.truncated {
        out.push_str("[results truncated; raise max_matches, or narrow the pattern, glob or path]\n");
    }
    Ok(ToolOutput::text(out).with_details(&json!({
        "matches": matches,
        "files": files,
        "truncated": stopped || w.truncated,
    })))
}
