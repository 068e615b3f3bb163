//! CQL tokens. Follows Cassandra's lexer where it matters to clients: `-3` is one INTEGER
//! token (so `c = c -3` is an addition, research §2.6), unquoted identifiers are
//! case-insensitive, `"Quoted"` ones keep their case, and `--`, `//` and `/* */` are comments.

use crate::error::CqlError;

/// One token.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    /// An unquoted identifier or keyword, as written.
    Ident(String),
    /// A `"quoted"` identifier, unescaped.
    QIdent(String),
    /// A `'string'` or `$$string$$` literal, unescaped.
    Str(String),
    /// An integer literal, possibly negative.
    Int(String),
    /// A floating point literal (including `NaN`/`Infinity` handled by the parser).
    Float(String),
    /// A UUID literal.
    Uuid([u8; 16]),
    /// A `0x...` blob literal.
    Hex(Vec<u8>),
    /// `?`.
    Marker,
    /// `:name`.
    Named(String),
    /// Punctuation and operators.
    Sym(&'static str),
}

/// A token and the byte offset where it starts (for error messages).
#[derive(Debug, Clone)]
pub(crate) struct Spanned {
    pub(crate) tok: Tok,
    pub(crate) pos: usize,
}

const SYMS: [&str; 21] = [
    "<=", ">=", "!=", "+=", "-=", "(", ")", ",", ";", ".", "=", "+", "-", "*", "<", ">", "[", "]",
    "{", "}", ":",
];

/// Splits a statement (or a script) into tokens.
pub(crate) fn lex(src: &str) -> Result<Vec<Spanned>, CqlError> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if src[i..].starts_with("--") || src[i..].starts_with("//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if src[i..].starts_with("/*") {
            match src[i + 2..].find("*/") {
                Some(end) => i += end + 4,
                None => return Err(err(src, i, "unterminated comment")),
            }
            continue;
        }
        let pos = i;
        let tok = if let Some(u) = uuid_at(&b[i..]) {
            i += 36;
            Tok::Uuid(u)
        } else if c == b'0' && matches!(b.get(i + 1), Some(b'x' | b'X')) {
            let start = i + 2;
            i = start;
            while i < b.len() && b[i].is_ascii_hexdigit() {
                i += 1;
            }
            let hex = &src[start..i];
            if !hex.len().is_multiple_of(2) {
                return Err(err(src, pos, "odd number of hex digits in blob literal"));
            }
            Tok::Hex(
                (0..hex.len())
                    .step_by(2)
                    .map(|k| u8::from_str_radix(&hex[k..k + 2], 16).unwrap_or(0))
                    .collect(),
            )
        } else if c.is_ascii_digit() || (c == b'-' && b.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            let (t, end) = number(src, i);
            i = end;
            t
        } else if c.is_ascii_alphabetic() {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            Tok::Ident(src[start..i].to_owned())
        } else if c == b'"' || c == b'\'' {
            let (s, end) = quoted(src, i, c).ok_or_else(|| err(src, pos, "unterminated quote"))?;
            i = end;
            if c == b'"' {
                Tok::QIdent(s)
            } else {
                Tok::Str(s)
            }
        } else if src[i..].starts_with("$$") {
            let end = src[i + 2..]
                .find("$$")
                .ok_or_else(|| err(src, pos, "unterminated $$ string"))?;
            let s = src[i + 2..i + 2 + end].to_owned();
            i += end + 4;
            Tok::Str(s)
        } else if c == b'?' {
            i += 1;
            Tok::Marker
        } else if c == b':' && b.get(i + 1).is_some_and(u8::is_ascii_alphabetic) {
            let start = i + 1;
            i = start;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            Tok::Named(src[start..i].to_ascii_lowercase())
        } else if let Some(s) = SYMS.iter().find(|s| src[i..].starts_with(**s)) {
            i += s.len();
            Tok::Sym(s)
        } else {
            let ch = src[i..].chars().next().unwrap_or('?');
            return Err(err(
                src,
                pos,
                &format!("token recognition error at: '{ch}'"),
            ));
        };
        out.push(Spanned { tok, pos });
    }
    Ok(out)
}

fn err(src: &str, pos: usize, what: &str) -> CqlError {
    let line = src[..pos.min(src.len())].matches('\n').count() + 1;
    CqlError::syntax(format!("line {line}: {what}"))
}

fn number(src: &str, start: usize) -> (Tok, usize) {
    let b = src.as_bytes();
    let mut i = start;
    if b[i] == b'-' {
        i += 1;
    }
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let mut float = false;
    if i < b.len() && b[i] == b'.' && b.get(i + 1).is_none_or(|c| !c.is_ascii_alphabetic()) {
        float = true;
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut j = i + 1;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            j += 1;
        }
        if j < b.len() && b[j].is_ascii_digit() {
            float = true;
            i = j;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
        }
    }
    let text = src[start..i].to_owned();
    (
        if float {
            Tok::Float(text)
        } else {
            Tok::Int(text)
        },
        i,
    )
}

/// A quoted run with the quote doubled as escape. Returns the content and the end offset.
fn quoted(src: &str, start: usize, q: u8) -> Option<(String, usize)> {
    let b = src.as_bytes();
    let mut i = start + 1;
    let mut s = String::new();
    let mut run = i;
    while i < b.len() {
        if b[i] == q {
            s.push_str(&src[run..i]);
            if b.get(i + 1) == Some(&q) {
                s.push(q as char);
                i += 2;
                run = i;
                continue;
            }
            return Some((s, i + 1));
        }
        i += 1;
    }
    None
}

fn uuid_at(b: &[u8]) -> Option<[u8; 16]> {
    if b.len() < 36 {
        return None;
    }
    let dashes = [8, 13, 18, 23];
    for (k, c) in b[..36].iter().enumerate() {
        let ok = if dashes.contains(&k) {
            *c == b'-'
        } else {
            c.is_ascii_hexdigit()
        };
        if !ok {
            return None;
        }
    }
    if b.get(36)
        .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
    {
        return None;
    }
    let hex: Vec<u8> = b[..36].iter().copied().filter(|c| *c != b'-').collect();
    let mut u = [0u8; 16];
    for (k, pair) in hex.chunks(2).enumerate() {
        let s = std::str::from_utf8(pair).ok()?;
        u[k] = u8::from_str_radix(s, 16).ok()?;
    }
    Some(u)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok> {
        lex(s).expect("lexes").into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn minus_digit_is_one_integer() {
        assert_eq!(
            toks("c = c -3"),
            vec![
                Tok::Ident("c".into()),
                Tok::Sym("="),
                Tok::Ident("c".into()),
                Tok::Int("-3".into())
            ]
        );
        assert_eq!(toks("c - 3")[1], Tok::Sym("-"));
    }

    #[test]
    fn literals_and_comments() {
        let t = toks(
            "'it''s' \"Q\"\"x\" 0xCAFE 1.5e3 -- gone\n 123e4567-e89b-12d3-a456-426614174000 :name ? += /* x */ $$a'b$$",
        );
        assert_eq!(t[0], Tok::Str("it's".into()));
        assert_eq!(t[1], Tok::QIdent("Q\"x".into()));
        assert_eq!(t[2], Tok::Hex(vec![0xca, 0xfe]));
        assert_eq!(t[3], Tok::Float("1.5e3".into()));
        assert!(matches!(t[4], Tok::Uuid(u) if u[0] == 0x12 && u[15] == 0));
        assert_eq!(t[5], Tok::Named("name".into()));
        assert_eq!(t[6], Tok::Marker);
        assert_eq!(t[7], Tok::Sym("+="));
        assert_eq!(t[8], Tok::Str("a'b".into()));
    }

    #[test]
    fn garbage_is_a_syntax_error() {
        assert!(matches!(lex("select @"), Err(CqlError::Syntax(_))));
        assert!(matches!(lex("'open"), Err(CqlError::Syntax(_))));
    }
}
