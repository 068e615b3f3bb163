//! The statement tree the parser produces and the executor runs. Bind markers are numbered in
//! order of appearance; their names and types are worked out against the schema at PREPARE
//! (and EXECUTE) time by `exec::prepare`.

use std::fmt;

use crate::proto::request::BatchKind;
use crate::types::ColType;

/// `ks.name` or `name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QualifiedName {
    pub(crate) keyspace: Option<String>,
    pub(crate) name: String,
}

/// A value position: a literal or a bind marker.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Term {
    Lit(Literal),
    /// Index of the marker in the statement (0-based).
    Marker(usize),
}

/// A literal as written; typed only when it meets a column.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Literal {
    Null,
    Str(String),
    Int(String),
    Float(String),
    Bool(bool),
    Uuid([u8; 16]),
    Blob(Vec<u8>),
    List(Vec<Term>),
    /// `{a, b}`; also `{}`, which is an empty set or map depending on the column.
    Set(Vec<Term>),
    Map(Vec<(Term, Term)>),
}

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Term::Marker(_) => f.write_str("?"),
            Term::Lit(l) => write!(f, "{l}"),
        }
    }
}

impl fmt::Display for Literal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |f: &mut fmt::Formatter<'_>, items: &[Term]| -> fmt::Result {
            let s: Vec<String> = items.iter().map(ToString::to_string).collect();
            f.write_str(&s.join(", "))
        };
        match self {
            Literal::Null => f.write_str("null"),
            Literal::Str(s) => write!(f, "'{}'", s.replace('\'', "''")),
            Literal::Int(s) | Literal::Float(s) => f.write_str(s),
            Literal::Bool(b) => write!(f, "{b}"),
            Literal::Uuid(u) => f.write_str(&crate::value::format_uuid(u)),
            Literal::Blob(b) => write!(f, "0x{}", crate::error::hex(b)),
            Literal::List(items) => {
                f.write_str("[")?;
                list(f, items)?;
                f.write_str("]")
            }
            Literal::Set(items) => {
                f.write_str("{")?;
                list(f, items)?;
                f.write_str("}")
            }
            Literal::Map(entries) => {
                let s: Vec<String> = entries.iter().map(|(k, v)| format!("{k}: {v}")).collect();
                write!(f, "{{{}}}", s.join(", "))
            }
        }
    }
}

/// A parsed statement with the names of its markers (`None` for `?`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Parsed {
    pub(crate) stmt: Statement,
    pub(crate) marker_names: Vec<Option<String>>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Statement {
    CreateKeyspace(CreateKeyspace),
    DropKeyspace {
        name: String,
        if_exists: bool,
    },
    CreateTable(CreateTable),
    AlterTable(AlterTable),
    DropTable {
        table: QualifiedName,
        if_exists: bool,
    },
    Truncate(QualifiedName),
    Use(String),
    /// CREATE INDEX / CREATE MATERIALIZED VIEW: refused, with the counter-table message first.
    CreateIndexOrView {
        base: QualifiedName,
        view: bool,
    },
    Insert(Insert),
    Update(Update),
    Delete(Delete),
    Select(Select),
    Batch(Batch),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CreateKeyspace {
    pub(crate) name: String,
    pub(crate) if_not_exists: bool,
    pub(crate) options: Vec<(String, Literal)>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ColumnDef {
    pub(crate) name: String,
    pub(crate) ty: ColType,
    pub(crate) is_static: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CreateTable {
    pub(crate) name: QualifiedName,
    pub(crate) if_not_exists: bool,
    pub(crate) columns: Vec<ColumnDef>,
    pub(crate) partition_key: Vec<String>,
    pub(crate) clustering: Vec<String>,
    /// `WITH CLUSTERING ORDER BY (c DESC, ...)`: (column, descending).
    pub(crate) clustering_order: Vec<(String, bool)>,
    pub(crate) options: Vec<(String, Literal)>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AlterTable {
    Add {
        table: QualifiedName,
        columns: Vec<ColumnDef>,
    },
    With {
        table: QualifiedName,
        options: Vec<(String, Literal)>,
    },
}

/// `USING TTL x AND TIMESTAMP y`.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Using {
    pub(crate) ttl: Option<Term>,
    pub(crate) timestamp: Option<Term>,
}

/// The right-hand side of one SET assignment.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Operation {
    /// `c = t`
    Set(Term),
    /// `c = c + t`, `c += t`, `c = c -3`
    Add(Term),
    /// `c = c - t`, `c -= t`
    Sub(Term),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Assignment {
    pub(crate) column: String,
    pub(crate) op: Operation,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RangeOp {
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum InValues {
    List(Vec<Term>),
    /// `IN ?`: one marker bound to a list.
    Marker(usize),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Relation {
    Eq(String, Term),
    In(String, InValues),
    Range(String, RangeOp, Term),
}

impl Relation {
    pub(crate) fn column(&self) -> &str {
        match self {
            Relation::Eq(c, _) | Relation::In(c, _) | Relation::Range(c, _, _) => c,
        }
    }
}

/// `IF ...` on a modification.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Condition {
    Exists,
    NotExists,
    Columns,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Insert {
    pub(crate) table: QualifiedName,
    pub(crate) columns: Vec<String>,
    pub(crate) values: Vec<Term>,
    pub(crate) using: Using,
    pub(crate) condition: Option<Condition>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Update {
    pub(crate) table: QualifiedName,
    pub(crate) using: Using,
    pub(crate) assignments: Vec<Assignment>,
    pub(crate) where_: Vec<Relation>,
    pub(crate) condition: Option<Condition>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Delete {
    pub(crate) table: QualifiedName,
    pub(crate) columns: Vec<String>,
    pub(crate) using: Using,
    pub(crate) where_: Vec<Relation>,
    pub(crate) condition: Option<Condition>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Selection {
    All,
    /// `COUNT(*)` / `COUNT(1)`, with an optional alias.
    Count(Option<String>),
    /// Column names with optional aliases.
    Columns(Vec<(String, Option<String>)>),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Select {
    pub(crate) table: QualifiedName,
    pub(crate) selection: Selection,
    pub(crate) where_: Vec<Relation>,
    /// (column, descending)
    pub(crate) order_by: Vec<(String, bool)>,
    pub(crate) limit: Option<Term>,
    pub(crate) allow_filtering: bool,
    /// ScyllaDB's `USING TIMEOUT <duration>` (drivers add it to their metadata queries
    /// when they see ScyllaDB); accepted by the ScyllaDB persona only, and ignored.
    pub(crate) using_timeout: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Batch {
    pub(crate) kind: BatchKind,
    pub(crate) using: Using,
    pub(crate) statements: Vec<Statement>,
}

impl Statement {
    /// The table a DML statement targets (first statement's for a batch).
    pub(crate) fn dml_table(&self) -> Option<&QualifiedName> {
        match self {
            Statement::Insert(i) => Some(&i.table),
            Statement::Update(u) => Some(&u.table),
            Statement::Delete(d) => Some(&d.table),
            Statement::Select(s) => Some(&s.table),
            _ => None,
        }
    }

    /// The `USING` clause of a modification (or a batch).
    pub(crate) fn using(&self) -> Option<&Using> {
        match self {
            Statement::Insert(i) => Some(&i.using),
            Statement::Update(u) => Some(&u.using),
            Statement::Delete(d) => Some(&d.using),
            Statement::Batch(b) => Some(&b.using),
            _ => None,
        }
    }

    /// Whether this writes data (INSERT/UPDATE/DELETE/BATCH).
    pub(crate) fn is_write(&self) -> bool {
        matches!(
            self,
            Statement::Insert(_)
                | Statement::Update(_)
                | Statement::Delete(_)
                | Statement::Batch(_)
        )
    }
}
