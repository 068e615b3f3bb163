//! The statement the wrapper flushes a table's rows with, and its values.
//!
//! This is CQL built at run time from the application's own keyspace, table and column
//! names, the only CQL of the product that does not live in `cql/`: its table and
//! columns are whatever the application's prepared UPDATE named, so there is no fixed
//! text to keep there. Its form is the one every family table's UPDATE has
//! (`cql/family.cql`): every counter column of the table incremented by a bound value,
//! every primary-key column bound by `=`; a row without a delta for a column binds it
//! unset, which leaves the cell untouched.

use scylla::errors::SerializationError;
use scylla::serialize::row::{RowSerializationContext, SerializeRow};
use scylla::serialize::writers::RowWriter;

use super::recognize::TableShape;

/// `"name"`, with any `"` doubled: every name is quoted, so case and reserved words are
/// kept exactly as the schema has them.
fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The UPDATE of every counter column of `table`, keyed by its full primary key.
pub fn update_text(table: &TableShape) -> String {
    let set: Vec<String> = table
        .counters
        .iter()
        .map(|c| format!("{q} = {q} + ?", q = quote(c)))
        .collect();
    let key: Vec<String> = table
        .key_columns()
        .map(|c| format!("{} = ?", quote(c)))
        .collect();
    format!(
        "UPDATE {}.{} SET {} WHERE {}",
        quote(&table.keyspace),
        quote(&table.name),
        set.join(", "),
        key.join(" AND ")
    )
}

/// The values of one flushed row, in [`update_text`]'s marker order: the deltas (unset
/// where 0), then the key values exactly as the application's driver serialized them.
#[derive(Debug)]
pub struct RowValues<'a> {
    /// The deltas, by counter column.
    pub deltas: &'a [i64],
    /// The key values' bytes, by key column.
    pub key: Vec<&'a [u8]>,
}

impl SerializeRow for RowValues<'_> {
    fn serialize(
        &self,
        ctx: &RowSerializationContext<'_>,
        writer: &mut RowWriter,
    ) -> Result<(), SerializationError> {
        let expected = self.deltas.len() + self.key.len();
        if ctx.columns().len() != expected {
            return Err(SerializationError::new(ColumnCountMismatch {
                statement: ctx.columns().len(),
                row: expected,
            }));
        }
        for delta in self.deltas {
            let cell = writer.make_cell_writer();
            if *delta == 0 {
                cell.set_unset();
            } else {
                cell.set_value(&delta.to_be_bytes())
                    .map_err(SerializationError::new)?;
            }
        }
        for value in &self.key {
            writer
                .make_cell_writer()
                .set_value(value)
                .map_err(SerializationError::new)?;
        }
        Ok(())
    }

    fn is_empty(&self) -> bool {
        self.deltas.is_empty() && self.key.is_empty()
    }
}

/// The flushed statement has a different number of markers than a row has values (its
/// table's schema changed between prepare and flush).
#[derive(Debug, thiserror::Error)]
#[error("the statement has {statement} bind markers, the row {row} values")]
struct ColumnCountMismatch {
    statement: usize,
    row: usize,
}

pub use crate::state::wrapper_files::{push_key_value, split_key};

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> TableShape {
        TableShape {
            id: 3,
            keyspace: "Ks".into(),
            name: "views".into(),
            partition_key: vec!["page_id".into(), "day".into()],
            clustering_key: vec!["minute".into()],
            key_types: Vec::new(),
            counters: vec!["a\"b".into(), "views".into()],
        }
    }

    #[test]
    fn the_update_names_every_counter_and_every_key_column_quoted() {
        assert_eq!(
            update_text(&shape()),
            "UPDATE \"Ks\".\"views\" SET \"a\"\"b\" = \"a\"\"b\" + ?, \"views\" = \"views\" + ? \
             WHERE \"page_id\" = ? AND \"day\" = ? AND \"minute\" = ?"
        );
    }

    #[test]
    fn a_row_key_splits_back_into_its_table_and_values() {
        let mut key = 7_u32.to_le_bytes().to_vec();
        push_key_value(&mut key, b"home");
        push_key_value(&mut key, b"");
        push_key_value(&mut key, &[0, 0, 0, 5]);
        let (id, values) = split_key(&key).unwrap();
        assert_eq!(id, 7);
        assert_eq!(values, [b"home".as_slice(), b"", &[0, 0, 0, 5]]);
        assert_eq!(split_key(&key[..key.len() - 1]), None);
    }
}
