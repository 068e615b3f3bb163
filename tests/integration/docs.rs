//! The README documents what the program has: every metric it exports and every
//! configuration key.

use countersink::telemetry::catalogue;

const README: &str = include_str!("../../README.md");

/// Every metric of the catalogue (which the library's tests hold equal to what is
/// exported) is named in the README.
#[test]
fn every_exported_metric_is_in_the_catalogue() {
    let names: Vec<&str> = catalogue::ENGINE_METRICS
        .iter()
        .chain(&catalogue::INGEST_METRICS)
        .chain(&catalogue::OPERATIONS_METRICS)
        .chain(&catalogue::EXACT_METRICS)
        .chain(&catalogue::WRAPPER_METRICS)
        .map(|m| m.name)
        .collect();
    assert!(names.len() >= 15, "{names:?}");
    for name in names {
        assert!(
            README.contains(&format!("`{name}`")),
            "{name} is exported but not in the README's metrics catalogue"
        );
    }
}

/// No metric name ends in a suffix that the Prometheus exposition and OpenMetrics formats
/// give the series of histograms and summaries (`_sum`, `_count`, `_bucket`) or their
/// creation time (`_created`): a scraper would read such a gauge as part of a histogram
/// or summary that does not exist.
#[test]
fn no_metric_name_ends_in_a_reserved_suffix() {
    let all = catalogue::ENGINE_METRICS
        .iter()
        .chain(&catalogue::INGEST_METRICS)
        .chain(&catalogue::OPERATIONS_METRICS)
        .chain(&catalogue::EXACT_METRICS)
        .chain(&catalogue::WRAPPER_METRICS);
    for metric in all {
        for suffix in ["_sum", "_count", "_bucket", "_created"] {
            assert!(
                !metric.name.ends_with(suffix),
                "{} ends in `{suffix}`, which Prometheus reserves for histograms and summaries",
                metric.name
            );
        }
    }
}

#[test]
fn every_configuration_key_is_in_the_reference() {
    let example: toml::Table =
        toml::from_str(include_str!("../../examples/countersink.toml")).unwrap();
    fn walk(prefix: &str, table: &toml::Table, out: &mut Vec<String>) {
        for (key, value) in table {
            match value {
                toml::Value::Table(inner) if key != "columns" => {
                    walk(&format!("{prefix}{key}."), inner, out)
                }
                toml::Value::Array(items) if items.iter().all(toml::Value::is_table) => {
                    for item in items {
                        if let toml::Value::Table(inner) = item {
                            walk(&format!("{prefix}{key}[]."), inner, out);
                        }
                    }
                }
                _ => out.push(format!("{prefix}{key}")),
            }
        }
    }
    let mut keys = Vec::new();
    walk("", &example, &mut keys);
    assert!(keys.len() > 30, "{keys:?}");
    let reference = &README[README
        .find("## Configuration reference")
        .expect("the reference section")..];
    for key in keys {
        // The whole dotted key, in backticks: a leaf such as `mode` or `path` alone would
        // be found anywhere.
        assert!(
            reference.contains(&format!("`{key}`")),
            "config key `{key}` is not in the README's configuration reference"
        );
    }
}
