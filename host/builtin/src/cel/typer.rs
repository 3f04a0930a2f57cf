//! The typing of one expression against the variables the component gives it, `input`
//! typed by a capability's input schema: CEL's types where a schema says what a value is,
//! `dyn` where it does not.

use super::VARIABLES;
use crate::{Attached, Problem};
use cel::Program;
use cel::common::ast::{CallExpr, Expr, IdedExpr, LiteralValue, operators};
use serde_json::Value;
use std::collections::BTreeMap;

/// The type problems of `program` for capability `cap` (its input typed by its schema),
/// each with the id of the expression it is at; with `must_be_bool`, a program that is not
/// a bool is one.
pub(super) fn problems(
    program: &Program,
    cap: &Attached<'_>,
    must_be_bool: bool,
) -> Vec<(u64, Problem)> {
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
    typer.problems
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
