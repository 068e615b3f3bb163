//! Tests of the aggregation core and its concurrent front.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::*;
use crate::bucket::{Day, Minute};
use crate::series;
use crate::vocabulary::{DropReason, FamilyId, Granularity};

fn key<'a>(series: &'a [u8], minute: u32) -> RowKeyRef<'a> {
    RowKeyRef {
        family: FamilyId(0),
        slot: Slot::Both(Minute(minute)),
        series,
    }
}

fn small_limits(rows: usize) -> Limits {
    Limits {
        max_pending_rows: rows,
        ..Limits::default()
    }
}

#[test]
fn increments_to_one_row_sum_and_snapshot_is_stable() {
    let agg = Aggregator::new(Limits::default(), 4, Some(1));
    let a = series::encode(["page.views", "env:prod"]);
    let b = series::encode(["page.views", "env:dev"]);
    {
        let mut s = agg.stripe();
        s.record(key(&a, 10), 1, 0, 5).unwrap();
        s.record(key(&a, 10), 1, 0, -2).unwrap();
        s.record(key(&b, 10), 1, 0, 1).unwrap();
        s.record(key(&a, 11), 1, 0, 7).unwrap();
    }
    assert_eq!(
        agg.snapshot().to_string(),
        "0/Both(Minute(10))/page.views|env:dev = [1]\n\
         0/Both(Minute(10))/page.views|env:prod = [3]\n\
         0/Both(Minute(11))/page.views|env:prod = [7]\n"
    );
    assert_eq!(
        (agg.pending_rows(), agg.pending_sum(Granularity::Minute)),
        (3, 11)
    );
    let c = agg.counters();
    assert_eq!((c.accepted, c.accepted_sum, c.dropped_total()), (4, 11, 0));
}

#[test]
fn wide_rows_keep_columns_apart() {
    let agg = Aggregator::new(Limits::default(), 1, Some(1));
    let s = series::encode(["p1"]);
    let mut stripe = agg.stripe();
    stripe.record(key(&s, 1), 3, 0, 1).unwrap();
    stripe.record(key(&s, 1), 3, 2, 100).unwrap();
    stripe.record(key(&s, 1), 3, 0, 1).unwrap();
    drop(stripe);
    assert_eq!(
        agg.snapshot().to_string(),
        "0/Both(Minute(1))/p1 = [2, 0, 100]\n"
    );
}

#[test]
fn row_limit_drops_new_rows_but_not_existing_ones() {
    let agg = Aggregator::new(small_limits(2), 1, Some(1));
    let keys: Vec<_> = (0..3)
        .map(|i| series::encode([format!("k{i}").as_str()]))
        .collect();
    let mut s = agg.stripe();
    s.record(key(&keys[0], 1), 1, 0, 1).unwrap();
    s.record(key(&keys[1], 1), 1, 0, 1).unwrap();
    assert_eq!(
        s.record(key(&keys[2], 1), 1, 0, 9),
        Err(DropReason::MaxRows)
    );
    s.record(key(&keys[0], 1), 1, 0, 1).unwrap();
    drop(s);
    let c = agg.counters();
    assert_eq!(c.dropped_for(DropReason::MaxRows), 1);
    assert_eq!(c.dropped_sum_total(), 9);
    // What the test fed, row by row: k0 twice, k1 once; k2 refused.
    assert_eq!(
        drain(&agg),
        BTreeMap::from([(keys[0].clone(), vec![2]), (keys[1].clone(), vec![1])])
    );
}

/// Every pending row's columns, by series, drained (one minute, one family in these tests).
fn drain(agg: &Aggregator) -> BTreeMap<Vec<u8>, Vec<i128>> {
    let mut rows: BTreeMap<Vec<u8>, Vec<i128>> = BTreeMap::new();
    for (key, row) in agg.take_all().into_rows() {
        let columns = rows
            .entry(key.series().to_vec())
            .or_insert_with(|| vec![0; row.columns.as_slice().len()]);
        for (sum, v) in columns.iter_mut().zip(row.columns.as_slice()) {
            *sum += i128::from(*v);
        }
    }
    rows
}

/// Limits whose rows may take `bytes` (and not much more): `max_pending_bytes` less the
/// flush's share.
fn limits_holding(bytes: usize) -> Limits {
    let mut limits = Limits {
        max_pending_bytes: bytes * 4 / 3,
        ..Limits::default()
    };
    while limits.row_bytes() < bytes {
        limits.max_pending_bytes += 1;
    }
    limits
}

#[test]
fn byte_limit_drops_and_counts() {
    let limits = limits_holding(
        buffer::estimated_row_bytes(series::encode(["a"]).len(), &Columns::One(0)) + 10,
    );
    let agg = Aggregator::new(limits, 1, Some(1));
    let short = series::encode(["a"]);
    let long = series::encode(["a-much-longer-series-key"]);
    let mut s = agg.stripe();
    s.record(key(&short, 1), 1, 0, 1).unwrap();
    assert_eq!(s.record(key(&long, 1), 1, 0, 1), Err(DropReason::MaxBytes));
    drop(s);
    assert_eq!(agg.counters().dropped_for(DropReason::MaxBytes), 1);
}

#[test]
fn overflowing_sum_is_dropped_not_wrapped() {
    let agg = Aggregator::new(Limits::default(), 1, Some(1));
    let s = series::encode(["x"]);
    let mut stripe = agg.stripe();
    stripe.record(key(&s, 1), 1, 0, i64::MAX).unwrap();
    assert_eq!(
        stripe.record(key(&s, 1), 1, 0, 1),
        Err(DropReason::Overflow)
    );
    stripe.record(key(&s, 1), 1, 0, i64::MIN).unwrap();
    drop(stripe);
    assert_eq!(agg.snapshot().to_string(), "0/Both(Minute(1))/x = [-1]\n");
    let c = agg.counters();
    assert_eq!(c.dropped_for(DropReason::Overflow), 1);
    assert_eq!(c.dropped_sum_total(), 1, "the refused +1");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        failure_persistence: None,
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// Random increments (extreme deltas included) into rows of three columns under a
    /// small row limit, against a model that knows nothing of the buffer: a row is
    /// created while fewer than the limit exist, a column sum never leaves i64. Every
    /// row and column, and every drop by reason, must match the model.
    #[test]
    fn the_buffer_matches_an_independent_model(
        ops in proptest::collection::vec(
            (0_u8..12, 0_usize..3, proptest::prop_oneof![
                -5_i64..5,
                proptest::strategy::Just(i64::MAX),
                proptest::strategy::Just(i64::MIN),
            ]),
            1..200,
        ),
    ) {
        let limit = 6;
        let agg = Aggregator::new(small_limits(limit), 1, Some(1));
        let mut model: BTreeMap<Vec<u8>, [i64; 3]> = BTreeMap::new();
        let mut dropped: BTreeMap<&str, (u64, i128)> = BTreeMap::new();
        for (k, column, delta) in ops {
            let series = series::encode([format!("k{k}").as_str()]);
            let result = agg.stripe().record(key(&series, 1), 3, column, delta);
            let rows = model.len();
            let expected = match model.get_mut(&series) {
                Some(row) => match row[column].checked_add(delta) {
                    Some(sum) => {
                        row[column] = sum;
                        Ok(())
                    }
                    None => Err(DropReason::Overflow),
                },
                None if rows >= limit => Err(DropReason::MaxRows),
                None => {
                    let mut row = [0; 3];
                    row[column] = delta;
                    model.insert(series.clone(), row);
                    Ok(())
                }
            };
            proptest::prop_assert_eq!(result, expected);
            if let Err(reason) = expected {
                let entry = dropped.entry(reason.as_str()).or_default();
                entry.0 += 1;
                entry.1 += i128::from(delta);
            }
        }
        let counters = agg.counters();
        for reason in DropReason::ALL {
            let (count, sum) = dropped.get(reason.as_str()).copied().unwrap_or_default();
            proptest::prop_assert_eq!(counters.dropped_for(reason), count);
            proptest::prop_assert_eq!(counters.dropped_sum[reason.index()], sum);
        }
        let expected: BTreeMap<Vec<u8>, Vec<i128>> = model
            .into_iter()
            .map(|(k, row)| (k, row.iter().map(|v| i128::from(*v)).collect()))
            .collect();
        proptest::prop_assert_eq!(drain(&agg), expected);
    }
}

#[test]
fn drained_rows_keep_their_budget_until_they_are_gone() {
    let agg = Aggregator::new(small_limits(1), 2, Some(1));
    let s = series::encode(["x"]);
    agg.stripe().record(key(&s, 1), 1, 0, 4).unwrap();
    let bytes = agg.pending_bytes();
    let drained = agg.take_all();
    assert_eq!(
        (
            drained.len(),
            drained.sum(Granularity::Minute),
            drained.sum(Granularity::Day)
        ),
        (1, 4, 4)
    );
    assert!(agg.snapshot().is_empty());
    assert_eq!(
        (agg.pending_rows_estimate(), agg.pending_bytes()),
        (1, bytes),
        "rows in flight still hold their room"
    );
    assert_eq!(
        agg.stripe().record(key(&s, 2), 1, 0, 1),
        Err(DropReason::MaxRows),
        "so intake cannot refill it"
    );
    let (rows, credit) = drained.into_parts();
    assert_eq!((credit.rows(), credit.bytes()), (1, bytes));
    drop(rows);
    drop(credit);
    assert_eq!((agg.pending_rows_estimate(), agg.pending_bytes()), (0, 0));
    agg.stripe().record(key(&s, 2), 1, 0, 1).unwrap();
}

#[test]
fn merge_back_keeps_slots_apart_and_marks_the_age() {
    let agg = Aggregator::new(small_limits(3), 1, Some(1));
    let s = series::encode(["x"]);
    // Two rows drained (their writes failed), one fresh row since: the limit is reached.
    agg.stripe().record(key(&s, 1), 1, 0, 1).unwrap();
    agg.stripe().record(key(&s, 2), 1, 0, 1).unwrap();
    let (_, mut credit) = agg.take_all().into_parts();
    agg.stripe().record(key(&s, 60), 1, 0, 3).unwrap();
    assert_eq!(agg.room().rows, 0);
    let requeue = |slot, v, since| {
        (
            RowKey::new(FamilyId(0), slot, s.clone().into_boxed_slice()),
            Row {
                columns: Columns::One(v),
                requeued_since: since,
            },
        )
    };
    // The limit is reached, but the re-queued rows take the room of the rows they were
    // drained as (the third one merges into the second: no room needed).
    let refused = agg.merge_back(
        [
            requeue(Slot::MinuteOnly(Minute(60)), 2, 500),
            requeue(Slot::DayOnly(Day(0)), 5, 400),
            requeue(Slot::DayOnly(Day(0)), 1, 300),
        ],
        &mut credit,
    );
    assert!(refused.is_empty(), "{refused:?}");
    assert_eq!(credit.rows(), 0);
    assert_eq!(
        agg.pending_sum(Granularity::Minute),
        5,
        "fresh 3 + minute-only 2"
    );
    assert_eq!(agg.pending_sum(Granularity::Day), 9, "fresh 3 + day-only 6");
    assert_eq!(
        agg.snapshot().to_string(),
        "0/Both(Minute(60))/x = [3]\n\
         0/DayOnly(Day(0))/x = [6] (requeued)\n\
         0/MinuteOnly(Minute(60))/x = [2] (requeued)\n"
    );
    let rows: HashMap<_, _> = agg
        .take_all()
        .into_rows()
        .map(|(k, r)| (k.slot(), r.requeued_since))
        .collect();
    assert_eq!(rows[&Slot::DayOnly(Day(0))], 300, "oldest failure is kept");
    assert_eq!(rows[&Slot::Both(Minute(60))], 0);
}

#[test]
fn merge_back_hands_back_a_row_that_would_overflow() {
    let agg = Aggregator::new(Limits::default(), 1, Some(1));
    let s = series::encode(["x"]);
    agg.stripe().record(key(&s, 1), 1, 0, i64::MAX).unwrap();
    let row = (
        RowKey::new(
            FamilyId(0),
            Slot::Both(Minute(1)),
            s.clone().into_boxed_slice(),
        ),
        Row {
            columns: Columns::One(1),
            requeued_since: 9,
        },
    );
    let refused = agg.merge_back([row], &mut agg.no_credit());
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].reason, RefusedReason::Overflow);
    assert_eq!(agg.pending_sum(Granularity::Minute), i128::from(i64::MAX));
}

/// A failed flush of rows that were fresh (each owed to both tables) comes back as
/// twice the rows (minute-only and day-only): what does not fit in the room the drained
/// rows held is handed back (to be spilled), never charged past the limit.
#[test]
fn rows_merged_back_never_exceed_the_limit() {
    let agg = Aggregator::new(small_limits(10), 1, Some(1));
    let keys: Vec<_> = (0..10)
        .map(|i| series::encode([format!("k{i}").as_str()]))
        .collect();
    for k in &keys {
        agg.stripe().record(key(k, 60), 1, 0, 1).unwrap();
    }
    let (rows, mut credit) = agg.take_all().into_parts();
    let mut back = Vec::new();
    for (k, row) in rows {
        let series = k.series().to_vec().into_boxed_slice();
        back.push((
            RowKey::new(FamilyId(0), Slot::MinuteOnly(Minute(60)), series.clone()),
            row.clone(),
        ));
        back.push((RowKey::new(FamilyId(0), Slot::DayOnly(Day(0)), series), row));
    }
    let refused = agg.merge_back(back, &mut credit);
    drop(credit);
    assert_eq!(refused.len(), 10);
    assert!(
        refused.iter().all(|r| r.reason == RefusedReason::NoRoom),
        "{refused:?}"
    );
    assert_eq!(agg.pending_rows(), 10);
    assert_eq!(agg.pending_rows_estimate(), 10);
    assert_eq!(agg.room().rows, 0);
    // Existing rows still take increments; new rows are dropped and counted.
    let mut s = agg.stripe();
    s.record(key(&keys[0], 60), 1, 0, 1).unwrap_err();
    drop(s);
    assert_eq!(agg.counters().dropped_for(DropReason::MaxRows), 1);
}

/// Merging rows back never asks for an early flush, even past the mark: against a store
/// that is down, that would start the next failing flush at once.
#[test]
fn rows_merged_back_do_not_call_the_pressure_callback() {
    let agg = Aggregator::new(small_limits(4), 1, Some(1));
    let fired = Arc::new(AtomicBool::new(false));
    let flag = fired.clone();
    agg.on_pressure(move || flag.store(true, Ordering::Relaxed));
    let rows: Vec<_> = (0..4)
        .map(|i| {
            (
                RowKey::new(
                    FamilyId(0),
                    Slot::MinuteOnly(Minute(1)),
                    series::encode([format!("k{i}").as_str()]).into_boxed_slice(),
                ),
                Row {
                    columns: Columns::One(1),
                    requeued_since: 1,
                },
            )
        })
        .collect();
    assert!(agg.merge_back(rows, &mut agg.no_credit()).is_empty());
    assert!(agg.under_pressure());
    assert!(!fired.load(Ordering::Relaxed));
}

#[test]
fn client_timestamps_inside_the_window_pick_their_minute() {
    let limits = Limits::default();
    let now = 1_800_000_000;
    assert_eq!(
        minute_for(now, None, &limits),
        Minute::from_unix_secs(now).ok_or(DropReason::TimestampWindow)
    );
    assert_eq!(
        minute_for(now, Some(now - 3600), &limits)
            .unwrap()
            .start_unix_secs(),
        now - 3600 - (now - 3600) % 60
    );
    assert_eq!(
        minute_for(now, Some(now - 3601), &limits),
        Err(DropReason::TimestampWindow)
    );
    assert!(minute_for(now, Some(now + 600), &limits).is_ok());
    assert_eq!(
        minute_for(now, Some(now + 601), &limits),
        Err(DropReason::TimestampWindow)
    );
    assert_eq!(
        minute_for(now, Some(i64::MIN), &limits),
        Err(DropReason::TimestampWindow)
    );
    assert_eq!(
        minute_for(now, Some(i64::MAX), &limits),
        Err(DropReason::TimestampWindow)
    );
}

/// Several threads hammer a few hot keys and many cold ones while another thread
/// drains repeatedly: every delta must come out exactly once.
#[test]
fn concurrent_adds_racing_with_drains_are_exact() {
    let agg = Arc::new(Aggregator::new(Limits::default(), 4, Some(7)));
    let writers = 4;
    let per_writer = 50_000_u64;
    let keys: Arc<Vec<Vec<u8>>> = Arc::new(
        (0..64)
            .map(|i| series::encode([format!("key{i}").as_str()]))
            .collect(),
    );
    let stop = Arc::new(AtomicBool::new(false));

    let drainer = {
        let (agg, stop) = (agg.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut totals: HashMap<Vec<u8>, i128> = HashMap::new();
            let mut drains = 0;
            loop {
                let done = stop.load(Ordering::Acquire);
                for (k, row) in agg.take_all().into_rows() {
                    *totals.entry(k.into_series().into_vec()).or_default() += row.columns.sum();
                }
                drains += 1;
                if done {
                    return (totals, drains);
                }
                std::thread::yield_now();
            }
        })
    };

    let handles: Vec<_> = (0..writers)
        .map(|w| {
            let (agg, keys) = (agg.clone(), keys.clone());
            std::thread::spawn(move || {
                for i in 0..per_writer {
                    // Key 0 is hot (every other increment); the rest spread out.
                    let k = if i % 2 == 0 {
                        0
                    } else {
                        (i as usize * 7 + w) % keys.len()
                    };
                    let delta = (i % 5) as i64 - 1;
                    agg.stripe().record(key(&keys[k], 1), 1, 0, delta).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    stop.store(true, Ordering::Release);
    let (totals, drains) = drainer.join().unwrap();
    assert!(drains > 1, "the drains raced with the writers");

    let mut expected: HashMap<Vec<u8>, i128> = HashMap::new();
    for w in 0..writers {
        for i in 0..per_writer {
            let k = if i % 2 == 0 {
                0
            } else {
                (i as usize * 7 + w) % keys.len()
            };
            *expected.entry(keys[k].clone()).or_default() += i128::from((i % 5) as i64 - 1);
        }
    }
    assert_eq!(totals, expected);
    let c = agg.counters();
    assert_eq!(c.accepted, writers as u64 * per_writer);
    assert_eq!(c.accepted_sum, expected.values().sum::<i128>());
    assert_eq!(
        (agg.pending_rows(), agg.pending_sum(Granularity::Minute)),
        (0, 0)
    );
}

#[test]
fn pressure_callback_fires_when_rows_near_the_limit() {
    let agg = Aggregator::new(small_limits(4), 1, Some(1));
    let fired = Arc::new(AtomicBool::new(false));
    let flag = fired.clone();
    agg.on_pressure(move || flag.store(true, Ordering::Relaxed));
    let keys: Vec<_> = (0..3)
        .map(|i| series::encode([format!("k{i}").as_str()]))
        .collect();
    let mut s = agg.stripe();
    s.record(key(&keys[0], 1), 1, 0, 1).unwrap();
    s.record(key(&keys[1], 1), 1, 0, 1).unwrap();
    assert!(!fired.load(Ordering::Relaxed));
    s.record(key(&keys[2], 1), 1, 0, 1).unwrap();
    assert!(fired.load(Ordering::Relaxed));
}

/// Runs of one key, jumps between keys, two minutes, growth of the table, a drain and a
/// partial merge back: every increment lands exactly where a plain map says.
#[test]
fn increments_land_exactly_through_growth_drains_and_merges() {
    let agg = Aggregator::new(Limits::default(), 1, Some(1));
    let keys: Vec<_> = (0..300)
        .map(|i| series::encode(["m", format!("k:{i}").as_str()]))
        .collect();
    let mut model: HashMap<(usize, u32), i128> = HashMap::new();
    let mut drained: HashMap<String, i128> = HashMap::new();
    let mut step = 0_i64;
    for round in 0..6_usize {
        for i in 0..keys.len() {
            // Runs of the same key, then jumps; two minutes, so slots differ too.
            let k = if i % 7 < 3 {
                i / 7
            } else {
                (i * 31 + round) % keys.len()
            };
            let minute = (i % 2) as u32;
            step += 1;
            agg.stripe()
                .record(key(&keys[k], minute), 1, 0, step)
                .unwrap();
            *model.entry((k, minute)).or_default() += i128::from(step);
        }
        if round == 2 {
            // Drain everything and merge half of it back (a failed flush).
            let (rows, mut credit) = agg.take_all().into_parts();
            let (back, gone): (Vec<_>, Vec<_>) = rows
                .into_iter()
                .partition(|(k, _)| k.series().len() % 2 == 0);
            for (k, r) in &gone {
                *drained.entry(format!("{k:?}")).or_default() += r.columns.sum();
            }
            assert!(agg.merge_back(back, &mut credit).is_empty());
        }
    }
    let mut pending: HashMap<String, i128> = HashMap::new();
    for (k, r) in agg.take_all().into_rows() {
        *pending.entry(format!("{k:?}")).or_default() += r.columns.sum();
    }
    for (k, v) in drained {
        *pending.entry(k).or_default() += v;
    }
    let mut expected: HashMap<String, i128> = HashMap::new();
    for ((k, minute), v) in model {
        let row = RowKey::new(
            FamilyId(0),
            Slot::Both(Minute(minute)),
            keys[k].clone().into(),
        );
        *expected.entry(format!("{row:?}")).or_default() += v;
    }
    assert_eq!(pending, expected);
}
