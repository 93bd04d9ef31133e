//! `shell`: shell commands through the host's sandboxed `process` capability.
//!
//! - `bash {command, workdir?, timeout_ms?, run_in_background?}`: runs the
//!   command with bash (or `/bin/sh` where bash is missing) and returns its
//!   combined output, exit code, signal and timeout status. A non-zero exit
//!   is a normal result that says so, not a tool error. Large output is
//!   capped (head and tail) and the full output spilled to a file whose path
//!   is in the result.
//! - `job_output {id}`, `job_kill {id}`, `job_list {}`: background jobs
//!   started with `run_in_background`.
//!
//! The plugin asks for `process`, read-write access to the granted
//! directories, every host and env var the operator grants (`*`, passed on to
//! the processes). Without the `process` grant every tool answers
//! `PERMISSION_DENIED`. The sandbox itself is the host's: the `bash`
//! description states its enforcement level on this machine.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use wharf_sdk::prelude::*;
use wharf_sdk::process::{self, Command, CommandOutput, SandboxLevel};

#[derive(Deserialize, JsonSchema)]
struct BashArgs {
    /// The command line. Runs with `bash -c` (or `/bin/sh -c` if bash is not installed); pipes, `&&`,
    /// redirections and multi-line scripts work.
    command: String,
    /// Working directory: absolute, or relative to the session workspace. Default: the workspace.
    /// Must be inside a directory granted to this tool.
    workdir: Option<String>,
    /// Kill the command, and everything it started, after this many milliseconds. The tool call's own time
    /// limit applies as well, whichever is shorter. Ignored for background jobs unless given.
    timeout_ms: Option<u64>,
    /// Start the command as a background job and return its id at once (for servers and watchers). Read its
    /// output with `job_output`, stop it with `job_kill`.
    run_in_background: Option<bool>,
}

#[derive(Deserialize, JsonSchema)]
struct JobArgs {
    /// The job id returned by `bash` with `run_in_background`.
    id: u64,
}

struct Shell;

fn sandbox_text() -> &'static str {
    match process::sandbox() {
        SandboxLevel::Full => {
            "Sandbox: full. The command can write only inside the granted directories and its private $TMPDIR \
             (also $HOME, deleted afterwards), can read the rest of the system except Wharf's own and credential \
             directories, and has no network unless the operator granted hosts. It gets a clean environment \
             (no API keys)."
        }
        SandboxLevel::Partial => {
            "Sandbox: partial. Writes are limited to the granted directories and a private $TMPDIR, but some \
             protections are missing on this machine (see `wharf doctor`). It gets a clean environment."
        }
        SandboxLevel::None => {
            "Sandbox: none. The operator turned the OS sandbox off: the command runs with the user's full \
             permissions. It gets a clean environment."
        }
    }
}

impl ToolPlugin for Shell {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "shell",
            env!("CARGO_PKG_VERSION"),
            "Shell commands and background jobs, run by the host under its OS sandbox.",
        )
        .filesystem(FsAccess::ReadWrite)
        .process(true)
        .hosts(["*"])
        .env(["*"])
    }

    fn tools() -> Vec<ToolSpec> {
        vec![
            ToolSpec::new::<BashArgs>(
                "bash",
                format!(
                    "Runs a shell command and returns its combined stdout and stderr with the exit code. A \
                     non-zero exit code is reported, not treated as an error. Output beyond 32 KiB is cut to its \
                     first and last 16 KiB and the full output is saved to a file whose path is given. The \
                     command and everything it started are killed at the timeout. Commands it leaves running \
                     are killed when it exits: use run_in_background for servers. {}",
                    sandbox_text()
                ),
                ToolMode::Exclusive,
            ),
            ToolSpec::new::<JobArgs>(
                "job_output",
                "Returns the output so far of a background job (first and last 16 KiB, plus the file that has \
                 all of it) and whether it is still running.",
                ToolMode::Parallel,
            ),
            ToolSpec::new::<JobArgs>(
                "job_kill",
                "Kills a background job and everything it started.",
                ToolMode::Parallel,
            ),
            ToolSpec::new::<NoArgs>(
                "job_list",
                "Lists the background jobs: id, state and command.",
                ToolMode::Parallel,
            ),
        ]
    }

    fn call(name: &str, args: Args, ctx: &CallContext) -> ToolResult {
        match name {
            "bash" => bash(args.parse()?, ctx),
            "job_output" => job_output(args.parse()?),
            "job_kill" => job_kill(args.parse()?),
            "job_list" => {
                let _: NoArgs = args.parse()?;
                job_list()
            }
            other => Err(ToolError::unknown_tool(other)),
        }
    }
}

wharf_sdk::export_tool!(Shell);

/// Single-quotes `s` for a POSIX shell.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Runs `command` with bash when the machine has it, else with `sh`.
fn with_bash(command: &str) -> String {
    let q = sh_quote(command);
    format!("if command -v bash >/dev/null 2>&1; then exec bash -c {q}; else exec /bin/sh -c {q}; fi")
}

/// The model's command inside [`with_bash`]'s wrapper (for `job_list`).
fn shown_command(wrapped: &str) -> String {
    let inner = wrapped
        .strip_prefix("if command -v bash >/dev/null 2>&1; then exec bash -c '")
        .and_then(|rest| rest.split_once("'; else exec /bin/sh -c '"))
        .map(|(q, _)| q.replace(r"'\''", "'"));
    inner.unwrap_or_else(|| wrapped.to_string())
}

fn bash(a: BashArgs, ctx: &CallContext) -> ToolResult {
    if a.command.trim().is_empty() {
        return Err(ToolError::invalid_argument("`command` is empty"));
    }
    let workdir = match (&a.workdir, &ctx.workspace) {
        (Some(w), _) => Some(wharf_sdk::path::resolve(ctx.workspace.as_deref(), w)?.display().to_string()),
        (None, Some(ws)) => Some(ws.clone()),
        (None, None) => None,
    };
    let mut cmd = Command::new(with_bash(&a.command));
    if let Some(w) = &workdir {
        cmd = cmd.workdir(w.as_str());
    }
    if let Some(t) = a.timeout_ms {
        cmd = cmd.timeout_ms(t);
    }
    if a.run_in_background.unwrap_or(false) {
        let id = process::spawn(&cmd)?;
        return Ok(ToolOutput::text(format!(
            "Started background job {id}. Its output is saved as it arrives: read it with job_output {{\"id\": {id}}}, \
             stop it with job_kill {{\"id\": {id}}}."
        ))
        .with_details(&json!({"job_id": id, "workdir": workdir})));
    }
    let out = process::run(&cmd)?;
    let status = format!("[{}]", status(&out, a.timeout_ms));
    Ok(ToolOutput::text(render(&out, &status)).with_details(&details(&out, None)))
}

/// How the command ended, e.g. `exit code 2: the command failed`.
fn status(out: &CommandOutput, timeout_ms: Option<u64>) -> String {
    if out.timed_out {
        let after = timeout_ms.map(|t| format!(" after {t} ms")).unwrap_or_default();
        return format!("timed out{after}: the command and everything it started were killed");
    }
    match (out.exit_code, out.signal) {
        (Some(0), _) => "exit code 0".to_string(),
        (Some(c), _) => format!("exit code {c}: the command failed"),
        (None, Some(s)) => format!("killed by signal {s}{}", signal_name(s)),
        (None, None) => "still running".to_string(),
    }
}

fn signal_name(s: i32) -> &'static str {
    match s {
        1 => " (SIGHUP)",
        2 => " (SIGINT)",
        6 => " (SIGABRT)",
        9 => " (SIGKILL)",
        11 => " (SIGSEGV)",
        13 => " (SIGPIPE)",
        15 => " (SIGTERM)",
        24 => " (SIGXCPU: CPU time limit)",
        25 => " (SIGXFSZ: file size limit)",
        _ => "",
    }
}

fn render(out: &CommandOutput, status: &str) -> String {
    let mut text = if out.output.is_empty() { "(no output)".to_string() } else { out.output.clone() };
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(status);
    if let Some(p) = &out.spill_path {
        text.push_str(&format!("\n[{} bytes of output; all of it is in {p}]", out.output_bytes));
    }
    text
}

fn details(out: &CommandOutput, running: Option<bool>) -> serde_json::Value {
    json!({
        "exit_code": out.exit_code,
        "signal": out.signal,
        "timed_out": out.timed_out,
        "output_bytes": out.output_bytes,
        "spill_path": out.spill_path,
        "running": running,
    })
}

fn is_running(id: u64) -> Option<bool> {
    process::job_list().into_iter().find(|j| j.id == id).map(|j| j.running)
}

fn job_output(a: JobArgs) -> ToolResult {
    let out = process::job_output(a.id)?;
    let running = is_running(a.id).unwrap_or(out.exit_code.is_none() && out.signal.is_none());
    let status = if running { "still running".to_string() } else { status(&out, None) };
    let status = format!("[job {}: {status}]", a.id);
    Ok(ToolOutput::text(render(&out, &status)).with_details(&details(&out, Some(running))))
}

fn job_kill(a: JobArgs) -> ToolResult {
    let was_running = is_running(a.id);
    process::job_kill(a.id)?;
    Ok(ToolOutput::text(match was_running {
        Some(false) => format!("Job {} had already finished.", a.id),
        _ => format!("Killed job {} and everything it started.", a.id),
    }))
}

fn job_list() -> ToolResult {
    let jobs = process::job_list();
    if jobs.is_empty() {
        return Ok(ToolOutput::text("No background jobs."));
    }
    let mut text = String::new();
    for j in &jobs {
        let state = match (j.running, j.exit_code) {
            (true, _) => "running".to_string(),
            (false, Some(c)) => format!("exited {c}"),
            (false, None) => "killed".to_string(),
        };
        text.push_str(&format!("{}\t{state}\t{}\n", j.id, shown_command(&j.command)));
    }
    let list: Vec<_> =
        jobs.iter().map(|j| json!({"id": j.id, "running": j.running, "exit_code": j.exit_code})).collect();
    Ok(ToolOutput::text(text).with_details(&json!({"jobs": list})))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
        let w = with_bash("echo 'a'; x");
        assert!(w.contains(r"bash -c 'echo '\''a'\''; x'"), "{w}");
        assert_eq!(shown_command(&w), "echo 'a'; x");
        assert_eq!(shown_command("plain"), "plain");
    }
}
