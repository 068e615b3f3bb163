//! `reconcile --slice I/N` and `reconcile merge`: the parts of a day, each read alone and
//! written as a partial report, merge into the report a single run gives, key by key and
//! count by count, whatever the number of parts; a missing or repeated part is refused.

use countersink::bucket::Day;
use countersink::ops::reconcile::{self, Options, Report};

use crate::common::run_cli;
use crate::cql_reconcile::{day, start_streamed, streamed_plan, write_plan};

/// A run over `day`, or over its part `slice` (index, count).
fn options(day: Day, slice: Option<(u16, u16)>) -> Options {
    Options {
        slice,
        ..crate::cql_reconcile::run_options(day, 16)
    }
}

/// `reconcile merge FILES --format json`: its exit code and merged reports (none when it
/// refused them).
fn merge(files: &[std::path::PathBuf]) -> (Option<i32>, Vec<Report>, String) {
    let mut args = vec![
        "reconcile".to_owned(),
        "merge".into(),
        "--format".into(),
        "json".into(),
    ];
    args.extend(files.iter().map(|f| f.display().to_string()));
    let out = run_cli(args);
    let reports = serde_json::from_slice(&out.stdout).unwrap_or_default();
    (
        out.status.code(),
        reports,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// 2 000 keys, some drifting (an outside writer, a lost ledger row, lost counter
/// writes): the day read in 2, 4 and 16 parts, each part a JSON file as `--slice` writes
/// it, merged by the binary: the same summary, the same listed keys, the same exit code
/// (3: unexplained drift) as the whole day read at once. Each part reads only its keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_parts_of_a_day_merge_into_the_single_runs_report() {
    let dir = tempfile::tempdir().unwrap();
    let (config, store, session) = start_streamed(dir.path()).await;
    let day = Day(day().0 - 5);
    write_plan(store.sim(), &config, day, &streamed_plan());
    assert_eq!(reconcile::slices(&config), 16);
    let families = countersink::family::Families::from_config(&config).unwrap();
    let generic = families.by_name("generic").unwrap();
    let whole = reconcile::reconcile(&session, &config, generic, &options(day, None), &|_| {})
        .await
        .unwrap();
    assert!(
        whole.summary.keys > 1_900 && !whole.passes(),
        "{:?}",
        whole.summary
    );
    assert!(whole.slice.is_none());
    for parts in [2_u16, 4, 16] {
        let mut files = Vec::new();
        let mut keys = 0;
        for index in 0..parts {
            let part = reconcile::reconcile(
                &session,
                &config,
                generic,
                &options(day, Some((index, parts))),
                &|_| {},
            )
            .await
            .unwrap();
            assert!(
                part.summary.keys < whole.summary.keys,
                "part {index}/{parts} read only its keys"
            );
            keys += part.summary.keys;
            let file = dir.path().join(format!("part-{index}-of-{parts}.json"));
            std::fs::write(&file, serde_json::to_string_pretty(&vec![part]).unwrap()).unwrap();
            files.push(file);
        }
        assert_eq!(
            keys, whole.summary.keys,
            "{parts} parts: every key in one part"
        );
        let (code, merged, stderr) = merge(&files);
        assert_eq!(
            code,
            Some(3),
            "{parts} parts: unexplained drift fails the merge: {stderr}"
        );
        assert_eq!(merged.len(), 1);
        let merged = &merged[0];
        assert_eq!(merged.summary, whole.summary, "{parts} parts");
        assert_eq!(merged.keys, whole.keys, "{parts} parts");
        assert_eq!(
            (merged.closed, &merged.day, &merged.family),
            (whole.closed, &whole.day, &whole.family)
        );

        if parts == 4 {
            let (code, merged, stderr) = merge(&files[1..]);
            assert_eq!(code, Some(2), "a missing part is refused");
            assert!(
                merged.is_empty() && stderr.contains("slices [0] of 4"),
                "{stderr}"
            );
            let mut repeated = files.clone();
            repeated.push(files[2].clone());
            let (code, _, stderr) = merge(&repeated);
            assert_eq!(code, Some(2), "a repeated part is refused");
            assert!(
                stderr.contains("slice 2/4") && stderr.contains("twice"),
                "{stderr}"
            );
        }
    }
    // `--close` per part closes each key once: the parts' rows add up to the whole day's.
    let close = |part| {
        let (session, config) = (&session, &config);
        async move {
            reconcile::closed::close_day(session, config, generic, day, &[], part, 0, false)
                .await
                .unwrap()
                .written
        }
    };
    let all = close(None).await;
    let mut parts = 0;
    for index in 0..4 {
        let written = close(Some((index, 4))).await;
        assert!(
            written > 0 && written < all,
            "part {index}: {written} of {all}"
        );
        parts += written;
    }
    assert_eq!(parts, all);
    // A whole day's report is not a part.
    let file = dir.path().join("whole.json");
    std::fs::write(&file, serde_json::to_string(&vec![whole]).unwrap()).unwrap();
    let (code, _, stderr) = merge(&[file]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("not a slice's"), "{stderr}");
    store.shutdown().await;
}
