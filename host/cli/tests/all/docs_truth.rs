//! The docs tell the truth: every boundary row of `SECURITY.md` (and every invariant of
//! `docs/invariants.md`) names a test that exists, every `capgate …` command line the
//! README, the book (`docs/`, at any depth) and `SECURITY.md` show names a real subcommand
//! with real flags, and every link among them resolves, anchors included.

use super::common;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Every file with extension `ext` under `dir`, at any depth, sorted.
fn files_with(dir: &Path, ext: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, ext, out);
            } else if path.extension().is_some_and(|e| e == ext) {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, ext, &mut out);
    out.sort();
    out
}

/// Every `.rs` file under `host/`, with its text.
fn sources(root: &Path) -> Vec<(PathBuf, String)> {
    files_with(&root.join("host"), "rs")
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(&p).ok().map(|t| (p, t)))
        .collect()
}

/// Every `.md` file under `dir`, at any depth, sorted.
fn markdown_files(dir: &Path) -> Vec<PathBuf> {
    files_with(dir, "md")
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
            // The release archive's binary (docs/getting-started/installing.md).
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
    docs.extend(markdown_files(&root.join("docs")));
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

/// The anchor GitHub and mdBook give a heading: lower-case, alphanumerics, `-` and `_`
/// kept, each space a `-`, everything else (backticks, punctuation) dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

/// The anchors of a markdown text's headings (outside fences); a repeated heading's later
/// anchors get `-1`, `-2`, … as on GitHub and in mdBook.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if fenced || hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let mut anchor = base.clone();
        let mut n = 0;
        while out.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        out.insert(anchor);
    }
    out
}

/// The targets of a markdown text's links and images (`](target)`), each with its line,
/// outside fences and inline code; the title of `](target "title")` is left out.
fn link_targets(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Outside inline code: the even pieces between backticks.
        let prose: Vec<&str> = line.split('`').step_by(2).collect();
        let prose = prose.join(" ");
        for (i, _) in prose.match_indices("](") {
            let rest = &prose[i + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            let target = rest[..end].split_whitespace().next().unwrap_or("");
            let target = target.trim_start_matches('<').trim_end_matches('>');
            out.push((n + 1, target.to_string()));
        }
    }
    out
}

/// The `{{#include PATH}}` paths of an mdBook page (`PATH:anchor` and line ranges cut off).
fn includes(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        for (i, _) in line.match_indices("{{#include ") {
            let rest = &line[i + "{{#include ".len()..];
            let path = rest.split("}}").next().unwrap_or("").trim();
            let path = path.split(':').next().unwrap_or(path);
            out.push((n + 1, path.to_string()));
        }
    }
    out
}

#[test]
fn every_link_in_the_book_and_readme_resolves() {
    let root = common::root();
    let docs_dir = root.join("docs");
    let book = markdown_files(&docs_dir);
    let mut files = vec![root.join("README.md"), root.join("SECURITY.md")];
    files.extend(book.iter().cloned());
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).expect("the doc exists");
        let name = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .display()
            .to_string();
        let dir = file.parent().expect("a file has a directory");
        for (line, target) in link_targets(&text) {
            if target.is_empty()
                || ["http://", "https://", "mailto:"]
                    .iter()
                    .any(|s| target.starts_with(*s))
            {
                continue;
            }
            checked += 1;
            let (path, anchor) = target.split_once('#').unwrap_or((target.as_str(), ""));
            let resolved = if path.is_empty() {
                file.clone()
            } else {
                dir.join(path)
            };
            if !resolved.exists() {
                problems.push(format!("{name}:{line}: `{target}`: no file {path}"));
                continue;
            }
            if anchor.is_empty() || resolved.extension().is_none_or(|e| e != "md") {
                continue;
            }
            let target_text = std::fs::read_to_string(&resolved).unwrap_or_default();
            if !anchors(&target_text).contains(anchor) {
                problems.push(format!(
                    "{name}:{line}: `{target}`: no heading with the anchor #{anchor}"
                ));
            }
        }
        for (line, path) in includes(&text) {
            checked += 1;
            if !dir.join(&path).is_file() {
                problems.push(format!(
                    "{name}:{line}: {{{{#include {path}}}}}: no such file"
                ));
            }
        }
    }
    // Every page of the book is in its table of contents.
    let summary = std::fs::read_to_string(docs_dir.join("SUMMARY.md")).expect("docs/SUMMARY.md");
    let listed: BTreeSet<PathBuf> = link_targets(&summary)
        .into_iter()
        .map(|(_, target)| PathBuf::from(target.split('#').next().unwrap_or("")))
        .collect();
    for page in &book {
        let relative = page.strip_prefix(&docs_dir).unwrap_or(page).to_path_buf();
        if relative != Path::new("SUMMARY.md") && !listed.contains(&relative) {
            problems.push(format!(
                "docs/{}: not linked from docs/SUMMARY.md",
                relative.display()
            ));
        }
    }
    assert!(checked > 100, "only {checked} links found");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn headings_become_the_anchors_github_and_mdbook_give_them() {
    assert_eq!(
        slug("Exporting the trail: `[audit.export.NAME]` and `capgate audit export`"),
        "exporting-the-trail-auditexportname-and-capgate-audit-export"
    );
    assert_eq!(slug("Stage-11 error mapping"), "stage-11-error-mapping");
    let found = anchors("# A\n```sh\n# not a heading\n```\n## A\n#no\n");
    assert_eq!(
        found.into_iter().collect::<Vec<_>>(),
        ["a".to_string(), "a-1".to_string()]
    );
    assert_eq!(
        link_targets("see [x](a.md#b) and `[y](not-a-link)`, ![i](p.png \"t\")"),
        [(1, "a.md#b".to_string()), (1, "p.png".to_string())]
    );
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

/// Issue 57's mismatches that live in prose, each pinned to what the code does: the SDK
/// READMEs name the contract `wit/capgate.wit` declares; the TypeScript client has a README
/// that the README and the book link; the Kubernetes README's NetworkPolicy guidance names
/// every service `capgate serve` must reach (the identity provider it will not start
/// without, the export and webhook sinks), and says what replicas share through Postgres
/// (rate limits and MCP sessions) rather than that they are per replica.
#[test]
fn the_first_steps_prose_says_what_the_code_does() {
    let root = common::root();
    let read =
        |p: &str| std::fs::read_to_string(root.join(p)).unwrap_or_else(|e| panic!("read {p}: {e}"));
    let wit = read("wit/capgate.wit");
    let package = wit
        .lines()
        .find_map(|l| l.trim().strip_prefix("package "))
        .map(|p| p.trim_end_matches(';').to_string())
        .expect("wit/capgate.wit declares its package");
    let mut problems = Vec::new();
    for readme in ["sdk/README.md", "sdk/js/README.md", "sdk/python/README.md"] {
        let text = read(readme);
        let first = text
            .split("capgate:plugin@")
            .nth(1)
            .map(|rest| {
                let v: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_digit() || *c == '.')
                    .collect();
                format!("capgate:plugin@{}", v.trim_end_matches('.'))
            })
            .unwrap_or_default();
        if first != package {
            problems.push(format!(
                "{readme}: names `{first}` as its contract, wit/capgate.wit is `{package}`"
            ));
        }
    }
    if !root.join("clients/ts/README.md").is_file() {
        problems.push("clients/ts has no README".into());
    }
    for doc in ["README.md", "docs/getting-started/walkthrough-over-http.md"] {
        if !read(doc).contains("clients/ts/README.md") {
            problems.push(format!("{doc} does not link clients/ts/README.md"));
        }
    }
    let k8s = read("deploy/kubernetes/README.md");
    for needed in [
        "identity provider",
        "[audit.export.NAME]",
        "webhook",
        "jwksUrl",
    ] {
        if !k8s.contains(needed) {
            problems.push(format!(
                "deploy/kubernetes/README.md's NetworkPolicy guidance does not name `{needed}`"
            ));
        }
    }
    let flat = k8s.split_whitespace().collect::<Vec<_>>().join(" ");
    for shared in [
        "MCP sessions (`capgate_mcp_sessions`",
        "`[gateway.rateLimit]` quotas",
    ] {
        let said = flat.split_once("Replicas share").is_some_and(|(_, rest)| {
            rest.split("What stays per replica")
                .next()
                .is_some_and(|s| s.contains(shared))
        });
        if !said {
            problems.push(format!(
                "deploy/kubernetes/README.md does not say replicas share {shared} through Postgres"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
