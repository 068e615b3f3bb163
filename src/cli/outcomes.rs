//! `countersink outcomes summary|list`: what the state directory says became of writes
//! that did not simply apply (see [`crate::ops::outcomes`]). Reads only: safe beside a
//! running sidecar.

use std::io::{self, Write};
use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::{Value, json};
use time::OffsetDateTime;

use crate::config::Config;
use crate::ops::outcomes::{
    self, Filter, ScanError, ScanReport, Source, Summary, Sums, outcome_label,
};
use crate::state::{RecordOutcome, WriteRecord};

use super::Failure;

/// The flags of `outcomes`.
#[derive(Debug, Args)]
pub(super) struct OutcomesArgs {
    #[command(subcommand)]
    command: OutcomesCommand,
}

#[derive(Debug, Subcommand)]
enum OutcomesCommand {
    /// Counts and delta sums by outcome, source, family, table and day, with totals per
    /// granularity and what was read (torn or unreadable lines, the journal).
    Summary(Common),
    /// The records themselves, oldest file first (JSON: one object per line).
    List(Common),
}

/// Where to read and what to keep.
#[derive(Debug, Args)]
struct Common {
    /// Config file: its `state.dir` is read.
    #[arg(long, env = "COUNTERSINK_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// State directory [default: `state.dir` of the config, else ./countersink-state].
    #[arg(long = "state-dir", env = "COUNTERSINK_STATE_DIR", value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Only this outcome: `unknown`, `rejected` or `spilled`; repeat for several.
    #[arg(long = "outcome", value_name = "OUTCOME", value_parser = outcomes::parse_outcome)]
    outcomes: Vec<RecordOutcome>,
    /// Only records written at or after: an RFC 3339 time, a UTC day (`2026-11-30`), or
    /// a duration back from now (`2h`).
    #[arg(long, value_name = "WHEN")]
    since: Option<String>,
    /// Only this family; repeat for several.
    #[arg(long = "family", value_name = "FAMILY")]
    families: Vec<String>,
    /// Only records whose key carries this tag (a key column, or a tag of the generic
    /// family's tag string); repeat: all must match.
    #[arg(long = "tag", value_name = "K:V", value_parser = outcomes::parse_tag)]
    tags: Vec<(String, String)>,
    /// `text` or `json`.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    format: String,
}

impl Common {
    fn state_dir(&self) -> Result<PathBuf, Failure> {
        let mut config = match &self.config {
            Some(path) => Config::from_file(path).map_err(Failure::usage)?,
            None => Config::default(),
        };
        if let Some(dir) = &self.state_dir {
            config.state.dir = dir.clone();
        }
        config.validate().map_err(Failure::usage)?;
        Ok(config.state.dir)
    }

    fn filter(&self) -> Result<Filter, Failure> {
        let since = match &self.since {
            Some(text) => Some(
                outcomes::parse_since(text, OffsetDateTime::now_utc()).map_err(Failure::usage)?,
            ),
            None => None,
        };
        Ok(Filter {
            outcomes: self.outcomes.clone(),
            since,
            families: self.families.clone(),
            tags: self.tags.clone(),
        })
    }
}

/// Runs `outcomes summary` or `outcomes list`.
pub(super) fn run(args: OutcomesArgs) -> Result<(), Failure> {
    let result = match args.command {
        OutcomesCommand::Summary(common) => summary(&common),
        OutcomesCommand::List(common) => list(&common),
    };
    match result {
        // `| head`: the reader went away, which is no failure.
        Err(Output::Write(e)) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(Output::Write(e)) => Err(Failure::other(format!("cannot write the output: {e}"))),
        Err(Output::Failed(failure)) => Err(failure),
        Ok(()) => Ok(()),
    }
}

enum Output {
    Failed(Failure),
    Write(io::Error),
}

impl From<Failure> for Output {
    fn from(failure: Failure) -> Output {
        Output::Failed(failure)
    }
}

impl From<io::Error> for Output {
    fn from(error: io::Error) -> Output {
        Output::Write(error)
    }
}

fn scan_failure(error: ScanError) -> Failure {
    match error {
        ScanError::Missing(_) | ScanError::NotADirectory(_) => Failure::usage(error),
        ScanError::Io { .. } => Failure::other(error),
    }
}

fn summary(common: &Common) -> Result<(), Output> {
    let dir = common.state_dir()?;
    let filter = common.filter()?;
    let mut summary = Summary::default();
    let report = outcomes::scan(&dir, |source, record| {
        if filter.matches(record) {
            summary.add(source, record);
        }
    })
    .map_err(scan_failure)?;
    let mut out = io::BufWriter::new(io::stdout().lock());
    if common.format == "json" {
        let value = summary_json(&dir, &summary, &report);
        serde_json::to_writer_pretty(&mut out, &value).map_err(io::Error::from)?;
        writeln!(out)?;
    } else {
        write_summary_text(&mut out, &dir, &summary, &report)?;
    }
    out.flush()?;
    Ok(())
}

/// Sums as JSON: i128 figures as strings (exact; a JSON number is a float64 to most
/// readers), like `status.json`.
fn sums_json(sums: &Sums) -> Value {
    json!({
        "records": sums.records,
        "delta_sum": sums.delta_sum.to_string(),
        "deltas": sums.columns.iter().map(|(c, s)| (c.clone(), Value::String(s.to_string()))).collect::<serde_json::Map<_, _>>(),
    })
}

fn summary_json(dir: &std::path::Path, summary: &Summary, report: &ScanReport) -> Value {
    let groups: Vec<Value> = summary
        .groups()
        .into_iter()
        .map(|(key, sums)| {
            let mut value = json!({
                "outcome": key.outcome.as_str(),
                "source": key.source.as_str(),
                "family": key.family,
                "table": key.table,
                "granularity": key.granularity,
                "day": key.day,
            });
            merge(&mut value, sums_json(sums));
            value
        })
        .collect();
    let totals: Vec<Value> = summary
        .totals()
        .iter()
        .map(|((outcome, source, granularity), sums)| {
            let mut value = json!({
                "outcome": outcome.as_str(),
                "source": source.as_str(),
                "granularity": granularity,
            });
            merge(&mut value, sums_json(sums));
            value
        })
        .collect();
    json!({
        "state_dir": dir.display().to_string(),
        "locked_by_pid": report.locked_by,
        "groups": groups,
        "totals": totals,
        "files": report.files,
        "journal": report.journal,
        "set_aside": report.set_aside,
        "status": report.status,
    })
}

fn merge(into: &mut Value, from: Value) {
    if let (Some(into), Value::Object(from)) = (into.as_object_mut(), from) {
        into.extend(from);
    }
}

fn write_summary_text(
    out: &mut impl Write,
    dir: &std::path::Path,
    summary: &Summary,
    report: &ScanReport,
) -> io::Result<()> {
    match report.locked_by {
        Some(pid) => writeln!(
            out,
            "State directory {} (in use by process {pid}: a sidecar runs; journal rows are its flush in progress)",
            dir.display()
        )?,
        None => {
            writeln!(out, "State directory {} (not in use)", dir.display())?;
            if let Some(status) = report.status.as_ref().filter(|s| !s.clean) {
                let [minute, day, hour, total] = status.pending_sums();
                // Hour and total sums only where a family has such tables.
                let more = match (hour, total) {
                    (0, 0) => String::new(),
                    _ => format!(", hour {hour}, total {total}"),
                };
                writeln!(
                    out,
                    "The last process did not stop cleanly: {} rows were pending in memory at its last flush (delta sums: minute {minute}, day {day}{more}); they are lost unless recorded here.",
                    status.pending_rows
                )?;
            }
        }
    }
    if report.files.is_empty() && report.status.is_none() {
        writeln!(
            out,
            "No countersink state files here (no outcome log, spill segment or status.json): is this the state directory?"
        )?;
    }
    let groups = summary.groups();
    if groups.is_empty() {
        writeln!(out, "\nNo records match.")?;
    } else {
        writeln!(out)?;
        let mut rows = vec![row([
            "OUTCOME",
            "SOURCE",
            "FAMILY",
            "TABLE",
            "DAY",
            "RECORDS",
            "DELTA SUM",
            "COLUMNS",
        ])];
        for (key, sums) in &groups {
            rows.push(vec![
                key.outcome.to_string(),
                key.source.as_str().into(),
                key.family.clone(),
                key.table.clone(),
                key.day.clone(),
                sums.records.to_string(),
                sums.delta_sum.to_string(),
                columns_text(sums),
            ]);
        }
        write_table(out, &rows, &[5, 6])?;
        writeln!(out, "\nTotals")?;
        let mut rows = vec![row([
            "OUTCOME",
            "SOURCE",
            "GRANULARITY",
            "RECORDS",
            "DELTA SUM",
            "COLUMNS",
        ])];
        for ((outcome, source, granularity), sums) in summary.totals() {
            rows.push(vec![
                outcome.to_string(),
                source.as_str().into(),
                granularity,
                sums.records.to_string(),
                sums.delta_sum.to_string(),
                columns_text(&sums),
            ]);
        }
        write_table(out, &rows, &[3, 4])?;
    }
    writeln!(out)?;
    let read: u64 = report.files.iter().map(|f| f.records).sum();
    writeln!(
        out,
        "Read {read} records from {} files.",
        report.files.len()
    )?;
    for file in &report.files {
        if file.torn > 0 {
            writeln!(
                out,
                "{}: an incomplete last line (a crash mid-append: the next start sets it aside and writes the record again; or being written now), not counted",
                file.file
            )?;
        }
        if file.unreadable > 0 {
            writeln!(
                out,
                "{}: {} unreadable lines, not counted",
                file.file, file.unreadable
            )?;
        }
        if file.consumed > 0 {
            writeln!(
                out,
                "{}: {} rows before the replay cursor (replayed), not counted",
                file.file, file.consumed
            )?;
        }
    }
    for (file, lines) in &report.set_aside {
        if *lines > 0 {
            writeln!(out, "{file}: {lines} lines set aside earlier (not counted)")?;
        }
    }
    let journal = &report.journal;
    if journal.unfinished_flushes > 0 {
        writeln!(
            out,
            "journal.wal: {} unfinished flush(es): {} rows counted as source `journal` where crash recovery will put them (`in_flight_at_crash` when no outcome is known), {} already in a log or segment",
            journal.unfinished_flushes, journal.records, journal.already_recorded
        )?;
    }
    if journal.uncommitted_rows > 0 {
        writeln!(
            out,
            "journal.wal: {} rows of a group commit that did not complete (never sent)",
            journal.uncommitted_rows
        )?;
    }
    if journal.torn_bytes > 0 {
        writeln!(
            out,
            "journal.wal: {} bytes of a torn record after the last readable one",
            journal.torn_bytes
        )?;
    }
    if journal.unreadable_intents > 0 {
        writeln!(
            out,
            "journal.wal: {} intents of unfinished flushes this version cannot read (not counted above; the sidecar will not start on them)",
            journal.unreadable_intents
        )?;
    }
    Ok(())
}

fn row<const N: usize>(cells: [&str; N]) -> Vec<String> {
    cells.iter().map(|c| (*c).to_owned()).collect()
}

fn columns_text(sums: &Sums) -> String {
    sums.columns
        .iter()
        .map(|(c, s)| format!("{c}={s}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Writes rows as aligned columns; the columns in `right` are aligned right (numbers).
fn write_table(out: &mut impl Write, rows: &[Vec<String>], right: &[usize]) -> io::Result<()> {
    let width = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..width)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    for r in rows {
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, cell)| {
                if i + 1 == width {
                    cell.clone()
                } else if right.contains(&i) {
                    format!("{cell:>w$}", w = widths[i])
                } else {
                    format!("{cell:<w$}", w = widths[i])
                }
            })
            .collect();
        writeln!(out, "{}", cells.join("  ").trim_end())?;
    }
    Ok(())
}

fn list(common: &Common) -> Result<(), Output> {
    let dir = common.state_dir()?;
    let filter = common.filter()?;
    let json = common.format == "json";
    let mut out = io::BufWriter::new(io::stdout().lock());
    let mut failed: Option<io::Error> = None;
    outcomes::scan(&dir, |source, record| {
        if failed.is_some() || !filter.matches(record) {
            return;
        }
        let written = if json {
            write_json_line(&mut out, source, record)
        } else {
            writeln!(out, "{}", record_text(source, record))
        };
        if let Err(error) = written {
            failed = Some(error);
        }
    })
    .map_err(scan_failure)?;
    if let Some(error) = failed {
        return Err(error.into());
    }
    out.flush()?;
    Ok(())
}

fn write_json_line(out: &mut impl Write, source: Source, record: &WriteRecord) -> io::Result<()> {
    #[derive(serde::Serialize)]
    struct Listed<'a> {
        source: &'static str,
        #[serde(flatten)]
        record: &'a WriteRecord,
    }
    serde_json::to_writer(
        &mut *out,
        &Listed {
            source: source.as_str(),
            record,
        },
    )
    .map_err(io::Error::from)?;
    writeln!(out)
}

/// One line per record: time, outcome, source, family, table, day and minute (or
/// month), key, deltas, error kind, request id and row.
fn record_text(source: Source, r: &WriteRecord) -> String {
    let at = match (r.minute, &r.month) {
        (Some(minute), _) => format!("{} {:02}:{:02}", r.day, minute / 60, minute % 60),
        (None, _) => r.day.clone(),
    };
    let key: Vec<String> = r.key.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let deltas: Vec<String> = r.deltas.iter().map(|(c, d)| format!("{c}={d}")).collect();
    let shard = r.shard.map(|s| format!(" shard={s}")).unwrap_or_default();
    format!(
        "{} {} {} {} {} {} {}{} {} {} {}/{}",
        r.time,
        outcome_label(r.outcome),
        source.as_str(),
        r.family,
        r.table,
        at,
        key.join(","),
        shard,
        deltas.join(","),
        r.error.as_ref().map_or("-", |e| e.kind.as_str()),
        r.request_id,
        r.row
    )
}
