//! The SSE parser and stream assembler (`sdk/llm-wire`) on arbitrary
//! bodies split at arbitrary points: no panic, and the split never changes
//! the outcome — the same events, or the same error code; and a stream
//! that decodes through `serde_json::Value`s decodes alike through the
//! typed chunk reader.
//!
//! Input: a cap selector byte, a count `k`, `k` piece sizes, then the body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wharf_fuzz::{Input, chunks};
use wharf_llm_wire::sse::DEFAULT_MAX_EVENT_BYTES;
use wharf_llm_wire::{ErrorCode, Event, SseEvent, SseParser, StreamDecoder};

/// Events, and how the stream ended (`Ok(done)` or the error code).
fn decode(pieces: &[&[u8]], cap: usize, generic: bool) -> (Vec<Event>, Result<bool, ErrorCode>) {
    let mut d = if generic { StreamDecoder::generic_only(cap) } else { StreamDecoder::with_max_event_bytes(cap) };
    let mut events = Vec::new();
    for p in pieces {
        match d.feed(p) {
            Ok(out) => events.extend(out.events),
            Err(e) => return (events, Err(e.code)),
        }
    }
    match d.finish() {
        Ok(out) => {
            events.extend(out.events);
            (events, Ok(out.done))
        }
        Err(e) => (events, Err(e.code)),
    }
}

fn parse(pieces: &[&[u8]], cap: usize) -> Result<Vec<SseEvent>, ()> {
    let mut p = SseParser::with_max_event_bytes(cap);
    let mut out = Vec::new();
    for piece in pieces {
        p.feed_into(piece, &mut out).map_err(|_| ())?;
    }
    out.extend(p.finish());
    Ok(out)
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let cap = match input.byte() {
        0..=127 => DEFAULT_MAX_EVENT_BYTES,
        b => 1 + (b as usize - 128) * 4,
    };
    let k = input.byte() as usize % 32;
    let sizes = input.take(k).to_vec();
    let body = input.rest();
    let pieces = chunks(body, &sizes);

    let (whole_events, whole_end) = decode(&[body], cap, false);
    let (split_events, split_end) = decode(&pieces, cap, false);
    assert_eq!(whole_end, split_end, "the split changed how the stream ended");
    if whole_end.is_ok() {
        assert_eq!(whole_events, split_events, "the split changed the events");
    }
    // The typed reader skips members it does not use without decoding
    // them (see `chunk.rs`), so it may take a stream the generic reader
    // refuses; one the generic reader takes, it reads alike.
    let (generic_events, generic_end) = decode(&[body], cap, true);
    if generic_end.is_ok() {
        assert_eq!(whole_end, generic_end, "the typed reader changed how the stream ended");
        assert_eq!(whole_events, generic_events, "the typed reader changed the events");
    }
    assert_eq!(parse(&[body], cap), parse(&pieces, cap), "the split changed the SSE items");
});
