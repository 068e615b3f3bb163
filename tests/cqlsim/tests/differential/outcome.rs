//! What one statement produced, in a form two stores can be compared on: result metadata and
//! rows, prepared-statement metadata, or the error code and message a client shows.

use std::fmt;

use scylla::errors::{ExecutionError, PagerExecutionError, PrepareError, RequestAttemptError};
use scylla::frame::response::result::ColumnSpec;
use scylla::response::query_result::QueryResult;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::Row;

/// How much of a successful result must agree.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Check {
    /// Column metadata and every value.
    Exact,
    /// Column metadata and the number of rows, not the values (host ids, tokens, versions).
    Shape,
    /// Column metadata, the number of rows, and the values of these columns only.
    Columns(&'static [&'static str]),
}

/// One observable result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A result without rows: void, schema change, set keyspace.
    Done,
    /// Rows: one `keyspace.table.name type` string per column, then the rows (values shown
    /// as the driver decoded them, or `?` where the check leaves them out).
    Rows {
        columns: Vec<String>,
        rows: Vec<Vec<String>>,
    },
    /// PREPARE's answer: the bound variables and the partition-key indexes drivers route by,
    /// and the result columns.
    Prepared {
        variables: Vec<String>,
        pk_indexes: Vec<String>,
        result_columns: Vec<String>,
    },
    /// A server error (code with its fields, as the driver decodes it, and the message) or
    /// a driver-side error (code `driver`).
    Error { code: String, message: String },
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Done => write!(f, "done"),
            Outcome::Rows { columns, rows } => {
                write!(f, "rows [{}]", columns.join(", "))?;
                for row in rows {
                    write!(f, "\n        ({})", row.join(", "))?;
                }
                Ok(())
            }
            Outcome::Prepared {
                variables,
                pk_indexes,
                result_columns,
            } => write!(
                f,
                "prepared variables [{}] pk [{}] result [{}]",
                variables.join(", "),
                pk_indexes.join(", "),
                result_columns.join(", ")
            ),
            Outcome::Error { code, message } => write!(f, "error {code}: {message}"),
        }
    }
}

fn column(spec: &ColumnSpec<'_>) -> String {
    let table = spec.table_spec();
    format!(
        "{}.{}.{} {:?}",
        table.ks_name(),
        table.table_name(),
        spec.name(),
        spec.typ()
    )
}

/// A column as the comparison sees it: its name (for [`Check::Columns`]) and its full spec.
fn described(spec: &ColumnSpec<'_>) -> (String, String) {
    (spec.name().to_owned(), column(spec))
}

fn rows_outcome(specs: Vec<(String, String)>, rows: Vec<Row>, check: Check) -> Outcome {
    let shown = |name: &str| match check {
        Check::Exact => true,
        Check::Shape => false,
        Check::Columns(names) => names.contains(&name),
    };
    let rows = rows
        .into_iter()
        .map(|row| {
            row.columns
                .into_iter()
                .zip(&specs)
                .map(|(value, (name, _))| {
                    if shown(name) {
                        format!("{value:?}")
                    } else {
                        "?".to_owned()
                    }
                })
                .collect()
        })
        .collect();
    Outcome::Rows {
        columns: specs.into_iter().map(|(_, spec)| spec).collect(),
        rows,
    }
}

/// The outcome of an executed statement.
pub(crate) fn from_result(result: Result<QueryResult, ExecutionError>, check: Check) -> Outcome {
    let result = match result {
        Ok(result) => result,
        Err(e) => return from_execution_error(&e),
    };
    let Ok(rows) = result.into_rows_result() else {
        return Outcome::Done;
    };
    match rows.rows::<Row>() {
        Ok(iter) => match iter.collect::<Result<Vec<Row>, _>>() {
            Ok(all) => rows_outcome(
                rows.column_specs().iter().map(described).collect(),
                all,
                check,
            ),
            Err(e) => driver_error(&e),
        },
        Err(e) => driver_error(&e),
    }
}

/// The outcome of a paged read: every page fetched, rows concatenated.
pub(crate) async fn from_pager(
    pager: Result<scylla::client::pager::QueryPager, PagerExecutionError>,
    check: Check,
) -> Outcome {
    use futures::TryStreamExt;
    let pager = match pager {
        Ok(pager) => pager,
        Err(e) => return driver_error(&e),
    };
    let stream = match pager.rows_stream::<Row>() {
        Ok(stream) => stream,
        Err(e) => return driver_error(&e),
    };
    let specs = stream.column_specs().iter().map(described).collect();
    match stream.try_collect::<Vec<Row>>().await {
        Ok(rows) => rows_outcome(specs, rows, check),
        Err(e) => driver_error(&e),
    }
}

/// The outcome of PREPARE.
pub(crate) fn from_prepare(prepared: &Result<PreparedStatement, PrepareError>) -> Outcome {
    match prepared {
        Ok(p) => Outcome::Prepared {
            variables: p.get_variable_col_specs().iter().map(column).collect(),
            pk_indexes: p
                .get_variable_pk_indexes()
                .iter()
                .map(|pk| format!("{}@{}", pk.index, pk.sequence))
                .collect(),
            result_columns: p
                .get_current_result_set_col_specs()
                .get()
                .iter()
                .map(column)
                .collect(),
        },
        Err(PrepareError::AllAttemptsFailed { first_attempt }) => from_attempt_error(first_attempt),
        Err(e) => driver_error(e),
    }
}

pub(crate) fn from_execution_error(e: &ExecutionError) -> Outcome {
    match e {
        ExecutionError::LastAttemptError(attempt) => from_attempt_error(attempt),
        ExecutionError::PrepareError(PrepareError::AllAttemptsFailed { first_attempt }) => {
            from_attempt_error(first_attempt)
        }
        other => driver_error(other),
    }
}

fn from_attempt_error(e: &RequestAttemptError) -> Outcome {
    match e {
        RequestAttemptError::DbError(db, message) => Outcome::Error {
            code: format!("{db:?}"),
            message: message.clone(),
        },
        other => driver_error(other),
    }
}

fn driver_error(e: &dyn fmt::Display) -> Outcome {
    Outcome::Error {
        code: "driver".to_owned(),
        message: e.to_string(),
    }
}
