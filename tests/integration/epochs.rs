//! Resets by epoch: every writer puts a row into the epoch of its minute, whenever it
//! flushes; a writer whose view of the registry does not cover a minute holds its rows
//! and never writes them to the epoch before.

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

/// A stop asked while a read of the registry waits on a store that does not answer ends
/// the reading task at once: a shutdown does not wait out the driver's request timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_ends_a_registry_read_the_store_does_not_answer() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    with_plays(&mut config);
    config.store.request_timeout = std::time::Duration::from_secs(30);
    let store = start_cqlsim(&mut config, "holds the registry's replies").await;
    let (writer, registry) = writer(&config, "a", T0).await;
    store.sim().add_fault(
        FaultRule::new(FaultKind::NoReply)
            .table("epochs")
            .target(Target::All),
    );
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(registry.clone().run(
        writer.session.clone(),
        writer.engine.clone(),
        stopped,
    ));
    // The first read is under way, unanswered (no view yet: it did not complete).
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!task.is_finished());
    assert!(registry.view().is_none(), "the read must still be waiting");
    stop.send(true).unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(5), task)
        .await
        .expect("the task ends at the stop, not at the request timeout")
        .unwrap();
    store.shutdown().await;
}

/// Two writers, client timestamps on both sides of a reset: each minute before it only in
/// the old epoch, each minute from it on only in the new one, for both writers, totals
/// exact in both tables; rows past what a writer's read of the registry covers wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_writers_straddling_a_reset_put_each_minute_in_one_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    with_plays(&mut config);
    let store = start_store(&mut config).await;
    // 22:58:00 on the test's clock; the reset starts at 23:01.
    let t0 = T0 - 3600;
    let first = t0 / 60;
    let start = countersink::epoch::reset::start_minute(t0, 60, Some(t0 + 180)).unwrap();
    assert_eq!(i64::from(start), first + 3);
    let (mut a, reg_a) = writer(&config, "a", t0).await;
    let (mut b, reg_b) = writer(&config, "b", t0).await;
    registry::schedule(&a.session, &config, "plays", "", start, "test", t0)
        .await
        .expect("the reset is written");
    for (reg, w) in [(&reg_a, &a), (&reg_b, &b)] {
        reg.refresh_at(&w.session, w.engine.families(), t0 + 1)
            .await
            .unwrap();
    }

    // Minutes first-0 .. first+4: three before the reset, two from it on.
    let mut fed: BTreeMap<i64, i64> = BTreeMap::new();
    for (i, w) in [&a, &b].into_iter().enumerate() {
        for m in first..=first + 4 {
            let delta = (i as i64 + 1) * 100 + (m - first);
            play(w, delta, m * 60 + 10, t0 + 1);
            *fed.entry(m).or_default() += delta;
        }
    }
    a.flusher.flush_now().await;
    b.flusher.flush_now().await;
    // Read at t0+1: covered up to t0+56, so only minute `first` is placed.
    assert_eq!(
        reg_a.held() + reg_b.held(),
        8,
        "four rows of each writer wait"
    );
    let (minutes, _) = rows(&store, &config).await;
    assert_eq!(
        minutes.keys().copied().collect::<Vec<_>>(),
        [(0, first)],
        "nothing past what the registry read covers is written"
    );

    // Later reads (the test's clock at 23:01:30) cover every minute fed.
    let later = i64::from(start) * 60 + 30;
    for (reg, w) in [(&reg_a, &a), (&reg_b, &b)] {
        reg.refresh_at(&w.session, w.engine.families(), later)
            .await
            .unwrap();
    }
    a.flusher.flush_now().await;
    b.flusher.flush_now().await;
    let (minutes, days) = rows(&store, &config).await;
    let (expected_minutes, expected_days) = split_at_reset(&fed, start);
    assert_eq!(
        minutes, expected_minutes,
        "each minute in exactly one epoch, exact"
    );
    assert_eq!(days, expected_days, "the day splits at the reset");
    let (before, after) = (expected_days[&0], expected_days[&i64::from(start)]);
    for w in [&a, &b] {
        let accounting = w.accounting();
        assert!(accounting.is_balanced(), "{accounting:?}");
        assert_eq!(
            (accounting.minute.pending, accounting.day.pending),
            (0, 0),
            "nothing left pending"
        );
    }

    // `get` reads an epoch; by default the one in force at the end of the day.
    let file = dir.path().join("c.toml");
    std::fs::write(
        &file,
        store.config_file(
            "[[family]]\nname = \"plays\"\nminute_table = \"metrics.plays_by_minute\"\nday_table = \"metrics.plays_by_day\"\nkey = [\"track\"]\nepoch_column = \"epoch\"\n[family.columns]\n\"track.plays\" = \"plays\"\n",
        ),
    )
    .unwrap();
    let (day, _) = day_and_minute(t0);
    let file = file.display().to_string();
    let get = |extra: &[&str]| {
        let mut args = vec![
            "get",
            "--config",
            &file,
            "track.plays",
            "--tag",
            "track:x",
            "--day",
            &day,
        ];
        args.extend_from_slice(extra);
        cli_stdout(args).trim().to_owned()
    };
    assert_eq!(get(&["--epoch", "0"]), before.to_string());
    assert_eq!(get(&["--epoch", &start.to_string()]), after.to_string());
    assert_eq!(get(&[]), after.to_string(), "default: the epoch in force");
    store.shutdown().await;
}

/// A registry that cannot be read: rows past what the last read covers are held (never
/// written to the epoch before the reset), counted, and written to the right epoch once
/// it answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_registry_holds_rows_and_never_writes_the_old_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let ResetUnread {
        config,
        store,
        writer: mut w,
        registry: reg,
        first,
        start,
    } = reset_unread(dir.path(), 180).await;
    let later = i64::from(start) * 60 + 90;
    assert!(
        reg.refresh_at(&w.session, w.engine.families(), later)
            .await
            .is_err(),
        "the registry does not answer"
    );
    reg.update_age(later);

    let mut fed: BTreeMap<i64, i64> = BTreeMap::new();
    for m in first..=first + 4 {
        play(&w, m - first + 1, m * 60 + 5, later);
        *fed.entry(m).or_default() += m - first + 1;
    }
    for _ in 0..3 {
        w.flusher.flush_now().await;
    }
    let (minutes, _) = rows(&store, &config).await;
    assert_eq!(
        minutes,
        BTreeMap::from([((0, first), 1)]),
        "only the minute the old read covers is written; nothing reaches epoch 0 past it"
    );
    assert_eq!(reg.held(), 3 * 4, "four rows held by each of three flushes");
    let accounting = w.accounting();
    assert!(accounting.is_balanced(), "{accounting:?}");
    assert_eq!(
        accounting.minute.pending,
        i128::from(fed.values().sum::<i64>() - 1),
        "held rows are pending, not lost"
    );

    store.sim().clear_faults();
    reg.refresh_at(&w.session, w.engine.families(), later)
        .await
        .unwrap();
    w.flusher.flush_now().await;
    assert_split_at_reset(&store, &config, &fed, start).await;
    store.shutdown().await;
}

/// `countersink reset`: refuses a start inside the lead and a family without an epoch
/// column; writes a whole-family epoch at the first whole minute a lead ahead, and a
/// per-key one with the key's values as its scope.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_schedules_epochs_a_lead_ahead_and_refuses_earlier_ones() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    with_plays(&mut config);
    let store = start_store(&mut config).await;
    let file = dir.path().join("c.toml");
    std::fs::write(
        &file,
        store.config_file(
            "[store]\nrequest_timeout = \"3s\"\n\n[[family]]\nname = \"plays\"\nminute_table = \"metrics.plays_by_minute\"\nday_table = \"metrics.plays_by_day\"\nkey = [\"track\"]\nepoch_column = \"epoch\"\n[family.columns]\n\"track.plays\" = \"plays\"\n\n[[family]]\nname = \"views\"\nminute_table = \"metrics.views_by_minute\"\nday_table = \"metrics.views_by_day\"\nkey = [\"page_id\"]\n[family.columns]\n\"page.views\" = \"views\"\n",
        ),
    )
    .unwrap();
    let file = file.display().to_string();
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
    };
    // The start of the current minute: a whole minute, so no rounding moves it past the
    // lead.
    let soon = time::OffsetDateTime::from_unix_timestamp(now() / 60 * 60)
        .unwrap()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let early = crate::common::run_cli(["reset", "plays", "--config", &file, "--at", &soon]);
    assert_eq!(early.status.code(), Some(2), "{early:?}");
    assert!(String::from_utf8_lossy(&early.stderr).contains("before now + epochs.lead"));
    let views = crate::common::run_cli(["reset", "views", "--config", &file]);
    assert_eq!(views.status.code(), Some(2), "{views:?}");
    assert!(String::from_utf8_lossy(&views.stderr).contains("no epoch_column"));

    let asked = now();
    let whole = crate::common::run_cli(["reset", "plays", "--config", &file, "--reason", "t"]);
    assert!(whole.status.success(), "{whole:?}");
    let key = crate::common::run_cli(["reset", "plays", "--config", &file, "--tag", "track:x"]);
    assert!(key.status.success(), "{key:?}");
    let table = countersink::ddl::epochs_table(&config);
    let rows = store
        .select(&format!(
            "SELECT scope, start_minute, reason FROM {table} WHERE family = 'plays'"
        ))
        .await;
    assert_eq!(rows.len(), 2);
    // The default start leaves the write its request timeout (3 s in the file, and a
    // second) beyond the lead, then rounds up to a whole minute.
    let room = 3 + 1;
    for i in 0..rows.len() {
        let start = rows.get_i64(i, "start_minute").unwrap() * 60;
        assert!(
            start >= asked + 60 + room && start < now() + 120 + room,
            "a whole minute at least the lead and the write's room ahead: {start} vs {asked}"
        );
    }
    let scopes: Vec<&str> = (0..rows.len())
        .map(|i| rows.text(i, "scope").unwrap())
        .collect();
    assert_eq!(scopes, ["", "[\"x\"]"]);
    store.shutdown().await;
}

/// A stop while the registry is unreachable: the final flush spills the rows it cannot
/// place (nothing lost, nothing in the old epoch), and the next start, reading the
/// registry, replays them into the epoch of their minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_held_at_shutdown_are_spilled_and_placed_by_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let ResetUnread {
        config,
        store,
        writer: w,
        first,
        start,
        ..
    } = reset_unread(dir.path(), 120).await;
    let now = i64::from(start) * 60 + 90;
    let mut fed: BTreeMap<i64, i64> = BTreeMap::new();
    for m in first..=first + 3 {
        play(&w, 10 + m - first, m * 60 + 1, now);
        *fed.entry(m).or_default() += 10 + m - first;
    }
    let Writer {
        flusher,
        engine,
        ledger,
        ..
    } = w;
    flusher.finish().await;
    let accounting = countersink::telemetry::Accounting::read(&engine, &ledger);
    assert!(accounting.is_balanced(), "{accounting:?}");
    assert_eq!(
        (
            accounting.minute.pending,
            accounting.minute.applied,
            accounting.minute.spilled
        ),
        (0, 10, 11 + 12 + 13),
        "the minute the old read covers is written, the rest spilled, none pending"
    );
    let (minutes, _) = rows(&store, &config).await;
    assert_eq!(minutes, BTreeMap::from([((0, first), 10)]));
    let spilled = crate::common::spilled_records(&config.state.dir.join("a"));
    assert!(
        spilled
            .iter()
            .any(|r| r["granularity"] == "day" && r["minute"].is_i64()),
        "a held day row keeps the minute that decides its epoch: {spilled:?}"
    );

    store.sim().clear_faults();
    let (mut again, reg) = writer(&config, "a", now).await;
    reg.refresh_at(&again.session, again.engine.families(), now)
        .await
        .unwrap();
    again.flusher.flush_now().await;
    again.flusher.flush_now().await;
    assert_split_at_reset(&store, &config, &fed, start).await;
    store.shutdown().await;
}

/// The sidecar on the wall clock: its registry timer reads the registry, a line of now is
/// written to epoch 0 at once, a line stamped three minutes ahead is held (counted, the
/// view's age shown) and, at shutdown, spilled rather than lost or guessed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sidecar_follows_the_registry_and_holds_lines_from_the_future() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::common::sidecar_config(dir.path());
    with_plays(&mut config);
    config.flush.interval = std::time::Duration::from_millis(300);
    config.flush.jitter = std::time::Duration::ZERO;
    config.epochs.refresh_interval = std::time::Duration::from_secs(1);
    let store = start_store(&mut config).await;
    let sidecar = crate::common::start_sidecar(&config).await;
    let bound = sidecar.bound();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let ahead = now + 180;
    for line in [
        "track.plays:5|c|#track:x".to_owned(),
        format!("track.plays:7|c|#track:x|T{ahead}"),
    ] {
        udp.send_to(line.as_bytes(), bound.inet(Transport::Udp).unwrap())
            .unwrap();
    }
    let metrics = crate::common::metrics_when(bound.metrics.unwrap(), |text| {
        text.lines()
            .any(|l| l.starts_with("countersink_epoch_rows_held_total ") && !l.ends_with(" 0"))
    })
    .await;
    let age: i64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("countersink_epoch_registry_age_seconds "))
        .and_then(|v| v.trim().parse().ok())
        .expect("the age gauge");
    let elapsed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
        - now;
    assert!(
        (0..=elapsed + 1).contains(&age),
        "the view is one the timer read after the start: {age}s, {elapsed}s since"
    );
    let mut written = BTreeMap::new();
    for _ in 0..100 {
        written = rows(&store, &config).await.0;
        if !written.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        written
            .into_iter()
            .map(|((e, _), v)| (e, v))
            .collect::<Vec<_>>(),
        [(0, 5)],
        "the line of now is in epoch 0; the one from the future is not written"
    );
    sidecar.shutdown().await;
    let spilled = crate::common::spilled_records(&config.state.dir);
    let held: Vec<_> = spilled
        .iter()
        .filter(|r| {
            r["request_id"]
                .as_str()
                .is_some_and(|id| id.ends_with("/held"))
        })
        .collect();
    assert_eq!(held.len(), 2, "its minute row and its day row: {spilled:?}");
    assert!(held.iter().all(|r| r["deltas"]["plays"] == 7));
    assert_eq!(rows(&store, &config).await.0.values().sum::<i64>(), 5);
    store.shutdown().await;
}

/// `migrate` of a family with an epoch column (issue: operator tools on epoch families):
/// the source holds rows on both sides of a reset; the copy puts each epoch's partitions
/// into the same epoch of the target, copies the registry's rows, and `--verify-only`
/// finds the two equal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_copies_each_epoch_and_the_registry() {
    let dir = tempfile::tempdir().unwrap();
    let mut source = config(&dir.path().join("source"));
    with_plays(&mut source);
    let source_store = start_cqlsim(&mut source, "needs two stores, a source and a target").await;
    let mut target = config(&dir.path().join("target"));
    with_plays(&mut target);
    let target_store = start_cqlsim(&mut target, "needs two stores, a source and a target").await;
    let t0 = T0 - 3600;
    let first = t0 / 60;
    let start = countersink::epoch::reset::start_minute(t0, 60, Some(t0 + 180)).unwrap();
    let (mut w, reg) = writer(&source, "a", t0).await;
    registry::schedule(&w.session, &source, "plays", "", start, "a test reset", t0)
        .await
        .unwrap();
    reg.refresh_at(&w.session, w.engine.families(), i64::from(start) * 60 + 30)
        .await
        .unwrap();
    let mut fed: BTreeMap<i64, i64> = BTreeMap::new();
    // Five minutes, the last two from the reset on (the registry's read covers them).
    for m in first..=first + 4 {
        play(&w, m - first + 1, m * 60 + 10, t0 + 1);
        *fed.entry(m).or_default() += m - first + 1;
    }
    w.flusher.flush_now().await;
    assert_split_at_reset(&source_store, &source, &fed, start).await;

    let plays = "[generic]\nenabled = false\n[[family]]\nname = \"plays\"\nminute_table = \"metrics.plays_by_minute\"\nday_table = \"metrics.plays_by_day\"\nkey = [\"track\"]\nepoch_column = \"epoch\"\n[family.columns]\n\"track.plays\" = \"plays\"\n";
    let (from, to) = (dir.path().join("from.toml"), dir.path().join("to.toml"));
    std::fs::write(&from, source_store.config_file(plays)).unwrap();
    std::fs::write(&to, target_store.config_file(plays)).unwrap();
    let (from, to) = (from.display().to_string(), to.display().to_string());
    let args = [
        "migrate",
        "--from",
        &from,
        "--to",
        &to,
        "--family",
        "plays",
        "--quiet-period",
        "1s",
    ];
    let out = crate::common::run_cli(args);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_split_at_reset(&target_store, &target, &fed, start).await;
    let copied = registry::rows_of(
        &countersink::sink::cql::CqlSink::connect(
            &target.store,
            &countersink::family::Families::from_config(&target).unwrap(),
        )
        .await
        .unwrap()
        .session()
        .clone(),
        &target,
        "plays",
    )
    .await
    .unwrap();
    assert_eq!(
        copied
            .iter()
            .map(|r| (r.scope.as_str(), r.start_minute, r.reason.as_str()))
            .collect::<Vec<_>>(),
        [("", start, "a test reset")],
        "the registry's row is in the target's registry"
    );
    let verify = crate::common::run_cli([&args[..], &["--verify-only"]].concat());
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
    source_store.shutdown().await;
    target_store.shutdown().await;
}

/// Leaderboards on a family with an epoch column: a reset in the middle of the day starts
/// a ranking of its own (`YYYY-MM-DD@epoch`), exact and ordered from the reset on, and
/// the ranking of the epoch before stays readable (`--epoch 0`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_starts_a_ranking_of_its_own_and_the_old_one_stays_readable() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    with_plays(&mut config);
    config.key_index.enabled = true;
    config
        .leaderboards
        .push(countersink::config::LeaderboardConfig {
            name: "top_tracks".into(),
            family: "plays".into(),
            column: "plays".into(),
            top: 10,
            ..Default::default()
        });
    let store = start_cqlsim(&mut config, "reads the key index and the rankings it wrote").await;
    let t0 = T0 - 3600;
    let first = t0 / 60;
    let start = countersink::epoch::reset::start_minute(t0, 60, Some(t0 + 180)).unwrap();
    let (mut w, reg) = writer(&config, "a", t0).await;
    let index = countersink::ops::keyindex::KeyIndex::new(
        &config,
        w.engine.families(),
        OperationsMetrics::default(),
    );
    index.set_session(w.session.clone());
    w.flusher.observe(Arc::new(index.clone()));
    let (_stop, stopped) = tokio::sync::watch::channel(None);
    tokio::spawn(index.clone().run(stopped));
    registry::schedule(&w.session, &config, "plays", "", start, "test", t0)
        .await
        .unwrap();
    reg.refresh_at(&w.session, w.engine.families(), i64::from(start) * 60 + 30)
        .await
        .unwrap();
    let plays = |track: &str, delta: i64, minute: i64| {
        w.engine
            .record(
                "track.plays",
                &[("track", track)][..],
                delta,
                t0 + 1,
                Some(minute * 60 + 5),
            )
            .unwrap();
    };
    // Before the reset: a 5, b 3, c 1. From it on: b 4, c 2, a 1.
    for (track, delta) in [("a", 5), ("b", 3), ("c", 1)] {
        plays(track, delta, first);
    }
    for (track, delta) in [("b", 4), ("c", 2), ("a", 1)] {
        plays(track, delta, i64::from(start));
    }
    w.flusher.flush_now().await;
    for _ in 0..200 {
        if index.pending() == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(index.pending(), 0, "the key index holds the tracks");

    let file = dir.path().join("board.toml");
    std::fs::write(
        &file,
        store.config_file(
            "[key_index]\nenabled = true\n\n[[family]]\nname = \"plays\"\nminute_table = \"metrics.plays_by_minute\"\nday_table = \"metrics.plays_by_day\"\nkey = [\"track\"]\nepoch_column = \"epoch\"\n[family.columns]\n\"track.plays\" = \"plays\"\n\n[[leaderboard]]\nname = \"top_tracks\"\nfamily = \"plays\"\ncolumn = \"plays\"\ntop = 10\n",
        ),
    )
    .unwrap();
    let (day, _) = day_and_minute(t0);
    let file = file.display().to_string();
    let run = |extra: &[&str]| {
        let out = cli_stdout(
            [
                &[
                    "leaderboard",
                    "run",
                    "--once",
                    "--config",
                    file.as_str(),
                    "--day",
                    &day,
                ][..],
                extra,
            ]
            .concat(),
        );
        out.trim().to_owned()
    };
    let ranked = run(&[]);
    assert!(ranked.contains(&format!("@{start}")), "{ranked}");
    let ranked_old = run(&["--epoch", "0"]);
    assert!(ranked_old.contains("@0"), "{ranked_old}");
    let top = |extra: &[&str]| -> Vec<(String, i64)> {
        let text = cli_stdout(
            [
                &[
                    "top",
                    "top_tracks",
                    "--config",
                    file.as_str(),
                    "--day",
                    &day,
                    "--format",
                    "json",
                ][..],
                extra,
            ]
            .concat(),
        );
        let ranking: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        ranking["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["key"][0].as_str().unwrap().to_owned(),
                    e["score"].as_i64().unwrap(),
                )
            })
            .collect()
    };
    let own = |v: &[(&str, i64)]| {
        v.iter()
            .map(|(k, s)| (k.to_string(), *s))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        top(&[]),
        own(&[("b", 4), ("c", 2), ("a", 1)]),
        "the epoch in force: counted from the reset on"
    );
    assert_eq!(
        top(&["--epoch", "0"]),
        own(&[("a", 5), ("b", 3), ("c", 1)]),
        "the epoch before the reset, still readable"
    );
    store.shutdown().await;
}

/// Writer `a` of the plays family with a durable HTTP listener (`tune` may change the
/// configuration first), on cqlsim, its epoch registry read an hour before [`T0`]: the
/// set-up of the held-row tests. Also returns the writer's registry and the minute of that read.
async fn durable_writer_read_at_hour_before(
    dir: &Path,
    tune: impl FnOnce(&mut Config),
) -> (Config, Store, Writer, Arc<EpochRegistry>, i64) {
    let mut config = config(dir);
    with_plays(&mut config);
    config.ingest.http.enabled = true;
    config.ingest.http.durable = true;
    tune(&mut config);
    let store = start_cqlsim(&mut config, "a writer killed and started again").await;
    let t0 = T0 - 3600;
    let (w, reg) = started_with_read_at(&config, t0).await;
    (config, store, w, reg, t0 / 60)
}

/// Writer `a` started (again) at `at`, its registry read then.
async fn started_with_read_at(config: &Config, at: i64) -> (Writer, Arc<EpochRegistry>) {
    let (w, reg) = writer(config, "a", at).await;
    reg.refresh_at(&w.session, w.engine.families(), at)
        .await
        .unwrap();
    (w, reg)
}

/// Appends durable increments of `track.plays` (track `x`), (minute, delta) each, to the
/// writer's ingest log, as an answered request leaves them.
fn log_plays(writer: &Writer, plays: &[(i64, i64)]) {
    let mut lines = Vec::new();
    for &(minute, delta) in plays {
        countersink::state::ingest_log::IngestEntry::write_line(
            &mut lines,
            "track.plays",
            &[("track", "x")],
            delta,
            u32::try_from(minute).unwrap(),
        );
    }
    let log = writer.flusher.ingest_log().expect("a durable listener");
    log.append(&lines).expect("logged");
}

/// Acknowledged increments whose epoch the registry's last read cannot place when the
/// ingest log replays them stay on disk: a kill (the writer dropped without its final
/// flush) before the registry covers them loses none of them, whether they waited at
/// the end of the spill or were carried past rows sent behind them; the next start
/// places each in the epoch of its minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_rows_the_registry_cannot_place_survive_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let (config, store, mut w, reg, first) =
        durable_writer_read_at_hour_before(dir.path(), |_| {}).await;
    // Minute `first` is covered by the read; `first + 10` is not.
    let ahead = first + 10;
    log_plays(&w, &[(first, 5), (ahead, 7)]);
    w.flusher.flush_now().await;
    assert_eq!(
        rows(&store, &config).await.0,
        BTreeMap::from([((0, first), 5)]),
        "the covered minute is written, the other waits"
    );
    // More acknowledged increments behind the held one: they are sent, the held one is
    // carried past them.
    log_plays(&w, &[(first - 1, 3)]);
    w.flusher.flush_now().await;
    w.flusher.flush_now().await;
    assert_eq!(
        rows(&store, &config).await.0,
        BTreeMap::from([((0, first - 1), 3), ((0, first), 5)]),
        "rows behind a held one are not stuck behind it"
    );
    assert!(reg.held() > 0, "the row was held");
    let spilled = crate::common::spilled_records(&config.state.dir.join("a"));
    assert!(
        spilled
            .iter()
            .any(|r| r["granularity"] == "minute" && r["deltas"]["plays"] == 7),
        "the held row is on disk: {spilled:?}"
    );
    let accounting = w.accounting();
    assert!(accounting.is_balanced(), "{accounting:?}");
    assert_eq!(
        (accounting.minute.pending, accounting.minute.spilled),
        (0, 7),
        "the held row is spilled, not pending in memory"
    );
    drop(w);

    // The next start's read covers the minute.
    let (mut again, _) = started_with_read_at(&config, ahead * 60 + 30).await;
    again.flusher.flush_now().await;
    again.flusher.flush_now().await;
    let (minutes, days) = rows(&store, &config).await;
    assert_eq!(
        minutes,
        BTreeMap::from([((0, first - 1), 3), ((0, first), 5), ((0, ahead), 7)]),
        "every acknowledged increment written once, in the epoch of its minute"
    );
    assert_eq!(days, BTreeMap::from([(0, 15)]));
    let accounting = again.accounting();
    assert!(accounting.is_balanced(), "{accounting:?}");
    store.shutdown().await;
}

/// A run of rows the registry cannot place that is longer than one replay chunk (a
/// budget of a few rows): the first chunk of it is carried, the rest is read again by
/// later rounds, never passed by the cursor while neither sent nor on disk; a kill
/// then loses none of it, and the accounting balances all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_run_longer_than_a_chunk_stays_on_disk_whole() {
    let dir = tempfile::tempdir().unwrap();
    // Room for 8 rows: a replay chunk takes at most 4.
    let (config, store, mut w, _, first) =
        durable_writer_read_at_hour_before(dir.path(), |c| c.limits.max_pending_rows = 8).await;
    // Ten minutes the read does not cover: twenty held rows (minute and day each).
    let ahead: Vec<(i64, i64)> = (0..10).map(|i| (first + 10 + i, 1 + i)).collect();
    let held_sum: i64 = ahead.iter().map(|(_, d)| d).sum();
    let mut plays = vec![(first, 5)];
    plays.extend(&ahead);
    log_plays(&w, &plays);
    w.flusher.flush_now().await;
    // Rows behind the held run: sent once the rounds carried the run past them.
    log_plays(&w, &[(first - 1, 3)]);
    for _ in 0..12 {
        w.flusher.flush_now().await;
        let accounting = w.accounting();
        assert!(accounting.is_balanced(), "{accounting:?}");
    }
    assert_eq!(
        rows(&store, &config).await.0,
        BTreeMap::from([((0, first - 1), 3), ((0, first), 5)]),
        "the placeable rows are written, the held ones wait"
    );
    let accounting = w.accounting();
    assert_eq!(
        (accounting.minute.pending, accounting.minute.spilled),
        (0, i128::from(held_sum)),
        "every held row is spilled, none in memory or lost: {accounting:?}"
    );
    let spilled = crate::common::spilled_records(&config.state.dir.join("a"));
    let on_disk: i64 = spilled
        .iter()
        .filter(|r| r["granularity"] == "minute")
        .filter_map(|r| r["deltas"]["plays"].as_i64())
        .sum();
    assert_eq!(
        on_disk, held_sum,
        "the held minute rows on disk: {spilled:?}"
    );
    drop(w);

    // The next start's read covers them all.
    let (mut again, _) = started_with_read_at(&config, (first + 20) * 60 + 30).await;
    for _ in 0..12 {
        again.flusher.flush_now().await;
    }
    let (minutes, days) = rows(&store, &config).await;
    let mut expected = BTreeMap::from([((0, first - 1), 3), ((0, first), 5)]);
    expected.extend(ahead.iter().map(|&(m, d)| ((0, m), d)));
    assert_eq!(
        minutes, expected,
        "every acknowledged increment written once"
    );
    assert_eq!(days, BTreeMap::from([(0, 8 + held_sum)]));
    let accounting = again.accounting();
    assert!(accounting.is_balanced(), "{accounting:?}");
    store.shutdown().await;
}

/// A spilled row of a family no longer configured, in front of a run of rows the
/// registry cannot place or inside it, and a damaged line inside the run: refused once
/// (one line in `rejected.jsonl`, counted once, also after a restart), the damage set
/// aside and counted once, though the run is left where it is round after round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmappable_row_beside_a_held_run_is_refused_once() {
    for (place, at_line) in [("in front", 1), ("inside", 2)] {
        let dir = tempfile::tempdir().unwrap();
        let (config, store, mut w, _, first) =
            durable_writer_read_at_hour_before(dir.path(), |_| {}).await;
        // Held: the read does not cover them. The writer is then killed.
        log_plays(&w, &[(first + 10, 7), (first + 11, 1)]);
        w.flusher.flush_now().await;
        drop(w);
        // The held rows' segment gets a row of a family no longer configured.
        let state = config.state.dir.join("a");
        let segment = std::fs::read_dir(&state)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                name.starts_with("spill.0") && name.ends_with(".jsonl")
            })
            .expect("the held rows' segment");
        let text = std::fs::read_to_string(&segment).unwrap();
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        assert!(lines.len() >= 4, "{lines:?}");
        let mut gone: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
        gone["family"] = "gone".into();
        gone["row"] = 9.into();
        lines.insert(at_line, gone.to_string());
        // Inside the run (before its last row), read again with it every round.
        lines.insert(lines.len() - 1, "{damaged".into());
        std::fs::write(&segment, lines.join("\n") + "\n").unwrap();

        // Started again, the registry's read still short of the held minutes.
        let (mut again, _) = started_with_read_at(&config, first * 60).await;
        for _ in 0..4 {
            again.flusher.flush_now().await;
        }
        let rejected = std::fs::read_to_string(state.join("rejected.jsonl")).unwrap_or_default();
        let refused: Vec<&str> = rejected
            .lines()
            .filter(|l| l.contains("\"gone\""))
            .collect();
        assert_eq!(refused.len(), 1, "{place}: refused once: {rejected}");
        let aside = std::fs::read_to_string(state.join("spill.corrupt.jsonl")).unwrap();
        assert_eq!(aside.lines().count(), 1, "{place}: set aside once: {aside}");
        assert_eq!(
            again.flusher.ledger().corrupt_lines()[2],
            1,
            "{place}: counted once"
        );
        let accounting = again.accounting();
        assert!(accounting.is_balanced(), "{place}: {accounting:?}");
        let gone_sum = i128::from(gone["deltas"]["plays"].as_i64().unwrap());
        assert_eq!(
            accounting.minute.rejected + accounting.day.rejected,
            gone_sum,
            "{place}: {accounting:?}"
        );
        drop(again);
        // A restart with the run still held does not refuse the row again: the durable
        // cursor had passed it.
        let (mut third, _) = started_with_read_at(&config, first * 60).await;
        for _ in 0..2 {
            third.flusher.flush_now().await;
        }
        let rejected = std::fs::read_to_string(state.join("rejected.jsonl")).unwrap_or_default();
        let refused = rejected.lines().filter(|l| l.contains("\"gone\"")).count();
        assert_eq!(refused, 1, "{place}: after a restart: {rejected}");
        store.shutdown().await;
    }
}
