//! `capgate:plugin/request@0.3.0`: a guest reads one value of the call it is serving from the
//! host's already-parsed JSON (`get(input, "/amount")`) instead of parsing the whole input,
//! context and config it was handed as text. The host sets the call's documents on the store
//! before the guest runs and clears them after, so an instance (pooled or not) can only ever
//! read the call it is serving.

use crate::store_data::StoreData;
use crate::wit::wit_request::{Document, Host, Value as WitValue};
use capgate_core::policy::SharedValues;
use serde_json::Value;
use std::sync::Arc;

/// What a store's guest may read through `get`: the binding's config (fixed for the store's
/// life) and, only while a call that lends them runs, that call's input, context and actor
/// attributes (shared with the host, not copied).
#[derive(Debug, Clone, Default)]
pub(crate) struct CallDocs {
    /// Input, context and the actor's attributes of the call being served; `None` between
    /// calls and in calls that do not lend them.
    pub(crate) values: Option<Arc<SharedValues>>,
    /// The binding's config.
    pub(crate) config: Arc<Value>,
}

impl CallDocs {
    fn document(&self, which: Document) -> Option<&Value> {
        let values = self.values.as_deref()?;
        match which {
            Document::Input => values.input.as_ref(),
            Document::Context => Some(&values.context),
            Document::ActorAttributes => Some(&values.attributes),
            Document::Config => Some(&self.config),
        }
    }
}

/// One JSON value as the WIT `value` variant: scalars as themselves, containers as JSON text.
fn to_wit(v: &Value) -> WitValue {
    match v {
        Value::Null => WitValue::Null,
        Value::Bool(b) => WitValue::Boolean(*b),
        Value::Number(n) => WitValue::Number(n.to_string()),
        Value::String(s) => WitValue::Text(s.clone()),
        Value::Array(_) | Value::Object(_) => WitValue::Json(v.to_string()),
    }
}

/// What `get` answers for `pointer` in `docs` (`None` when nothing is there).
pub(crate) fn lookup(docs: &CallDocs, which: Document, pointer: &str) -> Option<WitValue> {
    docs.document(which)?.pointer(pointer).map(to_wit)
}

impl Host for StoreData {
    fn get(&mut self, document: Document, pointer: String) -> Option<WitValue> {
        lookup(&self.docs, document, &pointer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The bindings derive no `PartialEq`; their `Debug` spelling is exact enough.
    fn show(v: Option<WitValue>) -> String {
        format!("{v:?}")
    }

    fn docs() -> CallDocs {
        CallDocs {
            values: Some(Arc::new(SharedValues {
                input: Some(
                    json!({"amount": 649, "ratio": 0.5, "big": 1e21, "order": {"id": "o_1"}, "tags": ["a"], "gift": false, "note": null, "a/b": 1, "m~n": 2}),
                ),
                context: json!({"region": "eu"}),
                attributes: json!({"orgId": "org_1"}),
            })),
            config: Arc::new(json!({"maxAmount": 500})),
        }
    }

    #[test]
    fn answers_one_value_per_pointer_in_each_document() {
        let d = docs();
        let get = |w, p| lookup(&d, w, p);
        assert_eq!(
            show(get(Document::Input, "/amount")),
            show(Some(WitValue::Number("649".into())))
        );
        assert_eq!(
            show(get(Document::Input, "/ratio")),
            show(Some(WitValue::Number("0.5".into())))
        );
        assert_eq!(
            show(get(Document::Input, "/big")),
            show(Some(WitValue::Number("1e+21".into())))
        );
        assert_eq!(
            show(get(Document::Input, "/order/id")),
            show(Some(WitValue::Text("o_1".into())))
        );
        assert_eq!(
            show(get(Document::Input, "/order")),
            show(Some(WitValue::Json(r#"{"id":"o_1"}"#.into())))
        );
        assert_eq!(
            show(get(Document::Input, "/tags/0")),
            show(Some(WitValue::Text("a".into())))
        );
        assert_eq!(
            show(get(Document::Input, "/gift")),
            show(Some(WitValue::Boolean(false)))
        );
        assert_eq!(
            show(get(Document::Input, "/note")),
            show(Some(WitValue::Null))
        );
        assert_eq!(
            show(get(Document::Input, "/a~1b")),
            show(Some(WitValue::Number("1".into())))
        );
        assert_eq!(
            show(get(Document::Input, "/m~0n")),
            show(Some(WitValue::Number("2".into())))
        );
        assert_eq!(show(get(Document::Input, "/missing")), show(None));
        assert_eq!(
            show(get(Document::Input, "amount")),
            show(None),
            "a pointer starts with /"
        );
        assert_eq!(
            show(get(Document::Context, "/region")),
            show(Some(WitValue::Text("eu".into())))
        );
        assert_eq!(
            show(get(Document::ActorAttributes, "/orgId")),
            show(Some(WitValue::Text("org_1".into())))
        );
        assert_eq!(
            show(get(Document::Config, "/maxAmount")),
            show(Some(WitValue::Number("500".into())))
        );
        assert!(matches!(get(Document::Config, ""), Some(WitValue::Json(_))));
    }

    #[test]
    fn nothing_outside_a_call_and_no_input_in_discovery() {
        let mut d = docs();
        let lent = d.values.take();
        for which in [
            Document::Input,
            Document::Context,
            Document::ActorAttributes,
            Document::Config,
        ] {
            assert_eq!(
                show(lookup(&d, which, "")),
                show(None),
                "between calls nothing is readable"
            );
        }
        let mut discovery = (*lent.expect("lent")).clone();
        discovery.input = None;
        d.values = Some(Arc::new(discovery));
        assert_eq!(show(lookup(&d, Document::Input, "")), show(None));
        assert_eq!(
            show(lookup(&d, Document::Context, "/region")),
            show(Some(WitValue::Text("eu".into())))
        );
    }
}
