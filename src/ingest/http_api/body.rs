//! The body of `POST /v1/increments`: a JSON array of increments, or NDJSON (one per
//! line), each `{"name": ..., "tags": ..., "value": ..., "timestamp": ...}`.
//!
//! `tags` is an object (`{"route": "/home", "canary": ""}`; an empty value is a tag
//! without value) or a list of DogStatsD tags (`["route:/home", "canary"]`), and may be
//! left out; `value` an integer within i64; `timestamp` Unix seconds, optional (the
//! increment then counts now). Unknown fields are refused, so a typo (`"vlaue"`) is an
//! error rather than an increment of nothing.
//!
//! A body is checked whole before any of it is applied: the first bad item refuses the
//! request, naming its index, and nothing of it is counted (the client fixes it and sends
//! the whole request again without counting anything twice). The names and tags are
//! checked as a StatsD line's would be ([`crate::line::check_counter`]).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{DeserializeSeed, SeqAccess, Visitor};

/// One increment of a request.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Item {
    /// The counter's name (mapped onto families as a StatsD line's name is).
    pub name: String,
    /// Its tags, as (key, value) with `""` for a tag without value.
    #[serde(default, deserialize_with = "tags")]
    pub tags: Vec<(String, String)>,
    /// The increment.
    pub value: i64,
    /// When it happened (Unix seconds); now when absent.
    #[serde(default)]
    pub timestamp: Option<i64>,
}

impl Item {
    /// The tags as the engine takes them.
    pub fn tag_pairs(&self) -> Vec<(&str, &str)> {
        self.tags
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }
}

/// How a body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `application/json`: one array.
    JsonArray,
    /// `application/x-ndjson` (or `application/jsonl`): one object per line; blank lines
    /// are passed over.
    Ndjson,
}

/// Why a body was refused: the item (its index, from 0) when one item is at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadBody {
    /// The index of the offending item, when the fault is one item's.
    pub index: Option<usize>,
    /// What is wrong, for the client.
    pub message: String,
}

impl fmt::Display for BadBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.index {
            Some(index) => write!(f, "item {index}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// Reads a body of at most `max_items` increments, every item checked.
pub fn parse(body: &[u8], framing: Framing, max_items: usize) -> Result<Vec<Item>, BadBody> {
    let items = match framing {
        Framing::JsonArray => parse_array(body, max_items)?,
        Framing::Ndjson => parse_lines(body, max_items)?,
    };
    for (index, item) in items.iter().enumerate() {
        check(item).map_err(|message| BadBody {
            index: Some(index),
            message,
        })?;
    }
    Ok(items)
}

fn check(item: &Item) -> Result<(), String> {
    crate::line::check_counter(&item.name, &item.tag_pairs())
        .map_err(|reason| reason.to_string())?;
    if item.timestamp.is_some_and(|t| t < 1) {
        return Err("timestamp is not Unix seconds".into());
    }
    Ok(())
}

fn too_many(max_items: usize) -> BadBody {
    BadBody {
        index: None,
        message: format!("more than {max_items} increments in one request"),
    }
}

fn parse_array(body: &[u8], max_items: usize) -> Result<Vec<Item>, BadBody> {
    let place = Place::default();
    let mut parser = serde_json::Deserializer::from_slice(body);
    let items = Items {
        place: &place,
        max_items,
    }
    .deserialize(&mut parser)
    .and_then(|items| parser.end().map(|()| items));
    items.map_err(|error| {
        if error.to_string().starts_with(TOO_MANY) {
            return too_many(max_items);
        }
        // An item's fault when the parser was inside the array, past its `[` and before
        // its `]`, and the body did not just end there.
        let in_item = place.started.get() && !place.done.get() && !error.is_eof();
        BadBody {
            index: in_item.then(|| place.items.get()),
            message: if place.started.get() {
                error.to_string()
            } else {
                format!("the body is not a JSON array of increments: {error}")
            },
        }
    })
}

fn parse_lines(body: &[u8], max_items: usize) -> Result<Vec<Item>, BadBody> {
    let mut items = Vec::new();
    for line in body.split(|&b| b == b'\n') {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if items.len() == max_items {
            return Err(too_many(max_items));
        }
        let item = serde_json::from_slice::<Item>(line).map_err(|error| BadBody {
            index: Some(items.len()),
            message: error.to_string(),
        })?;
        items.push(item);
    }
    Ok(items)
}

const TOO_MANY: &str = "countersink: too many items";

/// Where the parser is in the array: whether it entered it, how many items it read,
/// whether it left it.
#[derive(Default)]
struct Place {
    started: Cell<bool>,
    items: Cell<usize>,
    done: Cell<bool>,
}

/// The array's items, noting where the parser is.
struct Items<'a> {
    place: &'a Place,
    max_items: usize,
}

impl<'de> DeserializeSeed<'de> for Items<'_> {
    type Value = Vec<Item>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Vec<Item>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Items<'_> {
    type Value = Vec<Item>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of increments")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Item>, A::Error> {
        self.place.started.set(true);
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Item>()? {
            items.push(item);
            if items.len() > self.max_items {
                return Err(serde::de::Error::custom(TOO_MANY));
            }
            self.place.items.set(items.len());
        }
        self.place.done.set(true);
        Ok(items)
    }
}

/// `tags`: an object of key to value, or a list of `key:value` / `key` strings.
fn tags<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<(String, String)>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Tags {
        Map(BTreeMap<String, String>),
        List(Vec<String>),
    }
    Ok(match Tags::deserialize(d)? {
        Tags::Map(map) => map.into_iter().collect(),
        Tags::List(list) => list
            .into_iter()
            .map(|tag| match tag.split_once(':') {
                Some((k, v)) => (k.to_owned(), v.to_owned()),
                None => (tag, String::new()),
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(name: &str, tags: &[(&str, &str)], value: i64) -> Item {
        Item {
            name: name.into(),
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            value,
            timestamp: None,
        }
    }

    #[test]
    fn an_array_and_ndjson_read_the_same_items() {
        let array = br#"[{"name":"page.views","tags":{"page_id":"home","canary":""},"value":3},
            {"name":"api.requests","tags":["route:/a","canary"],"value":-2,"timestamp":1700000000},
            {"name":"bare","value":1}]"#;
        let lines = b"{\"name\":\"page.views\",\"tags\":{\"page_id\":\"home\",\"canary\":\"\"},\"value\":3}\n\n{\"name\":\"api.requests\",\"tags\":[\"route:/a\",\"canary\"],\"value\":-2,\"timestamp\":1700000000}\r\n{\"name\":\"bare\",\"value\":1}";
        let mut expected = vec![
            item("page.views", &[("canary", ""), ("page_id", "home")], 3),
            item("api.requests", &[("route", "/a"), ("canary", "")], -2),
            item("bare", &[], 1),
        ];
        expected[1].timestamp = Some(1_700_000_000);
        assert_eq!(parse(array, Framing::JsonArray, 10).unwrap(), expected);
        assert_eq!(parse(lines, Framing::Ndjson, 10).unwrap(), expected);
        assert_eq!(parse(b"[]", Framing::JsonArray, 10).unwrap(), vec![]);
        assert_eq!(parse(b"", Framing::Ndjson, 10).unwrap(), vec![]);
    }

    #[test]
    fn a_bad_item_is_named_by_its_index() {
        let at = |body: &[u8], framing| parse(body, framing, 10).unwrap_err().index;
        let cases: [&[u8]; 6] = [
            br#"[{"name":"a","value":1},{"name":"b","value":1.5}]"#,
            br#"[{"name":"a","value":1},{"name":"b","vlaue":1}]"#,
            br#"[{"name":"a","value":1},{"name":"b","value":99999999999999999999}]"#,
            br#"[{"name":"a","value":1},{"name":"b","tags":{"k":"1,2"},"value":1}]"#,
            br#"[{"name":"a","value":1},{"name":"b:c","value":1}]"#,
            br#"[{"name":"a","value":1},{"name":"b","value":1,"timestamp":0}]"#,
        ];
        for body in cases {
            assert_eq!(
                at(body, Framing::JsonArray),
                Some(1),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        assert_eq!(
            at(
                b"{\"name\":\"a\",\"value\":1}\n{\"name\":\"b\"}\n",
                Framing::Ndjson
            ),
            Some(1)
        );
        assert_eq!(
            at(b"{\"name\":\"a\",\"value\":1}\nnot json\n", Framing::Ndjson),
            Some(1)
        );
        // Not an array at all, or cut short: no item to blame.
        assert_eq!(at(br#"{"name":"a","value":1}"#, Framing::JsonArray), None);
        assert_eq!(
            at(b"[{\"name\":\"a\",\"value\":1}", Framing::JsonArray),
            None
        );
        assert_eq!(at(b"[] []", Framing::JsonArray), None);
    }

    #[test]
    fn more_items_than_the_limit_are_refused_whole() {
        let three = br#"[{"name":"a","value":1},{"name":"a","value":1},{"name":"a","value":1}]"#;
        assert!(parse(three, Framing::JsonArray, 3).is_ok());
        let error = parse(three, Framing::JsonArray, 2).unwrap_err();
        assert_eq!(error.index, None);
        assert!(error.message.contains("more than 2"), "{error}");
        let lines = b"{\"name\":\"a\",\"value\":1}\n{\"name\":\"a\",\"value\":1}\n";
        assert_eq!(parse(lines, Framing::Ndjson, 1).unwrap_err().index, None);
    }
}
