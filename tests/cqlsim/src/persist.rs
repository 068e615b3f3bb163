//! `--data-dir`: the store is written on clean shutdown as one CQL script
//! (`cqlsim-snapshot.cql`: CREATE KEYSPACE/TABLE, then INSERTs and UPDATEs `USING TIMESTAMP`
//! for regular rows, keeping each cell's write time, and `c = c + n` UPDATEs for counters) and
//! replayed at start through the normal executor. Tombstones are not written: a deletion is
//! forgotten across a restart. A crash or SIGKILL loses everything since the last clean
//! shutdown (README). The schema is replayed as it was, whatever the ScyllaDB persona's
//! DDL rules are now (a node keeps its tables across an upgrade or a setting change).

use std::fmt::Write as _;
use std::path::Path;

use crate::error::Error;
use crate::schema::{ColumnKind, TableSchema};
use crate::server::Handle;
use crate::storage::{Db, Partition};
use crate::value::Value;

const FILE: &str = "cqlsim-snapshot.cql";

pub(crate) fn load(h: &Handle, dir: &Path) -> Result<(), Error> {
    let path = dir.join(FILE);
    match std::fs::read_to_string(&path) {
        Ok(script) => {
            let rules = {
                let mut db = h.shared.db.lock();
                let rules = (db.counters_with_tablets, db.tablets_mode);
                db.counters_with_tablets = true;
                db.tablets_mode = crate::persona::TabletsMode::Enabled;
                rules
            };
            let replayed = h.execute_script(None, &script);
            {
                let mut db = h.shared.db.lock();
                (db.counters_with_tablets, db.tablets_mode) = rules;
            }
            replayed.map_err(|e| match e {
                Error::Script { index, source, .. } => Error::Script {
                    what: path.display().to_string(),
                    index,
                    source,
                },
                other => other,
            })?;
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(Error::DataDir { path, source }),
    }
}

pub(crate) fn save(h: &Handle, dir: &Path) -> Result<(), Error> {
    let text = dump(&h.shared.db.lock());
    let path = dir.join(FILE);
    let tmp = dir.join(format!("{FILE}.tmp"));
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| Error::DataDir { path: p, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    std::fs::write(&tmp, text).map_err(io(&tmp))?;
    std::fs::rename(&tmp, &path).map_err(io(&path))?;
    Ok(())
}

/// Quotes an identifier so any name survives.
fn q(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn dump(db: &Db) -> String {
    let mut s = String::from(
        "-- cqlsim snapshot: schema and data as CQL, replayed at start. Test/dev store, not for production.\n",
    );
    for ks in db.catalog.keyspaces.values().filter(|k| !k.is_system) {
        let repl: Vec<String> = ks
            .replication
            .iter()
            .map(|(k, v)| format!("'{}': '{}'", k.replace('\'', "''"), v.replace('\'', "''")))
            .collect();
        let tablets = match (db.persona, ks.tablets) {
            (crate::persona::Persona::Cassandra, _) => String::new(),
            (_, None) => " AND tablets = {'enabled': false}".to_owned(),
            (_, Some(initial)) => format!(" AND tablets = {{'initial': {initial}}}"),
        };
        let _ = writeln!(
            s,
            "CREATE KEYSPACE {} WITH replication = {{{}}} AND durable_writes = {}{tablets};",
            q(&ks.name),
            repl.join(", "),
            ks.durable_writes
        );
        for t in ks.tables.values() {
            create_table(&mut s, t);
            if let Some(data) = db.table_data(t) {
                for (pk, part) in &data.partitions {
                    rows(&mut s, t, pk, part);
                }
            }
        }
    }
    s
}

fn create_table(s: &mut String, t: &TableSchema) {
    let cols: Vec<String> = t
        .columns
        .iter()
        .map(|c| {
            format!(
                "{} {}{}",
                q(&c.name),
                c.ty,
                if c.kind == ColumnKind::Static {
                    " STATIC"
                } else {
                    ""
                }
            )
        })
        .collect();
    let pk: Vec<String> = t
        .partition_key
        .iter()
        .map(|i| q(&t.columns[*i].name))
        .collect();
    let mut key = format!("({})", pk.join(", "));
    for i in &t.clustering {
        key.push_str(", ");
        key.push_str(&q(&t.columns[*i].name));
    }
    let _ = write!(
        s,
        "CREATE TABLE {}.{} ({}, PRIMARY KEY ({key}))",
        q(&t.keyspace),
        q(&t.name),
        cols.join(", ")
    );
    let mut with: Vec<String> = Vec::new();
    if !t.clustering.is_empty() {
        let order: Vec<String> = t
            .clustering
            .iter()
            .map(|i| {
                format!(
                    "{} {}",
                    q(&t.columns[*i].name),
                    if t.columns[*i].desc { "DESC" } else { "ASC" }
                )
            })
            .collect();
        with.push(format!("CLUSTERING ORDER BY ({})", order.join(", ")));
    }
    with.extend(t.options.iter().map(|(k, v)| format!("{k} = {v}")));
    if !with.is_empty() {
        let _ = write!(s, " WITH {}", with.join(" AND "));
    }
    s.push_str(";\n");
}

fn rows(s: &mut String, t: &TableSchema, pk: &[Value], part: &Partition) {
    let table = format!("{}.{}", q(&t.keyspace), q(&t.name));
    let key_eq = |names: &[usize], vals: &[&Value]| -> Vec<String> {
        names
            .iter()
            .zip(vals)
            .map(|(i, v)| format!("{} = {}", q(&t.columns[*i].name), v.to_literal()))
            .collect()
    };
    let set = |slot: usize, v: &Value| -> String {
        let name = q(&t.columns[t.cells[slot]].name);
        match v {
            Value::Counter(n) => format!("{name} = {name} + {n}"),
            other => format!("{name} = {}", other.to_literal()),
        }
    };
    // Regular cells keep their write times: one UPDATE per distinct time. Counters add.
    let updates = |s: &mut String, cells: &[Option<Value>], written: &[Option<i64>], key: &str| {
        let mut by_time: std::collections::BTreeMap<Option<i64>, Vec<String>> =
            std::collections::BTreeMap::new();
        for (slot, v) in cells.iter().enumerate() {
            if let Some(v) = v {
                let at = if t.is_counter {
                    None
                } else {
                    written.get(slot).copied().flatten()
                };
                by_time.entry(at).or_default().push(set(slot, v));
            }
        }
        for (at, sets) in by_time {
            let using = at.map_or(String::new(), |at| format!(" USING TIMESTAMP {at}"));
            let _ = writeln!(
                s,
                "UPDATE {table}{using} SET {} WHERE {key};",
                sets.join(", ")
            );
        }
    };
    let pk_refs: Vec<&Value> = pk.iter().collect();
    updates(
        s,
        &part.statics,
        &part.statics_written,
        &key_eq(&t.partition_key, &pk_refs).join(" AND "),
    );
    for (ck, row) in part.rows.iter().filter(|(_, r)| r.is_live()) {
        let mut key_cols: Vec<usize> = t.partition_key.clone();
        key_cols.extend(&t.clustering);
        let mut key_vals = pk_refs.clone();
        key_vals.extend(ck.iter().map(|p| &p.value));
        if row.marker {
            let names: Vec<String> = key_cols.iter().map(|i| q(&t.columns[*i].name)).collect();
            let vals: Vec<String> = key_vals.iter().map(|v| v.to_literal()).collect();
            let _ = writeln!(
                s,
                "INSERT INTO {table} ({}) VALUES ({}) USING TIMESTAMP {};",
                names.join(", "),
                vals.join(", "),
                row.marker_time
            );
        }
        updates(
            s,
            &row.cells,
            &row.written,
            &key_eq(&key_cols, &key_vals).join(" AND "),
        );
    }
}
