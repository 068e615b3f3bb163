//! The `writer_totals` counting mode through the real driver, against cqlsim's
//! last-write-wins regular tables:
//!
//! - a write delayed in the store arrives after a newer one and loses (`USING TIMESTAMP`);
//! - a storm of timeouts (applied or not), lost replies and closed connections at 20 %:
//!   the writer_totals family ends exact, while a counter family fed the same increments
//!   in the same run drifts (both figures are printed);
//! - restarts: a clean restart adds a writer column and the read sums both; SIGKILL loses
//!   exactly what the killed process had not written yet, which it reported in
//!   `status.json` and the next start reports as an unclean stop;
//! - `schema` creates both shapes and the start-up check tells them apart.

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use countersink::bucket::{Day, Minute};
use countersink::config::ConsistencyLevel;
use countersink::config::{Config, CountingMode, FamilyConfig};
use countersink::family::Families;
use countersink::ingest::client::{Client, Target};
use countersink::ops::read::{Reader, resolve};
use countersink::vocabulary::Granularity;
use cqlsim::{FaultKind, FaultRule};

use crate::common::{BIN, Serve, Writer, cli_stdout, config, start_cqlsim};

const MINUTES: &str = "metrics.views_totals_by_minute";
const DAYS: &str = "metrics.views_totals_by_day";

/// The example configuration plus a `writer_totals` family `views_totals`, fed by
/// `page.views.t` with key `page_id`, beside the counter family `views` fed by
/// `page.views`.
fn totals_config(state: &Path) -> Config {
    let mut config = config(state);
    config.families.push(FamilyConfig {
        name: "views_totals".into(),
        minute_table: MINUTES.into(),
        day_table: DAYS.into(),
        key: vec!["page_id".into()],
        columns: [("page.views.t".to_string(), "views".to_string())].into(),
        mode: CountingMode::WriterTotals,
        ..FamilyConfig::default()
    });
    config
}

fn unix_now() -> i64 {
    countersink::bucket::unix_secs(std::time::SystemTime::now())
}

/// The `views_totals` family as a configuration file states it.
fn family_toml() -> String {
    format!(
        "[[family]]\nname = \"views_totals\"\nminute_table = \"{MINUTES}\"\nday_table = \"{DAYS}\"\nkey = [\"page_id\"]\nmode = \"writer_totals\"\n[family.columns]\n\"page.views.t\" = \"views\"\n"
    )
}

/// What the `serve` tests start with: a cqlsim the test injects its faults into (it reads
/// the tables in process), and a configuration file for `views_totals` alone, flushing
/// every `interval`.
struct ServeSetup {
    contact_point: String,
    file: PathBuf,
    state: PathBuf,
}

impl ServeSetup {
    /// The store, and the setup to start `serve` against it with.
    async fn start(dir: &Path, interval: &str) -> (cqlsim::Server, ServeSetup) {
        let mut config = totals_config(&dir.join("unused"));
        let server = start_cqlsim(
            &mut config,
            "refuses every write with an injected fault, reads the table in process",
        )
        .await
        .into_sim();
        let file = dir.join("serve.toml");
        std::fs::write(
            &file,
            format!(
                "[store]\nrequest_timeout = \"1s\"\n[flush]\ninterval = \"{interval}\"\njitter = \"0s\"\n\
                 [generic]\nenabled = false\n{}",
                family_toml()
            ),
        )
        .unwrap();
        let setup = ServeSetup {
            contact_point: config.store.contact_points[0].clone(),
            file,
            state: dir.join("state"),
        };
        (server, setup)
    }

    /// The arguments of `serve` listening on the Unix stream `socket` only.
    fn args(&self, socket: &Path) -> Vec<String> {
        vec![
            "--config".to_string(),
            self.file.display().to_string(),
            "--udp".into(),
            "off".into(),
            "--uds-stream".into(),
            socket.display().to_string(),
            "--metrics".into(),
            "off".into(),
            "--contact-point".into(),
            self.contact_point.clone(),
            "--state-dir".into(),
            self.state.display().to_string(),
        ]
    }
}

/// The writer columns of the day table.
fn day_writers(server: &cqlsim::Server) -> BTreeSet<String> {
    let rows = server
        .execute(None, &format!("SELECT writer FROM {DAYS}"))
        .unwrap();
    (0..rows.len())
        .filter_map(|i| match rows.get(i, "writer") {
            Some(cqlsim::Value::Text(w)) => Some(w.clone()),
            _ => None,
        })
        .collect()
}

/// The stored totals of one writer_totals minute row, per writer.
fn writers_of(server: &cqlsim::Server, page: &str, minute: Minute) -> Vec<(String, i64)> {
    let day = countersink::bucket::format_date(minute.day().date());
    let rows = server
        .execute(
            None,
            &format!(
                "SELECT writer, views FROM {MINUTES} WHERE page_id = '{page}' AND day = '{day}' AND minute = {}",
                minute.minute_of_day()
            ),
        )
        .expect("select");
    (0..rows.len())
        .map(|i| {
            let writer = match rows.get(i, "writer") {
                Some(cqlsim::Value::Text(w)) => w.clone(),
                other => panic!("writer {other:?}"),
            };
            (writer, rows.get_i64(i, "views").unwrap_or(0))
        })
        .collect()
}

/// An older total held back in the store (cqlsim `delay,execute=late`) is written after
/// the newer one that followed it: the stored total is still the newer one, because each
/// carries its write time from the writer's monotonic clock. The late write did run: it
/// lost on its time, not by being dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_older_total_arriving_after_a_newer_one_loses() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = totals_config(dir.path());
    config.store.request_timeout = Duration::from_millis(300);
    let server = start_cqlsim(
        &mut config,
        "delays one request and lets it run late (cqlsim's delay,execute=late), counts requests",
    )
    .await
    .into_sim();
    let mut writer = Writer::start(&config).await;
    let now = unix_now();
    let minute = Minute::from_unix_secs(now).unwrap();
    server.add_fault(
        FaultRule::new(FaultKind::Delay)
            .duration(Duration::from_millis(1500))
            .late(true)
            .table(MINUTES)
            .max(1),
    );
    writer.incr("page.views.t", &[("page_id", "home")], 5, now);
    let first = writer.flusher.flush_now().await;
    assert_eq!(
        first.totals.failed, 1,
        "the minute write timed out: {first:?}"
    );
    writer.incr("page.views.t", &[("page_id", "home")], 2, now);
    let second = writer.flusher.flush_now().await;
    assert_eq!(second.totals.failed, 0, "{second:?}");
    assert_eq!(
        writers_of(&server, "home", minute)[0].1,
        7,
        "the newer total landed"
    );
    let (ks, t) = MINUTES.split_once('.').unwrap();
    let applied_before = server.stats().table(ks, t).writes_applied;
    tokio::time::sleep(Duration::from_millis(1800)).await;
    assert_eq!(
        server.stats().table(ks, t).writes_applied,
        applied_before + 1,
        "the delayed write of 5 ran after the write of 7"
    );
    assert_eq!(
        writers_of(&server, "home", minute),
        [(writer.flusher.totals_writer().to_owned(), 7)],
        "and lost: the stored total is the newer one"
    );
    let a = writer.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!((a.minute.unknown, a.minute.pending), (0, 0), "{a:?}");
    server.shutdown().await.unwrap();
}

/// 20 % of writes hit by `write-timeout` (applied or not), `no-reply` (applied or not) and
/// `close` (applied or not). The same increments feed a counter family and a writer_totals
/// family. Afterwards the writer_totals family is exact for every key, minute and day;
/// the counter family has drifted by what its unknown writes did not apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fault_storm_leaves_writer_totals_exact_while_counters_drift() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = totals_config(dir.path());
    config.store.request_timeout = Duration::from_millis(300);
    config.flush.max_in_flight = 32;
    let server = start_cqlsim(
        &mut config,
        "injects a fault storm and reads every writer's row in process",
    )
    .await
    .into_sim();
    let mut writer = Writer::start(&config).await;
    // Each kind applied and not applied; together 20 % of the writes that reach the
    // store. Closes are the rarest: after one, the driver fails every request on its
    // own until it has reconnected, so they would hide the others.
    let mut rules = Vec::new();
    let mut spared = 1.0;
    for (kind, p) in [
        (FaultKind::WriteTimeout, 0.078),
        (FaultKind::NoReply, 0.025),
        (FaultKind::Close, 0.005),
    ] {
        for applied in [true, false] {
            rules.push(FaultRule::new(kind).applied(applied).probability(p));
            spared *= 1.0 - p;
        }
    }
    assert!((0.19..0.21).contains(&(1.0 - spared)), "{}", 1.0 - spared);
    server.set_faults(rules);

    let now = unix_now();
    let mut expected: HashMap<(usize, i64), i64> = HashMap::new();
    for flush in 0..12 {
        // Three minutes, each written in several flushes.
        let at = now - 60 * (flush % 3);
        for i in 0..1500 {
            let key = (i + flush as usize) % 100;
            let delta = (i % 4) as i64 + 1;
            let page = format!("p{key}");
            let tags: &[(&str, &str)] = &[("page_id", &page)];
            writer.incr("page.views", tags, delta, at);
            writer.incr("page.views.t", tags, delta, at);
            *expected.entry((key, at.div_euclid(60))).or_default() += delta;
        }
        writer.flusher.flush_now().await;
        // Time for the driver to reconnect after a closed connection.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let stats = server.stats();
    let fired: u64 = [
        FaultKind::WriteTimeout,
        FaultKind::NoReply,
        FaultKind::Close,
    ]
    .iter()
    .map(|k| stats.fault(*k).fired)
    .sum();
    server.clear_faults();
    for _ in 0..60 {
        let (_, unwritten) = writer.ledger.totals_rows();
        if unwritten == 0 && writer.engine.aggregator().pending_rows() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        writer.flusher.flush_now().await;
    }
    assert_eq!(writer.ledger.totals_rows().1, 0, "every total written");

    let fed: i64 = expected.values().sum();
    let families = Families::from_config(&config).unwrap();
    let reader = Reader::new(writer.session.clone());
    // Exact per key and minute, and per key and day, read the way `get` reads.
    let mut totals_fed = 0_i128;
    let mut per_day: HashMap<(usize, u32), i64> = HashMap::new();
    for ((key, minute), delta) in &expected {
        let minute = Minute(*minute as u32);
        *per_day.entry((*key, minute.day().0)).or_default() += delta;
        let page = format!("p{key}");
        let counter = resolve(&families, "page.views.t", &[("page_id", &page)]).unwrap();
        let read = reader
            .counter_partition(
                &families,
                &counter,
                Granularity::Minute,
                minute.day(),
                ConsistencyLevel::One,
            )
            .await
            .unwrap();
        assert_eq!(
            read.sums
                .get(&i64::from(minute.minute_of_day()))
                .map_or(0, |v| v[0]),
            *delta,
            "p{key} minute {minute:?}"
        );
        totals_fed += i128::from(*delta);
    }
    for ((key, day), delta) in &per_day {
        let page = format!("p{key}");
        let counter = resolve(&families, "page.views.t", &[("page_id", &page)]).unwrap();
        let read = reader
            .counter_partition(
                &families,
                &counter,
                Granularity::Day,
                Day(*day),
                ConsistencyLevel::One,
            )
            .await
            .unwrap();
        let total = read.sums.get(&i64::from(*day)).map_or(0, |v| v[0]);
        assert_eq!(total, *delta, "p{key} day {day}");
        assert_eq!(read.rows_read, 1, "one writer, one row per day");
    }
    let totals_stored = crate::common::table_sum(&server, DAYS, "views");
    let counters_stored = crate::common::table_sum(&server, "metrics.views_by_day", "views");
    let a = writer.accounting();
    println!(
        "fault storm ({fired} faults fired): fed {fed} per family; writer_totals stored {totals_stored} (exact), \
         counter stored {counters_stored} (drift {}, {} in unknown writes)",
        i128::from(fed) - counters_stored,
        a.day.unknown
    );
    assert_eq!(totals_fed, i128::from(fed));
    assert_eq!(totals_stored, i128::from(fed), "writer_totals: exact");
    assert!(fired > 200, "the storm happened: {fired}");
    assert!(a.is_balanced(), "{a:?}");
    assert!(
        counters_stored < i128::from(fed) && a.day.unknown > 0,
        "the counter family drifted: stored {counters_stored} of {fed}"
    );
    assert!(
        a.day.applied <= counters_stored + totals_stored
            && counters_stored + totals_stored <= a.day.applied + a.day.unknown,
        "the counter family stays within its accounting: {a:?}"
    );
    server.shutdown().await.unwrap();
}

/// Two incarnations in one state directory, each stopped cleanly: the second counts in a
/// writer column of its own, from zero, reading nothing back; reads sum both (the library
/// reader and `countersink get`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_restart_counts_on_in_a_new_writer_column() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = totals_config(&dir.path().join("state"));
    let server = start_cqlsim(&mut config, "reads every writer's row in process")
        .await
        .into_sim();
    let now = unix_now();
    let minute = Minute::from_unix_secs(now).unwrap();
    let mut writers = Vec::new();
    for delta in [5, 3] {
        let mut writer = Writer::start(&config).await;
        writer.incr("page.views.t", &[("page_id", "home")], delta, now);
        writer.flusher.flush_now().await;
        writers.push(writer.flusher.totals_writer().to_owned());
        let report = writer.flusher.finish().await;
        assert_eq!(report.totals.rows_spilled, 0);
    }
    let stored = writers_of(&server, "home", minute);
    assert_eq!(stored.len(), 2, "{stored:?}");
    for (writer, total) in [(&writers[0], 5), (&writers[1], 3)] {
        assert!(
            stored.contains(&(writer.clone(), total)),
            "{writer}: {stored:?}"
        );
    }
    assert!(writers[1].contains("/2/"), "incarnation 2: {}", writers[1]);
    let file = dir.path().join("countersink.toml");
    std::fs::write(&file, family_toml()).unwrap();
    let day = countersink::bucket::format_date(minute.day().date());
    let got = cli_stdout([
        "get",
        "--config",
        &file.display().to_string(),
        "--contact-point",
        &config.store.contact_points[0],
        "page.views.t",
        "--tag",
        "page_id:home",
        "--day",
        &day,
    ]);
    assert_eq!(got.trim(), "8", "get sums the writers");
    server.shutdown().await.unwrap();
}

/// `serve` killed with SIGKILL while the store refused its writes: exactly what it had not
/// written is lost, and that is what its `status.json` said after its last flush; the next
/// start reports the unclean stop, counts on in a new writer column, and the sum across
/// incarnations is what was fed less that loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_loses_only_the_unwritten_totals_it_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (server, setup) = ServeSetup::start(dir.path(), "200ms").await;
    let state = &setup.state;
    let socket = dir.path().join("stream.sock");
    let send = |socket: &Path, count: usize, delta: i64| {
        let mut client = Client::connect(Target::UnixStream(socket.to_owned())).unwrap();
        let lines: Vec<String> = (0..count)
            .map(|i| format!("page.views.t:{delta}|c|#page_id:p{}", i % 10))
            .collect();
        client.send_lines(lines.iter().map(String::as_str)).unwrap();
        i128::from(delta) * count as i128
    };
    let stored = || crate::common::table_sum(&server, DAYS, "views");

    let first = Serve::start(setup.args(&socket));
    let a = send(&socket, 1000, 1);
    wait_for("the first batch stored", a, stored).await;
    // The store now refuses every write (definitely not applied).
    server.set_faults(vec![FaultRule::new(FaultKind::Unavailable)]);
    let b = send(&socket, 500, 3);
    let status_path = state.join("status.json");
    let status = || -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(&status_path).unwrap_or_default())
            .unwrap_or(serde_json::Value::Null)
    };
    wait_for(
        "status.json reports the second batch",
        serde_json::Value::String(b.to_string()),
        || status()["pending_sum"].clone(),
    )
    .await;
    let reported = status();
    first.kill();
    assert_eq!(stored(), a, "nothing of the second batch reached the store");
    // Killed inside a flush's totals stage, the intents of its journal not known applied
    // are written again by the next start (idempotent); killed between flushes, none.
    let recovered = recoverable_day_sum(state);

    server.clear_faults();
    let socket2 = dir.path().join("stream2.sock");
    let mut second = Command::new(BIN)
        .arg("serve")
        .args(setup.args(&socket2))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = BufReader::new(second.stderr.take().unwrap()).lines();
    let (mut unclean, mut connected, mut seen) = (None, false, Vec::new());
    for line in log.by_ref() {
        let line = line.unwrap();
        if line.contains("did not shut down cleanly") {
            unclean = Some(line.clone());
        }
        connected |= line.contains("Connected to the store");
        seen.push(line);
        if connected && unclean.is_some() {
            break;
        }
    }
    let unclean = unclean.expect("the unclean stop is reported");
    assert!(
        unclean.contains(&format!("pending_minute_delta_sum={b}")),
        "{unclean}"
    );
    let rest = std::thread::spawn(move || log.map_while(Result::ok).collect::<Vec<String>>());
    let c = send(&socket2, 200, 2);
    wait_for("the third batch stored", a + c + recovered, stored).await;
    Command::new("kill")
        .args(["-TERM", &second.id().to_string()])
        .status()
        .unwrap();
    assert!(second.wait().unwrap().success());
    seen.extend(rest.join().unwrap());
    let logged = seen
        .iter()
        .find(|l| l.contains("Finished the flush the previous run was killed in"))
        .map_or(0, |l| field(l, "totals_day_sum").expect("totals_day_sum"));
    assert_eq!(
        logged, recovered,
        "the recovery reports what it wrote again"
    );

    let fed = a + b + c;
    let lost = fed - stored();
    println!(
        "SIGKILL: fed {fed}, stored across incarnations {}, lost {lost}; reported pending at the last flush: {} rows, sum {}",
        stored(),
        reported["pending_rows"],
        reported["pending_sum"]
    );
    assert_eq!(
        lost,
        b - recovered,
        "lost exactly the unwritten batch, less what recovery wrote again ({recovered})"
    );
    assert_eq!(
        reported["pending_sum"],
        b.to_string(),
        "and said so (a bound)"
    );
    let writers = day_writers(&server);
    assert_eq!(writers.len(), 2, "one column per incarnation: {writers:?}");
    server.shutdown().await.unwrap();
}

/// `serve` killed (SIGKILL) after sending a flush's totals writes and before settling any
/// of them, while the store refused them: the intents in the journal are written again by
/// the next start, in the killed run's writer column with their own write times, so none
/// of what that flush carried is lost, and none of it is logged as unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_between_sending_totals_and_settling_them_loses_none_of_them() {
    let dir = tempfile::tempdir().unwrap();
    // A long interval: the lines sent at start are all in the first flush that writes.
    let (server, setup) = ServeSetup::start(dir.path(), "2s").await;
    let state = &setup.state;
    let stored = || crate::common::table_sum(&server, DAYS, "views");
    server.set_faults(vec![FaultRule::new(FaultKind::Unavailable)]);
    let socket = dir.path().join("stream.sock");
    let mut first = Command::new(BIN)
        .arg("serve")
        .args(setup.args(&socket))
        .env("COUNTERSINK_CRASH_POINT", "totals_sent")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = BufReader::new(first.stderr.take().unwrap()).lines();
    let mut fed = 0_i128;
    for line in log.by_ref() {
        let line = line.unwrap();
        if line.contains("Connected to the store") {
            let mut client = Client::connect(Target::UnixStream(socket.clone())).unwrap();
            let lines: Vec<String> = (0..500)
                .map(|i| format!("page.views.t:3|c|#page_id:p{}", i % 10))
                .collect();
            client.send_lines(lines.iter().map(String::as_str)).unwrap();
            fed = 1500;
        }
        if line.contains("crash point totals_sent reached") {
            break;
        }
    }
    assert_eq!(fed, 1500, "the lines were sent before the crash point");
    first.kill().unwrap();
    first.wait().unwrap();
    assert_eq!(
        stored(),
        0,
        "the store refused every write of the killed run"
    );
    let journal = countersink::state::journal::read(&state.join("journal.wal")).unwrap();
    let group = journal.last().expect("the killed flush's group");
    assert!(group.committed && !group.ended && !group.kind_intents.is_empty());
    // `countersink outcomes` before the restart: the journal's totals writes, spilled
    // (the next start writes them again), every unit fed.
    let mut summary = countersink::ops::outcomes::Summary::default();
    countersink::ops::outcomes::scan(state, |source, record| summary.add(source, record)).unwrap();
    let shown: Vec<(String, String, String, i128)> = summary
        .totals()
        .into_iter()
        .map(|((outcome, source, granularity), sums)| {
            (
                outcome.to_string(),
                source.as_str().to_owned(),
                granularity,
                sums.delta_sum,
            )
        })
        .collect();
    assert!(!shown.is_empty());
    for (outcome, source, granularity, sum) in &shown {
        assert_eq!(
            (outcome.as_str(), source.as_str(), *sum),
            ("spilled", "journal", fed),
            "{granularity}: {shown:?}"
        );
    }

    server.clear_faults();
    let second = Serve::start(setup.args(&dir.path().join("stream2.sock")));
    wait_for("the killed run's totals written again", fed, stored).await;
    let (status, _) = second.terminate();
    assert!(status.success());
    let writers = day_writers(&server);
    assert!(
        !writers.is_empty() && writers.iter().all(|w| w.contains("/1/")),
        "written in the killed run's (incarnation 1) column: {writers:?}"
    );
    let unknown = std::fs::read_to_string(state.join("unknown.jsonl")).unwrap_or_default();
    assert!(unknown.is_empty(), "nothing logged as unknown: {unknown}");
    server.shutdown().await.unwrap();
}

/// An upgrade: an earlier version left its `totals.spill.jsonl`. A start killed right
/// after it moved the file into a segment (`totals_spill_migrated`), before removing it,
/// leaves both; `countersink outcomes` counts the rows once, and the next start removes
/// the file and writes every total, in the earlier writer's column, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_killed_mid_move_writes_each_earlier_total_once() {
    use countersink::state::totals_files::{LegacyTotalRecord, SPILL_FILE, migrated};
    const ROWS: i64 = 40;
    let dir = tempfile::tempdir().unwrap();
    let (server, setup) = ServeSetup::start(dir.path(), "1s").await;
    let state = &setup.state;
    std::fs::create_dir_all(state).unwrap();
    let today = Minute::from_unix_secs(unix_now()).unwrap().day();
    let mut lines = String::new();
    for i in 0..ROWS {
        let record = LegacyTotalRecord {
            time: "2026-11-30T00:00:00Z".into(),
            writer: "earlier/1/0000abcd".into(),
            family: "views_totals".into(),
            table: DAYS.into(),
            granularity: "day".into(),
            key: [("page_id".to_string(), format!("u{i}"))].into(),
            day: countersink::bucket::format_date(today.date()),
            minute: None,
            month: Some(today.month()),
            totals: [("views".to_string(), i + 1)].into(),
            unconfirmed: [("views".to_string(), i + 1)].into(),
            timestamp: 1_000 + i,
            error: None,
        };
        lines.push_str(&serde_json::to_string(&record).unwrap());
        lines.push('\n');
    }
    std::fs::write(state.join(SPILL_FILE), &lines).unwrap();
    let fed = i128::from(ROWS * (ROWS + 1) / 2);

    let socket = dir.path().join("stream.sock");
    let mut first = Command::new(BIN)
        .arg("serve")
        .args(setup.args(&socket))
        .env("COUNTERSINK_CRASH_POINT", "totals_spill_migrated")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = BufReader::new(first.stderr.take().unwrap()).lines();
    let reached = log
        .map_while(Result::ok)
        .any(|line| line.contains("crash point totals_spill_migrated reached"));
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(reached, "the start reached the crash point");
    assert!(state.join(SPILL_FILE).exists() && migrated(state).unwrap().is_some());
    let mut summary = countersink::ops::outcomes::Summary::default();
    countersink::ops::outcomes::scan(state, |source, record| summary.add(source, record)).unwrap();
    let spilled: i128 = summary.totals().values().map(|sums| sums.delta_sum).sum();
    assert_eq!(spilled, fed, "the rows counted once, from the segment");

    let stored = || crate::common::table_sum(&server, DAYS, "views");
    let second = Serve::start(setup.args(&dir.path().join("stream2.sock")));
    wait_for("the earlier totals written", fed, stored).await;
    let (status, _) = second.terminate();
    assert!(status.success());
    assert!(!state.join(SPILL_FILE).exists(), "the old file is removed");
    assert_eq!(
        day_writers(&server),
        BTreeSet::from(["earlier/1/0000abcd".to_string()]),
        "written in the earlier writer's column"
    );
    assert_eq!(stored(), fed, "each total once");
    server.shutdown().await.unwrap();
}

/// The day-table part of the totals a killed run's journal holds and recovery will write
/// again: the intents of an unfinished totals group not known applied or rejected.
fn recoverable_day_sum(state: &Path) -> i128 {
    use countersink::state::Settled;
    let groups = countersink::state::journal::read(&state.join("journal.wal")).unwrap();
    groups
        .iter()
        .filter(|g| g.committed && !g.ended)
        .flat_map(|g| {
            let intents = countersink::totals::TotalsIntent::of_group(g).expect("totals intents");
            intents.into_iter().filter(|i| {
                i.table == Granularity::Day
                    && !matches!(
                        g.outcomes.get(&i.request),
                        Some(Settled::Applied | Settled::Rejected { .. })
                    )
            })
        })
        .flat_map(|i| i.rows)
        .map(|r| r.unconfirmed.iter().map(|v| i128::from(*v)).sum::<i128>())
        .sum()
}

/// `key=value` of a log line, as a number.
fn field(line: &str, key: &str) -> Option<i128> {
    let at = line.find(&format!("{key}="))? + key.len() + 1;
    let value: String = line[at..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '-')
        .collect();
    value.parse().ok()
}

/// `schema` prints the writer_totals tables beside the counter ones; a counter table
/// configured as writer_totals is refused at start, naming the column.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_creates_both_shapes_and_the_check_tells_them_apart() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = totals_config(dir.path());
    let file = dir.path().join("countersink.toml");
    std::fs::write(&file, family_toml()).unwrap();
    let printed = cli_stdout(["schema", "--config", &file.display().to_string()]);
    assert!(
        printed.contains("PRIMARY KEY ((page_id, day), minute, writer)"),
        "{printed}"
    );
    assert!(printed.contains("views bigint"), "{printed}");
    assert!(
        printed.contains("value counter"),
        "the generic family still counts: {printed}"
    );

    let server = start_cqlsim(&mut config, "reads the created tables in process")
        .await
        .into_sim();
    Writer::start(&config).await;
    // The same family pointed at counter tables.
    config.families.last_mut().unwrap().minute_table = "metrics.views_by_minute".into();
    config.families.last_mut().unwrap().day_table = "metrics.views_by_day".into();
    config.families.remove(0);
    let engine = countersink::engine::Engine::new(&config).unwrap();
    let error = countersink::sink::cql::CqlSink::connect(&config.store, engine.families())
        .await
        .err()
        .expect("refused");
    let text = error.to_string();
    assert!(
        text.contains("metrics.views_by_minute") && text.contains("writer"),
        "{text}"
    );
    server.shutdown().await.unwrap();
}

/// Waits up to 15 s for `state` to become `expected`.
async fn wait_for<T: PartialEq + std::fmt::Debug>(what: &str, expected: T, state: impl Fn() -> T) {
    for _ in 0..750 {
        if state() == expected {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{what}: expected {expected:?}, still {:?}", state());
}
