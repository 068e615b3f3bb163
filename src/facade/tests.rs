//! The facade against the engine alone: where counters land (compared with their lines),
//! what is counted instead of written, and the registry's bound.

use std::sync::Arc;

use ::metrics::{Label, counter, gauge, histogram, with_local_recorder};

use super::{Builder, FacadeRecorder};
use crate::aggregate::Counters;
use crate::config::{Config, FamilyConfig};
use crate::engine::{Engine, now_unix_secs};
use crate::line::{self, IgnoredKind, Increment, InvalidReason, Tag, Value};
use crate::vocabulary::{DropReason, Transport};

fn config() -> Config {
    let mut config = Config::default();
    config.families.push(FamilyConfig::seed_views());
    config.limits.max_key_bytes = 64;
    config
}

fn engine(config: &Config) -> Arc<Engine> {
    Arc::new(Engine::with_seed(config, Some(5)).unwrap())
}

fn facade(engine: &Arc<Engine>) -> FacadeRecorder {
    Builder::new().build(engine)
}

/// Pending rows, with the minute left out (the facade reads the clock itself).
fn rows(engine: &Engine) -> String {
    let text = engine.aggregator().snapshot().to_string();
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("Minute(") {
        out.push_str(&rest[..at + 7]);
        rest = &rest[at + 7..];
        rest = rest.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    out.push_str(rest);
    out
}

/// What the accounting sees of increments: accepted, invalid, ignored and dropped.
fn verdicts(c: &Counters) -> (u64, i128, Vec<u64>, Vec<u64>, Vec<u64>) {
    (
        c.accepted,
        c.accepted_sum,
        c.lines_invalid.to_vec(),
        c.lines_ignored.to_vec(),
        c.dropped.to_vec(),
    )
}

#[test]
fn a_counter_lands_in_the_generic_family_by_name_and_canonical_tags() {
    let engine = engine(&config());
    let recorder = facade(&engine);
    with_local_recorder(&recorder, || {
        counter!("api.requests", "status" => "200", "route" => "/home").increment(2);
        counter!("api.requests", "route" => "/home", "status" => "200").increment(3);
        counter!("api.requests", "canary" => "").increment(1);
    });
    assert_eq!(
        rows(&engine),
        "0/Both(Minute())/api.requests|canary = [1]\n\
         0/Both(Minute())/api.requests|route:/home,status:200 = [5]\n"
    );
    assert_eq!(recorder.registered_keys(), 2, "label order is the same key");
}

#[test]
fn a_configured_family_takes_the_counter_by_its_key_label() {
    let engine = engine(&config());
    let recorder = facade(&engine);
    with_local_recorder(&recorder, || {
        counter!("page.views", "page_id" => "home", "env" => "prod").increment(4);
        counter!("page.bytes", "page_id" => "home").increment(512);
        counter!("page.views", "env" => "prod").increment(1);
        counter!("page.views", "page_id" => "").increment(1);
    });
    assert_eq!(rows(&engine), "1/Both(Minute())/home = [512, 4]\n");
    let c = engine.aggregator().counters();
    assert_eq!(c.invalid_for(InvalidReason::MissingKeyTag), 2);
    assert_eq!((c.accepted, c.accepted_sum), (2, 516));
}

#[test]
fn gauges_histograms_and_absolute_updates_are_counted_ignored_and_written_nowhere() {
    let engine = engine(&config());
    let recorder = facade(&engine);
    with_local_recorder(&recorder, || {
        let g = gauge!("queue.depth", "q" => "a");
        g.set(3.0);
        g.increment(1.0);
        g.decrement(2.0);
        gauge!("page.views", "page_id" => "home").set(1.0);
        let h = histogram!("latency");
        h.record(0.25);
        h.record_many(0.5, 4);
        counter!("page.views", "page_id" => "home").absolute(100);
    });
    assert_eq!(rows(&engine), "");
    let c = engine.aggregator().counters();
    assert_eq!(c.ignored_for(IgnoredKind::Gauge), 4);
    assert_eq!(c.ignored_for(IgnoredKind::Histogram), 5);
    assert_eq!(c.ignored_for(IgnoredKind::CounterAbsolute), 1);
    assert_eq!((c.accepted, c.dropped_total()), (0, 0));
}

#[test]
fn increments_above_i64_are_bad_values_like_their_lines() {
    let engine = engine(&config());
    let recorder = facade(&engine);
    with_local_recorder(&recorder, || {
        let c = counter!("big");
        c.increment(i64::MAX as u64);
        c.increment(i64::MAX as u64 + 1);
    });
    let c = engine.aggregator().counters();
    assert_eq!(c.invalid_for(InvalidReason::BadValue), 1);
    assert_eq!((c.accepted, c.accepted_sum), (1, i128::from(i64::MAX)));
    // In the line's order: the name before the value, the value before labels and keys.
    with_local_recorder(&recorder, || {
        counter!("").increment(u64::MAX);
        counter!("big", "" => "x").increment(u64::MAX);
        counter!("page.views").increment(u64::MAX);
    });
    let c = engine.aggregator().counters();
    assert_eq!(c.invalid_for(InvalidReason::NoName), 1);
    assert_eq!(c.invalid_for(InvalidReason::BadValue), 3);
    assert_eq!(c.invalid_for(InvalidReason::BadTag), 0);
    assert_eq!(c.invalid_for(InvalidReason::MissingKeyTag), 0);
}

#[test]
fn with_the_generic_family_off_unmapped_counters_are_dropped_and_counted() {
    let mut config = config();
    config.generic.enabled = false;
    let engine = engine(&config);
    let recorder = facade(&engine);
    with_local_recorder(&recorder, || counter!("elsewhere").increment(7));
    let c = engine.aggregator().counters();
    assert_eq!(c.dropped_for(DropReason::Unconfigured), 1);
    assert_eq!(c.dropped_sum[DropReason::Unconfigured.index()], 7);
    assert_eq!(rows(&engine), "");
}

#[test]
fn after_shutdown_increments_are_dropped_and_counted() {
    let engine = engine(&config());
    let recorder = facade(&engine);
    let held = with_local_recorder(&recorder, || counter!("late"));
    held.increment(1);
    engine.aggregator().close();
    held.increment(2);
    let c = engine.aggregator().counters();
    assert_eq!((c.accepted, c.accepted_sum), (2, 3));
    assert_eq!(c.dropped_for(DropReason::AfterShutdown), 1);
}

#[test]
fn past_max_keys_new_keys_still_count_but_are_not_kept() {
    let engine = engine(&config());
    let recorder = Builder::new().max_keys(10).build(&engine);
    with_local_recorder(&recorder, || {
        for round in 0..3 {
            for i in 0..50 {
                counter!("wide", "i" => i.to_string()).increment(round + 1);
            }
        }
    });
    assert_eq!(recorder.registered_keys(), 10);
    let c = engine.aggregator().counters();
    assert_eq!((c.accepted, c.accepted_sum), (150, 50 * 6));
    assert_eq!(engine.aggregator().snapshot().len(), 50);
}

#[test]
fn recorders_taking_turns_on_one_thread_each_count_into_their_own_engine() {
    let (a, b) = (engine(&config()), engine(&config()));
    let (ra, rb) = (facade(&a), facade(&b));
    for _ in 0..5 {
        with_local_recorder(&ra, || counter!("turns", "k" => "v").increment(1));
        with_local_recorder(&rb, || counter!("turns", "k" => "v").increment(10));
    }
    assert_eq!(rows(&a), "0/Both(Minute())/turns|k:v = [5]\n");
    assert_eq!(rows(&b), "0/Both(Minute())/turns|k:v = [50]\n");
}

#[test]
fn one_key_from_several_call_sites_and_threads_is_one_row() {
    let engine = engine(&config());
    let recorder = Arc::new(facade(&engine));
    let threads: Vec<_> = (0..3)
        .map(|_| {
            let recorder = recorder.clone();
            std::thread::spawn(move || {
                with_local_recorder(&*recorder, || {
                    for _ in 0..100 {
                        counter!("sites", "a" => "1", "b" => "2").increment(1);
                        counter!("sites", "b" => "2", "a" => "1").increment(1);
                        counter!("sites", "a" => "1".to_string(), "b" => "2").increment(1);
                    }
                })
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(rows(&engine), "0/Both(Minute())/sites|a:1,b:2 = [900]\n");
    assert_eq!(recorder.registered_keys(), 1);
}

/// A name or label of the generic strategy, from an alphabet that holds every byte the
/// line grammar cares about.
fn text() -> impl proptest::strategy::Strategy<Value = String> {
    proptest::string::string_regex("(a|b|page_id|:|,|\\||_e\\{|#|@| |é|\u{1}){0,3}").unwrap()
}

proptest::proptest! {
    // Failing cases are kept next to this file (tests.regressions) and replayed first.
    #![proptest_config(proptest::prelude::ProptestConfig {
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("regressions"),
        )),
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// The facade's rule: a counter lands exactly where its DogStatsD line lands, and is
    /// refused for the reason that line would be refused for (or, when no line can carry
    /// it, for the reason the line renderer gives).
    #[test]
    fn counters_land_where_their_lines_land(
        name in proptest::prop_oneof![text(), proptest::strategy::Just("page.views".to_string())],
        labels in proptest::collection::vec((text(), text()), 0..4),
        delta in proptest::prop_oneof![0u64..1000, (i64::MAX as u64 - 1)..=u64::MAX],
    ) {
        let config = config();
        let by_facade = engine(&config);
        let recorder = facade(&by_facade);
        let key_labels: Vec<Label> =
            labels.iter().map(|(k, v)| Label::new(k.clone(), v.clone())).collect();
        with_local_recorder(&recorder, || {
            counter!(name.clone(), key_labels).increment(delta);
        });

        let by_line = engine(&config);
        let tags: Vec<Tag<'_>> = labels
            .iter()
            .map(|(k, v)| Tag { key: k, value: (!v.is_empty()).then_some(v.as_str()) })
            .collect();
        // Rendered with the value 1, then given the delta (which may not fit an i64):
        // the name holds no `:`, so the first `:1|c` is the value.
        let increment = Increment { tags: &tags, ..Increment::new(&name, &[Value::Int(1)]) };
        let mut rendered = Vec::new();
        match line::render(&increment, &mut rendered) {
            Ok(()) => {
                let rest = &rendered[name.len() + ":1|c".len()..];
                rendered = [format!("{name}:{delta}|c").as_bytes(), rest].concat();
                by_line.ingest_packet(&rendered, Transport::Udp, now_unix_secs());
            }
            // No line carries these labels: the renderer's reason, where the parser
            // would give it (it reads the name, then the value, then the tags).
            Err(reason) => {
                let reason = match reason {
                    InvalidReason::NoName | InvalidReason::BadName => reason,
                    _ if i64::try_from(delta).is_err() => InvalidReason::BadValue,
                    _ => reason,
                };
                by_line.aggregator().stripe().counters().count_invalid(reason)
            }
        }
        proptest::prop_assert_eq!(
            verdicts(&by_facade.aggregator().counters()),
            verdicts(&by_line.aggregator().counters()),
            "line {:?}", String::from_utf8_lossy(&rendered)
        );
        proptest::prop_assert_eq!(rows(&by_facade), rows(&by_line));
    }
}
