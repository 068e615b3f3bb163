//! `countersink reconcile`: an outside writer is the one unexplained key (exit 3) and
//! `--repair` makes a closed day equal its ledger, equal unknown requests stay ambiguous
//! and distinct ones are resolved, on any store (the real node too; unknown writes come
//! from a fault proxy in front of it); against cqlsim's injected faults, every `resolved`
//! verdict matches what its request log says it applied, and a repair undoes unknown
//! writes that did not apply.
//!
//! Shared here: the exact configuration, the closed day, a second writer's
//! configuration, settling a writer, and running reconcile in process or as the binary;
//! the tests, by topic, in the modules below.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use countersink::bucket::{Day, format_date};
use countersink::config::Config;
use countersink::ops::reconcile::{self, Options, Report, verdict::Status};
use cqlsim::{FaultKind, FaultRule};

use crate::common::{
    FaultProxy, Store, Swallow, T0, Writer, config, day_and_minute, run_cli, start_cqlsim,
    start_store,
};

mod ledger;
mod outside_writers;
mod repair;
mod streamed;
mod unknown_requests;

pub(crate) use self::streamed::{start_streamed, streamed_plan, write_plan};

/// The opcode of a successful answer (CQL v4 RESULT).
const RESULT: u8 = 0x08;

/// 2026-11-30 22:58Z: a day long closed when the tests run.
const AT: i64 = T0 - 3600;

pub(crate) fn exact_config(state: &std::path::Path) -> Config {
    let mut config = config(state);
    for family in &mut config.families {
        family.exact = true;
    }
    config.store.request_timeout = Duration::from_millis(300);
    // The tests' days are fixed: a long TTL keeps `--repair` and `--close` allowed on
    // them whatever the date the tests run on.
    config.exact.ledger_ttl = LONG_TTL;
    config.exact.retry_backoff_min = Duration::from_millis(5);
    config.exact.retry_backoff_max = Duration::from_millis(20);
    config
}

/// The ledger TTL of the tests' configurations: ten years, so that the fixed day they
/// write is never refused to `--repair` and `--close` for its rows' expiry.
const LONG_TTL: Duration = Duration::from_secs(3650 * 86_400);

/// Writes the annotated example configuration, seed 000's `views` family made exact, as
/// a file for the binary against `store` (with the [`LONG_TTL`]).
fn write_exact_config(store: &Store, file: &std::path::Path) {
    write_exact_config_with_ttl(store, file, "3650d");
}

/// [`write_exact_config`] with `exact.ledger_ttl = ttl`.
fn write_exact_config_with_ttl(store: &Store, file: &std::path::Path, ttl: &str) {
    let mut example: toml::Table =
        toml::from_str(include_str!("../../../examples/countersink.toml")).unwrap();
    example["family"][0]
        .as_table_mut()
        .unwrap()
        .insert("exact".into(), true.into());
    example["exact"]
        .as_table_mut()
        .unwrap()
        .insert("ledger_ttl".into(), ttl.into());
    std::fs::write(file, store.config_file(&toml::to_string(&example).unwrap())).unwrap();
}

/// Runs `countersink reconcile --config FILE --day DAY EXTRA...` on the closed day, with
/// `file` as [`write_exact_config`] wrote it.
fn reconcile_cli(file: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "reconcile".to_owned(),
        "--config".into(),
        file.display().to_string(),
        "--day".into(),
        format_date(day().date()),
    ];
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    run_cli(args)
}

/// The configuration of a second writer beside `config`'s: the same settings and store,
/// its own state directory `dir` (another host, or a fresh one).
fn beside(config: &Config, dir: &std::path::Path) -> Config {
    let mut other = config.clone();
    other.state.dir = dir.to_owned();
    other
}

pub(crate) fn day() -> Day {
    Day((AT / 86_400) as u32)
}

/// Flushes until the aggregator and the exact ledger hold nothing more (about two
/// seconds at most), so what the writer was fed is all in the store.
pub(crate) async fn settle(writer: &mut Writer) {
    for _ in 0..40 {
        if writer.engine.aggregator().pending_rows() == 0
            && writer.ledger.exact_ledger().held_rows == 0
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        writer.flusher.flush_now().await;
    }
    panic!("still pending");
}

/// A whole run over `day`, `concurrency` reads at once, every key that is not ok listed,
/// no threshold, no tag filter.
pub(crate) fn run_options(day: Day, concurrency: usize) -> Options {
    Options {
        day,
        tags: Vec::new(),
        threshold: 0.0,
        now_unix_secs: countersink::bucket::unix_secs(std::time::SystemTime::now()),
        concurrency,
        max_listed: reconcile::MAX_LISTED,
        slice: None,
    }
}

async fn run_reconcile(writer: &Writer, config: &Config) -> Report {
    let families = countersink::family::Families::from_config(config).unwrap();
    let family = families.by_name("views").unwrap();
    let options = run_options(day(), 8);
    reconcile::reconcile(&writer.session, config, family, &options, &|_| {})
        .await
        .expect("reconcile")
}
