//! Sending a flush's counter writes: the shared bounded loop
//! ([`crate::sink::bounded::send_bounded`]), its answers as the settle step reads them.

use crate::sink::bounded::send_bounded;
use crate::sink::{Outcome, PartitionWrite, Sink};

use super::settle::Sent;
use super::shutdown::Deadline;

/// Sends every write with at most `max_in_flight` at once, until done or the deadline.
/// `settled(index, outcome)` hears of every outcome as it arrives.
pub(super) async fn send_all<S: Sink>(
    sink: &S,
    writes: Vec<PartitionWrite>,
    max_in_flight: usize,
    deadline: &mut Deadline,
    mut settled: impl FnMut(usize, &Outcome),
) -> Vec<(PartitionWrite, Sent)> {
    let ended = send_bounded(
        &writes,
        max_in_flight,
        deadline,
        |write| sink.write(write),
        |index, _, outcome| settled(index, outcome),
    )
    .await;
    writes
        .into_iter()
        .zip(ended.into_iter().map(Sent::from))
        .collect()
}
