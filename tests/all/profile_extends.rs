//! Issue 37, item 7 "Profiles without copies", through the real binary: a
//! profile extends another (`extends = "default"`), its rows merge by id,
//! and `wharf config dump` names the file each value came from — the base
//! profile, reached via the one asked for, for an inherited value; the
//! extending profile for a value it sets. Every shipped profile loads.

use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok<T, E: std::fmt::Debug>(r: Result<T, E>) -> T {
    r.expect("the command ran")
}

/// `wharf config dump ARGS` in `ws`, with `home` as the home directory.
fn dump(home: &Path, ws: &Path, args: &[&str]) -> Output {
    let mut cmd = wharf_tests::wharf(home);
    cmd.current_dir(ws).args(["config", "dump"]).args(args);
    cmd.output().expect("spawning wharf")
}

/// The first line of `dump` that starts with `start`.
fn line<'a>(dump: &'a str, start: &str) -> &'a str {
    dump.lines().find(|l| l.starts_with(start)).unwrap_or_else(|| panic!("no line starting {start:?} in:\n{dump}"))
}

#[test]
fn config_dump_names_the_base_profile_for_an_inherited_value_and_the_extending_one_for_its_own() {
    let home = ok(tempfile::tempdir());
    let ws = ok(tempfile::tempdir());
    let o = dump(home.path(), ws.path(), &["-p", "code"]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", text(&o.stderr));
    // Inherited from the default profile, reached through `code`.
    let fs = line(&out, "id = \"fs\"");
    assert!(fs.contains("# from shipped:profiles/default.toml:") && fs.ends_with(" (via code)"), "{fs}");
    let adapter = line(&out, "adapter = \"deepseek\"");
    assert!(adapter.contains("# from shipped:profiles/default.toml:") && adapter.ends_with(" (via code)"), "{adapter}");
    // Set (or overridden) by `code` itself.
    let code = line(&out, "id = \"code\"");
    assert!(code.contains("# from shipped:profiles/code.toml:") && !code.contains("via"), "{code}");
    let mode = line(&out, "mode = \"ask\"");
    assert!(mode.contains("# from shipped:profiles/code.toml:") && !mode.contains("via"), "{mode}");

    let o = dump(home.path(), ws.path(), &["--json", "-p", "code"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let j: Value = ok(serde_json::from_slice(&o.stdout));
    let p = &j["provenance"];
    assert_eq!(p["plugin.fs.path"]["source"], "shipped:profiles/default.toml", "{p}");
    assert_eq!(p["plugin.fs.path"]["via"], json!(["code"]), "{p}");
    assert_eq!(p["plugin.permissions.config.read_only_tools"]["source"], "shipped:profiles/code.toml", "{p}");
    assert!(p["plugin.permissions.config.read_only_tools"].get("via").is_none(), "{p}");
    // The id of an overridden row stays where the row was defined.
    assert_eq!(p["plugin.permissions.id"]["source"], "shipped:profiles/default.toml", "{p}");
    let rows = j["config"]["plugin"].as_array().cloned().unwrap_or_default();
    let permissions = rows.iter().find(|r| r["id"] == "permissions").cloned().unwrap_or_default();
    assert!(permissions["config"]["read_only_tools"].to_string().contains("run_code"), "{permissions}");

    // A profile of one's own extends a shipped one; the chain is named.
    let mine = home.path().join("mine.toml");
    ok(std::fs::write(&mine, "extends = \"code\"\n\n[agent]\nmax_steps = 9\n"));
    let o = dump(home.path(), ws.path(), &["-p", &mine.display().to_string()]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", text(&o.stderr));
    assert!(line(&out, "max_steps = 9").ends_with("# from ~/mine.toml:4"), "{out}");
    assert!(line(&out, "id = \"fs\"").ends_with(" (via ~/mine.toml > code)"), "{out}");
    assert!(line(&out, "id = \"code\"").ends_with(" (via ~/mine.toml)"), "{out}");
}

#[test]
fn every_shipped_profile_loads_by_name_and_by_path_alike() {
    let home = ok(tempfile::tempdir());
    let ws = ok(tempfile::tempdir());
    let mut names: Vec<String> = ok(std::fs::read_dir(wharf_tests::root().join("profiles")))
        .filter_map(|e| {
            let p = ok(e).path();
            (p.extension()? == "toml").then(|| p.file_stem()?.to_str().map(str::to_string))?
        })
        .collect();
    names.sort();
    assert!(names.len() >= 8 && names.contains(&"code".to_string()), "{names:?}");
    for name in &names {
        let o = dump(home.path(), ws.path(), &["-p", name]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", text(&o.stderr));
        // The file on disk composes to the same config as the shipped copy
        // (a shipped `extends` name resolves the same from a path).
        let by_name = dump(home.path(), ws.path(), &["--json", "-p", name]);
        let file = wharf_tests::root().join(format!("profiles/{name}.toml"));
        let by_path = dump(home.path(), ws.path(), &["--json", "-p", &file.display().to_string()]);
        assert!(by_path.status.success(), "{name}: {}", text(&by_path.stderr));
        let config = |o: &Output| ok(serde_json::from_slice::<Value>(&o.stdout))["config"].clone();
        assert_eq!(config(&by_name), config(&by_path), "{name}");
    }
}

#[test]
fn a_bad_extends_is_a_clear_error() {
    let home = ok(tempfile::tempdir());
    let ws = ok(tempfile::tempdir());
    let typo = home.path().join("typo.toml");
    ok(std::fs::write(&typo, "extends = \"defualt\"\n"));
    let o = dump(home.path(), ws.path(), &["-p", &typo.display().to_string()]);
    let err = text(&o.stderr);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("~/typo.toml:1:11") && err.contains("no shipped profile \"defualt\""), "{err}");
    assert!(err.contains("anthropic, code, default, demo"), "{err}");

    let (a, b) = (home.path().join("a.toml"), home.path().join("b.toml"));
    ok(std::fs::write(&a, "extends = \"b.toml\"\n"));
    ok(std::fs::write(&b, "extends = \"a.toml\"\n"));
    let o = dump(home.path(), ws.path(), &["-p", &a.display().to_string()]);
    let err = text(&o.stderr);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("`extends` makes a cycle: ~/a.toml > ~/b.toml > ~/a.toml"), "{err}");

    // A project layer is merged over the profile: it cannot extend one.
    let project = ws.path().join(".wharf");
    ok(std::fs::create_dir_all(&project));
    ok(std::fs::write(project.join("config.toml"), "extends = \"code\"\n"));
    let o = dump(home.path(), ws.path(), &["-p", "default"]);
    let err = text(&o.stderr);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("`extends` belongs in a profile"), "{err}");
}
