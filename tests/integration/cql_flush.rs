//! Exact totals through the driver, for both families and both tables, across a minute,
//! day and month boundary; write reduction (seed 000's numbers).

use crate::common::{T0, Writer, cell, config, day_and_minute, start_store, table_sum};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_totals_in_minute_and_day_tables_across_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    let server = start_store(&mut config).await;
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
    let views = |day: &str, minute: i64| {
        cell(
            &server,
            "metrics.views_by_minute",
            "views",
            &format!("page_id = 'home' AND day = '{day}' AND minute = {minute}"),
        )
    };
    assert_eq!(views("2026-11-30", 1438), Some(3));
    assert_eq!(views("2026-11-30", 1439), Some(4));
    assert_eq!(views("2026-12-01", 0), Some(5));
    assert_eq!(
        cell(
            &server,
            "metrics.views_by_day",
            "bytes",
            "page_id = 'home' AND month = '2026-11' AND day = '2026-11-30'"
        ),
        Some(7000)
    );
    assert_eq!(
        cell(
            &server,
            "metrics.views_by_day",
            "views",
            "page_id = 'home' AND month = '2026-12' AND day = '2026-12-01'"
        ),
        Some(5)
    );
    assert_eq!(
        cell(
            &server,
            "countersink.counts_by_minute",
            "value",
            "name = 'api.calls' AND tags = 'env:prod,route:/x' AND day = '2026-11-30' AND minute = 1439"
        ),
        Some(8)
    );
    assert_eq!(
        cell(
            &server,
            "countersink.counts_by_day",
            "value",
            "name = 'api.calls' AND tags = 'env:prod,route:/x' AND month = '2026-12' AND day = '2026-12-01'"
        ),
        Some(10)
    );
    assert_eq!(
        table_sum(&server, "countersink.counts_by_minute", "value"),
        24
    );
    assert_eq!(table_sum(&server, "countersink.counts_by_day", "value"), 24);
    let a = writer.accounting();
    assert!(a.is_balanced(), "{a:?}");
    assert_eq!(
        (a.minute.applied, a.day.applied),
        (a.minute.accepted, a.day.accepted)
    );
    server.shutdown().await.unwrap();
}

/// Seed 000: ten application instances each see 200 views a second on one page. With a
/// five-second flush, the store sees two writes a second per table instead of 2,000.
/// Time is injected: 20 simulated seconds, counted in writes, not wall time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_writers_at_200_per_second_make_two_writes_per_second_per_table() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    let server = start_store(&mut config).await;
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
        table_sum(&server, "metrics.views_by_minute", "views"),
        40_000
    );
    assert_eq!(table_sum(&server, "metrics.views_by_day", "views"), 40_000);
    server.shutdown().await.unwrap();
}
