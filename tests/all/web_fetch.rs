//! The `web` component's `web_fetch` tool against a loopback HTTP server
//! started by each test: through `wharf plugin call` (grant flags; a CLI
//! command, so those tests spawn the binary) and through a headless turn on
//! an in-process host with the scripted model (profile grant, session log).
//! Together they show the host's outbound checks: the allowlist, redirects
//! re-checked hop by hop, and private addresses refused unless granted.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use serde_json::{Value, json};
use wharf_tests::host::TestHost;
use wharf_tests::plugins;

use crate::inproc;

const PAGE: &str = r##"<!DOCTYPE html>
<html><head><title>Loopback &amp; Co</title>
<script>document.write("script noise")</script><style>p { color: red }</style></head>
<body><nav><a href="/">Home</a></nav>
<h1>Welcome</h1>
<p>Read the <a href="/docs/intro.html">docs</a> first &mdash; then <em>build</em>.</p>
<ul><li>alpha</li><li>beta</li></ul>
<pre>let x = 1 &lt; 2;</pre>
</body></html>"##;

/// Size of `/big`, bytes.
const BIG: usize = 3 << 20;

/// A loopback HTTP/1.1 server with fixed routes; records request paths.
struct Server {
    port: u16,
    hits: Arc<Mutex<Vec<String>>>,
}

impl Server {
    fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding a local port");
        let port = listener.local_addr().expect("reading the local address").port();
        let hits = Arc::new(Mutex::new(Vec::new()));
        let h = hits.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let h = h.clone();
                std::thread::spawn(move || serve(conn, port, &h));
            }
        });
        Server { port, hits }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn allow(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn hits(&self) -> Vec<String> {
        self.hits.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

fn serve(conn: TcpStream, port: u16, hits: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(conn);
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    loop {
        let mut h = String::new();
        match reader.read_line(&mut h) {
            Ok(0) | Err(_) => break,
            Ok(_) if h == "\r\n" => break,
            Ok(_) => {}
        }
    }
    hits.lock().unwrap_or_else(|e| e.into_inner()).push(path.clone());
    let (status, ctype, extra, body): (&str, &str, String, Vec<u8>) = match path.as_str() {
        "/page.html" => ("200 OK", "text/html; charset=utf-8", String::new(), PAGE.as_bytes().to_vec()),
        "/plain.txt" => ("200 OK", "text/plain", String::new(), b"just plain text\n".to_vec()),
        "/redirect-ok" => ("302 Found", "text/plain", "Location: /page.html\r\n".into(), Vec::new()),
        // Same server, but under a name the allowlist does not cover.
        "/redirect-away" => {
            ("302 Found", "text/plain", format!("Location: http://localhost:{port}/plain.txt\r\n"), Vec::new())
        }
        "/big" => ("200 OK", "text/plain", String::new(), "0123456789abcde\n".repeat(BIG / 16).into_bytes()),
        "/image.png" => ("200 OK", "image/png", String::new(), vec![0x89, b'P', b'N', b'G', 0, 0, 0, 13]),
        _ => ("404 Not Found", "text/plain", String::new(), b"no such page".to_vec()),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n",
        body.len()
    );
    let mut conn = reader.into_inner();
    let _ = conn.write_all(head.as_bytes());
    // The client may stop reading at its cap and close: that is fine.
    let _ = conn.write_all(&body);
}

fn web() -> PathBuf {
    wharf_tests::plugin(plugins::WEB)
}

/// `wharf plugin call web.wasm web_fetch ARGS FLAGS…` → the printed JSON.
fn call(args: Value, flags: &[&str]) -> anyhow::Result<Value> {
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let out = wharf_tests::wharf(home.path())
        .args(["plugin", "call"])
        .arg(web())
        .args(["web_fetch", &args.to_string()])
        .args(flags)
        .output()
        .context("running wharf plugin call")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(stdout.trim()).with_context(|| {
        format!("the output is not JSON: {stdout}\nstderr: {}", String::from_utf8_lossy(&out.stderr))
    })?;
    // The exit code agrees with the result.
    assert_eq!(out.status.success(), v["is_error"] == false, "{v}");
    Ok(v)
}

fn content(v: &Value) -> &str {
    v["content"].as_str().unwrap_or_default()
}

fn assert_ok(v: &Value) {
    assert_eq!(v["is_error"], false, "{v}");
}

fn assert_refused(v: &Value, code: &str, needles: &[&str]) {
    assert_eq!(v["is_error"], true, "{v}");
    assert_eq!(v["error_code"], code, "{v}");
    for n in needles {
        assert!(content(v).contains(n), "missing {n:?} in: {}", content(v));
    }
}

#[test]
fn allowlisted_host_returns_markdown() -> anyhow::Result<()> {
    let s = Server::start();
    let v = call(json!({"url": s.url("/page.html")}), &["--allow-host", &s.allow()])?;
    assert_ok(&v);
    let c = content(&v);
    assert!(c.starts_with(&format!("Fetched {} (HTTP 200, text/html", s.url("/page.html"))), "{c}");
    assert!(c.contains("Title: Loopback & Co"), "{c}");
    for want in [
        "# Welcome",
        &format!("Read the [docs]({}) first — then *build*.", s.url("/docs/intro.html")),
        "- alpha\n- beta",
        "```\nlet x = 1 < 2;\n```",
    ] {
        assert!(c.contains(want), "missing {want:?} in:\n{c}");
    }
    for noise in ["script noise", "color: red", "Home"] {
        assert!(!c.contains(noise), "{noise:?} leaked into:\n{c}");
    }

    // `text` drops the markup; `raw` is the body as sent.
    let v = call(json!({"url": s.url("/page.html"), "format": "text"}), &["--allow-host", &s.allow()])?;
    assert_ok(&v);
    assert!(content(&v).contains("Welcome\n\nRead the docs first — then build."), "{}", content(&v));
    let v = call(json!({"url": s.url("/page.html"), "format": "raw"}), &["--allow-host", &s.allow()])?;
    assert!(content(&v).contains("<h1>Welcome</h1>"), "{}", content(&v));
    let v = call(json!({"url": s.url("/plain.txt")}), &["--allow-host", &s.allow()])?;
    assert!(content(&v).ends_with("\n\njust plain text"), "{}", content(&v));
    Ok(())
}

#[test]
fn redirect_within_the_allowlist_is_followed() -> anyhow::Result<()> {
    let s = Server::start();
    let v = call(json!({"url": s.url("/redirect-ok")}), &["--allow-host", &s.allow()])?;
    assert_ok(&v);
    assert!(content(&v).contains(&format!("Redirected from: {}", s.url("/redirect-ok"))), "{}", content(&v));
    assert!(content(&v).contains("# Welcome"), "{}", content(&v));
    assert_eq!(s.hits(), ["/redirect-ok", "/page.html"]);
    Ok(())
}

#[test]
fn redirect_to_a_host_outside_the_allowlist_is_refused() -> anyhow::Result<()> {
    let s = Server::start();
    let v = call(json!({"url": s.url("/redirect-away")}), &["--allow-host", &s.allow()])?;
    let target = format!("http://localhost:{}/plain.txt", s.port);
    assert_refused(
        &v,
        "PERMISSION_DENIED",
        &[
            &format!("redirect from {} to {target} refused", s.url("/redirect-away")),
            &format!("host localhost:{} is not in this plugin's allowed hosts", s.port),
        ],
    );
    // The refused hop never reached the server.
    assert_eq!(s.hits(), ["/redirect-away"]);
    Ok(())
}

#[test]
fn a_host_that_is_not_granted_is_refused() -> anyhow::Result<()> {
    let s = Server::start();
    for flags in [&["--allow-host", "example.com"][..], &[]] {
        let v = call(json!({"url": s.url("/page.html")}), flags)?;
        assert_refused(
            &v,
            "PERMISSION_DENIED",
            &[&format!(
                "fetching {} refused: host {} is not in this plugin's allowed hosts",
                s.url("/page.html"),
                s.allow()
            )],
        );
    }
    assert!(s.hits().is_empty(), "{:?}", s.hits());
    Ok(())
}

#[test]
fn a_wildcard_does_not_reach_loopback_unless_private_network_is_granted() -> anyhow::Result<()> {
    let s = Server::start();
    let by_name = format!("http://localhost:{}/plain.txt", s.port);
    for url in [s.url("/plain.txt"), by_name.clone()] {
        let v = call(json!({"url": url}), &["--allow-host", "*"])?;
        assert_refused(&v, "PERMISSION_DENIED", &["private, loopback or link-local", "private_network"]);
    }
    assert!(s.hits().is_empty(), "{:?}", s.hits());
    for url in [s.url("/plain.txt"), by_name] {
        let v = call(json!({"url": url}), &["--allow-host", "*", "--allow-private-network"])?;
        assert_ok(&v);
        assert!(content(&v).contains("just plain text"), "{}", content(&v));
    }
    // `localhost` named literally is the operator's explicit choice.
    let v = call(json!({"url": format!("http://localhost:{}/plain.txt", s.port)}), &["--allow-host", "localhost"])?;
    assert_ok(&v);
    Ok(())
}

#[test]
fn an_oversized_body_is_truncated_at_the_cap() -> anyhow::Result<()> {
    let s = Server::start();
    let v = call(json!({"url": s.url("/big"), "max_bytes": 5000}), &["--allow-host", &s.allow()])?;
    assert_ok(&v);
    let c = content(&v);
    assert!(c.contains("5000 bytes, truncated"), "{}", &c[..200.min(c.len())]);
    assert!(c.contains("[truncated: stopped reading after 5000 bytes"), "{}", &c[c.len().saturating_sub(300)..]);
    assert_eq!(c.matches("0123456789abcde\n").count(), 5000 / 16);
    // The configured ceiling wins over a larger request; the default applies
    // when the call gives none.
    let v = call(
        json!({"url": s.url("/big"), "max_bytes": 10_000_000}),
        &["--allow-host", &s.allow(), "--config", r#"{"max_bytes": 2000}"#],
    )?;
    assert!(content(&v).contains("2000 bytes, truncated"), "{}", content(&v));
    let v = call(json!({"url": s.url("/big")}), &["--allow-host", &s.allow()])?;
    assert!(content(&v).contains(&format!("{} bytes, truncated", 256 << 10)), "{}", &content(&v)[..200]);
    Ok(())
}

#[test]
fn binary_content_and_bad_urls_are_refused_clearly() -> anyhow::Result<()> {
    let s = Server::start();
    let v = call(json!({"url": s.url("/image.png")}), &["--allow-host", &s.allow()])?;
    assert_refused(&v, "UNSUPPORTED_CONTENT_TYPE", &["image/png"]);
    let v = call(json!({"url": s.url("/missing")}), &["--allow-host", &s.allow()])?;
    assert_refused(&v, "HTTP_ERROR", &["returned HTTP 404", "no such page"]);
    let v = call(json!({"url": "file:///etc/passwd"}), &["--allow-host", "*"])?;
    assert_refused(&v, "INVALID_ARGUMENT", &["only http and https"]);
    Ok(())
}

/// A headless turn with the scripted model: the tool results land in the
/// session log with the content (and refusal) the model saw.
#[tokio::test(flavor = "multi_thread")]
async fn web_fetch_in_a_session() -> anyhow::Result<()> {
    let s = Server::start();
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let ws = tempfile::tempdir().context("creating a temp dir")?;
    let sessions = home.path().join("sessions");
    let _ = wharf_tests::plugin(plugins::LLM_SCRIPTED);
    let _ = web();
    let call = |url: String| {
        let args = json!({"url": url}).to_string();
        format!("{{ name = \"web_fetch\", arguments = {} }}", serde_json::to_string(&args).unwrap_or_default())
    };
    let profile = format!(
        r#"
[agent]
adapter = "scripted"
max_steps = 5

[[plugin]]
id = "web"
path = "${{plugin_dir}}/web.wasm"
[plugin.grant]
hosts = ["{allow}"]
[plugin.config]
max_bytes = 65536

[[plugin]]
id = "scripted"
path = "${{plugin_dir}}/llm-scripted.wasm"
[plugin.config]
model = "scripted-web"

[[plugin.config.turns]]
tool_calls = [{ok}, {away}]

[[plugin.config.turns]]
text = "done"
finish = "stop"
"#,
        allow = s.allow(),
        ok = call(s.url("/page.html")),
        away = call(s.url("/redirect-away")),
    );
    let path = home.path().join("web.toml");
    std::fs::write(&path, profile).context("writing the file")?;
    let host = TestHost::builder()
        .profile(path.display().to_string())
        .workspace(ws.path())
        .home(home.path())
        .sessions(&sessions)
        .start_in(home.path())
        .await?;
    let turn = inproc::turn(&host.harness, None, "fetch the page", None).await?;
    host.close().await;
    assert_eq!(turn.run.exit_code(), 0, "{:?}\n{}", turn.run.summary, turn.jsonl());
    let events = &turn.streamed;
    let id = events
        .iter()
        .find(|e| e["type"] == "session/start")
        .and_then(|e| e["data"]["id"].as_str())
        .unwrap_or_else(|| panic!("no session/start: {}", turn.jsonl()))
        .to_string();
    // Read back the stored log, not just the stream.
    let log = wharf_core::SessionStore::new(&sessions).load(&id).context("loading the session")?.events;
    wharf_core::invariants::check(&log).map_err(anyhow::Error::msg).context("checking the log's invariants")?;
    let results: Vec<Value> = log
        .iter()
        .map(|e| serde_json::to_value(e).unwrap_or(Value::Null))
        .filter(|e| e["type"] == "tool/result")
        .collect();
    assert_eq!(results.len(), 2, "{results:?}");
    let by_call = |suffix: &str| {
        results
            .iter()
            .find(|r| r["data"]["call_id"].as_str().is_some_and(|c| c.ends_with(suffix)))
            .unwrap_or_else(|| panic!("no result for *{suffix}: {results:?}"))
    };
    let (ok, away) = (by_call("_0"), by_call("_1"));
    assert_eq!(ok["data"]["plugin"], "web");
    assert_eq!(ok["data"]["is_error"], false, "{ok}");
    let text = ok["data"]["content"].as_str().unwrap_or_default();
    assert!(text.contains("# Welcome") && text.contains("- alpha\n- beta"), "{text}");
    assert_eq!(away["data"]["is_error"], true, "{away}");
    assert_eq!(away["data"]["error_code"], "PERMISSION_DENIED", "{away}");
    let text = away["data"]["content"].as_str().unwrap_or_default();
    assert!(text.contains(&format!("to http://localhost:{}/plain.txt refused", s.port)), "{text}");
    assert!(!s.hits().contains(&"/plain.txt".to_string()), "{:?}", s.hits());
    Ok(())
}
