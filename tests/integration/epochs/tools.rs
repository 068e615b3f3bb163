//! Operator tools on a family reset by epochs: `countersink reset` scheduling epochs a
//! lead ahead, `migrate` copying each epoch and the registry, and leaderboards ranking
//! each epoch on its own.

use super::*;

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
