//! `wharf web` end to end: token, Host and Origin checks over raw HTTP, the
//! bind rules, a session driven through the API (approval, Last-Event-ID,
//! fork, prompt), plugin events with a hot reload, and a headless Chromium
//! run of the page (tests/browser).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};
use wharf_tests::plugins;

/// A running `wharf web`.
pub struct Web {
    child: Option<Child>,
    pub port: u16,
    pub token: String,
    pub url: String,
    home: Option<tempfile::TempDir>,
    ws: Option<tempfile::TempDir>,
    pub sessions: PathBuf,
    stderr: PathBuf,
    /// The subcommand: `web` or `serve`.
    command: &'static str,
}

impl Drop for Web {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Writes a profile into a fresh home and starts `wharf web` on a free port.
pub fn start(profile: &str, extra: &[&str], env: &[(&str, &str)]) -> Web {
    start_command("web", profile, extra, env)
}

/// Like [`start`], with `wharf COMMAND` (`web` or `serve`).
pub fn start_command(command: &'static str, profile: &str, extra: &[&str], env: &[(&str, &str)]) -> Web {
    let _ = wharf_tests::plugin(plugins::TEXT);
    let home = tempfile::tempdir().expect("creating a temp dir");
    let ws = tempfile::tempdir().expect("creating a temp dir");
    std::fs::write(ws.path().join("README.md"), "# Sample\n\nA sample project with a few words.\n")
        .expect("writing README.md");
    std::fs::write(home.path().join("profile.toml"), profile).expect("writing profile.toml");
    let sessions = home.path().join("sessions");
    launch(command, home, ws, sessions, extra, env)
}

fn launch(
    command: &'static str,
    home: tempfile::TempDir,
    ws: tempfile::TempDir,
    sessions: PathBuf,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Web {
    let stderr = home.path().join("web.stderr");
    let mut cmd = wharf_tests::wharf(home.path());
    cmd.args([command, "--port", "0", "--profile"])
        .arg(home.path().join("profile.toml"))
        .arg("-w")
        .arg(ws.path())
        .arg("--session-dir")
        .arg(&sessions)
        .args(extra)
        .env_remove("WHARF_WEB_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr).expect("creating the stderr file"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn wharf web");
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        if let Some(Ok(l)) = lines.next() {
            let _ = tx.send(l);
        }
        for _ in lines {}
    });
    let url = match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(u) => u,
        Err(_) => {
            let _ = child.kill();
            let err = std::fs::read_to_string(&stderr).unwrap_or_default();
            panic!("wharf {command} printed no URL: {err}");
        }
    };
    let rest = url.strip_prefix("http://127.0.0.1:").unwrap_or_else(|| panic!("unexpected first line {url}"));
    let (port, token) = rest.split_once("/?token=").unwrap_or_else(|| panic!("no token in {url}"));
    let port: u16 = port.parse().with_context(|| format!("no port in {url}")).expect("wharf printed its URL");
    Web {
        child: Some(child),
        port,
        token: token.to_string(),
        url,
        home: Some(home),
        ws: Some(ws),
        sessions,
        stderr,
        command,
    }
}

impl Web {
    /// The workspace directory the server was started with (`-w`).
    pub fn workspace(&self) -> &std::path::Path {
        self.ws.as_ref().map_or(std::path::Path::new(""), |d| d.path())
    }

    /// Stops this server and starts another over the same home, workspace and sessions.
    pub fn restart(mut self) -> Web {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let (home, ws) = (self.home.take(), self.ws.take());
        let (Some(home), Some(ws)) = (home, ws) else { panic!("restart twice") };
        launch(self.command, home, ws, self.sessions.clone(), &[], &[])
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn auth(&self) -> (&'static str, String) {
        ("X-Wharf-Token", self.token.clone())
    }

    /// An authorized JSON request.
    pub fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let (k, v) = self.auth();
        let body = body.map(|b| b.to_string());
        let r = request(self.port, method, path, &[(k, &v)], body.as_deref());
        let json = serde_json::from_str(&r.body).unwrap_or(Value::Null);
        (r.status, json)
    }

    /// An authorized event stream.
    pub fn events(&self, path: &str, extra: &[(&str, &str)]) -> Sse {
        let (k, v) = self.auth();
        let mut headers = vec![(k, v.as_str())];
        headers.extend_from_slice(extra);
        let (status, sse) = open_sse(self.port, path, &headers);
        assert_eq!(status, 200, "{path}: {status}");
        sse.unwrap_or_else(|| panic!("no stream"))
    }

    /// The session log, read from disk.
    pub fn log(&self, id: &str) -> Vec<wharf_core::Event> {
        wharf_core::SessionStore::new(&self.sessions).load(id).expect("loading the session").events
    }
}

pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

fn send_head(
    stream: &mut TcpStream,
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) {
    let mut req = format!("{method} {path} HTTP/1.1\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: 127.0.0.1:{port}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        req.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", b.len()));
    } else if method == "POST" {
        req.push_str("Content-Length: 0\r\n");
    }
    req.push_str("Connection: close\r\n\r\n");
    if let Some(b) = body {
        req.push_str(b);
    }
    stream.write_all(req.as_bytes()).expect("writing");
}

fn read_head(reader: &mut impl BufRead) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    reader.read_line(&mut line).expect("reading a line");
    let status = line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).expect("reading a line");
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    (status, headers)
}

/// One HTTP/1.1 request over a fresh connection.
pub fn request(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&str>) -> Resp {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connecting");
    stream.set_read_timeout(Some(Duration::from_secs(30))).expect("setting a read timeout");
    send_head(&mut stream, port, method, path, headers, body);
    let mut reader = BufReader::new(stream);
    let (status, headers) = read_head(&mut reader);
    let chunked = headers.iter().any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let mut body = String::new();
    if chunked {
        Chunked { inner: reader, left: 0, done: false }.read_to_string(&mut body).expect("reading mut body");
    } else {
        reader.read_to_string(&mut body).expect("reading mut body");
    }
    Resp { status, headers, body }
}

/// Chunked transfer decoding.
struct Chunked<R> {
    inner: R,
    left: usize,
    done: bool,
}

impl<R: BufRead> Read for Chunked<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            let mut line = String::new();
            while line.trim().is_empty() {
                line.clear();
                if self.inner.read_line(&mut line)? == 0 {
                    self.done = true;
                    return Ok(0);
                }
            }
            let size = line.trim().split(';').next().unwrap_or("0");
            let size = usize::from_str_radix(size, 16).map_err(std::io::Error::other)?;
            if size == 0 {
                self.done = true;
                return Ok(0);
            }
            self.left = size;
        }
        let n = buf.len().min(self.left);
        let n = self.inner.read(&mut buf[..n])?;
        self.left -= n;
        Ok(n)
    }
}

/// A server-sent event stream.
pub struct Sse {
    reader: BufReader<Chunked<BufReader<TcpStream>>>,
}

/// One event: `id`, `event` name and `data`.
#[derive(Debug, Clone)]
pub struct SseEvent {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

impl SseEvent {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or(Value::Null)
    }
}

pub fn open_sse(port: u16, path: &str, headers: &[(&str, &str)]) -> (u16, Option<Sse>) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connecting");
    stream.set_read_timeout(Some(Duration::from_secs(60))).expect("setting a read timeout");
    let mut h = headers.to_vec();
    h.push(("Accept", "text/event-stream"));
    send_head(&mut stream, port, "GET", path, &h, None);
    let mut reader = BufReader::new(stream);
    let (status, _) = read_head(&mut reader);
    if status != 200 {
        return (status, None);
    }
    (status, Some(Sse { reader: BufReader::new(Chunked { inner: reader, left: 0, done: false }) }))
}

impl Sse {
    /// The next event (comments and keep-alives skipped); `None` when the
    /// stream ends or nothing but keep-alives came for 60 s.
    pub fn next(&mut self) -> Option<SseEvent> {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut ev = SseEvent { id: None, event: None, data: String::new() };
        let mut any = false;
        loop {
            if Instant::now() > deadline {
                return None;
            }
            let mut line = String::new();
            match self.reader.read_line(&mut line) {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
            let l = line.trim_end_matches(['\r', '\n']);
            if l.is_empty() {
                if any {
                    return Some(ev);
                }
                continue;
            }
            if l.starts_with(':') {
                continue;
            }
            let (k, v) = l.split_once(':').map(|(k, v)| (k, v.strip_prefix(' ').unwrap_or(v))).unwrap_or((l, ""));
            any = true;
            match k {
                "id" => ev.id = Some(v.to_string()),
                "event" => ev.event = Some(v.to_string()),
                "data" => {
                    if !ev.data.is_empty() {
                        ev.data.push('\n');
                    }
                    ev.data.push_str(v);
                }
                _ => {}
            }
        }
    }

    /// Session events until one of type `ty` (returned with everything before it).
    pub fn until(&mut self, ty: &str) -> (Value, Vec<Value>) {
        let mut seen = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            let Some(e) = self.next() else { break };
            let v = e.json();
            if v["type"] == ty {
                return (v, seen);
            }
            seen.push(v);
        }
        let types: Vec<&str> = seen.iter().map(|v| v["type"].as_str().unwrap_or("?")).collect();
        panic!("no `{ty}` event; saw {types:?}");
    }
}

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
model = "scripted-web"
chunk_size = 4

[[plugin.config.turns]]
reasoning = "Count the words of the README."
text = "Let me count the words in README.md."
tool_calls = [{ name = "word_count", arguments = { path = "README.md" } }]

[[plugin.config.turns]]
text = "The count is: "
echo_last_tool_result = true

[[plugin.config.turns]]
text = "Once upon a time there was a harness whose every capability was a sandboxed component."
delay_ms = 150
"#;

/// Turns after [`GATED`]'s (so its first two stay as they are): a
/// component tool that asks the user a question (`evil`'s `ask`, granted
/// `questions`), then the answer echoed.
const ASKING_TURN: &str = r#"
[[plugin.config.turns]]
tool_calls = [{ name = "ask", arguments = {} }]

[[plugin.config.turns]]
text = "Answered: "
echo_last_tool_result = true

[[plugin]]
id = "evil"
path = "${plugin_dir}/evil.wasm"
[plugin.grant]
questions = true
"#;

/// The slow turn's full text (the browser cancels it part-way).
const SLOW_TEXT: &str = "Once upon a time there was a harness whose every capability was a sandboxed component.";

#[test]
fn token_missing_or_wrong_is_401_and_the_url_sets_a_cookie() {
    let w = start(GATED, &[], &[]);
    let p = w.port;
    assert_eq!(request(p, "GET", "/api/sessions", &[], None).status, 401);
    assert_eq!(request(p, "GET", "/api/sessions", &[("X-Wharf-Token", "wrong")], None).status, 401);
    assert_eq!(request(p, "GET", "/api/sessions", &[("Authorization", "Bearer wrong")], None).status, 401);
    assert_eq!(request(p, "POST", "/api/sessions", &[], Some("{}")).status, 401);
    assert_eq!(request(p, "GET", "/api/sessions/x/events", &[("Accept", "text/event-stream")], None).status, 401);
    assert_eq!(request(p, "GET", "/api/plugins", &[], None).status, 401);
    let page = request(p, "GET", "/", &[], None);
    assert_eq!(page.status, 401);
    assert!(page.body.contains("printed at start"), "{}", page.body);
    assert_eq!(request(p, "GET", "/app.js", &[], None).status, 401);
    assert_eq!(request(p, "GET", "/?token=wrong", &[], None).status, 401);

    let t = w.token.clone();
    assert_eq!(request(p, "GET", "/api/sessions", &[("X-Wharf-Token", &t)], None).status, 200);
    let bearer = format!("Bearer {t}");
    assert_eq!(request(p, "GET", "/api/sessions", &[("Authorization", &bearer)], None).status, 200);

    // The printed URL: the token becomes an HttpOnly, SameSite=Strict cookie.
    let r = request(p, "GET", &format!("/?token={t}"), &[], None);
    assert_eq!(r.status, 303);
    assert_eq!(r.header("location"), Some("/"));
    let cookie = r.header("set-cookie").unwrap_or_else(|| panic!("no cookie")).to_string();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");
    let pair = cookie.split(';').next().unwrap_or("").to_string();
    let page = request(p, "GET", "/", &[("Cookie", &pair)], None);
    assert_eq!(page.status, 200);
    assert!(page.body.contains("<script src=\"/app.js\">"), "{}", page.body);
    let csp = page.header("content-security-policy").unwrap_or("");
    assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(request(p, "GET", "/app.js", &[("Cookie", &pair)], None).status, 200);
    let wrong_cookie = format!("wharf_token_{p}=nope");
    assert_eq!(request(p, "GET", "/api/info", &[("Cookie", &wrong_cookie)], None).status, 401);
}

#[test]
fn bad_host_or_origin_is_403() {
    let w = start(GATED, &[], &[]);
    let (p, t) = (w.port, w.token.clone());
    let auth = ("X-Wharf-Token", t.as_str());
    let evil_host = format!("evil.example:{p}");
    // DNS rebinding: a valid token but someone else's host name.
    assert_eq!(request(p, "GET", "/api/sessions", &[auth, ("Host", &evil_host)], None).status, 403);
    assert_eq!(request(p, "GET", "/api/sessions", &[auth, ("Host", "127.0.0.1:1")], None).status, 403);
    assert_eq!(request(p, "GET", "/", &[("Host", &evil_host)], None).status, 403);
    let localhost = format!("localhost:{p}");
    assert_eq!(request(p, "GET", "/api/sessions", &[auth, ("Host", &localhost)], None).status, 200);

    // Cross-origin state changes and streams.
    let evil = ("Origin", "http://evil.example");
    assert_eq!(request(p, "POST", "/api/sessions", &[auth, evil], Some("{}")).status, 403);
    assert_eq!(request(p, "POST", "/api/sessions/x/cancel", &[auth, evil], None).status, 403);
    assert_eq!(open_sse(p, "/api/plugins/events", &[auth, evil]).0, 403);
    let other_port = format!("http://127.0.0.1:{}", p.wrapping_add(1));
    assert_eq!(request(p, "POST", "/api/sessions", &[auth, ("Origin", &other_port)], Some("{}")).status, 403);
    assert_eq!(request(p, "POST", "/api/sessions", &[auth, ("Sec-Fetch-Site", "cross-site")], Some("{}")).status, 403);
    assert_eq!(request(p, "POST", "/api/sessions", &[auth, ("Origin", "null")], Some("{}")).status, 403);
    // Same origin is fine.
    let same = format!("http://127.0.0.1:{p}");
    let r = request(p, "POST", "/api/sessions", &[auth, ("Origin", &same)], Some("{}"));
    assert_eq!(r.status, 200, "{}", r.body);
    let (status, sse) = open_sse(p, "/api/plugins/events", &[auth, ("Origin", &same)]);
    assert_eq!(status, 200);
    drop(sse);
}

#[test]
fn non_loopback_bind_needs_allow_remote_and_a_token() -> anyhow::Result<()> {
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let run = |args: &[&str], env: Option<&str>| -> anyhow::Result<_> {
        let mut c = wharf_tests::wharf(home.path());
        c.args(["web", "--port", "0", "--profile", "demo", "--no-watch"]).args(args).env_remove("WHARF_WEB_TOKEN");
        if let Some(t) = env {
            c.env("WHARF_WEB_TOKEN", t);
        }
        let out = c.output().context("running wharf web")?;
        Ok((out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned(), out.stdout))
    };
    let (code, err, out) = run(&["--bind", "0.0.0.0"], None)?;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("non-loopback") && err.contains("--allow-remote"), "{err}");
    assert!(out.is_empty(), "nothing printed on stdout");
    let (code, err, _) = run(&["--bind", "0.0.0.0", "--allow-remote"], None)?;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("token"), "{err}");
    let (code, err, _) = run(&["--bind", "0.0.0.0", "--allow-remote", "--token", "short"], None)?;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("at least 16"), "{err}");
    let (code, err, _) = run(&["--bind", "192.0.2.1"], Some("a-long-enough-token-123"))?;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--allow-remote"), "{err}");
    let (code, err, _) = run(&["--bind", "not-an-address"], None)?;
    assert_eq!(code, 2, "{err}");

    // With both, it starts (and uses the configured token).
    let w = start(GATED, &["--bind", "0.0.0.0", "--allow-remote"], &[("WHARF_WEB_TOKEN", "a-long-enough-token-123")]);
    assert_eq!(w.token, "a-long-enough-token-123");
    let auth = ("X-Wharf-Token", "a-long-enough-token-123");
    assert_eq!(request(w.port, "GET", "/api/info", &[auth], None).status, 200);
    assert_eq!(request(w.port, "GET", "/api/info", &[], None).status, 401);
    Ok(())
}

#[test]
fn a_session_through_the_api_approval_resume_point_and_fork() -> anyhow::Result<()> {
    let w = start(GATED, &[], &[]);
    let (code, r) = w.call("POST", "/api/sessions", Some(json!({"text": "How many words?"})));
    assert_eq!(code, 200, "{r}");
    let id = r["id"].as_str().unwrap_or_else(|| panic!("{r}")).to_string();
    let mut sse = w.events(&format!("/api/sessions/{id}/events?from=1"), &[]);
    let (asked, before) = sse.until("approval/asked");
    assert_eq!(before[0]["type"], "session/start");
    assert!(before.iter().any(|e| e["type"] == "assistant/chunk"), "streamed chunks");
    assert_eq!(asked["data"]["tool"], "word_count");
    assert_eq!(asked["data"]["reason"], "gate: word counts need a human");
    let call = asked["data"]["call_id"].as_str().unwrap_or("").to_string();

    // A bad answer, then the real one; a second answer finds nothing.
    let path = format!("/api/sessions/{id}/approvals/{call}");
    assert_eq!(w.call("POST", &path, Some(json!({"outcome": "maybe"}))).0, 422);
    assert_eq!(w.call("POST", &path, Some(json!({"outcome": "cancelled"}))).0, 400);
    let (code, r) = w.call("POST", &path, Some(json!({"outcome": "allowed-once"})));
    assert_eq!(code, 200, "{r}");
    assert_eq!(w.call("POST", &path, Some(json!({"outcome": "allowed-once"}))).0, 404);
    let (decided, _) = sse.until("approval/decided");
    assert_eq!(decided["data"]["outcome"], "allowed-once");
    assert_eq!(decided["data"]["by"], "web");
    let (result, _) = sse.until("tool/result");
    assert_eq!(result["data"]["is_error"], false);
    assert!(result["data"]["content"].as_str().unwrap_or("").contains("words"), "{result}");
    let (end, _) = sse.until("turn/end");
    assert_eq!(end["data"]["reason"], "completed");
    let end_seq = end["seq"].as_u64().unwrap_or(0);
    drop(sse);

    // Idle: cancel does nothing; the listing shows the session open and idle.
    assert_eq!(w.call("POST", &format!("/api/sessions/{id}/cancel"), None).1["cancelled"], false);
    let (_, list) = w.call("GET", "/api/sessions", None);
    let me = list.as_array().and_then(|l| l.iter().find(|s| s["id"] == id.as_str())).cloned().unwrap_or_default();
    assert_eq!(
        (me["live"].clone(), me["running"].clone(), me["title"].clone()),
        (json!(true), json!(false), json!("How many words?"))
    );

    // Reconnecting with Last-Event-ID resumes right after it: no gap, no duplicate.
    let mut again = w.events(&format!("/api/sessions/{id}/events?from=1"), &[("Last-Event-ID", "5")]);
    let first = again.next().unwrap_or_else(|| panic!("no event"));
    assert_eq!(first.id.as_deref(), Some("6"));
    assert_eq!(first.json()["seq"], 6);
    drop(again);

    let events = w.log(&id);
    wharf_core::invariants::check(&events).map_err(anyhow::Error::msg).context("checking the log's invariants")?;
    assert_eq!(events.last().map(|e| e.seq), Some(end_seq));

    // Fork at the turn end; the fork is open and takes a prompt.
    let (code, f) = w.call("POST", &format!("/api/sessions/{id}/fork"), Some(json!({})));
    assert_eq!(code, 200, "{f}");
    assert_eq!(f["at_seq"], end_seq);
    let fork = f["id"].as_str().unwrap_or("").to_string();
    assert_ne!(fork, id);
    let (_, s) = w.call("GET", &format!("/api/sessions/{fork}"), None);
    assert_eq!((s["parent"].as_str(), s["live"].as_bool()), (Some(id.as_str()), Some(true)), "{s}");
    assert_eq!(w.call("POST", &format!("/api/sessions/{id}/fork"), Some(json!({"at_seq": 9}))).0, 400);
    let mut fsse = w.events(&format!("/api/sessions/{fork}/events?from={}", end_seq + 1), &[]);
    let (code, r) = w.call("POST", &format!("/api/sessions/{fork}/prompt"), Some(json!({"text": "And a story?"})));
    assert_eq!(code, 200, "{r}");
    let (end, seen) = fsse.until("turn/end");
    assert_eq!(end["data"]["reason"], "completed");
    assert!(seen.iter().all(|e| e["seq"].as_u64().unwrap_or(0) > end_seq), "stream started after the fork point");
    let text: String = seen
        .iter()
        .filter(|e| e["type"] == "assistant/message")
        .map(|e| e["data"]["content"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(text, SLOW_TEXT);
    wharf_core::invariants::check(&w.log(&fork))
        .map_err(anyhow::Error::msg)
        .context("checking the log's invariants")?;

    // Errors: unknown session, empty prompt, unknown approval.
    assert_eq!(w.call("POST", "/api/sessions/nope/prompt", Some(json!({"text": "x"}))).0, 404);
    assert_eq!(w.call("POST", &format!("/api/sessions/{id}/prompt"), Some(json!({"text": " "}))).0, 400);
    assert_eq!(w.call("GET", "/api/sessions/nope", None).0, 404);
    assert_eq!(
        w.call("POST", &format!("/api/sessions/{id}/approvals/nope"), Some(json!({"outcome": "rejected"}))).0,
        404
    );
    Ok(())
}

#[test]
fn a_stored_session_is_shown_then_resumed_and_cancelled() -> anyhow::Result<()> {
    // A session written by an earlier server is readable, then resumed here.
    let w = start(GATED, &[], &[]);
    let (_, r) = w.call("POST", "/api/sessions", Some(json!({"text": "count"})));
    let id = r["id"].as_str().unwrap_or("").to_string();
    let mut sse = w.events(&format!("/api/sessions/{id}/events"), &[]);
    let (asked, _) = sse.until("approval/asked");
    let call = asked["data"]["call_id"].as_str().unwrap_or("").to_string();
    let path = format!("/api/sessions/{id}/approvals/{call}");
    assert_eq!(w.call("POST", &path, Some(json!({"outcome": "allowed-for-session"}))).0, 200);
    sse.until("turn/end");
    drop(sse);
    let w = w.restart();
    let (_, s) = w.call("GET", &format!("/api/sessions/{id}"), None);
    assert_eq!(s["live"], false, "{s}");
    let mut sse = w.events(&format!("/api/sessions/{id}/events"), &[]);
    let (end, _) = sse.until("turn/end");
    assert_eq!(end["data"]["reason"], "completed");
    // Resume, then a slow turn, cancelled half-way.
    assert_eq!(w.call("POST", &format!("/api/sessions/{id}/resume"), None).0, 200);
    assert_eq!(w.call("POST", &format!("/api/sessions/{id}/prompt"), Some(json!({"text": "story"}))).0, 200);
    let (chunk, _) = sse.until("assistant/chunk");
    assert!(chunk["data"]["text"].as_str().is_some_and(|t| SLOW_TEXT.starts_with(t)), "{chunk}");
    let (code, r) = w.call("POST", &format!("/api/sessions/{id}/cancel"), None);
    assert_eq!((code, r["cancelled"].clone()), (200, json!(true)));
    let (end, seen) = sse.until("turn/end");
    assert_eq!(end["data"]["reason"], "cancelled");
    let msg = seen.iter().find(|e| e["type"] == "assistant/message").cloned().unwrap_or_default();
    assert_eq!(msg["data"]["interrupted"], true);
    let partial = msg["data"]["content"].as_str().unwrap_or("");
    assert!(SLOW_TEXT.starts_with(partial) && partial.len() < SLOW_TEXT.len(), "{partial}");
    wharf_core::invariants::check(&w.log(&id)).map_err(anyhow::Error::msg).context("checking the log's invariants")?;
    Ok(())
}

#[test]
fn plugins_api_shows_grants_and_streams_hot_reloads() -> anyhow::Result<()> {
    let home_plugins = tempfile::tempdir().context("creating a temp dir")?;
    let text_path = home_plugins.path().join("text.wasm");
    std::fs::copy(wharf_tests::plugin(plugins::TEXT), &text_path).context("copying the text component")?;
    let profile = GATED.replace("${plugin_dir}/text.wasm", &text_path.display().to_string());
    let w = start(&profile, &[], &[]);
    let (code, p) = w.call("GET", "/api/plugins", None);
    assert_eq!(code, 200);
    let text = p["plugins"].as_array().and_then(|a| a.iter().find(|x| x["id"] == "text")).cloned().unwrap_or_default();
    let old_digest = text["digest"].as_str().unwrap_or("").to_string();
    assert_eq!(old_digest.len(), 64, "{text}");
    assert_eq!(text["kinds"], json!(["tool"]));
    assert_eq!(text["effective"]["dirs"][0]["access"], "ro", "{text}");
    assert_eq!(text["requested"]["filesystem"], "read-only");
    assert!(text["tools"].as_array().is_some_and(|t| t.iter().any(|t| t["name"] == "word_count")));
    let gate = p["plugins"].as_array().and_then(|a| a.iter().find(|x| x["id"] == "gate")).cloned().unwrap_or_default();
    assert_eq!(gate["kinds"], json!(["policy"]));

    let mut sse = w.events("/api/plugins/events", &[]);
    let mut history = Vec::new();
    loop {
        let e = sse.next().unwrap_or_else(|| panic!("stream ended"));
        if e.event.as_deref() == Some("ready") {
            break;
        }
        history.push(e.json());
    }
    let loaded: Vec<&str> =
        history.iter().filter(|e| e["type"] == "plugin/loaded").filter_map(|e| e["data"]["id"].as_str()).collect();
    assert!(loaded.contains(&"text") && loaded.contains(&"gate") && loaded.contains(&"scripted"), "{history:?}");

    // Hot reload: another component at the same path replaces the version.
    let tmp = home_plugins.path().join("text.wasm.tmp");
    std::fs::copy(wharf_tests::plugin(plugins::FS), &tmp).context("copying the fs component")?;
    std::fs::rename(&tmp, &text_path).context("moving the new file in place")?;
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline
        && !(got.iter().any(|e: &Value| e["type"] == "plugin/loaded")
            && got.iter().any(|e| e["type"] == "plugin/unloaded"))
    {
        let e = sse.next().unwrap_or_else(|| panic!("stream ended"));
        got.push(e.json());
    }
    let new =
        got.iter().find(|e| e["type"] == "plugin/loaded").cloned().unwrap_or_else(|| panic!("no reload: {got:?}"));
    assert_eq!(new["data"]["id"], "text");
    assert_ne!(new["data"]["digest"], old_digest.as_str());
    let gone = got.iter().find(|e| e["type"] == "plugin/unloaded").cloned().unwrap_or_default();
    assert_eq!(gone["data"]["digest"], old_digest.as_str());
    let (_, p) = w.call("GET", "/api/plugins", None);
    let text = p["plugins"].as_array().and_then(|a| a.iter().find(|x| x["id"] == "text")).cloned().unwrap_or_default();
    assert_eq!(text["digest"], new["data"]["digest"]);
    assert!(text["tools"].as_array().is_some_and(|t| t.iter().any(|t| t["name"] == "read")), "{text}");
    Ok(())
}

/// `wharf serve` with a WASI 0.3 component on a dev row (`dev = true`): a
/// session's event stream carries the call's streamed progress before its
/// result; `/api/plugins` marks the row `dev`; a new component at the row's
/// path is announced as `jobs reloaded (dev)` on the session's stream and
/// on the plugin stream (`notice`, what the web UI shows).
#[test]
fn a_dev_row_streams_progress_and_announces_its_reload() -> anyhow::Result<()> {
    let dir = tempfile::tempdir().context("creating a temp dir")?;
    let jobs = dir.path().join("jobs.wasm");
    std::fs::copy(wharf_tests::plugin(plugins::GENERIC_ASYNC), &jobs).context("copying the async fixture")?;
    let echo = wharf_tests::plugin(plugins::ECHO);
    let profile = format!(
        r#"
[agent]
adapter = "scripted"
max_steps = 4

[[plugin]]
id = "jobs"
dev = true
path = "{}"

[[plugin]]
id = "scripted"
path = "${{plugin_dir}}/llm-scripted.wasm"
[plugin.config]
model = "scripted-dev"

[[plugin.config.turns]]
tool_calls = [{{ name = "jobs_count", arguments = {{ n = 6 }} }}]

[[plugin.config.turns]]
text = "counted"
"#,
        jobs.display()
    );
    let w = start_command("serve", &profile, &[], &[]);
    let (code, r) = w.call("POST", "/api/sessions", Some(json!({"text": "count"})));
    assert_eq!(code, 200, "{r}");
    let id = r["id"].as_str().unwrap_or_else(|| panic!("{r}")).to_string();
    let mut sse = w.events(&format!("/api/sessions/{id}/events?from=1"), &[]);
    let (result, before) = sse.until("tool/result");
    let progress: String = before
        .iter()
        .filter(|e| e["type"] == "tool/progress")
        .map(|e| e["data"]["text"].as_str().unwrap_or("").to_string())
        .collect();
    let want: String = (1..=6).map(|i| format!("{i}\n")).collect();
    assert_eq!(result["data"]["content"], want.as_str(), "{result}");
    assert_eq!(progress, want, "the streamed progress adds up to the result: {before:?}");
    let (end, _) = sse.until("turn/end");
    assert_eq!(end["data"]["reason"], "completed");

    let (_, p) = w.call("GET", "/api/plugins", None);
    let row = p["plugins"].as_array().and_then(|a| a.iter().find(|x| x["id"] == "jobs")).cloned().unwrap_or_default();
    assert_eq!(row["dev"], true, "{row}");
    let old = row["digest"].as_str().unwrap_or("").to_string();
    let mut feed = w.events("/api/plugins/events", &[]);
    while feed.next().is_some_and(|e| e.event.as_deref() != Some("ready")) {}

    // A new component at the dev row's path: announced on both streams.
    let tmp = dir.path().join("jobs.wasm.tmp");
    std::fs::copy(&echo, &tmp).context("copying the echo component")?;
    std::fs::rename(&tmp, &jobs).context("moving the new file in place")?;
    let reloaded = loop {
        let (e, _) = sse.until("plugin/loaded");
        if e["data"]["id"] == "jobs" {
            break e;
        }
    };
    assert_eq!(reloaded["notice"], "jobs reloaded (dev)", "{reloaded}");
    assert_eq!((&reloaded["data"]["dev"], &reloaded["data"]["replaces"]), (&json!(true), &json!(old)), "{reloaded}");
    let fed = loop {
        let e = feed.next().unwrap_or_else(|| panic!("the plugin stream ended"));
        let v = e.json();
        if v["type"] == "plugin/loaded" && v["data"]["id"] == "jobs" {
            break v;
        }
    };
    assert_eq!(fed["notice"], "jobs reloaded (dev)", "{fed}");
    Ok(())
}

/// A session written directly to the store, with a todo list.
fn stored_session_with_todos(dir: &std::path::Path) -> String {
    use wharf_core::events::{AssistantMessage, StepEnd, StepStart, TodoUpdated, TurnEnd, TurnStart, UserMessage};
    use wharf_core::{EventKind as K, StopReason};
    let store = wharf_core::SessionStore::new(dir);
    let log = store
        .create(wharf_core::store::NewSession { id: None, workspace: None, profile: Some("stored".into()) })
        .expect("creating a session");
    let items =
        json!([{"content": "write the tests", "status": "completed"}, {"content": "ship it", "status": "in_progress"}]);
    for k in [
        K::TurnStart(TurnStart { turn: 1 }),
        K::UserMessage(UserMessage { content: "Plan the release.".into(), inbox_id: None, images: vec![] }),
        K::StepStart(StepStart { turn: 1, step: 1 }),
        K::AssistantMessage(AssistantMessage {
            turn: 1,
            step: 1,
            content: "Planned.".into(),
            reasoning: None,
            tool_calls: vec![],
            usage: None,
            finish: None,
            interrupted: false,
        }),
        K::TodoUpdated(TodoUpdated { items }),
        K::StepEnd(StepEnd { turn: 1, step: 1, usage: None }),
        K::TurnEnd(TurnEnd { turn: 1, reason: StopReason::Completed }),
    ] {
        log.append(k).expect("appending an event");
    }
    log.flush_blocking().expect("flushing the session log");
    log.id().to_string()
}

pub fn which(bin: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(bin)).find(|p| p.is_file())
}

/// Chromium, node and tests/browser with playwright-core installed; `None`
/// (reported as a skip of `test`) when chromium or node is missing.
pub fn browser_tools(test: &str) -> Option<(PathBuf, PathBuf, PathBuf)> {
    let chromium = std::env::var_os("CHROMIUM")
        .map(PathBuf::from)
        .or_else(|| Some(PathBuf::from("/usr/bin/chromium")).filter(|p| p.is_file()))
        .or_else(|| which("chromium"));
    let node = which("node");
    let (Some(chromium), Some(node)) = (chromium, node) else {
        wharf_tests::skip(test, "chromium or node is not installed (apt-get install -y chromium nodejs npm)");
        return None;
    };
    let dir = wharf_tests::root().join("tests/browser");
    if !dir.join("node_modules/playwright-core").is_dir() {
        let npm = which("npm").unwrap_or_else(|| PathBuf::from("npm"));
        let ok = Command::new(npm)
            .current_dir(&dir)
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "npm ci in tests/browser failed (it installs playwright-core)");
    }
    Some((chromium, node, dir))
}

#[test]
fn browser_prompt_stream_approve_result_and_cancel() -> anyhow::Result<()> {
    let Some((chromium, node, dir)) = browser_tools("web::browser_prompt_stream_approve_result_and_cancel") else {
        return Ok(());
    };
    // The `text` row is a dev row loading a copy, which the page's test
    // replaces to see the reload announced.
    let copies = tempfile::tempdir().context("creating a temp dir")?;
    let text_path = copies.path().join("text.wasm");
    std::fs::copy(wharf_tests::plugin(plugins::TEXT), &text_path).context("copying the text component")?;
    let profile =
        GATED.replace("path = \"${plugin_dir}/text.wasm\"", &format!("path = \"{}\"\ndev = true", text_path.display()));
    // A third turn: a component tool asks the user (issue 40), answered in
    // the page's form.
    let _ = wharf_tests::plugin(plugins::EVIL);
    let profile = format!("{profile}{ASKING_TURN}");
    let w = start(&profile, &[], &[]);
    let todo = stored_session_with_todos(&w.sessions);
    let shots = wharf_tests::target_dir().join("browser-shots");
    let _ = std::fs::create_dir_all(&shots);
    let out = Command::new(node)
        .current_dir(&dir)
        .arg("web.test.mjs")
        .env("WHARF_URL", &w.url)
        .env("CHROMIUM", &chromium)
        .env("SLOW_TEXT", SLOW_TEXT)
        .env("SCREENSHOT_DIR", &shots)
        .env("TODO_SESSION", &todo)
        .env("RELOAD_FROM", wharf_tests::plugin(plugins::FS))
        .env("RELOAD_TO", &text_path)
        .env("ASK_TOOL", "ask")
        .output()
        .context("running node")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("browser test passed"),
        "browser test failed (screenshots in {}):\n{stdout}\n{stderr}\nserver: {}",
        shots.display(),
        w.stderr()
    );
    // What the page did is in the log, and the log is well formed.
    let list = wharf_core::SessionStore::new(&w.sessions).list().context("listing the sessions")?;
    assert_eq!(list.len(), 2);
    let driven = list.iter().find(|s| s.id != todo).unwrap_or_else(|| panic!("no session"));
    let events = w.log(&driven.id);
    wharf_core::invariants::check(&events).map_err(anyhow::Error::msg).context("checking the log's invariants")?;
    let ends: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.kind {
            wharf_core::EventKind::TurnEnd(t) => Some(format!("{:?}", t.reason)),
            _ => None,
        })
        .collect();
    assert_eq!(ends, vec!["Completed".to_string(), "Cancelled".to_string(), "Completed".to_string()]);
    let answered = events.iter().any(|e| {
        matches!(&e.kind, wharf_core::EventKind::Unknown { type_name, data }
            if type_name == "question/answered" && data["action"] == "accept" && data["content"]["name"] == "Cy")
    });
    assert!(answered, "the page's answer is logged");
    Ok(())
}
