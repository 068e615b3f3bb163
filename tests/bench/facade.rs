//! The `metrics` facade recorder against `Recorder::incr` and against the Prometheus
//! exporter's recorder (criterion; `cargo bench --bench facade --features metrics-facade`).
//!
//! Each variant makes one increment of `page.views{page_id, env}` per call, with 1 and 2
//! threads (figures are per increment, per thread):
//!
//! - `incr`: `Recorder::incr` with the same name and tags (the baseline);
//! - `counter_macro`: `counter!(…).increment(1)` with literal labels, so the recorder
//!   looks the registered key up at every call (how instrumented code is usually written);
//! - `counter_handle`: the `Counter` that `counter!` returned, kept and incremented;
//! - `prometheus_macro`, `prometheus_handle`: the same two through
//!   `metrics-exporter-prometheus`'s recorder, what a service would otherwise install.
//!
//! Two key patterns: one hot key, and 10k keys (`page_id` varies). With 10k keys the keys
//! are built before the run and registered through `metrics::with_recorder`, as the macro
//! does, so that the figures hold the recorder's work and not the building of labels
//! (which costs every recorder the same). Each thread installs the recorder as its local
//! recorder, as `metrics::with_local_recorder` does.
//!
//! The recorder runs as in a service (a `Recorder` with its flush task, into a memory sink),
//! with the flush interval set beyond the run so that no flush happens while measuring.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group};
use metrics::{Key, Label, Metadata, counter};

use countersink::Recorder;
use countersink::config::Config;
use countersink::facade::Builder;
use countersink::sink::memory::MemorySink;

static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

type Op = Arc<dyn Fn(usize, u64) + Send + Sync>;
type SharedRecorder = Arc<dyn metrics::Recorder + Send + Sync>;

/// Runs `ops` calls of `op` on each of `threads` threads, each with `recorder` as its
/// local `metrics` recorder; returns the wall time.
fn run_threads(threads: usize, ops: u64, recorder: &SharedRecorder, op: &Op) -> Duration {
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (barrier, recorder, op) = (barrier.clone(), recorder.clone(), op.clone());
            std::thread::spawn(move || {
                metrics::with_local_recorder(&*recorder, || {
                    barrier.wait();
                    for i in 0..ops {
                        op(t, i);
                    }
                })
            })
        })
        .collect();
    barrier.wait();
    let start = Instant::now();
    for h in handles {
        h.join().expect("thread");
    }
    start.elapsed()
}

/// A recorder as a service runs it: state directory, flush task, memory sink.
fn recorder(runtime: &tokio::runtime::Runtime, state: &std::path::Path) -> Recorder {
    let mut config = Config::default();
    config.state.dir = state.to_owned();
    config.flush.interval = Duration::from_secs(24 * 3600);
    config.limits.max_pending_rows = 10_000_000;
    config.limits.max_pending_bytes = 4 << 30;
    runtime
        .block_on(Recorder::start(&config, MemorySink::new()))
        .expect("recorder")
}

/// `distinct` page ids laid over a power-of-two table (a mask picks one per call; see
/// `tests/bench/engine.rs` for why not a division).
fn page_ids(distinct: usize) -> Arc<Vec<String>> {
    Arc::new(
        (0..distinct.next_power_of_two())
            .map(|slot| format!("p{:06}", slot % distinct))
            .collect(),
    )
}

fn keys(pages: &[String]) -> Arc<Vec<Key>> {
    Arc::new(
        pages
            .iter()
            .map(|p| {
                Key::from_parts(
                    "page.views",
                    vec![Label::new("page_id", p.clone()), Label::new("env", "prod")],
                )
            })
            .collect(),
    )
}

fn facade(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let state = tempfile::tempdir().expect("state dir");
    let recorder = recorder(&runtime, state.path());
    let ours: SharedRecorder = Arc::new(Builder::new().max_keys(100_000).build(recorder.engine()));
    let prometheus: SharedRecorder =
        Arc::new(metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder());
    let none: SharedRecorder = Arc::new(metrics::NoopRecorder);

    for (pattern, distinct) in [("hot_key", 1_usize), ("10k_keys", 10_000)] {
        let pages = page_ids(distinct);
        let keys = keys(&pages);
        let mut group = c.benchmark_group(format!("facade_{pattern}"));
        for threads in [1, 2] {
            group.throughput(Throughput::Elements(threads as u64));
            let incr: Op = {
                let (recorder, pages) = (recorder.clone(), pages.clone());
                Arc::new(move |t, i| {
                    let page = &pages[(i as usize * 7 + t) & (pages.len() - 1)];
                    let _ = recorder.incr("page.views", &[("page_id", page), ("env", "prod")], 1);
                })
            };
            let by_macro: Op = if distinct == 1 {
                Arc::new(|_, _| {
                    counter!("page.views", "page_id" => "p000000", "env" => "prod").increment(1)
                })
            } else {
                let keys = keys.clone();
                Arc::new(move |t, i| {
                    let key = &keys[(i as usize * 7 + t) & (keys.len() - 1)];
                    metrics::with_recorder(|r| r.register_counter(key, &METADATA)).increment(1)
                })
            };
            let by_handle: Op = Arc::new(|_, _| {
                thread_local!(static HELD: metrics::Counter = counter!("page.views", "page_id" => "p000000", "env" => "prod"));
                HELD.with(|c| c.increment(1))
            });
            let mut variants = vec![
                ("incr", &none, &incr),
                ("counter_macro", &ours, &by_macro),
                ("prometheus_macro", &prometheus, &by_macro),
            ];
            if distinct == 1 {
                variants.push(("counter_handle", &ours, &by_handle));
                variants.push(("prometheus_handle", &prometheus, &by_handle));
            }
            for (name, target, op) in variants {
                group.bench_function(format!("{name}_{threads}t"), |b| {
                    b.iter_custom(|iters| run_threads(threads, iters, target, op));
                });
            }
        }
        group.finish();
    }
    runtime.block_on(recorder.shutdown());
}

/// One fixed workload of a million increments on this thread, for instruction counting:
/// `FACADE_BENCH_ONCE=<variant> valgrind --tool=callgrind --toggle-collect='facade::measured*'
/// target/release/deps/facade-<hash>`, with `<variant>` one of `incr`, `counter_macro`,
/// `counter_handle`, `prometheus_macro`, `prometheus_handle` (hot key), `incr_10k`,
/// `counter_10k`, `prometheus_10k` (10k keys built beforehand, as in the criterion bench).
fn run_once(variant: &str) {
    const OPS: u64 = 1_000_000;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let state = tempfile::tempdir().expect("state dir");
    let recorder = recorder(&runtime, state.path());
    let target: SharedRecorder = if variant.starts_with("prometheus") {
        Arc::new(metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder())
    } else {
        Arc::new(Builder::new().build(recorder.engine()))
    };
    let pages = page_ids(10_000);
    let keys = keys(&pages);
    let pick = |i: u64| (i as usize * 7) & (pages.len() - 1);
    metrics::with_local_recorder(&*target, || {
        let held = counter!("page.views", "page_id" => "p000000", "env" => "prod");
        let op = |i: u64| match variant {
            "incr" => {
                let _ = recorder.incr("page.views", &[("page_id", "p000000"), ("env", "prod")], 1);
            }
            "counter_macro" | "prometheus_macro" => {
                counter!("page.views", "page_id" => "p000000", "env" => "prod").increment(1)
            }
            "counter_handle" | "prometheus_handle" => held.increment(1),
            "incr_10k" => {
                let page = pages[pick(i)].as_str();
                let _ = recorder.incr("page.views", &[("page_id", page), ("env", "prod")], 1);
            }
            "counter_10k" | "prometheus_10k" => {
                metrics::with_recorder(|r| r.register_counter(&keys[pick(i)], &METADATA))
                    .increment(1)
            }
            other => panic!("unknown FACADE_BENCH_ONCE variant {other:?}"),
        };
        (0..OPS).for_each(op);
        measured(|| (0..OPS).for_each(op));
    });
    runtime.block_on(recorder.shutdown());
}

/// The measured part of [`run_once`], as its own symbol in callgrind's output.
#[inline(never)]
fn measured(f: impl FnOnce()) {
    f();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = facade
}

fn main() {
    if let Ok(variant) = std::env::var("FACADE_BENCH_ONCE") {
        run_once(&variant);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
