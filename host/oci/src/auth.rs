//! Registry credentials: `CAPGATE_REGISTRY_USERNAME` / `CAPGATE_REGISTRY_PASSWORD`, or the
//! docker config file (`$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`) that
//! `docker login` writes, read as docker reads it: the registry's credential helper
//! (`credHelpers`), else the default one (`credsStore`), each the program
//! `docker-credential-NAME` run with `get` and the registry on standard input; else the
//! `auths` entry. A helper that knows no credentials for the registry leaves the `auths`
//! entry (if any) to answer; one that fails, hangs past ten seconds or answers something
//! else is an error, never an anonymous pull.

use super::OciError;
use base64::Engine;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The environment variable naming the registry user (with [`PASSWORD_ENV`]).
pub const USERNAME_ENV: &str = "CAPGATE_REGISTRY_USERNAME";
/// The environment variable holding the registry password or token.
pub const PASSWORD_ENV: &str = "CAPGATE_REGISTRY_PASSWORD";
/// The largest docker config file read.
const MAX_DOCKER_CONFIG_BYTES: u64 = 1 << 20;
/// How long a credential helper may take.
pub const HELPER_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read from a credential helper.
const MAX_HELPER_ANSWER_BYTES: u64 = 64 << 10;

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
    let located = |e: String| OciError::Credentials(format!("{}: {e}", path.display()));
    if let Some(helper) = helper_for(&text, host).map_err(located)?
        && let Some(found) = run_helper(&helper, host)?
    {
        return Ok(Some(found));
    }
    from_docker_config(&text, host).map_err(located)
}

/// The credential helper docker would ask for `host`: `credHelpers[host]`, else
/// `credsStore`. A name that is not a plain program suffix (`pass`, `ecr-login`,
/// `desktop`) is refused: the config file does not get to name a path.
fn helper_for(text: &str, host: &str) -> Result<Option<String>, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let name = v
        .get("credHelpers")
        .and_then(|h| h.get(host))
        .or_else(|| v.get("credsStore"))
        .and_then(|n| n.as_str())
        .filter(|n| !n.is_empty());
    let Some(name) = name else { return Ok(None) };
    let plain = name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !name.starts_with('.');
    if !plain {
        return Err(format!(
            "the credential helper `{name}` is not a helper name (letters, digits, `-`, `_`, `.`)"
        ));
    }
    Ok(Some(name.to_string()))
}

/// `docker-credential-NAME get`, with `host` on standard input: its `Username` and
/// `Secret`, or `None` when it knows no credentials for `host`.
fn run_helper(name: &str, host: &str) -> Result<Option<Credentials>, OciError> {
    use std::io::{Read, Write};
    use std::process::{Command, Stdio};
    let program = format!("docker-credential-{name}");
    let failed = |why: String| OciError::Credentials(format!("{program} get ({host}): {why}"));
    let mut child = Command::new(&program)
        .arg("get")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| failed(format!("cannot run it: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A helper that exits without reading is judged by its answer below.
        let _ = stdin.write_all(host.as_bytes());
    }
    let mut stdout = child
        .stdout
        .take()
        .ok_or_else(|| failed("no stdout".into()))?;
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let read = (&mut stdout)
            .take(MAX_HELPER_ANSWER_BYTES + 1)
            .read_to_end(&mut out);
        read.map(|_| out)
    });
    let deadline = Instant::now() + HELPER_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(failed(format!(
                    "no answer within {} s",
                    HELPER_TIMEOUT.as_secs()
                )));
            }
            Err(e) => return Err(failed(e.to_string())),
        }
    };
    let out = reader
        .join()
        .map_err(|_| failed("reading its answer failed".into()))?
        .map_err(|e| failed(e.to_string()))?;
    if out.len() as u64 > MAX_HELPER_ANSWER_BYTES {
        return Err(failed(format!(
            "its answer is larger than {MAX_HELPER_ANSWER_BYTES} bytes"
        )));
    }
    parse_helper_answer(status.success(), &out).map_err(failed)
}

/// A helper's answer: on success `{"ServerURL", "Username", "Secret"}`; on failure, the
/// protocol's "credentials not found" message means none for this registry.
fn parse_helper_answer(success: bool, out: &[u8]) -> Result<Option<Credentials>, String> {
    let text = String::from_utf8_lossy(out);
    if !success {
        if text.contains("credentials not found") {
            return Ok(None);
        }
        let first = text.lines().next().unwrap_or_default();
        return Err(format!(
            "it failed: {}",
            first.chars().take(200).collect::<String>()
        ));
    }
    #[derive(serde::Deserialize)]
    struct Answer {
        #[serde(rename = "Username")]
        username: String,
        #[serde(rename = "Secret")]
        secret: String,
    }
    let a: Answer = serde_json::from_slice(out)
        .map_err(|e| format!("its answer is not {{\"Username\", \"Secret\"}} JSON: {e}"))?;
    if a.secret.is_empty() {
        return Ok(None);
    }
    Ok(Some(Credentials {
        username: a.username,
        password: a.secret,
    }))
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
    fn the_registrys_credential_helper_comes_before_the_default_store() {
        let text = r#"{"credsStore": "desktop", "credHelpers": {"r.example:5000": "ecr-login"}}"#;
        assert_eq!(
            helper_for(text, "r.example:5000")
                .expect("parses")
                .as_deref(),
            Some("ecr-login")
        );
        assert_eq!(
            helper_for(text, "other.example")
                .expect("parses")
                .as_deref(),
            Some("desktop")
        );
        assert_eq!(helper_for(r#"{"auths": {}}"#, "r").expect("parses"), None);
    }

    /// A config file someone else can write must not make capgate run a program of its
    /// choosing: a helper name is a suffix of `docker-credential-`, never a path.
    #[test]
    fn a_credential_helper_that_names_a_path_is_refused() {
        for name in ["../../tmp/evil", "/bin/sh", "a b", ".hidden", "x;rm"] {
            let text = format!(r#"{{"credsStore": {}}}"#, serde_json::json!(name));
            assert!(helper_for(&text, "r").is_err(), "{name}");
        }
    }

    #[test]
    fn a_helpers_answer_is_read_as_the_protocol_says() {
        let c = parse_helper_answer(
            true,
            br#"{"ServerURL":"r","Username":"robot","Secret":"t0ken"}"#,
        )
        .expect("parses")
        .expect("found");
        assert_eq!(
            (c.username.as_str(), c.password.as_str()),
            ("robot", "t0ken")
        );
        assert!(
            parse_helper_answer(false, b"credentials not found in native keychain\n")
                .expect("not found is no error")
                .is_none()
        );
        assert!(parse_helper_answer(false, b"dbus: no session").is_err());
        assert!(parse_helper_answer(true, b"robot:t0ken").is_err());
    }

    #[test]
    fn a_docker_config_auth_that_is_not_base64_is_an_error() {
        let text = r#"{"auths": {"r.example": {"auth": "not base64!"}}}"#;
        assert!(from_docker_config(text, "r.example").is_err());
    }
}
