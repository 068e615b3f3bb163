//! `reconcile --repair`: a closed day made equal to its ledger, with and without injected faults, and a sharded family corrected through its shard 0.

use super::*;

/// Issue test 8, with `--close` and `get --exact`, on any store: a closed day drifted by
/// outside writers (a minute row up, a day row down); `--repair --dry-run` writes
/// nothing, `--repair` makes every counter equal the ledger and the run passes; `--close`
/// keeps the day's exact totals, which `get --exact` then reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repair_makes_a_closed_day_equal_its_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = exact_config(dir.path());
    // A real node on a shared machine may answer a write late; a client timeout here
    // would only add unknown writes the outside writers' drift does not need.
    config.store.request_timeout = Duration::from_secs(5);
    let store = start_store(&mut config).await;
    repair_scenario(&store, &config, dir.path(), None).await;
    store.shutdown().await;
}

/// Issue test 8 under injected faults: unknown minute writes (timeouts, some not applied)
/// and rejected day writes beside an outside writer; the repair undoes all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repair_makes_a_closed_day_equal_its_ledger_after_unknown_writes() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = exact_config(dir.path());
    let store = start_cqlsim(&mut config, "injects faults that leave unknown writes").await;
    let faults = vec![
        FaultRule::new(FaultKind::WriteTimeout)
            .table(&config.families[0].minute_table)
            .probability(0.3),
        FaultRule::new(FaultKind::WriteFailure)
            .table(&config.families[0].day_table)
            .probability(0.3),
    ];
    repair_scenario(&store, &config, dir.path(), Some((store.sim(), faults))).await;
    store.shutdown().await;
}

/// Feeds a closed day (under `faults` on cqlsim, if given), adds outside writes, then
/// runs `reconcile --repair --dry-run`, `--repair`, `--close` and `get --exact`.
async fn repair_scenario(
    store: &Store,
    config: &Config,
    dir: &std::path::Path,
    faults: Option<(&cqlsim::Server, Vec<FaultRule>)>,
) {
    const MINUTE_TABLE: &str = "metrics.views_by_minute";
    const DAY_TABLE: &str = "metrics.views_by_day";
    let mut writer = Writer::start(config).await;
    if let Some((sim, rules)) = &faults {
        sim.set_faults(rules.clone());
    }
    let mut fed = 0_i128;
    let mut p3 = 0_i64;
    for flush in 0..4_i64 {
        for i in 0..120_i64 {
            let key = format!("p{}", i % 12);
            let delta = 1 + i % 5;
            writer.incr(
                "page.views",
                &[("page_id", key.as_str())],
                delta,
                AT + flush * 60,
            );
            fed += i128::from(delta);
            if i % 12 == 3 {
                p3 += delta;
            }
        }
        writer.flusher.flush_now().await;
    }
    if let Some((sim, _)) = &faults {
        sim.clear_faults();
    }
    settle(&mut writer).await;
    let (date, minute) = day_and_minute(AT);
    store
        .execute(&format!(
            "UPDATE {} SET views = views + 7 WHERE page_id = 'p5' AND day = '{date}' AND minute = {minute}",
            config.families[0].minute_table
        ))
        .await;
    store
        .execute(&format!(
            "UPDATE {} SET views = views - 4 WHERE page_id = 'p7' AND month = '{}' AND day = '{date}'",
            config.families[0].day_table,
            &date[..7]
        ))
        .await;
    let before = store.table_sum(MINUTE_TABLE, "views").await;
    assert_ne!(
        before, fed,
        "the outside writer (and the faults) made the counters drift"
    );
    if faults.is_none() {
        assert_eq!(before, fed + 7, "every write applied, then the outside +7");
        assert_eq!(store.table_sum(DAY_TABLE, "views").await, fed - 4);
    }

    let file = dir.join("countersink.toml");
    write_exact_config(store, &file);
    let day_text = format_date(day().date());
    let cli = |extra: &[&str]| reconcile_cli(&file, extra);
    let dry = cli(&["--repair", "--dry-run"]);
    assert_eq!(
        dry.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&dry.stderr)
    );
    assert!(String::from_utf8_lossy(&dry.stdout).contains("repair planned"));
    assert_eq!(
        store.table_sum(MINUTE_TABLE, "views").await,
        before,
        "a dry run writes nothing"
    );

    let repaired = cli(&["--repair"]);
    let text = String::from_utf8_lossy(&repaired.stdout).into_owned();
    assert_eq!(
        repaired.status.code(),
        Some(0),
        "{text}\n{}",
        String::from_utf8_lossy(&repaired.stderr)
    );
    assert!(text.contains("repair applied"), "{text}");
    assert_eq!(store.table_sum(MINUTE_TABLE, "views").await, fed);
    assert_eq!(store.table_sum(DAY_TABLE, "views").await, fed);
    let report = run_reconcile(&writer, config).await;
    assert!(
        report
            .keys
            .iter()
            .all(|k| k.drift.values().all(|d| *d == 0)),
        "{report:?}"
    );
    assert_eq!(
        report.summary.statuses.get("unexplained"),
        None,
        "{:?}",
        report.summary
    );

    assert_eq!(cli(&["--close"]).status.code(), Some(0));
    let get = run_cli([
        "get",
        "--config",
        &file.display().to_string(),
        "page.views",
        "--tag",
        "page_id:p3",
        "--day",
        &day_text,
        "--exact",
    ]);
    assert!(
        get.status.success(),
        "{}",
        String::from_utf8_lossy(&get.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&get.stdout).trim(), p3.to_string());
    assert!(String::from_utf8_lossy(&get.stderr).contains("closed day"));
}

/// `--repair` on a sharded family (shards in the partition key, then in the clustering
/// key): an outside writer adds +7 to shard 2 of one key's minute and day rows; the
/// correction goes to shard 0, and afterwards every key is ok: the counter reconcile
/// compares is the sum of the shards, which one shard's -7 brings back to the ledger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repair_of_a_sharded_family_corrects_the_sum_of_its_shards() {
    for placement in [
        countersink::config::ShardPlacement::Partition,
        countersink::config::ShardPlacement::Clustering,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut config = exact_config(dir.path());
        config.families[0].shards = 4;
        config.families[0].shard_placement = placement;
        let store = start_cqlsim(&mut config, "writes beside countersink in process").await;
        let mut writer = Writer::start(&config).await;
        for flush in 0..8_i64 {
            for i in 0..40_i64 {
                let key = format!("p{}", i % 10);
                writer.incr(
                    "page.views",
                    &[("page_id", key.as_str())],
                    1 + i % 3,
                    AT + flush,
                );
            }
            writer.flusher.flush_now().await;
        }
        settle(&mut writer).await;
        let (date, minute) = day_and_minute(AT);
        let family = &config.families[0];
        let sim = store.sim();
        sim.execute(None, &format!(
            "UPDATE {} SET views = views + 7 WHERE page_id = 'p3' AND shard = 2 AND day = '{date}' AND minute = {minute}",
            family.minute_table
        ))
        .unwrap();
        sim.execute(None, &format!(
            "UPDATE {} SET views = views + 7 WHERE page_id = 'p3' AND shard = 2 AND month = '{}' AND day = '{date}'",
            family.day_table,
            &date[..7]
        ))
        .unwrap();
        let report = run_reconcile(&writer, &config).await;
        assert_eq!(report.keys.len(), 2, "{placement:?}: {:?}", report.keys);
        assert!(
            report.keys.iter().all(|k| k.key == ["p3"]
                && k.status == Status::Unexplained
                && k.drift["views"] == 7)
        );

        let families = countersink::family::Families::from_config(&config).unwrap();
        let views = families.by_name("views").unwrap();
        let reader = countersink::ops::read::Reader::new(writer.session.clone());
        let mut corrections =
            reconcile::repair::plan(&writer.session, &reader, &config, views, &report, day())
                .await
                .unwrap();
        assert_eq!(corrections.len(), 2, "{corrections:?}");
        let sink = countersink::sink::cql::CqlSink::connect(&config.store, &families)
            .await
            .unwrap();
        reconcile::repair::apply(
            &writer.session,
            &sink,
            &config,
            views,
            day(),
            &mut corrections,
            1,
        )
        .await
        .unwrap();
        assert!(
            corrections.iter().all(|c| c.outcome == "applied"),
            "{corrections:?}"
        );
        let after = run_reconcile(&writer, &config).await;
        assert!(
            after.keys.iter().all(|k| k.drift.values().all(|d| *d == 0)),
            "{placement:?}: {:?}",
            after.keys
        );
        assert_eq!(after.summary.drift_unexplained, 0, "{placement:?}");
        assert!(after.passes());
        store.shutdown().await;
    }
}

/// A closed day countersink fed (20 increments over 5 pages), an outside writer's +7 on
/// p3's minute row, reconciled, and the one correction planned for it.
struct Drifted {
    _dir: tempfile::TempDir,
    config: Config,
    store: Store,
    writer: Writer,
    report: reconcile::Report,
    families: countersink::family::Families,
    corrections: Vec<reconcile::repair::Correction>,
    sink: countersink::sink::cql::CqlSink,
}

async fn drifted_by_seven() -> Drifted {
    let _dir = tempfile::tempdir().unwrap();
    let mut config = exact_config(_dir.path());
    let store = start_cqlsim(&mut config, "writes beside countersink in process").await;
    let mut writer = Writer::start(&config).await;
    for i in 0..20_i64 {
        let key = format!("p{}", i % 5);
        writer.incr("page.views", &[("page_id", key.as_str())], 1 + i % 3, AT);
    }
    writer.flusher.flush_now().await;
    settle(&mut writer).await;
    let (date, minute) = day_and_minute(AT);
    store
        .sim()
        .execute(
            None,
            &format!(
                "UPDATE {} SET views = views + 7 WHERE page_id = 'p3' AND day = '{date}' AND minute = {minute}",
                config.families[0].minute_table
            ),
        )
        .unwrap();
    let report = run_reconcile(&writer, &config).await;
    let families = countersink::family::Families::from_config(&config).unwrap();
    let views = families.by_name("views").unwrap();
    let reader = countersink::ops::read::Reader::new(writer.session.clone());
    let corrections =
        reconcile::repair::plan(&writer.session, &reader, &config, views, &report, day())
            .await
            .unwrap();
    assert_eq!(corrections.len(), 1, "{corrections:?}");
    let sink = countersink::sink::cql::CqlSink::connect(&config.store, &families)
        .await
        .unwrap();
    Drifted {
        _dir,
        config,
        store,
        writer,
        report,
        families,
        corrections,
        sink,
    }
}

/// The settle time after a repair counts from when its corrections were written, not from
/// the start of the run that wrote them: corrections sent now by a run that started two
/// minutes ago make the next repair wait about the whole settle time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_settle_time_counts_from_the_corrections_not_from_the_runs_start() {
    let Drifted {
        _dir,
        config,
        store,
        writer,
        report,
        families,
        mut corrections,
        sink,
    } = drifted_by_seven().await;
    let views = families.by_name("views").unwrap();
    assert_eq!(report.last_repair_ms, None);
    let now = std::time::SystemTime::now();
    let started = countersink::bucket::unix_secs(now) * 1000 - 120_000;
    reconcile::repair::apply(
        &writer.session,
        &sink,
        &config,
        views,
        day(),
        &mut corrections,
        started,
    )
    .await
    .unwrap();
    assert_eq!(corrections[0].outcome, "applied", "{corrections:?}");
    let after = run_reconcile(&writer, &config).await;
    let recorded = after.last_repair_ms.expect("the repair is recorded");
    assert!(recorded > started + 60_000, "{recorded} vs {started}");
    let settle = Duration::from_secs(60);
    let wait = reconcile::repair::settle_wait(&after, settle, std::time::SystemTime::now());
    assert!(
        wait.is_some_and(|w| w > settle / 2),
        "the next repair waits about the settle time: {wait:?}"
    );
    store.shutdown().await;
}

/// The library refuses, as the command does, to repair or close a day whose ledger rows
/// may have begun to expire (here: `exact.ledger_ttl` of one day, for a day a week old),
/// whoever calls it and however long after its reconcile: nothing is recorded or sent,
/// and the drift stays for the next run to see.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_day_whose_ledger_may_expire_is_neither_repaired_nor_closed_by_the_library() {
    let Drifted {
        _dir,
        config,
        store,
        writer,
        families,
        mut corrections,
        sink,
        ..
    } = drifted_by_seven().await;
    let views = families.by_name("views").unwrap();
    let mut expiring = config.clone();
    expiring.exact.ledger_ttl = Duration::from_secs(86_400);
    let refused = reconcile::repair::apply(
        &writer.session,
        &sink,
        &expiring,
        views,
        day(),
        &mut corrections,
        1,
    )
    .await
    .expect_err("a day whose ledger may expire is not repaired");
    assert!(
        matches!(&refused, countersink::ops::read::ReadError::Refused(why) if why.contains("exact.ledger_ttl")),
        "{refused}"
    );
    let now_ms = countersink::bucket::unix_secs(std::time::SystemTime::now()) * 1000;
    let refused = reconcile::closed::close_day(
        &writer.session,
        &expiring,
        views,
        day(),
        &[],
        None,
        now_ms,
        false,
    )
    .await
    .expect_err("a day whose ledger may expire is not closed");
    assert!(
        matches!(&refused, countersink::ops::read::ReadError::Refused(_)),
        "{refused}"
    );
    let after = run_reconcile(&writer, &config).await;
    assert_eq!(after.last_repair_ms, None, "no repair was recorded");
    assert!(
        after
            .keys
            .iter()
            .any(|k| k.key == ["p3"] && k.drift["views"] == 7),
        "the drift is left for the next run: {:?}",
        after.keys
    );
    let closed = store
        .sim()
        .execute(
            None,
            &format!("SELECT * FROM {}.exact_by_day", config.exact_keyspace()),
        )
        .unwrap();
    assert!(closed.rows.is_empty(), "nothing closed: {closed:?}");
    store.shutdown().await;
}

/// A minute row whose minute is not a minute of the day (1500, written by an outside
/// writer into a key's day partition) is not corrected: its correction would land on the
/// next day's minute 60, every run. `--repair` names it and exits 3; the next day's
/// partition stays empty, and the stray row stays as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minute_out_of_the_day_is_refused_not_corrected_on_another_day() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = exact_config(dir.path());
    let store = start_store(&mut config).await;
    let mut writer = Writer::start(&config).await;
    for page in ["p0", "p3"] {
        writer.incr("page.views", &[("page_id", page)], 3, AT);
    }
    writer.flusher.flush_now().await;
    settle(&mut writer).await;
    let (date, _) = day_and_minute(AT);
    let minute_table = &config.families[0].minute_table;
    store
        .execute(&format!(
            "UPDATE {minute_table} SET views = views + 7 WHERE page_id = 'p3' AND day = '{date}' AND minute = 1500"
        ))
        .await;
    let file = dir.path().join("countersink.toml");
    write_exact_config(&store, &file);
    let out = reconcile_cli(&file, &["--repair", "--threshold", "1.0"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(r#"repair minute_out_of_range minute ["p3"] minute 1500"#),
        "{stdout}"
    );
    assert!(stderr.contains("not minutes of the day"), "{stderr}");
    let next = format_date(Day(day().0 + 1).date());
    let next_day = store
        .select(&format!(
            "SELECT minute, views FROM {minute_table} WHERE page_id = 'p3' AND day = '{next}'"
        ))
        .await;
    assert_eq!(next_day.len(), 0, "nothing landed on the next day");
    let stray = store
        .select(&format!(
            "SELECT views FROM {minute_table} WHERE page_id = 'p3' AND day = '{date}' AND minute = 1500"
        ))
        .await;
    assert_eq!(stray.len(), 1, "the stray row stays");
    store.shutdown().await;
}
