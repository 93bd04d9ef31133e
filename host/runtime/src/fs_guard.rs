//! Symlinks a component creates must point inside its grant.
//!
//! The sandbox never follows a symlink out of a preopen, but a link a
//! component leaves in a read-write grant persists on the host, where native
//! tools (the shell, the user's editor) do follow it. So the host refuses,
//! with `not-permitted`, every `wasi:filesystem` call that would leave a
//! symlink whose target can resolve outside the directory the link sits in:
//!
//! - `symlink-at` with an absolute target, an empty one, or one with a `..`
//!   component;
//! - `link-at` and `rename-at` of an existing symlink whose target breaks the
//!   same rule (a relative target means something else at the new place).
//!
//! The rule is lexical and about the link's own directory, not the grant
//! root, on purpose: a target without `..` resolves below the link's
//! directory wherever the link or any directory above it is later moved or
//! hard-linked, and through any chain of such links, so no sequence of
//! allowed calls builds an outward link. A target like `../sibling` that
//! would stay inside the grant is refused too — the price of a rule that
//! survives renames. Symlinks that were already in the grant (placed by the
//! user) are the user's own; the host does not rewrite them.
//!
//! The three functions are redefined in the linker (shadowing the
//! wasmtime-wasi definitions) and delegate to them once the check passes.

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemCtxView, WasiFilesystemView};
use wasmtime_wasi::p2::FsResult;
use wasmtime_wasi::p2::bindings::filesystem::types::{
    self as fs, DescriptorType, ErrorCode, HostDescriptor, PathFlags,
};

use crate::state::HostState;

/// The `wasi:filesystem/types` instance wasmtime-wasi defines (its WIT
/// package version); guests built against any 0.2.x link to it.
const TYPES: &str = "wasi:filesystem/types@0.2.12";

/// Why a symlink target is refused, if it is: it must be a non-empty
/// relative path without `..` components.
pub fn symlink_target_refusal(target: &str) -> Option<&'static str> {
    if target.is_empty() {
        Some("the target is empty")
    } else if target.starts_with('/') {
        Some("the target is an absolute path")
    } else if target.split('/').any(|c| c == "..") {
        Some("the target climbs out of the link's directory with `..`")
    } else {
        None
    }
}

/// Redefines `symlink-at`, `link-at` and `rename-at` with the check in front.
/// Call after `wasmtime_wasi::p2::add_to_linker_async`.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> anyhow::Result<()> {
    // Prove the instance and function exist (defining them again without
    // shadowing must fail); otherwise a wasmtime-wasi upgrade would leave the
    // guard in an instance nobody links to.
    {
        let mut probe = linker.instance(TYPES)?;
        if probe.func_wrap_async("[method]descriptor.symlink-at", symlink_at).is_ok() {
            anyhow::bail!("wasmtime-wasi does not define `{TYPES}`: the symlink guard needs updating");
        }
    }
    linker.allow_shadowing(true);
    let res = (|| {
        let mut inst = linker.instance(TYPES)?;
        inst.func_wrap_async("[method]descriptor.symlink-at", symlink_at)?;
        inst.func_wrap_async("[method]descriptor.link-at", link_at)?;
        inst.func_wrap_async("[method]descriptor.rename-at", rename_at)?;
        anyhow::Ok(())
    })();
    linker.allow_shadowing(false);
    res
}

type Out<'a, R> = Box<dyn Future<Output = wasmtime::Result<(Result<R, ErrorCode>,)>> + Send + 'a>;

fn symlink_at(
    mut caller: StoreContextMut<'_, HostState>,
    (fd, target, link): (Resource<Descriptor>, String, String),
) -> Out<'_, ()> {
    Box::new(async move {
        if let Some(why) = symlink_target_refusal(&target) {
            tracing::debug!("refused symlink `{link}` -> `{target}`: {why}");
            return Ok((Err(ErrorCode::NotPermitted),));
        }
        let mut view = caller.data_mut().filesystem();
        let r = HostDescriptor::symlink_at(&mut view, fd, target, link).await;
        Ok((convert(&mut view, r)?,))
    })
}

fn link_at(
    mut caller: StoreContextMut<'_, HostState>,
    (fd, flags, old, new_fd, new): (Resource<Descriptor>, PathFlags, String, Resource<Descriptor>, String),
) -> Out<'_, ()> {
    Box::new(async move {
        let mut view = caller.data_mut().filesystem();
        if moves_outward_link(&mut view, &fd, &old).await {
            return Ok((Err(ErrorCode::NotPermitted),));
        }
        let r = HostDescriptor::link_at(&mut view, fd, flags, old, new_fd, new).await;
        Ok((convert(&mut view, r)?,))
    })
}

fn rename_at(
    mut caller: StoreContextMut<'_, HostState>,
    (fd, old, new_fd, new): (Resource<Descriptor>, String, Resource<Descriptor>, String),
) -> Out<'_, ()> {
    Box::new(async move {
        let mut view = caller.data_mut().filesystem();
        if moves_outward_link(&mut view, &fd, &old).await {
            return Ok((Err(ErrorCode::NotPermitted),));
        }
        let r = HostDescriptor::rename_at(&mut view, fd, old, new_fd, new).await;
        Ok((convert(&mut view, r)?,))
    })
}

/// Whether `path` (under `fd`, not followed) is a symlink whose target the
/// rule refuses. An unreadable link counts as refused; a path that does not
/// exist is left to the real call to report.
async fn moves_outward_link(view: &mut WasiFilesystemCtxView<'_>, fd: &Resource<Descriptor>, path: &str) -> bool {
    let borrow = || Resource::<Descriptor>::new_borrow(fd.rep());
    match HostDescriptor::stat_at(view, borrow(), PathFlags::empty(), path.to_string()).await {
        Ok(st) if st.type_ == DescriptorType::SymbolicLink => {
            match HostDescriptor::readlink_at(view, borrow(), path.to_string()).await {
                Ok(target) => {
                    let why = symlink_target_refusal(&target);
                    if let Some(why) = why {
                        tracing::debug!("refused moving symlink `{path}` -> `{target}`: {why}");
                    }
                    why.is_some()
                }
                Err(_) => true,
            }
        }
        _ => false,
    }
}

fn convert<R>(view: &mut WasiFilesystemCtxView<'_>, r: FsResult<R>) -> wasmtime::Result<Result<R, ErrorCode>> {
    match r {
        Ok(v) => Ok(Ok(v)),
        Err(e) => Ok(Err(fs::Host::convert_error_code(view, e)?)),
    }
}

#[cfg(test)]
mod tests {
    use super::symlink_target_refusal as refusal;

    #[test]
    fn only_relative_downward_targets_pass() {
        for ok in ["a", "a/b", "./a", "a/./b", ".", "a..b", "..a", "a/b.."] {
            assert_eq!(refusal(ok), None, "{ok}");
        }
        for bad in ["", "/etc/passwd", "/", "..", "../x", "a/../b", "a/..", "../../etc/passwd", "a//../../b"] {
            assert!(refusal(bad).is_some(), "{bad}");
        }
    }
}
