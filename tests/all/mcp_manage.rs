//! `wharf mcp add | list | remove` on the binary, on a temp project and
//! HOME: rows written into the project layer (keeping the file's comments)
//! and the user layer, sandboxed unless `--no-sandbox`; duplicates and bad
//! names refused naming the file, the file left unchanged; `list` showing
//! each row's layer file and confinement, `--check` starting them;
//! `wharf mcp tools` seeing the added servers; `remove` giving the file
//! back as it was; and a server added this way that tries to write outside
//! its grant refused by the OS sandbox in a headless run.

use std::path::Path;
use std::process::Output;

use anyhow::Context;
use serde_json::Value;

use crate::mcp::{Kill, fixture, http_fixture};
use crate::mcp_sandbox::{Env, call, profile_with, results, sandbox_available};

/// `wharf ARGS` in the workspace with HOME at `home`.
fn wharf(home: &Path, ws: &Path, args: &[&str]) -> anyhow::Result<(i32, String, String)> {
    let out: Output = wharf_tests::wharf(home).current_dir(ws).args(args).output().context("running wharf")?;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

fn server<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["servers"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["name"] == name))
        .unwrap_or_else(|| panic!("no server `{name}` in {list}"))
}

const PROJECT: &str = "# team settings\n[agent]\nmax_steps = 9 # keep me\n";

#[test]
fn mcp_add_writes_sandboxed_rows_list_shows_their_layers_and_remove_takes_them_out() -> anyhow::Result<()> {
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let ws = tempfile::tempdir().context("creating a temp dir")?;
    let (h, w) = (home.path(), ws.path());
    let project = w.join(".wharf").join("config.toml");
    std::fs::create_dir_all(w.join(".wharf")).context("creating .wharf")?;
    std::fs::write(&project, PROJECT).context("writing the project layer")?;
    let user = h.join(".wharf").join("config.toml");
    let fx = fixture().display().to_string();
    let (url, http) = http_fixture();
    let _http = Kill(http);

    // A stdio server into the project layer: appended, comments kept, sandboxed.
    let (code, out, err) = wharf(h, w, &["mcp", "add", "-e", "FIXTURE_VAR=set", "fx", "--", &fx, "stdio"])?;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("Added stdio MCP server `fx`") && out.contains(".wharf/config.toml (project layer)"), "{out}");
    assert!(out.contains("sandboxed"), "{out}");
    let text = std::fs::read_to_string(&project).context("reading the project layer")?;
    assert!(text.starts_with(PROJECT), "the file's own lines are kept: {text}");
    assert!(
        text.ends_with(&format!(
            "\n[[mcp]]\nname = \"fx\"\ncommand = \"{fx}\"\nargs = [\"stdio\"]\nenv = {{ FIXTURE_VAR = \"set\" }}\n"
        )),
        "{text}"
    );
    assert!(!text.contains("unsandboxed"), "confinement is the default, nothing opts out: {text}");

    // An HTTP server into the user layer, with a header.
    let (code, out, err) = wharf(h, w, &["mcp", "add", "--scope", "user", "-H", "X-Test: yes", "remote", &url])?;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("Added HTTP MCP server `remote` to ~/.wharf/config.toml (user layer)"), "{out}");
    let user_text = std::fs::read_to_string(&user).context("reading the user layer")?;
    assert!(user_text.contains(&format!("url = \"{url}\"")) && user_text.contains("X-Test = \"yes\""), "{user_text}");

    // Refused: a name any layer defines (naming where), a bad name, an opt-out
    // that does not apply; every file is left as it was.
    let before = (std::fs::read_to_string(&project)?, std::fs::read_to_string(&user)?);
    for (args, want) in [
        (vec!["mcp", "add", "fx", "--", "other"], "already defined at"),
        (vec!["mcp", "add", "--scope", "user", "fx", "--", "other"], "already defined at"),
        (vec!["mcp", "add", "remote", "--", "other"], "already defined at ~/.wharf/config.toml:"),
        (vec!["mcp", "add", "bad name", "--", "other"], "bad MCP server name"),
        (vec!["mcp", "add", "a__b", "--", "other"], "bad MCP server name"),
        (vec!["mcp", "add", "--no-sandbox", "web", "https://example.com/mcp"], "stdio servers"),
        (vec!["mcp", "add", "-e", "NOEQUALS", "x", "--", "other"], "KEY=VALUE"),
    ] {
        let (code, out, err) = wharf(h, w, &args)?;
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains(want), "{args:?}: {err}");
        let names_file = err.contains(".wharf/config.toml");
        assert!(names_file || want == "KEY=VALUE", "the message names the file: {args:?}: {err}");
    }
    let (_, err_dup) = (0, wharf(h, w, &["mcp", "add", "fx", "--", "other"])?.2);
    assert!(err_dup.contains(&format!("{}:", project.display())), "names the project file and line: {err_dup}");
    assert_eq!((std::fs::read_to_string(&project)?, std::fs::read_to_string(&user)?), before);

    // list: every row with its layer file and sandbox state.
    let (code, out, err) = wharf(h, w, &["mcp", "list", "--json"])?;
    assert_eq!(code, 0, "{out}{err}");
    let list: Value = serde_json::from_str(&out).with_context(|| format!("parsing JSON: {out}"))?;
    let s = server(&list, "fx");
    assert_eq!(s["transport"], "stdio", "{s}");
    assert_eq!(s["sandboxed"], true, "{s}");
    assert!(s["layer"].as_str().is_some_and(|l| l.starts_with(&format!("{}:", project.display()))), "{s}");
    let r = server(&list, "remote");
    assert_eq!(r["transport"], "http", "{r}");
    assert!(r["layer"].as_str().is_some_and(|l| l.starts_with("~/.wharf/config.toml:")), "{r}");
    assert!(r["confinement"].as_str().is_some_and(|c| c.contains("not a local process")), "{r}");
    let (code, text_list, _) = wharf(h, w, &["mcp", "list"])?;
    assert_eq!(code, 0);
    assert!(text_list.contains("fx (stdio)") && text_list.contains("remote (http)"), "{text_list}");

    // --check starts them; `wharf mcp tools` sees their tools.
    let sandbox = sandbox_available();
    let (code, out, err) = wharf(h, w, &["mcp", "list", "--check", "--json"])?;
    let list: Value = serde_json::from_str(&out).with_context(|| format!("parsing JSON: {out}{err}"))?;
    assert_eq!(server(&list, "remote")["check"]["state"], "ready", "{list}");
    if sandbox.is_ok() {
        assert_eq!(code, 0, "{out}{err}");
        assert_eq!(server(&list, "fx")["check"]["state"], "ready", "{list}");
        let (code, out, err) = wharf(h, w, &["mcp", "tools", "--json"])?;
        assert_eq!(code, 0, "{out}{err}");
        let tools: Value = serde_json::from_str(&out).with_context(|| format!("parsing JSON: {out}"))?;
        let names: Vec<&str> =
            tools["tools"].as_array().into_iter().flatten().filter_map(|t| t["name"].as_str()).collect();
        assert!(names.contains(&"mcp__fx__echo") && names.contains(&"mcp__remote__echo"), "{names:?}");
    } else {
        assert_eq!(code, 1, "a sandboxed row cannot start without the OS sandbox: {out}");
    }

    // remove: the project file is back to what the user wrote.
    let (code, out, err) = wharf(h, w, &["mcp", "remove", "fx"])?;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("Removed MCP server `fx`"), "{out}");
    assert_eq!(std::fs::read_to_string(&project)?, PROJECT);
    // Without --scope, the user layer is looked at next.
    let (code, out, err) = wharf(h, w, &["mcp", "remove", "remote"])?;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("~/.wharf/config.toml (user layer)"), "{out}");
    let (code, _, err) = wharf(h, w, &["mcp", "remove", "fx"])?;
    assert_eq!(code, 2);
    assert!(err.contains("no MCP server named `fx`"), "{err}");
    let (_, out, _) = wharf(h, w, &["mcp", "list"])?;
    assert!(out.contains("No MCP servers configured"), "{out}");
    Ok(())
}

#[test]
fn mcp_add_no_sandbox_writes_the_opt_out_and_list_says_so() -> anyhow::Result<()> {
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let ws = tempfile::tempdir().context("creating a temp dir")?;
    let (h, w) = (home.path(), ws.path());
    let (code, out, err) = wharf(h, w, &["mcp", "add", "--no-sandbox", "free", "--", "srv", "--flag"])?;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("UNCONFINED"), "{out}");
    let text = std::fs::read_to_string(w.join(".wharf/config.toml")).context("reading the project layer")?;
    assert_eq!(text, "[[mcp]]\nname = \"free\"\ncommand = \"srv\"\nargs = [\"--flag\"]\nunsandboxed = true\n");
    let (_, out, _) = wharf(h, w, &["mcp", "list", "--json"])?;
    let list: Value = serde_json::from_str(&out).with_context(|| format!("parsing JSON: {out}"))?;
    assert_eq!(server(&list, "free")["sandboxed"], false, "{list}");
    Ok(())
}

// On the binary: `wharf mcp add` writes the project layer that `wharf run`
// in that workspace reads.
#[test]
fn a_server_added_with_mcp_add_cannot_write_outside_its_grant() -> anyhow::Result<()> {
    let env = Env::new();
    if let Err(line) = sandbox_available() {
        wharf_tests::skip(&wharf_tests::current_test(), &format!("no OS sandbox here: {line}"));
        return Ok(());
    }
    let fx = fixture().display().to_string();
    let grant = format!("{}:rw", env.grant.path().display());
    let (code, out, err) = wharf(
        env.home.path(),
        env.ws.path(),
        &["mcp", "add", "--dir", &grant, "--required", "jail", "--", &fx, "stdio"],
    )?;
    assert_eq!(code, 0, "{out}{err}");
    let outside = Env::p(&env.outside, "escaped.txt");
    let in_ws = Env::p(&env.ws, "escaped.txt");
    let granted = Env::p(&env.grant, "granted.txt");
    let calls = [
        call("mcp__jail__write_file", &format!("{{ path = \"{outside}\", text = \"escaped\" }}")),
        call("mcp__jail__write_file", &format!("{{ path = \"{in_ws}\", text = \"escaped\" }}")),
        call("mcp__jail__write_file", &format!("{{ path = \"{granted}\", text = \"granted\" }}")),
    ];
    // The profile has the model only: the server comes from the project layer.
    let profile = env.profile(&profile_with(&calls, ""));
    let (code, events, stderr) = env.run_binary(&profile, &[]);
    assert_eq!(code, 0, "{stderr}");
    let r = results(&events);
    assert_eq!(r.len(), 3, "{r:?}");
    for (i, res) in r.iter().take(2).enumerate() {
        assert!(res.is_error && res.content.contains("Permission denied"), "call {i}: {res:?}");
    }
    assert!(!r[2].is_error && r[2].content.contains("wrote 7 bytes"), "{:?}", r[2]);
    assert!(!Path::new(&outside).exists() && !Path::new(&in_ws).exists());
    assert_eq!(std::fs::read_to_string(&granted).unwrap_or_default(), "granted");
    Ok(())
}

/// A tiny HTTP server answering every request with a 307 to `target`; its URL.
fn redirector(target: &str) -> anyhow::Result<String> {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding the redirector")?;
    let port = listener.local_addr()?.port();
    let target = target.to_string();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut reader = BufReader::new(match conn.try_clone() {
                Ok(c) => c,
                Err(_) => continue,
            });
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                    break;
                }
                if let Some((k, v)) = line.split_once(':')
                    && k.eq_ignore_ascii_case("content-length")
                {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0u8; length.min(1 << 20)];
            let _ = reader.read_exact(&mut body);
            let _ = write!(
                conn,
                "HTTP/1.1 307 Temporary Redirect\r\nLocation: {target}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
    });
    Ok(format!("http://127.0.0.1:{port}/mcp"))
}

/// An HTTP server added with `wharf mcp add NAME URL` reaches only its own
/// host: a redirect to another host is refused with a message naming the
/// host and how to allow it; `--host` widens the row's allowlist
/// (`[mcp.sandbox] hosts`), and then the redirect is followed.
#[test]
fn an_http_server_reaches_only_its_own_host_unless_the_row_widens_it() -> anyhow::Result<()> {
    let home = tempfile::tempdir().context("creating a temp dir")?;
    let ws = tempfile::tempdir().context("creating a temp dir")?;
    let (h, w) = (home.path(), ws.path());
    let (url, http) = http_fixture();
    let _http = Kill(http);
    // The same server under another host name: `localhost`.
    let moved = url.replacen("127.0.0.1", "localhost", 1);
    anyhow::ensure!(moved != url, "the fixture's URL has no 127.0.0.1: {url}");
    let hop = redirector(&moved)?;
    let (code, out, err) = wharf(h, w, &["mcp", "add", "hop", &hop])?;
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = wharf(h, w, &["mcp", "add", "--host", "localhost", "wide", &hop])?;
    assert_eq!(code, 0, "{out}{err}");
    let text = std::fs::read_to_string(w.join(".wharf/config.toml")).context("reading the project layer")?;
    assert!(text.contains("[mcp.sandbox]\nhosts = [\"localhost\"]\n"), "{text}");
    let (code, _, err) = wharf(h, w, &["mcp", "add", "--host", "localhost", "local", "--", "srv"])?;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--host widens an HTTP server's host allowlist"), "{err}");
    // An option after the URL is not taken for a command line.
    let (code, _, err) = wharf(h, w, &["mcp", "add", "late", &hop, "-H", "A: b"])?;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("options go before the name"), "{err}");

    let (code, out, err) = wharf(h, w, &["mcp", "list", "--check", "--json"])?;
    assert_eq!(code, 1, "one server is refused: {out}{err}");
    let list: Value = serde_json::from_str(&out).with_context(|| format!("parsing JSON: {out}{err}"))?;
    let refused = &server(&list, "hop")["check"];
    assert_eq!(refused["state"], "failed", "{list}");
    let port = hop.trim_start_matches("http://127.0.0.1:").trim_end_matches("/mcp");
    let why = refused["error"].as_str().unwrap_or("");
    assert!(
        why.contains("MCP server `hop` redirected to localhost:")
            && why.contains(&format!("which is not in its host allowlist (127.0.0.1:{port}): refused"))
            && why.contains("`[mcp.sandbox] hosts = [\"localhost\"]`"),
        "{why}"
    );
    assert!(server(&list, "hop")["confinement"].as_str().is_some_and(|c| c.contains("its own host only")), "{list}");
    assert_eq!(server(&list, "wide")["check"]["state"], "ready", "{list}");
    Ok(())
}
