//! A durable export (`ingest.otlp.durable`): answered only once its increments, and the
//! last point of every cumulative stream it changed, are on disk in the ingest log (see
//! [`crate::state::ingest_log`] and its `streams` module).
//!
//! The points are checked and converted as usual, but their increments go to the ingest
//! log instead of the buffer; a flush moves them into the spill and the replay sends
//! them. A cumulative point's increment is a difference from the stream's last point,
//! so the stream table and the log must agree:
//!
//! - The table is changed, and the request's lines written (into the page cache), under
//!   the table's lock. No other request sees a changed stream before its line is
//!   written, and a log that is full is known before the lock is released: the changes
//!   are then undone and the export refused whole, so its retry finds the table as it
//!   was.
//! - The answer waits for the sync after the lock is released (requests share one
//!   `fdatasync`).
//! - A write or sync that fails stops the log until a restart; the start rebuilds the
//!   table from what is on disk, so an export answered 503 and retried is counted from
//!   the last point that was written, never from one only the memory held.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;

use super::convert;
use super::streams::Streams;
use super::{Answer, Shared, now_unix_nanos};
use crate::engine::Refusal;
use crate::ingest::PacketHandler;
use crate::state::ingest_log::{AppendError, IngestEntry, IngestLog, StreamLine, Written};

/// The points of a durable export the handler checked: counted once it is answered.
#[derive(Default)]
pub(super) struct Checked {
    accepted: u64,
    refused: Vec<Refusal>,
}

/// Counts a durable export's checked points when dropped: once it is answered, or when
/// its future is dropped while it waits for the sync (the lines are written).
struct CountWhenDone<'s, H: PacketHandler> {
    shared: &'s Shared<H>,
    /// `None`: nothing to count (refused whole, or not made durable).
    checked: Option<Checked>,
}

impl<H: PacketHandler> Drop for CountWhenDone<'_, H> {
    fn drop(&mut self) {
        if let Some(checked) = self.checked.take() {
            self.shared
                .handlers
                .take()
                .count_checked(checked.accepted, &checked.refused);
        }
    }
}

impl<H: PacketHandler> Shared<H> {
    /// Whether exports are answered once on disk.
    pub(super) fn is_durable(&self) -> bool {
        self.durable.is_some()
    }

    /// Answers one decoded request: durably when the receivers are durable, else by
    /// [`Shared::export`]. The request is dropped before the wait for the ingest log's
    /// sync: the exports waiting on one sync hold their answers, not their decoded points
    /// (tens of times their size on the wire).
    pub(super) async fn answer(&self, request: ExportMetricsServiceRequest) -> Answer {
        let Some(log) = &self.durable else {
            return self.export(&request);
        };
        let (answer, written, checked) = self.log_export(&request, log);
        drop(request);
        // Counted once answered: an export refused whole is retried, and counts then. An
        // export whose client went away while it waited for the sync (the future dropped
        // here) is counted too: its lines are in the log, to be applied.
        let mut count = CountWhenDone {
            shared: self,
            checked: matches!(answer, Answer::Done { .. }).then_some(checked),
        };
        if let Some(written) = written
            && let Err(error) = log.synced(written).await
        {
            count.checked = None;
            tracing::error!(%error, "A durable OTLP export was written to the ingest log but could not be made durable: a restart may or may not count it; the exporter is told not to retry.");
            return Answer::Unknown;
        }
        answer
    }

    /// Checks and converts `request`, writing its lines to `log`: the answer it gets once
    /// they are on disk, and the append to wait for.
    fn log_export(
        &self,
        request: &ExportMetricsServiceRequest,
        log: &Arc<IngestLog>,
    ) -> (Answer, Option<Written>, Checked) {
        let mut checked = Checked::default();
        if log.would_overflow(0) {
            self.stats.get(self.transport).busy.fetch_add(1, Relaxed);
            return (Answer::Busy, None, checked);
        }
        let mut handler = self.handlers.take();
        // The same lock order as `export`: the stream table, then the handler's stripe.
        let mut shared_table = convert::has_cumulative(request).then(|| self.streams.table());
        let mut empty = Streams::new(2, 0);
        let streams = shared_table.as_deref_mut().unwrap_or(&mut empty);
        streams.track();
        let mut lines = Vec::new();
        let conversion = convert::convert_each(
            request,
            &self.policy,
            streams,
            now_unix_nanos(),
            &mut |point| match handler.check(
                point.name,
                point.tags,
                point.delta,
                point.at_unix_secs,
            ) {
                Ok(minute) => {
                    checked.accepted += 1;
                    IngestEntry::write_line(
                        &mut lines,
                        point.name,
                        point.tags,
                        point.delta,
                        minute.0,
                    );
                    true
                }
                Err(refusal) => {
                    checked.refused.push(refusal);
                    false
                }
            },
        );
        let changes = streams.take_changes();
        for change in &changes {
            StreamLine {
                stream: change.id,
                start: change.after.start,
                time: change.after.time,
                value: change.after.value,
            }
            .write_line(&mut lines);
        }
        let written = if lines.is_empty() {
            None
        } else {
            match log.write_lines(&lines) {
                Ok(written) => Some(written),
                Err(AppendError::Full { .. }) => {
                    streams.undo(&changes);
                    self.stats.get(self.transport).busy.fetch_add(1, Relaxed);
                    return (Answer::Busy, None, checked);
                }
                Err(error) => {
                    tracing::error!(%error, "A durable OTLP export could not be written to the ingest log.");
                    return (Answer::Unavailable, None, checked);
                }
            }
        };
        drop(handler);
        if let Some(streams) = shared_table {
            self.publish_streams(&streams);
        }
        let refused = checked.refused.len() as u64;
        (self.done(&conversion, refused), written, checked)
    }
}
