//! The job table (`cql/migrate.cql`): each chunk's intent before its write, its outcome
//! after. Writes are idempotent upserts, retried; a run that cannot record an intent does
//! not send the write, and one that cannot record an outcome stops (the chunk stays
//! `sending`, resolved by the next run).

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use futures_util::StreamExt;
use futures_util::future::try_join_all;
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::CqlTimestamp;

use crate::config::Config;
use crate::cql_text::{self, MIGRATE};
use crate::family::shard_seed;
use crate::sink::cql::session;

use super::MigrateError;
use super::plan::{ChunkRows, State};

/// Partitions of one job.
const BUCKETS: u16 = 64;
/// Attempts of one job table write.
const ATTEMPTS: u32 = 5;

/// A chunk as the job table holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRow {
    /// Its state.
    pub state: State,
    /// What its write carries.
    pub rows: ChunkRows,
    /// The target before the write.
    pub before: ChunkRows,
    /// The error of its last attempt.
    pub error: Option<String>,
    /// When the row was written.
    pub updated: SystemTime,
}

/// The job table of one job.
pub struct JobTable {
    session: std::sync::Arc<Session>,
    job: String,
    upsert: PreparedStatement,
    select: PreparedStatement,
}

impl JobTable {
    /// Creates the table if missing (in `keyspace`, where the target's tables are) and
    /// prepares its statements.
    pub async fn open(
        session: std::sync::Arc<Session>,
        target: &Config,
        keyspace: &str,
        job: &str,
    ) -> Result<JobTable, MigrateError> {
        let keyspace = [("keyspace", keyspace)];
        let create = cql_text::statement(MIGRATE, "create_jobs", &keyspace);
        session
            .query_unpaged(create.clone(), ())
            .await
            .map_err(|e| MigrateError::store(&create, e))?;
        let prepare = |name: &str| {
            let text = cql_text::statement(MIGRATE, name, &keyspace);
            let session = &session;
            async move {
                let mut statement = session
                    .prepare(text.clone())
                    .await
                    .map_err(|e| MigrateError::store(&text, e))?;
                statement.set_is_idempotent(true);
                statement.set_consistency(session::consistency(target.store.consistency));
                Ok::<_, MigrateError>(statement)
            }
        };
        let upsert = prepare("upsert_part").await?;
        let select = prepare("select_parts").await?;
        Ok(JobTable {
            session,
            job: job.to_owned(),
            upsert,
            select,
        })
    }

    /// Every chunk recorded for the job, by part id.
    pub async fn load(&self) -> Result<HashMap<String, JobRow>, MigrateError> {
        let reads = (0..BUCKETS).map(|bucket| async move {
            let mut rows = self
                .session
                .execute_iter(self.select.clone(), (self.job.as_str(), bucket as i16))
                .await
                .map_err(|e| MigrateError::store(self.select.get_statement(), e))?
                .rows_stream::<(
                    String,
                    Option<String>,
                    Option<String>,
                    Option<String>,
                    Option<String>,
                    Option<CqlTimestamp>,
                )>()
                .map_err(|e| MigrateError::store(self.select.get_statement(), e))?;
            let mut out = Vec::new();
            while let Some(row) = rows.next().await {
                let (part, state, chunk, before, error, updated) =
                    row.map_err(|e| MigrateError::store(self.select.get_statement(), e))?;
                let Some(state) = state.as_deref().and_then(State::parse) else {
                    continue;
                };
                let parse = |text: Option<String>| -> ChunkRows {
                    text.and_then(|t| serde_json::from_str(&t).ok())
                        .unwrap_or_default()
                };
                let updated = updated.map_or(SystemTime::UNIX_EPOCH, |t| {
                    SystemTime::UNIX_EPOCH + Duration::from_millis(t.0.max(0) as u64)
                });
                out.push((
                    part,
                    JobRow {
                        state,
                        rows: parse(chunk),
                        before: parse(before),
                        error,
                        updated,
                    },
                ));
            }
            Ok::<_, MigrateError>(out)
        });
        Ok(try_join_all(reads).await?.into_iter().flatten().collect())
    }

    /// Records `part` in `state`.
    pub async fn record(
        &self,
        part: &str,
        state: State,
        rows: &ChunkRows,
        before: &ChunkRows,
        error: Option<&str>,
    ) -> Result<(), MigrateError> {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let values = (
            self.job.as_str(),
            (shard_seed(part) % u64::from(BUCKETS)) as i16,
            part,
            state.as_str(),
            serde_json::to_string(rows).unwrap_or_default(),
            serde_json::to_string(before).unwrap_or_default(),
            error,
            CqlTimestamp(now),
        );
        let mut wait = Duration::from_millis(100);
        for attempt in 1..=ATTEMPTS {
            match self.session.execute_unpaged(&self.upsert, &values).await {
                Ok(_) => return Ok(()),
                Err(error) if attempt == ATTEMPTS => {
                    return Err(MigrateError::Job {
                        part: part.to_owned(),
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
}
