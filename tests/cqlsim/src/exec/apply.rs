//! Applying planned mutations to storage: counter cells add with wrapping (like a Java long),
//! rows without a marker or live cell disappear, empty partitions are removed, and each change
//! is reported for the statistics.

use super::Effects;
use super::write::{CellOp, Mutation};
use crate::schema::ColumnKind;
use crate::stats::{DeleteRecord, DeleteScope};
use crate::storage::{ClusteringKey, Db, Row};
use crate::value::Value;

/// Applies planned mutations and reports what changed.
pub(crate) fn apply(db: &mut Db, muts: Vec<Mutation>) -> Effects {
    let mut fx = Effects::default();
    for m in muts {
        match m {
            Mutation::Upsert {
                table,
                pk,
                ck,
                marker,
                cells,
            } => {
                let n = table.cells.len();
                let data = db.table_data_mut(&table);
                let part = data.partitions.entry(pk.clone()).or_default();
                part.statics.resize(n, None);
                let mut delta: i128 = 0;
                let mut row = ck
                    .as_ref()
                    .map(|ck| part.rows.remove(ck).unwrap_or_default());
                if let Some(r) = row.as_mut() {
                    r.cells.resize(n, None);
                    r.marker |= marker;
                }
                for (slot, op) in cells {
                    let is_static = table.columns[table.cells[slot]].kind == ColumnKind::Static;
                    let cell = if is_static {
                        &mut part.statics[slot]
                    } else if let Some(r) = row.as_mut() {
                        &mut r.cells[slot]
                    } else {
                        continue;
                    };
                    match op {
                        CellOp::Set(v) => *cell = v,
                        CellOp::Add(d) => {
                            let cur = match cell {
                                Some(Value::Counter(c)) => *c,
                                _ => 0,
                            };
                            *cell = Some(Value::Counter(cur.wrapping_add(d)));
                            delta += i128::from(d);
                        }
                    }
                }
                if let (Some(ck), Some(r)) = (ck, row)
                    && r.is_live()
                {
                    part.rows.insert(ck, r);
                }
                if part.is_empty() {
                    data.partitions.remove(&pk);
                }
                fx.add(&table, 1, delta);
            }
            Mutation::Delete {
                table,
                pk,
                ck_prefix,
                slots,
            } => {
                fx.deletes.push(super::DeleteEffect {
                    keyspace: table.keyspace.clone(),
                    table: table.name.clone(),
                    record: DeleteRecord {
                        scope: match (&slots, ck_prefix.is_empty()) {
                            (Some(_), _) => DeleteScope::Cells,
                            (None, true) => DeleteScope::Partition,
                            (None, false) => DeleteScope::Rows,
                        },
                        partition: pk.iter().map(Value::to_literal).collect(),
                        clustering: ck_prefix.iter().map(Value::to_literal).collect(),
                    },
                });
                let data = db.table_data_mut(&table);
                if let Some(part) = data.partitions.get_mut(&pk) {
                    let matches =
                        |k: &ClusteringKey| k.iter().zip(&ck_prefix).all(|(a, b)| a.value == *b);
                    match &slots {
                        None if ck_prefix.is_empty() => part.rows.clear(),
                        None => part.rows.retain(|k, _| !matches(k)),
                        Some(slots) => {
                            for s in slots {
                                if table.columns[table.cells[*s]].kind == ColumnKind::Static
                                    && let Some(c) = part.statics.get_mut(*s)
                                {
                                    *c = None;
                                }
                            }
                            for (k, r) in part.rows.iter_mut() {
                                if matches(k) {
                                    for s in slots {
                                        if let Some(c) = r.cells.get_mut(*s) {
                                            *c = None;
                                        }
                                    }
                                }
                            }
                            part.rows.retain(|_, r: &mut Row| r.is_live());
                        }
                    }
                    if slots.is_none() && ck_prefix.is_empty() {
                        part.statics.iter_mut().for_each(|c| *c = None);
                    }
                    if part.is_empty() {
                        data.partitions.remove(&pk);
                    }
                }
                fx.add(&table, 1, 0);
            }
        }
    }
    fx
}
