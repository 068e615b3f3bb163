//! The checker every crash test ends with. It compares five independent views:
//!
//! - the model: what the test fed, per destination row (minute and day tables);
//! - the store: each row's counter;
//! - the store's request log: what each request carried and whether it applied;
//! - countersink's journal (kept whole for tests): every request id, its rows, its outcome;
//! - countersink's records: `unknown*.jsonl`, `rejected*.jsonl`, the spill segments.
//!
//! and asserts, per row: nothing stored beyond what was fed or sent; everything
//! acknowledged is stored; each fed delta is in at most one request that may have
//! applied (a re-sent unknown write breaks this even when the store did not apply it);
//! every record is there once; what is missing from the store is explained by unknown
//! writes the store did not apply, rejected or spilled rows, and (in total per
//! granularity) by the lost-at-crash figures the starts after the kills reported.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use countersink::bucket::{Day, Minute};
use countersink::state::journal::{self, Settled};
use countersink::vocabulary::Granularity;

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
    /// Requests in the journal, and those the store received.
    pub(crate) requests: usize,
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

fn date_of(day: Day) -> String {
    countersink::bucket::format_date(day.date())
}

/// Runs every check on a crash rig.
pub(crate) fn check(rig: &Rig) -> Findings {
    check_views(rig.server(), rig.state(), &rig.model, rig.lost_bound)
}

/// Error kinds that only the store returns: a request that ended so reached it.
const FROM_THE_STORE: [&str; 18] = [
    "syntax_error",
    "invalid",
    "already_exists",
    "function_failure",
    "authentication",
    "unauthorized",
    "config_error",
    "protocol_error",
    "unavailable",
    "bootstrapping",
    "write_timeout",
    "write_failure",
    "read_timeout",
    "read_failure",
    "overloaded",
    "server_error",
    "truncate_error",
    "rate_limited",
];

/// Error kinds of requests that may or may not have reached the store.
const MAYBE_REACHED: [&str; 7] = [
    "connection_broken",
    "client_timeout",
    "response_unreadable",
    "response_unexpected",
    "cancelled_at_deadline",
    "other_db_error",
    "unclassified",
];

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

    // The journal: request ids, rows, outcomes.
    let groups = journal::read(&state.join("journal.wal")).expect("journal");
    let mut applied: HashMap<RowKey, i128> = HashMap::new();
    let mut maybe: HashMap<RowKey, i128> = HashMap::new();
    // Per content: (acknowledged, may have applied, surely reached the store, may have).
    let mut sent: HashMap<Fingerprint, (u64, u64, u64, u64)> = HashMap::new();
    let mut must_be_unknown: Vec<(String, u64)> = Vec::new();
    let mut must_be_rejected: Vec<(String, u64)> = Vec::new();
    for group in &groups {
        assert!(
            group.ended,
            "every flush ends, by itself or by recovery: {:?}",
            group.flush
        );
        if !group.committed {
            continue;
        }
        for intent in &group.intents {
            findings.requests += 1;
            let family = group
                .family(intent.family)
                .expect("family in the dictionary");
            let table = family.table(intent.table).to_owned();
            let page = countersink::series::fields(&intent.series)
                .next()
                .expect("page")
                .to_owned();
            let views = family
                .columns
                .iter()
                .position(|c| c == "views")
                .expect("views");
            let mut fingerprint: Fingerprint = Vec::new();
            for row in &intent.rows {
                let (day, minute) = match intent.table {
                    Granularity::Minute => (
                        date_of(Minute(row.bucket).day()),
                        i64::from(Minute(row.bucket).minute_of_day()),
                    ),
                    Granularity::Day => (date_of(Day(row.bucket)), -1),
                };
                fingerprint.push((
                    (table.clone(), page.clone(), day, minute),
                    i128::from(row.deltas[views]),
                ));
            }
            fingerprint.sort();
            let outcome = group.outcomes.get(&intent.request);
            let entry = sent.entry(fingerprint.clone()).or_default();
            let request_id = group.flush.request_id(intent.request);
            let reached = |kind: &str, entry: &mut (u64, u64, u64, u64)| {
                if FROM_THE_STORE.contains(&kind) {
                    entry.2 += 1;
                } else if MAYBE_REACHED.contains(&kind) {
                    entry.3 += 1;
                }
            };
            match outcome {
                Some(Settled::Applied) => {
                    entry.0 += 1;
                    entry.1 += 1;
                    entry.2 += 1;
                    for (row, delta) in &fingerprint {
                        *applied.entry(row.clone()).or_default() += delta;
                        *maybe.entry(row.clone()).or_default() += delta;
                    }
                }
                Some(Settled::Unknown { .. }) | None => {
                    entry.1 += 1;
                    match outcome {
                        Some(Settled::Unknown { kind, .. }) => reached(kind, entry),
                        _ => entry.3 += 1, // in flight at a kill
                    }
                    for (row, delta) in &fingerprint {
                        *maybe.entry(row.clone()).or_default() += delta;
                    }
                    for i in 0..intent.rows.len() {
                        must_be_unknown.push((request_id.clone(), i as u64));
                    }
                }
                Some(Settled::Rejected { kind, .. }) => {
                    reached(kind, entry);
                    for i in 0..intent.rows.len() {
                        must_be_rejected.push((request_id.clone(), i as u64));
                    }
                }
                Some(Settled::NotApplied { kind, .. }) => reached(kind, entry),
                // Dropped: not applied, perhaps sent (it failed, then could not be spilled).
                Some(Settled::Dropped) => entry.3 += 1,
                Some(Settled::NotStarted) => {}
            }
        }
    }

    // The store's request log, matched by content.
    let mut received: HashMap<Fingerprint, (u64, u64)> = HashMap::new(); // (received, applied)
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
        findings.received += 1;
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
        let entry = received.entry(fingerprint).or_default();
        entry.0 += 1;
        entry.1 += u64::from(request.applied);
    }
    for (fingerprint, (recv, stored)) in &received {
        let (acked, may, surely, perhaps) = sent.get(fingerprint).copied().unwrap_or_default();
        assert!(
            *recv <= surely + perhaps,
            "the store received {recv} requests carrying {fingerprint:?}, countersink sent at most {}: a request was sent twice (or behind its back)",
            surely + perhaps
        );
        assert!(
            stored <= &may,
            "the store applied {stored} requests carrying {fingerprint:?}, only {may} may have applied"
        );
        assert!(
            acked <= *stored,
            "{acked} requests carrying {fingerprint:?} were acknowledged, the store applied {stored}"
        );
    }
    for (fingerprint, (acked, _, surely, _)) in &sent {
        let (recv, stored) = received.get(fingerprint).copied().unwrap_or_default();
        assert!(
            *acked <= stored,
            "{acked} acknowledged requests carrying {fingerprint:?}, the store applied {stored}"
        );
        assert!(
            *surely <= recv,
            "{surely} requests carrying {fingerprint:?} ended with the store's own answer, it received {recv}"
        );
    }

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
    let unknown_ids: HashSet<_> = unknown.iter().map(|r| r.id.clone()).collect();
    let rejected_ids: HashSet<_> = rejected.iter().map(|r| r.id.clone()).collect();
    for id in &must_be_unknown {
        assert!(
            unknown_ids.contains(id),
            "request row {id:?} may have applied and is not in unknown.jsonl"
        );
    }
    for id in &must_be_rejected {
        assert!(
            rejected_ids.contains(id),
            "request row {id:?} was rejected and is not in rejected.jsonl"
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
        let (acked, may) = (get(&applied), get(&maybe));
        assert!(stored <= *fed, "{row:?}: stored {stored} > fed {fed}");
        assert!(
            stored >= acked,
            "{row:?}: stored {stored} < acknowledged {acked}"
        );
        assert!(stored <= may, "{row:?}: stored {stored} > sent {may}");
        assert!(
            may <= *fed,
            "{row:?}: {may} in requests that may have applied, fed {fed}: a delta was sent twice"
        );
        let unknown_not_applied = get(&unknown) - (stored - acked);
        assert!(
            unknown_not_applied >= 0,
            "{row:?}: the store holds {} beyond acknowledged writes, unknown records explain {}",
            stored - acked,
            get(&unknown)
        );
        let unexplained = fed - stored - unknown_not_applied - get(&rejected) - get(&spilled);
        assert!(
            unexplained >= 0,
            "{row:?}: fed {fed}, stored {stored}, unknown {}, rejected {}, spilled {}: a delta is explained twice",
            get(&unknown),
            get(&rejected),
            get(&spilled)
        );
        findings.unexplained[granularity(table)] += unexplained;
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
