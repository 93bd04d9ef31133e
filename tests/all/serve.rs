//! `wharf serve` end to end over raw HTTP: every route of the OpenAPI
//! document (and the token, Host and Origin rules on each), SSE resume by
//! `Last-Event-ID` with no event lost or repeated, prompt / steer /
//! followup, approvals pending in two sessions at once, idle unload and
//! reload on demand (with a stream open across it), and fork.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};

use super::web::{Sse, Web, open_sse, request, start_command};

/// The approval-gated profile of the web tests: the first turn asks before
/// `word_count`, then echoes its result; later turns tell a slow story.
const GATED: &str = r#"
[agent]
adapter = "scripted"
max_steps = 10

[[plugin]]
id = "text"
path = "${plugin_dir}/text.wasm"
[plugin.grant]
dirs = ["${workspace}:ro"]

[[plugin]]
id = "gate"
path = "${plugin_dir}/policy-fixed.wasm"
[plugin.config]
decision = "ask"
reason = "word counts need a human"
tools = ["word_count"]

[[plugin]]
id = "scripted"
path = "${plugin_dir}/llm-scripted.wasm"
[plugin.config]
model = "scripted-serve"
chunk_size = 4

[[plugin.config.turns]]
text = "Let me count the words in README.md."
tool_calls = [{ name = "word_count", arguments = { path = "README.md" } }]

[[plugin.config.turns]]
text = "The count is: "
echo_last_tool_result = true

[[plugin.config.turns]]
text = "Once upon a time there was a harness whose every capability was a sandboxed component."
delay_ms = 100
"#;

fn serve(extra: &[&str]) -> Web {
    start_command("serve", GATED, extra, &[])
}

fn str_of(v: &Value, k: &str) -> String {
    v[k].as_str().unwrap_or_else(|| panic!("no `{k}` in {v}")).to_string()
}

/// Creates a session with a first prompt; its id.
fn new_session(w: &Web, text: &str) -> String {
    let (code, r) = w.call("POST", "/api/sessions", Some(json!({ "text": text })));
    assert_eq!(code, 200, "{r}");
    str_of(&r, "id")
}

/// Waits (polling the API) until session `id` has a pending approval; its call id.
fn pending_call(w: &Web, id: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let (code, r) = w.call("GET", &format!("/api/sessions/{id}/approvals"), None);
        assert_eq!(code, 200, "{r}");
        if let Some(q) = r["pending"].as_array().and_then(|p| p.first()) {
            assert_eq!(q["tool"], "word_count", "{q}");
            return str_of(q, "call_id");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("no approval question in session {id}");
}

fn answer(w: &Web, id: &str, call: &str, outcome: &str) {
    let (code, r) =
        w.call("POST", &format!("/api/sessions/{id}/approvals/{call}"), Some(json!({ "outcome": outcome })));
    assert_eq!(code, 200, "{r}");
}

/// Session events until the `n`-th `turn/end`, with their seqs.
fn until_turn_ends(sse: &mut Sse, n: usize) -> Vec<Value> {
    let mut out = Vec::new();
    let mut ends = 0;
    while ends < n {
        let e = sse.next().unwrap_or_else(|| panic!("stream ended after {:?}", types(&out)));
        let v = e.json();
        assert_eq!(e.id.as_deref().map(str::to_string), v["seq"].as_u64().map(|s| s.to_string()), "SSE id is the seq");
        if v["type"] == "turn/end" {
            ends += 1;
        }
        out.push(v);
    }
    out
}

fn types(events: &[Value]) -> Vec<String> {
    events.iter().map(|e| e["type"].as_str().unwrap_or("?").to_string()).collect()
}

fn seqs(events: &[Value]) -> Vec<u64> {
    events.iter().map(|e| e["seq"].as_u64().unwrap_or(0)).collect()
}

fn summary(w: &Web, id: &str) -> Value {
    let (code, s) = w.call("GET", &format!("/api/sessions/{id}"), None);
    assert_eq!(code, 200, "{s}");
    s
}

#[test]
fn every_documented_route_answers_and_needs_the_token() {
    let w = serve(&[]);
    let (p, t) = (w.port, w.token.clone());
    let auth = ("X-Wharf-Token", t.as_str());
    let (code, doc) = w.call("GET", "/api/openapi.json", None);
    assert_eq!(code, 200);
    let id = new_session(&w, "How many words?");
    let call = pending_call(&w, &id);
    let paths = doc["paths"].as_object().unwrap_or_else(|| panic!("no paths: {doc}"));
    let mut operations = 0;
    for (path, ops) in paths {
        let concrete = path.replace("{id}", &id).replace("{call}", "nope");
        for method in ops.as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()).unwrap_or_default() {
            let method = method.to_uppercase();
            operations += 1;
            let streaming = concrete.ends_with("/events");
            let body = (method == "POST").then_some("{}");
            // No token, a wrong token: 401, whatever the route.
            for headers in [vec![], vec![("X-Wharf-Token", "0123456789abcdef-wrong")]] {
                let r = request(p, &method, &concrete, &headers, body);
                assert_eq!(r.status, 401, "{method} {path} without the token: {}", r.body);
            }
            // A foreign Host: 403; a cross-origin request (or stream): 403.
            let evil_host = format!("evil.example:{p}");
            let r = request(p, &method, &concrete, &[auth, ("Host", &evil_host)], body);
            assert_eq!(r.status, 403, "{method} {path} with a foreign Host");
            if method == "POST" || streaming {
                let evil = ("Origin", "http://evil.example");
                let status = if streaming {
                    open_sse(p, &concrete, &[auth, evil]).0
                } else {
                    request(p, &method, &concrete, &[auth, evil], body).status
                };
                assert_eq!(status, 403, "{method} {path} cross-origin");
            }
            // With the token the route exists (whatever it answers to `{}`).
            if streaming {
                let (status, sse) = open_sse(p, &concrete, &[auth]);
                assert_eq!(status, 200, "{method} {path}");
                drop(sse);
            } else if !concrete.ends_with("/cancel") {
                let r = request(p, &method, &concrete, &[auth], body);
                assert_ne!(r.status, 405, "{method} {path} is documented but not routed");
                assert!(r.status != 404 || r.body != r#"{"error":"not found"}"#, "{method} {path}: {}", r.body);
                assert!(r.status < 500, "{method} {path}: {} {}", r.status, r.body);
            }
        }
    }
    assert!(operations >= 18, "{operations} operations documented");
    // Anything else is a JSON 404 (no UI in `serve`), behind the token too.
    assert_eq!(request(p, "GET", "/api/nothing", &[auth], None).status, 404);
    assert_eq!(request(p, "GET", "/api/nothing", &[], None).status, 401);
    assert_eq!(request(p, "GET", "/", &[auth], None).status, 404);
    assert_eq!(request(p, "GET", "/app.js", &[auth], None).status, 404);
    // The question asked above is still there and still answerable.
    answer(&w, &id, &call, "rejected");
}

#[test]
fn sse_resumes_by_last_event_id_with_no_event_lost_or_repeated() -> anyhow::Result<()> {
    let w = serve(&[]);
    let id = new_session(&w, "How many words?");
    let mut sse = w.events(&format!("/api/sessions/{id}/events?from=1"), &[]);
    // Read a few events, then drop the connection mid-turn.
    let mut got: Vec<Value> = Vec::new();
    while got.len() < 6 {
        got.push(sse.next().unwrap_or_else(|| panic!("stream ended")).json());
    }
    drop(sse);
    let last = got.last().and_then(|e| e["seq"].as_u64()).unwrap_or(0).to_string();
    let call = pending_call(&w, &id);
    answer(&w, &id, &call, "allowed-once");
    // `from=1` is ignored when `Last-Event-ID` is sent.
    let mut again = w.events(&format!("/api/sessions/{id}/events?from=1"), &[("Last-Event-ID", &last)]);
    got.extend(until_turn_ends(&mut again, 1));
    let streamed = seqs(&got);
    let logged: Vec<u64> = w.log(&id).iter().map(|e| e.seq).collect();
    let end = streamed.last().copied().unwrap_or(0);
    assert_eq!(streamed, logged.iter().copied().filter(|s| *s <= end).collect::<Vec<_>>());
    assert_eq!(streamed, (1..=end).collect::<Vec<_>>(), "consecutive, from 1");
    wharf_core::invariants::check(&w.log(&id)).map_err(anyhow::Error::msg).context("checking the log's invariants")?;
    // The history route pages the same events.
    let (_, h) = w.call("GET", &format!("/api/sessions/{id}/history?from=3&limit=2"), None);
    assert_eq!(seqs(h["events"].as_array().unwrap_or(&vec![])), vec![3, 4], "{h}");
    assert_eq!(h["next"], 5);
    Ok(())
}

#[test]
fn prompt_steer_and_followup() -> anyhow::Result<()> {
    let w = serve(&[]);
    let id = new_session(&w, "How many words?");
    let mut sse = w.events(&format!("/api/sessions/{id}/events"), &[]);
    let call = pending_call(&w, &id);
    let s = summary(&w, &id);
    assert_eq!(
        (s["live"].clone(), s["running"].clone(), s["pending_approvals"].clone()),
        (json!(true), json!(true), json!(1))
    );
    // A turn is running (waiting for the approval): a prompt is refused,
    // a steer joins this turn, a followup waits for the next.
    let (code, r) = w.call("POST", &format!("/api/sessions/{id}/prompt"), Some(json!({"text": "again"})));
    assert_eq!(code, 409, "{r}");
    let (code, st) = w.call("POST", &format!("/api/sessions/{id}/steer"), Some(json!({"text": "Be brief."})));
    assert_eq!(code, 200, "{st}");
    let (code, fu) = w.call("POST", &format!("/api/sessions/{id}/followup"), Some(json!({"text": "Now a story."})));
    assert_eq!(code, 200, "{fu}");
    for route in ["prompt", "steer", "followup"] {
        let path = format!("/api/sessions/{id}/{route}");
        assert_eq!(w.call("POST", &path, Some(json!({"text": "  "}))).0, 400, "{route}: empty");
        assert_eq!(w.call("POST", &format!("/api/sessions/nope/{route}"), Some(json!({"text": "x"}))).0, 404);
    }
    answer(&w, &id, &call, "allowed-once");
    let events = until_turn_ends(&mut sse, 2);
    let first_end = events.iter().position(|e| e["type"] == "turn/end").unwrap_or(0);
    let claimed = |inbox: &Value| {
        events
            .iter()
            .position(|e| e["type"] == "inbox/spliced" && e["data"]["op"] == "claimed" && e["data"]["id"] == *inbox)
            .unwrap_or_else(|| panic!("{inbox} never claimed: {:?}", types(&events)))
    };
    assert!(claimed(&st["inbox_id"]) < first_end, "the steer joined the running turn");
    assert!(claimed(&fu["inbox_id"]) > first_end, "the followup waited for the next turn");
    let turns: BTreeSet<u64> =
        events.iter().filter(|e| e["type"] == "turn/end").filter_map(|e| e["data"]["turn"].as_u64()).collect();
    assert_eq!(turns.len(), 2);
    // Idle now: a prompt starts a turn.
    let (code, r) = w.call("POST", &format!("/api/sessions/{id}/prompt"), Some(json!({"text": "More."})));
    assert_eq!(code, 200, "{r}");
    until_turn_ends(&mut sse, 1);
    wharf_core::invariants::check(&w.log(&id)).map_err(anyhow::Error::msg).context("checking the log's invariants")?;
    Ok(())
}

#[test]
fn an_approval_pending_in_one_session_does_not_block_another() -> anyhow::Result<()> {
    let w = serve(&[]);
    let a = new_session(&w, "How many words? (a)");
    let b = new_session(&w, "How many words? (b)");
    let mut sse_b = w.events(&format!("/api/sessions/{b}/events"), &[]);
    let call_a = pending_call(&w, &a);
    let call_b = pending_call(&w, &b);
    // B goes on while A's question waits.
    answer(&w, &b, &call_b, "allowed-once");
    let events = until_turn_ends(&mut sse_b, 1);
    let end = events.last().cloned().unwrap_or_default();
    assert_eq!(end["data"]["reason"], "completed", "{end}");
    let result = events.iter().find(|e| e["type"] == "tool/result").cloned().unwrap_or_default();
    assert_eq!(result["data"]["is_error"], false, "{result}");
    let sa = summary(&w, &a);
    assert_eq!((sa["running"].clone(), sa["pending_approvals"].clone()), (json!(true), json!(1)), "{sa}");
    // An answer for A's call sent to B finds nothing; A still waits.
    let (code, _) =
        w.call("POST", &format!("/api/sessions/{b}/approvals/{call_a}"), Some(json!({"outcome": "rejected"})));
    assert_eq!(code, 404);
    assert_eq!(pending_call(&w, &a), call_a);
    // Then A is denied, and ends.
    let mut sse_a = w.events(&format!("/api/sessions/{a}/events"), &[]);
    answer(&w, &a, &call_a, "rejected");
    let events = until_turn_ends(&mut sse_a, 1);
    let decided = events.iter().find(|e| e["type"] == "approval/decided").cloned().unwrap_or_default();
    assert_eq!(
        (decided["data"]["outcome"].clone(), decided["data"]["by"].clone()),
        (json!("rejected"), json!("serve"))
    );
    let result = events.iter().find(|e| e["type"] == "tool/result").cloned().unwrap_or_default();
    assert_eq!(result["data"]["is_error"], true, "a denied call is an error result: {result}");
    for id in [&a, &b] {
        wharf_core::invariants::check(&w.log(id))
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("checking the log's invariants: {id}"))?;
    }
    Ok(())
}

#[test]
fn an_idle_session_is_unloaded_and_reloads_on_demand() -> anyhow::Result<()> {
    let w = serve(&["--idle-timeout", "0.5"]);
    let id = new_session(&w, "How many words?");
    let mut sse = w.events(&format!("/api/sessions/{id}/events"), &[]);
    // A pending approval keeps it loaded well past the timeout.
    let call = pending_call(&w, &id);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(summary(&w, &id)["live"], true);
    answer(&w, &id, &call, "allowed-once");
    let mut got = until_turn_ends(&mut sse, 1);
    // Quiet now: unloaded within a few timeouts, its log closed (another
    // writer could take it).
    let deadline = Instant::now() + Duration::from_secs(20);
    while summary(&w, &id)["live"] == true {
        assert!(Instant::now() < deadline, "never unloaded");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (_, info) = w.call("GET", "/api/info", None);
    assert_eq!(info["loaded"], 0, "{info}");
    let store = wharf_core::SessionStore::new(&w.sessions);
    let (log, _) = store.open(&id).context("the log is still held")?;
    drop(log);
    // A prompt loads it again; the stream opened before the unload goes on.
    let (code, r) = w.call("POST", &format!("/api/sessions/{id}/prompt"), Some(json!({"text": "A story?"})));
    assert_eq!(code, 200, "{r}");
    assert_eq!(summary(&w, &id)["live"], true);
    got.extend(until_turn_ends(&mut sse, 1));
    let streamed = seqs(&got);
    let first = streamed.first().copied().unwrap_or(0);
    let last = streamed.last().copied().unwrap_or(0);
    assert_eq!(streamed, (first..=last).collect::<Vec<_>>(), "no event lost or repeated across the unload");
    let text: String = got
        .iter()
        .filter(|e| e["type"] == "assistant/message")
        .map(|e| e["data"]["content"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(text.ends_with("a sandboxed component."), "the reloaded session's turn ran: {text}");
    wharf_core::invariants::check(&w.log(&id)).map_err(anyhow::Error::msg).context("checking the log's invariants")?;
    // The explicit route: quiet → unloaded; then nothing to unload.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut r = w.call("POST", &format!("/api/sessions/{id}/unload"), None).1;
    while r["unloaded"] != true && summary(&w, &id)["live"] == true {
        assert!(Instant::now() < deadline, "{r}");
        std::thread::sleep(Duration::from_millis(50));
        r = w.call("POST", &format!("/api/sessions/{id}/unload"), None).1;
    }
    assert_eq!(w.call("POST", &format!("/api/sessions/{id}/unload"), None).1["unloaded"], false);
    Ok(())
}

#[test]
fn fork_at_the_last_turn_and_at_a_seq() -> anyhow::Result<()> {
    let w = serve(&[]);
    let id = new_session(&w, "How many words?");
    let mut sse = w.events(&format!("/api/sessions/{id}/events"), &[]);
    let call = pending_call(&w, &id);
    answer(&w, &id, &call, "allowed-once");
    let events = until_turn_ends(&mut sse, 1);
    let end_seq = events.last().and_then(|e| e["seq"].as_u64()).unwrap_or(0);
    drop(sse);
    let (code, f) = w.call("POST", &format!("/api/sessions/{id}/fork"), None);
    assert_eq!(code, 200, "{f}");
    assert_eq!((f["at_seq"].as_u64(), f["parent"].as_str()), (Some(end_seq), Some(id.as_str())), "{f}");
    let fork = str_of(&f, "id");
    let s = summary(&w, &fork);
    assert_eq!(
        (s["parent"].as_str(), s["fork_seq"].as_u64(), s["live"].clone()),
        (Some(id.as_str()), Some(end_seq), json!(true)),
        "{s}"
    );
    // The fork holds the parent's events up to the fork point and takes turns of its own.
    let mut fsse = w.events(&format!("/api/sessions/{fork}/events?from=1"), &[]);
    let (code, _) = w.call("POST", &format!("/api/sessions/{fork}/prompt"), Some(json!({"text": "A story?"})));
    assert_eq!(code, 200);
    let fevents = until_turn_ends(&mut fsse, 2);
    assert_eq!(fevents.iter().filter(|e| e["type"] == "user/message").count(), 2, "{:?}", types(&fevents));
    wharf_core::invariants::check(&w.log(&fork))
        .map_err(anyhow::Error::msg)
        .context("checking the log's invariants")?;
    let parent_len = w.log(&id).len();
    assert_eq!(w.log(&id).last().map(|e| e.seq), Some(end_seq), "the parent is unchanged ({parent_len} events)");
    // Not a turn boundary, or no such session.
    let inside = events.iter().find(|e| e["type"] == "turn/start").and_then(|e| e["seq"].as_u64()).unwrap_or(0) + 1;
    assert_eq!(w.call("POST", &format!("/api/sessions/{id}/fork"), Some(json!({"at_seq": inside}))).0, 400);
    assert_eq!(w.call("POST", "/api/sessions/nope/fork", Some(json!({}))).0, 404);
    Ok(())
}

#[test]
fn serve_refuses_a_remote_bind_without_the_flag_and_a_token() -> anyhow::Result<()> {
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let run = |args: &[&str]| -> anyhow::Result<_> {
        let out = wharf_tests::wharf(home.path())
            .args(["serve", "--port", "0", "--profile", "demo", "--no-watch"])
            .args(args)
            .env_remove("WHARF_WEB_TOKEN")
            .output()
            .context("running wharf serve")?;
        Ok((out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned()))
    };
    let (code, err) = run(&["--bind", "0.0.0.0"])?;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--allow-remote"), "{err}");
    let (code, err) = run(&["--bind", "0.0.0.0", "--allow-remote"])?;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("token"), "{err}");
    let (code, err) = run(&["--idle-timeout", "-1"])?;
    assert_eq!(code, 2, "{err}");
    Ok(())
}

/// One raw request: `content_length` is sent as is (it may claim more than
/// `body`); the status, the `Content-Type` and the body.
fn raw(
    port: u16,
    token: &str,
    method: &str,
    path: &str,
    ctype: Option<&str>,
    body: &[u8],
    content_length: usize,
) -> (u16, String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connecting");
    s.set_read_timeout(Some(Duration::from_secs(30))).expect("setting a read timeout");
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Wharf-Token: {token}\r\n");
    if let Some(t) = ctype {
        head.push_str(&format!("Content-Type: {t}\r\n"));
    }
    head.push_str(&format!("Content-Length: {content_length}\r\nConnection: close\r\n\r\n"));
    s.write_all(head.as_bytes()).expect("sending the request");
    // The body goes from another thread while this one reads: the server
    // may answer before reading all of it (an over-size one).
    let mut w = s.try_clone().expect("duplicating the socket");
    let body = body.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = w.write_all(&body);
    });
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    let _ = writer.join();
    let text = String::from_utf8_lossy(&out).into_owned();
    // No answer at all shows as status 0 in the caller's assertion.
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or(("", ""));
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let ctype = head
        .lines()
        .find_map(|l| {
            l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("content-type")).map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_default();
    (status, ctype, body.to_string())
}

/// Every error answer is `{"error": "…"}`, also the framework's own: a
/// malformed JSON body, a body of the wrong shape or type, no JSON content
/// type, an over-size body, a bad query string, a method a route does not
/// take, an unknown path.
#[test]
fn every_error_answer_is_json_on_the_wire() -> anyhow::Result<()> {
    /// Method, path, content type, body, the length the head claims, the
    /// status expected.
    type Case<'a> = (&'a str, String, Option<&'a str>, &'a [u8], usize, u16);
    let w = serve(&[]);
    let (code, r) = w.call("POST", "/api/sessions", Some(json!({})));
    assert_eq!(code, 200, "{r}");
    let id = str_of(&r, "id");
    let json = Some("application/json");
    let big = 3usize << 20;
    let huge = vec![b' '; big];
    let cases: Vec<Case> = vec![
        ("POST", format!("/api/sessions/{id}/prompt"), json, b"{not json", 9, 400),
        ("POST", "/api/sessions".into(), json, b"{\"text\": ", 9, 400),
        ("POST", format!("/api/sessions/{id}/followup"), json, b"[1, 2]", 6, 422),
        ("POST", format!("/api/sessions/{id}/steer"), json, b"{\"text\": 5}", 11, 422),
        ("POST", format!("/api/sessions/{id}/approvals/nope"), json, b"{\"outcome\": \"maybe\"}", 20, 422),
        ("POST", format!("/api/sessions/{id}/fork"), json, b"{\"at_seq\": \"x\"}", 15, 422),
        ("POST", format!("/api/sessions/{id}/prompt"), Some("text/plain"), b"hello", 5, 415),
        ("POST", format!("/api/sessions/{id}/prompt"), None, b"", 0, 415),
        ("POST", format!("/api/sessions/{id}/followup"), json, &huge, big, 413),
        ("GET", format!("/api/sessions/{id}/history?from=abc"), None, b"", 0, 400),
        ("GET", "/api/sessions?workspace".into(), None, b"", 0, 200),
        ("DELETE", "/api/sessions".into(), None, b"", 0, 405),
        ("GET", format!("/api/sessions/{id}/prompt"), None, b"", 0, 405),
        ("PUT", "/api/info".into(), json, b"{}", 2, 405),
        ("GET", "/api/nothing".into(), None, b"", 0, 404),
        ("POST", "/nothing".into(), json, b"{}", 2, 404),
    ];
    for (method, path, ctype, body, len, status) in cases {
        let (got, content_type, text) = raw(w.port, &w.token, method, &path, ctype, body, len);
        assert_eq!(got, status, "{method} {path}: {text}");
        if status == 200 {
            continue;
        }
        assert!(content_type.starts_with("application/json"), "{method} {path}: {content_type} {text}");
        let v: Value = serde_json::from_str(&text).with_context(|| format!("parsing JSON: {method} {path}: {text}"))?;
        let msg = v["error"].as_str().unwrap_or_else(|| panic!("{method} {path}: no error string in {v}"));
        assert!(!msg.is_empty(), "{method} {path}: {v}");
    }
    // The session is fine after all that.
    let (code, r) = w.call("GET", &format!("/api/sessions/{id}"), None);
    assert_eq!(code, 200, "{r}");
    Ok(())
}

/// Under `wharf serve`, a session whose tool call waits on a FIFO (`fs`
/// `read` of a pipe nobody writes to; before, its open blocked) holds no runtime worker: a
/// second session, calling the same plugin, completes its turn, and the
/// first ends too. One worker thread makes the
/// difference plain (before, the read blocked it and the server stalled;
/// with more workers it took as many stuck calls).
#[test]
fn a_call_waiting_on_a_fifo_does_not_stall_other_sessions() -> anyhow::Result<()> {
    let profile = r#"
[agent]
adapter = "scripted"
max_steps = 5

[[plugin]]
id = "fs"
path = "${plugin_dir}/fs.wasm"
[plugin.grant]
dirs = ["${workspace}:ro"]
timeout_ms = 120000

[[plugin]]
id = "scripted"
path = "${plugin_dir}/llm-scripted.wasm"
[plugin.config]
model = "scripted-fifo"

[[plugin.config.turns]]
tool_calls = [{ name = "read", arguments = { path = "README.md" } }]
[[plugin.config.turns]]
text = "Read: "
echo_last_tool_result = true

[[plugin.config.branches]]
when = "PIPE"
[[plugin.config.branches.turns]]
tool_calls = [{ name = "read", arguments = { path = "pipe" } }]
[[plugin.config.branches.turns]]
text = "Piped: "
echo_last_tool_result = true
"#;
    let w = start_command("serve", profile, &[], &[("TOKIO_WORKER_THREADS", "1")]);
    let pipe = w.workspace().join("pipe");
    super::hardening_fs::mkfifo(&pipe);
    let a = new_session(&w, "PIPE: read the pipe");
    let mut sse_a = w.events(&format!("/api/sessions/{a}/events"), &[]);
    let (call, _) = sse_a.until("tool/call");
    assert_eq!(call["data"]["name"], "read", "{call}");
    // Let the read reach the pipe (an earlier B would only hide a stall).
    std::thread::sleep(Duration::from_millis(500));

    let b = new_session(&w, "read the readme");
    let mut sse_b = w.events(&format!("/api/sessions/{b}/events"), &[]);
    let events = until_turn_ends(&mut sse_b, 1);
    let end = events.last().cloned().unwrap_or_default();
    assert_eq!(end["data"]["reason"], "completed", "{end}");
    let result = events.iter().find(|e| e["type"] == "tool/result").cloned().unwrap_or_default();
    assert_eq!(result["data"]["is_error"], false, "{result}");
    assert!(result["data"]["content"].as_str().unwrap_or("").contains("sample project"), "{result}");
    // A's read of the pipe ends too (an error: no hang, no stuck worker).
    let events = until_turn_ends(&mut sse_a, 1);
    let end = events.last().cloned().unwrap_or_default();
    assert_eq!(end["data"]["reason"], "completed", "{end}");
    for id in [&a, &b] {
        wharf_core::invariants::check(&w.log(id))
            .map_err(anyhow::Error::msg)
            .with_context(|| format!("checking the log's invariants: {id}"))?;
    }
    Ok(())
}

/// Issue 40: an MCP server's elicitation during a call is a pending
/// question of the session (`GET …/questions`, `question/asked` in the
/// stream); an answer that does not fit the form is 400 and the question
/// stays open; a fitting one reaches the server (the tool result holds it).
#[test]
fn mcp_elicitation_is_answered_over_http() {
    let fx = crate::mcp::fixture().display().to_string();
    let profile = format!(
        r#"
[agent]
adapter = "scripted"
max_steps = 5

[[plugin]]
id = "scripted"
path = "${{plugin_dir}}/llm-scripted.wasm"
[plugin.config]
model = "scripted-serve"
[[plugin.config.turns]]
tool_calls = [{{ name = "mcp__fx__ask", arguments = {{}} }}]
[[plugin.config.turns]]
text = "Answer: "
echo_last_tool_result = true

[[mcp]]
name = "fx"
command = "{fx}"
args = ["stdio", "--elicit"]
required = true
"#
    );
    let w = super::web::start_command("serve", &profile, &[], &[]);
    let id = new_session(&w, "go");
    let deadline = Instant::now() + Duration::from_secs(60);
    let q = loop {
        let (code, r) = w.call("GET", &format!("/api/sessions/{id}/questions"), None);
        assert_eq!(code, 200, "{r}");
        if let Some(q) = r["pending"].as_array().and_then(|p| p.first()) {
            break q.clone();
        }
        assert!(Instant::now() < deadline, "no question in session {id}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!((q["source"].as_str(), q["message"].as_str()), (Some("mcp:fx"), Some("Who is asking?")), "{q}");
    let path = format!("/api/sessions/{id}/questions/{}", str_of(&q, "call_id"));
    let (code, r) = w.call("POST", &path, Some(json!({"action": "accept", "content": {"count": 0}})));
    assert_eq!(code, 400, "a misfit is refused: {r}");
    let (code, r) = w.call("POST", &path, Some(json!({"action": "accept", "content": {"name": "Bo", "count": 3}})));
    assert_eq!(code, 200, "{r}");
    let mut sse = w.events(&format!("/api/sessions/{id}/events?from=1"), &[]);
    let events = until_turn_ends(&mut sse, 1);
    let kinds = types(&events);
    let asked = kinds.iter().position(|t| t == "question/asked");
    let answered = kinds.iter().position(|t| t == "question/answered");
    assert!(asked.is_some() && asked < answered, "{kinds:?}");
    let result = events.iter().find(|e| e["type"] == "tool/result").cloned().unwrap_or_default();
    let text = result["data"]["content"].as_str().unwrap_or_default();
    assert!(text.contains("\"name\":\"Bo\"") && text.contains("\"count\":3"), "{result}");
}

/// Issue 40: a permission policy that asks (`policy-ask`, world
/// `policy-questions-plugin`, granted `questions`) puts its question on the
/// call it decides (`GET …/questions`, named by the policy row); the reason
/// given over HTTP is the reason of the approval the policy then asks for
/// (`on_accept = "ask"`), and the call runs once approved. A question
/// nobody answers ends at the policy row's own deadline (`timeout_ms`):
/// the policy gets `cancel`, fails closed, and the call is denied — the
/// log says so.
#[test]
fn a_policys_question_is_answered_over_http_and_ends_at_the_policys_deadline() {
    let _ = wharf_tests::plugin(wharf_tests::plugins::POLICY_ASK);
    let profile = r#"
[agent]
adapter = "scripted"
max_steps = 5

[[plugin]]
id = "text"
path = "${plugin_dir}/text.wasm"
[plugin.grant]
dirs = ["${workspace}:ro"]

[[plugin]]
id = "why"
path = "${plugin_dir}/policy-ask.wasm"
[plugin.config]
tools = ["word_count"]
on_accept = "ask"
[plugin.grant]
questions = true
timeout_ms = 120000

[[plugin]]
id = "quick"
path = "${plugin_dir}/policy-ask.wasm"
[plugin.config]
tools = ["echo"]
[plugin.grant]
questions = true
timeout_ms = 1500

[[plugin]]
id = "scripted"
path = "${plugin_dir}/llm-scripted.wasm"
[plugin.config]
model = "scripted-serve"
[[plugin.config.turns]]
tool_calls = [{ name = "word_count", arguments = { path = "README.md" } }]
[[plugin.config.turns]]
text = "Count: "
echo_last_tool_result = true
[[plugin.config.branches]]
when = "QUICK"
[[plugin.config.branches.turns]]
tool_calls = [{ name = "echo", arguments = { text = "hi" } }]
[[plugin.config.branches.turns]]
text = "Then: "
echo_last_tool_result = true
"#;
    let w = super::web::start_command("serve", profile, &[], &[]);
    let id = new_session(&w, "count the words");
    let deadline = Instant::now() + Duration::from_secs(60);
    let q = loop {
        let (code, r) = w.call("GET", &format!("/api/sessions/{id}/questions"), None);
        assert_eq!(code, 200, "{r}");
        if let Some(q) = r["pending"].as_array().and_then(|p| p.first()) {
            break q.clone();
        }
        assert!(Instant::now() < deadline, "no question in session {id}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(q["source"], "why", "{q}");
    assert!(q["message"].as_str().unwrap_or_default().contains("`word_count`"), "{q}");
    let call = str_of(&q, "call_id");
    let path = format!("/api/sessions/{id}/questions/{call}");
    let (code, r) =
        w.call("POST", &path, Some(json!({"action": "accept", "content": {"reason": "the tests need it"}})));
    assert_eq!(code, 200, "{r}");
    // The policy's decision uses the answer: its approval shows the reason.
    assert_eq!(pending_call(&w, &id), call);
    let (code, r) = w.call("GET", &format!("/api/sessions/{id}/approvals"), None);
    assert_eq!(code, 200, "{r}");
    let reason = r["pending"][0]["reason"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains("reason given for `word_count`: the tests need it"), "{r}");
    answer(&w, &id, &call, "allowed-once");
    let mut sse = w.events(&format!("/api/sessions/{id}/events?from=1"), &[]);
    let events = until_turn_ends(&mut sse, 1);
    let kinds = types(&events);
    let at = |t: &str| kinds.iter().position(|k| k == t).unwrap_or_else(|| panic!("no {t} in {kinds:?}"));
    assert!(at("tool/call") < at("question/asked"), "{kinds:?}");
    assert!(at("question/answered") < at("policy/decision"), "{kinds:?}");
    assert!(at("policy/decision") < at("approval/asked"), "{kinds:?}");
    let asked = &events[at("question/asked")];
    assert_eq!(
        (asked["data"]["call_id"].as_str(), asked["data"]["source"].as_str()),
        (Some(call.as_str()), Some("why"))
    );
    let result = &events[at("tool/result")];
    assert_eq!(result["data"]["is_error"], false, "{result}");

    // Nobody answers `quick`'s question: its 1.5 s deadline ends it.
    let id = new_session(&w, "QUICK: echo something");
    let mut sse = w.events(&format!("/api/sessions/{id}/events"), &[]);
    let events = until_turn_ends(&mut sse, 1);
    let kinds = types(&events);
    let answered = events.iter().find(|e| e["type"] == "question/answered").unwrap_or_else(|| panic!("{kinds:?}"));
    assert_eq!(answered["data"]["action"], "cancel", "{answered}");
    let decision = events.iter().find(|e| e["type"] == "policy/decision").unwrap_or_else(|| panic!("{kinds:?}"));
    assert_eq!(decision["data"]["verdict"], "deny", "{decision}");
    let reason = decision["data"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("quick: policy-ask: no reason given for `echo` (nobody answered)"), "{decision}");
    let result = events.iter().find(|e| e["type"] == "tool/result").unwrap_or_else(|| panic!("{kinds:?}"));
    assert_eq!(result["data"]["error_code"], "DENIED", "{result}");
    let (code, r) = w.call("GET", &format!("/api/sessions/{id}/questions"), None);
    assert_eq!((code, r["pending"].as_array().map(Vec::len)), (200, Some(0)), "the question is withdrawn: {r}");
}
