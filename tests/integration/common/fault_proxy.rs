//! A CQL-aware TCP proxy in front of a test store that makes chosen writes' outcomes
//! unknown to the client, whichever the store is (cqlsim or a real node).
//!
//! A real node has no fault injection, yet an unknown outcome is what exact totals exist
//! for. From the client's side an unknown write is a request that got no answer: the
//! store may have applied it (the answer was lost) or not (the request was). The proxy
//! does exactly that to the next writes into a chosen table, and nothing else: it reads
//! the CQL v4 frames going through (the `scylla` driver speaks v4, uncompressed here),
//! learns which prepared statement id is which query from PREPARE and its RESULT, and for
//! a matching EXECUTE or BATCH either forwards it and drops the store's answer
//! ([`Swallow::Answer`], applied) or drops the request itself ([`Swallow::Request`], not
//! applied). The client's request timeout then makes the write unknown. What it did to
//! each request is kept in [`FaultProxy::log`].
//!
//! With one node and no `system.peers` rows the driver stays on the address it was given,
//! so every connection goes through the proxy.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

const HEADER: usize = 9;
const OP_RESULT: u8 = 0x08;
const OP_PREPARE: u8 = 0x09;
const OP_EXECUTE: u8 = 0x0A;
const OP_BATCH: u8 = 0x0D;
const RESULT_PREPARED: i32 = 0x0004;
const FLAG_TRACING: u8 = 0x02;
const FLAG_CUSTOM_PAYLOAD: u8 = 0x04;
const FLAG_WARNING: u8 = 0x08;

/// What to drop of a matching write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Swallow {
    /// Forward the request, drop the store's answer: applied, unknown to the client.
    Answer,
    /// Drop the request: not applied, unknown to the client.
    Request,
}

/// One write the proxy made unknown.
#[derive(Clone, Debug)]
pub(crate) struct Swallowed {
    /// The query of the (first) statement.
    pub(crate) query: String,
    pub(crate) swallow: Swallow,
    /// With [`Swallow::Answer`]: the store answered (and the answer was dropped); its
    /// opcode (RESULT or ERROR).
    pub(crate) answer_opcode: Option<u8>,
}

/// Which writes into a table to make unknown.
struct Rule {
    table: String,
    swallow: Swallow,
    /// Every how many-th matching write (1: each).
    every: u32,
    /// Matching writes seen so far.
    seen: u64,
    /// How many more it may swallow.
    left: u32,
}

#[derive(Default)]
struct State {
    /// Rules, first match first.
    rules: Vec<Rule>,
    /// Prepared statement id -> query, learnt from PREPARE and its RESULT.
    prepared: HashMap<Vec<u8>, String>,
    log: Vec<Swallowed>,
}

/// The proxy; it runs until the test's runtime ends.
pub(crate) struct FaultProxy {
    addr: String,
    state: Arc<Mutex<State>>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards every connection to `backend`
    /// (`host:port`).
    pub(crate) async fn start(backend: String) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("proxy bind");
        let addr = listener.local_addr().expect("proxy address").to_string();
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&backend).await else {
                    continue;
                };
                let connection = Connection {
                    state: shared.clone(),
                    prepares: Arc::default(),
                    dropped_answers: Arc::default(),
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(connection.clone().requests(client_read, server_write));
                tokio::spawn(connection.answers(server_read, client_write));
            }
        });
        FaultProxy { addr, state }
    }

    /// The address to give the client, `host:port`.
    pub(crate) fn addr(&self) -> String {
        self.addr.clone()
    }

    /// Makes the next `count` writes (EXECUTE or BATCH of an UPDATE or INSERT) into
    /// `table` (`keyspace.table`, as the query names it) unknown, dropping `swallow`.
    pub(crate) fn swallow(&self, table: &str, swallow: Swallow, count: u32) {
        self.add(table, swallow, 1, count);
    }

    /// Makes every `every`-th write into `table` unknown, dropping `swallow`, until
    /// [`FaultProxy::clear`]. Several rules on one table each count every write.
    pub(crate) fn swallow_every(&self, table: &str, swallow: Swallow, every: u32) {
        self.add(table, swallow, every, u32::MAX);
    }

    fn add(&self, table: &str, swallow: Swallow, every: u32, left: u32) {
        self.state.lock().rules.push(Rule {
            table: table.to_owned(),
            swallow,
            every: every.max(1),
            seen: 0,
            left,
        });
    }

    /// Drops every pending rule.
    pub(crate) fn clear(&self) {
        self.state.lock().rules.clear();
    }

    /// Every write made unknown so far.
    pub(crate) fn log(&self) -> Vec<Swallowed> {
        self.state.lock().log.clone()
    }
}

/// One proxied connection: the requests it has in flight that the proxy must watch.
#[derive(Clone)]
struct Connection {
    state: Arc<Mutex<State>>,
    /// Stream id -> query of a PREPARE awaiting its RESULT.
    prepares: Arc<Mutex<HashMap<i16, String>>>,
    /// Stream id -> index in the log, of requests whose answer is dropped.
    dropped_answers: Arc<Mutex<HashMap<i16, usize>>>,
}

/// One frame: the header and the body.
struct Frame {
    header: [u8; HEADER],
    body: Vec<u8>,
}

impl Frame {
    async fn read(from: &mut OwnedReadHalf) -> Option<Frame> {
        let mut header = [0; HEADER];
        from.read_exact(&mut header).await.ok()?;
        let length = u32::from_be_bytes(header[5..9].try_into().ok()?) as usize;
        let mut body = vec![0; length];
        from.read_exact(&mut body).await.ok()?;
        Some(Frame { header, body })
    }

    async fn write(&self, to: &mut OwnedWriteHalf) -> Option<()> {
        to.write_all(&self.header).await.ok()?;
        to.write_all(&self.body).await.ok()
    }

    fn stream(&self) -> i16 {
        i16::from_be_bytes([self.header[2], self.header[3]])
    }

    fn opcode(&self) -> u8 {
        self.header[4]
    }

    /// Where the message proper starts in the body: after the tracing id, the custom
    /// payload and the warnings the header's flags announce (a node adds warnings to
    /// some answers).
    fn message_start(&self) -> Option<usize> {
        let flags = self.header[1];
        let mut at = 0;
        if flags & FLAG_TRACING != 0 && self.header[0] & 0x80 != 0 {
            at += 16;
        }
        if flags & FLAG_CUSTOM_PAYLOAD != 0 {
            let n = short(&self.body, at)?;
            at += 2;
            for _ in 0..n {
                at = short_bytes(&self.body, at)?.1; // [string] key: same layout
                let len = i32::from_be_bytes(self.body.get(at..at + 4)?.try_into().ok()?);
                at += 4 + usize::try_from(len).unwrap_or(0);
            }
        }
        if flags & FLAG_WARNING != 0 {
            let n = short(&self.body, at)?;
            at += 2;
            for _ in 0..n {
                at = short_bytes(&self.body, at)?.1;
            }
        }
        Some(at)
    }

    /// The message: the body after what [`Frame::message_start`] skips.
    fn message(&self) -> &[u8] {
        self.message_start()
            .and_then(|at| self.body.get(at..))
            .unwrap_or(&[])
    }
}

/// `[short]` at `at`.
fn short(body: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(body.get(at..at + 2)?.try_into().ok()?))
}

/// `[short bytes]` (or `[string]`) at `at`: the bytes and the offset after them.
fn short_bytes(body: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let n = usize::from(short(body, at)?);
    Some((body.get(at + 2..at + 2 + n)?, at + 2 + n))
}

/// `[long string]` at `at`.
fn long_string(body: &[u8], at: usize) -> Option<String> {
    let n = u32::from_be_bytes(body.get(at..at + 4)?.try_into().ok()?) as usize;
    Some(String::from_utf8_lossy(body.get(at + 4..at + 4 + n)?).into_owned())
}

impl Connection {
    /// The query a write frame runs (a BATCH: its first statement's), if it is one.
    fn write_query(&self, frame: &Frame) -> Option<String> {
        let prepared = |id: &[u8]| self.state.lock().prepared.get(id).cloned();
        let message = frame.message();
        match frame.opcode() {
            OP_EXECUTE => prepared(short_bytes(message, 0)?.0),
            // type, statement count, then the first statement: kind 0 (query) or 1 (id).
            OP_BATCH => match message.get(3)? {
                0 => long_string(message, 4),
                1 => prepared(short_bytes(message, 4)?.0),
                _ => None,
            },
            _ => None,
        }
    }

    /// Client to store: forwards each frame but the requests a rule drops.
    async fn requests(self, mut client: OwnedReadHalf, mut server: OwnedWriteHalf) {
        while let Some(frame) = Frame::read(&mut client).await {
            if frame.opcode() == OP_PREPARE
                && let Some(query) = long_string(frame.message(), 0)
            {
                self.prepares.lock().insert(frame.stream(), query);
            }
            let matched = self.write_query(&frame).and_then(|query| {
                let upper = query.trim_start().to_ascii_uppercase();
                if !(upper.starts_with("UPDATE") || upper.starts_with("INSERT")) {
                    return None;
                }
                let mut state = self.state.lock();
                let mut chosen = None;
                for rule in state.rules.iter_mut() {
                    if rule.left == 0 || !query.contains(rule.table.as_str()) {
                        continue;
                    }
                    rule.seen += 1;
                    if chosen.is_none() && rule.seen % u64::from(rule.every) == 0 {
                        rule.left -= 1;
                        chosen = Some(rule.swallow);
                    }
                }
                let swallow = chosen?;
                state.log.push(Swallowed {
                    query,
                    swallow,
                    answer_opcode: None,
                });
                Some((swallow, state.log.len() - 1))
            });
            match matched {
                Some((Swallow::Request, _)) => continue,
                Some((Swallow::Answer, entry)) => {
                    self.dropped_answers.lock().insert(frame.stream(), entry);
                }
                None => {}
            }
            if frame.write(&mut server).await.is_none() {
                return;
            }
        }
    }

    /// Store to client: forwards each frame but the answers a rule drops; learns
    /// prepared ids.
    async fn answers(self, mut server: OwnedReadHalf, mut client: OwnedWriteHalf) {
        while let Some(frame) = Frame::read(&mut server).await {
            let stream = frame.stream();
            if let Some(query) = self.prepares.lock().remove(&stream)
                && frame.opcode() == OP_RESULT
                && frame.message().get(..4) == Some(&RESULT_PREPARED.to_be_bytes())
                && let Some((id, _)) = short_bytes(frame.message(), 4)
            {
                self.state.lock().prepared.insert(id.to_vec(), query);
            }
            if let Some(entry) = self.dropped_answers.lock().remove(&stream) {
                self.state.lock().log[entry].answer_opcode = Some(frame.opcode());
                continue;
            }
            if frame.write(&mut client).await.is_none() {
                return;
            }
        }
    }
}
