//! `policy-rules`: a permission policy made of ordered rules over a mode
//! preset, configured in its profile row's `config` table.
//!
//! # Configuration
//!
//! ```toml
//! [[plugin]]
//! id = "rules"
//! path = "${plugin_dir}/policy-rules.wasm"
//! [plugin.config]
//! mode = "ask"                        # read-only | ask | auto | workspace-write | full-access (optional)
//! # default = "deny"                  # allow | deny | ask: only without a `mode` (default "deny")
//! # read_only_tools = ["search_*"]    # added to the built-in read-only tools
//! # command_tools = ["python"]        # added to the built-in command tools
//! # sandboxed_tools = ["bash"]        # command tools `auto` runs without asking (none built in)
//! # path_keys = ["path", "target"]    # replace the built-in path argument names
//! # command_keys = ["command"]        # replace the built-in command argument names
//!
//! [[plugin.config.rules]]
//! name = "no-recursive-rm"             # optional; shown in reasons and errors
//! tool = "bash"                        # required: name, glob ("fs_*") or list; "*" for any tool
//! command = "rm -rf *"                 # glob(s) over the command argument
//! action = "deny"                      # allow | deny | ask | rewrite
//! reason = "recursive deletes are not allowed"   # deny and ask only
//!
//! [[plugin.config.rules]]
//! tool = ["write", "edit"]
//! not_path = "src/**"                  # some path argument outside src/ …
//! action = "ask"
//! reason = "writes outside src/ need approval"
//!
//! [[plugin.config.rules]]
//! tool = "grep"
//! action = "rewrite"
//! set = { max_matches = 50 }           # merged over the arguments (top-level keys)
//! unset = ["glob"]                     # removed from the arguments
//! ```
//!
//! # How a call is decided
//!
//! 1. **Rules, in order: the first rule that matches decides** (later rules
//!    are not looked at, and other policies are composed by the host as
//!    usual: any deny wins, then ask, then rewrites, then allow).
//! 2. No rule matched: the **mode preset** decides.
//!    - `read-only`: read-only tools run; anything else is denied.
//!    - `ask` (the interactive default of Wharf's profiles): read-only
//!      tools run; anything else — commands, writes inside the workspace or
//!      outside, unknown tools — asks.
//!    - `auto`: as `workspace-write`, and the `sandboxed_tools` (tools whose
//!      plugin confines them in the OS sandbox, like Wharf's `bash`) run
//!      without asking.
//!    - `workspace-write`: read-only tools run; a tool with path arguments
//!      runs when every path is inside the workspace and asks otherwise;
//!      command tools ask; any other tool asks.
//!    - `full-access`: everything runs.
//! 3. No mode: the `default` action (`deny` unless set). `default` together
//!    with a `mode` is refused, since the preset already decides every call.
//!
//! A `rewrite` rule allows the call with its `set`/`unset` applied; the
//! rewritten arguments are not matched again (the host re-validates them
//! against the tool's schema). A `reason` is appended with the rule's label,
//! e.g. `recursive deletes are not allowed (rule 1 "no-recursive-rm")`.
//!
//! Built-in read-only tools: `read`, `list`, `glob`, `grep`, `word_count`,
//! `regex_search`, `echo` (Wharf's `fs` and `text`); command tools: `bash`,
//! `shell`, `sh`, `exec`, `run`, `terminal`, and any call with a string
//! `command`, `cmd` or `script` argument. Tool names are trusted as
//! registered (the host keeps them unique).
//!
//! # What a rule matches
//!
//! All conditions present must hold (`tool` is required):
//!
//! - `tool`, `plugin`: globs over the tool name and the providing plugin id.
//! - `path`, `not_path`: path globs over the path arguments (`path_keys`,
//!   top-level, a string or a list of strings). A path *fits* when it matches
//!   some `path` pattern (or there is none) and no `not_path` pattern. Paths
//!   are resolved against the request's `workspace` when relative and
//!   normalized lexically (`.`, `..`), as the tools do; relative patterns are
//!   anchored at the workspace too, so `src/**` is `<workspace>/src/**`, `**`
//!   is "inside the workspace" and `not_path = "**"` is "outside it". `*` and
//!   `?` stay within one segment, a `**` segment matches any number of
//!   segments (`src/**` includes `src`). Symlinks are not followed: the WASI
//!   sandbox of the tool remains the wall.
//! - `command`: globs over the command argument (`command_keys`), with
//!   whitespace runs collapsed; `*` crosses spaces and `/`.
//! - `args`: `{ name = glob(s) }` over any top-level argument (strings as
//!   they are, numbers and booleans as JSON, lists element by element).
//!
//! A call without the argument a condition looks at does not match it.
//! When an argument has several values (several paths, a list), **deny and
//! ask rules match if any value fits; allow and rewrite rules only if every
//! value fits** — a rule can never allow more than it names. Likewise for
//! commands: a deny/ask pattern matches the whole command line or any of its
//! simple commands (split at `;`, `&`, `|`, newlines; quotes are not
//! parsed), while an allow/rewrite pattern must match every simple command
//! and never matches a line with substitutions or redirections (`$(`, `` ` ``,
//! `<`, `>`). Command matching is a guardrail, not a shell parser.
//!
//! # Malformed configuration fails closed
//!
//! The configuration is validated in full (unknown keys, bad globs, missing
//! `tool`/`action`, `reason` on allow, `set` on deny, an empty config …) and
//! every problem is reported with its rule. A plugin instance is fresh for
//! every call, so validation runs on every `evaluate`: an invalid
//! configuration denies every call with `policy-rules config invalid: …`;
//! no rule is ever skipped.
//!
//! To let the host refuse such a configuration at load, the plugin answers a
//! **probe**: a request whose `tool` is empty (never a real tool name) gets
//! `allow` when the configuration is valid and the same `deny` otherwise.
//! [`validate_config`] is the same check for a future `validate-config`
//! export.

mod glob;
mod rules;

use wharf_sdk::prelude::*;

pub use crate::rules::{DecidedBy, MODES, Rules};

/// The prefix of every reason given for an invalid configuration.
pub const INVALID: &str = "policy-rules config invalid";

/// Whether `req` is the host's load-time probe (an empty tool name, which no
/// real call can have).
pub fn is_probe(req: &PolicyRequest) -> bool {
    req.tool.is_empty()
}

/// Validates the plugin's configuration: `Err` with every problem.
pub fn validate_config() -> Result<(), String> {
    Rules::from_json(&wharf_sdk::config::json()).map(|_| ())
}

/// Decides on `req` under the configuration `config` (JSON text): the probe
/// and fail-closed handling around [`Rules::evaluate`].
pub fn decide(config: &str, req: &PolicyRequest) -> Decision {
    let rules = match Rules::from_json(config) {
        Ok(r) => r,
        Err(e) => return Decision::deny(format!("{INVALID}: {e}")),
    };
    if is_probe(req) {
        return Decision::Allow;
    }
    rules.evaluate(req).0
}

struct PolicyRules;

impl PolicyPlugin for PolicyRules {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "policy-rules",
            env!("CARGO_PKG_VERSION"),
            "Permission policy: ordered allow/deny/ask/rewrite rules on tools, paths and commands over a mode preset.",
        )
    }

    fn evaluate(req: PolicyRequest) -> Decision {
        let decision = decide(&wharf_sdk::config::json(), &req);
        if let Decision::Deny(reason) = &decision
            && reason.starts_with(INVALID)
        {
            wharf_sdk::log::error!("{reason}");
        }
        decision
    }

    fn validate_config() -> Result<(), String> {
        validate_config()
    }
}

wharf_sdk::export_policy!(PolicyRules);

#[cfg(test)]
mod tests;
