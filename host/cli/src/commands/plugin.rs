//! `capgate plugin test|push`: a plugin author's inner loop (its cases, crate::plugin_test)
//! and publishing a component to an OCI registry (`capgate_oci`).

use super::shared::{OutputArg, print_json};
use crate::exit::Status;
use crate::runtime;
use anyhow::Context;
use capgate_oci as oci;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Plugin author tools.
#[derive(clap::Args, Debug)]
pub struct PluginArgs {
    #[command(subcommand)]
    command: PluginCommand,
}

#[derive(clap::Subcommand, Debug)]
enum PluginCommand {
    /// Run a plugin against request → expected decision/output cases; prints a pass/fail
    /// table with the plugin's time per case and exits 1 on any failure (`--output json`:
    /// one document, `{"ok", "plugin", "sha256", "passed", "failed", "cases"}`).
    ///
    /// Example: capgate plugin test plugins/js/dist/refund-limit.wasm --cases plugins/conformance/refund-limit.toml
    Test {
        /// The component file, or the name of a plugin that ships with capgate (`cel`).
        plugin: PathBuf,
        /// The case file (format: plugins/conformance/README.md).
        #[arg(long)]
        cases: PathBuf,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Publish a Wasm component to an OCI registry as a Wasm artifact (an OCI image
    /// manifest with config `application/vnd.wasm.config.v0+json` and one
    /// `application/wasm` layer) and print the `oci://…@sha256:…` reference to put in a
    /// plugin's `path`. Credentials: CAPGATE_REGISTRY_USERNAME/CAPGATE_REGISTRY_PASSWORD, or
    /// the docker config's credential helper or `auths`.
    ///
    /// Example: capgate plugin push plugins/target/wasm32-wasip2/release/refund_limit.wasm oci://127.0.0.1:5000/capgate/refund-limit:v1 --sign-key release.pem
    Push {
        /// The component file.
        plugin: PathBuf,
        /// Where: oci://REGISTRY/REPOSITORY[:TAG] (loopback registries over plain HTTP).
        target: String,
        /// Also sign it, as cosign does, with this unencrypted PEM private key: ECDSA P-256
        /// (cosign's default; `openssl ecparam -name prime256v1 -genkey -noout`) or Ed25519
        /// (`openssl genpkey -algorithm ed25519`).
        #[arg(long)]
        sign_key: Option<PathBuf>,
        /// Which of cosign's signature layouts to write: `both` (the legacy tag
        /// `sha256-DIGEST.sig` and a Sigstore bundle attached as a referrer, so cosign 2 and
        /// cosign 3 verifiers each find theirs), `simple-signing` or `bundle`.
        #[arg(long, value_enum, default_value = "both", requires = "sign_key")]
        signature_format: SignatureFormatArg,
        /// Speak plain HTTP to this non-loopback registry.
        #[arg(long)]
        insecure: bool,
    },
}

/// `--signature-format`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum SignatureFormatArg {
    /// The legacy layout and a bundle.
    Both,
    /// The legacy layout (`sha256-DIGEST.sig`).
    SimpleSigning,
    /// A Sigstore bundle attached as a referrer.
    Bundle,
}

impl From<SignatureFormatArg> for oci::sign::SignatureFormat {
    fn from(a: SignatureFormatArg) -> Self {
        match a {
            SignatureFormatArg::Both => oci::sign::SignatureFormat::Both,
            SignatureFormatArg::SimpleSigning => oci::sign::SignatureFormat::SimpleSigning,
            SignatureFormatArg::Bundle => oci::sign::SignatureFormat::Bundle,
        }
    }
}

/// `capgate plugin …`.
pub fn run(args: PluginArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        PluginCommand::Test {
            plugin,
            cases,
            output,
        } => test(&plugin, &cases, output),
        PluginCommand::Push {
            plugin,
            target,
            sign_key,
            signature_format,
            insecure,
        } => push(
            &plugin,
            &target,
            sign_key.as_deref(),
            signature_format.into(),
            insecure,
        ),
    }
}

/// `capgate plugin test`: 0 when every case passed, 1 otherwise.
fn test(plugin: &Path, cases: &Path, output: OutputArg) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(cases)
        .with_context(|| format!("cannot read the case file {}", cases.display()))?;
    let host = capgate_wasm::WasmHost::shared().context("could not start the Wasm engine")?;
    let shipped = plugin
        .to_str()
        .and_then(capgate_builtin::get)
        .filter(|_| !plugin.exists());
    let report = match shipped {
        Some(b) => crate::plugin_test::run_bytes(&host, b.name, b.wasm, &text),
        None => crate::plugin_test::run_file(&host, plugin, &text),
    }
    .with_context(|| format!("cannot test {}", plugin.display()))?;
    if output.json() {
        print_json(&report.to_json())?;
    } else {
        print!("{}", report.render());
    }
    Ok(if report.all_passed() {
        Status::Ok.code()
    } else {
        Status::Failed.code()
    })
}

/// `capgate plugin push`: 0 with the pushed reference on stdout.
fn push(
    plugin: &Path,
    target: &str,
    sign_key: Option<&Path>,
    format: oci::sign::SignatureFormat,
    insecure: bool,
) -> anyhow::Result<ExitCode> {
    let size = std::fs::metadata(plugin)
        .with_context(|| format!("cannot read {}", plugin.display()))?
        .len();
    anyhow::ensure!(
        size <= oci::MAX_PLUGIN_BYTES,
        "{} is larger than {} bytes",
        plugin.display(),
        oci::MAX_PLUGIN_BYTES
    );
    let wasm =
        std::fs::read(plugin).with_context(|| format!("cannot read {}", plugin.display()))?;
    let key = sign_key
        .map(oci::sign::load_signing_key)
        .transpose()
        .map_err(anyhow::Error::msg)?;
    let insecure: Vec<String> = if insecure {
        oci::Reference::parse(target)
            .map(|r| vec![r.registry])
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let pushed = runtime()?
        .block_on(oci::push(&wasm, target, &insecure, key.as_ref(), format))
        .with_context(|| format!("cannot push {} to {target}", plugin.display()))?;
    eprintln!(
        "pushed {} (Wasm sha256 {}){}",
        plugin.display(),
        pushed.wasm_sha256,
        if pushed.signed { ", signed" } else { "" }
    );
    println!("{}", pushed.reference);
    Ok(ExitCode::SUCCESS)
}
