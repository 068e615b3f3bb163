//! SELECT: partition-key equality or IN (or a full scan), clustering equality/IN/slices on a
//! key prefix, regular-column filtering with ALLOW FILTERING, ORDER BY a clustering column,
//! LIMIT, COUNT(*), column lists with aliases, and paging.
//!
//! Paging is by offset: the paging state is the number of rows already returned. The result
//! is recomputed per page, so concurrent writes can shift a page (acceptable for a test store,
//! noted in the README). Unpaged requests always get one complete page.

use super::bind::{Bindings, Bound};
use super::write::in_values;
use super::{ColSpec, Paging, ResultRows, Virtual};
use crate::cql::ast::{RangeOp, Relation, Select, Selection};
use crate::error::CqlError;
use crate::schema::{ColumnKind, TableSchema};
use crate::storage::{Db, TableData};
use crate::types::ColType;
use crate::value::Value;

/// Where a result column comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    Column(usize),
    Count,
}

/// The result columns of a selection (also the PREPARE result metadata).
pub(crate) fn result_columns(
    t: &TableSchema,
    sel: &Selection,
) -> Result<Vec<(ColSpec, Source)>, CqlError> {
    let spec = |name: &str, ty: &ColType| ColSpec {
        keyspace: t.keyspace.clone(),
        table: t.name.clone(),
        name: name.to_owned(),
        ty: ty.clone(),
    };
    Ok(match sel {
        Selection::All => {
            let mut idx: Vec<usize> = t
                .partition_key
                .iter()
                .chain(&t.clustering)
                .copied()
                .collect();
            let mut rest: Vec<usize> = t.cells.clone();
            rest.sort_by(|a, b| t.columns[*a].name.cmp(&t.columns[*b].name));
            idx.extend(rest);
            idx.into_iter()
                .map(|i| {
                    (
                        spec(&t.columns[i].name, &t.columns[i].ty),
                        Source::Column(i),
                    )
                })
                .collect()
        }
        Selection::Count(alias) => vec![(
            spec(alias.as_deref().unwrap_or("count"), &ColType::BigInt),
            Source::Count,
        )],
        Selection::Columns(cols) => cols
            .iter()
            .map(|(name, alias)| {
                let i = t
                    .columns
                    .iter()
                    .position(|c| &c.name == name)
                    .ok_or_else(|| t.undefined(name))?;
                Ok((
                    spec(alias.as_deref().unwrap_or(name), &t.columns[i].ty),
                    Source::Column(i),
                ))
            })
            .collect::<Result<_, CqlError>>()?,
    })
}

enum Pred {
    In(Vec<Value>),
    Range(RangeOp, Value),
}

impl Pred {
    fn test(&self, v: Option<&Value>) -> bool {
        let Some(v) = v else { return false };
        match self {
            Pred::In(vals) => vals.contains(v),
            Pred::Range(op, x) => match op {
                RangeOp::Lt => v < x,
                RangeOp::Le => v <= x,
                RangeOp::Gt => v > x,
                RangeOp::Ge => v >= x,
            },
        }
    }
}

const FILTERING: &str = "Cannot execute this query as it might involve data filtering and thus may have unpredictable performance. If you want to execute this query despite the performance unpredictability, use ALLOW FILTERING";

pub(crate) fn select(
    db: &Db,
    t: &TableSchema,
    s: &Select,
    b: Bindings<'_>,
    paging: Paging<'_>,
    virt: &dyn Virtual,
) -> Result<ResultRows, CqlError> {
    let cols = result_columns(t, &s.selection)?;
    let mut pk_vals: Vec<Option<Vec<Value>>> = vec![None; t.partition_key.len()];
    // (column index, predicate)
    let mut filters: Vec<(usize, Pred)> = Vec::new();
    let mut ck_kind: Vec<u8> = vec![0; t.clustering.len()]; // 0 none, 1 eq/in, 2 range
    let mut regular_filtered = false;
    for r in &s.where_ {
        let ci = t
            .columns
            .iter()
            .position(|c| c.name == r.column())
            .ok_or_else(|| t.undefined(r.column()))?;
        let c = &t.columns[ci];
        let pred = match r {
            Relation::Eq(_, term) => Pred::In(vec![b.resolve_value(term, &c.ty, &c.name)?]),
            Relation::In(_, vals) => Pred::In(in_values(vals, &c.ty, &c.name, b)?),
            Relation::Range(_, op, term) => {
                if c.kind == ColumnKind::PartitionKey {
                    return Err(CqlError::invalid(
                        "Only EQ and IN relation are supported on the partition key (unless you use the token() function)",
                    ));
                }
                Pred::Range(*op, b.resolve_value(term, &c.ty, &c.name)?)
            }
        };
        match c.kind {
            ColumnKind::PartitionKey => {
                if pk_vals[c.index].is_some() {
                    return Err(more_than_one(&c.name));
                }
                if let Pred::In(v) = pred {
                    pk_vals[c.index] = Some(v);
                }
                continue;
            }
            ColumnKind::Clustering => {
                let k = if matches!(pred, Pred::In(_)) { 1 } else { 2 };
                if ck_kind[c.index] == 1 || (ck_kind[c.index] == 2 && k == 1) {
                    return Err(more_than_one(&c.name));
                }
                ck_kind[c.index] = k;
            }
            ColumnKind::Regular | ColumnKind::Static => regular_filtered = true,
        }
        filters.push((ci, pred));
    }
    let pk_full = pk_vals.iter().all(Option::is_some);
    let pk_none = pk_vals.iter().all(Option::is_none);
    if !pk_full && !pk_none && !s.allow_filtering {
        let missing: Vec<&str> = pk_vals
            .iter()
            .zip(&t.partition_key)
            .filter(|(v, _)| v.is_none())
            .map(|(_, c)| t.columns[*c].name.as_str())
            .collect();
        return Err(CqlError::invalid(format!(
            "Partition key parts: {} must be restricted as other parts are",
            missing.join(", ")
        )));
    }
    if !s.allow_filtering {
        for i in 1..ck_kind.len() {
            if ck_kind[i] == 0 {
                continue;
            }
            let (c, prev) = (
                &t.columns[t.clustering[i]].name,
                &t.columns[t.clustering[i - 1]].name,
            );
            if ck_kind[..i].contains(&0) {
                return Err(CqlError::invalid(format!(
                    "PRIMARY KEY column \"{c}\" cannot be restricted as preceding column \"{prev}\" is not restricted"
                )));
            }
            if ck_kind[..i].contains(&2) {
                return Err(CqlError::invalid(format!(
                    "Clustering column \"{c}\" cannot be restricted (preceding column \"{prev}\" is restricted by a non-EQ relation)"
                )));
            }
        }
        if regular_filtered || (!pk_full && ck_kind.iter().any(|k| *k != 0)) {
            return Err(CqlError::invalid(FILTERING));
        }
    }
    if !pk_full {
        for (k, v) in pk_vals.iter().enumerate() {
            if let Some(v) = v {
                filters.push((t.partition_key[k], Pred::In(v.clone())));
            }
        }
    }
    let reverse = order(t, s, pk_full)?;
    let limit = match &s.limit {
        None => None,
        Some(term) => match b.resolve(term, &ColType::Int, "[limit]")? {
            Bound::Val(Value::Int(n)) if n > 0 => Some(usize::try_from(n).unwrap_or(usize::MAX)),
            Bound::Val(_) => return Err(CqlError::invalid("LIMIT must be strictly positive")),
            Bound::Null => return Err(CqlError::invalid("Invalid null value of limit")),
            Bound::Unset => None,
        },
    };

    let owned;
    let data: &TableData = if t.is_virtual {
        owned = virt.materialize(db, t);
        &owned
    } else {
        match db.table_data(t) {
            Some(d) => d,
            None => {
                owned = TableData::default();
                &owned
            }
        }
    };
    let keys: Vec<Vec<Value>> = if pk_full {
        product(pk_vals.into_iter().flatten().collect())
    } else {
        data.partitions.keys().cloned().collect()
    };
    let counts = cols.iter().any(|(_, src)| *src == Source::Count);
    let page_start = match paging.state {
        None => 0,
        Some(st) => {
            let a: [u8; 8] = st
                .try_into()
                .map_err(|_| CqlError::Protocol("Invalid value for the paging state".into()))?;
            usize::try_from(u64::from_be_bytes(a)).unwrap_or(usize::MAX)
        }
    };
    // A page of rows in storage order (no ORDER BY, no LIMIT, no COUNT) is built alone:
    // the rows before it are counted, not materialized, and the scan stops one row after
    // it (to know whether more follow). A paged scan of a partition then costs its rows
    // once, as a server resuming from its paging state does, not once per page.
    let window = match paging.page_size {
        Some(size) if s.order_by.is_empty() && !reverse && limit.is_none() && !counts => {
            Some((page_start, size))
        }
        _ => None,
    };
    let mut skipped = 0_usize;
    let mut rows: Vec<(Vec<crate::storage::KeyPart>, Vec<Option<Value>>)> = Vec::new();
    'partitions: for pk in keys {
        if let Some((_, size)) = window
            && rows.len() > size
        {
            break 'partitions;
        }
        let Some(part) = data.partitions.get(&pk).filter(|p| p.has_live_data()) else {
            continue;
        };
        let mut base: Vec<Option<Value>> = vec![None; t.columns.len()];
        for (k, ci) in t.partition_key.iter().enumerate() {
            base[*ci] = pk.get(k).cloned();
        }
        for ci in &t.cells {
            if t.columns[*ci].kind == ColumnKind::Static {
                base[*ci] = part.statics.get(t.columns[*ci].index).cloned().flatten();
            }
        }
        let emit = |rows: &mut Vec<_>,
                    skipped: &mut usize,
                    ck: Vec<crate::storage::KeyPart>,
                    full: Vec<Option<Value>>| {
            if filters.iter().all(|(ci, p)| p.test(full[*ci].as_ref())) {
                match window {
                    Some((start, _)) if *skipped < start => *skipped += 1,
                    _ => rows.push((ck, full)),
                }
            }
        };
        if !part.rows.values().any(|r| r.is_live()) {
            emit(&mut rows, &mut skipped, Vec::new(), base.clone());
            continue;
        }
        for (ck, row) in part.rows.iter().filter(|(_, r)| r.is_live()) {
            if let Some((start, size)) = window {
                if rows.len() > size {
                    break 'partitions;
                }
                if filters.is_empty() && skipped < start {
                    skipped += 1;
                    continue;
                }
            }
            let mut full = base.clone();
            for (k, ci) in t.clustering.iter().enumerate() {
                full[*ci] = ck.get(k).map(|p| p.value.clone());
            }
            for ci in &t.cells {
                let c = &t.columns[*ci];
                if c.kind == ColumnKind::Regular {
                    full[*ci] = row.cells.get(c.index).cloned().flatten();
                }
            }
            emit(&mut rows, &mut skipped, ck.clone(), full);
        }
    }
    if !s.order_by.is_empty() {
        rows.sort_by(|a, b| a.0.cmp(&b.0));
    }
    if reverse {
        rows.reverse();
    }
    let mut out: Vec<Vec<Option<Value>>> = if counts {
        let n = i64::try_from(rows.len()).unwrap_or(i64::MAX);
        vec![cols.iter().map(|_| Some(Value::BigInt(n))).collect()]
    } else {
        rows.into_iter()
            .take(limit.unwrap_or(usize::MAX))
            .map(|(_, full)| {
                cols.iter()
                    .map(|(_, src)| match src {
                        Source::Column(i) => full[*i].clone(),
                        Source::Count => None,
                    })
                    .collect()
            })
            .collect()
    };
    let mut paging_state = None;
    if let Some((start, size)) = window {
        // `out` is the page and at most one row beyond it.
        if out.len() > size {
            paging_state = Some(
                u64::try_from(start.saturating_add(size))
                    .unwrap_or(u64::MAX)
                    .to_be_bytes()
                    .to_vec(),
            );
            out.truncate(size);
        }
    } else if let Some(size) = paging.page_size {
        let start = page_start.min(out.len());
        let end = start.saturating_add(size).min(out.len());
        if end < out.len() {
            paging_state = Some(
                u64::try_from(end)
                    .unwrap_or(u64::MAX)
                    .to_be_bytes()
                    .to_vec(),
            );
        }
        out = out.drain(start..end).collect();
    }
    Ok(ResultRows {
        cols: cols.into_iter().map(|(c, _)| c).collect(),
        rows: out,
        paging_state,
    })
}

fn more_than_one(name: &str) -> CqlError {
    CqlError::invalid(format!(
        "{name} cannot be restricted by more than one relation if it includes an Equal"
    ))
}

/// Validates ORDER BY; returns whether storage order must be reversed.
fn order(t: &TableSchema, s: &Select, pk_full: bool) -> Result<bool, CqlError> {
    if s.order_by.is_empty() {
        return Ok(false);
    }
    if !pk_full {
        return Err(CqlError::invalid(
            "ORDER BY is only supported when the partition key is restricted by an EQ or an IN.",
        ));
    }
    let mut reverse = None;
    for (k, (name, desc)) in s.order_by.iter().enumerate() {
        let c = t.column(name).ok_or_else(|| t.undefined(name))?;
        if c.kind != ColumnKind::Clustering {
            return Err(CqlError::invalid(format!(
                "Order by is currently only supported on the clustered columns of the PRIMARY KEY, got {name}"
            )));
        }
        if c.index != k {
            return Err(CqlError::invalid(
                "Order by currently only supports the ordering of columns following their declared order in the PRIMARY KEY",
            ));
        }
        let r = *desc != c.desc;
        if reverse.is_some_and(|x| x != r) {
            return Err(CqlError::invalid("Unsupported order by relation"));
        }
        reverse = Some(r);
    }
    Ok(reverse.unwrap_or(false))
}

fn product(cols: Vec<Vec<Value>>) -> Vec<Vec<Value>> {
    cols.into_iter().fold(vec![Vec::new()], |acc, vals| {
        acc.iter()
            .flat_map(|p| {
                vals.iter().map(move |v| {
                    let mut p = p.clone();
                    p.push(v.clone());
                    p
                })
            })
            .collect()
    })
}
