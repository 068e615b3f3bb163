//! What name-mapping and tag rules cost per line, against the same lines without rules,
//! in one run (criterion; `cargo bench --bench mapping`).
//!
//! Twenty rules, as a service with a handful of metric families might write them: five
//! globs each under the first components `api`, `web` and `db`, three globs without a
//! fixed first component, and two regexes (one indexed under `cache`, one tried against
//! every name); plus tag rules: the default deny list, a deny and a rename. The lines are
//! realistic DogStatsD lines with four tags, one of them the pod UID clients add.
//!
//! - `resolve/*`: parse + [`Families::resolve`] of a 20-line packet, the routing work of a
//!   line the engine's cache has not seen, without the aggregation map:
//!   - `plain`: no rules (and no default deny list); every line goes to the generic family;
//!   - `rules_unmatched`: the 20 rules, lines no rule matches (each is compared with the
//!     shapes of the `api` rules and the unindexed globs, the unindexed regex is tried,
//!     then it goes to the generic family without its pod UID): the tax on every name the
//!     rules do not take;
//!   - `rules_matched`: the 20 rules, lines the last `api` rule matches (key from a
//!     capture and a tag).
//! - `engine/*`: the whole line path (`Engine::ingest_packet`) over 100k distinct keys, so
//!   that nearly every line misses the engine's line cache: `plain` against `rules_unmatched`.
//!
//! Report `rules_* / plain` per group, medians of several runs, as docs/src/performance.md does.

use std::hint::black_box;

use countersink::config::Config;
use countersink::engine::Engine;
use countersink::family::Families;
use countersink::line::{LineLimits, LineResult, parse_line, split_lines};
use countersink::vocabulary::Transport;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const NOW: i64 = 1_796_042_096;
const LINES: u64 = 20;

/// The families and the twenty rules (`rules = false`: the same families, no rules, no
/// default deny list).
fn config(rules: bool) -> Config {
    let mut text = String::from(
        r#"
[[family]]
name = "api"
minute_table = "api_m"
day_table = "api_d"
key = ["endpoint", "region"]
[family.columns]
"api.total" = "requests"

[[family]]
name = "web"
minute_table = "web_m"
day_table = "web_d"
key = ["page"]
[family.columns]
"web.total" = "hits"
"#,
    );
    if rules {
        for (head, family, key) in [
            ("api", "api", "endpoint"),
            ("web", "web", "page"),
            ("db", "web", "page"),
        ] {
            for (i, tail) in ["errors", "retries", "timeouts", "bytes", "requests"]
                .iter()
                .enumerate()
            {
                text.push_str(&format!(
                    "[[mapping]]\nmatch = \"{head}.*.{tail}\"\nfamily = \"{family}\"\ncolumn = \"{tail}{i}\"\nkey = {{ {key} = \"$1\" }}\n"
                ));
            }
        }
        for tail in ["logins", "signups", "checkouts"] {
            text.push_str(&format!(
                "[[mapping]]\nmatch = \"*.{tail}.count\"\nfamily = \"web\"\ncolumn = \"{tail}\"\nkey = {{ page = \"$1\" }}\n"
            ));
        }
        text.push_str(
            "[[mapping]]\nmatch = 'cache\\.([^.]+)\\.hits'\nmatch_type = \"regex\"\nfamily = \"web\"\ncolumn = \"cache_hits\"\nkey = { page = \"$1\" }\n\
             [[mapping]]\nmatch = '([a-z]+)\\.timing\\.total'\nmatch_type = \"regex\"\nfamily = \"web\"\ncolumn = \"timing\"\nkey = { page = \"$1\" }\n\
             [tags]\ndeny = [\"host\"]\nrename = { az = \"region\" }\n",
        );
    } else {
        text.push_str("[tags]\ndeny_default = false\n");
    }
    let mut config = Config::from_toml(&text).expect("bench config");
    config.limits.max_pending_rows = 10_000_000;
    config.limits.max_pending_bytes = 4 << 30;
    assert_eq!(config.mappings.len(), if rules { 20 } else { 0 });
    config
}

/// `packets` packets of 20 lines named `api.<endpoint>.<tail>`, over `keys` page values.
fn packets(tail: &str, keys: usize, packets: usize) -> Vec<Vec<u8>> {
    (0..packets)
        .map(|p| {
            let mut packet = Vec::new();
            for l in 0..LINES as usize {
                let k = (p * LINES as usize + l) % keys;
                packet.extend_from_slice(
                    format!(
                        "api.e{}.{tail}:1|c|#region:eu,env:prod,page:p{k:06},dd.internal.entity_id:0f6c2b4e-8f1a-4c55-9d7e-3b2a1c0d9e8f\n",
                        l % 7
                    )
                    .as_bytes(),
                );
            }
            packet
        })
        .collect()
}

fn resolve(c: &mut Criterion) {
    let limits = LineLimits::default();
    let mut group = c.benchmark_group("resolve");
    group.throughput(Throughput::Elements(LINES));
    for (name, rules, tail) in [
        ("plain", false, "other"),
        ("rules_unmatched", true, "other"),
        ("rules_matched", true, "requests"),
    ] {
        let families = Families::from_config(&config(rules)).expect("families");
        let packet = packets(tail, 100, 1).remove(0);
        group.bench_function(name, |b| {
            let mut series = Vec::with_capacity(256);
            b.iter(|| {
                let mut placed = 0u32;
                for line in split_lines(black_box(&packet)) {
                    if let LineResult::Counter(counter) = parse_line(line, &limits)
                        && families
                            .resolve(counter.name(), &counter, &mut series)
                            .is_ok()
                    {
                        placed += 1;
                        black_box(&series);
                    }
                }
                assert_eq!(placed, LINES as u32);
                placed
            })
        });
    }
    group.finish();
}

fn engine(c: &mut Criterion) {
    let mut group = c.benchmark_group("engine");
    let data = packets("other", 100_000, 10_000);
    group.throughput(Throughput::Elements(LINES * data.len() as u64));
    for (name, rules) in [("plain", false), ("rules_unmatched", true)] {
        group.bench_function(name, |b| {
            let engine = Engine::with_seed(&config(rules), Some(1)).expect("engine");
            b.iter(|| {
                for packet in &data {
                    engine.ingest_packet(packet, Transport::Udp, NOW);
                }
                engine.aggregator().take_all();
            });
        });
    }
    group.finish();
}

criterion_group!(benches, resolve, engine);
criterion_main!(benches);
