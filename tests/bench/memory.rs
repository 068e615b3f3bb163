//! Bytes per pending row at 1M distinct rows, measured by a counting allocator (run with
//! `cargo bench --bench memory`). Not a criterion bench: it measures space, not time.
//!
//! Each row has a typical 30-byte key (metric name plus canonical tags). The figure is
//! heap bytes allocated while the rows were added, divided by the rows; resident memory
//! (RSS) growth is printed beside it, and so is the engine's own estimate, which its
//! `max_pending_bytes` limit relies on.
//!
//! With `--features metrics-facade`, it also prints the heap bytes the `metrics` facade
//! recorder keeps per registered counter key (its registry entry and one thread's handle).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use countersink::config::Config;
use countersink::engine::Engine;
use countersink::vocabulary::Transport;

struct Counting;

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);
/// The most `ALLOCATED` reached since it was last reset.
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew() {
    PEAK.fetch_max(ALLOCATED.load(Ordering::Relaxed), Ordering::Relaxed);
}

// SAFETY: every call is forwarded to the system allocator unchanged; only a counter is
// updated beside it.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        grew();
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATED.fetch_add(new_size, Ordering::Relaxed);
        grew();
        ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn main() {
    const ROWS: usize = 1_000_000;
    let mut config = Config::default();
    config.limits.max_pending_rows = ROWS * 2;
    config.limits.max_pending_bytes = 4 << 30;
    let engine = Engine::with_seed(&config, Some(1)).expect("engine");
    // A 30-byte key: `page.views` (10) + `env:prod,page_id:p0000000` (20 after canonical sort).
    let lines: Vec<Vec<u8>> = (0..ROWS)
        .map(|i| format!("page.views:1|c|#page_id:p{i:07},env:prod\n").into_bytes())
        .collect();
    let (heap_before, rss_before) = (ALLOCATED.load(Ordering::Relaxed), rss_bytes());
    for line in &lines {
        engine.ingest_packet(line, Transport::Udp, 1_796_042_096);
    }
    let heap = ALLOCATED.load(Ordering::Relaxed) - heap_before;
    let rss = rss_bytes().saturating_sub(rss_before);
    let rows = engine.aggregator().pending_rows();
    assert_eq!(rows, ROWS);
    println!("rows: {rows}");
    println!("heap bytes per row: {:.1}", heap as f64 / rows as f64);
    println!("rss bytes per row: {:.1}", rss as f64 / rows as f64);
    println!(
        "estimated bytes per row (what max_pending_bytes charges a held row): {:.1}",
        engine.aggregator().pending_bytes() as f64 / rows as f64
    );

    // The same rows drained and planned into writes (a minute write and a day write per
    // row, each its own partition): the most heap held at once, per row, from the drain
    // to the planned writes, beyond what the pending rows held.
    let held = ALLOCATED.load(Ordering::Relaxed);
    PEAK.store(held, Ordering::Relaxed);
    let drained = engine.aggregator().take_all();
    let writes = countersink::flush::plan::plan(
        drained.into_rows(),
        countersink::flush::PlanOptions { max_batch_rows: 16 },
        |_| None,
    );
    let peak = PEAK.load(Ordering::Relaxed);
    let after = ALLOCATED.load(Ordering::Relaxed);
    println!("writes planned: {}", writes.len());

    println!(
        "heap bytes per row while planning, pending rows included: {:.1} (peak), {:.1} once planned",
        (peak - heap_before) as f64 / rows as f64,
        (after - heap_before) as f64 / rows as f64,
    );
    drop(writes);

    #[cfg(feature = "metrics-facade")]
    facade_keys(&config);
}

/// Heap bytes per key the facade keeps: 10k keys `page.views{page_id, env}`, the page id
/// built at run time as a service would, registered on one thread.
#[cfg(feature = "metrics-facade")]
fn facade_keys(config: &Config) {
    const KEYS: usize = 10_000;
    let engine = std::sync::Arc::new(Engine::with_seed(config, Some(1)).expect("engine"));
    let recorder = countersink::facade::Builder::new()
        .max_keys(KEYS)
        .build(&engine);
    let ids: Vec<String> = (0..KEYS).map(|i| format!("p{i:07}")).collect();
    let heap_before = ALLOCATED.load(Ordering::Relaxed);
    metrics::with_local_recorder(&recorder, || {
        for id in &ids {
            let _ = metrics::counter!("page.views", "page_id" => id.clone(), "env" => "prod");
        }
    });
    let heap = ALLOCATED.load(Ordering::Relaxed) - heap_before;
    assert_eq!(recorder.registered_keys(), KEYS);
    println!(
        "facade heap bytes per registered key: {:.1}",
        heap as f64 / KEYS as f64
    );
}
