//! Migration by read-and-increment (seed 000: "read each final value from the old one
//! and apply it as a single increment to a fresh key in the new one, then verify").
//!
//! Counter SSTables cannot be copied and a counter cannot be set: the only way into a new
//! table or cluster is one increment per target row. That increment is not idempotent, so
//! the migration is a job with a table of its own (`cql/migrate.cql`, `migrate_jobs` in
//! the keyspace of the target's minute table):
//!
//! 1. A paged scan lists the source's partitions (minute and day tables of the family);
//!    each is read whole, every shard summed, and its rows mapped to the target's columns
//!    by name.
//! 2. Its rows are cut into chunks (`flush.max_batch_rows` rows, one COUNTER BATCH of one
//!    target partition each). Before a chunk is sent, the target's current values of its
//!    rows (the before-image) and the chunk's intent are written to the job table; after,
//!    its outcome, classified exactly as the flush classifies counter writes
//!    ([`crate::sink::cql::classify`]: the write goes through the same [`CqlSink`]).
//! 3. A rerun of the same job copies by content, not by position: per partition, it
//!    sums the rows of the recorded chunks that applied or may have applied, and sends
//!    the source minus that sum, in new chunks numbered after the recorded ones. So a
//!    rerun with another `flush.max_batch_rows`, or after the source gained or lost rows,
//!    sends each missing unit once (a row that lost value gets a negative delta), and
//!    the rows of chunks that definitely did not apply are sent again. A chunk that may
//!    have applied (an unknown outcome, or an intent without outcome because the run was
//!    killed) is never sent blindly, and its partition gets nothing more until it is
//!    resolved: once
//!    `--settle` has passed since its intent (longer than any counter write timeout, so
//!    no copy of the write is still on its way), the target is read at ALL and compared
//!    with the before-image. Before-image plus delta: applied. Exactly the before-image
//!    on every replica: not applied, its rows sent again. Anything else (someone else
//!    wrote those rows): stays unknown, is reported, and its rows are never sent again.
//!
//! Live sources: a migration copies what it reads, so writers must be stopped or
//! switched first. Rows reach a table at most `limits.timestamp_max_past` plus
//! `flush.requeue_max_age` after their minute, so when the range reaches into yesterday
//! or later, the partitions of those days are read twice, `--quiet-period` apart, and
//! any difference refuses the migration (unless `--allow-live`).
//!
//! `--verify-only` reads source and target and the job table and reports, per partition:
//! equal, unknown (a chunk's outcome is unknown; whether the target equals the source is
//! shown), different, or missing. The exact table of the exact-totals feature, when it
//! exists, is the third column to compare; it does not exist yet.
//!
//! [`plan`] is the pure part (chunks, states, verdicts); [`job`] the job table; `scan` the
//! reads of both sides and the quiet check; `verify` the comparison.

pub mod job;
pub mod plan;
mod scan;
mod verify;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::StreamExt;
use serde::Serialize;

use crate::aggregate::Columns;
use crate::bucket::{self, Day};
use crate::config::{Config, ConsistencyLevel};
use crate::family::{Families, FamilyDef, shard_seed};
use crate::ops::read::{PartitionSums, ReadError, Reader};
use crate::series;
use crate::sink::cql::{CqlSink, CqlSinkError, session};
use crate::sink::{Outcome, PartitionWrite, RowDelta, Sink};
use crate::vocabulary::Granularity;

use self::job::{JobRow, JobTable};
use self::plan::{Chunk, PartitionRef, State, Step, Verdict};

/// Why a migration stopped.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// The families do not fit together, or an option is wrong.
    #[error("{0}")]
    Usage(String),
    /// The source changed during the quiet period.
    #[error("{0}")]
    Live(String),
    /// A read or a statement failed.
    #[error("`{statement}`: {error}")]
    Store {
        /// The statement.
        statement: String,
        /// What the driver said.
        error: String,
    },
    /// The job table could not record a chunk (the run stops; a rerun resumes).
    #[error("cannot record {part} in the job table: {error}")]
    Job {
        /// The chunk.
        part: String,
        /// What the driver said.
        error: String,
    },
    /// The target's tables do not match its configuration, or it cannot be reached.
    #[error(transparent)]
    Target(Box<CqlSinkError>),
    /// Reading a partition failed.
    #[error(transparent)]
    Read(#[from] ReadError),
}

impl From<CqlSinkError> for MigrateError {
    fn from(error: CqlSinkError) -> MigrateError {
        MigrateError::Target(Box::new(error))
    }
}

impl MigrateError {
    pub(crate) fn store(statement: &str, error: impl std::fmt::Display) -> MigrateError {
        MigrateError::Store {
            statement: statement.to_owned(),
            error: error.to_string(),
        }
    }
}

/// What to migrate, and how.
#[derive(Clone, Debug)]
pub struct Options {
    /// The family (by name, in both configurations).
    pub family: String,
    /// First day (inclusive) of the minute partitions and day rows migrated.
    pub day_from: Option<Day>,
    /// Last day (inclusive).
    pub day_to: Option<Day>,
    /// The job id; default: derived from the tables, family and range.
    pub job: Option<String>,
    /// Migrate even if the source changes.
    pub allow_live: bool,
    /// How long the recent partitions must stay unchanged.
    pub quiet_period: Duration,
    /// How long after an intent a chunk with an unknown outcome may be resolved.
    pub settle: Duration,
    /// Partitions in flight at once.
    pub concurrency: usize,
    /// Consistency of the source and target reads (resolution reads are at ALL).
    pub consistency: ConsistencyLevel,
}

/// Counts of a run, for the progress line and the report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Progress {
    /// Partitions done (all their chunks handled).
    pub partitions: u64,
    /// Chunks applied by this run.
    pub applied: u64,
    /// Chunks skipped: applied by an earlier run.
    pub skipped: u64,
    /// Chunks of earlier runs with an unknown outcome, proven applied by reading the target.
    pub resolved_applied: u64,
    /// Chunks of earlier runs with an unknown outcome, proven not applied and sent again.
    pub resolved_resent: u64,
    /// Chunks that definitely did not apply (sent again by the next run).
    pub failed: u64,
}

/// What a run did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The job id.
    pub job: String,
    /// The counts.
    #[serde(flatten)]
    pub counts: Progress,
    /// Chunks whose outcome is unknown: never sent again; the part id and why.
    pub unknown: Vec<(String, String)>,
    /// Chunks that definitely did not apply: the part id and the error.
    pub not_applied: Vec<(String, String)>,
}

/// How one partition compares.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Difference {
    /// The partition.
    pub partition: PartitionRef,
    /// `unknown`, `different` or `missing`.
    pub status: &'static str,
    /// Whether the target holds exactly the source's values.
    pub target_equals_source: bool,
    /// Rows whose values differ.
    pub rows_differing: usize,
}

/// What `--verify-only` found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// The job id whose table was read.
    pub job: String,
    /// Partitions compared.
    pub partitions: u64,
    /// Of those, equal in source and target, with no unknown chunk.
    pub equal: u64,
    /// The others.
    pub differences: Vec<Difference>,
}

/// One side of the migration.
struct Side {
    config: Config,
    families: Families,
    reader: Reader,
}

impl Side {
    async fn open(config: Config, family: &str) -> Result<Side, MigrateError> {
        let families =
            Families::from_config(&config).map_err(|e| MigrateError::Usage(e.to_string()))?;
        if families.by_name(family).is_none() {
            return Err(MigrateError::Usage(format!(
                "no family `{family}` in the configuration of {}",
                config.store.contact_points.join(",")
            )));
        }
        let session = session::connect(&config.store)
            .await
            .map_err(|e| MigrateError::from(CqlSinkError::Session(e)))?;
        Ok(Side {
            config,
            families,
            reader: Reader::new(Arc::new(session)),
        })
    }

    fn family(&self, name: &str) -> &FamilyDef {
        // Checked in `open`.
        self.families
            .by_name(name)
            .unwrap_or_else(|| self.families.get(crate::family::GENERIC))
    }
}

/// A chunk of an earlier run, as the job table holds it.
struct Recorded {
    /// Its id.
    part: String,
    /// Its position among its partition's chunks (all runs together).
    index: u32,
    /// Its row.
    row: JobRow,
}

/// The job table's chunks by partition (ids that do not parse are not chunks of this
/// layout and are left alone).
fn chunks_by_partition(
    recorded: std::collections::HashMap<String, JobRow>,
) -> std::collections::HashMap<PartitionRef, Vec<Recorded>> {
    let mut by_partition: std::collections::HashMap<_, Vec<_>> = Default::default();
    for (part, row) in recorded {
        let Some((partition, index)) = plan::parse_part(&part) else {
            continue;
        };
        by_partition
            .entry(partition)
            .or_default()
            .push(Recorded { part, index, row });
    }
    by_partition
}

/// A migration between two configurations.
pub struct Migration {
    options: Options,
    job: String,
    source: Side,
    target: Side,
    sink: CqlSink,
    /// For each target column, the source column of the same name.
    columns: Vec<Option<usize>>,
}

impl Migration {
    /// Connects to both stores, checks that the family's columns fit, and connects the
    /// target's counter writer (which checks its tables and prepares its statements).
    pub async fn open(
        from: Config,
        to: Config,
        options: Options,
    ) -> Result<Migration, MigrateError> {
        let source = Side::open(from, &options.family).await?;
        let target = Side::open(to, &options.family).await?;
        let (src, dst) = (
            source.family(&options.family),
            target.family(&options.family),
        );
        if let Some(other) = [src, dst].into_iter().find(|f| !f.is_minute_and_day()) {
            return Err(MigrateError::Usage(format!(
                "family `{}` has tables other than a minute and a day table: migrate copies minute and day tables only",
                other.name
            )));
        }
        if src.key_columns.len() != dst.key_columns.len() {
            return Err(MigrateError::Usage(format!(
                "family `{}` is keyed by ({}) in the source and ({}) in the target",
                src.name,
                src.key_columns.join(", "),
                dst.key_columns.join(", ")
            )));
        }
        if src.epoch_column.is_some() != dst.epoch_column.is_some() {
            return Err(MigrateError::Usage(format!(
                "family `{}` has an epoch column in the {} only: each epoch's partitions are copied into the same epoch of the target, so both need one (or neither)",
                src.name,
                if src.epoch_column.is_some() {
                    "source"
                } else {
                    "target"
                }
            )));
        }
        if let Some(missing) = src.columns.iter().find(|c| !dst.columns.contains(c)) {
            return Err(MigrateError::Usage(format!(
                "the target family `{}` has no column `{missing}`",
                dst.name
            )));
        }
        let columns = dst
            .columns
            .iter()
            .map(|c| src.columns.iter().position(|s| s == c))
            .collect();
        let sink = CqlSink::with_session(
            target.reader.session().clone(),
            &target.config.store,
            &target.families,
        )
        .await?;
        let job = options.job.clone().unwrap_or_else(|| {
            let identity = format!(
                "{}|{}|{}|{}|{}|{:?}|{:?}",
                src.name,
                src.table_text(Granularity::Minute),
                src.table_text(Granularity::Day),
                dst.table_text(Granularity::Minute),
                dst.table_text(Granularity::Day),
                options.day_from,
                options.day_to
            );
            format!("{}-{:016x}", src.name, shard_seed(&identity))
        });
        Ok(Migration {
            options,
            job,
            source,
            target,
            sink,
            columns,
        })
    }

    /// The job id.
    pub fn job(&self) -> &str {
        &self.job
    }

    /// Runs (or resumes) the job; `progress` is called after every partition.
    ///
    /// A partition is copied by content (see [`plan::remaining_chunks`]): what it sends is
    /// the source minus what its recorded chunks applied or may have applied. A partition
    /// with a chunk of unknown outcome waits until that chunk is resolved (`resolve`, below),
    /// so that what is missing is known before anything more is sent.
    pub async fn run(&self, progress: &(dyn Fn(&Progress) + Sync)) -> Result<Report, MigrateError> {
        let jobs = JobTable::open(
            self.target.reader.session().clone(),
            &self.target.config,
            self.job_keyspace(),
            &self.job,
        )
        .await?;
        let mut recorded = chunks_by_partition(jobs.load().await?);
        self.copy_epochs().await?;
        let partitions = self.source_partitions().await?;
        let counts = parking_lot::Mutex::new(Progress::default());
        let report = parking_lot::Mutex::new(Report {
            job: self.job.clone(),
            ..Report::default()
        });
        let mut settled = Vec::new();
        let mut to_resolve = Vec::new();
        for partition in partitions {
            let chunks = recorded.remove(&partition).unwrap_or_default();
            counts.lock().skipped += chunks
                .iter()
                .filter(|c| c.row.state == State::Applied)
                .count() as u64;
            if chunks
                .iter()
                .any(|c| plan::step(Some(c.row.state)) == Step::Resolve)
            {
                to_resolve.push((partition, chunks));
            } else {
                settled.push((partition, chunks));
            }
        }
        let work = futures_util::stream::iter(settled)
            .map(|(partition, chunks)| {
                let (jobs, counts, report) = (&jobs, &counts, &report);
                async move {
                    self.copy_rest(jobs, &partition, &chunks, None, counts, report)
                        .await?;
                    let snapshot = {
                        let mut c = counts.lock();
                        c.partitions += 1;
                        c.clone()
                    };
                    progress(&snapshot);
                    Ok::<_, MigrateError>(())
                }
            })
            .buffer_unordered(self.options.concurrency.max(1));
        for result in work.collect::<Vec<_>>().await {
            result?;
        }
        self.resolve(&jobs, to_resolve, &counts, &report).await?;
        let mut report = report.into_inner();
        report.counts = counts.into_inner();
        report.unknown.sort();
        report.not_applied.sort();
        Ok(report)
    }

    /// Sends what `partition` still lacks: the source minus what its recorded `chunks`
    /// account for, in new chunks numbered after them. `target`: the target's values if
    /// already read (for the before-images).
    async fn copy_rest(
        &self,
        jobs: &JobTable,
        partition: &PartitionRef,
        chunks: &[Recorded],
        target: Option<PartitionSums>,
        counts: &parking_lot::Mutex<Progress>,
        report: &parking_lot::Mutex<Report>,
    ) -> Result<(), MigrateError> {
        let sums = self.source_sums(partition).await?;
        let accounted = plan::accounted(chunks.iter().map(|c| (c.row.state, &c.row.rows)));
        let first_index = chunks.iter().map(|c| c.index + 1).max().unwrap_or(0);
        let rest =
            plan::remaining_chunks(partition, &sums, &accounted, self.batch_rows(), first_index);
        if rest.is_empty() {
            return Ok(());
        }
        let target = match target {
            Some(target) => target,
            None => {
                self.target_sums(partition, self.options.consistency)
                    .await?
            }
        };
        for chunk in rest {
            let before = plan::before_image(&chunk.rows, &target);
            self.send(jobs, &chunk, before, counts, report).await?;
        }
        Ok(())
    }

    /// Partitions with chunks of earlier runs whose outcome is unknown: wait out the
    /// settle time, read the target at ALL, decide each such chunk from its recorded rows
    /// and before-image, then send what the partition still lacks. A partition whose
    /// target cannot be read is left alone (its chunks stay unknown, reported).
    async fn resolve(
        &self,
        jobs: &JobTable,
        partitions: Vec<(PartitionRef, Vec<Recorded>)>,
        counts: &parking_lot::Mutex<Progress>,
        report: &parking_lot::Mutex<Report>,
    ) -> Result<(), MigrateError> {
        let latest = partitions
            .iter()
            .flat_map(|(_, chunks)| chunks.iter())
            .filter(|c| plan::step(Some(c.row.state)) == Step::Resolve)
            .map(|c| c.row.updated)
            .max();
        let Some(latest) = latest else {
            return Ok(());
        };
        if let Ok(wait) = (latest + self.options.settle).duration_since(SystemTime::now()) {
            tracing::info!(
                partitions = partitions.len(),
                ?wait,
                "Waiting for writes of an earlier run to settle before reading their outcome from the target."
            );
            tokio::time::sleep(wait).await;
        }
        for (partition, mut chunks) in partitions {
            let now = match self.target_sums(&partition, ConsistencyLevel::All).await {
                Ok(now) => now,
                Err(error) => {
                    for chunk in &chunks {
                        if plan::step(Some(chunk.row.state)) == Step::Resolve {
                            report.lock().unknown.push((
                                chunk.part.clone(),
                                format!("cannot read the target at ALL to resolve it: {error}"),
                            ));
                        }
                    }
                    continue;
                }
            };
            for chunk in &mut chunks {
                if plan::step(Some(chunk.row.state)) == Step::Resolve {
                    chunk.row.state = self.resolve_one(jobs, chunk, &now, counts, report).await?;
                }
            }
            self.copy_rest(jobs, &partition, &chunks, Some(now), counts, report)
                .await?;
            counts.lock().partitions += 1;
        }
        Ok(())
    }

    /// Decides one chunk of unknown outcome from the target `now` (read at ALL after the
    /// settle time), records the decision, and returns the chunk's new state.
    async fn resolve_one(
        &self,
        jobs: &JobTable,
        chunk: &Recorded,
        now: &PartitionSums,
        counts: &parking_lot::Mutex<Progress>,
        report: &parking_lot::Mutex<Report>,
    ) -> Result<State, MigrateError> {
        let row = &chunk.row;
        let (state, why) = match plan::verdict(&row.rows, &row.before, now) {
            Verdict::Applied => {
                counts.lock().resolved_applied += 1;
                (
                    State::Applied,
                    "resolved: the target holds the before-image plus this write",
                )
            }
            Verdict::NotApplied => {
                counts.lock().resolved_resent += 1;
                (
                    State::NotApplied,
                    "resolved: every replica holds the before-image; its rows are sent again",
                )
            }
            Verdict::Ambiguous => {
                let why = "the target holds neither the before-image nor the before-image plus this write: someone else wrote these rows, or replicas disagree";
                report
                    .lock()
                    .unknown
                    .push((chunk.part.clone(), why.to_owned()));
                (State::Unknown, why)
            }
        };
        jobs.record(&chunk.part, state, &row.rows, &row.before, Some(why))
            .await?;
        Ok(state)
    }

    /// Records the intent, sends one chunk, records the outcome.
    async fn send(
        &self,
        jobs: &JobTable,
        chunk: &Chunk,
        before: plan::ChunkRows,
        counts: &parking_lot::Mutex<Progress>,
        report: &parking_lot::Mutex<Report>,
    ) -> Result<(), MigrateError> {
        let part = chunk.part();
        jobs.record(&part, State::Sending, &chunk.rows, &before, None)
            .await?;
        let write = self.write_of(chunk)?;
        let (state, error) = match self.sink.write(&write).await {
            Outcome::Applied => (State::Applied, None),
            Outcome::NotAppliedTransient(e) => (State::NotApplied, Some(e)),
            Outcome::NotAppliedPermanent(e) => (State::Rejected, Some(e)),
            Outcome::Unknown(e) => (State::Unknown, Some(e)),
        };
        let text = error.as_ref().map(|e| format!("{}: {}", e.kind, e.text));
        jobs.record(&part, state, &chunk.rows, &before, text.as_deref())
            .await?;
        match state {
            State::Applied => counts.lock().applied += 1,
            State::Unknown => report.lock().unknown.push((part, text.unwrap_or_default())),
            State::NotApplied | State::Rejected | State::Sending => {
                counts.lock().failed += 1;
                report
                    .lock()
                    .not_applied
                    .push((part, text.unwrap_or_default()));
            }
        }
        Ok(())
    }

    /// For a family with an epoch column: the source registry's rows of the family,
    /// written to the target's registry before any partition (idempotent INSERTs of the
    /// same rows), so that the target's writers and readers place and read rows in the
    /// epochs the copied partitions are in.
    async fn copy_epochs(&self) -> Result<(), MigrateError> {
        let family = self.source.family(&self.options.family);
        if family.epoch_column.is_none() {
            return Ok(());
        }
        let registry = |e: crate::epoch::registry::RegistryError| {
            MigrateError::store("the epoch registry of the family", e)
        };
        let rows = crate::epoch::registry::rows_of(
            self.source.reader.session(),
            &self.source.config,
            &family.name,
        )
        .await
        .map_err(registry)?;
        for row in rows {
            crate::epoch::registry::schedule(
                self.target.reader.session(),
                &self.target.config,
                &self.target.family(&self.options.family).name,
                &row.scope,
                row.start_minute,
                &row.reason,
                row.created_unix_secs,
            )
            .await
            .map_err(registry)?;
        }
        Ok(())
    }

    /// The counter write of a chunk, for the target's counter writer.
    fn write_of(&self, chunk: &Chunk) -> Result<PartitionWrite, MigrateError> {
        let family = self.target.family(&self.options.family);
        let keys: Vec<&str> = chunk.partition.key.iter().map(String::as_str).collect();
        let day = chunk
            .partition
            .day()
            .ok_or_else(|| MigrateError::Usage(format!("bad partition {:?}", chunk.partition)))?;
        let table = chunk.partition.granularity();
        let mut rows = Vec::with_capacity(chunk.rows.len());
        for (bucket, values) in &chunk.rows {
            let bucket = match table {
                Granularity::Day => *bucket,
                // Only minute (and day) partitions: `Migration::open` refuses the rest.
                Granularity::Minute | Granularity::Hour | Granularity::Total => {
                    i64::from(day.0) * i64::from(bucket::MINUTES_PER_DAY) + bucket
                }
            };
            let mut columns = Columns::zeroed(family.width());
            for (i, value) in values.iter().enumerate() {
                columns.checked_add_at(i, *value);
            }
            rows.push(RowDelta {
                bucket: u32::try_from(bucket)
                    .map_err(|_| MigrateError::Usage(format!("bucket {bucket} out of range")))?,
                columns,
                requeued_since: 0,
            });
        }
        Ok(PartitionWrite {
            epoch: chunk.partition.epoch,
            family: family.id,
            table,
            series: series::encode(keys).into_boxed_slice(),
            // Into the first shard: readers sum every shard, and a one-off write needs no
            // spreading.
            shard: family.sharding.as_ref().map(|_| 0),
            rows,
        })
    }

    fn batch_rows(&self) -> usize {
        self.target.config.flush.max_batch_rows
    }

    /// The job table lives beside the target's minute table: that keyspace exists.
    pub(super) fn job_keyspace(&self) -> &str {
        let family = self.target.family(&self.options.family);
        // `open` made sure the family has a minute table.
        family
            .table(Granularity::Minute)
            .or_else(|| family.granularities().find_map(|g| family.table(g)))
            .map_or("", |t| t.keyspace.as_str())
    }

    pub(super) fn job_table_exists(&self) -> bool {
        self.target
            .reader
            .session()
            .get_cluster_state()
            .get_keyspace(self.job_keyspace())
            .is_some_and(|ks| ks.tables.contains_key("migrate_jobs"))
    }
}
