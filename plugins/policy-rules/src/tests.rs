#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use wharf_sdk::prelude::{Decision, PolicyRequest};

use crate::rules::Rules;
use crate::{DecidedBy, INVALID, decide};

const WS: &str = "/home/u/proj";

fn req(tool: &str, args: Value) -> PolicyRequest {
    PolicyRequest {
        tool: tool.into(),
        plugin: "fs".into(),
        arguments: args.to_string(),
        session_id: "s".into(),
        agent_depth: 0,
        workspace: Some(WS.into()),
    }
}

fn rules(cfg: Value) -> Rules {
    Rules::from_value(cfg).expect("the test config is accepted")
}

fn refused(cfg: Value) -> String {
    match Rules::from_value(cfg.clone()) {
        Ok(_) => panic!("config accepted: {cfg}"),
        Err(e) => e,
    }
}

/// The decision kind and, for deny/ask, the reason.
fn eval(r: &Rules, tool: &str, args: Value) -> (String, String) {
    let (d, _) = r.evaluate(&req(tool, args));
    match d {
        Decision::Allow => ("allow".into(), String::new()),
        Decision::Deny(m) => ("deny".into(), m),
        Decision::Ask(m) => ("ask".into(), m),
        Decision::Rewrite(a) => ("rewrite".into(), a),
    }
}

fn kind(r: &Rules, tool: &str, args: Value) -> String {
    eval(r, tool, args).0
}

#[test]
fn brief_example_deny_rm_and_ask_outside_src() {
    let r = rules(json!({
        "mode": "workspace-write",
        "rules": [
            {"tool": "bash", "command": "rm -rf *", "action": "deny", "reason": "no recursive deletes"},
            {"name": "src-only", "tool": ["write", "edit"], "not_path": "src/**", "action": "ask",
             "reason": "writes outside src/ need approval"},
        ]
    }));
    let (k, why) = eval(&r, "bash", json!({"command": "rm -rf /"}));
    assert_eq!((k.as_str(), why.as_str()), ("deny", "no recursive deletes (rule 1)"));
    assert_eq!(kind(&r, "bash", json!({"command": "  rm   -rf    build "})), "deny");
    assert_eq!(kind(&r, "bash", json!({"command": "cd x && rm -rf ~"})), "deny", "a simple command matches");
    // Not matched by the rule: the preset asks for commands.
    assert_eq!(kind(&r, "bash", json!({"command": "ls -la"})), "ask");

    let (k, why) = eval(&r, "write", json!({"path": "README.md", "content": ""}));
    assert_eq!((k.as_str(), why.as_str()), ("ask", "writes outside src/ need approval (rule 2 \"src-only\")"));
    assert_eq!(kind(&r, "write", json!({"path": "src/lib.rs"})), "allow", "preset: inside the workspace");
    assert_eq!(kind(&r, "edit", json!({"path": format!("{WS}/src/a/b.rs")})), "allow");
    assert_eq!(kind(&r, "write", json!({"path": "src/../README.md"})), "ask", "normalized before matching");
    assert_eq!(kind(&r, "write", json!({"path": "src/../../proj/src/x"})), "allow");
    assert_eq!(kind(&r, "write", json!({"path": "/etc/passwd"})), "ask");
    assert_eq!(kind(&r, "read", json!({"path": "/etc/passwd"})), "allow", "reads are not restricted by the preset");
}

#[test]
fn first_matching_rule_wins() {
    let r = rules(json!({
        "default": "allow",
        "rules": [
            {"tool": "write", "path": "src/generated/**", "action": "deny", "reason": "generated"},
            {"tool": "write", "path": "src/**", "action": "allow"},
            {"tool": "*", "action": "ask"},
        ]
    }));
    assert_eq!(kind(&r, "write", json!({"path": "src/generated/x.rs"})), "deny");
    assert_eq!(kind(&r, "write", json!({"path": "src/x.rs"})), "allow");
    assert_eq!(kind(&r, "write", json!({"path": "x.rs"})), "ask");
    let (d, by) = r.evaluate(&req("list", json!({})));
    assert_eq!((d.kind(), by), ("ask", DecidedBy::Rule("rule 3".into())));
}

#[test]
fn tool_and_plugin_globs() {
    let r = rules(json!({
        "default": "allow",
        "rules": [
            {"tool": "fs_*", "action": "deny"},
            {"tool": ["grep", "gl?b"], "plugin": "other", "action": "deny"},
        ]
    }));
    assert_eq!(kind(&r, "fs_write", json!({})), "deny");
    assert_eq!(kind(&r, "xfs_write", json!({})), "allow");
    assert_eq!(kind(&r, "glob", json!({})), "allow", "plugin `fs` is not `other`");
    let mut q = req("glob", json!({}));
    q.plugin = "other".into();
    assert_eq!(r.evaluate(&q).0.kind(), "deny");
    let (_, why) = eval(&r, "fs_read", json!({}));
    assert_eq!(why, "`fs_read` is denied by rule 1");
}

#[test]
fn restrictive_rules_match_any_value_permissive_rules_every_value() {
    let r = rules(json!({
        "default": "deny",
        "rules": [
            {"tool": "move", "not_path": "**", "action": "ask"},
            {"tool": "move", "path": "src/**", "action": "allow"},
            {"tool": "copy", "path": "src/**", "action": "allow"},
        ]
    }));
    // One of two paths outside the workspace: the ask rule matches.
    assert_eq!(kind(&r, "move", json!({"from": "src/a", "to": "/tmp/a"})), "ask");
    // Both inside src: allowed.
    assert_eq!(kind(&r, "move", json!({"from": "src/a", "to": "src/b"})), "allow");
    // One inside src, one elsewhere in the workspace: the allow rule needs every path.
    assert_eq!(kind(&r, "move", json!({"from": "src/a", "to": "b"})), "deny");
    assert_eq!(kind(&r, "copy", json!({"paths": ["src/a", "src/b"]})), "allow");
    assert_eq!(kind(&r, "copy", json!({"paths": ["src/a", "lib/b"]})), "deny");
    // No path argument at all: path conditions do not match.
    assert_eq!(kind(&r, "copy", json!({})), "deny");
}

#[test]
fn path_and_not_path_combine() {
    let r = rules(json!({
        "default": "allow",
        "rules": [{"tool": "write", "path": "src/**", "not_path": ["src/generated/**", "**/*.lock"],
                   "action": "deny"}]
    }));
    assert_eq!(kind(&r, "write", json!({"path": "src/a.rs"})), "deny");
    assert_eq!(kind(&r, "write", json!({"path": "src/generated/a.rs"})), "allow");
    assert_eq!(kind(&r, "write", json!({"path": "src/Cargo.lock"})), "allow");
    assert_eq!(kind(&r, "write", json!({"path": "lib/a.rs"})), "allow");
}

#[test]
fn without_workspace_relative_paths_are_outside() {
    let r = rules(json!({"mode": "workspace-write"}));
    let mut q = req("write", json!({"path": "a.txt"}));
    q.workspace = None;
    assert_eq!(r.evaluate(&q).0.kind(), "ask");
    let r = rules(json!({"default": "allow", "rules": [{"tool": "write", "not_path": "src/**", "action": "deny"}]}));
    let mut q = req("write", json!({"path": "/abs/src/x"}));
    q.workspace = None;
    assert_eq!(r.evaluate(&q).0.kind(), "deny", "an absolute path is outside a relative pattern");
}

#[test]
fn commands_allow_rules_are_conservative() {
    let r = rules(json!({
        "mode": "workspace-write",
        "rules": [
            {"tool": "bash", "command": ["git status*", "git diff*", "ls*"], "action": "allow"},
        ]
    }));
    assert_eq!(kind(&r, "bash", json!({"command": "git status --short"})), "allow");
    assert_eq!(kind(&r, "bash", json!({"command": "git status && ls"})), "allow", "every segment matches");
    assert_eq!(kind(&r, "bash", json!({"command": "git status; rm -rf /"})), "ask");
    assert_eq!(kind(&r, "bash", json!({"command": "git status $(rm -rf /)"})), "ask");
    assert_eq!(kind(&r, "bash", json!({"command": "ls `rm -rf /`"})), "ask");
    assert_eq!(kind(&r, "bash", json!({"command": "ls > /etc/passwd"})), "ask");
    assert_eq!(kind(&r, "bash", json!({"command": ""})), "ask");
}

#[test]
fn generic_argument_matchers() {
    let r = rules(json!({
        "default": "allow",
        "rules": [
            {"tool": "echo", "args": {"text": "*secret*"}, "action": "deny", "reason": "no secrets"},
            {"tool": "grep", "args": {"case_insensitive": "true", "max_matches": "[0-9][0-9][0-9][0-9]*"},
             "action": "ask"},
        ]
    }));
    assert_eq!(kind(&r, "echo", json!({"text": "my secret key"})), "deny");
    assert_eq!(kind(&r, "echo", json!({"text": "hello"})), "allow");
    assert_eq!(kind(&r, "echo", json!({})), "allow", "a missing argument does not match");
    assert_eq!(kind(&r, "grep", json!({"case_insensitive": true, "max_matches": 5000})), "ask");
    assert_eq!(kind(&r, "grep", json!({"case_insensitive": true, "max_matches": 50})), "allow");
}

#[test]
fn rewrite_sets_and_unsets_top_level_arguments() {
    let r = rules(json!({
        "mode": "full-access",
        "rules": [{"tool": "grep", "action": "rewrite", "set": {"max_matches": 50, "files_only": true},
                   "unset": "glob"}]
    }));
    let (k, args) = eval(&r, "grep", json!({"pattern": "x", "glob": "*.rs", "max_matches": 5000}));
    assert_eq!(k, "rewrite");
    let args: Value = serde_json::from_str(&args).unwrap();
    assert_eq!(args, json!({"pattern": "x", "max_matches": 50, "files_only": true}));
    assert_eq!(kind(&r, "read", json!({"path": "x"})), "allow");
}

#[test]
fn presets() {
    let ro = rules(json!({"mode": "read-only"}));
    for t in ["read", "list", "glob", "grep", "word_count", "regex_search", "echo"] {
        assert_eq!(kind(&ro, t, json!({"path": "/anywhere"})), "allow", "{t}");
    }
    for t in ["write", "edit", "bash", "web_fetch"] {
        let (k, why) = eval(&ro, t, json!({"path": "src/a"}));
        assert_eq!(k, "deny", "{t}");
        assert!(why.starts_with("read-only mode:"), "{why}");
    }
    let ro = rules(json!({"mode": "read-only", "read_only_tools": ["search_*"]}));
    assert_eq!(kind(&ro, "search_code", json!({})), "allow");

    let ww = rules(json!({"mode": "workspace-write"}));
    assert_eq!(kind(&ww, "write", json!({"path": "a/b.txt"})), "allow");
    assert_eq!(kind(&ww, "write", json!({"path": "../other/b.txt"})), "ask");
    assert_eq!(kind(&ww, "write", json!({"path": "/home/u/projx/b.txt"})), "ask", "a sibling is outside");
    assert_eq!(kind(&ww, "bash", json!({"command": "ls"})), "ask");
    assert_eq!(kind(&ww, "python", json!({"script": "print(1)"})), "ask", "command arguments make a command");
    assert_eq!(kind(&ww, "web_fetch", json!({"url": "https://x"})), "ask");
    let (_, why) = eval(&ww, "write", json!({"path": "/etc/hosts"}));
    assert_eq!(why, "workspace-write mode: `write` writes outside the workspace: `/etc/hosts`");

    let fa = rules(json!({"mode": "full-access"}));
    assert_eq!(kind(&fa, "bash", json!({"command": "rm -rf /"})), "allow");

    // Rules layer on top of the preset.
    let fa = rules(json!({"mode": "full-access", "rules": [{"tool": "bash", "action": "deny"}]}));
    assert_eq!(kind(&fa, "bash", json!({"command": "ls"})), "deny");
    assert_eq!(kind(&fa, "write", json!({"path": "/etc/x"})), "allow");
}

#[test]
fn ask_preset_asks_for_everything_that_is_not_a_read() {
    let ask = rules(json!({"mode": "ask", "read_only_tools": ["todo_*"]}));
    for t in ["read", "list", "grep", "todo_write"] {
        assert_eq!(kind(&ask, t, json!({"path": "a"})), "allow", "{t}");
    }
    let (k, why) = eval(&ask, "bash", json!({"command": "ls"}));
    assert_eq!((k.as_str(), why.as_str()), ("ask", "ask mode: `bash` runs commands"));
    let (k, why) = eval(&ask, "write", json!({"path": "inside.txt", "content": "x"}));
    assert_eq!((k.as_str(), why.as_str()), ("ask", "ask mode: `write` may change files"));
    assert_eq!(kind(&ask, "edit", json!({"path": "/etc/hosts"})), "ask");
    assert_eq!(kind(&ask, "web_fetch", json!({"url": "https://x"})), "ask");
    let (_, by) = ask.evaluate(&req("write", json!({"path": "a"})));
    assert_eq!(by, DecidedBy::Mode("ask"));
    // A rule still decides first.
    let ask = rules(json!({"mode": "ask", "rules": [{"tool": "bash", "command": "ls*", "action": "allow"}]}));
    assert_eq!(kind(&ask, "bash", json!({"command": "ls -la"})), "allow");
    assert_eq!(kind(&ask, "bash", json!({"command": "rm x"})), "ask");
}

#[test]
fn auto_preset_runs_sandboxed_tools_and_workspace_writes() {
    let auto = rules(json!({"mode": "auto", "sandboxed_tools": ["bash"]}));
    assert_eq!(kind(&auto, "bash", json!({"command": "cargo test"})), "allow", "sandboxed");
    assert_eq!(kind(&auto, "write", json!({"path": "src/a.rs"})), "allow", "inside the workspace");
    let (k, why) = eval(&auto, "write", json!({"path": "/etc/hosts"}));
    assert_eq!((k.as_str(), why.as_str()), ("ask", "auto mode: `write` writes outside the workspace: `/etc/hosts`"));
    assert_eq!(kind(&auto, "python", json!({"script": "x"})), "ask", "a command tool not listed as sandboxed");
    assert_eq!(kind(&auto, "web_fetch", json!({"url": "https://x"})), "ask");
    // Without `sandboxed_tools` no command runs unasked.
    let auto = rules(json!({"mode": "auto"}));
    assert_eq!(kind(&auto, "bash", json!({"command": "ls"})), "ask");
    assert!(refused(json!({"mode": "auto", "sandboxed_tools": []})).contains("`sandboxed_tools` is an empty list"));
}

#[test]
fn default_action_without_mode() {
    let r = rules(json!({"rules": [{"tool": "read", "action": "allow"}]}));
    let (k, why) = eval(&r, "write", json!({}));
    assert_eq!((k.as_str(), why.as_str()), ("deny", "`write` matches no rule (default: deny)"));
    let r = rules(json!({"default": "ask"}));
    assert_eq!(kind(&r, "write", json!({})), "ask");
    let r = rules(json!({"default": "allow"}));
    assert_eq!(kind(&r, "write", json!({})), "allow");
}

#[test]
fn malformed_configs_are_refused_with_every_problem() {
    let cases = [
        (json!({}), "nothing configured"),
        (json!([]), "must be a table"),
        (json!({"mode": "yolo"}), "`mode` must be"),
        (json!({"mod": "read-only"}), "unknown field `mod`"),
        (json!({"mode": "read-only", "default": "allow"}), "`default` has no effect"),
        (json!({"default": "rewrite"}), "`default` must be one of"),
        (json!({"rules": [{"action": "deny"}]}), "rule 1: `tool` is required"),
        (json!({"rules": [{"tool": "bash"}]}), "rule 1: `action` is required"),
        (json!({"rules": [{"tool": "bash", "action": "block"}]}), "rule 1: `action` must be one of"),
        (json!({"rules": [{"tool": "bash", "action": "deny", "comand": "rm*"}]}), "unknown field `comand`"),
        (json!({"rules": [{"tool": "write, edit", "action": "deny"}]}), "use a list"),
        (json!({"rules": [{"tool": [], "action": "deny"}]}), "empty list"),
        (json!({"rules": [{"tool": "write", "path": "src/**.rs", "action": "deny"}]}), "whole path segment"),
        (json!({"rules": [{"tool": "write", "path": "src/[a", "action": "deny"}]}), "unclosed `[`"),
        (json!({"rules": [{"tool": "write", "not_path": "", "action": "deny"}]}), "empty path pattern"),
        (json!({"rules": [{"tool": "bash", "command": "[z-a]", "action": "deny"}]}), "reversed range"),
        (json!({"rules": [{"tool": "w", "action": "allow", "reason": "x"}]}), "only shown for deny and ask"),
        (json!({"rules": [{"tool": "w", "action": "deny", "set": {"a": 1}}]}), "only for rewrite"),
        (json!({"rules": [{"tool": "w", "action": "rewrite"}]}), "a rewrite needs `set`"),
        (json!({"rules": [{"tool": "w", "action": "rewrite", "set": {"a": 1}, "unset": ["a"]}]}), "both in"),
        (json!({"rules": [{"tool": "w", "action": "deny", "path": 5}]}), "rule 1:"),
        (json!({"rules": ["deny everything"]}), "rule 1: a rule must be a table"),
        (json!({"mode": "read-only", "read_only_tools": ["a b"]}), "`read_only_tools` pattern"),
    ];
    for (cfg, want) in cases {
        let e = refused(cfg.clone());
        assert!(e.contains(want), "{cfg}: expected {want:?} in {e:?}");
    }
    // Every problem is reported, each with its rule.
    let e = refused(json!({"rules": [
        {"tool": "read", "action": "allow"},
        {"tool": "bash", "action": "nope"},
        {"name": "w", "tool": "write", "path": "a/**b", "action": "deny"},
    ]}));
    assert!(e.contains("rule 2: `action`"), "{e}");
    assert!(e.contains("rule 3 \"w\": `path` pattern"), "{e}");
    assert!(!e.contains("rule 1"), "{e}");
}

#[test]
fn invalid_config_fails_closed_and_answers_the_probe() {
    let bad = r#"{"rules": [{"tool": "bash", "action": "nope"}]}"#;
    let good = r#"{"mode": "read-only"}"#;
    let Decision::Deny(why) = decide(bad, &req("read", json!({"path": "a"}))) else { panic!("expected deny") };
    assert!(why.starts_with(&format!("{INVALID}: rule 1: `action`")), "{why}");
    assert!(matches!(decide("not json", &req("read", json!({}))), Decision::Deny(m) if m.starts_with(INVALID)));
    // The probe: an empty tool name.
    let probe = req("", json!({}));
    assert!(matches!(decide(good, &probe), Decision::Allow));
    assert!(matches!(decide(bad, &probe), Decision::Deny(m) if m.starts_with(INVALID)));
    // An empty configuration table (the host sends `{}` or nothing) is refused too.
    assert!(matches!(decide("", &probe), Decision::Deny(_)));
    assert!(matches!(decide(good, &req("read", json!({}))), Decision::Allow));
}

#[test]
fn toml_example_from_the_docs_is_valid() {
    // The crate docs' example, as the host hands it over (TOML → JSON).
    let r = rules(json!({
        "mode": "workspace-write",
        "rules": [
            {"name": "no-recursive-rm", "tool": "bash", "command": "rm -rf *", "action": "deny",
             "reason": "recursive deletes are not allowed"},
            {"tool": ["write", "edit"], "not_path": "src/**", "action": "ask",
             "reason": "writes outside src/ need approval"},
            {"tool": "grep", "action": "rewrite", "set": {"max_matches": 50}, "unset": ["glob"]},
        ]
    }));
    assert_eq!(r.rules.len(), 3);
}
