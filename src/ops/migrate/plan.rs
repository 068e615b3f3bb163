//! The pure part of a migration: partitions cut into chunks (one counter write each),
//! the states a chunk goes through, what a rerun does with each, and the verdict on a
//! chunk whose outcome is unknown.

use serde::{Deserialize, Serialize};

use crate::bucket::{self, Day};
use crate::ops::read::PartitionSums;
use crate::vocabulary::Granularity;

/// One logical partition of a family's table: a key's minute partition (a day) or day
/// partition (a month), all shards together.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PartitionRef {
    /// `minute` or `day`.
    pub table: String,
    /// The key values.
    pub key: Vec<String>,
    /// `YYYY-MM-DD` (minute table) or `YYYY-MM` (day table).
    pub bucket: String,
    /// The epoch, for a family with an epoch column (each epoch's partitions are copied
    /// into the same epoch of the target).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<i32>,
}

impl PartitionRef {
    /// The table kind.
    pub fn granularity(&self) -> Granularity {
        if self.table == "day" {
            Granularity::Day
        } else {
            Granularity::Minute
        }
    }

    /// A day inside the partition (the day, or the first of the month), for reading it.
    pub fn day(&self) -> Option<Day> {
        let text = if self.bucket.len() == 7 {
            format!("{}-01", self.bucket)
        } else {
            self.bucket.clone()
        };
        bucket::parse_date(&text).and_then(Day::from_date)
    }

    /// Whether the partition holds rows of days in `from..=to`: a minute partition's
    /// day, or any day of a day partition's month.
    pub fn overlaps(&self, from: Option<Day>, to: Option<Day>) -> bool {
        let Some(first) = self.day() else {
            return false;
        };
        // A migration copies minute and day tables only (`Migration::open` refuses
        // families with others).
        let last = match self.granularity() {
            Granularity::Minute | Granularity::Hour | Granularity::Total => first,
            Granularity::Day => {
                let month = first.month();
                let mut last = first;
                while Day(last.0 + 1).month() == month {
                    last = Day(last.0 + 1);
                }
                last
            }
        };
        from.is_none_or(|f| last >= f) && to.is_none_or(|t| first <= t)
    }

    /// A short text for reports: `minute home 2026-11-30` (`… epoch 29934000`).
    pub fn describe(&self) -> String {
        match self.epoch {
            Some(epoch) => format!(
                "{} {} {} epoch {epoch}",
                self.table,
                self.key.join(","),
                self.bucket
            ),
            None => format!("{} {} {}", self.table, self.key.join(","), self.bucket),
        }
    }
}

/// Rows of a chunk: clustering bucket (minute of the day, or day since the epoch) and one
/// value per target column.
pub type ChunkRows = Vec<(i64, Vec<i64>)>;

/// One counter write of a migration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Its partition.
    pub partition: PartitionRef,
    /// Its position among the partition's chunks.
    pub index: u32,
    /// Its rows.
    pub rows: ChunkRows,
}

impl Chunk {
    /// Its id in the job table: `["minute", ["home"], "2026-11-30", 0]`.
    pub fn part(&self) -> String {
        part_id(&self.partition, self.index)
    }
}

/// The job table id of chunk `index` of `partition`: `[table, key, bucket, index]`, and
/// the epoch fifth for a family with an epoch column.
pub fn part_id(partition: &PartitionRef, index: u32) -> String {
    let (table, key, bucket) = (&partition.table, &partition.key, &partition.bucket);
    match partition.epoch {
        Some(epoch) => serde_json::to_string(&(table, key, bucket, index, epoch)),
        None => serde_json::to_string(&(table, key, bucket, index)),
    }
    .unwrap_or_default()
}

/// The partition and chunk index of a job table id.
pub fn parse_part(part: &str) -> Option<(PartitionRef, u32)> {
    let fields: Vec<serde_json::Value> = serde_json::from_str(part).ok()?;
    let text = |i: usize| fields.get(i)?.as_str().map(str::to_owned);
    let key = fields
        .get(1)?
        .as_array()?
        .iter()
        .map(|v| v.as_str().map(str::to_owned))
        .collect::<Option<Vec<_>>>()?;
    let index = u32::try_from(fields.get(3)?.as_u64()?).ok()?;
    let epoch = match fields.len() {
        4 => None,
        5 => Some(i32::try_from(fields[4].as_i64()?).ok()?),
        _ => return None,
    };
    Some((
        PartitionRef {
            table: text(0)?,
            key,
            bucket: text(2)?,
            epoch,
        },
        index,
    ))
}

/// The partition of a job table id.
pub fn partition_of(part: &str) -> Option<PartitionRef> {
    parse_part(part).map(|(partition, _)| partition)
}

/// Cuts a partition's rows (rows summing to zero in every column left out) into chunks
/// of at most `max_rows`, in bucket order.
pub fn chunks(partition: &PartitionRef, sums: &PartitionSums, max_rows: usize) -> Vec<Chunk> {
    remaining_chunks(partition, sums, &PartitionSums::new(), max_rows, 0)
}

/// What the job has put into the target for one partition, or may have: per bucket, the
/// rows of its chunks that applied or whose outcome is still unknown (never sent again).
/// A chunk that definitely did not apply puts nothing there.
/// `chunks`: each recorded chunk's state and rows.
pub fn accounted<'a>(chunks: impl IntoIterator<Item = (State, &'a ChunkRows)>) -> PartitionSums {
    let mut sums = PartitionSums::new();
    for (state, rows) in chunks {
        if state == State::NotApplied || state == State::Rejected {
            continue;
        }
        for (bucket, delta) in rows {
            let sum = sums.entry(*bucket).or_insert_with(|| vec![0; delta.len()]);
            if sum.len() < delta.len() {
                sum.resize(delta.len(), 0);
            }
            for (s, d) in sum.iter_mut().zip(delta) {
                *s = s.wrapping_add(*d);
            }
        }
    }
    sums
}

/// The chunks that take the target from what the job `accounted` for to the `source`:
/// per row, the source's value minus what is accounted for (zero rows left out), cut
/// into chunks of at most `max_rows` numbered from `first_index` (after every chunk the
/// job table holds for the partition, so that no record is overwritten).
///
/// A chunk is identified by what it carries, not by its position: a rerun with another
/// `max_batch_rows`, or after the source gained or lost rows, sends exactly what is
/// missing, and a row that lost value in the source gets a negative delta.
pub fn remaining_chunks(
    partition: &PartitionRef,
    source: &PartitionSums,
    accounted: &PartitionSums,
    max_rows: usize,
    first_index: u32,
) -> Vec<Chunk> {
    let buckets: std::collections::BTreeSet<i64> =
        source.keys().chain(accounted.keys()).copied().collect();
    let rows: ChunkRows = buckets
        .into_iter()
        .filter_map(|bucket| {
            let have = source.get(&bucket).map_or(&[][..], Vec::as_slice);
            let sent = accounted.get(&bucket).map_or(&[][..], Vec::as_slice);
            let width = have.len().max(sent.len());
            let at = |v: &[i64], i: usize| v.get(i).copied().unwrap_or(0);
            let delta: Vec<i64> = (0..width)
                .map(|i| at(have, i).wrapping_sub(at(sent, i)))
                .collect();
            delta.iter().any(|d| *d != 0).then_some((bucket, delta))
        })
        .collect();
    rows.chunks(max_rows.max(1))
        .enumerate()
        .map(|(i, rows)| Chunk {
            partition: partition.clone(),
            index: first_index + i as u32,
            rows: rows.to_vec(),
        })
        .collect()
}

/// Where a chunk stands in the job table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Its intent is written and the write may have been sent: a run stopped before it
    /// recorded the outcome.
    Sending,
    /// Applied (acknowledged, or proven by reading the target).
    Applied,
    /// Definitely not applied, worth sending again (unavailable, no connection).
    NotApplied,
    /// Definitely not applied, refused by the store (schema, permissions).
    Rejected,
    /// May or may not have applied (write timeout and the like).
    Unknown,
}

impl State {
    /// The text in the job table.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Sending => "sending",
            State::Applied => "applied",
            State::NotApplied => "not_applied",
            State::Rejected => "rejected",
            State::Unknown => "unknown",
        }
    }

    /// The state of a job table text.
    pub fn parse(text: &str) -> Option<State> {
        Some(match text {
            "sending" => State::Sending,
            "applied" => State::Applied,
            "not_applied" => State::NotApplied,
            "rejected" => State::Rejected,
            "unknown" => State::Unknown,
            _ => return None,
        })
    }
}

/// What a run does with a chunk, given its state from an earlier run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing: it is applied.
    Skip,
    /// Send it (new, or definitely not applied before).
    Send,
    /// Never send blindly: resolve it against the target first.
    Resolve,
}

/// The step for a chunk in `state` (`None`: never attempted).
pub fn step(state: Option<State>) -> Step {
    match state {
        Some(State::Applied) => Step::Skip,
        None | Some(State::NotApplied) | Some(State::Rejected) => Step::Send,
        Some(State::Sending) | Some(State::Unknown) => Step::Resolve,
    }
}

/// What reading the target says about a chunk whose outcome is unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every row holds its before-image plus the chunk's delta: applied.
    Applied,
    /// Every row holds exactly its before-image: not applied (trusted only after the
    /// settle time and from a read at ALL, see the module doc).
    NotApplied,
    /// Neither (someone else wrote the rows, or replicas disagree): stays unknown.
    Ambiguous,
}

/// Compares the target `now` with a chunk's `before` and `rows`.
pub fn verdict(rows: &ChunkRows, before: &ChunkRows, now: &PartitionSums) -> Verdict {
    let (mut applied, mut untouched) = (true, true);
    for (bucket, delta) in rows {
        let zero = vec![0; delta.len()];
        let was = before
            .iter()
            .find(|(b, _)| b == bucket)
            .map_or(&zero, |(_, v)| v);
        let is = now.get(bucket).unwrap_or(&zero);
        let expected: Vec<i64> = was
            .iter()
            .zip(delta)
            .map(|(w, d)| w.wrapping_add(*d))
            .collect();
        applied &= *is == expected;
        untouched &= is == was;
    }
    match (applied, untouched) {
        (true, false) => Verdict::Applied,
        (false, true) => Verdict::NotApplied,
        _ => Verdict::Ambiguous,
    }
}

/// The before-image of a chunk's rows in the target's current `sums`.
pub fn before_image(rows: &ChunkRows, sums: &PartitionSums) -> ChunkRows {
    rows.iter()
        .map(|(bucket, delta)| {
            (
                *bucket,
                sums.get(bucket)
                    .cloned()
                    .unwrap_or_else(|| vec![0; delta.len()]),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partition() -> PartitionRef {
        PartitionRef {
            table: "minute".into(),
            key: vec!["home".into()],
            bucket: "2026-11-30".into(),
            epoch: None,
        }
    }

    /// A chunk id names its partition whole: the epoch fifth when there is one, and an
    /// id without it (every job of earlier versions) reads as epoch-less.
    #[test]
    fn chunk_ids_round_trip_with_and_without_an_epoch() {
        let plain = partition();
        let id = part_id(&plain, 2);
        assert_eq!(id, r#"["minute",["home"],"2026-11-30",2]"#, "unchanged");
        assert_eq!(parse_part(&id), Some((plain.clone(), 2)));
        let in_epoch = PartitionRef {
            epoch: Some(29_934_000),
            ..plain
        };
        let id = part_id(&in_epoch, 0);
        assert_eq!(id, r#"["minute",["home"],"2026-11-30",0,29934000]"#);
        assert_eq!(parse_part(&id), Some((in_epoch, 0)));
        assert_eq!(parse_part(r#"["minute",["home"],"2026-11-30"]"#), None);
    }

    #[test]
    fn partitions_are_cut_into_chunks_without_zero_rows() {
        let sums: PartitionSums = (0..40).map(|m| (m, vec![m % 3, 0])).collect();
        let all = chunks(&partition(), &sums, 16);
        let sizes: Vec<usize> = all.iter().map(|c| c.rows.len()).collect();
        assert_eq!(sizes, [16, 10], "26 of the 40 rows are not zero");
        assert_eq!(all[1].index, 1);
        assert_eq!(all[0].part(), r#"["minute",["home"],"2026-11-30",0]"#);
        assert_eq!(partition_of(&all[0].part()), Some(partition()));
    }

    /// Issue item 1: chunk 0 (rows 0..15) applied, chunk 1 (rows 16..19) not; a rerun
    /// that cuts chunks of 10 sends rows 16..19 only, numbered after the recorded chunks.
    #[test]
    fn a_rerun_sends_what_is_missing_whatever_the_chunk_size() {
        let source: PartitionSums = (0..20).map(|m| (m, vec![m + 1])).collect();
        let first = chunks(&partition(), &source, 16);
        let records = [
            (State::Applied, &first[0].rows),
            (State::NotApplied, &first[1].rows),
        ];
        let rerun = remaining_chunks(&partition(), &source, &accounted(records), 10, 2);
        assert_eq!(rerun.len(), 1);
        assert_eq!(rerun[0].index, 2);
        assert_eq!(rerun[0].rows, first[1].rows);
        // An unknown chunk is accounted for (never sent again); a row the source gained
        // is sent, and one it lost gets a negative delta.
        let records = [
            (State::Applied, &first[0].rows),
            (State::Unknown, &first[1].rows),
        ];
        let mut changed = source.clone();
        changed.insert(25, vec![4]);
        changed.remove(&3);
        let rerun = remaining_chunks(&partition(), &changed, &accounted(records), 10, 2);
        assert_eq!(rerun.len(), 1);
        assert_eq!(rerun[0].rows, [(3, vec![-4]), (25, vec![4])]);
    }

    #[test]
    fn a_rerun_skips_applied_chunks_sends_definite_failures_and_resolves_the_rest() {
        assert_eq!(step(None), Step::Send);
        assert_eq!(step(Some(State::Applied)), Step::Skip);
        assert_eq!(step(Some(State::NotApplied)), Step::Send);
        assert_eq!(step(Some(State::Rejected)), Step::Send);
        assert_eq!(step(Some(State::Unknown)), Step::Resolve);
        assert_eq!(step(Some(State::Sending)), Step::Resolve);
        for state in [
            State::Sending,
            State::Applied,
            State::NotApplied,
            State::Rejected,
            State::Unknown,
        ] {
            assert_eq!(State::parse(state.as_str()), Some(state));
        }
    }

    #[test]
    fn the_target_proves_a_chunk_applied_not_applied_or_neither() {
        let rows: ChunkRows = vec![(1, vec![5, 0]), (2, vec![3, 1])];
        let before: ChunkRows = vec![(1, vec![0, 0]), (2, vec![10, 10])];
        let sums = |a: [i64; 2], b: [i64; 2]| -> PartitionSums {
            [(1, a.to_vec()), (2, b.to_vec())].into()
        };
        assert_eq!(
            verdict(&rows, &before, &sums([5, 0], [13, 11])),
            Verdict::Applied
        );
        assert_eq!(
            verdict(&rows, &before, &sums([0, 0], [10, 10])),
            Verdict::NotApplied
        );
        assert_eq!(
            verdict(&rows, &before, &sums([5, 0], [10, 10])),
            Verdict::Ambiguous,
            "half of one write cannot be: someone else wrote"
        );
        assert_eq!(
            verdict(&rows, &before, &sums([6, 0], [13, 11])),
            Verdict::Ambiguous
        );
        let absent: PartitionSums = [(2, vec![10, 10])].into();
        assert_eq!(
            verdict(&rows, &before, &absent),
            Verdict::NotApplied,
            "a missing row reads 0"
        );
        assert_eq!(
            before_image(&rows, &absent),
            [(1, vec![0, 0]), (2, vec![10, 10])]
        );
    }

    #[test]
    fn day_partitions_overlap_a_range_by_any_day_of_their_month() {
        let day = |t: &str| Day::from_date(bucket::parse_date(t).unwrap()).unwrap();
        let month = PartitionRef {
            table: "day".into(),
            key: vec!["k".into()],
            bucket: "2026-11".into(),
            epoch: None,
        };
        assert!(month.overlaps(Some(day("2026-11-30")), None));
        assert!(!month.overlaps(Some(day("2026-12-01")), None));
        assert!(!month.overlaps(None, Some(day("2026-10-31"))));
        assert!(partition().overlaps(Some(day("2026-11-30")), Some(day("2026-11-30"))));
        assert!(!partition().overlaps(Some(day("2026-12-01")), None));
    }
}
