//! The last point of each OTLP cumulative stream a durable request recorded, kept with
//! the increments it produced.
//!
//! A cumulative point's increment is its difference from the stream's last point, so
//! the increment and the stream's new last point must reach the disk together: a start
//! that read back one without the other would count the difference again, or lose it.
//! A durable OTLP request therefore writes a [`StreamLine`] for every stream it changed
//! in the same append as its increments, and a sealed file's stream lines are carried to
//! `ingest.streams.jsonl` (synced) before the file is removed, as its idempotency keys
//! are carried to `ingest.keys.jsonl`.
//!
//! A start folds that file and the stream lines of the files not moved yet into one table
//! ([`Recovered`]): for each stream, the line with the latest point (the latest start
//! time, then the latest time, as the receiver orders them). The fold does
//! not depend on the order lines were written in (two requests of one stream may append
//! in either order), and reading a line twice (a file carried, then killed before its
//! removal) changes nothing.
//!
//! The file's first line holds the table's completeness mark (see the OTLP receiver's
//! `streams` module: a stream first seen with a start time at or after it is all new).
//! Past twice `ingest.otlp.max_streams` lines the file is rewritten with the fold; a
//! stream the bound drops moves the mark past that moment and past its start time
//! ([`mark_after_forgetting`]), so that its next point is a baseline (counted as such),
//! never counted from zero again.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The file's name in the state directory.
pub const FILE: &str = "ingest.streams.jsonl";

/// How far ahead of the sidecar's clock a forgotten stream's start time may move the
/// completeness mark: an hour, six times the default `limits.timestamp_max_future`. The
/// points of an exporter whose clock is further ahead are outside the accepted window
/// (unless it is raised above an hour), so nothing of them was counted to count twice;
/// without a bound, one exporter whose clock is years off would make every new stream's
/// first point a baseline for years.
pub const MAX_START_AHEAD_NANOS: u64 = 3_600 * 1_000_000_000;

/// The completeness mark once streams are forgotten (evicted from the table, dropped by
/// the bound of the file's fold) at `now_unix_nanos`, `latest_start` the latest start
/// time among them: at least now, and past that start. A stream not in the table whose
/// start is at or after the mark is counted whole, so the mark must be past the start
/// of every stream forgotten: an exporter whose clock runs ahead of the sidecar's sends
/// start times later than the moment it is forgotten, and with the mark at that moment
/// its next point would be counted whole a second time. (Capped at
/// [`MAX_START_AHEAD_NANOS`] ahead of now.)
pub fn mark_after_forgetting(mark: u64, latest_start: u64, now_unix_nanos: u64) -> u64 {
    let past_starts = latest_start
        .saturating_add(1)
        .min(now_unix_nanos.saturating_add(MAX_START_AHEAD_NANOS));
    mark.max(now_unix_nanos).max(past_starts)
}
/// How a [`StreamLine`] begins (serde writes fields in order).
pub(super) const LINE_START: &[u8] = b"{\"stream\":";

/// One stream's last point, as a durable OTLP request left it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamLine {
    /// The stream's 128-bit identity, 32 hexadecimal digits.
    #[serde(with = "hex_u128")]
    pub stream: u128,
    /// `start_time_unix_nano` of its last point.
    #[serde(rename = "st")]
    pub start: u64,
    /// `time_unix_nano` of its last point.
    #[serde(rename = "ti")]
    pub time: u64,
    /// The value of its last point.
    #[serde(rename = "v")]
    pub value: i64,
}

impl StreamLine {
    /// Appends the line to `out`.
    pub fn write_line(&self, out: &mut Vec<u8>) {
        if serde_json::to_writer(&mut *out, self).is_ok() {
            out.push(b'\n');
        }
    }
}

/// Takes `line` into `latest` (one line per stream) if it is its stream's latest point
/// yet, as [`Recovered::fold`] judges: folding `latest` then gives what folding every
/// line taken would, so a sealed file's stream lines are kept one per stream as they are
/// read, not one per request.
pub fn keep_latest(latest: &mut HashMap<u128, StreamLine>, line: StreamLine) {
    // Later as the receiver orders points: a later start (a reset) first, then a later
    // time.
    match latest.get(&line.stream) {
        Some(held) if (held.start, held.time) > (line.start, line.time) => {}
        _ => {
            latest.insert(line.stream, line);
        }
    }
}

/// The stream table the state directory holds: its completeness mark and the latest
/// point of each stream, oldest point first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Unix nanoseconds; `None` when no durable stream table was ever written here.
    pub complete_since: Option<u64>,
    /// The streams, oldest point first.
    pub lines: Vec<StreamLine>,
}

impl Recovered {
    /// Folds `more` lines in: the latest point of each stream wins (by start time, then
    /// time, as the receiver orders a stream's points). At most `max_streams`
    /// are kept (the latest points); dropping any moves the mark past `now_unix_nanos`
    /// and past their start times ([`mark_after_forgetting`]).
    pub fn fold(
        &mut self,
        more: impl IntoIterator<Item = StreamLine>,
        max_streams: usize,
        now_unix_nanos: u64,
    ) {
        let mut latest: HashMap<u128, StreamLine> = HashMap::with_capacity(self.lines.len());
        for line in self.lines.drain(..).chain(more) {
            keep_latest(&mut latest, line);
        }
        let mut lines: Vec<StreamLine> = latest.into_values().collect();
        lines.sort_by_key(|l| (l.time, l.stream));
        let keep = max_streams.max(1);
        if lines.len() > keep {
            let latest_start = lines
                .drain(..lines.len() - keep)
                .map(|l| l.start)
                .max()
                .unwrap_or(0);
            self.complete_since = Some(mark_after_forgetting(
                self.complete_since.unwrap_or(0),
                latest_start,
                now_unix_nanos,
            ));
        }
        self.lines = lines;
    }

    /// The file's bytes.
    pub(super) fn encode(&self, complete_since: u64) -> Vec<u8> {
        let mut out = serde_json::to_vec(&Header { complete_since }).unwrap_or_default();
        out.push(b'\n');
        for line in &self.lines {
            line.write_line(&mut out);
        }
        out
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    complete_since: u64,
}

/// Reads `dir`'s stream file: its mark and lines, as written (not folded). A missing
/// file is an empty table without a mark; an unreadable line is skipped (that stream's
/// next point is then a difference from an older point: see [`read`]'s caller).
pub fn read(dir: &Path) -> io::Result<(Option<u64>, Vec<StreamLine>)> {
    let text = match fs::read(dir.join(FILE)) {
        Ok(text) => text,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok((None, Vec::new())),
        Err(error) => return Err(error),
    };
    let mut rows = text.split(|b| *b == b'\n').filter(|l| !l.is_empty());
    let mark = rows
        .next()
        .and_then(|l| serde_json::from_slice::<Header>(l).ok())
        .map(|h| h.complete_since);
    let lines = rows
        .filter_map(|l| serde_json::from_slice::<StreamLine>(l).ok())
        .collect();
    Ok((mark, lines))
}

/// Whether `dir`'s stream file ends inside a line (a carry cut short by a kill): the
/// next carry must rewrite the file, not append to the fragment, which would take the
/// first line it adds with it.
pub fn cut_short(dir: &Path) -> io::Result<bool> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = match fs::File::open(dir.join(FILE)) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(error) => return Err(error),
    };
    if file.metadata()?.len() == 0 {
        return Ok(false);
    }
    file.seek(SeekFrom::End(-1))?;
    let mut last = [0_u8; 1];
    file.read_exact(&mut last)?;
    Ok(last[0] != b'\n')
}

/// Removes `dir`'s stream file, if any (synced: a start must not find it again).
pub fn remove(dir: &Path) -> io::Result<()> {
    match fs::remove_file(dir.join(FILE)) {
        Ok(()) => super::sync_dir(dir),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(error),
    }
}

/// 128-bit ids as 32 hexadecimal digits: JSON numbers that large do not survive every
/// reader.
mod hex_u128 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(value: &u128, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{value:032x}"))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u128, D::Error> {
        let text = <&str>::deserialize(d)?;
        u128::from_str_radix(text, 16).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(stream: u128, time: u64, value: i64) -> StreamLine {
        StreamLine {
            stream,
            start: 1,
            time,
            value,
        }
    }

    #[test]
    fn a_line_reads_back_and_starts_with_its_marker() {
        let l = line(u128::MAX - 5, 9, -3);
        let mut out = Vec::new();
        l.write_line(&mut out);
        assert!(
            out.starts_with(LINE_START),
            "{}",
            String::from_utf8_lossy(&out)
        );
        let back: StreamLine = serde_json::from_slice(&out[..out.len() - 1]).unwrap();
        assert_eq!(back, l);
    }

    /// The latest point wins whatever the order the lines come in, and a line read twice
    /// changes nothing.
    #[test]
    fn the_fold_keeps_each_streams_latest_point_in_any_order() {
        let lines = [
            line(1, 10, 5),
            line(2, 11, 7),
            line(1, 20, 9),
            line(1, 15, 8),
        ];
        let mut forward = Recovered::default();
        forward.fold(lines, 10, 0);
        let mut backward = Recovered::default();
        backward.fold(lines.iter().rev().copied().chain(lines), 10, 0);
        assert_eq!(forward, backward);
        assert_eq!(forward.lines, vec![line(2, 11, 7), line(1, 20, 9)]);
        assert_eq!(forward.complete_since, None);
    }

    /// Past the bound the oldest points go, and the mark moves so that their next point
    /// is a baseline.
    #[test]
    fn the_bound_drops_the_oldest_and_moves_the_mark() {
        let mut table = Recovered {
            complete_since: Some(100),
            lines: Vec::new(),
        };
        table.fold(
            (1..=5).map(|i| line(i, u64::try_from(i).unwrap(), 1)),
            3,
            700,
        );
        assert_eq!(
            table.lines.iter().map(|l| l.stream).collect::<Vec<_>>(),
            vec![3, 4, 5]
        );
        assert_eq!(table.complete_since, Some(700));
    }

    /// A dropped stream whose start time is ahead of the sidecar's clock (its exporter's
    /// clock runs ahead) moves the mark past that start, not only to now: otherwise its
    /// next point, not found, would look newer than the mark and be counted whole again.
    /// A start absurdly far ahead moves it no more than an hour past now.
    #[test]
    fn the_bound_moves_the_mark_past_the_dropped_start_times() {
        let ahead = StreamLine {
            stream: 1,
            start: 1_500,
            time: 1_600,
            value: 100,
        };
        let mut table = Recovered {
            complete_since: Some(100),
            lines: Vec::new(),
        };
        table.fold([ahead, line(2, 2_000, 1)], 1, 1_200);
        assert_eq!(table.lines, vec![line(2, 2_000, 1)]);
        assert_eq!(table.complete_since, Some(1_501));

        let absurd = StreamLine {
            start: u64::MAX,
            ..ahead
        };
        let mut table = Recovered::default();
        table.fold([absurd, line(2, u64::MAX, 1)], 1, 1_200);
        assert_eq!(table.complete_since, Some(1_200 + MAX_START_AHEAD_NANOS));
    }

    /// A reset (a later start) wins over a later time of the stream's previous life.
    #[test]
    fn a_reset_is_later_than_any_point_of_the_life_before() {
        let reset = StreamLine {
            stream: 1,
            start: 50,
            time: 60,
            value: 2,
        };
        let mut table = Recovered::default();
        table.fold([reset, line(1, 100, 9)], 10, 0);
        assert_eq!(table.lines, vec![reset]);
    }

    #[test]
    fn the_file_reads_back_its_mark_and_lines_and_skips_damage() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), (None, Vec::new()));
        let table = Recovered {
            complete_since: Some(42),
            lines: vec![line(1, 2, 3), line(4, 5, 6)],
        };
        let mut bytes = table.encode(42);
        bytes.extend_from_slice(b"{\"stream\":\"zz\"\n");
        fs::write(dir.path().join(FILE), bytes).unwrap();
        assert_eq!(read(dir.path()).unwrap(), (Some(42), table.lines));
    }
}
