//! INSERT, UPDATE, DELETE and batches: Cassandra's modification and counter rules (research
//! §4.2, §4.3) checked while planning, then applied in one step.

use std::sync::Arc;

use super::bind::{Bindings, Bound};
use super::{BatchItem, resolve_table};
use crate::cql::ast::{Condition, InValues, Literal, Operation, Relation, Statement, Term, Using};
use crate::error::CqlError;
use crate::proto::request::BatchKind;
use crate::schema::{Column, ColumnKind, TableSchema};
use crate::storage::{ClusteringKey, Db, KeyPart, clustering_key};
use crate::types::ColType;
use crate::value::Value;

/// A change to one cell.
#[derive(Debug, Clone)]
pub(crate) enum CellOp {
    /// Write a value; `None` deletes the cell.
    Set(Option<Value>),
    /// Add to a counter (wrapping like a Java long).
    Add(i64),
}

/// A planned change to one row (or a set of rows for deletes).
#[derive(Debug, Clone)]
pub(crate) enum Mutation {
    Upsert {
        table: Arc<TableSchema>,
        pk: Vec<Value>,
        /// `None` when only static columns are written.
        ck: Option<ClusteringKey>,
        marker: bool,
        cells: Vec<(usize, CellOp)>,
        /// Write time, microseconds (unused by counter cells).
        at: i64,
    },
    Delete {
        table: Arc<TableSchema>,
        pk: Vec<Value>,
        /// Clustering values of a prefix; empty deletes the partition (or its statics).
        ck_prefix: Vec<Value>,
        /// Cell slots to delete; `None` deletes whole rows.
        slots: Option<Vec<usize>>,
        /// Deletion time, microseconds.
        at: i64,
    },
}

/// The write time a statement gets when it does not set its own with `USING TIMESTAMP`:
/// its batch's `USING TIMESTAMP`, else the client timestamp of the frame, else the
/// server's clock ([`crate::storage::Db::next_write_time`]). One per statement or batch, as
/// in Cassandra, so every row of a batch carries the same time.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WriteTime {
    /// The time.
    pub(crate) default: i64,
}

impl WriteTime {
    /// A placeholder for PREPARE-time validation, where nothing is applied.
    pub(crate) fn dry() -> WriteTime {
        WriteTime { default: 0 }
    }
}

/// The column positions of a prepared INSERT/UPDATE/DELETE, resolved once against one
/// version of its table's schema and kept with the prepared statement, so that executing it
/// (128 times per batch frame) does not look every column up by name again.
#[derive(Debug, Default)]
pub(crate) struct PlanCache(parking_lot::Mutex<Option<Arc<Resolved>>>);

/// The positions in `table.columns` of the columns a statement names, in [`named`] order.
#[derive(Debug)]
pub(crate) struct Resolved {
    table: Arc<TableSchema>,
    cols: Vec<usize>,
}

impl PlanCache {
    /// The positions for `stmt` against table `t`: kept ones if they were resolved against
    /// this very schema version (ALTER, and DROP then CREATE, put a new `Arc` in the
    /// catalog; the `Arc` held here keeps the old one's address from being reused), else
    /// resolved now. `None` when a name is unknown (or an INSERT names a column twice): the
    /// statement is then planned by name, which reports it as before.
    fn resolve(&self, t: &Arc<TableSchema>, stmt: &Statement) -> Option<Arc<Resolved>> {
        let mut slot = self.0.lock();
        if let Some(r) = slot.as_ref().filter(|r| Arc::ptr_eq(&r.table, t)) {
            return Some(r.clone());
        }
        let names = named(stmt);
        if let Statement::Insert(i) = stmt
            && (1..i.columns.len()).any(|k| i.columns[..k].contains(&i.columns[k]))
        {
            return None;
        }
        let cols = names
            .iter()
            .map(|n| t.column_position(n))
            .collect::<Option<Vec<usize>>>()?;
        let r = Arc::new(Resolved {
            table: t.clone(),
            cols,
        });
        *slot = Some(r.clone());
        Some(r)
    }
}

/// The column names a modification uses, in the order [`Lookup::col`] numbers them: an
/// INSERT's columns; an UPDATE's assignments then its WHERE relations; a DELETE's columns
/// then its WHERE relations.
fn named(stmt: &Statement) -> Vec<&str> {
    match stmt {
        Statement::Insert(i) => i.columns.iter().map(String::as_str).collect(),
        Statement::Update(u) => u
            .assignments
            .iter()
            .map(|a| a.column.as_str())
            .chain(u.where_.iter().map(Relation::column))
            .collect(),
        Statement::Delete(d) => d
            .columns
            .iter()
            .map(String::as_str)
            .chain(d.where_.iter().map(Relation::column))
            .collect(),
        _ => Vec::new(),
    }
}

/// Finds the columns a statement names: by name, or at the positions a [`PlanCache`]
/// resolved for this schema version.
#[derive(Clone, Copy)]
struct Lookup<'a> {
    t: &'a TableSchema,
    at: Option<&'a [usize]>,
}

impl<'a> Lookup<'a> {
    /// The `k`-th column the statement names (see [`named`]), called `name`.
    fn col(self, k: usize, name: &str) -> Option<&'a Column> {
        match self.at {
            Some(at) => {
                let c = at.get(k).map(|i| &self.t.columns[*i]);
                debug_assert!(c.is_some_and(|c| c.name == name), "{name} at {k}");
                c
            }
            None => self.t.column(name),
        }
    }
}

/// Plans one INSERT/UPDATE/DELETE. `cache`, for a prepared statement, keeps the column
/// positions between executions.
pub(crate) fn plan(
    db: &Db,
    stmt: &Statement,
    keyspace: Option<&str>,
    b: Bindings<'_>,
    time: WriteTime,
    cache: Option<&PlanCache>,
) -> Result<Vec<Mutation>, CqlError> {
    let mut muts = Vec::new();
    plan_into(db, stmt, keyspace, b, time, cache, &mut muts)?;
    Ok(muts)
}

/// [`plan`], adding the mutations to `out` (a BATCH plans all its statements into one list).
pub(crate) fn plan_into(
    db: &Db,
    stmt: &Statement,
    keyspace: Option<&str>,
    b: Bindings<'_>,
    time: WriteTime,
    cache: Option<&PlanCache>,
    out: &mut Vec<Mutation>,
) -> Result<(), CqlError> {
    let lookup = |t: &Arc<TableSchema>| cache.and_then(|c| c.resolve(t, stmt));
    match stmt {
        Statement::Update(u) => {
            let t = writable(db, &u.table, keyspace)?;
            let resolved = lookup(&t);
            let look = Lookup {
                t: &t,
                at: resolved.as_ref().map(|r| r.cols.as_slice()),
            };
            let na = u.assignments.len();
            let mut at = time.default;
            if t.is_counter {
                counter_using(&u.using)?;
                if u.condition.is_some() {
                    return Err(CqlError::invalid(
                        "Conditional updates are not supported on counter tables",
                    ));
                }
            } else {
                at = check_using(&u.using, b)?.unwrap_or(at);
                no_lwt(u.condition.as_ref())?;
            }
            let mut cells = Vec::new();
            for (k, a) in u.assignments.iter().enumerate() {
                let c = look
                    .col(k, &a.column)
                    .ok_or_else(|| t.undefined(&a.column))?;
                if matches!(c.kind, ColumnKind::PartitionKey | ColumnKind::Clustering) {
                    return Err(CqlError::invalid(format!(
                        "PRIMARY KEY part {} found in SET part",
                        c.name
                    )));
                }
                let op = match &a.op {
                    Operation::Set(term) => {
                        if c.ty.is_counter() {
                            return Err(CqlError::invalid(format!(
                                "Cannot set the value of counter column {} (counters can only be incremented/decremented, not set)",
                                c.name
                            )));
                        }
                        match b.resolve(term, &c.ty, &c.name)? {
                            Bound::Unset => continue,
                            Bound::Null => CellOp::Set(None),
                            Bound::Val(v) => CellOp::Set(Some(v)),
                        }
                    }
                    Operation::Add(term) | Operation::Sub(term) => {
                        let sub = matches!(a.op, Operation::Sub(_));
                        if !c.ty.is_counter() {
                            if c.ty.is_collection() {
                                return Err(CqlError::invalid(
                                    "collection append/remove is not supported by cqlsim",
                                ));
                            }
                            return Err(CqlError::invalid(format!(
                                "Invalid operation ({0} = {0} {1} {term}) for non counter column {0}",
                                c.name,
                                if sub { "-" } else { "+" }
                            )));
                        }
                        match counter_delta(term, sub, b, &c.name)? {
                            Some(d) => CellOp::Add(d),
                            None => continue,
                        }
                    }
                };
                cells.push((c.index, op));
            }
            if u.where_.iter().enumerate().any(|(j, r)| {
                matches!(r, Relation::Range(..))
                    && look
                        .col(na + j, r.column())
                        .is_some_and(|c| c.kind == ColumnKind::Clustering)
            }) {
                return Err(CqlError::invalid(
                    "Slice restrictions are not supported on the clustering columns in UPDATE statements",
                ));
            }
            let static_only = !u.assignments.is_empty()
                && u.assignments.iter().enumerate().all(|(k, a)| {
                    look.col(k, &a.column)
                        .is_some_and(|c| c.kind == ColumnKind::Static)
                });
            let keys = keys(
                look,
                na,
                &u.where_,
                b,
                if static_only {
                    CkRule::Optional
                } else {
                    CkRule::Full
                },
            )?;
            if cells.is_empty() {
                return Ok(());
            }
            out.extend(keys.into_iter().map(|(pk, ck)| Mutation::Upsert {
                table: t.clone(),
                pk,
                ck: if ck.is_empty() && !t.clustering.is_empty() {
                    None
                } else {
                    Some(clustering_key(&t, ck))
                },
                marker: false,
                cells: cells.clone(),
                at,
            }));
            Ok(())
        }
        Statement::Insert(i) => {
            let t = writable(db, &i.table, keyspace)?;
            let resolved = lookup(&t);
            let look = Lookup {
                t: &t,
                at: resolved.as_ref().map(|r| r.cols.as_slice()),
            };
            if t.is_counter {
                return Err(CqlError::invalid(
                    "INSERT statements are not allowed on counter tables, use UPDATE instead",
                ));
            }
            let at = check_using(&i.using, b)?.unwrap_or(time.default);
            no_lwt(i.condition.as_ref())?;
            if i.columns.len() != i.values.len() {
                return Err(CqlError::invalid("Unmatched column names/values"));
            }
            let mut pk = vec![None; t.partition_key.len()];
            let mut ck = vec![None; t.clustering.len()];
            let mut cells = Vec::with_capacity(i.columns.len().saturating_sub(pk.len() + ck.len()));
            for (k, (name, term)) in i.columns.iter().zip(&i.values).enumerate() {
                // Resolved positions exist only for statements without duplicates.
                if look.at.is_none() && i.columns[..k].contains(name) {
                    return Err(CqlError::invalid("The column names contains duplicates"));
                }
                let c = look.col(k, name).ok_or_else(|| t.undefined(name))?;
                match c.kind {
                    ColumnKind::PartitionKey => {
                        pk[c.index] = Some(b.resolve_value(term, &c.ty, &c.name)?)
                    }
                    ColumnKind::Clustering => {
                        ck[c.index] = Some(KeyPart {
                            value: b.resolve_value(term, &c.ty, &c.name)?,
                            desc: c.desc,
                        })
                    }
                    ColumnKind::Regular | ColumnKind::Static => {
                        match b.resolve(term, &c.ty, &c.name)? {
                            Bound::Unset => {}
                            Bound::Null => cells.push((c.index, CellOp::Set(None))),
                            Bound::Val(v) => cells.push((c.index, CellOp::Set(Some(v)))),
                        }
                    }
                }
            }
            let missing = |ix: &[usize], absent: &mut dyn Iterator<Item = bool>| -> Vec<String> {
                ix.iter()
                    .zip(absent)
                    .filter(|(_, absent)| *absent)
                    .map(|(c, _)| t.columns[*c].name.clone())
                    .collect()
            };
            let m = missing(&t.partition_key, &mut pk.iter().map(Option::is_none));
            if !m.is_empty() {
                return Err(CqlError::invalid(format!(
                    "Some partition key parts are missing: {}",
                    m.join(", ")
                )));
            }
            let m = missing(&t.clustering, &mut ck.iter().map(Option::is_none));
            if !m.is_empty() {
                return Err(CqlError::invalid(format!(
                    "Some clustering keys are missing: {}",
                    m.join(", ")
                )));
            }
            out.push(Mutation::Upsert {
                table: t.clone(),
                pk: every(pk),
                ck: Some(every(ck)),
                marker: true,
                cells,
                at,
            });
            Ok(())
        }
        Statement::Delete(d) => {
            let t = writable(db, &d.table, keyspace)?;
            let resolved = lookup(&t);
            let look = Lookup {
                t: &t,
                at: resolved.as_ref().map(|r| r.cols.as_slice()),
            };
            let mut at = time.default;
            if t.is_counter {
                counter_using(&d.using)?;
                if d.condition.is_some() {
                    return Err(CqlError::invalid(
                        "Conditional updates are not supported on counter tables",
                    ));
                }
            } else {
                at = check_using(&d.using, b)?.unwrap_or(at);
                no_lwt(d.condition.as_ref())?;
            }
            if d.using.ttl.is_some() {
                return Err(CqlError::invalid(
                    "TTL attribute is not allowed for deletes",
                ));
            }
            let mut slots = Vec::new();
            for (k, name) in d.columns.iter().enumerate() {
                let c = look.col(k, name).ok_or_else(|| t.undefined(name))?;
                if matches!(c.kind, ColumnKind::PartitionKey | ColumnKind::Clustering) {
                    return Err(CqlError::invalid(format!(
                        "Invalid identifier {name} for deletion (should not be a PRIMARY KEY part)"
                    )));
                }
                slots.push(c.index);
            }
            let all_static = d
                .columns
                .iter()
                .enumerate()
                .all(|(k, n)| look.col(k, n).is_some_and(|c| c.kind == ColumnKind::Static));
            let rule = if !d.columns.is_empty() && !all_static {
                CkRule::Full
            } else {
                CkRule::Prefix
            };
            let keys = keys(look, d.columns.len(), &d.where_, b, rule)?;
            out.extend(keys.into_iter().map(|(pk, ck_prefix)| Mutation::Delete {
                table: t.clone(),
                pk,
                ck_prefix,
                slots: if d.columns.is_empty() {
                    None
                } else {
                    Some(slots.clone())
                },
                at,
            }));
            Ok(())
        }
        _ => Err(CqlError::invalid(
            "Invalid statement in batch: only UPDATE, INSERT and DELETE statements are allowed.",
        )),
    }
}

/// The values of a key whose every part is known to be present, in one allocation of the
/// right size (`flatten().collect()` cannot know the size, and grows the vector).
fn every<T>(parts: Vec<Option<T>>) -> Vec<T> {
    let mut out = Vec::with_capacity(parts.len());
    out.extend(parts.into_iter().flatten());
    out
}

fn writable(
    db: &Db,
    q: &crate::cql::ast::QualifiedName,
    keyspace: Option<&str>,
) -> Result<Arc<TableSchema>, CqlError> {
    let t = resolve_table(db, q, keyspace)?;
    super::ddl::refuse_system(&t.keyspace)?;
    Ok(t.clone())
}

fn counter_using(u: &Using) -> Result<(), CqlError> {
    if u.timestamp.is_some() {
        return Err(CqlError::invalid(
            "Cannot provide custom timestamp for counter updates",
        ));
    }
    if u.ttl.is_some() {
        return Err(CqlError::invalid(
            "Cannot provide custom TTL for counter updates",
        ));
    }
    Ok(())
}

/// TTL on regular tables is validated and then ignored: data never expires (README).
/// `USING TIMESTAMP` gives the statement's write time; an unset bound value leaves the
/// default, a null one is refused, as `Attributes.getTimestamp` does.
fn check_using(u: &Using, b: Bindings<'_>) -> Result<Option<i64>, CqlError> {
    if let Some(t) = &u.ttl
        && let Bound::Val(Value::Int(v)) = b.resolve(t, &ColType::Int, "[ttl]")?
        && v < 0
    {
        return Err(CqlError::invalid(format!(
            "A TTL must be greater or equal to 0, but was {v}"
        )));
    }
    match &u.timestamp {
        None => Ok(None),
        Some(t) => match b.resolve(t, &ColType::BigInt, "[timestamp]")? {
            Bound::Unset => Ok(None),
            Bound::Null => Err(CqlError::invalid("Invalid null value of timestamp")),
            Bound::Val(Value::BigInt(v)) => Ok(Some(v)),
            Bound::Val(_) => Err(CqlError::Server("timestamp of another type".into())),
        },
    }
}

fn no_lwt(c: Option<&Condition>) -> Result<(), CqlError> {
    match c {
        None => Ok(()),
        Some(_) => Err(CqlError::invalid(
            "conditional statements (IF ...) are not supported by cqlsim",
        )),
    }
}

/// The signed delta of `c = c + t` / `c = c - t`; `None` for an unset value (a no-op).
fn counter_delta(
    term: &Term,
    sub: bool,
    b: Bindings<'_>,
    col: &str,
) -> Result<Option<i64>, CqlError> {
    if matches!(term, Term::Lit(Literal::Null)) {
        return Err(CqlError::invalid(
            "Invalid null value for counter increment/decrement",
        ));
    }
    let v = match b.resolve(term, &ColType::Counter, col)? {
        Bound::Unset => return Ok(None),
        Bound::Null => {
            return Err(CqlError::invalid(
                "Invalid null value for counter increment",
            ));
        }
        Bound::Val(Value::Counter(v)) => v,
        Bound::Val(_) => return Err(CqlError::Server("counter value of another type".into())),
    };
    if !sub {
        return Ok(Some(v));
    }
    v.checked_neg().map(Some).ok_or_else(|| {
        CqlError::invalid(format!(
            "The negation of {v} overflows supported counter precision (signed 8 bytes integer)"
        ))
    })
}

/// A partition key and clustering values (all, or a prefix for deletes).
type KeyPair = (Vec<Value>, Vec<Value>);

#[derive(Clone, Copy, PartialEq, Eq)]
enum CkRule {
    /// Every clustering column must be given (INSERT/UPDATE).
    Full,
    /// A prefix is enough (DELETE of rows).
    Prefix,
    /// None or all (UPDATE of static columns only).
    Optional,
}

/// Expands the WHERE clause of a modification into (partition key, clustering values) pairs.
/// `first` is the [`Lookup::col`] number of the first relation's column.
fn keys(
    look: Lookup<'_>,
    first: usize,
    rels: &[Relation],
    b: Bindings<'_>,
    rule: CkRule,
) -> Result<Vec<KeyPair>, CqlError> {
    let t = look.t;
    let mut pk: Vec<Option<Vec<Value>>> = vec![None; t.partition_key.len()];
    let mut ck: Vec<Option<Vec<Value>>> = vec![None; t.clustering.len()];
    let mut not_key: Vec<&str> = Vec::new();
    for (j, r) in rels.iter().enumerate() {
        let c = look
            .col(first + j, r.column())
            .ok_or_else(|| t.undefined(r.column()))?;
        let slot = match c.kind {
            ColumnKind::PartitionKey => &mut pk[c.index],
            ColumnKind::Clustering => &mut ck[c.index],
            _ => {
                not_key.push(&c.name);
                continue;
            }
        };
        if slot.is_some() {
            return Err(CqlError::invalid(format!(
                "{} cannot be restricted by more than one relation if it includes an Equal",
                c.name
            )));
        }
        *slot = Some(match r {
            Relation::Eq(_, term) => vec![b.resolve_value(term, &c.ty, &c.name)?],
            Relation::In(_, vals) => in_values(vals, &c.ty, &c.name, b)?,
            Relation::Range(..) if c.kind == ColumnKind::PartitionKey => {
                return Err(CqlError::invalid(
                    "Only EQ and IN relation are supported on the partition key (unless you use the token() function)",
                ));
            }
            Relation::Range(..) => {
                return Err(CqlError::invalid(format!(
                    "Slice restrictions on clustering column {} are not supported in modifications by cqlsim",
                    c.name
                )));
            }
        });
    }
    let missing: Vec<&str> = pk
        .iter()
        .zip(&t.partition_key)
        .filter(|(v, _)| v.is_none())
        .map(|(_, c)| t.columns[*c].name.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(CqlError::invalid(format!(
            "Some partition key parts are missing: {}",
            missing.join(", ")
        )));
    }
    if !not_key.is_empty() {
        // Cassandra's message ends with a space.
        return Err(CqlError::invalid(format!(
            "Non PRIMARY KEY columns found in where clause: {} ",
            not_key.join(", ")
        )));
    }
    let given = ck.iter().take_while(|v| v.is_some()).count();
    if let Some(after) = ck.iter().skip(given).position(Option::is_some) {
        let c = &t.columns[t.clustering[given + after]];
        let prev = &t.columns[t.clustering[given + after - 1]];
        return Err(CqlError::invalid(format!(
            "PRIMARY KEY column \"{}\" cannot be restricted as preceding column \"{}\" is not restricted",
            c.name, prev.name
        )));
    }
    let full = given == ck.len();
    let ok = match rule {
        CkRule::Full => full,
        CkRule::Prefix => true,
        CkRule::Optional => full || given == 0,
    };
    if !ok {
        let m: Vec<&str> = t.clustering[given..]
            .iter()
            .map(|c| t.columns[*c].name.as_str())
            .collect();
        return Err(CqlError::invalid(format!(
            "Some clustering keys are missing: {}",
            m.join(", ")
        )));
    }
    let mut pks = product(every(pk));
    let mut cks = product(every(ck));
    if pks.len() == 1 && cks.len() == 1 {
        // The common case (every relation an `=`): one row, nothing to clone.
        return Ok(pks.pop().into_iter().zip(cks.pop()).collect());
    }
    Ok(pks
        .iter()
        .flat_map(|p| cks.iter().map(move |c| (p.clone(), c.clone())))
        .collect())
}

/// Values of an `IN` restriction, deduplicated and sorted like Cassandra.
pub(crate) fn in_values(
    vals: &InValues,
    ty: &ColType,
    name: &str,
    b: Bindings<'_>,
) -> Result<Vec<Value>, CqlError> {
    let mut out = match vals {
        InValues::List(terms) => terms
            .iter()
            .map(|t| b.resolve_value(t, ty, name))
            .collect::<Result<Vec<_>, _>>()?,
        InValues::Marker(_) if b.is_dry() => vec![Value::Blob(Vec::new())],
        InValues::Marker(i) => {
            let lt = ColType::List(Box::new(ty.clone()));
            match b.resolve(&Term::Marker(*i), &lt, name)? {
                Bound::Val(Value::List(v)) => v,
                Bound::Null => {
                    return Err(CqlError::invalid(format!(
                        "Invalid null value for IN restriction on {name}"
                    )));
                }
                Bound::Unset => {
                    return Err(CqlError::invalid(format!(
                        "Invalid unset value for column {name}"
                    )));
                }
                Bound::Val(_) => return Err(CqlError::Server("IN list of another type".into())),
            }
        }
    };
    out.sort();
    out.dedup();
    Ok(out)
}

/// Cartesian product of per-column value lists.
fn product(cols: Vec<Vec<Value>>) -> Vec<Vec<Value>> {
    if cols.iter().all(|vals| vals.len() == 1) {
        let mut one = Vec::with_capacity(cols.len());
        one.extend(cols.into_iter().flatten());
        return vec![one];
    }
    cols.into_iter().fold(vec![Vec::new()], |acc, vals| {
        acc.iter()
            .flat_map(|prefix| {
                vals.iter().map(move |v| {
                    let mut p = prefix.clone();
                    p.push(v.clone());
                    p
                })
            })
            .collect()
    })
}

/// The write time a batch sets for its statements with `USING TIMESTAMP`, if any.
pub(crate) fn batch_time(using: &Using, b: Bindings<'_>) -> Result<Option<i64>, CqlError> {
    check_using(
        &Using {
            ttl: None,
            timestamp: using.timestamp.clone(),
        },
        b,
    )
}

/// Cassandra's batch checks, in its order: TTL, timestamp, statement kinds, mixing, logged.
pub(crate) fn check_batch(
    db: &Db,
    kind: BatchKind,
    using: &Using,
    items: &[BatchItem<'_>],
) -> Result<(), CqlError> {
    if using.ttl.is_some() {
        return Err(CqlError::invalid(
            "Global TTL on the BATCH statement is not supported.",
        ));
    }
    if using.timestamp.is_some() && kind == BatchKind::Counter {
        return Err(CqlError::invalid(
            "Cannot provide custom timestamp for counter BATCH",
        ));
    }
    let (mut counters, mut others) = (false, false);
    for it in items {
        let Some(q) = it
            .stmt
            .dml_table()
            .filter(|_| it.stmt.is_write() && !matches!(it.stmt, Statement::Batch(_)))
        else {
            return Err(CqlError::invalid(
                "Invalid statement in batch: only UPDATE, INSERT and DELETE statements are allowed.",
            ));
        };
        let t = resolve_table(db, q, it.keyspace)?;
        if using.timestamp.is_some() && it.stmt.using().is_some_and(|u| u.timestamp.is_some()) {
            return Err(CqlError::invalid(
                "Timestamp must be set either on BATCH or individual statements",
            ));
        }
        if using.timestamp.is_some() && t.is_counter {
            return Err(CqlError::invalid(
                "Cannot provide custom timestamp for a BATCH containing counters",
            ));
        }
        if kind == BatchKind::Counter && !t.is_counter {
            return Err(CqlError::invalid(
                "Cannot include non-counter statement in a counter batch",
            ));
        }
        if t.is_counter {
            counters = true
        } else {
            others = true
        }
    }
    if counters && others {
        return Err(CqlError::invalid(
            "Counter and non-counter mutations cannot exist in the same batch",
        ));
    }
    if counters && kind == BatchKind::Logged {
        return Err(CqlError::invalid(
            "Cannot include a counter statement in a logged batch",
        ));
    }
    Ok(())
}
