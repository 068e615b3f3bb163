//! Slices as the unit of work: `reconcile --slice I/N` reads one part of a family-day's
//! keys and writes a partial report; [`merge`] combines the partial reports of every
//! slice into the report, verdicts and exit code a single run gives.
//!
//! A key's slice is a hash of it (see [`super::slices`]): slice `I` of `N` is every key
//! whose hash is `I` modulo `N`. `N` must divide the day's slice count, so that a slice
//! is a fixed set of whole ledger buckets and key-index buckets: a key's ledger rows all
//! lie in one of them, and no two slices read the same bucket. Slices are read-only and
//! deterministic, so they can run anywhere, in any order, and again after a failure
//! (`--resolve` and `--close` are idempotent writes and may run per slice too).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Report;

/// A part of a day's keys, `(index, of)`: the day's slices `s` with `s % of == index`.
pub type Part = (u16, u16);

/// One slice of a run: part `index` of `of`, and what a partial report must share with
/// the others to be merged with them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Slice {
    /// Which part, from 0.
    pub index: u16,
    /// How many parts.
    pub of: u16,
    /// The threshold the slice judged with ([`super::Options::threshold`]).
    pub threshold: f64,
    /// The key filter it ran with ([`super::Options::tags`]).
    pub tags: Vec<(String, String)>,
}

impl Slice {
    /// Parses `I/N` and checks it against the day's slice count `slices`: `N` must divide
    /// it (a slice is then whole buckets) and `I` must be below `N`.
    pub fn parse(text: &str, slices: u16) -> Result<Part, String> {
        let parsed = text.split_once('/').and_then(|(i, n)| {
            Some((i.trim().parse::<u16>().ok()?, n.trim().parse::<u16>().ok()?))
        });
        let Some((index, of)) = parsed else {
            return Err(format!("--slice {text}: expected I/N, such as 0/4"));
        };
        if of == 0 || index >= of {
            return Err(format!(
                "--slice {text}: I must be below N (0/{of} to {}/{of})",
                of.saturating_sub(1)
            ));
        }
        if !slices.is_multiple_of(of) {
            let divisors: Vec<String> = (1..=slices)
                .filter(|d| slices.is_multiple_of(*d))
                .map(|d| d.to_string())
                .collect();
            return Err(format!(
                "--slice {text}: N must divide the day's {slices} slices (the greatest common divisor of exact.buckets and, with the key index on, key_index.buckets), so that a slice is whole buckets: one of {}",
                divisors.join(", ")
            ));
        }
        Ok((index, of))
    }

    /// Whether the day's slice `slice` (of [`super::slices`]) is part of this one.
    pub fn holds(index: u16, of: u16, slice: u16) -> bool {
        slice % of == index
    }
}

/// Why partial reports cannot be merged.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MergeError {
    /// A report is not a slice's.
    #[error("the report of {family} {day} is not a slice's (run reconcile with --slice I/N)")]
    NotASlice {
        /// Its family.
        family: String,
        /// Its day.
        day: String,
    },
    /// Reports of one family-day disagree on the slicing, threshold or filter.
    #[error("the slices of {family} {day} were not run alike: {why}")]
    Unlike {
        /// The family.
        family: String,
        /// The day.
        day: String,
        /// What differs.
        why: String,
    },
    /// A slice is there twice.
    #[error("slice {index}/{of} of {family} {day} is given twice")]
    Repeated {
        /// The family.
        family: String,
        /// The day.
        day: String,
        /// The slice.
        index: u16,
        /// Of.
        of: u16,
    },
    /// Slices are missing.
    #[error("slices {missing:?} of {of} of {family} {day} are missing")]
    Missing {
        /// The family.
        family: String,
        /// The day.
        day: String,
        /// The slices missing.
        missing: Vec<u16>,
        /// Of.
        of: u16,
    },
}

/// Merges the partial reports of every slice of one or more family-days into one report
/// per family-day (in the order they first appear), as a single run over each would have
/// made it: the summaries added, the listed keys together in key order, at most
/// `max_listed` of them (the rest counted in `not_listed`), closed only if every slice
/// found the day closed. Refuses a report that is not a slice's, a missing or repeated
/// slice, and slices run with different slicing, threshold or key filter.
pub fn merge(parts: Vec<Report>, max_listed: usize) -> Result<Vec<Report>, MergeError> {
    let mut groups: Vec<((String, String), Vec<Report>)> = Vec::new();
    for part in parts {
        let id = (part.family.clone(), part.day.clone());
        match groups.iter_mut().find(|(g, _)| *g == id) {
            Some((_, reports)) => reports.push(part),
            None => groups.push((id, vec![part])),
        }
    }
    groups
        .into_iter()
        .map(|((family, day), reports)| merge_day(family, day, reports, max_listed))
        .collect()
}

fn merge_day(
    family: String,
    day: String,
    reports: Vec<Report>,
    max_listed: usize,
) -> Result<Report, MergeError> {
    let slice_of = |r: &Report| {
        r.slice.clone().ok_or_else(|| MergeError::NotASlice {
            family: family.clone(),
            day: day.clone(),
        })
    };
    let first = slice_of(&reports[0])?;
    let mut seen = vec![false; usize::from(first.of)];
    for report in &reports {
        let slice = slice_of(report)?;
        let unlike = |why: String| MergeError::Unlike {
            family: family.clone(),
            day: day.clone(),
            why,
        };
        if slice.of != first.of {
            return Err(unlike(format!("in {} and in {} parts", first.of, slice.of)));
        }
        if slice.threshold != first.threshold {
            return Err(unlike(format!(
                "thresholds {} and {}",
                first.threshold, slice.threshold
            )));
        }
        if slice.tags != first.tags {
            return Err(unlike(format!(
                "key filters {:?} and {:?}",
                first.tags, slice.tags
            )));
        }
        let Some(slot) = seen.get_mut(usize::from(slice.index)) else {
            return Err(unlike(format!("slice {}/{}", slice.index, slice.of)));
        };
        if std::mem::replace(slot, true) {
            return Err(MergeError::Repeated {
                family,
                day,
                index: slice.index,
                of: slice.of,
            });
        }
    }
    let missing: Vec<u16> = (0..first.of).filter(|i| !seen[usize::from(*i)]).collect();
    if !missing.is_empty() {
        return Err(MergeError::Missing {
            family,
            day,
            missing,
            of: first.of,
        });
    }
    let mut merged = Report {
        family,
        day,
        closed: true,
        ..Report::default()
    };
    let mut owed_by = std::collections::BTreeSet::new();
    for report in reports {
        merged.closed &= report.closed;
        if merged.open_because.is_none() {
            merged.open_because = report.open_because;
        }
        owed_by.extend(report.owed_by);
        merged.last_repair_ms = merged.last_repair_ms.max(report.last_repair_ms);
        add(&mut merged.summary, &report.summary);
        merged.keys.extend(report.keys);
        merged.resolved_requests.extend(report.resolved_requests);
    }
    merged.owed_by = owed_by.into_iter().collect();
    merged
        .keys
        .sort_by(|a, b| (&a.key, a.granularity).cmp(&(&b.key, b.granularity)));
    if merged.keys.len() > max_listed {
        merged.summary.not_listed += merged.keys.len() - max_listed;
        merged.keys.truncate(max_listed);
    }
    Ok(merged)
}

/// Adds a slice's summary to the merged one.
fn add(total: &mut super::Summary, part: &super::Summary) {
    total.keys += part.keys;
    total.ledger_rows += part.ledger_rows;
    add_counts(&mut total.statuses, &part.statuses);
    total.exact_total += part.exact_total;
    add_counts(&mut total.counter_total, &part.counter_total);
    total.drift_explained += part.drift_explained;
    total.drift_unexplained += part.drift_unexplained;
    total.unknowns_resolved += part.unknowns_resolved;
    total.over_threshold += part.over_threshold;
    total.not_listed += part.not_listed;
    total.unreadable_keys += part.unreadable_keys;
}

fn add_counts<V: Copy + std::ops::AddAssign + Default>(
    total: &mut BTreeMap<&'static str, V>,
    part: &BTreeMap<&'static str, V>,
) {
    for (k, v) in part {
        *total.entry(k).or_default() += *v;
    }
}

/// A label in a report: a status or a granularity name. An alias rather than
/// `&'static str` written out, because serde's derive would take a field of that type
/// as borrowed from the input; `label` and `labelled` read it back instead.
pub type Label = &'static str;

/// The label a report holds (a status or a granularity), as the `'static` text the
/// report's types keep: how a partial report is read back.
fn static_label(text: &str) -> Option<&'static str> {
    super::Status::ALL
        .iter()
        .map(|s| s.as_str())
        .chain(
            crate::vocabulary::Granularity::MINUTE_AND_DAY
                .iter()
                .map(|g| g.as_str()),
        )
        .find(|label| *label == text)
}

/// Reads a status or granularity label (see [`static_label`]).
pub(super) fn label<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Label, D::Error> {
    let text = String::deserialize(d)?;
    static_label(&text).ok_or_else(|| serde::de::Error::custom(format!("unknown label `{text}`")))
}

/// Reads a map keyed by status or granularity labels (see [`static_label`]).
pub(super) fn labelled<'de, D, V>(d: D) -> Result<BTreeMap<Label, V>, D::Error>
where
    D: serde::Deserializer<'de>,
    V: Deserialize<'de>,
{
    BTreeMap::<String, V>::deserialize(d)?
        .into_iter()
        .map(|(text, v)| {
            static_label(&text)
                .map(|label| (label, v))
                .ok_or_else(|| serde::de::Error::custom(format!("unknown label `{text}`")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_is_whole_slices_of_the_day() {
        assert_eq!(Slice::parse("1/4", 16), Ok((1, 4)));
        assert_eq!(Slice::parse("0/1", 16), Ok((0, 1)));
        assert!(Slice::parse("4/4", 16).unwrap_err().contains("below N"));
        let err = Slice::parse("1/3", 16).unwrap_err();
        assert!(err.contains("one of 1, 2, 4, 8, 16"), "{err}");
        assert!(
            Slice::parse("a/4", 16)
                .unwrap_err()
                .contains("expected I/N")
        );
        assert!(Slice::parse("0/0", 16).is_err());
        // Part 1 of 4 holds the day's slices 1, 5, 9 and 13.
        let held: Vec<u16> = (0..16).filter(|s| Slice::holds(1, 4, *s)).collect();
        assert_eq!(held, [1, 5, 9, 13]);
    }

    fn part(index: u16, of: u16, threshold: f64, keys: usize) -> Report {
        let mut report = Report {
            family: "views".into(),
            day: "2026-11-30".into(),
            closed: true,
            slice: Some(Slice {
                index,
                of,
                threshold,
                tags: Vec::new(),
            }),
            ..Report::default()
        };
        report.summary.keys = keys;
        report.summary.statuses.insert("ok", 2 * keys);
        report
    }

    #[test]
    fn parts_add_up_and_unlike_parts_are_refused() {
        let merged = merge(vec![part(1, 2, 0.0, 3), part(0, 2, 0.0, 4)], 10).unwrap();
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].summary.keys, 7);
        assert_eq!(merged[0].summary.statuses["ok"], 14);
        assert!(
            merged[0].slice.is_none(),
            "the merge is the whole day's report"
        );
        assert!(matches!(
            merge(vec![part(1, 2, 0.0, 3), part(0, 2, 0.1, 4)], 10),
            Err(MergeError::Unlike { .. })
        ));
        assert!(matches!(
            merge(vec![part(1, 2, 0.0, 3), part(0, 4, 0.0, 4)], 10),
            Err(MergeError::Unlike { .. })
        ));
        let mut open = part(0, 2, 0.0, 1);
        open.closed = false;
        open.open_because = Some("late".into());
        let merged = merge(vec![part(1, 2, 0.0, 3), open], 10).unwrap();
        assert!(!merged[0].closed && merged[0].open_because.as_deref() == Some("late"));
    }

    #[test]
    fn a_partial_report_reads_back_as_written() {
        let mut report = part(3, 4, 0.01, 2);
        report.summary.counter_total.insert("minute", -5);
        let text = serde_json::to_string(&report).unwrap();
        let back: Report = serde_json::from_str(&text).unwrap();
        assert_eq!(back, report);
        let unknown = text.replace("\"ok\"", "\"fine\"");
        assert!(serde_json::from_str::<Report>(&unknown).is_err());
    }
}
