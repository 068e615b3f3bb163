//! `countersink prune`: whole-partition retention (see [`crate::ops::prune`]).

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use crate::bucket::{self, Day};
use crate::ops::prune::{self, PruneError, TablePrune};
use crate::sink::cql::session;
use crate::vocabulary::Granularity;

use super::Failure;
use super::store_args::StoreArgs;

/// The flags of `prune`.
#[derive(Debug, Args)]
pub(super) struct PruneArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The family (`generic` for the generic tables).
    #[arg(long, value_name = "NAME")]
    family: String,
    /// The cutoff: minute and hour partitions of days before it go, and day partitions of
    /// months that end before it (a month holding the cutoff stays whole). An all-time
    /// total table has no time to prune by and is never pruned.
    #[arg(long, value_name = "YYYY-MM-DD", value_parser = super::args::day)]
    before: Day,
    /// Which tables: `minute`, `hour`, `day`, or `both` (every table of the family
    /// but an all-time total).
    #[arg(long, default_value = "both", value_parser = ["minute", "hour", "day", "both"])]
    table: String,
    /// Only report what would be deleted.
    #[arg(long)]
    dry_run: bool,
    /// Delete without asking (required when stdin is not a terminal).
    #[arg(long)]
    yes: bool,
    /// The youngest cutoff allowed, counted back from today (at least 2 days; the
    /// default is `ops::prune::DEFAULT_MIN_AGE`).
    #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = super::args::parse_duration)]
    min_age: Duration,
}

/// Scans, reports, asks (unless `--yes`), deletes.
pub(super) async fn run(args: PruneArgs) -> Result<(), Failure> {
    let config = args.store.load()?;
    let today = Day((bucket::unix_secs(std::time::SystemTime::now()) / 86_400) as u32);
    prune::check_cutoff(args.before, today, args.min_age).map_err(Failure::usage)?;
    let families = crate::family::Families::from_config(&config)?;
    let family = families
        .by_name(&args.family)
        .ok_or_else(|| Failure::usage(format!("no family is called `{}`", args.family)))?;
    if !args.dry_run && !args.yes {
        confirm(&args, &family.name)?;
    }
    let kinds: Vec<Granularity> = match Granularity::parse(&args.table) {
        Some(only) => vec![only],
        None => family
            .granularities()
            .filter(|&g| g != Granularity::Total)
            .collect(),
    };
    if let Some(&missing) = kinds.iter().find(|&&g| !family.has(g)) {
        return Err(Failure::usage(format!(
            "family `{}` has no {} table",
            family.name,
            missing.as_str()
        )));
    }
    let session = Arc::new(
        session::connect(&config.store)
            .await
            .map_err(Failure::other)?,
    );
    let terminal = std::io::stderr().is_terminal();
    let mut days = std::collections::BTreeSet::new();
    for &kind in &kinds {
        let mut progress = |rows: u64| {
            if terminal {
                eprint!("\rscanning {}: {rows} rows", kind.as_str());
            }
        };
        let (report, minute_days) = prune::prune_table(
            &session,
            &config,
            family,
            kind,
            args.before,
            args.dry_run,
            &mut progress,
        )
        .await
        .map_err(prune_failure)?;
        if terminal {
            eprintln!();
        }
        print_report(&report, args.before, args.dry_run);
        days.extend(minute_days);
    }
    if config.key_index.enabled && kinds.contains(&Granularity::Minute) && !days.is_empty() {
        if args.dry_run {
            println!(
                "key index: would delete the rows of {} days of `{}`",
                days.len(),
                family.name
            );
        } else {
            let partitions = prune::prune_key_index(&session, &config, &family.name, &days)
                .await
                .map_err(prune_failure)?;
            println!(
                "key index: deleted {partitions} partitions ({} days of `{}`)",
                days.len(),
                family.name
            );
        }
    }
    Ok(())
}

fn print_report(report: &TablePrune, before: Day, dry_run: bool) {
    let verb = if dry_run { "would delete" } else { "deleted" };
    let count = if dry_run { report.old } else { report.deleted };
    let range = report
        .range
        .as_ref()
        .map(|(low, high)| format!(" ({low} .. {high})"))
        .unwrap_or_default();
    println!(
        "{}: {verb} {count} of {} partitions before {}{range}; {} rows scanned",
        report.table,
        report.partitions,
        bucket::format_date(before.date()),
        report.rows_scanned
    );
}

/// Asks on a terminal; refuses otherwise.
fn confirm(args: &PruneArgs, family: &str) -> Result<(), Failure> {
    if !std::io::stdin().is_terminal() {
        return Err(Failure::usage(
            "prune deletes data: pass --yes (or --dry-run to see what would go)",
        ));
    }
    eprint!(
        "Delete the {} partitions of family `{family}` before {}? [y/N] ",
        args.table,
        bucket::format_date(args.before.date())
    );
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin()
        .read_line(&mut answer)
        .map_err(Failure::other)?;
    if matches!(answer.trim(), "y" | "Y" | "yes") {
        Ok(())
    } else {
        Err(Failure::usage("not confirmed; nothing deleted"))
    }
}

fn prune_failure(error: PruneError) -> Failure {
    match error {
        PruneError::Read(crate::ops::read::ReadError::Schema(_)) => Failure::usage(error),
        other => Failure::other(other),
    }
}
