//! The postgres overlay's migration (`deploy/kubernetes/overlays/postgres`, issue 57): the
//! pods' init container, rendered by `kubectl kustomize` as an operator renders it and run
//! as the pod would run it (its command and args, its `CAPGATE_STORE` from the Secret key the
//! gateway container reads), makes an empty Postgres database one `capgate serve` accepts,
//! with three replicas starting at once. Before it, the store is refused as not migrated.

use crate::common::postgres_db;
use serde_json::Value;
use std::process::{Command, Output};

/// The container of the rendered Deployment named `name`, from `field` (`containers` or
/// `initContainers`).
fn container<'a>(deployment: &'a Value, field: &str, name: &str) -> &'a Value {
    deployment["spec"]["template"]["spec"][field]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no {field} `{name}` in {deployment}"))
}

/// The Secret key a container's `CAPGATE_STORE` comes from.
fn store_secret(c: &Value) -> (String, String) {
    let env = c["env"].as_array().expect("env");
    let var = env
        .iter()
        .find(|e| e["name"] == "CAPGATE_STORE")
        .unwrap_or_else(|| panic!("no CAPGATE_STORE in {c}"));
    let r = &var["valueFrom"]["secretKeyRef"];
    (
        r["name"].as_str().expect("secret name").to_string(),
        r["key"].as_str().expect("secret key").to_string(),
    )
}

/// Run the init container's command as the pod does, with the store URL the Secret holds.
fn run_init(init: &Value, store: &str) -> Output {
    let command: Vec<&str> = init["command"]
        .as_array()
        .expect("command")
        .iter()
        .map(|v| v.as_str().expect("a string"))
        .collect();
    assert_eq!(command, ["capgate"], "{init}");
    let args: Vec<&str> = init["args"]
        .as_array()
        .map(|a| a.iter().map(|v| v.as_str().expect("a string")).collect())
        .unwrap_or_default();
    Command::new(env!("CARGO_BIN_EXE_capgate"))
        .args(&args)
        .env("CAPGATE_STORE", store)
        .output()
        .expect("run the init container's command")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_overlays_init_container_migrates_an_empty_database() {
    let Some(kubectl) = capgate_testkit::kube::kubectl(
        "k8s_migration::the_postgres_overlays_init_container_migrates_an_empty_database",
    ) else {
        return;
    };
    let Some(db) = postgres_db().await else {
        return;
    };
    let docs = capgate_testkit::kube::render(&kubectl, "deploy/kubernetes/overlays/postgres");
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("a Deployment");
    let init = container(deployment, "initContainers", "migrate");
    let gateway = container(deployment, "containers", "capgate");
    // The same image and the same store as the gateway container.
    assert_eq!(init["image"], gateway["image"], "{init}");
    assert_eq!(store_secret(init), store_secret(gateway));
    assert_eq!(init["securityContext"]["readOnlyRootFilesystem"], true);

    // An empty database is refused with "missing migrations", by the same check `serve`
    // runs at start (what crash-looped before the init container): here through the
    // operator commands' deployment of the overlay's own configuration.
    let config = capgate_testkit::paths::repo_root().join("deploy/kubernetes/base/capgate.toml");
    let over_store = |url: &str| {
        Command::new(env!("CARGO_BIN_EXE_capgate"))
            .args(["approvals", "list", "--config"])
            .arg(&config)
            .args(["--store", url])
            .output()
            .expect("run capgate approvals list")
    };
    // The store-only commands say the same (not the first statement's missing table).
    let tail = Command::new(env!("CARGO_BIN_EXE_capgate"))
        .args(["audit", "tail", "-n", "1", "--store", &db.url])
        .output()
        .expect("run capgate audit tail");
    assert_eq!(tail.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&tail.stderr).contains("missing migrations"),
        "{}",
        String::from_utf8_lossy(&tail.stderr)
    );
    let refused = over_store(&db.url);
    assert_eq!(refused.status.code(), Some(3));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("missing migrations"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    // Three pods start at once: each runs the init container; the migrator's lock
    // serializes them, one applies, the others find it up to date.
    let url = db.url.clone();
    let runs: Vec<Output> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3).map(|_| s.spawn(|| run_init(init, &url))).collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("an init run"))
            .collect()
    });
    let mut applied = 0;
    for out in &runs {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        if stdout.contains("applied ") {
            applied += 1;
        } else {
            assert!(stdout.contains("up to date"), "{stdout}");
        }
    }
    assert!(applied >= 1, "no run applied the migrations");

    let served = over_store(&db.url);
    assert!(
        served.status.success(),
        "{}",
        String::from_utf8_lossy(&served.stderr)
    );
    // A restarted pod's init container leaves the store as it is.
    let again = run_init(init, &url);
    assert!(String::from_utf8_lossy(&again.stdout).contains("up to date"));
}
