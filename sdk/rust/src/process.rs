//! Processes run by the host under its OS sandbox. Only plugins granted
//! `process` may use them; everyone else gets [`ProcessError::NotGranted`].
//!
//! ```rust,no_run
//! use wharf_sdk::process::{self, Command};
//! let out = process::run(&Command::new("ls -la").workdir("/work").timeout_ms(5_000));
//! ```

pub use crate::raw::wharf::plugin::process::{
    Command, CommandOutput, JobInfo, ProcessError, SandboxLevel, job_kill, job_list, job_output, run, sandbox, spawn,
};

use crate::raw::wharf::plugin::types::ToolError;

impl Command {
    /// A command line for `/bin/sh -c`.
    pub fn new(command: impl Into<String>) -> Self {
        Self { command: command.into(), workdir: None, timeout_ms: None, stdin: None }
    }

    /// Runs in this directory (inside a granted directory).
    pub fn workdir(mut self, dir: impl Into<String>) -> Self {
        self.workdir = Some(dir.into());
        self
    }

    /// Kills the process group after this many milliseconds.
    pub fn timeout_ms(mut self, ms: u64) -> Self {
        self.timeout_ms = Some(ms);
        self
    }

    /// Bytes for standard input.
    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(bytes.into());
        self
    }
}

impl From<ProcessError> for ToolError {
    fn from(e: ProcessError) -> Self {
        match e {
            ProcessError::NotGranted => ToolError::permission_denied("this plugin was not granted `process`"),
            ProcessError::SandboxUnavailable(m) => {
                ToolError::new("SANDBOX_UNAVAILABLE", format!("process sandbox unavailable: {m}"))
            }
            ProcessError::Invalid(m) => ToolError::invalid_argument(m),
            ProcessError::Failed(m) => ToolError::new("PROCESS_FAILED", m),
        }
    }
}
