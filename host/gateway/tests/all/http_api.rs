//! The capability gateway and the approvals API over real HTTP, on a SQLite store.

use crate::gateway_support;

use capgate_client::{CapabilityClient, ClientError, InvocationOptions};
use capgate_core::authz::Operation;
use capgate_core::journal::InvocationState;
use capgate_gateway::routes::{GatewayOptions, GatewayOptionsError};
use capgate_gateway::wire::{CapabilityOutcome, GatewayErrorBody, PortableApproval};
use gateway_support::{Counters, TestServer};
use serde_json::{Value, json};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

fn ok<T, E: std::fmt::Debug>(r: Result<T, E>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("unexpected error: {e:?}"),
    }
}

fn opts(id: &str) -> InvocationOptions {
    InvocationOptions::new(id)
}

/// Invoke `orders.refund`, expecting it held for approval: the outcome and its approval.
async fn held_refund(
    client: &CapabilityClient,
    input: Value,
    options: InvocationOptions,
) -> (CapabilityOutcome, PortableApproval) {
    let held = ok(client.invoke("orders.refund", input, options).await);
    let CapabilityOutcome::ApprovalRequired { approval, .. } = &held else {
        panic!("expected approval-required, got {held:?}");
    };
    let approval = approval.clone();
    (held, approval)
}

/// A raw POST to the gateway.
async fn post(
    server: &TestServer,
    op: &str,
    token: Option<&str>,
    body: impl Into<reqwest::Body>,
) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .post(format!("{}/{op}", server.url()))
        .header("content-type", "application/json")
        .body(body);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let res = ok(req.send().await);
    let status = res.status().as_u16();
    let text = ok(res.text().await);
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn error_code(body: &Value) -> String {
    let parsed: GatewayErrorBody = ok(serde_json::from_value(body.clone()));
    parsed.error.code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_completed_call_is_recorded_and_replayed_without_running_again() {
    let s = TestServer::sqlite().await;
    let dana = s.client("tok-dana");
    let input = json!({"orderId": "ord_1", "amount": 20});
    let first = ok(dana
        .invoke(
            "orders.refund",
            input.clone(),
            opts("inv-1").correlation_id("run-7"),
        )
        .await);
    let CapabilityOutcome::Completed {
        invocation_id,
        execution_id,
        output,
    } = &first
    else {
        panic!("expected completed, got {first:?}");
    };
    assert_eq!(invocation_id, "inv-1");
    assert!(execution_id.starts_with("exe_"));
    assert_eq!(output["actor"], "u_dana");
    assert_eq!(output["correlationId"], "run-7");
    let key = output["idempotencyKey"].as_str().unwrap_or_default();
    assert!(
        key.starts_with("idk_"),
        "the journal's key reaches the procedure: {key}"
    );
    assert_eq!(s.counters.refunds(), 1);

    // The same invocation again (any number of times): the recorded outcome, no new run.
    for _ in 0..3 {
        let again = ok(dana
            .invoke("orders.refund", input.clone(), opts("inv-1"))
            .await);
        assert_eq!(again, first);
    }
    assert_eq!(s.counters.refunds(), 1);

    let receipt = ok(dana.get_invocation("inv-1").await);
    let receipt = receipt.unwrap_or_else(|| panic!("a receipt"));
    assert_eq!(receipt.state, InvocationState::Settled);
    assert_eq!(receipt.capability_id, "orders.refund");
    assert_eq!(receipt.correlation_id.as_deref(), Some("run-7"));
    assert_eq!(receipt.outcome.as_ref(), Some(&first));
    assert_eq!(receipt.contract_digest.as_ref().map(String::len), Some(64));
    assert!(receipt.created_at <= receipt.updated_at);

    // Every replay was authorized afresh with the caller's input.
    let invokes = s
        .authorizer
        .asked()
        .into_iter()
        .filter(|a| a.operation == Operation::Invoke)
        .count();
    assert_eq!(invokes, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_completes_and_lookups_of_unknown_ids_are_null() {
    let s = TestServer::sqlite().await;
    let dana = s.client("tok-dana");
    let out = ok(dana
        .invoke("orders.lookup", json!({"orderId": "ord_9"}), opts("look-1"))
        .await);
    assert_eq!(out.status(), "completed");
    assert_eq!(s.counters.lookup.load(Ordering::SeqCst), 1);
    assert_eq!(ok(dana.get_invocation("nope").await), None);
    assert_eq!(ok(dana.get_approval("apr_nope").await), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn changed_input_or_capability_under_the_same_id_is_an_invocation_conflict() {
    let s = TestServer::sqlite().await;
    let dana = s.client("tok-dana");
    let first = ok(dana
        .invoke(
            "orders.refund",
            json!({"orderId": "ord_1", "amount": 20}),
            opts("inv-c"),
        )
        .await);
    assert_eq!(first.status(), "completed");
    for (cap, input) in [
        ("orders.refund", json!({"orderId": "ord_1", "amount": 21})),
        ("orders.lookup", json!({"orderId": "ord_1"})),
    ] {
        let out = ok(dana.invoke(cap, input, opts("inv-c")).await);
        let CapabilityOutcome::Failed {
            execution_id,
            error,
            ..
        } = &out
        else {
            panic!("expected failed, got {out:?}");
        };
        assert_eq!(execution_id, "", "preflight: nothing was admitted");
        assert_eq!(error.code, "INVOCATION_CONFLICT");
    }
    // Key order does not matter: the fingerprint is the canonical input.
    let same = ok(dana
        .invoke(
            "orders.refund",
            json!({"amount": 20, "orderId": "ord_1"}),
            opts("inv-c"),
        )
        .await);
    assert_eq!(same, first);
    assert_eq!(s.counters.refunds(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stale_contract_digest_is_a_contract_mismatch_and_the_current_one_runs() {
    let s = TestServer::sqlite().await;
    let dana = s.client("tok-dana");
    let contract = ok(dana.contract().await);
    let ids: Vec<&str> = contract.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "orders.lookup",
            "orders.refund",
            "orders.flaky",
            "jobs.slow"
        ],
        "internal.export is not on aiSdk"
    );
    let refund = contract
        .iter()
        .find(|d| d.id == "orders.refund")
        .unwrap_or_else(|| panic!("refund in contract"));
    assert_eq!(refund.tool_names.ai_sdk, "orders_refund");
    assert_eq!(refund.path, ["orders", "refund"]);

    let input = json!({"orderId": "ord_1", "amount": 20});
    let stale = ok(dana
        .invoke(
            "orders.refund",
            input.clone(),
            opts("inv-d1").contract_digest("0".repeat(64)),
        )
        .await);
    assert_eq!(
        stale.error().map(|e| e.code.as_str()),
        Some("CONTRACT_MISMATCH")
    );
    assert_eq!(stale.execution_id(), Some(""));
    assert_eq!(s.counters.refunds(), 0);
    // Nothing was claimed: the id is still free.
    assert_eq!(ok(dana.get_invocation("inv-d1").await), None);

    let current = ok(dana
        .invoke(
            "orders.refund",
            input,
            opts("inv-d1").contract_digest(refund.contract_digest.clone()),
        )
        .await);
    assert_eq!(current.status(), "completed");
    let receipt = ok(dana.get_invocation("inv-d1").await);
    assert_eq!(
        receipt.and_then(|r| r.contract_digest),
        Some(refund.contract_digest.clone())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn describe_is_actor_filtered_and_carries_the_contract_digests() {
    let s = TestServer::sqlite().await;
    let dana = s.client("tok-dana");
    let contract = ok(dana.contract().await);
    let described = ok(dana.describe(None).await);
    assert_eq!(described, contract);
    let scoped = ok(dana
        .describe(Some(capgate_core::runtime::Scope {
            tags: vec!["payments".into()],
            ids: vec![],
        }))
        .await);
    let ids: Vec<&str> = scoped.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["orders.refund"]);

    let tools: Value = ok(ok(reqwest::Client::new()
        .get(format!("{}/tools?format=openai", s.url()))
        .bearer_auth("tok-dana")
        .send()
        .await)
    .json()
    .await);
    assert_eq!(tools[0]["type"], "function");
    assert_eq!(tools[0]["function"]["name"], "orders_lookup");
    let bad = ok(reqwest::Client::new()
        .get(format!("{}/tools?format=xml", s.url()))
        .bearer_auth("tok-dana")
        .send()
        .await);
    assert_eq!(bad.status().as_u16(), 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn approval_flows_through_the_approvals_api_and_resumes_exactly_once() {
    let s = TestServer::sqlite().await;
    let dana = s.client("tok-dana");
    let input = json!({"orderId": "ord_42", "amount": 649});
    let (held, approval) =
        held_refund(&dana, input.clone(), opts("inv-a").correlation_id("run-9")).await;
    let approval_id = approval.id.clone();
    assert!(approval.reasons[0].contains("exceeds $500"));
    assert_eq!(s.counters.refunds(), 0);

    // The requester can read it; the receipt is settled as approval-required.
    let seen = ok(dana.get_approval(&approval_id).await);
    assert_eq!(seen.map(|a| a.status.as_str()), Some("pending"));
    let receipt = ok(dana.get_invocation("inv-a").await).unwrap_or_else(|| panic!("receipt"));
    assert_eq!(receipt.state, InvocationState::Settled);
    assert_eq!(receipt.approval_id.as_deref(), Some(approval_id.as_str()));
    // Replaying the invoke answers the same approval-required outcome.
    assert_eq!(
        ok(dana
            .invoke("orders.refund", input.clone(), opts("inv-a"))
            .await),
        held
    );

    // Resuming before a decision is a governed refusal that keeps the call waiting.
    let early = ok(dana
        .resume_approval(&approval_id, InvocationOptions::new("inv-a"))
        .await);
    assert_eq!(
        early.error().map(|e| e.code.as_str()),
        Some("APPROVAL_PENDING")
    );

    let http = reqwest::Client::new();
    let approvals = format!("{}/approvals", s.origin);
    // The requester holds no approver role: no listing, no decision.
    let refused = ok(http.get(&approvals).bearer_auth("tok-dana").send().await);
    assert_eq!(refused.status().as_u16(), 403);
    let refused = ok(http
        .post(format!("{approvals}/{approval_id}/decision"))
        .bearer_auth("tok-dana")
        .json(&json!({"decision": "approved"}))
        .send()
        .await);
    assert_eq!(refused.status().as_u16(), 403);
    let anonymous = ok(http.get(&approvals).send().await);
    assert_eq!(anonymous.status().as_u16(), 401);

    // The approver lists pending approvals for the capability and sees the input.
    let listed: Value = ok(ok(http
        .get(format!(
            "{approvals}?status=pending&capability=orders.refund"
        ))
        .bearer_auth("tok-priya")
        .send()
        .await)
    .json()
    .await);
    assert_eq!(listed[0]["id"], approval_id.as_str());
    assert_eq!(listed[0]["requester"]["id"], "u_dana");
    assert_eq!(listed[0]["input"], input);
    assert!(listed[0]["requester"].get("attributes").is_none());
    let one: Value = ok(ok(http
        .get(format!("{approvals}/{approval_id}"))
        .bearer_auth("tok-priya")
        .send()
        .await)
    .json()
    .await);
    assert_eq!(one["status"], "pending");
    // The decider comes from the credential; a body field cannot name one.
    let forged = ok(http
        .post(format!("{approvals}/{approval_id}/decision"))
        .bearer_auth("tok-priya")
        .json(&json!({"decision": "approved", "approver": "u_dana"}))
        .send()
        .await);
    assert_eq!(forged.status().as_u16(), 400);
    let decided: Value = ok(ok(http
        .post(format!("{approvals}/{approval_id}/decision"))
        .bearer_auth("tok-priya")
        .json(&json!({"decision": "approved", "comment": "ok"}))
        .send()
        .await)
    .json()
    .await);
    assert_eq!(decided["status"], "approved");
    assert_eq!(decided["decision"]["approver"]["id"], "u_priya");
    // Deciding executes nothing, and a second decision conflicts.
    assert_eq!(s.counters.refunds(), 0);
    let twice = ok(http
        .post(format!("{approvals}/{approval_id}/decision"))
        .bearer_auth("tok-priya")
        .json(&json!({"decision": "rejected"}))
        .send()
        .await);
    assert_eq!(twice.status().as_u16(), 409);

    // Another actor cannot resume it (their scope holds no such approval).
    let eve = ok(s
        .client("tok-eve")
        .resume_approval(&approval_id, InvocationOptions::new("inv-a"))
        .await);
    assert_eq!(eve.error().map(|e| e.code.as_str()), Some("INTERNAL_ERROR"));
    assert_eq!(s.counters.refunds(), 0);

    // The requester resumes under the original invocation id: it runs once.
    let done = ok(dana
        .resume_approval(&approval_id, InvocationOptions::new("inv-a"))
        .await);
    let CapabilityOutcome::Completed { output, .. } = &done else {
        panic!("expected completed, got {done:?}");
    };
    assert_eq!(output["approver"], "u_priya");
    assert_eq!(output["actor"], "u_dana");
    assert_eq!(output["correlationId"], "run-9");
    assert_eq!(s.counters.refunds(), 1);

    // A second resume (and a replayed invoke) answer the recorded result: no second run.
    assert_eq!(
        ok(dana
            .resume_approval(&approval_id, InvocationOptions::new("inv-a"))
            .await),
        done
    );
    assert_eq!(
        ok(dana.invoke("orders.refund", input, opts("inv-a")).await),
        done
    );
    assert_eq!(s.counters.refunds(), 1);
    let receipt = ok(dana.get_invocation("inv-a").await).unwrap_or_else(|| panic!("receipt"));
    assert_eq!(receipt.state, InvocationState::Settled);
    assert_eq!(receipt.outcome, Some(done));
    assert_eq!(receipt.approval_id.as_deref(), Some(approval_id.as_str()));
    let consumed = ok(dana.get_approval(&approval_id).await);
    assert_eq!(consumed.map(|a| a.status.as_str()), Some("consumed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rejected_approval_settles_the_invocation_as_failed() {
    let s = TestServer::sqlite().await;
    let dana = s.client("tok-dana");
    let (_, approval) = held_refund(
        &dana,
        json!({"orderId": "ord_5", "amount": 900}),
        opts("inv-r"),
    )
    .await;
    let res = ok(reqwest::Client::new()
        .post(format!("{}/approvals/{}/decision", s.origin, approval.id))
        .bearer_auth("tok-priya")
        .json(&json!({"decision": "rejected"}))
        .send()
        .await);
    assert_eq!(res.status().as_u16(), 200);
    let out = ok(dana
        .resume_approval(&approval.id, InvocationOptions::new("inv-r"))
        .await);
    assert_eq!(
        out.error().map(|e| e.code.as_str()),
        Some("APPROVAL_REJECTED")
    );
    assert_eq!(
        ok(dana
            .resume_approval(&approval.id, InvocationOptions::new("inv-r"))
            .await),
        out
    );
    assert_eq!(s.counters.refunds(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn receipt_reads_are_authorized_with_the_stored_input() {
    let s = TestServer::sqlite().await;
    let dana = s.client("tok-dana");
    let input = json!({"orderId": "ord_secret", "amount": 5});
    let out = ok(dana
        .invoke("orders.refund", input.clone(), opts("inv-s"))
        .await);
    assert_eq!(out.status(), "completed");
    let denied = dana.get_invocation("inv-s").await;
    match denied {
        Err(ClientError::Gateway { status, error }) => {
            assert_eq!(status, 403);
            assert_eq!(error.code, "FORBIDDEN");
        }
        other => panic!("expected 403, got {other:?}"),
    }
    let asked = s.authorizer.asked();
    let last = asked.last().unwrap_or_else(|| panic!("asked"));
    assert_eq!(last.operation, Operation::GetInvocation);
    assert_eq!(last.capability_id.as_deref(), Some("orders.refund"));
    assert_eq!(last.input.as_ref(), Some(&input));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn another_actors_or_namespaces_records_read_as_null() {
    let s = TestServer::sqlite().await;
    let dana = s.client("tok-dana");
    let (_, approval) = held_refund(
        &dana,
        json!({"orderId": "ord_7", "amount": 700}),
        opts("inv-o"),
    )
    .await;
    for token in ["tok-eve", "tok-dana-org2"] {
        let other = s.client(token);
        assert_eq!(ok(other.get_invocation("inv-o").await), None, "{token}");
        assert_eq!(ok(other.get_approval(&approval.id).await), None, "{token}");
    }
    // The same id is free in another scope: eve's call is her own.
    let eve = ok(s
        .client("tok-eve")
        .invoke("orders.lookup", json!({"orderId": "ord_7"}), opts("inv-o"))
        .await);
    assert_eq!(eve.status(), "completed");
    // A missing record reaches the authorizer without capability or input.
    let asked = s.authorizer.asked();
    assert!(asked.iter().any(|a| a.actor == "u_eve"
        && a.operation == Operation::GetInvocation
        && a.capability_id.is_none()
        && a.input.is_none()));
}

/// SI-3 (the model is never the actor: identity comes from the credential only).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn requests_without_valid_credentials_are_401() {
    let s = TestServer::sqlite().await;
    let body =
        json!({"capabilityId": "orders.lookup", "input": {"orderId": "o"}, "invocationId": "i"});
    for token in [None, Some("tok-wrong"), Some("tok-anon"), Some("tok-nons")] {
        let (status, body) = post(&s, "invoke", token, body.to_string()).await;
        assert_eq!(status, 401, "{token:?}");
        assert_eq!(error_code(&body), "UNAUTHENTICATED");
    }
    let (status, _) = post(&s, "describe", None, "{}").await;
    assert_eq!(status, 401);
    let contract = ok(reqwest::Client::new()
        .get(format!("{}/contract", s.url()))
        .send()
        .await);
    assert_eq!(contract.status().as_u16(), 401);
    assert_eq!(s.counters.lookup.load(Ordering::SeqCst), 0);
    assert!(
        s.authorizer.asked().is_empty(),
        "nothing unauthenticated is authorized"
    );
}

/// SI-3 (a body cannot carry an actor, namespace, context or surface).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn malformed_requests_are_400_with_a_precise_message_and_large_ones_413() {
    let s = TestServer::sqlite().await;
    let t = Some("tok-dana");
    let (status, body) = post(
        &s,
        "invoke",
        t,
        json!({"capabilityId": "orders.lookup", "input": {"orderId": "o"}, "invocationId": "i", "actor": "u_admin"})
            .to_string(),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(error_code(&body), "BAD_REQUEST");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("unknown field `actor`"), "{message}");

    let (status, body) = post(&s, "invoke", t, "{not json").await;
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("invoke")
    );

    let (status, body) = post(
        &s,
        "invoke",
        t,
        json!({"capabilityId": "orders.lookup", "input": {}, "invocationId": "x".repeat(257)})
            .to_string(),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("invocationId")
    );

    let (status, body) = post(
        &s,
        "getInvocation",
        t,
        json!({"invocationId": "i", "surface": "direct"}).to_string(),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("surface")
    );

    let tags: Vec<String> = (0..1001).map(|i| format!("t{i}")).collect();
    let (status, body) = post(
        &s,
        "describe",
        t,
        json!({"scope": {"tags": tags}}).to_string(),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("1000")
    );

    let (status, body) = post(
        &s,
        "describe",
        t,
        json!({"scope": {"tags": [], "other": 1}}).to_string(),
    )
    .await;
    assert_eq!(status, 400, "{body}");

    // The fixture caps bodies at 64 KiB.
    let huge = json!({"capabilityId": "orders.lookup", "input": {"orderId": "x".repeat(70_000)}, "invocationId": "big"});
    let (status, body) = post(&s, "invoke", t, huge.to_string()).await;
    assert_eq!(status, 413);
    assert_eq!(error_code(&body), "PAYLOAD_TOO_LARGE");
    assert_eq!(s.counters.lookup.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failure_after_the_procedure_was_entered_is_outcome_unknown_and_stays_pending() {
    let s = TestServer::sqlite().await;
    let dana = s.client("tok-dana");
    let out = ok(dana.invoke("orders.flaky", json!({}), opts("inv-f")).await);
    assert_eq!(
        out,
        CapabilityOutcome::OutcomeUnknown {
            invocation_id: "inv-f".into()
        }
    );
    let receipt = ok(dana.get_invocation("inv-f").await).unwrap_or_else(|| panic!("receipt"));
    assert_eq!(receipt.state, InvocationState::Pending);
    assert_eq!(receipt.outcome, None);
    // Asking again never reruns an uncertain write.
    let again = ok(dana.invoke("orders.flaky", json!({}), opts("inv-f")).await);
    assert_eq!(again.status(), "outcome-unknown");
    assert_eq!(s.counters.flaky.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_work_budget_cancels_a_slow_procedure_and_leaves_the_receipt_pending() {
    let s = TestServer::sqlite().await;
    let dana = s.short_client("tok-dana");
    let started = Instant::now();
    let out = ok(dana.invoke("jobs.slow", json!({}), opts("inv-slow")).await);
    let took = started.elapsed();
    assert_eq!(out.status(), "outcome-unknown");
    assert!(took >= Duration::from_millis(900), "{took:?}");
    // The 1.5 s ceiling bounds the answer (with slack for a loaded machine).
    assert!(
        took < Duration::from_millis(2_500),
        "the ceiling bounds the answer: {took:?}"
    );
    assert!(s.counters.slow_cancelled.load(Ordering::SeqCst));
    let receipt = ok(dana.get_invocation("inv-slow").await).unwrap_or_else(|| panic!("receipt"));
    assert_eq!(receipt.state, InvocationState::Pending);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_that_goes_away_cancels_the_run() {
    let s = TestServer::sqlite().await;
    let impatient = ok(s
        .client("tok-dana")
        .with_timeout(Duration::from_millis(300)));
    let out = ok(impatient
        .invoke("jobs.slow", json!({}), opts("inv-gone"))
        .await);
    assert_eq!(
        out.status(),
        "outcome-unknown",
        "a lost response is unknown"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !s.counters.slow_cancelled.load(Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "the run was not cancelled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(s.counters.slow.load(Ordering::SeqCst), 1);
    let receipt = ok(s.client("tok-dana").get_invocation("inv-gone").await);
    assert_eq!(receipt.map(|r| r.state), Some(InvocationState::Pending));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn health_and_readiness() {
    let s = TestServer::sqlite().await;
    for path in ["healthz", "readyz"] {
        let res = ok(reqwest::get(format!("{}/{path}", s.origin)).await);
        assert_eq!(res.status().as_u16(), 200, "{path}");
    }
    s.store.close().await;
    let res = ok(reqwest::get(format!("{}/readyz", s.origin)).await);
    assert_eq!(res.status().as_u16(), 503);
    let res = ok(reqwest::get(format!("{}/healthz", s.origin)).await);
    assert_eq!(res.status().as_u16(), 200);
}

#[tokio::test]
async fn the_audit_drain_must_fit_inside_the_request_ceiling() {
    let counters = Counters::default();
    let runtime = capgate_core::runtime::Runtime::builder(gateway_support::registry(&counters))
        .build()
        .expect("a valid runtime");
    let config = GatewayOptions::new(
        capgate_core::actor::Surface::AiSdk,
        "r1",
        runtime,
        std::sync::Arc::new(capgate_core::journal::InMemoryInvocationJournal::new()),
        capgate_gateway::door::Doorkeeper::new(
            gateway_support::authenticator(),
            std::sync::Arc::new(gateway_support::RecordingAuthorizer::default()),
        ),
    );
    let err = config
        .clone()
        .with_timeouts(Duration::from_secs(5), Duration::from_secs(5))
        .err();
    assert!(matches!(
        err,
        Some(GatewayOptionsError::DrainNotBelowRequestTimeout { .. })
    ));
    let mut direct = config.clone();
    direct.surface = capgate_core::actor::Surface::Direct;
    assert!(capgate_gateway::routes::capability_router(direct).is_err());
    assert!(capgate_gateway::routes::capability_router(config).is_ok());
}
