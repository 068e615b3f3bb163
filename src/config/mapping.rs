//! `[[mapping]]` rules (dotted names to families, statsd_exporter style) and `[tags]` /
//! `[family.tags]` rules, with the checks that name the offending rule.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::mapping::{DEFAULT_DENY, MatchType, Pattern, TagRules, Template};

use super::validate::{bucket_columns, check_identifier};
use super::{Config, ConfigError, FamilyConfig};

/// `[[mapping]]`: names matching a pattern go to a configured family's counter column,
/// with key columns filled from the pattern's captures (and from tags). Rules are tried in
/// file order and the first match wins; a name listed in a family's `columns` never
/// reaches them.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct MappingConfig {
    /// The pattern over the dotted name (`"api.*.requests"`). Required.
    #[serde(rename = "match")]
    pub pattern: String,
    /// `"glob"` (a `*` matches one non-empty dot-separated component, or part of one, and
    /// captures it) or `"regex"` (the whole name; groups capture). Default `"glob"`.
    pub match_type: MatchType,
    /// The `[[family]]` the matching names go to. Required.
    pub family: String,
    /// The family's counter column they add to (a new one is added to the family's
    /// columns). Required.
    pub column: String,
    /// Key column → template of captures and text (`{ endpoint = "$1" }`). Key columns
    /// not listed are filled from the tag of the same name, as for `columns`. Every
    /// capture must be used, so that two names that differ are never summed silently.
    /// Default empty.
    pub key: BTreeMap<String, String>,
}

/// `[tags]`: tag rules for every family. For the generic family they decide its
/// canonical tag string; for a configured family, which tag fills a key column.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TagsConfig {
    /// Deny the per-process tags DogStatsD clients add on their own
    /// ([`DEFAULT_DENY`]: `dd.internal.*`, the pod UID of `DD_ENTITY_ID`). Default `true`.
    pub deny_default: bool,
    /// Tag keys dropped (as stored, after `rename`); an entry ending in `*` is a prefix.
    /// Default empty.
    pub deny: Vec<String>,
    /// When not empty, only these keys are kept (as stored; `*` ends a prefix). Default
    /// empty: every key not denied is kept.
    pub allow: Vec<String>,
    /// Key as sent → key as stored (`{ pid = "page_id" }`). Default empty.
    pub rename: BTreeMap<String, String>,
}

impl Default for TagsConfig {
    fn default() -> Self {
        TagsConfig {
            deny_default: true,
            deny: Vec::new(),
            allow: Vec::new(),
            rename: BTreeMap::new(),
        }
    }
}

/// `[family.tags]`: tag rules of one family, on top of `[tags]`: its renames override the
/// global ones for the same key, its deny list adds to the global one, and a key must
/// pass both allow lists.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct FamilyTagsConfig {
    /// Tag keys dropped for this family. Default empty.
    pub deny: Vec<String>,
    /// When not empty, only these keys are kept for this family. Default empty.
    pub allow: Vec<String>,
    /// Key as sent → key as stored, for this family. Default empty.
    pub rename: BTreeMap<String, String>,
}

impl Config {
    /// The compiled tag rules of the generic family (`None`) or of `family[i]`.
    pub fn tag_rules(&self, family: Option<usize>) -> Result<TagRules, ConfigError> {
        let global = &self.tags;
        let local = family.and_then(|i| self.families.get(i)).map(|f| &f.tags);
        let field = match family {
            Some(i) => format!("family[{i}].tags"),
            None => "tags".to_owned(),
        };
        let mut rename: BTreeMap<&str, &str> = global
            .rename
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        let defaults = DEFAULT_DENY.iter().copied().filter(|_| global.deny_default);
        let mut deny: Vec<&str> = defaults
            .chain(global.deny.iter().map(String::as_str))
            .collect();
        let mut allow = vec![global.allow.iter().map(String::as_str).collect()];
        if let Some(local) = local {
            rename.extend(local.rename.iter().map(|(a, b)| (a.as_str(), b.as_str())));
            deny.extend(local.deny.iter().map(String::as_str));
            allow.push(local.allow.iter().map(String::as_str).collect());
        }
        TagRules::new(rename, deny, allow).map_err(|problem| ConfigError::invalid(field, problem))
    }

    /// Checks `[tags]`, every `[family.tags]` and every `[[mapping]]`.
    pub(super) fn validate_mappings(&self) -> Result<(), ConfigError> {
        // Each list on its own first, so that an error names the list it is in.
        check_tag_lists("tags", &self.tags.deny, &self.tags.allow, &self.tags.rename)?;
        self.tag_rules(None)?;
        for (i, family) in self.families.iter().enumerate() {
            let t = &family.tags;
            check_tag_lists(&format!("family[{i}].tags"), &t.deny, &t.allow, &t.rename)?;
            let rules = self.tag_rules(Some(i))?;
            for (k, column) in family.key.iter().enumerate() {
                if !rules.keeps(column) || rules.sources_of(column).is_empty() {
                    return Err(ConfigError::invalid(
                        format!("family[{i}].key[{k}]"),
                        format!(
                            "key column `{column}` could never be filled: the tag rules (`tags`, `family[{i}].tags`, or the default deny list) drop or rename away its tag"
                        ),
                    ));
                }
            }
        }
        let mut compiled: Vec<Pattern> = Vec::with_capacity(self.mappings.len());
        for (i, rule) in self.mappings.iter().enumerate() {
            let pattern = self.validate_mapping(i, rule)?;
            for (j, earlier) in compiled.iter().enumerate() {
                let before = &self.mappings[j];
                let same = before.match_type == rule.match_type && before.pattern == rule.pattern;
                if same || earlier.covers(&pattern) {
                    return Err(ConfigError::invalid(
                        format!("mapping[{i}].match"),
                        format!(
                            "rule {i} (`{}`) is shadowed by rule {j} (`{}`), which matches every name it matches first: it would never apply",
                            rule.pattern, before.pattern
                        ),
                    ));
                }
            }
            compiled.push(pattern);
        }
        Ok(())
    }

    /// Checks one rule, and returns its compiled pattern.
    fn validate_mapping(&self, i: usize, rule: &MappingConfig) -> Result<Pattern, ConfigError> {
        let named = |problem: String| format!("rule {i} (`{}`): {problem}", rule.pattern);
        let pattern = Pattern::compile(&rule.pattern, rule.match_type).map_err(|problem| {
            ConfigError::invalid(
                format!("mapping[{i}].match"),
                named(format!("the {} {problem}", rule.match_type.as_str())),
            )
        })?;
        let Some(family) = self.families.iter().find(|f| f.name == rule.family) else {
            let known: Vec<&str> = self.families.iter().map(|f| f.name.as_str()).collect();
            return Err(ConfigError::invalid(
                format!("mapping[{i}].family"),
                named(format!(
                    "family `{}` is not defined (configured families: {known:?})",
                    rule.family
                )),
            ));
        };
        check_counter_column(family, &rule.column).map_err(|problem| {
            ConfigError::invalid(format!("mapping[{i}].column"), named(problem))
        })?;
        let captures = pattern.captures();
        let mut used = HashSet::new();
        for (column, text) in &rule.key {
            let field = format!("mapping[{i}].key.{column}");
            if !family.key.contains(column) {
                return Err(ConfigError::invalid(
                    field,
                    named(format!(
                        "`{column}` is not a key column of family `{}` (its key: {:?})",
                        family.name, family.key
                    )),
                ));
            }
            let template = Template::parse(text)
                .map_err(|problem| ConfigError::invalid(&field, named(problem)))?;
            for index in template.captures() {
                if index > captures {
                    return Err(ConfigError::invalid(
                        field,
                        named(format!(
                            "`{text}` refers to capture {index}, but the pattern has {captures}"
                        )),
                    ));
                }
                used.insert(index);
            }
        }
        if let Some(unused) = (1..=captures).find(|c| !used.contains(c)) {
            return Err(ConfigError::invalid(
                format!("mapping[{i}].key"),
                named(format!(
                    "the pattern has {captures} captures but ${unused} fills no key column: names that differ only there would be summed into one row (use it in `key`, or match that part without capturing it in a regex)"
                )),
            ));
        }
        Ok(pattern)
    }
}

/// Checks the entries of one set of tag lists, naming the entry at fault.
fn check_tag_lists(
    at: &str,
    deny: &[String],
    allow: &[String],
    rename: &BTreeMap<String, String>,
) -> Result<(), ConfigError> {
    for (list, entries) in [("deny", deny), ("allow", allow)] {
        for (n, entry) in entries.iter().enumerate() {
            crate::mapping::KeyPattern::parse(entry)
                .map_err(|problem| ConfigError::invalid(format!("{at}.{list}[{n}]"), problem))?;
        }
    }
    for (from, to) in rename {
        for key in [from, to] {
            crate::mapping::tags::check_tag_key(key).map_err(|problem| {
                ConfigError::invalid(format!("{at}.rename.\"{from}\""), problem)
            })?;
        }
    }
    Ok(())
}

/// Whether `column` can be a counter column of `family`: a plain identifier that is not
/// one of its key, bucket, shard, epoch or writer columns.
fn check_counter_column(family: &FamilyConfig, column: &str) -> Result<(), String> {
    check_identifier("column", column).map_err(|e| match e {
        ConfigError::Invalid { problem, .. } => problem,
        other => other.to_string(),
    })?;
    let reserved = family.key.iter().any(|k| k == column)
        || bucket_columns(family).iter().any(|c| c == column)
        || (family.shards > 1 && family.shard_column == column)
        || family.epoch_column.as_deref() == Some(column)
        || family.mode.own_column() == Some(column);
    if reserved {
        return Err(format!(
            "`{column}` is a key, bucket, shard, epoch or writer column of family `{}`, not a counter column",
            family.name
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(rules: &str) -> Config {
        Config::from_toml(&format!(
            "[[family]]\nname = \"api\"\nminute_table = \"api_m\"\nday_table = \"api_d\"\nkey = [\"endpoint\", \"status\"]\n[family.columns]\n\"api.total\" = \"requests\"\n{rules}"
        ))
        .unwrap()
    }

    fn error(rules: &str) -> (String, String) {
        match config(rules).validate() {
            Err(ConfigError::Invalid { field, problem }) => (field, problem),
            other => panic!("expected an invalid field for {rules}, got {other:?}"),
        }
    }

    #[test]
    fn good_rules_validate() {
        config(
            "[[mapping]]\nmatch = \"api.*.requests\"\nfamily = \"api\"\ncolumn = \"requests\"\nkey = { endpoint = \"$1\" }\n[[mapping]]\nmatch = 'api\\.([^.]+)\\.(\\d+)\\.errors'\nmatch_type = \"regex\"\nfamily = \"api\"\ncolumn = \"errors\"\nkey = { endpoint = \"$1\", status = \"s${2}\" }\n",
        )
        .validate()
        .unwrap();
    }

    #[test]
    fn each_bad_rule_is_named_with_its_index_and_pattern() {
        let rule = |m: &str, extra: &str| {
            format!(
                "[[mapping]]\nmatch = \"web.*\"\nfamily = \"api\"\ncolumn = \"hits\"\nkey = {{ endpoint = \"$1\" }}\n[[mapping]]\nmatch = \"{m}\"\n{extra}\n"
            )
        };
        let cases = [
            (
                rule(
                    "api.*.*",
                    "family = \"api\"\ncolumn = \"n\"\nkey = { endpoint = \"$3\" }",
                ),
                "mapping[1].key.endpoint",
                "refers to capture 3, but the pattern has 2",
            ),
            (
                rule(
                    "api.*.*",
                    "family = \"api\"\ncolumn = \"n\"\nkey = { endpoint = \"$1\" }",
                ),
                "mapping[1].key",
                "$2 fills no key column",
            ),
            (
                rule(
                    "api.*",
                    "family = \"nope\"\ncolumn = \"n\"\nkey = { endpoint = \"$1\" }",
                ),
                "mapping[1].family",
                "family `nope` is not defined",
            ),
            (
                rule(
                    "api.*",
                    "family = \"api\"\ncolumn = \"n\"\nkey = { endpoint = \"\" }",
                ),
                "mapping[1].key.endpoint",
                "never be filled",
            ),
            (
                rule(
                    "api.*",
                    "family = \"api\"\ncolumn = \"n\"\nkey = { region = \"$1\" }",
                ),
                "mapping[1].key.region",
                "not a key column",
            ),
            (
                rule(
                    "api.*",
                    "family = \"api\"\ncolumn = \"status\"\nkey = { endpoint = \"$1\" }",
                ),
                "mapping[1].column",
                "not a counter column",
            ),
            (
                rule(
                    "web.*",
                    "family = \"api\"\ncolumn = \"n\"\nkey = { endpoint = \"$1\" }",
                ),
                "mapping[1].match",
                "shadowed by rule 0 (`web.*`)",
            ),
            (
                rule("web.login", "family = \"api\"\ncolumn = \"n\""),
                "mapping[1].match",
                "shadowed by rule 0",
            ),
            (
                rule("api..x", "family = \"api\"\ncolumn = \"n\""),
                "mapping[1].match",
                "empty component",
            ),
        ];
        for (rules, field, expected) in cases {
            let (f, problem) = error(&rules);
            assert_eq!(f, field, "{rules}");
            assert!(problem.contains(expected), "{rules}: {problem}");
            let pattern = rules
                .lines()
                .rev()
                .find(|l| l.starts_with("match"))
                .unwrap();
            let pattern = pattern
                .trim_start_matches("match = \"")
                .trim_end_matches('"');
            assert!(
                problem.contains(&format!("rule 1 (`{pattern}`)")),
                "{problem}"
            );
        }
    }

    #[test]
    fn a_regex_duplicate_is_shadowed_but_a_narrower_regex_is_not_compared() {
        let twice = "[[mapping]]\nmatch = 'api\\.(.+)'\nmatch_type = \"regex\"\nfamily = \"api\"\ncolumn = \"n\"\nkey = { endpoint = \"$1\" }\n";
        let (field, _) = error(&format!("{twice}{twice}"));
        assert_eq!(field, "mapping[1].match");
        let same_text_as_glob =
            "[[mapping]]\nmatch = 'api\\.(.+)'\nfamily = \"api\"\ncolumn = \"n\"\n";
        // The same text read as a glob is another pattern (and an odd glob, but valid).
        assert!(
            config(&format!("{twice}{same_text_as_glob}"))
                .validate()
                .is_ok()
        );
    }

    /// A family's own time column names are reserved like the default ones.
    #[test]
    fn a_rule_may_not_name_a_time_column_as_its_counter_column() {
        let rule = |column: &str| {
            format!(
                "[family.minute_time]\nminute = {{ column = \"bucket\", type = \"timestamp\" }}\n[[mapping]]\nmatch = \"api.*\"\nfamily = \"api\"\ncolumn = \"{column}\"\nkey = {{ endpoint = \"$1\" }}\n"
            )
        };
        let (field, problem) = error(&rule("bucket"));
        assert_eq!(field, "mapping[0].column");
        assert!(problem.contains("not a counter column"), "{problem}");
        // `minute` is free once the minute column is called otherwise.
        config(&rule("minute")).validate().unwrap();
    }

    #[test]
    fn tag_rules_that_starve_a_key_column_are_refused() {
        let (field, problem) = error("[tags]\ndeny = [\"status\"]\n");
        assert_eq!(field, "family[0].key[1]");
        assert!(problem.contains("could never be filled"), "{problem}");
        let (field, _) = error("[family.tags]\nallow = [\"endpoint\"]\n");
        assert_eq!(field, "family[0].key[1]");
        let (field, _) = error("[tags]\nrename = { status = \"code\" }\n");
        assert_eq!(field, "family[0].key[1]");
        let (field, _) = error("[tags]\ndeny = [\"a*b\"]\n");
        assert_eq!(field, "tags.deny[0]");
        let (field, _) = error("[family.tags]\nrename = { \"a:b\" = \"c\" }\n");
        assert_eq!(field, "family[0].tags.rename.\"a:b\"");
        config("[tags]\nrename = { code = \"status\" }\n[family.tags]\nallow = [\"endpoint\", \"status\"]\n")
            .validate()
            .unwrap();
    }

    #[test]
    fn family_rules_add_to_the_global_ones() {
        let c = config(
            "[tags]\ndeny = [\"region\"]\nrename = { pid = \"page\" }\n[family.tags]\ndeny = [\"az\"]\nrename = { pid = \"endpoint\" }\n",
        );
        c.validate().unwrap();
        let generic = c.tag_rules(None).unwrap();
        let family = c.tag_rules(Some(0)).unwrap();
        assert_eq!(generic.apply("pid"), Some("page"));
        assert_eq!(
            family.apply("pid"),
            Some("endpoint"),
            "the family's rename wins"
        );
        assert_eq!(generic.apply("az"), Some("az"));
        assert_eq!(family.apply("az"), None);
        assert_eq!(
            family.apply("region"),
            None,
            "the global deny list applies too"
        );
        assert_eq!(
            generic.apply("dd.internal.entity_id"),
            None,
            "default deny list"
        );
        let mut off = c.clone();
        off.tags.deny_default = false;
        assert_eq!(
            off.tag_rules(None).unwrap().apply("dd.internal.entity_id"),
            Some("dd.internal.entity_id")
        );
    }
}
