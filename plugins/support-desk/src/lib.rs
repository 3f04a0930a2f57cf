//! support-desk: the customer-support example's backend as a Wasm procedure component. One
//! component serves the five capabilities of the walkthrough, dispatching on the capability
//! id. It is deterministic and keeps no state (a fresh instance per call): ids are derived
//! from the call's idempotency key, so a retried or replayed call names the same refund.
//!
//! - `customers.search {query}` → matching customers of the actor's organisation (with
//!   emails and phones, for the redactor to mask);
//! - `orders.checkEligibility {orderId}` → `{orderId, eligible, maxRefund}`;
//! - `orders.refund {orderId, amount, reason?}` → `{refundId, amount, status, gatewayRef}`
//!   (`gatewayRef` is internal: the example redacts it);
//! - `messages.draft {customerId, body}` → `{draftId, customerId, body}`;
//! - `messages.send {customerId, body}` → `{messageId, status}`.
//!
//! **Tenancy is enforced here**, where the data lives (spec stage 11: "middleware decides
//! whether the operation may happen"). Every customer and order belongs to an organisation;
//! the actor the call runs as (from the gateway's credential, never from the model) must
//! carry that organisation as its `orgId` attribute, and a refund also needs the
//! `orders:refund` permission in its `permissions` attribute — re-checked on every call,
//! resumed ones included, exactly as the application would for a button click. Another
//! organisation's record, or a missing permission, is `forbidden` (FORBIDDEN, the reason
//! private); a record that exists nowhere is a defined error the model may act on. The
//! governance policies in front (orgIsolation) cannot do this: they never see which
//! organisation owns an order.

use capgate_plugin::{Procedure, ProcedureCall, ProcedureError, Value, export_procedure};
use serde_json::json;

struct SupportDesk;

const CUSTOMERS: &[(&str, &str, &str, &str, &str)] = &[
    (
        "cus_1",
        "Alice Martin",
        "alice@example.com",
        "+1 415 555 0101",
        "org_1",
    ),
    (
        "cus_2",
        "Bob Chen",
        "bob.chen@example.com",
        "+1 415 555 0102",
        "org_1",
    ),
    (
        "cus_3",
        "Carla Diaz",
        "carla@example.org",
        "+44 20 7946 0958",
        "org_2",
    ),
];

/// Orders: id, customer, total. An order belongs to its customer's organisation.
const ORDERS: &[(&str, &str, f64)] = &[
    ("ord_42", "cus_1", 649.0),
    ("ord_43", "cus_2", 120.0),
    ("ord_44", "cus_3", 80.0),
];

fn defined(code: &str, message: &str) -> ProcedureError {
    ProcedureError::Defined {
        code: code.into(),
        message: message.into(),
        data: None,
        retryable: false,
    }
}

/// The organisation the actor acts for (`attributes.orgId`); an actor without one may touch
/// no tenant's data.
fn actor_org(call: &ProcedureCall) -> Result<String, ProcedureError> {
    call.actor
        .attribute("/orgId")
        .and_then(|v| v.as_str().map(str::to_owned))
        .filter(|org| !org.is_empty())
        .ok_or_else(|| ProcedureError::Forbidden(format!("actor `{}` has no orgId", call.actor.id)))
}

/// The actor's organisation must own the record.
fn same_org(call: &ProcedureCall, owner: &str, record: &str) -> Result<(), ProcedureError> {
    let mine = actor_org(call)?;
    if mine == owner {
        Ok(())
    } else {
        Err(ProcedureError::Forbidden(format!(
            "actor `{}` of `{mine}` may not touch `{record}` of `{owner}`",
            call.actor.id
        )))
    }
}

/// The actor must hold `permission` in its `permissions` attribute.
fn permitted(call: &ProcedureCall, permission: &str) -> Result<(), ProcedureError> {
    let held = call.actor.attribute("/permissions").is_some_and(|p| {
        p.as_array()
            .is_some_and(|list| list.iter().any(|v| v.as_str() == Some(permission)))
    });
    if held {
        Ok(())
    } else {
        Err(ProcedureError::Forbidden(format!(
            "actor `{}` lacks `{permission}`",
            call.actor.id
        )))
    }
}

/// The organisation of a customer.
fn customer_org(customer_id: &str) -> Option<&'static str> {
    CUSTOMERS
        .iter()
        .find(|(id, ..)| *id == customer_id)
        .map(|(.., org)| *org)
}

/// An order (customer, total) and its organisation, checked against the actor's;
/// `ORDER_NOT_FOUND` when no organisation has it.
fn order_of_actor(
    call: &ProcedureCall,
    order_id: &str,
) -> Result<(&'static str, &'static str, f64), ProcedureError> {
    let Some((id, customer, total)) = ORDERS.iter().find(|(id, ..)| *id == order_id) else {
        return Err(defined("ORDER_NOT_FOUND", "No such order."));
    };
    let owner = customer_org(customer)
        .ok_or_else(|| ProcedureError::Internal(format!("order `{id}` has no customer")))?;
    same_org(call, owner, id)?;
    Ok((id, customer, *total))
}

/// A customer of the actor's organisation; `CUSTOMER_NOT_FOUND` when no organisation has it.
fn customer_of_actor<'a>(
    call: &ProcedureCall,
    customer_id: &'a str,
) -> Result<&'a str, ProcedureError> {
    let owner = customer_org(customer_id)
        .ok_or_else(|| defined("CUSTOMER_NOT_FOUND", "No such customer."))?;
    same_org(call, owner, customer_id)?;
    Ok(customer_id)
}

fn str_field<'a>(input: &'a Value, key: &str) -> Result<&'a str, ProcedureError> {
    input
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| ProcedureError::Internal(format!("input has no string `{key}`")))
}

/// A short stable suffix from the idempotency key (`idk_<hex>`).
fn stable_suffix(call: &ProcedureCall) -> String {
    call.idempotency_key
        .trim_start_matches("idk_")
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(10)
        .collect()
}

impl Procedure for SupportDesk {
    fn invoke(call: ProcedureCall) -> Result<Value, ProcedureError> {
        let input = &call.input;
        match call.capability.id.as_str() {
            "customers.search" => {
                let query = str_field(input, "query")?.to_lowercase();
                let org = actor_org(&call)?;
                let found: Vec<Value> = CUSTOMERS
                    .iter()
                    .filter(|(.., owner)| *owner == org)
                    .filter(|(id, name, email, _, _)| {
                        query.is_empty()
                            || name.to_lowercase().contains(&query)
                            || email.contains(&query)
                            || *id == query
                    })
                    .map(|(id, name, email, phone, org)| {
                        json!({"id": id, "name": name, "email": email, "phone": phone, "orgId": org})
                    })
                    .collect();
                Ok(json!({ "customers": found }))
            }
            "orders.checkEligibility" => {
                let order_id = str_field(input, "orderId")?;
                let (id, customer, total) = order_of_actor(&call, order_id)?;
                Ok(json!({
                    "orderId": id, "customerId": customer, "eligible": true, "maxRefund": total
                }))
            }
            "orders.refund" => {
                let order_id = str_field(input, "orderId")?;
                let amount = input
                    .get("amount")
                    .and_then(Value::as_f64)
                    .ok_or_else(|| ProcedureError::Internal("input has no amount".into()))?;
                let (_, _, total) = order_of_actor(&call, order_id)?;
                permitted(&call, "orders:refund")?;
                if amount > total {
                    return Err(defined(
                        "REFUND_TOO_LARGE",
                        "The refund exceeds the order total.",
                    ));
                }
                let suffix = stable_suffix(&call);
                Ok(json!({
                    "refundId": format!("ref_{suffix}"),
                    "amount": input["amount"],
                    "status": "issued",
                    "gatewayRef": format!("gw_{suffix}")
                }))
            }
            "messages.draft" => Ok(json!({
                "draftId": format!("drf_{}", stable_suffix(&call)),
                "customerId": customer_of_actor(&call, str_field(input, "customerId")?)?,
                "body": str_field(input, "body")?,
            })),
            "messages.send" => {
                customer_of_actor(&call, str_field(input, "customerId")?)?;
                str_field(input, "body")?;
                Ok(
                    json!({ "messageId": format!("msg_{}", stable_suffix(&call)), "status": "sent" }),
                )
            }
            other => Err(ProcedureError::Internal(format!(
                "support-desk does not implement `{other}`"
            ))),
        }
    }
}

export_procedure!(SupportDesk);
