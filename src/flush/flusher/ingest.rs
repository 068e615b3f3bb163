//! Durable requests' increments, from the ingest log into the spill (see
//! [`crate::state::ingest_log`]): each flush round seals the log's active file under a
//! sequence number of its own and sums every sealed file into a spill segment, which
//! the replay then sends like any spilled row.
//!
//! A sealed file is removed only once its segment is on disk; a start that finds both
//! removes the file. A file whose segment does not fit in `state.max_spill_bytes` stays,
//! still counted against `state.max_ingest_log_bytes`, so that new durable requests are
//! refused (429) rather than anything answered being dropped.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::io;
use std::sync::Arc;
use std::time::SystemTime;

use crate::aggregate::{Columns, Row, RowKey, Slot};
use crate::bucket::{self, Minute};
use crate::config::Config;
use crate::engine::Engine;
use crate::sink::Sink;
use crate::state::ingest_log::{self, IngestEntry, IngestLog, Retention, Sealed};
use crate::state::{FlushId, RecordSource, SegmentId, StateError, WriteRecord};
use crate::test_hooks::crash_point;
use crate::vocabulary::{DropReason, FamilyId, Granularity};

use super::Flusher;
use crate::flush::record_conversion::held_records;

/// When a sealed file is moved.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum When {
    /// At start, before the spill is scanned for what the exact families owe (the scan
    /// counts the new segments).
    Opening,
    /// During a flush round.
    Running,
}

impl<S: Sink> Flusher<S> {
    /// Opens the ingest log when a listener is durable (`ingest.http.durable`,
    /// `ingest.otlp.durable`), or when
    /// the state directory holds one a previous run left (durable since turned off: its
    /// increments still go to the spill), and moves what it left into the spill.
    pub(super) fn open_ingest_log(&mut self, config: &Config) -> Result<(), StateError> {
        let http = &config.ingest.http;
        let dir = self.state.dir().to_owned();
        let left = ingest_log::present(&dir).map_err(|error| StateError::Io {
            dir: dir.clone(),
            step: "looking for the ingest log",
            error,
        })?;
        if !config.ingest.durable() && !left {
            return Ok(());
        }
        let retention = Retention {
            window_secs: i64::try_from(http.idempotency_window.as_secs()).unwrap_or(i64::MAX),
            max_keys: http.max_idempotency_keys,
            max_streams: config.ingest.otlp.max_streams,
        };
        let log = IngestLog::open(
            &dir,
            config.state.max_ingest_log_bytes,
            self.state.incarnation(),
            retention,
        )
        .map_err(|error| StateError::Io {
            dir: dir.clone(),
            step: "opening the ingest log",
            error,
        })?;
        let log = Arc::new(log);
        self.segments_from_sealed(&log, When::Opening);
        self.ledger.set_ingest_log(Arc::clone(&log));
        self.ingest_log = Some(log);
        Ok(())
    }

    /// Seals the active file, if anything was logged since the last seal, and moves every
    /// sealed file into its segment.
    pub(super) fn take_ingest_log(&mut self) {
        let Some(log) = self.ingest_log.clone() else {
            return;
        };
        self.seq += 1;
        match log.seal(self.state.incarnation(), self.seq) {
            Ok(_) => crash_point("ingest_sealed"),
            Err(error) => {
                tracing::error!(%error, "Could not seal the ingest log; its increments stay in it for the next flush.");
            }
        }
        self.segments_from_sealed(&log, When::Running);
    }

    /// Moves every sealed file of `log` into its segment, oldest first; stops at the
    /// first that cannot be moved (it and the later ones wait for the next flush).
    pub(super) fn segments_from_sealed(&mut self, log: &Arc<IngestLog>, when: When) {
        let sealed = match log.sealed() {
            Ok(sealed) => sealed,
            Err(error) => {
                tracing::error!(%error, "Could not list the ingest log's sealed files.");
                return;
            }
        };
        self.finish_removals(log, &sealed);
        for mut file in sealed {
            let mut id = SegmentId::live(file.incarnation, file.seq);
            let written =
                self.ingest_unremoved.contains(&file.path) || self.state.has_spill_segment(id);
            // The file is read one append at a time: its increments summed per row as they
            // come (only when its segment is still to be written), its keys kept within
            // twice their bound and its streams' latest points. Memory grows with the
            // file's distinct rows and streams, not its lines.
            let mut sums = RowSums::default();
            let (mut keys, mut streams) = (Vec::new(), HashMap::new());
            let engine = &self.engine;
            let read = ingest_log::read_sealed(&file.path, |append| {
                keys.append(&mut append.keys);
                log.bound_keys(&mut keys);
                for line in append.streams.drain(..) {
                    ingest_log::streams::keep_latest(&mut streams, line);
                }
                if !written {
                    for entry in append.entries.drain(..) {
                        sums.add(engine, &entry);
                    }
                }
            });
            let unread = match read {
                Ok(unread) => unread,
                Err(error) => {
                    tracing::error!(%error, file = %file.path.display(), "Could not read a sealed file of the ingest log; it waits for the next flush.");
                    break;
                }
            };
            if !written {
                if self
                    .state
                    .replay_loaded()
                    .is_some_and(|cursor| id <= cursor.segment)
                {
                    // The replay passed where its segment would sort (a later flush's spill
                    // was read while this file waited for room): there it would count as
                    // consumed. It takes a number after everything instead.
                    self.seq += 1;
                    file = match log.renumber(&file, self.state.incarnation(), self.seq) {
                        Ok(renumbered) => renumbered,
                        Err(error) => {
                            tracing::error!(%error, file = %file.path.display(), "Could not renumber a sealed file of the ingest log; it waits for the next flush.");
                            break;
                        }
                    };
                    id = SegmentId::live(file.incarnation, file.seq);
                }
                match self.segment_of(&file, sums, unread, id, when) {
                    // (At start the same step runs before the listeners: a kill there
                    // is the one this point tests, one flush later.)
                    Ok(true) => {
                        if when == When::Running {
                            crash_point("ingest_segment_written");
                        }
                    }
                    Ok(false) => {
                        let (spill_bytes, max_spill_bytes) = self.state.spill_bytes();
                        tracing::warn!(
                            file = %file.path.display(),
                            spill_bytes,
                            max_spill_bytes,
                            "The spill has no room for a sealed file of the ingest log: it waits (durable requests are refused while the ingest log is full)."
                        );
                        break;
                    }
                    Err(error) => {
                        tracing::error!(%error, file = %file.path.display(), "Could not move a sealed file of the ingest log into the spill; it waits for the next flush.");
                        break;
                    }
                }
            }
            // Until the file is removed, no replay may consume its segment (written now,
            // or found written at start after a kill): the file would then be found
            // without its segment and moved again, its increments sent twice.
            self.ingest_unremoved.insert(file.path.clone());
            // The keys answered with its requests and its streams' last points outlive it
            // (a segment written before a kill may leave them to carry still).
            if let Err(error) = log.carry_keys(&keys) {
                tracing::error!(%error, "Could not keep the idempotency keys of a sealed file of the ingest log; it waits for the next flush.");
                break;
            }
            let mut streams: Vec<_> = streams.into_values().collect();
            streams.sort_by_key(|l| (l.time, l.stream));
            if let Err(error) = log.carry_streams(&streams) {
                tracing::error!(%error, "Could not keep the OTLP stream points of a sealed file of the ingest log; it waits for the next flush.");
                break;
            }
            if let Err(error) = log.remove(&file.path) {
                tracing::error!(%error, file = %file.path.display(), "Could not remove a sealed file of the ingest log whose segment is written; the replay waits until it is removed.");
                break;
            }
            self.ingest_unremoved.remove(&file.path);
        }
        self.ledger.set_spill_bytes(self.state.spill_bytes().0);
    }

    /// Removals left unfinished by an earlier round: the file unlinked, the directory
    /// sync that makes it durable failed (a full or failing disk). No longer listed, such
    /// a file would never be removed again, and the replay would wait for it until a
    /// restart; its removal is completed here, and the replay goes on once it is.
    fn finish_removals(&mut self, log: &IngestLog, listed: &[Sealed]) {
        let gone: Vec<std::path::PathBuf> = self
            .ingest_unremoved
            .iter()
            .filter(|path| !listed.iter().any(|file| file.path == **path))
            .cloned()
            .collect();
        for path in gone {
            match log.remove(&path) {
                Ok(()) => {
                    self.ingest_unremoved.remove(&path);
                }
                Err(error) => {
                    tracing::error!(%error, file = %path.display(), "Could not complete the removal of a sealed file of the ingest log; the replay waits until it is removed.");
                }
            }
        }
    }

    /// Writes a sealed file, summed per row, as segment `id`: whether it fit.
    fn segment_of(
        &mut self,
        file: &Sealed,
        sums: RowSums,
        unread: u64,
        id: SegmentId,
        when: When,
    ) -> io::Result<bool> {
        if unread > 0 {
            tracing::warn!(
                lines = unread,
                file = %file.path.display(),
                "Lines of the ingest log did not read (the torn end of an append cut short by a crash, never answered): skipped."
            );
        }
        let RowSums {
            rows,
            more,
            unplaced,
            unplaced_sum,
        } = sums;
        let flush = FlushId {
            incarnation: file.incarnation,
            ..self.state.flush_id(file.seq)
        };
        let time = bucket::rfc3339(SystemTime::now());
        let mut records: Vec<WriteRecord> = Vec::new();
        // The exact families' rows, for their ledger rows.
        let mut fresh: Vec<(RowKey, Row)> = Vec::new();
        let mut sums = [0_i128; Granularity::COUNT];
        let rows = rows
            .into_iter()
            .map(|((family, minute, series), columns)| (row_key(family, minute, series), columns));
        for (request, (key, columns)) in rows.chain(more).enumerate() {
            let row = Row {
                columns,
                requeued_since: 0,
            };
            let family = &self.families[usize::from(key.family().0)];
            let source = RecordSource {
                flush: &flush,
                request: u32::try_from(request).unwrap_or(u32::MAX),
                time: &time,
            };
            for (table, record) in held_records(&key, &row, family, source) {
                sums[table.index()] += row.columns.sum();
                records.push(record);
            }
            if self.engine.families().get(key.family()).exact {
                fresh.push((key, row));
            }
        }
        // Replayed rows form no ledger rows (see `ledger_gate`): these are formed here,
        // once, and kept in the segment's header, so that the segment and its ledger rows
        // are on disk together or not at all, and are confirmed before any replay.
        let ledger_rows = match &self.ledger_gate {
            Some(gate) if !fresh.is_empty() => gate.form_logged(&flush, fresh),
            _ => Vec::new(),
        };
        if !records.is_empty() && !self.state.spill_ingest(id, &records, &ledger_rows)? {
            return Ok(false);
        }
        if let Some(gate) = &mut self.ledger_gate
            && !ledger_rows.is_empty()
        {
            gate.load_stored(ledger_rows);
        }
        if unplaced > 0 {
            // Logged under a configuration whose families the current one lacks.
            self.engine.aggregator().stripe().record_dropped(
                DropReason::Unconfigured,
                unplaced,
                unplaced_sum,
            );
            tracing::error!(
                increments = unplaced,
                delta_sum = %unplaced_sum,
                "Increments of the ingest log no longer map to a family (the configuration changed since they were answered): dropped (counted in countersink_lines_dropped_total{{reason=\"unconfigured\"}})."
            );
        }
        if file.incarnation == self.state.incarnation() {
            // This process's own segment: its replay moves the rows from `spilled`, so they
            // are accepted (as rows read back from the spill are) and spilled now. A segment
            // of an earlier incarnation is accepted when it is replayed.
            for table in Granularity::ALL {
                let sum = sums[table.index()];
                self.ledger.update(table, |s| {
                    s.replayed += sum;
                    s.spilled += sum;
                });
            }
        }
        if when == When::Running
            && let Some(gate) = &mut self.ledger_gate
        {
            // Owed until replayed: reconcile must not repair these keys meanwhile.
            gate.spilled(self.engine.families(), &records);
        }
        Ok(true)
    }
}

/// A sealed file's increments summed per row, as they are read (see
/// [`ingest_log::read_sealed`]).
#[derive(Default)]
struct RowSums {
    /// Keyed by (family, minute, series): every logged increment owes both tables.
    rows: HashMap<(FamilyId, u32, Box<[u8]>), Columns>,
    /// Rows whose sum would overflow a column: a second row of the same key.
    more: Vec<(RowKey, Columns)>,
    /// Increments no family of the configuration takes, and their sum.
    unplaced: u64,
    unplaced_sum: i128,
}

impl RowSums {
    /// Adds one logged increment to its row.
    fn add(&mut self, engine: &Engine, entry: &IngestEntry) {
        let tags: Vec<(&str, &str)> = entry
            .tags
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let placed = engine.row_of(
            &entry.name,
            tags.as_slice(),
            entry.delta,
            Minute(entry.minute),
        );
        match placed {
            Ok((key, columns)) => {
                match self
                    .rows
                    .entry((key.family(), entry.minute, key.into_series()))
                {
                    Entry::Occupied(mut row) => {
                        if !row.get_mut().checked_add(&columns) {
                            let (family, minute, series) = row.key().clone();
                            self.more.push((row_key(family, minute, series), columns));
                        }
                    }
                    Entry::Vacant(row) => {
                        row.insert(columns);
                    }
                }
            }
            Err(_) => {
                self.unplaced += 1;
                self.unplaced_sum += i128::from(entry.delta);
            }
        }
    }
}

/// The key of a logged increment's row: both tables, in its minute.
fn row_key(family: FamilyId, minute: u32, series: Box<[u8]>) -> RowKey {
    RowKey::new(family, Slot::Both(Minute(minute)), series)
}

#[cfg(test)]
#[path = "ingest_tests.rs"]
mod tests;
