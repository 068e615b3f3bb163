//! Sending a flush's counter writes: the shared bounded loop
//! ([`crate::sink::bounded::send_with_progress`]), its answers as the settle step reads
//! them, each recorded in the journal as it arrives, and each start window's bound made
//! durable before the window's first request starts (see the journal's start windows).

use crate::sink::bounded::{Progress, send_with_progress};
use crate::sink::{Outcome, PartitionWrite, Sink};
use crate::state::StateDir;

use super::record_conversion::settled_of;
use super::settle::Sent;
use super::shutdown::Deadline;

/// Sends every write with at most `max_in_flight` at once, until done or the deadline;
/// the journal of `state` hears of every start window and every outcome.
pub(super) async fn send_all<S: Sink>(
    sink: &S,
    writes: Vec<PartitionWrite>,
    max_in_flight: usize,
    deadline: &mut Deadline,
    state: &mut StateDir,
) -> Vec<(PartitionWrite, Sent)> {
    let ended = send_with_progress(
        &writes,
        max_in_flight,
        deadline,
        |write| sink.write(write),
        &mut Journaled(state),
    )
    .await;
    writes
        .into_iter()
        .zip(ended.into_iter().map(Sent::from))
        .collect()
}

/// Requests started per durable start bound: 64 times the requests in flight, at least
/// 256. A kill then turns at most about one window of never-started requests into
/// unknown ones (instead of the whole flush's), for one fdatasync per window, the first
/// riding on the group commit. Measured on the flush bench: a window of eight times in
/// flight cost about a tenth of a 100k-row flush's rate; at 64 times, a window is some
/// 100 ms of sending at 40k requests/s, so its fdatasync costs a few per cent.
pub(super) fn start_window(max_in_flight: usize) -> u32 {
    u32::try_from(max_in_flight.saturating_mul(64))
        .unwrap_or(u32::MAX)
        .max(256)
}

/// The journal's side of sending.
struct Journaled<'s>(&'s mut StateDir);

impl Progress<PartitionWrite, Outcome> for Journaled<'_> {
    fn may_start(&mut self, index: usize) -> bool {
        let index = u32::try_from(index).unwrap_or(u32::MAX);
        match self.0.journal_may_start(index) {
            Ok(()) => true,
            Err(error) => {
                tracing::error!(%error, request = index, "Could not record in the journal which requests may start; the flush sends nothing more, the rest stay pending.");
                false
            }
        }
    }

    fn answered(&mut self, index: usize, _: &PartitionWrite, outcome: &Outcome) {
        let index = u32::try_from(index).unwrap_or(u32::MAX);
        self.0.journal_outcome(index, &settled_of(outcome));
    }
}
