//! System tables (research §1.3, §2.4, §2.5) and the `cqlsim` statistics tables. Their schemas
//! are ordinary CQL (below) installed as virtual tables; their rows are generated on each read
//! from the catalog, the node identity and the statistics, then go through the normal SELECT
//! path, so every WHERE/IN/column-list form clients send just works.
//!
//! Tables that must NOT exist (`system.peers_v2`, `system_schema.scylla_tables`,
//! `system_schema.scylla_keyspaces`, `system_virtual_schema.*`) are simply absent, so clients
//! get `0x2200 unconfigured table ...`, which is how they detect a Cassandra 3.11 node.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use crate::cql::ast::{Literal, Statement};
use crate::exec::Virtual;
use crate::schema::{ColumnKind, Keyspace, TableSchema};
use crate::stats::Stats;
use crate::storage::{Db, Partition, Row, TableData, clustering_key};
use crate::value::Value;

/// The Cassandra version clients see.
pub(crate) const RELEASE_VERSION: &str = "3.11.17";

const SCHEMA: &str = "
CREATE TABLE system.local (key text PRIMARY KEY, bootstrapped text, broadcast_address inet,
  cluster_name text, cql_version text, data_center text, gossip_generation int, host_id uuid,
  listen_address inet, native_protocol_version text, partitioner text, rack text,
  release_version text, rpc_address inet, schema_version uuid, tokens set<text>,
  truncated_at map<uuid, blob>);
CREATE TABLE system.peers (peer inet PRIMARY KEY, data_center text, host_id uuid, preferred_ip inet,
  rack text, release_version text, rpc_address inet, schema_version uuid, tokens set<text>);
CREATE TABLE system_schema.keyspaces (keyspace_name text PRIMARY KEY, durable_writes boolean,
  replication frozen<map<text, text>>);
CREATE TABLE system_schema.tables (keyspace_name text, table_name text, bloom_filter_fp_chance double,
  caching frozen<map<text, text>>, cdc boolean, comment text, compaction frozen<map<text, text>>,
  compression frozen<map<text, text>>, crc_check_chance double, dclocal_read_repair_chance double,
  default_time_to_live int, extensions frozen<map<text, blob>>, flags frozen<set<text>>,
  gc_grace_seconds int, id uuid, max_index_interval int, memtable_flush_period_in_ms int,
  min_index_interval int, read_repair_chance double, speculative_retry text,
  PRIMARY KEY (keyspace_name, table_name));
CREATE TABLE system_schema.columns (keyspace_name text, table_name text, column_name text,
  clustering_order text, column_name_bytes blob, kind text, position int, type text,
  PRIMARY KEY (keyspace_name, table_name, column_name));
CREATE TABLE system_schema.types (keyspace_name text, type_name text, field_names frozen<list<text>>,
  field_types frozen<list<text>>, PRIMARY KEY (keyspace_name, type_name));
CREATE TABLE system_schema.functions (keyspace_name text, function_name text,
  argument_types frozen<list<text>>, argument_names frozen<list<text>>, body text,
  called_on_null_input boolean, language text, return_type text,
  PRIMARY KEY (keyspace_name, function_name, argument_types));
CREATE TABLE system_schema.aggregates (keyspace_name text, aggregate_name text,
  argument_types frozen<list<text>>, final_func text, initcond text, return_type text,
  state_func text, state_type text, PRIMARY KEY (keyspace_name, aggregate_name, argument_types));
CREATE TABLE system_schema.triggers (keyspace_name text, table_name text, trigger_name text,
  options frozen<map<text, text>>, PRIMARY KEY (keyspace_name, table_name, trigger_name));
CREATE TABLE system_schema.indexes (keyspace_name text, table_name text, index_name text, kind text,
  options frozen<map<text, text>>, PRIMARY KEY (keyspace_name, table_name, index_name));
CREATE TABLE system_schema.views (keyspace_name text, view_name text, base_table_id uuid,
  base_table_name text, bloom_filter_fp_chance double, caching frozen<map<text, text>>, cdc boolean,
  comment text, compaction frozen<map<text, text>>, compression frozen<map<text, text>>,
  crc_check_chance double, dclocal_read_repair_chance double, default_time_to_live int,
  extensions frozen<map<text, blob>>, gc_grace_seconds int, id uuid, include_all_columns boolean,
  max_index_interval int, memtable_flush_period_in_ms int, min_index_interval int,
  read_repair_chance double, speculative_retry text, where_clause text,
  PRIMARY KEY (keyspace_name, view_name));
CREATE TABLE system_schema.dropped_columns (keyspace_name text, table_name text, column_name text,
  dropped_time timestamp, type text, PRIMARY KEY (keyspace_name, table_name, column_name));
CREATE TABLE cqlsim.stats (keyspace_name text, table_name text, write_requests bigint,
  writes_applied bigint, batches bigint, rows_mutated bigint, counter_delta_sum varint, reads bigint,
  PRIMARY KEY (keyspace_name, table_name));
CREATE TABLE cqlsim.fault_stats (kind text PRIMARY KEY, fired bigint, applied bigint);
";

/// Installs the system keyspaces and their virtual tables into a fresh catalog.
pub(crate) fn install(db: &mut Db) {
    for ks in crate::exec::SYSTEM_KEYSPACES {
        db.catalog.keyspaces.insert(
            ks.to_owned(),
            Keyspace {
                name: ks.to_owned(),
                replication: vec![(
                    "class".into(),
                    "org.apache.cassandra.locator.LocalStrategy".into(),
                )],
                durable_writes: true,
                tables: BTreeMap::new(),
                is_system: true,
                tablets: None,
            },
        );
    }
    // The schema above is a constant checked by a unit test, so parse errors cannot happen at
    // run time; if they did, the table would simply be missing.
    let extra = db.persona.extra_schema();
    let scripts = [SCHEMA, extra];
    let statements = scripts
        .iter()
        .flat_map(|script| crate::cql::parse_script(script).unwrap_or_default());
    for p in statements {
        if let Statement::CreateTable(ct) = &p.stmt {
            let ks = ct.name.keyspace.clone().unwrap_or_default();
            if let (Ok(t), Some(space)) = (
                TableSchema::build(&ks, ct, true),
                db.catalog.keyspaces.get_mut(&ks),
            ) {
                space.tables.insert(t.name.clone(), Arc::new(t));
            }
        }
    }
}

/// Who this node is, per connection (rpc_address is the address the client reached).
pub(crate) struct SysView<'a> {
    pub(crate) rpc_address: IpAddr,
    pub(crate) host_id: [u8; 16],
    pub(crate) cluster_name: &'a str,
    pub(crate) stats: &'a Stats,
}

fn text(s: &str) -> Option<Value> {
    Some(Value::Text(s.to_owned()))
}

fn text_map(pairs: &[(&str, &str)]) -> Option<Value> {
    Some(Value::Map(
        pairs
            .iter()
            .map(|(k, v)| (Value::Text((*k).into()), Value::Text((*v).into())))
            .collect(),
    ))
}

impl Virtual for SysView<'_> {
    fn materialize(&self, db: &Db, t: &TableSchema) -> TableData {
        let mut rows: Vec<Vec<(&str, Option<Value>)>> = Vec::new();
        let cat = &db.catalog;
        match (t.keyspace.as_str(), t.name.as_str()) {
            ("system", "local") => rows.push(
                vec![
                    ("key", text("local")),
                    ("bootstrapped", text("COMPLETED")),
                    ("broadcast_address", Some(Value::Inet(self.rpc_address))),
                    ("cluster_name", text(self.cluster_name)),
                    ("cql_version", text("3.4.4")),
                    ("data_center", text("datacenter1")),
                    ("gossip_generation", Some(Value::Int(1))),
                    ("host_id", Some(Value::Uuid(self.host_id))),
                    ("listen_address", Some(Value::Inet(self.rpc_address))),
                    ("native_protocol_version", text("4")),
                    (
                        "partitioner",
                        text("org.apache.cassandra.dht.Murmur3Partitioner"),
                    ),
                    ("rack", text("rack1")),
                    ("release_version", text(db.persona.release_version())),
                    ("rpc_address", Some(Value::Inet(self.rpc_address))),
                    ("schema_version", Some(Value::Uuid(cat.version))),
                    ("tokens", Some(Value::Set(vec![Value::Text("0".into())]))),
                ]
                .into_iter()
                .chain(db.persona.local_columns(db.counters_with_tablets))
                .collect(),
            ),
            ("system_schema", "scylla_keyspaces") => {
                for ks in cat.keyspaces.values() {
                    if let Some(initial) = ks.tablets {
                        rows.push(vec![
                            ("keyspace_name", text(&ks.name)),
                            ("initial_tablets", Some(Value::Int(initial))),
                        ]);
                    }
                }
            }
            ("system_schema", "keyspaces") => {
                for ks in cat.keyspaces.values() {
                    let repl = ks
                        .replication
                        .iter()
                        .map(|(k, v)| (Value::Text(k.clone()), Value::Text(v.clone())))
                        .collect();
                    rows.push(vec![
                        ("keyspace_name", text(&ks.name)),
                        ("durable_writes", Some(Value::Boolean(ks.durable_writes))),
                        (
                            "replication",
                            Some(Value::Map(crate::value::normalize_map(repl))),
                        ),
                    ]);
                }
            }
            ("system_schema", "tables") => {
                for tb in cat.keyspaces.values().flat_map(|k| k.tables.values()) {
                    let mut flags = vec![Value::Text("compound".into())];
                    if tb.is_counter {
                        flags.push(Value::Text("counter".into()));
                    }
                    let comment = tb.options.iter().find(|(k, _)| k == "comment").and_then(
                        |(_, v)| match v {
                            Literal::Str(s) => Some(s.clone()),
                            _ => None,
                        },
                    );
                    let ttl = tb.int_option("default_time_to_live").unwrap_or(0);
                    let gc = tb.int_option("gc_grace_seconds").unwrap_or(864_000);
                    rows.push(vec![
                        ("keyspace_name", text(&tb.keyspace)),
                        ("table_name", text(&tb.name)),
                        ("bloom_filter_fp_chance", Some(Value::Double(0.01))),
                        ("caching", text_map(&[("keys", "ALL"), ("rows_per_partition", "NONE")])),
                        ("cdc", Some(Value::Boolean(false))),
                        ("comment", text(comment.as_deref().unwrap_or(""))),
                        ("compaction", text_map(&[
                            ("class", "org.apache.cassandra.db.compaction.SizeTieredCompactionStrategy"),
                            ("max_threshold", "32"),
                            ("min_threshold", "4"),
                        ])),
                        ("compression", text_map(&[
                            ("chunk_length_in_kb", "64"),
                            ("class", "org.apache.cassandra.io.compress.LZ4Compressor"),
                        ])),
                        ("crc_check_chance", Some(Value::Double(1.0))),
                        ("dclocal_read_repair_chance", Some(Value::Double(0.1))),
                        ("default_time_to_live", Some(Value::Int(i32::try_from(ttl).unwrap_or(0)))),
                        ("extensions", Some(Value::Map(Vec::new()))),
                        ("flags", Some(Value::Set(flags))),
                        ("gc_grace_seconds", Some(Value::Int(i32::try_from(gc).unwrap_or(864_000)))),
                        ("id", Some(Value::Uuid(tb.id))),
                        ("max_index_interval", Some(Value::Int(2048))),
                        ("memtable_flush_period_in_ms", Some(Value::Int(0))),
                        ("min_index_interval", Some(Value::Int(128))),
                        ("read_repair_chance", Some(Value::Double(0.0))),
                        ("speculative_retry", text("99PERCENTILE")),
                    ]);
                }
            }
            ("system_schema", "columns") => {
                for tb in cat.keyspaces.values().flat_map(|k| k.tables.values()) {
                    for c in &tb.columns {
                        let (order, position) = match c.kind {
                            ColumnKind::PartitionKey => ("none", c.index),
                            ColumnKind::Clustering => {
                                (if c.desc { "desc" } else { "asc" }, c.index)
                            }
                            _ => ("none", usize::MAX),
                        };
                        rows.push(vec![
                            ("keyspace_name", text(&tb.keyspace)),
                            ("table_name", text(&tb.name)),
                            ("column_name", text(&c.name)),
                            ("clustering_order", text(order)),
                            (
                                "column_name_bytes",
                                Some(Value::Blob(c.name.as_bytes().to_vec())),
                            ),
                            ("kind", text(c.kind.as_str())),
                            (
                                "position",
                                Some(Value::Int(i32::try_from(position).unwrap_or(-1))),
                            ),
                            ("type", Some(Value::Text(c.ty.to_string()))),
                        ]);
                    }
                }
            }
            ("cqlsim", "stats") => {
                for ((ks, tb), s) in self.stats.snapshot().tables {
                    let n = |v: u64| Some(Value::BigInt(i64::try_from(v).unwrap_or(i64::MAX)));
                    rows.push(vec![
                        ("keyspace_name", Some(Value::Text(ks))),
                        ("table_name", Some(Value::Text(tb))),
                        ("write_requests", n(s.write_requests)),
                        ("writes_applied", n(s.writes_applied)),
                        ("batches", n(s.batches)),
                        ("rows_mutated", n(s.rows_mutated)),
                        (
                            "counter_delta_sum",
                            Some(Value::Varint(s.counter_delta_sum)),
                        ),
                        ("reads", n(s.reads)),
                    ]);
                }
            }
            ("cqlsim", "fault_stats") => {
                for (kind, s) in self.stats.snapshot().faults {
                    let n = |v: u64| Some(Value::BigInt(i64::try_from(v).unwrap_or(i64::MAX)));
                    rows.push(vec![
                        ("kind", text(kind.name())),
                        ("fired", n(s.fired)),
                        ("applied", n(s.applied)),
                    ]);
                }
            }
            // peers and the remaining schema tables are empty on a single node.
            _ => {}
        }
        fill(t, rows)
    }
}

/// Stores named row values into a table's storage layout.
fn fill(t: &TableSchema, rows: Vec<Vec<(&str, Option<Value>)>>) -> TableData {
    let mut data = TableData::default();
    for row in rows {
        let get = |ci: usize| {
            row.iter()
                .find(|(n, _)| *n == t.columns[ci].name)
                .and_then(|(_, v)| v.clone())
        };
        let Some(pk) = t
            .partition_key
            .iter()
            .map(|ci| get(*ci))
            .collect::<Option<Vec<_>>>()
        else {
            continue;
        };
        let Some(ck) = t
            .clustering
            .iter()
            .map(|ci| get(*ci))
            .collect::<Option<Vec<_>>>()
        else {
            continue;
        };
        let mut r = Row {
            marker: true,
            cells: vec![None; t.cells.len()],
            ..Row::default()
        };
        for ci in &t.cells {
            r.cells[t.columns[*ci].index] = get(*ci);
        }
        let part: &mut Partition = data.partitions.entry(pk).or_default();
        part.rows.insert(clustering_key(t, ck), r);
    }
    data
}

#[cfg(test)]
mod tests {
    #[test]
    fn system_schema_parses() {
        let stmts = crate::cql::parse_script(super::SCHEMA).expect("system schema parses");
        assert_eq!(stmts.len(), 14);
        let mut db = crate::storage::Db::new();
        super::install(&mut db);
        let n: usize = db.catalog.keyspaces.values().map(|k| k.tables.len()).sum();
        assert_eq!(n, 14, "every system table built");
    }
}
