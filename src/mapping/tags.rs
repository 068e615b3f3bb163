//! Tag rules: renames, deny and allow lists of tag keys.
//!
//! A tag's key is renamed first (one step: `rename = { pid = "page_id" }`), and the deny
//! and allow lists then judge the key as renamed, which is the name the tables see. So a
//! denied key can be kept under another name by renaming it, and an allow list names the
//! keys as they are stored. A list entry is a key, or a prefix ending in `*`
//! (`"dd.internal.*"`).

use std::collections::{HashMap, HashSet};

/// The tag keys denied unless `tags.deny_default = false`: the per-process tags that
/// DogStatsD clients add to every line on their own.
///
/// What the clients add, read in their sources (datadog-go v5.9 `statsd/statsdex.go`
/// `ddEnvTagsMapping` and `statsd/format.go`; datadogpy `datadog/dogstatsd/base.py`
/// `DD_ENV_TAGS_MAPPING`; java-dogstatsd-client `NonBlockingStatsDClient` `Literal` and
/// `updateTagsWithEntityID`; hot-shots `lib/statsd.js` `DD_ENV_GLOBAL_TAGS_MAPPING`), and
/// seen on the wire from datadogpy 0.56 and datadog-go 5.9 (docs/src/guide/clients.md):
///
/// - `DD_ENTITY_ID` becomes the tag `dd.internal.entity_id:<value>`. The Datadog admission
///   controller and the documented downward-API set-up give it the **pod UID**: one value
///   per pod, so it is per process, and it is meant for the Datadog Agent (which swaps it
///   for container tags), never as a dimension. Denied here, with every other
///   `dd.internal.*` key (the Agent's internal keys, such as `dd.internal.card`).
/// - `DD_ENV`, `DD_SERVICE` and `DD_VERSION` become `env:`, `service:` and `version:`.
///   They are the same for every pod of a deployment (unified service tagging sets them
///   per workload, not per pod), so they do not split one pod's rows from another's;
///   `version` changes with each release, which is usually wanted. **Kept**; deny them
///   with `tags.deny` if a release should not start new rows.
/// - The container id (origin detection), the external environment (`DD_EXTERNAL_ENV`)
///   and the cardinality are sent as the fields `|c:`, `|e:` and `|card:`, not as tags:
///   the parser skips fields it does not know, so they never reach the series key.
/// - `host` is added by the Agent, not by the clients.
/// - datadogpy also appends the tags listed in `DATADOG_TAGS`: the user's own, kept.
pub const DEFAULT_DENY: &[&str] = &["dd.internal.*"];

/// A deny or allow list entry: a whole key, or a prefix (written with a trailing `*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyPattern {
    /// Exactly this key.
    Exact(Box<str>),
    /// Every key that starts with this (`""`: every key).
    Prefix(Box<str>),
}

impl KeyPattern {
    /// Parses `key` or `prefix*`; the error says what is wrong.
    pub fn parse(text: &str) -> Result<KeyPattern, String> {
        match text.strip_suffix('*') {
            Some(prefix) => {
                if prefix.contains('*') {
                    return Err(format!("`{text}`: `*` may only end an entry"));
                }
                if !prefix.is_empty() {
                    check_key_text(prefix).map_err(|e| format!("`{text}`: {e}"))?;
                }
                Ok(KeyPattern::Prefix(prefix.into()))
            }
            None => {
                check_tag_key(text)?;
                Ok(KeyPattern::Exact(text.into()))
            }
        }
    }

    /// Whether `key` is one this entry names.
    pub fn matches(&self, key: &str) -> bool {
        match self {
            KeyPattern::Exact(exact) => **exact == *key,
            KeyPattern::Prefix(prefix) => key.starts_with(&**prefix),
        }
    }
}

/// Checks a tag key as the rules name it: what the line grammar allows in a key, and no
/// `*`.
pub fn check_tag_key(key: &str) -> Result<(), String> {
    check_key_text(key).map_err(|e| format!("`{key}`: {e}"))?;
    if key.contains('*') {
        return Err(format!("`{key}`: a `*` only ends a deny or allow entry"));
    }
    Ok(())
}

fn check_key_text(key: &str) -> Result<(), &'static str> {
    if key.is_empty() {
        Err("is empty")
    } else if key.contains([':', ',', '|', '#']) || key.chars().any(char::is_control) {
        Err("a tag key holds no `:`, `,`, `|`, `#` or control characters")
    } else {
        Ok(())
    }
}

type Hasher = foldhash::fast::RandomState;

/// A set of keys given by [`KeyPattern`]s.
#[derive(Clone, Debug, Default)]
struct KeySet {
    exact: HashSet<Box<str>, Hasher>,
    /// Bit `n` is set when an exact key is `n` bytes long (bit 63: 63 or more), so that
    /// most keys are answered without hashing them.
    exact_lengths: u64,
    prefixes: Vec<Box<str>>,
}

/// The bit of [`KeySet::exact_lengths`] and [`TagRules::rename_lengths`] for a key of
/// `len` bytes.
#[inline]
fn length_bit(len: usize) -> u64 {
    1 << len.min(63)
}

impl KeySet {
    fn insert(&mut self, pattern: KeyPattern) {
        match pattern {
            KeyPattern::Exact(key) => {
                self.exact_lengths |= length_bit(key.len());
                self.exact.insert(key);
            }
            KeyPattern::Prefix(prefix) => self.prefixes.push(prefix),
        }
    }

    fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.prefixes.is_empty()
    }

    fn contains(&self, key: &str) -> bool {
        self.prefixes.iter().any(|p| key.starts_with(&**p))
            || (self.exact_lengths & length_bit(key.len()) != 0 && self.exact.contains(key))
    }
}

/// Compiled tag rules: a rename map, one deny list, and allow lists a key must pass each
/// of (the global one and the family's).
#[derive(Clone, Debug, Default)]
pub struct TagRules {
    rename: HashMap<Box<str>, Box<str>, Hasher>,
    /// The lengths of the renamed keys, as [`KeySet::exact_lengths`].
    rename_lengths: u64,
    deny: KeySet,
    allow: Vec<KeySet>,
    /// Bit `b` is set when a key starting with byte `b` may be renamed or dropped: most
    /// keys are let through on one bit test.
    first_bytes: [u64; 4],
    /// Bit `b` is set when a key starting with byte `b` may be renamed: a line without
    /// such a key is only filtered, so its tags keep their canonical order.
    rename_first_bytes: [u64; 4],
}

impl TagRules {
    /// Compiles rules. `rename` pairs are (key as sent, key as stored); `deny` and each of
    /// `allow` are lists of [`KeyPattern`]s (an empty allow list allows every key).
    pub fn new<'a>(
        rename: impl IntoIterator<Item = (&'a str, &'a str)>,
        deny: impl IntoIterator<Item = &'a str>,
        allow: impl IntoIterator<Item = Vec<&'a str>>,
    ) -> Result<TagRules, String> {
        let mut rules = TagRules::default();
        for (from, to) in rename {
            check_tag_key(from)?;
            check_tag_key(to)?;
            rules.mark(from);
            if let Some(&b) = from.as_bytes().first() {
                rules.rename_first_bytes[usize::from(b >> 6)] |= 1 << (b & 63);
            }
            rules.rename_lengths |= length_bit(from.len());
            rules.rename.insert(from.into(), to.into());
        }
        for entry in deny {
            let pattern = KeyPattern::parse(entry)?;
            match &pattern {
                KeyPattern::Exact(key) | KeyPattern::Prefix(key) => rules.mark(key),
            }
            rules.deny.insert(pattern);
        }
        for list in allow {
            let mut set = KeySet::default();
            for entry in list {
                set.insert(KeyPattern::parse(entry)?);
            }
            if !set.is_empty() {
                // Every key must be looked up.
                rules.first_bytes = [u64::MAX; 4];
                rules.allow.push(set);
            }
        }
        Ok(rules)
    }

    /// Notes that keys starting like `key` may be touched (every key, for `""`).
    fn mark(&mut self, key: &str) {
        match key.as_bytes().first() {
            Some(&b) => self.first_bytes[usize::from(b >> 6)] |= 1 << (b & 63),
            None => self.first_bytes = [u64::MAX; 4],
        }
    }

    /// Whether there are no rules at all.
    pub fn is_empty(&self) -> bool {
        self.rename.is_empty() && self.deny.is_empty() && self.allow.is_empty()
    }

    /// Whether a rule might rename or drop `key`. `false` means [`TagRules::apply`]
    /// returns `key` unchanged; the check is one bit test.
    #[inline]
    pub fn touches(&self, key: &str) -> bool {
        key.as_bytes()
            .first()
            .is_some_and(|&b| self.touches_first_byte(b))
    }

    /// Whether a rule might rename or drop a key that starts with byte `b`.
    #[inline]
    pub fn touches_first_byte(&self, b: u8) -> bool {
        self.first_bytes[usize::from(b >> 6)] & (1 << (b & 63)) != 0
    }

    /// Whether a rule might rename a key that starts with byte `b`. A line with no such
    /// key only loses the tags [`TagRules::keeps`] refuses.
    #[inline]
    pub fn may_rename_first_byte(&self, b: u8) -> bool {
        self.rename_first_bytes[usize::from(b >> 6)] & (1 << (b & 63)) != 0
    }

    /// The key a tag is stored under, or `None` when the rules drop it.
    pub fn apply<'s>(&'s self, key: &'s str) -> Option<&'s str> {
        let stored = if self.rename_lengths & length_bit(key.len()) == 0 {
            key
        } else {
            self.rename.get(key).map_or(key, |to| &**to)
        };
        self.keeps(stored).then_some(stored)
    }

    /// Whether a key, as stored (after renaming), passes the deny and allow lists.
    pub fn keeps(&self, stored: &str) -> bool {
        !self.deny.contains(stored) && self.allow.iter().all(|set| set.contains(stored))
    }

    /// The keys as sent that are stored as `stored`: `stored` itself unless it is renamed
    /// away, and every key renamed to it. Sorted, so routing is the same on every start.
    pub fn sources_of(&self, stored: &str) -> Vec<Box<str>> {
        let mut sources: Vec<Box<str>> = self
            .rename
            .iter()
            .filter(|(_, to)| ***to == *stored)
            .map(|(from, _)| from.clone())
            .collect();
        if !self.rename.contains_key(stored) {
            sources.push(stored.into());
        }
        sources.sort();
        sources
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(rename: &[(&str, &str)], deny: &[&str], allow: &[&[&str]]) -> TagRules {
        TagRules::new(
            rename.iter().copied(),
            deny.iter().copied(),
            allow.iter().map(|l| l.to_vec()),
        )
        .unwrap()
    }

    #[test]
    fn the_default_deny_list_drops_the_agents_internal_keys_only() {
        let r = rules(&[], DEFAULT_DENY, &[]);
        assert_eq!(r.apply("dd.internal.entity_id"), None);
        assert_eq!(r.apply("dd.internal.card"), None);
        for kept in ["env", "service", "version", "host", "dd.env", "page_id"] {
            assert_eq!(r.apply(kept), Some(kept));
        }
        assert!(r.touches("dd.internal.entity_id"));
        assert!(!r.touches("env"), "one bit test lets most keys through");
    }

    #[test]
    fn renames_come_first_and_the_lists_judge_the_stored_key() {
        let r = rules(
            &[("pid", "page_id"), ("dd.internal.entity_id", "pod")],
            &["dd.internal.*", "page_id"],
            &[],
        );
        assert_eq!(r.apply("pid"), None, "renamed, then denied");
        assert_eq!(
            r.apply("dd.internal.entity_id"),
            Some("pod"),
            "renamed: kept"
        );
        let r = rules(
            &[("pid", "page_id")],
            &[],
            &[&["page_id", "env*"], &["page_id"]],
        );
        assert_eq!(r.apply("pid"), Some("page_id"));
        assert_eq!(r.apply("env"), None, "each allow list must pass");
        assert_eq!(r.apply("region"), None);
        assert!(r.touches("zz"), "allow lists look at every key");
    }

    #[test]
    fn sources_of_a_stored_key() {
        let r = rules(
            &[("pid", "page_id"), ("p", "page_id"), ("x", "y")],
            &[],
            &[],
        );
        assert_eq!(
            r.sources_of("page_id"),
            ["p".into(), "page_id".into(), "pid".into()]
        );
        let r = rules(&[("page_id", "page")], &[], &[]);
        assert!(r.sources_of("page_id").is_empty(), "renamed away");
    }

    #[test]
    fn bad_entries_are_refused() {
        for bad in ["", "a:b", "a,b", "a*b", "**"] {
            assert!(KeyPattern::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(KeyPattern::parse("*"), Ok(KeyPattern::Prefix("".into())));
        assert!(TagRules::new([("a", "b*")], [], []).is_err());
        let all = rules(&[], &["*"], &[]);
        assert_eq!(all.apply("anything"), None);
    }
}
