//! `cargo xtask bench` section `stream_decode`: decoding a model's streamed
//! reply in `llm-wire` (the code every `llm-deepseek`/`llm-openai` stream
//! runs, here natively): chunks read by the typed reader against the same
//! chunks read through a `serde_json::Value` each (the reader before), in
//! the same run, alternated.
//!
//! The stream is shaped as DeepSeek sends it: one chunk per token of
//! reasoning and of text (`id`, `object`, `created`, `model`,
//! `system_fingerprint`, one choice with its delta, `logprobs`,
//! `finish_reason`, `usage: null`), some tokens with escapes, then a tool
//! call in fragments and the usage chunk.
//!
//! Writes `target/bench/stream_decode.md` and `stream_decode.json`. With
//! `WHARF_BENCH_QUICK` the rounds shrink.

use std::time::Instant;

use serde_json::json;
use wharf_llm_wire::sse::DEFAULT_MAX_EVENT_BYTES;
use wharf_llm_wire::{Event, StreamDecoder};

/// Tokens of reasoning and of text in the reply.
const TOKENS: usize = 400;

fn chunk(delta: serde_json::Value, finish: Option<&str>) -> String {
    let c = json!({
        "id": "0b4c1c9e-6a57-4a7e-9d1a-3f7d2c5b8e10",
        "object": "chat.completion.chunk",
        "created": 1_764_900_000,
        "model": "deepseek-chat",
        "system_fingerprint": "fp_8802369eaa_prod0623_fp8_kvcache",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        "usage": null
    });
    format!("data: {c}\n\n")
}

fn stream() -> String {
    let words = ["The", " file", " holds", " \"quoted\"", " text", ",\n", " caf\u{e9}", " 42", " lines", "."];
    let mut s = String::new();
    s.push_str(&chunk(json!({"role": "assistant", "content": null, "reasoning_content": ""}), None));
    for i in 0..TOKENS / 2 {
        s.push_str(&chunk(json!({"reasoning_content": words[i % words.len()]}), None));
    }
    for i in 0..TOKENS / 2 {
        s.push_str(&chunk(json!({"content": words[(i + 3) % words.len()]}), None));
    }
    s.push_str(&chunk(
        json!({"tool_calls": [{"index": 0, "id": "call_0", "type": "function", "function": {"name": "read", "arguments": ""}}]}),
        None,
    ));
    for piece in ["{\"", "path", "\":\"", "src/", "main", ".rs", "\"}"] {
        s.push_str(&chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}), None));
    }
    s.push_str(&chunk(json!({}), Some("tool_calls")));
    let usage = json!({"id": "x", "object": "chat.completion.chunk", "choices": [], "usage": {
        "prompt_tokens": 1200, "completion_tokens": 420, "total_tokens": 1620,
        "prompt_cache_hit_tokens": 1024, "prompt_cache_miss_tokens": 176}});
    s.push_str(&format!("data: {usage}\n\ndata: [DONE]\n\n"));
    s
}

fn decode(body: &[u8], generic: bool) -> Vec<Event> {
    let mut d = if generic {
        StreamDecoder::generic_only(DEFAULT_MAX_EVENT_BYTES)
    } else {
        StreamDecoder::with_max_event_bytes(DEFAULT_MAX_EVENT_BYTES)
    };
    // As a body arrives: in reads of up to 16 KiB.
    let mut events = Vec::new();
    for piece in body.chunks(16 << 10) {
        match d.feed(piece) {
            Ok(out) => events.extend(out.events),
            Err(e) => panic!("the bench stream failed to decode: {e:?}"),
        }
    }
    events
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(f64::NAN)
}

pub fn main() -> anyhow::Result<()> {
    let rounds = if std::env::var_os("WHARF_BENCH_QUICK").is_some() { 40 } else { 400 };
    let body = stream();
    let typed_events = decode(body.as_bytes(), false);
    anyhow::ensure!(typed_events == decode(body.as_bytes(), true), "the two readers decoded the stream differently");
    let chunks = body.matches("data: ").count();
    let (mut typed, mut generic) = (Vec::new(), Vec::new());
    for _ in 0..20 {
        std::hint::black_box(decode(body.as_bytes(), false));
        std::hint::black_box(decode(body.as_bytes(), true));
    }
    for _ in 0..rounds {
        let t = Instant::now();
        std::hint::black_box(decode(std::hint::black_box(body.as_bytes()), false));
        typed.push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        std::hint::black_box(decode(std::hint::black_box(body.as_bytes()), true));
        generic.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let (t, g) = (median(typed), median(generic));
    let per = |us: f64| us * 1000.0 / chunks as f64;
    let md = format!(
        "Decoding one streamed reply ({chunks} chunks, {} KiB, {} events) natively, median of {rounds} alternated rounds:\n\n\
         | reader | per reply (µs) | per chunk (ns) | ratio |\n| --- | --- | --- | --- |\n\
         | typed chunk reader (`llm-wire` now) | {t:.1} | {:.0} | {:.2}× |\n\
         | baseline: a `serde_json::Value` per chunk | {g:.1} | {:.0} | 1.00× |\n",
        body.len() / 1024,
        typed_events.len(),
        per(t),
        t / g,
        per(g),
    );
    let json = json!({"chunks": chunks, "bytes": body.len(), "rounds": rounds, "typed_median_us": t,
        "value_median_us": g, "typed_vs_value": t / g});
    let out = wharf_tests::target_dir().join("bench");
    std::fs::create_dir_all(&out)?;
    std::fs::write(out.join("stream_decode.md"), &md)?;
    std::fs::write(out.join("stream_decode.json"), serde_json::to_string_pretty(&json)? + "\n")?;
    println!("{md}");
    Ok(())
}
