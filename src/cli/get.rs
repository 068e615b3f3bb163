//! `countersink get`: read a count back, summing shards (concurrently when they are
//! separate partitions) and the writers of `writer_totals` families, at a chosen
//! consistency.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use crate::bucket::{self, Day};
use crate::config::{Config, ConsistencyLevel};
use crate::epoch::EpochRegistry;
use crate::family::Families;
use crate::ops::read::{self, ReadError, Reader};
use crate::sink::cql::session;
use crate::telemetry::OperationsMetrics;
use crate::vocabulary::Granularity;
use scylla::client::session::Session;

use super::Failure;

/// The flags of `get`.
#[derive(Debug, Args)]
pub(super) struct GetArgs {
    /// Config file, to know configured families (and their shards).
    #[arg(long, env = "COUNTERSINK_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// A contact point; repeat for several [default: from the config, else 127.0.0.1:9042].
    #[arg(
        long = "contact-point",
        env = "COUNTERSINK_CONTACT_POINTS",
        value_name = "HOST:PORT",
        value_delimiter = ','
    )]
    contact_points: Vec<String>,
    /// Keyspace of the generic tables.
    #[arg(long, env = "COUNTERSINK_KEYSPACE", value_name = "KS")]
    keyspace: Option<String>,
    /// The metric name.
    #[arg(value_name = "NAME")]
    name: String,
    /// A tag, `key:value` (or `key` for a tag without value); repeat for several.
    #[arg(long = "tag", value_name = "K:V")]
    tags: Vec<String>,
    /// The UTC day, `YYYY-MM-DD` [default: today].
    #[arg(long, value_name = "YYYY-MM-DD")]
    day: Option<String>,
    /// Print the minute series of the day instead of its total.
    #[arg(long)]
    minutes: bool,
    /// Print the hour series of the day (`YYYY-MM-DDTHH:00Z value` per hour with data),
    /// from the family's hour table.
    #[arg(long, conflicts_with_all = ["minutes", "total"])]
    hours: bool,
    /// Print the all-time total, from the family's total table (`--day` is ignored).
    #[arg(long, conflicts_with = "minutes")]
    total: bool,
    /// Print the exact total (an exact family): the closed day's row, else the sum of
    /// its delta ledger rows.
    #[arg(long, conflicts_with_all = ["minutes", "hours", "total"])]
    exact: bool,
    /// Read consistency: `one` (display), `local_quorum` (what the default write
    /// consistency acknowledged), `quorum`, `local_one` or `all`.
    #[arg(long, value_name = "LEVEL", default_value = "local_quorum", value_parser = super::args::consistency)]
    consistency: ConsistencyLevel,
    /// The epoch to read, for a family with an epoch column (its start minute, as
    /// `countersink reset` printed it; 0 before the first reset) [default: the epoch in
    /// force at the end of the day, or now for today].
    #[arg(long, value_name = "N")]
    epoch: Option<i32>,
}

/// Prints the day total, or one `YYYY-MM-DDTHH:MMZ value` line per minute with data. Sums
/// shards, and the writers of `writer_totals` families (see [`crate::ops::read`]).
pub(super) async fn run(args: GetArgs) -> Result<(), Failure> {
    let mut config = match &args.config {
        Some(path) => Config::from_file(path).map_err(Failure::usage)?,
        None => Config::default(),
    };
    if !args.contact_points.is_empty() {
        config.store.contact_points = args.contact_points.clone();
    }
    if let Some(keyspace) = &args.keyspace {
        config.store.keyspace = keyspace.clone();
    }
    let families = Families::from_config(&config)?;
    let day = match &args.day {
        Some(text) => super::args::day(text).map_err(Failure::usage)?,
        None => Day((bucket::unix_secs(std::time::SystemTime::now()) / 86_400) as u32),
    };
    let tags: Vec<(&str, &str)> = args
        .tags
        .iter()
        .map(|t| t.split_once(':').unwrap_or((t.as_str(), "")))
        .collect();
    let mut counter = read::resolve(&families, &args.name, &tags).map_err(read_failure)?;
    let session = Arc::new(
        session::connect(&config.store)
            .await
            .map_err(Failure::other)?,
    );
    if args.exact {
        let family = families
            .by_name(&counter.family)
            .filter(|f| f.exact)
            .ok_or_else(|| {
                Failure::usage(format!(
                    "family `{}` keeps no exact totals (exact = true)",
                    counter.family
                ))
            })?;
        let (totals, source) = crate::ops::reconcile::closed::exact_value(
            &session,
            &config,
            family,
            &counter.keys,
            day,
        )
        .await
        .map_err(read_failure)?;
        eprintln!(
            "exact, from {}",
            match source {
                crate::ops::reconcile::closed::ExactSource::Closed => "the closed day",
                crate::ops::reconcile::closed::ExactSource::Ledger => "the delta ledger",
            }
        );
        println!("{}", totals.get(&counter.column).copied().unwrap_or(0));
        return Ok(());
    }
    counter.epoch = epoch_to_read(&config, &families, &session, &counter, day, args.epoch).await?;
    let reader = Reader::new(session);
    let kind = if args.hours {
        Granularity::Hour
    } else if args.total {
        Granularity::Total
    } else if args.minutes {
        Granularity::Minute
    } else {
        Granularity::Day
    };
    let series = reader
        .series(&families, &counter, kind, day, args.consistency)
        .await
        .map_err(read_failure)?;
    let date = bucket::format_date(day.date());
    match kind {
        Granularity::Minute => {
            for (minute, value) in series {
                println!("{date}T{:02}:{:02}Z {value}", minute / 60, minute % 60);
            }
        }
        Granularity::Hour => {
            for (hour, value) in series {
                println!("{date}T{hour:02}:00Z {value}");
            }
        }
        Granularity::Day | Granularity::Total => {
            println!("{}", read::value_at(&series, kind, day));
        }
    }
    Ok(())
}

/// The epoch to read: the one asked, else (for a family with an epoch column) the one in
/// force at the end of `day` or now, from a read of the registry.
async fn epoch_to_read(
    config: &Config,
    families: &Families,
    session: &Session,
    counter: &read::CounterRef,
    day: Day,
    asked: Option<i32>,
) -> Result<Option<i32>, Failure> {
    let Some(family) = families.by_name(&counter.family) else {
        return Ok(None);
    };
    if family.epoch_column.is_none() {
        return match asked {
            Some(_) => Err(Failure::usage(format!(
                "family `{}` has no epoch column: --epoch does not apply",
                family.name
            ))),
            None => Ok(None),
        };
    }
    if asked.is_some() {
        return Ok(asked);
    }
    let now = bucket::unix_secs(std::time::SystemTime::now());
    let registry = EpochRegistry::new(config, families, &OperationsMetrics::default(), now)
        .ok_or_else(|| Failure::other("no epoch registry"))?;
    registry
        .refresh_at(session, families, now)
        .await
        .map_err(Failure::other)?;
    let series = crate::series::encode(counter.keys.iter().map(String::as_str));
    Ok(registry.read_epoch(family.id, &series, day, now))
}

/// Exit code 2 for what the operator asked wrongly (a missing tag, a table that does not
/// match), 1 for the store.
pub(super) fn read_failure(error: ReadError) -> Failure {
    match error {
        ReadError::Usage(_) | ReadError::Schema(_) | ReadError::Refused(_) => Failure::usage(error),
        ReadError::Store { .. } | ReadError::NoStore => Failure::other(error),
    }
}
