//! `countersink migrate`: read-and-increment from one configuration's tables into
//! another's (see [`crate::ops::migrate`]).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::bucket::Day;
use crate::config::{Config, ConsistencyLevel};
use crate::ops::migrate::{MigrateError, Migration, Options, Progress};

use super::Failure;

/// The flags of `migrate`.
#[derive(Debug, Args)]
pub(super) struct MigrateArgs {
    /// The source's config file (its store and the family's tables).
    #[arg(long, value_name = "FILE")]
    from: PathBuf,
    /// The target's config file (its store and the family's tables, which must exist; the
    /// job table is created beside its minute table).
    #[arg(long, value_name = "FILE")]
    to: PathBuf,
    /// The family, by name, in both files (`generic` for the generic tables).
    #[arg(long, value_name = "NAME")]
    family: String,
    /// First UTC day migrated (minute partitions of that day on, day rows of that day on).
    #[arg(long, value_name = "YYYY-MM-DD", value_parser = super::args::day)]
    day_from: Option<Day>,
    /// Last UTC day migrated.
    #[arg(long, value_name = "YYYY-MM-DD", value_parser = super::args::day)]
    day_to: Option<Day>,
    /// The job id: the same id resumes the same job [default: derived from the tables, the
    /// family and the range, printed at start].
    #[arg(long, value_name = "ID")]
    job: Option<String>,
    /// Compare source, target and the job table; change nothing.
    #[arg(long)]
    verify_only: bool,
    /// Migrate even while the source changes (what arrives later is not carried over).
    #[arg(long)]
    allow_live: bool,
    /// How long the source's recent partitions must stay unchanged before a migration
    /// starts (checked when the range reaches yesterday or later).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = super::args::parse_duration)]
    quiet_period: Duration,
    /// How long after an earlier run's intent a chunk with an unknown outcome may be
    /// resolved by reading the target (longer than any counter write timeout).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = super::args::parse_duration)]
    settle: Duration,
    /// Partitions migrated at once.
    #[arg(long, value_name = "N", default_value_t = 16)]
    concurrency: usize,
    /// Consistency of the source and target reads (resolution reads are at ALL).
    #[arg(long, value_name = "LEVEL", default_value = "local_quorum", value_parser = super::args::consistency)]
    consistency: ConsistencyLevel,
    /// `text` or `json`.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    format: String,
}

/// Runs, resumes or verifies the job. Exit 0: every partition is migrated (or, with
/// `--verify-only`, equal); 3: some chunk's outcome is unknown, failed, or (verify) a
/// partition differs; 2: bad arguments, or the source is live.
pub(super) async fn run(args: MigrateArgs) -> Result<(), Failure> {
    let load = |path: &PathBuf| -> Result<Config, Failure> {
        let config = Config::from_file(path).map_err(Failure::usage)?;
        config.validate().map_err(Failure::usage)?;
        Ok(config)
    };
    let (from, to) = (load(&args.from)?, load(&args.to)?);
    if let (Some(a), Some(b)) = (args.day_from, args.day_to)
        && a > b
    {
        return Err(Failure::usage("--day-from is after --day-to"));
    }
    let options = Options {
        family: args.family.clone(),
        day_from: args.day_from,
        day_to: args.day_to,
        job: args.job.clone(),
        allow_live: args.allow_live,
        quiet_period: args.quiet_period,
        settle: args.settle,
        concurrency: args.concurrency,
        consistency: args.consistency,
    };
    let migration = Migration::open(from, to, options).await.map_err(failure)?;
    let terminal = std::io::stderr().is_terminal();
    eprintln!("countersink: job {}", migration.job());
    if args.verify_only {
        let report = migration
            .verify(&|n| {
                if terminal {
                    eprint!("\rcompared {n} partitions");
                }
            })
            .await
            .map_err(failure)?;
        if terminal {
            eprintln!();
        }
        if args.format == "json" {
            println!(
                "{}",
                serde_json::to_string(&report).map_err(Failure::other)?
            );
        } else {
            for d in &report.differences {
                println!(
                    "{}\t{}\t{}",
                    d.status,
                    d.partition.describe(),
                    if d.target_equals_source {
                        "target equals source".to_owned()
                    } else {
                        format!("{} rows differ", d.rows_differing)
                    }
                );
            }
            println!(
                "{} partitions compared: {} equal, {} not",
                report.partitions,
                report.equal,
                report.differences.len()
            );
        }
        return if report.differences.is_empty() {
            Ok(())
        } else {
            Err(Failure::with_code(
                3,
                format!(
                    "{} partitions are not known to be equal",
                    report.differences.len()
                ),
            ))
        };
    }
    if migration.check_quiet().await.map_err(failure)? {
        eprintln!(
            "countersink: the source stayed unchanged for {:?}",
            args.quiet_period
        );
    }
    let show = |p: &Progress| {
        if terminal {
            eprint!(
                "\r{} partitions: {} applied, {} skipped, {} failed",
                p.partitions, p.applied, p.skipped, p.failed
            );
        }
    };
    let report = migration.run(&show).await.map_err(failure)?;
    if terminal {
        eprintln!();
    }
    if args.format == "json" {
        println!(
            "{}",
            serde_json::to_string(&report).map_err(Failure::other)?
        );
    } else {
        let c = &report.counts;
        println!(
            "job {}: {} partitions; chunks: {} applied, {} already applied, {} resolved applied, {} resolved not applied and sent again, {} failed, {} unknown",
            report.job,
            c.partitions,
            c.applied,
            c.skipped,
            c.resolved_applied,
            c.resolved_resent,
            c.failed,
            report.unknown.len()
        );
        for (part, why) in &report.unknown {
            println!("unknown\t{part}\t{why}");
        }
        for (part, why) in &report.not_applied {
            println!("not applied\t{part}\t{why}");
        }
    }
    if report.unknown.is_empty() && report.not_applied.is_empty() {
        Ok(())
    } else {
        Err(Failure::with_code(
            3,
            "some chunks are not applied: rerun the same command (definite failures are sent again; unknown outcomes are resolved against the target or reported)",
        ))
    }
}

fn failure(error: MigrateError) -> Failure {
    match error {
        MigrateError::Usage(_) | MigrateError::Live(_) => Failure::usage(error),
        MigrateError::Target(ref target)
            if matches!(**target, crate::sink::cql::CqlSinkError::Schema(_)) =>
        {
            Failure::usage(error)
        }
        MigrateError::Read(crate::ops::read::ReadError::Schema(_)) => Failure::usage(error),
        other => Failure::other(other),
    }
}
