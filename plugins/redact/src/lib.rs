//! redact: the redactor that ships with capgate, configured with JSON pointers instead of
//! code.
//!
//! Config: `{"drop": ["/gatewayRef", "/items/*/card"], "mask": ["/customer/email"],
//! "maskWith": "[redacted]", "approvalInput": true}`, every key optional. A pointer's `*`
//! segment matches every key of an object and every element of an array. `drop` removes
//! the value (an array element is removed, later ones move up); `mask` replaces it with
//! `maskWith`. A pointer that finds nothing changes nothing. `approvalInput` (default
//! true) applies the same to the stored input an approver reviews. A config that does not
//! read is an error, so the output is withheld (fail closed).

use capgate_plugin::{CapabilityInfo, Redactor, Value, export_redactor};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    #[serde(default)]
    drop: Vec<String>,
    #[serde(default)]
    mask: Vec<String>,
    #[serde(default = "default_mask")]
    mask_with: String,
    #[serde(default = "yes")]
    approval_input: bool,
}

fn default_mask() -> String {
    "[redacted]".into()
}

fn yes() -> bool {
    true
}

fn config(v: Value) -> Result<Config, String> {
    let v = if v.is_null() {
        Value::Object(Default::default())
    } else {
        v
    };
    let c: Config = serde_json::from_value(v).map_err(|e| format!("invalid redact config: {e}"))?;
    for p in c.drop.iter().chain(&c.mask) {
        if !p.starts_with('/') {
            return Err(format!("`{p}` is not a JSON pointer (it starts with `/`)"));
        }
    }
    Ok(c)
}

fn segments(pointer: &str) -> Vec<String> {
    pointer
        .split('/')
        .skip(1)
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect()
}

#[derive(Clone, Copy)]
enum Action<'a> {
    Drop,
    Mask(&'a str),
}

fn apply(value: &mut Value, path: &[String], action: Action<'_>) {
    let Some((head, rest)) = path.split_first() else {
        return;
    };
    if rest.is_empty() {
        match (value, action) {
            (Value::Object(m), Action::Drop) if head == "*" => m.clear(),
            (Value::Object(m), Action::Drop) => {
                m.remove(head);
            }
            (Value::Array(a), Action::Drop) if head == "*" => a.clear(),
            (Value::Array(a), Action::Drop) => {
                if let Ok(i) = head.parse::<usize>()
                    && i < a.len()
                {
                    a.remove(i);
                }
            }
            (Value::Object(m), Action::Mask(with)) => {
                for (k, v) in m.iter_mut() {
                    if head == "*" || k == head {
                        *v = Value::String(with.to_string());
                    }
                }
            }
            (Value::Array(a), Action::Mask(with)) => {
                for (i, v) in a.iter_mut().enumerate() {
                    if head == "*" || head.parse::<usize>() == Ok(i) {
                        *v = Value::String(with.to_string());
                    }
                }
            }
            _ => {}
        }
        return;
    }
    match value {
        Value::Object(m) => {
            for (k, v) in m.iter_mut() {
                if head == "*" || k == head {
                    apply(v, rest, action);
                }
            }
        }
        Value::Array(a) => {
            for (i, v) in a.iter_mut().enumerate() {
                if head == "*" || head.parse::<usize>() == Ok(i) {
                    apply(v, rest, action);
                }
            }
        }
        _ => {}
    }
}

fn redact(mut value: Value, config: &Config) -> Value {
    for p in &config.mask {
        apply(&mut value, &segments(p), Action::Mask(&config.mask_with));
    }
    for p in &config.drop {
        apply(&mut value, &segments(p), Action::Drop);
    }
    value
}

struct Redact;

impl Redactor for Redact {
    fn redact_output(_: CapabilityInfo, output: Value, config: Value) -> Result<Value, String> {
        Ok(redact(output, &self::config(config)?))
    }
    fn redact_approval_input(
        _: CapabilityInfo,
        input: Value,
        config: Value,
    ) -> Result<Value, String> {
        let config = self::config(config)?;
        Ok(if config.approval_input {
            redact(input, &config)
        } else {
            input
        })
    }
}

export_redactor!(Redact);
