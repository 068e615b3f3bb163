//! `[cardinality]` and the per-family caps (`max_contexts`, `max_tag_values` in
//! `[generic]` and each `[[family]]`): how many distinct contexts a family, and distinct
//! values a tag, may bring per window (see [`crate::aggregate::cardinality`]).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::validate::ConfigError;
use super::{Config, duration};
use crate::aggregate::cardinality::{Cardinality, FamilyCaps, TagSource};
use crate::vocabulary::FamilyId;

/// `[cardinality]`: the window of the caps, and a default cap for every family.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct CardinalityConfig {
    /// Length of the tumbling windows the caps count in, aligned on multiples of it in
    /// Unix time, following the receive time: a new window starts from zero. Whole
    /// seconds, at least `1s`. Default `"1m"` (the calendar minute, the minute bucket of
    /// lines without a client timestamp).
    #[serde(with = "duration")]
    pub window: Duration,
    /// The `max_contexts` of every family (the generic one included) that does not set
    /// its own. Default unset (no cap).
    pub max_contexts: Option<usize>,
}

impl Default for CardinalityConfig {
    fn default() -> Self {
        CardinalityConfig {
            window: Duration::from_secs(60),
            max_contexts: None,
        }
    }
}

impl Config {
    /// Checks `[cardinality]` and every family's caps.
    pub(super) fn validate_cardinality(&self) -> Result<(), ConfigError> {
        let window = self.cardinality.window;
        if window < Duration::from_secs(1) || window.subsec_nanos() != 0 {
            return Err(ConfigError::invalid(
                "cardinality.window",
                "must be a whole number of seconds, at least 1s",
            ));
        }
        check_count("cardinality.max_contexts", self.cardinality.max_contexts)?;
        check_count("generic.max_contexts", self.generic.max_contexts)?;
        check_tags("generic.max_tag_values", &self.generic.max_tag_values, None)?;
        for (i, family) in self.families.iter().enumerate() {
            check_count(&format!("family[{i}].max_contexts"), family.max_contexts)?;
            check_tags(
                &format!("family[{i}].max_tag_values"),
                &family.max_tag_values,
                Some(&family.key),
            )?;
        }
        Ok(())
    }

    /// The cardinality caps of this configuration, for the aggregator; sets are bounded
    /// by `limits.max_pending_rows` where no cap bounds them.
    pub fn cardinality_caps(&self) -> Cardinality {
        Cardinality::new(
            self.cardinality.window.as_secs(),
            self.limits.max_pending_rows,
            self.family_caps(),
        )
    }

    /// Every family's caps (the generic one's when it is enabled), by family id: what a
    /// live reload hands to [`Cardinality::replace_caps`].
    pub fn family_caps(&self) -> Vec<FamilyCaps> {
        let default = self.cardinality.max_contexts;
        let mut caps = Vec::new();
        if self.generic.enabled {
            caps.push(FamilyCaps {
                family: FamilyId(0),
                name: "generic".into(),
                source: TagSource::Generic,
                max_contexts: self.generic.max_contexts.or(default),
                max_tag_values: tag_caps(&self.generic.max_tag_values),
            });
        }
        for (i, family) in self.families.iter().enumerate() {
            let Ok(id) = u16::try_from(i + 1) else { break };
            caps.push(FamilyCaps {
                family: FamilyId(id),
                name: family.name.clone(),
                source: TagSource::Keyed(family.key.clone()),
                max_contexts: family.max_contexts.or(default),
                max_tag_values: tag_caps(&family.max_tag_values),
            });
        }
        caps
    }
}

fn tag_caps(caps: &BTreeMap<String, usize>) -> Vec<(String, usize)> {
    caps.iter().map(|(tag, cap)| (tag.clone(), *cap)).collect()
}

fn check_count(field: &str, value: Option<usize>) -> Result<(), ConfigError> {
    if value == Some(0) {
        return Err(ConfigError::invalid(
            field,
            "must be at least 1 (leave it out for no cap)",
        ));
    }
    Ok(())
}

/// Each tag named, with a cap of at least 1; a configured family's tags must be key
/// columns (its other tags are not part of its rows).
fn check_tags(
    field: &str,
    caps: &BTreeMap<String, usize>,
    key: Option<&[String]>,
) -> Result<(), ConfigError> {
    for (tag, cap) in caps {
        let at = format!("{field}.{tag}");
        if tag.is_empty() || tag.contains([',', ':', '|', '#']) {
            return Err(ConfigError::invalid(
                at,
                format!("`{tag}` is not a tag name"),
            ));
        }
        if *cap == 0 {
            return Err(ConfigError::invalid(
                at,
                "must be at least 1 (leave the tag out for no cap)",
            ));
        }
        if let Some(key) = key
            && !key.iter().any(|k| k == tag)
        {
            return Err(ConfigError::invalid(
                at,
                format!(
                    "`{tag}` is not a key column of this family (key = {key:?}); only key tags make its rows"
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FamilyConfig;

    fn error(text: &str) -> String {
        Config::from_toml(text)
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn bad_caps_are_refused_naming_the_field() {
        assert!(error("[cardinality]\nwindow = \"500ms\"\n").contains("`cardinality.window`"));
        assert!(error("[cardinality]\nmax_contexts = 0\n").contains("`cardinality.max_contexts`"));
        assert!(error("[generic]\nmax_contexts = 0\n").contains("`generic.max_contexts`"));
        assert!(
            error("[generic]\nmax_tag_values = { user_id = 0 }\n")
                .contains("`generic.max_tag_values.user_id`")
        );
        let family = "[[family]]\nname = \"views\"\nminute_table = \"v_m\"\nday_table = \"v_d\"\nkey = [\"page_id\"]\ncolumns = { \"page.views\" = \"views\" }\n";
        let e = error(&format!("{family}max_tag_values = {{ user_id = 5 }}\n"));
        assert!(
            e.contains("`family[0].max_tag_values.user_id`") && e.contains("not a key column"),
            "{e}"
        );
    }

    #[test]
    fn families_take_the_default_unless_they_set_their_own() {
        let mut config = Config::default();
        config.cardinality.max_contexts = Some(7);
        config.families.push(FamilyConfig {
            max_contexts: Some(3),
            max_tag_values: [("page_id".to_string(), 2)].into(),
            ..FamilyConfig::seed_views()
        });
        config.validate().unwrap();
        let caps = config.cardinality_caps();
        assert!(caps.is_active());
        // Both families are tracked: the report lists them, generic first.
        let report = caps.report(0);
        let names: Vec<_> = report.families.iter().map(|f| &f.family[..]).collect();
        assert_eq!(names, ["generic", "views"]);
        assert_eq!(report.families[0].max_contexts, Some(7));
        assert_eq!(report.families[1].max_contexts, Some(3));
        assert!(!Config::default().cardinality_caps().is_active());
    }
}
