//! cel: the policy that ships with capgate, configured with CEL expressions instead of code.
//!
//! Config: `{"rules": [{"when": "input.amount > 500", "stance": "require-approval",
//! "type": "manager", "expiresInMs": 900000, "reason": "Refund of $${input.amount} exceeds
//! $500"}, ...]}`. The rules are tried in order and the first whose `when` is `true`
//! decides; no match allows. In discovery (no call, `input` is `null`) only `allow` and
//! `hide` rules are tried, and an `allow` rule that cannot be evaluated there is passed
//! over: discovery asks only whether the capability is shown. `when` must evaluate to a bool: anything else, and every
//! evaluation error (a missing field, a type mismatch, an overflow), is a policy error, so
//! the call fails closed. `${EXPR}` inside `reason` (or `message` for `deny`) is replaced by
//! the value of the CEL expression EXPR, numbers printed as the host prints them.
//!
//! The variables are `phase`, `surface` (wire names: `invocation`, `aiSdk`, ...),
//! `capability` (`id`, `sideEffect`, `risk`, `tags`), `input` (`null` in discovery),
//! `actor` (`id`, `kind`, `attributes`), `context` and `approval` (`id`, `approverId`,
//! `approverKind`, or `null`). capgate checks the expressions when it loads the
//! configuration (`capgate check`), so a syntax error, a type error or a field the input
//! schema does not have is reported at its line and column before anything runs.

use capgate_plugin::{Decision, Phase, Policy, PolicyRequest, Value as Json, export_policy};
use cel::objects::Map;
use cel::{Context, Program, Value};
use serde::Deserialize;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    rules: Vec<RuleConfig>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RuleConfig {
    when: String,
    stance: Stance,
    #[serde(default, rename = "type")]
    approval_type: Option<String>,
    #[serde(default)]
    expires_in_ms: Option<u64>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    code: Option<String>,
}

#[derive(Deserialize, Clone, Copy, PartialEq)]
#[serde(rename_all = "kebab-case")]
enum Stance {
    Allow,
    Deny,
    Hide,
    RequireApproval,
}

/// A rule with its expressions parsed.
struct Rule {
    when: Program,
    stance: Stance,
    approval_type: Option<String>,
    expires_in_ms: Option<u64>,
    reason: Option<Template>,
    code: Option<String>,
}

/// Text with `${EXPR}` holes.
struct Template(Vec<Piece>);

enum Piece {
    Text(String),
    Expr(Program),
}

fn compile(config_json: &str) -> Result<Vec<Rule>, String> {
    let config: Config = serde_json::from_str(config_json).map_err(|e| format!("config: {e}"))?;
    config
        .rules
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let when = Program::compile(&r.when).map_err(|e| format!("rules[{i}].when: {e}"))?;
            let reason = r
                .reason
                .as_deref()
                .map(|t| template(t).map_err(|e| format!("rules[{i}].reason: {e}")))
                .transpose()?;
            if r.stance == Stance::RequireApproval && r.reason.as_deref().is_none_or(str::is_empty)
            {
                return Err(format!("rules[{i}]: require-approval needs a reason"));
            }
            Ok(Rule {
                when,
                stance: r.stance,
                approval_type: r.approval_type,
                expires_in_ms: r.expires_in_ms,
                reason,
                code: r.code,
            })
        })
        .collect()
}

fn template(text: &str) -> Result<Template, String> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        pieces.push(Piece::Text(rest[..at].to_string()));
        let after = &rest[at + 2..];
        let end = after.find('}').ok_or("`${` without its `}`")?;
        pieces.push(Piece::Expr(
            Program::compile(&after[..end]).map_err(|e| e.to_string())?,
        ));
        rest = &after[end + 1..];
    }
    pieces.push(Piece::Text(rest.to_string()));
    Ok(Template(pieces))
}

impl Template {
    fn render(&self, ctx: &Context) -> Result<String, String> {
        let mut out = String::new();
        for p in &self.0 {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Expr(e) => match e.execute(ctx).map_err(|e| e.to_string())? {
                    Value::String(s) => out.push_str(&s),
                    v => out.push_str(&to_json(&v).to_string()),
                },
            }
        }
        Ok(out)
    }
}

/// A JSON value as CEL sees it: integers stay integers (`int`, or `uint` above
/// `i64::MAX`), every other number is a `double`.
fn to_cel(v: Json) -> Value {
    match v {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(b),
        Json::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::Int(i),
            (None, Some(u)) => Value::UInt(u),
            _ => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(s) => Value::String(Arc::new(s)),
        Json::Array(a) => Value::List(Arc::new(a.into_iter().map(to_cel).collect())),
        Json::Object(o) => {
            let map: HashMap<String, Value> = o.into_iter().map(|(k, v)| (k, to_cel(v))).collect();
            Value::Map(Map::from(map))
        }
    }
}

/// A CEL value back as JSON, for `${…}` (numbers printed as serde_json prints them).
fn to_json(v: &Value) -> Json {
    match v {
        Value::Null => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::Int(i) => Json::from(*i),
        Value::UInt(u) => Json::from(*u),
        Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(Json::Number)
            .unwrap_or_else(|| Json::String(f.to_string())),
        Value::String(s) => Json::String(s.to_string()),
        Value::List(l) => Json::Array(l.iter().map(to_json).collect()),
        Value::Map(m) => Json::Object(
            m.map
                .iter()
                .map(|(k, v)| (key_text(k), to_json(v)))
                .collect(),
        ),
        other => Json::String(format!("{other:?}")),
    }
}

fn key_text(k: &cel::objects::Key) -> String {
    match k {
        cel::objects::Key::String(s) => s.to_string(),
        cel::objects::Key::Int(i) => i.to_string(),
        cel::objects::Key::Uint(u) => u.to_string(),
        cel::objects::Key::Bool(b) => b.to_string(),
    }
}

fn wire<T: serde::Serialize>(t: &T) -> Value {
    to_cel(serde_json::to_value(t).unwrap_or(Json::Null))
}

fn variables(request: &PolicyRequest) -> Result<Context<'static, 'static>, String> {
    let mut ctx = Context::with_env(STDLIB.with(Arc::clone));
    ctx.add_variable_from_value("phase", wire(&request.phase));
    ctx.add_variable_from_value("surface", wire(&request.surface));
    let c = &request.capability;
    ctx.add_variable_from_value(
        "capability",
        to_cel(serde_json::json!({
            "id": c.id,
            "sideEffect": c.side_effect,
            "risk": c.risk,
            "tags": c.tags,
        })),
    );
    let input = match request.input_json.as_deref() {
        None => Json::Null,
        Some(text) => serde_json::from_str(text).map_err(|e| format!("input: {e}"))?,
    };
    ctx.add_variable_from_value("input", to_cel(input));
    ctx.add_variable_from_value(
        "actor",
        to_cel(serde_json::json!({
            "id": request.actor.id,
            "kind": request.actor.kind,
            "attributes": request.actor.attributes(),
        })),
    );
    ctx.add_variable_from_value("context", to_cel(request.context()));
    let approval = request.approval.as_ref().map_or(Json::Null, |a| {
        serde_json::json!({"id": a.id, "approverId": a.approver_id, "approverKind": a.approver_kind})
    });
    ctx.add_variable_from_value("approval", to_cel(approval));
    Ok(ctx)
}

thread_local! {
    /// The rules of the last configuration seen, compiled. capgate runs its shipped
    /// plugins pooled: an instance serves many calls of one binding, and parsing the rules
    /// again on every call would be most of the call. It holds the binding's configuration
    /// only, never anything of a request.
    static COMPILED: RefCell<Option<(String, Rc<Vec<Rule>>)>> = const { RefCell::new(None) };
    /// CEL's standard functions, built once per instance instead of once per call.
    static STDLIB: Arc<cel::Env> = Arc::new(cel::Env::stdlib());
}

fn rules(config_json: &str) -> Result<Rc<Vec<Rule>>, String> {
    if let Some(rules) = COMPILED.with_borrow(|c| {
        c.as_ref()
            .filter(|(text, _)| text == config_json)
            .map(|(_, r)| Rc::clone(r))
    }) {
        return Ok(rules);
    }
    let rules = Rc::new(compile(config_json)?);
    COMPILED.set(Some((config_json.to_string(), Rc::clone(&rules))));
    Ok(rules)
}

struct Cel;

impl Policy for Cel {
    fn evaluate(request: PolicyRequest) -> Result<Decision, String> {
        let rules = rules(&request.config_json)?;
        let ctx = variables(&request)?;
        // In discovery there is no call, only the question whether the capability is
        // shown: deny and require-approval rules are about a call and are passed over, and
        // so is an allow rule that cannot be evaluated without one (it reads `input`,
        // `null` here): it could only have shown the capability. A hide rule that fails is
        // a policy error, which hides it (fails closed).
        let discovery = request.phase == Phase::Discovery;
        for (i, rule) in rules.iter().enumerate() {
            if discovery && matches!(rule.stance, Stance::Deny | Stance::RequireApproval) {
                continue;
            }
            match rule.when.execute(&ctx) {
                Ok(Value::Bool(false)) => continue,
                Ok(Value::Bool(true)) => {}
                _ if discovery && rule.stance == Stance::Allow => continue,
                Ok(other) => {
                    return Err(format!(
                        "rules[{i}].when is {:?}, not a bool",
                        other.type_of()
                    ));
                }
                Err(e) => return Err(format!("rules[{i}].when: {e}")),
            }
            let reason = rule
                .reason
                .as_ref()
                .map(|t| t.render(&ctx))
                .transpose()
                .map_err(|e| format!("rules[{i}].reason: {e}"))?;
            return Ok(match rule.stance {
                Stance::Allow => Decision::Allow,
                Stance::Hide => Decision::Hide,
                Stance::Deny => Decision::Deny {
                    code: rule.code.clone(),
                    message: reason,
                },
                Stance::RequireApproval => Decision::RequireApproval {
                    reason: reason.unwrap_or_default(),
                    approval_type: rule.approval_type.clone(),
                    expires_in_ms: rule.expires_in_ms,
                },
            });
        }
        Ok(Decision::Allow)
    }
}

export_policy!(Cel);
