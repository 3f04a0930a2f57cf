//! The docs tell the truth: every boundary row of `SECURITY.md` (and every invariant of
//! `docs/invariants.md`) names a test that exists, and every `capgate …` command line the
//! README, `docs/` and `SECURITY.md` show names a real subcommand with real flags.

use super::common;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Every `.rs` file under `host/`, with its text.
fn sources(root: &Path) -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs")
                && let Ok(text) = std::fs::read_to_string(&path)
            {
                out.push((path, text));
            }
        }
    }
    let mut out = Vec::new();
    walk(&root.join("host"), &mut out);
    out
}

/// The backticked test references of a table cell: `module::…::name`, or with `bare` (the
/// invariants page) also a lone `snake_case_name`. Crate names, types and prose in backticks
/// are not references: they have a `-`, start upper-case, or (bare) have no `_`.
fn test_refs(cell: &str, bare: bool) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .filter(|t| {
            (t.contains("::") || (bare && t.contains('_')))
                && t.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                && t.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_:*".contains(c))
        })
        .map(str::to_owned)
        .collect()
}

/// Whether `module::…::name` names a test function (or, with `*`, a module) in the tree:
/// a file whose stem (or folder, for `mod.rs`) is the first module, or that lies inside the
/// first module's folder (`openapi::tests::x` in `openapi/tests.rs`), and that defines
/// `fn name(`. A bare `name` resolves to any file that defines it.
fn resolves(reference: &str, sources: &[(PathBuf, String)]) -> bool {
    if !reference.contains("::") {
        return sources
            .iter()
            .any(|(_, text)| text.contains(&format!("fn {reference}(")));
    }
    let parts: Vec<&str> = reference.split("::").collect();
    let (Some(first), Some(last)) = (parts.first(), parts.last()) else {
        return false;
    };
    sources.iter().any(|(path, text)| {
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let parent = path
            .parent()
            .and_then(|p| p.file_name())
            .and_then(|s| s.to_str())
            .unwrap_or("");
        let module_matches = stem == *first || parent == *first;
        module_matches && (*last == "*" || text.contains(&format!("fn {last}(")))
    })
}

#[test]
fn every_security_row_names_a_test_that_exists() {
    let root = common::root();
    let sources = sources(&root);
    let mut problems = Vec::new();
    let mut checked = 0;
    for doc in ["SECURITY.md", "docs/invariants.md"] {
        let text = std::fs::read_to_string(root.join(doc)).expect("the doc exists");
        for (n, line) in text.lines().enumerate() {
            let cells: Vec<&str> = line.trim().trim_matches('|').split('|').collect();
            // Table rows with a "pinned by" / "tests" column: the last one. Headers and
            // separators are skipped.
            if !line.starts_with('|') || cells.len() < 3 || line.starts_with("|---") {
                continue;
            }
            let last = cells[cells.len() - 1].trim();
            if ["pinned by", "tested"].contains(&last) {
                continue;
            }
            let refs = test_refs(last, doc == "docs/invariants.md");
            if refs.is_empty() {
                problems.push(format!("{doc}:{}: the row names no test: {line}", n + 1));
            }
            for r in refs {
                checked += 1;
                if !resolves(&r, &sources) {
                    problems.push(format!("{doc}:{}: `{r}` names no test in host/", n + 1));
                }
            }
        }
    }
    assert!(
        checked > 40,
        "only {checked} test references found: is the table format unchanged?"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Split a shell line into words (quotes kept together, a `#` comment dropped).
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quote = None;
    let mut in_word = false;
    for c in line.chars() {
        match (quote, c) {
            (None, '#') if !in_word => break,
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (Some(q), c) if c == q => quote = None,
            (None, c) if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (_, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        out.push(word);
    }
    out
}

/// The `capgate …` command lines in the fenced shell blocks of a markdown file.
fn command_lines(text: &str) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    let mut fenced = false;
    let mut shell = false;
    for (n, line) in text.lines().enumerate() {
        let t = line.trim_start();
        if let Some(lang) = t.strip_prefix("```") {
            if fenced {
                fenced = false;
            } else {
                fenced = true;
                shell = matches!(lang.trim(), "sh" | "console" | "bash" | "shell");
            }
            continue;
        }
        if !fenced || !shell {
            continue;
        }
        let t = t.strip_prefix("$ ").unwrap_or(t);
        let rest = t
            .strip_prefix("capgate ")
            // The release archive's binary (README "Installing").
            .or_else(|| t.strip_prefix("bin/capgate "))
            .or_else(|| t.strip_prefix("cargo run -p capgate -- "))
            .or_else(|| t.strip_prefix("cargo run --release -p capgate -- "));
        if let Some(rest) = rest {
            // A pipeline's first command only.
            let first = rest.split(" | ").next().unwrap_or(rest);
            out.push((n + 1, words(first)));
        }
    }
    out
}

fn help(path: &[String]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_capgate"))
        .args(path)
        .arg("--help")
        .output()
        .expect("capgate runs");
    assert!(
        out.status.success(),
        "`capgate {} --help` failed: {}",
        path.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether a help text lists `flag` (followed by anything but more of a flag's name).
fn mentions_flag(help: &str, flag: &str) -> bool {
    help.match_indices(flag).any(|(i, _)| {
        help[i + flag.len()..]
            .chars()
            .next()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '-'))
    })
}

/// The subcommand names a help text lists under `Commands:`.
fn subcommands(help: &str) -> BTreeSet<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

#[test]
fn every_capgate_command_line_in_the_docs_names_real_subcommands_and_flags() {
    let root = common::root();
    let mut docs = vec![root.join("README.md"), root.join("SECURITY.md")];
    if let Ok(entries) = std::fs::read_dir(root.join("docs")) {
        docs.extend(
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "md")),
        );
    }
    let mut problems = Vec::new();
    let mut checked = 0;
    for doc in docs {
        let text = std::fs::read_to_string(&doc).expect("the doc exists");
        let name = doc
            .strip_prefix(&root)
            .unwrap_or(&doc)
            .display()
            .to_string();
        for (line, words) in command_lines(&text) {
            checked += 1;
            let mut path: Vec<String> = Vec::new();
            let mut text = help(&path);
            let mut rest = words.iter();
            for w in rest.by_ref() {
                if w.starts_with('-') {
                    break;
                }
                if subcommands(&text).contains(w) {
                    path.push(w.clone());
                    text = help(&path);
                } else {
                    break;
                }
            }
            if path.is_empty() {
                problems.push(format!(
                    "{name}:{line}: `capgate {}` names no subcommand",
                    words.join(" ")
                ));
                continue;
            }
            if !subcommands(&text).is_empty() {
                problems.push(format!(
                    "{name}:{line}: `capgate {}` stops at a command group",
                    path.join(" ")
                ));
            }
            for w in &words {
                let flag = w.split('=').next().unwrap_or(w);
                if flag.starts_with("--") && !mentions_flag(&text, flag) {
                    problems.push(format!(
                        "{name}:{line}: `capgate {}` has no flag `{flag}`",
                        path.join(" ")
                    ));
                }
            }
        }
    }
    assert!(checked > 20, "only {checked} command lines found");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_shell_splitter_keeps_quotes_and_drops_comments() {
    assert_eq!(
        words(r#"keys hash "$NEW  KEY" --x 'a b' # what it stores"#),
        ["keys", "hash", "$NEW  KEY", "--x", "a b"]
    );
    assert_eq!(
        test_refs(
            "`capgate-core` `a_b::c_d` `Type::x` `x::*` `lone_name`",
            false
        ),
        ["a_b::c_d", "x::*"]
    );
    assert_eq!(test_refs("`check` `lone_name`", true), ["lone_name"]);
}
