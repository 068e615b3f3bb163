//! The checker every crash test ends with. The product runs as it ships (its journal
//! starts over after every flush), so the checker takes nothing from the journal but
//! the last word: once the clean stop is done, no flush is left open in it. It
//! compares four independent views:
//!
//! - the model: what the test fed, per destination row (minute and day tables);
//! - the store: each row's counter;
//! - the store's request log: what each request carried, the fault that answered it,
//!   and whether it applied;
//! - countersink's records: `unknown*.jsonl`, `rejected*.jsonl`, the spill segments,
//!   matched to the request log by content (a request's rows and deltas).
//!
//! and asserts, per row: nothing stored beyond what was fed; the store's counters are
//! what the requests it applied carried; each fed delta is in at most one request that
//! may have applied (a request the store answered ambiguously, or one logged unknown
//! that never reached it, counts as applied: re-sending either breaks this even when
//! the store did not apply the second copy); every ambiguous answer is in
//! `unknown.jsonl`; every record is there once; what is missing from the store is
//! explained by unknown writes the store did not apply, rejected or spilled rows, and
//! (in total per granularity) by the lost-at-crash figures the starts after the kills
//! reported.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use countersink::state::journal;

use super::harness::Rig;
use crate::common::{cell, day_and_minute, table_sum};

const MINUTE_TABLE: &str = "metrics.views_by_minute";
const DAY_TABLE: &str = "metrics.views_by_day";

/// A destination row: table, page, day, minute of the day (-1 in the day table).
pub(crate) type RowKey = (String, String, String, i64);

/// What the test fed, per destination row.
#[derive(Default)]
pub(crate) struct Model {
    rows: BTreeMap<RowKey, i128>,
}

impl Model {
    pub(crate) fn feed(&mut self, page: u32, at: i64, delta: i64) {
        let (day, minute) = day_and_minute(at);
        let page = format!("p{page}");
        *self
            .rows
            .entry((MINUTE_TABLE.into(), page.clone(), day.clone(), minute))
            .or_default() += i128::from(delta);
        *self
            .rows
            .entry((DAY_TABLE.into(), page, day, -1))
            .or_default() += i128::from(delta);
    }

    /// The total fed.
    pub(crate) fn total(&self) -> i128 {
        self.rows
            .iter()
            .filter(|(k, _)| k.0 == MINUTE_TABLE)
            .map(|(_, v)| v)
            .sum()
    }
}

/// What the checker found.
#[derive(Debug, Default)]
pub(crate) struct Findings {
    /// Per granularity, what is missing from the store and explained by no record:
    /// what the kills lost from memory.
    pub(crate) unexplained: [i128; 2],
    /// The lost-at-crash figures reported, per granularity.
    pub(crate) bound: [i128; 2],
    /// Rows checked.
    pub(crate) rows: usize,
    /// Requests logged as unknown, and counter requests the store received.
    pub(crate) unknown_requests: usize,
    pub(crate) received: usize,
    /// Rows logged as unknown because they were in flight at a kill.
    pub(crate) in_flight_at_crash: usize,
}

impl Findings {
    /// How far the loss goes beyond what the starts reported (goal: 0).
    pub(crate) fn beyond_bound(&self) -> i128 {
        (0..2)
            .map(|g| (self.unexplained[g] - self.bound[g]).max(0))
            .max()
            .unwrap_or(0)
    }
}

fn granularity(table: &str) -> usize {
    if table == DAY_TABLE { 1 } else { 0 }
}

struct Record {
    row: RowKey,
    /// The request id and the row's index in it.
    id: (String, u64),
    delta: i128,
    kind: String,
}

fn read_records(state: &Path, prefix: &str) -> Vec<Record> {
    let mut names: Vec<String> = std::fs::read_dir(state)
        .expect("state")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(prefix) && n.ends_with(".jsonl") && !n.contains("corrupt"))
        .collect();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        for line in std::fs::read_to_string(state.join(&name))
            .expect("log")
            .lines()
        {
            if line.starts_with("{\"spill_segment\"") || line.is_empty() {
                continue;
            }
            let r: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{name}: unreadable line {line}: {e}"));
            let table = r["table"].as_str().expect("table").to_owned();
            let minute = r["minute"].as_i64().unwrap_or(-1);
            out.push(Record {
                row: (
                    table,
                    r["key"]["page_id"].as_str().expect("page").to_owned(),
                    r["day"].as_str().expect("day").to_owned(),
                    minute,
                ),
                id: (
                    r["request_id"].as_str().expect("request id").to_owned(),
                    r["row"].as_u64().expect("row"),
                ),
                delta: i128::from(r["deltas"]["views"].as_i64().unwrap_or(0)),
                kind: r["error"]["kind"].as_str().unwrap_or("").to_owned(),
            });
        }
    }
    out
}

/// A request's content: its rows with their `views` deltas, sorted.
type Fingerprint = Vec<(RowKey, i128)>;

/// Runs every check on a crash rig.
pub(crate) fn check(rig: &Rig) -> Findings {
    check_views(rig.server(), rig.state(), &rig.model, rig.lost_bound)
}

/// How the store answered a request, as the client can tell.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// Its own reply, in time (no fault, or a reply sent late but well inside the
    /// request timeout the rigs use).
    Replied,
    /// An error that proves the write was not applied: countersink sends it again.
    NotApplied,
    /// An error or silence that leaves the outcome unknown: countersink logs it, never
    /// sends it again.
    Ambiguous,
}

fn answer(fault: Option<(cqlsim::FaultKind, bool)>) -> Answer {
    use cqlsim::FaultKind::{Bootstrapping, Delay, Unavailable};
    match fault {
        None | Some((Delay, _)) => Answer::Replied,
        // The rigs run the Cassandra persona: `Unavailable` is checked before applying.
        Some((Unavailable | Bootstrapping, false)) => Answer::NotApplied,
        Some(_) => Answer::Ambiguous,
    }
}

/// One counter request the store received.
struct Receipt {
    fingerprint: Fingerprint,
    answer: Answer,
    applied: bool,
}

fn receipts(server: &cqlsim::Server) -> Vec<Receipt> {
    let mut out = Vec::new();
    for request in server.request_log() {
        if request.statements.is_empty()
            || matches!(request.fault, Some((cqlsim::FaultKind::Unprepared, _)))
        {
            continue; // answered UNPREPARED, not executed; the driver prepares and sends again
        }
        if request
            .statements
            .iter()
            .any(|s| s.table == "delta_ledger" || s.table == "outcomes")
        {
            continue; // the exact families' regular tables: idempotent, re-sent by design
        }
        let mut fingerprint: Fingerprint = request
            .statements
            .iter()
            .map(|s| {
                let text = |k: &str| s.values.get(k).map(|v| v.trim_matches('\'').to_owned());
                let table = format!("{}.{}", s.keyspace, s.table);
                let minute = text("minute").map_or(-1, |m| m.parse().expect("minute"));
                (
                    (
                        table,
                        text("page_id").expect("page"),
                        text("day").expect("day"),
                        minute,
                    ),
                    text("views").map_or(0, |v| v.parse().expect("delta")),
                )
            })
            .collect();
        fingerprint.sort();
        out.push(Receipt {
            fingerprint,
            answer: answer(request.fault),
            applied: request.applied,
        });
    }
    out
}

/// The unknown records as requests: their content, by request id.
fn unknown_requests(unknown: &[Record]) -> Vec<Fingerprint> {
    let mut by_id: BTreeMap<&str, Fingerprint> = BTreeMap::new();
    for record in unknown {
        by_id
            .entry(&record.id.0)
            .or_default()
            .push((record.row.clone(), record.delta));
    }
    by_id
        .into_values()
        .map(|mut f| {
            f.sort();
            f
        })
        .collect()
}

/// Per row, sums over requests of one content taken `times` times.
fn add(sums: &mut HashMap<RowKey, i128>, fingerprint: &Fingerprint, times: u64) {
    for (row, delta) in fingerprint {
        *sums.entry(row.clone()).or_default() += delta * i128::from(times);
    }
}

/// Per content, what the store's log and the unknown records say of its requests.
#[derive(Default)]
struct Tally {
    /// Requests with this content in `unknown.jsonl`.
    unknown: u64,
    /// Receipts the store answered ambiguously, and those of them it applied.
    ambiguous: u64,
    ambiguous_applied: u64,
    /// Receipts answered in time that applied (acknowledged, unless a kill came first).
    replied_applied: u64,
    /// Receipts answered with an error that proves nothing applied.
    not_applied: u64,
}

/// Runs every check on writes of the `views` family; `bound` is what the starts after
/// kills reported lost (per granularity). Panics with the row and the numbers on the
/// first violation.
pub(crate) fn check_views(
    server: &cqlsim::Server,
    state: &Path,
    model: &Model,
    bound: [i128; 2],
) -> Findings {
    let mut findings = Findings {
        bound,
        ..Findings::default()
    };

    // The journal as shipped keeps only the flush in progress: after a clean stop, none.
    let groups = journal::read(&state.join("journal.wal")).expect("journal");
    assert!(
        groups.iter().all(|g| g.ended || !g.committed),
        "a flush is left open in the journal after the clean stop: {:?}",
        groups.iter().map(|g| &g.flush).collect::<Vec<_>>()
    );

    // The records, each once.
    let unknown = read_records(state, "unknown.");
    let rejected = read_records(state, "rejected.");
    let spilled = read_records(state, "spill.");
    let mut seen = HashSet::new();
    for record in unknown.iter().chain(&rejected).chain(&spilled) {
        assert!(
            seen.insert(record.id.clone()),
            "record {:?} is in the state directory twice",
            record.id
        );
    }
    findings.in_flight_at_crash = unknown
        .iter()
        .filter(|r| r.kind == "in_flight_at_crash")
        .count();

    // The store's request log and the unknown requests, matched by content.
    let receipts = receipts(server);
    findings.received = receipts.len();
    let unknown_by_content = unknown_requests(&unknown);
    findings.unknown_requests = unknown_by_content.len();
    let mut tallies: HashMap<Fingerprint, Tally> = HashMap::new();
    for fingerprint in unknown_by_content {
        tallies.entry(fingerprint).or_default().unknown += 1;
    }
    let mut stored_by_log: HashMap<RowKey, i128> = HashMap::new();
    for receipt in &receipts {
        if receipt.applied {
            add(&mut stored_by_log, &receipt.fingerprint, 1);
        }
        let tally = tallies.entry(receipt.fingerprint.clone()).or_default();
        match (receipt.answer, receipt.applied) {
            (Answer::Ambiguous, applied) => {
                tally.ambiguous += 1;
                tally.ambiguous_applied += u64::from(applied);
            }
            (Answer::Replied, true) => tally.replied_applied += 1,
            (Answer::Replied, false) => {}
            (Answer::NotApplied, applied) => {
                assert!(!applied, "a request proved not applied was applied");
                tally.not_applied += 1;
            }
        }
    }
    // Per row: deltas in requests that may have applied; deltas of unknown requests
    // that applied, at least (proved by an ambiguous answer) and at most (an
    // acknowledged-looking one may have been cut off by a kill).
    let mut maybe: HashMap<RowKey, i128> = HashMap::new();
    let mut unknown_applied_min: HashMap<RowKey, i128> = HashMap::new();
    let mut unknown_applied_max: HashMap<RowKey, i128> = HashMap::new();
    for (fingerprint, t) in &tallies {
        assert!(
            t.ambiguous <= t.unknown,
            "the store answered {} requests carrying {fingerprint:?} ambiguously, unknown.jsonl holds {}",
            t.ambiguous,
            t.unknown
        );
        let received_maybe = t.ambiguous + t.replied_applied;
        // An unknown request the store never received (cut off, or in flight at a kill).
        let unreceived = t.unknown.saturating_sub(received_maybe);
        add(&mut maybe, fingerprint, received_maybe + unreceived);
        add(&mut unknown_applied_min, fingerprint, t.ambiguous_applied);
        add(
            &mut unknown_applied_max,
            fingerprint,
            t.unknown.min(t.ambiguous_applied + t.replied_applied),
        );
    }
    let sum_by_row = |records: &[Record]| {
        let mut sums: HashMap<RowKey, i128> = HashMap::new();
        for r in records {
            *sums.entry(r.row.clone()).or_default() += r.delta;
        }
        sums
    };
    let (unknown, rejected, spilled) = (
        sum_by_row(&unknown),
        sum_by_row(&rejected),
        sum_by_row(&spilled),
    );

    // Per row.
    let mut stored_total = [0_i128; 2];
    for (row, fed) in &model.rows {
        findings.rows += 1;
        let (table, page, day, minute) = row;
        let condition = if *minute >= 0 {
            format!("page_id = '{page}' AND day = '{day}' AND minute = {minute}")
        } else {
            format!(
                "page_id = '{page}' AND month = '{}' AND day = '{day}'",
                &day[..7]
            )
        };
        let stored = i128::from(cell(server, table, "views", &condition).unwrap_or(0));
        stored_total[granularity(table)] += stored;
        let get = |m: &HashMap<RowKey, i128>| m.get(row).copied().unwrap_or(0);
        assert!(stored <= *fed, "{row:?}: stored {stored} > fed {fed}");
        assert_eq!(
            stored,
            get(&stored_by_log),
            "{row:?}: the counter is not what the requests the store applied carried"
        );
        assert!(
            get(&maybe) <= *fed,
            "{row:?}: {} in requests that may have applied, fed {fed}: a delta was sent twice",
            get(&maybe)
        );
        let unexplained = |unknown_applied: i128| {
            fed - stored - (get(&unknown) - unknown_applied) - get(&rejected) - get(&spilled)
        };
        let (least, most) = (
            unexplained(get(&unknown_applied_min)),
            unexplained(get(&unknown_applied_max)),
        );
        assert!(
            most >= 0,
            "{row:?}: fed {fed}, stored {stored}, unknown {}, rejected {}, spilled {}: a delta is explained twice",
            get(&unknown),
            get(&rejected),
            get(&spilled)
        );
        findings.unexplained[granularity(table)] += least.max(0);
    }
    for (g, table) in [MINUTE_TABLE, DAY_TABLE].into_iter().enumerate() {
        assert_eq!(
            table_sum(server, table, "views"),
            stored_total[g],
            "{table} holds rows nobody fed"
        );
    }
    for g in 0..2 {
        assert!(
            findings.unexplained[g] <= findings.bound[g],
            "{findings:?}: more lost than the starts after the kills reported"
        );
    }
    findings
}
