//! Plugins from an OCI registry, end to end: a real registry (Debian's `docker-registry`,
//! started here on loopback with its storage in a temporary directory), the example's
//! plugins published to it with `capgate plugin push --sign-key`, the example deployment
//! rewritten to load every plugin by `oci://…@sha256:…`, and the walkthrough over HTTP.
//! Then what must be refused at start (a wrong digest, a tag alone, an unsigned plugin
//! and one signed by an unknown key, with and without `requireSignature`: a configured
//! `publicKeys` is never advisory), a restart with the
//! registry stopped, from the cache alone, and a corrupted cache refused.

use crate::common;

use common::walkthrough::*;
use common::*;
use ed25519_dalek::SigningKey;
use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use ed25519_dalek::pkcs8::{EncodePrivateKey, EncodePublicKey};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The example's plugins: config name and built file.
const PLUGINS: [(&str, &str); 4] = [
    ("org-isolation", "org_isolation.wasm"),
    ("refund-limit", "refund_limit.wasm"),
    ("pii-redactor", "pii_redactor.wasm"),
    ("support-desk", "support_desk.wasm"),
];

fn registry_installed() -> bool {
    on_path("docker-registry").is_some()
}

/// A running `docker-registry serve`, killed on drop.
struct Registry {
    child: Child,
    /// `127.0.0.1:PORT`.
    host: String,
}

impl Registry {
    fn start(dir: &Path) -> Registry {
        Registry::start_with(dir, "")
    }

    /// A registry that admits only `user` with `password` (htpasswd, Basic), the bcrypt
    /// hash made by Python's crypt (the registry reads only bcrypt).
    fn start_with_login(dir: &Path, user: &str, password: &str) -> Registry {
        let hash = Command::new("python3")
            .args([
                "-W",
                "ignore",
                "-c",
                "import crypt, sys; print(crypt.crypt(sys.argv[1], crypt.mksalt(crypt.METHOD_BLOWFISH)))",
                password,
            ])
            .output()
            .expect("python3 makes the bcrypt hash");
        let hash = String::from_utf8(hash.stdout).expect("utf8");
        let hash = hash.trim().replacen("$2b$", "$2a$", 1);
        assert!(hash.starts_with("$2a$"), "no bcrypt hash: {hash}");
        let htpasswd = dir.join("htpasswd");
        std::fs::write(&htpasswd, format!("{user}:{hash}\n")).expect("write htpasswd");
        Registry::start_with(
            dir,
            &format!(
                "auth:\n  htpasswd:\n    realm: capgate-test\n    path: {}\n",
                htpasswd.display()
            ),
        )
    }

    fn start_with(dir: &Path, extra: &str) -> Registry {
        let port = free_port();
        let host = format!("127.0.0.1:{port}");
        let config = dir.join("registry.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
                 http:\n  addr: {host}\n{extra}",
                dir.join("storage").display()
            ),
        )
        .expect("write the registry config");
        let log = std::fs::File::create(dir.join("registry.log")).expect("registry log");
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start docker-registry");
        let mut registry = Registry { child, host };
        registry.wait_ready();
        registry
    }

    fn wait_ready(&mut self) {
        let url = format!("http://{}/v2/", self.host);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if reqwest_blocking_ok(&url) {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("docker-registry exited before serving: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "docker-registry did not answer {url}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `GET url` answers 200, or 401 from a registry that wants a login (a one-off
/// runtime: this runs outside the test's).
fn reqwest_blocking_ok(url: &str) -> bool {
    let url = url.to_string();
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()
            .is_some_and(|rt| {
                rt.block_on(async {
                    reqwest::get(&url)
                        .await
                        .is_ok_and(|r| matches!(r.status().as_u16(), 200 | 401))
                })
            })
    })
    .join()
    .unwrap_or(false)
}

/// An Ed25519 key pair as PEM files (`NAME.pem` private, `NAME.pub` public), as
/// `openssl genpkey -algorithm ed25519` and `openssl pkey -pubout` write them.
fn key_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let mut seed = [0u8; 32];
    seed[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    seed[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    let key = SigningKey::from_bytes(&seed);
    let private = dir.join(format!("{name}.pem"));
    let public = dir.join(format!("{name}.pub"));
    std::fs::write(
        &private,
        key.to_pkcs8_pem(LineEnding::LF).expect("pkcs8").as_bytes(),
    )
    .expect("write the private key");
    std::fs::write(
        &public,
        key.verifying_key()
            .to_public_key_pem(LineEnding::LF)
            .expect("spki"),
    )
    .expect("write the public key");
    (private, public)
}

fn plugin_file(file: &str) -> PathBuf {
    root()
        .join("plugins/target/wasm32-wasip2/release")
        .join(file)
}

/// The start of every registry test: `None` (skipped loudly, or a failure under CI) without
/// Debian's `docker-registry`; else a temporary directory and the registry `start` serves
/// from it.
fn registry_in_tempdir(
    start: impl FnOnce(&Path) -> Registry,
) -> Option<(tempfile::TempDir, Registry)> {
    if !debian_tools(
        &["docker-registry"],
        registry_installed,
        "oci_registry (plugins from an OCI registry)",
    ) {
        return None;
    }
    example_config();
    let tmp = tempfile::tempdir().expect("tempdir");
    let registry = start(tmp.path());
    Some((tmp, registry))
}

/// Every example plugin pushed to `host` signed by `key`: config name → the printed
/// reference, which pins the manifest digest.
fn push_all(host: &str, key: &Path) -> BTreeMap<&'static str, String> {
    let mut refs = BTreeMap::new();
    for (name, file) in PLUGINS {
        let r = push(file, &format!("oci://{host}/capgate/{name}:v1"), Some(key));
        let prefix = format!("oci://{host}/capgate/{name}@sha256:");
        assert!(
            r.starts_with(&prefix) && r.len() == prefix.len() + 64,
            "push prints the pinned reference: {r}"
        );
        refs.insert(name, r);
    }
    refs
}

/// `capgate plugin push FILE TARGET [--sign-key KEY]`: the printed reference.
fn push(file: &str, target: &str, key: Option<&Path>) -> String {
    let path = plugin_file(file).display().to_string();
    let mut args = vec!["plugin", "push", &path, target];
    let key = key.map(|k| k.display().to_string());
    if let Some(k) = &key {
        args.extend(["--sign-key", k]);
    }
    capgate(&args).trim().to_string()
}

/// The example deployment with every plugin loaded from `refs` (by config name);
/// `pii-redactor` without a `sha256` (the manifest digest pins it), the others keeping
/// theirs. `oci` is the `[runtime.oci]` table's body.
fn oci_deployment(dir: &Path, refs: &BTreeMap<&str, String>, oci: &str) -> PathBuf {
    std::fs::create_dir_all(dir).expect("dir");
    let refs = refs.clone();
    deployment(
        dir,
        move |text| {
            let mut out = String::new();
            let mut lines = text.lines().peekable();
            while let Some(line) = lines.next() {
                let plugin = PLUGINS
                    .iter()
                    .find(|(_, file)| line == format!("path = \"{file}\""));
                match plugin {
                    Some((name, _)) => {
                        out.push_str(&format!("path = \"{}\"\n", refs[name]));
                        if *name == "pii-redactor"
                            && lines.peek().is_some_and(|l| l.starts_with("sha256 = "))
                        {
                            lines.next();
                        }
                    }
                    None => {
                        out.push_str(line);
                        out.push('\n');
                    }
                }
            }
            out
        },
        &format!("[runtime.oci]\n{oci}\n"),
    )
}

/// `capgate serve` on a config that must be refused: its stderr (a serve that starts
/// instead is killed after two minutes and fails the test).
fn refused_at_start(config: &Path, store: &str) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_capgate"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--store",
            store,
            "--config",
        ])
        .arg(config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start capgate serve");
    let mut stderr = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "serve started on {} instead of refusing it",
                config.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = reader.join().expect("stderr reader");
    assert_eq!(status.code(), Some(1), "serve must refuse: {stderr}");
    assert!(stderr.contains("nothing was started"), "{stderr}");
    stderr
}

/// Acts 1–5 against a running deployment, under `invocation_id`.
async fn walkthrough(server: &Server, invocation_id: &str) {
    let agent = format!("{}/agent", server.base);
    let approval_id = request_and_approve(&agent, &server.base, invocation_id).await;
    let (status, done) = Caller::new(DANA)
        .post(
            &format!("{agent}/resumeApproval"),
            &resume_body(&approval_id, invocation_id),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_refund_completed(&done);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_walkthrough_runs_on_plugins_pulled_by_digest_from_a_registry() {
    let Some((tmp, registry)) = registry_in_tempdir(Registry::start) else {
        return;
    };
    let dir = tmp.path();
    let host = registry.host.clone();
    let (signer, signer_pub) = key_pair(dir, "release");
    let (stranger, _) = key_pair(dir, "stranger");

    // Publish the example's plugins, signed; the printed reference pins the manifest.
    let refs = push_all(&host, &signer);
    assert_eq!(
        push(
            "refund_limit.wasm",
            &format!("oci://{host}/capgate/refund-limit:v1"),
            Some(&signer)
        ),
        refs["refund-limit"],
        "the same file pushes to the same digest"
    );

    let cache = dir.join("oci-cache");
    let signed = format!(
        "cache = \"{}\"\npublicKeys = [\"{}\"]\nrequireSignature = true",
        cache.display(),
        signer_pub.display()
    );
    let config = oci_deployment(&dir.join("signed"), &refs, &signed);
    let ok = capgate(&["check", "--config", &config.display().to_string()]);
    assert!(ok.contains(": ok"), "{ok}");
    for (name, _) in PLUGINS {
        let manifest = refs[name].rsplit("sha256:").next().expect("digest");
        assert!(
            cache
                .join(format!("manifests/sha256-{manifest}.json"))
                .is_file(),
            "{name}'s manifest is cached by its digest"
        );
        let signature_cached = std::fs::read_dir(cache.join("signatures"))
            .expect("the signature cache")
            .filter_map(Result::ok)
            .any(|repo| {
                repo.path()
                    .join(format!("sha256-{manifest}.json"))
                    .is_file()
            });
        assert!(signature_cached, "{name}'s verified signature is cached");
    }

    {
        let store = format!("sqlite://{}", dir.join("first.db").display());
        let server = Server::start(&config, &store);
        walkthrough(&server, "oci_call_1").await;
    }

    // A wrong digest (one the registry does not have): refused at start, naming the
    // plugin and the digest.
    let store = format!("sqlite://{}", dir.join("refused.db").display());
    let unknown = format!("sha256:{}", key_hash("no such manifest"));
    let mut bad = refs.clone();
    bad.insert(
        "refund-limit",
        format!("oci://{host}/capgate/refund-limit@{unknown}"),
    );
    let err = refused_at_start(&oci_deployment(&dir.join("wrong"), &bad, &signed), &store);
    assert!(
        err.contains("plugins.refund-limit.path")
            && err.contains(&format!("has no manifest {unknown}")),
        "{err}"
    );
    // The digest of another plugin: the artifact is what that digest names, and the
    // plugin's `sha256` pin of its Wasm bytes refuses it (before any signature lookup).
    let other = refs["org-isolation"]
        .rsplit('@')
        .next()
        .expect("digest")
        .to_string();
    bad.insert(
        "refund-limit",
        format!("oci://{host}/capgate/refund-limit@{other}"),
    );
    let no_signature_policy = format!("cache = \"{}\"", cache.display());
    let err = refused_at_start(&oci_deployment(&dir.join("other"), &bad, &signed), &store);
    assert!(
        err.contains("plugins.refund-limit.sha256")
            && err.contains("plugin `refund-limit`")
            && err.contains("pinned to sha256"),
        "{err}"
    );

    // A tag alone is refused before anything is fetched.
    let mut tagged = refs.clone();
    tagged.insert(
        "refund-limit",
        format!("oci://{host}/capgate/refund-limit:v1"),
    );
    let err = refused_at_start(&oci_deployment(&dir.join("tag"), &tagged, &signed), &store);
    assert!(
        err.contains("plugins.refund-limit.path") && err.contains("names no digest"),
        "{err}"
    );

    // Unsigned, and signed by a key the deployment does not trust: refused under
    // requireSignature, each with its reason. (The same bytes as the signed refund-limit,
    // so the same manifest digest: a signature is looked up in the artifact's own
    // repository, and these repositories hold none by the release key.)
    let unsigned = push(
        "refund_limit.wasm",
        &format!("oci://{host}/capgate/unsigned-refund-limit:v1"),
        None,
    );
    let mut with_unsigned = refs.clone();
    with_unsigned.insert("refund-limit", unsigned.clone());
    let err = refused_at_start(
        &oci_deployment(&dir.join("unsigned"), &with_unsigned, &signed),
        &store,
    );
    assert!(
        err.contains("plugins.refund-limit.path")
            && err.contains(&format!("{unsigned} is not signed"))
            && err.contains("publicKeys is set"),
        "{err}"
    );
    // A configured key is never advisory: with `publicKeys` and without
    // `requireSignature`, the unsigned plugin is refused just the same (issue 33).
    let keys_only = format!(
        "cache = \"{}\"\npublicKeys = [\"{}\"]",
        cache.display(),
        signer_pub.display()
    );
    let err = refused_at_start(
        &oci_deployment(&dir.join("keys-only"), &with_unsigned, &keys_only),
        &store,
    );
    assert!(
        err.contains("plugins.refund-limit.path")
            && err.contains(&format!("{unsigned} is not signed")),
        "an unsigned plugin loads although publicKeys is set: {err}"
    );
    // ... while the signed deployment loads under the same keys-only policy, so the
    // refusal above is the signature's.
    let keys_only_ok = oci_deployment(&dir.join("keys-only-signed"), &refs, &keys_only);
    let ok = capgate(&["check", "--config", &keys_only_ok.display().to_string()]);
    assert!(ok.contains(": ok"), "{ok}");
    let foreign = push(
        "refund_limit.wasm",
        &format!("oci://{host}/capgate/foreign-refund-limit:v1"),
        Some(&stranger),
    );
    let mut with_foreign = refs.clone();
    with_foreign.insert("refund-limit", foreign);
    let err = refused_at_start(
        &oci_deployment(&dir.join("foreign"), &with_foreign, &signed),
        &store,
    );
    assert!(
        err.contains("plugins.refund-limit.path") && err.contains("none valid"),
        "{err}"
    );
    // The same unsigned plugin loads when no key is configured (pinned by digest only).
    let relaxed = oci_deployment(&dir.join("relaxed"), &with_unsigned, &no_signature_policy);
    let ok = capgate(&["check", "--config", &relaxed.display().to_string()]);
    assert!(ok.contains(": ok"), "{ok}");

    // The registry goes away: the deployment starts from the cache alone, signatures
    // re-verified from it, and runs the walkthrough again.
    drop(registry);
    assert!(
        std::net::TcpStream::connect(&host).is_err(),
        "the registry is down"
    );
    {
        let store = format!("sqlite://{}", dir.join("offline.db").display());
        let server = Server::start(&config, &store);
        walkthrough(&server, "oci_call_2").await;
    }
    // A cached file is verified on every start: a corrupted Wasm blob is not loaded, and
    // with the registry down it cannot be fetched again, so the start is refused.
    let wasm = std::fs::read(plugin_file("refund_limit.wasm")).expect("the plugin");
    let layer = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&wasm));
    let blob = cache.join(format!("blobs/sha256-{layer}.wasm"));
    assert!(blob.is_file(), "the Wasm layer is cached by its digest");
    let mut corrupted = wasm.clone();
    corrupted.extend_from_slice(b"tampered");
    std::fs::write(&blob, corrupted).expect("corrupt the cached blob");
    let err = refused_at_start(&config, &store);
    assert!(
        err.contains("plugins.refund-limit.path") && err.contains("cannot reach the registry"),
        "{err}"
    );

    // With an empty cache and no registry, the start is refused with the reason.
    let cold = oci_deployment(
        &dir.join("cold"),
        &refs,
        &format!(
            "cache = \"{}\"\npublicKeys = [\"{}\"]\nrequireSignature = true",
            dir.join("empty-cache").display(),
            signer_pub.display()
        ),
    );
    let err = refused_at_start(&cold, &store);
    assert!(
        err.contains("plugins.org-isolation.path") && err.contains("cannot reach the registry"),
        "{err}"
    );
}

/// A key pair as cosign's default makes one, ECDSA P-256, written by openssl itself:
/// `NAME.key` (SEC1, `openssl ecparam -genkey`) and `NAME.pub` (SubjectPublicKeyInfo, the
/// shape of `cosign.pub`).
fn ecdsa_key_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let private = dir.join(format!("{name}.key"));
    let public = dir.join(format!("{name}.pub"));
    let ok = Command::new("openssl")
        .args([
            "ecparam",
            "-name",
            "prime256v1",
            "-genkey",
            "-noout",
            "-out",
        ])
        .arg(&private)
        .status()
        .expect("openssl ecparam")
        .success()
        && Command::new("openssl")
            .args(["ec", "-pubout", "-in"])
            .arg(&private)
            .arg("-out")
            .arg(&public)
            .stderr(Stdio::null())
            .status()
            .expect("openssl ec")
            .success();
    assert!(ok, "openssl made no P-256 key pair");
    (private, public)
}

/// `openssl dgst -sha256 -verify PUBLIC -signature SIG MESSAGE` says `Verified OK`: the
/// check `cosign verify --key` makes, done without capgate.
fn assert_openssl_verifies(dir: &Path, public: &Path, message: &[u8], der_signature: &[u8]) {
    std::fs::write(dir.join("message"), message).expect("write");
    std::fs::write(dir.join("message.sig"), der_signature).expect("write");
    let verified = Command::new("openssl")
        .args(["dgst", "-sha256", "-verify"])
        .arg(public)
        .arg("-signature")
        .arg(dir.join("message.sig"))
        .arg(dir.join("message"))
        .output()
        .expect("openssl dgst");
    assert!(
        String::from_utf8_lossy(&verified.stdout).contains("Verified OK"),
        "{verified:?}"
    );
}

/// The example deployment on `refs`, with `requireSignature`: `check` admits it under
/// `signer` and refuses it (exit 1, "none valid") under each of `others`.
fn assert_admitted_only_by(
    dir: &Path,
    refs: &BTreeMap<&str, String>,
    signer: &Path,
    others: &[(&str, &PathBuf)],
) {
    let settings = |key: &Path, name: &str| {
        format!(
            "cache = \"{}\"\npublicKeys = [\"{}\"]\nrequireSignature = true",
            dir.join(format!("cache-{name}")).display(),
            key.display()
        )
    };
    let config = oci_deployment(&dir.join("signed"), refs, &settings(signer, "signed"));
    let ok = capgate(&["check", "--config", &config.display().to_string()]);
    assert!(ok.contains(": ok"), "{ok}");
    for (name, key) in others {
        let config = oci_deployment(&dir.join(name), refs, &settings(key, name));
        let out = Command::new(env!("CARGO_BIN_EXE_capgate"))
            .args(["check", "--config"])
            .arg(&config)
            .output()
            .expect("capgate check");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
        assert!(stderr.contains("none valid"), "{name}: {stderr}");
    }
}

/// Issue 57: cosign's default keys are ECDSA P-256. A plugin signed with one verifies
/// under its `cosign.pub`, and the signature in the registry is exactly what `cosign
/// verify --key` checks: openssl verifies the simple-signing payload's DER signature with
/// the public key alone. Another P-256 key, or an Ed25519 key, does not admit it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cosign_default_ecdsa_p256_signature_on_a_plugin_verifies() {
    let Some((tmp, registry)) = registry_in_tempdir(Registry::start) else {
        return;
    };
    let dir = tmp.path();
    let host = registry.host.clone();
    let (signer, signer_pub) = ecdsa_key_pair(dir, "cosign");
    let (_, stranger_pub) = ecdsa_key_pair(dir, "stranger");
    let (_, ed25519_pub) = key_pair(dir, "ed25519");

    let refs = push_all(&host, &signer);

    // The signature as the registry holds it, checked without capgate: the payload layer
    // and its annotation, verified by openssl with cosign.pub.
    let manifest = refs["refund-limit"]
        .rsplit("sha256:")
        .next()
        .expect("digest")
        .to_string();
    let client = reqwest::Client::new();
    let sig_manifest: serde_json::Value = client
        .get(format!(
            "http://{host}/v2/capgate/refund-limit/manifests/sha256-{manifest}.sig"
        ))
        .header("accept", "application/vnd.oci.image.manifest.v1+json")
        .send()
        .await
        .expect("the signature manifest")
        .json()
        .await
        .expect("JSON");
    let layer = &sig_manifest["layers"][0];
    assert_eq!(
        layer["mediaType"],
        "application/vnd.dev.cosign.simplesigning.v1+json"
    );
    let payload = client
        .get(format!(
            "http://{host}/v2/capgate/refund-limit/blobs/{}",
            layer["digest"].as_str().expect("layer digest")
        ))
        .send()
        .await
        .expect("the payload")
        .bytes()
        .await
        .expect("bytes");
    let signature = layer["annotations"]["dev.cosignproject.cosign/signature"]
        .as_str()
        .expect("the signature annotation");
    use base64::Engine as _;
    let der = base64::engine::general_purpose::STANDARD
        .decode(signature)
        .expect("base64");
    assert_openssl_verifies(dir, &signer_pub, &payload, &der);
    let named: serde_json::Value = serde_json::from_slice(&payload).expect("payload JSON");
    assert_eq!(
        named["critical"]["image"]["docker-manifest-digest"],
        format!("sha256:{manifest}")
    );

    assert_admitted_only_by(
        dir,
        &refs,
        &signer_pub,
        &[("stranger", &stranger_pub), ("ed25519", &ed25519_pub)],
    );
}

/// Issue 57: registry credentials from a Docker credential helper, as `docker` reads them:
/// the docker config's `credHelpers` names `docker-credential-NAME`, which capgate runs
/// with `get` and the registry on standard input. Against a registry that admits one
/// login: without the helper the push is refused (never anonymous), with it the push and
/// the pull (`check`) work, and a helper that answers a wrong secret is refused by the
/// registry, not taken as "no login".
#[test]
fn registry_credentials_come_from_a_docker_credential_helper() {
    let Some((tmp, registry)) =
        registry_in_tempdir(|dir| Registry::start_with_login(dir, "robot", "s3cret-t0ken"))
    else {
        return;
    };
    let dir = tmp.path();
    let host = registry.host.clone();
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let helper = |name: &str, secret: &str| {
        let path = bin.join(format!("docker-credential-{name}"));
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\n[ \"$1\" = get ] || exit 1\nread -r host\n\
                 if [ \"$host\" = \"{host}\" ]; then\n\
                 printf '{{\"ServerURL\":\"%s\",\"Username\":\"robot\",\"Secret\":\"{secret}\"}}' \"$host\"\n\
                 else echo 'credentials not found in native keychain'; exit 1; fi\n"
            ),
        )
        .expect("write the helper");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    };
    helper("capgate-test", "s3cret-t0ken");
    helper("capgate-wrong", "not-the-secret");
    let docker = |name: &str, helper_name: &str| {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).expect("docker config dir");
        std::fs::write(
            d.join("config.json"),
            serde_json::json!({"credHelpers": {host.clone(): helper_name}}).to_string(),
        )
        .expect("write the docker config");
        d
    };
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = |args: &[&str], docker_config: Option<&Path>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_capgate"));
        cmd.args(args)
            .env("PATH", &path)
            .env_remove("CAPGATE_REGISTRY_USERNAME")
            .env_remove("CAPGATE_REGISTRY_PASSWORD")
            .env("HOME", dir);
        match docker_config {
            Some(d) => cmd.env("DOCKER_CONFIG", d),
            None => cmd.env_remove("DOCKER_CONFIG"),
        };
        cmd.output().expect("run capgate")
    };
    let file = plugin_file("refund_limit.wasm").display().to_string();
    let target = format!("oci://{host}/capgate/refund-limit:v1");

    let anonymous = run(&["plugin", "push", &file, &target], None);
    assert!(!anonymous.status.success(), "pushed without a login");
    let stderr = String::from_utf8_lossy(&anonymous.stderr);
    assert!(stderr.contains("no credentials are configured"), "{stderr}");

    let wrong = run(
        &["plugin", "push", &file, &target],
        Some(&docker("docker-wrong", "capgate-wrong")),
    );
    assert!(!wrong.status.success(), "pushed with a wrong secret");
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert!(stderr.contains("refused the credentials"), "{stderr}");

    let config_dir = docker("docker-ok", "capgate-test");
    let pushed = run(&["plugin", "push", &file, &target], Some(&config_dir));
    assert!(
        pushed.status.success(),
        "{}",
        String::from_utf8_lossy(&pushed.stderr)
    );
    let reference = String::from_utf8_lossy(&pushed.stdout).trim().to_string();
    assert!(reference.starts_with(&format!("oci://{host}/capgate/refund-limit@sha256:")));

    // The pull at load takes the same login.
    let mut refs = BTreeMap::new();
    for (name, file) in PLUGINS {
        let r = if name == "refund-limit" {
            reference.clone()
        } else {
            let f = plugin_file(file).display().to_string();
            let out = run(
                &[
                    "plugin",
                    "push",
                    &f,
                    &format!("oci://{host}/capgate/{name}:v1"),
                ],
                Some(&config_dir),
            );
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        refs.insert(name, r);
    }
    let cache = format!("cache = \"{}\"", dir.join("oci-cache").display());
    let config = oci_deployment(&dir.join("deploy"), &refs, &cache);
    let checked = run(
        &["check", "--config", &config.display().to_string()],
        Some(&config_dir),
    );
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    drop(registry);
}

/// Issue 57: cosign 3's default signature, a Sigstore bundle attached to the plugin as a
/// referrer (here through the referrers tag `sha256-DIGEST`: Debian's registry has no
/// referrers API), verifies under `cosign.pub` alone — the plugins are pushed with
/// `--signature-format bundle`, so no legacy `.sig` tag exists. openssl checks the DSSE
/// signature over the envelope's pre-authentication encoding independently, and a key
/// that did not sign admits nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cosign_bundle_signature_attached_as_a_referrer_verifies() {
    let Some((tmp, registry)) = registry_in_tempdir(Registry::start) else {
        return;
    };
    let dir = tmp.path();
    let host = registry.host.clone();
    let (signer, signer_pub) = ecdsa_key_pair(dir, "cosign");
    let (_, stranger_pub) = ecdsa_key_pair(dir, "stranger");
    let mut refs = BTreeMap::new();
    for (name, file) in PLUGINS {
        let path = plugin_file(file).display().to_string();
        let target = format!("oci://{host}/capgate/{name}:v1");
        let key = signer.display().to_string();
        let out = capgate(&[
            "plugin",
            "push",
            &path,
            &target,
            "--sign-key",
            &key,
            "--signature-format",
            "bundle",
        ]);
        refs.insert(name, out.trim().to_string());
    }
    let manifest = refs["refund-limit"]
        .rsplit("sha256:")
        .next()
        .expect("digest")
        .to_string();
    let client = reqwest::Client::new();
    let get = async |path: &str, accept: &str| {
        client
            .get(format!("http://{host}/v2/capgate/refund-limit/{path}"))
            .header("accept", accept)
            .send()
            .await
            .expect("GET")
    };
    let legacy = get(
        &format!("manifests/sha256-{manifest}.sig"),
        "application/vnd.oci.image.manifest.v1+json",
    )
    .await;
    assert_eq!(legacy.status(), 404, "only a bundle was pushed");
    let index: serde_json::Value = get(
        &format!("manifests/sha256-{manifest}"),
        "application/vnd.oci.image.index.v1+json",
    )
    .await
    .json()
    .await
    .expect("the referrers index");
    let entry = &index["manifests"][0];
    assert_eq!(
        entry["artifactType"],
        "application/vnd.dev.sigstore.bundle.v0.3+json"
    );
    let artifact: serde_json::Value = get(
        &format!("manifests/{}", entry["digest"].as_str().expect("digest")),
        "application/vnd.oci.image.manifest.v1+json",
    )
    .await
    .json()
    .await
    .expect("the bundle's manifest");
    assert_eq!(
        artifact["subject"]["digest"],
        format!("sha256:{manifest}"),
        "the bundle refers to the plugin"
    );
    let bundle: serde_json::Value = get(
        &format!(
            "blobs/{}",
            artifact["layers"][0]["digest"].as_str().expect("digest")
        ),
        "*/*",
    )
    .await
    .json()
    .await
    .expect("the bundle");
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let envelope = &bundle["dsseEnvelope"];
    let payload_type = envelope["payloadType"].as_str().expect("payloadType");
    let payload = b64
        .decode(envelope["payload"].as_str().expect("payload"))
        .expect("base64");
    let statement: serde_json::Value = serde_json::from_slice(&payload).expect("statement");
    assert_eq!(
        statement["predicateType"],
        "https://sigstore.dev/cosign/sign/v1"
    );
    assert_eq!(
        statement["subject"][0]["digest"]["sha256"],
        manifest.as_str()
    );
    // DSSE's pre-authentication encoding, written out here, not taken from capgate.
    let mut pae = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        payload.len()
    )
    .into_bytes();
    pae.extend_from_slice(&payload);
    let sig = b64
        .decode(envelope["signatures"][0]["sig"].as_str().expect("sig"))
        .expect("base64");
    assert_openssl_verifies(dir, &signer_pub, &pae, &sig);

    assert_admitted_only_by(dir, &refs, &signer_pub, &[("stranger", &stranger_pub)]);
}
