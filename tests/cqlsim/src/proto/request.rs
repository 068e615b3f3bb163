//! Request bodies (S §4.1): decoded into owned values so the connection can hand them to the
//! executor without lifetimes (bound values and prepared ids are views of the body). Unknown flags are rejected, as Cassandra does.

use bytes::Bytes;

use super::frame::opcode;
use super::wire::{BoundValue, Reader, WireError};
use crate::error::Consistency;

/// A decoded request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Request {
    /// OPTIONS: asks for SUPPORTED. Also the drivers' keepalive.
    Options,
    /// STARTUP with its options (CQL_VERSION, DRIVER_NAME, ...).
    Startup(Vec<(String, String)>),
    /// REGISTER for events.
    Register(Vec<String>),
    /// QUERY: a CQL string with parameters.
    Query(String, QueryParams),
    /// PREPARE a CQL string.
    Prepare(String),
    /// EXECUTE a prepared id.
    Execute(Bytes, QueryParams),
    /// BATCH.
    Batch(BatchRequest),
    /// AUTH_RESPONSE: we never ask for authentication.
    AuthResponse,
}

impl Request {
    /// Decodes the body of a frame with the given opcode. `Ok(None)` means the opcode is not a
    /// request opcode.
    pub(crate) fn decode(op: u8, body: &Bytes) -> Result<Option<Request>, WireError> {
        let mut r = Reader::shared(body);
        let req = match op {
            opcode::OPTIONS => Request::Options,
            opcode::STARTUP => Request::Startup(r.string_map()?),
            opcode::REGISTER => Request::Register(r.string_list()?),
            opcode::QUERY => {
                let q = r.long_string()?.to_owned();
                Request::Query(q, QueryParams::decode(&mut r)?)
            }
            opcode::PREPARE => Request::Prepare(r.long_string()?.to_owned()),
            opcode::EXECUTE => {
                let id = r.short_bytes_owned()?;
                Request::Execute(id, QueryParams::decode(&mut r)?)
            }
            opcode::BATCH => Request::Batch(BatchRequest::decode(&mut r)?),
            opcode::AUTH_RESPONSE => Request::AuthResponse,
            _ => return Ok(None),
        };
        Ok(Some(req))
    }

    /// Name used in fault rules and logs.
    pub(crate) fn opcode_name(op: u8) -> &'static str {
        match op {
            opcode::OPTIONS => "options",
            opcode::STARTUP => "startup",
            opcode::REGISTER => "register",
            opcode::QUERY => "query",
            opcode::PREPARE => "prepare",
            opcode::EXECUTE => "execute",
            opcode::BATCH => "batch",
            _ => "other",
        }
    }
}

const FLAG_VALUES: u8 = 0x01;
const FLAG_SKIP_METADATA: u8 = 0x02;
const FLAG_PAGE_SIZE: u8 = 0x04;
const FLAG_PAGING_STATE: u8 = 0x08;
const FLAG_SERIAL: u8 = 0x10;
const FLAG_TIMESTAMP: u8 = 0x20;
const FLAG_NAMES: u8 = 0x40;

/// QUERY/EXECUTE parameters (S §4.1.4).
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct QueryParams {
    pub(crate) consistency: Option<Consistency>,
    pub(crate) values: Vec<BoundValue>,
    /// Names of the values when the client used flag 0x40.
    pub(crate) names: Option<Vec<String>>,
    pub(crate) skip_metadata: bool,
    /// `None` (or a value <= 0) means unpaged: never answer with HAS_MORE_PAGES.
    pub(crate) page_size: Option<i32>,
    pub(crate) paging_state: Option<Vec<u8>>,
    pub(crate) serial_consistency: Option<Consistency>,
    /// The client-side timestamp. Accepted on counter writes (only CQL `USING TIMESTAMP` is
    /// refused there).
    pub(crate) timestamp: Option<i64>,
}

impl QueryParams {
    fn decode(r: &mut Reader<'_>) -> Result<QueryParams, WireError> {
        let consistency = Some(Consistency(r.u16()?));
        let flags = r.u8()?;
        if flags & 0x80 != 0 {
            return Err(WireError("unknown query flags"));
        }
        let mut p = QueryParams {
            consistency,
            skip_metadata: flags & FLAG_SKIP_METADATA != 0,
            ..QueryParams::default()
        };
        if flags & FLAG_VALUES != 0 {
            let n = r.u16()?;
            let with_names = flags & FLAG_NAMES != 0;
            let mut names = Vec::new();
            for _ in 0..n {
                if with_names {
                    names.push(r.string()?.to_owned());
                }
                p.values.push(r.value()?);
            }
            if with_names {
                p.names = Some(names);
            }
        }
        if flags & FLAG_PAGE_SIZE != 0 {
            p.page_size = Some(r.i32()?);
        }
        if flags & FLAG_PAGING_STATE != 0 {
            p.paging_state = r.bytes()?.map(<[u8]>::to_vec);
        }
        if flags & FLAG_SERIAL != 0 {
            p.serial_consistency = Some(Consistency(r.u16()?));
        }
        if flags & FLAG_TIMESTAMP != 0 {
            p.timestamp = Some(r.i64()?);
        }
        Ok(p)
    }

    /// The page size if the request is paged.
    pub(crate) fn paged(&self) -> Option<usize> {
        self.page_size
            .filter(|n| *n > 0)
            .and_then(|n| usize::try_from(n).ok())
    }
}

/// BATCH type byte (S §4.1.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BatchKind {
    /// 0: logged.
    Logged,
    /// 1: unlogged.
    Unlogged,
    /// 2: counter.
    Counter,
}

/// One statement of a BATCH frame: a query string or a prepared id, with its values.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum BatchEntry {
    Query(String, Vec<BoundValue>),
    Prepared(Bytes, Vec<BoundValue>),
}

/// A BATCH request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BatchRequest {
    pub(crate) kind: BatchKind,
    pub(crate) entries: Vec<BatchEntry>,
    pub(crate) consistency: Consistency,
    pub(crate) serial_consistency: Option<Consistency>,
    pub(crate) timestamp: Option<i64>,
}

impl BatchRequest {
    fn decode(r: &mut Reader<'_>) -> Result<BatchRequest, WireError> {
        let kind = match r.u8()? {
            0 => BatchKind::Logged,
            1 => BatchKind::Unlogged,
            2 => BatchKind::Counter,
            _ => return Err(WireError("unknown batch type")),
        };
        let n = r.u16()?;
        let mut entries = Vec::with_capacity(usize::from(n).min(1024));
        for _ in 0..n {
            let k = r.u8()?;
            let target = match k {
                0 => Ok(r.long_string()?.to_owned()),
                1 => Err(r.short_bytes_owned()?),
                _ => return Err(WireError("unknown batch statement kind")),
            };
            let nv = r.u16()?;
            let values = (0..nv).map(|_| r.value()).collect::<Result<Vec<_>, _>>()?;
            entries.push(match target {
                Ok(q) => BatchEntry::Query(q, values),
                Err(id) => BatchEntry::Prepared(id, values),
            });
        }
        let consistency = Consistency(r.u16()?);
        let flags = r.u8()?;
        if flags & !(FLAG_SERIAL | FLAG_TIMESTAMP | FLAG_NAMES) != 0 {
            return Err(WireError("unknown batch flags"));
        }
        if flags & FLAG_NAMES != 0 {
            // S §4.1.7: the flag exists but "is not yet supported" in v4 and is ignored.
        }
        let serial_consistency = if flags & FLAG_SERIAL != 0 {
            Some(Consistency(r.u16()?))
        } else {
            None
        };
        let timestamp = if flags & FLAG_TIMESTAMP != 0 {
            Some(r.i64()?)
        } else {
            None
        };
        Ok(BatchRequest {
            kind,
            entries,
            consistency,
            serial_consistency,
            timestamp,
        })
    }
}
