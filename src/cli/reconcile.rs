//! `countersink reconcile`: the exact families' counters against their delta ledger (see
//! [`crate::ops::reconcile`]). Exit 0 when no key's unexplained drift exceeds the
//! threshold, 3 otherwise (for cron and Kubernetes jobs).

use std::io::IsTerminal;
use std::sync::Arc;

use clap::Args;

use crate::bucket::{self, Day};
use crate::family::Families;
use crate::ops::reconcile::{self, Options, Report, verdict::Status};
use crate::sink::Sink;
use crate::sink::cql::session;

use super::Failure;
use super::store_args::StoreArgs;

/// The flags of `reconcile`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub(super) struct ReconcileArgs {
    /// `merge`: combine the partial reports of `--slice` runs.
    #[command(subcommand)]
    merge: Option<Merge>,
    #[command(flatten)]
    store: StoreArgs,
    /// The UTC day.
    #[arg(long, value_name = "YYYY-MM-DD", value_parser = super::args::day, required = true)]
    day: Option<Day>,
    /// One family [default: every family with `exact = true`].
    #[arg(long, value_name = "NAME")]
    family: Option<String>,
    /// Only keys with this key value, `column:value` (generic family: `name:NAME` or a
    /// tag); repeat for several.
    #[arg(long = "tag", value_name = "K:V")]
    tags: Vec<String>,
    /// `text` (keys that are not ok, then a summary) or `json` (every key).
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    format: String,
    /// Unexplained drift accepted per key, as a fraction of its exact total, column by
    /// column [default: `exact.reconcile_threshold`].
    #[arg(long, value_name = "FRACTION")]
    threshold: Option<f64>,
    /// Write the verdicts of `resolved` keys to the outcomes table.
    #[arg(long)]
    resolve: bool,
    /// Keep every key's exact total of the (closed) day in `exact_by_day`. A key whose
    /// row there already holds other totals is left as it is and named (exit 3), unless
    /// --overwrite-closed.
    #[arg(long)]
    close: bool,
    /// With --close: replace a closed row that holds other totals than the ledger's sum.
    #[arg(long, requires = "close")]
    overwrite_closed: bool,
    /// Write one corrective increment per drifting counter row of the (closed) day
    /// (`counter += exact - counter`), each recorded in the outcomes table; then
    /// reconcile again and report that.
    #[arg(long)]
    repair: bool,
    /// Stop waiting for a writer state directory lost for good (as `owed_by` names it:
    /// `writer~directory`): its `owed` mark of the day becomes `released`, and the rows
    /// its spill held are counted as never coming (a repair raises the counters to the
    /// ledger). Refused for a directory that owes nothing of the day. Repeat for several.
    #[arg(long, value_name = "OWNER")]
    release_owed: Vec<String>,
    /// With --repair: print the corrections, write nothing.
    #[arg(long, requires = "repair")]
    dry_run: bool,
    /// Only this part of the keys, `I/N` (N dividing the day's slices: 1, 2, 4, 8 or 16
    /// with the default bucket counts): a partial report, to merge with the other parts'
    /// (`reconcile merge`). Exits 0 once its report is written, whatever its verdicts:
    /// the merge decides. Not with --repair, which runs over the whole day.
    #[arg(long, value_name = "I/N", conflicts_with = "repair")]
    slice: Option<String>,
    /// Keys whose counters are read at once.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..))]
    concurrency: u16,
    /// With --repair: how long after an earlier repair of the day its writes may still be
    /// on their way (longer than any counter write timeout); the run waits that long
    /// after it before reading the counters, at ALL.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = super::args::parse_duration, requires = "repair")]
    settle: std::time::Duration,
}

/// Writes a `released` mark of `day` for each of `owners` that `report` (of `family`)
/// says owes rows of it; any other owner is refused before anything is written: a
/// mistyped name must not pass for a release.
async fn release_owed(
    config: &crate::config::Config,
    families: &Families,
    family: &crate::family::FamilyDef,
    day: Day,
    report: &Report,
    owners: &[String],
) -> Result<(), Failure> {
    if let Some(unknown) = owners.iter().find(|o| !report.owed_by.contains(o)) {
        return Err(Failure::usage(format!(
            "--release-owed {unknown}: no `owed` mark of {} names it for {} (owed by: {})",
            report.day,
            family.name,
            if report.owed_by.is_empty() {
                "nobody".to_owned()
            } else {
                report.owed_by.join(", ")
            }
        )));
    }
    let sink = crate::sink::cql::CqlSink::connect(&config.store, families)
        .await
        .map_err(Failure::other)?;
    let marks: Vec<_> = owners
        .iter()
        .map(|owner| crate::flush::owed::released_mark(&family.name, day, owner))
        .collect();
    match sink.write_outcomes(&marks).await {
        crate::sink::Outcome::Applied => {
            for owner in owners {
                eprintln!(
                    "{}: {} released: its owed rows of {} are counted as never coming",
                    family.name, owner, report.day
                );
            }
            Ok(())
        }
        other => Err(Failure::other(format!(
            "could not write the released marks ({other:?}); nothing else was done"
        ))),
    }
}

/// The subcommand of `reconcile`.
#[derive(Debug, clap::Subcommand)]
enum Merge {
    /// Combine the partial reports of `reconcile --slice I/N --format json` into the
    /// report, verdicts and exit code of a single run over the day (exit 3 on unexplained
    /// drift over the threshold); refuses a missing or repeated slice.
    Merge(MergeArgs),
}

/// Reconciles, prints, and fails with code 3 on unexplained drift over the threshold.
pub(super) async fn run(args: ReconcileArgs) -> Result<(), Failure> {
    if let Some(Merge::Merge(merge)) = args.merge {
        return run_merge(merge);
    }
    let Some(day) = args.day else {
        return Err(Failure::usage("--day is required"));
    };
    let config = args.store.load()?;
    let families = Families::from_config(&config)?;
    let selected: Vec<_> = match &args.family {
        Some(name) => {
            let family = families
                .by_name(name)
                .ok_or_else(|| Failure::usage(format!("no family is called `{name}`")))?;
            if !family.exact {
                return Err(Failure::usage(format!(
                    "family `{name}` keeps no exact totals (set exact = true)"
                )));
            }
            vec![family]
        }
        None => families.iter().filter(|f| f.exact).collect(),
    };
    if selected.is_empty() {
        return Err(Failure::usage(
            "no family keeps exact totals (exact = true)",
        ));
    }
    let threshold = args.threshold.unwrap_or(config.exact.reconcile_threshold);
    if !(0.0..=1.0).contains(&threshold) {
        return Err(Failure::usage(
            "--threshold must be a fraction between 0 and 1",
        ));
    }
    let tags = args
        .tags
        .iter()
        .map(|t| {
            t.split_once(':')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .ok_or_else(|| Failure::usage(format!("--tag {t}: expected K:V")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let slice = args
        .slice
        .as_deref()
        .map(|text| reconcile::slice::Slice::parse(text, reconcile::slices(&config)))
        .transpose()
        .map_err(Failure::usage)?;
    let now = bucket::unix_secs(std::time::SystemTime::now());
    if args.repair || args.close {
        // Once the day's ledger rows expire, the ledger sums to less than what was
        // written: a repair would take real counts off, a close keep a short total.
        if let Some(why) = reconcile::ledger_expiring(&config, day, now) {
            let what = if args.repair { "--repair" } else { "--close" };
            return Err(Failure::usage(format!("{what} refused: {why}")));
        }
    }
    let options = Options {
        day,
        tags,
        threshold,
        now_unix_secs: now,
        concurrency: usize::from(args.concurrency),
        max_listed: reconcile::MAX_LISTED,
        slice,
    };
    let session = Arc::new(
        session::connect(&config.store)
            .await
            .map_err(Failure::other)?,
    );
    let terminal = std::io::stderr().is_terminal();
    let line = ProgressLine::new(terminal);
    let progress = |p: reconcile::Progress| line.show(p);
    let mut reports = Vec::new();
    // Closed rows and corrections refused because a value is beyond i64.
    let mut refused = 0;
    for family in selected {
        let mut report = reconcile::reconcile(&session, &config, family, &options, &progress)
            .await
            .map_err(Failure::other)?;
        if !args.release_owed.is_empty() {
            release_owed(&config, &families, family, day, &report, &args.release_owed).await?;
            report = reconcile::reconcile(&session, &config, family, &options, &progress)
                .await
                .map_err(Failure::other)?;
        }
        if args.repair {
            let wait =
                reconcile::repair::settle_wait(&report, args.settle, std::time::SystemTime::now());
            if report.closed
                && let Some(wait) = wait
            {
                eprintln!(
                    "{}: waiting {:.0?} for the writes of an earlier repair to settle (--settle)",
                    family.name, wait
                );
                tokio::time::sleep(wait).await;
                report = reconcile::reconcile(&session, &config, family, &options, &progress)
                    .await
                    .map_err(Failure::other)?;
            }
            if !report.closed {
                return Err(Failure::usage(format!(
                    "{} is not closed yet: --repair only corrects closed days ({})",
                    report.day,
                    report.open_because.as_deref().unwrap_or("open")
                )));
            }
            let reader = crate::ops::read::Reader::new(session.clone());
            let mut corrections =
                reconcile::repair::plan(&session, &reader, &config, family, &report, day)
                    .await
                    .map_err(Failure::other)?;
            if !args.dry_run && !corrections.is_empty() {
                let sink = crate::sink::cql::CqlSink::connect(&config.store, &families)
                    .await
                    .map_err(Failure::other)?;
                reconcile::repair::apply(
                    &session,
                    &sink,
                    &config,
                    family,
                    day,
                    &mut corrections,
                    now.saturating_mul(1000),
                )
                .await
                // A refusal (the day's ledger began to expire during the run): exit 2.
                .map_err(super::get::read_failure)?;
            }
            for c in &corrections {
                println!(
                    "repair {:<7} {:<6} {}{} {:?}",
                    c.outcome,
                    c.granularity,
                    serde_json::to_string(&c.key).unwrap_or_default(),
                    c.minute.map(|m| format!(" minute {m}")).unwrap_or_default(),
                    c.deltas
                );
            }
            refused += corrections
                .iter()
                .filter(|c| c.outcome == reconcile::repair::BEYOND_I64)
                .count();
            let stray = corrections
                .iter()
                .filter(|c| c.outcome == reconcile::repair::MINUTE_OUT_OF_RANGE)
                .count();
            if stray > 0 {
                eprintln!(
                    "{stray} minute rows are not minutes of the day (outside 0 to 1439, written by someone else): not corrected, a correction would land on another day's row"
                );
            }
            refused += stray;
            let unknown = corrections
                .iter()
                .filter(|c| c.outcome == "unknown")
                .count();
            if unknown > 0 {
                eprintln!(
                    "{unknown} repairs have an unknown outcome: recorded as repair_unknown, never sent again"
                );
            }
            if !args.dry_run {
                report = reconcile::reconcile(&session, &config, family, &options, &progress)
                    .await
                    .map_err(Failure::other)?;
            }
        }
        if args.resolve {
            let written = reconcile::write_resolutions(
                &session,
                &config,
                &report,
                day,
                now.saturating_mul(1000),
            )
            .await
            .map_err(Failure::other)?;
            eprintln!("{}: {written} outcome rows resolved", family.name);
        }
        if args.close {
            if !report.closed {
                return Err(Failure::usage(format!(
                    "{} is not closed yet (see reconcile's `open`): --close waits for it",
                    report.day
                )));
            }
            let closed = reconcile::closed::close_day(
                &session,
                &config,
                family,
                day,
                &options.tags,
                options.slice,
                now.saturating_mul(1000),
                args.overwrite_closed,
            )
            .await
            .map_err(super::get::read_failure)?;
            eprintln!("{}: {} keys closed", family.name, closed.written);
            for why in &closed.beyond_i64 {
                eprintln!("{}: not closed: {why}", family.name);
            }
            for why in &closed.differing {
                eprintln!(
                    "{}: not closed again: {why} (--overwrite-closed replaces it)",
                    family.name
                );
            }
            refused += closed.beyond_i64.len() + closed.differing.len();
        }
        reports.push(report);
    }
    print_reports(&reports, &args.format)?;
    if refused > 0 {
        return Err(Failure::with_code(
            3,
            format!(
                "{refused} closed totals or corrections refused (beyond i64, a closed row that differs, or a minute out of range; listed above)"
            ),
        ));
    }
    if slice.is_some() {
        // A part's verdicts are the merge's to judge.
        return Ok(());
    }
    verdict(&reports, threshold)
}

fn print_reports(reports: &[Report], format: &str) -> Result<(), Failure> {
    match format {
        "json" => {
            let text = serde_json::to_string_pretty(reports).map_err(Failure::other)?;
            println!("{text}");
        }
        _ => reports.iter().for_each(print_text),
    }
    Ok(())
}

/// Exit 0 when no key's unexplained drift exceeds the threshold, 3 otherwise.
fn verdict(reports: &[Report], threshold: f64) -> Result<(), Failure> {
    if reports.iter().all(Report::passes) {
        Ok(())
    } else {
        let over: usize = reports.iter().map(|r| r.summary.over_threshold).sum();
        Err(Failure::with_code(
            3,
            format!("{over} keys with unexplained drift over the threshold ({threshold})"),
        ))
    }
}

/// The flags of `reconcile merge`.
#[derive(Debug, Args)]
pub(super) struct MergeArgs {
    /// The partial reports (`reconcile --slice I/N --format json`), one file each, every
    /// slice of each family-day exactly once; `-` reads one from standard input.
    #[arg(value_name = "FILE", required = true)]
    files: Vec<std::path::PathBuf>,
    /// `text` (keys that are not ok, then a summary) or `json`.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    format: String,
}

/// Merges partial reports into the report, verdicts and exit code of a single run.
pub(super) fn run_merge(args: MergeArgs) -> Result<(), Failure> {
    let mut parts = Vec::new();
    for file in &args.files {
        let text = if file.as_os_str() == "-" {
            std::io::read_to_string(std::io::stdin()).map_err(Failure::other)?
        } else {
            std::fs::read_to_string(file)
                .map_err(|e| Failure::usage(format!("{}: {e}", file.display())))?
        };
        let reports: Vec<Report> = serde_json::from_str(&text).map_err(|e| {
            Failure::usage(format!(
                "{}: not a report of `reconcile --slice I/N --format json`: {e}",
                file.display()
            ))
        })?;
        parts.extend(reports);
    }
    let threshold = parts
        .iter()
        .find_map(|r| r.slice.as_ref().map(|s| s.threshold))
        .unwrap_or_default();
    let merged = reconcile::slice::merge(parts, reconcile::MAX_LISTED)
        .map_err(|e| Failure::usage(e.to_string()))?;
    print_reports(&merged, &args.format)?;
    verdict(&merged, threshold)
}

/// The progress line of a long run on a terminal (stderr): keys done of the estimated
/// total, rate and time left, redrawn at most every half second. Silent when stderr is
/// not a terminal (cron, Kubernetes jobs, pipes).
struct ProgressLine {
    started: std::time::Instant,
    last: std::sync::Mutex<Option<std::time::Instant>>,
    on: bool,
}

impl ProgressLine {
    fn new(on: bool) -> ProgressLine {
        ProgressLine {
            started: std::time::Instant::now(),
            last: std::sync::Mutex::new(None),
            on,
        }
    }

    fn show(&self, progress: reconcile::Progress) {
        if !self.on {
            return;
        }
        let now = std::time::Instant::now();
        let done =
            progress.keys_done >= progress.keys_found && progress.slices_scanned >= progress.slices;
        {
            let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
            if !done && last.is_some_and(|t| now - t < std::time::Duration::from_millis(500)) {
                return;
            }
            *last = Some(now);
        }
        eprint!("\r{}\x1b[K", progress.line(now - self.started));
        if done {
            eprintln!();
        }
    }
}

fn print_text(report: &Report) {
    println!(
        "family {} day {}{}",
        report.family,
        report.day,
        if report.closed { "" } else { " (open)" }
    );
    if let Some(why) = &report.open_because {
        println!("open: {why}");
    }
    for key in report.keys.iter().filter(|k| k.status != Status::Ok) {
        let drift: Vec<String> = key
            .drift
            .iter()
            .filter(|(_, d)| **d != 0)
            .map(|(c, d)| format!("{c}={d:+}"))
            .collect();
        let mut line = format!(
            "{:<11} {:<6} {}  exact={:?} counter={:?} drift {}",
            key.status.as_str(),
            key.granularity,
            serde_json::to_string(&key.key).unwrap_or_default(),
            key.exact,
            key.counter,
            if drift.is_empty() {
                "0".to_owned()
            } else {
                drift.join(" ")
            },
        );
        if key.unknown_requests > 0 {
            line.push_str(&format!(" unknown_requests={}", key.unknown_requests));
        }
        for (request, applied) in &key.resolution {
            line.push_str(&format!(
                " {request}={}",
                if *applied { "applied" } else { "not_applied" }
            ));
        }
        println!("{line}");
    }
    let s = &report.summary;
    let statuses: Vec<String> = s.statuses.iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!(
        "keys {} ledger_rows {} exact {} counter minute={} day={} | {} | drift explained {} unexplained {} | unknowns resolved {} | over threshold {}",
        s.keys,
        s.ledger_rows,
        s.exact_total,
        s.counter_total.get("minute").copied().unwrap_or(0),
        s.counter_total.get("day").copied().unwrap_or(0),
        statuses.join(" "),
        s.drift_explained,
        s.drift_unexplained,
        s.unknowns_resolved,
        s.over_threshold,
    );
    if s.not_listed > 0 {
        println!(
            "{} more keys that are not ok are counted above but not listed",
            s.not_listed
        );
    }
    if s.unreadable_keys > 0 {
        println!(
            "{} keys are not a JSON array of texts (written by someone else): left out",
            s.unreadable_keys
        );
    }
}
