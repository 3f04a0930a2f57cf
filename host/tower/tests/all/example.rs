//! The example shop (`examples/tower-gateway`) over real HTTP: its governed refund route is
//! held for approval, runs once with the approved input when resumed, refuses what it
//! cannot govern before anything runs, and hides the handler's failures; its ungoverned
//! routes answer exactly as the plain shop does.

use super::common::{self, start};
use capgate_client::wire::GatewayErrorBody;
use capgate_core::actor::Surface;
use capgate_core::approval::DecisionStatus;
use capgate_core::runtime::ResumeOptions;
use capgate_example_tower::{Shop, plain_app};
use capgate_testkit::actors::{dana, priya_decides};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Resume options of Dana's own call, on the gate's surface.
fn danas_resume() -> ResumeOptions {
    ResumeOptions {
        expected_actor: Some(dana().reference()),
        expected_surface: Some(Surface::AiSdk),
        expected_namespace: Some(String::new()),
        ..ResumeOptions::default()
    }
}

/// The refusal body of a door, decoded as the gateway's own error body.
async fn refusal(response: reqwest::Response) -> GatewayErrorBody {
    response
        .json::<GatewayErrorBody>()
        .await
        .expect("a door refusal in the gateway's error body")
}

#[tokio::test]
async fn a_refund_over_the_limit_is_held_and_after_approval_runs_once_with_the_approved_input() {
    let shop = start().await;
    let input = json!({"orderId": "ord_42", "amount": 649});

    let held = shop.refund(input.clone(), true).await;
    assert_eq!(held.status(), StatusCode::ACCEPTED);
    let envelope: Value = held.json().await.expect("a JSON envelope");
    assert_eq!(envelope["status"], "approval-required");
    assert_eq!(envelope["approval"]["capabilityId"], "orders.refund");
    assert_eq!(
        envelope["approval"]["reasons"],
        json!(["Refund of $649 exceeds $500"])
    );
    assert!(
        shop.shop.refunds().is_empty(),
        "a held call never reaches the handler"
    );
    let approval_id = envelope["approval"]["id"]
        .as_str()
        .expect("an approval id")
        .to_owned();

    // Before a decision the call stays held, and nothing runs.
    let early = shop.runtime.resume(&approval_id, danas_resume()).await;
    assert_eq!(
        early.error().map(|e| e.to_public().code),
        Some(capgate_core::error::ErrorCode::ApprovalPending)
    );
    assert!(shop.shop.refunds().is_empty());

    shop.runtime
        .approvals()
        .decide(
            &approval_id,
            priya_decides(DecisionStatus::Approved, Some("checked")),
        )
        .await
        .expect("Priya approves");
    let resumed = shop.runtime.resume(&approval_id, danas_resume()).await;
    assert_eq!(resumed.status(), "completed", "{resumed:?}");
    assert_eq!(
        resumed.output(),
        Some(&json!({
            "refundId": "ref_1",
            "orderId": "ord_42",
            "amount": 649,
            "status": "issued",
            "approvedBy": "u_priya",
        }))
    );
    assert_eq!(
        shop.shop.refunds(),
        vec![input],
        "the handler ran exactly once, with exactly the approved input"
    );
    // The embedder's own resume route answers it as the gate would.
    assert_eq!(
        capgate_tower::answer(&resumed).status(),
        http::StatusCode::OK
    );

    let again = shop.runtime.resume(&approval_id, danas_resume()).await;
    assert_eq!(
        again.error().map(|e| e.to_public().code),
        Some(capgate_core::error::ErrorCode::ApprovalConsumed)
    );
    assert_eq!(
        capgate_tower::answer(&again).status(),
        http::StatusCode::CONFLICT
    );
    assert_eq!(
        shop.shop.refunds().len(),
        1,
        "a consumed approval runs nothing"
    );
}

#[tokio::test]
async fn a_refund_under_the_limit_answers_the_handlers_own_output() {
    let shop = start().await;
    let answer = shop
        .refund(json!({"orderId": "ord_1", "amount": 20}), true)
        .await;
    assert_eq!(answer.status(), StatusCode::OK);
    assert_eq!(
        answer.headers()["content-type"],
        "application/json",
        "the output as JSON"
    );
    let output: Value = answer.json().await.expect("JSON output");
    assert_eq!(
        output,
        json!({"refundId": "ref_1", "orderId": "ord_1", "amount": 20, "status": "issued", "approvedBy": null})
    );
    assert_eq!(shop.shop.refunds().len(), 1);
    let types = shop.audit.types();
    assert!(
        types.contains(&"capability.requested") && types.contains(&"capability.completed"),
        "{types:?}"
    );
}

#[tokio::test]
async fn ungoverned_routes_answer_exactly_as_the_plain_shop_does() {
    let governed = start().await;
    let plain = common::serve(plain_app(Shop::default())).await;
    let client = reqwest::Client::new();
    for (method, path, as_dana) in [
        (reqwest::Method::GET, "/orders/ord_1", false),
        (reqwest::Method::GET, "/orders/ord_1", true),
        (reqwest::Method::GET, "/health", false),
        // The governed path with another method is not governed: the router's own 405.
        (reqwest::Method::GET, "/orders/refund", true),
        (reqwest::Method::GET, "/nowhere", false),
    ] {
        let mut answers = Vec::new();
        for base in [&governed.base, &plain] {
            let mut request = client.request(method.clone(), format!("{base}{path}"));
            if as_dana {
                request = request.bearer_auth("dana-key");
            }
            let response = request.send().await.expect("an answer");
            let status = response.status();
            let mut headers: Vec<(String, Vec<u8>)> = response
                .headers()
                .iter()
                .filter(|(name, _)| *name != "date")
                .map(|(name, value)| (name.to_string(), value.as_bytes().to_vec()))
                .collect();
            headers.sort();
            let body = response.bytes().await.expect("a body");
            answers.push((status, headers, body));
        }
        assert_eq!(answers[0], answers[1], "{method} {path}");
    }
    assert!(
        governed.audit.events().is_empty(),
        "ungoverned requests never meet the runtime"
    );
}

#[tokio::test]
async fn a_governed_route_without_a_principal_is_401_and_runs_nothing() {
    let shop = start().await;
    let input = json!({"orderId": "ord_1", "amount": 20});
    let anonymous = shop.refund(input.clone(), false).await;
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(refusal(anonymous).await.error.code, "UNAUTHENTICATED");

    let wrong_key = shop
        .client
        .post(format!("{}/orders/refund", shop.base))
        .bearer_auth("eve-key")
        .json(&input)
        .send()
        .await
        .expect("an answer");
    assert_eq!(wrong_key.status(), StatusCode::UNAUTHORIZED);

    assert!(shop.shop.refunds().is_empty());
    assert!(
        shop.audit.events().is_empty(),
        "refused at the door, before the runtime"
    );
}

#[tokio::test]
async fn oversized_malformed_or_invalid_governed_requests_are_refused_before_anything_runs() {
    let shop = start().await;
    let url = format!("{}/orders/refund", shop.base);
    let send = |request: reqwest::RequestBuilder| async move {
        request
            .bearer_auth("dana-key")
            .send()
            .await
            .expect("an answer")
    };

    // Over the example's 64 KiB limit, declared by Content-Length (a body streamed past
    // it is `gate::a_body_streamed_past_the_limit_is_413_and_runs_nothing`).
    let huge = format!(
        r#"{{"orderId": "ord_1", "amount": 20, "reason": "{}"}}"#,
        "x".repeat(70_000)
    );
    let too_large = send(
        shop.client
            .post(&url)
            .header("content-type", "application/json")
            .body(huge),
    )
    .await;
    assert_eq!(too_large.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(refusal(too_large).await.error.code, "PAYLOAD_TOO_LARGE");

    let not_json = send(
        shop.client
            .post(&url)
            .header("content-type", "application/json")
            .body("amount=20"),
    )
    .await;
    assert_eq!(not_json.status(), StatusCode::BAD_REQUEST);
    assert_eq!(refusal(not_json).await.error.code, "BAD_REQUEST");

    let form = send(
        shop.client
            .post(&url)
            .header("content-type", "text/plain")
            .body(r#"{"orderId": "ord_1", "amount": 20}"#),
    )
    .await;
    assert_eq!(form.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);

    let query = send(
        shop.client
            .post(format!("{url}?amount=9999"))
            .json(&json!({"orderId": "ord_1", "amount": 20})),
    )
    .await;
    assert_eq!(query.status(), StatusCode::BAD_REQUEST);

    // JSON the schema refuses: the runtime's INPUT_INVALID, with the issue's path.
    let invalid = send(
        shop.client
            .post(&url)
            .json(&json!({"orderId": "ord_1", "amount": -5})),
    )
    .await;
    assert_eq!(invalid.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let envelope: Value = invalid.json().await.expect("a JSON envelope");
    assert_eq!(envelope["status"], "failed");
    assert_eq!(envelope["error"]["code"], "INPUT_INVALID");

    assert!(
        shop.shop.refunds().is_empty(),
        "the handler never ran for any of them"
    );
}

#[tokio::test]
async fn a_failing_handler_is_a_failed_envelope_that_never_shows_its_text() {
    let shop = start().await;
    let failed = shop
        .refund(json!({"orderId": "ord_missing", "amount": 20}), true)
        .await;
    // The shop's own 404 (issue 55: not a hidden 500), without its text.
    assert_eq!(failed.status(), StatusCode::NOT_FOUND);
    let text = failed.text().await.expect("a body");
    assert!(
        !text.contains("orders_v2") && !text.contains("shard"),
        "the handler's text leaked: {text}"
    );
    let envelope: Value = serde_json::from_str(&text).expect("a JSON envelope");
    assert_eq!(envelope["status"], "failed");
    assert_eq!(
        envelope["error"],
        json!({"code": "EXECUTION_FAILED", "message": "The application refused the request (404 Not Found).", "retryable": false})
    );
    assert_eq!(
        envelope.get("effectStatus"),
        None,
        "the handler answered a refusal: the effect is known not to have happened"
    );

    // The audit trail has the real code; neither it nor anything else has the text.
    let trail = serde_json::to_string(&shop.audit.events()).expect("events serialize");
    assert!(trail.contains("EXECUTION_FAILED"), "{trail}");
    assert!(!trail.contains("orders_v2"), "{trail}");
}
