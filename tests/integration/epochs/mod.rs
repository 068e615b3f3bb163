//! Resets by epoch: every writer puts a row into the epoch of its minute, whenever it
//! flushes; a writer whose view of the registry does not cover a minute holds its rows
//! and never writes them to the epoch before. Here: the helpers (a family reset by epochs,
//! writers on the test's clock, the store's rows split at a reset, a reset the writer has
//! not read); beside it, `writers.rs` (writers and the sidecar following the registry,
//! unreachable or not), `tools.rs` (`reset`, `migrate` and leaderboards on a family reset
//! by epochs) and `durable.rs` (durable rows the registry cannot place, across kills).

use countersink::vocabulary::Transport;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use countersink::config::{Config, FamilyConfig};
use countersink::epoch::{EpochRegistry, registry};
use countersink::telemetry::OperationsMetrics;
use cqlsim::{FaultKind, FaultRule, Target};

use crate::common::{
    Store, T0, Writer, cli_stdout, config, day_and_minute, start_cqlsim, start_store,
};

mod durable;
mod tools;
mod writers;

/// A family reset by epochs: plays per track.
fn with_plays(config: &mut Config) {
    config.families.push(FamilyConfig {
        name: "plays".into(),
        minute_table: "metrics.plays_by_minute".into(),
        day_table: "metrics.plays_by_day".into(),
        key: vec!["track".into()],
        columns: [("track.plays".to_string(), "plays".to_string())].into(),
        epoch_column: Some("epoch".into()),
        ..FamilyConfig::default()
    });
}

/// A writer following the registry, its reads on the test's clock.
async fn writer(config: &Config, name: &str, now: i64) -> (Writer, Arc<EpochRegistry>) {
    let mut c = config.clone();
    c.state.dir = config.state.dir.join(name);
    c.state.writer_id = Some(name.into());
    let mut writer = Writer::start(&c).await;
    let registry = EpochRegistry::new(
        &c,
        writer.engine.families(),
        &OperationsMetrics::default(),
        now,
    )
    .expect("an epoch family");
    writer.flusher.place_epochs(registry.clone());
    (writer, registry)
}

/// `delta` plays of track `x` at client time `at`, received at `now`.
fn play(writer: &Writer, delta: i64, at: i64, now: i64) {
    writer
        .engine
        .record("track.plays", &[("track", "x")][..], delta, now, Some(at))
        .expect("recorded");
}

/// (epoch, Unix minute) → plays, of the minute table; (epoch) → plays of the day table.
async fn rows(store: &Store, config: &Config) -> (BTreeMap<(i64, i64), i64>, BTreeMap<i64, i64>) {
    let family = config.families.iter().find(|f| f.name == "plays").unwrap();
    let minutes = store
        .select(&format!(
            "SELECT epoch, day, minute, plays FROM {}",
            family.minute_table
        ))
        .await;
    let mut by_minute = BTreeMap::new();
    for i in 0..minutes.len() {
        let day = match minutes.get(i, "day") {
            Some(scylla::value::CqlValue::Date(d)) => i64::from(d.0) - (1_i64 << 31),
            other => panic!("day {other:?}"),
        };
        let minute = day * 1440 + minutes.get_i64(i, "minute").unwrap();
        let epoch = minutes.get_i64(i, "epoch").unwrap();
        *by_minute.entry((epoch, minute)).or_default() += minutes.get_i64(i, "plays").unwrap();
    }
    let days = store
        .select(&format!("SELECT epoch, plays FROM {}", family.day_table))
        .await;
    let mut by_epoch = BTreeMap::new();
    for i in 0..days.len() {
        *by_epoch
            .entry(days.get_i64(i, "epoch").unwrap())
            .or_default() += days.get_i64(i, "plays").unwrap();
    }
    (by_minute, by_epoch)
}

/// What a reset splits `fed` (Unix minute → plays) into: the rows of the minute table
/// ((epoch, minute) → plays), each minute before `start` in epoch 0 and each from it on in
/// epoch `start`; and of the day table (epoch → plays).
#[allow(clippy::type_complexity)]
fn split_at_reset(
    fed: &BTreeMap<i64, i64>,
    start: i32,
) -> (BTreeMap<(i64, i64), i64>, BTreeMap<i64, i64>) {
    let s = i64::from(start);
    let minutes = fed
        .iter()
        .map(|(&m, &v)| (((if m < s { 0 } else { s }), m), v))
        .collect();
    let days = BTreeMap::from([
        (0, fed.range(..s).map(|(_, v)| v).sum::<i64>()),
        (s, fed.range(s..).map(|(_, v)| v).sum::<i64>()),
    ]);
    (minutes, days)
}

/// Asserts that the store holds `fed` split at the reset `start` ([`split_at_reset`]).
async fn assert_split_at_reset(
    store: &Store,
    config: &Config,
    fed: &BTreeMap<i64, i64>,
    start: i32,
) {
    assert_eq!(
        rows(store, config).await,
        split_at_reset(fed, start),
        "each minute in the epoch of its minute, in both tables"
    );
}

/// A reset the writer has not read: writer `a` reads the registry at `T0 - 3600` (the
/// minute `first`), a reset of `plays` is then scheduled `ahead` seconds later (at the
/// minute `start`), and from then on every request to the registry fails.
struct ResetUnread {
    config: Config,
    store: Store,
    writer: Writer,
    registry: Arc<EpochRegistry>,
    first: i64,
    start: i32,
}

async fn reset_unread(dir: &Path, ahead: i64) -> ResetUnread {
    let mut config = config(dir);
    with_plays(&mut config);
    let store = start_cqlsim(&mut config, "injects faults on the epoch registry").await;
    let t0 = T0 - 3600;
    let (writer, registry) = writer(&config, "a", t0).await;
    // The writer's last good read is from before the reset was written.
    registry
        .refresh_at(&writer.session, writer.engine.families(), t0)
        .await
        .unwrap();
    let start = countersink::epoch::reset::start_minute(t0 + 1, 60, Some(t0 + ahead)).unwrap();
    registry::schedule(&writer.session, &config, "plays", "", start, "test", t0 + 1)
        .await
        .unwrap();
    store.sim().add_fault(
        FaultRule::new(FaultKind::Unavailable)
            .table("epochs")
            .target(Target::All),
    );
    ResetUnread {
        config,
        store,
        writer,
        registry,
        first: t0 / 60,
        start,
    }
}
