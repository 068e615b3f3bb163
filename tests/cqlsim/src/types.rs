//! CQL column types: parsed from DDL, printed into `system_schema.columns.type` (always the
//! canonical name, `text` and never `varchar`, research §1.3) and encoded as result-metadata
//! type options (S §4.2.5.2).

use std::fmt;

use crate::proto::wire::put_u16;

/// A column type.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ColType {
    /// `ascii`.
    Ascii,
    /// `bigint`.
    BigInt,
    /// `blob`.
    Blob,
    /// `boolean`.
    Boolean,
    /// `counter`: a 64-bit signed counter, wrapping like a Java long.
    Counter,
    /// `date`: days with the epoch at 2^31.
    Date,
    /// `double`.
    Double,
    /// `float`.
    Float,
    /// `inet`.
    Inet,
    /// `int`.
    Int,
    /// `smallint`.
    SmallInt,
    /// `text` (also accepted as `varchar`).
    Text,
    /// `timestamp`: milliseconds since the epoch.
    Timestamp,
    /// `timeuuid`.
    TimeUuid,
    /// `tinyint`.
    TinyInt,
    /// `uuid`.
    Uuid,
    /// `varint` (values limited to what fits an i128 here).
    Varint,
    /// `list<T>`.
    List(Box<ColType>),
    /// `set<T>`.
    Set(Box<ColType>),
    /// `map<K, V>`.
    Map(Box<ColType>, Box<ColType>),
    /// `frozen<T>`: only changes the printed name; values are always whole here.
    Frozen(Box<ColType>),
}

impl ColType {
    /// Parses a simple type name (lower-cased). Collections are built by the CQL parser.
    pub(crate) fn simple(name: &str) -> Option<ColType> {
        Some(match name {
            "ascii" => ColType::Ascii,
            "bigint" => ColType::BigInt,
            "blob" => ColType::Blob,
            "boolean" => ColType::Boolean,
            "counter" => ColType::Counter,
            "date" => ColType::Date,
            "double" => ColType::Double,
            "float" => ColType::Float,
            "inet" => ColType::Inet,
            "int" => ColType::Int,
            "smallint" => ColType::SmallInt,
            "text" | "varchar" => ColType::Text,
            "timestamp" => ColType::Timestamp,
            "timeuuid" => ColType::TimeUuid,
            "tinyint" => ColType::TinyInt,
            "uuid" => ColType::Uuid,
            "varint" => ColType::Varint,
            _ => return None,
        })
    }

    /// The type without a `frozen<>` wrapper.
    pub(crate) fn unfrozen(&self) -> &ColType {
        match self {
            ColType::Frozen(t) => t.unfrozen(),
            t => t,
        }
    }

    /// Whether this is `counter`.
    pub(crate) fn is_counter(&self) -> bool {
        matches!(self.unfrozen(), ColType::Counter)
    }

    /// Whether this is a collection.
    pub(crate) fn is_collection(&self) -> bool {
        matches!(
            self.unfrozen(),
            ColType::List(_) | ColType::Set(_) | ColType::Map(..)
        )
    }

    /// Whether a counter appears anywhere inside (collections of counters are refused).
    pub(crate) fn contains_counter(&self) -> bool {
        match self {
            ColType::Counter => true,
            ColType::List(t) | ColType::Set(t) | ColType::Frozen(t) => t.contains_counter(),
            ColType::Map(k, v) => k.contains_counter() || v.contains_counter(),
            _ => false,
        }
    }

    /// Appends the `[option]` encoding used in result and prepared metadata.
    pub(crate) fn write_option(&self, buf: &mut Vec<u8>) {
        let id = match self {
            ColType::Frozen(t) => return t.write_option(buf),
            ColType::Ascii => 0x0001,
            ColType::BigInt => 0x0002,
            ColType::Blob => 0x0003,
            ColType::Boolean => 0x0004,
            ColType::Counter => 0x0005,
            ColType::Double => 0x0007,
            ColType::Float => 0x0008,
            ColType::Int => 0x0009,
            ColType::Timestamp => 0x000B,
            ColType::Uuid => 0x000C,
            ColType::Text => 0x000D,
            ColType::Varint => 0x000E,
            ColType::TimeUuid => 0x000F,
            ColType::Inet => 0x0010,
            ColType::Date => 0x0011,
            ColType::SmallInt => 0x0013,
            ColType::TinyInt => 0x0014,
            ColType::List(t) => {
                put_u16(buf, 0x0020);
                return t.write_option(buf);
            }
            ColType::Map(k, v) => {
                put_u16(buf, 0x0021);
                k.write_option(buf);
                return v.write_option(buf);
            }
            ColType::Set(t) => {
                put_u16(buf, 0x0022);
                return t.write_option(buf);
            }
        };
        put_u16(buf, id);
    }
}

impl fmt::Display for ColType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            ColType::Ascii => "ascii",
            ColType::BigInt => "bigint",
            ColType::Blob => "blob",
            ColType::Boolean => "boolean",
            ColType::Counter => "counter",
            ColType::Date => "date",
            ColType::Double => "double",
            ColType::Float => "float",
            ColType::Inet => "inet",
            ColType::Int => "int",
            ColType::SmallInt => "smallint",
            ColType::Text => "text",
            ColType::Timestamp => "timestamp",
            ColType::TimeUuid => "timeuuid",
            ColType::TinyInt => "tinyint",
            ColType::Uuid => "uuid",
            ColType::Varint => "varint",
            ColType::List(t) => return write!(f, "list<{t}>"),
            ColType::Set(t) => return write!(f, "set<{t}>"),
            ColType::Map(k, v) => return write!(f, "map<{k}, {v}>"),
            ColType::Frozen(t) => return write!(f, "frozen<{t}>"),
        };
        f.write_str(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varchar_prints_as_text() {
        assert_eq!(
            ColType::simple("varchar").map(|t| t.to_string()),
            Some("text".into())
        );
        let t = ColType::Frozen(Box::new(ColType::Map(
            Box::new(ColType::Text),
            Box::new(ColType::Text),
        )));
        assert_eq!(t.to_string(), "frozen<map<text, text>>");
    }

    #[test]
    fn counter_option_is_0x0005() {
        let mut b = Vec::new();
        ColType::Counter.write_option(&mut b);
        assert_eq!(b, [0, 5]);
    }
}
