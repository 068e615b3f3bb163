//! `status.json`: what a process leaves for the next one (whether it stopped cleanly, the
//! rows and sums it held in memory or lost), written after each flush and at shutdown.

use std::fs;
use std::io;

use serde::{Deserialize, Serialize};

use super::{StateDir, private};
use crate::vocabulary::Granularity;

/// What the previous process left in `status.json`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// Whether it stopped through a clean shutdown with nothing lost.
    pub clean: bool,
    /// Its incarnation.
    pub incarnation: u64,
    /// Rows pending in memory after its last flush (lost if it did not stop cleanly,
    /// together with whatever arrived after that flush); after a final flush whose spill
    /// failed, the rows that were lost.
    pub pending_rows: u64,
    /// Their signed delta sum owed to the minute tables, as text (an i128).
    pub pending_sum: String,
    /// Their signed delta sum owed to the day tables, as text (an i128).
    #[serde(default)]
    pub pending_day_sum: String,
    /// Their signed delta sum owed to the hour tables, as text (an i128).
    #[serde(default)]
    pub pending_hour_sum: String,
    /// Their signed delta sum owed to the all-time total tables, as text (an i128).
    #[serde(default)]
    pub pending_total_sum: String,
    /// When the status was written, RFC 3339.
    pub time: String,
    /// Whether its shutdown finished (its final flush done, clean or not): every request
    /// of every group it committed has its home (applied, logged, spilled, or counted
    /// lost in this status), so a group it left open (an end it could not write) needs
    /// nothing more from recovery; giving one a home again would count it twice.
    #[serde(default)]
    pub stopped: bool,
}

impl Status {
    /// The pending delta sums per granularity, in label order (0 where unreadable or
    /// absent: a status written before hour and total tables existed has neither).
    pub fn pending_sums(&self) -> [i128; Granularity::COUNT] {
        [
            &self.pending_sum,
            &self.pending_day_sum,
            &self.pending_hour_sum,
            &self.pending_total_sum,
        ]
        .map(|s| s.parse().unwrap_or(0))
    }
}

impl StateDir {
    /// Records the pending rows and sums (minute, day) after a flush or, with `clean`,
    /// at the end of shutdown.
    pub fn write_status(
        &self,
        clean: bool,
        pending_rows: u64,
        pending_sums: [i128; Granularity::COUNT],
    ) -> io::Result<()> {
        self.put_status(clean, false, pending_rows, pending_sums)
    }

    /// Records that the shutdown finished (see [`Status::stopped`]): clean, or with the
    /// rows and sums it lost.
    pub fn write_stopped_status(
        &self,
        clean: bool,
        lost_rows: u64,
        lost_sums: [i128; Granularity::COUNT],
    ) -> io::Result<()> {
        self.put_status(clean, true, lost_rows, lost_sums)
    }

    fn put_status(
        &self,
        clean: bool,
        stopped: bool,
        pending_rows: u64,
        pending_sums: [i128; Granularity::COUNT],
    ) -> io::Result<()> {
        let status = Status {
            clean,
            stopped,
            incarnation: self.incarnation,
            pending_rows,
            pending_sum: pending_sums[0].to_string(),
            pending_day_sum: pending_sums[1].to_string(),
            pending_hour_sum: pending_sums[2].to_string(),
            pending_total_sum: pending_sums[3].to_string(),
            time: crate::bucket::rfc3339(std::time::SystemTime::now()),
        };
        let tmp = self.dir.join("status.json.tmp");
        let bytes = serde_json::to_vec(&status).map_err(io::Error::other)?;
        private::write(&tmp, &bytes, false)?;
        fs::rename(&tmp, self.dir.join("status.json"))
    }
}
