//! Finishing a wrapper flush the previous process did not end, exactly as the sidecar's
//! recovery does ([`crate::state::recovery`]): each request of a committed journal group
//! gets one home, decided from what is durable.
//!
//! | what the journal says | where its rows go |
//! |---|---|
//! | `applied` (or `dropped`) | nowhere |
//! | definitely not applied, or not started (an outcome saying so, or none at or past the group's last start bound), in the journal's last group | the spill, replayed by this start |
//! | `rejected` | `rejected.jsonl` |
//! | `unknown`, no outcome (in flight), or not applied in a group that is not the last | `unknown.jsonl` (`in_flight_at_crash` when no outcome or not the last), never re-sent |
//!
//! The table is the sidecar's recovery classifier, [`crate::state::recovery::home_of`],
//! called here; the records are the sidecar's too (of an application table).
//!
//! Only the last group's not-applied rows are known to be nowhere else. A later group
//! means the process flushed again after that group settled: its re-queued rows were in
//! the buffer that later flush drained, so they may have been sent (and applied) by it;
//! spilling them would replay them a second time. As in the sidecar's recovery, they are
//! unknown instead. (Two unended groups remain when a flush's end could not be written.)
//!
//! A row already in its log from the offsets the flush recorded (`WrapperLogsAt`; when it
//! recorded none, its requests' records in the whole current files), or in a spill segment of its
//! flush (its
//! own, the one recovery writes, or the one an earlier version's spill file was moved
//! into), is not written twice, so recovery can be killed and run again. A group whose commit did not complete sent nothing: its rows were
//! only in memory (counted as lost with it).

use std::collections::HashMap;
use std::time::SystemTime;

use scylla::cluster::ClusterState;
use scylla::cluster::metadata::{ColumnType, NativeType};

use crate::state::journal::{WrapperGroup, WrapperTable};
use crate::state::wrapper_files;
use crate::state::{FlushGroup, OutcomeLog, RecordOutcome, SegmentId, StateDir, WriteRecord};
use crate::test_hooks::crash_point;

use super::recognize::TableShape;
use super::records::{literal, spill_full};

/// What recovery did for the previous process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WrapperRecovery {
    /// Flushes found committed and not ended, and finished.
    pub flushes: u64,
    /// Rows logged to `unknown.jsonl` (in flight at the crash, or unknown and not logged
    /// yet).
    pub unknown_rows: u64,
    /// Rows logged to `rejected.jsonl` (refused, or not applied and past the spill's
    /// size limit).
    pub rejected_rows: u64,
    /// Rows definitely not applied, spilled for replay.
    pub spilled_rows: u64,
    /// Rows of a group commit that did not complete: never sent, lost with memory.
    pub uncommitted_rows: u64,
}

pub use crate::state::wrapper_files::request_id;

/// Finishes every unended wrapper group of the journal (`groups`, oldest first;
/// `last_in_journal`: whether the last of them is the journal's last group), then ends
/// the journal once. Ending it starts it over: ended after the first of two open groups
/// (a flush whose end could not be written, then the next flush's group), it would lose
/// the second to a kill or an error before that one is finished. Each step before is
/// safe to run again.
pub fn recover(
    state: &mut StateDir,
    cluster: &ClusterState,
    groups: Vec<FlushGroup>,
    last_in_journal: bool,
) -> std::io::Result<WrapperRecovery> {
    let mut report = WrapperRecovery::default();
    let last = groups.len().saturating_sub(1);
    for (index, group) in groups.iter().enumerate() {
        let Some(wrapper) = group.wrapper.as_ref() else {
            continue;
        };
        if !group.committed {
            report.uncommitted_rows += wrapper
                .intents
                .iter()
                .map(|i| i.rows.len() as u64)
                .sum::<u64>();
        } else {
            report.flushes += 1;
            let is_last = index == last && last_in_journal;
            finish(state, cluster, group, wrapper, is_last, &mut report)?;
        }
        crash_point("wrapper_recovery_logged");
    }
    if let Some(group) = groups.last() {
        // The cursors the groups consumed were made durable when the spill opened.
        state.journal_end(&group.flush, None)?;
    }
    Ok(report)
}

fn finish(
    state: &mut StateDir,
    cluster: &ClusterState,
    group: &FlushGroup,
    wrapper: &WrapperGroup,
    is_last: bool,
    report: &mut WrapperRecovery,
) -> std::io::Result<()> {
    let flush = &group.flush;
    let recovered = SegmentId::recovered(flush.incarnation, flush.flush_seq);
    let mut spilled_already = state.spill_keys(recovered)?;
    // An earlier version's flush appended to its spill file, moved into a segment of its own.
    let migrated = SegmentId::migration_in(state.dir(), false)?;
    for id in std::iter::once(SegmentId::live(flush.incarnation, flush.flush_seq)).chain(migrated) {
        spilled_already.extend(state.spill_keys(id)?);
    }
    // What the flush already logged: from the logs' sizes it recorded before it first
    // appended; without them (a kill before it appended, or a journal that refused the
    // record while the appends went on), its requests' records anywhere in the current
    // files (recovery never rotates them). Nothing is recorded for a recovery run
    // again: sizes taken now would hide the flush's own records before them.
    let logged = |log: OutcomeLog, at: Option<u64>| match at {
        Some(at) => state.log_keys_from(log, at),
        None => state.log_keys_of_requests(
            log,
            &wrapper_files::request_prefix(&flush.writer, flush.incarnation, flush.flush_seq),
        ),
    };
    let mut present = [
        logged(OutcomeLog::Unknown, wrapper.logs_at.map(|at| at[0]))?,
        logged(OutcomeLog::Rejected, wrapper.logs_at.map(|at| at[1]))?,
        spilled_already,
    ];
    // A flush an earlier version left unended recorded its records in the wrapper's own
    // logs of that version: found there, they are not recorded again.
    for (stem, into) in wrapper_files::LEGACY_LOG_STEMS.iter().zip([0, 1, 1]) {
        let path = state.dir().join(format!("{stem}.jsonl"));
        present[into].extend(crate::state::jsonl::keys_in(&path, 0)?);
    }
    let time = crate::bucket::rfc3339(SystemTime::now());
    let (mut unknown, mut rejected, mut spilled) = (Vec::new(), Vec::new(), Vec::new());
    for record in group_records(group, wrapper, is_last, Some(cluster), &time) {
        let key = (record.request_id.clone(), record.row);
        // A row a spill segment of its flush holds is owned by it, whatever else is
        // known (as in the sidecar's recovery): logged too, it would have two homes.
        if present[2].contains(&key) {
            continue;
        }
        let (into, seen) = match record.outcome {
            RecordOutcome::Unknown => (&mut unknown, &present[0]),
            RecordOutcome::Rejected => (&mut rejected, &present[1]),
            RecordOutcome::Spilled => (&mut spilled, &present[2]),
        };
        if !seen.contains(&key) {
            into.push(record);
        }
    }
    crash_point("wrapper_recovery_before_logs");
    report.spilled_rows += spilled.len() as u64;
    if !spilled.is_empty() {
        let batches: Vec<Vec<WriteRecord>> = spilled.into_iter().map(|r| vec![r]).collect();
        // A recovered segment is written whole: a row not in it was past the size limit
        // (a recovery killed before its logs), and writing the segment again would
        // replace the rows it holds.
        let kept = if state.has_spill_segment(recovered) {
            vec![false; batches.len()]
        } else {
            state.spill_recovered(flush, group.consumes, &batches)?
        };
        for (batch, kept) in batches.into_iter().zip(kept) {
            if kept {
                continue;
            }
            report.spilled_rows -= batch.len() as u64;
            for mut record in batch {
                record.outcome = RecordOutcome::Rejected;
                record.error = Some(spill_full(record.error.as_ref()));
                rejected.push(record);
            }
        }
    }
    report.unknown_rows += unknown.len() as u64;
    report.rejected_rows += rejected.len() as u64;
    for (log, records) in [
        (OutcomeLog::Unknown, &unknown),
        (OutcomeLog::Rejected, &rejected),
    ] {
        if records.is_empty() {
            continue;
        }
        if let Some((_, error)) = state.append_recorded(log, records).failed {
            return Err(error);
        }
    }
    Ok(())
}

/// The records recovery writes for an unended, committed wrapper flush (see
/// [`crate::state::wrapper_files::group_records`]), key values printed with the key types
/// `cluster`'s metadata has now (hex without it).
pub fn group_records(
    group: &FlushGroup,
    wrapper: &WrapperGroup,
    is_last: bool,
    cluster: Option<&ClusterState>,
    time: &str,
) -> Vec<WriteRecord> {
    let types: HashMap<u32, Vec<ColumnType<'static>>> = wrapper
        .tables
        .iter()
        .map(|table| (table.id, shape_of(table, cluster).key_types))
        .collect();
    let literal = |table: &WrapperTable, column: usize, bytes: &[u8]| match types
        .get(&table.id)
        .and_then(|t| t.get(column))
    {
        Some(typ) => literal(typ, bytes),
        None => literal(&ColumnType::Native(NativeType::Blob), bytes),
    };
    wrapper_files::group_records(group, wrapper, is_last, time, &literal)
}

/// A shape to print the group's rows with: its names, and the key types the driver's
/// metadata has for them now (blob, printed as hex, where it has none).
fn shape_of(table: &WrapperTable, cluster: Option<&ClusterState>) -> TableShape {
    let schema = cluster
        .and_then(|c| c.get_keyspace(&table.keyspace))
        .and_then(|k| k.tables.get(&table.name));
    let key_types = table
        .key_columns
        .iter()
        .map(|c| {
            schema
                .and_then(|s| s.columns.get(c))
                .map_or(ColumnType::Native(NativeType::Blob), |c| c.typ.clone())
        })
        .collect();
    TableShape {
        id: table.id,
        keyspace: table.keyspace.clone(),
        name: table.name.clone(),
        partition_key: table.key_columns.clone(),
        clustering_key: Vec::new(),
        key_types,
        counters: table.counters.clone(),
    }
}
