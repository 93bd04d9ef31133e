//! `fs`: file tools confined to the session workspace.
//!
//! | tool | mode | what |
//! |------|------|------|
//! | `read` | parallel | numbered lines (`cat -n`), `offset`/`limit` |
//! | `write` | exclusive | create or replace a file |
//! | `edit` | exclusive | exact string replacement, unique unless `replace_all` |
//! | `list` | parallel | directory entries |
//! | `glob` | parallel | files by glob pattern |
//! | `grep` | parallel | lines matching a regex |
//!
//! Two walls keep it in the workspace: every path is resolved against
//! `call-context.workspace` and lexically normalized, and anything outside is
//! refused (`PERMISSION_DENIED`) before the filesystem is touched; then the
//! WASI sandbox only has the granted directories (and refuses symlinks that
//! lead out).
//!
//! Read-before-edit: `edit`, and `write` over an existing file, fail with
//! `NOT_READ` unless the file was read (or written) in this session, and with
//! `STALE` if it changed since. See [`record`] for how that survives the
//! fresh instance each call gets.

mod args;
mod ops;
mod record;
mod walk;

use wharf_sdk::path::normalize;
use wharf_sdk::prelude::*;

use crate::args::{EditArgs, GlobArgs, GrepArgs, ListArgs, ReadArgs, WriteArgs};
use crate::ops::Cx;
use crate::record::{KvRecords, Records};

struct Fs;

impl ToolPlugin for Fs {
    fn info() -> PluginInfo {
        PluginInfo::new(
            "fs",
            env!("CARGO_PKG_VERSION"),
            "Read, write, edit, list, glob and grep files in the session workspace.",
        )
        .filesystem(FsAccess::ReadWrite)
    }

    fn tools() -> Vec<ToolSpec> {
        vec![
            ToolSpec::new::<ReadArgs>(
                "read",
                "Reads a text file and returns its lines numbered like `cat -n` \
                 (`NUMBER<TAB>line`; the numbers are not part of the file). Returns up to 2000 \
                 lines from `offset` (1-based); a footer tells how to continue. Very long lines \
                 are truncated. You must read a file in this session before `edit`ing or \
                 overwriting it.",
                ToolMode::Parallel,
            ),
            ToolSpec::new::<WriteArgs>(
                "write",
                "Writes a file with the given complete content, creating parent directories. \
                 Overwriting an existing file requires having read it in this session (and it \
                 must not have changed since); prefer `edit` for changes to existing files.",
                ToolMode::Exclusive,
            ),
            ToolSpec::new::<EditArgs>(
                "edit",
                "Replaces an exact string in a file read in this session. `old_string` must \
                 match the file exactly (whitespace and indentation included; do not include \
                 the line-number prefix from `read`) and occur once, unless `replace_all` is \
                 set. Errors: NOT_READ (read it first), STALE (changed since read; read again), \
                 NO_MATCH, NOT_UNIQUE (add surrounding context).",
                ToolMode::Exclusive,
            ),
            ToolSpec::new::<ListArgs>(
                "list",
                "Lists a directory's entries (directories end with `/`, symlinks with `@`), \
                 sorted by name, optionally descending `depth` levels.",
                ToolMode::Parallel,
            ),
            ToolSpec::new::<GlobArgs>(
                "glob",
                "Finds files by glob pattern, e.g. `*.rs` (any depth) or `src/**/test_*.py`. \
                 Returns workspace-relative paths sorted by path. Skips `.git`.",
                ToolMode::Parallel,
            ),
            ToolSpec::new::<GrepArgs>(
                "grep",
                "Searches file contents with a regular expression and returns matching lines \
                 as `path:LINE: text`, or only file paths with `files_only`. Filter files with \
                 `glob`. Skips `.git`, binary files and files over 16 MiB.",
                ToolMode::Parallel,
            ),
        ]
    }

    fn call(name: &str, args: Args, ctx: &CallContext) -> ToolResult {
        let Some(ws) = ctx.workspace.as_deref() else {
            return Err(ToolError::new(
                "NO_WORKSPACE",
                "this session has no workspace directory, so file tools are unavailable",
            ));
        };
        let cx = Cx {
            root: normalize(std::path::Path::new(ws)),
            session: &ctx.session_id,
            records: &KvRecords as &dyn Records,
        };
        dispatch(&cx, name, &args)
    }
}

wharf_sdk::export_tool!(Fs);

fn dispatch(cx: &Cx<'_>, name: &str, args: &Args) -> ToolResult {
    match name {
        "read" => ops::read(cx, args.parse()?),
        "write" => ops::write(cx, args.parse()?),
        "edit" => ops::edit(cx, args.parse()?),
        "list" => ops::list(cx, args.parse()?),
        "glob" => ops::glob(cx, args.parse()?),
        "grep" => ops::grep(cx, args.parse()?),
        other => Err(ToolError::unknown_tool(other)),
    }
}

#[cfg(test)]
mod tests;
