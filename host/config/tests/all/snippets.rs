//! Every `capgate.toml` snippet the READMEs and the book show (README.md, docs/**/*.md,
//! sdk/**/README.md, plugins/**/README.md) is a configuration `capgate check` accepts the
//! shape of: each key declared, each value of its type and range (the JSON Schema), and no
//! problem of a name, a type or a range from `Config::parse`. Snippets are fragments, so what only a
//! whole deployment has (a policy's plugin is loaded, pins are real digests) is not asked.

use crate::keys::{repo, walk};
use capgate_config::keys;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The files the snippets live in: the README, every page of the book (`docs/`, at any
/// depth) and the SDKs' and plugins' READMEs.
fn readmes() -> Vec<PathBuf> {
    /// The `.md` files under `dir` whose name `keep` accepts, at any depth, sorted.
    fn under(dir: &Path, keep: fn(&str) -> bool, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut entries: Vec<_> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
        entries.sort();
        for path in entries {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() {
                if !matches!(name, "node_modules" | "target" | ".venv" | "dist") {
                    under(&path, keep, out);
                }
            } else if name.ends_with(".md") && keep(name) {
                out.push(path);
            }
        }
    }
    let readme: fn(&str) -> bool = |name| name == "README.md";
    let mut out = vec![repo().join("README.md")];
    under(&repo().join("docs"), |_| true, &mut out);
    under(&repo().join("sdk"), readme, &mut out);
    under(&repo().join("plugins"), readme, &mut out);
    out
}

/// The ```toml blocks of a Markdown text, each with its first line, dedented (a block
/// inside a list item is indented with it).
fn toml_blocks(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut open: Option<(usize, usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        match &mut open {
            None if trimmed.starts_with("```toml") => {
                open = Some((i + 1, line.len() - trimmed.len(), String::new()));
            }
            Some((first, _, block)) if trimmed.starts_with("```") => {
                out.push((*first + 1, std::mem::take(block)));
                open = None;
            }
            Some((_, indent, block)) => {
                let cut = line
                    .char_indices()
                    .take_while(|(j, c)| *j < *indent && c.is_whitespace())
                    .count();
                block.push_str(&line[cut..]);
                block.push('\n');
            }
            None => {}
        }
    }
    out
}

/// The sections a `capgate.toml` has (the JSON Schema's top-level properties).
fn sections() -> Vec<String> {
    capgate_config::schema::json_schema()["properties"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// Whether a parsed block is a `capgate.toml` fragment (not a scenario file or a
/// conformance case file, which the READMEs show too): every top-level key is a section.
fn is_config(doc: &Value, sections: &[String]) -> bool {
    doc.as_object()
        .is_some_and(|m| !m.is_empty() && m.keys().all(|k| sections.contains(k)))
}

/// What is wrong with a configuration fragment's shape: undeclared keys, what the JSON
/// Schema refuses, and `Config::parse`'s problems of a name, a type or a range.
fn shape_problems(file: &Path, text: &str, validator: &jsonschema::Validator) -> Vec<String> {
    let all = keys::all();
    let doc = match capgate_config::Located::parse(file, text.to_string()) {
        Ok(doc) => doc,
        Err(p) => return vec![format!("not TOML: {p:?}")],
    };
    let mut found = Vec::new();
    let mut undeclared = Vec::new();
    walk(&all, &doc.json, "", &mut undeclared);
    found.extend(undeclared.into_iter().map(|p| format!("{p}: no such key")));
    found.extend(
        validator
            .iter_errors(&doc.json)
            .map(|e| format!("{}: {e}", e.instance_path())),
    );
    if let Err(problems) = capgate_config::Config::parse(file, text.to_string()) {
        found.extend(
            problems
                .into_iter()
                .filter(|p| {
                    [
                        "unknown field",
                        "unknown section",
                        "unknown variant",
                        "invalid type",
                        "invalid value",
                        "missing field",
                        "must be between",
                        "must be at",
                    ]
                    .iter()
                    .any(|m| p.message.contains(m))
                })
                .map(|p| format!("{}: {}", p.key, p.message)),
        );
    }
    found
}

#[test]
fn every_readme_configuration_snippet_has_the_shape_check_accepts() {
    let validator =
        jsonschema::validator_for(&capgate_config::schema::json_schema()).expect("compiles");
    let sections = sections();
    let mut checked = Vec::new();
    let mut wrong = Vec::new();
    for readme in readmes() {
        let text = std::fs::read_to_string(&readme).expect("read the README");
        let name = readme
            .strip_prefix(repo())
            .unwrap_or(&readme)
            .display()
            .to_string();
        for (line, block) in toml_blocks(&text) {
            let Ok(doc) = capgate_config::Located::parse(&readme, block.clone()) else {
                wrong.push(format!("{name}:{line}: not TOML"));
                continue;
            };
            if !is_config(&doc.json, &sections) {
                continue;
            }
            for problem in shape_problems(&readme, &block, &validator) {
                wrong.push(format!("{name}:{line}: {problem}"));
            }
            checked.push(format!("{name}:{line}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    // The book and the READMEs hold dozens of snippets (the book's guides, the SDKs' policy
    // bindings); finding none would mean the extraction broke, not that they are sound.
    assert!(checked.len() >= 12, "only {checked:?}");
    for sdk in [
        "sdk/js/README.md",
        "sdk/python/README.md",
        "docs/guides/deploying.md",
        "docs/guides/policies-without-a-plugin.md",
    ] {
        assert!(
            checked.iter().any(|c| c.starts_with(sdk)),
            "no snippet of {sdk} checked: {checked:?}"
        );
    }
}

#[test]
fn a_snippet_with_a_key_check_refuses_is_caught() {
    let validator =
        jsonschema::validator_for(&capgate_config::schema::json_schema()).expect("compiles");
    // The shape the SDK READMEs once showed: a plugin's `config` belongs to its binding.
    let text = "[plugins.refund-limit]\npath = \"policy.wasm\"\nsha256 = \"00\"\nconfig = { maxAmount = 500 }\n";
    let found = shape_problems(Path::new("README.md"), text, &validator);
    assert!(
        found
            .iter()
            .any(|p| p.contains("/plugins/refund-limit/config")),
        "{found:#?}"
    );
    assert!(
        found.iter().any(|p| p.contains("unknown field `config`")),
        "{found:#?}"
    );
    let blocks = toml_blocks("1. item\n\n   ```toml\n   [store]\n   url = \"x\"\n   ```\n");
    assert_eq!(blocks, [(4, "[store]\nurl = \"x\"\n".to_string())]);
}
