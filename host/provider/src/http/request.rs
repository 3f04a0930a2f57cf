//! The request mapping of an HTTP upstream: a capability's validated input turned into the
//! request a service's own clients send (method, path template, query parameters, headers,
//! JSON body), for services that do not speak capgate's envelope (e.g. an operation
//! imported from an OpenAPI document by `capgate import openapi`).
//!
//! Everything that can be checked without an input is checked when the upstream is built
//! ([`RequestPlan::new`]); what depends on the input (a path value that is missing or not a
//! scalar, a header value that is not a valid header) fails the call closed, as an internal
//! error, before any request is sent.

use super::HttpUpstreamError;
use capgate_core::procedure::ProcedureError;
use reqwest::header::{HeaderName, HeaderValue};
use reqwest::{Method, Url};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// The methods a mapping may name (TRACE and CONNECT have no use here).
pub use capgate_core::defaults::http_upstream::METHODS;

/// Headers an input field may not set: framing and hop-by-hop headers, the ones capgate
/// sets itself, and (checked separately) every configured static header, so a model's input
/// can never replace a service credential or desynchronise the request.
const RESERVED_HEADERS: [&str; 16] = [
    "host",
    "content-length",
    "content-type",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "proxy-authorization",
    "proxy-connection",
    "accept",
    "expect",
    "idempotency-key",
    "traceparent",
    "tracestate",
];

/// How a call's input becomes the service's own request (the `request` table of an HTTP
/// upstream). Without it the upstream speaks capgate's envelope (`POST url`).
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HttpRequestMapping {
    /// The HTTP method, one of [`METHODS`] (upper case).
    pub method: String,
    /// The path template appended to the upstream's `url`: `/pets/{petId}`; each `{name}` is
    /// filled from the input field `name`, percent-encoded as (part of) one path segment.
    #[serde(default)]
    pub path: String,
    /// Input fields sent as query parameters (`?name=value`; an array repeats the name; an
    /// absent or null field is left out).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub query: Vec<String>,
    /// Header name → the input field whose scalar value is sent in it (absent: not sent).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The input field whose value is the JSON request body (absent: no body).
    pub body: Option<String>,
}

/// One piece of a parsed path template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Literal(String),
    Field(String),
}

/// A validated mapping, ready to build requests.
#[derive(Debug, Clone)]
pub(crate) struct RequestPlan {
    pub(crate) method: Method,
    path: Vec<Piece>,
    query: Vec<String>,
    headers: Vec<(HeaderName, String)>,
    body: Option<String>,
}

/// What one call sends.
#[derive(Debug)]
pub(crate) struct PlannedRequest {
    pub(crate) url: Url,
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    pub(crate) body: Option<Value>,
}

fn bad_template(template: &str, reason: impl Into<String>) -> HttpUpstreamError {
    HttpUpstreamError::InvalidPathTemplate {
        template: template.to_string(),
        reason: reason.into(),
    }
}

/// Parse `/pets/{petId}/photos` into literal and field pieces.
fn parse_template(template: &str) -> Result<Vec<Piece>, HttpUpstreamError> {
    if !template.is_empty() && !template.starts_with('/') {
        return Err(bad_template(template, "must start with `/`"));
    }
    if template.contains(['?', '#']) {
        return Err(bad_template(
            template,
            "must not hold `?` or `#` (map query parameters with `query`)",
        ));
    }
    if template.split('/').any(|s| s == "." || s == "..") {
        return Err(bad_template(template, "must not hold `.` or `..` segments"));
    }
    let mut pieces = Vec::new();
    let mut rest = template;
    while !rest.is_empty() {
        match rest.find(['{', '}']) {
            None => {
                pieces.push(Piece::Literal(rest.to_string()));
                break;
            }
            Some(i) if rest.as_bytes()[i] == b'}' => {
                return Err(bad_template(template, "has a `}` without its `{`"));
            }
            Some(i) => {
                if i > 0 {
                    pieces.push(Piece::Literal(rest[..i].to_string()));
                }
                let after = &rest[i + 1..];
                let Some(end) = after.find('}') else {
                    return Err(bad_template(template, "has a `{` without its `}`"));
                };
                let name = &after[..end];
                if name.is_empty() {
                    return Err(bad_template(template, "has an empty `{}` placeholder"));
                }
                if name.contains(['{', '/']) {
                    return Err(bad_template(
                        template,
                        format!("placeholder `{{{name}}}` is not a field name"),
                    ));
                }
                if matches!(pieces.last(), Some(Piece::Field(_))) {
                    return Err(bad_template(
                        template,
                        "has two placeholders side by side (their values could not be told apart)",
                    ));
                }
                pieces.push(Piece::Field(name.to_string()));
                rest = &after[end + 1..];
            }
        }
    }
    // Literal pieces go on the wire as written: they must already be valid path characters.
    for piece in &pieces {
        if let Piece::Literal(l) = piece
            && let Some(c) = l
                .chars()
                .find(|c| !(c.is_ascii_alphanumeric() || "/-._~!$&'()*+,;=:@%".contains(*c)))
        {
            return Err(bad_template(
                template,
                format!("holds `{c}`, which is not a path character (percent-encode it)"),
            ));
        }
    }
    Ok(pieces)
}

impl RequestPlan {
    /// Validate a mapping against the upstream's static headers (which an input field may
    /// never replace).
    pub(crate) fn new(
        mapping: &HttpRequestMapping,
        static_headers: &BTreeMap<String, String>,
    ) -> Result<RequestPlan, HttpUpstreamError> {
        if !METHODS.contains(&mapping.method.as_str()) {
            return Err(HttpUpstreamError::UnknownMethod(mapping.method.clone()));
        }
        let method = Method::from_bytes(mapping.method.as_bytes())
            .map_err(|_| HttpUpstreamError::UnknownMethod(mapping.method.clone()))?;
        let path = parse_template(&mapping.path)?;
        for (i, q) in mapping.query.iter().enumerate() {
            if q.is_empty() {
                return Err(HttpUpstreamError::EmptyField {
                    setting: vec!["request".into(), "query".into(), i.to_string()],
                });
            }
        }
        let mut headers = Vec::new();
        for (name, field) in &mapping.headers {
            let invalid = || HttpUpstreamError::InvalidMappedHeader(name.clone());
            let n = HeaderName::from_bytes(name.as_bytes()).map_err(|_| invalid())?;
            let reserved = RESERVED_HEADERS.contains(&n.as_str())
                || n.as_str().starts_with("proxy-")
                || static_headers
                    .keys()
                    .any(|s| s.eq_ignore_ascii_case(n.as_str()));
            if reserved {
                return Err(HttpUpstreamError::ReservedMappedHeader(name.clone()));
            }
            if field.is_empty() {
                return Err(HttpUpstreamError::EmptyField {
                    setting: vec!["request".into(), "headers".into(), name.clone()],
                });
            }
            headers.push((n, field.clone()));
        }
        if mapping.body.as_deref() == Some("") {
            return Err(HttpUpstreamError::EmptyField {
                setting: vec!["request".into(), "body".into()],
            });
        }
        Ok(RequestPlan {
            method,
            path,
            query: mapping.query.clone(),
            headers,
            body: mapping.body.clone(),
        })
    }

    /// The request for one input: the base URL's path joined with the filled template, the
    /// query parameters appended to any the base has. Fails closed (not sent, hidden as an
    /// internal error: the input passed the capability's schema, so a mismatch is the
    /// deployment's fault) on a missing or non-scalar path value, a non-scalar query or
    /// header value, a header value that is not a valid header, or a filled segment that is
    /// `.` or `..`.
    pub(crate) fn plan(&self, base: &Url, input: &Value) -> Result<PlannedRequest, ProcedureError> {
        let field = |name: &str| input.get(name).filter(|v| !v.is_null());
        let mut path = String::new();
        for piece in &self.path {
            match piece {
                Piece::Literal(l) => path.push_str(l),
                Piece::Field(name) => {
                    let value = field(name).ok_or_else(|| {
                        ProcedureError::not_sent(format!(
                            "request mapping: the path parameter `{name}` is missing from the input"
                        ))
                    })?;
                    let text = scalar(value).ok_or_else(|| {
                        ProcedureError::not_sent(format!(
                            "request mapping: the path parameter `{name}` is not a string, number or boolean"
                        ))
                    })?;
                    if text.is_empty() {
                        return Err(ProcedureError::not_sent(format!(
                            "request mapping: the path parameter `{name}` is empty"
                        )));
                    }
                    encode_segment(&text, &mut path);
                }
            }
        }
        // A filled segment must not be a dot segment in any spelling (`.`, `%2e`, `..`,
        // `.%2E`…): URL parsing would resolve it and the request would leave its path.
        if path.split('/').any(is_dot_segment) {
            return Err(ProcedureError::not_sent(
                "request mapping: a path parameter makes a `.` or `..` segment",
            ));
        }
        let mut url = base.clone();
        url.set_fragment(None);
        if !path.is_empty() {
            let joined = format!("{}{path}", base.path().trim_end_matches('/'));
            url.set_path(&joined);
        }
        let mut pairs: Vec<(&str, String)> = Vec::new();
        for name in &self.query {
            let Some(value) = field(name) else { continue };
            let bad = || {
                ProcedureError::not_sent(format!(
                    "request mapping: the query parameter `{name}` is not a scalar or an array of scalars"
                ))
            };
            match value {
                Value::Array(items) => {
                    for item in items {
                        pairs.push((name, scalar(item).ok_or_else(bad)?));
                    }
                }
                v => pairs.push((name, scalar(v).ok_or_else(bad)?)),
            }
        }
        if !pairs.is_empty() {
            let mut q = url.query_pairs_mut();
            for (k, v) in pairs {
                q.append_pair(k, &v);
            }
        }
        let mut headers = Vec::new();
        for (name, field_name) in &self.headers {
            let Some(value) = field(field_name) else {
                continue;
            };
            let text = scalar(value).ok_or_else(|| {
                ProcedureError::not_sent(format!(
                    "request mapping: the header `{name}`'s field `{field_name}` is not a scalar"
                ))
            })?;
            let v = HeaderValue::from_str(&text).map_err(|_| {
                ProcedureError::not_sent(format!(
                    "request mapping: the header `{name}`'s value is not a valid header value"
                ))
            })?;
            headers.push((name.clone(), v));
        }
        let body = self
            .body
            .as_deref()
            .and_then(|b| input.get(b))
            .filter(|v| !v.is_null())
            .cloned();
        Ok(PlannedRequest { url, headers, body })
    }
}

/// A scalar's text: a string as is, a number or boolean as JSON writes it.
fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Percent-encode everything but RFC 3986's unreserved characters, so a value is data in
/// one segment: `/`, `?`, `#`, `%` and every non-ASCII byte are encoded.
fn encode_segment(text: &str, out: &mut String) {
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

fn is_dot_segment(segment: &str) -> bool {
    let lower = segment.to_ascii_lowercase().replace("%2e", ".");
    lower == "." || lower == ".."
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plan_of(path: &str) -> RequestPlan {
        RequestPlan::new(
            &HttpRequestMapping {
                method: "GET".into(),
                path: path.into(),
                query: vec!["verbose".into(), "tag".into()],
                headers: [("X-Tenant".to_string(), "tenant".to_string())].into(),
                body: None,
            },
            &BTreeMap::new(),
        )
        .expect("valid mapping")
    }

    fn base() -> Url {
        Url::parse("http://127.0.0.1:8080/api/").expect("url")
    }

    #[test]
    fn a_path_value_stays_one_segment() {
        let plan = plan_of("/pets/{petId}");
        for (value, want) in [
            (json!("a/b"), "/api/pets/a%2Fb"),
            (json!("x?y#z"), "/api/pets/x%3Fy%23z"),
            (json!("100%"), "/api/pets/100%25"),
            (json!("é ü"), "/api/pets/%C3%A9%20%C3%BC"),
            (json!(42), "/api/pets/42"),
            (json!(true), "/api/pets/true"),
            (json!("..."), "/api/pets/..."),
        ] {
            let req = plan
                .plan(&base(), &json!({ "petId": value }))
                .expect("planned");
            assert_eq!(req.url.path(), want, "{value}");
            assert_eq!(req.url.query(), None);
        }
    }

    #[test]
    fn dot_segments_missing_and_non_scalar_values_fail_closed() {
        let plan = plan_of("/pets/{petId}");
        for input in [
            json!({ "petId": ".." }),
            json!({ "petId": "." }),
            json!({}),
            json!({ "petId": null }),
            json!({ "petId": "" }),
            json!({ "petId": ["a"] }),
            json!({ "petId": { "a": 1 } }),
        ] {
            match plan.plan(&base(), &input) {
                Err(ProcedureError::NotSent(_)) => {}
                other => panic!("{input}: {other:?}"),
            }
        }
        // A placeholder inside a segment cannot make a dot segment with its neighbours.
        let plan = plan_of("/pets/.{petId}");
        assert!(plan.plan(&base(), &json!({ "petId": "." })).is_err());
        assert!(plan.plan(&base(), &json!({ "petId": "json" })).is_ok());
    }

    #[test]
    fn query_and_headers_follow_the_input() {
        let plan = plan_of("/pets");
        let req = plan
            .plan(
                &base(),
                &json!({ "verbose": true, "tag": ["a b", "c&d"], "tenant": "t1", "other": 1 }),
            )
            .expect("planned");
        assert_eq!(req.url.path(), "/api/pets");
        assert_eq!(req.url.query(), Some("verbose=true&tag=a+b&tag=c%26d"));
        assert_eq!(req.headers.len(), 1);
        assert_eq!(req.headers[0].0.as_str(), "x-tenant");
        assert_eq!(req.headers[0].1, "t1");
        assert_eq!(req.body, None);
        // Absent fields are left out; objects refused; a header value with a line break
        // refused.
        let req = plan.plan(&base(), &json!({})).expect("planned");
        assert_eq!(req.url.query(), None);
        assert!(req.headers.is_empty());
        assert!(plan.plan(&base(), &json!({ "verbose": {} })).is_err());
        assert!(plan.plan(&base(), &json!({ "tag": [[1]] })).is_err());
        assert!(
            plan.plan(&base(), &json!({ "tenant": "a\r\nX: y" }))
                .is_err()
        );
    }

    #[test]
    fn the_body_is_the_named_field_and_the_base_query_is_kept() {
        let plan = RequestPlan::new(
            &HttpRequestMapping {
                method: "POST".into(),
                path: String::new(),
                query: vec!["q".into()],
                body: Some("body".into()),
                ..Default::default()
            },
            &BTreeMap::new(),
        )
        .expect("valid");
        let base = Url::parse("http://h/v1/pets?key=1#frag").expect("url");
        let req = plan
            .plan(&base, &json!({ "body": { "name": "Rex" }, "q": 1 }))
            .expect("planned");
        assert_eq!(req.url.as_str(), "http://h/v1/pets?key=1&q=1");
        assert_eq!(req.body, Some(json!({ "name": "Rex" })));
        assert_eq!(plan.method, Method::POST);
    }

    #[test]
    fn mappings_are_validated_up_front() {
        let ok = HttpRequestMapping {
            method: "GET".into(),
            path: "/pets/{petId}/photos/{n}.json".into(),
            ..Default::default()
        };
        assert!(RequestPlan::new(&ok, &BTreeMap::new()).is_ok());
        let statics: BTreeMap<String, String> = [("Authorization".into(), "k".into())].into();
        let cases: Vec<(HttpRequestMapping, Vec<&str>)> = vec![
            (
                HttpRequestMapping {
                    method: "get".into(),
                    ..ok.clone()
                },
                vec!["request", "method"],
            ),
            (
                HttpRequestMapping {
                    method: "TRACE".into(),
                    ..ok.clone()
                },
                vec!["request", "method"],
            ),
            (
                HttpRequestMapping {
                    path: "pets".into(),
                    ..ok.clone()
                },
                vec!["request", "path"],
            ),
            (
                HttpRequestMapping {
                    path: "/pets/{petId".into(),
                    ..ok.clone()
                },
                vec!["request", "path"],
            ),
            (
                HttpRequestMapping {
                    path: "/pets/petId}".into(),
                    ..ok.clone()
                },
                vec!["request", "path"],
            ),
            (
                HttpRequestMapping {
                    path: "/pets/{}".into(),
                    ..ok.clone()
                },
                vec!["request", "path"],
            ),
            (
                HttpRequestMapping {
                    path: "/pets/{a}{b}".into(),
                    ..ok.clone()
                },
                vec!["request", "path"],
            ),
            (
                HttpRequestMapping {
                    path: "/pets/../admin".into(),
                    ..ok.clone()
                },
                vec!["request", "path"],
            ),
            (
                HttpRequestMapping {
                    path: "/pets?x=1".into(),
                    ..ok.clone()
                },
                vec!["request", "path"],
            ),
            (
                HttpRequestMapping {
                    path: "/pets with space".into(),
                    ..ok.clone()
                },
                vec!["request", "path"],
            ),
            (
                HttpRequestMapping {
                    headers: [("bad header".to_string(), "f".to_string())].into(),
                    ..ok.clone()
                },
                vec!["request", "headers", "bad header"],
            ),
            (
                HttpRequestMapping {
                    headers: [("Host".to_string(), "f".to_string())].into(),
                    ..ok.clone()
                },
                vec!["request", "headers", "Host"],
            ),
            (
                HttpRequestMapping {
                    headers: [("authorization".to_string(), "f".to_string())].into(),
                    ..ok.clone()
                },
                vec!["request", "headers", "authorization"],
            ),
            (
                HttpRequestMapping {
                    query: vec![String::new()],
                    ..ok.clone()
                },
                vec!["request", "query", "0"],
            ),
            (
                HttpRequestMapping {
                    body: Some(String::new()),
                    ..ok.clone()
                },
                vec!["request", "body"],
            ),
        ];
        for (mapping, at) in cases {
            match RequestPlan::new(&mapping, &statics) {
                Err(e) => assert_eq!(e.setting(), Some(at), "{mapping:?}: {e}"),
                Ok(_) => panic!("{mapping:?} accepted"),
            }
        }
    }
}
