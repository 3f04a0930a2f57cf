//! The load-time check of a `plugin = "cel"` binding: its `config` has the right shape,
//! every expression parses, and every expression types against the variables the
//! component gives it, `input` typed by the input schema of each capability the policy is
//! attached to. A problem names the string it is in (a JSON pointer into `config`) and the
//! character inside it, so `capgate check` can say `file:line:column`.
//!
//! The typing is CEL's where a schema says what a value is and permissive (`dyn`) where it
//! does not: it refuses what would fail on every call (a field the schema does not have,
//! `"500" > input.amount`, `!input.amount`, a `when` that is not a bool), never what could
//! succeed.

// By job: this file is the check and the warnings over a config's rules, `shape` the
// config's shape (and the `${…}` holes of a `reason`), `typer` the typing of an expression,
// `tests` the check's tests.
mod shape;
mod typer;

use crate::{Attached, Found, Problem};
use cel::{ParseErrors, Program};
use serde_json::Value;

pub use shape::holes;
use shape::shape;

/// The keys of one rule, as the component reads them.
pub const RULE_KEYS: &[&str] = &["when", "stance", "type", "expiresInMs", "reason", "code"];
/// The stances a rule may take.
pub const STANCES: &[&str] = &["allow", "deny", "hide", "require-approval"];
/// The variables an expression may read.
pub const VARIABLES: &[&str] = &[
    "phase",
    "surface",
    "capability",
    "input",
    "actor",
    "context",
    "approval",
];

/// Check a `cel` binding's `config` against every capability it is attached to (none: the
/// expressions are still parsed and typed, with `input` untyped). Each problem once.
pub fn check(config: &Value, capabilities: &[Attached<'_>]) -> Vec<Found> {
    let mut out = Vec::new();
    let exprs = shape(config, &mut out);
    let untyped = [Attached {
        id: "",
        schema: None,
    }];
    let capabilities = if capabilities.is_empty() {
        &untyped[..]
    } else {
        capabilities
    };
    for (pointer, base, source, must_be_bool) in exprs {
        let program = match Program::compile(&source) {
            Ok(p) => p,
            Err(e) => {
                let (offset, message) = syntax(&source, &e);
                out.push(Found {
                    pointer,
                    offset: Some(base + offset),
                    problem: Problem::Syntax { message },
                });
                continue;
            }
        };
        for cap in capabilities {
            for (id, problem) in typer::problems(&program, cap, must_be_bool) {
                let at = program
                    .source_info()
                    .offset_for(id)
                    .map_or(0, |(start, _)| start as usize);
                let found = Found {
                    pointer: pointer.clone(),
                    offset: Some(base + at.min(source.chars().count())),
                    problem,
                };
                if !out.contains(&found) {
                    out.push(found);
                }
            }
        }
    }
    out
}

/// The rules of a `cel` config, with their index (nothing for a config of another shape).
fn rules(config: &Value) -> impl Iterator<Item = (usize, &Value)> {
    config
        .get("rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
}

/// Whether a CEL expression compiles and reads the variable `input`.
fn reads_input(expr: &str) -> bool {
    Program::compile(expr).is_ok_and(|p| p.references().has_variable("input"))
}

/// The `hide` rules of a `cel` config: (index, its `when`).
fn hide_rules(config: &Value) -> impl Iterator<Item = (usize, &str)> {
    rules(config)
        .filter(|(_, r)| r.get("stance").and_then(Value::as_str) == Some("hide"))
        .filter_map(|(i, r)| Some((i, r.get("when")?.as_str()?)))
}

/// Whether a `cel` config has a `hide` rule: such a binding runs in discovery too unless
/// its `phases` say otherwise, so that what it hides is left out of the capability
/// listings as well as refused when called.
pub fn hides(config: &Value) -> bool {
    hide_rules(config).next().is_some()
}

/// The `hide` rules of a `cel` config whose `when` reads `input`, for a binding that runs
/// in discovery, where `input` is `null`: such a rule fails there (or never matches), so
/// it cannot hide the capability from listings, and a failed policy hides it from every
/// caller. Located at the first `input` of the expression.
pub fn hide_reads_input(config: &Value) -> Vec<Found> {
    hide_rules(config)
        .filter(|(_, when)| reads_input(when))
        .map(|(i, when)| Found {
            pointer: format!("/rules/{i}/when"),
            offset: when.find("input").map(|b| when[..b].chars().count()),
            problem: Problem::Discovery {
                message: "this hide rule reads `input`, which is null in discovery (where the binding also runs): there it cannot decide, and a failed policy hides the capability from every caller. Decide a hide on `actor`, `capability` or `context`, or give the binding `phases` without discovery".into(),
            },
        })
        .collect()
}

/// The rules of a `cel` config whose `reason` has a `${…}` hole that reads `input`,
/// located at that hole's `${` (see [`crate::reason_warnings`]).
pub fn reason_reads_input(config: &Value) -> Vec<Found> {
    rules(config)
        .filter_map(|(i, rule)| {
            let reason = rule.get("reason")?.as_str()?;
            let (offset, _) = holes(reason)
                .ok()?
                .into_iter()
                .find(|(_, expr)| reads_input(expr))?;
            Some(Found {
                pointer: format!("/rules/{i}/reason"),
                offset: Some(offset - 2),
                problem: crate::reason_reads_input("input"),
            })
        })
        .collect()
}

/// A parse error's character offset in `source` and its message (the first error).
fn syntax(source: &str, errors: &ParseErrors) -> (usize, String) {
    let Some(first) = errors.errors.first() else {
        return (0, "does not parse".into());
    };
    let (line, column) = (
        usize::try_from(first.pos.0).unwrap_or(1).max(1),
        usize::try_from(first.pos.1).unwrap_or(1).max(1),
    );
    let mut offset = 0;
    for (i, l) in source.split('\n').enumerate() {
        if i + 1 == line {
            offset += (column - 1).min(l.chars().count());
            break;
        }
        offset += l.chars().count() + 1;
    }
    (offset.min(source.chars().count()), first.msg.clone())
}

#[cfg(test)]
mod tests;
