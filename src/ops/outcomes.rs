//! What became of the writes that did not simply apply, read from a state directory:
//! the first thing an operator opens after an incident (`countersink outcomes`).
//!
//! Its sources, read without changing anything, so a running sidecar is undisturbed
//! (no lock taken, no torn line truncated, no segment deleted):
//!
//! | source | files | outcome |
//! |---|---|---|
//! | `log` | `unknown[.N].jsonl`, `unknown.replay-interrupted.*.jsonl`, `rejected[.N].jsonl` | `unknown`, `rejected` |
//! | `spill` | `spill.*.jsonl` from the replay cursor on (rows before it are settled or carried by a flush) | `spilled` |
//! | `journal` | flushes `journal.wal` holds committed and not ended: a flush in progress while a sidecar runs, else one the next start finishes | where recovery will put each row |
//! | `spill`, `journal` | the `writer_totals` families' running totals: in the segments like every spilled write, in `totals.spill.jsonl` and `totals.replay.*.jsonl` of an earlier version until a start moves them, and the totals writes of unfinished flushes (see `outcomes/totals.rs`) | `spilled` |
//!
//! The driver wrapper's records (of the application's own tables) are in the same logs;
//! they show as family `wrapper`, granularity `row`, day `-`. Its spilled rows are in the
//! same segments, and its unended flushes
//! in the journal as [`crate::state::wrapper_files::group_records`] says (key literals in
//! hex, the schema being unknown here). The spill file of earlier versions,
//! `wrapper_spill.jsonl`, is read from its cursor on until a start moves it into a
//! segment (`spilled`). The wrapper's own logs of earlier versions,
//! `wrapper_unknown[.N].jsonl` (`unknown`), `wrapper_rejected[.N].jsonl` and
//! `wrapper_unsent[.N].jsonl` (`rejected`: not applied and not to be sent again), are
//! read too.
//!
//! Journal rows are classified the way crash recovery does ([`crate::state::recovery`]):
//! applied or dropped, nothing; rejected, `rejected`; unknown or no outcome (in flight,
//! `in_flight_at_crash`), `unknown`; definitely not applied or not started, `spilled` (in
//! the last flush; `unknown` in an older one). A row its flush already wrote to a log or
//! a spill segment is counted there only. The journal is read first: a flush that ends
//! while the files are read then shows up in the files, not twice.
//!
//! Everything streams: one line in memory at a time, sums per group. The reading is
//! synchronous and free of output; the command ([`crate::cli`]) prints.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::fs;
use std::hash::Hash;
use std::io::{self, BufRead};
use std::path::{Path, PathBuf};

use serde::Serialize;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::state::journal::{self, FlushGroup};
use crate::state::jsonl::LineReader;
use crate::state::recovery;
use crate::state::spill::{self, SpillView};
use crate::state::wrapper_files::{self, WrapperLine};
use crate::state::{RecordOutcome, RecordSource, Status, Target, WriteRecord, records_of};

/// Where a record was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// `unknown*.jsonl` or `rejected*.jsonl`.
    Log,
    /// A spill segment, not yet replayed.
    Spill,
    /// A flush the intent journal holds unfinished.
    Journal,
}

impl Source {
    /// The label in output.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Log => "log",
            Source::Spill => "spill",
            Source::Journal => "journal",
        }
    }
}

/// The label of an outcome in output and in `--outcome`.
pub fn outcome_label(outcome: RecordOutcome) -> &'static str {
    match outcome {
        RecordOutcome::Unknown => "unknown",
        RecordOutcome::Rejected => "rejected",
        RecordOutcome::Spilled => "spilled",
    }
}

/// Parses an `--outcome` value.
pub fn parse_outcome(text: &str) -> Result<RecordOutcome, String> {
    match text {
        "unknown" => Ok(RecordOutcome::Unknown),
        "rejected" => Ok(RecordOutcome::Rejected),
        "spilled" => Ok(RecordOutcome::Spilled),
        other => Err(format!(
            "`{other}` is not an outcome (unknown, rejected, spilled)"
        )),
    }
}

/// Which records to count or list. Empty lists match everything; several values of one
/// filter are alternatives, different filters must all match.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Outcomes wanted.
    pub outcomes: Vec<RecordOutcome>,
    /// Only records whose `time` is at or after this.
    pub since: Option<OffsetDateTime>,
    /// Family names wanted.
    pub families: Vec<String>,
    /// `(key, value)` pairs that must all be on the record's key.
    pub tags: Vec<(String, String)>,
}

impl Filter {
    /// Whether `record` passes.
    pub fn matches(&self, record: &WriteRecord) -> bool {
        (self.outcomes.is_empty() || self.outcomes.contains(&record.outcome))
            && (self.families.is_empty() || self.families.contains(&record.family))
            && self.tags.iter().all(|(k, v)| has_tag(record, k, v))
            && self.since.is_none_or(|since| {
                OffsetDateTime::parse(&record.time, &Rfc3339).is_ok_and(|t| t >= since)
            })
    }
}

/// Whether the record's key carries tag `k:v`: a key column `k` holding `v` (configured
/// families key on tag values), or `k:v` in the canonical tag string of the generic
/// family (`tags`, `k:v,k2:v2`).
fn has_tag(record: &WriteRecord, k: &str, v: &str) -> bool {
    if record.key.get(k).is_some_and(|value| value == v) {
        return true;
    }
    record.key.get("tags").is_some_and(|tags| {
        tags.split(',')
            .any(|tag| tag.split_once(':') == Some((k, v)) || (v.is_empty() && tag == k))
    })
}

/// Parses `--tag K:V`.
pub fn parse_tag(text: &str) -> Result<(String, String), String> {
    match text.split_once(':') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("`{text}` is not a tag like page_id:home")),
    }
}

/// Parses `--since`: an RFC 3339 time, a UTC day (`2026-11-30`: its midnight), or a
/// duration back from `now` (`90m`, `2h`).
pub fn parse_since(text: &str, now: OffsetDateTime) -> Result<OffsetDateTime, String> {
    if let Ok(at) = OffsetDateTime::parse(text, &Rfc3339) {
        return Ok(at);
    }
    if let Some(date) = crate::bucket::parse_date(text) {
        return Ok(date.midnight().assume_utc());
    }
    crate::config::duration::parse(text)
        .ok()
        .and_then(|ago| time::Duration::try_from(ago).ok())
        .and_then(|ago| now.checked_sub(ago))
        .ok_or_else(|| {
            format!("`{text}` is not a time (2026-11-30T12:00:00Z), a day (2026-11-30) or a duration back from now (2h)")
        })
}

/// What one group of records adds up to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sums {
    /// Records (rows).
    pub records: u64,
    /// Signed sum of every delta of every column: the unit of
    /// `countersink_stage_delta{stage, granularity}`.
    pub delta_sum: i128,
    /// Signed sum per counter column.
    pub columns: BTreeMap<String, i128>,
}

impl Sums {
    fn add(&mut self, record: &WriteRecord) {
        self.records += 1;
        for (column, delta) in &record.deltas {
            self.delta_sum += i128::from(*delta);
            match self.columns.get_mut(column.as_str()) {
                Some(sum) => *sum += i128::from(*delta),
                None => {
                    self.columns.insert(column.clone(), i128::from(*delta));
                }
            }
        }
    }
}

/// A group of the summary: records with the same source, outcome, family, table and day.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey {
    /// The outcome.
    pub outcome: Outcome,
    /// Where the records were read.
    pub source: Source,
    /// The family.
    pub family: String,
    /// `keyspace.table`.
    pub table: String,
    /// `minute` or `day`.
    pub granularity: String,
    /// `YYYY-MM-DD`.
    pub day: String,
}

/// [`RecordOutcome`] with an order (unknown, rejected, spilled) for output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Outcome(u8);

impl Outcome {
    fn of(outcome: RecordOutcome) -> Outcome {
        Outcome(match outcome {
            RecordOutcome::Unknown => 0,
            RecordOutcome::Rejected => 1,
            RecordOutcome::Spilled => 2,
        })
    }

    /// The label.
    pub fn as_str(self) -> &'static str {
        ["unknown", "rejected", "spilled"][usize::from(self.0.min(2))]
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A [`GroupKey`] borrowed from a record, to find its group without allocating.
#[derive(Hash)]
struct GroupRef<'a> {
    outcome: Outcome,
    source: Source,
    family: &'a str,
    table: &'a str,
    granularity: &'a str,
    day: &'a str,
}

impl hashbrown::Equivalent<GroupKey> for GroupRef<'_> {
    fn equivalent(&self, key: &GroupKey) -> bool {
        self.outcome == key.outcome
            && self.source == key.source
            && self.family == key.family
            && self.table == key.table
            && self.granularity == key.granularity
            && self.day == key.day
    }
}

/// Counts and delta sums by outcome, source, family, table and day.
#[derive(Debug, Default)]
pub struct Summary {
    groups: hashbrown::HashMap<GroupKey, Sums>,
}

impl Summary {
    /// Adds one record.
    pub fn add(&mut self, source: Source, record: &WriteRecord) {
        let probe = GroupRef {
            outcome: Outcome::of(record.outcome),
            source,
            family: &record.family,
            table: &record.table,
            granularity: &record.granularity,
            day: &record.day,
        };
        if let Some(sums) = self.groups.get_mut(&probe) {
            sums.add(record);
            return;
        }
        let key = GroupKey {
            outcome: probe.outcome,
            source,
            family: record.family.clone(),
            table: record.table.clone(),
            granularity: record.granularity.clone(),
            day: record.day.clone(),
        };
        self.groups.entry(key).or_default().add(record);
    }

    /// The groups, in order (outcome, source, family, table, day).
    pub fn groups(&self) -> BTreeMap<&GroupKey, &Sums> {
        self.groups.iter().collect()
    }

    /// Totals per (outcome, source, granularity): the figures to hold against the
    /// sidecar's `countersink_stage_delta{stage, granularity}`.
    pub fn totals(&self) -> BTreeMap<(Outcome, Source, String), Sums> {
        let mut totals: BTreeMap<(Outcome, Source, String), Sums> = BTreeMap::new();
        for (key, sums) in &self.groups {
            let total = totals
                .entry((key.outcome, key.source, key.granularity.clone()))
                .or_default();
            total.records += sums.records;
            total.delta_sum += sums.delta_sum;
            for (column, sum) in &sums.columns {
                *total.columns.entry(column.clone()).or_default() += sum;
            }
        }
        totals
    }
}

/// What was read from one file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FileReport {
    /// The file name.
    pub file: String,
    /// Records read (before filtering).
    pub records: u64,
    /// Complete lines that are not records (counted, skipped).
    pub unreadable: u64,
    /// A last line without its newline: torn by a crash mid-append (the next start sets
    /// it aside and writes the record again), or being appended right now. Not counted
    /// as a record.
    pub torn: u64,
    /// Spill rows before the replay cursor: settled, or carried by a flush (skipped).
    pub consumed: u64,
}

/// What the intent journal holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct JournalReport {
    /// Flushes committed and not ended: in progress (a sidecar runs), or killed.
    pub unfinished_flushes: u64,
    /// Rows of those flushes not yet in a log or a spill segment: counted as source
    /// `journal`.
    pub records: u64,
    /// Rows of those flushes already written to a log or a segment (counted there).
    pub already_recorded: u64,
    /// Rows of a group commit that did not complete: never sent (or being committed now).
    pub uncommitted_rows: u64,
    /// Bytes of a torn record after the last readable one.
    pub torn_bytes: u64,
    /// Intents of unfinished flushes this version cannot read (a kind it does not know,
    /// or a body that does not read): not counted anywhere above, and the sidecar does
    /// not start on them (see "Recovery refuses to start" in the book's operations).
    pub unreadable_intents: u64,
}

/// Everything read besides the records themselves.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ScanReport {
    /// Per file read, in reading order.
    pub files: Vec<FileReport>,
    /// The journal.
    pub journal: JournalReport,
    /// Lines the sidecar set aside (`*.torn`, `spill.corrupt.jsonl`), per file.
    pub set_aside: BTreeMap<String, u64>,
    /// `status.json`, when readable: whether the last process stopped cleanly, what it
    /// had pending.
    pub status: Option<Status>,
    /// A process holding the directory's lock (a running sidecar), by pid, when the
    /// system says (Linux `/proc/locks`; the pid is 0 when it is in another pid
    /// namespace).
    pub locked_by: Option<u32>,
}

/// Why a state directory cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    /// It does not exist.
    #[error(
        "state directory {} does not exist (give --state-dir, or --config with state.dir)",
        .0.display()
    )]
    Missing(PathBuf),
    /// It is not a directory.
    #[error("{} is not a directory", .0.display())]
    NotADirectory(PathBuf),
    /// A file could not be read.
    #[error("cannot read {}: {error}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        error: io::Error,
    },
}

fn io_error(path: &Path) -> impl Fn(io::Error) -> ScanError + '_ {
    move |error| ScanError::Io {
        path: path.to_owned(),
        error,
    }
}

/// Reads every source of `dir`, handing each record to `visit` (in file order, journal
/// rows last); returns what was read.
pub fn scan(
    dir: &Path,
    mut visit: impl FnMut(Source, &WriteRecord),
) -> Result<ScanReport, ScanError> {
    let mut visit = |source: Source, record: &WriteRecord| visit(source, &labelled(record));
    match fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Err(ScanError::NotADirectory(dir.to_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(ScanError::Missing(dir.to_owned()));
        }
        Err(error) => return Err(io_error(dir)(error)),
    }
    let names = file_names(dir)?;
    let mut report = ScanReport {
        status: fs::read(dir.join("status.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok()),
        locked_by: lock_holder(&dir.join("lock")),
        ..ScanReport::default()
    };

    // The journal first (see the module's doc).
    let journal_path = dir.join("journal.wal");
    let (groups, torn_bytes) = match journal::read_with_torn_tail(&journal_path) {
        Ok(read) => read,
        Err(e) if e.kind() == io::ErrorKind::NotFound => (Vec::new(), 0),
        Err(error) => return Err(io_error(&journal_path)(error)),
    };
    report.journal.torn_bytes = torn_bytes;
    let journal_cursor = groups
        .iter()
        .filter(|g| g.committed)
        .filter_map(|g| g.consumes)
        .max();
    let unfinished: Vec<&FlushGroup> = groups.iter().filter(|g| !g.ended).collect();
    let pending: HashSet<(&str, u64, u64)> = unfinished
        .iter()
        .filter(|g| g.committed)
        .map(|g| {
            (
                g.flush.writer.as_str(),
                g.flush.incarnation,
                g.flush.flush_seq,
            )
        })
        .collect();
    // Rows of unfinished flushes already in a file, by (request id, row).
    let mut recorded: HashSet<(String, u16)> = HashSet::new();
    let mut note = |record: &WriteRecord| {
        if !pending.is_empty()
            && pending.contains(&(record.writer.as_str(), record.incarnation, record.flush_seq))
        {
            recorded.insert((record.request_id.clone(), record.row));
        }
    };

    // Every log opened before any is read: a rotation while they are read renames
    // files, and open files follow their contents.
    let mut logs = Vec::new();
    for path in log_files(dir, &names) {
        match LineReader::open(&path, 0) {
            Ok(reader) => logs.push((path, reader)),
            // Rotated out of reach since the listing (a rare race: run again).
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(error) => return Err(io_error(&path)(error)),
        }
    }
    for (path, reader) in logs {
        let mut file = FileReport {
            file: file_label(&path),
            ..FileReport::default()
        };
        read_records(reader, &path, &mut file, |record| {
            note(record);
            visit(Source::Log, record);
        })?;
        report.files.push(file);
    }

    // The driver wrapper's logs of earlier versions, then its spill from the cursor on.
    let mut wrapper_logs = Vec::new();
    for path in rotated_and_current(dir, &names, &wrapper_files::LEGACY_LOG_STEMS) {
        match LineReader::open(&path, 0) {
            Ok(reader) => wrapper_logs.push((path, reader, 0)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(error) => return Err(io_error(&path)(error)),
        }
    }
    let spill_path = dir.join(wrapper_files::SPILL_FILE);
    let spill_from = wrapper_spill_cursor(dir, &groups);
    match LineReader::open(&spill_path, spill_from) {
        Ok(reader) => wrapper_logs.push((spill_path, reader, spill_from)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(error) => return Err(io_error(&spill_path)(error)),
    }
    for (path, reader, from) in wrapper_logs {
        let mut file = FileReport {
            file: file_label(&path),
            ..FileReport::default()
        };
        if from > 0 {
            file.consumed = count_lines_before(&path, from).map_err(io_error(&path))?;
        }
        let source = if from > 0 || path.ends_with(wrapper_files::SPILL_FILE) {
            Source::Spill
        } else {
            Source::Log
        };
        read_wrapper_records(reader, &path, &mut file, source, |record| {
            note(record);
            visit(source, record);
        })?;
        report.files.push(file);
    }

    // The writer_totals families' spill and replay files of an earlier version, whole:
    // every row waits to be written again (a start moves them into a segment).
    for path in totals::files(dir)? {
        let reader = match LineReader::open(&path, 0) {
            Ok(reader) => reader,
            // No spill, or replayed and deleted since the listing.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(error) => return Err(io_error(&path)(error)),
        };
        let mut file = FileReport {
            file: file_label(&path),
            ..FileReport::default()
        };
        totals::read_records(reader, &path, &mut file, |record| {
            visit(Source::Spill, record);
        })?;
        report.files.push(file);
    }

    let view = SpillView::read(dir, journal_cursor).map_err(io_error(dir))?;
    for (id, path) in &view.segments {
        let mut file = FileReport {
            file: file_label(path),
            ..FileReport::default()
        };
        let from = view.unconsumed_from(*id);
        if from != Some(0) {
            // Rows before the cursor, the header line aside (segments of earlier
            // versions have none).
            let lines = count_lines_before(path, from.unwrap_or(u64::MAX));
            let header = first_line_is_header(path);
            match (lines, header) {
                (Ok(lines), Ok(header)) => file.consumed = lines - u64::from(header && lines > 0),
                (Err(e), _) | (_, Err(e)) if e.kind() == io::ErrorKind::NotFound => continue,
                (Err(error), _) | (_, Err(error)) => return Err(io_error(path)(error)),
            }
        }
        let Some(from) = from else {
            report.files.push(file);
            continue;
        };
        let reader = match LineReader::open(path, from) {
            Ok(reader) => reader,
            // Replayed and deleted since the listing.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(error) => return Err(io_error(path)(error)),
        };
        read_records(reader, path, &mut file, |record| {
            note(record);
            visit(Source::Spill, record);
        })?;
        report.files.push(file);
    }

    let last = groups.len().saturating_sub(1);
    for (index, group) in groups.iter().enumerate() {
        if group.ended {
            continue;
        }
        report.journal.unreadable_intents += group
            .kind_intents
            .iter()
            .filter(|intent| crate::totals::TotalsIntent::decode(intent).is_none())
            .count() as u64;
        if !group.committed {
            report.journal.uncommitted_rows += group
                .intents
                .iter()
                .map(|i| i.rows.len() as u64)
                .sum::<u64>();
            report.journal.uncommitted_rows += crate::totals::recovery::readable_intents(group)
                .iter()
                .map(|t| t.rows.len() as u64)
                .sum::<u64>();
            if let Some(wrapper) = &group.wrapper {
                report.journal.uncommitted_rows += wrapper
                    .intents
                    .iter()
                    .map(|i| i.rows.len() as u64)
                    .sum::<u64>();
            }
            continue;
        }
        report.journal.unfinished_flushes += 1;
        let wrapper_records = group.wrapper.as_ref().map(|wrapper| {
            // No schema here: key values print as blobs.
            let literal = |_: &_, _, bytes: &[u8]| format!("0x{}", wrapper_files::hex(bytes));
            wrapper_files::group_records(group, wrapper, index == last, &group.time, &literal)
        });
        let mut records = wrapper_records.unwrap_or_else(|| recovery_records(group, index == last));
        records.extend(totals::rejected_records(group));
        records.extend(totals::journal_records(dir, group));
        for record in records {
            if recorded.contains(&(record.request_id.clone(), record.row)) {
                report.journal.already_recorded += 1;
            } else {
                report.journal.records += 1;
                visit(Source::Journal, &record);
            }
        }
    }

    for name in [
        "unknown.jsonl.torn",
        "rejected.jsonl.torn",
        "spill.corrupt.jsonl",
    ] {
        if names.iter().any(|n| n == name) {
            let path = dir.join(name);
            report.set_aside.insert(
                name.to_owned(),
                count_lines(&path).map_err(io_error(&path))?,
            );
        }
    }
    Ok(report)
}

/// Reads the records of one file into `file`'s counts.
fn read_records(
    reader: LineReader,
    path: &Path,
    file: &mut FileReport,
    each: impl FnMut(&WriteRecord),
) -> Result<(), ScanError> {
    read_lines(
        reader,
        path,
        file,
        true,
        |record: WriteRecord, each| each(&record),
        each,
    )
}

/// Reads the lines of one file as `T` records into `file`'s counts, handing each to
/// `each` through `convert`: torn last lines, blank lines and (`headers`: a spill
/// segment's) header line are skipped, lines that are not a `T` counted as unreadable.
fn read_lines<T: serde::de::DeserializeOwned, F>(
    mut reader: LineReader,
    path: &Path,
    file: &mut FileReport,
    headers: bool,
    mut convert: impl FnMut(T, &mut F),
    mut each: F,
) -> Result<(), ScanError> {
    while let Some(line) = reader.next_line().map_err(io_error(path))? {
        if !line.complete {
            file.torn += 1;
            continue;
        }
        if line.text.iter().all(u8::is_ascii_whitespace)
            || (headers && line.offset == 0 && spill::is_header_line(line.text))
        {
            continue;
        }
        match serde_json::from_slice::<T>(line.text) {
            Ok(record) => {
                file.records += 1;
                convert(record, &mut each);
            }
            Err(_) => file.unreadable += 1,
        }
    }
    Ok(())
}

/// The records crash recovery would write for an unfinished flush: its classification,
/// row for row (`is_last`: the journal's last group, whose not-applied rows are spilled).
pub fn recovery_records(group: &FlushGroup, is_last: bool) -> Vec<WriteRecord> {
    let mut out = Vec::new();
    for intent in &group.intents {
        let Some(family) = group.family(intent.family) else {
            continue;
        };
        let (Some(outcome), error) = recovery::home_of(group, intent.request, is_last) else {
            continue;
        };
        out.extend(records_of(
            family,
            intent.table,
            &intent.series,
            (intent.shard, intent.epoch),
            intent.rows.iter().map(|r| (r.bucket, r.deltas.as_slice())),
            RecordSource {
                flush: &group.flush,
                request: intent.request,
                time: &group.time,
            },
            outcome,
            error.as_ref(),
        ));
    }
    out
}

/// Where the wrapper's spill is to be read from: the furthest of its cursor file and the
/// offsets committed unended wrapper flushes consumed (their rows are theirs).
fn wrapper_spill_cursor(dir: &Path, groups: &[FlushGroup]) -> u64 {
    let on_disk = fs::read_to_string(dir.join(wrapper_files::CURSOR_FILE))
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok())
        .unwrap_or(0);
    groups
        .iter()
        .filter(|g| g.committed)
        .filter_map(|g| g.wrapper.as_ref()?.legacy_spill_offset)
        .fold(on_disk, u64::max)
}

/// How `outcomes` shows a record of an application table (the driver wrapper's): family
/// `wrapper`, granularity `row`, day `-`, so that its summary groups and filters it.
fn labelled(record: &WriteRecord) -> Cow<'_, WriteRecord> {
    match record.target() {
        Target::Family(_) => Cow::Borrowed(record),
        Target::Table(_) => {
            let mut record = record.clone();
            record.family = "wrapper".to_owned();
            record.granularity = "row".to_owned();
            record.day = "-".to_owned();
            Cow::Owned(record)
        }
    }
}

/// Reads the wrapper records of one file (its spill, or a log of an earlier version)
/// into `file`'s counts.
fn read_wrapper_records(
    reader: LineReader,
    path: &Path,
    file: &mut FileReport,
    source: Source,
    each: impl FnMut(&WriteRecord),
) -> Result<(), ScanError> {
    let in_spill = source == Source::Spill;
    read_lines(
        reader,
        path,
        file,
        false,
        |line: WrapperLine, each| each(&line.into_record(in_spill)),
        each,
    )
}

/// Per stem, its rotated files (highest number first), then the current file.
fn rotated_and_current(dir: &Path, names: &[String], stems: &[&str]) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    for stem in stems {
        let mut rotated: Vec<(u32, &String)> = names
            .iter()
            .filter_map(|n| {
                let number = n
                    .strip_prefix(stem)?
                    .strip_prefix('.')?
                    .strip_suffix(".jsonl")?;
                Some((number.parse().ok()?, n))
            })
            .collect();
        rotated.sort_by_key(|r| std::cmp::Reverse(r.0));
        paths.extend(rotated.into_iter().map(|(_, n)| dir.join(n)));
        let current = format!("{stem}.jsonl");
        if names.contains(&current) {
            paths.push(dir.join(current));
        }
    }
    paths
}

fn file_names(dir: &Path) -> Result<Vec<String>, ScanError> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_error(dir))? {
        let entry = entry.map_err(io_error(dir))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}

/// The outcome logs, oldest first: per log its rotated files (highest number first),
/// then the current file; then rows of an interrupted replay of earlier versions.
fn log_files(dir: &Path, names: &[String]) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    for stem in ["unknown", "rejected"] {
        let mut rotated: Vec<(u32, &String)> = names
            .iter()
            .filter_map(|n| {
                let number = n
                    .strip_prefix(stem)?
                    .strip_prefix('.')?
                    .strip_suffix(".jsonl")?;
                Some((number.parse().ok()?, n))
            })
            .collect();
        rotated.sort_by_key(|r| std::cmp::Reverse(r.0));
        paths.extend(rotated.into_iter().map(|(_, n)| dir.join(n)));
        let current = format!("{stem}.jsonl");
        if names.contains(&current) {
            paths.push(dir.join(current));
        }
        if stem == "unknown" {
            paths.extend(
                names
                    .iter()
                    .filter(|n| {
                        n.starts_with("unknown.replay-interrupted.") && n.ends_with(".jsonl")
                    })
                    .map(|n| dir.join(n)),
            );
        }
    }
    paths
}

fn file_label(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn first_line_is_header(path: &Path) -> io::Result<bool> {
    let mut reader = LineReader::open(path, 0)?;
    Ok(reader
        .next_line()?
        .is_some_and(|line| spill::is_header_line(line.text)))
}

fn count_lines(path: &Path) -> io::Result<u64> {
    count_lines_before(path, u64::MAX)
}

/// Newlines in the first `limit` bytes of a file.
fn count_lines_before(path: &Path, limit: u64) -> io::Result<u64> {
    let mut reader = io::BufReader::new(io::Read::take(fs::File::open(path)?, limit));
    let mut count = 0;
    loop {
        let buffer = reader.fill_buf()?;
        if buffer.is_empty() {
            return Ok(count);
        }
        count += memchr::memchr_iter(b'\n', buffer).count() as u64;
        let n = buffer.len();
        reader.consume(n);
    }
}

/// The pid of a process holding an `flock` on `lock`, from Linux's `/proc/locks`
/// (without taking or testing the lock, which could make a sidecar starting at that
/// moment fail).
fn lock_holder(lock: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let inode = fs::metadata(lock).ok()?.ino();
    let table = fs::read_to_string("/proc/locks").ok()?;
    table.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; a waiter's line has "->".
        let at = fields.iter().position(|f| *f == "FLOCK")?;
        let pid = fields.get(at + 3)?.parse().ok()?;
        let ino: u64 = fields.get(at + 4)?.rsplit(':').next()?.parse().ok()?;
        (ino == inode && !line.contains("->")).then_some(pid)
    })
}

#[cfg(test)]
mod tests;
mod totals;
