//! `countersink get`: read a count back, summing shards and writers.

use std::path::PathBuf;

use clap::Args;

use crate::bucket::{self, Day};
use crate::config::Config;
use crate::family::Families;
use crate::readback::{self, ReadError};
use crate::sink::cql::session;
use crate::vocabulary::Granularity;

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
}

/// Prints the day total, or one `YYYY-MM-DDTHH:MMZ value` line per minute with data. Sums
/// shards, and the writers of `writer_totals` families (see [`crate::readback`]).
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
        Some(text) => bucket::parse_date(text)
            .and_then(Day::from_date)
            .ok_or_else(|| {
                Failure::usage(format!("--day `{text}` is not a date like 2026-11-30"))
            })?,
        None => Day((bucket::unix_secs(std::time::SystemTime::now()) / 86_400) as u32),
    };
    let tags: Vec<(&str, &str)> = args
        .tags
        .iter()
        .map(|t| t.split_once(':').unwrap_or((t.as_str(), "")))
        .collect();
    let located = readback::locate(&families, &args.name, &tags).map_err(Failure::usage)?;
    let session = session::connect(&config.store)
        .await
        .map_err(Failure::other)?;
    let table = if args.minutes {
        Granularity::Minute
    } else {
        Granularity::Day
    };
    let reading = readback::read(&session, &located, table, day)
        .await
        .map_err(|error| match error {
            ReadError::Query { .. } => Failure::other(error),
            _ => Failure::usage(error),
        })?;
    if args.minutes {
        for (minute, value) in &reading.buckets {
            println!(
                "{}T{:02}:{:02}Z {value}",
                bucket::format_date(day.date()),
                minute / 60,
                minute % 60
            );
        }
    } else {
        println!("{}", reading.get(i64::from(day.0)));
    }
    Ok(())
}
