//! Deterministic fault injection. A fault is a [`FaultRule`]: a kind (what happens), whether
//! the write is applied before it happens, a filter (table, opcode, reads/writes) and a trigger
//! (always, every Nth match, or a probability drawn from a generator seeded by `--seed`).
//! Rules are checked in order; the first that fires decides. The grammar of `--fault` is in
//! the README and in [`FaultRule::from_str`].

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::error::Error;

/// What an injected fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// ERROR 0x1100 WriteTimeout (write_type COUNTER for counter writes); on reads, 0x1200.
    WriteTimeout,
    /// ERROR 0x1200 ReadTimeout.
    ReadTimeout,
    /// ERROR 0x1500 WriteFailure (v4 body with numfailures).
    WriteFailure,
    /// ERROR 0x1000 Unavailable. Not applied (Apache Cassandra checks replicas first),
    /// unless `applied=yes`, or on a counter write under the ScyllaDB persona (its
    /// counter leader applies, then checks).
    Unavailable,
    /// ERROR 0x1001 Overloaded.
    Overloaded,
    /// ERROR 0x0000 ServerError.
    ServerError,
    /// ERROR 0x1002 IsBootstrapping; never applied.
    Bootstrapping,
    /// The reply is sent late (the statement runs normally).
    Delay,
    /// No reply at all; the client times out.
    NoReply,
    /// The server closes the connection instead of replying.
    Close,
    /// The prepared-statement cache is lost just before this request (as after a restart):
    /// the client gets UNPREPARED and re-prepares.
    Unprepared,
    /// The node goes down: every connection is dropped and new ones are refused, for `for=`
    /// or until the API brings it back.
    Down,
}

impl FaultKind {
    const ALL: [(FaultKind, &'static str); 12] = [
        (FaultKind::WriteTimeout, "write-timeout"),
        (FaultKind::ReadTimeout, "read-timeout"),
        (FaultKind::WriteFailure, "write-failure"),
        (FaultKind::Unavailable, "unavailable"),
        (FaultKind::Overloaded, "overloaded"),
        (FaultKind::ServerError, "server-error"),
        (FaultKind::Bootstrapping, "bootstrapping"),
        (FaultKind::Delay, "delay"),
        (FaultKind::NoReply, "no-reply"),
        (FaultKind::Close, "close"),
        (FaultKind::Unprepared, "unprepared"),
        (FaultKind::Down, "down"),
    ];

    /// The name used in `--fault` specs and in `cqlsim.fault_stats`.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(k, _)| *k == self)
            .map_or("?", |(_, n)| n)
    }

    /// Kinds that by definition never apply the write.
    fn never_applies(self) -> bool {
        matches!(self, FaultKind::Bootstrapping | FaultKind::Unprepared)
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Request opcodes a rule can be limited to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// QUERY.
    Query,
    /// EXECUTE.
    Execute,
    /// BATCH.
    Batch,
    /// PREPARE.
    Prepare,
}

/// Which statements a rule looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// INSERT/UPDATE/DELETE and batches (the default).
    Writes,
    /// SELECTs.
    Reads,
    /// Any statement, including those on system tables.
    All,
}

/// When a matching request triggers the fault.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Trigger {
    /// Every match.
    Always,
    /// Every Nth match (the Nth, 2Nth, ...).
    EveryNth(u64),
    /// Each match with this probability, from the seeded generator.
    Probability(f64),
}

/// One fault rule. Build with [`FaultRule::new`] and the setters, or parse a `--fault` spec.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultRule {
    /// What happens.
    pub kind: FaultKind,
    /// Apply the statement before failing (the "applied but the client does not know" case).
    pub applied: bool,
    /// Only requests touching this table: `ks.table`, or `table` in any keyspace. Without it,
    /// only requests on user (non-system) tables match, so the drivers' metadata queries are
    /// never hit by accident.
    pub table: Option<String>,
    /// Only these opcodes (empty: QUERY, EXECUTE and BATCH).
    pub ops: Vec<Op>,
    /// Reads, writes or all statements.
    pub target: Target,
    /// When it fires.
    pub trigger: Trigger,
    /// Skip the first N matching requests.
    pub after: u64,
    /// Fire at most this many times.
    pub max: Option<u64>,
    /// Delay for `Delay`; downtime for `Down` (`None`: until `node_up`).
    pub duration: Option<Duration>,
    /// For `Delay` on a write: run it when the delay ends instead of at arrival, then answer
    /// (`execute=late`): a write that reaches the replica after writes sent later.
    pub late: bool,
}

impl FaultRule {
    /// A rule that fires on every matching write, not applied.
    pub fn new(kind: FaultKind) -> FaultRule {
        FaultRule {
            kind,
            applied: false,
            table: None,
            ops: Vec::new(),
            target: Target::Writes,
            trigger: Trigger::Always,
            after: 0,
            max: None,
            duration: None,
            late: false,
        }
    }

    /// Sets [`FaultRule::applied`].
    pub fn applied(mut self, yes: bool) -> Self {
        self.applied = yes;
        self
    }

    /// Sets [`FaultRule::table`].
    pub fn table(mut self, t: &str) -> Self {
        self.table = Some(t.to_owned());
        self
    }

    /// Adds an opcode to [`FaultRule::ops`].
    pub fn op(mut self, op: Op) -> Self {
        self.ops.push(op);
        self
    }

    /// Sets [`FaultRule::target`].
    pub fn target(mut self, t: Target) -> Self {
        self.target = t;
        self
    }

    /// Fires on every Nth match.
    pub fn every(mut self, n: u64) -> Self {
        self.trigger = Trigger::EveryNth(n.max(1));
        self
    }

    /// Fires with probability `p`.
    pub fn probability(mut self, p: f64) -> Self {
        self.trigger = Trigger::Probability(p.clamp(0.0, 1.0));
        self
    }

    /// Sets [`FaultRule::after`].
    pub fn after(mut self, n: u64) -> Self {
        self.after = n;
        self
    }

    /// Sets [`FaultRule::max`].
    pub fn max(mut self, n: u64) -> Self {
        self.max = Some(n);
        self
    }

    /// Sets [`FaultRule::duration`].
    pub fn duration(mut self, d: Duration) -> Self {
        self.duration = Some(d);
        self
    }

    /// Sets [`FaultRule::late`].
    pub fn late(mut self, yes: bool) -> Self {
        self.late = yes;
        self
    }
}

/// Parses `KIND[,key=value]...`, e.g. `write-timeout,applied=yes,table=ks.counts,every=3`.
impl FromStr for FaultRule {
    type Err = Error;

    fn from_str(spec: &str) -> Result<Self, Error> {
        let bad = |reason: String| Error::FaultSpec {
            spec: spec.to_owned(),
            reason,
        };
        let mut parts = spec.split(',').map(str::trim);
        let kind_name = parts.next().unwrap_or_default();
        let kind = FaultKind::ALL
            .iter()
            .find(|(_, n)| *n == kind_name)
            .map(|(k, _)| *k)
            .ok_or_else(|| {
                bad(format!(
                    "unknown kind {kind_name:?} (one of: {})",
                    FaultKind::ALL.map(|(_, n)| n).join(", ")
                ))
            })?;
        let mut r = FaultRule::new(kind);
        for part in parts {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("{part:?} is not key=value")))?;
            let num = |v: &str| {
                v.parse::<u64>()
                    .map_err(|_| bad(format!("{k}={v}: not a whole number")))
            };
            match k {
                "applied" => {
                    r.applied = match v {
                        "yes" | "true" => true,
                        "no" | "false" => false,
                        _ => return Err(bad(format!("applied={v}: use yes or no"))),
                    }
                }
                "table" => r.table = Some(v.to_owned()),
                "op" => {
                    for o in v.split('|') {
                        r.ops.push(match o {
                            "query" => Op::Query,
                            "execute" => Op::Execute,
                            "batch" => Op::Batch,
                            "prepare" => Op::Prepare,
                            _ => {
                                return Err(bad(format!(
                                    "op={o}: use query, execute, batch or prepare"
                                )));
                            }
                        });
                    }
                }
                "on" => {
                    r.target = match v {
                        "writes" => Target::Writes,
                        "reads" => Target::Reads,
                        "all" => Target::All,
                        _ => return Err(bad(format!("on={v}: use writes, reads or all"))),
                    }
                }
                "every" => r.trigger = Trigger::EveryNth(num(v)?.max(1)),
                "p" => {
                    let p: f64 = v.parse().map_err(|_| bad(format!("p={v}: not a number")))?;
                    if !(0.0..=1.0).contains(&p) {
                        return Err(bad(format!("p={v}: must be between 0 and 1")));
                    }
                    r.trigger = Trigger::Probability(p);
                }
                "after" => r.after = num(v)?,
                "max" => r.max = Some(num(v)?),
                "for" => {
                    r.duration = Some(
                        parse_duration(v)
                            .ok_or_else(|| bad(format!("for={v}: use e.g. 250ms, 2s, 1m")))?,
                    )
                }
                "execute" => {
                    r.late = match v {
                        "late" => true,
                        "now" => false,
                        _ => return Err(bad(format!("execute={v}: use late or now"))),
                    }
                }
                _ => return Err(bad(format!("unknown key {k:?}"))),
            }
        }
        if r.late && kind != FaultKind::Delay {
            return Err(bad(format!("execute=late is for delay, not {kind_name}")));
        }
        if r.applied && kind.never_applies() {
            return Err(bad(format!(
                "{kind_name} never applies the write; drop applied=yes"
            )));
        }
        if kind == FaultKind::Delay && r.duration.is_none() {
            return Err(bad("delay needs for=DURATION".into()));
        }
        Ok(r)
    }
}

/// `250ms`, `2s`, `1m`.
pub(crate) fn parse_duration(s: &str) -> Option<Duration> {
    let split = s.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse().ok()?;
    match unit {
        "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        "m" => Some(Duration::from_secs(n.checked_mul(60)?)),
        _ => None,
    }
}

/// What the connection knows about a request when asking whether a fault fires.
#[derive(Debug, Clone)]
pub(crate) struct RequestInfo {
    pub(crate) op: Op,
    /// `(keyspace, table)` touched.
    pub(crate) tables: Vec<(String, String)>,
    pub(crate) is_write: bool,
    pub(crate) is_read: bool,
    /// EXECUTE, or a BATCH with a prepared entry.
    pub(crate) uses_prepared: bool,
}

/// The rules in force plus their counters and the seeded generator.
#[derive(Debug)]
pub(crate) struct FaultSet {
    rules: Vec<(FaultRule, u64, u64)>, // rule, matches, fired
    rng: u64,
}

impl FaultSet {
    pub(crate) fn new(rules: Vec<FaultRule>, seed: u64) -> FaultSet {
        FaultSet {
            rules: rules.into_iter().map(|r| (r, 0, 0)).collect(),
            rng: seed,
        }
    }

    /// Replaces the rules; counters restart, the generator continues.
    pub(crate) fn replace(&mut self, rules: Vec<FaultRule>) {
        self.rules = rules.into_iter().map(|r| (r, 0, 0)).collect();
    }

    pub(crate) fn push(&mut self, rule: FaultRule) {
        self.rules.push((rule, 0, 0));
    }

    pub(crate) fn rules(&self) -> Vec<FaultRule> {
        self.rules.iter().map(|(r, _, _)| r.clone()).collect()
    }

    /// splitmix64: tiny, deterministic, good enough for test probabilities.
    fn next_f64(&mut self) -> f64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The first rule that matches and fires, if any.
    pub(crate) fn decide(&mut self, req: &RequestInfo) -> Option<FaultRule> {
        for i in 0..self.rules.len() {
            if !matches(&self.rules[i].0, req) {
                continue;
            }
            self.rules[i].1 += 1;
            let (rule, matched, fired) = &self.rules[i];
            if *matched <= rule.after || rule.max.is_some_and(|m| *fired >= m) {
                continue;
            }
            let n = *matched - rule.after;
            let fire = match rule.trigger {
                Trigger::Always => true,
                Trigger::EveryNth(k) => n % k.max(1) == 0,
                Trigger::Probability(p) => self.next_f64() < p,
            };
            if fire {
                self.rules[i].2 += 1;
                return Some(self.rules[i].0.clone());
            }
        }
        None
    }
}

fn matches(r: &FaultRule, req: &RequestInfo) -> bool {
    let op_ok = if r.ops.is_empty() {
        req.op != Op::Prepare
    } else {
        r.ops.contains(&req.op)
    };
    if !op_ok || (r.kind == FaultKind::Unprepared && !req.uses_prepared) {
        return false;
    }
    if req.op != Op::Prepare {
        let target_ok = match r.target {
            Target::Writes => req.is_write,
            Target::Reads => req.is_read,
            Target::All => true,
        };
        if !target_ok {
            return false;
        }
    }
    match &r.table {
        Some(want) => req.tables.iter().any(|(ks, t)| match want.split_once('.') {
            Some((wk, wt)) => wk == ks && wt == t,
            None => want == t,
        }),
        None => {
            r.target == Target::All
                || req
                    .tables
                    .iter()
                    .any(|(ks, _)| !crate::exec::is_system_keyspace(ks))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(table: &str) -> RequestInfo {
        RequestInfo {
            op: Op::Execute,
            tables: vec![("ks".into(), table.into())],
            is_write: true,
            is_read: false,
            uses_prepared: true,
        }
    }

    #[test]
    fn grammar() {
        let r: FaultRule =
            "write-timeout,applied=yes,table=ks.c,op=execute|batch,every=3,after=1,max=2"
                .parse()
                .expect("parses");
        assert_eq!(r.kind, FaultKind::WriteTimeout);
        assert!(r.applied);
        assert_eq!(r.ops, vec![Op::Execute, Op::Batch]);
        assert_eq!(r.trigger, Trigger::EveryNth(3));
        assert_eq!((r.after, r.max), (1, Some(2)));
        let d: FaultRule = "delay,for=250ms,p=0.5".parse().expect("parses");
        assert_eq!(d.duration, Some(Duration::from_millis(250)));
        for bad in [
            "nope",
            "delay",
            "close,every=x",
            "close,p=2",
            "close,foo=1",
            "close,applied",
        ] {
            assert!(bad.parse::<FaultRule>().is_err(), "{bad}");
        }
    }

    #[test]
    fn every_nth_after_and_max() {
        let mut set = FaultSet::new(
            vec![FaultRule::new(FaultKind::Close).every(2).after(1).max(2)],
            7,
        );
        let fired: Vec<bool> = (0..9).map(|_| set.decide(&write("t")).is_some()).collect();
        // matches 2..: n = 1,2,3,4,... fires on even n, at most twice.
        assert_eq!(
            fired,
            [false, false, true, false, true, false, false, false, false]
        );
    }

    #[test]
    fn probability_is_deterministic_per_seed() {
        let run = |seed| {
            let mut s = FaultSet::new(
                vec![FaultRule::new(FaultKind::Overloaded).probability(0.3)],
                seed,
            );
            (0..64)
                .map(|_| s.decide(&write("t")).is_some())
                .collect::<Vec<_>>()
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
        let hits = run(1).iter().filter(|x| **x).count();
        assert!((5..=35).contains(&hits), "{hits}");
    }

    #[test]
    fn table_filter_and_system_tables() {
        let mut s = FaultSet::new(vec![FaultRule::new(FaultKind::Close).table("ks.a")], 0);
        assert!(s.decide(&write("b")).is_none());
        assert!(s.decide(&write("a")).is_some());
        let mut s = FaultSet::new(
            vec![FaultRule::new(FaultKind::Close).target(Target::Reads)],
            0,
        );
        let mut sys = write("local");
        sys.tables = vec![("system".into(), "local".into())];
        sys.is_write = false;
        sys.is_read = true;
        assert!(
            s.decide(&sys).is_none(),
            "metadata reads are left alone by default"
        );
    }
}
