//! Loading, layering, provenance and errors, end to end on temp files.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::*;

/// A home, a workspace and a plugin dir in a temp dir.
struct Env {
    _tmp: tempfile::TempDir,
    root: PathBuf,
}

impl Env {
    fn new() -> Self {
        let tmp = tempfile::tempdir().expect("creating a temp dir");
        let root = tmp.path().to_path_buf();
        for d in ["home/.wharf", "ws/.wharf", "plugins"] {
            std::fs::create_dir_all(root.join(d)).expect("creating the test tree");
        }
        Self { _tmp: tmp, root }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.path(rel);
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir).expect("creating the directory");
        }
        std::fs::write(&p, text).expect("writing the file");
        p
    }

    fn opts(&self, profile: &str) -> LoadOptions {
        LoadOptions {
            profile: profile.to_string(),
            workspace: self.path("ws"),
            home: Some(self.path("home")),
            plugin_dir: self.path("plugins"),
            patches: Vec::new(),
            overrides: Vec::new(),
        }
    }

    fn load(&self, opts: &LoadOptions) -> Config {
        load(opts).expect("loading the config")
    }

    fn fail(&self, opts: &LoadOptions) -> ConfigError {
        match load(opts) {
            Ok(c) => panic!("expected an error, got:\n{}", c.dump()),
            Err(e) => e,
        }
    }
}

const BASE: &str = r#"[agent]
max_steps = 10
adapter = "llm"

[[plugin]]
id = "fs"
path = "${plugin_dir}/fs.wasm"
[plugin.config]
root_hint = "."
depth = 2
[plugin.grant]
dirs = ["${workspace}:rw"]
memory_mb = 128

[[plugin]]
id = "llm"
path = "${plugin_dir}/llm.wasm"
warm = true
"#;

fn at(e: &ConfigError) -> (String, Option<u32>, Option<u32>) {
    let l = e.location().unwrap_or_else(|| panic!("no location in {e}"));
    (l.source.clone(), l.line, l.column)
}

#[test]
fn every_shipped_profile_loads_and_validates() -> Result<(), Box<dyn std::error::Error>> {
    let env = Env::new();
    let names: Vec<&str> = shipped_profiles().iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["anthropic", "code", "default", "demo", "demo-deepseek", "guarded", "openai", "polyglot"]);
    for (name, _) in shipped_profiles() {
        let c = env.load(&env.opts(name));
        assert!(!c.plugins.is_empty(), "{name}");
        let adapter = c.agent.adapter.clone().unwrap_or_else(|| panic!("{name}: no adapter"));
        assert!(c.plugin(&adapter).is_some(), "{name}");
        let fs = c.plugin("fs").unwrap_or_else(|| panic!("{name}: no fs"));
        assert_eq!(fs.path, env.path("plugins/fs.wasm"));
        assert_eq!(fs.grant.dirs, [format!("{}:rw", env.path("ws").display())]);
        // Profiles that carry the text tools grant them the workspace read-only.
        if let Some(text) = c.plugin("text") {
            assert_eq!(text.grant.dirs, [format!("{}:ro", env.path("ws").display())], "{name}");
        }
        // Also without a home directory (no user layer, defaults under the workspace).
        let c = env.load(&LoadOptions { home: None, ..env.opts(name) });
        assert_eq!(c.session.dir, env.path("ws/.wharf/sessions"));
        // The dump is TOML.
        toml::from_str::<toml::Table>(&c.dump())
            .map_err(|e| format!("{name}: the dump is not TOML: {e}\n{}", c.dump()))?;
    }
    Ok(())
}

#[test]
fn default_profile_uses_deepseek() {
    let env = Env::new();
    let c = env.load(&env.opts("default"));
    assert_eq!(c.agent.adapter.as_deref(), Some("deepseek"));
    let ds = c.plugin("deepseek").unwrap_or_else(|| panic!("no deepseek"));
    assert_eq!(ds.path, env.path("plugins/llm-deepseek.wasm"));
    // Per-model prices (per 1M tokens) and context windows ride along.
    let flash = &ds.config["prices"]["deepseek-v4-flash"];
    assert_eq!(flash["currency"], "USD");
    assert!(flash["input_cache_hit"].as_f64() < flash["input_cache_miss"].as_f64());
    let mut conn = ds.config.clone();
    if let Some(o) = conn.as_object_mut() {
        o.remove("prices");
    }
    assert_eq!(
        conn,
        json!({"base_url": "https://api.deepseek.com", "model": "deepseek-v4-flash", "api_key_env": "DEEPSEEK_API_KEY"})
    );
    assert_eq!(ds.grant.hosts, ["api.deepseek.com"]);
    assert_eq!(ds.grant.env, ["DEEPSEEK_API_KEY"]);
    assert_eq!(ds.grant.timeout_ms, Some(300_000));
    assert_eq!(ds.grant.sandbox, Sandbox::Required);
    assert_eq!(c.session.dir, env.path("home/.wharf/sessions"));
    assert_eq!(c.engine.cache_dir, env.path("home/.cache/wharf/components"));
    assert!(c.engine.pooling);
    assert_eq!(c.agent.max_steps, DEFAULT_MAX_STEPS);
    assert_eq!(c.agent.ask, AskRule::Deny);
    let demo_ds = env.load(&env.opts("demo-deepseek"));
    assert_eq!(demo_ds.plugin("deepseek").map(|p| &p.grant), Some(&ds.grant));
}

#[test]
fn demo_profile_scripts_list_read_write_then_stop() {
    let env = Env::new();
    let c = env.load(&env.opts("demo"));
    assert_eq!(c.agent.adapter.as_deref(), Some("scripted"));
    let s = c.plugin("scripted").unwrap_or_else(|| panic!("no scripted"));
    assert_eq!(s.path, env.path("plugins/llm-scripted.wasm"));
    let turns = s.config["turns"].as_array().cloned().unwrap_or_default();
    assert_eq!(turns.len(), 4);
    let calls: Vec<_> = turns.iter().map(|t| t["tool_calls"][0].clone()).collect();
    assert_eq!(calls[0], json!({"name": "list", "arguments": {"path": "."}}));
    assert_eq!(calls[1], json!({"name": "read", "arguments": {"path": "README.md"}}));
    assert_eq!(calls[2]["name"], "write");
    assert_eq!(calls[2]["arguments"]["path"], "SUMMARY.md");
    assert!(calls[2]["arguments"]["content"].as_str().is_some_and(|c| c.contains("Summary")));
    for t in &turns[..3] {
        assert_eq!(t["finish"], "tool_calls");
    }
    assert_eq!(turns[3]["finish"], "stop");
    assert!(turns[3]["text"].as_str().is_some_and(|t| !t.is_empty()));
}

#[test]
fn layers_apply_in_order_and_remember_where_values_came_from() {
    let env = Env::new();
    let profile = env.write("profiles/base.toml", BASE);
    env.write("home/.wharf/config.toml", "[agent]\nmax_steps = 20\ntool_pool = 3\n");
    env.write("ws/.wharf/config.toml", "# project\n[agent]\nmax_steps = 30\nask = \"allow\"\n");
    let p1 = env.write("p1.toml", "[agent]\nmax_steps = 40\n");
    let p2 = env.write("p2.toml", "\n\n[agent]\nmax_steps = 50\nsystem_prompt = \"p2\"\n");
    let mut opts = env.opts(profile.to_str().unwrap_or_default());
    opts.patches = vec![p1.clone(), p2.clone()];

    let c = env.load(&opts);
    assert_eq!(c.agent.max_steps, 50);
    assert_eq!(c.agent.tool_pool, 3);
    assert_eq!(c.agent.ask, AskRule::Allow);
    assert_eq!(c.agent.system_prompt, "p2");
    assert_eq!(c.agent.tool_output_limit, DEFAULT_TOOL_OUTPUT_LIMIT);
    let origin = |k: &str| c.origin(k).map(Location::short).unwrap_or_else(|| panic!("no origin for {k}"));
    assert_eq!(origin("agent.max_steps"), format!("{}:4", p2.display()));
    assert_eq!(origin("agent.tool_pool"), "~/.wharf/config.toml:3");
    assert_eq!(origin("agent.ask"), format!("{}:4", env.path("ws/.wharf/config.toml").display()));
    assert_eq!(origin("agent.adapter"), format!("{}:3", profile.display()));
    assert_eq!(origin("agent.tool_output_limit"), "default");
    assert_eq!(origin("plugin.fs.grant.memory_mb"), format!("{}:13", profile.display()));
    assert_eq!(
        c.sources,
        [
            profile.clone(),
            env.path("home/.wharf/config.toml"),
            env.path("ws/.wharf/config.toml"),
            p1.clone(),
            p2.clone()
        ]
    );

    // `-c` comes last and wins over every file.
    opts.overrides = vec!["agent.max_steps=60".into()];
    let c = env.load(&opts);
    assert_eq!(c.agent.max_steps, 60);
    assert_eq!(c.origin("agent.max_steps").map(Location::short).as_deref(), Some("-c agent.max_steps=60"));
    let dump = c.dump();
    assert!(dump.contains("max_steps = 60  # from -c agent.max_steps=60\n"), "{dump}");
    assert!(dump.contains("tool_pool = 3  # from ~/.wharf/config.toml:3\n"), "{dump}");
    assert!(dump.contains("tool_output_limit = 32768  # from default\n"), "{dump}");
    let j = c.dump_json();
    assert_eq!(j["config"]["agent"]["max_steps"], 60);
    assert_eq!(j["provenance"]["agent.tool_pool"], json!({"source": "~/.wharf/config.toml", "line": 3, "column": 13}));
    assert_eq!(j["provenance"]["agent.max_steps"], json!({"source": "-c agent.max_steps=60"}));
}

#[test]
fn plugin_rows_merge_by_id() {
    let env = Env::new();
    let profile = env.write("base.toml", BASE);
    let patch = env.write(
        "patch.toml",
        r#"
[[plugin]]
id = "fs"
[plugin.config]
only = "this"

[[plugin]]
id = "extra"
path = "extra.wasm"

[[plugin]]
id = "llm"
enabled = false

[agent]
adapter = "extra"
"#,
    );
    let mut opts = env.opts(profile.to_str().unwrap_or_default());
    opts.patches = vec![patch.clone()];
    let c = env.load(&opts);

    let ids: Vec<&str> = c.plugins.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, ["fs", "extra"], "llm is dropped, extra appended");
    let fs = c.plugin("fs").unwrap_or_else(|| panic!("no fs"));
    assert_eq!(fs.config, json!({"only": "this"}), "config is replaced wholesale");
    assert_eq!(fs.path, env.path("plugins/fs.wasm"), "path is kept");
    assert_eq!(fs.grant.memory_mb, Some(128), "grant is kept");
    assert_eq!(fs.grant.dirs, [format!("{}:rw", env.path("ws").display())]);
    assert_eq!(c.origin("plugin.fs.config.only").map(Location::short), Some(format!("{}:5", patch.display())));
    assert_eq!(c.origin("plugin.fs.path").map(Location::short), Some(format!("{}:7", profile.display())));
    assert_eq!(c.plugin("extra").map(|p| p.path.clone()), Some(env.path("extra.wasm")), "relative to the patch's dir");
    assert!(!c.dump().contains("llm.wasm"));

    // A later layer can enable the dropped row again, with its earlier keys.
    opts.overrides = vec!["plugin.llm.enabled=true".into()];
    let c = env.load(&opts);
    let llm = c.plugin("llm").unwrap_or_else(|| panic!("llm not back"));
    assert!(llm.warm);
    assert_eq!(llm.path, env.path("plugins/llm.wasm"));

    // A grant in a patch row replaces the whole grant.
    let g = env.write("g.toml", "[[plugin]]\nid = \"fs\"\n[plugin.grant]\nprocess = true\n");
    opts.patches = vec![g];
    opts.overrides.clear();
    let fs = env.load(&opts).plugin("fs").cloned().unwrap_or_else(|| panic!("no fs"));
    assert!(fs.grant.process);
    assert_eq!(fs.grant.memory_mb, None);
    assert!(fs.grant.dirs.is_empty());
    assert_eq!(fs.config, json!({"root_hint": ".", "depth": 2}));
}

#[test]
fn disabling_the_adapter_is_an_error_at_the_adapter() {
    let env = Env::new();
    let profile = env.write("base.toml", BASE);
    let mut opts = env.opts(profile.to_str().unwrap_or_default());
    opts.overrides = vec!["plugin.llm.enabled=false".into()];
    let e = env.fail(&opts);
    assert_eq!(at(&e), (profile.display().to_string(), Some(3), Some(11)));
    assert!(e.to_string().contains("\"llm\", which is disabled"), "{e}");
}

#[test]
fn overrides_set_agent_keys_and_plugin_rows() -> Result<(), Box<dyn std::error::Error>> {
    let env = Env::new();
    let profile = env.write("base.toml", BASE);
    let mut opts = env.opts(profile.to_str().unwrap_or_default());
    opts.overrides = vec![
        "agent.max_steps=5".into(),
        "agent.ask=allow".into(),
        "agent.system_prompt=Be brief. Really = brief.".into(),
        "plugin.fs.grant.memory_mb=512".into(),
        "plugin.fs.grant.hosts=[\"a.example\", \"*.b.example\"]".into(),
        "plugin.fs.config.model=\"x\"".into(),
        "plugin.fs.config.deep.er=true".into(),
        "plugin.llm.grant.dirs=[\"~/data\"]".into(),
    ];
    let c = env.load(&opts);
    assert_eq!(c.agent.max_steps, 5);
    assert_eq!(c.agent.ask, AskRule::Allow);
    assert_eq!(c.agent.system_prompt, "Be brief. Really = brief.");
    let fs = c.plugin("fs").unwrap_or_else(|| panic!("no fs"));
    assert_eq!(fs.grant.memory_mb, Some(512));
    assert_eq!(fs.grant.hosts, ["a.example", "*.b.example"]);
    assert_eq!(fs.grant.dirs.len(), 1, "the rest of the grant is kept");
    assert_eq!(fs.config, json!({"root_hint": ".", "depth": 2, "model": "x", "deep": {"er": true}}));
    assert_eq!(
        c.plugin("llm").map(|p| p.grant.dirs.clone()),
        Some(vec![format!("{}:ro", env.path("home/data").display())])
    );
    let dump = c.dump();
    assert!(dump.contains("memory_mb = 512  # from -c plugin.fs.grant.memory_mb=512\n"), "{dump}");
    assert!(dump.contains("[plugin.config.deep]\ner = true  # from -c plugin.fs.config.deep.er=true\n"), "{dump}");
    toml::from_str::<toml::Table>(&dump).map_err(|e| format!("the dump is not TOML: {e}\n{dump}"))?;

    // Setting a row's top-level key replaces it, as a row would.
    opts.overrides = vec!["plugin.fs.config={ a = 1 }".into()];
    assert_eq!(env.load(&opts).plugin("fs").map(|p| p.config.clone()), Some(json!({"a": 1})));
    Ok(())
}

#[test]
fn bad_overrides_are_errors_naming_the_argument() {
    let env = Env::new();
    let profile = env.write("base.toml", BASE);
    let opts = env.opts(profile.to_str().unwrap_or_default());
    let fail = |arg: &str| env.fail(&LoadOptions { overrides: vec![arg.to_string()], ..opts.clone() });

    let e = fail("agent.max_steps=abc");
    assert_eq!(e.to_string(), "-c agent.max_steps=abc: `max_steps` in [agent] must be an integer, found a string");
    let e = fail("agent.max_steps=0");
    assert!(e.to_string().starts_with("-c agent.max_steps=0: `max_steps` in [agent] must be between 1 and"), "{e}");
    let e = fail("agent.max_stesp=5");
    assert!(
        matches!(&e, ConfigError::UnknownKey { key, table, suggestion: Some(s), .. }
        if key == "max_stesp" && table == "[agent]" && s == "max_steps"),
        "{e}"
    );
    let e = fail("plugin.nope.warm=true");
    assert!(matches!(&e, ConfigError::UnknownPlugin { id, known, .. } if id == "nope" && known == "fs, llm"), "{e}");
    assert_eq!(e.to_string(), "-c plugin.nope.warm=true: no plugin with id `nope` (known: fs, llm)");
    let e = fail("plugin.fs.grant.memroy_mb=1");
    assert!(e.to_string().contains("unknown key `memroy_mb` in [plugin.grant]"), "{e}");
    assert!(matches!(fail("plugin.fs.id=x"), ConfigError::Invalid { .. }));
    assert!(matches!(fail("plugin.fs=1"), ConfigError::Invalid { .. }));
    assert!(matches!(fail("agent.max_steps"), ConfigError::Syntax { .. }));
    assert!(matches!(fail("agent.max_steps.x=1"), ConfigError::Invalid { .. }));
    assert!(matches!(fail("plugin.fs.config.root_hint.x=1"), ConfigError::Invalid { .. }));
    let e = fail("agent={ max_steps = 1, bogus = 2 }");
    assert!(matches!(&e, ConfigError::UnknownKey { key, .. } if key == "bogus"), "{e}");
}

#[test]
fn malformed_toml_names_file_line_and_column() {
    let env = Env::new();
    env.write("home/.wharf/config.toml", "[agent]\nmax_steps = 5\nfoo\n");
    let e = env.fail(&env.opts("default"));
    assert!(matches!(e, ConfigError::Syntax { .. }), "{e}");
    assert_eq!(at(&e), ("~/.wharf/config.toml".to_string(), Some(3), Some(4)));
    assert!(e.to_string().starts_with("~/.wharf/config.toml:3:4: "), "{e}");
    assert!(e.to_string().contains("expected `=`"), "{e}");
}

#[test]
fn unknown_keys_name_the_key_the_table_and_the_place() {
    let env = Env::new();
    let p = env
        .write("x.toml", "[[plugin]]\nid = \"fs\"\npath = \"fs.wasm\"\n[plugin.grant]\ndirs = []\n    memroy_mb = 5\n");
    let e = env.fail(&env.opts(p.to_str().unwrap_or_default()));
    assert_eq!(at(&e), (p.display().to_string(), Some(6), Some(5)));
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!(
            "{}:6:5: unknown key `memroy_mb` in [plugin.grant] (did you mean `memory_mb`?) (expected one of: dirs, hosts, env, process, memory_mb",
            p.display()
        )),
        "{msg}"
    );

    for (text, key, table) in [
        ("[agnet]\n", "agnet", "the top level"),
        ("[agent]\nmodel = \"x\"\n", "model", "[agent]"),
        ("[[plugin]]\nid = \"a\"\npath = \"p\"\nconfg = {}\n", "confg", "[[plugin]]"),
        ("[engine]\npooling = true\ncache = \"x\"\n", "cache", "[engine]"),
    ] {
        env.write("ws/.wharf/config.toml", text);
        let e = env.fail(&env.opts("default"));
        assert!(matches!(&e, ConfigError::UnknownKey { key: k, table: t, .. } if k == key && t == table), "{e}");
        assert_eq!(
            e.location().map(|l| l.source.clone()),
            Some(env.path("ws/.wharf/config.toml").display().to_string())
        );
    }
}

#[test]
fn wrong_types_and_values_are_located() {
    let env = Env::new();
    let cases = [
        ("[agent]\nmax_steps = \"5\"\n", 2, "must be an integer, found a string"),
        ("[agent]\nask = \"maybe\"\n", 2, "must be one of \"deny\", \"allow\""),
        ("[agent]\ntool_pool = 0\n", 2, "between 1 and 1024"),
        ("[[plugin]]\nid = \"Bad Id\"\npath = \"x\"\n", 2, "bad plugin id"),
        ("[[plugin]]\nid = \"a\"\npath = \"\"\n", 3, "must not be empty"),
        ("[[plugin]]\nid = \"a\"\npath = \"x\"\n[plugin.grant]\nenv = [\"A-B\"]\n", 5, "bad environment variable name"),
        ("[[plugin]]\nid = \"a\"\npath = \"x\"\n[plugin.grant]\nhosts = [\"http://x\"]\n", 5, "bad host pattern"),
        ("[[plugin]]\nid = \"a\"\npath = \"x\"\n[plugin.grant]\nsandbox = \"maybe\"\n", 5, "\"required\", \"off\""),
        ("[[plugin]]\nid = \"a\"\npath = \"x\"\n[plugin.grant]\nmemory_mb = 0\n", 5, "between 1 and"),
        ("[[plugin]]\nid = \"a\"\npath = \"x\"\non_invalid_config = \"ignore\"\n", 4, "\"deny\", \"keep\""),
        (
            "[[plugin]]\nid = \"a\"\npath = \"x\"\n\n[[plugin]]\nid = \"a\"\npath = \"y\"\n",
            6,
            "duplicate plugin id `a`",
        ),
        ("[[plugin]]\npath = \"x\"\n", 1, "row has no `id`"),
        ("[[plugin]]\nid = \"new\"\n", 2, "plugin `new` has no `path`"),
        ("[agent]\nadapter = \"ghost\"\n", 2, "\"ghost\", which is not a plugin id"),
        ("plugin = 5\n", 1, "must be an array of tables"),
        ("[session]\ndir = 5\n", 2, "`dir` in [session] must be a string, found an integer"),
    ];
    for (text, line, needle) in cases {
        env.write("ws/.wharf/config.toml", text);
        let e = env.fail(&env.opts("default"));
        assert_eq!(e.location().and_then(|l| l.line), Some(line), "{text}: {e}");
        assert!(e.to_string().contains(needle), "{text}: {e}");
    }
}

#[test]
fn variables_expand_and_unknown_ones_are_errors() -> Result<(), Box<dyn std::error::Error>> {
    let env = Env::new();
    let p = env.write(
        "conf/p.toml",
        r#"[session]
dir = "sessions"
[[plugin]]
id = "a"
path = "${profile_dir}/a.wasm"
[plugin.config]
ws = "${workspace}/x"
lit = "$${workspace} and $HOME"
list = ["${home}", 1]
[plugin.grant]
dirs = ["~/d:rw", "rel", "${workspace}/sub/./x:ro"]
"#,
    );
    let c = env.load(&env.opts(p.to_str().unwrap_or_default()));
    let a = c.plugin("a").unwrap_or_else(|| panic!("no a"));
    assert_eq!(a.path, env.path("conf/a.wasm"));
    assert_eq!(c.session.dir, env.path("conf/sessions"));
    let ws = env.path("ws").display().to_string();
    let home = env.path("home").display().to_string();
    assert_eq!(a.config, json!({"ws": format!("{ws}/x"), "lit": "${workspace} and $HOME", "list": [home, 1]}));
    assert_eq!(
        a.grant.dirs,
        [format!("{home}/d:rw"), format!("{}:ro", env.path("conf/rel").display()), format!("{ws}/sub/x:ro")]
    );

    env.write("ws/.wharf/config.toml", "[agent]\nsystem_prompt = \"hi ${user}\"\n");
    let e = env.fail(&env.opts("default"));
    assert!(matches!(&e, ConfigError::Variable { error: VarError::Unknown(n), .. } if n == "user"), "{e}");
    assert_eq!(at(&e), (env.path("ws/.wharf/config.toml").display().to_string(), Some(2), Some(17)));
    assert!(
        e.to_string()
            .ends_with("unknown variable `${user}` (known: workspace, repo_root, plugin_dir, home, profile_dir)"),
        "{e}"
    );

    // `${profile_dir}` has no value in -c, `${home}` none without a home.
    std::fs::remove_file(env.path("ws/.wharf/config.toml"))
        .map_err(|e| format!("removing ws/.wharf/config.toml: {e}"))?;
    let mut opts = env.opts("default");
    opts.overrides = vec!["plugin.fs.path=${profile_dir}/x.wasm".into()];
    assert!(matches!(env.fail(&opts), ConfigError::Variable { error: VarError::Unset(_), .. }));
    opts.overrides = vec!["plugin.fs.path=~/x.wasm".into()];
    opts.home = None;
    assert!(matches!(env.fail(&opts), ConfigError::Variable { error: VarError::Unset(_), .. }));
    Ok(())
}

#[test]
fn missing_optional_layers_are_skipped_and_required_ones_are_not() -> Result<(), Box<dyn std::error::Error>> {
    let env = Env::new();
    let c = env.load(&env.opts("default"));
    assert!(c.sources.is_empty());
    assert_eq!(c.watch, [env.path("home/.wharf/config.toml"), env.path("ws/.wharf/config.toml")]);

    let mut opts = env.opts("default");
    opts.patches = vec![env.path("missing.toml")];
    let e = env.fail(&opts);
    assert!(matches!(e, ConfigError::Read { .. }), "{e}");
    let e = env.fail(&env.opts("nope.toml"));
    assert!(matches!(e, ConfigError::Read { .. }), "{e}");
    let e = env.fail(&env.opts("nope"));
    assert_eq!(
        e.to_string(),
        "unknown profile `nope` (shipped: anthropic, code, default, demo, demo-deepseek, guarded, openai, polyglot; or give a path to a .toml file)"
    );

    // A present but unreadable optional layer (here: a directory) is an error.
    std::fs::create_dir_all(env.path("home/.wharf/config.toml"))
        .map_err(|e| format!("creating home/.wharf/config.toml: {e}"))?;
    assert!(matches!(env.fail(&env.opts("default")), ConfigError::Read { .. }));
    Ok(())
}

#[test]
fn an_error_in_any_layer_yields_no_config() {
    let env = Env::new();
    let good = env.write("good.toml", "[agent]\nmax_steps = 9\n");
    let bad = env.write("bad.toml", "[agent]\nmax_steps = 9\n[agent]\n");
    let mut opts = env.opts("default");
    opts.patches = vec![good.clone()];
    assert_eq!(env.load(&opts).agent.max_steps, 9);
    for (patches, overrides) in [
        (vec![good.clone(), bad.clone()], vec![]),
        (vec![bad.clone(), good.clone()], vec![]),
        (vec![good.clone()], vec!["agent.tool_pool=x".to_string()]),
    ] {
        let r = load(&LoadOptions { patches, overrides, ..opts.clone() });
        assert!(r.is_err());
    }
    let e = env.fail(&LoadOptions { patches: vec![bad.clone()], ..opts });
    assert_eq!(at(&e), (bad.display().to_string(), Some(3), Some(2)));
}

#[test]
fn dump_marks_every_leaf_and_parses_as_toml() -> Result<(), Box<dyn std::error::Error>> {
    let env = Env::new();
    let mut opts = env.opts("demo");
    opts.overrides = vec!["plugin.scripted.config.model=\"other\"".into()];
    let c = env.load(&opts);
    let dump = c.dump();
    let parsed: toml::Table = toml::from_str(&dump).map_err(|e| format!("the dump is not TOML: {e}\n{dump}"))?;
    // The dump holds the same values as the composed config.
    let as_json = serde_json::to_value(&parsed).unwrap_or_default();
    assert_eq!(as_json, c.dump_json()["config"]);
    assert!(dump.contains("model = \"other\"  # from -c plugin.scripted.config.model=\"other\"\n"), "{dump}");
    assert!(dump.contains("id = \"fs\"  # from shipped:profiles/demo.toml:"), "{dump}");
    assert!(dump.contains("turns = [  # from shipped:profiles/demo.toml:"), "{dump}");
    for line in dump.lines() {
        let leaf = line.contains(" = ") && !line.starts_with("    ");
        assert!(!leaf || line.contains("  # from "), "unmarked leaf: {line}");
    }
    let j = c.dump_json();
    for (key, loc) in c.provenance() {
        assert_eq!(j["provenance"][key]["source"], loc.source.as_str());
    }
    assert!(j["provenance"]["plugin.fs.grant.dirs"]["line"].is_u64());
    Ok(())
}

#[test]
fn profile_dir_and_relative_paths_follow_the_file() {
    let env = Env::new();
    env.write("ws/.wharf/config.toml", "[[plugin]]\nid = \"fs\"\npath = \"${profile_dir}/../my-fs.wasm\"\n");
    let c = env.load(&env.opts("default"));
    assert_eq!(c.plugin("fs").map(|p| p.path.clone()), Some(env.path("ws/.wharf/../my-fs.wasm")));
    let shown: &Path = &env.path("ws/.wharf/config.toml");
    assert_eq!(c.origin("plugin.fs.path").map(|l| l.source.clone()), Some(shown.display().to_string()));
}

const MCP_BASE: &str = r#"[[mcp]]
name = "files"
command = "files-server"
args = ["--root", "${workspace}"]
env = { LOG = "1", TOKEN = "${env:FILES_TOKEN}" }
required = true

[[mcp]]
name = "Search-1"
url = "https://mcp.example.com/mcp"
headers = { Authorization = "Bearer s3cret-literal" }
tool_timeout_ms = 5000
"#;

#[test]
fn mcp_rows_load_merge_by_name_and_can_be_disabled() {
    let env = Env::new();
    let profile = env.write("p/base.toml", MCP_BASE);
    env.write(
        "home/.wharf/config.toml",
        "[[mcp]]\nname = \"files\"\nrequired = false\ncwd = \"sub\"\n\n[[mcp]]\nname = \"extra\"\ncommand = \"x\"\n",
    );
    let mut opts = env.opts(profile.to_str().unwrap_or_default());
    let c = env.load(&opts);
    let names: Vec<&str> = c.mcp.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["files", "Search-1", "extra"]);
    let files = &c.mcp[0];
    assert_eq!(files.command.as_deref(), Some("files-server"));
    assert_eq!(files.args, ["--root".to_string(), env.path("ws").display().to_string()]);
    // `${env:…}` is kept for the host to resolve when the server starts.
    assert_eq!(files.env.get("TOKEN").map(String::as_str), Some("${env:FILES_TOKEN}"));
    assert!(!files.required, "the user layer overrides the key it sets");
    // A relative cwd is relative to the file that set it.
    assert_eq!(files.cwd.as_deref(), Some(env.path("home/.wharf/sub").as_path()));
    assert!(c.mcp[1].is_http());
    assert_eq!(c.mcp[1].tool_timeout_ms, Some(5000));
    assert_eq!(c.origin("mcp.files.required").map(Location::short), Some("~/.wharf/config.toml:3".into()));
    assert_eq!(c.origin("mcp.files.command").map(|l| l.line), Some(Some(3)));

    // A patch disables a server; -c sets a key by name.
    let patch = env.write("patch.toml", "[[mcp]]\nname = \"extra\"\nenabled = false\n");
    opts.patches = vec![patch];
    opts.overrides = vec!["mcp.files.startup_timeout_ms=1500".into()];
    let c = env.load(&opts);
    let names: Vec<&str> = c.mcp.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["files", "Search-1"]);
    assert_eq!(c.mcp[0].startup_timeout_ms, Some(1500));
    let e = env.fail(&LoadOptions { overrides: vec!["mcp.nope.required=true".into()], ..opts.clone() });
    assert_eq!(e.to_string(), "-c mcp.nope.required=true: no MCP server named `nope` (known: files, Search-1, extra)");
}

#[test]
fn mcp_secrets_never_show_in_dumps() -> Result<(), Box<dyn std::error::Error>> {
    let env = Env::new();
    let profile = env.write("base.toml", MCP_BASE);
    let c = env.load(&env.opts(profile.to_str().unwrap_or_default()));
    assert_eq!(c.mcp[1].headers.get("Authorization").map(String::as_str), Some("Bearer s3cret-literal"));
    let dump = c.dump();
    assert!(!dump.contains("s3cret") && !dump.contains("FILES_TOKEN"), "{dump}");
    let file = profile.display();
    assert!(dump.contains(&format!("\n[[mcp]]\nname = \"files\"  # from {file}:2\n")), "{dump}");
    assert!(dump.contains(&format!("[mcp.headers]\nAuthorization = \"<redacted>\"  # from {file}:11\n")), "{dump}");
    assert!(dump.contains("required = false  # from default\n"), "{dump}");
    toml::from_str::<toml::Table>(&dump).map_err(|e| format!("the dump is not TOML: {e}\n{dump}"))?;
    let json = c.dump_json().to_string();
    assert!(!json.contains("s3cret") && !json.contains("FILES_TOKEN"), "{json}");
    assert_eq!(c.dump_json()["config"]["mcp"][0]["env"]["LOG"], "<redacted>");
    assert!(!format!("{:?}", c.mcp).contains("s3cret"));
    Ok(())
}

#[test]
fn bad_mcp_rows_are_located() {
    let env = Env::new();
    let check = |text: &str, line: u32, col: u32, msg: &str| {
        let p = env.write("bad.toml", text);
        let e = env.fail(&env.opts(p.to_str().unwrap_or_default()));
        assert_eq!((at(&e).1, at(&e).2), (Some(line), Some(col)), "{e}");
        assert!(e.to_string().contains(msg), "{e}");
    };
    check("[[mcp]]\nname = \"a b\"\ncommand = \"x\"\n", 2, 8, "bad MCP server name \"a b\"");
    check("[[mcp]]\nname = \"a__b\"\ncommand = \"x\"\n", 2, 8, "without `__`");
    check(
        "[[mcp]]\nname = \"a\"\ncommand = \"x\"\n[[mcp]]\nname = \"a\"\ncommand = \"y\"\n",
        5,
        8,
        "duplicate MCP server name `a`",
    );
    check("[[mcp]]\nname = \"a\"\n", 2, 8, "set `command` (stdio) or `url`");
    check("[[mcp]]\nname = \"a\"\ncommand = \"x\"\nurl = \"http://h/mcp\"\n", 4, 7, "not both");
    check("[[mcp]]\nname = \"a\"\nurl = \"ftp://h\"\n", 3, 7, "must start with http:// or https://");
    check("[[mcp]]\nname = \"a\"\nurl = \"http://h\"\nargs = [\"x\"]\n", 4, 8, "`args` applies to stdio servers");
    check(
        "[[mcp]]\nname = \"a\"\ncommand = \"x\"\nheaders = { A = \"b\" }\n",
        4,
        11,
        "`headers` apply to HTTP servers",
    );
    check("[[mcp]]\nname = \"a\"\ncommand = \"x\"\nenv = { \"A-B\" = \"1\" }\n", 4, 9, "bad key \"A-B\" in [mcp.env]");
    check("[[mcp]]\nname = \"a\"\ncommand = \"x\"\nenv = { A = 1 }\n", 4, 13, "must be a string");
    check("[[mcp]]\nname = \"a\"\ncommand = \"x\"\nrequird = true\n", 4, 1, "unknown key `requird` in [[mcp]]");
    check("[[mcp]]\nname = \"a\"\ncommand = \"x\"\ntool_timeout_ms = 0\n", 4, 19, "between 1 and");
    // `${env:…}` only where secrets go.
    check("[[mcp]]\nname = \"a\"\ncommand = \"${env:X}\"\n", 3, 11, "only allowed in the `env` and `headers`");
}

#[test]
fn row_layer_is_the_layer_that_defined_the_row() {
    let env = Env::new();
    env.write("home/.wharf/config.toml", "[[plugin]]\nid = \"mine\"\npath = \"/m.wasm\"\n");
    // The project changes a profile row (its layer stays the profile's) and adds one.
    env.write(
        "ws/.wharf/config.toml",
        "[[plugin]]\nid = \"text\"\n[plugin.grant]\ndirs = []\n\n[[plugin]]\nid = \"word_count\"\npath = \"/w.wasm\"\n",
    );
    let c = env.load(&env.opts("demo"));
    assert_eq!(c.row_layer("fs"), Some(0));
    assert_eq!(c.row_layer("text"), Some(0));
    assert_eq!(c.row_layer("mine"), Some(1));
    assert_eq!(c.row_layer("word_count"), Some(2));
    assert_eq!(c.row_layer("nope"), None);
}

#[test]
fn on_invalid_config_is_a_row_setting_deny_by_default() {
    let env = Env::new();
    let profile = env.write("base.toml", BASE);
    let mut opts = env.opts(profile.to_str().unwrap_or_default());
    let c = env.load(&opts);
    assert_eq!(c.plugin("fs").map(|p| p.on_invalid_config), Some(OnInvalidConfig::Deny));
    assert!(!c.dump().contains("on_invalid_config"), "the default is not dumped");
    opts.overrides = vec!["plugin.fs.on_invalid_config=keep".into()];
    let c = env.load(&opts);
    assert_eq!(c.plugin("fs").map(|p| p.on_invalid_config), Some(OnInvalidConfig::Keep));
    assert_eq!(c.plugin("llm").map(|p| p.on_invalid_config), Some(OnInvalidConfig::Deny));
}

/// The line of `adapter = "deepseek"` in the shipped default profile.
fn default_adapter_line() -> usize {
    let text = shipped_profiles().iter().find(|(n, _)| *n == "default").map_or("", |(_, t)| *t);
    text.lines().position(|l| l == "adapter = \"deepseek\"").map_or(0, |i| i + 1)
}

/// The file as `extends` shows it: its real path.
fn real(p: &Path) -> String {
    std::fs::canonicalize(p).expect("canonicalizing a test path").display().to_string()
}

#[test]
fn extends_merges_rows_by_id_and_names_the_file_of_each_value() {
    let env = Env::new();
    let base = env.write("profiles/base.toml", BASE);
    let child = env.write(
        "team/child.toml",
        r#"extends = "../profiles/base.toml"

[agent]
max_steps = 20

[[plugin]]
id = "fs"
[plugin.grant]
dirs = ["${profile_dir}:ro"]

[[plugin]]
id = "extra"
path = "extra.wasm"
"#,
    );
    env.write("ws/.wharf/config.toml", "[[plugin]]\nid = \"mine\"\npath = \"mine.wasm\"\n");
    let c = env.load(&env.opts(child.to_str().unwrap_or_default()));

    // Inherited rows keep the base's order; a new id is appended.
    let ids: Vec<&str> = c.plugins.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, ["fs", "llm", "extra", "mine"]);
    assert_eq!(c.agent.max_steps, 20);
    assert_eq!(c.agent.adapter.as_deref(), Some("llm"));
    // A row's key replaces the inherited one whole; the keys it does not set are kept.
    let fs = c.plugin("fs").unwrap_or_else(|| panic!("no fs"));
    assert_eq!(fs.grant.dirs, [format!("{}:ro", env.path("team").display())], "${{profile_dir}} is the child's");
    assert_eq!(fs.grant.memory_mb, None, "grant replaced whole");
    assert_eq!(fs.config, json!({"root_hint": ".", "depth": 2}), "config inherited");
    assert_eq!(fs.path, env.path("plugins/fs.wasm"));
    assert_eq!(c.plugin("extra").map(|p| p.path.clone()), Some(env.path("team/extra.wasm")));

    // Each value names its file; an inherited one also the profile it came through.
    let (base_shown, child_shown) = (real(&base), child.display().to_string());
    let origin = |k: &str| c.origin(k).map(Location::short).unwrap_or_else(|| panic!("no origin for {k}"));
    assert_eq!(origin("agent.max_steps"), format!("{child_shown}:4"));
    assert_eq!(origin("agent.adapter"), format!("{base_shown}:3 (via {child_shown})"));
    assert_eq!(origin("plugin.fs.path"), format!("{base_shown}:7 (via {child_shown})"));
    assert_eq!(origin("plugin.fs.grant.dirs"), format!("{child_shown}:9"));
    let dump = c.dump();
    assert!(dump.contains(&format!("max_steps = 20  # from {child_shown}:4\n")), "{dump}");
    assert!(dump.contains(&format!("warm = true  # from {base_shown}:18 (via {child_shown})\n")), "{dump}");
    let j = c.dump_json();
    assert_eq!(
        j["provenance"]["agent.adapter"],
        json!({"source": base_shown, "line": 3, "column": 11, "via": [child_shown]})
    );
    assert_eq!(j["provenance"]["agent.max_steps"], json!({"source": child_shown, "line": 4, "column": 13}));

    // Both files are read and watched; the chain is one layer for row precedence.
    assert_eq!(c.sources, [PathBuf::from(&base_shown), child.clone(), env.path("ws/.wharf/config.toml")]);
    assert!(c.watch.contains(&PathBuf::from(&base_shown)) && c.watch.contains(&child));
    assert_eq!([c.row_layer("llm"), c.row_layer("extra"), c.row_layer("mine")], [Some(0), Some(0), Some(1)]);
}

#[test]
fn extends_chains_up_to_a_shipped_profile() {
    let env = Env::new();
    let b = env.write("b.toml", "extends = \"default\"\n[agent]\nmax_steps = 7\n");
    let a = env.write("a.toml", "extends = \"./b.toml\"\n[agent]\ntool_pool = 2\n");
    let c = env.load(&env.opts(a.to_str().unwrap_or_default()));
    assert_eq!((c.agent.max_steps, c.agent.tool_pool), (7, 2));
    let default = env.load(&env.opts("default"));
    let ids = |c: &Config| c.plugins.iter().map(|p| p.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&c), ids(&default));
    assert_eq!(c.plugins, default.plugins);
    let (a, b) = (a.display().to_string(), real(&b));
    let origin = |k: &str| c.origin(k).map(Location::short).unwrap_or_else(|| panic!("no origin for {k}"));
    assert_eq!(
        origin("agent.adapter"),
        format!("shipped:profiles/default.toml:{} (via {a} > {b})", default_adapter_line())
    );
    assert_eq!(origin("agent.max_steps"), format!("{b}:3 (via {a})"));
    assert_eq!(origin("agent.tool_pool"), format!("{a}:3"));
    // Shipped profiles are not files: only the two on disk are sources.
    assert_eq!(c.sources, [PathBuf::from(&b), PathBuf::from(&a)]);
}

#[test]
fn an_extends_cycle_is_an_error_naming_the_files() {
    let env = Env::new();
    let a = env.write("a.toml", "extends = \"b.toml\"\n");
    let b = env.write("b.toml", "\nextends = \"a.toml\"\n");
    let e = env.fail(&env.opts(a.to_str().unwrap_or_default()));
    let (a, b) = (a.display().to_string(), real(&b));
    assert!(matches!(e, ConfigError::Invalid { .. }), "{e:?}");
    assert_eq!(at(&e), (b.clone(), Some(2), Some(11)), "at the `extends` that closes the cycle");
    assert!(e.to_string().contains(&format!("`extends` makes a cycle: {a} > {b} > {}", real(Path::new(&a)))), "{e}");

    // A profile extending itself, too.
    let me = env.write("me.toml", "extends = \"me.toml\"\n");
    let e = env.fail(&env.opts(me.to_str().unwrap_or_default()));
    assert!(e.to_string().contains("makes a cycle"), "{e}");
}

#[test]
fn an_extends_chain_deeper_than_the_limit_is_an_error() {
    let env = Env::new();
    // p0 extends p1 … extends pN-1; the last one extends nothing.
    let chain = |n: usize| {
        for i in 0..n {
            let text = if i + 1 < n { format!("extends = \"p{}.toml\"\n", i + 1) } else { String::new() };
            env.write(&format!("c{n}/p{i}.toml"), &format!("{text}[agent]\nmax_steps = {}\n", i + 1));
        }
        env.opts(env.path(&format!("c{n}/p0.toml")).to_str().unwrap_or_default())
    };
    let c = env.load(&chain(MAX_PROFILE_CHAIN));
    assert_eq!(c.agent.max_steps, 1, "the profile asked for wins");
    let e = env.fail(&chain(MAX_PROFILE_CHAIN + 1));
    let msg = e.to_string();
    assert!(msg.contains(&format!("`extends` chains more than {MAX_PROFILE_CHAIN} profiles")), "{msg}");
    assert!(msg.contains("p0.toml > ") && msg.contains(&format!("p{MAX_PROFILE_CHAIN}.toml")), "{msg}");
    assert_eq!(at(&e).1, Some(1));
}

#[test]
fn extends_of_an_unknown_name_lists_the_shipped_profiles() {
    let env = Env::new();
    let p = env.write("p.toml", "# mine\nextends = \"defualt\"\n");
    let e = env.fail(&env.opts(p.to_str().unwrap_or_default()));
    assert_eq!(at(&e), (p.display().to_string(), Some(2), Some(11)));
    let msg = e.to_string();
    assert!(msg.contains("no shipped profile \"defualt\""), "{msg}");
    assert!(msg.contains("shipped: anthropic, code, default, demo, demo-deepseek, guarded, openai, polyglot"), "{msg}");

    // Not a string.
    let p = env.write("q.toml", "extends = 3\n");
    let e = env.fail(&env.opts(p.to_str().unwrap_or_default()));
    assert!(matches!(&e, ConfigError::Type { key, found: "an integer", .. } if key == "extends"), "{e:?}");

    // A missing file.
    let p = env.write("r.toml", "extends = \"gone.toml\"\n");
    let e = env.fail(&env.opts(p.to_str().unwrap_or_default()));
    assert!(matches!(&e, ConfigError::Read { path, .. } if path.ends_with("gone.toml")), "{e:?}");
}

#[test]
fn an_extending_profile_drops_an_inherited_row_with_enabled_false() {
    let env = Env::new();
    let p = env.write(
        "p.toml",
        "extends = \"default\"\n[agent]\nadapter = \"fs\"\n\n[[plugin]]\nid = \"deepseek\"\nenabled = false\n",
    );
    let mut opts = env.opts(p.to_str().unwrap_or_default());
    let c = env.load(&opts);
    assert!(c.plugin("deepseek").is_none());
    assert!(!c.dump().contains("llm-deepseek"));
    // As with layers, a later layer can enable it again, with the keys it inherited.
    opts.overrides = vec!["plugin.deepseek.enabled=true".into()];
    let c = env.load(&opts);
    let ds = c.plugin("deepseek").unwrap_or_else(|| panic!("deepseek not back"));
    assert_eq!(ds.path, env.path("plugins/llm-deepseek.wasm"));
    assert_eq!(ds.grant.hosts, ["api.deepseek.com"]);

    // Dropping the adapter without naming another one is the usual error.
    let p = env.write("q.toml", "extends = \"default\"\n[[plugin]]\nid = \"deepseek\"\nenabled = false\n");
    let e = env.fail(&env.opts(p.to_str().unwrap_or_default()));
    assert!(e.to_string().contains("\"deepseek\", which is disabled"), "{e}");
    let place = format!("shipped:profiles/default.toml:{}:11 (via ", default_adapter_line());
    assert!(e.to_string().contains(&place), "{e}");
}

#[test]
fn extends_is_refused_in_a_config_layer() {
    let env = Env::new();
    env.write("ws/.wharf/config.toml", "extends = \"code\"\n");
    let e = env.fail(&env.opts("default"));
    assert_eq!(at(&e), (env.path("ws/.wharf/config.toml").display().to_string(), Some(1), Some(1)));
    assert!(e.to_string().contains("`extends` belongs in a profile"), "{e}");

    let env = Env::new();
    let patch = env.write("patch.toml", "# a patch\nextends = \"code\"\n[agent]\nmax_steps = 3\n");
    let mut opts = env.opts("default");
    opts.patches = vec![patch.clone()];
    let e = env.fail(&opts);
    assert_eq!(at(&e), (patch.display().to_string(), Some(2), Some(1)));
    assert!(e.to_string().contains("`extends` belongs in a profile"), "{e}");

    opts.patches.clear();
    opts.overrides = vec!["extends=code".into()];
    assert!(matches!(env.fail(&opts), ConfigError::UnknownKey { key, .. } if key == "extends"));
}

#[test]
fn shipped_profiles_that_extend_name_the_base_for_inherited_values() {
    let env = Env::new();
    let default = env.load(&env.opts("default"));
    let code = env.load(&env.opts("code"));
    let origin = |k: &str| code.origin(k).map(Location::short).unwrap_or_else(|| panic!("no origin for {k}"));
    assert!(origin("plugin.fs.path").starts_with("shipped:profiles/default.toml:"), "{}", origin("plugin.fs.path"));
    assert!(origin("plugin.fs.path").ends_with(" (via code)"));
    assert!(origin("plugin.code.path").starts_with("shipped:profiles/code.toml:"));
    assert!(origin("plugin.permissions.config.read_only_tools").starts_with("shipped:profiles/code.toml:"));
    let ro = &code.plugin("permissions").unwrap_or_else(|| panic!("no permissions")).config["read_only_tools"];
    assert!(ro.as_array().is_some_and(|a| a.contains(&json!("run_code"))), "{ro}");

    // Every profile that extends `default` keeps its rows in its order and
    // adds or drops rows only as it says.
    let ids = |c: &Config| c.plugins.iter().map(|p| p.id.clone()).collect::<Vec<_>>();
    let shared = |c: &Config| ids(c).into_iter().filter(|i| default.plugin(i).is_some()).collect::<Vec<_>>();
    for (name, text) in shipped_profiles() {
        if !text.lines().any(|l| l == "extends = \"default\"") {
            continue;
        }
        let c = env.load(&env.opts(name));
        let kept: Vec<String> = ids(&default).into_iter().filter(|i| c.plugin(i).is_some()).collect();
        assert_eq!(shared(&c), kept, "{name}");
    }
    assert_eq!(ids(&code).last().map(String::as_str), Some("code"));
    let anthropic = env.load(&env.opts("anthropic"));
    assert!(anthropic.plugin("deepseek").is_none() && anthropic.plugin("anthropic").is_some());
}
