//! Retention by whole partitions (seed 000: "retention becomes a matter of deleting whole
//! old partitions ... which avoids leaving counter tombstones scattered across live
//! partitions"; seed 003: a counter deleted and written again is undefined).
//!
//! Time is in every partition key: a minute partition is (key, day), a day partition
//! (key, month). `prune` deletes the minute partitions of days before the cutoff and the
//! day partitions of months that end before it, each with one `DELETE` that binds every
//! partition key column and nothing else — never a row, never a cell. It refuses a cutoff
//! younger than a minimum age, so no writer can still be writing those partitions: rows
//! reach a table at most `limits.timestamp_max_past` (1 h) plus `flush.requeue_max_age`
//! (10 min) after their minute, unless a spill file is replayed much later (see
//! docs/src/operations/tables.md, "Retention"). The key index rows of the pruned days go too.
//!
//! Why not tables per period (`views_by_minute_2026`, dropped whole)? It would make every
//! writer route rows by period and prepare statements for a new table at each rollover
//! (with schema agreement on the way), and every reader know which table holds a day.
//! Partition deletes reach the same end — nothing deleted inside a live partition — with
//! the schema and the write path unchanged; their tombstones are purged by compaction
//! after `gc_grace_seconds` like any other.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use scylla::client::session::Session;
use scylla::value::{CqlDate, CqlValue, Row};

use crate::bucket::Day;
use crate::config::Config;
use crate::cql_text::{self, KEY_INDEX, STATEMENTS};
use crate::family::FamilyDef;
use crate::layout::{Role, TableLayout};
use crate::sink::cql::{schema, session, time};
use crate::vocabulary::Granularity;

use super::keyindex::index_table;
use super::read::ReadError;

/// The youngest cutoff `--min-age` may allow: the timestamp window and the re-queue age
/// (70 minutes by default), with a day to spare for clocks and late replays.
pub const MIN_AGE_FLOOR: Duration = Duration::from_secs(2 * 86_400);
/// The default minimum age of a cutoff.
pub const DEFAULT_MIN_AGE: Duration = Duration::from_secs(7 * 86_400);
/// Deletes in flight at once.
const DELETES_IN_FLIGHT: usize = 16;
/// Rows per page of the scan.
const PAGE_ROWS: i32 = 5000;
/// Attempts of one (idempotent) delete.
const DELETE_ATTEMPTS: u32 = 4;

/// Whether `before` is old enough: at least `min_age` (itself at least
/// [`MIN_AGE_FLOOR`]) before `today`, counted in whole days.
pub fn check_cutoff(before: Day, today: Day, min_age: Duration) -> Result<(), String> {
    if min_age < MIN_AGE_FLOOR {
        return Err(format!(
            "--min-age must be at least {} days: rows may reach a table an hour and more after their minute",
            MIN_AGE_FLOOR.as_secs() / 86_400
        ));
    }
    let days = min_age.as_secs().div_ceil(86_400);
    if u64::from(before.0) + days > u64::from(today.0) {
        return Err(format!(
            "the cutoff must be at least {days} days before today (--min-age); writers may still write younger partitions"
        ));
    }
    Ok(())
}

/// Whether a partition of `layout` lies wholly before `before`: a minute or hour
/// partition's day, or every day of a day partition's month. `None` when the key has no bucket
/// value this function understands (the partition is then left alone).
pub fn wholly_before(
    layout: &TableLayout,
    partition: &[Option<CqlValue>],
    before: Day,
) -> Option<bool> {
    for ((_, role), value) in layout.partition_key.iter().zip(partition) {
        match (role, value) {
            (Role::Day(_), Some(value)) => {
                return time::read_day(value).map(|day| day < before);
            }
            // 'YYYY-MM' sorts like the months it names.
            (Role::Month(_), Some(value)) => {
                return time::read_month(value).map(|month| month < before.month());
            }
            _ => {}
        }
    }
    None
}

/// What a prune found (and deleted) in one table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TablePrune {
    /// `keyspace.table`.
    pub table: String,
    /// Rows the scan read.
    pub rows_scanned: u64,
    /// Distinct partitions seen.
    pub partitions: u64,
    /// Partitions wholly before the cutoff.
    pub old: u64,
    /// Of those, deleted (0 in a dry run).
    pub deleted: u64,
    /// The oldest and youngest bucket (day or month) among the old partitions.
    pub range: Option<(String, String)>,
}

/// Why a prune failed.
#[derive(Debug, thiserror::Error)]
pub enum PruneError {
    /// Reading the table failed.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// A delete failed after its retries (the partitions before it are deleted; run the
    /// same command again to finish: deletes are idempotent).
    #[error("`{statement}`: {error}")]
    Delete {
        /// The statement.
        statement: String,
        /// What the driver said.
        error: String,
    },
}

/// Scans `family`'s `kind` table for partitions wholly before `before`, and deletes them
/// unless `dry_run`. `progress` is called with the rows scanned so far.
pub async fn prune_table(
    session: &Arc<Session>,
    config: &Config,
    family: &FamilyDef,
    kind: Granularity,
    before: Day,
    dry_run: bool,
    progress: &mut (dyn FnMut(u64) + Send),
) -> Result<(TablePrune, BTreeSet<Day>), PruneError> {
    // No such table (an all-time total is refused by the caller: it has no time to
    // prune by): nothing to scan.
    let Some(layout) = TableLayout::of(family, kind) else {
        return Ok((TablePrune::default(), BTreeSet::new()));
    };
    schema::check(session, &layout).map_err(ReadError::from)?;
    let table = layout.table.to_string();
    let columns: Vec<&str> = layout
        .partition_key
        .iter()
        .map(|(c, _)| c.as_str())
        .collect();
    let scan = cql_text::statement(
        STATEMENTS,
        "scan_table",
        &[("columns", &columns.join(", ")), ("table", &table)],
    );
    let store_error = |e: &dyn std::fmt::Display| ReadError::Store {
        statement: scan.clone(),
        error: e.to_string(),
    };
    let mut statement = session
        .prepare(scan.clone())
        .await
        .map_err(|e| store_error(&e))?;
    statement.set_page_size(PAGE_ROWS);
    statement.set_is_idempotent(true);
    statement.set_consistency(session::consistency(config.store.consistency));
    let mut rows = session
        .execute_iter(statement, ())
        .await
        .map_err(|e| store_error(&e))?
        .rows_stream::<Row>()
        .map_err(|e| store_error(&e))?;
    let mut report = TablePrune {
        table: table.clone(),
        ..TablePrune::default()
    };
    let mut old: Vec<Vec<Option<CqlValue>>> = Vec::new();
    let mut days = BTreeSet::new();
    let mut last: Option<Vec<Option<CqlValue>>> = None;
    while let Some(row) = rows.next().await {
        let row = row.map_err(|e| store_error(&e))?;
        report.rows_scanned += 1;
        if report.rows_scanned.is_multiple_of(10_000) {
            progress(report.rows_scanned);
        }
        // A scan returns the rows of a partition together: a new key is a new partition.
        if last.as_ref() == Some(&row.columns) {
            continue;
        }
        report.partitions += 1;
        if wholly_before(&layout, &row.columns, before) == Some(true) {
            let bucket = bucket_text(&layout, &row.columns);
            report.range = Some(match report.range.take() {
                None => (bucket.clone(), bucket),
                Some((low, high)) => (low.min(bucket.clone()), high.max(bucket)),
            });
            if kind == Granularity::Minute
                && let Some(day) = day_of(&layout, &row.columns)
            {
                days.insert(day);
            }
            old.push(row.columns.clone());
        }
        last = Some(row.columns);
    }
    progress(report.rows_scanned);
    report.old = old.len() as u64;
    if dry_run {
        return Ok((report, days));
    }
    let conditions: Vec<String> = columns.iter().map(|c| format!("{c} = ?")).collect();
    let text = cql_text::statement(
        STATEMENTS,
        "delete_partition",
        &[("table", &table), ("conditions", &conditions.join(" AND "))],
    );
    let delete = prepare_delete(session, config, &text).await?;
    let results: Vec<Result<(), PruneError>> = futures_util::stream::iter(old)
        .map(|key: Vec<Option<CqlValue>>| {
            let delete = &delete;
            async move { execute_with_retries(session, delete, key).await }
        })
        .buffer_unordered(DELETES_IN_FLIGHT)
        .collect()
        .await;
    for result in results {
        result?;
        report.deleted += 1;
    }
    Ok((report, days))
}

/// Deletes the key index rows of `family` for `days` (every bucket of each day).
pub async fn prune_key_index(
    session: &Arc<Session>,
    config: &Config,
    family: &str,
    days: &BTreeSet<Day>,
) -> Result<u64, PruneError> {
    let text = cql_text::statement(
        KEY_INDEX,
        "delete_keys",
        &[("table", &index_table(config).to_string())],
    );
    let delete = prepare_delete(session, config, &text).await?;
    let keys: Vec<Vec<Option<CqlValue>>> = days
        .iter()
        .flat_map(|day| {
            (0..config.key_index.buckets).map(move |bucket| {
                vec![
                    Some(CqlValue::Text(family.to_owned())),
                    Some(CqlValue::Date(CqlDate(day.cql_date()))),
                    Some(CqlValue::SmallInt(bucket as i16)),
                ]
            })
        })
        .collect();
    let total = keys.len() as u64;
    let results: Vec<Result<(), PruneError>> = futures_util::stream::iter(keys)
        .map(|key: Vec<Option<CqlValue>>| {
            let delete = &delete;
            async move { execute_with_retries(session, delete, key).await }
        })
        .buffer_unordered(DELETES_IN_FLIGHT)
        .collect()
        .await;
    for result in results {
        result?;
    }
    Ok(total)
}

async fn prepare_delete(
    session: &Session,
    config: &Config,
    text: &str,
) -> Result<scylla::statement::prepared::PreparedStatement, PruneError> {
    let mut delete = session
        .prepare(text.to_owned())
        .await
        .map_err(|e| PruneError::Delete {
            statement: text.to_owned(),
            error: e.to_string(),
        })?;
    // Deleting a partition twice deletes it once.
    delete.set_is_idempotent(true);
    delete.set_consistency(session::consistency(config.store.consistency));
    Ok(delete)
}

async fn execute_with_retries(
    session: &Session,
    delete: &scylla::statement::prepared::PreparedStatement,
    key: Vec<Option<CqlValue>>,
) -> Result<(), PruneError> {
    let mut wait = Duration::from_millis(100);
    for attempt in 1..=DELETE_ATTEMPTS {
        match session.execute_unpaged(delete, &key).await {
            Ok(_) => return Ok(()),
            Err(error) if attempt == DELETE_ATTEMPTS => {
                return Err(PruneError::Delete {
                    statement: delete.get_statement().to_owned(),
                    error: error.to_string(),
                });
            }
            Err(_) => {
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
        }
    }
    Ok(())
}

/// The day of a minute partition.
fn day_of(layout: &TableLayout, partition: &[Option<CqlValue>]) -> Option<Day> {
    layout
        .partition_key
        .iter()
        .zip(partition)
        .find_map(|((_, role), value)| match (role, value) {
            (Role::Day(_), Some(value)) => time::read_day(value),
            _ => None,
        })
}

/// The bucket of a partition as text: `YYYY-MM-DD` or `YYYY-MM`.
fn bucket_text(layout: &TableLayout, partition: &[Option<CqlValue>]) -> String {
    if let Some(day) = day_of(layout, partition) {
        return crate::bucket::format_date(day.date());
    }
    layout
        .partition_key
        .iter()
        .zip(partition)
        .find_map(|((_, role), value)| match (role, value) {
            (Role::Month(_), Some(value)) => time::read_month(value),
            _ => None,
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FamilyConfig;
    use crate::family::Families;

    fn day(text: &str) -> Day {
        Day::from_date(crate::bucket::parse_date(text).unwrap()).unwrap()
    }

    #[test]
    fn cutoffs_younger_than_the_minimum_age_are_refused() {
        let today = day("2026-12-01");
        assert!(check_cutoff(day("2026-11-24"), today, DEFAULT_MIN_AGE).is_ok());
        assert!(check_cutoff(day("2026-11-25"), today, DEFAULT_MIN_AGE).is_err());
        assert!(check_cutoff(day("2026-11-29"), today, MIN_AGE_FLOOR).is_ok());
        assert!(check_cutoff(day("2026-11-30"), today, MIN_AGE_FLOOR).is_err());
        assert!(
            check_cutoff(day("2026-01-01"), today, Duration::from_secs(86_400)).is_err(),
            "below the floor"
        );
    }

    #[test]
    fn minute_partitions_go_by_day_and_day_partitions_by_whole_month() {
        let mut config = Config::default();
        config.families.push(FamilyConfig::seed_views());
        let families = Families::from_config(&config).unwrap();
        let views = families.by_name("views").unwrap();
        let minute = TableLayout::of(views, Granularity::Minute).unwrap();
        let dayt = TableLayout::of(views, Granularity::Day).unwrap();
        let cutoff = day("2026-10-15");
        let key = |bucket: CqlValue| vec![Some(CqlValue::Text("home".into())), Some(bucket)];
        let date = |text: &str| CqlValue::Date(CqlDate(day(text).cql_date()));
        assert_eq!(
            wholly_before(&minute, &key(date("2026-10-14")), cutoff),
            Some(true)
        );
        assert_eq!(
            wholly_before(&minute, &key(date("2026-10-15")), cutoff),
            Some(false)
        );
        let month = |m: &str| CqlValue::Text(m.into());
        assert_eq!(
            wholly_before(&dayt, &key(month("2026-09")), cutoff),
            Some(true)
        );
        assert_eq!(
            wholly_before(&dayt, &key(month("2026-10")), cutoff),
            Some(false),
            "October holds days after the cutoff"
        );
        assert_eq!(
            wholly_before(&dayt, &key(month("2026-10")), day("2026-11-01")),
            Some(true)
        );
        assert_eq!(wholly_before(&minute, &[None, None], cutoff), None);
    }

    /// A table whose day is a `timestamp` and whose month is a `date` is pruned by the
    /// same cutoffs.
    #[test]
    fn other_time_types_are_read_for_the_cutoff() {
        use crate::config::tables::TimeColumnConfig;
        use scylla::value::CqlTimestamp;
        let mut config = Config::default();
        let mut views = FamilyConfig::seed_views();
        views.minute_time.day = TimeColumnConfig::new("ts_day", "timestamp");
        views.day_time.month = TimeColumnConfig::new("month", "date");
        config.families.push(views);
        let families = Families::from_config(&config).unwrap();
        let views = families.by_name("views").unwrap();
        let minute = TableLayout::of(views, Granularity::Minute).unwrap();
        let dayt = TableLayout::of(views, Granularity::Day).unwrap();
        let cutoff = day("2026-10-15");
        let key = |bucket: CqlValue| vec![Some(CqlValue::Text("home".into())), Some(bucket)];
        let midnight =
            |text: &str| CqlValue::Timestamp(CqlTimestamp(i64::from(day(text).0) * 86_400_000));
        assert_eq!(
            wholly_before(&minute, &key(midnight("2026-10-14")), cutoff),
            Some(true)
        );
        assert_eq!(
            wholly_before(&minute, &key(midnight("2026-10-15")), cutoff),
            Some(false)
        );
        let first = |text: &str| CqlValue::Date(CqlDate(day(text).cql_date()));
        assert_eq!(
            wholly_before(&dayt, &key(first("2026-09-01")), cutoff),
            Some(true)
        );
        assert_eq!(
            wholly_before(&dayt, &key(first("2026-10-01")), cutoff),
            Some(false)
        );
    }
}
