//! Settings of the operator features around the counter tables: the read path
//! (`[read]`), the key index (`[key_index]`) and leaderboards (`[[leaderboard]]`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::validate::{ConfigError, check_table_name, is_plain_identifier};
use super::{Config, ConsistencyLevel, duration};

/// `[read]`: how the in-process read API ([`crate::Recorder::read_day`]) reads counters.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReadConfig {
    /// Consistency of reads. ONE suits display (seed 000): a replica that missed an
    /// increment reads low until repair, and the next refresh is usually right.
    /// Default `"one"`.
    pub consistency: ConsistencyLevel,
    /// How long a summed value is served from memory before it is read again (seed 001:
    /// cache the sum of the shards for a few seconds). `"0s"` turns the cache off.
    /// Default `"5s"`.
    #[serde(with = "duration")]
    pub cache_ttl: Duration,
    /// Most values kept in the cache; the oldest is evicted beyond. Default `10000`.
    pub cache_max_entries: usize,
}

impl Default for ReadConfig {
    fn default() -> Self {
        ReadConfig {
            consistency: ConsistencyLevel::One,
            cache_ttl: Duration::from_secs(5),
            cache_max_entries: 10_000,
        }
    }
}

/// `[key_index]`: the keys written per family and day, in a regular table, so that jobs
/// (leaderboards, reconciliation) enumerate keys without scanning counter tables.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct KeyIndexConfig {
    /// Whether this writer records the keys it flushes. Every writer of a family must
    /// have it on for a leaderboard of that family to see every key. Default `false`.
    pub enabled: bool,
    /// The regular table, `table` or `keyspace.table` (in `store.keyspace` when written
    /// without one). Default `"key_index"`.
    pub table: String,
    /// Partitions per family and day: a key goes to bucket `hash(key) % buckets`, so one
    /// day of a family with millions of keys is not one huge partition. Readers read every
    /// bucket. Changing it later hides the keys written before from readers. Default `16`.
    pub buckets: u16,
    /// Keys waiting to be written (new keys of the day, and failed writes being retried);
    /// beyond it new keys are dropped and counted, and a later flush of the same key
    /// offers it again. Default `100000`.
    pub max_pending: usize,
}

impl Default for KeyIndexConfig {
    fn default() -> Self {
        KeyIndexConfig {
            enabled: false,
            table: "key_index".into(),
            buckets: 16,
            max_pending: 100_000,
        }
    }
}

/// The period a leaderboard ranks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaderboardPeriod {
    /// One UTC day: each key's day row.
    #[default]
    Day,
    /// One calendar month: the sum of each key's day rows of the month.
    Month,
}

impl LeaderboardPeriod {
    /// The name in the configuration and in the rankings table.
    pub fn as_str(self) -> &'static str {
        match self {
            LeaderboardPeriod::Day => "day",
            LeaderboardPeriod::Month => "month",
        }
    }
}

/// `[[leaderboard]]`: a ranking of a family's keys by one counter column over a period,
/// recomputed every `interval` and kept in a regular table clustered by score.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LeaderboardConfig {
    /// Name, as given to `countersink top`. Required, unique.
    pub name: String,
    /// The family whose keys are ranked (`"generic"` for the generic family). Required.
    pub family: String,
    /// The counter column that scores a key. Required.
    pub column: String,
    /// The period ranked: `"day"` or `"month"`. Default `"day"`.
    pub granularity: LeaderboardPeriod,
    /// How many keys the ranking keeps. Default `100`, at most `10000`.
    pub top: usize,
    /// Time between two runs of the job. Default `"1m"`.
    #[serde(with = "duration")]
    pub interval: Duration,
    /// Whether `countersink serve` runs this job (run it on one instance, or with
    /// `countersink leaderboard run --once` from a cron job). Default `false`.
    pub run_in_serve: bool,
    /// How long a ranking stays readable after its last run (the TTL of its rows).
    /// Default `"30d"`.
    #[serde(with = "duration")]
    pub keep: Duration,
}

impl Default for LeaderboardConfig {
    fn default() -> Self {
        LeaderboardConfig {
            name: String::new(),
            family: String::new(),
            column: String::new(),
            granularity: LeaderboardPeriod::Day,
            top: 100,
            interval: Duration::from_secs(60),
            run_in_serve: false,
            keep: Duration::from_secs(30 * 86_400),
        }
    }
}

/// The largest `top`: a ranking is rewritten whole at every run.
pub const MAX_TOP: usize = 10_000;

impl Config {
    /// Checks `[read]`, `[key_index]` and every `[[leaderboard]]`.
    pub(super) fn validate_operations(&self) -> Result<(), ConfigError> {
        if self.read.cache_max_entries == 0 {
            return Err(ConfigError::invalid(
                "read.cache_max_entries",
                "must be greater than zero",
            ));
        }
        let index = &self.key_index;
        check_table_name("key_index.table", &index.table)?;
        if !(1..=1024).contains(&index.buckets) {
            return Err(ConfigError::invalid(
                "key_index.buckets",
                "must be between 1 and 1024",
            ));
        }
        if index.max_pending == 0 {
            return Err(ConfigError::invalid(
                "key_index.max_pending",
                "must be greater than zero",
            ));
        }
        let mut names = std::collections::HashSet::new();
        for (i, board) in self.leaderboards.iter().enumerate() {
            let field = |name: &str| format!("leaderboard[{i}].{name}");
            if !is_plain_identifier(&board.name) {
                return Err(ConfigError::invalid(
                    field("name"),
                    format!(
                        "`{}` is not a name: use lower-case letters, digits and _",
                        board.name
                    ),
                ));
            }
            if !names.insert(board.name.as_str()) {
                return Err(ConfigError::invalid(
                    field("name"),
                    format!("`{}` is used twice", board.name),
                ));
            }
            let columns: Vec<&str> = if board.family == "generic" {
                vec!["value"]
            } else {
                match self.families.iter().find(|f| f.name == board.family) {
                    // A board ranks day rows (summed over the month for `month`).
                    Some(family) if family.day_table.is_empty() => {
                        return Err(ConfigError::invalid(
                            field("family"),
                            format!(
                                "family `{}` has no day_table: a leaderboard ranks day rows",
                                board.family
                            ),
                        ));
                    }
                    // An epoch family is ranked per epoch (`ops::leaderboard`).
                    Some(family) => family.columns.values().map(String::as_str).collect(),
                    None => {
                        return Err(ConfigError::invalid(
                            field("family"),
                            format!("no family is called `{}`", board.family),
                        ));
                    }
                }
            };
            if !columns.contains(&board.column.as_str()) {
                return Err(ConfigError::invalid(
                    field("column"),
                    format!(
                        "family `{}` has no counter column `{}`",
                        board.family, board.column
                    ),
                ));
            }
            if !(1..=MAX_TOP).contains(&board.top) {
                return Err(ConfigError::invalid(
                    field("top"),
                    format!("must be between 1 and {MAX_TOP}"),
                ));
            }
            if board.interval < Duration::from_secs(1) {
                return Err(ConfigError::invalid(
                    field("interval"),
                    "must be at least 1s",
                ));
            }
            if board.keep < Duration::from_secs(3600) || board.keep.as_secs() > i32::MAX as u64 {
                return Err(ConfigError::invalid(
                    field("keep"),
                    "must be between 1h and 68 years (a CQL TTL)",
                ));
            }
            if !index.enabled {
                return Err(ConfigError::invalid(
                    field("family"),
                    "a leaderboard reads the keys of its period from the key index: set key_index.enabled = true (on every writer of the family)",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FamilyConfig;

    fn with_board(board: LeaderboardConfig) -> Config {
        let mut config = Config::default();
        config.families.push(FamilyConfig::seed_views());
        config.key_index.enabled = true;
        config.leaderboards.push(board);
        config
    }

    fn board() -> LeaderboardConfig {
        LeaderboardConfig {
            name: "top_pages".into(),
            family: "views".into(),
            column: "views".into(),
            ..LeaderboardConfig::default()
        }
    }

    #[test]
    fn a_leaderboard_names_a_family_column_and_needs_the_key_index() {
        assert_eq!(with_board(board()).validate(), Ok(()));
        let generic = LeaderboardConfig {
            family: "generic".into(),
            column: "value".into(),
            ..board()
        };
        assert_eq!(with_board(generic).validate(), Ok(()));
        let field = |config: Config| match config.validate() {
            Err(ConfigError::Invalid { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        let mut no_index = with_board(board());
        no_index.key_index.enabled = false;
        assert_eq!(field(no_index), "leaderboard[0].family");
        let wrong_column = LeaderboardConfig {
            column: "clicks".into(),
            ..board()
        };
        assert_eq!(field(with_board(wrong_column)), "leaderboard[0].column");
        let wrong_family = LeaderboardConfig {
            family: "nope".into(),
            ..board()
        };
        assert_eq!(field(with_board(wrong_family)), "leaderboard[0].family");
        let too_many = LeaderboardConfig {
            top: MAX_TOP + 1,
            ..board()
        };
        assert_eq!(field(with_board(too_many)), "leaderboard[0].top");
        let mut twice = with_board(board());
        twice.leaderboards.push(board());
        assert_eq!(field(twice), "leaderboard[1].name");
    }

    #[test]
    fn key_index_settings_are_bounded() {
        let mut config = Config::default();
        config.key_index.buckets = 0;
        assert!(config.validate().is_err());
        config.key_index.buckets = 16;
        config.key_index.table = "Bad-Name".into();
        assert!(config.validate().is_err());
    }
}
