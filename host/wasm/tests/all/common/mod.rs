//! Shared fixtures: the built plugins, runtimes around them, audit helpers.
#![allow(dead_code)]

use capgate_core::policy::CapabilityInfo;
use capgate_core::prelude::*;
use capgate_wasm::{Binding, Plugin, PluginDir, WasmHost, sha256_hex};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;

/// Where `cargo xtask build-plugins` puts the components.
pub fn wasm_dir() -> PathBuf {
    capgate_testkit::paths::plugin_wasm_dir()
}

/// The file name of a built plugin, failing loudly when it has not been built.
pub fn wasm_file(name: &str) -> String {
    let file = format!("{name}.wasm");
    let path = wasm_dir().join(&file);
    assert!(
        path.is_file(),
        "{} is missing: run `cargo xtask build-plugins` first",
        path.display()
    );
    file
}

pub fn plugin_dir() -> PluginDir {
    let dir = wasm_dir();
    assert!(
        dir.is_dir(),
        "{} is missing: run `cargo xtask build-plugins` first",
        dir.display()
    );
    PluginDir::open(&dir).expect("open the plugin dir")
}

pub fn digest_of(name: &str) -> String {
    let file = wasm_file(name);
    sha256_hex(std::fs::read(wasm_dir().join(file)).expect("read plugin"))
}

pub fn host() -> WasmHost {
    WasmHost::shared().expect("the wasm host")
}

/// Load a built plugin pinned to its own digest.
pub fn load(name: &str) -> Arc<Plugin> {
    load_on(&host(), name)
}

/// Load a built plugin pinned to its own digest on `host` (a host with its own options).
pub fn load_on(host: &WasmHost, name: &str) -> Arc<Plugin> {
    host.load(&plugin_dir(), &wasm_file(name), &digest_of(name))
        .unwrap_or_else(|e| panic!("load {name}: {e}"))
}

pub use capgate_testkit::actors::{dana, priya_decides};
pub use capgate_testkit::schemas::refund as refund_schema;
pub use capgate_testkit::walkthrough::refund_meta;

pub use capgate_testkit::walkthrough::Counter;

/// `orders.refund` as a plugin binding sees it.
pub fn refund_info() -> CapabilityInfo {
    CapabilityInfo {
        id: "orders.refund".into(),
        side_effect: SideEffect::Write,
        risk: Risk::High,
        tags: Vec::new(),
    }
}

/// What a policy request about dana's `orders.refund` borrows.
pub struct RefundAsk {
    pub info: CapabilityInfo,
    pub actor: Actor,
}

impl RefundAsk {
    pub fn by_dana() -> Self {
        RefundAsk {
            info: refund_info(),
            actor: dana(),
        }
    }

    /// The invocation-phase request through the AI SDK door, with no namespace, context or
    /// approval. `shared` is one per request, as core keeps it.
    pub fn request<'a>(
        &'a self,
        input: Option<&'a Value>,
        execution_id: &'a str,
        shared: &'a SharedJson,
    ) -> PolicyRequest<'a> {
        PolicyRequest {
            phase: Phase::Invocation,
            capability: &self.info,
            surface: Surface::AiSdk,
            namespace: "",
            actor: &self.actor,
            context: &Value::Null,
            input,
            execution_id,
            approval: None,
            shared,
        }
    }
}

/// The refund-limit plugin bound as in the walkthrough.
pub fn wasm_refund_limit() -> impl Policy {
    load("refund_limit")
        .policy(Binding::new("refundLimit").config(json!({
            "maxAmount": 500,
            "amountPath": "/amount",
            "approvalType": "manager"
        })))
        .expect("bind refund-limit")
}

/// A runtime with `orders.refund` guarded by `policy`, audited into `sink`.
pub fn runtime_with_policy(
    policy: impl Policy,
    counter: &Counter,
    sink: Arc<MemorySink>,
) -> Runtime {
    let def = CapabilityDef::new("orders.refund", refund_meta())
        .input_schema(refund_schema())
        .policy(policy)
        .procedure(counter.procedure());
    Runtime::builder(
        Registry::builder()
            .capability(def)
            .build()
            .expect("registry"),
    )
    .audit_sink(sink)
    .build()
    .expect("a valid runtime")
}

pub fn refund(amount: u64) -> InvokeRequest {
    InvokeRequest::new(
        Surface::AiSdk,
        "orders.refund",
        json!({"orderId": "ord_42", "amount": amount, "reason": "damaged item"}),
        dana(),
    )
}

pub fn code(r: &ExecutionResult) -> Option<ErrorCode> {
    r.error().map(|e| e.code())
}

/// The `data` object of the first event of a type.
pub fn data_of(sink: &MemorySink, ty: &str) -> Value {
    let ev = sink
        .events()
        .into_iter()
        .find(|e| e.type_name() == ty)
        .unwrap_or_else(|| panic!("no {ty} event in {:?}", sink.types()));
    serde_json::to_value(&ev).expect("event json")["data"].clone()
}

/// The private reason core recorded for a POLICY_FAILED.
pub fn failure_reason(r: &ExecutionResult) -> String {
    r.error()
        .and_then(|e| e.private_details())
        .and_then(|d| d["reason"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// A good Wasm policy still answers: the process is healthy after a hostile plugin.
pub async fn good_plugin_still_works() {
    let c = Counter::default();
    let rt = runtime_with_policy(wasm_refund_limit(), &c, Arc::new(MemorySink::new()));
    let r = rt.invoke(refund(20)).await;
    assert_eq!(r.status(), "completed", "{r:?}");
    let r = rt.invoke(refund(649)).await;
    assert_eq!(r.status(), "approval-required", "{r:?}");
    assert_eq!(c.get(), 1);
}

/// Where `sdk/build-polyglot.sh` puts the JavaScript or Python components (`lang` = `js` or
/// `python`).
pub fn polyglot_dir(lang: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../plugins")
        .join(lang)
        .join("dist")
}

/// Load a built JS or Python plugin pinned to its own digest. Compiled code is cached under
/// the test target dir: an interpreter component takes seconds to compile, once.
pub fn load_polyglot(lang: &str, name: &str) -> Arc<Plugin> {
    let dir = polyglot_dir(lang);
    let file = format!("{name}.wasm");
    let path = dir.join(&file);
    assert!(
        path.is_file(),
        "{} is missing: run `bash sdk/build-polyglot.sh` first",
        path.display()
    );
    let digest = sha256_hex(std::fs::read(&path).expect("read plugin"));
    let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("capgate-wasm-cache");
    std::fs::create_dir_all(&cache).expect("create the compile cache");
    let plugins = PluginDir::open(&dir)
        .and_then(|d| d.with_cache(&cache))
        .expect("open the polyglot plugin dir");
    host()
        .load(&plugins, &file, &digest)
        .unwrap_or_else(|e| panic!("load {lang}/{name}: {e}"))
}
