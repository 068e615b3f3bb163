//! Recursive-descent parser for the supported CQL subset: the token cursor, terms, and the DML
//! statements (SELECT, INSERT, UPDATE, DELETE, BATCH). DDL lives in `parser_ddl.rs`.
//!
//! Keywords are recognised by context and case-insensitively, so column names such as `key`,
//! `type` or `position` (used by the system tables) need no quoting.

use super::ast::*;
use super::lexer::{Spanned, Tok, lex};
use crate::error::CqlError;

/// Parses exactly one statement; trailing `;` are allowed.
pub(crate) fn parse(src: &str) -> Result<Parsed, CqlError> {
    let toks = lex(src)?;
    let mut p = Parser::new(&toks);
    let stmt = p.statement()?;
    while p.eat_sym(";") {}
    if p.peek().is_some() {
        return Err(p.unexpected("end of statement"));
    }
    Ok(Parsed {
        stmt,
        marker_names: p.markers,
    })
}

/// Parses a `;`-separated script (schema files, snapshots). `--` comments are skipped.
pub(crate) fn parse_script(src: &str) -> Result<Vec<Parsed>, CqlError> {
    let toks = lex(src)?;
    let mut p = Parser::new(&toks);
    let mut out = Vec::new();
    loop {
        while p.eat_sym(";") {}
        if p.peek().is_none() {
            return Ok(out);
        }
        p.markers.clear();
        let stmt = p.statement()?;
        if !p.eat_sym(";") && p.peek().is_some() {
            return Err(p.unexpected("';'"));
        }
        out.push(Parsed {
            stmt,
            marker_names: std::mem::take(&mut p.markers),
        });
    }
}

pub(crate) struct Parser<'a> {
    toks: &'a [Spanned],
    pub(crate) i: usize,
    pub(crate) markers: Vec<Option<String>>,
    /// Nesting of collection literals and types, bounded so hostile input cannot exhaust the
    /// stack.
    pub(crate) depth: usize,
}

impl<'a> Parser<'a> {
    fn new(toks: &'a [Spanned]) -> Self {
        Parser {
            toks,
            i: 0,
            markers: Vec::new(),
            depth: 0,
        }
    }

    pub(crate) fn peek(&self) -> Option<&'a Tok> {
        self.toks.get(self.i).map(|t| &t.tok)
    }

    pub(crate) fn peek_at(&self, k: usize) -> Option<&'a Tok> {
        self.toks.get(self.i + k).map(|t| &t.tok)
    }

    pub(crate) fn bump(&mut self) -> Option<&'a Tok> {
        let t = self.peek();
        if t.is_some() {
            self.i += 1;
        }
        t
    }

    pub(crate) fn is_kw(&self, kw: &str) -> bool {
        matches!(self.peek(), Some(Tok::Ident(s)) if s.eq_ignore_ascii_case(kw))
    }

    pub(crate) fn eat_kw(&mut self, kw: &str) -> bool {
        let yes = self.is_kw(kw);
        if yes {
            self.i += 1;
        }
        yes
    }

    pub(crate) fn expect_kw(&mut self, kw: &str) -> Result<(), CqlError> {
        if self.eat_kw(kw) {
            Ok(())
        } else {
            // ANTLR names keyword tokens K_WHERE, K_SET, ...
            Err(self.unexpected(&format!("K_{}", kw.to_ascii_uppercase())))
        }
    }

    pub(crate) fn eat_sym(&mut self, s: &str) -> bool {
        let yes = matches!(self.peek(), Some(Tok::Sym(x)) if *x == s);
        if yes {
            self.i += 1;
        }
        yes
    }

    pub(crate) fn expect_sym(&mut self, s: &str) -> Result<(), CqlError> {
        if self.eat_sym(s) {
            Ok(())
        } else {
            Err(self.unexpected(&format!("'{s}'")))
        }
    }

    /// A syntax error at the current token, worded like Cassandra's ANTLR messages.
    pub(crate) fn unexpected(&self, expecting: &str) -> CqlError {
        match self.toks.get(self.i) {
            Some(t) => CqlError::syntax(format!(
                "line 1:{} mismatched input '{}' expecting {expecting}",
                t.pos,
                describe(&t.tok)
            )),
            // ANTLR reports the end of input at line 0, column -1.
            None => CqlError::syntax(format!(
                "line 0:-1 mismatched input '<EOF>' expecting {expecting}"
            )),
        }
    }

    /// An identifier: unquoted ones are lower-cased, quoted ones kept.
    pub(crate) fn ident(&mut self) -> Result<String, CqlError> {
        match self.peek() {
            Some(Tok::Ident(s)) => {
                self.i += 1;
                Ok(s.to_ascii_lowercase())
            }
            Some(Tok::QIdent(s)) => {
                self.i += 1;
                Ok(s.clone())
            }
            _ => Err(self.unexpected("an identifier")),
        }
    }

    /// `ks.name` or `name`.
    pub(crate) fn qualified(&mut self) -> Result<QualifiedName, CqlError> {
        let first = self.ident()?;
        if self.eat_sym(".") {
            let name = self.ident()?;
            Ok(QualifiedName {
                keyspace: Some(first),
                name,
            })
        } else {
            Ok(QualifiedName {
                keyspace: None,
                name: first,
            })
        }
    }

    fn marker(&mut self, name: Option<String>) -> Term {
        self.markers.push(name);
        Term::Marker(self.markers.len() - 1)
    }

    /// A value: literal, collection literal or bind marker.
    pub(crate) fn term(&mut self) -> Result<Term, CqlError> {
        self.nest(|p| p.term_inner())
    }

    /// Runs `f` one nesting level deeper; more than 32 levels is a syntax error.
    pub(crate) fn nest<T>(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<T, CqlError>,
    ) -> Result<T, CqlError> {
        if self.depth >= 32 {
            return Err(CqlError::syntax("literal or type nested too deeply"));
        }
        self.depth += 1;
        let r = f(self);
        self.depth -= 1;
        r
    }

    fn term_inner(&mut self) -> Result<Term, CqlError> {
        let t = match self.peek() {
            Some(Tok::Marker) => {
                self.i += 1;
                return Ok(self.marker(None));
            }
            Some(Tok::Named(n)) => {
                self.i += 1;
                return Ok(self.marker(Some(n.clone())));
            }
            Some(Tok::Str(s)) => Literal::Str(s.clone()),
            Some(Tok::Int(s)) => Literal::Int(s.clone()),
            Some(Tok::Float(s)) => Literal::Float(s.clone()),
            Some(Tok::Uuid(u)) => Literal::Uuid(*u),
            Some(Tok::Hex(b)) => Literal::Blob(b.clone()),
            Some(Tok::Ident(w)) => match w.to_ascii_lowercase().as_str() {
                "true" => Literal::Bool(true),
                "false" => Literal::Bool(false),
                "null" => Literal::Null,
                "nan" => Literal::Float("NaN".into()),
                "infinity" => Literal::Float("Infinity".into()),
                _ => return Err(self.unexpected("a value")),
            },
            Some(Tok::Sym("-")) if matches!(self.peek_at(1), Some(Tok::Ident(w)) if w.eq_ignore_ascii_case("infinity")) =>
            {
                self.i += 1;
                Literal::Float("-Infinity".into())
            }
            Some(Tok::Sym("[")) => {
                self.i += 1;
                let items = self.terms_until("]")?;
                return Ok(Term::Lit(Literal::List(items)));
            }
            Some(Tok::Sym("{")) => {
                self.i += 1;
                return self.set_or_map();
            }
            _ => return Err(self.unexpected("a value")),
        };
        self.i += 1;
        Ok(Term::Lit(t))
    }

    pub(crate) fn terms_until(&mut self, close: &str) -> Result<Vec<Term>, CqlError> {
        let mut items = Vec::new();
        if self.eat_sym(close) {
            return Ok(items);
        }
        loop {
            items.push(self.term()?);
            if self.eat_sym(close) {
                return Ok(items);
            }
            self.expect_sym(",")?;
        }
    }

    fn set_or_map(&mut self) -> Result<Term, CqlError> {
        if self.eat_sym("}") {
            return Ok(Term::Lit(Literal::Set(Vec::new())));
        }
        let first = self.term()?;
        if self.eat_sym(":") {
            let mut entries = vec![(first, self.term()?)];
            while self.eat_sym(",") {
                let k = self.term()?;
                self.expect_sym(":")?;
                entries.push((k, self.term()?));
            }
            self.expect_sym("}")?;
            return Ok(Term::Lit(Literal::Map(entries)));
        }
        let mut items = vec![first];
        while self.eat_sym(",") {
            items.push(self.term()?);
        }
        self.expect_sym("}")?;
        Ok(Term::Lit(Literal::Set(items)))
    }

    /// Any statement.
    pub(crate) fn statement(&mut self) -> Result<Statement, CqlError> {
        let Some(Tok::Ident(w)) = self.peek() else {
            return Err(self.unexpected("a statement"));
        };
        match w.to_ascii_lowercase().as_str() {
            "select" => self.select().map(Statement::Select),
            "insert" => self.insert().map(Statement::Insert),
            "update" => self.update().map(Statement::Update),
            "delete" => self.delete().map(Statement::Delete),
            "begin" => self.batch().map(Statement::Batch),
            "create" => self.create(),
            "drop" => self.drop(),
            "alter" => self.alter(),
            "truncate" => {
                self.i += 1;
                self.eat_kw("table");
                Ok(Statement::Truncate(self.qualified()?))
            }
            "use" => {
                self.i += 1;
                Ok(Statement::Use(self.ident()?))
            }
            _ => Err(self.unexpected("a statement")),
        }
    }

    pub(crate) fn using(&mut self, u: &mut Using) -> Result<(), CqlError> {
        if !self.eat_kw("using") {
            return Ok(());
        }
        loop {
            if self.eat_kw("ttl") {
                u.ttl = Some(self.term()?);
            } else if self.eat_kw("timestamp") {
                u.timestamp = Some(self.term()?);
            } else {
                return Err(self.unexpected("TTL or TIMESTAMP"));
            }
            if !self.eat_kw("and") {
                return Ok(());
            }
        }
    }

    pub(crate) fn condition(&mut self) -> Result<Option<Condition>, CqlError> {
        if !self.eat_kw("if") {
            return Ok(None);
        }
        if self.eat_kw("exists") {
            return Ok(Some(Condition::Exists));
        }
        if self.eat_kw("not") {
            self.expect_kw("exists")?;
            return Ok(Some(Condition::NotExists));
        }
        self.relations()?;
        Ok(Some(Condition::Columns))
    }

    pub(crate) fn relations(&mut self) -> Result<Vec<Relation>, CqlError> {
        let mut out = vec![self.relation()?];
        while self.eat_kw("and") {
            out.push(self.relation()?);
        }
        Ok(out)
    }

    pub(crate) fn relation(&mut self) -> Result<Relation, CqlError> {
        if self.is_kw("token") && matches!(self.peek_at(1), Some(Tok::Sym("("))) {
            return Err(CqlError::invalid(
                "token() restrictions are not supported by cqlsim",
            ));
        }
        if matches!(self.peek(), Some(Tok::Sym("("))) {
            return Err(CqlError::invalid(
                "multi-column relations are not supported by cqlsim",
            ));
        }
        let col = self.ident()?;
        if self.eat_kw("in") {
            if self.eat_sym("(") {
                return Ok(Relation::In(col, InValues::List(self.terms_until(")")?)));
            }
            return match self.term()? {
                Term::Marker(i) => Ok(Relation::In(col, InValues::Marker(i))),
                Term::Lit(_) => Err(self.unexpected("'(' or '?'")),
            };
        }
        let op = match self.bump() {
            Some(Tok::Sym("=")) => None,
            Some(Tok::Sym("<")) => Some(RangeOp::Lt),
            Some(Tok::Sym("<=")) => Some(RangeOp::Le),
            Some(Tok::Sym(">")) => Some(RangeOp::Gt),
            Some(Tok::Sym(">=")) => Some(RangeOp::Ge),
            Some(Tok::Sym("!=")) => {
                return Err(CqlError::invalid("Unsupported \"!=\" relation"));
            }
            _ => {
                self.i = self.i.saturating_sub(1);
                return Err(self.unexpected("a relation operator"));
            }
        };
        let t = self.term()?;
        Ok(match op {
            None => Relation::Eq(col, t),
            Some(op) => Relation::Range(col, op, t),
        })
    }
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Ident(s) | Tok::Int(s) | Tok::Float(s) => s.clone(),
        Tok::QIdent(s) => format!("\"{s}\""),
        Tok::Str(s) => format!("'{s}'"),
        Tok::Uuid(u) => crate::value::format_uuid(u),
        Tok::Hex(b) => format!("0x{}", crate::error::hex(b)),
        Tok::Marker => "?".into(),
        Tok::Named(n) => format!(":{n}"),
        Tok::Sym(s) => (*s).into(),
    }
}
