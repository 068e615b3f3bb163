//! Partitions that stay healthy at scale: a day of an exact family's delta ledger is
//! `exact.buckets` partitions, and a day of the key index `key_index.buckets`; both
//! counts are chosen once (readers read every bucket), so a family whose traffic grows
//! can outgrow them. Cassandra and ScyllaDB handle partitions up to some 100 MB well;
//! past that, compaction, repair and reads of them slow down and their nodes run hot.
//!
//! At start the sidecar measures yesterday's partitions of each exact family, and of
//! each family in the key index: the rows of bucket 0 (one partition each, counted by the
//! store), times the bytes a row takes, and warns when one passes [`WARN_BYTES`], naming
//! the bucket count that would keep it under. A key lands in bucket `hash(key) % buckets`,
//! so bucket 0 stands for all of them. The bucket counts also cap the parallelism of any
//! reader: `reconcile` reads a day in at most gcd(`exact.buckets`, `key_index.buckets`)
//! independent slices (see [`super::reconcile::slices`]), so the advice names both.

use scylla::client::session::Session;
use scylla::value::CqlDate;

use crate::bucket::Day;
use crate::config::Config;
use crate::cql_text::{self, EXACT, KEY_INDEX};
use crate::family::Families;
use crate::ops::read::ReadError;

/// The partition size past which the check warns.
pub const WARN_BYTES: u64 = 100 << 20;

/// Bytes a delta ledger row takes, about: its clustering key (key text, minute, writer,
/// incarnation, flush, part) and a small frozen map, with the storage engine's
/// per-row overhead (the figure the ledger's batch size is based on).
pub const LEDGER_ROW_BYTES: u64 = 100;

/// Bytes a key index row takes, about: the key text (a JSON array: some 40 bytes for a
/// tag value or two) and the per-row overhead.
pub const KEY_INDEX_ROW_BYTES: u64 = 60;

/// One measured partition of a day.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    /// The family.
    pub family: String,
    /// `delta_ledger` or `key_index`.
    pub table: &'static str,
    /// Rows of bucket 0.
    pub rows: u64,
    /// The table's bucket count per family and day.
    pub buckets: u16,
}

impl Partition {
    /// Its projected size: rows times the bytes a row takes.
    pub fn bytes(&self) -> u64 {
        let per_row = match self.table {
            "key_index" => KEY_INDEX_ROW_BYTES,
            _ => LEDGER_ROW_BYTES,
        };
        self.rows.saturating_mul(per_row)
    }

    /// The setting that holds the bucket count.
    pub fn setting(&self) -> &'static str {
        match self.table {
            "key_index" => "key_index.buckets",
            _ => "exact.buckets",
        }
    }

    /// The bucket count that keeps a partition of the same day's rows under
    /// [`WARN_BYTES`] (a power of two, so that the counts keep dividing each other and
    /// reconcile's slices stay whole); `None` when it is under already.
    pub fn buckets_needed(&self) -> Option<u32> {
        let bytes = self.bytes();
        if bytes <= WARN_BYTES {
            return None;
        }
        let total = u128::from(bytes) * u128::from(self.buckets);
        let needed = total.div_ceil(u128::from(WARN_BYTES));
        Some(
            u32::try_from(needed)
                .unwrap_or(u32::MAX)
                .next_power_of_two(),
        )
    }

    /// The warning for a partition over [`WARN_BYTES`], or `None`.
    pub fn warning(&self) -> Option<String> {
        let needed = self.buckets_needed()?;
        Some(format!(
            "family `{}`: a partition of yesterday's {} holds {} rows, about {} MB (the healthy limit is some {} MB). Raise {} from {} to {needed} or more (it applies to days written after the change: readers read every bucket, so set it between days and keep the two counts powers of two); the bucket counts also cap reconcile's parallel slices (the greatest common divisor of exact.buckets and key_index.buckets)",
            self.family,
            self.table,
            self.rows,
            self.bytes() >> 20,
            WARN_BYTES >> 20,
            self.setting(),
            self.buckets,
        ))
    }
}

/// Measures bucket 0 of `day` for every exact family (the ledger) and, with the key index
/// on, every family (the index): one `COUNT(*)` per partition, counted by the store.
pub async fn measure(
    session: &Session,
    config: &Config,
    families: &Families,
    day: Day,
) -> Result<Vec<Partition>, ReadError> {
    let mut measured = Vec::new();
    let ledger = cql_text::statement(
        EXACT,
        "count_ledger_bucket",
        &[("keyspace", config.exact_keyspace())],
    );
    let index = cql_text::statement(
        KEY_INDEX,
        "count_keys",
        &[(
            "table",
            &crate::ops::keyindex::index_table(config).to_string(),
        )],
    );
    for family in families.iter() {
        if family.is_generic() && !families.generic_enabled() {
            continue;
        }
        let mut tables = Vec::new();
        if family.exact {
            tables.push(("delta_ledger", &ledger, config.exact.buckets));
        }
        if config.key_index.enabled {
            tables.push(("key_index", &index, config.key_index.buckets));
        }
        for (table, statement, buckets) in tables {
            let rows = count(session, statement, &family.name, day).await?;
            measured.push(Partition {
                family: family.name.clone(),
                table,
                rows,
                buckets,
            });
        }
    }
    Ok(measured)
}

async fn count(
    session: &Session,
    statement: &str,
    family: &str,
    day: Day,
) -> Result<u64, ReadError> {
    let error = |e: &dyn std::fmt::Display| ReadError::Store {
        statement: statement.to_owned(),
        error: e.to_string(),
    };
    let result = session
        .query_unpaged(statement, (family, CqlDate(day.cql_date()), 0_i16))
        .await
        .map_err(|e| error(&e))?
        .into_rows_result()
        .map_err(|e| error(&e))?;
    let (rows,) = result.first_row::<(i64,)>().map_err(|e| error(&e))?;
    Ok(u64::try_from(rows).unwrap_or(0))
}

/// Measures yesterday's partitions (see [`measure`]) and logs a warning for each one
/// past [`WARN_BYTES`]; a failed measurement is logged at debug and changes nothing.
pub async fn warn_at_start(session: &Session, config: &Config, families: &Families, today: Day) {
    let yesterday = Day(today.0.saturating_sub(1));
    match measure(session, config, families, yesterday).await {
        Ok(partitions) => {
            for partition in &partitions {
                if let Some(warning) = partition.warning() {
                    tracing::warn!("{warning}.");
                }
            }
        }
        Err(error) => {
            tracing::debug!(%error, "Could not measure yesterday's ledger and key index partitions.");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(rows: u64, buckets: u16) -> Partition {
        Partition {
            family: "views".into(),
            table: "delta_ledger",
            rows,
            buckets,
        }
    }

    #[test]
    fn a_partition_under_the_limit_needs_nothing() {
        assert_eq!(ledger(1_000_000, 64).buckets_needed(), None);
        assert_eq!(ledger(1_000_000, 64).warning(), None);
    }

    /// 3M rows of 100 bytes in each of 64 buckets: 300 MB a partition, 19.2 GB a day;
    /// 192 buckets would hold 100 MB each, so 256 (a power of two).
    #[test]
    fn an_oversized_partition_names_the_bucket_count_that_fits() {
        let p = ledger(3_000_000, 64);
        assert_eq!(p.bytes(), 300_000_000);
        assert_eq!(p.buckets_needed(), Some(256));
        let warning = p.warning().unwrap();
        assert!(
            warning.contains("Raise exact.buckets from 64 to 256"),
            "{warning}"
        );
        assert!(warning.contains("about 286 MB"), "{warning}");
        let index = Partition {
            table: "key_index",
            ..ledger(2_000_000, 16)
        };
        assert_eq!(index.bytes(), 120_000_000);
        assert_eq!(index.buckets_needed(), Some(32));
        assert!(
            index
                .warning()
                .unwrap()
                .contains("key_index.buckets from 16 to 32")
        );
    }
}
