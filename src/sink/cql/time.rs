//! Time column values as CQL values: what a minute, day or month is written as in a
//! column of a given type, and read back from one.
//!
//! The writes, the reads, `prune` and `migrate` all go through here, so a table whose
//! minute is a `timestamp` (or whose month is a `date`) is written and read the same way
//! everywhere. All values are UTC.

use scylla::value::{CqlDate, CqlTimestamp, CqlValue};

use crate::bucket::{Day, MINUTES_PER_DAY, Minute, format_date, parse_date};
use crate::config::TimeType;

const MS_PER_MINUTE: i64 = 60_000;
const MS_PER_HOUR: i64 = 3_600_000;
const MS_PER_DAY: i64 = 86_400_000;

/// A minute column's value: the minute of the day (`smallint`, `int`) or the minute's
/// start (`timestamp`). Types that cannot hold a minute are refused by the configuration
/// and the schema check; given one anyway, the minute of the day as `smallint`.
pub fn minute(typ: TimeType, minute: Minute) -> CqlValue {
    match typ {
        TimeType::Int => CqlValue::Int(i32::from(minute.minute_of_day())),
        TimeType::Timestamp => timestamp(i64::from(minute.0) * MS_PER_MINUTE),
        TimeType::SmallInt | TimeType::Date | TimeType::Text => {
            CqlValue::SmallInt(minute.minute_of_day())
        }
    }
}

/// An hour column's value (`hour` counted from 1970-01-01T00Z): the hour of the day
/// (`smallint`, `int`) or the hour's start (`timestamp`).
pub fn hour(typ: TimeType, hour: u32) -> CqlValue {
    let of_day = (hour % crate::bucket::HOURS_PER_DAY) as i16;
    match typ {
        TimeType::Int => CqlValue::Int(i32::from(of_day)),
        TimeType::Timestamp => timestamp(i64::from(hour) * MS_PER_HOUR),
        TimeType::SmallInt | TimeType::Date | TimeType::Text => CqlValue::SmallInt(of_day),
    }
}

/// The hour of the day an hour column's value stands for (any of its types).
pub fn read_hour_of_day(value: &CqlValue) -> Option<i64> {
    match value {
        CqlValue::SmallInt(h) => Some(i64::from(*h)),
        CqlValue::Int(h) => Some(i64::from(*h)),
        CqlValue::Timestamp(ts) => {
            Some(ts.0.div_euclid(MS_PER_HOUR) % i64::from(crate::bucket::HOURS_PER_DAY))
        }
        _ => None,
    }
}

/// A day column's value: the `date`, its midnight (`timestamp`) or `'YYYY-MM-DD'`.
pub fn day(typ: TimeType, day: Day) -> CqlValue {
    match typ {
        TimeType::Timestamp => timestamp(i64::from(day.0) * MS_PER_DAY),
        TimeType::Text => CqlValue::Text(format_date(day.date())),
        TimeType::Date | TimeType::SmallInt | TimeType::Int => {
            CqlValue::Date(CqlDate(day.cql_date()))
        }
    }
}

/// The value of a month column for the month holding `day`: `'YYYY-MM'`, the month's
/// first day (`date`) or its start (`timestamp`).
pub fn month(typ: TimeType, day: Day) -> CqlValue {
    let first = first_of_month(day);
    match typ {
        TimeType::Date => CqlValue::Date(CqlDate(first.cql_date())),
        TimeType::Timestamp => timestamp(i64::from(first.0) * MS_PER_DAY),
        TimeType::Text | TimeType::SmallInt | TimeType::Int => CqlValue::Text(day.month()),
    }
}

/// The first day of the month holding `day`.
fn first_of_month(day: Day) -> Day {
    Day(day.0 + 1 - u32::from(day.date().day()))
}

fn timestamp(ms: i64) -> CqlValue {
    CqlValue::Timestamp(CqlTimestamp(ms))
}

/// The day a day column's value stands for (any of its types), `None` for anything else
/// or a day before 1970.
pub fn read_day(value: &CqlValue) -> Option<Day> {
    match value {
        CqlValue::Date(date) => u32::try_from(i64::from(date.0) - (1_i64 << 31))
            .ok()
            .map(Day),
        CqlValue::Timestamp(ts) => u32::try_from(ts.0.div_euclid(MS_PER_DAY)).ok().map(Day),
        CqlValue::Text(text) => parse_date(text).and_then(Day::from_date),
        _ => None,
    }
}

/// The month a month column's value stands for, as `'YYYY-MM'` (any of its types).
pub fn read_month(value: &CqlValue) -> Option<String> {
    match value {
        CqlValue::Text(text) => Some(text.clone()),
        CqlValue::Date(_) | CqlValue::Timestamp(_) => read_day(value).map(Day::month),
        _ => None,
    }
}

/// The minute of the day a minute column's value stands for (any of its types).
pub fn read_minute_of_day(value: &CqlValue) -> Option<i64> {
    match value {
        CqlValue::SmallInt(m) => Some(i64::from(*m)),
        CqlValue::Int(m) => Some(i64::from(*m)),
        CqlValue::Timestamp(ts) => {
            Some(ts.0.div_euclid(MS_PER_MINUTE) % i64::from(MINUTES_PER_DAY))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-10-15T13:07Z.
    const AT: Minute = Minute(29_867_827);

    #[test]
    fn each_type_writes_its_documented_value() {
        let day = AT.day();
        assert_eq!(format_date(day.date()), "2026-10-15");
        assert_eq!(minute(TimeType::SmallInt, AT), CqlValue::SmallInt(787));
        assert_eq!(minute(TimeType::Int, AT), CqlValue::Int(787));
        assert_eq!(
            minute(TimeType::Timestamp, AT),
            CqlValue::Timestamp(CqlTimestamp(1_792_069_620_000))
        );
        assert_eq!(
            self::day(TimeType::Timestamp, day),
            CqlValue::Timestamp(CqlTimestamp(1_792_022_400_000))
        );
        assert_eq!(
            self::day(TimeType::Text, day),
            CqlValue::Text("2026-10-15".into())
        );
        assert_eq!(month(TimeType::Text, day), CqlValue::Text("2026-10".into()));
        // 2026-10-01T00:00Z
        assert_eq!(
            month(TimeType::Timestamp, day),
            CqlValue::Timestamp(CqlTimestamp(1_790_812_800_000))
        );
        assert_eq!(format_date(first_of_month(day).date()), "2026-10-01");
    }

    #[test]
    fn every_written_value_reads_back() {
        let day = AT.day();
        for typ in [TimeType::SmallInt, TimeType::Int, TimeType::Timestamp] {
            assert_eq!(read_minute_of_day(&minute(typ, AT)), Some(787), "{typ:?}");
        }
        for typ in [TimeType::Date, TimeType::Timestamp, TimeType::Text] {
            assert_eq!(read_day(&self::day(typ, day)), Some(day), "{typ:?}");
            assert_eq!(
                read_month(&month(typ, day)).as_deref(),
                Some("2026-10"),
                "{typ:?}"
            );
        }
        assert_eq!(read_day(&CqlValue::Int(3)), None);
    }
}
