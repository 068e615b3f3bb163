//! The `writer_totals` families' side of `countersink outcomes`: their spill and replay
//! files (`totals.spill.jsonl`, `totals.replay.*.jsonl`, source `spill`) and the totals
//! writes of an unfinished flush in the journal (source `journal`), `spilled`: a
//! running total that did not apply is written again later, idempotently; and the
//! `rejected` rows of its refused writes that `rejected.jsonl` may not hold yet. A
//! record's deltas are the parts of its totals not known applied (`unconfirmed`), what
//! the accounting still owes the store.

use std::path::{Path, PathBuf};

use crate::state::jsonl::LineReader;
use crate::state::{FlushGroup, RecordOutcome, WriteRecord};
use crate::totals::records::{self, Recorder, TotalRecord};
use crate::totals::recovery::unsettled_records;
use crate::totals::spill::SpillFiles;

use super::{FileReport, ScanError, io_error, read_lines};

/// The totals files of `dir` to read: the spill, then the replay files, oldest first.
pub(super) fn files(dir: &Path) -> Result<Vec<PathBuf>, ScanError> {
    let spill = SpillFiles::new(dir);
    let mut paths = vec![spill.spill_path()];
    paths.extend(spill.replay_files().map_err(io_error(dir))?);
    Ok(paths)
}

/// Reads the totals records of one file into `file`'s counts.
pub(super) fn read_records(
    reader: LineReader,
    path: &Path,
    file: &mut FileReport,
    each: impl FnMut(&WriteRecord),
) -> Result<(), ScanError> {
    read_lines(
        reader,
        path,
        file,
        false,
        |record: TotalRecord, each| each(&as_write_record(&record)),
        each,
    )
}

/// The records crash recovery would write to the replay file of `group`'s totals writes
/// (none once it did: that file is read with the others).
pub(super) fn journal_records(
    dir: &Path,
    group: &FlushGroup,
) -> Result<Vec<WriteRecord>, ScanError> {
    let spill = SpillFiles::new(dir);
    if group.totals.is_empty()
        || spill
            .recovered_path(group.flush.incarnation, group.flush.flush_seq)
            .exists()
    {
        return Ok(Vec::new());
    }
    let records = unsettled_records(&spill, group, &group.time).map_err(io_error(dir))?;
    Ok(records.iter().map(as_write_record).collect())
}

/// The `rejected.jsonl` records crash recovery writes for `group`'s refused totals
/// writes (those the log already holds are told apart by the caller).
pub(super) fn rejected_records(group: &FlushGroup) -> Vec<WriteRecord> {
    crate::totals::recovery::rejected_records(group, &group.time)
}

/// A totals record in the form the command sums and lists: its writer column
/// (`writer/incarnation/nonce`) gives the writer and incarnation, the request id is the
/// column itself.
fn as_write_record(record: &TotalRecord) -> WriteRecord {
    let mut column = record.writer.split('/');
    let by = Recorder {
        writer: column.next().unwrap_or_default(),
        incarnation: column.next().and_then(|s| s.parse().ok()).unwrap_or(0),
        flush_seq: 0,
        request_id: format!("{}/totals", record.writer),
        row: 0,
        time: &record.time,
    };
    records::as_write_record(record, &by, RecordOutcome::Spilled, record.error.clone())
}
