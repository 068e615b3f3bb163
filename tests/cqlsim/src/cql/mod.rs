//! The CQL language front end: tokens, statement tree, parser.

pub(crate) mod ast;
pub(crate) mod lexer;
pub(crate) mod parser;
mod parser_ddl;
mod parser_dml;

pub(crate) use parser::{parse, parse_script};
