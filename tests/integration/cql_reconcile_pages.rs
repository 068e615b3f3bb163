//! Reconcile's paged ledger scan: a bucket is read page after page and each key's rows
//! are summed as they come, so a key whose rows lie on several pages (and pages that end
//! inside a key or between two) must sum exactly as on one page, with the same row count
//! and the same rises; on any store (the real node too).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use countersink::family::Families;
use countersink::ops::keyindex::key_values;
use countersink::ops::reconcile::gather::{BucketReader, LedgerSums};

use crate::common::{T0, Writer, start_store};
use crate::cql_reconcile::{day, exact_config, settle};

/// 2026-11-30 22:48Z, the first of five minutes of traffic, on the day `day()` names.
const AT: i64 = T0 - 3600 - 600;

/// Seven keys counted in five minutes, one flush per minute (five ledger rows per key,
/// one key with a decrement), all in one ledger bucket: read with one row a page, three,
/// four and the default, every key's sums, rises and rows are what was fed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_ledger_rows_over_several_pages_sum_as_on_one_page() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = exact_config(dir.path());
    // One bucket: every key's rows in one partition, one key's after another's.
    config.exact.buckets = 1;
    let store = start_store(&mut config).await;
    let mut writer = Writer::start(&config).await;
    // key → (sum, sum of the increments)
    let mut fed: BTreeMap<String, (i128, i128)> = BTreeMap::new();
    for minute in 0..5_i64 {
        for k in 0..7_i64 {
            let key = format!("p{k}");
            let delta = if k == 6 && minute == 2 {
                -3
            } else {
                1 + k + 10 * minute
            };
            writer.incr(
                "page.views",
                &[("page_id", key.as_str())],
                delta,
                AT + minute * 60,
            );
            let entry = fed.entry(key).or_default();
            entry.0 += i128::from(delta);
            entry.1 += i128::from(delta.max(0));
        }
        writer.flusher.flush_now().await;
        settle(&mut writer).await;
    }
    let families = Families::from_config(&config).unwrap();
    let views = families.by_name("views").unwrap();
    let column = views.columns.iter().position(|c| c == "views").unwrap();
    let rows = AtomicU64::new(0);
    let whole = BucketReader::new(&writer.session, &config, views, day())
        .await
        .unwrap()
        .ledger_bucket(0, &rows)
        .await
        .unwrap();
    assert_eq!(
        rows.load(Ordering::Relaxed),
        35,
        "5 rows for each of 7 keys"
    );
    let summed: BTreeMap<String, (i128, i128, u64)> = whole
        .iter()
        .map(|(key, sums)| {
            let values = key_values(key).unwrap();
            (
                values[0].clone(),
                (sums.sums[column], sums.rises[column], sums.rows),
            )
        })
        .collect();
    let expected: BTreeMap<String, (i128, i128, u64)> = fed
        .iter()
        .map(|(key, (sum, rises))| (key.clone(), (*sum, *rises, 5)))
        .collect();
    assert_eq!(summed, expected);
    for page_rows in [1, 3, 4] {
        let rows = AtomicU64::new(0);
        let paged: LedgerSums = BucketReader::new(&writer.session, &config, views, day())
            .await
            .unwrap()
            .with_page_rows(page_rows)
            .ledger_bucket(0, &rows)
            .await
            .unwrap();
        assert_eq!(paged, whole, "{page_rows} rows a page");
        assert_eq!(rows.load(Ordering::Relaxed), 35, "{page_rows} rows a page");
    }
    store.shutdown().await;
}
