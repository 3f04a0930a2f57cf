//! The walkthrough's input schemas.

use serde_json::{Value, json};

/// `orders.refund`'s input: an order id and a positive amount, an optional reason, and a
/// currency that defaults to USD; nothing else.
pub fn refund() -> Value {
    json!({
        "type": "object",
        "properties": {
            "orderId": {"type": "string", "minLength": 1},
            "amount": {"type": "number", "exclusiveMinimum": 0},
            "reason": {"type": "string"},
            "currency": {"type": "string", "default": "USD"}
        },
        "required": ["orderId", "amount"],
        "additionalProperties": false
    })
}
