//! Schema statements. Each successful change bumps the schema version (drivers poll
//! `system.local.schema_version` for agreement) and yields a SCHEMA_CHANGE result.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{SchemaChange, table_keyspace};
use crate::cql::ast::{AlterTable, Literal, Statement, Term};
use crate::error::CqlError;
use crate::schema::{Keyspace, TableSchema, validate_keyspace_name};
use crate::storage::Db;

/// Keyspaces that belong to the server.
pub(crate) const SYSTEM_KEYSPACES: [&str; 3] = ["system", "system_schema", "cqlsim"];

/// Refuses changes to the server's own keyspaces, as Cassandra does.
pub(crate) fn refuse_system(keyspace: &str) -> Result<(), CqlError> {
    if SYSTEM_KEYSPACES.contains(&keyspace) {
        return Err(CqlError::Unauthorized(format!(
            "{keyspace} keyspace is not user-modifiable."
        )));
    }
    Ok(())
}

fn change(change: &'static str, keyspace: &str, table: Option<&str>) -> Option<SchemaChange> {
    Some(SchemaChange {
        change,
        keyspace: keyspace.to_owned(),
        table: table.map(str::to_owned),
    })
}

/// Runs a DDL statement. `Ok(None)` means nothing changed (IF [NOT] EXISTS).
pub(crate) fn run(
    db: &mut Db,
    stmt: &Statement,
    keyspace: Option<&str>,
) -> Result<Option<SchemaChange>, CqlError> {
    let out = match stmt {
        Statement::CreateKeyspace(ck) => {
            validate_keyspace_name(&ck.name)?;
            if db.catalog.keyspaces.contains_key(&ck.name) {
                if ck.if_not_exists {
                    return Ok(None);
                }
                return Err(CqlError::AlreadyExists {
                    message: format!("Cannot add existing keyspace \"{}\"", ck.name),
                    keyspace: ck.name.clone(),
                    table: String::new(),
                });
            }
            let (replication, durable_writes, tablets) = keyspace_options(&ck.options)?;
            let class = replication
                .iter()
                .find(|(k, _)| k == "class")
                .map_or("", |(_, v)| v.as_str());
            let tablets =
                db.persona
                    .keyspace_tablets(db.tablets_mode, class, tablets.as_deref())?;
            db.catalog.keyspaces.insert(
                ck.name.clone(),
                Keyspace {
                    name: ck.name.clone(),
                    replication,
                    durable_writes,
                    tables: BTreeMap::new(),
                    is_system: false,
                    tablets,
                },
            );
            change("CREATED", &ck.name, None)
        }
        Statement::DropKeyspace { name, if_exists } => {
            refuse_system(name)?;
            let Some(dropped) = db.catalog.keyspaces.remove(name) else {
                if *if_exists {
                    return Ok(None);
                }
                return Err(CqlError::invalid(format!(
                    "Keyspace '{name}' doesn't exist"
                )));
            };
            for t in dropped.tables.values() {
                db.data.remove(&t.id);
            }
            change("DROPPED", name, None)
        }
        Statement::CreateTable(ct) => {
            let ks = table_keyspace(&ct.name, keyspace)?.to_owned();
            refuse_system(&ks)?;
            let t = TableSchema::build(&ks, ct, false)?;
            let (persona, counters_with_tablets) = (db.persona, db.counters_with_tablets);
            let space = db
                .catalog
                .keyspaces
                .get_mut(&ks)
                .ok_or_else(|| CqlError::invalid(format!("Keyspace '{ks}' doesn't exist")))?;
            if t.is_counter
                && space.tablets.is_some()
                && let Some(refusal) =
                    persona.counter_table_refusal(counters_with_tablets, &ks, &t.name)
            {
                return Err(refusal);
            }
            if space.tables.contains_key(&t.name) {
                if ct.if_not_exists {
                    return Ok(None);
                }
                return Err(CqlError::AlreadyExists {
                    message: format!(
                        "Cannot add already existing table \"{}\" to keyspace \"{ks}\"",
                        t.name
                    ),
                    keyspace: ks,
                    table: t.name,
                });
            }
            let name = t.name.clone();
            db.data.remove(&t.id);
            space.tables.insert(name.clone(), Arc::new(t));
            change("CREATED", &ks, Some(&name))
        }
        Statement::DropTable { table, if_exists } => {
            let ks = table_keyspace(table, keyspace)?.to_owned();
            refuse_system(&ks)?;
            let Some(space) = db.catalog.keyspaces.get_mut(&ks) else {
                if *if_exists {
                    return Ok(None);
                }
                return Err(missing_table(&ks, &table.name));
            };
            let Some(dropped) = space.tables.remove(&table.name) else {
                if *if_exists {
                    return Ok(None);
                }
                return Err(missing_table(&ks, &table.name));
            };
            db.data.remove(&dropped.id);
            change("DROPPED", &ks, Some(&table.name))
        }
        Statement::AlterTable(alter) => {
            let (q, opts, cols) = match alter {
                AlterTable::Add { table, columns } => (table, None, Some(columns)),
                AlterTable::With { table, options } => (table, Some(options), None),
            };
            let ks = table_keyspace(q, keyspace)?.to_owned();
            refuse_system(&ks)?;
            let mut t = (**db
                .catalog
                .table(&ks, &q.name)
                .map_err(|_| missing_table(&ks, &q.name))?)
            .clone();
            if let Some(opts) = opts {
                t.set_options(opts)?;
            }
            if let Some(cols) = cols {
                t.add_columns(cols)?;
            }
            if let Some(space) = db.catalog.keyspaces.get_mut(&ks) {
                space.tables.insert(t.name.clone(), Arc::new(t));
            }
            change("UPDATED", &ks, Some(&q.name))
        }
        Statement::CreateIndexOrView { base, view } => {
            // Cassandra 5.0 refuses every view unless cassandra.yaml enables them (it does
            // not by default), before looking at the base table.
            if *view {
                return Err(CqlError::invalid(
                    "Materialized views are disabled. Enable in cassandra.yaml to use.",
                ));
            }
            let ks = table_keyspace(base, keyspace)?;
            let t = db.catalog.table(ks, &base.name)?;
            if t.is_counter {
                return Err(CqlError::invalid(
                    "Secondary indexes on counter tables aren't supported",
                ));
            }
            return Err(CqlError::invalid(
                "secondary indexes are not supported by cqlsim",
            ));
        }
        _ => return Err(CqlError::Server("not a schema statement".into())),
    };
    db.catalog.bump_version();
    Ok(out)
}

/// DROP TABLE's and ALTER TABLE's answer for a table (or keyspace) that does not exist.
fn missing_table(keyspace: &str, table: &str) -> CqlError {
    CqlError::invalid(format!("Table '{keyspace}.{table}' doesn't exist"))
}

/// Replication, durable writes, and the `tablets` property (which only the ScyllaDB
/// persona accepts) as text pairs.
type KeyspaceOptions = (Vec<(String, String)>, bool, Option<Vec<(String, String)>>);

/// `replication = {...}` (mandatory, with a class), `durable_writes` and `tablets`.
fn keyspace_options(opts: &[(String, Literal)]) -> Result<KeyspaceOptions, CqlError> {
    let mut replication = None;
    let mut durable = true;
    let mut tablets = None;
    for (k, v) in opts {
        match (k.as_str(), v) {
            ("replication", Literal::Map(entries)) => {
                let mut m = Vec::new();
                for (mk, mv) in entries {
                    let text = |t: &Term| match t {
                        Term::Lit(Literal::Str(s) | Literal::Int(s) | Literal::Float(s)) => {
                            Some(s.clone())
                        }
                        _ => None,
                    };
                    match (text(mk), text(mv)) {
                        (Some(a), Some(b)) => m.push((a, b)),
                        _ => {
                            return Err(CqlError::syntax(
                                "Invalid value for property 'replication'",
                            ));
                        }
                    }
                }
                replication = Some(m);
            }
            ("tablets", Literal::Map(entries)) => {
                let mut m = Vec::new();
                for (mk, mv) in entries {
                    let text = |t: &Term| match t {
                        Term::Lit(Literal::Str(s) | Literal::Int(s) | Literal::Float(s)) => {
                            Some(s.clone())
                        }
                        Term::Lit(Literal::Bool(b)) => Some(b.to_string()),
                        _ => None,
                    };
                    match (text(mk), text(mv)) {
                        (Some(a), Some(b)) => m.push((a, b)),
                        _ => return Err(CqlError::syntax("Invalid value for property 'tablets'")),
                    }
                }
                tablets = Some(m);
            }
            ("durable_writes", Literal::Bool(b)) => durable = *b,
            ("durable_writes", Literal::Str(s)) => durable = s.eq_ignore_ascii_case("true"),
            ("replication" | "durable_writes", _) => {
                return Err(CqlError::syntax(format!(
                    "Invalid value for property '{k}'"
                )));
            }
            _ => return Err(CqlError::syntax(format!("Unknown property '{k}'"))),
        }
    }
    let mut replication = replication
        .ok_or_else(|| CqlError::Config("Missing mandatory replication strategy class".into()))?;
    let class = replication
        .iter_mut()
        .find(|(k, _)| k == "class")
        .ok_or_else(|| CqlError::Config("Missing replication strategy class".into()))?;
    // Clients expect the fully qualified class name, as Cassandra stores it.
    if !class.1.contains('.') {
        class.1 = format!("org.apache.cassandra.locator.{}", class.1);
    }
    let class_name = class.1.clone();
    let simple = class_name == "org.apache.cassandra.locator.SimpleStrategy";
    if !simple && class_name != "org.apache.cassandra.locator.NetworkTopologyStrategy" {
        return Err(CqlError::Config(format!(
            "Unable to find replication strategy class '{class_name}'"
        )));
    }
    // Cassandra 5.0 fills a missing SimpleStrategy factor from `default_keyspace_rf` (1).
    if simple && !replication.iter().any(|(k, _)| k == "replication_factor") {
        replication.push(("replication_factor".into(), "1".into()));
    }
    for (k, v) in &replication {
        if k == "class" {
            continue;
        }
        // Cassandra parses factors with Integer.parseInt and shows Java's message.
        match v.parse::<i32>() {
            Err(_) => return Err(CqlError::Config(format!("For input string: \"{v}\""))),
            Ok(n) if n < 0 => {
                return Err(CqlError::Config(format!(
                    "Replication factor must be non-negative; found {n}"
                )));
            }
            Ok(_) => {}
        }
    }
    Ok((replication, durable, tablets))
}
