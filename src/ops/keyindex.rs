//! The key index: the keys each family wrote on each UTC day, in a regular table
//! (`cql/key_index.cql`), so that leaderboards (and reconciliation) list a day's keys
//! without scanning a counter table.
//!
//! Fed by the flusher's one hook ([`FlushObserver`]): every flush tells it the writes it
//! is about to send, and each (family, day, key) not yet written today by this writer is
//! queued. A background task inserts the queued rows; an INSERT is idempotent (every
//! writer writes the same row), so a failed one, timeouts included, is simply sent again
//! later with a growing back-off. Bounded: at most `key_index.max_pending` rows wait; a
//! new key beyond is dropped, counted, and forgotten, so the next flush of that key on
//! that day offers it again.
//!
//! The index is written beside the counters, not before them: a key whose counter write
//! applied may be missing from the index for the time its row waits in the queue, and for
//! good if the process is killed in that time and the key is not flushed again that day.
//! At shutdown the queue is drained (with a deadline) after the final flush.
//!
//! [`IndexQueue`] is the synchronous core, with time passed in; [`KeyIndex`] the shell.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::future::try_join_all;
use parking_lot::Mutex;
use scylla::client::session::Session;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::CqlDate;
use tokio::sync::{Notify, watch};

use crate::backoff::Backoff;
use crate::bucket::Day;
use crate::config::{Config, ConsistencyLevel};
use crate::cql_text::{self, KEY_INDEX};
use crate::family::{Families, TableName};
use crate::flush::FlushObserver;
use crate::series;
use crate::sink::PlannedWrite;
use crate::sink::cql::session;
use crate::telemetry::OperationsMetrics;
use crate::vocabulary::{FamilyId, Granularity};

use super::read::ReadError;

/// The key values of an encoded series as the index stores them: a JSON array.
pub fn key_text(series: &[u8]) -> String {
    series::key_json(series)
}

/// The key values of an index row.
pub fn key_values(text: &str) -> Option<Vec<String>> {
    serde_json::from_str(text).ok()
}

/// The bucket of a key: a stable hash (FNV-1a) of its text, modulo `buckets`.
pub fn bucket_of(key: &str, buckets: u16) -> i16 {
    crate::family::key_bucket(key, buckets)
}

/// One index row waiting to be written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The family.
    pub family: FamilyId,
    /// The UTC day.
    pub day: Day,
    /// The encoded key.
    pub series: Box<[u8]>,
    /// Failed attempts so far.
    pub attempts: u32,
    /// Not to be sent before this instant (the back-off after a failure).
    pub not_before: Instant,
}

/// What became of a key offered to the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offer {
    /// New today for this writer: queued.
    Queued,
    /// Already written (or queued) today.
    Known,
    /// New, but the queue is full: dropped and forgotten.
    Dropped,
}

/// A family and one of its encoded keys.
type KeyOfFamily = (FamilyId, Box<[u8]>);

/// Which keys are written today, and the rows waiting.
pub struct IndexQueue {
    max_pending: usize,
    max_remembered: usize,
    seen: BTreeMap<Day, HashSet<KeyOfFamily>>,
    remembered: usize,
    queue: VecDeque<Entry>,
}

/// The first retry waits this long; each further failure doubles it.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// The longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// The wait before a failed row is sent again.
const RETRY_BACKOFF: Backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);

impl IndexQueue {
    /// A queue of at most `max_pending` rows, remembering at most ten times as many keys
    /// (older days are forgotten first; forgetting costs a second, idempotent insert).
    pub fn new(max_pending: usize) -> IndexQueue {
        IndexQueue {
            max_pending: max_pending.max(1),
            max_remembered: max_pending.max(1).saturating_mul(10),
            seen: BTreeMap::new(),
            remembered: 0,
            queue: VecDeque::new(),
        }
    }

    /// Offers a key written on `day`.
    pub fn offer(&mut self, family: FamilyId, day: Day, series: &[u8], now: Instant) -> Offer {
        let id = (family, Box::<[u8]>::from(series));
        if self.seen.get(&day).is_some_and(|keys| keys.contains(&id)) {
            return Offer::Known;
        }
        if self.queue.len() >= self.max_pending {
            return Offer::Dropped;
        }
        while self.remembered >= self.max_remembered {
            let Some((_, forgotten)) = self.seen.pop_first() else {
                break;
            };
            self.remembered -= forgotten.len();
        }
        self.seen.entry(day).or_default().insert(id.clone());
        self.remembered += 1;
        self.queue.push_back(Entry {
            family,
            day,
            series: id.1,
            attempts: 0,
            not_before: now,
        });
        Offer::Queued
    }

    /// Up to `max` rows due at `now`, taken out of the queue.
    pub fn take_ready(&mut self, now: Instant, max: usize) -> Vec<Entry> {
        let mut ready = Vec::new();
        let mut waiting = VecDeque::with_capacity(self.queue.len());
        while let Some(entry) = self.queue.pop_front() {
            if ready.len() < max && entry.not_before <= now {
                ready.push(entry);
            } else {
                waiting.push_back(entry);
            }
        }
        self.queue = waiting;
        ready
    }

    /// Puts back a row whose insert failed, due after its back-off. It stays in the queue
    /// even when the queue is full: it was accepted once.
    pub fn failed(&mut self, mut entry: Entry, now: Instant) {
        entry.attempts = entry.attempts.saturating_add(1);
        entry.not_before = now + RETRY_BACKOFF.delay(entry.attempts);
        self.queue.push_back(entry);
    }

    /// When the next waiting row is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.queue.iter().map(|e| e.not_before).min()
    }

    /// Rows waiting.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Whether no row waits.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Forgets the rows still waiting (at the shutdown deadline); returns how many.
    pub fn abandon(&mut self) -> usize {
        let n = self.queue.len();
        self.queue.clear();
        n
    }
}

/// The key index writer: a flush observer and its background task. Clones share it.
#[derive(Clone)]
pub struct KeyIndex {
    shared: Arc<Shared>,
}

struct Shared {
    table: TableName,
    buckets: u16,
    consistency: ConsistencyLevel,
    /// By family id; a live reload that adds families names them (see
    /// [`KeyIndex::name_families`]).
    family_names: parking_lot::RwLock<Vec<String>>,
    queue: Mutex<IndexQueue>,
    wake: Notify,
    session: watch::Sender<Option<Arc<Session>>>,
    metrics: OperationsMetrics,
}

/// Rows sent together by the writer task.
const SEND_BATCH: usize = 256;
/// Inserts in flight at once.
const IN_FLIGHT: usize = 32;

impl KeyIndex {
    /// Names the families by id anew, after a live reload added some (before rows of
    /// them are flushed): a key is indexed under its family's name.
    pub fn name_families(&self, families: &Families) {
        *self.shared.family_names.write() = families.iter().map(|f| f.name.clone()).collect();
    }

    /// A writer for the `[key_index]` of `config` (whether or not it is enabled: the
    /// caller decides whether to install it).
    pub fn new(config: &Config, families: &Families, metrics: OperationsMetrics) -> KeyIndex {
        let (session, _) = watch::channel(None);
        KeyIndex {
            shared: Arc::new(Shared {
                table: index_table(config),
                buckets: config.key_index.buckets,
                consistency: config.store.consistency,
                family_names: parking_lot::RwLock::new(
                    families.iter().map(|f| f.name.clone()).collect(),
                ),
                queue: Mutex::new(IndexQueue::new(config.key_index.max_pending)),
                wake: Notify::new(),
                session,
                metrics,
            }),
        }
    }

    /// Hands the writer its session (once the store is reached).
    pub fn set_session(&self, session: Arc<Session>) {
        self.shared.session.send_replace(Some(session));
        self.shared.wake.notify_one();
    }

    /// Rows waiting to be written.
    pub fn pending(&self) -> usize {
        self.shared.queue.lock().len()
    }

    /// Writes queued rows until `stop` names an instant, then until that instant at most
    /// (the rows of the final flush: the shutdown's deadline, so the key index never holds
    /// a stop past it); what is left then is counted as dropped and logged. A dropped
    /// sender stops at once.
    pub async fn run(self, mut stop: watch::Receiver<Option<Instant>>) {
        let mut sessions = self.shared.session.subscribe();
        let session = tokio::select! {
            s = sessions.wait_for(Option::is_some) => s.ok().and_then(|s| s.clone()),
            _ = stop.wait_for(Option::is_some) => None,
        };
        let Some(session) = session else {
            self.abandon("no session to the store");
            return;
        };
        let mut statement = None;
        let mut deadline: Option<Instant> = None;
        loop {
            if deadline.is_none() {
                deadline = drain_until(&stop);
            }
            if let Some(deadline) = deadline
                && (Instant::now() >= deadline || self.shared.queue.lock().is_empty())
            {
                self.abandon("shutdown deadline");
                return;
            }
            if statement.is_none() {
                match until_drained(self.prepare(&session), &mut stop, deadline).await {
                    None => {
                        self.abandon("shutdown deadline (the store did not answer PREPARE)");
                        return;
                    }
                    Some(Ok(prepared)) => statement = Some(prepared),
                    Some(Err(error)) => {
                        tracing::warn!(%error, "Cannot prepare the key index insert; retrying.");
                        self.wait(&mut stop, Some(Instant::now() + MAX_BACKOFF / 6), deadline)
                            .await;
                        continue;
                    }
                }
            }
            let ready = self
                .shared
                .queue
                .lock()
                .take_ready(Instant::now(), SEND_BATCH);
            if ready.is_empty() {
                let due = self.shared.queue.lock().next_due();
                self.wait(&mut stop, due, deadline).await;
                continue;
            }
            if let Some(prepared) = &statement {
                let taken = ready.len();
                let sent = self.send(&session, prepared, ready);
                if until_drained(sent, &mut stop, deadline).await.is_none() {
                    // Taken from the queue, not confirmed: dropped with the rest.
                    self.shared
                        .metrics
                        .key_index_writes
                        .with_label_values(&["dropped"])
                        .inc_by(taken as u64);
                    self.abandon("shutdown deadline (inserts unanswered)");
                    return;
                }
            }
        }
    }

    async fn wait(
        &self,
        stop: &mut watch::Receiver<Option<Instant>>,
        due: Option<Instant>,
        deadline: Option<Instant>,
    ) {
        let until = [due, deadline].into_iter().flatten().min();
        let sleep = async {
            match until {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        if deadline.is_some() {
            tokio::select! {
                _ = self.shared.wake.notified() => {}
                _ = sleep => {}
            }
        } else {
            tokio::select! {
                _ = self.shared.wake.notified() => {}
                _ = sleep => {}
                _ = stop.wait_for(Option::is_some) => {}
            }
        }
    }

    async fn prepare(&self, session: &Session) -> Result<PreparedStatement, String> {
        let text = cql_text::statement(
            KEY_INDEX,
            "insert_key",
            &[("table", &self.shared.table.to_string())],
        );
        let mut statement = session.prepare(text).await.map_err(|e| e.to_string())?;
        statement.set_is_idempotent(true);
        statement.set_consistency(session::consistency(self.shared.consistency));
        Ok(statement)
    }

    async fn send(&self, session: &Session, statement: &PreparedStatement, entries: Vec<Entry>) {
        let results: Vec<(Entry, bool)> = futures_util::stream::iter(entries)
            .map(|entry| async move {
                let key = key_text(&entry.series);
                let family = self
                    .shared
                    .family_names
                    .read()
                    .get(usize::from(entry.family.0))
                    .cloned()
                    .unwrap_or_default();
                let bucket = bucket_of(&key, self.shared.buckets);
                let values = (family, CqlDate(entry.day.cql_date()), bucket, key);
                let result = session.execute_unpaged(statement, values).await;
                if let Err(error) = &result {
                    tracing::debug!(%error, attempts = entry.attempts, "A key index insert failed; it is sent again later.");
                }
                (entry, result.is_ok())
            })
            .buffer_unordered(IN_FLIGHT)
            .collect()
            .await;
        let now = Instant::now();
        let mut queue = self.shared.queue.lock();
        let writes = &self.shared.metrics.key_index_writes;
        for (entry, ok) in results {
            if ok {
                writes.with_label_values(&["applied"]).inc();
            } else {
                writes.with_label_values(&["retried"]).inc();
                queue.failed(entry, now);
            }
        }
        self.shared
            .metrics
            .key_index_pending
            .set(i64::try_from(queue.len()).unwrap_or(i64::MAX));
    }

    fn abandon(&self, why: &str) {
        let left = self.shared.queue.lock().abandon();
        self.shared.metrics.key_index_pending.set(0);
        if left > 0 {
            self.shared
                .metrics
                .key_index_writes
                .with_label_values(&["dropped"])
                .inc_by(left as u64);
            tracing::warn!(
                rows = left,
                reason = why,
                "Key index rows not written; their keys are missing from the index unless flushed again that day."
            );
        }
    }
}

/// Longest a key index drains after the final flush, within the shutdown's deadline.
const MAX_DRAIN: Duration = Duration::from_secs(5);

/// When a key index stopped after a final flush must have written what it queued: the
/// shutdown's deadline (`requested` plus `flush.shutdown_deadline`, the one the final
/// flush kept), and at most `MAX_DRAIN` (5 s) from now. Past the deadline already, now: what
/// is queued is counted as dropped.
pub fn drain_end(requested: Instant, shutdown_deadline: Duration) -> Instant {
    (requested + shutdown_deadline).min(Instant::now() + MAX_DRAIN)
}

/// The instant the drain ends, once `stop` names one (now, when its sender is gone).
fn drain_until(stop: &watch::Receiver<Option<Instant>>) -> Option<Instant> {
    match stop.has_changed() {
        Err(_) => Some((*stop.borrow()).unwrap_or_else(Instant::now)),
        Ok(_) => *stop.borrow(),
    }
}

/// Runs `work` until it ends, or until the drain ends first (the instant `stop` names,
/// or `deadline` once set): a store that takes a request and never answers must not
/// hold the shutdown. `None` when cut off.
async fn until_drained<T>(
    work: impl std::future::Future<Output = T>,
    stop: &mut watch::Receiver<Option<Instant>>,
    deadline: Option<Instant>,
) -> Option<T> {
    let end = async {
        let at = match deadline {
            Some(at) => at,
            None => match stop.wait_for(Option::is_some).await {
                Ok(at) => (*at).unwrap_or_else(Instant::now),
                // A dropped sender stops too.
                Err(_) => Instant::now(),
            },
        };
        tokio::time::sleep_until(at.into()).await;
    };
    tokio::select! {
        out = work => Some(out),
        () = end => None,
    }
}

impl FlushObserver for KeyIndex {
    fn planned(&self, writes: &[&dyn PlannedWrite]) {
        let mut days = Vec::new();
        let mut keys = Vec::with_capacity(writes.len());
        for write in writes {
            let table = write.table();
            days.clear();
            write.for_each_bucket(&mut |bucket| days.push(crate::bucket::day_of(table, bucket)));
            for day in days_of(table, days.drain(..)) {
                keys.push((write.family(), day, write.series()));
            }
        }
        self.offer_days(keys.into_iter());
    }
}

/// The days a write's rows fall on: a minute- or hour-table write is one partition, one
/// day; a day-table write's rows are days of one month; an all-time total has no day
/// (its keys are indexed by the family's other tables' writes, if it has any).
fn days_of(table: Granularity, mut days: impl Iterator<Item = Day>) -> Vec<Day> {
    match table {
        Granularity::Minute | Granularity::Hour => days.next().into_iter().collect(),
        Granularity::Day => days.collect(),
        Granularity::Total => Vec::new(),
    }
}

impl KeyIndex {
    /// Offers the (family, day, key) of planned writes to the queue.
    fn offer_days<'a>(&self, keys: impl Iterator<Item = (FamilyId, Day, &'a [u8])>) {
        let now = Instant::now();
        let (mut queued, mut dropped) = (0_usize, 0_u64);
        let mut queue = self.shared.queue.lock();
        for (family, day, series) in keys {
            match queue.offer(family, day, series, now) {
                Offer::Queued => queued += 1,
                Offer::Known => {}
                Offer::Dropped => dropped += 1,
            }
        }
        let pending = queue.len();
        drop(queue);
        self.shared
            .metrics
            .key_index_pending
            .set(i64::try_from(pending).unwrap_or(i64::MAX));
        if dropped > 0 {
            self.shared
                .metrics
                .key_index_writes
                .with_label_values(&["dropped"])
                .inc_by(dropped);
        }
        if queued > 0 {
            self.shared.wake.notify_one();
        }
    }
}

/// The index table of a configuration.
pub fn index_table(config: &Config) -> TableName {
    TableName::resolve(&config.key_index.table, &config.store.keyspace)
}

/// Every key `family` wrote on `day`, read from every bucket concurrently, sorted.
pub async fn keys_of_day(
    session: &Session,
    config: &Config,
    family: &str,
    day: Day,
    consistency: ConsistencyLevel,
) -> Result<Vec<Vec<String>>, ReadError> {
    let text = cql_text::statement(
        KEY_INDEX,
        "select_keys",
        &[("table", &index_table(config).to_string())],
    );
    let store_error = |e: &dyn std::fmt::Display| ReadError::Store {
        statement: text.clone(),
        error: e.to_string(),
    };
    let mut statement = session
        .prepare(text.clone())
        .await
        .map_err(|e| store_error(&e))?;
    statement.set_is_idempotent(true);
    statement.set_consistency(session::consistency(consistency));
    let reads = (0..config.key_index.buckets).map(|bucket| {
        let statement = &statement;
        async move {
            let mut pager = session
                .execute_iter(
                    statement.clone(),
                    (family, CqlDate(day.cql_date()), bucket as i16),
                )
                .await
                .map_err(|e| store_error(&e))?
                .rows_stream::<(String,)>()
                .map_err(|e| store_error(&e))?;
            let mut keys = Vec::new();
            while let Some(row) = pager.next().await {
                let (text,) = row.map_err(|e| store_error(&e))?;
                if let Some(values) = key_values(&text) {
                    keys.push(values);
                }
            }
            Ok::<_, ReadError>(keys)
        }
    });
    let mut keys: Vec<Vec<String>> = try_join_all(reads).await?.into_iter().flatten().collect();
    keys.sort();
    keys.dedup();
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The drain after the final flush ends at the shutdown's deadline, never after it,
    /// and at most [`MAX_DRAIN`] from now.
    #[test]
    fn the_drain_ends_within_the_shutdown_deadline() {
        let now = Instant::now();
        let past = now
            .checked_sub(Duration::from_secs(30))
            .expect("an instant back");
        assert!(
            drain_end(past, Duration::from_secs(20)) <= Instant::now(),
            "a final flush that took the whole deadline leaves the index none"
        );
        let end = drain_end(now, Duration::from_secs(3));
        assert!(end <= now + Duration::from_secs(3));
        let end = drain_end(now, Duration::from_secs(60));
        assert!(end <= Instant::now() + MAX_DRAIN);
    }

    /// A dropped sender ends the drain at once; a sender that named an instant, then.
    #[test]
    fn the_stop_signal_names_the_end() {
        let (stop, stopped) = watch::channel(None);
        assert_eq!(drain_until(&stopped), None);
        let at = Instant::now() + Duration::from_secs(2);
        stop.send(Some(at)).unwrap();
        assert_eq!(drain_until(&stopped), Some(at));
        drop(stop);
        assert_eq!(
            drain_until(&stopped),
            Some(at),
            "named before it was dropped"
        );
        let (stop, stopped) = watch::channel(None::<Instant>);
        drop(stop);
        assert!(drain_until(&stopped).is_some_and(|end| end <= Instant::now()));
    }

    #[test]
    fn keys_are_json_arrays_in_stable_buckets() {
        let series = series::encode(["api.calls", "route:/a,env:x"]);
        let text = key_text(&series);
        assert_eq!(text, r#"["api.calls","route:/a,env:x"]"#);
        assert_eq!(key_values(&text).unwrap(), ["api.calls", "route:/a,env:x"]);
        assert_eq!(bucket_of(&text, 16), bucket_of(&text, 16));
        assert!((0..16).contains(&bucket_of(&text, 16)));
        let spread: HashSet<i16> = (0..200)
            .map(|i| bucket_of(&key_text(&series::encode([format!("k{i}").as_str()])), 16))
            .collect();
        assert_eq!(spread.len(), 16, "200 keys reach every bucket");
    }

    #[test]
    fn a_key_is_queued_once_per_day_and_failures_back_off() {
        let now = Instant::now();
        let mut queue = IndexQueue::new(2);
        let (views, day) = (FamilyId(1), Day(20_000));
        assert_eq!(queue.offer(views, day, b"a", now), Offer::Queued);
        assert_eq!(queue.offer(views, day, b"a", now), Offer::Known);
        assert_eq!(queue.offer(views, Day(20_001), b"a", now), Offer::Queued);
        assert_eq!(queue.offer(views, day, b"b", now), Offer::Dropped);
        assert_eq!(
            queue.offer(views, day, b"b", now),
            Offer::Dropped,
            "a dropped key is offered again by the next flush"
        );
        let ready = queue.take_ready(now, 1);
        assert_eq!(ready.len(), 1);
        assert_eq!(queue.len(), 1);
        queue.failed(ready.into_iter().next().unwrap(), now);
        assert_eq!(queue.take_ready(now, 10).len(), 1, "the other one");
        assert!(queue.take_ready(now, 10).is_empty(), "the failed one waits");
        assert_eq!(queue.next_due(), Some(now + FIRST_BACKOFF));
        let retry = queue.take_ready(now + FIRST_BACKOFF, 10);
        assert_eq!(retry[0].attempts, 1);
        queue.failed(retry.into_iter().next().unwrap(), now);
        assert_eq!(queue.next_due(), Some(now + FIRST_BACKOFF * 2));
        assert_eq!(queue.offer(views, day, b"b", now), Offer::Queued);
        assert_eq!(queue.abandon(), 2);
    }

    #[test]
    fn remembered_keys_are_bounded_oldest_day_first() {
        let now = Instant::now();
        let mut queue = IndexQueue::new(1);
        for i in 0..10_u32 {
            assert_eq!(
                queue.offer(FamilyId(1), Day(100), &i.to_le_bytes(), now),
                Offer::Queued
            );
            queue.take_ready(now, 1);
        }
        assert_eq!(queue.offer(FamilyId(1), Day(101), b"x", now), Offer::Queued);
        queue.take_ready(now, 1);
        assert_eq!(
            queue.offer(FamilyId(1), Day(100), &0_u32.to_le_bytes(), now),
            Offer::Queued,
            "day 100 was forgotten to stay within ten times max_pending"
        );
    }

    /// Every kind of planned write feeds the index the same way: a counter write and a
    /// write of running totals each queue their (family, day, key) once per day their
    /// rows fall on, and an all-time total queues none.
    #[test]
    fn the_keys_of_every_kind_of_planned_write_are_queued() {
        use crate::aggregate::Columns;
        use crate::sink::{PartitionWrite, RowDelta, TotalRow, TotalsWrite};
        let config = Config::default();
        let families = Families::from_config(&config).unwrap();
        let index = KeyIndex::new(&config, &families, OperationsMetrics::default());
        let minute = crate::bucket::Minute::from_unix_secs(1_700_000_000).unwrap();
        let counter = PartitionWrite {
            epoch: None,
            family: FamilyId(0),
            table: Granularity::Minute,
            series: crate::series::encode(["a"]).into_boxed_slice(),
            shard: None,
            rows: vec![RowDelta {
                bucket: minute.0,
                columns: Columns::zeroed(1),
                requeued_since: 0,
            }],
        };
        let day = minute.day();
        let totals = |table: Granularity, buckets: &[u32]| TotalsWrite {
            family: FamilyId(0),
            table,
            series: crate::series::encode(["b"]).into_boxed_slice(),
            writer: "w".into(),
            timestamp: 1,
            rows: buckets
                .iter()
                .map(|&bucket| TotalRow {
                    bucket,
                    totals: Columns::zeroed(1),
                })
                .collect(),
        };
        index.planned(&crate::sink::planned(std::slice::from_ref(&counter)));
        index.planned(&crate::sink::planned(&[
            totals(Granularity::Day, &[day.0, day.0 + 1]),
            totals(Granularity::Total, &[0]),
        ]));
        let queued: Vec<(FamilyId, Day, String)> = index
            .shared
            .queue
            .lock()
            .take_ready(Instant::now() + Duration::from_secs(3600), 100)
            .into_iter()
            .map(|e| (e.family, e.day, key_text(&e.series)))
            .collect();
        let mut expected = vec![
            (FamilyId(0), day, key_text(&counter.series)),
            (FamilyId(0), day, key_text(&crate::series::encode(["b"]))),
            (
                FamilyId(0),
                Day(day.0 + 1),
                key_text(&crate::series::encode(["b"])),
            ),
        ];
        let mut queued = queued;
        queued.sort();
        expected.sort();
        assert_eq!(queued, expected);
    }
}
