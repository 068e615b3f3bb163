//! When a reset may start: the pure part of `countersink reset`.

/// Why a reset cannot start when asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResetError {
    /// The start is earlier than now plus the lead: writers may already have written
    /// those minutes into the current epoch.
    #[error(
        "the epoch would start at {asked}, before now + epochs.lead ({earliest}): writers may already have written those minutes into the current epoch; choose a later --at"
    )]
    TooEarly {
        /// The start asked for.
        asked: String,
        /// The earliest allowed.
        earliest: String,
    },
    /// The registry write was acknowledged so late that writers that read the registry
    /// just before it landed may have placed the first minutes of the epoch in the
    /// previous one.
    #[error(
        "the registry acknowledged the epoch only at {acknowledged}, less than epochs.lead before it starts ({start}): writers that read the registry before then may have written minutes from {start} on into the previous epoch; the epoch is recorded, check the rows of its first minutes"
    )]
    Late {
        /// When the write was acknowledged.
        acknowledged: String,
        /// The epoch's start.
        start: String,
    },
}

/// The start minute (Unix minutes) of an epoch asked at `now` (Unix seconds), for `at`
/// (Unix seconds, rounded up to a whole minute) or, without it, the first whole minute
/// at least `lead` ahead. Refused when earlier than `now + lead`.
pub fn start_minute(now: i64, lead_secs: i64, at: Option<i64>) -> Result<i32, ResetError> {
    let earliest = now + lead_secs;
    let at = at.unwrap_or(earliest);
    let start = at.div_euclid(60) + i64::from(at.rem_euclid(60) != 0);
    if start * 60 < earliest {
        return Err(ResetError::TooEarly {
            asked: rfc3339(start * 60),
            earliest: rfc3339(earliest),
        });
    }
    Ok(i32::try_from(start).unwrap_or(i32::MAX))
}

/// Checks the registry write was acknowledged at least `lead` before the epoch starts:
/// a writer that read the registry before the acknowledgement may not have seen it, and
/// took the minutes before its read + lead as settled.
pub fn check_acknowledged(
    acknowledged: i64,
    lead_secs: i64,
    start_minute: i32,
) -> Result<(), ResetError> {
    let start = i64::from(start_minute) * 60;
    if acknowledged + lead_secs > start {
        return Err(ResetError::Late {
            acknowledged: rfc3339(acknowledged),
            start: rfc3339(start),
        });
    }
    Ok(())
}

/// RFC 3339 of a Unix time.
pub fn rfc3339(unix_secs: i64) -> String {
    crate::bucket::rfc3339(
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(unix_secs.max(0) as u64),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-01T12:00:00Z.
    const NOON: i64 = 1_796_126_400;

    #[test]
    fn the_default_start_is_the_first_whole_minute_a_lead_ahead() {
        assert_eq!(start_minute(NOON, 60, None), Ok((NOON / 60 + 1) as i32));
        assert_eq!(start_minute(NOON + 1, 60, None), Ok((NOON / 60 + 2) as i32));
    }

    #[test]
    fn a_start_inside_the_lead_is_refused_and_later_ones_round_up() {
        assert!(matches!(
            start_minute(NOON, 60, Some(NOON + 59)),
            Ok(m) if m == (NOON / 60 + 1) as i32
        ));
        assert!(matches!(
            start_minute(NOON + 30, 60, Some(NOON + 60)),
            Err(ResetError::TooEarly { .. })
        ));
        assert!(start_minute(NOON, 60, Some(NOON - 3600)).is_err());
        assert_eq!(
            start_minute(NOON, 60, Some(NOON + 3600)),
            Ok((NOON / 60 + 60) as i32)
        );
    }

    #[test]
    fn a_late_acknowledgement_is_reported() {
        let start = (NOON / 60 + 2) as i32;
        assert_eq!(check_acknowledged(NOON, 60, start), Ok(()));
        assert_eq!(check_acknowledged(NOON + 60, 60, start), Ok(()));
        assert!(check_acknowledged(NOON + 61, 60, start).is_err());
    }
}
