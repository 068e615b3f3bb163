//! Running PREPARE, QUERY, EXECUTE and BATCH: statistics, fault decisions, execution under the
//! database lock, and the reply.

use std::sync::Arc;

use super::{Action, Conn, Work, prepared_id};
use crate::cql::ast::{Parsed, Using};
use crate::error::{Consistency, CqlError};
use crate::exec::bind::Bindings;
use crate::exec::{self, BatchItem, Effects, Outcome, Paging};
use crate::faults::{FaultKind, Op};
use crate::proto::request::BatchKind;
use crate::proto::response;
use crate::proto::wire::BoundValue;
use crate::requests::LoggedStatement;
use crate::server::{Prepared, Shared};
use crate::value::Value;

impl Conn {
    pub(super) fn prepare(&mut self, v: u8, stream: i16, q: String) -> Action {
        let mut frame = Vec::new();
        let parsed = match crate::cql::parse(&q) {
            Ok(p) => p,
            Err(e) => {
                response::error(&mut frame, v, stream, &e);
                return Action::Reply(frame);
            }
        };
        let info = self.info_of(
            Op::Prepare,
            &[(&parsed, self.keyspace.as_deref())],
            None,
            false,
        );
        let fault = self.decide(&info);
        if let Some(a) = fault
            .as_ref()
            .and_then(|r| self.before(r, &info, v, stream, Consistency::ONE))
        {
            return a;
        }
        let meta = {
            let db = self.sh.db.lock();
            let view = self.sh.sys_view(self.local_ip);
            exec::prepare::analyze(&db, &parsed, self.keyspace.as_deref()).and_then(|m| {
                exec::validate(&db, &parsed, self.keyspace.as_deref(), &view).map(|()| m)
            })
        };
        match meta {
            Ok(meta) => {
                let id = prepared_id(self.keyspace.as_deref(), &q);
                self.sh.prepared.lock().insert(
                    id,
                    Arc::new(Prepared {
                        keyspace: self.keyspace.clone(),
                        parsed,
                        plans: Default::default(),
                    }),
                );
                response::prepared(&mut frame, v, stream, &id, &meta);
            }
            Err(e) => response::error(&mut frame, v, stream, &e),
        }
        self.after(fault, &info, false, frame, v, stream, Consistency::ONE)
    }

    pub(super) fn run(&mut self, v: u8, stream: i16, op: Op, work: Work) -> Action {
        let cl = match &work {
            Work::Single(_, p) => p.consistency.unwrap_or(Consistency::ONE),
            Work::Batch(..) => Consistency::ONE,
        };
        self.run_with_cl(v, stream, op, work, cl)
    }

    pub(super) fn run_with_cl(
        &mut self,
        v: u8,
        stream: i16,
        op: Op,
        work: Work,
        cl: Consistency,
    ) -> Action {
        let (items, frame_kind): (Vec<(&Parsed, Option<&str>)>, Option<BatchKind>) = match &work {
            Work::Single(it, _) => (vec![(&it.prep.parsed, it.prep.keyspace.as_deref())], None),
            Work::Batch(k, its, _) => (
                its.iter()
                    .map(|i| (&i.prep.parsed, i.prep.keyspace.as_deref()))
                    .collect(),
                Some(*k),
            ),
        };
        let uses_prepared = match &work {
            Work::Single(it, _) => it.id.is_some(),
            Work::Batch(_, its, _) => its.iter().any(|i| i.id.is_some()),
        };
        let info = self.info_of(op, &items, frame_kind, uses_prepared);
        if info.req.is_write || info.req.is_read {
            self.sh
                .stats
                .request(&info.req.tables, info.req.is_write, info.is_batch);
        }
        let logged = (self.sh.requests.is_enabled()
            && info.req.is_write
            && info
                .req
                .tables
                .iter()
                .any(|(ks, _)| !exec::is_system_keyspace(ks)))
        .then(|| self.describe(&work));
        let (action, fired, applied) = self.run_decided(v, stream, work, &info, cl);
        let Some(statements) = logged else {
            return action;
        };
        let seq = self.sh.requests.push(op, statements, fired, applied);
        match action {
            // A late write is logged where it arrived; whether it applied is known later.
            Action::Late(delay, late) => {
                let sh = self.sh.clone();
                Action::Late(
                    delay,
                    Box::new(move || {
                        let (frame, applied) = late();
                        if applied {
                            sh.requests.applied_late(seq);
                        }
                        (frame, applied)
                    }),
                )
            }
            action => action,
        }
    }

    /// Decides faults, executes, replies: the action, the fault that fired (and whether
    /// it let the write apply), and whether the write applied.
    fn run_decided(
        &mut self,
        v: u8,
        stream: i16,
        work: Work,
        info: &super::Info,
        cl: Consistency,
    ) -> (Action, Option<(FaultKind, bool)>, bool) {
        let fault = self.decide(info);
        if let Some(r) = &fault {
            if r.kind == FaultKind::Unprepared {
                self.sh.prepared.lock().clear();
                self.sh.stats.fault(r.kind, false);
                let id = match &work {
                    Work::Single(it, _) => it.id.clone(),
                    Work::Batch(_, its, _) => its.iter().find_map(|i| i.id.clone()),
                };
                let mut frame = Vec::new();
                response::error(
                    &mut frame,
                    v,
                    stream,
                    &CqlError::Unprepared(id.map(|id| id.to_vec()).unwrap_or_default()),
                );
                return (Action::Reply(frame), Some((r.kind, false)), false);
            }
            if let Some(a) = self.before(r, info, v, stream, cl) {
                return (a, Some((r.kind, false)), false);
            }
            if r.kind == FaultKind::Delay && r.late && info.req.is_write {
                // The write runs when the delay ends (other streams go on meanwhile): it
                // reaches the store after requests sent after it.
                self.sh.stats.fault(r.kind, true);
                let (sh, local_ip) = (self.sh.clone(), self.local_ip);
                let late = move || {
                    let mut frame = Vec::new();
                    let mut applied = false;
                    match exec_work(&sh, local_ip, &work) {
                        Ok((outcome, fx)) => {
                            sh.stats.applied(&fx);
                            applied = true;
                            let skip = matches!(&work, Work::Single(_, p) if p.skip_metadata);
                            response::result(&mut frame, v, stream, &outcome, skip);
                        }
                        Err(e) => response::error(&mut frame, v, stream, &e),
                    }
                    (frame, applied)
                };
                return (
                    Action::Late(r.duration.unwrap_or_default(), Box::new(late)),
                    Some((r.kind, true)),
                    false,
                );
            }
        }
        let result = self.exec(&work);
        let mut frame = Vec::new();
        let mut applied = false;
        match result {
            Ok((outcome, fx)) => {
                applied = info.req.is_write;
                if applied {
                    self.sh.stats.applied(&fx);
                }
                match &outcome {
                    Outcome::SetKeyspace(ks) => self.keyspace = Some(ks.clone()),
                    Outcome::SchemaChange(sc) => {
                        let _ = self.sh.events.send(sc.clone());
                    }
                    _ => {}
                }
                let skip = matches!(&work, Work::Single(_, p) if p.skip_metadata);
                response::result(&mut frame, v, stream, &outcome, skip);
            }
            Err(e) => response::error(&mut frame, v, stream, &e),
        }
        let fired = fault.as_ref().map(|r| (r.kind, applied));
        (
            self.after(fault, info, applied, frame, v, stream, cl),
            fired,
            applied,
        )
    }

    /// What a request carries, statement by statement, for the request log.
    fn describe(&self, work: &Work) -> Vec<LoggedStatement> {
        let items: Vec<&super::Item> = match work {
            Work::Single(it, _) => vec![it],
            Work::Batch(_, its, _) => its.iter().collect(),
        };
        let db = self.sh.db.lock();
        items
            .into_iter()
            .filter_map(|it| {
                let q = it.prep.parsed.stmt.dml_table()?;
                let ks = it.prep.keyspace.as_deref();
                let table = exec::resolve_table(&db, q, ks).ok()?;
                let meta = exec::prepare::analyze(&db, &it.prep.parsed, ks).ok()?;
                let values = meta
                    .vars
                    .iter()
                    .zip(&it.values)
                    .filter_map(|(spec, value)| {
                        let text = match value {
                            BoundValue::Unset => return None,
                            BoundValue::Null => "null".to_owned(),
                            BoundValue::Bytes(b) => match Value::decode(&spec.ty, b) {
                                Ok(Some(v)) => v.to_literal(),
                                Ok(None) => "null".to_owned(),
                                Err(_) => format!("0x{}", crate::error::hex(b)),
                            },
                        };
                        Some((spec.name.clone(), text))
                    })
                    .collect();
                Some(LoggedStatement {
                    keyspace: table.keyspace.clone(),
                    table: table.name.clone(),
                    values,
                })
            })
            .collect()
    }

    pub(super) fn exec(&self, work: &Work) -> Result<(Outcome, Effects), CqlError> {
        exec_work(&self.sh, self.local_ip, work)
    }
}

/// Runs a request's statement(s) under the database lock.
fn exec_work(
    sh: &Shared,
    local_ip: std::net::IpAddr,
    work: &Work,
) -> Result<(Outcome, Effects), CqlError> {
    let view = sh.sys_view(local_ip);
    let mut db = sh.db.lock();
    match work {
        Work::Single(it, params) => {
            let mapped;
            let values: &[BoundValue] = match &params.names {
                None => &it.values,
                Some(names) => {
                    let meta =
                        exec::prepare::analyze(&db, &it.prep.parsed, it.prep.keyspace.as_deref())?;
                    mapped = meta
                        .vars
                        .iter()
                        .map(|spec| {
                            names
                                .iter()
                                .position(|n| n.eq_ignore_ascii_case(&spec.name))
                                .and_then(|j| it.values.get(j).cloned())
                                .ok_or_else(|| {
                                    CqlError::invalid(format!(
                                        "Missing value for bind variable {}",
                                        spec.name
                                    ))
                                })
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    &mapped
                }
            };
            let paging = Paging {
                page_size: params.paged(),
                state: params.paging_state.as_deref(),
            };
            exec::execute(
                &mut db,
                &it.prep.parsed,
                it.prep.keyspace.as_deref(),
                values,
                paging,
                &view,
                params.timestamp,
                it.id.is_some().then_some(&it.prep.plans),
            )
        }
        Work::Batch(kind, items, client_time) => {
            let mut bi = Vec::with_capacity(items.len());
            for it in items {
                let n = it.prep.parsed.marker_names.len();
                if it.values.len() != n {
                    return Err(CqlError::invalid(format!(
                        "Invalid amount of bind variables: expected {n}, got {}",
                        it.values.len()
                    )));
                }
                bi.push(BatchItem {
                    stmt: &it.prep.parsed.stmt,
                    b: Bindings::new(&it.values),
                    keyspace: it.prep.keyspace.as_deref(),
                    // Only prepared statements live on to use what their cache keeps.
                    cache: it.id.is_some().then_some(&it.prep.plans),
                });
            }
            exec::run_batch(
                &mut db,
                *kind,
                &Using::default(),
                Bindings::new(&[]),
                &bi,
                *client_time,
            )
            .map(|fx| (Outcome::Void, fx))
        }
    }
}
