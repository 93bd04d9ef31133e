//! The synchronous path of a warm tool call: no fiber, no event loop.
//!
//! With the component model's async ABI on, `call_async` runs every call
//! inside the store's event loop on a fiber (a task, a waitable set, a
//! stack switch in and out). A tool whose imports can neither wait on the
//! outside world nor reach it (only `wasi:cli`, `wasi:io`, `wasi:random`,
//! `wasi:clocks` and the types of `wharf:plugin`: every stream is one of
//! its stdio pipes) is instead instantiated from a linker of synchronous
//! functions and called with wasmtime's synchronous `call`, inline on the
//! calling task.
//!
//! Nothing in such a call may wait: a blocking stream or poll operation is
//! polled once and, if it is not ready, ends the attempt with
//! [`NeedsAsync`]; so does the first epoch tick after the call's first full
//! tick (a guest still running after 10–20 ms). The call's own deadline
//! still ends it as `TIMEOUT` there, and memory, stack and output limits are
//! the store's as on the async path. After [`NeedsAsync`] the call is run
//! again from the start on the async path (a fresh instance, the same
//! deadline), where it yields to the executor every tick: nothing the first
//! attempt did can be seen outside its sandbox, which is dropped, so the
//! retry is the call. The worker thread is held no longer than on the async
//! path between two of its yields.

use std::future::Future;
use std::task::{Context, Poll, Waker};

use wasmtime::component::{Component, ComponentExportIndex, HasData, InstancePre, Linker, Resource, ResourceTable};
use wasmtime_wasi::WasiView;
use wasmtime_wasi::p2::bindings::io as async_io;
use wasmtime_wasi::p2::bindings::sync::io::{poll, streams};
use wasmtime_wasi::p2::{DynPollable, StreamError, StreamResult};

use crate::state::HostState;

/// A synchronous attempt reached something that would wait (a blocking
/// stream or poll operation not ready at once, or a guest running past its
/// first epoch tick): the call is run again on the async path.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the call needs the async path")]
pub(crate) struct NeedsAsync;

/// Whether `err` (out of a synchronous attempt) asks for the async path.
pub(crate) fn needs_async(err: &wasmtime::Error) -> bool {
    err.downcast_ref::<NeedsAsync>().is_some()
}

/// Import interfaces a component may have and still be called on the
/// synchronous path: none reaches outside the sandbox, and none can wait
/// except on its own pipes and clocks (polled once, see the module docs).
const SYNC_IMPORTS: &[&str] = &["wasi:cli/", "wasi:io/", "wasi:random/", "wasi:clocks/", "wharf:plugin/types@"];

/// A tool component's synchronous path: its instance, pre-linked against
/// synchronous functions, and the index of `tool.call`.
pub(crate) struct SyncTool {
    pub(crate) pre: InstancePre<HostState>,
    pub(crate) call: ComponentExportIndex,
}

impl SyncTool {
    /// The synchronous path of `component`, if every import it has is one
    /// of [`SYNC_IMPORTS`] and it exports `tool.call`.
    pub(crate) fn new(linker: &Linker<HostState>, component: &Component) -> Option<Self> {
        let engine = linker.engine();
        let ty = component.component_type();
        if !ty.imports(engine).all(|(name, _)| SYNC_IMPORTS.iter().any(|p| name.starts_with(p))) {
            return None;
        }
        let iface = component.get_export_index(None, "wharf:plugin/tool@0.1.0")?;
        let call = component.get_export_index(Some(&iface), "call")?;
        let pre = linker.instantiate_pre(component).ok()?;
        Some(Self { pre, call })
    }
}

/// The linker of the synchronous path: the WASI interfaces of
/// [`SYNC_IMPORTS`] only (a component importing any other takes the async
/// path, so linking more would only compile more host glue), with every
/// `wasi:io` operation that could wait replaced by one that polls once
/// ([`PollOnce`]), and the (function-less) `wharf:plugin/types`.
pub(crate) fn new_linker(engine: &wasmtime::Engine) -> anyhow::Result<Linker<HostState>> {
    use wasmtime_wasi::cli::{WasiCli, WasiCliView};
    use wasmtime_wasi::clocks::{WasiClocks, WasiClocksView};
    use wasmtime_wasi::p2::bindings::{cli, clocks, random};
    use wasmtime_wasi::random::{WasiRandom, WasiRandomView};
    type H = HostState;

    let mut linker: Linker<HostState> = Linker::new(engine);
    let l = &mut linker;
    // The same instantiations `add_to_linker_async` makes (these interfaces
    // never wait), so they cost no second copy.
    clocks::wall_clock::add_to_linker::<H, WasiClocks>(l, H::clocks)?;
    clocks::monotonic_clock::add_to_linker::<H, WasiClocks>(l, H::clocks)?;
    random::random::add_to_linker::<H, WasiRandom>(l, H::random)?;
    random::insecure::add_to_linker::<H, WasiRandom>(l, H::random)?;
    random::insecure_seed::add_to_linker::<H, WasiRandom>(l, H::random)?;
    cli::exit::add_to_linker::<H, WasiCli>(l, H::cli)?;
    cli::environment::add_to_linker::<H, WasiCli>(l, H::cli)?;
    cli::stdin::add_to_linker::<H, WasiCli>(l, H::cli)?;
    cli::stdout::add_to_linker::<H, WasiCli>(l, H::cli)?;
    cli::stderr::add_to_linker::<H, WasiCli>(l, H::cli)?;
    cli::terminal_input::add_to_linker::<H, WasiCli>(l, H::cli)?;
    cli::terminal_output::add_to_linker::<H, WasiCli>(l, H::cli)?;
    cli::terminal_stdin::add_to_linker::<H, WasiCli>(l, H::cli)?;
    cli::terminal_stdout::add_to_linker::<H, WasiCli>(l, H::cli)?;
    cli::terminal_stderr::add_to_linker::<H, WasiCli>(l, H::cli)?;
    async_io::error::add_to_linker::<H, ErrorTable>(l, |s| s.ctx().table)?;
    poll::add_to_linker::<H, PollOnceIo>(l, |s| PollOnce(s.ctx().table))?;
    streams::add_to_linker::<H, PollOnceIo>(l, |s| PollOnce(s.ctx().table))?;
    crate::bindings::wharf::plugin::types::add_to_linker::<HostState, wasmtime::component::HasSelf<HostState>>(
        &mut linker,
        |s| s,
    )?;
    Ok(linker)
}

/// `f`'s result if it is ready at its first poll.
fn once<F: Future>(f: F) -> Option<F::Output> {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

fn once_stream<T>(f: impl Future<Output = StreamResult<T>>) -> StreamResult<T> {
    once(f).unwrap_or_else(|| Err(StreamError::Trap(NeedsAsync.into())))
}

fn once_result<T>(f: impl Future<Output = wasmtime::Result<T>>) -> wasmtime::Result<T> {
    once(f).unwrap_or_else(|| Err(NeedsAsync.into()))
}

/// The store's resource table, for `wasi:io` operations that must not wait.
pub(crate) struct PollOnce<'a>(&'a mut ResourceTable);

struct PollOnceIo;

/// `wasi:io/error` on the store's table (it has no blocking operation).
struct ErrorTable;

impl HasData for ErrorTable {
    type Data<'a> = &'a mut ResourceTable;
}

impl HasData for PollOnceIo {
    type Data<'a> = PollOnce<'a>;
}

impl poll::Host for PollOnce<'_> {
    fn poll(&mut self, pollables: Vec<Resource<DynPollable>>) -> wasmtime::Result<Vec<u32>> {
        once_result(async_io::poll::Host::poll(&mut *self.0, pollables))
    }
}

impl poll::HostPollable for PollOnce<'_> {
    fn ready(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<bool> {
        once_result(async_io::poll::HostPollable::ready(&mut *self.0, pollable))
    }

    fn block(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<()> {
        once_result(async_io::poll::HostPollable::block(&mut *self.0, pollable))
    }

    fn drop(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<()> {
        async_io::poll::HostPollable::drop(&mut *self.0, pollable)
    }
}

impl streams::Host for PollOnce<'_> {
    fn convert_stream_error(&mut self, err: StreamError) -> wasmtime::Result<streams::StreamError> {
        streams::Host::convert_stream_error(&mut *self.0, err)
    }
}

impl streams::HostOutputStream for PollOnce<'_> {
    fn drop(&mut self, stream: Resource<streams::OutputStream>) -> wasmtime::Result<()> {
        once_result(async_io::streams::HostOutputStream::drop(&mut *self.0, stream))
    }

    fn check_write(&mut self, stream: Resource<streams::OutputStream>) -> StreamResult<u64> {
        streams::HostOutputStream::check_write(&mut *self.0, stream)
    }

    fn write(&mut self, stream: Resource<streams::OutputStream>, bytes: Vec<u8>) -> StreamResult<()> {
        streams::HostOutputStream::write(&mut *self.0, stream, bytes)
    }

    fn blocking_write_and_flush(
        &mut self,
        stream: Resource<streams::OutputStream>,
        bytes: Vec<u8>,
    ) -> StreamResult<()> {
        once_stream(async_io::streams::HostOutputStream::blocking_write_and_flush(&mut *self.0, stream, bytes))
    }

    fn blocking_write_zeroes_and_flush(
        &mut self,
        stream: Resource<streams::OutputStream>,
        len: u64,
    ) -> StreamResult<()> {
        once_stream(async_io::streams::HostOutputStream::blocking_write_zeroes_and_flush(&mut *self.0, stream, len))
    }

    fn subscribe(&mut self, stream: Resource<streams::OutputStream>) -> wasmtime::Result<Resource<DynPollable>> {
        streams::HostOutputStream::subscribe(&mut *self.0, stream)
    }

    fn write_zeroes(&mut self, stream: Resource<streams::OutputStream>, len: u64) -> StreamResult<()> {
        streams::HostOutputStream::write_zeroes(&mut *self.0, stream, len)
    }

    fn flush(&mut self, stream: Resource<streams::OutputStream>) -> StreamResult<()> {
        streams::HostOutputStream::flush(&mut *self.0, stream)
    }

    fn blocking_flush(&mut self, stream: Resource<streams::OutputStream>) -> StreamResult<()> {
        once_stream(async_io::streams::HostOutputStream::blocking_flush(&mut *self.0, stream))
    }

    fn splice(
        &mut self,
        dst: Resource<streams::OutputStream>,
        src: Resource<streams::InputStream>,
        len: u64,
    ) -> StreamResult<u64> {
        streams::HostOutputStream::splice(&mut *self.0, dst, src, len)
    }

    fn blocking_splice(
        &mut self,
        dst: Resource<streams::OutputStream>,
        src: Resource<streams::InputStream>,
        len: u64,
    ) -> StreamResult<u64> {
        once_stream(async_io::streams::HostOutputStream::blocking_splice(&mut *self.0, dst, src, len))
    }
}

impl streams::HostInputStream for PollOnce<'_> {
    fn drop(&mut self, stream: Resource<streams::InputStream>) -> wasmtime::Result<()> {
        once_result(async_io::streams::HostInputStream::drop(&mut *self.0, stream))
    }

    fn read(&mut self, stream: Resource<streams::InputStream>, len: u64) -> StreamResult<Vec<u8>> {
        streams::HostInputStream::read(&mut *self.0, stream, len)
    }

    fn blocking_read(&mut self, stream: Resource<streams::InputStream>, len: u64) -> StreamResult<Vec<u8>> {
        once_stream(async_io::streams::HostInputStream::blocking_read(&mut *self.0, stream, len))
    }

    fn skip(&mut self, stream: Resource<streams::InputStream>, len: u64) -> StreamResult<u64> {
        streams::HostInputStream::skip(&mut *self.0, stream, len)
    }

    fn blocking_skip(&mut self, stream: Resource<streams::InputStream>, len: u64) -> StreamResult<u64> {
        once_stream(async_io::streams::HostInputStream::blocking_skip(&mut *self.0, stream, len))
    }

    fn subscribe(&mut self, stream: Resource<streams::InputStream>) -> wasmtime::Result<Resource<DynPollable>> {
        streams::HostInputStream::subscribe(&mut *self.0, stream)
    }
}
