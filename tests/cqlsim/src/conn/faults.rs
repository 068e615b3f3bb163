//! Fault rules at work on one request: what happens instead of executing (not applied),
//! what happens after executing (applied, or delayed), and the error bodies of research §4.7.

use std::time::Duration;

use super::{Action, Conn, Info, block_for};
use crate::cql::ast::{Parsed, Statement};
use crate::error::{Consistency, CqlError, WriteType};
use crate::exec;
use crate::faults::{FaultKind, FaultRule, Op, RequestInfo};
use crate::proto::request::BatchKind;
use crate::proto::response;

impl Conn {
    pub(super) fn decide(&self, info: &Info) -> Option<FaultRule> {
        let mut rule = self.sh.faults.lock().decide(&info.req)?;
        // A ScyllaDB counter leader applies the increment before it checks replicas.
        if rule.kind == FaultKind::Unavailable
            && info.write_type == WriteType::Counter
            && self.sh.persona.counter_unavailable_applies()
        {
            rule.applied = true;
        }
        Some(rule)
    }

    /// Faults that act instead of executing (not applied). `None`: go on and execute.
    pub(super) fn before(
        &self,
        r: &FaultRule,
        info: &Info,
        v: u8,
        stream: i16,
        cl: Consistency,
    ) -> Option<Action> {
        if r.applied {
            return None;
        }
        let action = match r.kind {
            FaultKind::Delay => return None,
            FaultKind::NoReply => Action::Nothing,
            FaultKind::Close => Action::Close,
            FaultKind::Down => {
                self.take_down(r.duration);
                Action::Close
            }
            _ => {
                let mut frame = Vec::new();
                response::error(&mut frame, v, stream, &self.fault_error(r.kind, info, cl)?);
                Action::Reply(frame)
            }
        };
        self.sh.stats.fault(r.kind, false);
        Some(action)
    }

    /// Faults that act after executing (applied, or a delay).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn after(
        &self,
        fault: Option<FaultRule>,
        info: &Info,
        applied: bool,
        frame: Vec<u8>,
        v: u8,
        stream: i16,
        cl: Consistency,
    ) -> Action {
        let Some(r) = fault else {
            return Action::Reply(frame);
        };
        self.sh.stats.fault(r.kind, applied);
        match r.kind {
            FaultKind::Delay => Action::Delayed(r.duration.unwrap_or_default(), frame),
            FaultKind::NoReply => Action::Nothing,
            FaultKind::Close => Action::Close,
            FaultKind::Down => {
                self.take_down(r.duration);
                Action::Close
            }
            kind => match (applied, self.fault_error(kind, info, cl)) {
                (true, Some(e)) => {
                    let mut f = Vec::new();
                    response::error(&mut f, v, stream, &e);
                    Action::Reply(f)
                }
                // The statement itself failed: its own error is the truthful answer.
                _ => Action::Reply(frame),
            },
        }
    }

    pub(super) fn take_down(&self, duration: Option<Duration>) {
        self.sh.down.send_replace(true);
        self.sh.prepared.lock().clear();
        if let Some(d) = duration {
            let sh = self.sh.clone();
            tokio::spawn(async move {
                tokio::time::sleep(d).await;
                sh.down.send_replace(false);
            });
        }
    }

    pub(super) fn fault_error(
        &self,
        kind: FaultKind,
        info: &Info,
        cl: Consistency,
    ) -> Option<CqlError> {
        let block_for = block_for(cl);
        Some(match kind {
            FaultKind::WriteTimeout if info.req.is_write => CqlError::WriteTimeout {
                consistency: cl,
                received: 0,
                block_for,
                write_type: info.write_type,
            },
            FaultKind::WriteTimeout | FaultKind::ReadTimeout => CqlError::ReadTimeout {
                consistency: cl,
                received: 0,
                block_for,
                data_present: false,
            },
            FaultKind::WriteFailure => CqlError::WriteFailure {
                consistency: cl,
                received: 0,
                block_for,
                num_failures: 1,
                write_type: info.write_type,
            },
            FaultKind::Unavailable => CqlError::Unavailable {
                consistency: cl,
                required: block_for,
                alive: 0,
            },
            FaultKind::Overloaded => {
                CqlError::Overloaded("Too many in flight hints (injected by cqlsim)".into())
            }
            FaultKind::ServerError => {
                CqlError::Server("Unexpected exception during request (injected by cqlsim)".into())
            }
            FaultKind::Bootstrapping => CqlError::IsBootstrapping,
            FaultKind::Delay
            | FaultKind::NoReply
            | FaultKind::Close
            | FaultKind::Unprepared
            | FaultKind::Down => return None,
        })
    }

    /// Tables, kinds and write type of a request, for statistics and fault matching.
    pub(super) fn info_of(
        &self,
        op: Op,
        items: &[(&Parsed, Option<&str>)],
        frame_kind: Option<BatchKind>,
        uses_prepared: bool,
    ) -> Info {
        let db = self.sh.db.lock();
        let mut tables = Vec::new();
        let (mut is_write, mut is_read, mut counter) = (false, false, false);
        let mut batch_kind = None;
        for (p, ks) in items {
            let stmts: &[Statement] = match &p.stmt {
                Statement::Batch(b) => {
                    batch_kind = Some(b.kind);
                    &b.statements
                }
                s => std::slice::from_ref(s),
            };
            for s in stmts {
                is_write |= s.is_write();
                is_read |= matches!(s, Statement::Select(_));
                if let Some(q) = s.dml_table()
                    && let Ok(t) = exec::resolve_table(&db, q, *ks)
                {
                    counter |= t.is_counter;
                    // Compared before cloning: a batch names its table once per statement.
                    if !tables
                        .iter()
                        .any(|(k, n): &(String, String)| *k == t.keyspace && *n == t.name)
                    {
                        tables.push((t.keyspace.clone(), t.name.clone()));
                    }
                }
            }
        }
        let kind = frame_kind.or(batch_kind);
        let write_type = if counter {
            WriteType::Counter
        } else {
            match kind {
                Some(BatchKind::Logged) => WriteType::Batch,
                Some(BatchKind::Unlogged | BatchKind::Counter) => WriteType::UnloggedBatch,
                None => WriteType::Simple,
            }
        };
        Info {
            req: RequestInfo {
                op,
                tables,
                is_write,
                is_read,
                uses_prepared,
            },
            is_batch: frame_kind.is_some() || batch_kind.is_some(),
            write_type,
        }
    }
}
