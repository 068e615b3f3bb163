//! Response encoding (S §4.2): ERROR with its per-code bodies, READY, SUPPORTED, RESULT of
//! every kind, and SCHEMA_CHANGE events. Never sets the v5 metadata-id flag (0x0008).

use super::frame::{opcode, write_frame};
use super::wire::*;
use crate::error::CqlError;
use crate::exec::prepare::PreparedMeta;
use crate::exec::{ColSpec, Outcome, ResultRows, SchemaChange};

pub(crate) fn ready(out: &mut Vec<u8>, version: u8, stream: i16) {
    write_frame(out, version, stream, opcode::READY, |_| {});
}

/// SUPPORTED with the options of the persona (see [`crate::persona`]).
pub(crate) fn supported(
    out: &mut Vec<u8>,
    version: u8,
    stream: i16,
    persona: crate::persona::Persona,
) {
    write_frame(out, version, stream, opcode::SUPPORTED, |b| {
        put_string_multimap(b, persona.supported())
    });
}

pub(crate) fn error(out: &mut Vec<u8>, version: u8, stream: i16, e: &CqlError) {
    write_frame(out, version, stream, opcode::ERROR, |b| {
        put_i32(b, e.code());
        put_string(b, &e.to_string());
        match e {
            CqlError::Unavailable {
                consistency,
                required,
                alive,
            } => {
                put_u16(b, consistency.0);
                put_i32(b, *required);
                put_i32(b, *alive);
            }
            CqlError::WriteTimeout {
                consistency,
                received,
                block_for,
                write_type,
            } => {
                put_u16(b, consistency.0);
                put_i32(b, *received);
                put_i32(b, *block_for);
                put_string(b, write_type.as_str());
            }
            CqlError::WriteFailure {
                consistency,
                received,
                block_for,
                num_failures,
                write_type,
            } => {
                put_u16(b, consistency.0);
                put_i32(b, *received);
                put_i32(b, *block_for);
                put_i32(b, *num_failures);
                put_string(b, write_type.as_str());
            }
            CqlError::ReadTimeout {
                consistency,
                received,
                block_for,
                data_present,
            } => {
                put_u16(b, consistency.0);
                put_i32(b, *received);
                put_i32(b, *block_for);
                put_u8(b, u8::from(*data_present));
            }
            CqlError::AlreadyExists {
                keyspace, table, ..
            } => {
                put_string(b, keyspace);
                put_string(b, table);
            }
            CqlError::Unprepared(id) => put_short_bytes(b, id),
            _ => {}
        }
    });
}

/// RESULT for an executed statement. `skip_metadata` honours the request flag for Rows.
pub(crate) fn result(
    out: &mut Vec<u8>,
    version: u8,
    stream: i16,
    outcome: &Outcome,
    skip_metadata: bool,
) {
    write_frame(out, version, stream, opcode::RESULT, |b| match outcome {
        Outcome::Void => put_i32(b, 0x0001),
        Outcome::Rows(rows) => {
            put_i32(b, 0x0002);
            rows_body(b, rows, skip_metadata);
        }
        Outcome::SetKeyspace(ks) => {
            put_i32(b, 0x0003);
            put_string(b, ks);
        }
        Outcome::SchemaChange(sc) => {
            put_i32(b, 0x0005);
            schema_change_body(b, sc);
        }
    });
}

pub(crate) fn prepared(
    out: &mut Vec<u8>,
    version: u8,
    stream: i16,
    id: &[u8],
    meta: &PreparedMeta,
) {
    write_frame(out, version, stream, opcode::RESULT, |b| {
        put_i32(b, 0x0004);
        put_short_bytes(b, id);
        let global = global_spec(&meta.vars);
        put_i32(b, if global.is_some() { 0x0001 } else { 0 });
        put_i32(b, len(meta.vars.len()));
        put_i32(b, len(meta.pk_indexes.len()));
        for i in &meta.pk_indexes {
            put_u16(b, *i);
        }
        col_specs(b, &meta.vars, global);
        match &meta.result {
            None => {
                put_i32(b, 0x0004);
                put_i32(b, 0);
            }
            Some(cols) => {
                let global = global_spec(cols);
                put_i32(b, if global.is_some() { 0x0001 } else { 0 });
                put_i32(b, len(cols.len()));
                col_specs(b, cols, global);
            }
        }
    });
}

/// SCHEMA_CHANGE event on stream -1, for connections that REGISTERed.
pub(crate) fn schema_event(out: &mut Vec<u8>, version: u8, sc: &SchemaChange) {
    write_frame(out, version, -1, opcode::EVENT, |b| {
        put_string(b, "SCHEMA_CHANGE");
        schema_change_body(b, sc);
    });
}

fn schema_change_body(b: &mut Vec<u8>, sc: &SchemaChange) {
    put_string(b, sc.change);
    match &sc.table {
        None => {
            put_string(b, "KEYSPACE");
            put_string(b, &sc.keyspace);
        }
        Some(t) => {
            put_string(b, "TABLE");
            put_string(b, &sc.keyspace);
            put_string(b, t);
        }
    }
}

fn len(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn global_spec(cols: &[ColSpec]) -> Option<(&str, &str)> {
    let first = cols.first()?;
    cols.iter()
        .all(|c| c.keyspace == first.keyspace && c.table == first.table)
        .then_some((first.keyspace.as_str(), first.table.as_str()))
}

fn col_specs(b: &mut Vec<u8>, cols: &[ColSpec], global: Option<(&str, &str)>) {
    if let Some((ks, t)) = global {
        put_string(b, ks);
        put_string(b, t);
    }
    for c in cols {
        if global.is_none() {
            put_string(b, &c.keyspace);
            put_string(b, &c.table);
        }
        put_string(b, &c.name);
        c.ty.write_option(b);
    }
}

fn rows_body(b: &mut Vec<u8>, rows: &ResultRows, skip_metadata: bool) {
    let global = global_spec(&rows.cols);
    let mut flags = 0;
    if skip_metadata {
        flags |= 0x0004;
    } else if global.is_some() {
        flags |= 0x0001;
    }
    if rows.paging_state.is_some() {
        flags |= 0x0002;
    }
    put_i32(b, flags);
    put_i32(b, len(rows.cols.len()));
    if let Some(ps) = &rows.paging_state {
        put_bytes(b, Some(ps));
    }
    if !skip_metadata {
        col_specs(b, &rows.cols, global);
    }
    put_i32(b, len(rows.rows.len()));
    for row in &rows.rows {
        for cell in row {
            match cell {
                None => put_i32(b, -1),
                Some(v) => {
                    let at = b.len();
                    put_i32(b, 0);
                    v.encode(b);
                    let n = len(b.len() - at - 4).to_be_bytes();
                    b[at..at + 4].copy_from_slice(&n);
                }
            }
        }
    }
}
