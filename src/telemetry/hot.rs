//! Hot keys: the rows this writer sends the most to, per minute (`/debug/hot`).
//!
//! Every counter write that leaves the flusher passes here (through
//! [`super::ObservedSink`]). For each minute-table row it carries, the row's minute gets
//! the write counted and its delta added. Two rankings come out: by delta (the
//! increments a key receives, what a hot key is to the application) and by writes (the
//! counter writes a key costs the cluster, what sharding relieves: seed 000's "write rate
//! per key"). `countersink advise-shards` sums the second over a fleet's sidecars.
//!
//! Bounded: the last [`HotKeys::WINDOW_MINUTES`] minutes (counted back from the newest
//! minute seen, so time is the data's, not a clock's), at most `capacity` rows per minute.
//! When a minute is full, its smaller half (by delta) is dropped: a key pruned that way
//! and seen again restarts from zero, so under more distinct rows than that per minute
//! the figures of the small keys are approximate; the large ones are kept.

use std::collections::{BTreeMap, HashMap};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::bucket::{self, Minute};
use crate::family::Families;
use crate::series;
use crate::sink::PartitionWrite;
use crate::vocabulary::{FamilyId, Granularity};

/// What one row received in one minute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Load {
    /// Sum of the absolute deltas sent (every column).
    delta: u128,
    /// Write requests that carried the row.
    writes: u64,
}

type RowId = (FamilyId, Box<[u8]>);

/// The tracker; shared by the sink wrapper (writes) and the HTTP endpoint (reads).
pub struct HotKeys {
    /// By family id; a live reload that adds families names them (see
    /// [`HotKeys::name_families`]).
    family_names: parking_lot::RwLock<Vec<String>>,
    capacity: usize,
    minutes: Mutex<BTreeMap<u32, HashMap<RowId, Load>>>,
}

/// One row of a ranking, as `/debug/hot` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HotRow {
    /// The family's name.
    pub family: String,
    /// The key values (generic family: name, canonical tags).
    pub key: Vec<String>,
    /// The UTC minute, `YYYY-MM-DDTHH:MMZ`.
    pub minute: String,
    /// Sum of the absolute deltas sent for the row in that minute.
    pub delta: u128,
    /// Write requests that carried the row in that minute.
    pub writes: u64,
}

/// What `/debug/hot` answers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HotReport {
    /// Minutes covered, counted back from the newest minute seen.
    pub window_minutes: u32,
    /// The top rows by delta.
    pub by_delta: Vec<HotRow>,
    /// The top rows by writes.
    pub by_writes: Vec<HotRow>,
}

impl HotKeys {
    /// Minutes kept.
    pub const WINDOW_MINUTES: u32 = 10;
    /// Rows kept per minute by default.
    pub const DEFAULT_CAPACITY: usize = 4096;

    /// A tracker for `families`, keeping at most `capacity` rows per minute.
    pub fn new(families: &Families, capacity: usize) -> HotKeys {
        HotKeys {
            family_names: parking_lot::RwLock::new(
                families.iter().map(|f| f.name.clone()).collect(),
            ),
            capacity: capacity.max(2),
            minutes: Mutex::new(BTreeMap::new()),
        }
    }

    /// Names the families by id anew, after a live reload added some.
    pub fn name_families(&self, families: &Families) {
        *self.family_names.write() = families.iter().map(|f| f.name.clone()).collect();
    }

    /// Counts one write request (minute-table writes only: their rows are the minutes).
    pub fn record(&self, write: &PartitionWrite) {
        if write.table != Granularity::Minute {
            return;
        }
        let mut minutes = self.minutes.lock();
        for row in &write.rows {
            let delta: u128 = row
                .columns
                .as_slice()
                .iter()
                .map(|d| u128::from(d.unsigned_abs()))
                .sum();
            let rows = minutes.entry(row.bucket).or_default();
            if rows.len() >= self.capacity
                && !rows.contains_key(&(write.family, write.series.clone()))
            {
                prune(rows, self.capacity / 2);
            }
            let load = rows
                .entry((write.family, write.series.clone()))
                .or_default();
            load.delta = load.delta.saturating_add(delta);
            load.writes += 1;
        }
        if let Some(&newest) = minutes.keys().next_back() {
            let oldest_kept = newest.saturating_sub(Self::WINDOW_MINUTES - 1);
            minutes.retain(|&minute, _| minute >= oldest_kept);
        }
    }

    /// The `k` top rows by delta and by writes (ties: older minute first, then key).
    pub fn report(&self, k: usize) -> HotReport {
        let minutes = self.minutes.lock();
        let mut all: Vec<(u32, &RowId, Load)> = minutes
            .iter()
            .flat_map(|(&minute, rows)| rows.iter().map(move |(id, load)| (minute, id, *load)))
            .collect();
        let order = |a: &(u32, &RowId, Load), b: &(u32, &RowId, Load)| {
            a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1))
        };
        all.sort_by(|a, b| b.2.delta.cmp(&a.2.delta).then_with(|| order(a, b)));
        let by_delta = all.iter().take(k).map(|r| self.row(r)).collect();
        all.sort_by(|a, b| b.2.writes.cmp(&a.2.writes).then_with(|| order(a, b)));
        let by_writes = all.iter().take(k).map(|r| self.row(r)).collect();
        HotReport {
            window_minutes: Self::WINDOW_MINUTES,
            by_delta,
            by_writes,
        }
    }

    fn row(&self, (minute, (family, key), load): &(u32, &RowId, Load)) -> HotRow {
        HotRow {
            family: self
                .family_names
                .read()
                .get(usize::from(family.0))
                .cloned()
                .unwrap_or_default(),
            key: series::fields(key).map(str::to_owned).collect(),
            minute: minute_text(Minute(*minute)),
            delta: load.delta,
            writes: load.writes,
        }
    }
}

/// `YYYY-MM-DDTHH:MMZ`.
pub fn minute_text(minute: Minute) -> String {
    let of_day = minute.minute_of_day();
    format!(
        "{}T{:02}:{:02}Z",
        bucket::format_date(minute.day().date()),
        of_day / 60,
        of_day % 60
    )
}

/// Keeps the `keep` rows with the largest deltas.
fn prune(rows: &mut HashMap<RowId, Load>, keep: usize) {
    let mut deltas: Vec<u128> = rows.values().map(|l| l.delta).collect();
    deltas.sort_unstable_by(|a, b| b.cmp(a));
    let threshold = deltas.get(keep.saturating_sub(1)).copied().unwrap_or(0);
    let mut kept = 0;
    rows.retain(|_, load| {
        let keep_it = load.delta > threshold || (load.delta == threshold && kept < keep);
        kept += usize::from(keep_it);
        keep_it
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::Columns;
    use crate::config::{Config, FamilyConfig};
    use crate::sink::RowDelta;

    fn families() -> Families {
        let mut config = Config::default();
        config.families.push(FamilyConfig::seed_views());
        Families::from_config(&config).unwrap()
    }

    fn write(key: &str, table: Granularity, rows: &[(u32, i64)]) -> PartitionWrite {
        PartitionWrite {
            epoch: None,
            family: FamilyId(1),
            table,
            series: series::encode([key]).into_boxed_slice(),
            shard: None,
            rows: rows
                .iter()
                .map(|&(bucket, delta)| RowDelta {
                    bucket,
                    columns: Columns::single(2, 1, delta),
                    requeued_since: 0,
                })
                .collect(),
        }
    }

    #[test]
    fn rows_rank_by_delta_and_by_writes_per_minute() {
        let hot = HotKeys::new(&families(), 100);
        let m = 29_933_280; // 2026-11-30T00:00Z
        for _ in 0..5 {
            hot.record(&write("busy", Granularity::Minute, &[(m, 1)]));
        }
        hot.record(&write(
            "big",
            Granularity::Minute,
            &[(m, 1000), (m + 1, -7)],
        ));
        hot.record(&write("big", Granularity::Day, &[(20_787, 1_000_000)]));
        let report = hot.report(2);
        assert_eq!(
            report.by_delta,
            [
                HotRow {
                    family: "views".into(),
                    key: vec!["big".into()],
                    minute: "2026-11-30T00:00Z".into(),
                    delta: 1000,
                    writes: 1,
                },
                HotRow {
                    family: "views".into(),
                    key: vec!["big".into()],
                    minute: "2026-11-30T00:01Z".into(),
                    delta: 7,
                    writes: 1,
                },
            ],
            "day-table writes are not minutes; negative deltas count by size"
        );
        assert_eq!(report.by_writes[0].key, ["busy"]);
        assert_eq!(
            (report.by_writes[0].writes, report.by_writes[0].delta),
            (5, 5)
        );
    }

    #[test]
    fn old_minutes_leave_the_window_and_full_minutes_keep_their_largest_rows() {
        let hot = HotKeys::new(&families(), 4);
        let m = 29_933_280;
        hot.record(&write("old", Granularity::Minute, &[(m, 50)]));
        hot.record(&write(
            "new",
            Granularity::Minute,
            &[(m + HotKeys::WINDOW_MINUTES, 1)],
        ));
        let keys: Vec<Vec<String>> = hot.report(10).by_delta.into_iter().map(|r| r.key).collect();
        assert_eq!(keys, [vec!["new".to_string()]]);
        for (i, delta) in [9, 1, 8, 2, 7].into_iter().enumerate() {
            hot.record(&write(
                &format!("k{i}"),
                Granularity::Minute,
                &[(m + 20, delta)],
            ));
        }
        let report = hot.report(10);
        let kept: Vec<u128> = report
            .by_delta
            .iter()
            .filter(|r| r.minute.ends_with("00:20Z"))
            .map(|r| r.delta)
            .collect();
        assert_eq!(kept, [9, 8, 7], "the fifth row pruned the smaller half");
    }
}
