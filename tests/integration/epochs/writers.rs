//! Writers following the registry: a stop ends a read the store does not answer, two
//! writers straddling a reset, an unreachable registry, rows held at shutdown, and the
//! sidecar on the wall clock holding lines from the future.

use super::*;

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
