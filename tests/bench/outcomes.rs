//! `outcomes summary` over a 1M-record `unknown.jsonl` (run with
//! `cargo bench --bench outcomes`; `OUTCOMES_RECORDS=N` for another size). Not a
//! criterion bench: one pass over a file this size takes seconds, and peak memory is a
//! figure of its own.
//!
//! The log is written with the records a flush writes (views family: one key column,
//! two counter columns; 500 pages × 3 days × 1440 minutes; about 400 bytes a line).
//! Three passes over it, each the median of five runs, page cache warm:
//!
//! - `lines`: counting newlines (`memchr`), the I/O floor;
//! - `parse`: every line into a `WriteRecord` (serde), nothing else;
//! - `summary`: `ops::outcomes::scan` with the summary's grouping (what the command does).
//!
//! Peak RSS of the summary pass is read from `VmHWM` after resetting it
//! (`/proc/self/clear_refs`), so the writing of the file does not count.

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use countersink::ops::outcomes::{self, Summary};
use countersink::state::{ErrorInfo, RecordOutcome, WriteRecord};

fn main() {
    let records: u64 = std::env::var("OUTCOMES_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("unknown.jsonl");
    write_log(&path, records);
    let bytes = std::fs::metadata(&path).expect("log").len();
    println!(
        "unknown.jsonl: {records} records, {:.1} MiB ({} bytes a record)",
        bytes as f64 / (1 << 20) as f64,
        bytes / records.max(1)
    );

    let lines = median(|| {
        let mut reader = BufReader::with_capacity(256 << 10, std::fs::File::open(&path).unwrap());
        let mut n = 0_u64;
        loop {
            let buffer = reader.fill_buf().unwrap();
            if buffer.is_empty() {
                break;
            }
            n += memchr::memchr_iter(b'\n', buffer).count() as u64;
            let len = buffer.len();
            reader.consume(len);
        }
        assert_eq!(n, records);
    });
    let parse = median(|| {
        let reader = BufReader::with_capacity(256 << 10, std::fs::File::open(&path).unwrap());
        let mut n = 0_u64;
        for line in reader.split(b'\n') {
            let record: WriteRecord = serde_json::from_slice(&line.unwrap()).unwrap();
            n += record.deltas.len() as u64;
        }
        assert_eq!(n, 2 * records);
    });
    reset_peak_rss();
    let rss_before = status_kib("VmRSS:");
    let summary = median(|| {
        let mut summary = Summary::default();
        let report = outcomes::scan(dir.path(), |source, r| summary.add(source, r)).unwrap();
        assert_eq!(report.files[0].records, records);
        let total: u64 = summary.groups().values().map(|s| s.records).sum();
        assert_eq!(total, records);
    });
    let peak = status_kib("VmHWM:");
    for (name, seconds) in [("lines", lines), ("parse", parse), ("summary", summary)] {
        println!(
            "{name:>8}: {:.3} s median of 5, {:.0} records/s, {:.0} MiB/s",
            seconds,
            records as f64 / seconds,
            bytes as f64 / (1 << 20) as f64 / seconds
        );
    }
    println!(
        "summary / parse: {:.2}x the time of parsing alone",
        summary / parse
    );
    println!(
        "peak RSS during the summary passes: {} KiB (RSS before them: {} KiB)",
        peak, rss_before
    );
}

/// Writes `n` unknown records as the flusher writes them.
fn write_log(path: &Path, n: u64) {
    let mut out = BufWriter::new(std::fs::File::create(path).expect("create"));
    let error = ErrorInfo {
        kind: "write_timeout".into(),
        text: "Database returned an error: Not enough nodes responded to the write request in time to satisfy required consistency level (consistency: LocalQuorum, received: 1, required: 2, write_type: Counter)".into(),
    };
    for i in 0..n {
        let page = i % 500;
        let minute = (i / 500) % 1440;
        let day = 28 + (i / (500 * 1440)) % 3;
        let record = WriteRecord {
            total: None,
            key_hex: None,
            time: format!("2026-11-{day:02}T12:00:05Z"),
            writer: "web-1-3f9c2a1b".into(),
            incarnation: 4,
            flush_seq: i / 1000,
            request_id: format!("web-1-3f9c2a1b/4/{}/{}", i / 1000, i % 1000),
            row: 0,
            outcome: RecordOutcome::Unknown,
            family: "views".into(),
            table: "metrics.views_by_minute".into(),
            granularity: "minute".into(),
            key: [("page_id".to_string(), format!("page-{page}"))].into(),
            shard: None,
            epoch: None,
            day: format!("2026-11-{day:02}"),
            minute: Some(minute as i16),
            hour: None,
            month: None,
            deltas: [
                ("views".to_string(), (i % 7) as i64 + 1),
                ("bytes".to_string(), (i % 9000) as i64 + 100),
            ]
            .into(),
            error: Some(error.clone()),
        };
        serde_json::to_writer(&mut out, &record).expect("write");
        out.write_all(b"\n").expect("write");
    }
    out.flush().expect("flush");
}

/// Median wall time of five runs, in seconds.
fn median(mut run: impl FnMut()) -> f64 {
    let mut times: Vec<f64> = (0..5)
        .map(|_| {
            let start = Instant::now();
            run();
            start.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[2]
}

/// Resets the kernel's peak-RSS mark of this process (Linux: `5` to `clear_refs`).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
