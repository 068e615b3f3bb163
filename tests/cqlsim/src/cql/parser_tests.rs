//! Parser tests: the statement shapes clients send, and Cassandra's syntax errors.

use crate::cql::ast::*;
use crate::cql::{parse, parse_script};
use crate::error::CqlError;
use crate::types::ColType;

fn stmt(s: &str) -> Statement {
    parse(s).unwrap_or_else(|e| panic!("{s}: {e}")).stmt
}

#[test]
fn counter_update_forms() {
    for (src, expect_sub) in [
        ("UPDATE ks.t SET c = c + ? WHERE pk = ?", false),
        ("update ks.t set c = c - ? where pk = ?;", true),
        ("UPDATE t SET c += ? WHERE pk = ?", false),
        ("UPDATE t SET c -= ? WHERE pk = ?", true),
    ] {
        let Statement::Update(u) = stmt(src) else {
            panic!("not an update")
        };
        let is_sub = matches!(u.assignments[0].op, Operation::Sub(Term::Marker(0)));
        assert_eq!(is_sub, expect_sub, "{src}");
        assert_eq!(u.where_, vec![Relation::Eq("pk".into(), Term::Marker(1))]);
    }
    let Statement::Update(u) = stmt("UPDATE t SET c = c -3, d = d + 4 WHERE pk = 'a'") else {
        panic!()
    };
    assert_eq!(
        u.assignments[0].op,
        Operation::Add(Term::Lit(Literal::Int("-3".into())))
    );
    assert_eq!(
        u.assignments[1].op,
        Operation::Add(Term::Lit(Literal::Int("4".into())))
    );
}

#[test]
fn other_column_on_the_right_is_a_syntax_error() {
    let e = parse("UPDATE t SET c = d + 1 WHERE pk = 1").unwrap_err();
    assert_eq!(
        e,
        CqlError::Syntax("Only expressions of the form X = X +<value> are supported.".into())
    );
}

#[test]
fn create_table_shapes() {
    let Statement::CreateTable(t) = stmt(
        "CREATE TABLE IF NOT EXISTS ks.\"Views\" (page_id text, day date, minute smallint, views counter, \
         PRIMARY KEY ((page_id, day), minute)) WITH CLUSTERING ORDER BY (minute DESC) AND comment = 'x' \
         AND compaction = {'class': 'SizeTieredCompactionStrategy'}",
    ) else {
        panic!()
    };
    assert_eq!(t.name.name, "Views");
    assert!(t.if_not_exists);
    assert_eq!(t.partition_key, vec!["page_id", "day"]);
    assert_eq!(t.clustering, vec!["minute"]);
    assert_eq!(t.clustering_order, vec![("minute".to_string(), true)]);
    assert_eq!(t.columns[3].ty, ColType::Counter);
    assert_eq!(t.options.len(), 2);
}

#[test]
fn selects_of_the_drivers() {
    let Statement::Select(s) =
        stmt("SELECT keyspace_name, table_name FROM system_schema.tables where keyspace_name in ?")
    else {
        panic!()
    };
    assert_eq!(
        s.where_,
        vec![Relation::In("keyspace_name".into(), InValues::Marker(0))]
    );
    let Statement::Select(s) = stmt("select * from system.local where key = 'local'") else {
        panic!()
    };
    assert_eq!(s.selection, Selection::All);
    let Statement::Select(s) = stmt(
        "SELECT count(*) FROM t WHERE a = 1 AND b >= 2 ORDER BY b DESC LIMIT 10 ALLOW FILTERING",
    ) else {
        panic!()
    };
    assert_eq!(s.selection, Selection::Count(None));
    assert_eq!(s.order_by, vec![("b".to_string(), true)]);
    assert!(s.allow_filtering);
}

#[test]
fn batches_and_scripts() {
    let Statement::Batch(b) = stmt(
        "BEGIN COUNTER BATCH UPDATE t SET c = c + 1 WHERE k = 1; UPDATE t SET c = c + 2 WHERE k = 2; APPLY BATCH;",
    ) else {
        panic!()
    };
    assert_eq!(b.statements.len(), 2);
    let script = parse_script(
        "-- schema\nCREATE KEYSPACE ks WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1};\n\
         CREATE TABLE ks.t (k int PRIMARY KEY, c counter);\n-- trailing comment\n",
    )
    .expect("parses");
    assert_eq!(script.len(), 2);
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let deep = format!(
        "INSERT INTO t (k, l) VALUES (1, {}{})",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    assert!(matches!(parse(&deep), Err(CqlError::Syntax(_))));
    let ty = format!(
        "CREATE TABLE t (k int PRIMARY KEY, l {}int{})",
        "frozen<".repeat(10_000),
        ">".repeat(10_000)
    );
    assert!(matches!(parse(&ty), Err(CqlError::Syntax(_))));
}

#[test]
fn garbage_never_panics() {
    for s in [
        "",
        ";",
        "UPDATE",
        "SELECT * FROM",
        "INSERT INTO t (a) VALUES (",
        "CREATE TABLE t (",
        "BEGIN BATCH",
        "UPDATE t SET c = c",
        "SELECT a, FROM t",
        "CREATE TABLE t (a list<int PRIMARY KEY)",
    ] {
        assert!(parse(s).is_err(), "{s:?} should fail");
    }
}
