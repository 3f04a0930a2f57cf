//! cedar: the policy that ships with capgate, configured with a Cedar policy set instead of
//! code.
//!
//! Config: `{"policies": "<Cedar text>"}` (capgate inlines `policiesFile`, after checking
//! its `sha256`, before the component sees it; `actorAttributes` and `contextAttributes`
//! only type the schema `capgate check` validates against).
//!
//! When capgate checks a configuration it gives the component, once, the same config with
//! `schema`: the Cedar schema (JSON form) it generated from the capabilities the policy is
//! attached to. The component then validates the set against it in Cedar's strict mode, so
//! the check runs the very parser and validator the calls run, inside the sandbox. Problems
//! come back as the call's error, `{"cedarProblems": [{"kind", "offset", "message"}]}`
//! (`offset` in characters into `policies`), for capgate to place in the file; a set that
//! validates answers allow, and the check decides nothing.
//!
//! Each call is one Cedar request:
//! - principal `Actor::"<actor id>"` with `kind` and `attributes` (a record);
//! - action `Action::"<capability id>"`;
//! - resource `Capability::"<capability id>"` with `sideEffect`, `risk` and `tags`;
//! - context `{phase, surface, input, context, approval}` (`input` is absent in discovery,
//!   `context` when the caller sent none, `approval` before one is granted).
//!
//! JSON maps to Cedar as strings, bools, sets (arrays), records (objects, a `null` member
//! left out) and `decimal` for every number: Cedar has no floating point, so a number
//! with more than four decimals or beyond ±922337203685477 is a policy error, never
//! rounded.
//!
//! Cedar decides: a satisfied `forbid` wins over every `permit`, and with no satisfied
//! `permit` the request is denied (publicly without a message: the private code
//! `no_permit_applies` says why). A satisfied `forbid` is a `deny` unless its
//! `@stance("hide")` or `@stance("require-approval")` says otherwise; several satisfied
//! forbids merge as the pipeline merges decisions (deny > hide > require-approval), the
//! first deny in the text giving the message. Satisfied require-approval forbids all count,
//! as separate policies would: every approval type, every reason, the shortest expiry. A
//! decision carries one approval type, so capgate binds a set with several
//! require-approval forbids as one policy per forbid (`approvalSlot` of `approvalSlots` in
//! the config it gives), each answering for one of them, and the pipeline merges them; see
//! [`Slot`]. `@reason("…")` (the deny message or the approval reason, with
//! `${context.input.amount}`-style holes), `@type`, `@expiresInMs` and `@code` fill in the
//! decision. An error in any policy (a missing attribute, a type mismatch) is a policy
//! error: Cedar itself would skip the erroring policy, which for a `forbid` means allowing
//! what it was written to stop.
//!
//! In discovery (no call, no input) only `@stance("hide")` forbids count: one satisfied
//! hides the capability, an error in one fails closed (hides it too), and every other
//! policy is left out, satisfied or not, erroring or not.

use capgate_plugin::{Decision, Phase, Policy, PolicyRequest, Value as Json, export_policy};
use cedar_policy::{
    AuthorizationError, Authorizer, Context, Decision as Verdict, Effect, Entities, Entity,
    EntityId, EntityTypeName, EntityUid, PolicyId, PolicySet, Request, RestrictedExpression,
    Schema, ValidationMode, Validator,
};
use miette::Diagnostic;
use serde::Deserialize;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::str::FromStr;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    #[serde(default)]
    policies: Option<String>,
    /// Read and inlined by the host; a component that still sees it was given a config the
    /// host did not resolve.
    #[serde(default)]
    policies_file: Option<String>,
    #[serde(default)]
    sha256: Option<String>,
    /// Schema only (`capgate check`).
    #[serde(default)]
    #[allow(dead_code)]
    actor_attributes: Option<serde_json::Map<String, Json>>,
    /// Schema only (`capgate check`).
    #[serde(default)]
    #[allow(dead_code)]
    context_attributes: Option<serde_json::Map<String, Json>>,
    /// Given by capgate when it checks the configuration, never in a deployment's file.
    #[serde(default)]
    schema: Option<Json>,
    /// Given by capgate when it binds a set with several `require-approval` forbids (never
    /// in a deployment's file): this binding answers for the satisfied one at this place
    /// (0-based, in text order), the last slot for every one from its place on.
    #[serde(default)]
    approval_slot: Option<usize>,
    /// How many slots capgate bound the set as (one policy each, merged by the pipeline).
    #[serde(default)]
    approval_slots: Option<usize>,
}

/// A problem of the policy set, located in it.
struct Problem {
    kind: &'static str,
    /// Characters into the policy text.
    offset: Option<usize>,
    message: String,
}

/// The problems as the call's error: JSON capgate reads back and places in the file.
fn problems(list: Vec<Problem>) -> String {
    serde_json::json!({"cedarProblems": list.into_iter().map(|p| serde_json::json!({
        "kind": p.kind, "offset": p.offset, "message": p.message,
    })).collect::<Vec<_>>()})
    .to_string()
}

/// The character offset of a diagnostic's first label in `text`.
fn offset(text: &str, d: &dyn Diagnostic) -> Option<usize> {
    let byte = d.labels()?.next()?.offset();
    text.get(..byte.min(text.len())).map(|t| t.chars().count())
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Stance {
    // Ordered as the pipeline merges: the smallest wins.
    Deny,
    Hide,
    RequireApproval,
}

/// What a `forbid` policy decides when it is satisfied.
struct Forbid {
    /// Its place in the text (0 = first).
    index: usize,
    stance: Stance,
    reason: Option<Template>,
    approval_type: Option<String>,
    expires_in_ms: Option<u64>,
    code: Option<String>,
}

struct Compiled {
    policies: PolicySet,
    forbids: HashMap<PolicyId, Forbid>,
    /// Compiled from a config with `schema`: capgate is checking the configuration, and
    /// the call answers allow once the set validates, deciding nothing.
    check_only: bool,
    /// Which satisfied require-approval forbids this binding answers for (see [`Slot`]).
    slot: Slot,
}

/// The part of a require-approval verdict one binding gives. A policy's decision carries
/// one approval type (`capgate:plugin/policy@0.1.0`), so capgate binds a set with several
/// `require-approval` forbids as that many policies, one slot each, and the pipeline
/// merges their requirements as it merges any policies' (every type, every reason, the
/// shortest expiry). Slot `index` answers for the satisfied require-approval forbid at
/// that place in text order, the last slot for all from its place on; a slot with none
/// allows.
#[derive(Clone, Copy)]
struct Slot {
    index: usize,
    of: usize,
}

/// Text with `${path}` holes, a path being dot-separated names from `principal`,
/// `resource`, `action` or `context`.
struct Template(Vec<Piece>);

enum Piece {
    Text(String),
    Path(Vec<String>),
}

fn template(text: &str) -> Result<Template, String> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        pieces.push(Piece::Text(rest[..at].to_string()));
        let after = &rest[at + 2..];
        let end = after.find('}').ok_or("`${` without its `}`")?;
        let path: Vec<String> = after[..end].trim().split('.').map(str::to_string).collect();
        if !matches!(
            path.first().map(String::as_str),
            Some("principal" | "resource" | "action" | "context")
        ) {
            return Err(format!(
                "`${{{}}}` does not start with principal, resource, action or context",
                &after[..end]
            ));
        }
        pieces.push(Piece::Path(path));
        rest = &after[end + 1..];
    }
    pieces.push(Piece::Text(rest.to_string()));
    Ok(Template(pieces))
}

impl Template {
    fn render(&self, view: &Json) -> Result<String, String> {
        let mut out = String::new();
        for p in &self.0 {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Path(path) => {
                    let mut v = view;
                    for seg in path {
                        v = match v {
                            Json::Object(o) => o.get(seg),
                            Json::Array(a) => seg.parse::<usize>().ok().and_then(|i| a.get(i)),
                            _ => None,
                        }
                        .ok_or_else(|| {
                            format!("`${{{}}}` is not in the request", path.join("."))
                        })?;
                    }
                    match v {
                        Json::String(s) => out.push_str(s),
                        other => out.push_str(&other.to_string()),
                    }
                }
            }
        }
        Ok(out)
    }
}

fn compile(config_json: &str) -> Result<Compiled, String> {
    let config: Config = serde_json::from_str(config_json).map_err(|e| format!("config: {e}"))?;
    if config.policies_file.is_some() || config.sha256.is_some() {
        return Err("config: `policiesFile` is read by capgate when it loads the configuration; this component was given it unresolved".into());
    }
    let text = config
        .policies
        .ok_or("config: `policies` (the Cedar policy set) is missing")?;
    let policies = PolicySet::from_str(&text).map_err(|errors| {
        problems(
            errors
                .iter()
                .map(|e| Problem {
                    kind: "syntax",
                    offset: offset(&text, e),
                    message: e.to_string(),
                })
                .collect(),
        )
    })?;
    let mut ordered: Vec<_> = policies.policies().collect();
    let index = |p: &cedar_policy::Policy| {
        p.id()
            .to_string()
            .strip_prefix("policy")
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(usize::MAX)
    };
    ordered.sort_by_key(|p| index(p));
    let mut forbids = HashMap::new();
    let mut wrong = Vec::new();
    for p in ordered {
        // Annotations are located at the first `@key` of the text (Cedar keeps no place for
        // them): close enough to find, and each message names the policy.
        let mut bad = |key: &str, message: String| {
            wrong.push(Problem {
                kind: "annotation",
                offset: text
                    .find(&format!("@{key}"))
                    .map(|b| text[..b].chars().count()),
                message: format!(
                    "{} (the policy at position {}): {message}",
                    p.id(),
                    index(p)
                ),
            });
        };
        let note = |key: &str| p.annotation(key).map(str::to_string);
        let stance = match (p.effect(), p.annotation("stance")) {
            (Effect::Permit, None) => None,
            (Effect::Permit, Some(_)) => {
                bad("stance", "@stance is for forbid policies".into());
                None
            }
            (Effect::Forbid, None | Some("deny")) => Some(Stance::Deny),
            (Effect::Forbid, Some("hide")) => Some(Stance::Hide),
            (Effect::Forbid, Some("require-approval")) => Some(Stance::RequireApproval),
            (Effect::Forbid, Some(other)) => {
                bad(
                    "stance",
                    format!("@stance(\"{other}\") is not deny, hide or require-approval"),
                );
                None
            }
        };
        let reason = match note("reason").map(|t| template(&t)).transpose() {
            Ok(r) => r,
            Err(e) => {
                bad("reason", e);
                None
            }
        };
        let expires_in_ms = match note("expiresInMs")
            .map(|t| t.parse::<u64>().map_err(|_| t))
            .transpose()
        {
            Ok(ms) => ms,
            Err(t) => {
                bad(
                    "expiresInMs",
                    format!("@expiresInMs(\"{t}\") is not a whole number of milliseconds"),
                );
                None
            }
        };
        let Some(stance) = stance else { continue };
        if stance == Stance::RequireApproval && p.annotation("reason").is_none() {
            bad("stance", "require-approval needs a @reason".into());
        }
        forbids.insert(
            p.id().clone(),
            Forbid {
                index: index(p),
                stance,
                reason,
                approval_type: note("type"),
                expires_in_ms,
                code: note("code"),
            },
        );
    }
    if !wrong.is_empty() {
        return Err(problems(wrong));
    }
    let slot = match (config.approval_slot, config.approval_slots) {
        (None, None) => Slot { index: 0, of: 1 },
        (Some(index), Some(of)) if index < of => Slot { index, of },
        _ => {
            return Err(
                "config: `approvalSlot` must be below `approvalSlots`, and each needs the other"
                    .into(),
            );
        }
    };
    let check_only = config.schema.is_some();
    if let Some(schema) = config.schema {
        let schema = Schema::from_json_value(schema)
            .map_err(|e| format!("the schema capgate generated does not load: {e}"))?;
        let result = Validator::new(schema).validate(&policies, ValidationMode::Strict);
        let invalid: Vec<Problem> = result
            .validation_errors()
            .map(|e| Problem {
                kind: "validation",
                offset: offset(&text, e),
                message: e.to_string(),
            })
            .collect();
        if !invalid.is_empty() {
            return Err(problems(invalid));
        }
    }
    Ok(Compiled {
        policies,
        forbids,
        check_only,
        slot,
    })
}

/// A JSON number as a Cedar `decimal` literal, if it is one exactly.
fn decimal(n: &serde_json::Number) -> Option<String> {
    let text = n.to_string();
    if text.contains(['e', 'E']) {
        return None;
    }
    let (int, frac) = text.split_once('.').unwrap_or((&text, "0"));
    (frac.len() <= 4).then(|| format!("{int}.{frac}"))
}

fn value(v: &Json, at: &str) -> Result<RestrictedExpression, String> {
    Ok(match v {
        Json::Bool(b) => RestrictedExpression::new_bool(*b),
        Json::String(s) => RestrictedExpression::new_string(s.clone()),
        Json::Number(n) => RestrictedExpression::new_decimal(decimal(n).ok_or_else(|| {
            format!(
                "{at} is {n}, which a Cedar decimal cannot hold (four decimals, ±922337203685477)"
            )
        })?),
        Json::Array(items) => RestrictedExpression::new_set(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| value(v, &format!("{at}[{i}]")))
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Json::Object(o) => {
            RestrictedExpression::new_record(members(o, at)?).map_err(|e| format!("{at}: {e}"))?
        }
        Json::Null => return Err(format!("{at} is null, which Cedar has no value for")),
    })
}

/// An object's members as record fields, `null` members left out.
fn members(
    o: &serde_json::Map<String, Json>,
    at: &str,
) -> Result<Vec<(String, RestrictedExpression)>, String> {
    o.iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| Ok((k.clone(), value(v, &format!("{at}.{k}"))?)))
        .collect()
}

fn uid(ty: &str, id: &str) -> Result<EntityUid, String> {
    let ty = EntityTypeName::from_str(ty).map_err(|e| e.to_string())?;
    Ok(EntityUid::from_type_name_and_id(ty, EntityId::new(id)))
}

fn wire<T: serde::Serialize>(t: &T) -> Json {
    serde_json::to_value(t).unwrap_or(Json::Null)
}

/// The request as JSON, in the shape the policies see it (for `${…}` holes) and from which
/// the Cedar values are built.
struct View {
    principal: Json,
    resource: Json,
    context: serde_json::Map<String, Json>,
}

fn view(request: &PolicyRequest) -> Result<View, String> {
    let c = &request.capability;
    let mut context = serde_json::Map::new();
    context.insert("phase".into(), wire(&request.phase));
    context.insert("surface".into(), wire(&request.surface));
    if let Some(text) = request.input_json.as_deref() {
        let input: Json = serde_json::from_str(text).map_err(|e| format!("input: {e}"))?;
        context.insert("input".into(), input);
    }
    context.insert("context".into(), request.context());
    if let Some(a) = &request.approval {
        context.insert(
            "approval".into(),
            serde_json::json!({"id": a.id, "approverId": a.approver_id, "approverKind": a.approver_kind}),
        );
    }
    Ok(View {
        principal: serde_json::json!({
            "id": request.actor.id,
            "kind": request.actor.kind,
            "attributes": match request.actor.attributes() {
                Json::Null => Json::Object(serde_json::Map::new()),
                other => other,
            },
        }),
        resource: serde_json::json!({
            "id": c.id, "sideEffect": c.side_effect, "risk": c.risk, "tags": c.tags,
        }),
        context,
    })
}

fn attrs(v: &Json, at: &str) -> Result<HashMap<String, RestrictedExpression>, String> {
    match v {
        Json::Object(o) => Ok(members(o, at)?
            .into_iter()
            .filter(|(k, _)| k != "id")
            .collect()),
        _ => Ok(HashMap::new()),
    }
}

fn decide(compiled: &Compiled, request: &PolicyRequest) -> Result<Decision, String> {
    let v = view(request)?;
    let principal = uid("Actor", &request.actor.id)?;
    let resource = uid("Capability", &request.capability.id)?;
    let action = uid("Action", &request.capability.id)?;
    let entities = Entities::from_entities(
        [
            Entity::new(
                principal.clone(),
                attrs(&v.principal, "principal")?,
                HashSet::new(),
            )
            .map_err(|e| format!("principal: {e}"))?,
            Entity::new(
                resource.clone(),
                attrs(&v.resource, "resource")?,
                HashSet::new(),
            )
            .map_err(|e| format!("resource: {e}"))?,
        ],
        None,
    )
    .map_err(|e| e.to_string())?;
    let context = Context::from_pairs(members(&v.context, "context")?)
        .map_err(|e| format!("context: {e}"))?;
    let cedar_request =
        Request::new(principal, action, resource, context, None).map_err(|e| e.to_string())?;
    let response = Authorizer::new().is_authorized(&cedar_request, &compiled.policies, &entities);
    // In discovery there is no call, only the question whether the capability is shown:
    // only `hide` forbids count (a deny or an approval is about a call, and a policy that
    // reads `context.input`, absent in discovery, would otherwise fail every listing).
    let discovery = request.phase == Phase::Discovery;
    let counts = |id: &PolicyId| {
        !discovery
            || compiled
                .forbids
                .get(id)
                .is_some_and(|f| f.stance == Stance::Hide)
    };
    let errors: Vec<String> = response
        .diagnostics()
        .errors()
        .filter(|e| match e {
            AuthorizationError::PolicyEvaluationError(e) => counts(e.policy_id()),
        })
        .map(ToString::to_string)
        .collect();
    if !errors.is_empty() {
        return Err(errors.join("; "));
    }
    if discovery {
        let hidden = response
            .diagnostics()
            .reason()
            .filter(|id| counts(id))
            .any(|id| compiled.forbids.contains_key(id));
        return Ok(if hidden {
            Decision::Hide
        } else {
            Decision::Allow
        });
    }
    if response.decision() == Verdict::Allow {
        return Ok(Decision::Allow);
    }
    let mut satisfied: Vec<&Forbid> = response
        .diagnostics()
        .reason()
        .filter_map(|id| compiled.forbids.get(id))
        .collect();
    satisfied.sort_by_key(|f| (f.stance, f.index));
    let Some(first) = satisfied.first() else {
        // Cedar's default deny. What the model is told names nothing of the set; the
        // private code (audit and logs) says why.
        return Ok(Decision::Deny {
            code: Some("no_permit_applies".into()),
            message: None,
        });
    };
    let whole = || {
        serde_json::json!({
            "principal": v.principal,
            "resource": v.resource,
            "action": {"id": request.capability.id},
            "context": v.context,
        })
    };
    match first.stance {
        Stance::Deny => Ok(Decision::Deny {
            code: first.code.clone(),
            message: first
                .reason
                .as_ref()
                .map(|t| t.render(&whole()))
                .transpose()?,
        }),
        Stance::Hide => Ok(Decision::Hide),
        Stance::RequireApproval => {
            // Every satisfied forbid is a require-approval one here (the stricter stances
            // sort first); this slot's share of them.
            let Slot { index, of } = compiled.slot;
            let mine = if index + 1 < of {
                satisfied.get(index..=index)
            } else {
                satisfied.get(index..)
            }
            .unwrap_or_default();
            approval(mine, &whole())
        }
    }
}

/// One decision for `forbids` (satisfied require-approval forbids, in text order): allow
/// for none; else every reason (joined), the shortest expiry and their approval type, which
/// must be the same for all (or none for all). A decision carries one type; asking for
/// fewer types than the set names would let one approver decide what it gave to several,
/// so forbids of different types in one slot are a policy error (capgate binds a set with
/// a slot per require-approval forbid, so they never share one).
fn approval(forbids: &[&Forbid], whole: &Json) -> Result<Decision, String> {
    let Some(first) = forbids.first() else {
        return Ok(Decision::Allow);
    };
    if let Some(other) = forbids
        .iter()
        .find(|f| f.approval_type != first.approval_type)
    {
        return Err(format!(
            "the policies at positions {} and {} require approvals of different types ({} and {}), which one decision cannot carry; bind the set through the capgate configuration, which gives each its own",
            first.index,
            other.index,
            first.approval_type.as_deref().unwrap_or("untyped"),
            other.approval_type.as_deref().unwrap_or("untyped"),
        ));
    }
    let mut reasons = Vec::with_capacity(forbids.len());
    for f in forbids {
        if let Some(t) = &f.reason {
            reasons.push(t.render(whole)?);
        }
    }
    Ok(Decision::RequireApproval {
        reason: reasons.join("; "),
        approval_type: first.approval_type.clone(),
        expires_in_ms: forbids.iter().filter_map(|f| f.expires_in_ms).min(),
    })
}

/// How many compiled configurations an instance keeps. capgate runs its shipped plugins
/// pooled, and the bindings of one plugin share its instances: a set bound as several
/// slots (see [`Slot`]), or several `cedar` bindings, would otherwise parse their sets
/// again on nearly every call.
const KEPT: usize = 8;

thread_local! {
    /// The policy sets of the last configurations seen, parsed, most recent first. Parsing
    /// the policies again on every call would be most of the call. It holds bindings'
    /// configurations only, never anything of a request.
    static COMPILED: RefCell<Vec<(String, Rc<Compiled>)>> = const { RefCell::new(Vec::new()) };
}

fn compiled(config_json: &str) -> Result<Rc<Compiled>, String> {
    let hit = COMPILED.with_borrow_mut(|kept| {
        let at = kept.iter().position(|(text, _)| text == config_json)?;
        let entry = kept.remove(at);
        let c = Rc::clone(&entry.1);
        kept.insert(0, entry);
        Some(c)
    });
    if let Some(c) = hit {
        return Ok(c);
    }
    let c = Rc::new(compile(config_json)?);
    COMPILED.with_borrow_mut(|kept| {
        kept.truncate(KEPT - 1);
        kept.insert(0, (config_json.to_string(), Rc::clone(&c)));
    });
    Ok(c)
}

struct Cedar;

impl Policy for Cedar {
    fn evaluate(request: PolicyRequest) -> Result<Decision, String> {
        let compiled = compiled(&request.config_json)?;
        if compiled.check_only {
            return Ok(Decision::Allow);
        }
        decide(&compiled, &request)
    }
}

export_policy!(Cedar);
