//! Registry credentials: `WHARF_REGISTRY_USER` / `WHARF_REGISTRY_PASSWORD`
//! (for every registry, or only `WHARF_REGISTRY_HOST` when that is set),
//! else the Docker config file (`$DOCKER_CONFIG/config.json`, else
//! `~/.docker/config.json`): `auths.<host>.auth` (base64 `user:pass`) or
//! `auths.<host>.username` + `password`. Credential helpers (`credsStore`,
//! `credHelpers`) are not run. Without any, access is anonymous.

use std::io::Read;
use std::path::PathBuf;

use base64::Engine as _;
use oci_client::secrets::RegistryAuth;

/// User name for every registry (or `WHARF_REGISTRY_HOST`).
pub const USER_ENV: &str = "WHARF_REGISTRY_USER";
/// Password or token that goes with [`USER_ENV`].
pub const PASSWORD_ENV: &str = "WHARF_REGISTRY_PASSWORD";
/// Restricts the environment credentials to this registry host.
pub const HOST_ENV: &str = "WHARF_REGISTRY_HOST";

/// The credentials for `registry` (`HOST[:PORT]`).
pub fn auth_for(registry: &str) -> RegistryAuth {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    if let (Some(user), Some(pass)) = (env(USER_ENV), env(PASSWORD_ENV))
        && env(HOST_ENV).is_none_or(|h| h == registry)
    {
        return RegistryAuth::Basic(user, pass);
    }
    docker_config_path()
        .and_then(|p| read_bounded(&p))
        .and_then(|text| from_docker_config(&text, registry))
        .unwrap_or(RegistryAuth::Anonymous)
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
    let host_of = |key: &str| {
        let k = key.strip_prefix("https://").or_else(|| key.strip_prefix("http://")).unwrap_or(key);
        k.split('/').next().unwrap_or(k).to_string()
    };
    let wanted = if registry == "docker.io" { "index.docker.io" } else { registry };
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
mod tests {
    use super::*;

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
