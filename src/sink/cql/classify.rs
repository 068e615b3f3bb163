//! Which outcome class a driver error belongs to.
//!
//! The rule: only an error that proves the request was **not applied** may lead to a
//! resend. Everything the driver cannot prove is an unknown outcome. The table follows
//! the driver's own `DefaultRetryPolicy` (which retries non-idempotent requests only for
//! errors raised before the request reached a replica) and Cassandra's write path (the
//! counter leader applies locally before it can time out or report overload).
//!
//! One row depends on the store: `Unavailable` is "not applied" on Apache Cassandra,
//! which checks replicas before its counter leader applies anything, and unknown on
//! ScyllaDB (whose counter leader applies first) or a store that could not be identified
//! (see [`super::store`]).
//!
//! The driver's error enums are `#[non_exhaustive]`, so Rust requires a catch-all arm for
//! variants added by later driver versions. Every variant that exists in the driver
//! version we build against is listed by name, and `clippy::wildcard_enum_match_arm` is
//! denied on each match: if a driver upgrade adds a variant, clippy (run by CI with
//! `-D warnings`) fails until someone classifies it on purpose. The catch-all arms stay
//! for the compiler's sake and say "unknown", the one class that can never double count.

use scylla::errors::{DbError, ExecutionError, PrepareError, RequestAttemptError};

use crate::sink::{Outcome, WriteError};

use super::store::StoreKind;

/// Classifies a failed counter write sent to a store of kind `store`.
// Do not remove this lint: a new variant must be classified on purpose.
#[deny(clippy::wildcard_enum_match_arm)]
pub fn classify(error: &ExecutionError, store: StoreKind) -> Outcome {
    let text = error.to_string();
    let not_applied = |kind| Outcome::NotAppliedTransient(WriteError::new(kind, text.clone()));
    let rejected = |kind| Outcome::NotAppliedPermanent(WriteError::new(kind, text.clone()));
    let unknown = |kind| Outcome::Unknown(WriteError::new(kind, text.clone()));
    match error {
        // Nothing was sent.
        ExecutionError::BadQuery(_) => rejected("bad_query"),
        ExecutionError::EmptyPlan => not_applied("empty_plan"),
        ExecutionError::PrepareError(_) => not_applied("prepare_failed"),
        ExecutionError::ConnectionPoolError(_) => not_applied("no_connection"),
        // Sent, and the client stopped waiting.
        ExecutionError::RequestTimeout(_) => unknown("client_timeout"),
        ExecutionError::LastAttemptError(attempt) => classify_attempt(attempt, &text, store),
        // Raised only by USE and DDL requests, never by a counter write; if one ever
        // appears here, nothing proves the write did not apply.
        ExecutionError::UseKeyspaceError(_) => unknown("use_keyspace"),
        ExecutionError::SchemaAgreementError(_) => unknown("schema_agreement"),
        ExecutionError::MetadataError(_) => unknown("metadata"),
        _ => unknown("unclassified"),
    }
}

// Do not remove this lint: a new variant must be classified on purpose.
#[deny(clippy::wildcard_enum_match_arm)]
fn classify_attempt(error: &RequestAttemptError, text: &str, store: StoreKind) -> Outcome {
    let not_applied = |kind| Outcome::NotAppliedTransient(WriteError::new(kind, text));
    let rejected = |kind| Outcome::NotAppliedPermanent(WriteError::new(kind, text));
    let unknown = |kind| Outcome::Unknown(WriteError::new(kind, text));
    match error {
        // Failed before anything was written to the connection.
        RequestAttemptError::SerializationError(_) => rejected("serialization"),
        RequestAttemptError::CqlRequestSerialization(_) => rejected("serialization"),
        RequestAttemptError::UnableToAllocStreamId => not_applied("no_stream_id"),
        // The connection broke: the request may have been written and executed.
        RequestAttemptError::BrokenConnectionError(_) => unknown("connection_broken"),
        // A response arrived but could not be read: the server did something.
        RequestAttemptError::BodyExtensionsParseError(_) => unknown("response_unreadable"),
        RequestAttemptError::CqlResultParseError(_) => unknown("response_unreadable"),
        RequestAttemptError::CqlErrorParseError(_) => unknown("response_unreadable"),
        RequestAttemptError::UnexpectedResponse(_) => unknown("response_unexpected"),
        RequestAttemptError::NonfinishedPagingState => unknown("response_unexpected"),
        // The server answered UNPREPARED and re-preparing failed: not executed.
        RequestAttemptError::RepreparedIdChanged { .. } => not_applied("reprepare_failed"),
        RequestAttemptError::RepreparedIdMissingInBatch => not_applied("reprepare_failed"),
        RequestAttemptError::DbError(db, _) => classify_db(db, text, store),
        _ => unknown("unclassified"),
    }
}

// Do not remove this lint: a new variant must be classified on purpose.
#[deny(clippy::wildcard_enum_match_arm)]
fn classify_db(error: &DbError, text: &str, store: StoreKind) -> Outcome {
    let not_applied = |kind| Outcome::NotAppliedTransient(WriteError::new(kind, text));
    let rejected = |kind| Outcome::NotAppliedPermanent(WriteError::new(kind, text));
    let unknown = |kind| Outcome::Unknown(WriteError::new(kind, text));
    match error {
        // Refused before execution; sending it again cannot help.
        DbError::SyntaxError => rejected("syntax_error"),
        DbError::Invalid => rejected("invalid"),
        DbError::AlreadyExists { .. } => rejected("already_exists"),
        DbError::FunctionFailure { .. } => rejected("function_failure"),
        DbError::AuthenticationError => rejected("authentication"),
        DbError::Unauthorized => rejected("unauthorized"),
        DbError::ConfigError => rejected("config_error"),
        DbError::ProtocolError => rejected("protocol_error"),
        // Apache Cassandra refuses before any replica is contacted; a ScyllaDB counter
        // leader applies first, then checks replicas (see the module documentation).
        DbError::Unavailable { .. } if store.unavailable_means_not_applied() => {
            not_applied("unavailable")
        }
        DbError::Unavailable { .. } => unknown("unavailable"),
        // Refused before execution; worth another try later.
        DbError::IsBootstrapping => not_applied("bootstrapping"),
        DbError::Unprepared { .. } => not_applied("unprepared"),
        // The coordinator or the counter leader may have applied it.
        DbError::WriteTimeout { .. } => unknown("write_timeout"),
        DbError::WriteFailure { .. } => unknown("write_failure"),
        DbError::ReadTimeout { .. } => unknown("read_timeout"),
        DbError::ReadFailure { .. } => unknown("read_failure"),
        DbError::Overloaded => unknown("overloaded"),
        DbError::ServerError => unknown("server_error"),
        DbError::TruncateError => unknown("truncate_error"),
        // ScyllaDB's per-partition rate limit may reject on some replicas only.
        DbError::RateLimitReached { .. } => unknown("rate_limited"),
        DbError::Other(_) => unknown("other_db_error"),
        _ => unknown("unclassified"),
    }
}

/// The error texts of recent failures, handed out again for failures with the same
/// text: when the store is down, every write of a flush fails alike, and the flush
/// holds every outcome until it settles. One shared text instead of one copy per write
/// (hundreds of bytes each, for hundreds of thousands of writes) keeps that from
/// growing with the flush.
#[derive(Debug, Default)]
pub struct SharedTexts {
    recent: parking_lot::Mutex<std::collections::VecDeque<std::sync::Arc<str>>>,
}

impl SharedTexts {
    /// Distinct texts remembered.
    const KEPT: usize = 8;

    /// `outcome`, its error text replaced by an equal one handed out before, if any.
    pub fn share(&self, mut outcome: Outcome) -> Outcome {
        let error = match &mut outcome {
            Outcome::Applied => return outcome,
            Outcome::NotAppliedTransient(e)
            | Outcome::NotAppliedPermanent(e)
            | Outcome::Unknown(e) => e,
        };
        let mut recent = self.recent.lock();
        match recent.iter().find(|t| ***t == *error.text) {
            Some(same) => error.text = same.clone(),
            None => {
                if recent.len() == Self::KEPT {
                    recent.pop_back();
                }
                recent.push_front(error.text.clone());
            }
        }
        drop(recent);
        outcome
    }
}

/// Whether a failed PREPARE at start is a configuration error that retrying cannot fix
/// (the statement or the permissions are wrong), rather than a store that is not
/// answering well yet (no connection, a timeout, an overloaded node).
// Do not remove this lint: a new variant must be classified on purpose.
#[deny(clippy::wildcard_enum_match_arm)]
pub fn prepare_failure_is_permanent(error: &PrepareError) -> bool {
    match error {
        PrepareError::AllAttemptsFailed {
            first_attempt: RequestAttemptError::DbError(db, _),
        } => matches!(
            classify_db(db, "", StoreKind::Unidentified),
            Outcome::NotAppliedPermanent(_)
        ),
        PrepareError::AllAttemptsFailed { .. }
        | PrepareError::ConnectionPoolError(_)
        | PrepareError::PreparedStatementIdsMismatch => false,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scylla::errors::{
        BadKeyspaceName, BadQuery, BrokenConnectionError, BrokenConnectionErrorKind,
        ConnectionPoolError, CqlRequestSerializationError, CqlResponseKind, CqlResultParseError,
        FrameBodyExtensionsParseError, MetadataError, OperationType, PrepareError,
        SchemaAgreementError, SerializationError, UseKeyspaceError, WriteType,
    };
    use scylla::statement::Consistency;
    use std::time::Duration;

    fn db(error: DbError) -> ExecutionError {
        ExecutionError::LastAttemptError(RequestAttemptError::DbError(error, "message".into()))
    }

    fn attempt(error: RequestAttemptError) -> ExecutionError {
        ExecutionError::LastAttemptError(error)
    }

    fn broken() -> BrokenConnectionError {
        BrokenConnectionErrorKind::KeepaliveTimeout(std::net::Ipv4Addr::LOCALHOST.into()).into()
    }

    fn low_level() -> scylla::errors::CqlErrorParseError {
        let overflow = u8::try_from(300_i32).expect_err("300 does not fit a u8");
        scylla::errors::CqlErrorParseError::ErrorCodeParseError(overflow.into())
    }

    /// The name of a variant, through matches that name every variant the driver has
    /// (clippy denies a wildcard arm that hides one): the classifier's test must list
    /// them all.
    #[deny(clippy::wildcard_enum_match_arm)]
    fn variant(error: &ExecutionError) -> String {
        let name = match error {
            ExecutionError::BadQuery(_) => "BadQuery",
            ExecutionError::EmptyPlan => "EmptyPlan",
            ExecutionError::PrepareError(_) => "PrepareError",
            ExecutionError::ConnectionPoolError(_) => "ConnectionPoolError",
            ExecutionError::RequestTimeout(_) => "RequestTimeout",
            ExecutionError::UseKeyspaceError(_) => "UseKeyspaceError",
            ExecutionError::SchemaAgreementError(_) => "SchemaAgreementError",
            ExecutionError::MetadataError(_) => "MetadataError",
            ExecutionError::LastAttemptError(attempt) => {
                return match attempt {
                    RequestAttemptError::SerializationError(_) => "SerializationError",
                    RequestAttemptError::CqlRequestSerialization(_) => "CqlRequestSerialization",
                    RequestAttemptError::UnableToAllocStreamId => "UnableToAllocStreamId",
                    RequestAttemptError::BrokenConnectionError(_) => "BrokenConnectionError",
                    RequestAttemptError::BodyExtensionsParseError(_) => "BodyExtensionsParseError",
                    RequestAttemptError::CqlResultParseError(_) => "CqlResultParseError",
                    RequestAttemptError::CqlErrorParseError(_) => "CqlErrorParseError",
                    RequestAttemptError::UnexpectedResponse(_) => "UnexpectedResponse",
                    RequestAttemptError::RepreparedIdChanged { .. } => "RepreparedIdChanged",
                    RequestAttemptError::RepreparedIdMissingInBatch => "RepreparedIdMissingInBatch",
                    RequestAttemptError::NonfinishedPagingState => "NonfinishedPagingState",
                    RequestAttemptError::DbError(db, _) => {
                        return format!(
                            "DbError::{}",
                            match db {
                                DbError::SyntaxError => "SyntaxError",
                                DbError::Invalid => "Invalid",
                                DbError::AlreadyExists { .. } => "AlreadyExists",
                                DbError::FunctionFailure { .. } => "FunctionFailure",
                                DbError::AuthenticationError => "AuthenticationError",
                                DbError::Unauthorized => "Unauthorized",
                                DbError::ConfigError => "ConfigError",
                                DbError::Unavailable { .. } => "Unavailable",
                                DbError::Overloaded => "Overloaded",
                                DbError::IsBootstrapping => "IsBootstrapping",
                                DbError::TruncateError => "TruncateError",
                                DbError::ReadTimeout { .. } => "ReadTimeout",
                                DbError::WriteTimeout { .. } => "WriteTimeout",
                                DbError::ReadFailure { .. } => "ReadFailure",
                                DbError::WriteFailure { .. } => "WriteFailure",
                                DbError::Unprepared { .. } => "Unprepared",
                                DbError::ServerError => "ServerError",
                                DbError::ProtocolError => "ProtocolError",
                                DbError::RateLimitReached { .. } => "RateLimitReached",
                                DbError::Other(_) => "Other",
                                _ => "a DbError variant this test does not know",
                            }
                        );
                    }
                    _ => "a RequestAttemptError variant this test does not know",
                }
                .to_owned();
            }
            _ => "an ExecutionError variant this test does not know",
        };
        name.to_owned()
    }

    /// Every variant of the driver's three error enums, with the class and kind it must
    /// get; a variant missing from this table fails the test.
    #[test]
    fn every_driver_error_variant_is_classified_on_purpose() {
        let cl = Consistency::LocalQuorum;
        let cases: Vec<(ExecutionError, &str, &str)> = vec![
            (
                ExecutionError::BadQuery(BadQuery::PartitionKeyExtraction),
                "rejected",
                "bad_query",
            ),
            (ExecutionError::EmptyPlan, "requeued", "empty_plan"),
            (
                ExecutionError::PrepareError(PrepareError::PreparedStatementIdsMismatch),
                "requeued",
                "prepare_failed",
            ),
            (
                ExecutionError::ConnectionPoolError(ConnectionPoolError::Initializing),
                "requeued",
                "no_connection",
            ),
            (
                ExecutionError::RequestTimeout(Duration::from_secs(1)),
                "unknown",
                "client_timeout",
            ),
            (
                ExecutionError::UseKeyspaceError(UseKeyspaceError::BadKeyspaceName(
                    BadKeyspaceName::Empty,
                )),
                "unknown",
                "use_keyspace",
            ),
            (
                ExecutionError::SchemaAgreementError(SchemaAgreementError::ConnectionPoolError(
                    ConnectionPoolError::Initializing,
                )),
                "unknown",
                "schema_agreement",
            ),
            (
                ExecutionError::MetadataError(MetadataError::ConnectionPoolError(
                    ConnectionPoolError::Initializing,
                )),
                "unknown",
                "metadata",
            ),
            (
                attempt(RequestAttemptError::SerializationError(
                    SerializationError::new(std::fmt::Error),
                )),
                "rejected",
                "serialization",
            ),
            (
                attempt(RequestAttemptError::CqlRequestSerialization(
                    CqlRequestSerializationError::SnapCompressError(std::sync::Arc::new(
                        std::fmt::Error,
                    )),
                )),
                "rejected",
                "serialization",
            ),
            (
                attempt(RequestAttemptError::UnableToAllocStreamId),
                "requeued",
                "no_stream_id",
            ),
            (
                attempt(RequestAttemptError::BrokenConnectionError(broken())),
                "unknown",
                "connection_broken",
            ),
            (
                attempt(RequestAttemptError::BodyExtensionsParseError(
                    FrameBodyExtensionsParseError::NoCompressionNegotiated,
                )),
                "unknown",
                "response_unreadable",
            ),
            (
                attempt(RequestAttemptError::CqlResultParseError(
                    CqlResultParseError::UnknownResultId(99),
                )),
                "unknown",
                "response_unreadable",
            ),
            (
                attempt(RequestAttemptError::CqlErrorParseError(low_level())),
                "unknown",
                "response_unreadable",
            ),
            (
                attempt(RequestAttemptError::UnexpectedResponse(
                    CqlResponseKind::Ready,
                )),
                "unknown",
                "response_unexpected",
            ),
            (
                attempt(RequestAttemptError::RepreparedIdChanged {
                    statement: "UPDATE".into(),
                    expected_id: vec![1],
                    reprepared_id: vec![2],
                }),
                "requeued",
                "reprepare_failed",
            ),
            (
                attempt(RequestAttemptError::RepreparedIdMissingInBatch),
                "requeued",
                "reprepare_failed",
            ),
            (
                attempt(RequestAttemptError::NonfinishedPagingState),
                "unknown",
                "response_unexpected",
            ),
            (db(DbError::SyntaxError), "rejected", "syntax_error"),
            (db(DbError::Invalid), "rejected", "invalid"),
            (
                db(DbError::AlreadyExists {
                    keyspace: "k".into(),
                    table: "t".into(),
                }),
                "rejected",
                "already_exists",
            ),
            (
                db(DbError::FunctionFailure {
                    keyspace: "k".into(),
                    function: "f".into(),
                    arg_types: Vec::new(),
                }),
                "rejected",
                "function_failure",
            ),
            (
                db(DbError::AuthenticationError),
                "rejected",
                "authentication",
            ),
            (db(DbError::Unauthorized), "rejected", "unauthorized"),
            (db(DbError::ConfigError), "rejected", "config_error"),
            (
                db(DbError::Unavailable {
                    consistency: cl,
                    required: 2,
                    alive: 1,
                }),
                "requeued",
                "unavailable",
            ),
            (db(DbError::Overloaded), "unknown", "overloaded"),
            (db(DbError::IsBootstrapping), "requeued", "bootstrapping"),
            (db(DbError::TruncateError), "unknown", "truncate_error"),
            (
                db(DbError::ReadTimeout {
                    consistency: cl,
                    received: 0,
                    required: 2,
                    data_present: false,
                }),
                "unknown",
                "read_timeout",
            ),
            (
                db(DbError::WriteTimeout {
                    consistency: cl,
                    received: 0,
                    required: 2,
                    write_type: WriteType::Counter,
                }),
                "unknown",
                "write_timeout",
            ),
            (
                db(DbError::ReadFailure {
                    consistency: cl,
                    received: 0,
                    required: 2,
                    numfailures: 1,
                    data_present: false,
                }),
                "unknown",
                "read_failure",
            ),
            (
                db(DbError::WriteFailure {
                    consistency: cl,
                    received: 0,
                    required: 2,
                    numfailures: 1,
                    write_type: WriteType::Counter,
                }),
                "unknown",
                "write_failure",
            ),
            (
                db(DbError::Unprepared {
                    statement_id: bytes::Bytes::from_static(b"id"),
                }),
                "requeued",
                "unprepared",
            ),
            (db(DbError::ServerError), "unknown", "server_error"),
            (db(DbError::ProtocolError), "rejected", "protocol_error"),
            (
                db(DbError::RateLimitReached {
                    op_type: OperationType::Write,
                    rejected_by_coordinator: true,
                }),
                "unknown",
                "rate_limited",
            ),
            (db(DbError::Other(0x1234)), "unknown", "other_db_error"),
        ];
        let mut seen = std::collections::BTreeSet::new();
        for (error, class, kind) in &cases {
            // Apache Cassandra; the one row that differs on other stores is tested below.
            let outcome = classify(error, StoreKind::Cassandra);
            let failure = match &outcome {
                Outcome::NotAppliedTransient(f)
                | Outcome::NotAppliedPermanent(f)
                | Outcome::Unknown(f) => f,
                Outcome::Applied => panic!("{error} classified as applied"),
            };
            assert_eq!((outcome.label(), failure.kind), (*class, *kind), "{error}");
            let name = variant(error);
            assert!(!name.contains("does not know"), "{name}: {error}");
            seen.insert(name);
        }
        // 9 ExecutionError variants (one of them holds the next enum), 11 more of
        // RequestAttemptError (one holds DbError), 20 of DbError.
        assert_eq!(seen.len(), 8 + 11 + 20, "{seen:?}");
    }

    /// The one row that depends on the store: on ScyllaDB (its counter leader applies,
    /// then checks replicas) and on a store nobody identified, `Unavailable` proves
    /// nothing, so it is never re-sent. Everything else classifies alike.
    #[test]
    fn unavailable_is_resent_only_on_apache_cassandra() {
        let unavailable = db(DbError::Unavailable {
            consistency: Consistency::LocalQuorum,
            required: 2,
            alive: 1,
        });
        for (store, expected) in [
            (StoreKind::Cassandra, "requeued"),
            (StoreKind::ScyllaDb, "unknown"),
            (StoreKind::Unidentified, "unknown"),
        ] {
            let outcome = classify(&unavailable, store);
            assert_eq!(outcome.label(), expected, "{store:?}");
        }
        for store in [StoreKind::ScyllaDb, StoreKind::Unidentified] {
            assert_eq!(
                classify(&db(DbError::IsBootstrapping), store).label(),
                "requeued"
            );
            assert_eq!(classify(&db(DbError::Overloaded), store).label(), "unknown");
        }
    }

    #[test]
    fn only_a_refused_statement_fails_the_start_for_good() {
        let attempt = |db| PrepareError::AllAttemptsFailed {
            first_attempt: RequestAttemptError::DbError(db, "message".into()),
        };
        assert!(prepare_failure_is_permanent(&attempt(DbError::Invalid)));
        assert!(prepare_failure_is_permanent(&attempt(DbError::SyntaxError)));
        assert!(prepare_failure_is_permanent(&attempt(
            DbError::Unauthorized
        )));
        assert!(!prepare_failure_is_permanent(&attempt(DbError::Overloaded)));
        assert!(!prepare_failure_is_permanent(&attempt(
            DbError::ServerError
        )));
        assert!(!prepare_failure_is_permanent(&attempt(
            DbError::IsBootstrapping
        )));
        assert!(!prepare_failure_is_permanent(
            &PrepareError::ConnectionPoolError(ConnectionPoolError::Initializing)
        ));
        assert!(!prepare_failure_is_permanent(
            &PrepareError::AllAttemptsFailed {
                first_attempt: RequestAttemptError::UnableToAllocStreamId,
            }
        ));
    }

    #[test]
    fn failures_with_the_same_text_share_it() {
        let texts = SharedTexts::default();
        let down = || {
            classify(
                &ExecutionError::ConnectionPoolError(ConnectionPoolError::Initializing),
                StoreKind::Cassandra,
            )
        };
        let (Outcome::NotAppliedTransient(a), Outcome::NotAppliedTransient(b)) =
            (texts.share(down()), texts.share(down()))
        else {
            panic!("not transient")
        };
        assert!(
            std::sync::Arc::ptr_eq(&a.text, &b.text),
            "one text for both"
        );
        assert_eq!(texts.share(Outcome::Applied), Outcome::Applied);
    }

    #[test]
    fn the_failure_kind_and_text_are_kept() {
        let Outcome::Unknown(failure) = classify(&db(DbError::Overloaded), StoreKind::Cassandra)
        else {
            panic!("overloaded must be unknown");
        };
        assert_eq!(failure.kind, "overloaded");
        assert!(failure.text.contains("message"), "{}", failure.text);
    }
}
