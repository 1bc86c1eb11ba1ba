//! Registry credentials from where podman, skopeo, oras and docker keep them
//! (containers-auth.json(5)): `$REGISTRY_AUTH_FILE`, then
//! `$XDG_RUNTIME_DIR/containers/auth.json`, `~/.config/containers/auth.json`, then
//! `$DOCKER_CONFIG/config.json` or `~/.docker/config.json`. The first file with an
//! entry for the repository wins; an entry for `registry/namespace` is preferred to
//! one for the whole registry, as podman does. Credential helpers are not run.

use crate::error::CniError;
use base64::Engine as _;
use oci_client::secrets::RegistryAuth;
use serde_json::Value;
use std::path::PathBuf;

/// The auth files to look in, in order.
fn auth_files() -> Vec<PathBuf> {
    let env = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let mut files = Vec::new();
    if let Some(file) = env("REGISTRY_AUTH_FILE") {
        files.push(file);
    }
    if let Some(dir) = env("XDG_RUNTIME_DIR") {
        files.push(dir.join("containers/auth.json"));
    }
    let home = env("HOME");
    if let Some(home) = &home {
        files.push(home.join(".config/containers/auth.json"));
    }
    match env("DOCKER_CONFIG") {
        Some(dir) => files.push(dir.join("config.json")),
        None => {
            if let Some(home) = &home {
                files.push(home.join(".docker/config.json"));
            }
        }
    }
    files
}

/// The credentials for `registry`/`repository`, or anonymous.
pub fn credentials(registry: &str, repository: &str) -> Result<RegistryAuth, CniError> {
    for file in auth_files() {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let json: Value = serde_json::from_str(&text).map_err(|e| {
            CniError::config(format!("auth file {} is not JSON", file.display())).with_details(e)
        })?;
        if let Some(auth) = lookup(&json, registry, repository) {
            return decode(&auth).ok_or_else(|| {
                CniError::config(format!(
                    "auth file {}: the entry for {registry} is not base64 of user:password",
                    file.display()
                ))
            });
        }
    }
    Ok(RegistryAuth::Anonymous)
}

/// The `auth` value of the most specific entry matching the repository.
fn lookup(json: &Value, registry: &str, repository: &str) -> Option<String> {
    let auths = json.get("auths")?.as_object()?;
    let normalise = |key: &str| {
        key.trim_start_matches("https://")
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string()
    };
    // registry/a/b/c, registry/a/b, registry/a, registry.
    let mut scopes = vec![registry.to_string()];
    let mut path = registry.to_string();
    for part in repository.split('/') {
        path = format!("{path}/{part}");
        scopes.push(path.clone());
    }
    scopes.iter().rev().find_map(|scope| {
        auths
            .iter()
            .find(|(key, _)| normalise(key) == *scope)
            .and_then(|(_, entry)| entry.get("auth")?.as_str().map(str::to_string))
    })
}

fn decode(auth: &str) -> Option<RegistryAuth> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(auth.trim())
        .ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (user, password) = text.split_once(':')?;
    Some(RegistryAuth::Basic(user.to_string(), password.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_specific_entry_wins_and_schemes_are_ignored() {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let json = serde_json::json!({"auths": {
            "https://registry.example": {"auth": b64("all:one")},
            "registry.example/vendor": {"auth": b64("vendor:two")},
        }});
        let user =
            |repo: &str| match lookup(&json, "registry.example", repo).and_then(|a| decode(&a)) {
                Some(RegistryAuth::Basic(user, _)) => user,
                _ => "none".into(),
            };
        assert_eq!(user("vendor/ipam"), "vendor");
        assert_eq!(user("other/ipam"), "all");
        assert!(lookup(&json, "elsewhere.example", "vendor/ipam").is_none());
    }
}
