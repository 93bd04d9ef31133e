//! No silent shadowing at build time: after `wharf plugin build` and each
//! `wharf plugin dev` publish whose tool names changed, the built
//! component's tools are compared with the other rows of the project's
//! profile (`--profile`, `-w`; the layers a host in that workspace reads).
//! A name another row has is reported with the sentence `wharf doctor` and
//! session start print ([`wharf_harness::shadowing_text`]): which row wins,
//! why, and how to change it; for a component that is no row yet,
//! [`wharf_harness::shadowed_by_text`].

use std::path::{Path, PathBuf};

use clap::Args;
use wharf_cli_common::HostArgs;
use wharf_runtime::Runtime;

/// The profile a built component is compared with.
#[derive(Args, Debug, Clone)]
pub struct ProfileFlags {
    /// The profile whose rows the built tools are compared with (a shipped
    /// name or a TOML file).
    #[arg(long = "profile", value_name = "PROFILE", default_value = "default")]
    pub profile: String,
    /// The workspace whose project layer (`.wharf/config.toml`) applies
    /// (default: the current directory).
    #[arg(long = "workspace", short = 'w', value_name = "DIR")]
    pub workspace: Option<PathBuf>,
}

/// Most rows loaded to learn their tool names (a profile with more is
/// compared on its first rows only).
const MAX_ROWS: usize = 64;

/// The shadowing sentences for `tools`, the tools of the component at
/// `built`: one per tool name another row of the profile offers. A profile
/// that does not load, and rows that do not load, say nothing here
/// (`wharf doctor` reports them).
pub fn notices(flags: &ProfileFlags, built: &Path, tools: &[String], rt: &Runtime) -> Vec<String> {
    if tools.is_empty() {
        return Vec::new();
    }
    let args = HostArgs { profile: flags.profile.clone(), workspace: flags.workspace.clone(), ..HostArgs::default() };
    let Ok(config) = args.load_config() else { return Vec::new() };
    let Ok(specs) = wharf_harness::specs(&config) else { return Vec::new() };
    let same = |a: &Path| match (std::fs::canonicalize(a), std::fs::canonicalize(built)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == built,
    };
    let mut own: Option<String> = None;
    let mut offered: Vec<(String, Vec<String>)> = Vec::new();
    for spec in specs.iter().take(MAX_ROWS) {
        if own.is_none() && same(&spec.path) {
            own = Some(spec.id.clone());
            offered.push((spec.id.clone(), tools.to_vec()));
            continue;
        }
        if let Ok(v) = rt.load_for_inspection(spec) {
            offered.push((spec.id.clone(), v.tools.iter().map(|t| t.name.clone()).collect()));
        }
    }
    match own {
        Some(own) => wharf_harness::shadowed_tools(&config, &offered)
            .into_iter()
            .filter(|(_, holder, refused)| *holder == own || *refused == own)
            .map(|(tool, holder, refused)| wharf_harness::shadowing_text(&config, &tool, &holder, &refused))
            .collect(),
        None => tools
            .iter()
            .filter_map(|tool| {
                let holder = wharf_harness::shadowed_tools(&config, &offered)
                    .into_iter()
                    .find(|(t, _, _)| t == tool)
                    .map(|(_, h, _)| h)
                    .or_else(|| offered.iter().find(|(_, ts)| ts.contains(tool)).map(|(id, _)| id.clone()))?;
                Some(wharf_harness::shadowed_by_text(&config, tool, &holder))
            })
            .collect(),
    }
}

/// Prints [`notices`] on stderr, one `wharf: warning: …` line each.
pub fn warn(flags: &ProfileFlags, built: &Path, tools: &[String], rt: &Runtime) {
    for n in notices(flags, built, tools, rt) {
        eprintln!("wharf: warning: {n}");
    }
}
