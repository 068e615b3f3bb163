//! `[epochs]`: resets by epoch instead of deletes (seed 000: "add an epoch or period column
//! to the partition key and start writing a new epoch"; seed 003: a counter deleted and
//! written again is undefined).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::validate::{ConfigError, check_table_name};
use super::{Config, ConsistencyLevel, duration};

/// `[epochs]`: the registry of epochs and how writers follow it. Used by families with
/// an `epoch_column`.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct EpochsConfig {
    /// The registry, a regular table, `table` or `keyspace.table` (in `store.keyspace`
    /// when written without one). Default `"epochs"`.
    pub table: String,
    /// How far ahead of now `countersink reset` schedules a new epoch at the least, and
    /// what writers assume of every epoch they have not seen yet. Default `"1m"`.
    #[serde(with = "duration")]
    pub lead: Duration,
    /// How often writers read the registry again. Must stay well below `lead -
    /// clock_margin`, or rows of the current minute wait for the next read. Default
    /// `"10s"`.
    #[serde(with = "duration")]
    pub refresh_interval: Duration,
    /// How far the clocks of the writers and of the host running `reset` may disagree;
    /// taken off the lead when a writer decides which minutes its view covers. Default
    /// `"5s"`.
    #[serde(with = "duration")]
    pub clock_margin: Duration,
    /// Consistency of the registry's reads (writers) and writes (`reset`): `quorum` by
    /// default, so that a read that starts after a reset was acknowledged sees it, in
    /// every data centre.
    pub consistency: ConsistencyLevel,
}

impl Default for EpochsConfig {
    fn default() -> Self {
        EpochsConfig {
            table: "epochs".into(),
            lead: Duration::from_secs(60),
            refresh_interval: Duration::from_secs(10),
            clock_margin: Duration::from_secs(5),
            consistency: ConsistencyLevel::Quorum,
        }
    }
}

impl Config {
    /// Checks `[epochs]` and every family's `epoch_column` against it.
    pub(super) fn validate_epochs(&self) -> Result<(), ConfigError> {
        let epochs = &self.epochs;
        check_table_name("epochs.table", &epochs.table)?;
        if epochs.lead < Duration::from_secs(10) {
            return Err(ConfigError::invalid("epochs.lead", "must be at least 10s"));
        }
        if epochs.refresh_interval < Duration::from_millis(100) {
            return Err(ConfigError::invalid(
                "epochs.refresh_interval",
                "must be at least 100ms",
            ));
        }
        for (i, family) in self.families.iter().enumerate() {
            if family.epoch_column.is_some()
                && let Some(why) = family.mode.refuses(super::ModeFeature::Epochs)
            {
                let mode = family.mode.as_str();
                return Err(ConfigError::invalid(
                    format!("family[{i}].epoch_column"),
                    format!("a {mode} family cannot have one yet: {why}"),
                ));
            }
            if family.epoch_column.is_some() && family.exact {
                return Err(ConfigError::invalid(
                    format!("family[{i}].epoch_column"),
                    "the exact ledger and its repairs do not follow epochs yet: exact = true cannot have one",
                ));
            }
        }
        if epochs.clock_margin + epochs.refresh_interval >= epochs.lead {
            return Err(ConfigError::invalid(
                "epochs.refresh_interval",
                "refresh_interval + clock_margin must be below lead, or writers hold the rows of the current minute between reads of the registry",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refresh_slower_than_the_lead_is_refused() {
        let mut config = Config::default();
        config.validate().unwrap();
        config.epochs.refresh_interval = Duration::from_secs(56);
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains("epochs.refresh_interval"), "{error}");
        config.epochs.refresh_interval = Duration::from_secs(10);
        config.epochs.lead = Duration::from_secs(5);
        assert!(config.validate().is_err());
    }

    #[test]
    fn the_epoch_column_must_not_be_a_key_bucket_or_counter_column() {
        let mut config = Config::default();
        config.families.push(crate::config::FamilyConfig {
            epoch_column: Some("epoch".into()),
            ..crate::config::FamilyConfig::seed_views()
        });
        config.validate().unwrap();
        for bad in ["day", "page_id", "views", "Epoch"] {
            config.families[0].epoch_column = Some(bad.into());
            let error = config.validate().unwrap_err().to_string();
            assert!(error.contains("family[0]"), "{bad}: {error}");
        }
    }
}
