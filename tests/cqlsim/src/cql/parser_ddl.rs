//! DDL parsing: CREATE/DROP KEYSPACE and TABLE, ALTER TABLE, column types and `WITH` options.
//! CREATE INDEX and CREATE MATERIALIZED VIEW are parsed only far enough to name the base table.

use super::ast::*;
use super::lexer::Tok;
use super::parser::Parser;
use crate::error::CqlError;
use crate::types::ColType;

/// `WITH name = value` pairs.
type Options = Vec<(String, Literal)>;
/// `CLUSTERING ORDER BY` as (column, descending).
type ClusteringOrder = Vec<(String, bool)>;

impl Parser<'_> {
    fn if_not_exists(&mut self) -> Result<bool, CqlError> {
        if self.eat_kw("if") {
            self.expect_kw("not")?;
            self.expect_kw("exists")?;
            return Ok(true);
        }
        Ok(false)
    }

    fn if_exists(&mut self) -> Result<bool, CqlError> {
        if self.eat_kw("if") {
            self.expect_kw("exists")?;
            return Ok(true);
        }
        Ok(false)
    }

    pub(crate) fn create(&mut self) -> Result<Statement, CqlError> {
        self.expect_kw("create")?;
        if self.eat_kw("keyspace") || self.eat_kw("schema") {
            let if_not_exists = self.if_not_exists()?;
            let name = self.ident()?;
            self.expect_kw("with")?;
            let (options, _) = self.options(false)?;
            return Ok(Statement::CreateKeyspace(CreateKeyspace {
                name,
                if_not_exists,
                options,
            }));
        }
        if self.eat_kw("table") || self.eat_kw("columnfamily") {
            return self.create_table();
        }
        let custom = self.eat_kw("custom");
        if self.eat_kw("index") {
            self.if_not_exists()?;
            if !self.is_kw("on") {
                self.ident()?;
            }
            self.expect_kw("on")?;
            let base = self.qualified()?;
            self.skip_rest();
            return Ok(Statement::CreateIndexOrView { base, view: false });
        }
        if !custom && self.eat_kw("materialized") {
            self.expect_kw("view")?;
            while !self.is_kw("from") {
                if self.bump().is_none() {
                    return Err(self.unexpected("FROM"));
                }
            }
            self.expect_kw("from")?;
            let base = self.qualified()?;
            self.skip_rest();
            return Ok(Statement::CreateIndexOrView { base, view: true });
        }
        if self.is_kw("type")
            || self.is_kw("function")
            || self.is_kw("aggregate")
            || self.is_kw("role")
            || self.is_kw("user")
            || self.is_kw("trigger")
        {
            return Err(CqlError::invalid(
                "this CREATE statement is not supported by cqlsim",
            ));
        }
        Err(self.unexpected("KEYSPACE, TABLE, INDEX or MATERIALIZED VIEW"))
    }

    fn skip_rest(&mut self) {
        while !matches!(self.peek(), None | Some(Tok::Sym(";"))) {
            self.bump();
        }
    }

    fn create_table(&mut self) -> Result<Statement, CqlError> {
        let if_not_exists = self.if_not_exists()?;
        let name = self.qualified()?;
        self.expect_sym("(")?;
        let mut columns = Vec::new();
        let mut partition_key = Vec::new();
        let mut clustering = Vec::new();
        let mut inline_pk = None;
        loop {
            if self.eat_kw("primary") {
                self.expect_kw("key")?;
                self.expect_sym("(")?;
                if self.eat_sym("(") {
                    partition_key = self.ident_list()?;
                } else {
                    partition_key = vec![self.ident()?];
                }
                while self.eat_sym(",") {
                    clustering.push(self.ident()?);
                }
                self.expect_sym(")")?;
            } else {
                let cname = self.ident()?;
                let ty = self.col_type()?;
                let is_static = self.eat_kw("static");
                if self.eat_kw("primary") {
                    self.expect_kw("key")?;
                    if inline_pk.is_some() {
                        return Err(CqlError::invalid(
                            "Multiple PRIMARY KEYs specified (exactly one required)",
                        ));
                    }
                    inline_pk = Some(cname.clone());
                }
                columns.push(ColumnDef {
                    name: cname,
                    ty,
                    is_static,
                });
            }
            if self.eat_sym(")") {
                break;
            }
            self.expect_sym(",")?;
        }
        if let Some(pk) = inline_pk {
            if !partition_key.is_empty() {
                return Err(CqlError::invalid(
                    "Multiple PRIMARY KEYs specified (exactly one required)",
                ));
            }
            partition_key = vec![pk];
        }
        if partition_key.is_empty() {
            return Err(CqlError::invalid(
                "No PRIMARY KEY specifed (exactly one required)",
            ));
        }
        let (options, clustering_order) = if self.eat_kw("with") {
            self.options(true)?
        } else {
            (Vec::new(), Vec::new())
        };
        Ok(Statement::CreateTable(CreateTable {
            name,
            if_not_exists,
            columns,
            partition_key,
            clustering,
            clustering_order,
            options,
        }))
    }

    /// `a, b)`: identifiers up to and including the closing parenthesis.
    fn ident_list(&mut self) -> Result<Vec<String>, CqlError> {
        let mut v = vec![self.ident()?];
        while self.eat_sym(",") {
            v.push(self.ident()?);
        }
        self.expect_sym(")")?;
        Ok(v)
    }

    /// A column type: `int`, `list<text>`, `frozen<map<text, int>>`, ...
    pub(crate) fn col_type(&mut self) -> Result<ColType, CqlError> {
        self.nest(|p| p.col_type_inner())
    }

    fn col_type_inner(&mut self) -> Result<ColType, CqlError> {
        let name = match self.peek() {
            Some(Tok::Ident(s)) => s.to_ascii_lowercase(),
            Some(Tok::QIdent(s)) => {
                return Err(CqlError::invalid(format!("Unknown type {s}")));
            }
            _ => return Err(self.unexpected("a type")),
        };
        self.bump();
        let one = |p: &mut Self| -> Result<ColType, CqlError> {
            p.expect_sym("<")?;
            let t = p.col_type()?;
            p.expect_sym(">")?;
            Ok(t)
        };
        Ok(match name.as_str() {
            "list" => ColType::List(Box::new(one(self)?)),
            "set" => ColType::Set(Box::new(one(self)?)),
            "frozen" => ColType::Frozen(Box::new(one(self)?)),
            "map" => {
                self.expect_sym("<")?;
                let k = self.col_type()?;
                self.expect_sym(",")?;
                let v = self.col_type()?;
                self.expect_sym(">")?;
                ColType::Map(Box::new(k), Box::new(v))
            }
            "tuple" | "duration" | "time" | "decimal" => {
                return Err(CqlError::invalid(format!(
                    "type {name} is not supported by cqlsim"
                )));
            }
            other => ColType::simple(other)
                .ok_or_else(|| CqlError::invalid(format!("Unknown type {other}")))?,
        })
    }

    /// `opt = value AND ...`; for tables also `CLUSTERING ORDER BY (...)` and
    /// `COMPACT STORAGE` (accepted and ignored).
    fn options(&mut self, table: bool) -> Result<(Options, ClusteringOrder), CqlError> {
        let mut opts = Vec::new();
        let mut order = Vec::new();
        loop {
            if table && self.eat_kw("clustering") {
                self.expect_kw("order")?;
                self.expect_kw("by")?;
                self.expect_sym("(")?;
                loop {
                    let c = self.ident()?;
                    let desc = if self.eat_kw("desc") {
                        true
                    } else {
                        self.expect_kw("asc")?;
                        false
                    };
                    order.push((c, desc));
                    if self.eat_sym(")") {
                        break;
                    }
                    self.expect_sym(",")?;
                }
            } else if table && self.eat_kw("compact") {
                self.expect_kw("storage")?;
            } else {
                let name = self.ident()?;
                self.expect_sym("=")?;
                let value = match self.peek() {
                    // Bare words such as `true` are terms; other bare words are strings.
                    Some(Tok::Ident(w))
                        if !matches!(
                            w.to_ascii_lowercase().as_str(),
                            "true" | "false" | "null"
                        ) =>
                    {
                        let w = w.clone();
                        self.bump();
                        Literal::Str(w)
                    }
                    _ => match self.term()? {
                        Term::Lit(l) => l,
                        Term::Marker(_) => {
                            return Err(CqlError::invalid("bind markers are not allowed in DDL"));
                        }
                    },
                };
                opts.push((name, value));
            }
            if !self.eat_kw("and") {
                return Ok((opts, order));
            }
        }
    }

    pub(crate) fn drop(&mut self) -> Result<Statement, CqlError> {
        self.expect_kw("drop")?;
        if self.eat_kw("keyspace") || self.eat_kw("schema") {
            let if_exists = self.if_exists()?;
            return Ok(Statement::DropKeyspace {
                if_exists,
                name: self.ident()?,
            });
        }
        if self.eat_kw("table") || self.eat_kw("columnfamily") {
            let if_exists = self.if_exists()?;
            return Ok(Statement::DropTable {
                if_exists,
                table: self.qualified()?,
            });
        }
        Err(CqlError::invalid(
            "only DROP KEYSPACE and DROP TABLE are supported by cqlsim",
        ))
    }

    pub(crate) fn alter(&mut self) -> Result<Statement, CqlError> {
        self.expect_kw("alter")?;
        if !(self.eat_kw("table") || self.eat_kw("columnfamily")) {
            return Err(CqlError::invalid("only ALTER TABLE is supported by cqlsim"));
        }
        let table = self.qualified()?;
        if self.eat_kw("with") {
            let (options, order) = self.options(true)?;
            if !order.is_empty() {
                return Err(CqlError::invalid("Cannot change CLUSTERING ORDER"));
            }
            return Ok(Statement::AlterTable(AlterTable::With { table, options }));
        }
        if self.eat_kw("add") {
            let mut columns = Vec::new();
            let paren = self.eat_sym("(");
            loop {
                let name = self.ident()?;
                let ty = self.col_type()?;
                let is_static = self.eat_kw("static");
                columns.push(ColumnDef {
                    name,
                    ty,
                    is_static,
                });
                if !paren || !self.eat_sym(",") {
                    break;
                }
            }
            if paren {
                self.expect_sym(")")?;
            }
            return Ok(Statement::AlterTable(AlterTable::Add { table, columns }));
        }
        Err(CqlError::invalid(
            "only ALTER TABLE ... ADD and ALTER TABLE ... WITH are supported by cqlsim",
        ))
    }
}

#[cfg(test)]
#[path = "parser_tests.rs"]
mod tests;
