//! Leaderboards (seed 000: "a periodic job reads the day's counters, computes the ranking
//! and writes it into a regular table clustered by score").
//!
//! A run lists the period's keys from the key index, reads each key's day rows (every
//! shard summed), keeps the `top` keys by score (ties broken by key), writes them as a new
//! version (one partition of `leaderboard_rankings`, clustered by score descending), and
//! only then flips the pointer row (`leaderboard_current`) to that version. A reader
//! reads the pointer, then the version it names: a run that fails or is killed midway
//! leaves the previous version served, and its partial rows are never pointed to (they
//! expire with their TTL). The version before the previous one is deleted after a flip,
//! so a reader that read the pointer just before a flip still finds its version.
//!
//! [`rank`] and [`periods_to_rank`] are the synchronous core; [`Leaderboards`] the shell.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::StreamExt;
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::CqlTimestamp;
use serde::Serialize;

use crate::bucket::{self, Day};
use crate::config::{Config, ConsistencyLevel, LeaderboardConfig, LeaderboardPeriod};
use crate::cql_text::{self, LEADERBOARD};
use crate::family::Families;
use crate::sink::cql::session;
use crate::telemetry::OperationsMetrics;
use crate::vocabulary::Granularity;

use crate::epoch::{EpochRegistry, EpochView, registry::RegistryError};

use super::keyindex::{self, key_values};
use super::read::{ReadError, Reader};

/// Score reads in flight at once.
const READS_IN_FLIGHT: usize = 32;
/// Ranking rows written at once.
const WRITES_IN_FLIGHT: usize = 16;
/// Attempts of one idempotent write (a ranking row, the pointer) before the run fails.
const WRITE_ATTEMPTS: u32 = 4;

/// A period of a board: its text in the tables, and its days.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Period {
    /// `YYYY-MM-DD` (day) or `YYYY-MM` (month).
    pub text: String,
    /// Its days, first to last.
    pub days: Vec<Day>,
}

impl Period {
    /// The period of `granularity` holding `day`.
    pub fn of(granularity: LeaderboardPeriod, day: Day) -> Period {
        match granularity {
            LeaderboardPeriod::Day => Period {
                text: bucket::format_date(day.date()),
                days: vec![day],
            },
            LeaderboardPeriod::Month => {
                let first = Day(day.0 - u32::from(day.date().day()) + 1);
                let days = (first.0..first.0 + 31)
                    .map(Day)
                    .take_while(|d| d.month() == day.month())
                    .collect();
                Period {
                    text: day.month(),
                    days,
                }
            }
        }
    }
}

/// The periods a job run at `now_unix_secs` ranks: the current one, and the previous one
/// while rows of it may still arrive (`late` after its end: the accepted timestamp window
/// plus the re-queue age), so its final ranking includes them. Each is named by a day in it.
pub fn periods_to_rank(
    granularity: LeaderboardPeriod,
    now_unix_secs: i64,
    late: Duration,
) -> Vec<Day> {
    let today = Day((now_unix_secs.max(0) / 86_400) as u32);
    let current = Period::of(granularity, today);
    let start_secs = i64::from(current.days[0].0) * 86_400;
    let mut days = vec![today];
    if now_unix_secs - start_secs < late.as_secs() as i64 && current.days[0].0 > 0 {
        days.push(Day(current.days[0].0 - 1));
    }
    days
}

/// The `top` entries of `scores` (key text → score) by score, highest first, ties by key;
/// keys scoring 0 (nothing counted in the period) are left out.
pub fn rank(scores: impl IntoIterator<Item = (String, i64)>, top: usize) -> Vec<(i64, String)> {
    let mut ranked: Vec<(i64, String)> = scores
        .into_iter()
        .filter(|(_, score)| *score != 0)
        .map(|(key, score)| (score, key))
        .collect();
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    ranked.truncate(top);
    ranked
}

/// Why a run or a read failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaderboardError {
    /// No board of that name, or a family or column that is not configured.
    #[error("{0}")]
    Usage(String),
    /// Reading keys or scores failed.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// Writing the ranking or the pointer failed; the previous ranking is still served.
    #[error("`{statement}`: {error} (the previous ranking is still served)")]
    Write {
        /// The statement.
        statement: String,
        /// What the driver said.
        error: String,
    },
    /// The epoch registry of a family with an epoch column could not be read.
    #[error(transparent)]
    Epochs(#[from] RegistryError),
}

/// What a run did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunReport {
    /// The period ranked.
    pub period: String,
    /// The version written and now served.
    pub version: i64,
    /// Keys the index listed.
    pub keys: usize,
    /// Entries in the ranking.
    pub entries: usize,
}

/// One entry of a served ranking.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Entry {
    /// 1 for the first.
    pub rank: usize,
    /// The score.
    pub score: i64,
    /// The key values.
    pub key: Vec<String>,
}

/// The ranking a board serves for a period.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Ranking {
    /// The board.
    pub board: String,
    /// The period.
    pub period: String,
    /// The version served.
    pub version: i64,
    /// When the run that wrote it started (RFC 3339).
    pub computed: String,
    /// Entries the version holds.
    pub size: i32,
    /// The entries read (at most the limit asked for).
    pub entries: Vec<Entry>,
}

/// The epochs a ranking reads.
enum Epochs {
    /// A family without an epoch column.
    None,
    /// A family with one: the registry's view, the ranking's epoch, whether it was asked
    /// (every key read in it) or not (each key in the epoch in force for it), and when.
    Of {
        view: Arc<EpochView>,
        board: i32,
        asked: bool,
        last: Day,
        now: i64,
    },
}

impl Epochs {
    /// The period's name in the ranking tables: `period@epoch` for an epoch family.
    fn period(&self, period: &str) -> String {
        match self {
            Epochs::None => period.to_owned(),
            Epochs::Of { board, .. } => format!("{period}@{board}"),
        }
    }

    /// The epoch a key's counters are read in.
    fn of_key(&self, family: &crate::family::FamilyDef, key: &[String]) -> Option<i32> {
        match self {
            Epochs::None => None,
            Epochs::Of {
                board, asked: true, ..
            } => Some(*board),
            Epochs::Of {
                view, last, now, ..
            } => {
                let series = crate::series::encode(key.iter().map(String::as_str));
                Some(view.read_epoch(family.id, &series, *last, *now))
            }
        }
    }
}

/// The leaderboard jobs and reads of a configuration, on one session.
pub struct Leaderboards {
    config: Config,
    families: Families,
    reader: Reader,
    metrics: OperationsMetrics,
    consistency: ConsistencyLevel,
}

impl Leaderboards {
    /// Jobs for the `[[leaderboard]]`s of `config`, reading and writing through `session`
    /// at the store's consistency.
    pub fn new(
        config: &Config,
        session: Arc<Session>,
        metrics: OperationsMetrics,
    ) -> Result<Leaderboards, LeaderboardError> {
        let families =
            Families::from_config(config).map_err(|e| LeaderboardError::Usage(e.to_string()))?;
        Ok(Leaderboards {
            config: config.clone(),
            families,
            reader: Reader::new(session),
            metrics,
            consistency: config.store.consistency,
        })
    }

    /// The session the jobs use.
    pub fn reader_session(&self) -> Arc<Session> {
        self.reader.session().clone()
    }

    /// The board called `name`.
    pub fn board(&self, name: &str) -> Result<&LeaderboardConfig, LeaderboardError> {
        self.config
            .leaderboards
            .iter()
            .find(|b| b.name == name)
            .ok_or_else(|| {
                LeaderboardError::Usage(format!(
                    "no leaderboard is called `{name}` in the configuration"
                ))
            })
    }

    /// Ranks the period of `board` holding `day` and serves the new version (for a
    /// family with an epoch column, in the epochs in force: see [`Leaderboards::run_in_epoch`]).
    pub async fn run(
        &self,
        board: &LeaderboardConfig,
        day: Day,
    ) -> Result<RunReport, LeaderboardError> {
        self.run_in_epoch(board, day, None).await
    }

    /// [`Leaderboards::run`] for a family with an epoch column: the ranking is of the
    /// family's epoch `epoch` (its start minute; default the one in force at the end of
    /// the period, or now), and is served under the period `YYYY-MM-DD@epoch`, so a
    /// reset starts a ranking of its own and the rankings of earlier epochs stay
    /// readable. Each key is read in that epoch when one is asked, else in the epoch in
    /// force for the key (a key reset alone restarts in the family's ranking).
    pub async fn run_in_epoch(
        &self,
        board: &LeaderboardConfig,
        day: Day,
        epoch: Option<i32>,
    ) -> Result<RunReport, LeaderboardError> {
        let result = self.run_inner(board, day, epoch).await;
        let label = if result.is_ok() { "ok" } else { "failed" };
        self.metrics
            .leaderboard_runs
            .with_label_values(&[board.name.as_str(), label])
            .inc();
        result
    }

    async fn run_inner(
        &self,
        board: &LeaderboardConfig,
        day: Day,
        asked: Option<i32>,
    ) -> Result<RunReport, LeaderboardError> {
        let started = SystemTime::now();
        let mut period = Period::of(board.granularity, day);
        let family = self.families.by_name(&board.family).ok_or_else(|| {
            LeaderboardError::Usage(format!("no family is called `{}`", board.family))
        })?;
        let column = family
            .columns
            .iter()
            .position(|c| *c == board.column)
            .ok_or_else(|| {
                LeaderboardError::Usage(format!(
                    "family `{}` has no column `{}`",
                    family.name, board.column
                ))
            })?;
        let now = bucket::unix_secs(started);
        let epochs = self.epochs(family, &period, asked, now).await?;
        period.text = epochs.period(&period.text);
        let session = self.reader.session();
        let mut keys = std::collections::BTreeSet::new();
        for &d in &period.days {
            keys.extend(
                keyindex::keys_of_day(session, &self.config, &family.name, d, self.consistency)
                    .await?,
            );
        }
        let (days, epochs) = (&period.days, &epochs);
        let reads = futures_util::stream::iter(keys.iter().cloned())
            .map(|key: Vec<String>| async move {
                let sums = self
                    .reader
                    .read_partition_in_epoch(
                        family,
                        Granularity::Day,
                        &key,
                        epochs.of_key(family, &key),
                        days[0],
                        &[column],
                        self.consistency,
                    )
                    .await?
                    .sums;
                let score = days
                    .iter()
                    .filter_map(|d| sums.get(&i64::from(d.0)))
                    .fold(0_i64, |sum, v| sum.wrapping_add(v[0]));
                Ok::<_, ReadError>((serde_json::to_string(&key).unwrap_or_default(), score))
            })
            .buffer_unordered(READS_IN_FLIGHT);
        let scores: Vec<(String, i64)> = reads
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<_, _>>()?;
        let ranking = rank(scores, board.top);

        let current = self.pointer(&board.name, &period.text).await?;
        let micros = unix_micros(started);
        let version = match &current {
            Some(served) if served.version >= micros => served.version + 1,
            _ => micros,
        };
        let ttl = i32::try_from(board.keep.as_secs()).unwrap_or(i32::MAX);
        let insert = self.prepare("insert_ranking", true).await?;
        let (name, period_text) = (board.name.as_str(), period.text.as_str());
        let insert = &insert;
        let writes = futures_util::stream::iter(ranking.iter().cloned())
            .map(|(score, key): (i64, String)| async move {
                self.write(insert, (name, period_text, version, score, key, ttl))
                    .await
            })
            .buffer_unordered(WRITES_IN_FLIGHT);
        for result in writes.collect::<Vec<_>>().await {
            result?;
        }
        // Every row is in: now, and only now, readers are sent to this version.
        let flip = self.prepare("flip_current", true).await?;
        let previous = current.as_ref().map(|served| served.version);
        let entries = i32::try_from(ranking.len()).unwrap_or(i32::MAX);
        let computed = CqlTimestamp(micros / 1000);
        self.write(
            &flip,
            (
                board.name.as_str(),
                period.text.as_str(),
                version,
                previous,
                entries,
                computed,
                version,
                ttl,
            ),
        )
        .await?;
        if let Some(Pointer {
            previous: Some(older),
            ..
        }) = current
        {
            let delete = self.prepare("delete_version", true).await?;
            if let Err(error) = self
                .write(&delete, (board.name.as_str(), period.text.as_str(), older))
                .await
            {
                tracing::warn!(%error, board = %board.name, version = older, "Could not delete an old ranking version; it expires with its TTL.");
            }
        }
        Ok(RunReport {
            period: period.text,
            version,
            keys: keys.len(),
            entries: ranking.len(),
        })
    }

    /// The ranking `board` serves for the period holding `day`: at most `limit` entries.
    /// `None` when no run has finished for that period.
    pub async fn top(
        &self,
        board: &LeaderboardConfig,
        day: Day,
        limit: usize,
    ) -> Result<Option<Ranking>, LeaderboardError> {
        self.top_in_epoch(board, day, limit, None).await
    }

    /// [`Leaderboards::top`] for a family with an epoch column: the ranking of the
    /// family's epoch `epoch` (default: the one in force at the end of the period, or
    /// now).
    pub async fn top_in_epoch(
        &self,
        board: &LeaderboardConfig,
        day: Day,
        limit: usize,
        epoch: Option<i32>,
    ) -> Result<Option<Ranking>, LeaderboardError> {
        let mut period = Period::of(board.granularity, day);
        let family = self.families.by_name(&board.family).ok_or_else(|| {
            LeaderboardError::Usage(format!("no family is called `{}`", board.family))
        })?;
        let now = bucket::unix_secs(SystemTime::now());
        period.text = self
            .epochs(family, &period, epoch, now)
            .await?
            .period(&period.text);
        let Some(pointer) = self.pointer(&board.name, &period.text).await? else {
            return Ok(None);
        };
        let version = pointer.version;
        let select = self.prepare("select_ranking", true).await?;
        let limit = i32::try_from(limit).unwrap_or(i32::MAX);
        let rows = self
            .reader
            .session()
            .execute_unpaged(
                &select,
                (board.name.as_str(), period.text.as_str(), version, limit),
            )
            .await
            .map_err(|e| read_error(&select, e))?
            .into_rows_result()
            .map_err(|e| read_error(&select, e))?;
        let mut entries = Vec::new();
        for (i, row) in rows
            .rows::<(i64, String)>()
            .map_err(|e| read_error(&select, e))?
            .enumerate()
        {
            let (score, key) = row.map_err(|e| read_error(&select, e))?;
            entries.push(Entry {
                rank: i + 1,
                score,
                key: key_values(&key).unwrap_or_else(|| vec![key]),
            });
        }
        Ok(Some(Ranking {
            board: board.name.clone(),
            period: period.text,
            version,
            computed: pointer.computed,
            size: pointer.entries,
            entries,
        }))
    }

    /// The epochs a ranking of `family`'s `period` reads (see
    /// [`Leaderboards::run_in_epoch`]): none for a family without an epoch column (an
    /// epoch asked of one is a usage error), else from a read of the registry at `now`.
    async fn epochs(
        &self,
        family: &crate::family::FamilyDef,
        period: &Period,
        asked: Option<i32>,
        now: i64,
    ) -> Result<Epochs, LeaderboardError> {
        if family.epoch_column.is_none() {
            return match asked {
                Some(_) => Err(LeaderboardError::Usage(format!(
                    "family `{}` has no epoch column: --epoch does not apply",
                    family.name
                ))),
                None => Ok(Epochs::None),
            };
        }
        let registry = EpochRegistry::new(&self.config, &self.families, &self.metrics, now)
            .ok_or_else(|| LeaderboardError::Usage("no family has an epoch column".into()))?;
        registry
            .refresh_at(self.reader.session(), &self.families, now)
            .await?;
        let view = registry
            .view()
            .ok_or_else(|| LeaderboardError::Usage("the epoch registry was not read".into()))?;
        let last = period.days.last().copied().unwrap_or(Day(0));
        let board = asked.unwrap_or_else(|| view.read_epoch(family.id, &[], last, now));
        Ok(Epochs::Of {
            view,
            board,
            asked: asked.is_some(),
            last,
            now,
        })
    }

    /// The pointer row of a board's period, if a run finished for it.
    async fn pointer(
        &self,
        board: &str,
        period: &str,
    ) -> Result<Option<Pointer>, LeaderboardError> {
        let select = self.prepare("select_current", true).await?;
        let rows = self
            .reader
            .session()
            .execute_unpaged(&select, (board, period))
            .await
            .map_err(|e| read_error(&select, e))?
            .into_rows_result()
            .map_err(|e| read_error(&select, e))?;
        let first = rows
            .rows::<(Option<i64>, Option<i64>, Option<i32>, Option<CqlTimestamp>)>()
            .map_err(|e| read_error(&select, e))?
            .next()
            .transpose()
            .map_err(|e| read_error(&select, e))?;
        Ok(first.and_then(|(version, previous, entries, computed)| {
            Some(Pointer {
                version: version?,
                previous,
                entries: entries.unwrap_or(0),
                computed: computed
                    .map(|t| {
                        bucket::rfc3339(
                            SystemTime::UNIX_EPOCH + Duration::from_millis(t.0.max(0) as u64),
                        )
                    })
                    .unwrap_or_default(),
            })
        }))
    }

    async fn prepare(
        &self,
        name: &str,
        idempotent: bool,
    ) -> Result<PreparedStatement, LeaderboardError> {
        let text = cql_text::statement(
            LEADERBOARD,
            name,
            &[("keyspace", self.config.store.keyspace.as_str())],
        );
        let mut statement = self
            .reader
            .session()
            .prepare(text.clone())
            .await
            .map_err(|e| LeaderboardError::Write {
                statement: text,
                error: e.to_string(),
            })?;
        statement.set_is_idempotent(idempotent);
        statement.set_consistency(session::consistency(self.consistency));
        Ok(statement)
    }

    /// An idempotent write, sent again after any failure, up to [`WRITE_ATTEMPTS`] times.
    async fn write(
        &self,
        statement: &PreparedStatement,
        values: impl scylla::serialize::row::SerializeRow + Clone,
    ) -> Result<(), LeaderboardError> {
        let mut wait = Duration::from_millis(100);
        let mut attempt = 1;
        loop {
            match self
                .reader
                .session()
                .execute_unpaged(statement, values.clone())
                .await
            {
                Ok(_) => return Ok(()),
                Err(error) if attempt >= WRITE_ATTEMPTS => {
                    return Err(LeaderboardError::Write {
                        statement: statement.get_statement().to_owned(),
                        error: error.to_string(),
                    });
                }
                Err(_) => {
                    tokio::time::sleep(wait).await;
                    wait *= 2;
                    attempt += 1;
                }
            }
        }
    }
}

/// A pointer row.
struct Pointer {
    version: i64,
    previous: Option<i64>,
    entries: i32,
    computed: String,
}

/// Microseconds since the epoch: a run's version.
fn unix_micros(at: SystemTime) -> i64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

fn read_error(statement: &PreparedStatement, error: impl std::fmt::Display) -> LeaderboardError {
    LeaderboardError::Read(ReadError::Store {
        statement: statement.get_statement().to_owned(),
        error: error.to_string(),
    })
}

/// Runs the boards of `config` that have `run_in_serve`, each every `interval`, until
/// `stop` turns true; a failed run is logged and retried at the next interval.
pub async fn serve_jobs(jobs: Arc<Leaderboards>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let boards: Vec<LeaderboardConfig> = jobs
        .config
        .leaderboards
        .iter()
        .filter(|b| b.run_in_serve)
        .cloned()
        .collect();
    let late = jobs.config.limits.timestamp_max_past + jobs.config.flush.requeue_max_age;
    let mut next: BTreeMap<String, tokio::time::Instant> = boards
        .iter()
        .map(|b| (b.name.clone(), tokio::time::Instant::now()))
        .collect();
    loop {
        let now = tokio::time::Instant::now();
        for board in &boards {
            if next.get(&board.name).is_some_and(|at| *at <= now) {
                let now_secs = bucket::unix_secs(SystemTime::now());
                for day in periods_to_rank(board.granularity, now_secs, late) {
                    match jobs.run(board, day).await {
                        Ok(report) => {
                            tracing::debug!(board = %board.name, period = %report.period, entries = report.entries, "Leaderboard updated.")
                        }
                        Err(error) => {
                            tracing::warn!(board = %board.name, %error, "Leaderboard run failed; the previous ranking is still served.")
                        }
                    }
                }
                next.insert(board.name.clone(), now + board.interval);
            }
        }
        let Some(wake) = next.values().min().copied() else {
            return;
        };
        tokio::select! {
            _ = tokio::time::sleep_until(wake) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rankings_order_by_score_then_key_and_skip_zeros() {
        let scores = [("b", 5), ("a", 5), ("c", 9), ("z", 0), ("d", -2), ("e", 1)]
            .map(|(k, s)| (k.to_string(), s));
        assert_eq!(
            rank(scores.clone(), 3),
            [(9, "c".into()), (5, "a".into()), (5, "b".into())]
        );
        assert_eq!(rank(scores, 10).last(), Some(&(-2, "d".to_string())));
    }

    #[test]
    fn periods_are_days_or_calendar_months() {
        let day = Day::from_date(bucket::parse_date("2026-02-14").unwrap()).unwrap();
        let one = Period::of(LeaderboardPeriod::Day, day);
        assert_eq!((one.text.as_str(), one.days.len()), ("2026-02-14", 1));
        let month = Period::of(LeaderboardPeriod::Month, day);
        assert_eq!(month.text, "2026-02");
        assert_eq!(month.days.len(), 28);
        assert_eq!(bucket::format_date(month.days[0].date()), "2026-02-01");
    }

    #[test]
    fn the_previous_period_is_ranked_again_while_late_rows_may_arrive() {
        let midnight = 1_796_083_200; // 2026-12-01T00:00Z
        let late = Duration::from_secs(4200);
        let day = |secs: i64| Day((secs / 86_400) as u32);
        assert_eq!(
            periods_to_rank(LeaderboardPeriod::Day, midnight + 60, late),
            [day(midnight), day(midnight - 1)]
        );
        assert_eq!(
            periods_to_rank(LeaderboardPeriod::Day, midnight + 4200, late),
            [day(midnight)]
        );
        assert_eq!(
            periods_to_rank(LeaderboardPeriod::Month, midnight + 60, late).len(),
            2,
            "December 1st: November is ranked once more"
        );
        assert_eq!(
            periods_to_rank(LeaderboardPeriod::Month, midnight + 86_400 + 60, late).len(),
            1
        );
    }
}
