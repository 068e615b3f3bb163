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

use crate::error::{Consistency, CqlError, WriteType};
use crate::exec::SchemaChange;
use crate::faults::{Op, RequestInfo};
use crate::proto::frame::{FLAG_COMPRESSION, Header, Peek, parse_header};
use crate::proto::request::{BatchEntry, BatchKind, QueryParams, Request};
use crate::proto::response;
use crate::proto::wire::BoundValue;
use crate::server::{Prepared, Shared};
use bytes::Bytes;

mod faults;
mod statement;

enum Out {
    Data(Vec<u8>),
    Close,
}

/// Runs a request later and returns its reply frame and whether it applied.
type LateWork = Box<dyn FnOnce() -> (Vec<u8>, bool) + Send>;

/// What to do after a request.
enum Action {
    Reply(Vec<u8>),
    Delayed(Duration, Vec<u8>),
    /// Run the request after the delay, then reply (`delay,execute=late`).
    Late(Duration, LateWork),
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
                            // One copy per frame: the request's bound values are views of it.
                            let body = Bytes::copy_from_slice(
                                &buf[pos + crate::proto::frame::HEADER_LEN..pos + n],
                            );
                            pos += n;
                            match conn.handle(h, &body, &mut out) {
                                Action::Reply(frame) => out.extend_from_slice(&frame),
                                Action::Nothing => {}
                                Action::Delayed(d, frame) => {
                                    let tx = tx.clone();
                                    let sh = conn.sh.clone();
                                    sh.stats.delay_started();
                                    tokio::spawn(async move {
                                        tokio::time::sleep(d).await;
                                        let _ = tx.send(Out::Data(frame)).await;
                                        sh.stats.delay_ended();
                                    });
                                }
                                Action::Late(d, work) => {
                                    let tx = tx.clone();
                                    tokio::spawn(async move {
                                        tokio::time::sleep(d).await;
                                        let (frame, _) = work();
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
    id: Option<Bytes>,
    values: Vec<BoundValue>,
}

enum Work {
    Single(Item, QueryParams),
    /// A BATCH frame: its kind, statements and client timestamp.
    Batch(BatchKind, Vec<Item>, Option<i64>),
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
    fn handle(&mut self, h: Header, body: &Bytes, out: &mut Vec<u8>) -> Action {
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
            Request::Options => response::supported(&mut frame, v, h.stream, self.sh.persona),
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
            Request::Query(q, mut params) => match crate::cql::parse(&q) {
                Ok(parsed) => {
                    let prep = Arc::new(Prepared {
                        keyspace: self.keyspace.clone(),
                        parsed,
                        plans: Default::default(),
                    });
                    let values = std::mem::take(&mut params.values);
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
            Request::Execute(id, mut params) => match self.lookup_or_log(&id, Op::Execute) {
                Some(prep) => {
                    let values = std::mem::take(&mut params.values);
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
                None => {
                    response::error(&mut frame, v, h.stream, &CqlError::Unprepared(id.to_vec()))
                }
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
                                    plans: Default::default(),
                                }),
                                id: None,
                                values,
                            },
                            Err(err) => {
                                response::error(&mut frame, v, h.stream, &err);
                                return Action::Reply(frame);
                            }
                        },
                        BatchEntry::Prepared(id, values) => {
                            match self.lookup_or_log(&id, Op::Batch) {
                                Some(prep) => Item {
                                    prep,
                                    id: Some(id),
                                    values,
                                },
                                None => {
                                    response::error(
                                        &mut frame,
                                        v,
                                        h.stream,
                                        &CqlError::Unprepared(id.to_vec()),
                                    );
                                    return Action::Reply(frame);
                                }
                            }
                        }
                    };
                    items.push(item);
                }
                let cl = b.consistency;
                return self.run_with_cl(
                    v,
                    h.stream,
                    Op::Batch,
                    Work::Batch(b.kind, items, b.timestamp),
                    cl,
                );
            }
        }
        Action::Reply(frame)
    }

    /// The prepared statement of `id`; when the store does not know it, the request is
    /// answered UNPREPARED (not executed) and logged so, without content.
    fn lookup_or_log(&self, id: &[u8], op: Op) -> Option<Arc<Prepared>> {
        let found = self.lookup(id);
        if found.is_none() && self.sh.requests.is_enabled() {
            self.sh.requests.push(op, Vec::new(), None, false);
        }
        found
    }

    fn lookup(&self, id: &[u8]) -> Option<Arc<Prepared>> {
        let key: [u8; 16] = id.try_into().ok()?;
        self.sh.prepared.lock().get(&key).cloned()
    }
}

struct Info {
    req: RequestInfo,
    is_batch: bool,
    write_type: WriteType,
}
