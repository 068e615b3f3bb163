//! A page-view service written against the plain `scylla` driver, on seed 000's tables:
//! every view increments a minute row and a day row with prepared counter UPDATEs, pages
//! are registered in a regular table, and the service reads a page now and then.
//!
//! The service only calls `prepare` and `execute_unpaged`, so it runs unchanged on a
//! `scylla::client::session::Session` or on a `countersink::CounterSession`: the
//! [`Driver`] trait below only names those two methods, with the driver's own types.
//! (The example and the integration test both run it.)

use std::future::Future;
use std::sync::Arc;

use scylla::errors::{ExecutionError, PrepareError};
use scylla::response::query_result::QueryResult;
use scylla::serialize::row::SerializeRow;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::{Counter, CqlDate};

/// Tasks incrementing at once.
pub(crate) const TASKS: usize = 10;
/// Views each task records.
pub(crate) const VIEWS_PER_TASK: usize = 2_000;
/// Distinct pages.
pub(crate) const PAGES: usize = 20;
/// 2026-11-30, days since the epoch.
pub(crate) const DAY: u32 = 20_787;
/// Its month partition.
pub(crate) const MONTH: &str = "2026-11";

/// The two driver methods the service calls.
pub(crate) trait Driver: Send + Sync + 'static {
    /// `Session::prepare`.
    fn prepare(
        &self,
        text: &str,
    ) -> impl Future<Output = Result<PreparedStatement, PrepareError>> + Send;
    /// `Session::execute_unpaged`.
    fn execute_unpaged<V: SerializeRow + Send>(
        &self,
        statement: &PreparedStatement,
        values: V,
    ) -> impl Future<Output = Result<QueryResult, ExecutionError>> + Send;
}

impl Driver for scylla::client::session::Session {
    fn prepare(
        &self,
        text: &str,
    ) -> impl Future<Output = Result<PreparedStatement, PrepareError>> + Send {
        scylla::client::session::Session::prepare(self, text.to_owned())
    }
    fn execute_unpaged<V: SerializeRow + Send>(
        &self,
        statement: &PreparedStatement,
        values: V,
    ) -> impl Future<Output = Result<QueryResult, ExecutionError>> + Send {
        scylla::client::session::Session::execute_unpaged(self, statement, values)
    }
}

impl Driver for countersink::CounterSession {
    fn prepare(
        &self,
        text: &str,
    ) -> impl Future<Output = Result<PreparedStatement, PrepareError>> + Send {
        countersink::CounterSession::prepare(self, text.to_owned())
    }
    fn execute_unpaged<V: SerializeRow + Send>(
        &self,
        statement: &PreparedStatement,
        values: V,
    ) -> impl Future<Output = Result<QueryResult, ExecutionError>> + Send {
        countersink::CounterSession::execute_unpaged(self, statement, values)
    }
}

/// The keyspace and tables (seed 000), for a keyspace named `keyspace`.
pub(crate) fn schema(keyspace: &str) -> Vec<String> {
    vec![
        format!(
            "CREATE KEYSPACE IF NOT EXISTS {keyspace} WITH replication = \
             {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {keyspace}.views_by_minute (page_id text, day date, \
             minute smallint, views counter, bytes counter, \
             PRIMARY KEY ((page_id, day), minute))"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {keyspace}.views_by_day (page_id text, month text, \
             day date, views counter, bytes counter, PRIMARY KEY ((page_id, month), day))"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {keyspace}.pages (page_id text PRIMARY KEY, \
             title text, owner text)"
        ),
    ]
}

/// What a run did besides counting.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Summary {
    /// Counter UPDATE executions.
    pub increments: usize,
    /// Page reads, and how many found their page.
    pub reads: usize,
    /// Reads that found the page's title.
    pub titles_found: usize,
}

fn page(task: usize, i: usize) -> String {
    format!("page-{}", (task * 31 + i * 7) % PAGES)
}

/// (page, minute) → (views, bytes) of the minute rows.
pub(crate) type MinuteRows = std::collections::BTreeMap<(String, i16), (i64, i64)>;
/// page → (views, bytes) of the day rows.
pub(crate) type DayRows = std::collections::BTreeMap<String, (i64, i64)>;

/// The views and bytes every row should hold after a run.
pub(crate) fn expected() -> (MinuteRows, DayRows) {
    let mut minutes = std::collections::BTreeMap::new();
    let mut days = std::collections::BTreeMap::new();
    for task in 0..TASKS {
        for i in 0..VIEWS_PER_TASK {
            let bytes = (i % 100) as i64 + 1;
            let m: &mut (i64, i64) = minutes.entry((page(task, i), minute(i))).or_default();
            m.0 += 1;
            m.1 += bytes;
            let d: &mut (i64, i64) = days.entry(page(task, i)).or_default();
            d.0 += 1;
            d.1 += bytes;
        }
    }
    (minutes, days)
}

fn minute(i: usize) -> i16 {
    1_430 + (i * 4 / VIEWS_PER_TASK) as i16
}

/// Registers the pages, then counts `TASKS` x `VIEWS_PER_TASK` views in `keyspace`, reading
/// a page every 500 views.
pub(crate) async fn run<D: Driver>(
    driver: Arc<D>,
    keyspace: &str,
) -> Result<Summary, Box<dyn std::error::Error + Send + Sync>> {
    let incr_minute = driver
        .prepare(&format!(
            "UPDATE {keyspace}.views_by_minute SET views = views + ?, bytes = bytes + ? \
             WHERE page_id = ? AND day = ? AND minute = ?"
        ))
        .await?;
    let incr_day = driver
        .prepare(&format!(
            "UPDATE {keyspace}.views_by_day SET views = views + ?, bytes = bytes + ? \
             WHERE page_id = ? AND month = ? AND day = ?"
        ))
        .await?;
    let register = driver
        .prepare(&format!(
            "INSERT INTO {keyspace}.pages (page_id, title, owner) VALUES (?, ?, ?)"
        ))
        .await?;
    let read = driver
        .prepare(&format!(
            "SELECT title FROM {keyspace}.pages WHERE page_id = ?"
        ))
        .await?;
    for p in 0..PAGES {
        let id = format!("page-{p}");
        driver
            .execute_unpaged(&register, (&id, format!("Page {p}"), "web"))
            .await?;
    }
    let day = CqlDate((1 << 31) + DAY);
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let driver = Arc::clone(&driver);
        let (incr_minute, incr_day, read) = (incr_minute.clone(), incr_day.clone(), read.clone());
        tasks.push(tokio::spawn(async move {
            let mut summary = Summary::default();
            for i in 0..VIEWS_PER_TASK {
                let page = page(task, i);
                let bytes = (i % 100) as i64 + 1;
                driver
                    .execute_unpaged(
                        &incr_minute,
                        (Counter(1), Counter(bytes), &page, day, minute(i)),
                    )
                    .await?;
                driver
                    .execute_unpaged(&incr_day, (Counter(1), Counter(bytes), &page, MONTH, day))
                    .await?;
                summary.increments += 2;
                if i % 500 == 0 {
                    let rows = driver
                        .execute_unpaged(&read, (&page,))
                        .await?
                        .into_rows_result()?;
                    summary.reads += 1;
                    if rows.maybe_first_row::<(Option<String>,)>()?.is_some() {
                        summary.titles_found += 1;
                    }
                }
            }
            Ok::<Summary, Box<dyn std::error::Error + Send + Sync>>(summary)
        }));
    }
    let mut total = Summary::default();
    for task in tasks {
        let summary = task.await??;
        total.increments += summary.increments;
        total.reads += summary.reads;
        total.titles_found += summary.titles_found;
    }
    Ok(total)
}
