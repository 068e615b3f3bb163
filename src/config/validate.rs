//! Checks of the settings that serde cannot express, with errors that name the field.

use std::collections::HashSet;
use std::path::PathBuf;

use super::{Config, CountingMode, FamilyConfig, ModeFeature};

/// A configuration problem. The message names the field, so an operator can fix the
/// file without reading code; the command line exits with code 2 on any of these.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {}: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the system said.
        error: String,
    },
    /// The file is not valid TOML, has an unknown key, or a value of the wrong type.
    #[error("config file is not valid{}: {message}", at.map(|(l, c)| format!(" at line {l}, column {c}")).unwrap_or_default())]
    Parse {
        /// What the TOML parser said.
        message: String,
        /// Line and column, 1-based, when known.
        at: Option<(usize, usize)>,
    },
    /// A value is out of range or inconsistent with another.
    #[error("config field `{field}`: {problem}")]
    Invalid {
        /// Dotted path of the field, e.g. `family[1].key`.
        field: String,
        /// What is wrong and what is expected.
        problem: String,
    },
}

impl ConfigError {
    pub(super) fn parse(
        message: &str,
        span: Option<std::ops::Range<usize>>,
        text: &str,
    ) -> ConfigError {
        let at = span.and_then(|span| {
            let before = text.get(..span.start)?;
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
            Some((line, column))
        });
        ConfigError::Parse {
            message: message.trim().to_owned(),
            at,
        }
    }

    /// An [`ConfigError::Invalid`] for `field`.
    pub fn invalid(field: impl Into<String>, problem: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            field: field.into(),
            problem: problem.into(),
        }
    }
}

/// Whether `name` is a CQL identifier we can use without quoting: lower case letters,
/// digits and `_`, starting with a letter, at most 48 characters (Cassandra's limit).
pub(crate) fn is_plain_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some('a'..='z'))
        && name.len() <= 48
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_'))
}

/// Checks a table name written `table` or `keyspace.table`.
pub(crate) fn check_table_name(field: &str, name: &str) -> Result<(), ConfigError> {
    let ok = match name.split_once('.') {
        Some((ks, table)) => is_plain_identifier(ks) && is_plain_identifier(table),
        None => is_plain_identifier(name),
    };
    if ok {
        Ok(())
    } else {
        Err(ConfigError::invalid(
            field,
            format!(
                "`{name}` is not a table name: use lower-case letters, digits and _, optionally `keyspace.table`"
            ),
        ))
    }
}

pub(super) fn check_identifier(field: &str, name: &str) -> Result<(), ConfigError> {
    if is_plain_identifier(name) {
        Ok(())
    } else {
        Err(ConfigError::invalid(
            field,
            format!(
                "`{name}` is not a column name: use lower-case letters, digits and _, starting with a letter"
            ),
        ))
    }
}

fn positive(field: &str, value: u128) -> Result<(), ConfigError> {
    if value == 0 {
        Err(ConfigError::invalid(field, "must be greater than zero"))
    } else {
        Ok(())
    }
}

/// The names of a family's time columns in both tables (as configured: `minute_time`,
/// `day_time`; the defaults `day`, `minute`, `month`), which no counter column may take.
/// A setting that does not resolve is `validate_families`' to report; its default name
/// stands in here.
pub(super) fn bucket_columns(family: &FamilyConfig) -> Vec<String> {
    let defaults = FamilyConfig::default();
    let minute = family
        .minute_time
        .resolve()
        .or_else(|_| defaults.minute_time.resolve());
    let day = family
        .day_time
        .resolve()
        .or_else(|_| defaults.day_time.resolve());
    let mut names: Vec<String> = [minute, day]
        .into_iter()
        .flatten()
        .flat_map(|table| [table.partition.name, table.clustering.name])
        .collect();
    if !family.hour_table.is_empty() {
        names.extend(HOUR_TIME_COLUMNS.map(String::from));
    }
    names
}

impl Config {
    /// Checks every setting; the first problem found is returned.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_store()?;
        self.validate_flush()?;
        self.validate_limits()?;
        self.validate_families()?;
        self.validate_cardinality()?;
        self.validate_mappings()?;
        self.validate_operations()?;
        self.validate_epochs()?;
        self.validate_exact()
    }

    fn validate_store(&self) -> Result<(), ConfigError> {
        let store = &self.store;
        if store.contact_points.is_empty() {
            return Err(ConfigError::invalid(
                "store.contact_points",
                "needs at least one host:port",
            ));
        }
        for (i, point) in store.contact_points.iter().enumerate() {
            let valid = point.rsplit_once(':').is_some_and(|(host, port)| {
                !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0)
            });
            if !valid {
                return Err(ConfigError::invalid(
                    format!("store.contact_points[{i}]"),
                    format!("`{point}` is not host:port"),
                ));
            }
        }
        if !is_plain_identifier(&store.keyspace) {
            return Err(ConfigError::invalid(
                "store.keyspace",
                format!(
                    "`{}` is not a keyspace name: use lower-case letters, digits and _",
                    store.keyspace
                ),
            ));
        }
        if store.local_dc.as_deref() == Some("") {
            return Err(ConfigError::invalid(
                "store.local_dc",
                "must not be empty (leave it out instead)",
            ));
        }
        if store.tls.enabled {
            if !cfg!(feature = "tls") {
                return Err(ConfigError::invalid(
                    "store.tls.enabled",
                    "this build has no TLS support; build with `--features tls`",
                ));
            }
            if store.tls.ca_file.is_none() {
                return Err(ConfigError::invalid(
                    "store.tls.ca_file",
                    "is required when TLS is enabled",
                ));
            }
            if store.tls.cert_file.is_some() != store.tls.key_file.is_some() {
                return Err(ConfigError::invalid(
                    "store.tls.key_file",
                    "cert_file and key_file go together",
                ));
            }
        }
        positive("store.request_timeout", store.request_timeout.as_millis())?;
        positive("store.connect_timeout", store.connect_timeout.as_millis())
    }

    fn validate_flush(&self) -> Result<(), ConfigError> {
        let flush = &self.flush;
        if flush.interval.as_millis() < 100 {
            return Err(ConfigError::invalid(
                "flush.interval",
                "must be at least 100ms",
            ));
        }
        if flush.jitter >= flush.interval {
            return Err(ConfigError::invalid(
                "flush.jitter",
                "must be shorter than flush.interval",
            ));
        }
        positive("flush.max_batch_rows", flush.max_batch_rows as u128)?;
        positive("flush.max_in_flight", flush.max_in_flight as u128)?;
        positive("flush.requeue_max_age", flush.requeue_max_age.as_millis())?;
        positive(
            "state.max_ingest_log_bytes",
            u128::from(self.state.max_ingest_log_bytes),
        )?;
        positive(
            "flush.shutdown_deadline",
            flush.shutdown_deadline.as_millis(),
        )
    }

    fn validate_limits(&self) -> Result<(), ConfigError> {
        let limits = &self.limits;
        positive("limits.max_pending_rows", limits.max_pending_rows as u128)?;
        positive("limits.max_pending_bytes", limits.max_pending_bytes as u128)?;
        positive("limits.max_tags", limits.max_tags as u128)?;
        if !(16..=60_000).contains(&limits.max_key_bytes) {
            return Err(ConfigError::invalid(
                "limits.max_key_bytes",
                "must be between 16 and 60000",
            ));
        }
        if !(64..=(1 << 20)).contains(&limits.max_line_bytes) {
            return Err(ConfigError::invalid(
                "limits.max_line_bytes",
                "must be between 64 and 1048576",
            ));
        }
        Ok(())
    }

    /// A family counting in `mode` (at `field`) with a durable listener: refused when
    /// the mode cannot take what the ingest log replays.
    fn check_durable_ingest(&self, mode: CountingMode, field: &str) -> Result<(), ConfigError> {
        match mode.refuses(ModeFeature::DurableIngest) {
            Some(why) if self.ingest.durable() => Err(ConfigError::invalid(
                field,
                format!(
                    "\"{}\" cannot be used while a listener is durable (ingest.http.durable, ingest.otlp.durable): {why}",
                    mode.as_str()
                ),
            )),
            _ => Ok(()),
        }
    }

    fn validate_families(&self) -> Result<(), ConfigError> {
        check_table_name("generic.minute_table", &self.generic.minute_table)?;
        check_table_name("generic.day_table", &self.generic.day_table)?;
        self.check_durable_ingest(self.generic.mode, "generic.mode")?;
        let mut names = HashSet::new();
        let mut metrics = HashSet::new();
        let mut tables: HashSet<String> = HashSet::new();
        tables.insert(self.qualified(&self.generic.minute_table));
        tables.insert(self.qualified(&self.generic.day_table));
        for (i, family) in self.families.iter().enumerate() {
            let at = |field: &str| format!("family[{i}].{field}");
            let mapped = self.mappings.iter().any(|m| m.family == family.name);
            validate_family(family, mapped, &at)?;
            self.check_durable_ingest(family.mode, &at("mode"))?;
            if !names.insert(family.name.as_str()) {
                return Err(ConfigError::invalid(
                    at("name"),
                    format!("`{}` is used by another family", family.name),
                ));
            }
            for (field, table) in family_tables(family) {
                if table.is_empty() {
                    continue;
                }
                if !tables.insert(self.qualified(table)) {
                    return Err(ConfigError::invalid(
                        at(field),
                        format!("table `{table}` is already written by another family"),
                    ));
                }
            }
            for metric in family.columns.keys() {
                if !metrics.insert(metric.as_str()) {
                    return Err(ConfigError::invalid(
                        format!("family[{i}].columns.\"{metric}\""),
                        "this metric name already belongs to another family",
                    ));
                }
            }
        }
        if self.families.len() >= usize::from(u16::MAX) {
            return Err(ConfigError::invalid("family", "too many families"));
        }
        Ok(())
    }

    /// `keyspace.table` for a table name written with or without its keyspace.
    pub(crate) fn qualified(&self, table: &str) -> String {
        if table.contains('.') {
            table.to_owned()
        } else {
            format!("{}.{table}", self.store.keyspace)
        }
    }
}

fn validate_family(
    family: &FamilyConfig,
    mapped: bool,
    at: &dyn Fn(&str) -> String,
) -> Result<(), ConfigError> {
    if family.name.trim().is_empty() {
        return Err(ConfigError::invalid(at("name"), "is required"));
    }
    validate_granularities(family, at)?;
    if family.key.is_empty() {
        return Err(ConfigError::invalid(
            at("key"),
            "needs at least one key column",
        ));
    }
    if family.columns.is_empty() && !mapped {
        return Err(ConfigError::invalid(
            at("columns"),
            "needs at least one metric = column, or a [[mapping]] rule that feeds the family",
        ));
    }
    if !(1..=64).contains(&family.shards) {
        return Err(ConfigError::invalid(
            at("shards"),
            "must be between 1 and 64",
        ));
    }
    let time_columns = time_columns(family, at)?;
    let is_bucket = |name: &str| time_columns.iter().any(|c| c == name);
    let mut seen = HashSet::new();
    let shard = (family.shards > 1).then_some(family.shard_column.as_str());
    let epoch = family.epoch_column.as_deref();
    if let Some(epoch) = epoch {
        check_identifier(&at("epoch_column"), epoch)?;
        if is_bucket(epoch) || Some(epoch) == shard {
            return Err(ConfigError::invalid(
                at("epoch_column"),
                format!("`{epoch}` is reserved for the time bucket or shard"),
            ));
        }
    }
    for (i, column) in family.key.iter().enumerate() {
        check_identifier(&format!("{}[{i}]", at("key")), column)?;
        if is_bucket(column) || Some(column.as_str()) == shard || Some(column.as_str()) == epoch {
            return Err(ConfigError::invalid(
                format!("{}[{i}]", at("key")),
                format!("`{column}` is reserved for the time bucket or shard"),
            ));
        }
        if !seen.insert(column.as_str()) {
            return Err(ConfigError::invalid(
                format!("{}[{i}]", at("key")),
                format!("`{column}` is listed twice"),
            ));
        }
    }
    for (metric, column) in &family.columns {
        let field = format!("{}.\"{metric}\"", at("columns"));
        if metric.is_empty() || metric.contains([':', '|', '\n', '\r']) {
            return Err(ConfigError::invalid(
                field,
                "is not a metric name (no `:`, `|` or line breaks)",
            ));
        }
        check_identifier(&field, column)?;
        if seen.contains(column.as_str())
            || is_bucket(column)
            || Some(column.as_str()) == shard
            || Some(column.as_str()) == epoch
        {
            return Err(ConfigError::invalid(
                field,
                format!("`{column}` is a key, bucket, shard or epoch column, not a counter column"),
            ));
        }
    }
    if family.shards > 1 {
        check_identifier(&at("shard_column"), &family.shard_column)?;
    }
    let mode = family.mode.as_str();
    if family.shards > 1
        && let Some(why) = family.mode.refuses(ModeFeature::Shards)
    {
        return Err(ConfigError::invalid(
            at("shards"),
            format!("must be 1 with mode = \"{mode}\": {why}"),
        ));
    }
    if let Some(own) = family.mode.own_column() {
        let problem = || format!("`{own}` is a column of its own of mode = \"{mode}\"");
        if let Some(i) = family.key.iter().position(|k| k == own) {
            return Err(ConfigError::invalid(
                format!("{}[{i}]", at("key")),
                problem(),
            ));
        }
        if let Some((metric, _)) = family.columns.iter().find(|(_, c)| *c == own) {
            return Err(ConfigError::invalid(
                format!("{}.\"{metric}\"", at("columns")),
                problem(),
            ));
        }
    }
    Ok(())
}

/// A family's table settings, by field, in label order of their granularities (unset
/// ones are empty).
pub(super) fn family_tables(family: &FamilyConfig) -> [(&'static str, &String); 4] {
    [
        ("minute_table", &family.minute_table),
        ("day_table", &family.day_table),
        ("hour_table", &family.hour_table),
        ("total_table", &family.total_table),
    ]
}

/// The hour table's time columns: fixed, `day date` in the partition key and `hour
/// smallint` (hour of the day) as clustering column.
pub(crate) const HOUR_TIME_COLUMNS: [&str; 2] = ["day", "hour"];

/// At least one table; each a valid name, no two the same; and the settings that assume
/// a minute and a day table and nothing else refused by name on any other shape.
fn validate_granularities(
    family: &FamilyConfig,
    at: &dyn Fn(&str) -> String,
) -> Result<(), ConfigError> {
    let tables = family_tables(family);
    if tables.iter().all(|(_, t)| t.is_empty()) {
        return Err(ConfigError::invalid(
            at("minute_table"),
            format!(
                "family `{}` needs at least one table: minute_table, hour_table, day_table or total_table",
                family.name
            ),
        ));
    }
    for (i, (field, table)) in tables.iter().enumerate() {
        if table.is_empty() {
            continue;
        }
        check_table_name(&at(field), table)?;
        if let Some((other, _)) = tables[..i].iter().find(|(_, t)| t == table) {
            return Err(ConfigError::invalid(
                at(field),
                format!("must differ from {other}"),
            ));
        }
    }
    let minute_and_day = !family.minute_table.is_empty()
        && !family.day_table.is_empty()
        && family.hour_table.is_empty()
        && family.total_table.is_empty();
    if minute_and_day {
        return Ok(());
    }
    let refused = |field: &str, what: &str| {
        Err(ConfigError::invalid(
            at(field),
            format!(
                "{what} needs a family with exactly a minute_table and a day_table (no hour_table or total_table)"
            ),
        ))
    };
    if family.exact {
        return refused("exact", "the delta ledger (exact = true)");
    }
    if let Some(why) = family.mode.refuses(ModeFeature::OtherTables) {
        let mode = family.mode.as_str();
        return refused("mode", &format!("mode = \"{mode}\" ({why})"));
    }
    if family.epoch_column.is_some() {
        return refused("epoch_column", "resetting by epochs");
    }
    Ok(())
}

/// The names of a family's time columns (both tables), after checking each: a valid
/// name, a type that can hold its value, and within a table two different names.
fn time_columns(
    family: &FamilyConfig,
    at: &dyn Fn(&str) -> String,
) -> Result<Vec<String>, ConfigError> {
    let minute = family.minute_time.resolve().map_err(|(field, problem)| {
        ConfigError::invalid(at(&format!("minute_time.{field}.type")), problem)
    })?;
    let day = family.day_time.resolve().map_err(|(field, problem)| {
        ConfigError::invalid(at(&format!("day_time.{field}.type")), problem)
    })?;
    let mut names = Vec::new();
    for (section, table) in [("minute_time", &minute), ("day_time", &day)] {
        for column in [&table.partition, &table.clustering] {
            let field = at(&format!("{section}.{}.column", column.role.as_str()));
            check_identifier(&field, &column.name)?;
        }
        if table.partition.name == table.clustering.name {
            return Err(ConfigError::invalid(
                at(&format!(
                    "{section}.{}.column",
                    table.clustering.role.as_str()
                )),
                format!(
                    "`{}` already names the partition's time column",
                    table.clustering.name
                ),
            ));
        }
        names.push(table.partition.name.clone());
        names.push(table.clustering.name.clone());
    }
    if !family.hour_table.is_empty() {
        names.extend(HOUR_TIME_COLUMNS.map(String::from));
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn family() -> FamilyConfig {
        FamilyConfig::seed_views()
    }

    fn field_of(config: &Config) -> String {
        match config.validate() {
            Err(ConfigError::Invalid { field, .. }) => field,
            other => panic!("expected an invalid field, got {other:?}"),
        }
    }

    #[test]
    fn defaults_are_valid() {
        Config::default().validate().unwrap();
        let mut c = Config::default();
        c.families.push(family());
        c.validate().unwrap();
    }

    #[test]
    fn each_rule_names_its_field() {
        let mut c = Config::default();
        c.store.contact_points = vec!["localhost".into()];
        assert_eq!(field_of(&c), "store.contact_points[0]");

        let mut c = Config::default();
        c.flush.jitter = c.flush.interval;
        assert_eq!(field_of(&c), "flush.jitter");

        let mut c = Config::default();
        c.limits.max_key_bytes = 1;
        assert_eq!(field_of(&c), "limits.max_key_bytes");

        let mut c = Config::default();
        c.families.push(FamilyConfig {
            key: vec![],
            ..family()
        });
        assert_eq!(field_of(&c), "family[0].key");

        let mut c = Config::default();
        c.families.push(FamilyConfig {
            key: vec!["day".into()],
            ..family()
        });
        assert_eq!(field_of(&c), "family[0].key[0]");

        let mut c = Config::default();
        c.families.push(family());
        c.families.push(FamilyConfig {
            name: "other".into(),
            minute_table: "o_m".into(),
            day_table: "o_d".into(),
            ..family()
        });
        assert_eq!(field_of(&c), "family[1].columns.\"page.bytes\"");

        let mut c = Config::default();
        c.families.push(FamilyConfig {
            minute_table: "counts_by_minute".into(),
            ..family()
        });
        assert_eq!(field_of(&c), "family[0].minute_table");

        let mut c = Config::default();
        c.families.push(FamilyConfig {
            shards: 0,
            ..family()
        });
        assert_eq!(field_of(&c), "family[0].shards");

        let mut c = Config::default();
        c.families.push(FamilyConfig {
            minute_table: "Views".into(),
            ..family()
        });
        assert_eq!(field_of(&c), "family[0].minute_table");
    }

    /// A `writer_totals` family has no shards, no epochs, exactly a minute and a day
    /// table, and keeps `writer` for its writer column; configured families and the
    /// generic one may mix modes.
    #[test]
    fn writer_totals_rules() {
        let totals = || FamilyConfig {
            mode: CountingMode::WriterTotals,
            ..family()
        };
        let mut c = Config::default();
        c.generic.mode = CountingMode::WriterTotals;
        c.families.push(totals());
        c.families.push(FamilyConfig {
            name: "counted".into(),
            minute_table: "c_m".into(),
            day_table: "c_d".into(),
            columns: [("c.views".to_string(), "views".to_string())].into(),
            ..family()
        });
        c.validate().unwrap();

        let mut c = Config::default();
        c.families.push(FamilyConfig {
            shards: 4,
            ..totals()
        });
        assert_eq!(field_of(&c), "family[0].shards");
        let mut c = Config::default();
        c.families.push(FamilyConfig {
            key: vec!["writer".into()],
            ..totals()
        });
        assert_eq!(field_of(&c), "family[0].key[0]");
        let mut c = Config::default();
        c.families.push(FamilyConfig {
            columns: [("page.views".to_string(), "writer".to_string())].into(),
            ..totals()
        });
        assert_eq!(field_of(&c), "family[0].columns.\"page.views\"");
        let mut c = Config::default();
        c.families.push(FamilyConfig {
            hour_table: "t_h".into(),
            ..totals()
        });
        assert_eq!(
            field_of(&c),
            "family[0].mode",
            "a minute and a day table only"
        );
        let mut c = Config::default();
        c.families.push(FamilyConfig {
            epoch_column: Some("epoch".into()),
            ..totals()
        });
        assert_eq!(field_of(&c), "family[0].epoch_column");
        // Acknowledged ingest replays counter deltas: not for running totals.
        let mut c = Config::default();
        c.families.push(totals());
        c.ingest.http.enabled = true;
        c.ingest.http.durable = true;
        assert_eq!(field_of(&c), "family[0].mode");
        c.ingest.http.durable = false;
        c.validate().unwrap();
        c.families.clear();
        c.generic.mode = CountingMode::WriterTotals;
        c.ingest.otlp_http.enabled = true;
        c.ingest.otlp.durable = true;
        assert_eq!(field_of(&c), "generic.mode");
        let parsed = Config::from_toml(
            "[generic]\nmode = \"writer_totals\"\n[[family]]\nname = \"t\"\nminute_table = \"t_m\"\nday_table = \"t_d\"\nkey = [\"k\"]\nmode = \"writer_totals\"\n[family.columns]\n\"t.n\" = \"n\"\n",
        )
        .unwrap();
        assert_eq!(parsed.families[0].mode, CountingMode::WriterTotals);
        assert_eq!(parsed.generic.mode, CountingMode::WriterTotals);
        assert!(Config::from_toml("[generic]\nmode = \"ledger\"\n").is_err());
    }

    /// Time columns: a type that cannot hold the value, a bad or repeated name, a time
    /// column reused as a counter: each names its field.
    #[test]
    fn time_columns_name_their_field() {
        use super::super::tables::TimeColumnConfig;
        let mut c = Config::default();
        let mut f = family();
        f.minute_time.minute = TimeColumnConfig::new("minute", "tinyint");
        c.families.push(f);
        assert_eq!(field_of(&c), "family[0].minute_time.minute.type");
        let error = c.validate().unwrap_err().to_string();
        assert!(error.contains("cannot hold a minute"), "{error}");

        let mut c = Config::default();
        let mut f = family();
        f.day_time.month = TimeColumnConfig::new("month", "smallint");
        c.families.push(f);
        assert_eq!(field_of(&c), "family[0].day_time.month.type");

        let mut c = Config::default();
        let mut f = family();
        f.minute_time.minute = TimeColumnConfig::new("day", "timestamp");
        c.families.push(f);
        assert_eq!(field_of(&c), "family[0].minute_time.minute.column");

        let mut c = Config::default();
        let mut f = family();
        f.day_time.day = TimeColumnConfig::new("bad name", "date");
        c.families.push(f);
        assert_eq!(field_of(&c), "family[0].day_time.day.column");

        let mut c = Config::default();
        let mut f = family();
        f.minute_time.minute = TimeColumnConfig::new("views", "timestamp");
        c.families.push(f);
        assert_eq!(field_of(&c), "family[0].columns.\"page.views\"");

        // Renamed time columns free the default names for key columns.
        let mut c = Config::default();
        let mut f = family();
        f.minute_time.minute = TimeColumnConfig::new("bucket", "timestamp");
        f.key = vec!["minute".into()];
        c.families.push(f);
        c.validate().unwrap();
    }

    /// One configuration shape in every build: the library built without the sidecar
    /// reads a file written for the sidecar (its `[ingest.*]` sections included), as the
    /// book's embedding example (docs/src/guide/embedding.md) does. `.ci/run` runs this in a library-only build.
    #[test]
    fn the_example_file_parses_in_every_build() {
        let example = Config::from_toml(include_str!("../../examples/countersink.toml"))
            .expect("examples/countersink.toml parses");
        example.validate().unwrap();
        assert_eq!(example.families, [FamilyConfig::seed_views()]);
    }

    /// The annotated example parses, validates, and states the real defaults.
    #[test]
    fn the_annotated_example_parses_and_states_the_defaults() {
        let example = Config::from_toml(include_str!("../../examples/countersink.toml")).unwrap();
        example.validate().unwrap();
        example.ingest.validate().unwrap();
        let mut expected = Config::default();
        expected.families.push(FamilyConfig::seed_views());
        assert_eq!(
            example, expected,
            "a value in examples/countersink.toml differs from the built-in default"
        );
    }

    #[test]
    fn unknown_keys_and_bad_durations_are_parse_errors() {
        assert!(matches!(
            Config::from_toml("[flush]\nintervall = \"5s\""),
            Err(ConfigError::Parse { .. })
        ));
        let err = Config::from_toml("[flush]\ninterval = \"5\"").unwrap_err();
        assert!(err.to_string().contains("5s"), "{err}");
        assert!(err.to_string().contains("line 2"), "{err}");
        let c =
            Config::from_toml("[flush]\ninterval = \"2s\"\n[[family]]\nname = \"v\"\n").unwrap();
        assert_eq!(c.flush.interval, std::time::Duration::from_secs(2));
        assert_eq!(c.families[0].shards, 1, "family defaults apply per entry");
    }
}
