//! Property tests of the policy combination laws (docs/pipeline.md, stage 7): for random batches of
//! policy outcomes, the combined verdict of the real `combine` (the function every
//! pipeline stage calls) obeys failure > deny > hide > require-approval > allow whatever
//! the order, and the merged approval requirement carries the same reasons, types,
//! policies, minimum expiry and untyped flag for every permutation of the batch.

use capgate_core::policy::{
    ApprovalRequirement, Evaluated, PolicyDecision, PolicyError, Verdict, combine,
};
use proptest::prelude::*;

/// One policy's outcome; names are unique per batch (`p0`, `p1`, ...), as in a runtime.
fn outcome() -> impl Strategy<Value = Result<PolicyDecision, PolicyError>> {
    let reason = "[a-c]{1,2}";
    let approval_type = proptest::option::of("(manager|finance|self)");
    let expiry = proptest::option::of(1u64..5);
    prop_oneof![
        3 => Just(Ok(PolicyDecision::Allow)),
        2 => (proptest::option::of("[a-z]{1,3}"), proptest::option::of("[a-z ]{0,5}"))
            .prop_map(|(code, message)| Ok(PolicyDecision::Deny { code, message })),
        2 => Just(Ok(PolicyDecision::Hide)),
        3 => (reason, approval_type, expiry).prop_map(|(reason, approval_type, expires_in_ms)| {
            Ok(PolicyDecision::RequireApproval { reason, approval_type, expires_in_ms })
        }),
        1 => "[a-z]{1,4}".prop_map(|m| Err(PolicyError::Failed(m))),
    ]
}

fn batch(max: usize) -> impl Strategy<Value = Vec<Evaluated>> {
    proptest::collection::vec(outcome(), 0..max).prop_map(|outcomes| {
        outcomes
            .into_iter()
            .enumerate()
            .map(|(i, outcome)| Evaluated {
                policy: format!("p{i}"),
                outcome,
                provenance: None,
            })
            .collect()
    })
}

/// A batch and a permutation of it.
fn batch_and_permutation() -> impl Strategy<Value = (Vec<Evaluated>, Vec<Evaluated>)> {
    batch(9).prop_flat_map(|b| {
        let shuffled = Just(b.clone()).prop_shuffle();
        (Just(b), shuffled)
    })
}

/// The precedence rank of one stance: the verdict is the stance of highest rank.
fn rank(outcome: &Result<PolicyDecision, PolicyError>) -> (u8, &'static str) {
    match outcome {
        Err(_) => (4, "error"),
        Ok(PolicyDecision::Deny { .. }) => (3, "deny"),
        Ok(PolicyDecision::Hide) => (2, "hide"),
        Ok(PolicyDecision::RequireApproval { .. }) => (1, "require-approval"),
        Ok(PolicyDecision::Allow) => (0, "allow"),
    }
}

/// The requirement with its ordered lists sorted: the content that must not depend on
/// the order the policies ran in (the lists keep policy order by design, for display).
fn normalized(r: &ApprovalRequirement) -> ApprovalRequirement {
    let mut r = r.clone();
    r.reasons.sort();
    r.types.sort();
    r.policies.sort();
    r
}

/// One requirement to merge: asking policy, reason, type, expiry.
type Ask = (Option<String>, String, Option<String>, Option<u64>);

fn requirement(v: &Verdict) -> Option<&ApprovalRequirement> {
    match v {
        Verdict::ApprovalRequired(r) => Some(r),
        _ => None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_verdict_is_the_highest_ranked_stance_whatever_the_order(
        (batch, permuted) in batch_and_permutation()
    ) {
        let want = batch.iter().map(|e| rank(&e.outcome)).max().map_or("allow", |r| r.1);
        prop_assert_eq!(combine(&batch).kind(), want);
        prop_assert_eq!(combine(&permuted).kind(), want);
    }

    #[test]
    fn the_verdict_names_the_first_policy_of_the_winning_stance(batch in batch(9)) {
        let first = |stance: &str| {
            batch.iter().find(|e| rank(&e.outcome).1 == stance).map(|e| e.policy.clone())
        };
        match combine(&batch) {
            Verdict::Failed { policy, .. } => prop_assert_eq!(Some(policy), first("error")),
            Verdict::Denied { policy, code, message } => {
                prop_assert_eq!(Some(policy.clone()), first("deny"));
                let denied = batch.iter().find(|e| e.policy == policy).map(|e| &e.outcome);
                let is_same = matches!(
                    denied,
                    Some(Ok(PolicyDecision::Deny { code: c, message: m }))
                        if *c == code && *m == message
                );
                prop_assert!(is_same, "the deny's code and message are the first deny's");
            }
            Verdict::Hidden { policy } => prop_assert_eq!(Some(policy), first("hide")),
            Verdict::ApprovalRequired(_) | Verdict::Allowed => {}
        }
    }

    #[test]
    fn merged_approval_requirements_do_not_depend_on_policy_order(
        (batch, permuted) in batch_and_permutation()
    ) {
        let (a, b) = (combine(&batch), combine(&permuted));
        prop_assert_eq!(requirement(&a).map(normalized), requirement(&b).map(normalized));
        if let Some(r) = requirement(&a) {
            // Every reason (in policy order), every distinct type, every asking policy, the
            // minimum expiry; untyped when any requirement named no type.
            let asks: Vec<(&str, Option<&str>, Option<u64>, &str)> = batch
                .iter()
                .filter_map(|e| match &e.outcome {
                    Ok(PolicyDecision::RequireApproval { reason, approval_type, expires_in_ms }) => {
                        Some((reason.as_str(), approval_type.as_deref(), *expires_in_ms, e.policy.as_str()))
                    }
                    _ => None,
                })
                .collect();
            prop_assert_eq!(&r.reasons, &asks.iter().map(|a| a.0.to_string()).collect::<Vec<_>>());
            let mut types: Vec<String> = Vec::new();
            for t in asks.iter().filter_map(|a| a.1) {
                if !types.iter().any(|x| x == t) {
                    types.push(t.to_string());
                }
            }
            prop_assert_eq!(&r.types, &types);
            prop_assert_eq!(&r.policies, &asks.iter().map(|a| a.3.to_string()).collect::<Vec<_>>());
            prop_assert_eq!(r.expires_in_ms, asks.iter().filter_map(|a| a.2).min());
            prop_assert_eq!(r.untyped, asks.iter().any(|a| a.1.is_none()));
        }
    }

    #[test]
    fn merging_requirements_one_by_one_is_order_independent(
        (reqs, permuted) in proptest::collection::vec(
            (
                proptest::option::of("p[0-3]"),
                "[a-c]{1,2}",
                proptest::option::of("(manager|finance|self)"),
                proptest::option::of(1u64..5),
            ),
            0..8,
        )
        .prop_flat_map(|r| (Just(r.clone()), Just(r).prop_shuffle()))
    ) {
        let merge_all = |list: &[Ask]| {
            let mut acc = ApprovalRequirement::default();
            for (policy, reason, t, e) in list {
                acc.merge(policy.as_deref(), reason, t.as_deref(), *e);
            }
            acc
        };
        let (a, b) = (merge_all(&reqs), merge_all(&permuted));
        prop_assert_eq!(normalized(&a), normalized(&b));
        // Merging is idempotent on types and policies: no duplicates, whatever the order.
        let (mut types, mut policies) = (normalized(&a).types, normalized(&a).policies);
        types.dedup();
        policies.dedup();
        prop_assert_eq!(types.len(), a.types.len());
        prop_assert_eq!(policies.len(), a.policies.len());
        prop_assert_eq!(a.reasons.len(), reqs.len());
    }
}
