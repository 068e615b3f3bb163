//! The source and target sides of a migration: the paged scan that lists the source's
//! partitions, each partition read whole (shards summed, columns mapped to the target's),
//! and the quiet-period check that refuses a live source.

use std::collections::BTreeSet;
use std::time::SystemTime;

use futures_util::StreamExt;
use scylla::value::{CqlValue, Row};

use crate::bucket::{self, Day};
use crate::config::ConsistencyLevel;
use crate::cql_text::{self, STATEMENTS};
use crate::family::shard_seed;
use crate::layout::{Role, TableLayout};
use crate::ops::read::{PartitionSums, ReadError};
use crate::sink::cql::{schema, session, time};
use crate::vocabulary::Granularity;

use super::plan::PartitionRef;
use super::{MigrateError, Migration};

impl Migration {
    /// Refuses when the source's recent partitions change within the quiet period (see
    /// the module doc). Returns whether the check ran.
    pub async fn check_quiet(&self) -> Result<bool, MigrateError> {
        if self.options.allow_live {
            return Ok(false);
        }
        let today = Day((bucket::unix_secs(SystemTime::now()).max(0) / 86_400) as u32);
        let yesterday = Day(today.0.saturating_sub(1));
        if self.options.day_to.is_some_and(|to| to < yesterday) {
            return Ok(false);
        }
        let first = self.recent_digest(yesterday).await?;
        tokio::time::sleep(self.options.quiet_period).await;
        let second = self.recent_digest(yesterday).await?;
        if first != second {
            return Err(MigrateError::Live(format!(
                "the source changed during the quiet period ({:?}): writers are still writing it. Stop them or switch them to the target, wait for their spill files to drain, and run again; or pass --allow-live to copy what is there now (increments arriving later are not carried over)",
                self.options.quiet_period
            )));
        }
        Ok(true)
    }

    /// A digest of the source's partitions from `since` on (within the range).
    async fn recent_digest(&self, since: Day) -> Result<(u64, u64), MigrateError> {
        let mut digest = (0_u64, 0xcbf2_9ce4_8422_2325_u64);
        for partition in self.source_partitions().await? {
            let recent = match partition.granularity() {
                Granularity::Day => partition.bucket >= since.month(),
                // Only minute (and day) partitions: `Migration::open` refuses the rest.
                Granularity::Minute | Granularity::Hour | Granularity::Total => {
                    partition.day().is_some_and(|d| d >= since)
                }
            };
            if !recent {
                continue;
            }
            let sums = self.source_sums(&partition).await?;
            let text = serde_json::to_string(&(&partition, &sums)).unwrap_or_default();
            digest.0 += 1;
            digest.1 = digest.1.rotate_left(5) ^ shard_seed(&text);
        }
        Ok(digest)
    }

    /// Every partition of the family in the source (both tables), within the range.
    pub(super) async fn source_partitions(&self) -> Result<BTreeSet<PartitionRef>, MigrateError> {
        let family = self.source.family(&self.options.family);
        let session = self.source.reader.session();
        let mut out = BTreeSet::new();
        for kind in Granularity::ALL {
            let Some(layout) = TableLayout::of(family, kind) else {
                continue;
            };
            schema::check(session, &layout).map_err(ReadError::from)?;
            let columns: Vec<&str> = layout
                .partition_key
                .iter()
                .map(|(c, _)| c.as_str())
                .collect();
            let text = cql_text::statement(
                STATEMENTS,
                "scan_table",
                &[
                    ("columns", &columns.join(", ")),
                    ("table", &layout.table.to_string()),
                ],
            );
            let mut statement = session
                .prepare(text.clone())
                .await
                .map_err(|e| MigrateError::store(&text, e))?;
            statement.set_page_size(5000);
            statement.set_is_idempotent(true);
            statement.set_consistency(session::consistency(self.options.consistency));
            let mut rows = session
                .execute_iter(statement, ())
                .await
                .map_err(|e| MigrateError::store(&text, e))?
                .rows_stream::<Row>()
                .map_err(|e| MigrateError::store(&text, e))?;
            let mut last: Option<Vec<Option<CqlValue>>> = None;
            while let Some(row) = rows.next().await {
                let row = row.map_err(|e| MigrateError::store(&text, e))?;
                if last.as_ref() == Some(&row.columns) {
                    continue;
                }
                if let Some(partition) = partition_ref(&layout, &row.columns)
                    && partition.overlaps(self.options.day_from, self.options.day_to)
                {
                    out.insert(partition);
                }
                last = Some(row.columns);
            }
        }
        Ok(out)
    }

    /// A source partition, every shard summed, in the target's column order, its day
    /// rows limited to the range.
    pub(super) async fn source_sums(
        &self,
        partition: &PartitionRef,
    ) -> Result<PartitionSums, MigrateError> {
        let family = self.source.family(&self.options.family);
        let all: Vec<usize> = (0..family.width()).collect();
        let day = partition
            .day()
            .ok_or_else(|| MigrateError::Usage(format!("bad partition {partition:?}")))?;
        let sums = self
            .source
            .reader
            .read_partition_in_epoch(
                family,
                partition.granularity(),
                &partition.key,
                partition.epoch,
                day,
                &all,
                self.options.consistency,
            )
            .await?
            .sums;
        let in_range = |bucket: i64| {
            partition.granularity() == Granularity::Minute
                || (self
                    .options
                    .day_from
                    .is_none_or(|f| bucket >= i64::from(f.0))
                    && self.options.day_to.is_none_or(|t| bucket <= i64::from(t.0)))
        };
        Ok(sums
            .into_iter()
            .filter(|(bucket, _)| in_range(*bucket))
            .map(|(bucket, values)| {
                let mapped = self
                    .columns
                    .iter()
                    .map(|c| c.and_then(|i| values.get(i).copied()).unwrap_or(0))
                    .collect();
                (bucket, mapped)
            })
            .collect())
    }

    /// A target partition, every shard summed, at `consistency`.
    pub(super) async fn target_sums(
        &self,
        partition: &PartitionRef,
        consistency: ConsistencyLevel,
    ) -> Result<PartitionSums, MigrateError> {
        let family = self.target.family(&self.options.family);
        let all: Vec<usize> = (0..family.width()).collect();
        let day = partition
            .day()
            .ok_or_else(|| MigrateError::Usage(format!("bad partition {partition:?}")))?;
        Ok(self
            .target
            .reader
            .read_partition_in_epoch(
                family,
                partition.granularity(),
                &partition.key,
                partition.epoch,
                day,
                &all,
                consistency,
            )
            .await?
            .sums)
    }
}

/// The logical partition of a scanned partition key (the shard dropped; the epoch kept,
/// for a family with an epoch column).
fn partition_ref(layout: &TableLayout, values: &[Option<CqlValue>]) -> Option<PartitionRef> {
    let mut key = vec![
        String::new();
        layout
            .partition_key
            .iter()
            .filter(|(_, r)| matches!(r, Role::Key(_)))
            .count()
    ];
    let (mut bucket, mut epoch) = (None, None);
    for ((_, role), value) in layout.partition_key.iter().zip(values) {
        match (role, value.as_ref()?) {
            (Role::Key(i), v) => *key.get_mut(*i)? = text_of(v)?,
            (Role::Epoch, CqlValue::Int(start)) => epoch = Some(*start),
            (Role::Day(_), v) => {
                bucket = Some(bucket::format_date(time::read_day(v)?.date()));
            }
            (Role::Month(_), v) => bucket = Some(time::read_month(v)?),
            _ => {}
        }
    }
    Some(PartitionRef {
        table: layout.kind.as_str().to_owned(),
        key,
        bucket: bucket?,
        epoch,
    })
}

/// A key column's value as the text a tag would carry.
fn text_of(value: &CqlValue) -> Option<String> {
    Some(match value {
        CqlValue::Text(s) | CqlValue::Ascii(s) => s.clone(),
        CqlValue::BigInt(v) => v.to_string(),
        CqlValue::Int(v) => v.to_string(),
        CqlValue::SmallInt(v) => v.to_string(),
        CqlValue::TinyInt(v) => v.to_string(),
        CqlValue::Uuid(v) => v.to_string(),
        CqlValue::Timeuuid(v) => v.to_string(),
        _ => return None,
    })
}
