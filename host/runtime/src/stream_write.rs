//! `wasi:io/streams.[method]output-stream.write` with one copy.
//!
//! wasmtime-wasi's definition takes the bytes as a `Vec<u8>`, which
//! wasmtime lifts out of the guest's memory element by element (a byte loop,
//! ~1 ns a byte: ~2 ms for the 2.5 MiB body of a long session's model
//! request, the largest host cost of such a step). This definition, put in
//! the linker over wasmtime-wasi's (shadowing, as [`crate::fs_guard`]
//! does), takes the guest's list as a [`WasmList<u8>`], borrows it as a
//! slice of the guest's memory (bounds checked when the list was lifted)
//! and copies it with one `memcpy`; the rest — finding the stream, its
//! `check-write` budget, the error mapping — is wasmtime-wasi's own code,
//! called unchanged. What the stream receives is the same bytes.

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource, WasmList};
use wasmtime_wasi::WasiView;
use wasmtime_wasi::p2::DynOutputStream;
use wasmtime_wasi::p2::bindings::io::streams;

use crate::state::HostState;

/// The `wasi:io/streams` instance wasmtime-wasi defines (its WIT package
/// version); guests built against any 0.2.x link to it.
const STREAMS: &str = "wasi:io/streams@0.2.12";

/// The redefined function.
const WRITE: &str = "[method]output-stream.write";

/// Redefines `output-stream.write` (see the module doc). Call after
/// `wasmtime_wasi::p2::add_to_linker_async`.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> anyhow::Result<()> {
    // Prove the function exists (defining it again without shadowing must
    // fail); otherwise a wasmtime-wasi upgrade would leave this definition
    // in an instance nobody links to.
    {
        let mut probe = linker.instance(STREAMS)?;
        if probe.func_wrap(WRITE, write).is_ok() {
            anyhow::bail!("wasmtime-wasi does not define `{STREAMS}`: the stream write needs updating");
        }
    }
    linker.allow_shadowing(true);
    let res = linker.instance(STREAMS).and_then(|mut inst| inst.func_wrap(WRITE, write));
    linker.allow_shadowing(false);
    res?;
    Ok(())
}

fn write(
    mut caller: StoreContextMut<'_, HostState>,
    (stream, bytes): (Resource<DynOutputStream>, WasmList<u8>),
) -> wasmtime::Result<(Result<(), streams::StreamError>,)> {
    // One copy of the guest's bytes (the same `Vec` wasmtime-wasi's own
    // definition would have been given).
    let bytes = bytes.as_le_slice(&caller).to_vec();
    let table = caller.data_mut().ctx().table;
    let res = match streams::HostOutputStream::write(table, stream, bytes) {
        Ok(()) => Ok(()),
        Err(e) => Err(streams::Host::convert_stream_error(table, e)?),
    };
    Ok((res,))
}
