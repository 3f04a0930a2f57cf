//! Issue 57: plugin settings checked at load. A plugin declares the JSON Schema of its
//! `config` (the SDKs write it into the component), and validation — what `check`, `serve`
//! and reload all run — refuses a binding's config that does not match, located at its key,
//! in a Rust, a JavaScript and a Python plugin alike. A plugin that declares nothing keeps
//! today's behaviour, and `check` says so.

use capgate_config::located::Problem;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// The example in `dir`, its plugin directory a copy of the Rust plugins with refund-limit
/// and pii-redactor replaced by the `lang` builds (`rust`, `js`, `python`), re-pinned.
fn example_with(dir: &Path, lang: &str, edit: impl Fn(String) -> String) -> PathBuf {
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).expect("plugin dir");
    let rust = capgate_testkit::paths::plugin_wasm_dir();
    for name in [
        "org_isolation",
        "refund_limit",
        "pii_redactor",
        "support_desk",
    ] {
        let file = format!("{name}.wasm");
        std::fs::copy(rust.join(&file), plugins.join(&file)).expect("copy a Rust plugin");
    }
    let mut pins = Vec::new();
    if lang != "rust" {
        let built = capgate_testkit::paths::repo_root()
            .join("plugins")
            .join(lang)
            .join("dist");
        for (from, to) in [
            ("refund-limit.wasm", "refund_limit.wasm"),
            ("pii-redactor.wasm", "pii_redactor.wasm"),
        ] {
            let source = built.join(from);
            assert!(
                source.is_file(),
                "{} is missing: run `bash sdk/build-polyglot.sh` first",
                source.display()
            );
            std::fs::copy(&source, plugins.join(to)).expect("copy a polyglot plugin");
            let bytes = std::fs::read(plugins.join(to)).expect("read");
            pins.push((to, hex(&Sha256::digest(&bytes))));
        }
    }
    capgate_testkit::paths::example_in(dir, |text| {
        let mut text = text;
        let start = text.find("pluginDir = \"").expect("pluginDir");
        let end = start + text[start..].find('\n').expect("line end");
        text.replace_range(
            start..end,
            &format!("pluginDir = \"{}\"", plugins.display()),
        );
        for (file, pin) in &pins {
            let at = text
                .find(&format!("path = \"{file}\"\nsha256 = \""))
                .expect("the plugin's section");
            let sha = at + format!("path = \"{file}\"\nsha256 = \"").len();
            text.replace_range(sha..sha + 64, pin);
        }
        edit(text)
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn refused(config: &Path) -> Vec<Problem> {
    match capgate_server::validate::validate(config) {
        Ok(_) => panic!("{} must be refused", config.display()),
        Err(refused) => refused.problems,
    }
}

/// The line (1-based) of the first occurrence of `needle` in the file.
fn line_of(config: &Path, needle: &str) -> usize {
    let text = std::fs::read_to_string(config).expect("read");
    text.lines()
        .position(|l| l.contains(needle))
        .map(|i| i + 1)
        .unwrap_or_else(|| panic!("`{needle}` is not in {}", config.display()))
}

fn the_typo_is_refused_at_its_key(lang: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = example_with(dir.path(), lang, |t| t);
    // The control: as shipped, each language's plugins check, and declare their schemas
    // (a plugin bound with a config that declares nothing would be warned about).
    let checked = capgate_server::validate::validate(&config)
        .unwrap_or_else(|e| panic!("{lang}: the example must check: {:?}", e.problems));
    let undeclared: Vec<_> = checked
        .warnings
        .iter()
        .filter(|w| w.message.contains("declares no schema"))
        .collect();
    assert!(undeclared.is_empty(), "{lang}: {undeclared:?}");

    let config = example_with(dir.path(), lang, |t| {
        let t = t.replacen(
            "config = { maxAmount = 500, approvalType = \"manager\" }",
            "config = { maxAmont = 500, approvalType = \"manager\" }",
            1,
        );
        assert!(
            t.contains("maxAmont"),
            "the example's refundLimit config moved"
        );
        // A redactor pointer without its leading `/` would silently redact nothing.
        let t = t.replacen("paths = [\"/gatewayRef\"]", "paths = [\"gatewayRef\"]", 1);
        assert!(
            t.contains("[\"gatewayRef\"]"),
            "the example's redactor config moved"
        );
        t
    });
    let problems = refused(&config);
    let typo = problems
        .iter()
        .find(|p| p.key.ends_with("refundLimit.config.maxAmont"))
        .unwrap_or_else(|| panic!("{lang}: no problem at the typo: {problems:#?}"));
    assert_eq!(typo.line, line_of(&config, "maxAmont"), "{lang}: {typo}");
    assert!(
        typo.message
            .contains("(it takes: amountPath, approvalType, expiresInMs, label, maxAmount)"),
        "{lang}: {typo}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.key.ends_with("refundLimit.config") && p.message.contains("maxAmount")),
        "{lang}: the missing maxAmount: {problems:#?}"
    );
    let pointer = problems
        .iter()
        .find(|p| p.key.contains("stripGatewayRef.config.paths"))
        .unwrap_or_else(|| panic!("{lang}: no problem at the pointer: {problems:#?}"));
    assert_eq!(pointer.line, line_of(&config, "[\"gatewayRef\"]"), "{lang}");
    // Nothing else is refused: the problems are the schema's, at their keys.
    assert_eq!(problems.len(), 3, "{lang}: {problems:#?}");
}

#[test]
fn check_refuses_a_typo_in_a_rust_plugins_config_at_its_key() {
    the_typo_is_refused_at_its_key("rust");
}

#[test]
fn check_refuses_a_typo_in_a_javascript_plugins_config_at_its_key() {
    the_typo_is_refused_at_its_key("js");
}

#[test]
fn check_refuses_a_typo_in_a_python_plugins_config_at_its_key() {
    the_typo_is_refused_at_its_key("python");
}

/// A plugin that declares no schema keeps today's behaviour (its config reaches it as
/// written), and `check` says that nothing checked it.
#[test]
fn a_plugin_that_declares_no_schema_is_loaded_with_a_warning() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = example_with(dir.path(), "rust", |t| {
        t.replacen(
            "procedure = { plugin = \"support-desk\" }",
            "procedure = { plugin = \"support-desk\", config = { region = \"eu\" } }",
            1,
        )
    });
    let checked = capgate_server::validate::validate(&config)
        .unwrap_or_else(|e| panic!("must check: {:?}", e.problems));
    let warning = checked
        .warnings
        .iter()
        .find(|w| w.message.contains("declares no schema"))
        .unwrap_or_else(|| panic!("no warning: {:?}", checked.warnings));
    assert!(warning.key.ends_with("procedure.config"), "{warning}");
    assert!(warning.message.contains("support-desk"), "{warning}");
}
