//! What a live reload may change, and naming what it may not.
//!
//! A running sidecar re-reads its configuration on SIGHUP or `POST /-/reload`. It takes
//! the families' *routing* live: the exact metric names of a family's `columns` (onto the
//! counter columns it already has), the `[[mapping]]` rules and the tag rules (`[tags]`,
//! `[family.tags]`); the cardinality caps (`cardinality.max_contexts`, and
//! `max_contexts` and `max_tag_values` of `[generic]` and each family); `log.filter`;
//! and `[limits]` but `timestamp_max_past`: the buffer's `max_pending_rows` and
//! `max_pending_bytes` (the rows held stay held; lower limits refuse new rows until
//! flushes have made room), `max_key_bytes`, `max_line_bytes` and `max_tags` (the line
//! cache is cleared with them) and `timestamp_max_future`.
//!
//! `limits.timestamp_max_past` does not change live: what was started from it keeps the
//! value it read. The running totals of `writer_totals` families keep that many minutes
//! back (`crate::totals::book`), and the leaderboards and `reconcile` count a day closed
//! once it is that far behind (plus `flush.requeue_max_age`): a wider window taken live
//! would accept increments for minutes whose totals were let go, or whose day a
//! leaderboard already ranked.
//!
//! Everything else was built into something that outlives one flush:
//! sockets (listen addresses and paths), the state directory and the writer identity
//! (the journal, the spill and recovery are keyed by them), the session to the store
//! (contact points, TLS, credentials) and the cardinality window.
//!
//! The list of families and their tables and columns change live, with exceptions
//! refused by name: a family a `[[leaderboard]]` ranks (its jobs read the tables as
//! started; compared here), and, compared once built (see `Families::reshape`), the
//! generic family, `[exact]`, and a family that keeps state of its own beyond its
//! pending rows (`exact`, `writer_totals`, an `epoch_column`: the ledger gate, the
//! running totals and the epoch registry were built for the families at start). A family
//! added or changed gets a new id; the rows pending under the old one are flushed to the
//! old tables first. [`fixed_changes`] names each such field that differs; the
//! families' shapes are compared once built (see `Families::same_families`), since the
//! mapping rules add counter columns to them.

use serde::Serialize;
use serde_json::Value;

use super::{Config, FamilyConfig, GenericConfig, IngestConfig};

/// Every field that differs between the running configuration and `next` and cannot
/// change without a restart, named as in the file (`store.contact_points`,
/// `ingest.udp.listen`, `family.views.minute_table`). Empty when `next` can be taken live.
pub fn fixed_changes(running: &Config, next: &Config) -> Vec<String> {
    let mut changed = Vec::new();
    let out = &mut changed;
    section("store", &running.store, &next.store, out);
    section("state", &running.state, &next.state, out);
    ingest(&running.ingest, &next.ingest, out);
    if running.metrics.listen != next.metrics.listen {
        out.push("metrics.listen".into());
    }
    families(running, next, out);
    let generic = |c: &Config| GenericConfig {
        max_contexts: None,
        max_tag_values: Default::default(),
        ..c.generic.clone()
    };
    section("generic", &generic(running), &generic(next), out);
    section("flush", &running.flush, &next.flush, out);
    // Every limit but the oldest accepted client timestamp changes live (see the module
    // doc for why that one does not).
    if running.limits.timestamp_max_past != next.limits.timestamp_max_past {
        out.push("limits.timestamp_max_past".into());
    }
    if running.cardinality.window != next.cardinality.window {
        out.push("cardinality.window".into());
    }
    // `log.filter` changes live (see `sidecar::log_filter`); the format is the
    // subscriber's, installed once.
    if running.log.format != next.log.format {
        out.push("log.format".into());
    }
    section("read", &running.read, &next.read, out);
    section("key_index", &running.key_index, &next.key_index, out);
    section(
        "leaderboard",
        &running.leaderboards,
        &next.leaderboards,
        out,
    );
    section("epochs", &running.epochs, &next.epochs, out);
    section("exact", &running.exact, &next.exact, out);
    changed
}

/// The refusal of `fields`, one sentence.
pub fn refusal(fields: &[String]) -> String {
    match fields {
        [one] => format!("{one} cannot change without a restart"),
        many => format!("{} cannot change without a restart", many.join(", ")),
    }
}

/// The families a `[[leaderboard]]` ranks, each compared without what a reload takes
/// live (`columns`, `tags` and the caps): its jobs read the family's tables as they
/// were at start. Any other family may be added, removed or changed (the built
/// families decide what that takes: see `Families::reshape`).
fn families(running: &Config, next: &Config, out: &mut Vec<String>) {
    let fixed = |family: &FamilyConfig| FamilyConfig {
        columns: Default::default(),
        tags: Default::default(),
        max_contexts: None,
        max_tag_values: Default::default(),
        ..family.clone()
    };
    for old in &running.families {
        if !running.leaderboards.iter().any(|b| b.family == old.name) {
            continue;
        }
        match next.families.iter().find(|f| f.name == old.name) {
            Some(new) => section(
                &format!("family.{}", old.name),
                &fixed(old),
                &fixed(new),
                out,
            ),
            None => out.push(format!("family.{} (a leaderboard ranks it)", old.name)),
        }
    }
}

/// The receivers: where each listens, then the rest of its section.
fn ingest(running: &IngestConfig, next: &IngestConfig, out: &mut Vec<String>) {
    let (a, b) = (running, next);
    if a.udp.listen != b.udp.listen {
        out.push("ingest.udp.listen".into());
    } else if a.udp != b.udp {
        out.push("ingest.udp".into());
    }
    if a.uds.path != b.uds.path {
        out.push("ingest.uds.path".into());
    } else if a.uds != b.uds {
        out.push("ingest.uds".into());
    }
    if a.uds_stream.path != b.uds_stream.path {
        out.push("ingest.uds_stream.path".into());
    } else if a.uds_stream != b.uds_stream {
        out.push("ingest.uds_stream".into());
    }
    let listens = |on_a: bool, at_a, on_b: bool, at_b| on_a != on_b || (on_a && at_a != at_b);
    let mut check = |name: &str, address_differs: bool, section_differs: bool| {
        if address_differs {
            out.push(format!("ingest.{name}.listen"));
        } else if section_differs {
            out.push(format!("ingest.{name}"));
        }
    };
    check(
        "tcp",
        listens(a.tcp.enabled, a.tcp.listen, b.tcp.enabled, b.tcp.listen),
        a.tcp != b.tcp,
    );
    check(
        "otlp_http",
        listens(
            a.otlp_http.enabled,
            a.otlp_http.listen,
            b.otlp_http.enabled,
            b.otlp_http.listen,
        ),
        a.otlp_http != b.otlp_http,
    );
    check(
        "otlp_grpc",
        listens(
            a.otlp_grpc.enabled,
            a.otlp_grpc.listen,
            b.otlp_grpc.enabled,
            b.otlp_grpc.listen,
        ),
        a.otlp_grpc != b.otlp_grpc,
    );
    check(
        "http",
        listens(a.http.enabled, a.http.listen, b.http.enabled, b.http.listen),
        a.http != b.http,
    );
    if a.otlp != b.otlp {
        out.push("ingest.otlp".into());
    }
    // A section added to [ingest] and not named above is refused whole, never taken
    // silently as live.
    if a != b && !out.iter().any(|field| field.starts_with("ingest")) {
        out.push("ingest".into());
    }
}

/// One section: the names of the fields that differ (a nested table by its own fields,
/// a list whole), or the section's name when its fields cannot be told apart.
fn section<T: Serialize + PartialEq>(name: &str, running: &T, next: &T, out: &mut Vec<String>) {
    if running == next {
        return;
    }
    let before = out.len();
    if let (Ok(a), Ok(b)) = (serde_json::to_value(running), serde_json::to_value(next)) {
        differing(name, &a, &b, out);
    }
    if out.len() == before {
        out.push(name.to_owned());
    }
}

/// The paths below `path` at which two values differ.
fn differing(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let (x, y) = (a.get(key), b.get(key));
                match (x, y) {
                    (Some(x), Some(y)) => differing(&format!("{path}.{key}"), x, y, out),
                    _ => out.push(format!("{path}.{key}")),
                }
            }
        }
        _ if a != b => out.push(path.to_owned()),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Config {
        Config::from_toml(
            r#"
            [store]
            contact_points = ["127.0.0.1:9042"]
            [[family]]
            name = "views"
            minute_table = "views_by_minute"
            day_table = "views_by_day"
            key = ["page"]
            columns = { "page.views" = "views" }
            "#,
        )
        .unwrap()
    }

    #[test]
    fn routing_changes_are_not_fixed() {
        let running = base();
        let mut next = base();
        next.families[0]
            .columns
            .insert("page.view".into(), "views".into());
        next.families[0].tags.deny.push("host".into());
        next.tags.deny.push("pod".into());
        next.families[0].max_contexts = Some(10);
        next.generic.max_tag_values.insert("user".into(), 5);
        next.cardinality.max_contexts = Some(1000);
        next.limits.max_pending_rows /= 2;
        next.limits.max_pending_bytes *= 2;
        next.limits.max_key_bytes = 64;
        next.limits.max_line_bytes = 512;
        next.limits.max_tags = 8;
        next.limits.timestamp_max_future = std::time::Duration::from_secs(5);
        next.log.filter = "countersink=debug,info".into();
        next.mappings.push(crate::config::MappingConfig {
            pattern: "api.*.views".into(),
            family: "views".into(),
            column: "views".into(),
            ..Default::default()
        });
        assert_eq!(fixed_changes(&running, &next), Vec::<String>::new());
    }

    #[test]
    fn fixed_fields_are_named() {
        let running = base();
        let mut next = base();
        next.store.contact_points = vec!["10.0.0.1:9042".into()];
        next.state.dir = "/elsewhere".into();
        next.ingest.udp.listen = None;
        next.metrics.listen = None;
        next.limits.timestamp_max_past += std::time::Duration::from_secs(60);
        next.cardinality.window = std::time::Duration::from_secs(120);
        next.log.format = crate::config::LogFormat::Json;
        assert_eq!(
            fixed_changes(&running, &next),
            [
                "store.contact_points",
                "state.dir",
                "ingest.udp.listen",
                "metrics.listen",
                "limits.timestamp_max_past",
                "cardinality.window",
                "log.format",
            ]
        );
        let mut http = base();
        http.ingest.http.enabled = true;
        assert_eq!(fixed_changes(&running, &http), ["ingest.http.listen"]);
        http = base();
        http.ingest.http.max_items = 7;
        assert_eq!(fixed_changes(&running, &http), ["ingest.http"]);
    }

    #[test]
    fn families_change_unless_a_leaderboard_ranks_them() {
        let running = base();
        let mut next = base();
        next.families[0].minute_table = "other".into();
        next.families.push(FamilyConfig {
            name: "clicks".into(),
            ..next.families[0].clone()
        });
        assert_eq!(fixed_changes(&running, &next), Vec::<String>::new());
        next.families.clear();
        assert_eq!(fixed_changes(&running, &next), Vec::<String>::new());

        let board = crate::config::LeaderboardConfig {
            name: "top".into(),
            family: "views".into(),
            ..Default::default()
        };
        let mut ranked = base();
        ranked.leaderboards.push(board);
        let mut next = ranked.clone();
        next.families[0].minute_table = "other".into();
        assert_eq!(fixed_changes(&ranked, &next), ["family.views.minute_table"]);
        next.families.clear();
        assert_eq!(
            refusal(&fixed_changes(&ranked, &next)),
            "family.views (a leaderboard ranks it) cannot change without a restart"
        );
    }
}
