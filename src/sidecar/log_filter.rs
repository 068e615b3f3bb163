//! The log filter in force, changeable while the process runs: a live reload takes a
//! new `log.filter` without a restart (turning `debug` on for a while during an
//! incident is the common case).
//!
//! The start-up code installs the subscriber with a reloadable filter and hands its
//! setter here ([`install`]); the reload checks the new filter with the rest of the file
//! ([`parse`]) and sets it once the reload has taken effect ([`change`]). A filter set
//! by `COUNTERSINK_LOG` or `RUST_LOG` pins it: the environment wins at start, and a
//! reload keeps it, saying so.

use std::sync::OnceLock;

use tracing_subscriber::EnvFilter;

/// Sets the filter of the installed subscriber.
type Setter = Box<dyn Fn(EnvFilter) -> Result<(), String> + Send + Sync>;

struct Live {
    set: Setter,
    /// The environment variable that set the filter, if one did.
    pinned_by: Option<&'static str>,
}

static LIVE: OnceLock<Live> = OnceLock::new();

/// What [`change`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// The new filter is in force.
    Applied,
    /// The filter stays: this environment variable set it at start.
    Pinned(&'static str),
    /// No reloadable subscriber was installed (a test, or a process that installed its
    /// own): nothing to change.
    NotInstalled,
}

/// Parses a `tracing` filter as `log.filter` takes it, or says why it is not one.
pub fn parse(filter: &str) -> Result<EnvFilter, String> {
    EnvFilter::try_new(filter).map_err(|error| format!("log.filter {filter:?}: {error}"))
}

/// Hands over the setter of the subscriber just installed; `pinned_by`, the variable
/// that set its filter, if the environment did. The first call wins (one subscriber per
/// process).
pub fn install(
    set: impl Fn(EnvFilter) -> Result<(), String> + Send + Sync + 'static,
    pinned_by: Option<&'static str>,
) {
    let _ = LIVE.set(Live {
        set: Box::new(set),
        pinned_by,
    });
}

/// Puts `filter` in force (see [`Change`]); an error when it is not a filter or the
/// subscriber refused it.
pub fn change(filter: &str) -> Result<Change, String> {
    let filter = parse(filter)?;
    match LIVE.get() {
        None => Ok(Change::NotInstalled),
        Some(Live {
            pinned_by: Some(variable),
            ..
        }) => Ok(Change::Pinned(variable)),
        Some(live) => (live.set)(filter).map(|()| Change::Applied),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_is_checked_before_it_is_taken() {
        assert!(parse("countersink=debug,info").is_ok());
        let error = parse("countersink=loud").unwrap_err();
        assert!(error.contains("log.filter \"countersink=loud\""), "{error}");
        assert!(change("countersink=loud").is_err());
    }
}
