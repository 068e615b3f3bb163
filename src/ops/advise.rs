//! Shard advice (seed 000 step 6: "load test the hottest key and choose a shard count from
//! the measured safe rate per key"; "divide the peak rate by it, and round up to a power
//! of two").
//!
//! The rate that costs the cluster is counter **writes** per key (each one a read and a
//! lock on the leader), not increments: pre-aggregation already turned thousands of
//! increments into one write per writer per flush. So the peak is taken from the writes
//! each sidecar sent per row and minute (`/debug/hot`'s `by_writes`), summed over the
//! sidecars given (the whole fleet when all are given), and divided by the safe write
//! rate per key the operator measured. The increments per second at that peak are shown
//! beside it, for comparison with a client that writes without countersink.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::telemetry::HotReport;

/// The most shards a family may have (`family[].shards`).
pub const MAX_SHARDS: u32 = 64;

/// The busiest row of a family, summed over the reports.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Peak {
    /// Its key values.
    pub key: Vec<String>,
    /// Its minute.
    pub minute: String,
    /// Counter writes it received in that minute, from every report.
    pub writes_per_minute: u64,
    /// The same, per second.
    pub writes_per_second: f64,
    /// Increments per second it received in that minute.
    pub increments_per_second: f64,
}

/// The advice for one family.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Advice {
    /// The family.
    pub family: String,
    /// Its busiest row.
    pub peak: Peak,
    /// `ceil(peak writes per second / safe rate)`.
    pub needed: u64,
    /// The next power of two of `needed`, at most [`MAX_SHARDS`].
    pub shards: u32,
    /// Whether `needed` is beyond what one family can be split into.
    pub capped: bool,
}

/// The shard count for a peak write rate and the safe rate per key: the next power of
/// two of `ceil(peak / safe)`, at least 1 and at most [`MAX_SHARDS`], and `ceil` itself.
pub fn shards_for(peak_per_second: f64, safe_rate: f64) -> (u64, u32) {
    let needed = (peak_per_second / safe_rate).ceil().max(1.0);
    let needed = if needed >= u64::MAX as f64 {
        u64::MAX
    } else {
        needed as u64
    };
    let shards = needed
        .checked_next_power_of_two()
        .map_or(MAX_SHARDS, |p| u32::try_from(p).unwrap_or(MAX_SHARDS))
        .min(MAX_SHARDS);
    (needed, shards)
}

/// Advice per family seen in `reports` (one report per sidecar), by family name.
pub fn advise(reports: &[HotReport], safe_rate: f64) -> Vec<Advice> {
    // (family, key, minute) → (writes, delta), each report's row counted once.
    let mut rows: BTreeMap<(String, Vec<String>, String), (u64, u128)> = BTreeMap::new();
    for report in reports {
        let mut seen = std::collections::HashSet::new();
        for row in report.by_writes.iter().chain(&report.by_delta) {
            let id = (row.family.clone(), row.key.clone(), row.minute.clone());
            if !seen.insert(id.clone()) {
                continue;
            }
            let entry = rows.entry(id).or_default();
            entry.0 += row.writes;
            entry.1 += row.delta;
        }
    }
    let mut peaks: BTreeMap<String, Peak> = BTreeMap::new();
    for ((family, key, minute), (writes, delta)) in rows {
        let busier = peaks
            .get(&family)
            .is_none_or(|p| writes > p.writes_per_minute);
        if busier {
            peaks.insert(
                family,
                Peak {
                    key,
                    minute,
                    writes_per_minute: writes,
                    writes_per_second: writes as f64 / 60.0,
                    increments_per_second: delta as f64 / 60.0,
                },
            );
        }
    }
    peaks
        .into_iter()
        .map(|(family, peak)| {
            let (needed, shards) = shards_for(peak.writes_per_second, safe_rate);
            Advice {
                family,
                peak,
                needed,
                shards,
                capped: needed > u64::from(MAX_SHARDS),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::HotRow;

    #[test]
    fn the_count_is_the_next_power_of_two_of_peak_over_safe() {
        assert_eq!(shards_for(0.5, 1.0), (1, 1));
        assert_eq!(shards_for(1.0, 1.0), (1, 1));
        assert_eq!(shards_for(1.01, 1.0), (2, 2));
        assert_eq!(shards_for(10.0, 1.0), (10, 16));
        assert_eq!(shards_for(16.0, 1.0), (16, 16));
        assert_eq!(shards_for(1000.0, 1.0), (1000, 64));
    }

    fn row(key: &str, minute: &str, writes: u64, delta: u128) -> HotRow {
        HotRow {
            family: "views".into(),
            key: vec![key.into()],
            minute: minute.into(),
            delta,
            writes,
        }
    }

    #[test]
    fn writes_of_a_row_are_summed_over_sidecars_and_the_busiest_minute_wins() {
        let sidecar = |writes: u64| HotReport {
            window_minutes: 10,
            by_writes: vec![
                row("home", "2026-11-30T12:00Z", writes, 600),
                row("about", "2026-11-30T12:00Z", 30, 6),
            ],
            by_delta: vec![row("home", "2026-11-30T12:00Z", writes, 600)],
        };
        let advice = advise(&[sidecar(12), sidecar(12), sidecar(12)], 0.5);
        assert_eq!(advice.len(), 1);
        let views = &advice[0];
        assert_eq!(views.peak.key, ["about"], "90 writes beat 36");
        assert_eq!(views.peak.writes_per_minute, 90);
        assert_eq!((views.needed, views.shards, views.capped), (3, 4, false));
        assert!((views.peak.increments_per_second - 0.3).abs() < 1e-9);
    }
}
