//! Parser throughput: lines per second through `split_lines` + `parse_line`, 20 lines per
//! packet, as a client that buffers its metrics into one datagram sends them.
//!
//! Two consumers are measured, because the cost that matters is what the engine pays:
//! parse only, and parse + read every value + build the canonical tag string into a reused
//! buffer (the full work per line before the aggregation map).
//!
//! Run: `cargo bench --bench parse`. The figures are noisy on a shared machine; compare
//! medians of several runs.

use std::hint::black_box;

use countersink::line::{LineLimits, LineResult, Value, parse_line, split_lines};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const LINES_PER_PACKET: u64 = 20;

/// 20 realistic lines: a few names, tags in client order (not always sorted), some sample
/// rates and multi-values, as a busy web service would send them.
fn realistic_packet() -> Vec<u8> {
    let mut packet = Vec::new();
    for i in 0..LINES_PER_PACKET {
        let line = match i % 5 {
            0 => format!("page.views:1|c|#page_id:p{i}23,env:prod"),
            1 => format!("page.bytes:{}|c|#page_id:p{i}23,env:prod", 1000 + i * 37),
            2 => {
                format!("api.requests:1|c|@0.5|#route:/v1/items,status:200,env:prod,region:eu-{i}")
            }
            3 => "likes.total:1:1:1|c|#env:prod".to_owned(),
            _ => format!("feature.impressions:1|c|#feature:f{i},variant:b,env:prod|T1700000000"),
        };
        packet.extend_from_slice(line.as_bytes());
        packet.push(b'\n');
    }
    packet
}

/// 20 minimal lines without tags: the floor of the per-line cost.
fn bare_packet() -> Vec<u8> {
    (0..LINES_PER_PACKET)
        .flat_map(|i| format!("page.views.{i}:1|c\n").into_bytes())
        .collect()
}

fn bench(c: &mut Criterion) {
    let limits = LineLimits::default();
    let mut group = c.benchmark_group("parse_20_line_packet");
    group.throughput(Throughput::Elements(LINES_PER_PACKET));

    for (name, packet) in [("realistic", realistic_packet()), ("bare", bare_packet())] {
        group.bench_function(format!("{name}/parse"), |b| {
            b.iter(|| {
                let mut counters = 0u32;
                for line in split_lines(black_box(&packet)) {
                    if let LineResult::Counter(c) = parse_line(line, &limits) {
                        counters += 1;
                        black_box(c);
                    }
                }
                counters
            })
        });

        group.bench_function(format!("{name}/parse_values_canonical_tags"), |b| {
            let mut key = Vec::with_capacity(256);
            b.iter(|| {
                let mut sum = 0i64;
                for line in split_lines(black_box(&packet)) {
                    if let LineResult::Counter(c) = parse_line(line, &limits) {
                        for v in c.values() {
                            sum = sum.wrapping_add(match v {
                                Value::Int(i) => i,
                                Value::Float(f) => f as i64,
                            });
                        }
                        key.clear();
                        c.write_canonical_tags(&mut key);
                        black_box(&key);
                    }
                }
                sum
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
