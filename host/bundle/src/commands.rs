//! Slash commands from `commands/*.md` (and `commands/GROUP/*.md`, named
//! `GROUP:NAME`): the front matter gives the `description` and
//! `argument-hint`, the body is the prompt. [`Command::expand`] fills in the
//! arguments the way Claude Code does: `$ARGUMENTS` is everything after the
//! command, `$1` … `$9` the whitespace-separated words; a body that uses
//! neither gets the arguments appended as `ARGUMENTS: …`.

use std::path::{Path, PathBuf};

use crate::{BundleError, markdown, read_text};

/// One slash command.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Command {
    /// Its name, typed as `/NAME` (or `/BUNDLE:NAME`).
    pub name: String,
    /// The bundle it comes from.
    pub bundle: String,
    /// What it does (front matter `description`, else the body's first line).
    pub description: String,
    /// What arguments it takes (front matter `argument-hint`).
    pub argument_hint: Option<String>,
    /// The prompt template.
    pub body: String,
    /// The file.
    pub file: PathBuf,
}

impl Command {
    /// The command as its file says now (an edit shows at the next use).
    pub fn reread(&self) -> Result<Self, BundleError> {
        command_file(&self.file, self.name.clone(), &self.bundle, &mut Vec::new())
    }

    /// The prompt for `/NAME ARGS` (see the module docs).
    pub fn expand(&self, args: &str) -> String {
        let args = args.trim();
        let words: Vec<&str> = args.split_whitespace().collect();
        let mut out = String::with_capacity(self.body.len() + args.len());
        let mut used = false;
        let mut rest = self.body.as_str();
        while let Some(i) = rest.find('$') {
            out.push_str(&rest[..i]);
            let after = &rest[i + 1..];
            if let Some(tail) = after.strip_prefix("ARGUMENTS") {
                out.push_str(args);
                used = true;
                rest = tail;
            } else if let Some(d) = after.chars().next().filter(|c| ('1'..='9').contains(c)) {
                let n = d as usize - '1' as usize;
                out.push_str(words.get(n).copied().unwrap_or_default());
                used = true;
                rest = &after[1..];
            } else {
                out.push('$');
                rest = after;
            }
        }
        out.push_str(rest);
        let mut out = out.trim().to_string();
        if !used && !args.is_empty() {
            out.push_str("\n\nARGUMENTS: ");
            out.push_str(args);
        }
        out
    }
}

fn command_file(file: &Path, name: String, bundle: &str, issues: &mut Vec<String>) -> Result<Command, BundleError> {
    let text = read_text(file)?;
    let doc = markdown::parse(&text);
    let body = doc.body.trim().to_string();
    if body.contains("!`") {
        issues.push(format!(
            "command /{name}: `!`command`` lines (bash run before the prompt) are not run by Wharf; they reach the \
             model as text"
        ));
    }
    let description = doc
        .get("description")
        .filter(|d| !d.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| body.lines().next().unwrap_or_default().trim_start_matches('#').trim().to_string());
    Ok(Command {
        name,
        bundle: bundle.to_string(),
        description,
        argument_hint: doc.get("argument-hint").map(str::to_string),
        body,
        file: file.to_path_buf(),
    })
}

fn md_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    v.sort();
    v
}

/// Reads the commands of `dir` (missing: none) into `out`.
pub(crate) fn load_dir(
    dir: &Path,
    bundle: &str,
    out: &mut Vec<Command>,
    issues: &mut Vec<String>,
) -> Result<(), BundleError> {
    let stem = |p: &Path| p.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    for p in md_files(dir) {
        if p.is_dir() {
            let group = stem(&p);
            for f in md_files(&p).into_iter().filter(|f| f.extension().is_some_and(|x| x == "md")) {
                let name = format!("{group}:{}", stem(&f));
                out.push(command_file(&f, name, bundle, issues)?);
            }
        } else if p.extension().is_some_and(|x| x == "md") {
            out.push(command_file(&p, stem(&p), bundle, issues)?);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(body: &str) -> Command {
        Command {
            name: "c".into(),
            bundle: "b".into(),
            description: String::new(),
            argument_hint: None,
            body: body.into(),
            file: PathBuf::new(),
        }
    }

    #[test]
    fn arguments_and_positions() {
        assert_eq!(cmd("Review $ARGUMENTS now").expand(" a.rs b.rs "), "Review a.rs b.rs now");
        assert_eq!(cmd("From $1 to $2 ($3)").expand("x y"), "From x to y ()");
        assert_eq!(cmd("Costs $5 and $PATH").expand(""), "Costs  and $PATH");
        assert_eq!(cmd("Just do it").expand("quickly"), "Just do it\n\nARGUMENTS: quickly");
        assert_eq!(cmd("Just do it").expand(""), "Just do it");
    }
}
