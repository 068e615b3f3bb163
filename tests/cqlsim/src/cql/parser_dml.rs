//! DML parsing: SELECT, INSERT, UPDATE (every counter assignment form), DELETE and
//! `BEGIN ... BATCH`.

use super::ast::*;
use super::lexer::Tok;
use super::parser::Parser;
use crate::error::CqlError;
use crate::proto::request::BatchKind;

impl Parser<'_> {
    pub(crate) fn select(&mut self) -> Result<Select, CqlError> {
        self.expect_kw("select")?;
        if self.is_kw("json") || self.is_kw("distinct") {
            return Err(CqlError::invalid(
                "SELECT JSON and DISTINCT are not supported by cqlsim",
            ));
        }
        let selection = if self.eat_sym("*") {
            Selection::All
        } else if self.is_kw("count") && matches!(self.peek_at(1), Some(Tok::Sym("("))) {
            self.i += 2;
            if !self.eat_sym("*") && !matches!(self.bump(), Some(Tok::Int(s)) if s == "1") {
                return Err(self.unexpected("'*' or 1"));
            }
            self.expect_sym(")")?;
            let alias = if self.eat_kw("as") {
                Some(self.ident()?)
            } else {
                None
            };
            Selection::Count(alias)
        } else {
            let mut cols = Vec::new();
            loop {
                let c = self.ident()?;
                if matches!(self.peek(), Some(Tok::Sym("("))) {
                    return Err(CqlError::invalid(format!(
                        "function {c}() in a selection is not supported by cqlsim"
                    )));
                }
                let alias = if self.eat_kw("as") {
                    Some(self.ident()?)
                } else {
                    None
                };
                cols.push((c, alias));
                if !self.eat_sym(",") {
                    break;
                }
            }
            Selection::Columns(cols)
        };
        self.expect_kw("from")?;
        let table = self.qualified()?;
        let where_ = if self.eat_kw("where") {
            self.relations()?
        } else {
            Vec::new()
        };
        let mut order_by = Vec::new();
        if self.eat_kw("order") {
            self.expect_kw("by")?;
            loop {
                let c = self.ident()?;
                let desc = if self.eat_kw("desc") {
                    true
                } else {
                    self.eat_kw("asc");
                    false
                };
                order_by.push((c, desc));
                if !self.eat_sym(",") {
                    break;
                }
            }
        }
        if self.is_kw("per") {
            return Err(CqlError::invalid(
                "PER PARTITION LIMIT is not supported by cqlsim",
            ));
        }
        let limit = if self.eat_kw("limit") {
            Some(self.term()?)
        } else {
            None
        };
        let allow_filtering = self.eat_kw("allow");
        if allow_filtering {
            self.expect_kw("filtering")?;
        }
        let using_timeout = self.is_kw("using")
            && matches!(self.peek_at(1), Some(Tok::Ident(k)) if k.eq_ignore_ascii_case("timeout"));
        if using_timeout {
            self.i += 2;
            // A duration such as `2000ms`: a number, then its unit.
            if !matches!(self.bump(), Some(Tok::Int(_))) {
                return Err(self.unexpected("a duration"));
            }
            if matches!(self.peek(), Some(Tok::Ident(_))) {
                self.i += 1;
            }
        }
        Ok(Select {
            table,
            selection,
            where_,
            order_by,
            limit,
            allow_filtering,
            using_timeout,
        })
    }

    pub(crate) fn insert(&mut self) -> Result<Insert, CqlError> {
        self.expect_kw("insert")?;
        self.expect_kw("into")?;
        let table = self.qualified()?;
        if self.is_kw("json") {
            return Err(CqlError::invalid("INSERT JSON is not supported by cqlsim"));
        }
        self.expect_sym("(")?;
        let mut columns = vec![self.ident()?];
        while self.eat_sym(",") {
            columns.push(self.ident()?);
        }
        self.expect_sym(")")?;
        self.expect_kw("values")?;
        self.expect_sym("(")?;
        let values = self.terms_until(")")?;
        let mut using = Using::default();
        let mut condition = None;
        if self.eat_kw("if") {
            self.expect_kw("not")?;
            self.expect_kw("exists")?;
            condition = Some(Condition::NotExists);
        }
        self.using(&mut using)?;
        Ok(Insert {
            table,
            columns,
            values,
            using,
            condition,
        })
    }

    pub(crate) fn update(&mut self) -> Result<Update, CqlError> {
        self.expect_kw("update")?;
        let table = self.qualified()?;
        let mut using = Using::default();
        self.using(&mut using)?;
        self.expect_kw("set")?;
        let mut assignments = vec![self.assignment()?];
        while self.eat_sym(",") {
            assignments.push(self.assignment()?);
        }
        self.expect_kw("where")?;
        let where_ = self.relations()?;
        let condition = self.condition()?;
        Ok(Update {
            table,
            using,
            assignments,
            where_,
            condition,
        })
    }

    /// `c = t`, `c = c + t`, `c = c - t`, `c = c -3`, `c += t`, `c -= t`.
    pub(crate) fn assignment(&mut self) -> Result<Assignment, CqlError> {
        let column = self.ident()?;
        if matches!(self.peek(), Some(Tok::Sym("["))) {
            return Err(CqlError::invalid(
                "collection element assignment is not supported by cqlsim",
            ));
        }
        if self.eat_sym("+=") {
            return Ok(Assignment {
                column,
                op: Operation::Add(self.term()?),
            });
        }
        if self.eat_sym("-=") {
            return Ok(Assignment {
                column,
                op: Operation::Sub(self.term()?),
            });
        }
        self.expect_sym("=")?;
        let rhs_is_column = match self.peek() {
            Some(Tok::QIdent(_)) => true,
            Some(Tok::Ident(w)) => !matches!(
                w.to_ascii_lowercase().as_str(),
                "true" | "false" | "null" | "nan" | "infinity"
            ),
            _ => false,
        };
        if !rhs_is_column {
            return Ok(Assignment {
                column,
                op: Operation::Set(self.term()?),
            });
        }
        let other = self.ident()?;
        let op = match self.peek() {
            Some(Tok::Sym("+")) => {
                self.i += 1;
                Operation::Add(self.term()?)
            }
            Some(Tok::Sym("-")) => {
                self.i += 1;
                Operation::Sub(self.term()?)
            }
            // Cassandra's lexer makes `-3` one INTEGER token: `c = c -3` is `c + (-3)`.
            Some(Tok::Int(s)) if s.starts_with('-') => {
                self.i += 1;
                Operation::Add(Term::Lit(Literal::Int(s.clone())))
            }
            _ => return Err(self.unexpected("'+' or '-'")),
        };
        if other != column {
            let sign = if matches!(op, Operation::Sub(_)) {
                "-"
            } else {
                "+"
            };
            return Err(CqlError::syntax(format!(
                "Only expressions of the form X = X {sign}<value> are supported."
            )));
        }
        Ok(Assignment { column, op })
    }

    pub(crate) fn delete(&mut self) -> Result<Delete, CqlError> {
        self.expect_kw("delete")?;
        let mut columns = Vec::new();
        if !self.is_kw("from") {
            loop {
                columns.push(self.ident()?);
                if matches!(self.peek(), Some(Tok::Sym("["))) {
                    return Err(CqlError::invalid(
                        "collection element deletion is not supported by cqlsim",
                    ));
                }
                if !self.eat_sym(",") {
                    break;
                }
            }
        }
        self.expect_kw("from")?;
        let table = self.qualified()?;
        let mut using = Using::default();
        self.using(&mut using)?;
        self.expect_kw("where")?;
        let where_ = self.relations()?;
        let condition = self.condition()?;
        Ok(Delete {
            table,
            columns,
            using,
            where_,
            condition,
        })
    }

    pub(crate) fn batch(&mut self) -> Result<Batch, CqlError> {
        self.expect_kw("begin")?;
        let kind = if self.eat_kw("unlogged") {
            BatchKind::Unlogged
        } else if self.eat_kw("counter") {
            BatchKind::Counter
        } else {
            BatchKind::Logged
        };
        self.expect_kw("batch")?;
        let mut using = Using::default();
        self.using(&mut using)?;
        let mut statements = Vec::new();
        loop {
            while self.eat_sym(";") {}
            if self.eat_kw("apply") {
                self.expect_kw("batch")?;
                break;
            }
            let s = match self.peek() {
                Some(Tok::Ident(w)) if w.eq_ignore_ascii_case("insert") => {
                    Statement::Insert(self.insert()?)
                }
                Some(Tok::Ident(w)) if w.eq_ignore_ascii_case("update") => {
                    Statement::Update(self.update()?)
                }
                Some(Tok::Ident(w)) if w.eq_ignore_ascii_case("delete") => {
                    Statement::Delete(self.delete()?)
                }
                _ => return Err(self.unexpected("INSERT, UPDATE, DELETE or APPLY BATCH")),
            };
            statements.push(s);
        }
        Ok(Batch {
            kind,
            using,
            statements,
        })
    }
}
