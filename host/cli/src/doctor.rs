//! `wharf doctor`: what this machine and profile can do, without secrets.

use std::process::{Command, ExitCode};

use anyhow::Result;
use wharf_core::plugin::HookPoint;
use wharf_runtime::bindings::exports::wharf::plugin::hooks::Outcome;
use wharf_runtime::registrations::to_wit_point;
use wharf_runtime::{PluginVersion, Runtime, RuntimeOptions};

use wharf_cli_common::HostArgs;
use wharf_cli_common::args::plugin_dir;
use wharf_harness::specs;

fn check(ok: bool) -> &'static str {
    if ok { "ok  " } else { "FAIL" }
}

/// `ok  ` or, for what only some uses need, `warn`.
fn check_or_warn(ok: bool) -> &'static str {
    if ok { "ok  " } else { "warn" }
}

fn tool_version(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or("").to_string())
}

/// The lines printed so far: any `[FAIL]` line makes the exit status 1.
#[derive(Default)]
struct Report {
    failed: bool,
}

impl Report {
    fn line(&mut self, line: impl AsRef<str>) {
        let line = line.as_ref();
        if line.starts_with("[FAIL]") {
            self.failed = true;
        }
        println!("{line}");
    }
}

/// Runs the checks; exit 1 when any line is `[FAIL]` (something the
/// profile needs is broken). What only building plugins needs (cargo, the
/// wasm target) is a `[warn]`.
pub async fn run(args: HostArgs) -> Result<ExitCode> {
    let mut r = Report::default();
    println!("Wharf doctor\n");

    // Toolchain, for building plugins.
    let cargo = tool_version("cargo", &["--version"]);
    r.line(format!(
        "[{}] cargo: {}",
        check_or_warn(cargo.is_some()),
        cargo.as_deref().unwrap_or("not found (needed to build Rust plugins)")
    ));
    let targets = tool_version("rustup", &["target", "list", "--installed"]);
    let wasm = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().any(|l| l.trim() == "wasm32-wasip2"))
        .unwrap_or(false);
    r.line(format!(
        "[{}] wasm32-wasip2 target: {}",
        check_or_warn(wasm),
        if wasm {
            "installed"
        } else if targets.is_some() {
            "missing: rustup target add wasm32-wasip2 (needed to build plugins)"
        } else {
            "rustup not found (needed to build plugins)"
        }
    ));

    // Engine and cache.
    let config = args.load_config();
    let cache_dir = match &config {
        Ok(c) => wharf_cli_common::args::cache_dir(c),
        Err(_) => wharf_cli_common::env::default_cache_dir().unwrap_or_default(),
    };
    let cache_ok = std::fs::create_dir_all(&cache_dir).is_ok() && tempfile_in(&cache_dir).is_ok();
    r.line(format!(
        "[{}] compile cache: {} ({})",
        check(cache_ok),
        cache_dir.display(),
        if cache_ok { "writable" } else { "not writable" }
    ));
    let rt = Runtime::new(RuntimeOptions {
        cache_dir: cache_ok.then_some(cache_dir),
        ..wharf_cli_common::env::runtime_options()
    })?;
    r.line(format!("[ok  ] instance allocator: {}", rt.engine().allocator()));

    // Process sandbox: a failure when a row of the profile runs processes.
    let (level, detail) = wharf_runtime::process::sandbox_level();
    let runs_processes: Vec<&str> = config
        .as_ref()
        .map(|c| c.plugins.iter().filter(|p| p.grant.process).map(|p| p.id.as_str()).collect())
        .unwrap_or_default();
    let sandboxed = !matches!(level, wharf_runtime::process::Level::None);
    let mark = if sandboxed {
        "ok  "
    } else if runs_processes.is_empty() {
        "warn"
    } else {
        "FAIL"
    };
    let needs = if sandboxed || runs_processes.is_empty() {
        String::new()
    } else {
        format!(" (plugin row(s) {} run commands and refuse to without it)", runs_processes.join(", "))
    };
    r.line(format!("[{mark}] process sandbox: {level:?} — {detail}{needs}"));

    // Keys: present or not, never printed; a missing one a plugin row of the
    // profile names in `api_key_env` is a warning naming that row.
    for line in key_lines(config.as_ref().ok(), &args.profile, |k| std::env::var(k).is_ok_and(|v| !v.is_empty())) {
        r.line(line);
    }

    // The profile and its plugins.
    println!("\nplugin dir: {}", plugin_dir().0.display());
    match config {
        Err(e) => {
            r.line(format!("[FAIL] profile `{}`: {}", args.profile, wharf_cli_common::output::error_text(&e)));
        }
        Ok(config) => {
            r.line(format!("[ok  ] profile `{}`: {} plugin(s)", args.profile, config.plugins.len()));
            // MCP servers: how each would be confined (none is started).
            let workspace = args.workspace().unwrap_or_default();
            for line in mcp_lines(&config.mcp, &workspace) {
                r.line(line);
            }
            match specs(&config) {
                Err(e) => {
                    r.line(format!("[FAIL] grants: {e}"));
                }
                Ok(specs) => {
                    let mut offered: Vec<(String, Vec<String>)> = Vec::new();
                    for spec in specs {
                        let rt = rt.clone();
                        let id = spec.id.clone();
                        // A `dev = true` row (`wharf plugin dev`), marked as such.
                        let dev = if spec.grant.dev_source.is_some() { " (dev build)" } else { "" };
                        let res = tokio::task::spawn_blocking(move || rt.load(&spec)).await?;
                        match res {
                            Ok(v) => {
                                let kinds: Vec<String> =
                                    v.kinds.iter().map(|k| format!("{k:?}").to_lowercase()).collect();
                                let denied = if v.effective.denied.is_empty() {
                                    String::new()
                                } else {
                                    format!("; asked for but not granted: {}", v.effective.denied.join(", "))
                                };
                                r.line(format!(
                                    "[ok  ] plugin {id}{dev}: {} {} [{}] {} tool(s), {:?} load {:.1} ms{denied}",
                                    v.info.name,
                                    &v.digest[..12],
                                    kinds.join(","),
                                    v.tools.len(),
                                    v.cache,
                                    v.load_time.as_secs_f64() * 1e3
                                ));
                                if v.hook_subscriptions.iter().any(|(p, _)| *p == HookPoint::SystemPrompt) {
                                    r.line(prompt_preview(&v).await);
                                }
                                offered.push((id, v.tools.iter().map(|t| t.name.clone()).collect()));
                            }
                            Err(e) => {
                                r.line(format!("[FAIL] plugin {id}{dev}: {e}"));
                            }
                        }
                    }
                    for line in tool_name_lines(&config, &offered) {
                        r.line(line);
                    }
                }
            }
        }
    }
    Ok(if r.failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// Tool names two rows offer, decided as the host decides them
/// ([`wharf_harness::tool_precedence`]: the row of the later config
/// layer, else the earlier row): a `[warn]` per shadowed tool naming both
/// rows, which wins and how to change it
/// ([`wharf_harness::shadowing_text`]), and a `[FAIL]` per row all of whose tools are
/// refused (it loads for nothing).
fn tool_name_lines(config: &wharf_config::Config, offered: &[(String, Vec<String>)]) -> Vec<String> {
    let mut refused: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    let mut lines = Vec::new();
    for (tool, winner, id) in wharf_harness::shadowed_tools(config, offered) {
        lines.push(format!("[warn] {}", wharf_harness::shadowing_text(config, &tool, &winner, &id)));
        *refused.entry(id).or_default() += 1;
    }
    for (id, tools) in offered {
        let lost = refused.get(id.as_str()).copied().unwrap_or(0);
        if !tools.is_empty() && lost == tools.len() {
            lines.push(format!(
                "[FAIL] plugin {id}: every tool it offers ({}) is refused: other rows have those names; rename them or drop a row",
                tools.join(", ")
            ));
        }
    }
    lines
}

/// What a `system-prompt` listener adds to an empty prompt in this
/// workspace: the `## ` headings of its text (for `context`, the instruction
/// files it loads), else its size.
async fn prompt_preview(v: &PluginVersion) -> String {
    let payload =
        serde_json::json!({"session_id": "doctor", "turn": 0, "step": 0, "prompt": "", "instructions": ""}).to_string();
    let prompt = match v.call_hook(to_wit_point(HookPoint::SystemPrompt), payload).await {
        Ok(Outcome::Replace(text)) => match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(serde_json::Value::String(s)) => s,
            Ok(v) => v.get("prompt").and_then(serde_json::Value::as_str).unwrap_or_default().to_string(),
            Err(e) => return format!("[warn]   system prompt: the listener answered invalid JSON: {e}"),
        },
        Ok(Outcome::Pass) => return "[ok  ]   system prompt: nothing added here".to_string(),
        Ok(Outcome::Reject(r)) => return format!("[warn]   system prompt: rejected: {r}"),
        Err(e) => return format!("[warn]   system prompt: {e}"),
    };
    let parts: Vec<&str> = prompt.lines().filter_map(|l| l.strip_prefix("## ")).collect();
    if parts.is_empty() {
        format!("[ok  ]   system prompt: adds {} bytes", prompt.trim().len())
    } else {
        format!("[ok  ]   system prompt: adds {}", parts.join(", "))
    }
}

/// Keys every profile may use, reported even when no row names them.
const KNOWN_KEYS: [&str; 2] = ["DEEPSEEK_API_KEY", "OPENAI_API_KEY"];

/// One line per API key: the well-known ones and every `api_key_env` a
/// plugin row names. `[warn]` when a row needs a key that is not set,
/// naming the row and where its `api_key_env` comes from.
fn key_lines(config: Option<&wharf_config::Config>, profile: &str, is_set: impl Fn(&str) -> bool) -> Vec<String> {
    let mut keys: Vec<String> = KNOWN_KEYS.iter().map(|k| k.to_string()).collect();
    let mut users: Vec<(String, String)> = Vec::new();
    for row in config.map(|c| c.plugins.as_slice()).unwrap_or_default() {
        if let Some(k) = row.config.get("api_key_env").and_then(serde_json::Value::as_str) {
            if !keys.iter().any(|x| x == k) {
                keys.push(k.to_string());
            }
            let at = config
                .and_then(|c| c.origin(&format!("plugin.{}.config.api_key_env", row.id)))
                .map(|l| format!(" ({})", l.short()))
                .unwrap_or_default();
            users.push((k.to_string(), format!("plugin row `{}`{at}", row.id)));
        }
    }
    keys.iter()
        .map(|key| {
            let needed: Vec<&str> = users.iter().filter(|(k, _)| k == key).map(|(_, r)| r.as_str()).collect();
            match (is_set(key), needed.is_empty()) {
                (true, _) => format!("[ok  ] {key}: set (not shown)"),
                (false, true) if config.is_some() => {
                    format!("[ok  ] {key}: not set (profile `{profile}` does not use it)")
                }
                (false, true) => format!("[ok  ] {key}: not set"),
                (false, false) => {
                    format!("[warn] {key}: not set, but profile `{profile}` needs it: {}", needed.join(", "))
                }
            }
        })
        .collect()
}

/// One line per `[[mcp]]` row: its transport and confinement.
/// `[FAIL]` when it cannot start as configured, `[warn]` when it runs
/// unconfined.
#[cfg(feature = "mcp")]
fn mcp_lines(rows: &[wharf_config::McpServer], workspace: &std::path::Path) -> Vec<String> {
    rows.iter()
        .map(|row| {
            let (ok, text) = wharf_mcp::config::describe(row, workspace);
            let mark = match (ok, row.unsandboxed && !row.is_http()) {
                (false, _) => "FAIL",
                (true, true) => "warn",
                (true, false) => "ok  ",
            };
            let transport = wharf_mcp::config::Transport::of(row).as_str();
            format!("[{mark}] mcp server `{}` ({transport}): {text}", row.name)
        })
        .collect()
}

/// Without the MCP client, a profile's `[[mcp]]` rows cannot start.
#[cfg(not(feature = "mcp"))]
fn mcp_lines(rows: &[wharf_config::McpServer], _workspace: &std::path::Path) -> Vec<String> {
    rows.iter()
        .map(|row| {
            format!(
                "[FAIL] mcp server `{}`: this wharf was built without the MCP client ({})",
                row.name,
                wharf_harness::FULL_BUILD
            )
        })
        .collect()
}

fn tempfile_in(dir: &std::path::Path) -> std::io::Result<()> {
    let p = dir.join(format!(".doctor-{}", std::process::id()));
    std::fs::write(&p, b"x")?;
    std::fs::remove_file(&p)
}
