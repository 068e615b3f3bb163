//! How every write of the write path is sent: its idempotence, its retry policy, its
//! consistency and its timeout, set in one place for a prepared statement and for the
//! batches built from it (the scylla driver's execution profiles group the last three;
//! idempotence is per statement, so a profile here carries all four).
//!
//! Every write gets the driver's `FallthroughRetryPolicy`: the driver never sends a
//! request again on its own. Whether a write may be sent again is decided above the
//! sink, by the kind of write: a counter delta only after an error that proves it was
//! not applied, an idempotent write until it applies. Speculative execution, which the
//! driver runs only for idempotent statements, stays off for counter deltas whatever
//! the application's session profile says.

use std::sync::Arc;
use std::time::Duration;

use scylla::policies::retry::FallthroughRetryPolicy;
use scylla::statement::Consistency;
use scylla::statement::batch::Batch;
use scylla::statement::prepared::PreparedStatement;

use crate::config::ConsistencyLevel;

use super::session;

/// The settings of one kind of write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteProfile {
    idempotent: bool,
    consistency: Consistency,
    timeout: Duration,
}

impl WriteProfile {
    /// A counter delta: never idempotent (sending it twice counts it twice).
    pub fn counter(consistency: ConsistencyLevel, timeout: Duration) -> WriteProfile {
        WriteProfile {
            idempotent: false,
            consistency: session::consistency(consistency),
            timeout,
        }
    }

    /// A write that leaves the same cells however often it applies (running totals
    /// by their write time, ledger rows, outcome rows).
    pub fn idempotent(consistency: ConsistencyLevel, timeout: Duration) -> WriteProfile {
        WriteProfile {
            idempotent: true,
            consistency: session::consistency(consistency),
            timeout,
        }
    }

    /// Sets these settings on a statement or a batch.
    pub fn apply<S: Settings>(&self, statement: &mut S) {
        statement.set_is_idempotent(self.idempotent);
        statement.set_retry_policy(Some(Arc::new(FallthroughRetryPolicy::new())));
        statement.set_consistency(self.consistency);
        statement.set_request_timeout(Some(self.timeout));
    }

    /// A batch of `rows` copies of `statement`, of `kind`, with these settings.
    pub fn batch(
        &self,
        kind: scylla::statement::batch::BatchType,
        statement: &PreparedStatement,
        rows: usize,
    ) -> Batch {
        let mut batch = Batch::new(kind);
        for _ in 0..rows {
            batch.append_statement(statement.clone());
        }
        self.apply(&mut batch);
        batch
    }
}

/// What a [`WriteProfile`] sets: the driver's setters, which prepared statements and
/// batches both have without a common trait.
pub trait Settings {
    /// See the driver's `set_is_idempotent`.
    fn set_is_idempotent(&mut self, idempotent: bool);
    /// See the driver's `set_retry_policy`.
    fn set_retry_policy(&mut self, policy: Option<Arc<dyn scylla::policies::retry::RetryPolicy>>);
    /// See the driver's `set_consistency`.
    fn set_consistency(&mut self, consistency: Consistency);
    /// See the driver's `set_request_timeout`.
    fn set_request_timeout(&mut self, timeout: Option<Duration>);
}

macro_rules! settings_of {
    ($type:ty) => {
        impl Settings for $type {
            fn set_is_idempotent(&mut self, idempotent: bool) {
                <$type>::set_is_idempotent(self, idempotent);
            }
            fn set_retry_policy(
                &mut self,
                policy: Option<Arc<dyn scylla::policies::retry::RetryPolicy>>,
            ) {
                <$type>::set_retry_policy(self, policy);
            }
            fn set_consistency(&mut self, consistency: Consistency) {
                <$type>::set_consistency(self, consistency);
            }
            fn set_request_timeout(&mut self, timeout: Option<Duration>) {
                <$type>::set_request_timeout(self, timeout);
            }
        }
    };
}

settings_of!(PreparedStatement);
settings_of!(Batch);

#[cfg(test)]
mod tests {
    use scylla::statement::batch::BatchType;

    use super::*;

    /// A counter batch is never idempotent, an idempotent one always is, and both carry
    /// the configured consistency and timeout.
    #[test]
    fn a_profile_sets_every_setting_on_a_batch() {
        let timeout = Duration::from_millis(1500);
        let counter = WriteProfile::counter(ConsistencyLevel::LocalQuorum, timeout);
        let batch = Batch::new(BatchType::Counter);
        let mut set = batch.clone();
        counter.apply(&mut set);
        assert!(!set.get_is_idempotent());
        assert_eq!(set.get_consistency(), Some(Consistency::LocalQuorum));
        assert_eq!(set.get_request_timeout(), Some(timeout));
        assert!(set.get_retry_policy().is_some());
        let mut set = batch;
        WriteProfile::idempotent(ConsistencyLevel::One, timeout).apply(&mut set);
        assert!(set.get_is_idempotent());
        assert_eq!(set.get_consistency(), Some(Consistency::One));
    }
}
