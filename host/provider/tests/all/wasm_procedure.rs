//! A Wasm procedure component under the provider runtime: its `progress` import feeds the
//! stall watchdog, so a plugin that keeps reporting runs past the stall timeout, and one
//! that goes silent is cut (TIMEOUT to the caller, `response_stalled` in the audit event).
//! Uses `plugins/testing/progress` (built by `cargo xtask build-plugins`).

use crate::common;

use capgate_core::audit::MemorySink;
use capgate_core::policy::CapabilityInfo;
use capgate_core::prelude::*;
use capgate_core::procedure::ProgressFn;
use capgate_provider::prelude::*;
use capgate_wasm::{Binding, Limits, PluginDir, WasmHost, sha256_hex};
use common::*;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const STALL_MS: i64 = 400;

fn progress_plugin() -> capgate_wasm::WasmProcedure {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../plugins/target/wasm32-wasip2/release");
    let file = "hostile_progress.wasm";
    let bytes = std::fs::read(dir.join(file))
        .unwrap_or_else(|e| panic!("{file}: {e}: run `cargo xtask build-plugins` first"));
    let plugin = WasmHost::shared()
        .expect("host")
        .load(
            &PluginDir::open(&dir).expect("dir"),
            file,
            &sha256_hex(&bytes),
        )
        .expect("load");
    plugin
        .procedure(
            Binding::new("reports.build").limits(Limits::procedure()),
            CapabilityInfo {
                id: "reports.build".into(),
                side_effect: SideEffect::Read,
                risk: Risk::Low,
                tags: vec![],
            },
        )
        .expect("bind the procedure")
}

fn runtime(sink: Arc<MemorySink>) -> Runtime {
    let provider = ProcedureProvider::new(
        ProviderIdentity::new("wasm", "reports.build"),
        progress_plugin(),
    );
    let id = provider.identity().clone();
    let providers = runtime_of(vec![(Arc::new(provider), conf(STALL_MS))]);
    let registry = Registry::builder()
        .capability(
            CapabilityDef::new(
                "reports.build",
                CapabilityMeta::new("Build a report", SideEffect::Read, Risk::Low)
                    .exposed_on([Surface::Mcp])
                    .with_timeout_ms(60_000),
            )
            .procedure(ProviderProcedure::new(providers, id)),
        )
        .build()
        .expect("registry");
    Runtime::builder(registry)
        .audit_sink(sink)
        .build()
        .expect("a valid runtime")
}

fn call(input: Value, progress: ProgressFn) -> InvokeRequest {
    let mut r = InvokeRequest::new(
        Surface::Mcp,
        "reports.build",
        input,
        Actor::user("u_dana", json!({})),
    );
    r.progress = Some(progress);
    r
}

fn collector() -> (ProgressFn, Arc<Mutex<Vec<Value>>>) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    (Arc::new(move |v| g.lock().expect("lock").push(v)), got)
}

/// Spin iterations that take about `target` in this build (measured, not guessed). The
/// fastest of three probes: a probe slowed by other tests would make every step too short.
async fn spin_for(rt: &Runtime, target: Duration) -> u64 {
    let probe = 2_000_000u64;
    let mut fastest = Duration::MAX;
    for _ in 0..3 {
        let (progress, _) = collector();
        let t = Instant::now();
        let r = rt
            .invoke(call(json!({"steps": 1, "spinPerStep": probe}), progress))
            .await;
        assert_eq!(r.status(), "completed", "{r:?}");
        fastest = fastest.min(t.elapsed());
    }
    let per_iter = fastest.as_secs_f64() / probe as f64;
    ((target.as_secs_f64() / per_iter) as u64).max(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wasm_procedure_that_streams_progress_runs_past_the_stall_timeout_and_is_cut_when_it_stops()
 {
    // Wall-clock margins, wide enough that CPU contention (other builds, the other tests of
    // this binary) cannot decide the outcome:
    // - The streaming run stalls only if one gap between reports (or from admission to the
    //   first report) outlasts the 400 ms window. Steps were ~80 ms, so a 5-fold slowdown of
    //   one step, which a loaded 2-core machine reaches, failed the test; steps of ~5 ms must
    //   run ~80 times slower than calibrated to do that.
    // - The streaming run must outlive two windows. Contention during the run only lengthens
    //   it, but contention during the calibration makes every step short: a run whose steps
    //   came out so short that it ended inside two windows is not a failure of the watchdog,
    //   so it is run again with twice the steps (each run still has to complete and deliver
    //   every report) until one outlives two windows.
    // - The silent run is cut ~400 ms after its third report. Its full work is five times the
    //   streaming run's, and "cut early" is asserted as under half the time that work took
    //   when streamed (over 2 s, seconds more than the cut needs), not as a fixed 1.8 s.
    // What is pinned is unchanged: the accepted streaming run lasts over two windows, so a
    // watchdog that ignored progress would cut it; one that never cut would run the silent
    // work to its end.
    let window = Duration::from_millis(STALL_MS as u64);
    let sink = Arc::new(MemorySink::new());
    let rt = runtime(sink.clone());
    let spin = spin_for(&rt, Duration::from_millis(5)).await;

    let mut steps: u64 = 500; // ~2.5 s when the calibration holds
    let streamed = loop {
        let (progress, got) = collector();
        let started = Instant::now();
        let r = rt
            .invoke(call(json!({"steps": steps, "spinPerStep": spin}), progress))
            .await;
        let took = started.elapsed();
        assert_eq!(r.status(), "completed", "{r:?}");
        assert_eq!(
            got.lock().expect("lock").len(),
            steps as usize,
            "every report reached the caller"
        );
        if took > 2 * window || steps >= 500 << 4 {
            break took;
        }
        steps *= 2;
    };
    assert!(
        streamed > 2 * window,
        "the run should outlive the stall timeout twice over at least ({streamed:?})"
    );

    // Five times that work, silent after three steps: cut about one stall timeout later.
    let sink = Arc::new(MemorySink::new());
    let rt = runtime(sink.clone());
    let (progress, got) = collector();
    let started = Instant::now();
    let r = rt
        .invoke(call(
            json!({"steps": 5 * steps, "spinPerStep": spin, "silentAfter": 3}),
            progress,
        ))
        .await;
    let took = started.elapsed();
    assert_eq!(r.status(), "cancelled", "{r:?}");
    assert_eq!(r.error().map(|e| e.code()), Some(ErrorCode::Timeout));
    assert!(
        took < streamed * 5 / 2,
        "cut early, not run to the end ({took:?}; streaming a fifth of the work took {streamed:?})"
    );
    assert_eq!(got.lock().expect("lock").len(), 3);
    let public = serde_json::to_value(&r).expect("json");
    assert!(!public.to_string().contains("response_stalled"), "{public}");
    let cancelled = sink
        .events()
        .into_iter()
        .find(|e| e.type_name() == "capability.cancelled")
        .expect("capability.cancelled");
    let data = serde_json::to_value(&cancelled).expect("json")["data"].clone();
    assert_eq!(data["metadata"]["code"], "response_stalled", "{data}");
    assert_eq!(data["metadata"]["adapter"], "wasm", "{data}");
    assert_eq!(
        data["metadata"]["close_fence"], "confirmed",
        "the guest was interrupted: {data}"
    );
}
