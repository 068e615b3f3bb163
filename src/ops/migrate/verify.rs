//! `--verify-only`: source, target and the job table compared partition by partition.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use futures_util::StreamExt;

use crate::ops::read::PartitionSums;

use super::job::JobTable;
use super::plan::{self, PartitionRef, State};
use super::{Difference, MigrateError, Migration, VerifyReport};

impl Migration {
    /// Compares source, target and the job table, partition by partition.
    pub async fn verify(
        &self,
        progress: &(dyn Fn(u64) + Sync),
    ) -> Result<VerifyReport, MigrateError> {
        let recorded = if self.job_table_exists() {
            JobTable::open(
                self.target.reader.session().clone(),
                &self.target.config,
                self.job_keyspace(),
                &self.job,
            )
            .await?
            .load()
            .await?
        } else {
            HashMap::new()
        };
        let mut states: BTreeMap<PartitionRef, Vec<State>> = BTreeMap::new();
        for (part, row) in &recorded {
            if let Some(partition) = plan::partition_of(part) {
                states.entry(partition).or_default().push(row.state);
            }
        }
        let partitions = self.source_partitions().await?;
        let done = std::sync::atomic::AtomicU64::new(0);
        let compared = futures_util::stream::iter(partitions)
            .map(|partition: PartitionRef| {
                let (states, done) = (&states, &done);
                async move {
                    let source = self.source_sums(&partition).await?;
                    let target = self
                        .target_sums(&partition, self.options.consistency)
                        .await?;
                    progress(done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1);
                    let differing = differing_rows(&source, &target);
                    let unknown = states.get(&partition).is_some_and(|s| {
                        s.iter()
                            .any(|s| matches!(s, State::Unknown | State::Sending))
                    });
                    let status = if unknown {
                        Some("unknown")
                    } else if differing == 0 {
                        None
                    } else if target.values().all(|v| v.iter().all(|x| *x == 0)) {
                        Some("missing")
                    } else {
                        Some("different")
                    };
                    Ok::<_, MigrateError>(status.map(|status| Difference {
                        partition,
                        status,
                        target_equals_source: differing == 0,
                        rows_differing: differing,
                    }))
                }
            })
            .buffer_unordered(self.options.concurrency.max(1))
            .collect::<Vec<_>>()
            .await;
        let mut report = VerifyReport {
            job: self.job.clone(),
            ..VerifyReport::default()
        };
        for result in compared {
            report.partitions += 1;
            match result? {
                None => report.equal += 1,
                Some(difference) => report.differences.push(difference),
            }
        }
        report
            .differences
            .sort_by(|a, b| a.partition.cmp(&b.partition));
        Ok(report)
    }
}

/// Rows whose values differ (a missing row reads as zeros).
fn differing_rows(source: &PartitionSums, target: &PartitionSums) -> usize {
    let buckets: BTreeSet<&i64> = source.keys().chain(target.keys()).collect();
    buckets
        .into_iter()
        .filter(|bucket| {
            let zero = |v: Option<&Vec<i64>>| v.is_none_or(|v| v.iter().all(|x| *x == 0));
            match (source.get(bucket), target.get(bucket)) {
                (Some(a), Some(b)) => a != b,
                (a, b) => !(zero(a) && zero(b)),
            }
        })
        .count()
}
