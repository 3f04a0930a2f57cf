//! `cargo xtask dist-check` and `cargo xtask image-check`: serve the packaged example the
//! way a deployment would and ask it two things over HTTP, `/healthz` and one governed call.
//!
//! - The archive: its checksum and `SHA256SUMS` verified, unpacked, every directory but the
//!   state directory made read-only (and, as root, served by the unprivileged user 10001 so
//!   the modes bind), the environment emptied but for the one secret the example reads from
//!   it, run from `/`. Afterwards the configuration tree must be unchanged and the store must
//!   be in the state directory.
//! - The image: its user and volume checked, run with `buildah run --isolation chroot` as
//!   10001 with a fresh directory on the state volume and the host's network (port chosen
//!   free). Afterwards nothing may have been written to the container's root filesystem.

use crate::dist;
use crate::example::DANA_KEY_ENV;
use crate::image::{self, UID};
use crate::{client, tools};
use anyhow::{Context, bail};
use sha2::{Digest, Sha256};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long a debug build may take to compile the example's plugins and listen.
const START_TIMEOUT: Duration = Duration::from_secs(300);
/// How long the server may take to drain and exit after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

/// `cargo xtask dist-check [--debug] [ARCHIVE]`.
pub fn dist_check(root: &Path, args: &[String]) -> anyhow::Result<()> {
    let (binary, rest) = dist::parse_binary(args)?;
    let archive = match rest.as_slice() {
        [] => dist::dist_dir(root).join(format!("{}.tar.gz", dist::name(&binary))),
        [one] => PathBuf::from(one),
        _ => bail!("Usage: cargo xtask dist-check [--debug] [ARCHIVE]"),
    };
    check_archive(&archive)
}

/// `cargo xtask image-check [--debug] [IMAGE]`.
pub fn image_check(args: &[String]) -> anyhow::Result<()> {
    let (binary, rest) = dist::parse_binary(args)?;
    let tag = match rest.as_slice() {
        [] => image::default_tag(&binary),
        [one] => one.clone(),
        _ => bail!("Usage: cargo xtask image-check [--debug] [IMAGE]"),
    };
    image::require_buildah()?;
    check_image(&tag)
}

/// Verify, unpack and serve `archive`.
pub fn check_archive(archive: &Path) -> anyhow::Result<()> {
    eprintln!("xtask: dist-check {}", archive.display());
    let file_name = archive
        .file_name()
        .and_then(|n| n.to_str())
        .context("the archive's name")?;
    let name = file_name
        .strip_suffix(".tar.gz")
        .context("the archive's name ends in .tar.gz")?;
    // The archive against its .sha256.
    let sidecar = archive.with_file_name(format!("{file_name}.sha256"));
    let expected = std::fs::read_to_string(&sidecar)
        .with_context(|| format!("reading {}", sidecar.display()))?;
    let bytes = std::fs::read(archive).with_context(|| format!("reading {}", archive.display()))?;
    let actual = format!("{}  {file_name}\n", hex::encode(Sha256::digest(&bytes)));
    if expected != actual {
        bail!(
            "{}: says {expected:?}, the archive is {actual:?}",
            sidecar.display()
        );
    }

    // The signatures verify under the public key beside them, and a tampered copy fails
    // (the documented `openssl dgst -sha256 -verify`); the SBOM lists the binary's crates.
    let public = archive.with_file_name(crate::sign::PUBLIC_KEY);
    let sbom = archive.with_file_name(format!("{name}.cdx.json"));
    crate::sign::check(&public, archive)?;
    crate::sign::check(&public, &sbom)?;
    let bom: serde_json::Value = serde_json::from_slice(
        &std::fs::read(&sbom).with_context(|| format!("reading {}", sbom.display()))?,
    )
    .with_context(|| format!("{}: not JSON", sbom.display()))?;
    check_sbom(&bom, &sbom.display().to_string())?;

    let tmp = tempfile::Builder::new()
        .prefix("capgate-dist-check")
        .tempdir()?;
    let result = serve_archive(archive, tmp.path(), name);
    // What the check made read-only must be writable again to be removed.
    let _ = dist::make_writable(tmp.path());
    result
}

/// The binary carries its crate list as `cargo auditable` embeds it (the zlib-compressed
/// JSON of its `.dep-v0` section, which scanners read), naming the crates it links.
pub fn check_audit_data(binary: &Path) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let section = dir.path().join("dep-v0");
    let out = Command::new("objcopy")
        .arg(format!("--dump-section=.dep-v0={}", section.display()))
        .arg(binary)
        .arg(dir.path().join("copy"))
        .output()
        .context("running objcopy")?;
    if !out.status.success() || !section.is_file() {
        bail!(
            "{}: no .dep-v0 section (not built with `cargo auditable`): {}",
            binary.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let listed = Command::new("python3")
        .args([
            "-c",
            "import json, sys, zlib\nd = json.loads(zlib.decompress(open(sys.argv[1], 'rb').read()))\nprint('\\n'.join(p['name'] for p in d['packages']))",
        ])
        .arg(&section)
        .output()
        .context("running python3 to read the section")?;
    if !listed.status.success() {
        bail!(
            "{}: its .dep-v0 section is not cargo auditable's: {}",
            binary.display(),
            String::from_utf8_lossy(&listed.stderr).trim()
        );
    }
    let names: std::collections::BTreeSet<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    for linked in ["capgate", "wasmtime", "sqlx-core", "tokio"] {
        if !names.contains(linked) {
            bail!(
                "{}: its embedded crate list lacks {linked}",
                binary.display()
            );
        }
    }
    eprintln!(
        "xtask: {} embeds its crate list ({} crates, cargo auditable)",
        binary.display(),
        names.len()
    );
    Ok(())
}

/// A CycloneDX SBOM that names the binary and the crates it links.
pub fn check_sbom(bom: &serde_json::Value, what: &str) -> anyhow::Result<()> {
    if bom["bomFormat"] != "CycloneDX" || bom["metadata"]["component"]["name"] != "capgate" {
        bail!("{what}: not capgate's CycloneDX SBOM");
    }
    let names = crate::sbom::crate_names(bom);
    for linked in ["wasmtime", "sqlx-core", "tokio", "capgate-core"] {
        if !names.contains(linked) {
            bail!("{what}: does not list {linked}");
        }
    }
    eprintln!("xtask: {what}: CycloneDX, {} crates", names.len());
    Ok(())
}

fn serve_archive(archive: &Path, tmp: &Path, name: &str) -> anyhow::Result<()> {
    crate::run(
        Command::new("tar")
            .arg("-xzf")
            .arg(archive)
            .arg("-C")
            .arg(tmp),
    )?;
    let tree = tmp.join(name);
    let sums = std::fs::read_to_string(tree.join("SHA256SUMS")).context("reading SHA256SUMS")?;
    if dist::sums(&tree)? != sums {
        bail!("{}: SHA256SUMS does not match the files", tree.display());
    }
    check_audit_data(&tree.join("bin/capgate"))?;

    // Production modes: nothing but the state directory is writable.
    let state = tree.join("var/lib/capgate");
    let as_root = tools::is_root();
    dist::set_mode(tmp, 0o755)?;
    for p in std::iter::once(tree.clone()).chain(list(&tree)?) {
        if p.starts_with(&state) || p.is_symlink() {
            continue;
        }
        let mode = std::fs::metadata(&p)?.permissions().mode();
        dist::set_mode(&p, mode & !0o222)?;
    }
    if as_root {
        std::os::unix::fs::chown(&state, Some(UID), Some(UID))
            .with_context(|| format!("chown {UID} {}", state.display()))?;
    }

    let (port, metrics) = (free_port()?, free_port()?);
    let mut cmd = if as_root {
        // Root ignores file modes: serve as the image's user, as a deployment would.
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={UID}"))
            .arg(format!("--regid={UID}"))
            .args(["--clear-groups", "--"])
            .arg(tree.join("bin/capgate"));
        c
    } else {
        Command::new(tree.join("bin/capgate"))
    };
    cmd.current_dir("/")
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("CAPGATE_LOG", "info")
        .env(DANA_KEY_ENV, key_hash("dana-dev-key"))
        .arg("serve")
        .arg("--config")
        .arg(tree.join("etc/capgate/capgate.toml"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--metrics-listen", &format!("127.0.0.1:{metrics}")]);
    let mut server = Server::spawn(cmd, &tmp.join("serve.log"), "the archive's capgate")?;
    server.exercise(port)?;
    server.stop()?;

    // Every file but the state directory's is as packed, and no other file appeared.
    let after: String = dist::sums(&tree)?
        .lines()
        .filter(|l| {
            !l.get(66..)
                .is_some_and(|p| p.starts_with("var/lib/capgate/"))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    if after != sums {
        bail!(
            "serving wrote outside var/lib/capgate in {}:\n{after}",
            tree.display()
        );
    }
    let db = state.join("capgate.db");
    if !db.is_file() {
        bail!("{}: the store is not in the state directory", db.display());
    }
    eprintln!(
        "xtask: dist-check passed: {name} served the example from a read-only etc/capgate{}, Dana's key from {DANA_KEY_ENV}, state in var/lib/capgate",
        if as_root {
            format!(" as uid {UID}")
        } else {
            String::new()
        }
    );
    Ok(())
}

/// Run `tag`'s example in a buildah container and check it.
pub fn check_image(tag: &str) -> anyhow::Result<()> {
    eprintln!("xtask: image-check {tag}");
    let user = inspect(tag, "{{.OCIv1.Config.User}}")?;
    if user != format!("{UID}:{UID}") {
        bail!("{tag}: runs as {user:?}, not {UID}:{UID}");
    }
    let volumes = inspect(
        tag,
        "{{range $k, $v := .OCIv1.Config.Volumes}}{{$k}} {{end}}",
    )?;
    if volumes.trim() != "/var/lib/capgate" {
        bail!("{tag}: volumes {volumes:?}, want /var/lib/capgate");
    }

    let container = format!("capgate-image-check-{}", std::process::id());
    crate::run(Command::new("buildah").args(["from", "--pull=never", "--name", &container, tag]))?;
    let tmp = tempfile::Builder::new()
        .prefix("capgate-image-check")
        .tempdir()?;
    let result = serve_image(&container, tmp.path());
    let removed = crate::run(Command::new("buildah").args(["rm", &container]));
    result.and(removed)
}

fn serve_image(container: &str, tmp: &Path) -> anyhow::Result<()> {
    let state = tmp.join("state");
    dist::mkdir(&state)?;
    std::os::unix::fs::chown(&state, Some(UID), Some(UID))
        .with_context(|| format!("chown {UID} {} (run as root)", state.display()))?;
    let (port, metrics) = (free_port()?, free_port()?);
    let mut cmd = Command::new("buildah");
    cmd.args(["run", "--isolation", "chroot", "--network", "host"])
        .args(["--user", &format!("{UID}:{UID}")])
        .arg("-v")
        .arg(format!("{}:/var/lib/capgate", state.display()))
        .args(["-e", "CAPGATE_LOG=info"])
        .args([
            "-e",
            &format!("{DANA_KEY_ENV}={}", key_hash("dana-dev-key")),
        ])
        .args([container, "--"])
        .args(["capgate", "serve", "--config", "/etc/capgate/capgate.toml"])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--metrics-listen", &format!("127.0.0.1:{metrics}")]);
    let mut server = Server::spawn(cmd, &tmp.join("serve.log"), "capgate in the image")?;
    server.exercise(port)?;
    server.stop()?;
    if !state.join("capgate.db").is_file() {
        bail!("the store is not on the state volume");
    }

    // Nothing written to the root filesystem: no file of the runtime user's but the (empty)
    // mount point of the state volume, and /tmp empty.
    let out = Command::new("buildah")
        .args(["mount", container])
        .output()
        .context("running buildah mount")?;
    if !out.status.success() {
        bail!("buildah mount: {}", String::from_utf8_lossy(&out.stderr));
    }
    let mounted = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let written: Vec<PathBuf> = list(&mounted)?
        .into_iter()
        .filter(|p| {
            p.symlink_metadata().is_ok_and(|m| m.uid() == UID)
                && p.as_path() != mounted.join("var/lib/capgate")
                || p.starts_with(mounted.join("tmp")) && p.as_path() != mounted.join("tmp")
                || p.starts_with(mounted.join("var/lib/capgate"))
                    && p.as_path() != mounted.join("var/lib/capgate")
        })
        .collect();
    let _ = Command::new("buildah").args(["umount", container]).status();
    if !written.is_empty() {
        bail!(
            "the image's root filesystem holds files of user {UID} (written by the server, or writable by it) besides the state volume's mount point: {written:?}"
        );
    }
    eprintln!(
        "xtask: image-check passed: the example answered in the image as uid {UID}, state on the volume, nothing written to the root filesystem"
    );
    Ok(())
}

/// One field of `buildah inspect --type image`.
fn inspect(tag: &str, format: &str) -> anyhow::Result<String> {
    let out = Command::new("buildah")
        .args(["inspect", "--type", "image", "--format", format, tag])
        .output()
        .context("running buildah inspect")?;
    if !out.status.success() {
        bail!(
            "buildah inspect {tag}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Every path below `dir`.
fn list(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut all = Vec::new();
    dist::walk(dir, &mut |p| {
        all.push(p.to_path_buf());
        Ok(())
    })?;
    Ok(all)
}

/// A port nothing listens on now.
fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// What `[[gateway.apiKeys]] sha256` holds for `key`.
fn key_hash(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// A server under test, in its own process group, its output in a log file.
struct Server {
    child: Child,
    log: PathBuf,
    what: &'static str,
}

impl Server {
    fn spawn(mut cmd: Command, log: &Path, what: &'static str) -> anyhow::Result<Server> {
        let out = std::fs::File::create(log)?;
        cmd.stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0);
        eprintln!("xtask: {cmd:?}");
        let child = cmd.spawn().with_context(|| format!("starting {what}"))?;
        Ok(Server {
            child,
            log: log.to_path_buf(),
            what,
        })
    }

    /// The server's output so far, for a failure message.
    fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Wait for `/healthz`, then check it and one governed call.
    fn exercise(&mut self, port: u16) -> anyhow::Result<()> {
        let result = self.exercise_inner(port);
        result
            .map_err(|e| anyhow::anyhow!("{e:#}\n--- {} output ---\n{}", self.what, self.output()))
    }

    fn exercise_inner(&mut self, port: u16) -> anyhow::Result<()> {
        let authority = format!("127.0.0.1:{port}");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let start = Instant::now();
        let healthz = loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("{} exited before it listened ({status})", self.what);
            }
            if start.elapsed() > START_TIMEOUT {
                bail!(
                    "{} did not answer /healthz within {START_TIMEOUT:?}",
                    self.what
                );
            }
            let answer = rt.block_on(async {
                let mut conn = client::connect(&authority).await?;
                conn.get("/healthz").await
            });
            match answer {
                Ok(a) => break a,
                Err(_) => std::thread::sleep(Duration::from_millis(250)),
            }
        };
        if healthz.status != 200 {
            bail!(
                "/healthz answered {}: {}",
                healthz.status,
                client::excerpt(&healthz.body)
            );
        }
        eprintln!(
            "xtask:   /healthz 200 after {:.1} s",
            start.elapsed().as_secs_f64()
        );
        let body = r#"{"capabilityId":"orders.checkEligibility","input":{"orderId":"ord_42"},"invocationId":"smoke_1"}"#;
        let (dana, stranger) = rt.block_on(async {
            let mut conn = client::connect(&authority).await?;
            let dana = conn
                .post("/agent/invoke", "dana-dev-key", body.to_string())
                .await?;
            let stranger = conn
                .post("/agent/invoke", "not-a-key", body.to_string())
                .await?;
            anyhow::Ok((dana, stranger))
        })?;
        if dana.status != 200 || client::outcome_status(&dana.body) != Some("completed") {
            bail!(
                "POST /agent/invoke orders.checkEligibility with dana-dev-key (its hash from {DANA_KEY_ENV}) answered {}: {}",
                dana.status,
                client::excerpt(&dana.body)
            );
        }
        eprintln!(
            "xtask:   POST /agent/invoke orders.checkEligibility as Dana: 200 {}",
            client::excerpt(&dana.body)
        );
        if stranger.status != 401 {
            bail!(
                "POST /agent/invoke with an unknown key answered {}, not 401: {}",
                stranger.status,
                client::excerpt(&stranger.body)
            );
        }
        eprintln!("xtask:   the same with an unknown key: 401");
        Ok(())
    }

    /// SIGTERM to capgate itself, then wait for a clean exit. The signal goes to the
    /// `capgate` processes of the server's process group, not to what started them:
    /// `buildah run` answers a SIGTERM by killing its command.
    fn stop(mut self) -> anyhow::Result<()> {
        let mut pids = capgate_in_group(self.child.id());
        if pids.is_empty() {
            pids.push(self.child.id());
        }
        for pid in pids {
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        let start = Instant::now();
        let status: ExitStatus = loop {
            if let Some(status) = self.child.try_wait()? {
                break status;
            }
            if start.elapsed() > STOP_TIMEOUT {
                bail!(
                    "{} did not exit within {STOP_TIMEOUT:?} of SIGTERM",
                    self.what
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        if !status.success() {
            bail!(
                "{} exited with {status} after SIGTERM\n--- output ---\n{}",
                self.what,
                self.output()
            );
        }
        Ok(())
    }
}

/// The processes named `capgate` in process group `group` (from /proc).
fn capgate_in_group(group: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // `pid (comm) state ppid pgrp …`; comm may hold spaces and parentheses.
            let open = stat.find('(')?;
            let close = stat.rfind(')')?;
            let comm = stat.get(open + 1..close)?;
            let mut rest = stat.get(close + 1..)?.split_whitespace();
            let pgrp: u32 = rest.nth(2)?.parse().ok()?;
            (comm == "capgate" && pgrp == group).then_some(pid)
        })
        .collect()
}

impl Drop for Server {
    /// A server a failed check leaves running is killed with its process group.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let group = format!("-{}", self.child.id());
            let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
            let _ = self.child.wait();
        }
    }
}
