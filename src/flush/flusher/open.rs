//! Opening a flusher: the state directory (finishing what a killed run left), the
//! families as the journal names them, the delta ledger's gate and its stored rows, the
//! ingest log, and the first status.

use std::sync::Arc;

use crate::config::{Config, FlushConfig};
use crate::engine::Engine;
use crate::family::shard_seed;
use crate::sink::Sink;
use crate::stage;
use crate::state::{OutcomeLog, StateDir, StateError, outcomes_mark};
use crate::telemetry::Ledger;
use crate::totals::Totals;
use crate::vocabulary::Granularity;

use super::*;
use crate::flush::ledger_gate::LedgerGate;
use crate::flush::owed::OwedBook;

impl<S: Sink> Flusher<S> {
    /// Opens the state directory of `config` (finishing what a killed previous run left
    /// unfinished), and reports an unclean previous stop in the log and the ledger.
    pub fn open(
        engine: Arc<Engine>,
        sink: Arc<S>,
        config: &Config,
    ) -> Result<Flusher<S>, StateError> {
        let state = StateDir::open_with(&config.state, &crate::totals::Recovery)?;
        let flushes = state.unfinished_wrapper_flushes();
        if flushes > 0 {
            return Err(StateError::UnfinishedWrapperFlush {
                dir: state.dir().to_owned(),
                flushes,
            });
        }
        let ledger = Arc::new(Ledger::default());
        if let Some(previous) = state.unclean_previous_run() {
            tracing::warn!(
                pending_rows = previous.pending_rows,
                pending_minute_delta_sum = %previous.pending_sum,
                pending_day_delta_sum = %previous.pending_day_sum,
                last_status = %previous.time,
                "The previous run did not shut down cleanly: the rows it held in memory (these, as of its last flush, and whatever it received after) were lost."
            );
            ledger.set_unclean_previous_stop(previous.pending_rows, previous.pending_sums());
        }
        let recovery = state.recovery().clone();
        if recovery.flushes > 0 || recovery.uncommitted_rows > 0 {
            tracing::warn!(
                flushes = recovery.flushes,
                unknown_rows = recovery.unknown_rows,
                unknown_minute_delta_sum = %recovery.unknown_sums[0],
                unknown_day_delta_sum = %recovery.unknown_sums[1],
                spilled_rows = recovery.spilled_rows,
                rejected_rows = recovery.rejected_rows,
                dropped_rows = recovery.dropped_rows,
                never_sent_rows = recovery.uncommitted_rows,
                totals_rows = recovery.totals_rows,
                totals_minute_sum = %recovery.totals_sums[0],
                totals_day_sum = %recovery.totals_sums[1],
                "Finished the flush the previous run was killed in: requests that may have been sent are in unknown.jsonl (in_flight_at_crash) and are never re-sent; requests that definitely were not applied were spilled for replay; writer_totals writes not known applied are written again (idempotent by their write time)."
            );
        }
        if recovery.dropped_rows > 0 {
            tracing::error!(
                rows = recovery.dropped_rows,
                max_spill_bytes = state.spill_bytes().1,
                "Rows of the unfinished flush did not fit in the spill and were dropped."
            );
        }
        let torn = state.torn_lines();
        for (log, lines) in OutcomeLog::ALL.into_iter().zip(torn) {
            if lines > 0 {
                tracing::warn!(
                    file = log.file_name(),
                    "A torn last line (a write cut short by a crash) was set aside in {}.torn; the request it belonged to is recorded again by recovery.",
                    log.file_name()
                );
            }
        }
        ledger.count_recovery(&recovery, torn);
        ledger.set_spill_bytes(state.spill_bytes().0);
        let stored = crate::state::ledger_pending::load(state.dir()).map_err(|error| StateError::Io {
            dir: state.dir().to_owned(),
            step: "reading the ledger rows a previous run could not confirm (ledger_pending.jsonl, the held spill segments' headers; no spilled row is replayed before they are confirmed)",
            error,
        })?;
        let mut flusher = Flusher::new(engine, sink, config.flush.clone(), state, ledger);
        flusher.open_ingest_log(config)?;
        match &mut flusher.ledger_gate {
            Some(gate) => {
                gate.record_outcomes(flusher.engine.families(), &recovery.records);
                // What the outcomes table may lack: records logged after the last moment
                // its queue was empty (a kill, or a stop with the table unreachable).
                let mark = outcomes_mark::load(flusher.state.dir()).unwrap_or_default();
                let families = flusher.engine.families();
                let read = flusher
                    .state
                    .outcome_records_past(mark, |record| gate.record_outcomes(families, [&record]));
                if let Err(error) = read {
                    tracing::error!(%error, "Could not read the outcome logs past outcomes.mark: rows of them may be missing from the outcomes table (they are in the logs).");
                }
                flusher.outcomes_mark = Some(mark);
                // What the spill still owes the counters, made visible to reconcile.
                let state_dir = flusher.state.dir().to_owned();
                let owed_error = |error| StateError::Io {
                    dir: state_dir.clone(),
                    step: "reading the spill for the days it owes, or owed.days",
                    error,
                };
                let mut book = OwedBook::open(flusher.state.dir(), flusher.state.owner())
                    .map_err(owed_error)?;
                flusher
                    .state
                    .scan_spill(|record| book.count_spilled(families, record))
                    .map_err(owed_error)?;
                let marks = book.start_marks().map_err(owed_error)?;
                if book.owed_days() > 0 {
                    tracing::info!(
                        days = book.owed_days(),
                        "The spill holds rows of exact families: their days are marked owed in the outcomes table until they are replayed (reconcile keeps them open)."
                    );
                }
                gate.set_owed(book, marks);
                if !stored.is_empty() {
                    tracing::info!(
                        ledger_rows = stored.len(),
                        "Ledger rows the previous run could not confirm are sent again before any spilled row is replayed."
                    );
                    gate.load_stored(stored);
                    flusher.ledger_file = true;
                }
            }
            None if !stored.is_empty() => tracing::warn!(
                ledger_rows = stored.len(),
                "Ledger rows of a previous run wait to be confirmed (ledger_pending.jsonl, held spill segments), but no family keeps exact totals now: they are not sent (the files stay)."
            ),
            None => {}
        }
        Ok(flusher)
    }

    /// A flusher on an open state directory. Spilled rows (running totals of
    /// `writer_totals` families among them) are replayed by the flushes, a chunk at a
    /// time.
    pub fn new(
        engine: Arc<Engine>,
        sink: Arc<S>,
        config: FlushConfig,
        mut state: StateDir,
        ledger: Arc<Ledger>,
    ) -> Flusher<S> {
        state.set_start_window(stage::start_window(config.max_in_flight));
        let shard_seed = shard_seed(state.writer_id());
        let ledger_gate = LedgerGate::new(
            engine.families(),
            crate::flush::ledger_gate::ROWS_PER_REQUEST,
            engine.aggregator().limits().flush_chunk_bytes(),
            ledger.clone(),
        );
        let families = engine
            .families()
            .iter()
            .map(crate::state::FamilyEntry::of)
            .collect();
        let totals = Totals::open(engine.clone(), &state, &config);
        Flusher {
            engine,
            sink,
            config,
            state,
            ledger,
            seq: 0,
            shard_seed,
            store_healthy: true,
            families,
            lost: (0, [0; Granularity::COUNT]),
            observers: Vec::new(),
            epochs: None,
            held_spill: Vec::new(),
            ledger_held: (0, 0),
            ledger_gate,
            ledger_file: false,
            outcomes_mark: None,
            totals,
            barriers: None,
            ingest_log: None,
            ingest_unremoved: std::collections::HashSet::new(),
        }
    }

    /// Describes the families a live reload added since (see
    /// [`crate::family::Families::reshape`]) for the journal and the records, before the
    /// drain that may take the first rows of them. Definitions are only ever appended, so
    /// the entries already here stay right.
    pub(super) fn sync_families(&mut self) {
        let families = self.engine.families();
        if self.families.len() < families.len() {
            let known = self.families.len();
            self.families.extend(
                families
                    .iter()
                    .skip(known)
                    .map(crate::state::FamilyEntry::of),
            );
        }
    }
}
