//! `capgate contract diff` and `capgate inspect` on the customer-support example against a
//! modified copy: the real binary, its classification and its exit statuses.

use crate::common;

use common::{capgate, capgate_output, deployment};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The example, and a copy with one change of each kind the review must see: orders.refund's
/// risk raised, a required input property on orders.checkEligibility, messages.draft removed,
/// messages.send exposed on workflow too, and customers.search reworded. They share the
/// suite's compile cache.
fn old_and_new(dir: &Path) -> (PathBuf, PathBuf) {
    for d in ["old", "new", "additive"] {
        std::fs::create_dir_all(dir.join(d)).expect("mkdir");
    }
    let old = deployment(&dir.join("old"), |t| t, "");
    let new = deployment(
        &dir.join("new"),
        |t| {
            let t = t
                .replace("risk = \"high\"", "risk = \"critical\"")
                .replace(
                    "properties = { orderId = { type = \"string\", minLength = 1 } }, required = [\"orderId\"]",
                    "properties = { orderId = { type = \"string\", minLength = 1 }, channel = { type = \"string\" } }, required = [\"orderId\", \"channel\"]",
                )
                .replace(
                    "\"Search customers by name or email.\"",
                    "\"Search customers by name, email or phone.\"",
                );
            let draft = t
                .find("[[capabilities]]\nid = \"messages.draft\"")
                .expect("messages.draft in the example");
            let next = draft
                + 1
                + t[draft + 1..]
                    .find("[[capabilities]]")
                    .expect("a capability after messages.draft");
            let t = format!("{}{}", &t[..draft], &t[next..]);
            t.replace(
                "expose = { aiSdk = true, mcp = true }",
                "expose = { aiSdk = true, mcp = true, workflow = true }",
            )
        },
        "",
    );
    (old, new)
}

fn json_diff(args: &[&str]) -> (Option<i32>, Value) {
    let out = capgate_output(args);
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "capgate {args:?} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), report)
}

/// The (field, impact) pairs of one capability's changes.
fn changes(report: &Value, id: &str) -> Vec<(String, String)> {
    let c = report["capabilities"]
        .as_array()
        .expect("capabilities")
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("{id} is not in the diff: {report:#}"));
    c["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|ch| {
            (
                ch["field"].as_str().unwrap_or_default().to_string(),
                ch["impact"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(f, i)| (f.to_string(), i.to_string()))
        .collect()
}

#[test]
fn contract_diff_classifies_the_example_changes_and_gates_on_breaking_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (old, new) = old_and_new(dir.path());
    let (old_s, new_s) = (old.to_str().expect("utf-8"), new.to_str().expect("utf-8"));

    // Two deployment files: every gateway surface, exposure included.
    let (code, r) = json_diff(&["contract", "diff", old_s, new_s, "--format", "json"]);
    assert_eq!(code, Some(1), "breaking changes exit 1: {r:#}");
    assert_eq!(r["format"], "capgate.contract-diff.v1");
    assert_eq!(
        r["surfaces"],
        serde_json::json!(["aiSdk", "mcp", "workflow"])
    );
    assert_eq!(r["breaking"], true);
    assert_eq!(changes(&r, "orders.refund"), pairs(&[("risk", "breaking")]));
    assert_eq!(
        changes(&r, "orders.checkEligibility"),
        pairs(&[
            ("inputSchema/properties/channel", "additive"),
            ("inputSchema/required", "breaking"),
        ])
    );
    assert_eq!(
        changes(&r, "messages.draft"),
        pairs(&[("capability", "breaking")])
    );
    assert_eq!(
        changes(&r, "messages.send"),
        pairs(&[("surfaces", "additive")])
    );
    assert_eq!(
        changes(&r, "customers.search"),
        pairs(&[("description", "additive")])
    );
    assert_eq!(r["summary"]["removed"], 1);
    assert_eq!(r["summary"]["changed"], 4);
    assert_eq!(r["summary"]["breakingChanges"], 3);

    // --allow-breaking: the same report, exit 0.
    let out = capgate_output(&["contract", "diff", old_s, new_s, "--allow-breaking"]);
    assert_eq!(out.status.code(), Some(0));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("orders.refund            changed  breaking  risk"),
        "{table}"
    );
    assert!(table.contains("risk raised: high → critical"), "{table}");

    // A contract file as `contract export` writes it, against the new deployment: aiSdk.
    let exported = dir.path().join("old.json");
    std::fs::write(
        &exported,
        capgate(&["contract", "export", "--config", old_s]),
    )
    .expect("write the exported contract");
    let exported_s = exported.to_str().expect("utf-8");
    let (code, r) = json_diff(&["contract", "diff", exported_s, new_s, "--format", "json"]);
    assert_eq!(code, Some(1));
    assert_eq!(r["surfaces"], serde_json::json!(["aiSdk"]));
    assert_eq!(
        changes(&r, "messages.draft"),
        pairs(&[("capability", "breaking")])
    );

    // Only additive changes: exit 0. The exported contract against its own deployment: no
    // change at all.
    let additive = deployment(
        &dir.path().join("additive"),
        |t| {
            t.replace(
                "\"Search customers by name or email.\"",
                "\"Search customers by name, email or phone.\"",
            )
            .replace(
                "expose = { aiSdk = true, mcp = true }",
                "expose = { aiSdk = true, mcp = true, workflow = true }",
            )
        },
        "",
    );
    let (code, r) = json_diff(&[
        "contract",
        "diff",
        old_s,
        additive.to_str().expect("utf-8"),
        "--format",
        "json",
    ]);
    assert_eq!(code, Some(0), "{r:#}");
    assert_eq!(r["breaking"], false);
    assert_eq!(r["summary"]["additiveChanges"], 3);
    let (code, r) = json_diff(&["contract", "diff", exported_s, old_s, "--format", "json"]);
    assert_eq!(code, Some(0));
    assert_eq!(r["capabilities"], serde_json::json!([]));
    assert_eq!(r["summary"]["unchanged"], 5);

    // Bad input: exit 2 with what to do next.
    let missing = dir.path().join("missing.json");
    let out = capgate_output(&["contract", "diff", missing.to_str().expect("utf-8"), new_s]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read"));
    let not_contract = dir.path().join("tools.json");
    std::fs::write(&not_contract, "{\"tools\": []}").expect("write");
    let out = capgate_output(&[
        "contract",
        "diff",
        not_contract.to_str().expect("utf-8"),
        new_s,
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is not a capgate contract"), "{stderr}");
    assert!(stderr.contains("capgate contract export"), "{stderr}");
    let broken = dir.path().join("broken.toml");
    std::fs::write(
        &broken,
        std::fs::read_to_string(&new)
            .expect("read")
            .replace("risk = \"critical\"", "risk = \"extreme\""),
    )
    .expect("write");
    let out = capgate_output(&["contract", "diff", old_s, broken.to_str().expect("utf-8")]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a refused config is bad input, not a breaking change"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("unknown variant `extreme`"), "{stderr}");
    let out = capgate_output(&["contract", "diff", old_s, new_s, "--surface", "direct"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn inspect_lists_every_capability_by_id_with_its_governance() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (old, _) = old_and_new(dir.path());
    let old_s = old.to_str().expect("utf-8");
    let table = capgate(&["inspect", "--config", old_s]);
    let rows: Vec<&str> = table
        .lines()
        .skip_while(|l| !l.starts_with("CAPABILITY"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    let ids: Vec<&str> = rows
        .iter()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        ids,
        [
            "customers.search",
            "messages.draft",
            "messages.send",
            "orders.checkEligibility",
            "orders.refund"
        ]
    );
    assert!(rows[2].contains("required (human-confirmation)"), "{table}");
    assert!(
        rows[4].contains("orgIsolation, refundLimit  stripGatewayRef"),
        "{table}"
    );

    let json: Value = serde_json::from_str(&capgate(&[
        "inspect", "--config", old_s, "--format", "json",
    ]))
    .expect("JSON");
    assert_eq!(json["format"], "capgate.inventory.v1");
    let refund = &json["capabilities"][4];
    assert_eq!(refund["id"], "orders.refund");
    assert_eq!(
        refund["surfaces"],
        serde_json::json!(["aiSdk", "mcp", "workflow"])
    );
    assert_eq!(refund["risk"], "high");
    assert_eq!(refund["timeoutMs"], 10000);
    assert_eq!(refund["timeoutDefault"], false);
    // Deterministic: the same file, the same bytes.
    assert_eq!(table, capgate(&["inspect", "--config", old_s]));
}

/// Contract files need no deployment: `tests/fixtures/contract-diff/old.json` is the
/// example's aiSdk export; `breaking.json` makes one change of each breaking kind a
/// single-surface contract can show, `additive.json` only additive ones.
#[test]
fn contract_diff_on_fixture_contracts_reports_each_breaking_kind() {
    let fixtures = common::root().join("host/cli/tests/fixtures/contract-diff");
    let path = |name: &str| fixtures.join(name).to_str().expect("utf-8").to_string();
    let (old, breaking, additive) = (
        path("old.json"),
        path("breaking.json"),
        path("additive.json"),
    );

    let (code, r) = json_diff(&["contract", "diff", &old, &breaking, "--format", "json"]);
    assert_eq!(code, Some(1), "{r:#}");
    assert_eq!(
        changes(&r, "messages.draft"),
        pairs(&[("capability", "breaking")])
    );
    assert_eq!(
        changes(&r, "customers.search"),
        pairs(&[("requiresApproval", "breaking")])
    );
    assert_eq!(
        changes(&r, "orders.checkEligibility"),
        pairs(&[("sideEffect", "breaking")])
    );
    assert_eq!(
        changes(&r, "orders.refund"),
        pairs(&[
            ("inputSchema/properties/amount/maximum", "breaking"),
            ("inputSchema/required", "breaking"),
            ("risk", "breaking"),
        ])
    );
    assert_eq!(
        changes(&r, "messages.send"),
        pairs(&[
            ("inputSchema/properties/body/maxLength", "breaking"),
            ("toolNames.mcp", "breaking"),
        ])
    );
    assert_eq!(r["summary"]["additiveChanges"], 0);

    let (code, r) = json_diff(&["contract", "diff", &old, &additive, "--format", "json"]);
    assert_eq!(code, Some(0), "{r:#}");
    assert_eq!(r["breaking"], false);
    assert_eq!(
        changes(&r, "orders.history"),
        pairs(&[("capability", "additive")])
    );
    assert_eq!(changes(&r, "messages.send"), pairs(&[("risk", "additive")]));
    assert_eq!(
        changes(&r, "orders.refund"),
        pairs(&[
            ("description", "additive"),
            ("inputSchema/properties/currency", "additive"),
            ("inputSchema/properties/reason/maxLength", "additive"),
        ])
    );
    assert_eq!(
        changes(&r, "customers.search"),
        pairs(&[("contractDigest", "additive")])
    );
    assert_eq!(r["summary"]["unchanged"], 2);

    // The other way round, the additive changes are breaking ones.
    let (code, _) = json_diff(&["contract", "diff", &additive, &old, "--format", "json"]);
    assert_eq!(code, Some(1));
}
