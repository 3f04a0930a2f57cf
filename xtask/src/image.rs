//! `cargo xtask image`: the container image, built by `buildah` from the repository's
//! `Containerfile` on a context staged here. No base image is pulled: the image is
//! `FROM scratch` with the `cargo xtask dist` tree laid out as a root filesystem, the shared
//! libraries the binary links (from `ldd`, with the dynamic loader), CA certificates, and a
//! `passwd`/`group` naming the non-root user 10001 it runs as:
//!
//! ```text
//! /usr/local/bin/capgate       bin/capgate of the archive
//! /etc/capgate/                etc/capgate of the archive (the example; mount your own here)
//! /var/lib/capgate/            the state volume, owned by 10001 (compile cache, SQLite store)
//! /usr/share/doc/capgate/      LICENSE, sbom.cdx.json (the binary's crates, CycloneDX)
//! /lib…, /etc/ssl/certs/ca-certificates.crt, /etc/passwd, /etc/group, /etc/nsswitch.conf, /tmp
//! /var/lib/dpkg/status.d/PKG   the Debian package each copied library (and the CA bundle)
//! /etc/os-release              came from, as distroless images record them, so scanners
//!                              see the OS packages and their versions
//! ```

use crate::dist::{self, Binary, Dist, copy, copy_tree, mkdir, set_mode, write};
use crate::run;
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The user the image runs as (and the Kubernetes manifests' `runAsUser`).
pub const UID: u32 = 10001;

/// The image's default name for a binary of this kind: `localhost/capgate:VERSION`
/// (`-debug` for a debug build).
pub fn default_tag(binary: &Binary) -> String {
    let debug = if matches!(binary, Binary::Release) {
        ""
    } else {
        "-debug"
    };
    format!("localhost/capgate:{}{debug}", env!("CARGO_PKG_VERSION"))
}

/// `cargo xtask image [--debug | --binary PATH] [--tag NAME]`.
pub fn image(root: &Path, args: &[String]) -> anyhow::Result<()> {
    let (binary, rest) = dist::parse_binary(args)?;
    let mut tag = default_tag(&binary);
    let mut it = rest.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--tag" => tag = it.next().context("--tag needs a name")?.clone(),
            other => bail!(
                "unexpected argument '{other}' for image\n\nUsage: cargo xtask image [--debug | --binary PATH] [--tag NAME]\n  --debug        from target/debug/capgate as the last build left it (no release build)\n  --binary PATH  from this capgate binary\n  --tag NAME     the image's name (default {})",
                default_tag(&Binary::Release)
            ),
        }
    }
    require_buildah()?;
    let d = dist::build(root, &binary)?;
    build(root, &d, &tag)?;
    println!("{tag} ({})", size(&tag)?);
    let exported = export(root, &d, &tag)?;
    println!(
        "{} (the image as an OCI archive; signature {}, under {}; SBOM in the image at /usr/share/doc/capgate/sbom.cdx.json)",
        exported.display(),
        crate::sign::signature_path(&exported).display(),
        d.public_key.display()
    );
    Ok(())
}

/// Fail with what to install when `buildah` is not on PATH.
pub fn require_buildah() -> anyhow::Result<()> {
    if !crate::tools::on_path("buildah") {
        bail!("buildah is not installed (Debian: apt-get install buildah)");
    }
    Ok(())
}

/// Stage the context for `d` and build the image `tag` from the repository's Containerfile.
pub fn build(root: &Path, d: &Dist, tag: &str) -> anyhow::Result<()> {
    let context = dist::target_dir(root).join("image").join(&d.name);
    if context.exists() {
        std::fs::remove_dir_all(&context)
            .with_context(|| format!("removing {}", context.display()))?;
    }
    let rootfs = context.join("rootfs");
    stage(d, &rootfs)?;
    // The state volume's mount point, owned by the runtime user (Containerfile COPY --chown).
    mkdir(&context.join("state"))?;
    run(Command::new("buildah")
        .args(["bud", "--isolation", "chroot", "--layers=false"])
        .arg("-f")
        .arg(root.join("Containerfile"))
        .args(["-t", tag])
        .arg(&context))
}

/// The image's root filesystem from the dist tree.
fn stage(d: &Dist, rootfs: &Path) -> anyhow::Result<()> {
    let binary = rootfs.join("usr/local/bin/capgate");
    copy(&d.tree.join("bin/capgate"), &binary)?;
    set_mode(&binary, 0o755)?;
    copy_tree(&d.tree.join("etc/capgate"), &rootfs.join("etc/capgate"))?;
    copy(
        &d.tree.join("LICENSE"),
        &rootfs.join("usr/share/doc/capgate/LICENSE"),
    )?;
    copy(
        &d.tree.join("sbom.cdx.json"),
        &rootfs.join("usr/share/doc/capgate/sbom.cdx.json"),
    )?;
    let libs = libraries(&binary)?;
    for lib in &libs {
        let inside = lib.strip_prefix("/").context("ldd names absolute paths")?;
        copy(lib, &rootfs.join(inside))?;
        set_mode(&rootfs.join(inside), 0o755)?;
    }
    let certs = Path::new("/etc/ssl/certs/ca-certificates.crt");
    if !certs.is_file() {
        bail!(
            "{}: missing (Debian: apt-get install ca-certificates); the image carries it for TLS upstreams",
            certs.display()
        );
    }
    copy(certs, &rootfs.join("etc/ssl/certs/ca-certificates.crt"))?;
    let mut owned: Vec<&Path> = libs.iter().map(PathBuf::as_path).collect();
    owned.push(Path::new("/usr/share/ca-certificates"));
    package_metadata(&owned, rootfs)?;
    write(
        &rootfs.join("etc/passwd"),
        format!(
            "root:x:0:0:root:/root:/sbin/nologin\ncapgate:x:{UID}:{UID}:capgate:/var/lib/capgate:/sbin/nologin\n"
        )
        .as_bytes(),
    )?;
    write(
        &rootfs.join("etc/group"),
        format!("root:x:0:\ncapgate:x:{UID}:\n").as_bytes(),
    )?;
    write(&rootfs.join("etc/nsswitch.conf"), b"hosts: files dns\n")?;
    // /var/lib belongs to root; only the state volume's mount point is the user's.
    mkdir(&rootfs.join("var/lib"))?;
    mkdir(&rootfs.join("tmp"))?;
    set_mode(&rootfs.join("tmp"), 0o1777)
}

/// The Debian packages `files` came from, recorded as distroless images do: each
/// package's `dpkg-query -s` stanza in `/var/lib/dpkg/status.d/PKG`, and the build host's
/// `/etc/os-release`. A host without dpkg records nothing (and says so): the image then
/// carries libraries a scanner cannot name.
fn package_metadata(files: &[&Path], rootfs: &Path) -> anyhow::Result<()> {
    if !crate::tools::on_path("dpkg-query") {
        eprintln!("xtask: no dpkg on this host: the image records no OS packages");
        return Ok(());
    }
    let mut packages = std::collections::BTreeSet::new();
    for file in files {
        let mut found = None;
        for candidate in [file.to_path_buf(), std::fs::canonicalize(file)?] {
            let out = Command::new("dpkg-query")
                .arg("-S")
                .arg(&candidate)
                .output()
                .context("running dpkg-query -S")?;
            if out.status.success() {
                found = String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .next()
                    .and_then(|l| l.split_once(": "))
                    .map(|(p, _)| p.split(", ").next().unwrap_or(p).to_string());
                break;
            }
        }
        match found {
            Some(p) => {
                packages.insert(p);
            }
            None => bail!(
                "{}: no Debian package owns it, so the image could not say what it is",
                file.display()
            ),
        }
    }
    let dir = rootfs.join("var/lib/dpkg/status.d");
    mkdir(&dir)?;
    for package in &packages {
        let out = Command::new("dpkg-query")
            .args(["-s", package])
            .output()
            .context("running dpkg-query -s")?;
        if !out.status.success() {
            bail!(
                "dpkg-query -s {package}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let name = package.split(':').next().unwrap_or(package);
        write(&dir.join(name), &out.stdout)?;
    }
    let os_release = Path::new("/etc/os-release");
    if os_release.exists() {
        write(
            &rootfs.join("etc/os-release"),
            &std::fs::read(os_release).context("reading /etc/os-release")?,
        )?;
    }
    eprintln!(
        "xtask: the image records {} Debian package(s): {}",
        packages.len(),
        packages.iter().cloned().collect::<Vec<_>>().join(", ")
    );
    Ok(())
}

/// The shared libraries `binary` loads, the dynamic loader included (`ldd`).
fn libraries(binary: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(binary)
        .output()
        .context("running ldd")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "ldd {}: {}{}",
            binary.display(),
            text,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut libs = Vec::new();
    for line in text.lines() {
        if line.contains("not found") {
            bail!("ldd {}: {}", binary.display(), line.trim());
        }
        libs.extend(
            line.split_whitespace()
                .filter(|t| t.starts_with('/'))
                .map(PathBuf::from),
        );
    }
    if libs.is_empty() {
        bail!(
            "ldd {}: no libraries (a static binary needs none: drop this step)",
            binary.display()
        );
    }
    Ok(libs)
}

/// The image's size as `buildah images` reports it.
pub fn size(tag: &str) -> anyhow::Result<String> {
    let out = Command::new("buildah")
        .args(["images", "--format", "{{.Size}}", tag])
        .output()
        .context("running buildah images")?;
    if !out.status.success() {
        bail!(
            "buildah images {tag}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The image as an OCI archive (`buildah push TAG oci-archive:PATH`), signed like the
/// release archive: `target/dist/NAME.oci.tar` and its `.sig`.
pub fn export(root: &Path, d: &Dist, tag: &str) -> anyhow::Result<PathBuf> {
    let path = dist::dist_dir(root).join(format!("{}.oci.tar", d.name));
    if path.exists() {
        std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
    }
    run(Command::new("buildah")
        .args(["push", "--quiet", tag])
        .arg(format!("oci-archive:{}:{tag}", path.display())))?;
    crate::sign::Signer::new(&dist::dist_dir(root))?.sign(&path)?;
    Ok(path)
}

/// What the image records for scanners, read from its root filesystem (`buildah
/// mount`): the SBOM as packed in the archive, and the Debian packages of its libraries.
pub fn check_metadata(d: &Dist, tag: &str) -> anyhow::Result<()> {
    let container = format!("capgate-sbom-check-{}", std::process::id());
    run(Command::new("buildah").args(["from", "--name", &container, tag]))?;
    let checked = (|| -> anyhow::Result<()> {
        let out = Command::new("buildah")
            .args(["mount", &container])
            .output()
            .context("running buildah mount")?;
        if !out.status.success() {
            bail!("buildah mount: {}", String::from_utf8_lossy(&out.stderr));
        }
        let mounted = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let inside = std::fs::read(mounted.join("usr/share/doc/capgate/sbom.cdx.json"))
            .context("the image has no /usr/share/doc/capgate/sbom.cdx.json")?;
        if inside != std::fs::read(&d.sbom)? {
            bail!("the image's SBOM is not the archive's");
        }
        if crate::tools::on_path("dpkg-query")
            && !mounted.join("var/lib/dpkg/status.d/libc6").is_file()
        {
            bail!("the image records no Debian package for its C library");
        }
        let _ = run(Command::new("buildah").args(["umount", &container]));
        Ok(())
    })();
    let removed = run(Command::new("buildah").args(["rm", &container]));
    checked.and(removed)
}

/// `buildah rmi TAG`.
pub fn remove(tag: &str) -> anyhow::Result<()> {
    run(Command::new("buildah").args(["rmi", tag]))
}
