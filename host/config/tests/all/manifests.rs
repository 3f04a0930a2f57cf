//! The Kubernetes manifests (`deploy/kubernetes`), rendered by `kubectl kustomize` as an
//! operator renders them, agree with the binary: the probes ask the gateway's own health
//! routes on the port the ConfigMap's `capgate.toml` listens on (the same port the
//! container, the Service and the NetworkPolicy name), the grace period outlasts the
//! shutdown the configuration asks for, the configuration is one `capgate check` accepts,
//! every path capgate writes lies on a writable volume under a read-only root filesystem,
//! and every secret the pod reads is in the Secret.
//!
//! `kubectl` comes from Debian's `kubernetes-client` (kustomize v2.0.3 inside kubectl 1.20),
//! installed when missing and the test runs as root; the manifests also render with a newer
//! kubectl (kustomize v5). Without it the tests are skipped loudly, except under `CI=true`,
//! where they fail.

use crate::keys::walk;
use capgate_config::Config;
use capgate_config::store_url::{Kind, check_url, kind};
use capgate_gateway::health::{LIVENESS, READINESS, READINESS_TIMEOUT};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The margin the grace period must leave past the unready delay and the drain (and a
/// preStop hook, if any): the audit flush and the store's close before SIGKILL.
const SHUTDOWN_MARGIN_MS: u64 = 5_000;

/// Every object `kubectl kustomize DIR` renders ([`capgate_testkit::kube::render`]).
fn render(kubectl: &Path, dir: &str) -> Vec<Value> {
    capgate_testkit::kube::render(kubectl, dir)
}

/// `kubectl`, installed when missing ([`capgate_testkit::kube::kubectl`]).
fn kubectl(test: &str) -> Option<PathBuf> {
    capgate_testkit::kube::kubectl(test)
}

/// The one object of `kind` (there must be exactly one).
fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = docs.iter().filter(|d| d["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "expected one {kind}, found {}", found.len());
    found[0]
}

/// A string field, or a failure naming it.
fn text<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what}: expected a string, found {v}"))
}

/// A non-negative integer field, or a failure naming it.
fn number(v: &Value, what: &str) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("{what}: expected a number, found {v}"))
}

/// A port as Kubernetes writes it (a number, or the name of one of the container's
/// ports), as a number.
fn port(v: &Value, container: &Value, what: &str) -> u64 {
    if let Some(n) = v.as_u64() {
        return n;
    }
    let name = text(v, what);
    let ports = container["ports"].as_array().cloned().unwrap_or_default();
    let found = ports
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("{what}: no container port is named `{name}`"));
    number(&found["containerPort"], what)
}

/// Whether `labels` holds every label of `selector`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let Some(want) = selector.as_object() else {
        return false;
    };
    !want.is_empty() && want.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// What a rendering holds, checked against the binary: its Deployment's pod template,
/// container, configuration and Secret, for the overlay-specific checks.
struct Checked {
    docs: Vec<Value>,
    pod: Value,
    container: Value,
    config: Config,
}

/// The value of the Secret's `key` (its `stringData`: the manifests write no base64
/// `data`).
fn secret(docs: &[Value], key: &str) -> Option<String> {
    one(docs, "Secret")["stringData"][key]
        .as_str()
        .map(str::to_string)
}

/// The Secret and key the container's environment variable `name` is taken from.
fn env_secret(container: &Value, name: &str) -> Option<(String, String)> {
    let env = container["env"].as_array()?;
    let var = env.iter().find(|e| e["name"] == name)?;
    let r = &var["valueFrom"]["secretKeyRef"];
    Some((
        r["name"].as_str()?.to_string(),
        r["key"].as_str()?.to_string(),
    ))
}

/// The checks every rendering passes; what each overlay adds is checked by its test.
fn check(docs: Vec<Value>) -> Checked {
    let deployment = one(&docs, "Deployment").clone();
    let pod = deployment["spec"]["template"]["spec"].clone();
    let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    assert!(
        selects(&deployment["spec"]["selector"]["matchLabels"], pod_labels),
        "the Deployment's selector must select its own pods"
    );
    let containers = pod["containers"].as_array().expect("containers");
    let container = containers
        .iter()
        .find(|c| c["name"] == "capgate")
        .expect("a container named capgate")
        .clone();

    // The image is the kustomization's `images:` entry.
    let image = text(&container["image"], "image");
    assert!(
        image.starts_with("ghcr.io/capgate/capgate:"),
        "image {image}: expected the kustomize `images:` entry ghcr.io/capgate/capgate:TAG"
    );

    // The configuration: the ConfigMap's capgate.toml, mounted read-only where `--config`
    // points.
    let config_map = one(&docs, "ConfigMap");
    let toml = text(
        &config_map["data"]["capgate.toml"],
        "ConfigMap data capgate.toml",
    );
    let cm_name = text(&config_map["metadata"]["name"], "ConfigMap name");
    let volumes = pod["volumes"].as_array().expect("volumes");
    let config_volume = volumes
        .iter()
        .find(|v| v["configMap"]["name"] == cm_name)
        .expect("a volume of the ConfigMap (the generated name, hash included)");
    let mounts = container["volumeMounts"].as_array().expect("volumeMounts");
    let config_mount = mounts
        .iter()
        .find(|m| m["name"] == config_volume["name"])
        .expect("the ConfigMap's volume is mounted");
    assert_eq!(
        config_mount["readOnly"], true,
        "the config mount is read-only"
    );
    let config_dir = text(&config_mount["mountPath"], "config mountPath");
    let config_path = Path::new(config_dir).join("capgate.toml");
    let argv: Vec<&str> = container["command"]
        .as_array()
        .into_iter()
        .chain(container["args"].as_array())
        .flatten()
        .map(|a| text(a, "command/args"))
        .collect();
    let at = argv
        .iter()
        .position(|a| *a == "--config")
        .expect("serve --config");
    assert!(
        argv.contains(&"serve"),
        "the container runs `capgate serve`: {argv:?}"
    );
    assert_eq!(
        argv.get(at + 1).map(Path::new),
        Some(config_path.as_path()),
        "--config names the mounted capgate.toml"
    );

    // A configuration `capgate check` accepts, every key declared.
    let (config, doc) = Config::parse(&config_path, toml.to_string()).unwrap_or_else(|problems| {
        panic!(
            "the ConfigMap's capgate.toml has problems:\n{}",
            problems
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        )
    });
    let mut undeclared = Vec::new();
    walk(&capgate_config::keys::all(), &doc.json, "", &mut undeclared);
    assert!(undeclared.is_empty(), "undeclared keys: {undeclared:?}");

    // One port everywhere: `gateway.listen`, the container, the probes, the Service, the
    // NetworkPolicy.
    let listen: SocketAddr = config
        .gateway
        .listen
        .parse()
        .expect("gateway.listen is an address");
    assert!(
        listen.ip().is_unspecified(),
        "gateway.listen {listen}: the kubelet's probes and the Service reach the pod's own \
         address, so listen on 0.0.0.0 (or [::])"
    );
    let listen_port = u64::from(listen.port());
    let container_ports: Vec<u64> = container["ports"]
        .as_array()
        .expect("container ports")
        .iter()
        .map(|p| number(&p["containerPort"], "containerPort"))
        .collect();
    assert!(
        container_ports.contains(&listen_port),
        "container ports {container_ports:?} lack gateway.listen's {listen_port}"
    );
    let readiness = &container["readinessProbe"]["httpGet"];
    assert_eq!(readiness["path"], READINESS, "readiness probe path");
    assert_eq!(
        port(&readiness["port"], &container, "readiness port"),
        listen_port
    );
    let liveness = &container["livenessProbe"]["httpGet"];
    assert_eq!(liveness["path"], LIVENESS, "liveness probe path");
    assert_eq!(
        port(&liveness["port"], &container, "liveness port"),
        listen_port
    );
    if container.get("startupProbe").is_some() {
        let startup = &container["startupProbe"]["httpGet"];
        assert_eq!(startup["path"], LIVENESS, "startup probe path");
        assert_eq!(
            port(&startup["port"], &container, "startup port"),
            listen_port
        );
    }
    // /readyz answers within its own bound per check: a probe timeout at or under it
    // would count a slow-but-answered 503 or 200 as a timeout.
    let ready_timeout_ms = number(
        &container["readinessProbe"]["timeoutSeconds"],
        "readinessProbe.timeoutSeconds",
    ) * 1000;
    assert!(
        u128::from(ready_timeout_ms) > READINESS_TIMEOUT.as_millis(),
        "readinessProbe.timeoutSeconds must exceed /readyz's own {READINESS_TIMEOUT:?}"
    );
    let service = one(&docs, "Service");
    assert!(
        selects(&service["spec"]["selector"], pod_labels),
        "the Service selects the pods"
    );
    for p in service["spec"]["ports"].as_array().expect("Service ports") {
        assert_eq!(
            port(&p["targetPort"], &container, "Service targetPort"),
            listen_port,
            "the Service's targetPort"
        );
    }
    let policy = one(&docs, "NetworkPolicy");
    assert!(
        selects(&policy["spec"]["podSelector"]["matchLabels"], pod_labels),
        "the NetworkPolicy applies to the pods"
    );
    let ingress_ports: Vec<u64> = policy["spec"]["ingress"]
        .as_array()
        .expect("ingress rules")
        .iter()
        .flat_map(|r| r["ports"].as_array().cloned().unwrap_or_default())
        .map(|p| port(&p["port"], &container, "NetworkPolicy ingress port"))
        .collect();
    assert_eq!(
        ingress_ports,
        [listen_port],
        "ingress: the gateway port only"
    );
    let types: Vec<&Value> = policy["spec"]["policyTypes"]
        .as_array()
        .expect("policyTypes")
        .iter()
        .collect();
    assert!(
        types.contains(&&Value::from("Ingress")) && types.contains(&&Value::from("Egress")),
        "the NetworkPolicy governs ingress and egress: {types:?}"
    );
    assert!(
        egress_ports(policy).contains(&(53, "UDP".to_string())),
        "egress allows DNS"
    );
    let pdb = one(&docs, "PodDisruptionBudget");
    assert!(
        selects(&pdb["spec"]["selector"]["matchLabels"], pod_labels),
        "the PodDisruptionBudget selects the pods"
    );

    // The grace period outlasts what the configuration asks of a SIGTERM: the preStop
    // hook (if any), then the unready delay and the drain, then the flush.
    let grace_ms = number(
        &pod["terminationGracePeriodSeconds"],
        "terminationGracePeriodSeconds",
    ) * 1000;
    let pre_stop_ms = match container["lifecycle"].get("preStop") {
        None => 0,
        Some(hook) => {
            let seconds = hook["sleep"]["seconds"].as_u64().unwrap_or_else(|| {
                panic!("preStop {hook}: only a `sleep` hook is understood by this test")
            });
            seconds * 1000
        }
    };
    let unready = config.gateway.shutdown_unready_delay_ms;
    let drain = config.gateway.shutdown_drain_ms;
    assert!(
        grace_ms >= pre_stop_ms + unready + drain + SHUTDOWN_MARGIN_MS,
        "terminationGracePeriodSeconds ({grace_ms} ms) must exceed preStop ({pre_stop_ms} ms) \
         + shutdownUnreadyDelayMs ({unready}) + shutdownDrainMs ({drain}) + {SHUTDOWN_MARGIN_MS} ms \
         for the flush"
    );
    // The pod leaves the endpoints while it still serves: some unready delay or preStop.
    assert!(
        unready + pre_stop_ms > 0,
        "with neither shutdownUnreadyDelayMs nor a preStop sleep, connections are refused \
         before the endpoints forget the pod"
    );

    // Non-root, read-only root filesystem.
    let sc = &container["securityContext"];
    let pod_sc = &pod["securityContext"];
    assert!(
        sc["runAsNonRoot"] == true
            || (sc["runAsNonRoot"].is_null() && pod_sc["runAsNonRoot"] == true),
        "runAsNonRoot"
    );
    assert_eq!(sc["readOnlyRootFilesystem"], true, "readOnlyRootFilesystem");
    assert_eq!(
        sc["allowPrivilegeEscalation"], false,
        "allowPrivilegeEscalation"
    );

    // Every path capgate writes is on a writable volume (emptyDir or a claim), never the
    // read-only root or the ConfigMap.
    let writable: Vec<PathBuf> = mounts
        .iter()
        .filter(|m| m["readOnly"] != true)
        .filter(|m| {
            volumes.iter().any(|v| {
                v["name"] == m["name"]
                    && (v.get("emptyDir").is_some() || v.get("persistentVolumeClaim").is_some())
            })
        })
        .map(|m| PathBuf::from(text(&m["mountPath"], "mountPath")))
        .collect();
    let on_writable = |what: &str, full: PathBuf| {
        assert!(
            writable.iter().any(|w| full.starts_with(w)),
            "{what} ({}) is on no writable volume (writable: {writable:?})",
            full.display()
        );
    };
    // What capgate writes: relative paths are taken from runtime.stateDir.
    on_writable(
        "runtime.compileCache",
        config.state_path(&config.runtime.compile_cache),
    );
    if let Some(cache) = &config.runtime.oci.cache {
        on_writable("runtime.oci.cache", config.relative(cache));
    }
    if let Some(jsonl) = &config.audit.jsonl {
        on_writable("audit.jsonl", config.relative(jsonl));
    }
    // The store: CAPGATE_STORE (serve's --store) from the Secret when set, else store.url.
    match env_secret(&container, "CAPGATE_STORE") {
        Some((_, key)) => {
            let url = secret(&docs, &key).unwrap_or_else(|| panic!("the Secret has no {key}"));
            check_url(&url).expect("the Secret's store URL is one capgate opens");
        }
        None => {
            if let Ok(Kind::SqliteFile { path, .. }) = kind(&config.store.url) {
                on_writable("store.url's SQLite file", config.state_path(path));
            }
        }
    }
    // Every secret the pod reads is in the Secret, and the JWT secret's variable is one of
    // them.
    let secret_name = text(&one(&docs, "Secret")["metadata"]["name"], "Secret name");
    for var in container["env"].as_array().into_iter().flatten() {
        let r = &var["valueFrom"]["secretKeyRef"];
        if r.is_null() {
            continue;
        }
        assert_eq!(r["name"], secret_name, "{var}: the Secret");
        let key = text(&r["key"], "secretKeyRef.key");
        assert!(secret(&docs, key).is_some(), "the Secret has no key {key}");
    }
    if let Some(capgate_config::JwtKeySource::Hs256SecretEnv(var)) =
        config.gateway.jwt.as_ref().map(|j| &j.key_source)
    {
        assert!(
            env_secret(&container, var).is_some(),
            "gateway.jwt.hs256SecretEnv names {var}, which the container does not take from the Secret"
        );
    }
    Checked {
        docs,
        pod,
        container,
        config,
    }
}

/// The (port, protocol) pairs a NetworkPolicy's egress rules open.
fn egress_ports(policy: &Value) -> Vec<(u64, String)> {
    policy["spec"]["egress"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .flat_map(|r| r["ports"].as_array().cloned().unwrap_or_default())
        .map(|p| {
            (
                number(&p["port"], "egress port"),
                p["protocol"].as_str().unwrap_or("TCP").to_string(),
            )
        })
        .collect()
}

#[test]
fn the_kubernetes_base_agrees_with_the_binary() {
    let Some(kubectl) = kubectl("manifests::the_kubernetes_base_agrees_with_the_binary") else {
        return;
    };
    let checked = check(render(&kubectl, "deploy/kubernetes/base"));
    let deployment = one(&checked.docs, "Deployment");
    // One SQLite writer on a ReadWriteOnce claim: one replica, replaced, never rolled.
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert_eq!(deployment["spec"]["strategy"]["type"], "Recreate");
    assert!(env_secret(&checked.container, "CAPGATE_STORE").is_none());
    assert!(matches!(
        kind(&checked.config.store.url),
        Ok(Kind::SqliteFile { .. })
    ));
    let claim = text(
        &one(&checked.docs, "PersistentVolumeClaim")["metadata"]["name"],
        "claim",
    );
    assert!(
        checked.pod["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .any(|v| v["persistentVolumeClaim"]["claimName"] == claim),
        "the state volume is the claim {claim}"
    );
}

#[test]
fn the_kubernetes_postgres_overlay_runs_three_replicas_on_one_postgres() {
    let Some(kubectl) =
        kubectl("manifests::the_kubernetes_postgres_overlay_runs_three_replicas_on_one_postgres")
    else {
        return;
    };
    let checked = check(render(&kubectl, "deploy/kubernetes/overlays/postgres"));
    let deployment = one(&checked.docs, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 3);
    assert_eq!(deployment["spec"]["strategy"]["type"], "RollingUpdate");
    let pdb = one(&checked.docs, "PodDisruptionBudget");
    assert_eq!(pdb["spec"]["minAvailable"], 2);
    assert!(pdb["spec"].get("maxUnavailable").is_none());
    // The store is the Secret's Postgres URL (`serve` reads --store from CAPGATE_STORE).
    let (_, key) =
        env_secret(&checked.container, "CAPGATE_STORE").expect("CAPGATE_STORE from the Secret");
    let url = secret(&checked.docs, &key).expect("the store URL in the Secret");
    assert_eq!(kind(&url), Ok(Kind::Postgres), "a Postgres store URL");
    // No claim: each replica's state volume is its own scratch space.
    assert!(
        !checked
            .docs
            .iter()
            .any(|d| d["kind"] == "PersistentVolumeClaim"),
        "no PersistentVolumeClaim with replicas"
    );
    assert!(
        checked.pod["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .all(|v| v.get("persistentVolumeClaim").is_none()),
        "no volume is a claim"
    );
    assert!(
        egress_ports(one(&checked.docs, "NetworkPolicy")).contains(&(5432, "TCP".to_string())),
        "egress allows Postgres"
    );
}
