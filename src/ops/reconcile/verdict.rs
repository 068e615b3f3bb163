//! The verdict for one key, granularity and day: how the counter compares with the
//! ledger, and what explains the difference. Pure: the caller reads the store.
//!
//! The ledger holds every delta countersink accepted (`exact`). The counter holds what
//! the store applied. Between them: rows known not applied (rejected, dropped, unknown
//! rows resolved as not applied: `known_missing`), and unknown requests, each applied
//! whole or not at all. So `residual = exact - known_missing - counter` must be the sum of
//! the unknown requests that did **not** apply: a subset-sum over the unknown requests,
//! for every counter column at once.

use std::collections::HashMap;

/// Signed sums per counter column, in the family's column order.
pub type Sums = Vec<i128>;

/// One unknown request's rows for this key and granularity, summed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unknown {
    /// The request id (`writer/incarnation/flush/request`).
    pub request_id: String,
    /// Its deltas for this key and granularity, per column.
    pub deltas: Sums,
}

/// The status of a key (see the table of docs/src/operations/reconcile.md).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Counter equals the ledger and nothing is unknown.
    Ok,
    /// The difference is exactly what is known not to have applied (rejected, dropped,
    /// resolved not applied).
    Explained,
    /// Exactly one subset of the unknown requests explains the difference: those did
    /// not apply, the others did.
    Resolved,
    /// Several subsets explain it: no verdict per request.
    Ambiguous,
    /// No subset explains it: a cluster-side loss or an outside writer.
    Unexplained,
    /// The day may still receive writes (accepted-timestamp window, re-queue age).
    Open,
}

impl Status {
    /// Every status.
    pub const ALL: [Status; 6] = [
        Status::Ok,
        Status::Explained,
        Status::Resolved,
        Status::Ambiguous,
        Status::Unexplained,
        Status::Open,
    ];

    /// The label in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Explained => "explained",
            Status::Resolved => "resolved",
            Status::Ambiguous => "ambiguous",
            Status::Unexplained => "unexplained",
            Status::Open => "open",
        }
    }
}

/// What the verdict says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The status.
    pub status: Status,
    /// `counter - exact`, per column.
    pub drift: Sums,
    /// For `resolved`: per unknown request (in input order), whether it applied.
    pub applied: Option<Vec<bool>>,
}

/// The most unknown requests searched for one key (2^n subsets at worst; beyond it the
/// key is `ambiguous`, unless its residual lies outside the bounds of every subset).
pub const MAX_UNKNOWNS: usize = 40;

/// The most distinct partial sums kept while searching (memory bound); beyond it the key
/// is `ambiguous` (its residual is within the bounds of the subsets).
const MAX_REACHABLE: usize = 1 << 20;

/// The most a key's counter can hold while its day is open: every positive delta of its
/// ledger applied and no negative one yet (`rises`), plus every positive delta of its
/// unknown requests (a repair's is not in the ledger). A counter write of countersink is
/// sent only after its ledger row is confirmed, so nothing countersink writes can take a
/// counter above it.
pub fn open_ceiling(rises: &[i128], unknowns: &[Unknown]) -> Sums {
    let mut ceiling = rises.to_vec();
    for unknown in unknowns {
        if ceiling.len() < unknown.deltas.len() {
            ceiling.resize(unknown.deltas.len(), 0);
        }
        for (i, delta) in unknown.deltas.iter().enumerate() {
            ceiling[i] += (*delta).max(0);
        }
    }
    ceiling
}

/// Decides one key's verdict. `open`: the day is not closed yet, with the key's
/// [`open_ceiling`]. A counter of an open day below the ledger may still be waiting for
/// writes on their way (`open`); one above the ceiling is `unexplained` at once: no later
/// write of countersink can explain it.
pub fn verdict(
    exact: &[i128],
    counter: &[i128],
    known_missing: &[i128],
    unknowns: &[Unknown],
    open: Option<&[i128]>,
) -> Verdict {
    let width = exact.len().max(counter.len()).max(known_missing.len());
    let at = |v: &[i128], i: usize| v.get(i).copied().unwrap_or(0);
    let drift: Sums = (0..width).map(|i| at(counter, i) - at(exact, i)).collect();
    let residual: Sums = (0..width)
        .map(|i| at(exact, i) - at(known_missing, i) - at(counter, i))
        .collect();
    let with = |status, applied| Verdict {
        status,
        drift: drift.clone(),
        applied,
    };
    if let Some(ceiling) = open {
        let above = (0..width).any(|i| at(counter, i) > at(ceiling, i));
        let status = if above {
            Status::Unexplained
        } else {
            Status::Open
        };
        return with(status, None);
    }
    // A counter equal to the ledger is never unexplained: what the records say of its
    // history (rejections, repairs that undid an outside write) is explanation enough.
    let no_drift = drift.iter().all(|d| *d == 0);
    if unknowns.is_empty() {
        return match (no_drift, residual.iter().all(|r| *r == 0)) {
            (true, true) => with(Status::Ok, None),
            (true, false) | (false, true) => with(Status::Explained, None),
            (false, false) => with(Status::Unexplained, None),
        };
    }
    match subsets_summing_to(&residual, unknowns, width) {
        Solutions::None if no_drift => with(Status::Explained, None),
        Solutions::None => with(Status::Unexplained, None),
        Solutions::One(not_applied) => {
            let applied = (0..unknowns.len()).map(|i| !not_applied[i]).collect();
            with(Status::Resolved, Some(applied))
        }
        Solutions::Many => with(Status::Ambiguous, None),
    }
}

/// How many subsets of the unknown requests sum to the target.
enum Solutions {
    None,
    /// The one subset, as membership flags.
    One(Vec<bool>),
    Many,
}

/// Counts the subsets (0, 1, more) whose sum is `target`, by dynamic programming over the
/// reachable sums (a count capped at 2 and one witness per sum). First, per column, the
/// bounds no subset leaves: the sum of the negative deltas and the sum of the positive
/// ones; a target outside them in any column has no subset, whatever the search limits.
fn subsets_summing_to(target: &[i128], unknowns: &[Unknown], width: usize) -> Solutions {
    let reachable = (0..width).all(|i| {
        let (low, high) = unknowns.iter().fold((0_i128, 0_i128), |(low, high), u| {
            let delta = u.deltas.get(i).copied().unwrap_or(0);
            (low + delta.min(0), high + delta.max(0))
        });
        (low..=high).contains(&target.get(i).copied().unwrap_or(0))
    });
    if !reachable {
        return Solutions::None;
    }
    if unknowns.len() > MAX_UNKNOWNS {
        return Solutions::Many;
    }
    // reachable sum → (number of subsets reaching it, capped at 2; one witness).
    let mut reach: HashMap<Sums, (u8, u64)> = HashMap::new();
    reach.insert(vec![0; width], (1, 0));
    for (index, unknown) in unknowns.iter().enumerate() {
        let mut next = reach.clone();
        for (sum, (count, witness)) in &reach {
            let moved: Sums = (0..width)
                .map(|i| sum[i] + unknown.deltas.get(i).copied().unwrap_or(0))
                .collect();
            let entry = next.entry(moved).or_insert((0, witness | (1 << index)));
            entry.0 = (entry.0 + count).min(2);
        }
        reach = next;
        if reach.len() > MAX_REACHABLE {
            return Solutions::Many;
        }
    }
    match reach.get(target) {
        None => Solutions::None,
        Some((1, witness)) => Solutions::One(
            (0..unknowns.len())
                .map(|i| witness & (1 << i) != 0)
                .collect(),
        ),
        Some(_) => Solutions::Many,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unknown(id: &str, delta: i128) -> Unknown {
        Unknown {
            request_id: id.into(),
            deltas: vec![delta],
        }
    }

    #[test]
    fn equal_and_nothing_unknown_is_ok() {
        let v = verdict(&[10], &[10], &[0], &[], None);
        assert_eq!((v.status, v.drift), (Status::Ok, vec![0]));
    }

    #[test]
    fn a_drift_of_rejected_rows_is_explained() {
        let v = verdict(&[10], &[7], &[3], &[], None);
        assert_eq!((v.status, v.drift), (Status::Explained, vec![-3]));
    }

    #[test]
    fn an_outside_writer_is_unexplained() {
        let v = verdict(&[10], &[17], &[0], &[], None);
        assert_eq!((v.status, v.drift), (Status::Unexplained, vec![7]));
        // Unknown requests that cannot sum to it do not explain it either.
        let v = verdict(&[10], &[17], &[0], &[unknown("a", 5)], None);
        assert_eq!(v.status, Status::Unexplained);
    }

    #[test]
    fn one_subset_resolves_which_unknown_requests_applied() {
        // Unknown 5, 3 and 4; the counter lacks 3: only {3} sums to it.
        let unknowns = [unknown("a", 5), unknown("b", 3), unknown("c", 4)];
        let v = verdict(&[12], &[9], &[0], &unknowns, None);
        assert_eq!(v.status, Status::Resolved);
        assert_eq!(v.applied, Some(vec![true, false, true]));
        // Nothing lacking: all applied (the empty subset is the only one).
        let v = verdict(&[12], &[12], &[0], &unknowns, None);
        assert_eq!(v.applied, Some(vec![true, true, true]));
    }

    /// Issue test 7: two unknown +5 requests and a drift of 5 cannot tell which one
    /// applied; with negative deltas, +5 and -5 make "both or neither" ambiguous too.
    #[test]
    fn equal_unknowns_are_ambiguous_not_resolved() {
        let v = verdict(&[10], &[5], &[0], &[unknown("a", 5), unknown("b", 5)], None);
        assert_eq!((v.status, v.drift), (Status::Ambiguous, vec![-5]));
        let v = verdict(&[0], &[0], &[0], &[unknown("a", 5), unknown("b", -5)], None);
        assert_eq!(v.status, Status::Ambiguous);
        let v = verdict(
            &[0],
            &[-5],
            &[0],
            &[unknown("a", 5), unknown("b", -5)],
            None,
        );
        assert_eq!(v.status, Status::Resolved);
        assert_eq!(v.applied, Some(vec![false, true]));
    }

    /// Past the search limits a drift no subset can reach is still unexplained: 41
    /// unknown +1 requests cannot explain a counter 1000 above the ledger, in any column.
    #[test]
    fn a_drift_beyond_every_subset_is_unexplained_past_the_search_limits() {
        let unknowns: Vec<Unknown> = (0..=MAX_UNKNOWNS)
            .map(|i| unknown(&format!("u{i}"), 1))
            .collect();
        assert_eq!(unknowns.len(), 41);
        let v = verdict(&[41], &[1_041], &[0], &unknowns, None);
        assert_eq!((v.status, v.drift), (Status::Unexplained, vec![1_000]));
        // Within the bounds, past the limits: still ambiguous.
        let v = verdict(&[41], &[20], &[0], &unknowns, None);
        assert_eq!(v.status, Status::Ambiguous);
        // Out of bounds in one column of two, within them in the other.
        let two: Vec<Unknown> = (0..=MAX_UNKNOWNS)
            .map(|i| Unknown {
                request_id: format!("u{i}"),
                deltas: vec![1, -2],
            })
            .collect();
        let v = verdict(&[41, -82], &[30, -100], &[0, 0], &two, None);
        assert_eq!(v.status, Status::Unexplained);
        // A counter equal to the ledger stays explained.
        let v = verdict(&[41], &[41], &[-1_000], &unknowns, None);
        assert_eq!(v.status, Status::Explained);
    }

    #[test]
    fn every_column_must_match_at_once() {
        let unknowns = [
            Unknown {
                request_id: "a".into(),
                deltas: vec![1, 100],
            },
            Unknown {
                request_id: "b".into(),
                deltas: vec![1, 200],
            },
        ];
        let v = verdict(&[2, 300], &[1, 100], &[0, 0], &unknowns, None);
        assert_eq!(v.applied, Some(vec![true, false]));
    }

    /// A repair of -7 undid an outside writer's +7: the records show a repair the ledger
    /// does not explain, but the counter equals the ledger.
    #[test]
    fn a_repaired_counter_equal_to_the_ledger_is_explained() {
        let v = verdict(&[10], &[10], &[7], &[], None);
        assert_eq!((v.status, v.drift), (Status::Explained, vec![0]));
    }

    #[test]
    fn an_open_day_below_its_ledger_gets_no_verdict() {
        let v = verdict(&[10], &[3], &[0], &[], Some(&[10]));
        assert_eq!((v.status, v.drift), (Status::Open, vec![-7]));
    }

    /// Issue item 6: an outside `+7` on a key of today is caught the same day.
    #[test]
    fn an_open_day_above_what_countersink_can_have_written_is_unexplained() {
        let v = verdict(&[10], &[17], &[0], &[], Some(&[10]));
        assert_eq!((v.status, v.drift), (Status::Unexplained, vec![7]));
        // A decrement of the ledger whose counter write is still on its way: the counter
        // may be above the ledger's sum, never above its positive deltas.
        let v = verdict(&[5], &[10], &[0], &[], Some(&[10]));
        assert_eq!(v.status, Status::Open);
        // A repair of unknown outcome (not in the ledger) may have added its delta.
        let repair = [unknown("repair/1/0", 7)];
        let ceiling = open_ceiling(&[10], &repair);
        assert_eq!(ceiling, vec![17]);
        let v = verdict(&[10], &[17], &[0], &repair, Some(&ceiling));
        assert_eq!(v.status, Status::Open);
    }
}
