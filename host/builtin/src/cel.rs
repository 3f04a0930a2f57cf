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

use crate::{Attached, Found, Problem};
use cel::common::ast::{CallExpr, Expr, IdedExpr, LiteralValue, operators};
use cel::{ParseErrors, Program};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

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
            let mut typer = Typer {
                capability: cap.id,
                input: cap.schema.map_or(Ty::Dyn, |s| Ty::of_schema(s, "input")),
                scope: Vec::new(),
                problems: Vec::new(),
            };
            let ty = typer.expr(program.expression());
            if must_be_bool && !matches!(ty, Ty::Bool | Ty::Dyn) {
                typer.problems.push((
                    program.expression().id,
                    Problem::Type {
                        message: format!("`when` must be a bool; this is {}", ty.name()),
                    },
                ));
            }
            for (id, problem) in typer.problems {
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

/// Check the configuration's shape; the expressions to compile: (pointer, offset of the
/// expression inside that string, its source, whether it must be a bool).
fn shape(config: &Value, out: &mut Vec<Found>) -> Vec<(String, usize, String, bool)> {
    let mut exprs = Vec::new();
    let mut bad = |pointer: String, message: String| {
        out.push(Found {
            pointer,
            offset: None,
            problem: Problem::Config { message },
        })
    };
    let Some(top) = config.as_object() else {
        bad(
            String::new(),
            "must be a table with `rules` (e.g. config = { rules = [{ when = \"input.amount > 500\", stance = \"deny\" }] })".into(),
        );
        return exprs;
    };
    for key in top.keys().filter(|k| *k != "rules") {
        bad(
            format!("/{key}"),
            "unknown key (a `cel` policy's config has only `rules`)".into(),
        );
    }
    let Some(rules) = top.get("rules").and_then(Value::as_array) else {
        bad(
            "/rules".into(),
            "must be an array of rules, tried in order: [{ when = \"…\", stance = \"…\" }, …]"
                .into(),
        );
        return exprs;
    };
    for (i, rule) in rules.iter().enumerate() {
        let at = format!("/rules/{i}");
        let Some(rule) = rule.as_object() else {
            bad(
                at,
                "must be a table: { when = \"…\", stance = \"…\" }".into(),
            );
            continue;
        };
        rule_shape(&at, rule, &mut bad, &mut exprs);
    }
    exprs
}

fn rule_shape(
    at: &str,
    rule: &Map<String, Value>,
    bad: &mut impl FnMut(String, String),
    exprs: &mut Vec<(String, usize, String, bool)>,
) {
    for key in rule.keys().filter(|k| !RULE_KEYS.contains(&k.as_str())) {
        bad(
            format!("{at}/{key}"),
            format!("unknown key (a rule has {})", RULE_KEYS.join(", ")),
        );
    }
    match rule.get("when") {
        Some(Value::String(w)) => exprs.push((format!("{at}/when"), 0, w.clone(), true)),
        _ => bad(
            format!("{at}/when"),
            "must be a CEL expression (a string) that is true when the rule applies".into(),
        ),
    }
    let stance = rule.get("stance").and_then(Value::as_str);
    if !stance.is_some_and(|s| STANCES.contains(&s)) {
        bad(
            format!("{at}/stance"),
            format!("must be one of {}", STANCES.join(", ")),
        );
    }
    for key in ["type", "code"] {
        if rule
            .get(key)
            .is_some_and(|v| !v.is_string() && !v.is_null())
        {
            bad(format!("{at}/{key}"), "must be a string".into());
        }
    }
    if rule
        .get("expiresInMs")
        .is_some_and(|v| !v.is_u64() && !v.is_null())
    {
        bad(
            format!("{at}/expiresInMs"),
            "must be a whole number of milliseconds (0 or more)".into(),
        );
    }
    match rule.get("reason") {
        Some(Value::String(r)) => match holes(r) {
            Ok(holes) => {
                for (offset, expr) in holes {
                    exprs.push((format!("{at}/reason"), offset, expr, false));
                }
            }
            Err(offset) => {
                bad(
                    format!("{at}/reason"),
                    format!("`${{` at character {offset} has no closing `}}`"),
                );
            }
        },
        Some(Value::Null) | None => {
            if stance == Some("require-approval") {
                bad(
                    format!("{at}/reason"),
                    "a require-approval rule needs a reason (what the approver is asked)".into(),
                );
            }
        }
        Some(_) => bad(format!("{at}/reason"), "must be a string".into()),
    }
}

/// The `${EXPR}` holes of a template: (character offset of EXPR, EXPR). `Err(offset)` for
/// an unclosed hole. The component reads templates the same way.
pub fn holes(template: &str) -> Result<Vec<(usize, String)>, usize> {
    let mut out = Vec::new();
    let mut rest = template;
    let mut consumed = 0; // characters before `rest`
    while let Some(at) = rest.find("${") {
        let start = consumed + rest[..at].chars().count() + 2;
        let after = &rest[at + 2..];
        let Some(end) = after.find('}') else {
            return Err(start - 2);
        };
        out.push((start, after[..end].to_string()));
        consumed = start + after[..end].chars().count() + 1;
        rest = &after[end + 1..];
    }
    Ok(out)
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

/// What a value is known to be.
#[derive(Debug, Clone, PartialEq)]
enum Ty {
    /// Anything (no schema says).
    Dyn,
    Null,
    Bool,
    Int,
    UInt,
    Double,
    /// A JSON Schema `number`: int or double.
    Num,
    String,
    Bytes,
    List(Box<Ty>),
    /// A map whose keys are not known.
    Map(Box<Ty>),
    /// A map with known fields: `path` is how expressions spell it (`input.refund`);
    /// `open` when fields beyond `fields` are allowed.
    Object {
        path: String,
        fields: BTreeMap<String, Ty>,
        open: bool,
    },
}

impl Ty {
    fn name(&self) -> &'static str {
        match self {
            Ty::Dyn => "dyn",
            Ty::Null => "null",
            Ty::Bool => "a bool",
            Ty::Int => "an int",
            Ty::UInt => "a uint",
            Ty::Double => "a double",
            Ty::Num => "a number",
            Ty::String => "a string",
            Ty::Bytes => "bytes",
            Ty::List(_) => "a list",
            Ty::Map(_) | Ty::Object { .. } => "a map",
        }
    }

    fn numeric(&self) -> bool {
        matches!(self, Ty::Int | Ty::UInt | Ty::Double | Ty::Num)
    }

    /// The type a JSON Schema describes (`dyn` for anything it does not pin down).
    fn of_schema(schema: &Value, path: &str) -> Ty {
        let Some(s) = schema.as_object() else {
            return Ty::Dyn;
        };
        let ty = match s.get("type") {
            Some(Value::String(t)) => t.as_str(),
            _ if s.contains_key("properties") => "object",
            _ => return Ty::Dyn,
        };
        match ty {
            "integer" => Ty::Int,
            "number" => Ty::Num,
            "string" => Ty::String,
            "boolean" => Ty::Bool,
            "null" => Ty::Null,
            "array" => Ty::List(Box::new(
                s.get("items")
                    .map_or(Ty::Dyn, |i| Ty::of_schema(i, &format!("{path}[]"))),
            )),
            "object" => match s.get("properties").and_then(Value::as_object) {
                Some(props) => Ty::Object {
                    path: path.to_string(),
                    fields: props
                        .iter()
                        .map(|(k, v)| (k.clone(), Ty::of_schema(v, &format!("{path}.{k}"))))
                        .collect(),
                    // Only an explicit `additionalProperties` (true or a schema) lets an
                    // expression read a field the schema does not name.
                    open: s
                        .get("additionalProperties")
                        .is_some_and(|a| a.is_object() || a == &Value::Bool(true)),
                },
                None => Ty::Map(Box::new(Ty::Dyn)),
            },
            _ => Ty::Dyn,
        }
    }

    fn closed(path: &str, fields: &[(&str, Ty)]) -> Ty {
        Ty::Object {
            path: path.into(),
            fields: fields
                .iter()
                .map(|(k, t)| (k.to_string(), t.clone()))
                .collect(),
            open: false,
        }
    }
}

struct Typer<'a> {
    capability: &'a str,
    input: Ty,
    /// Comprehension variables, innermost last.
    scope: Vec<(String, Ty)>,
    problems: Vec<(u64, Problem)>,
}

fn type_error(message: String) -> Problem {
    Problem::Type { message }
}

impl Typer<'_> {
    fn ident(&mut self, id: u64, name: &str) -> Ty {
        if let Some((_, t)) = self.scope.iter().rev().find(|(n, _)| n == name) {
            return t.clone();
        }
        match name {
            "phase" | "surface" => Ty::String,
            "input" => self.input.clone(),
            "capability" => Ty::closed(
                "capability",
                &[
                    ("id", Ty::String),
                    ("sideEffect", Ty::String),
                    ("risk", Ty::String),
                    ("tags", Ty::List(Box::new(Ty::String))),
                ],
            ),
            "actor" => Ty::closed(
                "actor",
                &[
                    ("id", Ty::String),
                    ("kind", Ty::String),
                    ("attributes", Ty::Dyn),
                ],
            ),
            "context" | "approval" => Ty::Dyn,
            // Type names (`type(x) == int`).
            "int" | "uint" | "double" | "string" | "bool" | "bytes" | "list" | "map"
            | "null_type" | "type" | "dyn" => Ty::Dyn,
            other => {
                self.problems.push((
                    id,
                    type_error(format!(
                        "undeclared variable `{other}` (the variables are {})",
                        VARIABLES.join(", ")
                    )),
                ));
                Ty::Dyn
            }
        }
    }

    fn field(&mut self, id: u64, on: Ty, field: &str) -> Ty {
        match on {
            Ty::Dyn | Ty::Null => Ty::Dyn,
            Ty::Map(v) => *v,
            Ty::Object { path, fields, open } => match fields.get(field) {
                Some(t) => t.clone(),
                None if open => Ty::Dyn,
                None => {
                    let problem = if path.starts_with("input") {
                        Problem::UnknownField {
                            capability: self.capability.to_string(),
                            field: format!("{path}.{field}"),
                            known: fields.keys().cloned().collect(),
                        }
                    } else {
                        type_error(format!(
                            "`{path}` has no field `{field}` (its fields: {})",
                            fields.keys().cloned().collect::<Vec<_>>().join(", ")
                        ))
                    };
                    self.problems.push((id, problem));
                    Ty::Dyn
                }
            },
            other => {
                self.problems.push((
                    id,
                    type_error(format!(
                        "`.{field}` of {}, which has no fields",
                        other.name()
                    )),
                ));
                Ty::Dyn
            }
        }
    }

    fn expr(&mut self, e: &IdedExpr) -> Ty {
        match &e.expr {
            Expr::Unspecified => Ty::Dyn,
            Expr::Literal(l) => match l {
                LiteralValue::Boolean(_) => Ty::Bool,
                LiteralValue::Bytes(_) => Ty::Bytes,
                LiteralValue::Double(_) => Ty::Double,
                LiteralValue::Int(_) => Ty::Int,
                LiteralValue::Null => Ty::Null,
                LiteralValue::String(_) => Ty::String,
                LiteralValue::UInt(_) => Ty::UInt,
            },
            Expr::Ident(name) => self.ident(e.id, name),
            Expr::Select(s) => {
                let on = self.expr(&s.operand);
                let t = self.field(e.id, on, &s.field);
                if s.test { Ty::Bool } else { t }
            }
            Expr::List(l) => {
                let items: Vec<Ty> = l.elements.iter().map(|x| self.expr(x)).collect();
                Ty::List(Box::new(common(&items)))
            }
            Expr::Map(m) => {
                for entry in &m.entries {
                    if let cel::common::ast::EntryExpr::MapEntry(me) = &entry.expr {
                        self.expr(&me.key);
                        self.expr(&me.value);
                    }
                }
                Ty::Map(Box::new(Ty::Dyn))
            }
            Expr::Struct(_) => Ty::Dyn,
            Expr::Comprehension(c) => {
                let range = self.expr(&c.iter_range);
                let (first, second) = match &range {
                    Ty::List(t) => (Ty::Int, (**t).clone()),
                    Ty::Map(v) => (Ty::String, (**v).clone()),
                    Ty::Object { .. } => (Ty::String, Ty::Dyn),
                    Ty::Dyn => (Ty::Dyn, Ty::Dyn),
                    other => {
                        self.problems.push((
                            c.iter_range.id,
                            type_error(format!("cannot iterate over {}", other.name())),
                        ));
                        (Ty::Dyn, Ty::Dyn)
                    }
                };
                let depth = self.scope.len();
                self.expr(&c.accu_init);
                match &c.iter_var2 {
                    Some(v2) => {
                        self.scope.push((c.iter_var.clone(), first));
                        self.scope.push((v2.clone(), second));
                    }
                    None => {
                        let elem = if matches!(range, Ty::List(_)) {
                            second
                        } else {
                            first
                        };
                        self.scope.push((c.iter_var.clone(), elem));
                    }
                }
                self.scope.push((c.accu_var.clone(), Ty::Dyn));
                self.expr(&c.loop_cond);
                self.expr(&c.loop_step);
                let result = self.expr(&c.result);
                self.scope.truncate(depth);
                result
            }
            Expr::Call(call) => self.call(e.id, call),
        }
    }

    fn call(&mut self, id: u64, call: &CallExpr) -> Ty {
        let target = call.target.as_ref().map(|t| self.expr(t));
        let args: Vec<Ty> = call.args.iter().map(|a| self.expr(a)).collect();
        let wrong = |this: &mut Self, message: String| {
            this.problems.push((id, type_error(message)));
        };
        let bool_ok = |t: &Ty| matches!(t, Ty::Bool | Ty::Dyn);
        match (call.func_name.as_str(), args.as_slice()) {
            (operators::LOGICAL_AND | operators::LOGICAL_OR, [a, b]) => {
                for t in [a, b] {
                    if !bool_ok(t) {
                        let op = if call.func_name == operators::LOGICAL_AND {
                            "&&"
                        } else {
                            "||"
                        };
                        wrong(self, format!("`{op}` needs bools, not {}", t.name()));
                    }
                }
                Ty::Bool
            }
            (operators::LOGICAL_NOT, [a]) => {
                if !bool_ok(a) {
                    wrong(self, format!("`!` needs a bool, not {}", a.name()));
                }
                Ty::Bool
            }
            (operators::NEGATE, [a]) => {
                if !(a.numeric() || *a == Ty::Dyn) {
                    wrong(self, format!("`-` needs a number, not {}", a.name()));
                }
                a.clone()
            }
            (operators::EQUALS | operators::NOT_EQUALS, [a, b]) => {
                if !comparable(a, b, true) {
                    wrong(self, format!("{} is never equal to {}", a.name(), b.name()));
                }
                Ty::Bool
            }
            (
                operators::LESS
                | operators::LESS_EQUALS
                | operators::GREATER
                | operators::GREATER_EQUALS,
                [a, b],
            ) => {
                if !comparable(a, b, false) {
                    wrong(
                        self,
                        format!("cannot order {} against {}", a.name(), b.name()),
                    );
                }
                Ty::Bool
            }
            (operators::ADD, [a, b]) => match (a, b) {
                (Ty::Dyn, t) | (t, Ty::Dyn) => t.clone(),
                (x, y) if x.numeric() && y.numeric() => arith(x, y),
                (Ty::String, Ty::String) => Ty::String,
                (Ty::Bytes, Ty::Bytes) => Ty::Bytes,
                (Ty::List(x), Ty::List(_)) => Ty::List(x.clone()),
                (x, y) => {
                    wrong(self, format!("cannot add {} and {}", x.name(), y.name()));
                    Ty::Dyn
                }
            },
            (
                operators::SUBSTRACT | operators::MULTIPLY | operators::DIVIDE | operators::MODULO,
                [a, b],
            ) => match (a, b) {
                (Ty::Dyn, t) | (t, Ty::Dyn) => t.clone(),
                (x, y) if x.numeric() && y.numeric() => arith(x, y),
                (x, y) => {
                    wrong(
                        self,
                        format!(
                            "arithmetic needs numbers, not {} and {}",
                            x.name(),
                            y.name()
                        ),
                    );
                    Ty::Dyn
                }
            },
            (operators::CONDITIONAL, [c, a, b]) => {
                if !bool_ok(c) {
                    wrong(
                        self,
                        format!("the condition of `?:` must be a bool, not {}", c.name()),
                    );
                }
                if a == b { a.clone() } else { Ty::Dyn }
            }
            (operators::INDEX, [on, key]) => match on {
                Ty::List(t) => {
                    if !(key.numeric() || *key == Ty::Dyn) {
                        wrong(
                            self,
                            format!("a list index must be a number, not {}", key.name()),
                        );
                    }
                    (**t).clone()
                }
                Ty::Map(v) => (**v).clone(),
                Ty::Object { .. } => match call.args.get(1).map(|k| &k.expr) {
                    Some(Expr::Literal(LiteralValue::String(s))) => {
                        self.field(id, on.clone(), s.inner())
                    }
                    _ => Ty::Dyn,
                },
                Ty::Dyn | Ty::Null => Ty::Dyn,
                other => {
                    wrong(self, format!("cannot index {}", other.name()));
                    Ty::Dyn
                }
            },
            (operators::IN, [_, container]) => {
                if !matches!(
                    container,
                    Ty::List(_) | Ty::Map(_) | Ty::Object { .. } | Ty::Dyn | Ty::Null
                ) {
                    wrong(
                        self,
                        format!(
                            "`in` needs a list or a map on its right, not {}",
                            container.name()
                        ),
                    );
                }
                Ty::Bool
            }
            ("size", _) => Ty::Int,
            ("int", _) => Ty::Int,
            ("uint", _) => Ty::UInt,
            ("double", _) => Ty::Double,
            ("string", _) => Ty::String,
            ("contains" | "startsWith" | "endsWith" | "matches", [_]) => {
                if let Some(t) = &target
                    && !matches!(t, Ty::String | Ty::Dyn)
                {
                    wrong(
                        self,
                        format!("`{}` needs a string, not {}", call.func_name, t.name()),
                    );
                }
                Ty::Bool
            }
            _ => Ty::Dyn,
        }
    }
}

fn arith(a: &Ty, b: &Ty) -> Ty {
    if a == b { a.clone() } else { Ty::Num }
}

fn common(items: &[Ty]) -> Ty {
    match items.split_first() {
        Some((first, rest)) if rest.iter().all(|t| t == first) => first.clone(),
        _ => Ty::Dyn,
    }
}

/// Can `a` and `b` be compared (for equality when `eq`)?
fn comparable(a: &Ty, b: &Ty, eq: bool) -> bool {
    match (a, b) {
        (Ty::Dyn, _) | (_, Ty::Dyn) => true,
        (Ty::Null, _) | (_, Ty::Null) => eq,
        (x, y) if x.numeric() && y.numeric() => true,
        (Ty::String, Ty::String) | (Ty::Bool, Ty::Bool) | (Ty::Bytes, Ty::Bytes) => true,
        (Ty::List(_), Ty::List(_)) => eq,
        (Ty::Map(_) | Ty::Object { .. }, Ty::Map(_) | Ty::Object { .. }) => eq,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refund_schema() -> Value {
        json!({
            "type": "object",
            "properties": {"orderId": {"type": "string"}, "amount": {"type": "number"}},
            "required": ["orderId", "amount"],
            "additionalProperties": false
        })
    }

    fn run(when: &str) -> Vec<Found> {
        let schema = refund_schema();
        check(
            &json!({"rules": [{"when": when, "stance": "deny"}]}),
            &[Attached {
                id: "orders.refund",
                schema: Some(&schema),
            }],
        )
    }

    #[test]
    fn a_hide_rule_is_found_and_one_that_reads_the_input_is_located() {
        let config = json!({"rules": [
            {"when": "input.amount > 5", "stance": "deny"},
            {"when": "actor.attributes.tier != 'gold'", "stance": "hide"},
            {"when": "actor.kind == 'agent' && input.amount > 5", "stance": "hide"},
        ]});
        assert!(hides(&config));
        assert!(!hides(
            &json!({"rules": [{"when": "true", "stance": "deny"}]})
        ));
        let found = hide_reads_input(&config);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].pointer, "/rules/2/when");
        assert_eq!(found[0].offset, Some(25));
    }

    #[test]
    fn a_reason_that_reads_the_input_is_located_at_its_hole() {
        let config = json!({"rules": [
            {"when": "true", "stance": "require-approval", "reason": "Refund of $${input.amount}"},
            {"when": "true", "stance": "deny", "reason": "Agents may not (${actor.kind})"},
            {"when": "true", "stance": "deny", "reason": "${actor.id} asked: ${input.reason}"},
            {"when": "true", "stance": "deny", "reason": "no holes, input named in words"},
        ]});
        let found = reason_reads_input(&config);
        let at: Vec<_> = found
            .iter()
            .map(|f| (f.pointer.as_str(), f.offset))
            .collect();
        assert_eq!(
            at,
            [("/rules/0/reason", Some(11)), ("/rules/2/reason", Some(19))]
        );
        assert!(matches!(found[0].problem, Problem::ReasonReadsInput { .. }));
    }

    #[test]
    fn a_well_typed_rule_has_no_problem() {
        assert_eq!(
            run(
                "phase != 'discovery' && input.amount > 500 && !('manager' in actor.attributes.roles)"
            ),
            vec![]
        );
        assert_eq!(run("[1, 2].all(x, x < input.amount)"), vec![]);
    }

    #[test]
    fn a_syntax_error_is_located_at_its_character() {
        let found = run("input.amount > > 500");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].pointer, "/rules/0/when");
        assert_eq!(found[0].offset, Some(15));
        assert!(matches!(found[0].problem, Problem::Syntax { .. }));
        let found = run("input.amount >\n  500 +");
        assert_eq!(found[0].offset, Some(22), "{found:?}");
    }

    #[test]
    fn a_type_error_is_located_at_its_operator() {
        let found = run("input.amount > '500'");
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            matches!(&found[0].problem, Problem::Type { message } if message == "cannot order a number against a string"),
            "{found:?}"
        );
        assert_eq!(found[0].offset, Some(13));
        assert!(matches!(
            run("input.amount")[0].problem,
            Problem::Type { .. }
        ));
        assert!(matches!(
            run("inptu.amount > 1")[0].problem,
            Problem::Type { .. }
        ));
    }

    #[test]
    fn a_field_the_input_schema_lacks_is_named_with_the_capability() {
        let found = run("input.amount > 500 || input.amout > 5");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].offset, Some(27));
        assert_eq!(
            found[0].problem.to_string(),
            "`input.amout` is not in the input schema of capability `orders.refund` (its fields there: amount, orderId)"
        );
        // Read through `has()` and `[]` too.
        assert_eq!(run("has(input.total)").len(), 1);
        assert_eq!(run("input['total'] > 1").len(), 1);
    }

    #[test]
    fn reason_holes_are_checked_at_their_place() {
        let schema = refund_schema();
        let found = check(
            &json!({"rules": [{"when": "true", "stance": "require-approval", "reason": "Refund of $${input.amout}"}]}),
            &[Attached {
                id: "orders.refund",
                schema: Some(&schema),
            }],
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].pointer, "/rules/0/reason");
        assert_eq!(found[0].offset, Some(18));
        assert_eq!(
            holes("a ${x} b ${y}"),
            Ok(vec![(4, "x".into()), (11, "y".into())])
        );
        assert_eq!(holes("a ${x"), Err(2));
    }

    #[test]
    fn the_shape_of_the_config_is_checked() {
        let found = check(
            &json!({"rules": [{"when": 1, "stance": "maybe", "expiresInMs": -1, "extra": 1}], "x": 1}),
            &[],
        );
        let pointers: Vec<&str> = found.iter().map(|f| f.pointer.as_str()).collect();
        assert_eq!(
            pointers,
            [
                "/x",
                "/rules/0/extra",
                "/rules/0/when",
                "/rules/0/stance",
                "/rules/0/expiresInMs"
            ]
        );
        assert!(
            !check(
                &json!({"rules": [{"when": "true", "stance": "require-approval"}]}),
                &[]
            )
            .is_empty()
        );
        assert!(!check(&Value::Null, &[]).is_empty());
    }
}
