//! Components from OCI registries (issue 16): against a real registry
//! (Debian's `docker-registry`, the CNCF distribution server) started on
//! loopback by each test. Push → pull → run, `plugin lock`, a moved tag
//! that does not change a pinned row, offline loads from the store, and
//! each refusal: a wrong digest, a tampered layer (in the registry and in
//! the store), and missing / wrong-key / other-digest signatures.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::Value;
use wharf_tests::plugins;

/// A `docker-registry` on a free loopback port, storing under a temp dir;
/// killed on drop.
struct Registry {
    child: Option<Child>,
    port: u16,
    data: PathBuf,
    _dir: tempfile::TempDir,
}

impl Registry {
    /// `None` (after a skip) when `docker-registry` is not installed.
    fn start(test: &str) -> Option<Self> {
        Self::start_with(test, None)
    }

    /// [`Registry::start`], with HTTP basic auth from `htpasswd` (bcrypt
    /// lines) when given.
    fn start_with(test: &str, htpasswd: Option<&str>) -> Option<Self> {
        let bin = ["/usr/bin/docker-registry", "/usr/sbin/docker-registry"].into_iter().find(|p| Path::new(p).exists());
        let Some(bin) = bin else {
            wharf_tests::skip(test, "docker-registry is not installed (Debian package `docker-registry`)");
            return None;
        };
        let dir = tempfile::tempdir().expect("creating a temp dir");
        let data = dir.path().join("data");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("reserving a port");
        let config = dir.path().join("config.yml");
        let mut text = format!(
            "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
            data.display()
        );
        if let Some(lines) = htpasswd {
            let file = dir.path().join("htpasswd");
            std::fs::write(&file, lines).expect("writing the file");
            text.push_str(&format!("auth:\n  htpasswd:\n    realm: wharf-test\n    path: {}\n", file.display()));
        }
        std::fs::write(&config, text).expect("writing config");
        let child = Command::new(bin)
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn docker-registry");
        let reg = Self { child: Some(child), port, data, _dir: dir };
        let deadline = Instant::now() + Duration::from_secs(15);
        let up = if htpasswd.is_some() { 401 } else { 200 };
        while http(port, "GET", "/v2/", None, &[]).map(|(s, _, _)| s) != Some(up) {
            assert!(Instant::now() < deadline, "docker-registry did not answer on port {port}");
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(reg)
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The registry's own copy of a blob.
    fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.data.join("docker/registry/v2/blobs/sha256").join(&hex[..2]).join(hex).join("data")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One HTTP/1.1 request to the registry: `(status, headers, body)`.
fn http(
    port: u16,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> Option<(u16, String, Vec<u8>)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let ct = content_type.map(|c| format!("Content-Type: {c}\r\n")).unwrap_or_default();
    let accept = "Accept: application/vnd.oci.image.manifest.v1+json\r\n";
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{accept}{ct}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).ok()?;
    s.write_all(body).ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let headers = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = headers.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, headers, raw[split + 4..].to_vec()))
}

/// A throwaway home with its own OCI store.
struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Self {
        Self { dir: tempfile::tempdir().expect("creating a temp dir") }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn store(&self) -> PathBuf {
        self.path().join("oci")
    }

    fn wharf(&self) -> Command {
        let _ = wharf_tests::plugin(plugins::LLM_SCRIPTED);
        let mut c = wharf_tests::wharf(self.path());
        c.current_dir(self.path())
            .env("WHARF_OCI_DIR", self.store())
            .env_remove("XDG_CACHE_HOME")
            .env_remove("DOCKER_CONFIG")
            .env_remove("WHARF_REGISTRY_USER")
            .env_remove("WHARF_REGISTRY_PASSWORD");
        c
    }

    /// `wharf ARGS…`: `(exit code, stdout, stderr)`.
    fn run(&self, args: &[&str]) -> (i32, String, String) {
        let out = self.wharf().args(args).output().expect("spawn wharf");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// `wharf ARGS…` that must succeed, its stdout's last line as JSON.
    fn json(&self, args: &[&str]) -> Value {
        let (code, out, err) = self.run(args);
        assert_eq!(code, 0, "wharf {args:?}: {out} {err}");
        let last = out.lines().last().unwrap_or("");
        serde_json::from_str(last)
            .with_context(|| format!("the last line is not JSON: {out}"))
            .expect("wharf prints JSON")
    }

    fn push(&self, file: &Path, reference: &str) -> String {
        let v = self.json(&["plugin", "push", &file.display().to_string(), reference]);
        v["digest"].as_str().unwrap_or_default().to_string()
    }

    /// A profile with the scripted model calling `echo` once and `row`
    /// (the TOML of the echo plugin's row and anything after it).
    fn profile(&self, name: &str, row: &str) -> PathBuf {
        let text = format!(
            r#"[agent]
adapter = "scripted"
max_steps = 4

[[plugin]]
id = "scripted"
path = "${{plugin_dir}}/llm-scripted.wasm"
[plugin.config]
model = "scripted-test"
[[plugin.config.turns]]
text = "Echoing."
tool_calls = [{{ name = "echo", arguments = {{ text = "hello from oci" }} }}]
[[plugin.config.turns]]
text = "Done."

{row}
"#
        );
        let path = self.path().join(format!("{name}.toml"));
        std::fs::write(&path, text).expect("writing the file");
        path
    }

    /// `wharf run` with `profile`: `(exit code, jsonl events, stderr)`.
    fn run_profile(&self, profile: &Path) -> (i32, Vec<Value>, String) {
        let sessions = self.path().join("sessions").display().to_string();
        let profile = profile.display().to_string();
        let (code, out, err) = self.run(&[
            "run",
            "echo something",
            "--profile",
            &profile,
            "--session-dir",
            &sessions,
            "--output",
            "jsonl",
            "--no-watch",
        ]);
        let events = out.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        (code, events, err)
    }
}

fn echo_row(source: &str, extra: &str) -> String {
    format!("[[plugin]]\nid = \"echo\"\nsource = \"{source}\"\n{extra}\n")
}

/// The content of the first `echo` tool result of a run.
fn echo_result(events: &[Value]) -> Option<String> {
    events.iter().find(|e| e["type"] == "tool/result").map(|e| e["data"].to_string())
}

/// Asserts that a run with `profile` was refused, nothing loaded, with
/// `reason` in its error; returns stderr.
fn assert_refused(home: &Home, profile: &Path, reason: &str) -> String {
    let (code, events, err) = home.run_profile(profile);
    assert_ne!(code, 0, "loaded although it should be refused: {events:?} {err}");
    assert!(events.iter().all(|e| e["type"] != "plugin/loaded"), "something loaded: {events:?}");
    assert!(err.contains(reason), "no `{reason}` in: {err}");
    assert!(err.contains("plugin `echo`"), "the refusal does not name the row: {err}");
    err
}

#[test]
fn push_pull_run_lock_moved_tag_and_offline() {
    let Some(mut reg) = Registry::start("oci::push_pull_run_lock_moved_tag_and_offline") else { return };
    let echo = wharf_tests::plugin(plugins::ECHO);
    let text = wharf_tests::plugin(plugins::TEXT);
    let tag = format!("oci://{}/tools/echo:v1", reg.host());

    // Push from one home, pull into a fresh one.
    let publisher = Home::new();
    let d1 = publisher.push(&echo, &tag);
    assert!(d1.starts_with("sha256:") && d1.len() == 71, "{d1}");

    let user = Home::new();
    let pulled = user.json(&["plugin", "pull", &tag]);
    assert_eq!(pulled["digest"], d1.as_str());
    let path = PathBuf::from(pulled["path"].as_str().unwrap_or_default());
    assert!(path.starts_with(user.store()), "{}", path.display());
    assert_eq!(std::fs::read(&path).ok(), std::fs::read(&echo).ok(), "the pulled layer is not the pushed component");
    // The CNCF Wasm layout, as the registry serves it.
    let (status, _, manifest) =
        http(reg.port, "GET", &format!("/v2/tools/echo/manifests/{d1}"), None, &[]).unwrap_or_default();
    assert_eq!(status, 200);
    let m: Value = serde_json::from_slice(&manifest).unwrap_or_default();
    assert_eq!(m["config"]["mediaType"], "application/vnd.wasm.config.v0+json");
    assert_eq!(m["layers"][0]["mediaType"], "application/wasm");
    assert_eq!(m["layers"].as_array().map(Vec::len), Some(1));

    // The pulled file runs.
    let (code, out, err) = user.run(&["plugin", "call", &path.display().to_string(), "echo", r#"{"text":"hi"}"#]);
    assert_eq!(code, 0, "{out} {err}");
    assert!(out.contains("\"hi\""), "{out}");

    // `plugin lock` pins the tag's digest, keeping the file.
    let profile = user.profile("locked", &echo_row(&tag, "# the echo tool\nwarm = false"));
    let before = std::fs::read_to_string(&profile).unwrap_or_default();
    let locked = user.json(&["plugin", "lock", "--profile", &profile.display().to_string()]);
    assert_eq!(locked["digest"], d1.as_str());
    let after = std::fs::read_to_string(&profile).unwrap_or_default();
    assert_eq!(
        after,
        before.replace(&format!("source = \"{tag}\"\n"), &format!("source = \"{tag}\"\ndigest = \"{d1}\"\n"))
    );
    let (code, out, _) = user.run(&["plugin", "lock", "--profile", &profile.display().to_string()]);
    assert_eq!((code, out.as_str()), (0, ""), "a second lock changes nothing");

    // A pinned row runs from a fresh store (pulled by digest).
    let runner = Home::new();
    let (code, events, err) = runner.run_profile(&profile);
    assert_eq!(code, 0, "{err}");
    assert!(echo_result(&events).is_some_and(|r| r.contains("hello from oci")), "{events:?}");

    // Move the tag to another component: the pinned row still loads echo.
    let d2 = publisher.push(&text, &tag);
    assert_ne!(d1, d2);
    let moved = Home::new();
    assert_eq!(moved.json(&["plugin", "pull", &tag])["digest"], d2.as_str(), "the tag did not move");
    let (code, events, err) = moved.run_profile(&profile);
    assert_eq!(code, 0, "{err}");
    assert!(
        echo_result(&events).is_some_and(|r| r.contains("hello from oci")),
        "the moved tag changed the pin: {events:?}"
    );

    // An unpinned row keeps the digest its store last saw for the tag.
    let unpinned = user.profile("unpinned", &echo_row(&tag, ""));
    let (code, events, err) = user.run_profile(&unpinned);
    assert_eq!(code, 0, "{err}");
    assert!(echo_result(&events).is_some_and(|r| r.contains("hello from oci")), "{events:?}");
    assert!(err.contains("not pinned"), "no warning for the unpinned row: {err}");

    // Offline: the registry is gone, the stores still serve.
    reg.stop();
    for home in [&runner, &user] {
        let (code, events, err) = home.run_profile(&profile);
        assert_eq!(code, 0, "offline: {err}");
        assert!(echo_result(&events).is_some_and(|r| r.contains("hello from oci")), "{events:?}");
    }
    // What the store lacks cannot come from nowhere: one line, refused.
    let empty = Home::new();
    assert_refused(&empty, &profile, "registry");
}

#[test]
fn wrong_digest_and_tampered_layers_are_refused() -> anyhow::Result<()> {
    let Some(reg) = Registry::start("oci::wrong_digest_and_tampered_layers_are_refused") else { return Ok(()) };
    let echo = wharf_tests::plugin(plugins::ECHO);
    let publisher = Home::new();
    let tag = format!("oci://{}/tools/echo:v1", reg.host());
    let d1 = publisher.push(&echo, &tag);

    // A pin that is not the tag's digest: nothing in the registry has it.
    let home = Home::new();
    let other = format!("sha256:{}", "ab".repeat(32));
    let p = home.profile("wrong", &echo_row(&tag, &format!("digest = \"{other}\"")));
    let err = assert_refused(&home, &p, &other);
    assert!(err.contains("refused"), "not logged: {err}");
    // A pin that contradicts the source's own digest.
    let at = format!("oci://{}/tools/echo@{d1}", reg.host());
    let p = home.profile("contra", &echo_row(&at, &format!("digest = \"{other}\"")));
    assert_refused(&home, &p, "differs from the pinned");

    // Tampered in the store: the pinned row refuses the changed bytes.
    let good = home.profile("good", &echo_row(&tag, &format!("digest = \"{d1}\"")));
    let (code, _, err) = home.run_profile(&good);
    assert_eq!(code, 0, "{err}");
    let pulled = home.json(&["plugin", "pull", &at]);
    let layer = PathBuf::from(pulled["path"].as_str().unwrap_or_default());
    let mut bytes = std::fs::read(&layer).unwrap_or_default();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&layer, &bytes).context("writing layer")?;
    assert_refused(&home, &good, "differs from the pinned");
    // A pull fetches the good bytes again.
    home.json(&["plugin", "pull", &at]);
    let (code, _, err) = home.run_profile(&good);
    assert_eq!(code, 0, "{err}");

    // Tampered in the registry: the layer no longer has its digest.
    let layer_digest = pulled["layer"].as_str().unwrap_or_default().to_string();
    let blob = reg.blob_file(&layer_digest);
    std::fs::write(&blob, &bytes).with_context(|| format!("writing blob: {}", blob.display()))?;
    let fresh = Home::new();
    let (code, out, err) = fresh.run(&["plugin", "pull", &tag]);
    assert_ne!(code, 0, "a tampered layer was pulled: {out}");
    assert!(err.to_lowercase().contains("digest"), "{err}");
    assert!(!fresh.store().join("blobs/sha256").join(layer_digest.trim_start_matches("sha256:")).exists());
    assert_refused(&fresh, &good, "digest");
    Ok(())
}

#[test]
fn signatures_unsigned_signed_wrong_key_other_digest() -> anyhow::Result<()> {
    let Some(mut reg) = Registry::start("oci::signatures_unsigned_signed_wrong_key_other_digest") else {
        return Ok(());
    };
    let echo = wharf_tests::plugin(plugins::ECHO);
    let text = wharf_tests::plugin(plugins::TEXT);
    let publisher = Home::new();
    let keys = publisher.path().join("keys");
    std::fs::create_dir_all(&keys).context("creating keys")?;
    let (k1, k2) = (keys.join("k1"), keys.join("k2"));
    for k in [&k1, &k2] {
        publisher.json(&["plugin", "sign", "--generate-key", &k.display().to_string()]);
    }
    let (code, _, err) = publisher.run(&["plugin", "sign", "--generate-key", &k1.display().to_string()]);
    assert_ne!(code, 0, "overwrote a key");
    assert!(err.contains("exists"), "{err}");
    let pub1 = format!("{}.pub", k1.display());
    let pub2 = format!("{}.pub", k2.display());

    let tag = format!("oci://{}/tools/signed:v1", reg.host());
    let d1 = publisher.push(&echo, &tag);
    let home = Home::new();
    let row = |key: &str| echo_row(&tag, &format!("digest = \"{d1}\"\nverify = {{ key = \"{key}\" }}"));

    // Unsigned.
    let p1 = home.profile("k1", &row(&pub1));
    let err = assert_refused(&home, &p1, "unsigned");
    assert!(err.contains("refused"), "not logged: {err}");

    // Signed with k1: loads with k1 (and profile-wide [verify] too) …
    let signed = publisher.json(&["plugin", "sign", &tag, "--key", &k1.display().to_string()]);
    assert_eq!(signed["digest"], d1.as_str());
    let (code, events, err) = home.run_profile(&p1);
    assert_eq!(code, 0, "{err}");
    assert!(echo_result(&events).is_some_and(|r| r.contains("hello from oci")), "{events:?}");
    let wide = home
        .profile("wide", &format!("{}\n[verify]\nkey = \"{pub1}\"\n", echo_row(&tag, &format!("digest = \"{d1}\""))));
    let (code, _, err) = home.run_profile(&wide);
    assert_eq!(code, 0, "{err}");
    // … and not with k2, nor with a profile-wide k2.
    let p2 = home.profile("k2", &row(&pub2));
    assert_refused(&home, &p2, "no signature verifies with the key");
    let wide2 = home
        .profile("wide2", &format!("{}\n[verify]\nkey = \"{pub2}\"\n", echo_row(&tag, &format!("digest = \"{d1}\""))));
    assert_refused(&home, &wide2, "no signature verifies with the key");

    // A valid k1 signature of another digest, copied to this digest's tag.
    let tag2 = format!("oci://{}/tools/signed:v2", reg.host());
    let d2 = publisher.push(&text, &tag2);
    let d3 = publisher.push(&echo_variant(&echo, publisher.path()), &format!("oci://{}/tools/signed:v3", reg.host()));
    publisher.json(&["plugin", "sign", &tag2, "--key", &k1.display().to_string()]);
    let sig_of = |d: &str| format!("/v2/tools/signed/manifests/sha256-{}.sig", d.trim_start_matches("sha256:"));
    let (status, _, sig2) = http(reg.port, "GET", &sig_of(&d2), None, &[]).unwrap_or_default();
    assert_eq!(status, 200);
    let ct = "application/vnd.oci.image.manifest.v1+json";
    let (status, _, _) = http(reg.port, "PUT", &sig_of(&d3), Some(ct), &sig2).unwrap_or_default();
    assert_eq!(status, 201);
    let p3 = home.profile(
        "other",
        &echo_row(
            &format!("oci://{}/tools/signed:v3", reg.host()),
            &format!("digest = \"{d3}\"\nverify = {{ key = \"{pub1}\" }}"),
        ),
    );
    assert_refused(&home, &p3, "another digest");

    // Offline, the signature kept in the store still vouches for d1.
    reg.stop();
    let (code, events, err) = home.run_profile(&p1);
    assert_eq!(code, 0, "offline with a stored signature: {err}");
    assert!(echo_result(&events).is_some_and(|r| r.contains("hello from oci")), "{events:?}");
    Ok(())
}

/// A copy of `echo` with other bytes (a custom section appended), so its
/// digest differs and it still loads.
fn echo_variant(echo: &Path, dir: &Path) -> PathBuf {
    let mut bytes = std::fs::read(echo).expect("reading the echo component");
    // Custom section (id 0): size, name length, name, payload.
    let name = b"wharf-test";
    let payload = b"variant";
    bytes.push(0);
    bytes.push((1 + name.len() + payload.len()) as u8);
    bytes.push(name.len() as u8);
    bytes.extend_from_slice(name);
    bytes.extend_from_slice(payload);
    let path = dir.join("echo-variant.wasm");
    std::fs::write(&path, bytes).expect("writing the file");
    path
}

/// Hot reload of an oci row: a new pinned `digest` in the profile swaps the
/// component of a running `wharf mcp serve`; a pin it cannot resolve keeps
/// the working version.
#[test]
fn new_pin_in_the_profile_hot_reloads() -> anyhow::Result<()> {
    use std::io::{BufRead, BufReader};
    let Some(reg) = Registry::start("oci::new_pin_in_the_profile_hot_reloads") else { return Ok(()) };
    let publisher = Home::new();
    let tag = format!("oci://{}/tools/swap:v1", reg.host());
    let d1 = publisher.push(&wharf_tests::plugin(plugins::ECHO), &tag);
    let d2 = publisher.push(&wharf_tests::plugin(plugins::TEXT), &format!("oci://{}/tools/swap:v2", reg.host()));
    let home = Home::new();
    let profile = home.profile("swap", &echo_row(&tag, &format!("digest = \"{d1}\"")));
    let mut child = home
        .wharf()
        .args(["mcp", "serve", "--profile"])
        .arg(&profile)
        .arg("--session-dir")
        .arg(home.path().join("sessions"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("spawning wharf mcp serve")?;
    let mut stdin = child.stdin.take().unwrap_or_else(|| panic!("no stdin"));
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut send = move |line: &str| {
        stdin
            .write_all(line.as_bytes())
            .and_then(|()| stdin.write_all(b"\n"))
            .and_then(|()| stdin.flush())
            .expect("writing to wharf mcp serve");
    };
    // The reply with `id` (notifications in between are skipped).
    let reply = |id: i64| -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line =
                rx.recv_timeout(left).with_context(|| format!("no reply {id}")).expect("wharf mcp serve answers");
            let v: Value = serde_json::from_str(&line).unwrap_or_default();
            if v["id"] == id {
                return v;
            }
        }
    };
    send(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
    );
    reply(1);
    send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let mut next_id = 2;
    let mut tools = |send: &mut dyn FnMut(&str)| -> Vec<String> {
        next_id += 1;
        send(&format!(r#"{{"jsonrpc":"2.0","id":{next_id},"method":"tools/list"}}"#));
        let list = reply(next_id);
        list["result"]["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["name"].as_str().map(String::from))
            .collect()
    };
    assert!(tools(&mut send).iter().any(|t| t == "echo"));

    // A new pin: the text component replaces echo.
    let text = std::fs::read_to_string(&profile).unwrap_or_default();
    std::fs::write(&profile, text.replace(&d1, &d2)).context("writing profile")?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let names = tools(&mut send);
        // (Whether `mcp serve` still lists the old version's `echo` after
        // the swap is the reload path's business, not the pin's.)
        if names.iter().any(|t| t == "word_count") {
            break;
        }
        assert!(Instant::now() < deadline, "the new pin was not loaded: {names:?}");
        std::thread::sleep(Duration::from_millis(300));
    }
    // A pin nothing has: refused, the working version stays.
    let bad = format!("sha256:{}", "cd".repeat(32));
    std::fs::write(&profile, text.replace(&d1, &bad)).context("writing profile")?;
    std::thread::sleep(Duration::from_secs(3));
    assert!(tools(&mut send).iter().any(|t| t == "word_count"), "a refused pin replaced the working version");
    let _ = child.kill();
    let _ = child.wait();
    Ok(())
}

/// `alice` / `s3cret`, bcrypt (cost 4) as docker-registry's htpasswd wants it.
const HTPASSWD: &str = "alice:$2b$04$gjuR5K311lhgUs8J3JddAOUf1mMvug0YGuajMWKYb3ynQ4Sx7ilqa\n";

/// A Docker config dir naming `helpers` (the JSON after `{`), and a
/// `docker-credential-NAME` script per `(NAME, body)` in a bin dir:
/// `(config dir, PATH with the bin dir first)`.
fn docker_setup(dir: &Path, config: &str, scripts: &[(&str, String)]) -> (PathBuf, std::ffi::OsString) {
    use std::os::unix::fs::PermissionsExt;
    let conf = dir.join("docker");
    let bin = dir.join("bin");
    for d in [&conf, &bin] {
        std::fs::create_dir_all(d).expect("creating the directories");
    }
    std::fs::write(conf.join("config.json"), config).expect("writing config.json");
    for (name, body) in scripts {
        let p = bin.join(format!("docker-credential-{name}"));
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).expect("writing the file");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("setting the permissions of p");
    }
    let mut paths = vec![bin];
    paths.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()));
    (conf, std::env::join_paths(paths).expect("building PATH"))
}

#[test]
fn registry_credentials_from_docker_credential_helpers() -> anyhow::Result<()> {
    let test = "oci::registry_credentials_from_docker_credential_helpers";
    let Some(reg) = Registry::start_with(test, Some(HTPASSWD)) else { return Ok(()) };
    let echo = wharf_tests::plugin(plugins::ECHO);
    let tag = format!("oci://{}/tools/echo:v1", reg.host());
    let tmp = tempfile::tempdir().context("creating a temp dir")?;
    let asked = tmp.path().join("asked");
    let good = format!(
        "[ \"$1\" = get ] || exit 3\ncat >> '{}'\necho '{{\"ServerURL\":\"x\",\"Username\":\"alice\",\"Secret\":\"s3cret\"}}'",
        asked.display()
    );
    let wrong = r#"echo '{"Username":"alice","Secret":"wrong"}'"#.to_string();
    let missing = "echo 'credentials not found in native keychain'; exit 1".to_string();
    let scripts = [("good", good), ("wrong", wrong), ("missing", missing)];
    let with = |home: &Home, config: &str, args: &[&str]| {
        let (conf, path) = docker_setup(home.path(), config, &scripts);
        let out =
            home.wharf().env("DOCKER_CONFIG", &conf).env("PATH", &path).args(args).output().expect("running wharf");
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
    };

    // Without credentials the registry refuses.
    let anon = Home::new();
    let (code, _, err) = anon.run(&["plugin", "push", &echo.display().to_string(), &tag]);
    assert_ne!(code, 0, "an anonymous push was accepted");
    assert!(err.to_lowercase().contains("unauthorized") || err.contains("401"), "{err}");

    // credHelpers for this host: pushed with the helper's credentials.
    let publisher = Home::new();
    let helpers = format!(r#"{{"credHelpers": {{"{}": "good"}}, "credsStore": "missing"}}"#, reg.host());
    let (code, out, err) = with(&publisher, &helpers, &["plugin", "push", &echo.display().to_string(), &tag]);
    assert_eq!(code, 0, "{out} {err}");
    let asked_hosts = std::fs::read_to_string(&asked).unwrap_or_default();
    assert!(asked_hosts.starts_with(&reg.host()), "the helper was not asked for the host: {asked_hosts:?}");

    // credsStore for every registry: pulled.
    let user = Home::new();
    let (code, out, err) = with(&user, r#"{"credsStore": "good"}"#, &["plugin", "pull", &tag]);
    assert_eq!(code, 0, "{out} {err}");
    let pulled: Value =
        serde_json::from_str(out.lines().last().unwrap_or("")).with_context(|| format!("parsing JSON: {out}"))?;
    assert!(pulled["digest"].as_str().is_some_and(|d| d.starts_with("sha256:")), "{pulled}");

    // A helper's wrong credentials are the registry's refusal; a failing
    // helper is a warning naming it, then the `auths` entry is used.
    let (code, _, err) = with(&Home::new(), r#"{"credsStore": "wrong"}"#, &["plugin", "pull", &tag]);
    assert_ne!(code, 0, "wrong credentials pulled");
    assert!(err.to_lowercase().contains("unauthorized") || err.contains("401"), "{err}");
    let auths =
        r#"{"credsStore": "missing", "auths": {"HOST": {"auth": "YWxpY2U6czNjcmV0"}}}"#.replace("HOST", &reg.host());
    let (code, out, err) = with(&Home::new(), &auths, &["plugin", "pull", &tag]);
    assert_eq!(code, 0, "{out} {err}");
    assert!(err.contains("docker-credential-missing") && err.contains("credentials not found"), "no warning: {err}");
    Ok(())
}
