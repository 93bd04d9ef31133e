//! `wharf plugin new NAME --lang rust|python|js|c --kind tool|policy|hooks|llm|skills`:
//! scaffolds a plugin project that `wharf plugin build` turns into a
//! component, with a unit test (Rust, Python, JavaScript).
//!
//! `--lang c` makes a generic component instead (plain WIT exports in the
//! project's own `wit/world.wit`, no `wharf:plugin` world and no SDK): only
//! `--kind tool`.
//!
//! The templates live in the SDK directories (`sdk/LANG/templates/`) and are
//! compiled into the binary; the generated project refers to this checkout's
//! SDK by absolute path (Rust: a path dependency; Python: the test's
//! `sys.path`; JavaScript: a `file:` dependency), found like `plugin build`
//! finds it (`WHARF_SDK_DIR`, else next to the binary).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};

use crate::build::{Lang, PluginKind, sdk_dir};

/// Arguments of `wharf plugin new`.
#[derive(clap::Args, Debug)]
pub struct NewArgs {
    /// The plugin's name: a letter, then letters, digits, `_` or `-` (at most
    /// 64). Also the name of its first tool, with `-` as `_`.
    pub name: String,
    /// The language.
    #[arg(long, value_enum, default_value = "rust")]
    pub lang: Lang,
    /// The plugin kind (selects the WIT world).
    #[arg(long, value_enum, default_value = "tool")]
    pub kind: PluginKind,
    /// The directory to create (default: `./NAME`). It must not exist or be
    /// empty.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

macro_rules! template {
    ($($part:expr),+) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../sdk/", $($part),+))
    };
}

macro_rules! per_kind {
    ($kind:expr, $lang:literal, $file:literal) => {
        match $kind {
            PluginKind::Tool => template!($lang, "/templates/tool/", $file),
            PluginKind::Policy => template!($lang, "/templates/policy/", $file),
            PluginKind::Hooks => template!($lang, "/templates/hooks/", $file),
            PluginKind::Llm => template!($lang, "/templates/llm/", $file),
            PluginKind::Skills => template!($lang, "/templates/skills/", $file),
        }
    };
}

/// The files of a new project: (relative path, template text).
fn files(lang: Lang, kind: PluginKind) -> Vec<(&'static str, &'static str)> {
    match lang {
        Lang::Rust => vec![
            ("Cargo.toml", template!("rust/templates/Cargo.toml.in")),
            ("src/lib.rs", per_kind!(kind, "rust", "lib.rs")),
            (".gitignore", template!("rust/templates/gitignore")),
            ("README.md", template!("rust/templates/README.md.in")),
        ],
        Lang::Python => vec![
            ("pyproject.toml", template!("python/templates/pyproject.toml.in")),
            ("app.py", per_kind!(kind, "python", "app.py")),
            ("test_app.py", per_kind!(kind, "python", "test_app.py")),
            (".gitignore", template!("python/templates/gitignore")),
            ("README.md", template!("python/templates/README.md.in")),
        ],
        Lang::Js => vec![
            ("package.json", template!("js/templates/package.json.in")),
            ("app.js", per_kind!(kind, "js", "app.js")),
            ("app.test.js", per_kind!(kind, "js", "app.test.js")),
            (".gitignore", template!("js/templates/gitignore")),
            ("README.md", template!("js/templates/README.md.in")),
        ],
        // Generic components are tools only (`run` refuses other kinds).
        Lang::C => vec![
            ("component.toml", template!("c/templates/component.toml.in")),
            ("wit/world.wit", template!("c/templates/world.wit.in")),
            ("src/component.c", template!("c/templates/tool/component.c")),
            (".gitignore", template!("c/templates/gitignore")),
            ("README.md", template!("c/templates/README.md.in")),
        ],
    }
}

const PYTHON_TEST_HEADER: &str = template!("python/templates/test_header.py.in");

/// Words a plugin name may not be (it becomes a Python/JS identifier).
const RESERVED: &[&str] = &[
    "and",
    "as",
    "assert",
    "async",
    "await",
    "break",
    "class",
    "continue",
    "def",
    "del",
    "elif",
    "else",
    "except",
    "finally",
    "for",
    "from",
    "global",
    "if",
    "import",
    "in",
    "is",
    "lambda",
    "nonlocal",
    "not",
    "or",
    "pass",
    "raise",
    "return",
    "try",
    "while",
    "with",
    "yield",
    "true",
    "false",
    "none",
    "null",
    "function",
    "var",
    "let",
    "const",
    "new",
    "delete",
    "typeof",
    "switch",
    "case",
    "default",
    "this",
    "void",
    "export",
    "test",
    "self",
    "crate",
    "super",
    "mod",
    "fn",
    "impl",
    "use",
    "type",
    "struct",
    "enum",
    "trait",
    "match",
    "loop",
    "move",
    "ref",
    "static",
    "unsafe",
    "where",
    "plugin",
    "tool",
    "wharf",
    "wharf_sdk",
    "app",
];

fn validate_name(name: &str) -> anyhow::Result<()> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !first_ok || !rest_ok || name.len() > 64 {
        bail!("invalid plugin name `{name}`: use a letter, then letters, digits, `_` or `-` (at most 64)");
    }
    if RESERVED.contains(&name.to_ascii_lowercase().replace('-', "_").as_str()) {
        bail!("invalid plugin name `{name}`: it is a reserved word in one of the plugin languages");
    }
    Ok(())
}

/// Escapes a string for a double-quoted TOML, JSON or Python literal.
fn quoted_body(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

fn slash_path(p: &Path) -> String {
    p.display().to_string().replace('\\', "/")
}

struct Vars {
    pairs: Vec<(&'static str, String)>,
}

impl Vars {
    fn render(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (k, v) in &self.pairs {
            out = out.replace(&format!("{{{{{k}}}}}"), v);
        }
        out
    }
}

/// C keywords (and names wit-bindgen's C output uses), which a C
/// component's function name may not be.
const C_RESERVED: &[&str] = &[
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum", "extern", "float",
    "for", "goto", "if", "inline", "int", "long", "register", "restrict", "return", "short", "signed", "sizeof",
    "static", "struct", "switch", "typedef", "union", "unsigned", "void", "volatile", "while", "bool", "true", "false",
];

/// The WIT name of a plugin name: lower-case kebab-case words, each starting
/// with a letter (a word starting with a digit joins the one before it):
/// `CSV_query2` → `csv-query2`, `a-1b` → `a1b`.
fn wit_name(name: &str) -> String {
    let mut out = String::new();
    for word in name.to_ascii_lowercase().split(['-', '_']).filter(|w| !w.is_empty()) {
        if !out.is_empty() && word.starts_with(|c: char| c.is_ascii_alphabetic()) {
            out.push('-');
        }
        out.push_str(word);
    }
    out
}

fn try_line(lang: Lang, kind: PluginKind, ident: &str, out: &str) -> String {
    if lang == Lang::C {
        let tool = wit_name(ident).replace('-', "_");
        return format!("wharf plugin call {out} {tool} '{{\"name\": \"Wharf\", \"times\": 2}}'");
    }
    match kind {
        PluginKind::Tool => format!("wharf plugin call {out} {ident} '{{\"name\": \"Wharf\"}}'"),
        PluginKind::Skills => format!("wharf plugin call {out} skill '{{\"name\": \"commit-message\"}}'"),
        _ => {
            let _ = lang;
            format!("wharf plugin inspect {out}     # then load it from a profile ([[plugin]] path = …)")
        }
    }
}

/// Runs `wharf plugin new`.
pub async fn run(args: NewArgs) -> anyhow::Result<ExitCode> {
    validate_name(&args.name)?;
    if args.lang == Lang::C {
        if args.kind != PluginKind::Tool {
            bail!(
                "--lang c makes a generic component, which Wharf loads as tools only: use --kind tool \
                 (other kinds need the wharf:plugin world: --lang rust, python or js)"
            );
        }
        let c_name = wit_name(&args.name).replace('-', "_");
        if C_RESERVED.contains(&c_name.as_str()) {
            bail!("invalid plugin name `{}`: `{c_name}` is a C keyword", args.name);
        }
    }
    let dir = args.dir.clone().unwrap_or_else(|| PathBuf::from(&args.name));
    if dir.exists() {
        let empty = std::fs::read_dir(&dir).with_context(|| format!("{}", dir.display()))?.next().is_none();
        if !empty {
            bail!("{} already exists and is not empty", dir.display());
        }
    }
    let sdk = sdk_dir()?;
    let ident = args.name.replace('-', "_");
    let (lang, kind) = (args.lang, args.kind);
    let out = match lang {
        Lang::Rust => format!("target/wasm32-wasip2/release/{ident}.wasm"),
        Lang::Python | Lang::Js | Lang::C => format!("target/{ident}.wasm"),
    };
    let mut vars = Vars {
        pairs: vec![
            ("name", args.name.clone()),
            ("ident", ident.clone()),
            ("kind", kind.as_str().to_string()),
            ("world", kind.world().to_string()),
            ("sdk_rust", quoted_body(&slash_path(&sdk.join("rust")))),
            ("sdk_python", quoted_body(&slash_path(&sdk.join("python")))),
            ("sdk_js", quoted_body(&slash_path(&sdk.join("js")))),
            ("try", try_line(lang, kind, &ident, &out)),
            ("wit_name", wit_name(&args.name)),
            ("c_name", wit_name(&args.name).replace('-', "_")),
        ],
    };
    let header = vars.render(PYTHON_TEST_HEADER);
    vars.pairs.push(("test_header", header.trim_end().to_string()));

    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for (rel, text) in files(lang, kind) {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, vars.render(text)).with_context(|| format!("writing {}", path.display()))?;
    }
    if lang == Lang::Rust {
        // The checkout's lock file: the same dependency versions the SDK is
        // tested with (cargo drops the entries the plugin does not use).
        if let Some(lock) = sdk.parent().map(|r| r.join("Cargo.lock")).filter(|l| l.is_file()) {
            let _ = std::fs::copy(lock, dir.join("Cargo.lock"));
        }
    }

    let shown = dir.display();
    println!("created a {} {} plugin `{}` in {shown}", lang.as_str(), kind.as_str(), args.name);
    let test = match lang {
        Lang::Rust => Some("cargo test"),
        Lang::Python => Some("python3 test_app.py"),
        Lang::Js => Some("npm install && node --test"),
        Lang::C => None,
    };
    if lang == Lang::C {
        println!("  world:  local:{}/component@0.1.0 (generic component, wit/world.wit)", wit_name(&args.name));
    } else {
        println!("  world:  wharf:plugin/{}@0.1.0", kind.world());
    }
    if let Some(test) = test {
        println!("  test:   (cd {shown} && {test})");
    }
    println!("  build:  wharf plugin build {shown}");
    println!("  try:    (cd {shown} && {})", try_line(lang, kind, &ident, &out));
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(validate_name("my-tool").is_ok());
        assert!(validate_name("csv_query2").is_ok());
        for bad in ["", "1abc", "a b", "a/b", "class", "import", "x".repeat(65).as_str()] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn wit_names_are_kebab_case_words_starting_with_letters() {
        for (name, wit) in [("my-tool", "my-tool"), ("CSV_query2", "csv-query2"), ("a-1b", "a1b"), ("x__y", "x-y")] {
            assert_eq!(wit_name(name), wit, "{name}");
        }
    }

    #[test]
    fn every_template_renders_without_placeholders() {
        let vars = Vars {
            pairs: vec![
                ("name", "x".into()),
                ("ident", "x".into()),
                ("kind", "tool".into()),
                ("world", "tool-plugin".into()),
                ("sdk_rust", "/s/rust".into()),
                ("sdk_python", "/s/python".into()),
                ("sdk_js", "/s/js".into()),
                ("try", "t".into()),
                ("test_header", "h".into()),
                ("wit_name", "x".into()),
                ("c_name", "x".into()),
            ],
        };
        for lang in [Lang::Rust, Lang::Python, Lang::Js, Lang::C] {
            for kind in [PluginKind::Tool, PluginKind::Policy, PluginKind::Hooks, PluginKind::Llm, PluginKind::Skills] {
                for (rel, text) in files(lang, kind) {
                    let out = vars.render(text);
                    assert!(!out.contains("{{"), "{lang:?} {kind:?} {rel}: {out}");
                }
            }
        }
    }
}
