//! Tests of the mock itself, through a plain HTTP client (hyper), and
//! end to end with `wharf-llm-wire` (request building and stream decoding).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{HeaderMap, Method, Request};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wharf_llm_wire as wire;
use wharf_mock_llm::checks::rule;
use wharf_mock_llm::{
    Checks, ErrorReply, Fault, MockLlm, MockToolCall, MockUsage, ReasoningCheck, Reply, Script, StreamReply,
};

struct Resp {
    status: u16,
    headers: HeaderMap,
    frames: Vec<(Instant, Bytes)>,
    error: Option<hyper::Error>,
}

impl Resp {
    fn body(&self) -> Vec<u8> {
        self.frames.iter().flat_map(|(_, b)| b.to_vec()).collect()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body()).unwrap()
    }

    /// Decodes the body with wharf-llm-wire, frame by frame, the way an
    /// adapter does. Returns events, keep-alive count and the outcome.
    fn decode(&self) -> (Vec<wire::Event>, usize, Result<(), wire::WireError>) {
        let mut d = wire::StreamDecoder::new();
        let mut events = Vec::new();
        let mut comments = 0;
        for (_, frame) in &self.frames {
            match d.feed(frame) {
                Ok(out) => {
                    events.extend(out.events);
                    comments += out.comments;
                }
                Err(e) => return (events, comments, Err(e)),
            }
        }
        if let Some(e) = &self.error {
            let err = wire::WireError::new(wire::ErrorCode::Transport, e.to_string());
            return (events, comments, Err(err));
        }
        match d.finish() {
            Ok(out) => {
                events.extend(out.events);
                (events, comments, Ok(()))
            }
            Err(e) => (events, comments, Err(e)),
        }
    }
}

async fn send(addr: SocketAddr, method: Method, path: &str, body: String, auth: Option<&str>) -> Resp {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .header("x-test", "yes");
    if let Some(a) = auth {
        req = req.header("authorization", format!("Bearer {a}"));
    }
    let res = sender.send_request(req.body(Full::new(Bytes::from(body))).unwrap()).await.unwrap();
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let mut body = res.into_body();
    let mut frames = Vec::new();
    let mut error = None;
    loop {
        match body.frame().await {
            None => break,
            Some(Ok(f)) => {
                if let Ok(data) = f.into_data() {
                    frames.push((Instant::now(), data));
                }
            }
            Some(Err(e)) => {
                error = Some(e);
                break;
            }
        }
    }
    Resp { status, headers, frames, error }
}

async fn chat(mock: &MockLlm, body: &Value) -> Resp {
    send(mock.addr(), Method::POST, "/v1/chat/completions", body.to_string(), Some("sk-test")).await
}

fn simple_body() -> Value {
    json!({"model": "m", "stream": true, "stream_options": {"include_usage": true},
           "messages": [{"role": "user", "content": "hi"}]})
}

fn read_tool() -> wire::ToolSpec {
    wire::ToolSpec {
        name: "read".into(),
        description: "Read a file".into(),
        input_schema: r#"{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}"#.into(),
    }
}

/// A full agent-like exchange: the request is built by wharf-llm-wire, the
/// stream decoded by it, the history re-sent; the mock sees no violation.
#[tokio::test]
async fn round_trip_with_wire_crate_has_no_violations() {
    let reasoning = "Read both files — 两个文件 🎉.";
    let script = Script::new(vec![
        Reply::Stream(StreamReply {
            reasoning: reasoning.into(),
            text: "Reading.".into(),
            tool_calls: vec![
                MockToolCall::new("call_0", "read", r#"{"path": "a.txt"}"#),
                MockToolCall::new("call_1", "read", r#"{"path": "bé.txt"}"#),
            ],
            chunk_chars: 3,
            interleave_tool_calls: true,
            keepalive_every: 3,
            write_bytes: 7,
            ..StreamReply::default()
        }),
        Reply::reasoning_text("Summarize.", "Both say hi."),
    ])
    .with_checks(Checks {
        api_key: Some("sk-test".into()),
        model: Some("deepseek-v4-pro".into()),
        ..Checks::default()
    });
    let mock = MockLlm::start(script).await.unwrap();
    let mut cfg = wire::Config::new("deepseek-v4-pro", wire::Dialect::DeepSeek);
    cfg.thinking = Some(true);
    let mut req = wire::Request {
        system: "sys".into(),
        messages: vec![wire::Message::user("read a and b")],
        tools: vec![read_tool()],
        max_tokens: Some(1000),
    };

    let body: Value = serde_json::from_str(&wire::build_request_json(&req, &cfg).unwrap()).unwrap();
    let resp = chat(&mock, &body).await;
    assert_eq!(resp.status, 200);
    assert_eq!(resp.headers["content-type"], "text/event-stream");
    assert!(resp.frames.len() > 20, "write_bytes splits the body: {} frames", resp.frames.len());
    let (events, comments, end) = resp.decode();
    end.unwrap();
    assert!(comments > 0);
    let mut got_reasoning = String::new();
    let mut text = String::new();
    let mut calls = Vec::new();
    for e in &events {
        match e {
            wire::Event::Reasoning(r) => got_reasoning.push_str(r),
            wire::Event::Text(t) => text.push_str(t),
            wire::Event::ToolCall(c) => calls.push(c.clone()),
            _ => {}
        }
    }
    assert_eq!(got_reasoning, reasoning);
    assert_eq!(text, "Reading.");
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].arguments, r#"{"path": "bé.txt"}"#);
    assert_eq!(
        &events[events.len() - 2..],
        &[
            wire::Event::Usage(wire::Usage {
                prompt_tokens: 100,
                completion_tokens: 20,
                cache_hit_tokens: 60,
                cache_miss_tokens: 40,
                reasoning_tokens: 5
            }),
            wire::Event::Finish(wire::FinishReason::ToolCalls)
        ]
    );

    req.messages.push(wire::Message::assistant(text, Some(got_reasoning), calls.clone()));
    for c in &calls {
        req.messages.push(wire::Message::tool(c.id.clone(), "hello"));
    }
    let body: Value = serde_json::from_str(&wire::build_request_json(&req, &cfg).unwrap()).unwrap();
    let (events, _, end) = chat(&mock, &body).await.decode();
    end.unwrap();
    assert_eq!(events.last(), Some(&wire::Event::Finish(wire::FinishReason::Stop)));

    mock.assert_no_violations();
    let recs = mock.requests();
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[0].reply, "stream");
    assert_eq!(recs[1].headers["x-test"], "yes");
    assert!(!recs[1].headers.contains_key("authorization"));
    assert_eq!(recs[1].authorization, wharf_mock_llm::AuthRecord { present: true, matched: Some(true) });
    assert_eq!(recs[1].body.as_ref().unwrap()["messages"][2]["reasoning_content"], reasoning);
}

#[tokio::test]
async fn reasoning_passback_violations() {
    let call = MockToolCall::new("c1", "read", r#"{"path":"a"}"#);
    let mock = MockLlm::start(Script::new(vec![Reply::tool_calls("why", vec![call])]).with_default(Reply::text("ok")))
        .await
        .unwrap();
    chat(&mock, &simple_body()).await;
    let history = |reasoning: Option<&str>| {
        let mut assistant = json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a\"}"}}]});
        if let Some(r) = reasoning {
            assistant["reasoning_content"] = json!(r);
        }
        json!({"model": "m", "stream": true, "stream_options": {"include_usage": true}, "messages": [
            {"role": "user", "content": "hi"}, assistant,
            {"role": "tool", "tool_call_id": "c1", "content": "A"}]})
    };
    assert_eq!(chat(&mock, &history(Some("why"))).await.status, 200);
    assert!(mock.violations().is_empty());
    chat(&mock, &history(None)).await;
    chat(&mock, &history(Some("something else"))).await;
    let v = mock.violations();
    assert_eq!(v.len(), 2, "{v:?}");
    assert_eq!((v[0].request, v[0].rule.as_str()), (2, rule::REASONING_PASSBACK));
    assert_eq!((v[1].request, v[1].rule.as_str()), (3, rule::REASONING_MISMATCH));
    assert_eq!(mock.requests()[2].violations, vec![v[0].clone()]);
}

#[tokio::test]
async fn reject_violations_answers_like_deepseek() {
    let checks = Checks { reject_violations: true, ..Checks::default() };
    let mock = MockLlm::start(Script::new(vec![Reply::text("ok")]).with_checks(checks)).await.unwrap();
    let body = json!({"model": "m", "stream": true, "stream_options": {"include_usage": true}, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "A"}]});
    let resp = chat(&mock, &body).await;
    assert_eq!(resp.status, 400);
    assert_eq!(
        resp.json()["error"]["message"],
        "The reasoning_content in the thinking mode must be passed back to the API."
    );
    assert_eq!(mock.remaining_replies(), 1, "the scripted reply stays queued");
    let err = wire::map_http_error(400, &resp.body(), None, 0, "");
    assert_eq!(err.code, wire::ErrorCode::InvalidRequest);
    assert_eq!(chat(&mock, &simple_body()).await.status, 200);
    assert_eq!(mock.remaining_replies(), 0);
}

#[tokio::test]
async fn unanswered_tool_call_and_bad_schema_are_recorded() {
    let mock = MockLlm::start(Script::default().with_default(Reply::text("ok"))).await.unwrap();
    let body = json!({"model": "m", "stream": true, "stream_options": {"include_usage": true},
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "reasoning_content": "",
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}]},
            {"role": "user", "content": "next"}],
        "tools": [{"type": "function", "function": {"name": "bad name!", "parameters": {"type": "object"}}}]});
    chat(&mock, &body).await;
    let rules: Vec<String> = mock.violations().into_iter().map(|v| v.rule).collect();
    assert_eq!(rules, vec![rule::TOOL_ANSWERS, rule::TOOL_SCHEMA]);
}

#[tokio::test]
async fn auth_is_checked_and_never_recorded() {
    let checks = Checks { api_key: Some("sk-right".into()), ..Checks::default() };
    let mock = MockLlm::start(Script::default().with_default(Reply::text("ok")).with_checks(checks)).await.unwrap();
    let b = simple_body().to_string();
    send(mock.addr(), Method::POST, "/chat/completions", b.clone(), Some("sk-wrong-key")).await;
    send(mock.addr(), Method::POST, "/chat/completions", b.clone(), None).await;
    send(mock.addr(), Method::POST, "/chat/completions", b, Some("sk-right")).await;
    let recs = mock.requests();
    let auth: Vec<_> = recs.iter().map(|r| (r.authorization.present, r.authorization.matched)).collect();
    assert_eq!(auth, vec![(true, Some(false)), (false, Some(false)), (true, Some(true))]);
    let v = mock.violations();
    assert_eq!(v.iter().map(|v| v.request).collect::<Vec<_>>(), vec![0, 1]);
    assert!(v.iter().all(|v| v.rule == rule::AUTH));
    let everything = serde_json::to_string(&recs).unwrap() + &serde_json::to_string(&v).unwrap();
    assert!(!everything.contains("sk-wrong-key") && !everything.contains("sk-right"));
}

#[tokio::test]
async fn http_errors_map_to_stable_codes() {
    use wire::ErrorCode::*;
    let cases = [
        (400, InvalidRequest),
        (401, Auth),
        (402, Quota),
        (403, Auth),
        (422, InvalidRequest),
        (429, RateLimit),
        (500, Server),
        (503, Server),
    ];
    let mut replies: Vec<Reply> = cases
        .iter()
        .map(|(s, _)| {
            let e = ErrorReply::new(*s);
            Reply::Error(if *s == 429 { e.with_retry_after("2") } else { e })
        })
        .collect();
    replies.push(Reply::context_overflow());
    replies.push(Reply::Error(ErrorReply::new(503).with_retry_after("Thu, 01 Jan 1970 00:00:10 GMT")));
    let mock = MockLlm::start(Script::new(replies)).await.unwrap();
    for (status, code) in cases {
        let resp = chat(&mock, &simple_body()).await;
        assert_eq!(resp.status, status);
        let body = resp.json();
        assert!(body["error"]["message"].is_string() && body["error"]["type"].is_string(), "{body}");
        let retry = resp.headers.get("retry-after").map(|v| v.to_str().unwrap().to_string());
        let err = wire::map_http_error(status, &resp.body(), retry.as_deref(), 0, "sk-test");
        assert_eq!(err.code, code, "status {status}");
        assert_eq!(err.retry_after_ms, if status == 429 { Some(2000) } else { None });
    }
    let resp = chat(&mock, &simple_body()).await;
    assert_eq!(resp.status, 400);
    let err = wire::map_http_error(400, &resp.body(), None, 0, "");
    assert_eq!(err.code, ContextWindowExceeded);
    assert!(err.message.contains("maximum context length is 131072 tokens"), "{}", err.message);
    let resp = chat(&mock, &simple_body()).await;
    let retry = resp.headers["retry-after"].to_str().unwrap().to_string();
    assert_eq!(wire::map_http_error(503, &resp.body(), Some(&retry), 4, "").retry_after_ms, Some(6000));
    mock.assert_no_violations();
}

#[tokio::test]
async fn scripted_headers_and_arrival_times() {
    let replies = vec![
        Reply::Error(ErrorReply::new(429).with_retry_after("1").with_header("x-request-id", "req-429")),
        Reply::Stream(StreamReply {
            text: "hi".into(),
            headers: vec![("x-request-id".into(), "req-ok".into())],
            ..StreamReply::default()
        }),
    ];
    let mock = MockLlm::start(Script::new(replies)).await.unwrap();
    let resp = chat(&mock, &simple_body()).await;
    assert_eq!((resp.status, resp.headers["x-request-id"].to_str().unwrap()), (429, "req-429"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let resp = chat(&mock, &simple_body()).await;
    assert_eq!((resp.status, resp.headers["x-request-id"].to_str().unwrap()), (200, "req-ok"));
    let reqs = mock.requests();
    assert!(reqs[1].received_ms >= reqs[0].received_ms + 200, "{} then {}", reqs[0].received_ms, reqs[1].received_ms);
}

fn faulty(fault: Fault) -> Reply {
    Reply::Stream(
        StreamReply { text: "hello world, how are you".into(), chunk_chars: 4, ..StreamReply::default() }
            .with_fault(fault),
    )
}

#[tokio::test]
async fn reset_mid_stream() {
    let mock = MockLlm::start(Script::new(vec![faulty(Fault::Reset { after_chunks: 3 })])).await.unwrap();
    let resp = chat(&mock, &simple_body()).await;
    assert_eq!(resp.status, 200);
    let err = resp.error.as_ref().expect("the body must fail");
    let (events, _, end) = resp.decode();
    // What arrived before the reset is a prefix of the text (an RST may
    // discard bytes the client had not read yet, so it can be shorter).
    let full = [wire::Event::Text("hell".into()), wire::Event::Text("o wo".into())];
    assert!(full.starts_with(&events), "{events:?}");
    assert_eq!(end.unwrap_err().code, wire::ErrorCode::Transport);
    // The failure is a reset or an incomplete body, never a clean end.
    let text = format!("{err:?}");
    assert!(err.is_incomplete_message() || text.contains("reset") || text.contains("Reset"), "{text}");
}

#[tokio::test]
async fn reset_is_a_tcp_rst() {
    let mock = MockLlm::start(Script::new(vec![faulty(Fault::Reset { after_chunks: 1 })])).await.unwrap();
    let mut s = TcpStream::connect(mock.addr()).await.unwrap();
    let body = simple_body().to_string();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let mut buf = vec![0; 65536];
    let outcome = loop {
        match s.read(&mut buf).await {
            Ok(0) => break Ok(()),
            Ok(_) => continue,
            Err(e) => break Err(e.kind()),
        }
    };
    assert_eq!(outcome, Err(std::io::ErrorKind::ConnectionReset));
}

#[tokio::test]
async fn stall_with_keepalives() {
    let fault = Fault::Stall { after_chunks: 2, ms: 300, keepalive_every_ms: 60 };
    let mock = MockLlm::start(Script::new(vec![faulty(fault)])).await.unwrap();
    let started = Instant::now();
    let resp = chat(&mock, &simple_body()).await;
    assert!(started.elapsed() >= Duration::from_millis(300));
    let (events, comments, end) = resp.decode();
    end.unwrap();
    assert!(comments >= 3, "keep-alives while stalled: {comments}");
    let text: String =
        events.iter().filter_map(|e| if let wire::Event::Text(t) = e { Some(t.as_str()) } else { None }).collect();
    assert_eq!(text, "hello world, how are you");
    // The stall sits between the first text chunk and the second.
    let body = String::from_utf8(resp.body()).unwrap();
    let first_ka = body.find(": keep-alive").unwrap();
    assert!(body[..first_ka].contains("\"hell\"") && !body[..first_ka].contains("\"o wo\""));
}

#[tokio::test]
async fn stream_faults_decode_to_stable_codes() {
    use wire::ErrorCode::*;
    let cases = [
        (Fault::MalformedJson { after_chunks: 2 }, MalformedResponse),
        (Fault::MissingDone, StreamClosed),
        (Fault::Eof { after_chunks: 3 }, StreamClosed),
        (
            Fault::ErrorEvent {
                after_chunks: 2,
                message: "Rate limit reached".into(),
                kind: "rate_limit_error".into(),
                code: None,
            },
            RateLimit,
        ),
    ];
    let mock = MockLlm::start(Script::new(cases.iter().map(|(f, _)| faulty(f.clone())).collect())).await.unwrap();
    for (fault, code) in cases {
        let resp = chat(&mock, &simple_body()).await;
        assert!(resp.error.is_none(), "{fault:?}: the body ends cleanly");
        let (_, _, end) = resp.decode();
        assert_eq!(end.unwrap_err().code, code, "{fault:?}");
    }
    let recs = mock.requests();
    assert_eq!(recs[1].reply, "stream (missing_done)");
}

#[tokio::test]
async fn finish_reasons_usage_placement_and_empty_response() {
    let replies = vec![
        Reply::Stream(StreamReply { text: "x".into(), finish: Some("length".into()), ..StreamReply::default() }),
        Reply::Stream(StreamReply {
            text: "x".into(),
            finish: Some("insufficient_system_resource".into()),
            usage: None,
            ..StreamReply::default()
        }),
        Reply::Stream(StreamReply {
            text: "x".into(),
            usage_in_finish_chunk: true,
            usage: Some(MockUsage { prompt_tokens: 7, completion_tokens: 1, cache_hit_tokens: 0, reasoning_tokens: 0 }),
            ..StreamReply::default()
        }),
        Reply::Stream(StreamReply::default()),
    ];
    let mock = MockLlm::start(Script::new(replies)).await.unwrap();
    let (ev, _, end) = chat(&mock, &simple_body()).await.decode();
    end.unwrap();
    assert_eq!(ev.last(), Some(&wire::Event::Finish(wire::FinishReason::MaxTokens)));
    let resp = chat(&mock, &simple_body()).await;
    assert!(!String::from_utf8(resp.body()).unwrap().contains("prompt_tokens"));
    let (ev, _, _) = resp.decode();
    assert_eq!(ev.last(), Some(&wire::Event::Finish(wire::FinishReason::Retryable)));
    let resp = chat(&mock, &simple_body()).await;
    let body = String::from_utf8(resp.body()).unwrap();
    assert!(!body.contains("\"choices\":[]"), "usage rides on the finish chunk");
    let (ev, _, _) = resp.decode();
    assert!(matches!(ev[ev.len() - 2], wire::Event::Usage(u) if u.prompt_tokens == 7 && u.cache_miss_tokens == 7));
    let (_, _, end) = chat(&mock, &simple_body()).await.decode();
    assert_eq!(end.unwrap_err().code, wire::ErrorCode::EmptyResponse);
}

#[tokio::test]
async fn usage_only_final_chunk_and_split_arguments_on_the_wire() {
    let reply = Reply::Stream(StreamReply {
        tool_calls: vec![
            MockToolCall::new("a", "read", r#"{"path":"one.txt"}"#),
            MockToolCall::new("b", "read", r#"{"path":"two.txt"}"#),
        ],
        chunk_chars: 5,
        interleave_tool_calls: true,
        ..StreamReply::default()
    });
    let mock = MockLlm::start(Script::new(vec![reply])).await.unwrap();
    let body = String::from_utf8(chat(&mock, &simple_body()).await.body()).unwrap();
    let chunks: Vec<Value> = body
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["prompt_cache_miss_tokens"], 40);
    let frags: Vec<(u64, String)> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"][0].as_object().cloned())
        .map(|f| (f["index"].as_u64().unwrap(), f["function"]["arguments"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(
        frags,
        vec![
            (0, String::new()),
            (1, String::new()),
            (0, "{\"pat".into()),
            (1, "{\"pat".into()),
            (0, "h\":\"o".into()),
            (1, "h\":\"t".into()),
            (0, "ne.tx".into()),
            (1, "wo.tx".into()),
            (0, "t\"}".into()),
            (1, "t\"}".into()),
        ]
    );
    assert!(body.ends_with("data: [DONE]\n\n"));
}

#[tokio::test]
async fn queue_default_exhaustion_and_http_endpoints() {
    let mock = MockLlm::start(Script::new(vec![Reply::text("one")])).await.unwrap();
    assert_eq!(chat(&mock, &simple_body()).await.status, 200);
    let resp = chat(&mock, &simple_body()).await;
    assert_eq!(resp.status, 500);
    assert_eq!(mock.violations()[0].rule, rule::SCRIPT_EXHAUSTED);
    let pushed = send(
        mock.addr(),
        Method::POST,
        "/_mock/replies",
        json!([{"kind": "stream", "text": "two"}, {"kind": "error", "status": 503}]).to_string(),
        None,
    )
    .await;
    assert_eq!(pushed.json()["queued"], 2);
    mock.push_reply(Reply::text("four"));
    assert_eq!(mock.remaining_replies(), 3);
    assert_eq!(chat(&mock, &simple_body()).await.status, 200);
    assert_eq!(chat(&mock, &simple_body()).await.status, 503);
    let recs = send(mock.addr(), Method::GET, "/_mock/requests", String::new(), None).await.json();
    assert_eq!(recs.as_array().unwrap().len(), 4);
    assert_eq!(recs[3]["reply"], "error 503");
    let v = send(mock.addr(), Method::GET, "/_mock/violations", String::new(), None).await.json();
    assert_eq!(v[0]["rule"], "script_exhausted");
    assert_eq!(send(mock.addr(), Method::GET, "/v1/models", String::new(), None).await.status, 200);
    assert_eq!(send(mock.addr(), Method::GET, "/nope", String::new(), None).await.status, 404);
    // Non-JSON bodies are recorded as violations, not crashes.
    let r = send(mock.addr(), Method::POST, "/chat/completions", "not json".into(), None).await;
    assert_eq!(r.status, 200);
    let last = mock.requests().pop().unwrap();
    assert_eq!((last.body, last.raw_body.as_str()), (None, "not json"));
    assert_eq!(last.violations[0].rule, rule::JSON);
}

#[tokio::test]
async fn headers_delay_and_openai_dialect_checks() {
    let checks = Checks { reasoning: ReasoningCheck::Forbidden, ..Checks::default() };
    let reply = Reply::Stream(StreamReply { text: "x".into(), headers_delay_ms: 200, ..StreamReply::default() });
    let mock =
        MockLlm::start(Script::new(vec![reply]).with_default(Reply::text("y")).with_checks(checks)).await.unwrap();
    let started = Instant::now();
    chat(&mock, &simple_body()).await;
    assert!(started.elapsed() >= Duration::from_millis(200));
    // The OpenAI dialect of wharf-llm-wire sends no reasoning: no violation.
    let cfg = wire::Config::new("gpt", wire::Dialect::OpenAi);
    let req = wire::Request {
        messages: vec![
            wire::Message::user("u"),
            wire::Message::assistant(
                "",
                Some("secret thoughts".into()),
                vec![wire::ToolCall { id: "c".into(), name: "read".into(), arguments: "{}".into() }],
            ),
            wire::Message::tool("c", "r"),
        ],
        tools: vec![read_tool()],
        ..wire::Request::default()
    };
    let body: Value = serde_json::from_str(&wire::build_request_json(&req, &cfg).unwrap()).unwrap();
    chat(&mock, &body).await;
    mock.assert_no_violations();
    // The DeepSeek dialect does send it: forbidden here.
    let cfg = wire::Config::new("ds", wire::Dialect::DeepSeek);
    let body: Value = serde_json::from_str(&wire::build_request_json(&req, &cfg).unwrap()).unwrap();
    chat(&mock, &body).await;
    assert_eq!(mock.violations()[0].rule, rule::REASONING_FORBIDDEN);
}

#[test]
fn background_server_for_sync_tests() {
    let mock = MockLlm::start_background(Script::new(vec![Reply::text("hi")])).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (events, _, end) = rt.block_on(chat(&mock, &simple_body())).decode();
    end.unwrap();
    assert_eq!(events[0], wire::Event::Text("hi".into()));
    drop(mock);
}

#[tokio::test]
async fn example_script_plays() {
    let script: Script = serde_json::from_str(wharf_mock_llm::EXAMPLE_SCRIPT).unwrap();
    let mock = MockLlm::start(script).await.unwrap();
    let mut body = simple_body();
    body["model"] = json!("deepseek-v4-pro");
    let (events, comments, end) = chat(&mock, &body).await.decode();
    end.unwrap();
    assert!(comments > 0);
    assert_eq!(events.iter().filter(|e| matches!(e, wire::Event::ToolCall(_))).count(), 2);
    let resp = chat(&mock, &body).await;
    assert_eq!((resp.status, resp.headers["retry-after"].to_str().unwrap()), (429, "1"));
}

#[test]
fn binary_prints_url_and_serves() {
    use std::io::BufRead;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/example-script.json");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_wharf-mock-llm"))
        .arg(script)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let url = line.trim().to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let addr: SocketAddr = url.trim_start_matches("http://").parse().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut body = simple_body();
    body["model"] = json!("deepseek-v4-pro");
    let resp = rt.block_on(send(addr, Method::POST, "/chat/completions", body.to_string(), Some("sk-test")));
    assert_eq!(resp.status, 200);
    let recs = rt.block_on(send(addr, Method::GET, "/_mock/requests", String::new(), None)).json();
    assert_eq!(recs[0]["authorization"]["matched"], true);
    child.kill().unwrap();
    child.wait().unwrap();
}

#[tokio::test]
async fn hang_then_client_gives_up_then_next_request_is_served() {
    let hang = faulty(Fault::Stall { after_chunks: 1, ms: 600_000, keepalive_every_ms: 0 });
    let mock = MockLlm::start(Script::new(vec![hang, Reply::text("next")])).await.unwrap();
    let timed_out = tokio::time::timeout(Duration::from_millis(200), chat(&mock, &simple_body())).await;
    assert!(timed_out.is_err(), "the stalled stream must not finish");
    let started = Instant::now();
    let (events, _, end) = chat(&mock, &simple_body()).await.decode();
    end.unwrap();
    assert_eq!(events[0], wire::Event::Text("next".into()));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(mock.requests()[0].reply, "stream (stall)");
}
