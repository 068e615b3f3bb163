//! Engine benchmarks (criterion; run with `cargo bench --bench engine`).
//!
//! - `ingest`: parse + aggregate 20-line packets, 100 and 100k distinct keys.
//! - `incr`: one increment through the engine with 1 and 2 threads, beside two
//!   baselines doing the same key work in the same run: a `Mutex<HashMap>` (what a
//!   hand-rolled flusher does) and a `DashMap` keyed by row (the usual concurrent map).
//!   Two key patterns: one hot key (the case pre-aggregation exists for) and 10k keys.
//!   Every variant reads the clock that `Recorder::incr` reads (`now_unix_secs`, a
//!   coarse clock) once per increment, so they differ only in the map.
//!
//! Figures are reported as ratios to the baseline measured in the same run, because
//! the machines are shared and noisy.
//!
//! # Instruction counts
//!
//! Wall-clock figures on a shared machine are noisy; instruction counts are not. With
//! `ENGINE_BENCH_ONCE` set, the binary skips criterion and runs one fixed workload, so
//! that `valgrind --tool=callgrind` can count it:
//!
//! ```text
//! cargo bench --bench engine --no-run
//! ENGINE_BENCH_ONCE=ingest valgrind --tool=callgrind \
//!     --toggle-collect='engine::measured*' target/release/deps/engine-<hash>
//! ```
//!
//! Workloads, each of 1M operations after a warm-up, so that the instructions counted
//! divided by 1M are the cost of one line or one call:
//! - `ingest`: 20-line packets over 100 keys (warm-up: 20 packets);
//! - `ingest_100k`: 100k keys, five passes of 200k lines, each pass creating every row
//!   and drained after, as the criterion bench does;
//! - `incr_hot`, `incr_10k`: `Engine::record` on one thread, clock read included (under
//!   valgrind the clock is a system call, whose kernel side is not counted).

use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group};
use dashmap::DashMap;

use countersink::config::Config;
use countersink::engine::{Engine, now_unix_secs};
use countersink::family::TagSet;
use countersink::vocabulary::Transport;

const NOW: i64 = 1_796_042_096;

fn engine() -> Engine {
    let mut config = Config::default();
    config.limits.max_pending_rows = 10_000_000;
    config.limits.max_pending_bytes = 4 << 30;
    Engine::with_seed(&config, Some(1)).expect("engine")
}

/// `packets` packets of 20 lines cycling over `keys` distinct keys.
fn packets(keys: usize, packets: usize) -> Vec<Vec<u8>> {
    (0..packets)
        .map(|p| {
            let mut packet = Vec::new();
            for l in 0..20 {
                let k = (p * 20 + l) % keys;
                packet.extend_from_slice(
                    format!("page.views:1|c|#page_id:p{k:06},env:prod\n").as_bytes(),
                );
            }
            packet
        })
        .collect()
}

fn ingest(c: &mut Criterion) {
    let mut group = c.benchmark_group("ingest");
    for keys in [100, 100_000] {
        let data = packets(keys, 10_000);
        group.throughput(Throughput::Elements(20 * data.len() as u64));
        group.bench_function(format!("20_line_packets_{keys}_keys"), |b| {
            let engine = engine();
            b.iter(|| {
                for packet in &data {
                    engine.ingest_packet(packet, Transport::Udp, NOW);
                }
                // Drain now and then, as the flusher would, so the map does not only grow.
                engine.aggregator().take_all();
            });
        });
    }
    group.finish();
}

/// What `incr` must do besides the map: the row key's bytes for (name, tags, minute),
/// with the clock `Recorder::incr` reads. Shared by the baselines so that they differ
/// from the engine only in the map.
fn key_into(buf: &mut Vec<u8>, name: &str, tags: &[(&str, &str)]) {
    buf.clear();
    buf.extend_from_slice(name.as_bytes());
    buf.push(0);
    tags.write_canonical(buf);
    let minute = (now_unix_secs() / 60) as u32;
    buf.extend_from_slice(&minute.to_le_bytes());
}

type Hasher = foldhash::fast::RandomState;

/// The baseline: one `Mutex<HashMap>`, looked up without allocating on a hit.
struct MutexMap(Mutex<hashbrown::HashMap<Vec<u8>, i64, Hasher>>);

impl MutexMap {
    fn incr(&self, buf: &mut Vec<u8>, name: &str, tags: &[(&str, &str)], delta: i64) {
        key_into(buf, name, tags);
        let mut map = self.0.lock().expect("lock");
        match map.get_mut(buf.as_slice()) {
            Some(v) => *v += delta,
            None => {
                map.insert(buf.clone(), delta);
            }
        }
    }
}

/// A `DashMap` keyed by row, looked up without allocating on a hit.
struct Dash(DashMap<Vec<u8>, i64, Hasher>);

impl Dash {
    fn incr(&self, buf: &mut Vec<u8>, name: &str, tags: &[(&str, &str)], delta: i64) {
        key_into(buf, name, tags);
        if let Some(mut v) = self.0.get_mut(buf.as_slice()) {
            *v += delta;
            return;
        }
        *self.0.entry(buf.clone()).or_insert(0) += delta;
    }
}

/// Runs `ops` calls of `f` on each of `threads` threads; returns the wall time.
fn run_threads(threads: usize, ops: u64, f: Arc<dyn Fn(usize, u64) + Send + Sync>) -> Duration {
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (barrier, f) = (barrier.clone(), f.clone());
            std::thread::spawn(move || {
                barrier.wait();
                for i in 0..ops {
                    f(t, i);
                }
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

/// `distinct` keys laid over a power-of-two table, so that picking one per call is a
/// mask, not a division: a division is a sizeable fraction of an increment, and it would
/// be counted in every variant alike, narrowing the ratios. (With 10k keys over 16384
/// slots, some keys come up twice as often as others; every variant sees the same.)
fn key_cycle(distinct: usize) -> Vec<String> {
    (0..distinct.next_power_of_two())
        .map(|slot| format!("p{:06}", slot % distinct))
        .collect()
}

fn incr(c: &mut Criterion) {
    for (pattern, distinct) in [("hot_key", 1_usize), ("10k_keys", 10_000)] {
        let keys = Arc::new(key_cycle(distinct));
        let mut group = c.benchmark_group(format!("incr_{pattern}"));
        for threads in [1, 2] {
            group.throughput(Throughput::Elements(threads as u64));
            let keys_e = keys.clone();
            group.bench_function(format!("engine_{threads}t"), |b| {
                b.iter_custom(|iters| {
                    let engine = Arc::new(engine());
                    let keys = keys_e.clone();
                    let work: Arc<dyn Fn(usize, u64) + Send + Sync> = Arc::new(move |t, i| {
                        let k = &keys[(i as usize * 7 + t) & (keys.len() - 1)];
                        let tags: &[(&str, &str)] = &[("page_id", k.as_str()), ("env", "prod")];
                        // What `Recorder::incr` does.
                        let _ = engine.record("page.views", tags, 1, now_unix_secs(), None);
                    });
                    run_threads(threads, iters, work)
                });
            });
            let keys_m = keys.clone();
            group.bench_function(format!("mutex_hashmap_{threads}t"), |b| {
                b.iter_custom(|iters| {
                    let map = Arc::new(MutexMap(Mutex::new(hashbrown::HashMap::with_hasher(Hasher::default()))));
                    let keys = keys_m.clone();
                    let work: Arc<dyn Fn(usize, u64) + Send + Sync> = Arc::new(move |t, i| {
                        thread_local!(static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) });
                        let k = &keys[(i as usize * 7 + t) & (keys.len() - 1)];
                        let tags: &[(&str, &str)] = &[("page_id", k.as_str()), ("env", "prod")];
                        BUF.with_borrow_mut(|buf| map.incr(buf, "page.views", tags, 1));
                    });
                    run_threads(threads, iters, work)
                });
            });
            let keys_d = keys.clone();
            group.bench_function(format!("dashmap_{threads}t"), |b| {
                b.iter_custom(|iters| {
                    let map = Arc::new(Dash(DashMap::with_hasher(Hasher::default())));
                    let keys = keys_d.clone();
                    let work: Arc<dyn Fn(usize, u64) + Send + Sync> = Arc::new(move |t, i| {
                        thread_local!(static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) });
                        let k = &keys[(i as usize * 7 + t) & (keys.len() - 1)];
                        let tags: &[(&str, &str)] = &[("page_id", k.as_str()), ("env", "prod")];
                        BUF.with_borrow_mut(|buf| map.incr(buf, "page.views", tags, 1));
                    });
                    run_threads(threads, iters, work)
                });
            });
        }
        group.finish();
    }
}

/// One fixed workload of a million operations, for instruction counting (see the module
/// doc). Not inlined, so that callgrind reports it as one function.
#[inline(never)]
fn run_once(workload: &str) {
    const OPS: usize = 1_000_000;
    let engine = engine();
    match workload {
        "ingest" => {
            let data = packets(100, OPS / 20);
            for packet in &data[..20] {
                engine.ingest_packet(packet, Transport::Udp, NOW);
            }
            measured(|| {
                for packet in &data {
                    engine.ingest_packet(packet, Transport::Udp, NOW);
                }
            });
        }
        "ingest_100k" => {
            // As the criterion bench: each pass creates 100k rows, then they are drained.
            let data = packets(100_000, 10_000);
            for packet in &data {
                engine.ingest_packet(packet, Transport::Udp, NOW);
            }
            engine.aggregator().take_all();
            measured(|| {
                for _ in 0..OPS / 200_000 {
                    for packet in &data {
                        engine.ingest_packet(packet, Transport::Udp, NOW);
                    }
                    engine.aggregator().take_all();
                }
            });
        }
        "incr_hot" | "incr_10k" => {
            let keys = key_cycle(if workload == "incr_hot" { 1 } else { 10_000 });
            let call = |i: usize| {
                let k = &keys[(i * 7) & (keys.len() - 1)];
                let tags: &[(&str, &str)] = &[("page_id", k.as_str()), ("env", "prod")];
                let _ = engine.record("page.views", tags, 1, now_unix_secs(), None);
            };
            (0..OPS).for_each(call);
            measured(|| (0..OPS).for_each(call));
        }
        other => panic!("unknown ENGINE_BENCH_ONCE workload {other:?}"),
    }
    std::hint::black_box(engine.aggregator().pending_rows());
}

/// The measured part of [`run_once`], as its own symbol in callgrind's output.
#[inline(never)]
fn measured(f: impl FnOnce()) {
    f();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = ingest, incr
}

fn main() {
    if let Ok(workload) = std::env::var("ENGINE_BENCH_ONCE") {
        run_once(&workload);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
