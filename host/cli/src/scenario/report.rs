//! How `capgate test` reports: PASS/FAIL lines with a readable expected-vs-actual diff for
//! people, JUnit XML for CI.

use capgate_server::scenario::{Mismatch, Outcome};
use std::fmt::Write;
use std::time::Duration;

/// `N passed, M failed (T s)`.
pub fn summary(passed: usize, failed: usize, elapsed: Duration) -> String {
    format!(
        "{passed} passed, {failed} failed ({:.2} s)",
        elapsed.as_secs_f64()
    )
}

/// The text report: one line per scenario, in file order, each failure's diff under it.
pub fn text(outcomes: &[Outcome]) -> String {
    let width = outcomes
        .iter()
        .map(|o| o.scenario.name.chars().count())
        .max()
        .unwrap_or(4)
        .min(90);
    let mut out = String::new();
    for o in outcomes {
        let mark = if o.mismatches.is_empty() {
            "PASS"
        } else {
            "FAIL"
        };
        let _ = writeln!(
            out,
            "{mark}  {:<width$}  {:>9}",
            o.scenario.name,
            ms(o.duration)
        );
        if !o.mismatches.is_empty() {
            let _ = writeln!(
                out,
                "      at {}:{}",
                o.scenario.file.display(),
                o.scenario.line
            );
            out.push_str(&diff(&o.mismatches, "      "));
        }
    }
    out
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// Every mismatch as indented lines: `place: field`, then `expected:` and `actual:`; the
/// event list as a line diff (`-` expected only, `+` emitted only).
pub fn diff(mismatches: &[Mismatch], indent: &str) -> String {
    let mut out = String::new();
    for m in mismatches {
        match m {
            Mismatch::Field {
                place,
                field,
                expected,
                actual,
            } => {
                let _ = writeln!(out, "{indent}{place}: {field}");
                let _ = writeln!(out, "{indent}  expected: {expected}");
                let _ = writeln!(out, "{indent}  actual:   {actual}");
            }
            Mismatch::Events { expected, actual } => {
                let _ = writeln!(out, "{indent}events (- expected only, + emitted only):");
                for line in sequence_diff(expected, actual) {
                    let _ = writeln!(out, "{indent}  {line}");
                }
            }
            Mismatch::Error { place, message } => {
                let _ = writeln!(out, "{indent}{place}: error: {message}");
            }
        }
    }
    out
}

/// A line diff of two lists by their longest common subsequence.
fn sequence_diff(a: &[String], b: &[String]) -> Vec<String> {
    let (n, m) = (a.len(), b.len());
    // lcs[i][j]: the LCS length of a[i..] and b[j..] (event lists are short).
    let mut lcs = vec![vec![0usize; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            out.push(format!("  {}", a[i]));
            i += 1;
            j += 1;
        } else if i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1]) {
            out.push(format!("- {}", a[i]));
            i += 1;
        } else {
            out.push(format!("+ {}", b[j]));
            j += 1;
        }
    }
    out
}

/// `--output json`: one document, `{"ok", "passed", "failed", "durationMs", "scenarios",
/// "problems"}`, each scenario `{"name", "file", "line", "passed", "durationMs",
/// "mismatches"}` and each mismatch tagged by `kind` (`field`, `events` or `error`).
pub fn json(outcomes: &[Outcome], elapsed: Duration) -> serde_json::Value {
    let failed = outcomes.iter().filter(|o| !o.mismatches.is_empty()).count();
    let scenarios: Vec<serde_json::Value> = outcomes
        .iter()
        .map(|o| {
            serde_json::json!({
                "name": o.scenario.name,
                "file": o.scenario.file.display().to_string(),
                "line": o.scenario.line,
                "passed": o.mismatches.is_empty(),
                "durationMs": o.duration.as_secs_f64() * 1e3,
                "mismatches": o.mismatches.iter().map(mismatch_json).collect::<Vec<_>>(),
            })
        })
        .collect();
    serde_json::json!({
        "ok": failed == 0,
        "passed": outcomes.len() - failed,
        "failed": failed,
        "durationMs": elapsed.as_secs_f64() * 1e3,
        "scenarios": scenarios,
        "problems": [],
    })
}

/// `--output json` of a run refused before anything ran: its located problems (none when
/// nothing was selected).
pub fn json_refused(problems: &[capgate_config::located::Problem]) -> serde_json::Value {
    serde_json::json!({
        "ok": false,
        "passed": 0,
        "failed": 0,
        "durationMs": 0.0,
        "scenarios": [],
        "problems": problems
            .iter()
            .map(crate::commands::shared::problem_json)
            .collect::<Vec<_>>(),
    })
}

fn mismatch_json(m: &Mismatch) -> serde_json::Value {
    match m {
        Mismatch::Field {
            place,
            field,
            expected,
            actual,
        } => serde_json::json!({
            "kind": "field", "place": place, "field": field,
            "expected": expected, "actual": actual,
        }),
        Mismatch::Events { expected, actual } => serde_json::json!({
            "kind": "events", "expected": expected, "actual": actual,
        }),
        Mismatch::Error { place, message } => serde_json::json!({
            "kind": "error", "place": place, "message": message,
        }),
    }
}

/// JUnit XML: one `<testsuite>` per scenario file, one `<testcase>` per scenario, each
/// failure's diff as the `<failure>` text.
pub fn junit(outcomes: &[Outcome], elapsed: Duration) -> String {
    let failed = outcomes.iter().filter(|o| !o.mismatches.is_empty()).count();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"capgate test\" tests=\"{}\" failures=\"{failed}\" errors=\"0\" time=\"{:.3}\">",
        outcomes.len(),
        elapsed.as_secs_f64()
    );
    let mut files: Vec<&std::path::Path> = Vec::new();
    for o in outcomes {
        if !files.contains(&o.scenario.file.as_path()) {
            files.push(&o.scenario.file);
        }
    }
    for f in files {
        let cases: Vec<&Outcome> = outcomes.iter().filter(|o| o.scenario.file == f).collect();
        let suite = f.display().to_string();
        let time: f64 = cases.iter().map(|o| o.duration.as_secs_f64()).sum();
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"0\" time=\"{time:.3}\">",
            xml(&suite),
            cases.len(),
            cases.iter().filter(|o| !o.mismatches.is_empty()).count()
        );
        for o in cases {
            let _ = write!(
                out,
                "    <testcase name=\"{}\" classname=\"{}\" file=\"{}\" line=\"{}\" time=\"{:.3}\"",
                xml(&o.scenario.name),
                xml(&suite),
                xml(&suite),
                o.scenario.line,
                o.duration.as_secs_f64()
            );
            if o.mismatches.is_empty() {
                out.push_str("/>\n");
            } else {
                let _ = writeln!(
                    out,
                    ">\n      <failure message=\"{} mismatch(es)\" type=\"scenario\">{}</failure>\n    </testcase>",
                    o.mismatches.len(),
                    xml(&diff(&o.mismatches, ""))
                );
            }
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

/// Text for an XML attribute or element: the five markup characters escaped, and characters
/// XML 1.0 cannot carry at all (control characters but tab, newline and return, U+FFFE,
/// U+FFFF) replaced by U+FFFD.
fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn the_event_diff_marks_what_was_expected_only_and_what_was_emitted_only() {
        let d = sequence_diff(
            &list(&["requested", "approval_requested", "approved"]),
            &list(&["requested", "started", "completed"]),
        );
        assert_eq!(
            d,
            list(&[
                "  requested",
                "- approval_requested",
                "- approved",
                "+ started",
                "+ completed"
            ])
        );
    }

    #[test]
    fn xml_text_escapes_markup_and_replaces_what_xml_cannot_carry() {
        assert_eq!(
            xml("a<b & \"c\" 'd'>\u{1}\n"),
            "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;\u{FFFD}\n"
        );
    }
}
