//! Which server cqlsim answers as: Apache Cassandra 3.11 (the default) or ScyllaDB.
//!
//! A client tells the two apart by what the node says of itself, and a counter write
//! ends differently on each when replicas are missing, so the ScyllaDB persona models
//! what ScyllaDB's documentation and source say, where it matters to a counter writer:
//!
//! - **Identity.** SUPPORTED carries ScyllaDB's sharding keys (`SCYLLA_SHARD`,
//!   `SCYLLA_NR_SHARDS`, `SCYLLA_PARTITIONER`, `SCYLLA_SHARDING_ALGORITHM`,
//!   `SCYLLA_SHARDING_IGNORE_MSB`; one shard, no shard-aware port), `system.local` has
//!   ScyllaDB's extra columns (`supported_features`, `scylla_cpu_sharding_algorithm`,
//!   `scylla_nr_shards`, `scylla_msb_ignore`) and the `release_version` ScyllaDB reports
//!   (`3.0.8`), and `system_schema.scylla_keyspaces` exists. The protocol extensions
//!   that change the wire (LWT mark, rate-limit error, tablet routing, metadata ids) are
//!   not offered: cqlsim does not implement them. `SELECT ... USING TIMEOUT <duration>`
//!   (which drivers add to their metadata queries on ScyllaDB) is accepted and ignored.
//! - **Counter writes and `Unavailable`.** ScyllaDB's counter leader applies the
//!   increment, then checks that enough replicas are alive for the consistency level, and
//!   may answer `Unavailable` for a write it applied (`storage_proxy::mutate_counters`,
//!   `replicate_counter_from_leader`). So under this persona an `unavailable` fault on a
//!   counter write applies it first. Apache Cassandra checks before it applies.
//! - **Tablets.** As ScyllaDB 6.0 to 2025.x, with `tablets_mode_for_new_keyspaces`
//!   ([`TabletsMode`], `enabled` by default): a `NetworkTopologyStrategy` keyspace uses
//!   tablets unless created with `tablets = {'enabled': false}` (or, mode `disabled`,
//!   unless created with `{'enabled': true}` or `{'initial': N}`); mode `enforced`
//!   refuses `{'enabled': false}` with ScyllaDB's configuration error. A keyspace's
//!   tablets show in `system_schema.scylla_keyspaces.initial_tablets`. A counter table
//!   in a tablets keyspace is refused ("Counters are not yet supported with tablets"),
//!   unless [`crate::Config::counters_with_tablets`] models a release that supports
//!   them, whose `system.local.supported_features` then lists `COUNTERS_WITH_TABLETS`
//!   (the cluster feature ScyllaDB names them by). The Cassandra persona refuses the
//!   `tablets` property.

use std::fmt;
use std::str::FromStr;

use crate::error::CqlError;
use crate::value::Value;

/// ScyllaDB's `tablets_mode_for_new_keyspaces` setting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TabletsMode {
    /// New keyspaces use vnodes unless they ask for tablets.
    Disabled,
    /// New `NetworkTopologyStrategy` keyspaces use tablets unless they opt out.
    #[default]
    Enabled,
    /// As `Enabled`, and a keyspace may not opt out.
    Enforced,
}

impl FromStr for TabletsMode {
    type Err = String;

    fn from_str(s: &str) -> Result<TabletsMode, String> {
        match s {
            "disabled" => Ok(TabletsMode::Disabled),
            "enabled" => Ok(TabletsMode::Enabled),
            "enforced" => Ok(TabletsMode::Enforced),
            _ => Err(format!(
                "unknown tablets mode {s:?} (disabled, enabled or enforced)"
            )),
        }
    }
}

/// The server cqlsim poses as.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Persona {
    /// Apache Cassandra 3.11.
    #[default]
    Cassandra,
    /// ScyllaDB (see the module documentation for what is modelled).
    Scylla,
}

impl FromStr for Persona {
    type Err = String;

    fn from_str(s: &str) -> Result<Persona, String> {
        match s {
            "cassandra" => Ok(Persona::Cassandra),
            "scylla" | "scylladb" => Ok(Persona::Scylla),
            _ => Err(format!("unknown persona {s:?} (cassandra or scylla)")),
        }
    }
}

impl fmt::Display for Persona {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Persona::Cassandra => "cassandra",
            Persona::Scylla => "scylla",
        })
    }
}

/// The SUPPORTED options of Apache Cassandra 3.11 (research §0, §1.2, §2.2).
const CASSANDRA_SUPPORTED: [(&str, &[&str]); 3] = [
    ("CQL_VERSION", &["3.4.4"]),
    ("COMPRESSION", &[]),
    ("PROTOCOL_VERSIONS", &["3/v3", "4/v4"]),
];

/// ScyllaDB's: the same, plus its intranode sharding keys for one shard.
const SCYLLA_SUPPORTED: [(&str, &[&str]); 8] = [
    ("CQL_VERSION", &["3.3.1"]),
    ("COMPRESSION", &[]),
    ("PROTOCOL_VERSIONS", &["3/v3", "4/v4"]),
    ("SCYLLA_SHARD", &["0"]),
    ("SCYLLA_NR_SHARDS", &["1"]),
    (
        "SCYLLA_PARTITIONER",
        &["org.apache.cassandra.dht.Murmur3Partitioner"],
    ),
    ("SCYLLA_SHARDING_ALGORITHM", &["biased-token-round-robin"]),
    ("SCYLLA_SHARDING_IGNORE_MSB", &["12"]),
];

/// Tables ScyllaDB has besides Cassandra's (its `system.local` replaces the plain one).
const SCYLLA_SCHEMA: &str = "
CREATE TABLE system.local (key text PRIMARY KEY, bootstrapped text, broadcast_address inet,
  cluster_name text, cql_version text, data_center text, gossip_generation int, host_id uuid,
  listen_address inet, native_protocol_version text, partitioner text, rack text,
  release_version text, rpc_address inet, schema_version uuid, tokens set<text>,
  truncated_at map<uuid, blob>, supported_features text, scylla_cpu_sharding_algorithm text,
  scylla_nr_shards int, scylla_msb_ignore int);
CREATE TABLE system_schema.scylla_keyspaces (keyspace_name text PRIMARY KEY,
  initial_tablets int, storage_options frozen<map<text, text>>, storage_type text);
";

impl Persona {
    /// The SUPPORTED options this persona answers OPTIONS with.
    pub(crate) fn supported(self) -> &'static [(&'static str, &'static [&'static str])] {
        match self {
            Persona::Cassandra => &CASSANDRA_SUPPORTED,
            Persona::Scylla => &SCYLLA_SUPPORTED,
        }
    }

    /// `system.local.release_version`.
    pub(crate) fn release_version(self) -> &'static str {
        match self {
            Persona::Cassandra => crate::system::RELEASE_VERSION,
            // What ScyllaDB reports for compatibility, whatever its own version.
            Persona::Scylla => "3.0.8",
        }
    }

    /// System tables to install over the common ones.
    pub(crate) fn extra_schema(self) -> &'static str {
        match self {
            Persona::Cassandra => "",
            Persona::Scylla => SCYLLA_SCHEMA,
        }
    }

    /// Values of the `system.local` columns only this persona has (`counters_with_tablets`:
    /// the release supports them, a feature it lists).
    pub(crate) fn local_columns(
        self,
        counters_with_tablets: bool,
    ) -> Vec<(&'static str, Option<Value>)> {
        let features = if counters_with_tablets {
            "COUNTERS,COUNTERS_WITH_TABLETS,TABLETS"
        } else {
            "COUNTERS,TABLETS"
        };
        match self {
            Persona::Cassandra => Vec::new(),
            Persona::Scylla => vec![
                ("supported_features", Some(Value::Text(features.into()))),
                (
                    "scylla_cpu_sharding_algorithm",
                    Some(Value::Text("biased-token-round-robin".into())),
                ),
                ("scylla_nr_shards", Some(Value::Int(1))),
                ("scylla_msb_ignore", Some(Value::Int(12))),
            ],
        }
    }

    /// Whether `SELECT ... USING TIMEOUT <duration>` (ScyllaDB's server-side timeout,
    /// which the drivers add to their metadata queries on ScyllaDB) is accepted.
    pub(crate) fn accepts_using_timeout(self) -> bool {
        self == Persona::Scylla
    }

    /// Whether an `unavailable` fault on a counter write applies it before answering (the
    /// ScyllaDB counter leader applies, then checks replica liveness).
    pub(crate) fn counter_unavailable_applies(self) -> bool {
        self == Persona::Scylla
    }

    /// The tablets a new keyspace gets: `None` for vnodes, `Some(initial)` for tablets
    /// (0: as many as the cluster decides). `option` is the `tablets` property, if given;
    /// `mode` the cluster's `tablets_mode_for_new_keyspaces`.
    pub(crate) fn keyspace_tablets(
        self,
        mode: TabletsMode,
        class: &str,
        option: Option<&[(String, String)]>,
    ) -> Result<Option<i32>, CqlError> {
        let network = class.ends_with("NetworkTopologyStrategy");
        match (self, option) {
            (Persona::Cassandra, None) => Ok(None),
            (Persona::Cassandra, Some(_)) => Err(CqlError::syntax("Unknown property 'tablets'")),
            (Persona::Scylla, None) => Ok((network && mode != TabletsMode::Disabled).then_some(0)),
            (Persona::Scylla, Some(entries)) => {
                let mut tablets = Some(0);
                for (key, value) in entries {
                    match (key.as_str(), value.to_ascii_lowercase().as_str()) {
                        ("enabled", "false") if mode == TabletsMode::Enforced => {
                            return Err(CqlError::Config(
                                "Cannot disable tablets for keyspace since tablets are enforced using the `tablets_mode_for_new_keyspaces: enforced` config option.".into(),
                            ));
                        }
                        ("enabled", "false") => tablets = None,
                        ("enabled", "true") => {}
                        ("initial", n) => {
                            tablets = Some(n.parse().map_err(|_| {
                                CqlError::Config(format!(
                                    "Invalid value for tablets 'initial': {n}"
                                ))
                            })?)
                        }
                        _ => {
                            return Err(CqlError::Config(format!(
                                "Unknown tablets option '{key}'"
                            )));
                        }
                    }
                }
                if tablets.is_some() && !network {
                    return Err(CqlError::Config(format!(
                        "Tablets are only supported with NetworkTopologyStrategy, not {class}"
                    )));
                }
                Ok(tablets)
            }
        }
    }

    /// The error for a counter table created in a keyspace with tablets, when this
    /// persona refuses it.
    pub(crate) fn counter_table_refusal(
        self,
        counters_with_tablets: bool,
        keyspace: &str,
        table: &str,
    ) -> Option<CqlError> {
        (self == Persona::Scylla && !counters_with_tablets).then(|| {
            CqlError::Invalid(format!(
                "Cannot use the 'counter' type for table {keyspace}.{table}: Counters are not yet supported with tablets"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn tablets_by_persona_strategy_and_option() {
        let nts = "NetworkTopologyStrategy";
        let simple = "org.apache.cassandra.locator.SimpleStrategy";
        let s = Persona::Scylla;
        let on = TabletsMode::Enabled;
        assert_eq!(s.keyspace_tablets(on, nts, None), Ok(Some(0)));
        assert_eq!(s.keyspace_tablets(on, simple, None), Ok(None));
        let off = opts(&[("enabled", "false")]);
        assert_eq!(s.keyspace_tablets(on, nts, Some(&off)), Ok(None));
        assert_eq!(s.keyspace_tablets(on, simple, Some(&off)), Ok(None));
        let initial = opts(&[("initial", "8")]);
        assert_eq!(s.keyspace_tablets(on, nts, Some(&initial)), Ok(Some(8)));
        assert!(s.keyspace_tablets(on, simple, Some(&initial)).is_err());
        assert!(
            s.keyspace_tablets(on, nts, Some(&opts(&[("x", "1")])))
                .is_err()
        );
        let c = Persona::Cassandra;
        assert_eq!(c.keyspace_tablets(on, nts, None), Ok(None));
        assert!(c.keyspace_tablets(on, nts, Some(&off)).is_err());
    }

    #[test]
    fn the_tablets_mode_sets_the_default_and_enforced_refuses_opting_out() {
        let nts = "NetworkTopologyStrategy";
        let s = Persona::Scylla;
        let off = opts(&[("enabled", "false")]);
        let ask = opts(&[("enabled", "true")]);
        assert_eq!(
            s.keyspace_tablets(TabletsMode::Disabled, nts, None),
            Ok(None)
        );
        assert_eq!(
            s.keyspace_tablets(TabletsMode::Disabled, nts, Some(&ask)),
            Ok(Some(0))
        );
        assert_eq!(
            s.keyspace_tablets(TabletsMode::Enforced, nts, None),
            Ok(Some(0))
        );
        let refused = s
            .keyspace_tablets(TabletsMode::Enforced, nts, Some(&off))
            .unwrap_err();
        assert!(
            matches!(&refused, CqlError::Config(m) if m.contains("tablets_mode_for_new_keyspaces: enforced")),
            "{refused:?}"
        );
    }

    #[test]
    fn names_parse() {
        assert_eq!("scylla".parse(), Ok(Persona::Scylla));
        assert_eq!("cassandra".parse(), Ok(Persona::Cassandra));
        assert!("mongo".parse::<Persona>().is_err());
    }
}
