//! Exact totals through the driver, for both families and both tables, across a minute,
//! day and month boundary; write reduction (seed 000's numbers).

use crate::common::{T0, Writer, config, day_and_minute, start_cqlsim, start_store};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_totals_in_minute_and_day_tables_across_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    let store = start_store(&mut config).await;
    let mut writer = Writer::start(&config).await;

    // 23:58 and 23:59 on 2026-11-30, then 00:00 on 2026-12-01.
    for (minute, n) in [(0, 3_i64), (1, 4), (2, 5)] {
        let now = T0 + minute * 60 + 7;
        for _ in 0..n {
            writer.incr("page.views", &[("page_id", "home")], 1, now);
            writer.incr("page.bytes", &[("page_id", "home")], 1000, now);
            writer.incr("api.calls", &[("route", "/x"), ("env", "prod")], 2, now);
        }
        if minute == 1 {
            writer.flusher.flush_now().await;
        }
    }
    writer.flusher.flush_now().await;

    let (d0, m0) = day_and_minute(T0);
    assert_eq!((d0.as_str(), m0), ("2026-11-30", 1438));
    let minute_table = "metrics.views_by_minute";
    let views = |day: &str, minute: i64| {
        format!("page_id = 'home' AND day = '{day}' AND minute = {minute}")
    };
    assert_eq!(
        store
            .cell(minute_table, "views", &views("2026-11-30", 1438))
            .await,
        Some(3)
    );
    assert_eq!(
        store
            .cell(minute_table, "views", &views("2026-11-30", 1439))
            .await,
        Some(4)
    );
    assert_eq!(
        store
            .cell(minute_table, "views", &views("2026-12-01", 0))
            .await,
        Some(5)
    );
    assert_eq!(
        store
            .cell(
                "metrics.views_by_day",
                "bytes",
                "page_id = 'home' AND month = '2026-11' AND day = '2026-11-30'"
            )
            .await,
        Some(7000)
    );
    assert_eq!(
        store
            .cell(
                "metrics.views_by_day",
                "views",
                "page_id = 'home' AND month = '2026-12' AND day = '2026-12-01'"
            )
            .await,
        Some(5)
    );
    assert_eq!(
        store
            .cell(
                "countersink.counts_by_minute",
                "value",
                "name = 'api.calls' AND tags = 'env:prod,route:/x' AND day = '2026-11-30' AND minute = 1439"
            )
            .await,
        Some(8)
    );
    assert_eq!(
        store
            .cell(
                "countersink.counts_by_day",
                "value",
                "name = 'api.calls' AND tags = 'env:prod,route:/x' AND month = '2026-12' AND day = '2026-12-01'"
            )
            .await,
        Some(10)
    );
    assert_eq!(
        store
            .table_sum("countersink.counts_by_minute", "value")
            .await,
        24
    );
    assert_eq!(
        store.table_sum("countersink.counts_by_day", "value").await,
        24
    );
    let a = writer.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(
        (a.minute.applied, a.day.applied),
        (a.minute.accepted, a.day.accepted)
    );
    store.shutdown().await;
}

/// Counter batches: 40 minutes of one page drained by one flush are one partition of the
/// minute table, written as prepared COUNTER batches of at most `flush.max_batch_rows`
/// rows (16 + 16 + 8), plus one day row. Each batch applies every row once, and only once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counter_batches_apply_every_row_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.flush.max_batch_rows = 16;
    let store = start_store(&mut config).await;
    let mut writer = Writer::start(&config).await;
    let start = T0 - 3600; // 22:58 on 2026-11-30: 40 minutes inside that day
    for m in 0..40 {
        writer.incr(
            "page.views",
            &[("page_id", "batched")],
            m + 1,
            start + m * 60,
        );
    }
    let report = writer.flusher.flush_now().await;
    assert_eq!(
        (report.rows, report.writes, report.applied),
        (40, 4, 4),
        "three minute batches and one day row: {report:?}"
    );
    for m in 0..40 {
        let (day, minute) = day_and_minute(start + m * 60);
        let condition = format!("page_id = 'batched' AND day = '{day}' AND minute = {minute}");
        assert_eq!(
            store
                .cell("metrics.views_by_minute", "views", &condition)
                .await,
            Some(m + 1),
            "{day} minute {minute}"
        );
    }
    assert_eq!(
        store
            .cell(
                "metrics.views_by_day",
                "views",
                "page_id = 'batched' AND month = '2026-11' AND day = '2026-11-30'"
            )
            .await,
        Some(40 * 41 / 2)
    );
    store.shutdown().await;
}

/// Seed 000: ten application instances each see 200 views a second on one page. With a
/// five-second flush, the store sees two writes a second per table instead of 2,000.
/// Time is injected: 20 simulated seconds, counted in writes, not wall time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_writers_at_200_per_second_make_two_writes_per_second_per_table() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    let store = start_cqlsim(
        &mut config,
        "counts the write requests that reach the store",
    )
    .await;
    let server = store.sim();
    let mut writers = Vec::new();
    for i in 0..10 {
        let mut c = config.clone();
        c.state.dir = dir.path().join(format!("w{i}"));
        writers.push(Writer::start(&c).await);
    }
    server.reset_stats();
    let start = T0 - 600; // 23:48:00, inside one minute partition per 60 s
    for second in 0..20 {
        for writer in &writers {
            for _ in 0..200 {
                writer.incr("page.views", &[("page_id", "hot")], 1, start + second);
            }
        }
        if second % 5 == 4 {
            for writer in &mut writers {
                writer.flusher.flush_now().await;
            }
        }
    }
    let stats = server.stats();
    let minute = stats.table("metrics", "views_by_minute");
    let day = stats.table("metrics", "views_by_day");
    // 10 writers x 4 flushes = 40 writes in 20 s = 2 per second, per table.
    assert_eq!((minute.write_requests, day.write_requests), (40, 40));
    assert_eq!(
        store.table_sum("metrics.views_by_minute", "views").await,
        40_000
    );
    assert_eq!(
        store.table_sum("metrics.views_by_day", "views").await,
        40_000
    );
    store.shutdown().await;
}
