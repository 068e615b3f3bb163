//! Whole packets through the engine's line path (`Engine::ingest_packet`): the line cache,
//! family placement, scaling, limits and counters, which the parser's own target does not
//! reach.
//!
//! Beyond "no panic", three oracles:
//! - the packet is ingested twice; the second pass is served largely from the line cache
//!   (which the first pass filled), so it must count exactly the same lines received,
//!   invalid and ignored by reason, and increments accepted as the first;
//! - after each pass the rows are drained and their columns read: what the rows hold
//!   (not the buffer's own running sums) must equal the accepted sum less the dropped
//!   sum, for each table, so a lost or wrapped column is caught;
//! - without sampled values (whose rounding is random), both passes leave the same rows
//!   with the same columns.
//!
//! The first byte chooses the limits (line length, tag count, key length, pending rows)
//! so that the limit paths are reached with short inputs too.

#![no_main]

use std::collections::BTreeMap;

use countersink::aggregate::Counters;
use countersink::config::{Config, FamilyConfig};
use countersink::engine::Engine;
use countersink::vocabulary::{Granularity, Transport};
use libfuzzer_sys::fuzz_target;

/// 2026-11-30T12:34:56Z: client timestamps around it are inside the window.
const NOW: i64 = 1_796_042_096;

fn engine(selector: u8) -> Engine {
    let mut config = Config::default();
    config.families.push(FamilyConfig {
        name: "views".into(),
        minute_table: "views_by_minute".into(),
        day_table: "views_by_day".into(),
        key: vec!["page_id".into(), "env".into()],
        columns: [
            ("page.views".to_string(), "views".to_string()),
            ("page.bytes".to_string(), "bytes".to_string()),
        ]
        .into(),
        ..FamilyConfig::default()
    });
    if selector & 1 == 1 {
        config.limits.max_line_bytes = 64;
        config.limits.max_tags = 2;
        config.limits.max_key_bytes = 16;
        config.limits.max_pending_rows = 8;
    }
    config.generic.enabled = selector & 2 == 0;
    Engine::with_seed(&config, Some(u64::from(selector))).expect("a valid configuration")
}

/// What a pass must count the same whether its lines came from the cache or not.
fn line_counts(c: &Counters) -> (Vec<u64>, Vec<u64>, Vec<u64>, u64) {
    (
        c.lines_received.to_vec(),
        c.lines_invalid.to_vec(),
        c.lines_ignored.to_vec(),
        c.accepted,
    )
}

fn difference(after: &Counters, before: &Counters) -> (Vec<u64>, Vec<u64>, Vec<u64>, u64) {
    let (a, b) = (line_counts(after), line_counts(before));
    let sub = |x: Vec<u64>, y: Vec<u64>| x.iter().zip(&y).map(|(x, y)| x - y).collect();
    (sub(a.0, b.0), sub(a.1, b.1), sub(a.2, b.2), a.3 - b.3)
}

/// Drains the pending rows: columns by row, and what they owe each table.
fn drain(engine: &Engine) -> (BTreeMap<String, Vec<i128>>, [i128; 2]) {
    let mut rows: BTreeMap<String, Vec<i128>> = BTreeMap::new();
    let mut owed = [0_i128; 2];
    for (key, row) in engine.aggregator().take_all().into_rows() {
        for (i, table) in [Granularity::Minute, Granularity::Day]
            .into_iter()
            .enumerate()
        {
            if key.slot().owes(table) {
                owed[i] += row.columns.sum();
            }
        }
        let columns = rows
            .entry(format!("{key:?}"))
            .or_insert_with(|| vec![0; row.columns.as_slice().len()]);
        for (sum, v) in columns.iter_mut().zip(row.columns.as_slice()) {
            *sum += i128::from(*v);
        }
    }
    (rows, owed)
}

/// Ingests the packet, drains, and checks the rows against the counters' accepted and
/// dropped sums for this pass.
fn pass(engine: &Engine, packet: &[u8]) -> BTreeMap<String, Vec<i128>> {
    let before = engine.aggregator().counters();
    engine.ingest_packet(packet, Transport::Udp, NOW);
    let after = engine.aggregator().counters();
    let kept = (after.accepted_sum - after.dropped_sum_total())
        - (before.accepted_sum - before.dropped_sum_total());
    let (rows, owed) = drain(engine);
    assert_eq!(
        owed,
        [kept, kept],
        "what the rows hold against what was kept"
    );
    rows
}

fuzz_target!(|data: &[u8]| {
    let (selector, packet) = match data {
        [s, rest @ ..] => (*s, rest),
        [] => return,
    };
    let engine = engine(selector);
    let first_rows = pass(&engine, packet);
    let first = engine.aggregator().counters();
    let second_rows = pass(&engine, packet);
    let both = engine.aggregator().counters();
    assert_eq!(
        difference(&both, &first),
        line_counts(&first),
        "the cached pass counted differently"
    );
    if !packet.contains(&b'@') {
        assert_eq!(first_rows, second_rows, "the cached pass left other rows");
    }
    let _ = engine.aggregator().snapshot().to_string();
});
