//! The webhook sink: approval notifications (requested, decided, expired, escalated) POSTed one per
//! event to a URL, signed as [Standard Webhooks](https://www.standardwebhooks.com/) do
//! (`webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64 HMAC-SHA256 of
//! "id.timestamp.body">`), with a link to the approval in the console. Other events are
//! passed over (delivered as nothing). A failed POST fails the batch, which goes again:
//! a receiver deduplicates on `webhook-id` (`CHAIN:SEQ`, stable across retries).

use crate::sink::{Delivered, ExportSink, SinkError};
use base64::Engine as _;
use capgate_store::ExportedEvent;
use hmac::{KeyInit, Mac};
use serde_json::{Map, Value, json};
use std::time::Duration;

/// How a [`WebhookSink`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WebhookStyle {
    /// capgate's notification JSON.
    #[default]
    Json,
    /// A Slack-compatible message, `{"text": …}`.
    Slack,
}

/// Where and how a [`WebhookSink`] posts.
#[derive(Debug, Clone)]
pub struct WebhookTarget {
    /// The URL notifications are POSTed to.
    pub url: String,
    /// The signing secret: `whsec_` + base64 (Standard Webhooks), else the text's bytes.
    /// `None`: unsigned (a Slack URL is its own secret).
    pub secret: Option<String>,
    /// The payload's shape.
    pub style: WebhookStyle,
    /// The console's public URL; each notification links to `CONSOLE/approvals/ID`.
    pub console_url: Option<String>,
    /// Which notifications to send (`approval.requested`, …); `None`: all.
    pub events: Option<Vec<String>>,
    /// Only approvals of these namespaces (the requester's tenant); `None`: every
    /// namespace. A notification that names no namespace is not sent to a limited sink.
    pub namespaces: Option<Vec<String>>,
    /// More headers (already resolved).
    pub headers: Vec<(String, String)>,
    /// PEM CA certificates trusted besides the system's.
    pub ca_pem: Option<Vec<u8>>,
    /// The bound on one request.
    pub timeout: Duration,
}

/// Approval notifications over HTTP.
pub struct WebhookSink {
    client: reqwest::Client,
    target: WebhookTarget,
    key: Option<Vec<u8>>,
}

/// The HMAC key a Standard Webhooks secret stands for.
fn signing_key(secret: &str) -> Vec<u8> {
    secret
        .strip_prefix("whsec_")
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .unwrap_or_else(|| secret.as_bytes().to_vec())
}

/// `v1,<base64 HMAC-SHA256(key, "id.timestamp.body")>`.
pub fn signature(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut mac = <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    )
}

/// The notification an event stands for, or `None` when it is not about an approval.
pub fn notification(e: &ExportedEvent, console_url: Option<&str>) -> Option<Value> {
    let ty = e.event.get("type")?.as_str()?;
    let data = e.event.get("data")?;
    let approval_id = data.get("approvalId")?.as_str()?;
    let mut n = Map::new();
    let kind = match ty {
        "capability.approval_requested" => {
            n.insert("requestedBy".into(), e.event.get("actor")?.clone());
            for (from, to) in [
                ("reasons", "reasons"),
                ("types", "approvalTypes"),
                ("expiresAt", "expiresAt"),
            ] {
                if let Some(v) = data.get(from) {
                    n.insert(to.into(), v.clone());
                }
            }
            "approval.requested"
        }
        "capgate.approval.escalated" => {
            for key in ["escalateTo", "pendingMs"] {
                if let Some(v) = data.get(key) {
                    n.insert(key.into(), v.clone());
                }
            }
            "approval.escalated"
        }
        "capgate.approval.expired" => {
            for key in ["expiresAt", "lapsed"] {
                if let Some(v) = data.get(key) {
                    n.insert(key.into(), v.clone());
                }
            }
            "approval.expired"
        }
        "capability.approved" | "capability.rejected" => {
            let decision = ty.trim_start_matches("capability.");
            n.insert("decision".into(), Value::String(decision.into()));
            for key in ["approver", "comment", "via"] {
                if let Some(v) = data.get(key) {
                    n.insert(key.into(), v.clone());
                }
            }
            "approval.decided"
        }
        _ => return None,
    };
    // The approval's namespace (the requester's tenant): `requesterNamespace` on a
    // decision (its `namespace` is the approver's), `namespace` on the others.
    if let Some(ns) = data
        .get("requesterNamespace")
        .or_else(|| data.get("namespace"))
        .and_then(Value::as_str)
    {
        n.insert("namespace".into(), Value::String(ns.into()));
    }
    n.insert("type".into(), Value::String(kind.into()));
    n.insert("id".into(), Value::String(message_id(e)));
    n.insert("approvalId".into(), Value::String(approval_id.into()));
    for key in ["timestamp", "capabilityId", "executionId"] {
        if let Some(v) = e.event.get(key) {
            n.insert(key.into(), v.clone());
        }
    }
    if let Some(base) = console_url {
        n.insert(
            "link".into(),
            Value::String(format!(
                "{}/approvals/{approval_id}",
                base.trim_end_matches('/')
            )),
        );
    }
    Some(Value::Object(n))
}

/// `text` with Slack's control characters escaped (`&`, `<`, `>`), as Slack asks of every
/// value put into message text: nothing a requester, a policy or an approver wrote can
/// become a mention (`<!channel>`), a link (`<https://…|…>`) or formatting markup there.
fn slack_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '`' => out.push('\''),
            c => out.push(c),
        }
    }
    out
}

/// A notification as a Slack message. Every value from the event is escaped
/// ([`slack_escape`]).
fn slack(n: &Value) -> Value {
    let s = |k: &str| slack_escape(n.get(k).and_then(Value::as_str).unwrap_or(""));
    let capability = s("capabilityId");
    let kind = n.get("type").and_then(Value::as_str).unwrap_or("");
    let mut text = match kind {
        "approval.requested" => {
            let reasons: Vec<String> = n
                .get("reasons")
                .and_then(Value::as_array)
                .map(|r| {
                    r.iter()
                        .filter_map(Value::as_str)
                        .map(slack_escape)
                        .collect()
                })
                .unwrap_or_default();
            format!(
                "*Approval requested* for `{capability}`: {}",
                reasons.join("; ")
            )
        }
        "approval.expired" if n.get("lapsed") == Some(&Value::Bool(true)) => {
            format!("*Approval lapsed* approved but never run: `{capability}`")
        }
        "approval.expired" => format!("*Approval expired* undecided: `{capability}`"),
        "approval.escalated" => format!(
            "*Approval waiting*{}: `{capability}` has been pending for {} min",
            n.get("escalateTo")
                .and_then(Value::as_str)
                .map_or(String::new(), |r| format!(
                    ", escalated to {}",
                    slack_escape(r)
                )),
            n.get("pendingMs").and_then(Value::as_u64).unwrap_or(0) / 60_000
        ),
        _ => format!(
            "*{}* by {}: `{capability}`",
            if n.get("decision").and_then(Value::as_str) == Some("approved") {
                "Approved"
            } else {
                "Rejected"
            },
            slack_escape(
                n.pointer("/approver/id")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
            )
        ),
    };
    match n.get("link").and_then(Value::as_str) {
        Some(link) => text.push_str(&format!(" (<{}|{}>)", slack_escape(link), s("approvalId"))),
        None => text.push_str(&format!(" ({})", s("approvalId"))),
    }
    json!({ "text": text })
}

fn message_id(e: &ExportedEvent) -> String {
    match (&e.chain, e.seq) {
        (Some(c), Some(s)) => format!("{c}:{s}"),
        _ => format!("row:{}", e.id),
    }
}

impl WebhookSink {
    /// A sink for `target`.
    pub fn new(target: WebhookTarget) -> Result<WebhookSink, SinkError> {
        let client = crate::sink::http_client(target.timeout, target.ca_pem.as_deref())?;
        let key = target.secret.as_deref().map(signing_key);
        Ok(WebhookSink {
            client,
            target,
            key,
        })
    }
}

#[async_trait::async_trait]
impl ExportSink for WebhookSink {
    fn kind(&self) -> &'static str {
        "webhook"
    }

    async fn deliver(&mut self, events: &[ExportedEvent]) -> Result<Delivered, SinkError> {
        for e in events {
            let Some(n) = notification(e, self.target.console_url.as_deref()) else {
                continue;
            };
            if let Some(wanted) = &self.target.events
                && !wanted
                    .iter()
                    .any(|w| Some(w.as_str()) == n["type"].as_str())
            {
                continue;
            }
            if let Some(limited) = &self.target.namespaces
                && !n["namespace"]
                    .as_str()
                    .is_some_and(|ns| limited.iter().any(|l| l == ns))
            {
                continue;
            }
            let body = match self.target.style {
                WebhookStyle::Json => n.to_string(),
                WebhookStyle::Slack => slack(&n).to_string(),
            };
            let id = message_id(e);
            let timestamp = chrono::Utc::now().timestamp();
            let mut req = self
                .client
                .post(&self.target.url)
                .header("content-type", "application/json")
                .header("webhook-id", &id)
                .header("webhook-timestamp", timestamp.to_string());
            if let Some(key) = &self.key {
                req = req.header(
                    "webhook-signature",
                    signature(key, &id, timestamp, body.as_bytes()),
                );
            }
            for (k, v) in &self.target.headers {
                req = req.header(k, v);
            }
            let resp = req.body(body).send().await.map_err(SinkError::transport)?;
            if !resp.status().is_success() {
                return Err(SinkError::Status {
                    status: resp.status().as_u16(),
                });
            }
        }
        Ok(Delivered::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(ty: &str, data: Value) -> ExportedEvent {
        ExportedEvent {
            id: 1,
            at: chrono::Utc::now(),
            chain: Some("c".into()),
            seq: Some(4),
            hash: None,
            event: json!({"type": ty, "timestamp": "2026-12-04T10:00:00Z", "capabilityId": "orders.refund",
                "actor": {"id": "dana", "kind": "user"}, "data": data}),
        }
    }

    #[test]
    fn slack_text_escapes_every_value() {
        let evil = "<!channel> <https://evil.example|click> & `code`";
        let req = event(
            "capability.approval_requested",
            json!({"approvalId": "apr_1", "reasons": [evil], "types": ["manager"], "expiresAt": "x", "namespace": "org_1"}),
        );
        let n = notification(&req, Some("https://cg.example/console")).expect("a notification");
        assert_eq!(n["namespace"], "org_1");
        let text = slack(&n)["text"].as_str().expect("text").to_string();
        assert!(!text.contains("<!channel>"), "{text}");
        assert!(!text.contains("<https://evil"), "{text}");
        assert!(
            text.contains("&lt;!channel&gt; &lt;https://evil.example|click&gt; &amp; 'code'"),
            "{text}"
        );
        let dec = event(
            "capability.approved",
            json!({"approvalId": "apr_1", "approver": {"id": "<!here>", "kind": "user"}, "namespace": "org_9", "requesterNamespace": "org_1"}),
        );
        let n = notification(&dec, None).expect("a notification");
        assert_eq!(
            n["namespace"], "org_1",
            "the approval's namespace, not the approver's"
        );
        let text = slack(&n)["text"].as_str().expect("text").to_string();
        assert!(
            text.contains("&lt;!here&gt;") && !text.contains("<!here>"),
            "{text}"
        );
    }

    #[test]
    fn requested_and_decided_approvals_become_notifications_and_nothing_else_does() {
        let req = event(
            "capability.approval_requested",
            json!({"approvalId": "apr_1", "reasons": ["Refund of $649 exceeds $500"], "types": ["manager"], "expiresAt": "x"}),
        );
        let n = notification(&req, Some("https://cg.example/console/")).expect("a notification");
        assert_eq!(n["type"], "approval.requested");
        assert_eq!(n["id"], "c:4");
        assert_eq!(n["link"], "https://cg.example/console/approvals/apr_1");
        assert_eq!(n["requestedBy"]["id"], "dana");
        assert_eq!(n["approvalTypes"][0], "manager");
        let text = slack(&n)["text"].as_str().expect("text").to_string();
        assert!(text.contains("Refund of $649 exceeds $500"), "{text}");
        assert!(
            text.contains("<https://cg.example/console/approvals/apr_1|apr_1>"),
            "{text}"
        );
        let dec = event(
            "capability.rejected",
            json!({"approvalId": "apr_1", "approver": {"id": "olga", "kind": "user"}}),
        );
        let n = notification(&dec, None).expect("a notification");
        assert_eq!(
            (n["type"].as_str(), n["decision"].as_str()),
            (Some("approval.decided"), Some("rejected"))
        );
        assert!(n.get("link").is_none());
        let exp = event(
            "capgate.approval.expired",
            json!({"approvalId": "apr_1", "expiresAt": "2026-12-04T10:05:00Z"}),
        );
        let n = notification(&exp, None).expect("a notification");
        assert_eq!(n["type"], "approval.expired");
        assert!(
            slack(&n)["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("*Approval expired*"))
        );
        assert!(
            notification(
                &event("capability.started", json!({"approvalId": "apr_1"})),
                None
            )
            .is_none()
        );
    }

    #[test]
    fn the_signature_is_the_standard_webhooks_one() {
        // The example of the Standard Webhooks specification.
        let key = signing_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            signature(&key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
    }
}
