//! `[exact]`: exact totals beside the counters, for the families that ask for them
//! (`family[].exact = true`, `generic.exact = true`).
//!
//! An exact family's first drain of every delta writes an immutable row to a regular
//! table, the delta ledger, before the counter writes that carry it; unknown and rejected
//! writes go to an outcomes table; `countersink reconcile` compares the two sides. This
//! section says where those tables live and how their writes behave.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::validate::{ConfigError, is_plain_identifier};
use super::{Config, ConsistencyLevel, duration};

/// `[exact]`: the ledger, outcomes and closed-day tables, and reconciliation.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExactConfig {
    /// Keyspace of the ledger, outcomes and closed-day tables. Default: `store.keyspace`.
    pub keyspace: Option<String>,
    /// Consistency of the ledger's and the outcomes table's writes, and of reconcile's
    /// reads. Default `"local_quorum"`: a ledger row reads back from any quorum once
    /// written.
    pub consistency: ConsistencyLevel,
    /// How long a ledger row lives (its TTL): reconcile a day before its rows expire, and
    /// `--close` it to keep its exact totals. Default `"90d"` (seed 000's event table).
    #[serde(with = "duration")]
    pub ledger_ttl: Duration,
    /// Partitions of the ledger per family and day: a key's rows go to bucket
    /// `hash(key) % buckets`. Readers read every bucket of a day, so changing it hides the
    /// rows written before from them: choose it once, from the rows a day writes (one per
    /// key, minute and flush, about 100 bytes each) divided by about 1 000 000, so that a
    /// partition stays under ~100 MB; the sidecar counts yesterday's bucket 0 at start and
    /// warns past that (`ops::sizing`). Default `64`.
    pub buckets: u16,
    /// The first wait before a failed ledger write is sent again; each further failure
    /// doubles it. Default `"100ms"`.
    #[serde(with = "duration")]
    pub retry_backoff_min: Duration,
    /// The longest wait between two attempts of a ledger write. Default `"5s"`.
    #[serde(with = "duration")]
    pub retry_backoff_max: Duration,
    /// The unexplained drift `countersink reconcile` accepts per key and column, as a
    /// fraction of that column's exact total (seed 000's drift monitor: 0.001 for
    /// 0.1 %); above it in any column of any key, reconcile exits with code 3. Default
    /// `0.0`: any unexplained drift fails.
    pub reconcile_threshold: f64,
}

impl Default for ExactConfig {
    fn default() -> Self {
        ExactConfig {
            keyspace: None,
            consistency: ConsistencyLevel::LocalQuorum,
            ledger_ttl: Duration::from_secs(90 * 86_400),
            buckets: 64,
            retry_backoff_min: Duration::from_millis(100),
            retry_backoff_max: Duration::from_secs(5),
            reconcile_threshold: 0.0,
        }
    }
}

/// The longest TTL Cassandra accepts: 20 years.
const MAX_TTL_SECS: u64 = 630_720_000;

impl Config {
    /// Whether any family keeps exact totals.
    pub fn any_exact(&self) -> bool {
        (self.generic.enabled && self.generic.exact) || self.families.iter().any(|f| f.exact)
    }

    /// The keyspace of the exact tables.
    pub fn exact_keyspace(&self) -> &str {
        self.exact
            .keyspace
            .as_deref()
            .unwrap_or(&self.store.keyspace)
    }

    /// Checks `[exact]`.
    pub(super) fn validate_exact(&self) -> Result<(), ConfigError> {
        let exact = &self.exact;
        if let Some(keyspace) = &exact.keyspace
            && !is_plain_identifier(keyspace)
        {
            return Err(ConfigError::invalid(
                "exact.keyspace",
                format!(
                    "`{keyspace}` is not a keyspace name: use lower-case letters, digits and _"
                ),
            ));
        }
        let ttl = exact.ledger_ttl.as_secs();
        if !(86_400..=MAX_TTL_SECS).contains(&ttl) {
            return Err(ConfigError::invalid(
                "exact.ledger_ttl",
                "must be between 1d and 20 years (a CQL TTL); reconcile needs the rows of a day after it closed",
            ));
        }
        if !(1..=4096).contains(&exact.buckets) {
            return Err(ConfigError::invalid(
                "exact.buckets",
                "must be between 1 and 4096",
            ));
        }
        if exact.retry_backoff_min.is_zero() {
            return Err(ConfigError::invalid(
                "exact.retry_backoff_min",
                "must be greater than zero",
            ));
        }
        if exact.retry_backoff_max < exact.retry_backoff_min {
            return Err(ConfigError::invalid(
                "exact.retry_backoff_max",
                "must be at least exact.retry_backoff_min",
            ));
        }
        // The ledger records counter deltas as a flush drains them; a family of a mode
        // that writes something else would get no ledger rows: refused rather than
        // silently left without one.
        let refused = |exact: bool, mode: super::CountingMode| {
            let why = mode.refuses(super::ModeFeature::Exact).filter(|_| exact)?;
            Some(format!(
                "cannot be true with mode = \"{}\": {why}",
                mode.as_str()
            ))
        };
        for (i, family) in self.families.iter().enumerate() {
            if let Some(problem) = refused(family.exact, family.mode) {
                return Err(ConfigError::invalid(format!("family[{i}].exact"), problem));
            }
        }
        if let Some(problem) = refused(self.generic.exact, self.generic.mode) {
            return Err(ConfigError::invalid("generic.exact", problem));
        }
        if !(0.0..=1.0).contains(&exact.reconcile_threshold) {
            return Err(ConfigError::invalid(
                "exact.reconcile_threshold",
                "must be a fraction between 0.0 and 1.0",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FamilyConfig;

    fn field(config: &Config) -> String {
        match config.validate() {
            Err(ConfigError::Invalid { field, .. }) => field,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn exact_settings_parse_and_are_bounded() {
        let config = Config::from_toml(
            "[exact]\nkeyspace = \"truth\"\nledger_ttl = \"30d\"\nreconcile_threshold = 0.001\n[generic]\nexact = true\n[[family]]\nname = \"v\"\nminute_table = \"v_m\"\nday_table = \"v_d\"\nkey = [\"k\"]\nexact = true\n[family.columns]\n\"v\" = \"n\"\n",
        )
        .unwrap();
        config.validate().unwrap();
        assert!(config.any_exact());
        assert_eq!(config.exact_keyspace(), "truth");
        assert_eq!(config.exact.ledger_ttl, Duration::from_secs(30 * 86_400));
        assert!(config.families[0].exact && config.generic.exact);
        assert!(!Config::default().any_exact());
        assert_eq!(Config::default().exact_keyspace(), "countersink");

        let mut c = Config::default();
        c.exact.ledger_ttl = Duration::from_secs(3600);
        assert_eq!(field(&c), "exact.ledger_ttl");
        let mut c = Config::default();
        c.exact.buckets = 0;
        assert_eq!(field(&c), "exact.buckets");
        let mut c = Config::default();
        c.exact.retry_backoff_max = Duration::from_millis(10);
        assert_eq!(field(&c), "exact.retry_backoff_max");
        let mut c = Config::default();
        c.exact.reconcile_threshold = 2.0;
        assert_eq!(field(&c), "exact.reconcile_threshold");
        let mut c = Config::default();
        c.exact.keyspace = Some("Bad".into());
        assert_eq!(field(&c), "exact.keyspace");
        let mut c = Config::default();
        c.families.push(FamilyConfig {
            exact: true,
            mode: super::super::CountingMode::WriterTotals,
            ..FamilyConfig::seed_views()
        });
        assert_eq!(field(&c), "family[0].exact");
        let mut c = Config::default();
        c.generic.exact = true;
        c.generic.mode = super::super::CountingMode::WriterTotals;
        assert_eq!(field(&c), "generic.exact");
    }

    #[test]
    fn a_disabled_generic_family_keeps_no_exact_totals() {
        let mut c = Config::default();
        c.generic.exact = true;
        c.generic.enabled = false;
        assert!(!c.any_exact());
        c.families.push(FamilyConfig {
            exact: true,
            ..FamilyConfig::seed_views()
        });
        assert!(c.any_exact());
    }
}
