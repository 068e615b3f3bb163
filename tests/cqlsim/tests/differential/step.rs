//! A corpus step (one statement, prepared statement, batch or paged read) and how it runs
//! against one store through the `scylla` driver.

use scylla::client::session::Session;
use scylla::statement::Statement;
use scylla::statement::batch::{Batch, BatchStatement, BatchType};
use scylla::value::{CqlValue, MaybeUnset};

use crate::outcome::{self, Check, Outcome};

/// A bound value, as an application would send it.
#[derive(Clone, Debug)]
pub(crate) enum Val {
    Null,
    Unset,
    Int(i32),
    BigInt(i64),
    Counter(i64),
    Text(&'static str),
    TextList(&'static [&'static str]),
}

impl Val {
    fn bound(&self) -> MaybeUnset<Option<CqlValue>> {
        let value = match self {
            Val::Null => return MaybeUnset::Set(None),
            Val::Unset => return MaybeUnset::Unset,
            Val::Int(v) => CqlValue::Int(*v),
            Val::BigInt(v) => CqlValue::BigInt(*v),
            Val::Counter(v) => CqlValue::Counter(scylla::value::Counter(*v)),
            Val::Text(v) => CqlValue::Text((*v).to_owned()),
            Val::TextList(v) => {
                CqlValue::List(v.iter().map(|s| CqlValue::Text((*s).to_owned())).collect())
            }
        };
        MaybeUnset::Set(Some(value))
    }
}

fn bind(values: &[Val]) -> Vec<MaybeUnset<Option<CqlValue>>> {
    values.iter().map(Val::bound).collect()
}

/// One request of a case.
#[derive(Clone, Debug)]
pub(crate) enum Step {
    /// QUERY without values.
    Query(&'static str, Check),
    /// PREPARE (its metadata compared), then EXECUTE with these values.
    Prepared(&'static str, Vec<Val>, Check),
    /// A BATCH frame: each statement is prepared when it has values, plain text otherwise.
    Batch(BatchType, Vec<(&'static str, Vec<Val>)>),
    /// A read fetched page by page with this page size, every page concatenated.
    Paged(&'static str, i32, Check),
}

impl Step {
    /// The statement text, for reports.
    pub(crate) fn text(&self) -> String {
        match self {
            Step::Query(cql, _) | Step::Prepared(cql, _, _) | Step::Paged(cql, _, _) => {
                (*cql).to_owned()
            }
            Step::Batch(kind, statements) => format!(
                "{kind:?} batch [{}]",
                statements
                    .iter()
                    .map(|(cql, _)| *cql)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        }
    }

    /// Runs the step and returns what the client observed (two outcomes for a prepared
    /// statement: PREPARE, then EXECUTE if PREPARE succeeded).
    pub(crate) async fn run(&self, session: &Session) -> Vec<Outcome> {
        match self {
            Step::Query(cql, check) => {
                vec![outcome::from_result(
                    session.query_unpaged(*cql, ()).await,
                    *check,
                )]
            }
            Step::Prepared(cql, values, check) => {
                let prepared = session.prepare(*cql).await;
                let mut seen = vec![outcome::from_prepare(&prepared)];
                if let Ok(prepared) = prepared {
                    seen.push(outcome::from_result(
                        session.execute_unpaged(&prepared, bind(values)).await,
                        *check,
                    ));
                }
                seen
            }
            Step::Batch(kind, statements) => {
                let mut batch = Batch::new(*kind);
                for (cql, values) in statements {
                    if values.is_empty() {
                        batch.append_statement(BatchStatement::Query(Statement::new(*cql)));
                    } else {
                        match session.prepare(*cql).await {
                            Ok(p) => batch.append_statement(BatchStatement::PreparedStatement(p)),
                            Err(e) => return vec![outcome::from_prepare(&Err(e))],
                        }
                    }
                }
                let values: Vec<_> = statements.iter().map(|(_, v)| bind(v)).collect();
                vec![outcome::from_result(
                    session.batch(&batch, values).await,
                    Check::Exact,
                )]
            }
            Step::Paged(cql, page_size, check) => {
                let statement = Statement::new(*cql).with_page_size(*page_size);
                vec![outcome::from_pager(session.query_iter(statement, ()).await, *check).await]
            }
        }
    }
}
