//! Signatures of the release artifacts, in the shape `cosign sign-blob --key` writes: an
//! ECDSA P-256 signature over the file's SHA-256, ASN.1 DER, base64, in `FILE.sig`, and
//! the public key (`capgate-release.pub`, PEM, what `cosign.pub` is) beside them. Either
//! tool verifies it:
//!
//! ```text
//! cosign verify-blob --key capgate-release.pub --signature FILE.sig FILE
//! openssl dgst -sha256 -verify capgate-release.pub -signature <(base64 -d FILE.sig) FILE
//! ```
//!
//! The key is `CAPGATE_RELEASE_KEY` (a PEM P-256 private key: `openssl ecparam -name
//! prime256v1 -genkey -noout`); without it, a throwaway key is made for the build and
//! said so, which proves the artifacts were not changed after packing but not who packed
//! them. openssl signs and verifies, so the check needs nothing capgate built.

use anyhow::{Context, bail};
use base64::Engine as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The environment variable naming the release signing key.
pub const KEY_ENV: &str = "CAPGATE_RELEASE_KEY";

/// The name of the public key file written beside the artifacts.
pub const PUBLIC_KEY: &str = "capgate-release.pub";

/// The signing key of this build (the release key, or a throwaway one).
pub struct Signer {
    key: PathBuf,
    /// `target/dist/capgate-release.pub`.
    pub public: PathBuf,
}

impl Signer {
    /// The release key, or a throwaway one kept in `dir/.signing/`; its public half is
    /// written to `dir/capgate-release.pub`.
    pub fn new(dir: &Path) -> anyhow::Result<Signer> {
        let public = dir.join(PUBLIC_KEY);
        let key = match std::env::var_os(KEY_ENV).filter(|k| !k.is_empty()) {
            Some(k) => PathBuf::from(k),
            None => {
                let private = dir.join(".signing");
                crate::dist::mkdir(&private)?;
                crate::dist::set_mode(&private, 0o700)?;
                let key = private.join("throwaway.key");
                if !key.is_file() {
                    openssl(
                        Command::new("openssl")
                            .args([
                                "ecparam",
                                "-name",
                                "prime256v1",
                                "-genkey",
                                "-noout",
                                "-out",
                            ])
                            .arg(&key),
                        "making a throwaway signing key",
                    )?;
                }
                eprintln!(
                    "xtask: no {KEY_ENV}: the artifacts are signed with a throwaway key ({}), which shows they were not changed after packing, not who packed them",
                    key.display()
                );
                key
            }
        };
        openssl(
            Command::new("openssl")
                .args(["pkey", "-pubout", "-in"])
                .arg(&key)
                .arg("-out")
                .arg(&public),
            "writing the public key",
        )?;
        Ok(Signer { key, public })
    }

    /// Sign `file`: `FILE.sig` beside it (base64 DER, as `cosign sign-blob` writes).
    pub fn sign(&self, file: &Path) -> anyhow::Result<PathBuf> {
        let der = tempfile::NamedTempFile::new()?;
        openssl(
            Command::new("openssl")
                .args(["dgst", "-sha256", "-sign"])
                .arg(&self.key)
                .arg("-out")
                .arg(der.path())
                .arg(file),
            "signing",
        )?;
        let bytes = std::fs::read(der.path())?;
        let sig = signature_path(file);
        crate::dist::write(
            &sig,
            base64::engine::general_purpose::STANDARD
                .encode(bytes)
                .as_bytes(),
        )?;
        Ok(sig)
    }
}

/// `FILE.sig`.
pub fn signature_path(file: &Path) -> PathBuf {
    let mut name = file.file_name().unwrap_or_default().to_os_string();
    name.push(".sig");
    file.with_file_name(name)
}

/// Whether `FILE.sig` is a valid signature of `file` under `public` — the documented
/// `openssl dgst -sha256 -verify` command, run as written.
pub fn verifies(public: &Path, file: &Path) -> anyhow::Result<bool> {
    let text = std::fs::read_to_string(signature_path(file))
        .with_context(|| format!("reading the signature of {}", file.display()))?;
    let der = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .context("the signature is not base64")?;
    let tmp = tempfile::NamedTempFile::new()?;
    std::fs::write(tmp.path(), der)?;
    let out = Command::new("openssl")
        .args(["dgst", "-sha256", "-verify"])
        .arg(public)
        .arg("-signature")
        .arg(tmp.path())
        .arg(file)
        .output()
        .context("running openssl dgst -verify")?;
    let said = String::from_utf8_lossy(&out.stdout);
    Ok(out.status.success() && said.contains("Verified OK"))
}

/// The check a release gets: `file` verifies, and a copy with one byte changed does not.
pub fn check(public: &Path, file: &Path) -> anyhow::Result<()> {
    if !verifies(public, file)? {
        bail!(
            "{}: its signature does not verify under {}",
            file.display(),
            public.display()
        );
    }
    let dir = tempfile::tempdir()?;
    let tampered = dir.path().join(file.file_name().context("a file name")?);
    let mut bytes = std::fs::read(file)?;
    let middle = bytes.len() / 2;
    let Some(b) = bytes.get_mut(middle) else {
        bail!("{}: empty", file.display());
    };
    *b ^= 0x01;
    std::fs::write(&tampered, &bytes)?;
    std::fs::copy(signature_path(file), signature_path(&tampered))?;
    if verifies(public, &tampered)? {
        bail!(
            "{}: a copy with one byte changed still verifies",
            file.display()
        );
    }
    eprintln!(
        "xtask: {} verifies under {}; a tampered copy does not",
        file.display(),
        public.display()
    );
    Ok(())
}

fn openssl(cmd: &mut Command, what: &str) -> anyhow::Result<()> {
    let out = cmd
        .output()
        .with_context(|| format!("{what}: running openssl (Debian: apt-get install openssl)"))?;
    if !out.status.success() {
        bail!("{what}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}
