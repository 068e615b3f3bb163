//! The `writer_totals` families' side of `countersink outcomes`: their rows in the spill
//! segments are read with every other kind of write's (records with a
//! [`crate::state::TotalOf`], source `spill`); here are the spill files of earlier
//! versions (`totals.spill.jsonl`, `totals.replay.*.jsonl`, source `spill`) a start has
//! not moved into a segment yet, and the totals writes of an unfinished flush in the
//! journal (source `journal`), `spilled`: a running total that did not apply is written
//! again later, idempotently; and the `rejected` rows of its refused writes that
//! `rejected.jsonl` may not hold yet. A record's deltas are the parts of its totals not
//! known applied, what the accounting still owes the store.

use std::path::{Path, PathBuf};

use crate::state::jsonl::LineReader;
use crate::state::totals_files::{self, LegacyTotalRecord};
use crate::state::{FlushGroup, SegmentId, WriteRecord};
use crate::totals::recovery::{readable_intents, unsettled_records};

use super::{FileReport, ScanError, io_error, read_lines};

/// The totals files of an earlier version in `dir`, to read: none once their segment
/// is written (a start killed half-way left both; the next only removes the files, and
/// their rows are read from the segment).
pub(super) fn files(dir: &Path) -> Result<Vec<PathBuf>, ScanError> {
    if totals_files::migrated(dir)
        .map_err(io_error(dir))?
        .is_some()
    {
        return Ok(Vec::new());
    }
    totals_files::legacy_files(dir).map_err(io_error(dir))
}

/// Reads the records of one such file into `file`'s counts, as a start moves them.
pub(super) fn read_records<F: FnMut(&WriteRecord)>(
    reader: LineReader,
    path: &Path,
    file: &mut FileReport,
    each: F,
) -> Result<(), ScanError> {
    let mut row = 0_u16;
    read_lines(
        reader,
        path,
        file,
        false,
        |record: LegacyTotalRecord, each: &mut F| {
            each(&record.into_record(row));
            row = row.saturating_add(1);
        },
        each,
    )
}

/// The records crash recovery would spill for `group`'s totals writes (none once it
/// did: that segment is read with the others). Rows the flush's own totals segment
/// holds are told apart by the caller, by request id and row.
pub(super) fn journal_records(dir: &Path, group: &FlushGroup) -> Vec<WriteRecord> {
    let recovered = SegmentId::totals(group.flush.incarnation, group.flush.flush_seq, true);
    if group.kind_intents.is_empty() || dir.join(recovered.file_name()).exists() {
        return Vec::new();
    }
    unsettled_records(group, &readable_intents(group), &group.time)
}

/// The `rejected.jsonl` records crash recovery writes for `group`'s refused totals
/// writes (those the log already holds are told apart by the caller).
pub(super) fn rejected_records(group: &FlushGroup) -> Vec<WriteRecord> {
    crate::totals::recovery::rejected_records(group, &readable_intents(group), &group.time)
}
