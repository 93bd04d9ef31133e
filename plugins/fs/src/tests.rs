#![allow(clippy::unwrap_used)]

use std::fs;

use wharf_sdk::{Args, ToolError, ToolOutput};

use crate::dispatch;
use crate::ops::Cx;
use crate::record::MemRecords;

struct Env {
    dir: tempfile::TempDir,
    records: MemRecords,
}

impl Env {
    fn new() -> Self {
        Self { dir: tempfile::tempdir().unwrap(), records: MemRecords::default() }
    }

    fn call(&self, session: &str, name: &str, args: serde_json::Value) -> Result<ToolOutput, ToolError> {
        let cx = Cx { root: wharf_sdk::path::normalize(self.dir.path()), session, records: &self.records };
        dispatch(&cx, name, &Args::new(args.to_string()))
    }

    fn ok(&self, name: &str, args: serde_json::Value) -> String {
        match self.call("s1", name, args) {
            Ok(o) => o.content,
            Err(e) => panic!("{name} failed: {}: {}", e.code, e.message),
        }
    }

    fn err(&self, name: &str, args: serde_json::Value) -> String {
        match self.call("s1", name, args) {
            Ok(o) => panic!("{name} unexpectedly succeeded: {}", o.content),
            Err(e) => e.code,
        }
    }

    fn put(&self, rel: &str, content: &str) {
        let p = self.dir.path().join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, content).unwrap();
    }

    fn get(&self, rel: &str) -> String {
        fs::read_to_string(self.dir.path().join(rel)).unwrap()
    }
}

use serde_json::json;

#[test]
fn read_numbers_lines_with_offset_and_limit() {
    let env = Env::new();
    env.put("a.txt", "one\ntwo\nthree\nfour\n");
    assert_eq!(env.ok("read", json!({"path": "a.txt"})), "     1\tone\n     2\ttwo\n     3\tthree\n     4\tfour\n");
    let out = env.ok("read", json!({"path": "a.txt", "offset": 2, "limit": 2}));
    assert_eq!(out, "     2\ttwo\n     3\tthree\n[showing lines 2-3 of 4; continue with offset=4]\n");
    assert!(env.ok("read", json!({"path": "a.txt", "offset": 9})).contains("past the end"));
    env.put("empty", "");
    assert_eq!(env.ok("read", json!({"path": "empty"})), "[empty file]\n");
    let abs = env.dir.path().join("a.txt");
    assert!(env.ok("read", json!({"path": abs})).starts_with("     1\tone"));
}

#[test]
fn read_truncates_long_lines_and_detects_binary() {
    let env = Env::new();
    env.put("long", &"x".repeat(5000));
    let out = env.ok("read", json!({"path": "long"}));
    assert!(out.contains("[line truncated: 5000 chars]"));
    assert!(out.len() < 2100);
    env.put("bin", "ab\0cd");
    assert!(env.ok("read", json!({"path": "bin"})).starts_with("[binary file"));
}

#[test]
fn read_numbering_matches_cat_n_at_every_width() {
    for n in [1, 9, 10, 99_999, 999_999, 1_000_000, 1_234_567_890, usize::MAX] {
        let mut out = String::from("x");
        crate::ops::push_numbered(&mut out, n, "line");
        assert_eq!(out, format!("x{n:>6}\tline\n"));
    }
}

#[test]
fn read_shows_invalid_utf8_replaced_and_cuts_multibyte_lines_on_characters() {
    let env = Env::new();
    fs::write(env.dir.path().join("mixed"), b"ok \xff\xfe end\n\xc3\xa9t\xc3\xa9\n").unwrap();
    assert_eq!(env.ok("read", json!({"path": "mixed"})), "     1\tok \u{fffd}\u{fffd} end\n     2\t\u{e9}t\u{e9}\n");
    // 1,500 two-byte characters: 3,000 bytes but under the 2,000-character cut.
    env.put("accents", &"\u{e9}".repeat(1500));
    let out = env.ok("read", json!({"path": "accents"}));
    assert!(!out.contains("truncated"), "{}", &out[..40]);
    env.put("long-accents", &"\u{e9}".repeat(2500));
    let out = env.ok("read", json!({"path": "long-accents"}));
    assert!(out.contains(&format!("{}\u{2026} [line truncated: 2500 chars]", "\u{e9}".repeat(2000))));
}

#[test]
fn content_hash_is_the_same_fed_whole_or_in_pieces() {
    let text = "first line\nsecond, longer line with more bytes\nthird\n".repeat(50);
    let mut h = crate::record::Hasher::new();
    for piece in text.as_bytes().chunks(7) {
        h.update(piece);
    }
    assert_eq!(crate::record::Seen::of(text.as_bytes()).hash, h.finish());
    assert_ne!(crate::record::Seen::of(b"a").hash, crate::record::Seen::of(b"b").hash);
}

#[test]
fn paths_outside_the_workspace_are_refused() {
    let env = Env::new();
    assert_eq!(env.err("read", json!({"path": "../../etc/passwd"})), "PERMISSION_DENIED");
    assert_eq!(env.err("read", json!({"path": "/etc/passwd"})), "PERMISSION_DENIED");
    assert_eq!(env.err("write", json!({"path": "/tmp/x", "content": "x"})), "PERMISSION_DENIED");
    assert_eq!(env.err("list", json!({"path": ".."})), "PERMISSION_DENIED");
    assert_eq!(env.err("grep", json!({"pattern": "x", "path": "/"})), "PERMISSION_DENIED");
    assert_eq!(env.err("glob", json!({"pattern": "../*"})), "INVALID_ARGUMENT");
    assert_eq!(env.err("read", json!({"path": "missing"})), "NOT_FOUND");
    assert_eq!(env.err("read", json!({"path": "."})), "IS_A_DIRECTORY");
}

#[test]
fn edit_requires_a_fresh_read() {
    let env = Env::new();
    env.put("f.rs", "fn a() {}\nfn b() {}\n");
    let edit = json!({"path": "f.rs", "old_string": "fn a", "new_string": "fn z"});
    assert_eq!(env.err("edit", edit.clone()), "NOT_READ");
    env.ok("read", json!({"path": "f.rs"}));
    // Another session's read does not count.
    assert_eq!(env.call("s2", "edit", edit.clone()).unwrap_err().code, "NOT_READ");
    // Changed behind our back.
    env.put("f.rs", "fn a() {}\nfn b() {}\nfn c() {}\n");
    assert_eq!(env.err("edit", edit.clone()), "STALE");
    env.ok("read", json!({"path": "f.rs"}));
    let out = env.ok("edit", edit);
    assert!(out.starts_with("Edited f.rs: replaced 1 occurrence."), "{out}");
    assert!(out.contains("     1\tfn z() {}"), "{out}");
    assert_eq!(env.get("f.rs"), "fn z() {}\nfn b() {}\nfn c() {}\n");
    // Our own edit keeps the record fresh: a second edit needs no re-read.
    env.ok("edit", json!({"path": "f.rs", "old_string": "fn b", "new_string": "fn y"}));
    assert_eq!(env.get("f.rs"), "fn z() {}\nfn y() {}\nfn c() {}\n");
}

#[test]
fn edit_uniqueness_and_replace_all() {
    let env = Env::new();
    env.put("f", "x = 1\nx = 1\n");
    env.ok("read", json!({"path": "f"}));
    assert_eq!(env.err("edit", json!({"path": "f", "old_string": "x = 1", "new_string": "x = 2"})), "NOT_UNIQUE");
    assert_eq!(env.err("edit", json!({"path": "f", "old_string": "nope", "new_string": "x"})), "NO_MATCH");
    assert_eq!(env.err("edit", json!({"path": "f", "old_string": "", "new_string": "x"})), "INVALID_ARGUMENT");
    assert_eq!(env.err("edit", json!({"path": "f", "old_string": "x", "new_string": "x"})), "INVALID_ARGUMENT");
    let out = env.ok("edit", json!({"path": "f", "old_string": "x = 1", "new_string": "x = 2", "replace_all": true}));
    assert!(out.contains("replaced 2 occurrences"), "{out}");
    assert_eq!(env.get("f"), "x = 2\nx = 2\n");
    assert_eq!(env.err("edit", json!({"path": "missing", "old_string": "a", "new_string": "b"})), "NOT_FOUND");
}

#[test]
fn write_creates_freely_but_overwrites_only_after_read() {
    let env = Env::new();
    assert!(env.ok("write", json!({"path": "new/dir/f.txt", "content": "hi\n"})).starts_with("Created new/dir/f.txt"));
    assert_eq!(env.get("new/dir/f.txt"), "hi\n");
    // Written by us in this session: overwriting is fine.
    env.ok("write", json!({"path": "new/dir/f.txt", "content": "again\n"}));
    env.put("old.txt", "old");
    assert_eq!(env.err("write", json!({"path": "old.txt", "content": "x"})), "NOT_READ");
    env.ok("read", json!({"path": "old.txt"}));
    assert!(env.ok("write", json!({"path": "old.txt", "content": "x"})).starts_with("Overwrote"));
    assert_eq!(env.err("write", json!({"path": "new", "content": "x"})), "IS_A_DIRECTORY");
}

#[test]
fn list_glob_grep() {
    let env = Env::new();
    env.put("src/lib.rs", "pub fn hello() {}\n// TODO: more\n");
    env.put("src/deep/mod.rs", "fn todo_later() {}\n");
    env.put("README.md", "# Title\nTODO docs\n");
    env.put(".git/config", "TODO never\n");
    assert_eq!(env.ok("list", json!({})), ".git/\nREADME.md\nsrc/\n");
    assert_eq!(env.ok("list", json!({"path": "src", "depth": 2})), "deep/\ndeep/mod.rs\nlib.rs\n");
    assert_eq!(env.ok("glob", json!({"pattern": "*.rs"})), "src/deep/mod.rs\nsrc/lib.rs\n");
    assert_eq!(env.ok("glob", json!({"pattern": "src/*.rs"})), "src/lib.rs\n");
    assert_eq!(
        env.ok("glob", json!({"pattern": "*.md", "path": "src"})).lines().next().unwrap(),
        "no files match `*.md` under src"
    );
    assert_eq!(env.ok("grep", json!({"pattern": "TODO"})), "README.md:2: TODO docs\nsrc/lib.rs:2: // TODO: more\n");
    assert_eq!(
        env.ok("grep", json!({"pattern": "todo", "case_insensitive": true, "glob": "*.rs", "files_only": true})),
        "src/deep/mod.rs\nsrc/lib.rs\n"
    );
    let out = env.ok("grep", json!({"pattern": "TODO|fn", "max_matches": 1}));
    assert!(out.contains("[results truncated"), "{out}");
    assert_eq!(env.err("grep", json!({"pattern": "("})), "INVALID_ARGUMENT");
}

#[test]
fn unknown_tool_and_bad_args() {
    let env = Env::new();
    assert_eq!(env.err("nope", json!({})), "UNKNOWN_TOOL");
    assert_eq!(env.err("read", json!({"offset": 1})), "INVALID_ARGUMENT");
}

#[test]
fn write_and_edit_details_carry_a_unified_diff() {
    let env = Env::new();
    let details = |o: ToolOutput| -> serde_json::Value { serde_json::from_str(o.details.as_deref().unwrap()).unwrap() };
    let created = details(env.call("s1", "write", json!({"path": "f.txt", "content": "a\nb\n"})).unwrap());
    assert_eq!(created["diff"], "@@ -0,0 +1,2 @@\n+a\n+b\n");
    let over = details(env.call("s1", "write", json!({"path": "f.txt", "content": "a\nc\n"})).unwrap());
    assert_eq!(over["diff"], "@@ -1,2 +1,2 @@\n a\n-b\n+c\n");
    let edit = details(env.call("s1", "edit", json!({"path": "f.txt", "old_string": "a", "new_string": "z"})).unwrap());
    assert_eq!(edit["diff"], "@@ -1,2 +1,2 @@\n-a\n+z\n c\n");
    // Large changes keep a bounded diff, cut at a line end.
    let big: String = (0..6000).map(|i| format!("line {i}\n")).collect();
    let large = details(env.call("s1", "write", json!({"path": "f.txt", "content": big})).unwrap());
    let diff = large["diff"].as_str().unwrap();
    assert!(diff.len() <= 16 * 1024 && diff.ends_with('\n'), "{}", diff.len());
    assert_eq!(large["diff_truncated"], true);
}
