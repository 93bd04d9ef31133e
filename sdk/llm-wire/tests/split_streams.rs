//! Property tests: however a stream is cut into chunks, the decoder yields
//! the same events as for the whole body.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use wharf_llm_wire::{
    Decoded, ErrorCode, Event, FinishReason, SseEvent, SseParser, StreamDecoder, ToolCall, Usage, decode_all,
};

const RECORDED: &str = include_str!("fixtures/deepseek_tool_calls.sse");

/// Decodes `body` cut at the given offsets, returning the events, the number
/// of comments seen and the final outcome.
fn decode_split(body: &[u8], cuts: &[usize]) -> (Vec<Event>, usize, Result<Decoded, ErrorCode>) {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
    cuts.sort_unstable();
    let mut d = StreamDecoder::new();
    let mut events = Vec::new();
    let mut comments = 0;
    let mut start = 0;
    for &cut in cuts.iter().chain(std::iter::once(&body.len())) {
        match d.feed(&body[start..cut]) {
            Ok(out) => {
                comments += out.comments;
                events.extend(out.events);
            }
            Err(e) => return (events, comments, Err(e.code)),
        }
        start = cut;
    }
    let end = d.finish().map_err(|e| e.code);
    if let Ok(out) = &end {
        events.extend(out.events.clone());
    }
    (events, comments, end)
}

fn expected() -> Vec<Event> {
    vec![
        Event::Reasoning("The user wants".into()),
        Event::Reasoning(" both files — ".into()),
        Event::Reasoning("读取两个文件".into()),
        Event::Reasoning(" 🎉 then grep.".into()),
        Event::Text("Reading ".into()),
        Event::Text("now.".into()),
        Event::ToolCall(ToolCall {
            id: "call_00_r3Q".into(),
            name: "read_file".into(),
            arguments: r#"{"path": "src/main.rs"}"#.into(),
        }),
        Event::ToolCall(ToolCall {
            id: "call_01_k9Z".into(),
            name: "grep".into(),
            arguments: r#"{"pattern": "fn mäin\u00e9", "max": 10}"#.into(),
        }),
        Event::Usage(Usage {
            prompt_tokens: 1200,
            completion_tokens: 85,
            cache_hit_tokens: 1024,
            cache_miss_tokens: 176,
            reasoning_tokens: 41,
        }),
        Event::Finish(FinishReason::ToolCalls),
    ]
}

#[test]
fn recorded_stream_decodes() {
    assert_eq!(decode_all(RECORDED.as_bytes()).unwrap(), expected());
    let (events, comments, end) = decode_split(RECORDED.as_bytes(), &[]);
    assert_eq!(events, expected());
    assert_eq!(comments, 2);
    assert!(end.unwrap().done);
}

#[test]
fn every_single_cut_point() {
    let body = RECORDED.as_bytes();
    for cut in 0..=body.len() {
        let (events, comments, end) = decode_split(body, &[cut]);
        assert_eq!(events, expected(), "cut at {cut}");
        assert_eq!(comments, 2);
        assert!(end.is_ok());
    }
}

#[test]
fn byte_by_byte() {
    let body = RECORDED.as_bytes();
    let cuts: Vec<usize> = (0..body.len()).collect();
    assert_eq!(decode_split(body, &cuts).0, expected());
}

#[test]
fn truncated_anywhere_is_an_error_not_a_panic() {
    let body = RECORDED.as_bytes();
    let done_at = RECORDED.find("data: [DONE]").unwrap();
    for len in 0..done_at {
        let (_, _, end) = decode_split(&body[..len], &[len / 2]);
        let code = end.err();
        assert!(
            matches!(code, Some(ErrorCode::StreamClosed) | Some(ErrorCode::MalformedResponse)),
            "len {len}: {code:?}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_splits_give_identical_events(cuts in proptest::collection::vec(any::<usize>(), 0..40)) {
        let (events, comments, end) = decode_split(RECORDED.as_bytes(), &cuts);
        prop_assert_eq!(events, expected());
        prop_assert_eq!(comments, 2);
        prop_assert!(end.is_ok());
    }

    #[test]
    fn random_splits_with_crlf(cuts in proptest::collection::vec(any::<usize>(), 0..40), cr_only in any::<bool>()) {
        let sep = if cr_only { "\r" } else { "\r\n" };
        let body = RECORDED.replace('\n', sep);
        let (events, comments, end) = decode_split(body.as_bytes(), &cuts);
        prop_assert_eq!(events, expected());
        prop_assert_eq!(comments, 2);
        prop_assert!(end.is_ok());
    }

    #[test]
    fn sse_parser_roundtrip(
        events in proptest::collection::vec(
            prop_oneof![
                "[^\r\n]{0,20}".prop_map(|d| (false, d)),
                "[^\r\n]{0,12}".prop_map(|c| (true, c)),
            ],
            0..12,
        ),
        cuts in proptest::collection::vec(any::<usize>(), 0..20),
    ) {
        // Serialize arbitrary data / comment lines, then parse with random cuts.
        let mut body = String::new();
        let mut want = Vec::new();
        for (is_comment, text) in &events {
            if *is_comment {
                body.push_str(&format!(":{text}\n"));
                want.push(SseEvent::Comment(text.strip_prefix(' ').unwrap_or(text).to_string()));
            } else {
                body.push_str(&format!("data:{text}\n\n"));
                let data = text.strip_prefix(' ').unwrap_or(text).to_string();
                want.push(if data.trim() == "[DONE]" {
                    SseEvent::Done
                } else {
                    SseEvent::Message { event: None, data }
                });
            }
        }
        let bytes = body.as_bytes();
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let mut p = SseParser::new();
        let mut got = Vec::new();
        let mut start = 0;
        for &cut in cuts.iter().chain(std::iter::once(&bytes.len())) {
            got.extend(p.feed(&bytes[start..cut]).unwrap());
            start = cut;
        }
        got.extend(p.finish());
        prop_assert_eq!(got, want);
    }
}
