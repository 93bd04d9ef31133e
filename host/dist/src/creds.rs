//! Registry credentials, first found wins:
//!
//! 1. `WHARF_REGISTRY_USER` / `WHARF_REGISTRY_PASSWORD` (for every registry,
//!    or only `WHARF_REGISTRY_HOST` when that is set);
//! 2. the Docker config file (`$DOCKER_CONFIG/config.json`, else
//!    `~/.docker/config.json`), as Docker reads it: the registry's
//!    credential helper (`credHelpers.<host>`), else the default credential
//!    store (`credsStore`), else `auths.<host>` (`auth`, base64
//!    `user:pass`, or `username` + `password`).
//!
//! A helper is the program `docker-credential-NAME` on `PATH`, run as
//! `docker-credential-NAME get` with the registry host on stdin; it answers
//! `{"Username": …, "Secret": …}` on stdout. It gets [`HELPER_TIMEOUT`] and
//! [`MAX_HELPER_OUTPUT`] bytes; a helper that fails, is missing, times out,
//! answers too much or not that JSON, or answers an identity token
//! (`Username` `<token>`, an OAuth refresh token Wharf cannot exchange) is
//! logged as a warning and the next source is tried. Without any, access is
//! anonymous.

use std::io::Read;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use base64::Engine as _;
use oci_client::secrets::RegistryAuth;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long a credential helper may take.
pub const HELPER_TIMEOUT: Duration = Duration::from_secs(10);
/// Most bytes read from a credential helper's stdout (and stderr).
pub const MAX_HELPER_OUTPUT: u64 = 64 << 10;

/// User name for every registry (or `WHARF_REGISTRY_HOST`).
pub const USER_ENV: &str = "WHARF_REGISTRY_USER";
/// Password or token that goes with [`USER_ENV`].
pub const PASSWORD_ENV: &str = "WHARF_REGISTRY_PASSWORD";
/// Restricts the environment credentials to this registry host.
pub const HOST_ENV: &str = "WHARF_REGISTRY_HOST";

/// The credentials for `registry` (`HOST[:PORT]`).
pub async fn auth_for(registry: &str) -> RegistryAuth {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    if let (Some(user), Some(pass)) = (env(USER_ENV), env(PASSWORD_ENV))
        && env(HOST_ENV).is_none_or(|h| h == registry)
    {
        return RegistryAuth::Basic(user, pass);
    }
    let Some(text) = docker_config_path().and_then(|p| read_bounded(&p)) else { return RegistryAuth::Anonymous };
    for helper in helpers_for(&text, registry) {
        match run_helper(&helper, registry).await {
            Ok(auth) => return auth,
            Err(why) => tracing::warn!(registry, helper = %helper, "registry credential helper: {why}"),
        }
    }
    from_docker_config(&text, registry).unwrap_or(RegistryAuth::Anonymous)
}

/// The credential helpers the Docker config `text` names for `registry`,
/// in the order they are tried: `credHelpers.<host>`, then `credsStore`.
/// Names are kept to `[A-Za-z0-9._-]` (they become a program name).
pub fn helpers_for(text: &str, registry: &str) -> Vec<String> {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(text) else { return Vec::new() };
    let wanted = wanted_host(registry);
    let mut out = Vec::new();
    if let Some(map) = v.get("credHelpers").and_then(|h| h.as_object())
        && let Some(name) = map.iter().find(|(k, _)| host_of(k) == wanted).and_then(|(_, n)| n.as_str())
    {
        out.push(name.to_string());
    }
    if let Some(name) = v.get("credsStore").and_then(|s| s.as_str()) {
        out.push(name.to_string());
    }
    out.retain(|n| {
        !n.is_empty()
            && n.len() <= 64
            && n.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    });
    out.dedup();
    out
}

/// `docker-credential-NAME` on `PATH`.
fn helper_program(name: &str) -> Option<PathBuf> {
    let file = format!("docker-credential-{name}");
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(&file)).find(|p| p.is_file())
}

/// Runs `docker-credential-NAME get` (found on `PATH`) for `registry`: its
/// credentials, or why there are none.
pub(crate) async fn run_helper(name: &str, registry: &str) -> Result<RegistryAuth, String> {
    let program = helper_program(name).ok_or_else(|| format!("docker-credential-{name} is not on PATH"))?;
    run_helper_at(&program, registry, HELPER_TIMEOUT).await
}

/// Runs the credential helper `program` (`PROGRAM get`, `registry` on
/// stdin), giving it `timeout`.
pub async fn run_helper_at(
    program: &std::path::Path,
    registry: &str,
    timeout: Duration,
) -> Result<RegistryAuth, String> {
    let program_path = program;
    let program = program.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut child = tokio::process::Command::new(program_path)
        .arg("get")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("{program}: {e}"))?;
    let talk = async {
        if let Some(mut stdin) = child.stdin.take() {
            // A helper that exits without reading its input is not an error here.
            let _ = stdin.write_all(registry.as_bytes()).await;
        }
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(format!("{program}: no pipes"));
        };
        let err = tokio::spawn(async move {
            let mut err = Vec::new();
            let _ = stderr.take(MAX_HELPER_OUTPUT).read_to_end(&mut err).await;
            err
        });
        let mut out = Vec::new();
        stdout.take(MAX_HELPER_OUTPUT + 1).read_to_end(&mut out).await.map_err(|e| format!("{program}: {e}"))?;
        if out.len() as u64 > MAX_HELPER_OUTPUT {
            let _ = child.kill().await;
            return Err(format!("{program} answered more than {MAX_HELPER_OUTPUT} bytes"));
        }
        let status = child.wait().await.map_err(|e| format!("{program}: {e}"))?;
        Ok((status, out, err.await.unwrap_or_default()))
    };
    let (status, out, err) = tokio::time::timeout(timeout, talk)
        .await
        .map_err(|_| format!("{program} did not answer within {} ms", timeout.as_millis()))??;
    let first_line = |b: &[u8]| {
        let text = String::from_utf8_lossy(b);
        crate::reference::shown(text.lines().next().unwrap_or("").trim())
    };
    if !status.success() {
        // Helpers print "credentials not found in native keychain" on stdout.
        let msg = if err.trim_ascii().is_empty() { first_line(&out) } else { first_line(&err) };
        return Err(format!("{program} get failed ({status}): {msg}"));
    }
    parse_helper_output(&out).map_err(|why| format!("{program}: {why}"))
}

/// A credential helper's answer: `{"Username": …, "Secret": …}`.
pub(crate) fn parse_helper_output(out: &[u8]) -> Result<RegistryAuth, String> {
    let v: serde_json::Value = serde_json::from_slice(out).map_err(|e| format!("the answer is not JSON: {e}"))?;
    let field = |k: &str| v.get(k).and_then(|x| x.as_str());
    let (Some(user), Some(secret)) = (field("Username"), field("Secret")) else {
        return Err("the answer has no Username and Secret".into());
    };
    if user == "<token>" {
        return Err("it holds an identity token (OAuth refresh token), which Wharf does not exchange".into());
    }
    if secret.is_empty() {
        return Err("the answer's Secret is empty".into());
    }
    Ok(RegistryAuth::Basic(user.to_string(), secret.to_string()))
}

/// `HOST[:PORT]` of a config key: `https://HOST/v1/` → `HOST`.
fn host_of(key: &str) -> &str {
    let k = key.strip_prefix("https://").or_else(|| key.strip_prefix("http://")).unwrap_or(key);
    k.split('/').next().unwrap_or(k)
}

/// The key Docker files `registry` under (`docker.io` is `index.docker.io`).
fn wanted_host(registry: &str) -> &str {
    if registry == "docker.io" { "index.docker.io" } else { registry }
}

fn docker_config_path() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DOCKER_CONFIG").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(dir).join("config.json"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".docker").join("config.json"))
}

fn read_bounded(path: &std::path::Path) -> Option<String> {
    let f = std::fs::File::open(path).ok()?;
    let mut s = String::new();
    f.take(1 << 20).read_to_string(&mut s).ok()?;
    Some(s)
}

/// The credentials for `registry` in a Docker config file's text. Keys
/// match as `HOST`, `https://HOST`, `http://HOST`, with or without a path
/// (`https://index.docker.io/v1/`).
pub fn from_docker_config(text: &str, registry: &str) -> Option<RegistryAuth> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let auths = v.get("auths")?.as_object()?;
    let wanted = wanted_host(registry);
    let entry = auths.iter().find(|(k, _)| host_of(k) == wanted).map(|(_, e)| e)?;
    if let Some(auth) = entry.get("auth").and_then(|a| a.as_str()).filter(|a| !a.is_empty()) {
        let raw = base64::engine::general_purpose::STANDARD.decode(auth.trim()).ok()?;
        let text = String::from_utf8(raw).ok()?;
        let (user, pass) = text.split_once(':')?;
        return Some(RegistryAuth::Basic(user.to_string(), pass.to_string()));
    }
    let user = entry.get("username")?.as_str()?;
    let pass = entry.get("password")?.as_str()?;
    Some(RegistryAuth::Basic(user.to_string(), pass.to_string()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    use anyhow::Context;

    #[test]
    fn helpers_come_from_cred_helpers_then_creds_store() {
        let text = r#"{"credHelpers": {"ghcr.io": "gh", "https://evil.io": "../../bin/sh"},
                      "credsStore": "secretservice", "auths": {"ghcr.io": {}}}"#;
        assert_eq!(helpers_for(text, "ghcr.io"), ["gh", "secretservice"]);
        assert_eq!(helpers_for(text, "quay.io"), ["secretservice"]);
        // A name that is not a plain word is never run.
        assert_eq!(helpers_for(text, "evil.io"), ["secretservice"]);
        assert!(helpers_for(r#"{"auths": {}}"#, "ghcr.io").is_empty());
        assert!(helpers_for("not json", "ghcr.io").is_empty());
    }

    /// An executable `docker-credential-NAME` shell script in `dir`.
    fn script(dir: &std::path::Path, name: &str, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join(format!("docker-credential-{name}"));
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).expect("writing the file");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("setting the permissions of p");
        p
    }

    #[tokio::test]
    async fn a_fake_helper_is_run_with_the_host_on_stdin_and_bounded() -> anyhow::Result<()> {
        let dir = tempfile::tempdir().context("creating a temp dir")?;
        let d = dir.path();
        let asked = d.join("asked");
        let good = script(
            d,
            "good",
            &format!(
                "[ \"$1\" = get ] || exit 3\ncat > '{}'\necho '{{\"ServerURL\":\"x\",\"Username\":\"alice\",\"Secret\":\"s3cret\"}}'",
                asked.display()
            ),
        );
        let t = Duration::from_secs(10);
        assert_eq!(
            run_helper_at(&good, "127.0.0.1:5000", t).await,
            Ok(RegistryAuth::Basic("alice".into(), "s3cret".into()))
        );
        assert_eq!(std::fs::read_to_string(&asked).unwrap_or_default(), "127.0.0.1:5000");

        let missing = script(d, "missing", "echo 'credentials not found in native keychain'\nexit 1");
        let e = run_helper_at(&missing, "ghcr.io", t).await.unwrap_err();
        assert!(
            e.contains("credentials not found in native keychain") && e.contains("docker-credential-missing"),
            "{e}"
        );

        let token = script(d, "token", r#"echo '{"Username":"<token>","Secret":"refresh"}'"#);
        assert!(run_helper_at(&token, "ghcr.io", t).await.unwrap_err().contains("identity token"));

        let garbage = script(d, "garbage", "echo 'user=alice'");
        assert!(run_helper_at(&garbage, "ghcr.io", t).await.unwrap_err().contains("not JSON"));

        let flood = script(d, "flood", "head -c 1000000 /dev/zero");
        let e = run_helper_at(&flood, "ghcr.io", t).await.unwrap_err();
        assert!(e.contains("more than 65536 bytes"), "{e}");

        let slow = script(d, "slow", "exec sleep 30");
        let t0 = std::time::Instant::now();
        let e = run_helper_at(&slow, "ghcr.io", Duration::from_millis(300)).await.unwrap_err();
        assert!(e.contains("did not answer within 300 ms"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(5), "the helper was not cut off");

        let absent = run_helper_at(&d.join("docker-credential-absent"), "ghcr.io", t).await.unwrap_err();
        assert!(absent.contains("docker-credential-absent"), "{absent}");
        Ok(())
    }

    #[test]
    fn docker_config_auth_entries() {
        let auth = base64::engine::general_purpose::STANDARD.encode("alice:s3cr:et");
        let text = format!(
            r#"{{"auths": {{"https://ghcr.io": {{"auth": "{auth}"}},
                "127.0.0.1:5000": {{"username": "bob", "password": "pw"}},
                "https://index.docker.io/v1/": {{"auth": "{auth}"}}}}}}"#
        );
        assert_eq!(from_docker_config(&text, "ghcr.io"), Some(RegistryAuth::Basic("alice".into(), "s3cr:et".into())));
        assert_eq!(from_docker_config(&text, "127.0.0.1:5000"), Some(RegistryAuth::Basic("bob".into(), "pw".into())));
        assert!(from_docker_config(&text, "docker.io").is_some());
        assert_eq!(from_docker_config(&text, "quay.io"), None);
        assert_eq!(from_docker_config("not json", "ghcr.io"), None);
    }
}
