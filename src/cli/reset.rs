//! `countersink reset`: start a new epoch of a family (or of one key) instead of deleting
//! or decrementing counters (see [`crate::epoch`]).

use clap::Args;

use crate::bucket;
use crate::config::Config;
use crate::epoch::registry::{self, scope_of};
use crate::epoch::reset::{self, rfc3339};
use crate::family::{Families, TagSet};
use crate::sink::cql::session;

use super::Failure;
use super::store_args::StoreArgs;

/// The flags of `reset`.
#[derive(Debug, Args)]
pub(super) struct ResetArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The family to reset (it needs an `epoch_column`).
    #[arg(
        value_name = "FAMILY",
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    family: Option<String>,
    /// Reset one key only: its key tags, `key:value`; repeat for a family keyed by
    /// several columns.
    #[arg(long = "tag", value_name = "K:V", conflicts_with = "all")]
    tags: Vec<String>,
    /// Reset every family with an epoch column.
    #[arg(long)]
    all: bool,
    /// When the new epoch starts, RFC 3339 (`2026-12-01T13:00:00Z`), rounded up to a
    /// whole minute; at least `epochs.lead` from now [default: the first whole minute
    /// that far ahead of the moment the store is connected, plus its request timeout for
    /// the registry write].
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    at: Option<i64>,
    /// Why, kept in the registry.
    #[arg(long, value_name = "TEXT", default_value = "")]
    reason: String,
}

fn parse_time(text: &str) -> Result<i64, String> {
    time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .map(|t| t.unix_timestamp())
        .map_err(|e| format!("`{text}` is not an RFC 3339 time like 2026-12-01T13:00:00Z: {e}"))
}

/// The (family, scope) pairs a reset writes.
fn targets(args: &ResetArgs, config: &Config) -> Result<Vec<(String, String)>, Failure> {
    let families = Families::from_config(config)?;
    if args.all {
        let all: Vec<(String, String)> = families
            .iter()
            .filter(|f| f.epoch_column.is_some())
            .map(|f| (f.name.clone(), String::new()))
            .collect();
        if all.is_empty() {
            return Err(Failure::usage(
                "no family has an epoch_column: nothing to reset",
            ));
        }
        return Ok(all);
    }
    let name = args.family.as_deref().unwrap_or_default();
    let family = families
        .by_name(name)
        .ok_or_else(|| Failure::usage(format!("no family is called `{name}`")))?;
    if family.epoch_column.is_none() {
        return Err(Failure::usage(format!(
            "family `{name}` has no epoch_column: add one (and its column in both tables) to reset it; never decrement counters to zero or delete and reuse them"
        )));
    }
    if args.tags.is_empty() {
        return Ok(vec![(family.name.clone(), String::new())]);
    }
    let tags: Vec<(&str, &str)> = args
        .tags
        .iter()
        .map(|t| t.split_once(':').unwrap_or((t.as_str(), "")))
        .collect();
    if let Some((extra, _)) = tags
        .iter()
        .find(|(k, _)| !family.key_columns.iter().any(|c| c == k))
    {
        return Err(Failure::usage(format!(
            "`{extra}` is not a key column of `{name}` ({})",
            family.key_columns.join(", ")
        )));
    }
    let mut values = Vec::new();
    for column in &family.key_columns {
        match tags.as_slice().only_value_of(column) {
            Ok(Some(value)) if !value.is_empty() => values.push(value),
            Ok(_) => {
                return Err(Failure::usage(format!(
                    "a key reset names the whole key: give --tag {column}:VALUE"
                )));
            }
            Err(()) => {
                return Err(Failure::usage(format!(
                    "--tag {column} is given twice with different values"
                )));
            }
        }
    }
    Ok(vec![(family.name.clone(), scope_of(&values))])
}

/// Writes the epochs, then checks they were acknowledged in time.
pub(super) async fn run(args: ResetArgs) -> Result<(), Failure> {
    let config = args.store.load()?;
    let targets = targets(&args, &config)?;
    let lead = config.epochs.lead.as_secs() as i64;
    let now = || bucket::unix_secs(std::time::SystemTime::now());
    // An explicit start is checked before connecting: refusing it needs no store.
    let asked = reset::start_minute(now(), lead, args.at).map_err(Failure::usage)?;
    let session = session::connect(&config.store)
        .await
        .map_err(Failure::other)?;
    // The default start is chosen once connected (connecting must not eat into the lead),
    // with room for the registry write itself: it is acknowledged within the request
    // timeout or fails, so the acknowledgement still comes a lead before the start.
    let start = match args.at {
        Some(_) => asked,
        None => {
            let write_room = config.store.request_timeout.as_secs() as i64 + 1;
            reset::start_minute(now() + write_room, lead, None).map_err(Failure::usage)?
        }
    };
    for (family, scope) in &targets {
        registry::schedule(&session, &config, family, scope, start, &args.reason, now())
            .await
            .map_err(Failure::other)?;
        let whom = if scope.is_empty() {
            "every key".to_owned()
        } else {
            format!("key {scope}")
        };
        println!(
            "{family}: epoch {start} starts {} for {whom}; rows of that minute and later go to it",
            rfc3339(i64::from(start) * 60)
        );
    }
    reset::check_acknowledged(now(), lead, start).map_err(Failure::other)
}
