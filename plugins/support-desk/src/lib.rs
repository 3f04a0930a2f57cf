//! support-desk: the customer-support example's backend as a Wasm procedure component. One
//! component serves the five capabilities of the walkthrough, dispatching on the capability
//! id. It is deterministic and keeps no state (a fresh instance per call): ids are derived
//! from the call's idempotency key, so a retried or replayed call names the same refund.
//!
//! - `customers.search {query}` → matching customers (with emails and phones, for the
//!   redactor to mask);
//! - `orders.checkEligibility {orderId}` → `{orderId, eligible, maxRefund}`;
//! - `orders.refund {orderId, amount, reason?}` → `{refundId, amount, status, gatewayRef}`
//!   (`gatewayRef` is internal: the example redacts it);
//! - `messages.draft {customerId, body}` → `{draftId, customerId, body}`;
//! - `messages.send {customerId, body}` → `{messageId, status}`.

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

/// Orders: id, customer, total.
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
                let found: Vec<Value> = CUSTOMERS
                    .iter()
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
                match ORDERS.iter().find(|(id, _, _)| *id == order_id) {
                    Some((id, customer, total)) => Ok(json!({
                        "orderId": id, "customerId": customer, "eligible": true, "maxRefund": total
                    })),
                    None => Err(defined("ORDER_NOT_FOUND", "No such order.")),
                }
            }
            "orders.refund" => {
                let order_id = str_field(input, "orderId")?;
                let amount = input
                    .get("amount")
                    .and_then(Value::as_f64)
                    .ok_or_else(|| ProcedureError::Internal("input has no amount".into()))?;
                let Some((_, _, total)) = ORDERS.iter().find(|(id, _, _)| *id == order_id) else {
                    return Err(defined("ORDER_NOT_FOUND", "No such order."));
                };
                if amount > *total {
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
                "customerId": str_field(input, "customerId")?,
                "body": str_field(input, "body")?,
            })),
            "messages.send" => {
                str_field(input, "customerId")?;
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
