//! Calls of a generic component's `async` functions and of functions whose
//! result arrives later (the component model's async ABI, WASI 0.3): a
//! `stream<u8>`, `stream<string>` or `stream<list<u8>>` result is read
//! while the call runs, each delta reported as the call's progress
//! ([`wharf_core::plugin::SessionServices::tool_progress`]) and the whole
//! text, bounded by the output cap, is the tool's output; a `future<T>`
//! result is awaited and converted like a returned value.
//!
//! The call runs in the same sandbox as every other call (a fresh store
//! and instance, the row's grants, memory limit, epoch deadline and
//! hostcall fuel), inside wasmtime's event loop for the store
//! ([`wasmtime::Store::run_concurrent`]); the call's wall-clock deadline
//! drops the whole loop, so an endless stream ends at the deadline with
//! what it had streamed.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use wasmtime::StoreContextMut;
use wasmtime::component::{
    Accessor, Func, FutureAny, FutureConsumer, Lift, Source, StreamAny, StreamConsumer, StreamResult, Val,
};
use wharf_core::plugin::{ToolErrorCode, ToolOutcome};

use super::generic::{Delivery, GenericFunction, StreamItem};
use super::{CallContext, CallError, PluginVersion, classify_error};
use crate::state::HostState;
use crate::wit_json::WitType;

/// Most items one read takes from a `stream<u8>` (bytes).
const BYTES_PER_READ: usize = 64 << 10;
/// Most items one read takes from a stream of strings or byte lists (each
/// item's bytes are bounded by the store's hostcall fuel).
const PIECES_PER_READ: usize = 64;

/// What an item of a stream adds to the output.
trait Piece: Lift + Send + Sync + 'static {
    /// Most items one read takes.
    const PER_READ: usize;
    /// The item's bytes.
    fn bytes(&self) -> &[u8];
}

impl Piece for u8 {
    const PER_READ: usize = BYTES_PER_READ;
    fn bytes(&self) -> &[u8] {
        std::slice::from_ref(self)
    }
}

impl Piece for String {
    const PER_READ: usize = PIECES_PER_READ;
    fn bytes(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl Piece for Vec<u8> {
    const PER_READ: usize = PIECES_PER_READ;
    fn bytes(&self) -> &[u8] {
        self
    }
}

/// The host's read end of a stream: hands each write to the call's loop and
/// closes the stream once more than `left` bytes came.
struct Pump<T> {
    tx: tokio::sync::mpsc::UnboundedSender<Vec<T>>,
    left: usize,
}

impl<D, T: Piece> StreamConsumer<D> for Pump<T> {
    type Item = T;

    fn poll_consume(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        mut store: StoreContextMut<D>,
        mut source: Source<'_, T>,
        finish: bool,
    ) -> Poll<wasmtime::Result<StreamResult>> {
        let this = self.get_mut();
        if this.left == 0 || this.tx.is_closed() {
            return Poll::Ready(Ok(StreamResult::Dropped));
        }
        let n = source.remaining(&mut store);
        if n == 0 {
            // A zero-length write asks whether the reader is ready: it is.
            return Poll::Ready(Ok(if finish { StreamResult::Cancelled } else { StreamResult::Completed }));
        }
        let mut buf: Vec<T> = Vec::with_capacity(n.min(T::PER_READ));
        source.read(&mut store, &mut buf)?;
        let size: usize = buf.iter().map(|p| p.bytes().len()).sum();
        this.left = this.left.saturating_sub(size);
        let _ = this.tx.send(buf);
        Poll::Ready(Ok(if this.left == 0 { StreamResult::Dropped } else { StreamResult::Completed }))
    }
}

/// The host's read end of a future: its one value, through a channel.
struct Once<T> {
    tx: Option<tokio::sync::oneshot::Sender<T>>,
}

impl<D, T: Lift + Send + Sync + 'static> FutureConsumer<D> for Once<T> {
    type Item = T;

    fn poll_consume(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        store: StoreContextMut<D>,
        mut source: Source<'_, T>,
        _finish: bool,
    ) -> Poll<wasmtime::Result<()>> {
        let mut slot: Option<T> = None;
        source.read(store, &mut slot)?;
        if let (Some(v), Some(tx)) = (slot, self.get_mut().tx.take()) {
            let _ = tx.send(v);
        }
        Poll::Ready(Ok(()))
    }
}

/// A stream's output so far: text decoded incrementally (a character split
/// across writes waits for its rest; invalid bytes become U+FFFD), at most
/// `cap` bytes of it, cut on a character boundary.
#[derive(Debug, Default)]
pub(super) struct Collected {
    text: String,
    /// Bytes of an unfinished character.
    pending: Vec<u8>,
    cap: usize,
    /// More came than `cap` allows.
    cut: bool,
}

impl Collected {
    fn new(cap: usize) -> Self {
        Self { cap, ..Self::default() }
    }

    /// Takes `bytes` in; returns the text they added.
    fn push(&mut self, bytes: &[u8]) -> String {
        if self.cut {
            return String::new();
        }
        self.pending.extend_from_slice(bytes);
        let mut delta = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    delta.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    // `valid` is UTF-8 up to here by construction.
                    delta.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        Some(n) => {
                            delta.push('\u{FFFD}');
                            rest = after.get(n..).unwrap_or_default();
                        }
                        None => {
                            rest = after;
                            break;
                        }
                    }
                }
            }
        }
        self.pending = rest.to_vec();
        self.accept(delta)
    }

    /// Adds `delta` within the cap; returns what was added.
    fn accept(&mut self, mut delta: String) -> String {
        let room = self.cap.saturating_sub(self.text.len());
        if delta.len() > room {
            wharf_core::util::truncate_str(&mut delta, room);
            self.cut = true;
        }
        self.text.push_str(&delta);
        delta
    }

    /// The end of the stream: an unfinished character is U+FFFD.
    fn finish(&mut self) -> String {
        if self.pending.is_empty() {
            return String::new();
        }
        self.pending.clear();
        self.accept("\u{FFFD}".to_string())
    }

    /// The output: the text, and a last line saying where it was cut.
    fn output(&self, note: Option<&str>) -> String {
        let mut out = self.text.clone();
        let mut notes = Vec::new();
        if self.cut {
            notes.push(format!("output cut at {} bytes (the row's output limit); the stream was closed", self.cap));
        }
        if let Some(n) = note {
            notes.push(n.to_string());
        }
        if !notes.is_empty() {
            if !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(&format!("[{}]", notes.join("; ")));
        }
        out
    }
}

/// Reads stream `s` of `T` to its end (or the cap), reporting each delta.
async fn pump<T: Piece>(
    acc: &Accessor<HostState>,
    s: StreamAny,
    collected: &Mutex<Collected>,
    ctx: &CallContext,
) -> wasmtime::Result<()> {
    let reader = s.try_into_stream_reader::<T>()?;
    let cap = collected.lock().unwrap_or_else(PoisonError::into_inner).cap;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Vec<T>>();
    acc.with(|mut a| reader.pipe(&mut a, Pump { tx, left: cap.saturating_add(1) }))?;
    let mut progress = true;
    while let Some(first) = rx.recv().await {
        // Writes that came meanwhile go out as one delta.
        let mut batches = vec![first];
        while let Ok(more) = rx.try_recv() {
            batches.push(more);
        }
        let delta = {
            let mut c = collected.lock().unwrap_or_else(PoisonError::into_inner);
            let mut delta = String::new();
            for piece in batches.iter().flatten() {
                delta.push_str(&c.push(piece.bytes()));
            }
            delta
        };
        if progress && let Some(s) = &ctx.services {
            // Past the session's progress bounds the rest only reaches the
            // result; a call outside a session has nowhere to report.
            progress = s.tool_progress(&delta).unwrap_or(false);
        }
    }
    let tail = collected.lock().unwrap_or_else(PoisonError::into_inner).finish();
    if progress && let Some(s) = &ctx.services {
        let _ = s.tool_progress(&tail);
    }
    Ok(())
}

/// Awaits future `f` of a `T` the host reads directly.
async fn take<T: Lift + Send + Sync + 'static>(acc: &Accessor<HostState>, f: FutureAny) -> wasmtime::Result<T> {
    let reader = f.try_into_future_reader::<T>()?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    acc.with(|mut a| reader.pipe(&mut a, Once { tx: Some(tx) }))?;
    rx.await.map_err(|_| wasmtime::format_err!("the component dropped its future without writing a value"))
}

/// Whether a future of `payload` can be awaited ([`await_future`]'s types).
pub(super) fn awaitable(payload: Option<&WitType>) -> bool {
    use WitType as W;
    match payload {
        None => true,
        Some(t) => match t {
            W::Bool
            | W::U8
            | W::S8
            | W::U16
            | W::S16
            | W::U32
            | W::S32
            | W::U64
            | W::S64
            | W::F32
            | W::F64
            | W::Char
            | W::String => true,
            W::List(i) => **i == W::U8,
            W::Result(Some(o), Some(e)) => **o == W::String && **e == W::String,
            _ => false,
        },
    }
}

/// The value of future `f` whose payload is `payload` (one of
/// [`awaitable`]'s types), as a [`Val`]; `None` for a `future` without one.
async fn await_future(
    acc: &Accessor<HostState>,
    f: FutureAny,
    payload: Option<&WitType>,
) -> wasmtime::Result<Option<Val>> {
    use WitType as W;
    let Some(t) = payload else {
        take::<()>(acc, f).await?;
        return Ok(None);
    };
    Ok(Some(match t {
        W::Bool => Val::Bool(take(acc, f).await?),
        W::U8 => Val::U8(take(acc, f).await?),
        W::S8 => Val::S8(take(acc, f).await?),
        W::U16 => Val::U16(take(acc, f).await?),
        W::S16 => Val::S16(take(acc, f).await?),
        W::U32 => Val::U32(take(acc, f).await?),
        W::S32 => Val::S32(take(acc, f).await?),
        W::U64 => Val::U64(take(acc, f).await?),
        W::S64 => Val::S64(take(acc, f).await?),
        W::F32 => Val::Float32(take(acc, f).await?),
        W::F64 => Val::Float64(take(acc, f).await?),
        W::Char => Val::Char(take(acc, f).await?),
        W::String => Val::String(take(acc, f).await?),
        W::List(_) => Val::List(take::<Vec<u8>>(acc, f).await?.into_iter().map(Val::U8).collect()),
        W::Result(..) => Val::Result(match take::<Result<String, String>>(acc, f).await? {
            Ok(s) => Ok(Some(Box::new(Val::String(s)))),
            Err(e) => Err(Some(Box::new(Val::String(e)))),
        }),
        other => wasmtime::bail!("a future of `{}` cannot be awaited", other.wit()),
    }))
}

/// What a concurrent call gave.
enum Delivered {
    /// A value (returned, or a future's), converted like a plain call's.
    Value(Option<Val>),
    /// A stream, read to its end into the collected text.
    Streamed,
}

impl PluginVersion {
    /// Calls `f` (an `async` function, or one returning a stream or future)
    /// with `params` in a fresh sandbox, inside the store's event loop.
    pub(super) async fn call_generic_concurrent(
        &self,
        f: &GenericFunction,
        params: Vec<Val>,
        ctx: &CallContext,
    ) -> Result<ToolOutcome, CallError> {
        let index = f.index();
        let display = f.display.clone();
        let delivery = f.delivery;
        let payload = f.result.clone();
        let slots = usize::from(f.result.is_some() || delivery != Delivery::Value);
        let collected = Arc::new(Mutex::new(Collected::new(self.effective.output_limit_bytes)));
        let timeout = self.effective.timeout_ms;
        let res = sandboxed!(self, self.effective.clone(), timeout, self.call_fuel(), |store, inst| {
            {
                store.data_mut().services = ctx.services.clone();
                let func: Func = inst
                    .get_func(&mut store, index)
                    .ok_or_else(|| wasmtime::format_err!("the component has no function `{display}`"))?;
                let collected = &collected;
                let params = &params;
                let payload = payload.as_ref();
                store
                    .run_concurrent(async move |acc| -> wasmtime::Result<Delivered> {
                        let mut results = vec![Val::Bool(false); slots];
                        func.call_concurrent(acc, params, &mut results).await?;
                        let first = results.into_iter().next();
                        match (delivery, first) {
                            (Delivery::Value, v) => Ok(Delivered::Value(v)),
                            (Delivery::Stream(item), Some(Val::Stream(s))) => {
                                match item {
                                    StreamItem::Bytes => pump::<u8>(acc, s, collected, ctx).await?,
                                    StreamItem::Text => pump::<String>(acc, s, collected, ctx).await?,
                                    StreamItem::Chunks => pump::<Vec<u8>>(acc, s, collected, ctx).await?,
                                }
                                Ok(Delivered::Streamed)
                            }
                            (Delivery::Future, Some(Val::Future(fut))) => {
                                Ok(Delivered::Value(await_future(acc, fut, payload).await?))
                            }
                            _ => wasmtime::bail!("the component's result does not match its declared type"),
                        }
                    })
                    .await
                    .and_then(|r| r)
            }
        });
        let collected = collected.lock().unwrap_or_else(PoisonError::into_inner);
        match res {
            Ok(Delivered::Value(v)) => self.finish_generic(f, v.as_ref()),
            Ok(Delivered::Streamed) => {
                Ok(ToolOutcome { content: collected.output(None), is_error: false, error_code: None, details: None })
            }
            // What streamed before the deadline (or a trap) is kept, with
            // why it stopped.
            Err(e) if matches!(delivery, Delivery::Stream(_)) && !collected.text.is_empty() => Ok(ToolOutcome {
                content: collected.output(Some(&format!("stream stopped: {}", e.message))),
                is_error: true,
                error_code: Some(e.code),
                details: None,
            }),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn characters_split_across_writes_wait_for_their_rest() {
        let mut c = Collected::new(1 << 20);
        let snow = "☃".as_bytes();
        assert_eq!(c.push(&[b'a', snow[0]]), "a");
        assert_eq!(c.push(&snow[1..2]), "");
        assert_eq!(c.push(&[snow[2], b'b']), "☃b");
        assert_eq!(c.push(&[0xff, b'c']), "\u{FFFD}c");
        assert_eq!(c.push(&snow[..1]), "");
        assert_eq!(c.finish(), "\u{FFFD}");
        assert_eq!(c.output(None), "a☃b\u{FFFD}c\u{FFFD}");
    }

    #[test]
    fn output_is_cut_at_the_cap_on_a_character_boundary() {
        let mut c = Collected::new(5);
        assert_eq!(c.push("ab☃cd".as_bytes()), "ab☃");
        assert_eq!(c.push(b"more"), "");
        let out = c.output(Some("stream stopped: late"));
        assert!(out.starts_with("ab☃\n[output cut at 5 bytes"), "{out}");
        assert!(out.ends_with("; stream stopped: late]"), "{out}");
    }
}
