//! What a plugin language costs, measured on this machine with the host's real settings:
//! component size, compile time, load from the compiled cache, and the per-call latency of
//! the refund-limit policy on a fresh and on a pooled (reused) instance, for the Rust,
//! JavaScript and Python builds. Prints the table published in `sdk/README.md`.
//!
//! ```sh
//! cargo xtask build-plugins && bash sdk/build-polyglot.sh
//! cargo bench -p capgate-wasm --bench polyglot
//! # one language, more pooled calls (e.g. under `perf record` to profile its per-call path):
//! cargo bench -p capgate-wasm --bench polyglot -- --lang javascript --pooled-calls 50000
//! ```
//!
//! Per-call figures are percentiles over many calls on one thread (a load generator, not
//! criterion: an interpreter's fresh instance costs ~1 ms and its compile ~10 s, which
//! criterion's sampling would stretch into minutes).

// The allocator the `capgate` binary runs with.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod support;
use capgate_core::prelude::*;
use capgate_wasm::{Binding, Isolation, LoadSource, PluginDir, WasmHost, sha256_hex};
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use support::RefundCall;

struct Lang {
    name: &'static str,
    dir: PathBuf,
    file: &'static str,
}

fn langs() -> Vec<Lang> {
    let plugins = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../plugins");
    vec![
        Lang {
            name: "Rust",
            dir: plugins.join("target/wasm32-wasip2/release"),
            file: "refund_limit.wasm",
        },
        Lang {
            name: "JavaScript",
            dir: plugins.join("js/dist"),
            file: "refund-limit.wasm",
        },
        Lang {
            name: "Python",
            dir: plugins.join("python/dist"),
            file: "refund-limit.wasm",
        },
    ]
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[i.min(samples.len() - 1)]
}

fn fmt(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 1000.0 {
        format!("{:.1} ms", us / 1000.0)
    } else {
        format!("{us:.1} µs")
    }
}

struct Row {
    size: u64,
    compile: Duration,
    cache_load: Duration,
    fresh: (Duration, Duration),
    pooled: (Duration, Duration),
}

/// `--lang NAME` (repeatable; all three when absent) and `--pooled-calls N` (default 5 000).
struct Args {
    langs: Vec<String>,
    pooled_calls: usize,
}

fn args() -> Result<Args, String> {
    let mut out = Args {
        langs: Vec::new(),
        pooled_calls: 5000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--bench" => {}
            "--lang" => {
                let l = it.next().ok_or("--lang needs rust, javascript or python")?;
                if !langs().iter().any(|k| k.name.eq_ignore_ascii_case(&l)) {
                    return Err(format!("--lang {l}: not rust, javascript or python"));
                }
                out.langs.push(l.to_ascii_lowercase());
            }
            "--pooled-calls" => {
                out.pooled_calls = it
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|n| *n > 0)
                    .ok_or("--pooled-calls needs a positive number")?;
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(out)
}

fn measure(host: &WasmHost, rt: &tokio::runtime::Runtime, lang: &Lang, pooled_calls: usize) -> Row {
    let path = lang.dir.join(lang.file);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: run `cargo xtask build-plugins && bash sdk/build-polyglot.sh` first",
            path.display()
        )
    });
    let digest = sha256_hex(&bytes);
    let cache = tempfile::tempdir().expect("tempdir");
    let dir = PluginDir::open(&lang.dir)
        .and_then(|d| d.with_cache(cache.path()))
        .expect("plugin dir");

    let compiled = host.load(&dir, lang.file, &digest).expect("compile");
    assert_eq!(compiled.load_source(), LoadSource::Compiled);
    let compile = compiled.load_time();
    let mut loads: Vec<Duration> = (0..10)
        .map(|_| {
            let p = host.load(&dir, lang.file, &digest).expect("load");
            assert_eq!(p.load_source(), LoadSource::Cache);
            p.load_time()
        })
        .collect();
    let cache_load = percentile(&mut loads, 0.5);

    let call = RefundCall::new();
    let req = call.request();
    let per_call = |isolation: Isolation, calls: usize| {
        let policy = compiled
            .policy(
                Binding::new("refundLimit")
                    .config(json!({"maxAmount": 500}))
                    .isolation(isolation),
            )
            .expect("bind");
        let mut samples = Vec::with_capacity(calls);
        for i in 0..calls + calls / 10 {
            let t = Instant::now();
            let d = rt.block_on(
                policy.evaluate(&req, tokio::time::Instant::now() + Duration::from_secs(5)),
            );
            let elapsed = t.elapsed();
            assert!(
                matches!(d, Ok(PolicyDecision::RequireApproval { .. })),
                "{}: {d:?}",
                lang.name
            );
            if i >= calls / 10 {
                samples.push(elapsed);
            }
        }
        (
            percentile(&mut samples, 0.5),
            percentile(&mut samples, 0.99),
        )
    };
    let fresh = per_call(Isolation::Fresh, 500);
    let pooled = per_call(Isolation::pooled(), pooled_calls);
    Row {
        size: bytes.len() as u64,
        compile,
        cache_load,
        fresh,
        pooled,
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing to harness=false
    // targets it only builds. Run the measurement only when benchmarking.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let args = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("polyglot: {e}");
            std::process::exit(2);
        }
    };
    let host = WasmHost::shared().expect("the wasm host");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio");
    let rows: Vec<(&str, Row)> = langs()
        .iter()
        .filter(|l| args.langs.is_empty() || args.langs.contains(&l.name.to_ascii_lowercase()))
        .map(|l| {
            eprintln!("measuring {} ({})", l.name, l.file);
            (l.name, measure(&host, &rt, l, args.pooled_calls))
        })
        .collect();
    println!();
    println!(
        "| refund-limit policy | {} |",
        rows.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(" | ")
    );
    println!("|---|{}", "---|".repeat(rows.len()));
    let line = |label: &str, f: &dyn Fn(&Row) -> String| {
        println!(
            "| {label} | {} |",
            rows.iter()
                .map(|(_, r)| f(r))
                .collect::<Vec<_>>()
                .join(" | ")
        );
    };
    line("component size", &|r| {
        format!("{:.1} KiB", r.size as f64 / 1024.0)
    });
    line("wasmtime compile (Cranelift)", &|r| fmt(r.compile));
    line("load from the compiled cache (p50)", &|r| fmt(r.cache_load));
    line("per call, fresh instance (p50 / p99)", &|r| {
        format!("{} / {}", fmt(r.fresh.0), fmt(r.fresh.1))
    });
    line("per call, pooled instance (p50 / p99)", &|r| {
        format!("{} / {}", fmt(r.pooled.0), fmt(r.pooled.1))
    });
    if let Some((_, rust)) = rows.iter().find(|(n, _)| *n == "Rust") {
        let base = rust.pooled.0.as_secs_f64();
        line("pooled p50 / Rust's", &|r| {
            format!("{:.1}×", r.pooled.0.as_secs_f64() / base)
        });
    }
}
