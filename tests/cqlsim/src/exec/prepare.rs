//! PREPARE metadata (research §4.6): one spec per bind marker, named after its column
//! (`in(col)` with type `list<T>` for `IN ?`, `[limit]`, `[ttl]`, `[timestamp]`), the
//! partition-key marker indexes drivers use for token-aware routing, and the result columns.

use super::select::result_columns;
use super::{ColSpec, resolve_table};
use crate::cql::ast::{InValues, Literal, Operation, Parsed, Relation, Statement, Term};
use crate::error::CqlError;
use crate::schema::{ColumnKind, TableSchema};
use crate::storage::Db;
use crate::types::ColType;

/// What PREPARE returns besides the id.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PreparedMeta {
    pub(crate) vars: Vec<ColSpec>,
    pub(crate) pk_indexes: Vec<u16>,
    /// `None` for statements without rows (No_metadata).
    pub(crate) result: Option<Vec<ColSpec>>,
}

struct Collector<'a> {
    specs: Vec<Option<ColSpec>>,
    table: &'a TableSchema,
}

impl Collector<'_> {
    fn put(&mut self, i: usize, name: &str, ty: &ColType) {
        if let Some(slot) = self.specs.get_mut(i) {
            *slot = Some(ColSpec {
                keyspace: self.table.keyspace.clone(),
                table: self.table.name.clone(),
                name: name.to_owned(),
                ty: ty.clone(),
            });
        }
    }

    /// A term received by `name` of type `ty`, recursing into collection literals.
    fn term(&mut self, t: &Term, name: &str, ty: &ColType) {
        match t {
            Term::Marker(i) => self.put(*i, name, ty),
            Term::Lit(Literal::List(items)) | Term::Lit(Literal::Set(items)) => {
                if let ColType::List(e) | ColType::Set(e) = ty.unfrozen() {
                    for x in items {
                        self.term(x, name, e);
                    }
                }
            }
            Term::Lit(Literal::Map(entries)) => {
                if let ColType::Map(k, v) = ty.unfrozen() {
                    for (a, b) in entries {
                        self.term(a, name, k);
                        self.term(b, name, v);
                    }
                }
            }
            Term::Lit(_) => {}
        }
    }

    fn column(&self, name: &str) -> Result<&crate::schema::Column, CqlError> {
        self.table
            .column(name)
            .ok_or_else(|| self.table.undefined(name))
    }

    fn relations(&mut self, rels: &[Relation]) -> Result<(), CqlError> {
        for r in rels {
            let c = self.column(r.column())?.clone();
            match r {
                Relation::Eq(_, t) | Relation::Range(_, _, t) => self.term(t, &c.name, &c.ty),
                Relation::In(_, InValues::Marker(i)) => {
                    self.put(
                        *i,
                        &format!("in({})", c.name),
                        &ColType::List(Box::new(c.ty.clone())),
                    );
                }
                Relation::In(_, InValues::List(ts)) => {
                    for t in ts {
                        self.term(t, &c.name, &c.ty);
                    }
                }
            }
        }
        Ok(())
    }

    fn using(&mut self, u: &crate::cql::ast::Using) {
        if let Some(t) = &u.ttl {
            self.term(t, "[ttl]", &ColType::Int);
        }
        if let Some(t) = &u.timestamp {
            self.term(t, "[timestamp]", &ColType::BigInt);
        }
    }
}

/// Computes PREPARE metadata for a parsed statement in the given keyspace.
pub(crate) fn analyze(
    db: &Db,
    p: &Parsed,
    keyspace: Option<&str>,
) -> Result<PreparedMeta, CqlError> {
    let n = p.marker_names.len();
    let stmt_list: Vec<&Statement> = match &p.stmt {
        Statement::Batch(b) => b.statements.iter().collect(),
        s => vec![s],
    };
    let mut specs: Vec<Option<ColSpec>> = vec![None; n];
    let mut pk_indexes = Vec::new();
    let mut result = None;
    let single = stmt_list.len() == 1 && !matches!(p.stmt, Statement::Batch(_));
    for stmt in stmt_list {
        let Some(q) = stmt.dml_table() else {
            if n > 0 {
                return Err(CqlError::invalid(
                    "Bind variables are not allowed in this statement",
                ));
            }
            // USE, DDL: validated at execution.
            return Ok(PreparedMeta {
                vars: Vec::new(),
                pk_indexes: Vec::new(),
                result: None,
            });
        };
        let t = resolve_table(db, q, keyspace)?;
        let mut c = Collector {
            specs: std::mem::take(&mut specs),
            table: t,
        };
        // Marker index bound to each partition-key column by a plain `pk = ?`.
        let mut pk_markers: Vec<Option<usize>> = vec![None; t.partition_key.len()];
        let mut note_pk = |name: &str, term: &Term, t: &TableSchema| {
            if let (Some(col), Term::Marker(i)) = (t.column(name), term)
                && col.kind == ColumnKind::PartitionKey
            {
                pk_markers[col.index] = Some(*i);
            }
        };
        match stmt {
            Statement::Select(s) => {
                c.relations(&s.where_)?;
                if let Some(l) = &s.limit {
                    c.term(l, "[limit]", &ColType::Int);
                }
                for r in &s.where_ {
                    if let Relation::Eq(name, term) = r {
                        note_pk(name, term, t);
                    }
                }
                result = Some(
                    result_columns(t, &s.selection)?
                        .into_iter()
                        .map(|(s, _)| s)
                        .collect(),
                );
            }
            Statement::Update(u) => {
                c.using(&u.using);
                for a in &u.assignments {
                    let col = c.column(&a.column)?.clone();
                    match &a.op {
                        Operation::Set(term) | Operation::Add(term) | Operation::Sub(term) => {
                            c.term(term, &col.name, &col.ty)
                        }
                    }
                }
                c.relations(&u.where_)?;
                for r in &u.where_ {
                    if let Relation::Eq(name, term) = r {
                        note_pk(name, term, t);
                    }
                }
            }
            Statement::Insert(ins) => {
                for (name, term) in ins.columns.iter().zip(&ins.values) {
                    let col = c.column(name)?.clone();
                    c.term(term, &col.name, &col.ty);
                    note_pk(name, term, t);
                }
                c.using(&ins.using);
            }
            Statement::Delete(d) => {
                c.using(&d.using);
                c.relations(&d.where_)?;
                for r in &d.where_ {
                    if let Relation::Eq(name, term) = r {
                        note_pk(name, term, t);
                    }
                }
            }
            _ => {
                return Err(CqlError::invalid(
                    "Invalid statement in batch: only UPDATE, INSERT and DELETE statements are allowed.",
                ));
            }
        }
        specs = c.specs;
        if single && pk_markers.iter().all(Option::is_some) {
            pk_indexes = pk_markers
                .into_iter()
                .flatten()
                .map(|i| u16::try_from(i).unwrap_or(u16::MAX))
                .collect();
        }
    }
    let mut vars = Vec::with_capacity(n);
    for (i, s) in specs.into_iter().enumerate() {
        let mut s = s.ok_or_else(|| {
            CqlError::invalid("Bind variables are not supported in this position by cqlsim")
        })?;
        if let Some(Some(name)) = p.marker_names.get(i) {
            s.name = name.clone();
        }
        vars.push(s);
    }
    Ok(PreparedMeta {
        vars,
        pk_indexes,
        result,
    })
}
