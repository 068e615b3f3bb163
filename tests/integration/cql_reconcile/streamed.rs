//! A streamed run over many slices counts every key once; the plan of keys it checks
//! against, written straight into cqlsim, and the store it is written to (also used by
//! `reconcile_slices`).

use std::sync::Arc;

use scylla::client::session::Session;

use super::*;

/// One key of [`streamed_day`]: its ledger value (none: no ledger row), its counter
/// (minute and day rows; none: no counter rows), and whether the key index has it.
pub(crate) struct Planned {
    pub(crate) ledger: Option<i64>,
    pub(crate) counter: Option<i64>,
    pub(crate) indexed: bool,
}

/// 2 000 keys of the generic family: most equal to their ledger; every 97th drifted +3
/// by an outside writer, every 89th only in the key index and the counters (its ledger
/// row lost), every 101st in the ledger only (its counter writes lost).
pub(crate) fn streamed_plan() -> Vec<Planned> {
    (0..2_000_i64)
        .map(|i| {
            let value = 1 + i % 9;
            match i {
                i if i % 97 == 0 => Planned {
                    ledger: Some(value),
                    counter: Some(value + 3),
                    indexed: true,
                },
                i if i % 89 == 0 => Planned {
                    ledger: None,
                    counter: Some(value),
                    indexed: true,
                },
                i if i % 101 == 0 => Planned {
                    ledger: Some(value),
                    counter: None,
                    indexed: true,
                },
                _ => Planned {
                    ledger: Some(value),
                    counter: Some(value),
                    indexed: true,
                },
            }
        })
        .collect()
}

/// The configuration, cqlsim and a session for a plan written straight into the store:
/// the generic family exact, the key index on, the writer's state in `state`.
pub(crate) async fn start_streamed(state: &std::path::Path) -> (Config, Store, Arc<Session>) {
    let mut config = exact_config(state);
    config.generic.exact = true;
    config.key_index.enabled = true;
    let store = start_cqlsim(&mut config, "writes a day's rows in process").await;
    let session = Arc::new(
        countersink::sink::cql::session::connect(&config.store)
            .await
            .unwrap(),
    );
    (config, store, session)
}

/// Writes `plan` for `day` straight into cqlsim, bucketed as `config` says.
pub(crate) fn write_plan(sim: &cqlsim::Server, config: &Config, day: Day, plan: &[Planned]) {
    let families = countersink::family::Families::from_config(config).unwrap();
    let generic = families.by_name("generic").unwrap();
    let date = format_date(day.date());
    let ks = config.exact_keyspace();
    let index = countersink::ops::keyindex::index_table(config);
    for (i, key) in plan.iter().enumerate() {
        let tags = format!("key:k{i}");
        let json = serde_json::to_string(&["s", tags.as_str()]).unwrap();
        if let Some(value) = key.ledger {
            sim.execute(None, &format!(
                "INSERT INTO {ks}.delta_ledger (family, day, bucket, key, minute, writer, incarnation, flush_seq, part, deltas) VALUES ('generic', '{date}', {}, '{json}', 7, 'w', 1, 1, 0, {{'value': {value}}})",
                countersink::family::key_bucket(&json, config.exact.buckets)
            )).unwrap();
        }
        if key.indexed && config.key_index.enabled {
            sim.execute(None, &format!(
                "INSERT INTO {index} (family, day, bucket, key) VALUES ('generic', '{date}', {}, '{json}')",
                countersink::family::key_bucket(&json, config.key_index.buckets)
            )).unwrap();
        }
        if let Some(value) = key.counter {
            sim.execute(None, &format!(
                "UPDATE {} SET value = value + {value} WHERE name = 's' AND tags = '{tags}' AND day = '{date}' AND minute = 7",
                generic.minute_table.as_ref().unwrap()
            )).unwrap();
            sim.execute(None, &format!(
                "UPDATE {} SET value = value + {value} WHERE name = 's' AND tags = '{tags}' AND month = '{}' AND day = '{date}'",
                generic.day_table.as_ref().unwrap(), &date[..7]
            )).unwrap();
        }
    }
}

/// A streamed run over many slices (16 with the default 64 ledger and 16 index buckets;
/// 1 with coprime counts; 64 with the index off) counts exactly what the plan holds, key
/// by key: the same summary whatever the slicing, and a capped listing changes the
/// listing only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_run_counts_every_key_of_every_slice_once() {
    let dir = tempfile::tempdir().unwrap();
    let (config, store, session) = start_streamed(dir.path()).await;
    let plan = streamed_plan();
    let mut index_7 = config.clone();
    index_7.key_index.buckets = 7;
    let mut no_index = config.clone();
    no_index.key_index.enabled = false;
    let cases = [(&config, 16), (&index_7, 1), (&no_index, 64)];
    let mut summaries = Vec::new();
    for (n, (case, slices)) in cases.into_iter().enumerate() {
        assert_eq!(reconcile::slices(case), slices);
        let day = Day(day().0 - 1 - n as u32);
        write_plan(store.sim(), case, day, &plan);
        let indexed = case.key_index.enabled;
        // What the plan says, key by key.
        let seen: Vec<&Planned> = plan
            .iter()
            .filter(|k| k.ledger.is_some() || indexed)
            .collect();
        let exact: i128 = seen.iter().filter_map(|k| k.ledger).map(i128::from).sum();
        let counter: i128 = seen.iter().filter_map(|k| k.counter).map(i128::from).sum();
        let drifting = seen.iter().filter(|k| k.ledger != k.counter).count();
        let drift: i128 = seen
            .iter()
            .map(|k| (k.counter.unwrap_or(0) - k.ledger.unwrap_or(0)).abs() as i128)
            .sum();
        let families = countersink::family::Families::from_config(case).unwrap();
        let mut options = run_options(day, 16);
        let generic = families.by_name("generic").unwrap();
        let report = reconcile::reconcile(&session, case, generic, &options, &|_| {})
            .await
            .unwrap();
        let s = &report.summary;
        assert_eq!(s.keys, seen.len(), "case {n}: {s:?}");
        assert_eq!(s.exact_total, exact, "case {n}");
        assert_eq!(s.counter_total["minute"], counter, "case {n}");
        assert_eq!(s.counter_total["day"], counter, "case {n}");
        assert_eq!(s.statuses["ok"], 2 * (seen.len() - drifting), "case {n}");
        assert_eq!(s.statuses["unexplained"], 2 * drifting, "case {n}");
        assert_eq!(s.drift_unexplained, 2 * drift, "case {n}");
        assert_eq!(report.keys.len(), 2 * drifting, "case {n}");
        assert_eq!(
            s.ledger_rows,
            plan.iter().filter(|k| k.ledger.is_some()).count() as u64
        );
        // The listing capped: the same counts, three keys listed, the rest counted.
        options.max_listed = 3;
        let capped = reconcile::reconcile(&session, case, generic, &options, &|_| {})
            .await
            .unwrap();
        assert_eq!(capped.keys.len(), 3);
        assert_eq!(capped.summary.not_listed, 2 * drifting - 3);
        assert_eq!(
            reconcile::Summary {
                not_listed: 0,
                ..capped.summary.clone()
            },
            *s
        );
        let mut comparable = s.clone();
        comparable.ledger_rows = 0;
        summaries.push((comparable, indexed));
    }
    // Every slicing with the index counts the same.
    assert_eq!(summaries[0], summaries[1]);
    store.shutdown().await;
}
