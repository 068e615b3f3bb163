//! Turning terms into typed values: literals are coerced to the receiving column's type with
//! Cassandra's messages, markers take the bound bytes (null and unset kept apart).

use std::net::IpAddr;

use crate::cql::ast::{Literal, Term};
use crate::error::CqlError;
use crate::proto::wire::BoundValue;
use crate::types::ColType;
use crate::value::{Value, normalize_map, parse_date, parse_timestamp};

/// A resolved term.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Bound {
    Null,
    /// Only from a bound `[value]` of length -2 (v4): "leave unchanged".
    Unset,
    Val(Value),
}

/// The values bound to a statement's markers, by marker index.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bindings<'a> {
    values: &'a [BoundValue],
    /// PREPARE-time validation: markers have no values yet. They resolve to "unset" (or to
    /// a placeholder where a value is required), so every rule that does not depend on the
    /// bound values is checked at PREPARE, as Cassandra does.
    dry: bool,
}

impl<'a> Bindings<'a> {
    pub(crate) fn new(values: &'a [BoundValue]) -> Self {
        Bindings { values, dry: false }
    }

    pub(crate) fn dry() -> Bindings<'static> {
        Bindings {
            values: &[],
            dry: true,
        }
    }

    pub(crate) fn is_dry(&self) -> bool {
        self.dry
    }
    /// Resolves a term for a receiver `name` of type `ty`.
    pub(crate) fn resolve(&self, t: &Term, ty: &ColType, name: &str) -> Result<Bound, CqlError> {
        match t {
            Term::Marker(_) if self.dry => Ok(Bound::Unset),
            Term::Marker(i) => match self.values.get(*i) {
                None => Err(CqlError::invalid("Invalid amount of bind variables")),
                Some(BoundValue::Null) => Ok(Bound::Null),
                Some(BoundValue::Unset) => Ok(Bound::Unset),
                Some(BoundValue::Bytes(b)) => Ok(match Value::decode(ty, b)? {
                    Some(v) => Bound::Val(v),
                    None => Bound::Null,
                }),
            },
            Term::Lit(Literal::Null) => Ok(Bound::Null),
            Term::Lit(l) => Ok(Bound::Val(self.literal(l, ty, name)?)),
        }
    }

    /// Resolves a term that must hold a value (not null, not unset), with `what` naming it.
    pub(crate) fn resolve_value(
        &self,
        t: &Term,
        ty: &ColType,
        name: &str,
    ) -> Result<Value, CqlError> {
        if self.dry && matches!(t, Term::Marker(_)) {
            return Ok(Value::Blob(Vec::new()));
        }
        match self.resolve(t, ty, name)? {
            Bound::Val(v) => Ok(v),
            Bound::Null => Err(CqlError::invalid(format!(
                "Invalid null value in condition for column {name}"
            ))),
            Bound::Unset => Err(CqlError::invalid(format!(
                "Invalid unset value for column {name}"
            ))),
        }
    }

    fn element(&self, t: &Term, ty: &ColType, name: &str) -> Result<Value, CqlError> {
        match self.resolve(t, ty, name)? {
            Bound::Val(v) => Ok(v),
            Bound::Null | Bound::Unset => Err(CqlError::invalid(
                "null is not supported inside collections",
            )),
        }
    }

    fn literal(&self, l: &Literal, ty: &ColType, name: &str) -> Result<Value, CqlError> {
        let bad = |kind: &str| {
            CqlError::invalid(format!(
                "Invalid {kind} constant ({l}) for \"{name}\" of type {ty}"
            ))
        };
        let ty = ty.unfrozen();
        Ok(match (l, ty) {
            (Literal::Int(s), _)
                if is_integral(ty) || matches!(ty, ColType::Double | ColType::Float) =>
            {
                int_value(s, ty).ok_or_else(|| match java_integral(ty) {
                    // Cassandra parses with Byte/Short/Integer/Long.parseX and says so.
                    Some(java) => CqlError::invalid(format!("Unable to make {java} from '{s}'")),
                    None => bad("INTEGER"),
                })?
            }
            (Literal::Float(s), ColType::Double) => {
                Value::Double(parse_float(s).ok_or_else(|| bad("FLOAT"))?)
            }
            (Literal::Float(s), ColType::Float) => {
                Value::Float(parse_float(s).ok_or_else(|| bad("FLOAT"))? as f32)
            }
            (Literal::Str(s), ColType::Text) => Value::Text(s.clone()),
            (Literal::Str(s), ColType::Ascii) => {
                if let Some(c) = s.chars().find(|c| !c.is_ascii()) {
                    // Java's encoder error, which Cassandra passes on: the length is the
                    // unmappable character's in UTF-16 units.
                    return Err(CqlError::invalid(format!(
                        "Invalid ASCII character in string literal: java.nio.charset.UnmappableCharacterException: Input length = {}",
                        c.len_utf16()
                    )));
                }
                Value::Ascii(s.clone())
            }
            (Literal::Str(s), ColType::Timestamp) => {
                Value::Timestamp(parse_timestamp(s).ok_or_else(|| {
                    CqlError::invalid(format!("Unable to coerce '{s}' to a formatted date (long)"))
                })?)
            }
            (Literal::Str(s), ColType::Date) => Value::Date(parse_date(s).ok_or_else(|| {
                CqlError::invalid(format!("Unable to coerce '{s}' to a formatted date (long)"))
            })?),
            (Literal::Str(s), ColType::Inet) => Value::Inet(s.parse::<IpAddr>().map_err(|_| {
                CqlError::invalid(format!("Unable to make inet address from '{s}'"))
            })?),
            (Literal::Bool(b), ColType::Boolean) => Value::Boolean(*b),
            (Literal::Uuid(u), ColType::Uuid) => Value::Uuid(*u),
            (Literal::Uuid(u), ColType::TimeUuid) => {
                if u[6] >> 4 != 1 {
                    return Err(bad("UUID"));
                }
                Value::TimeUuid(*u)
            }
            (Literal::Blob(b), ColType::Blob) => Value::Blob(b.clone()),
            (Literal::List(items), ColType::List(e)) => Value::List(
                items
                    .iter()
                    .map(|t| self.element(t, e, name))
                    .collect::<Result<_, _>>()?,
            ),
            (Literal::Set(items), ColType::Set(e)) => {
                let mut v: Vec<Value> = items
                    .iter()
                    .map(|t| self.element(t, e, name))
                    .collect::<Result<_, _>>()?;
                v.sort();
                v.dedup();
                Value::Set(v)
            }
            (Literal::Set(items), ColType::Map(..)) if items.is_empty() => Value::Map(Vec::new()),
            (Literal::Map(entries), ColType::Map(kt, vt)) => {
                let mut v = Vec::with_capacity(entries.len());
                for (k, x) in entries {
                    v.push((self.element(k, kt, name)?, self.element(x, vt, name)?));
                }
                Value::Map(normalize_map(v))
            }
            (Literal::Int(_), _) => return Err(bad("INTEGER")),
            (Literal::Float(_), _) => return Err(bad("FLOAT")),
            (Literal::Str(_), _) => return Err(bad("STRING")),
            (Literal::Bool(_), _) => return Err(bad("BOOLEAN")),
            (Literal::Uuid(_), _) => return Err(bad("UUID")),
            (Literal::Blob(_), _) => return Err(bad("HEX")),
            (Literal::List(_) | Literal::Set(_) | Literal::Map(_), _) => {
                return Err(CqlError::invalid(format!(
                    "Invalid collection literal {l} for \"{name}\" of type {ty}"
                )));
            }
            (Literal::Null, _) => {
                return Err(CqlError::Server("null literal reached coercion".into()));
            }
        })
    }
}

fn is_integral(t: &ColType) -> bool {
    matches!(
        t,
        ColType::Int
            | ColType::BigInt
            | ColType::Counter
            | ColType::SmallInt
            | ColType::TinyInt
            | ColType::Varint
            | ColType::Timestamp
    )
}

/// The Java type Cassandra parses an integer literal of this column type into.
fn java_integral(t: &ColType) -> Option<&'static str> {
    Some(match t {
        ColType::TinyInt => "byte",
        ColType::SmallInt => "short",
        ColType::Int => "int",
        ColType::BigInt | ColType::Counter => "long",
        _ => return None,
    })
}

fn int_value(s: &str, t: &ColType) -> Option<Value> {
    let v: i128 = s.parse().ok()?;
    Some(match t {
        ColType::Int => Value::Int(i32::try_from(v).ok()?),
        ColType::BigInt => Value::BigInt(i64::try_from(v).ok()?),
        ColType::Counter => Value::Counter(i64::try_from(v).ok()?),
        ColType::Timestamp => Value::Timestamp(i64::try_from(v).ok()?),
        ColType::SmallInt => Value::SmallInt(i16::try_from(v).ok()?),
        ColType::TinyInt => Value::TinyInt(i8::try_from(v).ok()?),
        ColType::Varint => Value::Varint(v),
        ColType::Double => Value::Double(v as f64),
        ColType::Float => Value::Float(v as f32),
        _ => return None,
    })
}

fn parse_float(s: &str) -> Option<f64> {
    match s {
        "NaN" => Some(f64::NAN),
        "Infinity" => Some(f64::INFINITY),
        "-Infinity" => Some(f64::NEG_INFINITY),
        s => s.parse().ok(),
    }
}
