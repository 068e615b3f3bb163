//! Which store the session reached: Apache Cassandra, ScyllaDB, or a store it cannot
//! identify, and what that changes about outcomes.
//!
//! It matters for one error: `Unavailable`. Apache Cassandra checks that enough
//! replicas are alive before the counter leader applies anything, so `Unavailable`
//! proves the write did not apply. ScyllaDB's counter leader applies the increment
//! first and checks replica liveness afterwards (`storage_proxy::mutate_counters` →
//! `replicate_counter_from_leader` → `assure_sufficient_live_nodes`), so with token-aware
//! routing (the coordinator is usually the leader) an applied increment can come back
//! `Unavailable`. Re-sending it would count it twice, so `Unavailable` is "not applied"
//! only where that is proven: Apache Cassandra. Everywhere else it is unknown.
//!
//! The evidence, read once at connect:
//!
//! - **SUPPORTED options.** A ScyllaDB node advertises its sharding (`SCYLLA_SHARD`,
//!   `SCYLLA_NR_SHARDS`, …), which the driver turns into a sharder for the node.
//! - **`system.local`.** ScyllaDB adds columns Cassandra does not have
//!   (`scylla_nr_shards`, `scylla_cpu_sharding_algorithm`, `supported_features`). An
//!   Apache Cassandra node reports an Apache Cassandra `release_version` (`5.0.2`) and an
//!   `org.apache.cassandra.dht` partitioner.
//!
//! A node with any ScyllaDB sign is ScyllaDB. Apache Cassandra needs no ScyllaDB sign on
//! any node, a release version of that form and that partitioner; anything else (a
//! query that fails, a managed service with its own partitioner or version scheme) is
//! unidentified.

use std::fmt;

use scylla::client::session::Session;
use scylla::value::{CqlValue, Row};

/// What kind of store answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// Apache Cassandra: `Unavailable` is raised before anything is applied.
    Cassandra,
    /// ScyllaDB: its counter leader may apply a write and then answer `Unavailable`.
    ScyllaDb,
    /// Neither could be established: nothing is assumed.
    Unidentified,
}

impl StoreKind {
    /// Whether an `Unavailable` answer proves that a counter write was not applied.
    pub fn unavailable_means_not_applied(self) -> bool {
        self == StoreKind::Cassandra
    }

    /// A short name for logs.
    pub fn name(self) -> &'static str {
        match self {
            StoreKind::Cassandra => "Apache Cassandra",
            StoreKind::ScyllaDb => "ScyllaDB",
            StoreKind::Unidentified => "an unidentified CQL store",
        }
    }
}

/// The store found at connect, and why it was taken for that.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreIdentity {
    /// The kind.
    pub kind: StoreKind,
    /// `system.local.release_version`, when it could be read.
    pub release_version: Option<String>,
    /// What decided it, for the log.
    pub evidence: String,
    /// ScyllaDB's cluster features this node supports (`system.local.supported_features`;
    /// empty elsewhere): what its release can do, whatever its version number says.
    pub features: Vec<String>,
}

/// The ScyllaDB cluster feature of releases that take counter tables in keyspaces with
/// tablets.
pub const COUNTERS_WITH_TABLETS: &str = "COUNTERS_WITH_TABLETS";

impl StoreIdentity {
    /// Whether counter tables may live in a keyspace with tablets here (a ScyllaDB
    /// release listing [`COUNTERS_WITH_TABLETS`]; earlier ones refuse them, and
    /// Apache Cassandra has no tablets).
    pub fn counters_with_tablets(&self) -> bool {
        self.kind == StoreKind::ScyllaDb && self.features.iter().any(|f| f == COUNTERS_WITH_TABLETS)
    }
}

impl fmt::Display for StoreIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.name())?;
        if let Some(version) = &self.release_version {
            write!(f, " (release_version {version})")?;
        }
        write!(f, ": {}", self.evidence)
    }
}

/// What one node's `system.local` row says about the node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LocalRow {
    /// The names of its columns.
    pub columns: Vec<String>,
    /// `release_version`.
    pub release_version: Option<String>,
    /// `partitioner`.
    pub partitioner: Option<String>,
    /// `supported_features` (ScyllaDB: comma-separated cluster features).
    pub supported_features: Option<String>,
}

/// Columns only ScyllaDB's `system.local` has.
const SCYLLA_LOCAL_COLUMNS: [&str; 3] = [
    "scylla_nr_shards",
    "scylla_cpu_sharding_algorithm",
    "supported_features",
];

/// Decides the store from the evidence: whether any node advertised ScyllaDB sharding in
/// SUPPORTED, and the `system.local` row (`None` when it could not be read).
pub fn identify(sharded: bool, local: Option<&LocalRow>) -> StoreIdentity {
    let release_version = local.and_then(|l| l.release_version.clone());
    let features: Vec<String> = local
        .and_then(|l| l.supported_features.as_deref())
        .map(|f| {
            f.split(',')
                .map(str::trim)
                .filter(|f| !f.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let identity = |kind, evidence: String| StoreIdentity {
        kind,
        release_version: release_version.clone(),
        evidence,
        features: features.clone(),
    };
    if sharded {
        return identity(
            StoreKind::ScyllaDb,
            "the node advertises ScyllaDB sharding in SUPPORTED".into(),
        );
    }
    let Some(local) = local else {
        return identity(
            StoreKind::Unidentified,
            "system.local could not be read".into(),
        );
    };
    if let Some(column) = local
        .columns
        .iter()
        .find(|c| SCYLLA_LOCAL_COLUMNS.contains(&c.as_str()))
    {
        return identity(
            StoreKind::ScyllaDb,
            format!("system.local has ScyllaDB's column {column}"),
        );
    }
    let cassandra_partitioner = local
        .partitioner
        .as_deref()
        .is_some_and(|p| p.starts_with("org.apache.cassandra.dht."));
    match (&local.release_version, cassandra_partitioner) {
        (Some(version), true) if is_cassandra_version(version) => identity(
            StoreKind::Cassandra,
            "no ScyllaDB sign; an Apache Cassandra release version and partitioner".into(),
        ),
        (version, _) => identity(
            StoreKind::Unidentified,
            format!(
                "no ScyllaDB sign, but release_version {} and partitioner {} are not Apache Cassandra's",
                version.as_deref().unwrap_or("(none)"),
                local.partitioner.as_deref().unwrap_or("(none)")
            ),
        ),
    }
}

/// `major.minor[.patch]` with an optional pre-release tag (`5.0-rc1`); not a snapshot
/// build, which other stores report.
fn is_cassandra_version(version: &str) -> bool {
    let (numbers, tag) = version.split_once('-').unwrap_or((version, ""));
    let parts: Vec<&str> = numbers.split('.').collect();
    (2..=3).contains(&parts.len())
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        && !tag.to_ascii_uppercase().contains("SNAPSHOT")
}

/// Reads the evidence from a connected session and decides.
pub async fn detect(session: &Session) -> StoreIdentity {
    let sharded = session
        .get_cluster_state()
        .get_nodes_info()
        .iter()
        .any(|node| node.sharder().is_some());
    let local = read_local(session).await;
    if let Err(error) = &local {
        tracing::debug!(%error, "Cannot read system.local to identify the store.");
    }
    identify(sharded, local.ok().as_ref())
}

async fn read_local(session: &Session) -> Result<LocalRow, Box<dyn std::error::Error>> {
    let result = session
        .query_unpaged("SELECT * FROM system.local WHERE key = 'local'", &[])
        .await?
        .into_rows_result()?;
    let columns: Vec<String> = result
        .column_specs()
        .iter()
        .map(|c| c.name().to_owned())
        .collect();
    let row: Row = result.first_row()?;
    let text = |name: &str| {
        let index = columns.iter().position(|c| c == name)?;
        match row.columns.get(index)? {
            Some(CqlValue::Text(s) | CqlValue::Ascii(s)) => Some(s.clone()),
            _ => None,
        }
    };
    Ok(LocalRow {
        release_version: text("release_version"),
        partitioner: text("partitioner"),
        supported_features: text("supported_features"),
        columns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(columns: &[&str], version: &str, partitioner: &str) -> LocalRow {
        LocalRow {
            columns: columns.iter().map(|c| (*c).to_owned()).collect(),
            release_version: Some(version.into()),
            partitioner: Some(partitioner.into()),
            supported_features: None,
        }
    }

    #[test]
    fn counters_with_tablets_is_a_scylladb_feature_read_from_system_local() {
        let mut row = local(&["supported_features"], "3.0.8", "x");
        row.supported_features = Some("COUNTERS,TABLETS".into());
        assert!(!identify(false, Some(&row)).counters_with_tablets());
        row.supported_features = Some("COUNTERS, COUNTERS_WITH_TABLETS,TABLETS".into());
        let identity = identify(false, Some(&row));
        assert_eq!(identity.kind, StoreKind::ScyllaDb);
        assert!(identity.counters_with_tablets());
        assert!(
            !identify(false, None).counters_with_tablets(),
            "nothing read, nothing assumed"
        );
    }

    const MURMUR: &str = "org.apache.cassandra.dht.Murmur3Partitioner";

    #[test]
    fn the_evidence_decides() {
        let plain = ["key", "release_version", "partitioner"];
        let scylla = ["key", "release_version", "scylla_nr_shards"];
        // (case, sharded, system.local, kind)
        let cases: [(&str, bool, Option<LocalRow>, StoreKind); 9] = [
            (
                "Cassandra 5.0",
                false,
                Some(local(&plain, "5.0.2", MURMUR)),
                StoreKind::Cassandra,
            ),
            (
                "Cassandra 3.11",
                false,
                Some(local(&plain, "3.11.17", MURMUR)),
                StoreKind::Cassandra,
            ),
            (
                "Cassandra release candidate",
                false,
                Some(local(&plain, "5.0-rc1", MURMUR)),
                StoreKind::Cassandra,
            ),
            (
                "ScyllaDB by SUPPORTED",
                true,
                Some(local(&plain, "3.0.8", MURMUR)),
                StoreKind::ScyllaDb,
            ),
            (
                "ScyllaDB by system.local",
                false,
                Some(local(&scylla, "3.0.8", MURMUR)),
                StoreKind::ScyllaDb,
            ),
            (
                "ScyllaDB without system.local",
                true,
                None,
                StoreKind::ScyllaDb,
            ),
            (
                "unreadable system.local",
                false,
                None,
                StoreKind::Unidentified,
            ),
            (
                "a managed service's partitioner",
                false,
                Some(local(
                    &plain,
                    "3.11.2",
                    "com.amazonaws.cassandra.DefaultPartitioner",
                )),
                StoreKind::Unidentified,
            ),
            (
                "a snapshot version",
                false,
                Some(local(&plain, "3.9-SNAPSHOT", MURMUR)),
                StoreKind::Unidentified,
            ),
        ];
        for (case, sharded, row, kind) in cases {
            let identity = identify(sharded, row.as_ref());
            assert_eq!(identity.kind, kind, "{case}: {identity}");
        }
    }

    #[test]
    fn only_cassandra_proves_unavailable_was_not_applied() {
        assert!(StoreKind::Cassandra.unavailable_means_not_applied());
        assert!(!StoreKind::ScyllaDb.unavailable_means_not_applied());
        assert!(!StoreKind::Unidentified.unavailable_means_not_applied());
    }
}
