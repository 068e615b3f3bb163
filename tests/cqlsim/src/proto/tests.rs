//! Cross-checks of the hand-written codec against the client library: requests serialized by
//! `scylla-cql` parse here, and every response written here decodes with `scylla-cql`'s
//! response decoder into the expected values.

use std::borrow::Cow;
use std::collections::HashMap;

use bytes::Bytes;
use scylla_cql::frame::SerializedRequest;
use scylla_cql::frame::protocol_features::ProtocolFeatures;
use scylla_cql::frame::request::query::{PagingState, Query, QueryParameters};
use scylla_cql::frame::request::{Options, Prepare, SerializableRequest};
use scylla_cql::frame::response::error::{DbError, WriteType as DriverWriteType};
use scylla_cql::frame::response::result::{ColumnType, NativeType};
use scylla_cql::frame::response::{Response, ResponseOpcode, result};
use scylla_cql::frame::types::{Consistency as DriverCl, SerialConsistency};
use scylla_cql::serialize::row::SerializedValues;
use scylla_cql::value::{Counter, CqlVarint};

use super::frame::{HEADER_LEN, Peek, parse_header};
use super::request::Request;
use super::response;
use super::wire::BoundValue;
use crate::error::{Consistency, CqlError, WriteType};
use crate::exec::prepare::PreparedMeta;
use crate::exec::{ColSpec, Outcome, ResultRows, SchemaChange};
use crate::types::ColType;
use crate::value::Value;

fn frame_of<R: SerializableRequest>(req: &R) -> Vec<u8> {
    let mut f = SerializedRequest::make(req, None, false).expect("serializes");
    f.set_stream(7);
    f.get_data().to_vec()
}

fn parse(frame: &[u8]) -> Request {
    let Peek::Frame(h, n) = parse_header(frame) else {
        panic!("not a frame")
    };
    assert_eq!((h.version, h.stream, n), (4, 7, frame.len()));
    Request::decode(h.opcode, &Bytes::copy_from_slice(&frame[HEADER_LEN..]))
        .expect("decodes")
        .expect("known opcode")
}

/// Decodes one of our response frames with scylla-cql.
fn decode(frame: &[u8]) -> Response {
    assert_eq!(frame[0], 0x84, "response version byte");
    let op = ResponseOpcode::try_from(frame[4]).expect("opcode");
    let len = u32::from_be_bytes([frame[5], frame[6], frame[7], frame[8]]) as usize;
    assert_eq!(len, frame.len() - HEADER_LEN, "length field");
    Response::deserialize(
        &ProtocolFeatures::default(),
        op,
        Bytes::copy_from_slice(&frame[HEADER_LEN..]),
        None,
    )
    .expect("scylla-cql decodes it")
}

#[test]
fn driver_query_frames_parse() {
    let mut values = SerializedValues::new();
    values
        .add_value(
            &scylla_cql::value::Counter(5),
            &ColumnType::Native(NativeType::Counter),
        )
        .expect("value");
    values
        .add_value(&"a", &ColumnType::Native(NativeType::Text))
        .expect("value");
    let q = Query {
        contents: Cow::Borrowed("UPDATE ks.t SET c = c + ? WHERE pk = ?"),
        parameters: QueryParameters {
            consistency: DriverCl::LocalQuorum,
            serial_consistency: Some(SerialConsistency::LocalSerial),
            timestamp: Some(1234),
            page_size: Some(100),
            paging_state: PagingState::new_from_raw_bytes(&[0u8, 0, 0, 0, 0, 0, 0, 9][..]),
            skip_metadata: true,
            values: Cow::Owned(values),
        },
    };
    let Request::Query(text, p) = parse(&frame_of(&q)) else {
        panic!("not a query")
    };
    assert_eq!(text, "UPDATE ks.t SET c = c + ? WHERE pk = ?");
    assert_eq!(p.consistency, Some(Consistency(0x0006)));
    assert_eq!(p.serial_consistency, Some(Consistency(0x0009)));
    assert_eq!(p.timestamp, Some(1234));
    assert_eq!(p.page_size, Some(100));
    assert_eq!(
        p.paging_state.as_deref(),
        Some(&[0u8, 0, 0, 0, 0, 0, 0, 9][..])
    );
    assert!(p.skip_metadata);
    assert_eq!(
        p.values,
        vec![
            BoundValue::Bytes(Bytes::copy_from_slice(&5i64.to_be_bytes())),
            BoundValue::Bytes(Bytes::from_static(b"a"))
        ]
    );

    assert_eq!(parse(&frame_of(&Options)), Request::Options);
    assert_eq!(
        parse(&frame_of(&Prepare {
            query: "SELECT * FROM t"
        })),
        Request::Prepare("SELECT * FROM t".into())
    );
}

#[test]
fn truncated_frames_never_panic() {
    let q = Query {
        contents: Cow::Borrowed("SELECT * FROM system.local"),
        parameters: QueryParameters::default(),
    };
    let full = frame_of(&q);
    for cut in 0..full.len() {
        // A shorter body with a patched length must decode to an error, not panic.
        let body = &full[HEADER_LEN..HEADER_LEN + cut.min(full.len() - HEADER_LEN)];
        let _ = Request::decode(full[4], &Bytes::copy_from_slice(body));
    }
    for op in 0..=0x10u8 {
        for junk in [
            &[][..],
            &[0xff; 3][..],
            &[0, 0, 0, 1, 0xff][..],
            &[0x7f, 0xff, 0xff, 0xff][..],
        ] {
            let _ = Request::decode(op, &Bytes::copy_from_slice(junk));
        }
    }
}

#[test]
fn error_bodies_decode_as_the_driver_expects() {
    let cl = Consistency::LOCAL_QUORUM;
    let cases: Vec<(CqlError, DbError)> = vec![
        (
            CqlError::WriteTimeout {
                consistency: cl,
                received: 0,
                block_for: 1,
                write_type: WriteType::Counter,
            },
            DbError::WriteTimeout {
                consistency: DriverCl::LocalQuorum,
                received: 0,
                required: 1,
                write_type: DriverWriteType::Counter,
            },
        ),
        (
            CqlError::Unavailable {
                consistency: cl,
                required: 1,
                alive: 0,
            },
            DbError::Unavailable {
                consistency: DriverCl::LocalQuorum,
                required: 1,
                alive: 0,
            },
        ),
        (
            CqlError::WriteFailure {
                consistency: cl,
                received: 0,
                block_for: 1,
                num_failures: 1,
                write_type: WriteType::Simple,
            },
            DbError::WriteFailure {
                consistency: DriverCl::LocalQuorum,
                received: 0,
                required: 1,
                numfailures: 1,
                write_type: DriverWriteType::Simple,
            },
        ),
        (
            CqlError::ReadTimeout {
                consistency: cl,
                received: 0,
                block_for: 1,
                data_present: false,
            },
            DbError::ReadTimeout {
                consistency: DriverCl::LocalQuorum,
                received: 0,
                required: 1,
                data_present: false,
            },
        ),
        (CqlError::Overloaded("x".into()), DbError::Overloaded),
        (CqlError::Server("x".into()), DbError::ServerError),
        (CqlError::IsBootstrapping, DbError::IsBootstrapping),
        (CqlError::Invalid("x".into()), DbError::Invalid),
        (CqlError::Syntax("x".into()), DbError::SyntaxError),
        (CqlError::Protocol("x".into()), DbError::ProtocolError),
        (CqlError::Unauthorized("x".into()), DbError::Unauthorized),
        (CqlError::Config("x".into()), DbError::ConfigError),
        (
            CqlError::AlreadyExists {
                message: "m".into(),
                keyspace: "ks".into(),
                table: "t".into(),
            },
            DbError::AlreadyExists {
                keyspace: "ks".into(),
                table: "t".into(),
            },
        ),
        (
            CqlError::Unprepared(vec![1, 2, 3]),
            DbError::Unprepared {
                statement_id: Bytes::from_static(&[1, 2, 3]),
            },
        ),
    ];
    for (ours, theirs) in cases {
        let mut f = Vec::new();
        response::error(&mut f, 4, 3, &ours);
        assert_eq!(i16::from_be_bytes([f[2], f[3]]), 3, "stream echoed");
        match decode(&f) {
            Response::Error(e) => {
                assert_eq!(e.error, theirs);
                assert_eq!(e.reason, ours.to_string());
            }
            other => panic!("{other:?}"),
        }
    }
}

fn spec(name: &str, ty: ColType) -> ColSpec {
    ColSpec {
        keyspace: "ks".into(),
        table: "t".into(),
        name: name.into(),
        ty,
    }
}

#[test]
fn results_decode() {
    let meta = PreparedMeta {
        vars: vec![spec("c", ColType::Counter), spec("pk", ColType::Text)],
        pk_indexes: vec![1],
        result: None,
    };
    let mut f = Vec::new();
    response::prepared(&mut f, 4, 1, &[9; 16], &meta);
    let Response::Result(result::Result::Prepared(p)) = decode(&f) else {
        panic!("not prepared")
    };
    assert_eq!(&p.id[..], &[9; 16]);
    assert_eq!(p.prepared_metadata.pk_indexes.len(), 1);
    assert_eq!(p.prepared_metadata.pk_indexes[0].index, 1);
    let names: Vec<&str> = p
        .prepared_metadata
        .col_specs
        .iter()
        .map(|c| c.name())
        .collect();
    assert_eq!(names, ["c", "pk"]);
    assert_eq!(
        p.prepared_metadata.col_specs[0].typ(),
        &ColumnType::Native(NativeType::Counter)
    );

    let rows = ResultRows {
        cols: vec![
            spec("pk", ColType::Text),
            spec("c", ColType::Counter),
            spec(
                "m",
                ColType::Frozen(Box::new(ColType::Map(
                    Box::new(ColType::Text),
                    Box::new(ColType::Text),
                ))),
            ),
            spec("v", ColType::Varint),
        ],
        rows: vec![
            vec![
                Some(Value::Text("a".into())),
                Some(Value::Counter(-3)),
                Some(Value::Map(vec![(
                    Value::Text("k".into()),
                    Value::Text("v".into()),
                )])),
                Some(Value::Varint(-129)),
            ],
            vec![Some(Value::Text("b".into())), None, None, None],
        ],
        paging_state: Some(vec![0, 0, 0, 0, 0, 0, 0, 2]),
    };
    let mut f = Vec::new();
    response::result(&mut f, 4, 1, &Outcome::Rows(rows), false);
    let Response::Result(result::Result::Rows((raw, paging))) = decode(&f) else {
        panic!("not rows")
    };
    let des = raw.deserialize_metadata().expect("metadata");
    assert_eq!(des.rows_count(), 2);
    assert_eq!(des.metadata().col_count(), 4);
    assert!(format!("{paging:?}").contains("HasMorePages"), "{paging:?}");
    type Row = (String, Option<Counter>, Option<HashMap<String, String>>);
    let typed: Vec<Row> = des
        .rows_iter::<(
            String,
            Option<Counter>,
            Option<HashMap<String, String>>,
            Option<CqlVarint>,
        )>()
        .expect("typed rows")
        .map(|r| {
            let (a, b, c, _) = r.expect("row");
            (a, b, c)
        })
        .collect();
    assert_eq!(typed[0].1, Some(scylla_cql::value::Counter(-3)));
    assert_eq!(
        typed[0]
            .2
            .as_ref()
            .and_then(|m| m.get("k"))
            .map(String::as_str),
        Some("v")
    );
    assert_eq!(typed[1], ("b".to_string(), None, None));

    for outcome in [
        Outcome::Void,
        Outcome::SetKeyspace("ks".into()),
        Outcome::SchemaChange(SchemaChange {
            change: "CREATED",
            keyspace: "ks".into(),
            table: Some("t".into()),
        }),
    ] {
        let mut f = Vec::new();
        response::result(&mut f, 4, 1, &outcome, false);
        let text = format!("{:?}", decode(&f));
        assert!(
            text.contains(match outcome {
                Outcome::Void => "Void",
                Outcome::SetKeyspace(_) => "SetKeyspace",
                _ => "SchemaChange",
            }),
            "{text}"
        );
    }
}

#[test]
fn supported_ready_and_events_decode() {
    let mut f = Vec::new();
    response::supported(&mut f, 4, 0, crate::persona::Persona::Cassandra);
    let Response::Supported(s) = decode(&f) else {
        panic!("not supported")
    };
    assert_eq!(
        s.options.get("CQL_VERSION"),
        Some(&vec!["3.4.4".to_string()])
    );
    assert_eq!(s.options.get("COMPRESSION"), Some(&Vec::new()));
    assert!(
        !s.options
            .keys()
            .any(|k| k.starts_with("SCYLLA") || k.starts_with("TABLETS")),
        "no ScyllaDB keys"
    );
    // The ScyllaDB persona's keys are what the driver reads as a sharded node.
    let mut f = Vec::new();
    response::supported(&mut f, 4, 0, crate::persona::Persona::Scylla);
    let Response::Supported(s) = decode(&f) else {
        panic!("not supported")
    };
    for key in [
        "SCYLLA_SHARD",
        "SCYLLA_NR_SHARDS",
        "SCYLLA_SHARDING_IGNORE_MSB",
    ] {
        let value = s.options.get(key).and_then(|v| v.first());
        assert!(
            value.is_some_and(|v| v.parse::<u16>().is_ok()),
            "{key}: {value:?}"
        );
    }
    let mut f = Vec::new();
    response::ready(&mut f, 4, 0);
    assert!(matches!(decode(&f), Response::Ready));
    let mut f = Vec::new();
    response::schema_event(
        &mut f,
        4,
        &SchemaChange {
            change: "DROPPED",
            keyspace: "ks".into(),
            table: None,
        },
    );
    assert_eq!(i16::from_be_bytes([f[2], f[3]]), -1, "events use stream -1");
    assert!(format!("{:?}", decode(&f)).contains("ks"));
}
