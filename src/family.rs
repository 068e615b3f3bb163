//! Counter families: where a metric name and its tags are written.
//!
//! Family 0 is the *generic* family: any counter lands in
//! `counts_by_minute ((name, tags, day), minute) value` keyed by its name and canonical
//! tag string. Configured families map metric names to counter columns of the user's
//! own tables, keyed by the values of named tags (seed 000's `views_by_minute`).
//!
//! A name goes, in this order: to the family whose `columns` list it exactly (one hash
//! look-up); to the first `[[mapping]]` rule it matches (`family/mapped.rs`: only the rules that
//! can match it are tried); else to the generic family, or it is dropped as
//! unconfigured. Tag rules (`family/keys.rs`) decide which tag fills a key column and what the
//! generic family's canonical tag string keeps.

mod defs;
mod keys;
mod mapped;
mod reshape;
mod tagset;

pub use self::reshape::Reshape;
pub(crate) use self::tagset::IndexedLine;
pub use self::tagset::TagSet;

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::backoff::Backoff;
use crate::config::{
    Config, ConfigError, ConsistencyLevel, CountingMode, ShardPlacement, TableTime,
};
use crate::line::InvalidReason;
use crate::mapping::{Captures, TagRules};
use crate::series;

use self::defs::Defs;
use self::mapped::{MappedNames, MappedRule};
use crate::vocabulary::{FamilyId, Granularity};

/// A table, with its keyspace.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TableName {
    /// Keyspace.
    pub keyspace: String,
    /// Table.
    pub table: String,
}

impl TableName {
    /// Resolves `table` or `keyspace.table` against a default keyspace.
    pub fn resolve(name: &str, default_keyspace: &str) -> TableName {
        match name.split_once('.') {
            Some((keyspace, table)) => TableName {
                keyspace: keyspace.into(),
                table: table.into(),
            },
            None => TableName {
                keyspace: default_keyspace.into(),
                table: name.into(),
            },
        }
    }
}

impl std::fmt::Display for TableName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.keyspace, self.table)
    }
}

/// Hot-key sharding of a family.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sharding {
    /// Number of shards (at least 2).
    pub shards: u8,
    /// Where the shard column sits.
    pub placement: ShardPlacement,
    /// The `tinyint` shard column.
    pub column: String,
}

impl Sharding {
    /// The shard a writer writes to in one flush. Each flush moves to the next shard, and
    /// writers start from different shards (their seed, from [`shard_seed`]), so a fleet
    /// spreads over all of them.
    pub fn shard_for(&self, writer_seed: u64, flush_seq: u64) -> u8 {
        // Below `shards` (at most 64), so it fits.
        (writer_seed.wrapping_add(flush_seq) % u64::from(self.shards)) as u8
    }
}

/// A writer's shard seed: a hash (FNV-1a) of its id, so that writers started together
/// begin on different shards.
pub fn shard_seed(writer_id: &str) -> u64 {
    writer_id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The partition bucket of a key in a regular table spread over `buckets` partitions per
/// family and day (the key index, the delta ledger): a stable hash (FNV-1a) of its JSON
/// text, modulo `buckets`.
pub fn key_bucket(key: &str, buckets: u16) -> i16 {
    // Below `buckets` (at most 4096), so it fits.
    (shard_seed(key) % u64::from(buckets.max(1))) as i16
}

/// One family, resolved from the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FamilyDef {
    /// Its id (index in [`Families`]).
    pub id: FamilyId,
    /// Its name (`"generic"` for family 0).
    pub name: String,
    /// The minute table, if the family has one.
    pub minute_table: Option<TableName>,
    /// The day table, if the family has one.
    pub day_table: Option<TableName>,
    /// The hour table, if the family has one (`hour_table`).
    pub hour_table: Option<TableName>,
    /// The all-time total table, if the family has one (`total_table`).
    pub total_table: Option<TableName>,
    /// The minute table's time columns (`[family.minute_time]`).
    pub minute_time: TableTime,
    /// The day table's time columns (`[family.day_time]`).
    pub day_time: TableTime,
    /// Key columns in order; the series key holds one field per key column.
    pub key_columns: Vec<String>,
    /// Counter columns in order; a row holds one delta per counter column.
    pub columns: Vec<String>,
    /// Hot-key sharding, if configured.
    pub sharding: Option<Sharding>,
    /// The `int` epoch column in the partition key, for a family reset by epochs.
    pub epoch_column: Option<String>,
    /// Whether the family keeps exact totals in the delta ledger (`exact = true`).
    pub exact: bool,
    /// How its tables count: counter deltas, or each writer's running totals.
    pub mode: CountingMode,
}

impl FamilyDef {
    /// The table of granularity `table`, if the family has one.
    pub fn table(&self, table: Granularity) -> Option<&TableName> {
        match table {
            Granularity::Minute => self.minute_table.as_ref(),
            Granularity::Day => self.day_table.as_ref(),
            Granularity::Hour => self.hour_table.as_ref(),
            Granularity::Total => self.total_table.as_ref(),
        }
    }

    /// Whether the family has a table of granularity `table`.
    pub fn has(&self, table: Granularity) -> bool {
        self.table(table).is_some()
    }

    /// The granularities the family has tables of, in label order.
    pub fn granularities(&self) -> impl Iterator<Item = Granularity> + '_ {
        Granularity::ALL.into_iter().filter(|&g| self.has(g))
    }

    /// The table of granularity `table` as text, or `-` when the family has none (for
    /// logs and records, which name the table a write was meant for).
    pub fn table_text(&self, table: Granularity) -> String {
        self.table(table)
            .map_or_else(|| "-".to_owned(), ToString::to_string)
    }

    /// Whether the family has exactly a minute and a day table: the shape the delta
    /// ledger, writer totals, epochs and the operations built on them assume.
    pub fn is_minute_and_day(&self) -> bool {
        self.granularities()
            .eq([Granularity::Minute, Granularity::Day])
    }

    /// Number of counter columns.
    pub fn width(&self) -> usize {
        self.columns.len()
    }

    /// Whether this is the generic family.
    pub fn is_generic(&self) -> bool {
        self.id == GENERIC
    }
}

/// The generic family's id.
pub const GENERIC: FamilyId = FamilyId(0);

/// Where an increment goes: the family, and which of its columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    /// The family.
    pub family: FamilyId,
    /// Column index within the family.
    pub column: usize,
    /// The family's number of columns.
    pub width: usize,
}

/// Why an increment could not be placed in a family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unplaced {
    /// A configured family's key tag is missing or empty (the line is invalid).
    MissingKeyTag,
    /// A configured family's key tag appears twice with different values (invalid).
    AmbiguousKeyTag,
    /// The series key is longer than `limits.max_key_bytes` (the line is invalid).
    KeyTooLong,
    /// No family takes this metric name and the generic family is disabled (the
    /// increment is dropped).
    Unconfigured,
}

impl Unplaced {
    /// The invalid-line reason, for the two cases that make an increment invalid.
    pub fn invalid_reason(self) -> Option<InvalidReason> {
        match self {
            Unplaced::MissingKeyTag => Some(InvalidReason::MissingKeyTag),
            Unplaced::KeyTooLong => Some(InvalidReason::KeyTooLong),
            Unplaced::AmbiguousKeyTag => Some(InvalidReason::AmbiguousKeyTag),
            Unplaced::Unconfigured => None,
        }
    }
}

/// A table that may be left unset (empty).
fn optional_table(name: &str, keyspace: &str) -> Option<TableName> {
    (!name.is_empty()).then(|| TableName::resolve(name, keyspace))
}

/// Where and how the exact families' tables are written (`[exact]`), known to whoever
/// knows the families: the sink writes the ledger and the outcomes, the flush forms
/// ledger rows in `buckets` partitions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExactTables {
    /// Keyspace of `delta_ledger`, `outcomes` and `exact_by_day`.
    pub keyspace: String,
    /// Consistency of their writes.
    pub consistency: ConsistencyLevel,
    /// TTL of a ledger row, in seconds.
    pub ledger_ttl_secs: i32,
    /// Ledger partitions per family and day.
    pub buckets: u16,
    /// The wait before a failed ledger or outcome-table write is sent again.
    pub retry_backoff: Backoff,
}

impl ExactTables {
    /// The settings of `config`.
    pub fn of(config: &Config) -> ExactTables {
        ExactTables {
            keyspace: config.exact_keyspace().to_owned(),
            consistency: config.exact.consistency,
            ledger_ttl_secs: i32::try_from(config.exact.ledger_ttl.as_secs()).unwrap_or(i32::MAX),
            buckets: config.exact.buckets,
            retry_backoff: Backoff::new(
                config.exact.retry_backoff_min,
                config.exact.retry_backoff_max,
            ),
        }
    }
}

/// All families, and the metric-name index that routes increments to them.
///
/// Two parts: the families themselves (their tables, key and counter columns, modes),
/// each fixed for the life of the process under its id because pending rows, the journal
/// and the sink's prepared statements name it by id; and their routing (exact names,
/// `[[mapping]]` rules, tag rules, which family each name is), which a live reload
/// replaces (see [`Families::reshape`]). A reload that adds a family or changes one's
/// tables or columns appends a definition with a new id; the definition it replaces
/// stays, for the rows placed under it, but no routing leads to it any more.
pub struct Families {
    defs: Defs,
    exact: Option<ExactTables>,
    generic_enabled: bool,
    /// Which names and tags go where; swapped whole, read without a lock.
    routing: ArcSwap<Routing>,
}

/// Where increments go: the exact-name index, the `[[mapping]]` rules and the tag rules.
/// It names families by id, so it is only ever swapped for one built against the same
/// definitions (see [`Families::reshape`]).
struct Routing {
    /// The families in force, by name (a definition a reload replaced is not here).
    by_name: HashMap<Box<str>, FamilyId>,
    by_metric: HashMap<Box<str>, (FamilyId, usize), foldhash::fast::RandomState>,
    /// The `[[mapping]]` rules; `None` without any.
    mapped: Option<MappedNames>,
    /// Per family (by id), per key column: the tag keys, as sent, that fill it.
    key_sources: Vec<Vec<Vec<Box<str>>>>,
    /// Per family (by id): its number of counter columns, read here rather than from
    /// the definitions on the exact-name path.
    widths: Vec<usize>,
    /// The generic family's tag rules (`[tags]` and the default deny list).
    generic_tags: TagRules,
    /// `limits.max_key_bytes`: here, so that a reload changes it with the routing (the
    /// line cache, which holds keys checked against it, is cleared then).
    max_key_bytes: usize,
}

impl Families {
    /// Builds the families from a configuration (validated here as well).
    pub fn from_config(config: &Config) -> Result<Families, ConfigError> {
        config.validate()?;
        let keyspace = &config.store.keyspace;
        let mut defs = vec![FamilyDef {
            id: GENERIC,
            name: "generic".into(),
            minute_table: Some(TableName::resolve(&config.generic.minute_table, keyspace)),
            day_table: Some(TableName::resolve(&config.generic.day_table, keyspace)),
            hour_table: None,
            total_table: None,
            minute_time: TableTime::default_minute(),
            day_time: TableTime::default_day(),
            key_columns: vec!["name".into(), "tags".into()],
            columns: vec!["value".into()],
            sharding: None,
            epoch_column: None,
            exact: config.generic.enabled && config.generic.exact,
            mode: config.generic.mode,
        }];
        let mut by_metric = HashMap::default();
        for (index, family) in config.families.iter().enumerate() {
            let id = FamilyId(
                u16::try_from(index + 1)
                    .map_err(|_| ConfigError::invalid("family", "too many families"))?,
            );
            let mut columns: Vec<String> = Vec::new();
            for (metric, column) in &family.columns {
                let position = match columns.iter().position(|c| c == column) {
                    Some(p) => p,
                    None => {
                        columns.push(column.clone());
                        columns.len() - 1
                    }
                };
                by_metric.insert(metric.as_str().into(), (id, position));
            }
            defs.push(FamilyDef {
                id,
                name: family.name.clone(),
                minute_table: optional_table(&family.minute_table, keyspace),
                day_table: optional_table(&family.day_table, keyspace),
                hour_table: optional_table(&family.hour_table, keyspace),
                total_table: optional_table(&family.total_table, keyspace),
                minute_time: family
                    .minute_time
                    .resolve()
                    .map_err(|(_, problem)| ConfigError::invalid("family.minute_time", problem))?,
                day_time: family
                    .day_time
                    .resolve()
                    .map_err(|(_, problem)| ConfigError::invalid("family.day_time", problem))?,
                key_columns: family.key.clone(),
                columns,
                sharding: (family.shards > 1).then(|| Sharding {
                    shards: family.shards,
                    placement: family.shard_placement,
                    column: family.shard_column.clone(),
                }),
                epoch_column: family.epoch_column.clone(),
                exact: family.exact,
                mode: family.mode,
            });
        }
        let mapped = Self::compile_mappings(config, &mut defs)?;
        let mut key_sources = vec![Vec::new()];
        for (index, def) in defs.iter().enumerate().skip(1) {
            let rules = config.tag_rules(Some(index - 1))?;
            key_sources.push(
                def.key_columns
                    .iter()
                    .map(|c| rules.sources_of(c))
                    .collect(),
            );
        }
        let exact = defs
            .iter()
            .any(|f| f.exact)
            .then(|| ExactTables::of(config));
        let by_name = defs
            .iter()
            .map(|d| (d.name.as_str().into(), d.id))
            .collect();
        let widths = defs.iter().map(FamilyDef::width).collect();
        Ok(Families {
            defs: Defs::new(defs),
            exact,
            generic_enabled: config.generic.enabled,
            routing: ArcSwap::from_pointee(Routing {
                by_name,
                by_metric,
                mapped,
                key_sources,
                widths,
                generic_tags: config.tag_rules(None)?,
                max_key_bytes: config.limits.max_key_bytes,
            }),
        })
    }

    /// Compiles the `[[mapping]]` rules (validated already), adding the counter columns
    /// they name to their families.
    fn compile_mappings(
        config: &Config,
        defs: &mut [FamilyDef],
    ) -> Result<Option<MappedNames>, ConfigError> {
        if config.mappings.is_empty() {
            return Ok(None);
        }
        let mut placed = Vec::with_capacity(config.mappings.len());
        for (i, rule) in config.mappings.iter().enumerate() {
            let invalid = |problem: String| ConfigError::invalid(format!("mapping[{i}]"), problem);
            let pattern = crate::mapping::Pattern::compile(&rule.pattern, rule.match_type)
                .map_err(invalid)?;
            let def = defs
                .iter_mut()
                .skip(1)
                .find(|d| d.name == rule.family)
                .ok_or_else(|| invalid(format!("family `{}` is not defined", rule.family)))?;
            let column = match def.columns.iter().position(|c| *c == rule.column) {
                Some(p) => p,
                None => {
                    def.columns.push(rule.column.clone());
                    def.columns.len() - 1
                }
            };
            let key = def
                .key_columns
                .iter()
                .map(|c| {
                    rule.key
                        .get(c)
                        .map(|t| crate::mapping::Template::parse(t).map_err(invalid))
                        .transpose()
                })
                .collect::<Result<_, _>>()?;
            let head = pattern.literal_head(&rule.pattern);
            placed.push((def.id, column, pattern, key, head));
        }
        // Widths are final once every rule has added its column.
        let rules = placed
            .into_iter()
            .map(|(family, column, pattern, key, head)| {
                let target = Target {
                    family,
                    column,
                    width: defs[usize::from(family.0)].width(),
                };
                (
                    MappedRule {
                        pattern,
                        target,
                        key,
                    },
                    head,
                )
            })
            .collect();
        Ok(Some(MappedNames::new(rules)))
    }

    /// The family with this id. Ids come from [`Families::resolve`] or
    /// [`Families::by_name`], so an unknown one is a caller bug; it yields the generic
    /// family rather than panicking.
    pub fn get(&self, id: FamilyId) -> &FamilyDef {
        self.defs
            .get(usize::from(id.0))
            .or_else(|| self.defs.get(0))
            .expect("the generic family is always defined")
    }

    /// The family in force called `name` (`"generic"` for family 0).
    pub fn by_name(&self, name: &str) -> Option<&FamilyDef> {
        let id = *self.routing.load().by_name.get(name)?;
        Some(self.get(id))
    }

    /// Every family, generic first, by id: with those a live reload replaced or removed
    /// (rows placed under them may still be pending; see [`Families::in_force`]).
    pub fn iter(&self) -> impl Iterator<Item = &FamilyDef> {
        self.defs.iter()
    }

    /// How many definitions there are, retired ones included: the next id.
    pub fn len(&self) -> usize {
        self.defs.len()
    }

    /// Whether there are no definitions (never: the generic family is always there).
    pub fn is_empty(&self) -> bool {
        self.defs.len() == 0
    }

    /// Whether `id` is a family in force (not one a live reload replaced or removed).
    pub fn in_force(&self, id: FamilyId) -> bool {
        let def = self.get(id);
        def.id == id && self.routing.load().by_name.get(def.name.as_str()) == Some(&id)
    }

    /// The configured family and column index a metric name is mapped to.
    pub fn column_of(&self, name: &str) -> Option<(FamilyId, usize)> {
        self.routing.load().by_metric.get(name).copied()
    }

    /// The shard `family`'s writes go to in flush `flush_seq` of the writer with
    /// `writer_seed` ([`shard_seed`]); `None` for an unsharded family.
    pub fn shard_of(&self, family: FamilyId, writer_seed: u64, flush_seq: u64) -> Option<u8> {
        self.get(family)
            .sharding
            .as_ref()
            .map(|s| s.shard_for(writer_seed, flush_seq))
    }

    /// Whether any family keeps exact totals.
    pub fn any_exact(&self) -> bool {
        self.exact.is_some()
    }

    /// The exact tables' settings, when any family keeps exact totals.
    pub fn exact_tables(&self) -> Option<&ExactTables> {
        self.exact.as_ref()
    }

    /// How `family` counts.
    pub fn mode(&self, family: FamilyId) -> CountingMode {
        self.get(family).mode
    }

    /// Whether any family (the generic one only when enabled) uses `mode`.
    pub fn any_in(&self, mode: CountingMode) -> bool {
        self.defs
            .iter()
            .any(|f| f.mode == mode && (!f.is_generic() || self.generic_enabled))
    }

    /// Whether counters matching no configured family are kept.
    pub fn generic_enabled(&self) -> bool {
        self.generic_enabled
    }

    /// Finds where an increment of metric `name` with `tags` goes, and writes its series
    /// key into `series` (cleared first).
    pub fn resolve<T: TagSet + ?Sized>(
        &self,
        name: &str,
        tags: &T,
        series: &mut Vec<u8>,
    ) -> Result<Target, Unplaced> {
        self.resolve_in(&self.routing.load(), name, tags, series)
    }

    /// The routing as it is now, for several look-ups in a row (see [`Router`]).
    pub fn router(&self) -> Router<'_> {
        Router {
            families: self,
            routing: self.routing.load_full(),
            last_name: String::new(),
            last_route: None,
        }
    }

    /// [`Families::resolve`] by `routing`.
    fn resolve_in<T: TagSet + ?Sized>(
        &self,
        routing: &Routing,
        name: &str,
        tags: &T,
        series: &mut Vec<u8>,
    ) -> Result<Target, Unplaced> {
        series.clear();
        if let Some(&(family, column)) = routing.by_metric.get(name) {
            return Self::resolve_metric(routing, family, column, tags, series);
        }
        if let Some(mapped) = &routing.mapped {
            let mut captures = Captures::default();
            if let Some(rule) = mapped.find(name, &mut captures) {
                return self.resolve_mapped(routing, rule, name, &captures, tags, series);
            }
        }
        if !self.generic_enabled {
            return Err(Unplaced::Unconfigured);
        }
        Self::resolve_generic(routing, name, tags, series)
    }

    /// The series key of a name a family lists in its `metrics` (`series` empty).
    fn resolve_metric<T: TagSet + ?Sized>(
        routing: &Routing,
        family: FamilyId,
        column: usize,
        tags: &T,
        series: &mut Vec<u8>,
    ) -> Result<Target, Unplaced> {
        // One source list per key column.
        let sources = routing.sources(family);
        for sources in sources {
            keys::push_from_tags(tags, sources, series)?;
        }
        routing.check_length(series, sources.len())?;
        Ok(Target {
            family,
            column,
            width: routing
                .widths
                .get(usize::from(family.0))
                .copied()
                .unwrap_or(1),
        })
    }

    /// The series key of a name in the generic family (`series` empty).
    fn resolve_generic<T: TagSet + ?Sized>(
        routing: &Routing,
        name: &str,
        tags: &T,
        series: &mut Vec<u8>,
    ) -> Result<Target, Unplaced> {
        if !series::push_field(series, name) {
            return Err(Unplaced::KeyTooLong);
        }
        // Length prefix first, patched once the canonical tags are written in place.
        let prefix_at = series.len();
        series.extend_from_slice(&[0, 0]);
        keys::write_canonical(tags, &routing.generic_tags, series);
        let tags_len =
            u16::try_from(series.len() - prefix_at - 2).map_err(|_| Unplaced::KeyTooLong)?;
        series[prefix_at..prefix_at + 2].copy_from_slice(&tags_len.to_le_bytes());
        routing.check_length(series, 2)?;
        Ok(Target {
            family: GENERIC,
            column: 0,
            width: 1,
        })
    }

    /// The series key of a name a `[[mapping]]` rule matched: each key column from the
    /// rule's template, or from the tags.
    fn resolve_mapped<T: TagSet + ?Sized>(
        &self,
        routing: &Routing,
        rule: &MappedRule,
        name: &str,
        captures: &Captures,
        tags: &T,
        series: &mut Vec<u8>,
    ) -> Result<Target, Unplaced> {
        let sources = routing.sources(rule.target.family);
        for (template, sources) in rule.key.iter().zip(sources) {
            match template {
                Some(template) => keys::push_from_captures(template, name, captures, series)?,
                None => keys::push_from_tags(tags, sources, series)?,
            }
        }
        routing.check_length(series, rule.key.len())?;
        Ok(rule.target)
    }

    /// Encodes the key of a configured family from its key values, in key order.
    pub fn encode_key(
        &self,
        family: FamilyId,
        values: &[&str],
        series: &mut Vec<u8>,
    ) -> Result<(), Unplaced> {
        let def = self.get(family);
        if values.len() != def.key_columns.len() {
            return Err(Unplaced::MissingKeyTag);
        }
        series.clear();
        for value in values {
            if value.is_empty() {
                return Err(Unplaced::MissingKeyTag);
            }
            if !series::push_field(series, value) {
                return Err(Unplaced::KeyTooLong);
            }
        }
        self.routing.load().check_length(series, values.len())
    }
}

/// The families' routing held for a run of look-ups (the points of one request): the
/// shared routing is read once for all of them rather than once per increment. A routing
/// replaced meanwhile applies from the next run.
///
/// It also keeps where the last name went: the points of one metric come in a row, so
/// the name is looked up once for them rather than once per point.
pub struct Router<'f> {
    families: &'f Families,
    routing: Arc<Routing>,
    /// The last name looked up, and what it resolved to (`None`: none yet).
    last_name: String,
    last_route: Option<NameRoute>,
}

/// Where a name goes under one routing, whatever its tags.
#[derive(Debug, Clone, Copy)]
enum NameRoute {
    /// A family lists it: that family and column.
    Metric(FamilyId, usize),
    /// A `[[mapping]]` rule matches it (looked up again with each increment: the
    /// captures are the name's).
    Mapped,
    /// No family and no rule: the generic family.
    Generic,
    /// No family and no rule, and the generic family is off.
    Unconfigured,
}

impl Router<'_> {
    /// [`Families::resolve`] by this routing.
    pub fn resolve<T: TagSet + ?Sized>(
        &mut self,
        name: &str,
        tags: &T,
        series: &mut Vec<u8>,
    ) -> Result<Target, Unplaced> {
        let route = match self.last_route {
            Some(route) if self.last_name == name => route,
            _ => {
                let route = self.route(name);
                self.last_name.clear();
                self.last_name.push_str(name);
                self.last_route = Some(route);
                route
            }
        };
        let routing = &*self.routing;
        series.clear();
        match route {
            NameRoute::Metric(family, column) => {
                Families::resolve_metric(routing, family, column, tags, series)
            }
            NameRoute::Generic => Families::resolve_generic(routing, name, tags, series),
            NameRoute::Unconfigured => Err(Unplaced::Unconfigured),
            NameRoute::Mapped => self.families.resolve_in(routing, name, tags, series),
        }
    }

    /// Where `name` goes, as [`Families::resolve_in`] decides it.
    fn route(&self, name: &str) -> NameRoute {
        let routing = &*self.routing;
        if let Some(&(family, column)) = routing.by_metric.get(name) {
            return NameRoute::Metric(family, column);
        }
        if let Some(mapped) = &routing.mapped
            && mapped.find(name, &mut Captures::default()).is_some()
        {
            return NameRoute::Mapped;
        }
        if self.families.generic_enabled {
            NameRoute::Generic
        } else {
            NameRoute::Unconfigured
        }
    }
}

impl Routing {
    /// The key length a limit applies to: the field bytes, not their length prefixes.
    fn check_length(&self, series: &[u8], fields: usize) -> Result<(), Unplaced> {
        if series.len() - 2 * fields > self.max_key_bytes {
            Err(Unplaced::KeyTooLong)
        } else {
            Ok(())
        }
    }

    /// The tag keys that fill each key column of `family`, in key order.
    fn sources(&self, family: FamilyId) -> &[Vec<Box<str>>] {
        self.key_sources
            .get(usize::from(family.0))
            .map_or(&[], Vec::as_slice)
    }
}

#[cfg(test)]
mod tests;
