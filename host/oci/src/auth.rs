//! Registry credentials: `CAPGATE_REGISTRY_USERNAME` / `CAPGATE_REGISTRY_PASSWORD`, or the
//! `auths` entry of the docker config file (`$DOCKER_CONFIG/config.json`, else
//! `~/.docker/config.json`) that `docker login` writes. Credential helpers (`credsStore`,
//! `credHelpers`) are not run.

use super::OciError;
use base64::Engine;
use std::path::PathBuf;

/// The environment variable naming the registry user (with [`PASSWORD_ENV`]).
pub const USERNAME_ENV: &str = "CAPGATE_REGISTRY_USERNAME";
/// The environment variable holding the registry password or token.
pub const PASSWORD_ENV: &str = "CAPGATE_REGISTRY_PASSWORD";
/// The largest docker config file read.
const MAX_DOCKER_CONFIG_BYTES: u64 = 1 << 20;

/// A registry login.
#[derive(Clone)]
pub struct Credentials {
    /// The user.
    pub username: String,
    /// The password or token.
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// The credentials for `host`: the environment's first, then the docker config's; none
/// when neither has any.
pub fn credentials_for(host: &str) -> Result<Option<Credentials>, OciError> {
    let user = std::env::var(USERNAME_ENV).ok().filter(|v| !v.is_empty());
    let pass = std::env::var(PASSWORD_ENV).ok().filter(|v| !v.is_empty());
    match (user, pass) {
        (Some(username), Some(password)) => {
            return Ok(Some(Credentials { username, password }));
        }
        (Some(_), None) | (None, Some(_)) => {
            return Err(OciError::Credentials(format!(
                "set both {USERNAME_ENV} and {PASSWORD_ENV}, or neither"
            )));
        }
        (None, None) => {}
    }
    let Some(path) = docker_config_path() else {
        return Ok(None);
    };
    let text = match std::fs::File::open(&path) {
        Ok(f) => {
            use std::io::Read;
            let mut s = String::new();
            f.take(MAX_DOCKER_CONFIG_BYTES + 1)
                .read_to_string(&mut s)
                .map_err(|e| {
                    OciError::Credentials(format!("cannot read {}: {e}", path.display()))
                })?;
            if s.len() as u64 > MAX_DOCKER_CONFIG_BYTES {
                return Err(OciError::Credentials(format!(
                    "{} is larger than {MAX_DOCKER_CONFIG_BYTES} bytes",
                    path.display()
                )));
            }
            s
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(OciError::Credentials(format!(
                "cannot read {}: {e}",
                path.display()
            )));
        }
    };
    from_docker_config(&text, host)
        .map_err(|e| OciError::Credentials(format!("{}: {e}", path.display())))
}

fn docker_config_path() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DOCKER_CONFIG").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir).join("config.json"));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".docker").join("config.json"))
}

/// The `auths` entry for `host` in a docker config: keyed by `host` itself or by a URL
/// whose host part is `host`; `auth` is base64 `user:password` (or `username` and
/// `password` fields).
fn from_docker_config(text: &str, host: &str) -> Result<Option<Credentials>, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let Some(auths) = v.get("auths").and_then(|a| a.as_object()) else {
        return Ok(None);
    };
    let key_host = |k: &str| -> String {
        let k = k
            .strip_prefix("https://")
            .or_else(|| k.strip_prefix("http://"))
            .unwrap_or(k);
        k.split('/').next().unwrap_or_default().to_string()
    };
    let Some(entry) = auths
        .iter()
        .find(|(k, _)| k.as_str() == host)
        .or_else(|| auths.iter().find(|(k, _)| key_host(k) == host))
        .map(|(_, e)| e)
    else {
        return Ok(None);
    };
    if let Some(auth) = entry.get("auth").and_then(|a| a.as_str())
        && !auth.is_empty()
    {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .map_err(|e| format!("the `auth` of `{host}` is not base64: {e}"))?;
        let decoded = String::from_utf8(decoded)
            .map_err(|_| format!("the `auth` of `{host}` is not UTF-8"))?;
        let (username, password) = decoded
            .split_once(':')
            .ok_or_else(|| format!("the `auth` of `{host}` is not `user:password`"))?;
        return Ok(Some(Credentials {
            username: username.to_string(),
            password: password.to_string(),
        }));
    }
    match (
        entry.get("username").and_then(|u| u.as_str()),
        entry.get("password").and_then(|p| p.as_str()),
    ) {
        (Some(u), Some(p)) => Ok(Some(Credentials {
            username: u.to_string(),
            password: p.to_string(),
        })),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_docker_config_auth_of_the_registry_host_is_used() {
        let text = r#"{"auths": {
            "other.example": {"auth": "b3RoZXI6eA=="},
            "https://registry.example:5000/v2/": {"auth": "YWxpY2U6czNjcjN0Og=="}
        }}"#;
        let c = from_docker_config(text, "registry.example:5000")
            .expect("parses")
            .expect("found");
        assert_eq!(c.username, "alice");
        assert_eq!(c.password, "s3cr3t:", "only the first colon splits");
        assert!(
            from_docker_config(text, "none.example")
                .expect("parses")
                .is_none()
        );
    }

    #[test]
    fn a_docker_config_auth_that_is_not_base64_is_an_error() {
        let text = r#"{"auths": {"r.example": {"auth": "not base64!"}}}"#;
        assert!(from_docker_config(text, "r.example").is_err());
    }
}
