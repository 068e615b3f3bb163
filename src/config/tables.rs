//! The time columns of a configured family's tables (`[family.minute_time]`,
//! `[family.day_time]`): their names and CQL types, so that a family can write to tables
//! that already exist with other names or types than countersink's own layout.
//!
//! Each table has two time columns, each with a fixed role: the minute table is
//! partitioned by its `day` column and clustered by its `minute` column; the day table is
//! partitioned by its `month` column and clustered by its `day` column. The role says
//! which period a value stands for; the type says how it is written. Unset, a column
//! keeps countersink's own name and type (`day date`, `minute smallint`, `month text`), so
//! a configuration without these sections means the tables it always meant.

use serde::{Deserialize, Serialize};

/// The period a time column stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimeRole {
    /// A UTC minute (the minute table's clustering column).
    Minute,
    /// A UTC day (the minute table's partition, the day table's clustering column).
    Day,
    /// A UTC month (the day table's partition).
    Month,
    /// A UTC hour (the hour table's clustering column; fixed as `hour smallint`, the
    /// hour of the day).
    Hour,
}

impl TimeRole {
    /// The configuration key of a column with this role: `minute`, `day` or `month`.
    pub fn as_str(self) -> &'static str {
        match self {
            TimeRole::Minute => "minute",
            TimeRole::Day => "day",
            TimeRole::Month => "month",
            TimeRole::Hour => "hour",
        }
    }

    /// The column countersink's own tables use: its name and type.
    pub fn default_column(self) -> (&'static str, TimeType) {
        match self {
            TimeRole::Minute => ("minute", TimeType::SmallInt),
            TimeRole::Day => ("day", TimeType::Date),
            TimeRole::Month => ("month", TimeType::Text),
            TimeRole::Hour => ("hour", TimeType::SmallInt),
        }
    }

    /// The types that can hold a value of this role, in the order the docs list them.
    pub fn types(self) -> &'static [TimeType] {
        match self {
            TimeRole::Minute => &[TimeType::SmallInt, TimeType::Int, TimeType::Timestamp],
            TimeRole::Day => &[TimeType::Date, TimeType::Timestamp, TimeType::Text],
            TimeRole::Month => &[TimeType::Text, TimeType::Date, TimeType::Timestamp],
            TimeRole::Hour => &[TimeType::SmallInt, TimeType::Int, TimeType::Timestamp],
        }
    }

    /// What a value of this role is, for error messages.
    fn what(self) -> &'static str {
        match self {
            TimeRole::Minute => "a minute (0..1439 as minute of the day, or its start)",
            TimeRole::Day => "a day",
            TimeRole::Month => "a month",
            TimeRole::Hour => "an hour (0..23 as hour of the day, or its start)",
        }
    }
}

/// The CQL type of a time column, and so how its value is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimeType {
    /// `date`: the day (a day column), or the month's first day (a month column).
    Date,
    /// `smallint`: the minute of the day, 0..1439 (a minute column).
    SmallInt,
    /// `int`: the minute of the day, 0..1439 (a minute column).
    Int,
    /// `timestamp`: the start of the period, in milliseconds since the epoch (UTC).
    Timestamp,
    /// `text`: `'YYYY-MM-DD'` (a day column) or `'YYYY-MM'` (a month column).
    Text,
}

impl TimeType {
    /// The CQL type name.
    pub fn as_str(self) -> &'static str {
        match self {
            TimeType::Date => "date",
            TimeType::SmallInt => "smallint",
            TimeType::Int => "int",
            TimeType::Timestamp => "timestamp",
            TimeType::Text => "text",
        }
    }

    /// The type a CQL type name stands for (`varchar` is `text`), if it is one a time
    /// column may have at all.
    pub fn parse(name: &str) -> Option<TimeType> {
        Some(match name.trim().to_ascii_lowercase().as_str() {
            "date" => TimeType::Date,
            "smallint" => TimeType::SmallInt,
            "int" => TimeType::Int,
            "timestamp" => TimeType::Timestamp,
            "text" | "varchar" => TimeType::Text,
            _ => return None,
        })
    }

    /// Whether a column of this type can hold a value of `role`.
    pub fn holds(self, role: TimeRole) -> bool {
        role.types().contains(&self)
    }

    /// The type a column of CQL type `name` holds `role` as, or why it cannot hold it.
    pub fn check(name: &str, role: TimeRole) -> Result<TimeType, String> {
        match TimeType::parse(name) {
            Some(typ) if typ.holds(role) => Ok(typ),
            _ => {
                let types: Vec<&str> = role.types().iter().map(|t| t.as_str()).collect();
                Err(format!(
                    "a `{name}` column cannot hold {}; use {}",
                    role.what(),
                    types.join(", ")
                ))
            }
        }
    }
}

/// Which role a [`TimeColumnConfig`] configures, so that a column given in part (only
/// its name, or only its type) keeps the default of its own role for the rest.
pub trait RoleOf {
    /// The role.
    const ROLE: TimeRole;
}

/// The `minute` role.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MinuteRole;
/// The `day` role.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DayRole;
/// The `month` role.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MonthRole;

impl RoleOf for MinuteRole {
    const ROLE: TimeRole = TimeRole::Minute;
}
impl RoleOf for DayRole {
    const ROLE: TimeRole = TimeRole::Day;
}
impl RoleOf for MonthRole {
    const ROLE: TimeRole = TimeRole::Month;
}

/// One time column as configured: `{ column = NAME, type = CQL_TYPE }`, either part
/// defaulting to countersink's own column of the role `R`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, bound = "")]
pub struct TimeColumnConfig<R: RoleOf> {
    /// The column's name. Default: the role's name (`minute`, `day`, `month`).
    pub column: String,
    /// Its CQL type. Default: `smallint` (minute), `date` (day), `text` (month).
    #[serde(rename = "type")]
    pub typ: String,
    #[serde(skip)]
    role: std::marker::PhantomData<R>,
}

impl<R: RoleOf> Default for TimeColumnConfig<R> {
    fn default() -> Self {
        let (name, typ) = R::ROLE.default_column();
        TimeColumnConfig {
            column: name.into(),
            typ: typ.as_str().into(),
            role: std::marker::PhantomData,
        }
    }
}

impl<R: RoleOf> TimeColumnConfig<R> {
    /// A column named `column` of CQL type `typ`.
    pub fn new(column: &str, typ: &str) -> Self {
        TimeColumnConfig {
            column: column.into(),
            typ: typ.into(),
            role: std::marker::PhantomData,
        }
    }

    /// The column this configures, or what is wrong with its type.
    pub fn resolve(&self) -> Result<TimeColumn, String> {
        Ok(TimeColumn {
            name: self.column.clone(),
            role: R::ROLE,
            typ: TimeType::check(&self.typ, R::ROLE)?,
        })
    }
}

/// A time column resolved: name, role, type.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TimeColumn {
    /// The column's name.
    pub name: String,
    /// The period it stands for.
    pub role: TimeRole,
    /// Its CQL type.
    pub typ: TimeType,
}

impl TimeColumn {
    /// countersink's own column for `role`.
    pub fn default_for(role: TimeRole) -> TimeColumn {
        let (name, typ) = role.default_column();
        TimeColumn {
            name: name.into(),
            role,
            typ,
        }
    }
}

/// `[family.minute_time]`: the minute table's time columns.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct MinuteTimeConfig {
    /// The partition's day. Default `{ column = "day", type = "date" }`; also
    /// `timestamp` (midnight UTC) or `text` (`'YYYY-MM-DD'`).
    pub day: TimeColumnConfig<DayRole>,
    /// The clustering minute. Default `{ column = "minute", type = "smallint" }` (minute
    /// of the day); also `int` (minute of the day) or `timestamp` (the minute's start).
    pub minute: TimeColumnConfig<MinuteRole>,
}

/// `[family.day_time]`: the day table's time columns.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct DayTimeConfig {
    /// The partition's month. Default `{ column = "month", type = "text" }`
    /// (`'YYYY-MM'`); also `date` (the month's first day) or `timestamp` (its start).
    pub month: TimeColumnConfig<MonthRole>,
    /// The clustering day. Default `{ column = "day", type = "date" }`; also
    /// `timestamp` (midnight UTC) or `text` (`'YYYY-MM-DD'`).
    pub day: TimeColumnConfig<DayRole>,
}

/// A table's two time columns, resolved.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TableTime {
    /// The time column of the partition key (after the key and epoch columns).
    pub partition: TimeColumn,
    /// The last time-ordered clustering column.
    pub clustering: TimeColumn,
}

impl TableTime {
    /// countersink's own minute table: `day date`, `minute smallint`.
    pub fn default_minute() -> TableTime {
        TableTime {
            partition: TimeColumn::default_for(TimeRole::Day),
            clustering: TimeColumn::default_for(TimeRole::Minute),
        }
    }

    /// The hour table (fixed): `day date` in the partition, `hour smallint` (hour of
    /// the day) clustering. A day's partition holds at most 24 rows per key (per shard),
    /// and a read of a day is one partition.
    pub fn hour() -> TableTime {
        TableTime {
            partition: TimeColumn::default_for(TimeRole::Day),
            clustering: TimeColumn::default_for(TimeRole::Hour),
        }
    }

    /// countersink's own day table: `month text`, `day date`.
    pub fn default_day() -> TableTime {
        TableTime {
            partition: TimeColumn::default_for(TimeRole::Month),
            clustering: TimeColumn::default_for(TimeRole::Day),
        }
    }
}

impl MinuteTimeConfig {
    /// The columns, or the field (`day` or `minute`) and what is wrong with it.
    pub fn resolve(&self) -> Result<TableTime, (&'static str, String)> {
        Ok(TableTime {
            partition: self.day.resolve().map_err(|e| ("day", e))?,
            clustering: self.minute.resolve().map_err(|e| ("minute", e))?,
        })
    }
}

impl DayTimeConfig {
    /// The columns, or the field (`month` or `day`) and what is wrong with it.
    pub fn resolve(&self) -> Result<TableTime, (&'static str, String)> {
        Ok(TableTime {
            partition: self.month.resolve().map_err(|e| ("month", e))?,
            clustering: self.day.resolve().map_err(|e| ("day", e))?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_columns_are_countersinks_own() {
        assert_eq!(
            MinuteTimeConfig::default().resolve().unwrap(),
            TableTime::default_minute()
        );
        assert_eq!(
            DayTimeConfig::default().resolve().unwrap(),
            TableTime::default_day()
        );
        assert_eq!(
            TableTime::default_minute().clustering.typ,
            TimeType::SmallInt
        );
        assert_eq!(TableTime::default_day().partition.name, "month");
    }

    #[test]
    fn a_type_that_cannot_hold_the_value_is_refused_by_name() {
        let tiny = MinuteTimeConfig {
            minute: TimeColumnConfig::new("minute", "tinyint"),
            ..MinuteTimeConfig::default()
        };
        let (field, problem) = tiny.resolve().unwrap_err();
        assert_eq!(field, "minute");
        assert!(
            problem.contains("a `tinyint` column cannot hold a minute"),
            "{problem}"
        );
        assert!(problem.contains("smallint, int, timestamp"), "{problem}");
        assert!(
            TimeColumnConfig::<MinuteRole>::new("m", "text")
                .resolve()
                .is_err()
        );
        assert!(
            TimeColumnConfig::<DayRole>::new("d", "smallint")
                .resolve()
                .is_err()
        );
        assert!(
            TimeColumnConfig::<MonthRole>::new("m", "int")
                .resolve()
                .is_err()
        );
    }

    /// A column given in part keeps its role's default for the rest.
    #[test]
    fn renamed_and_retyped_columns_resolve() {
        let custom: MinuteTimeConfig = toml::from_str(
            "day = { column = \"ts_day\" }\nminute = { column = \"bucket\", type = \"TIMESTAMP\" }\n",
        )
        .unwrap();
        let custom = custom.resolve().unwrap();
        assert_eq!(
            (custom.partition.name.as_str(), custom.partition.typ),
            ("ts_day", TimeType::Date)
        );
        assert_eq!(
            (custom.clustering.name.as_str(), custom.clustering.typ),
            ("bucket", TimeType::Timestamp)
        );
        let month: DayTimeConfig = toml::from_str("month = { type = \"date\" }\n").unwrap();
        let month = month.resolve().unwrap();
        assert_eq!(
            (month.partition.name.as_str(), month.partition.typ),
            ("month", TimeType::Date)
        );
        assert_eq!(TimeType::parse("varchar"), Some(TimeType::Text));
    }
}
