//! Applying planned mutations to storage: counter cells add with wrapping (like a Java long),
//! regular cells reconcile by write time as Cassandra's do, rows without a marker or live cell
//! disappear (unless they remember a deletion), empty partitions are removed, and each change
//! is reported for the statistics.
//!
//! Reconciliation of regular cells (Cassandra's `Cells.resolveRegular` and
//! `DeletionTime.deletes`):
//!
//! - the later write time wins;
//! - at equal write times a tombstone (a null write, a deleted column) beats a value, and of
//!   two values the one whose serialized bytes compare greater, as unsigned bytes, wins (so
//!   for a `bigint`, -1 = `ff..ff` beats 5);
//! - a deletion of the partition, of a clustering prefix or of the row at time `d` removes
//!   every cell and row marker written at or before `d`, and keeps removing the ones that
//!   arrive later with such a time.

use super::Effects;
use super::write::{CellOp, Mutation};
use crate::schema::{ColumnKind, TableSchema};
use crate::stats::{DeleteRecord, DeleteScope};
use std::collections::BTreeMap;
use std::collections::btree_map::{self, Entry};

use crate::storage::{ClusteringKey, Db, Partition, Row, TableData};
use crate::value::Value;

/// Applies planned mutations and reports what changed.
pub(crate) fn apply(db: &mut Db, muts: Vec<Mutation>) -> Effects {
    let mut fx = Effects::default();
    let mut muts = muts.into_iter().peekable();
    while let Some(m) = muts.next() {
        match m {
            Mutation::Upsert {
                table,
                pk,
                ck,
                marker,
                cells,
                at,
            } => {
                // The rows of one partition that follow (a batch is usually one partition's
                // rows) are written with one lookup of the partition.
                let mut run = Vec::with_capacity(1);
                run.push((ck, marker, cells, at));
                while let Some(Mutation::Upsert {
                    ck,
                    marker,
                    cells,
                    at,
                    ..
                }) = muts.next_if(|next| same_partition(next, &table, &pk))
                {
                    run.push((ck, marker, cells, at));
                }
                let rows = run.len() as u64;
                let delta = in_partition(db.table_data_mut(&table), pk, |part| {
                    let mut delta = 0;
                    for (ck, marker, cells, at) in run {
                        if table.is_counter {
                            delta += add_counters_in(part, &table, ck, cells);
                        } else {
                            upsert_in(part, &table, ck, marker, cells, at);
                        }
                    }
                    delta
                });
                fx.add(&table, rows, delta);
            }
            Mutation::Delete {
                table,
                pk,
                ck_prefix,
                slots,
                at,
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
                if table.is_counter {
                    delete_counters(db, &table, &pk, &ck_prefix, slots.as_deref());
                } else {
                    delete(db, &table, &pk, ck_prefix, slots.as_deref(), at);
                }
                fx.add(&table, 1, 0);
            }
        }
    }
    fx
}

/// Whether `m` is an upsert into the partition `pk` of `table`.
fn same_partition(m: &Mutation, table: &TableSchema, pk: &[Value]) -> bool {
    matches!(m, Mutation::Upsert { table: t, pk: p, .. } if t.id == table.id && p == pk)
}

fn is_static(table: &TableSchema, slot: usize) -> bool {
    table.columns[table.cells[slot]].kind == ColumnKind::Static
}

/// Runs `f` on the partition of `pk` (a new, empty one if there is none) and drops the
/// partition if it is left empty: one map lookup, and `pk` moves into the map only when
/// the partition is new and kept.
fn in_partition<T>(data: &mut TableData, pk: Vec<Value>, f: impl FnOnce(&mut Partition) -> T) -> T {
    match data.partitions.entry(pk) {
        Entry::Occupied(mut o) => {
            let out = f(o.get_mut());
            if o.get().is_empty() {
                o.remove();
            }
            out
        }
        Entry::Vacant(v) => {
            let mut part = Partition::default();
            let out = f(&mut part);
            if !part.is_empty() {
                v.insert(part);
            }
            out
        }
    }
}

/// Runs `f` on the row of `ck` (a new, default one if there is none) and keeps the row
/// afterwards if `keep` says so, removing an existing one otherwise: the same outcome as
/// taking the row out and putting it back, without moving it.
fn in_row<T>(
    rows: &mut BTreeMap<ClusteringKey, Row>,
    ck: ClusteringKey,
    keep: impl Fn(&Row) -> bool,
    f: impl FnOnce(&mut Row) -> T,
) -> T {
    match rows.entry(ck) {
        btree_map::Entry::Occupied(mut o) => {
            let out = f(o.get_mut());
            if !keep(o.get()) {
                o.remove();
            }
            out
        }
        btree_map::Entry::Vacant(v) => {
            let mut row = Row::default();
            let out = f(&mut row);
            if keep(&row) {
                v.insert(row);
            }
            out
        }
    }
}

fn add_counters_in(
    part: &mut Partition,
    table: &TableSchema,
    ck: Option<ClusteringKey>,
    cells: Vec<(usize, CellOp)>,
) -> i128 {
    let n = table.cells.len();
    part.fit(n);
    let statics = &mut part.statics;
    let write = |mut row: Option<&mut Row>| {
        if let Some(r) = row.as_mut() {
            r.fit(n);
        }
        let mut delta: i128 = 0;
        for (slot, op) in cells {
            let cell = if is_static(table, slot) {
                &mut statics[slot]
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
        delta
    };
    match ck {
        None => write(None),
        Some(ck) => in_row(&mut part.rows, ck, Row::is_live, |r| write(Some(r))),
    }
}

/// Deletes counter rows or cells at once: counter tables keep no tombstones here.
fn delete_counters(
    db: &mut Db,
    table: &TableSchema,
    pk: &[Value],
    ck_prefix: &[Value],
    slots: Option<&[usize]>,
) {
    let data = db.table_data_mut(table);
    let Some(part) = data.partitions.get_mut(pk) else {
        return;
    };
    let matches = |k: &ClusteringKey| prefix_matches(ck_prefix, k);
    match slots {
        None if ck_prefix.is_empty() => {
            part.rows.clear();
            part.statics.iter_mut().for_each(|c| *c = None);
        }
        None => part.rows.retain(|k, _| !matches(k)),
        Some(slots) => {
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
    if part.is_empty() {
        data.partitions.remove(pk);
    }
}

fn prefix_matches(prefix: &[Value], k: &ClusteringKey) -> bool {
    prefix.len() <= k.len() && k.iter().zip(prefix).all(|(a, b)| a.value == *b)
}

/// Writes regular cells (and the row marker of an INSERT) at time `at`, in place (see
/// [`in_partition`], [`in_row`]).
fn upsert_in(
    part: &mut Partition,
    table: &TableSchema,
    ck: Option<ClusteringKey>,
    marker: bool,
    cells: Vec<(usize, CellOp)>,
    at: i64,
) {
    let n = table.cells.len();
    part.fit(n);
    let partition_deleted = part.deleted.is_some_and(|d| at <= d);
    let over = ck.as_ref().and_then(|ck| part.deletion_over(ck));
    let (statics, statics_written) = (&mut part.statics, &mut part.statics_written);
    let write = |mut row: Option<&mut Row>| {
        if let Some(r) = row.as_mut() {
            r.fit(n);
        }
        let row_deleted = row.as_ref().is_some_and(|r| {
            over.into_iter()
                .chain(r.deleted)
                .max()
                .is_some_and(|d| at <= d)
        });
        if let Some(r) = row.as_mut()
            && marker
            && !row_deleted
        {
            r.marker_time = if r.marker { r.marker_time.max(at) } else { at };
            r.marker = true;
        }
        for (slot, op) in cells {
            let CellOp::Set(value) = op else {
                continue;
            };
            if is_static(table, slot) {
                if !partition_deleted {
                    reconcile(&mut statics[slot], &mut statics_written[slot], value, at);
                }
            } else if let Some(r) = row.as_mut()
                && !row_deleted
            {
                reconcile(&mut r.cells[slot], &mut r.written[slot], value, at);
            }
        }
    };
    match ck {
        None => write(None),
        Some(ck) => in_row(
            &mut part.rows,
            ck,
            |r| r.is_live() || r.holds_tombstone(),
            |r| write(Some(r)),
        ),
    }
}

/// Merges a write of `value` (`None`: a tombstone) at `at` into a cell.
fn reconcile(cell: &mut Option<Value>, written: &mut Option<i64>, value: Option<Value>, at: i64) {
    let wins = match *written {
        None => true,
        Some(old) if at != old => at > old,
        Some(_) => match (cell.as_ref(), value.as_ref()) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(old), Some(new)) => bytes(new) > bytes(old),
        },
    };
    if wins {
        *cell = value;
        *written = Some(at);
    }
}

/// A value's serialized bytes; `Vec<u8>` compares as unsigned bytes, as Cassandra's
/// `ByteBufferUtil.compareUnsigned`.
fn bytes(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    value.encode(&mut out);
    out
}

/// Removes what a deletion at `at` shadows in `row`: cells and marker written at or before it.
fn shadow(row: &mut Row, at: i64) {
    for (cell, written) in row.cells.iter_mut().zip(row.written.iter_mut()) {
        if written.is_some_and(|w| w <= at) {
            *cell = None;
            *written = None;
        }
    }
    if row.marker && row.marker_time <= at {
        row.marker = false;
    }
}

/// Deletes regular data at time `at`: the partition, a clustering prefix, a row, or cells.
fn delete(
    db: &mut Db,
    table: &TableSchema,
    pk: &[Value],
    ck_prefix: Vec<Value>,
    slots: Option<&[usize]>,
    at: i64,
) {
    let n = table.cells.len();
    let full = ck_prefix.len() == table.clustering.len() && !ck_prefix.is_empty();
    let data = db.table_data_mut(table);
    let part = data.partitions.entry(pk.to_vec()).or_default();
    part.fit(n);
    match slots {
        None if ck_prefix.is_empty() => {
            part.deleted = Some(part.deleted.map_or(at, |d| d.max(at)));
            for (cell, written) in part.statics.iter_mut().zip(part.statics_written.iter_mut()) {
                if written.is_some_and(|w| w <= at) {
                    *cell = None;
                    *written = None;
                }
            }
            part.rows.values_mut().for_each(|r| shadow(r, at));
        }
        None if full => {
            let ck = crate::storage::clustering_key(table, ck_prefix);
            let row = part.rows.entry(ck).or_default();
            row.fit(n);
            row.deleted = Some(row.deleted.map_or(at, |d| d.max(at)));
            shadow(row, at);
        }
        None => {
            for (k, r) in part.rows.iter_mut() {
                if prefix_matches(&ck_prefix, k) {
                    shadow(r, at);
                }
            }
            part.range_deletions.push((ck_prefix, at));
        }
        Some(slots) => {
            for s in slots.iter().filter(|s| is_static(table, **s)) {
                if part.deleted.is_none_or(|d| at > d) {
                    reconcile(
                        &mut part.statics[*s],
                        &mut part.statics_written[*s],
                        None,
                        at,
                    );
                }
            }
            if full {
                let ck = crate::storage::clustering_key(table, ck_prefix);
                let over = part.deletion_over(&ck);
                let row = part.rows.entry(ck).or_default();
                row.fit(n);
                let shadowed = over.into_iter().chain(row.deleted).max();
                if shadowed.is_none_or(|d| at > d) {
                    for s in slots.iter().filter(|s| !is_static(table, **s)) {
                        reconcile(&mut row.cells[*s], &mut row.written[*s], None, at);
                    }
                }
            }
        }
    }
    part.rows.retain(|_, r| r.is_live() || r.holds_tombstone());
    if part.is_empty() {
        data.partitions.remove(pk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn big(v: i64) -> Option<Value> {
        Some(Value::BigInt(v))
    }

    /// (case, existing cell, its time, write, its time, result)
    #[test]
    fn regular_cells_reconcile_like_cassandra() {
        type Case = (
            &'static str,
            Option<Value>,
            Option<i64>,
            Option<Value>,
            i64,
            Option<Value>,
        );
        let cases: Vec<Case> = vec![
            ("empty slot takes the write", None, None, big(5), 1, big(5)),
            ("later write wins", big(5), Some(10), big(3), 11, big(3)),
            ("earlier write loses", big(5), Some(10), big(7), 9, big(5)),
            (
                "tie: greater bytes win",
                big(5),
                Some(10),
                big(7),
                10,
                big(7),
            ),
            (
                "tie: smaller bytes lose",
                big(7),
                Some(10),
                big(5),
                10,
                big(7),
            ),
            (
                "tie: -1 (ff..ff) beats 5",
                big(5),
                Some(10),
                big(-1),
                10,
                big(-1),
            ),
            (
                "tie: tombstone beats a value",
                big(5),
                Some(10),
                None,
                10,
                None,
            ),
            (
                "tie: a value loses to a tombstone",
                None,
                Some(10),
                big(5),
                10,
                None,
            ),
            (
                "later value beats a tombstone",
                None,
                Some(10),
                big(5),
                11,
                big(5),
            ),
        ];
        for (case, cell, written, value, at, expected) in cases {
            let (mut cell, mut written) = (cell, written);
            reconcile(&mut cell, &mut written, value, at);
            assert_eq!(cell, expected, "{case}");
        }
    }
}
