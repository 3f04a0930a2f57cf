//! `cargo xtask dist`: the release archive. One directory, packed as
//! `capgate-VERSION-ARCH-linux.tar.gz` in `target/dist/` with a `.sha256` beside it:
//!
//! ```text
//! capgate-0.1.0-x86_64-linux/
//!   bin/capgate              the binary, debug info stripped
//!   etc/capgate/             the customer-support example (may be read-only):
//!     capgate.toml             example::packaged: stateDir ../../var/lib/capgate, one key from the environment
//!     plugins/*.wasm           the plugins it pins
//!     schemas/ scenarios/
//!   var/lib/capgate/         the state directory (compile cache, SQLite store): empty
//!   docs/ README.md LICENSE SECURITY.md
//!   sbom.cdx.json            the binary's crates, CycloneDX (xtask/src/sbom.rs)
//!   SHA256SUMS               every other file's SHA-256 (`sha256sum -c SHA256SUMS`)
//! ```
//!
//! Beside the archive: `NAME.tar.gz.sha256`, the SBOM again (`NAME.cdx.json`), a
//! cosign-compatible signature of each (`.sig`) and the public key they verify under
//! (`capgate-release.pub`; xtask/src/sign.rs).
//!
//! `cargo xtask image` stages its container from the same tree (xtask/src/image.rs).

use crate::{example, plugins, run};
use anyhow::{Context, bail};
use sha2::{Digest, Sha256};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Which `capgate` binary a package is made from.
#[derive(Debug, Clone)]
pub enum Binary {
    /// `cargo build --release -p capgate` (the default).
    Release,
    /// `target/debug/capgate` as the last build left it (CI packages the binary
    /// `cargo test --workspace` built rather than build a second profile).
    Debug,
    /// A binary built elsewhere.
    Path(PathBuf),
}

impl Binary {
    /// The suffix of the package's name: a debug build is never mistaken for a release.
    fn suffix(&self) -> &'static str {
        match self {
            Binary::Release => "",
            Binary::Debug | Binary::Path(_) => "-debug",
        }
    }
}

/// `--debug` / `--binary PATH` out of `args`; the rest is returned for the caller.
pub fn parse_binary(args: &[String]) -> anyhow::Result<(Binary, Vec<String>)> {
    let mut binary = Binary::Release;
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--debug" => binary = Binary::Debug,
            "--binary" => {
                let path = it.next().context("--binary needs a path")?;
                binary = Binary::Path(PathBuf::from(path));
            }
            _ => rest.push(arg.clone()),
        }
    }
    Ok((binary, rest))
}

/// A staged and packed distribution.
pub struct Dist {
    /// `capgate-VERSION-ARCH-linux` (`-debug` for a debug build).
    pub name: String,
    /// The staged tree, `target/dist/NAME/`.
    pub tree: PathBuf,
    /// `target/dist/NAME.tar.gz`.
    pub archive: PathBuf,
    /// `target/dist/NAME.cdx.json`: the binary's CycloneDX SBOM (also in the tree).
    pub sbom: PathBuf,
    /// `target/dist/capgate-release.pub`: what the `.sig` files verify under.
    pub public_key: PathBuf,
}

/// The package name for a binary of this kind.
pub fn name(binary: &Binary) -> String {
    format!(
        "capgate-{}-{}-{}{}",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::ARCH,
        std::env::consts::OS,
        binary.suffix()
    )
}

/// The cargo target directory (`CARGO_TARGET_DIR` or `target/`).
pub fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}

/// Where packages are written: `target/dist/`.
pub fn dist_dir(root: &Path) -> PathBuf {
    target_dir(root).join("dist")
}

/// `cargo xtask dist [--debug | --binary PATH]`.
pub fn dist(root: &Path, args: &[String]) -> anyhow::Result<()> {
    let (binary, rest) = parse_binary(args)?;
    if let Some(extra) = rest.first() {
        bail!(
            "unexpected argument '{extra}' for dist\n\nUsage: cargo xtask dist [--debug | --binary PATH]\n  --debug        package target/debug/capgate as the last build left it (no release build)\n  --binary PATH  package this capgate binary"
        );
    }
    let d = build(root, &binary)?;
    let size = std::fs::metadata(&d.archive)?.len();
    println!(
        "{} ({:.1} MB; SHA-256 in {}.sha256)",
        d.archive.display(),
        size as f64 / 1e6,
        d.archive.display()
    );
    println!(
        "{} (CycloneDX SBOM); signatures {} and {}, under {}",
        d.sbom.display(),
        crate::sign::signature_path(&d.archive).display(),
        crate::sign::signature_path(&d.sbom).display(),
        d.public_key.display()
    );
    Ok(())
}

/// Build what is needed, stage the tree, pack it and write its checksum.
pub fn build(root: &Path, binary: &Binary) -> anyhow::Result<Dist> {
    if std::env::consts::OS != "linux" {
        bail!("cargo xtask dist packages Linux builds only");
    }
    let source = match binary {
        Binary::Release => {
            crate::tools::ensure_cargo_auditable()?;
            run(Command::new("cargo").current_dir(root).args([
                "auditable",
                "build",
                "--release",
                "-p",
                "capgate",
            ]))?;
            target_dir(root).join("release/capgate")
        }
        Binary::Debug => {
            let path = target_dir(root).join("debug/capgate");
            if !path.exists() {
                crate::tools::ensure_cargo_auditable()?;
                run(Command::new("cargo").current_dir(root).args([
                    "auditable",
                    "build",
                    "-p",
                    "capgate",
                ]))?;
            }
            path
        }
        Binary::Path(p) => p.clone(),
    };
    if !source.is_file() {
        bail!("{}: no capgate binary there", source.display());
    }
    plugins::build_plugins(root)?;
    example::render(root)?;

    let name = name(binary);
    let out = dist_dir(root);
    let tree = out.join(&name);
    if tree.exists() {
        make_writable(&tree)?;
        std::fs::remove_dir_all(&tree).with_context(|| format!("removing {}", tree.display()))?;
    }
    mkdir(&tree.join("bin"))?;
    run(Command::new("strip")
        .arg("--strip-debug")
        .arg("-o")
        .arg(tree.join("bin/capgate"))
        .arg(&source))?;
    set_mode(&tree.join("bin/capgate"), 0o755)?;

    let config = tree.join("etc/capgate");
    mkdir(&config.join("plugins"))?;
    let text = example::packaged(root)?;
    write(&config.join("capgate.toml"), text.as_bytes())?;
    let built = root.join("plugins/target/wasm32-wasip2/release");
    let files = example::plugin_files(&text);
    if files.is_empty() {
        bail!("the packaged example names no plugin file; update xtask/src/example.rs");
    }
    for file in files {
        copy(&built.join(&file), &config.join("plugins").join(&file))?;
    }
    let example_dir = root.join("examples/customer-support");
    copy_tree(&example_dir.join("schemas"), &config.join("schemas"))?;
    copy_tree(&example_dir.join("scenarios"), &config.join("scenarios"))?;
    mkdir(&tree.join("var/lib/capgate"))?;
    copy_tree(&root.join("docs"), &tree.join("docs"))?;
    for file in ["README.md", "LICENSE", "SECURITY.md"] {
        copy(&root.join(file), &tree.join(file))?;
    }
    let bom = serde_json::to_vec_pretty(&crate::sbom::capgate(root)?)?;
    write(&tree.join("sbom.cdx.json"), &bom)?;
    write(&tree.join("SHA256SUMS"), sums(&tree)?.as_bytes())?;

    let archive = out.join(format!("{name}.tar.gz"));
    let mut tar = Command::new("tar");
    tar.arg("--sort=name")
        .args(["--owner=0", "--group=0", "--numeric-owner"])
        .arg("--use-compress-program=gzip -n");
    // The same commit packs to the same bytes.
    if let Some(epoch) = commit_time(root) {
        tar.arg(format!("--mtime=@{epoch}"));
    }
    run(tar.arg("-cf").arg(&archive).arg("-C").arg(&out).arg(&name))?;
    let digest = hex::encode(Sha256::digest(
        std::fs::read(&archive).with_context(|| format!("reading {}", archive.display()))?,
    ));
    write(
        &out.join(format!("{name}.tar.gz.sha256")),
        format!("{digest}  {name}.tar.gz\n").as_bytes(),
    )?;
    let sbom = out.join(format!("{name}.cdx.json"));
    write(&sbom, &bom)?;
    let signer = crate::sign::Signer::new(&out)?;
    signer.sign(&archive)?;
    signer.sign(&sbom)?;
    Ok(Dist {
        name,
        tree,
        archive,
        sbom,
        public_key: signer.public,
    })
}

/// `SHA256SUMS` of a tree: one `DIGEST  PATH` line per file (sorted, paths relative to the
/// tree, `SHA256SUMS` itself left out), the format `sha256sum -c` reads.
pub fn sums(tree: &Path) -> anyhow::Result<String> {
    let mut files = Vec::new();
    walk(tree, &mut |p| {
        if p.is_file() {
            files.push(p.to_path_buf());
        }
        Ok(())
    })?;
    let mut lines = Vec::new();
    for file in files {
        let rel = file
            .strip_prefix(tree)
            .context("a walked path is inside its tree")?
            .to_string_lossy()
            .into_owned();
        if rel == "SHA256SUMS" {
            continue;
        }
        let bytes = std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
        lines.push(format!("{}  {rel}\n", hex::encode(Sha256::digest(&bytes))));
    }
    lines.sort_by(|a, b| a[66..].cmp(&b[66..]));
    Ok(lines.concat())
}

/// Every path below `dir` (not `dir` itself), parents before children.
pub fn walk(dir: &Path, f: &mut dyn FnMut(&Path) -> anyhow::Result<()>) -> anyhow::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        f(&path)?;
        if entry.file_type()?.is_dir() {
            walk(&path, f)?;
        }
    }
    Ok(())
}

/// Give the owner write access to everything below `dir` again (what a check made
/// read-only), so it can be removed.
pub fn make_writable(dir: &Path) -> anyhow::Result<()> {
    add_owner_write(dir)?;
    walk(dir, &mut |p| {
        if !p.is_symlink() {
            add_owner_write(p)?;
        }
        Ok(())
    })
}

fn add_owner_write(p: &Path) -> anyhow::Result<()> {
    let mode = std::fs::metadata(p)?.permissions().mode();
    set_mode(p, mode | 0o200)
}

/// `chmod MODE path`.
pub fn set_mode(path: &Path, mode: u32) -> anyhow::Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {mode:o} {}", path.display()))
}

/// `mkdir -p`, mode 0755.
pub fn mkdir(path: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(path).with_context(|| format!("creating {}", path.display()))?;
    set_mode(path, 0o755)
}

/// Write a file, mode 0644.
pub fn write(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))?;
    set_mode(path, 0o644)
}

/// Copy one file (following symlinks), mode 0644.
pub fn copy(from: &Path, to: &Path) -> anyhow::Result<()> {
    if let Some(parent) = to.parent() {
        mkdir(parent)?;
    }
    std::fs::copy(from, to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    set_mode(to, 0o644)
}

/// Copy a directory's files and subdirectories.
pub fn copy_tree(from: &Path, to: &Path) -> anyhow::Result<()> {
    mkdir(to)?;
    walk(from, &mut |p| {
        let rel = p
            .strip_prefix(from)
            .context("a walked path is inside its tree")?;
        if p.is_dir() {
            mkdir(&to.join(rel))
        } else {
            copy(p, &to.join(rel))
        }
    })
}

/// The commit time of `HEAD` (seconds since the epoch), if this is a git checkout.
fn commit_time(root: &Path) -> Option<String> {
    let out = Command::new("git")
        .current_dir(root)
        .args(["log", "-1", "--format=%ct"])
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
        .then(|| text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `SHA256SUMS` is what `sha256sum -c` reads, nested paths included, and a changed file
    /// fails it.
    #[test]
    fn sums_are_what_sha256sum_checks() {
        let tmp = tempfile::tempdir().expect("a temporary directory");
        let tree = tmp.path();
        write(&tree.join("a.txt"), b"a\n").expect("write");
        mkdir(&tree.join("etc/capgate")).expect("mkdir");
        write(
            &tree.join("etc/capgate/capgate.toml"),
            b"revision = \"x\"\n",
        )
        .expect("write");
        write(
            &tree.join("SHA256SUMS"),
            sums(tree).expect("sums").as_bytes(),
        )
        .expect("write");
        let text = std::fs::read_to_string(tree.join("SHA256SUMS")).expect("read");
        assert_eq!(text.lines().count(), 2, "{text}");
        if !crate::tools::on_path("sha256sum") {
            eprintln!("sha256sum is not installed: the digests are not cross-checked");
            return;
        }
        let check = |tree: &Path| {
            Command::new("sha256sum")
                .args(["-c", "--quiet", "SHA256SUMS"])
                .current_dir(tree)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .expect("sha256sum runs")
                .success()
        };
        assert!(check(tree));
        write(&tree.join("a.txt"), b"b\n").expect("write");
        assert!(!check(tree));
    }
}
