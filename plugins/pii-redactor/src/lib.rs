//! pii-redactor: masks e-mail addresses, phone numbers and Luhn-valid card numbers found in
//! any string (or integer) of a value, and drops or masks configured JSON paths.
//!
//! Config (every field optional):
//! `{"paths": ["/gatewayRef", "/customer/*/email"], "pathAction": "drop" | "mask",
//!   "mask": "[redacted]", "emails": true, "phones": true, "cards": true}`.
//! Found values become `[email]`, `[phone]` and `[card ••••1111]`. `*` in a path matches any
//! key or index. The same rules apply to approval inputs shown to reviewers.

use capgate_plugin::{CapabilityInfo, Redactor, Value, export_redactor};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    #[serde(default)]
    paths: Vec<String>,
    #[serde(default)]
    path_action: PathAction,
    #[serde(default = "default_mask")]
    mask: String,
    #[serde(default = "yes")]
    emails: bool,
    #[serde(default = "yes")]
    phones: bool,
    #[serde(default = "yes")]
    cards: bool,
}

#[derive(Deserialize, Default, Clone, Copy, PartialEq)]
#[serde(rename_all = "lowercase")]
enum PathAction {
    #[default]
    Drop,
    Mask,
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
    serde_json::from_value(v).map_err(|e| format!("invalid pii-redactor config: {e}"))
}

struct PiiRedactor;

impl Redactor for PiiRedactor {
    fn redact_output(_: CapabilityInfo, output: Value, config: Value) -> Result<Value, String> {
        Ok(redact(output, &self::config(config)?))
    }
    fn redact_approval_input(
        _: CapabilityInfo,
        input: Value,
        config: Value,
    ) -> Result<Value, String> {
        Ok(redact(input, &self::config(config)?))
    }
}

// The config this plugin takes, checked by `capgate check` at load (not here, per call).
capgate_plugin::config_schema!(
    r#"{
        "type": ["object", "null"],
        "properties": {
            "paths": {
                "type": "array",
                "description": "JSON pointers to drop or mask; `*` matches any key or index.",
                "items": { "type": "string", "pattern": "^(/([^~/]|~[01])*)+$" }
            },
            "pathAction": { "enum": ["drop", "mask"], "default": "drop" },
            "mask": { "type": "string" },
            "emails": { "type": "boolean", "default": true },
            "phones": { "type": "boolean", "default": true },
            "cards": { "type": "boolean", "default": true }
        },
        "additionalProperties": false
    }"#
);

export_redactor!(PiiRedactor);

fn redact(mut value: Value, config: &Config) -> Value {
    for path in &config.paths {
        let segments: Vec<String> = path
            .split('/')
            .skip(1)
            .map(|s| s.replace("~1", "/").replace("~0", "~"))
            .collect();
        if !segments.is_empty() {
            apply_path(&mut value, &segments, config);
        }
    }
    scrub(&mut value, config);
    value
}

fn apply_path(value: &mut Value, segments: &[String], config: &Config) {
    let (head, rest) = match segments.split_first() {
        Some(x) => x,
        None => return,
    };
    match value {
        Value::Object(map) => {
            let keys: Vec<String> = if head == "*" {
                map.keys().cloned().collect()
            } else {
                vec![head.clone()]
            };
            for k in keys {
                if rest.is_empty() {
                    match config.path_action {
                        PathAction::Drop => {
                            map.remove(&k);
                        }
                        PathAction::Mask => {
                            if let Some(v) = map.get_mut(&k) {
                                *v = Value::String(config.mask.clone());
                            }
                        }
                    }
                } else if let Some(v) = map.get_mut(&k) {
                    apply_path(v, rest, config);
                }
            }
        }
        Value::Array(items) => {
            let indices: Vec<usize> = if head == "*" {
                (0..items.len()).rev().collect()
            } else {
                head.parse()
                    .ok()
                    .filter(|i| *i < items.len())
                    .into_iter()
                    .collect()
            };
            for i in indices {
                if rest.is_empty() {
                    match config.path_action {
                        PathAction::Drop => {
                            items.remove(i);
                        }
                        PathAction::Mask => items[i] = Value::String(config.mask.clone()),
                    }
                } else {
                    apply_path(&mut items[i], rest, config);
                }
            }
        }
        _ => {}
    }
}

fn scrub(value: &mut Value, config: &Config) {
    match value {
        Value::String(s) => {
            if let Some(clean) = scrub_text(s, config) {
                *s = clean;
            }
        }
        Value::Number(n) if config.cards => {
            if let Some(u) = n.as_u64() {
                let digits = u.to_string();
                if is_card(&digits) {
                    *value = Value::String(card_mask(&digits));
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| scrub(v, config)),
        Value::Object(map) => map.values_mut().for_each(|v| scrub(v, config)),
        _ => {}
    }
}

/// The text with every finding replaced, or `None` when nothing was found.
fn scrub_text(s: &str, config: &Config) -> Option<String> {
    let emails = if config.emails {
        replace_emails(s)
    } else {
        None
    };
    let text = emails.as_deref().unwrap_or(s);
    let numbers = if config.cards || config.phones {
        replace_numbers(text, config)
    } else {
        None
    };
    numbers.or(emails)
}

fn replace_emails(s: &str) -> Option<String> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    let mut changed = false;
    let mut copied = 0;
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '@' {
            if let Some((start, end)) = email_span(&chars, i) {
                if start >= copied {
                    out.extend(&chars[copied..start]);
                    out.push_str("[email]");
                    copied = end;
                    changed = true;
                    i = end;
                    continue;
                }
            }
        }
        i += 1;
    }
    out.extend(&chars[copied.min(chars.len())..]);
    changed.then_some(out)
}

fn replace_numbers(s: &str, config: &Config) -> Option<String> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    let mut changed = false;
    let mut i = 0;
    while i < chars.len() {
        let starts_number = chars[i].is_ascii_digit() || chars[i] == '+' || chars[i] == '(';
        let boundary = i == 0 || !chars[i - 1].is_alphanumeric();
        if starts_number && boundary {
            if let Some((end, digits)) = number_span(&chars, i) {
                let after_ok = end == chars.len() || !chars[end].is_alphanumeric();
                if after_ok {
                    if config.cards && is_card(&digits) {
                        out.push_str(&card_mask(&digits));
                        changed = true;
                        i = end;
                        continue;
                    }
                    let plus = chars[i] == '+';
                    let n = digits.len();
                    if config.phones && ((plus && (7..=15).contains(&n)) || (10..=15).contains(&n))
                    {
                        out.push_str("[phone]");
                        changed = true;
                        i = end;
                        continue;
                    }
                }
            }
        }
        out.push(chars[i]);
        i += 1;
    }
    changed.then_some(out)
}

fn is_local(c: char) -> bool {
    c.is_ascii_alphanumeric() || "._%+-".contains(c)
}

fn is_domain(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '.' || c == '-'
}

/// `[start, end)` of an address around the `@` at `at`.
fn email_span(chars: &[char], at: usize) -> Option<(usize, usize)> {
    let mut start = at;
    while start > 0 && is_local(chars[start - 1]) {
        start -= 1;
    }
    let mut end = at + 1;
    while end < chars.len() && is_domain(chars[end]) {
        end += 1;
    }
    while end > at + 1 && (chars[end - 1] == '.' || chars[end - 1] == '-') {
        end -= 1;
    }
    let domain: String = chars[at + 1..end].iter().collect();
    let tld_ok = domain.rsplit_once('.').is_some_and(|(host, tld)| {
        !host.is_empty() && tld.len() >= 2 && tld.chars().all(|c| c.is_ascii_alphabetic())
    });
    (start < at && tld_ok).then_some((start, end))
}

/// A run of digits with the usual separators, from `i`: its end and its digits.
fn number_span(chars: &[char], i: usize) -> Option<(usize, String)> {
    let mut end = i;
    let mut digits = String::new();
    let mut last_digit_end = i;
    if chars[i] == '+' || chars[i] == '(' {
        end += 1;
    }
    while end < chars.len() {
        let c = chars[end];
        if c.is_ascii_digit() {
            digits.push(c);
            end += 1;
            last_digit_end = end;
        } else if " -.()".contains(c) && end + 1 < chars.len() {
            end += 1;
        } else {
            break;
        }
        if digits.len() > 19 {
            return None;
        }
    }
    // A closing parenthesis right after the last digit belongs to the number.
    (digits.len() >= 7).then_some((last_digit_end, digits))
}

fn is_card(digits: &str) -> bool {
    (13..=19).contains(&digits.len()) && luhn(digits)
}

fn luhn(digits: &str) -> bool {
    let mut sum = 0;
    for (i, c) in digits.chars().rev().enumerate() {
        let Some(mut d) = c.to_digit(10) else {
            return false;
        };
        if i % 2 == 1 {
            d *= 2;
            if d > 9 {
                d -= 9;
            }
        }
        sum += d;
    }
    sum % 10 == 0
}

fn card_mask(digits: &str) -> String {
    let last4 = &digits[digits.len().saturating_sub(4)..];
    format!("[card ••••{last4}]")
}
