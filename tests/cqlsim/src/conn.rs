//! One client connection. The read loop splits the byte stream into frames (several per read,
//! or one across reads), answers each in arrival order and hands the replies to a writer task
//! in one batch per read. Streams are multiplexed by echoing the stream id; delayed replies
//! (an injected delay) are sent later by their own task, so other streams are not held up.
//!
//! Malformed bodies get a protocol error on their stream; a header that loses framing (too
//! big, a response frame, an unsupported version) gets an error and the connection is closed.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use md5::{Digest, Md5};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::{broadcast, mpsc, watch};

use crate::cql::ast::{Parsed, Statement, Using};
use crate::error::{Consistency, CqlError, WriteType};
use crate::exec::bind::Bindings;
use crate::exec::{self, BatchItem, Effects, Outcome, Paging, SchemaChange};
use crate::faults::{FaultKind, FaultRule, Op, RequestInfo};
use crate::proto::frame::{FLAG_COMPRESSION, Header, Peek, parse_header};
use crate::proto::request::{BatchEntry, BatchKind, QueryParams, Request};
use crate::proto::response;
use crate::proto::wire::BoundValue;
use crate::server::{Prepared, Shared};

enum Out {
    Data(Vec<u8>),
    Close,
}

/// What to do after a request.
enum Action {
    Reply(Vec<u8>),
    Delayed(Duration, Vec<u8>),
    Nothing,
    Close,
}

struct Conn {
    sh: Arc<Shared>,
    local_ip: IpAddr,
    version: Option<u8>,
    started: bool,
    keyspace: Option<String>,
    events: Option<broadcast::Receiver<SchemaChange>>,
}

pub(crate) async fn serve(sock: TcpStream, sh: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let local_ip = sock
        .local_addr()
        .map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |a| a.ip());
    let (mut rd, wr) = sock.into_split();
    let (tx, rx) = mpsc::channel::<Out>(1024);
    let writer = tokio::spawn(write_loop(wr, rx));
    let mut down = sh.down.subscribe();
    let mut conn = Conn {
        sh,
        local_ip,
        version: None,
        started: false,
        keyspace: None,
        events: None,
    };
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    'conn: loop {
        tokio::select! {
            r = rd.read_buf(&mut buf) => {
                if !matches!(r, Ok(n) if n > 0) {
                    break;
                }
                let mut out = Vec::new();
                let mut pos = 0;
                let mut close = false;
                loop {
                    match parse_header(&buf[pos..]) {
                        Peek::Incomplete => break,
                        Peek::Fatal { stream, message } => {
                            response::error(&mut out, conn.version.unwrap_or(4), stream, &CqlError::Protocol(message));
                            close = true;
                            break;
                        }
                        Peek::Frame(h, n) => {
                            let body = &buf[pos + crate::proto::frame::HEADER_LEN..pos + n];
                            pos += n;
                            match conn.handle(h, body, &mut out) {
                                Action::Reply(frame) => out.extend_from_slice(&frame),
                                Action::Nothing => {}
                                Action::Delayed(d, frame) => {
                                    let tx = tx.clone();
                                    tokio::spawn(async move {
                                        tokio::time::sleep(d).await;
                                        let _ = tx.send(Out::Data(frame)).await;
                                    });
                                }
                                Action::Close => {
                                    close = true;
                                    break;
                                }
                            }
                        }
                    }
                }
                buf.drain(..pos);
                if !out.is_empty() && tx.send(Out::Data(out)).await.is_err() {
                    break 'conn;
                }
                if close {
                    break 'conn;
                }
            }
            _ = stop.changed() => break,
            _ = down.changed() => {
                if *down.borrow() {
                    break;
                }
            }
            ev = next_event(&mut conn.events) => {
                let mut out = Vec::new();
                response::schema_event(&mut out, conn.version.unwrap_or(4), &ev);
                if tx.send(Out::Data(out)).await.is_err() {
                    break;
                }
            }
        }
    }
    let _ = tx.send(Out::Close).await;
    drop(tx);
    drop(rd);
    let _ = writer.await;
}

async fn write_loop(mut wr: OwnedWriteHalf, mut rx: mpsc::Receiver<Out>) {
    while let Some(o) = rx.recv().await {
        match o {
            Out::Data(d) => {
                if wr.write_all(&d).await.is_err() {
                    return;
                }
            }
            Out::Close => {
                let _ = wr.shutdown().await;
                return;
            }
        }
    }
}

async fn next_event(rx: &mut Option<broadcast::Receiver<SchemaChange>>) -> SchemaChange {
    if let Some(r) = rx {
        loop {
            match r.recv().await {
                Ok(sc) => return sc,
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => break,
            }
        }
    }
    std::future::pending().await
}

/// A statement to run: the prepared (or just parsed) statement and its values.
struct Item {
    prep: Arc<Prepared>,
    id: Option<Vec<u8>>,
    values: Vec<BoundValue>,
}

enum Work {
    Single(Item, QueryParams),
    Batch(BatchKind, Vec<Item>),
}

/// Prepared ids are MD5(keyspace + query), as Cassandra's `QueryProcessor.computeId`.
pub(crate) fn prepared_id(keyspace: Option<&str>, query: &str) -> [u8; 16] {
    let mut h = Md5::new();
    if let Some(ks) = keyspace {
        h.update(ks.as_bytes());
    }
    h.update(query.as_bytes());
    h.finalize().into()
}

/// Replicas needed for a consistency level on this one-node, RF=1 cluster.
fn block_for(cl: Consistency) -> i32 {
    match cl.0 {
        0x0002 => 2,
        0x0003 => 3,
        _ => 1,
    }
}

impl Conn {
    fn handle(&mut self, h: Header, body: &[u8], out: &mut Vec<u8>) -> Action {
        if h.version != 3 && h.version != 4 {
            let msg = format!(
                "Invalid or unsupported protocol version ({}); supported versions are (3/v3, 4/v4)",
                h.version
            );
            response::error(out, 4, h.stream, &CqlError::Protocol(msg));
            return Action::Close;
        }
        let v = *self.version.get_or_insert(h.version);
        let mut frame = Vec::new();
        let proto = |frame: &mut Vec<u8>, msg: String| {
            response::error(frame, v, h.stream, &CqlError::Protocol(msg));
        };
        if h.version != v {
            proto(
                &mut frame,
                format!(
                    "Invalid message version. Got v{} but previous messages on this connection had version v{v}",
                    h.version
                ),
            );
            return Action::Reply(frame);
        }
        if h.flags & FLAG_COMPRESSION != 0 {
            proto(
                &mut frame,
                "Compressed frames are not supported: no compression was negotiated".into(),
            );
            return Action::Reply(frame);
        }
        let req = match Request::decode(h.opcode, body) {
            Ok(Some(r)) => r,
            Ok(None) => {
                proto(&mut frame, format!("Unknown opcode {}", h.opcode));
                return Action::Reply(frame);
            }
            Err(e) => {
                proto(&mut frame, e.to_string());
                return Action::Reply(frame);
            }
        };
        if !self.started && !matches!(req, Request::Options | Request::Startup(_)) {
            let name = Request::opcode_name(h.opcode).to_uppercase();
            proto(
                &mut frame,
                format!("Unexpected message {name}, expecting STARTUP or OPTIONS"),
            );
            return Action::Reply(frame);
        }
        match req {
            Request::Options => response::supported(&mut frame, v, h.stream),
            Request::Startup(opts) => {
                if let Some((_, c)) = opts.iter().find(|(k, _)| k == "COMPRESSION") {
                    proto(&mut frame, format!("Unknown compression algorithm: {c}"));
                    return Action::Reply(frame);
                }
                self.started = true;
                response::ready(&mut frame, v, h.stream);
            }
            Request::Register(events) => {
                if events.iter().any(|e| e == "SCHEMA_CHANGE") && self.events.is_none() {
                    self.events = Some(self.sh.events.subscribe());
                }
                response::ready(&mut frame, v, h.stream);
            }
            Request::AuthResponse => proto(
                &mut frame,
                "Unexpected AUTH_RESPONSE: authentication is not enabled".into(),
            ),
            Request::Prepare(q) => return self.prepare(v, h.stream, q),
            Request::Query(q, params) => match crate::cql::parse(&q) {
                Ok(parsed) => {
                    let prep = Arc::new(Prepared {
                        keyspace: self.keyspace.clone(),
                        parsed,
                    });
                    let values = params.values.clone();
                    return self.run(
                        v,
                        h.stream,
                        Op::Query,
                        Work::Single(
                            Item {
                                prep,
                                id: None,
                                values,
                            },
                            params,
                        ),
                    );
                }
                Err(e) => response::error(&mut frame, v, h.stream, &e),
            },
            Request::Execute(id, params) => match self.lookup(&id) {
                Some(prep) => {
                    let values = params.values.clone();
                    return self.run(
                        v,
                        h.stream,
                        Op::Execute,
                        Work::Single(
                            Item {
                                prep,
                                id: Some(id),
                                values,
                            },
                            params,
                        ),
                    );
                }
                None => response::error(&mut frame, v, h.stream, &CqlError::Unprepared(id)),
            },
            Request::Batch(b) => {
                let mut items = Vec::with_capacity(b.entries.len());
                for e in b.entries {
                    let item = match e {
                        BatchEntry::Query(q, values) => match crate::cql::parse(&q) {
                            Ok(parsed) => Item {
                                prep: Arc::new(Prepared {
                                    keyspace: self.keyspace.clone(),
                                    parsed,
                                }),
                                id: None,
                                values,
                            },
                            Err(err) => {
                                response::error(&mut frame, v, h.stream, &err);
                                return Action::Reply(frame);
                            }
                        },
                        BatchEntry::Prepared(id, values) => match self.lookup(&id) {
                            Some(prep) => Item {
                                prep,
                                id: Some(id),
                                values,
                            },
                            None => {
                                response::error(&mut frame, v, h.stream, &CqlError::Unprepared(id));
                                return Action::Reply(frame);
                            }
                        },
                    };
                    items.push(item);
                }
                let cl = b.consistency;
                return self.run_with_cl(v, h.stream, Op::Batch, Work::Batch(b.kind, items), cl);
            }
        }
        Action::Reply(frame)
    }

    fn lookup(&self, id: &[u8]) -> Option<Arc<Prepared>> {
        let key: [u8; 16] = id.try_into().ok()?;
        self.sh.prepared.lock().get(&key).cloned()
    }

    fn prepare(&mut self, v: u8, stream: i16, q: String) -> Action {
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
        let meta = exec::prepare::analyze(&self.sh.db.lock(), &parsed, self.keyspace.as_deref());
        match meta {
            Ok(meta) => {
                let id = prepared_id(self.keyspace.as_deref(), &q);
                self.sh.prepared.lock().insert(
                    id,
                    Arc::new(Prepared {
                        keyspace: self.keyspace.clone(),
                        parsed,
                    }),
                );
                response::prepared(&mut frame, v, stream, &id, &meta);
            }
            Err(e) => response::error(&mut frame, v, stream, &e),
        }
        self.after(fault, &info, false, frame, v, stream, Consistency::ONE)
    }

    fn run(&mut self, v: u8, stream: i16, op: Op, work: Work) -> Action {
        let cl = match &work {
            Work::Single(_, p) => p.consistency.unwrap_or(Consistency::ONE),
            Work::Batch(..) => Consistency::ONE,
        };
        self.run_with_cl(v, stream, op, work, cl)
    }

    fn run_with_cl(&mut self, v: u8, stream: i16, op: Op, work: Work, cl: Consistency) -> Action {
        let (items, frame_kind): (Vec<(&Parsed, Option<&str>)>, Option<BatchKind>) = match &work {
            Work::Single(it, _) => (vec![(&it.prep.parsed, it.prep.keyspace.as_deref())], None),
            Work::Batch(k, its) => (
                its.iter()
                    .map(|i| (&i.prep.parsed, i.prep.keyspace.as_deref()))
                    .collect(),
                Some(*k),
            ),
        };
        let uses_prepared = match &work {
            Work::Single(it, _) => it.id.is_some(),
            Work::Batch(_, its) => its.iter().any(|i| i.id.is_some()),
        };
        let info = self.info_of(op, &items, frame_kind, uses_prepared);
        if info.req.is_write || info.req.is_read {
            self.sh
                .stats
                .request(&info.req.tables, info.req.is_write, info.is_batch);
        }
        let fault = self.decide(&info);
        if let Some(r) = &fault {
            if r.kind == FaultKind::Unprepared {
                self.sh.prepared.lock().clear();
                self.sh.stats.fault(r.kind, false);
                let id = match &work {
                    Work::Single(it, _) => it.id.clone(),
                    Work::Batch(_, its) => its.iter().find_map(|i| i.id.clone()),
                };
                let mut frame = Vec::new();
                response::error(
                    &mut frame,
                    v,
                    stream,
                    &CqlError::Unprepared(id.unwrap_or_default()),
                );
                return Action::Reply(frame);
            }
            if let Some(a) = self.before(r, &info, v, stream, cl) {
                return a;
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
        self.after(fault, &info, applied, frame, v, stream, cl)
    }

    fn exec(&self, work: &Work) -> Result<(Outcome, Effects), CqlError> {
        let view = self.sh.sys_view(self.local_ip);
        let mut db = self.sh.db.lock();
        match work {
            Work::Single(it, params) => {
                let mapped;
                let values: &[BoundValue] = match &params.names {
                    None => &it.values,
                    Some(names) => {
                        let meta = exec::prepare::analyze(
                            &db,
                            &it.prep.parsed,
                            it.prep.keyspace.as_deref(),
                        )?;
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
                )
            }
            Work::Batch(kind, items) => {
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
                        b: Bindings { values: &it.values },
                        keyspace: it.prep.keyspace.as_deref(),
                    });
                }
                exec::run_batch(&mut db, *kind, &Using::default(), &bi)
                    .map(|fx| (Outcome::Void, fx))
            }
        }
    }

    fn decide(&self, info: &Info) -> Option<FaultRule> {
        self.sh.faults.lock().decide(&info.req)
    }

    /// Faults that act instead of executing (not applied). `None`: go on and execute.
    fn before(
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
    fn after(
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

    fn take_down(&self, duration: Option<Duration>) {
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

    fn fault_error(&self, kind: FaultKind, info: &Info, cl: Consistency) -> Option<CqlError> {
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
    fn info_of(
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
            let stmts: Vec<&Statement> = match &p.stmt {
                Statement::Batch(b) => {
                    batch_kind = Some(b.kind);
                    b.statements.iter().collect()
                }
                s => vec![s],
            };
            for s in stmts {
                is_write |= s.is_write();
                is_read |= matches!(s, Statement::Select(_));
                if let Some(q) = s.dml_table()
                    && let Ok(t) = exec::resolve_table(&db, q, *ks)
                {
                    counter |= t.is_counter;
                    let key = (t.keyspace.clone(), t.name.clone());
                    if !tables.contains(&key) {
                        tables.push(key);
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

struct Info {
    req: RequestInfo,
    is_batch: bool,
    write_type: WriteType,
}
