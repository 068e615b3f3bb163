//! A body of the HTTP increment API (`POST /v1/increments`) through its reader, which
//! the integration tests only reach with a few hand-written bodies.
//!
//! Beyond "no panic", three oracles:
//! - a body read is within the item limit, and every item passes the checks a StatsD
//!   line's name and tags get (nothing a line could not carry reaches the engine);
//! - the two framings agree: a JSON array read item by item gives the items serde reads
//!   as a whole, and the same items written one per line read back the same as NDJSON;
//! - a refusal that names an item names one that exists in the body's framing (an index
//!   below the number of items the reader could have seen).
//!
//! The first byte chooses the framing and the item limit (small, so that the limit is
//! hit, or large).

#![no_main]

use countersink::ingest::http_api::body::{Framing, Item, parse};
use countersink::line::check_counter;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&choice, body)) = data.split_first() else {
        return;
    };
    let framing = if choice & 1 == 0 {
        Framing::JsonArray
    } else {
        Framing::Ndjson
    };
    let max_items = if choice & 2 == 0 { 3 } else { 10_000 };
    match parse(body, framing, max_items) {
        Ok(items) => {
            assert!(items.len() <= max_items);
            for item in &items {
                assert!(
                    check_counter(&item.name, &item.tag_pairs()).is_ok(),
                    "{item:?}"
                );
                assert!(item.timestamp.is_none_or(|t| t >= 1), "{item:?}");
            }
            if framing == Framing::JsonArray {
                let whole: Vec<Item> =
                    serde_json::from_slice(body).expect("serde reads what the reader read");
                assert_eq!(whole, items);
            }
            let lines: Vec<u8> = items
                .iter()
                .flat_map(|item| {
                    let mut line = serde_json::to_vec(&wire(item)).unwrap();
                    line.push(b'\n');
                    line
                })
                .collect();
            assert_eq!(
                parse(&lines, Framing::Ndjson, max_items).as_ref(),
                Ok(&items)
            );
        }
        Err(bad) => {
            if let Some(index) = bad.index {
                let seen = match framing {
                    // Every item after the first follows a comma.
                    Framing::JsonArray => body.iter().filter(|&&b| b == b',').count() + 1,
                    Framing::Ndjson => body.split(|&b| b == b'\n').count(),
                };
                assert!(index < seen.max(1), "{bad} of {seen}");
            }
        }
    }
});

/// An item as a client writes it (tags as an object cannot repeat a key, so a list).
fn wire(item: &Item) -> serde_json::Value {
    let tags: Vec<String> = item
        .tags
        .iter()
        .map(|(k, v)| {
            if v.is_empty() {
                k.clone()
            } else {
                format!("{k}:{v}")
            }
        })
        .collect();
    let mut value = serde_json::json!({ "name": item.name, "tags": tags, "value": item.value });
    if let Some(t) = item.timestamp {
        value["timestamp"] = t.into();
    }
    value
}
