//! The text half of recognition: the shape of a counter UPDATE, read from the statement
//! the application prepared.
//!
//! Only the forms the wrapper can aggregate are read in full:
//!
//! ```text
//! UPDATE [ks.]table SET c = c + t [, c = c - t, c += t, c -= t ...] WHERE k = t [AND k = t ...] [;]
//! t := ?  |  :name  |  [-]integer
//! ```
//!
//! Anything else is a [`Rejection`] naming why, and the statement passes through to the
//! store unchanged. The text alone never decides: [`super::recognize`] checks what is read
//! here against the driver's metadata of the prepared statement (one bind marker per
//! marker found here, named after the column it was found on) and the table's schema.

/// A term of the statement: where a value comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Term {
    /// A bind marker (`?` or `:name`): its position among the statement's markers.
    Marker(usize),
    /// An integer literal.
    Integer(i64),
    /// Any other literal (a string, a UUID, a float, ...).
    OtherLiteral,
}

/// `column = column ± term` (or `column ±= term`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Increment {
    /// The column, as the schema spells it (unquoted names folded to lower case).
    pub column: String,
    /// Whether the term is subtracted.
    pub negated: bool,
    /// The delta.
    pub term: Term,
}

/// `column = term` in the WHERE clause.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyEquality {
    /// The column.
    pub column: String,
    /// Its value.
    pub term: Term,
}

/// An UPDATE in the form the wrapper can aggregate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedUpdate {
    /// The keyspace, when the statement names one.
    pub keyspace: Option<String>,
    /// The table.
    pub table: String,
    /// The SET clause.
    pub increments: Vec<Increment>,
    /// The WHERE clause.
    pub keys: Vec<KeyEquality>,
    /// The bind markers, in order: the column each one was found on.
    pub markers: Vec<String>,
}

/// Why a statement's text is not an aggregatable counter UPDATE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// Not an UPDATE at all (a read, an INSERT, a DELETE, a BATCH text, DDL, ...).
    NotUpdate,
    /// `USING` (TTL, TIMESTAMP) or `IF` (a lightweight transaction).
    UsingOrIf,
    /// `IN` on a key column.
    InRelation,
    /// A SET assignment that is not `c = c ± t` (a regular column, a collection, ...).
    NotIncrement,
    /// Any other form (range relations, tuples, `token()`, comments, ...).
    Unsupported,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    /// An unquoted identifier or keyword, folded to lower case.
    Word(String),
    /// A double-quoted identifier, as written.
    Quoted(String),
    /// Digits (a sign is a separate symbol).
    Digits(String),
    /// `?`.
    Marker,
    /// `:name`.
    NamedMarker,
    /// `'...'`, `$$...$$`, a number with a fraction or exponent, a blob, a UUID.
    Literal,
    /// `=`, `+`, `-`, `+=`, `-=`, `,`, `.`, `;`, `(`, `)`, `<`, `>`, ...
    Symbol(&'static str),
}

const SYMBOLS: [&str; 20] = [
    "+=", "-=", "<=", ">=", "!=", "=", "+", "-", ",", ".", ";", "(", ")", "<", ">", "*", "[", "]",
    "{", "}",
];

/// Splits `text` into tokens; `None` for anything outside the subset (comments included).
fn tokens(text: &str) -> Option<Vec<Token>> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let rest = &text[i..];
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if rest.starts_with("--") || rest.starts_with("//") || rest.starts_with("/*") {
            return None;
        } else if c.is_ascii_alphabetic() {
            let end = rest
                .find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_'))
                .unwrap_or(rest.len());
            let word = &rest[..end];
            // A UUID literal starts with hex letters: 8 hex digits and a dash.
            if is_uuid_at(rest) {
                out.push(Token::Literal);
                i += 36;
                continue;
            }
            out.push(Token::Word(word.to_ascii_lowercase()));
            i += end;
        } else if c.is_ascii_digit() {
            if is_uuid_at(rest) {
                out.push(Token::Literal);
                i += 36;
                continue;
            }
            if rest.starts_with("0x") || rest.starts_with("0X") {
                let end = 2 + rest[2..]
                    .find(|ch: char| !ch.is_ascii_hexdigit())
                    .unwrap_or(rest.len() - 2);
                out.push(Token::Literal);
                i += end;
                continue;
            }
            let end = rest
                .find(|ch: char| !ch.is_ascii_digit())
                .unwrap_or(rest.len());
            let after = rest[end..].chars().next();
            if matches!(after, Some('.' | 'e' | 'E')) || after.is_some_and(char::is_alphabetic) {
                // A float, or a duration such as 3h: some other literal. Skip to its end.
                let more = rest[end..]
                    .find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '.'))
                    .map_or(rest.len(), |n| end + n);
                out.push(Token::Literal);
                i += more;
                continue;
            }
            out.push(Token::Digits(rest[..end].to_owned()));
            i += end;
        } else if c == b'"' {
            let (name, len) = quoted(rest, '"')?;
            out.push(Token::Quoted(name));
            i += len;
        } else if c == b'\'' {
            let (_, len) = quoted(rest, '\'')?;
            out.push(Token::Literal);
            i += len;
        } else if let Some(body) = rest.strip_prefix("$$") {
            let end = body.find("$$")?;
            out.push(Token::Literal);
            i += end + 4;
        } else if c == b'?' {
            out.push(Token::Marker);
            i += 1;
        } else if c == b':' {
            let name_len = rest[1..]
                .find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_'))
                .unwrap_or(rest.len() - 1);
            if name_len == 0 {
                return None;
            }
            out.push(Token::NamedMarker);
            i += 1 + name_len;
        } else {
            let symbol = SYMBOLS.iter().find(|s| rest.starts_with(**s))?;
            out.push(Token::Symbol(symbol));
            i += symbol.len();
        }
    }
    Some(out)
}

fn is_uuid_at(rest: &str) -> bool {
    let b = rest.as_bytes();
    b.len() >= 36
        && b[..36].iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// A quoted run starting at `rest[0]`, with the quote doubled as its escape: (content,
/// length in the text).
fn quoted(rest: &str, quote: char) -> Option<(String, usize)> {
    let mut content = String::new();
    let mut chars = rest.char_indices().skip(1).peekable();
    while let Some((at, ch)) = chars.next() {
        if ch == quote {
            if chars.peek().is_some_and(|(_, next)| *next == quote) {
                content.push(quote);
                chars.next();
            } else {
                return Some((content, at + 1));
            }
        } else {
            content.push(ch);
        }
    }
    None
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
    markers: Vec<String>,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn next(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.at).cloned();
        self.at += 1;
        token
    }

    fn is_word(&self, word: &str) -> bool {
        matches!(self.peek(), Some(Token::Word(w)) if w == word)
    }

    fn eat_symbol(&mut self, symbol: &str) -> bool {
        if matches!(self.peek(), Some(Token::Symbol(s)) if *s == symbol) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn identifier(&mut self) -> Result<String, Rejection> {
        match self.next() {
            Some(Token::Word(w)) => Ok(w),
            Some(Token::Quoted(q)) => Ok(q),
            _ => Err(Rejection::Unsupported),
        }
    }

    /// A term received by `column`.
    fn term(&mut self, column: &str) -> Result<Term, Rejection> {
        let negative = self.eat_symbol("-");
        match self.next() {
            Some(Token::Marker | Token::NamedMarker) if !negative => {
                self.markers.push(column.to_owned());
                Ok(Term::Marker(self.markers.len() - 1))
            }
            Some(Token::Digits(digits)) => {
                let text = if negative {
                    format!("-{digits}")
                } else {
                    digits
                };
                // Beyond i64 it is a varint literal, not a counter delta.
                Ok(text.parse().map_or(Term::OtherLiteral, Term::Integer))
            }
            Some(Token::Literal) => Ok(Term::OtherLiteral),
            Some(Token::Word(w)) if matches!(w.as_str(), "true" | "false" | "null") => {
                Ok(Term::OtherLiteral)
            }
            _ => Err(Rejection::Unsupported),
        }
    }

    fn assignment(&mut self) -> Result<Increment, Rejection> {
        let column = self.identifier()?;
        if self.eat_symbol("+=") || self.eat_symbol("-=") {
            let negated = self.tokens[self.at - 1] == Token::Symbol("-=");
            let term = self.term(&column)?;
            return Ok(Increment {
                column,
                negated,
                term,
            });
        }
        if !self.eat_symbol("=") {
            // `c[...] = ...`, `c.field = ...`: not an increment.
            return Err(Rejection::NotIncrement);
        }
        let save = self.at;
        if let Ok(same) = self.identifier()
            && same == column
        {
            let negated = if self.eat_symbol("+") {
                false
            } else if self.eat_symbol("-") {
                true
            } else {
                return Err(Rejection::NotIncrement);
            };
            let term = self.term(&column)?;
            return Ok(Increment {
                column,
                negated,
                term,
            });
        }
        self.at = save;
        Err(Rejection::NotIncrement)
    }

    fn relation(&mut self) -> Result<KeyEquality, Rejection> {
        if matches!(self.peek(), Some(Token::Symbol("("))) || self.is_word("token") {
            return Err(Rejection::Unsupported);
        }
        let column = self.identifier()?;
        if self.is_word("in") {
            return Err(Rejection::InRelation);
        }
        if !self.eat_symbol("=") {
            return Err(Rejection::Unsupported);
        }
        let term = self.term(&column)?;
        Ok(KeyEquality { column, term })
    }

    fn update(&mut self) -> Result<ParsedUpdate, Rejection> {
        if !self.is_word("update") {
            return Err(Rejection::NotUpdate);
        }
        self.at += 1;
        let first = self.identifier()?;
        let (keyspace, table) = if self.eat_symbol(".") {
            (Some(first), self.identifier()?)
        } else {
            (None, first)
        };
        if self.is_word("using") {
            return Err(Rejection::UsingOrIf);
        }
        if !self.is_word("set") {
            return Err(Rejection::Unsupported);
        }
        self.at += 1;
        let mut increments = vec![self.assignment()?];
        while self.eat_symbol(",") {
            increments.push(self.assignment()?);
        }
        if !self.is_word("where") {
            return Err(Rejection::Unsupported);
        }
        self.at += 1;
        let mut keys = vec![self.relation()?];
        while self.is_word("and") {
            self.at += 1;
            keys.push(self.relation()?);
        }
        if self.is_word("if") {
            return Err(Rejection::UsingOrIf);
        }
        self.eat_symbol(";");
        if self.peek().is_some() {
            return Err(Rejection::Unsupported);
        }
        Ok(ParsedUpdate {
            keyspace,
            table,
            increments,
            keys,
            markers: std::mem::take(&mut self.markers),
        })
    }
}

/// Reads `text` as a counter UPDATE of the supported forms.
pub fn parse_update(text: &str) -> Result<ParsedUpdate, Rejection> {
    let Some(tokens) = tokens(text) else {
        return Err(Rejection::Unsupported);
    };
    let mut parser = Parser {
        tokens,
        at: 0,
        markers: Vec::new(),
    };
    parser.update()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inc(column: &str, negated: bool, term: Term) -> Increment {
        Increment {
            column: column.into(),
            negated,
            term,
        }
    }

    fn key(column: &str, term: Term) -> KeyEquality {
        KeyEquality {
            column: column.into(),
            term,
        }
    }

    #[test]
    fn the_four_increment_forms_with_bound_and_literal_deltas() {
        let p = parse_update(
            "update ks.Page_Views set views = views + ?, a = a - 3, \"B\" += :d, c -= -2 \
             WHERE page_id = ? and day = :day;",
        )
        .unwrap();
        assert_eq!(p.keyspace.as_deref(), Some("ks"));
        assert_eq!(p.table, "page_views");
        assert_eq!(
            p.increments,
            [
                inc("views", false, Term::Marker(0)),
                inc("a", true, Term::Integer(3)),
                inc("B", false, Term::Marker(1)),
                inc("c", true, Term::Integer(-2)),
            ]
        );
        assert_eq!(
            p.keys,
            [key("page_id", Term::Marker(2)), key("day", Term::Marker(3))]
        );
        assert_eq!(p.markers, ["views", "B", "page_id", "day"]);
    }

    #[test]
    fn literal_keys_are_read_as_literals() {
        let p =
            parse_update("UPDATE t SET c = c + 1 WHERE k = 'it''s' AND d = 2026-11-30 AND u = 5");
        // A date literal is not CQL without quotes: the text is refused, not guessed.
        assert_eq!(p, Err(Rejection::Unsupported));
        let p = parse_update("UPDATE t SET c = c + 1 WHERE k = 'it''s' AND u = 5").unwrap();
        assert_eq!(
            p.keys,
            [key("k", Term::OtherLiteral), key("u", Term::Integer(5))]
        );
        assert!(p.markers.is_empty());
    }

    #[test]
    fn each_unsupported_form_says_why() {
        let cases = [
            ("SELECT * FROM t WHERE k = ?", Rejection::NotUpdate),
            ("INSERT INTO t (k, v) VALUES (?, ?)", Rejection::NotUpdate),
            (
                "UPDATE t USING TTL 5 SET c = c + 1 WHERE k = ?",
                Rejection::UsingOrIf,
            ),
            (
                "UPDATE t SET c = c + 1 WHERE k = ? IF EXISTS",
                Rejection::UsingOrIf,
            ),
            (
                "UPDATE t SET c = c + 1 WHERE k IN (?, ?)",
                Rejection::InRelation,
            ),
            ("UPDATE t SET c = c + 1 WHERE k IN ?", Rejection::InRelation),
            ("UPDATE t SET v = ? WHERE k = ?", Rejection::NotIncrement),
            (
                "UPDATE t SET c = c + 1, v = 'x' WHERE k = ?",
                Rejection::NotIncrement,
            ),
            (
                "UPDATE t SET c = 1 + c WHERE k = ?",
                Rejection::NotIncrement,
            ),
            (
                "UPDATE t SET c = d + 1 WHERE k = ?",
                Rejection::NotIncrement,
            ),
            (
                "UPDATE t SET m['a'] = 1 WHERE k = ?",
                Rejection::NotIncrement,
            ),
            ("UPDATE t SET c = c + 1 WHERE k > ?", Rejection::Unsupported),
            (
                "UPDATE t SET c = c + 1 WHERE (a, b) = (?, ?)",
                Rejection::Unsupported,
            ),
            (
                "UPDATE t SET c = c + 1 WHERE token(k) = ?",
                Rejection::Unsupported,
            ),
            (
                "UPDATE t SET c = c + 1 WHERE k = ? -- hi",
                Rejection::Unsupported,
            ),
            (
                "UPDATE t SET c = c + 1 WHERE k = ? extra",
                Rejection::Unsupported,
            ),
            ("UPDATE t SET c = c + 1", Rejection::Unsupported),
            (
                "UPDATE t SET c = c + 1 WHERE k = 'unterminated",
                Rejection::Unsupported,
            ),
        ];
        for (text, why) in cases {
            assert_eq!(parse_update(text), Err(why), "{text}");
        }
    }

    #[test]
    fn literals_that_are_not_i64_are_other_literals() {
        let p = parse_update(
            "UPDATE t SET c = c + 99999999999999999999 WHERE k = 1.5 AND u = 0xff \
             AND v = 123e4567-e89b-12d3-a456-426614174000",
        )
        .unwrap();
        assert_eq!(p.increments[0].term, Term::OtherLiteral);
        assert!(p.keys.iter().all(|k| k.term == Term::OtherLiteral));
    }
}
