//! UTC time buckets: the minute and day a delta belongs to.
//!
//! Everything is counted from the Unix epoch so that a bucket is a small integer that
//! hashes and compares cheaply on the hot path; calendar values (`date`, `'YYYY-MM'`,
//! minute of day) are derived only at flush time, when statements are bound.

use time::{Date, Month, OffsetDateTime};

use crate::vocabulary::Granularity;

/// Seconds in a minute, as the divisor used for bucketing.
const SECS_PER_MINUTE: i64 = 60;
/// Minutes in a UTC day (leap seconds do not exist in Unix time).
pub const MINUTES_PER_DAY: u32 = 1440;
/// Minutes in an hour.
pub const MINUTES_PER_HOUR: u32 = 60;
/// Hours in a UTC day.
pub const HOURS_PER_DAY: u32 = 24;

/// The bucket of `table` that `minute` falls in: the minute itself, its day, its hour
/// (counted from 1970-01-01T00Z), or 0 for the all-time total (one row per key).
pub fn bucket_of(table: Granularity, minute: Minute) -> u32 {
    match table {
        Granularity::Minute => minute.0,
        Granularity::Day => minute.day().0,
        Granularity::Hour => minute.0 / MINUTES_PER_HOUR,
        Granularity::Total => 0,
    }
}

/// The day a bucket of `table` belongs to (the day of its partition for minute and hour
/// rows). A total row has no day: it is given 1970-01-01, the day of bucket 0.
pub fn day_of(table: Granularity, bucket: u32) -> Day {
    match table {
        Granularity::Minute => Minute(bucket).day(),
        Granularity::Day => Day(bucket),
        Granularity::Hour => Day(bucket / HOURS_PER_DAY),
        Granularity::Total => Day(0),
    }
}

/// The first minute of a bucket of `table` (of 1970-01-01 for a total row).
pub fn first_minute_of(table: Granularity, bucket: u32) -> Minute {
    match table {
        Granularity::Minute => Minute(bucket),
        Granularity::Day => Minute(bucket.saturating_mul(MINUTES_PER_DAY)),
        Granularity::Hour => Minute(bucket.saturating_mul(MINUTES_PER_HOUR)),
        Granularity::Total => Minute(0),
    }
}

/// A UTC minute, counted from 1970-01-01T00:00Z.
///
/// `u32` holds minutes until the year 10136; times before 1970 are outside every
/// accepted timestamp window, so they never reach a bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Minute(pub u32);

/// A UTC day, counted from 1970-01-01.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Day(pub u32);

impl Minute {
    /// The minute that contains `unix_secs`, or `None` before 1970 or after year 10136.
    pub fn from_unix_secs(unix_secs: i64) -> Option<Minute> {
        u32::try_from(unix_secs.div_euclid(SECS_PER_MINUTE))
            .ok()
            .map(Minute)
    }

    /// The first second of this minute.
    pub fn start_unix_secs(self) -> i64 {
        i64::from(self.0) * SECS_PER_MINUTE
    }

    /// The day this minute belongs to.
    pub fn day(self) -> Day {
        Day(self.0 / MINUTES_PER_DAY)
    }

    /// Minute of the day, 0..=1439, as stored in the `minute smallint` column.
    pub fn minute_of_day(self) -> i16 {
        // Always < 1440, so it fits.
        (self.0 % MINUTES_PER_DAY) as i16
    }
}

impl Day {
    /// The calendar date of this day.
    pub fn date(self) -> Date {
        // 1970-01-01 is Julian day 2_440_588; `u32` days stay far inside `time`'s range
        // only up to year 9999, so clamp rather than panic on absurd input.
        let julian = 2_440_588_i64 + i64::from(self.0);
        Date::from_julian_day(i32::try_from(julian).unwrap_or(i32::MAX)).unwrap_or(Date::MAX)
    }

    /// The day with this calendar date, or `None` before 1970.
    pub fn from_date(date: Date) -> Option<Day> {
        u32::try_from(i64::from(date.to_julian_day()) - 2_440_588)
            .ok()
            .map(Day)
    }

    /// Days since the epoch as CQL's `date` type encodes them (2^31 is the epoch).
    pub fn cql_date(self) -> u32 {
        (1u32 << 31).wrapping_add(self.0)
    }

    /// The month partition of the day table, `'YYYY-MM'`.
    pub fn month(self) -> String {
        let date = self.date();
        format!("{:04}-{:02}", date.year(), u8::from(date.month()))
    }
}

/// A calendar date formatted as `YYYY-MM-DD`, for logs and command output.
pub fn format_date(date: Date) -> String {
    format!(
        "{:04}-{:02}-{:02}",
        date.year(),
        u8::from(date.month()),
        date.day()
    )
}

/// Parses `YYYY-MM-DD` into a date.
pub fn parse_date(text: &str) -> Option<Date> {
    let mut parts = text.splitn(3, '-');
    let year: i32 = parts.next()?.parse().ok()?;
    let month: u8 = parts.next()?.parse().ok()?;
    let day: u8 = parts.next()?.parse().ok()?;
    Date::from_calendar_date(year, Month::try_from(month).ok()?, day).ok()
}

/// Seconds since the epoch for a wall-clock instant (negative before 1970).
pub fn unix_secs(at: std::time::SystemTime) -> i64 {
    match at.duration_since(std::time::UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_secs()).unwrap_or(i64::MAX),
    }
}

/// RFC 3339 text of a wall-clock instant, for JSON records.
pub fn rfc3339(at: std::time::SystemTime) -> String {
    OffsetDateTime::from(at)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| String::from("invalid-time"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::date;

    #[test]
    fn minute_and_day_of_a_known_instant() {
        // 2026-11-30T12:34:56Z
        let secs = 1_796_042_096;
        let minute = Minute::from_unix_secs(secs).unwrap();
        assert_eq!(minute.minute_of_day(), 12 * 60 + 34);
        assert_eq!(minute.day().date(), date!(2026 - 11 - 30));
        assert_eq!(minute.day().month(), "2026-11");
        assert_eq!(minute.start_unix_secs(), secs - 56);
    }

    #[test]
    fn last_minute_of_a_day_and_first_of_the_next() {
        let midnight = Day::from_date(date!(2026 - 12 - 01)).unwrap();
        let last = Minute(midnight.0 * MINUTES_PER_DAY - 1);
        assert_eq!(last.minute_of_day(), 1439);
        assert_eq!(last.day().date(), date!(2026 - 11 - 30));
        let first = Minute(midnight.0 * MINUTES_PER_DAY);
        assert_eq!(first.minute_of_day(), 0);
        assert_eq!(first.day().month(), "2026-12");
    }

    #[test]
    fn epoch_and_before() {
        assert_eq!(Minute::from_unix_secs(0), Some(Minute(0)));
        assert_eq!(Minute::from_unix_secs(-1), None);
        assert_eq!(Day(0).date(), date!(1970 - 01 - 01));
        assert_eq!(Day(0).cql_date(), 1 << 31);
    }

    #[test]
    fn dates_round_trip_through_text() {
        let d = parse_date("2024-02-29").unwrap();
        assert_eq!(format_date(d), "2024-02-29");
        assert!(parse_date("2023-02-29").is_none());
        assert!(parse_date("2023-13-01").is_none());
        assert!(parse_date("yesterday").is_none());
    }
}
