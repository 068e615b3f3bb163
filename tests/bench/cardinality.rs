//! What the cardinality caps cost the ingest path when configured but not hit (run with
//! `cargo bench --bench cardinality`).
//!
//! The same packets go through two engines in the same run, alternately: one without
//! caps (the baseline), one whose families have caps far above the load (`max_contexts`
//! and a `max_tag_values` on the tag every line carries). The caps are asked only when a
//! pending row is created, so the workloads create rows as often as they can:
//!
//! - `100_keys`: 20-line packets over 100 keys, drained after every pass (rows are created
//!   again after each drain, as after each flush); one window, so every check is a
//!   context seen before (the steady state: contexts recur from flush to flush);
//! - `100k_keys`: the same over 100k keys: every line of a pass creates its row;
//! - `100k_keys_new_window`: as `100k_keys`, each pass in the next window, so every row
//!   creation is a context new to its window (the caps' most expensive case);
//! - `100_keys_control`: `100_keys` with two engines *without* caps: how far apart two
//!   identical engines measure in this run (placement in memory, the machine's noise).
//!
//! Each sample is one pass of 200k lines; the figures are the medians of the samples of
//! each engine and their ratio (capped / baseline), printed per workload.
//!
//! On a loaded shared machine the wall-clock ratios swing (see the control); instruction
//! counts do not. With `CARDINALITY_BENCH_ONCE=WORKLOAD:base|capped` the binary runs one
//! warm-up pass and then two passes inside `measured`, for callgrind:
//!
//! ```text
//! cargo bench --bench cardinality --no-run
//! CARDINALITY_BENCH_ONCE=100k_keys:capped valgrind --tool=callgrind \
//!     --toggle-collect='cardinality::measured*' target/release/deps/cardinality-<hash>
//! ```

use std::time::Instant;

use countersink::config::Config;
use countersink::engine::Engine;
use countersink::vocabulary::Transport;

const NOW: i64 = 1_796_042_040;
const SAMPLES: usize = 11;
const PACKETS: usize = 10_000;

fn engine(capped: bool) -> Engine {
    let mut config = Config::default();
    config.limits.max_pending_rows = 10_000_000;
    config.limits.max_pending_bytes = 4 << 30;
    if capped {
        config.generic.max_contexts = Some(5_000_000);
        config.generic.max_tag_values =
            [("page_id".to_string(), 5_000_000), ("env".to_string(), 10)].into();
    }
    Engine::with_seed(&config, Some(1)).expect("engine")
}

/// `PACKETS` packets of 20 lines cycling over `keys` distinct keys.
fn packets(keys: usize) -> Vec<Vec<u8>> {
    (0..PACKETS)
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

/// Nanoseconds per line of one pass at `now`, drained after.
fn pass(engine: &Engine, data: &[Vec<u8>], now: i64) -> f64 {
    let start = Instant::now();
    for packet in data {
        engine.ingest_packet(packet, Transport::Udp, now);
    }
    engine.aggregator().take_all();
    start.elapsed().as_nanos() as f64 / (20 * data.len()) as f64
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Workloads: name, keys, whether each pass is in a window of its own.
const WORKLOADS: [(&str, usize, bool); 3] = [
    ("100_keys", 100, false),
    ("100k_keys", 100_000, false),
    ("100k_keys_new_window", 100_000, true),
];

/// One engine through one workload, for an instruction count (see the module docs).
fn run_once(spec: &str) {
    let (workload, which) = spec.split_once(':').expect("WORKLOAD:base|capped");
    let &(_, keys, new_window) = WORKLOADS
        .iter()
        .find(|w| w.0 == workload)
        .expect("a known workload");
    let engine = engine(which == "capped");
    let data = packets(keys);
    pass(&engine, &data, NOW);
    measured(|| {
        for round in 1..=2 {
            let now = if new_window { NOW + 60 * round } else { NOW };
            pass(&engine, &data, now);
        }
    });
    assert_eq!(engine.aggregator().counters().dropped_total(), 0);
}

/// The measured part of [`run_once`], as its own symbol in callgrind's output.
#[inline(never)]
fn measured(f: impl FnOnce()) {
    f();
}

fn main() {
    if let Ok(spec) = std::env::var("CARDINALITY_BENCH_ONCE") {
        run_once(&spec);
        return;
    }
    // `cargo bench` passes `--bench`; a filter argument selects workloads by name.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    println!("workload                  baseline ns/line   capped ns/line   ratio");
    for (name, keys, new_window, caps) in [
        ("100_keys", 100, false, true),
        ("100_keys_control", 100, false, false),
        ("100k_keys", 100_000, false, true),
        ("100k_keys_new_window", 100_000, true, true),
    ] {
        if filter.as_deref().is_some_and(|f| !name.contains(f)) {
            continue;
        }
        let data = packets(keys);
        let (base, capped) = (engine(false), engine(caps));
        // Warm-up: one pass each (tables and caches sized).
        pass(&base, &data, NOW);
        pass(&capped, &data, NOW);
        let (mut b, mut c) = (Vec::new(), Vec::new());
        for sample in 0..SAMPLES {
            let now = if new_window {
                NOW + 60 * (sample as i64 + 1)
            } else {
                NOW
            };
            // Alternate which goes first, so drift on a shared machine hits both.
            if sample % 2 == 0 {
                b.push(pass(&base, &data, now));
                c.push(pass(&capped, &data, now));
            } else {
                c.push(pass(&capped, &data, now));
                b.push(pass(&base, &data, now));
            }
        }
        let (b, c) = (median(b), median(c));
        println!("{name:<25} {b:>16.1} {c:>16.1} {:>7.3}", c / b);
        assert_eq!(
            capped.aggregator().counters().dropped_total(),
            0,
            "the caps were not to be hit"
        );
    }
}
