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

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::backoff::Backoff;
use crate::config::{
    Config, ConfigError, ConsistencyLevel, CountingMode, ShardPlacement, TableTime,
};
use crate::line::{self, CounterLine, InvalidReason, Tag};
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

/// The tags of one increment, as the family resolver needs them.
pub trait TagSet {
    /// The value of the first tag named `key` (`""` for a tag without value).
    fn value_of(&self, key: &str) -> Option<&str>;
    /// The value of the tag named `key` when every tag of that name carries the same
    /// value; `Err(())` when two of them disagree.
    #[allow(clippy::result_unit_err)]
    fn only_value_of(&self, key: &str) -> Result<Option<&str>, ()>;
    /// Appends the canonical tag string (see [`CounterLine::write_canonical_tags`]).
    fn write_canonical(&self, out: &mut Vec<u8>);
    /// Calls `f` with every tag, duplicates included (what the tag rules look at).
    fn visit<'s>(&'s self, f: &mut dyn FnMut(Tag<'s>));
    /// Whether some tag's key starts with a byte `first` accepts: the tag rules' quick
    /// test, which a parsed line answers from its raw tag field without splitting it.
    fn any_key_starts(&self, first: &dyn Fn(u8) -> bool) -> bool {
        let mut any = false;
        self.visit(&mut |tag| any |= tag.key.as_bytes().first().is_some_and(|&b| first(b)));
        any
    }
    /// Appends the canonical tag string of the tags whose key `keep` accepts: the tag
    /// rules' path for a line whose tags are dropped but none renamed, so that their
    /// canonical order is that of the line's own tags. A parsed line with its tag index
    /// writes it from the index without splitting the field again.
    fn write_canonical_kept(&self, keep: &dyn Fn(&str) -> bool, out: &mut Vec<u8>) {
        keys::write_sorted_from(self, &|tag| keep(tag.key).then_some(tag), out);
    }
}

/// Tag pairs given to the in-process API. An empty value means a tag without value
/// (`("canary", "")` is the tag `canary`).
impl TagSet for [(&str, &str)] {
    fn value_of(&self, key: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    fn only_value_of(&self, key: &str) -> Result<Option<&str>, ()> {
        only(self.iter().filter(|(k, _)| *k == key).map(|(_, v)| *v))
    }

    fn write_canonical(&self, out: &mut Vec<u8>) {
        const INLINE: usize = 16;
        match self {
            [] => {}
            [one] => write_pair(out, one),
            // The usual handful of tags: sorted by hand, most comparisons decided by the
            // first byte of the keys.
            [a, b] => {
                let (first, second) = if pair_cmp(b, a).is_lt() {
                    (b, a)
                } else {
                    (a, b)
                };
                out.reserve(a.0.len() + a.1.len() + b.0.len() + b.1.len() + 3);
                write_pair(out, first);
                if !same_pair(first, second) {
                    out.push(b',');
                    write_pair(out, second);
                }
            }
            _ if self.len() <= INLINE => {
                // Sort positions, not the pairs: one-byte swaps.
                let mut order = [0u8; INLINE];
                for (i, slot) in order.iter_mut().enumerate().take(self.len()) {
                    *slot = i as u8;
                }
                let order = &mut order[..self.len()];
                for i in 1..order.len() {
                    let mut j = i;
                    while j > 0
                        && pair_cmp(
                            &self[usize::from(order[j])],
                            &self[usize::from(order[j - 1])],
                        )
                        .is_lt()
                    {
                        order.swap(j, j - 1);
                        j -= 1;
                    }
                }
                let mut previous: Option<&(&str, &str)> = None;
                for &i in order.iter() {
                    let pair = &self[usize::from(i)];
                    if let Some(previous) = previous {
                        // Exact duplicates are adjacent now.
                        if same_pair(previous, pair) {
                            continue;
                        }
                        out.push(b',');
                    }
                    write_pair(out, pair);
                    previous = Some(pair);
                }
            }
            _ => {
                let mut tags: Vec<Tag<'_>> =
                    self.iter().map(|&(key, value)| tag(key, value)).collect();
                line::write_sorted(&mut tags, out);
            }
        }
    }

    fn visit<'s>(&'s self, f: &mut dyn FnMut(Tag<'s>)) {
        for &(key, value) in self {
            f(tag(key, value));
        }
    }

    /// The keys' first bytes straight from the pairs (the default goes through
    /// [`TagSet::visit`]'s closure for each tag): stops at the first key `first` accepts.
    fn any_key_starts(&self, first: &dyn Fn(u8) -> bool) -> bool {
        self.iter()
            .any(|(key, _)| key.as_bytes().first().is_some_and(|&b| first(b)))
    }
}

/// Appends `key` or `key:value` (an empty value is no value).
fn write_pair(out: &mut Vec<u8>, &(key, value): &(&str, &str)) {
    out.extend_from_slice(key.as_bytes());
    if !value.is_empty() {
        out.push(b':');
        out.extend_from_slice(value.as_bytes());
    }
}

/// The same tag; lengths rule most pairs out without comparing bytes.
fn same_pair(a: &(&str, &str), b: &(&str, &str)) -> bool {
    a.0.len() == b.0.len() && a.1.len() == b.1.len() && a == b
}

/// A tag of the in-process API: an empty value is no value.
fn tag<'a>(key: &'a str, value: &'a str) -> Tag<'a> {
    Tag {
        key,
        value: (!value.is_empty()).then_some(value),
    }
}

/// The canonical order of tag pairs, the same as that of the [`Tag`]s they stand for:
/// by key, then by value, where an empty value (no value) sorts first, as it does
/// bytewise.
fn pair_cmp(a: &(&str, &str), b: &(&str, &str)) -> std::cmp::Ordering {
    let (x, y) = (a.0.as_bytes(), b.0.as_bytes());
    if let (Some(p), Some(q)) = (x.first(), y.first())
        && p != q
    {
        return p.cmp(q);
    }
    x.cmp(y).then_with(|| a.1.as_bytes().cmp(b.1.as_bytes()))
}

/// The tags of a parsed line.
impl TagSet for CounterLine<'_> {
    fn value_of(&self, key: &str) -> Option<&str> {
        self.tag(key)
    }

    fn only_value_of(&self, key: &str) -> Result<Option<&str>, ()> {
        if key.is_empty() {
            return only(
                self.tags()
                    .filter(|t| t.key == key)
                    .map(|t| t.value.unwrap_or("")),
            );
        }
        // The raw field is cut at its commas only (memchr), and each entry's start compared
        // with `key`: a key holds no `:`, so `key` then `:` or the entry's end is that key.
        // Splitting every tag at its `:` as well cost as much as the whole canonical tag
        // string of a line without rules.
        let mut found: Option<&str> = None;
        for entry in self.raw_tags().split(',') {
            let Some(rest) = entry.strip_prefix(key) else {
                continue;
            };
            let value = match rest.as_bytes().first() {
                None => "",
                Some(b':') => &rest[1..],
                Some(_) => continue,
            };
            match found {
                None => found = Some(value),
                Some(seen) if seen != value => return Err(()),
                Some(_) => {}
            }
        }
        Ok(found)
    }

    fn write_canonical(&self, out: &mut Vec<u8>) {
        self.write_canonical_tags(out);
    }

    fn visit<'s>(&'s self, f: &mut dyn FnMut(Tag<'s>)) {
        for tag in self.tags() {
            f(tag);
        }
    }

    fn write_canonical_kept(&self, keep: &dyn Fn(&str) -> bool, out: &mut Vec<u8>) {
        line::write_canonical_kept(self.tags(), keep, out);
    }

    fn any_key_starts(&self, first: &dyn Fn(u8) -> bool) -> bool {
        // A key starts the field and follows each `,` (an empty entry shows a `,` or
        // nothing, which no rule key starts with).
        let raw = self.raw_tags().as_bytes();
        raw.first().is_some_and(|&b| first(b))
            || memchr::memchr_iter(b',', raw).any(|i| raw.get(i + 1).is_some_and(|&b| first(b)))
    }
}

/// A parsed line with the tag index its parse recorded: the engine's per-packet path,
/// which builds the canonical tag string without splitting the tag field again.
pub(crate) struct IndexedLine<'l, 'a> {
    /// The line.
    pub(crate) line: &'l CounterLine<'a>,
    /// What [`line::parse_line_indexed`] recorded for it.
    pub(crate) spans: &'l line::TagSpans,
}

impl TagSet for IndexedLine<'_, '_> {
    fn value_of(&self, key: &str) -> Option<&str> {
        self.line.value_of(key)
    }

    fn only_value_of(&self, key: &str) -> Result<Option<&str>, ()> {
        self.line.only_value_of(key)
    }

    fn write_canonical(&self, out: &mut Vec<u8>) {
        self.line.write_canonical_tags_with(self.spans, out);
    }

    fn visit<'s>(&'s self, f: &mut dyn FnMut(Tag<'s>)) {
        self.line.visit(f);
    }

    fn any_key_starts(&self, first: &dyn Fn(u8) -> bool) -> bool {
        self.line.any_key_starts(first)
    }

    fn write_canonical_kept(&self, keep: &dyn Fn(&str) -> bool, out: &mut Vec<u8>) {
        if !self
            .spans
            .write_canonical_kept(self.line.raw_tags(), keep, out)
        {
            self.line.write_canonical_kept(keep, out);
        }
    }
}

/// A table that may be left unset (empty).
fn optional_table(name: &str, keyspace: &str) -> Option<TableName> {
    (!name.is_empty()).then(|| TableName::resolve(name, keyspace))
}

/// The one value of an iterator, `Err` if two differ.
fn only<'a>(mut values: impl Iterator<Item = &'a str>) -> Result<Option<&'a str>, ()> {
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.all(|v| v == first) {
        Ok(Some(first))
    } else {
        Err(())
    }
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

    /// Takes the routing of `next` (its exact names, `[[mapping]]` rules and tag rules)
    /// when its families are the ones in force, field for field; otherwise leaves the
    /// routing as it is and says, by name, what differs. A change of families goes
    /// through [`Families::reshape`] and [`Families::apply`] instead, so that the sink
    /// can check and prepare the new tables in between.
    pub fn replace_routing(&self, next: Families) -> Result<(), String> {
        let reshape = self.reshape(next)?;
        if let Some(change) = self.change_of(&reshape) {
            return Err(change);
        }
        self.apply(reshape)
    }

    /// The first family `reshape` adds, changes or removes, named as the configuration
    /// names it; `None` when it only routes.
    pub fn change_of(&self, reshape: &Reshape) -> Option<String> {
        Some(match (reshape.added.first(), reshape.retired.first()) {
            (Some(new), _) => match self.by_name(&new.name) {
                Some(old) => format!(
                    "family `{}`: {}",
                    old.name,
                    family_difference(old, new).unwrap_or_default()
                ),
                None => format!("the list of families (`{}` is new)", new.name),
            },
            (None, Some(&gone)) => {
                format!("the list of families (`{}` is gone)", self.get(gone).name)
            }
            (None, None) => return None,
        })
    }

    /// What taking `next`'s families live means: each family of `next` keeps the id of
    /// the family in force of its name when their definitions are the same, field for
    /// field, and is otherwise added with a new id (appended); a family in force that
    /// `next` lacks or defines otherwise is retired (its rows pending keep its id and its
    /// tables). Refused, naming the family, for what cannot change live: the generic
    /// family and `[exact]`, and the families that keep state of their own beyond their
    /// pending rows (`exact`, `mode = "writer_totals"`, an `epoch_column`), which may be
    /// neither added, removed nor changed. Nothing changes until [`Families::apply`].
    pub fn reshape(&self, next: Families) -> Result<Reshape, String> {
        if self.generic_enabled != next.generic_enabled {
            return Err("generic.enabled".into());
        }
        if let Some(field) = family_difference(self.get(GENERIC), next.get(GENERIC)) {
            return Err(format!("generic: {field}"));
        }
        if self.exact != next.exact {
            return Err("exact".into());
        }
        let stateful = |def: &FamilyDef| {
            (def.exact || def.mode == CountingMode::WriterTotals || def.epoch_column.is_some())
                .then(|| {
                    format!(
                        "family `{}`: a family with `exact`, `mode = \"writer_totals\"` or an `epoch_column` cannot be added, removed or changed live",
                        def.name
                    )
                })
        };
        let routing = self.routing.load();
        let first_new = self.defs.len();
        let next_defs: Vec<FamilyDef> = next.iter().cloned().collect();
        let mut ids = vec![GENERIC];
        let mut added: Vec<FamilyDef> = Vec::new();
        let mut kept = Vec::new();
        for new in next_defs.iter().skip(1) {
            let old = routing
                .by_name
                .get(new.name.as_str())
                .map(|&id| self.get(id));
            match old {
                Some(old) if family_difference(old, new).is_none() => {
                    ids.push(old.id);
                    kept.push(old.id);
                }
                _ => {
                    if let Some(refusal) = old.and_then(stateful).or_else(|| stateful(new)) {
                        return Err(refusal);
                    }
                    let id = u16::try_from(first_new + added.len())
                        .map(FamilyId)
                        .map_err(|_| {
                            "the list of families: no family id left; restart".to_owned()
                        })?;
                    ids.push(id);
                    added.push(FamilyDef { id, ..new.clone() });
                }
            }
        }
        let mut retired = Vec::new();
        for (_, &id) in routing.by_name.iter() {
            if id != GENERIC && !kept.contains(&id) {
                if let Some(refusal) = stateful(self.get(id)) {
                    return Err(refusal);
                }
                retired.push(id);
            }
        }
        retired.sort_unstable();
        Ok(Reshape {
            first_new,
            routing: Arc::try_unwrap(next.routing.into_inner())
                .map_err(|_| "the new routing is shared".to_owned())?
                .renumbered(&ids, first_new + added.len()),
            added,
            retired,
            ids,
        })
    }

    /// Takes `reshape` (from [`Families::reshape`] of these families, the last one taken
    /// since): appends the families it adds, then routes by its routing, so no increment
    /// is routed to a family before its definition is there. Refused, changing nothing,
    /// when families were added since `reshape` was made.
    pub fn apply(&self, reshape: Reshape) -> Result<(), String> {
        if self.defs.len() != reshape.first_new {
            return Err("the families changed since the reload was checked".into());
        }
        for def in reshape.added {
            self.defs
                .push(def)
                .map_err(|_| "the list of families: no family id left; restart".to_owned())?;
        }
        self.routing.store(Arc::new(reshape.routing));
        Ok(())
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
            // One source list per key column.
            let sources = routing.sources(family);
            for sources in sources {
                keys::push_from_tags(tags, sources, series)?;
            }
            routing.check_length(series, sources.len())?;
            return Ok(Target {
                family,
                column,
                width: routing
                    .widths
                    .get(usize::from(family.0))
                    .copied()
                    .unwrap_or(1),
            });
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
pub struct Router<'f> {
    families: &'f Families,
    routing: Arc<Routing>,
}

impl Router<'_> {
    /// [`Families::resolve`] by this routing.
    pub fn resolve<T: TagSet + ?Sized>(
        &self,
        name: &str,
        tags: &T,
        series: &mut Vec<u8>,
    ) -> Result<Target, Unplaced> {
        self.families.resolve_in(&self.routing, name, tags, series)
    }
}

/// What a live reload does to the families (see [`Families::reshape`]).
pub struct Reshape {
    /// The id the first added family takes: the number of definitions when checked.
    first_new: usize,
    /// Families added, with their new ids, in id order.
    added: Vec<FamilyDef>,
    /// Families in force now that the reload retires (removed, or replaced by an added
    /// definition of the same name).
    retired: Vec<FamilyId>,
    /// The new routing, naming families by the ids they have here.
    routing: Routing,
    /// The id here of each family of the new configuration, by its id there.
    ids: Vec<FamilyId>,
}

impl Reshape {
    /// The families added, with their ids.
    pub fn added(&self) -> &[FamilyDef] {
        &self.added
    }

    /// The families retired.
    pub fn retired(&self) -> &[FamilyId] {
        &self.retired
    }

    /// The id, once taken, of the family with id `next` in the new configuration (as
    /// its [`Families::from_config`] numbers them: its position in the file, plus one).
    pub fn id_of(&self, next: FamilyId) -> Option<FamilyId> {
        self.ids.get(usize::from(next.0)).copied()
    }

    /// Whether it changes no family.
    pub fn is_routing_only(&self) -> bool {
        self.added.is_empty() && self.retired.is_empty()
    }
}

impl Routing {
    /// The same routing with every family id `i` turned into `ids[i]`, for families
    /// numbered up to `len`.
    fn renumbered(mut self, ids: &[FamilyId], len: usize) -> Routing {
        let id = |family: FamilyId| ids.get(usize::from(family.0)).copied().unwrap_or(family);
        let mut key_sources = vec![Vec::new(); len];
        for (family, sources) in std::mem::take(&mut self.key_sources)
            .into_iter()
            .enumerate()
        {
            let to = u16::try_from(family).map_or(family, |f| usize::from(id(FamilyId(f)).0));
            if let Some(slot) = key_sources.get_mut(to) {
                *slot = sources;
            }
        }
        self.key_sources = key_sources;
        let mut widths = vec![0; len];
        for (family, width) in std::mem::take(&mut self.widths).into_iter().enumerate() {
            let to = u16::try_from(family).map_or(family, |f| usize::from(id(FamilyId(f)).0));
            if let Some(slot) = widths.get_mut(to) {
                *slot = width;
            }
        }
        self.widths = widths;
        for family in self.by_name.values_mut() {
            *family = id(*family);
        }
        for (family, _) in self.by_metric.values_mut() {
            *family = id(*family);
        }
        if let Some(mapped) = &mut self.mapped {
            mapped.renumber(&id);
        }
        self
    }

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

/// The first field in which two definitions of one family differ, as the configuration
/// names it.
fn family_difference(old: &FamilyDef, new: &FamilyDef) -> Option<String> {
    let changed = |differs: bool, field: &str| differs.then(|| field.to_owned());
    changed(old.name != new.name, "name (the families' order or names)")
        .or_else(|| changed(old.minute_table != new.minute_table, "minute_table"))
        .or_else(|| changed(old.day_table != new.day_table, "day_table"))
        .or_else(|| changed(old.hour_table != new.hour_table, "hour_table"))
        .or_else(|| changed(old.total_table != new.total_table, "total_table"))
        .or_else(|| changed(old.minute_time != new.minute_time, "minute_time"))
        .or_else(|| changed(old.day_time != new.day_time, "day_time"))
        .or_else(|| changed(old.key_columns != new.key_columns, "key"))
        .or_else(|| {
            (old.columns != new.columns).then(|| {
                format!(
                    "its counter columns (from `columns` and the `[[mapping]]` rules: {:?}, now {:?})",
                    old.columns, new.columns
                )
            })
        })
        .or_else(|| changed(old.sharding != new.sharding, "shards"))
        .or_else(|| changed(old.epoch_column != new.epoch_column, "epoch_column"))
        .or_else(|| changed(old.exact != new.exact, "exact"))
        .or_else(|| changed(old.mode != new.mode, "mode"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FamilyConfig;

    fn config() -> Config {
        let mut c = Config::default();
        c.families.push(FamilyConfig {
            name: "views".into(),
            minute_table: "views_by_minute".into(),
            day_table: "metrics.views_by_day".into(),
            key: vec!["page_id".into()],
            columns: [
                ("page.views".to_string(), "views".to_string()),
                ("page.bytes".to_string(), "bytes".to_string()),
                ("page.views.mobile".to_string(), "views".to_string()),
            ]
            .into(),
            ..FamilyConfig::default()
        });
        c
    }

    fn fields(series: &[u8]) -> Vec<&str> {
        series::fields(series).collect()
    }

    #[test]
    fn generic_keys_use_canonical_tags() {
        let families = Families::from_config(&config()).unwrap();
        let mut series = Vec::new();
        let tags: &[(&str, &str)] = &[
            ("env", "prod"),
            ("az", "b"),
            ("env", "prod"),
            ("canary", ""),
        ];
        let target = families.resolve("req.count", tags, &mut series).unwrap();
        assert_eq!(
            target,
            Target {
                family: GENERIC,
                column: 0,
                width: 1
            }
        );
        assert_eq!(fields(&series), ["req.count", "az:b,canary,env:prod"]);
        let no_tags: &[(&str, &str)] = &[];
        families.resolve("req.count", no_tags, &mut series).unwrap();
        assert_eq!(fields(&series), ["req.count", ""]);
    }

    #[test]
    fn configured_metrics_map_to_columns_and_take_key_tags() {
        let families = Families::from_config(&config()).unwrap();
        let def = families.by_name("views").unwrap();
        assert_eq!(
            def.columns,
            ["bytes", "views"],
            "columns in metric-name order, shared ones once"
        );
        assert_eq!(def.table_text(Granularity::Day), "metrics.views_by_day");
        assert_eq!(
            def.table_text(Granularity::Minute),
            "countersink.views_by_minute"
        );
        let mut series = Vec::new();
        let tags: &[(&str, &str)] = &[("env", "prod"), ("page_id", "p1")];
        let views = families.resolve("page.views", tags, &mut series).unwrap();
        assert_eq!(fields(&series), ["p1"]);
        let mobile = families
            .resolve("page.views.mobile", tags, &mut series)
            .unwrap();
        let bytes = families.resolve("page.bytes", tags, &mut series).unwrap();
        assert_eq!(
            (views.column, mobile.column, bytes.column, views.width),
            (1, 1, 0, 2)
        );
        let missing: &[(&str, &str)] = &[("env", "prod")];
        assert_eq!(
            families.resolve("page.views", missing, &mut series),
            Err(Unplaced::MissingKeyTag)
        );
    }

    #[test]
    fn empty_or_ambiguous_key_tags_are_refused() {
        let families = Families::from_config(&config()).unwrap();
        let mut series = Vec::new();
        let empty: &[(&str, &str)] = &[("page_id", "")];
        assert_eq!(
            families.resolve("page.views", empty, &mut series),
            Err(Unplaced::MissingKeyTag)
        );
        let twice: &[(&str, &str)] = &[("page_id", "a"), ("page_id", "b")];
        assert_eq!(
            families.resolve("page.views", twice, &mut series),
            Err(Unplaced::AmbiguousKeyTag)
        );
        let repeated: &[(&str, &str)] = &[("page_id", "a"), ("page_id", "a")];
        assert!(
            families
                .resolve("page.views", repeated, &mut series)
                .is_ok()
        );
        assert_eq!(
            families.encode_key(FamilyId(1), &[""], &mut series),
            Err(Unplaced::MissingKeyTag)
        );
    }

    #[test]
    fn key_length_limit_and_disabled_generic() {
        let mut c = config();
        c.limits.max_key_bytes = 16;
        c.generic.enabled = false;
        let families = Families::from_config(&c).unwrap();
        let mut series = Vec::new();
        let long: &[(&str, &str)] = &[("page_id", "p-0123456789abcdef")];
        assert_eq!(
            families.resolve("page.views", long, &mut series),
            Err(Unplaced::KeyTooLong)
        );
        let short: &[(&str, &str)] = &[("page_id", "p-0123456789abcd")];
        assert!(families.resolve("page.views", short, &mut series).is_ok());
        assert_eq!(
            families.resolve("other", short, &mut series),
            Err(Unplaced::Unconfigured)
        );
    }

    /// Each flush moves a writer to the next shard; writers start apart; unsharded
    /// families have no shard.
    #[test]
    fn shards_rotate_per_flush_from_a_seed_per_writer() {
        let mut c = config();
        c.families[0].shards = 4;
        let families = Families::from_config(&c).unwrap();
        let views = families.by_name("views").unwrap().id;
        let seed = shard_seed("web-1");
        let shards: Vec<Option<u8>> = (1..=5)
            .map(|seq| families.shard_of(views, seed, seq))
            .collect();
        let first = shards[0].unwrap();
        assert_eq!(
            shards,
            (0..5).map(|i| Some((first + i) % 4)).collect::<Vec<_>>()
        );
        assert_ne!(shard_seed("web-1"), shard_seed("web-2"));
        assert_eq!(families.shard_of(GENERIC, seed, 1), None);
    }

    #[test]
    fn many_tags_fall_back_to_the_heap_with_the_same_result() {
        let pairs: Vec<(String, String)> = (0..40)
            .rev()
            .map(|i| (format!("k{i:02}"), format!("v{i}")))
            .collect();
        let tags: Vec<(&str, &str)> = pairs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let mut out = Vec::new();
        tags.as_slice().write_canonical(&mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("k00:v0,k01:v1,"), "{text}");
        assert_eq!(text.matches(',').count(), 39);
    }

    proptest::proptest! {
        /// The in-process API's canonical tag string is the sorted, de-duplicated set of
        /// its tags, whatever their order and repetition, at every size.
        #[test]
        fn slice_tags_canonicalise_like_a_sorted_set(
            pairs in proptest::collection::vec(("[a-c:é]{1,3}", "[a-c,]{0,2}"), 0..24),
        ) {
            let tags: Vec<(&str, &str)> =
                pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let mut out = Vec::new();
            tags.as_slice().write_canonical(&mut out);
            let set: std::collections::BTreeSet<Tag<'_>> =
                tags.iter().map(|&(key, value)| tag(key, value)).collect();
            let mut reference = Vec::new();
            for (i, t) in set.iter().enumerate() {
                if i > 0 {
                    reference.push(b',');
                }
                t.write_to(&mut reference);
            }
            proptest::prop_assert_eq!(out, reference);
        }
    }

    /// `config()` with a second family, `clicks`, and a rule sending `api.*.views` to
    /// `views`.
    fn two() -> Config {
        let mut c = config();
        c.families.push(FamilyConfig {
            name: "clicks".into(),
            minute_table: "clicks_by_minute".into(),
            day_table: "clicks_by_day".into(),
            key: vec!["page_id".into()],
            columns: [("page.clicks".to_string(), "clicks".to_string())].into(),
            ..FamilyConfig::default()
        });
        c.mappings.push(crate::config::MappingConfig {
            pattern: "api.*.views".into(),
            family: "views".into(),
            column: "views".into(),
            key: [("page_id".to_string(), "$1".to_string())].into(),
            ..Default::default()
        });
        c
    }

    fn place(f: &Families, name: &str) -> Option<FamilyId> {
        let mut series = Vec::new();
        f.resolve(name, &[("page_id", "p1")][..], &mut series)
            .ok()
            .map(|t| t.family)
    }

    #[test]
    fn a_reload_appends_changed_and_new_families_and_retires_the_old() {
        let f = Families::from_config(&two()).unwrap();
        let (views, clicks) = (FamilyId(1), FamilyId(2));
        // `views` moves to another table, `clicks` goes, `likes` comes, listed first.
        let mut next = two();
        next.families[0].minute_table = "views_by_minute_v2".into();
        next.families.pop();
        next.families.insert(
            0,
            FamilyConfig {
                name: "likes".into(),
                minute_table: "likes_by_minute".into(),
                day_table: "likes_by_day".into(),
                key: vec!["page_id".into()],
                columns: [("page.likes".to_string(), "likes".to_string())].into(),
                ..FamilyConfig::default()
            },
        );
        let reshape = f.reshape(Families::from_config(&next).unwrap()).unwrap();
        let added: Vec<(u16, &str)> = reshape
            .added()
            .iter()
            .map(|d| (d.id.0, d.name.as_str()))
            .collect();
        assert_eq!(added, [(3, "likes"), (4, "views")]);
        assert_eq!(reshape.retired(), [views, clicks]);
        assert_eq!(reshape.id_of(FamilyId(1)), Some(FamilyId(3)));
        assert_eq!(reshape.id_of(FamilyId(2)), Some(FamilyId(4)));
        assert_eq!(
            f.change_of(&reshape).unwrap(),
            "the list of families (`likes` is new)"
        );
        // Nothing changed before it is applied.
        assert_eq!(place(&f, "api.home.views"), Some(views));
        assert_eq!(f.len(), 3);

        f.apply(reshape).unwrap();
        assert_eq!(f.len(), 5);
        assert_eq!(place(&f, "api.home.views"), Some(FamilyId(4)));
        assert_eq!(place(&f, "page.views"), Some(FamilyId(4)));
        assert_eq!(place(&f, "page.likes"), Some(FamilyId(3)));
        // A name of the family that went falls to the generic family.
        assert_eq!(place(&f, "page.clicks"), Some(GENERIC));
        // The old definitions stay, for rows placed under them.
        assert_eq!(
            f.get(views).minute_table.as_ref().unwrap().table,
            "views_by_minute"
        );
        assert_eq!(
            f.get(FamilyId(4)).minute_table.as_ref().unwrap().table,
            "views_by_minute_v2"
        );
        assert_eq!(f.by_name("views").unwrap().id, FamilyId(4));
        assert!(f.by_name("clicks").is_none());
        assert!(!f.in_force(views) && !f.in_force(clicks));
        assert!(f.in_force(FamilyId(4)) && f.in_force(GENERIC));

        // The same file again changes nothing; a reordered one neither.
        next.families.reverse();
        let again = f.reshape(Families::from_config(&next).unwrap()).unwrap();
        assert!(again.is_routing_only());
        assert_eq!(f.change_of(&again), None);
        f.apply(again).unwrap();
        assert_eq!(place(&f, "page.likes"), Some(FamilyId(3)));
        assert_eq!(place(&f, "api.home.views"), Some(FamilyId(4)));
    }

    #[test]
    fn families_with_state_of_their_own_do_not_change_live() {
        let f = Families::from_config(&two()).unwrap();
        let mut next = two();
        next.families[1].exact = true;
        let refused = f.reshape(Families::from_config(&next).unwrap());
        assert!(refused.is_err());
        let mut next = two();
        next.families[1].minute_table = "elsewhere".into();
        next.families[1].mode = CountingMode::WriterTotals;
        let refused = f
            .reshape(Families::from_config(&next).unwrap())
            .err()
            .unwrap();
        assert!(
            refused.contains("family `clicks`: a family with `exact`"),
            "{refused}"
        );
        let mut next = two();
        next.generic.minute_table = "elsewhere".into();
        let refused = f
            .reshape(Families::from_config(&next).unwrap())
            .err()
            .unwrap();
        assert_eq!(refused, "generic: minute_table");
        // A refused reshape changed nothing.
        assert_eq!(f.len(), 3);
        assert_eq!(place(&f, "page.clicks"), Some(FamilyId(2)));
    }
}
