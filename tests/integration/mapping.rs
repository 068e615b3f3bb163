//! Name mapping and tag rules end to end: StatsD lines through the engine's line path
//! (each packet sent twice, so the second pass comes from the line cache), flushed through
//! the real driver, read back from the store's tables.

use countersink::config::{Config, FamilyConfig, MappingConfig};
use countersink::line::InvalidReason;
use countersink::mapping::MatchType;
use countersink::vocabulary::{DropReason, Transport};

use crate::common::{T0, Writer, config, start_store};

/// The example configuration plus an `api` family fed only by three rules: a rule without
/// a fixed first component first, so that "first match wins" is tested across the
/// index; a glob; a regex.
fn mapped_config(state: &std::path::Path) -> Config {
    let mut config = config(state);
    config.families.push(FamilyConfig {
        name: "api".into(),
        minute_table: "api_by_minute".into(),
        day_table: "api_by_day".into(),
        key: vec!["endpoint".into(), "region".into()],
        ..FamilyConfig::default()
    });
    let rule = |pattern: &str, match_type, column: &str, endpoint: &str| MappingConfig {
        pattern: pattern.into(),
        match_type,
        family: "api".into(),
        column: column.into(),
        key: [("endpoint".to_string(), endpoint.to_string())].into(),
    };
    config.mappings = vec![
        rule("*.login.requests", MatchType::Glob, "logins", "$1"),
        rule("api.*.requests", MatchType::Glob, "requests", "$1"),
        rule(
            r"api\.([^.]+)\.errors\.(\d+)",
            MatchType::Regex,
            "errors",
            "$1-$2",
        ),
    ];
    config.tags.rename = [("az".to_string(), "region".to_string())].into();
    config.tags.deny = vec!["host".into()];
    config
}

/// Sends `packet` twice (a full parse, then the line cache) at one time.
fn send_twice(writer: &Writer, packet: &str, now: i64) {
    for _ in 0..2 {
        writer
            .engine
            .ingest_packet(packet.as_bytes(), Transport::Udp, now);
    }
}

/// Rows of `table` (in the configured keyspace) as text, `-` for a null, sorted.
async fn rows(
    store: &crate::common::Store,
    config: &Config,
    table: &str,
    columns: &[&str],
) -> Vec<String> {
    let result = store
        .select(&format!(
            "SELECT {} FROM {}.{table}",
            columns.join(", "),
            config.store.keyspace
        ))
        .await;
    let mut out: Vec<String> = (0..result.len())
        .map(|i| {
            columns
                .iter()
                .map(|c| match result.get_i64(i, c) {
                    Some(n) => n.to_string(),
                    None => result.text(i, c).unwrap_or("-").to_owned(),
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn captures_fill_key_columns_and_tag_rules_shape_the_generic_rows() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = mapped_config(dir.path());
    let store = start_store(&mut config).await;
    let mut writer = Writer::start(&config).await;
    let now = T0 - 3600;
    send_twice(
        &writer,
        concat!(
            "api.home.requests:3|c|#region:eu\n",
            // `az` is renamed to `region`: the same row.
            "api.home.requests:2|c|#az:eu,env:prod\n",
            // Rules 0 and 1 both match: rule 0 comes first.
            "api.login.requests:5|c|#region:eu\n",
            "web.login.requests:1|c|#region:us\n",
            "api.home.errors.503:1|c|#region:eu\n",
            // No rule: the generic family, without the denied `host` and the pod UID.
            "other.count:7|c|#env:prod,host:web-1,dd.internal.entity_id:pod-a\n",
            "other.count:4|c|#host:web-2,env:prod,dd.internal.entity_id:pod-b\n",
            // A key column left to the tags needs its tag.
            "api.home.requests:100|c\n",
        ),
        now,
    );
    let counters = writer.engine.aggregator().counters();
    assert_eq!(counters.invalid_for(InvalidReason::MissingKeyTag), 2);
    writer.flusher.flush_now().await;

    assert_eq!(
        rows(
            &store,
            &config,
            "api_by_minute",
            &["endpoint", "region", "requests", "logins", "errors"]
        )
        .await,
        [
            "api eu - 10 -",
            "home eu 10 - -",
            "home-503 eu - - 2",
            "web us - 2 -",
        ]
    );
    assert_eq!(
        rows(
            &store,
            &config,
            "api_by_day",
            &["endpoint", "region", "requests"]
        )
        .await,
        ["api eu -", "home eu 10", "home-503 eu -", "web us -"]
    );
    assert_eq!(
        rows(
            &store,
            &config,
            "counts_by_minute",
            &["name", "tags", "value"]
        )
        .await,
        ["other.count env:prod 22"],
        "one generic row: the per-pod and per-host tags are dropped"
    );
    store.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmatched_names_are_dropped_and_counted_without_the_generic_family() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = mapped_config(dir.path());
    config.generic.enabled = false;
    // The default deny list off: the pod UID is a tag like any other.
    config.tags.deny_default = false;
    config.families.push(FamilyConfig {
        name: "pods".into(),
        minute_table: "pods_by_minute".into(),
        day_table: "pods_by_day".into(),
        key: vec!["dd_internal_entity_id".into()],
        columns: [("pod.starts".to_string(), "starts".to_string())].into(),
        tags: countersink::config::FamilyTagsConfig {
            rename: [(
                "dd.internal.entity_id".to_string(),
                "dd_internal_entity_id".to_string(),
            )]
            .into(),
            ..Default::default()
        },
        ..FamilyConfig::default()
    });
    let store = start_store(&mut config).await;
    let mut writer = Writer::start(&config).await;
    send_twice(
        &writer,
        concat!(
            "api.home.requests:3|c|#region:eu\n",
            "other.count:7|c|#env:prod\n",
            "api.home.misses:4|c|#region:eu\n",
            "pod.starts:1|c|#dd.internal.entity_id:pod-a\n",
        ),
        T0 - 3600,
    );
    let counters = writer.engine.aggregator().counters();
    assert_eq!(counters.dropped_for(DropReason::Unconfigured), 4);
    writer.flusher.flush_now().await;
    assert_eq!(
        rows(
            &store,
            &config,
            "api_by_minute",
            &["endpoint", "region", "requests"]
        )
        .await,
        ["home eu 6"]
    );
    assert_eq!(
        rows(
            &store,
            &config,
            "pods_by_minute",
            &["dd_internal_entity_id", "starts"]
        )
        .await,
        ["pod-a 2"],
        "a renamed tag fills the key column"
    );
    let accounting = writer.accounting();
    assert!(accounting.is_balanced(), "{accounting:?}");
    store.shutdown().await;
}
